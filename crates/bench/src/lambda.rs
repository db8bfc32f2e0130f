//! `csx bench lambda`: λ-IO's evaluation (FAST'23 §5.2–5.4) on csx, timed on the
//! modelled clock of the `lambda-io` profile.
//!
//! Cases, all on a fresh embedded device (profile `lambda-io`, throttling off: modelled
//! times do not depend on it) with the SDK's λ-IO programs:
//!
//! 1. **Single application** (§5.2): stats64, stats32, knn and grep over a `--size` file,
//!    cold (host cache dropped) and warm (the file read sequentially through the host
//!    cache first), with a host cache budget twice the dataset (so warm means cached).
//! 2. **λ-write**: bitmap decompressing `--size` bytes of bitmap into a device file.
//! 3. **Dataset size** (§5.4.1): stats64, warm, with datasets of half, about equal to
//!    and twice a host cache of 15/16 of `--size` (λ-IO: 8, 16 and 32 GB against a
//!    16 GB host; its page cache is "just narrower" than the memory).
//! 4. **Two applications** (§5.3): stats32 and stats64 on two files at once
//!    (`--threads`/2 threads each; the next request is the one of the application least
//!    far along its own modelled clock, [`next_app`]), cold and warm, host cache
//!    15/16 of ONE dataset, as in λ-IO (two 16 GB datasets on a 16 GB host, Table 2 and
//!    §5.3): the two files do not fit the cache together ([`host_cache_budget`]).
//!
//! Modes (λ-IO's B, K, D, λ): `buffered` (plain buffered reads through the host cache
//! and the native Rust reference, `csx_workloads::reference`), `host` (the λ on the host
//! JIT), `device` (the λ on the device), `auto` (the dispatcher, n = 200, k = 5, with the
//! run's threads and engines as its parallelism). Every mode's outputs must equal the
//! buffered mode's, else the benchmark fails.
//!
//! Time: requests are issued in file order from one thread (so every run is
//! deterministic; two applications take turns by modelled clock), and a run's modelled time is the bottleneck model of
//! `csx_lambda::account` with `--threads` host threads (λ-IO: 8) and the profile's
//! 4 device engines. `buffered` has no fuel to count: its modelled compute is the host
//! λ's for the same chunk (λ-IO measured the two within a few percent, §5.2). Wall times
//! are this machine's and include the emulated device's work on the same cores.

use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Args;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_lambda::{
    makespan_ns, Lambda, LambdaArgs, LambdaFile, LambdaIo, LambdaOptions, Mode, Parallelism,
    RunAccount, SideCost,
};
use csx_workloads::gen::{DataSpec, TextSpec};
use csx_workloads::{Invocation, Workload};
use serde::Serialize;

use super::plot::BarChart;
use crate::exit;
use csx_host::size::parse_size;

/// Bytes of a grep row: fixed width, so chunks hold whole rows.
const GREP_ROW: u32 = 128;

/// Run λ-IO's evaluation on the modelled clock.
#[derive(Debug, Args)]
pub struct LambdaBenchArgs {
    /// Bytes of each dataset (the single-application file; the other cases scale it).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64MiB")]
    size: u64,
    /// Bytes per request (a multiple of 128 and of 64: grep's rows, knn's vectors).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256KiB")]
    chunk: u64,
    /// Host threads of the run model (λ-IO: 8).
    #[arg(long, value_name = "N", default_value_t = 8)]
    threads: u32,
    /// What-if: the device's compute time relative to the host's, the same for every
    /// instruction class, instead of the profile's per-class costs (see
    /// `PerfModel::lambda_io` and docs/benchmarks.md).
    #[arg(long, value_name = "X")]
    compute_scale: Option<f64>,
    /// Print one JSON object per row instead of the table.
    #[arg(long)]
    json: bool,
    /// Write SVG plots of the modelled and wall times into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BenchMode {
    Buffered,
    Lambda(Mode),
}

const MODES: [BenchMode; 4] = [
    BenchMode::Buffered,
    BenchMode::Lambda(Mode::Host),
    BenchMode::Lambda(Mode::Device),
    BenchMode::Lambda(Mode::Auto),
];

impl BenchMode {
    fn name(self) -> &'static str {
        match self {
            BenchMode::Buffered => "buffered",
            BenchMode::Lambda(Mode::Host) => "host",
            BenchMode::Lambda(Mode::Device) => "device",
            BenchMode::Lambda(Mode::Auto) => "auto",
        }
    }
}

