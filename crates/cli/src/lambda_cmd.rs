//! `csx read`, `csx write` and `csx cache drop`: λ-IO file offload from the command line
//! (`csx_lambda`).
//!
//! `csx read` streams a device file through a λ chunk by chunk, on the host, on the
//! device or wherever the dispatcher predicts is faster (`--mode auto`), with `--threads`
//! requests in flight; it writes the outputs, concatenated in file order, to `--output`
//! and prints the run's account: requests per side, bytes over the link, wall time and
//! modelled time (the bottleneck model of `csx_lambda::account`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use csx_host::Device;
use csx_lambda::{
    Lambda, LambdaArgs, LambdaIo, LambdaOptions, LambdaOutput, Mode, Parallelism, Ran, RunAccount,
};

use crate::connect::{self, parse_size};
use crate::interrupt::Interrupt;
use crate::GlobalArgs;

/// What a λ is and how it is called (shared by read and write).
#[derive(Debug, Args)]
pub struct LambdaSpec {
    /// The λ: a C source (compiled with the SDK's flags), an object file, or the name of
    /// an SDK program (stats64, stats32, knn, grep, bitmap, ...).
    #[arg(long = "lambda", value_name = "PROG")]
    pub(crate) prog: String,
    /// The ELF function to run (the only global function if absent).
    #[arg(long, value_name = "NAME")]
    pub(crate) entry: Option<String>,
    /// Bytes per request.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "8MiB")]
    pub(crate) chunk: u64,
    /// Where requests run.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub(crate) mode: Mode,
    /// Bytes of the output window (default: as large as the request's input).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) output_size: Option<u64>,
    /// args->cparam1 (plus the record index with --record).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) cparam1: u64,
    /// args->cparam2.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) cparam2: u64,
    /// The parameter bytes (args->params), as hex.
    #[arg(long, value_name = "HEX", conflicts_with = "params")]
    pub(crate) params_hex: Option<String>,
    /// The parameter bytes (args->params), as text.
    #[arg(long, value_name = "TEXT")]
    pub(crate) params: Option<String>,
    /// Fixed-size records: chunks must be a multiple of SIZE, and cparam1 gets the
    /// chunk's first record index added (knn's vectors).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) record: Option<u64>,
    /// The host cache budget (the library drops the oldest pages it read beyond it).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) cache_budget: Option<u64>,
    /// The device's state directory, for a device served on this machine (shm://).
    #[arg(long = "state", value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    #[arg(
        long = "state-dir",
        hide = true,
        value_name = "DIR",
        conflicts_with = "state_dir"
    )]
    pub(crate) state_dir_old: Option<PathBuf>,
    /// Dispatcher profiling period n and length k.
    #[arg(long, value_name = "N", default_value_t = csx_lambda::dispatch::PERIOD_DEFAULT)]
    pub(crate) period: u32,
    #[arg(long, value_name = "K", default_value_t = csx_lambda::dispatch::PROFILE_LEN_DEFAULT)]
    pub(crate) profile_len: u32,
    /// Print each request's side, predicted host/device ns and cache ratio (stderr).
    #[arg(long)]
    pub(crate) trace: bool,
    /// Print the account as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Run a λ over a device file, chunk by chunk (λ-IO's λ-read).
///
/// On an array (`--device array:DIR`) the members holding the file run the requests
/// over their own bytes, at once, `--threads` in flight each; requests are cut at stripe
/// boundaries and the outputs are written in file order.
///
/// Ctrl-C stops the λ runs (those on the device by an Abort), unloads the λ and exits
/// with status 130; a second Ctrl-C quits at once.
#[derive(Debug, Args)]
pub struct ReadArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The device file.
    pub(crate) devpath: String,
    #[command(flatten)]
    pub(crate) spec: LambdaSpec,
    /// Requests in flight (host threads).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) threads: u32,
    /// Write the outputs, concatenated in file order, to this local file.
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// Run a λ over a local file and write its outputs to a device file (λ-IO's λ-write).
#[derive(Debug, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The device file (created if absent).
    devpath: String,
    #[command(flatten)]
    spec: LambdaSpec,
    /// The local input; each chunk of it is one request.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Where the first output goes in the device file; each next one follows.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "0")]
    offset: u64,
}

/// The host cache of the device's image.
#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// Drop the device's image from the host page cache.
    Drop(CacheDropArgs),
}

