# Foundation tests on the test bed (sourced by contrib/test.sh): the build is
# a drop-in library, the knobs exist, the checker catches what it must, and
# with UCX_MULTIRAIL_FAILOVER=n the behaviour is today's (stock) behaviour.

MR_DEBIAN_LIBDIR=${MR_DEBIAN_LIBDIR:-/usr/lib/x86_64-linux-gnu}

# --- the library is a drop-in for Debian's libucx0 -------------------------

t_dropin_abi() {
    local lib ours deb
    for lib in libucp.so.0 libucs.so.0 libuct.so.0 libucm.so.0; do
        ours=$MRFO_PREFIX/lib/$lib
        deb=$MR_DEBIAN_LIBDIR/$lib
        [ -e "$deb" ] || { mr_fail "Debian's $deb is missing (libucx0)"; continue; }
        mr_expect_eq "$lib soname" \
            "$(objdump -p "$deb" | awk '/SONAME/ {print $2}')" \
            "$(objdump -p "$ours" | awk '/SONAME/ {print $2}')"
        # every symbol Debian exports, we export (same versions)
        nm -D --defined-only "$deb" | awk '{print $NF}' | sort -u >"$MR_DIR/$lib.deb"
        nm -D --defined-only "$ours" | awk '{print $NF}' | sort -u >"$MR_DIR/$lib.ours"
        local missing
        missing=$(comm -23 "$MR_DIR/$lib.deb" "$MR_DIR/$lib.ours" | head -5)
        [ -z "$missing" ] || mr_fail "$lib lacks Debian's symbols: $missing"
    done
}

t_ucx_info_knobs() {
    local out knob
    out=$("$MRFO_PREFIX/bin/ucx_info" -cf 2>&1)
    for knob in FAILOVER PROBE_INTERVAL PROBE_TIMEOUT REPROBE_INTERVAL \
                REPROBE_MAX_INTERVAL REPROBE_MAX_ATTEMPTS; do
        grep -q "^UCX_MULTIRAIL_$knob=" <<<"$out" ||
            mr_fail "ucx_info -cf does not list UCX_MULTIRAIL_$knob"
    done
    grep -q "^UCX_MULTIRAIL_FAILOVER=n$" <<<"$out" ||
        mr_fail "UCX_MULTIRAIL_FAILOVER default is not n"
    grep -q "Keep an endpoint alive when one of its rails" <<<"$out" ||
        mr_fail "ucx_info -cf has no doc string for UCX_MULTIRAIL_FAILOVER"
    # Debian's own ucx_info, unmodified, on our library
    out=$(LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=y \
          /usr/bin/ucx_info -c 2>&1)
    grep -q "^UCX_MULTIRAIL_FAILOVER=y$" <<<"$out" ||
        mr_fail "Debian's ucx_info on our library does not show the knob"
    # (ldd's whole output first: "ldd | grep -q" fails under pipefail when
    # grep exits at its first match and ldd gets SIGPIPE)
    out=$(LD_LIBRARY_PATH=$MRFO_PREFIX/lib ldd /usr/bin/ucx_info 2>&1)
    grep -q "libucp.so.0 => $MRFO_PREFIX/lib/libucp.so.0" <<<"$out" ||
        mr_fail "Debian's ucx_info did not load our libucp.so.0"
}

# The site-wide switch: contrib/ucx.conf.example in a configuration
# directory turns failover on (Debian's ucx_info on our library shows it),
# the environment overrides the file, and a pair of checkers started with
# only the file (no UCX_MULTIRAIL_* in their environment) fails a reset rail
# over and ends clean
t_ucx_conf() {
    local dir=$MR_DIR/conf out
    mkdir -p "$dir"
    cp "$MR_TOP/contrib/ucx.conf.example" "$dir/ucx.conf"
    out=$(UCX_CONFIG_DIR=$dir LD_LIBRARY_PATH=$MRFO_PREFIX/lib \
          /usr/bin/ucx_info -c 2>&1)
    grep -x "UCX_MULTIRAIL_FAILOVER=y" <<<"$out" >/dev/null ||
        mr_fail "the file did not turn failover on"
    out=$(UCX_CONFIG_DIR=$dir UCX_MULTIRAIL_FAILOVER=n \
          LD_LIBRARY_PATH=$MRFO_PREFIX/lib /usr/bin/ucx_info -c 2>&1)
    grep -x "UCX_MULTIRAIL_FAILOVER=n" <<<"$out" >/dev/null ||
        mr_fail "the environment did not override the file"
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_pair_fault_run 2 6 "UCX_CONFIG_DIR=$dir UCX_LOG_LEVEL=info" \
        "UCX_CONFIG_DIR=$dir UCX_LOG_LEVEL=info" rst 1 a || return 0
    mr_expect_clean "$MR_DIR"
    grep -q "tcp/r1 failed (" "$MR_DIR/client.out" ||
        grep -q "tcp/r1 failed (" "$MR_DIR/server.out" ||
        mr_fail "no side failed r1 over"
}

