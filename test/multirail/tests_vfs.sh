# The live lane state of a running process (sourced by contrib/test.sh): with
# UCX's ucx_vfs daemon running, each failover endpoint has a failover/ node
# in its VFS directory (lanes, am_lane, summary; ucp_failover_vfs.c). The
# checker streams over two rails; the node is read before a fault (every lane
# up), while r1 is blackholed (r1 failed or recovering, a failure counted,
# its time and reason), and after r1 healed (up again, one return).

# A lanes file of the client's main endpoint under the VFS mount DIR, for
# process PID (its failover/lanes with a tcp/r1 lane)
mr_vfs_lanes_file() {
    local dir=$1 pid=$2 f
    for f in $(find "$dir/$pid" -path '*/failover/lanes' 2>/dev/null); do
        grep -q "transport=tcp/r1 " "$f" 2>/dev/null && { echo "$f"; return 0; }
    done
    return 1
}

# Wait (at most SEC s) until the r1 line of FILE matches the extended regex
# RE; prints it
mr_vfs_wait_r1() {
    local file=$1 re=$2 sec=$3 i line
    for ((i = 0; i < sec * 10; i++)); do
        line=$(grep "transport=tcp/r1 " "$file" 2>/dev/null | head -1)
        if [[ $line =~ $re ]]; then
            echo "$line"
            return 0
        fi
        sleep 0.1
    done
    echo "$line"
    return 1
}

# mr_vfs_stage LANES STAGE SEC R1_RE SUMMARY_STR: wait (at most SEC s) for
# the r1 line of LANES to match R1_RE, keep lanes and summary as
# *.STAGE, and the summary must contain SUMMARY_STR; the r1 line in
# mr_vfs_line (not printed: a failure must not be lost in a subshell)
mr_vfs_stage() {
    local f=$1 stage=$2 sec=$3
    mr_vfs_line=$(mr_vfs_wait_r1 "$f" "$4" "$sec") ||
        mr_fail "$stage: the r1 line did not match within $sec s: $mr_vfs_line"
    cp "$f" "$MR_DIR/lanes.$stage"
    cp "$(dirname "$f")/summary" "$MR_DIR/summary.$stage"
    grep -qF -- "$5" "$MR_DIR/summary.$stage" ||
        mr_fail "$stage: summary: $(cat "$MR_DIR/summary.$stage")"
    return 0
}

t_vfs_lane_state() {
    local mnt=$MR_DIR/mnt vfs_pid pid f i line env
    [ -x "$MRFO_PREFIX/bin/ucx_vfs" ] ||
        { mr_fail "no ucx_vfs in the build (libfuse3-dev, --with-fuse3)"; return 0; }
    [ -e "$MRFO_PREFIX/lib/ucx/libucs_fuse.so.0" ] ||
        { mr_fail "no VFS module (lib/ucx/libucs_fuse.so.0) in the build"; return 0; }
    mkdir -p "$mnt"
    "$MRFO_PREFIX/bin/ucx_vfs" -f -d "$mnt" >"$MR_DIR/ucx_vfs.out" 2>&1 &
    vfs_pid=$!
    echo "$vfs_pid" >"$MR_DIR/ucx_vfs.pid"
    env="$MR_FO_ENV UCX_VFS_ENABLE=y"
    "$MR_BED" up --rails 2 --rate 500mbit
    mr_pair_start 2 60 "$env" "$env" || { kill "$vfs_pid"; return 0; }
    for ((i = 0; i < 100; i++)); do
        pid=$(pgrep -f "^$MR_CHECK --client .*--port $MR_PORT( |\$)" | head -1)
        [ -n "$pid" ] && f=$(mr_vfs_lanes_file "$mnt" "$pid") && break
        sleep 0.2
    done
    if [ -z "${f:-}" ]; then
        mr_fail "no failover/lanes of the client (pid ${pid:-?}) under $mnt within 20 s"
    else
        echo "${f#$mnt/}" >"$MR_DIR/lanes.path"
        sleep 2
        cp "$f" "$MR_DIR/lanes.before"
        cp "$(dirname "$f")/am_lane" "$MR_DIR/am_lane.before"
        grep -v " state=up " "$MR_DIR/lanes.before" >/dev/null &&
            mr_fail "a lane not up before the fault: $(cat "$MR_DIR/lanes.before")"
        grep -q "transport=tcp/r0" "$MR_DIR/am_lane.before" ||
            mr_fail "am_lane before the fault: $(cat "$MR_DIR/am_lane.before")"
        "$MR_BED" fault blackhole 1 both
        mr_vfs_stage "$f" during 10 \
            " state=(failed|recovering) failures=1 .*last_reason=\"[^\"]+\"" \
            "lane_failovers=1 "
        mr_note="during: ${mr_vfs_line#*state=}"
        "$MR_BED" restore blackhole 1 both
        mr_vfs_stage "$f" after 15 \
            " state=up failures=1 reprobes=[1-9][0-9]* returns=1 " \
            "lane_failovers=1 lane_returns=1 failed_lanes=0x0 "
    fi
    [ -n "${pid:-}" ] && kill -USR1 "$pid" 2>/dev/null
    mr_pair_wait "$MR_DIR"
    mr_expect_clean "$MR_DIR"
    kill "$vfs_pid" 2>/dev/null || true
    wait "$vfs_pid" 2>/dev/null || true
    # mounts the daemon left (by exact path, under this test's directory)
    for f in $(awk -v m="$mnt/" 'index($2, m) == 1 { print $2 }' /proc/mounts); do
        umount -l "$f" 2>/dev/null || true
    done
}

mr_vfs_all() {
    mr_run_test vfs_lane_state_live t_vfs_lane_state
    "$MR_BED" down
}
