#!/usr/bin/env bash
# qbridge's main job, shown: builds qbridge and runs `qbridge demo` — an 802.1ad provider
# network in network namespaces (two customers, each CE-PE-trunk-PE-CE, same C-VLAN and same
# addresses on different S-VLANs), ping and verified TCP through it, the tag stacks on the
# trunk, throughput, counters, FDB; everything it creates is removed at the end, also on
# Ctrl-C. Without root or namespaces it says why and replays the pcap example instead.
# Usage: scripts/demo.sh [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x target/release/qbridge ]; then
    echo "demo.sh: bringing target/release/qbridge up to date (cargo build --release)…" >&2
else
    echo "demo.sh: building qbridge in release mode (cargo build --release; the first build" \
        "takes a few minutes on 2 cores, cargo shows its progress below)…" >&2
fi
t0=$SECONDS
cargo build --release --locked -p qbridge
echo "demo.sh: built in $((SECONDS - t0)) s; starting 'qbridge demo' (it says what it does as" \
    "it goes)" >&2
exec target/release/qbridge demo --examples examples "$@"
