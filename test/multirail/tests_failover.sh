# Lane failover on the test bed (sourced by contrib/test.sh): real processes,
# real faults, every API streaming; with UCX_MULTIRAIL_FAILOVER=y a fault on
# any one rail, the am lane's included, must cost nothing.

# failover on, and the info lines that name each failed lane
MR_FO_ENV="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=${MR_LOG_LEVEL:-info}"
MR_FAULT_ARGS=()

# mr_pair_start RAILS DURATION "SERVER_ENV" "CLIENT_ENV" [mr_check args]:
# start the checker pair in MR_DIR (the env strings are split on spaces)
mr_pair_start() {
    local rails=$1 duration=$2 senv=$3 cenv=$4
    shift 4
    # shellcheck disable=SC2086
    mr_server_start "$MR_DIR" "$rails" $senv -- --hang-timeout 20 "$@" ||
        { mr_fail "server did not start"; return 1; }
    # shellcheck disable=SC2086
    mr_client_start "$MR_DIR" "$rails" $cenv -- --duration "$duration" \
        --hang-timeout 20 "$@"
}

# mr_pair_fault_run RAILS DURATION SERVER_ENV CLIENT_ENV KIND RAIL SIDE: the
# pair streams, KIND hits RAIL on SIDE 2.5 s in, and both are waited for;
# 1 if the server did not start
mr_pair_fault_run() {
    mr_pair_start "$1" "$2" "$3" "$4" || return 1
    sleep 2.5
    "$MR_BED" fault "$5" "$6" "$7"
    mr_pair_wait "$MR_DIR"
}

# Wall time of the first "lane[...] tcp/rI failed" info line in FILE
mr_failover_wall() {
    grep -m1 "tcp/$2 failed (" "$1" | sed -n 's/^\[\([0-9.]*\)\].*/\1/p'
}

# The rails the am lane moved to in FILE while traffic ran, in order
mr_am_rails() {
    awk '/^RESULT/ { exit } { print }' "$1" |
        sed -n 's/.*am lane moved from .* to lane\[[0-9]*\] \([^;]*\);.*/\1/p' |
        tr '\n' ' '
}

# Both sides moved their am lanes to the same rails (the same lane pair)
mr_expect_am_agree() {
    local c s
    c=$(mr_am_rails "$MR_DIR/client.out")
    s=$(mr_am_rails "$MR_DIR/server.out")
    [ -n "$c" ] || mr_fail "the client's am lane did not move"
    [ "$c" = "$s" ] ||
        mr_fail "the am lanes disagree: client moved to '$c', server to '$s'"
    mr_note+=" am_lane_to=${c% }"
}

# t_failover_fault RAILS KIND RAIL SIDE CONN ERRMODE [SYSCTL...]
# Extra checker arguments in the array MR_FAULT_ARGS; with MR_FAULT_BOUND
# set, each side must fail over within that many seconds; with
# MR_FAULT_IDLE=1 the rails' traffic after the fault is not checked.
t_failover_fault() {
    local rails=$1 kind=$2 rail=$3 side=$4 conn=$5 errmode=$6 MR_NET_MGMT=1
    local t_fault role w i tx
    shift 6
    [ "$conn" = address ] && MR_NET_MGMT=0
    "$MR_BED" up --rails "$rails" --rate 500mbit
    for sc in "$@"; do "$MR_BED" sysctl "$sc"; done
    mr_pair_start "$rails" 9 "$MR_FO_ENV" "$MR_FO_ENV" --conn "$conn" \
        --err-mode "$errmode" "${MR_FAULT_ARGS[@]}" || return 0
    sleep 2.5
    t_fault=$(mr_now)
    "$MR_BED" fault "$kind" "$rail" "$side"
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for role in client server; do
        mr_expect_failover_within "$role" "tcp/r$rail" "$t_fault" \
            "${MR_FAULT_BOUND:-}"
    done
    # the am lane's rail: both sides move the am lane to the same rail
    [ "$rail" = 0 ] && mr_expect_am_agree
    [ "${MR_FAULT_IDLE:-0}" = 1 ] && return 0
    # the surviving rails carry the traffic after the fault
    w=$(mr_failover_wall "$MR_DIR/client.out" "r$rail")
    for ((i = 0; i < rails; i++)); do
        [ "$i" = "$rail" ] && continue
        tx=$(mr_rail_tx_between "$MR_DIR/client.out" "r$i" "${w:-$t_fault}")
        mr_note+=" r${i}_tx_after=$tx"
        [ "$tx" -ge 5000000 ] || mr_fail "r$i carried only $tx bytes after the failover"
    done
}

