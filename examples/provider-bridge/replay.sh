#!/bin/sh
# Replays the 802.1ad provider-bridge example: examples/provider-bridge.batch configures the
# switch, the captures in this directory are the traffic. Output (default /tmp/provider-bridge):
# cust-a.pcap, cust-b.pcap, trunk.pcap (what the switch sent on each port), fdb.json, stats.json.
# Usage: examples/provider-bridge/replay.sh [OUT_DIR]   (from anywhere; builds qbridge if needed)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/provider-bridge}
exec cargo run --quiet --release --manifest-path "$here/../../Cargo.toml" -p qbridge -- \
    replay -batch "$here/../provider-bridge.batch" \
    --in "cust-a=$here/cust-a.pcap" \
    --in "cust-b=$here/cust-b.pcap" \
    --in "trunk=$here/trunk.pcap" \
    --out "$out"