/// Drop the device's image from the host page cache.
#[derive(Debug, Args)]
pub struct CacheDropArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The device's state directory, for a device served on this machine.
    #[arg(long = "state", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[arg(
        long = "state-dir",
        hide = true,
        value_name = "DIR",
        conflicts_with = "state_dir"
    )]
    state_dir_old: Option<PathBuf>,
}

/// `--state DIR`, or the old `--state-dir DIR` with its note.
fn state_of(state: &Option<PathBuf>, old: &Option<PathBuf>) -> Option<PathBuf> {
    match (state, old) {
        (None, Some(dir)) => {
            eprintln!("csx: --state-dir is deprecated; use --state");
            Some(dir.clone())
        }
        (state, _) => state.clone(),
    }
}

/// λ-IO: `csx lambda {read,write,cache-drop}`.
#[derive(Debug, Args)]
pub struct LambdaGroupArgs {
    #[command(subcommand)]
    command: LambdaCommand,
}

#[derive(Debug, Subcommand)]
enum LambdaCommand {
    /// Run a λ over a device file chunk by chunk, on the host, the device or either.
    Read(ReadArgs),
    /// Run a λ over a local file and write its outputs to a device file.
    Write(WriteArgs),
    /// Drop the device's image from the host page cache.
    CacheDrop(CacheDropArgs),
}

pub fn run_group(args: LambdaGroupArgs) -> anyhow::Result<u8> {
    match args.command {
        LambdaCommand::Read(a) => {
            let g = a.dev.global();
            run_read(a, &g)
        }
        LambdaCommand::Write(a) => {
            let g = a.dev.global();
            run_write(a, &g)
        }
        LambdaCommand::CacheDrop(a) => {
            let g = a.dev.global();
            cache_drop(a, &g)
        }
    }
}

/// The object file of `prog` (see [`LambdaSpec::prog`]) and a name for it.
pub(crate) fn lambda_object(prog: &str) -> anyhow::Result<(String, Vec<u8>)> {
    let path = Path::new(prog);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(prog)
        .to_string();
    if path.extension().is_some_and(|e| e == "c") {
        let compiler = csx_workloads::Compiler::new()?;
        let dir = tempfile::tempdir()?;
        let obj = dir.path().join(format!("{stem}.o"));
        compiler.compile_file(path, &obj, &[])?;
        return Ok((stem, std::fs::read(&obj)?));
    }
    if path.exists() {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        return Ok((stem, bytes));
    }
    if csx_workloads::compile::PROGRAMS
        .iter()
        .any(|p| p.name == prog)
    {
        return Ok((prog.to_string(), csx_workloads::program(prog)?.to_vec()));
    }
    bail!("{prog} is neither a file nor an SDK program")
}

fn options(spec: &LambdaSpec, threads: u32, engines: u32) -> LambdaOptions {
    LambdaOptions {
        cache_budget_bytes: spec
            .cache_budget
            .unwrap_or(csx_lambda::CACHE_BUDGET_DEFAULT),
        state_dir: state_of(&spec.state_dir, &spec.state_dir_old),
        period: spec.period,
        profile_len: spec.profile_len,
        parallelism: (threads > 1).then_some(Parallelism {
            host_threads: threads,
            device_engines: engines,
        }),
    }
}

pub(crate) fn base_args(spec: &LambdaSpec) -> anyhow::Result<LambdaArgs> {
    let params = match (&spec.params_hex, &spec.params) {
        (Some(h), _) => crate::hex::parse(h).context("--params-hex")?,
        (None, Some(t)) => t.as_bytes().to_vec(),
        (None, None) => Vec::new(),
    };
    Ok(LambdaArgs {
        cparam1: spec.cparam1,
        cparam2: spec.cparam2,
        params,
        output_size_bytes: spec.output_size,
        fuel: None,
    })
}

/// The device's engines: the profile's, else the device's.
fn engines(io: &LambdaIo<'_>, dev: &Device) -> anyhow::Result<u32> {
    if let Some(e) = io.perf().and_then(|p| p.engines) {
        return Ok(e);
    }
    Ok(dev.identify()?.engines.max(1))
}

fn trace_line(index: u64, offset: u64, out: &LambdaOutput) {
    let side = match out.ran {
        Ran::Host => "host",
        Ran::Device => "device",
        Ran::Both => "both (profile)",
    };
    let predicted = match out.predicted_ns {
        Some((h, d)) => format!("predicted host {h:.0} ns, device {d:.0} ns"),
        None => "no prediction".to_string(),
    };
    eprintln!(
        "request {index} at {offset}: {side}, {predicted}, cache {:.1}%, modelled {} ns",
        out.cache_ratio * 100.0,
        out.modelled_ns()
    );
}

