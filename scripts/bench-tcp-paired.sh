#!/usr/bin/env bash
# TCP through qbridge's fast path beside the kernel bridge, a bare veth pair and a switch with
# no logic at all (a tc redirect), as paired samples: all four setups stay up at once and short
# iperf3 runs alternate between them, so a slow moment of the machine falls on all four alike.
# bench-live.sh builds one setup at a time and its rounds are minutes apart; on this 2-CPU VM
# one TCP run swings by 15-30 % from one minute to the next, more than the differences to be
# measured. Here each iteration runs the setups back to back, and the report gives each
# setup's mean with a 95 % confidence interval and the mean of the per-iteration ratios to the
# kernel bridge, with its interval, and the CPUs' idle share during the runs (with how
# closely the throughput follows it: on this VM the slow runs are the ones where both CPUs
# wait, not the ones where the switch works more).
#
# Setups (four pairs of namespaces, hosts 10.77.0.1 -> 10.77.0.2, MTU 1500, offloads at
# their defaults, IPv6 off):
#   veth     hostA eth0 = hostB eth0, one veth pair (the ceiling of any switch between veths)
#   kbridge  the Linux bridge (ip link add br0 type bridge), ports s1 s2
#   redirect s1 and s2 joined by tc alone (clsact ingress, u32 match-all, mirred egress
#            redirect to the other): a switch that decides nothing, between two veth pairs
#   qb       qbridge daemon --fast-path on: scripts/plain-bridge.batch, one 802.1Q bridge,
#            AF_PACKET ports p1 (dev s1) and p2 (dev s2)
#
# Usage (root):  scripts/bench-tcp-paired.sh
# Environment:
#   N=20          iterations (each runs the four setups once per stream count)
#   SECS=3        seconds per iperf3 run
#   STREAMS="1 4 16"
#   AFFINITY=0,1  iperf3 -A: client on CPU 0, server on CPU 1 (empty: no pinning); 0,0 puts
#                 both on CPU 0, which then never waits: the figure is each path's cost per
#                 byte, not its luck with wakeups between CPUs (docs/benchmarks-live.md)
#   QB_ARGS="--fast-path on --workers 2"   the daemon's arguments
#   QB_BUILD=0    do not run cargo build --release -p qbridge
# Installs iperf3 and jq when missing. Everything it creates (namespaces qbtp-PID-*, the
# daemon, iperf3 servers, the temp dir) is removed on exit, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
me=bench-tcp-paired.sh
[ "$(id -u)" = 0 ] || { echo "$me: needs root (network namespaces)" >&2; exit 1; }
n_iter=${N:-20}; secs=${SECS:-3}; streams=${STREAMS:-1 4 16}; aff=${AFFINITY-0,1}
qb_args=${QB_ARGS:---fast-path on --workers 2}
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v jq >/dev/null || need+=(jq)
if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
qb=$PWD/target/release/qbridge
if [ "${QB_BUILD:-1}" != 0 ]; then env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge; fi
[ -x "$qb" ] || { echo "$me: $qb missing (build failed?)" >&2; exit 1; }

