//! The operator catalogue through `csx_fs::pipe` on an embedded device, each operator
//! against a host reference written here, over chunk sizes that split values and lines.

use chacha20::cipher::{KeyIvInit, StreamCipher};
use csx_fs::ops::{Catalogue, OpError};
use csx_fs::pipe::{self, PipeError, PipeOptions, PipeReport, Sink, Source};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_testkit::bytes::seeded as noise;
use tempfile::TempDir;

/// A device with room for pipelines: 64 MiB of device memory, two engines.
fn device() -> (TempDir, Device) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 96 << 20,
        state_size_bytes: 4096,
        engines: Some(2),
        ..DeviceConfig::default()
    };
    let dev = Device::init(&dir.path().join("dev"), config).expect("init device");
    (dir, dev)
}

/// Runs `pipeline` over `input` (put in a device file) with `chunk`-byte chunks and
/// returns the output bytes.
fn run_bytes(
    dev: &Device,
    pipeline: &str,
    input: Option<&[u8]>,
    chunk: u64,
) -> Result<(Vec<u8>, PipeReport), PipeError> {
    let stages = Catalogue.parse_pipeline(pipeline)?;
    let source = match input {
        Some(data) => {
            dev.put_bytes("/in", data).expect("put input");
            Source::DeviceFile("/in".into())
        }
        None => Source::Nothing,
    };
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Sink::Host(Box::new(Shared(out.clone())));
    let opts = PipeOptions {
        chunk,
        ..PipeOptions::default()
    };
    let report = pipe::run(dev, &stages, source, sink, &opts)?;
    let bytes = out.lock().unwrap().clone();
    assert_eq!(report.bytes_out, bytes.len() as u64);
    Ok((bytes, report))
}

struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Chunk sizes: a whole number of values, and one that splits them.
const CHUNKS: [u64; 2] = [4096, 4099];

const TYPES: [&str; 4] = ["u32", "u64", "i32", "i64"];
const OPS: [&str; 7] = ["eq", "ne", "lt", "le", "gt", "ge", "between"];

/// The value at `b` of `ty` widened to i128 (so signed and unsigned compare naturally).
fn value(ty: &str, b: &[u8]) -> i128 {
    match ty {
        "u32" => i128::from(u32::from_le_bytes(b.try_into().unwrap())),
        "u64" => i128::from(u64::from_le_bytes(b.try_into().unwrap())),
        "i32" => i128::from(i32::from_le_bytes(b.try_into().unwrap())),
        _ => i128::from(i64::from_le_bytes(b.try_into().unwrap())),
    }
}

fn width(ty: &str) -> usize {
    if ty.ends_with("64") {
        8
    } else {
        4
    }
}

/// Values near the operands, in `ty`'s bytes.
fn values(ty: &str, count: usize, around: &[i64], seed: u64) -> Vec<u8> {
    let w = width(ty);
    let r = noise(count * 9, seed);
    let mut out = Vec::with_capacity(count * w);
    for i in 0..count {
        let pick = around[r[i * 9] as usize % around.len()];
        let v = pick.wrapping_add(i64::from(r[i * 9 + 1] % 5) - 2);
        let raw = if r[i * 9 + 2] < 32 {
            u64::from_le_bytes(r[i * 9 + 1..i * 9 + 9].try_into().unwrap())
        } else {
            v as u64
        };
        out.extend_from_slice(&raw.to_le_bytes()[..w]);
    }
    out
}

fn filter_reference(ty: &str, op: &str, a: i64, b: i64, data: &[u8]) -> Vec<u8> {
    let w = width(ty);
    let signed = ty.starts_with('i');
    // The operands are 64-bit: signed as i64, unsigned as u64.
    let key = |x: i64| -> i128 {
        if signed {
            i128::from(x)
        } else {
            i128::from(x as u64)
        }
    };
    let (a, b) = (key(a), key(b));
    let mut out = Vec::new();
    for c in data.chunks_exact(w) {
        let v = value(ty, c);
        let keep = match op {
            "eq" => v == a,
            "ne" => v != a,
            "lt" => v < a,
            "le" => v <= a,
            "gt" => v > a,
            "ge" => v >= a,
            _ => a <= v && v <= b,
        };
        if keep {
            out.extend_from_slice(c);
        }
    }
    out
}

