//! `csx vm`: run, disassemble and conformance-test eBPF programs on the local VM.
//!
//! Every command goes the same way: read the program (an ELF object from clang, or raw
//! bytecode), load it against the helper table, verify it, build an engine (the
//! interpreter or the Cranelift JIT), and run it with one memory region: r1 is its
//! virtual address, r2 its length. Until device functions exist here, the helper table
//! is the conformance suite's (helper 5 returns its first argument).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use csx_ebpf::count::ExecCounts;
use csx_ebpf::engine::{Engine, RunOptions, RunOutcome};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::limits::FUEL_DEFAULT;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::{Program, VerifiedProgram};
use csx_ebpf::trap::Trap;
use serde::Serialize;

use crate::{exit, hex};

/// Run, disassemble and test eBPF programs locally.
#[derive(Debug, Args)]
pub struct VmArgs {
    #[command(subcommand)]
    command: VmCommand,
}

#[derive(Debug, Subcommand)]
enum VmCommand {
    Run(RunArgs),
    Disasm(DisasmArgs),
    ConformancePlugin(PluginArgs),
}

pub use csx_bench::engine::{build_engine, verify_program, EngineKind};

use crate::engine_arg::{Engine as EngineArg, EngineChoice};

/// The VM's engine kind for a chosen engine.
fn engine_kind(e: EngineArg) -> EngineKind {
    match e {
        EngineArg::Interp => EngineKind::Interp,
        EngineArg::Jit => EngineKind::Jit,
        EngineArg::Quick => EngineKind::Quick,
    }
}

/// Run a program and print r0 (in hex), or the trap
///
/// PROG is an ELF object (`clang -O2 -target bpf -c prog.c`) or raw bytecode (8-byte
/// little-endian slots). The program starts with r1 = the address of the memory
/// (mapped read-write; empty unless --mem-file or --mem-hex) and r2 = its length.
/// Helper 5 returns its first argument (the bpf_conformance helper); no other helpers
/// exist yet.
///
/// Examples:
///   csx vm run sum.o --mem-hex '0100000000000000 0200000000000000'
///   csx vm run filter.o --entry filter --mem-file records.bin --runs 1000 --json
///   csx vm run sum.o --mem-file values.bin --count
///   csx vm run sum.o --mem-file values.bin --runs 100 --time-counted
#[derive(Debug, Args)]
#[command(verbatim_doc_comment, after_help = RUN_EXIT_HELP)]
struct RunArgs {
    /// The program: an ELF object or raw bytecode (detected by the ELF magic).
    #[arg(value_name = "PROG")]
    prog: PathBuf,
    /// In an ELF object, the program to run: a function symbol or a section name
    /// (needed when the object holds more than one).
    #[arg(long, value_name = "NAME")]
    entry: Option<String>,
    /// Memory the program gets in r1/r2: the bytes of this file.
    #[arg(long, value_name = "F", conflicts_with = "mem_hex")]
    mem_file: Option<PathBuf>,
    /// Memory the program gets in r1/r2, as hex ("01 02 ff" or "0102ff").
    #[arg(long, value_name = "HEX")]
    mem_hex: Option<String>,
    #[command(flatten)]
    engine: EngineChoice,
    /// Fuel budget per run: charged at backward jumps and calls; running out is a trap.
    #[arg(long, value_name = "N", default_value_t = FUEL_DEFAULT)]
    fuel: u64,
    /// Time the program: one warm-up run, then N runs on the same memory (not reset
    /// between runs); prints the mean nanoseconds per run.
    #[arg(long, value_name = "N", group = "timed", value_parser = clap::value_parser!(u64).range(1..))]
    runs: Option<u64>,
    #[arg(long, hide = true, value_name = "N", group = "timed", value_parser = clap::value_parser!(u64).range(1..))]
    repeat: Option<u64>,
    /// Also count the instructions one run executes, per class (alu64, alu32, mul, div,
    /// load, store, atomic, jump, jump32, call), by basic block as every engine counts
    /// them (a trap counts its whole block); the count is one more, untimed, run on
    /// fresh memory. What the device's modelled compute time is priced from.
    #[arg(long)]
    count: bool,
    /// With --runs: every timed run (and the warm-up) counts its instructions too, so
    /// ns_per_run is the counted runs' time; run the same command without this flag to
    /// see what counting costs an engine.
    #[arg(long, requires = "timed")]
    time_counted: bool,
    /// Print one JSON object: r0, r0_hex, trap, fuel_used, engine, runs, ns_per_run,
    /// and with --count `work` (instructions per class and their total).
    #[arg(long)]
    json: bool,
}

