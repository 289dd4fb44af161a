#!/bin/bash
#
# Benchmark command (not a test): ucx_perftest tag latency (8 B) and tag
# bandwidth (1 MiB, endpoints without and with error handling) over two
# rate-limited rails of the test bed, for Debian's stock libucx0, our build
# with failover off and our build with failover on (and, for the err-mode
# peer bandwidth, on with UCX_MULTIRAIL_STRIPE_AM=n), interleaved, several
# runs each; prints medians and ratios to stock.
# Uses Debian's own /usr/bin/ucx_perftest for all three (drop-in).
# Then the 8 B latency of failover off against on in one process (our
# mr_lat), and the instructions of the eager path (callgrind).
#
# The server and the client are pinned to one core each (taskset).
#
# Environment:
#   MR_BENCH_RUNS=N    runs per variant and test (default 5)
#   MR_BENCH_RATE=R    per-rail tbf rate (default 500mbit)
#   MR_BENCH_RAILS=N   rails (default 2)
#   MR_BENCH_PREV=DIR  also an earlier build installed in DIR (DIR/lib),
#                      failover on, in every measurement ("prev")
#   MR_BENCH_SET=cpu   the CPU-bound set (with MR_BENCH_RATE=none): 8 B
#                      message rates of tag_bw and ucp_am_bw, 1 MiB tag_bw,
#                      64 KiB stream_bw, 8 B tag_lat
#   MR_BENCH_CALLGRIND=0  skip the instruction count (valgrind)
#   MR_BENCH_TESTS=T   measurements instead of the set's (lines of
#                      NAME|VARIANTS|FIELD|TEST SIZE ITERS [ARGS], as below)
#   MR_BENCH_MRLAT=N   runs of mr_lat (failover off and on in one
#                      process, alternating batches; default 5; 0: none)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

runs=${MR_BENCH_RUNS:-5}
rate=${MR_BENCH_RATE:-500mbit}
rails=${MR_BENCH_RAILS:-2}
bed=$top/test/multirail/bed.sh
perftest=/usr/bin/ucx_perftest
port=13338
out=$MRFO_BUILD_DIR/bench
mkdir -p "$out"
: >"$out/raw.txt"

[ -x "$perftest" ] || die "Debian's ucx_perftest is missing (apt-get install ucx-utils)"
[ -e "$MRFO_PREFIX/lib/libucp.so.0" ] || die "build first: contrib/build.sh"
trap '"$bed" down >/dev/null 2>&1 || true' EXIT
# Debian's stock library lists devices in readdir() order; on a bed where
# the two namespaces list the rails in different orders it pairs them
# crosswise (one rail's bandwidth, or a hang). Compare on a bed where the
# rails' order is the same on both sides, so the ratios measure overhead.
rail_order() { "$bed" order "$1" | grep '^r[0-9]' | tr '\n' ' '; }
for ((try = 1; try <= 30; try++)); do
    "$bed" up --rails "$rails" --rate "$rate"
    [ "$(rail_order a)" = "$(rail_order b)" ] && break
done
[ "$(rail_order a)" = "$(rail_order b)" ] ||
    die "no bed with the same rail order on both sides in 30 tries"
echo "bed with matching rail order after $try tries: $(rail_order a)" >&2

devs=$(for ((i = 0; i < rails; i++)); do printf 'r%d,' $i; done)
devs=${devs%,}
server_ip=$("$bed" addr b m)

variant_env() {
    case "$1" in
        stock) echo "UCX_MULTIRAIL_UNUSED=1" ;;
        off)   echo "LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=n" ;;
        on)    echo "LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=y" ;;
        # message fragments kept on the am lane (no data streams)
        pin)   echo "LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=y" \
                    "UCX_MULTIRAIL_STRIPE_AM=n" ;;
        # zero-copy messages of 8 KiB and more sent by reference
        ref)   echo "LD_LIBRARY_PATH=$MRFO_PREFIX/lib UCX_MULTIRAIL_FAILOVER=y" \
                    "UCX_MULTIRAIL_REF_THRESH=8k" ;;
        # an earlier build (MR_BENCH_PREV=its prefix), failover on
        prev)  echo "LD_LIBRARY_PATH=$MR_BENCH_PREV/lib UCX_MULTIRAIL_FAILOVER=y" ;;
    esac
}

