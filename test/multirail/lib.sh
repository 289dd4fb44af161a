# Helpers of the multi-rail test scripts (sourced). Expects MRFO_PREFIX (the
# install prefix) and MRFO_RESULTS (a folder for logs) to be set.

MR_BED=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bed.sh
MR_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MR_CHECK=${MR_CHECK:-$MRFO_PREFIX/bin/mr_check}
MR_PORT=${MR_PORT:-13337}

mr_passed=0
mr_failed=0
mr_skipped=0
mr_failures=()

# Environment of every UCX process of the bed: TCP only (two processes on
# one kernel would use shared memory otherwise), both rails for eager and
# rendezvous, and our library.
mr_ucx_env() {
    local rails=$1 devs="" i
    for ((i = 0; i < rails; i++)); do devs+="${devs:+,}r$i"; done
    # a sockaddr (client/server) connection goes over the management link,
    # which must then be a UCX device too; it carries only the CM connection
    [ "${MR_NET_MGMT:-1}" = 1 ] && devs+=",zmgmt"
    echo "UCX_TLS=tcp UCX_NET_DEVICES=$devs UCX_MAX_EAGER_RAILS=$rails" \
         "UCX_MAX_RNDV_RAILS=$rails LD_LIBRARY_PATH=$MRFO_PREFIX/lib"
}

mr_rails_list() {
    local rails=$1 devs="" i
    for ((i = 0; i < rails; i++)); do devs+="${devs:+,}r$i"; done
    echo "$devs"
}

