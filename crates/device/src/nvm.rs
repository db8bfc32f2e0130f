//! The NVM namespace: the device's storage, one backing image file in the state directory.
//!
//! The namespace is addressed in bytes and in blocks of [`BLOCK_SIZE`] bytes; byte `n` of
//! the namespace is byte `n` of the image file, with no header, so a host-side reader that
//! knows a file's extents (see `filestore`) can read them straight from the image.
//!
//! Invariants:
//! - The image's size is fixed at [`Nvm::create`], is a non-zero multiple of [`BLOCK_SIZE`]
//!   and at most [`NVM_SIZE_MAX`]; [`Nvm::open`] refuses any other size.
//! - Every access is bounds-checked against that size before any I/O; an out-of-range
//!   access is a typed error, never a short read or a write that grows the image.
//! - All I/O is positional (`pread`/`pwrite`), so one `Nvm` is shared by many threads
//!   without a lock. Writes to overlapping ranges from different threads are not ordered
//!   against each other; the file store above serialises them.
//!
//! # Cached and uncached reads
//!
//! [`Nvm::read_at`] goes through the OS page cache of the image, which is what a host
//! reading the image sees. [`Nvm::read_at_uncached`] models a device reading its own
//! media, which must not benefit from the host's page cache:
//!
//! - [`UncachedMode::Direct`]: the image is also opened with `O_DIRECT` and the read goes
//!   through a bounce buffer aligned to [`DIRECT_IO_ALIGNMENT`], covering the requested
//!   range widened to aligned boundaries. Linux writes back dirty cached pages of the
//!   range before a direct read, so a direct read sees every completed `write_at`.
//! - [`UncachedMode::Fadvise`]: where the file system refuses `O_DIRECT` (at open, or with
//!   `EINVAL` on the first aligned read, as some tmpfs and FUSE mounts do) the read is a
//!   plain `pread` followed by `posix_fadvise(POSIX_FADV_DONTNEED)` over the range, so the
//!   pages do not stay cached for later reads. This is best effort: the read itself may
//!   hit pages that were already cached, and on tmpfs the page cache is the storage.
//!
//! With the `media_reads` setting at [`MediaReads::Cached`] ([`Nvm::set_media_reads`]),
//! "uncached" reads go through the page cache too: a warm image is then read as a host
//! engine reads a file. Writes and their durability are the same in both.
//!
//! The mode is detected at open and reported by [`Nvm::uncached_mode`]; a direct read that
//! later fails with `EINVAL` switches the namespace to `Fadvise` for good.
//!
//! # Queued direct reads
//!
//! A real device's media serves many reads at once, and so do the disks under an image: a
//! single synchronous `pread` at a time leaves most of their bandwidth unused. A direct
//! read longer than one piece (up to [`DIRECT_PIECE_SIZE`]; smaller, down to
//! [`DIRECT_PIECE_MIN`], when that fills the queue) is therefore cut at aligned
//! boundaries into pieces that up to [`DIRECT_QUEUE_DEPTH`] threads (the caller and
//! scoped helpers) read at once, each straight into the caller's buffer when the piece is
//! aligned there, else through its own bounce buffer. `csx bench device` compares this
//! with `fio` and `dd` at the same block size and queue depth on the same file.
//! [`Nvm::read_runs_checked`] reads several runs of blocks (the ranges of a Memory Copy
//! of several file sources) as one such batch, its pieces cut to fill the queue with all
//! the runs together; [`Nvm::read_stats`] counts the media reads and the most in flight.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// Bytes of one namespace block: the unit the file store allocates in. 4 KiB matches the
/// page size and the logical block size of the NVMe drives csx models, so block-aligned
/// I/O is also page-aligned and `O_DIRECT`-aligned.
pub const BLOCK_SIZE: u64 = 4096;

/// Bytes of the largest namespace image. Equal to `csx_proto::limits::NVM_SIZE_MAX`: it is
/// the largest file ext4 holds with 4 KiB blocks, and keeps every byte offset far from
/// `i64::MAX` (`off_t`).
pub const NVM_SIZE_MAX: u64 = 16 << 40;

/// Alignment of buffer address, file offset and length for `O_DIRECT` reads. Linux needs
/// the logical block size of the underlying device (512 or 4096); 4096 satisfies both.
pub const DIRECT_IO_ALIGNMENT: usize = 4096;

/// Bytes of the bounce buffer one uncached read uses at most; larger reads are done in
/// chunks of this size. Bounds the memory an uncached read allocates whatever its length.
pub const BOUNCE_SIZE_MAX: usize = 1 << 20;

/// Bytes of one piece of a queued direct read (see the module docs): the block size of
/// the media reads. Large enough that a piece's syscall and copy are small next to its
/// transfer, small enough that a 4 MiB staging read still fills the queue.
pub const DIRECT_PIECE_SIZE: usize = 512 << 10;

/// Direct reads one uncached read keeps in flight: its queue depth, and the threads it
/// uses (the caller plus `DIRECT_QUEUE_DEPTH - 1` scoped helpers, only for reads of more
/// than one piece). NVMe and virtio disks reach their bandwidth from about 8 requests of
/// half a MiB in flight.
pub const DIRECT_QUEUE_DEPTH: usize = 8;

/// The smallest piece a direct read is cut into to fill the queue (below it, the
/// per-read cost outweighs the depth).
pub const DIRECT_PIECE_MIN: usize = 128 << 10;

const _: () = assert!(BLOCK_SIZE.is_power_of_two());
const _: () = assert!(DIRECT_PIECE_SIZE.is_multiple_of(DIRECT_IO_ALIGNMENT));
const _: () = assert!(DIRECT_PIECE_MIN.is_multiple_of(DIRECT_IO_ALIGNMENT));
const _: () = assert!(DIRECT_PIECE_MIN <= DIRECT_PIECE_SIZE);
const _: () = assert!(DIRECT_PIECE_SIZE <= BOUNCE_SIZE_MAX);
const _: () = assert!(NVM_SIZE_MAX.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(BLOCK_SIZE.is_multiple_of(DIRECT_IO_ALIGNMENT as u64));
const _: () = assert!(BOUNCE_SIZE_MAX.is_multiple_of(DIRECT_IO_ALIGNMENT));

/// What [`Nvm::read_blocks_checked`] asks of each piece it read: its offset from the
/// range's start and its bytes; an error fails the read.
pub type PieceCheck<'a, E> = dyn Fn(u64, &[u8]) -> Result<(), E> + Sync + 'a;

/// What [`Nvm::read_runs_checked`] asks of each piece it read: the run's index, the
/// piece's offset from the run's start and its bytes; an error fails the read.
pub type RunCheck<'a, E> = dyn Fn(usize, u64, &[u8]) -> Result<(), E> + Sync + 'a;

/// One run of [`Nvm::read_runs_checked`]: the whole blocks `[offset, offset + len)` of
/// the namespace, and where the bytes `[skip, skip + dst.len())` of them go.
#[derive(Debug)]
pub struct BlockRun<'a> {
    pub offset: u64,
    pub len: u64,
    pub skip: usize,
    pub dst: &'a mut [u8],
}

/// The media reads of queued uncached reads ([`Nvm::read_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MediaReadStats {
    /// Reads issued to the image (one per piece).
    pub reads: u64,
    /// The most reads in flight at once.
    pub in_flight_max: u64,
}

/// The counters behind [`MediaReadStats`].
#[derive(Debug, Default)]
struct ReadCounters {
    reads: std::sync::atomic::AtomicU64,
    in_flight: std::sync::atomic::AtomicU64,
    in_flight_max: std::sync::atomic::AtomicU64,
}

impl ReadCounters {
    /// Counts a read starting; it ends when the guard drops.
    fn start(&self) -> InFlight<'_> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.in_flight_max.fetch_max(now, Ordering::AcqRel);
        InFlight(self)
    }
}