const RUN_EXIT_HELP: &str = "\
Exit status: 0 the program returned (r0 printed); 1 error (unreadable file, bad memory
argument, program rejected by the loader or verifier); 2 bad command line; 3 the
program trapped (the trap, its pc and instruction are printed on stderr, or in the
JSON object with --json).";

/// Print a program's instructions in the assembler syntax.
///
/// The output is the text `csx_ebpf::asm` reads (the bpf_conformance `.data` syntax),
/// one instruction per line with its slot number.
#[derive(Debug, Args)]
struct DisasmArgs {
    /// The program: an ELF object or raw bytecode.
    #[arg(value_name = "PROG")]
    prog: PathBuf,
    /// In an ELF object, the program to print: a function symbol or a section name.
    #[arg(long, value_name = "NAME")]
    entry: Option<String>,
}

/// Act as a bpf_conformance plugin
///
/// The bpf_conformance runner starts its plugin as `PLUGIN MEM OPTIONS`: MEM is the
/// test's memory as hex bytes ("01  02  ...", possibly empty), OPTIONS the runner's
/// --plugin_options as one argument (possibly empty). The program comes on stdin in the
/// same hex form. The plugin runs it with r1 = the memory, r2 = its length and
/// helper 5 = identity, prints r0 in hex and exits 0; on any error or trap it prints the
/// reason on stderr and exits non-zero.
///
/// The runner takes a path, not a command line, so give it a two-line wrapper:
///   printf '#!/bin/sh\nexec csx vm conformance-plugin "$@"\n' > csx-plugin
///   chmod +x csx-plugin
///   bpf_conformance_runner --test_file_directory tests --plugin_path ./csx-plugin \
///     --plugin_options --interp
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
struct PluginArgs {
    /// The test's memory as hex bytes, whitespace ignored (may be empty).
    #[arg(value_name = "MEM")]
    memory: Option<String>,
    /// The runner's plugin options as one argument: empty, or an engine flag.
    #[arg(value_name = "OPTIONS", value_parser = parse_plugin_options)]
    options: Option<EngineKind>,
    #[command(flatten)]
    engine: EngineChoice,
}

/// Reads the runner's `--plugin_options` argument: empty means the default engine.
fn parse_plugin_options(text: &str) -> Result<EngineKind, String> {
    match text.trim() {
        "" | "--jit" => Ok(EngineKind::Jit),
        "--interp" => Ok(EngineKind::Interp),
        "--quick" => Ok(EngineKind::Quick),
        other => Err(format!(
            "unknown plugin options {other:?}, expected --interp, --jit or --quick"
        )),
    }
}

pub fn run(args: VmArgs) -> anyhow::Result<u8> {
    match args.command {
        VmCommand::Run(a) => run_program(a),
        VmCommand::Disasm(a) => disasm(a),
        VmCommand::ConformancePlugin(a) => conformance_plugin(a),
    }
}

/// Whether `bytes` start with the ELF magic.
fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Loads a program from `bytes` (ELF or raw bytecode); `label` names it in errors.
pub fn load_program(
    label: &str,
    bytes: &[u8],
    entry: Option<&str>,
    functions: &FunctionTable,
) -> anyhow::Result<Program> {
    if is_elf(bytes) {
        csx_ebpf::loader::load_elf(bytes, entry, functions)
            .with_context(|| format!("loading ELF object {label}"))
    } else {
        if let Some(name) = entry {
            bail!("{label} is raw bytecode, not an ELF object: --entry {name} does not apply");
        }
        csx_ebpf::loader::load_raw(label, bytes)
            .with_context(|| format!("loading raw bytecode {label}"))
    }
}

