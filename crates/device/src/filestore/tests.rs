//! Tests of the file store through its public API.
//!
//! Method: scenario tests for each operation and error; persistence by closing and
//! reopening; crash safety three ways (a store dropped without its flush, a failure
//! injected between the image sync and the metadata commit, and a child process killed
//! mid-write), plus simulated power loss that undoes unsynced image writes; and a
//! proptest that runs random operation sequences against a `HashMap` model, checking
//! every file after each step, after reopen and after simulated crashes. After each
//! scenario `check_invariants` verifies that files, pending and free blocks partition the
//! namespace.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use csx_testkit::bytes::seeded;
use proptest::prelude::*;
use tempfile::TempDir;

use super::*;

const NVM_FILE: &str = "nvm.img";

fn new_store(blocks: u64) -> (TempDir, FileStore) {
    let dir = tempfile::tempdir().unwrap();
    let nvm = Nvm::create(dir.path().join(NVM_FILE), blocks * BLOCK_SIZE).unwrap();
    let store = FileStore::create(dir.path(), Arc::new(nvm)).unwrap();
    (dir, store)
}

fn reopen(dir: &TempDir) -> FileStore {
    let nvm = Nvm::open(dir.path().join(NVM_FILE)).unwrap();
    let store = FileStore::open(dir.path(), Arc::new(nvm)).unwrap();
    check_invariants(&store);
    store
}

/// Drops the store as a crash would: no flush.
fn crash(store: FileStore) {
    store.hooks.skip_flush_on_drop.store(true, Ordering::SeqCst);
    drop(store);
}

fn read_all(store: &FileStore, path: &str) -> Vec<u8> {
    let size = store.stat(path).unwrap().size as usize;
    let mut buf = vec![0xAA; size + 10];
    let n = store.read_at(path, 0, &mut buf).unwrap();
    assert_eq!(n, size);
    buf.truncate(n);
    let mut uncached = vec![0x55; size];
    assert_eq!(
        store.read_at_uncached(path, 0, &mut uncached).unwrap(),
        size
    );
    assert_eq!(uncached, buf, "uncached read of {path} differs");
    buf
}

/// Whether every block of `path` reads (cached and uncached); a failure must be a
/// checksum error.
fn reads_whole(store: &FileStore, path: &str) -> bool {
    let size = store.stat(path).unwrap().size as usize;
    let mut buf = vec![0; size];
    for uncached in [false, true] {
        match store.read_impl(path, 0, &mut buf, uncached) {
            Ok(n) => assert_eq!(n, size),
            Err(FileStoreError::Checksum { .. }) => return false,
            Err(e) => panic!("reading {path}: {e}"),
        }
    }
    true
}

/// Files, pending and free blocks partition the namespace; every record is valid.
fn check_invariants(store: &FileStore) {
    let st = store.state.read().unwrap();
    st.alloc.check();
    let total = store.nvm.block_count();
    let mut ranges: Vec<BlockRange> = st.alloc.runs().collect();
    ranges.extend(st.pending_free.iter().copied());
    assert_eq!(
        st.pending_free.iter().map(|r| r.count).sum::<u64>(),
        st.pending_blocks
    );
    for (path, record) in &st.files {
        assert!(path::is_canonical(path), "{path}");
        record.check(total).unwrap();
        ranges.extend(record.extents.iter().map(|e| e.nvm_range()));
        for anc in path::ancestors(path) {
            assert!(!st.files.contains_key(anc), "{anc} is a file above {path}");
        }
    }
    ranges.sort();
    let mut cursor = 0;
    for r in ranges {
        assert_eq!(r.start, cursor, "blocks {cursor}.. are lost or doubly used");
        cursor = r.end();
    }
    assert_eq!(cursor, total);
}

#[test]
fn write_read_overwrite_extend() {
    let (_dir, store) = new_store(64);
    store
        .write_at("/docs/hello.txt", 0, b"hello world")
        .unwrap();
    assert_eq!(read_all(&store, "docs/hello.txt"), b"hello world");
    store.write_at("/docs/hello.txt", 6, b"WORLD!").unwrap();
    assert_eq!(read_all(&store, "/docs/hello.txt"), b"hello WORLD!");
    // A write past the end leaves a zero-filled gap.
    store.write_at("/docs/hello.txt", 10_000, b"tail").unwrap();
    let all = read_all(&store, "/docs/hello.txt");
    assert_eq!(all.len(), 10_004);
    assert_eq!(&all[..12], b"hello WORLD!");
    assert!(all[12..10_000].iter().all(|&b| b == 0));
    assert_eq!(&all[10_000..], b"tail");
    // Short reads at the end, nothing past it.
    let mut buf = [0u8; 8];
    assert_eq!(
        store.read_at("/docs/hello.txt", 10_000, &mut buf).unwrap(),
        4
    );
    assert_eq!(
        store.read_at("/docs/hello.txt", 10_004, &mut buf).unwrap(),
        0
    );
    assert_eq!(
        store
            .read_at("/docs/hello.txt", u64::MAX, &mut buf)
            .unwrap(),
        0
    );
    // An empty write creates a file but does not extend one.
    store.write_at("/empty", 0, b"").unwrap();
    store.write_at("/docs/hello.txt", 1 << 30, b"").unwrap();
    assert_eq!(store.stat("/empty").unwrap().size, 0);
    assert_eq!(store.stat("/docs/hello.txt").unwrap().size, 10_004);
    check_invariants(&store);
}

#[test]
fn stat_reports_size_extents_and_times() {
    let (_dir, store) = new_store(64);
    let before = SystemTime::now();
    store.write_at("/f", 0, &seeded(5000, 1)).unwrap();
    let stat = store.stat("f").unwrap();
    assert_eq!(stat.path, "/f");
    assert_eq!(stat.size, 5000);
    assert_eq!(stat.extents, 1);
    assert_eq!(stat.allocated_bytes, 2 * BLOCK_SIZE);
    assert!(stat.created >= before - Duration::from_secs(1));
    assert!(stat.modified >= stat.created);
    assert!(matches!(
        store.stat("/nope"),
        Err(FileStoreError::NotFound { path }) if path == "/nope"
    ));
}