/// A read in flight ([`ReadCounters::start`]).
struct InFlight<'a>(&'a ReadCounters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One piece of [`Nvm::read_runs_checked`]: run `run` (at namespace offset `offset`),
/// its `n` bytes from `at`, and the part of the destination the wanted bytes of it
/// fill, `from` bytes into the piece.
struct PieceTask<'a> {
    run: usize,
    offset: u64,
    at: u64,
    n: usize,
    from: usize,
    part: &'a mut [u8],
}

/// Cuts `run` (index `i`) into as many pieces as pieces of `piece` bytes take, of about
/// equal size (whole blocks; the last one may be shorter), so that a run's last piece
/// is not a short read beside full ones.
fn run_pieces<'a>(i: usize, run: BlockRun<'a>, piece: u64, tasks: &mut Vec<PieceTask<'a>>) {
    let count = run.len.div_ceil(piece).max(1);
    let piece = run.len.div_ceil(count).next_multiple_of(BLOCK_SIZE);
    let (want_lo, want_hi) = (run.skip as u64, (run.skip + run.dst.len()) as u64);
    let mut rest = run.dst;
    let mut at = 0u64;
    while at < run.len {
        let end = (at + piece).min(run.len);
        // The wanted bytes inside this piece, `lo - at` bytes into it.
        let lo = at.max(want_lo);
        let hi = end.min(want_hi).max(lo);
        let from = if hi > lo { lo - at } else { 0 };
        let (part, tail) = std::mem::take(&mut rest).split_at_mut((hi - lo) as usize);
        tasks.push(PieceTask {
            run: i,
            offset: run.offset,
            at,
            n: (end - at) as usize,
            from: from as usize,
            part,
        });
        rest = tail;
        at = end;
    }
}

/// Errors of the NVM namespace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NvmError {
    /// The image could not be created, opened or inspected.
    #[error("cannot {op} nvm image {}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// [`Nvm::create`] found a file already at the path; it never overwrites one.
    #[error("nvm image {} already exists", path.display())]
    AlreadyExists { path: PathBuf },
    /// The size is not a whole number of blocks.
    #[error("nvm image {} is {size_bytes} bytes, not a multiple of the {block_size}-byte block", path.display())]
    SizeNotBlockMultiple {
        path: PathBuf,
        size_bytes: u64,
        block_size: u64,
    },
    /// The size is zero or above [`NVM_SIZE_MAX`].
    #[error("nvm image {} is {size_bytes} bytes, must be between {min} and {max}", path.display())]
    SizeOutOfRange {
        path: PathBuf,
        size_bytes: u64,
        min: u64,
        max: u64,
    },
    /// An access reaches past the end of the namespace.
    #[error(
        "nvm access of {len} bytes at offset {offset} is outside the {size_bytes}-byte namespace"
    )]
    OutOfRange {
        offset: u64,
        len: u64,
        size_bytes: u64,
    },
    /// A read of the image failed.
    #[error("read of {len} bytes at offset {offset} of nvm image {} failed: {source}", path.display())]
    Read {
        path: PathBuf,
        offset: u64,
        len: u64,
        #[source]
        source: io::Error,
    },
    /// A write to the image failed (for example the host file system is full: images are
    /// sparse).
    #[error("write of {len} bytes at offset {offset} of nvm image {} failed: {source}", path.display())]
    Write {
        path: PathBuf,
        offset: u64,
        len: u64,
        #[source]
        source: io::Error,
    },
    /// `fdatasync` of the image failed. What reached the media is unknown afterwards.
    #[error("sync of nvm image {} failed: {source}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// How [`Nvm::read_at_uncached`] avoids the OS page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UncachedMode {
    /// `O_DIRECT` reads through an aligned bounce buffer.
    Direct,
    /// `pread` then `posix_fadvise(POSIX_FADV_DONTNEED)`: the file system refused
    /// `O_DIRECT`.
    Fadvise,
}

/// How the device reads its media for Memory Copies and device functions (the
/// `media_reads` setting of `device.json`). Writes are the same either way: buffered,
/// durable at [`Nvm::sync`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaReads {
    /// Uncached ([`UncachedMode`]): the device reads its own media, never the host's page
    /// cache of the image, as a drive would. The default: modelled and measured device
    /// reads then cost what the media costs.
    #[default]
    Direct,
    /// Through the host's page cache of the image, as a host engine reading a file does:
    /// a warm image is read from memory. For side-by-side runs with such an engine.
    Cached,
}

impl std::fmt::Display for MediaReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MediaReads::Direct => "direct",
            MediaReads::Cached => "cached",
        })
    }
}

impl std::str::FromStr for MediaReads {
    type Err = String;
    fn from_str(s: &str) -> Result<MediaReads, String> {
        match s {
            "direct" => Ok(MediaReads::Direct),
            "cached" => Ok(MediaReads::Cached),
            other => Err(format!("media reads {other:?}, must be direct or cached")),
        }
    }
}

const MODE_DIRECT: u8 = 0;
const MODE_FADVISE: u8 = 1;

/// The NVM namespace over its backing image. `Send + Sync`; share it in an `Arc`.
#[derive(Debug)]
pub struct Nvm {
    path: PathBuf,
    /// Buffered descriptor for writes, cached reads and sync.
    file: File,
    /// A second descriptor opened with `O_DIRECT`, when the file system allows it.
    direct: Option<File>,
    /// `MODE_DIRECT` or `MODE_FADVISE`; only ever moves from direct to fadvise.
    mode: AtomicU8,
    /// [`MediaReads::Cached`]: "uncached" reads go through the page cache.
    cached_reads: std::sync::atomic::AtomicBool,
    size_bytes: u64,
    /// The queued reads' media reads, counted.
    stats: ReadCounters,
    /// Test-only record of what writes since the last sync overwrote, to simulate a power
    /// loss (see [`Nvm::simulate_power_loss`]).
    #[cfg(test)]
    undo: std::sync::Mutex<Option<UndoLog>>,
    /// The power-loss log of a crash test ([`UNDO_LOG_ENV`]), when one was asked for.
    undo_file: Option<std::sync::Mutex<File>>,
}

/// Test hook for crash campaigns across processes: when this environment variable names
/// a file at open, every write first appends to it what it overwrites (offset, length,
/// old bytes), and every sync empties it. After a SIGKILL, [`apply_undo_log`]
/// undoes (some of) the writes after the last marker: the image then holds what a power
/// loss at that moment could have left on the media (synced bytes, plus whichever unsynced
/// writes the kernel happened to write back). Costs a read and a write per write; never
/// set it in production.
pub const UNDO_LOG_ENV: &str = "CSX_NVM_UNDO_LOG";

/// Applies a power-loss log written under [`UNDO_LOG_ENV`] to the image at `image`:
/// every write since the last sync is undone unless `keep(i)` (the `i`-th such
/// write) says it reached the media, newest first. A last record cut short by the kill
/// is ignored (its write had not started). Removes the log. Returns (writes after the
/// last sync, writes undone).
pub fn apply_undo_log(
    image: &Path,
    log: &Path,
    mut keep: impl FnMut(usize) -> bool,
) -> io::Result<(usize, usize)> {
    let bytes = match std::fs::read(log) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    let mut records: Vec<(u64, &[u8])> = Vec::new();
    let mut at = 0usize;
    while at + 16 <= bytes.len() {
        let offset = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (at + 16).checked_add(l))
        else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        records.push((offset, &bytes[at + 16..end]));
        at = end;
    }
    let decisions: Vec<bool> = (0..records.len()).map(&mut keep).collect();
    let file = OpenOptions::new().write(true).open(image)?;
    let mut undone = 0;
    for (i, (offset, old)) in records.iter().enumerate().rev() {
        if !decisions[i] {
            file.write_all_at(old, *offset)?;
            undone += 1;
        }
    }
    file.sync_all()?;
    std::fs::remove_file(log)?;
    Ok((records.len(), undone))
}

