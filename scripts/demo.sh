#!/usr/bin/env bash
# qbridge's main job, shown: builds qbridge and runs `qbridge demo` — an 802.1ad provider
# network in network namespaces (two customers, each CE-PE-trunk-PE-CE, same C-VLAN and same
# addresses on different S-VLANs), ping and verified TCP through it, the tag stacks on the
# trunk, throughput, counters, FDB; everything it creates is removed at the end, also on
# Ctrl-C. Without root or namespaces it says why and replays the pcap example instead.
# Usage: scripts/demo.sh [--seconds N]
set -euo pipefail
cd "$(dirname "$0")/.."

# What the build and the demo need (scripts/deps.sh): as root, installed here; without root the
# demo replays pcap files (no namespaces, no fast path needed), so the build goes on without.
# shellcheck source=scripts/deps.sh
. scripts/deps.sh
read -r -a missing <<<"$(deps_need build demo)"
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        deps_install demo.sh "${missing[@]}" || {
            echo "demo.sh: cannot go on without ${missing[*]}: install them and run it again" >&2
            exit 1
        }
    else
        echo "demo.sh: not root, and ${missing[*]} missing: building without the eBPF fast" \
            "path; the demo will replay pcap files (run as root for the live network)" >&2
    fi
fi
# With clang, the fast path's program must build: a failure is an error, not a slow product.
if command -v clang >/dev/null 2>&1; then
    export QBRIDGE_FASTPATH_REQUIRE=1
fi
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
