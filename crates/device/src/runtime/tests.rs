//! Unit tests of the runtime: routing, inline runs, DMA buffers, departing pairs.

use csx_proto::{
    Command, CommandId, Completion, CopySource, EngineKind, MemHandle, Op, ProgramIndex,
    ProgramType, Reply, Status, Windows,
};

use super::queue_pair::Job;
use super::workers::{class_of, Class};
use super::*;
use crate::dma::DmaBuffer;

/// A device of 1 MiB of storage, `slm_size_bytes` of memory and one engine, in a
/// temporary directory (kept alive by the first element).
fn tiny_device(slm_size_bytes: u64) -> (tempfile::TempDir, DeviceRuntime) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: 1 << 20,
        slm_size_bytes,
        state_size_bytes: 4096,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let dev = DeviceRuntime::init(dir.path(), config).expect("init");
    (dir, dev)
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<DeviceRuntime>();
    check::<QueuePair>();
}

#[test]
fn dma_buffers_move_memory_data() {
    use crate::dma::tests::HeapBuffer;
    use std::sync::Mutex;

    let (_dir, dev) = tiny_device(1 << 20);
    let qp = dev.queue_pair(4).expect("queue pair");
    let alloc = qp
        .call(Command::new(CommandId(1), Op::MemAlloc { size_bytes: 64 }))
        .expect("submit");
    let handle = MemHandle(alloc.value as u32);
    let write = Op::MemWrite {
        handle,
        offset: 8,
        data: vec![],
    };
    let source = Box::new(HeapBuffer(Mutex::new(vec![7u8; 16])));
    qp.submit_with_buffer(Command::new(CommandId(2), write), source)
        .expect("submit");
    let c = qp.reap(None).expect("completion");
    assert_eq!((c.status, c.value), (Status::Success, 16));
    let read = Op::MemRead {
        handle,
        offset: 0,
        len: 32,
    };
    let c = qp
        .call(Command::new(CommandId(3), read.clone()))
        .expect("submit");
    let Reply::Data(expected) = c.reply else {
        panic!("a read replies with data")
    };
    let target = std::sync::Arc::new(HeapBuffer(Mutex::new(vec![0u8; 32])));
    #[derive(Debug)]
    struct Shared(std::sync::Arc<HeapBuffer>);
    impl DmaBuffer for Shared {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn read_into(&self, dst: &mut [u8]) {
            self.0.read_into(dst)
        }
        fn write_from(&self, src: &[u8]) {
            self.0.write_from(src)
        }
    }
    let lent = Box::new(Shared(std::sync::Arc::clone(&target)));
    qp.submit_with_buffer(Command::new(CommandId(4), read), lent)
        .expect("submit");
    let c = qp.reap(None).expect("completion");
    assert_eq!(
        (c.status, c.value, c.reply),
        (Status::Success, 32, Reply::None)
    );
    assert_eq!(*target.0.lock().expect("not poisoned"), expected);
    // A buffer of the wrong length, or with an op that takes none, is refused.
    let short = Op::MemRead {
        handle,
        offset: 0,
        len: 8,
    };
    let wrong = Box::new(HeapBuffer(Mutex::new(vec![0u8; 4])));
    qp.submit_with_buffer(Command::new(CommandId(5), short), wrong)
        .expect("submit");
    assert_eq!(
        qp.reap(None).expect("completion").status,
        Status::InvalidField
    );
    let flush = Box::new(HeapBuffer(Mutex::new(vec![0u8; 4])));
    qp.submit_with_buffer(Command::new(CommandId(6), Op::Flush), flush)
        .expect("submit");
    assert_eq!(
        qp.reap(None).expect("completion").status,
        Status::InvalidField
    );
    drop(qp);
    dev.close().expect("close");
}

