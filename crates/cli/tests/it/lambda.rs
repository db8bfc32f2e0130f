//! `csx read`, `csx write` and `csx cache drop` end to end: a device initialised by the
//! CLI, data from `csx gen`, the SDK's λ programs named by name. Every mode must write
//! the same output bytes; the JSON account must count every request on the side that ran
//! it.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::csx;

fn run(dev: &Path, args: &[&str]) -> Output {
    csx()
        .env("CSX_DEVICE", dev)
        .args(args)
        .output()
        .expect("csx runs")
}

fn ok(out: Output) -> (String, String) {
    assert!(
        out.status.success(),
        "csx failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).expect("UTF-8 output"),
        String::from_utf8(out.stderr).expect("UTF-8 errors"),
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn init(dir: &Path) -> std::path::PathBuf {
    let dev = dir.join("dev");
    crate::device_exec::init_device(&dev, "64MiB", "64MiB");
    dev
}

#[test]
fn read_modes_agree_and_account() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = init(tmp.path());
    let data = tmp.path().join("u32.bin");
    ok(run(
        &dev,
        &[
            "gen",
            "u32",
            "--size",
            "1000000",
            "-o",
            data.to_str().unwrap(),
        ],
    ));
    ok(run(&dev, &["put", data.to_str().unwrap(), "/d/u32"]));
    ok(run(&dev, &["lambda", "cache-drop"]));
    let mut outputs = Vec::new();
    for (mode, threads) in [("host", "1"), ("device", "2"), ("auto", "3")] {
        let out = tmp.path().join(format!("{mode}.out"));
        let (stdout, stderr) = ok(run(
            &dev,
            &[
                "lambda",
                "read",
                "/d/u32",
                "--lambda",
                "stats32",
                "--chunk",
                "96KiB",
                "--mode",
                mode,
                "--threads",
                threads,
                "--output-size",
                "32",
                "--period",
                "4",
                "--profile-len",
                "1",
                "--trace",
                "--json",
                "--output",
                out.to_str().unwrap(),
            ],
        ));
        let v = json(&stdout);
        // 1000000 bytes in 96 KiB chunks: 11 requests, the last one short.
        let host = v["requests_host"].as_u64().unwrap();
        let device = v["requests_device"].as_u64().unwrap();
        let profiled = v["requests_profiled"].as_u64().unwrap();
        assert_eq!(host + device + profiled, 11, "{v}");
        match mode {
            "host" => assert_eq!(host, 11),
            "device" => assert_eq!(device, 11),
            _ => assert!(profiled >= 1, "{v}"),
        }
        assert_eq!(v["input_bytes"], 1_000_000);
        assert_eq!(v["output_bytes"], 11 * 32);
        assert!(v["modelled_ns"].as_u64().unwrap() > 0);
        assert!(v["wall_ns"].as_u64().unwrap() > 0);
        assert!(v["link_bytes"].is_u64());
        assert_eq!(stderr.matches("request ").count(), 11, "{stderr}");
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outputs[0].len(), 11 * 32);
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], outputs[2]);
    // The counts of the 11 records add up to the file's 250000 values.
    let count: u64 = outputs[0]
        .chunks(32)
        .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
        .sum();
    assert_eq!(count, 250_000);
}

#[test]
fn write_modes_agree_and_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = init(tmp.path());
    let rle = tmp.path().join("bitmap.rle");
    ok(run(
        &dev,
        &[
            "gen",
            "bitmap",
            "--size",
            "64KiB",
            "-o",
            rle.to_str().unwrap(),
        ],
    ));
    let mut contents = Vec::new();
    for mode in ["host", "device", "auto"] {
        let path = format!("/d/bitmap-{mode}");
        let (stdout, _) = ok(run(
            &dev,
            &[
                "lambda",
                "write",
                &path,
                "--lambda",
                "bitmap",
                "--input",
                rle.to_str().unwrap(),
                "--chunk",
                "1GiB",
                "--output-size",
                "64KiB",
                "--mode",
                mode,
                "--json",
            ],
        ));
        let v = json(&stdout);
        assert_eq!(v["output_bytes"], 64 << 10, "{v}");
        let local = tmp.path().join(format!("{mode}.bitmap"));
        ok(run(&dev, &["get", &path, local.to_str().unwrap()]));
        contents.push(std::fs::read(&local).unwrap());
    }
    assert_eq!(contents[0].len(), 64 << 10);
    assert_eq!(contents[0], contents[1]);
    assert_eq!(contents[0], contents[2]);
    // A missing file and a bad mode are errors with their reasons.
    let out = run(
        &dev,
        &[
            "lambda", "read", "/d/none", "--lambda", "stats64", "--mode", "host",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = run(
        &dev,
        &[
            "lambda", "read", "/d/none", "--lambda", "stats64", "--mode", "sideways",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode"));
}

#[test]
fn bench_lambda_runs_every_case_in_every_mode() {
    // Small: 8 requests of 128 KiB per file. The bench itself fails if a mode's outputs
    // differ from the host λ's.
    let plots = tempfile::tempdir().unwrap();
    let out = csx()
        .env_remove("CSX_DEVICE")
        .args([
            "bench", "lambda", "--size", "1MiB", "--chunk", "128KiB", "--json", "--plots",
        ])
        .arg(plots.path())
        .output()
        .expect("csx runs");
    let (stdout, _) = ok(out);
    let rows: Vec<Value> = stdout.lines().map(json).collect();
    // 4 programs × cold/warm, bitmap, 3 dataset sizes, 2 two-app runs; 4 modes each.
    assert_eq!(rows.len(), 14 * 4);
    for group in rows.chunks(4) {
        let total = |r: &Value| {
            ["requests_host", "requests_device", "requests_profiled"]
                .iter()
                .map(|k| r[k].as_u64().unwrap())
                .sum::<u64>()
        };
        let modes: Vec<&str> = group.iter().map(|r| r["mode"].as_str().unwrap()).collect();
        assert_eq!(modes, ["host", "buffered", "device", "auto"]);
        for r in group {
            assert_eq!(total(r), total(&group[0]), "{r}");
            assert!(r["modelled_ns"].as_u64().unwrap() > 0, "{r}");
            assert_eq!(r["scenario"], group[0]["scenario"]);
        }
        assert_eq!(group[0]["requests_host"], total(&group[0]));
        assert_eq!(group[2]["requests_device"], total(&group[2]));
    }
    // The plots: one group of four bars per case, labels escaped.
    for file in ["lambda-modelled.svg", "lambda-wall.svg"] {
        let svg = std::fs::read_to_string(plots.path().join(file)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{file}"
        );
        assert!(svg.contains("data &lt; cache"), "{file}");
        assert!(!svg.contains("NaN"), "{file}");
        assert_eq!(
            svg.matches("<title>").count(),
            rows.len(),
            "{file}: a bar per row"
        );
    }
}
