//! `csx array ...` and the array side of `put`, `get`, `ls`, `stat` and `rm`: several
//! devices as one (csx-array).
//!
//! An array is named `array:DIR` (or just DIR when it holds `array.json`) wherever a
//! device URI goes: `csx --device array:./arr put big.bin /big --stripe 1MiB`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use csx_array::link::parse_bandwidth;
use csx_array::{Array, FileEntry, Layout, LinkModel, Placement};
use csx_host::transport::inproc::DeviceConfig;
use serde_json::json;

use crate::connect::{format_size, parse_size};
use crate::exit;
use crate::files::{report_transfer, ProgressLine};

const ARRAY_EXAMPLES: &str = "\
Examples:
  csx array init --state ./arr --members 4 --nvm-size 4GiB
  csx array init --state ./arr2 --member tcp://127.0.0.1:4420 --member tcp://127.0.0.1:4421
  csx array init --state ./arr --members 2 --link-bandwidth 1Gbps
  csx array init --state ./arr --members 2 --profile daisy --link-bandwidth 10Gbps
  csx put nums.bin /nums --stripe 1MiB --device array:./arr
  csx stat /nums --device array:./arr          # extents as tagged block addresses
  csx array info --device array:./arr --json";

/// Arrays of devices: one namespace, one tagged block address space (SCANCOMS/INSTANT).
#[derive(Debug, Args)]
#[command(after_help = ARRAY_EXAMPLES)]
pub struct ArrayArgs {
    #[command(subcommand)]
    command: ArrayCommand,
}

#[derive(Debug, Subcommand)]
enum ArrayCommand {
    Init(InitArgs),
    Info(InfoArgs),
    Sort(SortArgs),
}

/// Create an array: N new embedded members in DIR/m0, DIR/m1, ..., or existing devices.
///
/// The array's description (members, links) and its catalog of files live in DIR. Use it
/// afterwards as `--device array:DIR`: `put` places a file on one member or stripes it
/// (`--stripe`), `stat` shows its extents as tagged block addresses (disk in the upper 9
/// bits, 512-byte sectors), `csx array sort` sorts across members.
#[derive(Debug, Args)]
#[command(after_help = ARRAY_EXAMPLES)]
pub struct InitArgs {
    /// The array's directory (it must not hold an array).
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    /// Create this many embedded members (1 to 512).
    #[arg(long, value_name = "N", conflicts_with = "member")]
    members: Option<usize>,
    /// An existing device as a member (tcp://HOST:PORT, shm://NAME or a state
    /// directory); repeat, in tag order.
    #[arg(long, value_name = "URI")]
    member: Vec<String>,
    /// NVM namespace of each embedded member (sparse).
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_size)]
    nvm_size: u64,
    /// Device memory (SLM) of each embedded member.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    slm_size: u64,
    /// Execution engines of each embedded member; one per core if absent.
    #[arg(long, value_name = "N")]
    engines: Option<u32>,
    /// Take the modelled links from this device profile (unthrottled, lambda-io,
    /// daisy): the host link from its host link, the members' links from its
    /// device-to-device link. Without it: unlimited links, 10 µs per command.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Override: modelled bandwidth of every link (host and members), e.g. 1Gbps,
    /// 20Mbps, 3GB/s, unlimited.
    #[arg(long, value_name = "RATE")]
    link_bandwidth: Option<String>,
    /// Override: modelled fixed cost of one command on a link (host or D2D), µs.
    #[arg(long, value_name = "US")]
    link_latency_us: Option<u64>,
    #[arg(
        long,
        hide = true,
        value_name = "US",
        conflicts_with = "link_latency_us"
    )]
    command_latency_us: Option<u64>,
    /// Print the description as JSON.
    #[arg(long)]
    json: bool,
}

/// Show an array's members, links and files.
#[derive(Debug, Args)]
#[command(after_help = ARRAY_EXAMPLES)]
pub struct InfoArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    #[arg(long, hide = true, value_name = "DIR")]
    state: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: ArrayArgs) -> anyhow::Result<u8> {
    match args.command {
        ArrayCommand::Init(a) => run_init(a),
        ArrayCommand::Info(a) => run_info(a),
        ArrayCommand::Sort(a) => {
            let g = a.dev.global();
            run_sort(a, &g)
        }
    }
}

