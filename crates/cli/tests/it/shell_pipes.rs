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

/// The records the proxies of a run wrote to the file named by `CSX_OP_TRACE`, one per
/// proxy, after the file is emptied for the next run.
fn take_traces(path: &Path) -> Vec<serde_json::Value> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let _ = fs::remove_file(path);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The trace of the proxy whose operator is `op`.
fn trace_of<'a>(traces: &'a [serde_json::Value], op: &str) -> &'a serde_json::Value {
    traces
        .iter()
        .find(|t| t["words"][0] == op)
        .unwrap_or_else(|| panic!("no trace of {op}: {traces:?}"))
}

/// Asserts that decision `d` sent the pipe through the host without waiting out
/// `PEER_WAIT` for a proxy.
fn host_at_once(d: &serde_json::Value, case: &str) {
    assert_eq!(
        (&d["end"], &d["timed_out"]),
        (&"host".into(), &false.into()),
        "{case}: {d}"
    );
}

/// Runs `script` with `shell`, MNT set to the mount point and the proxies tracing to
/// `trace`.
fn traced(m: &Mount, shell: &str, script: &str, trace: &Path) -> std::process::Output {
    Command::new(shell)
        .arg("-c")
        .arg(script)
        .env("MNT", &m.mnt)
        .env("CSX_OP_TRACE", trace)
        .output()
        .unwrap()
}

#[test]
fn a_shell_reading_the_pipe_itself_is_seen_at_once_to_be_no_proxy() {
    let m = Mount::new();
    let trace = m.mnt.with_file_name("trace.jsonl");
    let chain = "$MNT/.ops/datagen --size 64MiB | $MNT/.ops/aggregate --text";
    let plain = ok(&traced(&m, "sh", chain, &trace));
    take_traces(&trace);
    fs::write(m.mnt.join("f"), b"one\ntwo\n").unwrap();
    for shell in ["sh", "bash"] {
        let out = ok(&traced(
            &m,
            shell,
            &format!("x=$({chain}); echo \"$x\""),
            &trace,
        ));
        assert_eq!(out, plain, "{shell}");
        let t = take_traces(&trace);
        // The reader of the last stage is the shell itself: known at once, no wait.
        let last = &trace_of(&t, "aggregate")["decisions"][1];
        assert_eq!(last["end"], "host", "{shell}: {last}");
        assert_eq!(last["timed_out"], false, "{shell}: {last}");
        assert!(
            last["why"]
                .as_str()
                .unwrap()
                .starts_with("peer is not a proxy"),
            "{shell}: {last}"
        );
        // The two stages still fused on the device.
        let first = trace_of(&t, "datagen");
        assert!(
            first["decisions"][1]["end"]["peer"].is_u64(),
            "{shell}: {first}"
        );
        assert_eq!(first["outcome"]["stages"], 2, "{shell}: {first}");
        // A failing stage alone inside `$(...)` fails at once too.
        let out = traced(&m, shell, "x=$($MNT/.ops/grep --bogus x < $MNT/f)", &trace);
        assert!(!out.status.success(), "{shell}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bogus"),
            "{shell}"
        );
        let t = take_traces(&trace);
        let d = &trace_of(&t, "grep")["decisions"][1];
        host_at_once(d, shell);
    }
    // A subshell that reads the pipe (a loop, a group) is its reader, not a proxy to be.
    for reader in [
        "while read -r l; do :; done",
        "{ read -r l; cat > /dev/null; }",
    ] {
        let script = format!("$MNT/.ops/datagen --size 4096 --modulo 1 | {reader}");
        ok(&traced(&m, "bash", &script, &trace));
        let t = take_traces(&trace);
        let d = &trace_of(&t, "datagen")["decisions"][1];
        host_at_once(d, reader);
    }
}

/// Two stages chained by one Python parent, as a shell would: the first's stdout is a
/// pipe the parent hands to the second (whose child sleeps argv[2] seconds, if given,
/// between its fork and its exec).
const POPEN_CHAIN: &str = r#"
import subprocess, sys, time
ops = sys.argv[1] + "/.ops/"
late = float(sys.argv[2]) if len(sys.argv) > 2 else 0
kw = {"preexec_fn": lambda: time.sleep(late)} if late else {}
a = subprocess.Popen([ops + "datagen", "--size", "8MiB", "--modulo", "1000"], stdout=subprocess.PIPE)
b = subprocess.Popen([ops + "aggregate", "--text"], stdin=a.stdout, stdout=subprocess.PIPE, **kw)
a.stdout.close()
out = b.communicate()[0]
sys.stdout.buffer.write(out)
sys.exit(a.wait() or b.returncode)
"#;