pub(crate) fn account_json(
    a: &RunAccount,
    wall_ns: u64,
    modelled_ns: u64,
    output_bytes: u64,
) -> serde_json::Value {
    serde_json::json!({
        "requests_host": a.requests_host,
        "requests_device": a.requests_device,
        "requests_profiled": a.requests_profiled,
        "input_bytes": a.input_bytes,
        "output_bytes": output_bytes,
        "link_bytes": a.link_bytes,
        "media_bytes": a.media_bytes,
        "wall_ns": wall_ns,
        "modelled_ns": modelled_ns,
        "media_ns": a.media_ns,
        "link_ns": a.link_ns,
        "host_compute_ns": a.host_compute_ns,
        "device_compute_ns": a.device_compute_ns,
    })
}

fn print_account(a: &RunAccount, wall_ns: u64, modelled_ns: u64, output_bytes: u64, json: bool) {
    if json {
        println!(
            "{}",
            crate::output::Json(account_json(a, wall_ns, modelled_ns, output_bytes))
        );
        return;
    }
    println!(
        "requests: {} host, {} device, {} profiled (both)",
        a.requests_host, a.requests_device, a.requests_profiled
    );
    println!(
        "bytes: {} in, {} out, {} over the link, {} from the media",
        a.input_bytes, output_bytes, a.link_bytes, a.media_bytes
    );
    println!(
        "time: wall {:.3} ms, modelled {:.3} ms",
        wall_ns as f64 / 1e6,
        modelled_ns as f64 / 1e6
    );
}

/// Outputs finished out of order, written in order.
struct Ordered {
    next: u64,
    pending: BTreeMap<u64, Vec<u8>>,
    sink: Option<std::io::BufWriter<std::fs::File>>,
    bytes: u64,
}

impl Ordered {
    /// Nothing written yet, into a new file at `output` (none: the bytes are counted only).
    fn new(output: Option<&std::path::Path>) -> anyhow::Result<Ordered> {
        let sink = match output {
            Some(p) => Some(std::io::BufWriter::new(
                std::fs::File::create(p)
                    .with_context(|| format!("cannot create {}", p.display()))?,
            )),
            None => None,
        };
        Ok(Ordered {
            next: 0,
            pending: BTreeMap::new(),
            sink,
            bytes: 0,
        })
    }

    fn put(&mut self, index: u64, bytes: Vec<u8>) -> std::io::Result<()> {
        self.pending.insert(index, bytes);
        while let Some(b) = self.pending.remove(&self.next) {
            self.bytes += b.len() as u64;
            if let Some(s) = &mut self.sink {
                s.write_all(&b)?;
            }
            self.next += 1;
        }
        Ok(())
    }
}

pub fn run_read(args: ReadArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let spec = &args.spec;
    if spec.chunk == 0 || args.threads == 0 {
        bail!("--chunk and --threads must be positive");
    }
    if let Some(r) = spec.record {
        if r == 0 || !spec.chunk.is_multiple_of(r) {
            bail!("--chunk {} is not a multiple of --record {r}", spec.chunk);
        }
    }
    if let Some(dir) = connect::array_dir(global) {
        // On an array each member runs the requests over its own bytes.
        return crate::array_cmd::read_lambda(&dir, &args);
    }
    let dev = connect::open(global)?;
    let probe = LambdaIo::new(&dev, &LambdaOptions::default())?;
    let engines = engines(&probe, &dev)?;
    drop(probe);
    let io = LambdaIo::new(&dev, &options(spec, args.threads, engines))?;
    // Ctrl-C stops the λ runs (aborting those on the device); the λ is still unloaded.
    let interrupt = Interrupt::install()?;
    interrupt.forward_to(io.stop_flag());
    let (name, object) = lambda_object(&spec.prog)?;
    let lambda = Lambda::load(&dev, &name, &object, spec.entry.as_deref())?;
    let result = read_with(&io, &lambda, &args, engines);
    drop(io);
    lambda.unload()?;
    if interrupt.pressed() {
        eprintln!("csx read: interrupted: the λ runs were aborted");
        return Ok(crate::exit::INTERRUPTED);
    }
    result
}

