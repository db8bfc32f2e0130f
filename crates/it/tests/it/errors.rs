//! Error paths: every refusal arrives as its typed `CallError`, with the device's detail,
//! and leaves the device working. Host-side refusals (outside the protocol's limits)
//! never reach the device.

use std::time::Duration;

use csx_host::proto::{
    EngineKind, MemHandle, MemRange, Op, ProgramIndex, ProgramType, RangeSetId, Status,
};
use csx_host::{CallError, ExecuteRequest};

use crate::programs::{compile, load, BUSY_WAIT, MIX, SUM64, UNKNOWN_FUNCTION};
use crate::{Fixture, SLM_SIZE};

/// Asserts `r` failed with the variant `pat` and that the device said why.
macro_rules! fails {
    ($r:expr, $pat:pat) => {{
        let e = $r.expect_err("the call must fail");
        assert!(matches!(e, $pat), "wrong error: {e:?}");
        if let Some(failure) = e.failure() {
            assert!(failure.detail.is_some(), "no detail in {e}");
        }
        e
    }};
}

fn wrong_handles(f: &mut Fixture) {
    let dev = f.dev();
    let h = dev.alloc(64).unwrap();
    let bogus = MemHandle(h.0 + 1000);
    fails!(dev.read_mem(bogus, 0, 8), CallError::InvalidMemoryHandle(_));
    fails!(
        dev.write_mem(bogus, 0, b"x"),
        CallError::InvalidMemoryHandle(_)
    );
    fails!(dev.free(bogus), CallError::InvalidMemoryHandle(_));
    // Handle 0 is refused by the host before submission.
    let e = fails!(
        dev.read_mem(MemHandle::NONE, 0, 8),
        CallError::Invalid { .. }
    );
    assert!(e.to_string().contains("mem-read"), "{e}");
    // Another client's handle is not ours.
    let other = f.open();
    fails!(other.read_mem(h, 0, 8), CallError::InvalidMemoryHandle(_));
    fails!(other.free(h), CallError::InvalidMemoryHandle(_));
    dev.free(h).unwrap();
    fails!(dev.free(h), CallError::InvalidMemoryHandle(_));
    // A closed client's allocations are reclaimed.
    let before = dev.identify().unwrap().slm_free_bytes;
    let h2 = other.alloc(1 << 20).unwrap();
    assert!(dev.identify().unwrap().slm_free_bytes < before);
    other.close().unwrap();
    assert_eq!(dev.identify().unwrap().slm_free_bytes, before);
    let _ = h2;
}

fn out_of_range_and_overlapping(f: &mut Fixture) {
    let dev = f.dev();
    let h = dev.alloc(100).unwrap();
    fails!(dev.read_mem(h, 90, 20), CallError::OutOfRange(_));
    fails!(dev.write_mem(h, 100, b"x"), CallError::OutOfRange(_));
    fails!(dev.fill_mem(h, 0, 101, 0), CallError::OutOfRange(_));
    fails!(dev.read_mem(h, u64::MAX, 2), CallError::Invalid { .. });
    let pind = load(f, SUM64, EngineKind::Jit);
    // Windows outside their allocation, overlapping, too many, or unknown.
    fails!(
        dev.execute(&ExecuteRequest::new(pind).window(h, 50, 51)),
        CallError::InvalidRangeSet(_)
    );
    fails!(
        dev.execute(&ExecuteRequest::new(pind).window(h, 0, 50).window(h, 40, 20)),
        CallError::OverlappingRanges(_)
    );
    let mut many = ExecuteRequest::new(pind);
    for i in 0..17 {
        many = many.window(h, i, 1);
    }
    let e = fails!(dev.execute(&many), CallError::Invalid { .. });
    let CallError::Invalid { source, .. } = &e else {
        unreachable!()
    };
    assert_eq!(source.status(), Status::MaximumMemoryRangesExceeded);
    fails!(
        dev.execute(&ExecuteRequest::new(pind).range_set(RangeSetId(999))),
        CallError::UnknownRangeSet(_)
    );
    // Range sets are checked the same way when created.
    fails!(
        dev.create_range_set(vec![MemRange {
            handle: h,
            offset: 90,
            len: 20
        }]),
        CallError::InvalidRangeSet(_)
    );
    fails!(
        dev.create_range_set(vec![
            MemRange {
                handle: h,
                offset: 0,
                len: 20
            },
            MemRange {
                handle: h,
                offset: 10,
                len: 5
            }
        ]),
        CallError::OverlappingRanges(_)
    );
    // Copies that read past a file's end, or write past an allocation's.
    dev.put_bytes("/short", &[1u8; 10]).unwrap();
    fails!(
        dev.copy_file_to_mem("/short", 5, 10, h, 0),
        CallError::OutOfRange(_)
    );
    fails!(
        dev.copy_file_to_mem("/short", 0, 10, h, 95),
        CallError::OutOfRange(_)
    );
    fails!(
        dev.clear_state(crate::STATE_SIZE, 8),
        CallError::OutOfRange(_)
    );
    dev.free(h).unwrap();
}

