#!/usr/bin/env bash
# The project's test command (README, and what CI runs):
#   1. installs the system tools the namespace tests use, when run as root and missing;
#   2. cargo test over the whole workspace (unit, golden, differential property tests, replay
#      integration, and the root-only namespace tests, which skip with a reason when not root),
#      then the differential tests again in release mode with 5000 cases per property;
#   3. a short, bounded fuzz run of every fuzz target (FUZZ_SECONDS each, default 20; 0 skips),
#      its log in target/fuzz-smoke.log, one summary line per target here;
#   4. as root with clang: the daemons of step 2 run with the eBPF fast path on (`--fast-path
#      auto`, the default, where the kernel allows it); every namespace test binary of the
#      qbridge crate runs again with it off (QBRIDGE_FAST_PATH=off), failures labelled
#      `fast-path off: …`, the whole output in target/fast-path-round.log;
#   5. the verdict as the last line: `N passed, M failed` (failing tests named above it).
# Environment: PROPTEST_CASES raises the differential test case count; FUZZ_SECONDS as above.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/deps.sh
. scripts/deps.sh
read -r -a missing <<<"$(deps_need build tests)"
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        deps_install test.sh "${missing[@]}"
    else
        echo "test.sh: ${missing[*]} missing and not root; namespace tests will skip" >&2
    fi
fi

# As root (CI), the namespace tests must run: a missing capability fails them instead of
# skipping them.
if [ "$(id -u)" = 0 ]; then
    export QBRIDGE_REQUIRE_NETNS=1
fi
# The fast path's program must build here (clang was installed above): a build without it
# would skip its tests instead of running them.
if command -v clang >/dev/null 2>&1; then
    export QBRIDGE_FASTPATH_REQUIRE=1
fi
log=$(mktemp /tmp/qbridge-test.XXXXXX)
trap 'rm -f "$log"' EXIT
status=0
# Runs a command, its output shown and kept for the summary; its failure is remembered.
run() {
    "$@" 2>&1 | tee -a "$log"
    return "${PIPESTATUS[0]}"
}

run cargo test --workspace --locked --no-fail-fast || status=1

# The differential property tests again, optimised, with many more cases (5000 scenarios per
# property, about 100 frames each; about 20 s here). DIFF_CASES overrides. The trace property
# (every frame traced, then forwarded) takes 400 (about 35 s); TRACE_CASES overrides.
PROPTEST_CASES=${DIFF_CASES:-5000} TRACE_CASES=${TRACE_CASES:-400} \
    run cargo test --release --locked -p qbridge-model --test differential || status=1

# Fuzzing: the long libFuzzer log goes to target/fuzz-smoke.log; one line per target here.
fuzz_passed=0
fuzz_failed=0
if [ "${FUZZ_SECONDS:-20}" != 0 ]; then
    mkdir -p target
    if ! scripts/fuzz-smoke.sh >target/fuzz-smoke.log 2>&1; then
        status=1
    fi
    current=
    while IFS= read -r line; do
        case "$line" in
            "fuzz-smoke: "*" for "*) current=${line#fuzz-smoke: }; current=${current%% for *} ;;
            "stat::number_of_executed_units: "*)
                echo "fuzz: $current: ${line##* } runs, no crash"; fuzz_passed=$((fuzz_passed + 1)) ;;
            "fuzz-smoke: "*" FAILED"*)
                echo "fuzz: $line (log: target/fuzz-smoke.log)"; fuzz_failed=$((fuzz_failed + 1)) ;;
            "fuzz-smoke: the fuzz targets do not build"*)
                echo "fuzz: ${line#fuzz-smoke: } (log: target/fuzz-smoke.log)"; fuzz_failed=$((fuzz_failed + 1)) ;;
            "fuzz-smoke: "*skipping*) echo "fuzz: ${line#fuzz-smoke: }" ;;
        esac
    done <target/fuzz-smoke.log
fi

