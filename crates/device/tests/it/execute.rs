//! Execute Program: windows, cparams, params, r0, traps, function failures, timing.

use csx_proto::limits::*;
use csx_proto::*;

use csx_device::DeviceConfig;

use crate::common::*;

#[test]
fn windows_cparams_params_r0_on_both_engines() {
    let h = Harness::new();
    let image = compile("args.c");
    h.load(0, &image, None, EngineKind::Interpreter, 4096);
    h.load(1, &image, Some("args_echo"), EngineKind::Jit, 4096);
    let a = h.alloc(100);
    let b = h.alloc(300);
    for pind in [0, 1] {
        let c = h.ok(Op::Execute {
            pind: ProgramIndex(pind),
            windows: Windows::Inline(vec![range(a, 10, 50), range(b, 0, 300)]),
            cparam1: 5,
            cparam2: 7,
            params: vec![1, 2, 9],
            fuel: Some(1_000_000),
            time_limit_ms: None,
            generation: None,
        });
        assert_eq!(
            c.value,
            5 + 14 + 200 + 3000 + 90_000 + 50_000_000 + 30_000_000_000
        );
        let Reply::Execute(info) = &c.reply else {
            panic!("{:?}", c.reply)
        };
        assert!(info.trace.is_empty());
        assert!(c.timing.total_ns >= c.timing.execute_ns);
        assert!(c.timing.total_ns >= c.timing.queued_ns);
        // No windows: r1/r2 are zero and nwindows is 0.
        assert_eq!(h.exec(pind, vec![], 3, &[]).value, 3);
    }
}

#[test]
fn sum_into_output_window() {
    let h = Harness::new();
    h.load(0, &compile("sum.c"), None, EngineKind::Jit, 1 << 20);
    let values: Vec<u64> = (1..=1000).collect();
    let input = h.alloc(8000);
    let output = h.alloc(8000);
    h.write(input, 0, &u64s(&values));
    let c = h.exec(
        0,
        vec![range(input, 0, 8000), range(output, 0, 8000)],
        0,
        &[],
    );
    assert_eq!(c.status, Status::Success);
    assert_eq!(c.value, 500_500);
    let out = h.read(output, 0, 16);
    assert_eq!(out, u64s(&[2, 3]));
}

#[test]
fn traps_are_reported() {
    let h = Harness::new();
    let image = compile("faults.c");
    for (pind, entry) in [
        (0, "null_write"),
        (1, "spin_forever"),
        (2, "write_args"),
        (3, "read_past_window"),
    ] {
        h.load(pind, &image, Some(entry), EngineKind::Interpreter, 1 << 20);
        h.load(pind + 10, &image, Some(entry), EngineKind::Jit, 1 << 20);
    }
    let w = h.alloc(64);
    for base in [0u16, 10] {
        let c = h.call(Op::Execute {
            pind: ProgramIndex(base),
            windows: Windows::Inline(vec![]),
            cparam1: 8,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: None,
            generation: None,
        });
        assert_eq!(c.status, Status::Trap);
        assert!(
            matches!(
                c.trap.as_ref().unwrap().kind,
                WireTrapKind::OutOfBounds {
                    addr: 8,
                    size: 8,
                    write: true
                }
            ),
            "{:?}",
            c.trap
        );
        let c = h.call(Op::Execute {
            pind: ProgramIndex(base + 1),
            windows: Windows::Inline(vec![]),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: Some(10_000),
            time_limit_ms: None,
            generation: None,
        });
        assert_eq!(c.status, Status::Trap);
        assert_eq!(
            c.trap.as_ref().unwrap().kind,
            WireTrapKind::FuelExhausted { budget: 10_000 }
        );
        let Reply::Execute(info) = &c.reply else {
            panic!()
        };
        assert!(info.fuel_used > 10_000);
        let c = h.exec(base + 2, vec![], 0, &[]);
        assert_eq!(c.status, Status::Trap);
        assert!(
            matches!(c.trap.as_ref().unwrap().kind, WireTrapKind::ReadOnly { .. }),
            "{:?}",
            c.trap
        );
        let c = h.exec(base + 3, vec![range(w, 0, 64)], 0, &[]);
        assert_eq!(c.status, Status::Trap);
        assert!(matches!(
            c.trap.as_ref().unwrap().kind,
            WireTrapKind::OutOfBounds { write: false, .. }
        ));
    }
    // The device keeps working after traps.
    h.load(20, &compile("args.c"), None, EngineKind::Jit, 1 << 20);
    assert_eq!(h.exec(20, vec![], 9, &[]).value, 9);
}

