#!/usr/bin/env bash
# Installs qbridge: the binary, its man page qbridge(8) (generated from the binary's own --help
# texts, so it cannot drift from them, with the examples of dist/qbridge.8.examples), bash
# completion, and the systemd service that runs the daemon as user qbridge with CAP_NET_RAW
# and CAP_NET_ADMIN only (docs/operating.md).
#
# Usage: scripts/install.sh [--prefix DIR] [--destdir DIR] [--bin FILE] [--no-service]
#   --prefix DIR   where the binaries, man pages and completion go (default /usr/local):
#                  DIR/bin/qbridge, DIR/bin/qbridge-evpn, DIR/share/man/man8/qbridge.8,
#                  qbridge-cni.8, qbridge-evpn.8, DIR/share/bash-completion/completions/qbridge,
#                  DIR/libexec/qbridge/qbridge-ifup and qbridge-ifdown (qemu's script=)
#   --destdir DIR  stage everything under DIR (packaging); nothing is started or created
#   --bin FILE     install FILE instead of building (cargo build --release --locked -p qbridge
#                  -p qbridge-evpn, which builds qbridge, qbridge-cni and qbridge-evpn)
#   --no-service   leave out the systemd unit, the qbridge user and /etc/qbridge
# The CNI plugin qbridge-cni (built beside the binary, or next to FILE) goes to
# /opt/cni/bin/qbridge-cni, where container runtimes look by default (docs/cni.md); the EVPN
# adapter qbridge-evpn (built beside it, or next to FILE) to DIR/bin (docs/evpn.md); each
# with its man page (dist/qbridge-cni.8, dist/qbridge-evpn.8).
# The service files: /etc/systemd/system/qbridge.service, /etc/sysusers.d/qbridge.conf and
# /etc/qbridge/qbridge.conf (kept if it exists). As root without --destdir it also creates the
# qbridge user and reloads systemd; 'systemctl enable --now qbridge' then starts the switch.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=
bin=
service=1
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) prefix=${2:?--prefix needs a DIR}; shift 2 ;;
        --destdir) destdir=${2:?--destdir needs a DIR}; shift 2 ;;
        --bin) bin=${2:?--bin needs a FILE}; shift 2 ;;
        --no-service) service=; shift ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done

say() { echo "install.sh: $*" >&2; }

if [ -z "$bin" ]; then
    say "building qbridge, qbridge-cni and qbridge-evpn (cargo build --release --locked -p qbridge -p qbridge-evpn)…"
    cargo build --release --locked -p qbridge -p qbridge-evpn
    bin=target/release/qbridge
fi
[ -x "$bin" ] || { say "$bin is not an executable"; exit 1; }

root=$destdir
bindir=$prefix/bin
mandir=$prefix/share/man/man8
compdir=$prefix/share/bash-completion/completions

install -d "$root$bindir" "$root$mandir" "$root$compdir"
install -m 0755 "$bin" "$root$bindir/qbridge"
say "binary: $root$bindir/qbridge"
cni=$(dirname "$bin")/qbridge-cni
if [ -x "$cni" ]; then
    install -d "$root/opt/cni/bin"
    install -m 0755 "$cni" "$root/opt/cni/bin/qbridge-cni"
    say "CNI plugin: $root/opt/cni/bin/qbridge-cni"
fi
evpn=$(dirname "$bin")/qbridge-evpn
if [ -x "$evpn" ]; then
    install -m 0755 "$evpn" "$root$bindir/qbridge-evpn"
    say "EVPN adapter: $root$bindir/qbridge-evpn"
fi

