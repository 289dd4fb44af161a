#!/bin/bash
#
# Failover on RDMA rails, as a benchmark (not a test): the soft-RoCE bed
# (test/roce/vm.sh, two QEMU guests with rdma_rxe, rc_verbs lanes, the CM on
# TCP), one checker pair streaming every API with UCX_MULTIRAIL_FAILOVER=y,
# and N cycles of a real fault on one rail of one guest: the fault, both
# sides fail the lane over, HOLD seconds later the fault is lifted, both
# sides take the lane back, SETTLE seconds, the next cycle. Reports p50/p99/
# max over the cycles of: fault -> lane failed over, on each side; fault ->
# first completion after the failover of an operation that was in flight at
# the fault (the client's SLOW records); lift -> lane back, on each side; and
# whether the run was clean (nothing lost, duplicated, reordered, corrupted;
# no error callback).
#
# Times: a drop's from the guest's clock when the first nftables table is
# in place (vm.sh prints it); a carrier's loss and return from the rxe port
# events of the guest that lost it (the host's clock and the guests'
# differ by up to ~0.6 s, the two guests' by less: the other side's figures
# carry that as an error).
#
# Usage: contrib/bench_roce.sh [N] [KIND:GUEST:RAIL ...]
#        default: 50 link:a:1 drop:a:1
#        KIND link (carrier) or drop (nftables in the guest, carrier up)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

