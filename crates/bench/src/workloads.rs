//! `csx bench workloads`: every workload of `csx_workloads::WORKLOADS` on a fresh
//! embedded device, in the interpreter and the JIT, and natively on the host, with
//! Delilah's latency breakdown of each run.
//!
//! Cases, per workload (input generated once, written to a device file):
//! - `native`: the host's way. The input is read from the device file to the host
//!   (stage), then the workload's Rust reference (`csx_workloads::reference`, the same
//!   code the equivalence tests trust) computes the answer (execute). The C program is
//!   not compiled natively: the reference is what a host application would run.
//! - `interpreter`, `jit`: the offload. Program load, activation (verify, and compile
//!   for the JIT), staging the input from the media into device memory, execution and
//!   reading the answer back, each timed on the host (wall) and summed from the
//!   completions' modelled time (`Timing::modelled_ns`, from the profile given with
//!   `--profile`; the device is never throttled, so wall time is this machine's).
//!
//! Like for like, `native` and `jit` each run **cold** (the device's image dropped from
//! the host page cache before every run, so the host's read comes from the disk as the
//! device's uncached staging always does) and **warm** (the host's read served by the
//! page cache; the device, which has no cache, stages from its media again); the rows
//! say which in their `cache` column. The interpreter runs warm only.
//!
//! Each case runs `--runs` times (programs unloaded between runs, so every run loads and
//! activates) and every phase reports its median. Every run's answer is compared with
//! the reference; any difference is reported and makes the exit status 1.
//!
//! Not modelled (see `csx_device::perf`): a program's own file reads (the `file_read`
//! workload's staging is modelled here as the input's bytes over the profile's media
//! bandwidth), and the time inside registered functions such as `csx_filter_u32`, which
//! the model counts as one unit of fuel.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use csx_device::perf::PerfModel;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_lambda::{LambdaIo, LambdaOptions};
use csx_proto::EngineKind;
use csx_workloads::{
    read_file_timed, Case, Outcome, PhaseTime, Phases, Runner, Shape, Workload, WORKLOADS,
};

use super::plot::BarChart;
use crate::exit;
use csx_host::size::{format_size, parse_size};

/// Run every workload in the interpreter, the JIT and natively, phase by phase.
///
/// A fresh embedded device in a temporary directory; each workload's input (SIZE) is
/// generated onto it, then answered natively on the host (input read from the device,
/// Rust reference), and by its eBPF program in the interpreter and in the JIT (program
/// load, activation, staging, execution, result). All answers must agree.
///
/// Examples:
///   csx bench workloads                          # 8 MiB per workload, 3 runs
///   csx bench workloads --size 32MiB --plots docs/plots
///   csx bench workloads --json --only knn,grep
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct WorkloadsBenchArgs {
    /// Input bytes per workload (KiB, MiB, GiB); rounded down to whole records.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    size: u64,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per case; each phase reports its median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Performance profile of the modelled times: unthrottled, lambda-io or daisy.
    #[arg(long, default_value = "daisy")]
    profile: String,
    /// Only these workloads (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Run the device's executions uncounted (`count_work: false`), as a device whose
    /// profile prices fuel does: the execute column then times the uncounted code, and
    /// modelled compute comes from fuel instead of the instructions executed.
    #[arg(long)]
    uncounted: bool,
    /// Print one JSON object per row instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the SVG plots into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
}

/// Every workload's input is a multiple of this (the widest record, a 16-dim vector).
const INPUT_ALIGN: u64 = 64;

/// How a row computed its answer, and whether the host page cache was dropped first.
const MODES: [(&str, &str); 5] = [
    ("native", "cold"),
    ("native", "warm"),
    ("interpreter", "warm"),
    ("jit", "cold"),
    ("jit", "warm"),
];

/// One phase's median, in milliseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct PhaseMs {
    load: f64,
    activate: f64,
    stage: f64,
    execute: f64,
    result: f64,
    total: f64,
}

/// One (workload, mode) row.
#[derive(Debug, serde::Serialize)]
struct Row {
    workload: &'static str,
    origin: &'static str,
    mode: &'static str,
    /// "cold": the image dropped from the host page cache before each run; "warm": not.
    cache: &'static str,
    input_bytes: u64,
    runs: u32,
    /// Every run's answer equalled the reference's.
    agree: bool,
    /// Bytes that crossed to the host: the whole input natively, r0 and the answer on
    /// the device.
    bytes_to_host: u64,
    /// Fuel of one run (0 natively).
    fuel_used: u64,
    /// The device's own verify + compile time within `activate` (median).
    prepare_ms: f64,
    wall_ms: PhaseMs,
    modelled_ms: PhaseMs,
}

