//! `csx demo`: the README's first job. Generates each workload's dataset onto an
//! embedded device, answers every workload twice, on the host over the whole input and
//! on the device next to the data, checks that the answers agree and prints what
//! offloading bought: time and the bytes that crossed to the host.
//!
//! Both times are end to end for one request, so they compare: the host's reads the
//! input from the device file to the host and computes; the device's stages the input
//! from the media into device memory, executes and returns the answer to the host. The
//! program's load and activation are not in it (done once, then reused); the second
//! table and `--json` give every part.
//!
//! Invariant: a workload whose device answer differs from the host's is an error exit.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_proto::EngineKind;
use csx_workloads::reference::{grep_counts, knn_hits, Stats};
use csx_workloads::{read_file_timed, Case, Compiler, Outcome, Session, Workload, WORKLOADS};

use crate::connect::{format_size, parse_size};
use crate::{exit, GlobalArgs};

/// Inputs at most this large also run on the interpreter (it is ~10-50x slower).
const INTERPRETER_INPUT_MAX: u64 = 4 << 20;

/// Every workload's input is a multiple of this (the widest record, a 16-dim vector).
const INPUT_ALIGN: u64 = 64;

/// Where the demo's fresh device lives when `--device` is not given.
const DEMO_DEVICE_DIR: &str = "out/demo-device";

/// Run every workload on the host and on a device, and compare.
///
/// Creates a fresh embedded device in ./out/demo-device (or uses --device), generates
/// each workload's dataset on it (SIZE in total), computes each answer twice and checks
/// they agree:
///
///   host    the classic way: read the whole input from the device to the host, compute
///           there;
///   device  stage the input into device memory, run the workload's eBPF program next
///           to it, send only the answer back.
///
/// Examples:
///   csx demo                      # 256 MiB of data, about a minute
///   csx demo --size 16MiB         # quick look
///   csx demo --json > demo.json   # machine-readable rows
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct DemoArgs {
    /// Total bytes of data, split across the workloads (KiB, MiB, GiB).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Seed of the generated data (same seed, same data, same answers).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object per workload instead of the table.
    #[arg(long)]
    json: bool,
}

/// One workload's row. Times are wall milliseconds of one request.
#[derive(Debug, serde::Serialize)]
struct Row {
    workload: &'static str,
    origin: &'static str,
    input_bytes: u64,
    answer: String,
    /// `host_read_ms + host_compute_ms`.
    host_ms: f64,
    /// Reading the input from the device file to the host.
    host_read_ms: f64,
    /// The Rust reference over the input in host memory.
    host_compute_ms: f64,
    /// `device_stage_ms + device_execute_ms + device_result_ms`, JIT.
    device_ms: f64,
    /// Staging the input into device memory (the program's own file read for
    /// file_read).
    device_stage_ms: f64,
    device_execute_ms: f64,
    /// Reading the answer back to the host.
    device_result_ms: f64,
    /// As `device_ms` in the interpreter, for small inputs.
    interpreter_ms: Option<f64>,
    host_mode_bytes_to_host: u64,
    device_mode_bytes_to_host: u64,
    reduction: f64,
}

pub fn run(args: DemoArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let per_workload = (args.size / WORKLOADS.len() as u64) / INPUT_ALIGN * INPUT_ALIGN;
    if per_workload == 0 {
        bail!(
            "--size {} is too small: need at least {} ({} bytes per workload)",
            args.size,
            WORKLOADS.len() as u64 * INPUT_ALIGN,
            INPUT_ALIGN
        );
    }
    let dev = open_device(global, args.size)?;
    let compiler = Compiler::new().context("the demo compiles the SDK programs")?;
    let mut session = Session::new(&dev, compiler);

    if !args.json {
        println!(
            "csx demo: {} workloads over {} of generated data (seed {}).",
            WORKLOADS.len(),
            format_size(per_workload * WORKLOADS.len() as u64),
            args.seed
        );
        println!(
            "Each answer is computed twice and must agree: on the host, which reads the \
             whole input from the device and computes; and on the device (JIT), which \
             stages the input next to the program and sends back only the answer."
        );
        println!();
    }

    let mut rows = Vec::new();
    for w in WORKLOADS {
        let row = run_workload(&mut session, w, args.seed, per_workload)
            .with_context(|| format!("workload {}", w.name))?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        }
        rows.push(row);
    }
    session.unload_all().context("unloading the programs")?;
    dev.close().context("closing the device")?;

    if !args.json {
        print_table(&rows);
        println!();
        print_split(&rows);
        let host: u64 = rows.iter().map(|r| r.host_mode_bytes_to_host).sum();
        let device: u64 = rows.iter().map(|r| r.device_mode_bytes_to_host).sum();
        println!();
        println!(
            "All {} answers agree. Offloading moved {} to the host instead of {} ({:.0}x less), in {:.1} s.",
            rows.len(),
            format_size(device),
            format_size(host),
            host as f64 / device.max(1) as f64,
            started.elapsed().as_secs_f64()
        );
        println!("Next: write your own program (csx sdk header, csx build), run it with csx exec.");
    }
    Ok(exit::SUCCESS)
}