#[test]
fn functions_trace_sort_filter() {
    let h = Harness::new();
    h.load(
        0,
        &compile("files.c"),
        Some("misc"),
        EngineKind::Jit,
        1 << 20,
    );
    let w = h.alloc(64);
    let c = h.exec(0, vec![range(w, 0, 64)], 0, &[]);
    assert_eq!(c.status, Status::Success, "{:?} {:?}", c.detail, c.trap);
    assert_eq!(c.value, 1931);
    let Reply::Execute(info) = &c.reply else {
        panic!()
    };
    assert_eq!(info.trace, ["hello from the device"]);
    assert_eq!(h.read(w, 0, 16), [0xAB; 16]);
    assert!(c.detail.is_none());
}

#[test]
fn overlapping_windows_are_refused() {
    let h = Harness::new();
    h.load(
        0,
        &compile("args.c"),
        None,
        EngineKind::Interpreter,
        1 << 20,
    );
    let a = h.alloc(128);
    let c = h.exec(0, vec![range(a, 0, 64), range(a, 63, 10)], 0, &[]);
    assert_eq!(c.status, Status::OverlappingMemoryRanges);
    let c = h.exec(0, vec![range(a, 100, 29)], 0, &[]);
    assert_eq!(c.status, Status::InvalidMemoryRangeSet);
    let c = h.exec(0, vec![range(MemHandle(77), 0, 1)], 0, &[]);
    assert_eq!(c.status, Status::InvalidMemoryNamespace);
    let c = h.exec(0, vec![range(a, 0, 1); WINDOWS_MAX + 1], 0, &[]);
    assert_eq!(c.status, Status::MaximumMemoryRangesExceeded);
    // Disjoint parts of one allocation are fine.
    assert_eq!(
        h.exec(0, vec![range(a, 0, 64), range(a, 64, 64)], 0, &[])
            .status,
        Status::Success
    );
}

#[test]
fn concurrent_use_of_a_window_is_refused_in_use() {
    let h = Harness::new();
    let image = compile("state.c");
    h.load(0, &image, Some("wait_gate"), EngineKind::Jit, 1 << 20);
    h.load(1, &image, Some("open_gate"), EngineKind::Jit, 1 << 20);
    h.load(2, &image, Some("state_len"), EngineKind::Jit, 1 << 20);
    let a = h.alloc(64);
    let qp = h.qp();
    // Hold window a in a run that waits on the gate.
    let wait = || {
        Command::new(
            CommandId(1000),
            Op::Execute {
                pind: ProgramIndex(0),
                windows: Windows::Inline(vec![range(a, 0, 64)]),
                cparam1: 0,
                cparam2: 0,
                params: vec![],
                fuel: Some(FUEL_MAX),
                time_limit_ms: Some(TIME_LIMIT_MS_MAX),
                generation: None,
            },
        )
    };
    qp.submit(wait()).unwrap();
    // Probe the window until the waiting run holds it (a probe that ran before is harmless;
    // one that held the window on another engine when the waiting run started refused
    // that run, which is then submitted again).
    // Bounded by time, not by a count of probes: on a loaded machine the engine thread that
    // takes the waiting run may not be scheduled for a long while; the deadline only guards
    // against a hang.
    let mut refused = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    for i in 0u64.. {
        if std::time::Instant::now() > deadline {
            break;
        }
        if i >= 1_000 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        qp.submit(Command::new(
            CommandId(2000 + i),
            Op::Execute {
                pind: ProgramIndex(2),
                windows: Windows::Inline(vec![range(a, 32, 1)]),
                cparam1: 0,
                cparam2: 0,
                params: vec![],
                fuel: None,
                time_limit_ms: None,
                generation: None,
            },
        ))
        .unwrap();
        let c = loop {
            let c = qp.reap(None).unwrap();
            if c.id.0 == 1000 && c.status == Status::MemoryRangeSetInUse {
                qp.submit(wait()).unwrap();
                continue;
            }
            // Otherwise the waiting run can only end when the gate opens; if it ended,
            // say how.
            assert_ne!(
                c.id.0, 1000,
                "the waiting run ended before any probe was refused: {:?} {:?} {:?}",
                c.status, c.detail, c.trap
            );
            if c.id.0 >= 2000 {
                break c;
            }
        };
        if c.status == Status::MemoryRangeSetInUse {
            refused = Some(c);
            break;
        }
        assert_eq!(c.value, 4096);
    }
    let c = refused.expect("the waiting run never held its window");
    assert_eq!(c.detail.unwrap().function, "execute");
    // Memory commands on it are refused too, and freeing it.
    qp.submit(Command::new(
        CommandId(3),
        Op::MemWrite {
            handle: a,
            offset: 0,
            data: vec![1],
        },
    ))
    .unwrap();
    assert_eq!(qp.reap(None).unwrap().status, Status::MemoryRangeSetInUse);
    qp.submit(Command::new(CommandId(4), Op::MemFree { handle: a }))
        .unwrap();
    assert_eq!(qp.reap(None).unwrap().status, Status::MemoryRangeSetInUse);
    // Open the gate (no windows), then the waiting run completes with r0 = 7.
    qp.submit(Command::new(
        CommandId(5),
        Op::Execute {
            pind: ProgramIndex(1),
            windows: Windows::Inline(vec![]),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: None,
            generation: None,
        },
    ))
    .unwrap();
    let mut got = std::collections::HashMap::new();
    while got.len() < 2 {
        let c = qp.reap(None).unwrap();
        got.insert(c.id.0, c);
    }
    assert_eq!(got[&5].value, 1);
    assert_eq!(got[&1000].value, 7);
    assert_eq!(h.read(a, 0, 1), [0]);
}

