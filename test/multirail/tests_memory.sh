# Bounded memory on the test bed (sourced by contrib/test.sh): what the
# sender keeps for failover is bounded, whatever the receiver does.

# t_memory_stopped_receiver SECS: the receiving process is stopped (SIGSTOP)
# for SECS seconds while the sender streams the one-way APIs (tag, AM,
# stream: eager messages complete at the sender at once, so it goes on
# sending; RMA and atomics wait for the stopped peer's replies and would
# only fill the checker's window) 8-byte messages, the worst case of
# buffer against payload, then resumed; once
# with failover off and once on, on the same bed. The sender retains its
# messages until the receiver acknowledges them, up to UCX_MULTIRAIL_RETAIN
# per endpoint (counted by the buffers it holds, docs/design.md "Memory");
# then its requests wait. So the sender's peak resident set with failover on
# may exceed the one with failover off by at most RETAIN plus
# MR_MEM_SLACK_KB (the pools' partly used chunks and the module's own state);
# nothing may be lost, duplicated, reordered or corrupted, no lane may fail
# over, and the receiver must really have been stopped.
# SIZES (default 8) and ENV (more variables of both sides, failover off and
# on) vary the traffic; with UCX_MULTIRAIL_REF_THRESH in ENV the client's
# endpoint information must show messages sent by reference (which the
# sender holds no copy of: their requests wait for the acknowledgement).
t_memory_stopped_receiver() {
    local secs=$1 sizes=${2:-8} fo dir pid n rss_off rss_on retain_kb=1024
    local slack_kb=${MR_MEM_SLACK_KB:-1024} MR_PORT=$MR_PORT refs
    shift 2 || shift $#
    local env=("$@")
    "$MR_BED" up --rails 2
    for fo in n y; do
        # a port of its own: the first run's listener may linger
        MR_PORT=$((MR_PORT + 1))
        dir=$MR_DIR/failover_$fo
        mkdir -p "$dir"
        mr_server_start "$dir" 2 UCX_MULTIRAIL_FAILOVER=$fo \
            UCX_LOG_LEVEL=info "${env[@]}" -- --hang-timeout $((secs + 30)) \
            --apis tag,am,stream --sizes "$sizes" ||
            { mr_fail "server did not start"; return 0; }
        mr_client_start "$dir" 2 UCX_MULTIRAIL_FAILOVER=$fo \
            UCX_LOG_LEVEL=info "${env[@]}" -- --duration $((secs + 8)) \
            --hang-timeout $((secs + 30)) --apis tag,am,stream \
            --sizes "$sizes" --window 64 --info
        # the traffic runs, then the receiver stops for SECS seconds
        mr_wait_line "$dir/client.out" '^TL .* msgs=[1-9]' 30 ||
            mr_fail "failover=$fo: the client sent nothing"
        pid=$(pgrep -P "$(cat "$dir/server.pid")" -x mr_check || true)
        if [ -z "$pid" ]; then
            mr_fail "failover=$fo: no server process to stop"
        else
            kill -STOP "$pid"
            sleep "$secs"
            grep -q "^State:.*stopped" "/proc/$pid/status" ||
                mr_fail "failover=$fo: the server was not stopped"
            kill -CONT "$pid"
        fi
        MR_DIR=$dir mr_pair_wait "$dir"
        mr_expect_clean "$dir"
        for role in client server; do
            n=$(mr_count_running "$dir/$role.out" "failed \\(")
            mr_expect_eq "failover=$fo $role lane failovers" 0 "$n"
        done
        eval "rss_$([ $fo = y ] && echo on || echo off)=\$(mr_result \
            \"\$dir/client.out\" max_rss_kb)"
    done
    if [[ " ${env[*]} " == *" UCX_MULTIRAIL_REF_THRESH="* ]]; then
        refs=$(sed -n 's/.* \([0-9][0-9]*\) sent by reference (.*/\1/p' \
            "$MR_DIR/failover_y/client.out" | head -1)
        mr_note+=" client_by_ref=${refs:-none}"
        [ "${refs:-0}" -ge 1 ] || mr_fail "the client sent nothing by reference"
    fi
    mr_note+=" stop=${secs}s client_max_rss_kb_off=${rss_off:-?}"
    mr_note+=" on=${rss_on:-?} bound=+${retain_kb}+${slack_kb}"
    [ -n "$rss_off" ] && [ -n "$rss_on" ] ||
        { mr_fail "no peak RSS in the client's result"; return 0; }
    [ $((rss_on - rss_off)) -le $((retain_kb + slack_kb)) ] ||
        mr_fail "the sender's peak RSS grew by $((rss_on - rss_off)) kB with" \
            "failover on (bound: RETAIN ${retain_kb} kB + ${slack_kb} kB)"
}

mr_memory_all() {
    mr_run_test memory_stopped_receiver_30s t_memory_stopped_receiver 30
    # zero-copy messages of 64 KiB copied (the default): the 64 KiB buckets
    # within the bound
    mr_run_test memory_stopped_receiver_64k_30s t_memory_stopped_receiver \
        30 64k
    # zero-copy messages sent by reference (issue 22): no copy retained
    mr_run_test memory_stopped_receiver_byref_30s t_memory_stopped_receiver \
        30 64k UCX_MULTIRAIL_REF_THRESH=8k
    "$MR_BED" down
}
