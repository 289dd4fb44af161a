#!/bin/bash
#
# The healthy path and the degraded share on RDMA rails, as a benchmark (not
# a test; issue 21): Debian's own ucx_perftest in the soft-RoCE guests
# (test/roce/vm.sh: two TCG guests, rc_verbs on rxe0 and rxe1), the server
# in b, the client in a, worker-address endpoints (perftest's own exchange)
# in err mode peer (-e), wireup over TCP on eth0 (as the bed's
# worker-address tests: UCX_TLS=rc_verbs,tcp; over ud_verbs in err mode
# none, our library's perftest waited in its first worker flush forever on
# this bed, and Debian's stalled in the middle of a run).
#
#   healthy: tag_bw 1 MiB, tag_bw 8 B (message rate) and tag_lat 8 B over
#            both rails, for Debian's libucx0, ours with failover off and
#            ours with failover on, interleaved in each of R rounds
#   degraded: tag_bw 1 MiB streaming for DUR iterations, ours with failover
#            on; rail 1's wire unplugged in guest a (QEMU set_link) CUT
#            seconds in, the lane fails over and rail 0 carries everything;
#            against the same stream over rail 0 alone (UCX_NET_DEVICES
#            without rxe1), in the same run. The rate is messages over
#            time of ucx_perftest's report intervals (rate_between): from
#            3 s after the cut to the end, and of the one-rail run all but
#            the first report; per round, then the median of the rounds
#
# The guests are CPU-bound under TCG: absolute MB/s mean little, ratios
# within one run are the figures; an 8 B half round trip (~22 ms) is the
# host scheduler's time slice between the two busy-polling guests. A guest
# NIC whose transmit queue stalls ("NETDEV WATCHDOG" in build/roce/run/
# *.console) spoils the runs after it: check the consoles.
#
# Usage: contrib/bench_roce_healthy.sh [ROUNDS]     (default 3; 0: the
#        degraded part only)
#        MR_RHB_DEGRADED_ROUNDS=N  degraded rounds (default 2)
#        MR_RHB_VARIANTS="stock off on copy ref"  the healthy part's
#                  variants (default "stock off on"; on: failover on with
#                  its defaults, zero-copy messages sent by reference over
#                  RC since session 35; copy: failover on, every message
#                  copied, UCX_MULTIRAIL_REF_THRESH=inf; ref: failover on,
#                  zero-copy messages of 4 KiB and more sent by reference,
#                  UCX_MULTIRAIL_REF_THRESH=4k UCX_ZCOPY_THRESH=4k)
#        MR_RHB_TESTS='LABEL|FIELD|PERFTEST ARGS' lines: the healthy part's
#                  measurements instead of the default three
#        MR_RHB_ENV="UCX_...=..."  more environment for every variant
#                  (e.g. UCX_RNDV_THRESH=256k: 64 KiB messages eager)
# Results: build/bench-roce-healthy/ (raw.txt, table.md, perftest logs)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

rounds=${1:-3}
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -le 20 ] ||
    die "ROUNDS must be 0..20 (0: the degraded part only)"
perftest=/usr/bin/ucx_perftest
[ -x "$perftest" ] || die "Debian's ucx_perftest is missing (ucx-utils)"
[ -e "$MRFO_PREFIX/lib/libucp.so.0" ] || die "build first: contrib/build.sh"

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-roce-healthy
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_roce.sh"
trap 'mr_roce_down' EXIT

out=$MRFO_RESULTS
raw=$out/raw.txt
: >"$raw"
port=13500
errarg=(-e)

variant_env() {
    case "$1" in
        stock) echo "UCX_MULTIRAIL_UNUSED=1" ;;
        off)   echo "LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=n" ;;
        on)    echo "LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=y" \
                    "UCX_MULTIRAIL_PROBE_TIMEOUT=$MR_ROCE_PROBE_TIMEOUT" ;;
        copy)  echo "$(variant_env on) UCX_MULTIRAIL_REF_THRESH=inf" ;;
        ref)   echo "$(variant_env on) UCX_MULTIRAIL_REF_THRESH=4k" \
                    "UCX_ZCOPY_THRESH=4k" ;;
    esac
}

