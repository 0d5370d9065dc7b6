#!/usr/bin/env bash
# Live throughput, reported not asserted: the same two hosts (network namespaces, kernel TCP/IP,
# MTU 1500, offloads at their defaults) joined four ways, measured the same way:
#   veth      hostA eth0 = hostB eth0, one veth pair (the ceiling)
#   kbridge   the Linux bridge, no VLAN filtering (ip link add type bridge)
#   qb-plain  qbridge: one 802.1Q bridge, two untagged access ports (AF_PACKET on veths)
#   qb-qinq   qbridge: the provider network hostA-CE1-PE1=trunk=PE2-CE2-hostB
#             (scripts/provider-network.batch; 802.1ad S-VLAN 100 over C-VLAN 10)
# For each: TCP with iperf3, 1 and 4 streams (SECONDS s each); 64-byte frames per second
# delivered to hostB (iperf3 UDP, 18-byte payload = 60-byte frame + FCS, unlimited rate; the
# receiver's count: frames that crossed, not frames offered); ping RTT (average of 100 at
# 10 ms). Prints a table with ratios to the kernel bridge.
#
# Usage (root): scripts/throughput.sh [SECONDS]   (default 5; SETUPS="veth kbridge" runs a subset; QB_DAEMON_ARGS="--busy-poll-us 200" passes daemon options). Installs iperf3 when missing,
# builds qbridge --release. Everything it creates (namespaces qbtp-PID-*, the daemons, iperf3
# servers) is removed on exit, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
[ "$(id -u)" = 0 ] || { echo "throughput.sh: needs root (network namespaces)" >&2; exit 1; }
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ping >/dev/null || need+=(iputils-ping)
if [ ${#need[@]} -gt 0 ]; then
    echo "throughput.sh: installing ${need[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
declare -A R
setups=${SETUPS:-veth kbridge qb-plain qb-qinq}
qb=$PWD/target/release/qbridge
case " $setups " in *" qb-"*) cargo build --quiet --release -p qbridge ;; esac
want() { case " $setups " in *" $1 "*) return 0 ;; *) R[$1,t1]=-; R[$1,t4]=-; R[$1,pps]=-; R[$1,rtt]=-; return 1 ;; esac; }