/// One row of the results.
#[derive(Clone, Debug, Serialize)]
struct Row {
    scenario: String,
    program: String,
    cache: &'static str,
    dataset_bytes: u64,
    cache_budget_bytes: u64,
    mode: &'static str,
    requests_host: u64,
    requests_device: u64,
    requests_profiled: u64,
    link_bytes: u64,
    media_bytes: u64,
    wall_ns: u64,
    modelled_ns: u64,
    /// Instructions λ executed per input byte (0 for buffered: native code).
    insns_per_byte: f64,
}

/// A dataset on the device and the λ that reads it.
struct App<'l> {
    workload: &'static Workload,
    lambda: &'l Lambda<'l>,
    path: String,
    size: u64,
    invocation: Invocation,
}

impl App<'_> {
    fn args(&self, offset: u64) -> LambdaArgs {
        let inv = self.invocation_at(offset);
        LambdaArgs {
            cparam1: inv.cparam1,
            cparam2: inv.cparam2,
            params: inv.params,
            output_size_bytes: Some(inv.output_size_bytes),
            fuel: None,
        }
    }

    fn invocation_at(&self, offset: u64) -> Invocation {
        let mut inv = self.invocation.clone();
        if self.workload.name == "knn" {
            inv.cparam1 = offset / 64;
        }
        inv
    }
}

/// What one application's run produced.
struct AppRun {
    account: RunAccount,
    outputs: Vec<Vec<u8>>,
    /// Host compute per chunk (host mode), for buffered's modelled compute.
    host_compute: Vec<u64>,
}

struct Bench<'d> {
    dev: &'d Device,
    chunk: u64,
    threads: u32,
    engines: u32,
}

impl<'d> Bench<'d> {
    fn io(&self, budget: u64) -> anyhow::Result<LambdaIo<'d>> {
        Ok(LambdaIo::new(
            self.dev,
            &LambdaOptions {
                cache_budget_bytes: budget,
                parallelism: Some(Parallelism {
                    host_threads: self.threads,
                    device_engines: self.engines,
                }),
                ..LambdaOptions::default()
            },
        )?)
    }

    fn chunks(&self, size: u64) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        (0..size.div_ceil(self.chunk)).map(move |i| {
            let offset = i * self.chunk;
            (i as usize, offset, self.chunk.min(size - offset))
        })
    }

    /// Cold: nothing of the image cached. Warm: `files` read in order through the host
    /// cache (λ-IO's sequential Buffer IO warm-up).
    fn prepare(
        &self,
        io: &LambdaIo<'_>,
        files: &[&LambdaFile<'_, '_>],
        warm: bool,
    ) -> anyhow::Result<()> {
        io.cache_drop()?;
        if warm {
            for f in files {
                for (_, offset, len) in self.chunks(f.size_bytes()) {
                    f.read_plain(offset, len)?;
                }
            }
        }
        Ok(())
    }

    /// One request of `app` in `mode`, added to `run`.
    fn request(
        &self,
        file: &LambdaFile<'_, '_>,
        app: &App<'_>,
        mode: BenchMode,
        (i, offset, len): (usize, u64, u64),
        compute: Option<&[u64]>,
        run: &mut AppRun,
    ) -> anyhow::Result<()> {
        match mode {
            BenchMode::Buffered => {
                let (bytes, mut cost): (Vec<u8>, SideCost) = file.read_plain(offset, len)?;
                let out = (app.workload.reference)(&bytes, &app.invocation_at(offset));
                if out.r0 < 0 {
                    bail!("{} reference failed with {}", app.workload.name, out.r0);
                }
                cost.compute_ns = compute.map_or(0, |c| c[i]);
                run.account.add_host(len, &cost);
                run.outputs.push(out.output);
            }
            BenchMode::Lambda(m) => {
                let out = file
                    .read_lambda(offset, len, app.lambda, &app.args(offset), m)
                    .with_context(|| {
                        format!("{} at {offset} in {}", app.workload.name, mode.name())
                    })?;
                run.account.add(len, &out);
                run.host_compute.push(out.host.map_or(0, |h| h.compute_ns));
                run.outputs.push(out.output);
            }
        }
        Ok(())
    }

    /// Runs `apps` at once (requests interleaved one for one) in `mode`.
    fn run_apps(
        &self,
        files: &[LambdaFile<'_, '_>],
        apps: &[App<'_>],
        mode: BenchMode,
        computes: &[Vec<u64>],
    ) -> anyhow::Result<Vec<AppRun>> {
        let mut runs: Vec<AppRun> = apps
            .iter()
            .map(|_| AppRun {
                account: RunAccount::default(),
                outputs: Vec::new(),
                host_compute: Vec::new(),
            })
            .collect();
        let mut iters: Vec<Vec<(usize, u64, u64)>> =
            apps.iter().map(|a| self.chunks(a.size).collect()).collect();
        for it in &mut iters {
            it.reverse();
        }
        let each = (self.threads / apps.len() as u32).max(1);
        loop {
            let clocks = runs
                .iter()
                .zip(&iters)
                .map(|(r, it)| (!it.is_empty()).then(|| r.account.modelled_ns(each, self.engines)));
            let Some(k) = next_app(clocks) else {
                return Ok(runs);
            };
            let c = iters[k]
                .pop()
                .expect("next_app picks an application with requests left");
            let compute = computes.get(k).map(Vec::as_slice);
            self.request(&files[k], &apps[k], mode, c, compute, &mut runs[k])?;
        }
    }
}

