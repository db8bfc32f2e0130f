//! `csx vm run` and `csx vm disasm` as a user runs them: output, JSON and exit codes.

use std::path::{Path, PathBuf};
use std::process::Output;

use csx_testkit::tools;

use crate::csx;

/// Exit statuses documented in `csx --help`.
const EXIT_ERROR: i32 = 1;
const EXIT_TRAP: i32 = 3;

/// `mov r0, 42; exit`.
const RETURN_42: &[u8] = &[
    0xb7, 0x00, 0, 0, 42, 0, 0, 0, //
    0x95, 0x00, 0, 0, 0, 0, 0, 0,
];
/// `ldxdw r0, [r1+8]; exit`: reads past 8 bytes of memory.
const LOAD_AT_8: &[u8] = &[
    0x79, 0x10, 8, 0, 0, 0, 0, 0, //
    0x95, 0x00, 0, 0, 0, 0, 0, 0,
];
/// `ldxdw r0, [r1]; add r0, r2; exit`.
const FIRST_WORD_PLUS_LEN: &[u8] = &[
    0x79, 0x10, 0, 0, 0, 0, 0, 0, //
    0x0f, 0x20, 0, 0, 0, 0, 0, 0, //
    0x95, 0x00, 0, 0, 0, 0, 0, 0,
];
/// `ja -1`: loops forever.
const SPIN: &[u8] = &[0x05, 0x00, 0xff, 0xff, 0, 0, 0, 0];

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("temp dir is writable");
    path
}

fn vm(args: &[&str], prog: &Path) -> Output {
    csx()
        .arg("vm")
        .args(&args[..1])
        .arg(prog)
        .args(&args[1..])
        .output()
        .expect("csx runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The engine flags: the quick tier exists on x86-64 hosts only.
fn engines() -> &'static [&'static str] {
    if cfg!(target_arch = "x86_64") {
        &["--engine=jit", "--engine=interp", "--engine=quick"]
    } else {
        &["--engine=jit", "--engine=interp"]
    }
}

#[test]
fn prints_r0_in_hex_on_both_engines() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "ret42.bin", RETURN_42);
    for &engine in engines() {
        let out = vm(&["run", engine], &prog);
        assert!(out.status.success(), "{engine}: {}", stderr(&out));
        assert_eq!(stdout(&out), "0x2a\n");
    }
}

/// `csx vm run P | head -0`: the reader of standard output left before anything was
/// written. The command ends as SIGPIPE ends `cat` (status 141), with nothing on
/// standard error (it used to panic: "failed printing to stdout").
#[test]
fn a_closed_standard_output_ends_the_command_quietly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "ret42.bin", RETURN_42);
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = csx()
        .args(["vm", "run"])
        .arg(&prog)
        .stdout(writer)
        .output()
        .expect("csx runs");
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

#[test]
fn memory_is_r1_and_its_length_r2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "p.bin", FIRST_WORD_PLUS_LEN);
    let out = vm(
        &["run", "--mem-hex", "05 00 00 00 00 00 00 00  ff ff"],
        &prog,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "0xf\n");

    let mem = write(dir.path(), "mem.bin", &[1, 0, 0, 0, 0, 0, 0, 0]);
    let out = vm(
        &[
            "run",
            "--engine=interp",
            "--mem-file",
            mem.to_str().expect("utf-8"),
        ],
        &prog,
    );
    assert_eq!(stdout(&out), "0x9\n");
}

#[test]
fn a_trap_names_pc_and_instruction_and_exits_3() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "oob.bin", LOAD_AT_8);
    for &engine in engines() {
        let out = vm(&["run", engine, "--mem-hex", "0000000000000000"], &prog);
        assert_eq!(out.status.code(), Some(EXIT_TRAP), "{engine}");
        let err = stderr(&out);
        assert!(err.contains("trap at pc 0"), "{engine}: {err}");
        assert!(err.contains("ldxdw"), "{engine}: {err}");
        assert!(err.contains("out-of-bounds"), "{engine}: {err}");
        assert!(stdout(&out).is_empty());
    }
}

