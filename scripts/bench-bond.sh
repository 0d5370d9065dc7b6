#!/usr/bin/env bash
# A 2-member bond between two qbridge daemons against a single link between them, with the
# eBPF fast path on and off, TCP through real kernel sockets, as paired samples (issue 31
# item 2, decision 74): all setups stay up at once and short iperf3 runs alternate between
# them, so a slow moment of this shared machine falls on all alike. Report: each setup's
# median and mean Gbit/s, and the median of the per-iteration ratios bond / single.
#
# Setups (hosts 10.78.0.1 -> 10.78.0.2, MTU 1500, offloads at their defaults, IPv6 off):
#   single-on   A = ha [Q1: br0] t1 = t2 [Q2: br0] hb = B, each daemon --fast-path on
#   bond-on     A = ha [Q1: br0, bo] m1,m2 = n1,n2 [Q2: bo, br0] hb = B: 802.3ad,
#               lacp_rate fast, xmit_hash_policy layer3+4 (4 streams spread over both
#               members, as the hash falls), --fast-path on
#   single-off, bond-off   the same with --fast-path off
#
# With FRAMES=64 each run is instead qbridge-blast's 60-byte UDP frames (one flow, unpaced,
# XDP live frames from hostA's veth) for SECS, and the figure is the frames/s delivered at
# hostB's eth0 (kfr/s): the per-frame cost of each path, the bond's hash and member choice
# included (one flow: the hash puts it on one member, as the pipeline's would).
#
# Usage (root):  scripts/bench-bond.sh      FRAMES=64 scripts/bench-bond.sh
# Environment:
#   FRAMES=       empty: TCP through iperf3; 64: 60-byte frames through qbridge-blast
#   N=6           iterations (each runs every setup once per stream count)
#   SECS=3        seconds per iperf3 run
#   STREAMS="4"
#   SETUPS="single-on bond-on single-off bond-off"
#   QB_BUILD=0    do not run cargo build --release -p qbridge
# Everything it creates (namespaces qbbb-PID-*, the daemons, iperf3 servers, the temp dir)
# is removed on exit, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
me=bench-bond.sh
[ "$(id -u)" = 0 ] || { echo "$me: needs root (network namespaces)" >&2; exit 1; }
n_iter=${N:-6}; secs=${SECS:-3}; streams=${STREAMS:-4}
setups=${SETUPS:-single-on bond-on single-off bond-off}
frames=${FRAMES:-}
case $frames in ''|64) ;; *) echo "$me: FRAMES must be empty or 64" >&2; exit 1 ;; esac
for c in iperf3 jq; do command -v $c >/dev/null || { echo "$me: $c missing" >&2; exit 1; }; done
qb=$PWD/target/release/qbridge
blast=$PWD/target/release/qbridge-blast
if [ "${QB_BUILD:-1}" != 0 ]; then
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge
    [ -z "$frames" ] || env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge-bench --bin qbridge-blast
fi
[ -x "$qb" ] || { echo "$me: $qb missing (build failed?)" >&2; exit 1; }
[ -z "$frames" ] || [ -x "$blast" ] || { echo "$me: $blast missing (build failed?)" >&2; exit 1; }
unit="Gbit/s"; [ -z "$frames" ] || unit="kfr/s"