/// Runs `engine` once with `memory` mapped read-write at the first embedder region.
pub fn run_with_memory(engine: &dyn Engine, memory: &mut [u8], fuel: u64) -> RunOutcome {
    run_counted_opt(engine, memory, fuel, None)
}

/// [`run_with_memory`], counting executed blocks into `counts`.
fn run_counted(
    engine: &dyn Engine,
    memory: &mut [u8],
    fuel: u64,
    counts: &ExecCounts,
) -> RunOutcome {
    run_counted_opt(engine, memory, fuel, Some(counts))
}

fn run_counted_opt(
    engine: &dyn Engine,
    memory: &mut [u8],
    fuel: u64,
    counts: Option<&ExecCounts>,
) -> RunOutcome {
    let len = memory.len() as u64;
    let mut map = MemoryMap::new();
    let addr = map
        .map_read_write(RegionIdx::EMBEDDER_FIRST, memory)
        .expect("callers check the memory against the region size limit");
    engine.run(
        &mut map,
        [addr, len, 0, 0, 0],
        &RunOptions {
            fuel,
            counts,
            ..RunOptions::default()
        },
        &mut ConformanceHost,
    )
}

/// Rejects memory the region table cannot map, with a message naming its source.
fn check_memory_size(label: &str, memory: &[u8]) -> anyhow::Result<()> {
    let limit = csx_ebpf::limits::REGION_SIZE_MAX;
    if memory.len() as u64 > limit {
        bail!(
            "{label} is {} bytes, the largest region is {limit} bytes",
            memory.len()
        );
    }
    Ok(())
}

/// Reads a memory file, at most what one region can map: a longer file is refused
/// from its size, and one whose size is not known (a pipe, /dev/zero) once one byte
/// past the limit is read, naming the limit either way.
fn read_memory_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    read_bounded(path, csx_ebpf::limits::REGION_SIZE_MAX)
}

fn read_bounded(path: &Path, limit: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let context = || format!("reading memory file {}", path.display());
    let too_big = || {
        anyhow::anyhow!(
            "memory file {} has more than {limit} bytes, the most the VM maps in one region",
            path.display()
        )
    };
    let mut file = std::fs::File::open(path).with_context(context)?;
    let meta = file.metadata().with_context(context)?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_big());
    }
    let mut memory = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(memory),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(context),
        };
        if memory.len() as u64 + n as u64 > limit {
            return Err(too_big());
        }
        // Growing toward the limit (4 GiB) may ask for more than this host grants: that
        // is an error naming the file and the size, not an abort.
        memory.try_reserve(n).map_err(|_| {
            anyhow::anyhow!(
                "memory file {}: cannot hold {} bytes of it in memory on this host (the VM maps at most {limit})",
                path.display(),
                memory.len() + n
            )
        })?;
        memory.extend_from_slice(&buf[..n]);
    }
}

fn read_file(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))
}

/// A trap as printed: the fault, its pc and the instruction there.
#[derive(Debug, Serialize)]
struct TrapReport {
    pc: u32,
    message: String,
    insn: String,
}

impl TrapReport {
    fn new(trap: &Trap, program: &VerifiedProgram) -> TrapReport {
        TrapReport {
            pc: trap.pc,
            message: trap.kind.to_string(),
            insn: csx_ebpf::disasm::format_insn(program.insns(), trap.pc as usize),
        }
    }
}

impl std::fmt::Display for TrapReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trap at pc {} (`{}`): {}",
            self.pc, self.insn, self.message
        )
    }
}

/// The `--json` output of `csx vm run`.
#[derive(Debug, Serialize)]
struct RunReport {
    engine: EngineKind,
    r0: Option<u64>,
    r0_hex: Option<String>,
    trap: Option<TrapReport>,
    fuel_used: u64,
    runs: u64,
    ns_per_run: Option<f64>,
    /// Whether the timed runs counted their instructions (--time-counted).
    counted: bool,
    /// Instructions per class and `total`, with --count.
    #[serde(skip_serializing_if = "Option::is_none")]
    work: Option<serde_json::Value>,
}

