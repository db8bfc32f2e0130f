//! Differential testing of the JIT tiers against the reference interpreter.
//!
//! Method: proptest draws random byte strings, `csx_testkit::gen` turns each into a
//! verifiable program with random memory and a small fuel budget, and each case runs on
//! the interpreter, the Cranelift JIT and (on x86-64) the quick tier (at its own budget
//! and at a large one); r0 or the trap, the fuel used and
//! the data region afterwards must be identical. A few hundred cases by default; set
//! `PROPTEST_CASES` for more. A failure prints the program's listing.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use csx_testkit::gen::{differential, strategy};

/// Cases when `PROPTEST_CASES` is not set: enough to cover every instruction family in
/// well under 30 seconds.
const DEFAULT_CASES: u32 = 500;

#[test]
fn jit_matches_interpreter_on_random_programs() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy(), |case| {
        differential(&case).map_err(TestCaseError::fail)?;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
