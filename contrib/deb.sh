#!/bin/bash
#
# Debian packages: Debian's own ucx 1.13.1-1 source package (fetched and
# verified as contrib/build.sh does) with our files and patches added to its
# quilt series (debian/patches/mrfo-*.patch, DEP-3 headers), built with
# Debian's own rules into build/deb/: libucx0, libucx-dev, ucx-utils,
# version 1.13.1-1+mrfo1, which supersedes Debian's 1.13.1-1.
#
#   apt install ./build/deb/*.deb          # replace Debian's packages
#   apt install libucx0=1.13.1-1 libucx-dev=1.13.1-1 ucx-utils=1.13.1-1
#                                          # go back to Debian's
#
# Debian's own 1.13.1-1 packages are downloaded into build/deb/debian/
# (apt-get download), for the test command to check the way back.
#
# Changes to Debian's packaging, nothing else: the quilt series, a changelog
# entry, Build-Depends: libnl-3-dev and libnl-route-3-dev added (link
# events), doxygen and texlive-latex-base marked <!nodoc> (no binary package
# holds documentation built with them), and configure --without-java
# --without-go in debian/rules (no binary package holds the bindings). Built with the build profiles
# stage1 (no Java, which Debian's rules leave out anyway) and nodoc, without
# the test suite (nocheck). Safe to re-run: the tree is made again, unless
# the packages of the same inputs (patches/, src/, test/gtest/, this
# script) are there already (contrib/build.sh runs it each time).
#
# Environment: MRFO_BUILD_DIR (default <checkout>/build), MRFO_NO_DEPS=1
# (build dependencies already installed), MRFO_JOBS (default nproc).
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

[ "$(id -u)" = 0 ] || die "needs root (apt-get for the build dependencies)"

MRFO_DEB_VERSION=${UCX_DEB_VERSION}+mrfo1
out=$MRFO_BUILD_DIR/deb
tree=$out/ucx-1.13.1
profiles=stage1,nodoc

# A git format-patch file as a DEP-3 patch: Description (subject and body),
# Author, Forwarded: no, Last-Update, then the diff itself
dep3_patch() {
    awk -v author="$2" -v date="$3" '
        BEGIN { state = "hdr" }
        state == "hdr" && /^Subject: / {
            sub(/^Subject: (\[PATCH[^]]*\] )?/, ""); subj = $0
            state = "subj"; next
        }
        state == "hdr"  { next }
        state == "subj" && /^ / { subj = subj $0; next }
        state == "subj" { state = "body" }
        state == "body" && /^---$/ { state = "stat"; next }
        state == "body" { body[++n] = $0; next }
        state == "stat" && /^diff --git / { state = "diff" }
        state == "diff" { print_diff[++m] = $0 }
        END {
            while (n > 0 && body[n] == "") n--
            s = 1
            while (s <= n && body[s] == "") s++
            print "Description: " subj
            for (i = s; i <= n; i++) print (body[i] == "") ? " ." : " " body[i]
            print "Author: " author
            print "Forwarded: no"
            print "Last-Update: " date
            print "---"
            for (i = 1; i <= m; i++) print print_diff[i]
        }' "$1"
}

# The files our packages are built from: ours that the UCX build uses
# (src/, test/gtest/, which patch 0003 lists), the patches, the packaging
own_inputs() {
    (cd "$top" && find src test/gtest patches -type f | LC_ALL=C sort &&
     echo contrib/deb.sh contrib/common.sh)
}

# Our own files as one patch that creates them
own_files_patch() {
    local tmp=$1 author=$2 date=$3 f rc
    mkdir -p "$tmp/a" "$tmp/b"
    for f in $(own_inputs | grep -E '^(src|test)/'); do
        mkdir -p "$tmp/b/$(dirname "$f")"
        cp "$top/$f" "$tmp/b/$f"
    done
    printf '%s\n' \
        "Description: multi-rail failover: the module's own files" \
        " The failover module (src/ucp/failover/), its UCT/UCS helpers, the" \
        " gtest cases and the test applications, which the following" \
        " mrfo-*.patch hook into UCX. Off unless UCX_MULTIRAIL_FAILOVER=y." \
        "Author: $author" "Forwarded: no" "Last-Update: $date" "---"
    (cd "$tmp" && diff -Nru a b) && rc=0 || rc=$?
    [ "$rc" -le 1 ] || die "diff of our own files failed"
}

