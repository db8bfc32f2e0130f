//! `csx exec`: run a program on the device next to a file.
//!
//! The steps, each timed on the host: load the program image into a free slot (in
//! chunks) → activate it (verify, and compile with the JIT) → stage the input file range
//! into device memory with a Memory Copy on the device (the bytes never come to the
//! host) → allocate the output window → execute → read the output back. Whatever
//! happens, the allocations are freed and the program unloaded afterwards.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Args;
use csx_host::proto::{MemHandle, Status, Timing};
use csx_host::session::Session;
use csx_host::{program_type_of, Device, ExecuteRequest, Execution};
use serde_json::json;

use crate::connect::{self, parse_size};
use crate::interrupt::Interrupt;
use crate::{exit, hex, GlobalArgs};

const EXEC_HELP: &str = "\
The program's view (C, compiled with `clang -O2 -target bpf -c`):
  u64 entry(u8 *data, u64 len, u64 *state, u64 state_len, const struct csx_args *args)
  data, len         window 0: the DEVPATH range, staged into device memory
  args->windows[1]  the --output-size bytes (zeroed), read back after the run
  state             the device's shared state, kept across executions
  args              cparam1, cparam2, the windows, and the --params-hex bytes
Without DEVPATH, window 0 is 8 zero bytes, so the output is always window 1.

Examples:
  csx put numbers.bin /data/numbers.bin
  csx exec sum.bpf.o /data/numbers.bin
  csx exec sum.bpf.o /data/numbers.bin:4096:8192 --engine interp --json
  csx exec filter.bpf.o /data/rows --output-size 1MiB -o matches.bin --cparam1 42

Stopping: a run ends at its time limit (--time-limit-ms, else the device's, 1 s by
default) or when its fuel runs out. Ctrl-C aborts it on the device; the command still
frees what it allocated and unloads the program (a second Ctrl-C quits at once).

Exit status: 0 when the program returned; 3 when it trapped or was stopped by a limit
(out of fuel, or past its time limit); 130 when Ctrl-C aborted it; 1 on any other
error. The program is unloaded when the command ends, however it ends (a killed
command's connection takes it with it).";

/// Run a program on the device over a device file.
///
/// Loads PROG (an eBPF ELF object, or raw bytecode) into a free program slot, activates
/// it, stages the input file range into window 0 with a Memory Copy on the device,
/// gives window 1 of --output-size bytes for output, executes, and prints r0, the
/// status, the trap if any and the device's timing breakdown. Frees what it allocated
/// and unloads the program afterwards.
#[derive(Debug, Args)]
#[command(after_help = EXEC_HELP)]
pub struct ExecArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The program: an ELF object from clang, or raw eBPF bytecode.
    prog: PathBuf,
    /// The ELF function to run (the only global function if absent).
    #[arg(long, value_name = "NAME")]
    entry: Option<String>,
    /// Window 0: a device file, or a byte range of it as DEVPATH:OFFSET:LEN.
    #[arg(value_name = "DEVPATH[:OFFSET:LEN]")]
    devpath: Option<String>,
    /// The old spelling of the DEVPATH argument.
    #[arg(
        long = "input",
        hide = true,
        value_name = "DEVPATH",
        conflicts_with = "devpath"
    )]
    old_input: Option<String>,
    /// Bytes of window 1, the output (e.g. 4096 or 1MiB).
    #[arg(long, value_name = "N", value_parser = parse_size)]
    output_size: Option<u64>,
    /// Write window 1 to this local file (otherwise its first bytes are printed).
    #[arg(short, long, value_name = "FILE", requires = "output_size")]
    output: Option<PathBuf>,
    /// args->cparam1.
    #[arg(long, value_name = "N", default_value_t = 0)]
    cparam1: u64,
    /// args->cparam2.
    #[arg(long, value_name = "N", default_value_t = 0)]
    cparam2: u64,
    /// The parameter bytes (args->params), as hex.
    #[arg(long, value_name = "HEX")]
    params_hex: Option<String>,
    #[command(flatten)]
    engine: crate::engine_arg::DeviceEngineChoice,
    /// The run's fuel budget (the device's default if absent).
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// The run's time limit in milliseconds (the device's default if absent, 1 s unless
    /// its device.json says otherwise; at most 3600000).
    #[arg(long, value_name = "MS")]
    time_limit_ms: Option<u32>,
    /// Print one JSON object with the keys r0, status, trap, timing (and more).
    #[arg(long)]
    json: bool,
}

