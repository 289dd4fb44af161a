#!/bin/bash
#
# Soft-RoCE bed smoke test: boots the bed (vm.sh up), checks the verbs devices
# and UCX's view of them in a guest, runs the checker between the guests over
# two real RoCE rails, then with a carrier loss on rail 1 of guest a for 5 s
# (failover off: stock UCX stalls and resumes, or hangs), and, unless
# SMOKE_FAILOVER=n, the same with UCX_MULTIRAIL_FAILOVER=y on both sides.
# Brings the bed down at the end (also on failure or ^C).
#
# Usage: smoke.sh [OUTDIR]    (default build/roce/smoke-<date>)
# Creates OUTDIR with one file per step (server/client stdout and stderr,
# guest consoles) and prints a summary. Environment: SMOKE_DURATION (s of
# traffic of the healthy run, default 10), SMOKE_FAULT_DURATION (of the runs
# with a fault, default 20), SMOKE_FAULT_AT (s into the traffic, default 5),
# SMOKE_FAULT_FOR (s, default 5), SMOKE_FAILOVER (y|n, default y),
# SMOKE_PAIRS (default "stock fault-stock fault-failover": which runs).
#
# Each pair uses its own port (13337, 13338, ...): a server that ends first
# leaves its side of the connection in TIME_WAIT on 13337, and UCX's
# listener (no SO_REUSEADDR) then fails with "Address already in use".
# Exit code: 0 if the bed worked (the checker's verdicts are reported, not
# judged), 1 otherwise.
#
set -eu -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
vm=$here/vm.sh
out=${1:-$repo/build/roce/smoke-$(date +%Y%m%d-%H%M%S)}
dur=${SMOKE_DURATION:-10}
fault_dur=${SMOKE_FAULT_DURATION:-20}
fault_at=${SMOKE_FAULT_AT:-5}
fault_for=${SMOKE_FAULT_FOR:-5}
inst=$repo/build/install
port=13336   # pair() takes the next one
mkdir -p "$out"

ucx_env="LD_LIBRARY_PATH=$inst/lib UCX_TLS=rc_verbs,tcp"
ucx_env+=" UCX_NET_DEVICES=rxe0:1,rxe1:1,eth0 UCX_MAX_EAGER_RAILS=2"
ucx_env+=" UCX_MAX_RNDV_RAILS=2 UCX_IB_ROCE_LOCAL_SUBNET=y"

say() { echo "smoke: $*" | tee -a "$out/summary"; }
bed_ok=1

cleanup() {
    cp "$repo/build/roce/run/"*.console "$repo/build/roce/run/"*/guest.log \
        "$out/" 2>/dev/null || true
    "$vm" down >/dev/null 2>&1 || true
}
trap cleanup EXIT

