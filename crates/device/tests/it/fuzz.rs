//! Random command streams against a live device: whatever the mix (wrong handles, bad
//! ranges, programs in every state, files that do or do not exist), every command
//! completes exactly once with a valid completion, and the device stays healthy.
//! A small model of the SLM checks that allocations never lose or invent bytes.

use std::collections::HashMap;

use csx_proto::*;
use proptest::collection::vec;
use proptest::prelude::*;

use crate::common::*;

fn small_op() -> impl Strategy<Value = Op> {
    let handle = (0u32..5).prop_map(MemHandle);
    let pind = (0u16..4).prop_map(ProgramIndex);
    let path = prop_oneof![
        Just("/f/a".to_string()),
        Just("/f/b".to_string()),
        Just("f/a/x".to_string())
    ];
    let mrange =
        (handle.clone(), 0u64..300, 0u64..300).prop_map(|(handle, offset, len)| MemRange {
            handle,
            offset,
            len,
        });
    prop_oneof![
        (1u64..4096).prop_map(|size_bytes| Op::MemAlloc { size_bytes }),
        handle.clone().prop_map(|handle| Op::MemFree { handle }),
        (handle.clone(), 0u64..300, vec(any::<u8>(), 0..64)).prop_map(|(handle, offset, data)| {
            Op::MemWrite {
                handle,
                offset,
                data,
            }
        }),
        (handle.clone(), 0u64..300, 0u64..300).prop_map(|(handle, offset, len)| Op::MemRead {
            handle,
            offset,
            len
        }),
        (handle.clone(), 0u64..300, 0u64..300, any::<u8>()).prop_map(
            |(handle, offset, len, byte)| Op::MemFill {
                handle,
                offset,
                len,
                byte
            }
        ),
        (
            handle.clone(),
            0u64..300,
            path.clone(),
            0u64..100,
            0u64..100
        )
            .prop_map(|(dst, dst_offset, path, offset, len)| Op::MemCopy {
                dst,
                dst_offset,
                sources: vec![CopySource::File { path, offset, len }],
            }),
        vec(mrange.clone(), 0..4).prop_map(|ranges| Op::RangeSetCreate { ranges }),
        (0u16..4).prop_map(|r| Op::RangeSetDelete {
            rsid: RangeSetId(r)
        }),
        (pind.clone(), vec(mrange, 0..3), any::<u64>(), any::<bool>()).prop_map(
            |(pind, ranges, cparam1, set)| Op::Execute {
                pind,
                windows: if set {
                    Windows::RangeSet(RangeSetId(cparam1 as u16 % 3))
                } else {
                    Windows::Inline(ranges)
                },
                cparam1,
                cparam2: 0,
                params: b"/f/a".to_vec(),
                fuel: Some(100_000),
                time_limit_ms: None,
                generation: None,
            }
        ),
        pind.clone().prop_map(|pind| Op::DeactivateProgram { pind }),
        (pind.clone(), any::<bool>()).prop_map(|(pind, jit)| Op::ActivateProgram {
            pind,
            engine: if jit {
                EngineKind::Jit
            } else {
                EngineKind::Interpreter
            },
        }),
        pind.prop_map(|pind| Op::UnloadProgram {
            pind,
            generation: None,
        }),
        (path.clone(), 0u64..100, vec(any::<u8>(), 0..100)).prop_map(|(path, offset, data)| {
            Op::FileWrite {
                path,
                offset,
                data,
                mode: WriteMode::Write,
            }
        }),
        (path.clone(), 0u64..200, 0u64..200).prop_map(|(path, offset, len)| Op::FileRead {
            path,
            offset,
            len
        }),
        path.clone().prop_map(|path| Op::FileDelete { path }),
        (path, 0u64..300).prop_map(|(path, size_bytes)| Op::FileTruncate { path, size_bytes }),
        (0u64..5000, 0u64..100).prop_map(|(offset, len)| Op::ClearState { offset, len }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_command_streams(ops in vec(small_op(), 1..60)) {
        let h = Harness::new();
        let images = [compile("files.c"), compile("sum.c")];
        h.load(0, &images[0], Some("read_file"), EngineKind::Jit, 1 << 20);
        h.load(1, &images[1], None, EngineKind::Interpreter, 1 << 20);
        let qp = h.qp();
        // Submit in bursts of up to 8, reaping in any order.
        let mut expected: HashMap<u64, Op> = HashMap::new();
        let mut sizes: HashMap<MemHandle, u64> = HashMap::new();
        for (i, op) in ops.into_iter().enumerate() {
            let id = 10_000 + i as u64;
            expected.insert(id, op.clone());
            qp.submit(Command::new(CommandId(id), op)).unwrap();
            if qp.in_flight() >= 8 {
                let c = qp.reap(None).unwrap();
                check(&mut expected, &mut sizes, c)?;
            }
        }
        while let Some(c) = qp.reap(None) {
            check(&mut expected, &mut sizes, c)?;
        }
        prop_assert!(expected.is_empty(), "lost completions: {:?}", expected.keys());
        let Reply::Device(info) = h.ok(Op::Identify).reply else { panic!() };
        let reserved: u64 = sizes.values().map(|s| s.div_ceil(64) * 64).sum();
        prop_assert_eq!(info.slm_free_bytes, info.slm_size_bytes - reserved);
    }
}

fn check(
    expected: &mut HashMap<u64, Op>,
    sizes: &mut HashMap<MemHandle, u64>,
    c: Completion,
) -> Result<(), TestCaseError> {
    let op = expected.remove(&c.id.0);
    prop_assert!(op.is_some(), "unexpected or duplicate completion {}", c.id);
    prop_assert!(c.validate().is_ok());
    prop_assert!(c.status != Status::Internal, "{:?}", c.detail);
    if !c.status.is_success() && c.status != Status::Trap {
        prop_assert!(c.detail.is_some(), "{:?} without detail", c.status);
    }
    match op.unwrap() {
        Op::MemAlloc { size_bytes } if c.status.is_success() => {
            sizes.insert(MemHandle(c.value as u32), size_bytes);
        }
        Op::MemFree { handle } if c.status.is_success() => {
            prop_assert!(sizes.remove(&handle).is_some());
        }
        Op::MemRead { len, .. } if c.status.is_success() => {
            prop_assert!(matches!(&c.reply, Reply::Data(d) if d.len() as u64 == len));
        }
        _ => {}
    }
    Ok(())
}