/// Which application issues the next request: of those with requests left (`Some` of
/// their modelled time so far), the one least far along its own modelled clock, the
/// first on a tie. Applications running at once each go at their own pace, so one whose
/// requests hit the host cache runs ahead of the other's misses, which evict pages; a
/// one-for-one interleaving would instead let a slow application's misses evict a fast
/// one's cached pages just before it reads them (λ-IO §5.3, Figure 5(b)).
fn next_app(clocks: impl Iterator<Item = Option<u64>>) -> Option<usize> {
    clocks
        .enumerate()
        .filter_map(|(k, c)| c.map(|ns| (ns, k)))
        .min()
        .map(|(_, k)| k)
}

fn device_config(size: u64, compute_scale: Option<f64>) -> anyhow::Result<DeviceConfig> {
    let mut perf = csx_device::PerfModel::lambda_io();
    perf.throttle = false;
    if let Some(x) = compute_scale {
        perf.compute_scale_milli = (x * 1000.0).round() as u32;
        // The device's per-class costs then follow the host's, scaled.
        perf.device_ps_per_insn = [0; csx_ebpf::count::CLASS_COUNT];
        perf.profile = "custom".to_string();
        perf.validate()?;
    }
    Ok(DeviceConfig {
        nvm_size_bytes: (10 * size + (256 << 20)).next_multiple_of(4096),
        slm_size_bytes: 256 << 20,
        state_size_bytes: 4096,
        engines: perf.engines,
        perf,
        ..DeviceConfig::default()
    })
}

fn dataset(w: &Workload, size: u64) -> anyhow::Result<Vec<u8>> {
    let spec = if w.name == "grep" {
        DataSpec::Text(TextSpec {
            row_len_min: GREP_ROW,
            row_len_max: GREP_ROW,
            ..TextSpec::default()
        })
    } else {
        (w.dataset)()
    };
    Ok(spec.generate(1, size)?)
}

fn workload(name: &str) -> &'static Workload {
    csx_workloads::by_name(name).expect("the λ-IO workloads are in the table")
}

pub fn run(args: LambdaBenchArgs) -> anyhow::Result<u8> {
    if args.chunk == 0 || !args.chunk.is_multiple_of(u64::from(GREP_ROW)) {
        bail!("--chunk must be a positive multiple of {GREP_ROW}");
    }
    if args.size < args.chunk * 4 || !args.size.is_multiple_of(args.chunk) {
        bail!("--size must be a multiple of --chunk and at least four chunks");
    }
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("dev");
    let config = device_config(args.size, args.compute_scale)?;
    let engines = config.perf.engines.unwrap_or(4);
    let dev = Device::init(&dir, config)?;
    let bench = Bench {
        dev: &dev,
        chunk: args.chunk,
        threads: args.threads.max(1),
        engines,
    };
    let mut lambdas = Vec::new();
    for name in ["stats64", "stats32", "knn", "grep", "bitmap"] {
        lambdas.push(Lambda::load(
            &dev,
            name,
            csx_workloads::program(name)?,
            None,
        )?);
    }
    let mut rows = Vec::new();
    let result = run_cases(&bench, &lambdas, args.size, &mut rows, args.json);
    for l in lambdas {
        l.unload()?;
    }
    result?;
    if let Some(dir) = &args.plots {
        write_plots(dir, &rows)?;
        if !args.json {
            println!("plots written to {}", dir.display());
        }
    }
    if !args.json {
        println!(
            "\nprofile {} (device ps per instruction: {}), {} host threads, {} device engines, chunk {} B",
            dev_profile(&dir),
            device_costs(&dir),
            bench_threads(&args),
            engines,
            args.chunk
        );
        print_goals(&rows);
    }
    Ok(exit::SUCCESS)
}

