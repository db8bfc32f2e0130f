//! `csx bench ssb`: Delilah's SSB experiments (thesis ch. 12) on csx, through csx-data.
//!
//! Cases, each run `--runs` times (the median wall time is reported; modelled time and
//! bytes do not vary between runs):
//! * engines: Q3.3 fully offloaded on the JIT and on the interpreter (Fig. 12.1), with
//!   the emitted probe and with the operator probe (`ProbeKind`);
//! * filters: Q3.3 and Q1.1 with the bitmask, unrolled and accelerated selections
//!   (Fig. 12.5, 12.6; Q1.1 filters LINEORDER itself, Q3.3 only the dimensions), with
//!   the operator probe (the emitted one tests LINEORDER's selections itself);
//! * concurrency: Q3.3 with one probe partition against one per engine (Fig. 12.6's
//!   serial against concurrent operators);
//! * splits: Q3.3 with full offload, aggregation on the host and host only (Fig. 12.7):
//!   bytes to the host, modelled device time, host time;
//! * answers: every implemented query on every split (the offloaded ones on both engines
//!   and both probes) and every timed case against DuckDB over the dataset's Parquet
//!   copy; any difference fails the benchmark;
//! * side by side: Q3.3 and Q1.1 offloaded with fresh staging (from the device's media
//!   read direct, and from a warm image: a second device of the same data reading
//!   through the page cache, `media_reads: cached`), with resident file
//!   ranges, and through `ResidentTables` (staged columns and programs kept between
//!   runs), beside DuckDB over the Parquet copy and from its own memory, interleaved,
//!   each timed in its own process warm; the goals' verdicts in the table and the JSON;
//! * modelled offload: Q3.3 and Q1.1 offloaded and host-only under the `daisy` and
//!   `lambda-io` profiles (a second device of the same dataset for the profile not
//!   `--profile`'s), offload's speedup and the verdict against daisy's goal (offload at
//!   least 2x faster than host-only), in the table and as JSON lines.
//!
//! The device is a fresh embedded one in a temporary directory with the `--profile`'s
//! speeds (throttling off: wall times are this machine's, modelled times the profile's)
//! and `--engines` engines; the dataset is generated, put on it, copied to Parquet, and
//! deleted with it.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use csx_data::scan::FilterStrategy;
use csx_data::ssb::differences;
use csx_data::ssb::queries::{query, QuerySpec, QUERIES};
use csx_data::ssb::resident::ResidentTables;
use csx_data::ssb::run::{run, ProbeKind, QueryRun, ResultRow, RunOptions, Split};
use csx_device::nvm::MediaReads;
use csx_device::perf::PerfModel;
use csx_host::proto::EngineKind;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use serde_json::json;

use crate::duckdb::{DuckDb, Source};
use crate::exit;
use crate::plot::BarChart;

/// Reproduce Delilah's SSB experiments: JIT/interpreter, filter strategies, concurrency,
/// the three splits.
///
/// The engine case runs Q3.3 with both probes (emitted: eBPF made for the query;
/// operator: the filter operators and sdk/ssb's ssb_probe) on both engine kinds; the
/// filter case uses the operator probe, whose LINEORDER selections the strategies run.
/// Every answer is checked against DuckDB's, which runs the query's SQL over a Parquet
/// copy of the dataset: every implemented query (Q1.1-Q1.3, Q3.1-Q3.4) on every split,
/// the offloaded splits on both engines and both probes, and every timed case. Any
/// difference fails the benchmark (exit status non-zero, the differing rows printed).
/// DuckDB and pyarrow come from scripts/setup.sh.
///
/// Runs on a fresh embedded device of its own (not --device), with --engines engines and
/// the --profile's speeds for modelled times; generates SSB at --sf (in $TMPDIR), puts it
/// there, writes its Parquet copy, runs
/// Q3.3 (and Q1.1 for the strategies) in every case, and deletes the device and the data.
/// Wall times are medians of --runs runs without loading and compiling the operators.
///
/// Examples:
///   csx bench ssb --sf 1 --plots docs/plots
///   csx bench ssb --sf 0.1 --runs 1 --json
#[derive(Clone, Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SsbBenchArgs {
    /// Scale factor of the generated dataset (SF 1: 6 M LINEORDER rows, 92 MiB of Q3.3's
    /// columns).
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Runs of each case; the median wall time is reported (Delilah: 10).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    #[arg(long, hide = true, conflicts_with = "runs")]
    repeat: Option<u32>,
    /// The device's performance profile for modelled times: daisy (Delilah's board),
    /// lambda-io or unthrottled.
    #[arg(long, default_value = "daisy")]
    profile: String,
    /// The device's compute engines (Delilah: 4).
    #[arg(long, default_value_t = 4)]
    engines: u32,
    /// Print one JSON object per case instead of the table.
    #[arg(long)]
    json: bool,
    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

/// One query's answers checked against DuckDB's: each run's label and whether it was
/// equal.
struct AnswerCheck {
    query: &'static str,
    rows: usize,
    runs: Vec<(String, bool)>,
}

