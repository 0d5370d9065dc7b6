#!/usr/bin/env bash
# qbridge beside its peers on live veths: the same two hosts (network namespaces, kernel TCP/IP,
# MTU 1500, offloads at their defaults, IPv6 off) joined several ways and measured the same way,
# interleaved in one run: each setup is built, measured and torn down before the next, and
# ROUNDS=N repeats the whole sequence (the table shows the median of the rounds).
#
# Setups (SETUPS, default in this order):
#   veth       hostA eth0 = hostB eth0, one veth pair (the ceiling)
#   kbridge    the Linux bridge, no VLAN filtering (ip link add br0 type bridge)
#   ovs        Open vSwitch, userspace (netdev) datapath, one bridge, two system ports,
#              other_config:userspace-tso-enable=true
#   ovs-txoff  the same with the hosts' tx offloads off (ethtool -K eth0 tx off: no checksum
#              offload, so no TSO), as OVS's docs advise for veths on the userspace datapath
#   ovs-qinq   OVS as the provider network: hostA - CE1 -patch- PE1 =trunk= PE2 -patch- CE2 -
#              hostB in one netdev datapath; CE access port tag 10, CE uplink trunks=10 (patch),
#              PE customer port vlan_mode=dot1q-tunnel tag=100 (patch, S-tag 0x88a8), PE trunk
#              trunks=100 on a veth pair with MTU 1508; other_config:vlan-limit=2
#   qb-plain   qbridge: scripts/plain-bridge.batch, one 802.1Q bridge, two untagged AF_PACKET ports
#   qb-qinq    qbridge: the provider network of scripts/provider-network.batch (4 bridges, 4
#              AF_PACKET ports and 2 patch links, 802.1ad S-VLAN 100 over C-VLAN 10, 3 veth
#              hops), the same shape as ovs-qinq
#   qb-plain-xdp, qb-qinq-xdp
#              the same with AF_XDP ports (type afxdp, native mode) instead of AF_PACKET; the
#              hosts' tx offloads are off (AF_XDP carries no checksum metadata: docs/daemon.md)
#   (also available: ovs-qinq-txoff; qb-qinq-veth, the provider network with veths instead
#   of patch links, scripts/provider-network-veth.batch, 8 AF_PACKET ports, 5 veth hops)
#
# Per setup:
#   RTT        ping -i 0.01 -c 200 (idle switch), p50 and p99 of the per-packet times, µs
#   TCP        iperf3, 1, 4 and 16 streams, SECS s each; the receiver's rate, Gbit/s
#   cores      during the TCP-4 run: CPU cores used by the switch process (utime+stime of
#              /proc/PID/stat; qbridge daemon, ovs-vswitchd) and by softirq on the whole machine
#              (/proc/stat; for veth and the kernel bridge the forwarding happens there)
#   UDP        iperf3 -u -b 0 with 1472- and 18-byte payloads: delivered payload Mbit/s and
#              delivered frames/s (the receiver's count)
#   64B        a sender blasts 60-byte (64 with FCS) UDP frames at hostB's MAC for SECS s.
#              SENDER64=xdp (default): qbridge-blast (crates/bench), the kernel's XDP
#              live-frames test run sending out of hostA's eth0 from a page pool, no socket
#              buffer built on the sender's side (alone it offers 7 Mframes/s here: the sender is
#              not what limits); the switch-side end of hostA's veth gets `ethtool -K gro on` (a
#              veth receives XDP-sent frames only with NAPI on), in every setup alike; that
#              NAPI runs on the sender's CPU, as a veth's backlog does. Where the unpaced run
#              loses 1 % or more, paced runs search the highest rate that loses less (below).
#              SENDER64=trafgen: trafgen (netsniff-ng, PACKET_TX_RING, qdisc bypass,
#              TRAFGEN_CPUS CPUs; the figures before 2026-11-26). offered = hostA eth0
#              tx_packets+tx_dropped, delivered = hostB eth0 rx_packets (interface counters, no
#              userspace receiver), loss = 1 - delivered/offered; hostB drops the frames at
#              its eth0's ingress hook (nftables netdev table, after the rx counter) so that its
#              stack's ICMP answers do not load whichever CPU handed it the frame (SINK64=0:
#              no drop, as before 2026-11-24)
# and prints one table with ratios to the kernel bridge, plus notes: the drop counters of qbridge
# and OVS and the warnings in their logs.
#
# Usage (root):  scripts/bench-live.sh
# Environment:
#   SECS=5            seconds per test (each row takes about 6 SECS + 6 s: the default 7 rows
#                     about 4 minutes at SECS=5, 3 minutes at SECS=3)
#   ROUNDS=1          repeat the whole interleaved sequence N times, report medians
#   SETUPS="..."      subset/order of setups (names above)
#   QB_VARIANTS="off:--fast-path off fp:--fast-path on"
#                     qbridge rows, NAME:daemon args (one row per variant and qb setup, named
#                     qb-plain/NAME); default: the fast path off and on (all CPUs as workers)
#                     when `qbridge daemon --help` lists --fast-path, else "w1:--workers 1
#                     wN:--workers N" when it lists --workers, else one variant with no
#                     extra arguments
#   QB_DAEMON_ARGS    daemon arguments for every variant
#   QB_PORT_TYPE      port type written into the qbridge batch files instead of afpacket
#   QB_BUILD=0        do not run cargo build --release for qbridge and qbridge-blast (use the
#                     binaries in target/release)
#   BENCH_JSON=FILE   also write every round's values and the medians as JSON
#   SINK64=0          64B test without hostB's ingress drop (hostB's stack answers each frame)
#   SENDER64=xdp      the 64B test's sender: xdp (qbridge-blast) or trafgen; xdp falls back to
#                     trafgen where qbridge-blast did not build (said on stderr); one that
#                     cannot run leaves the 64B columns "-" and its error in the notes
#   BLAST_TRIALS=5    paced runs of the 64B rate search (SENDER64=xdp; only where the
#                     unpaced run lost 1 % or more)
#   TRAFGEN_CPUS=1    trafgen processes (one per CPU) for the 64B test with SENDER64=trafgen
#   PERF_DIR=DIR      also `perf record -a -g` during each TCP-4 run: DIR/ROW-rN.data and the
#                     symbols above 0.8 % of the samples (self) in DIR/ROW-rN.txt (that
#                     run's TCP-4 figure is then measured under perf)
# Installs what is missing (iperf3, iputils-ping, jq, ethtool, netsniff-ng, nftables, clang and
# libbpf-dev for qbridge-blast, and openvswitch-switch when an ovs setup is asked for, without
# starting its system service).
# OVS runs fully private: its own ovsdb-server and ovs-vswitchd, started here inside the
# switch namespace with database, sockets, pid and log files in the temp dir, never a system OVS.
# Everything it creates (namespaces qbbl-PID-*, daemons, iperf3 servers, trafgen, OVS processes,
# the temp dir) is removed on exit, also on Ctrl-C. Traffic stays between its own namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SECS:-5}
rounds=${ROUNDS:-1}
setups=${SETUPS:-veth kbridge ovs ovs-txoff ovs-qinq qb-plain qb-qinq qb-plain-xdp qb-qinq-xdp}
me=bench-live.sh
[ "$(id -u)" = 0 ] || { echo "$me: needs root (network namespaces)" >&2; exit 1; }
case "$secs" in ''|*[!0-9]*) echo "$me: SECS must be whole seconds" >&2; exit 1 ;; esac
case "$rounds" in ''|*[!0-9]*|0) echo "$me: ROUNDS must be a positive number" >&2; exit 1 ;; esac
for s in $setups; do
    case "$s" in veth|kbridge|ovs|ovs-txoff|ovs-qinq|ovs-qinq-txoff|qb-plain|qb-qinq|qb-qinq-veth|qb-plain-xdp|qb-qinq-xdp) ;;
        *) echo "$me: unknown setup '$s'" >&2; exit 1 ;; esac