pub fn run(args: WorkloadsBenchArgs) -> anyhow::Result<u8> {
    let size = args.size / INPUT_ALIGN * INPUT_ALIGN;
    if size == 0 {
        bail!(
            "--size {} is too small: at least {INPUT_ALIGN} bytes",
            args.size
        );
    }
    let workloads = selected(&args.only)?;
    let mut model = PerfModel::profile(&args.profile).context("--profile")?;
    model.throttle = false;
    if args.uncounted {
        model.count_work = Some(false);
    }
    let tmp = tempfile::Builder::new()
        .prefix("csx-bench-workloads-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let config = bench_config(size, &model);
    let load_before = load_average();
    let dev = Device::init(&tmp.path().join("dev"), config)
        .context("cannot create the benchmark device")?;
    let mut session = Runner::new(&dev);
    let io = LambdaIo::new(&dev, &LambdaOptions::default()).context("the host's cache")?;
    if !args.json {
        print_header(&args, size, workloads.len(), load_before);
    }
    let mut rows = Vec::new();
    for w in &workloads {
        let mut these = bench_workload(&mut session, &io, w, &args, size, &model)
            .with_context(|| format!("workload {}", w.name))?;
        if args.json {
            for r in &these {
                println!("{}", serde_json::to_string(r)?);
            }
        } else {
            print_rows(&these);
        }
        rows.append(&mut these);
    }
    drop(io);
    session.close().context("unloading the programs")?;
    dev.close().context("closing the benchmark device")?;
    if !args.json {
        println!();
        print!("{}", findings(&rows));
        println!("load average after: {}", format_load(load_average()));
    }
    if let Some(dir) = &args.plots {
        write_plots(dir, &rows, size)?;
        if !args.json {
            println!("plots written to {}", dir.display());
        }
    }
    Ok(verdict(&rows))
}

/// The benchmark device: room for two copies of the input in each memory.
fn bench_config(size: u64, model: &PerfModel) -> DeviceConfig {
    DeviceConfig {
        nvm_size_bytes: (2 * size + (64 << 20)).next_multiple_of(4096),
        slm_size_bytes: (2 * size + (64 << 20)).next_multiple_of(4096),
        perf: model.clone(),
        // The per-user device's shared state size (`csx device init`'s default).
        state_size_bytes: 1 << 20,
        ..DeviceConfig::default()
    }
}

/// Success when every row's answers agreed with the reference; else an error naming
/// the rows that did not.
fn verdict(rows: &[Row]) -> u8 {
    let disagree: Vec<String> = rows
        .iter()
        .filter(|r| !r.agree)
        .map(|r| format!("{} ({}, {})", r.workload, r.mode, r.cache))
        .collect();
    if disagree.is_empty() {
        return exit::SUCCESS;
    }
    eprintln!(
        "error: answers differ from the reference: {}",
        disagree.join(", ")
    );
    exit::ERROR
}

/// The workloads `--only` names, in table order; all of them when it is empty.
fn selected(only: &[String]) -> anyhow::Result<Vec<&'static Workload>> {
    for name in only {
        if csx_workloads::by_name(name).is_none() {
            let known: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
            bail!("unknown workload {name:?}, known: {}", known.join(", "));
        }
    }
    Ok(WORKLOADS
        .iter()
        .filter(|w| only.is_empty() || only.iter().any(|n| n == w.name))
        .collect())
}

