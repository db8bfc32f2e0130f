//! Fresh arrays and served members for the tests.

use csx_array::{Array, LinkModel};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_server::{ListenAddr, Server, ServerConfig};

/// Small members: a sparse 64 MiB namespace, 64 MiB of device memory, 2 engines.
pub fn member_config() -> DeviceConfig {
    DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 64 << 20,
        state_size_bytes: 1 << 16,
        engines: Some(2),
        ..DeviceConfig::default()
    }
}

/// An array of `n` embedded members in a fresh temporary directory.
pub fn embedded(n: usize) -> (tempfile::TempDir, Array) {
    let dir = tempfile::tempdir().expect("tempdir");
    let array = Array::init_embedded(
        &dir.path().join("arr"),
        n,
        member_config(),
        LinkModel::default(),
    )
    .expect("array init");
    (dir, array)
}

pub use csx_testkit::bytes::seeded as bytes;

/// Seeded little-endian u64 keys.
#[allow(dead_code)] // Used by the sort tests.
pub fn keys(count: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(count * 8);
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// A device served over tcp on a loopback port chosen by the OS.
pub struct Daemon {
    pub server: Option<Server>,
    pub uri: String,
    pub _dir: tempfile::TempDir,
}

impl Daemon {
    pub fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        Device::init(dir.path(), member_config())
            .expect("init")
            .close()
            .expect("close");
        Self::serve(dir)
    }

    fn serve(dir: tempfile::TempDir) -> Daemon {
        let server = Self::open(dir.path(), "tcp://127.0.0.1:0");
        let uri = server.uris()[0].clone();
        Daemon {
            server: Some(server),
            uri,
            _dir: dir,
        }
    }

    fn open(dir: &std::path::Path, listen: &str) -> Server {
        Server::open(
            dir,
            ServerConfig {
                listen: vec![ListenAddr::parse(listen).expect("listen")],
                token: None,
            },
        )
        .expect("serves")
    }

    /// Serves the same device again on the same address (after [`Daemon::stop`]).
    #[allow(dead_code)] // Used by the sort tests.
    pub fn restart(&mut self) {
        assert!(self.server.is_none(), "stopped first");
        self.server = Some(Self::open(self._dir.path(), &self.uri));
    }

    /// Stops serving (the member disappears).
    pub fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().expect("shutdown");
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads `len` bytes of member `m`'s NVM namespace at `offset` through its own device
/// (Memory Copy from the namespace, then Memory Read).
pub fn read_nvm(array: &Array, m: u16, offset: u64, len: u64) -> Vec<u8> {
    let dev = &array.members()[usize::from(m)].device;
    let h = dev.alloc(len).expect("alloc");
    dev.copy_to_mem(h, 0, vec![csx_host::proto::CopySource::Nvm { offset, len }])
        .expect("copy nvm");
    let out = dev.read_mem(h, 0, len).expect("read mem");
    dev.free(h).expect("free");
    out
}
