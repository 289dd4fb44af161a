#!/bin/bash
#
# Multi-rail test bed: two network namespaces joined by N data rails (veth
# pairs r0..rN-1) and one management link (zmgmt), with optional tbf rate limits,
# real fault injection on any rail, and cleanup by exact name.
#
# The management link is named zmgmt so that it sorts after the rails: UCX
# lists TCP devices by name (our UCT/TCP patch) and breaks ties between equal
# devices by that order, so with UCX_MAX_*_RAILS equal to the number of rails
# the data lanes are exactly the rails, and zmgmt carries only the
# client/server (CM) connection.
#
# Network rules: addresses only from 198.18.0.0/15, no default route, the
# namespaces are joined only to each other (nothing in the root namespace).
#
# Usage: bed.sh COMMAND [ARGS]
#   up [--rails N] [--rate RATE]    create the bed (N = 1..4, default 2;
#                                   RATE e.g. 500mbit, default none)
#   down                            delete the namespaces (and their links)
#   exec a|b CMD [ARGS]             run a command in namespace a or b
#   fault KIND RAIL [a|b|both]      inject a fault on rail RAIL (0..N-1;
#                                   "m": the management link, rst only);
#                                   the side defaults to a
#   restore KIND RAIL [a|b|both]    undo that fault
#   flap RAIL COUNT PERIOD [a|b]    link down/up COUNT times, PERIOD seconds
#                                   per cycle (bounded: COUNT <= 10000)
#   sysctl KEY=VALUE                set a (namespaced) sysctl on both sides
#   addr a|b RAIL                   print the address of a rail ("m": the management link)
#   order a|b                       print /sys/class/net in readdir order
#   status                          show links, addresses, qdiscs, nft rules
#
# Fault kinds:
#   down       ip link set RAIL down (carrier lost on both ends)
#   drop-in    nftables drop of everything the side receives on the rail
#              (silent: the sender sees nothing)
#   drop-out   nftables drop of everything the side sends on the rail
#              (the local sender gets EPERM)
#   drop-both  both of the above
#   blackhole  netdev-ingress drop on the rail; with side "both" on both
#              ends (silent: carrier up, no local error)
#   rst        RST every TCP connection over the rail (ss -K)
#   delete     delete the veth pair (restore re-creates it)
#
# Environment: MRBED_PREFIX (default "mrfo"), names the namespaces
# $MRBED_PREFIX-a and $MRBED_PREFIX-b. MRBED_FAULT_STAMP=FILE: "fault" writes
# to FILE (when it is empty) the wall time just before the command that
# makes the fault, for benchmarks. MRBED_FLAP_STAMP=FILE: "flap" writes to
# FILE the wall time just before its last link-up.
#
set -eEu -o pipefail

prefix=${MRBED_PREFIX:-mrfo}
case "$prefix" in
    *[!a-z0-9]*|'') echo "bad MRBED_PREFIX '$prefix'" >&2; exit 2 ;;
esac
ns_a=$prefix-a
ns_b=$prefix-b
state_dir=/run/$prefix-bed
mgmt_net=198.18.100

die() { echo "bed.sh: $*" >&2; exit 2; }

ns_of() {
    case "$1" in
        a) echo "$ns_a" ;;
        b) echo "$ns_b" ;;
        *) die "side must be a or b, not '$1'" ;;
    esac
}

sides_of() {
    case "${1:-a}" in
        a|b) echo "$1" ;;
        both) echo "a b" ;;
        *) die "side must be a, b or both, not '$1'" ;;
    esac
}

host_of() { [ "$1" = a ] && echo 1 || echo 2; }

num_rails() {
    [ -f "$state_dir/rails" ] || die "no bed is up (run: bed.sh up)"
    cat "$state_dir/rails"
}

check_rail() {
    local n
    n=$(num_rails)
    case "$1" in
        [0-9]) [ "$1" -lt "$n" ] || die "rail $1 does not exist (rails: $n)" ;;
        *) die "bad rail '$1'" ;;
    esac
}

rail_addr() { echo "198.18.$1.$(host_of "$2")"; }

ns_exists() { ip netns list | awk '{print $1}' | grep -x "$1" >/dev/null; }

