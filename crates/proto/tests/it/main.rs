//! Wire encoding properties.
//!
//! Goal: every valid command and completion survives encode → decode unchanged, and no
//! byte string (random, truncated or mutated from a valid frame) makes a decoder panic
//! or allocate beyond its input. Method: proptest strategies that generate valid values
//! across every variant, plus mutation of their encodings.

use csx_proto::limits::*;
use csx_proto::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

fn path() -> impl Strategy<Value = String> {
    vec("[a-z0-9_.-]{1,12}", 1..4)
        .prop_map(|parts| format!("/{}", parts.join("/")))
        .prop_filter("valid path", |p| validate_path(p).is_ok())
}

fn handle() -> impl Strategy<Value = MemHandle> {
    (1u32..).prop_map(MemHandle)
}

fn pind() -> impl Strategy<Value = ProgramIndex> {
    (0..PROGRAM_SLOTS_COUNT).prop_map(ProgramIndex)
}

fn range() -> impl Strategy<Value = MemRange> {
    (handle(), 0u64..1 << 40, 1u64..=WINDOW_SIZE_MAX).prop_map(|(handle, offset, len)| MemRange {
        handle,
        offset,
        len,
    })
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

fn source() -> impl Strategy<Value = CopySource> {
    prop_oneof![
        (path(), 0u64..1 << 40, 0u64..1 << 20).prop_map(|(path, offset, len)| CopySource::File {
            path,
            offset,
            len
        }),
        (0u64..1 << 40, 0u64..1 << 20).prop_map(|(offset, len)| CopySource::Nvm { offset, len }),
        (handle(), 0u64..1 << 40, 0u64..1 << 20).prop_map(|(handle, offset, len)| {
            CopySource::Mem {
                handle,
                offset,
                len,
            }
        }),
        (
            "tcp://[a-z0-9.]{1,20}:[0-9]{1,5}",
            0u64..1 << 40,
            0u64..1 << 20
        )
            .prop_map(|(peer, offset, len)| CopySource::Peer { peer, offset, len }),
    ]
}

fn load() -> impl Strategy<Value = Op> {
    (
        pind(),
        any::<bool>(),
        bytes(64),
        0u32..64,
        option::of("[a-z_]{1,16}"),
    )
        .prop_map(|(pind, elf, data, extra, entry)| {
            let len = data.len() as u32;
            let offset = if entry.is_some() { 0 } else { extra };
            Op::LoadProgram {
                pind,
                ptype: if elf {
                    ProgramType::Elf
                } else {
                    ProgramType::Raw
                },
                total_size_bytes: offset + len + 1,
                offset,
                data: if data.is_empty() { vec![0] } else { data },
                entry,
            }
        })
}

fn execute() -> impl Strategy<Value = Op> {
    (
        pind(),
        prop_oneof![
            (1u16..).prop_map(|r| Windows::RangeSet(RangeSetId(r))),
            vec(range(), 0..=WINDOWS_MAX).prop_map(Windows::Inline),
        ],
        any::<u64>(),
        any::<u64>(),
        bytes(PARAMS_SIZE_MAX),
        option::of(1u64..=FUEL_MAX),
        option::of(1u32..=TIME_LIMIT_MS_MAX),
        option::of(1u64..),
    )
        .prop_map(
            |(pind, windows, cparam1, cparam2, params, fuel, time_limit_ms, generation)| {
                Op::Execute {
                    pind,
                    windows,
                    cparam1,
                    cparam2,
                    params,
                    fuel,
                    time_limit_ms,
                    generation,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Identify),
        Just(Op::ListFunctions),
        Just(Op::ListPrograms),
        Just(Op::ListProgramsWithGenerations),
        Just(Op::Flush),
        any::<u64>().prop_map(|id| Op::Abort {
            target: CommandId(id)
        }),
        load(),
        (pind(), proptest::option::of(1u64..))
            .prop_map(|(pind, generation)| Op::UnloadProgram { pind, generation }),
        (pind(), any::<bool>()).prop_map(|(pind, jit)| Op::ActivateProgram {
            pind,
            engine: if jit {
                EngineKind::Jit
            } else {
                EngineKind::Interpreter
            }
        }),
        pind().prop_map(|pind| Op::DeactivateProgram { pind }),
        (pind(), "[a-z][a-z0-9_.-]{0,20}")
            .prop_map(|(pind, name)| Op::PersistProgram { pind, name }),
        (1u64..=SLM_ALLOC_SIZE_MAX).prop_map(|size_bytes| Op::MemAlloc { size_bytes }),
        handle().prop_map(|handle| Op::MemFree { handle }),
        (handle(), 0u64..1 << 40, bytes(256)).prop_map(|(handle, offset, data)| Op::MemWrite {
            handle,
            offset,
            data
        }),
        (handle(), 0u64..1 << 40, 0..=MEM_IO_SIZE_MAX).prop_map(|(handle, offset, len)| {
            Op::MemRead {
                handle,
                offset,
                len,
            }
        }),
        (handle(), 0u64..1 << 40, 0u64..1 << 30, any::<u8>()).prop_map(
            |(handle, offset, len, byte)| {
                Op::MemFill {
                    handle,
                    offset,
                    len,
                    byte,
                }
            }
        ),
        (handle(), 0u64..1 << 40, vec(source(), 1..8)).prop_map(|(dst, dst_offset, sources)| {
            Op::MemCopy {
                dst,
                dst_offset,
                sources,
            }
        }),
        vec(range(), 1..=RANGES_PER_SET_MAX).prop_map(|ranges| Op::RangeSetCreate { ranges }),
        (1u16..).prop_map(|r| Op::RangeSetDelete {
            rsid: RangeSetId(r)
        }),
        execute(),
        (0u64..1 << 30, 0u64..1 << 30).prop_map(|(offset, len)| Op::ClearState { offset, len }),
        (path(), 0u64..1 << 40, bytes(256), 0u8..3).prop_map(|(path, offset, data, m)| {
            Op::FileWrite {
                path,
                offset,
                data,
                mode: [WriteMode::Write, WriteMode::Truncate, WriteMode::CreateNew][m as usize],
            }
        }),
        (path(), 0u64..1 << 40, 0..=FILE_IO_SIZE_MAX)
            .prop_map(|(path, offset, len)| Op::FileRead { path, offset, len }),
        prop_oneof![Just("/".to_string()), path()].prop_map(|dir| Op::FileList { dir }),
        path().prop_map(|path| Op::FileStat { path }),
        path().prop_map(|path| Op::FileDelete { path }),
        path().prop_map(|path| Op::FileExtents { path }),
        (path(), any::<u64>()).prop_map(|(path, size_bytes)| Op::FileTruncate { path, size_bytes }),
        (
            path(),
            0u64..1 << 40,
            range().prop_map(|r| MemRange {
                len: r.len.min(FILE_IO_SIZE_MAX),
                ..r
            })
        )
            .prop_map(|(path, offset, src)| Op::FileWriteFromMem { path, offset, src }),
        path().prop_map(|path| Op::DirCreate { path }),
        path().prop_map(|path| Op::DirRemove { path }),
        (path(), path()).prop_map(|(from, to)| Op::FileRename { from, to }),
        (
            prop_oneof![Just("/".to_string()), path()],
            text(64),
            1u32..=FILE_LIST_ENTRIES_MAX as u32
        )
            .prop_map(|(dir, after, max)| Op::DirRead { dir, after, max }),
        prop_oneof![Just("/".to_string()), path()].prop_map(|path| Op::PathStat { path }),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    (any::<u64>(), op()).prop_map(|(id, op)| Command::new(CommandId(id), op))
}

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!(".{{0,{max}}}"))
        .expect("a valid regex")
        .prop_map(move |s| completion::clip(s, max))
}

fn trap() -> impl Strategy<Value = WireTrap> {
    let kind = prop_oneof![
        (any::<u64>(), any::<u32>(), any::<bool>())
            .prop_map(|(addr, size, write)| { WireTrapKind::OutOfBounds { addr, size, write } }),
        (any::<u64>(), any::<u32>()).prop_map(|(addr, size)| WireTrapKind::ReadOnly { addr, size }),
        any::<u64>().prop_map(|budget| WireTrapKind::FuelExhausted { budget }),
        any::<u32>().prop_map(|depth_max| WireTrapKind::CallDepthExceeded { depth_max }),
        any::<i64>().prop_map(|id| WireTrapKind::UnknownHelper { id }),
        (any::<u32>(), any::<u8>(), any::<u64>(), any::<u64>()).prop_map(
            |(helper, arg, addr, len)| {
                WireTrapKind::HelperArgument {
                    helper,
                    arg,
                    addr,
                    len,
                }
            }
        ),
        (any::<u32>(), any::<i64>(), text(40)).prop_map(|(helper, code, message)| {
            WireTrapKind::HelperAbort {
                helper,
                code,
                message,
            }
        }),
        text(40).prop_map(|message| WireTrapKind::Other { message }),
    ];
    (any::<u32>(), kind).prop_map(|(pc, kind)| WireTrap { pc, kind })
}

fn arg_kind() -> impl Strategy<Value = WireArgKind> {
    prop_oneof![
        Just(WireArgKind::Scalar),
        (0u8..5).prop_map(|len_arg| WireArgKind::PtrIn { len_arg }),
        (0u8..5).prop_map(|len_arg| WireArgKind::PtrOut { len_arg }),
    ]
}

fn file_info() -> impl Strategy<Value = FileInfo> {
    (path(), any::<u64>(), any::<u32>()).prop_map(|(path, size_bytes, extent_count)| FileInfo {
        path,
        size_bytes,
        extent_count,
    })
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        Just(Reply::None),
        bytes(512).prop_map(Reply::Data),
        (
            text(20),
            any::<[u64; 8]>(),
            any::<[u16; 4]>(),
            any::<bool>()
        )
            .prop_map(|(version, n, s, jit)| {
                Reply::Device(DeviceInfo {
                    version,
                    abi_version: n[0] as u32,
                    nvm_size_bytes: n[1],
                    slm_size_bytes: n[2],
                    slm_free_bytes: n[3],
                    state_size_bytes: n[4],
                    engines: n[5] as u32,
                    program_slots: s[0],
                    programs_active_max: s[1],
                    range_sets_max: s[2],
                    ranges_per_set_max: s[3],
                    params_size_max: n[6] as u32,
                    program_size_max: n[7] as u32,
                    load_chunk_size_max: 7,
                    mem_io_size_max: n[0],
                    file_io_size_max: n[1],
                    queue_depth_max: 3,
                    fuel_default: n[2],
                    jit,
                })
            }),
        vec(
            (
                any::<u32>(),
                "[a-z_]{1,20}",
                vec(arg_kind(), 0..=5),
                any::<u32>(),
                text(30),
                text(30)
            )
                .prop_map(|(id, name, args, version, c_decl, doc)| FunctionInfo {
                    id: FunctionId(id),
                    name,
                    args,
                    version,
                    c_decl,
                    doc
                }),
            0..8
        )
        .prop_map(Reply::Functions),
        (
            vec(
                (
                    pind(),
                    0u8..4,
                    any::<bool>(),
                    0u8..3,
                    any::<u32>(),
                    any::<u32>(),
                    "[a-z]{0,10}",
                    any::<u64>()
                )
                    .prop_map(
                        |(pind, st, elf, eng, size_bytes, loaded_bytes, name, executions)| {
                            ProgramInfo {
                                pind,
                                state: [
                                    ProgramState::Empty,
                                    ProgramState::Loading,
                                    ProgramState::Loaded,
                                    ProgramState::Active,
                                ][st as usize],
                                ptype: if elf {
                                    ProgramType::Elf
                                } else {
                                    ProgramType::Raw
                                },
                                size_bytes,
                                loaded_bytes,
                                name,
                                engine: [
                                    None,
                                    Some(EngineKind::Interpreter),
                                    Some(EngineKind::Jit),
                                ][eng as usize],
                                executions,
                                owner: (executions % 2 == 1).then_some(ClientId(size_bytes | 1)),
                                persistent: (loaded_bytes % 2 == 1)
                                    .then(|| format!("p{executions}")),
                                generation: None,
                            }
                        }
                    ),
                0..8
            ),
            any::<bool>()
        )
            .prop_map(|(mut ps, with_generations)| {
                // A listing gives every program a generation, or none.
                if with_generations {
                    for p in &mut ps {
                        p.generation = Some(p.executions | 1);
                    }
                }
                Reply::Programs(ps)
            }),
        (vec(file_info(), 0..8), any::<bool>())
            .prop_map(|(files, truncated)| Reply::Files { files, truncated }),
        file_info().prop_map(Reply::File),
        (vec(any::<[u64; 3]>(), 0..8), any::<bool>()).prop_map(|(e, truncated)| Reply::Extents {
            extents: e
                .into_iter()
                .map(|[file_offset, nvm_offset, len]| ExtentInfo {
                    file_offset,
                    nvm_offset,
                    len
                })
                .collect(),
            truncated
        }),
        (
            any::<u64>(),
            vec(text(TRACE_MESSAGE_SIZE_MAX), 0..4),
            vec(any::<u64>(), 0..=WORK_CLASSES_MAX)
        )
            .prop_map(|(fuel_used, trace, work)| Reply::Execute(ExecuteInfo {
                fuel_used,
                trace,
                work
            })),
        (
            vec((text(64), any::<bool>(), any::<u64>(), any::<u64>()), 0..8),
            any::<bool>()
        )
            .prop_map(|(e, truncated)| Reply::Entries {
                entries: e
                    .into_iter()
                    .map(|(name, dir, size_bytes, modified_ns)| DirEntryInfo {
                        name,
                        kind: if dir { EntryKind::Dir } else { EntryKind::File },
                        size_bytes,
                        modified_ns,
                    })
                    .collect(),
                truncated
            }),
    ]
}