/// `DEVPATH[:OFFSET:LEN]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InputRange {
    path: String,
    range: Option<(u64, u64)>,
}

fn parse_input(text: &str) -> anyhow::Result<InputRange> {
    let parts: Vec<&str> = text.rsplitn(3, ':').collect();
    if let [len, offset, path] = parts[..] {
        if let (Ok(offset), Ok(len)) = (parse_size(offset), parse_size(len)) {
            return Ok(InputRange {
                path: path.to_string(),
                range: Some((offset, len)),
            });
        }
    }
    if text.is_empty() {
        bail!("the input names no device file");
    }
    Ok(InputRange {
        path: text.to_string(),
        range: None,
    })
}

/// Host-side time of each step, in nanoseconds.
#[derive(Debug, Default, Clone, Copy)]
struct Steps {
    load_ns: u64,
    activate_ns: u64,
    stage_ns: u64,
    execute_ns: u64,
    output_ns: u64,
}

/// What the run produced.
struct Outcome {
    run: Execution,
    steps: Steps,
    staged_bytes: u64,
    output: Option<Vec<u8>>,
}

fn nanos(since: Instant) -> u64 {
    since.elapsed().as_nanos() as u64
}

/// The step that finished, timed from `since`.
fn timed<T>(slot: &mut u64, since: Instant, r: T) -> T {
    *slot = nanos(since);
    r
}

/// Loads, activates, stages and runs on `session`, which frees and unloads all of it
/// when it closes or drops.
fn load_and_run(
    session: &mut Session<'_>,
    args: &ExecArgs,
    image: &[u8],
    params: Vec<u8>,
    interrupt: &Interrupt,
) -> anyhow::Result<Outcome> {
    let mut steps = Steps::default();
    let name = args.prog.display().to_string();
    let t = Instant::now();
    let pind =
        session.load_program_entry(&name, args.entry.as_deref(), program_type_of(image), image);
    let pind = timed(&mut steps.load_ns, t, pind)?;
    let t = Instant::now();
    let activated = session.activate(pind, args.engine.kind());
    timed(&mut steps.activate_ns, t, activated)?;

    let t = Instant::now();
    let (window0, staged_bytes) = stage_input(session, args.devpath.as_deref())?;
    let out = output_window(session, args.output_size)?;
    let mut req = ExecuteRequest::new(pind)
        .cparams(args.cparam1, args.cparam2)
        .params(params)
        .window(window0.0, 0, window0.1);
    if let Some((h, n)) = out {
        req = req.window(h, 0, n);
    }
    if let Some(f) = args.fuel {
        req = req.fuel(f);
    }
    if let Some(ms) = args.time_limit_ms {
        req = req.time_limit_ms(ms);
    }
    steps.stage_ns = nanos(t);

    let t = Instant::now();
    let (run, finished) = match interrupt.execute(session.device(), &req) {
        // Stopped by a limit, like a fuel trap: reported, and exit status 3.
        Err(csx_host::CallError::TimeLimitExceeded(f)) => (stopped_by_limit(*f), false),
        r => (r.context("execute")?, true),
    };
    steps.execute_ns = nanos(t);

    let t = Instant::now();
    let output = match out {
        Some((h, n)) if finished && !run.trapped() => Some(
            session
                .read(h, 0, n)
                .context("cannot read the output window")?,
        ),
        _ => None,
    };
    steps.output_ns = nanos(t);
    Ok(Outcome {
        run,
        steps,
        staged_bytes,
        output,
    })
}

/// A run its time limit stopped, reported like a trap: no r0, no timing.
fn stopped_by_limit(f: csx_host::DeviceFailure) -> Execution {
    Execution {
        r0: 0,
        status: f.status,
        trap: None,
        timing: Timing::default(),
        detail: f.detail,
        fuel_used: 0,
        trace: Vec::new(),
        work: Vec::new(),
    }
}

