//! `csx demo`: the README's first job. Generates each workload's dataset onto an
//! embedded device, answers every workload on the host over the whole input and on the
//! device next to the data, checks that the answers agree and prints what offloading
//! bought: time, measured and modelled, and the bytes that crossed to the host.
//!
//! Like for like: each side runs **cold** (the device's image dropped from the host page
//! cache first, so the host's read comes from the disk, as the device's uncached staging
//! always does) and then **warm** (at once again: the host finds its input in the page
//! cache; the device, which has no cache of its own, stages from its media again with
//! its program already loaded). Times are end to end for one request: the host's reads
//! the input from the device file and computes; the device's stages the input into
//! device memory, executes and returns the answer. Program load and activation are not
//! in it (done once, then reused); `--json` gives every part.
//!
//! Wall time cannot show what a real device would do (here it shares this machine's
//! cores and disk), so beside it the demo prints each side's **modelled** time under a
//! named device profile (`--profile`, default `daisy`: a Daisy OpenSSD-class device,
//! see `csx_device::perf::PerfModel::daisy`): the host's cold request is its bytes over
//! the media, the link and the host kernel's I/O stack plus its compute (this machine's, as measured), warm only its
//! compute; the device's is its completions' modelled time (media, device compute,
//! answer over the link). A closing line says where offload won, by how much and why.
//!
//! Invariant: a workload whose device answer differs from the host's is an error exit.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use csx_device::perf::PerfModel;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_lambda::{LambdaIo, LambdaOptions};
use csx_proto::EngineKind;
use csx_workloads::reference::{grep_counts, knn_hits, Stats};
use csx_workloads::{read_file_timed, Case, Outcome, Phases, Runner, Shape, Workload, WORKLOADS};

use crate::connect::{format_size, parse_size};
use crate::{exit, GlobalArgs};

/// Inputs at most this large also run on the interpreter (it is ~10-50x slower).
const INTERPRETER_INPUT_MAX: u64 = 4 << 20;

/// Every workload's input is a multiple of this (the widest record, a 16-dim vector).
const INPUT_ALIGN: u64 = 64;

/// Where the demo's fresh device lives when `--device` is not given.
const DEMO_DEVICE_DIR: &str = "out/demo-device";

/// Run every workload on the host and on a device, cold and warm, and compare.
///
/// Creates a fresh embedded device in ./out/demo-device (or uses --device), generates
/// each workload's dataset on it (SIZE in total), computes each answer on both sides and
/// checks they agree:
///
///   host    the classic way: read the whole input from the device to the host, compute
///           there;
///   device  stage the input into device memory, run the workload's eBPF program next
///           to it, send only the answer back.
///
/// Each side runs cold (the image dropped from the host page cache first) and warm
/// (again at once). Beside the wall times of this machine, where the device shares the
/// host's cores and disk, the demo prints modelled times under a device profile (media,
/// link and core speed of a real device) and says where offloading won and why.
///
/// Examples:
///   csx demo                      # 256 MiB of data, about a minute
///   csx demo --size 16MiB         # quick look
///   csx demo --profile lambda-io  # modelled as λ-IO's testbed
///   csx demo --json > demo.json   # machine-readable rows
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct DemoArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// Total bytes of data, split across the workloads (KiB, MiB, GiB).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Seed of the generated data (same seed, same data, same answers).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Device profile of the modelled times: daisy, lambda-io or unthrottled (a device
    /// given with --device keeps its own).
    #[arg(long, default_value = "daisy")]
    profile: String,
    /// Print one JSON object per workload instead of the table.
    #[arg(long)]
    json: bool,
}

/// One side's time for one request: wall and modelled milliseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct SideMs {
    wall_ms: f64,
    modelled_ms: f64,
}

/// The host's request: the read of the input and the compute.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct HostRun {
    read_ms: f64,
    compute_ms: f64,
    /// Modelled: cold, the input over the media, the link and the host's I/O stack plus
    /// the compute; warm, the compute alone (the page cache served the read). The compute
    /// is the faster of the cold and warm runs' (the less disturbed measure).
    modelled_ms: f64,
}