/// A short command submitted inline while the pair has nothing else in flight has
/// its completion ready when `submit_inline` returns; an Execute is short only once
/// its slot has run quickly, and a long transfer is queued as usual.
#[test]
fn short_commands_run_inline() {
    use crate::dma::tests::HeapBuffer;
    use std::sync::Mutex;

    let (_dir, dev) = tiny_device(4 << 20);
    let qp = dev.queue_pair(4).expect("queue pair");
    let size_bytes = INLINE_TRANSFER_SIZE_MAX * 2;
    let alloc = qp
        .call(Command::new(CommandId(1), Op::MemAlloc { size_bytes }))
        .expect("submit");
    assert_eq!(alloc.status, Status::Success);
    let handle = MemHandle(alloc.value as u32);
    let read = |len: u64| Op::MemRead {
        handle,
        offset: 0,
        len,
    };
    let buffer = Box::new(HeapBuffer(Mutex::new(vec![0u8; 4096])));
    qp.submit_inline(Command::new(CommandId(2), read(4096)), Some(buffer))
        .expect("submit");
    let c = qp.try_reap().expect("an inline command has completed");
    assert_eq!(
        (c.id, c.status, c.value),
        (CommandId(2), Status::Success, 4096)
    );

    let shared = qp.shared.upgrade().expect("the device is open");
    let job = |op: Op, dma: Option<Box<dyn DmaBuffer>>| Job {
        qp: Arc::clone(&qp.qp),
        cmd: Command::new(CommandId(9), op),
        submitted: Instant::now(),
        dma,
        stop: None,
        inline: false,
    };
    let long = Box::new(HeapBuffer(Mutex::new(vec![0u8; size_bytes as usize])));
    assert!(!shared.is_short(&job(read(size_bytes), None)));
    let write = Op::MemWrite {
        handle,
        offset: 0,
        data: vec![],
    };
    assert!(!shared.is_short(&job(write, Some(long))));
    assert!(!shared.is_short(&job(Op::Identify, None)));
    let exec = Op::Execute {
        pind: ProgramIndex(3),
        windows: Windows::Inline(vec![]),
        cparam1: 0,
        cparam2: 0,
        params: vec![],
        fuel: None,
        time_limit_ms: None,
        generation: None,
    };
    assert!(!shared.is_short(&job(exec.clone(), None)), "never ran");
    shared.execute_ns_last[3].store(INLINE_EXECUTE_NS_MAX, Ordering::Relaxed);
    assert!(shared.is_short(&job(exec.clone(), None)));
    // The slot is empty: the execute fails, inline; a program that never started says
    // nothing about the next run, so the guess stays.
    qp.submit_inline(Command::new(CommandId(3), exec), None)
        .expect("submit");
    let c = qp.try_reap().expect("an inline command has completed");
    assert_eq!(c.id, CommandId(3));
    assert!(!c.status.is_success());
    assert_eq!(
        shared.execute_ns_last[3].load(Ordering::Relaxed),
        INLINE_EXECUTE_NS_MAX
    );
    drop(shared);
    drop(qp);
    dev.close().expect("close");
}

/// mov r0, 0; add r0, 1; jne r0, 0, -2; exit: 2^64 iterations, only fuel, the time
/// limit or an abort ends it.
const SPIN: [u8; 32] = [
    0xb7, 0, 0, 0, 0, 0, 0, 0, 0x07, 0, 0, 0, 1, 0, 0, 0, 0x55, 0, 0xfe, 0xff, 0, 0, 0, 0, 0x95, 0,
    0, 0, 0, 0, 0, 0,
];

/// Loads `image` (raw eBPF) into slot `pind` and activates it on the interpreter.
fn load_raw(qp: &QueuePair, pind: u16, image: &[u8]) {
    let load = Op::LoadProgram {
        pind: ProgramIndex(pind),
        ptype: ProgramType::Raw,
        total_size_bytes: image.len() as u32,
        offset: 0,
        data: image.to_vec(),
        entry: None,
    };
    let c = qp.call(Command::new(CommandId(900), load)).expect("submit");
    assert_eq!(c.status, Status::Success, "{c:?}");
    let activate = Op::ActivateProgram {
        pind: ProgramIndex(pind),
        engine: EngineKind::Interpreter,
    };
    let c = qp
        .call(Command::new(CommandId(901), activate))
        .expect("submit");
    assert_eq!(c.status, Status::Success, "{c:?}");
}

fn execute(pind: u16, fuel: u64, time_limit_ms: u32) -> Op {
    Op::Execute {
        pind: ProgramIndex(pind),
        windows: Windows::Inline(vec![]),
        cparam1: 0,
        cparam2: 0,
        params: vec![],
        fuel: Some(fuel),
        time_limit_ms: Some(time_limit_ms),
        generation: None,
    }
}

/// Reaps `n` completions (in any order), by id.
fn reap_n(qp: &QueuePair, n: usize) -> std::collections::HashMap<CommandId, Completion> {
    (0..n)
        .map(|_| {
            let c = qp.reap(None).expect("a completion");
            (c.id, c)
        })
        .collect()
}

