//! `csx bench array`: INSTANT against the Intel OAS baseline (the thesis's §5.2) on csx
//! arrays, in modelled time, plus a wall-time run against a host parallel sort.
//!
//! **Grid.** For 2, 4 and 8 members and sizes from 32 KiB to 512 MiB (powers of two, the
//! thesis's 15 sizes), a merge sort of random u64 keys striped evenly over the members,
//! three ways: `instant` chain (the thesis's INSTANT), `host` chain (its OAS baseline) and
//! `instant` tree (our improvement). Each is priced at the thesis's link speeds (20 Mbit/s
//! to 40 Gbit/s and unlimited) with `csx_array::model` (thesis calibration). Sizes up to
//! `--real-max` are sorted for real on embedded arrays: the outputs must equal a host
//! sort and each other, and the sort's log must equal the plan the larger sizes are
//! priced from (else the benchmark fails), so every priced log is one the sort really
//! produces. Modelled times do not depend on this machine.
//!
//! **Wall time** (`--wall SIZE`): SIZE bytes of random u64 on 4 embedded members, sorted
//! with the instant chain and tree, against rayon's `par_sort_unstable` on the host over
//! the same keys; both outputs compared with the host's. The data is on the members'
//! media (flushed) before the clock starts; the sort's time ends when its output is
//! written, flushed and committed on a member (not read back). `--wall-dir` puts the
//! members' NVM images on another file system (a tmpfs models media faster than this
//! machine's disk).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Args;
use csx_array::model::{
    even_parts, even_stripe, plan, price, ModelledSort, SortModel, THESIS_GAINS,
};
use csx_array::{sort, Array, LinkModel, Placement, SortEvent, SortMode, SortOptions, Topology};
use csx_host::size::parse_size;
use csx_host::transport::inproc::DeviceConfig;
use serde::Serialize;

use super::plot::BarChart;
use crate::exit;

/// The thesis's link speeds (bits per second; 0: unlimited), as it labels them.
const LINKS: [(&str, u64); 11] = [
    ("20 Mbit/s", 20_000_000),
    ("50 Mbit/s", 50_000_000),
    ("100 Mbit/s", 100_000_000),
    ("200 Mbit/s", 200_000_000),
    ("500 Mbit/s", 500_000_000),
    ("1 Gbit/s", 1_000_000_000),
    ("5 Gbit/s", 5_000_000_000),
    ("10 Gbit/s", 10_000_000_000),
    ("20 Gbit/s", 20_000_000_000),
    ("40 Gbit/s", 40_000_000_000),
    ("unlimited", 0),
];

/// Run the array benchmark (SCANCOMS/INSTANT's merge sort).
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  csx bench array
  csx bench array --json --plots docs/plots
  csx bench array --real-max 16MiB --latency-us 100
  csx bench array --wall 1GiB
  csx bench array --disks 2 --max-size 32KiB --real-max 32KiB --wall 1GiB --wall-dir /dev/shm")]
pub struct ArrayBenchArgs {
    /// Member counts.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    disks: Vec<usize>,
    /// Largest size of the grid (from 32 KiB, doubling).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "512MiB")]
    max_size: u64,
    /// Sizes up to this are sorted for real (and their logs checked against the plan).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "2MiB")]
    real_max: u64,
    /// Command latency of the link model, µs (the thesis gives none; csx's default 10).
    #[arg(long, value_name = "US", default_value_t = 10)]
    latency_us: u64,
    /// Also sort SIZE bytes on 4 embedded members in wall time against rayon's
    /// par_sort_unstable on the host.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    wall: Option<u64>,
    /// Where the wall run's members keep their state (NVM images): a directory on the
    /// file system to measure (default: the temporary directory).
    #[arg(long, value_name = "DIR", requires = "wall")]
    wall_dir: Option<std::path::PathBuf>,
    /// The array sorts the wall run times, in this order (chain, tree, multiway).
    #[arg(long, value_delimiter = ',', default_value = "chain,tree,multiway",
          value_parser = ["chain", "tree", "multiway"], requires = "wall")]
    wall_topology: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
struct Row {
    disks: usize,
    size_bytes: u64,
    /// `run`: priced from a real sort's log; `plan`: from the plan.
    source: &'static str,
    link: &'static str,
    link_bits_per_sec: u64,
    host_chain: ModelledSort,
    instant_chain: ModelledSort,
    instant_tree: ModelledSort,
    /// (host chain - instant chain) / host chain, %.
    gain_pct: f64,
    /// (host chain - instant tree) / host chain, %.
    tree_gain_pct: f64,
}