/// Two grouped bar charts, one group per scenario (scenario, program, cache) and one bar
/// per mode: modelled ms (the measure) and wall ms (this machine, for reference).
fn write_plots(dir: &std::path::Path, rows: &[Row]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    /// Per mode, ms.
    type Bars = Vec<(String, f64)>;
    // (label, modelled, wall)
    let mut groups: Vec<(String, Bars, Bars)> = Vec::new();
    for r in rows {
        // Short labels: the slanted axis labels have room for about 20 characters.
        let label = match r.scenario.as_str() {
            "single" => format!("{} {}", r.program, r.cache),
            "write" => format!("{} write", r.program),
            "two-apps" => format!("two apps {}", r.cache),
            "dataset-smaller" => "data < cache".to_string(),
            "dataset-about-equal" => "data ≈ cache".to_string(),
            "dataset-larger" => "data > cache".to_string(),
            other => other.to_string(),
        };
        if groups.last().is_none_or(|g| g.0 != label) {
            groups.push((label, Vec::new(), Vec::new()));
        }
        let g = groups.last_mut().expect("pushed above");
        g.1.push((r.mode.to_string(), r.modelled_ns as f64 / 1e6));
        g.2.push((r.mode.to_string(), r.wall_ns as f64 / 1e6));
    }
    let charts = [
        (
            "lambda-modelled.svg",
            "csx bench lambda: modelled time per mode (lambda-io profile)",
            "modelled ms",
            true,
        ),
        (
            "lambda-wall.svg",
            "csx bench lambda: wall time on this machine (host and device share its cores)",
            "wall ms",
            false,
        ),
    ];
    for (file, title, y_label, modelled) in charts {
        let chart = BarChart {
            title: title.to_string(),
            y_label: y_label.to_string(),
            groups: groups
                .iter()
                .map(|(l, m, w)| (l.clone(), if modelled { m.clone() } else { w.clone() }))
                .collect(),
            stacked: false,
            log: true,
        };
        let path = dir.join(file);
        std::fs::write(&path, chart.to_svg())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn dev_profile(dir: &std::path::Path) -> String {
    DeviceConfig::load(dir).map_or_else(|_| "?".to_string(), |c| c.perf.profile)
}

/// The device's costs per instruction class, as `class ps` pairs, equal classes merged.
fn device_costs(dir: &std::path::Path) -> String {
    let Ok(c) = DeviceConfig::load(dir) else {
        return "?".to_string();
    };
    let costs = c.perf.device_costs();
    let mut groups: Vec<(u64, Vec<&str>)> = Vec::new();
    for (class, ps) in csx_ebpf::count::InsnClass::ALL.iter().zip(costs) {
        match groups.iter_mut().find(|(p, _)| *p == ps) {
            Some((_, names)) => names.push(class.name()),
            None => groups.push((ps, vec![class.name()])),
        }
    }
    groups
        .iter()
        .map(|(ps, names)| format!("{} {ps}", names.join("/")))
        .collect::<Vec<_>>()
        .join(", ")
}

fn bench_threads(args: &LambdaBenchArgs) -> u32 {
    args.threads.max(1)
}

fn put_dataset(dev: &Device, name: &str, size: u64) -> anyhow::Result<String> {
    let path = format!("/bench/{name}-{size}");
    dev.put_bytes(&path, &dataset(workload(name), size)?)?;
    Ok(path)
}

fn app<'l>(lambdas: &'l [Lambda<'l>], name: &str, path: String, size: u64) -> App<'l> {
    let w = workload(name);
    let case = csx_workloads::Case::new(w, 1, size);
    let mut invocation = (w.invocation)(&case);
    if name == "stats32" || name == "stats64" {
        invocation.output_size_bytes = 32;
    }
    App {
        workload: w,
        lambda: lambdas.iter().find(|l| l.name() == name).expect("loaded"),
        path,
        size,
        invocation,
    }
}

/// One scenario: its name, the applications running at once, the cache's state and
/// the host page cache's budget.
struct Scenario<'s, 'l> {
    name: &'s str,
    apps: &'s [App<'l>],
    warm: bool,
    budget: u64,
}

/// Runs one scenario (every mode) and appends its rows.
fn scenario(
    bench: &Bench<'_>,
    rows: &mut Vec<Row>,
    s: &Scenario<'_, '_>,
    json: bool,
) -> anyhow::Result<()> {
    let mut reference: Option<Vec<Vec<Vec<u8>>>> = None;
    let mut computes: Vec<Vec<u64>> = Vec::new();
    // Host first: buffered borrows its compute.
    for mode in [MODES[1], MODES[0], MODES[2], MODES[3]] {
        let io = bench.io(s.budget)?;
        let files: Vec<LambdaFile<'_, '_>> = s
            .apps
            .iter()
            .map(|a| io.open(&a.path))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&LambdaFile<'_, '_>> = files.iter().collect();
        bench.prepare(&io, &refs, s.warm)?;
        let start = Instant::now();
        let runs = bench.run_apps(&files, s.apps, mode, &computes)?;
        let wall_ns = start.elapsed().as_nanos() as u64;
        let outputs: Vec<Vec<Vec<u8>>> = runs.iter().map(|r| r.outputs.clone()).collect();
        match &reference {
            None => reference = Some(outputs),
            Some(r) if *r == outputs => {}
            Some(_) => bail!("{}: {} disagrees with host", s.name, mode.name()),
        }
        if mode == MODES[1] {
            computes = runs.iter().map(|r| r.host_compute.clone()).collect();
        }
        let threads_each = (bench.threads / s.apps.len() as u32).max(1);
        let accounts: Vec<(RunAccount, u32)> =
            runs.iter().map(|r| (r.account, threads_each)).collect();
        let modelled_ns = makespan_ns(&accounts, bench.engines);
        let total = sum_accounts(&runs);
        let row = Row {
            scenario: s.name.to_string(),
            program: s
                .apps
                .iter()
                .map(|a| a.workload.name)
                .collect::<Vec<_>>()
                .join("+"),
            cache: if s.warm { "warm" } else { "cold" },
            dataset_bytes: s.apps.iter().map(|a| a.size).sum(),
            cache_budget_bytes: s.budget,
            mode: mode.name(),
            ..Row::counted(&total, wall_ns, modelled_ns)
        };
        print_row(&row, json, rows.is_empty());
        rows.push(row);
    }
    Ok(())
}

/// The counts of the applications' runs together.
fn sum_accounts(runs: &[AppRun]) -> RunAccount {
    runs.iter().fold(RunAccount::default(), |mut t, r| {
        t += r.account;
        t
    })
}

impl Row {
    /// A row's counts and times; the caller names its scenario, program, cache, sizes
    /// and mode.
    fn counted(account: &RunAccount, wall_ns: u64, modelled_ns: u64) -> Row {
        Row {
            scenario: String::new(),
            program: String::new(),
            cache: "-",
            dataset_bytes: 0,
            cache_budget_bytes: 0,
            mode: "",
            requests_host: account.requests_host,
            requests_device: account.requests_device,
            requests_profiled: account.requests_profiled,
            link_bytes: account.link_bytes,
            media_bytes: account.media_bytes,
            wall_ns,
            modelled_ns,
            insns_per_byte: account.insns as f64 / account.input_bytes.max(1) as f64,
        }
    }
}

fn run_cases(
    bench: &Bench<'_>,
    lambdas: &[Lambda],
    size: u64,
    rows: &mut Vec<Row>,
    json: bool,
) -> anyhow::Result<()> {
    let dev = bench.dev;
    let mut paths = std::collections::HashMap::new();
    for name in ["stats64", "stats32", "knn", "grep"] {
        paths.insert(name, put_dataset(dev, name, size)?);
    }
    // 1. Single application, cold and warm, cache twice the dataset.
    for name in ["stats64", "stats32", "knn", "grep"] {
        for warm in [false, true] {
            let apps = [app(lambdas, name, paths[name].clone(), size)];
            let s = Scenario {
                name: "single",
                apps: &apps,
                warm,
                budget: 2 * size,
            };
            scenario(bench, rows, &s, json)?;
        }
    }
    // 2. λ-write.
    write_scenario(bench, lambdas, size, rows, json)?;
    // 3. Dataset size against a cache of 15/16 of `size`.
    let budget = host_cache_budget(size);
    for (label, data) in [
        ("smaller", size / 2),
        ("about-equal", size),
        ("larger", 2 * size),
    ] {
        let path = if data == size {
            paths["stats64"].clone()
        } else {
            put_dataset(dev, "stats64", data)?
        };
        let apps = [app(lambdas, "stats64", path, data)];
        let name = format!("dataset-{label}");
        let s = Scenario {
            name: &name,
            apps: &apps,
            warm: true,
            budget,
        };
        scenario(bench, rows, &s, json)?;
    }
    // 4. Two applications at once.
    for warm in [false, true] {
        let apps = [
            app(lambdas, "stats32", paths["stats32"].clone(), size),
            app(lambdas, "stats64", paths["stats64"].clone(), size),
        ];
        let s = Scenario {
            name: "two-apps",
            apps: &apps,
            warm,
            budget,
        };
        scenario(bench, rows, &s, json)?;
    }
    Ok(())
}

/// The host page cache of the dataset-size and two-application cases: 15/16 of one
/// `size` dataset. λ-IO's host has 16 GB of memory against 16 GB datasets (§5.1, "the
/// page cache capacity is just smaller than the dataset"), and its two applications
/// each read their own 16 GB dataset (§5.3): together twice the cache.
fn host_cache_budget(size: u64) -> u64 {
    size / 16 * 15
}

/// bitmap: `size` bytes of bitmap, one request per chunk of output, written in order.
fn write_scenario(
    bench: &Bench<'_>,
    lambdas: &[Lambda],
    size: u64,
    rows: &mut Vec<Row>,
    json: bool,
) -> anyhow::Result<()> {
    let w = workload("bitmap");
    let lambda = lambdas
        .iter()
        .find(|l| l.name() == "bitmap")
        .expect("loaded");
    let pieces: Vec<Piece> = bench
        .chunks(size)
        .map(|c| Ok((c, (w.dataset)().generate(c.0 as u64 + 1, c.2)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut reference: Option<Vec<u8>> = None;
    let mut computes: Vec<u64> = Vec::new();
    for mode in [MODES[1], MODES[0], MODES[2], MODES[3]] {
        let io = bench.io(2 * size)?;
        let path = format!("/bench/bitmap-out-{}", mode.name());
        dev_truncate(bench.dev, &path)?;
        let mut file = io.open(&path)?;
        io.cache_drop()?;
        let start = Instant::now();
        let account = write_bitmap(&mut file, mode, lambda, &pieces, &mut computes)?;
        let wall_ns = start.elapsed().as_nanos() as u64;
        let written = bench.dev.read_file(&path, 0, u64::MAX)?;
        match &reference {
            None => reference = Some(written),
            Some(r) if *r == written => {}
            Some(_) => bail!("bitmap: {} wrote different bytes than host", mode.name()),
        }
        let row = Row {
            scenario: "write".to_string(),
            program: "bitmap".to_string(),
            cache: "-",
            dataset_bytes: size,
            cache_budget_bytes: 2 * size,
            mode: mode.name(),
            ..Row::counted(
                &account,
                wall_ns,
                account.modelled_ns(bench.threads, bench.engines),
            )
        };
        print_row(&row, json, rows.is_empty());
        rows.push(row);
    }
    Ok(())
}

/// One chunk of the write scenario's input: (index, offset, length) and its bytes.
type Piece = ((usize, u64, u64), Vec<u8>);

/// Writes the bitmap of each of `pieces` in `mode`, a request per chunk, in order.
/// Host mode records each chunk's compute time in `computes`; buffered, which computes
/// natively, is charged those.
fn write_bitmap(
    file: &mut LambdaFile<'_, '_>,
    mode: BenchMode,
    lambda: &Lambda,
    pieces: &[Piece],
    computes: &mut Vec<u64>,
) -> anyhow::Result<RunAccount> {
    let w = workload("bitmap");
    let mut account = RunAccount::default();
    for &((i, offset, len), ref input) in pieces {
        let args = LambdaArgs {
            output_size_bytes: Some(len),
            ..LambdaArgs::default()
        };
        match mode {
            BenchMode::Buffered => {
                let inv = Invocation {
                    output_size_bytes: len,
                    ..Invocation::default()
                };
                let out = (w.reference)(input, &inv);
                if out.r0 < 0 {
                    bail!("bitmap reference failed with {}", out.r0);
                }
                let mut cost = file.write_plain(offset, &out.output)?;
                cost.compute_ns = computes[i];
                account.add_host(input.len() as u64, &cost);
            }
            BenchMode::Lambda(m) => {
                let out = file.write_lambda(offset, input, lambda, &args, m)?;
                if m == Mode::Host {
                    computes.push(out.host.map_or(0, |h| h.compute_ns));
                }
                account.add(input.len() as u64, &out);
            }
        }
    }
    Ok(account)
}

fn dev_truncate(dev: &Device, path: &str) -> anyhow::Result<()> {
    dev.put_bytes(path, &[])?;
    Ok(())
}

fn print_row(row: &Row, json: bool, first: bool) {
    if json {
        println!("{}", serde_json::to_string(row).expect("rows serialise"));
        return;
    }
    if first {
        println!(
            "{:<20} {:<16} {:<5} {:>8} {:>8} {:<8} {:>6} {:>6} {:>6} {:>9} {:>9} {:>11} {:>7}",
            "scenario",
            "program",
            "cache",
            "data",
            "budget",
            "mode",
            "host",
            "device",
            "prof",
            "link MiB",
            "wall ms",
            "modelled ms",
            "insn/B"
        );
    }
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    println!(
        "{:<20} {:<16} {:<5} {:>7.0}M {:>7.0}M {:<8} {:>6} {:>6} {:>6} {:>9.1} {:>9.1} {:>11.3} {:>7.2}",
        row.scenario,
        row.program,
        row.cache,
        mib(row.dataset_bytes),
        mib(row.cache_budget_bytes),
        row.mode,
        row.requests_host,
        row.requests_device,
        row.requests_profiled,
        mib(row.link_bytes),
        row.wall_ns as f64 / 1e6,
        row.modelled_ns as f64 / 1e6,
        row.insns_per_byte,
    );
}

/// The goals, per scenario: auto against the better and the worse fixed λ mode.
fn print_goals(rows: &[Row]) {
    println!();
    println!("auto against the fixed modes (modelled):");
    let mut i = 0;
    while i + 4 <= rows.len() {
        let group = &rows[i..i + 4];
        let t = |m: &str| {
            group
                .iter()
                .find(|r| r.mode == m)
                .map_or(f64::NAN, |r| r.modelled_ns as f64)
        };
        let (host, device, auto, buffered) = (t("host"), t("device"), t("auto"), t("buffered"));
        let best = host.min(device);
        println!(
            "  {:<20} {:<16} {:<5} faster fixed side: {:<6} auto/best {:.3}  best/auto {:.2}x  worst/auto {:.2}x  buffered/auto {:.2}x",
            group[0].scenario,
            group[0].program,
            group[0].cache,
            if host <= device { "host" } else { "device" },
            auto / best,
            best / auto,
            host.max(device) / auto,
            buffered / auto,
        );
        i += 4;
    }
}

#[cfg(test)]
mod tests {
    use csx_ebpf::count::WorkCounts;

    use super::*;

    /// The work the SDK program `name` executes over `size` bytes of its λ-IO dataset on
    /// the host JIT, through the device's execution path, as the bench's host side runs it.
    /// `plain`: the SDK program with its loop unrolling pragma removed (one value per
    /// iteration, the shape of λ-IO's 30-line programs, Table 3).
    fn work(name: &str, size: u64, plain: bool) -> WorkCounts {
        let compiler = csx_workloads::Compiler::new().unwrap_or_else(|e| panic!("{e}"));
        let image = if plain {
            let sdk = csx_workloads::compile::PROGRAMS
                .iter()
                .find(|p| p.name == name)
                .expect("an SDK program");
            let source: String = sdk
                .source
                .lines()
                .filter(|l| !l.trim_start().starts_with("#pragma clang loop unroll"))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_ne!(
                source.len(),
                sdk.source.len(),
                "{name} has an unroll pragma"
            );
            compiler.compile_source(&format!("{name}-plain"), &source, &["-Wall"])
        } else {
            csx_workloads::program(name).map(<[u8]>::to_vec)
        }
        .unwrap_or_else(|e| panic!("{e}"));
        let engine = csx_lambda::program::host_engine(name, &image, None).unwrap();
        let mut input = dataset(workload(name), size).unwrap();
        let mut output = vec![0u8; 64];
        let (out, work) = csx_lambda::program::run_counted(
            engine.as_ref(),
            &mut input,
            &mut output,
            &csx_lambda::LambdaArgs::default(),
            None,
        );
        assert_eq!(out.result, Ok(32), "{name}");
        work
    }

    /// Two applications take turns by modelled clock: the one behind goes next, the first
    /// on a tie, finished ones never; a fast one issues several requests per slow one.
    #[test]
    fn the_application_behind_on_its_clock_goes_next() {
        assert_eq!(next_app([Some(5), Some(3)].into_iter()), Some(1));
        assert_eq!(next_app([Some(3), Some(3)].into_iter()), Some(0));
        assert_eq!(next_app([None, Some(9)].into_iter()), Some(1));
        assert_eq!(next_app([None, None].into_iter()), None);
        // App 0's requests cost 1, app 1's cost 3: three of app 0's per one of app 1's.
        let (mut clocks, mut left, mut order) = ([0u64, 0], [6u32, 2], Vec::new());
        while let Some(k) = next_app((0..2).map(|k| (left[k] > 0).then_some(clocks[k]))) {
            order.push(k);
            clocks[k] += [1, 3][k];
            left[k] -= 1;
        }
        assert_eq!(order, [0, 1, 0, 0, 0, 1, 0, 0]);
    }

    /// λ-IO's proportions: one dataset just larger than the cache, two datasets about
    /// twice it (the two-application case must not fit both files in the cache).
    #[test]
    fn the_host_cache_holds_less_than_one_dataset() {
        for size in [64u64 << 20, 1 << 30, 16 << 30] {
            let budget = host_cache_budget(size);
            assert!(
                budget < size && budget >= size / 16 * 15,
                "{size}: {budget}"
            );
            // Two datasets are more than twice the cache: at most 15/32 of them fit.
            assert!(2 * size > 2 * budget, "{size}: {budget}");
            assert!(budget * 32 <= 2 * size * 15, "{size}: {budget}");
        }
    }

    /// The `lambda-io` profile's per-class costs are calibrated on λ-IO's Table 4 (sBPF
    /// rows): the device's compute over the kernel's is 2.94 / 0.99 for Stats64 and
    /// 10.27 / 1.60 for Stats32. Our programs' executed work in λ-IO's loop shape (one
    /// value per iteration: the SDK's loops unroll by four), priced by
    /// the profile, must give the same ratios (within 3%); a program or a cost changing
    /// breaks this.
    #[test]
    fn lambda_io_costs_reproduce_table_4_compute_ratios() {
        let perf = csx_device::PerfModel::lambda_io();
        for (name, want) in [("stats64", 2.94 / 0.99), ("stats32", 10.27 / 1.60)] {
            let w = work(name, 1 << 20, true);
            let ratio = perf.device_work_ns(&w.0) as f64 / perf.host_work_ns(&w.0) as f64;
            let per_byte: Vec<String> = w
                .named()
                .filter(|(_, n)| *n > 0)
                .map(|(c, n)| format!("{c} {:.3}", n as f64 / f64::from(1u32 << 20)))
                .collect();
            assert!(
                (ratio / want - 1.0).abs() < 0.03,
                "{name}: device/host compute {ratio:.3}, λ-IO Table 4 {want:.3}; \
                 executed per byte: {}",
                per_byte.join(", ")
            );
        }
    }

    /// The SDK's stats loops, unrolled by four, execute at least a quarter fewer
    /// instructions per byte than λ-IO's one-value-per-iteration shape, with the same
    /// answer (`work` checks r0).
    #[test]
    fn unrolled_stats_loops_execute_fewer_instructions() {
        for name in ["stats64", "stats32"] {
            let plain = work(name, 1 << 20, true).total();
            let sdk = work(name, 1 << 20, false).total();
            assert!(
                sdk * 4 <= plain * 3,
                "{name}: SDK {sdk}, plain loop {plain}"
            );
        }
    }
}