done
want_ovs=0; want_qb=0
case " $setups " in *" ovs"*) want_ovs=1 ;; esac
case " $setups " in *" qb-"*) want_qb=1 ;; esac

t_start=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
p=qbbl-$$
tmp=$(mktemp -d /tmp/qbbl.XXXXXX)
pids=()          # background processes of the current setup (killed at teardown)
policy_rc=""     # set when we wrote /usr/sbin/policy-rc.d ourselves (removed on exit)

reap() {  # reap PID: TERM, wait up to 3 s, then KILL
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
stop_procs() {
    local pid
    for pid in "${pids[@]}"; do reap "$pid"; done
    pids=()
}
del_netns() {
    local ns
    for ns in $(ip netns list | awk '{print $1}' | grep "^$p-" || true); do ip netns del "$ns" 2>/dev/null || true; done
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$rc" != 0 ]; then
        # A failed run shows what the switches logged (a daemon that died says why here).
        for f in "$tmp"/qb-*.log "$tmp"/ovs*.log; do
            [ -s "$f" ] || continue
            echo "-- tail of $(basename "$f") (exit $rc)" >&2
            tail -n 30 "$f" >&2
        done
    fi
    stop_procs
    del_netns
    if [ -n "$policy_rc" ]; then rm -f /usr/sbin/policy-rc.d; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- tools ------------------------------------------------------------------------------------
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ping >/dev/null || need+=(iputils-ping)
command -v jq >/dev/null || need+=(jq)
command -v ethtool >/dev/null || need+=(ethtool)
command -v trafgen >/dev/null || need+=(netsniff-ng)
[ "${SINK64:-1}" = 0 ] || command -v nft >/dev/null || need+=(nftables)
# qbridge-blast's XDP program is built by clang (crates/bench/build.rs)
[ "${SENDER64:-xdp}" != xdp ] || command -v clang >/dev/null || need+=(clang libbpf-dev)
if [ $want_ovs = 1 ] && ! { command -v ovs-vswitchd && command -v ovsdb-server && command -v ovs-vsctl; } >/dev/null; then
    need+=(openvswitch-switch)
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "$me: installing ${need[*]}" >&2
    # A package's postinst must not start a system-wide service (openvswitch-switch would):
    # invoke-rc.d asks policy-rc.d, and 101 means "not allowed".
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; policy_rc=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
        echo "$me: could not install all of ${need[*]}; the setups or columns needing them show '-'" >&2
    if [ -n "$policy_rc" ]; then rm -f /usr/sbin/policy-rc.d; policy_rc=""; fi
fi
command -v jq >/dev/null || { echo "$me: needs jq" >&2; exit 1; }
have_trafgen=0; command -v trafgen >/dev/null && have_trafgen=1
ovs_schema=/usr/share/openvswitch/vswitch.ovsschema

qb=$PWD/target/release/qbridge
if [ $want_qb = 1 ]; then
    if [ "${QB_BUILD:-1}" != 0 ]; then
        env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge
    fi
    [ -x "$qb" ] || { echo "$me: $qb missing (build failed?)" >&2; exit 1; }
fi
sender64=${SENDER64:-xdp}
case "$sender64" in xdp|trafgen) ;; *) echo "$me: SENDER64 must be xdp or trafgen" >&2; exit 1 ;; esac
qbblast=$PWD/target/release/qbridge-blast
if [ "$sender64" = xdp ] && [ "${QB_BUILD:-1}" != 0 ]; then
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge-bench --bin qbridge-blast ||
        echo "$me: qbridge-blast did not build; the 64B test uses trafgen" >&2
