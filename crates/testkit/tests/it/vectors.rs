//! Runs every vector in `tests/vectors/**/*.data` on every engine.
//!
//! Method: `csx_testkit::vectors::run_dir` parses each file, verifies its program once,
//! runs it on each engine from `csx_testkit::engines::all()` and compares value, trap,
//! fuel and memory with the file and with the interpreter. Every failing vector is listed
//! by file name, so one run shows all of them.

use csx_testkit::engines;
use csx_testkit::vectors::{run_dir, vectors_dir};

#[test]
fn every_vector_on_every_engine() {
    let dir = vectors_dir();
    let (count, failures) = run_dir(&dir, &engines::all())
        .unwrap_or_else(|e| panic!("cannot read vectors in {}: {e}", dir.display()));
    assert!(count > 0, "no vectors found in {}", dir.display());
    let mut report = String::new();
    for (file, problem) in &failures {
        report.push_str(&format!("\n  {file}: {problem}"));
    }
    let mut failed_files: Vec<&str> = failures.iter().map(|(f, _)| f.as_str()).collect();
    failed_files.dedup();
    assert!(
        failures.is_empty(),
        "{} of {count} vectors failed:{report}",
        failed_files.len()
    );
}
