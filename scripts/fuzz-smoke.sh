#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for FUZZ_SECONDS seconds each (default 20).
# Exits non-zero if a target crashes (the crasher is left in fuzz/artifacts/<target>/; turn it
# into a unit test). Needs a nightly toolchain; without one it says so and exits 0, because
# fuzzing is a nightly-only extra, not a gate for stable builds.
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-20}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz-smoke: no nightly toolchain (cargo +nightly fails); libFuzzer needs nightly, skipping" >&2
    exit 0
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    if ! cargo install cargo-fuzz --locked; then
        echo "fuzz-smoke: could not install cargo-fuzz; skipping the fuzz run (not a crash)" >&2
        exit 0
    fi
fi

# A compile error is not a crash: build every target first and say which it is.
if ! cargo +nightly fuzz build --fuzz-dir fuzz >&2; then
    echo "fuzz-smoke: the fuzz targets do not build (a compile error, not a crash; see above)" >&2
    exit 1
fi

# Targets are the [[bin]]s of fuzz/Cargo.toml: parse_headers, gso, gro, pipeline.
targets=$(cargo +nightly fuzz list --fuzz-dir fuzz)
status=0
for t in $targets; do
    echo "fuzz-smoke: $t for ${seconds}s" >&2
    mkdir -p "fuzz/corpus/$t"
    # fuzz/corpus/<t> collects new inputs (untracked); fuzz/seeds/<t> holds committed seeds
    # (valid super-frames and tagged frames) that get the fuzzer past the parsers quickly.
    seeds=()
    if [ -d "fuzz/seeds/$t" ]; then seeds=("fuzz/seeds/$t"); fi
    if ! cargo +nightly fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" "${seeds[@]}" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1; then
        echo "fuzz-smoke: $t FAILED; crashers in fuzz/artifacts/$t/" >&2
        status=1
    fi
done
exit "$status"
