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
    store.write_at("/src/sub/b", 0, &pattern(5000, 1)).unwrap();
    store.write_at("/other/x", 0, b"x").unwrap();
    store.mkdir("/dst").unwrap();
    store.rename("/src", "/dst").unwrap();
    assert!(matches!(
        store.lookup("/src"),
        Err(FileStoreError::NotFound { .. })
    ));
    assert_eq!(list(&store, "/dst"), ["a", "empty/", "sub/"]);
    assert_eq!(read_all(&store, "/dst/sub/b"), pattern(5000, 1));
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
    assert_eq!(read_all(&store, "/other/deep/sub2/b"), pattern(5000, 1));
    assert_eq!(list(&store, "/dst"), ["a", "empty/"]);
    check_invariants(&store);
}

#[test]
fn directories_survive_reopen_and_crashes_keep_the_last_flush() {
    let (dir, store) = new_store(64);
    store.mkdir("/kept").unwrap();
    store.write_at("/tree/f", 0, &pattern(3000, 7)).unwrap();
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
    assert_eq!(read_all(&store, "/tree/f"), pattern(3000, 7));
    // The same, flushed, then a crash: all of it, at once.
    store.mkdir("/lost").unwrap();
    store.rmdir("/kept").unwrap();
    store.rename("/tree", "/moved").unwrap();
    store.flush().unwrap();
    crash(store);
    let store = reopen(&dir);
    assert_eq!(list(&store, ""), ["lost/", "moved/"]);
    assert_eq!(list(&store, "/moved"), ["e/", "f"]);
    assert_eq!(read_all(&store, "/moved/f"), pattern(3000, 7));
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
