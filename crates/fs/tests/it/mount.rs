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

/// A fresh device and an empty mount point that other users may walk to (the kernel
/// asks the mount only then).
fn device_for_others() -> (
    tempfile::TempDir,
    std::sync::Arc<csx_fs::MetalFs>,
    std::path::PathBuf,
) {
    let (dir, dev) = crate::device(64);
    fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let fs_ = std::sync::Arc::new(csx_fs::MetalFs::new(dev));
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    (dir, fs_, mnt)
}

/// Mounts `fs_` at `mnt`, to other users too when `allow_other`.
fn mount_with(
    fs_: &std::sync::Arc<csx_fs::MetalFs>,
    mnt: &std::path::Path,
    allow_other: bool,
) -> m::Mounted {
    let fuse = m::fuse_fs(fs_.clone()).unwrap();
    m::spawn_with(
        fuse,
        &m::fs_name(fs_),
        mnt,
        &m::MountOptions { allow_other },
    )
    .expect("mounts (needs /dev/fuse and root)")
}

#[test]
fn modes_owners_and_times_are_kept_enforced_and_survive_a_remount() {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
    let (_dir, fs_, mnt) = device_for_others();
    let open = |allow_other: bool| mount_with(&fs_, &mnt, allow_other);
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

/// Free blocks of the file system at `p` (`statvfs`).
fn free_blocks(p: &std::path::Path) -> (u64, u64) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a zeroed statvfs is valid; `c` is a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable, `c` outlives the call.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    (st.f_bfree, st.f_frsize)
}

/// Waits until the mount has freed every file it kept for open handles: the kernel
/// sends the release of a closed file after `close` returns.
fn wait_freed(fs_: &csx_fs::MetalFs) {
    let start = std::time::Instant::now();
    while !kept_unlinked(fs_).is_empty() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "the last close never freed {:?}",
            kept_unlinked(fs_)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The files the mount keeps for open handles after an unlink, seen on the device.
fn kept_unlinked(fs_: &csx_fs::MetalFs) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(owners) = fs_.list(csx_fs::unlinked::UNLINKED_DIR) else {
        return out;
    };
    for o in owners {
        let dir = format!("{}/{}", csx_fs::unlinked::UNLINKED_DIR, o.name);
        // The mount removes an owner's directory once its last kept file goes: one
        // listed a moment ago may be gone, and then holds nothing.
        match fs_.list(&dir) {
            Ok(entries) => out.extend(entries.into_iter().map(|e| e.name)),
            Err(e) if e.errno == libc::ENOENT => {}
            Err(e) => panic!("{dir}: {e:?}"),
        }
    }
    out
}

