//! Mount kill campaign: writers work through a FUSE mount of a served device while the
//! mount process (and at some points the daemon too) is killed with SIGKILL at random
//! moments; after every kill each path must hold its last acknowledged state or that of
//! an operation in flight, first on the live daemon and again after the daemon was
//! killed (half the time with a simulated power loss, as in [`crate::campaign`]) and
//! restarted.
//!
//! What "acknowledged" means through a mount (docs/design/durability.md, the contract's
//! mount rows), one operation kind each:
//!
//! - `close`: `cp` of a local file onto the path (`O_TRUNC`, write, `close`; `cp` fails
//!   when `close` does), acknowledged when `cp` exits 0;
//! - `fsync`: truncate, write and `fsync` the path itself, acknowledged when `fsync`
//!   returns;
//! - `rename`: write and `fsync` a temporary, rename it over the path and `fsync` the
//!   directory;
//! - `unlink`: remove the path and `fsync` the directory.
//!
//! The writers are threads of this test (the mount is the process killed); each records
//! `start`/`startp` before and `ack` after an operation. The first two write the file in
//! place, so while one is in flight the path may hold any prefix of its new version (a
//! flush by the other writer may commit it half written): `startp` marks those.
//!
//! Time: `CSX_MOUNT_CAMPAIGN_POINTS` kill points (default 12; `make soak` runs more).
//! `CSX_CAMPAIGN_SEED` picks the random choices.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use csx_device::nvm::{apply_undo_log, UNDO_LOG_ENV};
use csx_fs::MetalFs;
use csx_host::Device;

use crate::campaign::{apply_lines, check, start_daemon, version_len, PathState, Proc, Rng};
use crate::durability::fresh_device;
use csx_testkit::bytes::seeded;

const MOUNT_URI_ENV: &str = "CSX_IT_MOUNT_URI";
const MOUNT_DIR_ENV: &str = "CSX_IT_MOUNT_DIR";
const WRITERS: u64 = 2;
const FILES_PER_WRITER: u64 = 4;

/// Run by a child process: mounts the device at `$CSX_IT_MOUNT_URI` on
/// `$CSX_IT_MOUNT_DIR`, prints `mounted`, and serves until killed.
#[test]
fn helper_mount() {
    let Ok(uri) = std::env::var(MOUNT_URI_ENV) else {
        return; // An ordinary test run: nothing to do.
    };
    let dir = PathBuf::from(std::env::var(MOUNT_DIR_ENV).unwrap());
    let dev = Device::open(&uri).expect("the mount connects");
    let fs = Arc::new(MetalFs::new(dev));
    csx_fs::mount::run(fs, &dir, || {
        println!("mounted");
        std::io::stdout().flush().unwrap();
    })
    .expect("the mount serves");
}

fn start_mount(uri: &str, dir: &Path) -> Proc {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "mountcampaign::helper_mount",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MOUNT_URI_ENV, uri)
        .env(MOUNT_DIR_ENV, dir)
        .env_remove(UNDO_LOG_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the mount process starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mounted = lines.any(|l| l.is_ok_and(|l| l.contains("mounted")));
    assert!(
        mounted,
        "the mount process did not mount {}: this test needs /dev/fuse and root (scripts/setup.sh)",
        dir.display()
    );
    Proc(child)
}

/// Detaches the mount at `dir` if one is left (a killed mount process leaves its mount
/// point dead, ENOTCONN, until it is unmounted).
fn detach(dir: &Path) {
    if csx_fs::mount::is_mounted(dir).unwrap_or(false) {
        csx_fs::mount::unmount(dir, true).expect("detach the dead mount");
    }
}

