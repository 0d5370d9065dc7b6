#!/usr/bin/env bash
# Spanning-tree convergence and failover, side by side (issue 19). As root.
#
# The same triangle for each switch: bridges S1 (priority 4096, the root), S2 (8192) and S3
# (32768) joined by veth pairs S1-S2, S2-S3, S3-S1, host h1 behind S1 and h3 behind S3,
# hello 1 s, forward delay 4 s, max age 6 s everywhere. Measured:
#   converge  seconds from starting the switches until h1 first pings h3 (the loop broken)
#   failover  pings lost (h1 -> h3 every 10 ms) when S1's end of the active link S1-S3 goes
#             down: the loss window in ms is that number x 10
# Switches:
#   qbridge   three `qbridge daemon`s (one per namespace, AF_PACKET ports, stp_state 1, RSTP)
#   ovs       Open vSwitch's userspace datapath, three netdev bridges with rstp_enable=true in
#             one ovs-vswitchd (the triangle's veths all in its namespace)
#   kernel    three Linux bridges at stp_state 1 (the kernel's 802.1D: no RSTP)
# Usage: scripts/bench-stp.sh [ROUNDS] [SWITCHES...]   (default: 3 rounds of qbridge ovs kernel)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
shift || true
SWITCHES=${*:-qbridge ovs kernel}
[ "$(id -u)" = 0 ] || { echo "bench-stp.sh: run as root (network namespaces)" >&2; exit 1; }
cargo build --release --locked -p qbridge >&2
QB=$PWD/target/release/qbridge
P=qbs$$
D=/tmp/$P
mkdir -p "$D"
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "${OVSDIR:-}" ] && [ -e "$OVSDIR/vsd.ctl" ]; then
        OVS_RUNDIR=$OVSDIR ovs-appctl -t "$OVSDIR/vsd.ctl" exit 2>/dev/null || true
        OVS_RUNDIR=$OVSDIR ovs-appctl -t "$OVSDIR/db.ctl" exit 2>/dev/null || true
    fi
    sleep 0.3
    for ns in $(ip netns list | awk '{print $1}' | grep "^$P-" || true); do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$D"/ovs-* "$D"/*.sock
    PIDS=()
}
trap 'cleanup; for ns in $(ip netns list | awk "{print \$1}" | grep "^qbs$$" || true); do ip netns del "$ns" 2>/dev/null || true; done; rm -rf "$D"' EXIT

# Namespaces and veths. $1: "one" puts S1-S3 in one namespace (OVS), else one each.
topology() {
    local sw1=$P-s1 sw2=$P-s2 sw3=$P-s3
    if [ "$1" = one ]; then sw2=$P-s1; sw3=$P-s1; fi
    for ns in $P-s1 $sw2 $sw3 $P-h1 $P-h3; do
        ip netns list | grep -q "^$ns\b" || { ip netns add "$ns"; ip -n "$ns" link set lo up; }
    done
    # S1.b - S2.a, S2.b - S3.a, S3.b - S1.a; host veths S1.h1, S3.h3.
    ip -n $P-s1 link add s1b type veth peer name s2a netns $sw2
    ip -n $sw2 link add s2b type veth peer name s3a netns $sw3
    ip -n $sw3 link add s3b type veth peer name s1a netns $P-s1
    ip -n $P-h1 link add eth0 type veth peer name s1h netns $P-s1
    ip -n $P-h3 link add eth0 type veth peer name s3h netns $sw3
    for x in "$P-s1 s1a" "$P-s1 s1b" "$P-s1 s1h" "$sw2 s2a" "$sw2 s2b" "$sw3 s3a" "$sw3 s3b" \
             "$sw3 s3h" "$P-h1 eth0" "$P-h3 eth0"; do
        set -- $x
        ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1" 2>/dev/null || true
        ip -n "$1" link set "$2" up
    done
    ip -n $P-h1 addr add 10.77.0.1/24 dev eth0
    ip -n $P-h3 addr add 10.77.0.3/24 dev eth0
    echo "$sw2 $sw3"
}

start_qbridge() {
    local i prio
    for i in 1 2 3; do
        prio=$((i == 1 ? 4096 : i == 2 ? 8192 : 32768))
        local host=""
        [ $i != 2 ] && host="link add h type afpacket dev s${i}h
link set dev h master br0
link set dev h edge on"
        cat >"$D/s$i.batch" <<EOF
link add br0 type bridge priority $prio hello_time 1 forward_delay 4 max_age 6
link add a type afpacket dev s${i}a
link add b type afpacket dev s${i}b
link set dev a master br0
link set dev b master br0
$host
link set dev br0 type bridge stp_state 1
EOF
        ip netns exec $P-s$i "$QB" daemon -batch "$D/s$i.batch" --socket "$D/s$i.sock" \
            --workers 1 2>"$D/s$i.log" &
        PIDS+=($!)
    done
}