fn run_program(args: RunArgs) -> anyhow::Result<u8> {
    let label = args.prog.display().to_string();
    let bytes = read_file(&args.prog, "program")?;
    let mut memory = initial_memory(&args)?;
    let functions = Arc::new(FunctionTable::conformance());
    let program = load_program(&label, &bytes, args.entry.as_deref(), &functions)?;
    let program = verify_program(&label, program, functions)?;
    let kind = args.engine.chosen().map_or(EngineKind::Jit, engine_kind);
    let (engine, _) = build_engine(kind, program)?;

    // With --count, a counted run first, on its own copy of the memory.
    let work = args
        .count
        .then(|| count_work(engine.as_ref(), &memory, args.fuel));
    // One run, or a warm-up followed by `repeat` timed runs; with --time-counted every
    // one of them counts (into one buffer, reset before each run).
    let timed_counts = args
        .time_counted
        .then(|| ExecCounts::new(engine.program().blocks()));
    let run_once = |memory: &mut [u8]| match &timed_counts {
        Some(counts) => {
            counts.reset();
            run_counted(engine.as_ref(), memory, args.fuel, counts)
        }
        None => run_with_memory(engine.as_ref(), memory, args.fuel),
    };
    let mut outcome = run_once(&mut memory);
    let mut ns_per_run = None;
    let mut runs = 1;
    // Repeated runs stop at the first trap (the warm-up's included), which is reported.
    let repeat = match args.repeat {
        Some(n) => {
            eprintln!("csx: vm run --repeat is deprecated; use --runs");
            Some(n)
        }
        None => args.runs,
    };
    if let (Some(repeat), true) = (repeat, outcome.result.is_ok()) {
        let (last, timed, ns) = timed_runs(repeat, || run_once(&mut memory));
        outcome = last;
        runs += timed;
        ns_per_run = Some(ns);
    }

    let trap = outcome
        .result
        .as_ref()
        .err()
        .map(|t| TrapReport::new(t, engine.program()));
    let r0 = outcome.result.as_ref().ok().copied();
    let report = RunReport {
        engine: kind,
        r0,
        r0_hex: r0.map(|v| format!("{v:#x}")),
        trap,
        fuel_used: outcome.fuel_used,
        runs,
        ns_per_run,
        counted: args.time_counted,
        work: work.map(|w| crate::exec::work_json(&w.0)),
    };
    print_run_report(&report, args.json)?;
    Ok(if report.trap.is_some() {
        exit::TRAP
    } else {
        exit::SUCCESS
    })
}

/// The program's memory: --mem-file's bytes, --mem-hex's, or none.
fn initial_memory(args: &RunArgs) -> anyhow::Result<Vec<u8>> {
    let memory = match (&args.mem_file, &args.mem_hex) {
        (Some(path), _) => read_memory_file(path)?,
        (None, Some(text)) => hex::parse(text).context("parsing --mem-hex")?,
        (None, None) => Vec::new(),
    };
    check_memory_size("the memory", &memory)?;
    Ok(memory)
}

/// The instructions per class of one counted run, on a copy of `memory`.
fn count_work(engine: &dyn Engine, memory: &[u8], fuel: u64) -> csx_ebpf::count::WorkCounts {
    let blocks = engine.program().blocks();
    let counts = ExecCounts::new(blocks);
    let mut copy = memory.to_vec();
    run_counted(engine, &mut copy, fuel, &counts);
    blocks.work(&counts.values())
}

/// Up to `repeat` timed runs, stopping after the first that traps: the last run's
/// outcome, the runs made and the mean ns per run.
fn timed_runs(repeat: u64, mut run: impl FnMut() -> RunOutcome) -> (RunOutcome, u64, f64) {
    let started = Instant::now();
    let mut timed = 0;
    loop {
        let outcome = run();
        timed += 1;
        if timed >= repeat || outcome.result.is_err() {
            return (
                outcome,
                timed,
                started.elapsed().as_nanos() as f64 / timed as f64,
            );
        }
    }
}

