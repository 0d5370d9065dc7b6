# What scripts/bench-vxlan.sh and scripts/bench-qinvni.sh share (sourced, not run): their
# picture's namespaces, a kernel VTEP, a qbridge VTEP's daemon, iperf3's server and rate, the
# teardown and the medians table. The caller sets p (the namespaces' prefix), tmp (a scratch
# directory), bin (the qbridge binary), workers, secs and the array pids (the daemons).
#
#   ha (10.20.0.1) eth0 ═ qa [$p-a] ul ═══ ul [$p-b] kb1 ═ eth0 hb (10.20.0.2)

vx_init() { # PREFIX TOOL…: as root with TOOLs, the release build in bin, the prefix p, a
  # scratch tmp, no daemons yet
  [ "$(id -u)" = 0 ] || { echo "run as root"; exit 1; }
  local t
  for t in "${@:2}"; do
    command -v $t >/dev/null || { echo "$t is missing (scripts/deps.sh installs it)"; exit 1; }
  done
  cargo build --release --locked -q -p qbridge
  bin=$PWD/target/release/qbridge
  tmp=$(mktemp -d)
  p=$1$$
  pids=()
}

vx_netns() { # the four namespaces (IPv6 off), the veths up, the hosts' addresses
  for n in a b ha hb; do
    ip netns add $p-$n; ip -n $p-$n link set lo up
    ip netns exec $p-$n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  done
  ip -n $p-a link add ul type veth peer name ul netns $p-b
  ip -n $p-ha link add eth0 type veth peer name qa netns $p-a
  ip -n $p-hb link add eth0 type veth peer name kb1 netns $p-b
  for x in "a ul" "b ul" "ha eth0" "hb eth0" "a qa" "b kb1"; do
    set -- $x; ip -n $p-$1 link set $2 up
  done
  ip -n $p-ha addr add 10.20.0.1/24 dev eth0
  ip -n $p-hb addr add 10.20.0.2/24 dev eth0
}

vx_kernel_vtep() { # NS LOCAL REMOTE PORT VNI: vx0 (nolearning, MTU 1500, flood to REMOTE,
  # at its defaults otherwise) in kernel bridge kbr with PORT
  local ns=$1
  ip -n $ns link add vx0 type vxlan id $5 local $2 dstport 4789 nolearning
  ip -n $ns link set vx0 mtu 1500
  ip -n $ns link add kbr type bridge
  ip -n $ns link set vx0 master kbr
  ip -n $ns link set $4 master kbr
  ip netns exec $ns bridge fdb append 00:00:00:00:00:00 dev vx0 dst $3
  ip -n $ns link set vx0 up
  ip -n $ns link set kbr up
}

vx_daemon() { # NS FASTPATH: qbridge's daemon in NS running $tmp/NS.batch; waits for its socket
  ip netns exec $1 "$bin" daemon -batch "$tmp/$1.batch" --socket "$tmp/$1.sock" \
    --workers "$workers" --fast-path $2 >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$tmp/$1.sock" ] && return 0; sleep 0.05; done
  echo "qbridge did not start:"; cat "$tmp/$1.log"; exit 1
}

vx_serve() { # iperf3's server on hb, then up to 50 pings from ha: fails without an answer
  ip netns exec $p-hb iperf3 -s -D --pidfile "$tmp/iperf.pid" >/dev/null
  if [ -n "${vx_cg:-}" ]; then
    for _ in $(seq 20); do [ -s "$tmp/iperf.pid" ] && break; sleep 0.05; done
    cat "$tmp/iperf.pid" >"$vx_cg/cgroup.procs" 2>/dev/null || true
  fi
  for _ in $(seq 50); do
    if ip netns exec $p-ha ping -c 1 -W 1 10.20.0.2 >/dev/null 2>&1; then return 0; fi
  done
  return 1
}

vx_rate() { # ARGS…: iperf3 client args; prints Gbit/s received (with vx_probe_on: a line of
  # evidence to stderr, vx_probe)
  [ -n "${vx_cg:-}" ] && vx_snap >"$tmp/probe0"
  local r
  r=$(sh -c '[ -z "$1" ] || echo $$ >"$1"; shift; exec "$@"' sh "${vx_cg:+$vx_cg/cgroup.procs}" \
    ip netns exec $p-ha iperf3 -J -c 10.20.0.2 -t "$secs" "$@" 2>/dev/null |
    python3 -c 'import json,sys
try: print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))
except Exception: print("fail")')
  if [ -n "${vx_cg:-}" ]; then
    vx_snap >"$tmp/probe1"
    vx_probe "${vx_label:-?} $*" "$r" "$tmp/probe0" "$tmp/probe1" >&2
  fi
  echo "$r"
}

