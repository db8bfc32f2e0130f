//! Shell pipes of the mount's `.ops/` executables, through FUSE for real: fused on the
//! device when both ends are mount files or operators, through the host otherwise, the
//! same result either way.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::csx;

struct Mount {
    _tmp: tempfile::TempDir,
    mnt: PathBuf,
    log: PathBuf,
    child: Child,
}

impl Mount {
    fn new() -> Mount {
        let tmp = tempfile::tempdir().unwrap();
        let dev = tmp.path().join("dev");
        let mnt = tmp.path().join("mnt");
        let log = tmp.path().join("mount.log");
        fs::create_dir(&mnt).unwrap();
        let out = csx()
            .args(["device", "init", "--nvm-size", "64MiB", "--state"])
            .arg(&dev)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let child = csx()
            .env("CSX_DEVICE", &dev)
            .args(["fs", "mount", "--foreground"])
            .arg(&mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut m = Mount {
            _tmp: tmp,
            mnt,
            log,
            child,
        };
        let start = Instant::now();
        while !m.mnt.join(".ops/filter").exists() {
            if let Some(status) = m.child.try_wait().unwrap() {
                panic!(
                    "csx mount exited with {status} (needs /dev/fuse and root: scripts/setup.sh): {}",
                    fs::read_to_string(&m.log).unwrap_or_default()
                );
            }
            assert!(start.elapsed() < Duration::from_secs(30), "mount timed out");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// Runs `script` with sh, MNT set to the mount point.
    fn sh(&self, script: &str) -> std::process::Output {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("MNT", &self.mnt)
            .output()
            .unwrap()
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = csx()
            .args(["fs", "umount"])
            .arg("--lazy")
            .arg(&self.mnt)
            .output();
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn write_values(path: &Path) -> Vec<u32> {
    let values: Vec<u32> = (0..300_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % 1000)
        .collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    fs::write(path, bytes).unwrap();
    values
}

#[test]
fn shell_pipes_fuse_on_the_device_and_match_through_the_host() {
    let m = Mount::new();
    let listed: Vec<String> = fs::read_dir(m.mnt.join(".ops"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for op in [
        "filter",
        "aggregate",
        "grep",
        "datagen",
        "decompress",
        "encrypt",
    ] {
        assert!(listed.iter().any(|n| n == op), "{op} not in {listed:?}");
    }
    let values = write_values(&m.mnt.join("data.u32"));
    let local = m.mnt.parent().unwrap().join("local.u32");
    write_values(&local);
    let kept: Vec<u64> = values
        .iter()
        .filter(|&&v| v > 100)
        .map(|&v| u64::from(v))
        .collect();
    let want = format!(
        "count {} sum {} min {} max {}\n",
        kept.len(),
        kept.iter().sum::<u64>(),
        kept.iter().min().unwrap(),
        kept.iter().max().unwrap()
    );
    let filter = "$MNT/.ops/filter --type u32 --op gt --value 100";
    let aggregate = "$MNT/.ops/aggregate --type u32 --text";
    // Fused: a mount file in, two operators, the host out (one crossing).
    let fused = ok(&m.sh(&format!("{filter} < $MNT/data.u32 | {aggregate}")));
    assert_eq!(fused, want);
    assert!(
        m.log().contains("2 stage(s) fused on the device"),
        "{}",
        m.log()
    );
    // The same through the host: a local file piped in by cat.
    let hosted = ok(&m.sh(&format!("cat {} | {filter} | {aggregate}", local.display())));
    assert_eq!(hosted, want);
    // Broken by an ordinary program in the middle: two device pipelines, same answer.
    let broken = ok(&m.sh(&format!("{filter} < $MNT/data.u32 | cat | {aggregate}")));
    assert_eq!(broken, want);
    // Mount file to mount file: nothing crosses to the host.
    ok(&m.sh(&format!("{filter} < $MNT/data.u32 > $MNT/kept.u32")));
    let kept_bytes = fs::read(m.mnt.join("kept.u32")).unwrap();
    assert_eq!(kept_bytes.len(), 4 * kept.len());
    assert!(
        m.log().contains("0 payload bytes through the host"),
        "{}",
        m.log()
    );
}

#[test]
fn a_failing_operator_fails_the_shell_pipe_with_the_reason() {
    let m = Mount::new();
    fs::write(m.mnt.join("junk.lz4"), b"definitely not a csx_lz4 stream").unwrap();
    let out = m.sh("$MNT/.ops/decompress < $MNT/junk.lz4 > $MNT/plain.txt");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CSX_EBADMSG"), "{err}");
    // The redirection created the file; the failed chain left it empty.
    assert_eq!(fs::read(m.mnt.join("plain.txt")).unwrap(), b"");
    // An unknown parameter names the valid ones.
    let out = m.sh("$MNT/.ops/filter --op gt --valeu 3 < $MNT/junk.lz4");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`valeu`") && err.contains("--value"), "{err}");
}

#[test]
fn a_reader_that_stops_early_ends_the_chain_and_the_mount_goes_on() {
    let m = Mount::new();
    // head exits after 100 bytes: the proxy's stdout breaks, the chain stops on the
    // device (it would generate 1 GiB) and frees what it held.
    let run = m.sh("$MNT/.ops/datagen --size 1GiB | head -c 100 | wc -c");
    let out = ok(&run);
    assert_eq!(out.trim(), "100");
    // A reader that goes away is no error to print (as for any program in a shell).
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        !err.contains("Broken pipe") && !err.contains("csx:"),
        "{err}"
    );
    // The device goes on: the next pipe runs.
    let out = ok(&m.sh("$MNT/.ops/datagen --size 4096 --modulo 1 | $MNT/.ops/aggregate --text"));
    assert_eq!(out, "count 512 sum 0 min 0 max 0\n");
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        if rest.split_whitespace().nth(1) == Some(&parent.to_string()) {
            out.push(pid);
        }
    }
    out
}

/// Whether process `pid` has a socket open (a proxy connected to its mount).
fn holds_socket(pid: u32) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|d| {
        d.flatten().any(|f| {
            fs::read_link(f.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
    })
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_chain_whose_proxies_all_died_is_cancelled_and_umount_ends_the_mount() {
    let mut m = Mount::new();
    // A chain that would run for hours, writing nowhere.
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg("$MNT/.ops/datagen --size 1TiB | $MNT/.ops/aggregate --text > /dev/null")
        .env("MNT", &m.mnt)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Both proxies connected to the mount (then registered: the chain runs).
    wait_for("the chain never started", || {
        let proxies = children_of(shell.id());
        proxies.len() == 2 && proxies.iter().all(|&p| holds_socket(p))
    });
    std::thread::sleep(Duration::from_millis(500));
    for pid in children_of(shell.id()) {
        let killed = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    let _ = shell.wait();
    wait_for("the mount did not cancel the orphaned chain", || {
        m.log().contains("every proxy of the chain is gone")
    });
    // Another chain runs while one is running: then umount stops it and the process.
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg("$MNT/.ops/datagen --size 1TiB | $MNT/.ops/aggregate --text > /dev/null")
        .env("MNT", &m.mnt)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the second chain never started", || {
        let proxies = children_of(shell.id());
        proxies.len() == 2 && proxies.iter().all(|&p| holds_socket(p))
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = csx().args(["fs", "umount"]).arg(&m.mnt).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `csx umount` returns once the mount process has ended.
    let status = m.child.try_wait().unwrap();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        m.log()
    );
    let chain = shell.wait().unwrap();
    assert!(!chain.success(), "the stopped chain reported success");
    assert!(m.log().contains("the mount is ending"), "{}", m.log());
}
