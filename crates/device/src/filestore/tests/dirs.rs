//! Directories: mkdir, rmdir, listings, directory rename, and their crash safety.

use super::*;

fn names(entries: &[DirEntry]) -> Vec<String> {
    entries.iter().map(DirEntry::key).collect()
}

fn list(store: &FileStore, dir: &str) -> Vec<String> {
    let (entries, more) = store.read_dir(dir, "", usize::MAX).unwrap();
    assert!(!more);
    names(&entries)
}

#[test]
fn mkdir_lookup_and_listing() {
    let (_dir, store) = new_store(64);
    store.mkdir("/d").unwrap();
    store.mkdir("/d/e").unwrap();
    store.write_at("/d/x.b", 0, b"abc").unwrap();
    store.write_at("/d/x/y", 0, b"1").unwrap();
    store.write_at("/top", 0, b"").unwrap();
    assert_eq!(list(&store, ""), ["d/", "top"]);
    // Keys order a file before the directory its name prefixes ('.' < '/').
    assert_eq!(list(&store, "/d"), ["e/", "x.b", "x/"]);
    assert_eq!(list(&store, "/d/e"), Vec::<String>::new());
    let e = store.lookup("/d/x.b").unwrap();
    assert_eq!(
        (e.name.as_str(), e.kind, e.size),
        ("x.b", EntryKind::File, 3)
    );
    assert_eq!(store.lookup("/d/x").unwrap().kind, EntryKind::Dir);
    assert_eq!(store.lookup("/d/e").unwrap().kind, EntryKind::Dir);
    assert_eq!(store.lookup("/").unwrap().kind, EntryKind::Dir);
    assert!(matches!(
        store.lookup("/d/nope"),
        Err(FileStoreError::NotFound { .. })
    ));
    // Listing resumes after a key, a page at a time.
    let (page, more) = store.read_dir("/d", "", 2).unwrap();
    assert_eq!(
        (names(&page), more),
        (vec!["e/".into(), "x.b".into()], true)
    );
    let (page, more) = store.read_dir("/d", "x.b", 2).unwrap();
    assert_eq!((names(&page), more), (vec!["x/".into()], false));
    let (page, more) = store.read_dir("/d", "e/", 1).unwrap();
    assert_eq!((names(&page), more), (vec!["x.b".into()], true));
    assert!(matches!(
        store.read_dir("/top", "", 10),
        Err(FileStoreError::NotADir { .. })
    ));
    assert!(matches!(
        store.read_dir("/none", "", 10),
        Err(FileStoreError::NotFound { .. })
    ));
    check_invariants(&store);
}

#[test]
fn mkdir_refusals() {
    let (_dir, store) = new_store(64);
    store.write_at("/f", 0, b"x").unwrap();
    store.mkdir("/d").unwrap();
    assert!(matches!(
        store.mkdir("/d"),
        Err(FileStoreError::Exists { .. })
    ));
    assert!(matches!(
        store.mkdir("/f"),
        Err(FileStoreError::Exists { .. })
    ));
    assert!(matches!(
        store.mkdir("/f/g"),
        Err(FileStoreError::NotADirectory { .. })
    ));
    assert!(matches!(
        store.mkdir("/"),
        Err(FileStoreError::InvalidPath { .. })
    ));
    // A file cannot be created where a directory is.
    assert!(matches!(
        store.write_at("/d", 0, b"x"),
        Err(FileStoreError::IsADirectory { .. })
    ));
    assert!(matches!(
        store.rename("/f", "/d"),
        Err(FileStoreError::IsADirectory { .. })
    ));
}

#[test]
fn rmdir_only_empty_directories() {
    let (_dir, store) = new_store(64);
    store.mkdir("/d").unwrap();
    store.write_at("/d/f", 0, b"x").unwrap();
    assert!(matches!(
        store.rmdir("/d"),
        Err(FileStoreError::DirNotEmpty { .. })
    ));
    assert!(matches!(
        store.rmdir("/d/f"),
        Err(FileStoreError::NotADir { .. })
    ));
    assert!(matches!(
        store.rmdir("/e"),
        Err(FileStoreError::NotFound { .. })
    ));
    store.delete("/d/f").unwrap();
    store.rmdir("/d").unwrap();
    assert!(matches!(
        store.lookup("/d"),
        Err(FileStoreError::NotFound { .. })
    ));
}

#[test]
fn a_directory_outlives_its_last_entry() {
    let (_dir, store) = new_store(64);
    // Implicit directories, made by a file path.
    store.write_at("/a/b/f", 0, b"x").unwrap();
    store.delete("/a/b/f").unwrap();
    assert_eq!(store.lookup("/a/b").unwrap().kind, EntryKind::Dir);
    assert_eq!(list(&store, "/a"), ["b/"]);
    store.write_at("/a/b/g", 0, b"x").unwrap();
    store.rename("/a/b/g", "/g").unwrap();
    assert_eq!(list(&store, "/a/b"), Vec::<String>::new());
    store.rmdir("/a/b").unwrap();
    assert_eq!(list(&store, "/a"), Vec::<String>::new());
    store.rmdir("/a").unwrap();
    assert_eq!(list(&store, ""), ["g"]);
    check_invariants(&store);
}

