#!/usr/bin/env bash
# The EVPN control plane's cost per route (issue 31), as root: N type-2 routes from M VTEPs
# injected into a gobgpd through its API reach, over iBGP, both
#
#   qbridge side (ns A, 192.0.2.1): gobgpd + qbridge-evpn + the qbridge daemon (br0, vx0)
#   FRR side     (ns B, 192.0.2.2): bgpd + zebra (advertise-all-vni), kernel bridge + vx100
#
# from K injector gobgpds (ns I, 192.0.2.100 onwards, each with a share of the VTEPs; K =
# QBRIDGE_BENCH_INJECTORS, default 16: one gobgpd takes API-added type-2 routes in O(N²),
# bench.rs says why), all on one underlay bridge (ns U).
# qbridge-evpn-bench (crates/evpn/src/bin/bench.rs) injects them (AddPathStream), times how long
# until the daemon's FDB (fdb show -j) and FRR's kernel FDB (bridge fdb show) hold all N, then
# withdraws them (DeletePath of the family) and times until both hold none; it prints the
# routes/s of each side and the CPU (utime+stime) of qbridge-evpn, its gobgpd and the daemon
# beside bgpd's and zebra's. Both sides receive the same UPDATEs at the same time.
#
#   scripts/bench-evpn.sh ROUTES VTEPS [ROUTES VTEPS]...   (default: 3000 100)
#
# QBRIDGE_BENCH_IPV6=1: the underlay is IPv6 (A 2001:db8:e7::1, the injectors ::100 onwards,
# the injected VTEPs 2001:db8:100::N, the BGP sessions over IPv6) and the FRR side is left out:
# FRR 8.4 has no IPv6 VTEPs (docs/decisions.md 81).
# QBRIDGE_EVPN_ARGS adds options to qbridge-evpn (e.g. --interval-ms 2000). QBRIDGE_BENCH_BIN=DIR
# takes qbridge, qbridge-evpn and qbridge-evpn-bench from DIR instead of building them (to
# compare two builds of the adapter).
# QBRIDGE_GOBGP_VERSION=3.37.0: every gobgpd (qbridge's and the injectors') is that version of
# gobgp/v3, built once with Go from the module proxy into /var/cache/qbridge/gobgp-VERSION
# (Debian 12's 3.10 scans every EVPN path per received type-2 route; 3.37 has an index by MAC:
# docs/benchmarks-live.md, "gobgpd 3.37").
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root"; exit 1; }
if [ -n "${QBRIDGE_GOBGP_VERSION:-}" ]; then
  gobgp_dir=/var/cache/qbridge/gobgp-$QBRIDGE_GOBGP_VERSION
  if [ ! -x "$gobgp_dir/gobgpd" ]; then
    command -v go >/dev/null || { echo "QBRIDGE_GOBGP_VERSION needs Go (the go command) to build gobgpd"; exit 1; }
    mkdir -p "$gobgp_dir"
    GOBIN=$gobgp_dir GOFLAGS=-mod=mod go install "github.com/osrg/gobgp/v3/cmd/gobgpd@v$QBRIDGE_GOBGP_VERSION" \
      "github.com/osrg/gobgp/v3/cmd/gobgp@v$QBRIDGE_GOBGP_VERSION"
  fi
  export PATH=$gobgp_dir:$PATH
  echo "gobgpd: $(gobgpd --version 2>&1 | head -1) ($gobgp_dir)"
fi
for t in gobgpd /usr/lib/frr/zebra /usr/lib/frr/bgpd; do
  command -v $t >/dev/null || { echo "$t is missing (scripts/test.sh installs gobgpd and frr)"; exit 1; }
