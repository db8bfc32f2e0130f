//! csx-testkit: what the eBPF tests share.
//!
//! [`engines`] lists every engine; [`conformance`] reads the bpf_conformance suite in
//! place from `../shared/conformance`; [`vectors`] reads our own `.data` vectors from
//! `tests/vectors`. One runner drives every vector through every engine and compares
//! value, trap and fuel, so a vector is never copied per backend.

pub mod conformance;
pub mod engines;
pub mod gen;
pub mod vectors;
