//! Replays what the fuzzers kept through the same target functions, with no fuzzer:
//! every file of `fuzz/corpus/NAME/` (the inputs that reached new coverage) and of
//! `fuzz/regressions/NAME/` (every crash found, kept after its fix).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use csx_fuzzing::{Target, TARGETS};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// Runs every file of `dir` through `t`; the names of those that panicked.
fn replay(t: &Target, dir: &Path) -> (usize, Vec<String>) {
    let inputs = files(dir);
    let mut failed = Vec::new();
    for path in &inputs {
        // A file `make fuzz` removed meanwhile (minimising the corpus) is skipped.
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        if catch_unwind(AssertUnwindSafe(|| (t.run)(&bytes))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    (inputs.len(), failed)
}

#[test]
fn every_corpus_input_passes() {
    let mut problems = Vec::new();
    for t in TARGETS {
        let dir = fuzz_dir().join("corpus").join(t.name);
        let (n, failed) = replay(t, &dir);
        if n == 0 {
            problems.push(format!(
                "{}: no corpus in {} (run `make fuzz` and commit fuzz/corpus)",
                t.name,
                dir.display()
            ));
        }
        problems.extend(
            failed
                .into_iter()
                .map(|f| format!("{}: {f} panics", t.name)),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_crash_found_stays_fixed() {
    let mut failed = Vec::new();
    for t in TARGETS {
        let (_, f) = replay(t, &fuzz_dir().join("regressions").join(t.name));
        failed.extend(f.into_iter().map(|f| format!("{}: {f} panics", t.name)));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Inputs the fuzzers did not keep: a fixed pseudo-random stream, so the targets also
/// see bytes far from the corpus on every `cargo test`.
#[test]
fn random_inputs_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for t in TARGETS {
        for i in 0..64 {
            let len = (next() % 600) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if catch_unwind(AssertUnwindSafe(|| (t.run)(&bytes))).is_err() {
                panic!(
                    "{}: random input {i} ({len} bytes) panics: {bytes:02x?}",
                    t.name
                );
            }
        }
    }
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for t in TARGETS {
        let bin = fuzz_dir()
            .join("fuzz_targets")
            .join(format!("{}.rs", t.name));
        assert!(bin.exists(), "{} is missing", bin.display());
        assert!(
            manifest.contains(&format!("name = \"{}\"", t.name)),
            "fuzz/Cargo.toml has no [[bin]] {}",
            t.name
        );
    }
}
