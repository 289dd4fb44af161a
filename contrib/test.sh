#!/bin/bash
#
# Test command: builds what is missing (contrib/build.sh), then runs the gtest
# groups and the test-bed tests. Ends with "N passed, N failed, N skipped"
# and exits non-zero on any failure. Needs root (network namespaces).
#
# Environment:
#   MRFO_SKIP_BUILD=1   do not run contrib/build.sh first
#   MR_FILTER=GLOB      run only the tests whose name matches (bash glob;
#                       gtest groups are named gtest_<group>); a filter
#                       that matches no test is an error (exit 2)
#   MRFO_RESULTS=DIR    where logs go (default: build/test-results)
#   MR_SOAK_SECONDS=N   length of the short random-fault soak (default 60;
#                       contrib/soak.sh runs a long one)
#   MR_LOAD=N           run the tests on a busy machine: N CPU hogs (busy
#                       loops, each bounded to 3 hours) run for the whole
#                       command, as other jobs do on a shared host
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

[ "$(id -u)" = 0 ] || die "the test bed needs root (network namespaces)"
if [ "${MRFO_SKIP_BUILD:-0}" != 1 ]; then
    "$top/contrib/build.sh"
fi

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=${MRFO_RESULTS:-$MRFO_BUILD_DIR/test-results}
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"

. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_gtest.sh"
. "$top/test/multirail/tests_stock.sh"
. "$top/test/multirail/tests_failover.sh"
. "$top/test/multirail/tests_detect.sh"
. "$top/test/multirail/tests_memory.sh"
. "$top/test/multirail/tests_recover.sh"
. "$top/test/multirail/tests_soak.sh"
. "$top/test/multirail/tests_roce.sh"
. "$top/test/multirail/tests_deb.sh"
. "$top/test/multirail/tests_vfs.sh"

mr_hogs=()
cleanup() {
    "$MR_BED" down >/dev/null 2>&1 || true
    mr_roce_down
    if [ ${#mr_hogs[@]} -gt 0 ]; then
        kill "${mr_hogs[@]}" 2>/dev/null || true
        mr_hogs=()
    fi
}
trap cleanup EXIT
# busy loops that compete for the CPUs with the tests (nice 0, as the
# tests); killed by PID at exit
for ((i = 0; i < ${MR_LOAD:-0}; i++)); do
    timeout 10800 bash -c 'while :; do :; done' &
    mr_hogs+=($!)
done
[ ${#mr_hogs[@]} = 0 ] || echo "load: ${#mr_hogs[@]} CPU hog(s)" >&2
# the test bed must not inherit UCX settings of the caller
unset $(env | sed -n 's/^\(UCX_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null || true

t0=$(date +%s)
mr_gtest_all
mr_stock_all
mr_deb_all
mr_failover_all
mr_detect_all
mr_memory_all
mr_vfs_all
mr_recover_all
mr_soak_all
# the RoCE rails, in two QEMU guests (after the TCP bed: both take the CPUs)
mr_roce_all
cleanup

echo "test time: $(( $(date +%s) - t0 )) s; logs: $MRFO_RESULTS" >&2
if [ ${#mr_failures[@]} -gt 0 ]; then
    echo "failed: ${mr_failures[*]}" >&2
fi
mr_account_aborted
if [ -n "${MR_FILTER:-}" ] &&
   [ $((mr_passed + mr_failed + mr_skipped)) = 0 ]; then
    # a typo in the filter must not look like a passing run
    echo "error: no test's name matches MR_FILTER='$MR_FILTER' (a bash" \
         "glob; gtest groups are named gtest_<group>)" >&2
    echo "$mr_passed passed, $mr_failed failed, $mr_skipped skipped"
    exit 2
fi
echo "$mr_passed passed, $mr_failed failed, $mr_skipped skipped"
[ "$mr_failed" = 0 ]