/// The flake of csAbortRequest over tcp and shm (callback CS_ERROR_IN_EXECUTION after
/// the time limit instead of CS_ABORTED): a long program aborted before it ran took a
/// few microseconds, which made its slot look short, so its next Execute ran inline on
/// the transport's thread, and that thread read the Abort only after the run had hit
/// its time limit. Here the order is forced: the run aborted in the queue, behind
/// another that holds the one engine. A stopped run leaves the slot not short, so the
/// next Execute is queued and its Abort stops it.
#[test]
fn a_stopped_execute_never_makes_its_slot_short() {
    let (_dir, dev) = tiny_device(1 << 20);
    let qp = dev.queue_pair(8).expect("queue pair");
    load_raw(&qp, 5, &SPIN);
    load_raw(&qp, 6, &SPIN);
    let shared = qp.shared.upgrade().expect("the device is open");
    let guess = |pind: usize| shared.execute_ns_last[pind].load(Ordering::Relaxed);
    let submit = |id: u64, op: Op| qp.submit(Command::new(CommandId(id), op)).expect("submit");
    let abort = |target: u64| Op::Abort {
        target: CommandId(target),
    };

    // A (slot 6) holds the only engine, or waits first in line; B (slot 5) waits behind
    // it and is aborted there: it never runs.
    submit(1, execute(6, 1 << 40, 60_000));
    submit(2, execute(5, 1 << 40, 60_000));
    submit(3, abort(2));
    let done = reap_n(&qp, 2);
    assert_eq!(done[&CommandId(3)].value, 1, "the Abort found B");
    let b = &done[&CommandId(2)];
    assert_eq!(b.status, Status::Aborted, "{b:?}");
    assert_eq!(guess(5), u64::MAX, "B never ran: slot 5 is not known short");
    submit(4, abort(1));
    let done = reap_n(&qp, 2);
    assert_eq!(done[&CommandId(1)].status, Status::Aborted);
    assert_eq!(
        guess(6),
        u64::MAX,
        "A was stopped: slot 6 is not known short"
    );

    // Nothing in flight and the engine idle: the next Execute of slot 5 would run inline
    // if its slot looked short. It is queued, and its Abort reaches it.
    let job = Job {
        qp: Arc::clone(&qp.qp),
        cmd: Command::new(CommandId(9), execute(5, 1 << 40, 60_000)),
        submitted: Instant::now(),
        dma: None,
        stop: None,
        inline: false,
    };
    assert!(!shared.is_short(&job));
    drop(job);
    assert_eq!(qp.in_flight(), 0);
    qp.submit_inline(
        Command::new(CommandId(5), execute(5, 1 << 40, 60_000)),
        None,
    )
    .expect("submit");
    assert!(
        qp.try_reap().is_none(),
        "the long program was queued, not run inline"
    );
    submit(6, abort(5));
    let done = reap_n(&qp, 2);
    assert_eq!(done[&CommandId(6)].value, 1);
    let c = &done[&CommandId(5)];
    assert_eq!(c.status, Status::Aborted, "{c:?}");

    // Fuel that runs out is a limit too; a program that ends by itself sets the guess,
    // and activating the slot again forgets it.
    let c = qp
        .call(Command::new(CommandId(7), execute(5, 100, 60_000)))
        .expect("submit");
    assert_eq!(c.status, Status::Trap, "{c:?}");
    assert_eq!(guess(5), u64::MAX, "out of fuel: not known short");
    load_raw(
        &qp,
        7,
        &[0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0],
    );
    let c = qp
        .call(Command::new(CommandId(8), execute(7, 100, 60_000)))
        .expect("submit");
    assert_eq!((c.status, c.value), (Status::Success, 42));
    assert_ne!(guess(7), u64::MAX, "a run that ended by itself is timed");
    let c = qp
        .call(Command::new(
            CommandId(10),
            Op::ActivateProgram {
                pind: ProgramIndex(7),
                engine: EngineKind::Interpreter,
            },
        ))
        .expect("submit");
    assert_eq!(c.status, Status::Success, "{c:?}");
    assert_eq!(guess(7), u64::MAX, "activation forgets the guess");
    drop(shared);
    drop(qp);
    dev.close().expect("close");
}

