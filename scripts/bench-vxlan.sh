#!/usr/bin/env bash
# TCP through VXLAN between two hosts, one run, four VTEP pairs side by side, as root:
#
#   ha ═ veth ═ [VTEP A] ═══ underlay veth, MTU 1550 ═══ [VTEP B] ═ veth ═ hb
#
#   qbridge-kernel  A: qbridge daemon, vx0 type vxlan id 100 (the release build),
#                   --fast-path off: every frame through the pipeline and its UDP socket
#                   B: kernel vxlan device id 100 in a kernel bridge
#   qbfast-kernel   A: the same with --fast-path on and hb's MAC a static entry (fdb add
#                   HB dev vx0 dst B): the program encapsulates A -> B (decision 73) and
#                   decapsulates B -> A (decision 77: qb_vxlan_in on ul)
#   kernel-kernel   A and B: kernel vxlan devices in kernel bridges
#   ovs-kernel      A: Open vSwitch, netdev datapath: br-phy (underlay address, ul) and
#                   br-int (qa, vx0 type=vxlan options:key=100); B: kernel
#   qbridge-ovs     A: qbridge; B: Open vSwitch netdev
#   qbfast-kernel/6, qbridge-kernel/6, kernel-kernel/6: over an IPv6 underlay (2001:db8:100::1
#                   and ::2, MTU 1570: IPv6's 70 bytes of outer headers over a 1500-byte
#                   inner MTU), both VTEPs at their defaults (UDP checksum computed)
#
# iperf3 from ha to hb (A -> B) and back (-R, B -> A), 1 and 4 streams, SECONDS each; the
# receiver's rate in Gbit/s; then B -> A 64-byte frames (UDP, 18-byte payloads, unpaced,
# one stream), the thousands of datagrams a second ha's iperf3 received (B>A 64B, kfr/s).
# QB_LEARN=1 adds qblearn-kernel: --fast-path on with hb's MAC learned, not static (the
# default VXLAN port): since decision 83 the program encapsulates to the learned remote and
# decapsulates from the learned source as for a static one.
# Each pair's softnet drops (frames the CPUs' input backlogs dropped) go to stderr.
# QB_PROBE=1 adds a line of evidence per TCP figure to stderr (decision 90; lib-vxlan.sh's
# vx_probe): the receiving host's bytes per received skb, the sender's retransmissions, CPU
# ms per GiB received (iperf3's processes with the softirq work run in them, ksoftirqd, the
# daemons).
# Checksum facts of a veth underlay (docs/semantics.md §R.5, §U.5):
# kernel vxlan devices are at their defaults (TSO and checksum offload on; qbridge completes
# the checksums they leave partial); a VTEP that sends to OVS has its underlay `tx off`; the
# host behind OVS has `tx off` (OVS's userspace datapath needs it on veths). Results go to
# docs/benchmarks-live.md by hand.
#
#   scripts/bench-vxlan.sh [SECONDS] [WORKERS] [FAMILIES] [REPS]
#       (defaults 5, 2, "4 6" and 1; FAMILIES=6: the IPv6 pairs only). With REPS > 1 the
#       qbfast, qbridge and kernel pairs run REPS times, interleaved (the machine is shared:
#       figures drift), and a last table gives each figure's median.
set -euo pipefail
secs=${1:-5}
workers=${2:-2}
families=${3:-4 6}
reps=${4:-1}
cd "$(dirname "$0")/.."
. scripts/lib-vxlan.sh
vx_init qbvx iperf3 ethtool python3
[ "${QB_PROBE:-0}" = 1 ] && vx_probe_on
have_ovs=1
[ -x /usr/sbin/ovs-vswitchd ] || command -v ovs-vswitchd >/dev/null || have_ovs=0
cleanup() {
  for f in "$tmp"/ovs/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  vx_cleanup
}
trap cleanup EXIT

