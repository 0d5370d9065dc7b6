#!/usr/bin/env bash
# Instructions per frame of the in-memory forwarding core, counted by callgrind (repeatable on a
# shared machine where timings are not). Runs one combination twice, with N1 and N2 frames, and
# divides the difference: setup (building the switch, learning MACs) cancels out.
#
#   scripts/bench-instructions.sh [CASE] [VLANS] [MACS] [BATCH]
#   e.g. scripts/bench-instructions.sh customer-to-provider 1 1000 32
set -euo pipefail
case_=${1:-customer-to-provider}
vlans=${2:-1}
macs=${3:-1000}
batch=${4:-32}
n1=${N1:-100000}
n2=${N2:-300000}
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
cargo build --release -q -p qbridge-bench
bin=target/release/qbridge-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" "$bin" \
    --case "$case_" --vlans "$vlans" --macs "$macs" --batch "$batch" --frames "$1" >/dev/null 2>"$tmp/log.$1"
  grep -E '^summary:|^totals:' "$tmp/cg.$1" | head -1 | awk '{print $2}'
}
i1=$(count "$n1")
i2=$(count "$n2")
awk -v a="$i1" -v b="$i2" -v n1="$n1" -v n2="$n2" -v c="$case_" -v v="$vlans" -v m="$macs" -v bs="$batch" \
  'BEGIN { printf "%-22s vlans %-5s macs %-8s batch %-4s %8.1f instructions/frame\n", c, v, m, bs, (b-a)/(n2-n1) }'