# run_one VARIANT TEST SIZE ITERS [perftest args] -> prints "latency_us
# bandwidth_MBs message_rate"
run_one() {
    local v=$1 t=$2 s=$3 n=$4 spid line
    shift 4
    # shellcheck disable=SC2046
    env -i PATH="$PATH" UCX_TLS=tcp UCX_NET_DEVICES="$devs" \
        UCX_MAX_EAGER_RAILS="$rails" UCX_MAX_RNDV_RAILS="$rails" \
        $(variant_env "$v") \
        timeout 120 taskset -c 0 "$bed" exec b "$perftest" -p "$port" \
        >"$out/server.log" 2>&1 &
    spid=$!
    sleep 0.5
    # shellcheck disable=SC2046
    line=$(env -i PATH="$PATH" UCX_TLS=tcp UCX_NET_DEVICES="$devs" \
        UCX_MAX_EAGER_RAILS="$rails" UCX_MAX_RNDV_RAILS="$rails" \
        $(variant_env "$v") \
        timeout 120 taskset -c 1 "$bed" exec a "$perftest" "$server_ip" -p "$port" \
        -t "$t" -s "$s" -n "$n" "$@" 2>&1 | tee -a "$out/client.log" |
        grep '^Final:' || true)
    wait $spid || true
    [ -n "$line" ] || { echo "no result: $v $t" >&2; echo "nan nan nan"; return; }
    # Final: iters lat_p50 lat_avg lat_overall bw_avg bw_overall rate_avg
    # rate_overall
    awk '{print $3, $7, $9}' <<<"$line"
}

# Instructions spent in the eager send/receive path (valgrind callgrind on
# the client; inclusive cost of the UCP functions, deterministic, unlike
# wall-clock latency over veth on 2 cores) -> "FUNC IR" lines
callgrind_one() {
    local v=$1 n=20000 spid f
    f=$out/callgrind.$v
    # shellcheck disable=SC2046
    env -i PATH="$PATH" UCX_TLS=tcp UCX_NET_DEVICES="$devs" \
        UCX_MAX_EAGER_RAILS="$rails" UCX_MAX_RNDV_RAILS="$rails" \
        $(variant_env "$v") timeout 300 "$bed" exec b "$perftest" \
        -p "$port" >/dev/null 2>&1 &
    spid=$!
    sleep 0.5
    # shellcheck disable=SC2046
    env -i PATH="$PATH" UCX_TLS=tcp UCX_NET_DEVICES="$devs" \
        UCX_MAX_EAGER_RAILS="$rails" UCX_MAX_RNDV_RAILS="$rails" \
        $(variant_env "$v") timeout 300 "$bed" exec a valgrind \
        --tool=callgrind --callgrind-out-file="$f" "$perftest" "$server_ip" \
        -p "$port" -t tag_lat -s 8 -n $n >/dev/null 2>&1 || true
    wait $spid || true
    # inclusive instructions per call = total / number of calls
    awk -f "$top/contrib/callgrind_calls.awk" "$f" | sort >"$f.calls"
    # a function's rows are split by the source file of inlined code; the
    # largest inclusive row is the function's whole inclusive cost
    callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null |
        awk 'match($0, /:(ucp_tag_send_nbx|ucp_tag_recv_nbx|ucp_eager_only_handler|ucp_worker_progress|ucp_failover_seq_ep_am_short|ucp_failover_seq_handler)( \[|$)/) {
            fn = substr($0, RSTART + 1)
            sub(/ .*/, "", fn)
            gsub(",", "", $1)
            if ($1 + 0 > max[fn]) max[fn] = $1 + 0 }
            END { for (fn in max) print fn, max[fn] }' | sort |
        join - "$f.calls" |
        awk '{printf "%s %.1f\n", $1, $2 / $3}'
}

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# The measurements: NAME|VARIANTS|FIELD|TEST SIZE ITERS [ARGS], FIELD being
# lat (us, lower is better), bw (MB/s) or rate (messages/s). By default the
# latency and 1 MiB bandwidth of session 4 on, and tag_bw with -e:
# endpoints in err mode PEER, which over TCP have no rendezvous lanes, so
# 1 MiB messages move as AM fragments over the am_bw lanes (with failover
# on: the data streams; "pin": the am lane only). MR_BENCH_SET=cpu (meant
# with MR_BENCH_RATE=none, rails that are not capped: CPU-bound) measures
# what a copy or an extra message per message costs: the 8 B message rate
# of tag_bw and ucp_am_bw, 1 MiB tag_bw, 64 KiB stream_bw, 8 B tag_lat.
if [ "${MR_BENCH_SET:-default}" = cpu ]; then
    tests="tag_bw 8 B rate|stock off on|rate|tag_bw 8 1000000