# A wrong knob value, or a combination failover does not support, stops
# ucp_init with UCX's clear error, and no traffic. Each item is
# "VAR=VALUE[,VAR=VALUE]:what the error must name"
t_bad_knob_values() {
    local kv err rc name envs
    for kv in "UCX_MULTIRAIL_FAILOVER=maybe:MULTIRAIL_FAILOVER" \
              "UCX_MULTIRAIL_PROBE_TIMEOUT=soon:MULTIRAIL_PROBE_TIMEOUT" \
              "UCX_MULTIRAIL_PROBE_TIMEOUT=50ms:UCX_MULTIRAIL_PROBE_TIMEOUT" \
              "UCX_MULTIRAIL_REPROBE_MAX_ATTEMPTS=0:REPROBE_MAX_ATTEMPTS" \
              "UCX_MULTIRAIL_RETAIN=lots:MULTIRAIL_RETAIN" \
              "UCX_MULTIRAIL_RETAIN=1k:UCX_MULTIRAIL_RETAIN" \
              "UCX_MULTIRAIL_RETAIN_WORKER=512k:UCX_MULTIRAIL_RETAIN_WORKER (524288 bytes) must not be smaller" \
              "UCX_MULTIRAIL_RETAIN_WORKER=auto:UCX_MULTIRAIL_RETAIN_WORKER must be a size" \
              "UCX_MULTIRAIL_FAILOVER=y,UCX_PROTO_ENABLE=y:UCX_MULTIRAIL_FAILOVER=y does not work with UCX_PROTO_ENABLE=y"; do
        name=${kv%%:*}
        IFS=, read -r -a envs <<<"$name"
        err=$MR_DIR/${name//,/_}.err
        rc=0
        # UCX logs to stdout by default
        env LD_LIBRARY_PATH="$MRFO_PREFIX/lib" "${envs[@]}" \
            timeout 20 "$MR_CHECK" --server --port "$MR_PORT" \
            >"$err" 2>&1 || rc=$?
        mr_expect_eq "$name: exit code" 4 "$rc"
        grep -q "${kv#*:}" "$err" ||
            mr_fail "$name: the error does not name ${kv#*:}: $(head -2 "$err")"
    done
    # proto v2 alone, and failover alone, still start
    for name in UCX_PROTO_ENABLE=y UCX_MULTIRAIL_FAILOVER=y; do
        rc=0
        env LD_LIBRARY_PATH="$MRFO_PREFIX/lib" "$name" \
            "$MRFO_PREFIX/bin/ucx_info" -u t -e >"$MR_DIR/$name.ok" 2>&1 ||
            rc=$?
        mr_expect_eq "$name alone: ucx_info exit code" 0 "$rc"
    done
}

# --- the bed's faults do what they say --------------------------------------

# mr_reach RAIL: can side a reach side b over the rail (ICMP, 1 s)?
mr_reach() {
    "$MR_BED" exec a ping -c 1 -W 1 -q "$("$MR_BED" addr b "$1")" >/dev/null 2>&1
}

t_bed_faults() {
    local kind side
    "$MR_BED" up --rails 2
    for kind in down drop-in drop-out drop-both blackhole delete; do
        for side in a b; do
            mr_reach 1 || mr_fail "$kind/$side: r1 unreachable before the fault"
            "$MR_BED" fault "$kind" 1 "$side"
            ! mr_reach 1 || mr_fail "$kind/$side: r1 still reachable"
            mr_reach 0 || mr_fail "$kind/$side: r0 broken by a fault on r1"
            "$MR_BED" restore "$kind" 1 "$side"
            sleep 0.2
            mr_reach 1 || mr_fail "$kind/$side: r1 not healed by restore"
        done
    done
    "$MR_BED" fault blackhole 1 both
    ! mr_reach 1 || mr_fail "blackhole/both: r1 still reachable"
    "$MR_BED" restore blackhole 1 both
    mr_reach 1 || mr_fail "blackhole/both: r1 not healed"
    # a bounded flap ends with the link up
    "$MR_BED" flap 1 3 0.2
    mr_reach 1 || mr_fail "r1 not up after a flap"
    # no default route, only 198.18.0.0/15 addresses
    for side in a b; do
        if [ -n "$("$MR_BED" exec "$side" ip route show default)" ]; then
            mr_fail "default route in side $side"
        fi
        if "$MR_BED" exec "$side" ip -4 -o addr show | awk '{print $4}' |
               grep -v '^127\.' | grep -v '^198\.1[89]\.' >/dev/null; then
            mr_fail "address outside 198.18.0.0/15 on side $side"
        fi
    done
    "$MR_BED" down
    if ip netns list | grep "^${MRBED_PREFIX:-mrfo}-[ab]\b" >/dev/null; then
        mr_fail "namespaces left after down"
    fi
}

# --- the checker catches each kind of violation -----------------------------

t_checker_selftest() {
    local kind=$1 key=$2
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_server_start "$MR_DIR" 2 -- --hang-timeout 10 ||
        { mr_fail "server did not start"; return; }
    mr_client_start "$MR_DIR" 2 -- --apis tag --sizes 8,1k,64k --count 60 \
        --duration 20 --hang-timeout 10 --inject "$kind@7"
    mr_pair_wait "$MR_DIR"
    mr_expect_eq "server $key" 1 "$(mr_result "$MR_DIR/server.out" "$key")"
    mr_expect_eq "server status" violation "$(mr_result "$MR_DIR/server.out" status)"
    mr_expect_eq "server exit code" 1 "$mr_rc_server"
    mr_expect_eq "client status" violation "$(mr_result "$MR_DIR/client.out" status)"
    mr_expect_eq "client exit code" 1 "$mr_rc_client"
    if [ "$kind" = corrupt ]; then
        # the damage report finds the flipped bit: the last byte
        mr_expect_eq "server damage report" "bad_bytes=1 runs=1" \
            "$(grep -m1 '^EVENT .* kind=damage ' "$MR_DIR/server.out" |
               grep -o 'bad_bytes=[0-9]* runs=[0-9]*')"
    fi
}

