#!/usr/bin/env bash
# The eBPF fast path's miss path, measured live (issue 21 §4): how many new flows per second
# the workers set up, and what the first frame of a flow costs.
#
#   first frame   hostA pings hostB through one 802.1Q bridge (two access ports of VLAN 10).
#                 "hit": ping -c 200 -i 0.01 with the flows installed, p50 / p99 µs;
#                 "first": 50 single pings, each right after a configuration change (vlan add
#                 and del of an unused VID on pa: the generation moves, every flow is stale), so
#                 the request and the reply both go up, are forwarded by the pipeline and
#                 install their flow: p50 / p99 µs. The same with --fast-path off.
#   setups/s      FLOWS static FDB entries on pb (FLOWS distinct MACs in VLAN 10); hostA sends
#                 one frame to each from a raw socket as fast as Python can; the rate is
#                 FLOWS / the time until `show fast-path` counts them installed.
#   scale         `cargo run --release -p qbridge-fastpath --example scale`: ns per frame of the
#                 program against 1 → 4094 VLANs and 1k → 1M MACs.
#
# Usage (root): scripts/bench-fastpath.sh     FLOWS=20000 (default)   QB_BUILD=0: no build
# Namespaces qbfb-PID-*; everything is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
flows=${FLOWS:-20000}
qb=target/release/qbridge
if [ "${QB_BUILD:-1}" != 0 ]; then
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge-fastpath --example scale
fi
p=qbfb-$$
tmp=$(mktemp -d)
cleanup() {
    [ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    for n in a b sw; do ip netns del "$p-$n" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
for n in a b sw; do ip netns add "$p-$n"; ip -n "$p-$n" link set lo up; done
ip link add eth0 netns "$p-a" type veth peer name va netns "$p-sw"
ip link add eth0 netns "$p-b" type veth peer name vb netns "$p-sw"
ip -n "$p-a" addr add 10.77.0.1/24 dev eth0
ip -n "$p-b" addr add 10.77.0.2/24 dev eth0
for n in a b; do ip netns exec "$p-$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1; ip -n "$p-$n" link set eth0 up; done
ip -n "$p-sw" link set va up; ip -n "$p-sw" link set vb up
cat > "$tmp/b.batch" <<B
link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0
link add pa type afpacket dev va
link add pb type afpacket dev vb
link set dev pa master br0
link set dev pb master br0
vlan add vid 10 dev pa pvid untagged
vlan add vid 10 dev pb pvid untagged
link set dev pa up
link set dev pb up
B
q() { "$qb" --socket "$tmp/s.sock" "$@"; }
start() {
    ip netns exec "$p-sw" "$qb" daemon -batch "$tmp/b.batch" --socket "$tmp/s.sock" --workers 2 "$@" 2>"$tmp/d.log" &
    dpid=$!
    for _ in $(seq 50); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
}
stop() { kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=; }
pct() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "-"; exit} printf "%d/%d", a[int((NR+1)/2)], a[int(NR*0.99+0.999)]}'; }
rtts() { grep -o 'time=[0-9.]*' | cut -d= -f2 | awk '{printf "%d\n", $1*1000}'; }
printf '%-10s %-16s %-16s\n' "fast path" "hit p50/p99 µs" "first p50/p99 µs"
for mode in on off; do
    start --fast-path $mode
    ip netns exec "$p-a" ping -c 3 -i 0.2 -q 10.77.0.2 >/dev/null
    hit=$(ip netns exec "$p-a" ping -c 200 -i 0.01 10.77.0.2 | rtts | pct)
    first=$(for i in $(seq 50); do
        q vlan add vid 99 dev pa; q vlan del vid 99 dev pa
        ip netns exec "$p-a" ping -c 1 -W 1 10.77.0.2 | rtts
    done | pct)
    printf '%-10s %-16s %-16s\n' "$mode" "$hit" "$first"
    stop
done
# Flow setups per second.
start --fast-path on
python3 - "$flows" > "$tmp/fdb.batch" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f"fdb add 02:aa:{i>>24&255:02x}:{i>>16&255:02x}:{i>>8&255:02x}:{i&255:02x} dev pb master static vlan 10")
PY
q -batch "$tmp/fdb.batch" >/dev/null
ip netns exec "$p-a" ping -c 2 -i 0.2 -q 10.77.0.2 >/dev/null
before=$(q -j show fast-path | python3 -c 'import json,sys; print(json.load(sys.stdin)["installed"])')
t0=$(date +%s.%N)
ip netns exec "$p-a" python3 - "$flows" <<'PY'
import socket, struct, sys
n = int(sys.argv[1])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
src = open("/sys/class/net/eth0/address").read().strip()
srcb = bytes(int(x, 16) for x in src.split(":"))
for i in range(n):
    dst = bytes([0x02, 0xaa]) + i.to_bytes(4, "big")
    s.send(dst + srcb + b"\x08\x00" + bytes(46))
PY
t1=$(date +%s.%N)
last=$before; tlast=$t1
for _ in $(seq 300); do
    now=$(q -j show fast-path | python3 -c 'import json,sys; print(json.load(sys.stdin)["installed"])')
    if [ "$now" != "$last" ]; then last=$now; tlast=$(date +%s.%N); fi
    [ $((now - before)) -ge "$flows" ] && break
    sleep 0.05
done
made=$((last - before))
python3 -c "
made, n, t0, t1, tl = $made, $flows, $t0, $t1, $tlast
print(f'setups: {made} of {n} flows installed in {tl - t0:.2f} s: {made / max(tl - t0, 1e-9):.0f} flows/s (the sender took {t1 - t0:.2f} s)')"
q show fast-path
stop
echo "program cost against table sizes (BPF_PROG_TEST_RUN, 1M runs per row):"
target/release/examples/scale