/// The rows of one workload, one per mode and cache.
fn bench_workload(
    session: &mut Runner<'_>,
    io: &LambdaIo<'_>,
    w: &'static Workload,
    args: &WorkloadsBenchArgs,
    size: u64,
    model: &PerfModel,
) -> anyhow::Result<Vec<Row>> {
    let data = w
        .generate(args.seed, size)
        .with_context(|| format!("generating {size} bytes"))?;
    let dev = session.device();
    let case = Case::new(w, args.seed, data.len() as u64);
    dev.put_bytes(&case.input_path, &data)
        .with_context(|| format!("writing {}", case.input_path))?;
    let inv = (w.invocation)(&case);
    let expected = (w.reference)(&data, &inv);
    drop(data);
    let trial = Trial {
        w,
        case: &case,
        inv: &inv,
        expected: &expected,
        model,
        runs: args.runs,
    };
    let mut rows = Vec::new();
    for (mode, cache) in MODES {
        rows.push(bench_mode(session, io, &trial, mode, cache)?);
    }
    dev.delete_file(&case.input_path)
        .with_context(|| format!("deleting {}", case.input_path))?;
    if dev.stat(&case.output_path).is_ok() {
        dev.delete_file(&case.output_path)
            .with_context(|| format!("deleting {}", case.output_path))?;
    }
    Ok(rows)
}

/// One workload's case on the device, with the answer it must give.
struct Trial<'t> {
    w: &'static Workload,
    case: &'t Case,
    inv: &'t csx_workloads::Invocation,
    expected: &'t Outcome,
    model: &'t PerfModel,
    runs: u32,
}

/// The row of one mode and cache: `trial.runs` runs, each phase's median.
fn bench_mode(
    session: &mut Runner<'_>,
    io: &LambdaIo<'_>,
    t: &Trial<'_>,
    mode: &'static str,
    cache: &'static str,
) -> anyhow::Result<Row> {
    let (w, case, model) = (t.w, t.case, t.model);
    let mut samples = Vec::new();
    let mut agree = true;
    let mut bytes_to_host = 0;
    let mut fuel_used = 0;
    for _ in 0..t.runs {
        if cache == "cold" {
            io.cache_drop()
                .context("dropping the image from the host page cache")?;
        }
        let (outcome, phases) = if mode == "native" {
            bytes_to_host = case.input_size_bytes;
            native(session.device(), w, case, t.inv, cache == "cold", model)?
        } else {
            let engine = if mode == "jit" {
                EngineKind::Jit
            } else {
                EngineKind::Interpreter
            };
            session.unload_all().context("unloading the programs")?;
            let run = session.run(w, case, t.inv, engine)?;
            bytes_to_host = run.host_bytes;
            fuel_used = run.fuel_used;
            let mut phases = run.phases;
            if w.shape == Shape::ReadFile {
                phases.stage.modelled_ns = model.media_ns(case.input_size_bytes);
            }
            (run.outcome, phases)
        };
        agree &= outcome == *t.expected;
        samples.push(phases);
    }
    Ok(Row {
        workload: w.name,
        origin: w.origin.name(),
        mode,
        cache,
        input_bytes: case.input_size_bytes,
        runs: t.runs,
        agree,
        bytes_to_host,
        fuel_used,
        prepare_ms: {
            let mut v: Vec<u64> = samples.iter().map(|p| p.prepare_ns).collect();
            v.sort_unstable();
            v.get(v.len() / 2).map_or(0.0, |ns| *ns as f64 / 1e6)
        },
        wall_ms: medians(&samples, |p| p.wall_ns),
        modelled_ms: medians(&samples, |p| p.modelled_ns),
    })
}

/// The host's way: read the input from the device file, then run the reference. The
/// host's compute is not modelled: its modelled time is its wall time. Its read is
/// modelled (media, link, the host kernel's I/O stack) when cold; warm, the page cache served it and it costs nothing.
fn native(
    dev: &Device,
    w: &Workload,
    case: &Case,
    inv: &csx_workloads::Invocation,
    cold: bool,
    model: &PerfModel,
) -> anyhow::Result<(Outcome, Phases)> {
    let (data, mut stage) = read_file_timed(dev, &case.input_path, case.input_size_bytes)
        .with_context(|| format!("reading {}", case.input_path))?;
    if cold {
        stage.modelled_ns += model.host_stack_ns(case.input_size_bytes);
    } else {
        stage.modelled_ns = 0;
    }
    let started = Instant::now();
    let outcome = (w.reference)(&data, inv);
    let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let phases = Phases {
        stage,
        execute: PhaseTime {
            wall_ns: ns,
            modelled_ns: ns,
        },
        ..Phases::default()
    };
    Ok((outcome, phases))
}