/// The rule itself, over each kind of end.
#[test]
fn execute_guesses_follow_how_a_run_ended() {
    use super::workers::execute_guess;
    use csx_proto::{WireTrap, WireTrapKind};
    let ok = Completion::new(CommandId(1), Status::Success);
    assert_eq!(execute_guess(false, &ok, 7), Some(7));
    assert_eq!(
        execute_guess(true, &ok, 7),
        Some(u64::MAX),
        "an abort came late"
    );
    for status in [Status::Aborted, Status::TimeLimitExceeded] {
        let c = Completion::new(CommandId(1), status);
        assert_eq!(execute_guess(false, &c, 7), Some(u64::MAX), "{status:?}");
    }
    let trap = |kind| {
        let mut c = Completion::new(CommandId(1), Status::Trap);
        c.trap = Some(WireTrap { pc: 1, kind });
        c
    };
    let fuel = trap(WireTrapKind::FuelExhausted { budget: 9 });
    assert_eq!(execute_guess(false, &fuel, 7), Some(u64::MAX));
    let fault = trap(WireTrapKind::OutOfBounds {
        addr: 0,
        size: 8,
        write: false,
    });
    assert_eq!(
        execute_guess(false, &fault, 7),
        Some(7),
        "a fault of its own"
    );
    let never_ran = Completion::new(CommandId(1), Status::NoProgram);
    assert_eq!(execute_guess(false, &never_ran, 7), None);
}

/// A load in progress belongs to its queue pair: another pair's first chunk into
/// the slot is refused (99h) instead of restarting it, until the owner goes away.
#[test]
fn a_departing_pair_releases_its_load() {
    let (_dir, dev) = tiny_device(1 << 20);
    let (first, second) = (
        dev.queue_pair(2).expect("pair"),
        dev.queue_pair(2).expect("pair"),
    );
    // mov r0, 42; exit
    let image = [0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let chunk = |id: u64, data: &[u8]| {
        Command::new(
            CommandId(id),
            Op::LoadProgram {
                pind: ProgramIndex(7),
                ptype: ProgramType::Raw,
                total_size_bytes: 16,
                offset: 0,
                data: data.to_vec(),
                entry: None,
            },
        )
    };
    let c = first.call(chunk(1, &image[..8])).expect("submit");
    assert_eq!((c.status, c.value), (Status::Success, 8));
    let c = second.call(chunk(2, &image)).expect("submit");
    assert_eq!(c.status, Status::ProgramInUse);
    drop(first);
    let c = second.call(chunk(3, &image)).expect("submit");
    assert_eq!((c.status, c.value), (Status::Success, 16));
    drop(second);
    dev.close().expect("close");
}

#[test]
fn ops_go_to_their_pool() {
    assert_eq!(class_of(&Op::Identify), Class::Admin);
    assert_eq!(
        class_of(&Op::MemRead {
            handle: MemHandle(1),
            offset: 0,
            len: 1
        }),
        Class::Transfer
    );
    let exec = Op::Execute {
        pind: ProgramIndex(0),
        windows: Windows::Inline(vec![]),
        cparam1: 0,
        cparam2: 0,
        params: vec![],
        fuel: None,
        time_limit_ms: None,
        generation: None,
    };
    assert_eq!(class_of(&exec), Class::Compute);
    let copy = |sources| Op::MemCopy {
        dst: MemHandle(1),
        dst_offset: 0,
        sources,
    };
    let nvm = CopySource::Nvm { offset: 0, len: 8 };
    let peer = CopySource::Peer {
        peer: "tcp://127.0.0.1:1".into(),
        offset: 0,
        len: 8,
    };
    assert_eq!(class_of(&copy(vec![nvm.clone()])), Class::Transfer);
    // A pull waits on its peer: never on a transfer worker, which serves peers.
    assert_eq!(class_of(&copy(vec![nvm, peer])), Class::Peer);
}

/// An Execute run inline that outlasts `INLINE_LEASH` calls the pair's overrun hook
/// while it still holds the submitting thread, so another thread can submit its Abort,
/// which stops it: the run ends Aborted, not at its time limit.
#[test]
fn a_long_inline_execute_calls_the_overrun_hook_and_its_abort_stops_it() {
    use std::sync::mpsc;

    let (_dir, dev) = tiny_device(1 << 20);
    let qp = dev.queue_pair(8).expect("queue pair");
    load_raw(&qp, 5, &SPIN);
    let shared = qp.shared.upgrade().expect("the device is open");
    // As if its last run had been short: the next one runs inline.
    shared.execute_ns_last[5].store(1_000, Ordering::Relaxed);
    let (called, hook_calls) = mpsc::channel();
    assert!(qp.on_inline_overrun(move || {
        let _ = called.send(Instant::now());
    }));
    assert!(!qp.on_inline_overrun(|| {}), "set once");
    std::thread::scope(|scope| {
        let started = Instant::now();
        let runner = scope.spawn(|| {
            qp.submit_inline(
                Command::new(CommandId(1), execute(5, 1 << 40, 60_000)),
                None,
            )
        });
        let at = hook_calls
            .recv_timeout(Duration::from_secs(30))
            .expect("the hook is called while the inline run lasts");
        assert!(at.duration_since(started) >= INLINE_LEASH);
        assert!(!runner.is_finished(), "the run holds the submitting thread");
        qp.submit(Command::new(
            CommandId(2),
            Op::Abort {
                target: CommandId(1),
            },
        ))
        .expect("submit");
        runner.join().expect("no panic").expect("submitted");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "stopped by the Abort, long before its time limit"
        );
    });
    let done = reap_n(&qp, 2);
    assert_eq!(done[&CommandId(2)].value, 1, "the Abort found the run");
    let c = &done[&CommandId(1)];
    assert_eq!(c.status, Status::Aborted, "{c:?}");
    assert!(
        hook_calls.try_recv().is_err(),
        "the hook is called once per run"
    );
    drop(shared);
    drop(qp);
    dev.close().expect("close");
}