/// One measured case.
struct Case {
    case: &'static str,
    run: QueryRun,
    /// Wall time of each run, without preparing (loading and compiling) the operators.
    wall_ns: Vec<u64>,
    /// Wall time of preparing the operators, each run.
    prepare_ns: Vec<u64>,
}

impl Case {
    fn median_ns(&self) -> u64 {
        let mut v = self.wall_ns.clone();
        v.sort_unstable();
        v[v.len() / 2]
    }

    fn phase_ns(&self, name: &str) -> u64 {
        self.run
            .phases
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.wall_ns)
            .sum()
    }

    fn label(&self) -> String {
        format!(
            "{} {} {} {} {} p{}",
            self.run.query,
            self.run.options.split.name(),
            engine_name(self.run.options.engine),
            self.run.options.strategy.name(),
            self.run.options.probe.name(),
            self.run.partitions
        )
    }
}

fn engine_name(e: EngineKind) -> &'static str {
    match e {
        EngineKind::Jit => "jit",
        EngineKind::Interpreter => "interp",
    }
}

fn measure(
    dev: &Device,
    case: &'static str,
    q: &str,
    opts: RunOptions,
    repeat: u32,
    dir: &str,
) -> anyhow::Result<Case> {
    let spec = query(q).expect("a known query");
    let mut wall = Vec::new();
    let mut prepare = Vec::new();
    let mut last = None;
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let r = run(dev, dir, spec, &opts).with_context(|| format!("{case}: {q}"))?;
        let total = started.elapsed().as_nanos() as u64;
        let prep: u64 = r
            .phases
            .iter()
            .filter(|p| p.name == "prepare")
            .map(|p| p.wall_ns)
            .sum();
        wall.push(total - prep.min(total));
        prepare.push(prep);
        if let Some(prev) = &last {
            let prev: &QueryRun = prev;
            anyhow::ensure!(
                prev.rows == r.rows,
                "{case}: {q} gave two different answers"
            );
        }
        last = Some(r);
    }
    Ok(Case {
        case,
        run: last.expect("at least one run"),
        wall_ns: wall,
        prepare_ns: prepare,
    })
}

pub fn run_bench(mut args: SsbBenchArgs) -> anyhow::Result<u8> {
    if let Some(r) = args.repeat.take() {
        eprintln!("csx: bench ssb --repeat is deprecated; use --runs");
        args.runs = r;
    }
    csx_data::gen::check_sf(args.sf)?;
    let tmp = tempfile::tempdir().context("a temporary directory")?;
    let (dev, parquet) = prepare(&args, tmp.path())?;
    let cases = measure_cases(&dev, &args)?;
    // The same data on a device reading its media through the page cache: the warm
    // image DuckDB over a warm Parquet file is set beside.
    let columnar = tmp.path().join("columnar");
    let warm = device_of(
        &args,
        &tmp.path().join("dev-warm"),
        &columnar,
        MediaReads::Cached,
    )?;
    let side = side_by_side((&dev, &warm), &parquet, &args)?;
    warm.close().context("closing the warm-image device")?;
    let (checks, differ) = check_answers(&dev, &parquet, &cases)?;
    let modelled = model_profiles(&dev, &args, tmp.path())?;
    dev.close().context("closing the device")?;
    drop(tmp);
    let summary = Summary::of(&cases)?;
    let checked: usize = checks.iter().map(|c| c.runs.len()).sum::<usize>() + cases.len();
    print_checks(&args, &checks, checked);
    if !differ.is_empty() {
        anyhow::bail!(
            "{} of {checked} runs differ from DuckDB's answer at SF {}:\n{}",
            differ.len(),
            args.sf,
            differ.join("\n")
        );
    }
    if args.json {
        print_json(&args, &cases, &side, &summary);
        for m in &modelled {
            println!("{}", m.json(&args));
        }
    } else {
        print_table(&args, &cases, &side, &summary);
        print_modelled(&modelled);
    }
    if let Some(plots) = &args.plots {
        write_plots(plots, &args, &cases, &side, &summary)?;
    }
    Ok(exit::SUCCESS)
}

/// A fresh embedded device with the profile's speeds and resident memory, the dataset
/// generated, put on it and copied to Parquet (the columnar copy kept for the other
/// profiles' devices; the temporary directory goes at the end).
fn prepare(args: &SsbBenchArgs, tmp: &std::path::Path) -> anyhow::Result<(Device, PathBuf)> {
    let dev = new_device(args, &tmp.join("dev"), MediaReads::Direct)?;
    let parquet = prepare_data(args, &dev, tmp)?;
    Ok((dev, parquet))
}

/// A fresh embedded device at `dir` with `args`' profile (throttling off), engines,
/// resident memory and media reads `reads`.
fn new_device(
    args: &SsbBenchArgs,
    dir: &std::path::Path,
    reads: MediaReads,
) -> anyhow::Result<Device> {
    let mut perf = PerfModel::profile(&args.profile)?;
    perf.throttle = false;
    let config = DeviceConfig {
        nvm_size_bytes: 4 << 30,
        slm_size_bytes: 2 << 30,
        state_size_bytes: 4 << 20,
        engines: Some(args.engines),
        resident_bytes: Some(RESIDENT_BYTES),
        media_reads: Some(reads),
        perf,
        ..DeviceConfig::default()
    };
    Device::init(dir, config).context("creating the device")
}