# Decision 90's evidence, per iperf3 figure (QB_PROBE=1 in bench-vxlan.sh): what the receiving
# host's TCP got (its eth0's received bytes per skb: ~1500 is one segment per skb, tens of KB
# GRO/TSO super-frames), the sender's TCP retransmissions, and CPU per GiB received: the
# iperf3 processes (a cpuacct group; without IRQ time accounting the softirq work that runs
# in their context is theirs) plus ksoftirqd and the daemons (/proc/PID/schedstat) — CPU time
# the pair itself spent, less sensitive to other load on the machine than Gbit/s.
vx_probe_on() { # a cpuacct group (cgroup v1) or a cgroup v2 directory for iperf3's processes
  vx_cg=
  if [ -d /sys/fs/cgroup/cpuacct ]; then
    vx_cg=/sys/fs/cgroup/cpuacct/qbvx$$
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    vx_cg=/sys/fs/cgroup/qbvx$$
  fi
  [ -n "$vx_cg" ] && mkdir -p "$vx_cg" || { echo "QB_PROBE: no cgroup for the CPU figure"; vx_cg=; }
}

vx_probe_off() { # the group, once its processes are gone
  [ -n "${vx_cg:-}" ] && rmdir "$vx_cg" 2>/dev/null || true
}

vx_snap() { # one line per fact: both hosts' eth0 and TCP counters, the CPU figures
  local h pid t ns k=0 c
  for h in ha hb; do
    echo "dev $h $(ip -n $p-$h -s -j link show eth0 | python3 -c 'import json,sys
s = json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["packets"], s["rx"]["bytes"])')"
    echo "retrans $h $(ip netns exec $p-$h awk '/^Tcp: [0-9]/{print $13}' /proc/net/snmp)"
  done
  for pid in $(pgrep ksoftirqd) "${pids[@]}"; do
    for t in /proc/$pid/task/*/schedstat; do # every thread of a daemon
      [ -r "$t" ] && { read -r ns _ <"$t"; k=$((k + ns)); }
    done
  done
  if [ -f "$vx_cg/cpuacct.usage" ]; then c=$(cat "$vx_cg/cpuacct.usage")
  else c=$(($(awk '/^usage_usec/{print $2}' "$vx_cg/cpu.stat") * 1000)); fi
  echo "cpu $c $k"
}

vx_probe() { # WHAT RATE SNAP0 SNAP1: the figure's evidence line
  python3 - "$@" <<'PY'
import sys
what, rate, f0, f1 = sys.argv[1:5]
def read(f):
    r = {}
    for line in open(f):
        w = line.split()
        r[w[0] + (w[1] if w[0] != "cpu" else "")] = [int(x) for x in w[2 if w[0] != "cpu" else 1:]]
    return r
a, b = read(f0), read(f1)
d = lambda k: [y - x for x, y in zip(a[k], b[k])]
rx, tx = ("ha", "hb") if " -R" in " " + what else ("hb", "ha")
pk, by = d("dev" + rx)
gib = by / 2**30
cpu = d("cpu")
print("  probe %-28s %6s Gbit/s: %s eth0 %6.0f B/skb received, %s retransmitted %5d, "
      "CPU %4.0f ms/GiB (iperf3 %4.0f + ksoftirqd/daemons %3.0f)"
      % (what, rate, rx, by / pk if pk else 0, tx, d("retrans" + tx)[0],
         sum(cpu) / 1e6 / gib if gib else 0, cpu[0] / 1e6 / gib if gib else 0,
         cpu[1] / 1e6 / gib if gib else 0))
PY
}

vx_stop() { # the iperf3 server and the daemons
  [ -f "$tmp/iperf.pid" ] && kill "$(cat "$tmp/iperf.pid")" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  pids=()
}

vx_del_netns() { # the four namespaces and what the pair left in $tmp
  for n in a b ha hb; do ip netns del $p-$n; done
  rm -f "$tmp"/*.sock "$tmp/iperf.pid"
}

vx_cleanup() { # on exit: the daemons, the namespaces, $tmp, vx_probe_on's group
  [ -f "$tmp/iperf.pid" ] && kill "$(cat "$tmp/iperf.pid")" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  sleep 0.5
  vx_probe_off
  for n in a b ha hb; do ip netns del $p-$n 2>/dev/null || true; done
  rm -rf "$tmp"
}

vx_medians() { # ROWS N: per label (a row's first word) the median of each of its N figures
  python3 - "$1" "$2" <<'PY'
import statistics, sys
n = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append(f[1:])
for label, runs in rows.items():
    med = []
    for i in range(n):
        v = [float(r[i]) for r in runs if r[i].replace(".", "", 1).isdigit()]
        med.append("%.2f" % statistics.median(v) if v else "fail")
    print("%-16s" % label + "".join(" %8s" % m for m in med))
PY
}
