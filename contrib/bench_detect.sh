#!/bin/bash
#
# Detection benchmark (not a test): for each fault kind, N injections of a
# real fault on rail r1 (the am lane is on r0) with default kernel settings,
# while the checker streams every API with UCX_MULTIRAIL_FAILOVER=y. One bed
# per kind; each injection on a fresh connection (and listener port), the
# fault restored after it. Reports p50/p99/max of the time from the fault
# command to the lane failover on the side that detects it and on its peer
# (their info lines), and, on a busy lane, from the fault to the first
# completion after that failover of an operation that was in flight at the
# fault (its share on r1 was re-driven on the survivor) and to the last of
# them (all work in flight at the fault done); and the runs that were not
# clean.
#
# Usage: contrib/bench_detect.sh [N] [KIND[:SIDE][:idle] ...]
#        default: 100 down:a drop-both:b blackhole:both:idle
#        contrib/bench_detect.sh eps [N] [CYCLES] [KIND[:SIDE] ...]
#        N more idle endpoints (default 1024) between one pair of processes
#        and CYCLES fault/restore cycles of r1 per kind (default 100;
#        down:a blackhole:both): in every cycle every endpoint must fail r1
#        over; p50/p99 of the first and last endpoint's failover and of the
#        busy endpoint's first completion and in-flight work done
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

