#!/bin/bash
#
# Make a git work tree of the unpacked UCX source, with our own files (src/,
# test/) in the base commit (tag mrfo-base) and every patch of patches/series
# applied on top as one commit each. Edit upstream files there, commit, then
# run contrib/export-patches.sh.
#
# Usage: contrib/devtree.sh [DIR]      (default DIR: build/dev; must not exist)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

dev=${1:-$MRFO_BUILD_DIR/dev}
[ -e "$dev" ] && die "$dev exists; remove it first (rm -rf $dev)"
[ -f "$MRFO_BUILD_DIR/pristine/.mrfo-verified" ] ||
    die "no verified source yet: run contrib/build.sh first"

cp -a "$MRFO_BUILD_DIR/pristine" "$dev"
rm -f "$dev/.mrfo-verified"
overlay_own_files "$dev"
cd "$dev"
git init -q
git config user.name  "${GIT_AUTHOR_NAME:-mrfo}"
git config user.email "${GIT_AUTHOR_EMAIL:-mrfo@localhost}"
git add -A -f .
git commit -q -m "ucx $UCX_DEB_VERSION (Debian source) + multi-rail failover own files"
git tag mrfo-base

n=0
if [ -f "$top/patches/series" ]; then
    while read -r p; do
        case "$p" in ''|'#'*) continue ;; esac
        git am -q --keep-cr "$top/patches/$p" ||
            { git am --abort; die "patch does not apply: $p"; }
        n=$((n + 1))
    done <"$top/patches/series"
fi
log "$dev: $n patch(es) applied on mrfo-base"