# --- a healthy bed: 0 violations and every rail carries data ---------------

t_healthy() {
    local rails=$1 conn=$2 errmode=$3 i tx MR_NET_MGMT=1
    shift 3
    [ "$conn" = address ] && MR_NET_MGMT=0
    "$MR_BED" up --rails "$rails" --rate 500mbit
    mr_note="orders a: $("$MR_BED" order a | tr '\n' ' ')b: $("$MR_BED" order b | tr '\n' ' ')"
    mr_server_start "$MR_DIR" "$rails" "$@" -- --conn "$conn" \
        --err-mode "$errmode" --hang-timeout 15 ||
        { mr_fail "server did not start"; return; }
    mr_client_start "$MR_DIR" "$rails" "$@" -- --conn "$conn" \
        --err-mode "$errmode" --duration 6 --hang-timeout 15
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    for ((i = 0; i < rails; i++)); do
        tx=$(mr_rail_tx "$MR_DIR/client.out" "r$i")
        [ "$tx" -ge 1000000 ] || mr_fail "rail r$i carried only $tx bytes"
        mr_note+=" r${i}_tx=$tx"
    done
}

# Device order: a bed whose namespaces list their devices in different
# readdir() orders still pairs the rails right (needs the UCT/TCP patch)
t_device_order_bed() {
    local i
    for ((i = 0; i < 20; i++)); do
        "$MR_BED" up --rails 2 --rate 500mbit
        [ "$("$MR_BED" order a)" != "$("$MR_BED" order b)" ] && break
    done
    if [ "$("$MR_BED" order a)" = "$("$MR_BED" order b)" ]; then
        mr_note="no bed with differing orders in 20 tries"
        return 77
    fi
    mr_server_start "$MR_DIR" 2 -- --hang-timeout 15 ||
        { mr_fail "server did not start"; return; }
    mr_client_start "$MR_DIR" 2 -- --duration 4 --hang-timeout 15
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    mr_note="after $((i + 1)) bed(s)"
}