#[derive(Clone, Debug, Serialize)]
struct ThesisRow {
    disks: usize,
    link_gbit_per_sec: u64,
    thesis_gain_pct: f64,
    modelled_gain_pct: f64,
    difference_pp: f64,
}

#[derive(Clone, Debug, Serialize)]
struct Wall {
    size_bytes: u64,
    members: usize,
    /// Where the members' state directories (their NVM images) were.
    dir: String,
    /// One row per array sort timed (instant mode), in the order they ran.
    sorts: Vec<WallSort>,
    host_par_sort_unstable_ns: u64,
    /// Best of the array's sorts over the host's.
    ratio: f64,
    host_cpu_ns: u64,
    /// Best of the array's CPU times over the host's.
    cpu_ratio: f64,
    outputs_equal: bool,
}

/// One timed array sort.
#[derive(Clone, Debug, Serialize)]
struct WallSort {
    topology: Topology,
    wall_ns: u64,
    /// CPU time (user + system, every thread of this process): on a shared machine a
    /// process with more threads gets a larger share of the cores, so wall ratios taken
    /// under load flatter the array; CPU time does not depend on the share.
    cpu_ns: u64,
    /// Of `cpu_ns`: user and system time, and the minor page faults taken (a fault maps
    /// a fresh page of device memory or of an NVM image, zeroed by the kernel).
    user_ns: u64,
    sys_ns: u64,
    minor_faults: u64,
    /// The same for the sort phase only (until the last part was sorted).
    sort_phase: Usage,
    /// Until the last part was sorted (staging included), the merges, and of those
    /// the output's write and flush (multiway: the longest member's writes, which
    /// overlap its merging).
    phases: WallPhases,
}

/// CPU time of this process so far (every thread) and its minor page faults.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Usage {
    user_ns: u64,
    sys_ns: u64,
    minor_faults: u64,
}

impl Usage {
    /// `getrusage(RUSAGE_SELF)`.
    fn now() -> anyhow::Result<Usage> {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `u` is a writable, properly aligned rusage; getrusage only writes it.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
        if rc != 0 {
            bail!("getrusage: {}", std::io::Error::last_os_error());
        }
        // SAFETY: getrusage returned 0, so it filled the struct (and zeroed() had
        // initialised every byte before).
        let u = unsafe { u.assume_init() };
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        Ok(Usage {
            user_ns: ns(u.ru_utime),
            sys_ns: ns(u.ru_stime),
            minor_faults: u.ru_minflt as u64,
        })
    }

    fn cpu_ns(&self) -> u64 {
        self.user_ns + self.sys_ns
    }

    /// What was used from `earlier` to `self`.
    fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }
}

/// CPU time (user + system) of this process so far, every thread.
fn process_cpu_ns() -> anyhow::Result<u64> {
    Ok(Usage::now()?.cpu_ns())
}

#[derive(Clone, Debug, Serialize)]
struct WallPhases {
    sort_ns: u64,
    merge_ns: u64,
    output_write_ns: u64,
}

fn gain(host: &ModelledSort, other: &ModelledSort) -> f64 {
    100.0 * (host.total_ns as f64 - other.total_ns as f64) / host.total_ns as f64
}

fn keys(count: usize, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect()
}

fn to_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|k| k.to_le_bytes()).collect()
}

fn member_config(size: u64, n: usize) -> DeviceConfig {
    let part = size.div_ceil(n as u64);
    DeviceConfig {
        // Input piece, run, two outputs (the new one is written before the old one is
        // deleted) and room: sparse, so cheap.
        nvm_size_bytes: (3 * part + 2 * size + (64 << 20)).next_multiple_of(4096),
        slm_size_bytes: (2 * size + (64 << 20)).next_multiple_of(4096),
        state_size_bytes: 1 << 16,
        engines: Some(1),
        ..DeviceConfig::default()
    }
}