/// Test-only: (offset, bytes overwritten) of each write since the last sync, in order.
#[cfg(test)]
type UndoLog = Vec<(u64, Vec<u8>)>;

impl Nvm {
    /// Creates a new image of `size_bytes` (a non-zero multiple of [`BLOCK_SIZE`], at most
    /// [`NVM_SIZE_MAX`]) at `path`, zero-filled and sparse, and makes its existence
    /// durable. Refuses to replace an existing file.
    pub fn create(path: impl AsRef<Path>, size_bytes: u64) -> Result<Nvm, NvmError> {
        let path = path.as_ref();
        check_size(path, size_bytes)?;
        let file = open_private(
            OpenOptions::new().read(true).write(true).create_new(true),
            path,
        )
        .map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => NvmError::AlreadyExists {
                path: path.to_path_buf(),
            },
            _ => io_error(path, "create", source),
        })?;
        file.set_len(size_bytes)
            .map_err(|source| io_error(path, "size", source))?;
        file.sync_all()
            .map_err(|source| io_error(path, "sync", source))?;
        sync_parent_dir(path).map_err(|source| io_error(path, "sync the directory of", source))?;
        drop(file);
        Nvm::open(path)
    }

    /// Opens an existing image; its size is the file's size, which must be valid.
    pub fn open(path: impl AsRef<Path>) -> Result<Nvm, NvmError> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| io_error(path, "open", source))?;
        let size_bytes = file
            .metadata()
            .map_err(|source| io_error(path, "stat", source))?
            .len();
        check_size(path, size_bytes)?;
        let direct = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok();
        let nvm = Nvm {
            path: path.to_path_buf(),
            file,
            direct,
            mode: AtomicU8::new(MODE_DIRECT),
            cached_reads: std::sync::atomic::AtomicBool::new(false),
            size_bytes,
            stats: ReadCounters::default(),
            #[cfg(test)]
            undo: std::sync::Mutex::new(None),
            undo_file: match std::env::var_os(UNDO_LOG_ENV).filter(|p| !p.is_empty()) {
                Some(log) => Some(std::sync::Mutex::new(
                    OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&log)
                        .map_err(|source| io_error(Path::new(&log), "open", source))?,
                )),
                None => None,
            },
        };
        nvm.probe_direct();
        Ok(nvm)
    }

    /// Bytes in the namespace.
    pub fn size(&self) -> u64 {
        self.size_bytes
    }

    /// Blocks in the namespace.
    pub fn block_count(&self) -> u64 {
        self.size_bytes / BLOCK_SIZE
    }

    /// Path of the backing image.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The buffered descriptor of the image, for a host-side reader that maps it or asks
    /// the page cache about it (`mmap`, `mincore`). Reads through it see the OS page cache.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// How [`Nvm::read_at_uncached`] currently avoids the page cache.
    pub fn uncached_mode(&self) -> UncachedMode {
        match self.mode.load(Ordering::Relaxed) {
            MODE_DIRECT => UncachedMode::Direct,
            _ => UncachedMode::Fadvise,
        }
    }

    /// Sets how the device reads its media ([`MediaReads`]); [`MediaReads::Direct`] at
    /// open.
    pub fn set_media_reads(&self, reads: MediaReads) {
        self.cached_reads
            .store(reads == MediaReads::Cached, Ordering::Relaxed);
    }

    /// How the device reads its media.
    pub fn media_reads(&self) -> MediaReads {
        if self.cached_reads.load(Ordering::Relaxed) {
            MediaReads::Cached
        } else {
            MediaReads::Direct
        }
    }

    /// Reads `buf.len()` bytes at byte `offset` through the OS page cache.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), NvmError> {
        self.check_range(offset, buf.len())?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| self.read_error(offset, buf.len(), source))
    }

    /// Writes `data` at byte `offset` (buffered; durable after [`Nvm::sync`]).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), NvmError> {
        self.check_range(offset, data.len())?;
        #[cfg(test)]
        self.record_undo(offset, data.len());
        let write_error = |source| NvmError::Write {
            path: self.path.clone(),
            offset,
            len: data.len() as u64,
            source,
        };
        if let Some(log) = &self.undo_file {
            // The record is complete before the write starts, and the two happen under
            // one lock, so the log's order is the writes' order.
            let mut log = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut record = Vec::with_capacity(16 + data.len());
            record.extend_from_slice(&offset.to_le_bytes());
            record.extend_from_slice(&(data.len() as u64).to_le_bytes());
            record.resize(16 + data.len(), 0);
            self.file
                .read_exact_at(&mut record[16..], offset)
                .map_err(write_error)?;
            io::Write::write_all(&mut *log, &record).map_err(write_error)?;
            return self.file.write_all_at(data, offset).map_err(write_error);
        }
        self.file.write_all_at(data, offset).map_err(write_error)
    }

    /// Makes every completed write durable (`fdatasync`; the size never changes, so the
    /// file's data is all there is to sync).
    pub fn sync(&self) -> Result<(), NvmError> {
        let log = self
            .undo_file
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        self.file.sync_data().map_err(|source| NvmError::Sync {
            path: self.path.clone(),
            source,
        })?;
        if let Some(log) = log {
            // Everything logged is on the media now: nothing before this may be undone.
            log.set_len(0).map_err(|source| NvmError::Sync {
                path: self.path.clone(),
                source,
            })?;
        }
        #[cfg(test)]
        if let Some(log) = self.undo.lock().expect("undo lock").as_mut() {
            log.clear();
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at byte `offset` without benefiting from, or filling, the OS
    /// page cache: the device reading its own media. See the module docs for the two modes.
    pub fn read_at_uncached(&self, offset: u64, buf: &mut [u8]) -> Result<(), NvmError> {
        self.check_range(offset, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        if self.media_reads() == MediaReads::Cached {
            return self.read_at(offset, buf);
        }
        if let (MODE_DIRECT, Some(direct)) = (self.mode.load(Ordering::Relaxed), &self.direct) {
            match self.read_direct(direct, offset, buf) {
                Ok(()) => return Ok(()),
                Err(source) if source.raw_os_error() == Some(libc::EINVAL) => {
                    // The file system accepted O_DIRECT at open but refuses aligned reads.
                    self.mode.store(MODE_FADVISE, Ordering::Relaxed);
                }
                Err(source) => return Err(self.read_error(offset, buf.len(), source)),
            }
        }
        self.read_fadvise(offset, buf)
    }

    /// Reads the whole blocks `[offset, offset + len)` (both multiples of [`BLOCK_SIZE`])
    /// as [`Nvm::read_at_uncached`] does, in one queued read: each piece (at most
    /// [`DIRECT_PIECE_SIZE`], aligned) is handed to `check` with its offset from
    /// `offset`; once `check` accepts it, the piece's bytes inside the range's bytes
    /// `[skip, skip + dst.len())` are in their place in `dst`. So a caller that must see
    /// whole blocks (to verify their checksums) reads a range that does not start or end
    /// on a block with no separate reads of its edges, and the checks run on the
    /// readers, beside the reads. [`Nvm::read_runs_checked`] of one run.
    pub fn read_blocks_checked<E: From<NvmError> + Send>(
        &self,
        (offset, len): (u64, u64),
        (skip, dst): (usize, &mut [u8]),
        check: &PieceCheck<'_, E>,
    ) -> Result<(), E> {
        let run = BlockRun {
            offset,
            len,
            skip,
            dst,
        };
        self.read_runs_checked(vec![run], &|_, at, bytes| check(at, bytes))
            .map_err(|(_, e)| e)
    }

    /// [`Nvm::read_blocks_checked`] of several runs in one queued read: the pieces of
    /// every run (cut to fill the queue with all of them together, never across a run's
    /// end) go to the readers as one batch, so many short runs (the blocks of several
    /// column files, say) keep [`DIRECT_QUEUE_DEPTH`] reads in flight as one long run
    /// does. `check` gets the run's index, the piece's offset from the run's start and
    /// its bytes. A piece wanted whole, aligned in `dst`, is read straight into `dst`
    /// (and checked there); the others through the reader's bounce buffer. The first
    /// failure ends the read: the run it was in, and the error.
    pub fn read_runs_checked<E: From<NvmError> + Send>(
        &self,
        runs: Vec<BlockRun<'_>>,
        check: &RunCheck<'_, E>,
    ) -> Result<(), (usize, E)> {
        for (i, r) in runs.iter().enumerate() {
            self.check_range(r.offset, r.len as usize)
                .map_err(|e| (i, E::from(e)))?;
            assert!(
                r.offset.is_multiple_of(BLOCK_SIZE)
                    && r.len.is_multiple_of(BLOCK_SIZE)
                    && r.skip as u64 + r.dst.len() as u64 <= r.len,
                "whole blocks, and the wanted bytes inside them"
            );
        }
        let piece = piece_size(runs.iter().map(|r| r.len).sum());
        let mut tasks = Vec::new();
        for (i, run) in runs.into_iter().enumerate() {
            run_pieces(i, run, piece, &mut tasks);
        }
        let work = |t: PieceTask<'_>, bounce: &mut Option<AlignedBuf>| -> Result<(), (usize, E)> {
            let run = t.run;
            self.read_task(t, bounce, check).map_err(|e| (run, e))
        };
        pool::run(tasks, &work)
    }

    /// Reads and checks one piece of [`Nvm::read_runs_checked`]: straight into its part
    /// of the destination when it is wanted whole and can be read there, else through
    /// `bounce`, the checked bytes then copied to the part.
    fn read_task<E: From<NvmError>>(
        &self,
        t: PieceTask<'_>,
        bounce: &mut Option<AlignedBuf>,
        check: &RunCheck<'_, E>,
    ) -> Result<(), E> {
        let PieceTask {
            run,
            offset,
            at,
            n,
            from,
            part,
        } = t;
        let straight = from == 0 && part.len() == n && self.reads_into(part);
        if straight {
            self.read_aligned(offset + at, part)?;
            return check(run, at, part);
        }
        let bytes = self.read_block_piece(offset + at, n, bounce)?;
        check(run, at, bytes)?;
        part.copy_from_slice(&bytes[from..from + part.len()]);
        Ok(())
    }

    /// Whether an uncached read of whole blocks may land in `buf` itself: a direct read
    /// needs its address aligned; the other modes read into any buffer.
    fn reads_into(&self, buf: &[u8]) -> bool {
        self.media_reads() == MediaReads::Cached
            || self.mode.load(Ordering::Relaxed) != MODE_DIRECT
            || (buf.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGNMENT)
    }

    /// Reads `n` bytes at the aligned `at` into `bounce` (grown as needed), as an
    /// uncached read does: direct, or by `pread` and `POSIX_FADV_DONTNEED`.
    fn read_block_piece<'b>(
        &self,
        at: u64,
        n: usize,
        bounce: &'b mut Option<AlignedBuf>,
    ) -> Result<&'b [u8], NvmError> {
        if bounce.as_ref().is_none_or(|b| b.len < n) {
            *bounce = Some(AlignedBuf::new(n.max(DIRECT_PIECE_SIZE)));
        }
        let chunk = &mut bounce.as_mut().expect("set above").as_mut()[..n];
        self.read_aligned(at, chunk)?;
        Ok(chunk)
    }

    /// One media read of whole blocks at `at` into `buf` (its address aligned when the
    /// read is direct), as an uncached read does: direct, or by `pread` and
    /// `POSIX_FADV_DONTNEED`, or through the page cache under [`MediaReads::Cached`].
    /// Counted in [`Nvm::read_stats`].
    fn read_aligned(&self, at: u64, buf: &mut [u8]) -> Result<(), NvmError> {
        let _counted = self.stats.start();
        if self.media_reads() == MediaReads::Cached {
            return self.read_at(at, buf);
        }
        if let (MODE_DIRECT, Some(direct)) = (self.mode.load(Ordering::Relaxed), &self.direct) {
            match direct.read_exact_at(buf, at) {
                Ok(()) => return Ok(()),
                Err(source) if source.raw_os_error() == Some(libc::EINVAL) => {
                    self.mode.store(MODE_FADVISE, Ordering::Relaxed);
                }
                Err(source) => return Err(self.read_error(at, buf.len(), source)),
            }
        }
        self.read_fadvise(at, buf)
    }

    /// The media reads of queued uncached reads since open: how many, and the most
    /// that were in flight at once.
    pub fn read_stats(&self) -> MediaReadStats {
        MediaReadStats {
            reads: self.stats.reads.load(Ordering::Relaxed),
            in_flight_max: self.stats.in_flight_max.load(Ordering::Relaxed),
        }
    }

    /// Checks that `len` bytes at `offset` lie inside the namespace.
    pub fn check_range(&self, offset: u64, len: usize) -> Result<(), NvmError> {
        let len = len as u64;
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(NvmError::OutOfRange {
                offset,
                len,
                size_bytes: self.size_bytes,
            }),
        }
    }

    /// Decides the uncached mode once: an aligned direct read of block 0 must succeed.
    fn probe_direct(&self) {
        let ok = match &self.direct {
            Some(direct) => {
                let mut bounce = AlignedBuf::new(DIRECT_IO_ALIGNMENT);
                direct.read_exact_at(bounce.as_mut(), 0).is_ok()
            }
            None => false,
        };
        if !ok {
            self.mode.store(MODE_FADVISE, Ordering::Relaxed);
        }
    }

    /// One uncached read through `O_DIRECT`, queued: the range, widened to aligned
    /// boundaries, is cut into pieces of [`DIRECT_PIECE_SIZE`] at aligned file offsets,
    /// which the caller and the reader pool read at once (see the module docs).
    fn read_direct(&self, direct: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let pieces = direct_pieces(offset, buf);
        let work = |(at, skip, dst): (u64, usize, &mut [u8]), bounce: &mut Option<AlignedBuf>| {
            let _counted = self.stats.start();
            read_piece(direct, at, skip, dst, bounce)
        };
        pool::run(pieces, &work)
    }

    /// One uncached read by `pread` and `POSIX_FADV_DONTNEED`.
    fn read_fadvise(&self, offset: u64, buf: &mut [u8]) -> Result<(), NvmError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| self.read_error(offset, buf.len(), source))?;
        // The advice is best effort: its failure loses nothing but the eviction.
        // SAFETY: posix_fadvise reads no memory of ours; the descriptor is valid for the
        // lifetime of `self.file`, and offsets are within the image (checked above), so
        // they fit in off_t (NVM_SIZE_MAX < i64::MAX).
        let _ = unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                buf.len() as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        Ok(())
    }

    fn read_error(&self, offset: u64, len: usize, source: io::Error) -> NvmError {
        NvmError::Read {
            path: self.path.clone(),
            offset,
            len: len as u64,
            source,
        }
    }

    /// Test hook: from now on, remember what each write overwrites until the next sync.
    #[cfg(test)]
    pub(crate) fn track_power_loss(&self) {
        *self.undo.lock().expect("undo lock") = Some(Vec::new());
    }

    #[cfg(test)]
    fn record_undo(&self, offset: u64, len: usize) {
        if let Some(log) = self.undo.lock().expect("undo lock").as_mut() {
            let mut old = vec![0u8; len];
            self.file
                .read_exact_at(&mut old, offset)
                .expect("undo read");
            log.push((offset, old));
        }
    }

    /// Test hook: simulates a power loss, as if the writes since the last sync had reached
    /// the media or not. `keep(i)` decides for the `i`-th such write (in order); a write
    /// not kept is undone, newest first, so the image holds exactly the synced content
    /// plus the kept writes wherever no later undone write overlaps them.
    #[cfg(test)]
    pub(crate) fn simulate_power_loss(&self, mut keep: impl FnMut(usize) -> bool) {
        let log = self
            .undo
            .lock()
            .expect("undo lock")
            .take()
            .unwrap_or_default();
        let decisions: Vec<bool> = (0..log.len()).map(&mut keep).collect();
        for (i, (offset, old)) in log.iter().enumerate().rev() {
            if !decisions[i] {
                self.file.write_all_at(old, *offset).expect("undo write");
            }
        }
    }
}