/// A fresh device of `args`' profile at `dir` (media reads `reads`) holding the
/// columnar dataset `columnar`.
fn device_of(
    args: &SsbBenchArgs,
    dir: &std::path::Path,
    columnar: &std::path::Path,
    reads: MediaReads,
) -> anyhow::Result<Device> {
    let dev = new_device(args, dir, reads)?;
    csx_data::put::put_dir(&dev, columnar, DIR, &mut |_, _| {})?;
    Ok(dev)
}

/// The dataset generated under `tmp` (its columnar copy kept for [`model_profiles`]),
/// put on `dev` and copied to Parquet.
fn prepare_data(
    args: &SsbBenchArgs,
    dev: &Device,
    tmp: &std::path::Path,
) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let columnar = tmp.join("columnar");
    let parquet = tmp.join("parquet");
    eprintln!("bench ssb: generating SSB at SF {}", args.sf);
    csx_data::ssb::gen::generate(&columnar, args.sf, 1, &mut |table, done, total| {
        if done == total {
            eprintln!("bench ssb: generated {table}");
        }
    })?;
    eprintln!("bench ssb: putting the dataset to {DIR}");
    csx_data::put::put_dir(dev, &columnar, DIR, &mut |_, _| {})?;
    eprintln!("bench ssb: writing the Parquet copy for DuckDB");
    csx_data::parquet::write_parquet(&columnar, &parquet)?;
    eprintln!(
        "bench ssb: dataset ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(parquet)
}

/// The profiles offload is modelled under against host-only, and the speedup each one's
/// goal asks of offload (`None`: reported without a goal).
const MODEL_PROFILES: [(&str, Option<f64>); 2] = [("daisy", Some(2.0)), ("lambda-io", None)];

/// One query's offload and host-only splits under one profile: modelled device time
/// plus the host's own measured compute (as `python -m csx.bench tpch` counts them).
struct Modelled {
    profile: &'static str,
    query: &'static str,
    offload_ns: u64,
    host_only_ns: u64,
    goal: Option<f64>,
}

impl Modelled {
    fn speedup(&self) -> f64 {
        self.host_only_ns as f64 / self.offload_ns.max(1) as f64
    }

    fn met(&self) -> Option<bool> {
        self.goal.map(|g| self.speedup() >= g)
    }

    fn verdict(&self) -> String {
        match (self.goal, self.met()) {
            (Some(g), Some(true)) => format!("goal >= {g}x: met"),
            (Some(g), _) => format!("goal >= {g}x: NOT met"),
            _ => "no goal".to_string(),
        }
    }

    fn json(&self, args: &SsbBenchArgs) -> serde_json::Value {
        json!({
            "modelled_offload": self.query, "profile": self.profile, "sf": args.sf,
            "offload_modelled_ns": self.offload_ns, "host_only_modelled_ns": self.host_only_ns,
            "offload_speedup": self.speedup(), "goal_speedup": self.goal, "goal_met": self.met(),
        })
    }
}

/// [`SIDE_QUERIES`]' offload and host-only splits, once each, under every profile of
/// [`MODEL_PROFILES`]: on `dev` for its own profile, else on a fresh device of that
/// profile holding the same dataset (the columnar copy under `tmp`), deleted after.
fn model_profiles(
    dev: &Device,
    args: &SsbBenchArgs,
    tmp: &std::path::Path,
) -> anyhow::Result<Vec<Modelled>> {
    let mut out = Vec::new();
    for (profile, goal) in MODEL_PROFILES {
        let own = profile == args.profile;
        let other = if own {
            None
        } else {
            eprintln!("bench ssb: modelling under {profile}");
            let other_args = SsbBenchArgs {
                profile: profile.to_string(),
                ..args.clone()
            };
            Some(device_of(
                &other_args,
                &tmp.join(format!("dev-{profile}")),
                &tmp.join("columnar"),
                MediaReads::Direct,
            )?)
        };
        let d = other.as_ref().unwrap_or(dev);
        for name in SIDE_QUERIES {
            let q = query(name).expect("a known query");
            let off = run(d, DIR, q, &RunOptions::default())?;
            let host = RunOptions {
                split: Split::Host,
                ..RunOptions::default()
            };
            let host = run(d, DIR, q, &host)?;
            anyhow::ensure!(
                off.rows == host.rows,
                "{name} under {profile}: the splits' answers differ"
            );
            out.push(Modelled {
                profile,
                query: q.name,
                offload_ns: off.meter.modelled_ns + off.host_ns,
                host_only_ns: host.meter.modelled_ns + host.host_ns,
                goal,
            });
        }
        if let Some(d) = other {
            d.close().context("closing the modelling device")?;
            let _ = std::fs::remove_dir_all(tmp.join(format!("dev-{profile}")));
        }
    }
    Ok(out)
}