/// `ja -1`: one instruction, one fuel per iteration.
const SPIN_RAW: [u8; 8] = [0x05, 0, 0xff, 0xff, 0, 0, 0, 0];

fn load_raw(h: &Harness, pind: u16, image: &[u8], engine: EngineKind) {
    h.ok(Op::LoadProgram {
        pind: ProgramIndex(pind),
        ptype: ProgramType::Raw,
        total_size_bytes: image.len() as u32,
        offset: 0,
        data: image.to_vec(),
        entry: None,
    });
    h.ok(Op::ActivateProgram {
        pind: ProgramIndex(pind),
        engine,
    });
}

fn spin_op(pind: u16, fuel: Option<u64>, time_limit_ms: Option<u32>) -> Op {
    Op::Execute {
        pind: ProgramIndex(pind),
        windows: Windows::Inline(vec![]),
        cparam1: 0,
        cparam2: 0,
        params: vec![],
        fuel,
        time_limit_ms,
        generation: None,
    }
}

/// Without a time limit of its own, an execution gets `time_limit_ms` of `device.json`;
/// its own limit overrides it. The completion names the limit.
#[test]
fn the_device_time_limit_applies_unless_the_execute_sets_one() {
    let h = Harness::with_config(DeviceConfig {
        time_limit_ms: Some(30),
        ..test_config()
    });
    for (pind, engine) in [(0, EngineKind::Interpreter), (1, EngineKind::Jit)] {
        load_raw(&h, pind, &SPIN_RAW, engine);
        let c = h.fails(
            spin_op(pind, Some(FUEL_MAX), None),
            Status::TimeLimitExceeded,
        );
        let message = c.detail.expect("names the limit").message;
        assert!(
            message.starts_with("ran past its time limit of 30 ms: stopped at pc 0 after "),
            "{message}"
        );
        let Reply::Execute(info) = c.reply else {
            panic!("an execute reply")
        };
        assert!(info.fuel_used > 0);
        let c = h.fails(
            spin_op(pind, Some(FUEL_MAX), Some(5)),
            Status::TimeLimitExceeded,
        );
        assert!(c.detail.unwrap().message.contains("time limit of 5 ms"));
    }
}

/// The default fuel ends a one-instruction spin on both engines (the time limit here is
/// an hour, so fuel is what stops it).
#[test]
fn the_default_fuel_ends_a_spin() {
    let h = Harness::new();
    for (pind, engine) in [(0, EngineKind::Interpreter), (1, EngineKind::Jit)] {
        load_raw(&h, pind, &SPIN_RAW, engine);
        let c = h.fails(spin_op(pind, None, Some(TIME_LIMIT_MS_MAX)), Status::Trap);
        assert_eq!(
            c.trap.unwrap().kind,
            WireTrapKind::FuelExhausted {
                budget: csx_ebpf::limits::FUEL_DEFAULT
            }
        );
    }
}

