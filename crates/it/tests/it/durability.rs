//! Durability under kill -9: what a put, get and delete acknowledge survives a SIGKILL of
//! the daemon, and a put or get killed mid-copy leaves the old file whole.
//!
//! Method: the daemon and the clients that get killed are child processes (this test
//! binary re-run as a helper, selected by an environment variable), so a SIGKILL stops
//! them with nothing flushed or cleaned up, as a crash would. The device's state
//! directory outlives them; a new daemon is started on it and the files are compared
//! byte for byte with what was written.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use csx_host::proto::limits::{FILE_IO_SIZE_MAX, PARTIAL_DIR};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::{CallError, Device};
use csx_server::{Server, ServerConfig};

use crate::served::{listen_addr, Kind};
use csx_testkit::bytes::seeded;

pub(crate) const DAEMON_STATE_ENV: &str = "CSX_IT_DAEMON_STATE";
pub(crate) const DAEMON_KIND_ENV: &str = "CSX_IT_DAEMON_KIND";
const CLIENT_URI_ENV: &str = "CSX_IT_CLIENT_URI";
const CLIENT_ACTION_ENV: &str = "CSX_IT_CLIENT_ACTION";
const CLIENT_LOCAL_ENV: &str = "CSX_IT_CLIENT_LOCAL";
const CLIENT_PATH_ENV: &str = "CSX_IT_CLIENT_PATH";

/// The device's namespace: room for a file of several chunks, its replacement, and the
/// temporary a replacement is staged in.
const NVM: u64 = 256 << 20;

/// A fresh device in a temporary directory (the device is `dir/dev`).
pub(crate) fn fresh_device() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: NVM,
        slm_size_bytes: crate::SLM_SIZE,
        state_size_bytes: crate::STATE_SIZE,
        engines: Some(crate::ENGINES),
        ..DeviceConfig::default()
    };
    Device::init(&dir.path().join("dev"), config)
        .expect("init")
        .close()
        .expect("close after init");
    dir
}

/// Run by a child process: serves the device in `$CSX_IT_DAEMON_STATE` and prints its
/// URI, then serves until it is killed (or ten minutes pass).
#[test]
fn helper_daemon() {
    let Ok(state) = std::env::var(DAEMON_STATE_ENV) else {
        return; // An ordinary test run: nothing to do.
    };
    let kind = match std::env::var(DAEMON_KIND_ENV).as_deref() {
        Ok("shm") => Kind::Shm,
        _ => Kind::Tcp,
    };
    let server = Server::open(
        Path::new(&state),
        ServerConfig {
            listen: vec![listen_addr(kind)],
            token: None,
        },
    )
    .expect("the helper daemon serves");
    println!("uri {}", server.uris()[0]);
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(600));
    drop(server);
}

/// Run by a child process: puts (`put`) or gets (`get`) one file, printing `ready` after
/// its first chunk and then pausing between chunks, so that a SIGKILL lands mid-copy.
#[test]
fn helper_slow_client() {
    let Ok(uri) = std::env::var(CLIENT_URI_ENV) else {
        return;
    };
    let action = std::env::var(CLIENT_ACTION_ENV).unwrap();
    let local = PathBuf::from(std::env::var(CLIENT_LOCAL_ENV).unwrap());
    let path = std::env::var(CLIENT_PATH_ENV).unwrap();
    let dev = Device::open(&uri).expect("the helper client connects");
    let mut said = false;
    let mut slow = |_| {
        if !said {
            println!("ready");
            std::io::stdout().flush().unwrap();
            said = true;
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    match action.as_str() {
        "put" => {
            dev.put_file(&local, &path, &mut slow).unwrap();
        }
        _ => {
            dev.get_file(&path, &local, &mut slow).unwrap();
        }
    }
    println!("done");
}

/// A daemon in a child process, on the device in `state`.
pub(crate) struct Daemon {
    child: Child,
    pub(crate) uri: String,
}

impl Daemon {
    pub(crate) fn start(state: &Path, kind: Kind) -> Daemon {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "durability::helper_daemon",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DAEMON_STATE_ENV, state)
            .env(
                DAEMON_KIND_ENV,
                match kind {
                    Kind::Shm => "shm",
                    Kind::Tcp => "tcp",
                },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the daemon starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let uri = lines
            // The harness may print "test NAME ... " on the same line first.
            .find_map(|l| Some(l.ok()?.split_once("uri ")?.1.trim().to_owned()))
            .expect("the daemon prints its uri");
        Daemon { child, uri }
    }

    /// SIGKILL: nothing flushed, nothing closed.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a slow client child and waits until it has moved its first chunk.
fn slow_client(
    uri: &str,
    action: &str,
    local: &Path,
    path: &str,
) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "durability::helper_slow_client",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CLIENT_URI_ENV, uri)
        .env(CLIENT_ACTION_ENV, action)
        .env(CLIENT_LOCAL_ENV, local)
        .env(CLIENT_PATH_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the client starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("ready"))),
        "the client moved its first chunk"
    );
    (child, lines)
}