# The namespace tests again with the eBPF fast path off (issue 21): as root with clang, the
# first run's daemons had it on (`--fast-path auto`, the default), so every netns_* binary of
# the qbridge crate (and daemon_netns) runs once more with QBRIDGE_FAST_PATH=off, which every
# test daemon then gets as `--fast-path off` (tests/support/mod.rs): both paths pass every
# test. The binaries are the ones the first run built (same cargo arguments, so nothing is
# rebuilt); netns_fastpath chooses its modes itself and ran already. Its whole output goes to
# target/fast-path-round.log; here one line per binary, and the panic messages of what failed.
# Its failures are labelled `fast-path off: BINARY: TEST`.
fp_log=target/fast-path-round.log
fp_passed=0
fp_failed=0
fp_labels=()
if [ "$(id -u)" = 0 ] && command -v clang >/dev/null 2>&1; then
    mkdir -p target
    : >"$fp_log"
    fp_bins=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
        grep -F '"manifest_path":"'"$PWD"'/crates/qbridge/Cargo.toml"' |
        grep -oE '"executable":"[^"]*/(daemon_)?netns(_[a-z0-9_]+)?-[0-9a-f]+"' |
        sed -E 's/^"executable":"(.*)"$/\1/' | sort -u) || fp_bins=
    if [ -z "$fp_bins" ]; then
        echo "fast-path off: the namespace test binaries were not found (build failed?)"
        fp_failed=$((fp_failed + 1))
        fp_labels+=("fast-path off: the namespace test binaries were not found")
        status=1
    fi
    for bin in $fp_bins; do
        name=$(basename "$bin")
        name=${name%-*}
        [ "$name" = netns_fastpath ] && continue
        echo "fast-path off: $name"
        : >"$fp_log.one"
        # Run from the crate's directory, as cargo test does.
        (cd crates/qbridge && QBRIDGE_FAST_PATH=off "$bin") >"$fp_log.one" 2>&1 || bin_status=$?
        cat "$fp_log.one" >>"$fp_log"
        p=$(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed.*/\1/p' "$fp_log.one" | awk '{s += $1} END {print s + 0}')
        f=$(sed -nE 's/^test result: .* ([0-9]+) failed.*/\1/p' "$fp_log.one" | awk '{s += $1} END {print s + 0}')
        fp_passed=$((fp_passed + p))
        fp_failed=$((fp_failed + f))
        while IFS= read -r t; do
            fp_labels+=("fast-path off: $name: $t")
        done < <(sed -nE 's/^test (.*) \.\.\. FAILED$/\1/p' "$fp_log.one")
        if [ -n "${bin_status:-}" ]; then
            status=1
            if [ "$f" = 0 ]; then
                fp_failed=$((fp_failed + 1))
                fp_labels+=("fast-path off: $name: the binary failed before reporting (exit $bin_status)")
            fi
            # What failed, for the reader (the rest is in the log).
            grep -A4 ' panicked at ' "$fp_log.one" | grep -vE '^(stack backtrace:|note: |--$)' | head -n 40 || true
        fi
        unset bin_status
        echo "fast-path off: $name: $p passed, $f failed"
    done
    echo "fast-path off: $fp_passed passed, $fp_failed failed (log: $fp_log)"
    rm -f "$fp_log.one"
fi

# The verdict, last: every `test result:` line of the cargo runs, plus one per fuzz target,
# plus the fast-path round's.
passed=$(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
failed=$(sed -nE 's/^test result: .* ([0-9]+) failed.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
passed=$((passed + fuzz_passed + fp_passed))
failed=$((failed + fuzz_failed + fp_failed))
grep -E '^test .* \.\.\. FAILED$' "$log" | sed 's/^/failed: /' || true
for label in "${fp_labels[@]+"${fp_labels[@]}"}"; do
    echo "failed: $label"
done
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then
    echo "failed: a build or a test binary failed before reporting (see above)"
    failed=1
fi
echo "$passed passed, $failed failed"
exit "$status"
