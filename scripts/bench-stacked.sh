#!/usr/bin/env bash
# TCP through a stacked VLAN device (host A's eth0.100.10: 802.1Q C-VLAN 10 on 802.1ad S-VLAN
# 100) against the same path without tags, as root:
#
#   hostA [qbridge: TAP] = veth = pb [qbridge 802.1ad bridge] = veth = [qbridge: TAP] hostB
#
# "stacked": A's TAP is eth0.100.10 (two tags pushed on eth0), pb carries S-VLAN 100 from A's
# trunk to B's customer port, B's TAP is eth0.10 (one tag). "untagged": A's and B's TAPs are
# plain bridge ports (a VLAN-unaware bridge with eth0 in each host daemon), pb forwards VLAN 1.
# Same daemons, same hops, same TAPs; only the tags and the stacked path differ.
#
#   scripts/bench-stacked.sh [SECONDS] [WORKERS]        (defaults 5 and 2)
set -euo pipefail
secs=${1:-5}
workers=${2:-2}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root"; exit 1; }
command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
cargo build --release -q -p qbridge
bin=$PWD/target/release/qbridge
tmp=$(mktemp -d)
p=qbst$$
cleanup() {
  pkill -f "qbridge daemon -batch $tmp" 2>/dev/null || true
  sleep 0.3
  for n in pb a b; do ip netns del $p-$n 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

run() { # MODE
  local mode=$1
  for n in pb a b; do ip netns add $p-$n; ip -n $p-$n link set lo up; done
  for h in a b; do
    ip -n $p-$h link add eth0 type veth peer name ${h}0 netns $p-pb
    ip -n $p-$h link set eth0 up; ip -n $p-pb link set ${h}0 up
  done
  if [ "$mode" = stacked ]; then
    cat > "$tmp/pb.batch" <<'EOF'
link add pb type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add a0 type afpacket dev a0
link add b0 type afpacket dev b0
link set dev a0 master pb
link set dev b0 master pb
vlan add vid 100 dev a0
vlan add vid 100 dev b0 pvid untagged
EOF
    printf '%s\n' "link add eth0 type afpacket dev eth0" \
      "link add link eth0 name eth0.100 type vlan protocol 802.1ad id 100" \
      "link add link eth0.100 name eth0.100.10 type vlan id 10" > "$tmp/a.batch"
    printf '%s\n' "link add eth0 type afpacket dev eth0" \
      "link add link eth0 name eth0.10 type vlan id 10" > "$tmp/b.batch"
    ifa=eth0.100.10; ifb=eth0.10
  else
    cat > "$tmp/pb.batch" <<'EOF'
link add pb type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add a0 type afpacket dev a0
link add b0 type afpacket dev b0
link set dev a0 master pb
link set dev b0 master pb
EOF
    for h in a b; do
      printf '%s\n' "link add br type bridge" "link add eth0 type afpacket dev eth0" \
        "link add tap0 type tap" "link set dev eth0 master br" "link set dev tap0 master br" \
        > "$tmp/$h.batch"
    done
    ifa=tap0; ifb=tap0
  fi
  for n in pb a b; do
    ip netns exec $p-$n "$bin" daemon -batch "$tmp/$n.batch" --socket "$tmp/$n.sock" \
      --workers "$workers" >"$tmp/$n.log" 2>&1 &
  done
  for n in pb a b; do
    for _ in $(seq 100); do [ -S "$tmp/$n.sock" ] && break; sleep 0.05; done
  done
  ip -n $p-a addr add 10.30.0.1/24 dev $ifa
  ip -n $p-b addr add 10.30.0.2/24 dev $ifb
  ip netns exec $p-a ping -c 3 -i 0.2 -q 10.30.0.2 >/dev/null
  ip netns exec $p-b iperf3 -s -D -I "$tmp/iperf.pid" >/dev/null
  sleep 0.3
  for streams in 1 4; do
    g=$(ip netns exec $p-a iperf3 -c 10.30.0.2 -t "$secs" -P $streams -J |
      python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
    printf '%-9s TCP %d stream(s): %6s Gbit/s\n' "$mode" $streams "$g"
  done
  kill "$(cat "$tmp/iperf.pid")" 2>/dev/null || true
  pkill -f "qbridge daemon -batch $tmp" || true
  sleep 0.5
  for n in pb a b; do ip netns del $p-$n; rm -f "$tmp/$n.sock"; done
}

echo "qbridge $(git rev-parse --short HEAD), $workers workers per daemon, $(nproc) CPUs, ${secs} s per run"
for round in 1 2; do
  run untagged
  run stacked
done