fn run_init(a: InitArgs) -> anyhow::Result<u8> {
    let mut link = match &a.profile {
        Some(name) => LinkModel::from_perf(&csx_device::perf::PerfModel::profile(name)?),
        None => LinkModel::uniform(0),
    };
    if let Some(rate) = &a.link_bandwidth {
        let b = parse_bandwidth(rate)?;
        link.host_bytes_per_sec = b;
        link.member_bytes_per_sec = b;
    }
    if a.command_latency_us.is_some() {
        eprintln!("csx: --command-latency-us is deprecated; use --link-latency-us");
    }
    if let Some(us) = a.link_latency_us.or(a.command_latency_us) {
        link = link.with_latency(us.saturating_mul(1000));
    }
    let array = match a.members {
        Some(n) => {
            let config = DeviceConfig {
                nvm_size_bytes: a.nvm_size,
                slm_size_bytes: a.slm_size,
                engines: a.engines,
                ..crate::connect::default_config()
            };
            Array::init_embedded(&a.state, n, config, link)?
        }
        None if a.member.is_empty() => bail!("give --members N or at least one --member URI"),
        None => Array::init_members(&a.state, &a.member, link)?,
    };
    print_info(&array, a.json);
    array.close()?;
    Ok(exit::SUCCESS)
}

fn run_info(a: InfoArgs) -> anyhow::Result<u8> {
    let dir = match (&a.state, crate::connect::array_dir(&a.dev.global())) {
        (Some(dir), _) => {
            eprintln!("csx: array info --state is deprecated; use --device array:DIR");
            dir.clone()
        }
        (None, Some(dir)) => dir,
        (None, None) => bail!("name the array with --device array:DIR"),
    };
    let array = Array::open(&dir)?;
    print_info(&array, a.json);
    array.close()?;
    Ok(exit::SUCCESS)
}

fn print_info(array: &Array, as_json: bool) {
    let d = array.desc();
    let files = array.list("/");
    if as_json {
        let members: Vec<_> = array
            .members()
            .iter()
            .map(|m| json!({ "tag": m.index, "uri": m.uri, "nvm_size_bytes": m.nvm_size_bytes }))
            .collect();
        println!(
            "{}",
            crate::output::Json(
                json!({ "dir": array.dir(), "id": d.id, "members": members, "link": d.link, "files": files.len() })
            )
        );
        return;
    }
    println!("array    {} (id {})", array.dir().display(), d.id);
    for m in array.members() {
        println!(
            "member {:>3}  {}  nvm {}",
            m.index,
            m.uri,
            format_size(m.nvm_size_bytes)
        );
    }
    let bw = |b: u64| {
        if b == 0 {
            "unlimited".to_string()
        } else {
            format!("{:.3} Gbit/s", b as f64 * 8.0 / 1e9)
        }
    };
    println!(
        "links    host {}, members {}, {} µs per command",
        bw(d.link.host_bytes_per_sec),
        bw(d.link.member_bytes_per_sec),
        d.link.command_latency_ns / 1000
    );
    println!("files    {}", files.len());
}

/// Opens the array in `dir` for a file command.
fn open(dir: &Path) -> anyhow::Result<Array> {
    Array::open(dir).with_context(|| format!("cannot open array {}", dir.display()))
}

fn placement(stripe: Option<u64>, member: Option<u16>) -> Placement {
    match (stripe, member) {
        (Some(s), _) => Placement::Striped { stripe_bytes: s },
        (None, Some(m)) => Placement::Member(m),
        (None, None) => Placement::Auto,
    }
}

fn layout_text(e: &FileEntry) -> String {
    match &e.layout {
        Layout::Single { member } => format!("member {member}"),
        Layout::Striped {
            stripe_bytes,
            members,
        } => format!(
            "striped {} over {} members",
            format_size(*stripe_bytes),
            members.len()
        ),
    }
}

pub fn put(
    dir: &Path,
    local: &Path,
    devpath: &str,
    stripe: Option<u64>,
    member: Option<u16>,
    as_json: bool,
) -> anyhow::Result<u8> {
    let array = open(dir)?;
    let started = Instant::now();
    let mut line = ProgressLine::new(format!("put {devpath}"));
    let entry = array
        .put_file(local, devpath, placement(stripe, member), &mut |p| {
            line.update(p)
        })
        .with_context(|| format!("cannot put {} to {devpath}", local.display()));
    line.finish();
    let entry = entry?;
    array.close()?;
    report_transfer(as_json, "put", devpath, entry.size_bytes, started);
    Ok(exit::SUCCESS)
}

