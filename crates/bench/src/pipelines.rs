//! `csx bench pipelines`: Metal FS's pipeline experiments on our device.
//!
//! A fresh embedded device in a temporary directory (engines: one per core) and `--size`
//! bytes of uniform u64 values (splitmix64, seeded) in one device file, read once before
//! the timed runs (warm). Every case runs `--runs` times; the best wall time counts.
//!
//! 1. Pipe overhead (Metal FS Table 2, a passthrough operator): host → device → host,
//!    host → device, device → host. "device" is the rate of the passthrough stage alone
//!    (bytes over the host-observed time of its Executes, Metal FS's on-card monitor),
//!    "pipe" the end-to-end rate (bytes over wall time); % = pipe / device.
//! 2. Fused against composed with shell pipes: the same `filter | aggregate` from a
//!    device file, as one `csx pipe` (fused) and as a shell pipe of the mount's `.ops/`
//!    executables (`sh -c`, through FUSE, the proxies fusing it on the device), and the
//!    same two with `| cat |` in the middle (composed through the host).
//! 3. Filter at match rates 25/50/75 %: the device's filter from the device file
//!    against the same filter on the host (one thread, a branchy loop over the values in
//!    memory, Metal FS's untuned CPU baseline), and the fused filter + aggregate.
//! 4. Two stages fused against each stage alone: `filter | aggregate` against `filter`
//!    and `aggregate` (goal: fused >= 80 % of the slower stage alone).
//!
//! Wall time is this machine's; modelled time is the device profile's (the sum over the
//! stages' completions), so it is the same everywhere.

#![warn(clippy::too_many_lines)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _};
use csx_fs::ops::Catalogue;
use csx_fs::pipe::{self, PipeOptions, PipeReport, Sink, Source};
use csx_fs::{mount, shell, MetalFs};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use serde_json::json;

use crate::exit;
use crate::plot::BarChart;

/// Metal FS's pipeline experiments: pipe overhead, shell pipes against fused, filter
/// selectivity against the host, two fused stages against one.
#[derive(Debug, clap::Args)]
pub struct PipelinesBenchArgs {
    /// Bytes of the data file (Metal FS used 1 GiB; accepts KiB, MiB, GiB).
    #[arg(long, default_value = "256MiB", value_parser = csx_host::size::parse_size)]
    size: u64,
    /// Timed runs of each case (the best counts).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Bytes of one pipeline chunk.
    #[arg(long, default_value = "4MiB", value_parser = csx_host::size::parse_size)]
    chunk: u64,
    /// Skip the shell-pipe cases (they need FUSE: /dev/fuse and root).
    #[arg(long)]
    no_shell: bool,
    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// One JSON object instead of the tables.
    #[arg(long)]
    json: bool,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn values(size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(size as usize);
    let mut i = 0u64;
    while (out.len() as u64) < size {
        out.extend_from_slice(&splitmix64(1 + i).to_le_bytes());
        i += 1;
    }
    out.truncate(size as usize);
    out
}

/// One measured case.
#[derive(Clone, Debug, serde::Serialize)]
struct Case {
    name: String,
    bytes: u64,
    /// Best wall time, seconds.
    wall_s: f64,
    /// Every run's wall time.
    runs_s: Vec<f64>,
    /// MiB/s of input over the best wall time.
    mib_s: f64,
    /// Device-side rate of the named stage (bytes over its Executes' host-observed time).
    device_mib_s: Option<f64>,
    /// Modelled seconds under the device's profile (sum over stages).
    modelled_s: Option<f64>,
}

fn mib_s(bytes: u64, s: f64) -> f64 {
    bytes as f64 / s.max(1e-9) / (1 << 20) as f64
}

struct Bench {
    dev: Arc<MetalFs>,
    opts: PipeOptions,
    runs: u32,
}

impl Bench {
    fn dev(&self) -> Arc<Device> {
        self.dev.device()
    }

