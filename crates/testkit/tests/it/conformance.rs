//! Runs the whole bpf_conformance suite on every engine in `engines::all()`.
//!
//! Method: load every vector from `../shared/conformance` (failing loudly if it is
//! missing), run each on each engine, collect every failure by engine and vector name,
//! and fail once with the complete list, so one broken instruction does not hide others.

use csx_testkit::conformance::{load_vectors, run_vector};
use csx_testkit::engines;

/// Vectors in the stored suite; a different count means the suite or its reading changed.
const VECTOR_COUNT: usize = 313;

#[test]
fn every_vector_on_every_engine() {
    let vectors = load_vectors().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        vectors.len(),
        VECTOR_COUNT,
        "the conformance suite changed size"
    );
    let mut failures = Vec::new();
    for (engine, factory) in engines::all() {
        let mut ran = 0;
        for v in &vectors {
            if let Err(e) = run_vector(v, factory) {
                failures.push(format!("{engine}: {}: {e}", v.name));
            }
            ran += 1;
        }
        assert_eq!(ran, VECTOR_COUNT, "engine {engine} ran {ran} vectors");
    }
    assert!(
        failures.is_empty(),
        "{} conformance failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