/// A file of `data` at `path`, written whole.
fn put_file(qp: &QueuePair, id: CommandId, path: &str, data: &[u8]) {
    let op = Op::FileWrite {
        path: path.to_string(),
        offset: 0,
        data: data.to_vec(),
        mode: csx_proto::WriteMode::Write,
    };
    let c = qp.call(Command::new(id, op)).expect("submit");
    assert_eq!(c.status, Status::Success, "{c:?}");
}

/// An allocation of `len` bytes.
fn alloc_mem(qp: &QueuePair, id: CommandId, len: u64) -> MemHandle {
    let c = qp
        .call(Command::new(id, Op::MemAlloc { size_bytes: len }))
        .expect("submit");
    assert_eq!(c.status, Status::Success, "{c:?}");
    MemHandle(c.value as u32)
}

/// A read's bytes.
fn read_data(c: &Completion) -> Vec<u8> {
    match &c.reply {
        Reply::Data(d) => d.clone(),
        other => panic!("a read's data, found {other:?}"),
    }
}

/// A device with room for a few MiB copies and one engine, for the copies' ordering tests.
fn copies_device(dir: &std::path::Path) -> DeviceRuntime {
    copies_device_with(dir, None)
}

/// [`copies_device`] with `transfer_workers` (the default's when `None`).
fn copies_device_with(dir: &std::path::Path, transfer_workers: Option<u32>) -> DeviceRuntime {
    let config = DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 64 << 20,
        state_size_bytes: 4096,
        engines: Some(1),
        transfer_workers,
        ..DeviceConfig::default()
    };
    DeviceRuntime::init(dir, config).expect("init")
}

/// Submits `ops` in order on `qp` (ids from `next`) while the copiers are held, reaps
/// `n` completions, each within a minute (a deadlock's bound, not a speed goal: `None`
/// when none came), and releases the copiers before any assertion (a held copy would
/// keep the device from closing); the ids sent and the completions reaped.
fn submit_reap_held(
    dev: &DeviceRuntime,
    qp: &QueuePair,
    next: &mut dyn FnMut() -> CommandId,
    ops: impl IntoIterator<Item = Op>,
    n: usize,
) -> (Vec<CommandId>, Vec<Option<Completion>>) {
    let sent: Vec<CommandId> = (ops.into_iter())
        .map(|op| {
            let id = next();
            qp.submit(Command::new(id, op)).expect("submit");
            id
        })
        .collect();
    let deadlock = Some(std::time::Duration::from_secs(60));
    let reaped = (0..n).map(|_| qp.reap(deadlock)).collect();
    dev.shared().copies.hold(false);
    (sent, reaped)
}

