//! `--engine interp|jit|quick` on every command that chooses an engine; the old
//! `--interp`, `--jit` and `--quick` flags still work and print one deprecation line.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::csx;
use crate::device_exec::{init_device, json, ok};

/// `mov r0, 42; exit`.
const RET42: [u8; 16] = [0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn on(dev: &Path, args: &[&str]) -> Output {
    csx()
        .env("CSX_DEVICE", dev)
        .args(args)
        .output()
        .expect("csx runs")
}

/// A device holding `/nums` (u32 0..1000) and the program file RET42.
fn setup(tmp: &Path) -> (PathBuf, String) {
    let dev = tmp.join("dev");
    init_device(&dev, "64MiB", "64MiB");
    let local = tmp.join("nums.bin");
    let bytes: Vec<u8> = (0..1000u32).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&local, bytes).unwrap();
    ok(on(&dev, &["put", local.to_str().unwrap(), "/nums"]));
    let prog = tmp.join("ret42.bin");
    std::fs::write(&prog, RET42).unwrap();
    (dev, prog.to_str().unwrap().to_string())
}

/// Asserts `out` is clap's usage error about `--engine` listing `values`.
fn clap_refuses(out: Output, bad: &str, values: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("invalid value '{bad}' for '--engine <ENGINE>'"))
            && err.contains(&format!("[possible values: {values}]")),
        "{err}"
    );
}

fn note(flag: &str) -> String {
    format!("csx: --{flag} is deprecated; use --engine {flag}\n")
}

#[test]
fn device_commands_take_engine_and_the_old_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, prog) = setup(tmp.path());
    let exec = |extra: &[&str]| {
        let mut args = vec!["exec", prog.as_str(), "--json"];
        args.extend_from_slice(extra);
        on(&dev, &args)
    };
    for engine in ["interp", "jit"] {
        let out = exec(&["--engine", engine]);
        assert_eq!(stderr(&out), "");
        assert_eq!(json(out)["r0"], 42, "exec --engine {engine}");
        let out = exec(&[&format!("--{engine}")]);
        assert_eq!(stderr(&out), note(engine));
        assert_eq!(json(out)["r0"], 42, "exec --{engine}");
    }
    clap_refuses(exec(&["--engine", "quick"]), "quick", "interp, jit");
    clap_refuses(exec(&["--engine", "bogus"]), "bogus", "interp, jit");
    let both = exec(&["--engine", "jit", "--interp"]);
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));

    let pipe = |extra: &[&str]| {
        let mut args = vec![
            "op",
            "pipe",
            "aggregate --type u32 --text",
            "/nums",
            "--chunk",
            "64KiB",
        ];
        args.extend_from_slice(extra);
        on(&dev, &args)
    };
    let want = "count 1000 sum 499500 min 0 max 999\n";
    for engine in ["interp", "jit"] {
        let out = pipe(&["--engine", engine]);
        assert_eq!(stderr(&out), "");
        assert_eq!(ok(out), want, "pipe --engine {engine}");
    }
    let out = pipe(&["--interp"]);
    assert_eq!(stderr(&out), note("interp"));
    assert_eq!(ok(out), want);
    clap_refuses(pipe(&["--engine", "quick"]), "quick", "interp, jit");
    clap_refuses(pipe(&["--engine", "bogus"]), "bogus", "interp, jit");

    for (name, engine) in [("a", "interp"), ("b", "jit")] {
        let out = on(
            &dev,
            &["program", "load", name, &prog, "--engine", engine, "--json"],
        );
        assert_eq!(stderr(&out), "");
        assert_eq!(json(out)["engine"], Value::from(engine));
    }
    let load = on(&dev, &["program", "load", "c", &prog, "--engine", "quick"]);
    clap_refuses(load, "quick", "interp, jit");

    // `csx ssb run` parses its engine before it touches a device.
    for (engine, values) in [("quick", "interp, jit"), ("bogus", "interp, jit")] {
        let out = on(&dev, &["ssb", "run", "Q1.1", "--engine", engine]);
        clap_refuses(out, engine, values);
    }
}

#[test]
fn vm_run_takes_engine_and_the_old_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("ret42.bin");
    std::fs::write(&prog, RET42).unwrap();
    let vm = |extra: &[&str]| {
        csx()
            .args(["vm", "run"])
            .arg(&prog)
            .arg("--json")
            .args(extra)
            .output()
            .expect("csx runs")
    };
    let engines: &[&str] = if cfg!(target_arch = "x86_64") {
        &["interp", "jit", "quick"]
    } else {
        &["interp", "jit"]
    };
    for engine in engines {
        let out = vm(&["--engine", engine]);
        assert_eq!(stderr(&out), "");
        let report = json(out);
        assert_eq!(report["r0"], 42);
        assert_eq!(report["engine"], Value::from(*engine));
        let out = vm(&[&format!("--{engine}")]);
        assert_eq!(stderr(&out), note(engine));
        let report = json(out);
        assert_eq!(report["engine"], Value::from(*engine), "--{engine}");
    }
    // No flag: the JIT, as before.
    assert_eq!(json(vm(&[]))["engine"], "jit");
    clap_refuses(vm(&["--engine", "bogus"]), "bogus", "interp, jit, quick");
    let both = vm(&["--engine", "jit", "--quick"]);
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
}
