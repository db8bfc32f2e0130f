//! Integration tests of csx-workloads: the generated header, the builds, and every
//! workload's equivalence with its reference implementation on a real (embedded)
//! device, on the interpreter and the JIT.
//!
//! Method: each test makes a fresh device in a temporary directory (csx-host's
//! `Device::init`), compiles the SDK programs with clang (cached under the target
//! directory), generates seeded data, puts it on the device, runs the workload through
//! `csx_workloads::Runner`, and compares r0 and the output bytes with the reference,
//! exactly. A failure message names the workload, seed, size and engine, so it can be
//! replayed.

mod build;
mod equivalence;
mod sdk;
mod select;

use std::path::PathBuf;

use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_proto::EngineKind;
use csx_workloads::Compiler;

/// Seeds every equivalence test runs.
pub const SEEDS: &[u64] = &[1, 2, 3, 0x5eed_cafe];

/// Both engines.
pub const ENGINES: &[EngineKind] = &[EngineKind::Interpreter, EngineKind::Jit];

/// The compiler, caching objects in the target directory (not the user's cache).
pub fn compiler() -> Compiler {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("csx-cache");
    match Compiler::new() {
        Ok(c) => c.cache_in(cache),
        Err(e) => panic!("{e}"),
    }
}

/// A fresh embedded device and the directory that holds it.
#[allow(missing_debug_implementations)] // Test scaffolding; never printed.
pub struct Fixture {
    pub dev: Device,
    _dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = DeviceConfig {
            nvm_size_bytes: 64 << 20,
            slm_size_bytes: 64 << 20,
            state_size_bytes: 4096,
            engines: Some(2),
            ..DeviceConfig::default()
        };
        let dev = Device::init(&dir.path().join("dev"), config).expect("device init");
        Fixture { dev, _dir: dir }
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        assert_eq!(
            self.dev.client().outstanding(),
            0,
            "commands left in flight"
        );
    }
}