/// A Memory Read or Write of bytes no copy in flight writes does not wait for the
/// copies (`copies::wait_before`): with the copiers held, so the copy stays in flight
/// for as long as the test wants, a write into another allocation and a read of it
/// complete, with their own bytes; then the copy, released, ends whole. Without the
/// rule the worker drains the held copy first, and the write never completes (the
/// reap below gives up after a minute, a deadlock's bound, not a speed goal).
#[test]
fn memory_reads_and_writes_of_other_bytes_pass_copies_in_flight() {
    const LEN: usize = 1 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let dev = copies_device(dir.path());
    let qp = dev.queue_pair(16).expect("queue pair");
    let a: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_mul(29)).collect();
    let mut ids = (1u64..).map(CommandId);
    let mut next = || ids.next().expect("ids enough");
    put_file(&qp, next(), "/a", &a);
    let h1 = alloc_mem(&qp, next(), LEN as u64);
    let h2 = alloc_mem(&qp, next(), 4096);
    dev.shared().copies.hold(true);
    let ops = [
        Op::MemCopy {
            dst: h1,
            dst_offset: 0,
            sources: vec![CopySource::File {
                path: "/a".to_string(),
                offset: 0,
                len: LEN as u64,
            }],
        },
        Op::MemWrite {
            handle: h2,
            offset: 64,
            data: vec![0x7e; 64],
        },
        Op::MemRead {
            handle: h2,
            offset: 64,
            len: 64,
        },
    ];
    let (sent, while_held) = submit_reap_held(&dev, &qp, &mut next, ops, 2);
    let mut order: Vec<Completion> = (while_held.into_iter())
        .map(|c| c.expect("the write and read end while the copy is held"))
        .collect();
    order.push(qp.reap(None).expect("the copy's completion"));
    for c in &order {
        assert_eq!(c.status, Status::Success, "{c:?}");
    }
    let ids: Vec<CommandId> = order.iter().map(|c| c.id).collect();
    assert_eq!(
        ids,
        [sent[1], sent[2], sent[0]],
        "the write and read of other bytes end before the copy"
    );
    assert_eq!(
        read_data(&order[1]),
        vec![0x7e; 64],
        "the read saw the write"
    );
    let tail = qp
        .call(Command::new(
            next(),
            Op::MemRead {
                handle: h1,
                offset: (LEN - 64) as u64,
                len: 64,
            },
        ))
        .expect("submit");
    assert_eq!(
        read_data(&tail),
        a[LEN - 64..],
        "the copy's bytes are whole"
    );
    drop(qp);
    dev.close().expect("close");
}

/// A command that waits for copies waits only for those handed out before it
/// (`copies::wait_before`), so a client that keeps submitting copies cannot hold another
/// client's file commands. Two transfer workers; with the copiers held, client A's copy
/// 0 is in flight when client B's File Stat starts to wait; A's copy 1, handed out
/// after, stays held while copy 0 runs. B's stat completes, and then A's copies, whole.
/// Before the rule the stat waited for every copy in flight, so it never completed
/// while A's copies kept coming (the reap gives up after a minute, a deadlock's bound,
/// not a speed goal).
#[test]
fn a_command_waits_only_for_copies_handed_out_before_it() {
    const LEN: usize = 64 << 10;
    let dir = tempfile::tempdir().expect("temp dir");
    let dev = copies_device_with(dir.path(), Some(2));
    let (qa, qb) = (
        dev.queue_pair(8).expect("pair"),
        dev.queue_pair(8).expect("pair"),
    );
    let a: Vec<u8> = (0..LEN)
        .map(|i| (i as u8).wrapping_mul(13) ^ 0x3c)
        .collect();
    let mut ids = (1u64..).map(CommandId);
    let mut next = || ids.next().expect("ids enough");
    put_file(&qa, next(), "/a", &a);
    let h = alloc_mem(&qa, next(), 2 * LEN as u64);
    let copies = &dev.shared().copies;
    copies.hold(true);
    let copy = |at: usize| Op::MemCopy {
        dst: h,
        dst_offset: at as u64,
        sources: vec![CopySource::File {
            path: "/a".to_string(),
            offset: 0,
            len: LEN as u64,
        }],
    };
    qa.submit(Command::new(next(), copy(0))).expect("submit");
    copies.wait_until(0, 1);
    let stat = next();
    let op = Op::FileStat {
        path: "/a".to_string(),
    };
    qb.submit(Command::new(stat, op)).expect("submit");
    copies.wait_until(1, 1);
    qa.submit(Command::new(next(), copy(LEN))).expect("submit");
    copies.wait_until(1, 2);
    copies.hold_from(Some(1));
    let deadlock = Some(std::time::Duration::from_secs(60));
    let got = qb.reap(deadlock);
    let first = qa.reap(deadlock);
    copies.hold(false);
    let got = got.expect("the stat ends while a later copy is held");
    assert_eq!((got.id, got.status), (stat, Status::Success), "{got:?}");
    let first = first.expect("copy 0 ends while copy 1 is held");
    assert_eq!(first.status, Status::Success, "{first:?}");
    let second = qa.reap(deadlock).expect("copy 1 ends once released");
    assert_eq!(second.status, Status::Success, "{second:?}");
    let op = Op::MemRead {
        handle: h,
        offset: 0,
        len: 2 * LEN as u64,
    };
    let both = read_data(&qa.call(Command::new(next(), op)).expect("submit"));
    assert_eq!(both[..LEN], a[..], "copy 0's bytes");
    assert_eq!(both[LEN..], a[..], "copy 1's bytes");
    drop((qa, qb));
    dev.close().expect("close");
}

