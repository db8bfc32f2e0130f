//! Programs and their owners, as a user meets them: `csx exec` clients killed with
//! SIGKILL mid-run leave no program behind (served over tcp and shm, and embedded), and
//! only a program loaded by name with `csx program load` stays, across a daemon killed
//! and restarted.

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::csx;
use crate::device_exec::{init_device, json, ok};
use crate::served_exec::Daemon;

/// `ja -1` as raw bytecode: spins until its fuel or time runs out.
const SPIN: [u8; 8] = [0x05, 0, 0xff, 0xff, 0, 0, 0, 0];
/// `mov r0, 42; exit`.
const RET42: [u8; 16] = [0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];

fn run(uri: &str, args: &[&str]) -> Output {
    csx()
        .env_remove("CSX_DEVICE")
        .args(["--device", uri])
        .args(args)
        .output()
        .expect("csx runs")
}

/// A `csx exec` of the spin program with an hour's time and all the fuel there is.
fn spinning_exec(uri: &str, spin: &Path) -> Child {
    csx()
        .env_remove("CSX_DEVICE")
        .args(["exec", "--device", uri])
        .arg(spin)
        .args(["--fuel", "1099511627776", "--time-limit-ms", "3600000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("csx exec starts")
}

fn programs(uri: &str) -> Vec<Value> {
    match json(run(uri, &["program", "list", "--json"])) {
        Value::Array(a) => a,
        other => panic!("program list --json printed {other}"),
    }
}

fn kill9(mut child: Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

/// Waits until `uri` lists exactly the slots `want` keeps (or fails after 20 s).
fn wait_for_slots(uri: &str, want: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let list = programs(uri);
        if list.len() == want {
            return list;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} programs still loaded on {uri}, want {want}: {list:?}",
            list.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn killed_clients_leave_no_program_and_named_programs_stay() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("dev");
    init_device(&state, "64MiB", "256MiB");
    let spin = tmp.path().join("spin.bin");
    std::fs::write(&spin, SPIN).unwrap();
    let ret42 = tmp.path().join("ret42.bin");
    std::fs::write(&ret42, RET42).unwrap();
    let dir = state.to_str().unwrap();

    let shm = format!("shm://csx-it-programs-{}", std::process::id());
    let (daemon, uris) = Daemon::start(&state, &[&shm, "tcp://127.0.0.1:0"]);
    // 30 clients, on both transports, each with its program loaded and running (or
    // queued behind the two engines), then SIGKILLed.
    let clients: Vec<Child> = (0..30)
        .map(|i| spinning_exec(&uris[i % 2], &spin))
        .collect();
    let start = Instant::now();
    while programs(&uris[1]).len() < 30 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the 30 clients did not all load their program"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let active = programs(&uris[1])
        .iter()
        .filter(|p| p["active"] == true && p["persistent"] == false && !p["owner"].is_null())
        .count();
    assert_eq!(
        active, 30,
        "each client's program is active and owned by it"
    );
    clients.into_iter().for_each(kill9);
    wait_for_slots(&uris[1], 0);
    // Executions still work (none of the 32 activations is held).
    let out = json(run(&uris[0], &["exec", ret42.to_str().unwrap(), "--json"]));
    assert_eq!(out["r0"], 42);

    // A program loaded by name stays: it outlives this command and a daemon SIGKILL.
    let loaded = json(run(
        &uris[1],
        &[
            "program",
            "load",
            "keep",
            ret42.to_str().unwrap(),
            "--engine",
            "interp",
            "--json",
        ],
    ));
    assert_eq!(loaded["name"], "keep");
    // The same name again is refused, naming the slot that holds it.
    let again = run(
        &uris[0],
        &["program", "load", "keep", spin.to_str().unwrap()],
    );
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already loaded in slot"), "{err}");
    daemon.kill9();

    let (daemon, uris) = Daemon::start(&state, &["tcp://127.0.0.1:0"]);
    let list = programs(&uris[0]);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(
        (
            &list[0]["name"],
            &list[0]["persistent"],
            &list[0]["state"],
            &list[0]["engine"]
        ),
        (
            &Value::from("keep"),
            &Value::from(true),
            &Value::from("active"),
            &Value::from("interp")
        )
    );
    daemon.kill9();

    // Embedded: each client opens the device itself, so they take turns; each one is
    // killed while its program runs.
    for _ in 0..10 {
        let child = spinning_exec(dir, &spin);
        std::thread::sleep(Duration::from_millis(400));
        kill9(child);
    }
    let list = programs(dir);
    assert_eq!(list.len(), 1, "only the named program: {list:?}");
    assert_eq!(list[0]["name"], "keep");
    // Unload by name; an unknown name lists the names there are.
    let out = run(dir, &["program", "unload", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the named programs are: keep"), "{err}");
    ok(run(dir, &["program", "unload", "keep"]));
    assert!(programs(dir).is_empty());
    let out = json(run(dir, &["exec", ret42.to_str().unwrap(), "--json"]));
    assert_eq!(out["r0"], 42);
}

/// A run stopped by its time limit exits as a fuel trap does (3), and says which.
#[test]
fn time_limit_and_fuel_exit_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("dev");
    init_device(&state, "64MiB", "64MiB");
    let spin = tmp.path().join("spin.bin");
    std::fs::write(&spin, SPIN).unwrap();
    let dir = state.to_str().unwrap();
    let spin = spin.to_str().unwrap();
    let by_time = run(
        dir,
        &[
            "exec",
            spin,
            "--time-limit-ms",
            "50",
            "--fuel",
            "1099511627776",
        ],
    );
    let by_fuel = run(dir, &["exec", spin, "--fuel", "1000"]);
    assert_eq!(by_time.status.code(), Some(3), "{by_time:?}");
    assert_eq!(by_fuel.status.code(), Some(3), "{by_fuel:?}");
    let text = String::from_utf8_lossy(&by_time.stdout);
    assert!(text.contains("time limit of 50 ms"), "{text}");
    // A value below the minimum says so.
    let zero = run(dir, &["exec", spin, "--time-limit-ms", "0"]);
    let err = String::from_utf8_lossy(&zero.stderr);
    assert!(
        err.contains("time limit of 0 ms, must be 1..=3600000"),
        "{err}"
    );
}