start_kernel() {
    local i prio
    for i in 1 2 3; do
        prio=$((i == 1 ? 4096 : i == 2 ? 8192 : 32768))
        ip -n $P-s$i link add br0 type bridge stp_state 1 priority $prio forward_delay 400 \
            hello_time 100 max_age 600
        for dev in s${i}a s${i}b; do ip -n $P-s$i link set $dev master br0; done
        [ $i != 2 ] && ip -n $P-s$i link set s${i}h master br0
        ip -n $P-s$i link set br0 up
    done
}

start_ovs() {
    OVSDIR=$D/ovs-$P
    local o=$OVSDIR
    mkdir -p "$o"
    export OVS_RUNDIR=$o OVS_DBDIR=$o OVS_LOGDIR=$o
    ovsdb-tool create "$o/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ip netns exec $P-s1 ovsdb-server "$o/conf.db" --remote=punix:$o/db.sock \
        --pidfile=$o/db.pid --unixctl=$o/db.ctl --log-file=$o/db.log --no-chdir --detach \
        2>/dev/null
    vs() { ovs-vsctl --db=unix:$o/db.sock --timeout=30 "$@"; }
    vs --no-wait init
    ip netns exec $P-s1 ovs-vswitchd unix:$o/db.sock --pidfile=$o/vsd.pid \
        --unixctl=$o/vsd.ctl --log-file=$o/vsd.log --no-chdir --detach 2>/dev/null
    local i prio
    for i in 1 2 3; do
        prio=$((i == 1 ? 4096 : i == 2 ? 8192 : 32768))
        vs add-br S$i -- set bridge S$i datapath_type=netdev rstp_enable=true \
            other_config:rstp-priority=$prio other_config:rstp-hello-time=1 \
            other_config:rstp-forward-delay=4 other_config:rstp-max-age=6
        vs add-port S$i s${i}a -- add-port S$i s${i}b
        [ $i != 2 ] && vs add-port S$i s${i}h
    done
    unset OVS_RUNDIR OVS_DBDIR OVS_LOGDIR
}

# One round of switch $1: prints "converge_s lost_pings".
round() {
    local kind=$1 layout=many
    [ "$kind" = ovs ] && layout=one
    # Fresh names each round: a namespace being torn down may still hold its veths.
    P=qbs$$r$RANDOM
    topology $layout >/dev/null
    local t0
    t0=$(date +%s.%N)
    case $kind in
        qbridge) start_qbridge ;;
        kernel) start_kernel ;;
        ovs) start_ovs ;;
    esac
    local deadline=$((SECONDS + 60))
    until ip netns exec $P-h1 ping -c 1 -W 0.2 -q 10.77.0.3 >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { cleanup; echo "nan nan"; return; }
        sleep 0.05
    done
    local t1 conv
    t1=$(date +%s.%N)
    conv=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    # Settle (the kernel's ports still learning elsewhere), then ping every 10 ms across the pull.
    sleep 2
    local count=600
    [ "$kind" = kernel ] && count=2500
    ip netns exec $P-h1 ping -n -q -i 0.01 -W 1 -c $count 10.77.0.3 >"$D/ping.txt" 2>&1 &
    local pp=$!
    sleep 1
    ip -n $P-s1 link set s1a down
    wait $pp || true
    local tx rx
    tx=$(awk '/packets transmitted/ {print $1}' "$D/ping.txt")
    rx=$(awk '/packets transmitted/ {print $4}' "$D/ping.txt")
    # Clean up before answering: the caller starts the next round once it has the answer.
    cleanup
    echo "$conv $((tx - rx))"
}

printf '%-8s %-6s %12s %14s\n' switch round "converge s" "failover ms"
for kind in $SWITCHES; do
    if [ "$kind" = ovs ] && ! command -v ovs-vswitchd >/dev/null 2>&1 && [ ! -x /usr/sbin/ovs-vswitchd ]; then
        echo "bench-stp.sh: no Open vSwitch (apt-get install openvswitch-switch); skipped" >&2
        continue
    fi
    for r in $(seq 1 "$ROUNDS"); do
        read -r conv lost < <(round "$kind")
        if [ "$lost" = nan ]; then
            printf '%-8s %-6s %12s %14s\n' "$kind" "$r" "no path" "-"
        else
            printf '%-8s %-6s %12.1f %14d\n' "$kind" "$r" "$conv" $((lost * 10))
        fi
    done
done