#[test]
fn filter_matches_the_host_for_every_type_and_operator() {
    let (_dir, dev) = device();
    for ty in TYPES {
        let operands: &[i64] = if ty.starts_with('i') {
            &[-5, 0, 1000]
        } else {
            &[0, 1000, u32::MAX as i64]
        };
        let data = values(ty, 3001, operands, 7);
        // A trailing partial value is dropped.
        let mut ragged = data.clone();
        ragged.extend_from_slice(&[1, 2, 3]);
        for op in OPS {
            for &a in operands {
                let b = a.saturating_add(3);
                let want = filter_reference(ty, op, a, b, &data);
                for chunk in CHUNKS {
                    let pipeline = format!("filter --type {ty} --op {op} --value {a} --high {b}");
                    let (got, report) = run_bytes(&dev, &pipeline, Some(&ragged), chunk).unwrap();
                    assert_eq!(got, want, "{pipeline}, chunk {chunk}");
                    assert_eq!(report.stages[0].bytes_in, ragged.len() as u64);
                }
            }
        }
    }
}

fn aggregate_reference(ty: &str, data: &[u8]) -> [u64; 4] {
    let w = width(ty);
    let signed = ty.starts_with('i');
    let (mut count, mut sum) = (0u64, 0u64);
    let (mut min, mut max) = if signed {
        (i128::from(i64::MAX), i128::from(i64::MIN))
    } else {
        (i128::from(u64::MAX), 0)
    };
    for c in data.chunks_exact(w) {
        let v = value(ty, c);
        count += 1;
        sum = sum.wrapping_add(v as i64 as u64);
        min = min.min(v);
        max = max.max(v);
    }
    [count, sum, min as i64 as u64, max as i64 as u64]
}

#[test]
fn aggregate_matches_the_host_in_binary_and_text() {
    let (_dir, dev) = device();
    for ty in TYPES {
        let data = values(ty, 5003, &[-70, 3, i64::MAX - 2], 11);
        let want = aggregate_reference(ty, &data);
        for chunk in CHUNKS {
            let (got, _) =
                run_bytes(&dev, &format!("aggregate --type {ty}"), Some(&data), chunk).unwrap();
            let got: Vec<u64> = got
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(got, want, "{ty}, chunk {chunk}");
        }
        let (text, _) = run_bytes(
            &dev,
            &format!("aggregate --type {ty} --text"),
            Some(&data),
            4096,
        )
        .unwrap();
        let show = |v: u64| {
            if ty.starts_with('i') {
                (v as i64).to_string()
            } else {
                v.to_string()
            }
        };
        let line = format!(
            "count {} sum {} min {} max {}\n",
            want[0],
            show(want[1]),
            show(want[2]),
            show(want[3])
        );
        assert_eq!(String::from_utf8(text).unwrap(), line, "{ty}");
    }
    // No values: count 0, the extremes' initial values.
    let (got, _) = run_bytes(&dev, "aggregate --type u64", Some(&[]), 4096).unwrap();
    assert_eq!(got.len(), 32);
    assert_eq!(&got[..16], &[0; 16]);
    assert_eq!(&got[16..24], &u64::MAX.to_le_bytes());
}

#[test]
fn filter_then_aggregate_is_the_fused_answer() {
    let (_dir, dev) = device();
    let data = values("u32", 100_000, &[50, 100, 150], 3);
    let kept = filter_reference("u32", "gt", 100, 0, &data);
    let want = aggregate_reference("u32", &kept);
    let (got, report) = run_bytes(
        &dev,
        "filter --type u32 --op gt --value 100 | aggregate --type u32",
        Some(&data),
        16 << 10,
    )
    .unwrap();
    let got: Vec<u64> = got
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want);
    // Only the 32-byte answer crossed to the host; the filter's output stayed on the device.
    assert_eq!(report.device_to_host, 32);
    assert_eq!(report.stages[0].bytes_out, kept.len() as u64);
    assert_eq!(report.stages[1].bytes_in, kept.len() as u64);
    assert!(report.stages[0].calls >= 24, "{report:?}");
}

