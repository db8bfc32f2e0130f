//! The shared state: a device-private region every execution sees at r3/r4 (region 3),
//! persisting across executions and across close/reopen (Delilah's shared data region).
//!
//! The host can clear all or part of it (Clear State) but never read it. Executions on
//! different engines share it the way threads share memory in C: concurrent stores to
//! the same bytes race and leave them unspecified, never the device broken. Programs
//! that need more partition the region (for example by `cparam1`).
//!
//! Persistence: the region is the file `state.bin` in the state directory, read at open
//! and rewritten (temp file, fsync, rename, fsync of the directory) on every flush and on
//! close. A crash loses the changes since the last flush, never the file.
//!
//! Invariants:
//! * The buffer's address and length never change while the device is open.
//! * Clearing and saving take the gate exclusively, so they never overlap an execution;
//!   executions hold it shared for their whole run.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard};

use crate::buffer::RawBuffer;
use crate::nvm::open_private;

/// File name of the shared state in the state directory.
pub const STATE_FILE_NAME: &str = "state.bin";

/// Why the shared state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error("{} is {found} bytes, the device's shared state is {expected}", path.display())]
    SizeMismatch {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("clear of {len} bytes at {offset} reaches past the {size_bytes}-byte shared state")]
    OutOfRange {
        offset: u64,
        len: u64,
        size_bytes: u64,
    },
}

/// The shared state region.
pub struct SharedState {
    buffer: RawBuffer,
    gate: RwLock<()>,
    path: PathBuf,
}

impl std::fmt::Debug for SharedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedState")
            .field("path", &self.path)
            .field("len", &self.buffer.len())
            .finish()
    }
}

/// Held by an execution for its whole run: the region's address and length.
#[derive(Debug)]
pub struct StateMapping<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    /// First byte of the region.
    pub ptr: *mut u8,
    /// Bytes in the region.
    pub len: usize,
}

impl SharedState {
    /// Creates `state.bin` of `size_bytes` zeros in `dir` (device initialisation).
    pub fn create(dir: &Path, size_bytes: u64) -> Result<SharedState, StateError> {
        let state = SharedState::with_bytes(dir, vec![0u8; to_usize(size_bytes)]);
        state.save()?;
        Ok(state)
    }

    /// Loads `state.bin` from `dir`; it must hold exactly `size_bytes`.
    pub fn open(dir: &Path, size_bytes: u64) -> Result<SharedState, StateError> {
        let path = dir.join(STATE_FILE_NAME);
        let bytes = fs::read(&path).map_err(|source| StateError::Io {
            path: path.clone(),
            op: "read",
            source,
        })?;
        if bytes.len() as u64 != size_bytes {
            return Err(StateError::SizeMismatch {
                path,
                found: bytes.len() as u64,
                expected: size_bytes,
            });
        }
        Ok(SharedState::with_bytes(dir, bytes))
    }

    fn with_bytes(dir: &Path, bytes: Vec<u8>) -> SharedState {
        SharedState {
            buffer: RawBuffer::from_vec(bytes),
            gate: RwLock::new(()),
            path: dir.join(STATE_FILE_NAME),
        }
    }

    /// Bytes in the region.
    pub fn size_bytes(&self) -> u64 {
        self.buffer.len() as u64
    }

    /// Shares the region with an execution until the mapping drops.
    pub fn map(&self) -> StateMapping<'_> {
        // Poisoning means a thread panicked holding the gate; the bytes are as valid as
        // ever (no invariant spans them), so the lock is taken regardless.
        let guard = self.gate.read().unwrap_or_else(|p| p.into_inner());
        StateMapping {
            _guard: guard,
            ptr: self.buffer.as_ptr(),
            len: self.buffer.len(),
        }
    }

    /// Zeroes `len` bytes from `offset`; `len == 0` means to the end. Waits for running
    /// executions to finish first.
    pub fn clear(&self, offset: u64, len: u64) -> Result<(), StateError> {
        let size = self.size_bytes();
        let len = if len == 0 {
            size.saturating_sub(offset)
        } else {
            len
        };
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(StateError::OutOfRange {
                offset,
                len,
                size_bytes: size,
            });
        }
        let _guard = self.gate.write().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the range is inside the buffer (checked above) and the exclusive gate
        // means no execution can be touching the region.
        unsafe {
            std::ptr::write_bytes(self.buffer.as_ptr().add(offset as usize), 0, len as usize)
        };
        Ok(())
    }

    /// Writes the region to `state.bin` atomically and durably.
    pub fn save(&self) -> Result<(), StateError> {
        let _guard = self.gate.write().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the exclusive gate means no execution writes the region meanwhile; the
        // slice covers exactly the buffer.
        let bytes = unsafe { std::slice::from_raw_parts(self.buffer.as_ptr(), self.buffer.len()) };
        write_atomic(&self.path, bytes)
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("the shared state size is bounded by STATE_SIZE_MAX")
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new contents:
/// temp file, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let io = |op| {
        move |source| StateError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    };
    let tmp = path.with_extension("tmp");
    let mut f = open_private(
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true),
        &tmp,
    )
    .map_err(io("create"))?;
    // A new file is its owner's alone; a replaced one keeps the mode its owner chose.
    match fs::metadata(path) {
        Ok(old) => f.set_permissions(old.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(io("chmod"))?;
    f.write_all(bytes).map_err(io("write"))?;
    f.sync_all().map_err(io("sync"))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io("rename"))?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync directory of"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_makes_new_files_private_and_keeps_a_chosen_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let mode = || fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        write_atomic(&path, b"one").unwrap();
        assert_eq!(mode(), 0o600);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(mode(), 0o640);
        assert_eq!(fs::read(&path).unwrap(), b"two");
        // A stale temporary file's mode is not inherited by a new file.
        let fresh = dir.path().join("g.bin");
        fs::write(fresh.with_extension("tmp"), b"stale").unwrap();
        fs::set_permissions(
            fresh.with_extension("tmp"),
            fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        write_atomic(&fresh, b"new").unwrap();
        assert_eq!(
            fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn persists_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        let s = SharedState::create(dir.path(), 64).unwrap();
        {
            let m = s.map();
            // SAFETY: the mapping covers 64 bytes and nothing else uses the region.
            unsafe { std::ptr::write_bytes(m.ptr, 0xAB, m.len) };
        }
        s.clear(8, 8).unwrap();
        s.save().unwrap();
        drop(s);
        let s = SharedState::open(dir.path(), 64).unwrap();
        let m = s.map();
        // SAFETY: as above, reading.
        let bytes = unsafe { std::slice::from_raw_parts(m.ptr, m.len) }.to_vec();
        drop(m);
        assert_eq!(&bytes[..8], &[0xAB; 8]);
        assert_eq!(&bytes[8..16], &[0; 8]);
        assert_eq!(&bytes[16..], &[0xAB; 48]);
        s.clear(60, 0).unwrap();
        assert!(matches!(s.clear(60, 5), Err(StateError::OutOfRange { .. })));
        assert!(matches!(
            SharedState::open(dir.path(), 65),
            Err(StateError::SizeMismatch { .. })
        ));
    }
}
