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

#[test]
fn concurrent_writers_threads_and_processes() {
    let fx = Fixture::mount();
    // Threads: each writes its own file, and its own stripe of a shared file.
    const WRITERS: usize = 4;
    const STRIPE: usize = 64 << 10;
    fs::write(fx.at("shared"), b"").unwrap();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let fx = &fx;
            s.spawn(move || {
                let mine: Vec<u8> = (0..200_000).map(|i| (i * (w + 3)) as u8).collect();
                fs::write(fx.at(&format!("w{w}")), &mine).unwrap();
                let f = fs::OpenOptions::new()
                    .write(true)
                    .open(fx.at("shared"))
                    .unwrap();
                for round in 0..4u8 {
                    let stripe = vec![w as u8 * 16 + round; STRIPE];
                    f.write_all_at(&stripe, (w * STRIPE) as u64).unwrap();
                }
                f.sync_all().unwrap();
            });
        }
    });
    for w in 0..WRITERS {
        let want: Vec<u8> = (0..200_000).map(|i| (i * (w + 3)) as u8).collect();
        assert!(fs::read(fx.at(&format!("w{w}"))).unwrap() == want, "w{w}");
    }
    let shared = fs::read(fx.at("shared")).unwrap();
    assert_eq!(shared.len(), WRITERS * STRIPE);
    for w in 0..WRITERS {
        let stripe = &shared[w * STRIPE..(w + 1) * STRIPE];
        assert!(stripe.iter().all(|&b| b == w as u8 * 16 + 3), "stripe {w}");
    }
    // Processes: shells appending lines to one file and writing their own.
    let children: Vec<_> = (0..3)
        .map(|p| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "for i in 1 2 3 4 5 6 7 8 9 10; do echo p{p}-$i >> '{log}'; done; seq 1 2000 > '{own}'",
                    log = fx.at("log").display(),
                    own = fx.at(&format!("p{p}")).display()
                ))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let log = fs::read_to_string(fx.at("log")).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    let mut want: Vec<String> = (0..3)
        .flat_map(|p| (1..=10).map(move |i| format!("p{p}-{i}")))
        .collect();
    want.sort();
    assert_eq!(lines, want);
    let seq: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    for p in 0..3 {
        assert_eq!(fs::read_to_string(fx.at(&format!("p{p}"))).unwrap(), seq);
    }
}

#[test]
fn bad_names_and_limits_are_errors_not_crashes() {
    let fx = Fixture::mount();
    let long = "n".repeat(300);
    let err = fs::write(fx.at(&long), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{err}");
    // A file where a directory is needed.
    fs::write(fx.at("f"), b"x").unwrap();
    let err = fs::write(fx.at("f/g"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
    // Moving a directory into itself.
    fs::create_dir(fx.at("d")).unwrap();
    let err = fs::rename(fx.at("d"), fx.at("d/e")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    // A file too large for the namespace.
    let f = fs::OpenOptions::new().write(true).open(fx.at("f")).unwrap();
    let err = f
        .write_all_at(&vec![1u8; 1 << 20], 0)
        .and_then(|_| (0..100).try_for_each(|i| f.write_all_at(&vec![1u8; 1 << 20], i << 20)));
    assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    // The mount still works: the space comes back with the file.
    drop(f);
    fs::remove_file(fx.at("f")).unwrap();
    fs::write(fx.at("g"), b"ok").unwrap();
    assert_eq!(fs::read(fx.at("g")).unwrap(), b"ok");
}

/// The errno of a file store failure comes from the device's error code (the detail's
/// `CSX_EISDIR`, `CSX_ENOTDIR`), not from its message: here without FUSE.
#[test]
fn errno_is_the_device_code() {
    let (_dir, dev) = crate::device(16);
    let fs = csx_fs::MetalFs::new(dev);
    fs.write("/d/x", 0, b"x").unwrap();
    fs.write("/f", 0, b"x").unwrap();
    let e = fs.write("/d", 0, b"y").unwrap_err();
    assert_eq!(e.errno, libc::EISDIR, "{e}");
    let e = fs.write("/f/g", 0, b"y").unwrap_err();
    assert_eq!(e.errno, libc::ENOTDIR, "{e}");
    let e = fs.rename("/d", "/d/e").unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{e}");
}
