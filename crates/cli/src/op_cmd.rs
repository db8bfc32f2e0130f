//! `csx op list` and `csx pipe`: the operator catalogue and pipelines of operators on the
//! device (csx-fs's `ops` and `pipe`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use csx_fs::ops::{Catalogue, ParamKind};
use csx_fs::pipe::{self, PipeOptions, Sink, Source};
use serde_json::json;

use crate::connect::{self, parse_size};
use crate::{exit, GlobalArgs};

/// The device's operators (Metal FS): `csx op list`.
#[derive(Debug, clap::Args)]
pub struct OpArgs {
    #[command(subcommand)]
    command: OpCommand,
}

#[derive(Debug, clap::Subcommand)]
enum OpCommand {
    Pipe(Box<PipeArgs>),
    /// List the operators a pipeline stage may name, with their parameters.
    ///
    /// Each operator is a device program that follows the streaming operator contract
    /// (csx.h, "Streaming operators"); any object built with `csx build` that follows it
    /// is a user operator, named in a stage by its path (`./myop.o --int 5`).
    List {
        /// Print JSON for scripts.
        #[arg(long)]
        json: bool,
    },
    /// The process behind a mount's `.ops/NAME` executable (run by it, not by hand):
    /// classifies its stdin and stdout, registers with the mount and streams host ends.
    #[command(hide = true)]
    Proxy {
        /// The mount's operator socket.
        #[arg(long)]
        socket: PathBuf,
        /// The mount point.
        #[arg(long)]
        mount: PathBuf,
        /// The operator and its parameters.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
}

const PIPE_HELP: &str = "\
Stages: OP [--param VALUE]... separated by `|` (one shell word: quote the pipeline).
  `csx op list` shows every operator and its parameters. A user operator is the path of
  an object built with `csx build` (it contains a `/` or ends in .o), its parameters
  given in order as --int N, --bytes TEXT or --hex HEX (and --state-bytes N, --entry NAME).

Examples:
  csx gen u32 --size 64MiB -o nums.bin && csx put nums.bin /nums
  csx op pipe 'filter --type u32 --op gt --value 100 | aggregate --type u32 --text' /nums
  csx op pipe 'datagen --size 1GiB | filter --op lt --value 0x4000000000000000' --to /quarter
  csx op pipe 'compress' /logs --to /logs.lz4
  csx op pipe 'decompress | grep --pattern ERROR' /logs.lz4 -o errors.txt
  csx op pipe 'encrypt --key 000102...1f' /secret --to /secret.enc --json
  csx op pipe 'compress' --input local.log --to /logs.lz4

Without --to or --output the result goes to standard output (--discard: nowhere).
Ctrl-C, SIGTERM or SIGHUP stops the pipe: the device runs are aborted and the stages'
programs unloaded before csx exits (130, 143, 129); a second signal exits at once.
On failure (a stage traps or returns an error) the pipe stops, exits 3 (trap) or 1, and no
output looks complete: --to is written as DEVPATH.csx-pipe-partial and renamed over
DEVPATH only after the last chunk (on failure it is deleted and DEVPATH left as it was);
--output likewise writes FILE.partial and renames it only on success.";

/// Run a pipeline of operators on the device over a device file.
///
/// Every stage runs on the device; chunks flow from stage to stage through device memory,
/// double-buffered so the stages overlap, and only the last stage's output crosses to the
/// host (nothing does with --to, a device file). --json reports each stage's calls,
/// bytes and device time.
#[derive(Debug, clap::Args)]
#[command(after_help = PIPE_HELP)]
pub struct PipeArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The stages: 'OP [--param VALUE]... | OP ...'.
    pipeline: String,
    /// The input device file (omit when the first stage generates, like datagen).
    #[arg(value_name = "DEVPATH")]
    devpath: Option<String>,
    /// Read the input from a local file instead (it crosses to the device once).
    #[arg(long, value_name = "FILE", conflicts_with = "devpath")]
    input: Option<PathBuf>,
    /// The old spelling of --input.
    #[arg(long = "input-local", hide = true, value_name = "FILE", conflicts_with_all = ["devpath", "input"])]
    old_input_local: Option<PathBuf>,
    /// Write the output to this device file (nothing crosses to the host).
    #[arg(long, value_name = "DEVPATH")]
    to: Option<String>,
    /// Write the output to this local file.
    #[arg(short, long, value_name = "FILE", conflicts_with = "to")]
    output: Option<PathBuf>,
    /// The old spelling of --output.
    #[arg(long = "output-local", hide = true, value_name = "FILE", conflicts_with_all = ["to", "output"])]
    old_output_local: Option<PathBuf>,
    /// Drop the output on the device (a benchmark's sink).
    #[arg(long, conflicts_with_all = ["to", "output", "old_output_local"])]
    discard: bool,
    /// Bytes of one chunk (4KiB..=256MiB).
    #[arg(long, value_name = "N", value_parser = parse_size, default_value = "4MiB")]
    chunk: u64,
    #[command(flatten)]
    engine: crate::engine_arg::DeviceEngineChoice,
    /// Print a JSON report (the output then needs --to, --output or --discard).
    #[arg(long)]
    json: bool,
}