#[test]
fn fuel_bounds_an_infinite_loop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "spin.bin", SPIN);
    let out = vm(&["run", "--fuel", "1000", "--json"], &prog);
    assert_eq!(out.status.code(), Some(EXIT_TRAP));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(json["r0"].is_null());
    assert_eq!(json["trap"]["pc"], 0);
    assert!(json["trap"]["message"]
        .as_str()
        .expect("message")
        .contains("fuel"));
    assert!(json["fuel_used"].as_u64().expect("fuel_used") > 1000);
}

#[test]
fn json_with_repeat_reports_the_mean() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "ret42.bin", RETURN_42);
    let out = vm(&["run", "--json", "--runs", "100"], &prog);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["r0"], 42);
    assert_eq!(json["r0_hex"], "0x2a");
    assert_eq!(json["engine"], "jit");
    assert_eq!(json["runs"], 101);
    assert!(json["trap"].is_null());
    assert!(json["ns_per_run"].as_f64().expect("ns_per_run") > 0.0);

    let out = vm(&["run", "--engine=interp", "--runs", "10"], &prog);
    let text = stdout(&out);
    assert!(text.starts_with("0x2a\n"), "{text}");
    assert!(
        text.contains("ns/run (mean of 10 runs after 1 warm-up, interp)"),
        "{text}"
    );
}

#[test]
fn time_counted_times_counting_runs_and_needs_repeat() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "ret42.bin", RETURN_42);
    for &engine in engines() {
        let out = vm(
            &["run", engine, "--json", "--runs", "5", "--time-counted"],
            &prog,
        );
        assert!(out.status.success(), "{engine}: {}", stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(json["r0"], 42, "{engine}");
        assert_eq!(json["counted"], true, "{engine}");
        assert_eq!(json["runs"], 6, "{engine}");

        let out = vm(&["run", engine, "--runs", "5", "--time-counted"], &prog);
        let text = stdout(&out);
        assert!(
            text.contains("ns/run (mean of 5 counted runs after 1 warm-up"),
            "{engine}: {text}"
        );
    }
    let out = vm(&["run", "--json", "--runs", "5"], &prog);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["counted"], false);

    // Without --runs there is nothing to time: a command-line error.
    let out = vm(&["run", "--time-counted"], &prog);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--runs"), "{}", stderr(&out));
}

#[test]
fn errors_name_the_file_and_exit_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.o");
    let out = vm(&["run"], &missing);
    assert_eq!(out.status.code(), Some(EXIT_ERROR));
    assert!(stderr(&out).contains("missing.o"), "{}", stderr(&out));

    // Falls off the end: the verifier rejects it, naming the file.
    let prog = write(dir.path(), "noexit.bin", &RETURN_42[..8]);
    let out = vm(&["run"], &prog);
    assert_eq!(out.status.code(), Some(EXIT_ERROR));
    assert!(stderr(&out).contains("verifying"), "{}", stderr(&out));
    assert!(stderr(&out).contains("noexit.bin"), "{}", stderr(&out));

    let prog = write(dir.path(), "ret42.bin", RETURN_42);
    let out = vm(&["run", "--entry", "main"], &prog);
    assert_eq!(out.status.code(), Some(EXIT_ERROR));
    assert!(stderr(&out).contains("raw bytecode"), "{}", stderr(&out));

    let out = vm(&["run", "--mem-hex", "abc"], &prog);
    assert_eq!(out.status.code(), Some(EXIT_ERROR));
    assert!(stderr(&out).contains("--mem-hex"), "{}", stderr(&out));
}

