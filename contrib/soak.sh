#!/bin/bash
#
# Soak benchmark (not part of the test command, which runs one 60 s
# segment): random faults of every kind on random rails, the am lane's rail
# included, while the checker streams every API with failover on. The soak
# is a sequence of segments; each is a fresh pair of processes on a fresh
# bed, in turn with 2, 3 and 4 rails, with mixed message sizes
# (8 B..4 MiB) or with rendezvous sizes only (1 and 4 MiB); each takes one
# fault during wireup, random faults while it streams (RMA flushes included)
# and one around its close (see t_soak_segment in
# test/multirail/tests_soak.sh). It fails on any loss, duplicate, reorder,
# corruption, hang or error callback, and on a lane not back within 10 s of
# its rail healing.
#
# Resumable: the state lives in MR_SOAK_DIR (default build/soak); a run
# stopped by Ctrl-C or a time budget continues where it stopped, and only
# finished segments count. The report gives the injections, messages
# checked, violations and the time from a rail's healing until its lanes
# were back on both sides (p50/p99), per fault kind.
#
# Usage: contrib/soak.sh [--injections N] [--seconds S] [--segment S]
#                        [--report] [--reset]
#   --injections N  stop when the soak has N injections in all (default
#                   10000)
#   --seconds S     stop after the segment that ends past S seconds of this
#                   run (default: no budget)
#   --segment S     length of a segment (default 180, 30..3600)
#   --report        print the report of the state and stop
#   --reset         start a new soak (the old state is removed)
# Environment: MR_SOAK_SEED=N fixes the seed of a new soak (segment K uses
# N+K); MR_SOAK_STOP_ON_FAIL=1 stops at the first failed segment (its logs
# are kept in MR_SOAK_DIR/failed/ in any case). Needs root and a build
# (contrib/build.sh); MRFO_PREFIX may point at a copy of the install that
# rebuilds do not touch.
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

target=10000 budget=0 seglen=180 report_only=0 reset=0
while [ $# -gt 0 ]; do
    case "$1" in
        --injections) target=$2; shift 2 ;;
        --seconds)    budget=$2; shift 2 ;;
        --segment)    seglen=$2; shift 2 ;;
        --report)     report_only=1; shift ;;
        --reset)      reset=1; shift ;;
        *) die "unknown argument '$1' (see the header of $0)" ;;
    esac
done
[[ $target =~ ^[0-9]+$ ]] && [ "$target" -ge 1 ] && [ "$target" -le 1000000 ] ||
    die "--injections must be 1..1000000"
[[ $budget =~ ^[0-9]+$ ]] && [ "$budget" -le 604800 ] ||
    die "--seconds must be 0..604800"
[[ $seglen =~ ^[0-9]+$ ]] && [ "$seglen" -ge 30 ] && [ "$seglen" -le 3600 ] ||
    die "--segment must be 30..3600"

state=${MR_SOAK_DIR:-$MRFO_BUILD_DIR/soak}
[ $reset = 1 ] && rm -rf "$state"
mkdir -p "$state"
touch "$state/segments" "$state/times"
[ -s "$state/seed" ] ||
    echo "${MR_SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}" >"$state/seed"
seed0=$(cat "$state/seed")

# The report: totals of the finished segments
soak_report() {
    local n
    n=$(wc -l <"$state/segments")
    echo "soak state $state (seed $seed0): $n segment(s)"
    [ "$n" -gt 0 ] || return 0
    awk '{ inj += $6; msg += $7; vio += $8; secs += $5
           if ($9 != "pass") fail++
           r[$2] += $6; sz[$3] += $6 }
         END { printf "injections=%d messages_checked=%d violations=%d" \
                      " failed_segments=%d hours=%.2f\n",
                      inj, msg, vio, fail + 0, secs / 3600
               for (k in r) printf "  %s rails: %d injections\n", k, r[k]
               for (k in sz) printf "  sizes %s: %d injections\n", k, sz[k] }' \
        "$state/segments"
    # time from the heal to the lanes back, by kind and in all
    sort -k2,2n "$state/times" | awk '
        function pct(a, m, p,   i) { i = int(p * m + 0.999999); if (i < 1) i = 1
                                     return a[i] }
        { all[++n] = $2; k[$1, ++c[$1]] = $2 }
        END {
            if (!n) { print "  no injection made a lane fail over"; exit }
            printf "  back after heal (%d failovers): p50=%.2fs p99=%.2fs max=%.2fs\n",
                   n, pct(all, n, 0.5), pct(all, n, 0.99), all[n]
            for (kind in c) {
                m = c[kind]; delete a
                for (i = 1; i <= m; i++) a[i] = k[kind, i]
                printf "    %-9s %5d  p50=%.2fs p99=%.2fs max=%.2fs\n", kind, m,
                       pct(a, m, 0.5), pct(a, m, 0.99), a[m]
            }
        }'
}

if [ $report_only = 1 ]; then
    soak_report
    exit 0
fi

[ "$(id -u)" = 0 ] || die "the test bed needs root (network namespaces)"
export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$state/current
export MR_SOAK_TIMES=$state/times.current
rm -rf "$MRFO_RESULTS" "$MR_SOAK_TIMES"
mkdir -p "$MRFO_RESULTS"

. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_failover.sh"
. "$top/test/multirail/tests_soak.sh"

cleanup() { "$MR_BED" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'echo "interrupted: the current segment does not count" >&2; exit 130' INT TERM
unset $(env | sed -n 's/^\(UCX_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null || true

t0=$(date +%s)
while :; do
    done_inj=$(awk '{ s += $6 } END { print s + 0 }' "$state/segments")
    [ "$done_inj" -lt "$target" ] || break
    [ "$budget" = 0 ] || [ $(($(date +%s) - t0)) -lt "$budget" ] || break
    seg=$(($(wc -l <"$state/segments") + 1))
    rails=$((2 + (seg - 1) % 3))
    if [ $((((seg - 1) / 3) % 2)) = 0 ]; then
        sizes=8,1k,8k,64k,1m,4m
    else
        sizes=1m,4m
    fi
    : >"$MR_SOAK_TIMES"
    start=$(date +%s)
    failed_before=$mr_failed
    mr_run_test "soak_seg$seg" t_soak_segment "$rails" "$seglen" "$sizes" \
        $((seed0 + seg))
    cleanup
    if [ "$mr_failed" = "$failed_before" ]; then
        result=pass
    else
        result=fail
        mkdir -p "$state/failed"
        cp -r "$MRFO_RESULTS/soak_seg$seg" "$state/failed/"
    fi
    echo "$seg $rails $sizes $((seed0 + seg)) $(($(date +%s) - start))" \
         "${mr_soak_seg_injections:-0} ${mr_soak_seg_messages:-0}" \
         "${mr_soak_seg_violations:-0} $result $(date +%FT%T)" >>"$state/segments"
    cat "$MR_SOAK_TIMES" >>"$state/times"
    rm -rf "$MRFO_RESULTS/soak_seg$seg"
    [ "$result" = pass ] || [ "${MR_SOAK_STOP_ON_FAIL:-0}" = 0 ] || break
done
mr_account_aborted
soak_report
echo "$mr_passed passed, $mr_failed failed, $mr_skipped skipped"
[ "$mr_failed" = 0 ]