# Create veth pair NAME between the namespaces, with addresses and tbf
make_link() {
    local name=$1 net=$2 rate=$3 side
    ip link add name "$name" netns "$ns_a" type veth peer name "$name" netns "$ns_b"
    for side in a b; do
        local ns
        ns=$(ns_of $side)
        ip -n "$ns" addr add "$net.$(host_of $side)/24" dev "$name"
        ip -n "$ns" link set dev "$name" up
        if [ -n "$rate" ]; then
            ip netns exec "$ns" tc qdisc replace dev "$name" root tbf \
                rate "$rate" burst 512kb latency 50ms
        fi
    done
}

cmd_up() {
    local rails=2 rate="" i side
    while [ $# -gt 0 ]; do
        case "$1" in
            --rails) rails=$2; shift 2 ;;
            --rate)  rate=$2;  shift 2 ;;
            *) die "up: unknown option '$1'" ;;
        esac
    done
    case "$rails" in [1-4]) ;; *) die "--rails must be 1..4" ;; esac
    [ "$rate" = none ] && rate=""

    cmd_down
    mkdir -p "$state_dir"
    ip netns add "$ns_a"
    ip netns add "$ns_b"
    for side in a b; do
        local ns
        ns=$(ns_of $side)
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1 >/dev/null
        ip -n "$ns" link set lo up
    done
    for ((i = 0; i < rails; i++)); do
        make_link "r$i" "198.18.$i" "$rate"
    done
    make_link zmgmt "$mgmt_net" ""
    echo "$rails" >"$state_dir/rails"
    echo "$rate"  >"$state_dir/rate"
    wait_carrier
    # no namespace has a default route: check it
    for side in a b; do
        if [ -n "$(ip -n "$(ns_of $side)" route show default)" ]; then
            die "unexpected default route in $(ns_of $side)"
        fi
    done
}

# Wait (bounded) until every link of the bed has carrier on both sides:
# UCX lists only running devices
# (only of device DEV if given)
wait_carrier() {
    local dev=${1:-} i side n_down
    for ((i = 0; i < 100; i++)); do
        n_down=0
        for side in a b; do
            n_down=$((n_down + $(ip -n "$(ns_of $side)" -br link |
                awk -v d="$dev" '$1 != "lo" && $2 != "UP" &&
                                 (d == "" || $1 ~ "^" d "(@|$)")' | wc -l)))
        done
        [ $n_down = 0 ] && return 0
        sleep 0.05
    done
    die "links did not come up within 5 s"
}

cmd_down() {
    local ns
    for ns in "$ns_a" "$ns_b"; do
        if ns_exists "$ns"; then
            # processes left in the namespace would keep it (and its
            # sockets) alive: end them first
            ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
            ip netns del "$ns"
        fi
    done
    rm -rf "$state_dir"
}

nft_table() { echo "${prefix}_$1_r$2"; }

# for_sides ACTION KIND RAIL [SIDE]: run ACTION (fault_one or restore_one)
# with KIND RAIL SIDE NS DEV for each side
for_sides() {
    local action=$1 kind=$2 rail=$3 side dev=r$3
    if [ "$rail" = m ]; then
        # the management link carries the client/server (CM) connection
        [ "$kind" = rst ] || die "the management link (m) takes only rst"
        dev=zmgmt
    else
        check_rail "$rail"
    fi
    for side in $(sides_of "${4:-a}"); do
        "$action" "$kind" "$rail" "$side" "$(ns_of "$side")" "$dev"
    done
    if [ "$action" = restore_one ]; then
        case "$kind" in down|delete) wait_carrier "r$rail" ;; esac
    fi
    return 0
}

fault_one() {
    local kind=$1 rail=$2 side=$3 ns=$4 dev=$5
    # for benchmarks: the wall time just before the first command that
    # changes the kernel's state (bash's own clock, no process to start)
    if [ -n "${MRBED_FAULT_STAMP:-}" ] && [ ! -s "$MRBED_FAULT_STAMP" ]; then
        echo "$EPOCHREALTIME" >"$MRBED_FAULT_STAMP"
    fi
    case "$kind" in
    down)
        ip -n "$ns" link set dev "$dev" down ;;
    drop-in|drop-out|drop-both)
        {
            echo "table inet $(nft_table drop "$rail") {"
            [ "$kind" != drop-out ] &&
                echo "  chain in { type filter hook input priority 0; iifname \"$dev\" drop; }"
            [ "$kind" != drop-in ] &&
                echo "  chain out { type filter hook output priority 0; oifname \"$dev\" drop; }"
            echo "}"
        } | ip netns exec "$ns" nft -f - ;;
    blackhole)
        printf '%s\n' "table netdev $(nft_table bh "$rail") {" \
            "  chain in { type filter hook ingress device \"$dev\" priority 0; policy drop; }" \
            "}" | ip netns exec "$ns" nft -f - ;;
    rst)
        # established connections to the peer's rail address only: the
        # listening sockets stay
        local peer other
        other=$([ "$side" = a ] && echo b || echo a)
        if [ "$rail" = m ]; then
            peer=$mgmt_net.$(host_of "$other")
        else
            peer=$(rail_addr "$rail" "$other")
        fi
        ip netns exec "$ns" ss -K -t dst "$peer" >/dev/null ;;
    delete)
        if ip -n "$ns" link show dev "$dev" >/dev/null 2>&1; then
            ip -n "$ns" link del dev "$dev"
        fi ;;
    *) die "unknown fault kind '$kind'" ;;
    esac
}

