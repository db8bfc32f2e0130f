//! Abort latency on an embedded device: a one-instruction spin (`ja -1`, fuel and time
//! limit at their maximum) runs on an engine; after a pause the host submits an Abort
//! and times from that submission to the moment the aborted execution's completion is
//! reaped. Per engine kind: median, 90th percentile and worst, in microseconds, over
//! the rounds whose execution was running when aborted (its detail says "at pc").
//!
//! `cargo run --release -p csx-device --example abort_latency [rounds]`

use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime, QueuePair};
use csx_proto::limits::{FUEL_MAX, TIME_LIMIT_MS_MAX};
use csx_proto::*;

fn call_ok(qp: &QueuePair, op: Op) -> Completion {
    let c = qp.call(Command::new(CommandId(0), op)).expect("submit");
    assert!(c.status.is_success(), "{:?}", c.detail);
    c
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 16 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let dev = DeviceRuntime::init(dir.path(), config).expect("init");
    let qp = dev.queue_pair(8).expect("queue pair");
    // ja -1
    let spin = [0x05, 0, 0xff, 0xff, 0, 0, 0, 0];
    for (pind, engine) in [(0u16, EngineKind::Interpreter), (1, EngineKind::Jit)] {
        call_ok(
            &qp,
            Op::LoadProgram {
                pind: ProgramIndex(pind),
                ptype: ProgramType::Raw,
                total_size_bytes: 8,
                offset: 0,
                data: spin.to_vec(),
                entry: None,
            },
        );
        call_ok(
            &qp,
            Op::ActivateProgram {
                pind: ProgramIndex(pind),
                engine,
            },
        );
        let mut samples = Vec::with_capacity(rounds);
        let mut queued = 0;
        for round in 0..rounds as u64 {
            let id = CommandId(1000 + round);
            let exec = Op::Execute {
                pind: ProgramIndex(pind),
                windows: Windows::Inline(Vec::new()),
                cparam1: 0,
                cparam2: 0,
                params: Vec::new(),
                fuel: Some(FUEL_MAX),
                time_limit_ms: Some(TIME_LIMIT_MS_MAX),
                generation: None,
            };
            qp.submit(Command::new(id, exec)).expect("submit");
            std::thread::sleep(Duration::from_millis(5));
            let start = Instant::now();
            qp.submit(Command::new(CommandId(1), Op::Abort { target: id }))
                .expect("submit");
            let mut aborted = None;
            while aborted.is_none() {
                let c = qp.reap(None).expect("in flight");
                if c.id == id {
                    aborted = Some((start.elapsed(), c));
                } else {
                    assert_eq!(c.value, 1, "the abort found its execution");
                }
            }
            let (took, c) = aborted.expect("set above");
            assert_eq!(c.status, Status::Aborted);
            // Its abort's completion, if it came second.
            if qp.in_flight() > 0 {
                qp.reap(None).expect("the abort completes");
            }
            if c.detail.is_some_and(|d| d.message.contains(" at pc ")) {
                samples.push(took);
            } else {
                queued += 1;
            }
        }
        samples.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        println!(
            "{engine:?}: {} running runs aborted (+{queued} still queued): median {:.1} µs, p90 {:.1} µs, worst {:.1} µs",
            samples.len(),
            us(pick(0.5)),
            us(pick(0.9)),
            us(pick(1.0)),
        );
    }
    drop(qp);
    dev.close().expect("close");
}
