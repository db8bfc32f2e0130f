//! `csx ssb run`: one Star Schema Benchmark query on the device (csx-data).

use std::io::IsTerminal as _;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use csx_data::scan::FilterStrategy;
use csx_data::ssb::run::{run, ProbeKind, QueryRun, RunOptions, Split};
use csx_data::ssb::{queries, yardstick};
use csx_host::proto::EngineKind;
use serde_json::json;

use crate::connect;
use crate::engine_arg::DeviceEngine;
use crate::{exit, GlobalArgs};

/// The Star Schema Benchmark on the device (Delilah's experiment).
#[derive(Debug, Args)]
pub struct SsbArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    #[command(subcommand)]
    command: SsbCommand,
}

#[derive(Debug, Subcommand)]
enum SsbCommand {
    Run(RunArgs),
}

/// Run one SSB query (Q1.1-Q1.3, Q3.1-Q3.4) on the device.
///
/// The dataset lives on the device in the columnar format (`csx gen ssb`, `csx put -r`);
/// when --data has no dataset yet, SSB at --sf is generated and put there first.
///
/// With full offload (the default) the device stages the columns from its media, runs
/// the dimension operators at once on its engines (selection masks, then lookup tables
/// in the shared state), probes LINEORDER in partitions at once (one per engine unless
/// --partitions), and merges the sums: only the result crosses to the host.
/// host-agg: the device selects and joins, the host sums the joined rows.
/// host: the device only sends the columns; the host does everything.
///
/// Reported: the rows, bytes to the host, the modelled device time (the device's
/// performance profile; the same on every machine), wall time and its phases.
///
/// Examples:
///   csx ssb run Q3.3 --sf 1
///   csx ssb run Q1.1 --sf 0.1 --split host --engine interp --json
///   csx ssb run 3.3 --sf 1 --filter accel --partitions 4
///   csx ssb run Q3.3 --sf 1 --engine interp --probe operator
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
struct RunArgs {
    /// The query: Q1.1, Q1.2, Q1.3, Q3.1, Q3.2, Q3.3 or Q3.4 (the Q is optional).
    query: String,
    /// Scale factor of the dataset (generated and put when missing).
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Device directory of the dataset (default /ssb/sfN).
    #[arg(long, value_name = "DEVDIR")]
    data: Option<String>,
    /// Where the work happens: offload, host-agg or host.
    #[arg(long, default_value = "offload")]
    split: String,
    /// The device's engine for the operators.
    #[arg(long, value_enum, value_name = "ENGINE", default_value_t = DeviceEngine::Jit)]
    engine: DeviceEngine,
    /// How selections run: bitmask, unrolled (eBPF) or accel (csx_filter_u32). With
    /// --probe emitted this is the dimensions' selections only (LINEORDER's are tested
    /// inside the probe).
    #[arg(long, default_value = "bitmask")]
    filter: String,
    /// What probes LINEORDER: emitted (raw eBPF made for the query: selections, joins
    /// and sum in one pass) or operator (filter operators, then sdk/ssb's ssb_probe).
    #[arg(long, default_value = "emitted")]
    probe: String,
    /// LINEORDER partitions probed at once (default: the device's engine count).
    #[arg(long)]
    partitions: Option<u32>,
    /// LINEORDER rows staged per round (a multiple of 64): the next round is staged
    /// while this one is probed.
    #[arg(long, value_name = "ROWS", default_value_t = csx_data::ssb::run::ROUND_ROWS_DEFAULT)]
    round_rows: u64,
    /// Seed of the generator, when the dataset is generated.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the result and its costs as JSON.
    /// Ask the device to keep the staged columns resident in its memory and reuse what
    /// an earlier query left there (a served device with `--resident-memory`; the report
    /// says which columns were reused and the bytes not read again).
    #[arg(long)]
    resident: bool,
    /// Then read the bytes the run copied from the media again, straight from the
    /// device's image (an embedded device) with O_DIRECT in 1 MiB requests, one at a time
    /// and 4 in flight (fio's psync and libaio --iodepth=4), and report their bandwidth
    /// beside the load phase's: the staging's yardstick for the same bytes.
    #[arg(long)]
    yardstick: bool,
    #[arg(long)]
    json: bool,
}