variants=${MR_RHB_VARIANTS:-stock off on}
for v in $variants; do
    case "$v" in
        stock|off|on|copy|ref) ;;
        *) die "MR_RHB_VARIANTS: unknown variant '$v' (stock off on copy ref)" ;;
    esac
done

# run_pt NAME VARIANT DEVS TEST SIZE ITERS: one perftest pair; the client's
# output in NAME.client.log; 1 if it did not finish
run_pt() {
    local name=$1 v=$2 devs=$3 t=$4 s=$5 n=$6 env bm rc=0
    port=$((port + 1))
    bm=$("$MR_VM" addr b m)
    env="UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$devs,eth0"
    env+=" UCX_MAX_EAGER_RAILS=2 UCX_MAX_RNDV_RAILS=2"
    env+=" UCX_IB_ROCE_LOCAL_SUBNET=y"
    env+=" $(variant_env "$v") ${MR_RHB_ENV:-}"
    # shellcheck disable=SC2086
    "$MR_VM" spawn b "pts-$name" env $env timeout -k 5 300 "$perftest" \
        -p "$port" >/dev/null
    sleep 1
    # shellcheck disable=SC2086
    ROCE_EXEC_TIMEOUT=320 "$MR_VM" exec a env $env timeout -k 5 300 \
        "$perftest" "$bm" -p "$port" -t "$t" -s "$s" -n "$n" \
        "${errarg[@]}" >"$out/$name.client.log" 2>&1 || rc=$?
    "$MR_VM" wait b "pts-$name" 60 >"$out/$name.server.log" 2>&1 || true
    "$MR_VM" running b "pts-$name" && "$MR_VM" signal b "pts-$name" KILL
    [ "$rc" = 0 ] && grep -q '^Final:' "$out/$name.client.log"
}

# final NAME FIELD(lat|bw|rate): from the Final: line (iterations, latency
# p50 / average / overall, bandwidth average / overall, rate average /
# overall)
final() {
    awk -v f="$2" '/^Final:/ {
        if (f == "lat") print $3; else if (f == "bw") print $7; else print $9
    }' "$out/$1.client.log"
}

mr_roce_boot || die "the guests did not boot"

