//! Bad input for every command: each gets a typed status, none disturbs the device.

use csx_proto::limits::*;
use csx_proto::*;

use crate::common::*;

#[test]
fn every_command_with_bad_input() {
    let h = Harness::new();
    let p = |i| ProgramIndex(i);
    let nope = MemHandle(4242);
    let cases: Vec<(Op, Status)> = vec![
        (
            Op::LoadProgram {
                pind: p(PROGRAM_SLOTS_COUNT),
                ptype: ProgramType::Elf,
                total_size_bytes: 8,
                offset: 0,
                data: vec![0; 8],
                entry: None,
            },
            Status::InvalidProgramIndex,
        ),
        (
            Op::LoadProgram {
                pind: p(0),
                ptype: ProgramType::Elf,
                total_size_bytes: 8,
                offset: 4,
                data: vec![0; 8],
                entry: None,
            },
            Status::InvalidField,
        ),
        (
            Op::LoadProgram {
                pind: p(0),
                ptype: ProgramType::Elf,
                total_size_bytes: 8,
                offset: 4,
                data: vec![0; 4],
                entry: None,
            },
            Status::InvalidField,
        ),
        (
            Op::LoadProgram {
                pind: p(0),
                ptype: ProgramType::Raw,
                total_size_bytes: 8,
                offset: 0,
                data: vec![],
                entry: None,
            },
            Status::InvalidField,
        ),
        (
            Op::UnloadProgram {
                pind: p(u16::MAX),
                generation: None,
            },
            Status::InvalidProgramIndex,
        ),
        (
            Op::ActivateProgram {
                pind: p(9),
                engine: EngineKind::Jit,
            },
            Status::NoProgram,
        ),
        (Op::DeactivateProgram { pind: p(9) }, Status::NoProgram),
        (Op::MemAlloc { size_bytes: 0 }, Status::InvalidField),
        (
            Op::MemAlloc {
                size_bytes: SLM_ALLOC_SIZE_MAX + 1,
            },
            Status::InvalidField,
        ),
        (
            Op::MemAlloc {
                size_bytes: 1 << 30,
            },
            Status::InsufficientResources,
        ),
        (
            Op::MemFree {
                handle: MemHandle::NONE,
            },
            Status::InvalidMemoryNamespace,
        ),
        (Op::MemFree { handle: nope }, Status::InvalidMemoryNamespace),
        (
            Op::MemWrite {
                handle: nope,
                offset: 0,
                data: vec![1],
            },
            Status::InvalidMemoryNamespace,
        ),
        (
            Op::MemRead {
                handle: nope,
                offset: 0,
                len: 1,
            },
            Status::InvalidMemoryNamespace,
        ),
        (
            Op::MemRead {
                handle: nope,
                offset: 0,
                len: MEM_IO_SIZE_MAX + 1,
            },
            Status::InvalidField,
        ),
        (
            Op::MemRead {
                handle: nope,
                offset: u64::MAX,
                len: 1,
            },
            Status::InvalidField,
        ),
        (
            Op::MemFill {
                handle: nope,
                offset: 0,
                len: 1,
                byte: 0,
            },
            Status::InvalidMemoryNamespace,
        ),
        (
            Op::MemCopy {
                dst: nope,
                dst_offset: 0,
                sources: vec![],
            },
            Status::InvalidField,
        ),
        (
            Op::MemCopy {
                dst: nope,
                dst_offset: 0,
                sources: vec![CopySource::Nvm { offset: 0, len: 1 }],
            },
            Status::InvalidMemoryNamespace,
        ),
        (
            Op::RangeSetCreate {
                ranges: vec![range(nope, 0, 0)],
            },
            Status::InvalidMemoryRangeSet,
        ),
        (
            Op::RangeSetDelete {
                rsid: RangeSetId::NONE,
            },
            Status::InvalidMemoryRangeSetId,
        ),
        (
            Op::RangeSetDelete {
                rsid: RangeSetId(5),
            },
            Status::InvalidMemoryRangeSetId,
        ),
        (
            Op::Execute {
                pind: p(0),
                windows: Windows::Inline(vec![]),
                cparam1: 0,
                cparam2: 0,
                params: vec![0; PARAMS_SIZE_MAX + 1],
                fuel: None,
                time_limit_ms: None,
                generation: None,
            },
            Status::InvalidField,
        ),
        (
            Op::Execute {
                pind: p(0),
                windows: Windows::Inline(vec![]),
                cparam1: 0,
                cparam2: 0,
                params: vec![],
                fuel: Some(0),
                time_limit_ms: None,
                generation: None,
            },
            Status::InvalidField,
        ),
        (
            Op::Execute {
                pind: p(0),
                windows: Windows::RangeSet(RangeSetId(77)),
                cparam1: 0,
                cparam2: 0,
                params: vec![],
                fuel: None,
                time_limit_ms: None,
                generation: None,
            },
            Status::NoProgram,
        ),
        (
            Op::ClearState {
                offset: u64::MAX,
                len: 2,
            },
            Status::InvalidField,
        ),
        (
            Op::ClearState {
                offset: 5000,
                len: 0,
            },
            Status::OutOfRange,
        ),
        (
            Op::FileWrite {
                path: String::new(),
                offset: 0,
                data: vec![],
                mode: WriteMode::Write,
            },
            Status::InvalidField,
        ),
        (
            Op::FileWrite {
                path: "/a/../b".into(),
                offset: 0,
                data: vec![],
                mode: WriteMode::Write,
            },
            Status::InvalidField,
        ),
        (
            Op::FileWrite {
                path: "x".repeat(PATH_SIZE_MAX + 1),
                offset: 0,
                data: vec![],
                mode: WriteMode::Write,
            },
            Status::InvalidField,
        ),
        (
            Op::FileRead {
                path: "/missing".into(),
                offset: 0,
                len: 1,
            },
            Status::NotFound,
        ),
        (
            Op::FileRead {
                path: "/missing".into(),
                offset: 0,
                len: FILE_IO_SIZE_MAX + 1,
            },
            Status::InvalidField,
        ),
        (Op::FileList { dir: "/..".into() }, Status::InvalidField),
        (
            Op::FileStat {
                path: "/missing".into(),
            },
            Status::NotFound,
        ),
        (
            Op::FileDelete {
                path: "/missing".into(),
            },
            Status::NotFound,
        ),
        (
            Op::FileTruncate {
                path: "/missing".into(),
                size_bytes: 1,
            },
            Status::NotFound,
        ),
        (
            Op::FileExtents {
                path: "/missing".into(),
            },
            Status::NotFound,
        ),
        (
            Op::FileWriteFromMem {
                path: "/f".into(),
                offset: 0,
                src: range(nope, 0, 1),
            },
            Status::InvalidMemoryNamespace,
        ),
        (
            Op::FileWrite {
                path: "/big".into(),
                offset: 1 << 62,
                data: vec![1],
                mode: WriteMode::Write,
            },
            Status::OutOfRange,
        ),
    ];
    for (op, status) in cases {
        let name = format!("{op:?}");
        let c = h.call(op);
        assert_eq!(
            c.status,
            status,
            "{}: {:?}",
            &name[..name.len().min(120)],
            c.detail
        );
        assert!(
            c.detail.is_some(),
            "{} has no detail",
            &name[..name.len().min(120)]
        );
    }
    // The device is still healthy.
    let a = h.alloc(8);
    h.write(a, 0, b"ok");
    assert_eq!(&h.read(a, 0, 2), b"ok");
}

#[test]
fn wire_round_trip_of_real_commands() {
    // The same commands encode, decode and run: the device never sees what the wire
    // could not carry.
    let h = Harness::new();
    let op = Op::FileWrite {
        path: "/w".into(),
        offset: 0,
        data: vec![1, 2, 3],
        mode: WriteMode::CreateNew,
    };
    let cmd = Command::new(h.id(), op);
    let decoded = decode_command(&encode_command(&cmd).unwrap()).unwrap();
    assert_eq!(h.qp().call(decoded).unwrap().status, Status::Success);
}
