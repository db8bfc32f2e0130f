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
  csx --device array:./arr put nums.bin /nums --stripe 1MiB
  csx --device array:./arr stat /nums          # extents as tagged block addresses
  csx array info --state ./arr --json";

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
}

/// Create an array: N new embedded members in DIR/m0, DIR/m1, ..., or existing devices.
///
/// The array's description (members, links) and its catalog of files live in DIR. Use it
/// afterwards as `--device array:DIR`: `put` places a file on one member or stripes it
/// (`--stripe`), `stat` shows its extents as tagged block addresses (disk in the upper 9
/// bits, 512-byte sectors), `csx sort` sorts across members.
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
    /// Modelled bandwidth of every link (host and members), e.g. 1Gbps, 20Mbps,
    /// 3GB/s, unlimited.
    #[arg(long, value_name = "RATE", default_value = "unlimited")]
    link_bandwidth: String,
    /// Modelled fixed cost of one command on a link, µs.
    #[arg(long, value_name = "US", default_value_t = 10)]
    command_latency_us: u64,
    /// Print the description as JSON.
    #[arg(long)]
    json: bool,
}

/// Show an array's members, links and files.
#[derive(Debug, Args)]
#[command(after_help = ARRAY_EXAMPLES)]
pub struct InfoArgs {
    /// The array's directory.
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn run(args: ArrayArgs) -> anyhow::Result<u8> {
    match args.command {
        ArrayCommand::Init(a) => run_init(a),
        ArrayCommand::Info(a) => run_info(a),
    }
}

fn run_init(a: InitArgs) -> anyhow::Result<u8> {
    let link = LinkModel {
        command_latency_ns: a.command_latency_us.saturating_mul(1000),
        ..LinkModel::uniform(parse_bandwidth(&a.link_bandwidth)?)
    };
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
    let array = Array::open(&a.state)?;
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
            "{:#}",
            json!({ "dir": array.dir(), "id": d.id, "members": members, "link": d.link, "files": files.len() })
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
        println!("{:#}", serde_json::Value::Array(rows));
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
            "{:#}",
            json!({ "path": map.path, "size_bytes": map.entry.size_bytes, "layout": map.entry.layout,
                    "extents": extents, "extents_truncated": map.truncated })
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

pub fn rm(dir: &Path, devpath: &str) -> anyhow::Result<u8> {
    let array = open(dir)?;
    array
        .delete(devpath)
        .with_context(|| format!("cannot delete {devpath}"))?;
    array.close()?;
    Ok(exit::SUCCESS)
}