restore_one() {
    local kind=$1 rail=$2 side=$3 ns=$4 dev=$5
    case "$kind" in
    down)
        ip -n "$ns" link set dev "$dev" up ;;
    drop-in|drop-out|drop-both)
        ip netns exec "$ns" nft delete table inet "$(nft_table drop "$rail")" \
            2>/dev/null || true ;;
    blackhole)
        ip netns exec "$ns" nft delete table netdev "$(nft_table bh "$rail")" \
            2>/dev/null || true ;;
    rst) ;;
    delete)
        if ! ip -n "$ns_a" link show dev "$dev" >/dev/null 2>&1; then
            make_link "$dev" "198.18.$rail" "$(cat "$state_dir/rate")"
        fi ;;
    *) die "unknown fault kind '$kind'" ;;
    esac
}

cmd_flap() {
    local rail=$1 count=$2 period=$3 side=${4:-a} i half
    check_rail "$rail"
    case "$count" in ''|*[!0-9]*) die "bad count" ;; esac
    [ "$count" -le 10000 ] || die "count must be <= 10000"
    half=$(awk -v p="$period" 'BEGIN { printf "%.3f", p / 2 }')
    for ((i = 0; i < count; i++)); do
        ip -n "$(ns_of "$side")" link set dev "r$rail" down
        sleep "$half"
        if [ -n "${MRBED_FLAP_STAMP:-}" ] && [ "$i" = $((count - 1)) ]; then
            echo "$EPOCHREALTIME" >"$MRBED_FLAP_STAMP"
        fi
        ip -n "$(ns_of "$side")" link set dev "r$rail" up
        sleep "$half"
    done
}

cmd_sysctl() {
    local side
    for side in a b; do
        ip netns exec "$(ns_of $side)" sysctl -qw "$1" >/dev/null
    done
}

cmd_status() {
    local side ns
    for side in a b; do
        ns=$(ns_of $side)
        echo "== $ns"
        ip -n "$ns" -br addr
        ip netns exec "$ns" tc qdisc show | grep -v noqueue || true
        ip netns exec "$ns" nft list ruleset
    done
}

[ $# -ge 1 ] || { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, nftables)"
cmd=$1
shift
case "$cmd" in
    up)      cmd_up "$@" ;;
    down)    cmd_down ;;
    exec)    [ $# -ge 2 ] || die "exec a|b CMD"
             ns=$(ns_of "$1"); shift; exec ip netns exec "$ns" "$@" ;;
    fault)   [ $# -ge 2 ] || die "fault KIND RAIL [side]"; for_sides fault_one "$@" ;;
    restore) [ $# -ge 2 ] || die "restore KIND RAIL [side]"; for_sides restore_one "$@" ;;
    flap)    [ $# -ge 3 ] || die "flap RAIL COUNT PERIOD [side]"; cmd_flap "$@" ;;
    sysctl)  [ $# -eq 1 ] || die "sysctl KEY=VALUE"; cmd_sysctl "$1" ;;
    addr)    [ $# -eq 2 ] || die "addr a|b RAIL"
             if [ "$2" = m ]; then echo "$mgmt_net.$(host_of "$1")";
             else check_rail "$2"; rail_addr "$2" "$1"; fi ;;
    order)   ip netns exec "$(ns_of "${1:-a}")" ls -U /sys/class/net ;;
    status)  cmd_status ;;
    *)       die "unknown command '$cmd'" ;;
esac