/// Sorts `size` bytes for real on `n` embedded members three ways; checks the outputs
/// and the logs; returns the three logs (host chain, instant chain, instant tree).
fn real_logs(n: usize, size: u64) -> anyhow::Result<[Vec<SortEvent>; 3]> {
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let array = Array::init_embedded(
        &tmp.path().join("arr"),
        n,
        member_config(size, n),
        LinkModel::default(),
    )?;
    let mut data = keys((size / 8) as usize, size ^ n as u64);
    array.put_bytes(
        "/in",
        &to_bytes(&data),
        Placement::Striped {
            stripe_bytes: even_stripe(size, n),
        },
    )?;
    data.sort_unstable();
    let expect = to_bytes(&data);
    let mut logs = Vec::new();
    for (mode, topology) in [
        (SortMode::Host, Topology::Chain),
        (SortMode::Instant, Topology::Chain),
        (SortMode::Instant, Topology::Tree),
    ] {
        let r = sort(
            &array,
            "/in",
            &SortOptions {
                mode,
                topology,
                output: Some("/out".into()),
            },
            &|_| {},
        )?;
        if array.get_bytes("/out")? != expect {
            bail!("{n} members, {size} bytes, {mode:?} {topology:?}: the output is not the host's sort");
        }
        let key = |e: &SortEvent| format!("{e:?}");
        let mut real: Vec<String> = r.events.iter().map(key).collect();
        let mut planned: Vec<String> = plan(&even_parts(size, n), topology)
            .iter()
            .map(key)
            .collect();
        real.sort();
        planned.sort();
        if real != planned {
            bail!("{n} members, {size} bytes, {mode:?} {topology:?}: the sort's log differs from the plan");
        }
        logs.push(r.events);
    }
    array.close()?;
    Ok(logs.try_into().expect("three logs"))
}

/// The host side of the wall run: `data` sorted with rayon's `par_sort_unstable`.
struct HostSort {
    wall_ns: u64,
    cpu_ns: u64,
    /// The sorted keys as bytes, the output every array sort must equal.
    expect: Vec<u8>,
}

fn host_sort(mut data: Vec<u64>) -> anyhow::Result<HostSort> {
    use rayon::slice::ParallelSliceMut as _;
    let cpu0 = process_cpu_ns()?;
    let t = Instant::now();
    data.par_sort_unstable();
    let wall_ns = t.elapsed().as_nanos() as u64;
    let cpu_ns = process_cpu_ns()? - cpu0;
    Ok(HostSort {
        wall_ns,
        cpu_ns,
        expect: to_bytes(&data),
    })
}

fn wall(size: u64, dir: Option<&Path>, topologies: &[Topology]) -> anyhow::Result<Wall> {
    let n = 4;
    let tmp = match dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .context("temporary directory")?;
    let mut config = member_config(size, n);
    config.engines = None;
    let array = Array::init_embedded(&tmp.path().join("arr"), n, config, LinkModel::default())?;
    let data = keys((size / 8) as usize, 0x5eed);
    array.put_bytes(
        "/in",
        &to_bytes(&data),
        Placement::Striped {
            stripe_bytes: even_stripe(size, n),
        },
    )?;
    // The input is on the members' media before the clock starts.
    for m in array.members() {
        m.device.flush().context("flush a member")?;
    }
    let host = host_sort(data)?;
    let mut sorts = Vec::new();
    for &topology in topologies {
        sorts.push(wall_sort(&array, topology, n)?);
        if array.get_bytes("/out")? != host.expect {
            bail!("the array's {topology:?} sort differs from the host's par_sort_unstable");
        }
    }
    array.close()?;
    drop(tmp);
    let best = sorts.iter().map(|s| s.wall_ns).min().unwrap_or(0);
    let best_cpu = sorts.iter().map(|s| s.cpu_ns).min().unwrap_or(0);
    Ok(Wall {
        size_bytes: size,
        members: n,
        dir: dir
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| std::env::temp_dir().display().to_string()),
        sorts,
        host_par_sort_unstable_ns: host.wall_ns,
        ratio: best as f64 / host.wall_ns as f64,
        host_cpu_ns: host.cpu_ns,
        cpu_ratio: best_cpu as f64 / host.cpu_ns.max(1) as f64,
        outputs_equal: true,
    })
}