pub fn get(dir: &Path, devpath: &str, local: &Path, as_json: bool) -> anyhow::Result<u8> {
    let array = open(dir)?;
    let started = Instant::now();
    let mut line = ProgressLine::new(format!("get {devpath}"));
    let bytes = array
        .get_file(devpath, local, &mut |p| line.update(p))
        .with_context(|| format!("cannot get {devpath} to {}", local.display()));
    line.finish();
    let bytes = bytes?;
    array.close()?;
    report_transfer(as_json, "got", devpath, bytes, started);
    Ok(exit::SUCCESS)
}

pub fn ls(dir: &Path, under: &str, as_json: bool) -> anyhow::Result<u8> {
    let array = open(dir)?;
    let files = array.list(under);
    if as_json {
        let rows: Vec<_> = files
            .iter()
            .map(|(p, e)| json!({ "path": p, "size_bytes": e.size_bytes, "layout": e.layout }))
            .collect();
        println!("{}", crate::output::Json(serde_json::Value::Array(rows)));
    } else {
        for (p, e) in &files {
            println!("{:>14}  {p}  ({})", e.size_bytes, layout_text(e));
        }
    }
    array.close()?;
    Ok(exit::SUCCESS)
}

pub fn stat(dir: &Path, devpath: &str, as_json: bool) -> anyhow::Result<u8> {
    let array = open(dir)?;
    let map = array
        .map(devpath)
        .with_context(|| format!("cannot stat {devpath}"))?;
    if as_json {
        let extents: Vec<_> = map
            .extents
            .iter()
            .map(|e| {
                json!({ "file_offset": e.file_offset, "len": e.len, "member": e.member,
                        "tagged_addr": e.addr.0, "sector": e.addr.sector() })
            })
            .collect();
        println!(
            "{}",
            crate::output::Json(
                json!({ "path": map.path, "size_bytes": map.entry.size_bytes, "layout": map.entry.layout,
                    "extents": extents, "extents_truncated": map.truncated })
            )
        );
    } else {
        println!("path     {}", map.path);
        println!(
            "size     {} bytes ({})",
            map.entry.size_bytes,
            format_size(map.entry.size_bytes)
        );
        println!("layout   {}", layout_text(&map.entry));
        println!(
            "extents  {} (tagged block addresses: disk << 55 | 512-byte sector)",
            map.extents.len()
        );
        println!(
            "  {:>14} {:>12} {:>6} {:>20}",
            "file offset", "bytes", "disk", "tagged address"
        );
        for e in &map.extents {
            println!(
                "  {:>14} {:>12} {:>6} {:>20}",
                e.file_offset, e.len, e.member, e.addr
            );
        }
    }
    array.close()?;
    Ok(exit::SUCCESS)
}

/// Flushes every member of the array.
pub fn sync(dir: &Path) -> anyhow::Result<()> {
    let array = open(dir)?;
    array.flush().context("cannot flush the array")?;
    array.close()?;
    Ok(())
}

pub fn rm(dir: &Path, devpath: &str) -> anyhow::Result<u8> {
    let array = open(dir)?;
    array
        .delete(devpath)
        .with_context(|| format!("cannot delete {devpath}"))?;
    array.close()?;
    Ok(exit::SUCCESS)
}

/// Sort an array file of keys across the array's members (distributed merge sort).
///
/// Each member holding part of the file sorts its part on the device; the parts then
/// merge device to device (`--mode instant`, INSTANT's method: a chain onto one member,
/// `--topology tree`, pairwise rounds, or `--topology multiway`, one multiway pass in
/// which every member merges its own slice of the output from all runs and writes it
/// while merging the next chunk: the output is then striped, one stripe per member) or
/// through the host (`--mode host`, the Intel
/// OAS baseline: each run read to the host and written to the merging member). Block
/// locks order the merges after the sorts they need. The output is written to a fresh
/// file and named only on success, so a failure leaves the input and any old output as
/// they were. Both modes give byte-identical output.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  csx gen u64 --size 64MiB -o nums.bin
  csx put nums.bin /nums --stripe 1MiB --device array:./arr
  csx array sort /nums --to /nums.sorted --device array:./arr
  csx array sort /nums --to /nums.host --mode host --json --device array:./arr
  csx array sort /nums --to /nums.fast --topology multiway --device array:./arr")]