fn print_modelled(modelled: &[Modelled]) {
    println!("modelled offload against host-only (device modelled + host compute):");
    for m in modelled {
        println!(
            "  {:<10} {:<5} offload {:>10.3} ms, host-only {:>10.3} ms: {:.2}x ({})",
            m.profile,
            m.query,
            m.offload_ns as f64 / 1e6,
            m.host_only_ns as f64 / 1e6,
            m.speedup(),
            m.verdict()
        );
    }
}

/// Device memory the benchmark's device keeps for resident columns (every query's
/// columns at SF 1 fit).
const RESIDENT_BYTES: u64 = 1 << 30;
/// Where the dataset lives on the device.
const DIR: &str = "/ssb";

/// The timed cases: engines, filters, concurrency, splits.
fn measure_cases(dev: &Device, args: &SsbBenchArgs) -> anyhow::Result<Vec<Case>> {
    let base = RunOptions::default();
    // One untimed run first: it brings the image's pages and the allocator up to speed,
    // so the first measured case is not the only cold one.
    run(dev, DIR, query("Q3.3").expect("a query"), &base).context("the warm-up run")?;
    let mut plan: Vec<(&'static str, &'static str, RunOptions)> = Vec::new();
    for probe in ProbeKind::ALL {
        for engine in [EngineKind::Jit, EngineKind::Interpreter] {
            plan.push((
                "engine",
                "Q3.3",
                RunOptions {
                    engine,
                    probe,
                    ..base
                },
            ));
        }
    }
    for q in ["Q3.3", "Q1.1"] {
        for strategy in FilterStrategy::ALL {
            let probe = ProbeKind::Operator;
            plan.push((
                "filter",
                q,
                RunOptions {
                    strategy,
                    probe,
                    ..base
                },
            ));
        }
    }
    for partitions in [1, args.engines] {
        let partitions = Some(partitions);
        plan.push(("concurrency", "Q3.3", RunOptions { partitions, ..base }));
    }
    for split in Split::ALL {
        plan.push(("split", "Q3.3", RunOptions { split, ..base }));
    }
    let mut cases = Vec::new();
    for (case, q, opts) in plan {
        let c = measure(dev, case, q, opts, args.runs, DIR)?;
        eprintln!(
            "bench ssb: {} {}: {:.1} ms",
            c.case,
            c.label(),
            c.median_ns() as f64 / 1e6
        );
        cases.push(c);
    }
    Ok(cases)
}

/// The queries csx and DuckDB run side by side.
const SIDE_QUERIES: [&str; 2] = ["Q3.3", "Q1.1"];

/// One query side by side: csx offloaded (fresh staging; resident file ranges; resident
/// tables), DuckDB on the host over the Parquet copy and from its own memory; best wall
/// of the interleaved rounds. Every one is timed in its own process, warm: csx's runs
/// inside this one (the device embedded), DuckDB's inside its own.
struct Side {
    query: &'static str,
    rounds: u32,
    csx_ns: u64,
    /// Fresh staging on a device reading its media through the page cache (a warm
    /// image, as DuckDB's warm Parquet file is).
    csx_warm_ns: u64,
    csx_resident_ns: u64,
    /// Through `ResidentTables`: LINEORDER's staged columns and the programs kept.
    csx_tables_ns: u64,
    duckdb_parquet_ns: u64,
    duckdb_memory_ns: u64,
    /// The offloaded run's modelled time (the device's profile), media bytes, and the
    /// resident run's media bytes and bytes reused.
    modelled_ns: u64,
    media_bytes: u64,
    resident_media_bytes: u64,
    resident_bytes: u64,
    tables_media_bytes: u64,
}

impl Side {
    /// The goals: csx with fresh staging from a warm image at most DuckDB over its warm
    /// Parquet file; csx resident (its tables kept) at most DuckDB from memory.
    fn parquet_goal_met(&self) -> bool {
        self.csx_warm_ns <= self.duckdb_parquet_ns
    }

    /// Fresh staging from the device's own media (direct reads) against DuckDB over
    /// Parquet, reported beside the goal.
    fn direct_le_parquet(&self) -> bool {
        self.csx_ns <= self.duckdb_parquet_ns
    }

    fn memory_goal_met(&self) -> bool {
        self.csx_tables_ns <= self.duckdb_memory_ns
    }
}

/// DuckDB's threads beside csx (this machine's cores).
const DUCKDB_THREADS: u32 = 2;
/// Fewest interleaved rounds side by side (best of them is reported).
const SIDE_ROUNDS_MIN: u32 = 5;

