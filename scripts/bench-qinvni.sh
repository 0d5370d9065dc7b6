#!/usr/bin/env bash
# TCP through Q-in-VNI (decision 86) between two customer hosts in C-VLAN 10, as root:
#
#   ha (C-tag 10) ═ veth ═ [VTEP A] ═══ underlay veth, MTU 1600 ═══ [VTEP B] ═ veth ═ hb (C-tag 10)
#
#   qbfastq-kernel  A: qbridge (the release build) --fast-path on, an 802.1ad bridge: qa
#                   dot1q-tunnel tag 100, vx0 external with S-VLAN 100 <-> VNI 5000 and hb's
#                   MAC a static entry: the program encapsulates A -> B with the C-tag inside
#                   and decapsulates B -> A (qb_vxlan_in)
#   qbridgeq-kernel A: the same with --fast-path off (the pipeline and its UDP socket)
#   qbfast-kernel   A: qbridge --fast-path on, a VLAN-unaware bridge with vx0 id 5000 and the
#                   static entry, the hosts UNTAGGED (plain VXLAN: the program's cost without
#                   the tags, the row to compare qbfastq with)
#   kernel-kernel   A: a kernel vxlan device id 5000 in a kernel bridge (VLAN-unaware: the
#                   C-tag crosses inside the VNI, the wire the same as Q-in-VNI's)
#   B is always the kernel's vxlan device id 5000 in a kernel bridge, at its defaults.
#
# The hosts' C-tag is pushed and popped by a small tc BPF program on their eth0 (no 8021q or
# act_vlan in this kernel), so their TCP is the kernel's, super-frames included. iperf3 from
# ha to hb (A>B) and back (-R, B>A), 1 stream, SECONDS each; the receiver's rate in Gbit/s.
# With REPS > 1 the pairs run REPS times, interleaved (the machine is shared: figures drift),
# and a last table gives each figure's median. Results go to docs/benchmarks-live.md by hand.
#
#   scripts/bench-qinvni.sh [SECONDS] [WORKERS] [REPS]      (defaults 5, 2, 1)
set -euo pipefail
secs=${1:-5}
workers=${2:-2}
reps=${3:-1}
cd "$(dirname "$0")/.."
. scripts/lib-vxlan.sh
vx_init qbqv iperf3 clang python3
trap vx_cleanup EXIT

cat > "$tmp/ctag.c" <<'EOF'
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
SEC("push") int ctag_push(struct __sk_buff *skb)
{
	return bpf_skb_vlan_push(skb, bpf_htons(0x8100), 10) ? TC_ACT_SHOT : TC_ACT_OK;
}
SEC("pop") int ctag_pop(struct __sk_buff *skb)
{
	if (!skb->vlan_present || (skb->vlan_tci & 0xfff) != 10 || bpf_skb_vlan_pop(skb))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}
char _license[] SEC("license") = "GPL";
EOF
clang -O2 -target bpf -I/usr/include/"$(uname -m)"-linux-gnu -c "$tmp/ctag.c" -o "$tmp/ctag.o"

ctag() { # NS: C-VLAN 10 on the host's eth0
  ip netns exec $1 tc qdisc add dev eth0 clsact
  ip netns exec $1 tc filter add dev eth0 egress bpf direct-action obj "$tmp/ctag.o" sec push
  ip netns exec $1 tc filter add dev eth0 ingress bpf direct-action obj "$tmp/ctag.o" sec pop
}

kernel_vtep() { vx_kernel_vtep "$@" 5000; } # NS LOCAL REMOTE PORT

qbridge_vtep() { # NS LOCAL REMOTE PORT FASTPATH QINVNI
  local hb
  hb=$(ip -n $p-hb -br link show eth0 | awk '{print $3}')
  if [ "$6" = 1 ]; then
    cat > "$tmp/$1.batch" <<EOF
link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add c1 type afpacket dev $4
link add vx0 type vxlan external local $2 dev ul dstport 4789
link set dev c1 master pe vlan_mode dot1q-tunnel tag 100
link set dev vx0 master pe
vlan del vid 1 dev vx0
vlan add vid 100 dev vx0
vlan add vid 100 dev vx0 tunnel_info id 5000
fdb append 00:00:00:00:00:00 dev vx0 dst $3 vni 5000
fdb add $hb dev vx0 dst $3 vni 5000
EOF
  else
    cat > "$tmp/$1.batch" <<EOF
link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev $4
link add vx0 type vxlan id 5000 local $2 dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst $3
fdb add $hb dev vx0 dst $3
EOF
  fi
  vx_daemon $1 $5
}
qbfastq_vtep() { qbridge_vtep "$@" on 1; }
qbridgeq_vtep() { qbridge_vtep "$@" off 1; }
qbfast_vtep() { qbridge_vtep "$@" on 0; }

pair() { # A-KIND
  local ka=$1 label="$1-kernel"
  vx_netns
  if [ "$ka" != qbfast ]; then ctag $p-ha; ctag $p-hb; fi
  for s in a b; do ip -n $p-$s link set ul mtu 1600; done
  ip -n $p-a addr add 192.0.2.1/24 dev ul
  ip -n $p-b addr add 192.0.2.2/24 dev ul
  ${ka}_vtep $p-a 192.0.2.1 192.0.2.2 qa
  kernel_vtep $p-b 192.0.2.2 192.0.2.1 kb1
  local r
  if vx_serve; then
    sleep 0.3
    r="$(vx_rate -P 1) $(vx_rate -R -P 1)"
  else
    r="no-ping no-ping"
  fi
  printf '%-16s %s\n' "$label" "$r" | awk '{printf "%-16s %8s %8s\n", $1, $2, $3}' |
    tee -a "$tmp/rows"
  vx_stop
  sleep 0.3
  vx_del_netns
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $secs s per figure; $workers qbridge workers"
printf '%-16s %8s %8s\n' "pair (A-B)" "A>B x1" "B>A x1"
for rep in $(seq "$reps"); do
  pair qbfastq
  pair qbfast
  pair qbridgeq
  pair kernel
done
if [ "$reps" -gt 1 ]; then
  echo "medians of $reps runs:"
  vx_medians "$tmp/rows" 2
fi
