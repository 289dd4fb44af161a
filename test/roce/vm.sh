#!/bin/bash
#
# Soft-RoCE multi-rail test bed: two QEMU guests, "a" and "b", running Debian's
# own 6.1 kernel (which has rdma_rxe; the host kernel has no RDMA modules),
# joined by three point-to-point Ethernet links, two of them real RoCE v2 rails
# (rxe0 on eth1, rxe1 on eth2). The guests see the host's / read-only (9p, with
# a tmpfs overlay), so they run the host's installed packages and this
# repository's build/install; a writable 9p share per guest carries job files
# in and results out. Under TCG (no nested KVM here) "up" takes ~15-18 s
# (guest uptime ~8-10 s at ready); a job's round trip ~1.5 s; throughput is
# CPU-bound (~5-8 MB/s per rail): compare ratios, not absolute figures.
#
# Example (smoke.sh does this and more):
#   vm.sh prepare && vm.sh up
#   vm.sh exec a ibv_devinfo
#   vm.sh spawn b srv env LD_LIBRARY_PATH=... mr_check --server \
#       --listen "$(vm.sh addr b m)" --rails eth1,eth2
#   vm.sh exec a env ... mr_check --client "$(vm.sh addr b m)" --rails eth1,eth2
#   vm.sh fault link a 1; sleep 5; vm.sh restore link a 1
#   vm.sh wait b srv 60; vm.sh down
# (mr_check's --rails names the guest netdevs eth1,eth2: their byte counters
# include the rxe traffic.)
#
#   guest a                       guest b
#   eth0 198.18.12.1/24  <--m-->  eth0 198.18.12.2/24   management / CM (TCP)
#   eth1 198.18.10.1/24  <--r0->  eth1 198.18.10.2/24   rail 0, rxe0
#   eth2 198.18.11.1/24  <--r1->  eth2 198.18.11.2/24   rail 1, rxe1
#
# Each link is a QEMU "-netdev socket" pair on 127.0.0.1 (a listens, b
# connects); nothing is attached to the host's interfaces, there is no
# user-mode networking and no default route. IPv6 is disabled in the guests,
# so the only addresses are the 198.18.0.0/15 ones above.
#
# Usage: vm.sh COMMAND [ARGS]
#   prepare                      install host packages, fetch + extract the
#                                kernel, build the initramfs (idempotent)
#   up                           boot a and b; returns when both agents answer
#   down                         stop both guests (by recorded PID), clean up
#   status                       PIDs, readiness, link states, watchdog check
#   exec a|b CMD...              run CMD in the guest (the words are joined by
#                                spaces and run by bash, as ssh does), print
#                                its stdout/stderr, exit with its exit code
#                                (ROCE_EXEC_TIMEOUT seconds, default 120; 124
#                                on timeout, the job is then killed)
#   spawn a|b NAME CMD...        start CMD in the background as job NAME
#   wait a|b NAME [TIMEOUT]      wait for job NAME (default 120 s), print its
#                                output, exit with its code (124 and "still
#                                runs" on stderr: it has not ended)
#   running a|b NAME             exit 0 if job NAME has not ended
#   out a|b NAME                 print job NAME's stdout so far
#   signal a|b NAME [SIG]        send SIG (default TERM) to job NAME's
#                                process group
#   addr a|b m|0|1               print the guest's address on that link
#   fault KIND a|b 0|1           inject a fault on rail 0|1 of a guest
#   restore KIND a|b 0|1         undo it
#   monitor a|b CMD...           send a command to the guest's QEMU monitor
#
# Fault kinds:
#   link        QEMU monitor "set_link rN off": the guest NIC loses carrier,
#               nothing passes (the peer keeps its carrier: silent for it)
#   drop        the rail silently drops everything both ways, the carriers
#               stay up: nftables table "mrfo_roce_drop_rN" (family netdev)
#               in BOTH guests, an ingress chain on the rail's interface
#               with policy drop (RoCE v2 is UDP 4791, ARP too). Not an
#               egress chain: Debian 6.1's rxe sends a packet dropped on
#               its own host again at once, in a loop (a soft lockup of the
#               guest for as long as the drop lasts; fixed in later kernels),
#               while a drop on the wire is what RC's retries are for.
#               Prints "applied T", T the guest's time ($EPOCHREALTIME) when
#               the first of the two (or of their removals) was in place
#   drop-in     the same in GUEST only: what it receives on the rail is
#               dropped, what it sends gets through (one direction silent)
#   tx-stall    a tbf qdisc of 8 bit/s on the rail in GUEST (32 MiB, never
#               full: a drop there makes rxe loop): what it sends
#               waits in the queue (as behind a stalled virtio transmit
#               queue, seen on this bed: "NETDEV WATCHDOG"); what it
#               receives gets through. Prints "applied T" (the guest's time)
#   tx-hold     as tx-stall, but the restore releases what the queue held
#               (the rate raised to 100 Mbit/s, then the qdisc removed once
#               empty): packets of the failed lane's QPs, requests, RDMA
#               writes and acknowledgements, arrive late at the peer, after
#               the lane failed over (the late writes of a discarded QP).
#               The restore prints "applied T" when the release began, and
#               what the qdisc sent and dropped ("released: Sent ...")
#   rxe-delete  "rdma link delete rxeN" in the guest (restore: "rdma link add")
#
# What it creates (all under build/roce/, which is not committed):
#   dl/                    the downloaded linux-image .deb
#   kernel/                the .deb extracted (boot/vmlinuz-V, lib/modules/V)
#   initrd-V.cpio.gz       the initramfs (busybox-static, virtio/9p/overlay
#                          modules, /init; .recipe: hash of what made it);
#                          kver holds V
#   run/                   per-run folder, wiped by "up":
#     a/ b/                the guests' writable shares: jobs/ (host -> guest),
#                          claimed/, out/ (NAME.out .err .pid .rc), ready,
#                          guest.log
#     a.console b.console  serial consoles; a.qemu.log: QEMU's stderr
#     a.mon b.mon          monitor sockets; a.qemu.pid, a.timeout.pid
# "down" kills exactly the recorded QEMU PIDs (after checking their command
# line), removes the sockets, PID files, jobs/ and claimed/, and keeps the
# logs and spawned jobs' output until the next "up".
#
# CPU discipline: the guests run under TCG and cost CPU. "up" takes the flock
# on $ROCE_LOCK (default /tmp/mrfo-heavy.lock; empty: no lock) and hands it
# to the QEMU processes, so it is held for exactly as long as a guest runs;
# "prepare" takes it around its heavy steps.
#
# Environment: ROCE_LOCK, ROCE_LOCK_WAIT (s, default 3600), ROCE_PORT_BASE
# (default 47310; uses 3 ports), ROCE_MEM (MiB per guest, default 1536),
# ROCE_TTL (s, a guest's maximum life, default 7200), ROCE_BOOT_TIMEOUT
# (s, default 180), ROCE_BUILD (default <repo>/build/roce).
#
set -eu -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bdir=${ROCE_BUILD:-$repo/build/roce}
run=$bdir/run
lock=${ROCE_LOCK-/tmp/mrfo-heavy.lock}
lock_wait=${ROCE_LOCK_WAIT:-3600}
port_base=${ROCE_PORT_BASE:-47310}
# what a tx-stall or tx-hold queue may hold (bytes): never full in a test
txhold_limit=33554432
mem=${ROCE_MEM:-1536}
ttl=${ROCE_TTL:-7200}
boot_timeout=${ROCE_BOOT_TIMEOUT:-180}
guests=(a b)