fn print_run_report(report: &RunReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", crate::output::Json(report));
        return Ok(());
    }
    match (&report.r0_hex, &report.trap) {
        (Some(hex), _) => println!("{hex}"),
        (None, Some(trap)) => eprintln!(
            "csx: {trap} (fuel used {}){}",
            report.fuel_used,
            if report.runs > 1 {
                format!("; stopped at run {} of the repeated runs", report.runs)
            } else {
                String::new()
            }
        ),
        (None, None) => unreachable!("a run returns a value or traps"),
    }
    if let Some(serde_json::Value::Object(w)) = &report.work {
        let classes: Vec<String> = w
            .iter()
            .filter(|(c, n)| *c != "total" && n.as_u64() != Some(0))
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        println!(
            "executed {} instructions: {}",
            w.get("total").map_or(0, |t| t.as_u64().unwrap_or(0)),
            classes.join(", ")
        );
    }
    if let (Some(ns), None) = (report.ns_per_run, &report.trap) {
        println!(
            "{ns:.1} ns/run (mean of {} {}runs after 1 warm-up, {})",
            report.runs - 1,
            if report.counted { "counted " } else { "" },
            report.engine.name()
        );
    }
    Ok(())
}

fn disasm(args: DisasmArgs) -> anyhow::Result<u8> {
    let label = args.prog.display().to_string();
    let bytes = read_file(&args.prog, "program")?;
    // Against the device's function table, so an object calling device functions
    // loads, and each call to one is named.
    let functions = csx_device::functions::function_table();
    let program = load_program(&label, &bytes, args.entry.as_deref(), &functions)?;
    println!(
        "; {} ({} slots, entry at slot {})",
        program.name,
        program.insns.len(),
        program.entry
    );
    for (n, g) in program.globals.iter().enumerate() {
        let access = if g.writable {
            "read-write"
        } else {
            "read-only"
        };
        println!(
            "; global {n}: {} ({} bytes, {access})",
            g.name,
            g.data.len()
        );
    }
    print!(
        "{}",
        name_calls(&csx_ebpf::disasm::disassemble(&program.insns), &functions)
    );
    Ok(exit::SUCCESS)
}

/// `text` (a disassembly) with `# <name>` after each `call N` of a function in
/// `functions`.
fn name_calls(text: &str, functions: &FunctionTable) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        out.push_str(line);
        let id = line
            .split_once(": call ")
            .and_then(|(_, rest)| rest.trim().parse::<u32>().ok());
        if let Some(sig) = id.and_then(|id| functions.get(id)) {
            out.push_str("  # ");
            out.push_str(&sig.name);
        }
        out.push('\n');
    }
    out
}

/// The bpf_conformance plugin protocol (see `PluginArgs`).
fn conformance_plugin(args: PluginArgs) -> anyhow::Result<u8> {
    let mut memory = match &args.memory {
        Some(text) => hex::parse(text).context("parsing the memory argument")?,
        None => Vec::new(),
    };
    check_memory_size("the memory", &memory)?;
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the program from stdin")?;
    let code = hex::parse(&text).context("parsing the program on stdin")?;

    let functions = Arc::new(FunctionTable::conformance());
    let program = load_program("stdin", &code, None, &functions)?;
    let program = verify_program("stdin", program, functions)?;
    let kind = if let Some(e) = args.engine.chosen_quietly() {
        engine_kind(e)
    } else {
        args.options.unwrap_or(EngineKind::Jit)
    };
    let (engine, _) = build_engine(kind, program)?;
    let outcome = run_with_memory(engine.as_ref(), &mut memory, FUEL_DEFAULT);
    match outcome.result {
        Ok(r0) => {
            println!("{r0:x}");
            Ok(exit::SUCCESS)
        }
        Err(trap) => {
            let report = TrapReport::new(&trap, engine.program());
            eprintln!("csx: {report}");
            Ok(exit::TRAP)
        }
    }
}