n=${1:-50}
[ $# -gt 0 ] && shift
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(link:a:1 drop:a:1)

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=$MRFO_BUILD_DIR/bench-roce
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"
. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_roce.sh"
trap 'mr_roce_down' EXIT

HOLD=${MR_ROCE_BENCH_HOLD:-3}
SETTLE=${MR_ROCE_BENCH_SETTLE:-5}

# nth_wall FILE RE K: the wall time of the K-th line matching RE (1-based)
nth_wall() {
    grep -e "$2" "$1" | sed -n "$3{s/^\[\([0-9.]*\)\].*/\1/p;q}"
}
# fault_now ACTION KIND GUEST RAIL: apply or lift; prints its time
fault_now() {
    local out t
    if [ "$2" = link ]; then
        # stamped before: the monitor acts within milliseconds, but the
        # command returns a second later (socat waits for the answer)
        t=$(mr_now)
        "$MR_VM" "$1" link "$3" "$4" >/dev/null
        echo "$t"
        return 0
    fi
    out=$("$MR_VM" "$1" "$2" "$3" "$4")
    t=$(sed -n 's/^applied //p' <<<"$out")
    [ -n "$t" ] || { echo "$1 $2: no time in '$out'" >&2; return 1; }
    echo "$t"
}

# link_times EVENTS CLIENT SERVER DEV N: the times of N carrier cycles of
# DEV from the port events in EVENTS (the log of the guest that lost it)
link_times() {
    local k te tl out f
    for ((k = 1; k <= $5; k++)); do
        te=$(nth_wall "$1" "IB Async event on $4: port error" "$k")
        tl=$(nth_wall "$1" "IB Async event on $4: port active" "$k")
        out=""
        for f in "$2" "$3"; do
            out+="$(mr_elapsed "$te" "$(nth_wall "$f" \
                    "rc_verbs/$4:1 failed (" "$k")") "
        done
        for f in "$2" "$3"; do
            out+="$(mr_elapsed "$tl" "$(nth_wall "$f" \
                    "rc_verbs/$4:1 is back" "$k")") "
        done
        echo "$out$te"
    done
}

# cycles KIND GUEST RAIL: one checker pair, N cycles; a row of the table
cycles() {
    local kind=$1 g=$2 rail=$3 dev=rxe$3 tag=bench-$1-$2-$3 c role f
    local times=$MRFO_RESULTS/$1-$2-$3.times dur=$((n * (HOLD + SETTLE + 12) + 60))
    local failed="rc_verbs/$dev:1 failed (" back="rc_verbs/$dev:1 is back"
    local t_fault t_lift w line ok=1 nf nb cli srv
    MR_DIR=$MRFO_RESULTS/$1-$2-$3
    mkdir -p "$MR_DIR"
    : >"$times"
    mr_roce_pair_start "$tag" y "$dur" -- --conn sockaddr --err-mode peer \
        --slow-log 10 ||
        { echo "$tag: server did not listen" >&2; return 1; }
    cli=$(mr_roce_out a "cli-$tag")
    srv=$(mr_roce_out b "srv-$tag")
    mr_roce_wait_traffic "$tag" || { echo "$tag: no traffic" >&2; return 1; }
    sleep 3
    for ((c = 1; c <= n; c++)); do
        t_fault=$(fault_now fault "$kind" "$g" "$rail") || { ok=0; break; }
        if ! wait_count "$cli" "$failed" "$c" 20 ||
           ! wait_count "$srv" "$failed" "$c" 20; then
            echo "$tag cycle $c: not failed over on both sides" >&2
            fault_now restore "$kind" "$g" "$rail" >/dev/null || true
            ok=0
            break
        fi
        sleep "$HOLD"
        t_lift=$(fault_now restore "$kind" "$g" "$rail") || { ok=0; break; }
        if ! wait_count "$cli" "$back" "$c" 40 ||
           ! wait_count "$srv" "$back" "$c" 40; then
            echo "$tag cycle $c: the lane is not back on both sides" >&2
            ok=0
            break
        fi
        line=""
        for f in "$cli" "$srv"; do
            w=$(nth_wall "$f" "$failed" "$c")
            line+="$(mr_elapsed "$t_fault" "$w") "
        done
        for f in "$cli" "$srv"; do
            w=$(nth_wall "$f" "$back" "$c")
            line+="$(mr_elapsed "$t_lift" "$w") "
        done
        echo "$line$t_fault" >>"$times"
        sleep "$SETTLE"
    done
    # the client ends its traffic now (SIGUSR1: as if its duration had
    # passed); only the checker, not its job's shell
    "$MR_VM" exec a "pkill -USR1 -x mr_check" >/dev/null 2>&1 || true
    mr_roce_pair_wait "$tag" "$dur"
    # a carrier's loss and return are timed by the guest that lost it: its
    # rxe port error and port active events (the host's clock and the
    # guests' differ by up to ~0.6 s; the other guest's by less)
    if [ "$kind" = link ]; then
        [ "$g" = a ] && f=$MR_DIR/client.out || f=$MR_DIR/server.out
        link_times "$f" "$MR_DIR/client.out" "$MR_DIR/server.out" "$dev" \
            "$(wc -l <"$times")" >"$times.link"
        mv "$times.link" "$times"
    fi
    # the first completions, now that the client's log is complete
    while read -r a b x y t; do
        w=$(awk -v t="$t" -v a="$a" -v b="$b" \
            'BEGIN { printf "%.6f", t + ((a < b) ? a : b) }')
        echo "$a $b $x $y $(completions "$MR_DIR/client.out" "$t" "$w" |
                            cut -d' ' -f1)"
    done <"$times" >"$times.all"
    nf=$(count "$MR_DIR/client.out" "UCX  ERROR")
    nb=$(mr_result "$MR_DIR/client.out" status)/$(mr_result \
         "$MR_DIR/server.out" status)
    for k in lost dup reorder corrupt err_cb op_errors hang; do
        [ "$(mr_result "$MR_DIR/client.out" $k)" = 0 ] &&
            [ "$(mr_result "$MR_DIR/server.out" $k)" = 0 ] ||
            { nb+=" $k!"; ok=0; }
    done
    [ "$mr_rc_client$mr_rc_server" = 00 ] || ok=0
    row="| $kind, guest $g, rail $rail | $(wc -l <"$times")/$n | $nb, $nf ERROR lines |"
    for k in 1 2 5 3 4; do
        row+=" $(pcts $k "$times.all") |"
    done
    table+=$'\n'"$row"
    [ "$ok" = 1 ]
}

mr_roce_boot || die "the guests did not boot"
table="| fault | cycles | status (client/server) | client failover p50 / p99 / max (ms) | server failover | first completion of work in flight | client lane back after lift | server lane back |
|---|---|---|---|---|---|---|---|"
status=0
for spec in "${specs[@]}"; do
    IFS=: read -r kind g rail <<<"$spec"
    cycles "$kind" "$g" "$rail" || status=1
done
mr_roce_down
echo "soft-RoCE bed, rc_verbs rails, failover on, every API streaming;" \
     "$n cycles a row, fault held ${HOLD}s, ${SETTLE}s between; $(uname -r) host"
echo "$table"
exit $status