thread_local! {
    /// The bounce buffer of this thread's unaligned direct reads, kept from one read to
    /// the next: a transfer worker reads many column blocks, and a fresh zeroed buffer a
    /// read (a mapping of its own, faulted in and unmapped again) cost more than the copy.
    static BOUNCE: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// A heap buffer whose usable part starts at a [`DIRECT_IO_ALIGNMENT`] boundary. Built
/// from an over-allocated `Vec`, so it needs no unsafe allocation code.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + DIRECT_IO_ALIGNMENT];
        let misalignment = storage.as_ptr() as usize % DIRECT_IO_ALIGNMENT;
        let start = (DIRECT_IO_ALIGNMENT - misalignment) % DIRECT_IO_ALIGNMENT;
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// The pieces of a direct read of `buf.len()` bytes at `offset`: each an aligned file
/// offset (the piece's start, widened down to the alignment), how far into that the
/// wanted bytes start, and the part of `buf` it fills. Piece boundaries inside the range fall on multiples of the piece size
/// from the aligned start, so every aligned piece of an aligned buffer needs no bounce.
fn direct_pieces(offset: u64, buf: &mut [u8]) -> Vec<(u64, usize, &mut [u8])> {
    let align = DIRECT_IO_ALIGNMENT as u64;
    let piece = piece_size(buf.len() as u64);
    let start_aligned = offset / align * align;
    let end = offset + buf.len() as u64;
    let mut pieces = Vec::with_capacity((end - start_aligned).div_ceil(piece) as usize);
    let mut rest = buf;
    let mut at = start_aligned;
    while at < end {
        let piece_end = (at + piece).min(end);
        let from = at.max(offset);
        let (dst, tail) = rest.split_at_mut((piece_end - from) as usize);
        pieces.push((at, (from - at) as usize, dst));
        rest = tail;
        at = piece_end;
    }
    pieces
}

/// The piece size of a direct read of `len` bytes: [`DIRECT_PIECE_SIZE`], or less for a
/// read too short to fill the queue with such pieces (a 2 MiB column slice is 8 pieces
/// of 256 KiB, not 4 of 512 KiB, so all [`DIRECT_QUEUE_DEPTH`] reads are in flight), but
/// never under [`DIRECT_PIECE_MIN`]; always a multiple of the alignment.
fn piece_size(len: u64) -> u64 {
    let align = DIRECT_IO_ALIGNMENT as u64;
    let even = len
        .div_ceil(DIRECT_QUEUE_DEPTH as u64)
        .next_multiple_of(align);
    even.clamp(DIRECT_PIECE_MIN as u64, DIRECT_PIECE_SIZE as u64)
}

/// Reads one piece: `dst.len()` bytes at `at + skip`, where `at` is aligned and `skip`
/// is non-zero only for a first piece that starts unaligned. Straight into `dst` when it
/// starts at `at` and its address and length are aligned, otherwise through `bounce`
/// (the thread's, grown to the largest piece it has read, at most [`BOUNCE_SIZE_MAX`]).
fn read_piece(
    direct: &File,
    at: u64,
    skip: usize,
    dst: &mut [u8],
    bounce: &mut Option<AlignedBuf>,
) -> io::Result<()> {
    let aligned = skip == 0
        && (dst.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGNMENT)
        && dst.len().is_multiple_of(DIRECT_IO_ALIGNMENT);
    if aligned {
        return direct.read_exact_at(dst, at);
    }
    // The image size is a multiple of the alignment, so the widened range stays inside
    // the file.
    let span = (skip + dst.len()).next_multiple_of(DIRECT_IO_ALIGNMENT);
    if bounce.as_ref().is_none_or(|b| b.len < span) {
        // Grown to the largest piece seen, at most a maximal one: most reads need far
        // less than BOUNCE_SIZE_MAX.
        *bounce = Some(AlignedBuf::new(span.min(BOUNCE_SIZE_MAX)));
    }
    let bounce = bounce.as_mut().expect("set above");
    let chunk = &mut bounce.as_mut()[..span];
    direct.read_exact_at(chunk, at)?;
    dst.copy_from_slice(&chunk[skip..skip + dst.len()]);
    Ok(())
}

/// The reader pool: [`DIRECT_QUEUE_DEPTH`]` - 1` threads started at the first queued read
/// and kept for the life of the process, asleep on a condition variable between reads. A
/// queued read puts tickets to its batch of pieces on the pool's queue, then reads pieces
/// itself; a reader that takes a ticket reads pieces of that batch until none are left.
/// The caller, done with its own, takes back the tickets no reader took yet and waits for
/// the readers still in its batch: a read never waits for a thread to start, and no batch
/// outlives its caller's call.
mod pool {
    use std::any::Any;
    use std::collections::VecDeque;
    use std::panic::AssertUnwindSafe;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

    use super::{AlignedBuf, BOUNCE, DIRECT_QUEUE_DEPTH};

    /// What a piece's reader does with it; its bounce buffer is the thread's own.
    pub(super) type Work<'a, T, E> =
        dyn Fn(T, &mut Option<AlignedBuf>) -> Result<(), E> + Sync + 'a;

    /// A batch a reader can help with: it takes pieces until none are left, catching
    /// every panic (a reader thread never unwinds).
    trait Help: Sync {
        fn help(&self);
    }

    /// Tickets of one batch still out: the batch may go once none are.
    struct Latch {
        left: Mutex<usize>,
        zero: Condvar,
    }

    impl Latch {
        fn count_down(&self, n: usize) {
            let mut left = lock(&self.left);
            *left -= n;
            if *left == 0 {
                self.zero.notify_all();
            }
        }

        fn wait(&self) {
            let mut left = lock(&self.left);
            while *left > 0 {
                left = self.zero.wait(left).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// A reader's invitation to a batch. The latch is shared, not part of the batch, so
    /// counting it down touches nothing the caller may already have freed.
    struct Ticket {
        batch: *const (dyn Help + 'static),
        latch: Arc<Latch>,
    }

    // SAFETY: `batch` points to a `Help`, which is `Sync`, so using it from another
    // thread is sound; it stays valid while the ticket's latch is above zero, and the
    // latch is counted down for this ticket only after its last use (see `run`).
    unsafe impl Send for Ticket {}

    struct Pool {
        queue: Mutex<VecDeque<Ticket>>,
        ready: Condvar,
        threads: usize,
    }

    static POOL: OnceLock<Pool> = OnceLock::new();

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pool, its threads started at the first call. A thread that cannot be started
    /// (the system is out of threads) is simply not there: callers read their own pieces.
    fn pool() -> &'static Pool {
        POOL.get_or_init(|| {
            let threads = (1..DIRECT_QUEUE_DEPTH)
                .filter(|i| {
                    std::thread::Builder::new()
                        .name(format!("csx-nvm-read-{i}"))
                        .spawn(reader)
                        .is_ok()
                })
                .count();
            Pool {
                queue: Mutex::new(VecDeque::new()),
                ready: Condvar::new(),
                threads,
            }
        })
    }

    fn reader() {
        let pool = pool();
        loop {
            let ticket = {
                let mut queue = lock(&pool.queue);
                loop {
                    if let Some(t) = queue.pop_front() {
                        break t;
                    }
                    queue = pool
                        .ready
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            // SAFETY: the batch is alive: its caller waits in `Recall::drop` until this
            // ticket's latch is counted down, which happens only below, after `help`.
            unsafe { &*ticket.batch }.help();
            ticket.latch.count_down(1);
        }
    }

    /// A failed piece: its error, or the panic of its work.
    enum Failure<E> {
        Error(E),
        Panic(Box<dyn Any + Send>),
    }

    struct Batch<'a, T, E> {
        tasks: Mutex<std::vec::IntoIter<T>>,
        work: &'a Work<'a, T, E>,
        failed: AtomicBool,
        failure: Mutex<Option<Failure<E>>>,
    }

    impl<T: Send, E: Send> Help for Batch<'_, T, E> {
        fn help(&self) {
            BOUNCE.with_borrow_mut(|bounce| loop {
                if self.failed.load(Ordering::Relaxed) {
                    return;
                }
                let Some(task) = lock(&self.tasks).next() else {
                    return;
                };
                let failure = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                    (self.work)(task, bounce)
                })) {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => Failure::Error(e),
                    Err(panic) => Failure::Panic(panic),
                };
                self.failed.store(true, Ordering::Relaxed);
                lock(&self.failure).get_or_insert(failure);
                return;
            });
        }
    }

    /// Takes back a batch's tickets no reader took and waits for the readers in it; on
    /// drop, so even an unwinding caller never leaves a reader with a dangling batch.
    struct Recall {
        pool: &'static Pool,
        latch: Arc<Latch>,
    }

    impl Drop for Recall {
        fn drop(&mut self) {
            let untaken = {
                let mut queue = lock(&self.pool.queue);
                let before = queue.len();
                queue.retain(|t| !Arc::ptr_eq(&t.latch, &self.latch));
                before - queue.len()
            };
            if untaken > 0 {
                self.latch.count_down(untaken);
            }
            self.latch.wait();
        }
    }

    /// Runs `work` on every task, on the caller and up to [`DIRECT_QUEUE_DEPTH`]` - 1`
    /// readers at once; the first failure stops the batch and is returned (a panic in
    /// `work` is re-raised here).
    pub(super) fn run<T: Send, E: Send>(tasks: Vec<T>, work: &Work<'_, T, E>) -> Result<(), E> {
        let helpers = tasks.len().min(DIRECT_QUEUE_DEPTH).saturating_sub(1);
        let batch = Batch {
            tasks: Mutex::new(tasks.into_iter()),
            work,
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        };
        let recall = (helpers > 0).then(|| invite(&batch, helpers)).flatten();
        batch.help();
        drop(recall);
        match batch
            .failure
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            None => Ok(()),
            Some(Failure::Error(e)) => Err(e),
            Some(Failure::Panic(panic)) => std::panic::resume_unwind(panic),
        }
    }

    /// Puts up to `helpers` tickets to `batch` on the pool's queue.
    fn invite<T: Send, E: Send>(batch: &Batch<'_, T, E>, helpers: usize) -> Option<Recall> {
        let pool = pool();
        let helpers = helpers.min(pool.threads);
        if helpers == 0 {
            return None;
        }
        let batch: *const (dyn Help + '_) = batch;
        // SAFETY: only the lifetime is erased. The `Recall` returned is dropped by `run`
        // before the batch, and its drop returns only when no ticket to the batch is
        // left in the queue or in a reader.
        let batch: *const (dyn Help + 'static) = unsafe { std::mem::transmute(batch) };
        let latch = Arc::new(Latch {
            left: Mutex::new(helpers),
            zero: Condvar::new(),
        });
        let mut queue = lock(&pool.queue);
        for _ in 0..helpers {
            queue.push_back(Ticket {
                batch,
                latch: latch.clone(),
            });
        }
        drop(queue);
        if helpers == 1 {
            pool.ready.notify_one();
        } else {
            pool.ready.notify_all();
        }
        Some(Recall { pool, latch })
    }
}

fn check_size(path: &Path, size_bytes: u64) -> Result<(), NvmError> {
    if size_bytes == 0 || size_bytes > NVM_SIZE_MAX {
        return Err(NvmError::SizeOutOfRange {
            path: path.to_path_buf(),
            size_bytes,
            min: BLOCK_SIZE,
            max: NVM_SIZE_MAX,
        });
    }
    if !size_bytes.is_multiple_of(BLOCK_SIZE) {
        return Err(NvmError::SizeNotBlockMultiple {
            path: path.to_path_buf(),
            size_bytes,
            block_size: BLOCK_SIZE,
        });
    }
    Ok(())
}

fn io_error(path: &Path, op: &'static str, source: io::Error) -> NvmError {
    NvmError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// The mode of a state file the device creates: its owner's alone. The image and the
/// metadata hold every stored byte; another local user goes through a daemon's checks.
pub(crate) const PRIVATE_FILE_MODE: u32 = 0o600;

/// Opens `path` with `options` as a file the device creates: mode [`PRIVATE_FILE_MODE`]
/// exactly, whatever the umask (which masks the mode given at open) or the mode a stale
/// file of that name had.
pub(crate) fn open_private(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::PermissionsExt as _;
    let file = options.mode(PRIVATE_FILE_MODE).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))?;
    Ok(file)
}

/// Makes a directory entry created in `path`'s parent durable.
pub(crate) fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn create_write_read_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvm.img");
        let nvm = Nvm::create(&path, 16 * BLOCK_SIZE).unwrap();
        assert_eq!(nvm.size(), 16 * BLOCK_SIZE);
        assert_eq!(nvm.block_count(), 16);
        let data = pattern(10_000, 7);
        nvm.write_at(123, &data).unwrap();
        nvm.sync().unwrap();
        drop(nvm);

        let nvm = Nvm::open(&path).unwrap();
        let mut back = vec![0u8; data.len()];
        nvm.read_at(123, &mut back).unwrap();
        assert_eq!(back, data);
        let mut zeros = vec![1u8; 100];
        nvm.read_at(20_000, &mut zeros).unwrap();
        assert!(zeros.iter().all(|&b| b == 0));
    }

    #[test]
    fn uncached_reads_match_cached_reads_at_any_alignment() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 1000 * BLOCK_SIZE).unwrap();
        let data = pattern(1000 * BLOCK_SIZE as usize, 3);
        nvm.write_at(0, &data).unwrap();
        // Not synced: a direct read must still see the buffered writes.
        let cases: &[(u64, usize)] = &[
            (0, 0),
            (0, 1),
            (1, 4095),
            (4095, 2),
            (4096, 4096),
            (5000, 3 * BOUNCE_SIZE_MAX + 17),
            (1000 * BLOCK_SIZE - 1, 1),
        ];
        for &(offset, len) in cases {
            let mut got = vec![0u8; len];
            nvm.read_at_uncached(offset, &mut got).unwrap();
            assert_eq!(
                got,
                &data[offset as usize..offset as usize + len],
                "{offset} {len}"
            );
        }
        // An aligned buffer at an aligned offset is read without the bounce buffer.
        let mut aligned = AlignedBuf::new(8 * DIRECT_IO_ALIGNMENT);
        nvm.read_at_uncached(3 * BLOCK_SIZE, aligned.as_mut())
            .unwrap();
        let expected = &data[3 * BLOCK_SIZE as usize..11 * BLOCK_SIZE as usize];
        assert_eq!(aligned.as_mut(), expected);
        // This machine's ext4 accepts O_DIRECT; other file systems fall back.
        let _ = nvm.uncached_mode();
    }

    #[test]
    fn queued_direct_reads_cover_every_piece_boundary() {
        let piece = DIRECT_PIECE_SIZE as u64;
        let blocks = (20 * piece) / BLOCK_SIZE;
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), blocks * BLOCK_SIZE).unwrap();
        let data = pattern((blocks * BLOCK_SIZE) as usize, 9);
        nvm.write_at(0, &data).unwrap();
        nvm.sync().unwrap();
        // More pieces than the queue depth, starting and ending on and off piece and
        // alignment boundaries, into buffers at every misalignment.
        let cases: &[(u64, usize)] = &[
            (0, (12 * piece) as usize),
            (piece - 1, (10 * piece) as usize + 2),
            (4096, (DIRECT_QUEUE_DEPTH as u64 * piece) as usize),
            (777, (19 * piece) as usize),
            (piece + 4095, (piece as usize) + 1),
            // Reads cut into smaller pieces to fill the queue.
            (4096, 2 << 20),
            (123, (1 << 20) + 5),
        ];
        assert_eq!(piece_size(2 << 20), 256 << 10);
        assert_eq!(piece_size(64 << 20), piece);
        assert_eq!(piece_size(4096), DIRECT_PIECE_MIN as u64);
        for &(offset, len) in cases {
            for shift in [0usize, 1, 4096] {
                let mut storage = vec![0u8; len + shift];
                let got = &mut storage[shift..];
                nvm.read_at_uncached(offset, got).unwrap();
                assert!(
                    got == &data[offset as usize..offset as usize + len],
                    "{offset} {len} {shift}"
                );
            }
        }
        // The pieces tile the buffer exactly, in order, each within one piece.
        let mut buf = vec![0u8; (9 * piece) as usize + 10];
        let len = buf.len();
        let pieces = direct_pieces(piece - 5, &mut buf);
        assert_eq!(pieces.len(), 10);
        let first = (piece - 4096, 4091, (piece - 4091) as usize);
        assert_eq!((pieces[0].0, pieces[0].1, pieces[0].2.len()), first);
        assert_eq!((pieces[1].0, pieces[1].1), (2 * piece - 4096, 0));
        assert_eq!(pieces.iter().map(|p| p.2.len()).sum::<usize>(), len);
        assert!(pieces.iter().all(|p| p.1 + p.2.len() <= DIRECT_PIECE_SIZE));
    }

    #[test]
    fn checked_block_reads_hand_every_piece_over_once_and_copy_the_wanted_bytes() {
        let piece = DIRECT_PIECE_SIZE as u64;
        let blocks = (12 * piece) / BLOCK_SIZE;
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), blocks * BLOCK_SIZE).unwrap();
        let data = pattern((blocks * BLOCK_SIZE) as usize, 5);
        nvm.write_at(0, &data).unwrap();
        let cases: &[(u64, u64, usize, usize)] = &[
            (0, 12 * piece, 0, (12 * piece) as usize),
            (4096, 10 * piece, 4095, (9 * piece) as usize + 3),
            (piece, 4096, 17, 100),
            (8192, 3 * 4096, 0, 0),
            (0, 2 << 20, (2 << 20) - 1, 1),
        ];
        for &(offset, len, skip, n) in cases {
            let seen = std::sync::Mutex::new(Vec::new());
            let mut got = vec![0u8; n];
            let check = |at: u64, bytes: &[u8]| -> Result<(), NvmError> {
                let from = (offset + at) as usize;
                assert_eq!(bytes, &data[from..from + bytes.len()], "piece at {at}");
                seen.lock().unwrap().push((at, bytes.len() as u64));
                Ok(())
            };
            nvm.read_blocks_checked((offset, len), (skip, &mut got), &check)
                .unwrap();
            let from = offset as usize + skip;
            assert!(got == data[from..from + n], "{offset} {len} {skip} {n}");
            let mut seen = seen.into_inner().unwrap();
            seen.sort_unstable();
            let mut next = 0;
            for (at, l) in seen {
                assert_eq!(at, next, "pieces tile the range");
                next = at + l;
            }
            assert_eq!(next, len);
        }
    }

    #[test]
    fn a_refused_or_panicking_piece_fails_the_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 1024 * BLOCK_SIZE).unwrap();
        let len = 1024 * BLOCK_SIZE;
        let mut got = vec![0u8; len as usize];
        let refuse = |at: u64, _: &[u8]| -> Result<(), NvmError> {
            if at == 2 * DIRECT_PIECE_SIZE as u64 {
                Err(NvmError::OutOfRange {
                    offset: at,
                    len: 1,
                    size_bytes: 0,
                })
            } else {
                Ok(())
            }
        };
        let err = nvm
            .read_blocks_checked((0, len), (0, &mut got), &refuse)
            .unwrap_err();
        assert!(
            matches!(err, NvmError::OutOfRange { offset, .. } if offset == 2 * DIRECT_PIECE_SIZE as u64)
        );
        let panics = |at: u64, _: &[u8]| -> Result<(), NvmError> {
            assert!(at != DIRECT_PIECE_SIZE as u64, "a check that panics");
            Ok(())
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            nvm.read_blocks_checked((0, len), (0, &mut got), &panics)
        }));
        assert!(caught.is_err(), "the panic reaches the caller");
        // The readers survive both: the next read is whole.
        nvm.write_at(0, &pattern(len as usize, 8)).unwrap();
        nvm.read_at_uncached(0, &mut got).unwrap();
        assert!(got == pattern(len as usize, 8));
        // Out of range and misaligned requests are refused before any read.
        assert!(nvm
            .read_blocks_checked((len, BLOCK_SIZE), (0, &mut []), &refuse)
            .is_err());
    }

    /// Runs of `len` bytes at `starts`, each wanted from its byte 5 into its buffer.
    fn runs_from_byte_5<'a>(
        starts: &[u64],
        len: u64,
        bufs: &'a mut [Vec<u8>],
    ) -> Vec<BlockRun<'a>> {
        (starts.iter().zip(bufs.iter_mut()))
            .map(|(&offset, dst)| BlockRun {
                offset,
                len,
                skip: 5,
                dst,
            })
            .collect()
    }

    /// Runs of one batch are in flight together: the caller's check of run 0 waits
    /// until a reader has checked run 5 (it would wait for ever if the runs were read
    /// one after another). Every byte lands, the reads are counted, never more than
    /// the queue depth in flight, and a refused piece names its run.
    #[test]
    fn several_runs_are_read_as_one_batch() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = 2048u64;
        let nvm = Nvm::create(dir.path().join("nvm.img"), blocks * BLOCK_SIZE).unwrap();
        let data = pattern((blocks * BLOCK_SIZE) as usize, 9);
        nvm.write_at(0, &data).unwrap();
        // Six runs of 40 blocks, 100 blocks apart, each wanted from byte 5 of it.
        let starts: Vec<u64> = (0..6).map(|i| (i * 100 + 3) * BLOCK_SIZE).collect();
        let len = 40 * BLOCK_SIZE;
        let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; len as usize - 5]; 6];
        let seen_last = (std::sync::Mutex::new(false), std::sync::Condvar::new());
        let check = |run: usize, _: u64, bytes: &[u8]| -> Result<(), NvmError> {
            let (seen, cv) = &seen_last;
            if run == 5 {
                *seen.lock().unwrap() = true;
                cv.notify_all();
            }
            if run == 0 {
                // A guard against a hang, not a time bound: the readers pick run 5 up
                // as soon as they are scheduled.
                let guard = seen.lock().unwrap();
                let (guard, _) = cv
                    .wait_timeout_while(guard, std::time::Duration::from_secs(300), |s| !*s)
                    .unwrap();
                assert!(*guard, "run 5 was not read while run 0 was being checked");
            }
            assert!(!bytes.is_empty());
            Ok(())
        };
        let before = nvm.read_stats();
        let runs = runs_from_byte_5(&starts, len, &mut bufs);
        nvm.read_runs_checked(runs, &check).unwrap();
        for (&offset, got) in starts.iter().zip(&bufs) {
            let from = offset as usize + 5;
            assert!(got[..] == data[from..from + got.len()], "run at {offset}");
        }
        let after = nvm.read_stats();
        // 240 blocks in pieces of the smallest size: 2 pieces a run.
        let piece = piece_size(6 * len);
        assert_eq!(after.reads - before.reads, 6 * len.div_ceil(piece));
        assert!(
            after.in_flight_max <= DIRECT_QUEUE_DEPTH as u64,
            "{after:?}"
        );

        let refuse = |run: usize, _: u64, _: &[u8]| -> Result<(), NvmError> {
            match run {
                3 => Err(NvmError::OutOfRange {
                    offset: 3,
                    len: 1,
                    size_bytes: 0,
                }),
                _ => Ok(()),
            }
        };
        let runs = runs_from_byte_5(&starts, len, &mut bufs);
        let (run, e) = nvm.read_runs_checked(runs, &refuse).unwrap_err();
        assert_eq!(run, 3);
        assert!(matches!(e, NvmError::OutOfRange { offset: 3, .. }));
        // A run past the namespace is refused before any read, naming it.
        let mut one = [0u8; 1];
        let runs = vec![
            BlockRun {
                offset: 0,
                len: BLOCK_SIZE,
                skip: 0,
                dst: &mut bufs[0][..1],
            },
            BlockRun {
                offset: blocks * BLOCK_SIZE,
                len: BLOCK_SIZE,
                skip: 0,
                dst: &mut one,
            },
        ];
        let reads = nvm.read_stats().reads;
        let (run, _) = nvm
            .read_runs_checked::<NvmError>(runs, &|_, _, _| Ok(()))
            .unwrap_err();
        assert_eq!((run, nvm.read_stats().reads), (1, reads));
    }

    /// A piece wanted whole lands straight in an aligned destination (no bounce copy):
    /// the check sees the destination's own bytes.
    #[test]
    fn aligned_whole_pieces_are_read_into_the_destination() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 256 * BLOCK_SIZE).unwrap();
        let data = pattern(256 * BLOCK_SIZE as usize, 2);
        nvm.write_at(0, &data).unwrap();
        let mut buf = AlignedBuf::new(64 * BLOCK_SIZE as usize);
        let dst = buf.as_mut();
        let (lo, hi) = (dst.as_ptr() as usize, dst.as_ptr() as usize + dst.len());
        let in_dst = std::sync::atomic::AtomicU64::new(0);
        let check = |_: usize, _: u64, bytes: &[u8]| -> Result<(), NvmError> {
            let p = bytes.as_ptr() as usize;
            if p >= lo && p < hi {
                in_dst.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Ok(())
        };
        let run = BlockRun {
            offset: 8 * BLOCK_SIZE,
            len: 64 * BLOCK_SIZE,
            skip: 0,
            dst,
        };
        nvm.read_runs_checked(vec![run], &check).unwrap();
        assert!(buf.as_mut()[..] == data[8 * 4096..72 * 4096]);
        // Whatever the mode (direct, or fadvise where the file system refuses it).
        assert_eq!(in_dst.load(Ordering::Relaxed), 64 * BLOCK_SIZE);
    }

    #[test]
    fn concurrent_queued_reads_share_the_readers() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = 4096;
        let nvm = Nvm::create(dir.path().join("nvm.img"), blocks * BLOCK_SIZE).unwrap();
        let data = pattern((blocks * BLOCK_SIZE) as usize, 11);
        nvm.write_at(0, &data).unwrap();
        std::thread::scope(|scope| {
            for t in 0..6u64 {
                let (nvm, data) = (&nvm, &data);
                scope.spawn(move || {
                    for round in 0..20u64 {
                        let offset = (t * 997 + round * 4099) % (blocks * BLOCK_SIZE / 2);
                        let len = (3 << 20) + (t as usize * 513);
                        let mut got = vec![0u8; len];
                        nvm.read_at_uncached(offset, &mut got).unwrap();
                        let o = offset as usize;
                        assert!(got == data[o..o + len], "thread {t} round {round}");
                    }
                });
            }
        });
    }

    #[test]
    fn cached_media_reads_see_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 512 * BLOCK_SIZE).unwrap();
        assert_eq!(nvm.media_reads(), MediaReads::Direct);
        nvm.set_media_reads(MediaReads::Cached);
        assert_eq!(nvm.media_reads(), MediaReads::Cached);
        let data = pattern(512 * BLOCK_SIZE as usize, 4);
        nvm.write_at(0, &data).unwrap();
        let mut got = vec![0u8; 300_001];
        nvm.read_at_uncached(4095, &mut got).unwrap();
        assert!(got == data[4095..4095 + got.len()]);
        let ok = |_: u64, _: &[u8]| -> Result<(), NvmError> { Ok(()) };
        nvm.read_blocks_checked((8192, 100 * BLOCK_SIZE), (3, &mut got[..1000]), &ok)
            .unwrap();
        assert!(got[..1000] == data[8195..9195]);
    }

    #[test]
    fn fadvise_fallback_reads_correctly() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 4 * BLOCK_SIZE).unwrap();
        nvm.mode.store(MODE_FADVISE, Ordering::Relaxed);
        assert_eq!(nvm.uncached_mode(), UncachedMode::Fadvise);
        let data = pattern(9000, 1);
        nvm.write_at(10, &data).unwrap();
        let mut got = vec![0u8; 9000];
        nvm.read_at_uncached(10, &mut got).unwrap();
        assert_eq!(got, data);
    }

    #[test]
    fn out_of_range_accesses_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 2 * BLOCK_SIZE).unwrap();
        let mut buf = [0u8; 2];
        let err = nvm.read_at(2 * BLOCK_SIZE - 1, &mut buf).unwrap_err();
        assert!(matches!(
            err,
            NvmError::OutOfRange {
                offset: 8191,
                len: 2,
                size_bytes: 8192
            }
        ));
        assert_eq!(
            err.to_string(),
            "nvm access of 2 bytes at offset 8191 is outside the 8192-byte namespace"
        );
        assert!(nvm.read_at_uncached(u64::MAX, &mut buf).is_err());
        assert!(nvm.write_at(8192, &[1]).is_err());
        nvm.write_at(8192, &[]).unwrap();
        assert_eq!(nvm.file().metadata().unwrap().len(), 8192);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvm.img");
        assert!(matches!(
            Nvm::create(&path, 0),
            Err(NvmError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            Nvm::create(&path, NVM_SIZE_MAX + BLOCK_SIZE),
            Err(NvmError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            Nvm::create(&path, 5000),
            Err(NvmError::SizeNotBlockMultiple { .. })
        ));
        Nvm::create(&path, BLOCK_SIZE).unwrap();
        assert!(matches!(
            Nvm::create(&path, BLOCK_SIZE),
            Err(NvmError::AlreadyExists { .. })
        ));
        // A truncated image is refused on open, naming the file.
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        let err = Nvm::open(&path).unwrap_err();
        assert!(err.to_string().contains("nvm.img"), "{err}");
        assert!(matches!(
            err,
            NvmError::SizeNotBlockMultiple {
                size_bytes: 100,
                ..
            }
        ));
        assert!(matches!(
            Nvm::open(dir.path().join("missing.img")),
            Err(NvmError::Io { op: "open", .. })
        ));
    }

    #[test]
    fn power_loss_undoes_unsynced_writes() {
        let dir = tempfile::tempdir().unwrap();
        let nvm = Nvm::create(dir.path().join("nvm.img"), 4 * BLOCK_SIZE).unwrap();
        nvm.track_power_loss();
        nvm.write_at(0, &[1; 10]).unwrap();
        nvm.sync().unwrap();
        nvm.write_at(0, &[2; 10]).unwrap();
        nvm.write_at(5, &[3; 10]).unwrap();
        nvm.simulate_power_loss(|_| false);
        let mut got = [0u8; 16];
        nvm.read_at(0, &mut got).unwrap();
        assert_eq!(got, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]);
    }
}