fn unknown_and_inactive_programs(f: &mut Fixture) {
    let dev = f.dev();
    fails!(
        dev.execute(&ExecuteRequest::new(ProgramIndex(9))),
        CallError::NoProgram(_)
    );
    let e = fails!(
        dev.execute(&ExecuteRequest::new(ProgramIndex(64))),
        CallError::Invalid { .. }
    );
    let CallError::Invalid { source, .. } = &e else {
        unreachable!()
    };
    assert_eq!(source.status(), Status::InvalidProgramIndex);
    // Not activated.
    let image = compile(MIX);
    dev.load_program(ProgramIndex(3), ProgramType::Elf, &image, None)
        .unwrap();
    fails!(
        dev.execute(&ExecuteRequest::new(ProgramIndex(3))),
        CallError::ProgramNotActivated(_)
    );
    // Garbage images, unknown functions and unknown entries are refused at load.
    fails!(
        dev.load_program(
            ProgramIndex(4),
            ProgramType::Elf,
            b"\x7fELF not really",
            None
        ),
        CallError::InvalidProgram(_)
    );
    fails!(
        dev.load_program(ProgramIndex(4), ProgramType::Raw, &[1, 2, 3], None),
        CallError::InvalidProgram(_)
    );
    let e = fails!(
        dev.load_program(
            ProgramIndex(4),
            ProgramType::Elf,
            &compile(UNKNOWN_FUNCTION),
            None
        ),
        CallError::InvalidProgram(_)
    );
    assert!(e.to_string().contains("csx_no_such_function"), "{e}");
    fails!(
        dev.load_program(
            ProgramIndex(4),
            ProgramType::Elf,
            &image,
            Some("no_such_entry")
        ),
        CallError::InvalidProgram(_)
    );
    // A verifier refusal: a jump out of the program, caught at activation.
    let bad_jump: Vec<u8> = [[0x05u8, 0, 10, 0, 0, 0, 0, 0], [0x95, 0, 0, 0, 0, 0, 0, 0]].concat();
    dev.load_program(ProgramIndex(4), ProgramType::Raw, &bad_jump, None)
        .unwrap();
    let e = fails!(
        dev.activate(ProgramIndex(4), EngineKind::Jit),
        CallError::InvalidProgram(_)
    );
    assert_eq!(e.detail().unwrap().function, "verifier");
    assert_eq!(
        dev.programs().unwrap().len(),
        2,
        "failed loads leave their slot empty"
    );
}

/// Memory and programs in use by a running execution cannot be freed, unloaded or
/// deactivated; after it ends, they can.
fn in_use(f: &mut Fixture) {
    let dev = f.dev();
    let pind = load(f, BUSY_WAIT, EngineKind::Jit);
    let h = dev.alloc(4096).unwrap();
    let rsid = dev
        .create_range_set(vec![MemRange {
            handle: h,
            offset: 0,
            len: 4096,
        }])
        .unwrap();
    let client = dev.client();
    let run_ns = 1_500_000_000;
    let id = client
        .submit(
            ExecuteRequest::new(pind)
                .range_set(rsid)
                .cparams(run_ns, 0)
                .time_limit_ms(60_000)
                .to_op(),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        client.wait(id, Some(Duration::ZERO)).unwrap().is_none(),
        "the program still runs"
    );
    fails!(dev.free(h), CallError::MemoryInUse(_));
    fails!(dev.write_mem(h, 0, b"x"), CallError::MemoryInUse(_));
    fails!(dev.delete_range_set(rsid), CallError::MemoryInUse(_));
    fails!(dev.unload(pind), CallError::ProgramInUse(_));
    fails!(dev.deactivate(pind), CallError::ProgramInUse(_));
    let c = client.wait(id, None).unwrap().expect("the program ends");
    assert_eq!((c.status, c.value), (Status::Success, 1));
    dev.delete_range_set(rsid).unwrap();
    dev.free(h).unwrap();
    dev.unload(pind).unwrap();
}

