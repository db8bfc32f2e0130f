//! Device-to-device pulls between daemons (`CopySource::Peer`): a daemon serves its
//! peers' reads while its own pulls wait on those peers, so two (or three) daemons
//! pulling from each other at once all finish, with the bytes each asked for.

use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::CopySource;
use csx_host::Device;
use csx_server::{ListenAddr, Server, ServerConfig};

/// Far longer than any pull here takes on a loaded machine; a pull that has not
/// finished by then is stuck (the daemons wait on each other), not slow.
const STUCK: Duration = Duration::from_secs(120);

/// Bytes each daemon serves: more than one peer-read piece (1 MiB), so a pull makes
/// several round trips to its peer and overlaps the other pulls.
const FILE_BYTES: usize = 3 << 20;

struct Daemon {
    _dir: tempfile::TempDir,
    server: Server,
    uri: String,
    /// Where the daemon's file lies in its NVM namespace, and its bytes.
    nvm_offset: u64,
    bytes: Vec<u8>,
}

fn daemon(seed: u8, transfer_workers: u32) -> Daemon {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: 32 << 20,
        slm_size_bytes: 64 << 20,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        transfer_workers: Some(transfer_workers),
        ..DeviceConfig::default()
    };
    let device = DeviceRuntime::init(dir.path(), config).expect("init");
    let server = Server::start(
        device,
        ServerConfig {
            listen: vec![ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())],
            token: None,
        },
    )
    .expect("serves");
    let uri = server.uris()[0].clone();
    let bytes: Vec<u8> = (0..FILE_BYTES)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let dev = Device::open(&uri).expect("connects");
    dev.put_bytes("/pulled", &bytes).expect("writes the file");
    let ext = dev.extents("/pulled").expect("extents");
    assert_eq!(ext.extents.len(), 1, "a fresh device writes one extent");
    let e = &ext.extents[0];
    assert_eq!((e.file_offset, e.len), (0, FILE_BYTES as u64));
    Daemon {
        _dir: dir,
        server,
        uri,
        nvm_offset: e.nvm_offset,
        bytes,
    }
}

/// Every daemon `i` pulls the file of daemon `(i + 1) % n`, `pulls` times at once over
/// its own client connections, all starting together; each pull's bytes are checked.
fn pull_around(daemons: &[Daemon], pulls: usize) {
    let n = daemons.len();
    let start = Arc::new(Barrier::new(n * pulls));
    let (done, finished) = mpsc::channel();
    for (i, d) in daemons.iter().enumerate() {
        let from = &daemons[(i + 1) % n];
        for p in 0..pulls {
            let (uri, peer, offset, want) = (
                d.uri.clone(),
                from.uri.clone(),
                from.nvm_offset,
                from.bytes.clone(),
            );
            let (start, done) = (Arc::clone(&start), done.clone());
            std::thread::spawn(move || {
                let r = (|| {
                    let dev = Device::open(&uri).map_err(|e| e.to_string())?;
                    let buf = dev.alloc(FILE_BYTES as u64).map_err(|e| e.to_string())?;
                    start.wait();
                    let copied = dev
                        .copy_to_mem(
                            buf,
                            0,
                            vec![CopySource::Peer {
                                peer,
                                offset,
                                len: FILE_BYTES as u64,
                            }],
                        )
                        .map_err(|e| e.to_string())?;
                    let got = dev
                        .read_mem(buf, 0, FILE_BYTES as u64)
                        .map_err(|e| e.to_string())?;
                    dev.free(buf).map_err(|e| e.to_string())?;
                    if copied != FILE_BYTES as u64 || got != want {
                        return Err(format!("copied {copied} bytes, not the peer's file"));
                    }
                    Ok(())
                })();
                let _ = done.send((i, p, r));
            });
        }
    }
    drop(done);
    for _ in 0..n * pulls {
        match finished.recv_timeout(STUCK) {
            Ok((i, p, r)) => {
                if let Err(e) = r {
                    panic!("daemon {i}'s pull {p} failed: {e}");
                }
            }
            Err(_) => panic!(
                "the daemons' pulls from each other did not finish within {STUCK:?}: \
                 they wait on each other (peer reads queued behind the pulls)"
            ),
        }
    }
}

#[test]
fn two_daemons_pulling_from_each_other_at_once_both_finish() {
    // Leaked if a pull is stuck: closing a device waits for its workers.
    let daemons = ManuallyDrop::new([daemon(1, 1), daemon(2, 1)]);
    for _ in 0..3 {
        pull_around(&daemons[..], 1);
    }
    // More pulls at once than each daemon has transfer workers.
    pull_around(&daemons[..], 3);
    for d in ManuallyDrop::into_inner(daemons) {
        d.server.shutdown().expect("shuts down");
    }
}

#[test]
fn three_daemons_pulling_around_a_ring_finish() {
    let daemons = ManuallyDrop::new([daemon(3, 2), daemon(4, 1), daemon(5, 1)]);
    pull_around(&daemons[..], 2);
    for d in ManuallyDrop::into_inner(daemons) {
        d.server.shutdown().expect("shuts down");
    }
}
