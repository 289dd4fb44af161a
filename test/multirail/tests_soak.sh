# Randomised soak (sourced by contrib/test.sh for one short segment, and by
# contrib/soak.sh for a long sequence of them): while the checker streams
# every API with failover on, faults of random kinds hit random rails (the
# am lane's included) at random moments; each fault is undone and the rail
# must come back before the next one, so one rail is always alive. Nothing
# may be lost, duplicated, reordered or corrupted, and no error callback may
# fire. Bounded: a segment lasts SECONDS, at most 100000 injections.

# Lines "tcp/rI failed (" and "tcp/rI is back after" in FILE, as "F B"
mr_soak_counts() {
    local f=$1
    echo "$(grep -c "tcp/r[0-9] failed (.*endpoint continues" "$f" || true)" \
         "$(grep -c "tcp/r[0-9] is back after" "$f" || true)"
}

# Wait (at most 10 s) until every lane that failed over is back, both sides
mr_soak_wait_healed() {
    local i role f b ok
    for ((i = 0; i < 100; i++)); do
        ok=1
        for role in client server; do
            read -r f b < <(mr_soak_counts "$MR_DIR/$role.out")
            [ "$f" = "$b" ] || ok=0
        done
        [ $ok = 1 ] && return 0
        sleep 0.1
    done
    return 1
}

# --- Segments of the long soak (contrib/soak.sh) -----------------------------
#
# t_soak_segment RAILS SECONDS SIZES SEED: one pair of processes (a fresh
# wireup) streams every API for SECONDS over RAILS rails while faults hit:
#  - one during wireup (0..0.8 s after the client starts, before or while
#    its lanes connect),
#  - random ones (kind, rail, side, length, pause) while traffic runs; RMA
#    streams put/flush/get cycles, so faults also land in flushes, and with
#    SIZES of 1m/4m in rendezvous transfers,
#  - one at the end, -0.3..+0.5 s around the end of the traffic, while the
#    client sends its last messages, flushes and closes.
# Each fault but the last heals before the next one, so a rail is always
# alive. Appends to MR_SOAK_TIMES one line per injection that made a lane
# fail over: "KIND SECONDS" from the heal (for rst, from the fault) until
# every failed lane was back on both sides; sets mr_soak_seg_* (injections,
# messages checked, violations).
t_soak_segment() {
    local rails=$1 secs=$2 sizes=$3 seed=$4
    local kinds=(rst down blackhole drop-in drop-out drop-both delete)
    local kind rail side n=0 end env kv v role f0 f1 b t_heal t_back
    local t_start phase
    RANDOM=$((seed % 32768))
    mr_soak_seg_injections=0 mr_soak_seg_messages=0 mr_soak_seg_violations=0
    env="$MR_FO_ENV UCX_MULTIRAIL_REPROBE_MAX_INTERVAL=1s"
    "$MR_BED" up --rails "$rails" --rate 500mbit
    MR_TIMEOUT=$((secs + 120)) mr_pair_start "$rails" "$secs" "$env" "$env" \
        --connect-timeout 30 --sizes "$sizes" || return 0
    t_start=$(date +%s.%N)
    end=$(awk -v t="$t_start" -v s="$secs" 'BEGIN { printf "%d", t + s - 3 }')
    for phase in wireup running; do
        while :; do
            if [ $phase = wireup ]; then
                [ $n = 0 ] || break
                sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", (r % 80) / 100 }')"
            else
                [ "$(date +%s)" -lt "$end" ] && [ $n -lt 100000 ] || break
            fi
            kind=${kinds[RANDOM % ${#kinds[@]}]}
            rail=$((RANDOM % rails))
            case $kind in
                blackhole) side=both ;;
                *)         side=$( ((RANDOM % 2)) && echo a || echo b) ;;
            esac
            f0=$(mr_soak_fail_total)
            "$MR_BED" fault "$kind" "$rail" "$side"
            t_heal=$(mr_now)
            n=$((n + 1))
            sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.2 + (r % 150) / 100 }')"
            if [ "$kind" != rst ]; then
                "$MR_BED" restore "$kind" "$rail" "$side"
                t_heal=$(mr_now)
            fi
            if ! mr_soak_wait_healed; then
                mr_fail "injection $n ($phase: $kind r$rail $side): lanes not back within 10 s"
                break 2
            fi
            t_back=$(mr_now)
            f1=$(mr_soak_fail_total)
            [ "$f1" -gt "$f0" ] &&
                echo "$kind $(mr_elapsed "$t_heal" "$t_back")" \
                    >>"${MR_SOAK_TIMES:-/dev/null}"
            sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.1 + (r % 50) / 100 }')"
        done
    done
    # the last fault: around the end of the traffic (flush and close)
    if [ "$mr_test_ok" = 1 ]; then
        kind=${kinds[RANDOM % ${#kinds[@]}]}
        rail=$((RANDOM % rails))
        side=$([ "$kind" = blackhole ] && echo both || echo a)
        v=$(awk -v t="$t_start" -v s="$secs" -v r=$RANDOM \
            'BEGIN { printf "%.2f", t + s - 0.3 + (r % 80) / 100 }')
        sleep "$(awk -v t="$v" -v n="$(mr_now)" \
            'BEGIN { d = t - n; printf "%.2f", (d > 0 ? d : 0) }')"
        "$MR_BED" fault "$kind" "$rail" "$side"
        n=$((n + 1))
        sleep 1
        [ "$kind" = rst ] || "$MR_BED" restore "$kind" "$rail" "$side"
    fi
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for kv in server:tag_recv server:am_recv server:stream_recv \
              client:rma_recv client:amo_recv; do
        v=$(mr_result "$MR_DIR/${kv%%:*}.out" "${kv#*:}")
        mr_soak_seg_messages=$((mr_soak_seg_messages + ${v:-0}))
    done
    for role in client server; do
        for kv in lost dup reorder corrupt err_cb op_errors hang; do
            v=$(mr_result "$MR_DIR/$role.out" $kv)
            mr_soak_seg_violations=$((mr_soak_seg_violations + ${v:-0}))
        done
    done
    v=$(mr_result "$MR_DIR/client.out" peer_violations)
    mr_soak_seg_violations=$((mr_soak_seg_violations + ${v:-0}))
    mr_soak_seg_injections=$n
    mr_note="rails=$rails sizes=$sizes seed=$seed injections=$n am_late=$(mr_result "$MR_DIR/server.out" am_late)"
    mr_note+=" messages_checked=$mr_soak_seg_messages violations=$mr_soak_seg_violations"
}

# Failover lines of both sides so far
mr_soak_fail_total() {
    local f b t=0 role
    for role in client server; do
        read -r f b < <(mr_soak_counts "$MR_DIR/$role.out")
        t=$((t + f))
    done
    echo $t
}

# The test command's soak: one segment of MR_SOAK_SECONDS (default 60) on
# three rails, mixed sizes; MR_SOAK_SEED=N repeats a run's faults
mr_soak_all() {
    mr_run_test soak_short_random_faults t_soak_segment 3 \
        "${MR_SOAK_SECONDS:-60}" 8,1k,8k,64k,1m,4m \
        "${MR_SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}"
    "$MR_BED" down
}
