# Shared settings and helpers of the contrib/ scripts (sourced, not run).

UCX_DEB_VERSION=1.13.1-1
UCX_ORIG_TAR=ucx_1.13.1.orig.tar.xz
UCX_ORIG_SHA256=1a88e09ca1b406c046a469c2ae271d2c330050b5664c0bcd9890e26c6ef09f3c
UCX_DEBIAN_TAR=ucx_1.13.1-1.debian.tar.xz
UCX_DEBIAN_SHA256=e0a407539b44d3aa81e3f11fc43a3ad512550944a59227e2105317446fd2e0ff

# Like Debian's rules, but logging kept and gtest on; java/go/cuda/rocm off;
# FUSE 3 for UCX's VFS (ucx_vfs, the failover/ node of each endpoint).
UCX_CONFIGURE_FLAGS="--enable-mt --with-verbs --with-rdmacm --enable-cma \
--enable-devel-headers --enable-examples --enable-gtest --without-java \
--without-go --without-cuda --without-rocm --disable-doxygen-doc \
--with-fuse3"

: "${top:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
MRFO_BUILD_DIR=${MRFO_BUILD_DIR:-$top/build}
MRFO_SRC=$MRFO_BUILD_DIR/ucx-1.13.1
# MRFO_PREFIX may point at a copy of an install (a long soak that must not
# see rebuilds).
MRFO_PREFIX=${MRFO_PREFIX:-$MRFO_BUILD_DIR/install}
mrfo_src_list=/etc/apt/sources.list.d/mrfo-bookworm-src.sources
mrfo_apt_stamp=/var/lib/apt/.mrfo-updated

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

# Debian's ucx source package, verified, unpacked (with Debian's own
# patches applied by dpkg-source) into build/pristine, once
fetch_source() {
    if [ -f "$MRFO_BUILD_DIR/pristine/.mrfo-verified" ]; then
        return 0
    fi
    log "fetching ucx=$UCX_DEB_VERSION with apt-get source"
    rm -rf "$MRFO_BUILD_DIR/dl" "$MRFO_BUILD_DIR/pristine"
    mkdir -p "$MRFO_BUILD_DIR/dl"
    (cd "$MRFO_BUILD_DIR/dl" &&
     apt-get source --download-only -qq "ucx=$UCX_DEB_VERSION")
    verify_sha256 "$MRFO_BUILD_DIR/dl/$UCX_ORIG_TAR" "$UCX_ORIG_SHA256"
    verify_sha256 "$MRFO_BUILD_DIR/dl/$UCX_DEBIAN_TAR" "$UCX_DEBIAN_SHA256"
    # dpkg-source applies Debian's own patches, which autogen.sh needs
    (cd "$MRFO_BUILD_DIR/dl" &&
     dpkg-source --no-check -x "ucx_$UCX_DEB_VERSION.dsc" \
         "$MRFO_BUILD_DIR/pristine" >/dev/null)
    touch "$MRFO_BUILD_DIR/pristine/.mrfo-verified"
}

# Produce the patched tree in stage/, then sync it into the build tree
# copying only files whose content differs, so make rebuilds only those.

verify_sha256() {
    local file=$1 want=$2 got
    got=$(sha256sum "$file" | cut -d' ' -f1)
    [ "$got" = "$want" ] ||
        die "SHA-256 of $(basename "$file") is $got, expected $want: refusing to build"
}

# Our own files (src/, test/) are copied over the unpacked upstream source.
overlay_own_files() {
    local dst=$1 d
    for d in src test; do
        [ -d "$top/$d" ] && cp -r "$top/$d/." "$dst/$d/"
    done
    return 0
}

# Apply patches/series in order; stop at the first patch that fails.
apply_series() {
    local dst=$1 p
    [ -f "$top/patches/series" ] || return 0
    while read -r p; do
        case "$p" in ''|'#'*) continue ;; esac
        patch -d "$dst" -p1 --batch --forward --quiet --no-backup-if-mismatch \
            <"$top/patches/$p" >"$MRFO_BUILD_DIR/patch.log" 2>&1 ||
            { cat "$MRFO_BUILD_DIR/patch.log" >&2; die "patch does not apply: $p"; }
    done <"$top/patches/series"
}

# Benchmark figures (contrib/bench_*.sh)
# percentile Q (0..1) of the numbers on stdin, in ms; "-" lines are skipped
pct() { grep -v '^-' | sort -g | awk -v q="$1" '{a[NR] = $1} END {
    if (NR == 0) { print "-"; exit }
    i = int(q * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR
    printf "%.1f", a[i] * 1000 }'; }
# "p50 / p99 / max" of column COL of FILE
pcts() {
    local col=$1 file=$2
    echo "$(cut -d' ' -f"$col" "$file" | pct 0.5) /" \
         "$(cut -d' ' -f"$col" "$file" | pct 0.99) /" \
         "$(cut -d' ' -f"$col" "$file" | pct 1.0)"
}
# completions FILE T_FAULT T_FAILOVER: from the client's SLOW records (ops
# that took >= 10 ms), the time from the fault to the first completion after
# the failover of an operation in flight at the fault, and to the last
# completion of those ("-" when none was still in flight at the failover:
# the lane carried none of it)
completions() {
    awk -v t="$2" -v d="$3" '/^SLOW / {
        for (i = 2; i <= NF; i++) { split($i, kv, "=")
            if (kv[1] == "post") p = kv[2]; if (kv[1] == "done") c = kv[2] }
        if (p < t && c > t) {
            if (c > d && (first == "" || c < first)) first = c
            if (c > last) last = c
        } }
        END { if (first == "") print "- -"
              else printf "%.6f %.6f\n", first - t, last - t }' "$1"
}

# count FILE RE: lines of FILE matching RE
count() { grep -c -e "$2" "$1" 2>/dev/null || true; }

# wait_count FILE RE WANT SECS: until FILE has WANT lines matching RE
# (bounded: SECS)
wait_count() {
    local i
    for ((i = 0; i < $4 * 10; i++)); do
        [ "$(count "$1" "$2")" -ge "$3" ] && return 0
        sleep 0.1
    done
    return 1
}
