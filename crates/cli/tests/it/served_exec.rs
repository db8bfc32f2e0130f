//! The same `csx exec` runs against an embedded device and against that device served by
//! `csx device serve` over shm and tcp, and must give the same results. The
//! daemon is a child process stopped with SIGTERM at the end, which must be a clean
//! shutdown (exit status 0) that leaves the device usable embedded again.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output, Stdio};

use serde_json::Value;

use crate::csx;
use crate::device_exec::{compile, init_device, json, ok};

/// Runs `csx --device URI ARGS...`.
fn run(uri: &str, args: &[&str]) -> Output {
    csx()
        .env_remove("CSX_DEVICE")
        .args(["--device", uri])
        .args(args)
        .output()
        .expect("csx runs")
}

/// A `csx device serve` child; killed if the test fails before it is stopped.
pub(crate) struct Daemon {
    child: Option<Child>,
}

impl Daemon {
    /// Starts the daemon on `listen` and returns it with the URIs it printed (the tcp
    /// port is the one the system chose).
    pub(crate) fn start(state: &Path, listen: &[&str]) -> (Daemon, Vec<String>) {
        let mut cmd = csx();
        cmd.args(["device", "serve", "--state"])
            .arg(state)
            .args(["--status-interval", "0"]);
        for uri in listen {
            cmd.args(["--listen", uri]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("csx device serve starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the daemon prints its addresses");
        let daemon = Daemon { child: Some(child) };
        // "csx: serving DIR on URI URI..."
        let (_, uris) = line
            .trim_end()
            .split_once(" on ")
            .unwrap_or_else(|| panic!("unexpected first line from the daemon: {line:?}"));
        let uris: Vec<String> = uris.split(' ').map(str::to_string).collect();
        assert_eq!(uris.len(), listen.len(), "{line}");
        (daemon, uris)
    }

    /// SIGKILL (`kill -9`: no shutdown, no flush), then waits for it to go.
    pub(crate) fn kill9(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("the daemon is killed");
        child.wait().expect("the daemon exits");
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(killed.success());
        child.wait().expect("the daemon exits")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The results of the exec runs that must not depend on the transport.
fn exec_results(uri: &str, prog: &str, out_dir: &Path) -> Vec<Value> {
    let mut results = Vec::new();
    let r = json(run(
        uri,
        &["exec", prog, "--entry", "sum", "/d/nums", "--json"],
    ));
    results.push(r["r0"].clone());
    let r = json(run(
        uri,
        &[
            "exec",
            prog,
            "--entry",
            "sum",
            "/d/nums:800:8000",
            "--engine=interp",
            "--json",
        ],
    ));
    results.push(r["r0"].clone());
    let outfile = out_dir.join("out.bin");
    let r = json(run(
        uri,
        &[
            "exec",
            prog,
            "--entry",
            "copy_plus",
            "/d/nums:0:1000",
            "--output-size",
            "1KiB",
            "--output",
            outfile.to_str().unwrap(),
            "--cparam1",
            "40",
            "--cparam2",
            "2",
            "--params-hex",
            "05",
            "--json",
        ],
    ));
    results.push(r["r0"].clone());
    results.push(Value::from(std::fs::read(&outfile).unwrap()));
    // A trap: exit status 3 and the same trap on every transport.
    let out = run(uri, &["exec", prog, "--entry", "oob", "/d/nums", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{uri}");
    let trap: Value = serde_json::from_slice(&out.stdout).unwrap();
    results.push(trap["trap"].clone());
    let ls = json(run(uri, &["ls", "--json"]));
    results.push(ls);
    results
}

#[test]
fn exec_over_shm_and_tcp_matches_embedded() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    init_device(&dev, "64MiB", "16MiB");
    let n = 50_000u64;
    let bytes: Vec<u8> = (1..=n).flat_map(|v| v.to_le_bytes()).collect();
    let local = tmp.path().join("nums.bin");
    std::fs::write(&local, &bytes).unwrap();
    let dev_uri = dev.to_str().unwrap();
    ok(run(dev_uri, &["put", local.to_str().unwrap(), "/d/nums"]));
    let prog = compile(tmp.path());
    let prog = prog.to_str().unwrap();

    let embedded = exec_results(dev_uri, prog, tmp.path());
    assert_eq!(embedded[0], n * (n + 1) / 2);

    let shm = format!("shm://csx-it-served-{}", std::process::id());
    let (daemon, uris) = Daemon::start(&dev, &[&shm, "tcp://127.0.0.1:0"]);
    assert_eq!(uris[0], shm);
    assert!(uris[1].starts_with("tcp://127.0.0.1:"), "{uris:?}");
    assert_ne!(uris[1], "tcp://127.0.0.1:0", "the daemon names its port");
    for uri in &uris {
        let served = exec_results(uri, prog, tmp.path());
        assert_eq!(served, embedded, "results over {uri} differ from embedded");
        let info = json(run(uri, &["device", "info", "--json"]));
        assert_eq!(info["programs_loaded"], 0, "exec over {uri} unloads");
    }
    let status = daemon.stop();
    assert!(status.success(), "SIGTERM is a clean shutdown: {status}");

    // The state directory is consistent after the shutdown: embedded again, same files.
    let again = exec_results(dev_uri, prog, tmp.path());
    assert_eq!(again, embedded);
}