/// One operation of a writer on `path` (a path inside the mount); the line it records
/// before it, or `None` when the mount is gone.
fn mount_op(
    rng: &mut Rng,
    dir: &Path,
    k: u64,
    seed: u64,
    local: &Path,
    lines: &mut Vec<String>,
    dev_path: &str,
) -> std::io::Result<u64> {
    let path = dir.join(format!("f{k}"));
    let bytes = seeded(version_len(seed), seed);
    match rng.below(8) {
        0 => {
            lines.push(format!("start {dev_path} 0"));
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            File::open(dir)?.sync_all()?;
            Ok(0)
        }
        1..=3 => {
            lines.push(format!("startp {dev_path} {seed}"));
            fs::write(local, &bytes)?;
            let status = Command::new("cp")
                .arg(local)
                .arg(&path)
                .stderr(Stdio::null())
                .status()?;
            if !status.success() {
                return Err(std::io::Error::other(format!("cp: {status}")));
            }
            Ok(seed)
        }
        4 | 5 => {
            lines.push(format!("startp {dev_path} {seed}"));
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            Ok(seed)
        }
        _ => {
            lines.push(format!("start {dev_path} {seed}"));
            let tmp = dir.join(format!(".t{k}"));
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path)?;
            File::open(dir)?.sync_all()?;
            Ok(seed)
        }
    }
}

/// A writer thread's loop: operations on its files until one fails (the mount died);
/// returns the lines it recorded.
fn mount_writer(mnt: &Path, id: u64, base: u64, scratch: &Path) -> Vec<String> {
    let dir = mnt.join(format!("m/w{id}"));
    let local = scratch.join(format!("mw{id}"));
    let mut rng = Rng(base | 1);
    let mut lines = Vec::new();
    if fs::create_dir_all(&dir).is_err() {
        return lines;
    }
    for i in 1.. {
        let k = rng.below(FILES_PER_WRITER);
        let dev_path = format!("/m/w{id}/f{k}");
        match mount_op(&mut rng, &dir, k, base + i, &local, &mut lines, &dev_path) {
            Ok(seed) => lines.push(format!("ack {dev_path} {seed}")),
            Err(_) => return lines,
        }
    }
    lines
}

/// Kills the daemon's process if it still runs (SIGKILL, by dropping it), applies the
/// power-loss log when it ran with one, and restarts it; returns the new daemon and its
/// uri.
fn crash_and_restart(
    daemon: Option<Proc>,
    state: &Path,
    shm: bool,
    log: Option<&Path>,
    rng: &mut Rng,
) -> (Proc, String) {
    drop(daemon);
    if let Some(log) = log {
        let mut keep = Rng(rng.next() | 1);
        apply_undo_log(&state.join("nvm.img"), log, |_| keep.below(2) == 0)
            .expect("the power-loss log applies");
    }
    start_daemon(state, shm, None)
}

#[test]
fn mount_kill_campaign_keeps_every_acknowledged_byte() {
    let points = crate::campaign::env_u64("CSX_MOUNT_CAMPAIGN_POINTS", 12);
    let seed = crate::campaign::env_u64("CSX_CAMPAIGN_SEED", 0x5EED);
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let log = dir.path().join("undo.log");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut rng = Rng(seed | 1);
    let mut model: BTreeMap<String, PathState> = BTreeMap::new();
    let (mut acks, mut power_points, mut both) = (0, 0, 0);
    for point in 0..points {
        let shm = point % 2 == 1;
        let power = rng.below(2) == 0;
        let (daemon, uri) = start_daemon(&state, shm, power.then_some(log.as_path()));
        let mount = start_mount(&uri, &mnt);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (mnt, scratch) = (mnt.clone(), dir.path().to_path_buf());
                let base = (point + 1) * 1_000_000 + w * 100_000;
                std::thread::spawn(move || mount_writer(&mnt, w, base, &scratch))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150 + rng.below(850)));
        // The mount always; the daemon with it at some points (then a power loss may
        // strike too).
        let with_daemon = rng.below(3) == 0;
        drop(mount); // SIGKILL
        let mut daemon = Some(daemon);
        if with_daemon {
            both += 1;
            drop(daemon.take());
        }
        for w in writers {
            acks += apply_lines(&mut model, &w.join().unwrap());
        }
        detach(&mnt);
        if daemon.is_some() {
            // The mount died, the daemon lives: what the mount acknowledged is there.
            let dev = Device::open(&uri).unwrap();
            check(&dev, &mut model, point, false);
            drop(dev);
        }
        power_points += u64::from(power);
        let (restarted, uri) = crash_and_restart(
            daemon,
            &state,
            shm,
            power.then_some(log.as_path()),
            &mut rng,
        );
        let dev = Device::open(&uri).unwrap();
        check(&dev, &mut model, point, true);
        dev.close().unwrap();
        drop(restarted);
    }
    println!(
        "mount kill campaign: {points} kill points of the mount ({both} with the daemon), {power_points} with power loss, {acks} acknowledged operations through the mount, {} paths checked after every point: all held",
        model.len()
    );
    assert!(
        acks > 0,
        "the writers acknowledged nothing through the mount: the campaign tested nothing"
    );
}