pub fn run_cmd(args: SsbArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let SsbCommand::Run(args) = args.command;
    let q = queries::query(&args.query).with_context(|| {
        format!(
            "unknown SSB query {:?}; queries: {}",
            args.query,
            queries::names()
        )
    })?;
    let split = Split::parse(&args.split)
        .with_context(|| format!("unknown split {:?}: offload, host-agg or host", args.split))?;
    let strategy = FilterStrategy::parse(&args.filter).with_context(|| {
        format!(
            "unknown filter {:?}: bitmask, unrolled or accel",
            args.filter
        )
    })?;
    let engine = args.engine.kind();
    let probe = ProbeKind::parse(&args.probe)
        .with_context(|| format!("unknown probe {:?}: emitted or operator", args.probe))?;
    csx_data::gen::check_sf(args.sf)?;
    let dir = args
        .data
        .clone()
        .unwrap_or_else(|| csx_data::ssb::default_dir(args.sf));
    let dev = connect::open(global)?;
    let tty = std::io::stderr().is_terminal();
    let generated = csx_data::ssb::ensure_dataset(&dev, &dir, args.sf, args.seed, &mut |msg| {
        if tty {
            eprintln!("ssb: {msg}");
        }
    })
    .with_context(|| format!("preparing the dataset at {dir}"))?;
    let opts = RunOptions {
        split,
        engine,
        strategy,
        probe,
        partitions: args.partitions,
        round_rows: args.round_rows,
        resident: args.resident,
        ..Default::default()
    };
    let image = match args.yardstick {
        true => Some(image_path(global)?),
        false => None,
    };
    let result = run(&dev, &dir, q, &opts).with_context(|| format!("running {} on {dir}", q.name));
    let yard = match (&result, &image) {
        (Ok(r), Some(image)) => Some(
            yardstick::measure(&dev, image, &r.file_copies, &[1, yardstick::QUEUED_DEPTH])
                .with_context(|| {
                    format!("reading the staged bytes again from {}", image.display())
                }),
        ),
        _ => None,
    };
    dev.close().context("closing the device")?;
    let result = result?;
    let yard = yard.transpose()?;
    if args.json {
        let mut j = run_json(&result, args.sf, &dir, generated);
        if let Some(y) = &yard {
            j["yardstick"] = yardstick_json(&result, y);
        }
        println!("{}", crate::output::Json(j));
    } else {
        print_run(&result, &dir);
        if let Some(y) = &yard {
            print_yardstick(&result, y);
        }
    }
    Ok(exit::SUCCESS)
}

/// The image of the embedded device the command line names (the yardstick reads it).
fn image_path(global: &GlobalArgs) -> anyhow::Result<std::path::PathBuf> {
    let dir = match global.device.as_deref() {
        None => connect::default_device_dir()?,
        Some(uri) => match csx_host::DeviceUri::parse(uri)? {
            csx_host::DeviceUri::Embedded(dir) => dir,
            _ => anyhow::bail!(
                "--yardstick reads the device's image: it needs an embedded device (--device DIR), not {uri}"
            ),
        },
    };
    Ok(dir.join(csx_device::offload::NVM_FILE_NAME))
}

/// The load phase's wall ns (every wait for copies) and its bandwidth over the run's
/// media bytes.
fn load_phase(r: &QueryRun) -> (u64, f64) {
    let ns = (r.phases.iter())
        .filter(|p| p.name == "load")
        .map(|p| p.wall_ns)
        .sum::<u64>();
    (ns, yardstick::mib_per_s(r.meter.media_bytes, ns))
}

/// The yardstick as JSON: the plan, each direct read's bandwidth over the same media
/// bytes, and the load phase's bandwidth as a fraction of each.
fn yardstick_json(r: &QueryRun, y: &yardstick::Yardstick) -> serde_json::Value {
    let (load_ns, load_mib_s) = load_phase(r);
    let reads: Vec<_> = (y.reads.iter())
        .map(|d| {
            let mib_s = yardstick::mib_per_s(y.plan.media_bytes, d.wall_ns);
            json!({ "depth": d.depth, "requests": d.requests, "read_bytes": d.read_bytes,
                    "wall_ns": d.wall_ns, "mib_s": mib_s, "load_ratio": load_mib_s / mib_s })
        })
        .collect();
    json!({
        "file_ranges": y.plan.file_ranges, "media_ranges": y.plan.ranges.len(),
        "media_bytes": y.plan.media_bytes, "hole_bytes": y.plan.hole_bytes,
        "load_wall_ns": load_ns, "load_mib_s": load_mib_s, "reads": reads,
    })
}

