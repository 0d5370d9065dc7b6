#!/usr/bin/env bash
# TCP of a real virtual machine (qemu -accel tcg, Debian's kernel, virtio-net with vnet_hdr,
# the guest's offloads at their defaults; scripts/vm-guest.sh builds it) through qbridge and
# through the kernel's bridge, in one run, as root:
#
#   guest ─ TAP vmb0 ─ [qbridge br0 | kernel br0] ─ veth ─ host namespace (iperf3 client)
#
# qbridge: qemu's script=dist/qbridge-ifup makes the TAP an afpacket port (a profile in a
# temporary QBRIDGE_IFUP_DIR); kernel: a script that does `ip link set TAP master br0`. The same
# guest image, namespaces and iperf3 (server in the guest); guest -> host (-R) and host ->
# guest, printed side by side with the ratio qbridge / kernel.
#
#   scripts/bench-vm.sh [SECONDS]        (default 5)
set -euo pipefail
secs=${1:-5}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root"; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 is missing (scripts/deps.sh tests)"; exit 1; }
read -r kernel initrd < <(scripts/vm-guest.sh target/vm | tail -n 1)
cargo build --release -q -p qbridge
bin=$PWD/target/release/qbridge
tmp=$(mktemp -d)
p=qbvm$$
qpid= dpid=
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null || true
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null || true
  sleep 0.3
  for n in sw h; do ip netns del $p-$n 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# Boots the guest with `script=$1` in $p-sw; its console: $tmp/in (commands), $tmp/out.
boot() {
  rm -f "$tmp/in" "$tmp/out"; mkfifo "$tmp/in"
  exec 3<>"$tmp/in"
  ip netns exec $p-sw env QBRIDGE="$bin" QBRIDGE_SOCKET="$tmp/qb.sock" QBRIDGE_IFUP_DIR="$tmp/ifup" \
    qemu-system-x86_64 -accel tcg -m 256 -smp 1 -nodefaults -no-user-config -display none \
    -serial stdio -no-reboot -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 quiet loglevel=1 panic=-1 qb.ip=10.60.0.5/24" \
    -netdev "tap,id=n0,ifname=vmb0,vnet_hdr=on,script=$1,downscript=no" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:42 <&3 >"$tmp/out" 2>&1 &
  qpid=$!
  for _ in $(seq 1 1200); do grep -q QB-READY "$tmp/out" 2>/dev/null && break; sleep 0.1; done
  grep -q QB-READY "$tmp/out" || { cat "$tmp/out"; echo "the guest did not boot"; exit 1; }
  echo "iperf3 -s -D" >&3
  for _ in $(seq 1 100); do
    ip netns exec $p-h ping -c 1 -W 1 10.60.0.5 >/dev/null 2>&1 && break
  done
}
halt() {
  echo "poweroff -f" >&3
  for _ in $(seq 1 100); do kill -0 "$qpid" 2>/dev/null || break; sleep 0.1; done
  kill "$qpid" 2>/dev/null || true; wait "$qpid" 2>/dev/null || true; qpid=
  exec 3>&-
}
# Gbit/s of `iperf3 -c guest [ARGS]` from the host namespace (the receiver's figure).
tcp() {
  local out
  for _ in $(seq 1 20); do
    out=$(ip netns exec $p-h iperf3 -c 10.60.0.5 -t "$secs" -J "$@" 2>/dev/null || true)
    echo "$out" | grep -q '"sum_received"' && break
    sleep 0.3
  done
  echo "$out" | python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}

for n in sw h; do ip netns add $p-$n; ip -n $p-$n link set lo up; done
ip -n $p-h link add eth0 type veth peer name s1 netns $p-sw
ip -n $p-h addr add 10.60.0.2/24 dev eth0
ip -n $p-h link set eth0 up; ip -n $p-sw link set s1 up

# qbridge.
mkdir -p "$tmp/ifup"
printf '%s\n' "link set dev PORT master br0" > "$tmp/ifup/default.conf"
printf '%s\n' "link add br0 type bridge vlan_filtering 1" "link add s1 type afpacket dev s1" \
  "link set dev s1 master br0" > "$tmp/qb.batch"
ip netns exec $p-sw "$bin" daemon -batch "$tmp/qb.batch" --socket "$tmp/qb.sock" \
  >"$tmp/qb.log" 2>&1 &
dpid=$!
for _ in $(seq 1 100); do [ -S "$tmp/qb.sock" ] && break; sleep 0.1; done
boot "$PWD/dist/qbridge-ifup"
qb_in=$(tcp); qb_out=$(tcp -R)
halt
kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=

# The kernel's bridge.
ip -n $p-sw link add br0 type bridge
ip -n $p-sw link set s1 master br0; ip -n $p-sw link set br0 up
printf '#!/bin/sh\nip link set "$1" up\nip link set "$1" master br0\n' > "$tmp/kifup"
chmod 755 "$tmp/kifup"
boot "$tmp/kifup"
k_in=$(tcp); k_out=$(tcp -R)
halt

ratio() { python3 -c "print('%.2f' % ($1 / $2) if $2 else 'n/a')"; }
printf '%-16s %10s %10s %8s\n' "TCP, ${secs} s" qbridge kernel ratio
printf '%-16s %10s %10s %8s\n' "host -> guest" "$qb_in" "$k_in" "$(ratio "$qb_in" "$k_in")"
printf '%-16s %10s %10s %8s\n' "guest -> host" "$qb_out" "$k_out" "$(ratio "$qb_out" "$k_out")"
echo "(Gbit/s, iperf3's receiver; one stream; qemu -accel tcg, 1 vCPU)"
