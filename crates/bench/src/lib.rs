//! csx-bench: `csx bench`, the measurements of csx, each a subcommand in its own module.
//! The `csx` binary parses the command line and calls [`run`].
//!
//! Every benchmark prints a human table by default and one JSON object with `--json`,
//! and times work with [`measure`] so numbers from different benchmarks mean the same.
//!
//! `build.rs` compiles the `csx bench vm` kernels (`sdk/bench/*.c`) with clang
//! (csx-build's one C-to-eBPF path); [`kernels`] lists them with their inputs.

#![warn(clippy::too_many_lines)]

use clap::{Args, Subcommand};

mod array;
mod capi;
mod device;
mod duckdb;
pub mod engine;
mod lambda;
mod latency;
pub mod measure;
mod media;
mod mount;
mod pipelines;
pub mod plot;
mod ssb;
mod vm;
mod workloads;

/// The `csx bench vm` kernels and their inputs, for a tool that runs one kernel alone
/// (`examples/kernel_run.rs`, under a profiler).
pub mod kernels {
    /// A kernel of `sdk/bench` as the bench runs it on the VM.
    #[derive(Clone, Copy, Debug)]
    pub struct Kernel {
        /// The file stem in `sdk/bench`.
        pub name: &'static str,
        /// The entry function's symbol in `bpf_object`.
        pub symbol: &'static str,
        /// The eBPF object `build.rs` compiled.
        pub bpf_object: &'static [u8],
    }

    /// Every built-in kernel, sorted by name.
    pub fn all() -> Vec<Kernel> {
        crate::vm::KERNELS
            .iter()
            .map(|k| Kernel {
                name: k.name,
                symbol: k.symbol,
                bpf_object: k.bpf_object,
            })
            .collect()
    }

    /// The bytes `csx bench vm` gives kernel `name` (full size), which it maps read-only
    /// with r1 their address and r2 their length.
    pub fn input(name: &str) -> Vec<u8> {
        crate::vm::make_input(name, crate::vm::Scale::Full)
            .bytes()
            .to_vec()
    }

    /// The kernels of a C file as `csx bench vm --kernels FILE` compiles them: every
    /// global function `u64 NAME(void *mem, u64 len)`.
    pub fn from_file(file: &std::path::Path) -> anyhow::Result<Vec<Kernel>> {
        Ok(crate::vm::user::compile(file)?
            .iter()
            .map(|k| Kernel {
                name: k.name,
                symbol: k.symbol,
                bpf_object: k.bpf_object,
            })
            .collect())
    }

    /// The bytes `csx bench vm --kernels FILE` gives its kernel `name` (full size).
    pub fn file_input(name: &str) -> Vec<u8> {
        crate::vm::user::input(name, crate::vm::Scale::Full)
            .bytes()
            .to_vec()
    }
}

/// Measure csx.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Device arrays: INSTANT's merge sort against the host-mediated baseline, modelled.
    Array(array::ArrayBenchArgs),
    Vm(vm::VmBenchArgs),
    Device(device::DeviceBenchArgs),
    Latency(latency::LatencyBenchArgs),
    Lambda(lambda::LambdaBenchArgs),
    Workloads(workloads::WorkloadsBenchArgs),
    Mount(mount::MountBenchArgs),
    Pipelines(pipelines::PipelinesBenchArgs),
    Ssb(ssb::SsbBenchArgs),
    Capi(capi::CapiBenchArgs),
}

/// The exit statuses a benchmark returns: the `csx` binary's (its `exit` module checks
/// they agree).
pub mod exit {
    /// The benchmark ran and its engines agreed.
    pub const SUCCESS: u8 = 0;
    /// An operating error, or engines that disagree.
    pub const ERROR: u8 = 1;
}

/// Runs one benchmark. `device` names the device `csx bench latency` measures (the
/// command line's `--device`, else the per-user device), asked only by that benchmark.
pub fn run(args: BenchArgs, device: &dyn Fn() -> anyhow::Result<String>) -> anyhow::Result<u8> {
    match args.command {
        BenchCommand::Array(a) => array::run(a),
        BenchCommand::Vm(a) => vm::run(a),
        BenchCommand::Device(a) => device::run(a),
        BenchCommand::Latency(a) => latency::run(a, device),
        BenchCommand::Lambda(a) => lambda::run(a),
        BenchCommand::Workloads(a) => workloads::run(a),
        BenchCommand::Mount(a) => mount::run(a),
        BenchCommand::Pipelines(a) => pipelines::run(a),
        BenchCommand::Ssb(a) => ssb::run_bench(a),
        BenchCommand::Capi(a) => capi::run(a),
    }
}
