//! A media yardstick for staging: the bytes a run copied from the device's media, read
//! again straight from the image right after it, as `fio` reads a file.
//!
//! Staging's goal (issue 30) is a load phase at ≥ 90% of the disk's direct bandwidth for
//! the same bytes. A fixed `fio` range of the image is not the same bytes: the image is
//! sparse, and a direct read of a hole returns zeros without touching the disk. So the
//! yardstick reads exactly what the run read:
//!
//! ```text
//! plan   the run's file copies ([`QueryRun::file_copies`](super::run::QueryRun)),
//!        each mapped through its file's extents (File Extents, like FIEMAP) to the
//!        namespace ranges holding its bytes; byte n of the namespace is byte n of the
//!        image. Ranges no extent covers (holes) are not media bytes: counted apart.
//! read   those ranges in the run's order, widened to 4 KiB (as the device's direct
//!        reads widen them), cut into 1 MiB requests from each run's start, read with
//!        O_DIRECT: one at a time (fio --ioengine=psync --bs=1M), and with
//!        `depth` requests in flight (fio --ioengine=libaio --iodepth=4 --bs=1M; here
//!        `depth` threads of pread, each taking the next request)
//! ```
//!
//! Only a device whose image this process can open (an embedded device) can be
//! measured so; the image must accept `O_DIRECT` (else the page cache could serve it,
//! and the yardstick refuses).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use csx_host::Device;

use crate::error::DataError;

/// Bytes of one read request (fio's `--bs=1M`).
pub const REQUEST_SIZE: u64 = 1 << 20;
/// Alignment of an `O_DIRECT` read's offset, length and buffer (the device's own).
pub const DIRECT_ALIGNMENT: u64 = 4096;
/// Requests in flight of the queued read (fio's `--iodepth=4`).
pub const QUEUED_DEPTH: usize = 4;

/// Bytes of the namespace (of the image file) from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaRange {
    pub offset: u64,
    pub len: u64,
}

/// Where a run's file copies lie on the media.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The namespace ranges, in the copies' order (ranges back to back on the media
    /// merged).
    pub ranges: Vec<MediaRange>,
    /// File ranges the run copied.
    pub file_ranges: u64,
    /// Their bytes: [`Plan::media_bytes`] plus [`Plan::hole_bytes`].
    pub file_bytes: u64,
    /// Of them, bytes stored on the media (the ranges' lengths summed).
    pub media_bytes: u64,
    /// Of them, bytes no extent covers (zeros, read from no media).
    pub hole_bytes: u64,
}

/// Maps `copies` (`(path, offset, len)`, as [`csx_host::Session::file_copies`] keeps
/// them) through their files' extents (asked once per file) to namespace ranges.
pub fn plan(dev: &Device, copies: &[(String, u64, u64)]) -> Result<Plan, DataError> {
    let mut extents: std::collections::HashMap<&str, Vec<(u64, u64, u64)>> = Default::default();
    let mut out = Plan::default();
    for (path, offset, len) in copies {
        if !extents.contains_key(path.as_str()) {
            let e = dev
                .extents(path)
                .map_err(|source| DataError::device(format!("the extents of {path}"), source))?;
            if e.truncated {
                return Err(DataError::Invalid(format!(
                    "{path} has more extents than one reply holds: the yardstick cannot map it"
                )));
            }
            let list = (e.extents.iter())
                .map(|x| (x.file_offset, x.nvm_offset, x.len))
                .collect();
            extents.insert(path.as_str(), list);
        }
        out.file_ranges += 1;
        out.file_bytes += len;
        let end = offset + len;
        let mut on_media = 0;
        for &(file_offset, nvm_offset, ext_len) in &extents[path.as_str()] {
            let from = (*offset).max(file_offset);
            let to = end.min(file_offset + ext_len);
            if from >= to {
                continue;
            }
            push_merged(
                &mut out.ranges,
                MediaRange {
                    offset: nvm_offset + (from - file_offset),
                    len: to - from,
                },
            );
            on_media += to - from;
        }
        out.media_bytes += on_media;
        out.hole_bytes += len - on_media;
    }
    Ok(out)
}

/// Appends `r`, merged into the last range when it starts where that one ends.
fn push_merged(ranges: &mut Vec<MediaRange>, r: MediaRange) {
    match ranges.last_mut() {
        Some(last) if last.offset + last.len == r.offset => last.len += r.len,
        _ => ranges.push(r),
    }
}