# The host packages the bed needs (softroce.md), and kmod for depmod/modprobe.
# (not rdma-core: the "rdma" tool is iproute2's, and rdma-core would pull in
# udev and upgrade the host's systemd packages)
host_pkgs=(qemu-system-x86 busybox-static ibverbs-utils
           ibverbs-providers kmod cpio socat nftables iproute2)

# Modules the initramfs loads before it can mount the root over 9p; their
# dependencies are resolved with modprobe --show-depends.
initrd_mods=(virtio_pci 9pnet_virtio 9p overlay)

die() { echo "vm.sh: $*" >&2; exit 2; }
log() { echo "vm.sh: $*" >&2; }

# Wall clock in ms, without forking (EPOCHREALTIME is a bash builtin)
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

# Run a CPU-heavy command under the shared lock (if one is configured)
heavy() {
    if [ -n "$lock" ]; then
        flock -w "$lock_wait" "$lock" "$@"
    else
        "$@"
    fi
}

check_guest() {
    case "${1:-}" in a|b) ;; *) die "guest must be a or b, not '${1:-}'" ;; esac
}

check_rail() {
    case "${1:-}" in 0|1) ;; *) die "rail must be 0 or 1, not '${1:-}'" ;; esac
}

check_name() {
    case "${1:-}" in
        ''|*[!A-Za-z0-9_.-]*|.*) die "bad job name '${1:-}'" ;;
    esac
}

