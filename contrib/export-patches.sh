#!/bin/bash
#
# Export the commits of a work tree made by contrib/devtree.sh (mrfo-base..HEAD)
# back into patches/ and patches/series, one patch per commit.
# Commits may only edit upstream files: our own files live in the repository's
# src/ and test/, and a commit that adds a file or touches one of ours is
# refused.
#
# Usage: contrib/export-patches.sh [DIR]      (default DIR: build/dev)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

dev=${1:-$MRFO_BUILD_DIR/dev}
[ -d "$dev/.git" ] || die "$dev is not a work tree made by contrib/devtree.sh"
cd "$dev"
git diff --quiet HEAD || die "$dev has uncommitted changes"

bad=0
for c in $(git rev-list --reverse mrfo-base..HEAD); do
    while read -r st f; do
        if [ "$st" = A ]; then
            echo "$(git log -1 --format=%s "$c"): adds $f;" \
                 "new files belong under src/ or test/ of the repository" >&2
            bad=1
        elif [ -e "$top/$f" ]; then
            echo "$(git log -1 --format=%s "$c"): edits our own file $f;" \
                 "edit it in the repository instead" >&2
            bad=1
        fi
    done < <(git diff-tree --no-commit-id --name-status -r "$c")
done
[ $bad = 0 ] || die "nothing exported"

rm -f "$top"/patches/*.patch
git format-patch -q -N --zero-commit --no-signature -o "$top/patches" \
    mrfo-base..HEAD
(cd "$top/patches" && ls -1 *.patch 2>/dev/null || true) >"$top/patches/series"
log "exported $(wc -l <"$top/patches/series") patch(es) to patches/"