# t_failover_stripe KIND SIDE [REQUIRE]: a fault on r1 between
# worker-address endpoints in err mode PEER, whose large messages move as AM
# fragments striped over both rails (data streams): as t_failover_fault,
# and with REQUIRE=1 the fragments r1 took with it were sent again on the
# am lane (design section 6), on at least one side. A silent fault always
# strands some (everything sent in the ~0.4 s before it is found); a reset
# strands only what was not acknowledged at that instant, often nothing
t_failover_stripe() {
    local kind=$1 side=$2 require=${3:-1} role n total=0
    t_failover_fault 2 "$kind" 1 "$side" address peer
    for role in client server; do
        n=$(mr_count_running "$MR_DIR/$role.out" \
            "data stream [0-9]+ lost its lane; [1-9][0-9]* fragment")
        mr_note+=" ${role}_streams_resent=$n"
        total=$((total + n))
    done
    [ "$require" = 0 ] || [ "$total" -ge 1 ] ||
        mr_fail "no data stream sent fragments again after r1 failed"
}

# t_failover_byref RAIL KIND SIDE CONN ERRMODE: t_failover_fault with
# zero-copy messages of 8 KiB and more sent by reference
# (UCX_MULTIRAIL_REF_THRESH=8k: from the user's buffers, completed when the
# peer acknowledges them); both sides print their endpoint's information
# before closing it: the client (whose traffic has the large messages) sent
# messages by reference, and neither side holds one at the end
t_failover_byref() {
    local MR_FO_ENV="$MR_FO_ENV UCX_MULTIRAIL_REF_THRESH=8k"
    local MR_FAULT_ARGS=(--info)
    t_failover_fault 2 "$2" "$1" "$3" "$4" "$5"
    mr_expect_byref
}

# Two rails fail one after the other on a three-rail bed; r0 (am lane) stays
t_failover_two_faults() {
    local role n
    "$MR_BED" up --rails 3 --rate 500mbit
    mr_pair_start 3 9 "$MR_FO_ENV" "$MR_FO_ENV" || return 0
    sleep 2.5
    "$MR_BED" fault rst 2 a
    sleep 2
    "$MR_BED" fault rst 1 b
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for role in client server; do
        n=$(mr_count_running "$MR_DIR/$role.out" "failed \\(.*endpoint continues")
        mr_expect_eq "$role lane failovers" 2 "$n"
    done
}

# t_failover_amlane_twice: on a three-rail bed the am lane's rail fails,
# then the rail the am lane moved to: the am lane moves twice, each side
# sends again what the peer had not acknowledged, nothing is lost
t_failover_amlane_twice() {
    local role n
    "$MR_BED" up --rails 3 --rate 500mbit
    mr_pair_start 3 10 "$MR_FO_ENV" "$MR_FO_ENV" || return 0
    sleep 2.5
    "$MR_BED" fault rst 0 a
    sleep 2.5
    "$MR_BED" fault rst 1 b
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for role in client server; do
        n=$(mr_count_running "$MR_DIR/$role.out" "failed \\(.*endpoint continues")
        mr_expect_eq "$role lane failovers" 2 "$n"
        n=$(mr_count_running "$MR_DIR/$role.out" "am lane moved")
        mr_expect_eq "$role am lane moves" 2 "$n"
        mr_note+=" ${role}_resent=$(grep -o "[0-9]* message(s) not acknowledged" \
            "$MR_DIR/$role.out" | awk '{s += $1} END {printf "%.0f\n", s}')"
    done
    mr_expect_am_agree
    mr_note+=" r2_tx=$(mr_rail_tx "$MR_DIR/client.out" r2)"
}

