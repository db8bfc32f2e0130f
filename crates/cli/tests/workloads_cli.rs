//! `csx demo`, `csx build` and `csx gen` run as a user would run them.

use std::process::Command;

fn csx() -> Command {
    Command::new(env!("CARGO_BIN_EXE_csx"))
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