/// A loop whose body is long device-function calls (memset then sort of window 0),
/// with the fuel to run for seconds: r1 window, r2 its length.
fn sort_loop_raw() -> Vec<u8> {
    use csx_proto::abi::functions as ids;
    let src = format!(
        "mov %r6, %r1\nmov %r7, %r2\nmov %r8, 0\nloop:\nmov %r1, %r6\nmov %r2, %r8\n\
         mov %r3, %r7\ncall {}\nmov %r1, %r6\nmov %r2, %r7\ncall {}\nadd %r8, 1\nja loop",
        ids::CSX_MEMSET,
        ids::CSX_SORT_U64
    );
    csx_ebpf::isa::encode_all(&csx_ebpf::asm::assemble(&src).expect("assembles"))
}

fn sort_loop_op(pind: u16, window: MemRange, time_limit_ms: u32) -> Op {
    Op::Execute {
        pind: ProgramIndex(pind),
        windows: Windows::Inline(vec![window]),
        cparam1: 0,
        cparam2: 0,
        params: vec![],
        // Below the JIT's fuel slice, so that only a look at the stop flag after the
        // calls (not the slice running out) can stop it before its fuel does.
        fuel: Some(40_000),
        time_limit_ms: Some(time_limit_ms),
        generation: None,
    }
}

/// A loop of long device-function calls stops at its time limit, and at an Abort, on
/// both engines, within a small multiple of the limit (before, on the JIT, it ran to
/// its fuel, seconds later, and ended as a fuel trap).
#[test]
fn long_device_function_calls_stop_at_the_time_limit_and_at_abort() {
    let h = Harness::new();
    let image = sort_loop_raw();
    let window = h.alloc(16 << 20);
    let w = range(window, 0, 16 << 20);
    for (pind, engine) in [(0, EngineKind::Jit), (1, EngineKind::Interpreter)] {
        load_raw(&h, pind, &image, engine);
        let start = std::time::Instant::now();
        let c = h.fails(sort_loop_op(pind, w, 100), Status::TimeLimitExceeded);
        let took = start.elapsed();
        assert!(
            took < std::time::Duration::from_secs(3),
            "{engine:?}: stopped after {took:?} under a 100 ms limit"
        );
        assert!(
            c.detail.unwrap().message.contains("time limit of 100 ms"),
            "{engine:?}"
        );

        let id = h.id();
        h.qp()
            .submit(Command::new(id, sort_loop_op(pind, w, TIME_LIMIT_MS_MAX)))
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let start = std::time::Instant::now();
        h.qp()
            .submit(Command::new(h.id(), Op::Abort { target: id }))
            .unwrap();
        let mut run = None;
        while let Some(c) = h.qp().reap(Some(std::time::Duration::from_secs(60))) {
            if c.id == id {
                run = Some(c);
            }
        }
        let run = run.expect("the run completes");
        assert_eq!(run.status, Status::Aborted, "{engine:?}: {:?}", run.detail);
        let took = start.elapsed();
        assert!(
            took < std::time::Duration::from_secs(3),
            "{engine:?}: aborted after {took:?}"
        );
    }
}

/// One device-function call that outlasts the run's time limit (a cipher over 32 MiB
/// under 1 ms) ends the run past its limit (C9h), not as a success.
#[test]
fn one_call_past_the_time_limit_is_reported_past_it() {
    use csx_proto::abi::functions as ids;
    let h = Harness::new();
    // chacha20(key_nonce = window, 44, offset 0, data = window, len)
    let src = format!(
        "mov %r6, %r1\nmov %r7, %r2\nmov %r2, 44\nmov %r3, 0\nmov %r4, %r6\nmov %r5, %r7\n\
         call {}\nexit",
        ids::CSX_CHACHA20
    );
    let image = csx_ebpf::isa::encode_all(&csx_ebpf::asm::assemble(&src).unwrap());
    let window = h.alloc(32 << 20);
    for (pind, engine) in [(0, EngineKind::Jit), (1, EngineKind::Interpreter)] {
        load_raw(&h, pind, &image, engine);
        let op = Op::Execute {
            pind: ProgramIndex(pind),
            windows: Windows::Inline(vec![range(window, 0, 32 << 20)]),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: Some(1),
            generation: None,
        };
        let c = h.fails(op, Status::TimeLimitExceeded);
        assert!(
            c.detail.unwrap().message.contains("time limit of 1 ms"),
            "{engine:?}"
        );
    }
}
