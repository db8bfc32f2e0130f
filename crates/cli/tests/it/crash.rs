//! Crash consistency at scale: `csx device serve` killed with `kill -9` while several
//! clients write, rename, truncate and make directories over tcp, each flushing after
//! every step. After a restart every acknowledged step (its flush completed) is there,
//! byte for byte, and no file is half-written: each file holds one of the contents a
//! whole command could have left.
//!
//! Every write is one File Write command (files are at most 64 KiB), and the file store
//! applies a command under its lock, so a flush never sees half of one; the device's
//! crash rules are in `csx_device::filestore`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use csx_host::proto::EntryKind;
use csx_host::Device;

use crate::device_exec::init_device;
use crate::served_exec::Daemon;

const CLIENTS: u64 = 4;

/// The bytes client `c` writes in its step `n`: 1 byte to 64 KiB.
fn data(c: u64, n: u64) -> Vec<u8> {
    let len = 1 + ((n * 7919 + c * 131) % 65_536) as usize;
    let mut x = c * 1_000_003 + n * 7 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// What one client step leaves once it is acknowledged.
#[derive(Debug, Clone)]
enum Acked {
    File { path: String, bytes: Vec<u8> },
    Dir { path: String },
}

/// Every content the file at `path` may hold after a crash (see the module doc): the
/// whole bytes of the command that wrote it, or for a truncated file its first half.
fn allowed(path: &str) -> Vec<Vec<u8>> {
    // /r{round}/c{c}/{kind}{n}
    let parts: Vec<&str> = path.split('/').collect();
    let c: u64 = parts[2][1..].parse().unwrap();
    let name = parts[3];
    let n: u64 = name
        .trim_start_matches(|ch: char| ch.is_ascii_alphabetic())
        .parse()
        .unwrap();
    let whole = data(c, n);
    if name.starts_with('t') {
        let half = whole[..whole.len() / 2].to_vec();
        vec![whole, half]
    } else {
        vec![whole]
    }
}

/// One client: steps until the daemon goes, pushing each step once its flush completed.
fn client(uri: &str, round: u32, c: u64, acked: &Mutex<Vec<Acked>>, stop: &AtomicBool) {
    let Ok(dev) = Device::open(uri) else { return };
    let base = format!("/r{round}/c{c}");
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let bytes = data(c, n);
        let step = |dev: &Device| -> Result<Acked, csx_host::CallError> {
            Ok(match n % 4 {
                // A plain put.
                0 => {
                    let path = format!("{base}/f{n}");
                    dev.put_bytes(&path, &bytes)?;
                    Acked::File {
                        path,
                        bytes: bytes.clone(),
                    }
                }
                // Write a temporary file, then rename it into place (atomic replace).
                1 => {
                    let tmp = format!("{base}/p{n}");
                    let path = format!("{base}/r{n}");
                    dev.put_bytes(&tmp, &bytes)?;
                    dev.rename(&tmp, &path)?;
                    Acked::File {
                        path,
                        bytes: bytes.clone(),
                    }
                }
                // Write, then cut to half.
                2 => {
                    let path = format!("{base}/t{n}");
                    dev.put_bytes(&path, &bytes)?;
                    dev.truncate_file(&path, bytes.len() as u64 / 2)?;
                    Acked::File {
                        path,
                        bytes: bytes[..bytes.len() / 2].to_vec(),
                    }
                }
                // A directory made under a temporary name and renamed into place.
                _ => {
                    let tmp = format!("{base}/e{n}");
                    let path = format!("{base}/d{n}");
                    dev.mkdir(&tmp)?;
                    dev.rename(&tmp, &path)?;
                    Acked::Dir { path }
                }
            })
        };
        let Ok(done) = step(&dev) else { return };
        if dev.flush().is_err() {
            return;
        }
        acked.lock().unwrap().push(done);
        n += 1;
    }
}

/// Every file and directory under `dir`, recursively: (path, kind).
fn walk(dev: &Device, dir: &str, out: &mut Vec<(String, EntryKind)>) {
    let mut after = String::new();
    loop {
        let (entries, more) = dev.read_dir(dir, &after, 1024).unwrap();
        for e in &entries {
            let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
            out.push((path.clone(), e.kind));
            if e.kind == EntryKind::Dir {
                walk(dev, &path, out);
            }
        }
        match entries.last() {
            Some(last) if more => {
                after = match last.kind {
                    EntryKind::Dir => format!("{}/", last.name),
                    _ => last.name.clone(),
                }
            }
            _ => return,
        }
    }
}

#[test]
fn daemon_killed_under_write_load_loses_no_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("dev");
    init_device(&state, "256MiB", "16MiB");
    for round in 0..3u32 {
        let (daemon, uris) = Daemon::start(&state, &["tcp://127.0.0.1:0"]);
        let uri = uris[0].clone();
        let acked = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for c in 0..CLIENTS {
                let (uri, acked, stop) = (&uri, &acked, &stop);
                s.spawn(move || client(uri, round, c, acked, stop));
            }
            // Kill once the clients have done some work, at a different point each round.
            let target = 40 + 25 * round as usize;
            let start = Instant::now();
            while acked.lock().unwrap().len() < target {
                assert!(
                    start.elapsed() < Duration::from_secs(300),
                    "the clients made no progress"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            daemon.kill9();
            stop.store(true, Ordering::Relaxed);
        });
        let acked = acked.into_inner().unwrap();
        assert!(acked.len() >= 40);

        // The device reopened from the same directory (embedded, in this process).
        let dev = Device::open(state.to_str().unwrap()).expect("the device reopens");
        for a in &acked {
            match a {
                Acked::File { path, bytes } => assert_eq!(
                    &dev.read_file(path, 0, 1 << 20).unwrap(),
                    bytes,
                    "acknowledged {path} after kill -9 in round {round}"
                ),
                Acked::Dir { path } => {
                    assert_eq!(dev.path_stat(path).unwrap().kind, EntryKind::Dir, "{path}")
                }
            }
        }
        let mut found = Vec::new();
        walk(&dev, &format!("/r{round}"), &mut found);
        let mut files = HashMap::new();
        for (path, kind) in found {
            if kind == EntryKind::File {
                let bytes = dev.read_file(&path, 0, 1 << 20).unwrap();
                assert!(
                    allowed(&path).contains(&bytes),
                    "{path} is half-written: {} bytes",
                    bytes.len()
                );
                files.insert(path, bytes.len());
            }
        }
        let acked_files = acked
            .iter()
            .filter(|a| matches!(a, Acked::File { .. }))
            .count();
        assert!(files.len() >= acked_files);
        dev.close().unwrap();
    }
}
