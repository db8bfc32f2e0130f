//! The `csx` command line: a thin clap layer over csx-host and csx-ebpf.
//!
//! Each command group is one module with an `Args` type (clap derive) and a `run`
//! function returning the process's exit status; this file only parses, dispatches and
//! turns errors into exit codes. To add a group `foo`: write `src/foo.rs` with
//! `pub struct FooArgs` and `pub fn run(args: FooArgs, global: &GlobalArgs)`, then add a
//! variant to [`Command`] and an arm to [`dispatch`].

#![warn(clippy::too_many_lines)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod array_cmd;
mod build_cmd;
mod connect;
mod data_cmd;
mod demo;
mod device_cmd;
mod docs;
mod engine_arg;
mod exec;
mod files;
mod fs_cmd;
mod gen_cmd;
mod hex;
mod interrupt;
mod lambda_cmd;
mod op_cmd;
mod output;
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
pub struct Cli {
    /// Print what the command prints as one compact JSON document.
    #[arg(long, global = true)]
    json: bool,
    /// With --json: an indented document.
    #[arg(long, global = true)]
    pretty: bool,
    /// The old place of --device, before the command (deprecated: after it).
    #[arg(
        long = "device",
        id = "device_before_command",
        hide = true,
        value_name = "URI"
    )]
    device: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// The device a command talks to (from its `--device`, else `$CSX_DEVICE`, else the
/// per-user device: see `connect`).
#[derive(Debug, Clone, Default)]
pub struct GlobalArgs {
    pub device: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    // Porcelain: files and programs on a device.
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
    // Noun groups.
    /// Devices: create, serve and describe them (`csx device {init,serve,info,functions}`).
    Device(device_cmd::DeviceArgs),
    /// Arrays of devices: one namespace, tagged block addresses (`csx array {init,info,sort}`).
    Array(array_cmd::ArrayArgs),
    /// Programs kept on the device by name: `csx program {load,list,unload}`.
    Program(program_cmd::ProgramArgs),
    /// λ-IO: a λ over device files, on the host or the device (`csx lambda {read,write,cache-drop}`).
    Lambda(lambda_cmd::LambdaGroupArgs),
    /// The device's files through FUSE (`csx fs {mount,umount}`).
    Fs(fs_cmd::FsArgs),
    /// The device's operators (Metal FS): `csx op {list,pipe}`.
    Op(op_cmd::OpArgs),
    /// Run, disassemble and test eBPF programs on the local VM (no device needed).
    Vm(vm::VmArgs),
    /// Measure csx (the VM's engines against native code and other runtimes).
    Bench(csx_bench::BenchArgs),
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
    /// Shell completions (bash, zsh, fish) and man pages, from these definitions.
    Completions(docs::CompletionsArgs),
    /// Write the man pages (csx.1, csx-put.1, ...) into a directory.
    #[command(hide = true)]
    Man(docs::ManArgs),
    // Old spellings: hidden, each with a one-line deprecation note.
    #[command(flatten)]
    Old(OldCommand),
}

/// The old spellings of commands now in a group: hidden, each with a one-line
/// deprecation note.
#[derive(Debug, Subcommand)]
enum OldCommand {
    #[command(hide = true)]
    Info(device_cmd::InfoArgs),
    #[command(hide = true)]
    Functions(device_cmd::FunctionsArgs),
    #[command(hide = true)]
    Sort(array_cmd::SortArgs),
    #[command(hide = true)]
    Read(lambda_cmd::ReadArgs),
    #[command(hide = true)]
    Write(lambda_cmd::WriteArgs),
    #[command(hide = true)]
    Cache(lambda_cmd::CacheArgs),
    #[command(hide = true)]
    Mount(fs_cmd::MountArgs),
    #[command(hide = true)]
    Umount(fs_cmd::UmountArgs),
    #[command(hide = true)]
    Pipe(op_cmd::OldPipeArgs),
}

/// The one-line note of an old command spelling.
fn renamed(old: &str, new: &str) {
    eprintln!("csx: `csx {old}` is deprecated; use `csx {new}`");
}