    /// Best of `runs` runs of one pipeline.
    fn pipe(
        &self,
        name: &str,
        pipeline: &str,
        source: impl Fn() -> Source,
        sink: impl Fn() -> Sink,
        input_bytes: u64,
        device_stage: Option<usize>,
    ) -> anyhow::Result<Case> {
        let stages = Catalogue.parse_pipeline(pipeline)?;
        let mut best: Option<PipeReport> = None;
        let mut runs_s = Vec::new();
        for _ in 0..self.runs {
            let r = pipe::run(&self.dev(), &stages, source(), sink(), &self.opts)
                .with_context(|| format!("{name}: {pipeline}"))?;
            runs_s.push(r.wall_ns as f64 / 1e9);
            if best.as_ref().is_none_or(|b| r.wall_ns < b.wall_ns) {
                best = Some(r);
            }
        }
        let r = best.expect("at least one run");
        let wall_s = r.wall_ns as f64 / 1e9;
        Ok(Case {
            name: name.to_owned(),
            bytes: input_bytes,
            wall_s,
            runs_s,
            mib_s: mib_s(input_bytes, wall_s),
            device_mib_s: device_stage
                .map(|i| mib_s(r.stages[i].bytes_in, r.stages[i].busy_ns as f64 / 1e9)),
            modelled_s: Some(r.stages.iter().map(|s| s.modelled_ns).sum::<u64>() as f64 / 1e9),
        })
    }

