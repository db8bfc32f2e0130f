//! The device commands end to end, as a user runs them: `csx device init`, `put` a
//! generated file, `exec` a clang-compiled sum program over it and check r0 in the
//! `--json` output; then the other file commands, traps, output windows, errors, and
//! the per-user default device.

use std::path::Path;
use std::process::Output;

use csx_testkit::tools;
use serde_json::Value;

use crate::csx;

const PROGRAMS: &str = r#"
typedef unsigned long u64;
typedef unsigned char u8;
struct csx_window { unsigned long addr, len; };
struct csx_args {
    unsigned long cparam1, cparam2;
    unsigned int nwindows, params_len;
    struct csx_window windows[16];
    unsigned char params[];
};
u64 sum(u8 *data, u64 len, u64 *state, u64 state_len, const struct csx_args *args) {
    const u64 *p = (const u64 *)data;
    u64 s = 0;
    for (u64 i = 0; i < len / 8; i++) s += p[i];
    return s;
}
u64 oob(u8 *data, u64 len, u64 *state, u64 state_len, const struct csx_args *args) {
    return *(volatile u8 *)(data + len);
}
u64 spin(u8 *data, u64 len, u64 *state, u64 state_len, const struct csx_args *args) {
    volatile u64 i = 0;
    for (;;) i++;
    return i;
}
u64 copy_plus(u8 *data, u64 len, u64 *state, u64 state_len, const struct csx_args *args) {
    u8 *out = (u8 *)args->windows[1].addr;
    for (u64 i = 0; i < len && i < args->windows[1].len; i++) out[i] = data[i] + args->params[0];
    return args->cparam1 + args->cparam2;
}
"#;

/// Compiles the test programs with clang; fails saying how to get it when missing.
pub(crate) fn compile(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("progs.c");
    let obj = dir.join("progs.o");
    std::fs::write(&src, PROGRAMS).unwrap();
    let object = tools::compile_bpf(tools::clang(), &src, std::iter::empty::<&str>());
    std::fs::write(&obj, object).unwrap();
    obj
}

/// `csx device init --state STATE --nvm-size NVM --slm-size SLM --engines 2`; its
/// standard output.
pub(crate) fn init_device(state: &Path, nvm: &str, slm: &str) -> String {
    ok(csx()
        .args(["device", "init", "--state"])
        .arg(state)
        .args(["--nvm-size", nvm, "--slm-size", slm, "--engines", "2"])
        .output()
        .unwrap())
}

/// Runs `csx --device DEV ARGS...`.
fn run(dev: &Path, args: &[&str]) -> Output {
    csx()
        .env("CSX_DEVICE", dev)
        .args(args)
        .output()
        .expect("csx runs")
}

pub(crate) fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "csx failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

