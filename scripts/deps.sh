# shellcheck shell=bash
# The system packages qbridge's scripts need, installed the same way by each of them (sourced by
# scripts/demo.sh and scripts/test.sh): `deps_need GROUP...` lists what is missing of the
# groups, `deps_install WHO PKG...` installs those packages as root with apt-get (no package's
# postinst may start a system-wide service), and returns 1 with one line saying what to
# install when it cannot.
#
# Groups:
#   build  clang, llvm and libbpf's headers: the eBPF fast path's program (crates/fastpath)
#   demo   ip and ping, for the namespaces of `qbridge demo`
#   tests  what the namespace tests drive: tcpdump, iperf3, ethtool, Open vSwitch, the CNI
#          reference plugins, gobgpd and FRR (EVPN), tshark (VXLAN captures), qemu and a
#          static busybox (the virtual machine test), podman and runc (the container test)

# Prints the missing packages of GROUPs, space-separated (nothing when all are there).
deps_need() {
    local missing=() group
    for group in "$@"; do
        case "$group" in
            build)
                command -v clang >/dev/null 2>&1 || missing+=(clang llvm)
                [ -e /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
                ;;
            demo)
                command -v ip >/dev/null 2>&1 || missing+=(iproute2)
                command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
                ;;
            tests)
                command -v ip >/dev/null 2>&1 || missing+=(iproute2)
                command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
                command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
                command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)
                command -v ethtool >/dev/null 2>&1 || missing+=(ethtool)
                # tests/netns_stacked_ovs.rs runs its own private ovs-vswitchd.
                [ -x /usr/sbin/ovs-vswitchd ] || command -v ovs-vswitchd >/dev/null 2>&1 ||
                    missing+=(openvswitch-switch)
                # host-local IPAM (and the reference plugins) for tests/netns_cni.rs.
                [ -x /usr/lib/cni/host-local ] || missing+=(containernetworking-plugins)
                # EVPN (tests/netns_evpn.rs): gobgpd, which qbridge-evpn drives, and FRR as the
                # peer; the test starts its own zebra, bgpd and gobgpd in namespaces.
                command -v gobgpd >/dev/null 2>&1 || missing+=(gobgpd)
                [ -x /usr/lib/frr/zebra ] || missing+=(frr)
                # Wireshark's dissectors for the VXLAN captures of tests/netns_vxlan*.rs.
                command -v tshark >/dev/null 2>&1 || missing+=(tshark)
                # tests/netns_podman.rs: podman 4 (its CNI backend) runs busybox containers
                # under runc on qbridge-cni; the image is a busybox-static rootfs.
                command -v podman >/dev/null 2>&1 || missing+=(podman)
                command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
                [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 ||
                    missing+=(busybox-static)
                # tests/netns_vm.rs: a qemu guest (TCG) of Debian's kernel and that busybox
                # (scripts/vm-guest.sh downloads the kernel package with apt-get).
                command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
                ;;
            *)
                echo "deps.sh: unknown group $group" >&2
                return 2
                ;;
        esac
    done
    # Each package once, in the order first named.
    local seen=" " p out=()
    for p in "${missing[@]+"${missing[@]}"}"; do
        case "$seen" in *" $p "*) continue ;; esac
        seen="$seen$p "
        out+=("$p")
    done
    echo "${out[*]+"${out[*]}"}"
}

# Installs PKGs with apt-get as root; WHO names the script in its messages. Not root, or no
# apt-get: one line saying what to install, and status 1.
deps_install() {
    local who=$1
    shift
    [ $# -gt 0 ] || return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: missing $*: install them (Debian: sudo apt-get install $*) or run $who as root" >&2
        return 1
    fi
    echo "$who: installing $* (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    # No package's postinst may start a system-wide service (openvswitch-switch, frr would):
    # invoke-rc.d asks policy-rc.d, and 101 means "not allowed".
    local policy_rc="" status=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        policy_rc=1
    fi
    # wireshark-common asks whether non-root users may capture: no, without asking.
    if command -v debconf-set-selections >/dev/null 2>&1; then
        echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    fi
    apt-get update -qq >/dev/null || status=$?
    if [ "$status" = 0 ]; then
        apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
    fi
    if [ -n "$policy_rc" ]; then rm -f /usr/sbin/policy-rc.d; fi
    if [ "$status" != 0 ]; then
        echo "$who: apt-get could not install $* (exit $status)" >&2
    fi
    return "$status"
}