fn full_memory(f: &mut Fixture) {
    let dev = f.dev();
    fails!(dev.alloc(SLM_SIZE + 1), CallError::InsufficientResources(_));
    let mut handles = Vec::new();
    let chunk = SLM_SIZE / 4;
    for _ in 0..4 {
        handles.push(dev.alloc(chunk).unwrap());
    }
    let e = fails!(dev.alloc(64), CallError::InsufficientResources(_));
    assert!(
        e.to_string().contains("64"),
        "the message names the size: {e}"
    );
    for h in handles {
        dev.free(h).unwrap();
    }
    dev.alloc(SLM_SIZE).map(|h| dev.free(h)).unwrap().unwrap();
    fails!(dev.alloc(0), CallError::Invalid { .. });
}

fn bad_paths(f: &mut Fixture) {
    let dev = f.dev();
    fails!(dev.stat("/missing"), CallError::NotFound(_));
    fails!(dev.read_file("/missing", 0, 1), CallError::NotFound(_));
    fails!(dev.delete_file("/missing"), CallError::NotFound(_));
    fails!(dev.extents("/missing"), CallError::NotFound(_));
    fails!(dev.stat("/a/../b"), CallError::Invalid { .. });
    fails!(dev.stat(""), CallError::Invalid { .. });
    fails!(dev.put_bytes("/nul\0", b"x"), CallError::Invalid { .. });
    fails!(
        dev.stat(&format!("/{}", "x".repeat(2000))),
        CallError::Invalid { .. }
    );
    let h = dev.alloc(8).unwrap();
    fails!(
        dev.copy_file_to_mem("/missing", 0, 8, h, 0),
        CallError::NotFound(_)
    );
    let local = f.scratch().join("got");
    let e = dev.get_file("/missing", &local, &mut |_| {}).unwrap_err();
    assert!(
        matches!(e, csx_host::FileTransferError::Call(CallError::NotFound(_))),
        "{e}"
    );
    let e = dev
        .put_file(&f.scratch().join("no-such-local"), "/x", &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(e, csx_host::FileTransferError::Local { op: "open", .. }),
        "{e}"
    );
    // Filling the namespace: no space, and the store keeps working.
    let big = vec![7u8; 16 << 20];
    let mut written = 0;
    let e = loop {
        match dev.write_file("/fill", written, &big) {
            Ok(()) => written += big.len() as u64,
            Err(e) => break e,
        }
        assert!(written <= crate::NVM_SIZE, "the namespace never fills");
    };
    assert!(matches!(e, CallError::NoSpace(_)), "{e:?}");
    dev.delete_file("/fill").unwrap();
    dev.flush().unwrap();
    dev.put_bytes("/after", b"ok").unwrap();
    assert_eq!(dev.read_file("/after", 0, 2).unwrap(), b"ok");
    dev.free(h).unwrap();
}

/// A full queue pair refuses a non-blocking submission without losing anything.
fn queue_full(f: &mut Fixture) {
    let pind = load(f, MIX, EngineKind::Jit);
    let client = f.dev().client();
    let depth = client.queue_depth();
    // A command stays outstanding until its completion is received, however fast it
    // runs: `depth` submissions fill the pair deterministically.
    let ids: Vec<_> = (0..u64::from(depth))
        .map(|i| {
            client
                .submit(ExecuteRequest::new(pind).cparams(i, 0).to_op())
                .unwrap()
        })
        .collect();
    let e = client.submit(Op::Identify).unwrap_err();
    assert!(
        matches!(e, CallError::Transport(csx_host::TransportError::QueueFull { depth: d }) if d == depth),
        "{e}"
    );
    for (i, id) in ids.into_iter().enumerate().rev() {
        assert_eq!(
            client.wait(id, None).unwrap().unwrap().value,
            i as u64 * 1000003
        );
    }
    assert!(matches!(
        client.wait(csx_host::proto::CommandId(u64::MAX), None),
        Err(CallError::UnknownCommand { .. })
    ));
    f.dev().identify().unwrap();
}

crate::backend_tests!(
    wrong_handles,
    out_of_range_and_overlapping,
    unknown_and_inactive_programs,
    in_use,
    full_memory,
    bad_paths,
    queue_full,
);