impl HostRun {
    fn total(&self) -> SideMs {
        SideMs {
            wall_ms: self.read_ms + self.compute_ms,
            modelled_ms: self.modelled_ms,
        }
    }
}

/// The device's request: staging, execution and the answer back.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct DeviceRunMs {
    stage_ms: f64,
    execute_ms: f64,
    result_ms: f64,
    modelled_stage_ms: f64,
    modelled_execute_ms: f64,
    modelled_result_ms: f64,
}

impl DeviceRunMs {
    fn from_phases(p: &Phases) -> DeviceRunMs {
        DeviceRunMs {
            stage_ms: ms(p.stage.wall_ns),
            execute_ms: ms(p.execute.wall_ns),
            result_ms: ms(p.result.wall_ns),
            modelled_stage_ms: ms(p.stage.modelled_ns),
            modelled_execute_ms: ms(p.execute.modelled_ns),
            modelled_result_ms: ms(p.result.modelled_ns),
        }
    }

    fn total(&self) -> SideMs {
        SideMs {
            wall_ms: self.stage_ms + self.execute_ms + self.result_ms,
            modelled_ms: self.modelled_stage_ms
                + self.modelled_execute_ms
                + self.modelled_result_ms,
        }
    }
}

/// One workload's row.
#[derive(Debug, serde::Serialize)]
struct Row {
    workload: &'static str,
    origin: &'static str,
    input_bytes: u64,
    answer: String,
    /// `None` when the image is not on this machine (a served device elsewhere): no cold
    /// run is possible.
    host_cold: Option<HostRun>,
    host_warm: HostRun,
    device_cold: DeviceRunMs,
    device_warm: DeviceRunMs,
    /// Modelled parts of the host's cold request: the media, and the link with the host
    /// kernel's I/O stack (the host's read path).
    host_modelled_media_ms: f64,
    host_modelled_link_ms: f64,
    /// As `device_warm`'s total wall time in the interpreter, for small inputs.
    interpreter_ms: Option<f64>,
    /// Fuel of the device's execution(s).
    fuel_used: u64,
    host_mode_bytes_to_host: u64,
    device_mode_bytes_to_host: u64,
    reduction: f64,
    /// Modelled cold: host over device (above 1: offloading won).
    modelled_cold_speedup: f64,
    /// What bounds each side's modelled cold request: "media", "link" or "compute".
    host_bound: &'static str,
    device_bound: &'static str,
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
    let profile = PerfModel::profile(&args.profile).context("--profile")?;
    let dev = open_device(global, args.size, &profile)?;
    // A device given with --device models its completions with its own profile; the
    // host's side is modelled with --profile's.
    let model = profile;
    let mut session = Runner::new(&dev);
    // Cold runs drop the device's image from the host page cache; that needs the image
    // on this machine (an embedded device, or one served here).
    let io = LambdaIo::new(&dev, &LambdaOptions::default()).context("the host's cache")?;
    let cache = io.local().ok().map(|_| &io);

    if !args.json {
        print_intro(&args, per_workload, cache.is_some());
    }

    let mut rows = Vec::new();
    for w in WORKLOADS {
        let row = run_workload(&mut session, cache, &model, w, args.seed, per_workload)
            .with_context(|| format!("workload {}", w.name))?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        }
        rows.push(row);
    }
    drop(io);
    session.close().context("unloading the programs")?;
    dev.close().context("closing the device")?;

    if !args.json {
        print_tables(&rows, &model, started);
    }
    Ok(exit::SUCCESS)
}

