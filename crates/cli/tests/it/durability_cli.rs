//! What `csx put`, `rm`, `sync` and `get` acknowledge survives `kill -9` of the daemon,
//! on tcp and shm and for arrays of served members; a put killed at a random point
//! leaves the old file or the new one, byte-identical. Standard input and output as
//! `-`, and a directory given to `rm`, `stat` or `put`.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::device_exec::init_device;
use crate::served_exec::Daemon;
use crate::{csx, run_with_stdin};

fn on(uri: &str) -> Command {
    let mut cmd = csx();
    cmd.env("CSX_DEVICE", uri);
    cmd
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "csx failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The device file `path` read back with `csx get PATH -`, or `None` if it is missing.
fn device_bytes(uri: &str, path: &str) -> Option<Vec<u8>> {
    let out = on(uri).args(["get", path, "-"]).output().unwrap();
    if out.status.success() {
        Some(out.stdout)
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no such file") || err.contains("not found"),
            "{err}"
        );
        None
    }
}

/// `csx put` and `csx rm` on a served device are durable when they return: a SIGKILL of
/// the daemon right after loses neither. `csx sync` makes a write by other means durable.
fn put_rm_sync_survive_kill9(listen: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("dev");
    init_device(&state, "128MiB", "16MiB");
    let small = pattern(1 << 20, 1);
    let big = pattern((40 << 20) + 7, 2);
    let (f_small, f_big) = (tmp.path().join("small"), tmp.path().join("big"));
    std::fs::write(&f_small, &small).unwrap();
    std::fs::write(&f_big, &big).unwrap();

    let (daemon, uris) = Daemon::start(&state, &[listen]);
    let uri = &uris[0];
    ok(on(uri)
        .args(["put"])
        .arg(&f_small)
        .arg("/k/small")
        .output()
        .unwrap());
    ok(on(uri)
        .args(["put"])
        .arg(&f_big)
        .arg("/k/big")
        .output()
        .unwrap());
    ok(on(uri)
        .args(["put"])
        .arg(&f_small)
        .arg("/k/gone")
        .output()
        .unwrap());
    ok(on(uri).args(["rm", "/k/gone"]).output().unwrap());
    // A write through the host API, not flushed by itself; `csx sync` makes it durable.
    let dev = csx_host::Device::open(uri).unwrap();
    dev.write_file("/k/written", 0, b"written, then synced")
        .unwrap();
    dev.close().unwrap();
    let out = ok(on(uri).args(["sync", "--json"]).output().unwrap());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["device"], uri.as_str(), "{v}");
    daemon.kill9();

    let (daemon, uris) = Daemon::start(&state, &[listen]);
    let uri = &uris[0];
    assert!(device_bytes(uri, "/k/small").unwrap() == small);
    assert!(device_bytes(uri, "/k/big").unwrap() == big);
    assert_eq!(device_bytes(uri, "/k/gone"), None, "rm stays done");
    assert_eq!(
        device_bytes(uri, "/k/written").unwrap(),
        b"written, then synced"
    );
    daemon.kill9();
}

#[test]
fn put_rm_sync_survive_kill9_tcp() {
    put_rm_sync_survive_kill9("tcp://127.0.0.1:0");
}

#[test]
fn put_rm_sync_survive_kill9_shm() {
    put_rm_sync_survive_kill9(&format!("shm://csx-it-dur-{}", std::process::id()));
}

/// `put -` reads standard input; `get FILE -` writes standard output (and only the
/// data); `get FILE /dev/stdout` into a pipe works; a failed get leaves the old local
/// file; `rm` and `stat` of a directory say it is one; `put` onto a directory refuses.
#[test]
fn stdio_and_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("dev");
    init_device(&state, "64MiB", "16MiB");
    let dev = state.to_str().unwrap();
    let data = pattern(3 << 20, 3);
    let out = run_with_stdin(
        {
            let mut c = on(dev);
            c.args(["put", "-", "/s/in"]);
            c
        },
        &data,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = ok(on(dev).args(["get", "/s/in", "-"]).output().unwrap());
    assert!(got.stdout == data, "get - writes exactly the file");
    let piped = ok(on(dev)
        .args(["get", "/s/in", "/dev/stdout"])
        .stdout(Stdio::piped())
        .output()
        .unwrap());
    assert!(piped.stdout == data, "only the data goes to the stream");

    let local = tmp.path().join("keep");
    std::fs::write(&local, b"old").unwrap();
    let failed = on(dev)
        .args(["get", "/s/missing"])
        .arg(&local)
        .output()
        .unwrap();
    assert!(!failed.status.success());
    assert_eq!(std::fs::read(&local).unwrap(), b"old");
    let partials: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("csx-partial"))
        .collect();
    assert!(partials.is_empty(), "{partials:?}");

    let rm_dir = on(dev).args(["rm", "/s"]).output().unwrap();
    assert!(!rm_dir.status.success());
    let err = String::from_utf8_lossy(&rm_dir.stderr);
    assert!(err.contains("/s: it is a directory"), "{err}");
    let st = ok(on(dev).args(["stat", "/s"]).output().unwrap());
    assert!(String::from_utf8_lossy(&st.stdout).contains("directory"));
    let onto = on(dev)
        .args(["put"])
        .arg(&local)
        .arg("/s")
        .output()
        .unwrap();
    assert!(!onto.status.success());
    let err = String::from_utf8_lossy(&onto.stderr);
    assert!(err.contains("/s is a directory"), "{err}");
    assert!(device_bytes(dev, "/s/in").unwrap() == data);
}

