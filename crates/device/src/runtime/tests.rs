//! Unit tests of the runtime: routing, inline runs, DMA buffers, departing pairs.

use csx_proto::{
    Command, CommandId, MemHandle, Op, ProgramIndex, ProgramType, Reply, Status, Windows,
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
    };
    assert!(!shared.is_short(&job(exec.clone(), None)), "never ran");
    shared.execute_ns_last[3].store(INLINE_EXECUTE_NS_MAX, Ordering::Relaxed);
    assert!(shared.is_short(&job(exec.clone(), None)));
    // The slot is empty: the execute fails, inline, and its time is recorded.
    qp.submit_inline(Command::new(CommandId(3), exec), None)
        .expect("submit");
    let c = qp.try_reap().expect("an inline command has completed");
    assert_eq!(c.id, CommandId(3));
    assert!(!c.status.is_success());
    assert_ne!(shared.execute_ns_last[3].load(Ordering::Relaxed), u64::MAX);
    drop(shared);
    drop(qp);
    dev.close().expect("close");
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
    };
    assert_eq!(class_of(&exec), Class::Compute);
}
