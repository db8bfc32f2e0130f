//! The media case of `csx bench device`: the device's uncached reads of its own media
//! (Memory Copy from the namespace, queued direct reads: `csx_device::nvm`) against
//! `fio` and `dd` reading the same bytes of the same image file with direct I/O, at the
//! same block size and queue depth, in one run.
//!
//! A file of `--media-size` is written to the device and flushed; its largest extent is
//! the range every reader reads: the device by Memory Copies of that namespace range
//! into device memory (`MEDIA_COPY_SIZE` per command, one command at a time, each one
//! fanned out by the device into `DIRECT_QUEUE_DEPTH` reads of `DIRECT_PIECE_SIZE`), `fio`
//! (libaio, `--direct=1`, the same block size and iodepth) and `dd` (`iflag=direct`, the
//! same block size, one read at a time) over the image file at the extent's offset.
//! Direct reads bypass the page cache, so no cache needs dropping; passes alternate
//! between the readers so a change of load hits all of them, and each reports its best.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use csx_device::nvm::{DIRECT_PIECE_SIZE, DIRECT_QUEUE_DEPTH};
use csx_host::proto::{CopySource, Op};
use csx_host::Device;
use serde::Serialize;

/// Bytes of one Memory Copy of the device side: large enough that the gap between
/// commands is small next to the reads, small enough to bound device memory.
pub const MEDIA_COPY_SIZE: u64 = 64 << 20;

/// What the media case measured; bandwidths in bytes per second.
#[derive(Debug, Serialize)]
pub struct MediaReport {
    /// Bytes each reader read per pass (the file's largest extent).
    pub bytes: u64,
    /// Byte offset of that range in the image file.
    pub image_offset: u64,
    pub block_size_bytes: u64,
    pub queue_depth: u64,
    pub passes: u32,
    /// The device: Memory Copies of the range from the namespace (queued direct reads).
    pub device_bytes_per_s: f64,
    /// `fio --direct=1 --ioengine=libaio` at the same block size and queue depth.
    pub fio_bytes_per_s: f64,
    /// `dd iflag=direct` at the same block size, one read in flight.
    pub dd_bytes_per_s: f64,
    /// Device over fio (the goal: at least 0.9).
    pub device_over_fio: f64,
    pub fio_version: String,
}

/// Writes the file, then alternates the three readers `passes` times.
pub fn bench_media(
    dev: &Device,
    image: &Path,
    size: u64,
    passes: u32,
) -> anyhow::Result<MediaReport> {
    let fio_version = tool_version("fio")?;
    let path = "/bench/media";
    let piece = super::device::pattern(csx_host::proto::limits::FILE_IO_SIZE_MAX as usize);
    dev.put_bytes(path, &[]).context("create the media file")?;
    let mut written = 0u64;
    while written < size {
        let n = (size - written).min(piece.len() as u64) as usize;
        dev.write_file(path, written, &piece[..n])
            .context("write the media file")?;
        written += n as u64;
    }
    dev.flush().context("flush the media file")?;
    let extents = dev.extents(path).context("the media file's extents")?;
    let extent = *extents
        .extents
        .iter()
        .max_by_key(|e| e.len)
        .context("the media file has no extent")?;
    ensure!(
        extent.len >= 16 << 20,
        "the media file's largest extent is {} bytes, want at least 16 MiB: use a larger --media-size",
        extent.len
    );
    let buf = dev
        .alloc(MEDIA_COPY_SIZE.min(extent.len))
        .context("alloc the media buffer")?;
    let mut best = [f64::MAX; 3];
    for _ in 0..passes {
        best[0] = best[0].min(device_pass(dev, buf, extent.nvm_offset, extent.len)?);
        best[1] = best[1].min(fio_pass(image, extent.nvm_offset, extent.len)?);
        best[2] = best[2].min(dd_pass(image, extent.nvm_offset, extent.len)?);
    }
    dev.free(buf).context("free")?;
    dev.delete_file(path).context("delete the media file")?;
    let rate = |s: f64| extent.len as f64 / s;
    Ok(MediaReport {
        bytes: extent.len,
        image_offset: extent.nvm_offset,
        block_size_bytes: DIRECT_PIECE_SIZE as u64,
        queue_depth: DIRECT_QUEUE_DEPTH as u64,
        passes,
        device_bytes_per_s: rate(best[0]),
        fio_bytes_per_s: rate(best[1]),
        dd_bytes_per_s: rate(best[2]),
        device_over_fio: best[1] / best[0],
        fio_version,
    })
}

