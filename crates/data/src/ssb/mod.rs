//! The Star Schema Benchmark: its generator ([`gen`]), the queries csx runs
//! ([`queries`]: flights 1 and 3) and their execution on the device and on the host
//! ([`run`]).

pub mod gen;
pub mod queries;
pub mod run;
