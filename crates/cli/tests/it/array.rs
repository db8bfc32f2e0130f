//! `csx array` and the array side of put/get/ls/stat/rm, run as a user would.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::csx;

fn run(args: &[&str]) -> Output {
    let out = csx().args(args).output().expect("csx runs");
    assert!(
        out.status.success(),
        "csx {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp paths")
}

/// `--profile` takes the links from a device profile; `--link-bandwidth` and
/// `--command-latency-us` override it; an unknown profile is refused by name.
#[test]
fn array_links_come_from_a_device_profile() {
    let tmp = tempfile::tempdir().unwrap();
    let init = |dir: &str, extra: &[&str]| {
        let arr = tmp.path().join(dir);
        let mut args = vec!["array", "init", "--state", s(&arr), "--members", "1"];
        args.extend_from_slice(&["--nvm-size", "16MiB", "--slm-size", "4MiB", "--json"]);
        args.extend_from_slice(extra);
        json(&run(&args))["link"].clone()
    };
    let l = init("a", &["--profile", "lambda-io"]);
    assert_eq!(l["host_bytes_per_sec"], 3_220_000_000u64);
    assert_eq!(l["member_bytes_per_sec"], 0, "λ-IO models no peer link");
    assert_eq!(l["command_latency_ns"], 10_000);
    let l = init(
        "b",
        &[
            "--profile",
            "lambda-io",
            "--link-bandwidth",
            "1Gbps",
            "--link-latency-us",
            "20",
        ],
    );
    assert_eq!(l["host_bytes_per_sec"], 125_000_000);
    assert_eq!(l["member_bytes_per_sec"], 125_000_000);
    assert_eq!(
        (l["command_latency_ns"].clone(), l["d2d_latency_ns"].clone()),
        (20_000.into(), 20_000.into())
    );
    let out = csx()
        .args([
            "array",
            "init",
            "--state",
            s(&tmp.path().join("c")),
            "--members",
            "1",
        ])
        .args(["--profile", "no-such-profile"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-profile"));
}

#[test]
fn array_files_round_trip_with_tagged_extents() {
    let tmp = tempfile::tempdir().unwrap();
    let arr = tmp.path().join("arr");
    let info = json(&run(&[
        "array",
        "init",
        "--state",
        s(&arr),
        "--members",
        "3",
        "--nvm-size",
        "64MiB",
        "--slm-size",
        "16MiB",
        "--engines",
        "1",
        "--link-bandwidth",
        "1Gbps",
        "--json",
    ]));
    assert_eq!(info["members"].as_array().unwrap().len(), 3);
    assert_eq!(info["link"]["host_bytes_per_sec"], 125_000_000);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let local = tmp.path().join("in.bin");
    std::fs::write(&local, &data).unwrap();
    let device = format!("array:{}", s(&arr));
    run(&[
        "put",
        "--device",
        &device,
        s(&local),
        "/d/in",
        "--stripe",
        "16KiB",
    ]);
    run(&[
        "put",
        "--device",
        s(&arr),
        s(&local),
        "/d/one",
        "--member",
        "2",
    ]);

    let st = json(&run(&["stat", "--device", &device, "/d/in", "--json"]));
    assert_eq!(st["size_bytes"], 200_000);
    let extents = st["extents"].as_array().unwrap();
    let mut next = 0;
    for e in extents {
        assert_eq!(e["file_offset"], next);
        let tag = e["tagged_addr"].as_u64().unwrap();
        assert_eq!(
            tag >> 55,
            e["member"].as_u64().unwrap(),
            "upper 9 bits: the disk"
        );
        assert_eq!(tag & ((1 << 55) - 1), e["sector"].as_u64().unwrap());
        // Stripe k of 16 KiB lands on member k % 3.
        assert_eq!(e["member"].as_u64().unwrap(), (next / 16384) % 3);
        next += e["len"].as_u64().unwrap();
    }
    assert_eq!(next, 200_000);
    let one = json(&run(&["stat", "--device", &device, "/d/one", "--json"]));
    assert!(one["extents"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["member"] == 2 && e["tagged_addr"].as_u64().unwrap() >> 55 == 2));

    let out = tmp.path().join("out.bin");
    run(&["get", "--device", &device, "/d/in", s(&out)]);
    assert_eq!(std::fs::read(&out).unwrap(), data);
    let ls = json(&run(&["ls", "--device", &device, "/d", "--json"]));
    assert_eq!(ls.as_array().unwrap().len(), 2);
    run(&["rm", "--device", &device, "/d/one"]);
    let ls = json(&run(&["ls", "--device", &device, "--json"]));
    assert_eq!(ls.as_array().unwrap().len(), 1);

    // A distributed sort, both modes: byte-identical, and the reference order.
    let keys: Vec<u8> = (0..30_000u64)
        .flat_map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x1234).to_le_bytes())
        .collect();
    std::fs::write(&local, &keys).unwrap();
    run(&[
        "put",
        "--device",
        &device,
        s(&local),
        "/k",
        "--stripe",
        "8KiB",
    ]);
    let instant = json(&run(&[
        "array", "sort", "--device", &device, "/k", "--to", "/k.i", "--json",
    ]));
    assert_eq!(instant["keys"], 30_000);
    assert_eq!(instant["links"]["host"]["ingress"], 0);
    assert!(instant["modelled"]["total_ns"].as_u64().unwrap() > 0);
    let host = json(&run(&[
        "array",
        "sort",
        "--device",
        &device,
        "/k",
        "--to",
        "/k.h",
        "--mode",
        "host",
        "--topology",
        "tree",
        "--json",
    ]));
    assert!(host["links"]["host_copy_bytes"].as_u64().unwrap() > 0);
    // At 1 Gbit/s the host path is slower on the modelled clock.
    assert!(host["modelled"]["merge_ns"].as_u64() > instant["modelled"]["merge_ns"].as_u64());
    run(&["get", "--device", &device, "/k.i", s(&out)]);
    let got_i = std::fs::read(&out).unwrap();
    run(&["get", "--device", &device, "/k.h", s(&out)]);
    assert_eq!(std::fs::read(&out).unwrap(), got_i);
    let mut v: Vec<u64> = keys
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    v.sort_unstable();
    let expect: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(got_i, expect);

    // exec runs next to a single-member file (`r0 = r2`: window 0's length); a striped
    // file is refused with a reason.
    let prog = tmp.path().join("len.bin");
    std::fs::write(
        &prog,
        [0xbf, 0x20, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0],
    )
    .unwrap();
    run(&[
        "put",
        "--device",
        &device,
        s(&local),
        "/single",
        "--member",
        "1",
    ]);
    let ex = json(&run(&[
        "exec",
        "--device",
        &device,
        s(&prog),
        "/single",
        "--json",
    ]));
    assert_eq!(ex["r0"], keys.len() as u64, "{ex}");
    let ex = json(&run(&[
        "exec",
        "--device",
        &device,
        s(&prog),
        "/single:8:16",
        "--json",
    ]));
    assert_eq!(ex["r0"], 16, "{ex}");
    let bad = csx()
        .args(["exec", "--device", &device, s(&prog), "/k"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("striped over 3 members"));

    // Bad input: typed messages naming the value and the limit.
    let bad = csx()
        .args([
            "put",
            "--device",
            &device,
            s(&local),
            "/x",
            "--stripe",
            "1000",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(
        msg.contains("stripe size is 1000") && msg.contains("4096"),
        "{msg}"
    );
    let bad = csx()
        .args(["put", "--device", &device, s(&local), "/x", "--member", "9"])
        .output()
        .unwrap();
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(msg.contains("tag 9 names no member"), "{msg}");
}

#[test]
fn bench_array_prices_real_sorts_and_the_thesis_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let plots = tmp.path().join("plots");
    let out = json(&run(&[
        "bench",
        "array",
        "--disks",
        "2,3",
        "--max-size",
        "64KiB",
        "--real-max",
        "64KiB",
        "--json",
        "--plots",
        s(&plots),
    ]));
    let rows = out["rows"].as_array().unwrap();
    // 2 member counts x 2 sizes (32, 64 KiB) x 11 links, all really sorted.
    assert_eq!(rows.len(), 2 * 2 * 11);
    assert!(rows.iter().all(|r| r["source"] == "run"));
    for r in rows {
        let host = r["host_chain"]["total_ns"].as_u64().unwrap();
        let instant = r["instant_chain"]["total_ns"].as_u64().unwrap();
        assert!(instant < host, "instant is faster: {r}");
        assert_eq!(r["host_chain"]["sort_ns"], r["instant_chain"]["sort_ns"]);
    }
    // No 512 MB rows here, so no thesis comparison; the plots exist.
    assert_eq!(out["thesis"].as_array().unwrap().len(), 0);
    assert!(plots.join("array-gain-by-link.svg").is_file());
}

/// `csx read --lambda` on an array: a striped file gives the same stats64 outputs as the
/// same file on one device read in stripe-sized chunks, requests are cut at stripes,
/// and a λ that does not load fails naming the member.
#[test]
fn read_lambda_on_an_array_matches_one_device() {
    let tmp = tempfile::tempdir().unwrap();
    let arr = tmp.path().join("arr");
    let dev = tmp.path().join("dev");
    let data = tmp.path().join("u64.bin");
    run(&["gen", "u64", "--size", "1000000", "-o", s(&data)]);
    run(&["array", "init", "--state", s(&arr), "--members", "3"]
        .into_iter()
        .chain(["--nvm-size", "64MiB", "--slm-size", "16MiB"])
        .collect::<Vec<_>>());
    crate::device_exec::init_device(&dev, "64MiB", "16MiB");
    let a = format!("array:{}", s(&arr));
    run(&["put", "--device", &a, s(&data), "/u64", "--stripe", "64KiB"]);
    run(&["put", "--device", s(&dev), s(&data), "/u64"]);
    let read = |device: &str, chunk: &str, out: &Path| {
        json(&run(&[
            "lambda",
            "read",
            "--device",
            device,
            "/u64",
            "--lambda",
            "stats64",
            "--chunk",
            chunk,
            "--mode",
            "device",
            "--threads",
            "2",
            "--output-size",
            "32",
            "--json",
            "--output",
            s(out),
        ]))
    };
    let one = tmp.path().join("one.out");
    let striped = tmp.path().join("striped.out");
    let v1 = read(s(&dev), "64KiB", &one);
    let va = read(&a, "64KiB", &striped);
    // 1000000 bytes = 15 stripes of 64 KiB and a tail: 16 requests either way.
    assert_eq!(v1["requests_device"], 16, "{v1}");
    assert_eq!(va["requests"], 16, "{va}");
    assert_eq!(va["requests_device"], 16, "{va}");
    assert_eq!(va["members"].as_array().unwrap().len(), 3, "{va}");
    assert_eq!(va["input_bytes"], 1_000_000);
    let (b1, ba) = (
        std::fs::read(&one).unwrap(),
        std::fs::read(&striped).unwrap(),
    );
    assert_eq!(b1.len(), 16 * 32);
    assert!(b1 == ba, "the array's outputs differ from one device's");
    // 48 KiB requests are cut at each 64 KiB stripe: 48 + 16 per stripe, and the tail
    // (16960 bytes) is one.
    let cut = tmp.path().join("cut.out");
    let vc = read(&a, "48KiB", &cut);
    assert_eq!(vc["requests"], 31, "{vc}");
    let counts: u64 = std::fs::read(&cut)
        .unwrap()
        .chunks(32)
        .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
        .sum();
    assert_eq!(counts, 125_000);
    // A λ that does not load: the error names the member.
    let junk = tmp.path().join("junk.o");
    std::fs::write(&junk, [0x5au8; 40]).unwrap();
    let out = csx()
        .args([
            "lambda",
            "read",
            "--device",
            &a,
            "/u64",
            "--lambda",
            s(&junk),
            "--mode",
            "device",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("array member 0"), "{err}");
    assert!(err.contains("load the λ"), "{err}");
}

/// An array whose member cannot be reached names the array, the member and the cause,
/// each once.
#[test]
fn a_dead_member_is_reported_once_with_its_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let arr = tmp.path().join("arr");
    run(&[
        "array",
        "init",
        "--state",
        s(&arr),
        "--members",
        "2",
        "--nvm-size",
        "16MiB",
        "--slm-size",
        "4MiB",
    ]);
    // A port nobody listens on: the member's daemon is gone.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("tcp://127.0.0.1:{port}");
    let desc = arr.join("array.json");
    let text = std::fs::read_to_string(&desc).unwrap();
    assert!(text.contains("\"uri\": \"m1\""), "{text}");
    std::fs::write(
        &desc,
        text.replace("\"uri\": \"m1\"", &format!("\"uri\": \"{dead}\"")),
    )
    .unwrap();
    let device = format!("array:{}", s(&arr));
    let out = csx()
        .args(["ls", "--device", &device, "/"])
        .env("CSX_TIMEOUT", "5")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.trim_end();
    assert_eq!(line.lines().count(), 1, "{err}");
    assert!(line.starts_with("csx: error: cannot open array "), "{err}");
    for once in [
        "cannot open array",
        &format!("array member 1 ({dead})"),
        "connect to the device",
        "Connection refused",
    ] {
        assert_eq!(line.matches(once).count(), 1, "{once:?} once in: {err}");
    }
}

/// csx raises its soft limit on open files to the hard limit, so an array opens under a
/// soft limit too low for its members' files (16 members need more than 40).
#[test]
fn an_array_opens_under_a_low_soft_open_file_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let arr = tmp.path().join("arr");
    run(&[
        "array",
        "init",
        "--state",
        s(&arr),
        "--members",
        "16",
        "--nvm-size",
        "16MiB",
        "--slm-size",
        "4MiB",
    ]);
    let csx_path = csx().get_program().to_owned();
    let device = format!("array:{}", s(&arr));
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -S -n 24 && exec \"$0\" --device \"$1\" ls /")
        .arg(&csx_path)
        .arg(&device)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "csx under `ulimit -S -n 24`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With the hard limit that low too, the error says what the limit is and how to raise it.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 24 && exec \"$0\" --device \"$1\" ls /")
        .arg(&csx_path)
        .arg(&device)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("may open 24 files at most, its hard limit; raise it with `ulimit -Hn N`"),
        "{err}"
    );
}
