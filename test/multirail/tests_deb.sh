# Debian packages (sourced by contrib/test.sh): the packages contrib/deb.sh
# built (the build command runs it) install over Debian's, in a private
# mount namespace whose /usr, /var and /etc are overlays (deb_ns.sh), so the
# machine's own packages stay as they are: versions, Debian's ucx_info
# listing the knobs from the installed libraries, the site switch in
# /etc/ucx/ucx.conf, and Debian's Open MPI and MPICH failing a rail over
# with no LD_LIBRARY_PATH, and the way back to Debian's own 1.13.1-1
# packages. Afterwards the machine's libucx0 must be unchanged.

mr_deb_dir() { echo "${MRFO_BUILD_DIR:-$MR_TOP/build}/deb"; }

t_deb_packages() {
    local dir debs=() pkg arch v before after tmp line rc=0
    dir=$(mr_deb_dir)
    arch=$(dpkg --print-architecture)
    for pkg in libucx0 libucx-dev ucx-utils; do
        v=$(ls "$dir/${pkg}_"*"+mrfo"*"_$arch.deb" 2>/dev/null | head -1)
        [ -n "$v" ] || { mr_fail "no $pkg package in $dir (contrib/deb.sh)"; return 0; }
        debs+=("$v")
    done
    before=$(dpkg-query -W -f='${Version}' libucx0 ucx-utils)
    tmp=$(mktemp -d /tmp/mrfo-deb.XXXXXX)
    unshare -m --propagation private \
        bash "$MR_TOP/test/multirail/deb_ns.sh" "$tmp" "${debs[@]}" \
        >"$MR_DIR/checks" 2>"$MR_DIR/ns.err" || rc=$?
    rmdir "$tmp" 2>/dev/null || true
    "$MR_BED" down
    [ "$rc" = 0 ] || mr_fail "deb_ns.sh exited with $rc: $(tail -2 "$MR_DIR/ns.err")"
    for v in dpkg_install version_libucx0 version_libucx-dev version_ucx-utils \
             ucx_info_knobs ucx_info_libucp ucx_conf_switch openmpi_failover \
             mpich_failover way_back; do
        line=$(grep "^CHECK $v " "$MR_DIR/checks" || true)
        case "$line" in
            "CHECK $v ok"*) mr_note+=" $v" ;;
            "")             mr_fail "check $v did not run" ;;
            *)              mr_fail "${line#CHECK }" ;;
        esac
    done
    mr_note+=" $(sed -n 's/^CHECK openmpi_failover ok //p' "$MR_DIR/checks")"
    after=$(dpkg-query -W -f='${Version}' libucx0 ucx-utils)
    mr_expect_eq "the machine's libucx0 and ucx-utils" "$before" "$after"
    grep -q "MULTIRAIL" "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/libucp.so.0" &&
        mr_fail "the machine's libucp.so.0 is ours after the test"
    return 0
}

mr_deb_all() {
    mr_run_test deb_packages_install_and_fail_over t_deb_packages
}
