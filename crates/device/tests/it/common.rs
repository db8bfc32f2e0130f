//! Shared set-up: a device in a temporary directory, a queue pair, command helpers and
//! the clang step.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use csx_device::{DeviceConfig, DeviceRuntime, QueuePair};
use csx_proto::*;
use csx_testkit::tools;

/// A device with one queue pair.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub dev: Option<DeviceRuntime>,
    pub qp: Option<QueuePair>,
    next_id: AtomicU64,
}

/// The configuration tests use: small namespaces, three engines.
pub fn test_config() -> DeviceConfig {
    DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 64 << 20,
        state_size_bytes: 4096,
        engines: Some(3),
        transfer_workers: Some(1),
        ..DeviceConfig::default()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(test_config())
    }

    pub fn with_config(config: DeviceConfig) -> Harness {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dev = DeviceRuntime::init(dir.path(), config).expect("device init");
        let qp = dev.queue_pair(256).expect("a queue pair");
        Harness {
            dir,
            dev: Some(dev),
            qp: Some(qp),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn dev(&self) -> &DeviceRuntime {
        self.dev.as_ref().expect("device open")
    }

    pub fn qp(&self) -> &QueuePair {
        self.qp.as_ref().expect("queue pair open")
    }

    pub fn id(&self) -> CommandId {
        CommandId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs `op` and returns its completion.
    pub fn call(&self, op: Op) -> Completion {
        let id = self.id();
        let c = self.qp().call(Command::new(id, op)).expect("submit");
        assert_eq!(c.id, id);
        // Every completion the device posts is valid on the wire too.
        let bytes = encode_completion(&c).expect("a valid completion");
        assert_eq!(decode_completion(&bytes).unwrap(), c);
        c
    }

    /// Runs `op`, asserting success; returns the completion.
    pub fn ok(&self, op: Op) -> Completion {
        let name = op.name();
        let c = self.call(op);
        assert_eq!(
            c.status,
            Status::Success,
            "{name} failed: {:?} {:?}",
            c.detail,
            c.trap
        );
        c
    }

    /// Runs `op`, asserting it fails with `status`.
    pub fn fails(&self, op: Op, status: Status) -> Completion {
        let name = op.name();
        let c = self.call(op);
        assert_eq!(c.status, status, "{name}: {:?}", c.detail);
        c
    }

    pub fn alloc(&self, size_bytes: u64) -> MemHandle {
        MemHandle(self.ok(Op::MemAlloc { size_bytes }).value as u32)
    }

    pub fn write(&self, handle: MemHandle, offset: u64, data: &[u8]) {
        self.ok(Op::MemWrite {
            handle,
            offset,
            data: data.to_vec(),
        });
    }

    pub fn read(&self, handle: MemHandle, offset: u64, len: u64) -> Vec<u8> {
        match self
            .ok(Op::MemRead {
                handle,
                offset,
                len,
            })
            .reply
        {
            Reply::Data(d) => d,
            other => panic!("mem read replied {other:?}"),
        }
    }

    /// Loads `image` into `pind` in chunks of `chunk` bytes and activates it.
    pub fn load(
        &self,
        pind: u16,
        image: &[u8],
        entry: Option<&str>,
        engine: EngineKind,
        chunk: usize,
    ) {
        let total = image.len() as u32;
        for (i, piece) in image.chunks(chunk).enumerate() {
            let offset = (i * chunk) as u32;
            let c = self.ok(Op::LoadProgram {
                pind: ProgramIndex(pind),
                ptype: ProgramType::Elf,
                total_size_bytes: total,
                offset,
                data: piece.to_vec(),
                entry: if offset == 0 {
                    entry.map(String::from)
                } else {
                    None
                },
            });
            assert_eq!(c.value, u64::from(offset) + piece.len() as u64);
        }
        self.ok(Op::ActivateProgram {
            pind: ProgramIndex(pind),
            engine,
        });
    }

    /// Executes with inline windows.
    pub fn exec(
        &self,
        pind: u16,
        windows: Vec<MemRange>,
        cparam1: u64,
        params: &[u8],
    ) -> Completion {
        self.call(Op::Execute {
            pind: ProgramIndex(pind),
            windows: Windows::Inline(windows),
            cparam1,
            cparam2: 0,
            params: params.to_vec(),
            fuel: None,
            time_limit_ms: None,
            generation: None,
        })
    }

    /// Closes the device (queue pair first) and reopens it from the same directory.
    pub fn reopen(&mut self) {
        self.qp = None;
        self.dev
            .take()
            .expect("device open")
            .close()
            .expect("clean close");
        let dev = DeviceRuntime::open(self.dir.path()).expect("device reopen");
        self.qp = Some(dev.queue_pair(256).expect("a queue pair"));
        self.dev = Some(dev);
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.qp = None;
        if let Some(d) = self.dev.take() {
            // A failing test may leave things in flight; close drains them.
            let _ = d.close();
        }
    }
}

pub fn range(handle: MemHandle, offset: u64, len: u64) -> MemRange {
    MemRange {
        handle,
        offset,
        len,
    }
}

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/c")
}

/// Compiles `tests/it/c/<name>` with clang for BPF and returns the object's bytes. The
/// programs include `csx.h` generated here from the program ABI for this device's
/// functions, so they are checked against the ABI itself, not a copy of it.
pub fn compile(name: &str) -> Vec<u8> {
    let header_dir = tempfile::tempdir().expect("a temporary directory");
    let header = csx_proto::abi::header::header(&csx_device::functions::function_infos());
    std::fs::write(header_dir.path().join("csx.h"), header).expect("write csx.h");
    let include = c_dir();
    let flags = [
        OsStr::new("-Wno-unused-value"),
        OsStr::new("-I"),
        include.as_os_str(),
        OsStr::new("-I"),
        header_dir.path().as_os_str(),
    ];
    tools::compile_bpf(tools::clang(), &c_dir().join(name), flags)
}

/// Little-endian u64s as bytes.
pub fn u64s(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