impl Command {
    /// Whether this command talks to a device (takes `--device`).
    fn takes_device(&self) -> bool {
        !matches!(
            self,
            Command::Vm(_)
                | Command::Gen(_)
                | Command::Completions(_)
                | Command::Man(_)
                | Command::Old(OldCommand::Umount(_))
        )
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    output::set_pretty(cli.pretty);
    if cli.device.is_some() {
        if !cli.command.takes_device() {
            use clap::CommandFactory;
            Cli::command()
                .error(
                    clap::error::ErrorKind::UnknownArgument,
                    "this command takes no device: unexpected argument '--device'",
                )
                .exit();
        }
        eprintln!("csx: --device before the command is deprecated; put it after the command");
        connect::set_device_before_command(cli.device);
    }
    dispatch(cli.command)
}

/// Runs the command: each porcelain verb with its device, each group by its module.
fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Put(a) => {
            let g = a.dev.global();
            files::run_put(a, &g)
        }
        Command::Get(a) => {
            let g = a.dev.global();
            files::run_get(a, &g)
        }
        Command::Ls(a) => {
            let g = a.dev.global();
            files::run_ls(a, &g)
        }
        Command::Stat(a) => {
            let g = a.dev.global();
            files::run_stat(a, &g)
        }
        Command::Rm(a) => {
            let g = a.dev.global();
            files::run_rm(a, &g)
        }
        Command::Sync(a) => {
            let g = a.dev.global();
            files::run_sync(a, &g)
        }
        Command::Exec(a) => {
            let g = a.dev.global();
            exec::run(a, &g)
        }
        Command::Program(a) => {
            let g = a.dev.global();
            program_cmd::run(a, &g)
        }
        Command::Demo(a) => {
            let g = a.dev.global();
            demo::run(a, &g)
        }
        Command::Ssb(a) => {
            let g = a.dev.global();
            ssb_cmd::run_cmd(a, &g)
        }
        Command::Build(a) => {
            let g = a.dev.global();
            build_cmd::run(a, &g)
        }
        Command::Sdk(a) => {
            let g = a.dev.global();
            sdk_cmd::run(a, &g)
        }
        Command::Device(a) => device_cmd::run_device(a),
        Command::Array(a) => array_cmd::run(a),
        Command::Lambda(a) => lambda_cmd::run_group(a),
        Command::Fs(a) => fs_cmd::run_group(a),
        Command::Op(a) => op_cmd::run_op(a),
        Command::Vm(a) => vm::run(a),
        Command::Bench(a) => csx_bench::run(a, &|| {
            connect::device_uri(&connect::DeviceArg::default().global())
        }),
        Command::Gen(a) => gen_cmd::run(a),
        Command::Completions(a) => docs::run_completions(a),
        Command::Man(a) => docs::run_man(a),
        Command::Old(old) => run_old(old),
    }
}

