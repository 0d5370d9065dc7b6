#!/usr/bin/env bash
# The seeds' VLAN experiment, live (issue 31 item 4; FreeBSD's VLAN_ARRAY thread: a hashed VLAN
# lookup fell from 440 to 278 kpps as VLANs grew to 506, an array stayed at 440): hostA sends
# 60-byte 802.1Q frames (qbridge-blast, the kernel's XDP live frames, decision 63) through a
# switch with N VLANs on two trunk ports to hostB, either all on VLAN 1 ("one") or each frame
# on the next of the N VLANs ("spread"), one destination MAC per VLAN (02:bb:00:00:VID),
# a static FDB entry on the far port for each. Prints delivered frames/s (hostB's rx counter)
# and ns per frame for:
#   qb-on    qbridge --fast-path on (the program forwards; the source learned on the first frames)
#   qb-off   qbridge --fast-path off (the pipeline)
#   kbridge  the kernel bridge. This kernel has no VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING
#            unset), so it forwards the tagged frames as opaque and looks up the destination
#            MAC alone: its row is "one FDB entry per VLAN's destination", no per-VLAN state.
# The unpaced sender outruns every switch here; the forwarding runs on the sending CPU (veth
# NAPI), so delivered frames/s is each path's cost per frame.
#
# Each setup's line is followed by every round's own ratio, sorted (the machine's noise).
# Usage (root): scripts/bench-vlans.sh     VLANS="2 506 4093" SECS=3 ROUNDS=3
#   SETUPS="qb-on qb-off kbridge"   ORDER=random (the spread frames' VLANs drawn at random,
#   not 1, 2, 3…; qbridge-blast --random-vlans)   MACS=0 (extra static FDB entries, spread over the VLANs,
#   e.g. MACS=1000000)   QB_BUILD=0: no cargo build   QB_BIN=PATH: another qbridge binary
#   (an older build, to compare)   QB_BLAST=PATH: its qbridge-blast   DEBUG=1: qbridge's port counters and log after each setup
#   PERF=DIR: a cpu-clock profile of both CPUs during each run (perf record -a), into DIR
#   (`perf report -i FILE --sort sym`). Each setup's line is followed by the daemon's CPU
#   share during each run and its threads' CPU ticks before and after.
# Namespaces qbvl-PID-*; everything is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
vlans_list=${VLANS:-2 506 4093}
secs=${SECS:-3}
rounds=${ROUNDS:-3}
setups=${SETUPS:-qb-on qb-off kbridge}
macs=${MACS:-0}
[ "$(id -u)" = 0 ] || { echo "$0: needs root" >&2; exit 1; }
if [ "${QB_BUILD:-1}" != 0 ]; then
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge
    env -u CARGO_TARGET_DIR cargo build --quiet --release -p qbridge-bench --bin qbridge-blast