# Host number of a guest in every /24 (a = 1, b = 2)
host_no() { [ "$1" = a ] && echo 1 || echo 2; }

# addr GUEST m|0|1
addr() {
    check_guest "$1"
    case "$2" in
        m) echo "198.18.12.$(host_no "$1")" ;;
        0) echo "198.18.10.$(host_no "$1")" ;;
        1) echo "198.18.11.$(host_no "$1")" ;;
        *) die "link must be m, 0 or 1, not '$2'" ;;
    esac
}

kver() {
    [ -s "$bdir/kver" ] || die "not prepared (run: vm.sh prepare)"
    cat "$bdir/kver"
}

# ---------------------------------------------------------------- prepare

prepare_packages() {
    local p missing=()
    for p in "${host_pkgs[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
            grep -q '^install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    # The package lists are normally there; refresh them once if not.
    if ! heavy env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${missing[@]}"; then
        heavy apt-get update -q
        heavy env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${missing[@]}"
    fi
}

# The newest linux-image-6.1.0-N-amd64 apt offers (Debian 12's own kernel
# series; the 6.12 backport, cloud and rt flavours are not what was measured).
newest_kernel_pkg() {
    apt-cache pkgnames linux-image-6.1 2>/dev/null |
        grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -n 1
}

prepare_kernel() {
    local pkg v deb
    pkg=$(newest_kernel_pkg)
    if [ -z "$pkg" ]; then
        # apt offers none (no lists): keep what was prepared before, if any
        [ -s "$bdir/kver" ] || die "apt offers no linux-image-6.1.0-*-amd64"
        log "apt offers no kernel package; keeping $(cat "$bdir/kver")"
        return 0
    fi
    v=${pkg#linux-image-}
    if [ -e "$bdir/kernel/boot/vmlinuz-$v" ] &&
       [ -s "$bdir/kernel/lib/modules/$v/modules.dep" ]; then
        log "kernel $v: already extracted"
    else
        mkdir -p "$bdir/dl"
        deb=$(ls "$bdir/dl/${pkg}_"*.deb 2>/dev/null | tail -n 1 || true)
        if [ -z "$deb" ]; then
            log "downloading $pkg"
            # apt-get download writes into the current directory; as root it
            # warns that _apt cannot write there, which is harmless.
            (cd "$bdir/dl" && apt-get download -q "$pkg")
            deb=$(ls "$bdir/dl/${pkg}_"*.deb | tail -n 1)
        fi
        log "extracting $deb into $bdir/kernel (not installed on the host)"
        mkdir -p "$bdir/kernel"
        heavy dpkg-deb -x "$deb" "$bdir/kernel"
        # Debian 12 ships modules in /lib/modules; follow it if under /usr
        if [ ! -d "$bdir/kernel/lib/modules/$v" ] &&
           [ -d "$bdir/kernel/usr/lib/modules/$v" ]; then
            mkdir -p "$bdir/kernel/lib/modules"
            ln -sfn "../../usr/lib/modules/$v" "$bdir/kernel/lib/modules/$v"
        fi
        heavy depmod -b "$bdir/kernel" "$v"
    fi
    echo "$v" >"$bdir/kver.tmp"
    mv "$bdir/kver.tmp" "$bdir/kver"
}

# The initramfs /init: mount the host's / read-only over 9p, a tmpfs overlay
# on top, the extracted modules and the writable share into it, and
# switch_root to the project's guest script (test/roce/guest.sh).
write_init() {
    cat >"$1" <<'EOF'
#!/bin/busybox sh
# Soft-RoCE bed guest /init (generated by test/roce/vm.sh prepare).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
    echo "mrfo-init: FAILED: $*"
    echo o >/proc/sysrq-trigger
    sleep 10
}
for m in /mods/*.ko; do
    insmod "$m" || fail "insmod $m"
done
# mrfo_* settings from the kernel command line (vm.sh up sets them)
for w in $(cat /proc/cmdline); do
    case "$w" in mrfo_*=*) export "$w" ;; esac
done
[ -n "${mrfo_guest:-}" ] && [ -n "${mrfo_kmods:-}" ] &&
    [ -n "${mrfo_script:-}" ] || fail "mrfo_* missing from the command line"
mkdir -p /mnt/lower /mnt/rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot \
    /mnt/lower || fail "mount hostroot"
mount -t tmpfs -o size=384m,mode=755 tmpfs /mnt/rw
mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay \
    -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work \
    /newroot || fail "mount overlay"
v=${mrfo_kmods##*/}
mkdir -p "/newroot/lib/modules/$v" /newroot/share
mount -o bind "/newroot$mrfo_kmods" "/newroot/lib/modules/$v" ||
    fail "bind modules"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share \
    /newroot/share || fail "mount share"
