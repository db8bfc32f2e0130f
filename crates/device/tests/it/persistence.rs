//! What survives close and reopen: files, shared state, and the loaded and active
//! programs made persistent by name (no other).

use csx_device::{DeviceError, DeviceRuntime};
use csx_proto::*;

use crate::common::*;

#[test]
fn shared_state_files_and_programs_survive_reopen() {
    let mut h = Harness::new();
    let image = compile("state.c");
    h.load(0, &image, Some("count"), EngineKind::Jit, 1 << 20);
    h.load(
        1,
        &image,
        Some("state_len"),
        EngineKind::Interpreter,
        1 << 20,
    );
    // Slot 2 is loaded and active too, but not made persistent: it goes at reopen (as it
    // would when its queue pair closed).
    h.load(2, &image, Some("count"), EngineKind::Jit, 1 << 20);
    for (pind, name) in [(0, "count"), (1, "state-len")] {
        h.ok(Op::PersistProgram {
            pind: ProgramIndex(pind),
            name: name.into(),
        });
    }
    for expect in 1..=3 {
        assert_eq!(h.exec(0, vec![], 16, &[]).value, expect);
    }
    assert_eq!(h.exec(0, vec![], 24, &[]).value, 1);
    h.ok(Op::FileWrite {
        path: "/keep".into(),
        offset: 0,
        data: b"persistent".to_vec(),
        mode: WriteMode::Truncate,
    });
    h.reopen();
    // The persistent programs come back active on the same engines, under their names
    // and owned by no queue pair; the other one is gone.
    let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
        panic!()
    };
    let states: Vec<_> = list
        .iter()
        .map(|p| {
            (
                p.pind.0,
                p.state,
                p.engine,
                p.persistent.as_deref(),
                p.owner,
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (
                0,
                ProgramState::Active,
                Some(EngineKind::Jit),
                Some("count"),
                None
            ),
            (
                1,
                ProgramState::Active,
                Some(EngineKind::Interpreter),
                Some("state-len"),
                None
            )
        ]
    );
    assert_eq!(h.exec(0, vec![], 16, &[]).value, 4);
    assert_eq!(h.exec(1, vec![], 0, &[]).value, 4096);
    let Reply::Data(d) = h
        .ok(Op::FileRead {
            path: "/keep".into(),
            offset: 0,
            len: 64,
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(d, b"persistent");
    // Clear part of the state, then all of it.
    h.ok(Op::ClearState { offset: 16, len: 8 });
    assert_eq!(h.exec(0, vec![], 16, &[]).value, 1);
    assert_eq!(h.exec(0, vec![], 24, &[]).value, 2);
    h.ok(Op::ClearState { offset: 0, len: 0 });
    assert_eq!(h.exec(0, vec![], 24, &[]).value, 1);
    h.fails(
        Op::ClearState {
            offset: 4000,
            len: 100,
        },
        Status::OutOfRange,
    );
    h.ok(Op::Flush);
    h.reopen();
    assert_eq!(h.exec(0, vec![], 24, &[]).value, 2);
    // Unloaded programs stay gone.
    h.ok(Op::UnloadProgram {
        pind: ProgramIndex(1),
        generation: None,
    });
    h.reopen();
    let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
        panic!()
    };
    assert_eq!(list.len(), 1);
}

#[test]
fn one_device_per_directory_and_init_rules() {
    let h = Harness::new();
    assert!(matches!(
        DeviceRuntime::open(h.dir.path()),
        Err(DeviceError::Locked { .. })
    ));
    assert!(matches!(
        DeviceRuntime::init(h.dir.path(), test_config()),
        Err(DeviceError::AlreadyInitialized { .. })
    ));
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        DeviceRuntime::open(empty.path()),
        Err(DeviceError::NotInitialized { .. })
    ));
    let bad = csx_device::DeviceConfig {
        nvm_size_bytes: 1000,
        ..test_config()
    };
    assert!(matches!(
        DeviceRuntime::init(empty.path(), bad),
        Err(DeviceError::Config(_))
    ));
}

#[test]
fn corrupt_state_file_is_a_typed_error() {
    let mut h = Harness::new();
    h.qp = None;
    h.dev.take().unwrap().close().unwrap();
    std::fs::write(h.dir.path().join("state.bin"), b"short").unwrap();
    assert!(matches!(
        DeviceRuntime::open(h.dir.path()),
        Err(DeviceError::State(_))
    ));
    std::fs::write(h.dir.path().join("device.json"), b"{ not json").unwrap();
    assert!(matches!(
        DeviceRuntime::open(h.dir.path()),
        Err(DeviceError::Config(_))
    ));
}
