//! Streaming whole files between the host's file system and the device's file store.
//!
//! A put reads the local file chunk by chunk (each within the protocol's
//! `FILE_IO_SIZE_MAX`) and keeps a few chunks in flight while it reads the next; a get
//! does the reverse. Neither ever holds more than `PIPELINE_DEPTH` chunks in memory,
//! whatever the file's size.
//!
//! # Replace by rename
//!
//! Both directions replace a file whole or not at all:
//!
//! - A put writes a temporary file under [`PARTIAL_DIR`] on the device, renames it over
//!   the target, then flushes the device. The file store commits a flush's metadata in one
//!   atomic transaction after its data is on the media, so a crash of the client, the
//!   daemon or the machine at any point leaves the old file or the whole new one, and an
//!   acknowledged put (one that returned `Ok`) survives any of them. A put that fails
//!   removes its temporary; one whose process is killed leaves it in [`PARTIAL_DIR`],
//!   where the file store removes it the next time it opens.
//! - A get to a local regular file writes `.NAME.csx-partial-PID` next to it, syncs it,
//!   renames it over `NAME` and syncs the directory: `NAME` is never a partial file. A
//!   local path that is not a regular file (a pipe, a terminal, `/dev/stdout`) is written
//!   in place and not synced.

use std::cell::RefCell;
use std::fs::File;
use std::hash::{BuildHasher as _, Hasher as _};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use csx_proto::limits::{FILE_IO_SIZE_MAX, PARTIAL_DIR};
use csx_proto::{EntryKind, Op, Reply, WriteMode};

use crate::device::{Device, Progress};
use crate::error::CallError;

