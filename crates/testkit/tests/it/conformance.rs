//! Runs the whole bpf_conformance suite on every engine in `engines::all()`.
//!
//! Method: load every vector from `../shared/conformance` (failing loudly if it is
//! missing), run each on each engine, collect every failure by engine and vector name,
//! and fail once with the complete list, so one broken instruction does not hide others.
//! Every engine's executed-block counts must equal the first engine's (the interpreter,
//! the reference), block by block.

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
    let mut reference: Vec<Option<Vec<u64>>> = Vec::new();
    for (n, (engine, factory)) in engines::all().into_iter().enumerate() {
        let mut ran = 0;
        for (i, v) in vectors.iter().enumerate() {
            match run_vector(v, factory) {
                Ok(counts) if n == 0 => reference.push(Some(counts)),
                Ok(counts) => match &reference[i] {
                    Some(want) if *want != counts => failures.push(format!(
                        "{engine}: {}: block counts {counts:?}, the reference's {want:?}",
                        v.name
                    )),
                    _ => {}
                },
                Err(e) => {
                    if n == 0 {
                        reference.push(None);
                    }
                    failures.push(format!("{engine}: {}: {e}", v.name));
                }
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