p=qbbb-$$
tmp=$(mktemp -d /tmp/qbbb.XXXXXX)
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
veth() {  # veth NS_A IF_A NS_B IF_B
    ip link add "$2" netns "$p-$1" type veth peer name "$4" netns "$p-$3"
    ip -n "$p-$1" link set "$2" up; ip -n "$p-$3" link set "$4" up
}
bridge_batch() {  # bridge_batch HOSTPORT LINK... : br0 with the host's port and the link side
    local host=$1; shift
    printf 'link add br0 type bridge\nlink add %s type afpacket dev %s\nlink set dev %s master br0\n' "$host" "$host" "$host"
    if [ $# = 1 ]; then
        printf 'link add %s type afpacket dev %s\nlink set dev %s master br0\n' "$1" "$1" "$1"
    else
        echo "link add bo type bond mode 802.3ad lacp_rate fast xmit_hash_policy layer3+4 miimon 20"
        for m in "$@"; do printf 'link add %s type afpacket dev %s\nlink set dev %s master bo\n' "$m" "$m" "$m"; done
        echo "link set dev bo master br0"
    fi
}
start() {  # start SETUP SIDE BATCH FASTPATH
    echo "$3" >"$tmp/$1-$2.batch"
    QBRIDGE_LOG=warn ip netns exec "$p-$1-$2" "$qb" daemon -batch "$tmp/$1-$2.batch" \
        --socket "$tmp/$1-$2.sock" --fast-path "$4" --workers 2 2>"$tmp/$1-$2.log" &
    pids+=($!)
}
for s in $setups; do
    fpm=${s#*-}
    mkns "$s-a"; mkns "$s-b"; mkns "$s-q1"; mkns "$s-q2"
    veth "$s-a" eth0 "$s-q1" ha
    # XDP-sent frames (FRAMES=64) need NAPI on the receiving end of the veth.
    ip netns exec "$p-$s-q1" ethtool -K ha gro on >/dev/null
    veth "$s-b" eth0 "$s-q2" hb
    case $s in
    single-*)
        veth "$s-q1" t1 "$s-q2" t2
        start "$s" q1 "$(bridge_batch ha t1)" "$fpm"
        start "$s" q2 "$(bridge_batch hb t2)" "$fpm" ;;
    bond-*)
        veth "$s-q1" m1 "$s-q2" n1
        veth "$s-q1" m2 "$s-q2" n2
        start "$s" q1 "$(bridge_batch ha m1 m2)" "$fpm"
        start "$s" q2 "$(bridge_batch hb n1 n2)" "$fpm" ;;
    esac
    ip -n "$p-$s-a" addr add 10.78.0.1/24 dev eth0; ip -n "$p-$s-b" addr add 10.78.0.2/24 dev eth0
    ip netns exec "$p-$s-b" iperf3 -s >/dev/null 2>&1 &
    pids+=($!)
done
for s in $setups; do
    for side in q1 q2; do
        for _ in $(seq 200); do [ -S "$tmp/$s-$side.sock" ] && break; sleep 0.05; done
        [ -S "$tmp/$s-$side.sock" ] || { echo "$me: $s $side did not start:" >&2; cat "$tmp/$s-$side.log" >&2; exit 1; }
    done
done
# LACP: both members collecting and distributing on both ends (fast PDUs: a few seconds).
for s in $setups; do
    case $s in bond-*) ;; *) continue ;; esac
    for side in q1 q2; do
        ok=0
        for _ in $(seq 150); do
            n=$("$qb" --socket "$tmp/$s-$side.sock" -j link show dev bo 2>/dev/null |
                jq '[.[0].bond.members[] | select(.collecting == "On" and .distributing == "On")] | length' 2>/dev/null || echo 0)
            [ "$n" = 2 ] && { ok=1; break; }
            sleep 0.2
        done
        [ $ok = 1 ] || { echo "$me: $s $side: LACP did not converge" >&2; exit 1; }
    done
done
for s in $setups; do
    ip netns exec "$p-$s-a" ping -n -q -c 3 -i 0.1 -W 1 10.78.0.2 >/dev/null ||
        { echo "$me: $s: hostA cannot reach hostB" >&2; exit 1; }
done

