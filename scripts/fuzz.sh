#!/usr/bin/env bash
# `make fuzz`: coverage-guided fuzzing of csx's decoders on stable Rust.
#
# Builds fuzz/ (one libFuzzer binary per target, each calling a function of
# crates/fuzzing) with rustc's SanitizerCoverage pass, the flags cargo-fuzz would pass
# minus the sanitizer (AddressSanitizer needs nightly; safe Rust checks its own bounds,
# and a wild access of JIT code is a SIGSEGV libFuzzer reports). Then runs each target
# for FUZZ_MINUTES on its corpus, keeps new inputs there, minimises the corpus, and
# saves any crash input to fuzz/artifacts/NAME/ (copy it to fuzz/regressions/NAME/ once
# fixed: `cargo test -p csx-fuzzing` replays both directories).
#
#   FUZZ_MINUTES=N      minutes per target (default 1)
#   FUZZ_TARGETS="a b"  which targets (default: all, as in csx_fuzzing::TARGETS)
#   FUZZ_JOBS=N         libFuzzer worker processes per target (default 1)
#
# Summary lines (executions, coverage, corpus, crashes) go to stdout and to
# fuzz/logs/summary.txt; libFuzzer's own output to fuzz/logs/NAME.log.
set -euo pipefail
cd "$(dirname "$0")/.."

MINUTES=${FUZZ_MINUTES:-1}
TARGETS=${FUZZ_TARGETS:-"wire tcp_pdu shm_entries elf verifier jit_differential"}
JOBS=${FUZZ_JOBS:-1}
case "$MINUTES" in '' | 0 | *[!0-9]*)
    echo "fuzz: FUZZ_MINUTES must be a whole number of minutes above 0, not '$MINUTES'" >&2
    exit 2
    ;;
esac
case "$JOBS" in '' | 0 | *[!0-9]*)
    echo "fuzz: FUZZ_JOBS must be a number above 0, not '$JOBS'" >&2
    exit 2
    ;;
esac

# libfuzzer-sys compiles libFuzzer's C++ sources.
if ! command -v c++ >/dev/null 2>&1; then
    echo "fuzz: installing g++ (libFuzzer is C++)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ >/dev/null
fi

# Starting inputs for an empty corpus: valid frames, PDUs, entries and programs, and the
# SDK's programs compiled to ELF (crates/fuzzing/examples/seeds.rs; it needs clang, and
# names scripts/setup.sh when clang is missing).
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
cargo run -q -p csx-fuzzing --example seeds -- "$seeds" . >/dev/null
for t in $TARGETS; do
    if [ -d "$seeds/$t" ] && [ -z "$(ls -A "fuzz/corpus/$t" 2>/dev/null)" ]; then
        mkdir -p "fuzz/corpus/$t"
        cp "$seeds/$t"/* "fuzz/corpus/$t/"
    fi
done

TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
# An explicit --target keeps these instrumented artifacts apart from the workspace's own
# in a shared CARGO_TARGET_DIR (RUSTFLAGS then apply to the target's crates only).
TARGET_DIR=${CARGO_TARGET_DIR:-fuzz/target}
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cdebug-assertions -Coverflow-checks"
echo "fuzz: building the targets (instrumented, release) for $TRIPLE"
cargo build --release --manifest-path fuzz/Cargo.toml --target "$TRIPLE" --target-dir "$TARGET_DIR" --bins
BIN_DIR="$TARGET_DIR/$TRIPLE/release"

mkdir -p fuzz/logs
SUMMARY=fuzz/logs/summary.txt
{
    echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
        "$(rustc --version) load $(cut -d' ' -f1-3 /proc/loadavg) ${MINUTES} min x ${JOBS} job(s) per target"
} >>"$SUMMARY"
failed=0
for t in $TARGETS; do
    bin="$BIN_DIR/$t"
    [ -x "$bin" ] || { echo "fuzz: no binary $bin (is $t a [[bin]] of fuzz/Cargo.toml?)" >&2; exit 2; }
    corpus=fuzz/corpus/$t
    artifacts=fuzz/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    log=fuzz/logs/$t.log
    echo "fuzz: $t for $MINUTES min ($(ls "$corpus" | wc -l) corpus inputs; log $log)"
    status=0
    # -timeout: an input running longer than 10 s is a hang, saved as a crash.
    # -rss_limit_mb: an input that makes a decoder allocate past 2 GiB is a crash too.
    parallel=()
    [ "$JOBS" -gt 1 ] && parallel=(-jobs="$JOBS" -workers="$JOBS")
    "$bin" "$corpus" -max_total_time=$((MINUTES * 60)) -timeout=10 -rss_limit_mb=2048 \
        -max_len=8192 -artifact_prefix="$artifacts/" -print_final_stats=1 \
        "${parallel[@]}" >"$log" 2>&1 || status=$?
    if [ "$JOBS" -gt 1 ]; then
        cat fuzz-*.log >>"$log" 2>/dev/null || true
        rm -f fuzz-*.log
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    crashes=$(ls "$artifacts" | wc -l)
    # Keep the corpus small: only inputs that add coverage survive.
    tmp=$(mktemp -d)
    "$bin" -merge=1 -max_len=8192 "$tmp" "$corpus" >>"$log" 2>&1 || true
    if [ -n "$(ls "$tmp")" ]; then
        rm -f "$corpus"/*
        mv "$tmp"/* "$corpus"/
    fi
    rmdir "$tmp" 2>/dev/null || rm -rf "$tmp"
    line="$t: ${execs} execs, cov ${cov:-?} edges, ft ${ft:-?} features, corpus $(ls "$corpus" | wc -l), crash inputs ${crashes} (exit $status)"
    echo "fuzz: $line"
    echo "$line" >>"$SUMMARY"
    [ "$status" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then
    echo "fuzz: a target crashed: see fuzz/artifacts/ and fuzz/logs/" >&2
    exit 1
fi
