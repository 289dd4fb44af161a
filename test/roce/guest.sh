#!/bin/bash
#
# Soft-RoCE bed: the guest side. The initramfs /init (vm.sh prepare)
# switch_roots into the host's / (read-only 9p + tmpfs overlay) and runs this
# script as PID 1, with mrfo_guest=a|b, mrfo_kmods and mrfo_ttl from the kernel
# command line in the environment and the guest's writable share on /share.
#
# It sets up the links (eth0 = management 198.18.12.x, eth1 = rail 0
# 198.18.10.x, eth2 = rail 1 198.18.11.x; x = 1 for a, 2 for b; IPv6 off, no
# default route), creates rxe0 on eth1 and rxe1 on eth2, waits until both
# ports are ACTIVE, writes /share/ready ("status=ok ..." or "status=fail ...")
# and then runs the job agent until the host kills the guest, /share/stop
# appears, or mrfo_ttl seconds have passed (then it powers off).
#
# Job protocol (vm.sh writes the jobs): the host renames a complete job file
# to /share/jobs/NAME.sh; the agent moves it to /share/claimed/ (so it runs
# once) and runs it with "setsid -w bash" (its own session and process group),
# stdout to /share/out/NAME.out, stderr to NAME.err; the job itself writes its
# PID to NAME.pid; when it ends the agent writes its exit code to NAME.rc.tmp
# and renames it to NAME.rc, the completion mark (NAME.out and NAME.err are
# complete when NAME.rc exists).
#
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C
share=/share
name=${mrfo_guest:-?}
ttl=${mrfo_ttl:-7200}
case "$name" in a) h=1 ;; b) h=2 ;; *) h=0 ;; esac

exec >>"$share/guest.log" 2>&1 </dev/null

log() {
    local up
    read -r up _ </proc/uptime
    echo "[$up] guest $name: $*"
}

# A sleep that does not fork (a fork costs a lot in a TCG guest): a read
# with a timeout on a FIFO nobody writes to.
mkfifo /run/pause.fifo
exec 8<>/run/pause.fifo
pause() { read -r -t "$1" -u 8 _ || true; }

poweroff_now() {
    log "power off: $*"
    sync
    echo o >/proc/sysrq-trigger
    pause 30
    exit 1   # PID 1 exiting panics the kernel; panic=-1 + -no-reboot: QEMU exits
}

# ready STATUS DETAIL: the host's "up" waits for this file
ready() {
    local up
    read -r up _ </proc/uptime
    printf 'status=%s\nuptime=%s\n%s\n' "$1" "$up" "$2" >"$share/ready.tmp"
    mv "$share/ready.tmp" "$share/ready"
}

fail() {
    log "SETUP FAILED: $*"
    ready fail "$*"
    # stay up, so the host can look (vm.sh exec) before it tears down
    agent
    poweroff_now "after setup failure"
}

setup_links() {
    local i mac want
    hostname "$name"
    ip link set lo up
    # No IPv6: the only addresses are the 198.18.0.0/15 ones (and no link-
    # local GIDs on the rxe ports)
    sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    modprobe virtio_net || return 1
    for ((i = 0; i < 100; i++)); do
        [ -e /sys/class/net/eth2 ] && break
        pause 0.1
    done
    # vm.sh gives NIC i of guest g the MAC 52:54:00:18:0g:0i, in PCI slot
    # order, so the kernel's names must match; check rather than assume
    for i in 0 1 2; do
        want=52:54:00:18:0$h:0$i
        read -r mac </sys/class/net/eth$i/address || return 1
        [ "$mac" = "$want" ] || { log "eth$i has $mac, want $want"; return 1; }
    done
    ip addr add "198.18.12.$h/24" dev eth0
    ip addr add "198.18.10.$h/24" dev eth1
    ip addr add "198.18.11.$h/24" dev eth2
    for i in 0 1 2; do ip link set "eth$i" up || return 1; done
}

setup_rxe() {
    local i r st ok
    modprobe rdma_rxe || return 1
    rdma link add rxe0 type rxe netdev eth1 || return 1
    rdma link add rxe1 type rxe netdev eth2 || return 1
    # PORT_ACTIVE needs the carrier, which needs the peer's QEMU: bounded
    for ((i = 0; i < 600; i++)); do
        ok=1
        for r in 0 1; do
            read -r st </sys/class/infiniband/rxe$r/ports/1/state 2>/dev/null || st=none
            [[ "$st" == *ACTIVE* ]] || ok=0
        done
        [ $ok = 1 ] && return 0
        pause 0.1
    done
    log "ports not ACTIVE: $(cat /sys/class/infiniband/rxe*/ports/1/state | xargs)"
    return 1
}

# Run job NAME (in the background of the agent)
run_job() {
    local n=$1 o=$share/out/$1 rc=0
    setsid -w bash "$share/claimed/$n.sh" >"$o.out" 2>"$o.err" </dev/null || rc=$?
    echo "$rc" >"$o.rc.tmp"
    mv "$o.rc.tmp" "$o.rc"
}

agent() {
    local f n deadline=$((SECONDS + ttl))
    log "agent running (ttl ${ttl}s)"
    while ((SECONDS < deadline)); do
        for f in "$share"/jobs/*.sh; do
            [ -e "$f" ] || continue
            n=${f##*/}
            n=${n%.sh}
            mv "$f" "$share/claimed/$n.sh" 2>/dev/null || continue
            run_job "$n" &
        done
        [ -e "$share/stop" ] && { log "stop file"; return 0; }
        pause 0.1
    done
    log "ttl reached"
}

log "started (kernel $(uname -r))"
mkdir -p "$share/jobs" "$share/claimed" "$share/out"
setup_links || fail "links"
log "links up"
setup_rxe || fail "rxe"
log "rxe0 and rxe1 ACTIVE"
ready ok "$(rdma link show | tr '\n' ';')"
agent
poweroff_now "agent ended"
