//! The `csx` command line: a thin clap layer over csx-host and csx-ebpf.
//!
//! Each command group is one module with an `Args` type (clap derive) and a `run`
//! function returning the process's exit status; this file only parses, dispatches and
//! turns errors into exit codes. To add a group `foo`: write `src/foo.rs` with
//! `pub struct FooArgs` and `pub fn run(args: FooArgs, global: &GlobalArgs)`, then add a
//! variant to [`Command`] and an arm to [`run`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod array_cmd;
mod build_cmd;
mod connect;
mod data_cmd;
mod demo;
mod device_cmd;
mod engine_arg;
mod exec;
mod files;
mod fs_cmd;
mod gen_cmd;
mod hex;
mod interrupt;
mod lambda_cmd;
mod op_cmd;
mod program_cmd;
mod sdk_cmd;
mod serve;
mod ssb_cmd;
mod vm;

/// Exit statuses, the same for every command. Listed in `csx --help`.
pub mod exit {
    /// The command did what it was asked.
    pub const SUCCESS: u8 = 0;
    /// An operating error: unreadable file, bad input, a program the loader or verifier
    /// rejected, a benchmark whose engines disagree.
    pub const ERROR: u8 = 1;
    /// The command line itself is wrong (clap's own status).
    pub const USAGE: u8 = 2;
    /// The eBPF program ran and trapped, or was stopped by one of its limits: out of
    /// fuel or past its time limit.
    pub const TRAP: u8 = 3;
    /// Ctrl-C: what the command started on the device was aborted (128 + SIGINT).
    pub const INTERRUPTED: u8 = 130;
}

const EXIT_HELP: &str = "\
Exit status:
  0  success
  1  error: unreadable file, bad input, program rejected by the loader or verifier,
     engines that disagree in a benchmark
  2  bad command line
  3  the eBPF program trapped (out-of-bounds access, ...) or was stopped by a limit
     (fuel exhausted, past its time limit)
  130  interrupted by Ctrl-C (csx exec, csx read abort their program on the device)";