fi
if [ "$sender64" = xdp ] && [ ! -x "$qbblast" ]; then sender64=trafgen; fi
# qbridge variants: "NAME:ARGS NAME:ARGS", ARGS running up to the next NAME: word
vnames=(); vargs=()
if [ "${QB_VARIANTS+set}" = set ]; then
    qbv=$QB_VARIANTS
elif [ $want_qb = 1 ] && "$qb" daemon --help 2>&1 | grep -q -- --fast-path; then
    qbv="off:--fast-path off --workers $(nproc) fp:--fast-path on --workers $(nproc)"
elif [ $want_qb = 1 ] && "$qb" daemon --help 2>&1 | grep -q -- --workers; then
    qbv="w1:--workers 1 wN:--workers $(nproc)"
else
    qbv=""
fi
cur=""; cargs=""; have=0
for tok in $qbv; do
    if [[ $tok =~ ^([A-Za-z][A-Za-z0-9_]*):(.*)$ ]]; then
        if [ $have = 1 ]; then vnames+=("$cur"); vargs+=("${cargs# }"); fi
        cur=${BASH_REMATCH[1]}; cargs=${BASH_REMATCH[2]}; have=1
    else
        cargs+=" $tok"
    fi
done
if [ $have = 1 ]; then vnames+=("$cur"); vargs+=("${cargs# }"); fi
if [ ${#vnames[@]} = 0 ]; then vnames=(""); vargs=(""); fi

# rows: NAME KIND VARIANT-INDEX
rows=(); rkind=(); rvar=()
for s in $setups; do
    case "$s" in
        qb-*) for i in "${!vnames[@]}"; do
                  rows+=("$s${vnames[$i]:+/${vnames[$i]}}"); rkind+=("$s"); rvar+=("$i"); done ;;
        *) rows+=("$s"); rkind+=("$s"); rvar+=(0) ;;
    esac
done