/// Runs an old spelling, after its deprecation note.
fn run_old(command: OldCommand) -> anyhow::Result<u8> {
    match command {
        OldCommand::Info(a) => {
            renamed("info", "device info");
            let g = a.dev.global();
            device_cmd::run_info(a, &g)
        }
        OldCommand::Functions(a) => {
            renamed("functions", "device functions");
            let g = a.dev.global();
            device_cmd::run_functions(a, &g)
        }
        OldCommand::Sort(a) => {
            renamed("sort", "array sort");
            let g = a.dev.global();
            array_cmd::run_sort(a, &g)
        }
        OldCommand::Read(a) => {
            renamed("read", "lambda read");
            let g = a.dev.global();
            lambda_cmd::run_read(a, &g)
        }
        OldCommand::Write(a) => {
            renamed("write", "lambda write");
            let g = a.dev.global();
            lambda_cmd::run_write(a, &g)
        }
        OldCommand::Mount(a) => {
            renamed("mount", "fs mount");
            let g = a.dev.global();
            fs_cmd::run_mount(a, &g)
        }
        OldCommand::Pipe(a) => {
            renamed("pipe", "op pipe");
            let g = a.dev.global();
            op_cmd::run_pipe(a.into(), &g)
        }
        OldCommand::Cache(a) => {
            renamed("cache drop", "lambda cache-drop");
            let g = a.dev.global();
            lambda_cmd::run_cache(a, &g)
        }
        OldCommand::Umount(a) => {
            renamed("umount", "fs umount");
            fs_cmd::run_umount(a)
        }
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

/// Whether a panic is the standard library's `println!` finding standard output closed:
/// the reader went away (`csx ... | head` read what it wanted), which ends a command as
/// quietly as SIGPIPE ends `cat`, not with a panic's message.
fn is_closed_stdout(payload: &(dyn std::any::Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    text.is_some_and(|t| t.starts_with("failed printing to stdout") && t.contains("Broken pipe"))
}

fn main() -> ExitCode {
    raise_open_file_limit();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_closed_stdout(info.payload()) {
            default_hook(info);
        }
    }));
    let cli = Cli::parse();
    // Unwinding from a closed standard output runs every destructor on the way (a file
    // being replaced is left whole, as after any failed command).
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli))) {
        Ok(Ok(status)) => ExitCode::from(status),
        Ok(Err(e)) => {
            eprintln!("csx: error: {}", connect::error_line(&e));
            ExitCode::from(exit::ERROR)
        }
        Err(payload) if is_closed_stdout(payload.as_ref()) => {
            ExitCode::from(csx_fs::shell::SIGPIPE_STATUS)
        }
        Err(payload) => std::panic::resume_unwind(payload),
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

/// The grammar every command keeps (see docs/cli.md): checked over every visible leaf.
#[cfg(test)]
mod grammar {
    use clap::CommandFactory;

    use super::*;

    /// Leaves that talk to no device, and so refuse `--device`.
    const NO_DEVICE: &[&str] = &[
        "device init",
        "device serve",
        "array init",
        "fs umount",
        "op list",
        "vm run",
        "vm disasm",
        "vm conformance-plugin",
        "gen",
        "completions",
        "bench array",
        "bench vm",
        "bench device",
        "bench lambda",
        "bench workloads",
        "bench mount",
        "bench pipelines",
        "bench ssb",
    ];

    /// Leaves whose output is text for people or programs other than a data document
    /// (logs, a file, a listing of source), and so need no `--json` of their own.
    const NO_JSON: &[&str] = &[
        "device serve",
        "rm",
        "fs mount",
        "fs umount",
        "vm disasm",
        "vm conformance-plugin",
        "sdk header",
        "completions",
        "lambda cache-drop",
        "op pipe",
        "program unload",
    ];

    /// Flags that are old spellings of another: none may be visible.
    const OLD_FLAGS: &[(&str, &str)] = &[
        ("repeat", "runs"),
        ("rounds", "runs"),
        ("state-dir", "state"),
        ("link-gbps", "link-bandwidth"),
        ("command-latency-us", "link-latency-us"),
        ("interp", "engine"),
        ("jit", "engine"),
        ("uri", "device"),
    ];

    fn leaves() -> Vec<(String, clap::Command)> {
        docs::leaves(&Cli::command())
            .into_iter()
            .map(|(w, c)| (w.join(" "), c))
            .collect()
    }

    #[test]
    fn a_command_takes_device_if_and_only_if_it_talks_to_one() {
        for (name, leaf) in leaves() {
            let has = leaf
                .get_arguments()
                .any(|a| a.get_long() == Some("device") && !a.is_hide_set());
            let talks = !NO_DEVICE.contains(&name.as_str());
            assert_eq!(has, talks, "`csx {name}`: --device declared: {has}");
        }
    }

    #[test]
    fn a_command_that_prints_data_has_its_own_json() {
        let mut missing = Vec::new();
        for (name, leaf) in leaves() {
            if NO_JSON.contains(&name.as_str()) {
                continue;
            }
            // The global --json reaches every command; a command that prints data reads
            // its own (a local `json` that the global one sets).
            let own = leaf
                .get_arguments()
                .any(|a| a.get_id() == "json" && !a.is_global_set());
            if !own {
                missing.push(name);
            }
        }
        assert!(
            missing.is_empty(),
            "print data without a --json of their own: {missing:?}"
        );
    }

    #[test]
    fn no_visible_flag_is_an_old_spelling() {
        let mut shown = Vec::new();
        for (name, leaf) in leaves() {
            for a in leaf.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some((old, new)) = OLD_FLAGS.iter().find(|(o, _)| a.get_long() == Some(o)) {
                    shown.push(format!(
                        "`csx {name}` shows --{old} (the one spelling: --{new})"
                    ));
                }
            }
        }
        assert!(shown.is_empty(), "{shown:#?}");
    }

    /// Where `leaf` (`csx {name}`) breaks the path rule: a device path is an argument or
    /// `--to DEVPATH`; a local file is `-o/--output FILE` (or `--input FILE` for a
    /// local input). A flag is read by its value name: DEVPATH names a device path,
    /// FILE or LOCAL a local file.
    fn path_rule_breaks(name: &str, leaf: &clap::Command) -> Vec<String> {
        let mut broken = Vec::new();
        for a in leaf.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(long) = a.get_long() else {
                continue; // an argument: device paths belong there
            };
            let value = a.get_value_names().map(|v| v.join(" ")).unwrap_or_default();
            let flag = format!("`csx {name}` --{long} {value}");
            if value.contains("DEVPATH") && long != "to" {
                broken.push(format!("{flag}: a device path is an argument or --to"));
            }
            let local = value.contains("FILE") || value.contains("LOCAL");
            let data = ["input", "output", "local"]
                .iter()
                .any(|w| long.contains(w));
            if local && data && long != "output" && long != "input" {
                broken.push(format!(
                    "{flag}: a local file is -o/--output (or --input for a local input)"
                ));
            }
            if long == "output" && a.get_short() != Some('o') {
                broken.push(format!(
                    "{flag}: --output is -o/--output FILE, a local file"
                ));
            }
        }
        broken
    }

    #[test]
    fn device_paths_are_arguments_or_to_and_local_files_are_output() {
        let broken: Vec<String> = leaves()
            .iter()
            .flat_map(|(name, leaf)| path_rule_breaks(name, leaf))
            .collect();
        assert!(broken.is_empty(), "{broken:#?}");
    }

    #[test]
    fn a_command_breaking_the_path_rule_fails_the_check() {
        use clap::Arg;
        let dev = |long: &'static str, value: &'static str| {
            clap::Command::new("x").arg(Arg::new(long).long(long).value_name(value))
        };
        let dev_output = clap::Command::new("x").arg(
            Arg::new("output")
                .short('o')
                .long("output")
                .value_name("DEVPATH"),
        );
        for bad in [
            dev("input", "DEVPATH"),
            dev_output,
            dev("output-local", "FILE"),
            dev("input-local", "FILE"),
            dev("output", "FILE"), // without -o
        ] {
            assert_eq!(path_rule_breaks("x", &bad).len(), 1, "{bad:?}");
        }
        let good = clap::Command::new("x")
            .arg(Arg::new("path").value_name("DEVPATH"))
            .arg(Arg::new("to").long("to").value_name("DEVPATH"))
            .arg(Arg::new("input").long("input").value_name("FILE"))
            .arg(
                Arg::new("output")
                    .short('o')
                    .long("output")
                    .value_name("FILE"),
            )
            .arg(
                Arg::new("old")
                    .long("input-dev")
                    .value_name("DEVPATH")
                    .hide(true),
            );
        assert_eq!(path_rule_breaks("x", &good), Vec::<String>::new());
    }

    #[test]
    fn a_command_without_a_device_refuses_device() {
        for words in [
            &["vm", "run", "p.o"][..],
            &["gen", "u64", "--size", "8"],
            &["op", "list"],
            &["fs", "umount", "/mnt"],
            &["bench", "vm"],
            &["device", "init", "--state", "d"],
            &["completions", "bash"],
        ] {
            let mut argv = vec!["csx"];
            argv.extend_from_slice(words);
            argv.extend(["--device", "x"]);
            let e = Cli::try_parse_from(&argv).expect_err(&words.join(" "));
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{words:?}"
            );
            assert!(e.to_string().contains("--device"), "{e}");
        }
        // And every device command takes it after its name.
        for words in [
            &["ls"][..],
            &["device", "info"],
            &["program", "list"],
            &["array", "sort", "/f"],
        ] {
            let mut argv = vec!["csx"];
            argv.extend_from_slice(words);
            argv.extend(["--device", "x"]);
            Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{words:?}: {e}"));
        }
    }

    #[test]
    fn json_given_before_the_command_reaches_it() {
        let cli = Cli::try_parse_from(["csx", "--json", "ls"]).unwrap();
        match cli.command {
            Command::Ls(a) => assert!(a.json_wanted()),
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["csx", "ls", "--json", "--pretty"]).unwrap();
        assert!(cli.pretty);
    }
}
