//! The Star Schema Benchmark: its generator ([`gen`]).

pub mod gen;
