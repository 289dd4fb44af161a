# Randomised soak (sourced by contrib/test.sh for a short run, and by
# contrib/soak.sh for a long one): while the checker streams every API over
# three rails with failover on, faults of random kinds hit random rails (the
# am lane's included) at random moments; each fault is undone and the rail
# must come back before the next one, so one rail is always alive. Nothing
# may be lost, duplicated, reordered or corrupted, and no error callback may
# fire. Bounded: the run lasts SECONDS, at most 100000 injections.

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

# t_soak SECONDS [RAILS]: MR_SOAK_SEED fixes the random sequence
t_soak() {
    local secs=$1 rails=${2:-3} seed=${MR_SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}
    local kinds=(rst down blackhole drop-both drop-in delete) kind rail side
    local n=0 end msgs role f b unhealed=0 env kv v
    local -A per_kind=()
    RANDOM=$((seed % 32768))
    env="$MR_FO_ENV UCX_MULTIRAIL_REPROBE_MAX_INTERVAL=1s"
    "$MR_BED" up --rails "$rails" --rate 500mbit
    MR_TIMEOUT=$((secs + 120)) mr_pair_start "$rails" "$secs" "$env" "$env" \
        --connect-timeout 30 || return 0
    sleep 2
    end=$(($(date +%s) + secs - 5))
    while [ "$(date +%s)" -lt "$end" ] && [ $n -lt 100000 ]; do
        kind=${kinds[RANDOM % ${#kinds[@]}]}
        rail=$((RANDOM % rails))
        case $kind in
            blackhole) side=both ;;
            *)         side=$( ((RANDOM % 2)) && echo a || echo b) ;;
        esac
        "$MR_BED" fault "$kind" "$rail" "$side"
        n=$((n + 1))
        per_kind[$kind]=$((${per_kind[$kind]:-0} + 1))
        # the fault lasts 0.2..1.7 s, then the rail heals
        sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.2 + (r % 150) / 100 }')"
        [ "$kind" = rst ] || "$MR_BED" restore "$kind" "$rail" "$side"
        if ! mr_soak_wait_healed; then
            unhealed=$((unhealed + 1))
            mr_fail "injection $n ($kind r$rail $side): lanes not back within 10 s"
            break
        fi
        # traffic on all rails for a moment, at a random phase
        sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.1 + (r % 50) / 100 }')"
    done
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    # a side that died has no RESULT line: its counts are 0
    msgs=0
    for kv in server:tag_recv server:am_recv server:stream_recv \
              client:rma_recv client:amo_recv; do
        v=$(mr_result "$MR_DIR/${kv%%:*}.out" "${kv#*:}")
        msgs=$((msgs + ${v:-0}))
    done
    mr_note="seed=$seed injections=$n messages_checked=$msgs"
    for kind in "${!per_kind[@]}"; do
        mr_note+=" $kind=${per_kind[$kind]}"
    done
    for role in client server; do
        read -r f b < <(mr_soak_counts "$MR_DIR/$role.out")
        mr_note+=" ${role}_failovers=$f ${role}_am_moves=$(grep -c "am lane moved" \
            "$MR_DIR/$role.out" || true)"
    done
    [ $n -ge 1 ] || mr_fail "no injection"
}

mr_soak_all() {
    mr_run_test soak_short_random_faults t_soak "${MR_SOAK_SECONDS:-60}" 3
    "$MR_BED" down
}
