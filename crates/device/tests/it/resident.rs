//! Resident file ranges: a Memory Copy of a `ResidentFile` source is served from the
//! device's resident memory while the file is unchanged, is read again after any change
//! to it, and never holds more than the device's budget, whichever client asked.

use csx_proto::*;

use crate::common::{test_config, Harness};

fn put(h: &Harness, path: &str, data: Vec<u8>) {
    h.ok(Op::FileWrite {
        path: path.into(),
        offset: 0,
        data,
        mode: WriteMode::Truncate,
    });
}

fn resident(path: &str, offset: u64, len: u64) -> CopySource {
    CopySource::ResidentFile {
        path: path.into(),
        offset,
        len,
    }
}

/// Copies `src` into `dst`; returns the bytes served resident.
fn copy(h: &Harness, dst: MemHandle, src: CopySource) -> u64 {
    let c = h.ok(Op::MemCopy {
        dst,
        dst_offset: 0,
        sources: vec![src],
    });
    match c.reply {
        Reply::Copied { resident_bytes } => resident_bytes,
        other => panic!("a resident copy replied {other:?}"),
    }
}

fn with_budget(bytes: u64) -> Harness {
    Harness::with_config(csx_device::DeviceConfig {
        resident_bytes: Some(bytes),
        ..test_config()
    })
}

#[test]
fn reuse_gives_the_same_bytes_and_any_change_invalidates() {
    let h = with_budget(1 << 20);
    let a: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    put(&h, "/t/a.col", a.clone());
    let dst = h.alloc(100_000);
    assert_eq!(
        copy(&h, dst, resident("/t/a.col", 0, 100_000)),
        0,
        "first read"
    );
    assert_eq!(h.read(dst, 0, 100_000), a);
    h.ok(Op::MemFill {
        handle: dst,
        offset: 0,
        len: 100_000,
        byte: 0,
    });
    assert_eq!(copy(&h, dst, resident("/t/a.col", 0, 100_000)), 100_000);
    assert_eq!(h.read(dst, 0, 100_000), a, "reused bytes are the file's");
    // A write anywhere in the file: read again, and the new bytes are seen.
    h.ok(Op::FileWrite {
        path: "/t/a.col".into(),
        offset: 99_999,
        data: vec![7],
        mode: WriteMode::Write,
    });
    assert_eq!(copy(&h, dst, resident("/t/a.col", 0, 100_000)), 0);
    assert_eq!(h.read(dst, 99_999, 1), [7]);
    assert_eq!(copy(&h, dst, resident("/t/a.col", 0, 100_000)), 100_000);
    // A rename over it replaces the content: read again.
    put(&h, "/t/b.col", vec![9; 100_000]);
    h.ok(Op::FileRename {
        from: "/t/b.col".into(),
        to: "/t/a.col".into(),
    });
    assert_eq!(copy(&h, dst, resident("/t/a.col", 0, 100_000)), 0);
    assert_eq!(h.read(dst, 0, 4), [9; 4]);
    // Deleted: the copy fails as a plain one would, nothing stale is served.
    h.ok(Op::FileDelete {
        path: "/t/a.col".into(),
    });
    h.fails(
        Op::MemCopy {
            dst,
            dst_offset: 0,
            sources: vec![resident("/t/a.col", 0, 100_000)],
        },
        Status::NotFound,
    );
    // Truncated and rewritten to the same length: read again.
    put(&h, "/t/c.col", vec![1; 4096]);
    assert_eq!(copy(&h, dst, resident("/t/c.col", 0, 4096)), 0);
    h.ok(Op::FileTruncate {
        path: "/t/c.col".into(),
        size_bytes: 0,
    });
    h.ok(Op::FileWrite {
        path: "/t/c.col".into(),
        offset: 0,
        data: vec![2; 4096],
        mode: WriteMode::Write,
    });
    assert_eq!(copy(&h, dst, resident("/t/c.col", 0, 4096)), 0);
    assert_eq!(h.read(dst, 0, 4), [2; 4]);
}

#[test]
fn the_budget_is_never_exceeded_and_outlives_its_clients() {
    let budget = 256 << 10;
    let h = with_budget(budget);
    for f in 0..10 {
        put(&h, &format!("/t/{f}.col"), vec![f as u8; 100 << 10]);
    }
    // Another client fills the resident memory, then goes away without freeing anything.
    let other = h.dev().queue_pair(16).expect("a second queue pair");
    let dst = MemHandle(
        other
            .call(Command::new(
                CommandId(1),
                Op::MemAlloc {
                    size_bytes: 100 << 10,
                },
            ))
            .expect("alloc")
            .value as u32,
    );
    for f in 0..10u64 {
        let c = other
            .call(Command::new(
                CommandId(2 + f),
                Op::MemCopy {
                    dst,
                    dst_offset: 0,
                    sources: vec![resident(&format!("/t/{f}.col"), 0, 100 << 10)],
                },
            ))
            .expect("copy");
        assert_eq!(c.status, Status::Success, "{:?}", c.detail);
        let stats = h.dev().resident().stats();
        assert!(stats.used <= budget, "after file {f}: {stats:?}");
    }
    drop(other);
    let stats = h.dev().resident().stats();
    assert_eq!(
        stats.used,
        2 * (100 << 10),
        "two of 100 KiB fit 256 KiB: {stats:?}"
    );
    // What the departed client staged serves this one; the budget still holds.
    let mine = h.alloc(100 << 10);
    assert_eq!(
        copy(&h, mine, resident("/t/9.col", 0, 100 << 10)),
        100 << 10
    );
    assert_eq!(h.read(mine, 0, 2), [9, 9]);
    // A range larger than the whole budget is read, not kept.
    put(&h, "/t/big.col", vec![5; 300 << 10]);
    let big = h.alloc(300 << 10);
    assert_eq!(copy(&h, big, resident("/t/big.col", 0, 300 << 10)), 0);
    assert_eq!(copy(&h, big, resident("/t/big.col", 0, 300 << 10)), 0);
    assert!(h.dev().resident().stats().used <= budget);
    // Lowering the budget evicts at once.
    h.dev().resident().set_budget(0);
    assert_eq!(h.dev().resident().stats().used, 0);
    assert_eq!(copy(&h, mine, resident("/t/9.col", 0, 100 << 10)), 0);
}

#[test]
fn without_resident_memory_a_resident_copy_reads_the_media() {
    let h = Harness::new();
    put(&h, "/t/a.col", vec![3; 8192]);
    let dst = h.alloc(8192);
    for _ in 0..2 {
        assert_eq!(copy(&h, dst, resident("/t/a.col", 0, 8192)), 0);
        assert_eq!(h.read(dst, 0, 8192), vec![3; 8192]);
    }
}