    /// Best of `runs` runs of a shell command line.
    fn shell(&self, name: &str, mnt: &Path, script: &str, bytes: u64) -> anyhow::Result<Case> {
        let mut runs_s = Vec::new();
        for _ in 0..self.runs {
            let t = Instant::now();
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("MNT", mnt)
                .output()
                .context("running sh")?;
            if !out.status.success() {
                bail!(
                    "{name}: `{script}` failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            runs_s.push(t.elapsed().as_secs_f64());
        }
        let wall_s = runs_s.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(Case {
            name: name.to_owned(),
            bytes,
            wall_s,
            runs_s,
            mib_s: mib_s(bytes, wall_s),
            device_mib_s: None,
            modelled_s: None,
        })
    }
}

/// A host stream of `data` (shared, not copied per run).
struct Bytes(Arc<Vec<u8>>, usize);

impl Read for Bytes {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.0.len() - self.1);
        buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
        self.1 += n;
        Ok(n)
    }
}

/// A host sink that only counts (Metal FS's `pv > /dev/null`).
struct Count;

impl Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(std::hint::black_box(b).len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The host filter (and fused aggregate) over u64s < `below`: Metal FS's CPU baseline,
/// a plain branchy loop.
fn host_filter(data: &[u8], below: u64, aggregate: bool) -> (Vec<u8>, [u64; 4]) {
    let mut out = Vec::new();
    let (mut count, mut sum, mut min, mut max) = (0u64, 0u64, u64::MAX, 0u64);
    for c in data.chunks_exact(8) {
        let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        if v < below {
            if aggregate {
                count += 1;
                sum = sum.wrapping_add(v);
                min = min.min(v);
                max = max.max(v);
            } else {
                out.extend_from_slice(c);
            }
        }
    }
    (out, [count, sum, min, max])
}

/// The filter | aggregate pipeline keeping values below `below`.
fn filter_aggregate(below: u64) -> String {
    format!("filter --op lt --value {below} | aggregate")
}

/// Half the u64 range: the filter that keeps half the values.
const HALF: u64 = 1 << 63;

/// One match rate's cases: (match %, device filter, device filter + aggregate, [host
/// filter, host filter + aggregate]).
type Selectivity = (u64, Case, Case, Vec<Case>);

/// What the cases measured.
struct Results {
    overhead: Vec<Case>,
    selectivity: Vec<Selectivity>,
    two: Vec<Case>,
    /// The slower stage alone over the fused pair.
    fused_share: f64,
    shell: Vec<Case>,
}

impl Results {
    /// How much slower the proxies' shell pipe is than the fused csx pipe.
    fn shell_ratio(&self) -> Option<f64> {
        (self.shell.len() == 3).then(|| self.shell[1].wall_s / self.shell[0].wall_s - 1.0)
    }
}

pub fn run(args: PipelinesBenchArgs) -> anyhow::Result<u8> {
    let size = args.size / 8 * 8;
    if size < 8 << 20 {
        bail!("--size {} is below 8 MiB: too small to measure", args.size);
    }
    let tmp = tempfile::tempdir().context("a temporary directory")?;
    let data = Arc::new(values(size));
    let b = setup(&args, tmp.path(), &data)?;
    let progress = |s: &str| {
        if !args.json {
            eprintln!("csx bench pipelines: {s}");
        }
    };
    progress("pipe overhead (passthrough)");
    let overhead = overhead(&b, &data)?;
    progress("filter selectivity against the host");
    let selectivity = selectivity(&b, &data)?;
    progress("two fused stages against each alone");
    let two = two_stages(&b, size)?;
    let slower = two[0].wall_s.max(two[1].wall_s);
    let fused_share = slower / two[2].wall_s;
    let shell = if args.no_shell {
        Vec::new()
    } else {
        progress("shell pipes through the mount");
        shell_pipes(&b, tmp.path(), size)?
    };
    check_answer(&b, &data)?;
    let results = Results {
        overhead,
        selectivity,
        two,
        fused_share,
        shell,
    };
    if let Some(dir) = &args.plots {
        plots(dir, &results)?;
    }
    if args.json {
        let report = json_report(&results, size, args.chunk, b.runs);
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit::SUCCESS);
    }
    print_tables(&results, size, args.chunk, b.runs);
    Ok(exit::SUCCESS)
}

/// A fresh embedded device under `dir` holding `data` in `/data.u64`, read once (warm).
fn setup(args: &PipelinesBenchArgs, dir: &Path, data: &[u8]) -> anyhow::Result<Bench> {
    let size = data.len() as u64;
    let config = DeviceConfig {
        nvm_size_bytes: (3 * size + (256 << 20)).next_multiple_of(1 << 20),
        slm_size_bytes: 512 << 20,
        state_size_bytes: 4096,
        ..DeviceConfig::default()
    };
    let dev = Device::init(&dir.join("dev"), config).context("creating the device")?;
    dev.put_bytes("/data.u64", data)
        .context("writing the data")?;
    // Warm: read it once (the page cache of the image holds it).
    let _ = dev.read_file("/data.u64", 0, size.min(64 << 20))?;
    Ok(Bench {
        dev: Arc::new(MetalFs::new(dev)),
        opts: PipeOptions {
            chunk: args.chunk,
            ..PipeOptions::default()
        },
        runs: args.runs.max(1),
    })
}

fn file() -> Source {
    Source::DeviceFile("/data.u64".into())
}

fn host_out() -> Sink {
    Sink::Host(Box::new(Count))
}

fn discard() -> Sink {
    Sink::Discard
}

/// Case 1, pipe overhead: a passthrough between every pair of ends.
fn overhead(b: &Bench, data: &Arc<Vec<u8>>) -> anyhow::Result<Vec<Case>> {
    let size = data.len() as u64;
    let host_in = || Source::Host(Box::new(Bytes(Arc::clone(data), 0)));
    let datagen = format!("datagen --size {size} | passthrough");
    Ok(vec![
        b.pipe(
            "host->device->host",
            "passthrough",
            host_in,
            host_out,
            size,
            Some(0),
        )?,
        b.pipe(
            "host->device",
            "passthrough",
            host_in,
            discard,
            size,
            Some(0),
        )?,
        b.pipe(
            "device->host",
            &datagen,
            || Source::Nothing,
            host_out,
            size,
            Some(1),
        )?,
        b.pipe(
            "device->device",
            "passthrough",
            file,
            discard,
            size,
            Some(0),
        )?,
    ])
}

/// Case 3, selectivity: the device's filter (alone and fused with aggregate)
/// against the host's at match rates of 25, 50 and 75 %.
fn selectivity(b: &Bench, data: &[u8]) -> anyhow::Result<Vec<Selectivity>> {
    let size = data.len() as u64;
    let mut out = Vec::new();
    for pct in [25u64, 50, 75] {
        let below = ((u128::from(pct) << 64) / 100) as u64;
        let dev_filter = b.pipe(
            &format!("device filter {pct}%"),
            &format!("filter --op lt --value {below}"),
            file,
            discard,
            size,
            Some(0),
        )?;
        let dev_fused = b.pipe(
            &format!("device filter+aggregate {pct}%"),
            &filter_aggregate(below),
            file,
            host_out,
            size,
            None,
        )?;
        let host = [false, true]
            .into_iter()
            .map(|aggregate| host_case(b.runs, data, pct, below, aggregate))
            .collect();
        out.push((pct, dev_filter, dev_fused, host));
    }
    Ok(out)
}

/// The host's filter (and aggregate) over `data`, best of `runs`.
fn host_case(runs: u32, data: &[u8], pct: u64, below: u64, aggregate: bool) -> Case {
    let mut runs_s = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(host_filter(data, below, aggregate));
        runs_s.push(t.elapsed().as_secs_f64());
    }
    let wall_s = runs_s.iter().copied().fold(f64::INFINITY, f64::min);
    let what = if aggregate {
        "filter+aggregate "
    } else {
        "filter "
    };
    Case {
        name: format!("host {what}{pct}%"),
        bytes: data.len() as u64,
        wall_s,
        runs_s,
        mib_s: mib_s(data.len() as u64, wall_s),
        device_mib_s: None,
        modelled_s: None,
    }
}

