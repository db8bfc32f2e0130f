//! `csx put`, `get`, `ls`, `stat` and `rm`: the device's file store from the shell.
//!
//! Puts and gets stream in chunks (a file of any size moves with bounded memory) and
//! draw a progress line on stderr when it is a terminal.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use csx_host::proto::FileInfo;
use csx_host::Progress;
use serde_json::json;

use crate::connect::{self, format_size};
use crate::{exit, GlobalArgs};

/// Copy a local file onto the device (replacing the device file), or with -r a
/// directory tree (a generated dataset: `csx gen ssb --out DIR`, then `csx put -r DIR /ssb`).
///
/// The file is replaced whole: the bytes go to a temporary device file that is renamed
/// over the target, and the device is flushed before put reports success, so once put
/// exits 0 the file survives a crash of the device or its machine, and a put that is
/// killed or fails leaves the old file as it was.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  csx put numbers.bin /data/numbers.bin\n  csx --device ./dev0 put big.csv /logs/big.csv\n  gzip -dc log.gz | csx put - /logs/log\n  csx put -r data/ssb /ssb/sf1"
)]
pub struct PutArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The local file, or `-` for standard input (with -r: the local directory).
    local: PathBuf,
    /// The device path, e.g. /data/numbers.bin (with -r: the device directory).
    devpath: String,
    /// Copy a directory and everything below it; each file keeps its relative path.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Print {"path", "bytes", "elapsed_ns"} (with -r also "files" and "dirs").
    #[arg(long)]
    json: bool,
    /// On an array (`--device array:DIR`): stripe the file across every member, SIZE
    /// bytes at a time (a multiple of 4 KiB).
    #[arg(long, value_name = "SIZE", value_parser = connect::parse_size)]
    stripe: Option<u64>,
    /// On an array: place the file on this member (tag); default: the emptiest.
    #[arg(long, value_name = "TAG", conflicts_with = "stripe")]
    member: Option<u16>,
}

/// Copy a device file to a local file (replacing it whole: a synced temporary is
/// renamed over it, so the local file is never left half written).
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  csx get /data/numbers.bin numbers.copy\n  csx get /logs/log - | grep error"
)]
pub struct GetArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The device path.
    devpath: String,
    /// The local file to write, or `-` for standard output.
    local: PathBuf,
    /// Print {"path", "bytes", "elapsed_ns"}.
    #[arg(long)]
    json: bool,
}

/// List device files under a directory (all files by default).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx ls\n  csx ls /data --json")]
pub struct LsArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The directory (a path prefix); `/` lists everything.
    #[arg(default_value = "/")]
    dir: String,
    /// Print a JSON array of {path, size_bytes, extents}.
    #[arg(long)]
    json: bool,
}

/// Show a device file's size and where its bytes live in the NVM namespace (extents).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx stat /data/numbers.bin")]
pub struct StatArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The device path.
    devpath: String,
    /// Print {path, size_bytes, extents: [{file_offset, nvm_offset, len}]}.
    #[arg(long)]
    json: bool,
}

/// Delete a device file. The device is flushed before rm reports success, so the
/// file stays deleted after a crash.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx rm /data/numbers.bin")]
pub struct RmArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// The device path.
    devpath: String,
}

/// Make everything written to the device so far durable (flush it): after this
/// returns, a crash of the device's daemon or machine loses none of it. Put and rm
/// flush by themselves; this is for writes made otherwise (a program's output, the
/// host API, a mount).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx sync\n  csx --device tcp://10.0.0.5:4420 sync --json")]
pub struct SyncArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    /// Print {"device", "elapsed_ns"}.
    #[arg(long)]
    json: bool,
}