pub struct SortArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The array file to sort.
    devpath: String,
    /// The key type: little-endian u64 (the only one so far).
    #[arg(long, value_name = "TYPE", default_value = "u64", value_parser = ["u64"])]
    key: String,
    /// The device path the sorted file goes to; default: replace the input (atomically).
    #[arg(long, value_name = "DEVPATH")]
    to: Option<String>,
    #[arg(long, hide = true, value_name = "DEVPATH", conflicts_with = "to")]
    output: Option<String>,
    /// instant: runs move device to device; host: through the host (the baseline).
    #[arg(long, value_name = "MODE", default_value = "instant", value_parser = ["instant", "host"])]
    mode: String,
    /// chain: one member merges every run in turn (the thesis); tree: pairwise rounds;
    /// multiway: one pass, each member merging its slice of the output from every run.
    #[arg(long, value_name = "T", default_value = "chain", value_parser = ["chain", "tree", "multiway"])]
    topology: String,
    /// Print the report (times, link bytes, the sub-operations' order) as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run_sort(args: SortArgs, global: &crate::GlobalArgs) -> anyhow::Result<u8> {
    use std::io::IsTerminal as _;
    let Some(dir) = crate::connect::array_dir(global) else {
        bail!(
            "csx array sort works on arrays: give --device array:DIR (create one with `csx array init`)"
        );
    };
    let array = open(&dir)?;
    let options = sort_options(&args);
    let show = std::io::stderr().is_terminal() && !args.json;
    let report = csx_array::sort(&array, &args.devpath, &options, &|e| {
        if show {
            eprintln!("sort: {e:?}");
        }
    })
    .with_context(|| format!("cannot sort {}", args.devpath))?;
    // The modelled time at the array's links, with the thesis calibration's rates.
    let model = csx_array::model::SortModel {
        link: array.link_model().clone(),
        ..csx_array::model::SortModel::thesis(0)
    };
    let modelled = csx_array::model::price(&report.events, report.mode, &model);
    array.close()?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["modelled"] = serde_json::to_value(modelled)?;
        println!("{v:#}");
    } else {
        print_sort(&report, &modelled);
    }
    Ok(exit::SUCCESS)
}

/// The sort's options from the command line (the old `--output` with its note).
fn sort_options(args: &SortArgs) -> csx_array::SortOptions {
    csx_array::SortOptions {
        mode: if args.mode == "host" {
            csx_array::SortMode::Host
        } else {
            csx_array::SortMode::Instant
        },
        topology: match args.topology.as_str() {
            "tree" => csx_array::Topology::Tree,
            "multiway" => csx_array::Topology::Multiway,
            _ => csx_array::Topology::Chain,
        },
        output: match (&args.to, &args.output) {
            (None, Some(old)) => {
                eprintln!("csx: array sort --output is deprecated; use --to DEVPATH");
                Some(old.clone())
            }
            (to, _) => to.clone(),
        },
    }
}

/// The sort's report for people: what went where, wall and modelled time, link bytes.
fn print_sort(report: &csx_array::SortReport, modelled: &csx_array::model::ModelledSort) {
    let l = &report.links;
    println!(
        "sorted {} ({} keys, {}) into {} on {}: {:?}/{:?}",
        report.input,
        report.keys,
        format_size(report.bytes),
        report.output,
        match &report.output_layout {
            Layout::Single { member } => format!("member {member}"),
            Layout::Striped {
                stripe_bytes,
                members,
            } => format!(
                "members {members:?} ({} stripes)",
                format_size(*stripe_bytes)
            ),
        },
        report.mode,
        report.topology
    );
    println!(
        "wall     {:.3} s (sorts {:.3} s, merges after them {:.3} s)",
        report.total_wall_ns as f64 / 1e9,
        report.sort_wall_ns as f64 / 1e9,
        report.merge_wall_ns as f64 / 1e9
    );
    println!(
        "modelled {:.6} s at the array's links (sorts {:.6} s, merges {:.6} s of which transfers {:.6} s, read back {:.6} s; thesis-calibrated rates)",
        modelled.total_ns as f64 / 1e9,
        modelled.sort_ns as f64 / 1e9,
        modelled.merge_ns as f64 / 1e9,
        modelled.transfer_ns as f64 / 1e9,
        modelled.read_back_ns as f64 / 1e9
    );
    println!(
        "links    device to device {} in {} copies; through the host {} in {} copies (host link in {}, out {})",
        format_size(l.d2d_bytes),
        l.d2d_copies,
        format_size(l.host_copy_bytes),
        l.host_copies,
        format_size(l.host.ingress),
        format_size(l.host.egress)
    );
}

