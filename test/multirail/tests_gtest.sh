# gtest groups of the test command (sourced by contrib/test.sh).
# Each gtest case counts as one test in the summary.

MR_GTEST=${MR_GTEST:-$MRFO_SRC/test/gtest/gtest}
MR_GTEST_RUNNER=()

# mr_gtest GROUP FILTER [NETNS]: run the gtest cases matching FILTER
mr_gtest() {
    local group=$1 filter=$2 netns=${3:-} log rc=0 n_ok n_fail n_skip
    local runner=()
    if [ -n "${MR_FILTER:-}" ] && ! [[ gtest_$group == $MR_FILTER ]]; then
        return 0
    fi
    log=$MRFO_RESULTS/gtest_$group.log
    mkdir -p "$MRFO_RESULTS"
    [ -n "$netns" ] && runner=(ip netns exec "$netns")
    # (or a command that runs it elsewhere, e.g. in a soft-RoCE guest)
    [ ${#MR_GTEST_RUNNER[@]} -gt 0 ] && runner=("${MR_GTEST_RUNNER[@]}")
    echo "[ RUN  ] gtest_$group ($filter)" >&2
    UCX_HANDLE_ERRORS=bt UCX_LOG_LEVEL=warn UCX_LOG_PRINT_ENABLE=y \
        timeout -k 10 "${MR_GTEST_TIMEOUT:-1200}" "${runner[@]}" \
        "$MR_GTEST" --gtest_filter="$filter" >"$log" 2>&1 || rc=$?
    # UCX prints a skipped case as [ SKIP ] followed by [ OK ]
    n_skip=$(grep -c '^\[     SKIP \]' "$log" || true)
    n_ok=$(grep -c '^\[       OK \]' "$log" || true)
    # (a failed case's line ends with its time; the summary repeats the
    # name, and a parameterized case's has "GetParam() = ...")
    n_fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)' "$log" || true)
    n_ok=$((n_ok - n_skip))
    if [ $rc != 0 ] && [ "$n_fail" = 0 ]; then
        n_fail=1 # crashed or timed out
    fi
    if [ $((n_ok + n_fail)) = 0 ]; then
        echo "  FAIL: no gtest case matched $filter" >&2
        n_fail=1
    fi
    mr_passed=$((mr_passed + n_ok))
    mr_failed=$((mr_failed + n_fail))
    mr_skipped=$((mr_skipped + n_skip))
    if [ "$n_fail" != 0 ]; then
        mr_failures+=("gtest_$group")
        # (none when it crashed; the test command goes on either way)
        { grep '^\[  FAILED  \]' "$log" || true; } | sort -u | head -20 >&2
        grep -E 'Caught signal|Assertion|Fatal|Bug:' "$log" | head -5 >&2 ||
            true
        # what each failed check said (the log stays on the machine that
        # ran it; CI shows only this)
        grep -A6 ': Failure$' "$log" | head -40 >&2 || true
        echo "[ FAIL ] gtest_$group: $n_ok passed, $n_fail failed (rc $rc)," \
             "log $log" >&2
    else
        echo "[ PASS ] gtest_$group: $n_ok passed, $n_skip skipped" >&2
    fi
}

# The gtests that use the network run in a namespace of their own (never on
# the host's interfaces), with many network devices, so that the readdir()
# order of /sys/class/net is (very likely) not the name order: the
# device-order test then shows the fix, not luck.
mr_gtest_devorder() {
    local ns=${MRBED_PREFIX:-mrfo}-gt i order sorted
    if [ -n "${MR_FILTER:-}" ] &&
       ! [[ gtest_tcp_device_order == $MR_FILTER ]] &&
       ! [[ gtest_lane_failover == $MR_FILTER ]] &&
       ! [[ gtest_lane_detect == $MR_FILTER ]] &&
       ! [[ gtest_lane_recover == $MR_FILTER ]] &&
       ! [[ gtest_lane_traffic == $MR_FILTER ]] &&
       ! [[ gtest_lane_by_reference == $MR_FILTER ]] &&
       ! [[ gtest_lane_wireup == $MR_FILTER ]] &&
       ! [[ gtest_lane_am_steps == $MR_FILTER ]] &&
       ! [[ gtest_lane_three == $MR_FILTER ]] &&
       ! [[ gtest_lane_version == $MR_FILTER ]] &&
       ! [[ gtest_uct_tcp_failed_in_rx == $MR_FILTER ]] &&
       ! [[ gtest_uct_tcp_canceled_rx == $MR_FILTER ]] &&
       ! [[ gtest_uct_tcp_reuse_conn_fail == $MR_FILTER ]] &&
       ! [[ gtest_uct_tcp_inherited_tx == $MR_FILTER ]] &&
       ! [[ gtest_wireup_aux_discard == $MR_FILTER ]] &&
       ! [[ gtest_tcp_peer_failure == $MR_FILTER ]] &&
       ! [[ gtest_tcp_sockaddr_err == $MR_FILTER ]]; then
        return 0
    fi
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    for ((i = 0; i < 6; i++)); do
        ip -n "$ns" link add name "d${i}x" type veth peer name "c${i}y"
        ip -n "$ns" addr add "198.18.$((200 + i)).1/24" dev "d${i}x"
        ip -n "$ns" addr add "198.18.$((200 + i)).2/24" dev "c${i}y"
        ip -n "$ns" link set dev "d${i}x" up
        ip -n "$ns" link set dev "c${i}y" up
    done
    order=$(ip netns exec "$ns" ls -U /sys/class/net | tr '\n' ' ')
    sorted=$(ip netns exec "$ns" ls /sys/class/net | tr '\n' ' ')
    echo "  readdir order: $order" >&2
    [ "$order" = "$sorted" ] &&
        echo "  note: readdir order happens to be sorted here" >&2
    mr_gtest tcp_device_order 'test_uct_tcp_device_order.*' "$ns"
    # UCT/TCP parsing after the endpoint failed in a handler (patch 0027)
    mr_gtest uct_tcp_failed_in_rx 'tcp/test_uct_tcp_failed_in_rx.*' "$ns"
    # UCT/TCP: a discarded endpoint receives nothing more (patch 0029); one
    # device is enough (each case runs 4 s, the same on every device)
    mr_gtest uct_tcp_canceled_rx 'tcp/test_uct_tcp_canceled_rx.*/0' "$ns"
    # UCT/TCP: creating an endpoint whose connection cannot be made fails
    # (patch 0030)
    mr_gtest uct_tcp_reuse_conn_fail 'tcp/test_uct_tcp_reuse_conn_fail.*' "$ns"
    # UCT/TCP: an endpoint that took over a busy socket sends its data and
    # drops it when it connects again (patch 0036, the soak's assertion)
    mr_gtest uct_tcp_inherited_tx 'tcp/test_uct_tcp_inherited_tx.*' "$ns"
    # UCP/WIREUP: a discarded auxiliary endpoint's queued wireup message is
    # released, not reported as a bug (patch 0063)
    mr_gtest wireup_aux_discard 'tcp/test_ucp_wireup_aux_discard.*' "$ns"
    # lane failover between two workers needs two devices for two lanes
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_failover 'tcp/test_ucp_multirail_failover.*' "$ns"
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_traffic 'tcp/test_ucp_multirail_traffic.*' "$ns"
    # zero-copy messages sent by reference (issue 22)
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_by_reference 'tcp/test_ucp_multirail_by_reference.*' \
        "$ns"
    # the wire version in the negotiation (issue 24)
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_version 'tcp/test_ucp_multirail_version.*' "$ns"
    # a data lane failing while wireup still connects it
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_wireup 'tcp/test_ucp_multirail_wireup*' "$ns"
    # the am lane failing at one step of a protocol (issue 4)
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_am_steps 'tcp/test_ucp_multirail_am_steps.*' "$ns"
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_detect 'tcp/test_ucp_multirail_detect*' "$ns"
    UCX_NET_DEVICES=d0x,d1x \
        mr_gtest lane_recover 'tcp/test_ucp_multirail_recover*' "$ns"
    # two failures in a row need a third lane
    UCX_NET_DEVICES=d0x,d1x,d2x \
        mr_gtest lane_three 'tcp/test_ucp_multirail_three.*' "$ns"
    # upstream tests that must not regress, in the namespace too: they
    # listen on and connect to the addresses of every interface they see
    mr_gtest tcp_peer_failure 'tcp/test_ucp_peer_failure.*' "$ns"
    mr_gtest tcp_sockaddr_err 'tcp/test_ucp_sockaddr_protocols_err*' "$ns"
    ip netns del "$ns"
}

mr_gtest_all() {
    [ -x "$MR_GTEST" ] || { echo "no gtest binary at $MR_GTEST" >&2;
                            mr_failed=$((mr_failed + 1)); return; }
    mr_gtest multirail_config 'test_ucp_multirail_config.*'
    mr_gtest failover_pool 'test_ucp_failover_pool.*'
    mr_gtest_devorder
}