#[test]
fn truncate_shrinks_and_grows_with_zeros() {
    let (_dir, store) = new_store(64);
    let data = seeded(3 * BLOCK_SIZE as usize, 2);
    store.write_at("/t", 0, &data).unwrap();
    store.truncate("/t", 5000).unwrap();
    assert_eq!(read_all(&store, "/t"), &data[..5000]);
    assert_eq!(store.stat("/t").unwrap().allocated_bytes, 2 * BLOCK_SIZE);
    // Growing must not bring back the bytes cut off.
    store.truncate("/t", 9000).unwrap();
    let grown = read_all(&store, "/t");
    assert_eq!(&grown[..5000], &data[..5000]);
    assert!(grown[5000..].iter().all(|&b| b == 0));
    // Nor may a write past the end.
    store.truncate("/t", 100).unwrap();
    store.write_at("/t", 200, b"x").unwrap();
    let rewritten = read_all(&store, "/t");
    assert_eq!(&rewritten[..100], &data[..100]);
    assert!(rewritten[100..200].iter().all(|&b| b == 0));
    store.truncate("/t", 0).unwrap();
    assert_eq!(store.stat("/t").unwrap().extents, 0);
    assert!(matches!(
        store.truncate("/missing", 1),
        Err(FileStoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.truncate("/t", FILE_SIZE_MAX + 1),
        Err(FileStoreError::FileTooLarge { .. })
    ));
    check_invariants(&store);
}

#[test]
fn delete_frees_blocks_only_after_flush() {
    let (_dir, store) = new_store(64);
    store
        .write_at("/a", 0, &seeded(8 * BLOCK_SIZE as usize, 3))
        .unwrap();
    let a_extents = store.extents("/a").unwrap();
    let free_before = store.free_bytes();
    store.delete("/a").unwrap();
    assert_eq!(store.free_bytes(), free_before + 8 * BLOCK_SIZE);
    assert!(matches!(
        store.delete("/a"),
        Err(FileStoreError::NotFound { .. })
    ));
    // Before the flush, new data must not land in /a's old blocks.
    store
        .write_at("/b", 0, &seeded(20 * BLOCK_SIZE as usize, 4))
        .unwrap();
    let overlaps = |x: &Extent, y: &Extent| {
        x.nvm_offset < y.nvm_offset + y.len && y.nvm_offset < x.nvm_offset + x.len
    };
    for b in store.extents("/b").unwrap() {
        assert!(
            a_extents.iter().all(|a| !overlaps(a, &b)),
            "{b:?} reuses /a"
        );
    }
    check_invariants(&store);
    store.flush().unwrap();
    assert!(store.state.read().unwrap().pending_free.is_empty());
    check_invariants(&store);
}

#[test]
fn rename_moves_replaces_and_refuses() {
    let (_dir, store) = new_store(64);
    store.write_at("/a", 0, b"aaa").unwrap();
    store.write_at("/b", 0, b"bbbbbb").unwrap();
    store.write_at("/dir/c", 0, b"c").unwrap();
    store.rename("/a", "/moved/a").unwrap();
    assert!(matches!(
        store.stat("/a"),
        Err(FileStoreError::NotFound { .. })
    ));
    assert_eq!(read_all(&store, "/moved/a"), b"aaa");
    // Replacing an existing file frees its blocks.
    store.rename("/moved/a", "/b").unwrap();
    assert_eq!(read_all(&store, "/b"), b"aaa");
    assert_eq!(store.list("/").unwrap().len(), 2);
    store.rename("/b", "/b").unwrap();
    assert!(matches!(
        store.rename("/missing", "/x"),
        Err(FileStoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.rename("/dir", "/b"),
        Err(FileStoreError::NotADir { .. })
    ));
    assert!(matches!(
        store.rename("/b", "/dir"),
        Err(FileStoreError::IsADirectory { .. })
    ));
    assert!(matches!(
        store.rename("/b", "/b/inside"),
        Err(FileStoreError::NotADirectory { .. })
    ));
    assert!(matches!(
        store.rename("/b", "/dir/c/x"),
        Err(FileStoreError::NotADirectory { .. })
    ));
    check_invariants(&store);
}

#[test]
fn list_by_directory_prefix() {
    let (_dir, store) = new_store(64);
    for path in ["/a/1", "/a/2", "/a/b/3", "/ab/4", "/a.txt", "/z"] {
        store.write_at(path, 0, path.as_bytes()).unwrap();
    }
    let names = |dir: &str| -> Vec<String> {
        store
            .list(dir)
            .unwrap()
            .into_iter()
            .map(|s| s.path)
            .collect()
    };
    assert_eq!(names("/a"), ["/a/1", "/a/2", "/a/b/3"]);
    assert_eq!(names("a/"), ["/a/1", "/a/2", "/a/b/3"]);
    assert_eq!(names("/a/b"), ["/a/b/3"]);
    assert_eq!(names("/z"), ["/z"]);
    assert_eq!(names("/nothing").len(), 0);
    assert_eq!(names("/").len(), 6);
    assert_eq!(names(""), names("/"));
    assert!(matches!(
        store.list("/a/../b"),
        Err(FileStoreError::InvalidPath { .. })
    ));
}

#[test]
fn files_and_directories_do_not_collide() {
    let (_dir, store) = new_store(64);
    store.write_at("/a", 0, b"file").unwrap();
    assert!(matches!(
        store.write_at("/a/b", 0, b"x"),
        Err(FileStoreError::NotADirectory { path, file }) if path == "/a/b" && file == "/a"
    ));
    store.write_at("/d/x", 0, b"x").unwrap();
    assert!(matches!(
        store.write_at("/d", 0, b"x"),
        Err(FileStoreError::IsADirectory { .. })
    ));
    assert!(matches!(
        store.write_at("/d", 0, b""),
        Err(FileStoreError::IsADirectory { .. })
    ));
    check_invariants(&store);
}

#[test]
fn invalid_paths_are_typed_errors() {
    let (_dir, store) = new_store(8);
    let long = format!("/{}", "x/".repeat(600));
    for bad in ["", "/", "/a/../b", "/a\0", long.as_str()] {
        let err = store.write_at(bad, 0, b"x").unwrap_err();
        assert!(
            matches!(err, FileStoreError::InvalidPath { .. }),
            "{bad:?}: {err}"
        );
        assert!(store.read_at(bad, 0, &mut [0u8; 1]).is_err());
        assert!(store.stat(bad).is_err());
        assert!(store.delete(bad).is_err());
    }
    let err = store.write_at("/a/../b", 0, b"x").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid path \"/a/../b\": path has a `..` component"
    );
    assert!(store.list("/").unwrap().is_empty());
}

#[test]
fn extents_follow_the_file() {
    let (_dir, store) = new_store(256);
    // Written in many small appends, a file still gets one extent.
    let data = seeded(100_000, 5);
    for (i, chunk) in data.chunks(3000).enumerate() {
        store.write_at("/seq", (i * 3000) as u64, chunk).unwrap();
    }
    let extents = store.extents("/seq").unwrap();
    assert_eq!(extents.len(), 1);
    assert_eq!(extents[0].file_offset, 0);
    assert_eq!(extents[0].len, 100_000);
    assert_eq!(extents[0].nvm_offset % BLOCK_SIZE, 0);
    // Reading the image at the extents gives the file (what a host-side reader does).
    let mut direct = vec![0u8; 100_000];
    store
        .nvm()
        .read_at(extents[0].nvm_offset, &mut direct)
        .unwrap();
    assert_eq!(direct, data);
    // A sparse file has holes between extents.
    store
        .write_at("/sparse", 3 * BLOCK_SIZE + 5, b"abc")
        .unwrap();
    let extents = store.extents("/sparse").unwrap();
    assert_eq!(extents.len(), 1);
    assert_eq!(extents[0].file_offset, 3 * BLOCK_SIZE);
    assert_eq!(extents[0].len, 8);
    assert_eq!(store.stat("/sparse").unwrap().allocated_bytes, BLOCK_SIZE);
    check_invariants(&store);
}

#[test]
fn interleaved_appends_keep_extents_large() {
    let (_dir, store) = new_store(4096);
    for i in 0..512u64 {
        for name in ["/x", "/y"] {
            store.write_at(name, i * 4096, &[i as u8; 4096]).unwrap();
        }
    }
    for name in ["/x", "/y"] {
        let extents = store.stat(name).unwrap().extents;
        assert!(extents <= 4, "{name} has {extents} extents");
    }
    check_invariants(&store);
}

#[test]
fn data_and_metadata_persist_across_reopen() {
    let (dir, store) = new_store(128);
    let big = seeded(200_000, 6);
    store.write_at("/keep/big", 0, &big).unwrap();
    store.write_at("/keep/small", 0, b"small").unwrap();
    store.write_at("/gone", 0, b"gone").unwrap();
    store.delete("/gone").unwrap();
    store.rename("/keep/small", "/keep/renamed").unwrap();
    store.truncate("/keep/big", 150_000).unwrap();
    let stats = store.list("/").unwrap();
    let extents = store.extents("/keep/big").unwrap();
    store.close().unwrap();

    let store = reopen(&dir);
    assert_eq!(store.list("/").unwrap(), stats);
    assert_eq!(store.extents("/keep/big").unwrap(), extents);
    assert_eq!(read_all(&store, "/keep/big"), &big[..150_000]);
    assert_eq!(read_all(&store, "/keep/renamed"), b"small");
    // Dropping without close flushes too.
    store.write_at("/later", 0, b"later").unwrap();
    drop(store);
    let store = reopen(&dir);
    assert_eq!(read_all(&store, "/later"), b"later");
}

#[test]
fn out_of_space_changes_nothing() {
    let (dir, store) = new_store(16);
    let err = store
        .write_at("/big", 0, &vec![1u8; 17 * 4096])
        .unwrap_err();
    assert!(matches!(
        err,
        FileStoreError::NoSpace { needed_bytes, free_bytes, .. }
            if needed_bytes == 17 * 4096 && free_bytes == 16 * 4096
    ));
    assert_eq!(
        err.to_string(),
        "no space for /big: 69632 bytes needed, 65536 free"
    );
    assert!(matches!(
        store.stat("/big"),
        Err(FileStoreError::NotFound { .. })
    ));
    store.write_at("/f", 0, &vec![2u8; 10 * 4096]).unwrap();
    let before = store.stat("/f").unwrap();
    // Overwriting in place needs no space; growing past the free space fails whole.
    store.write_at("/f", 0, &vec![3u8; 10 * 4096]).unwrap();
    assert!(matches!(
        store.write_at("/f", 5 * 4096, &vec![4u8; 12 * 4096]),
        Err(FileStoreError::NoSpace { .. })
    ));
    assert_eq!(store.stat("/f").unwrap().size, before.size);
    assert_eq!(read_all(&store, "/f"), vec![3u8; 10 * 4096]);
    assert_eq!(store.free_bytes(), 6 * 4096);
    assert!(matches!(
        store.write_at("/f", FILE_SIZE_MAX, b"x"),
        Err(FileStoreError::FileTooLarge { .. })
    ));
    assert!(matches!(
        store.write_at("/f", u64::MAX, b"x"),
        Err(FileStoreError::FileTooLarge { .. })
    ));
    check_invariants(&store);
    store.close().unwrap();
    let store = reopen(&dir);
    assert_eq!(read_all(&store, "/f"), vec![3u8; 10 * 4096]);
}

#[test]
fn pending_blocks_are_reclaimed_by_an_implicit_flush() {
    let (dir, store) = new_store(16);
    store.write_at("/a", 0, &vec![1u8; 12 * 4096]).unwrap();
    store.delete("/a").unwrap();
    let flushes = store.state.read().unwrap().flushes;
    store.write_at("/b", 0, &vec![2u8; 12 * 4096]).unwrap();
    assert_eq!(store.state.read().unwrap().flushes, flushes + 1);
    assert_eq!(read_all(&store, "/b"), vec![2u8; 12 * 4096]);
    check_invariants(&store);
    crash(store);
    // The implicit flush made the delete durable; /b came after it.
    let store = reopen(&dir);
    assert!(store.list("/").unwrap().is_empty());
}

#[test]
fn fragmented_namespace_still_holds_a_large_file() {
    let (dir, store) = new_store(1024);
    // Fill the namespace with small files of varied sizes, then delete every other one.
    let mut i = 0;
    loop {
        let len = 4096 * (1 + i % 5) + i * 7 % 4096;
        if store.free_bytes() < len as u64 + 4096 {
            break;
        }
        store
            .write_at(&format!("/small/{i}"), 0, &seeded(len, i as u64))
            .unwrap();
        i += 1;
    }
    for j in (0..i).step_by(2) {
        store.delete(&format!("/small/{j}")).unwrap();
    }
    store.flush().unwrap();
    let largest_run = store.state.read().unwrap().alloc.largest_run();
    let free = store.free_bytes();
    let big = seeded(free as usize - 3000, 99);
    assert!(big.len() as u64 > largest_run * BLOCK_SIZE);
    store.write_at("/big", 0, &big).unwrap();
    let extents = store.extents("/big").unwrap();
    assert!(extents.len() > 1);
    assert_eq!(extents.iter().map(|e| e.len).sum::<u64>(), big.len() as u64);
    assert_eq!(read_all(&store, "/big"), big);
    assert_eq!(store.free_bytes(), 0);
    check_invariants(&store);
    store.close().unwrap();

    let store = reopen(&dir);
    assert_eq!(read_all(&store, "/big"), big);
    for j in (1..i).step_by(2) {
        let len = 4096 * (1 + j % 5) + j * 7 % 4096;
        assert_eq!(
            read_all(&store, &format!("/small/{j}")),
            seeded(len, j as u64)
        );
    }
}

#[test]
fn crash_without_flush_keeps_the_last_flush() {
    let (dir, store) = new_store(64);
    store.write_at("/flushed", 0, &seeded(50_000, 7)).unwrap();
    store.write_at("/doomed", 0, b"doomed").unwrap();
    store.flush().unwrap();
    store.write_at("/new", 0, &seeded(30_000, 8)).unwrap();
    store.delete("/doomed").unwrap();
    store.write_at("/flushed", 50_000, b"appended").unwrap();
    crash(store);

    let store = reopen(&dir);
    let names: Vec<String> = store
        .list("/")
        .unwrap()
        .into_iter()
        .map(|s| s.path)
        .collect();
    assert_eq!(names, ["/doomed", "/flushed"]);
    assert_eq!(read_all(&store, "/flushed"), seeded(50_000, 7));
    assert_eq!(read_all(&store, "/doomed"), b"doomed");
}

#[test]
fn failure_between_data_sync_and_commit_poisons_and_loses_only_unflushed() {
    let (dir, store) = new_store(64);
    store.write_at("/a", 0, &seeded(40_000, 9)).unwrap();
    store.flush().unwrap();
    store.write_at("/b", 0, &seeded(40_000, 10)).unwrap();
    store.delete("/a").unwrap();
    store.hooks.fail_before_commit.store(true, Ordering::SeqCst);
    assert!(matches!(
        store.flush(),
        Err(FileStoreError::Poisoned { .. })
    ));
    // The store refuses changes now; reads go on.
    assert!(matches!(
        store.write_at("/c", 0, b"c"),
        Err(FileStoreError::Poisoned { .. })
    ));
    assert!(matches!(
        store.flush(),
        Err(FileStoreError::Poisoned { .. })
    ));
    assert_eq!(read_all(&store, "/b"), seeded(40_000, 10));
    crash(store);

    let store = reopen(&dir);
    assert_eq!(read_all(&store, "/a"), seeded(40_000, 9));
    assert!(matches!(
        store.stat("/b"),
        Err(FileStoreError::NotFound { .. })
    ));
}

#[test]
fn power_loss_keeps_flushed_files_whatever_reached_the_media() {
    for keep_all in [false, true] {
        let (dir, store) = new_store(64);
        store.nvm().track_power_loss();
        store.write_at("/a", 0, &seeded(30_000, 11)).unwrap();
        store.write_at("/b", 0, &seeded(30_000, 12)).unwrap();
        store.flush().unwrap();
        // After the flush: /a deleted and replaced by a file that cannot reuse its blocks,
        // /b grown in place, a new file written.
        store.delete("/a").unwrap();
        store.write_at("/a2", 0, &seeded(30_000, 13)).unwrap();
        store.write_at("/b", 30_000, &seeded(5000, 14)).unwrap();
        store.nvm().simulate_power_loss(|_| keep_all);
        crash(store);

        let store = reopen(&dir);
        assert_eq!(read_all(&store, "/a"), seeded(30_000, 11));
        assert_eq!(read_all(&store, "/b"), seeded(30_000, 12));
        assert!(store.stat("/a2").is_err());
        // The lost append must not reappear when /b grows again.
        store.truncate("/b", 40_000).unwrap();
        assert!(read_all(&store, "/b")[30_000..].iter().all(|&b| b == 0));
    }
}

#[test]
fn corrupt_or_missing_metadata_is_a_typed_error() {
    let (dir, store) = new_store(16);
    store.write_at("/f", 0, b"data").unwrap();
    store.close().unwrap();
    let meta = dir.path().join(META_FILE_NAME);
    let nvm = || Arc::new(Nvm::open(dir.path().join(NVM_FILE)).unwrap());

    // Another handle holds it.
    let first = FileStore::open(dir.path(), nvm()).unwrap();
    assert!(matches!(
        FileStore::open(dir.path(), nvm()),
        Err(FileStoreError::MetaInUse { .. })
    ));
    drop(first);
    assert!(matches!(
        FileStore::create(dir.path(), nvm()),
        Err(FileStoreError::MetaExists { .. })
    ));

    let good = fs::read(&meta).unwrap();
    let corruptions: Vec<Vec<u8>> = vec![
        b"definitely not a redb file".repeat(100),
        good[..good.len() / 2].to_vec(),
        good.iter().map(|b| b ^ 0x5A).collect(),
        vec![0u8; good.len()],
        Vec::new(),
    ];
    for bytes in corruptions {
        fs::write(&meta, &bytes).unwrap();
        let err = FileStore::open(dir.path(), nvm()).unwrap_err();
        assert!(err.to_string().contains("meta.redb"), "{err}");
        assert!(
            matches!(
                err,
                FileStoreError::MetaCorrupt { .. } | FileStoreError::Meta { .. }
            ),
            "{err}"
        );
    }
    fs::remove_file(&meta).unwrap();
    let err = FileStore::open(dir.path(), nvm()).unwrap_err();
    assert!(matches!(err, FileStoreError::MetaMissing { .. }));
    assert!(err.to_string().contains("meta.redb"));
}

#[test]
fn bad_records_are_reported_with_their_file() {
    let (dir, store) = new_store(16);
    store.write_at("/ok", 0, b"fine").unwrap();
    store.close().unwrap();
    let meta = dir.path().join(META_FILE_NAME);
    let write_raw = |key: &str, value: &[u8]| {
        let db = Database::create(&meta).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(FILES_TABLE)
            .unwrap()
            .insert(key, value)
            .unwrap();
        txn.commit().unwrap();
    };
    let nvm = || Arc::new(Nvm::open(dir.path().join(NVM_FILE)).unwrap());

    write_raw("/bad", b"\x01short");
    let err = FileStore::open(dir.path(), nvm()).unwrap_err();
    assert!(
        matches!(err, FileStoreError::MetaCorrupt { ref reason, .. } if reason.contains("/bad"))
    );

    // Two files claiming the same blocks.
    let ok = {
        let db = Database::create(&meta).unwrap();
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(FILES_TABLE).unwrap();
        let value = table.get("/ok").unwrap().unwrap().value().to_vec();
        value
    };
    write_raw("/bad", &ok);
    let err = FileStore::open(dir.path(), nvm()).unwrap_err();
    assert!(
        err.to_string().contains("/bad") && err.to_string().contains("/ok"),
        "{err}"
    );

    {
        let db = Database::create(&meta).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(FILES_TABLE).unwrap().remove("/bad").unwrap();
        txn.commit().unwrap();
    }
    FileStore::open(dir.path(), nvm()).unwrap();
    write_raw("not/canonical", &ok);
    let err = FileStore::open(dir.path(), nvm()).unwrap_err();
    assert!(matches!(err, FileStoreError::MetaCorrupt { .. }), "{err}");
}

#[test]
fn truncated_or_resized_image_is_refused() {
    let (dir, store) = new_store(16);
    store.write_at("/f", 0, b"data").unwrap();
    store.close().unwrap();
    let image = dir.path().join(NVM_FILE);
    fs::File::options()
        .write(true)
        .open(&image)
        .unwrap()
        .set_len(8 * BLOCK_SIZE)
        .unwrap();
    let err = FileStore::open(dir.path(), Arc::new(Nvm::open(&image).unwrap())).unwrap_err();
    assert!(
        matches!(err, FileStoreError::ImageTruncated { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("nvm.img"), "{err}");
    fs::File::options()
        .write(true)
        .open(&image)
        .unwrap()
        .set_len(32 * BLOCK_SIZE)
        .unwrap();
    let err = FileStore::open(dir.path(), Arc::new(Nvm::open(&image).unwrap())).unwrap_err();
    assert!(
        matches!(err, FileStoreError::ImageSizeMismatch { .. }),
        "{err}"
    );
}

#[test]
fn open_or_create_and_open_distinguish_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let nvm = Arc::new(Nvm::create(state.join(NVM_FILE), 16 * BLOCK_SIZE).unwrap());
    assert!(matches!(
        FileStore::open(&state, nvm.clone()),
        Err(FileStoreError::MetaMissing { .. })
    ));
    let store = FileStore::open_or_create(&state, nvm.clone()).unwrap();
    store.write_at("/x", 0, b"x").unwrap();
    drop(store);
    let store = FileStore::open_or_create(&state, nvm).unwrap();
    assert_eq!(read_all(&store, "/x"), b"x");
    assert_eq!(store.capacity_bytes(), 16 * BLOCK_SIZE);
    assert!(!state.join("meta.redb.tmp").exists());
}

#[test]
fn concurrent_writers_and_readers() {
    let (_dir, store) = new_store(2048);
    let store = Arc::new(store);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let path = format!("/t/{t}");
                let data = seeded(300_000, t);
                for (i, chunk) in data.chunks(10_000).enumerate() {
                    store.write_at(&path, (i * 10_000) as u64, chunk).unwrap();
                    let mut back = vec![0u8; chunk.len()];
                    store
                        .read_at(&path, (i * 10_000) as u64, &mut back)
                        .unwrap();
                    assert_eq!(back, chunk);
                    if i % 10 == 0 {
                        store.flush().unwrap();
                    }
                }
                assert_eq!(read_all(&store, &path), data);
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    check_invariants(&store);
}

/// The store is shared between engine threads.
#[test]
fn store_and_nvm_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<FileStore>();
    assert_send_sync::<Nvm>();
}

const CRASH_CHILD_ENV: &str = "CSX_FILESTORE_CRASH_CHILD_DIR";

/// Child half of `kill_mid_write_keeps_flushed_generations`: writes generation files,
/// flushing after each and saying so on stdout, with unflushed churn in between, until it
/// is killed.
#[test]
#[ignore = "run as a child process by kill_mid_write_keeps_flushed_generations"]
fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let nvm = Arc::new(Nvm::open(dir.join(NVM_FILE)).unwrap());
    let store = FileStore::open(&dir, nvm).unwrap();
    for generation in 0..5000u64 {
        store
            .write_at(
                &format!("/gen/{generation}"),
                0,
                &generation_data(generation),
            )
            .unwrap();
        store.flush().unwrap();
        println!("FLUSHED {generation}");
        // Unflushed churn: scratch files created, grown, truncated, renamed, deleted.
        let scratch = format!("/scratch/{}", generation % 4);
        match scratch_churn(&store, &scratch, generation) {
            Ok(()) => {}
            // An earlier child was killed while it overwrote a block of this scratch file
            // that a flush had checksummed: the torn block is refused, on a write that
            // must merge with it as on a read. The file is deleted and churn goes on.
            Err(FileStoreError::Checksum { path, .. }) => store.delete(&path).unwrap(),
            Err(e) => panic!("{scratch}: {e}"),
        }
    }
}

