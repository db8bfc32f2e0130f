//! Program slots: chunked load, activation on both engines, TP4091 status codes, listing.

use csx_device::QueuePair;
use csx_proto::limits::*;
use csx_proto::*;

use crate::common::*;

#[test]
fn lifecycle_and_status_codes() {
    let h = Harness::new();
    let image = compile("args.c");
    let p = ProgramIndex(4);
    h.fails(
        Op::ActivateProgram {
            pind: p,
            engine: EngineKind::Jit,
        },
        Status::NoProgram,
    );
    h.fails(Op::DeactivateProgram { pind: p }, Status::NoProgram);
    h.fails(
        Op::UnloadProgram {
            pind: p,
            generation: None,
        },
        Status::NoProgram,
    );
    let exec = || Op::Execute {
        pind: p,
        windows: Windows::Inline(vec![]),
        cparam1: 1,
        cparam2: 0,
        params: vec![],
        fuel: None,
        time_limit_ms: None,
        generation: None,
    };
    h.fails(exec(), Status::NoProgram);
    // Chunked load in 100-byte pieces; the slot lists as loading in between.
    let total = image.len() as u32;
    h.ok(Op::LoadProgram {
        pind: p,
        ptype: ProgramType::Elf,
        total_size_bytes: total,
        offset: 0,
        data: image[..100].to_vec(),
        entry: None,
    });
    let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
        panic!()
    };
    assert_eq!(
        (list[0].pind, list[0].state, list[0].loaded_bytes),
        (p, ProgramState::Loading, 100)
    );
    h.fails(exec(), Status::NoProgram);
    // A gap in the offsets is refused without losing the load.
    h.fails(
        Op::LoadProgram {
            pind: p,
            ptype: ProgramType::Elf,
            total_size_bytes: total,
            offset: 150,
            data: vec![0; 10],
            entry: None,
        },
        Status::InvalidField,
    );
    for off in (100..image.len()).step_by(100) {
        let end = (off + 100).min(image.len());
        h.ok(Op::LoadProgram {
            pind: p,
            ptype: ProgramType::Elf,
            total_size_bytes: total,
            offset: off as u32,
            data: image[off..end].to_vec(),
            entry: None,
        });
    }
    let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
        panic!()
    };
    assert_eq!(
        (list[0].state, list[0].name.as_str()),
        (ProgramState::Loaded, "args_echo")
    );
    h.fails(exec(), Status::ProgramNotActivated);
    // Loading over an occupied slot is "program in use".
    h.fails(
        Op::LoadProgram {
            pind: p,
            ptype: ProgramType::Elf,
            total_size_bytes: total,
            offset: 0,
            data: image.clone(),
            entry: None,
        },
        Status::ProgramInUse,
    );
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let c = h.ok(Op::ActivateProgram { pind: p, engine });
        assert!(c.timing.prepare_ns > 0);
        assert_eq!(h.ok(exec()).value, 1);
        let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
            panic!()
        };
        assert_eq!(
            (list[0].state, list[0].engine, list[0].executions),
            (ProgramState::Active, Some(engine), 1)
        );
        // Another engine needs a deactivation first.
        let other = if engine == EngineKind::Jit {
            EngineKind::Interpreter
        } else {
            EngineKind::Jit
        };
        h.fails(
            Op::ActivateProgram {
                pind: p,
                engine: other,
            },
            Status::ProgramInUse,
        );
        h.ok(Op::DeactivateProgram { pind: p });
    }
    h.ok(Op::UnloadProgram {
        pind: p,
        generation: None,
    });
    let Reply::Programs(list) = h.ok(Op::ListPrograms).reply else {
        panic!()
    };
    assert!(list.is_empty());
    h.fails(exec(), Status::NoProgram);
}

