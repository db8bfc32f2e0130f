//! `csx op list` and `csx pipe` as a user runs them.

use std::path::Path;

use crate::csx;

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn device_with(dir: &Path, path: &str, data: &[u8]) {
    ok(&csx()
        .args(["device", "init", "--nvm-size", "64MiB", "--state"])
        .arg(dir.join("dev"))
        .output()
        .unwrap());
    let local = dir.join("data.bin");
    std::fs::write(&local, data).unwrap();
    ok(&csx()
        .arg("put")
        .arg("--device")
        .arg(dir.join("dev"))
        .arg(&local)
        .arg(path)
        .output()
        .unwrap());
}

#[test]
fn op_list_shows_every_operator_with_its_parameters() {
    let text = ok(&csx().args(["op", "list"]).output().unwrap());
    for name in [
        "passthrough",
        "filter",
        "aggregate",
        "grep",
        "datagen",
        "decompress",
        "encrypt",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&csx().args(["op", "list", "--json"]).output().unwrap())).unwrap();
    let filter = json["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "filter")
        .unwrap();
    let op = filter["params"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "op")
        .unwrap();
    assert_eq!(op["required"], true);
    assert_eq!(op["choices"][6], "between");
}

#[test]
fn pipe_filters_and_aggregates_a_device_file() {
    let tmp = tempfile::tempdir().unwrap();
    let values: Vec<u32> = (0..100_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % 1000)
        .collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    device_with(tmp.path(), "/nums", &bytes);
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
    let dev = tmp.path().join("dev");
    let out = csx()
        .env("CSX_DEVICE", &dev)
        .args([
            "op",
            "pipe",
            "filter --type u32 --op gt --value 100 | aggregate --type u32 --text",
        ])
        .args(["/nums", "--chunk", "64KiB"])
        .output()
        .unwrap();
    assert_eq!(ok(&out), want);
    // The report, with the output kept on the device.
    let out = csx()
        .env("CSX_DEVICE", &dev)
        .args([
            "op",
            "pipe",
            "filter -t u32 -o gt -v 100 | aggregate -t u32 --text",
            "--json",
        ])
        .args(["/nums", "--to", "/sum.txt"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(report["stages"].as_array().unwrap().len(), 2);
    assert_eq!(report["bytes_in"], bytes.len() as u64);
    assert_eq!(report["stages"][0]["bytes_out"], 4 * kept.len() as u64);
    assert_eq!(report["device_to_host"], 0);
    let local = tmp.path().join("sum.txt");
    ok(&csx()
        .env("CSX_DEVICE", &dev)
        .args(["get", "/sum.txt"])
        .arg(&local)
        .output()
        .unwrap());
    assert_eq!(std::fs::read_to_string(&local).unwrap(), want);
}

#[test]
fn pipe_names_bad_operators_and_fails_without_leaving_output() {
    let tmp = tempfile::tempdir().unwrap();
    device_with(tmp.path(), "/bad.lz4", b"not a csx_lz4 stream at all");
    let dev = tmp.path().join("dev");
    let out = csx()
        .env("CSX_DEVICE", &dev)
        .args([
            "op",
            "pipe",
            "filter --op gt --value 1 | agregate",
            "/bad.lz4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`agregate`") && err.contains("aggregate, grep"),
        "{err}"
    );
    let local = tmp.path().join("out.bin");
    let out = csx()
        .env("CSX_DEVICE", &dev)
        .args(["op", "pipe", "decompress", "/bad.lz4", "--output"])
        .arg(&local)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("decompress") && err.contains("CSX_EBADMSG"),
        "{err}"
    );
    assert!(!local.exists());
    assert!(!tmp.path().join("out.bin.partial").exists());
}

#[test]
fn a_signal_stops_csx_pipe_and_its_programs_are_unloaded() {
    for (signal, status) in [("-INT", 130), ("-TERM", 143), ("-HUP", 129)] {
        let tmp = tempfile::tempdir().unwrap();
        device_with(tmp.path(), "/x", b"x");
        let dev = tmp.path().join("dev");
        let child = csx()
            .env("CSX_DEVICE", &dev)
            .args([
                "op",
                "pipe",
                "datagen --size 1TiB | passthrough | aggregate",
                "--discard",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Long enough for the stages to be loaded and running.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let sent = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{signal}: {err}");
        assert!(err.contains("programs unloaded"), "{err}");
        let info = ok(&csx()
            .args(["device", "info"])
            .arg("--device")
            .arg(&dev)
            .output()
            .unwrap());
        assert!(
            info.contains("programs     0 of"),
            "{signal} left programs loaded:\n{info}"
        );
    }
}