fn completion() -> impl Strategy<Value = Completion> {
    (
        any::<u64>(),
        proptest::sample::select(Status::ALL),
        any::<u64>(),
        option::of(trap()),
        option::of(("[a-z_]{1,20}", any::<i64>(), text(60))),
        any::<[u64; 6]>(),
        reply(),
    )
        .prop_map(|(id, status, value, trap, detail, t, reply)| Completion {
            id: CommandId(id),
            status,
            value,
            trap,
            detail: detail.map(|(function, code, message)| ErrorDetail {
                function,
                code,
                message,
            }),
            timing: Timing {
                queued_ns: t[0],
                transfer_ns: t[1],
                prepare_ns: t[2],
                execute_ns: t[3],
                total_ns: t[4],
                modelled_ns: t[5],
            },
            reply,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn command_round_trip(cmd in command()) {
        prop_assert!(cmd.validate().is_ok(), "generator made an invalid command: {:?}", cmd.validate());
        let bytes = encode_command(&cmd).unwrap();
        let header = decode_command_header(&bytes).unwrap();
        prop_assert_eq!(header.frame_len(), bytes.len());
        prop_assert_eq!(header.opcode, cmd.op.opcode());
        prop_assert_eq!(decode_command(&bytes).unwrap(), cmd);
    }

    #[test]
    fn completion_round_trip(c in completion()) {
        let bytes = encode_completion(&c).unwrap();
        prop_assert_eq!(decode_completion(&bytes).unwrap(), c);
    }

    #[test]
    fn truncated_commands_fail_cleanly(cmd in command(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_command(&cmd).unwrap();
        let n = cut.index(bytes.len());
        prop_assert!(decode_command(&bytes[..n]).is_err());
    }

    #[test]
    fn truncated_completions_fail_cleanly(c in completion(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_completion(&c).unwrap();
        let n = cut.index(bytes.len());
        prop_assert!(decode_completion(&bytes[..n]).is_err());
    }

    #[test]
    fn mutated_frames_never_panic(
        cmd in command(),
        c in completion(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut a = encode_command(&cmd).unwrap();
        let mut b = encode_completion(&c).unwrap();
        for (i, v) in &flips {
            let ia = i.index(a.len());
            a[ia] = *v;
            let ib = i.index(b.len());
            b[ib] = *v;
        }
        // Either outcome is fine; a decoded value must still be valid.
        if let Ok(cmd) = decode_command(&a) {
            prop_assert!(cmd.validate().is_ok());
        }
        if let Ok(c) = decode_completion(&b) {
            prop_assert!(c.validate().is_ok());
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512), op in any::<u8>()) {
        let _ = decode_command(&bytes);
        let _ = decode_completion(&bytes);
        // With a plausible header, so the body decoders run too.
        let mut framed = vec![op, wire::WIRE_VERSION, 0, 0];
        framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        framed.extend_from_slice(&[0; 8]);
        framed.extend_from_slice(&bytes);
        let _ = decode_command(&framed);
    }
}

#[test]
fn every_opcode_is_generated() {
    // A sanity check of the generator: each opcode the decoder knows appears.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4000 {
        let cmd = command().new_tree(&mut runner).unwrap().current();
        seen.insert(cmd.op.opcode());
    }
    assert_eq!(seen.len(), 34, "opcodes seen: {seen:x?}");
}