fn grep_reference(text: &[u8], pattern: &[u8], invert: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    if text.ends_with(b"\n") {
        lines.pop();
    }
    for l in lines {
        let hit = pattern.is_empty() || l.windows(pattern.len()).any(|w| w == pattern);
        if hit != invert {
            out.extend_from_slice(l);
            out.push(b'\n');
        }
    }
    out
}

#[test]
fn grep_matches_the_host_across_chunk_boundaries() {
    let (_dir, dev) = device();
    let r = noise(200_000, 5);
    let mut text = Vec::new();
    for (i, b) in r.iter().enumerate() {
        text.push(match b % 23 {
            0 => b'\n',
            1..=3 => b'a',
            4 => b'b',
            _ => b'c' + b % 20,
        });
        // A few long lines, longer than a chunk.
        if i % 50_000 == 0 {
            text.extend(std::iter::repeat_n(b'x', 9000));
        }
    }
    for (pattern, invert) in [("ab", false), ("aab", true), ("", false), ("xxxxxa", false)] {
        let want = grep_reference(&text, pattern.as_bytes(), invert);
        for chunk in CHUNKS {
            let inv = if invert { " --invert" } else { "" };
            let pipeline = format!("grep --pattern '{pattern}'{inv}");
            let (got, _) = run_bytes(&dev, &pipeline, Some(&text), chunk).unwrap();
            assert_eq!(got, want, "{pipeline}, chunk {chunk}");
        }
    }
    // Without a final newline the last line still gets one.
    let (got, _) = run_bytes(&dev, "grep -e b", Some(b"ab\ncc\nbb"), 4096).unwrap();
    assert_eq!(got, b"ab\nbb\n");
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[test]
fn datagen_generates_the_documented_stream() {
    let (_dir, dev) = device();
    let size = 100_003u64;
    let (got, report) = run_bytes(
        &dev,
        "datagen --size 100003 --seed 7 --modulo 1000",
        None,
        4096,
    )
    .unwrap();
    let mut want = Vec::new();
    for i in 0..size.div_ceil(8) {
        want.extend_from_slice(&(splitmix64(7 + i) % 1000).to_le_bytes());
    }
    want.truncate(size as usize);
    assert_eq!(got, want);
    // It filled its 64 KiB buffers (its smallest) and asked to be called again.
    assert_eq!(report.stages[0].calls, size.div_ceil(64 << 10));
    // Generated and aggregated on the device: 32 bytes reach the host.
    let (agg, report) = run_bytes(
        &dev,
        "datagen --size 1MiB --modulo 10 | aggregate",
        None,
        64 << 10,
    )
    .unwrap();
    let count = u64::from_le_bytes(agg[..8].try_into().unwrap());
    assert_eq!(count, (1 << 20) / 8);
    assert_eq!(report.device_to_host, 32);
}

/// The csx_lz4 stream of `data` written on the host with lz4_flex, in frames of `frame`.
fn lz4_frames(data: &[u8], frame: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in data.chunks(frame) {
        let block = lz4_flex::block::compress(piece);
        out.extend_from_slice(&(piece.len() as u32).to_le_bytes());
        out.extend_from_slice(&(block.len() as u32).to_le_bytes());
        out.extend_from_slice(&block);
    }
    out
}

/// Parses a csx_lz4 stream on the host.
fn lz4_unframe(mut s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let raw = u32::from_le_bytes(s[..4].try_into().unwrap()) as usize;
        let comp = u32::from_le_bytes(s[4..8].try_into().unwrap()) as usize;
        out.extend(lz4_flex::block::decompress(&s[8..8 + comp], raw).unwrap());
        s = &s[8 + comp..];
    }
    out
}