/// Window 0: the input range staged into device memory by a Memory Copy on the
/// device, or 8 zero bytes without an input. The window and the bytes staged.
fn stage_input(
    session: &mut Session<'_>,
    input: Option<&str>,
) -> anyhow::Result<((MemHandle, u64), u64)> {
    let Some(text) = input else {
        let h = session.alloc(8).context("cannot allocate window 0")?;
        session.fill(h, 0, 8, 0).context("cannot zero window 0")?;
        return Ok(((h, 8), 0));
    };
    let input = parse_input(text)?;
    let (offset, len) = match input.range {
        Some(r) => r,
        None => (
            0,
            session
                .device()
                .stat(&input.path)
                .with_context(|| format!("cannot stat {}", input.path))?
                .size_bytes,
        ),
    };
    if len == 0 {
        bail!("the input {text} is empty; a window needs at least one byte");
    }
    let h = session
        .alloc(len)
        .with_context(|| format!("cannot allocate {len} bytes of device memory"))?;
    session
        .copy_file(&input.path, offset, len, h, 0)
        .with_context(|| format!("cannot stage {text} into device memory"))?;
    Ok(((h, len), len))
}

/// Window 1 of `size` zeroed bytes, if asked for.
fn output_window(
    session: &mut Session<'_>,
    size: Option<u64>,
) -> anyhow::Result<Option<(MemHandle, u64)>> {
    match size {
        None => Ok(None),
        Some(0) => bail!("--output-size must be at least 1 byte"),
        Some(n) => {
            let h = session
                .alloc(n)
                .with_context(|| format!("cannot allocate {n} bytes of output"))?;
            session
                .fill(h, 0, n, 0)
                .context("cannot zero the output window")?;
            Ok(Some((h, n)))
        }
    }
}

fn timing_json(t: &Timing) -> serde_json::Value {
    json!({
        "queued_ns": t.queued_ns,
        "transfer_ns": t.transfer_ns,
        "prepare_ns": t.prepare_ns,
        "execute_ns": t.execute_ns,
        "total_ns": t.total_ns,
        "modelled_ns": t.modelled_ns,
    })
}

fn print_outcome(args: &ExecArgs, o: &Outcome) -> anyhow::Result<()> {
    if let (Some(path), Some(bytes)) = (&args.output, &o.output) {
        std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Without a local file the output is shown.
    let shown = o.output.as_deref().filter(|_| args.output.is_none());
    if args.json {
        println!("{:#}", outcome_json(o, shown));
    } else {
        print_run(&o.run);
        print_costs(o);
        if let Some(bytes) = shown {
            print_output(bytes);
        }
    }
    Ok(())
}

fn outcome_json(o: &Outcome, shown: Option<&[u8]>) -> serde_json::Value {
    let r = &o.run;
    let trap = r
        .trap
        .as_ref()
        .map(|t| json!({ "kind": t.kind_name(), "pc": t.pc, "message": t.to_string() }));
    let detail = r
        .detail
        .as_ref()
        .map(|d| json!({ "function": d.function, "code": d.code, "message": d.message }));
    let s = o.steps;
    let mut out = json!({
        "r0": r.r0,
        "r0_signed": r.r0_signed(),
        "status": r.status.name(),
        "trap": trap,
        "timing": timing_json(&r.timing),
        "host_timing": {
            "load_ns": s.load_ns, "activate_ns": s.activate_ns, "stage_ns": s.stage_ns,
            "execute_ns": s.execute_ns, "output_ns": s.output_ns,
        },
        "staged_bytes": o.staged_bytes,
        "fuel_used": r.fuel_used,
        "work": work_json(&r.work),
        "detail": detail,
        "trace": r.trace,
    });
    if let Some(bytes) = shown {
        out["output_hex"] = json!(hex_string(bytes));
    }
    out
}

/// r0, the status, and the trap, detail and trace if any.
fn print_run(r: &Execution) {
    let signed = match r.r0_signed() {
        n if n < 0 => format!(" ({n})"),
        _ => String::new(),
    };
    println!("r0        {}{signed}", r.r0);
    println!("status    {}", r.status);
    if let Some(t) = &r.trap {
        println!("trap      {t}");
    }
    if let Some(d) = &r.detail {
        println!("detail    {d}");
    }
    for line in &r.trace {
        println!("trace     {line}");
    }
}

/// The device's and the host's timing, the fuel and the work executed.
fn print_costs(o: &Outcome) {
    let r = &o.run;
    let t = r.timing;
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "device    queued {:.1} µs, transfer {:.1} µs, prepare {:.1} µs, execute {:.1} µs, total {:.1} µs",
        us(t.queued_ns),
        us(t.transfer_ns),
        us(t.prepare_ns),
        us(t.execute_ns),
        us(t.total_ns)
    );
    let s = o.steps;
    println!(
        "host      load {:.1} µs, activate {:.1} µs, stage {:.1} µs ({} bytes), execute {:.1} µs, output {:.1} µs",
        us(s.load_ns),
        us(s.activate_ns),
        us(s.stage_ns),
        o.staged_bytes,
        us(s.execute_ns),
        us(s.output_ns)
    );
    println!("fuel      {}", r.fuel_used);
    if !r.work.is_empty() {
        let total: u64 = r.work.iter().sum();
        let classes: Vec<String> = work_classes(&r.work)
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        println!("executed  {total} instructions: {}", classes.join(", "));
    }
}