/// The member `csx exec` runs on for an array: the one holding `input` (which must not
/// be striped), or member 0 without an input; and the input's member-side path.
pub fn exec_member(
    dir: &Path,
    input: Option<&str>,
) -> anyhow::Result<(csx_host::Device, Option<String>)> {
    let array = open(dir)?;
    let Some(path) = input else {
        return Ok((array.into_member(0)?, None));
    };
    let entry = array
        .stat(path)
        .with_context(|| format!("cannot stat {path}"))?;
    match entry.layout {
        Layout::Single { member } => {
            let mpath = array.member_path(entry.id);
            Ok((array.into_member(member)?, Some(mpath)))
        }
        Layout::Striped { members, .. } => bail!(
            "{path} is striped over {} members and a program runs on one: put it with --member TAG",
            members.len()
        ),
    }
}

/// `csx lambda read` on an array (`csx_array::lambda::read_lambda`): the members
/// holding the file run the requests over their own bytes, at once; the outputs are
/// written in file order.
pub fn read_lambda(dir: &Path, args: &crate::lambda_cmd::ReadArgs) -> anyhow::Result<u8> {
    let spec = &args.spec;
    if spec.state_dir.is_some() || spec.state_dir_old.is_some() {
        bail!("--state-dir names one device's state; an array's members are found by the array");
    }
    let array = open(dir)?;
    // Ctrl-C stops every member's runs (device runs get an Abort); the λ is still
    // unloaded from every member.
    let interrupt = crate::interrupt::Interrupt::install()?;
    let started = Instant::now();
    let report = run_lambda(&array, args, &interrupt);
    if let Err(e) = &report {
        if let Some(csx_array::ArrayError::Aborted { members, .. }) = e.downcast_ref() {
            eprintln!("csx read: interrupted: the λ runs in flight were aborted (members {members:?}); the λ is unloaded from every member");
            let _ = array.close();
            return Ok(exit::INTERRUPTED);
        }
    }
    let report = report?;
    let wall_ns = started.elapsed().as_nanos() as u64;
    let accounts = member_accounts(&array, &report, args.threads)?;
    array.close()?;
    if spec.json {
        print_lambda_json(&report, &accounts, wall_ns);
    } else {
        print_lambda_text(&args.devpath, &report, &accounts, wall_ns);
    }
    Ok(exit::SUCCESS)
}

/// The options of an array λ-read from the command line.
fn lambda_options(
    args: &crate::lambda_cmd::ReadArgs,
    interrupt: &crate::interrupt::Interrupt,
) -> csx_array::lambda::ArrayLambdaOptions {
    let spec = &args.spec;
    csx_array::lambda::ArrayLambdaOptions {
        stop: interrupt.flag(),
        chunk: spec.chunk,
        mode: spec.mode,
        record: spec.record,
        threads: args.threads,
        lambda: csx_lambda::LambdaOptions {
            cache_budget_bytes: spec
                .cache_budget
                .unwrap_or(csx_lambda::CACHE_BUDGET_DEFAULT),
            period: spec.period,
            profile_len: spec.profile_len,
            ..csx_lambda::LambdaOptions::default()
        },
    }
}