/// One generation's unflushed changes to a scratch file.
fn scratch_churn(store: &FileStore, scratch: &str, generation: u64) -> Result<(), FileStoreError> {
    store.write_at(
        scratch,
        generation * 1000 % 50_000,
        &seeded(20_000, generation),
    )?;
    if generation.is_multiple_of(3) {
        store.truncate(scratch, 3000)?;
    }
    if generation.is_multiple_of(5) {
        store.rename(scratch, "/scratch/renamed")?;
        store.delete("/scratch/renamed")?;
    }
    Ok(())
}

fn generation_data(generation: u64) -> Vec<u8> {
    seeded(
        1000 + (generation as usize * 1237) % 15_000,
        generation + 1000,
    )
}

#[test]
fn kill_mid_write_keeps_flushed_generations() {
    let dir = tempfile::tempdir().unwrap();
    let nvm = Arc::new(Nvm::create(dir.path().join(NVM_FILE), 16384 * BLOCK_SIZE).unwrap());
    FileStore::create(dir.path(), nvm).unwrap().close().unwrap();

    for round in 0..3u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "filestore::tests::crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD_ENV, dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut last = None;
        let target = 5 + round * 7;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(generation) = line.strip_prefix("FLUSHED ") {
                let generation: u64 = generation.trim().parse().unwrap();
                last = Some(generation);
                if generation >= target {
                    break;
                }
            }
        }
        // Let the child run on into unflushed writes (and maybe further flushes), then kill.
        std::thread::sleep(Duration::from_millis(round * 3));
        child.kill().unwrap();
        child.wait().unwrap();

        let last = last.expect("the child flushed at least once");
        let store = reopen(&dir);
        for generation in 0..=last {
            assert_eq!(
                read_all(&store, &format!("/gen/{generation}")),
                generation_data(generation),
                "generation {generation} of round {round}"
            );
        }
        // Every file reads, apart from a scratch file the kill caught while it overwrote
        // blocks an earlier flush had checksummed: its unflushed contents are not
        // guaranteed, and a torn block is reported as such, never returned as data.
        for stat in store.list("/").unwrap() {
            let mut buf = vec![0; stat.size as usize];
            match store.read_at(&stat.path, 0, &mut buf) {
                Ok(n) => assert_eq!(n as u64, stat.size, "{}", stat.path),
                Err(e) => assert!(
                    stat.path.starts_with("/scratch/")
                        && matches!(e, FileStoreError::Checksum { .. }),
                    "{}: {e}",
                    stat.path
                ),
            }
        }
        // Start the next round from a clean slate of generations.
        for stat in store.list("/gen").unwrap() {
            store.delete(&stat.path).unwrap();
        }
        store.close().unwrap();
    }
}