# t_failover_dead_at_start FAILOVER KIND RAIL SIDE CONN ERRMODE: the rail is
# already dead when the endpoints are created (a NIC down or a dead switch
# port on one host when the job starts). With failover on, a data lane that
# fails while wireup still connects it fails over like any other: the pair
# runs clean on the other rails. A rail down on one side only also makes the
# two sides' device lists differ; over TCP (every address reachable) a lane
# of the other side then lands on a device of this side that cannot take it,
# and its failure during wireup killed the endpoint, stock UCX's too
# (FAILOVER=n: the pair must fail, as it does without this library).
t_failover_dead_at_start() {
    local fo=$1 kind=$2 rail=$3 side=$4 conn=$5 errmode=$6 MR_NET_MGMT=1
    local env="UCX_MULTIRAIL_FAILOVER=$fo UCX_LOG_LEVEL=${MR_LOG_LEVEL:-info}"
    local i tx msgs
    [ "$conn" = address ] && MR_NET_MGMT=0
    "$MR_BED" up --rails 2 --rate 500mbit
    "$MR_BED" fault "$kind" "$rail" "$side"
    mr_pair_start 2 6 "$env" "$env" --conn "$conn" --err-mode "$errmode" ||
        return 0
    mr_pair_wait "$MR_DIR"
    if [ "$fo" = n ]; then
        # Stock behaviour is a race in wireup: usually the client's
        # endpoint fails at once (an error callback, "Connection reset by
        # remote peer"), but under CPU load (two hogs on two cores: 1 run of
        # 2) wireup settles on the live rail and the run is clean. Either
        # way nothing may be lost or duplicated and nothing may hang.
        local k cb
        cb=$(mr_result "$MR_DIR/client.out" err_cb)
        case "$cb" in
            1) mr_note+=" stock: error callback" ;;
            0) mr_note+=" stock: wireup used the live rail" ;;
            *) mr_fail "client err_cb (stock): expected 0 or 1, got '$cb'" ;;
        esac
        for k in lost dup reorder corrupt hang; do
            mr_expect_eq "client $k" 0 \
                "$(mr_result "$MR_DIR/client.out" $k)"
        done
        return 0
    fi
    mr_expect_clean "$MR_DIR"
    msgs=$(mr_result "$MR_DIR/client.out" tag_sent)
    mr_note+=" tag_msgs=$msgs"
    [ "${msgs:-0}" -ge 20 ] || mr_fail "only ${msgs:-0} tagged messages sent"
    for ((i = 0; i < 2; i++)); do
        [ "$i" = "$rail" ] && continue
        tx=$(mr_rail_tx "$MR_DIR/client.out" "r$i")
        mr_note+=" r${i}_tx=$tx"
        [ "$tx" -ge 5000000 ] || mr_fail "r$i carried only $tx bytes"
    done
}

# A peer without failover: the endpoint is stock on both sides, so a fault
# on r1 kills it as it does today, and no failover message is ever sent
t_failover_stock_peer() {
    local role
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_pair_fault_run 2 30 "UCX_MULTIRAIL_FAILOVER=n UCX_LOG_LEVEL=info" \
        "$MR_FO_ENV" rst 1 a || return 0
    for role in client server; do
        mr_expect_eq "$role err_cb" 1 "$(mr_result "$MR_DIR/$role.out" err_cb)"
        if grep -q "endpoint continues" "$MR_DIR/$role.out"; then
            mr_fail "$role failed over a lane with a stock peer"
        fi
        if grep -q "got active message id" "$MR_DIR/$role.out"; then
            mr_fail "$role received an AM it has no handler for"
        fi
    done
}