/// Case 4: two stages fused against each alone (the filter keeps half).
fn two_stages(b: &Bench, size: u64) -> anyhow::Result<Vec<Case>> {
    Ok(vec![
        b.pipe(
            "filter alone",
            &format!("filter --op lt --value {HALF}"),
            file,
            discard,
            size,
            None,
        )?,
        b.pipe("aggregate alone", "aggregate", file, host_out, size, None)?,
        b.pipe(
            "filter | aggregate (fused)",
            &filter_aggregate(HALF),
            file,
            host_out,
            size,
            None,
        )?,
    ])
}

/// Case 2: shell pipes through a mount under `dir` against the fused csx pipe.
fn shell_pipes(b: &Bench, dir: &Path, size: u64) -> anyhow::Result<Vec<Case>> {
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt)?;
    let mnt = std::fs::canonicalize(&mnt)?;
    let socket = dir.join("ops.sock");
    let server = shell::OpsServer::start(Arc::clone(&b.dev), &socket, false)?;
    let exe = std::env::current_exe().context("the csx executable")?;
    let mounted = mount::spawn_with_ops(
        Arc::clone(&b.dev),
        &mnt,
        shell::ops_dir(&exe, &socket, &mnt),
    )
    .context("mounting (needs /dev/fuse and root; --no-shell skips these cases)")?;
    let fused = b.pipe(
        "csx pipe (fused)",
        &filter_aggregate(HALF),
        file,
        host_out,
        size,
        None,
    )?;
    let f = format!("$MNT/.ops/filter --op lt --value {HALF}");
    let a = "$MNT/.ops/aggregate";
    let sh_fused = b.shell(
        "shell pipe, fused by the proxies",
        &mnt,
        &format!("{f} < $MNT/data.u64 | {a} > /dev/null"),
        size,
    )?;
    let sh_host = b.shell(
        "shell pipe through cat (host)",
        &mnt,
        &format!("{f} < $MNT/data.u64 | cat | {a} > /dev/null"),
        size,
    )?;
    mounted.unmount().context("unmounting")?;
    drop(server);
    Ok(vec![fused, sh_fused, sh_host])
}