fn read_with(
    io: &LambdaIo<'_>,
    lambda: &Lambda,
    args: &ReadArgs,
    engines: u32,
) -> anyhow::Result<u8> {
    let spec = &args.spec;
    let file = io.open(&args.devpath)?;
    let size = file.size_bytes();
    let chunks = size.div_ceil(spec.chunk);
    let base = base_args(spec)?;
    let ordered = Mutex::new(Ordered::new(args.output.as_deref())?);
    let account = Mutex::new(RunAccount::default());
    let next = AtomicU64::new(0);
    let start = Instant::now();
    let worker = || -> anyhow::Result<()> {
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= chunks {
                return Ok(());
            }
            let offset = index * spec.chunk;
            let len = spec.chunk.min(size - offset);
            let mut call = base.clone();
            if let Some(r) = spec.record {
                call.cparam1 += offset / r;
            }
            let out = file
                .read_lambda(offset, len, lambda, &call, spec.mode)
                .with_context(|| format!("request {index} at offset {offset}"))?;
            if spec.trace {
                trace_line(index, offset, &out);
            }
            lock(&account).add(len, &out);
            lock(&ordered).put(index, out.output)?;
        }
    };
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..args.threads).map(|_| s.spawn(worker)).collect();
        for h in handles {
            h.join().expect("a read worker panicked")?;
        }
        Ok(())
    })?;
    let wall_ns = start.elapsed().as_nanos() as u64;
    let mut ordered = ordered.into_inner().expect("workers are done");
    if let Some(s) = &mut ordered.sink {
        s.flush()?;
    }
    let account = account.into_inner().expect("workers are done");
    let modelled = account.modelled_ns(args.threads, engines);
    print_account(&account, wall_ns, modelled, ordered.bytes, spec.json);
    if spec.trace {
        trace_dispatcher(io);
    }
    Ok(crate::exit::SUCCESS)
}

/// The dispatcher's count of requests per side, on stderr.
fn trace_dispatcher(io: &LambdaIo<'_>) {
    let c = io.dispatcher().counters();
    eprintln!(
        "dispatcher: {} host, {} device, {} profiled",
        c.requests_host, c.requests_device, c.requests_profiled
    );
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn run_write(args: WriteArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let spec = &args.spec;
    if spec.chunk == 0 {
        bail!("--chunk must be positive");
    }
    let input = std::fs::read(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    if input.is_empty() {
        bail!("the input {} is empty", args.input.display());
    }
    let dev = connect::open(global)?;
    if dev.stat(&args.devpath).is_err() {
        dev.put_bytes(&args.devpath, &[])?;
    }
    let probe = LambdaIo::new(&dev, &LambdaOptions::default())?;
    let engines = engines(&probe, &dev)?;
    drop(probe);
    let io = LambdaIo::new(&dev, &options(spec, 1, engines))?;
    let (name, object) = lambda_object(&spec.prog)?;
    let lambda = Lambda::load(&dev, &name, &object, spec.entry.as_deref())?;
    let result = (|| -> anyhow::Result<u8> {
        let mut file = io.open(&args.devpath)?;
        let base = base_args(spec)?;
        let mut account = RunAccount::default();
        let mut offset = args.offset;
        let mut written = 0u64;
        let start = Instant::now();
        for (index, piece) in input.chunks(spec.chunk as usize).enumerate() {
            let out = file
                .write_lambda(offset, piece, &lambda, &base, spec.mode)
                .with_context(|| format!("request {index}"))?;
            if spec.trace {
                trace_line(index as u64, offset, &out);
            }
            account.add(piece.len() as u64, &out);
            offset += out.output.len() as u64;
            written += out.output.len() as u64;
        }
        let wall_ns = start.elapsed().as_nanos() as u64;
        print_account(
            &account,
            wall_ns,
            account.modelled_ns(1, engines),
            written,
            spec.json,
        );
        Ok(crate::exit::SUCCESS)
    })();
    drop(io);
    lambda.unload()?;
    result
}

pub fn run_cache(args: CacheArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    match args.command {
        CacheCommand::Drop(mut a) => {
            if a.dev.device.is_none() {
                a.dev.device.clone_from(&global.device);
            }
            let g = a.dev.global();
            cache_drop(a, &g)
        }
    }
}

fn cache_drop(a: CacheDropArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let state_dir = state_of(&a.state_dir, &a.state_dir_old);
    {
        {
            let dev = connect::open(global)?;
            let io = LambdaIo::new(
                &dev,
                &LambdaOptions {
                    state_dir,
                    ..LambdaOptions::default()
                },
            )?;
            io.cache_drop()?;
            let image = io.local()?.path().display().to_string();
            println!("dropped {image} from the host page cache");
            Ok(crate::exit::SUCCESS)
        }
    }
}
