#!/usr/bin/env bash
# Live throughput, the first version: now a thin wrapper around scripts/bench-live.sh, which
# measures the same setups the same way and more (TCP 1/4/16 streams, UDP 1472/18 B, 64-byte
# frames from trafgen, RTT p50/p99, CPU) beside the kernel bridge and Open vSwitch.
#
# Usage (root): scripts/throughput.sh [SECONDS]   (default 5; runs the setups of old,
# SETUPS="veth kbridge qb-plain qb-qinq", unless SETUPS says otherwise; QB_DAEMON_ARGS and every
# other bench-live.sh option pass through).
set -euo pipefail
export SECS=${1:-${SECS:-5}}
export SETUPS=${SETUPS:-veth kbridge qb-plain qb-qinq}
exec "$(dirname "$0")/bench-live.sh"
