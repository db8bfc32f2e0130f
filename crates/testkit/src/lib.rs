//! csx-testkit: what the tests share, the dev-dependency of every crate with tests.
//!
//! [`tools`] finds clang and the shared directory for every crate (no dependencies of
//! its own, so csx-ebpf's tests use it too: `default-features = false`). With feature
//! `ebpf` (default):
//! [`engines`] lists every engine; [`conformance`] reads the bpf_conformance suite in
//! place from `../shared/conformance`; [`vectors`] reads our own `.data` vectors from
//! `tests/vectors`. One runner drives every vector through every engine and compares
//! value, trap and fuel, so a vector is never copied per backend.
//! [`programs`] (no feature needed) holds small raw images the daemon's tests load.

#![warn(clippy::too_many_lines)]

pub mod bytes;
#[cfg(feature = "ebpf")]
pub mod conformance;
#[cfg(feature = "ebpf")]
pub mod engines;
#[cfg(feature = "ebpf")]
pub mod gen;
pub mod programs;
pub mod tools;
#[cfg(feature = "ebpf")]
pub mod vectors;