#[test]
fn a_removed_open_file_stays_readable_and_writable_until_its_last_close() {
    use std::os::unix::fs::MetadataExt as _;
    let mut fx = Fixture::mount();
    let (free0, bsize) = free_blocks(&fx.mnt());
    fs::write(fx.at("log"), vec![b'o'; 3 << 20]).unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.at("log"))
        .unwrap();
    let mut second = fs::File::open(fx.at("log")).unwrap();
    fs::remove_file(fx.at("log")).unwrap();
    // The name is gone for everyone; the handles still hold the old contents.
    assert_eq!(
        fs::metadata(fx.at("log")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(names(&fx.mnt()), Vec::<String>::new());
    let mut head = [0u8; 4];
    f.read_exact_at(&mut head, 1 << 20).unwrap();
    assert_eq!(&head, b"oooo");
    f.write_all_at(b"new!", 3 << 20).unwrap();
    let meta = f.metadata().unwrap();
    assert_eq!((meta.len(), meta.nlink()), ((3 << 20) + 4, 0));
    let mut tail = Vec::new();
    second.seek(SeekFrom::Start(3 << 20)).unwrap();
    second.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, b"new!");
    // A new file under the old name is another file.
    fs::write(fx.at("log"), b"fresh").unwrap();
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(&head, b"oooo");
    assert_eq!(fs::read(fx.at("log")).unwrap(), b"fresh");
    // Nobody reaches the kept file by a name through the mount.
    let hidden = csx_fs::unlinked::UNLINKED_DIR.trim_start_matches('/');
    assert_eq!(
        fs::metadata(fx.at(hidden)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(fs::write(fx.at(&format!("{hidden}/x")), b"x").is_err());
    assert_eq!(kept_unlinked(&fx.fs).len(), 1);
    // `df` counts it until its last close, then frees it.
    let (free1, _) = free_blocks(&fx.mnt());
    assert!(
        free0 - free1 >= (3 << 20) / bsize,
        "an open unlinked file of 3 MiB: free went from {free0} to {free1} blocks"
    );
    drop(f);
    assert_eq!(kept_unlinked(&fx.fs).len(), 1, "one handle is still open");
    drop(second);
    wait_freed(&fx.fs);
    let (free2, _) = free_blocks(&fx.mnt());
    assert!(
        free2 >= free1 + (3 << 20) / bsize,
        "closed: free went from {free1} to {free2} blocks"
    );
    fx.unmount();
}

#[test]
fn a_file_renamed_over_an_open_one_leaves_the_old_contents_to_its_handles() {
    let mut fx = Fixture::mount();
    fs::write(fx.at("config"), b"old version").unwrap();
    let f = fs::File::open(fx.at("config")).unwrap();
    fs::write(fx.at("config.new"), b"new version").unwrap();
    fs::rename(fx.at("config.new"), fx.at("config")).unwrap();
    assert_eq!(fs::read(fx.at("config")).unwrap(), b"new version");
    assert_eq!(names(&fx.mnt()), ["config"]);
    let mut old = [0u8; 11];
    f.read_exact_at(&mut old, 0).unwrap();
    assert_eq!(&old, b"old version");
    // A directory never replaces a file, open or not.
    fs::create_dir(fx.at("d")).unwrap();
    let e = fs::rename(fx.at("d"), fx.at("config")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
    assert_eq!(fs::read(fx.at("config")).unwrap(), b"new version");
    drop(f);
    wait_freed(&fx.fs);
    fx.unmount();
}

#[test]
fn a_file_removed_while_it_is_written_takes_every_write_until_closed() {
    let mut fx = Fixture::mount();
    let mut w = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(fx.at("out"))
        .unwrap();
    let chunk = vec![b'w'; 256 << 10];
    let writer = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = s.spawn(move || {
            for i in 0..16 {
                w.write_all(&chunk).unwrap();
                if i == 3 {
                    tx.send(()).unwrap();
                }
            }
            w.sync_all().unwrap();
            w
        });
        rx.recv().unwrap();
        fs::remove_file(fx.at("out")).unwrap();
        h.join().unwrap()
    });
    let mut all = Vec::new();
    (&writer).seek(SeekFrom::Start(0)).unwrap();
    (&writer).read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), 16 * (256 << 10));
    assert!(all.iter().all(|&b| b == b'w'));
    drop(writer);
    assert_eq!(names(&fx.mnt()), Vec::<String>::new());
    wait_freed(&fx.fs);
    fx.unmount();
}

/// A leftover of a mount that ran on this host in another boot (one that will never
/// come back for it).
fn dead_owner_dir() -> String {
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!(
        "{}/zzzzzzzz.7.7.{}",
        csx_fs::unlinked::UNLINKED_DIR,
        host.trim().replace('/', "_")
    )
}

#[test]
fn a_mount_puts_back_or_frees_what_a_killed_mount_left() {
    let (dir, dev) = crate::device(64);
    let fs_ = std::sync::Arc::new(csx_fs::MetalFs::new(dev));
    let dead = dead_owner_dir();
    // An unlinked file whose handles died with their mount.
    fs_.write(&format!("{dead}/12"), 0, &[1u8; 8192]).unwrap();
    // A rename over an open file killed after the old file moved aside, and one killed
    // after the new file moved in.
    fs_.write(&format!("{dead}/r13"), 0, b"the old a").unwrap();
    fs_.write(&format!("{dead}/r13.to"), 0, b"/a").unwrap();
    fs_.write("/b", 0, b"the new b").unwrap();
    fs_.write(&format!("{dead}/r14"), 0, b"the old b").unwrap();
    fs_.write(&format!("{dead}/r14.to"), 0, b"/b").unwrap();
    // A live owner's files are not touched.
    let live = csx_fs::unlinked::Owner::current().hidden(99);
    fs_.write(&live, 0, b"mine").unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mount = m::spawn(fs_.clone(), &mnt).expect("mounts (needs /dev/fuse and root)");
    assert_eq!(fs::read(mnt.join("a")).unwrap(), b"the old a");
    assert_eq!(fs::read(mnt.join("b")).unwrap(), b"the new b");
    assert_eq!(names(&mnt), ["a", "b"]);
    assert_eq!(kept_unlinked(&fs_), ["99"]);
    let owners: Vec<String> = fs_
        .list(csx_fs::unlinked::UNLINKED_DIR)
        .unwrap()
        .into_iter()
        .map(|e| format!("{}/{}", csx_fs::unlinked::UNLINKED_DIR, e.name))
        .collect();
    assert!(!owners.contains(&dead), "{owners:?}");
    mount.unmount().unwrap();
}