# Debian's own packages of the version ours supersede, into $out/debian/:
# the way back, which the test command installs over ours in its throwaway
# root (test/multirail/deb_ns.sh)
fetch_debian_debs() {
    local arch pkg missing=()
    arch=$(dpkg --print-architecture)
    mkdir -p "$out/debian"
    for pkg in libucx0 libucx-dev ucx-utils; do
        [ -f "$out/debian/${pkg}_${UCX_DEB_VERSION}_$arch.deb" ] ||
            missing+=("$pkg=$UCX_DEB_VERSION")
    done
    [ ${#missing[@]} = 0 ] && return 0
    log "fetching Debian's ${missing[*]} (the way back)"
    (cd "$out/debian" && apt-get download -qq "${missing[@]}") \
        >"$out/debian.log" 2>&1 ||
        { tail -5 "$out/debian.log" >&2; die "apt-get download failed"; }
}
fetch_debian_debs

stamp=$( (cd "$top" && own_inputs | tr ' ' '\n' | xargs sha256sum) | sha256sum |
        cut -d' ' -f1)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] &&
   ls "$out"/libucx0_"$MRFO_DEB_VERSION"_*.deb >/dev/null 2>&1; then
    log "Debian packages up to date: $out"
    exit 0
fi

fetch_source
# (Debian's own packages in $out/debian stay)
mkdir -p "$out"
find "$out" -mindepth 1 -maxdepth 1 ! -name debian -exec rm -rf {} +
cp -a "$MRFO_BUILD_DIR/pristine" "$tree"
rm -f "$tree/.mrfo-verified"

author="Multi-rail failover for UCX authors <mrfo@localhost>"
date=$(date -u +%F)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The quilt series: Debian's patches (already applied by dpkg-source), then
# our own files, then ours in order; dpkg-source applies the new ones
log "adding our files and $(grep -vc '^#' "$top/patches/series") patch(es) to debian/patches"
own_files_patch "$tmp" "$author" "$date" \
    >"$tree/debian/patches/mrfo-0000-own-files.patch"
echo "mrfo-0000-own-files.patch" >>"$tree/debian/patches/series"
while read -r p; do
    case "$p" in ''|'#'*) continue ;; esac
    dep3_patch "$top/patches/$p" "$author" "$date" \
        >"$tree/debian/patches/mrfo-$p"
    echo "mrfo-$p" >>"$tree/debian/patches/series"
done <"$top/patches/series"

# Build-Depends: libnl for link events; the documentation tools unused
sed -i -e 's/^ libfuse3-dev,$/ libfuse3-dev,\n libnl-3-dev,\n libnl-route-3-dev,/' \
       -e 's/^ doxygen,$/ doxygen <!nodoc>,/' \
       -e 's/^ texlive-latex-base$/ texlive-latex-base <!nodoc>/' \
    "$tree/debian/control"
grep -q '^ libnl-route-3-dev,$' "$tree/debian/control" ||
    die "debian/control: Build-Depends not as expected (libfuse3-dev line)"
grep -q '^ texlive-latex-base <!nodoc>$' "$tree/debian/control" ||
    die "debian/control: Build-Depends not as expected (texlive line)"

# No Java or Go bindings, whatever the machine has: UCX's configure builds
# them when it finds a JDK and Maven (or Go), and the Java build then needs
# the network; no binary package holds them (debian/not-installed)
sed -i 's/^\t\t--enable-cma$/\t\t--enable-cma \\\n\t\t--without-java \\\n\t\t--without-go/' \
    "$tree/debian/rules"
grep -q -- '--without-go$' "$tree/debian/rules" ||
    die "debian/rules: configure options not as expected (--enable-cma line)"

{
    echo "ucx ($MRFO_DEB_VERSION) bookworm; urgency=medium"
    echo
    echo "  * Multi-rail failover (UCX_MULTIRAIL_FAILOVER=y, off by default): a"
    echo "    rail that fails under an endpoint is failed over to its other rails,"
    echo "    with nothing lost, and brought back when it heals."
    echo "    debian/patches/mrfo-*.patch; UCX_MULTIRAIL_* knobs: ucx_info -cf."
    echo "  * Build-Depends: libnl-3-dev, libnl-route-3-dev (link events);"
    echo "    doxygen and texlive-latex-base marked <!nodoc>."
    echo "  * debian/rules: configure --without-java --without-go (no binary"
    echo "    package holds the bindings; a JDK and Maven on the build machine"
    echo "    made the build fetch Maven plugins)."
    echo
    echo " -- $author  $(date -R)"
    echo
    cat "$tree/debian/changelog"
} >"$tmp/changelog"
cp "$tmp/changelog" "$tree/debian/changelog"

if [ "${MRFO_NO_DEPS:-0}" != 1 ] &&
   ! (cd "$tree" && dpkg-checkbuilddeps -P "$profiles" 2>/dev/null); then
    log "installing the build dependencies (apt-get build-dep -P $profiles)"
    (cd "$tree" && apt-get build-dep -y -qq -P "$profiles" . >"$out/deps.log" 2>&1) ||
        { tail -20 "$out/deps.log" >&2; die "apt-get build-dep failed"; }
fi

log "building the packages (log: $out/build.log)"
(cd "$tree" &&
 PATH=/usr/lib/ccache:$PATH CCACHE_DIR=${CCACHE_DIR:-/var/cache/mrfo-ccache} \
 DEB_BUILD_OPTIONS="nocheck parallel=${MRFO_JOBS:-$(nproc)}" \
 DEB_BUILD_PROFILES="${profiles/,/ }" \
 dpkg-buildpackage -b -us -uc -P"$profiles" >"$out/build.log" 2>&1) ||
    { tail -30 "$out/build.log" >&2; die "dpkg-buildpackage failed"; }

for pkg in libucx0 libucx-dev ucx-utils; do
    [ -f "$out/${pkg}_${MRFO_DEB_VERSION}_$(dpkg --print-architecture).deb" ] ||
        die "no $pkg package was built"
done
echo "$stamp" >"$out/.stamp"
log "done: $(cd "$out" && ls ./*.deb | tr '\n' ' ')"
