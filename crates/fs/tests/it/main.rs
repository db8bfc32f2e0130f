//! csx-fs integration tests: the mount for real (FUSE, `/dev/fuse`, root) and the same
//! operations through the library.
//!
//! A machine that cannot mount fails these tests loudly (run `scripts/setup.sh`); none is
//! skipped.

mod model;
mod mount;
mod ops;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use csx_fs::mount::{self as m, Mounted};
use csx_fs::MetalFs;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use tempfile::TempDir;

/// A device of `nvm_mib` MiB of storage in a temporary state directory.
pub fn device(nvm_mib: u64) -> (TempDir, Device) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: nvm_mib << 20,
        slm_size_bytes: 16 << 20,
        state_size_bytes: 4096,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let dev = Device::init(&dir.path().join("dev"), config).expect("init device");
    (dir, dev)
}

/// A mount of a fresh embedded device; the `MetalFs` is shared with the test.
#[derive(Debug)]
pub struct Fixture {
    pub dir: TempDir,
    pub fs: Arc<MetalFs>,
    pub mount: Option<Mounted>,
}

impl Fixture {
    pub fn mount() -> Fixture {
        let (dir, dev) = device(64);
        let fs = Arc::new(MetalFs::new(dev));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mount = m::spawn(fs.clone(), &mnt).unwrap_or_else(|e| {
            panic!("cannot mount with FUSE ({e}): this test needs /dev/fuse and root or fusermount3; run scripts/setup.sh")
        });
        Fixture {
            dir,
            fs,
            mount: Some(mount),
        }
    }

    pub fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    pub fn at(&self, rel: &str) -> PathBuf {
        self.mnt().join(rel)
    }

    pub fn unmount(&mut self) {
        if let Some(mnt) = self.mount.take() {
            mnt.unmount().expect("unmount");
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A second panic would abort and leave a dead mount: detach, best effort.
            if let Some(mnt) = self.mount.take() {
                let _ = m::unmount(mnt.mountpoint(), true);
                drop(mnt);
            }
            return;
        }
        self.unmount();
    }
}

pub fn is_mounted(p: &Path) -> bool {
    m::is_mounted(p).unwrap()
}
