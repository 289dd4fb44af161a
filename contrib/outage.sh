#!/bin/bash
#
# Long outage (not part of the test command): a rail of a two-rail bed stays
# failed for SECONDS (default 3600) while the checker streams every API with
# failover on over the other rail; then the rail heals and must be back on
# both sides within UCX_MULTIRAIL_REPROBE_MAX_INTERVAL (3 s) plus 5 s, carry
# traffic again, and the run must end with nothing lost, duplicated,
# reordered or corrupted and no error callback. During the outage the
# processes' memory (VmRSS) and open descriptors are sampled each minute: a
# rail that is re-probed for an hour must not leak either. Bounds checked:
# RSS growth <= 64 MiB, descriptor growth <= 16, from the fault to the end of
# the outage.
#
# Usage: contrib/outage.sh [SECONDS] [KIND] [RAIL]
#   SECONDS 60..86400 (default 3600); KIND a bed.sh fault kind: down (default,
#   carrier lost on side a), blackhole (silent drop, both ends, carrier up),
#   drop-both, delete; RAIL 0 (the am lane's rail) or 1 (default).
# Environment: MRBED_PREFIX (default mrout) and MR_PORT (default 13341) let
# two outages run at once; results in build/outage-<KIND>-r<RAIL>/.
# Needs root and a build (contrib/build.sh); MRFO_PREFIX may point at a copy
# of the install that rebuilds do not touch.
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

[ "$(id -u)" = 0 ] || die "the test bed needs root (network namespaces)"
secs=${1:-3600}
kind=${2:-down}
rail=${3:-1}
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -ge 60 ] && [ "$secs" -le 86400 ] ||
    die "SECONDS must be 60..86400"
case "$kind" in down|blackhole|drop-both|delete) ;;
    *) die "KIND must be down, blackhole, drop-both or delete" ;; esac
case "$rail" in 0|1) ;; *) die "RAIL must be 0 or 1" ;; esac
side=a
[ "$kind" = blackhole ] && side=both

export MRBED_PREFIX=${MRBED_PREFIX:-mrout}
export MR_PORT=${MR_PORT:-13341}
export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=${MRFO_RESULTS:-$MRFO_BUILD_DIR/outage-$kind-r$rail}
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"

. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_failover.sh"

