//! `csx mount` and `csx umount` as a user runs them, and the crash of a mount process:
//! what `fsync` and `close` acknowledged survives `kill -9`.

use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::csx;

fn init_device(dir: &Path) {
    let out = csx()
        .args(["device", "init", "--nvm-size", "64MiB", "--state"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mounted(mnt: &Path) -> bool {
    let target = fs::canonicalize(mnt).unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(target.to_str().unwrap()) && l.contains(" - fuse"))
}

fn wait_mounted(mnt: &Path, child: &mut Child) {
    let start = Instant::now();
    while !mounted(mnt) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("csx mount exited with {status} before mounting (needs /dev/fuse and root or fusermount3: scripts/setup.sh)");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "mount timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Detaches a mount left behind by a killed process (the kernel answers ENOTCONN).
fn detach(mnt: &Path) {
    let out = csx()
        .args(["fs", "umount"])
        .arg("--lazy")
        .arg(mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mount_in_the_background_then_umount() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    init_device(&dev);
    let out = csx()
        .args(["fs", "mount"])
        .arg("--device")
        .arg(&dev)
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mounted(&mnt));
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/f"), b"through the mount").unwrap();
    // A second mount at the same place is refused.
    let again = csx()
        .args(["fs", "mount"])
        .arg("--device")
        .arg(&dev)
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already a csx mount"));
    let out = csx().args(["fs", "umount"]).arg(&mnt).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The mount process releases the device soon after.
    let start = Instant::now();
    loop {
        let ls = csx().env("CSX_DEVICE", &dev).args(["ls"]).output().unwrap();
        if ls.status.success() {
            assert!(String::from_utf8_lossy(&ls.stdout).contains("/d/f"));
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "device still held"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!mounted(&mnt));
    // umount of something that is not a csx mount names it.
    let out = csx().args(["fs", "umount"]).arg(&mnt).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a csx mount"));
}

#[test]
fn what_fsync_and_close_acknowledged_survives_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    init_device(&dev);
    let mut child = csx()
        .env("CSX_DEVICE", &dev)
        .args(["fs", "mount", "--foreground"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_mounted(&mnt, &mut child);
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    // fsync'd
    let mut f = fs::File::create(mnt.join("synced")).unwrap();
    f.write_all(&big).unwrap();
    f.sync_all().unwrap();
    // closed (close of a written file flushes)
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("dir/closed"), b"closed file").unwrap();
    // renamed then closed
    fs::write(mnt.join("tmp"), b"renamed").unwrap();
    fs::rename(mnt.join("tmp"), mnt.join("dir/renamed")).unwrap();
    let mut last = fs::File::create(mnt.join("last")).unwrap();
    last.write_all(b"x").unwrap();
    last.sync_all().unwrap();
    drop(last);
    child.kill().unwrap();
    child.wait().unwrap();
    detach(&mnt);
    // The device reopens with everything acknowledged.
    let get = |path: &str| {
        let local = tmp.path().join("out");
        let out = csx()
            .arg("get")
            .arg("--device")
            .arg(&dev)
            .arg(path)
            .arg(&local)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "get {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        fs::read(&local).unwrap()
    };
    assert!(
        get("/synced") == big,
        "the fsync'd file differs after the crash"
    );
    assert_eq!(get("/dir/closed"), b"closed file");
    assert_eq!(get("/dir/renamed"), b"renamed");
    assert_eq!(get("/last"), b"x");
    let ls = csx().arg("ls").arg("--device").arg(&dev).output().unwrap();
    assert!(!String::from_utf8_lossy(&ls.stdout).contains("/tmp"));
}

#[test]
fn umount_of_a_busy_mount_is_refused_unless_lazy_and_sigterm_unmounts() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    init_device(&dev);
    let mut child = csx()
        .env("CSX_DEVICE", &dev)
        .args(["fs", "mount", "--foreground"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(fs::File::create(tmp.path().join("mount.err")).unwrap())
        .spawn()
        .unwrap();
    wait_mounted(&mnt, &mut child);
    let open = fs::File::create(mnt.join("open")).unwrap();
    let out = csx().args(["fs", "umount"]).arg(&mnt).output().unwrap();
    assert!(!out.status.success(), "umount of a busy mount succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy"), "{err}");
    assert!(mounted(&mnt));
    // Written, never fsync'd, still open: SIGTERM detaches the busy mount, and the
    // process ends (flushing the device) when the file closes.
    let mut f = fs::File::create(mnt.join("unsynced")).unwrap();
    f.write_all(b"kept by a clean shutdown").unwrap();
    drop(open);
    let kill = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(kill.success());
    let start = Instant::now();
    while mounted(&mnt) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "SIGTERM did not detach"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited with a file open"
    );
    drop(f);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "mount process did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = fs::read_to_string(tmp.path().join("mount.err")).unwrap_or_default();
    assert!(status.success(), "{status}; the mount said: {log}");
    assert!(!mounted(&mnt));
    let out = csx()
        .env("CSX_DEVICE", &dev)
        .args(["get", "/unsynced"])
        .arg(tmp.path().join("u"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fs::read(tmp.path().join("u")).unwrap(),
        b"kept by a clean shutdown"
    );
}

#[test]
fn umount_then_mount_never_tears_down_the_new_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let mnt = tmp.path().join("mnt");
    let log = tmp.path().join("mount.log");
    fs::create_dir(&mnt).unwrap();
    init_device(&dev);
    let name = format!("shm://csx-it-remount-{}", std::process::id());
    let (_daemon, uris) = crate::served_exec::Daemon::start(&dev, &[&name]);
    let mount = || {
        let out = csx()
            .args(["fs", "mount"])
            .arg("--device")
            .arg(&uris[0])
            .arg(&mnt)
            .arg("--log")
            .arg(&log)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            String::from_utf8_lossy(&out.stderr),
            fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let umount = || {
        let out = csx().args(["fs", "umount"]).arg(&mnt).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for round in 0..30 {
        mount();
        umount();
        mount();
        // The old mount process is gone: nothing unmounts the new mount behind our back.
        std::thread::sleep(Duration::from_millis(150));
        assert!(mounted(&mnt), "round {round}: the new mount was torn down");
        fs::write(mnt.join("f"), format!("{round}")).unwrap();
        umount();
    }
}

#[test]
fn an_unlink_is_durable_when_rm_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    init_device(&dev);
    let mut child = csx()
        .env("CSX_DEVICE", &dev)
        .args(["fs", "mount", "--foreground"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_mounted(&mnt, &mut child);
    fs::write(mnt.join("gone"), b"deleted before the crash").unwrap();
    fs::write(mnt.join("kept"), b"kept").unwrap();
    fs::create_dir(mnt.join("empty")).unwrap();
    fs::remove_file(mnt.join("gone")).unwrap();
    fs::remove_dir(mnt.join("empty")).unwrap();
    // No fsync, no sync (which does not reach a FUSE mount): a crash right after rm.
    child.kill().unwrap();
    child.wait().unwrap();
    detach(&mnt);
    let ls = csx().arg("ls").arg("--device").arg(&dev).output().unwrap();
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(text.contains("/kept"), "{text}");
    assert!(
        !text.contains("/gone"),
        "the deleted file came back: {text}"
    );
}
