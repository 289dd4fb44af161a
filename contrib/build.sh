#!/bin/bash
#
# Build command: fetch Debian's ucx 1.13.1-1 source, verify it, overlay our
# files, apply patches/series, configure and build with ccache, and install
# into build/install. Safe to re-run: only what changed is rebuilt.
#
# Environment:
#   MRFO_BUILD_DIR   where to build (default: <checkout>/build)
#   MRFO_NO_DEPS=1   skip the apt-get steps (packages already installed)
#   MRFO_JOBS        make -j value (default: nproc)
#   MRFO_GTEST=0     do not build the gtest binary
#   MRFO_DEB=0       do not build the Debian packages (contrib/deb.sh)
#
set -eEu -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/contrib/common.sh"

# Packages needed to build UCX, the gtest binary, the checker and to run the
# test bed, the benchmark and the MPI tests.
build_pkgs="build-essential dpkg-dev pkg-config autoconf automake libtool
            ccache rsync patch git libibverbs-dev librdmacm-dev libnuma-dev
            libnl-3-dev libnl-route-3-dev debhelper libfuse3-dev"
run_pkgs="iproute2 iputils-ping nftables procps psmisc libucx0 ucx-utils openmpi-bin
          libopenmpi-dev mpich libmpich-dev gnuplot-nox fuse3"
# the soft-RoCE bed (test/roce/vm.sh): QEMU guests with Debian's kernel;
# dwarves' pahole reads rxe's types for test/roce/rxe_qp_state.sh
roce_pkgs="qemu-system-x86 busybox-static ibverbs-utils ibverbs-providers kmod
           cpio socat dwarves"
run_pkgs="$run_pkgs $roce_pkgs"

install_deps() {
    [ "${MRFO_NO_DEPS:-0}" = 1 ] && return 0
    if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list \
             /etc/apt/sources.list.d/ ; then
        log "adding a bookworm deb-src entry ($mrfo_src_list)"
        cat >"$mrfo_src_list" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        rm -f "$mrfo_apt_stamp"
    fi
    local missing
    missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' \
                  $build_pkgs $run_pkgs 2>/dev/null |
              awk '$1 == "ii" {print $2}' | sort >"$MRFO_TMP/have" ;
              for p in $build_pkgs $run_pkgs; do echo "$p"; done | sort |
              comm -23 - "$MRFO_TMP/have")
    if [ -n "$missing" ] || [ ! -e "$mrfo_apt_stamp" ]; then
        log "apt-get update"
        apt-get update -qq
        touch "$mrfo_apt_stamp"
    fi
    if [ -n "$missing" ]; then
        log "installing:" $missing
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends $missing >/dev/null
    fi
}

stage_source() {
    local stage="$MRFO_BUILD_DIR/stage"
    rm -rf "$stage"
    cp -a "$MRFO_BUILD_DIR/pristine" "$stage"
    rm -f "$stage/.mrfo-verified"
    overlay_own_files "$stage"
    apply_series "$stage"
    mkdir -p "$MRFO_SRC"
    rsync -rlc -i "$stage/" "$MRFO_SRC/" >"$MRFO_TMP/synced"
    rm -rf "$stage"
    # a changed build-system file needs autogen + configure again
    if grep -qE '(Makefile\.am|configure\.ac|\.m4|configure\.m4)$' \
           "$MRFO_TMP/synced"; then
        rm -f "$MRFO_SRC/.mrfo-configure-flags"
    fi
}

configure_tree() {
    local flags_stamp="$MRFO_SRC/.mrfo-configure-flags"
    local flags="--prefix=$MRFO_PREFIX $UCX_CONFIGURE_FLAGS"
    if [ -f "$MRFO_SRC/config.status" ] && [ -f "$flags_stamp" ] &&
       [ "$(cat "$flags_stamp")" = "$flags" ]; then
        return 0
    fi
    log "autogen + configure"
    (cd "$MRFO_SRC" && ./autogen.sh >"$MRFO_BUILD_DIR/autogen.log" 2>&1) ||
        die "autogen.sh failed, see $MRFO_BUILD_DIR/autogen.log"
    (cd "$MRFO_SRC" && CC="ccache gcc" CXX="ccache g++" \
        ./configure $flags >"$MRFO_BUILD_DIR/configure.log" 2>&1) ||
        die "configure failed, see $MRFO_BUILD_DIR/configure.log"
    echo "$flags" >"$flags_stamp"
}