# ---- building blocks --------------------------------------------------------------------------
mkns() {
    ip netns add "$p-$1"
    ip -n "$p-$1" link set lo up
    ip netns exec "$p-$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}
veth() {  # veth NS_A IF_A NS_B IF_B: a pair, both up (no MTU set)
    ip -n "$p-$1" link add "$2" type veth peer name "$4" netns "$p-$3"
    ip -n "$p-$1" link set "$2" up
    ip -n "$p-$3" link set "$4" up
}
hosts() {  # the two hosts, with the switch-side ends $1 and $2 in namespace sw
    mkns a; mkns b; mkns sw
    veth a eth0 sw "$1"; veth b eth0 sw "$2"
    ip -n "$p-a" addr add 10.77.0.1/24 dev eth0
    ip -n "$p-b" addr add 10.77.0.2/24 dev eth0
}
switch_pid=""; switch_kind=""; qb_sock=""; qb_log=""

start_qbridge() {  # start_qbridge BATCHFILE VARIANT-INDEX ROW
    local batch=$tmp/qb.batch log sock=$tmp/qb.sock
    log=$tmp/qb-${3//\//_}.log
    local ptype=${QB_PORT_TYPE:-}
    case "$3" in qb-*-xdp*) ptype=afxdp ;; esac
    if [ -n "$ptype" ]; then
        sed "s/ type afpacket dev / type $ptype dev /" "$1" >"$batch"
    else
        cp "$1" "$batch"
    fi
    # shellcheck disable=SC2086  # the daemon arguments are word lists
    QBRIDGE_LOG=warn ip netns exec "$p-sw" "$qb" daemon -batch "$batch" --socket "$sock" \
        ${QB_DAEMON_ARGS:-} ${vargs[$2]} 2>"$log" &
    pids+=($!); switch_pid=$!; switch_kind=qbridge; qb_sock=$sock; qb_log=$log
    for _ in $(seq 200); do
        [ -S "$sock" ] && return 0
        kill -0 "$switch_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "$me: qbridge daemon did not start ($3):" >&2; cat "$log" >&2
    return 1
}

ovsd=$tmp/ovs
vsctl() { OVS_RUNDIR=$ovsd ovs-vsctl --db="unix:$ovsd/db.sock" --timeout=30 "$@"; }
start_ovs() {  # a private ovsdb-server and ovs-vswitchd inside namespace sw; ARGS: extra other_config
    rm -rf "$ovsd"; mkdir -p "$ovsd"
    local envs=(OVS_RUNDIR="$ovsd" OVS_DBDIR="$ovsd" OVS_LOGDIR="$ovsd" OVS_SYSCONFDIR="$ovsd")
    ovsdb-tool create "$ovsd/conf.db" "$ovs_schema"
    env "${envs[@]}" ip netns exec "$p-sw" ovsdb-server "$ovsd/conf.db" --remote="punix:$ovsd/db.sock" \
        --pidfile="$ovsd/ovsdb-server.pid" --unixctl="$ovsd/ovsdb-server.ctl" \
        --log-file="$ovsd/ovsdb-server.log" --no-chdir 2>>"$ovsd/ovsdb-server.err" &
    pids+=($!)
    for _ in $(seq 100); do [ -S "$ovsd/db.sock" ] && break; sleep 0.05; done
    vsctl --no-wait init
    vsctl --no-wait set Open_vSwitch . other_config:userspace-tso-enable=true "$@"
    env "${envs[@]}" ip netns exec "$p-sw" ovs-vswitchd "unix:$ovsd/db.sock" \
        --pidfile="$ovsd/ovs-vswitchd.pid" --unixctl="$ovsd/ovs-vswitchd.ctl" \
        --log-file="$ovsd/ovs-vswitchd.log" --no-chdir 2>>"$ovsd/ovs-vswitchd.err" &
    pids+=($!); switch_pid=$!; switch_kind=ovs
    for _ in $(seq 100); do [ -S "$ovsd/ovs-vswitchd.ctl" ] && return 0; sleep 0.05; done
    echo "$me: ovs-vswitchd did not start" >&2; tail -5 "$ovsd/ovs-vswitchd.log" >&2
    return 1
}

build() {  # build KIND VARIANT-INDEX ROW
    local kind=$1 var=$2 row=$3
    switch_pid=""; switch_kind=""; qb_sock=""; qb_log=""
    # the other end of hostA's eth0 (namespace suffix, interface): the 64B XDP sender's receiver
    case "$kind" in
        veth) a_end=(b eth0) ;;
        ovs-qinq*|qb-qinq*) a_end=(sw a0) ;;
        *) a_end=(sw s1) ;;
    esac
    case "$kind" in
    veth)
        mkns a; mkns b; veth a eth0 b eth0
        ip -n "$p-a" addr add 10.77.0.1/24 dev eth0; ip -n "$p-b" addr add 10.77.0.2/24 dev eth0 ;;
    kbridge)
        hosts s1 s2
        ip -n "$p-sw" link add br0 type bridge
        ip -n "$p-sw" link set s1 master br0; ip -n "$p-sw" link set s2 master br0
        ip -n "$p-sw" link set br0 up ;;
    ovs|ovs-txoff)
        hosts s1 s2
        start_ovs || return 1
        vsctl add-br br0 -- set bridge br0 datapath_type=netdev -- add-port br0 s1 -- add-port br0 s2 ;;
    ovs-qinq|ovs-qinq-txoff)
        hosts a0 b0
        veth sw t1 sw t2
        # two tags on a 1500-byte payload: 1522-byte frames; OVS's AF_PACKET send refuses them
        # ("Message too long") unless the trunk's MTU leaves room for both tags
        ip -n "$p-sw" link set t1 mtu 1508; ip -n "$p-sw" link set t2 mtu 1508
        # vlan-limit=2: OVS matches both tags (default 1 treats the C-tag as payload, and the
        # provider network then carries nothing)
        start_ovs other_config:vlan-limit=2 || return 1
        local b
        for b in ce1 pe1 pe2 ce2; do vsctl add-br "$b" -- set bridge "$b" datapath_type=netdev; done
        vsctl add-port ce1 a0 tag=10 \
            -- add-port ce1 ce1-up trunks=10 -- set interface ce1-up type=patch options:peer=pe1-c1 \
            -- add-port pe1 pe1-c1 vlan_mode=dot1q-tunnel tag=100 other_config:qinq-ethtype=802.1ad \
            -- set interface pe1-c1 type=patch options:peer=ce1-up \
            -- add-port pe1 t1 trunks=100 \
            -- add-port pe2 t2 trunks=100 \
            -- add-port pe2 pe2-c1 vlan_mode=dot1q-tunnel tag=100 other_config:qinq-ethtype=802.1ad \
            -- set interface pe2-c1 type=patch options:peer=ce2-up \
            -- add-port ce2 ce2-up trunks=10 -- set interface ce2-up type=patch options:peer=pe2-c1 \
            -- add-port ce2 b0 tag=10 ;;
    qb-plain|qb-plain-xdp)
        hosts s1 s2
        start_qbridge scripts/plain-bridge.batch "$var" "$row" || return 1 ;;
    qb-qinq|qb-qinq-xdp)
        hosts a0 b0
        veth sw t1 sw t2
        start_qbridge scripts/provider-network.batch "$var" "$row" || return 1 ;;
    qb-qinq-veth)
        hosts a0 b0
        local l
        for l in "c1u p1c" "t1 t2" "p2c c2u"; do set -- $l; veth sw "$1" sw "$2"; done
        start_qbridge scripts/provider-network-veth.batch "$var" "$row" || return 1 ;;
    esac
    case "$kind" in *-txoff|*-xdp)
        ip netns exec "$p-a" ethtool -K eth0 tx off >/dev/null
        ip netns exec "$p-b" ethtool -K eth0 tx off >/dev/null ;;
    esac
}
teardown() {
    stop_procs
    del_netns
    rm -f "$tmp/qb.sock"
    switch_pid=""; switch_kind=""; qb_sock=""
}