# Fresh /run and /tmp: the host's would show through the overlay
mount -t tmpfs -o mode=755 tmpfs /newroot/run
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
# ... but a checkout there (a fresh clone in /tmp) stays visible
top=${mrfo_script%/test/roce/guest.sh}
case "$top" in
/tmp/*|/run/*)
    mkdir -p "/newroot$top"
    mount -o bind "/mnt/lower$top" "/newroot$top" || fail "bind $top"
    ;;
esac
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mkdir -p /newroot/dev/shm /newroot/dev/pts
# UCX's posix shared memory transport needs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
exec switch_root /newroot /bin/bash "$mrfo_script"
EOF
    chmod 755 "$1"
}

prepare_initrd() {
    local v=$1
    local out=$bdir/initrd-$v.cpio.gz stage paths p i=10 f recipe
    # Keyed on the kernel version and on the recipe (module list, /init), so
    # an edit of either rebuilds it
    recipe=$( (echo "${initrd_mods[*]}"; declare -f write_init) | sha256sum |
              cut -c1-16)
    if [ -s "$out" ] && [ "$(cat "$out.recipe" 2>/dev/null)" = "$recipe" ]; then
        log "initramfs for $v: already built"
        return 0
    fi
    [ -x /bin/busybox ] || die "/bin/busybox missing (busybox-static)"
    stage=$bdir/initrd-$v.stage
    rm -rf "$stage"
    mkdir -p "$stage"/{bin,mods,proc,sys,dev,mnt,newroot}
    cp /bin/busybox "$stage/bin/busybox"
    # The kernel opens /dev/console before /init runs
    mknod -m 600 "$stage/dev/console" c 5 1
    # insmod lines in dependency order, each module once
    # (-a: several modules; without it the rest would be module parameters)
    paths=$(modprobe -d "$bdir/kernel" -S "$v" --show-depends -a \
                "${initrd_mods[@]}" | awk '$1 == "insmod" {print $2}' |
            awk '!seen[$0]++')
    [ -n "$paths" ] || die "no modules resolved for the initramfs"
    for p in $paths; do
        f=$(basename "$p")
        case "$f" in
            *.ko.xz) xz -dc "$p" >"$stage/mods/$i-${f%.xz}" ;;
            *.ko.zst) zstd -qdc "$p" >"$stage/mods/$i-${f%.zst}" ;;
            *.ko) cp "$p" "$stage/mods/$i-$f" ;;
            *) die "unexpected module file $p" ;;
        esac
        i=$((i + 1))
    done
    write_init "$stage/init"
    (cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp"
    mv "$out.tmp" "$out"
    echo "$recipe" >"$out.recipe"
    rm -rf "$stage"
    log "initramfs $out: modules $(echo "$paths" | xargs -n1 basename | xargs)"
}

prepare() {
    mkdir -p "$bdir"
    prepare_packages
    prepare_kernel
    prepare_initrd "$(kver)"
    log "prepared: kernel $(kver)"
}

# ---------------------------------------------------------------- up/down

# PID of a guest's QEMU, if it is running and really is that guest's QEMU
qemu_pid() {
    local g=$1 pid
    pid=$(cat "$run/$g.qemu.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -- "-name mrfo-roce-$g " >/dev/null ||
        return 1
    echo "$pid"
}

port_busy() {
    [ -n "$(ss -Htln "sport = :$1")" ]
}

# start_guest GUEST: launch QEMU in the background (its own session, so a
# terminal's ^C does not hit it), bounded by timeout in case it is forgotten
start_guest() {
    local g=$1 v mode mac i dev netdevs=()
    v=$(kver)
    [ "$g" = a ] && mode=listen || mode=connect
    for i in 0 1 2; do
        dev=$([ $i = 0 ] && echo m || echo "r$((i - 1))")
        # PCI slot order fixes the guest's names: eth0 = m, eth1 = r0, ...
        # event_idx=off: with virtio's event-index notification suppression
        # a busy guest's NIC now and then stopped sending for good under
        # TCG ("NETDEV WATCHDOG", a rail without traffic: 8 times on
        # 2026-12-04, the soak ended by it twice after 26 and 31 faults);
        # without it the soak's 60 faults of 60 passed (docs/testbed.md)
        mac=52:54:00:18:0$(host_no "$g"):0$i
        netdevs+=(-netdev "socket,id=$dev,$mode=127.0.0.1:$((port_base + i))"
                  -device "virtio-net-pci,netdev=$dev,mac=$mac,romfile=,event_idx=off,addr=0x$((16 + i))")
    done
    setsid timeout -k 10 "$((ttl + 60))" qemu-system-x86_64 \
        -name "mrfo-roce-$g" -accel tcg -cpu max -smp 1 -m "$mem" \
        -nodefaults -no-user-config -display none -nic none -no-reboot \
        -kernel "$bdir/kernel/boot/vmlinuz-$v" \
        -initrd "$bdir/initrd-$v.cpio.gz" \
        -append "console=ttyS0 loglevel=4 panic=-1 mrfo_guest=$g mrfo_kmods=$bdir/kernel/lib/modules/$v mrfo_script=$here/guest.sh mrfo_ttl=$ttl" \
        -serial "file:$run/$g.console" \
        -monitor "unix:$run/$g.mon,server,nowait" \
        -pidfile "$run/$g.qemu.pid" \
        -virtfs "local,path=/,mount_tag=hostroot,readonly=on,security_model=none,multidevs=remap,id=hostroot" \
        -virtfs "local,path=$run/$g,mount_tag=share,security_model=none,id=share" \
        "${netdevs[@]}" \
        </dev/null >"$run/$g.qemu.log" 2>&1 &
    echo $! >"$run/$g.timeout.pid"
}

# Wait (bounded) until QEMU has written its PID file
wait_pidfile() {
    local g=$1 i
    for ((i = 0; i < 100; i++)); do
        qemu_pid "$g" >/dev/null && return 0
        kill -0 "$(cat "$run/$g.timeout.pid")" 2>/dev/null || break
        sleep 0.1
    done
    cat "$run/$g.qemu.log" >&2 || true
    die "QEMU for $g did not start"
}

up() {
    local g i p t0 ta tb
    kver >/dev/null
    for g in "${guests[@]}"; do
        qemu_pid "$g" >/dev/null && die "guest $g is already up (vm.sh down)"
    done
    for p in 0 1 2; do
        port_busy $((port_base + p)) &&
            die "port $((port_base + p)) is in use (ROCE_PORT_BASE)"
    done
    rm -rf "$run"
    for g in "${guests[@]}"; do
        mkdir -p "$run/$g/jobs" "$run/$g/claimed" "$run/$g/out"
    done
    # The lock goes to the QEMU processes (fd 9 is inherited), so it is held
    # while a guest runs and released when the last one exits.
    if [ -n "$lock" ]; then
        exec 9>>"$lock"
        log "waiting for $lock"
        flock -w "$lock_wait" 9 || die "could not take $lock"
    fi
    # whatever fails from here on (die, set -e) stops what was started
    trap 'log "up failed; stopping what started"; down >/dev/null 2>&1 || true' EXIT
    t0=$(now_ms)
    start_guest a
    wait_pidfile a
    # b connects to a's listening sockets: wait for them (bounded)
    for ((i = 0; i < 100; i++)); do
        port_busy $((port_base + 2)) && break
        sleep 0.1
    done
    port_busy $((port_base + 2)) || die "a does not listen"
    start_guest b
    wait_pidfile b
    [ -n "$lock" ] && exec 9>&-
    # Both guests write share/ready when rxe0 and rxe1 are ACTIVE and their
    # agents run.
    ta=""; tb=""
    for ((i = 0; i < boot_timeout * 5; i++)); do
        [ -z "$ta" ] && [ -e "$run/a/ready" ] && ta=$(now_ms)
        [ -z "$tb" ] && [ -e "$run/b/ready" ] && tb=$(now_ms)
        [ -n "$ta" ] && [ -n "$tb" ] && break
        for g in "${guests[@]}"; do
            qemu_pid "$g" >/dev/null || {
                tail -n 30 "$run/$g.console" "$run/$g.qemu.log" >&2 || true
                die "guest $g died while booting"
            }
        done
        sleep 0.2
    done
    if [ -z "$ta" ] || [ -z "$tb" ]; then
        for g in "${guests[@]}"; do
            echo "--- $g.console (tail)" >&2
            tail -n 20 "$run/$g.console" >&2 || true
        done
        die "guests not ready within ${boot_timeout}s"
    fi
    for g in "${guests[@]}"; do
        grep -q '^status=ok' "$run/$g/ready" || {
            cat "$run/$g/ready" >&2
            die "guest $g reports a setup failure"
        }
    done
    # The agents answer a job
    for g in "${guests[@]}"; do
        ROCE_EXEC_TIMEOUT=60 vm_exec "$g" true ||
            die "guest $g's agent does not answer"
    done
    trap - EXIT
    echo "up: a ready after $(ms_s $((ta - t0))) s, b after $(ms_s $((tb - t0))) s," \
         "both answer after $(ms_s $(($(now_ms) - t0))) s" \
         "(guest uptime at ready: a $(sed -n 's/^uptime=//p' "$run/a/ready") s," \
         "b $(sed -n 's/^uptime=//p' "$run/b/ready") s)"
}

ms_s() { printf '%d.%01d' $(($1 / 1000)) $((($1 % 1000) / 100)); }

# Stop one guest: the monitor's "quit", then TERM, then KILL, all by the PID
# QEMU recorded (checked against its command line)
stop_guest() {
    local g=$1 pid i
    pid=$(qemu_pid "$g") || return 0
    monitor_cmd "$g" quit >/dev/null 2>&1 || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

down() {
    local g pid
    for g in "${guests[@]}"; do
        stop_guest "$g"
        # the timeout wrapper exits with QEMU; if QEMU never started, end it
        pid=$(cat "$run/$g.timeout.pid" 2>/dev/null || true)
        if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] &&
           tr '\0' ' ' <"/proc/$pid/cmdline" | grep "^timeout .*-name mrfo-roce-$g " >/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
        rm -f "$run/$g.mon" "$run/$g.qemu.pid" "$run/$g.timeout.pid"
        rm -rf "$run/$g/jobs" "$run/$g/claimed"
        rm -f "$run/$g/ready"
        rm -f "$run/$g/out/"x-*
    done
    echo "down"
}

status() {
    local g pid
    for g in "${guests[@]}"; do
        if pid=$(qemu_pid "$g"); then
            echo "$g: qemu pid $pid, $(sed -n -e 's/^status=ok$/ready,/p' \
                -e 's/^status=fail/SETUP FAILED:/p' -e 's/^uptime=\(.*\)/at uptime \1 s/p' \
                "$run/$g/ready" 2>/dev/null | xargs)"
            # carrier, rxe port state and fault tables, as the guest sees them
            ROCE_EXEC_TIMEOUT=20 vm_exec "$g" 'for i in 0 1 2; do
                    echo -n "eth$i carrier $(cat /sys/class/net/eth$i/carrier) "
                done; echo
                rdma link show | sed "s/ physical_state.*netdev/ on/"
                nft list tables | grep mrfo_ || true' 2>&1 | sed 's/^/   /' || true
        else
            echo "$g: down"
        fi
        if grep -q 'NETDEV WATCHDOG' "$run/$g.console" 2>/dev/null; then
            echo "$g: BED FAULT: a virtio-net TX queue timed out (see $run/$g.console)"
        fi
    done
}

# ---------------------------------------------------------------- jobs

# Write a job file atomically: the agent only picks up jobs/NAME.sh
submit() {
    local g=$1 name=$2 cmd=$3 dir=$run/$1
    qemu_pid "$g" >/dev/null || die "guest $g is not up"
    if [ -e "$dir/out/$name.pid" ] || [ -e "$dir/claimed/$name.sh" ] ||
       [ -e "$dir/jobs/$name.sh" ]; then
        die "job $name exists in $g"
    fi
    rm -f "$dir/out/$name".*
    {
        echo '#!/bin/bash'
        echo "# job $name for guest $g, written by vm.sh"
        # The agent runs each job as a session (and process group) leader;
        # its PID is what "signal" sends to.
        echo "echo \$\$ >/share/out/$name.pid.tmp &&" \
             "mv /share/out/$name.pid.tmp /share/out/$name.pid"
        echo "ulimit -l unlimited; ulimit -c 0"
        echo "cd /root 2>/dev/null || cd /"
        printf '%s\n' "$cmd"
    } >"$dir/jobs/.$name.tmp"
    mv "$dir/jobs/.$name.tmp" "$dir/jobs/$name.sh"
}

# Wait up to TIMEOUT s for job NAME to end; 124 if it did not (wall time:
# on a loaded machine the loop's turns take longer than their sleeps, and a
# caller's own timeout must not come first and lose the job's output)
wait_job() {
    local g=$1 name=$2 timeout=$3 dir=$run/$1 i end=$((SECONDS + $3))
    for ((i = 0; SECONDS < end; i++)); do
        [ -e "$dir/out/$name.rc" ] && break
        if ((i % 20 == 0)) && ! qemu_pid "$g" >/dev/null; then
            log "guest $g is down"
            return 125
        fi
        sleep 0.1
    done
    [ -e "$dir/out/$name.rc" ] || return 124
    return "$(cat "$dir/out/$name.rc")"
}

print_job() {
    local dir=$run/$1 name=$2
    cat "$dir/out/$name.out" 2>/dev/null || true
    cat "$dir/out/$name.err" >&2 2>/dev/null || true
}

vm_exec() {
    local g=$1 name rc=0
    shift
    check_guest "$g"
    [ $# -gt 0 ] || die "exec: no command"
    name=x-$$-$(now_ms)
    submit "$g" "$name" "$*"
    wait_job "$g" "$name" "${ROCE_EXEC_TIMEOUT:-120}" || rc=$?
    if [ $rc = 124 ]; then
        signal_job "$g" "$name" KILL >/dev/null 2>&1 || true
        log "exec in $g: timed out after ${ROCE_EXEC_TIMEOUT:-120}s: $*"
    fi
    print_job "$g" "$name"
    rm -f "$run/$g/out/$name".* "$run/$g/claimed/$name.sh" "$run/$g/jobs/$name.sh"
    return $rc
}

spawn() {
    local g=$1 name=$2 i
    shift 2
    check_guest "$g"
    check_name "$name"
    [ $# -gt 0 ] || die "spawn: no command"
    submit "$g" "$name" "$*"
    # return once the agent has started it
    for ((i = 0; i < 300; i++)); do
        [ -e "$run/$g/out/$name.pid" ] && return 0
        sleep 0.1
    done
    die "job $name was not picked up by $g within 30s"
}

# signal_job GUEST NAME [SIG]: each job runs in its own process group
signal_job() {
    local g=$1 name=$2 sig=${3:-TERM} pid
    pid=$(cat "$run/$g/out/$name.pid" 2>/dev/null) || die "no job $name in $g"
    [ -e "$run/$g/out/$name.rc" ] && { log "job $name has ended"; return 0; }
    ROCE_EXEC_TIMEOUT=30 vm_exec "$g" "kill -$sig -- -$pid"
}

# ---------------------------------------------------------------- faults

# monitor_cmd GUEST CMD...: one command on the QEMU monitor socket; prints
# the monitor's answer without its banner and prompts
monitor_cmd() {
    local g=$1
    shift
    [ -S "$run/$g.mon" ] || die "no monitor socket for $g"
    printf '%s\n' "$*" |
        timeout 10 socat -t 1 - "UNIX-CONNECT:$run/$g.mon" |
        tr -d '\r' | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/^(qemu) *//' |
        awk -v cmd="$*" '/^QEMU .* monitor/ || $0 == "" { next }
            # the monitor echoes the command as it is typed, one
            # character at a time: drop that line
            substr($0, length($0) - length(cmd) + 1) == cmd { next }
            { print }' || true
}