/// Why a put or get failed: on the host's side or the device's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileTransferError {
    #[error("cannot {op} {}: {source}", path.display())]
    Local {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The device path names a directory; a put replaces files only.
    #[error("{path} is a directory on the device; put names the file to write, e.g. {path}/NAME")]
    IsADirectory { path: String },
    #[error(transparent)]
    Call(#[from] CallError),
}

fn local<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FileTransferError + 'a {
    move |source| FileTransferError::Local {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Reads up to `len` bytes, fewer only at the end of the input.
fn read_chunk(input: &mut dyn Read, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    input.take(len as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// A device path no other writer uses: in [`PARTIAL_DIR`], named by this process, the
/// time and a per-process random key (another host's process may share the pid).
pub(crate) fn partial_path() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "{PARTIAL_DIR}/{:x}-{nanos:x}-{random:016x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Refuses a put whose target is a directory before any byte moves.
pub(crate) fn check_not_dir(device: &Device, path: &str) -> Result<(), FileTransferError> {
    match device.path_stat(path) {
        Ok(e) if e.kind == EntryKind::Dir => Err(FileTransferError::IsADirectory {
            path: path.to_string(),
        }),
        // Missing, a file, or unanswerable: the write itself reports what matters.
        _ => Ok(()),
    }
}

/// Renames the written temporary over `path`, or removes it when `written` failed.
pub(crate) fn commit_partial<T, E: From<CallError>>(
    device: &Device,
    tmp: &str,
    path: &str,
    written: Result<T, E>,
) -> Result<T, E> {
    let value = match written {
        Ok(v) => v,
        Err(e) => {
            // Best effort: a temporary left behind is removed when the store next opens.
            let _ = device.delete_file(tmp);
            return Err(e);
        }
    };
    if let Err(e) = device.rename(tmp, path) {
        let _ = device.delete_file(tmp);
        return Err(e.into());
    }
    Ok(value)
}

pub(crate) fn put(
    device: &Device,
    local_path: &Path,
    path: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let bytes = put_unflushed(device, local_path, path, progress)?;
    device.flush()?;
    Ok(bytes)
}

/// [`put`] without the flush: replaced by rename, durable at the caller's next flush.
pub(crate) fn put_unflushed(
    device: &Device,
    local_path: &Path,
    path: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let mut file = File::open(local_path).map_err(local("open", local_path))?;
    let meta = file.metadata().map_err(local("stat", local_path))?;
    let total_bytes = if meta.is_file() { meta.len() } else { 0 };
    replace_from(device, &mut file, local_path, total_bytes, path, progress)
}

/// Streams `input` (named `local_path` in errors; `total_bytes` long as far as anyone
/// knows, 0 for a stream) into the device file `path`, replacing it by rename, and flushes
/// the device: on `Ok` the new file is durable.
pub(crate) fn put_from(
    device: &Device,
    input: &mut dyn Read,
    local_path: &Path,
    total_bytes: u64,
    path: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let bytes = replace_from(device, input, local_path, total_bytes, path, progress)?;
    device.flush()?;
    Ok(bytes)
}

/// Streams `input` into a temporary device file and renames it over `path`, without
/// flushing.
fn replace_from(
    device: &Device,
    input: &mut dyn Read,
    local_path: &Path,
    total_bytes: u64,
    path: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    check_not_dir(device, path)?;
    let tmp = partial_path();
    let written = write_stream(device, input, local_path, total_bytes, &tmp, progress);
    commit_partial(device, &tmp, path, written)
}

/// Writes `input` into the device file `path` (truncating it first).
fn write_stream(
    device: &Device,
    input: &mut dyn Read,
    local_path: &Path,
    total_bytes: u64,
    path: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let chunk = FILE_IO_SIZE_MAX as usize;
    // The first chunk truncates and completes alone: chunks in flight together may run
    // in any order, and none may land before the truncation.
    let first = read_chunk(input, chunk).map_err(local("read", local_path))?;
    let mut done_bytes = first.len() as u64;
    device.client().call_ok(Op::FileWrite {
        path: path.to_string(),
        offset: 0,
        data: first,
        mode: WriteMode::Truncate,
    })?;
    progress(Progress {
        done_bytes,
        total_bytes: total_bytes.max(done_bytes),
    });
    if done_bytes < chunk as u64 {
        return Ok(done_bytes);
    }
    let read_error: RefCell<Option<io::Error>> = RefCell::new(None);
    let mut offset = done_bytes;
    let ops = std::iter::from_fn(|| match read_chunk(input, chunk) {
        Ok(data) if data.is_empty() => None,
        Ok(data) => {
            let op = Op::FileWrite {
                path: path.to_string(),
                offset,
                data,
                mode: WriteMode::Write,
            };
            offset += op.data_len() as u64;
            Some(op)
        }
        Err(e) => {
            *read_error.borrow_mut() = Some(e);
            None
        }
    });
    device.pipeline(ops, |_, c| {
        done_bytes += c.value;
        progress(Progress {
            done_bytes,
            total_bytes: total_bytes.max(done_bytes),
        });
        Ok(())
    })?;
    if let Some(e) = read_error.into_inner() {
        return Err(local("read", local_path)(e));
    }
    Ok(done_bytes)
}

/// The temporary a get writes before renaming it over `local`: `.NAME.csx-partial-PID`
/// in the same directory (a rename does not cross file systems).
fn local_partial(local: &Path) -> PathBuf {
    let name = local
        .file_name()
        .map_or_else(|| "get".into(), |n| n.to_string_lossy().into_owned());
    local.with_file_name(format!(".{name}.csx-partial-{}", std::process::id()))
}

pub(crate) fn get(
    device: &Device,
    path: &str,
    local_path: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    // Something other than a regular file (a pipe, a terminal, /dev/stdout): written in
    // place, as a stream; there is nothing to replace and nothing to sync.
    if std::fs::metadata(local_path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .open(local_path)
            .map_err(local("open", local_path))?;
        let bytes = get_into(device, path, &mut out, local_path, progress)?;
        out.flush().map_err(local("write", local_path))?;
        return Ok(bytes);
    }
    let tmp = local_partial(local_path);
    let result = (|| {
        let mut file = File::create(&tmp).map_err(local("create", &tmp))?;
        let bytes = get_into(device, path, &mut file, local_path, progress)?;
        file.sync_all().map_err(local("sync", &tmp))?;
        drop(file);
        std::fs::rename(&tmp, local_path).map_err(local("replace", local_path))?;
        sync_parent(local_path).map_err(local("sync the directory of", local_path))?;
        Ok(bytes)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Makes a rename in `path`'s directory durable.
fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Streams the device file `path` into `out` (named `local_path` in errors).
pub(crate) fn get_into(
    device: &Device,
    path: &str,
    out: &mut dyn Write,
    local_path: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let total_bytes = device.stat(path)?.size_bytes;
    let chunk = FILE_IO_SIZE_MAX;
    let ops = (0..total_bytes.div_ceil(chunk)).map(|i| Op::FileRead {
        path: path.to_string(),
        offset: i * chunk,
        len: (total_bytes - i * chunk).min(chunk),
    });
    let mut done_bytes = 0u64;
    let mut write_error: Option<io::Error> = None;
    device.pipeline(ops, |_, c| match c.reply {
        Reply::Data(d) => {
            if write_error.is_none() {
                if let Err(e) = out.write_all(&d) {
                    write_error = Some(e);
                }
            }
            done_bytes += d.len() as u64;
            progress(Progress {
                done_bytes,
                total_bytes,
            });
            Ok(())
        }
        other => Err(CallError::UnexpectedReply {
            op: "file-read",
            expected: "data",
            found: format!("{other:?}"),
        }),
    })?;
    if let Some(e) = write_error {
        return Err(local("write", local_path)(e));
    }
    Ok(done_bytes)
}