# t_cm_rst FAILOVER(y|n): the client/server (CM) connection, over the
# management link, is reset mid-run; the data lanes are healthy. Stock UCX
# takes it for the peer closing and fails the endpoint on both sides; with
# failover the endpoint lives on.
t_cm_rst() {
    local fo=$1 env role
    env="UCX_MULTIRAIL_FAILOVER=$fo UCX_LOG_LEVEL=info"
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_pair_fault_run 2 8 "$env" "$env" rst m a || return 0
    if [ "$fo" = y ]; then
        mr_expect_clean "$MR_DIR"
        for role in client server; do
            grep -q "(CM) connection was lost" "$MR_DIR/$role.out" ||
                mr_fail "$role did not report the lost CM connection"
        done
        mr_note="r1_tx=$(mr_rail_tx "$MR_DIR/client.out" r1)"
    else
        for role in client server; do
            mr_expect_eq "$role err_cb" 1 \
                "$(mr_result "$MR_DIR/$role.out" err_cb)"
        done
    fi
}

# t_close CLOSER(client|server) CM(lost|kept) MODE(peer|none): every API
# streams, then one side closes its endpoint first while the other waits
# (--linger) for the close to be reported; with CM=lost the CM connection
# was reset mid-run, so the close can only travel over the data lanes.
# Everything sent before the close must be delivered (clean RESULT lines,
# the REPORT included), and no error callback may come before the last
# message: in PEER mode the waiting side hears of the close (UCX reports a
# client/server peer's close as an error callback, which the checker counts
# only if it comes before the exchange ended), in NONE mode it hears nothing.
t_close() {
    local closer=$1 cm=$2 mode=$3 env waiter role wait_args=()
    env="UCX_MULTIRAIL_FAILOVER=y UCX_LOG_LEVEL=info"
    waiter=server
    [ "$closer" = server ] && waiter=client
    # PEER: until the close is reported; NONE: nothing is, wait a little
    wait_args=(--linger 15)
    [ "$mode" = none ] && wait_args=(--linger 3)
    "$MR_BED" up --rails 2 --rate 500mbit
    # shellcheck disable=SC2086
    if [ "$waiter" = server ]; then
        mr_server_start "$MR_DIR" 2 $env -- --hang-timeout 20 \
            --err-mode "$mode" "${wait_args[@]}" ||
            { mr_fail "server did not start"; return 0; }
        mr_client_start "$MR_DIR" 2 $env -- --duration 6 --hang-timeout 20 \
            --err-mode "$mode"
    else
        mr_server_start "$MR_DIR" 2 $env -- --hang-timeout 20 \
            --err-mode "$mode" ||
            { mr_fail "server did not start"; return 0; }
        mr_client_start "$MR_DIR" 2 $env -- --duration 6 --hang-timeout 20 \
            --err-mode "$mode" "${wait_args[@]}"
    fi
    if [ "$cm" = lost ]; then
        sleep 2.5
        "$MR_BED" fault rst m a
    fi
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    if [ "$mode" = peer ]; then
        grep -q "^EVENT .* kind=linger_end peer_closed=1" \
            "$MR_DIR/$waiter.out" ||
            mr_fail "$waiter did not hear of the $closer's close"
    else
        grep -q "^EVENT .* kind=linger_end peer_closed=0" \
            "$MR_DIR/$waiter.out" ||
            mr_fail "$waiter did not wait for the $closer's close"
    fi
    if [ "$cm" = lost ]; then
        for role in client server; do
            grep -q "(CM) connection was lost" "$MR_DIR/$role.out" ||
                mr_fail "$role did not report the lost CM connection"
        done
    fi
    mr_note="$(grep -h "kind=linger_end" "$MR_DIR/$waiter.out" |
               sed 's/.*kind=//')"
}