nft_table() { echo "mrfo_roce_drop_r$1"; }

# drop_cmd fault|restore GUEST RAIL: the ingress drop of RAIL in GUEST put
# in place or removed; "applied T" (the guest's time) in $run/drop.GUEST
drop_cmd() {
    local dev=eth$(($3 + 1)) out
    if [ "$1" = fault ]; then
        out=$(vm_exec "$2" "nft -f - <<'NFT' &&
table netdev $(nft_table "$3") {
    chain in { type filter hook ingress device \"$dev\" priority -500; policy drop; }
}
NFT
echo \"applied \$EPOCHREALTIME\"") || return 1
    else
        out=$(vm_exec "$2" "nft delete table netdev $(nft_table "$3") &&
echo \"applied \$EPOCHREALTIME\"") || return 1
    fi
    sed -n 's/^applied /applied /p' <<<"$out" >"$run/drop.$2"
}

# fault_cmd fault|restore KIND GUEST RAIL: inject a fault, or undo it
fault_cmd() {
    local action=$1 kind=$2 g=$3 r=$4 dev on p1 p2 rc
    check_guest "$g"
    check_rail "$r"
    dev=eth$((r + 1))
    case "$action/$kind" in
        fault/link|restore/link)
            on=$([ "$action" = fault ] && echo off || echo on)
            monitor_cmd "$g" set_link "r$r" "$on"
            echo "$g: set_link r$r $on" ;;
        fault/drop|fault/drop-in|restore/drop|restore/drop-in)
            if [ "$kind" = drop ]; then
                drop_cmd "$action" a "$r" & p1=$!
                drop_cmd "$action" b "$r" & p2=$!
                rc=0
                wait "$p1" || rc=1
                wait "$p2" || rc=1
                [ "$rc" = 0 ] || die "$action drop on rail $r failed"
                sort -k2 -g "$run/drop.a" "$run/drop.b" | sed -n 1p
            else
                drop_cmd "$action" "$g" "$r" || die "$action drop-in failed"
                cat "$run/drop.$g"
            fi
            rm -f "$run/drop.a" "$run/drop.b" ;;
        fault/tx-stall|fault/tx-hold)
            # a queue that sends (next to) nothing: a tbf of 8 bit/s holds
            # the rail's packets, as a NIC whose transmit queue stalled.
            # It must never drop: Linux 6.1's rxe sends a packet its own
            # host dropped again at once, in a loop (a 100 kB limit made
            # guest a's console say "soft lockup - CPU#0 stuck for 23s" and
            # the checker stop for 37 s while 3.3 million packets were
            # dropped). A full stall holds a few MB: each QP's requester
            # stops at 64 packets not freed, its responder does not
            vm_exec "$g" "tc qdisc add dev $dev root tbf rate 8bit burst 1600 limit $txhold_limit &&