/// Each phase's median over the samples, and the median total, in ms.
fn medians(samples: &[Phases], time: impl Fn(&PhaseTime) -> u64) -> PhaseMs {
    let median = |f: &dyn Fn(&Phases) -> PhaseTime| {
        let mut v: Vec<u64> = samples.iter().map(|p| time(&f(p))).collect();
        v.sort_unstable();
        v.get(v.len() / 2).map_or(0.0, |ns| *ns as f64 / 1e6)
    };
    PhaseMs {
        load: median(&|p| p.load),
        activate: median(&|p| p.activate),
        stage: median(&|p| p.stage),
        execute: median(&|p| p.execute),
        result: median(&|p| p.result),
        total: median(&|p| p.total()),
    }
}

fn print_header(args: &WorkloadsBenchArgs, size: u64, n: usize, load: Option<[f64; 3]>) {
    println!(
        "csx bench workloads: {n} workloads, {} of input each (seed {}), median of {} runs",
        format_size(size),
        args.seed,
        args.runs
    );
    println!(
        "device: embedded, fresh; modelled times from the {} profile (not throttled){}",
        args.profile,
        if args.uncounted {
            "; executions uncounted, compute priced from fuel"
        } else {
            ""
        }
    );
    println!(
        "native: the Rust reference (csx-workloads) on the host, after reading the input \
         from the device file"
    );
    println!("load average before: {}", format_load(load));
    println!();
    println!(
        "{:<22} {:<16} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>10} {:>9}  {:>5}",
        "workload",
        "mode, cache",
        "load",
        "activate",
        "stage",
        "execute",
        "result",
        "total",
        "modelled",
        "to host",
        "agree"
    );
    println!(
        "{:<22} {:<16} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>10} {:>9}",
        "", "", "ms", "ms", "ms", "ms", "ms", "ms", "total ms", ""
    );
}

fn print_rows(rows: &[Row]) {
    for (i, r) in rows.iter().enumerate() {
        let name = if i == 0 { r.workload } else { "" };
        let ms = |v: f64, native_zero: bool| {
            if native_zero && r.mode == "native" {
                "-".to_string()
            } else {
                format_ms(v)
            }
        };
        println!(
            "{:<22} {:<16} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>10} {:>9}  {:>5}",
            name,
            format!("{} {}", r.mode, r.cache),
            ms(r.wall_ms.load, true),
            ms(r.wall_ms.activate, true),
            ms(r.wall_ms.stage, false),
            ms(r.wall_ms.execute, false),
            ms(r.wall_ms.result, true),
            ms(r.wall_ms.total, false),
            format_ms(r.modelled_ms.total),
            format_size(r.bytes_to_host),
            if r.agree { "yes" } else { "NO" }
        );
    }
}

/// Milliseconds with three significant figures or more.
fn format_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The warm row of `workload` in `mode`.
fn row<'r>(rows: &'r [Row], workload: &str, mode: &str) -> Option<&'r Row> {
    rows.iter()
        .find(|r| r.workload == workload && r.mode == mode && r.cache == "warm")
}

/// The summary that answers the Delilah thesis's findings with this run's numbers.
fn findings(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Delilah's findings, this run (wall time):");
    let mut ratios = Vec::new();
    let mut parts = Vec::new();
    for r in rows.iter().filter(|r| r.mode == "jit" && r.cache == "warm") {
        if let Some(i) = row(rows, r.workload, "interpreter") {
            if r.wall_ms.execute > 0.0 && i.wall_ms.execute > 0.0 {
                let x = i.wall_ms.execute / r.wall_ms.execute;
                ratios.push(x);
                parts.push(if x < 1.0 {
                    format!("{} {x:.2}x", r.workload)
                } else {
                    format!("{} {x:.1}x", r.workload)
                });
            }
        }
    }
    if let Some(g) = super::measure::geomean(&ratios) {
        let _ = writeln!(
            out,
            "  JIT vs interpreter, execution: geomean {g:.1}x faster ({})",
            parts.join(", ")
        );
    }
    let activation = |mode: &str| -> (f64, f64) {
        rows.iter()
            .filter(|r| r.mode == mode && r.cache == "warm")
            .fold((0.0, 0.0), |(p, w), r| {
                (p + r.prepare_ms, w + r.wall_ms.activate)
            })
    };
    for mode in ["interpreter", "jit"] {
        let (prepare, wall) = activation(mode);
        let _ = writeln!(
            out,
            "  activation, {mode}: verify{} {} ms of {} ms wall over all workloads \
             (the rest: round trip and persisting the slot)",
            if mode == "jit" { " + compile" } else { "" },
            format_ms(prepare),
            format_ms(wall)
        );
    }
    let select: Vec<(&str, &Row)> = ["select_poslist", "select_bitmask", "select_accel"]
        .iter()
        .filter_map(|w| row(rows, w, "jit").map(|r| (*w, r)))
        .collect();
    if select.len() == 3 {
        let _ = writeln!(out, "  selection filter (JIT), execute + result / total:");
        for (w, r) in &select {
            let _ = writeln!(
                out,
                "    {w:<15} {:>8} ms + {:>7} ms / {:>8} ms   {} to host",
                format_ms(r.wall_ms.execute),
                format_ms(r.wall_ms.result),
                format_ms(r.wall_ms.total),
                format_size(r.bytes_to_host)
            );
        }
        let (p, b, a) = (select[0].1, select[1].1, select[2].1);
        let _ = writeln!(
            out,
            "    bitmask vs position list: {:.1}x (execute + result); accelerated vs bitmask: {:.1}x (execute)",
            (p.wall_ms.execute + p.wall_ms.result) / (b.wall_ms.execute + b.wall_ms.result).max(1e-9),
            b.wall_ms.execute / a.wall_ms.execute.max(1e-9)
        );
    }
    out
}