p=qbtp-$$
tmp=$(mktemp -d /tmp/qbtp.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for f in "$tmp"/*.pid; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true; done
    sleep 0.3
    for ns in $(ip netns list | awk '{print $1}' | grep "^$p-" || true); do ip netns del "$ns"; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkns() {
    ip netns add "$p-$1"
    ip -n "$p-$1" link set lo up
    ip netns exec "$p-$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}
# veth NS_A IF_A NS_B IF_B: a pair, both up (no MTU set).
veth() {
    ip -n "$p-$1" link add "$2" type veth peer name "$4" netns "$p-$3"
    ip -n "$p-$1" link set "$2" up
    ip -n "$p-$3" link set "$4" up
}
hosts() {  # the two hosts, with the switch-side ends $1 and $2 in namespace sw
    mkns a; mkns b
    veth a eth0 sw "$1"; veth b eth0 sw "$2"
    ip -n "$p-a" addr add 10.77.0.1/24 dev eth0
    ip -n "$p-b" addr add 10.77.0.2/24 dev eth0
}
start_daemon() {  # start_daemon BATCHFILE
    local sock=$tmp/qb.sock
    # shellcheck disable=SC2086  # QB_DAEMON_ARGS is a word list, e.g. "--busy-poll-us 200"
    QBRIDGE_LOG=warn ip netns exec "$p-sw" "$qb" daemon -batch "$1" --socket "$sock" ${QB_DAEMON_ARGS:-} \
        2>"$tmp/daemon.log" &
    pids+=($!)
    for _ in $(seq 200); do [ -S "$sock" ] && return 0; sleep 0.05; done
    echo "qbridge daemon did not start:" >&2; cat "$tmp/daemon.log" >&2; exit 1
}
teardown() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    pids=()
    for ns in $(ip netns list | awk '{print $1}' | grep "^$p-" || true); do ip netns del "$ns"; done
    rm -f "$tmp/qb.sock"
}

iperf() {  # iperf ARGS...: one run against a fresh one-shot server in hostB; prints its output
    ip netns exec "$p-b" iperf3 -s -1 -D --pidfile "$tmp/iperf.pid"
    sleep 0.3
    ip netns exec "$p-a" iperf3 -c 10.77.0.2 -t "$secs" -f m "$@" 2>&1 || true
    rm -f "$tmp/iperf.pid"
}
tcp_gbps() {  # receiver's rate, Gbit/s
    iperf "$@" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($(i) == "Mbits/sec") r = $(i-1) }
        END { if (r == "") print "-"; else printf "%.2f", r / 1000 }'
}
udp_kfps() {  # 64-byte frames delivered per second, thousands
    iperf -u -l 18 -b 0 "$@" | awk -v s="$secs" '/receiver/ { for (i = 1; i <= NF; i++)
        if ($(i) ~ /^[0-9]+\/[0-9]+$/) { split($(i), a, "/"); r = (a[2] - a[1]) / s } }
        END { if (r == "") print "-"; else printf "%.0f", r / 1000 }'
}
rtt_us() {
    ip netns exec "$p-a" ping -n -q -c 100 -i 0.01 10.77.0.2 |
        awk -F/ '/^rtt/ { printf "%.0f", $5 * 1000 }'
}

measure() {  # measure NAME
    ip netns exec "$p-a" ping -n -q -c 3 -i 0.1 10.77.0.2 >/dev/null || {
        echo "$1: hostA cannot reach hostB" >&2; R[$1,t1]=-; R[$1,t4]=-; R[$1,pps]=-; R[$1,rtt]=-; return; }
    R[$1,t1]=$(tcp_gbps)
    R[$1,t4]=$(tcp_gbps -P 4)
    R[$1,pps]=$(udp_kfps)
    R[$1,rtt]=$(rtt_us)
    if [ -S "$tmp/qb.sock" ]; then  # qbridge's own drop counters, per port
        "$qb" --socket "$tmp/qb.sock" -s link show |
            awk '/^[^ ]/ { port = $1 } /drops:/ && !/none/ { print "    " port " " $0 }' >&2
    fi
    printf '  %-9s TCP1 %s Gbit/s  TCP4 %s Gbit/s  64B %s kframes/s  RTT %s us\n' \
        "$1" "${R[$1,t1]}" "${R[$1,t4]}" "${R[$1,pps]}" "${R[$1,rtt]}" >&2
}

echo "== measuring ($secs s per iperf3 run)" >&2
# 1. direct veth
if want veth; then
mkns a; mkns b; veth a eth0 b eth0
ip -n "$p-a" addr add 10.77.0.1/24 dev eth0; ip -n "$p-b" addr add 10.77.0.2/24 dev eth0
measure veth; teardown
fi

# 2. kernel bridge
if want kbridge; then
mkns sw; hosts s1 s2
ip -n "$p-sw" link add br0 type bridge
ip -n "$p-sw" link set s1 master br0; ip -n "$p-sw" link set s2 master br0
ip -n "$p-sw" link set br0 up
measure kbridge; teardown
fi

# 3. qbridge, one 802.1Q bridge
if want qb-plain; then
mkns sw; hosts s1 s2
cat >"$tmp/plain.batch" <<EOF
link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link set dev p1 master br0
link set dev p2 master br0
EOF
start_daemon "$tmp/plain.batch"
measure qb-plain; teardown
fi

# 4. qbridge, the provider network
if want qb-qinq; then
mkns sw; hosts a0 b0
for l in "c1u p1c" "t1 t2" "p2c c2u"; do set -- $l; veth sw "$1" sw "$2"; done
start_daemon scripts/provider-network.batch
measure qb-qinq; teardown
fi

ratio() {  # ratio VALUE BASE
    awk -v v="$1" -v b="$2" 'BEGIN { if (v == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", v / b }'
}
echo
echo "qbridge live throughput, $(date -u +%Y-%m-%d), $(nproc) CPUs, kernel $(uname -r)"
printf '%-10s %10s %6s %10s %6s %11s %6s %8s %6s\n' setup "TCP1 Gb/s" x "TCP4 Gb/s" x "64B kfr/s" x "RTT us" x
for s in veth kbridge qb-plain qb-qinq; do
    printf '%-10s %10s %6s %10s %6s %11s %6s %8s %6s\n' "$s" \
        "${R[$s,t1]}" "$(ratio "${R[$s,t1]}" "${R[kbridge,t1]}")" \
        "${R[$s,t4]}" "$(ratio "${R[$s,t4]}" "${R[kbridge,t4]}")" \
        "${R[$s,pps]}" "$(ratio "${R[$s,pps]}" "${R[kbridge,pps]}")" \
        "${R[$s,rtt]}" "$(ratio "${R[$s,rtt]}" "${R[kbridge,rtt]}")"
done
echo "x = ratio to the kernel bridge (for RTT lower is better)."