# Start the checker server in namespace b; wait until it listens.
# mr_server_start DIR RAILS [ENV=VAL ...] -- [mr_check args]
mr_server_start() {
    local dir=$1 rails=$2 envs=() i
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    # a previous run's LISTENING line must not pass for this one's
    rm -f "$dir/server.out"
    # shellcheck disable=SC2046
    env $(mr_ucx_env "$rails") "${envs[@]}" \
        timeout -k 5 "${MR_TIMEOUT:-120}" "$MR_BED" exec b "$MR_CHECK" \
        --server --listen "$("$MR_BED" addr b m)" --port "$MR_PORT" \
        --rails "$(mr_rails_list "$rails")" "$@" \
        >"$dir/server.out" 2>"$dir/server.err" &
    echo $! >"$dir/server.pid"
    for ((i = 0; i < 100; i++)); do
        grep -q '^LISTENING' "$dir/server.out" 2>/dev/null && return 0
        grep -q '^RESULT' "$dir/server.out" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

# Run the checker client in namespace a (background); see mr_server_start
mr_client_start() {
    local dir=$1 rails=$2 envs=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    # shellcheck disable=SC2046
    env $(mr_ucx_env "$rails") "${envs[@]}" \
        timeout -k 5 "${MR_TIMEOUT:-120}" "$MR_BED" exec a "$MR_CHECK" \
        --client "$("$MR_BED" addr b m)" --port "$MR_PORT" \
        --rails "$(mr_rails_list "$rails")" "$@" \
        >"$dir/client.out" 2>"$dir/client.err" &
    echo $! >"$dir/client.pid"
}

# Wait for both; sets mr_rc_client and mr_rc_server
mr_pair_wait() {
    local dir=$1
    wait "$(cat "$dir/client.pid")" && mr_rc_client=0 || mr_rc_client=$?
    wait "$(cat "$dir/server.pid")" && mr_rc_server=0 || mr_rc_server=$?
}

# Value of KEY in the RESULT line of FILE
mr_result() {
    sed -n 's/^RESULT //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | tr -d '"'
}

mr_events() { grep -c "^EVENT .* kind=$2\b" "$1" || true; }

# Lines of FILE matching the extended regex RE while traffic ran (before the
# RESULT line): at teardown a peer that closes its connections one by one
# can make lanes fail over, which is harmless and not part of a scenario
mr_count_running() {
    MR_RE=$2 awk '/^RESULT/ { exit } $0 ~ ENVIRON["MR_RE"] { n++ }
                  END { print n + 0 }' "$1"
}

# mr_expect_stall_survived DIR: a run whose server stalled (mr_check
# --stall) ended clean, the server did stall, and no lane of either side
# failed over while the traffic ran (teardown failovers are not counted)
mr_expect_stall_survived() {
    local dir=$1 role n
    mr_expect_clean "$dir"
    grep -q "stall_end" "$dir/server.out" ||
        mr_fail "the server did not stall"
    for role in client server; do
        n=$(mr_count_running "$dir/$role.out" "failed \\(")
        mr_expect_eq "$role lane failovers around the stall" 0 "$n"
    done
}

# First wall-clock time of an event of KIND in FILE (empty if none)
mr_event_wall() {
    grep -m1 "^EVENT .* kind=$2\b" "$1" | tr ' ' '\n' | sed -n 's/^wall=//p'
}

# Bytes a rail carried (tx, as seen by the process) over a run
mr_rail_tx() {
    grep '^TL ' "$1" | tr ' ' '\n' | sed -n "s/^$2_tx=//p" |
        awk '$1 ~ /^[0-9]+$/ {s += $1} END {printf "%.0f\n", s}'
}

# Bytes a rail carried (tx) in timeline intervals that end after wall time
# FROM (and before TO, if given); an interval in which the device was
# created again does not count
mr_rail_tx_between() {
    local file=$1 rail=$2 from=$3 to=${4:-9e18}
    grep '^TL ' "$file" | awk -v r="${rail}_tx" -v f="$from" -v t="$to" '
        { w = 0; v = 0
          for (i = 2; i <= NF; i++) {
              split($i, kv, "=")
              if (kv[1] == "wall") w = kv[2]
              if (kv[1] == r && kv[2] ~ /^[0-9]+$/) v = kv[2]
          }
          # a device deleted and created again restarts its counters: the
          # checker prints a wrapped difference for that interval
          if (w > f && w <= t && v < 1e15) s += v }
        END { printf "%.0f\n", s }'
}

# mr_expect_failover_within ROLE LANE T_FAULT [BOUND]: ROLE's output
# ($MR_DIR/ROLE.out) shows LANE (tcp/r1, rc_verbs/rxe1:1) failed over; the
# time from T_FAULT (with the reason) goes into the note and, given BOUND
# (seconds), must be under it. Sets mr_failover_w (its wall time, or empty)
mr_expect_failover_within() {
    local role=$1 lane=$2 t=$3 bound=${4:-} f=$MR_DIR/$1.out dt why
    mr_failover_w=$(grep -m1 -F "$lane failed (" "$f" |
                    sed -n 's/^\[\([0-9.]*\)\].*/\1/p')
    if [ -z "$mr_failover_w" ]; then
        mr_fail "$role did not fail $lane over"
        return 0
    fi
    dt=$(mr_elapsed "$t" "$mr_failover_w")
    why=$(grep -m1 -F "$lane failed (" "$f" |
          sed 's/.* failed (\([^)]*\)).*/\1/; s/ /_/g')
    mr_note+=" ${role}_failover_after=${dt}s($why)"
    [ -z "$bound" ] || awk -v d="$dt" -v b="$bound" 'BEGIN { exit !(d < b) }' ||
        mr_fail "$role took ${dt}s to fail $lane over (bound ${bound}s)"
}

mr_now() { date +%s.%N; }

mr_elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# Record a failure reason inside a test
mr_fail() { echo "  FAIL: $*" >&2; mr_test_ok=0; }

mr_expect_eq() {
    local what=$1 want=$2 got=$3
    [ "$got" = "$want" ] || mr_fail "$what: expected $want, got '$got'"
}

# mr_expect_byref: the checkers' endpoint information (mr_check --info) in
# MR_DIR/{client,server}.out: the client (whose traffic has the large
# messages) sent messages by reference, and neither side still holds one
mr_expect_byref() {
    local role refs left
    for role in client server; do
        refs=$(sed -n 's/.* \([0-9][0-9]*\) sent by reference (.*/\1/p' \
            "$MR_DIR/$role.out" | head -1)
        left=$(sed -n 's/.* sent by reference ([0-9]* copied to go again, \([0-9]*\) retained).*/\1/p' \
            "$MR_DIR/$role.out" | head -1)
        mr_note+=" ${role}_by_ref=${refs:-none} ${role}_ref_left=${left:-none}"
        [ "$role" = server ] || [ "${refs:-0}" -ge 1 ] ||
            mr_fail "$role sent nothing by reference"
        [ "${left:-1}" = 0 ] || mr_fail "$role still holds messages by reference"
    done
}

# Both RESULT lines clean: status ok, nothing lost/duplicated/reordered/
# corrupted, no error callback, no hang
mr_expect_clean() {
    local dir=$1 role f
    for role in client server; do
        f=$dir/$role.out
        mr_expect_eq "$role status" ok "$(mr_result "$f" status)"
        for k in lost dup reorder corrupt err_cb op_errors hang; do
            mr_expect_eq "$role $k" 0 "$(mr_result "$f" $k)"
        done
    done
    mr_expect_eq "client peer_violations" 0 \
        "$(mr_result "$dir/client.out" peer_violations)"
    mr_expect_eq "client exit code" 0 "$mr_rc_client"
    mr_expect_eq "server exit code" 0 "$mr_rc_server"
}

# mr_expect_no_ucx_errors DIR: while the traffic ran (up to the checker's
# RESULT line; a peer that leaves at teardown is another matter), the
# programs logged no UCX error. A rail's fault, the re-probes while it is down
# and its return are network failures that the lanes handle: the transports
# log them at their failure level (UCX_<TL>_FAILURE, diag by default)
mr_expect_no_ucx_errors() {
    local role lines
    for role in client server; do
        lines=$(awk '/^RESULT/ { exit } /UCX  ERROR/ { print }' \
                "$1/$role.out")
        [ -z "$lines" ] || mr_fail "$role: $(echo "$lines" | wc -l) UCX" \
            "error line(s), first: $(echo "$lines" | head -1 | cut -c1-160)"
    done
}

# mr_expect_quiet_reprobes DIR: while the traffic ran, no connection that a
# re-probe of a failed lane sets up over a rail still down was logged above
# debug level (an RC QP that cannot be connected, a TCP connection that
# cannot be set up): such a failure is expected until the rail heals
# (patch 0052: the re-probe's endpoints log their network failures at debug)
mr_expect_quiet_reprobes() {
    local role lines re='error modifying QP to RT|tcp_ep .*: cannot connect to|connection establishment for socket|connect\(fd=.*failed'
    for role in client server; do
        lines=$(awk '/^RESULT/ { exit } { print }' "$1/$role.out" |
                grep -E "UCX  (DIAG|WARN|ERROR)" | grep -E "$re" || true)
        [ -z "$lines" ] || mr_fail "$role: $(echo "$lines" | wc -l) re-probe" \
            "failure(s) logged above debug, first: $(echo "$lines" | head -1 | cut -c1-160)"
    done
}

# mr_log_excerpt DIR: after a failure, show on stderr what CI logs cannot
# otherwise keep: the lines of the programs' logs that name a crash, an
# error or a lane's failure or return (bounded: the first 4 and the last 14
# of a file, files under DIR only), and the RC QPs the RoCE tests recorded
# in the guests at a failing moment (rdma-*.txt, stall-*.txt: 16 lines a
# file; rxe's own QP state, stall-*-rxe.txt: 24), and the stacks of MPI ranks
# that a job nearing its timeout left (rank_stack.PID: 24 frames a rank)
mr_log_excerpt() {
    local f n re='Assertion|assert|[Aa]bort|Fatal|Segmentation|signal|[Bb]acktrace|^RESULT|ERROR|error|failed \(|is back'
    for f in "$1"/*.out "$1"/*.err; do
        [ -s "$f" ] || continue
        n=$(grep -cE "$re" "$f" || true)
        [ "$n" -gt 0 ] || continue
        echo "  --- ${f##*/}: $n matching line(s), the first 4 and last 14:" >&2
        # (grep may be cut off by head: no error under pipefail)
        { grep -E "$re" "$f" || true; } |
            awk 'NR <= 4 { print; next } { t[NR % 14] = $0; last = NR }
                 END { if (last > 18) print "[...]";
                       for (i = (last > 18 ? last - 13 : 5); i <= last; i++)
                           print t[i % 14] }' |
            cut -c1-240 | sed 's/^/  | /' >&2
    done
    for f in "$1"/rdma-*.txt "$1"/stall-*.txt; do
        [ -s "$f" ] || continue
        echo "  --- ${f##*/}: RC QPs, RC send state" >&2
        { grep -E "type RC|available = |unsignaled = |cq_available = " "$f" ||
          true; } | head -16 | cut -c1-200 | sed 's/^/  | /' >&2
    done
    # rxe's own state of the QPs (test/roce/rxe_qp_state.sh), whole lines
    for f in "$1"/stall-*-rxe.txt; do
        [ -s "$f" ] || continue
        echo "  --- ${f##*/}: rxe's QP state" >&2
        { grep -E "^rxe_|^qp=|rxe_qp_state:" "$f" || true; } | head -24 |
            cut -c1-520 | sed 's/^/  | /' >&2
    done
    # where a hung MPI rank was (tests_failover.sh: mr_mpi_run)
    for f in "$1"/rank_stack.*; do
        [ -s "$f" ] || continue
        echo "  --- ${f##*/}: the rank's threads' frames" >&2
        { grep -E "^Thread |^#[0-9]+ " "$f" || true; } | head -24 |
            cut -c1-200 | sed 's/^/  | /' >&2
    done
}