/// Runs `program` with `args` in `dir`; its stdout. Fails the test with its stderr when it
/// fails, or naming the missing tool when it cannot start.
fn run_in(dir: &std::path::Path, program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}): install it (scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What sqlite does on the mount: a table, 10,000 rows in one transaction, closed,
/// opened again, counted and checked.
const SQLITE_SESSION: &str = r#"
import sqlite3, sys
db = sys.argv[1]
c = sqlite3.connect(db)
c.execute("create table t (id integer primary key, name text, v real)")
with c:
    c.executemany("insert into t (name, v) values (?, ?)",
                  ((f"row {i}", i * 0.5) for i in range(10000)))
c.close()
c = sqlite3.connect(db)
print(c.execute("select count(*), sum(v) from t").fetchone())
print(c.execute("pragma integrity_check").fetchone()[0])
c.close()
"#;

/// Writes through a shared map of a 3-page file and `msync`s it.
const MMAP_WRITE: &str = r#"
import mmap, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[0:5] = b"HELLO"
    m[8190:8196] = b"across"
    m.flush()
    m.close()
"#;

#[test]
fn git_sqlite_and_mmap_work_on_the_mount() {
    let mut fx = Fixture::mount();
    // git: init, add, commit, log.
    let repo = fx.at("repo");
    fs::create_dir(&repo).unwrap();
    fs::write(repo.join("README"), b"hello from the mount\n").unwrap();
    fs::create_dir(repo.join("src")).unwrap();
    fs::write(repo.join("src/main.c"), b"int main(void) { return 0; }\n").unwrap();
    let git = |args: &[&str]| run_in(&repo, "git", args);
    let commit = |args: &[&str]| {
        let who = [
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
        ];
        git(&[&who[..], args].concat())
    };
    git(&["init", "-q"]);
    git(&["add", "README", "src"]);
    commit(&["-m", "first"]);
    fs::write(repo.join("README"), b"changed\n").unwrap();
    commit(&["-am", "second"]);
    assert_eq!(git(&["log", "--format=%s"]), "second\nfirst\n");
    assert_eq!(
        git(&["show", "HEAD~1:src/main.c"]),
        "int main(void) { return 0; }\n"
    );
    assert_eq!(git(&["status", "--porcelain"]), "");
    git(&["fsck", "--strict"]);
    // sqlite through python3's module.
    let out = run_in(&fx.mnt(), "python3", &["-c", SQLITE_SESSION, "t.db"]);
    assert_eq!(out, "(10000, 24997500.0)\nok\n");
    // mmap: write through the map, msync, then read it back after a remount.
    fs::write(fx.at("mapped"), vec![b'.'; 3 * 4096]).unwrap();
    run_in(&fx.mnt(), "python3", &["-c", MMAP_WRITE, "mapped"]);
    let fs_ = fx.fs.clone();
    fx.unmount();
    fx.mount = Some(m::spawn(fs_, &fx.mnt()).expect("mounts again"));
    let back = fs::read(fx.at("mapped")).unwrap();
    assert_eq!(back.len(), 3 * 4096);
    assert_eq!(&back[..6], b"HELLO.");
    assert_eq!(&back[8189..8197], b".across.");
    // The database and the repository are whole after the remount too.
    let check = "import sqlite3; c = sqlite3.connect('t.db'); print(c.execute('select count(*) from t').fetchone()[0], c.execute('pragma integrity_check').fetchone()[0])";
    assert_eq!(run_in(&fx.mnt(), "python3", &["-c", check]), "10000 ok\n");
    git(&["fsck", "--strict"]);
    fx.unmount();
}

#[test]
fn another_user_cannot_reach_a_removed_open_file() {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::os::unix::io::AsRawFd as _;
    let (_dir, fs_, mnt) = device_for_others();
    let mount = mount_with(&fs_, &mnt, true);
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(mnt.join("secret"))
        .unwrap();
    f.write_all(b"readable while it had a name").unwrap();
    fs::remove_file(mnt.join("secret")).unwrap();
    let kept = kept_unlinked(&fs_);
    assert_eq!(kept.len(), 1);
    let owner_dir = fs_.list(csx_fs::unlinked::UNLINKED_DIR).unwrap()[0]
        .name
        .clone();
    let hidden = mnt
        .join(csx_fs::unlinked::UNLINKED_DIR.trim_start_matches('/'))
        .join(&owner_dir)
        .join(&kept[0]);
    let p = |x: &std::path::Path| x.to_str().unwrap().to_owned();
    for args in [
        vec!["cat".to_owned(), p(&hidden)],
        vec![
            "ls".to_owned(),
            "-a".to_owned(),
            p(hidden.parent().unwrap()),
        ],
        vec![
            "cat".to_owned(),
            format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()),
        ],
        vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!("echo x > {}", p(&hidden)),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = as_nobody(&args);
        assert!(
            !out.status.success() && out.stdout.is_empty(),
            "nobody ran {args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // Root, by name through the mount, does not reach it either.
    assert!(fs::read(&hidden).is_err());
    let mut back = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "readable while it had a name");
    drop(f);
    wait_freed(&fs_);
    mount.unmount().unwrap();
}