tag_bw 1 MiB|stock off on|bw|tag_bw 1048576 2000
stream_bw 64 KiB|stock off on|bw|stream_bw 65536 20000
ucp_am_bw 8 B rate|stock off on|rate|ucp_am_bw 8 1000000
tag_lat 8 B|stock off on|lat|tag_lat 8 100000"
else
    tests="tag_lat 8 B|stock off on|lat|tag_lat 8 200000
tag_bw 1 MiB|stock off on|bw|tag_bw 1048576 400
tag_bw 1 MiB, err mode peer|stock off on pin|bw|tag_bw 1048576 400 -e"
fi

# MR_BENCH_TESTS: lines of the same form instead (a subset, or others)
if [ -n "${MR_BENCH_TESTS:-}" ]; then
    tests=$MR_BENCH_TESTS
fi

if [ -n "${MR_BENCH_PREV:-}" ]; then
    [ -e "$MR_BENCH_PREV/lib/libucp.so.0" ] ||
        die "MR_BENCH_PREV=$MR_BENCH_PREV has no lib/libucp.so.0"
    tests=$(sed 's/^\([^|]*\)|\([^|]*\)|/\1|\2 prev|/' <<<"$tests")
fi

# every variant of every test in each run, interleaved: the machine's drift
# hits them alike -> raw.txt "VARIANT RUN TESTNO VALUE"
for ((r = 1; r <= runs; r++)); do
    tno=0
    while IFS='|' read -r name variants field args; do
        tno=$((tno + 1))
        for v in $variants; do
            # shellcheck disable=SC2086
            read -r lat bw msgrate < <(run_one "$v" $args)
            case $field in
                lat) val=$lat ;; bw) val=$bw ;; rate) val=$msgrate ;;
            esac
            echo "$v $r $tno $val" | tee -a "$out/raw.txt" >&2
        done
    done <<<"$tests"
done

vname() {
    case "$1" in
        stock) echo "Debian libucx0 1.13.1" ;;
        off)   echo "ours, failover off" ;;
        on)    echo "ours, failover on" ;;
        pin)   echo "ours, failover on, UCX_MULTIRAIL_STRIPE_AM=n" ;;
        ref)   echo "ours, failover on, UCX_MULTIRAIL_REF_THRESH=8k" ;;
        prev)  echo "earlier build ($(cat "$MR_BENCH_PREV/COMMIT" 2>/dev/null ||
                                      echo "$MR_BENCH_PREV")), failover on" ;;
    esac
}

{
    echo "ucx_perftest over $rails x $rate rails (tcp), median of $runs runs"
    echo "(min..max of the runs; ratios of medians):"
    echo
    echo "| measurement | variant | median | min..max | / Debian | on / off |"
    echo "|---|---|---|---|---|---|"
    tno=0
    while IFS='|' read -r name variants field args; do
        tno=$((tno + 1))
        unit=$(case $field in lat) echo us ;; bw) echo MB/s ;;
               rate) echo msg/s ;; esac)
        stock=$(awk -v t=$tno '$1 == "stock" && $3 == t {print $4}' \
                "$out/raw.txt" | median)
        off=$(awk -v t=$tno '$1 == "off" && $3 == t {print $4}' \
              "$out/raw.txt" | median)
        for v in $variants; do
            med=$(awk -v v=$v -v t=$tno '$1 == v && $3 == t {print $4}' \
                  "$out/raw.txt" | median)
            range=$(awk -v v=$v -v t=$tno '$1 == v && $3 == t {print $4}' \
                    "$out/raw.txt" | sort -g | sed -n '1p;$p' | paste -sd' ')
            awk -v n="$name ($unit)" -v vn="$(vname $v)" -v m="$med" \
                -v rg="$range" -v s="$stock" -v o="$off" -v v=$v \
                'BEGIN { split(rg, r, " ");
                         oo = "-";
                         if (v == "on" || v == "pin" || v == "prev")
                             oo = sprintf("%.3f", m / o);
                         printf "| %s | %s | %.3f | %.3f..%.3f | %.3f | %s |\n",
                                n, vn, m, r[1], r[2], m / s, oo }'
        done
    done <<<"$tests"
} | tee "$out/table.md"