echo \"applied \$EPOCHREALTIME\"" ;;
        restore/tx-stall)
            vm_exec "$g" "tc qdisc del dev $dev root" ;;
        restore/tx-hold)
            # release the held packets, wait (bounded: 30 s) until the
            # queue is empty, then remove the qdisc
            vm_exec "$g" "tc qdisc change dev $dev root tbf rate 100mbit burst 100000 limit $txhold_limit &&
echo \"applied \$EPOCHREALTIME\" &&
end=\$((SECONDS + 30))
while [ \$SECONDS -lt \$end ]; do
    case \"\$(tc -s qdisc show dev $dev)\" in *'backlog 0b 0p'*) break ;; esac
    sleep 0.2
done
tc -s qdisc show dev $dev | sed -n 's/^ *\\(Sent .*\\)/released: \\1/p'
tc qdisc del dev $dev root" ;;
        fault/rxe-delete)
            vm_exec "$g" "rdma link delete rxe$r" ;;
        restore/rxe-delete)
            vm_exec "$g" "rdma link add rxe$r type rxe netdev $dev" ;;
        *) die "unknown fault kind '$kind'" ;;
    esac
}

# ---------------------------------------------------------------- main

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    prepare) prepare ;;
    up) up ;;
    down) down ;;
    status) status ;;
    exec) [ $# -ge 2 ] || die "usage: exec a|b CMD..."; vm_exec "$@" ;;
    spawn) [ $# -ge 3 ] || die "usage: spawn a|b NAME CMD..."; spawn "$@" ;;
    wait)
        [ $# -ge 2 ] || die "usage: wait a|b NAME [TIMEOUT]"
        check_guest "$1"; check_name "$2"
        [ -e "$run/$1/out/$2.pid" ] || die "no job $2 in $1"
        rc=0; wait_job "$1" "$2" "${3:-120}" || rc=$?
        print_job "$1" "$2"
        [ -e "$run/$1/out/$2.rc" ] || log "job $2 in $1 still runs"
        exit $rc ;;
    running) [ $# -eq 2 ] || die "usage: running a|b NAME"; check_guest "$1"
             check_name "$2"; [ -e "$run/$1/out/$2.pid" ] || die "no job $2 in $1"
             [ ! -e "$run/$1/out/$2.rc" ] ;;
    out) [ $# -eq 2 ] || die "usage: out a|b NAME"; check_guest "$1"
         check_name "$2"; cat "$run/$1/out/$2.out" ;;
    signal) [ $# -ge 2 ] || die "usage: signal a|b NAME [SIG]"; check_guest "$1"
            check_name "$2"; signal_job "$@" ;;
    addr) [ $# -eq 2 ] || die "usage: addr a|b m|0|1"; addr "$@" ;;
    fault) [ $# -eq 3 ] || die "usage: fault link|drop|drop-in|tx-stall|tx-hold|rxe-delete a|b 0|1"
           fault_cmd fault "$@" ;;
    restore) [ $# -eq 3 ] || die "usage: restore link|drop|drop-in|tx-stall|tx-hold|rxe-delete a|b 0|1"
             fault_cmd restore "$@" ;;
    monitor) [ $# -ge 2 ] || die "usage: monitor a|b CMD..."; check_guest "$1"
             monitor_cmd "$@" ;;
    *) sed -n '3,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'
       [ -z "$cmd" ] || [ "$cmd" = help ] || exit 2 ;;
esac