/// Compiles C to an eBPF object with clang, as users do.
fn compile_c(dir: &Path, source: &str) -> PathBuf {
    let c = write(dir, "prog.c", source.as_bytes());
    let object = tools::compile_bpf(tools::clang(), &c, std::iter::empty::<&str>());
    write(dir, "prog.o", &object)
}

const TWO_PROGRAMS: &str = r#"
typedef unsigned long long u64;
u64 sum(const u64 *mem, u64 len) {
    u64 s = 0;
    for (u64 i = 0; i < len / 8; i++)
        s += mem[i];
    return s;
}
u64 count(const u64 *mem, u64 len) { (void)mem; return len / 8; }
"#;

#[test]
fn runs_and_disassembles_elf_objects_by_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let obj = compile_c(dir.path(), TWO_PROGRAMS);
    let mem = "0200000000000000 0300000000000000 0400000000000000";
    let out = vm(&["run", "--entry", "sum", "--mem-hex", mem], &obj);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "0x9\n");
    let out = vm(
        &[
            "run",
            "--entry",
            "count",
            "--engine=interp",
            "--mem-hex",
            mem,
        ],
        &obj,
    );
    assert_eq!(stdout(&out), "0x3\n");

    // Two programs and no --entry: the error lists both.
    let out = vm(&["run"], &obj);
    assert_eq!(out.status.code(), Some(EXIT_ERROR));
    let err = stderr(&out);
    assert!(err.contains("sum") && err.contains("count"), "{err}");

    let out = vm(&["disasm", "--entry", "count"], &obj);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("exit"), "{text}");
    assert!(text.contains("count"), "{text}");
}

/// `--mem-file` reads at most what one region maps: a larger file is refused from its
/// size, and an endless one (/dev/zero) once a byte past the limit arrives, naming the
/// limit (the command runs under a 6 GB address-space limit, which an unbounded read
/// would hit).
#[test]
fn mem_file_reads_at_most_one_region() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "ret42.bin", RETURN_42);
    let big = dir.path().join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(5 << 30)
        .unwrap();
    let limit = csx_ebpf::limits::REGION_SIZE_MAX.to_string();
    for file in [big.to_str().unwrap(), "/dev/zero"] {
        let script = "ulimit -v 6000000; exec \"$0\" vm run \"$1\" --mem-file \"$2\"";
        let out = std::process::Command::new("sh")
            .args(["-c", script, env!("CARGO_BIN_EXE_csx")])
            .arg(&prog)
            .arg(file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(EXIT_ERROR), "{file}: {out:?}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("has more than {limit} bytes")) && err.contains(file),
            "{file}: {err}"
        );
    }
}

/// `--repeat` stops at the first trap and reports it (exit 3), however many runs were
/// asked for.
#[test]
fn repeat_stops_at_the_first_trap() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prog = write(dir.path(), "spin.bin", SPIN);
    let start = std::time::Instant::now();
    let out = vm(
        &["run", "--runs", "1000000", "--fuel", "100000", "--json"],
        &prog,
    );
    assert_eq!(out.status.code(), Some(EXIT_TRAP), "{}", stderr(&out));
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["runs"], 1, "the warm-up trapped: {report}");
    assert!(report["trap"]["message"].as_str().unwrap().contains("fuel"));
}

/// An object calling device functions disassembles, each call named.
#[test]
fn disasm_names_device_functions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("helpers.c");
    std::fs::write(
        &src,
        "#include \"csx.h\"\nCSX_PROGRAM(h) { csx_memset(win0, 1, win0_len); \
         return csx_sort_u64(win0, win0_len); }\n",
    )
    .unwrap();
    let obj = dir.path().join("helpers.o");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/include");
    let object = tools::compile_bpf(tools::clang(), &src, [format!("-I{}", include.display())]);
    std::fs::write(&obj, object).unwrap();
    let out = vm(&["disasm"], &obj);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("# csx_memset"), "{text}");
    assert!(text.contains("# csx_sort_u64"), "{text}");
}