# Debian's Open MPI (or with MR_MPI=mpich Debian's MPICH, device ch4:ucx,
# launched by Hydra), unmodified, one rank per namespace (worker-address
# endpoints, no error handler), on our library; rail r1 is reset mid-run.
# With MR_MPI_PPN=2 two ranks run in each namespace and UCX picks its
# transports itself except cma (UCX_TLS=^cma): the ranks of one namespace
# talk over shared memory (posix/sysv), those of different namespaces over
# the rails. Each namespace is a host of its own IPC namespace (ns_agent.sh),
# so UCX does not take the other namespace's ranks for local ones; cma is
# left out because all share one PID namespace, where cma would reach them.
# MR_MPI_LOG_LEVEL sets UCX_LOG_LEVEL of the ranks (default info).
# MR_MPI_LIBDIR: where the ranks' UCX is (default our build's; the test of
# the installed packages sets the system's, with no LD_LIBRARY_PATH).
# mr_mpi_run DIR FAILOVER(y|n) SECONDS TIMEOUT
mr_mpi_run() {
    local dir=$1 fo=$2 tmo=$4 pid rc=0 t0=$SECONDS dumped=0 p
    mr_mpi_job "$@" &
    pid=$!
    # a job with failover that runs into its timeout: the ranks' stacks go
    # to the test's logs first (rank_stack.PID), to tell where it hangs
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$fo" = y ] && [ "$dumped" = 0 ] &&
           [ $((SECONDS - t0)) -ge $((tmo - 15)) ]; then
            dumped=1
            for p in $(pgrep -f "^$MRFO_PREFIX/bin/mr_mpi_check" || true); do
                timeout 10 gdb -batch -p "$p" -ex "thread apply all bt" \
                    >"$dir/rank_stack.$p" 2>&1 || true
            done
        fi
        sleep 0.5
    done
    wait "$pid" || rc=$?
    return "$rc"
}

mr_mpi_job() {
    local dir=$1 fo=$2 secs=$3 tmo=$4 bin=$MRFO_PREFIX/bin
    local ppn=${MR_MPI_PPN:-1} tls=tcp hosts agent ldpath=$MRFO_PREFIX/lib
    [ -z "${MR_MPI_LIBDIR:-}" ] || ldpath=
    [ "$ppn" = 1 ] || tls=^cma
    hosts="$("$MR_BED" addr a m),$("$MR_BED" addr b m)"
    agent="$(dirname "$MR_BED")/mpi/ns_agent.sh"
    if [ "${MR_MPI:-openmpi}" = mpich ]; then
        # MPICH 4.0.2's MPI_Finalize closes its endpoints (flush mode), then
        # waits in a PMI barrier that does not progress UCX (removed in
        # later MPICH: pmodels/mpich#6596). UCT/TCP's flush of an endpoint
        # that sent anything since its last flush sends a zero-length PUT
        # and waits for its acknowledgement, which a rank already in that
        # barrier never sends: the job can hang after its result
        # (docs/testbed.md). The ranks wait for each other outside MPI
        # before MPI_Finalize (MR_MPI_QUIET_DIR, a file per rank;
        # mr_mpi_check.c); UCX runs with its defaults otherwise, as a
        # user's job would
        rm -f "$dir"/quiet.*
        timeout -k 5 "$tmo" "$MR_BED" exec a unshare --ipc mpiexec.hydra \
            -launcher rsh -launcher-exec "$agent" -iface zmgmt \
            -hosts "$hosts" -n $((2 * ppn)) -ppn "$ppn" -genv UCX_TLS "$tls" \
            -genv UCX_NET_DEVICES r0,r1 -genv MR_MPI_QUIET_DIR "$dir" \
            -genv LD_LIBRARY_PATH "$ldpath" \
            -genv UCX_MULTIRAIL_FAILOVER "$fo" -genv UCX_LOG_LEVEL "${MR_MPI_LOG_LEVEL:-info}" \
            "$bin/mr_mpi_check.mpich" "$secs" >"$dir/mpi.out" 2>&1
        return
    fi
    timeout -k 5 "$tmo" "$MR_BED" exec a unshare --ipc mpirun.openmpi \
        --allow-run-as-root -np $((2 * ppn)) \
        --host "${hosts/,/:$ppn,}:$ppn" --mca plm_rsh_agent "$agent" \
        --mca oob_tcp_if_include zmgmt --mca pml ucx --mca pml_ucx_tls any \
        --mca pml_ucx_devices any --mca btl self --mca osc ^ucx \
        -x UCX_TLS="$tls" -x UCX_NET_DEVICES=r0,r1 \
        -x LD_LIBRARY_PATH="$ldpath" -x UCX_MULTIRAIL_FAILOVER="$fo" \
        -x UCX_LOG_LEVEL="${MR_MPI_LOG_LEVEL:-info}" "$bin/mr_mpi_check" "$secs" >"$dir/mpi.out" 2>&1
}

