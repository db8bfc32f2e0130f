//! The memory namespace and range sets: allocation, transfers, bounds, ownership.

use csx_proto::limits::*;
use csx_proto::*;

use crate::common::*;

#[test]
fn alloc_write_read_fill_free() {
    let h = Harness::new();
    let a = h.alloc(1000);
    assert_eq!(h.read(a, 0, 16), vec![0; 16]);
    h.write(a, 10, b"hello");
    assert_eq!(h.read(a, 8, 9), b"\0\0hello\0\0");
    h.ok(Op::MemFill {
        handle: a,
        offset: 0,
        len: 4,
        byte: 0x5A,
    });
    assert_eq!(h.read(a, 0, 5), [0x5A, 0x5A, 0x5A, 0x5A, 0]);
    h.fails(
        Op::MemRead {
            handle: a,
            offset: 990,
            len: 11,
        },
        Status::OutOfRange,
    );
    h.fails(
        Op::MemWrite {
            handle: a,
            offset: 1000,
            data: vec![1],
        },
        Status::OutOfRange,
    );
    h.ok(Op::MemFree { handle: a });
    h.fails(
        Op::MemRead {
            handle: a,
            offset: 0,
            len: 1,
        },
        Status::InvalidMemoryNamespace,
    );
    h.fails(Op::MemFree { handle: a }, Status::InvalidMemoryNamespace);
}

#[test]
fn full_memory_and_reuse() {
    let h = Harness::new();
    let half = h.alloc(32 << 20);
    let quarter = h.alloc(16 << 20);
    let c = h.fails(
        Op::MemAlloc {
            size_bytes: 20 << 20,
        },
        Status::InsufficientResources,
    );
    assert_eq!(c.detail.unwrap().function, "slm");
    h.ok(Op::MemFree { handle: half });
    let again = h.alloc(32 << 20);
    h.ok(Op::MemFree { handle: again });
    h.ok(Op::MemFree { handle: quarter });
    let Reply::Device(info) = h.ok(Op::Identify).reply else {
        panic!()
    };
    assert_eq!(info.slm_free_bytes, 64 << 20);
}

#[test]
fn handles_belong_to_their_client() {
    let h = Harness::new();
    let a = h.alloc(64);
    let other = h.dev().queue_pair(4).unwrap();
    let c = other
        .call(Command::new(
            CommandId(1),
            Op::MemRead {
                handle: a,
                offset: 0,
                len: 1,
            },
        ))
        .unwrap();
    assert_eq!(c.status, Status::InvalidMemoryNamespace);
    let b = other
        .call(Command::new(
            CommandId(2),
            Op::MemAlloc {
                size_bytes: 1 << 20,
            },
        ))
        .unwrap();
    assert_eq!(b.status, Status::Success);
    let free_before = {
        let Reply::Device(info) = h.ok(Op::Identify).reply else {
            panic!()
        };
        info.slm_free_bytes
    };
    // A departing client's memory is reclaimed.
    drop(other);
    let Reply::Device(info) = h.ok(Op::Identify).reply else {
        panic!()
    };
    assert_eq!(info.slm_free_bytes, free_before + (1 << 20));
}

#[test]
fn range_sets() {
    let h = Harness::new();
    let a = h.alloc(4096);
    let b = h.alloc(4096);
    let rsid = RangeSetId(
        h.ok(Op::RangeSetCreate {
            ranges: vec![range(a, 0, 4096), range(b, 100, 200)],
        })
        .value as u16,
    );
    assert_ne!(rsid, RangeSetId::NONE);
    h.fails(
        Op::RangeSetCreate {
            ranges: vec![range(a, 0, 100), range(a, 99, 2)],
        },
        Status::OverlappingMemoryRanges,
    );
    h.fails(
        Op::RangeSetCreate {
            ranges: vec![range(a, 4000, 97)],
        },
        Status::InvalidMemoryRangeSet,
    );
    h.fails(
        Op::RangeSetCreate {
            ranges: vec![range(MemHandle(999), 0, 1)],
        },
        Status::InvalidMemoryNamespace,
    );
    h.fails(
        Op::RangeSetCreate {
            ranges: vec![range(a, 0, 1); RANGES_PER_SET_MAX + 1],
        },
        Status::MaximumMemoryRangesExceeded,
    );
    h.fails(Op::RangeSetCreate { ranges: vec![] }, Status::InvalidField);
    // Execute through the set: windows 0 and 1 are its ranges.
    h.load(
        0,
        &compile("args.c"),
        None,
        EngineKind::Interpreter,
        1 << 20,
    );
    let c = h.ok(Op::Execute {
        pind: ProgramIndex(0),
        windows: Windows::RangeSet(rsid),
        cparam1: 0,
        cparam2: 0,
        params: vec![],
        fuel: None,
        time_limit_ms: None,
        generation: None,
    });
    assert_eq!(c.value, 200 + 1_000_000 * 4096 + 100_000_000 * 200);
    h.ok(Op::RangeSetDelete { rsid });
    h.fails(Op::RangeSetDelete { rsid }, Status::InvalidMemoryRangeSetId);
    h.fails(
        Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::RangeSet(rsid),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: None,
            generation: None,
        },
        Status::InvalidMemoryRangeSetId,
    );
    // A set whose allocation was freed no longer executes.
    let rsid = RangeSetId(
        h.ok(Op::RangeSetCreate {
            ranges: vec![range(b, 0, 8)],
        })
        .value as u16,
    );
    h.ok(Op::MemFree { handle: b });
    h.fails(
        Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::RangeSet(rsid),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: None,
            generation: None,
        },
        Status::InvalidMemoryNamespace,
    );
}