/// What the demo does, before the first workload runs.
fn print_intro(args: &DemoArgs, per_workload: u64, cold_runs: bool) {
    println!(
        "csx demo: {} workloads over {} of generated data (seed {}).",
        WORKLOADS.len(),
        format_size(per_workload * WORKLOADS.len() as u64),
        args.seed
    );
    println!(
        "Each answer is computed twice and must agree: on the host, which reads the \
         whole input from the device and computes; and on the device (JIT), which \
         stages the input next to the program and sends back only the answer. Each \
         side runs cold (the image dropped from the host page cache) and then warm."
    );
    if !cold_runs {
        println!("(The device's image is not on this machine: no cold runs.)");
    }
    println!();
}

/// The three tables, the bytes saved and the verdict.
fn print_tables(rows: &[Row], model: &PerfModel, started: Instant) {
    print_wall(rows);
    println!();
    print_modelled(rows, model);
    println!();
    print_split(rows);
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
    for line in verdict(rows, model) {
        println!("{line}");
    }
    println!("Next: write your own program (csx sdk header, csx build), run it with csx exec.");
}

/// The device: `--device` as given, else a fresh one in ./out/demo-device sized for
/// `size` bytes of data (memory at least twice the input), modelled under `profile`
/// (not throttled: wall times stay this machine's).
fn open_device(global: &GlobalArgs, size: u64, profile: &PerfModel) -> anyhow::Result<Device> {
    if global.device.is_some() {
        return crate::connect::open(global);
    }
    let dir = PathBuf::from(DEMO_DEVICE_DIR);
    remove_old_device(&dir)?;
    let mut config = DeviceConfig {
        nvm_size_bytes: 2 * size + (64 << 20),
        slm_size_bytes: 2 * size + (64 << 20),
        ..crate::connect::default_config()
    };
    config.perf = PerfModel {
        throttle: false,
        ..profile.clone()
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

/// One workload's case on the device, with the answer it must give.
struct Trial<'t> {
    w: &'t Workload,
    case: Case,
    inv: csx_workloads::Invocation,
    expected: Outcome,
}

/// The host's way, end to end: the input from the device file, then the compute.
fn host_run(dev: &Device, model: &PerfModel, t: &Trial<'_>, cold: bool) -> anyhow::Result<HostRun> {
    let case = &t.case;
    let (input, read) = read_file_timed(dev, &case.input_path, case.input_size_bytes)
        .with_context(|| format!("reading {}", case.input_path))?;
    let start = Instant::now();
    let answer = (t.w.reference)(&input, &t.inv);
    let compute_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    if answer != t.expected {
        bail!("the host's answer over the input read back differs from the generated input's");
    }
    // Cold: the File Reads' modelled time (media, link, latency); warm: the page cache
    // served them, so only the compute.
    // The host kernel's I/O stack is paid on top (the profile's measured cost).
    let read_modelled = if cold {
        read.modelled_ns + model.host_stack_ns(case.input_size_bytes)
    } else {
        0
    };
    Ok(HostRun {
        read_ms: ms(read.wall_ns),
        compute_ms: ms(compute_ns),
        modelled_ms: ms(read_modelled + compute_ns),
    })
}

/// Drops the device's image from the host page cache, where the image is on this machine.
fn drop_cache(cache: Option<&LambdaIo<'_>>) -> anyhow::Result<()> {
    if let Some(io) = cache {
        io.cache_drop()
            .context("dropping the image from the page cache")?;
    }
    Ok(())
}

/// The host's cold (where possible) and warm runs, and the compute time both are
/// modelled with.
fn host_runs(
    dev: &Device,
    cache: Option<&LambdaIo<'_>>,
    model: &PerfModel,
    t: &Trial<'_>,
) -> anyhow::Result<(Option<HostRun>, HostRun, f64)> {
    let mut host_cold = match cache {
        Some(_) => {
            drop_cache(cache)?;
            Some(host_run(dev, model, t, true)?)
        }
        None => None,
    };
    let mut host_warm = host_run(dev, model, t, false)?;
    // Both runs computed the same answer from the same bytes in memory: the faster of
    // the two measures is the less disturbed one (other work on this machine only adds
    // time), and both sides' modelled compute uses it.
    let compute_ms = host_cold.map_or(host_warm.compute_ms, |h| {
        h.compute_ms.min(host_warm.compute_ms)
    });
    for h in host_cold.iter_mut().chain(std::iter::once(&mut host_warm)) {
        h.modelled_ms += compute_ms - h.compute_ms;
    }
    Ok((host_cold, host_warm, compute_ms))
}

/// The device's cold and warm runs on the JIT.
struct DeviceRuns {
    cold: DeviceRunMs,
    warm: DeviceRunMs,
    fuel_used: u64,
    bytes_to_host: u64,
}

/// The device's runs on the JIT, cold then warm; the program is loaded and compiled
/// once, before the cold run, so both runs time the request alone.
fn device_runs(
    session: &mut Runner<'_>,
    cache: Option<&LambdaIo<'_>>,
    model: &PerfModel,
    t: &Trial<'_>,
) -> anyhow::Result<DeviceRuns> {
    session
        .program(t.w.programs[0], EngineKind::Jit)
        .map_err(anyhow::Error::from)?;
    let mut device = Vec::new();
    let mut fuel_used = 0;
    let mut bytes_to_host = 0;
    for cold in [true, false] {
        if cold {
            drop_cache(cache)?;
        }
        let run = session.run(t.w, &t.case, &t.inv, EngineKind::Jit)?;
        if run.outcome != t.expected {
            bail!(
                "the device answered {} but the host answered {}",
                answer(t.w, &run.outcome),
                answer(t.w, &t.expected)
            );
        }
        let mut phases = run.phases;
        if t.w.shape == Shape::ReadFile {
            // The program's own read is not in its completion's model: its bytes over
            // the media.
            phases.stage.modelled_ns = model.media_ns(t.case.input_size_bytes);
        }
        device.push(DeviceRunMs::from_phases(&phases));
        fuel_used = run.fuel_used;
        bytes_to_host = run.host_bytes;
    }
    Ok(DeviceRuns {
        cold: device[0],
        warm: device[1],
        fuel_used,
        bytes_to_host,
    })
}

/// The request's wall time in the interpreter, whose answer must agree too.
fn interpreter_run(session: &mut Runner<'_>, t: &Trial<'_>) -> anyhow::Result<f64> {
    let run = session.run(t.w, &t.case, &t.inv, EngineKind::Interpreter)?;
    if run.outcome != t.expected {
        bail!(
            "the device (interpreter) answered {} but the host answered {}",
            answer(t.w, &run.outcome),
            answer(t.w, &t.expected)
        );
    }
    Ok(ms(run.phases.request().wall_ns))
}

/// Generates the workload's input onto the device, answers it on the host and on the
/// device, cold and warm, and checks the answers agree.
fn run_workload(
    session: &mut Runner<'_>,
    cache: Option<&LambdaIo<'_>>,
    model: &PerfModel,
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
    let t = Trial {
        w,
        case,
        inv,
        expected,
    };
    let (host_cold, host_warm, compute_ms) = host_runs(dev, cache, model, &t)?;
    let device = device_runs(session, cache, model, &t)?;
    let interpreter_ms = if size <= INTERPRETER_INPUT_MAX {
        Some(interpreter_run(session, &t)?)
    } else {
        None
    };
    dev.delete_file(&t.case.input_path)
        .with_context(|| format!("deleting {}", t.case.input_path))?;
    if dev.stat(&t.case.output_path).is_ok() {
        dev.delete_file(&t.case.output_path)
            .with_context(|| format!("deleting {}", t.case.output_path))?;
    }
    let input = t.case.input_size_bytes;
    let media_ms = ms(model.media_ns(input));
    // The host's read path: the link and its kernel's I/O stack.
    let link_ms = ms(model.link_ns(input) + model.host_stack_ns(input));
    let host_cold_modelled = host_cold.map_or(media_ms + link_ms + compute_ms, |h| h.modelled_ms);
    let d = device.cold;
    Ok(Row {
        workload: w.name,
        origin: w.origin.name(),
        input_bytes: input,
        answer: answer(w, &t.expected),
        host_cold,
        host_warm,
        device_cold: device.cold,
        device_warm: device.warm,
        host_modelled_media_ms: media_ms,
        host_modelled_link_ms: link_ms,
        interpreter_ms,
        fuel_used: device.fuel_used,
        host_mode_bytes_to_host: input,
        device_mode_bytes_to_host: device.bytes_to_host,
        reduction: input as f64 / device.bytes_to_host.max(1) as f64,
        modelled_cold_speedup: host_cold_modelled / d.total().modelled_ms.max(1e-9),
        host_bound: bound(&[
            ("media", media_ms),
            ("link", link_ms),
            ("compute", compute_ms),
        ]),
        device_bound: bound(&[
            ("media", d.modelled_stage_ms),
            ("link", d.modelled_result_ms),
            ("compute", d.modelled_execute_ms),
        ]),
    })
}

/// The name of the largest part.
fn bound(parts: &[(&'static str, f64)]) -> &'static str {
    parts
        .iter()
        .fold(
            ("media", f64::MIN),
            |best, p| if p.1 > best.1 { *p } else { best },
        )
        .0
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

fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), fmt_ms)
}

/// Wall time on this machine, cold and warm, per side.
fn print_wall(rows: &[Row]) {
    println!("Wall time on this machine, one request (ms). The device shares this machine's cores and disk.");
    println!(
        "{:<22} {:>9}  {:<34} {:>9} {:>9}  {:>9} {:>9} {:>9}",
        "workload", "input", "answer", "host", "host", "device", "device", "interp"
    );
    println!(
        "{:<22} {:>9}  {:<34} {:>9} {:>9}  {:>9} {:>9} {:>9}",
        "", "", "", "cold", "warm", "cold", "warm", "warm"
    );
    for r in rows {
        println!(
            "{:<22} {:>9}  {:<34} {:>9} {:>9}  {:>9} {:>9} {:>9}",
            r.workload,
            format_size(r.input_bytes),
            truncate(&r.answer, 34),
            fmt_opt(r.host_cold.map(|h| h.total().wall_ms)),
            fmt_ms(r.host_warm.total().wall_ms),
            fmt_ms(r.device_cold.total().wall_ms),
            fmt_ms(r.device_warm.total().wall_ms),
            fmt_opt(r.interpreter_ms),
        );
    }
}

/// Modelled time under the profile, with the bytes over the link.
fn print_modelled(rows: &[Row], model: &PerfModel) {
    println!(
        "Modelled under the {} profile (media {}, link {}, device cores {}x the host's time), one request (ms):",
        model.profile,
        rate(model.media_bytes_per_sec),
        rate(model.link_bytes_per_sec),
        f64::from(model.compute_scale_milli) / 1000.0
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9}  {:>10} {:>10}  {:>8}  {:<8} {:<8}",
        "workload",
        "host",
        "host",
        "device",
        "link bytes",
        "link bytes",
        "offload",
        "host",
        "device"
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9}  {:>10} {:>10}  {:>8}  {:<8} {:<8}",
        "", "cold", "warm", "", "host mode", "device", "cold", "bound", "bound"
    );
    for r in rows {
        println!(
            "{:<22} {:>9} {:>9} {:>9}  {:>10} {:>10}  {:>7.2}x  {:<8} {:<8}",
            r.workload,
            fmt_opt(r.host_cold.map(|h| h.modelled_ms)),
            fmt_ms(r.host_warm.modelled_ms),
            fmt_ms(r.device_cold.total().modelled_ms),
            format_size(r.host_mode_bytes_to_host),
            format_size(r.device_mode_bytes_to_host),
            r.modelled_cold_speedup,
            r.host_bound,
            r.device_bound,
        );
    }
}

