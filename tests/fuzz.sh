#!/usr/bin/env bash
# Fuzzes every parser (each collector's, and nodemedic-kernel's shared ones) with cargo-fuzz
# (libFuzzer) for FUZZ_SECONDS each: one binary (fuzz/fuzz_targets/parsers.rs), run once per
# target with NODEMEDIC_FUZZ_TARGET naming it.
#
#   tests/fuzz.sh                  # 20 s per target, one target per CPU at a time
#   FUZZ_SECONDS=300 tests/fuzz.sh
#
# Needs the nightly toolchain: installs it with rustup when it is missing, and cargo-fuzz
# (pinned, --locked); fails (exit 1) when it cannot, so a machine without nightly never passes
# without fuzzing. (`cargo test` also replays fuzz/corpus and runs a bounded mutation loop on
# stable: fuzz/logic/tests/corpus.rs.)
#
#   FUZZ_TARGETS="psi cgroup_cpu" tests/fuzz.sh    # only these targets
#   FUZZ_RUNS=10000000 FUZZ_SECONDS=36000 tests/fuzz.sh   # stop each target at 10 M inputs
#   FUZZ_START_FILE=F tests/fuzz.sh   # build, then wait until F exists before fuzzing
#
# FUZZ_START_FILE splits the build from the runs in time: tests/run-all.sh starts this script
# when the machine has idle cores to build on (beside tests/k8s/node_e2e.py) and creates the
# file when the fuzzing may begin (once tests/k8s/node_e2e.py no longer needs an idle node).
#
# The seed corpus in fuzz/corpus/<target>/ is read but never written: what libFuzzer finds
# goes to fuzz/target/work-corpus/<target>/ (git-ignored, kept between runs), crashes to
# fuzz/artifacts/<target>/. Copy a crashing input into fuzz/corpus/<target>/ as a regression
# seed once it is fixed. Exits non-zero if any target crashed.
#
# Flags: -s none (the workspace forbids unsafe code, so AddressSanitizer has little to find
# and costs speed), --debug-assertions (so integer overflow panics, as in debug builds),
# -max_len=8192 (rows are line-local; seeds are truncated to this), -timeout=10.
set -euo pipefail

FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
cd "$(dirname "$0")/.."

if ! command -v rustup >/dev/null; then
    echo "fuzz.sh: FAILED: rustup not found; cargo-fuzz needs a nightly toolchain (https://rustup.rs)" >&2
    exit 1
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: no nightly toolchain; installing it with rustup"
    if ! rustup toolchain install nightly --profile minimal; then
        echo "fuzz.sh: FAILED: cannot install the nightly toolchain (rustup toolchain install nightly)" >&2
        exit 1
    fi
fi

# cargo-fuzz pinned, from the cargo tools' shared cache (deploy/bootstrap.sh ensure_cargo_tool:
# --locked, unoptimized). It only runs cargo and the fuzz binary; in its release profile its
# install took 104 s of a cold CI, on the path to the QEMU guests.
CARGO_FUZZ_VERSION=0.13.2
if ! fuzz_bin=$(. deploy/bootstrap.sh && ensure_cargo_tool cargo-fuzz "$CARGO_FUZZ_VERSION"); then
    echo "fuzz.sh: FAILED: cannot install cargo-fuzz $CARGO_FUZZ_VERSION" >&2
    exit 1
fi
export PATH="$(dirname "$fuzz_bin"):$PATH"

cd fuzz
if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    # One directory of seeds per target of nodemedic_fuzz_logic::TARGETS (checklist.rs keeps
    # the two equal), all fuzzed through the one binary, `parsers`.
    mapfile -t targets < <(find corpus -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
fi
if [ "${#targets[@]}" -eq 0 ]; then
    echo "fuzz.sh: no fuzz targets found" >&2
    exit 1
fi

build_start=$(date +%s)
cargo +nightly fuzz build -s none --debug-assertions parsers
echo "fuzz.sh: the fuzz binary for ${#targets[@]} targets built in $(($(date +%s) - build_start))s"
if [ -n "${FUZZ_START_FILE:-}" ]; then
    wait_start=$(date +%s)
    while [ ! -e "$FUZZ_START_FILE" ]; do sleep 1; done
    echo "fuzz.sh: $FUZZ_START_FILE after $(($(date +%s) - wait_start))s; fuzzing"
fi
runs_start=$(date +%s)

# FUZZ_JOBS targets at a time (default: one per CPU; each libFuzzer process uses one core), each
# writing to its own log, printed whole when it ends.
FUZZ_JOBS="${FUZZ_JOBS:-$(nproc)}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fuzz_one() {
    local t=$1
    local runs=()
    mkdir -p "target/work-corpus/$t"
    if [ -n "${FUZZ_RUNS:-}" ]; then
        runs=(-runs="$FUZZ_RUNS")
    fi
    echo "=== fuzz $t for ${FUZZ_SECONDS}s${FUZZ_RUNS:+ or $FUZZ_RUNS inputs}"
    mkdir -p "artifacts/$t"
    NODEMEDIC_FUZZ_TARGET=$t cargo +nightly fuzz run -s none --debug-assertions parsers \
        "target/work-corpus/$t" "corpus/$t" -- \
        -max_total_time="$FUZZ_SECONDS" "${runs[@]}" -max_len=8192 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$PWD/artifacts/$t/"
}
failed=()
declare -A running=()
# reap: waits for one running target, prints its log and records a failure.
reap() {
    local pid t rc
    wait -n -p pid "${!running[@]}" && rc=0 || rc=$?
    t=${running[$pid]}
    unset "running[$pid]"
    cat "$logs/$t.log"
    [ "$rc" -eq 0 ] || failed+=("$t")
}
for t in "${targets[@]}"; do
    if [ ! -d "corpus/$t" ] || [ -z "$(ls -A "corpus/$t")" ]; then
        echo "fuzz.sh: target $t has no seed corpus in fuzz/corpus/$t" >&2
        failed+=("$t (no corpus)")
        continue
    fi
    while [ "${#running[@]}" -ge "$FUZZ_JOBS" ]; do reap; done
    fuzz_one "$t" >"$logs/$t.log" 2>&1 &
    running[$!]=$t
done
while [ "${#running[@]}" -gt 0 ]; do reap; done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz.sh: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets ran ${FUZZ_SECONDS}s without a crash ($(($(date +%s) - runs_start))s, $FUZZ_JOBS at a time)"