/// Handing a copy to the copiers does not wait for a copier (`copies::hand_off`, up to
/// `COPIES_QUEUED_MAX`): with the copiers held, more copies than run at once (the last
/// into the bytes of the first), then a Memory Fill and a Memory Write of other bytes, all
/// submitted at once; the fill and the write complete while every copy waits. Released,
/// the copies end, and the bytes both the first and the last copy write hold the last
/// one's (a copier never starts a copy before an earlier one into the same bytes has
/// ended). Without the rule the worker waits to hand out the fifth copy, so the fill
/// never completes (the reap gives up after a minute, a deadlock's bound, not a speed
/// goal); with a fill draining the copies as before, it never completes either.
#[test]
fn fills_and_writes_pass_more_copies_than_run_at_once() {
    const LEN: usize = 64 << 10;
    let copies = super::copies::COPIES_IN_FLIGHT_MAX + 1;
    let dir = tempfile::tempdir().expect("temp dir");
    let dev = copies_device(dir.path());
    let qp = dev.queue_pair(32).expect("queue pair");
    let a: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_mul(29)).collect();
    let b: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_mul(7) ^ 0x55).collect();
    let mut ids = (1u64..).map(CommandId);
    let mut next = || ids.next().expect("ids enough");
    put_file(&qp, next(), "/a", &a);
    put_file(&qp, next(), "/b", &b);
    let h1 = alloc_mem(&qp, next(), (copies * LEN) as u64);
    let h2 = alloc_mem(&qp, next(), 4096);
    dev.shared().copies.hold(true);
    let copy = |path: &str, at: usize| Op::MemCopy {
        dst: h1,
        dst_offset: at as u64,
        sources: vec![CopySource::File {
            path: path.to_string(),
            offset: 0,
            len: LEN as u64,
        }],
    };
    let mut ops: Vec<Op> = (0..copies).map(|i| copy("/a", i * LEN)).collect();
    ops.push(copy("/b", 0));
    ops.push(Op::MemFill {
        handle: h2,
        offset: 0,
        len: 4096,
        byte: 0x5a,
    });
    ops.push(Op::MemWrite {
        handle: h2,
        offset: 64,
        data: vec![0x7e; 64],
    });
    let (sent, while_held) = submit_reap_held(&dev, &qp, &mut next, ops, 2);
    let first: Vec<Completion> = (while_held.into_iter())
        .map(|c| c.expect("the fill and the write end while the copies are held"))
        .collect();
    let ids: Vec<CommandId> = first.iter().map(|c| c.id).collect();
    assert_eq!(
        ids,
        sent[copies + 1..],
        "the fill, then the write, before any copy"
    );
    for _ in 0..=copies {
        let c = qp.reap(None).expect("a copy's completion");
        assert_eq!(c.status, Status::Success, "{c:?}");
    }
    let read = |id: CommandId, handle: MemHandle, offset: usize, len: usize| {
        let op = Op::MemRead {
            handle,
            offset: offset as u64,
            len: len as u64,
        };
        read_data(&qp.call(Command::new(id, op)).expect("submit"))
    };
    let last = read(next(), h1, 0, LEN);
    assert_eq!(last, b, "the last copy into the bytes wrote them last");
    let other = read(next(), h1, LEN, LEN);
    assert_eq!(other, a, "the other copies' bytes are whole");
    let mut want = vec![0x5a; 4096];
    want[64..128].fill(0x7e);
    assert_eq!(
        read(next(), h2, 0, 4096),
        want,
        "the write follows the fill"
    );
    drop(qp);
    dev.close().expect("close");
}