done
[ $# -gt 0 ] || set -- 3000 100
if [ -n "${QBRIDGE_BENCH_BIN:-}" ]; then
  bin=$QBRIDGE_BENCH_BIN
else
  cargo build --release --locked -q -p qbridge -p qbridge-evpn
  bin=$PWD/target/release
fi
tmp=$(mktemp -d)
chmod 755 "$tmp"
p=qbev$$
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for f in "$tmp"/frr/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 0.5
  for n in u a b i; do ip netns del $p-$n 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap "exit 130" INT TERM

# The underlay: a kernel bridge in U, a veth to each of A, B, I.
ip netns add $p-u
ip -n $p-u link add ubr type bridge
ip -n $p-u link set ubr up
v6=${QBRIDGE_BENCH_IPV6:-}
declare -A addr=([a]=192.0.2.1 [b]=192.0.2.2 [i]=192.0.2.100)
plen=24
nodes="a b i"
k=${QBRIDGE_BENCH_INJECTORS:-16}
inj=()
for j in $(seq 0 $((k - 1))); do inj+=(192.0.2.$((100 + j))); done
if [ -n "$v6" ]; then
  addr=([a]=2001:db8:e7::1 [i]=2001:db8:e7::100)
  plen="64 nodad"
  nodes="a i"
  inj=()
  for j in $(seq 0 $((k - 1))); do inj+=(2001:db8:e7::$((100 + j))); done
fi
for n in $nodes; do
  ip netns add $p-$n
  ip -n $p-$n link set lo up
  ip link add ul netns $p-$n type veth peer name u$n netns $p-u
  ip -n $p-u link set u$n master ubr
  ip -n $p-u link set u$n up
  # shellcheck disable=SC2086
  ip -n $p-$n addr add ${addr[$n]}/$plen dev ul
  ip -n $p-$n link set ul up
done
# The injected VTEPs (10.100.0.0/16) are behind the injector: FRR resolves its next hops.
# shellcheck disable=SC2086
for j in $(seq 1 $((k - 1))); do ip -n $p-i addr add ${inj[$j]}/$plen dev ul; done
if [ -n "$v6" ]; then
  ip -n $p-a route add 2001:db8:100::/64 via 2001:db8:e7::100
else
  ip -n $p-b route add 10.100.0.0/16 via 192.0.2.100
  ip -n $p-a route add 10.100.0.0/16 via 192.0.2.100
fi

gobgpd_conf() { # LOCAL PEER... (INJECTOR=1: no listening socket, sessions from LOCAL)
  local l=$1; shift
  printf '[global.config]\n  as = 65000\n  router-id = "%s"\n  local-address-list = ["%s"]\n' "${RID:-$l}" "$l"
  [ -n "${INJECTOR:-}" ] && printf '  port = -1\n'
  for peer in "$@"; do
    printf '[[neighbors]]\n  [neighbors.config]\n    neighbor-address = "%s"\n    peer-as = 65000\n' "$peer"
    [ -n "${INJECTOR:-}" ] && printf '  [neighbors.transport.config]\n    local-address = "%s"\n' "$l"
    printf '  [neighbors.timers.config]\n    connect-retry = 1\n    hold-time = 9\n    keepalive-interval = 3\n'
    printf '  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = "l2vpn-evpn"\n'
  done
}
start() { # NS LOG PROG ARGS... (pid in $started)
  local ns=$1 log=$2; shift 2
  ip netns exec "$ns" "$@" >"$log" 2>&1 &
  started=$!
  pids+=($started)
}

# I: the injectors' gobgpds (API ports 50051 onwards), each peered with A's gobgpd and FRR.
apis=()
for j in $(seq 0 $((k - 1))); do
  if [ -n "$v6" ]; then
    INJECTOR=1 RID=10.99.0.$((1 + j)) gobgpd_conf ${inj[$j]} 2001:db8:e7::1 >"$tmp/gobgpd-i$j.toml"
  else
    INJECTOR=1 gobgpd_conf ${inj[$j]} 192.0.2.1 192.0.2.2 >"$tmp/gobgpd-i$j.toml"
  fi
  start $p-i "$tmp/gobgpd-i$j.log" gobgpd -f "$tmp/gobgpd-i$j.toml" --api-hosts 127.0.0.1:$((50051 + j))
  apis+=(127.0.0.1:$((50051 + j)))
done
# (ip netns exec runs the program itself: the PID is gobgpd's.)

# A: qbridge daemon, gobgpd, qbridge-evpn.
ip -n $p-a link add qa type veth peer name qa-h
ip -n $p-a link set qa up
ip -n $p-a link set qa-h up
cat >"$tmp/a.batch" <<EOF
link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local ${addr[a]} dstport 4789 nolearning
link set dev p1 master br0
link set dev vx0 master br0
link set dev vx0 learning off
EOF
start $p-a "$tmp/daemon.log" "$bin/qbridge" daemon -batch "$tmp/a.batch" --socket "$tmp/a.sock"
daemon_pid=$started
for _ in $(seq 100); do [ -S "$tmp/a.sock" ] && break; sleep 0.05; done
[ -S "$tmp/a.sock" ] || { echo "qbridge did not start:"; cat "$tmp/daemon.log"; exit 1; }
RID=192.0.2.1 gobgpd_conf ${addr[a]} "${inj[@]}" >"$tmp/gobgpd-a.toml"
start $p-a "$tmp/gobgpd-a.log" gobgpd -f "$tmp/gobgpd-a.toml" --api-hosts 127.0.0.1:50051
gobgpd_a=$started
# shellcheck disable=SC2086
start $p-a "$tmp/evpn.log" "$bin/qbridge-evpn" --socket "$tmp/a.sock" ${QBRIDGE_EVPN_ARGS:-}
evpn_pid=$started

# B: FRR with a kernel bridge and vxlan device (not over IPv6: FRR 8.4 has no IPv6 VTEPs).
frr_args=()
sessions=$((2 * k))
if [ -n "$v6" ]; then
  sessions=$k
else
ip -n $p-b link add kbr type bridge
ip -n $p-b link add vx100 type vxlan id 100 local 192.0.2.2 dstport 4789 nolearning
ip -n $p-b link set vx100 master kbr
ip netns exec $p-b bridge link set dev vx100 learning off
ip -n $p-b link set vx100 up
ip -n $p-b link set kbr up
frr=$tmp/frr
mkdir -p "$frr"
chown frr:frr "$frr"
echo "hostname b" >"$frr/zebra.conf"
{
  printf 'hostname b\nrouter bgp 65000\n bgp router-id 192.0.2.2\n no bgp default ipv4-unicast\n'
  for n in "${inj[@]}"; do
    printf ' neighbor %s remote-as 65000\n neighbor %s timers connect 1\n' "$n" "$n"
    printf ' neighbor %s advertisement-interval 0\n' "$n"
  done
  printf ' address-family l2vpn evpn\n'
  for n in "${inj[@]}"; do printf '  neighbor %s activate\n' "$n"; done
  printf '  advertise-all-vni\n exit-address-family\n'
} >"$frr/bgpd.conf"
for d in zebra bgpd; do
  ip netns exec $p-b /usr/lib/frr/$d -d -f "$frr/$d.conf" -i "$frr/$d.pid" -z "$frr/zserv.api" \
    --vty_socket "$frr/" --log "file:$frr/$d.log"
  [ $d = zebra ] && for _ in $(seq 100); do [ -e "$frr/zserv.api" ] && break; sleep 0.05; done
done
sleep 0.5
zebra_pid=$(cat "$frr/zebra.pid"); bgpd_pid=$(cat "$frr/bgpd.pid")
frr_args=(--frr-ns $p-b --frr-dev vx100 --frr-pids "bgpd=$bgpd_pid,zebra=$zebra_pid")
fi

# Every session up (each injector's neighbours established: A and FRR, or A alone).
for _ in $(seq 300); do
  n=0
  for j in $(seq 0 $((k - 1))); do
    c=$(ip netns exec $p-i gobgp -p $((50051 + j)) neighbor 2>/dev/null | grep -c Establ || true)
    n=$((n + c))
  done
  [ "$n" = $sessions ] && break
  sleep 0.2
done
[ "$n" = $sessions ] || { echo "BGP sessions not up ($n of $sessions):"; ip netns exec $p-i gobgp neighbor; exit 1; }
sleep 2

echo "qbridge-evpn: $bin/qbridge-evpn, $(git rev-parse --short HEAD)$(git diff --quiet -- crates/evpn || echo +dirty); $k injectors;${v6:+ IPv6 underlay;} $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
while [ $# -ge 2 ]; do
  ip netns exec $p-i "$bin/qbridge-evpn-bench" --inject "$(IFS=,; echo "${apis[*]}")" --routes "$1" --vteps "$2" \
    --socket "$tmp/a.sock" --pids "qbridge-evpn=$evpn_pid,gobgpd=$gobgpd_a,daemon=$daemon_pid" \
    "${frr_args[@]}" ${v6:+--ipv6} \
    2>&1 || { echo "failed; the adapter's log:"; tail -20 "$tmp/evpn.log"; exit 1; }
  shift 2
  sleep 3
done