/// One timed instant sort of `/in` into `/out` on the `n` members of `array`.
fn wall_sort(array: &Array, topology: Topology, n: usize) -> anyhow::Result<WallSort> {
    // The usage when the last part is sorted: the sort phase's end.
    let sorted = std::sync::atomic::AtomicUsize::new(0);
    let at_sorted = std::sync::Mutex::new(None);
    let u0 = Usage::now()?;
    let r = sort(
        array,
        "/in",
        &SortOptions {
            mode: SortMode::Instant,
            topology,
            output: Some("/out".into()),
        },
        &|e| {
            if matches!(e, SortEvent::Sorted { .. })
                && sorted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n
            {
                *at_sorted.lock().unwrap_or_else(|p| p.into_inner()) = Usage::now().ok();
            }
        },
    )?;
    let used = Usage::now()?.since(&u0);
    let sort_phase = at_sorted
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .map(|u| u.since(&u0))
        .unwrap_or_default();
    Ok(WallSort {
        topology,
        wall_ns: r.total_wall_ns,
        cpu_ns: used.cpu_ns(),
        user_ns: used.user_ns,
        sys_ns: used.sys_ns,
        minor_faults: used.minor_faults,
        sort_phase,
        phases: WallPhases {
            sort_ns: r.sort_wall_ns,
            merge_ns: r.merge_wall_ns,
            output_write_ns: r.output_wall_ns,
        },
    })
}

pub fn run(args: ArrayBenchArgs) -> anyhow::Result<u8> {
    for &n in &args.disks {
        if !(1..=csx_array::tag::MEMBERS_MAX).contains(&n) {
            bail!("--disks {n}: between 1 and {}", csx_array::tag::MEMBERS_MAX);
        }
    }
    let sizes: Vec<u64> = (0..)
        .map(|i| (32u64 << 10) << i)
        .take_while(|&s| s <= args.max_size)
        .collect();
    let mut rows = Vec::new();
    for &n in &args.disks {
        for &size in &sizes {
            grid_rows(&args, n, size, &mut rows)?;
        }
    }
    let thesis = thesis_rows(&rows);
    let wall = args
        .wall
        .map(|size| wall(size, args.wall_dir.as_deref(), &wall_topologies(&args)))
        .transpose()?;
    let model = SortModel::thesis(0);
    if args.json {
        println!(
            "{:#}",
            serde_json::json!({ "model": model, "latency_us": args.latency_us, "rows": rows,
                                "thesis": thesis, "wall": wall })
        );
    } else {
        print_tables(&rows, &thesis, wall.as_ref(), &args.disks, &sizes);
    }
    if let Some(dir) = &args.plots {
        write_plots(dir, &rows, &thesis)?;
        if !args.json {
            println!("plots written to {}", dir.display());
        }
    }
    Ok(exit::SUCCESS)
}

/// The grid's rows of `n` members and `size` bytes, one per link speed: priced from
/// real sorts' logs up to `--real-max`, from the plan above.
fn grid_rows(
    args: &ArrayBenchArgs,
    n: usize,
    size: u64,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let (source, logs) = if size <= args.real_max {
        if !args.json {
            eprintln!("bench array: sorting {size} bytes on {n} members (3 ways)");
        }
        ("run", real_logs(n, size)?)
    } else {
        let chain = plan(&even_parts(size, n), Topology::Chain);
        let tree = plan(&even_parts(size, n), Topology::Tree);
        ("plan", [chain.clone(), chain, tree])
    };
    for (link, bits) in LINKS {
        let mut model = SortModel::thesis(bits / 8);
        model.link = model.link.clone().with_latency(args.latency_us * 1000);
        let host_chain = price(&logs[0], SortMode::Host, &model);
        let instant_chain = price(&logs[1], SortMode::Instant, &model);
        let instant_tree = price(&logs[2], SortMode::Instant, &model);
        rows.push(Row {
            disks: n,
            size_bytes: size,
            source,
            link,
            link_bits_per_sec: bits,
            gain_pct: gain(&host_chain, &instant_chain),
            tree_gain_pct: gain(&host_chain, &instant_tree),
            host_chain,
            instant_chain,
            instant_tree,
        });
    }
    Ok(())
}

/// The thesis's 512 MB gains (Fig. 5.4) beside the grid's, where the grid has them.
fn thesis_rows(rows: &[Row]) -> Vec<ThesisRow> {
    THESIS_GAINS
        .iter()
        .filter_map(|&(disks, gbps, t)| {
            let r = find_row(rows, disks, 512 << 20, gbps * 1_000_000_000)?;
            Some(ThesisRow {
                disks,
                link_gbit_per_sec: gbps,
                thesis_gain_pct: t,
                modelled_gain_pct: r.gain_pct,
                difference_pp: r.gain_pct - t,
            })
        })
        .collect()
}