# ---- measurements -----------------------------------------------------------------------------
results=$tmp/results.tsv; : >"$results"
notes=$tmp/notes.txt; : >"$notes"
put() {  # put KEY VALUE: one measurement of the current row and round ("-": none)
    local v=${2:--}; [ "$v" = null ] && v=-
    printf '%s\t%s\t%s\t%s\t%s\n' "$ri" "$row_cur" "$round" "$1" "$v" >>"$results"
}
note() { printf '  %-16s %s\n' "$row_cur" "$*" >>"$notes"; }
clk=$(getconf CLK_TCK)
now_ns() { date +%s%N; }
ticks() { [ -n "$switch_pid" ] && awk '{ print $14 + $15 }' "/proc/$switch_pid/stat" 2>/dev/null || echo 0; }
softirq() { awk '/^cpu / { print $8 }' /proc/stat; }
ctr() { ip netns exec "$p-$1" cat "/sys/class/net/eth0/statistics/$2"; }
busy() {  # compilers running, and network namespaces of someone else's benchmark or test
    local c n
    c=$(pgrep -c -x 'rustc|cargo|cc1|ld|cc' 2>/dev/null || true)
    n=$(ip netns list | awk '{ print $1 }' | grep -vc "^$p-" || true)
    echo $(( ${c:-0} + ${n:-0} ))
}

