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
//!   copy; any difference fails the benchmark.
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
use csx_data::ssb::run::{run, ProbeKind, QueryRun, ResultRow, RunOptions, Split};
use csx_device::perf::PerfModel;
use csx_host::proto::EngineKind;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use serde_json::json;

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
#[derive(Debug, Args)]
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

pub fn run_bench(args: SsbBenchArgs) -> anyhow::Result<u8> {
    csx_data::gen::check_sf(args.sf)?;
    let mut perf = PerfModel::profile(&args.profile)?;
    perf.throttle = false;
    let tmp = tempfile::tempdir().context("a temporary directory")?;
    let config = DeviceConfig {
        nvm_size_bytes: 4 << 30,
        slm_size_bytes: 2 << 30,
        state_size_bytes: 4 << 20,
        engines: Some(args.engines),
        perf,
        ..DeviceConfig::default()
    };
    let dev = Device::init(&tmp.path().join("dev"), config).context("creating the device")?;
    let dir = "/ssb";
    let started = Instant::now();
    // Generated here, put on the device and copied to Parquet for DuckDB, the oracle;
    // the columnar copy is deleted once both are written.
    let columnar = tmp.path().join("columnar");
    let parquet = tmp.path().join("parquet");
    eprintln!("bench ssb: generating SSB at SF {}", args.sf);
    csx_data::ssb::gen::generate(&columnar, args.sf, 1, &mut |table, done, total| {
        if done == total {
            eprintln!("bench ssb: generated {table}");
        }
    })?;
    eprintln!("bench ssb: putting the dataset to {dir}");
    csx_data::put::put_dir(&dev, &columnar, dir, &mut |_, _| {})?;
    eprintln!("bench ssb: writing the Parquet copy for DuckDB");
    csx_data::parquet::write_parquet(&columnar, &parquet)?;
    std::fs::remove_dir_all(&columnar)
        .with_context(|| format!("deleting {}", columnar.display()))?;
    eprintln!(
        "bench ssb: dataset ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let base = RunOptions::default();
    // One untimed run first: it brings the image's pages and the allocator up to speed,
    // so the first measured case is not the only cold one.
    run(&dev, dir, query("Q3.3").expect("a query"), &base).context("the warm-up run")?;
    let r = match args.repeat {
        Some(r) => {
            eprintln!("csx: bench ssb --repeat is deprecated; use --runs");
            r
        }
        None => args.runs,
    };
    let mut cases = Vec::new();
    let mut step = |c: anyhow::Result<Case>| -> anyhow::Result<()> {
        let c = c?;
        eprintln!(
            "bench ssb: {} {}: {:.1} ms",
            c.case,
            c.label(),
            c.median_ns() as f64 / 1e6
        );
        cases.push(c);
        Ok(())
    };
    for probe in ProbeKind::ALL {
        for engine in [EngineKind::Jit, EngineKind::Interpreter] {
            step(measure(
                &dev,
                "engine",
                "Q3.3",
                RunOptions {
                    engine,
                    probe,
                    ..base
                },
                r,
                dir,
            ))?;
        }
    }
    for q in ["Q3.3", "Q1.1"] {
        for strategy in FilterStrategy::ALL {
            step(measure(
                &dev,
                "filter",
                q,
                RunOptions {
                    strategy,
                    probe: ProbeKind::Operator,
                    ..base
                },
                r,
                dir,
            ))?;
        }
    }
    for partitions in [1, args.engines] {
        step(measure(
            &dev,
            "concurrency",
            "Q3.3",
            RunOptions {
                partitions: Some(partitions),
                ..base
            },
            r,
            dir,
        ))?;
    }
    for split in Split::ALL {
        step(measure(
            &dev,
            "split",
            "Q3.3",
            RunOptions { split, ..base },
            r,
            dir,
        ))?;
    }
    // Every implemented query on every split (and, offloaded, on both engines and both
    // probes) against DuckDB over the Parquet copy.
    eprintln!("bench ssb: checking every query against DuckDB");
    let specs: Vec<&QuerySpec> = QUERIES.iter().collect();
    let oracle = csx_data::ssb::duckdb_answers(&parquet, &specs)?;
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
    for (spec, want) in QUERIES.iter().zip(&oracle) {
        let mut check = AnswerCheck {
            query: spec.name,
            rows: want.len(),
            runs: Vec::new(),
        };
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
        for opts in runs {
            let r =
                run(&dev, dir, spec, &opts).with_context(|| format!("answers: {}", spec.name))?;
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
    // The timed cases' answers too.
    for c in &cases {
        let i = QUERIES
            .iter()
            .position(|q| q.name == c.run.query)
            .expect("a known query");
        compare(format!("{} {}", c.case, c.label()), &oracle[i], &c.run.rows);
    }
    dev.close().context("closing the device")?;
    drop(tmp);

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
    // Every device answer equals the host reference (the host-only split computes it
    // from the columns; the tests check it against DuckDB), and Q1.1's runs agree.
    for c in &cases {
        let want = match c.run.query {
            "Q3.3" => &host.run.rows,
            _ => {
                &find("filter", &|r| r.query == c.run.query)
                    .expect("measured")
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
    let checked: usize = checks.iter().map(|c| c.runs.len()).sum::<usize>() + cases.len();
    if args.json {
        for c in &checks {
            println!(
                "{}",
                json!({
                    "oracle": "duckdb", "query": c.query, "sf": args.sf, "rows": c.rows,
                    "runs": c.runs.iter().map(|(l, e)| json!({"run": l, "equal": e})).collect::<Vec<_>>(),
                    "equal": c.runs.iter().all(|(_, e)| *e),
                })
            );
        }
    } else {
        println!(
            "Answers against DuckDB over the Parquet copy at SF {} ({checked} runs: every query on every split, offloaded splits on both engines and both probes, and every timed case):",
            args.sf
        );
        for c in &checks {
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
    if !differ.is_empty() {
        anyhow::bail!(
            "{} of {checked} runs differ from DuckDB's answer at SF {}:\n{}",
            differ.len(),
            args.sf,
            differ.join("\n")
        );
    }
    let ratio = interp.median_ns() as f64 / jit.median_ns() as f64;
    let probe_ratio = interp.phase_ns("probe") as f64 / jit.phase_ns("probe").max(1) as f64;
    let op_ratio = op_interp.median_ns() as f64 / op_jit.median_ns() as f64;
    let op_probe_ratio =
        op_interp.phase_ns("probe") as f64 / op_jit.phase_ns("probe").max(1) as f64;
    let bytes_ratio =
        host.run.meter.bytes_to_host as f64 / off.run.meter.bytes_to_host.max(1) as f64;

    if args.json {
        for c in &cases {
            println!(
                "{}",
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
            );
        }
        println!(
            "{}",
            json!({ "summary": true, "jit_interp_ratio": ratio, "jit_interp_probe_ratio": probe_ratio,
                    "operator_jit_interp_ratio": op_ratio,
                    "operator_jit_interp_probe_ratio": op_probe_ratio,
                    "offload_vs_host_bytes_ratio": bytes_ratio })
        );
    } else {
        println!(
            "SSB at SF {} on an embedded device, {} engines, profile {} (modelled), median of {} runs; wall excludes preparing (loading, compiling) the operators",
            args.sf, args.engines, args.profile, r
        );
        println!(
            "{:<12} {:<38} {:>11} {:>13} {:>14} {:>11}",
            "case", "run", "wall ms", "modelled ms", "bytes to host", "host ms"
        );
        for c in &cases {
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
        println!("JIT/interpreter, Q3.3 offload, emitted probe: {ratio:.2}x wall, {probe_ratio:.2}x in the probe phase (Delilah: 9.2x)");
        println!("JIT/interpreter, Q3.3 offload, operator probe: {op_ratio:.2}x wall, {op_probe_ratio:.2}x in the probe phase");
        println!("phases of the last run, wall ms / of which VMs ms:");
        for c in [jit, interp, op_jit, op_interp] {
            let phases: Vec<String> = c
                .run
                .phases
                .iter()
                .map(|p| {
                    format!(
                        "{} {:.1} / {:.1}",
                        p.name,
                        p.wall_ns as f64 / 1e6,
                        p.vm_ns as f64 / 1e6
                    )
                })
                .collect();
            println!("  {:<38} {}", c.label(), phases.join(", "));
        }
        let prep = |c: &Case| c.prepare_ns.iter().copied().max().unwrap_or(0) as f64 / 1e6;
        println!(
            "preparing the operators: {:.1} ms on the JIT, {:.1} ms on the interpreter",
            prep(jit),
            prep(interp)
        );
        println!(
            "host-only / full offload bytes to host, Q3.3: {bytes_ratio:.0}x (goal: at least 10x)"
        );
    }
    if let Some(plots) = &args.plots {
        std::fs::create_dir_all(plots).with_context(|| format!("creating {}", plots.display()))?;
        let ms = |c: &Case| c.median_ns() as f64 / 1e6;
        let series = |c: &Case| {
            format!(
                "{} {}",
                engine_name(c.run.options.engine),
                c.run.options.probe.name()
            )
        };
        let charts = [
            (
                "ssb-engines.svg",
                BarChart {
                    title: format!(
                        "SSB Q3.3 at SF {}, full offload: JIT vs interpreter",
                        args.sf
                    ),
                    y_label: "wall ms (median)".to_string(),
                    groups: ["load", "dims", "probe", "merge"]
                        .iter()
                        .map(|p| {
                            (
                                p.to_string(),
                                [jit, interp, op_jit, op_interp]
                                    .iter()
                                    .map(|c| (series(c), c.phase_ns(p) as f64 / 1e6))
                                    .collect(),
                            )
                        })
                        .chain([(
                            "total".to_string(),
                            [jit, interp, op_jit, op_interp]
                                .iter()
                                .map(|c| (series(c), ms(c)))
                                .collect(),
                        )])
                        .collect(),
                    stacked: false,
                    log: true,
                },
            ),
            (
                "ssb-filters.svg",
                BarChart {
                    title: format!(
                        "SSB selection strategies at SF {} (JIT, full offload)",
                        args.sf
                    ),
                    y_label: "wall ms (median)".to_string(),
                    groups: ["Q1.1", "Q3.3"]
                        .iter()
                        .map(|q| {
                            let v = cases
                                .iter()
                                .filter(|c| c.case == "filter" && c.run.query == *q)
                                .map(|c| (c.run.options.strategy.name().to_string(), ms(c)))
                                .collect();
                            (q.to_string(), v)
                        })
                        .collect(),
                    stacked: false,
                    log: false,
                },
            ),
            (
                "ssb-splits.svg",
                BarChart {
                    title: format!("SSB Q3.3 at SF {}: degrees of offload", args.sf),
                    y_label: "bytes to host, modelled µs, wall ms".to_string(),
                    groups: cases
                        .iter()
                        .filter(|c| c.case == "split")
                        .map(|c| {
                            (
                                c.run.options.split.name().to_string(),
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
                                ],
                            )
                        })
                        .collect(),
                    stacked: false,
                    log: true,
                },
            ),
        ];
        for (file, chart) in charts {
            let path = plots.join(file);
            std::fs::write(&path, chart.to_svg())
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(exit::SUCCESS)
}