# Library and tool directories, in dependency order (the top-level make
# would also build gtest, which we build separately at -O0).
lib_dirs="src/ucm src/ucs src/uct src/ucp src/tools/vfs src/tools/info
          src/tools/perf src/tools/profile test/apps examples"

build_tree() {
    local jobs=${MRFO_JOBS:-$(nproc)} d
    local mlog="$MRFO_BUILD_DIR/make.log"
    : >"$mlog"
    log "building libraries and tools (log: $mlog)"
    for d in $lib_dirs; do
        make -C "$MRFO_SRC/$d" -j"$jobs" install >>"$mlog" 2>&1 ||
            { tail -30 "$mlog" >&2; die "make failed in $d"; }
    done
    if [ "${MRFO_GTEST:-1}" = 1 ]; then
        log "building the gtest binary at -O0"
        # gcc 12 false use-after-free warning in ucm/malloc_hook.cc
        make -C "$MRFO_SRC/test/gtest" -j"$jobs" \
            CXXFLAGS="-O0 -g -Wno-error=use-after-free" CFLAGS="-O0 -g" \
            >>"$mlog" 2>&1 ||
            { tail -30 "$mlog" >&2; die "make failed in test/gtest"; }
    fi
}

build_checker() {
    log "building the checkers"
    make -s -C "$top/test/apps/mrcheck" PREFIX="$MRFO_PREFIX" \
        OUT="$MRFO_PREFIX/bin" ||
        die "checker build failed"
    # the MPI one is built with Debian's Open MPI and with Debian's MPICH
    # (ch4:ucx), each of which then runs on our library through
    # LD_LIBRARY_PATH; named compilers, whichever MPI is the default
    mpicc.openmpi -O2 -Wall -Werror -o "$MRFO_PREFIX/bin/mr_mpi_check" \
        "$top/test/multirail/mpi/mr_mpi_check.c" ||
        die "MPI checker build failed (Open MPI)"
    mpicc.mpich -O2 -Wall -Werror -o "$MRFO_PREFIX/bin/mr_mpi_check.mpich" \
        "$top/test/multirail/mpi/mr_mpi_check.c" ||
        die "MPI checker build failed (MPICH)"
}

export CCACHE_BASEDIR=$MRFO_BUILD_DIR CCACHE_NOHASHDIR=1
export CCACHE_DIR=${CCACHE_DIR:-/var/cache/mrfo-ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
MRFO_TMP=$(mktemp -d)
trap 'rm -rf "$MRFO_TMP"' EXIT
mkdir -p "$MRFO_BUILD_DIR"

install_deps
fetch_source
stage_source
configure_tree
build_tree
[ -f "$top/test/apps/mrcheck/Makefile" ] && build_checker
# the soft-RoCE bed's kernel and initramfs (fetched with apt, not installed);
# no CPU lock of the developers' (the build may run under it)
log "preparing the soft-RoCE bed (build/roce)"
ROCE_LOCK= "$top/test/roce/vm.sh" prepare >"$MRFO_BUILD_DIR/roce-prepare.log" 2>&1 ||
    { tail -20 "$MRFO_BUILD_DIR/roce-prepare.log" >&2; die "soft-RoCE bed preparation failed"; }
# Debian packages of the same sources (build/deb; rebuilt only when their
# inputs changed)
if [ "${MRFO_DEB:-1}" = 1 ]; then
    "$top/contrib/deb.sh"
fi
log "done: $MRFO_PREFIX"