/// An array put over served members flushes every member before the catalog names the
/// file: a member killed right after keeps its piece. And `rm` of a file whose piece a
/// member lost removes it with no error.
#[test]
fn array_put_survives_member_kill9() {
    let tmp = tempfile::tempdir().unwrap();
    let mut daemons = Vec::new();
    let mut uris = Vec::new();
    for i in 0..3 {
        let state = tmp.path().join(format!("m{i}"));
        init_device(&state, "64MiB", "16MiB");
        let (d, u) = Daemon::start(&state, &["tcp://127.0.0.1:0"]);
        daemons.push((d, state));
        uris.push(u[0].clone());
    }
    let arr = tmp.path().join("arr");
    let mut init = csx();
    init.args(["array", "init", "--state"]).arg(&arr);
    for u in &uris {
        init.args(["--member", u]);
    }
    ok(init.output().unwrap());
    let array = format!("array:{}", arr.display());
    let data = pattern(3 << 20, 4);
    let local = tmp.path().join("n.bin");
    std::fs::write(&local, &data).unwrap();
    ok(on(&array)
        .args(["put"])
        .arg(&local)
        .args(["/nums", "--stripe", "64KiB"])
        .output()
        .unwrap());
    // Kill member 2 and serve it again on the same port (the array names its URI).
    let (d, state) = daemons.pop().unwrap();
    d.kill9();
    let listen = uris[2].clone();
    let (d, _) = Daemon::start(&state, &[&listen]);
    daemons.push((d, state));
    let back = tmp.path().join("back");
    ok(on(&array)
        .args(["get", "/nums"])
        .arg(&back)
        .output()
        .unwrap());
    assert!(
        std::fs::read(&back).unwrap() == data,
        "every piece survived"
    );

    // A member that lost its piece (deleted behind the array's back): rm still works,
    // quietly.
    let dev = csx_host::Device::open(&uris[1]).unwrap();
    let pieces = dev.list_files("/csx-array").unwrap().files;
    assert_eq!(pieces.len(), 1, "{pieces:?}");
    dev.delete_file(&pieces[0].path).unwrap();
    dev.close().unwrap();
    let rm = ok(on(&array).args(["rm", "/nums"]).output().unwrap());
    assert!(
        rm.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    let ls = ok(on(&array).args(["ls", "--json"]).output().unwrap());
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 0, "{v}");
    for u in &uris {
        let dev = csx_host::Device::open(u).unwrap();
        assert!(dev.list_files("/csx-array").unwrap().files.is_empty());
        dev.close().unwrap();
    }
    for (d, _) in daemons {
        d.kill9();
    }
}

/// A bounded kill -9 campaign: `csx put` replacing one file, killed at a random moment,
/// and sometimes the daemon killed with it. After each round the file is byte-identical
/// to the last acknowledged put or to the put in flight, never anything else, and no
/// temporary survives a restart.
#[test]
fn kill9_campaign_put() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("dev");
    init_device(&state, "256MiB", "16MiB");
    let versions: Vec<Vec<u8>> = (0..4)
        .map(|v| pattern((5 << 20) + v * 4099, 100 + v as u64))
        .collect();
    let locals: Vec<_> = versions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let p = tmp.path().join(format!("v{i}"));
            std::fs::write(&p, d).unwrap();
            p
        })
        .collect();
    let (first, uris) = Daemon::start(&state, &["tcp://127.0.0.1:0"]);
    let mut daemon = Some(first);
    let mut uri = uris[0].clone();
    ok(on(&uri)
        .args(["put"])
        .arg(&locals[0])
        .arg("/c")
        .output()
        .unwrap());
    let mut acked = 0usize;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rng = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let rounds = 24;
    // Rounds whose put was acknowledged, killed leaving the new file, killed leaving the
    // old one.
    let mut outcomes = [0u32; 3];
    for round in 0..rounds {
        let next = (acked + 1 + (rng() % 3) as usize) % versions.len();
        let mut put = on(&uri)
            .args(["put"])
            .arg(&locals[next])
            .arg("/c")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng() % 150_000));
        let kill_daemon = rng() % 3 == 0;
        if kill_daemon {
            daemon.take().expect("running").kill9();
        }
        let _ = put.kill();
        let status = put.wait().unwrap();
        let was_acked = status.success();
        if kill_daemon {
            let (d, uris) = Daemon::start(&state, &["tcp://127.0.0.1:0"]);
            daemon = Some(d);
            uri = uris[0].clone();
        }
        let now = device_bytes(&uri, "/c").expect("the file is never lost");
        if was_acked {
            assert!(
                now == versions[next],
                "round {round}: acknowledged put lost"
            );
            acked = next;
            outcomes[0] += 1;
        } else if now == versions[next] {
            outcomes[1] += 1;
            // Killed after the rename: the new file is whole (and durable, as the
            // daemon's restart above shows when it was killed too).
            acked = next;
        } else {
            outcomes[2] += 1;
            assert!(
                now == versions[acked],
                "round {round}: neither the old nor the new file ({} bytes)",
                now.len()
            );
        }
        if kill_daemon {
            let ls = ok(on(&uri).args(["ls", "/.csx-partial"]).output().unwrap());
            assert!(ls.stdout.is_empty(), "round {round}: temporaries left");
        } else {
            // What was seen becomes the baseline: a put killed after its rename but
            // before its flush is visible, and durable only after this.
            ok(on(&uri).args(["sync"]).output().unwrap());
        }
    }
    eprintln!("kill -9 campaign: {rounds} rounds, [acknowledged, new, old] = {outcomes:?}");
    daemon.expect("running").kill9();
}
