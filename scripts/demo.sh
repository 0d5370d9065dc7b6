#!/usr/bin/env bash
# qbridge's main job, shown: builds qbridge and runs `qbridge demo` — an 802.1ad provider
# network in network namespaces (two customers, each CE-PE-trunk-PE-CE, same C-VLAN and same
# addresses on different S-VLANs), ping and verified TCP through it, the tag stacks on the
# trunk, throughput, counters, FDB; everything it creates is removed at the end, also on
# Ctrl-C. Without root or namespaces it says why and replays the pcap example instead.
# Usage: scripts/demo.sh [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p qbridge
exec target/release/qbridge demo --examples examples "$@"