# pair NAME FAILOVER [fault]: server in b, client in a; with "fault", a
# carrier loss on a's rail 1 at fault_at s for fault_for s
pair() {
    local tag=$1 fo=$2 fault=${3:-} b_m i t0 t1 rc_c=0 rc_s=0 dur=$dur
    local cli_out last still size pid
    [ "$fault" = fault ] && dur=$fault_dur
    port=$((port + 1))
    b_m=$("$vm" addr b m)
    "$vm" spawn b "srv-$tag" env $ucx_env UCX_MULTIRAIL_FAILOVER=$fo \
        timeout -k 5 $((dur + 150)) "$inst/bin/mr_check" --server \
        --listen "$b_m" --port $port --rails eth1,eth2
    for ((i = 0; i < 300; i++)); do
        grep -q -e '^LISTENING' -e '^RESULT' \
            "$repo/build/roce/run/b/out/srv-$tag.out" 2>/dev/null && break
        sleep 0.2
    done
    grep -q '^LISTENING' "$repo/build/roce/run/b/out/srv-$tag.out" ||
        { say "$tag: server did not listen"; bed_ok=0; return 0; }
    t0=$(date +%s.%N)
    "$vm" spawn a "cli-$tag" env $ucx_env UCX_MULTIRAIL_FAILOVER=$fo \
        timeout -k 5 $((dur + 120)) "$inst/bin/mr_check" --client "$b_m" \
        --port $port --duration "$dur" --rails eth1,eth2
    if [ "$fault" = fault ]; then
        # the first TL line with messages: the traffic runs
        for ((i = 0; i < 300; i++)); do
            grep -q -E '^TL .* msgs=[1-9]' \
                "$repo/build/roce/run/a/out/cli-$tag.out" 2>/dev/null && break
            sleep 0.2
        done
        say "$tag: traffic at +$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
        sleep "$fault_at"
        say "$tag: fault link a 1 at +$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
        "$vm" fault link a 1 | tee -a "$out/$tag.fault"
        sleep "$fault_for"
        "$vm" restore link a 1 | tee -a "$out/$tag.fault"
        say "$tag: restore link a 1 at +$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
    fi
    # Wait for the client; if its output stops growing for 30 s while it
    # runs (a stall inside UCP: even its timeline stops), take a backtrace
    # of every thread with gdb, then kill it
    cli_out=$repo/build/roce/run/a/out/cli-$tag.out
    last=-1; still=0
    for ((i = 0; i < (dur + 140) / 5; i++)); do
        "$vm" running a "cli-$tag" || break
        sleep 5
        size=$(stat -c %s "$cli_out" 2>/dev/null || echo 0)
        if [ "$size" = "$last" ]; then still=$((still + 1)); else still=0; fi
        last=$size
        if [ $still -ge 6 ]; then
            pid=$(sed -n 's/^START .* pid=\([0-9]*\).*/\1/p' "$cli_out")
            say "$tag: client silent for 30 s: gdb backtrace of pid $pid in $tag.client.gdb"
            ROCE_EXEC_TIMEOUT=180 "$vm" exec a "timeout 170 gdb -p $pid -batch -nx" \
                "-ex 'thread apply all bt'" >"$out/$tag.client.gdb" 2>&1 || true
            "$vm" signal a "cli-$tag" KILL || true
            break
        fi
    done
    "$vm" wait a "cli-$tag" 30 >"$out/$tag.client.out" \
        2>"$out/$tag.client.err" || rc_c=$?
    t1=$(date +%s.%N)
    "$vm" wait b "srv-$tag" 60 >"$out/$tag.server.out" \
        2>"$out/$tag.server.err" || rc_s=$?
    say "$tag: client rc=$rc_c after $(echo "$t1 - $t0" | bc | cut -c1-6) s, server rc=$rc_s"
    grep -h '^RESULT' "$out/$tag.client.out" "$out/$tag.server.out" |
        sed "s/^/smoke: $tag: /" | tee -a "$out/summary" || true
    grep -h '^EVENT' "$out/$tag.client.out" "$out/$tag.server.out" |
        head -n 8 | sed "s/^/smoke: $tag: /" | tee -a "$out/summary" || true
    if "$vm" running a "cli-$tag"; then "$vm" signal a "cli-$tag" KILL || true; fi
    if "$vm" running b "srv-$tag"; then "$vm" signal b "srv-$tag" KILL || true; fi
    return 0
}

t0=$(date +%s)
"$vm" up | tee -a "$out/summary"

"$vm" exec a ibv_devinfo >"$out/ibv_devinfo" 2>&1 || bed_ok=0
say "ibv_devinfo in a: $(grep -c PORT_ACTIVE "$out/ibv_devinfo") ports PORT_ACTIVE" \
    "($(grep -E 'hca_id|active_mtu|link_layer' "$out/ibv_devinfo" | awk '{print $2}' | xargs))"
[ "$(grep -c PORT_ACTIVE "$out/ibv_devinfo")" = 2 ] || bed_ok=0

"$vm" exec a LD_LIBRARY_PATH="$inst/lib" "$inst/bin/ucx_info" -d \
    >"$out/ucx_info" 2>&1 || bed_ok=0
# "Transport: rc_verbs" is followed by "Device: rxe0:1"
say "ucx_info -d in a: $(awk '/Transport:/ {t = $3} /Device:/ {print t "/" $3}' \
    "$out/ucx_info" | grep -E 'verbs/rxe' | xargs)"
for tl in rc_verbs/rxe0:1 rc_verbs/rxe1:1 ud_verbs/rxe0:1 ud_verbs/rxe1:1; do
    awk '/Transport:/ {t = $3} /Device:/ {print t "/" $3}' "$out/ucx_info" |
        grep -x "$tl" >/dev/null || { say "missing $tl"; bed_ok=0; }
done

for p in ${SMOKE_PAIRS:-stock fault-stock fault-failover}; do
    case "$p" in
        stock) pair stock n ;;
        fault-stock) pair fault-stock n fault ;;
        fault-failover) [ "${SMOKE_FAILOVER:-y}" = y ] && pair fault-failover y fault ;;
        *) say "unknown pair $p"; bed_ok=0 ;;
    esac
done
"$vm" status | tee -a "$out/summary"
say "total $(($(date +%s) - t0)) s; bed $([ $bed_ok = 1 ] && echo ok || echo FAILED);" \
    "logs in $out"
[ $bed_ok = 1 ]
