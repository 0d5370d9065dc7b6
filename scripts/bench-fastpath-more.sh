#!/usr/bin/env bash
# The fast path where decisions 75 and 80 let it serve (issue 31 item 3), fast path on against off,
# live: hosts a, b, c, d (namespaces, veths) on one qbridge bridge, access ports of VLAN 10;
# the measured traffic is always a -> b.
#
#   plain    the bridge as it is (the reference row)
#   locked   pa locked on, a static FDB entry for a's MAC on pa
#   mirror   a session copying what pd sends to pc (mirror add m0 src pd direction tx dst pc):
#            a -> b is not copied and keeps its flows beside it
#   mirrored a session copying pb both ways to pc (mirror add m0 src pb direction both dst pc):
#            a -> b is copied to pc; since decision 80 the program clones the copies (before:
#            the pipeline either way)
#   mstp     stp_state 1, stp_mode mstp, VLAN 10 in MSTI 1, pa and pb edge ports
#
# Per scenario and mode: iperf3 TCP, 1 stream, SECS s (receiver's Gbit/s), and UDP with 18-byte
# payloads at full speed (-b 0: 64-byte frames; delivered kpps). The modes alternate within
# each repetition (on, off, on, off, ...), REPS repetitions; medians printed. The machine is
# shared: read ratios of one run, not absolute rates.
#
# Usage (root): scripts/bench-fastpath-more.sh   SECS=3 REPS=3 (defaults)   QB_BUILD=0: no build
# Namespaces qbfm-PID-*; everything is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SECS:-3}
reps=${REPS:-3}
scenarios=${SCENARIOS:-plain locked mirror mirrored mstp}
qb=target/release/qbridge
if [ "${QB_BUILD:-1}" != 0 ]; then
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge
fi
p=qbfm-$$
tmp=$(mktemp -d)
cleanup() {
    [ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    for n in a b c d sw; do ip netns del "$p-$n" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
ip netns add "$p-sw"
i=1
for n in a b c d; do
    ip netns add "$p-$n"
    ip -n "$p-$n" link set lo up
    ip link add eth0 netns "$p-$n" type veth peer name v$n netns "$p-sw"
    ip -n "$p-$n" addr add 10.78.0.$i/24 dev eth0
    ip netns exec "$p-$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip -n "$p-$n" link set eth0 up
    ip -n "$p-sw" link set v$n up
    i=$((i + 1))
done
amac=$(ip -n "$p-a" -br link show eth0 | awk '{print $3}')
q() { "$qb" --socket "$tmp/s.sock" "$@"; }
batch() {
    local extra=
    [ "$1" = mstp ] && extra=" stp_mode mstp mst_name fm"
    echo "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0$extra"
    for n in a b c d; do
        echo "link add p$n type afpacket dev v$n"
        echo "link set dev p$n master br0"
        echo "vlan add vid 10 dev p$n pvid untagged"
    done
    case $1 in
    locked) echo "link set dev pa locked on"; echo "fdb add $amac dev pa vlan 10 static" ;;
    mirror) echo "mirror add m0 src pd direction tx dst pc" ;;
    mirrored) echo "mirror add m0 src pb direction both dst pc" ;;
    mstp)
        echo "stp msti set dev br0 vid 10 msti 1"
        echo "link set dev pa edge on"; echo "link set dev pb edge on"
        echo "link set dev br0 type bridge stp_state 1" ;;
    esac
}
start() {
    batch "$1" > "$tmp/b.batch"
    ip netns exec "$p-sw" "$qb" daemon -batch "$tmp/b.batch" --socket "$tmp/s.sock" --workers 2 --fast-path "$2" 2>"$tmp/d.log" &
    dpid=$!
    for _ in $(seq 50); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
    # Edge ports forward at once; the others (mstp) after the tree settles.
    for _ in $(seq 50); do ip netns exec "$p-a" ping -c 1 -W 0.2 -q 10.78.0.2 >/dev/null 2>&1 && break; done
}
stop() { kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=; }
tcp() {
    ip netns exec "$p-b" iperf3 -s -1 -D -p 5201 >/dev/null; sleep 0.2
    ip netns exec "$p-a" iperf3 -c 10.78.0.2 -p 5201 -t "$secs" -J | python3 -c \
        'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}
udp() {
    ip netns exec "$p-b" iperf3 -s -1 -D -p 5202 >/dev/null; sleep 0.2
    ip netns exec "$p-a" iperf3 -u -b 0 -l 18 -c 10.78.0.2 -p 5202 -t "$secs" -J | python3 -c \
        'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; print("%.0f" % ((s["packets"]-s["lost_packets"])/s["seconds"]/1e3))'
}
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A res
fpinfo=
for s in $scenarios; do
    for r in $(seq "$reps"); do
        for m in on off; do
            start "$s" "$m"
            c0=$(ip netns exec "$p-c" cat /sys/class/net/eth0/statistics/rx_packets)
            res[$s,$m,tcp]+="$(tcp) "
            res[$s,$m,udp]+="$(udp) "
            if [ "$m" = on ]; then
                fpinfo="$(q -j show fast-path | python3 -c 'import json,sys; v=json.load(sys.stdin); print("flows %d hits %d not_cached %s" % (v["flows"], v["hits"], {k:n for k,n in v["not_cached"].items() if n}))')"
                # A session's copies (decision 80: cloned by the program on hits) against
                # what pc's host received.
                case $s in mirror | mirrored)
                    fpinfo+="; m0 copies $(q -j -s mirror show m0 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats"]["frames"])')"
                    fpinfo+=", c received $(($(ip netns exec "$p-c" cat /sys/class/net/eth0/statistics/rx_packets) - c0))" ;;
                esac
            fi
            stop
        done
    done
    res[$s,info]=$fpinfo
done
printf '%-9s %-22s %-22s %-9s %-22s %-22s %-9s  %s\n' scenario "TCP1 on (Gbit/s)" "TCP1 off" "on/off" "64B on (kpps)" "64B off" "on/off" "fast path (last on run)"
for s in $scenarios; do
    ton=$(echo ${res[$s,on,tcp]} | tr ' ' '\n' | med); toff=$(echo ${res[$s,off,tcp]} | tr ' ' '\n' | med)
    uon=$(echo ${res[$s,on,udp]} | tr ' ' '\n' | med); uoff=$(echo ${res[$s,off,udp]} | tr ' ' '\n' | med)
    printf '%-9s %-22s %-22s %-9s %-22s %-22s %-9s  %s\n' "$s" "$ton [${res[$s,on,tcp]% }]" "$toff [${res[$s,off,tcp]% }]" \
        "$(python3 -c "print('%.2f' % ($ton/$toff))")" "$uon [${res[$s,on,udp]% }]" "$uoff [${res[$s,off,udp]% }]" \
        "$(python3 -c "print('%.2f' % ($uon/$uoff))")" "${res[$s,info]}"
done