#[test]
fn bad_programs_and_limits() {
    let h = Harness::new();
    let bad_pind = ProgramIndex(PROGRAM_SLOTS_COUNT);
    h.fails(
        Op::ActivateProgram {
            pind: bad_pind,
            engine: EngineKind::Jit,
        },
        Status::InvalidProgramIndex,
    );
    // Garbage is not an ELF object: refused when the image completes.
    h.fails(
        Op::LoadProgram {
            pind: ProgramIndex(0),
            ptype: ProgramType::Elf,
            total_size_bytes: 64,
            offset: 0,
            data: vec![7; 64],
            entry: None,
        },
        Status::InvalidProgramData,
    );
    // An entry that the object does not have.
    let image = compile("faults.c");
    let c = h.fails(
        Op::LoadProgram {
            pind: ProgramIndex(0),
            ptype: ProgramType::Elf,
            total_size_bytes: image.len() as u32,
            offset: 0,
            data: image.clone(),
            entry: Some("no_such_function".into()),
        },
        Status::InvalidProgramData,
    );
    assert_eq!(c.detail.unwrap().function, "loader");
    // Too big for a slot.
    h.fails(
        Op::LoadProgram {
            pind: ProgramIndex(0),
            ptype: ProgramType::Raw,
            total_size_bytes: PROGRAM_SIZE_MAX + 1,
            offset: 0,
            data: vec![0; 8],
            entry: None,
        },
        Status::ProgramTooBig,
    );
    // Raw bytecode that does not verify (jump out of the program) loads but does not activate.
    let raw = [0x05, 0, 0x10, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    h.ok(Op::LoadProgram {
        pind: ProgramIndex(1),
        ptype: ProgramType::Raw,
        total_size_bytes: 16,
        offset: 0,
        data: raw.to_vec(),
        entry: None,
    });
    let c = h.fails(
        Op::ActivateProgram {
            pind: ProgramIndex(1),
            engine: EngineKind::Jit,
        },
        Status::InvalidProgramData,
    );
    assert_eq!(c.detail.unwrap().function, "verifier");
    // MAXACT: the 33rd activation is refused.
    let ret = [0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    for i in 2..2 + PROGRAMS_ACTIVE_MAX + 1 {
        h.ok(Op::LoadProgram {
            pind: ProgramIndex(i),
            ptype: ProgramType::Raw,
            total_size_bytes: 16,
            offset: 0,
            data: ret.to_vec(),
            entry: None,
        });
    }
    for i in 2..2 + PROGRAMS_ACTIVE_MAX {
        h.ok(Op::ActivateProgram {
            pind: ProgramIndex(i),
            engine: EngineKind::Interpreter,
        });
    }
    h.fails(
        Op::ActivateProgram {
            pind: ProgramIndex(2 + PROGRAMS_ACTIVE_MAX),
            engine: EngineKind::Interpreter,
        },
        Status::MaximumProgramsActivated,
    );
    assert_eq!(h.exec(2, vec![], 0, &[]).value, 42);
}

#[test]
fn function_table_is_published() {
    let h = Harness::new();
    let Reply::Functions(fs) = h.ok(Op::ListFunctions).reply else {
        panic!()
    };
    let names: Vec<&str> = fs.iter().map(|f| f.name.as_str()).collect();
    for required in [
        "csx_file_size",
        "csx_file_read",
        "csx_file_write",
        "csx_memcpy",
        "csx_memset",
        "csx_now_ns",
        "csx_trace",
        "csx_filter_u32",
        "csx_filter_u64",
        "csx_sort_u64",
    ] {
        assert!(
            names.contains(&required),
            "{required} missing from {names:?}"
        );
    }
    let read = fs.iter().find(|f| f.name == "csx_file_read").unwrap();
    assert_eq!(
        read.c_decl,
        "long csx_file_read(const char *path, unsigned long path_len, unsigned long offset, void *dst, unsigned long len);"
    );
    assert_eq!(read.args[3], WireArgKind::PtrOut { len_arg: 4 });
    let Reply::Device(info) = h.ok(Op::Identify).reply else {
        panic!()
    };
    assert_eq!(info.engines, 3);
    assert_eq!(info.slm_size_bytes, 64 << 20);
    assert_eq!(info.abi_version, ABI_VERSION);
}

/// `mov r0, 42; exit` as raw bytecode.
const RET42_RAW: [u8; 16] = [0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
/// `ja -1`: spins until its fuel or its time runs out.
const SPIN_RAW: [u8; 8] = [0x05, 0, 0xff, 0xff, 0, 0, 0, 0];

fn load_raw_on(qp: &QueuePair, h: &Harness, pind: u16, image: &[u8], engine: EngineKind) {
    for op in [
        Op::LoadProgram {
            pind: ProgramIndex(pind),
            ptype: ProgramType::Raw,
            total_size_bytes: image.len() as u32,
            offset: 0,
            data: image.to_vec(),
            entry: None,
        },
        Op::ActivateProgram {
            pind: ProgramIndex(pind),
            engine,
        },
    ] {
        let c = qp.call(Command::new(h.id(), op)).unwrap();
        assert_eq!(c.status, Status::Success, "{:?}", c.detail);
    }
}

fn listed(qp: &QueuePair, h: &Harness) -> Vec<ProgramInfo> {
    match qp
        .call(Command::new(h.id(), Op::ListPrograms))
        .unwrap()
        .reply
    {
        Reply::Programs(p) => p,
        other => panic!("{other:?}"),
    }
}

/// A program belongs to the queue pair that loaded it: when that pair goes, the device
/// unloads it (one another pair is still running goes when that run ends, and no run
/// starts meanwhile). A program made persistent stays, owned by no pair. Only the
/// loader makes its program persistent; names are unique and checked.
#[test]
fn programs_go_with_their_queue_pair_unless_persistent() {
    let h = Harness::new();
    let loader = h.dev().queue_pair(16).unwrap();
    let probe = h.dev().queue_pair(16).unwrap();
    load_raw_on(&loader, &h, 3, &SPIN_RAW, EngineKind::Jit);
    load_raw_on(&loader, &h, 4, &RET42_RAW, EngineKind::Interpreter);
    load_raw_on(&loader, &h, 5, &RET42_RAW, EngineKind::Jit);
    let persist = |qp: &QueuePair, pind: u16, name: &str| {
        qp.call(Command::new(
            h.id(),
            Op::PersistProgram {
                pind: ProgramIndex(pind),
                name: name.into(),
            },
        ))
        .unwrap()
    };
    assert_eq!(persist(&loader, 5, "keep").status, Status::Success);
    assert_eq!(persist(&loader, 5, "keep").status, Status::Success, "again");
    // Another pair may not make the loader's program persistent.
    let c = persist(&probe, 4, "mine");
    assert_eq!(c.status, Status::ProgramInUse);
    assert!(c.detail.unwrap().message.contains("another client"));
    // A name is unique: the refusal names the slot that holds it.
    let c = persist(&loader, 4, "keep");
    assert_eq!(c.status, Status::ProgramInUse);
    assert!(c.detail.unwrap().message.contains("slot 5"));
    // Garbage names are refused by the protocol, naming the rule.
    let long = "n".repeat(65);
    for bad in ["", "12", "a b", "-x", ".x", "naïve", "a/b", long.as_str()] {
        let c = persist(&loader, 4, bad);
        assert_eq!(c.status, Status::InvalidField, "{bad:?}");
        assert!(
            c.detail.unwrap().message.contains("program name"),
            "{bad:?}"
        );
    }
    // Slot 4 with no persistence; slot 5 persistent; an empty slot is NoProgram.
    assert_eq!(persist(&loader, 9, "none").status, Status::NoProgram);
    let owners: Vec<_> = listed(&probe, &h)
        .iter()
        .map(|p| (p.pind.0, p.owner.is_some(), p.persistent.clone()))
        .collect();
    assert_eq!(
        owners,
        [
            (3, true, None),
            (4, true, None),
            (5, false, Some("keep".to_string()))
        ]
    );

    // The harness's pair runs the loader's spin program; then the loader goes.
    let run_id = h.id();
    h.qp()
        .submit(Command::new(
            run_id,
            Op::Execute {
                pind: ProgramIndex(3),
                windows: Windows::Inline(vec![]),
                cparam1: 0,
                cparam2: 0,
                params: vec![],
                fuel: Some(FUEL_MAX),
                time_limit_ms: Some(TIME_LIMIT_MS_MAX),
                generation: None,
            },
        ))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(loader);
    let after: Vec<_> = listed(&probe, &h)
        .iter()
        .map(|p| (p.pind.0, p.owner, p.persistent.clone()))
        .collect();
    assert_eq!(
        after,
        [(3, None, None), (5, None, Some("keep".to_string()))],
        "slot 4 went with its pair; slot 3 waits for its run"
    );
    // No new run of the departed pair's program starts.
    let c = probe
        .call(Command::new(
            h.id(),
            Op::Execute {
                pind: ProgramIndex(3),
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
    assert_eq!(c.status, Status::NoProgram);
    // When the run ends, its slot is empty.
    h.qp()
        .submit(Command::new(h.id(), Op::Abort { target: run_id }))
        .unwrap();
    let mut statuses = Vec::new();
    while let Some(c) = h.qp().reap(Some(std::time::Duration::from_secs(30))) {
        statuses.push((c.id == run_id, c.status));
    }
    assert!(statuses.contains(&(true, Status::Aborted)), "{statuses:?}");
    let after: Vec<u16> = listed(&probe, &h).iter().map(|p| p.pind.0).collect();
    assert_eq!(after, [5]);
    // Any pair may unload a persistent program.
    let c = probe
        .call(Command::new(
            h.id(),
            Op::UnloadProgram {
                pind: ProgramIndex(5),
                generation: None,
            },
        ))
        .unwrap();
    assert_eq!(c.status, Status::Success);
    assert!(listed(&probe, &h).is_empty());
}
