#!/usr/bin/env bash
# qbridge's main job, shown: an 802.1ad provider bridge switching customer traffic.
# Replays examples/provider-bridge (customer and trunk captures through an 802.1ad bridge) and
# prints the counters, the FDB and the tag stack of every frame that left each port.
# Usage: scripts/demo.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/qbridge-demo.XXXXXX)}
echo "== configuration: examples/provider-bridge.batch"
grep -vE '^\s*(#|$)' examples/provider-bridge.batch | sed 's/^/   /'
echo
echo "== replaying the customer and trunk captures"
examples/provider-bridge/replay.sh "$out"
echo
echo "== FDB at the end (fdb show -j)"
cat "$out/fdb.json"; echo
for port in cust-a cust-b trunk; do
    echo
    echo "== frames sent on $port"
    if command -v tcpdump >/dev/null 2>&1; then
        tcpdump -e -nn -r "$out/$port.pcap" 2>/dev/null | sed 's/^/   /'
    else
        echo "   (install tcpdump to see the tag stacks; the capture is $out/$port.pcap)"
    fi
done
echo
echo "Output in $out: one pcap per port, fdb.json, stats.json."