# --- healthy, interleaved
tests=${MR_RHB_TESTS:-"tag_bw 1 MiB|bw|tag_bw 1048576 150
tag_bw 8 B rate|rate|tag_bw 8 50000
tag_lat 8 B|lat|tag_lat 8 400"}
for ((r = 1; r <= rounds; r++)); do
    tno=0
    while IFS='|' read -r label field args; do
        tno=$((tno + 1))
        for v in $variants; do
            name=h$r-$tno-$v
            # shellcheck disable=SC2086
            if run_pt "$name" "$v" rxe0:1,rxe1:1 $args; then
                val=$(final "$name" "$field")
            else
                val=nan
                echo "no result: $name" >&2
            fi
            echo "healthy $v $r $tno $val" | tee -a "$raw" >&2
        done
    done <<<"$tests"
done

# --- degraded: one rail only vs two rails with rail 1 cut
dur_n=${MR_RHB_DEGRADED_ITERS:-400}
cut=${MR_RHB_CUT:-8}

# degraded_run NAME DEVS CUT_AT(-: no cut): a tag_bw 1 MiB stream of
# dur_n iterations, failover on; rail 1 unplugged in guest a CUT_AT
# seconds after the client's first report, plugged back after the run
degraded_run() {
    local name=$1 devs=$2 cut_at=$3 f pid t0 bm env
    port=$((port + 1))
    bm=$("$MR_VM" addr b m)
    env="UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$devs,eth0"
    env+=" UCX_MAX_EAGER_RAILS=2 UCX_MAX_RNDV_RAILS=2"
    env+=" UCX_IB_ROCE_LOCAL_SUBNET=y"
    env+=" $(variant_env on) UCX_LOG_LEVEL=info"
    # shellcheck disable=SC2086
    "$MR_VM" spawn b "pts-$name" env $env timeout -k 5 400 "$perftest" \
        -p "$port" >/dev/null
    sleep 1
    # shellcheck disable=SC2086
    "$MR_VM" spawn a "ptc-$name" env $env timeout -k 5 400 "$perftest" \
        "$bm" -p "$port" -t tag_bw -s 1048576 -n "$dur_n" "${errarg[@]}" \
        >/dev/null
    f=$(mr_roce_out a "ptc-$name")
    t0=$(mr_now)
    wait_count "$f" '^\[thread 0\]' 1 60 || true
    if [ "$cut_at" != - ]; then
        sleep "$cut_at"
        echo "cut $(mr_now)" >"$out/$name.cut"
        "$MR_VM" fault link a 1 >/dev/null
    fi
    "$MR_VM" wait a "ptc-$name" 400 >"$out/$name.client.log" 2>&1 || true
    "$MR_VM" wait b "pts-$name" 60 >"$out/$name.server.log" 2>&1 || true
    [ "$cut_at" != - ] && "$MR_VM" restore link a 1 >/dev/null
    "$MR_VM" running a "ptc-$name" && "$MR_VM" signal a "ptc-$name" KILL
    "$MR_VM" running b "pts-$name" && "$MR_VM" signal b "pts-$name" KILL
    echo "$t0" >"$out/$name.t0"
}

# rate_between LOG FROM TO: the bandwidth (MB/s, MiB as ucx_perftest
# counts) of the 1 MiB messages of a client log's reports whose interval
# lies within FROM..TO seconds after the run's first iteration. A report
# line gives its iteration count (3rd field) and the interval's average
# time per iteration (5th, us): the intervals' lengths add up to the run's
# time line (under TCG a report comes every 2-3 s, not every second).
rate_between() {
    grep '^\[thread 0\]' "$1" | awk -v from="$2" -v to="$3" '
        { dt = ($3 - n) * $5 / 1e6; if (t >= from && t + dt <= to) {
              msgs += $3 - n; secs += dt }
          t += dt; n = $3 }
        END { if (secs > 0) printf "%.2f %.1f\n", msgs / secs, secs;
              else print "nan 0" }'
}

# first_report LOG: seconds from the first iteration to the first report
# (the cut is timed from it)
first_report() {
    grep -m1 '^\[thread 0\]' "$1" | awk '{ printf "%.3f\n", $3 * $5 / 1e6 }'
}

for ((r = 1; r <= ${MR_RHB_DEGRADED_ROUNDS:-2}; r++)); do
    degraded_run "d$r-one" rxe0:1 -
    f=$out/d$r-one.client.log
    read -r rate secs < <(rate_between "$f" "$(first_report "$f")" 1e9)
    echo "degraded one $r 0 $rate $secs" | tee -a "$raw" >&2
    degraded_run "d$r-cut" rxe0:1,rxe1:1 "$cut"
    f=$out/d$r-cut.client.log
    t1=$(first_report "$f")
    # from 3 s after the cut to the end; and both rails before it
    read -r rate secs < <(rate_between "$f" \
        "$(awk -v a="$t1" -v c="$cut" 'BEGIN { print a + c + 3 }')" 1e9)
    echo "degraded cut $r 0 $rate $secs" | tee -a "$raw" >&2
    read -r rate secs < <(rate_between "$f" "$t1" \
        "$(awk -v a="$t1" -v c="$cut" 'BEGIN { print a + c }')")
    echo "degraded two $r 0 $rate $secs" | tee -a "$raw" >&2
    grep -h "rc_verbs/rxe1:1 failed (" "$f" |
        head -1 | cut -c1-200 >&2 || echo "d$r-cut: no failover line" >&2
done

# --- the table
median() {
    sort -g | awk '$1 != "nan" { v[++n] = $1 } END {
        if (n == 0) { print "nan"; exit }
        print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}
# variant_stats TEST VARIANT...: med[VARIANT] and rng[VARIANT] (min..max)
# of the healthy part's measurement number TEST over the rounds
declare -A med=() rng=()
variant_stats() {
    local t=$1 v vals
    shift
    for v in "$@"; do
        vals=$(awk -v v="$v" -v t="$t" \
               '$1 == "healthy" && $2 == v && $4 == t { print $5 }' "$raw")
        if [ -z "$vals" ]; then
            # (a variant not run)
            med[$v]=-
            rng[$v]=-
            continue
        fi
        med[$v]=$(median <<<"$vals")
        rng[$v]=$(sort -g <<<"$vals" | awk 'NR == 1 { a = $1 } { b = $1 }
                  END { print a ".." b }')
    done
}
{
    echo "ucx_perftest in the soft-RoCE guests, rc_verbs on 2 rails, wireup"
    echo "over tcp (eth0), err mode peer; median of $rounds rounds (min..max)"
    echo
    echo "| measurement | Debian libucx0 | ours, failover off | ours, failover on | off / Debian | on / off |"
    echo "|---|---|---|---|---|---|"
    tno=0
    while IFS='|' read -r label field args; do
        tno=$((tno + 1))
        variant_stats "$tno" stock off on
        awk -v l="$label" -v s="${med[stock]}" -v o="${med[off]}" \
            -v n="${med[on]}" -v rs="${rng[stock]}" -v ro="${rng[off]}" \
            -v rn="${rng[on]}" '
            function ratio(a, b) {
                return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.3f", a / b) : "-"
            }
            BEGIN {
            printf "| %s | %s (%s) | %s (%s) | %s (%s) | %s | %s |\n",
                l, s, rs, o, ro, n, rn, ratio(o, s), ratio(n, o) }'
    done <<<"$tests"
    if [[ " $variants " == *" ref "* ]]; then
        echo
        echo "| measurement | failover on, by reference | by reference / off | by reference / on |"
        echo "|---|---|---|---|"
        tno=0
        while IFS='|' read -r label field args; do
            tno=$((tno + 1))
            variant_stats "$tno" off on ref
            awk -v l="$label" -v o="${med[off]}" -v n="${med[on]}" \
                -v f="${med[ref]}" -v rf="${rng[ref]}" 'BEGIN {
                printf "| %s | %s (%s) | %.3f | %.3f |\n", l, f, rf,
                    (o > 0 ? f / o : 0), (n > 0 ? f / n : 0) }'
        done <<<"$tests"
    fi
    echo
    one=$(awk '$1 == "degraded" && $2 == "one" { print $5 }' "$raw" | median)
    cutm=$(awk '$1 == "degraded" && $2 == "cut" { print $5 }' "$raw" | median)
    two=$(awk '$1 == "degraded" && $2 == "two" { print $5 }' "$raw" | median)
    ratios=$(awk '$1 == "degraded" && ($2 == "one" || $2 == "cut") {
                      v[$3, $2] = $5; r[$3] = 1 }
                  END { for (k in r) if (v[k, "one"] > 0)
                            printf "%.3f ", v[k, "cut"] / v[k, "one"] }' \
             "$raw")
    echo "tag_bw 1 MiB, ours with failover on (MB/s, median of the rounds;"
    echo "each round's rate is messages over time): two rails $two; rail 1"
    echo "unplugged, its lane failed over $cutm; rail 0 alone from the start"
    echo "$one; degraded / one rail $(awk -v a="$cutm" -v b="$one" \
        'BEGIN { printf "%.3f", a / b }') (per round: $ratios)"
} | tee "$out/table.md"