/// A file truncated by `open(O_TRUNC)` and closed without a write is acknowledged at
/// the close like any written file: after a SIGKILL of the mount and of the daemon it is
/// empty, not its old contents (the kernel sends the truncate before the open, without a
/// file handle, so the handle the open makes must still count as written).
#[test]
fn a_truncating_open_then_close_is_durable() {
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let (daemon, uri) = start_daemon(&state, false, None);
    let mount = start_mount(&uri, &mnt);
    let path = mnt.join("t");
    fs::write(&path, seeded(100_000, 7)).unwrap();
    // `cp` of an empty file over it: open(O_TRUNC), no write, a checked close.
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    let status = Command::new("cp").arg(&empty).arg(&path).status().unwrap();
    assert!(status.success(), "cp: {status}");
    drop(mount);
    detach(&mnt);
    drop(daemon);
    let (_daemon, uri) = start_daemon(&state, false, None);
    let dev = Device::open(&uri).unwrap();
    let got = dev.read_file("/t", 0, u64::MAX).unwrap();
    assert!(
        got.is_empty(),
        "a truncate acknowledged by close was lost: /t holds {} bytes after the crash",
        got.len()
    );
}

/// The files under the directory where a mount keeps unlinked open files, on the device.
fn kept_unlinked(dev: &Device) -> Vec<String> {
    // A directory that is gone lists as nothing (or as not found).
    dev.list_files(csx_fs::unlinked::UNLINKED_DIR)
        .map(|l| l.files.into_iter().map(|f| f.path).collect())
        .unwrap_or_default()
}

/// A mount killed while it keeps a removed file for an open handle leaks nothing past
/// the next mount: the next mount of the device frees it.
#[test]
fn a_mount_killed_with_an_unlinked_file_open_leaves_nothing_after_the_next_mount() {
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let (_daemon, uri) = start_daemon(&state, false, None);
    let mount = start_mount(&uri, &mnt);
    let path = mnt.join("held");
    fs::write(&path, seeded(1 << 20, 3)).unwrap();
    let f = File::open(&path).unwrap();
    fs::remove_file(&path).unwrap();
    let dev = Device::open(&uri).unwrap();
    assert_eq!(
        kept_unlinked(&dev).len(),
        1,
        "the removed open file is kept"
    );
    // SIGKILL, and not reaped yet when the next mount starts (a zombie is not a
    // running owner).
    let mut mount = mount;
    mount.0.kill().unwrap();
    let start = std::time::Instant::now();
    while csx_fs::unlinked::is_running(mount.0.id()) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the killed mount never ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    detach(&mnt);
    drop(f);
    assert_eq!(
        kept_unlinked(&dev).len(),
        1,
        "nobody freed it: its mount died with the handle"
    );
    let _mount = start_mount(&uri, &mnt);
    assert_eq!(kept_unlinked(&dev), Vec::<String>::new());
    drop(mount);
    assert!(fs::read_dir(&mnt).unwrap().next().is_none());
    drop(_mount);
    detach(&mnt);
}