/// Runs [`POPEN_CHAIN`] (with `late` as its second argument), checks its output is
/// `shell`'s, and returns its proxies' traces.
fn popen_chain(m: &Mount, trace: &Path, late: &[&str], shell: &str) -> Vec<serde_json::Value> {
    let out = Command::new("python3")
        .args(["-c", POPEN_CHAIN])
        .arg(&m.mnt)
        .args(late)
        .env("CSX_OP_TRACE", trace)
        .output()
        .expect("python3 runs");
    assert_eq!(ok(&out), shell);
    take_traces(trace)
}

#[test]
fn stages_chained_by_python_popen_pair_up_on_the_device_as_in_a_shell() {
    let m = Mount::new();
    let trace = m.mnt.with_file_name("trace.jsonl");
    let shell =
        ok(&m.sh("$MNT/.ops/datagen --size 8MiB --modulo 1000 | $MNT/.ops/aggregate --text"));
    // Each run races the parent's second spawn against the first stage's look at its
    // pipe: several runs.
    for _ in 0..8 {
        let t = popen_chain(&m, &trace, &[], &shell);
        let (a, b) = (trace_of(&t, "datagen"), trace_of(&t, "aggregate"));
        assert_eq!(a["decisions"][1]["end"]["peer"], b["pid"], "{a}\n{b}");
        assert_eq!(b["decisions"][0]["end"]["peer"], a["pid"], "{a}\n{b}");
        for p in [a, b] {
            assert_eq!(p["outcome"]["stages"], 2, "{p}");
            assert_eq!(p["outcome"]["ok"], true, "{p}");
        }
    }
}

/// Two stages chained by one Python parent whose second child sleeps before its exec:
/// the first stage sees, at its pipe's other end, a forked Python asleep (no proxy, so
/// the host); the second, once it runs, sees the first stage (a proxy). The two claims
/// disagree, and the mount runs the pipe through the host instead of failing or waiting.
#[test]
fn stages_whose_claims_about_their_pipe_disagree_run_it_through_the_host() {
    let m = Mount::new();
    let trace = m.mnt.with_file_name("trace.jsonl");
    let shell =
        ok(&m.sh("$MNT/.ops/datagen --size 8MiB --modulo 1000 | $MNT/.ops/aggregate --text"));
    let t = popen_chain(&m, &trace, &["1.5"], &shell);
    let (a, b) = (trace_of(&t, "datagen"), trace_of(&t, "aggregate"));
    // The first stage decided while the second slept in its fork: the claims disagree.
    assert_eq!(a["decisions"][1]["end"], "host", "{a}");
    assert_eq!(b["decisions"][0]["end"]["peer"], a["pid"], "{b}");
    for p in [a, b] {
        assert_eq!(p["outcome"]["ok"], true, "{p}");
        assert_eq!(p["outcome"]["stages"], 1, "{p}");
    }
}

/// The pid among `parent`'s children whose command line holds `word`.
fn child_running(parent: u32, word: &str) -> Option<u32> {
    children_of(parent).into_iter().find(|&p| {
        fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(word))
    })
}