fn print_yardstick(r: &QueryRun, y: &yardstick::Yardstick) {
    let (load_ns, load_mib_s) = load_phase(r);
    println!(
        "yardstick: {} of {} file ranges ({} on the media); load {:.3} ms, {:.0} MiB/s",
        connect::format_size(y.plan.media_bytes),
        y.plan.file_ranges,
        y.plan.ranges.len(),
        load_ns as f64 / 1e6,
        load_mib_s
    );
    for d in &y.reads {
        let mib_s = yardstick::mib_per_s(y.plan.media_bytes, d.wall_ns);
        println!(
            "  O_DIRECT 1 MiB, {} in flight: {:.3} ms, {:.0} MiB/s (load at {:.0}%)",
            d.depth,
            d.wall_ns as f64 / 1e6,
            mib_s,
            100.0 * load_mib_s / mib_s
        );
    }
}

/// A run as JSON (shared with `csx bench ssb`).
pub fn run_json(r: &QueryRun, sf: f64, dir: &str, generated: bool) -> serde_json::Value {
    let rows: Vec<_> = r
        .rows
        .iter()
        .map(|row| {
            let mut v = row.keys.clone();
            v.push(json!(row.value));
            v
        })
        .collect();
    let phases: Vec<_> = r
        .phases
        .iter()
        .map(|p| {
            json!({ "phase": p.name, "modelled_ns": p.modelled_ns, "wall_ns": p.wall_ns,
                    "vm_ns": p.vm_ns, "commands": p.commands })
        })
        .collect();
    json!({
        "query": r.query, "sf": sf, "data": dir, "generated": generated,
        "split": r.options.split.name(),
        "engine": if r.options.engine == EngineKind::Jit { "jit" } else { "interp" },
        "filter": r.options.strategy.name(), "probe": r.options.probe.name(),
        "partitions": r.partitions,
        "rows": rows, "joined": r.joined,
        "bytes_to_host": r.meter.bytes_to_host, "media_bytes": r.meter.media_bytes,
        "modelled_ns": r.meter.modelled_ns, "wall_ns": r.wall_ns, "host_ns": r.host_ns,
        "fuel": r.meter.fuel, "commands": r.meter.commands, "executions": r.meter.executions,
        "phases": phases,
        "resident": r.options.resident, "resident_bytes": r.meter.resident_bytes,
        "reuse": r.reuse.iter().map(|c| json!({"file": c.path, "staged_bytes": c.staged_bytes,
            "resident_bytes": c.resident_bytes})).collect::<Vec<_>>(),
    })
}

fn print_run(r: &QueryRun, dir: &str) {
    for row in &r.rows {
        let keys: Vec<String> = row
            .keys
            .iter()
            .map(|k| match k {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        println!(
            "{}{}{}",
            keys.join("  "),
            if keys.is_empty() { "" } else { "  " },
            row.value
        );
    }
    println!(
        "{} on {dir}: {} rows; split {}, engine {}, filter {}, probe {}, {} partitions",
        r.query,
        r.rows.len(),
        r.options.split.name(),
        if r.options.engine == EngineKind::Jit {
            "jit"
        } else {
            "interp"
        },
        r.options.strategy.name(),
        r.options.probe.name(),
        r.partitions
    );
    println!(
        "bytes to host {}; media {}; modelled {:.3} ms; wall {:.3} ms (host {:.3} ms)",
        connect::format_size(r.meter.bytes_to_host),
        connect::format_size(r.meter.media_bytes),
        r.meter.modelled_ns as f64 / 1e6,
        r.wall_ns as f64 / 1e6,
        r.host_ns as f64 / 1e6
    );
    for p in &r.phases {
        println!(
            "  {:<10} modelled {:>10.3} ms  wall {:>10.3} ms  (VMs {:>10.3} ms, {} commands)",
            p.name,
            p.modelled_ns as f64 / 1e6,
            p.wall_ns as f64 / 1e6,
            p.vm_ns as f64 / 1e6,
            p.commands
        );
    }
    if r.options.resident {
        let reused: Vec<&str> = (r.reuse.iter())
            .filter(|c| c.resident_bytes > 0)
            .map(|c| c.path.as_str())
            .collect();
        println!(
            "resident: {} not read again from the media; reused {}",
            connect::format_size(r.meter.resident_bytes),
            if reused.is_empty() {
                "nothing (first run, a changed file, or no resident memory)".to_string()
            } else {
                reused.join(", ")
            }
        );
    }
}