fn read_all(dev: &Device, path: &str) -> Vec<u8> {
    dev.read_file(path, 0, u64::MAX).unwrap()
}

/// No temporary of a put is left visible on the device.
fn assert_no_partials(dev: &Device) {
    let left = dev.list_files(PARTIAL_DIR).unwrap().files;
    assert!(left.is_empty(), "temporaries left behind: {left:?}");
}

/// An acknowledged put survives a SIGKILL of the daemon right after it returns.
fn put_survives_daemon_kill(kind: Kind) {
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let small = seeded(1 << 20, 7);
    let big = seeded((FILE_IO_SIZE_MAX * 2 + 12345) as usize, 8);
    let local_small = dir.path().join("small");
    let local_big = dir.path().join("big");
    std::fs::write(&local_small, &small).unwrap();
    std::fs::write(&local_big, &big).unwrap();

    let daemon = Daemon::start(&state, kind);
    let dev = Device::open(&daemon.uri).unwrap();
    dev.put_file(&local_small, "/kill/small", &mut |_| {})
        .unwrap();
    dev.put_file(&local_big, "/kill/big", &mut |_| {}).unwrap();
    // Replacing a file is as durable as creating one.
    dev.put_file(&local_big, "/kill/small", &mut |_| {})
        .unwrap();
    dev.put_file(&local_small, "/kill/big", &mut |_| {})
        .unwrap();
    drop(dev);
    daemon.kill();

    let daemon = Daemon::start(&state, kind);
    let dev = Device::open(&daemon.uri).unwrap();
    assert!(
        read_all(&dev, "/kill/small") == big,
        "replaced file survives"
    );
    assert!(
        read_all(&dev, "/kill/big") == small,
        "replaced file survives"
    );
    assert_no_partials(&dev);
    dev.close().unwrap();
    daemon.kill();
}

#[test]
fn put_survives_daemon_kill_tcp() {
    put_survives_daemon_kill(Kind::Tcp);
}

#[test]
fn put_survives_daemon_kill_shm() {
    put_survives_daemon_kill(Kind::Shm);
}

/// A put killed mid-copy over an existing file leaves the old file, byte-identical; so
/// does a daemon killed mid-put; the temporary is gone once the daemon restarts.
#[test]
fn killed_put_leaves_the_old_file() {
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let old = seeded((FILE_IO_SIZE_MAX * 3) as usize, 1);
    let new = seeded((FILE_IO_SIZE_MAX * 3 + 999) as usize, 2);
    let local_old = dir.path().join("old");
    let local_new = dir.path().join("new");
    std::fs::write(&local_old, &old).unwrap();
    std::fs::write(&local_new, &new).unwrap();

    let daemon = Daemon::start(&state, Kind::Tcp);
    let dev = Device::open(&daemon.uri).unwrap();
    dev.put_file(&local_old, "/victim", &mut |_| {}).unwrap();

    // 1. The client dies mid-copy; the daemon lives on.
    let (mut client, _) = slow_client(&daemon.uri, "put", &local_new, "/victim");
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(read_all(&dev, "/victim") == old, "the old file is intact");
    assert_eq!(dev.stat("/victim").unwrap().size_bytes, old.len() as u64);
    // Another client's flush commits whatever the killed put had staged...
    dev.flush().unwrap();

    // 2. ...and then the daemon dies mid-put too.
    let (mut client, _) = slow_client(&daemon.uri, "put", &local_new, "/victim");
    drop(dev);
    daemon.kill();
    client.kill().unwrap();
    client.wait().unwrap();

    let daemon = Daemon::start(&state, Kind::Tcp);
    let dev = Device::open(&daemon.uri).unwrap();
    assert!(read_all(&dev, "/victim") == old, "the old file survives");
    // Both staged temporaries were removed when the store opened.
    assert_no_partials(&dev);
    let listed: Vec<String> = dev
        .list_files("/")
        .unwrap()
        .files
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(listed, ["/victim"]);
    // The space they held is free again: a put of the new file still fits twice over.
    dev.put_file(&local_new, "/victim", &mut |_| {}).unwrap();
    dev.put_file(&local_new, "/victim2", &mut |_| {}).unwrap();
    assert!(read_all(&dev, "/victim") == new);
    dev.close().unwrap();
    daemon.kill();
}

