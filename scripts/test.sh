#!/usr/bin/env bash
# The project's test command (README, and what CI runs):
#   1. installs the system tools the namespace tests use, when run as root and missing;
#   2. cargo test over the whole workspace (unit, golden, differential property tests, replay
#      integration, and the root-only namespace tests, which skip with a reason when not root),
#      then the differential tests again in release mode with 5000 cases per property;
#   3. a short, bounded fuzz run of every fuzz target (FUZZ_SECONDS each, default 20; 0 skips).
# Environment: PROPTEST_CASES raises the differential test case count; FUZZ_SECONDS as above.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "test.sh: ${missing[*]} missing and not root; namespace tests will skip" >&2
    fi
fi

# As root (CI), the namespace tests must run: a missing capability fails them instead of
# skipping them.
if [ "$(id -u)" = 0 ]; then
    export QBRIDGE_REQUIRE_NETNS=1
fi
cargo test --workspace --locked

# The differential property tests again, optimised, with many more cases (5000 scenarios per
# property, about 100 frames each; about 10 s here). DIFF_CASES overrides.
PROPTEST_CASES=${DIFF_CASES:-5000} cargo test --release --locked -p qbridge-model --test differential

if [ "${FUZZ_SECONDS:-20}" != 0 ]; then
    scripts/fuzz-smoke.sh
fi
