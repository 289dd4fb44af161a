#!/bin/bash
#
# Soak command (not part of the test command, which runs a 60 s version):
# random faults of every kind on random rails of a three-rail bed, the am
# lane's rail included, while the checker streams every API with failover on;
# reports the number of injections and of messages checked, and fails on any
# loss, duplicate, reorder, corruption, hang or error callback.
#
# Usage: contrib/soak.sh [SECONDS]   (default 3600; each injection takes
#                                     about 2-4 s, so an hour is ~1,000)
# Environment: MR_SOAK_SEED=N repeats a run's random sequence. Needs root and
# a build (contrib/build.sh).
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

[ "$(id -u)" = 0 ] || die "the test bed needs root (network namespaces)"
secs=${1:-3600}
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -ge 20 ] && [ "$secs" -le 86400 ] ||
    die "SECONDS must be 20..86400"

export MRFO_PREFIX MRFO_SRC
export MRFO_RESULTS=${MRFO_RESULTS:-$MRFO_BUILD_DIR/soak-results}
rm -rf "$MRFO_RESULTS"
mkdir -p "$MRFO_RESULTS"

. "$top/test/multirail/lib.sh"
. "$top/test/multirail/tests_failover.sh"
. "$top/test/multirail/tests_soak.sh"

cleanup() { "$MR_BED" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
unset $(env | sed -n 's/^\(UCX_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null || true

mr_run_test soak_random_faults t_soak "$secs" 3
cleanup
mr_account_aborted
echo "$mr_passed passed, $mr_failed failed, $mr_skipped skipped"
[ "$mr_failed" = 0 ]