#[test]
fn memory_copy_from_files_nvm_and_memory() {
    let h = Harness::new();
    h.ok(Op::FileWrite {
        path: "/data/a.bin".into(),
        offset: 0,
        data: (0..=255u8).collect(),
        mode: WriteMode::Truncate,
    });
    let dst = h.alloc(1024);
    let src = h.alloc(16);
    h.write(src, 0, b"0123456789abcdef");
    let c = h.ok(Op::MemCopy {
        dst,
        dst_offset: 8,
        sources: vec![
            CopySource::File {
                path: "/data/a.bin".into(),
                offset: 250,
                len: 6,
            },
            CopySource::Mem {
                handle: src,
                offset: 10,
                len: 6,
            },
            CopySource::File {
                path: "data/a.bin".into(),
                offset: 0,
                len: 2,
            },
        ],
    });
    assert_eq!(c.value, 14);
    assert!(c.timing.transfer_ns > 0);
    assert_eq!(
        h.read(dst, 8, 14),
        [250, 251, 252, 253, 254, 255, b'a', b'b', b'c', b'd', b'e', b'f', 0, 1]
    );
    // NVM byte ranges: the file's first extent holds its bytes.
    let Reply::Extents { extents, .. } = h
        .ok(Op::FileExtents {
            path: "/data/a.bin".into(),
        })
        .reply
    else {
        panic!()
    };
    h.ok(Op::MemCopy {
        dst,
        dst_offset: 0,
        sources: vec![CopySource::Nvm {
            offset: extents[0].nvm_offset + 3,
            len: 2,
        }],
    });
    assert_eq!(h.read(dst, 0, 2), [3, 4]);
    // Errors: past the end of the file, of the namespace, of the destination, self-overlap.
    h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: vec![CopySource::File {
                path: "/data/a.bin".into(),
                offset: 200,
                len: 100,
            }],
        },
        Status::OutOfRange,
    );
    h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: vec![CopySource::File {
                path: "/nope".into(),
                offset: 0,
                len: 1,
            }],
        },
        Status::NotFound,
    );
    h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: vec![CopySource::Nvm {
                offset: 64 << 20,
                len: 1,
            }],
        },
        Status::OutOfRange,
    );
    h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 1020,
            sources: vec![CopySource::Nvm { offset: 0, len: 5 }],
        },
        Status::OutOfRange,
    );
    h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: vec![CopySource::Mem {
                handle: dst,
                offset: 4,
                len: 8,
            }],
        },
        Status::OverlappingMemoryRanges,
    );
}

/// A copy of many file ranges (as a staging gathers a partition's column blocks) reads
/// each into its place, whatever their sizes and alignments; a range of a missing file
/// or past its file's end fails the copy, named by its source index.
#[test]
fn memory_copy_of_many_file_ranges_names_the_bad_one() {
    let h = Harness::new();
    let files: Vec<(String, Vec<u8>)> = (0..5u8)
        .map(|i| {
            let len = 70_000 + usize::from(i) * 40_961;
            let bytes = (0..len).map(|k| (k as u8).wrapping_mul(7) ^ i).collect();
            (format!("/cols/c{i}.col"), bytes)
        })
        .collect();
    for (path, bytes) in &files {
        h.ok(Op::FileWrite {
            path: path.clone(),
            offset: 0,
            data: bytes.clone(),
            mode: WriteMode::Truncate,
        });
    }
    // From byte 4096 * i + 13 of file i to 5 bytes before its end.
    let ranges: Vec<(usize, u64, u64)> = (0..files.len())
        .map(|i| {
            let at = 4096 * i as u64 + 13;
            (i, at, files[i].1.len() as u64 - at - 5)
        })
        .collect();
    let total: u64 = ranges.iter().map(|r| r.2).sum();
    let dst = h.alloc(total + 4096);
    let source = |&(i, offset, len): &(usize, u64, u64)| CopySource::File {
        path: files[i].0.clone(),
        offset,
        len,
    };
    let c = h.ok(Op::MemCopy {
        dst,
        dst_offset: 100,
        sources: ranges.iter().map(source).collect(),
    });
    assert_eq!(c.value, total);
    let got = h.read(dst, 100, total);
    let mut at = 0usize;
    for &(i, offset, len) in &ranges {
        let want = &files[i].1[offset as usize..(offset + len) as usize];
        assert!(got[at..at + len as usize] == *want, "source {i}");
        at += len as usize;
    }
    let mut bad = ranges.clone();
    bad[3].2 += 6;
    let c = h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: bad.iter().map(source).collect(),
        },
        Status::OutOfRange,
    );
    let message = c.detail.map(|d| d.message).unwrap_or_default();
    assert!(message.contains("source 3"), "{message}");
    let mut missing: Vec<CopySource> = ranges.iter().map(source).collect();
    missing[2] = CopySource::File {
        path: "/cols/none.col".into(),
        offset: 0,
        len: 10,
    };
    let c = h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: missing,
        },
        Status::NotFound,
    );
    let message = c.detail.map(|d| d.message).unwrap_or_default();
    assert!(message.contains("source 2"), "{message}");
}