/// The three plots (see `docs/benchmarks.md`).
fn write_plots(dir: &Path, rows: &[Row], size: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let jit: Vec<&Row> = rows
        .iter()
        .filter(|r| r.mode == "jit" && r.cache == "warm")
        .collect();
    for (name, chart) in [
        ("workloads-breakdown.svg", breakdown_chart(&jit, size)),
        ("workloads-engines.svg", engines_chart(rows, &jit, size)),
        ("workloads-select.svg", select_chart(rows)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, chart.to_svg())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The wall times of the phases `names` of row `r`, in phase order.
fn phase_values(r: &Row, names: &[&str]) -> Vec<(String, f64)> {
    let p = &r.wall_ms;
    let all = [
        ("load", p.load),
        ("activate", p.activate),
        ("stage", p.stage),
        ("execute", p.execute),
        ("result", p.result),
    ];
    all.iter()
        .filter(|(n, _)| names.contains(n))
        .map(|(n, v)| (n.to_string(), *v))
        .collect()
}

fn breakdown_chart(jit: &[&Row], size: u64) -> BarChart {
    let every = ["load", "activate", "stage", "execute", "result"];
    BarChart {
        title: format!(
            "Latency breakdown per workload, JIT ({} input, wall time)",
            format_size(size)
        ),
        y_label: "ms".to_string(),
        groups: jit
            .iter()
            .map(|r| (r.workload.to_string(), phase_values(r, &every)))
            .collect(),
        stacked: true,
        log: false,
    }
}

fn engines_chart(rows: &[Row], jit: &[&Row], size: u64) -> BarChart {
    BarChart {
        title: format!(
            "Execution time: interpreter, JIT and native ({} input)",
            format_size(size)
        ),
        y_label: "execute ms".to_string(),
        groups: jit
            .iter()
            .map(|r| {
                let values = ["interpreter", "jit", "native"]
                    .iter()
                    .filter_map(|m| row(rows, r.workload, m))
                    .map(|m| (m.mode.to_string(), m.wall_ms.execute))
                    .collect();
                (r.workload.to_string(), values)
            })
            .collect(),
        stacked: false,
        log: true,
    }
}

fn select_chart(rows: &[Row]) -> BarChart {
    BarChart {
        title: "Selection filter three ways, JIT, per request (Delilah §12.5)".to_string(),
        y_label: "ms".to_string(),
        groups: ["select_poslist", "select_bitmask", "select_accel"]
            .iter()
            .filter_map(|w| row(rows, w, "jit"))
            .map(|r| {
                let label = r.workload.trim_start_matches("select_").to_string();
                (label, phase_values(r, &["stage", "execute", "result"]))
            })
            .collect(),
        stacked: true,
        log: false,
    }
}

/// The 1, 5 and 15 minute load averages, where the system reports them.
fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

fn format_load(load: Option<[f64; 3]>) -> String {
    load.map_or_else(
        || "unknown".to_string(),
        |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"),
    )
}