# t_mpi_rail_cut FAILOVER(y|n) [KIND [SIDE [RAIL]]]: the fault (default an
# RST on side a) on RAIL (default r1; r0 carries the am lane) with default
# kernel settings
t_mpi_rail_cut() {
    local fo=$1 kind=${2:-rst} side=${3:-a} rail=${4:-1} rc=0 n
    local nranks=$((2 * ${MR_MPI_PPN:-1}))
    "$MR_BED" up --rails 2 --rate 500mbit
    # an 8 s job; without failover it may hang, which 30 s bounds
    mr_mpi_run "$MR_DIR" "$fo" 8 $([ "$fo" = y ] && echo 120 || echo 30) &
    local pid=$!
    sleep 3.5
    "$MR_BED" fault "$kind" "$rail" "$side"
    wait $pid || rc=$?
    n=$(grep -c "loaded from ${MR_MPI_LIBDIR:-$MRFO_PREFIX/lib}/libucp" \
        "$MR_DIR/mpi.out" || true)
    mr_expect_eq "ranks on our library" "$nranks" "$n"
    if [ "$fo" = y ]; then
        mr_expect_eq "mpirun exit code" 0 "$rc"
        grep -q "^MPI_RESULT ok" "$MR_DIR/mpi.out" ||
            mr_fail "no MPI_RESULT ok: $(grep MPI_ "$MR_DIR/mpi.out" | tail -2)"
        # every rank has an endpoint to each rank of the other namespace
        n=$(grep -c "tcp/r$rail failed (.*endpoint continues" "$MR_DIR/mpi.out" || true)
        [ "$n" -ge "$nranks" ] ||
            mr_fail "expected every rank to fail r$rail over, got $n line(s)"
        mr_note="$(grep -o 'iterations=[0-9]*' "$MR_DIR/mpi.out") failovers=$n"
    else
        # as today: the job aborts with an MPI error or hangs (Open MPI's
        # endpoints have no error handler; which one depends on timing)
        [ "$rc" != 0 ] || mr_fail "the job succeeded with failover off"
        if grep -q "^MPI_RESULT ok" "$MR_DIR/mpi.out"; then
            mr_fail "MPI_RESULT ok with failover off"
        fi
        if [ "$rc" = 124 ]; then
            mr_note="hung (killed after 30 s)"
        else
            mr_note="mpirun exit code $rc"
        fi
    fi
    return 0
}

