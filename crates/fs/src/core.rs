//! The file system without FUSE: path operations on a device's file store, each failure an
//! [`FsError`] with the errno the mount answers.
//!
//! Every operation is one or a few device commands, nothing is cached: what one caller
//! changes, every other caller of the same device (another mount, `csx put`) sees at its
//! next call. Writes go to the device as they come; [`MetalFs::sync`] (the mount's
//! `fsync` and `close` of a written file) is the device's flush, after which they survive
//! a crash of the device (see the file store's crash rules).
//!
//! A served device whose connection is lost (its daemon restarted) is connected again at
//! the next call, at most once a second: the call that found the connection gone fails
//! (`EIO`), except a read-only one, which is tried again on the new connection.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use csx_host::{CallError, Device, DeviceUri, TransportError};
use csx_proto::limits::{FILE_IO_SIZE_MAX, FILE_LIST_ENTRIES_MAX};
use csx_proto::{errno, DirEntryInfo, EntryKind, FieldError, Op, Reply, WriteMode};

/// Entries asked for per directory page.
const DIR_PAGE: u32 = 4096;
const _: () = assert!(DIR_PAGE as usize <= FILE_LIST_ENTRIES_MAX);

/// A failed operation: the errno a mount answers and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{message} (errno {errno})")]
pub struct FsError {
    pub errno: i32,
    pub message: String,
}

impl FsError {
    pub fn new(errno: i32, message: impl Into<String>) -> FsError {
        FsError {
            errno,
            message: message.into(),
        }
    }
}

impl From<CallError> for FsError {
    fn from(e: CallError) -> FsError {
        FsError::new(errno_of(&e), e.to_string())
    }
}

/// The errno of a failed device call.
pub fn errno_of(e: &CallError) -> i32 {
    match e {
        CallError::NotFound(_) => libc::ENOENT,
        CallError::FileExists(_) => libc::EEXIST,
        CallError::NotEmpty(_) => libc::ENOTEMPTY,
        CallError::NoSpace(_) => libc::ENOSPC,
        CallError::OutOfRange(_) => libc::EFBIG,
        // The file store folds these into one status; its error detail carries the
        // finer code.
        CallError::InvalidField(f) => match f.detail.as_ref().map(|d| d.code) {
            Some(errno::CSX_EISDIR) => libc::EISDIR,
            Some(errno::CSX_ENOTDIR) => libc::ENOTDIR,
            Some(errno::CSX_ENAMETOOLONG) => libc::ENAMETOOLONG,
            _ => libc::EINVAL,
        },
        CallError::Invalid {
            source: FieldError::TooLong { .. },
            ..
        } => libc::ENAMETOOLONG,
        CallError::Invalid { .. } => libc::EINVAL,
        _ => libc::EIO,
    }
}

/// What is at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub kind: EntryKind,
    /// Bytes of a file; 0 for a directory.
    pub size: u64,
    pub modified: SystemTime,
}

impl Attr {
    fn of(e: &DirEntryInfo) -> Attr {
        Attr {
            kind: e.kind,
            size: e.size_bytes,
            modified: UNIX_EPOCH + Duration::from_nanos(e.modified_ns),
        }
    }
}

/// One child of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub attr: Attr,
}

/// How often a lost connection is tried again.
const RECONNECT_EVERY: Duration = Duration::from_secs(1);

/// Whether `e` says the connection to a served device is gone.
fn is_lost(e: &CallError) -> bool {
    matches!(
        e,
        CallError::Transport(
            TransportError::Disconnected { .. }
                | TransportError::Closed
                | TransportError::Io { .. }
        )
    )
}

/// Path operations on one device's file store. `Send + Sync`.
#[derive(Debug)]
pub struct MetalFs {
    /// The current connection; a reconnection replaces it (callers that still hold the
    /// lost one keep it alive through their `Arc` until they are done).
    current: Mutex<Arc<Device>>,
    /// When a lost connection was last tried again.
    last_try: Mutex<Option<Instant>>,
}

impl MetalFs {
    pub fn new(dev: Device) -> MetalFs {
        MetalFs {
            current: Mutex::new(Arc::new(dev)),
            last_try: Mutex::new(None),
        }
    }

