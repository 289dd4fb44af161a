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
    # while traffic runs (before the RESULT line); at teardown a peer that
    # closes its connections one by one can make a lane fail over, which is
    # harmless and only counted
    for role in client server; do
        n=$(awk '/^RESULT/ { exit } /failed \(/ { n++ } END { print n + 0 }' \
            "$MR_DIR/$role.out")
        mr_expect_eq "$role lane failovers under load" 0 "$n"
        n=$(grep -c "failed (" "$MR_DIR/$role.out" || true)
        mr_note+=" ${role}_teardown_failovers=$n"
    done
    mr_note+=" $secs s, $(nproc) CPU hog(s), r1_tx=$(mr_rail_tx "$MR_DIR/client.out" r1)"
}

# The am lane's rail dies (no failover for it until issue 4): the endpoint
# fails on both sides, promptly, with the error callback, never a hang.
# t_detect_amlane KIND BOUND
t_detect_amlane() {
    MR_STOCK_ENV=$MR_FO_ENV t_stock_fault "$1" 0 "$2"
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
    mr_run_test detect_no_false_positive_loaded t_detect_no_false_positive 20
    mr_run_test detect_amlane_linkdown_errcb t_detect_amlane down 2
    mr_run_test detect_amlane_blackhole_errcb t_detect_amlane blackhole 2
    "$MR_BED" down
}