/// The read requests of `ranges`: each widened to [`DIRECT_ALIGNMENT`], merged with the
/// one before when they touch or overlap going forward, and cut into
/// [`REQUEST_SIZE`] pieces from each run's start. `(offset, len)` each.
pub fn requests(ranges: &[MediaRange]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for r in ranges.iter().filter(|r| r.len > 0) {
        let start = r.offset / DIRECT_ALIGNMENT * DIRECT_ALIGNMENT;
        let end = (r.offset + r.len).div_ceil(DIRECT_ALIGNMENT) * DIRECT_ALIGNMENT;
        match runs.last_mut() {
            Some(last) if start >= last.0 && start <= last.1 => last.1 = last.1.max(end),
            _ => runs.push((start, end)),
        }
    }
    let mut out = Vec::new();
    for (start, end) in runs {
        let mut at = start;
        while at < end {
            let n = (end - at).min(REQUEST_SIZE);
            out.push((at, n));
            at += n;
        }
    }
    out
}

/// One direct read of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectRead {
    /// Requests in flight at most.
    pub depth: usize,
    pub requests: u64,
    /// Bytes read (the ranges widened to [`DIRECT_ALIGNMENT`]).
    pub read_bytes: u64,
    pub wall_ns: u64,
}

/// Reads `requests` of the file at `image` with `O_DIRECT`, `depth` at a time, into
/// aligned buffers (the bytes are dropped).
pub fn read_direct(
    image: &Path,
    requests: &[(u64, u64)],
    depth: usize,
) -> Result<DirectRead, DataError> {
    let io = |source| DataError::Io {
        path: image.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(image)
        .map_err(io)?;
    let depth = depth.clamp(1, 64);
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let failed = std::thread::scope(|scope| {
        let worker = || -> std::io::Result<()> {
            let mut buf = vec![0u8; (REQUEST_SIZE + DIRECT_ALIGNMENT) as usize];
            let skip = buf.as_ptr().align_offset(DIRECT_ALIGNMENT as usize);
            let buf = &mut buf[skip..skip + REQUEST_SIZE as usize];
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(offset, len)) = requests.get(i) else {
                    return Ok(());
                };
                file.read_exact_at(&mut buf[..len as usize], offset)?;
            }
        };
        let helpers: Vec<_> = (1..depth).map(|_| scope.spawn(worker)).collect();
        let mut first = worker().err();
        for h in helpers {
            if let Err(e) = h.join().expect("a yardstick reader does not panic") {
                first.get_or_insert(e);
            }
        }
        first
    });
    let wall_ns = started.elapsed().as_nanos() as u64;
    if let Some(e) = failed {
        return Err(io(e));
    }
    Ok(DirectRead {
        depth,
        requests: requests.len() as u64,
        read_bytes: requests.iter().map(|r| r.1).sum(),
        wall_ns,
    })
}

/// A run's yardstick: its plan and one direct read per depth asked.
#[derive(Clone, Debug)]
pub struct Yardstick {
    pub plan: Plan,
    pub reads: Vec<DirectRead>,
}

/// [`plan`] of `copies`, then [`read_direct`] of it from `image` at each of `depths`,
/// one after another.
pub fn measure(
    dev: &Device,
    image: &Path,
    copies: &[(String, u64, u64)],
    depths: &[usize],
) -> Result<Yardstick, DataError> {
    let plan = plan(dev, copies)?;
    let reqs = requests(&plan.ranges);
    let reads = (depths.iter())
        .map(|&d| read_direct(image, &reqs, d))
        .collect::<Result<_, _>>()?;
    Ok(Yardstick { plan, reads })
}

/// MiB/s of `bytes` in `ns`.
pub fn mib_per_s(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64 / (ns.max(1) as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_widen_merge_and_cut_at_one_mib() {
        let r = |offset, len| MediaRange { offset, len };
        // 10 bytes inside one block; a range touching the next; one far away, 2.5 MiB.
        let got = requests(&[r(4100, 10), r(8192, 4096), r(1 << 30, 5 << 19)]);
        assert_eq!(
            got,
            vec![
                (4096, 8192),
                (1 << 30, 1 << 20),
                ((1 << 30) + (1 << 20), 1 << 20),
                ((1 << 30) + (2 << 20), 1 << 19),
            ]
        );
        // Going backwards is a new run (file order is kept, not sorted).
        assert_eq!(
            requests(&[r(8192, 4096), r(0, 4096)]),
            vec![(8192, 4096), (0, 4096)]
        );
    }

    #[test]
    fn ranges_back_to_back_merge() {
        let mut v = Vec::new();
        push_merged(&mut v, MediaRange { offset: 0, len: 10 });
        push_merged(&mut v, MediaRange { offset: 10, len: 5 });
        push_merged(&mut v, MediaRange { offset: 20, len: 5 });
        assert_eq!(
            v,
            vec![
                MediaRange { offset: 0, len: 15 },
                MediaRange { offset: 20, len: 5 }
            ]
        );
    }
}