#[test]
fn rename_moves_a_directory_tree() {
    let (_dir, store) = new_store(64);
    store.mkdir("/src/empty").unwrap();
    store.write_at("/src/a", 0, b"aa").unwrap();
    store.write_at("/src/sub/b", 0, &seeded(5000, 1)).unwrap();
    store.write_at("/other/x", 0, b"x").unwrap();
    store.mkdir("/dst").unwrap();
    store.rename("/src", "/dst").unwrap();
    assert!(matches!(
        store.lookup("/src"),
        Err(FileStoreError::NotFound { .. })
    ));
    assert_eq!(list(&store, "/dst"), ["a", "empty/", "sub/"]);
    assert_eq!(read_all(&store, "/dst/sub/b"), seeded(5000, 1));
    assert_eq!(read_all(&store, "/dst/a"), b"aa");
    // Refusals leave everything as it was.
    assert!(matches!(
        store.rename("/dst", "/dst/sub/in"),
        Err(FileStoreError::RenameIntoItself { .. })
    ));
    assert!(matches!(
        store.rename("/dst", "/other"),
        Err(FileStoreError::DirNotEmpty { .. })
    ));
    assert!(matches!(
        store.rename("/dst", "/other/x"),
        Err(FileStoreError::NotADir { .. })
    ));
    assert!(matches!(
        store.rename("/dst", "/other/x/y"),
        Err(FileStoreError::NotADirectory { .. })
    ));
    assert_eq!(list(&store, "/dst"), ["a", "empty/", "sub/"]);
    // Into a deeper, new place; the old parent stays.
    store.rename("/dst/sub", "/other/deep/sub2").unwrap();
    assert_eq!(read_all(&store, "/other/deep/sub2/b"), seeded(5000, 1));
    assert_eq!(list(&store, "/dst"), ["a", "empty/"]);
    check_invariants(&store);
}

#[test]
fn directories_survive_reopen_and_crashes_keep_the_last_flush() {
    let (dir, store) = new_store(64);
    store.mkdir("/kept").unwrap();
    store.write_at("/tree/f", 0, &seeded(3000, 7)).unwrap();
    store.mkdir("/tree/e").unwrap();
    store.flush().unwrap();
    // After the flush: a mkdir, an rmdir and a directory rename, then a crash.
    store.mkdir("/lost").unwrap();
    store.rmdir("/kept").unwrap();
    store.rename("/tree", "/moved").unwrap();
    crash(store);
    let store = reopen(&dir);
    assert_eq!(list(&store, ""), ["kept/", "tree/"]);
    assert_eq!(list(&store, "/tree"), ["e/", "f"]);
    assert_eq!(read_all(&store, "/tree/f"), seeded(3000, 7));
    // The same, flushed, then a crash: all of it, at once.
    store.mkdir("/lost").unwrap();
    store.rmdir("/kept").unwrap();
    store.rename("/tree", "/moved").unwrap();
    store.flush().unwrap();
    crash(store);
    let store = reopen(&dir);
    assert_eq!(list(&store, ""), ["lost/", "moved/"]);
    assert_eq!(list(&store, "/moved"), ["e/", "f"]);
    assert_eq!(read_all(&store, "/moved/f"), seeded(3000, 7));
    store.close().unwrap();
    let store = reopen(&dir);
    assert_eq!(list(&store, ""), ["lost/", "moved/"]);
}

