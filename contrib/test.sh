#!/bin/bash
#
# Test command: builds what is missing (contrib/build.sh), then runs the gtest
# groups and the test-bed tests. Ends with "N passed, N failed, N skipped"
# and exits non-zero on any failure. Needs root (network namespaces).
#
# Environment:
#   MRFO_SKIP_BUILD=1   do not run contrib/build.sh first
#   MR_FILTER=GLOB      run only the tests whose name matches (bash glob;
#                       gtest groups are named gtest_<group>)
#   MRFO_RESULTS=DIR    where logs go (default: build/test-results)
#   MR_SOAK_SECONDS=N   length of the short random-fault soak (default 60;
#                       contrib/soak.sh runs a long one)
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
. "$top/test/multirail/tests_recover.sh"
. "$top/test/multirail/tests_soak.sh"

cleanup() { "$MR_BED" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
# the test bed must not inherit UCX settings of the caller
unset $(env | sed -n 's/^\(UCX_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null || true

t0=$(date +%s)
mr_gtest_all
mr_stock_all
mr_failover_all
mr_detect_all
mr_recover_all
mr_soak_all
cleanup

echo "test time: $(( $(date +%s) - t0 )) s; logs: $MRFO_RESULTS" >&2
if [ ${#mr_failures[@]} -gt 0 ]; then
    echo "failed: ${mr_failures[*]}" >&2
fi
mr_account_aborted
echo "$mr_passed passed, $mr_failed failed, $mr_skipped skipped"
[ "$mr_failed" = 0 ]