# --- stock behaviour with UCX_MULTIRAIL_FAILOVER=n --------------------------

# A fault on one rail kills the endpoint on both sides (error callback).
# t_stock_fault KIND RAIL BOUND_S [sysctl...]
# (the endpoints' environment is MR_STOCK_ENV, failover off by default)
t_stock_fault() {
    local kind=$1 rail=$2 bound=$3 t_fault w role dt sc
    local env=${MR_STOCK_ENV:-UCX_MULTIRAIL_FAILOVER=n}
    shift 3
    "$MR_BED" up --rails 2 --rate 500mbit
    for sc in "$@"; do "$MR_BED" sysctl "$sc"; done
    # shellcheck disable=SC2086
    mr_server_start "$MR_DIR" 2 $env -- \
        --hang-timeout 60 || { mr_fail "server did not start"; return; }
    # shellcheck disable=SC2086
    mr_client_start "$MR_DIR" 2 $env -- --duration 60 \
        --hang-timeout 60
    sleep 3
    t_fault=$(date +%s.%N)
    # MR_FAULT_RAILS: several rails at once (every rail dead)
    for rail in ${MR_FAULT_RAILS:-$rail}; do
        "$MR_BED" fault "$kind" "$rail" a
    done
    mr_pair_wait "$MR_DIR"
    for role in client server; do
        mr_expect_eq "$role err_cb" 1 "$(mr_result "$MR_DIR/$role.out" err_cb)"
        mr_expect_eq "$role hang" 0 "$(mr_result "$MR_DIR/$role.out" hang)"
        for k in lost dup reorder corrupt; do
            mr_expect_eq "$role $k" 0 "$(mr_result "$MR_DIR/$role.out" $k)"
        done
        w=$(mr_event_wall "$MR_DIR/$role.out" error_cb)
        if [ -n "$w" ]; then
            dt=$(mr_elapsed "$t_fault" "$w")
            mr_note+=" ${role}_err_cb_after=${dt}s"
            awk -v d="$dt" -v b="$bound" 'BEGIN { exit !(d >= 0 && d <= b) }' ||
                mr_fail "$role error callback after $dt s, bound $bound s"
        fi
    done
    mr_expect_eq "client exit code" 2 "$mr_rc_client"
    mr_expect_eq "server exit code" 2 "$mr_rc_server"
}

mr_stock_all() {
    mr_run_test dropin_abi t_dropin_abi
    mr_run_test ucx_info_knobs t_ucx_info_knobs
    mr_run_test bad_knob_values t_bad_knob_values
    mr_run_test ucx_conf_site_switch t_ucx_conf
    mr_run_test bed_faults t_bed_faults
    mr_run_test checker_detects_loss t_checker_selftest skip lost
    mr_run_test checker_detects_dup t_checker_selftest dup dup
    mr_run_test checker_detects_reorder t_checker_selftest swap reorder
    mr_run_test checker_detects_corrupt t_checker_selftest corrupt corrupt
    mr_run_test healthy_2rail_sockaddr_peer t_healthy 2 sockaddr peer
    mr_run_test healthy_2rail_address_none t_healthy 2 address none
    mr_run_test healthy_3rail_sockaddr_none t_healthy 3 sockaddr none
    mr_run_test healthy_2rail_failover_knob_on t_healthy 2 sockaddr peer \
        UCX_MULTIRAIL_FAILOVER=y
    mr_run_test device_order_bed t_device_order_bed
    mr_run_test stock_rst_kills_endpoint t_stock_fault rst 1 2
    mr_run_test stock_linkdown_retries2_3 t_stock_fault down 1 10 \
        net.ipv4.tcp_retries2=3
    "$MR_BED" down
}