#[test]
fn a_directory_below_a_file_in_the_metadata_is_corruption() {
    let (dir, store) = new_store(64);
    store.write_at("/f", 0, b"x").unwrap();
    store.close().unwrap();
    {
        let db = Database::create(dir.path().join(META_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(DIRS_TABLE)
            .unwrap()
            .insert("/f/d", 1)
            .unwrap();
        txn.commit().unwrap();
    }
    let nvm = Nvm::open(dir.path().join(NVM_FILE)).unwrap();
    let err = FileStore::open(dir.path(), Arc::new(nvm)).unwrap_err();
    assert!(
        matches!(&err, FileStoreError::MetaCorrupt { reason, .. } if reason.contains("/f/d")),
        "{err}"
    );
}

const TREE_CHILD_ENV: &str = "CSX_FILESTORE_TREE_CHILD_DIR";

/// Bytes of `/done/{g}/data`: written longer, then cut by a truncate.
fn tree_data(g: u64) -> Vec<u8> {
    let len = 500 + (g as usize * 977) % 9000;
    seeded(len + 4000, g + 77)[..len].to_vec()
}

/// Child half of `kill_during_renames_truncates_and_mkdirs_keeps_the_flushed_tree`: per
/// generation, builds a directory under a temporary name (a file written long and
/// truncated, renamed into it, a second file, an empty directory), renames the directory
/// into place, removes the previous generation's empty directory, flushes and says so
/// on stdout; then unflushed churn of the same operations, until it is killed.
#[test]
#[ignore = "run as a child process by kill_during_renames_truncates_and_mkdirs_keeps_the_flushed_tree"]
fn tree_crash_child() {
    let Some(dir) = std::env::var_os(TREE_CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let nvm = Arc::new(Nvm::open(dir.join(NVM_FILE)).unwrap());
    let store = FileStore::open(&dir, nvm).unwrap();
    let start = store
        .read_dir("/done", "", usize::MAX)
        .map_or(0, |(entries, _)| entries.len() as u64);
    for g in start..start + 5000 {
        let data = tree_data(g);
        let stage = format!("/stage/{g}");
        store
            .write_at(&stage, 0, &seeded(data.len() + 4000, g + 77))
            .unwrap();
        store.truncate(&stage, data.len() as u64).unwrap();
        let building = format!("/building/{g}");
        store.mkdir(&format!("{building}/empty")).unwrap();
        store
            .write_at(&format!("{building}/f"), 0, &seeded(100, g))
            .unwrap();
        store.rename(&stage, &format!("{building}/data")).unwrap();
        store.rename(&building, &format!("/done/{g}")).unwrap();
        if g > 0 {
            // The previous generation's (a killed run may have left it).
            let previous = format!("/done/{}/empty", g - 1);
            if store.lookup(&previous).is_ok() {
                store.rmdir(&previous).unwrap();
            }
        }
        store.flush().unwrap();
        println!("FLUSHED {g}");
        // Unflushed churn: moved away and back, scratch trees made, cut and dropped.
        store.rename(&format!("/done/{g}"), "/away").unwrap();
        store.mkdir("/scratch/a/b").unwrap();
        store
            .write_at("/scratch/a/b/x", 0, &seeded(30_000, g))
            .unwrap();
        store.truncate("/scratch/a/b/x", 10).unwrap();
        store.rename("/scratch/a", "/scratch/c").unwrap();
        store.rename("/away", &format!("/done/{g}")).unwrap();
        store.delete("/scratch/c/b/x").unwrap();
        store.rmdir("/scratch/c/b").unwrap();
        store.rmdir("/scratch/c").unwrap();
    }
}

/// `kill -9` of a process that renames files and directories, truncates and makes and
/// removes directories, at a different moment each round: after reopening, every
/// flushed generation is whole and in place, and nothing of the unflushed steps shows.
#[test]
fn kill_during_renames_truncates_and_mkdirs_keeps_the_flushed_tree() {
    let dir = tempfile::tempdir().unwrap();
    let nvm = Arc::new(Nvm::create(dir.path().join(NVM_FILE), 16384 * BLOCK_SIZE).unwrap());
    FileStore::create(dir.path(), nvm).unwrap().close().unwrap();
    let mut flushed_before = 0;
    for round in 0..3u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "filestore::tests::dirs::tree_crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(TREE_CHILD_ENV, dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut last = None;
        let target = flushed_before + 4 + round * 5;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(g) = line.strip_prefix("FLUSHED ") {
                let g: u64 = g.trim().parse().unwrap();
                last = Some(g);
                if g >= target {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(round * 2));
        child.kill().unwrap();
        child.wait().unwrap();

        let last = last.expect("the child flushed at least once");
        let store = reopen(&dir);
        check_invariants(&store);
        // Generations flushed after the last one reported may be there too, whole.
        let done = list(&store, "/done");
        assert!(done.len() as u64 > last, "round {round}: {done:?}");
        for g in 0..done.len() as u64 {
            let at = format!("/done/{g}");
            assert_eq!(
                read_all(&store, &format!("{at}/data")),
                tree_data(g),
                "{at}"
            );
            assert_eq!(read_all(&store, &format!("{at}/f")), seeded(100, g), "{at}");
            let expect: &[&str] = if g + 1 == done.len() as u64 {
                &["data", "empty/", "f"]
            } else {
                &["data", "f"]
            };
            assert_eq!(list(&store, &at), expect, "{at}");
        }
        // Nothing unflushed shows: no staged file, half-built or moved-away directory.
        for gone in ["/away", "/scratch/a", "/scratch/c"] {
            assert!(
                matches!(store.lookup(gone), Err(FileStoreError::NotFound { .. })),
                "{gone} after round {round}"
            );
        }
        for emptied in ["/stage", "/building"] {
            if store.lookup(emptied).is_ok() {
                assert_eq!(list(&store, emptied), Vec::<String>::new(), "{emptied}");
            }
        }
        flushed_before = done.len() as u64;
        store.close().unwrap();
    }
}
