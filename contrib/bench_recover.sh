#!/bin/bash
#
# Recovery benchmark (not a test): N times, rail r1 (the am lane is on r0)
# is set down for 1.5 s and up again while the checker streams every API with
# UCX_MULTIRAIL_FAILOVER=y over client/server endpoints (rendezvous data
# stripes over both rails). Each run on a fresh connection. Reports p50/p99/
# max of the time from the link-up command to
#   - the lane's "is back" line on each side,
#   - the first 50 ms timeline interval in which r1 carries >= 1 MB again,
#   - the aggregate (r0 + r1) throughput, averaged over 0.5 s, reaching 95 %
#     of its level in the second before the fault,
# and the aggregate over the last second of each run (after the recovery) as
# a share of the level before the fault. The first run's timeline is drawn
# (gnuplot) into docs/recovery-timeline.png.
#
# Usage: contrib/bench_recover.sh [N]               (default 50)
#        contrib/bench_recover.sh flap [SECS]       r1 flaps at 1 Hz for
#        SECS (default 600) under load: no leak, every lane back after
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-recover
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_failover.sh"
. "$top/test/multirail/tests_recover.sh"
trap '"$MR_BED" down >/dev/null 2>&1 || true' EXIT
[ -x "$MR_CHECK" ] || die "build first: contrib/build.sh"

if [ "${1:-}" = flap ]; then
    secs=${2:-600}
    MR_TIMEOUT=$((secs + secs / 8 + 90))
    mr_run_test flap_r1_1hz_${secs}s t_recover_flap "$secs"
    "$MR_BED" down
    echo "$mr_passed passed, $mr_failed failed"
    [ "$mr_failed" = 0 ]
    exit
fi

command -v gnuplot >/dev/null || die "gnuplot not found (apt-get install gnuplot-nox)"

n=${1:-50}
env_fo="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=info"
times=$MRFO_RESULTS/times
: >"$times"
bad=0
pct() { sort -g | awk -v q="$1" -v s="${2:-1000}" '{a[NR] = $1} END {
    if (NR == 0) { print "nan"; exit }
    i = int(q * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR
    printf "%.1f", a[i] * s }'; }

# timeline of a run: "t_rel r0_MBps r1_MBps" per interval
timeline() {
    grep '^TL ' "$1" | awk -v t0="$2" '{
        for (i = 2; i <= NF; i++) { split($i, kv, "=")
            if (kv[1] == "wall") w = kv[2]; if (kv[1] == "t") d = kv[2]
            if (kv[1] == "r0_tx") a = kv[2]; if (kv[1] == "r1_tx") b = kv[2] }
        if (b > 1e15) b = 0
        if (d - pd > 0) printf "%.3f %.2f %.2f\n", w - t0, a / (d - pd) / 1e6,
                               b / (d - pd) / 1e6
        pd = d }'
}

