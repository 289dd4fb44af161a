#!/bin/bash
#
# Degraded-mode benchmark (issue 3; not a test): the bandwidth the surviving
# rail carries after the other one fails, as a share of a one-rail baseline
# measured in the same run. Client/server endpoints, failover on, the checker
# streaming every API for 9 s over 500 Mbit/s rails.
#   baseline: N runs on a one-rail bed; r0's device tx rate from 1 s after
#             the start to the last timeline interval.
#   degraded: N runs per fault kind on a two-rail bed, the fault on r1 (the
#             rail without the am lane) 2.5 s in; r0's rate from 1 s after
#             the client's failover line to the last interval, and the time
#             from that line to the first 0.5 s interval in which r0 carries
#             >= 90 % of the baseline rate.
# Every run must also be clean (no loss, duplicate, reorder, corruption,
# hang or error callback).
#
# Usage: contrib/bench_degraded.sh [N]   (default 3; kinds: rst down blackhole)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

[ "$(id -u)" = 0 ] || die "the test bed needs root (network namespaces)"
n=${1:-3}
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 50 ] || die "N must be 1..50"

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-degraded
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_failover.sh"
trap '"$MR_BED" down >/dev/null 2>&1 || true' EXIT
unset $(env | sed -n 's/^\(UCX_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null || true
[ -x "$MR_CHECK" ] || die "build first: contrib/build.sh"

env_fo="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=info"
rates=$MRFO_RESULTS/rates
: >"$rates"

# Wall time of the last timeline interval in FILE
last_tl_wall() {
    grep '^TL ' "$1" | tail -1 | tr ' ' '\n' | sed -n 's/^wall=//p'
}

# r0's rate (bytes/s) in FILE between wall times FROM and TO
rate_between() {
    local bytes
    bytes=$(mr_rail_tx_between "$1" r0 "$2" "$3")
    awk -v b="$bytes" -v f="$2" -v t="$3" 'BEGIN { printf "%.0f", b / (t - f) }'
}

# Seconds from wall time FROM to the end of the first interval after it in
# which r0 carries at least BYTES_PER_S (0.5 s intervals)
time_to_rate() {
    grep '^TL ' "$1" | awk -v f="$2" -v want="$3" '
        { w = 0; v = 0
          for (i = 2; i <= NF; i++) {
              split($i, kv, "=")
              if (kv[1] == "wall") w = kv[2]
              if (kv[1] == "r0_tx") v = kv[2]
          }
          if (w > f && v / 0.5 >= want) { printf "%.2f", w - f; found = 1; exit } }
        END { if (!found) print "never" }'
}

b_baseline() {
    local MR_NET_MGMT=1 start end
    "$MR_BED" up --rails 1 --rate 500mbit
    mr_pair_start 1 9 "$env_fo" "$env_fo" --conn sockaddr --err-mode peer ||
        return 0
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    start=$(grep -m1 '^TL ' "$MR_DIR/client.out" | tr ' ' '\n' |
            sed -n 's/^wall=//p')
    end=$(last_tl_wall "$MR_DIR/client.out")
    start=$(awk -v s="$start" 'BEGIN { printf "%.3f", s + 1.0 }')
    echo "baseline $(rate_between "$MR_DIR/client.out" "$start" "$end")" \
        >>"$rates"
}

b_degraded() {
    local kind=$1 MR_NET_MGMT=1 w from end rate
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_pair_start 2 9 "$env_fo" "$env_fo" --conn sockaddr --err-mode peer ||
        return 0
    sleep 2.5
    "$MR_BED" fault "$kind" 1 a
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    w=$(mr_failover_wall "$MR_DIR/client.out" r1)
    [ -n "$w" ] || { mr_fail "the client did not fail r1 over"; return 0; }
    end=$(last_tl_wall "$MR_DIR/client.out")
    from=$(awk -v s="$w" 'BEGIN { printf "%.3f", s + 1.0 }')
    rate=$(rate_between "$MR_DIR/client.out" "$from" "$end")
    echo "$kind $rate $w $MR_DIR/client.out" >>"$rates"
}

for ((i = 1; i <= n; i++)); do
    mr_run_test "baseline_$i" b_baseline
done
base=$(awk '$1 == "baseline" { s += $2; c++ } END { if (c) printf "%.0f", s / c }' "$rates")
[ -n "$base" ] || die "no baseline run"

kinds="rst down blackhole"
for kind in $kinds; do
    for ((i = 1; i <= n; i++)); do
        mr_run_test "degraded_${kind}_$i" b_degraded "$kind"
    done
done
"$MR_BED" down

echo
echo "one-rail baseline: r0 $(awk -v b="$base" 'BEGIN { printf "%.1f", b / 1e6 }') MB/s (mean of $n runs)"
echo
echo "| fault on r1 | runs | r0 after failover + 1 s (MB/s, mean) | share of baseline (min..max) | failover to >= 90 % of baseline (s, max) |"
echo "|---|---|---|---|---|"
for kind in $kinds; do
    awk -v k="$kind" -v b="$base" '$1 == k { print $2, $3, $4 }' "$rates" | {
        cnt=0; sum=0; lo=9; hi=0; tmax=0
        while read -r rate w file; do
            t=$(time_to_rate "$file" "$w" "$(awk -v b="$base" 'BEGIN { print 0.9 * b }')")
            share=$(awk -v r="$rate" -v b="$base" 'BEGIN { printf "%.3f", r / b }')
            cnt=$((cnt + 1))
            sum=$(awk -v s="$sum" -v r="$rate" 'BEGIN { print s + r }')
            lo=$(awk -v a="$lo" -v b="$share" 'BEGIN { print (b < a) ? b : a }')
            hi=$(awk -v a="$hi" -v b="$share" 'BEGIN { print (b > a) ? b : a }')
            if [ "$t" = never ]; then
                tmax=never
            elif [ "$tmax" != never ]; then
                tmax=$(awk -v a="$tmax" -v b="$t" 'BEGIN { print (b > a) ? b : a }')
            fi
        done
        [ "$cnt" -gt 0 ] || { echo "| $kind | 0 | - | - | - |"; exit 0; }
        echo "| $kind | $cnt | $(awk -v s="$sum" -v c="$cnt" 'BEGIN { printf "%.1f", s / c / 1e6 }') | $lo..$hi | $tmax |"
    }
done
echo
echo "$mr_passed passed, $mr_failed failed"
[ "$mr_failed" = 0 ]
