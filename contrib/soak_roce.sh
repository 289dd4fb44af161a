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
# connection logged above debug level, every injection was followed by a
# failover and a recovery on both sides (within 25 s and 45 s), and the
# QPs the checkers' failed lanes leave in the error state do not pile up
# (at most MR_SOAK_MAX_ERR_QPS in a guest after any injection: rxe never
# reports a QP's last WQE, patch 0058 bounds the wait for it).
#
# Usage: contrib/soak_roce.sh [N]          (default 300)
#        MR_SOAK_SEED=S    the random sequence (default: from the clock;
#                          printed, so that a run can be repeated)
#        MR_SOAK_KINDS     the kinds to draw from (default "link drop drop-in")
#        MR_SOAK_MAX_ERR_QPS  (default 24)
#        MR_SOAK_BYREF=1   zero-copy messages sent by reference
#                          (UCX_MULTIRAIL_REF_THRESH=4k, UCP's eager zero
#                          copy from 4 KiB and rendezvous from 256 KiB: the
#                          checker's 8 KiB and 64 KiB messages are RC
#                          zero-copy fragments); the checkers print their
#                          endpoints' information at the end, and the
#                          client must have sent messages by reference and
#                          neither side may still hold one
# Results: build/soak-roce/ (the checkers' logs, injections.log)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

n=${1:-300}
seed=${MR_SOAK_SEED:-$(date +%s)}
read -r -a kinds <<<"${MR_SOAK_KINDS:-link drop drop-in}"
max_err_qps=${MR_SOAK_MAX_ERR_QPS:-24}

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
check_args=()
if [ "${MR_SOAK_BYREF:-0}" = 1 ]; then
    MR_ROCE_EXTRA_ENV="${MR_ROCE_EXTRA_ENV:-} UCX_MULTIRAIL_REF_THRESH=4k"
    MR_ROCE_EXTRA_ENV+=" UCX_ZCOPY_THRESH=4k"
    MR_ROCE_EXTRA_ENV+=" UCX_RNDV_THRESH=256k"
    check_args=(--info)
fi
mr_roce_pair_start "$tag" y "$dur" -- --conn sockaddr --err-mode peer \
    --slow-log 10 ${check_args[@]+"${check_args[@]}"} ||
    die "the server did not listen"
mr_roce_wait_traffic "$tag" || die "no traffic"
cli=$(mr_roce_out a "cli-$tag")
srv=$(mr_roce_out b "srv-$tag")
echo "seed $seed, $n injections of: ${kinds[*]}" | tee "$log"

declare -A done_on=([0]=0 [1]=0)
declare -A qps_first=() qps_last=() err_max=([a]=0 [b]=0)
# sample_qps WHEN: the checkers' QPs, error-state QPs and RSS in each guest
sample_qps() {
    local g q e r
    for g in a b; do
        read -r q e r < <(mr_roce_qps "$g") || { q=? e=? r=?; }
        [ -n "${qps_first[$g]:-}" ] || qps_first[$g]="$q $e $r"
        qps_last[$g]="$q $e $r"
        if [ "$e" != "?" ] && [ "$e" -gt "${err_max[$g]}" ]; then
            err_max[$g]=$e
        fi
        echo "$1: $g: $q QPs, $e in error state, RSS $r KiB" >>"$log"
    done
}
sample_qps start
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
    if ! mr_roce_wait_lanes_up 45 "$cli" "$srv"; then
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
    if ! mr_roce_wait_lane "$cli" "$dev" up 45 ||
       ! mr_roce_wait_lane "$srv" "$dev" up 45; then
        echo "$c: $kind $g $rail: the lane is not back on both sides" |
            tee -a "$log"
        ok=0
        break
    fi
    done_on[$rail]=$((done_on[$rail] + 1))
    echo "$c: $kind $g rail $rail held ${hold}s: failed over and back" \
         "on both sides ($(mr_elapsed "$t_start" "$(mr_now)") s)" >>"$log"
    sample_qps "$c"
    sleep "$settle"
done
injected=$((done_on[0] + done_on[1]))

for g in a b; do
    if [ "${err_max[$g]}" -gt "$max_err_qps" ]; then
        echo "guest $g: up to ${err_max[$g]} QPs in the error state" \
             "(more than $max_err_qps)" | tee -a "$log"
        ok=0
    fi
done

# the client ends its traffic now (as if its duration had passed)
mr_roce_end_client
mr_roce_pair_wait "$tag" "$dur"
mr_test_ok=1
mr_expect_clean "$MR_DIR"
mr_expect_quiet_reprobes "$MR_DIR"
if [ "${MR_SOAK_BYREF:-0}" = 1 ]; then
    mr_note=
    mr_expect_byref
    echo "by reference:$mr_note"
fi
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
for g in a b; do
    echo "guest $g: QPs, in error state, RSS KiB: ${qps_first[$g]} at the" \
         "start, ${qps_last[$g]} after the last injection; at most" \
         "${err_max[$g]} in the error state"
done
[ "$bed_fault" = 0 ] ||
    echo "bed fault: a guest NIC stopped sending (NETDEV WATCHDOG, or a rail" \
         "without ping after the run): look at the checkers' TL lines"
[ "$ok" = 1 ] && [ "$injected" = "$n" ]
