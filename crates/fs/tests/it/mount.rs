//! File operations through a real FUSE mount.

use std::fs;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use crate::{is_mounted, Fixture};

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn every_ordinary_operation() {
    let fx = Fixture::mount();
    assert!(
        is_mounted(&fx.mnt()),
        "{}",
        fs::read_to_string("/proc/self/mountinfo").unwrap()
    );
    // create, write, read, stat
    fs::write(fx.at("a.txt"), b"hello").unwrap();
    assert_eq!(fs::read(fx.at("a.txt")).unwrap(), b"hello");
    assert_eq!(fs::metadata(fx.at("a.txt")).unwrap().len(), 5);
    // append
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(fx.at("a.txt"))
        .unwrap();
    f.write_all(b" world").unwrap();
    drop(f);
    assert_eq!(fs::read(fx.at("a.txt")).unwrap(), b"hello world");
    // overwrite in place, read at an offset
    let f = fs::OpenOptions::new()
        .write(true)
        .open(fx.at("a.txt"))
        .unwrap();
    f.write_all_at(b"J", 6).unwrap();
    drop(f);
    let mut f = fs::File::open(fx.at("a.txt")).unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "Jorld");
    // truncate (shrink, grow with zeros)
    let f = fs::OpenOptions::new()
        .write(true)
        .open(fx.at("a.txt"))
        .unwrap();
    f.set_len(3).unwrap();
    f.set_len(6).unwrap();
    drop(f);
    assert_eq!(fs::read(fx.at("a.txt")).unwrap(), b"hel\0\0\0");
    // O_TRUNC
    fs::write(fx.at("a.txt"), b"xy").unwrap();
    assert_eq!(fs::read(fx.at("a.txt")).unwrap(), b"xy");
    // O_EXCL
    let err = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(fx.at("a.txt"))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    // mkdir, nested files, readdir
    fs::create_dir(fx.at("d")).unwrap();
    fs::create_dir(fx.at("d/e")).unwrap();
    fs::write(fx.at("d/f"), b"1").unwrap();
    assert_eq!(names(&fx.mnt()), ["a.txt", "d"]);
    assert_eq!(names(&fx.at("d")), ["e", "f"]);
    assert!(fs::metadata(fx.at("d/e")).unwrap().is_dir());
    assert_eq!(
        fs::create_dir(fx.at("d")).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    // rmdir of a non-empty directory fails, of an empty one works
    assert_eq!(
        fs::remove_dir(fx.at("d")).unwrap_err().raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    fs::remove_dir(fx.at("d/e")).unwrap();
    // rename a file, then a directory
    fs::rename(fx.at("a.txt"), fx.at("d/b.txt")).unwrap();
    assert_eq!(fs::read(fx.at("d/b.txt")).unwrap(), b"xy");
    fs::rename(fx.at("d"), fx.at("d2")).unwrap();
    assert_eq!(names(&fx.at("d2")), ["b.txt", "f"]);
    assert_eq!(fs::read(fx.at("d2/f")).unwrap(), b"1");
    // unlink
    fs::remove_file(fx.at("d2/f")).unwrap();
    assert_eq!(
        fs::read(fx.at("d2/f")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // A directory outlives its last file.
    fs::remove_file(fx.at("d2/b.txt")).unwrap();
    assert!(fs::metadata(fx.at("d2")).unwrap().is_dir());
    fs::remove_dir(fx.at("d2")).unwrap();
    assert_eq!(names(&fx.mnt()), Vec::<String>::new());
    // fsync
    let mut f = fs::File::create(fx.at("s")).unwrap();
    f.write_all(b"sync").unwrap();
    f.sync_all().unwrap();
    // The library sees what the mount did.
    assert_eq!(fx.fs.read("/s", 0, 100).unwrap(), b"sync");
}
