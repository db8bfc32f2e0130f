//! `csx vm conformance-plugin` driven exactly as the bpf_conformance runner drives a
//! plugin, over every vector of `shared/conformance/vectors.json`, on both engines.
//!
//! The runner passes the memory as the first argument and its `--plugin_options` as
//! the second, and the program on stdin, memory and program as bytes in hex each
//! followed by two spaces; it reads r0 in hex from stdout, and a non-zero exit as an
//! error. Runner versions differ on an empty memory: some pass an empty argument, some
//! none (as ebpf-notes.md describes), so vectors without memory run both ways.

use std::fmt::Write as _;

use crate::{csx, run_with_stdin, shared_dir};

/// One vector of `vectors.json`.
struct Vector {
    name: String,
    code: Vec<u8>,
    mem: Vec<u8>,
    result: u64,
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex string in vectors.json");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex in vectors.json"))
        .collect()
}

fn load_vectors() -> Vec<Vector> {
    let path = shared_dir().join("conformance/vectors.json");
    let text = std::fs::read_to_string(&path).expect("vectors.json is readable");
    let json: serde_json::Value = serde_json::from_str(&text).expect("vectors.json is JSON");
    let list = json.as_array().expect("vectors.json is a list");
    list.iter()
        .map(|v| {
            let field = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("vector field {k}"));
            assert_eq!(
                field("error"),
                "",
                "vectors expecting errors are not handled here"
            );
            let result = field("result");
            let hex = result.strip_prefix("0x").expect("result is 0x-prefixed");
            Vector {
                name: field("name").to_string(),
                code: unhex(field("code")),
                mem: unhex(field("mem")),
                result: u64::from_str_radix(hex, 16).expect("result is hex"),
            }
        })
        .collect()
}

/// Bytes the way the runner writes them: two hex digits and two spaces per byte.
fn runner_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 4);
    for b in bytes {
        write!(s, "{b:02x}  ").expect("writing to a String");
    }
    s
}

/// Runs one vector through the plugin; `Err` describes how it failed. With
/// `empty_mem_arg`, an empty memory is passed as an empty argument, not left out.
fn run_vector(v: &Vector, engine_flag: &str, empty_mem_arg: bool) -> Result<(), String> {
    let mut cmd = csx();
    cmd.args(["vm", "conformance-plugin"]);
    if !v.mem.is_empty() || empty_mem_arg {
        cmd.arg(runner_hex(&v.mem));
    }
    cmd.arg(engine_flag);
    // The runner ends the program with a newline.
    let stdin = format!("{}\n", runner_hex(&v.code));
    let out = run_with_stdin(cmd, stdin.as_bytes());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("exit {}: {}", out.status, stderr.trim()));
    }
    let text = stdout.trim();
    let text = text.strip_prefix("0x").unwrap_or(text);
    match u64::from_str_radix(text, 16) {
        Ok(r0) if r0 == v.result => Ok(()),
        Ok(r0) => Err(format!("returned {r0:#x}, expected {:#x}", v.result)),
        Err(_) => Err(format!("printed {stdout:?}, not hex")),
    }
}

fn check_all(engine_flag: &str) {
    let vectors = load_vectors();
    assert_eq!(vectors.len(), 313, "vectors.json changed size");
    let mut failures = Vec::new();
    for v in &vectors {
        if let Err(e) = run_vector(v, engine_flag, false) {
            failures.push(format!("{}: {e}", v.name));
        }
        if v.mem.is_empty() {
            if let Err(e) = run_vector(v, engine_flag, true) {
                failures.push(format!("{} (empty memory argument): {e}", v.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed through the plugin with {engine_flag}:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

#[test]
fn all_vectors_pass_on_the_interpreter() {
    check_all("--interp");
}

#[test]
fn all_vectors_pass_on_the_jit() {
    check_all("--jit");
}

/// The runner's other shape: an empty memory and an empty options argument.
#[test]
fn empty_memory_and_options_arguments() {
    let mut cmd = csx();
    cmd.args(["vm", "conformance-plugin", "", ""]);
    // mov r0, 7; exit
    let out = run_with_stdin(
        cmd,
        runner_hex(&unhex("b7000000070000009500000000000000")).as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[test]
fn errors_go_to_stderr_with_a_non_zero_exit() {
    let mut cmd = csx();
    cmd.args(["vm", "conformance-plugin"]);
    let out = run_with_stdin(cmd, b"zz  ");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a hex digit"), "stderr: {stderr}");
}
