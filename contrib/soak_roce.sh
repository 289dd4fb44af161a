#!/bin/bash
#
# Randomized soak on RDMA rails (issue 21): the soft-RoCE bed
# (test/roce/vm.sh: two QEMU guests with rdma_rxe, rc_verbs lanes on two
# rails, the CM on TCP), one checker pair streaming every API with
# UCX_MULTIRAIL_FAILOVER=y for the whole run, and N fault injections, each
# of a kind, guest and rail drawn at random: the carrier lost (QEMU
# set_link), a silent drop both ways (nftables in both guests), a silent
# drop one way (in one guest). Each injection waits until both rails' lanes
# are up on both sides, puts the fault in place, waits until both sides
# failed the rail's lane over, holds the fault 1-3 s, lifts it, waits until
# the lane's last event on both sides is its return, and lets traffic run
# 2-4 s before the next.
# At the end: nothing lost, duplicated, reordered or corrupted, no error
# callback, no failed operation, no ERROR line, no re-probe's failed
# connection logged above debug level, and every injection was
# followed by a failover and a recovery on both sides (within 25 s and 45 s).
#
# Usage: contrib/soak_roce.sh [N]          (default 300)
#        MR_SOAK_SEED=S    the random sequence (default: from the clock;
#                          printed, so that a run can be repeated)
#        MR_SOAK_KINDS     the kinds to draw from (default "link drop drop-in")
# Results: build/soak-roce/ (the checkers' logs, injections.log)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

n=${1:-300}
seed=${MR_SOAK_SEED:-$(date +%s)}
read -r -a kinds <<<"${MR_SOAK_KINDS:-link drop drop-in}"

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/soak-roce
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_roce.sh"
trap 'mr_roce_down' EXIT

RANDOM=$seed
log=$MRFO_RESULTS/injections.log
tag=soak
MR_DIR=$MRFO_RESULTS/checker
mkdir -p "$MR_DIR"

mr_roce_boot || die "the guests did not boot"
# long enough for every injection at its slowest; the client is told to end
# (SIGUSR1) after the last one
dur=$((n * 75 + 60))
mr_roce_pair_start "$tag" y "$dur" -- --conn sockaddr --err-mode peer \
    --slow-log 10 || die "the server did not listen"
mr_roce_wait_traffic "$tag" || die "no traffic"
cli=$(mr_roce_out a "cli-$tag")
srv=$(mr_roce_out b "srv-$tag")
echo "seed $seed, $n injections of: ${kinds[*]}" | tee "$log"

# lane_up FILE DEV: the last failover or return of DEV's lane in FILE (if
# any) is a return
lane_up() {
    local last
    last=$({ grep -E "rc_verbs/$2:1 (failed \(|is back)" "$1" || true; } |
           tail -1)
    [ -z "$last" ] || [[ $last == *"is back"* ]]
}

# wait_lane_up FILE DEV SECS: until DEV's lane is up in FILE (bounded)
wait_lane_up() {
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        lane_up "$1" "$2" && return 0
        sleep 0.2
    done
    return 1
}

# wait_lanes_up SECS: until both rails' lanes are up on both sides
wait_lanes_up() {
    local f d
    for f in "$cli" "$srv"; do
        for d in rxe0 rxe1; do
            wait_lane_up "$f" "$d" "$1" || return 1
        done
    done
}

declare -A done_on=([0]=0 [1]=0)
ok=1
t_start=$(mr_now)
for ((c = 1; c <= n; c++)); do
    kind=${kinds[RANDOM % ${#kinds[@]}]}
    g=$([ $((RANDOM % 2)) = 0 ] && echo a || echo b)
    rail=$((RANDOM % 2))
    hold=$((1 + RANDOM % 3))
    settle=$((2 + RANDOM % 3))
    dev=rxe$rail
    # both rails up on both sides first: a fault on the one rail left is
    # the endpoint's end, not a failover
    if ! wait_lanes_up 45; then
        echo "$c: a lane is not up on both sides before the fault" |
            tee -a "$log"
        ok=0
        break
    fi
    # an injection may fail a lane over more than once (it comes back
    # during the hold and fails again): counted from the logs as they are
    want_cli=$(($(count "$cli" "rc_verbs/$dev:1 failed (") + 1))
    want_srv=$(($(count "$srv" "rc_verbs/$dev:1 failed (") + 1))
    "$MR_VM" fault "$kind" "$g" "$rail" >/dev/null ||
        { echo "$c: fault $kind $g $rail failed" | tee -a "$log"; ok=0; break; }
    if ! wait_count "$cli" "rc_verbs/$dev:1 failed (" "$want_cli" 25 ||
       ! wait_count "$srv" "rc_verbs/$dev:1 failed (" "$want_srv" 25; then
        echo "$c: $kind $g $rail: not failed over on both sides" | tee -a "$log"
        "$MR_VM" restore "$kind" "$g" "$rail" >/dev/null || true
        ok=0
        break
    fi
    sleep "$hold"
    "$MR_VM" restore "$kind" "$g" "$rail" >/dev/null ||
        { echo "$c: restore $kind $g $rail failed" | tee -a "$log"; ok=0;
          break; }
    if ! wait_lane_up "$cli" "$dev" 45 || ! wait_lane_up "$srv" "$dev" 45
    then
        echo "$c: $kind $g $rail: the lane is not back on both sides" |
            tee -a "$log"
        ok=0
        break
    fi
    done_on[$rail]=$((done_on[$rail] + 1))
    echo "$c: $kind $g rail $rail held ${hold}s: failed over and back" \
         "on both sides ($(mr_elapsed "$t_start" "$(mr_now)") s)" >>"$log"
    sleep "$settle"
done
injected=$((done_on[0] + done_on[1]))

# the client ends its traffic now (as if its duration had passed)
"$MR_VM" exec a "pkill -USR1 -x mr_check" >/dev/null 2>&1 || true
mr_roce_pair_wait "$tag" "$dur"
mr_test_ok=1
mr_expect_clean "$MR_DIR"
mr_expect_quiet_reprobes "$MR_DIR"
[ "$mr_test_ok" = 1 ] || ok=0
errors=$(count "$MR_DIR/client.out" "UCX  ERROR")
errors=$((errors + $(count "$MR_DIR/server.out" "UCX  ERROR")))
[ "$errors" = 0 ] || ok=0
# a run that failed while a guest NIC had stopped (the bed's fault,
# docs/testbed.md) says so: its failure is not the library's
bed_fault=0
if [ "$ok" != 1 ] && mr_roce_nic_stalled; then
    bed_fault=1
fi
mr_roce_down

echo "soft-RoCE bed, rc_verbs rails, failover on, every API streaming:" \
     "$injected of $n injections failed over and back on both sides" \
     "(seed $seed, kinds: ${kinds[*]}; rail 0: ${done_on[0]}, rail 1:" \
     "${done_on[1]}), $(mr_elapsed "$t_start" "$(mr_now)") s"
for role in client server; do
    grep '^RESULT' "$MR_DIR/$role.out" || echo "$role: no RESULT"
done
echo "ERROR lines: $errors; injections: $log"
[ "$bed_fault" = 0 ] ||
    echo "bed fault: a guest NIC stopped sending (NETDEV WATCHDOG, or a rail" \
         "without ping after the run): look at the checkers' TL lines"
[ "$ok" = 1 ] && [ "$injected" = "$n" ]
