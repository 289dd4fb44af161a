#!/bin/bash
#
# Failover benchmark (not a test): N injections of a real fault on rail r1
# (the am lane is on r0) while the checker streams every API with
# UCX_MULTIRAIL_FAILOVER=y; each injection on a fresh two-rail bed and
# connection. Reports p50/p99 of the time from the fault command to the
# failover on the detecting side and on the peer (their info lines), and
# counts runs that were not clean.
#
# Usage: contrib/bench_failover.sh [N] [KIND]   (default 100 rst; KIND as
#        test/multirail/bed.sh fault takes; silent kinds need tcp_retries2,
#        set here to 3)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

n=${1:-100}
kind=${2:-rst}
export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-failover
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
trap '"$MR_BED" down >/dev/null 2>&1 || true' EXIT
[ -x "$MR_CHECK" ] || die "build first: contrib/build.sh"

env_fo="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=info"
first_failover() {
    grep -m1 "tcp/r1 failed (" "$1" | sed -n 's/^\[\([0-9.]*\)\].*/\1/p'
}

: >"$MRFO_RESULTS/times"
bad=0
for ((i = 1; i <= n; i++)); do
    MR_DIR=$MRFO_RESULTS/run$i
    mkdir -p "$MR_DIR"
    "$MR_BED" up --rails 2 --rate 500mbit
    "$MR_BED" sysctl net.ipv4.tcp_retries2=3
    # shellcheck disable=SC2086
    mr_server_start "$MR_DIR" 2 $env_fo -- --hang-timeout 20 || { bad=$((bad + 1)); continue; }
    # shellcheck disable=SC2086
    mr_client_start "$MR_DIR" 2 $env_fo -- --duration 3 --hang-timeout 20
    sleep "1.$((RANDOM % 10))"
    t=$(mr_now)
    "$MR_BED" fault "$kind" 1 a
    mr_pair_wait "$MR_DIR"
    c=$(first_failover "$MR_DIR/client.out")
    s=$(first_failover "$MR_DIR/server.out")
    if [ "$mr_rc_client$mr_rc_server" != 00 ] || [ -z "$c" ] || [ -z "$s" ]; then
        bad=$((bad + 1))
        echo "run $i: not clean (rc $mr_rc_client/$mr_rc_server)" >&2
        continue
    fi
    # detecting side = the earlier of the two
    awk -v t="$t" -v c="$c" -v s="$s" 'BEGIN {
        d = (c < s) ? c : s; p = (c < s) ? s : c
        printf "%.6f %.6f\n", d - t, p - t }' >>"$MRFO_RESULTS/times"
    rm -rf "$MR_DIR"
done

pct() { sort -g | awk -v q="$1" '{a[NR] = $1} END {
    if (NR == 0) { print "nan"; exit }
    i = int(q * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR
    printf "%.1f", a[i] * 1000 }'; }
ok=$(wc -l <"$MRFO_RESULTS/times")
echo "fault $kind on r1, $ok clean run(s) of $n ($bad not clean):"
echo "| | p50 (ms) | p99 (ms) | max (ms) |"
echo "|---|---|---|---|"
for col in 1 2; do
    name=$([ $col = 1 ] && echo "fault -> failover, detecting side" ||
           echo "fault -> failover, peer (LANE_DOWN or own detection)")
    echo "| $name | $(cut -d' ' -f$col "$MRFO_RESULTS/times" | pct 0.5) |" \
         "$(cut -d' ' -f$col "$MRFO_RESULTS/times" | pct 0.99) |" \
         "$(cut -d' ' -f$col "$MRFO_RESULTS/times" | pct 1.0) |"
done
[ "$bad" = 0 ]