# Frames the CPUs' input backlogs dropped (netdev_max_backlog), all CPUs: /proc/net/softnet_stat's
# second column (hex).
softnet_drops() {
  local s=0 _a d _r
  while read -r _a d _r; do s=$((s + 16#$d)); done </proc/net/softnet_stat
  echo $s
}

kernel_vtep() { vx_kernel_vtep "$@" 100; } # NS LOCAL REMOTE PORT

qb_fast=off
qbfast_vtep() { # NS LOCAL REMOTE PORT: qbridge with the fast path and a static remote
  qb_fast=on
  qbridge_vtep "$@"
  qb_fast=off
}

qblearn_vtep() { # NS LOCAL REMOTE PORT: the fast path on, hb's MAC learned (no static entry)
  qb_fast=on qb_learn=1
  qbridge_vtep "$@"
  qb_fast=off qb_learn=0
}
qb_learn=0

qbridge_vtep() { # NS LOCAL REMOTE PORT
  local static=
  if [ $qb_fast = on ] && [ $qb_learn = 0 ]; then
    static="fdb add $(ip -n $p-hb -br link show eth0 | awk '{print $3}') dev vx0 dst $3"
  fi
  cat > "$tmp/$1.batch" <<EOF
link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev $4
link add vx0 type vxlan id 100 local $2 dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst $3
$static
EOF
  vx_daemon $1 $qb_fast
}

ovs_vtep() { # NS LOCAL REMOTE PORT
  local d=$tmp/ovs ns=$1
  rm -rf "$d"; mkdir -p "$d"
  export OVS_RUNDIR=$d OVS_DBDIR=$d OVS_LOGDIR=$d OVS_SYSCONFDIR=$d
  ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  ip netns exec $ns ovsdb-server "$d/conf.db" --remote=punix:$d/db.sock \
    --pidfile=$d/ovsdb-server.pid --unixctl=$d/ovsdb-server.ctl \
    --log-file=$d/ovsdb-server.log --no-chdir --detach 2>"$d/ovsdb-server.err"
  local v="ovs-vsctl --db=unix:$d/db.sock --timeout=10"
  $v --no-wait init
  ip netns exec $ns ovs-vswitchd unix:$d/db.sock --pidfile=$d/ovs-vswitchd.pid \
    --unixctl=$d/ovs-vswitchd.ctl --log-file=$d/ovs-vswitchd.log --no-chdir --detach \
    2>"$d/ovs-vswitchd.err"
  $v add-br br-phy -- set bridge br-phy datapath_type=netdev -- add-port br-phy ul
  $v add-br br-int -- set bridge br-int datapath_type=netdev -- add-port br-int $4 \
    -- add-port br-int vx0 -- set interface vx0 type=vxlan options:remote_ip=$3 options:key=100
  ip -n $ns addr add $2/24 dev br-phy
  ip -n $ns link set br-phy mtu 1550
  ip -n $ns link set br-phy up
  ip -n $ns link set br-int up
}

stop_ovs() {
  for f in "$tmp"/ovs/ovs-vswitchd.pid "$tmp"/ovs/ovsdb-server.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 0.5
}

kpps64() { # B -> A 64-byte frames: thousands of datagrams a second ha received
  ip netns exec $p-ha iperf3 -J -c 10.20.0.2 -t "$secs" -u -b 0 -l 18 -R 2>/dev/null |
    python3 -c 'import json,sys
try:
    s = json.load(sys.stdin)["end"]["sum"]
    print("%.0f" % ((s["packets"] - s["lost_packets"]) / s["seconds"] / 1e3))
except Exception: print("fail")'
}

pair() { # A-KIND B-KIND [FAMILY: 4 (default) or 6]
  local ka=$1 kb=$2 fam=${3:-4}
  local ipa=192.0.2.1 ipb=192.0.2.2 plen=24 mtu=1550 label="$1-$2"
  if [ "$fam" = 6 ]; then
    ipa=2001:db8:100::1 ipb=2001:db8:100::2 plen=64 mtu=1570 label="$1-$2/6"
  fi
  vx_netns
  for s in a b; do
    ip -n $p-$s link set ul mtu $mtu
    if [ "$fam" = 6 ]; then ip netns exec $p-$s sysctl -qw net.ipv6.conf.ul.disable_ipv6=0; fi
  done
  local dad=
  if [ "$fam" = 6 ]; then dad=nodad; fi
  [ "$ka" = ovs ] || ip -n $p-a addr add $ipa/$plen dev ul $dad
  [ "$kb" = ovs ] || ip -n $p-b addr add $ipb/$plen dev ul $dad
  # Checksum facts of a veth underlay (header comment).
  [ "$kb" = ovs ] && ip netns exec $p-a ethtool -K ul tx off >/dev/null
  [ "$ka" = ovs ] && ip netns exec $p-b ethtool -K ul tx off >/dev/null
  [ "$ka" = ovs ] && ip netns exec $p-ha ethtool -K eth0 tx off >/dev/null
  [ "$kb" = ovs ] && ip netns exec $p-hb ethtool -K eth0 tx off >/dev/null
  ${ka}_vtep $p-a $ipa $ipb qa
  ${kb}_vtep $p-b $ipb $ipa kb1
  local ok=0
  vx_serve && ok=1
  local r drops0
  drops0=$(softnet_drops)
  vx_label=$label
  if [ $ok = 1 ]; then
    sleep 0.3
    r="$(vx_rate -P 1) $(vx_rate -P 4) $(vx_rate -R -P 1) $(vx_rate -R -P 4) $(kpps64)"
  else
    r="no-ping no-ping no-ping no-ping no-ping"
  fi
  echo "$label: softnet drops $(( $(softnet_drops) - drops0 )) during the pair" >&2
  printf '%-16s %s\n' "$label" "$r" |
    awk '{printf "%-16s %8s %8s %8s %8s %8s\n", $1, $2, $3, $4, $5, $6}' |
    tee -a "$tmp/rows"
  vx_stop
  stop_ovs
  vx_del_netns
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $secs s per figure; $workers qbridge workers"
printf '%-16s %8s %8s %8s %8s %8s\n' "pair (A-B)" "A>B x1" "A>B x4" "B>A x1" "B>A x4" "B>A 64B"
case " $families " in *" 4 "*) ;; *) have_ovs=2 ;; esac
for rep in $(seq "$reps"); do
  for fam in $families; do
    pair qbfast kernel "$fam"   # over IPv6 too (decision 78)
    [ "${QB_LEARN:-0}" = 1 ] && pair qblearn kernel "$fam"
    pair qbridge kernel "$fam"
    pair kernel kernel "$fam"
  done
done
if [ "$reps" -gt 1 ]; then
  echo "medians of $reps runs:"
  vx_medians "$tmp/rows" 5
fi
if [ $have_ovs = 2 ]; then
  :
elif [ $have_ovs = 1 ]; then
  pair ovs kernel
  pair qbridge ovs
else
  echo "(Open vSwitch is not installed: no OVS pairs; scripts/test.sh installs it)"
fi
