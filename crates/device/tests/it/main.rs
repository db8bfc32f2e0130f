//! csx-device integration tests: one binary, a module per topic, each driving the
//! runtime directly through queue pairs on a fresh device in a temporary directory.
//!
//! Programs are C compiled by clang at test time (`clang -O2 -target bpf -c`) from
//! `tests/it/c`; a missing clang fails the tests with a pointer to scripts/setup.sh.

mod common;

mod abi;
mod bad_input;
mod concurrency;
mod execute;
mod files;
mod fuzz;
mod memory;
mod perf;
mod persistence;
mod programs;
mod resident;
