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
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  csx put numbers.bin /data/numbers.bin\n  csx --device ./dev0 put big.csv /logs/big.csv\n  csx put -r data/ssb /ssb/sf1"
)]
pub struct PutArgs {
    /// The local file (with -r: the local directory).
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

/// Copy a device file to a local file (replacing it).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx get /data/numbers.bin numbers.copy")]
pub struct GetArgs {
    /// The device path.
    devpath: String,
    /// The local file to write.
    local: PathBuf,
    /// Print {"path", "bytes", "elapsed_ns"}.
    #[arg(long)]
    json: bool,
}

/// List device files under a directory (all files by default).
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx ls\n  csx ls /data --json")]
pub struct LsArgs {
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
    /// The device path.
    devpath: String,
    /// Print {path, size_bytes, extents: [{file_offset, nvm_offset, len}]}.
    #[arg(long)]
    json: bool,
}

/// Delete a device file.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  csx rm /data/numbers.bin")]
pub struct RmArgs {
    /// The device path.
    devpath: String,
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
            "{:#}",
            json!({ "path": path, "bytes": bytes, "elapsed_ns": elapsed.as_nanos() as u64 })
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
    let bytes = dev
        .put_file(&args.local, &args.devpath, &mut |p| line.update(p))
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
    let bytes = dev
        .get_file(&args.devpath, &args.local, &mut |p| line.update(p))
        .with_context(|| format!("cannot get {} to {}", args.devpath, args.local.display()));
    line.finish();
    let bytes = bytes?;
    dev.close().context("closing the device")?;
    report_transfer(args.json, "got", &args.devpath, bytes, started);
    Ok(exit::SUCCESS)
}

fn file_json(f: &FileInfo) -> serde_json::Value {
    json!({ "path": f.path, "size_bytes": f.size_bytes, "extents": f.extent_count })
}

pub fn run_ls(args: LsArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    if let Some(dir) = connect::array_dir(global) {
        return crate::array_cmd::ls(&dir, &args.dir, args.json);
    }
    let dev = connect::open(global)?;
    let list = dev
        .list_files(&args.dir)
        .with_context(|| format!("cannot list {}", args.dir))?;
    if args.json {
        println!(
            "{:#}",
            serde_json::Value::Array(list.files.iter().map(file_json).collect())
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
    let st = dev
        .stat(&args.devpath)
        .with_context(|| format!("cannot stat {}", args.devpath))?;
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
            "{:#}",
            json!({ "path": st.path, "size_bytes": st.size_bytes, "extents": extents, "extents_truncated": ext.truncated })
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
    dev.delete_file(&args.devpath)
        .with_context(|| format!("cannot remove {}", args.devpath))?;
    dev.close().context("closing the device")?;
    Ok(exit::SUCCESS)
}