/// A shell's child sleeps in the `open` of its redirection (a FIFO nobody writes yet, as
/// an `open` of a file of the mount sleeps until the mount answers under load) while the
/// next stage looks at its pipe: that child is on its way to its exec, not the pipe's
/// writer, so the next stage waits for it and the two stages fuse on the device.
#[test]
fn a_stage_whose_neighbour_sleeps_in_an_open_before_its_exec_still_fuses() {
    let m = Mount::new();
    let trace = m.mnt.with_file_name("trace.jsonl");
    let fifo = m.mnt.with_file_name("in.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let shell = Command::new("sh")
        .arg("-c")
        .arg("$MNT/.ops/grep --pattern o < \"$FIFO\" | $MNT/.ops/grep --pattern t")
        .env("MNT", &m.mnt)
        .env("FIFO", &fifo)
        .env("CSX_OP_TRACE", &trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The second stage looks at its pipe while the first one's child sleeps in the
    // `open` of the FIFO: it has connected to the mount (decided) or has looked for a
    // second (still waiting).
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500)
        && !child_running(shell.id(), "proxy").is_some_and(holds_socket)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The writer is a process of its own, killed if the first stage never opens the FIFO.
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg("printf 'one\\ntwo\\nthree\\nfour\\n' > \"$FIFO\"")
        .env("FIFO", &fifo)
        .spawn()
        .unwrap();
    let out = shell.wait_with_output().unwrap();
    let _ = writer.kill();
    let _ = writer.wait();
    assert_eq!(ok(&out), "two\n");
    let t = take_traces(&trace);
    assert_eq!(t.len(), 2, "{t:?}");
    let (a, b) = (&t[0], &t[1]);
    for p in [a, b] {
        assert_eq!(p["outcome"]["stages"], 2, "{a}\n{b}");
    }
}

/// `{ op; echo x; } | op`: the subshell writes into the pipe after the first operator, so
/// the second operator's stdin has two writers; fusing the operators would lose what
/// the subshell writes. The pipe goes through the host and nothing is lost.
#[test]
fn an_operator_sharing_its_pipe_with_another_writer_runs_it_through_the_host() {
    let m = Mount::new();
    fs::write(m.mnt.join("f"), b"one\ntwo\nthree\n").unwrap();
    // Each run races the stages' looks at their pipe (the loss needed both operators to
    // see each other): several runs.
    for shell in ["sh", "bash", "sh", "bash", "sh", "bash"] {
        let out = Command::new(shell)
            .arg("-c")
            .arg("{ $MNT/.ops/grep --pattern o < $MNT/f; echo tooo; } | $MNT/.ops/grep --pattern o")
            .env("MNT", &m.mnt)
            .output()
            .unwrap();
        assert_eq!(ok(&out), "one\ntwo\ntooo\n", "{shell}");
    }
}

/// Layouts in which a process other than the two operators holds a copy of the pipe
/// between them at another descriptor and writes into it after the first operator
/// ends: with plain `grep` the reader gets those bytes; with the operators fused on the
/// device the pipe's payload never crosses the pipe, so the operators must see the copy
/// and run the pipe through the host. `{}` is where the first stage goes, `[]` the
/// second; `$IN` is the input file.
const COPY_LAYOUTS: &[&str] = &[
    // A sibling keeps a copy at descriptor 3 (`exec 3>&1`); the operator holds none.
    "{ ( sleep 1; echo extra-three >&3 ) >/dev/null & exec 3>&-; exec {} < $IN; } 3>&1 | []",
    // The same, and the first operator holds the copy at descriptor 3 too.
    "{ ( sleep 1; echo extra-three >&3 ) >/dev/null & exec {} < $IN; } 3>&1 | []",
    // The copy is a stderr (`2>&1`).
    "{ ( sleep 1; echo extra-three >&2 ) >/dev/null & exec {} < $IN 2>/dev/null; } 2>&1 | []",
];

#[test]
fn a_copy_of_the_pipe_at_another_descriptor_keeps_its_bytes() {
    let m = Mount::new();
    fs::write(m.mnt.join("in.txt"), "one\ntwo\nthree\nfour\nten\n").unwrap();
    let local = m.mnt.with_file_name("in.txt");
    fs::copy(m.mnt.join("in.txt"), &local).unwrap();
    for layout in COPY_LAYOUTS {
        let plain = layout.replace("{}", "grep t").replace("[]", "grep e");
        let want = ok(&m.sh(&plain.replace("$IN", &local.display().to_string())));
        assert_eq!(want, "three\nten\nextra-three\n", "{plain}");
        let ops = layout
            .replace("{}", "$MNT/.ops/grep --pattern t")
            .replace("[]", "$MNT/.ops/grep --pattern e")
            .replace("$IN", "$MNT/in.txt");
        // Whether the proxies look before or after the sibling forks is up to the
        // scheduler: several runs.
        for run in 0..4 {
            assert_eq!(ok(&m.sh(&ops)), want, "run {run}: {ops}\n{}", m.log());
        }
    }
}