env_fo="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=info"
first_failover() {
    grep -m1 "tcp/r1 failed (" "$1" | sed -n 's/^\[\([0-9.]*\)\].*/\1/p'
}
# eps_cycles N CYCLES KIND SIDE: one pair of processes with N more idle
# worker-address endpoints, CYCLES faults of r1 each followed by its restore
# and the recovery of every endpoint's lane
eps_cycles() {
    local n=$1 cycles=$2 kind=$3 side=$4 MR_NET_MGMT=0 settle c i k t f
    local role cnt0 cnt1 want times line bad=0 first last row
    # err mode none (Open MPI's): with PEER, UCX 1.13 puts no bandwidth
    # role on r1 for a worker-address endpoint (a wireup-only lane), and the
    # busy endpoint would not stripe over it
    local args=(--conn address --err-mode none --extra-eps "$n"
                --sizes 8,64,512,1m --hang-timeout 60 --connect-timeout 60)
    # the restored rail must be back on every endpoint, and out of the
    # damping window (REPROBE_MAX_INTERVAL, 3 s) before the next fault
    case $kind in down | delete) settle=4 ;; *) settle=8 ;; esac
    MR_DIR=$MRFO_RESULTS/eps$n-$kind-$side
    MR_PORT=$((15000 + RANDOM % 1000))
    mkdir -p "$MR_DIR"
    times=$MRFO_RESULTS/eps$n-$kind-$side.times
    : >"$times"
    "$MR_BED" up --rails 2 --rate 500mbit
    local duration=$((cycles * (settle + 6) + 60))
    # the processes' own time bound (lib.sh's default is 120 s)
    local MR_TIMEOUT=$((duration + 180))
    # shellcheck disable=SC2086
    mr_server_start "$MR_DIR" 2 $env_fo -- "${args[@]}" ||
        { echo "eps $kind: server did not start" >&2; return 1; }
    # shellcheck disable=SC2086
    mr_client_start "$MR_DIR" 2 $env_fo -- "${args[@]}" --slow-log 10 \
        --duration "$duration"
    for ((i = 0; i < 600; i++)); do
        grep -q "^EXTRA_EPS" "$MR_DIR/client.out" 2>/dev/null && break
        sleep 0.1
    done
    sleep 4
    want=$((n + 1))
    for ((c = 1; c <= cycles; c++)); do
        cnt0=$(grep -c "tcp/r1 failed (" "$MR_DIR/client.out" || true)
        cnt1=$(grep -c "tcp/r1 failed (" "$MR_DIR/server.out" || true)
        rm -f "$MR_DIR/fault.stamp"
        MRBED_FAULT_STAMP=$MR_DIR/fault.stamp "$MR_BED" fault "$kind" 1 "$side"
        t=$(cat "$MR_DIR/fault.stamp")
        for ((k = 0; k < 100; k++)); do
            [ "$(grep -c "tcp/r1 failed (" "$MR_DIR/client.out")" -ge \
              $((cnt0 + want)) ] &&
            [ "$(grep -c "tcp/r1 failed (" "$MR_DIR/server.out")" -ge \
              $((cnt1 + want)) ] && break
            sleep 0.1
        done
        "$MR_BED" restore "$kind" 1 "$side"
        line=""
        for role in client server; do
            f=$MR_DIR/$role.out
            [ $role = client ] && k=$cnt0 || k=$cnt1
            grep "tcp/r1 failed (" "$f" | tail -n +$((k + 1)) |
                sed -n 's/^\[\([0-9.]*\)\].*/\1/p' | sort -g >"$MR_DIR/cycle"
            if [ "$(wc -l <"$MR_DIR/cycle")" != "$want" ]; then
                echo "eps $kind cycle $c: $role failed r1 over on" \
                     "$(wc -l <"$MR_DIR/cycle") of $want endpoints" >&2
                bad=$((bad + 1))
                line=""
                break
            fi
            first=$(head -1 "$MR_DIR/cycle")
            last=$(tail -1 "$MR_DIR/cycle")
            line+="$(awk -v t="$t" -v a="$first" -v b="$last" \
                     'BEGIN { printf "%.6f %.6f", a - t, b - t }') "
            if [ $role = client ]; then d=$first; else
                d=$(awk -v a="$d" -v b="$first" 'BEGIN { print (a < b) ? a : b }')
            fi
        done
        sleep "$settle"
        # ops in flight at the fault have completed by now
        [ -n "$line" ] &&
            echo "$line$(completions "$MR_DIR/client.out" "$t" "$d")" \
                >>"$times"
    done
    kill -USR1 "$(sed -n 's/^START .*pid=\([0-9]*\).*/\1/p' \
                  "$MR_DIR/client.out")" 2>/dev/null || true
    mr_pair_wait "$MR_DIR"
    if [ "$mr_rc_client$mr_rc_server" != 00 ]; then
        echo "eps $kind: not clean (rc $mr_rc_client/$mr_rc_server)" >&2
        bad=$((bad + 1))
    fi
    row="| $kind ($side) | $(wc -l <"$times")/$cycles |"
    for k in 1 2 3 4 5 6; do
        row+=" $(pcts $k "$times") |"
    done
    eps_table+=$'\n'"$row"
    [ "$bad" = 0 ]
}

if [ "${1:-}" = eps ]; then
    # contrib/bench_detect.sh eps [N] [CYCLES] [KIND[:SIDE]...]
    bench_with_tests eps
    n=${2:-1024}
    cycles=${3:-100}
    shift 3 || shift $#
    specs=("$@")
    [ ${#specs[@]} -gt 0 ] || specs=(down:a blackhole:both)
    eps_table="| fault on r1 | cycles clean | client first ep p50 / p99 / max (ms) | client last ep | server first ep | server last ep | busy ep: first completion after failover | busy ep: in-flight work done |
|---|---|---|---|---|---|---|---|"
    status=0
    ulimit -n 20000 2>/dev/null || true
    for spec in "${specs[@]}"; do
        IFS=: read -r kind side <<<"$spec"
        eps_cycles "$n" "$cycles" "$kind" "${side:-a}" || status=1
    done
    "$MR_BED" down
    echo "$((n + 1)) worker-address endpoints per side (err mode none), one" \
         "busy (8 B-1 MiB), $n idle; times from the start of the fault's kernel command;" \
         "$(uname -r), defaults"
    echo "$eps_table"
    exit $status
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

table="| fault on r1 | load | runs clean | detecting side p50 / p99 / max (ms) | peer p50 / p99 / max (ms) | first completion after failover | in-flight work done |
|---|---|---|---|---|---|---|"
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
            --hang-timeout 20 --slow-log 10 "${sizes[@]}"
        sleep "1.$((RANDOM % 10))"
        # the fault's time: when bed.sh starts the command that makes it
        # (its own start-up takes ~0.1 s on two loaded cores)
        rm -f "$MR_DIR/fault.stamp"
        MRBED_FAULT_STAMP=$MR_DIR/fault.stamp "$MR_BED" fault "$kind" 1 "$side"
        t=$(cat "$MR_DIR/fault.stamp")
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
        d=$(awk -v c="$c" -v s="$s" 'BEGIN { print (c < s) ? c : s }')
        echo "$(awk -v t="$t" -v c="$c" -v s="$s" 'BEGIN {
            d = (c < s) ? c : s; p = (c < s) ? s : c
            printf "%.6f %.6f", d - t, p - t }')" \
            "$(completions "$MR_DIR/client.out" "$t" "$d")" >>"$times"
        rm -rf "$MR_DIR"
    done
    ok=$(wc -l <"$times")
    row="| $kind ($side) | $load | $ok/$n |"
    for col in 1 2 3 4; do
        row+=" $(pcts $col "$times") |"
    done
    table+=$'\n'"$row"
    [ "$bad" = 0 ] || status=1
done
"$MR_BED" down

echo "detection with default kernel settings, $(uname -r), defaults" \
     "PROBE_INTERVAL=100ms PROBE_TIMEOUT=300ms (TCP_USER_TIMEOUT=100ms);" \
     "times run from the start of the command that makes the fault (ip/nft/ss)"
echo "$table"
exit $status
