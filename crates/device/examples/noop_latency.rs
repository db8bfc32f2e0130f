//! Round-trip time of a no-op Execute on an embedded device (submit → reap), single
//! outstanding command, JIT engine. Prints p50/p99 in nanoseconds.
//!
//! `cargo run --release -p csx-device --example noop_latency [iterations]`

use std::time::Instant;

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_proto::*;

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 16 << 20,
        ..DeviceConfig::default()
    };
    let dev = DeviceRuntime::init(dir.path(), config).expect("init");
    let qp = dev.queue_pair(8).expect("queue pair");
    let noop = csx_ebpf::isa::encode_all(
        &csx_ebpf::asm::assemble("mov %r0, 0\nexit").expect("the no-op assembles"),
    );
    let load = Op::LoadProgram {
        pind: ProgramIndex(0),
        ptype: ProgramType::Raw,
        total_size_bytes: 16,
        offset: 0,
        data: noop,
        entry: None,
    };
    assert!(qp
        .call(Command::new(CommandId(0), load))
        .unwrap()
        .status
        .is_success());
    let activate = Op::ActivateProgram {
        pind: ProgramIndex(0),
        engine: EngineKind::Jit,
    };
    assert!(qp
        .call(Command::new(CommandId(0), activate))
        .unwrap()
        .status
        .is_success());
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + 1000 {
        let op = Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::Inline(Vec::new()),
            cparam1: 0,
            cparam2: 0,
            params: Vec::new(),
            fuel: None,
            time_limit_ms: None,
            generation: None,
        };
        let start = Instant::now();
        let c = qp.call(Command::new(CommandId(i as u64), op)).unwrap();
        let t = start.elapsed().as_nanos() as u64;
        assert!(c.status.is_success());
        if i >= 1000 {
            samples.push(t);
        }
    }
    samples.sort_unstable();
    let p = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "noop execute round trip: p50 {} ns, p99 {} ns, n {}",
        p(0.5),
        p(0.99),
        samples.len()
    );
    drop(qp);
    dev.close().expect("close");
}