# 60-byte frames: one run, delivered kfr/s at hostB (the sender's own count is what it offered).
blast_run() {  # blast_run SETUP
    local mac a b t0 t1
    mac=$(ip -n "$p-$1-b" -j link show dev eth0 | jq -r '.[0].address')
    a=$(ip netns exec "$p-$1-b" cat /sys/class/net/eth0/statistics/rx_packets); t0=$(date +%s.%N)
    ip netns exec "$p-$1-a" "$blast" --dev eth0 --dst-mac "$mac" --src-ip 10.78.0.1 --dst-ip 10.78.0.2 \
        --seconds "$secs" >/dev/null 2>&1 || true
    sleep 0.2
    b=$(ip netns exec "$p-$1-b" cat /sys/class/net/eth0/statistics/rx_packets); t1=$(date +%s.%N)
    python3 -c "print(round(($b - $a) / ($t1 - $t0 - 0.2) / 1e3, 1))"
}
[ -z "$frames" ] || streams=1
res=$tmp/res   # STREAMS ITER SETUP FIGURE
t_start=$(date +%s)
for i in $(seq "$n_iter"); do
    for k in $streams; do
        line="iteration $i, $k stream(s):"
        [ -z "$frames" ] || line="iteration $i, 60-byte frames:"
        for s in $setups; do
            if [ -n "$frames" ]; then g=$(blast_run "$s"); else
            g=$(ip netns exec "$p-$s-a" iperf3 -c 10.78.0.2 -t "$secs" -P "$k" -J 2>/dev/null |
                jq '.end.sum_received.bits_per_second / 1e9' 2>/dev/null || echo 0); fi
            echo "$k $i $s $g" >>"$res"
            line+=" $s $(printf '%.2f' "$g")"
        done
        echo "$line" >&2
    done
done
# What the fast path did on the bond setup's daemons, and how the members shared the bytes.
fp_line() {
    "$qb" --socket "$tmp/$1.sock" -j show fast-path 2>/dev/null |
        jq -r '"\(.state): flows \(.flows) hits \(.hits) installed \(.installed) misses bond \(.misses.bond // 0)"' 2>/dev/null || echo "?"
}
median() { sort -g | awk '{ x[n++] = $1 } END { if (!n) print "-"; else if (n % 2) printf "%.2f\n", x[(n-1)/2]; else printf "%.2f\n", (x[n/2-1] + x[n/2]) / 2 }'; }
mean() { awk '{ s += $1; n++ } END { if (n) printf "%.2f\n", s / n; else print "-" }'; }
{
    echo "qbridge bench-bond, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, kernel $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "N=$n_iter SECS=$secs; two qbridge daemons per setup (--workers 2); $(( $(date +%s) - t_start )) s"
    echo
    printf '%-8s %-11s %12s %10s %22s\n' streams setup "median $unit" "mean" "x single, same mode"
    for k in $streams; do
        for s in $setups; do
            med=$(awk -v k="$k" -v s="$s" '$1 == k && $3 == s { print $4 }' "$res" | median)
            avg=$(awk -v k="$k" -v s="$s" '$1 == k && $3 == s { print $4 }' "$res" | mean)
            ratio=""
            case $s in bond-*)
                single=single-${s#*-}
                ratio=$(awk -v k="$k" -v s="$s" -v b="$single" '$1 == k && $3 == b { x[$2] = $4 }
                    $1 == k && $3 == s { y[$2] = $4 } END { for (i in y) if (x[i] > 0) print y[i] / x[i] }' "$res" | median)
                ratio="$ratio (median of pairs)" ;;
            esac
            printf '%-8s %-11s %12s %10s %22s\n' "$k" "$s" "$med" "$avg" "$ratio"
        done
    done
    echo
    for s in $setups; do
        case $s in bond-*)
            echo "$s: q1 $(fp_line "$s-q1"); q2 $(fp_line "$s-q2")"
            echo "$s: q1 member tx bytes m1 $(ip netns exec "$p-$s-q1" cat /sys/class/net/m1/statistics/tx_bytes) m2 $(ip netns exec "$p-$s-q1" cat /sys/class/net/m2/statistics/tx_bytes)" ;;
        esac
    done
}