/// The device reading the range by Memory Copies, one at a time: seconds.
fn device_pass(
    dev: &Device,
    buf: csx_host::proto::MemHandle,
    offset: u64,
    len: u64,
) -> anyhow::Result<f64> {
    let client = dev.client();
    let t = Instant::now();
    let mut at = 0;
    while at < len {
        let n = (len - at).min(MEDIA_COPY_SIZE);
        client
            .call_ok(Op::MemCopy {
                dst: buf,
                dst_offset: 0,
                sources: vec![CopySource::Nvm {
                    offset: offset + at,
                    len: n,
                }],
            })
            .context("memory copy from the namespace")?;
        at += n;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// `fio` reading the range with direct I/O: seconds, from the bandwidth it reports.
fn fio_pass(image: &Path, offset: u64, len: u64) -> anyhow::Result<f64> {
    let out = Command::new("fio")
        .args([
            "--name=csx-media",
            "--readonly",
            "--rw=read",
            "--direct=1",
            "--ioengine=libaio",
            "--numjobs=1",
            "--output-format=json",
        ])
        .arg(format!("--filename={}", image.display()))
        .arg(format!("--bs={DIRECT_PIECE_SIZE}"))
        .arg(format!("--iodepth={DIRECT_QUEUE_DEPTH}"))
        .arg(format!("--offset={offset}"))
        .arg(format!("--size={len}"))
        .output()
        .context("running fio (scripts/setup.sh installs it)")?;
    ensure!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON object.
    let json = text.find('{').map_or("", |i| &text[i..]);
    let v: serde_json::Value = serde_json::from_str(json).context("parsing fio's JSON")?;
    let read = &v["jobs"][0]["read"];
    let bytes = read["io_bytes"].as_u64().context("fio's read io_bytes")?;
    let ms = read["runtime"].as_u64().context("fio's read runtime")?;
    ensure!(
        bytes == len && ms > 0,
        "fio read {bytes} of {len} bytes in {ms} ms"
    );
    let bw = read["bw_bytes"].as_f64().context("fio's read bw_bytes")?;
    ensure!(bw > 0.0, "fio reports no bandwidth");
    Ok(len as f64 / bw)
}

/// `dd iflag=direct` reading the range at the same block size: seconds, timed here.
fn dd_pass(image: &Path, offset: u64, len: u64) -> anyhow::Result<f64> {
    let t = Instant::now();
    let out = Command::new("dd")
        .arg(format!("if={}", image.display()))
        .args([
            "of=/dev/null",
            "iflag=direct,skip_bytes,count_bytes",
            "status=none",
        ])
        .arg(format!("bs={DIRECT_PIECE_SIZE}"))
        .arg(format!("skip={offset}"))
        .arg(format!("count={len}"))
        .output()
        .context("running dd")?;
    let secs = t.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "dd failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(secs)
}

/// `TOOL --version`'s first line; a missing tool is an error naming scripts/setup.sh.
fn tool_version(tool: &str) -> anyhow::Result<String> {
    match Command::new(tool).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()),
        Ok(out) => bail!(
            "{tool} --version failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => bail!("{tool} is missing ({e}): run scripts/setup.sh, which installs it"),
    }
}

/// The human-readable lines of the media case.
pub fn print_media(m: &MediaReport) {
    let gb = |b: f64| format!("{:.0} MB/s", b / 1e6);
    println!(
        "uncached media reads of {} MiB at image offset {} ({} KiB blocks, queue depth {}, best of {}):",
        m.bytes >> 20,
        m.image_offset,
        m.block_size_bytes >> 10,
        m.queue_depth,
        m.passes
    );
    println!(
        "  device (Memory Copy, queued O_DIRECT)   {}   {:.0}% of fio",
        gb(m.device_bytes_per_s),
        m.device_over_fio * 100.0
    );
    println!(
        "  fio (libaio, direct, same bs and depth) {}   ({})",
        gb(m.fio_bytes_per_s),
        m.fio_version
    );
    println!(
        "  dd iflag=direct (same bs, depth 1)      {}",
        gb(m.dd_bytes_per_s)
    );
}
