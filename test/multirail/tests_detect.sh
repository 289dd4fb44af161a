# Detection of a dead rail with default kernel settings (sourced by
# contrib/test.sh): no tcp_retries2 tweak, so without the rail monitor a
# silent fault would hang the lane for ~15 minutes. Link events catch a
# device that goes down or away; TCP_USER_TIMEOUT a busy silent lane; lane
# probes an idle one.

# Detection must take well under this (seconds); the figures are reported,
# the benchmark (contrib/bench_detect.sh) measures percentiles
MR_DETECT_BOUND=${MR_DETECT_BOUND:-5}

# Sizes that keep r1 idle: with failover on, eager data rides the am lane
# (r0), and r1 carries only rendezvous data
MR_IDLE_SIZES=8,64,512,4k

# t_detect RAILS KIND RAIL SIDE CONN ERRMODE LOAD(busy|idle): a fault with
# default kernel settings, detected within MR_DETECT_BOUND seconds
t_detect() {
    local load=$7 MR_FAULT_BOUND=$MR_DETECT_BOUND MR_FAULT_IDLE=0
    local MR_FAULT_ARGS=()
    if [ "$load" = idle ]; then
        MR_FAULT_ARGS=(--sizes "$MR_IDLE_SIZES")
        MR_FAULT_IDLE=1
    fi
    t_failover_fault "$1" "$2" "$3" "$4" "$5" "$6"
}

# t_detect_no_false_positive SECS: saturated rails and a CPU hog on every
# core for SECS seconds: no lane may fail over
t_detect_no_false_positive() {
    local secs=$1 hogs=() i role n
    "$MR_BED" up --rails 2 --rate 500mbit
    for ((i = 0; i < $(nproc); i++)); do
        timeout -k 1 "$((secs + 15))" sh -c 'while :; do :; done' &
        hogs+=($!)
    done
    mr_pair_start 2 "$secs" "$MR_FO_ENV" "$MR_FO_ENV"
    [ -f "$MR_DIR/client.pid" ] && mr_pair_wait "$MR_DIR"
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
    mr_expect_clean "$MR_DIR"
    # while traffic runs; teardown failovers are only counted
    for role in client server; do
        n=$(mr_count_running "$MR_DIR/$role.out" "failed \\(")
        mr_expect_eq "$role lane failovers under load" 0 "$n"
        n=$(grep -c "failed (" "$MR_DIR/$role.out" || true)
        mr_note+=" ${role}_teardown_failovers=$n"
    done
    mr_note+=" $secs s, $(nproc) CPU hog(s), r1_tx=$(mr_rail_tx "$MR_DIR/client.out" r1)"
}

# t_detect_stall SECS: the server makes no UCP call for SECS seconds in the
# middle of the traffic (a compute phase) while the client sends eager
# messages: the server's sockets fill and the client's connections wait on a
# closed window for that long. Linux aborts such a connection once
# TCP_USER_TIMEOUT has passed, even while the peer answers the window probes,
# unless the transport's zero-window guard takes the option off
# (docs/design.md, "A stalled receiver"). No lane may fail over, nothing may
# be lost, and the windows must really have closed (the server's kernel
# counts zero-window advertisements; a fixed 64 KiB receive buffer makes it
# certain) with the guard acting on the client.
t_detect_stall() {
    local secs=$1 n side zw
    "$MR_BED" up --rails 2 --rate 500mbit
    for side in a b; do "$MR_BED" exec "$side" nstat -n >/dev/null 2>&1; done
    mr_pair_start 2 $((secs + 6)) "$MR_FO_ENV UCX_TCP_RCVBUF=64k" "$MR_FO_ENV" \
        --apis stream,tag,am --sizes 8k,64k --stall "$secs@2" || return 0
    mr_pair_wait "$MR_DIR"
    for side in a b; do
        "$MR_BED" exec "$side" nstat 2>/dev/null |
            grep -E "Abort|Prune|RcvQDrop|Collapse|ZeroWindow|TCPTimeouts" \
                >"$MR_DIR/nstat-$side.txt" || true
    done
    mr_expect_stall_survived "$MR_DIR"
    n=$(awk '$1 == "TcpExtTCPToZeroWindowAdv" { print $2 }' \
            "$MR_DIR/nstat-b.txt")
    [ "${n:-0}" -gt 0 ] ||
        mr_fail "the server never advertised a zero window"
    zw=$(sed -n 's/.*closed window suspended TCP_USER_TIMEOUT \([0-9]*\).*/\1/p' \
             "$MR_DIR/client.out" | awk '{ s += $1 } END { printf "%.0f\n", s }')
    [ "$zw" -gt 0 ] ||
        mr_fail "the client's zero-window guard never acted"
    mr_note+=" stall=${secs}s zero_window_adv=${n:-0} guard_suspended=$zw"
}