/// The output window's first 256 bytes, as hex.
fn print_output(bytes: &[u8]) {
    let shown = &bytes[..bytes.len().min(256)];
    let first = if shown.len() < bytes.len() {
        ", first 256"
    } else {
        ""
    };
    println!(
        "output    {} bytes{first}: {}",
        bytes.len(),
        hex_string(shown)
    );
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The device to run on: on an array, the member holding the input (whose path there
/// replaces the input's).
fn open_device(args: &mut ExecArgs, global: &GlobalArgs) -> anyhow::Result<Device> {
    let Some(dir) = connect::array_dir(global) else {
        return connect::open(global);
    };
    let input = args.devpath.as_deref().map(parse_input).transpose()?;
    let (dev, path) = crate::array_cmd::exec_member(&dir, input.as_ref().map(|i| i.path.as_str()))?;
    if let (Some(i), Some(path)) = (input, path) {
        args.devpath = Some(match i.range {
            Some((offset, len)) => format!("{path}:{offset}:{len}"),
            None => path,
        });
    }
    Ok(dev)
}

pub fn run(args: ExecArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let mut args = args;
    if let Some(old) = args.old_input.take() {
        eprintln!("csx: exec --input is deprecated; give the device file as an argument (csx exec PROG DEVPATH)");
        args.devpath = Some(old);
    }
    let interrupt = Interrupt::install()?;
    let image = std::fs::read(&args.prog)
        .with_context(|| format!("cannot read {}", args.prog.display()))?;
    let params = match &args.params_hex {
        Some(h) => hex::parse(h).context("--params-hex")?,
        None => Vec::new(),
    };
    let dev = open_device(&mut args, global)?;
    let mut session = Session::new(&dev);
    let outcome = load_and_run(&mut session, &args, &image, params, &interrupt);
    // Free and unload whatever happened; a failure to release only matters if the run succeeded.
    let released = session
        .close()
        .context("cannot release the run's device resources");
    if interrupt.pressed() {
        released?;
        dev.close().context("closing the device")?;
        eprintln!("csx exec: interrupted: the program was aborted on the device");
        return Ok(exit::INTERRUPTED);
    }
    let outcome = outcome?;
    released?;
    dev.close().context("closing the device")?;
    print_outcome(&args, &outcome)?;
    // A trap and a run stopped by its time limit exit alike (a fuel trap is a trap).
    Ok(if outcome.run.status == Status::Success {
        exit::SUCCESS
    } else {
        exit::TRAP
    })
}

/// `(class name, count)` of an execution's work (`ExecuteInfo::work` order).
pub(crate) fn work_classes(work: &[u64]) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    csx_ebpf::count::InsnClass::ALL
        .iter()
        .zip(work)
        .map(|(c, &n)| (c.name(), n))
}

/// An execution's work as a JSON object by class name, with its total (`null` when the
/// device did not count).
pub(crate) fn work_json(work: &[u64]) -> serde_json::Value {
    if work.is_empty() {
        return serde_json::Value::Null;
    }
    let mut m = serde_json::Map::new();
    for (c, n) in work_classes(work) {
        m.insert(c.to_string(), json!(n));
    }
    m.insert("total".to_string(), json!(work.iter().sum::<u64>()));
    serde_json::Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_ranges() {
        assert_eq!(
            parse_input("/a").unwrap(),
            InputRange {
                path: "/a".into(),
                range: None
            }
        );
        assert_eq!(
            parse_input("/a:16:4KiB").unwrap(),
            InputRange {
                path: "/a".into(),
                range: Some((16, 4096))
            }
        );
        // A colon that is not followed by two numbers belongs to the path.
        assert_eq!(
            parse_input("/a:b").unwrap(),
            InputRange {
                path: "/a:b".into(),
                range: None
            }
        );
        assert!(parse_input("").is_err());
    }
}