/// The device's filter | aggregate answers what the host's does.
fn check_answer(b: &Bench, data: &[u8]) -> anyhow::Result<()> {
    struct Into(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Into {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let stages = Catalogue.parse_pipeline(&filter_aggregate(HALF))?;
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    pipe::run(
        &b.dev(),
        &stages,
        file(),
        Sink::Host(Box::new(Into(Arc::clone(&got)))),
        &b.opts,
    )?;
    let want = host_filter(data, HALF, true).1;
    let got: Vec<u64> = got
        .lock()
        .expect("not poisoned")
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    if got != want {
        bail!("the device's filter | aggregate answered {got:?}, the host {want:?}");
    }
    Ok(())
}

fn json_report(r: &Results, size: u64, chunk: u64, runs: u32) -> serde_json::Value {
    json!({
        "size": size,
        "chunk": chunk,
        "runs": runs,
        "overhead": r.overhead,
        "selectivity": r.selectivity.iter().map(|(pct, f, ff, h)| json!({
            "match_pct": pct, "device_filter": f, "device_filter_aggregate": ff,
            "host_filter": h[0], "host_filter_aggregate": h[1],
        })).collect::<Vec<_>>(),
        "two_stages": r.two,
        "fused_over_slower_stage": r.fused_share,
        "shell": r.shell,
        "shell_slower_than_fused": r.shell_ratio(),
    })
}

/// The SVG bar charts, one per case group, into `dir`.
fn plots(dir: &Path, r: &Results) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut charts = vec![
        (
            "pipelines-overhead.svg",
            "Pipe overhead (passthrough)",
            &r.overhead,
        ),
        (
            "pipelines-two-stages.svg",
            "Two fused stages against each alone",
            &r.two,
        ),
    ];
    if !r.shell.is_empty() {
        charts.push((
            "pipelines-shell.svg",
            "filter | aggregate: fused, shell, through cat",
            &r.shell,
        ));
    }
    for (file_name, title, cases) in charts {
        let chart = BarChart {
            title: title.into(),
            y_label: "MiB/s".into(),
            groups: cases
                .iter()
                .map(|c| {
                    let mut v = vec![("pipe (wall)".to_owned(), c.mib_s)];
                    if let Some(d) = c.device_mib_s {
                        v.push(("device stage".to_owned(), d));
                    }
                    (c.name.clone(), v)
                })
                .collect(),
            ..BarChart::default()
        };
        std::fs::write(dir.join(file_name), chart.to_svg())?;
    }
    let chart = BarChart {
        title: "Filter by match rate: device against host".into(),
        y_label: "MiB/s".into(),
        groups: r
            .selectivity
            .iter()
            .map(|(pct, f, ff, h)| {
                (
                    format!("{pct}% match"),
                    vec![
                        ("device filter".to_owned(), f.mib_s),
                        ("device filter+aggregate".to_owned(), ff.mib_s),
                        ("host filter".to_owned(), h[0].mib_s),
                        ("host filter+aggregate".to_owned(), h[1].mib_s),
                    ],
                )
            })
            .collect(),
        ..BarChart::default()
    };
    std::fs::write(dir.join("pipelines-selectivity.svg"), chart.to_svg())?;
    Ok(())
}

fn row(c: &Case) {
    println!(
        "  {:<36} {:>9.1} MiB/s  best {:>7.3} s{}{}",
        c.name,
        c.mib_s,
        c.wall_s,
        c.device_mib_s
            .map(|d| format!("  device stage {d:.1} MiB/s ({:.0}%)", 100.0 * c.mib_s / d))
            .unwrap_or_default(),
        c.modelled_s
            .map(|m| format!("  modelled {m:.3} s"))
            .unwrap_or_default()
    );
}

fn print_tables(r: &Results, size: u64, chunk: u64, runs: u32) {
    println!("data: {size} bytes of u64, chunk {chunk} bytes, best of {runs}");
    println!("pipe overhead (pipe/device, Metal FS: 86% twice, 89% and 94% once):");
    r.overhead.iter().for_each(row);
    println!("filter by match rate, device against the host:");
    for (_, f, ff, h) in &r.selectivity {
        row(f);
        row(ff);
        row(&h[0]);
        row(&h[1]);
    }
    println!(
        "two fused stages (goal: fused >= 80% of the slower stage alone: {:.0}%):",
        100.0 * r.fused_share
    );
    r.two.iter().for_each(row);
    if let Some(ratio) = r.shell_ratio() {
        println!(
            "shell pipes (goal: <= 15% slower than fused: {:+.1}%):",
            100.0 * ratio
        );
        r.shell.iter().for_each(row);
    }
}