#[test]
fn compress_and_decompress_agree_with_lz4_on_the_host() {
    let (_dir, dev) = device();
    // Compressible: a random sequence of a few words.
    let words: [&[u8]; 4] = [b"alpha ", b"beta ", b"gamma ", b"delta\n"];
    let data: Vec<u8> = noise(60_000, 9)
        .iter()
        .flat_map(|b| words[(*b % 4) as usize].iter().copied())
        .collect();
    // Device compress, host decompress.
    let (packed, _) = run_bytes(&dev, "compress", Some(&data), 64 << 10).unwrap();
    assert!(
        packed.len() < data.len() * 3 / 4,
        "{} of {}",
        packed.len(),
        data.len()
    );
    assert_eq!(lz4_unframe(&packed), data);
    // Host compress (1 MiB and odd frames), device decompress, with chunks that split
    // frames and headers.
    for frame in [1 << 20, 1000] {
        let stream = lz4_frames(&data, frame);
        for chunk in [4099u64, 1 << 20] {
            let (got, _) = run_bytes(&dev, "decompress", Some(&stream), chunk).unwrap();
            assert_eq!(got, data, "frames of {frame}, chunk {chunk}");
        }
    }
    // Highly compressible: one input chunk decompresses to many output buffers (AGAIN).
    let zeros = vec![0u8; 8 << 20];
    let stream = lz4_frames(&zeros, 1 << 20);
    let (got, report) = run_bytes(&dev, "decompress", Some(&stream), 1 << 20).unwrap();
    assert_eq!(got, zeros);
    assert!(report.stages[0].calls >= 8, "{report:?}");
    // Both on the device, chained.
    let (got, _) = run_bytes(&dev, "compress | decompress", Some(&data), 4096).unwrap();
    assert_eq!(got, data);
}

#[test]
fn a_corrupt_compressed_stream_fails_naming_the_stage() {
    let (_dir, dev) = device();
    let data = vec![7u8; 100_000];
    let mut stream = lz4_frames(&data, 50_000);
    // Truncated: the last frame misses bytes.
    stream.truncate(stream.len() - 3);
    let e = run_bytes(&dev, "decompress", Some(&stream), 4096).unwrap_err();
    assert!(
        matches!(
            e,
            PipeError::Failed {
                stage: 1,
                code: -74,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("CSX_EBADMSG"), "{e}");
    // A frame header claiming more than 1 MiB.
    let mut bad = lz4_frames(&data, 50_000);
    bad[0..4].copy_from_slice(&(2u32 << 20).to_le_bytes());
    let e = run_bytes(&dev, "decompress", Some(&bad), 4096).unwrap_err();
    assert!(matches!(e, PipeError::Failed { code: -74, .. }), "{e}");
}

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const NONCE: &str = "000000000000004a00000000";

#[test]
fn encrypt_matches_chacha20_on_the_host_and_decrypt_inverts_it() {
    let (_dir, dev) = device();
    let data = noise(123_457, 2);
    let key: Vec<u8> = (0..32).collect();
    let nonce = [0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0];
    let mut want = data.clone();
    chacha20::ChaCha20::new_from_slices(&key, &nonce)
        .unwrap()
        .apply_keystream(&mut want);
    for chunk in CHUNKS {
        let (got, _) = run_bytes(
            &dev,
            &format!("encrypt --key {KEY} --nonce {NONCE}"),
            Some(&data),
            chunk,
        )
        .unwrap();
        assert_eq!(got, want, "chunk {chunk}");
    }
    let pipeline = format!("encrypt -k {KEY} -n {NONCE} | decrypt --key {KEY} --nonce {NONCE}");
    let (got, _) = run_bytes(&dev, &pipeline, Some(&data), 4096).unwrap();
    assert_eq!(got, data);
}

#[test]
fn passthrough_and_a_device_file_output() {
    let (_dir, dev) = device();
    let data = noise(50_001, 4);
    let (got, _) = run_bytes(&dev, "passthrough", Some(&data), 4096).unwrap();
    assert_eq!(got, data);
    dev.put_bytes("/src", &data).unwrap();
    let stages = Catalogue
        .parse_pipeline("passthrough | passthrough")
        .unwrap();
    let r = pipe::run(
        &dev,
        &stages,
        Source::DeviceFile("/src".into()),
        Sink::DeviceFile("/dst".into()),
        &PipeOptions {
            chunk: 8192,
            ..PipeOptions::default()
        },
    )
    .unwrap();
    // Nothing crossed the link: device file to device file.
    assert_eq!((r.host_to_device, r.device_to_host), (0, 0));
    assert_eq!(dev.read_file("/dst", 0, 1 << 20).unwrap(), data);
    assert!(dev.stat("/dst.csx-pipe-partial").is_err());
}

#[test]
fn unknown_names_are_errors_that_list_the_valid_ones() {
    let cat = Catalogue;
    let e = cat.parse_pipeline("filtre --op gt --value 1").unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, OpError::UnknownOperator { .. }));
    assert!(
        text.contains("`filtre`") && text.contains("filter, aggregate"),
        "{text}"
    );
    let e = cat.parse_pipeline("filter --op gt --valeu 1").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("`valeu`") && text.contains("--value") && text.contains("--high"),
        "{text}"
    );
    let e = cat
        .parse_pipeline("filter --op greater --value 1")
        .unwrap_err();
    assert!(
        e.to_string().contains("eq, ne, lt, le, gt, ge, between"),
        "{e}"
    );
    let e = cat.parse_pipeline("filter --value 1").unwrap_err();
    assert_eq!(e.to_string(), "filter: --op is required");
    let e = cat.parse_pipeline("encrypt --key 0011").unwrap_err();
    assert!(e.to_string().contains("2 bytes, must be 32"), "{e}");
    let e = cat
        .parse_pipeline("passthrough | datagen --size 10")
        .unwrap_err();
    assert!(matches!(e, OpError::SourceNotFirst { index: 2, .. }), "{e}");
    assert!(matches!(
        cat.parse_pipeline("passthrough ||"),
        Err(OpError::EmptyStage)
    ));
    assert!(matches!(
        cat.parse_pipeline("grep -e 'x"),
        Err(OpError::Quote { .. })
    ));
}

