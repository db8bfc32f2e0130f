//! Several submitters on several engines: every command completes exactly once, with
//! the right result, and the queues stay bounded.

use std::collections::HashSet;
use std::sync::Arc;

use csx_device::SubmitError;
use csx_proto::*;

use crate::common::*;

#[test]
fn concurrent_submitters_lose_and_duplicate_nothing() {
    let h = Harness::new();
    h.load(0, &compile("sum.c"), None, EngineKind::Jit, 1 << 20);
    h.load(
        1,
        &compile("args.c"),
        None,
        EngineKind::Interpreter,
        1 << 20,
    );
    let dev = h.dev();
    let threads = 4;
    let per_thread = 400u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let qp = dev.queue_pair(32).unwrap();
            s.spawn(move || {
                // Each submitter has its own buffer: windows of different clients never conflict.
                let alloc = qp
                    .call(Command::new(
                        CommandId(u64::MAX),
                        Op::MemAlloc { size_bytes: 800 },
                    ))
                    .unwrap();
                let handle = MemHandle(alloc.value as u32);
                let values: Vec<u64> = (0..100).map(|i| i + t).collect();
                let write = Op::MemWrite {
                    handle,
                    offset: 0,
                    data: u64s(&values),
                };
                assert_eq!(
                    qp.call(Command::new(CommandId(u64::MAX - 1), write))
                        .unwrap()
                        .status,
                    Status::Success
                );
                let expect_sum: u64 = values.iter().sum();
                let mut seen = HashSet::new();
                let mut next = 0u64;
                while seen.len() < per_thread as usize {
                    // Keep up to 16 in flight: a mix of executions (both programs) and reads.
                    while next < per_thread && qp.in_flight() < 16 {
                        let op = match next % 3 {
                            0 => Op::Execute {
                                pind: ProgramIndex(0),
                                windows: Windows::Inline(vec![range(handle, 0, 800)]),
                                cparam1: 0,
                                cparam2: 0,
                                params: vec![],
                                fuel: None,
                                time_limit_ms: None,
                                generation: None,
                            },
                            1 => Op::Execute {
                                pind: ProgramIndex(1),
                                windows: Windows::Inline(vec![]),
                                cparam1: next,
                                cparam2: 0,
                                params: vec![],
                                fuel: None,
                                time_limit_ms: None,
                                generation: None,
                            },
                            _ => Op::MemRead {
                                handle,
                                offset: 8,
                                len: 8,
                            },
                        };
                        match qp.submit(Command::new(CommandId(next), op)) {
                            Ok(()) => next += 1,
                            Err(SubmitError::QueueFull { .. }) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    let c = qp.reap(None).expect("commands in flight complete");
                    assert!(seen.insert(c.id.0), "duplicate completion {}", c.id);
                    // The run over the whole buffer can collide with a concurrent read of it.
                    if c.status == Status::MemoryRangeSetInUse {
                        continue;
                    }
                    assert_eq!(c.status, Status::Success, "{:?}", c.detail);
                    match c.id.0 % 3 {
                        0 => assert_eq!(c.value, expect_sum),
                        1 => assert_eq!(c.value, c.id.0),
                        _ => assert_eq!(c.reply, Reply::Data((1 + t).to_le_bytes().to_vec())),
                    }
                }
                assert_eq!(qp.in_flight(), 0);
                assert!(qp.try_reap().is_none());
            });
        }
    });
    let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
        panic!()
    };
    let runs: u64 = list.iter().map(|p| p.executions).sum();
    assert!(runs > 0);
}

#[test]
fn queue_depth_is_enforced() {
    let h = Harness::new();
    let qp = h.dev().queue_pair(2).unwrap();
    qp.submit(Command::new(CommandId(1), Op::Identify)).unwrap();
    qp.submit(Command::new(CommandId(2), Op::Identify)).unwrap();
    assert_eq!(
        qp.submit(Command::new(CommandId(3), Op::Identify)),
        Err(SubmitError::QueueFull { depth: 2 })
    );
    assert!(qp.reap(None).is_some());
    qp.submit(Command::new(CommandId(3), Op::Identify)).unwrap();
    assert!(qp.reap(None).is_some());
    assert!(qp.reap(None).is_some());
    assert!(qp.reap(None).is_none());
    assert!(h.dev().queue_pair(0).is_err());
}

/// Close answers every command in flight exactly once: an execution that ran before it
/// with its result, the others aborted without running; other commands run.
#[test]
fn close_completes_everything_in_flight() {
    let mut h = Harness::new();
    h.load(0, &compile("args.c"), None, EngineKind::Jit, 1 << 20);
    let qp = Arc::new(h.dev().queue_pair(65).unwrap());
    for i in 0..64 {
        qp.submit(Command::new(
            CommandId(i),
            Op::Execute {
                pind: ProgramIndex(0),
                windows: Windows::Inline(vec![]),
                cparam1: i,
                cparam2: 0,
                params: vec![],
                fuel: None,
                time_limit_ms: None,
                generation: None,
            },
        ))
        .unwrap();
    }
    qp.submit(Command::new(CommandId(64), Op::Identify))
        .unwrap();
    // The pair that loaded the program stays open through the close: dropping it first
    // would release the program (a client's programs go with it), and executions still
    // queued would then end NoProgram, depending on how far the engines had got.
    let loader = h.qp.take();
    h.dev.take().unwrap().close().unwrap();
    drop(loader);
    let mut ids = HashSet::new();
    while let Some(c) = qp.try_reap() {
        match c.status {
            Status::Success => {
                if c.id.0 < 64 {
                    assert_eq!(c.value, c.id.0);
                }
            }
            Status::Aborted => {
                assert!(c.id.0 < 64, "only executions are aborted");
                assert!(c
                    .detail
                    .unwrap()
                    .message
                    .starts_with("aborted because the device is closing"),);
            }
            other => panic!("{} ended {other:?}", c.id),
        }
        assert!(ids.insert(c.id.0), "{} completed twice", c.id);
    }
    assert_eq!(ids.len(), 65);
    assert_eq!(
        qp.submit(Command::new(CommandId(99), Op::Identify)),
        Err(SubmitError::ShuttingDown)
    );
}