/// Memory Copies from the media run several at once beside the transfer workers
/// (`copies`), yet every other transfer command of the queue still sees them in the
/// queue's order: submitted together without waiting, a copy then a read of its
/// destination, a copy then a write over its destination, a copy then a write of its
/// source file, and two copies into the same bytes, each end as if run one at a time.
/// Method: MiB copies (so each is in flight while the next commands are taken)
/// followed at once by the dependent commands, every completion checked. Without the
/// transfer worker's wait for the copies before it, the read finds zeros.
#[test]
fn copies_keep_the_queue_order_against_dependent_commands() {
    const LEN: usize = 6 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let dev = copies_device(dir.path());
    let qp = dev.queue_pair(16).expect("queue pair");
    let pattern = |seed: u8| -> Vec<u8> {
        (0..LEN)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    };
    let (a, b) = (pattern(1), pattern(2));
    let ids = (1u64..).map(CommandId);
    let mut ids = ids.into_iter();
    let mut next = || ids.next().expect("ids enough");
    put_file(&qp, next(), "/a", &a);
    put_file(&qp, next(), "/b", &b);
    let h1 = alloc_mem(&qp, next(), LEN as u64);
    let h2 = alloc_mem(&qp, next(), LEN as u64);
    let h3 = alloc_mem(&qp, next(), LEN as u64);
    let copy = |dst: MemHandle, path: &str| Op::MemCopy {
        dst,
        dst_offset: 0,
        sources: vec![CopySource::File {
            path: path.to_string(),
            offset: 0,
            len: LEN as u64,
        }],
    };
    let tail = (LEN - 64) as u64;
    let read = |handle: MemHandle, offset: u64| Op::MemRead {
        handle,
        offset,
        len: 64,
    };
    let ops = [
        // 1: a copy, then a read of its last bytes.
        copy(h1, "/a"),
        read(h1, tail),
        // 2: a copy, then a write over its last bytes.
        copy(h2, "/a"),
        Op::MemWrite {
            handle: h2,
            offset: tail,
            data: vec![0xee; 64],
        },
        // 3: two copies into the same bytes: the second's stay.
        copy(h3, "/a"),
        copy(h3, "/b"),
        // 4: a copy of /b (into h1, after the read above), then a write of /b.
        copy(h1, "/b"),
        Op::FileWrite {
            path: "/b".to_string(),
            offset: tail,
            data: vec![0x55; 64],
            mode: csx_proto::WriteMode::Write,
        },
    ];
    let sent: Vec<CommandId> = ops
        .into_iter()
        .map(|op| {
            let id = next();
            qp.submit(Command::new(id, op)).expect("submit");
            id
        })
        .collect();
    let done = reap_n(&qp, sent.len());
    for id in &sent {
        assert_eq!(done[id].status, Status::Success, "{:?}", done[id]);
    }
    let seen = read_data(&done[&sent[1]]);
    assert_eq!(seen, a[LEN - 64..], "the read saw the copy before it");
    let mut read_now = |h: MemHandle, offset: u64| {
        read_data(
            &qp.call(Command::new(next(), read(h, offset)))
                .expect("submit"),
        )
    };
    let over = read_now(h2, tail);
    assert_eq!(
        over,
        vec![0xee; 64],
        "the write went over the copy before it"
    );
    assert_eq!(read_now(h3, 0), b[..64], "the later copy's bytes stay");
    assert_eq!(
        read_now(h3, tail),
        b[LEN - 64..],
        "the later copy's bytes stay"
    );
    let before = read_now(h1, tail);
    assert_eq!(
        before,
        b[LEN - 64..],
        "the copy read /b before the write after it"
    );
    drop(qp);
    dev.close().expect("close");
}

/// A state directory `init` makes is its user's alone whatever the umask (the image and
/// metadata hold every stored byte); one that exists keeps its owner's mode.
#[test]
fn init_makes_the_state_directory_its_users_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let parent = tempfile::tempdir().expect("temp dir");
    let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    let config = || DeviceConfig {
        nvm_size_bytes: 1 << 20,
        slm_size_bytes: 1 << 20,
        state_size_bytes: 4096,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let made = parent.path().join("made/dev");
    drop(DeviceRuntime::init(&made, config()).expect("init"));
    assert_eq!(mode(&made), 0o700);
    let given = parent.path().join("given");
    fs::create_dir(&given).expect("mkdir");
    fs::set_permissions(&given, fs::Permissions::from_mode(0o751)).expect("chmod");
    drop(DeviceRuntime::init(&given, config()).expect("init"));
    assert_eq!(mode(&given), 0o751);
    // An init that stopped before its configuration (or a device whose configuration was
    // removed) is named as such, not as a clash over the image.
    fs::remove_file(given.join(CONFIG_FILE_NAME)).expect("rm");
    match DeviceRuntime::init(&given, config()) {
        Err(e @ DeviceError::Unfinished { .. }) => {
            assert!(e.to_string().contains("interrupted"), "{e}")
        }
        other => panic!("an unfinished device, got {other:?}"),
    }
    config().save(&given).expect("save");
    // Whatever the directory's mode, the files holding stored bytes are the owner's alone.
    for dev in [&made, &given] {
        for name in [NVM_FILE_NAME, "meta.redb", "state.bin", CONFIG_FILE_NAME] {
            assert_eq!(mode(&dev.join(name)), 0o600, "{name} in {}", dev.display());
        }
        assert_eq!(mode(&dev.join(PROGRAMS_DIR_NAME)), 0o700);
    }
}