/// A user operator built from C, as `csx build` builds one.
fn user_object(dir: &std::path::Path, name: &str, source: &str) -> std::path::PathBuf {
    let object = csx_testkit::tools::compile_program_source(source);
    let path = dir.join(format!("{name}.o"));
    std::fs::write(&path, object).unwrap();
    path
}

#[test]
fn a_user_operator_runs_as_a_stage() {
    let (dir, dev) = device();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../sdk/examples/upper_op.c"
    ))
    .unwrap();
    let obj = user_object(dir.path(), "upper", &example);
    let text = b"Hello World\nhello again\n".repeat(500);
    let pipeline = format!("{} | grep --pattern HELLO", obj.display());
    let (got, _) = run_bytes(&dev, &pipeline, Some(&text), 4096).unwrap();
    assert_eq!(got, b"HELLO WORLD\nHELLO AGAIN\n".repeat(500));
    let (got, _) = run_bytes(
        &dev,
        &format!("{} --int 1", obj.display()),
        Some(b"AbC"),
        4096,
    )
    .unwrap();
    assert_eq!(got, b"abc");
    let e = Catalogue
        .parse_pipeline(&format!("{} --flag 1", obj.display()))
        .unwrap_err();
    assert!(e.to_string().contains("--int, --bytes"), "{e}");
}

#[test]
fn a_trap_mid_stream_stops_the_pipe_and_leaves_no_complete_output() {
    let (dir, dev) = device();
    // Copies its input, and traps (a load through a null pointer) at the third chunk.
    let source = r#"
        #include "csx.h"
        CSX_PROGRAM(trap3)
        {
            unsigned long *count = CSX_OP_STATE(args);
            if (++*count == 3)
                return *(volatile long *)0;
            unsigned long n = CSX_OP_IN_LEN(args);
            csx_memcpy(CSX_OP_OUT(args), CSX_OP_IN(args), n);
            return n;
        }
    "#;
    let obj = user_object(dir.path(), "trap3", source);
    dev.put_bytes("/src", &noise(40_000, 1)).unwrap();
    dev.put_bytes("/dst", b"the old output").unwrap();
    let stages = Catalogue
        .parse_pipeline(&format!("passthrough | {} | passthrough", obj.display()))
        .unwrap();
    let e = pipe::run(
        &dev,
        &stages,
        Source::DeviceFile("/src".into()),
        Sink::DeviceFile("/dst".into()),
        &PipeOptions {
            chunk: 4096,
            ..PipeOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PipeError::Trap {
                stage: 2,
                chunk: 2,
                ..
            }
        ),
        "{e}"
    );
    // The old output is untouched, the partial one gone, and nothing is left loaded.
    assert_eq!(dev.read_file("/dst", 0, 100).unwrap(), b"the old output");
    assert!(dev.stat("/dst.csx-pipe-partial").is_err());
    assert!(dev.programs().unwrap().is_empty());
}

