#!/bin/bash
#
# Run by t_deb_packages (tests_deb.sh) inside a private mount namespace
# (unshare -m): /usr, /var and /etc are covered by overlays whose upper
# layers live on a tmpfs of this namespace, so the packages installed here
# (dpkg -i) vanish with it and the machine's own libucx0 stays as it is.
# Checks the installed packages the way an administrator would use them,
# and prints one "CHECK name ok|fail detail" line each.
#
# Usage: deb_ns.sh TMPDIR DEB...   (MRFO_PREFIX, MRFO_RESULTS and MR_DIR as
#                                   in the test command)
#
set -eEu -o pipefail

tmp=$1
shift
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$ma
# where the loader finds it: /lib/$ma on a merged-/usr system (Debian 12)
ldlibdir=$libdir
[ "$(readlink -f /lib)" = /usr/lib ] && ldlibdir=/lib/$ma
check() { echo "CHECK $1 $2 ${3:-}"; }

mount --make-rprivate /
mount -t tmpfs mrfo-deb-upper "$tmp"
for d in usr var etc; do
    mkdir -p "$tmp/$d.up" "$tmp/$d.wk"
    mount -t overlay "mrfo-deb-$d" \
        -o "lowerdir=/$d,upperdir=$tmp/$d.up,workdir=$tmp/$d.wk" "/$d"
done

if dpkg -i "$@" >"$MR_DIR/dpkg.log" 2>&1; then
    check dpkg_install ok
else
    check dpkg_install fail "$(tail -3 "$MR_DIR/dpkg.log" | tr '\n' ' ')"
    exit 0
fi

for pkg in libucx0 libucx-dev ucx-utils; do
    v=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
    case "$v" in
        *+mrfo*) check "version_$pkg" ok "$v" ;;
        *)       check "version_$pkg" fail "'$v'" ;;
    esac
done

# Debian's ucx_info from the installed package, on the installed libraries
out=$(env -u LD_LIBRARY_PATH /usr/bin/ucx_info -cf 2>&1 || true)
n=$(grep -c '^UCX_MULTIRAIL_' <<<"$out" || true)
if [ "$n" -ge 6 ] && grep -q '^UCX_MULTIRAIL_FAILOVER=n$' <<<"$out"; then
    check ucx_info_knobs ok "$n knobs"
else
    check ucx_info_knobs fail "$n UCX_MULTIRAIL_* knobs"
fi
out=$(env -u LD_LIBRARY_PATH ldd /usr/bin/ucx_info 2>&1 || true)
if grep -q "libucp.so.0 => $ldlibdir/libucp.so.0" <<<"$out" &&
   grep -q MULTIRAIL_FAILOVER "$libdir/libucp.so.0"; then
    check ucx_info_libucp ok
else
    check ucx_info_libucp fail "$(grep libucp <<<"$out" || true)"
fi

# ucx.conf: the site switch in the packages' configuration directory
conf=/etc/ucx/ucx.conf
mkdir -p "$(dirname "$conf")"
printf '[global]\nUCX_MULTIRAIL_FAILOVER=y\n' >"$conf"
out=$(env -u LD_LIBRARY_PATH /usr/bin/ucx_info -cf 2>&1 || true)
if grep -q '^UCX_MULTIRAIL_FAILOVER=y$' <<<"$out"; then
    check ucx_conf_switch ok "$conf"
else
    check ucx_conf_switch fail "$conf not read ($(grep '^UCX_MULTIRAIL_FAILOVER=' <<<"$out" || true))"
fi
rm -f "$conf"

# Debian's Open MPI and MPICH, with no LD_LIBRARY_PATH, fail over a rail
# cut under traffic (tests_failover.sh: t_mpi_rail_cut)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tests_failover.sh"
for mpi in openmpi mpich; do
    mr_test_ok=1 mr_note=
    MR_MPI=$mpi MR_MPI_LIBDIR=$ldlibdir t_mpi_rail_cut y >"$MR_DIR/$mpi.err" 2>&1
    cp "$MR_DIR/mpi.out" "$MR_DIR/$mpi.out" 2>/dev/null || true
    if [ "$mr_test_ok" = 1 ]; then
        check "${mpi}_failover" ok "$mr_note"
    else
        check "${mpi}_failover" fail "$(grep FAIL "$MR_DIR/$mpi.err" | tr '\n' ' ')"
    fi
    "$MR_BED" down
done

# The way back (README: apt install libucx0=1.13.1-1 ...): Debian's own
# packages of that version, fetched by contrib/deb.sh, installed over ours;
# then Debian's ucx_info runs on Debian's libraries again, with no failover
# knob
debian=()
for pkg in libucx0 libucx-dev ucx-utils; do
    debian+=("$(dirname "$1")/debian/${pkg}_1.13.1-1_$(dpkg --print-architecture).deb")
done
if ! ls "${debian[@]}" >/dev/null 2>&1; then
    check way_back fail "no Debian packages in $(dirname "$1")/debian (contrib/deb.sh)"
elif ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --allow-downgrades --no-install-recommends "${debian[@]}" \
        >"$MR_DIR/way_back.log" 2>&1; then
    check way_back fail "apt-get install: $(tail -2 "$MR_DIR/way_back.log" | tr '\n' ' ')"
else
    v=$(dpkg-query -W -f='${Version} ' libucx0 libucx-dev ucx-utils)
    out=$(env -u LD_LIBRARY_PATH /usr/bin/ucx_info -cf 2>&1 || true)
    n=$(grep -c '^UCX_MULTIRAIL_' <<<"$out" || true)
    if [ "$v" = "1.13.1-1 1.13.1-1 1.13.1-1 " ] && [ "$n" = 0 ] &&
       grep -q '^UCX_TLS=' <<<"$out"; then
        check way_back ok "Debian's 1.13.1-1 back, ucx_info lists no failover knob"
    else
        check way_back fail "versions '$v', $n UCX_MULTIRAIL_* knobs"
    fi
fi