/// The grid's row of `disks` members, `size` bytes and a link of `bits` per second.
fn find_row(rows: &[Row], disks: usize, size: u64, bits: u64) -> Option<&Row> {
    rows.iter()
        .find(|r| r.disks == disks && r.size_bytes == size && r.link_bits_per_sec == bits)
}

fn wall_topologies(args: &ArrayBenchArgs) -> Vec<Topology> {
    args.wall_topology
        .iter()
        .map(|t| match t.as_str() {
            "chain" => Topology::Chain,
            "tree" => Topology::Tree,
            _ => Topology::Multiway,
        })
        .collect()
}

fn size_label(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{}MB", b >> 20)
    } else {
        format!("{}KB", b >> 10)
    }
}

fn print_tables(
    rows: &[Row],
    thesis: &[ThesisRow],
    wall: Option<&Wall>,
    disks: &[usize],
    sizes: &[u64],
) {
    println!("INSTANT (chain) gain over the host-mediated baseline, % of modelled time");
    for &n in disks {
        print_gain_table(rows, n, sizes);
    }
    if !thesis.is_empty() {
        print_thesis(thesis);
    }
    let largest = sizes.last().copied().unwrap_or(0);
    for r in rows
        .iter()
        .filter(|r| r.size_bytes == largest && r.link_bits_per_sec == 1_000_000_000)
    {
        println!(
            "tree merge, {} disks, {} at 1 Gbit/s: {:.2}% faster than the baseline (chain: {:.2}%)",
            r.disks,
            size_label(r.size_bytes),
            r.tree_gain_pct,
            r.gain_pct
        );
    }
    if let Some(w) = wall {
        print_wall(w);
    }
}

/// The chain gain of `n` members: one line per size, one column per link.
fn print_gain_table(rows: &[Row], n: usize, sizes: &[u64]) {
    println!(
        "\n{n} disks     {}",
        LINKS
            .map(|l| format!("{:>10}", l.0.replace(" ", "")))
            .join("")
    );
    for &size in sizes {
        let cells: String = LINKS
            .iter()
            .map(|(_, bits)| {
                find_row(rows, n, size, *bits).map_or_else(
                    || format!("{:>10}", "-"),
                    |r| format!("{:>10.2}", r.gain_pct),
                )
            })
            .collect();
        let src = rows
            .iter()
            .find(|r| r.disks == n && r.size_bytes == size)
            .map_or("", |r| r.source);
        println!("{:>7} {:>4} {cells}", size_label(size), src);
    }
}

fn print_thesis(thesis: &[ThesisRow]) {
    println!("\n512 MB merge sort, gain of INSTANT over OAS (thesis Fig. 5.4) vs modelled:");
    println!(
        "{:>6} {:>10} {:>9} {:>9} {:>8}",
        "disks", "link", "thesis", "modelled", "diff pp"
    );
    for t in thesis {
        println!(
            "{:>6} {:>6}Gbps {:>8.2}% {:>8.2}% {:>+8.2}",
            t.disks, t.link_gbit_per_sec, t.thesis_gain_pct, t.modelled_gain_pct, t.difference_pp
        );
    }
}

fn print_wall(w: &Wall) {
    println!(
        "\nwall: {} on {} embedded members in {}: host par_sort_unstable {:.3} s (cpu {:.3} s); best ratio {:.2} (cpu {:.2})",
        size_label(w.size_bytes),
        w.members,
        w.dir,
        w.host_par_sort_unstable_ns as f64 / 1e9,
        w.host_cpu_ns as f64 / 1e9,
        w.ratio,
        w.cpu_ratio
    );
    for r in &w.sorts {
        let p = &r.phases;
        println!(
            "  instant {:?}: {:.3} s (cpu {:.3} s): sort phase {:.3} s (staging included), merge phase {:.3} s (output write and flush {:.3} s)",
            r.topology,
            r.wall_ns as f64 / 1e9,
            r.cpu_ns as f64 / 1e9,
            p.sort_ns as f64 / 1e9,
            p.merge_ns as f64 / 1e9,
            p.output_write_ns as f64 / 1e9
        );
        println!(
            "    cpu: user {:.3} s, system {:.3} s, {} minor faults; of it the sort phase: user {:.3} s, system {:.3} s, {} minor faults",
            r.user_ns as f64 / 1e9,
            r.sys_ns as f64 / 1e9,
            r.minor_faults,
            r.sort_phase.user_ns as f64 / 1e9,
            r.sort_phase.sys_ns as f64 / 1e9,
            r.sort_phase.minor_faults
        );
    }
}