/// Draws `verb path: done of total (pct%)` on stderr, at most every 100 ms, when
/// stderr is a terminal.
pub(crate) struct ProgressLine {
    label: String,
    enabled: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl ProgressLine {
    pub(crate) fn new(label: String) -> ProgressLine {
        ProgressLine {
            label,
            enabled: std::io::stderr().is_terminal(),
            last: None,
            drawn: false,
        }
    }

    pub(crate) fn update(&mut self, p: Progress) {
        let finished = p.done_bytes >= p.total_bytes;
        if !self.enabled
            || (!finished
                && self
                    .last
                    .is_some_and(|t| t.elapsed() < Duration::from_millis(100)))
        {
            return;
        }
        self.last = Some(Instant::now());
        let pct = (p.done_bytes * 100)
            .checked_div(p.total_bytes)
            .unwrap_or(100);
        eprint!(
            "\r{}: {} of {} ({pct}%)   ",
            self.label,
            format_size(p.done_bytes),
            format_size(p.total_bytes)
        );
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    pub(crate) fn finish(&self) {
        if self.drawn {
            eprintln!();
        }
    }
}

pub(crate) fn report_transfer(json: bool, verb: &str, path: &str, bytes: u64, started: Instant) {
    let elapsed = started.elapsed();
    if json {
        println!(
            "{}",
            crate::output::Json(
                json!({ "path": path, "bytes": bytes, "elapsed_ns": elapsed.as_nanos() as u64 })
            )
        );
    } else {
        let rate = bytes as f64 / elapsed.as_secs_f64().max(1e-9) / (1u64 << 20) as f64;
        println!(
            "{verb} {path}: {} in {:.3} s ({rate:.0} MiB/s)",
            format_size(bytes),
            elapsed.as_secs_f64()
        );
    }
}

impl LsArgs {
    /// Whether `--json` was given (before or after the command).
    #[cfg(test)]
    pub fn json_wanted(&self) -> bool {
        self.json
    }
}

pub fn run_put(args: PutArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    if args.recursive {
        if args.stripe.is_some() || args.member.is_some() {
            anyhow::bail!(
                "put -r copies to one device; --stripe and --member are for single files on arrays"
            );
        }
        return crate::data_cmd::put_recursive(&args.local, &args.devpath, args.json, global);
    }
    if let Some(dir) = connect::array_dir(global) {
        let (local, path) = (&args.local, &args.devpath);
        return crate::array_cmd::put(&dir, local, path, args.stripe, args.member, args.json);
    }
    if args.stripe.is_some() || args.member.is_some() {
        anyhow::bail!("--stripe and --member place files on arrays; use --device array:DIR");
    }
    let dev = connect::open(global)?;
    let started = Instant::now();
    let mut line = ProgressLine::new(format!("put {}", args.devpath));
    let bytes = if is_stdio(&args.local) {
        dev.put_reader(
            &mut std::io::stdin().lock(),
            std::path::Path::new("standard input"),
            &args.devpath,
            &mut |p| line.update(p),
        )
    } else {
        dev.put_file(&args.local, &args.devpath, &mut |p| line.update(p))
    }
    .with_context(|| format!("cannot put {} to {}", args.local.display(), args.devpath));
    line.finish();
    let bytes = bytes?;
    dev.close().context("closing the device")?;
    report_transfer(args.json, "put", &args.devpath, bytes, started);
    Ok(exit::SUCCESS)
}

pub fn run_get(args: GetArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    if let Some(dir) = connect::array_dir(global) {
        return crate::array_cmd::get(&dir, &args.devpath, &args.local, args.json);
    }
    let dev = connect::open(global)?;
    let started = Instant::now();
    let mut line = ProgressLine::new(format!("get {}", args.devpath));
    let to_stdout = is_stdio(&args.local);
    let bytes = if to_stdout {
        let mut out = std::io::stdout().lock();
        dev.get_writer(
            &args.devpath,
            &mut out,
            std::path::Path::new("standard output"),
            &mut |p| line.update(p),
        )
        .and_then(|n| {
            out.flush()
                .map(|()| n)
                .map_err(|source| csx_host::FileTransferError::Local {
                    op: "write",
                    path: "standard output".into(),
                    source,
                })
        })
    } else {
        dev.get_file(&args.devpath, &args.local, &mut |p| line.update(p))
    }
    .with_context(|| format!("cannot get {} to {}", args.devpath, args.local.display()));
    line.finish();
    let bytes = bytes?;
    dev.close().context("closing the device")?;
    let streamed = to_stdout || std::fs::metadata(&args.local).is_ok_and(|m| !m.is_file());
    if streamed {
        // The data went to standard output or another stream (`/dev/stdout` in a pipe):
        // the report must not mix with it, so it goes to stderr, and only in JSON.
        if args.json {
            let elapsed = started.elapsed().as_nanos() as u64;
            eprintln!(
                "{}",
                crate::output::Json(
                    json!({ "path": args.devpath, "bytes": bytes, "elapsed_ns": elapsed })
                )
            );
        }
    } else {
        report_transfer(args.json, "got", &args.devpath, bytes, started);
    }
    Ok(exit::SUCCESS)
}

/// `-`: standard input for put, standard output for get.
fn is_stdio(local: &std::path::Path) -> bool {
    local.as_os_str() == "-"
}

fn file_json(f: &FileInfo) -> serde_json::Value {
    json!({ "path": f.path, "size_bytes": f.size_bytes, "extents": f.extent_count })
}

pub fn run_ls(args: LsArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    if let Some(dir) = connect::array_dir(global) {
        return crate::array_cmd::ls(&dir, &args.dir, args.json);
    }
    let dev = connect::open(global)?;
    let mut list = dev
        .list_files(&args.dir)
        .with_context(|| format!("cannot list {}", args.dir))?;
    // libcsx's own files (`/.csx`) show only when that directory is listed; files a
    // mount keeps for handles still open after an unlink have no name to show.
    list.files.retain(|f| {
        csx_capi::fixed::listed(&args.dir, &f.path) && !csx_fs::unlinked::is_unlinked(&f.path)
    });
    if args.json {
        println!(
            "{}",
            crate::output::Json(serde_json::Value::Array(
                list.files.iter().map(file_json).collect()
            ))
        );
    } else {
        for f in &list.files {
            println!("{:>14}  {}", f.size_bytes, f.path);
        }
    }
    if list.truncated {
        eprintln!("csx: the listing is cut short; list a narrower directory to see the rest");
    }
    dev.close().context("closing the device")?;
    Ok(exit::SUCCESS)
}

pub fn run_stat(args: StatArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    if let Some(dir) = connect::array_dir(global) {
        return crate::array_cmd::stat(&dir, &args.devpath, args.json);
    }
    let dev = connect::open(global)?;
    let st = match dev.stat(&args.devpath) {
        Err(csx_host::CallError::NotFound(_)) if is_dir(&dev, &args.devpath) => {
            if args.json {
                println!(
                    "{}",
                    crate::output::Json(json!({ "path": args.devpath, "kind": "dir" }))
                );
            } else {
                println!("path     {}", args.devpath);
                println!("kind     directory (csx ls {} lists it)", args.devpath);
            }
            dev.close().context("closing the device")?;
            return Ok(exit::SUCCESS);
        }
        st => st.with_context(|| format!("cannot stat {}", args.devpath))?,
    };
    let ext = dev
        .extents(&args.devpath)
        .with_context(|| format!("cannot read the extents of {}", args.devpath))?;
    if args.json {
        let extents: Vec<_> = ext
            .extents
            .iter()
            .map(|e| json!({ "file_offset": e.file_offset, "nvm_offset": e.nvm_offset, "len": e.len }))
            .collect();
        println!(
            "{}",
            crate::output::Json(
                json!({ "path": st.path, "size_bytes": st.size_bytes, "extents": extents, "extents_truncated": ext.truncated })
            )
        );
    } else {
        println!("path     {}", st.path);
        println!(
            "size     {} bytes ({})",
            st.size_bytes,
            format_size(st.size_bytes)
        );
        println!(
            "extents  {}{}",
            st.extent_count,
            if ext.truncated {
                " (list cut short)"
            } else {
                ""
            }
        );
        for e in &ext.extents {
            println!(
                "  file {:>14} .. {:<14} at nvm {:#x}",
                e.file_offset,
                e.file_offset + e.len,
                e.nvm_offset
            );
        }
    }
    dev.close().context("closing the device")?;
    Ok(exit::SUCCESS)
}

pub fn run_rm(args: RmArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    if let Some(dir) = connect::array_dir(global) {
        return crate::array_cmd::rm(&dir, &args.devpath);
    }
    let dev = connect::open(global)?;
    if let Err(e) = dev.delete_file(&args.devpath) {
        if matches!(e, csx_host::CallError::NotFound(_)) && is_dir(&dev, &args.devpath) {
            anyhow::bail!(
                "cannot remove {}: it is a directory (rm removes files; remove what is under it first)",
                args.devpath
            );
        }
        return Err(e).with_context(|| format!("cannot remove {}", args.devpath));
    }
    dev.flush().with_context(|| {
        format!(
            "{} was removed, but flushing the device failed",
            args.devpath
        )
    })?;
    dev.close().context("closing the device")?;
    Ok(exit::SUCCESS)
}

fn is_dir(dev: &csx_host::Device, path: &str) -> bool {
    dev.path_stat(path)
        .is_ok_and(|e| e.kind == csx_host::proto::EntryKind::Dir)
}

pub fn run_sync(args: SyncArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let name = if let Some(dir) = connect::array_dir(global) {
        crate::array_cmd::sync(&dir)?;
        format!("array:{}", dir.display())
    } else {
        let uri = connect::device_uri(global)?;
        let dev = connect::open(global)?;
        dev.flush()
            .with_context(|| format!("cannot flush device {uri}"))?;
        dev.close().context("closing the device")?;
        uri
    };
    let elapsed = started.elapsed();
    if args.json {
        println!(
            "{}",
            crate::output::Json(json!({ "device": name, "elapsed_ns": elapsed.as_nanos() as u64 }))
        );
    } else {
        println!("synced {name} in {:.3} s", elapsed.as_secs_f64());
    }
    Ok(exit::SUCCESS)
}