# The am lane's rail dies (no failover for it until issue 4): the endpoint
# fails on both sides, promptly, with the error callback, never a hang.
# t_detect_all_dead KIND BOUND: both rails fail at once; with failover on,
# the endpoint fails when its last lane does, with the error callback on
# both sides within BOUND seconds, no hang, nothing lost
t_detect_all_dead() {
    MR_STOCK_ENV=$MR_FO_ENV MR_FAULT_RAILS="0 1" t_stock_fault "$1" 0 "$2"
}

# Wait (at most SEC seconds) until FILE has a line matching the extended
# regex RE
mr_wait_line() {
    local file=$1 re=$2 sec=$3 i
    for ((i = 0; i < sec * 10; i++)); do
        grep -qE "$re" "$file" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# Lines of FILE logged before wall time T that match the extended regex RE
mr_lines_before() {
    MR_RE=$3 awk -v t="$2" '
        match($0, /^\[[0-9.]+\]/) && substr($0, 2, RLENGTH - 2) + 0 < t + 0 &&
            $0 ~ ENVIRON["MR_RE"] { n++ }
        END { print n + 0 }' "$1"
}

# Endpoints a rail event of FILE concerned, from the info lines: the first
# endpoint's line, then a summary "... failed on N lane(s)" (or "is back
# on N") when there were more. WHAT is "failed" or "is back"
mr_event_eps() {
    local file=$1 rail=$2 what=$3 n
    n=$(sed -n "s/.*tcp\/$rail $what on \([0-9]*\) lane(s).*/\1/p" \
        "$file" | head -1)
    if [ -z "$n" ]; then
        n=$(grep -c "tcp/$rail $what \(after\|(\)" "$file" || true)
    fi
    echo "$n"
}

# t_detect_many_eps N KIND SIDE: N more idle endpoints between the pair
# (worker-address); a fault on r1 must fail r1 over on every endpoint of
# both sides, cleanly, and r1 must come back on every one when it heals.
# The log scales: per side, one rail event is the first endpoint's info line
# and one summary with the count (the others at debug level), for the
# failure and for the return, and the worker's summary at close counts
# every lane failure and return. Notes the first failover, how long the
# event took, and r1's idle traffic before the fault (probes are per rail
# and peer: it must not grow with N).
t_detect_many_eps() {
    local n=$1 kind=$2 side=$3 MR_NET_MGMT=0 t t_stop role f cnt first within i
    local args=(--conn address --extra-eps "$n" --sizes 8,64,512
                --hang-timeout 30 --connect-timeout 60)
    ulimit -n 20000 2>/dev/null || true
    "$MR_BED" up --rails 2 --rate 500mbit
    # shellcheck disable=SC2086
    mr_server_start "$MR_DIR" 2 $MR_FO_ENV -- "${args[@]}" ||
        { mr_fail "server did not start"; return 0; }
    # shellcheck disable=SC2086
    mr_client_start "$MR_DIR" 2 $MR_FO_ENV -- "${args[@]}" --duration 120
    mr_wait_line "$MR_DIR/client.out" "^EXTRA_EPS" 60 ||
        mr_fail "the client's extra endpoints were not connected within 60 s"
    sleep 4
    t=$(mr_now)
    "$MR_BED" fault "$kind" 1 "$side"
    for role in client server; do
        mr_wait_line "$MR_DIR/$role.out" "tcp/r1 failed on [0-9]* lane" 30 ||
            mr_fail "$role: no summary of the r1 failure within 30 s"
    done
    "$MR_BED" restore "$kind" 1 "$side"
    for role in client server; do
        mr_wait_line "$MR_DIR/$role.out" "tcp/r1 is back on [0-9]* lane" 30 ||
            mr_fail "$role: no summary of r1's return within 30 s"
    done
    # at the close, the peer closing its endpoints first fails lanes over
    # (and is reported as an error of the idle ones): not counted below
    t_stop=$(mr_now)
    kill -USR1 "$(pgrep -f "^$MR_CHECK --client .*--port $MR_PORT( |\$)" |
        head -1)" 2>/dev/null || mr_fail "no client to stop"
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for role in client server; do
        f=$MR_DIR/$role.out
        mr_expect_eq "$role endpoints that failed r1 over" $((n + 1)) \
            "$(mr_event_eps "$f" r1 failed)"
        mr_expect_eq "$role endpoints r1 came back on" $((n + 1)) \
            "$(mr_event_eps "$f" r1 "is back")"
        # info lines of the two events: the first endpoint's and a count
        cnt=$(mr_lines_before "$f" "$t_stop" "tcp/r1 (failed|is back)")
        mr_expect_eq "$role info lines about r1" 4 "$cnt"
        cnt=$(mr_lines_before "$f" "$t_stop" "INFO  .*(am lane moved|data stream)")
        [ "$cnt" -le 2 ] || mr_fail "$role: $cnt info lines about streams"
        cnt=$(sed -n "s/.*failover summary: \([0-9]*\) lane failure(s), $((n + 1)) lane(s) back.*/\1/p" "$f")
        [ "${cnt:-0}" -ge $((n + 1)) ] ||
            mr_fail "$role: no worker summary with >= $((n + 1)) failures and $((n + 1)) returns"
        first=$(grep -m1 "tcp/r1 failed (" "$f" | sed -n 's/^\[\([0-9.]*\)\].*/\1/p')
        within=$(sed -n 's/.*tcp\/r1 failed on [0-9]* lane(s) within \([0-9.]*\) s.*/\1/p' "$f")
        [ -n "$first" ] || continue
        mr_note+=" ${role}_first=$(mr_elapsed "$t" "$first")s ${role}_within=${within}s"
        mr_note+=" ${role}_info_lines=$(grep -c "UCX  INFO" "$f" || true)"
        mr_note+=" ${role}_r1_idle_tx=$(grep '^TL' "$f" | awk -v t="$t" '
            { for (i = 2; i <= NF; i++) { split($i, kv, "=")
                  if (kv[1] == "wall") w = kv[2]; if (kv[1] == "r1_tx") v = kv[2] }
              if (w < t && w > t - 3) { s += v; k++ } }
            END { printf "%.0fB/s", k ? s / (k * 0.5) : -1 }')"
    done
}

