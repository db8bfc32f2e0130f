//! Every old spelling of a command or flag still works, hidden, and says once on stderr
//! what replaced it.

use std::path::Path;
use std::process::Output;

use crate::csx;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `args` and checks it succeeded with `note` on stderr; returns stdout.
fn old(args: &[&str], note: &str) -> String {
    let out: Output = csx().env_remove("CSX_DEVICE").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{args:?} failed: {stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains(note), "{args:?}: no {note:?} in {stderr}");
    assert_eq!(
        stderr.matches("deprecated").count(),
        1,
        "{args:?}: one note: {stderr}"
    );
    String::from_utf8(out.stdout).unwrap()
}

fn summed_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn old_spellings_work_with_one_note_each() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let d = s(&dev);
    let out = csx()
        .args([
            "device",
            "init",
            "--state",
            d,
            "--nvm-size",
            "64MiB",
            "--slm-size",
            "16MiB",
        ])
        .args(["--link-gbps", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--link-gbps is deprecated; use --link-bandwidth"));
    let nums = tmp.path().join("nums.bin");
    let out = csx()
        .args(["gen", "u64", "--size", "64KiB", "-o", s(&nums)])
        .output()
        .unwrap();
    assert!(out.status.success());
    old(
        &["--device", d, "put", s(&nums), "/nums"],
        "--device before the command is deprecated",
    );
    let info = old(
        &["info", "--device", d, "--json"],
        "`csx info` is deprecated; use `csx device info`",
    );
    assert!(info.contains("nvm_size_bytes"), "{info}");
    let f = old(&["functions", "--device", d], "use `csx device functions`");
    assert!(f.contains("csx_"), "{f}");
    old(
        &[
            "read", "/nums", "--lambda", "stats64", "--mode", "host", "--device", d,
        ],
        "use `csx lambda read`",
    );
    old(
        &[
            "lambda",
            "read",
            "/nums",
            "--lambda",
            "stats64",
            "--mode",
            "host",
            "--device",
            d,
            "--state-dir",
            d,
        ],
        "--state-dir is deprecated; use --state",
    );
    old(
        &["cache", "drop", "--device", d],
        "use `csx lambda cache-drop`",
    );
    let rle = tmp.path().join("rle.bin");
    let out = csx()
        .args(["gen", "bitmap", "--size", "64KiB", "-o", s(&rle)])
        .output()
        .unwrap();
    assert!(out.status.success());
    old(
        &[
            "write",
            "/bm",
            "--lambda",
            "bitmap",
            "--input",
            s(&rle),
            "--chunk",
            "1GiB",
            "--output-size",
            "64KiB",
            "--mode",
            "host",
            "--device",
            d,
        ],
        "use `csx lambda write`",
    );
    let text = old(
        &[
            "pipe",
            "aggregate --type u32 --text",
            "--input",
            "/nums",
            "--device",
            d,
        ],
        "use `csx op pipe`",
    );
    assert!(!text.is_empty());
    // The old command keeps its old flags: --output DEVPATH is a device file there.
    old(
        &[
            "pipe",
            "aggregate --type u32 --text",
            "--input",
            "/nums",
            "--output",
            "/sum",
            "--device",
            d,
        ],
        "use `csx op pipe`",
    );
    let local_nums = tmp.path().join("nums.copy");
    old(
        &[
            "op",
            "pipe",
            "aggregate --type u32 --text",
            "--input-local",
            s(&nums),
            "-o",
            s(&local_nums),
            "--device",
            d,
        ],
        "op pipe --input-local is deprecated; use --input FILE",
    );
    let local_sum = tmp.path().join("sum.txt");
    old(
        &[
            "op",
            "pipe",
            "aggregate --type u32 --text",
            "/nums",
            "--output-local",
            s(&local_sum),
            "--device",
            d,
        ],
        "op pipe --output-local is deprecated; use -o/--output FILE",
    );
    assert_eq!(
        std::fs::read_to_string(&local_sum).unwrap(),
        summed_text(&local_nums)
    );
    // The old command's --output went to the device, with the same sum.
    let got = csx()
        .args(["get", "/sum", "-", "--device", d])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        summed_text(&local_nums)
    );
    let raw = tmp.path().join("r7.bin");
    // mov r0, 7; exit
    std::fs::write(&raw, [0xb7, 0, 0, 0, 7, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    let ex = old(
        &["exec", s(&raw), "--input", "/nums", "--device", d],
        "exec --input is deprecated; give the device file as an argument",
    );
    assert!(ex.contains("(65536 bytes)"), "{ex}");
    // vm run --repeat: the old repetition flag.
    let prog = tmp.path().join("p.bin");
    // mov r0, 7; exit
    std::fs::write(
        &prog,
        [0xb7, 0, 0, 0, 7, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0],
    )
    .unwrap();
    old(
        &["vm", "run", s(&prog), "--repeat", "3"],
        "vm run --repeat is deprecated; use --runs",
    );
    // Umount of a directory that is not mounted: the note, then the mount's own error.
    let out = csx().args(["umount", s(tmp.path())]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("use `csx fs umount`"));

    // Arrays.
    let arr = tmp.path().join("arr");
    let a = s(&arr);
    old(
        &[
            "array",
            "init",
            "--state",
            a,
            "--members",
            "2",
            "--nvm-size",
            "16MiB",
            "--slm-size",
            "4MiB",
            "--command-latency-us",
            "5",
        ],
        "--command-latency-us is deprecated; use --link-latency-us",
    );
    let info = old(
        &["array", "info", "--state", a, "--json"],
        "use --device array:DIR",
    );
    assert!(info.contains("members"), "{info}");
    let dev_a = format!("array:{a}");
    let out = csx()
        .args(["put", s(&nums), "/k", "--device", &dev_a])
        .output()
        .unwrap();
    assert!(out.status.success());
    old(&["sort", "/k", "--device", &dev_a], "use `csx array sort`");
    old(
        &["array", "sort", "/k", "--output", "/k2", "--device", &dev_a],
        "array sort --output is deprecated; use --to DEVPATH",
    );
}

#[test]
fn old_benchmark_flags_parse_as_the_new_ones() {
    // The benchmarks take minutes; their old flags are checked by the parser: accepted,
    // hidden from --help.
    for (args, hidden) in [
        (&["bench", "ssb", "--help"][..], "--repeat"),
        (&["bench", "capi", "--help"], "--rounds"),
        (&["bench", "capi", "--help"], "--uri"),
    ] {
        let out = csx().args(args).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(!help.contains(hidden), "{args:?} shows {hidden}");
        assert!(help.contains("--runs"), "{args:?}: {help}");
    }
}

#[test]
fn a_device_flag_wins_over_csx_device_wherever_it_stands() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev");
    let d = s(&dev);
    let out = csx()
        .args(["device", "init", "--state", d, "--nvm-size", "16MiB"])
        .args(["--slm-size", "4MiB"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // $CSX_DEVICE names a device nobody serves: using it fails.
    let unserved = "tcp://127.0.0.1:1";
    for args in [&["ls", "/", "--device", d][..], &["--device", d, "ls", "/"]] {
        let out = csx()
            .env("CSX_DEVICE", unserved)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = csx()
        .env("CSX_DEVICE", unserved)
        .args(["ls", "/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(unserved));
}