p=qbtp-$$
tmp=$(mktemp -d /tmp/qbtp.XXXXXX)
pids=()
cleanup() {
    local pid ns
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in $(ip netns list | awk -v p="$p-" 'index($1, p) == 1 { print $1 }'); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkns() {
    ip netns add "$p-$1"
    ip -n "$p-$1" link set lo up
    ip netns exec "$p-$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}
setups="veth kbridge redirect qb"
for s in $setups; do mkns "$s-a"; mkns "$s-b"; done
mkns kbridge-sw; mkns redirect-sw; mkns qb-sw
ip link add eth0 netns "$p-veth-a" type veth peer name eth0 netns "$p-veth-b"
for s in kbridge redirect qb; do
    ip link add eth0 netns "$p-$s-a" type veth peer name s1 netns "$p-$s-sw"
    ip link add eth0 netns "$p-$s-b" type veth peer name s2 netns "$p-$s-sw"
    ip -n "$p-$s-sw" link set s1 up; ip -n "$p-$s-sw" link set s2 up
done
ip -n "$p-kbridge-sw" link add br0 type bridge
ip -n "$p-kbridge-sw" link set s1 master br0; ip -n "$p-kbridge-sw" link set s2 master br0
ip -n "$p-kbridge-sw" link set br0 up
for l in "s1 s2" "s2 s1"; do
    set -- $l
    ip netns exec "$p-redirect-sw" tc qdisc add dev "$1" clsact
    ip netns exec "$p-redirect-sw" tc filter add dev "$1" ingress protocol all u32 match u32 0 0 action mirred egress redirect dev "$2"
done
for s in $setups; do
    ip -n "$p-$s-a" link set eth0 up; ip -n "$p-$s-b" link set eth0 up
    ip -n "$p-$s-a" addr add 10.77.0.1/24 dev eth0; ip -n "$p-$s-b" addr add 10.77.0.2/24 dev eth0
    ip netns exec "$p-$s-b" iperf3 -s >/dev/null 2>&1 &
    pids+=($!)
done
# shellcheck disable=SC2086  # the daemon's arguments are a word list
QBRIDGE_LOG=warn ip netns exec "$p-qb-sw" "$qb" daemon -batch scripts/plain-bridge.batch \
    --socket "$tmp/qb.sock" $qb_args 2>"$tmp/qb.log" &
pids+=($!)
for _ in $(seq 200); do [ -S "$tmp/qb.sock" ] && break; sleep 0.05; done
[ -S "$tmp/qb.sock" ] || { echo "$me: the daemon did not start:" >&2; cat "$tmp/qb.log" >&2; exit 1; }
sleep 0.5
for s in $setups; do
    ip netns exec "$p-$s-a" ping -n -q -c 3 -i 0.1 -W 1 10.77.0.2 >/dev/null ||
        { echo "$me: $s: hostA cannot reach hostB" >&2; exit 1; }
done

res=$tmp/res   # STREAMS ITER SETUP GBIT IDLE%
# busy and idle ticks of all CPUs (/proc/stat: user nice system idle iowait irq softirq steal)
ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
t_start=$(date +%s)
for i in $(seq "$n_iter"); do
    for k in $streams; do
        line="iteration $i, $k stream(s):"
        for s in $setups; do
            read -r b0 i0 < <(ticks)
            # shellcheck disable=SC2086  # -A x,y or nothing
            g=$(ip netns exec "$p-$s-a" iperf3 -c 10.77.0.2 -t "$secs" -P "$k" ${aff:+-A $aff} -J 2>/dev/null |
                jq '.end.sum_received.bits_per_second / 1e9' 2>/dev/null || echo 0)
            read -r b1 i1 < <(ticks)
            idle=$(awk -v b=$((b1 - b0)) -v i=$((i1 - i0)) 'BEGIN { printf "%.1f", (b + i > 0) ? 100 * i / (b + i) : 0 }')
            echo "$k $i $s $g $idle" >>"$res"
            line+=" $s $(printf '%.2f' "$g") (idle $idle %)"
        done
        echo "$line" >&2
    done
done

# mean and 95 % interval (Student's t, two-sided) of a column of numbers; "-" for one sample
stats() {
    awk '{ x[n++] = $1; s += $1 } END {
        if (n == 0) { print "- -"; exit }
        m = s / n; for (i = 0; i < n; i++) v += (x[i] - m) ^ 2
        sd = (n > 1) ? sqrt(v / (n - 1)) : 0
        # t quantiles 0.975 for n-1 degrees of freedom (1..30), then 1.96
        split("12.71 4.30 3.18 2.78 2.57 2.45 2.36 2.31 2.26 2.23 2.20 2.18 2.16 2.14 2.13 2.12 2.11 2.10 2.09 2.09 2.08 2.07 2.07 2.06 2.06 2.06 2.05 2.05 2.05 2.04", t, " ")
        q = (n - 1 <= 30 && n > 1) ? t[n - 1] : 1.96
        if (n < 2) printf "%.2f -\n", m; else printf "%.2f %.2f\n", m, q * sd / sqrt(n) }'
}
{
    echo "qbridge bench-tcp-paired, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, kernel $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "N=$n_iter SECS=$secs AFFINITY=${aff:-none}; qbridge daemon $qb_args; $(( $(date +%s) - t_start )) s"
    echo
    printf '%-8s %-9s %16s %22s %8s\n' streams setup "Gbit/s (95 % CI)" "x kbridge (95 % CI)" "idle %"
    for k in $streams; do
        for s in $setups; do
            read -r m c < <(awk -v k="$k" -v s="$s" '$1 == k && $3 == s { print $4 }' "$res" | stats)
            idle=$(awk -v k="$k" -v s="$s" '$1 == k && $3 == s { t += $5; n++ } END { printf "%.1f", n ? t / n : 0 }' "$res")
            if [ "$s" = kbridge ]; then
                printf '%-8s %-9s %9s ± %-5s %22s %8s\n' "$k" "$s" "$m" "$c" "" "$idle"
            else
                read -r rm rc < <(awk -v k="$k" -v s="$s" '$1 == k && $3 == "kbridge" { b[$2] = $4 }
                    $1 == k && $3 == s { x[$2] = $4 } END { for (i in x) if (b[i] > 0) print x[i] / b[i] }' "$res" | stats)
                printf '%-8s %-9s %9s ± %-5s %14s ± %-5s %8s\n' "$k" "$s" "$m" "$c" "$rm" "$rc" "$idle"
            fi
        done
    done
    echo
    echo "x kbridge: the mean of the per-iteration ratios (each iteration runs the setups"
    echo "back to back), with its 95 % confidence interval. idle %: the CPUs' idle share"
    echo "during the runs (/proc/stat, all CPUs), the mean over the iterations."
    # Whether the runs were bound by the CPUs: the correlation of Gbit/s with idle, per
    # stream count over every run of every setup (near -1: the slow runs are the idle ones).
    for k in $streams; do
        awk -v k="$k" '$1 == k { n++; x += $4; y += $5; xx += $4 * $4; yy += $5 * $5; xy += $4 * $5 }
            END { d = sqrt((n * xx - x * x) * (n * yy - y * y))
                  if (n > 2 && d > 0) printf "%s stream(s): Gbit/s against idle %%, Pearson r = %.2f over %d runs\n", k, (n * xy - x * y) / d, n }' "$res"
    done
}