fn side_by_side(
    (dev, warm): (&Device, &Device),
    parquet: &std::path::Path,
    args: &SsbBenchArgs,
) -> anyhow::Result<Vec<Side>> {
    eprintln!("bench ssb: side by side with DuckDB (threads {DUCKDB_THREADS})");
    let mut duck = DuckDb::start(parquet, DUCKDB_THREADS)?;
    let mut tables = ResidentTables::new(dev, RESIDENT_BYTES);
    let mut out = Vec::new();
    for name in SIDE_QUERIES {
        let q = query(name).expect("a known query");
        let rounds = args.runs.max(SIDE_ROUNDS_MIN);
        let mut best = [u64::MAX; 6];
        let mut last = None;
        // Round 0 warms everything (and fills the resident memory); it is not counted.
        for round in 0..=rounds {
            let (times, runs) = side_round((dev, warm), &mut tables, &mut duck, q)?;
            if round > 0 {
                for (x, ns) in best.iter_mut().zip(times) {
                    *x = (*x).min(ns);
                }
            }
            last = Some(runs);
        }
        let [a, b, t] = last.expect("at least one round");
        out.push(Side {
            query: q.name,
            rounds,
            csx_ns: best[0],
            csx_resident_ns: best[1],
            csx_tables_ns: best[2],
            duckdb_parquet_ns: best[3],
            duckdb_memory_ns: best[4],
            csx_warm_ns: best[5],
            modelled_ns: a.meter.modelled_ns,
            media_bytes: a.meter.media_bytes,
            resident_media_bytes: b.meter.media_bytes,
            resident_bytes: b.meter.resident_bytes,
            tables_media_bytes: t.meter.media_bytes,
        });
    }
    tables.close().context("closing the resident tables")?;
    Ok(out)
}

/// One interleaved round of query `q`: csx fresh, csx with resident file ranges, csx
/// through the resident tables, DuckDB over Parquet, DuckDB from memory, csx fresh from
/// the warm image (their walls, in that order), every answer checked against the fresh
/// run's; and csx's three runs on `dev`.
fn side_round(
    (dev, warm): (&Device, &Device),
    tables: &mut ResidentTables,
    duck: &mut DuckDb,
    q: &'static QuerySpec,
) -> anyhow::Result<([u64; 6], [QueryRun; 3])> {
    let name = q.name;
    let fresh = RunOptions::default();
    let resident = RunOptions {
        resident: true,
        ..fresh
    };
    let a = run(dev, DIR, q, &fresh).with_context(|| format!("side: {name}"))?;
    let b = run(dev, DIR, q, &resident).with_context(|| format!("side: {name}"))?;
    let t = (tables.run(DIR, q, &resident)).with_context(|| format!("side: {name}, tables"))?;
    anyhow::ensure!(
        a.rows == b.rows && a.rows == t.rows,
        "{name}: a resident run's answer differs"
    );
    let c = duck.time(Source::Parquet, q.sql)?;
    let d = duck.time(Source::Memory, q.sql)?;
    let w = run(warm, DIR, q, &fresh).with_context(|| format!("side: {name}, warm image"))?;
    anyhow::ensure!(w.rows == a.rows, "{name}: the warm image's answer differs");
    anyhow::ensure!(
        c.rows == d.rows && c.rows == a.rows.len() as u64,
        "{name}: DuckDB gave {} and {} rows, csx {}",
        c.rows,
        d.rows,
        a.rows.len()
    );
    let times = [a.wall_ns, b.wall_ns, t.wall_ns, c.ns, d.ns, w.wall_ns];
    Ok((times, [a, b, t]))
}

/// Every implemented query on every split (and, offloaded, on both engines and both
/// probes) against DuckDB over the Parquet copy, and the timed cases' answers too: the
/// checks, and the differences found.
fn check_answers(
    dev: &Device,
    parquet: &std::path::Path,
    cases: &[Case],
) -> anyhow::Result<(Vec<AnswerCheck>, Vec<String>)> {
    eprintln!("bench ssb: checking every query against DuckDB");
    let specs: Vec<&QuerySpec> = QUERIES.iter().collect();
    let oracle = csx_data::ssb::duckdb_answers(parquet, &specs)?;
    let mut checks: Vec<AnswerCheck> = Vec::new();
    let mut differ: Vec<String> = Vec::new();
    let mut compare = |label: String, want: &[ResultRow], got: &[ResultRow]| {
        let d = differences(want, got);
        if !d.is_empty() {
            differ.push(format!(
                "{label}: differs from DuckDB:\n  {}",
                d.join("\n  ")
            ));
        }
        d.is_empty()
    };
    let base = RunOptions::default();
    for (spec, want) in QUERIES.iter().zip(&oracle) {
        let mut check = AnswerCheck {
            query: spec.name,
            rows: want.len(),
            runs: Vec::new(),
        };
        for opts in answer_runs(base) {
            let r =
                run(dev, DIR, spec, &opts).with_context(|| format!("answers: {}", spec.name))?;
            let label = format!(
                "{} {} {} {}",
                spec.name,
                opts.split.name(),
                engine_name(opts.engine),
                opts.probe.name()
            );
            let equal = compare(label.clone(), want, &r.rows);
            check.runs.push((label, equal));
        }
        checks.push(check);
    }
    for c in cases {
        let i = QUERIES
            .iter()
            .position(|q| q.name == c.run.query)
            .expect("a known query");
        compare(format!("{} {}", c.case, c.label()), &oracle[i], &c.run.rows);
    }
    Ok((checks, differ))
}

/// The runs each query's answer is checked in: host only, and the offloaded splits on
/// both engines and both probes.
fn answer_runs(base: RunOptions) -> Vec<RunOptions> {
    let mut runs = vec![RunOptions {
        split: Split::Host,
        ..base
    }];
    for split in [Split::Offload, Split::HostAgg] {
        for engine in [EngineKind::Jit, EngineKind::Interpreter] {
            for probe in ProbeKind::ALL {
                runs.push(RunOptions {
                    split,
                    engine,
                    probe,
                    ..base
                });
            }
        }
    }
    runs
}