/// The old command `csx pipe`, with its old flags: `--input DEVPATH` and
/// `--output DEVPATH` (now the DEVPATH argument and `--to`), `--input-local` and
/// `--output-local` (now `--input` and `--output`).
#[derive(Debug, clap::Args)]
pub struct OldPipeArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    pipeline: String,
    #[arg(long, value_name = "DEVPATH")]
    input: Option<String>,
    #[arg(long, value_name = "FILE", conflicts_with = "input")]
    input_local: Option<PathBuf>,
    #[arg(long, value_name = "DEVPATH")]
    to: Option<String>,
    #[arg(long, value_name = "DEVPATH", conflicts_with = "to")]
    output: Option<String>,
    #[arg(long, value_name = "FILE", conflicts_with_all = ["to", "output"])]
    output_local: Option<PathBuf>,
    #[arg(long, conflicts_with_all = ["to", "output", "output_local"])]
    discard: bool,
    #[arg(long, value_name = "N", value_parser = parse_size, default_value = "4MiB")]
    chunk: u64,
    #[command(flatten)]
    engine: crate::engine_arg::DeviceEngineChoice,
    #[arg(long)]
    json: bool,
}

impl From<OldPipeArgs> for PipeArgs {
    fn from(a: OldPipeArgs) -> PipeArgs {
        PipeArgs {
            dev: a.dev,
            pipeline: a.pipeline,
            devpath: a.input,
            input: a.input_local,
            old_input_local: None,
            to: a.to.or(a.output),
            output: a.output_local,
            old_output_local: None,
            discard: a.discard,
            chunk: a.chunk,
            engine: a.engine,
            json: a.json,
        }
    }
}