fn write_plots(dir: &Path, rows: &[Row], thesis: &[ThesisRow]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, chart: BarChart| -> anyhow::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, chart.to_svg()).with_context(|| format!("writing {}", path.display()))
    };
    if !thesis.is_empty() {
        write("array-thesis.svg", thesis_chart(thesis))?;
    }
    let largest = rows.iter().map(|r| r.size_bytes).max().unwrap_or(0);
    let disks: Vec<usize> = {
        let mut d: Vec<usize> = rows.iter().map(|r| r.disks).collect();
        d.dedup();
        d
    };
    write(
        "array-gain-by-link.svg",
        gain_by_link_chart(rows, &disks, largest),
    )?;
    let first = disks.first().copied().unwrap_or(2);
    write(
        "array-merge-split.svg",
        merge_split_chart(rows, first, largest),
    )?;
    write("array-gain-by-size.svg", gain_by_size_chart(rows, &disks))?;
    Ok(())
}

fn thesis_chart(thesis: &[ThesisRow]) -> BarChart {
    BarChart {
        title: "512 MB merge sort: INSTANT gain over OAS, thesis vs modelled".into(),
        y_label: "gain (%)".into(),
        groups: thesis
            .iter()
            .map(|t| {
                (
                    format!("{} disks, {} Gbit/s", t.disks, t.link_gbit_per_sec),
                    vec![
                        ("thesis (Fig. 5.4)".to_string(), t.thesis_gain_pct),
                        ("csx model".to_string(), t.modelled_gain_pct),
                    ],
                )
            })
            .collect(),
        stacked: false,
        log: false,
    }
}

/// The chain gain of each member count in `disks` at `size` bytes and `bits` per second.
fn gains_by_disks(rows: &[Row], disks: &[usize], size: u64, bits: u64) -> Vec<(String, f64)> {
    disks
        .iter()
        .filter_map(|&n| find_row(rows, n, size, bits).map(|r| (format!("{n} disks"), r.gain_pct)))
        .collect()
}

fn gain_by_link_chart(rows: &[Row], disks: &[usize], largest: u64) -> BarChart {
    BarChart {
        title: format!(
            "{}: INSTANT chain gain over the baseline by link",
            size_label(largest)
        ),
        y_label: "gain (%)".into(),
        groups: LINKS
            .iter()
            .map(|(label, bits)| {
                (
                    label.to_string(),
                    gains_by_disks(rows, disks, largest, *bits),
                )
            })
            .collect(),
        stacked: false,
        log: false,
    }
}

fn merge_split_chart(rows: &[Row], first: usize, largest: u64) -> BarChart {
    BarChart {
        title: format!(
            "{}, {first} disks, INSTANT: merge phase split (thesis Fig. 5.3)",
            size_label(largest)
        ),
        y_label: "modelled ms".into(),
        groups: LINKS
            .iter()
            .filter_map(|(label, bits)| {
                let m = &find_row(rows, first, largest, *bits)?.instant_chain;
                Some((
                    label.to_string(),
                    vec![
                        (
                            "device-to-device transfer".to_string(),
                            m.transfer_ns as f64 / 1e6,
                        ),
                        (
                            "merge execution".to_string(),
                            (m.merge_ns - m.transfer_ns) as f64 / 1e6,
                        ),
                    ],
                ))
            })
            .collect(),
        stacked: true,
        log: false,
    }
}

fn gain_by_size_chart(rows: &[Row], disks: &[usize]) -> BarChart {
    let mut sizes: Vec<u64> = rows.iter().map(|r| r.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    BarChart {
        title: "INSTANT chain gain over the baseline by size, 1 Gbit/s".into(),
        y_label: "gain (%)".into(),
        groups: sizes
            .iter()
            .map(|&s| (size_label(s), gains_by_disks(rows, disks, s, 1_000_000_000)))
            .collect(),
        stacked: false,
        log: false,
    }
}