# t_am_order_nostripe: AM completion order. UCP calls an AM handler when a
# message's last fragment has landed; with fragments striped over lanes
# (UCX_MAX_EAGER_RAILS > 1) a message whose fragment a lane delays (a TCP
# retransmission in stock UCX, a data stream sent again with failover)
# completes after later ones, which the checker counts as am_late, not as a
# violation. With UCX_MULTIRAIL_STRIPE_AM=n every fragment takes the ordered
# am lane: then the order must hold exactly (the checker is strict) through
# repeated silent faults of a data rail that fail it over.
t_am_order_nostripe() {
    local env="$MR_FO_ENV UCX_MULTIRAIL_STRIPE_AM=n UCX_MULTIRAIL_REPROBE_MAX_INTERVAL=1s"
    local i n
    "$MR_BED" up --rails 3 --rate 500mbit
    mr_pair_start 3 30 "$env" "$env" || return 0
    for ((i = 0; i < 4; i++)); do
        sleep 3
        "$MR_BED" fault blackhole 1 both
        sleep 3
        "$MR_BED" restore blackhole 1 both
    done
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    grep -q "^START .* am_order=strict" "$MR_DIR/server.out" ||
        mr_fail "the server did not check AM order strictly"
    mr_expect_eq "server am_late" 0 "$(mr_result "$MR_DIR/server.out" am_late)"
    n=$(mr_count_running "$MR_DIR/server.out" "tcp/r1 failed \\(")
    [ "$n" -ge 1 ] || mr_fail "r1 never failed over on the server"
    mr_note="server_r1_failovers=$n am_recv=$(mr_result "$MR_DIR/server.out" am_recv)"
}

