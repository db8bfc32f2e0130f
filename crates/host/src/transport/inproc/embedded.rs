//! The embedded devices this process runs, one per state directory.
//!
//! A device locks its state directory, so a second `csx_device::DeviceRuntime::open` of the
//! same directory in the same process would fail. Instead, every opener of a directory
//! shares one [`Embedded`] through this registry and gets its own queue pair on it.
//!
//! Invariants: the registry maps a canonical directory to at most one device, and an
//! entry exists exactly while its device is open. The last [`Embedded`] reference closes
//! the device while holding the registry lock, so an opener never sees a directory that
//! is still locked by a device on its way out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use csx_device::{DeviceConfig, DeviceError, DeviceRuntime};

/// A running embedded device, shared by its queue pairs.
#[derive(Debug)]
pub struct Embedded {
    key: PathBuf,
    device: Option<DeviceRuntime>,
}

type Registry = HashMap<PathBuf, Weak<Embedded>>;

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    // Entries are inserted and removed whole; a panic cannot leave one half-made.
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn key_of(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

impl Embedded {
    /// The device in `dir`, opening it if this process has not.
    pub fn open(dir: &Path) -> Result<Arc<Embedded>, DeviceError> {
        Embedded::get_or_start(dir, || DeviceRuntime::open(dir))
    }

    /// Creates a device in `dir` (which must not hold one) and opens it.
    pub fn init(dir: &Path, config: DeviceConfig) -> Result<Arc<Embedded>, DeviceError> {
        let mut started = false;
        let e = Embedded::get_or_start(dir, || {
            started = true;
            DeviceRuntime::init(dir, config)
        })?;
        if !started {
            // The directory already runs in this process: it holds a device.
            return Err(DeviceError::AlreadyInitialized {
                dir: dir.to_path_buf(),
            });
        }
        Ok(e)
    }

    fn get_or_start(
        dir: &Path,
        start: impl FnOnce() -> Result<DeviceRuntime, DeviceError>,
    ) -> Result<Arc<Embedded>, DeviceError> {
        let key = key_of(dir);
        loop {
            let mut reg = registry();
            match reg.get(&key).map(Weak::upgrade) {
                Some(Some(running)) => return Ok(running),
                // The last reference is being dropped; its closing takes the registry
                // lock next. Let it finish, then look again.
                Some(None) => {
                    drop(reg);
                    std::thread::yield_now();
                }
                None => {
                    let device = start()?;
                    // Canonical now that the directory surely exists.
                    let key = key_of(dir);
                    let e = Arc::new(Embedded {
                        key: key.clone(),
                        device: Some(device),
                    });
                    reg.insert(key, Arc::downgrade(&e));
                    return Ok(e);
                }
            }
        }
    }

    /// The running device.
    pub fn device(&self) -> &DeviceRuntime {
        self.device.as_ref().expect("present until dropped")
    }

    /// Closes the device if `this` is its last reference, reporting errors (saving the
    /// shared state, flushing the file store); otherwise only drops the reference.
    pub fn close(this: Arc<Embedded>) -> Result<(), DeviceError> {
        match Arc::try_unwrap(this) {
            Ok(mut last) => last.shut_down(),
            Err(shared) => {
                drop(shared);
                Ok(())
            }
        }
    }

    fn shut_down(&mut self) -> Result<(), DeviceError> {
        let Some(device) = self.device.take() else {
            return Ok(());
        };
        let mut reg = registry();
        // The entry is ours: no entry is inserted while one exists for the key.
        reg.remove(&self.key);
        let r = device.close();
        drop(reg);
        r
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        // Errors are lost here; `Embedded::close` reports them.
        let _ = self.shut_down();
    }
}