# t_detect_asleep KIND SIDE CONN ERRMODE: both processes sleep on the
# worker's event fd (as in ucp_worker_wait()) with r1 idle when it dies: the
# library wakes them (probe rounds, link events), so the fault is found
# within MR_ASLEEP_BOUND seconds, not when they next progress (after their
# sleep)
MR_ASLEEP_BOUND=${MR_ASLEEP_BOUND:-2}
t_detect_asleep() {
    local kind=$1 side=$2 conn=$3 errmode=$4 MR_NET_MGMT=1
    local role f w t_end t_fault dt wk i
    [ "$conn" = address ] && MR_NET_MGMT=0
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_pair_start 2 2 "$MR_FO_ENV" "$MR_FO_ENV" --conn "$conn" \
        --err-mode "$errmode" --sizes "$MR_IDLE_SIZES" --sleep 6 || return 0
    for ((i = 0; i < 200; i++)); do
        [ -n "$(mr_event_wall "$MR_DIR/client.out" sleep_start 2>/dev/null)" ] &&
            [ -n "$(mr_event_wall "$MR_DIR/server.out" sleep_start 2>/dev/null)" ] && break
        sleep 0.1
    done
    sleep 1
    t_fault=$(mr_now)
    "$MR_BED" fault "$kind" 1 "$side"
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for role in client server; do
        f=$MR_DIR/$role.out
        w=$(mr_failover_wall "$f" r1)
        t_end=$(mr_event_wall "$f" sleep_end)
        if [ -z "$w" ] || [ -z "$t_end" ]; then
            mr_fail "$role: no failover of r1 ('$w') or no sleep_end ('$t_end')"
            continue
        fi
        dt=$(mr_elapsed "$t_fault" "$w")
        wk=$(grep -m1 "kind=sleep_end" "$f" |
             sed -n 's/.*wakeups=\([0-9]*\).*/\1/p')
        mr_note+=" ${role}_failover_after=${dt}s ${role}_wakeups=$wk"
        awk -v w="$w" -v e="$t_end" 'BEGIN { exit !(w < e) }' ||
            mr_fail "$role failed r1 over only after its sleep"
        awk -v d="$dt" -v b="$MR_ASLEEP_BOUND" 'BEGIN { exit !(d < b) }' ||
            mr_fail "$role took ${dt}s (bound ${MR_ASLEEP_BOUND}s)"
    done
}