/// A host sink that fails after `left` bytes (a reader that went away).
struct GoesAway(usize);

impl std::io::Write for GoesAway {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if b.len() > self.0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "reader gone",
            ));
        }
        self.0 -= b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_reader_that_goes_away_stops_the_pipe_and_frees_slots_and_memory() {
    let (_dir, dev) = device();
    let stages = Catalogue
        .parse_pipeline("datagen --size 64MiB | passthrough | passthrough")
        .unwrap();
    let opts = PipeOptions {
        chunk: 1 << 20,
        ..PipeOptions::default()
    };
    let e = pipe::run(
        &dev,
        &stages,
        Source::Nothing,
        Sink::Host(Box::new(GoesAway(3 << 20))),
        &opts,
    )
    .unwrap_err();
    assert!(matches!(e, PipeError::Io { .. }), "{e}");
    assert!(e.to_string().contains("writing the output"), "{e}");
    // Nothing is left: no program in a slot, and the pipe's 6 MiB of buffers are free
    // again (92 of the 96 MiB would not fit beside them).
    assert!(dev.programs().unwrap().is_empty());
    let all = dev
        .alloc(92 << 20)
        .expect("the pipe freed its device memory");
    dev.free(all).unwrap();
}

#[test]
fn a_stage_asking_again_without_output_is_stopped_with_its_name() {
    let (dir, dev) = device();
    // "Call me again" with nothing written, forever.
    let source = r#"
        #include "csx.h"
        CSX_PROGRAM(again) { return CSX_OP_AGAIN; }
    "#;
    let obj = user_object(dir.path(), "again", source);
    dev.put_bytes("/nums", &noise(10_000, 3)).unwrap();
    let stages = Catalogue
        .parse_pipeline(&format!("passthrough | {}", obj.display()))
        .unwrap();
    let e = pipe::run(
        &dev,
        &stages,
        Source::DeviceFile("/nums".into()),
        Sink::Discard,
        &PipeOptions {
            chunk: 4096,
            ..PipeOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            &e,
            PipeError::NoProgress {
                stage: 2,
                chunk: 0,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("stage 2")
            && text.contains("again")
            && text.contains("without consuming or producing bytes"),
        "{text}"
    );
    // Its programs were unloaded and its memory freed.
    assert!(dev.programs().unwrap().is_empty());
}

#[test]
fn a_stop_flag_aborts_a_running_pipe_and_unloads_its_programs() {
    let (_dir, dev) = device();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stages = Catalogue
        .parse_pipeline("datagen --size 1TiB | aggregate")
        .unwrap();
    let flag = stop.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        flag.store(true, std::sync::atomic::Ordering::Release);
    });
    let e = pipe::run(
        &dev,
        &stages,
        Source::Nothing,
        Sink::Discard,
        &PipeOptions {
            stop: Some(stop),
            ..PipeOptions::default()
        },
    )
    .unwrap_err();
    setter.join().unwrap();
    assert!(matches!(e, PipeError::Stopped(_)), "{e:?}");
    assert!(dev.programs().unwrap().is_empty());
}

#[test]
fn filter_operands_that_the_comparison_cannot_hold_are_refused() {
    let cat = Catalogue;
    let e = cat.parse_pipeline("filter --op gt --value -5").unwrap_err();
    assert!(e.to_string().contains("out of range for --type u64"), "{e}");
    let e = cat
        .parse_pipeline("filter --type u32 --op lt --value -1")
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = cat
        .parse_pipeline("filter --op between --value 10")
        .unwrap_err();
    assert!(e.to_string().contains("--high is required"), "{e}");
    let e = cat
        .parse_pipeline("filter --op between --value 10 --high 5")
        .unwrap_err();
    assert!(e.to_string().contains("below the low bound"), "{e}");
    cat.parse_pipeline("filter --type i64 --op gt --value -5")
        .unwrap();
    cat.parse_pipeline("filter --op between --value 10 --high 10")
        .unwrap();
}