mr_failover_all() {
    mr_run_test failover_am_order_nostripe_blackhole_r1 t_am_order_nostripe
    mr_run_test failover_rst_r1_sockaddr_peer t_failover_fault 2 rst 1 a \
        sockaddr peer
    mr_run_test failover_rst_r1_target_address_none t_failover_fault 2 rst 1 b \
        address none
    mr_run_test failover_linkdown_r1_retries3 t_failover_fault 2 down 1 a \
        sockaddr peer net.ipv4.tcp_retries2=3
    mr_run_test failover_drop_both_r1_target_retries3 t_failover_fault 2 \
        drop-both 1 b sockaddr none net.ipv4.tcp_retries2=3
    mr_run_test failover_blackhole_r1_retries3 t_failover_fault 2 blackhole 1 \
        both sockaddr peer net.ipv4.tcp_retries2=3
    # With failover on, multi-fragment eager/AM data rides the am lane
    # (docs/design.md, section 6); rendezvous zcopy must still use every rail
    mr_run_test healthy_2rail_address_none_failover_on t_healthy 2 address \
        none UCX_MULTIRAIL_FAILOVER=y
    # worker-address endpoints in err mode PEER have no rendezvous lanes
    # over TCP: their large messages move as AM fragments, which stripe
    # over both rails only through the data streams (design section 6)
    mr_run_test healthy_2rail_address_peer_failover_on t_healthy 2 address \
        peer UCX_MULTIRAIL_FAILOVER=y
    mr_run_test failover_stripe_blackhole_r1_address_peer t_failover_stripe \
        blackhole both
    mr_run_test failover_stripe_rst_r1_address_peer t_failover_stripe rst a 0
    # zero-copy messages sent by reference (issue 22): the am lane's rail,
    # and a rail that fragments stripe over
    mr_run_test failover_byref_blackhole_r0_sockaddr_peer t_failover_byref 0 \
        blackhole both sockaddr peer
    mr_run_test failover_byref_linkdown_r1_address_peer t_failover_byref 1 \
        down a address peer
    mr_run_test failover_delete_r1_retries3 t_failover_fault 2 delete 1 a \
        sockaddr peer net.ipv4.tcp_retries2=3
    mr_run_test failover_3rail_two_faults t_failover_two_faults
    # the am lane's rail (r0): its ordered messages are sequenced (issue 4)
    mr_run_test failover_rst_r0_sockaddr_peer t_failover_fault 2 rst 0 a \
        sockaddr peer
    MR_FAULT_BOUND=1 mr_run_test failover_linkdown_r0_address_none \
        t_failover_fault 2 down 0 b address none
    MR_FAULT_BOUND=2 mr_run_test failover_blackhole_r0_sockaddr_none \
        t_failover_fault 2 blackhole 0 both sockaddr none
    mr_run_test failover_delete_r0_address_peer t_failover_fault 2 delete 0 a \
        address peer
    mr_run_test failover_3rail_amlane_twice t_failover_amlane_twice
    # a rail already dead when the endpoints are created
    mr_run_test failover_linkdown_r1_at_start_sockaddr \
        t_failover_dead_at_start y down 1 a sockaddr peer
    mr_run_test stock_linkdown_r1_at_start_sockaddr_fails \
        t_failover_dead_at_start n down 1 a sockaddr peer
    mr_run_test failover_linkdown_r1_at_start_target_sockaddr_none \
        t_failover_dead_at_start y down 1 b sockaddr none
    mr_run_test failover_linkdown_r1_at_start_address \
        t_failover_dead_at_start y down 1 a address peer
    mr_run_test failover_blackhole_r0_at_start_sockaddr \
        t_failover_dead_at_start y blackhole 0 both sockaddr peer
    # worker-address endpoints (no CM connection: wireup itself runs over
    # the rails; UCP sends its wireup messages on lane[1], r1, not on the am
    # lane, r0) with the am lane's rail dead, then the wireup lane's
    mr_run_test failover_blackhole_r0_at_start_address_peer \
        t_failover_dead_at_start y blackhole 0 both address peer
    mr_run_test failover_blackhole_r1_at_start_address_none \
        t_failover_dead_at_start y blackhole 1 both address none
    mr_run_test failover_stock_peer t_failover_stock_peer
    mr_run_test failover_cm_rst_endpoint_lives t_cm_rst y
    mr_run_test stock_cm_rst_kills_endpoint t_cm_rst n
    # a peer's close, with and without its CM connection (issue 24)
    local closer cm mode
    for closer in client server; do
        for cm in lost kept; do
            for mode in peer none; do
                mr_run_test "failover_close_${closer}_first_cm_${cm}_${mode}" \
                    t_close "$closer" "$cm" "$mode"
            done
        done
    done
    mr_run_test mpi_rail_cut_failover_on t_mpi_rail_cut y
    mr_run_test mpi_rail_cut_failover_off t_mpi_rail_cut n
    # found by a link event, and by TCP_USER_TIMEOUT + probes (issue 5)
    mr_run_test mpi_rail_linkdown_failover_on t_mpi_rail_cut y down a
    mr_run_test mpi_rail_blackhole_failover_on t_mpi_rail_cut y blackhole both
    mr_run_test mpi_amlane_rail_cut_failover_on t_mpi_rail_cut y rst a 0
    # two ranks per namespace: shared memory within, the rails between
    # (they found the UCT/TCP crash fixed by patch 0035)
    MR_MPI_PPN=2 mr_run_test mpi_2ppn_rail_cut_failover_on t_mpi_rail_cut y
    MR_MPI_PPN=2 mr_run_test mpi_2ppn_amlane_rail_blackhole_failover_on \
        t_mpi_rail_cut y blackhole both 0
    # Debian's MPICH (ch4:ucx) likewise
    MR_MPI=mpich mr_run_test mpich_rail_cut_failover_on t_mpi_rail_cut y
    MR_MPI=mpich mr_run_test mpich_rail_cut_failover_off t_mpi_rail_cut n
    MR_MPI=mpich mr_run_test mpich_amlane_rail_blackhole_failover_on \
        t_mpi_rail_cut y blackhole both 0
    # (no MPICH run with two ranks per namespace: MPICH 4.0.2's MPI_Finalize
    # hangs there without any fault, on Debian's own libucx0 too; see
    # docs/testbed.md)
    "$MR_BED" down
}