mr_detect_all() {
    mr_run_test detect_linkdown_r1_busy t_detect 2 down 1 a sockaddr peer busy
    mr_run_test detect_linkdown_r1_idle_address_none t_detect 2 down 1 b \
        address none idle
    mr_run_test detect_delete_r1_busy t_detect 2 delete 1 a sockaddr peer busy
    mr_run_test detect_drop_both_r1_busy t_detect 2 drop-both 1 b address none \
        busy
    mr_run_test detect_drop_in_r1_both_ends_busy t_detect 2 drop-in 1 both \
        sockaddr peer busy
    mr_run_test detect_blackhole_r1_idle t_detect 2 blackhole 1 both sockaddr \
        peer idle
    mr_run_test detect_drop_out_r1_idle_address_none t_detect 2 drop-out 1 a \
        address none idle
    mr_run_test detect_delete_r1_idle t_detect 2 delete 1 a sockaddr peer idle
    mr_run_test detect_drop_out_r1_busy t_detect 2 drop-out 1 a sockaddr peer \
        busy
    mr_run_test detect_drop_both_r1_idle_address_none t_detect 2 drop-both 1 b \
        address none idle
    mr_run_test detect_blackhole_r1_busy t_detect 2 blackhole 1 both sockaddr \
        peer busy
    mr_run_test detect_no_false_positive_loaded t_detect_no_false_positive 20
    mr_run_test detect_no_false_positive_receiver_stall t_detect_stall 3
    mr_run_test detect_no_false_positive_receiver_stall_long t_detect_stall 8
    mr_run_test detect_asleep_blackhole_r1 t_detect_asleep blackhole both \
        sockaddr peer
    mr_run_test detect_asleep_linkdown_r1_address_none t_detect_asleep down b \
        address none
    mr_run_test detect_256eps_blackhole_r1_idle_logs t_detect_many_eps 255 \
        blackhole both
    mr_run_test detect_all_rails_down_errcb t_detect_all_dead down 2
    mr_run_test detect_all_rails_blackhole_errcb t_detect_all_dead blackhole 2
    "$MR_BED" down
}
