//! csx-workloads: the device programs of the seeds' workloads, with everything needed to
//! build them, feed them and check them.
//!
//! * [`sdk`]: the C header `sdk/include/csx.h`, generated from a device's function table
//!   (`csx sdk header`).
//! * [`compile`]: clang to eBPF objects, cached, and the load-and-verify check of an
//!   object against a device's functions (`csx build`).
//! * [`gen`]: seeded, reproducible, streaming data generators (`csx gen`).
//! * [`workloads`]: the table of workloads (λ-IO's stats64, stats32, knn, grep and
//!   bitmap; Metal FS's filter and aggregate, fused and chained; Delilah's file read
//!   and three selection filters): program, dataset, set-up, reference.
//! * [`reference`]: the host-side implementations the programs must match byte for byte.
//! * [`run`]: running a workload on a device through `csx-host`.
//!
//! The programs' sources are `sdk/programs/*.c`, embedded here so an installed binary
//! can build them. Each states its contract (windows, cparams, params, output, r0) in
//! its header comment; they follow λ-IO's convention where it applies: window 0 is the
//! input, window 1 the output, r0 the output's length in bytes or a negative `CSX_E*`.
//!
//! Invariant: for every workload, seed and input, the device's answer (interpreter and
//! JIT) equals `reference` exactly, r0 included (`tests/it/equivalence.rs`).

#![warn(clippy::too_many_lines)]

pub mod compile;
pub mod gen;
pub mod reference;
pub mod run;
pub mod sdk;
pub mod workloads;

pub use compile::{program, BuildError, Compiler};
pub use run::{read_file_timed, DeviceRun, PhaseTime, Phases, RunError, Runner};
pub use workloads::{by_name, Case, Invocation, Origin, Outcome, Shape, Workload, WORKLOADS};