pub fn run_op(args: OpArgs) -> anyhow::Result<u8> {
    let json = match args.command {
        OpCommand::Pipe(a) => {
            let g = a.dev.global();
            return run_pipe(*a, &g);
        }
        OpCommand::List { json } => json,
        OpCommand::Proxy {
            socket,
            mount,
            words,
        } => return Ok(csx_fs::shell::proxy(&socket, &mount, words)?),
    };
    let cat = Catalogue;
    if json {
        let ops: Vec<_> = cat
            .operators()
            .iter()
            .map(|o| {
                json!({
                    "name": o.name,
                    "doc": o.doc,
                    "source_only": o.source_only,
                    "state_bytes": o.state_bytes,
                    "params": o.params.iter().map(|p| json!({
                        "name": p.name,
                        "short": p.short.map(String::from),
                        "type": match p.kind {
                            ParamKind::Bool => "bool",
                            ParamKind::Int => "int",
                            ParamKind::Choice(_) => "choice",
                            ParamKind::Bytes { .. } => "bytes",
                            ParamKind::Text { .. } => "text",
                        },
                        "choices": match p.kind { ParamKind::Choice(c) => c.to_vec(), _ => vec![] },
                        "size": p.kind.size(),
                        "offset": p.offset,
                        "default": p.default,
                        "required": p.default.is_none() && p.kind != ParamKind::Bool,
                        "doc": p.doc,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", crate::output::Json(json!({ "operators": ops })));
        return Ok(exit::SUCCESS);
    }
    for o in cat.operators() {
        println!("{o}");
        println!("    {}", o.doc);
        for p in o.params {
            let default = match (p.kind, p.default) {
                (ParamKind::Bool, _) => String::new(),
                (_, Some(d)) => format!(" (default {d})"),
                (_, None) => " (required)".into(),
            };
            println!("    --{:<8} {}{default}", p.name, p.doc);
        }
    }
    Ok(exit::SUCCESS)
}

/// Runs `csx op pipe`: the old spellings first, then the pipe with signals and
/// progress, then its report.
pub fn run_pipe(args: PipeArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let args = with_new_spellings(args);
    let stages = Catalogue.parse_pipeline(&args.pipeline)?;
    if args.json && args.to.is_none() && args.output.is_none() && !args.discard {
        anyhow::bail!("--json prints the report on standard output: give --to DEVPATH, --output FILE or --discard for the data");
    }
    let source = source(&args)?;
    let partial = args
        .output
        .as_ref()
        .map(|f| PathBuf::from(format!("{}.partial", f.display())));
    let sink = sink(&args, partial.as_deref())?;
    let dev = connect::open(global)?;
    let signals = Signals::install()?;
    let total = args
        .devpath
        .as_ref()
        .and_then(|p| dev.stat(p).ok())
        .map(|i| i.size_bytes);
    use std::io::IsTerminal as _;
    let show = !args.json
        && std::io::stderr().is_terminal()
        && (args.devpath.is_some() || args.input.is_some())
        && (args.to.is_some() || args.output.is_some() || args.discard);
    let counter = Arc::new(AtomicU64::new(0));
    let opts = PipeOptions {
        chunk: args.chunk,
        engine: args.engine.kind(),
        fuel: None,
        progress: show.then(|| Arc::clone(&counter)),
        stop: Some(Arc::clone(&signals.stop)),
    };
    let result = with_progress(show.then_some((&*counter, total)), || {
        pipe::run(&dev, &stages, source, sink, &opts)
    });
    let close = dev.close();
    let report = match result {
        Ok(r) => r,
        Err(e) => return Ok(failed(&e, partial.as_deref(), &signals)),
    };
    close.context("closing the device")?;
    if let (Some(tmp), Some(dst)) = (&partial, &args.output) {
        std::fs::rename(tmp, dst)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))?;
    }
    print_report(&args, &report);
    Ok(exit::SUCCESS)
}

/// The old spellings of `op pipe`'s flags, each with its one-line note.
fn with_new_spellings(mut args: PipeArgs) -> PipeArgs {
    if let Some(old) = args.old_input_local.take() {
        eprintln!("csx: op pipe --input-local is deprecated; use --input FILE");
        args.input = Some(old);
    }
    if let Some(old) = args.old_output_local.take() {
        eprintln!("csx: op pipe --output-local is deprecated; use -o/--output FILE");
        args.output = Some(old);
    }
    args
}

fn source(args: &PipeArgs) -> anyhow::Result<Source> {
    Ok(match (&args.devpath, &args.input) {
        (Some(p), _) => Source::DeviceFile(p.clone()),
        (None, Some(f)) => Source::Host(Box::new(
            std::fs::File::open(f).with_context(|| format!("cannot open {}", f.display()))?,
        )),
        (None, None) => Source::Nothing,
    })
}

/// Where the output goes; a local file is written under `partial` first.
fn sink(args: &PipeArgs, partial: Option<&std::path::Path>) -> anyhow::Result<Sink> {
    Ok(if let Some(p) = &args.to {
        Sink::DeviceFile(p.clone())
    } else if let Some(tmp) = partial {
        Sink::Host(Box::new(std::io::BufWriter::new(
            std::fs::File::create(tmp)
                .with_context(|| format!("cannot create {}", tmp.display()))?,
        )))
    } else if args.discard {
        Sink::Discard
    } else {
        Sink::Host(Box::new(std::io::stdout()))
    })
}

/// SIGINT, SIGTERM and SIGHUP: the first stops the run on the device (and lets it
/// unload its programs), a second exits at once.
struct Signals {
    stop: Arc<AtomicBool>,
    caught: Arc<AtomicUsize>,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        let stop = Arc::new(AtomicBool::new(false));
        let caught = Arc::new(AtomicUsize::new(0));
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&stop))
                .context("cannot install the signal handlers")?;
            signal_hook::flag::register(sig, Arc::clone(&stop))
                .context("cannot install the signal handlers")?;
            signal_hook::flag::register_usize(sig, Arc::clone(&caught), sig as usize)
                .context("cannot install the signal handlers")?;
        }
        Ok(Signals { stop, caught })
    }
}

/// Runs `work`; with `progress` (the input consumed so far, and its size if known),
/// prints the input consumed on stderr once a second meanwhile.
fn with_progress<T: Send>(
    progress: Option<(&AtomicU64, Option<u64>)>,
    work: impl FnOnce() -> T,
) -> T {
    let Some((counter, total)) = progress else {
        return work();
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let start = std::time::Instant::now();
            let mut next = std::time::Duration::from_secs(1);
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(50));
                if start.elapsed() >= next {
                    next += std::time::Duration::from_secs(1);
                    let n = counter.load(Ordering::Relaxed) >> 20;
                    match total {
                        Some(t) => eprint!("\rcsx: pipe: {n} of {} MiB read", t >> 20),
                        None => eprint!("\rcsx: pipe: {n} MiB read"),
                    }
                }
            }
            if start.elapsed() >= std::time::Duration::from_secs(1) {
                eprintln!();
            }
        });
        let r = work();
        done.store(true, Ordering::Release);
        r
    })
}