"$MR_BED" up --rails 2 --rate 500mbit
for ((i = 1; i <= n; i++)); do
    MR_DIR=$MRFO_RESULTS/run$i
    MR_PORT=$((15000 + i))
    mkdir -p "$MR_DIR"
    # shellcheck disable=SC2086
    if ! mr_server_start "$MR_DIR" 2 $env_fo -- --hang-timeout 20 \
            --interval 0.05; then
        bad=$((bad + 1))
        continue
    fi
    # shellcheck disable=SC2086
    mr_client_start "$MR_DIR" 2 $env_fo -- --duration 7 --hang-timeout 20 \
        --interval 0.05
    sleep 2.$((RANDOM % 10))
    t_fault=$(mr_now)
    "$MR_BED" fault down 1 a
    sleep 1.5
    t_up=$(mr_now)
    "$MR_BED" restore down 1 a
    mr_pair_wait "$MR_DIR"
    mr_test_ok=1
    mr_expect_clean "$MR_DIR" 2>"$MR_DIR/violations"
    c=$(mr_back_wall "$MR_DIR/client.out" r1 "$t_up")
    s=$(mr_back_wall "$MR_DIR/server.out" r1 "$t_up")
    if [ "$mr_test_ok" != 1 ] || [ -z "$c" ] || [ -z "$s" ]; then
        bad=$((bad + 1))
        echo "run $i: not clean or r1 not back ($(tr '\n' ' ' \
            <"$MR_DIR/violations"))" >&2
        continue
    fi
    timeline "$MR_DIR/client.out" "$t_fault" >"$MR_DIR/timeline"
    t_rel_up=$(mr_elapsed "$t_fault" "$t_up")
    # first interval after link-up with >= 1 MB on r1 (20 MB/s over 50 ms);
    # aggregate (0.5 s moving average) back to 95 % of the second before
    # the fault; aggregate in the last second as a share of that level
    awk -v up="$t_rel_up" -v c="$c" -v s="$s" -v tu="$t_up" '
        { t[NR] = $1; a[NR] = $2 + $3; r1[NR] = $3 }
        END {
            for (i = 1; i <= NR; i++) if (t[i] < 0 && t[i] >= -1) { p += a[i]; np++ }
            pre = np ? p / np : 0
            for (i = 1; i <= NR; i++)
                if (t[i] > up && r1[i] >= 20 && first == "") first = t[i] - up
            for (i = 10; i <= NR; i++) {
                if (t[i] <= up) continue
                m = 0; for (j = i - 9; j <= i; j++) m += a[j]; m /= 10
                if (m >= 0.95 * pre) { bw = t[i] - up; break }
            }
            for (i = NR - 20; i < NR; i++) { l += a[i]; nl++ }
            printf "%.6f %.6f %s %s %.3f %.1f\n", c - tu, s - tu,
                   (first == "" ? "nan" : first), (bw == "" ? "nan" : bw),
                   nl ? l / nl / pre : 0, pre }' "$MR_DIR/timeline" >>"$times"
    if [ "$i" = 1 ]; then
        cp "$MR_DIR/timeline" "$MRFO_RESULTS/timeline-run1"
        echo "$t_rel_up" >"$MRFO_RESULTS/timeline-run1.up"
    fi
done
"$MR_BED" down

ok=$(wc -l <"$times")
col() { cut -d' ' -f"$1" "$times" | grep -v nan; }
echo "recovery after 1.5 s of r1 link down, $(uname -r), defaults" \
     "(REPROBE_INTERVAL=200ms, link-up event re-probes at once);" \
     "times from the link-up command (~20 ms)"
echo "| measure | p50 | p99 | max |"
echo "|---|---|---|---|"
for spec in "1:lane back, client (ms)" "2:lane back, server (ms)" \
            "3:first 50 ms with traffic on r1 (ms)" \
            "4:aggregate >= 95 % of pre-fault, 0.5 s average (ms)"; do
    k=${spec%%:*}
    echo "| ${spec#*:} | $(col "$k" | pct 0.5) | $(col "$k" | pct 0.99) |" \
         "$(col "$k" | pct 1.0) |"
done
echo "| aggregate in the last second / pre-fault (%) |" \
     "$(col 5 | pct 0.5 100) | min $(col 5 | sort -g | head -1) | |"
echo "runs clean with r1 back: $ok/$n; pre-fault aggregate p50" \
     "$(col 6 | pct 0.5 1) MB/s"

if [ -s "$MRFO_RESULTS/timeline-run1" ]; then
    up=$(cat "$MRFO_RESULTS/timeline-run1.up")
    gnuplot <<EOF
set terminal pngcairo size 900,420 font "sans,10"
set output "$top/docs/recovery-timeline.png"
set title "r1 link down at 0 s, up at ${up} s (client/server endpoints, all APIs, 2 x 500 Mbit/s)"
set xlabel "time since the fault (s)"
set ylabel "device tx (MB/s, 50 ms intervals)"
set key top right
set grid
set yrange [0:*]
set arrow from 0, graph 0 to 0, graph 1 nohead dt 2 lc rgb "red"
set arrow from ${up}, graph 0 to ${up}, graph 1 nohead dt 2 lc rgb "dark-green"
plot "$MRFO_RESULTS/timeline-run1" using 1:(\$2+\$3) with lines lw 2 title "aggregate", \
     "" using 1:2 with lines title "r0 (am lane)", \
     "" using 1:3 with lines title "r1"
EOF
    echo "timeline picture: docs/recovery-timeline.png"
fi
[ "$bad" = 0 ]