# --- the man page, from the --help texts ---
roff_block() {
    # A preformatted block: backslashes escaped, no line may start a request.
    echo ".nf"
    sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
    echo ".fi"
}
version=$("$bin" -V | awk '{print $2}')
{
    echo ".TH QBRIDGE 8 \"\" \"qbridge $version\" \"System Administration\""
    echo ".SH NAME"
    echo "qbridge \\- userspace VLAN-aware Ethernet switch: 802.1Q bridges, 802.1ad provider bridges (Q-in-Q)"
    echo ".SH DESCRIPTION"
    echo "qbridge switches Ethernet frames between Linux interfaces (AF_PACKET, AF_XDP), TAP devices"
    echo "and pcap files, with the Linux bridge's semantics and the words of"
    echo ".BR ip-link (8)"
    echo "and"
    echo ".BR bridge (8)."
    echo "A daemon runs the switch; the same binary sends it commands over its control socket."
    echo ".SH COMMANDS"
    "$bin" --help | roff_block
    echo ".SH DAEMON"
    "$bin" daemon --help | roff_block
    echo ".SH REPLAY"
    "$bin" replay --help | roff_block
    echo ".SH FILES"
    echo ".TP"
    echo ".I /run/qbridge/qbridge.sock"
    echo "the control socket (mode 0600, or 0660 with \\fB\\-\\-socket\\-group\\fR)"
    echo ".TP"
    echo ".I /run/qbridge/interfaces/"
    echo "one lock per interface in use, so that no interface is a port of two switches"
    echo ".TP"
    echo ".I /var/lib/qbridge/state"
    echo "the configuration the service keeps across restarts (\\fB\\-\\-state\\fR)"
    echo ".TP"
    echo ".I /etc/qbridge/qbridge.conf"
    echo "the service's configuration file, applied at start and on reload"
    echo ".SH ENVIRONMENT"
    echo ".TP"
    echo ".B QBRIDGE_SOCKET"
    echo "the control socket when \\fB\\-\\-socket\\fR is not given"
    echo ".TP"
    echo ".B QBRIDGE_LOG"
    echo "log level: warn, info, debug (default: the daemon logs its start and warnings)"
    echo ".TP"
    echo ".B QBRIDGE_LOCK_DIR"
    echo "where interface locks are kept (default /run/qbridge/interfaces)"
    cat dist/qbridge.8.examples
    echo ".SH SEE ALSO"
    echo ".BR qbridge-cni (8),"
    echo ".BR qbridge-evpn (8),"
    echo ".BR ip-link (8),"
    echo ".BR bridge (8),"
    echo ".BR ovs-vsctl (8);"
    echo "the documentation in docs/ of the source: commands.md, operating.md, daemon.md."
} >"$root$mandir/qbridge.8"
say "man page: $root$mandir/qbridge.8 (man qbridge)"
# The two other programs' pages, with the version of this build, where they were installed.
for prog in qbridge-cni qbridge-evpn; do
    if [ -x "$(dirname "$bin")/$prog" ]; then
        sed "s|@VERSION@|$version|" "dist/$prog.8" >"$root$mandir/$prog.8"
        chmod 0644 "$root$mandir/$prog.8"
        say "man page: $root$mandir/$prog.8 (man $prog)"
    fi
done

install -m 0644 dist/qbridge.bash-completion "$root$compdir/qbridge"
say "bash completion: $root$compdir/qbridge"

# qemu's script=/downscript= (and libvirt's): a VM's TAP becomes a port in one step.
install -d "$root$prefix/libexec/qbridge"
install -m 0755 dist/qbridge-ifup dist/qbridge-ifdown "$root$prefix/libexec/qbridge/"
say "VM helpers: $root$prefix/libexec/qbridge/qbridge-ifup, qbridge-ifdown (profiles in /etc/qbridge/ifup, docs/hosts.md)"

if [ -n "$service" ]; then
    install -d "$root/etc/systemd/system" "$root/etc/sysusers.d" "$root/etc/qbridge"
    sed "s|@BINDIR@|$bindir|g" dist/qbridge.service >"$root/etc/systemd/system/qbridge.service"
    chmod 0644 "$root/etc/systemd/system/qbridge.service"
    install -m 0644 dist/qbridge.sysusers "$root/etc/sysusers.d/qbridge.conf"
    if [ -e "$root/etc/qbridge/qbridge.conf" ]; then
        say "kept the existing $root/etc/qbridge/qbridge.conf"
    else
        install -m 0644 dist/qbridge.conf "$root/etc/qbridge/qbridge.conf"
    fi
    say "service: $root/etc/systemd/system/qbridge.service (user qbridge, CAP_NET_RAW CAP_NET_ADMIN)"
    if [ -z "$destdir" ] && [ "$(id -u)" = 0 ]; then
        if command -v systemd-sysusers >/dev/null 2>&1; then
            systemd-sysusers /etc/sysusers.d/qbridge.conf
        elif ! getent passwd qbridge >/dev/null; then
            useradd --system --user-group --home-dir /var/lib/qbridge --shell /usr/sbin/nologin qbridge
        fi
        if [ -d /run/systemd/system ]; then
            systemctl daemon-reload
            say "now: systemctl enable --now qbridge   (configuration: /etc/qbridge/qbridge.conf)"
        else
            say "systemd is not running here; start the daemon by hand: qbridge daemon --help"
        fi
    fi
fi
say "done: $root$bindir/qbridge"