/// The device: `--device` as given, else a fresh one in ./out/demo-device sized for
/// `size` bytes of data (memory at least twice the input).
fn open_device(global: &GlobalArgs, size: u64) -> anyhow::Result<Device> {
    if global.device.is_some() {
        return crate::connect::open(global);
    }
    let dir = PathBuf::from(DEMO_DEVICE_DIR);
    remove_old_device(&dir)?;
    let config = DeviceConfig {
        nvm_size_bytes: 2 * size + (64 << 20),
        slm_size_bytes: 2 * size + (64 << 20),
        ..crate::connect::default_config()
    };
    Device::init(&dir, config)
        .with_context(|| format!("cannot create a device in {}", dir.display()))
}

fn remove_old_device(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("cannot remove the old demo device {}", dir.display()))?;
    }
    Ok(())
}

/// Generates the workload's input onto the device, answers it on the host and on the
/// device, and checks the answers agree.
fn run_workload(
    session: &mut Session<'_>,
    w: &Workload,
    seed: u64,
    size: u64,
) -> anyhow::Result<Row> {
    let data = generate(w, seed, size)?;
    let dev = session.device();
    let case = Case::new(w, seed, data.len() as u64);
    dev.put_bytes(&case.input_path, &data)
        .with_context(|| format!("writing {}", case.input_path))?;
    let inv = (w.invocation)(&case);

    let expected = (w.reference)(&data, &inv);
    drop(data);

    // The host's way, end to end: the input from the device file, then the compute.
    let (input, read) = read_file_timed(dev, &case.input_path, case.input_size_bytes)
        .with_context(|| format!("reading {}", case.input_path))?;
    let start = Instant::now();
    let host_answer = (w.reference)(&input, &inv);
    let host_compute_ms = start.elapsed().as_secs_f64() * 1e3;
    if host_answer != expected {
        bail!("the host's answer over the input read back differs from the generated input's");
    }
    drop(input);

    let mut engines = vec![EngineKind::Jit];
    if size <= INTERPRETER_INPUT_MAX {
        engines.push(EngineKind::Interpreter);
    }
    let mut device = csx_workloads::Phases::default();
    let mut interpreter_ms = None;
    let mut device_bytes = 0;
    for engine in engines {
        let run = session.run(w, &case, &inv, engine)?;
        if run.outcome != expected {
            bail!(
                "the device ({engine:?}) answered {} but the host answered {}",
                answer(w, &run.outcome),
                answer(w, &expected)
            );
        }
        match engine {
            EngineKind::Interpreter => interpreter_ms = Some(ms(run.phases.request().wall_ns)),
            _ => {
                device = run.phases;
                device_bytes = run.host_bytes;
            }
        }
    }
    dev.delete_file(&case.input_path)
        .with_context(|| format!("deleting {}", case.input_path))?;
    if dev.stat(&case.output_path).is_ok() {
        dev.delete_file(&case.output_path)
            .with_context(|| format!("deleting {}", case.output_path))?;
    }
    let input = case.input_size_bytes;
    let host_read_ms = ms(read.wall_ns);
    Ok(Row {
        workload: w.name,
        origin: w.origin.name(),
        input_bytes: input,
        answer: answer(w, &expected),
        host_ms: host_read_ms + host_compute_ms,
        host_read_ms,
        host_compute_ms,
        device_ms: ms(device.request().wall_ns),
        device_stage_ms: ms(device.stage.wall_ns),
        device_execute_ms: ms(device.execute.wall_ns),
        device_result_ms: ms(device.result.wall_ns),
        interpreter_ms,
        host_mode_bytes_to_host: input,
        device_mode_bytes_to_host: device_bytes,
        reduction: input as f64 / device_bytes.max(1) as f64,
    })
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The workload's dataset, with a progress line on stderr when it is a terminal.
fn generate(w: &Workload, seed: u64, size: u64) -> anyhow::Result<Vec<u8>> {
    let tty = std::io::stderr().is_terminal();
    let mut data = Vec::with_capacity(size as usize);
    let mut progress = |p: csx_host::Progress| {
        if tty {
            eprint!(
                "\r\x1b[Kgenerating {:<22} {:>3}%",
                w.name,
                p.done_bytes * 100 / p.total_bytes.max(1)
            );
            let _ = std::io::stderr().flush();
        }
    };
    (w.dataset)()
        .write(seed, size, &mut data, &mut progress)
        .with_context(|| format!("generating {} bytes", size))?;
    if tty {
        eprint!("\r\x1b[K");
    }
    Ok(data)
}

/// The answer in a few words.
fn answer(w: &Workload, o: &Outcome) -> String {
    if o.r0 < 0 {
        return format!("error {}", o.r0);
    }
    if let Some(s) = Stats::from_bytes(&o.output).filter(|_| o.output.len() == 32) {
        if s.count == 0 {
            return "no values".to_string();
        }
        return format!("n={} min={} max={}", s.count, s.min, s.max);
    }
    match w.name {
        "grep" => {
            if let Some((hits, rows)) = grep_counts(&o.output) {
                return format!("{hits} of {rows} rows match");
            }
        }
        "knn" => {
            if let Some(h) = knn_hits(&o.output).first() {
                return format!("nearest #{} (d²={})", h.index, h.dist);
            }
        }
        "filter" => return format!("{} values pass", o.output.len() / 8),
        "select_poslist" => return format!("{} rows selected", o.output.len() / 4),
        "select_bitmask" | "select_accel" => {
            let rows: u32 = o.output.iter().map(|b| b.count_ones()).sum();
            return format!("{rows} rows selected");
        }
        "file_read" => return format!("read {}", format_size(o.output.len() as u64)),
        "bitmap" => return format!("wrote {} of bitmap", format_size(o.r0 as u64)),
        _ => {}
    }
    format!("{} of output", format_size(o.output.len() as u64))
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<22} {:>9}  {:<34} {:>9} {:>10} {:>10}  {:>10} {:>10} {:>9}",
        "workload",
        "input",
        "answer",
        "host ms",
        "device ms",
        "interp ms",
        "host-mode",
        "device",
        "reduction"
    );
    println!(
        "{:<22} {:>9}  {:<34} {:>9} {:>10} {:>10}  {:>10} {:>10} {:>9}",
        "", "", "", "", "(JIT)", "", "to host", "to host", ""
    );
    for r in rows {
        let interp = r
            .interpreter_ms
            .map_or_else(|| "-".to_string(), |ms| format!("{ms:.2}"));
        println!(
            "{:<22} {:>9}  {:<34} {:>9.2} {:>10.2} {:>10}  {:>10} {:>10} {:>8.0}x",
            r.workload,
            format_size(r.input_bytes),
            truncate(&r.answer, 34),
            r.host_ms,
            r.device_ms,
            interp,
            format_size(r.host_mode_bytes_to_host),
            format_size(r.device_mode_bytes_to_host),
            r.reduction
        );
    }
}

/// Where each side's time went.
fn print_split(rows: &[Row]) {
    println!("Where the time went (ms): host = read + compute; device = stage + execute + result.");
    println!(
        "{:<22} {:>9} {:>9}   {:>9} {:>9} {:>9}",
        "workload", "read", "compute", "stage", "execute", "result"
    );
    for r in rows {
        println!(
            "{:<22} {:>9.2} {:>9.2}   {:>9.2} {:>9.2} {:>9.2}",
            r.workload,
            r.host_read_ms,
            r.host_compute_ms,
            r.device_stage_ms,
            r.device_execute_ms,
            r.device_result_ms
        );
    }
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width - 1).collect();
    t.push('…');
    t
}
