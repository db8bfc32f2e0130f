//! File operations through a real FUSE mount.

use std::fs;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use csx_fs::mount as m;

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

/// Runs `args` as uid and gid 65534 (nobody), with no supplementary groups.
fn as_nobody(args: &[&str]) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(args)
        .output()
        .expect("setpriv runs (util-linux)")
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn modes_owners_and_times_are_kept_enforced_and_survive_a_remount() {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
    let (dir, dev) = crate::device(64);
    // Other users must be able to walk to the mount point for the kernel to ask the mount.
    fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let fs_ = std::sync::Arc::new(csx_fs::MetalFs::new(dev));
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let open = |allow_other: bool| {
        let fuse = m::fuse_fs(fs_.clone()).unwrap();
        m::spawn_with(
            fuse,
            &m::fs_name(&fs_),
            &mnt,
            &m::MountOptions { allow_other },
        )
        .expect("mounts (needs /dev/fuse and root)")
    };
    let mount = open(true);
    // A create mode and a mkdir mode, less the umask the caller passes.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(mnt.join("private"))
        .unwrap();
    f.write_all(b"secret").unwrap();
    drop(f);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(mnt.join("closed"))
        .unwrap();
    fs::write(mnt.join("closed/inner"), b"inner").unwrap();
    fs::write(mnt.join("public"), b"public").unwrap();
    assert_eq!(mode_of(&mnt.join("private")), 0o600);
    assert_eq!(mode_of(&mnt.join("closed")), 0o700);
    assert_eq!(mode_of(&mnt.join("public")), 0o644);
    // The kernel enforces them: nobody reads the public file, not the private one.
    let p = |name: &str| mnt.join(name).to_str().unwrap().to_owned();
    let out = as_nobody(&["cat", &p("public")]);
    assert_eq!(
        out.stdout,
        b"public",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_nobody(&["cat", &p("private")]);
    assert!(
        !out.status.success() && out.stdout.is_empty(),
        "nobody read a 0600 file"
    );
    assert!(!as_nobody(&["cat", &p("closed/inner")]).status.success());
    // Only the owner (or root) changes a mode; only root gives a file away.
    assert!(!as_nobody(&["chmod", "666", &p("private")]).status.success());
    assert!(
        !as_nobody(&["touch", &p("new")]).status.success(),
        "nobody wrote into a 0755 root"
    );
    assert_eq!(mode_of(&mnt.join("private")), 0o600);
    // chmod, chown and utimes, then a remount over the same device.
    fs::set_permissions(
        mnt.join("public"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    std::os::unix::fs::chown(mnt.join("private"), Some(65534), Some(65534)).unwrap();
    let touch = std::process::Command::new("touch")
        .args(["-d", "2001-01-01 00:00:00 UTC"])
        .arg(mnt.join("closed/inner"))
        .status()
        .unwrap();
    assert!(touch.success());
    mount.unmount().unwrap();
    let mount = open(true);
    assert_eq!(mode_of(&mnt.join("public")), 0o640);
    let private = fs::metadata(mnt.join("private")).unwrap();
    assert_eq!(
        (private.uid(), private.gid(), private.mode() & 0o7777),
        (65534, 65534, 0o600)
    );
    assert_eq!(
        fs::metadata(mnt.join("closed/inner")).unwrap().mtime(),
        978_307_200
    );
    // Now nobody owns it and reads it; the others still do not.
    assert_eq!(as_nobody(&["cat", &p("private")]).stdout, b"secret");
    assert!(!as_nobody(&["cat", &p("public")]).status.success());
    // A rename carries the attributes; an unlink drops them.
    fs::rename(mnt.join("closed"), mnt.join("moved")).unwrap();
    assert_eq!(mode_of(&mnt.join("moved")), 0o700);
    fs::remove_file(mnt.join("private")).unwrap();
    fs::write(mnt.join("private"), b"again").unwrap();
    assert_eq!(fs::metadata(mnt.join("private")).unwrap().uid(), 0);
    // The bookkeeping file is out of reach through the mount.
    assert!(
        !names(&mnt).iter().any(|n| n.starts_with(".csx")),
        "{:?}",
        names(&mnt)
    );
    assert!(fs::read(mnt.join(csx_fs::attrs::ATTRS_FILE.trim_start_matches('/'))).is_err());
    assert!(fs::write(
        mnt.join(csx_fs::attrs::ATTRS_FILE.trim_start_matches('/')),
        b"x"
    )
    .is_err());
    mount.unmount().unwrap();
    // Without allow_other, no other user reaches the mount at all.
    let mount = open(false);
    assert!(!as_nobody(&["ls", mnt.to_str().unwrap()]).status.success());
    mount.unmount().unwrap();
}

#[test]
fn statfs_counts_the_files_and_no_file_grows_past_the_device() {
    let mut fx = Fixture::mount();
    let free = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a zeroed statvfs is valid; `c` is a NUL-terminated path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable, `c` outlives the call.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        (st.f_blocks, st.f_bfree, st.f_frsize)
    };
    let (blocks, free0, bsize) = free(&fx.mnt());
    assert_eq!(blocks * bsize, 64 << 20);
    fs::write(fx.at("three"), vec![7u8; 3 << 20]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (_, free1, _) = free(&fx.mnt());
    assert!(
        free0 - free1 >= (3 << 20) / bsize,
        "3 MiB written, free went from {free0} to {free1} blocks"
    );
    let f = fs::OpenOptions::new()
        .write(true)
        .open(fx.at("three"))
        .unwrap();
    let e = f.set_len(1 << 40).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    let e = f.write_at(b"x", 64 << 20).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert_eq!(fs::metadata(fx.at("three")).unwrap().len(), 3 << 20);
    drop(f);
    fx.unmount();
}
