//! `csx bench`: measurements of csx, each a subcommand in its own module.
//!
//! Every benchmark prints a human table by default and one JSON object with `--json`,
//! and times work with [`measure`] so numbers from different benchmarks mean the same.

use clap::{Args, Subcommand};

use crate::GlobalArgs;

mod device;
mod lambda;
mod latency;
pub mod measure;
pub mod plot;
mod vm;
mod workloads;

/// Measure csx.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    Vm(vm::VmBenchArgs),
    Device(device::DeviceBenchArgs),
    Latency(latency::LatencyBenchArgs),
    Lambda(lambda::LambdaBenchArgs),
    Workloads(workloads::WorkloadsBenchArgs),
}

pub fn run(args: BenchArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    match args.command {
        BenchCommand::Vm(a) => vm::run(a),
        BenchCommand::Device(a) => device::run(a),
        BenchCommand::Latency(a) => latency::run(a, global),
        BenchCommand::Lambda(a) => lambda::run(a),
        BenchCommand::Workloads(a) => workloads::run(a),
    }
}
