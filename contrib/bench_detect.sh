#!/bin/bash
#
# Detection benchmark (not a test): for each fault kind, N injections of a
# real fault on rail r1 (the am lane is on r0) with default kernel settings,
# while the checker streams every API with UCX_MULTIRAIL_FAILOVER=y. One bed
# per kind; each injection on a fresh connection (and listener port), the
# fault restored after it. Reports p50/p99/max of the time from the fault
# command to the lane failover on the side that detects it and on its peer
# (their info lines), and the runs that were not clean.
#
# Usage: contrib/bench_detect.sh [N] [KIND[:SIDE][:idle] ...]
#        default: 100 down:a drop-both:b blackhole:both:idle
#        contrib/bench_detect.sh eps [N] [KIND[:SIDE] ...]  N more idle
#        endpoints (default 1024; down:a blackhole:both): every endpoint must
#        fail r1 over; first/last failover and r1's idle traffic
#        contrib/bench_detect.sh false-positive [SECS]   (default 600)
#        saturated rails and a CPU hog per core for SECS: no lane may fail
#        over while traffic runs
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

# the test scripts' functions, results in build/bench-NAME
bench_with_tests() {
    export MRFO_PREFIX MRFO_SRC
    export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-$1
    rm -rf "$MRFO_RESULTS"
    mkdir -p "$MRFO_RESULTS"
    . "$top/test/multirail/lib.sh"
    . "$top/test/multirail/tests_failover.sh"
    . "$top/test/multirail/tests_detect.sh"
    trap '"$MR_BED" down >/dev/null 2>&1 || true' EXIT
}

if [ "${1:-}" = eps ]; then
    # contrib/bench_detect.sh eps [N] [KIND[:SIDE]...]: N+1 endpoints
    bench_with_tests eps
    n=${2:-1024}
    shift 2 || shift $#
    specs=("$@")
    [ ${#specs[@]} -gt 0 ] || specs=(down:a blackhole:both)
    for spec in "${specs[@]}"; do
        IFS=: read -r kind side <<<"$spec"
        mr_run_test "eps${n}_${kind}" t_detect_many_eps "$n" "$kind" \
            "${side:-a}"
    done
    "$MR_BED" down
    echo "$mr_passed passed, $mr_failed failed"
    [ "$mr_failed" = 0 ]
    exit
fi

if [ "${1:-}" = false-positive ]; then
    bench_with_tests false-positive
    secs=${2:-600}
    MR_TIMEOUT=$((secs + 60))
    mr_run_test false_positive_${secs}s t_detect_no_false_positive "$secs"
    "$MR_BED" down
    echo "$mr_passed passed, $mr_failed failed"
    [ "$mr_failed" = 0 ]
    exit
fi

n=${1:-100}
shift || true
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(down:a drop-both:b blackhole:both:idle)
export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-detect
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
trap '"$MR_BED" down >/dev/null 2>&1 || true' EXIT
[ -x "$MR_CHECK" ] || die "build first: contrib/build.sh"

env_fo="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=info"
first_failover() {
    grep -m1 "tcp/r1 failed (" "$1" | sed -n 's/^\[\([0-9.]*\)\].*/\1/p'
}
pct() { sort -g | awk -v q="$1" '{a[NR] = $1} END {
    if (NR == 0) { print "nan"; exit }
    i = int(q * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR
    printf "%.1f", a[i] * 1000 }'; }

table="| fault on r1 | load | runs clean | detecting side p50 / p99 / max (ms) | peer p50 / p99 / max (ms) |
|---|---|---|---|---|"
status=0
for spec in "${kinds[@]}"; do
    IFS=: read -r kind side load <<<"$spec"
    side=${side:-a}
    load=${load:-busy}
    sizes=()
    # with failover on, eager data rides the am lane: r1 carries only
    # rendezvous data, so small messages leave it idle
    [ "$load" = idle ] && sizes=(--sizes 8,64,512,4k)
    times=$MRFO_RESULTS/$kind-$side-$load.times
    : >"$times"
    bad=0
    "$MR_BED" up --rails 2 --rate 500mbit
    for ((i = 1; i <= n; i++)); do
        MR_DIR=$MRFO_RESULTS/$kind-$side-$load-run$i
        MR_PORT=$((14000 + i))
        mkdir -p "$MR_DIR"
        # shellcheck disable=SC2086
        if ! mr_server_start "$MR_DIR" 2 $env_fo -- --hang-timeout 20 \
                "${sizes[@]}"; then
            bad=$((bad + 1))
            continue
        fi
        # shellcheck disable=SC2086
        mr_client_start "$MR_DIR" 2 $env_fo -- --duration 2.5 \
            --hang-timeout 20 "${sizes[@]}"
        sleep "1.$((RANDOM % 10))"
        t=$(mr_now)
        "$MR_BED" fault "$kind" 1 "$side"
        mr_pair_wait "$MR_DIR"
        "$MR_BED" restore "$kind" 1 "$side"
        sleep 0.3
        c=$(first_failover "$MR_DIR/client.out")
        s=$(first_failover "$MR_DIR/server.out")
        if [ "$mr_rc_client$mr_rc_server" != 00 ] || [ -z "$c" ] ||
           [ -z "$s" ]; then
            bad=$((bad + 1))
            echo "$spec run $i: not clean (rc $mr_rc_client/$mr_rc_server)" >&2
            continue
        fi
        awk -v t="$t" -v c="$c" -v s="$s" 'BEGIN {
            d = (c < s) ? c : s; p = (c < s) ? s : c
            printf "%.6f %.6f\n", d - t, p - t }' >>"$times"
        rm -rf "$MR_DIR"
    done
    ok=$(wc -l <"$times")
    row="| $kind ($side) | $load | $ok/$n |"
    for col in 1 2; do
        row+=" $(cut -d' ' -f$col "$times" | pct 0.5) /"
        row+=" $(cut -d' ' -f$col "$times" | pct 0.99) /"
        row+=" $(cut -d' ' -f$col "$times" | pct 1.0) |"
    done
    table+=$'\n'"$row"
    [ "$bad" = 0 ] || status=1
done
"$MR_BED" down

echo "detection with default kernel settings, $(uname -r), defaults" \
     "PROBE_INTERVAL=100ms PROBE_TIMEOUT=300ms (TCP_USER_TIMEOUT=100ms);" \
     "times include the fault command (~20 ms)"
echo "$table"
exit $status