# Failover off and on in one process (mr_lat: two UCP contexts, batches of
# 1,000 ping-pongs alternating off, on, on, off, ...): the machine's drift
# between runs (±10 % and bimodal here) hits both alike, which separate
# ucx_perftest runs cannot give
mrlat_runs=${MR_BENCH_MRLAT:-5}
# mrlat_table NAME "MR_LAT ARGS" TITLE: mrlat_runs runs of mr_lat -> table
mrlat_table() {
    local name=$1 args=$2 title=$3 r spid
    : >"$out/$name.txt"
    for ((r = 1; r <= mrlat_runs; r++)); do
        # shellcheck disable=SC2086
        env -i PATH="$PATH" UCX_TLS=tcp UCX_NET_DEVICES="$devs" \
            UCX_MAX_EAGER_RAILS="$rails" UCX_MAX_RNDV_RAILS="$rails" \
            LD_LIBRARY_PATH="$MRFO_PREFIX/lib" \
            timeout 120 taskset -c 0 "$bed" exec b "$MRFO_PREFIX/bin/mr_lat" \
            -p "$port" $args >"$out/server.log" 2>&1 &
        spid=$!
        sleep 0.5
        # shellcheck disable=SC2086
        env -i PATH="$PATH" UCX_TLS=tcp UCX_NET_DEVICES="$devs" \
            UCX_MAX_EAGER_RAILS="$rails" UCX_MAX_RNDV_RAILS="$rails" \
            LD_LIBRARY_PATH="$MRFO_PREFIX/lib" \
            timeout 120 taskset -c 1 "$bed" exec a "$MRFO_PREFIX/bin/mr_lat" \
            -p "$port" $args "$server_ip" 2>&1 |
            grep '^RESULT' | tee -a "$out/$name.txt" >&2 || true
        wait $spid || true
    done
    # shellcheck disable=SC2016
    awk '{for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
          printf "| %d | %.3f | %.3f | %.4f | %.4f (%.4f..%.4f) |\n", NR,
                 v["off_us"], v["on_us"], v["ratio"], v["pair_ratio_median"],
                 v["pair_ratio_q1"], v["pair_ratio_q3"] }' "$out/$name.txt" |
        { echo
          echo "$title"
          echo
          echo "| run | off (us) | on (us) | on / off | neighbouring batches: median on / off (quartiles) |"
          echo "|---|---|---|---|---|"
          cat; } | tee -a "$out/table.md"
}
# Failover off and on in one process (mr_lat: two UCP contexts, batches
# alternating off, on, on, off, ...): the machine's drift between runs (±10 %
# and bimodal here) hits both alike, which separate ucx_perftest runs cannot
# give
if [ "$mrlat_runs" -gt 0 ]; then
    mrlat_table mr_lat "-b 200 -k 1000" \
        "8 B tag latency (half round trip), failover off and on in one process (mr_lat, 200 batches x 1,000 ping-pongs, $rails rails):"
    if [ "${MR_BENCH_SET:-default}" = cpu ]; then
        mrlat_table mr_rate "-r 64 -b 100 -k 100" \
            "8 B tag message rate, failover off and on in one process (mr_lat -r 64: 100 batches x 100 windows of 64 messages; us per message, on / off > 1 is slower):"
    fi
fi

if command -v valgrind >/dev/null && [ "${MR_BENCH_CALLGRIND:-1}" = 1 ]; then
    {
        echo
        echo "Instructions per call in the UCP eager path, 8 B tag_lat"
        echo "(callgrind, client side, inclusive cost / number of calls):"
        echo
        echo "| function | ours, failover off | ours, failover on | on / off |"
        echo "|---|---|---|---|"
        callgrind_one off | sort >"$out/ir.off"
        callgrind_one on | sort >"$out/ir.on"
        # (the sequencing wrapper's functions run with failover on only)
        join -a 2 -e - -o 0,1.2,2.2 "$out/ir.off" "$out/ir.on" |
            awk '$2 == "-" {printf "| %s | - | %s | - |\n", $1, $3; next}
                 {printf "| %s | %s | %s | %.2f |\n", $1, $2, $3, $3 / $2}'
    } | tee -a "$out/table.md"
fi