    /// The device underneath (the current connection).
    pub fn device(&self) -> Arc<Device> {
        Arc::clone(&self.current.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Connects again to a served device whose connection was lost; whether there is a
    /// new connection to try.
    fn reconnect(&self) -> bool {
        let uri = self.device().uri().clone();
        if matches!(uri, DeviceUri::Embedded(_)) {
            return false;
        }
        {
            let mut last = self.last_try.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < RECONNECT_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        match Device::open(&uri.to_string()) {
            Ok(dev) => {
                eprintln!("csx: connected again to {uri}");
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(dev);
                true
            }
            Err(_) => false,
        }
    }

    /// Runs `f` on the device; a lost connection is made again, and `f` tried again on
    /// it when it only reads (`retry`).
    fn on<T>(
        &self,
        retry: bool,
        f: impl Fn(&Device) -> Result<T, CallError>,
    ) -> Result<T, FsError> {
        match f(&self.device()) {
            Err(e) if is_lost(&e) => {
                if self.reconnect() && retry {
                    return Ok(f(&self.device())?);
                }
                Err(e.into())
            }
            r => Ok(r?),
        }
    }

    /// Closes the device (flushing an embedded one).
    pub fn close(self) -> Result<(), FsError> {
        let current = self.current.into_inner().unwrap_or_else(|p| p.into_inner());
        match Arc::try_unwrap(current) {
            Ok(dev) => Ok(dev.close()?),
            Err(_) => Err(FsError::new(libc::EBUSY, "the device is still in use")),
        }
    }

    /// What is at `path` (`/` is the root).
    pub fn stat(&self, path: &str) -> Result<Attr, FsError> {
        self.on(true, |d| d.path_stat(path)).map(|e| Attr::of(&e))
    }

    /// Every child of directory `dir`, in the device's key order.
    pub fn list(&self, dir: &str) -> Result<Vec<Entry>, FsError> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let (page, more) = self.on(true, |d| d.read_dir(dir, &after, DIR_PAGE))?;
            if let Some(last) = page.last() {
                after = match last.kind {
                    EntryKind::File => last.name.clone(),
                    EntryKind::Dir => format!("{}/", last.name),
                };
            }
            let empty = page.is_empty();
            out.extend(page.iter().map(|e| Entry {
                name: e.name.clone(),
                attr: Attr::of(e),
            }));
            if !more || empty {
                return Ok(out);
            }
        }
    }

    /// Creates an empty file at `path`; with `exclusive`, fails if it exists
    /// (`EEXIST`), else leaves an existing file as it is.
    pub fn create(&self, path: &str, exclusive: bool) -> Result<Attr, FsError> {
        let mode = if exclusive {
            WriteMode::CreateNew
        } else {
            WriteMode::Write
        };
        self.on(false, |d| {
            d.client().call_ok(Op::FileWrite {
                path: path.to_owned(),
                offset: 0,
                data: Vec::new(),
                mode,
            })
        })?;
        self.stat(path)
    }

    /// Up to `len` bytes of the file from `offset`; fewer only at its end.
    pub fn read(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, FsError> {
        let mut out = Vec::new();
        let mut pos = offset;
        let end = offset.saturating_add(len);
        while pos < end {
            let want = (end - pos).min(FILE_IO_SIZE_MAX);
            let c = self.on(true, |d| {
                d.client().call_ok(Op::FileRead {
                    path: path.to_owned(),
                    offset: pos,
                    len: want,
                })
            })?;
            let Reply::Data(d) = c.reply else {
                return Err(FsError::new(libc::EIO, "file-read answered without data"));
            };
            let got = d.len() as u64;
            if out.is_empty() {
                out = d;
            } else {
                out.extend_from_slice(&d);
            }
            pos += got;
            if got < want {
                break;
            }
        }
        Ok(out)
    }

    /// Writes `data` at `offset`, creating the file if missing, growing it if needed.
    pub fn write(&self, path: &str, offset: u64, data: &[u8]) -> Result<(), FsError> {
        self.on(false, |d| d.write_file(path, offset, data))
    }

    /// Sets the file's size.
    pub fn truncate(&self, path: &str, size: u64) -> Result<(), FsError> {
        self.on(false, |d| d.truncate_file(path, size))
    }

    /// Removes a file.
    pub fn unlink(&self, path: &str) -> Result<(), FsError> {
        self.on(false, |d| d.delete_file(path))
    }

    /// Makes a directory.
    pub fn mkdir(&self, path: &str) -> Result<(), FsError> {
        self.on(false, |d| d.mkdir(path))
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<(), FsError> {
        self.on(false, |d| d.rmdir(path))
    }

    /// Renames a file or directory (see [`Device::rename`]).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        self.on(false, |d| d.rename(from, to))
    }

    /// Makes every change so far durable (the device's flush).
    pub fn sync(&self) -> Result<(), FsError> {
        self.on(false, |d| d.flush())
    }
}