// ---- model-based proptest ----

// No path is a directory of another: a directory outlives its files (see `dirs.rs`), which
// this model of files does not follow; `tests/dirs.rs` covers directories.
const MODEL_PATHS: [&str; 5] = ["/a", "/b", "/d/x", "/d/y", "/e"];
const MODEL_BLOCKS: u64 = 40;

#[derive(Debug, Clone)]
enum Op {
    Write {
        file: usize,
        offset: u64,
        len: usize,
        seed: u64,
    },
    Truncate {
        file: usize,
        len: u64,
    },
    Delete {
        file: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Flush,
    Reopen,
    Crash {
        keep_seed: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let file = 0..MODEL_PATHS.len();
    prop_oneof![
        8 => (file.clone(), 0..40_000u64, 0..30_000usize, any::<u64>())
            .prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        2 => (file.clone(), 0..50_000u64).prop_map(|(file, len)| Op::Truncate { file, len }),
        2 => file.clone().prop_map(|file| Op::Delete { file }),
        2 => (file.clone(), file).prop_map(|(from, to)| Op::Rename { from, to }),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(|keep_seed| Op::Crash { keep_seed }),
    ]
}

type Model = HashMap<String, Vec<u8>>;

/// The model's verdict on creating `path`, mirroring the tree rule.
fn model_can_create(model: &Model, path: &str) -> bool {
    let below = format!("{path}/");
    path::ancestors(path).all(|a| !model.contains_key(a))
        && !model.keys().any(|k| k.starts_with(&below))
}

struct Harness {
    dir: TempDir,
    store: Option<FileStore>,
    model: Model,
    durable: Model,
    /// For each current path whose blocks descend from a durable file, that file's path.
    origin: HashMap<String, String>,
    /// Durable files whose blocks may have been written in place since the last flush:
    /// only these may differ from `durable` after a crash (module docs, rule 3).
    torn: HashSet<String>,
}

impl Harness {
    fn new() -> Harness {
        let (dir, store) = new_store(MODEL_BLOCKS);
        store.nvm().track_power_loss();
        Harness {
            dir,
            store: Some(store),
            model: Model::new(),
            durable: Model::new(),
            origin: HashMap::new(),
            torn: HashSet::new(),
        }
    }

    fn store(&self) -> &FileStore {
        self.store.as_ref().expect("store is open")
    }

    fn flushes(&self) -> u64 {
        self.store().state.read().unwrap().flushes
    }

    fn mark_flushed(&mut self) {
        self.durable = self.model.clone();
        self.origin = self.model.keys().map(|p| (p.clone(), p.clone())).collect();
        self.torn.clear();
    }

    /// `path` is written (or grown) in place: its durable origin may be torn by a crash.
    fn written_in_place(&mut self, path: &str) {
        if let Some(origin) = self.origin.get(path) {
            self.torn.insert(origin.clone());
        }
    }

    // One arm per operation of the model, each the store's behaviour beside it: the
    // model reads as one table.
    #[allow(clippy::too_many_lines)]
    fn apply(&mut self, op: &Op) {
        let flushes_before = self.flushes();
        let model_before = self.model.clone();
        match *op {
            Op::Write {
                file,
                offset,
                len,
                seed,
            } => {
                let path = MODEL_PATHS[file];
                let data = seeded(len, seed);
                let result = self.store().write_at(path, offset, &data);
                let creatable =
                    self.model.contains_key(path) || model_can_create(&self.model, path);
                match result {
                    Ok(()) => {
                        assert!(creatable, "write to {path} should fail");
                        let content = self.model.entry(path.to_owned()).or_default();
                        if len > 0 {
                            let end = offset as usize + len;
                            if content.len() < end {
                                content.resize(end, 0);
                            }
                            content[offset as usize..end].copy_from_slice(&data);
                        }
                        if len > 0 {
                            self.written_in_place(path);
                        }
                    }
                    Err(FileStoreError::NoSpace { .. }) => assert!(creatable),
                    Err(
                        FileStoreError::NotADirectory { .. } | FileStoreError::IsADirectory { .. },
                    ) => {
                        assert!(!creatable)
                    }
                    Err(err) => panic!("write {path}: {err}"),
                }
            }
            Op::Truncate { file, len } => {
                let path = MODEL_PATHS[file];
                match self.store().truncate(path, len) {
                    Ok(()) => {
                        let content = self.model.get_mut(path).expect("exists");
                        let grows = len as usize > content.len();
                        content.resize(len as usize, 0);
                        if grows {
                            self.written_in_place(path);
                        }
                    }
                    Err(FileStoreError::NotFound { .. }) => assert!(!self.model.contains_key(path)),
                    Err(err) => panic!("truncate {path}: {err}"),
                }
            }
            Op::Delete { file } => {
                let path = MODEL_PATHS[file];
                match self.store().delete(path) {
                    Ok(()) => {
                        self.model.remove(path).expect("exists");
                        self.origin.remove(path);
                    }
                    Err(FileStoreError::NotFound { .. }) => assert!(!self.model.contains_key(path)),
                    Err(err) => panic!("delete {path}: {err}"),
                }
            }
            Op::Rename { from, to } => {
                let (from, to) = (MODEL_PATHS[from], MODEL_PATHS[to]);
                match self.store().rename(from, to) {
                    Ok(()) => {
                        let content = self.model.remove(from).expect("exists");
                        self.model.insert(to.to_owned(), content);
                        if from != to {
                            self.origin.remove(to);
                            if let Some(origin) = self.origin.remove(from) {
                                self.origin.insert(to.to_owned(), origin);
                            }
                        }
                    }
                    Err(
                        FileStoreError::NotFound { .. }
                        | FileStoreError::IsADirectory { .. }
                        | FileStoreError::NotADirectory { .. },
                    ) => {
                        let allowed = self.model.contains_key(from)
                            && (from == to
                                || self.model.contains_key(to)
                                || model_can_create(&self.model, to));
                        assert!(!allowed, "rename {from} -> {to} should succeed");
                    }
                    Err(err) => panic!("rename {from} {to}: {err}"),
                }
            }
            Op::Flush => {
                self.store().flush().unwrap();
                self.mark_flushed();
            }
            Op::Reopen => {
                self.store.take().unwrap().close().unwrap();
                self.mark_flushed();
                let store = reopen(&self.dir);
                store.nvm().track_power_loss();
                self.store = Some(store);
            }
            Op::Crash { keep_seed } => {
                let store = self.store.take().unwrap();
                let keep = seeded(4096, keep_seed);
                store
                    .nvm()
                    .simulate_power_loss(|i| keep[i % keep.len()] & 1 == 1);
                crash(store);
                let store = reopen(&self.dir);
                store.nvm().track_power_loss();
                self.store = Some(store);
                self.after_crash();
                return;
            }
        }
        // An implicit flush (a write short of space) made the state before the op durable.
        if self.flushes() != flushes_before && !matches!(op, Op::Flush) {
            let model_after = std::mem::replace(&mut self.model, model_before);
            self.mark_flushed();
            self.model = model_after;
            if let Op::Write { file, .. } = op {
                self.written_in_place(MODEL_PATHS[*file]);
            }
        }
        self.check_contents();
    }

    /// After a crash: exactly the durable files with their durable sizes, byte for byte
    /// unless written in place since the flush (torn writes): adopt what those hold.
    fn after_crash(&mut self) {
        let store = self.store();
        let mut names: Vec<String> = store
            .list("/")
            .unwrap()
            .into_iter()
            .map(|s| s.path)
            .collect();
        names.sort();
        let mut expected: Vec<String> = self.durable.keys().cloned().collect();
        expected.sort();
        assert_eq!(names, expected, "files after crash");
        let mut model = Model::new();
        let mut removed = false;
        for (path, content) in &self.durable {
            if self.torn.contains(path) && !reads_whole(store, path) {
                // A block written in place since the flush no longer matches its durable
                // checksum: an error naming the block, never different bytes. Removing
                // the file is the way out.
                store.delete(path).unwrap();
                removed = true;
                continue;
            }
            let got = read_all(store, path);
            assert_eq!(got.len(), content.len(), "size of {path} after crash");
            if !self.torn.contains(path) {
                assert!(got == *content, "{path} changed by the crash");
            }
            model.insert(path.clone(), got);
        }
        if removed {
            // The removals are part of the state the harness now calls durable.
            store.flush().unwrap();
        }
        self.model = model;
        self.mark_flushed();
    }

    fn check_contents(&self) {
        let store = self.store();
        check_invariants(store);
        let mut names: Vec<String> = store
            .list("/")
            .unwrap()
            .into_iter()
            .map(|s| s.path)
            .collect();
        names.sort();
        let mut expected: Vec<String> = self.model.keys().cloned().collect();
        expected.sort();
        assert_eq!(names, expected);
        for (path, content) in &self.model {
            assert!(read_all(store, path) == *content, "contents of {path}");
        }
    }
}

proptest! {
    // 48 cases keep `cargo test` quick (each case fsyncs); PROPTEST_CASES runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_match_the_model(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        let mut harness = Harness::new();
        for op in &ops {
            harness.apply(op);
        }
        harness.store.take().unwrap().close().unwrap();
        harness.mark_flushed();
        let store = reopen(&harness.dir);
        harness.store = Some(store);
        harness.check_contents();
    }
}

mod dirs;

/// Replace by rename, as a whole-file write does it: a temporary in the staging
/// directory renamed over the target. A crash before the flush keeps the old file; after
/// it, the new one; never a mix. A temporary whose writer died is removed when the store
/// opens, and the empty staging directory does not linger.
#[test]
fn replace_by_rename_is_atomic_and_staging_is_reclaimed() {
    let (dir, store) = new_store(256);
    let old = seeded(40_000, 1);
    let new = seeded(70_000, 2);
    store.write_at("/t", 0, &old).unwrap();
    store.flush().unwrap();
    let tmp = format!("{PARTIAL_DIR}/writer-1");
    store.write_at(&tmp, 0, &new).unwrap();
    store.rename(&tmp, "/t").unwrap();
    assert!(
        !store.state.read().unwrap().is_dir(PARTIAL_DIR),
        "the staging directory goes with its last temporary"
    );
    crash(store);
    let store = reopen(&dir);
    assert_eq!(
        read_all(&store, "/t"),
        old,
        "crash before the flush: the old file"
    );
    store.write_at(&tmp, 0, &new).unwrap();
    store.rename(&tmp, "/t").unwrap();
    store.flush().unwrap();
    crash(store);
    let store = reopen(&dir);
    assert_eq!(
        read_all(&store, "/t"),
        new,
        "crash after the flush: the new file"
    );

    // Writers that died: one temporary flushed (by someone else's flush), one not.
    store
        .write_at(&format!("{PARTIAL_DIR}/dead-1"), 0, &old)
        .unwrap();
    store.flush().unwrap();
    store
        .write_at(&format!("{PARTIAL_DIR}/dead-2"), 0, &old)
        .unwrap();
    let free_before = store.free_bytes();
    crash(store);
    let store = reopen(&dir);
    assert!(store.list(PARTIAL_DIR).unwrap().is_empty());
    assert!(!store.state.read().unwrap().is_dir(PARTIAL_DIR));
    assert!(
        store.free_bytes() > free_before,
        "their blocks are free again"
    );
    store.flush().unwrap();
    drop(store);
    let store = reopen(&dir);
    assert!(store.list(PARTIAL_DIR).unwrap().is_empty());
    assert_eq!(
        store.list("/").unwrap().len(),
        1,
        "only /t: {:?}",
        store.list("/")
    );
    assert_eq!(read_all(&store, "/t"), new);
}

/// A delete and a replacing rename are durable at the next flush: a crash after it does
/// not bring the file (or the replaced file) back.
#[test]
fn delete_and_rename_are_durable_at_the_flush() {
    let (dir, store) = new_store(64);
    store.write_at("/gone", 0, b"bye").unwrap();
    store.write_at("/a", 0, b"a").unwrap();
    store.write_at("/b", 0, b"b").unwrap();
    store.flush().unwrap();
    store.delete("/gone").unwrap();
    store.rename("/a", "/b").unwrap();
    store.flush().unwrap();
    crash(store);
    let store = reopen(&dir);
    assert!(matches!(
        store.stat("/gone"),
        Err(FileStoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.stat("/a"),
        Err(FileStoreError::NotFound { .. })
    ));
    assert_eq!(read_all(&store, "/b"), b"a");
}

/// Flips bit `bit` of the byte at `offset` of the file at `path`.
fn flip_bit(path: &std::path::Path, offset: u64, bit: u8) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 1 << bit;
    f.write_all_at(&b, offset).unwrap();
}

#[test]
fn a_flipped_bit_in_a_block_is_an_error_naming_the_file_and_block() {
    let (dir, store) = new_store(64);
    let data = seeded(10 * BLOCK_SIZE as usize + 100, 3);
    store.write_at("/f", 0, &data).unwrap();
    store.write_at("/g", 0, &seeded(5000, 4)).unwrap();
    let ext = store.extents("/f").unwrap();
    assert_eq!(store.unverified_blocks(), 0);
    store.close().unwrap();

    // Every bit position of block 3 and of the partial last block, one at a time.
    for (block, at) in [(3u64, 17u64), (3, BLOCK_SIZE - 1), (10, 99), (0, 0)] {
        let nvm_offset = ext[0].nvm_offset + block * BLOCK_SIZE + at;
        for bit in [0u8, 7] {
            flip_bit(&dir.path().join(NVM_FILE), nvm_offset, bit);
            let store = reopen(&dir);
            // Uncached reads of media read through the page cache go straight into the
            // destination, and are verified there.
            let modes = [
                (false, MediaReads::Direct),
                (true, MediaReads::Direct),
                (true, MediaReads::Cached),
            ];
            for (uncached, media) in modes {
                store.nvm.set_media_reads(media);
                let mut buf = vec![0u8; data.len()];
                let err = store.read_impl("/f", 0, &mut buf, uncached).unwrap_err();
                match &err {
                    FileStoreError::Checksum {
                        path,
                        block: b,
                        nvm_offset: n,
                        expected,
                        actual,
                    } => {
                        assert_eq!(path, "/f");
                        assert_eq!(*b, block);
                        assert_eq!(*n, ext[0].nvm_offset + block * BLOCK_SIZE);
                        assert_ne!(expected, actual);
                    }
                    other => panic!("expected a checksum error, got {other}"),
                }
                let msg = err.to_string();
                assert!(
                    msg.contains("/f") && msg.contains(&format!("block {block}")),
                    "{msg}"
                );
                // A read of one byte of the bad block fails too; a read that avoids it
                // succeeds.
                let mut one = [0u8; 1];
                let start = block * BLOCK_SIZE + at.min(50);
                assert!(store.read_impl("/f", start, &mut one, uncached).is_err());
                let other = if block == 3 { 5 } else { 4 };
                let mut piece = vec![0u8; 300];
                store
                    .read_impl("/f", other * BLOCK_SIZE + 7, &mut piece, uncached)
                    .unwrap();
                let from = (other * BLOCK_SIZE + 7) as usize;
                assert_eq!(piece, data[from..from + 300]);
            }
            store.nvm.set_media_reads(MediaReads::Direct);
            // A partial write into the bad block is refused and changes nothing.
            let err = store
                .write_at("/f", block * BLOCK_SIZE + 1, b"xy")
                .unwrap_err();
            assert!(matches!(err, FileStoreError::Checksum { .. }), "{err}");
            assert_eq!(read_all(&store, "/g"), seeded(5000, 4));
            crash(store);
            flip_bit(&dir.path().join(NVM_FILE), nvm_offset, bit);
            let store = reopen(&dir);
            assert_eq!(read_all(&store, "/f"), data);
            crash(store);
        }
    }

    // Rewriting the block whole repairs the file.
    flip_bit(&dir.path().join(NVM_FILE), ext[0].nvm_offset + 5, 2);
    let store = reopen(&dir);
    assert!(store.read_at("/f", 0, &mut [0u8; 10]).is_err());
    store
        .write_at("/f", 0, &data[..BLOCK_SIZE as usize])
        .unwrap();
    assert_eq!(read_all(&store, "/f"), data);
}

#[test]
fn a_wrong_stored_checksum_is_an_error_never_other_bytes() {
    let (dir, store) = new_store(64);
    let data = seeded(3 * BLOCK_SIZE as usize, 5);
    store.write_at("/f", 0, &data).unwrap();
    let nvm_block = store.extents("/f").unwrap()[0].nvm_offset / BLOCK_SIZE;
    store.close().unwrap();
    let meta = dir.path().join(META_FILE_NAME);

    // A flipped bit in the stored checksum (written through redb: the metadata file's
    // own integrity checks pass).
    {
        let db = Database::open(&meta).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(SUMS_TABLE).unwrap();
            let gi = nvm_block / sums::GROUP_BLOCKS;
            let mut bytes = table.get(gi).unwrap().unwrap().value().to_vec();
            let at = 128 + 4 * ((nvm_block + 1) % sums::GROUP_BLOCKS) as usize;
            bytes[at] ^= 0x10;
            table.insert(gi, bytes.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = reopen(&dir);
    let err = store
        .read_at("/f", 0, &mut vec![0; data.len()])
        .unwrap_err();
    assert!(
        matches!(err, FileStoreError::Checksum { block: 1, .. }),
        "{err}"
    );
    store.close().unwrap();

    // A flipped bit in the raw metadata file, where that block's checksum is stored: an
    // error at open or at the read, never different bytes.
    let (dir, store) = new_store(64);
    store.write_at("/f", 0, &data).unwrap();
    store.close().unwrap();
    let meta = dir.path().join(META_FILE_NAME);
    let raw = fs::read(&meta).unwrap();
    let sum = crc::crc32c(&data[..BLOCK_SIZE as usize]).to_le_bytes();
    let hits: Vec<usize> = raw
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == sum)
        .map(|(i, _)| i)
        .collect();
    assert!(
        !hits.is_empty(),
        "the checksum is stored in {}",
        meta.display()
    );
    for at in hits {
        flip_bit(&meta, at as u64, 3);
    }
    let nvm = Arc::new(Nvm::open(dir.path().join(NVM_FILE)).unwrap());
    match FileStore::open(dir.path(), nvm) {
        Err(FileStoreError::MetaCorrupt { .. }) => {}
        Err(other) => panic!("expected a corrupt metadata error, got {other}"),
        Ok(store) => {
            let mut buf = vec![0; data.len()];
            match store.read_at("/f", 0, &mut buf) {
                Err(FileStoreError::Checksum { block: 0, .. }) => {}
                Ok(_) => assert_eq!(buf, data, "a read returned different bytes"),
                Err(other) => panic!("unexpected {other}"),
            }
        }
    }
}

#[test]
fn an_image_made_before_checksums_opens_unverified_and_gains_them() {
    let (dir, store) = new_store(64);
    let old = seeded(4 * BLOCK_SIZE as usize, 6);
    store.write_at("/old", 0, &old).unwrap();
    let nvm_offset = store.extents("/old").unwrap()[0].nvm_offset;
    store.close().unwrap();
    // Make it what a format-1 store wrote: no checksum table, version 1.
    {
        let db = Database::open(dir.path().join(META_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.delete_table(SUMS_TABLE).unwrap();
        txn.open_table(SUPERBLOCK_TABLE)
            .unwrap()
            .insert(KEY_FORMAT_VERSION, FORMAT_VERSION_UNSUMMED)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = reopen(&dir);
    assert_eq!(store.unverified_blocks(), 4);
    assert_eq!(read_all(&store, "/old"), old);
    store.write_at("/new", 0, &seeded(5000, 7)).unwrap();
    store
        .write_at("/old", 0, &old[..BLOCK_SIZE as usize])
        .unwrap();
    assert_eq!(store.unverified_blocks(), 3);
    store.close().unwrap();
    {
        let db = Database::open(dir.path().join(META_FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let version = txn
            .open_table(SUPERBLOCK_TABLE)
            .unwrap()
            .get(KEY_FORMAT_VERSION)
            .unwrap()
            .unwrap()
            .value();
        assert_eq!(
            version, FORMAT_VERSION,
            "the first flush marks the new format"
        );
    }
    // An unverified block reads what the media holds; a verified one is checked.
    flip_bit(
        &dir.path().join(NVM_FILE),
        nvm_offset + 2 * BLOCK_SIZE + 1,
        0,
    );
    flip_bit(&dir.path().join(NVM_FILE), nvm_offset + 1, 0);
    let store = reopen(&dir);
    let mut buf = vec![0u8; 10];
    store.read_at("/old", 2 * BLOCK_SIZE, &mut buf).unwrap();
    assert_ne!(buf, old[2 * BLOCK_SIZE as usize..][..10]);
    assert!(matches!(
        store.read_at("/old", 0, &mut buf),
        Err(FileStoreError::Checksum { block: 0, .. })
    ));
    assert_eq!(read_all(&store, "/new"), seeded(5000, 7));
}

#[test]
fn appends_after_a_flush_keep_the_flushed_bytes_readable_after_a_crash() {
    // The last block's checksum covers the bytes up to the size, so an unflushed append
    // into it (which reaches the media) does not spoil the flushed prefix.
    let (dir, store) = new_store(64);
    store.write_at("/log", 0, &seeded(5000, 8)).unwrap();
    store.flush().unwrap();
    store.write_at("/log", 5000, &seeded(100, 9)).unwrap();
    store.write_at("/log", 5100, &seeded(3000, 10)).unwrap();
    store.write_at("/log", 9000, &seeded(3000, 10)).unwrap();
    crash(store);
    let store = reopen(&dir);
    assert_eq!(read_all(&store, "/log"), seeded(5000, 8));
    // Truncate within a block, grow, write with a gap: all still verify.
    store.truncate("/log", 4100).unwrap();
    store.truncate("/log", 9000).unwrap();
    store.write_at("/log", 12_000, b"tail").unwrap();
    let mut want = seeded(5000, 8)[..4100].to_vec();
    want.resize(12_000, 0);
    want.extend_from_slice(b"tail");
    assert_eq!(read_all(&store, "/log"), want);
    store.close().unwrap();
    let store = reopen(&dir);
    assert_eq!(read_all(&store, "/log"), want);
}

/// Several ranges of several files in one uncached read: each range's bytes as
/// `read_at` gives them (holes as zeros, short at the end of its file), a missing file
/// or a bad block named by its range's index and the block.
#[test]
fn ranges_of_several_files_read_in_one_batch() {
    let (_dir, store) = new_store(256);
    let a = seeded(3 * BLOCK_SIZE as usize + 100, 1);
    store.write_at("/a", 0, &a).unwrap();
    // /b: a hole of five blocks, then data.
    let b_data = seeded(2 * BLOCK_SIZE as usize + 7, 2);
    store.write_at("/b", 5 * BLOCK_SIZE + 11, &b_data).unwrap();
    store.write_at("/c", 0, &seeded(300, 3)).unwrap();
    let wanted: [(&str, u64, usize); 4] = [
        ("/a", 10, 2 * BLOCK_SIZE as usize + 50),
        ("/b", 3, 6 * BLOCK_SIZE as usize),
        ("/c", 100, 1000),
        ("/a", 4 * BLOCK_SIZE, 10),
    ];
    let mut bufs: Vec<Vec<u8>> = wanted.iter().map(|w| vec![0xEE; w.2]).collect();
    let mut ranges: Vec<RangeRead<'_>> = (wanted.iter().zip(bufs.iter_mut()))
        .map(|(&(path, offset, _), dst)| RangeRead { path, offset, dst })
        .collect();
    let got = store.read_ranges_uncached(&mut ranges).unwrap();
    drop(ranges);
    assert_eq!(
        got,
        [
            2 * BLOCK_SIZE as usize + 50,
            6 * BLOCK_SIZE as usize,
            200,
            0
        ]
    );
    for ((&(path, offset, len), buf), n) in wanted.iter().zip(&bufs).zip(&got) {
        let mut want = vec![0u8; len];
        let m = store.read_at(path, offset, &mut want).unwrap();
        assert_eq!(m, *n);
        assert_eq!(buf[..*n], want[..m], "{path} at {offset}");
    }

    let mut one = [0u8; 10];
    let mut two = [0u8; 10];
    let mut ranges = [
        RangeRead {
            path: "/a",
            offset: 0,
            dst: &mut one,
        },
        RangeRead {
            path: "/nope",
            offset: 0,
            dst: &mut two,
        },
    ];
    let (i, e) = store.read_ranges_uncached(&mut ranges).unwrap_err();
    assert_eq!(i, 1);
    assert!(matches!(e, FileStoreError::NotFound { .. }), "{e}");

    // A bit flipped behind the store's back in /b's second data block.
    let ext = store.extents("/b").unwrap();
    let block = ext[0].file_offset / BLOCK_SIZE + 1;
    let at = ext[0].nvm_offset + BLOCK_SIZE + 17;
    let mut byte = [0u8; 1];
    store.nvm.read_at(at, &mut byte).unwrap();
    store.nvm.write_at(at, &[byte[0] ^ 4]).unwrap();
    let mut bufs: Vec<Vec<u8>> = wanted.iter().map(|w| vec![0; w.2]).collect();
    let mut ranges: Vec<RangeRead<'_>> = (wanted.iter().zip(bufs.iter_mut()))
        .map(|(&(path, offset, _), dst)| RangeRead { path, offset, dst })
        .collect();
    let (i, e) = store.read_ranges_uncached(&mut ranges).unwrap_err();
    assert_eq!(i, 1, "{e}");
    match e {
        FileStoreError::Checksum { path, block: b, .. } => {
            assert_eq!((path.as_str(), b), ("/b", block))
        }
        other => panic!("expected a checksum error, got {other}"),
    }
}
