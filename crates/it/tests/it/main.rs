//! Integration tests of the host API: every command, through `csx_host::Device`, on a
//! real device in a temporary state directory. They live in their own crate because
//! they also need the daemon (`csx-server`) and λ-IO (`csx-lambda`), which build on
//! csx-host.
//!
//! Method: each test is a function of a [`Fixture`] (a freshly initialised device and a
//! way to open more clients on it). [`backend_tests!`] instantiates every such function
//! once per backend, so the whole suite runs on each transport: the embedded transport
//! passing commands by value, the embedded transport with every command and completion
//! encoded and decoded (`wire_check`), and a device served by `csx_server` (the
//! daemon) over shm and over tcp (`served`). Device programs are C, compiled by clang at test time
//! (`programs`).

mod abort;
mod adopt;
mod campaign;
mod codemap;
mod concurrency;
mod daemon;
mod durability;
mod errors;
mod execute;
mod files;
mod lambda;
mod media;
mod memory;
mod mountcampaign;
mod open;
mod persistence;
mod programs;
mod served;
mod unload_race;

use std::path::{Path, PathBuf};

use csx_host::transport::inproc::DeviceConfig;
use csx_host::{Device, OpenOptions};

/// A way to reach a device whose state directory is given.
#[derive(Clone, Copy, Debug)]
pub struct Backend {
    pub name: &'static str,
    /// Opens a new client on the (initialised) device in the directory.
    pub open: fn(&Path) -> Device,
    /// Stops the device a backend serves for the directory (a daemon), once its clients
    /// are closed; nothing for embedded devices, which stop with their last client.
    pub stop: fn(&Path),
}

fn stop_nothing(_: &Path) {}

fn open_embedded(dir: &Path) -> Device {
    Device::open(dir.to_str().expect("temp paths are UTF-8")).expect("embedded device opens")
}

fn open_embedded_wire(dir: &Path) -> Device {
    let options = OpenOptions {
        wire_check: true,
        ..OpenOptions::default()
    };
    Device::open_with(dir.to_str().expect("temp paths are UTF-8"), options)
        .expect("embedded device opens")
}

pub const EMBEDDED: Backend = Backend {
    name: "embedded",
    open: open_embedded,
    stop: stop_nothing,
};
pub const EMBEDDED_WIRE: Backend = Backend {
    name: "embedded-wire",
    open: open_embedded_wire,
    stop: stop_nothing,
};
pub use served::{SHM, TCP};

/// Sizes of every test device: small, so tests are quick and "full" is reachable.
pub const NVM_SIZE: u64 = 64 << 20;
pub const SLM_SIZE: u64 = 32 << 20;
pub const STATE_SIZE: u64 = 4096;
pub const ENGINES: u32 = 4;

/// A device for one test: its state directory, the backend, and a first client.
#[allow(missing_debug_implementations)] // Test scaffolding; never printed.
pub struct Fixture {
    pub backend: Backend,
    dev: Option<Device>,
    dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new(backend: Backend) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("dev");
        let config = DeviceConfig {
            nvm_size_bytes: NVM_SIZE,
            slm_size_bytes: SLM_SIZE,
            state_size_bytes: STATE_SIZE,
            engines: Some(ENGINES),
            ..DeviceConfig::default()
        };
        Device::init(&state, config)
            .expect("init")
            .close()
            .expect("close after init");
        let dev = Some((backend.open)(&state));
        Fixture { backend, dev, dir }
    }

    /// The first client.
    pub fn dev(&self) -> &Device {
        self.dev.as_ref().expect("open between restarts")
    }

    /// The device's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("dev")
    }

    /// Another client (queue pair) on the same device.
    pub fn open(&self) -> Device {
        (self.backend.open)(&self.state_dir())
    }

    /// A scratch directory for local files.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Closes the first client, which shuts the device down cleanly when no other
    /// client is open, and opens a new one: a restart of the device.
    pub fn restart(&mut self) {
        let dev = self.dev.take().expect("open between restarts");
        assert_eq!(dev.client().stray_completions(), 0);
        dev.close().expect("the device closes cleanly");
        (self.backend.stop)(&self.state_dir());
        self.dev = Some((self.backend.open)(&self.state_dir()));
    }
}

/// Runs `test` on a fresh fixture of `backend`.
pub fn run(backend: Backend, test: fn(&mut Fixture)) {
    let mut f = Fixture::new(backend);
    test(&mut f);
    let dev = f.dev.take().expect("open after the test");
    assert_eq!(
        dev.client().stray_completions(),
        0,
        "the device sent completions nobody asked for"
    );
    assert_eq!(
        dev.client().outstanding(),
        0,
        "the test left commands outstanding"
    );
    dev.close().expect("the device closes cleanly");
    (f.backend.stop)(&f.state_dir());
}

/// Instantiates each listed `fn(&mut Fixture)` as a `#[test]` per backend.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $( #[test] fn $name() { $crate::run($crate::EMBEDDED, super::$name) } )*
        }
        mod embedded_wire {
            $( #[test] fn $name() { $crate::run($crate::EMBEDDED_WIRE, super::$name) } )*
        }
        mod shm {
            $( #[test] fn $name() { $crate::run($crate::SHM, super::$name) } )*
        }
        mod tcp {
            $( #[test] fn $name() { $crate::run($crate::TCP, super::$name) } )*
        }
    };
}
