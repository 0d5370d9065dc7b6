#!/usr/bin/env bash
# Where the time of 64-byte frames goes (issue 21 §4's profile): hostA's trafgen blasts 60-byte
# UDP frames at hostB's MAC through one bridge for 8 s, hostB drops them at its ingress hook
# (nftables netdev, as bench-live.sh's 64B step), and `perf record -a -g` samples 4 s of it;
# prints the symbols above 1.2 % of the samples (self time).
#
# Usage (root):  scripts/profile-64b.sh qb|kbridge
#   qb       qbridge (target/release/qbridge) with --fast-path on, two afpacket ports
#   kbridge  the kernel bridge
# Needs perf, trafgen (netsniff-ng), nft, jq; namespaces qbp64-PID-*, removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-qb}
case "$mode" in qb|kbridge) ;; *) echo "usage: $0 qb|kbridge" >&2; exit 2 ;; esac
for t in perf trafgen nft jq; do
    command -v "$t" >/dev/null || { echo "$0: needs $t" >&2; exit 1; }
done
p=qbp64-$$
tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for n in a b s; do ip netns del "$p-$n" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
for n in a b s; do ip netns add "$p-$n"; done
ip link add a0 netns "$p-s" type veth peer name eth0 netns "$p-a"
ip link add b0 netns "$p-s" type veth peer name eth0 netns "$p-b"
for n in a b; do
    ip -n "$p-$n" link set lo up
    ip -n "$p-$n" link set eth0 up
done
ip -n "$p-s" link set a0 up
ip -n "$p-s" link set b0 up
ip -n "$p-a" addr add 10.77.0.1/24 dev eth0
ip -n "$p-b" addr add 10.77.0.2/24 dev eth0
if [ "$mode" = qb ]; then
    printf '%s\n' "link add br0 type bridge" "link add pa type afpacket dev a0" \
        "link add pb type afpacket dev b0" "link set dev pa master br0" \
        "link set dev pb master br0" >"$tmp/batch"
    ip netns exec "$p-s" target/release/qbridge daemon -batch "$tmp/batch" \
        --socket "$tmp/sock" --fast-path on 2>"$tmp/daemon.log" &
    pids+=($!)
else
    ip -n "$p-s" link add br0 type bridge
    ip -n "$p-s" link set br0 up
    ip -n "$p-s" link set a0 master br0
    ip -n "$p-s" link set b0 master br0
fi
sleep 2
ip netns exec "$p-a" ping -c 3 -i 0.2 10.77.0.2 >/dev/null
mac=$(ip -n "$p-b" -j link show eth0 | jq -r '.[0].address')
echo "{ eth(da=$mac), ipv4(ttl=64, saddr=10.77.0.1, daddr=10.77.0.2), udp(sp=9, dp=9), fill(0x42, 18) }" >"$tmp/udp64.cfg"
ip netns exec "$p-b" nft -f - <<'NFT'
table netdev qbp64_sink {
    chain in {
        type filter hook ingress device "eth0" priority 0; policy accept;
        udp dport 9 counter drop;
    }
}
NFT
ip netns exec "$p-a" timeout -s INT 8 trafgen -o eth0 -i "$tmp/udp64.cfg" -P 1 --no-sock-mem -Q -C \
    >/dev/null 2>&1 &
pids+=($!)
sleep 2
perf record -a -g -o "$tmp/perf.data" -- sleep 4 >/dev/null 2>&1
echo "== $mode: symbols above 1.2 % of the samples (self)"
perf report -i "$tmp/perf.data" --no-children --sort symbol --percent-limit 1.2 --stdio 2>/dev/null |
    grep -E '^ +[0-9]'