fi
qb=${QB_BIN:-$PWD/target/release/qbridge}
blast=${QB_BLAST:-$PWD/target/release/qbridge-blast}
p=qbvl-$$
tmp=$(mktemp -d)
dpid=
cleanup() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    for n in a b sw; do ip netns del "$p-$n" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
net() {
    local n
    for n in a b sw; do ip netns add "$p-$n"; ip -n "$p-$n" link set lo up; done
    ip link add eth0 netns "$p-a" type veth peer name s1 netns "$p-sw"
    ip link add eth0 netns "$p-b" type veth peer name s2 netns "$p-sw"
    for n in a b; do ip -n "$p-$n" link set eth0 up; done
    ip -n "$p-sw" link set s1 up; ip -n "$p-sw" link set s2 up
    # XDP-sent frames need NAPI on the receiving end of the veth.
    ip netns exec "$p-sw" ethtool -K s1 gro on >/dev/null
}
unnet() { local n; for n in a b sw; do ip netns del "$p-$n" 2>/dev/null || true; done; }
# The FDB lines of a batch: one destination per VLAN (02:bb:00:00:VID), then MACS others
# (02:cc:I) spread over the VLANs; awk, as a million lines of shell take minutes.
fdb_lines() {  # fdb_lines N DEV SUFFIX-with-%d-for-the-VLAN (empty: none)
    awk -v n="$1" -v m="$macs" -v dev="$2" -v sfx="$3" 'BEGIN {
        for (v = 1; v <= n; v++)
            printf "fdb add 02:bb:00:00:%02x:%02x dev %s master static" (sfx == "" ? "" : " " sfx) "\n", int(v / 256), v % 256, dev, v
        for (i = 1; i <= m; i++)
            printf "fdb add 02:cc:%02x:%02x:%02x:%02x dev %s master static" (sfx == "" ? "" : " " sfx) "\n", int(i / 16777216) % 256, int(i / 65536) % 256, int(i / 256) % 256, i % 256, dev, i % n + 1
    }'
}
start() {  # start SETUP N
    local setup=$1 n=$2
    case $setup in
    qb-*)
        {
            echo "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0"
            echo "link add pa type afpacket dev s1"
            echo "link add pb type afpacket dev s2"
            echo "link set dev pa master br0"
            echo "link set dev pb master br0"
            echo "vlan add vid 1-$n dev pa"
            echo "vlan add vid 1-$n dev pb"
            fdb_lines "$n" pb "vlan %d"
            echo "link set dev pa up"
            echo "link set dev pb up"
        } >"$tmp/b.batch"
        ip netns exec "$p-sw" "$qb" daemon -batch "$tmp/b.batch" --socket "$tmp/s.sock" \
            --workers 2 --fast-path "${setup#qb-}" 2>"$tmp/d.log" &
        dpid=$!
        # (A million FDB entries take the daemon a while to read.)
        for _ in $(seq 6000); do [ -S "$tmp/s.sock" ] && "$qb" --socket "$tmp/s.sock" show fast-path >/dev/null 2>&1 && break; sleep 0.1; done
        ;;
    kbridge)
        ip -n "$p-sw" link add br0 type bridge
        ip -n "$p-sw" link set s1 master br0
        ip -n "$p-sw" link set s2 master br0
        ip -n "$p-sw" link set br0 up
        fdb_lines "$n" s2 "" >"$tmp/k.batch"
        ip netns exec "$p-sw" bridge -batch "$tmp/k.batch"
        ;;
    esac
}
stop() {
    if [ -n "$dpid" ]; then kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=; fi
    rm -f "$tmp/s.sock"
}
rx() { ip netns exec "$p-b" cat /sys/class/net/eth0/statistics/rx_packets; }
# The daemon's CPU time so far (user + system, clock ticks, all its threads); 0 without one.
dcpu() { [ -n "$dpid" ] && awk '{print $14 + $15}' "/proc/$dpid/stat" 2>/dev/null || echo 0; }
# Its threads' CPU ticks by name (comm), summed, busiest first: "name=ticks ...".
dthreads() {
    [ -n "$dpid" ] || return 0
    for t in /proc/"$dpid"/task/*; do
        printf '%s %s\n' "$(tr ' ' _ <"$t/comm")" "$(awk '{print $14 + $15}' "$t/stat")"
    done 2>/dev/null | awk '{a[$1] += $2} END {for (k in a) print a[k], k}' | sort -rn |
        awk '{printf "%s=%s ", $2, $1}'
}
send() {  # send VLANS SECONDS [RATE]
    local order=
    [ "${ORDER:-}" = random ] && [ "$1" -gt 1 ] && order=--random-vlans
    ip netns exec "$p-a" "$blast" --dev eth0 --dst-mac 02:bb:00:00:00:00 --vlans "$1" --vid 1 \
        --seconds "$2" --rate "${3:-0}" $order >/dev/null
}
rate() {  # rate VLANS: delivered frames/s over SECS; the daemon's CPU share to $tmp/cpu
    local a b t0 t1 c0 c1
    local pp=
    if [ -n "${PERF:-}" ]; then  # a profile of both CPUs while the frames run
        mkdir -p "$PERF"
        perf record -a -e cpu-clock -F 999 -o "$PERF/$setup-$n-$macs-$1-$(date +%s%N).data" \
            -- sleep "$secs" >/dev/null 2>&1 &
        pp=$!
    fi
    a=$(rx); t0=$(date +%s.%N); c0=$(dcpu)
    send "$1" "$secs"
    [ -n "$pp" ] && wait "$pp"
    sleep 0.2
    b=$(rx); t1=$(date +%s.%N); c1=$(dcpu)
    python3 -c "print(round(100 * ($c1 - $c0) / $(getconf CLK_TCK) / ($t1 - $t0)))" >>"$tmp/cpu"
    python3 -c "print(round(($b - $a) / ($t1 - $t0 - 0.2)))"
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '%-8s %6s %9s   %12s %12s   %8s %8s   %6s\n' setup vlans "fdb macs" "one kfr/s" "spread kfr/s" "one ns" "spread ns" ratio
for n in $vlans_list; do
    for setup in $setups; do
        net
        start "$setup" "$n"
        # Warm up: every VLAN's first frames go up, the source is learned, flows installed.
        send "$n" 2 20000
        send 1 1 20000
        ones=; spreads=; : >"$tmp/cpu"; th0=$(dthreads)
        for _ in $(seq "$rounds"); do
            ones="$ones $(rate 1)"
            spreads="$spreads $(rate "$n")"
        done
        o=$(echo "$ones" | median); s=$(echo "$spreads" | median)
        # Each round's own ratio (its spread run over the one-VLAN run just before it): the
        # spread of these is the machine's noise, which the medians above hide.
        pairs=$(python3 -c "
o, s = '$ones'.split(), '$spreads'.split()
r = sorted(int(b) / max(int(a), 1) for a, b in zip(o, s))
print(' '.join('%.2f' % x for x in r))")
        python3 -c "
o, s = $o, $s
print(f'%-8s %6d %9d   %12.0f %12.0f   %8.0f %8.0f   %6.2f' % ('$setup', $n, $macs, o / 1e3, s / 1e3, 1e9 / max(o, 1), 1e9 / max(s, 1), s / max(o, 1)))"
        echo "           each round's spread / one, sorted: $pairs"
        # The daemon's CPU while the frames ran (% of one core, each run), and its threads'.
        [ -n "$dpid" ] && echo "           daemon cpu % per run: $(tr '\n' ' ' <"$tmp/cpu"); threads' ticks before: $th0; after: $(dthreads)"
        [ "$setup" = qb-on ] && "$qb" --socket "$tmp/s.sock" show fast-path | sed -n '3,4p' >"$tmp/fp.txt" && sed 's/^/           /' "$tmp/fp.txt"
        [ -n "${DEBUG:-}" ] && [ -n "$dpid" ] && { "$qb" --socket "$tmp/s.sock" -s link show; "$qb" --socket "$tmp/s.sock" fdb show | head; tail -5 "$tmp/d.log"; }
        stop
        unnet
    done
done
echo "(delivered frames/s at hostB, medians of $rounds runs of $secs s, one and spread interleaved; ratio = spread / one)"