pub(crate) fn json(out: Output) -> Value {
    let text = ok(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn init_put_exec_sum() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev0");
    let text = init_device(&dev, "64MiB", "64MiB");
    assert!(text.contains("64 MiB"), "{text}");
    // A file of the u64s 1..=100000.
    let n = 100_000u64;
    let bytes: Vec<u8> = (1..=n).flat_map(|v| v.to_le_bytes()).collect();
    let local = tmp.path().join("nums.bin");
    std::fs::write(&local, &bytes).unwrap();
    let put = json(run(
        &dev,
        &["put", local.to_str().unwrap(), "/data/nums", "--json"],
    ));
    assert_eq!(put["bytes"], bytes.len() as u64);
    let prog = compile(tmp.path());
    let prog = prog.to_str().unwrap();

    // The issue's check: r0 is the sum, in --json.
    let r = json(run(
        &dev,
        &["exec", prog, "--entry", "sum", "/data/nums", "--json"],
    ));
    assert_eq!(r["r0"], n * (n + 1) / 2);
    assert_eq!(r["status"], "Success");
    assert!(r["trap"].is_null());
    for key in [
        "queued_ns",
        "transfer_ns",
        "prepare_ns",
        "execute_ns",
        "total_ns",
    ] {
        assert!(r["timing"][key].is_u64(), "timing.{key} missing: {r}");
    }
    assert_eq!(r["staged_bytes"], bytes.len() as u64);
    // A range of the file, on the interpreter.
    let r = json(run(
        &dev,
        &[
            "exec",
            prog,
            "--entry",
            "sum",
            "/data/nums:8:16",
            "--engine=interp",
            "--json",
        ],
    ));
    assert_eq!(r["r0"], 2 + 3);
    // The human output says the same.
    let text = ok(run(&dev, &["exec", prog, "--entry", "sum", "/data/nums"]));
    assert!(
        text.contains(&format!("r0        {}", n * (n + 1) / 2)),
        "{text}"
    );
    // exec cleans up: no programs stay loaded, no memory stays allocated.
    let info = json(run(&dev, &["device", "info", "--json"]));
    assert_eq!(info["programs_loaded"], 0);
    assert_eq!(info["slm_free_bytes"], info["slm_size_bytes"]);
    assert_eq!(info["engines"], 2);
}

#[test]
fn file_commands_traps_and_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    ok(csx()
        .args([
            "device",
            "init",
            "--nvm-size",
            "64MiB",
            "--slm-size",
            "16MiB",
            "--state",
        ])
        .arg(&dev)
        .output()
        .unwrap());
    let local = tmp.path().join("in.bin");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    ok(run(&dev, &["put", local.to_str().unwrap(), "/a/in.bin"]));
    let ls = json(run(&dev, &["ls", "--json"]));
    assert_eq!(ls[0]["path"], "/a/in.bin");
    assert_eq!(ls[0]["size_bytes"], 100_000);
    let st = json(run(&dev, &["stat", "/a/in.bin", "--json"]));
    assert_eq!(st["size_bytes"], 100_000);
    assert!(!st["extents"].as_array().unwrap().is_empty());
    let back = tmp.path().join("back.bin");
    ok(run(&dev, &["get", "/a/in.bin", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == data);
    let functions = json(run(&dev, &["device", "functions", "--json"]));
    assert!(functions
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "csx_file_read"));

    let prog = compile(tmp.path());
    let prog = prog.to_str().unwrap();
    // A trap: exit status 3, status and trap in the JSON.
    let out = run(
        &dev,
        &["exec", prog, "--entry", "oob", "/a/in.bin", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "Trap");
    assert_eq!(r["trap"]["kind"], "out_of_bounds");
    // An output window, written to a local file; cparams and params reach the program.
    let outfile = tmp.path().join("out.bin");
    let r = json(run(
        &dev,
        &[
            "exec",
            prog,
            "--entry",
            "copy_plus",
            "/a/in.bin:0:1000",
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
    assert_eq!(r["r0"], 42);
    let got = std::fs::read(&outfile).unwrap();
    assert_eq!(got.len(), 1024);
    let want: Vec<u8> = data[..1000].iter().map(|b| b.wrapping_add(5)).collect();
    assert_eq!(&got[..1000], &want[..]);
    assert!(got[1000..].iter().all(|&b| b == 0));
    // Errors: exit status 1 and a message naming the problem.
    let out = run(&dev, &["exec", prog, "--entry", "sum", "/no/such/file"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/no/such/file") && err.contains("not found"),
        "{err}"
    );
    let info = json(run(&dev, &["device", "info", "--json"]));
    assert_eq!(
        info["programs_loaded"], 0,
        "a failed exec unloads its program too"
    );
    ok(run(&dev, &["rm", "/a/in.bin"]));
    assert_eq!(
        json(run(&dev, &["ls", "--json"])).as_array().unwrap().len(),
        0
    );
    let out = run(&dev, &["rm", "/a/in.bin"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn default_device_is_created_on_first_use() {
    let tmp = tempfile::tempdir().unwrap();
    let run_default = |args: &[&str]| {
        csx()
            .env_remove("CSX_DEVICE")
            .env("XDG_DATA_HOME", tmp.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run_default(&["ls"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("created a device at"), "{err}");
    assert!(tmp.path().join("csx/device/device.json").is_file());
    let out = run_default(&["device", "info"]);
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("created"),
        "only the first use creates it"
    );
    // CSX_DEVICE picks another device.
    let other = tmp.path().join("other");
    ok(csx()
        .args([
            "device",
            "init",
            "--nvm-size",
            "8MiB",
            "--slm-size",
            "8MiB",
            "--state",
        ])
        .arg(&other)
        .output()
        .unwrap());
    let info = csx()
        .env("CSX_DEVICE", &other)
        .args(["device", "info", "--json"])
        .output()
        .unwrap();
    assert_eq!(json(info)["nvm_size_bytes"], 8 << 20);
}

/// Ctrl-C during `csx exec` aborts the program on the device (which would otherwise
/// spin for an hour), frees what the command allocated and exits with 130; the device
/// is then free for the next command.
#[test]
fn ctrl_c_aborts_exec() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;

    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev0");
    init_device(&dev, "64MiB", "64MiB");
    let prog = compile(tmp.path());
    let mut child = csx()
        .env_remove("CSX_DEVICE")
        .env("CSX_DEVICE", &dev)
        .args([
            "exec",
            prog.to_str().unwrap(),
            "--entry",
            "spin",
            "--engine=interp",
        ])
        .args(["--fuel", "1099511627776", "--time-limit-ms", "3600000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("csx starts");
    // The notice comes once the program has run for a second: it is running.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stderr.read_line(&mut line).unwrap();
        assert!(n > 0, "csx exec ended before its notice; stderr: {seen}");
        seen.push_str(&line);
        if line.contains("Ctrl-C aborts it") {
            break;
        }
    }
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    seen.push_str(&rest);
    assert_eq!(status.code(), Some(130), "stderr: {seen}");
    assert!(
        seen.contains("interrupted: the program was aborted on the device"),
        "{seen}"
    );
    // The program was unloaded and its memory freed: the device runs the next command.
    let info = json(run(&dev, &["device", "info", "--json"]));
    assert_eq!(info["slm_free_bytes"], info["slm_size_bytes"], "{info}");
    assert_eq!(info["programs_loaded"], 0, "{info}");
    let r = json(run(
        &dev,
        &["exec", prog.to_str().unwrap(), "--entry", "sum", "--json"],
    ));
    assert_eq!(r["status"], "Success");
}

/// `csx device init --time-limit-ms` sets the device's default time limit: a spin with
/// an hour's fuel stops there, and `csx exec` says so, naming the limit.
#[test]
fn init_sets_the_time_limit_exec_reports_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev0");
    let init = json(
        csx()
            .args(["device", "init", "--state"])
            .arg(&dev)
            .args([
                "--nvm-size",
                "16MiB",
                "--slm-size",
                "16MiB",
                "--engines",
                "1",
            ])
            .args(["--time-limit-ms", "40", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(init["time_limit_ms"], 40);
    let prog = compile(tmp.path());
    let out = run(
        &dev,
        &[
            "exec",
            prog.to_str().unwrap(),
            "--entry",
            "spin",
            "--fuel",
            "1099511627776",
        ],
    );
    // Stopped by a limit: exit status 3, as a fuel trap, and the report says which.
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("execution time limit exceeded") && stdout.contains("time limit of 40 ms"),
        "{stdout}"
    );
}

/// `csx device init --throttle on|off` decides whether commands are held to the
/// profile's modelled time; absent, the profile decides (daisy and any overridden
/// profile throttle). The choice is what the device keeps in its device.json, and a bad
/// value is refused naming it.
#[test]
fn init_throttle_overrides_the_profile() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&[&str], bool); 5] = [
        (&["--profile", "daisy"], true),
        (&["--profile", "daisy", "--throttle", "off"], false),
        (&["--profile", "unthrottled", "--throttle", "on"], true),
        (&["--profile", "lambda-io", "--media-gbps", "2"], true),
        (
            &[
                "--profile",
                "lambda-io",
                "--media-gbps",
                "2",
                "--throttle",
                "off",
            ],
            false,
        ),
    ];
    for (k, (flags, throttle)) in cases.iter().enumerate() {
        let dev = tmp.path().join(format!("dev{k}"));
        let init = json(
            csx()
                .args(["device", "init", "--state"])
                .arg(&dev)
                .args(["--nvm-size", "16MiB", "--slm-size", "16MiB", "--json"])
                .args(*flags)
                .output()
                .unwrap(),
        );
        assert_eq!(init["throttle"], *throttle, "{flags:?}: {init}");
        let kept: Value =
            serde_json::from_slice(&std::fs::read(dev.join("device.json")).unwrap()).unwrap();
        assert_eq!(kept["perf"]["throttle"], *throttle, "{flags:?}: {kept}");
    }
    let out = csx()
        .args(["device", "init", "--state"])
        .arg(tmp.path().join("bad"))
        .args(["--throttle", "yes"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--throttle") && err.contains("\"yes\""),
        "{err}"
    );
    assert!(!tmp.path().join("bad").exists());
}
