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

# t_detect RAILS KIND RAIL SIDE CONN ERRMODE LOAD(busy|idle)
t_detect() {
    local rails=$1 kind=$2 rail=$3 side=$4 conn=$5 errmode=$6 load=$7
    local MR_NET_MGMT=1 t_fault role w dt sizes=() i tx
    [ "$conn" = address ] && MR_NET_MGMT=0
    [ "$load" = idle ] && sizes=(--sizes "$MR_IDLE_SIZES")
    "$MR_BED" up --rails "$rails" --rate 500mbit
    mr_pair_start "$rails" 8 "$MR_FO_ENV" "$MR_FO_ENV" --conn "$conn" \
        --err-mode "$errmode" "${sizes[@]}" || return 0
    sleep 2.5
    t_fault=$(mr_now)
    "$MR_BED" fault "$kind" "$rail" "$side"
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for role in client server; do
        w=$(mr_failover_wall "$MR_DIR/$role.out" "r$rail")
        if [ -z "$w" ]; then
            mr_fail "$role did not fail over r$rail"
            continue
        fi
        dt=$(mr_elapsed "$t_fault" "$w")
        mr_note+=" ${role}_after=${dt}s($(grep -m1 -o "tcp/r$rail failed ([^)]*)" \
            "$MR_DIR/$role.out" | sed 's/.*failed (//; s/)$//; s/ /_/g'))"
        awk -v d="$dt" -v b="$MR_DETECT_BOUND" 'BEGIN { exit !(d < b) }' ||
            mr_fail "$role took ${dt}s to fail over r$rail (bound ${MR_DETECT_BOUND}s)"
    done
    [ "$load" = idle ] && return 0
    w=$(mr_failover_wall "$MR_DIR/client.out" "r$rail")
    for ((i = 0; i < rails; i++)); do
        [ "$i" = "$rail" ] && continue
        tx=$(mr_rail_tx_between "$MR_DIR/client.out" "r$i" "${w:-$t_fault}")
        [ "$tx" -ge 5000000 ] || mr_fail "r$i carried only $tx bytes after the failover"
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
    "$MR_BED" down
}