/// csx: a computational storage device in software.
///
/// Hosts load eBPF programs (C compiled with `clang -O2 -target bpf`) into a device and
/// run them next to the data. `csx vm` runs and inspects programs locally, without a
/// device; `csx bench` measures the VM.
#[derive(Debug, Parser)]
#[command(name = "csx", version, after_help = EXIT_HELP)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Options every command accepts.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Device to talk to: a state directory (an embedded device), `shm://NAME` or
    /// `tcp://HOST:PORT`; default: $CSX_DEVICE, else a per-user device created on
    /// first use in ~/.local/share/csx/device (device commands only).
    #[arg(long, global = true, env = "CSX_DEVICE", value_name = "URI")]
    pub device: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run, disassemble and test eBPF programs on the local VM (no device needed).
    Vm(vm::VmArgs),
    /// Measure csx (the VM's engines against native code and other runtimes).
    Bench(csx_bench::BenchArgs),
    /// Create devices (`csx device init`) and serve them (`csx device serve`).
    Device(device_cmd::DeviceArgs),
    /// Arrays of devices: one namespace, tagged block addresses (`csx array init`).
    Array(array_cmd::ArrayArgs),
    /// Sort an array file across its members (distributed merge sort, INSTANT).
    Sort(array_cmd::SortArgs),
    /// Describe the device: namespaces, engines, limits.
    Info(device_cmd::InfoArgs),
    /// List the device's registered functions (what programs may call).
    Functions(device_cmd::FunctionsArgs),
    /// Copy a local file onto the device.
    Put(files::PutArgs),
    /// Copy a device file to a local file.
    Get(files::GetArgs),
    /// List device files.
    Ls(files::LsArgs),
    /// Show a device file's size and extents.
    Stat(files::StatArgs),
    /// Delete a device file.
    Rm(files::RmArgs),
    /// Flush the device: everything written so far becomes durable.
    Sync(files::SyncArgs),
    /// Run a program on the device over a device file.
    Exec(exec::ExecArgs),
    /// Programs kept on the device by name: `csx program {load,list,unload}`.
    Program(program_cmd::ProgramArgs),
    /// Run every workload on the host and on a device; compare answers, time and bytes.
    Demo(demo::DemoArgs),
    /// Generate seeded, reproducible test data.
    Gen(gen_cmd::GenArgs),
    /// The Star Schema Benchmark on the device (`csx ssb run Q3.3 --sf 1`).
    Ssb(ssb_cmd::SsbArgs),
    /// Compile a C program for the device and check it against the function table.
    Build(build_cmd::BuildArgs),
    /// The C SDK (`csx sdk header`).
    Sdk(sdk_cmd::SdkArgs),
    /// Run a λ over a device file chunk by chunk, on the host, the device or either.
    Read(lambda_cmd::ReadArgs),
    /// Run a λ over a local file and write its outputs to a device file.
    Write(lambda_cmd::WriteArgs),
    /// The host page cache of the device's image (`csx cache drop`).
    Cache(lambda_cmd::CacheArgs),
    // The help of these two is their Args' doc comment.
    Mount(fs_cmd::MountArgs),
    Umount(fs_cmd::UmountArgs),
    /// The device's operators (Metal FS): `csx op list`.
    Op(op_cmd::OpArgs),
    Pipe(op_cmd::PipeArgs),
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Vm(args) => vm::run(args, &cli.global),
        Command::Bench(args) => csx_bench::run(args, &|| connect::device_uri(&cli.global)),
        Command::Device(args) => device_cmd::run_device(args),
        Command::Array(args) => array_cmd::run(args),
        Command::Sort(args) => array_cmd::run_sort(args, &cli.global),
        Command::Info(args) => device_cmd::run_info(args, &cli.global),
        Command::Functions(args) => device_cmd::run_functions(args, &cli.global),
        Command::Put(args) => files::run_put(args, &cli.global),
        Command::Get(args) => files::run_get(args, &cli.global),
        Command::Ls(args) => files::run_ls(args, &cli.global),
        Command::Stat(args) => files::run_stat(args, &cli.global),
        Command::Rm(args) => files::run_rm(args, &cli.global),
        Command::Sync(args) => files::run_sync(args, &cli.global),
        Command::Exec(args) => exec::run(args, &cli.global),
        Command::Program(args) => program_cmd::run(args, &cli.global),
        Command::Demo(args) => demo::run(args, &cli.global),
        Command::Gen(args) => gen_cmd::run(args, &cli.global),
        Command::Ssb(args) => ssb_cmd::run_cmd(args, &cli.global),
        Command::Build(args) => build_cmd::run(args, &cli.global),
        Command::Sdk(args) => sdk_cmd::run(args, &cli.global),
        Command::Read(args) => lambda_cmd::run_read(args, &cli.global),
        Command::Write(args) => lambda_cmd::run_write(args, &cli.global),
        Command::Cache(args) => lambda_cmd::run_cache(args, &cli.global),
        Command::Mount(args) => fs_cmd::run_mount(args, &cli.global),
        Command::Umount(args) => fs_cmd::run_umount(args),
        Command::Op(args) => op_cmd::run_op(args),
        Command::Pipe(args) => op_cmd::run_pipe(args, &cli.global),
    }
}

/// Raises the soft limit on open files to the hard limit: an array holds files open on
/// every member, and the usual soft limit of 1024 runs out near 500 members while the
/// hard limit is far higher. Best effort: a failure leaves the limit as it was, and an
/// open that then runs out says so in its own error.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum) {
        if current < maximum {
            let _ = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(maximum),
                    maximum: Some(maximum),
                },
            );
        }
    }
}

fn main() -> ExitCode {
    raise_open_file_limit();
    let cli = Cli::parse();
    match run(cli) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("csx: error: {}", connect::error_line(&e));
            ExitCode::from(exit::ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_statuses_are_the_cli_s() {
        assert_eq!(csx_bench::exit::SUCCESS, exit::SUCCESS);
        assert_eq!(csx_bench::exit::ERROR, exit::ERROR);
    }

    #[test]
    fn usage_status_is_clap_s() {
        let e = Cli::try_parse_from(["csx", "vm", "run"]).expect_err("PROG is required");
        assert_eq!(e.exit_code(), i32::from(exit::USAGE));
    }
}
