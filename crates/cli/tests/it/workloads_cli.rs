//! `csx demo`, `csx build`, `csx gen` and `csx bench workloads` run as a user would run
//! them: the tests check what they print (rows, keys, agreement), never how fast.

use crate::csx;

/// The standard output of a successful `--json` run and its lines as JSON objects.
fn json_rows(out: &std::process::Output) -> (String, Vec<serde_json::Value>) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is a JSON object"))
        .collect();
    (stdout, rows)
}

#[test]
fn demo_runs_every_workload_and_the_answers_agree() {
    let dir = tempfile::tempdir().unwrap();
    let out = csx()
        .current_dir(dir.path())
        .args(["demo", "--size", "4MiB"])
        .output()
        .expect("csx starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for w in csx_workloads::WORKLOADS {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{} ", w.name))),
            "{} is missing from:\n{stdout}",
            w.name
        );
    }
    assert!(stdout.contains("answers agree"), "{stdout}");
    assert!(stdout.contains("Where the time went"), "{stdout}");
    // The like-for-like columns and the modelled verdict.
    assert!(
        stdout.contains("cold") && stdout.contains("warm"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Modelled (daisy profile), cold: offloading won"),
        "{stdout}"
    );
}

#[test]
fn demo_json_splits_both_sides_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    // The SDK programs are built in: the demo runs with no compiler to be found.
    let out = csx()
        .current_dir(dir.path())
        .env("CSX_CLANG", "/nonexistent/clang")
        .args(["demo", "--size", "2MiB", "--json"])
        .output()
        .expect("csx starts");
    let (stdout, rows) = json_rows(&out);
    assert_eq!(rows.len(), csx_workloads::WORKLOADS.len(), "{stdout}");
    let ms = |row: &serde_json::Value, key: &str| {
        let v = row[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {row}"));
        assert!(v >= 0.0, "{key} in {row}");
        v
    };
    for row in &rows {
        // Both sides, cold and warm; the host's cold modelled request adds its bytes over
        // the media and the link to the compute.
        let (cold, warm) = (&row["host_cold"], &row["host_warm"]);
        ms(cold, "read_ms");
        ms(warm, "compute_ms");
        assert!(
            ms(cold, "modelled_ms") > ms(warm, "modelled_ms") - 1e-9,
            "{row}"
        );
        assert!(
            ms(cold, "modelled_ms") + 1e-9
                >= ms(row, "host_modelled_media_ms") + ms(row, "host_modelled_link_ms"),
            "{row}"
        );
        for side in ["device_cold", "device_warm"] {
            let d = &row[side];
            for key in ["stage_ms", "execute_ms", "result_ms", "modelled_stage_ms"] {
                ms(d, key);
            }
            // The device stages from its media on every run: a modelled stage cost.
            assert!(ms(d, "modelled_stage_ms") > 0.0, "{row}");
        }
        assert!(ms(row, "modelled_cold_speedup") > 0.0, "{row}");
        for key in ["host_bound", "device_bound"] {
            let b = row[key].as_str().unwrap_or_default();
            assert!(["media", "link", "compute"].contains(&b), "{key} in {row}");
        }
        // 2 MiB over 13 workloads: small enough for the interpreter column.
        ms(row, "interpreter_ms");
    }
}

#[test]
fn build_checks_programs_against_the_function_table() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.c");
    std::fs::write(
        &good,
        "#include <csx.h>\nCSX_PROGRAM(good)\n{\n    return 0;\n}\n",
    )
    .unwrap();
    let out = csx().arg("build").arg(&good).output().expect("csx starts");
    assert!(
        out.status.success(),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("good.o").is_file());

    let bad = dir.path().join("bad.c");
    std::fs::write(
        &bad,
        "#include <csx.h>\nextern long csx_no_such_function(long x);\n\
         CSX_PROGRAM(bad)\n{\n    return csx_no_such_function(1);\n}\n",
    )
    .unwrap();
    let out = csx().arg("build").arg(&bad).output().expect("csx starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(stderr.contains("csx_no_such_function"), "{stderr}");

    // Building needs clang, and says so when it is missing.
    let out = csx()
        .env("CSX_CLANG", "/nonexistent/clang")
        .arg("build")
        .arg(&good)
        .output()
        .expect("csx starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("clang not found") && stderr.contains("scripts/setup.sh"),
        "{stderr}"
    );
}

#[test]
fn gen_is_reproducible() {
    let gen = |seed: &str| {
        let out = csx()
            .args(["gen", "text", "--size", "256KiB", "--seed", seed])
            .output()
            .expect("csx starts");
        assert!(out.status.success());
        out.stdout
    };
    let a = gen("7");
    assert_eq!(a.len(), 256 << 10);
    assert_eq!(a, gen("7"));
    assert_ne!(a, gen("8"));
}

#[test]
fn bench_workloads_json_has_a_row_per_workload_and_mode_and_all_agree() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let out = csx()
        .args([
            "bench",
            "workloads",
            "--json",
            "--size",
            "64KiB",
            "--runs",
            "1",
        ])
        .arg("--plots")
        .arg(&plots)
        .output()
        .expect("csx starts");
    let (stdout, rows) = json_rows(&out);
    assert_eq!(rows.len(), 5 * csx_workloads::WORKLOADS.len(), "{stdout}");
    for w in csx_workloads::WORKLOADS {
        for (mode, cache) in [
            ("native", "cold"),
            ("native", "warm"),
            ("interpreter", "warm"),
            ("jit", "cold"),
            ("jit", "warm"),
        ] {
            let row = rows
                .iter()
                .find(|r| r["workload"] == w.name && r["mode"] == mode && r["cache"] == cache)
                .unwrap_or_else(|| panic!("no row for {} {mode} {cache}", w.name));
            assert_eq!(row["agree"], true, "{row}");
            // 64 KiB of data; bitmap's input is its compressed form.
            let input = row["input_bytes"].as_u64().expect("a byte count");
            assert!(input > 0 && input <= 64 << 10, "{row}");
            if w.name != "bitmap" {
                assert_eq!(input, 64 << 10, "{row}");
            }
            for times in ["wall_ms", "modelled_ms"] {
                for phase in ["load", "activate", "stage", "execute", "result", "total"] {
                    let v = row[times][phase].as_f64();
                    assert!(v.is_some_and(|v| v >= 0.0), "{times}.{phase} in {row}");
                }
            }
            // The device loads and activates every run; the host does neither.
            let activate = row["wall_ms"]["activate"].as_f64().unwrap();
            assert_eq!(activate > 0.0, mode != "native", "{row}");
        }
    }
    for plot in [
        "workloads-breakdown.svg",
        "workloads-engines.svg",
        "workloads-select.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(plot)).expect("the plot is written");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}

#[test]
fn bench_workloads_refuses_an_unknown_workload() {
    let out = csx()
        .args(["bench", "workloads", "--only", "no_such_workload"])
        .output()
        .expect("csx starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no_such_workload"), "{stderr}");
}