fn rate(bytes_per_sec: u64) -> String {
    if bytes_per_sec == 0 {
        "unlimited".to_string()
    } else {
        format!("{:.2} GB/s", bytes_per_sec as f64 / 1e9)
    }
}

/// Where each side's time went, cold.
fn print_split(rows: &[Row]) {
    println!("Where the time went (cold, wall ms): host = read + compute; device = stage + execute + result.");
    println!(
        "{:<22} {:>9} {:>9}   {:>9} {:>9} {:>9}",
        "workload", "read", "compute", "stage", "execute", "result"
    );
    for r in rows {
        let h = r.host_cold.unwrap_or(r.host_warm);
        println!(
            "{:<22} {:>9} {:>9}   {:>9} {:>9} {:>9}",
            r.workload,
            fmt_ms(h.read_ms),
            fmt_ms(h.compute_ms),
            fmt_ms(r.device_cold.stage_ms),
            fmt_ms(r.device_cold.execute_ms),
            fmt_ms(r.device_cold.result_ms)
        );
    }
}

/// The closing lines: where offload won on the modelled clock, by how much and why.
fn verdict(rows: &[Row], model: &PerfModel) -> Vec<String> {
    let won: Vec<&Row> = rows
        .iter()
        .filter(|r| r.modelled_cold_speedup > 1.0)
        .collect();
    let lost: Vec<&Row> = rows
        .iter()
        .filter(|r| r.modelled_cold_speedup <= 1.0)
        .collect();
    let geomean = |rs: &[&Row]| {
        if rs.is_empty() {
            return 1.0;
        }
        let s: f64 = rs.iter().map(|r| r.modelled_cold_speedup.ln()).sum();
        (s / rs.len() as f64).exp()
    };
    let mut out = Vec::new();
    out.push(format!(
        "Modelled ({} profile), cold: offloading won {} of {} workloads (geomean {:.2}x: {}).",
        model.profile,
        won.len(),
        rows.len(),
        geomean(&won),
        speedups(&won)
    ));
    out.extend(why_won(&won, model));
    if !lost.is_empty() {
        let compute_bound = lost.iter().filter(|r| r.device_bound == "compute").count();
        out.push(format!(
            "  Lost {} ({}): the device is compute-bound in {} of them (its cores take {}x the host's time).",
            lost.len(),
            speedups(&lost),
            compute_bound,
            f64::from(model.compute_scale_milli) / 1000.0
        ));
    }
    let warm_host = rows
        .iter()
        .filter(|r| r.host_warm.modelled_ms < r.device_warm.total().modelled_ms)
        .count();
    out.push(format!(
        "  Warm, the host's page cache removes its media and link time: the host wins {} of {}.",
        warm_host,
        rows.len()
    ));
    out
}

/// The workloads with their modelled cold speedups, comma-separated.
fn speedups(rs: &[&Row]) -> String {
    rs.iter()
        .map(|r| format!("{} {:.2}x", r.workload, r.modelled_cold_speedup))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why offloading won where it did: a line per kind of bound host.
fn why_won(won: &[&Row], model: &PerfModel) -> Vec<String> {
    let by_bound = |bound: &str| -> Vec<&'static str> {
        won.iter()
            .filter(|r| r.host_bound == bound)
            .map(|r| r.workload)
            .collect()
    };
    let mut out = Vec::new();
    let link_bound = by_bound("link");
    if !link_bound.is_empty() {
        out.push(format!(
            "  Link-bound host ({}): every input byte crosses the {} link and the host's I/O \
             stack, while the device reads its media (as fast for both) and sends only the answer.",
            link_bound.join(", "),
            rate(model.link_bytes_per_sec)
        ));
    }
    let compute_bound = by_bound("compute");
    if !compute_bound.is_empty() {
        out.push(format!(
            "  Compute-bound host ({}): the host's code over the whole input takes longer than \
             the device's program next to the data, on top of the link it also pays.",
            compute_bound.join(", ")
        ));
    }
    out
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width - 1).collect();
    t.push('…');
    t
}