cleanup() { "$MR_BED" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
unset $(env | sed -n 's/^\(UCX_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null || true

# PID of the checker of ROLE (ip netns exec execs it: its command line
# starts with the binary)
outage_pid() {
    pgrep -f "^$MR_CHECK --$1 .*--port $MR_PORT( |\$)" | head -1
}

# "RSS_KB FDS" of PID
outage_sample() {
    local rss
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || rss=
    echo "${rss:-0} $(ls "/proc/$1/fd" 2>/dev/null | wc -l)"
}

# Wait (bounded by SEC) until FILE has a line "tcp/rRAIL is back after";
# prints the wall time at which it was seen, or nothing
outage_wait_back() {
    local file=$1 sec=$2 i
    for ((i = 0; i < sec * 10; i++)); do
        if grep -q "tcp/r$rail is back after" "$file"; then
            mr_now
            return 0
        fi
        sleep 0.1
    done
}

t_outage() {
    local env role pid t_fault t_restore t_back dt bound=8 i now end
    local -A pids=() rss0=() fd0=() rssmax=() fdmax=()
    local rss fd w kv v
    env="$MR_FO_ENV"
    "$MR_BED" up --rails 2 --rate 100mbit
    MR_TIMEOUT=$((secs + 900)) mr_pair_start 2 $((secs + 600)) "$env" "$env" \
        --connect-timeout 30 --hang-timeout 60 --interval 10 || return 0
    sleep 20
    for role in client server; do
        pid=$(outage_pid "$role")
        [ -n "$pid" ] || { mr_fail "no $role process"; return 0; }
        pids[$role]=$pid
    done
    t_fault=$(mr_now)
    "$MR_BED" fault "$kind" "$rail" "$side"
    echo "[$(date +%T)] $kind r$rail $side for $secs s" >&2
    # the lane has failed over on both sides before the first sample
    sleep 10
    for role in client server; do
        read -r rss fd < <(outage_sample "${pids[$role]}")
        rss0[$role]=$rss fd0[$role]=$fd rssmax[$role]=$rss fdmax[$role]=$fd
    done
    end=$(($(date +%s) + secs - 10))
    while :; do
        now=$(date +%s)
        [ "$now" -lt "$end" ] || break
        sleep $((end - now < 60 ? end - now : 60))
        for role in client server; do
            read -r rss fd < <(outage_sample "${pids[$role]}")
            echo "$(date +%s) $role rss_kb=$rss fds=$fd" >>"$MR_DIR/samples"
            [ "$rss" -le "${rssmax[$role]}" ] || rssmax[$role]=$rss
            [ "$fd" -le "${fdmax[$role]}" ] || fdmax[$role]=$fd
        done
        if ! kill -0 "$(cat "$MR_DIR/client.pid")" 2>/dev/null; then
            mr_fail "the client ended during the outage"
            break
        fi
    done
    t_restore=$(mr_now)
    [ "$kind" = rst ] || "$MR_BED" restore "$kind" "$rail" "$side"
    echo "[$(date +%T)] restored" >&2
    for role in client server; do
        t_back=$(outage_wait_back "$MR_DIR/$role.out" 60)
        if [ -z "$t_back" ]; then
            mr_fail "$role: r$rail not back within 60 s of the restore"
            continue
        fi
        # the line is seen up to 0.1 s late: the first such line's own time
        w=$(grep -m1 "tcp/r$rail is back after" "$MR_DIR/$role.out" |
            sed -n 's/^\[\([0-9.]*\)\].*/\1/p')
        dt=$(mr_elapsed "$t_restore" "${w:-$t_back}")
        mr_note+=" ${role}_back_after=${dt}s"
        awk -v d="$dt" -v b="$bound" 'BEGIN { exit !(d < b) }' ||
            mr_fail "$role: r$rail back ${dt}s after the restore (bound ${bound}s)"
        mr_note+=" ${role}_rss_kb=${rss0[$role]}..${rssmax[$role]}"
        mr_note+=" ${role}_fds=${fd0[$role]}..${fdmax[$role]}"
        [ $((rssmax[$role] - rss0[$role])) -le 65536 ] ||
            mr_fail "$role: RSS grew by $((rssmax[$role] - rss0[$role])) KiB during the outage"
        [ $((fdmax[$role] - fd0[$role])) -le 16 ] ||
            mr_fail "$role: $((fdmax[$role] - fd0[$role])) more descriptors during the outage"
    done
    # both rails carry traffic again, then the client stops
    sleep 20
    kill -USR1 "$(outage_pid client)" 2>/dev/null || mr_fail "no client to stop"
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    w=$(mr_rail_tx_between "$MR_DIR/client.out" "r$rail" "$t_restore")
    mr_note+=" r${rail}_tx_after_restore=$w"
    [ "${w:-0}" -gt 1000000 ] ||
        mr_fail "r$rail carried ${w:-0} bytes after the restore"
    for role in client server; do
        mr_note+=" ${role}_reprobes=$(sed -n "s/.*tcp\/r$rail is back after \([0-9]*\) re-probe.*/\1/p" \
            "$MR_DIR/$role.out" | head -1)"
    done
    w=0
    for kv in server:tag_recv server:am_recv server:stream_recv \
              client:rma_recv client:amo_recv; do
        v=$(mr_result "$MR_DIR/${kv%%:*}.out" "${kv#*:}")
        w=$((w + ${v:-0}))
    done
    mr_note+=" messages_checked=$w"
}

mr_run_test "outage_${kind}_r${rail}_${secs}s" t_outage
cleanup
mr_account_aborted
echo "$mr_passed passed, $mr_failed failed, $mr_skipped skipped"
[ "$mr_failed" = 0 ]