/// Runs the λ over the array file, writing the outputs in file order to `--output`
/// (with progress, and a line per request with --trace).
fn run_lambda(
    array: &csx_array::Array,
    args: &crate::lambda_cmd::ReadArgs,
    interrupt: &crate::interrupt::Interrupt,
) -> anyhow::Result<csx_array::lambda::ArrayLambdaReport> {
    use std::io::Write as _;
    let spec = &args.spec;
    let (name, object) = crate::lambda_cmd::lambda_object(&spec.prog)?;
    let base = crate::lambda_cmd::base_args(spec)?;
    let opts = lambda_options(args, interrupt);
    let mut sink = match &args.output {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let size = array.stat(&args.devpath)?.size_bytes;
    let mut line = ProgressLine::new(format!("read {}", args.devpath));
    let trace = spec.trace;
    let image = csx_array::lambda::LambdaImage {
        name: &name,
        image: &object,
        entry: spec.entry.as_deref(),
    };
    let report =
        csx_array::lambda::read_lambda(array, &args.devpath, image, &base, &opts, &mut |r, out| {
            if trace {
                eprintln!(
                    "request {} at {}: member {} at {}, {} bytes, ran {:?}, modelled {} ns",
                    r.index,
                    r.file_offset,
                    r.member,
                    r.member_offset,
                    r.len,
                    out.ran,
                    out.modelled_ns()
                );
            }
            if let Some(s) = &mut sink {
                s.write_all(&out.output).map_err(|e| {
                    csx_array::ArrayError::Other(format!("cannot write the output: {e}"))
                })?;
            }
            line.update(csx_host::Progress {
                done_bytes: r.file_offset + r.len,
                total_bytes: size,
            });
            Ok(())
        });
    line.finish();
    let report = match report {
        Err(e @ csx_array::ArrayError::Aborted { .. }) => return Err(e.into()),
        r => r.with_context(|| format!("λ-read of {}", args.devpath))?,
    };
    if let Some(s) = &mut sink {
        s.flush()?;
    }
    Ok(report)
}

/// Each member's account with its modelled ns; their sum; the run's modelled ns (the
/// members run at once: the slowest member's).
struct Accounts {
    rows: Vec<(u16, csx_lambda::RunAccount, u64)>,
    total: csx_lambda::RunAccount,
    modelled_ns: u64,
}

fn member_accounts(
    array: &csx_array::Array,
    report: &csx_array::lambda::ArrayLambdaReport,
    threads: u32,
) -> anyhow::Result<Accounts> {
    let mut acc = Accounts {
        rows: Vec::new(),
        total: csx_lambda::RunAccount::default(),
        modelled_ns: 0,
    };
    for (m, a) in &report.members {
        let engines = array.members()[usize::from(*m)]
            .device
            .identify()
            .map_err(array.member_error(*m, "identify"))?
            .engines
            .max(1);
        let ns = a.modelled_ns(threads, engines);
        acc.modelled_ns = acc.modelled_ns.max(ns);
        acc.total += *a;
        acc.rows.push((*m, *a, ns));
    }
    Ok(acc)
}

fn print_lambda_json(report: &csx_array::lambda::ArrayLambdaReport, acc: &Accounts, wall_ns: u64) {
    let mut v =
        crate::lambda_cmd::account_json(&acc.total, wall_ns, acc.modelled_ns, report.output_bytes);
    v["requests"] = json!(report.requests);
    v["members"] = acc
        .rows
        .iter()
        .map(|(m, a, ns)| {
            json!({ "member": m, "requests_host": a.requests_host,
                    "requests_device": a.requests_device,
                    "requests_profiled": a.requests_profiled,
                    "input_bytes": a.input_bytes, "link_bytes": a.link_bytes,
                    "modelled_ns": ns })
        })
        .collect();
    println!("{}", crate::output::Json(&v));
}

fn print_lambda_text(
    devpath: &str,
    report: &csx_array::lambda::ArrayLambdaReport,
    acc: &Accounts,
    wall_ns: u64,
) {
    println!(
        "λ-read {} ({}) over {} members in {} requests",
        devpath,
        format_size(report.input_bytes),
        acc.rows.len(),
        report.requests
    );
    for (m, a, ns) in &acc.rows {
        println!(
            "  member {m}: {} host, {} device, {} profiled; {} in, {} over its link; modelled {:.3} ms",
            a.requests_host,
            a.requests_device,
            a.requests_profiled,
            format_size(a.input_bytes),
            format_size(a.link_bytes),
            *ns as f64 / 1e6
        );
    }
    println!(
        "bytes: {} in, {} out",
        report.input_bytes, report.output_bytes
    );
    println!(
        "time: wall {:.3} ms, modelled {:.3} ms (the slowest member's)",
        wall_ns as f64 / 1e6,
        acc.modelled_ns as f64 / 1e6
    );
}