iperf() {  # iperf ARGS...: one run (JSON) against a fresh one-shot server in hostB
    local spid
    ip netns exec "$p-b" iperf3 -s -1 >/dev/null 2>&1 &
    spid=$!; pids+=($spid)
    for _ in $(seq 40); do
        ip netns exec "$p-b" ss -Hltn 'sport = :5201' 2>/dev/null | grep -q . && break; sleep 0.05
    done
    ip netns exec "$p-a" timeout $((secs + 30)) iperf3 -c 10.77.0.2 -t "$secs" -J "$@" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    reap "$spid"
}
tcp() {  # tcp N ARGS...: receiver's Gbit/s (key tN) and the sender's retransmits (key rN)
    local v
    v=$(iperf "${@:2}" | jq -r '.end | "\(.sum_received.bits_per_second / 1e9 * 100 | round / 100) \(.sum_sent.retransmits)"' 2>/dev/null || true)
    set -- "$1" $v
    put "t$1" "${2:--}"; put "r$1" "${3:--}"
}
udp() {  # udp LEN: delivered payload Mbit/s and delivered frames/s (thousands)
    local j m k
    j=$(iperf -u -b 0 -l "$1")
    m=$(jq -r '.end.sum_received.bits_per_second // empty | . / 1e6 | round' <<<"$j" 2>/dev/null || true)
    k=$(jq -r '.end.sum_received | select(.seconds > 0) | (.packets - .lost_packets) / .seconds / 1000 | round' <<<"$j" 2>/dev/null || true)
    put "u$1m" "${m:--}"; put "u$1k" "${k:--}"
}
rtt() {
    local out
    out=$(ip netns exec "$p-a" ping -n -c 200 -i 0.01 -W 1 10.77.0.2 2>/dev/null |
        sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' | sort -n | awk '
        { a[NR] = $1 }
        function rank(q,  i) { i = int(q * NR); if (i < q * NR) i++; if (i < 1) i = 1; return a[i] }
        END { if (NR == 0) print "- - 0"; else printf "%.0f %.0f %d\n", rank(0.50) * 1000, rank(0.99) * 1000, NR }')
    set -- $out
    put p50 "$1"; put p99 "$2"
    [ "$3" = 200 ] || note "ping: $3 of 200 replies"
}
tcp4_cpu() {  # TCP with 4 streams, with the switch's and softirq's CPU cores meanwhile
    local c0 s0 t0 c1 s1 t1 prof="" perf_pid=""
    if [ -n "${PERF_DIR:-}" ]; then  # perf record -a -g over the run's middle
        mkdir -p "$PERF_DIR"
        prof="$PERF_DIR/${row_cur//\//-}-r$round"
        (sleep 1; perf record -a -g -o "$prof.data" -- sleep $((secs > 3 ? secs - 2 : 1)) \
            >/dev/null 2>&1) &
        perf_pid=$!
    fi
    c0=$(ticks); s0=$(softirq); t0=$(now_ns)
    tcp 4 -P 4
    c1=$(ticks); s1=$(softirq); t1=$(now_ns)
    if [ -n "$prof" ]; then
        wait "$perf_pid" || true
        perf report -i "$prof.data" --no-children --sort symbol --percent-limit 0.8 --stdio \
            2>/dev/null | grep -E '^ +[0-9]' >"$prof.txt" || true
    fi
    if [ -n "$switch_pid" ]; then
        put cpu "$(awk -v d=$((c1 - c0)) -v t=$((t1 - t0)) -v h="$clk" 'BEGIN { printf "%.2f", d / h / (t / 1e9) }')"
    else
        put cpu -
    fi
    put si "$(awk -v d=$((s1 - s0)) -v t=$((t1 - t0)) -v h="$clk" 'BEGIN { printf "%.2f", d / h / (t / 1e9) }')"
}
blast_once() {  # blast_once RATE: one SECS-s run of the 64B sender (RATE frames/s, 0 = as
    # fast as it goes; trafgen ignores it); sets b_off b_del (kframes/s) and b_loss (%), or "-"
    local tg o0 d0 t0 o1 d1 t1
    if [ "$sender64" = xdp ]; then
        ip netns exec "$p-a" timeout -k 2 -s INT $((secs + 3)) "$qbblast" --dev eth0 \
            --dst-mac "$mac" --rate "$1" --seconds $((secs + 2)) >"$tmp/trafgen.log" 2>&1 &
    else
        # -P N: N sender processes, one per CPU (TRAFGEN_CPUS, default 1); --no-sock-mem, -Q:
        # leave the machine's sysctls and IRQs alone
        ip netns exec "$p-a" timeout -k 2 -s INT $((secs + 2)) trafgen -o eth0 -i "$tmp/udp64.cfg" \
            -P "${TRAFGEN_CPUS:-1}" --no-sock-mem -Q -C >"$tmp/trafgen.log" 2>&1 &
    fi
    tg=$!; pids+=($tg)
    sleep 0.7   # program loaded / ring set up, and running
    o0=$(( $(ctr a tx_packets) + $(ctr a tx_dropped) )); d0=$(ctr b rx_packets); t0=$(now_ns)
    sleep "$secs"
    o1=$(( $(ctr a tx_packets) + $(ctr a tx_dropped) )); d1=$(ctr b rx_packets); t1=$(now_ns)
    reap "$tg"
    if [ $((o1 - o0)) -le 0 ]; then
        note "the 64B sender ($sender64) sent nothing: $(tail -2 "$tmp/trafgen.log" | tr '\n' ' ')"
        b_off=-; b_del=-; b_loss=-; return
    fi
    b_off=$(awk -v n=$((o1 - o0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", n / (t / 1e9) / 1000 }')
    b_del=$(awk -v n=$((d1 - d0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", n / (t / 1e9) / 1000 }')
    b_loss=$(awk -v o=$((o1 - o0)) -v d=$((d1 - d0)) 'BEGIN { l = 100 * (1 - d / o); if (l < 0) l = 0; printf "%.1f", l }')
}
blast64() {  # 60-byte UDP frames to hostB's MAC (SENDER64); interface counters
    if [ "$sender64" = trafgen ] && [ $have_trafgen = 0 ]; then put off -; put del -; put loss -; return; fi
    local mac
    mac=$(ip -n "$p-b" -j link show eth0 | jq -r '.[0].address')
    echo "{ eth(da=$mac), ipv4(ttl=64, saddr=10.77.0.1, daddr=10.77.0.2), udp(sp=9, dp=9), fill(0x42, 18) }" >"$tmp/udp64.cfg"
    # hostB drops the test frames at its device's ingress hook (after its rx counter): without
    # it hostB's stack answers every frame with an ICMP port unreachable, and that work runs
    # wherever the frame was handed to hostB's veth - in the kernel bridge's case the sender's
    # own softirq (trafgen slows down, nothing is lost), in qbridge's the worker's thread (the
    # worker slows down, frames are lost): the switches would be measured by hostB's stack.
    local sink=0
    if [ "${SINK64:-1}" != 0 ] && command -v nft >/dev/null &&
        ip netns exec "$p-b" nft -f - 2>/dev/null <<'NFT'
table netdev qbbl_sink {
    chain in {
        type filter hook ingress device "eth0" priority 0; policy accept;
        udp dport 9 counter drop
    }
}
NFT
    then
        sink=1
    elif [ "${SINK64:-1}" != 0 ]; then
        note "64B: no nftables ingress drop on hostB (hostB's stack answers every frame)"
    fi
    if [ "$sender64" = xdp ]; then
        # XDP-sent frames reach a veth's other end only through its NAPI (GRO on turns it on)
        ip netns exec "$p-${a_end[0]}" ethtool -K "${a_end[1]}" gro on >/dev/null 2>&1 ||
            note "64B: ethtool -K ${a_end[1]} gro on failed: XDP-sent frames may not reach the switch"
    fi
    blast_once 0
    local off=$b_off del=$b_del loss=$b_loss
    # The XDP sender outruns any path here: where the first, unpaced run lost 1 % or more,
    # search the highest paced rate that loses less (RFC 2544 throughput): BLAST_TRIALS runs
    # (default 5) bisecting 0.8-1.2 times what the unpaced run delivered, starting at it, and
    # report the run that delivered most of those that held; the unpaced run's figures go to
    # the notes.
    if [ "$sender64" = xdp ] && [ "$loss" != - ] && awk -v l="$loss" 'BEGIN { exit !(l >= 1) }'; then
        note "64B unpaced: offered $off, delivered $del kframes/s, loss $loss%"
        local lo=$((del * 4 / 5)) hi=$((del * 6 / 5)) r=$del n best="" best_r="" best_loss=""
        for n in $(seq "${BLAST_TRIALS:-5}"); do
            blast_once $((r * 1000))
            [ "$b_loss" = - ] && break
            if awk -v l="$b_loss" 'BEGIN { exit !(l < 1) }'; then
                lo=$r
                # the run that delivered most among those that held (a sender that shares its
                # CPU with the path's softirq may offer less than it was asked)
                if [ -z "$best" ] || [ "$b_del" -gt "${best#* }" ]; then
                    best="$b_off $b_del"; best_loss=$b_loss; best_r=$r
                fi
            else
                hi=$r
            fi
            r=$(( (lo + hi) / 2 ))
            [ $((hi - lo)) -le $((hi / 50)) ] && break   # within 2 %
        done
        if [ -n "$best" ]; then
            read -r off del <<<"$best"; loss=$best_loss
            note "64B paced: asked $best_r kframes/s, offered $off, delivered $del, lost $loss % (the best of the paced runs that lost < 1 %)"
        else
            note "64B paced: no rate tried lost < 1 % (the unpaced run is reported)"
        fi
    fi
    if [ $sink = 1 ]; then ip netns exec "$p-b" nft delete table netdev qbbl_sink 2>/dev/null || true; fi
    put off "$off"; put del "$del"; put loss "$loss"
}
switch_notes() {  # what the switch itself says about drops and errors
    case "$switch_kind" in
    qbridge)
        local drops
        drops=$("$qb" --socket "$qb_sock" -s link show 2>/dev/null |
            awk '/^[^ ]/ { port = $1 } /drops:/ && !/none/ { sub(/^ +/, ""); printf "%s %s; ", port, $0 }')
        note "qbridge drop counters: ${drops:-none}"
        ;;
    ovs)
        local i s bad=""
        for i in $(vsctl --bare --columns=name list interface 2>/dev/null); do
            s=$(vsctl get interface "$i" statistics 2>/dev/null | tr -d '{} ' | tr ',' '\n' |
                awk -F= '($1 ~ /drop|error/) && $2 > 0 { printf "%s=%s ", $1, $2 }')
            if [ -n "$s" ]; then bad+="$i: $s; "; fi
        done
        note "ovs interface drops/errors: ${bad:-none}"
        ;;
    esac
}
tcp_notes() {  # retransmits are a symptom of drops inside the switch; a loss nobody counted
    local r
    r=$(awk -F'\t' -v r="$row_cur" -v n="$round" '$2 == r && $3 == n && $4 ~ /^r[0-9]+$/ && $5 != "-" && $5 > 0 {
        k = substr($4, 2); printf "%s%s stream%s: %s", sep, k, (k == 1 ? "" : "s"), $5; sep = ", " }' "$results")
    if [ -n "$r" ]; then note "TCP retransmits (sender): $r"; fi
    r=$(awk -F'\t' -v r="$row_cur" -v n="$round" '$2 == r && $3 == n && $4 == "loss" && $5 != "-" && $5 >= 1 { print $5 }' "$results")
    if [ -n "$r" ] && [ -n "$switch_kind" ]; then note "64B: $r% of the offered frames did not reach hostB"; fi
}
log_notes() {  # after the switch stopped: its log's warnings and errors
    case "$switch_kind" in
    qbridge)
        local n; n=$(grep -ciE 'warn|error|panic' "$qb_log" || true)
        if [ "$n" -gt 0 ]; then
            note "qbridge log: $n warning/error lines, first: $(grep -iE 'warn|error|panic' "$qb_log" | head -1 | cut -c1-150)"
        fi
        ;;
    ovs)
        local f=$ovsd/ovs-vswitchd.log
        [ -f "$f" ] || return 0
        # benign in a namespace: the kernel datapath module is absent, netdev_max_backlog unreadable
        grep -E '\|(WARN|ERR|EMER)\|' "$f" | cut -d'|' -f3- |
            sed -E 's/[0-9a-f:]{17}/MAC/g; s/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -3 |
            while read -r c m; do note "ovs-vswitchd log: ${c}x $(cut -c1-140 <<<"$m")"; done
        ;;
    esac
}

measure() {
    local b0 b1 b2
    b0=$(busy)
    if ! ip netns exec "$p-a" ping -n -q -c 3 -i 0.1 -W 1 10.77.0.2 >/dev/null; then
        note "hostA cannot reach hostB: not measured"
        for k in p50 p99 t1 t4 cpu si t16 u1472m u1472k u18m u18k off del loss; do put $k -; done
        put busy 0
        return
    fi
    rtt
    tcp 1
    tcp4_cpu
    tcp 16 -P 16
    b1=$(busy)
    udp 1472
    udp 18
    blast64
    switch_notes
    tcp_notes
    b2=$(busy)
    put busy $(( b0 + b1 + b2 ))
}

# ---- the run ----------------------------------------------------------------------------------
echo "== $me: ${#rows[@]} setups x $rounds round(s), $secs s per test; rows: ${rows[*]}" >&2
for i in "${!vnames[@]}"; do
    if [ -n "${vnames[$i]}" ]; then echo "   qbridge variant ${vnames[$i]}: ${vargs[$i]}" >&2; fi
done
for round in $(seq "$rounds"); do
    for ri in "${!rows[@]}"; do
        row_cur=${rows[$ri]}; rvar_cur=${rvar[$ri]}
        echo "-- round $round: ${row_cur}" >&2
        if build "${rkind[$ri]}" "$rvar_cur" "$row_cur"; then
            sleep 0.5
            measure
        else
            note "setup failed: not measured"
            for k in p50 p99 t1 t4 cpu si t16 u1472m u1472k u18m u18k off del loss; do put $k -; done
        fi
        teardown
        log_notes
        awk -F'\t' -v r="$row_cur" -v n="$round" '$2 == r && $3 == n && $4 != "busy" { printf "%s=%s ", $4, $5 }
            END { print "" }' "$results" | sed 's/^/   /' >&2
    done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -----------------------------------------------------------------------------------
med() {  # med ROW KEY: the median over rounds, "-" if no round has a number
    awk -F'\t' -v r="$1" -v k="$2" '$2 == r && $4 == k && $5 != "-" { a[n++] = $5 + 0 }
        END { if (n == 0) { print "-"; exit }
              for (i = 1; i < n; i++) { v = a[i]; for (j = i - 1; j >= 0 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
              print (n % 2) ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }' "$results"
}
fmt() {  # fmt KEY VALUE
    [ "$2" = - ] && { echo -; return; }
    case "$1" in
        t1|t4|t16|cpu|si) printf '%.2f' "$2" ;;
        loss) printf '%.1f' "$2" ;;
        *) printf '%.0f' "$2" ;;
    esac
}
ratio() {  # ratio VALUE BASE
    awk -v v="$1" -v b="$2" 'BEGIN { if (v == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", v / b }'
}
keys=(t1 t4 t16 u1472m u1472k u18m u18k off del loss p50 p99 cpu si)
rkeys=" t1 t4 t16 u1472m u1472k u18m u18k del p50 p99 "   # columns with a ratio row
has_kb=0; case " ${rows[*]} " in *" kbridge "*) has_kb=1 ;; esac
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
git diff --quiet HEAD -- crates 2>/dev/null || commit+=" (+ uncommitted changes in crates/)"
line() { printf '%-16s %6s %6s %6s  %6s %6s  %6s %6s  %7s %7s %5s  %5s %5s  %6s %7s\n' "$@"; }
{
    echo "qbridge bench-live, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, kernel $(uname -r), commit $commit"
    echo "SECS=$secs ROUNDS=$rounds; load average $load_start at start, $load_end at end; $(( $(date +%s) - t_start )) s"
    if [ $want_ovs = 1 ]; then echo "OVS: $(ovs-vswitchd --version 2>/dev/null | head -1)"; fi
    for i in "${!vnames[@]}"; do
        if [ -n "${vnames[$i]}${vargs[$i]}${QB_DAEMON_ARGS:-}" ]; then echo "qbridge variant ${vnames[$i]:-(default)}: daemon ${QB_DAEMON_ARGS:-}${QB_DAEMON_ARGS:+ }${vargs[$i]}"; fi
    done
    echo
    printf '%-16s%21s%15s%15s%23s%13s%16s\n' "" "TCP Gbit/s" "UDP 1472 B" "UDP 18 B" "64B kframes/s" "RTT us" "TCP-4 cores"
    line setup 1 4 16 Mbit/s kfr/s Mbit/s kfr/s offered deliv loss% p50 p99 switch softirq
    for ri in "${!rows[@]}"; do
        r=${rows[$ri]}; vals=(); rat=()
        for k in "${keys[@]}"; do
            v=$(fmt "$k" "$(med "$r" "$k")"); vals+=("$v")
            if [[ $rkeys == *" $k "* ]] && [ $has_kb = 1 ]; then
                rat+=("$(ratio "$v" "$(fmt "$k" "$(med kbridge "$k")")")")
            else
                rat+=("")
            fi
        done
        mark=""
        if awk -F'\t' -v r="$r" '$2 == r && $4 == "busy" && $5 > 0 { f = 1 } END { exit !f }' "$results"; then mark="*"; fi
        line "$r$mark" "${vals[@]}"
        if [ $has_kb = 1 ] && [ "$r" != kbridge ]; then line "  x kbridge" "${rat[@]}"; fi
    done
    if [ $has_kb = 1 ]; then echo "x kbridge = ratio to the kernel bridge (RTT: lower is better)."; fi
    echo "TCP: receiver's rate; UDP: delivered payload Mbit/s and frames/s (iperf3 -b 0); 64B: $sender64"
    echo "offered / delivered (hostB rx counter); cores during TCP-4: the switch process (utime+stime),"
    echo "softirq on the whole machine."
    if grep -qP '\tbusy\t[1-9]' "$results"; then
        echo "* measured while a compiler, cargo or another benchmark's network namespaces were on this machine."
    fi
    if [ -s "$notes" ]; then echo; echo "Notes (drop counters, log warnings, failures):"; awk '!seen[$0]++' "$notes"; fi
} | tee "$tmp/report.txt"

if [ -n "${BENCH_JSON:-}" ]; then
    jq -Rn --arg date "$(date -u +%FT%TZ)" --arg kernel "$(uname -r)" --arg commit "$commit" \
        --argjson cpus "$(nproc)" --argjson secs "$secs" --argjson rounds "$rounds" \
        --arg load_start "$load_start" --arg load_end "$load_end" --rawfile notes "$notes" '
        def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
                    else (.[length / 2 - 1] + .[length / 2]) / 2 end;
        [inputs | split("\t") | {i: (.[0] | tonumber), setup: .[1], round: (.[2] | tonumber),
            key: .[3], value: (.[4] | tonumber? // null)}]
        | group_by(.i)
        | map({setup: .[0].setup,
               median: (group_by(.key) | map({(.[0].key): ([.[].value | select(. != null)] | median)}) | add),
               rounds: (group_by(.round) | map(map({(.key): .value}) | add))})
        | {date: $date, kernel: $kernel, cpus: $cpus, commit: $commit, secs: $secs, rounds: $rounds,
           load_start: $load_start, load_end: $load_end,
           units: {t1: "Gbit/s", t4: "Gbit/s", t16: "Gbit/s", u1472m: "Mbit/s", u1472k: "kframes/s",
                   u18m: "Mbit/s", u18k: "kframes/s", off: "kframes/s", del: "kframes/s", loss: "%",
                   p50: "us", p99: "us", cpu: "cores", si: "cores", r1: "retransmits", r4: "retransmits",
                   r16: "retransmits", busy: "compilers or foreign netns seen (3 samples)"},
           notes: ($notes | split("\n") | map(select(length > 0))), setups: .}' <"$results" >"$BENCH_JSON"
    echo "JSON: $BENCH_JSON" >&2
fi