/// A get killed mid-copy leaves the old local file whole (and no file under its name
/// when there was none).
#[test]
fn killed_get_leaves_the_old_local_file() {
    let dir = fresh_device();
    let state = dir.path().join("dev");
    let data = seeded((FILE_IO_SIZE_MAX * 3) as usize, 3);
    let local_src = dir.path().join("src");
    std::fs::write(&local_src, &data).unwrap();
    let daemon = Daemon::start(&state, Kind::Tcp);
    let dev = Device::open(&daemon.uri).unwrap();
    dev.put_file(&local_src, "/f", &mut |_| {}).unwrap();

    let target = dir.path().join("copy");
    std::fs::write(&target, b"the old local file").unwrap();
    let (mut client, _) = slow_client(&daemon.uri, "get", &target, "/f");
    client.kill().unwrap();
    client.wait().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"the old local file");

    let fresh = dir.path().join("fresh");
    let (mut client, _) = slow_client(&daemon.uri, "get", &fresh, "/f");
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(!fresh.exists(), "no partial file under the final name");

    // A finished get replaces the file and leaves no temporary.
    dev.get_file("/f", &target, &mut |_| {}).unwrap();
    assert!(std::fs::read(&target).unwrap() == data);
    dev.close().unwrap();
    daemon.kill();
}

/// A get to something that is not a regular file (here the null device; a pipe or
/// /dev/stdout alike) streams into it and does not fail on a sync it cannot do.
#[test]
fn get_into_a_character_device() {
    let dir = fresh_device();
    let dev = Device::open(dir.path().join("dev").to_str().unwrap()).unwrap();
    dev.put_bytes("/f", &seeded(100_000, 4)).unwrap();
    let n = dev
        .get_file("/f", Path::new("/dev/null"), &mut |_| {})
        .unwrap();
    assert_eq!(n, 100_000);
    let mut out = Vec::new();
    let n = dev
        .get_writer("/f", &mut out, Path::new("a buffer"), &mut |_| {})
        .unwrap();
    assert_eq!(n, 100_000);
    assert!(out == seeded(100_000, 4));
    dev.close().unwrap();
}

/// A put whose target is a directory fails before copying, and leaves nothing behind;
/// a put that fails for want of space leaves the old file and no temporary.
#[test]
fn failed_puts_leave_the_old_state() {
    let dir = fresh_device();
    let dev = Device::open(dir.path().join("dev").to_str().unwrap()).unwrap();
    dev.put_bytes("/d/inner", b"x").unwrap();
    let local = dir.path().join("local");
    std::fs::write(&local, b"data").unwrap();
    let err = dev.put_file(&local, "/d", &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, csx_host::FileTransferError::IsADirectory { ref path } if path == "/d"),
        "{err}"
    );
    assert!(err.to_string().contains("/d is a directory"), "{err}");

    // Fill most of the device, then put a file larger than what is left over it.
    let old = seeded(100 << 20, 5);
    std::fs::write(&local, &old).unwrap();
    dev.put_file(&local, "/big", &mut |_| {}).unwrap();
    let too_big = seeded(160 << 20, 6);
    std::fs::write(&local, &too_big).unwrap();
    let err = dev.put_file(&local, "/big", &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            err,
            csx_host::FileTransferError::Call(CallError::NoSpace(_))
        ),
        "{err}"
    );
    assert!(read_all(&dev, "/big") == old, "the old file is intact");
    assert_no_partials(&dev);
    assert_eq!(read_all(&dev, "/d/inner"), b"x");
    dev.close().unwrap();
}
