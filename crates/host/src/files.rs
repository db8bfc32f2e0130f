//! Streaming whole files between the host's file system and the device's file store.
//!
//! A put reads the local file chunk by chunk (each within the protocol's
//! `FILE_IO_SIZE_MAX`) and keeps a few chunks in flight while it reads the next; a get
//! does the reverse. Neither ever holds more than `PIPELINE_DEPTH` chunks in memory,
//! whatever the file's size.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use csx_proto::limits::FILE_IO_SIZE_MAX;
use csx_proto::{Op, Reply, WriteMode};

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

/// Reads up to `len` bytes, fewer only at the end of the file.
fn read_chunk(file: &mut File, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    file.take(len as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

pub(crate) fn put(
    device: &Device,
    local_path: &Path,
    path: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let mut file = File::open(local_path).map_err(local("open", local_path))?;
    let total_bytes = file.metadata().map_err(local("stat", local_path))?.len();
    let chunk = FILE_IO_SIZE_MAX as usize;
    // The first chunk truncates and completes alone: chunks in flight together may run
    // in any order, and none may land before the truncation.
    let first = read_chunk(&mut file, chunk).map_err(local("read", local_path))?;
    let mut done_bytes = first.len() as u64;
    device.client().call_ok(Op::FileWrite {
        path: path.to_string(),
        offset: 0,
        data: first,
        mode: WriteMode::Truncate,
    })?;
    progress(Progress {
        done_bytes,
        total_bytes,
    });
    if done_bytes < chunk as u64 {
        return Ok(done_bytes);
    }
    let read_error: RefCell<Option<io::Error>> = RefCell::new(None);
    let mut offset = done_bytes;
    let ops = std::iter::from_fn(|| match read_chunk(&mut file, chunk) {
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

pub(crate) fn get(
    device: &Device,
    path: &str,
    local_path: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, FileTransferError> {
    let total_bytes = device.stat(path)?.size_bytes;
    let mut file = File::create(local_path).map_err(local("create", local_path))?;
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
            if let Err(e) = file.write_all(&d) {
                write_error.get_or_insert(e);
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
    file.sync_all().map_err(local("sync", local_path))?;
    Ok(done_bytes)
}