# mr_run_test NAME FUNCTION [ARGS]: run one test, count the outcome.
# The function sets mr_test_ok=0 on failure, or returns 77 to skip.
# A test function that a shell error aborted (an expansion error returns to
# the top level, past mr_run_test's accounting) counts as failed; called by
# each mr_run_test and before the summary line
mr_account_aborted() {
    [ -n "${mr_current:-}" ] || return 0
    echo "[ FAIL ] $mr_current (aborted by a shell error), logs in" \
         "$MRFO_RESULTS/$mr_current" >&2
    mr_log_excerpt "$MRFO_RESULTS/$mr_current"
    mr_failed=$((mr_failed + 1))
    mr_failures+=("$mr_current")
    mr_current=
}

mr_run_test() {
    local name=$1 fn=$2 rc t0
    shift 2
    mr_account_aborted
    if [ -n "${MR_FILTER:-}" ] && ! [[ $name == $MR_FILTER ]]; then
        return 0
    fi
    export MR_DIR=$MRFO_RESULTS/$name
    rm -rf "$MR_DIR"
    mkdir -p "$MR_DIR"
    mr_test_ok=1
    mr_note=""
    t0=$(mr_now)
    echo "[ RUN  ] $name" >&2
    mr_current=$name
    "$fn" "$@" && rc=0 || rc=$?
    mr_current=
    if [ $rc = 77 ]; then
        echo "[ SKIP ] $name ${mr_note}" >&2
        mr_skipped=$((mr_skipped + 1))
    elif [ $rc = 0 ] && [ $mr_test_ok = 1 ]; then
        echo "[ PASS ] $name ($(mr_elapsed "$t0" "$(mr_now)") s) ${mr_note}" >&2
        mr_passed=$((mr_passed + 1))
    else
        echo "[ FAIL ] $name ($(mr_elapsed "$t0" "$(mr_now)") s), logs in $MR_DIR" >&2
        mr_log_excerpt "$MR_DIR"
        mr_failed=$((mr_failed + 1))
        mr_failures+=("$name")
    fi
}