/// A failed pipe: the partial local output removed, the failure said once; its exit
/// status.
fn failed(e: &pipe::PipeError, partial: Option<&std::path::Path>, signals: &Signals) -> u8 {
    if let Some(tmp) = partial {
        let _ = std::fs::remove_file(tmp);
    }
    if let pipe::PipeError::Stopped(_) = e {
        let sig = signals.caught.load(Ordering::Acquire);
        eprintln!(
            "csx: pipe stopped by signal {sig}: its device runs were aborted and its programs unloaded"
        );
        return u8::try_from(128 + sig).unwrap_or(exit::ERROR);
    }
    if matches!(e, pipe::PipeError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    {
        // The reader of standard output went away (`| head`): quiet, as SIGPIPE.
        return csx_fs::shell::SIGPIPE_STATUS;
    }
    eprintln!("csx: error: {e}");
    if matches!(e, pipe::PipeError::Trap { .. }) {
        exit::TRAP
    } else {
        exit::ERROR
    }
}

fn print_report(args: &PipeArgs, report: &pipe::PipeReport) {
    if args.json {
        println!("{}", crate::output::Json(report));
    } else if args.to.is_some() || args.output.is_some() || args.discard {
        let secs = report.wall_ns as f64 / 1e9;
        eprintln!(
            "csx: {} stages, {} bytes in, {} bytes out in {:.3} s ({:.1} MiB/s of input)",
            report.stages.len(),
            report.bytes_in,
            report.bytes_out,
            secs,
            report.bytes_in as f64 / secs.max(1e-9) / (1 << 20) as f64
        );
    }
}
