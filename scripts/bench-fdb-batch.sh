#!/usr/bin/env bash
# Decision 89, as root: how long a daemon with the fast path on takes to answer EVPN route
# batches as qbridge-evpn sends them (per MAC its remote VTEP and the bridge's entry on vx0;
# every round moves every MAC to another of four remotes already in the flood lists), and the
# program's `stale` misses after them (0 when no batch bumped the generation).
#
#   scripts/bench-fdb-batch.sh [BIN [ROUTES [ROUNDS]]]   (default: target/release/qbridge 10000 3)
#
# QB89_LINES=VX or BR: only the remotes' lines or only the bridge entries'.
set -e
BIN=${1:-target/release/qbridge}; N=${2:-10000}; R=${3:-3}
[ "$(id -u)" = 0 ] || { echo "run as root (namespaces)"; exit 1; }
NS=qb89b$$
D=/tmp/qb89b.$$; mkdir -p $D
ip netns add $NS
ip -n $NS link set lo up
ip -n $NS addr add 192.0.2.89/32 dev lo
ip -n $NS link add s1 type veth peer name t1
ip -n $NS link set s1 up; ip -n $NS link set t1 up
cat > $D/setup <<EOB
link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0
link add p1 type afpacket dev s1
link set dev p1 master br0
vlan add vid 10 dev p1 pvid untagged
link add vx0 type vxlan id 100 local 192.0.2.89 dstport 4789 nolearning
link set dev vx0 master br0
vlan add vid 10 dev vx0 pvid untagged
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.4
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.5
EOB
ip netns exec $NS $BIN daemon -batch $D/setup --socket $D/sock --fast-path auto --workers 2 > $D/log 2>&1 &
PID=$!
for i in $(seq 50); do [ -S $D/sock ] && break; sleep 0.1; done
for r in $(seq 0 $((R-1))); do
  python3 - $N $r > $D/b <<'EOP'
import os, sys
n, r = int(sys.argv[1]), int(sys.argv[2])
lines = os.environ.get("QB89_LINES", "VXBR")
for i in range(n):
    mac = "02:89:%02x:%02x:%02x:01" % ((i >> 16) & 255, (i >> 8) & 255, i & 255)
    if "VX" in lines:
        print(f"fdb replace {mac} dev vx0 dst 192.0.2.{2 + (i + r) % 4} extern_learn")
    if "BR" in lines:
        print(f"fdb replace {mac} dev vx0 vlan 10 extern_learn")
EOP
  s=$(date +%s.%N); $BIN --socket $D/sock -batch $D/b; e=$(date +%s.%N)
  echo "round $r: $(echo "$e - $s" | bc) s"
done
$BIN --socket $D/sock -j show fast-path | python3 -c 'import json,sys; v=json.load(sys.stdin); print("state", v["state"], "stale", v["misses"]["stale"])'
kill $PID; wait $PID 2>/dev/null || true
ip netns del $NS; rm -rf $D