/// The cases the summary compares, and its ratios.
struct Summary<'c> {
    jit: &'c Case,
    interp: &'c Case,
    op_jit: &'c Case,
    op_interp: &'c Case,
    off: &'c Case,
    host: &'c Case,
    ratio: f64,
    probe_ratio: f64,
    op_ratio: f64,
    op_probe_ratio: f64,
    bytes_ratio: f64,
}

impl<'c> Summary<'c> {
    /// Finds the compared cases; every device answer must equal the host reference (the
    /// host-only split computes it from the columns), and Q1.1's runs agree.
    fn of(cases: &'c [Case]) -> anyhow::Result<Summary<'c>> {
        let find = |case: &str, f: &dyn Fn(&QueryRun) -> bool| {
            cases.iter().find(|c| c.case == case && f(&c.run))
        };
        let engine_case = |engine: EngineKind, probe: ProbeKind| {
            find("engine", &|r| {
                r.options.engine == engine && r.options.probe == probe
            })
            .expect("measured")
        };
        let jit = engine_case(EngineKind::Jit, ProbeKind::Emitted);
        let interp = engine_case(EngineKind::Interpreter, ProbeKind::Emitted);
        let op_jit = engine_case(EngineKind::Jit, ProbeKind::Operator);
        let op_interp = engine_case(EngineKind::Interpreter, ProbeKind::Operator);
        let off = find("split", &|r| r.options.split == Split::Offload).expect("measured");
        let host = find("split", &|r| r.options.split == Split::Host).expect("measured");
        for c in cases {
            let want = match c.run.query {
                "Q3.3" => &host.run.rows,
                q => {
                    &(find("filter", &|r| r.query == q).expect("measured"))
                        .run
                        .rows
                }
            };
            anyhow::ensure!(
                &c.run.rows == want,
                "{} {}: the answer differs from the host reference's",
                c.case,
                c.label()
            );
        }
        let phase_ratio =
            |a: &Case, b: &Case| a.phase_ns("probe") as f64 / b.phase_ns("probe").max(1) as f64;
        Ok(Summary {
            jit,
            interp,
            op_jit,
            op_interp,
            off,
            host,
            ratio: interp.median_ns() as f64 / jit.median_ns() as f64,
            probe_ratio: phase_ratio(interp, jit),
            op_ratio: op_interp.median_ns() as f64 / op_jit.median_ns() as f64,
            op_probe_ratio: phase_ratio(op_interp, op_jit),
            bytes_ratio: host.run.meter.bytes_to_host as f64
                / off.run.meter.bytes_to_host.max(1) as f64,
        })
    }
}

fn print_checks(args: &SsbBenchArgs, checks: &[AnswerCheck], checked: usize) {
    if args.json {
        for c in checks {
            println!(
                "{}",
                json!({
                    "oracle": "duckdb", "query": c.query, "sf": args.sf, "rows": c.rows,
                    "runs": c.runs.iter().map(|(l, e)| json!({"run": l, "equal": e})).collect::<Vec<_>>(),
                    "equal": c.runs.iter().all(|(_, e)| *e),
                })
            );
        }
        return;
    }
    println!(
        "Answers against DuckDB over the Parquet copy at SF {} ({checked} runs: every query on every split, offloaded splits on both engines and both probes, and every timed case):",
        args.sf
    );
    for c in checks {
        let equal = c.runs.iter().filter(|(_, e)| *e).count();
        println!(
            "  {:<5} {:>4} rows  {}/{} runs equal",
            c.query,
            c.rows,
            equal,
            c.runs.len()
        );
    }
}

fn case_json(args: &SsbBenchArgs, c: &Case) -> serde_json::Value {
    json!({
        "case": c.case, "query": c.run.query, "split": c.run.options.split.name(),
        "engine": engine_name(c.run.options.engine), "filter": c.run.options.strategy.name(),
        "probe": c.run.options.probe.name(),
        "partitions": c.run.partitions, "sf": args.sf, "profile": args.profile,
        "wall_ns_median": c.median_ns(), "prepare_ns": c.prepare_ns, "wall_ns": c.wall_ns,
        "modelled_ns": c.run.meter.modelled_ns, "bytes_to_host": c.run.meter.bytes_to_host,
        "media_bytes": c.run.meter.media_bytes, "host_ns": c.run.host_ns,
        "fuel": c.run.meter.fuel, "rows": c.run.rows.len(), "joined": c.run.joined,
        "phases": c.run.phases.iter().map(|p| json!({"phase": p.name, "wall_ns": p.wall_ns, "modelled_ns": p.modelled_ns, "vm_ns": p.vm_ns, "commands": p.commands})).collect::<Vec<_>>(),
    })
}

fn side_json(args: &SsbBenchArgs, s: &Side) -> serde_json::Value {
    json!({
        "side_by_side": s.query, "sf": args.sf, "profile": args.profile, "rounds": s.rounds,
        "duckdb_threads": DUCKDB_THREADS, "csx_wall_ns_best": s.csx_ns,
        "csx_warm_image_wall_ns_best": s.csx_warm_ns,
        "csx_direct_le_duckdb_parquet": s.direct_le_parquet(),
        "csx_resident_wall_ns_best": s.csx_resident_ns,
        "csx_resident_tables_wall_ns_best": s.csx_tables_ns,
        "duckdb_parquet_ns_best": s.duckdb_parquet_ns, "duckdb_memory_ns_best": s.duckdb_memory_ns,
        "csx_modelled_ns": s.modelled_ns, "csx_media_bytes": s.media_bytes,
        "csx_resident_media_bytes": s.resident_media_bytes,
        "csx_resident_bytes_reused": s.resident_bytes,
        "csx_resident_tables_media_bytes": s.tables_media_bytes,
        "goal_fresh_le_duckdb_parquet_met": s.parquet_goal_met(),
        "goal_resident_le_duckdb_memory_met": s.memory_goal_met(),
    })
}

fn print_json(args: &SsbBenchArgs, cases: &[Case], side: &[Side], m: &Summary) {
    for c in cases {
        println!("{}", case_json(args, c));
    }
    for s in side {
        println!("{}", side_json(args, s));
    }
    println!(
        "{}",
        json!({ "summary": true, "jit_interp_ratio": m.ratio, "jit_interp_probe_ratio": m.probe_ratio,
                "operator_jit_interp_ratio": m.op_ratio,
                "operator_jit_interp_probe_ratio": m.op_probe_ratio,
                "offload_vs_host_bytes_ratio": m.bytes_ratio,
                "offload_modelled_ns": m.off.run.meter.modelled_ns,
                "host_only_modelled_ns": m.host.run.meter.modelled_ns })
    );
}

fn print_table(args: &SsbBenchArgs, cases: &[Case], side: &[Side], m: &Summary) {
    println!(
        "SSB at SF {} on an embedded device, {} engines, profile {} (modelled), median of {} runs; wall excludes preparing (loading, compiling) the operators",
        args.sf, args.engines, args.profile, args.runs
    );
    println!(
        "{:<12} {:<38} {:>11} {:>13} {:>14} {:>11}",
        "case", "run", "wall ms", "modelled ms", "bytes to host", "host ms"
    );
    for c in cases {
        println!(
            "{:<12} {:<38} {:>11.1} {:>13.3} {:>14} {:>11.1}",
            c.case,
            c.label(),
            c.median_ns() as f64 / 1e6,
            c.run.meter.modelled_ns as f64 / 1e6,
            c.run.meter.bytes_to_host,
            c.run.host_ns as f64 / 1e6
        );
    }
    let (ratio, probe_ratio) = (m.ratio, m.probe_ratio);
    let (op_ratio, op_probe_ratio) = (m.op_ratio, m.op_probe_ratio);
    println!("JIT/interpreter, Q3.3 offload, emitted probe: {ratio:.2}x wall, {probe_ratio:.2}x in the probe phase (Delilah: 9.2x)");
    println!("JIT/interpreter, Q3.3 offload, operator probe: {op_ratio:.2}x wall, {op_probe_ratio:.2}x in the probe phase");
    println!("phases of the last run, wall ms / of which VMs ms:");
    for c in [m.jit, m.interp, m.op_jit, m.op_interp] {
        let phases: Vec<String> = (c.run.phases.iter())
            .map(|p| {
                let (wall, vm) = (p.wall_ns as f64 / 1e6, p.vm_ns as f64 / 1e6);
                format!("{} {wall:.1} / {vm:.1}", p.name)
            })
            .collect();
        println!("  {:<38} {}", c.label(), phases.join(", "));
    }
    let prep = |c: &Case| c.prepare_ns.iter().copied().max().unwrap_or(0) as f64 / 1e6;
    println!(
        "preparing the operators: {:.1} ms on the JIT, {:.1} ms on the interpreter",
        prep(m.jit),
        prep(m.interp)
    );
    println!(
        "host-only / full offload bytes to host, Q3.3: {:.0}x (goal: at least 10x)",
        m.bytes_ratio
    );
    print_side(args, side);
}

fn print_side(args: &SsbBenchArgs, side: &[Side]) {
    let ms = |ns: u64| ns as f64 / 1e6;
    println!(
        "side by side, best wall of interleaved rounds (DuckDB threads {DUCKDB_THREADS}, warm; csx whole runs, prepare included; direct: fresh staging, the device's media read direct; warm: fresh staging, media reads through the page cache (a warm image); resident: file ranges kept on the device; tables: staged columns and programs kept, ResidentTables); modelled under {}:",
        args.profile
    );
    println!(
        "{:<6} {:>10} {:>8} {:>13} {:>11} {:>15} {:>14} {:>13} {:>12} {:>14}",
        "query",
        "direct ms",
        "warm ms",
        "resident ms",
        "tables ms",
        "duckdb pq ms",
        "duckdb mem ms",
        "modelled ms",
        "media MB",
        "resident media"
    );
    for s in side {
        println!(
            "{:<6} {:>10.1} {:>8.1} {:>13.1} {:>11.1} {:>15.1} {:>14.1} {:>13.3} {:>12.1} {:>14.1}",
            s.query,
            ms(s.csx_ns),
            ms(s.csx_warm_ns),
            ms(s.csx_resident_ns),
            ms(s.csx_tables_ns),
            ms(s.duckdb_parquet_ns),
            ms(s.duckdb_memory_ns),
            ms(s.modelled_ns),
            s.media_bytes as f64 / 1e6,
            s.resident_media_bytes as f64 / 1e6
        );
    }
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    for s in side {
        println!(
            "{}: csx fresh, warm image <= DuckDB over Parquet: {} (direct reads: {}); csx resident tables <= DuckDB from memory: {}",
            s.query,
            verdict(s.parquet_goal_met()),
            verdict(s.direct_le_parquet()),
            verdict(s.memory_goal_met())
        );
    }
}

fn write_plots(
    plots: &std::path::Path,
    args: &SsbBenchArgs,
    cases: &[Case],
    side: &[Side],
    m: &Summary,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(plots).with_context(|| format!("creating {}", plots.display()))?;
    let charts = [
        ("ssb-engines.svg", engines_chart(args, m)),
        ("ssb-filters.svg", filters_chart(args, cases)),
        ("ssb-splits.svg", splits_chart(args, cases)),
        ("ssb-side.svg", side_chart(args, side)),
    ];
    for (file, chart) in charts {
        let path = plots.join(file);
        std::fs::write(&path, chart.to_svg())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn ms(c: &Case) -> f64 {
    c.median_ns() as f64 / 1e6
}

fn engines_chart(args: &SsbBenchArgs, m: &Summary) -> BarChart {
    let all = [m.jit, m.interp, m.op_jit, m.op_interp];
    let series = |c: &Case| {
        format!(
            "{} {}",
            engine_name(c.run.options.engine),
            c.run.options.probe.name()
        )
    };
    let phase = |p: &str| {
        let v = all.iter().map(|c| (series(c), c.phase_ns(p) as f64 / 1e6));
        (p.to_string(), v.collect())
    };
    let total = (
        "total".to_string(),
        all.iter().map(|c| (series(c), ms(c))).collect(),
    );
    BarChart {
        title: format!(
            "SSB Q3.3 at SF {}, full offload: JIT vs interpreter",
            args.sf
        ),
        y_label: "wall ms (median)".to_string(),
        groups: ["load", "dims", "probe", "merge"]
            .iter()
            .map(|p| phase(p))
            .chain([total])
            .collect(),
        stacked: false,
        log: true,
    }
}

fn filters_chart(args: &SsbBenchArgs, cases: &[Case]) -> BarChart {
    let group = |q: &str| {
        let v = (cases.iter())
            .filter(|c| c.case == "filter" && c.run.query == q)
            .map(|c| (c.run.options.strategy.name().to_string(), ms(c)))
            .collect();
        (q.to_string(), v)
    };
    BarChart {
        title: format!(
            "SSB selection strategies at SF {} (JIT, full offload)",
            args.sf
        ),
        y_label: "wall ms (median)".to_string(),
        groups: ["Q1.1", "Q3.3"].iter().map(|q| group(q)).collect(),
        stacked: false,
        log: false,
    }
}

fn splits_chart(args: &SsbBenchArgs, cases: &[Case]) -> BarChart {
    let bars = |c: &Case| {
        vec![
            (
                "bytes to host".to_string(),
                c.run.meter.bytes_to_host as f64,
            ),
            (
                "modelled device µs".to_string(),
                c.run.meter.modelled_ns as f64 / 1e3,
            ),
            ("wall ms".to_string(), ms(c)),
        ]
    };
    BarChart {
        title: format!("SSB Q3.3 at SF {}: degrees of offload", args.sf),
        y_label: "bytes to host, modelled µs, wall ms".to_string(),
        groups: (cases.iter())
            .filter(|c| c.case == "split")
            .map(|c| (c.run.options.split.name().to_string(), bars(c)))
            .collect(),
        stacked: false,
        log: true,
    }
}

fn side_chart(args: &SsbBenchArgs, side: &[Side]) -> BarChart {
    let ms = |ns: u64| ns as f64 / 1e6;
    let bars = |s: &Side| {
        vec![
            ("csx direct".to_string(), ms(s.csx_ns)),
            ("csx warm image".to_string(), ms(s.csx_warm_ns)),
            ("csx resident".to_string(), ms(s.csx_resident_ns)),
            ("csx resident tables".to_string(), ms(s.csx_tables_ns)),
            ("DuckDB Parquet".to_string(), ms(s.duckdb_parquet_ns)),
            ("DuckDB memory".to_string(), ms(s.duckdb_memory_ns)),
            (
                format!("csx modelled ({})", args.profile),
                ms(s.modelled_ns),
            ),
        ]
    };
    BarChart {
        title: format!(
            "SSB at SF {}: csx beside DuckDB on the host (threads {DUCKDB_THREADS})",
            args.sf
        ),
        y_label: "ms (best of interleaved rounds)".to_string(),
        groups: side
            .iter()
            .map(|s| (s.query.to_string(), bars(s)))
            .collect(),
        stacked: false,
        log: false,
    }
}
