//! λ-IO file offload (`csx_lambda`): the same λ object on the host and on the
//! device.
//!
//! Method: the SDK's λ-IO programs (stats64, stats32, knn, grep, bitmap; compiled by
//! clang from `sdk/programs`) run over seeded data in host, device and auto modes, chunk
//! by chunk for several chunk sizes (including sizes that do not divide the file); every
//! chunk's output must be byte-identical across the modes, and the merged answers are
//! checked against simple Rust references. Auto runs with a short profiling period so
//! both its profiling and its dispatching paths are taken. Then the errors (a trapping
//! λ, an out-of-range request, the host side without a local image) and the host cache
//! (ratio 0 after a drop, 1 after a read, the budget, a λ-write's invalidation).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use csx_lambda::{Lambda, LambdaArgs, LambdaError, LambdaFile, LambdaIo, LambdaOptions, Mode, Ran};
use csx_testkit::bytes::seeded;
use csx_testkit::tools;

const MODES: [Mode; 3] = [Mode::Host, Mode::Device, Mode::Auto];

/// A short profiling period: in a few dozen requests auto profiles and dispatches.
fn options() -> LambdaOptions {
    LambdaOptions {
        period: 6,
        profile_len: 2,
        ..LambdaOptions::default()
    }
}

/// Compiles `sdk/programs/<name>.c` as `csx build` does.
fn sdk_program(name: &str) -> Vec<u8> {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../sdk/programs")
        .join(format!("{name}.c"));
    tools::compile_program(&source)
}

/// splitmix64: seeded test data.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Bytes of a grep row and of a knn vector (dim 16 × i32).
const ROW: usize = 64;
const DIM: usize = 16;
const VECTOR: usize = DIM * 4;
const NEEDLE: &[u8] = b"csx-needle";

/// Fixed-width text rows; every seventh holds the needle.
fn text_rows(rows: usize) -> Vec<u8> {
    let mut s = 7;
    let mut v = Vec::with_capacity(rows * ROW);
    for r in 0..rows {
        let mut row: Vec<u8> = (0..ROW - 1)
            .map(|_| b'a' + (next(&mut s) % 26) as u8)
            .collect();
        if r % 7 == 3 {
            let at = (next(&mut s) % (ROW - 1 - NEEDLE.len()) as u64) as usize;
            row[at..at + NEEDLE.len()].copy_from_slice(NEEDLE);
        }
        row.push(b'\n');
        v.extend_from_slice(&row);
    }
    v
}

fn vectors(n: usize) -> Vec<u8> {
    let mut s = 11;
    (0..n * DIM)
        .flat_map(|_| ((next(&mut s) % 2001) as i32 - 1000).to_le_bytes())
        .collect()
}

fn knn_params(k: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(DIM as u32).to_le_bytes());
    p.extend_from_slice(&k.to_le_bytes());
    for j in 0..DIM as i32 {
        p.extend_from_slice(&(j * 37 - 300).to_le_bytes());
    }
    p
}

/// One read workload: program, data, chunk sizes (multiples of its record) and the
/// arguments of the chunk at a file offset.
struct ReadCase {
    program: &'static str,
    data: Vec<u8>,
    chunks: Vec<u64>,
    args: fn(u64) -> LambdaArgs,
}

fn small_output(bytes: u64) -> LambdaArgs {
    LambdaArgs {
        output_size_bytes: Some(bytes),
        ..LambdaArgs::default()
    }
}

fn read_cases() -> Vec<ReadCase> {
    vec![
        ReadCase {
            program: "stats64",
            data: seeded((300 << 10) + 40, 1),
            chunks: vec![64 << 10, 40_000, 1 << 20],
            args: |_| small_output(32),
        },
        ReadCase {
            program: "stats32",
            data: seeded((300 << 10) + 12, 2),
            chunks: vec![64 << 10, 30_004, 1 << 20],
            args: |_| LambdaArgs::default(),
        },
        ReadCase {
            program: "knn",
            data: vectors(4000),
            chunks: vec![64 * 1000, 64 * 777],
            args: |offset| LambdaArgs {
                cparam1: offset / VECTOR as u64,
                params: knn_params(10),
                output_size_bytes: Some(16 * 10),
                ..LambdaArgs::default()
            },
        },
        ReadCase {
            program: "grep",
            data: text_rows(5000),
            chunks: vec![ROW as u64 * 1024, ROW as u64 * 1000],
            args: |_| LambdaArgs {
                params: NEEDLE.to_vec(),
                output_size_bytes: Some(16),
                ..LambdaArgs::default()
            },
        },
    ]
}

/// Every chunk's output of `lambda` over `file` in `mode`.
fn read_all(
    file: &LambdaFile<'_, '_>,
    lambda: &Lambda,
    chunk: u64,
    args: fn(u64) -> LambdaArgs,
    mode: Mode,
) -> Vec<Vec<u8>> {
    let size = file.size_bytes();
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < size {
        let len = chunk.min(size - offset);
        let r = file
            .read_lambda(offset, len, lambda, &args(offset), mode)
            .unwrap_or_else(|e| panic!("{} at {offset} in {mode:?}: {e}", lambda.name()));
        match mode {
            Mode::Host => assert_eq!(r.ran, Ran::Host),
            Mode::Device => assert_eq!(r.ran, Ran::Device),
            Mode::Auto => {}
        }
        assert!(r.modelled_ns() > 0);
        out.push(r.output);
        offset += len;
    }
    out
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap())
}

/// Checks the merged chunk outputs of a read case against a Rust reference.
fn check_reference(case: &ReadCase, outputs: &[Vec<u8>]) {
    match case.program {
        "stats64" | "stats32" => {
            let width = if case.program == "stats64" { 8 } else { 4 };
            let values: Vec<u64> = case
                .data
                .chunks_exact(width)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..width].copy_from_slice(c);
                    u64::from_le_bytes(b)
                })
                .collect();
            let count: u64 = outputs.iter().map(|o| u64_at(o, 0)).sum();
            let sum = outputs
                .iter()
                .fold(0u64, |a, o| a.wrapping_add(u64_at(o, 1)));
            let min = outputs.iter().map(|o| u64_at(o, 2)).min().unwrap();
            let max = outputs.iter().map(|o| u64_at(o, 3)).max().unwrap();
            assert_eq!(count, values.len() as u64);
            assert_eq!(sum, values.iter().fold(0u64, |a, &v| a.wrapping_add(v)));
            assert_eq!(min, *values.iter().min().unwrap());
            assert_eq!(max, *values.iter().max().unwrap());
        }
        "grep" => {
            let hits: u64 = outputs.iter().map(|o| u64_at(o, 0)).sum();
            let rows: u64 = outputs.iter().map(|o| u64_at(o, 1)).sum();
            assert_eq!(rows, (case.data.len() / ROW) as u64);
            let expected = case
                .data
                .chunks(ROW)
                .filter(|r| r.windows(NEEDLE.len()).any(|w| w == NEEDLE))
                .count();
            assert_eq!(hits, expected as u64);
        }
        "knn" => {
            // The nearest vector overall is the nearest of some chunk.
            let query: Vec<i64> = (0..DIM as i64).map(|j| j * 37 - 300).collect();
            let best = case
                .data
                .chunks_exact(VECTOR)
                .enumerate()
                .map(|(i, v)| {
                    let d: i64 = v
                        .chunks_exact(4)
                        .zip(&query)
                        .map(|(x, q)| {
                            let diff = i32::from_le_bytes(x.try_into().unwrap()) as i64 - q;
                            diff * diff
                        })
                        .sum();
                    (d as u64, i as u64)
                })
                .min()
                .unwrap();
            let found = outputs
                .iter()
                .map(|o| (u64_at(o, 0), u64_at(o, 1)))
                .min()
                .unwrap();
            assert_eq!(found, best);
        }
        other => panic!("no reference for {other}"),
    }
}

#[test]
fn reads_agree_on_every_side_and_chunk_size() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        for case in read_cases() {
            let lambda = Lambda::load(dev, case.program, &sdk_program(case.program), None)
                .unwrap_or_else(|e| panic!("{}: {e}", case.program));
            let path = format!("/lambda/{}", case.program);
            dev.put_bytes(&path, &case.data).unwrap();
            let file = io.open(&path).unwrap();
            for &chunk in &case.chunks {
                io.cache_drop().unwrap();
                let outputs: Vec<Vec<Vec<u8>>> = MODES
                    .iter()
                    .map(|&m| read_all(&file, &lambda, chunk, case.args, m))
                    .collect();
                assert_eq!(
                    outputs[0], outputs[1],
                    "{} chunk {chunk}: host/device",
                    case.program
                );
                assert_eq!(
                    outputs[0], outputs[2],
                    "{} chunk {chunk}: host/auto",
                    case.program
                );
                assert!(!outputs[0][0].is_empty());
                check_reference(&case, &outputs[0]);
            }
            lambda.unload().unwrap();
        }
        let counters = io.dispatcher().counters();
        assert!(counters.requests_profiled > 0, "{counters:?}");
        assert!(
            counters.requests_host + counters.requests_device > 0,
            "{counters:?}"
        );
        assert!(!io.dispatcher().trace().is_empty());
        drop(io);
    });
}

/// Run-length encodes `bits` as bitmap.c reads it: u64 nbits, then u32 runs
/// alternating zeros and ones, zeros first.
fn rle(seed: u64, nbits: u64) -> Vec<u8> {
    let mut s = seed;
    let mut v = nbits.to_le_bytes().to_vec();
    let mut covered = 0;
    while covered < nbits {
        let run = (1 + next(&mut s) % 300).min(nbits - covered);
        v.extend_from_slice(&(run as u32).to_le_bytes());
        covered += run;
    }
    v
}

#[test]
fn writes_agree_on_every_side() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        let lambda = Lambda::load(dev, "bitmap", &sdk_program("bitmap"), None).unwrap();
        // Pieces of 40_000 bits (5000 bytes, not a divisor of 4 KiB pages) at increasing
        // offsets, each mode into its own file.
        let nbits = 40_000u64;
        let args = LambdaArgs {
            output_size_bytes: Some(nbits / 8),
            ..LambdaArgs::default()
        };
        let mut contents = Vec::new();
        for (i, mode) in MODES.iter().enumerate() {
            let path = format!("/lambda/bitmap{i}");
            dev.put_bytes(&path, &[]).unwrap();
            let mut file = io.open(&path).unwrap();
            for piece in 0..8u64 {
                let input = rle(piece, nbits);
                let out = file
                    .write_lambda(piece * nbits / 8, &input, &lambda, &args, *mode)
                    .unwrap_or_else(|e| panic!("{mode:?} piece {piece}: {e}"));
                assert_eq!(out.output.len() as u64, nbits / 8);
            }
            assert_eq!(file.size_bytes(), 8 * nbits / 8);
            contents.push(dev.read_file(&path, 0, u64::MAX).unwrap());
        }
        assert_eq!(contents[0], contents[1]);
        assert_eq!(contents[0], contents[2]);
        // Bit 0 is the first run's: zeros first.
        assert_eq!(contents[0][0] & 1, 0);
        assert!(contents[0].iter().any(|&b| b != 0));
        drop(io);
        lambda.unload().unwrap();
    });
}

/// Reads past the end of window 0: traps on both sides.
const TRAPS: &str = r#"
ENTRY(traps) { return *(const u64 *)(data + len); }"#;

#[test]
fn errors_are_typed() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        dev.put_bytes("/lambda/e", &seeded(8192, 3)).unwrap();
        let file = io.open("/lambda/e").unwrap();
        let traps = Lambda::load(dev, "traps", &crate::programs::compile(TRAPS), None).unwrap();
        for mode in [Mode::Host, Mode::Device] {
            let e = file
                .read_lambda(0, 4096, &traps, &LambdaArgs::default(), mode)
                .unwrap_err();
            assert!(matches!(e, LambdaError::Trap { .. }), "{mode:?}: {e}");
            assert!(e.to_string().contains("trapped"), "{e}");
        }
        let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
        for (offset, len) in [(8192, 8), (8000, 200), (0, 0), (u64::MAX, 2)] {
            let e = file
                .read_lambda(offset, len, &stats, &small_output(32), Mode::Device)
                .unwrap_err();
            assert!(
                matches!(e, LambdaError::OutOfRange { .. }),
                "{offset}+{len}: {e}"
            );
        }
        // An output window smaller than stats64 needs: its CSX_ENOSPC, on both sides.
        for mode in MODES {
            let e = file
                .read_lambda(0, 4096, &stats, &small_output(16), mode)
                .unwrap_err();
            assert!(
                matches!(&e, LambdaError::Failed { name, .. } if name == "CSX_ENOSPC"),
                "{mode:?}: {e}"
            );
        }
        assert!(matches!(
            Lambda::load(dev, "junk", b"\x7fELFjunk", None),
            Err(LambdaError::Load { .. })
        ));
        drop(io);
        traps.unload().unwrap();
        stats.unload().unwrap();
    });
}

/// The handle's stop flag ends a spinning λ on either side (on the device by an Abort
/// of its Execute): `LambdaError::Aborted`; later requests fail at once.
#[test]
fn the_stop_flag_ends_a_spinning_lambda() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        dev.put_bytes("/lambda/s", &seeded(4096, 5)).unwrap();
        let spin = Lambda::load(
            dev,
            "spin",
            &crate::programs::compile(crate::programs::SPIN),
            None,
        )
        .unwrap();
        // Fuel for an hour of spinning: only the flag (or the device's 1 s limit) ends it.
        let args = LambdaArgs {
            fuel: Some(csx_host::proto::limits::FUEL_MAX),
            ..LambdaArgs::default()
        };
        for mode in [Mode::Host, Mode::Device] {
            let io = LambdaIo::new(dev, &options()).unwrap();
            let file = io.open("/lambda/s").unwrap();
            let stop = io.stop_flag();
            let e = std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    stop.stop(1);
                });
                file.read_lambda(0, 4096, &spin, &args, mode).unwrap_err()
            });
            assert!(matches!(e, LambdaError::Aborted { .. }), "{mode:?}: {e}");
            let again = file.read_lambda(0, 4096, &spin, &args, mode).unwrap_err();
            assert!(
                matches!(again, LambdaError::Aborted { .. }),
                "{mode:?}: {again}"
            );
        }
        spin.unload().unwrap();
    });
}

#[test]
fn host_side_needs_a_local_image() {
    crate::run(crate::SHM, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        dev.put_bytes("/lambda/remote", &seeded(4096, 4)).unwrap();
        let file = io.open("/lambda/remote").unwrap();
        let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
        let args = small_output(32);
        let d = file
            .read_lambda(0, 4096, &stats, &args, Mode::Device)
            .unwrap();
        assert_eq!(d.output.len(), 32);
        for mode in [Mode::Host, Mode::Auto] {
            let e = file.read_lambda(0, 4096, &stats, &args, mode).unwrap_err();
            assert!(
                matches!(e, LambdaError::NoLocalImage { .. }),
                "{mode:?}: {e}"
            );
            assert!(e.to_string().contains("not embedded"), "{e}");
        }
        assert!(matches!(
            io.cache_drop(),
            Err(LambdaError::NoLocalImage { .. })
        ));
        // Given the state directory, the same device has a host side.
        let local = LambdaIo::new(
            dev,
            &LambdaOptions {
                state_dir: Some(f.state_dir()),
                ..options()
            },
        )
        .unwrap();
        let file = local.open("/lambda/remote").unwrap();
        let h = file
            .read_lambda(0, 4096, &stats, &args, Mode::Host)
            .unwrap();
        assert_eq!(h.output, d.output);
        drop((io, local));
        stats.unload().unwrap();
    });
}

#[test]
fn host_cache_ratio_budget_and_write_invalidation() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let budget = 64 << 10;
        let io = LambdaIo::new(
            dev,
            &LambdaOptions {
                cache_budget_bytes: budget,
                ..options()
            },
        )
        .unwrap();
        let size = 256u64 << 10;
        dev.put_bytes("/lambda/c", &seeded(size as usize, 5))
            .unwrap();
        let mut file = io.open("/lambda/c").unwrap();
        io.cache_drop().unwrap();
        assert_eq!(file.cache_ratio(0, size).unwrap(), 0.0);
        // A host read caches its range...
        let (bytes, cost) = file.read_plain(0, 32 << 10).unwrap();
        assert_eq!(bytes.len(), 32 << 10);
        assert_eq!(cost.media_bytes, 32 << 10);
        assert_eq!(file.cache_ratio(0, 32 << 10).unwrap(), 1.0);
        let (_, again) = file.read_plain(0, 32 << 10).unwrap();
        assert_eq!(again.media_bytes, 0, "a cached range costs no I/O");
        // ... and the device side does not.
        let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
        file.read_lambda(128 << 10, 64 << 10, &stats, &small_output(32), Mode::Device)
            .unwrap();
        assert_eq!(file.cache_ratio(128 << 10, 64 << 10).unwrap(), 0.0);
        // Reading the whole file through a 64 KiB budget leaves only its last 64 KiB.
        file.read_plain(0, size).unwrap();
        assert_eq!(io.local().unwrap().tracked_bytes(), budget);
        assert_eq!(file.cache_ratio(size - budget, budget).unwrap(), 1.0);
        assert_eq!(file.cache_ratio(0, size - budget).unwrap(), 0.0);
        // A λ-write drops its range from the host cache once it is durable.
        let bitmap = Lambda::load(dev, "bitmap", &sdk_program("bitmap"), None).unwrap();
        let nbits = 8 * 16384u64;
        let args = LambdaArgs {
            output_size_bytes: Some(nbits / 8),
            ..LambdaArgs::default()
        };
        let at = size - budget;
        for mode in [Mode::Host, Mode::Device] {
            file.read_plain(at, 16384).unwrap();
            assert_eq!(file.cache_ratio(at, 16384).unwrap(), 1.0);
            file.write_lambda(at, &rle(9, nbits), &bitmap, &args, mode)
                .unwrap();
            assert_eq!(file.cache_ratio(at, 16384).unwrap(), 0.0, "{mode:?}");
            assert_eq!(
                file.cache_ratio(at + 16384, 16384).unwrap(),
                1.0,
                "{mode:?}"
            );
        }
        io.cache_drop().unwrap();
        assert_eq!(file.cache_ratio(0, size).unwrap(), 0.0);
        assert_eq!(io.local().unwrap().tracked_bytes(), 0);
        drop(io);
        stats.unload().unwrap();
        bitmap.unload().unwrap();
    });
}

#[test]
fn fragmented_files_read_the_same_on_both_sides() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        // Interleaved appends to two files, a flush between, and a hole left by a
        // truncate that grows the file.
        let piece = 12 << 10;
        let mut expected = Vec::new();
        for i in 0..6u64 {
            let a = seeded(piece, 10 + i);
            dev.write_file("/lambda/frag", i * piece as u64, &a)
                .unwrap();
            dev.write_file("/lambda/other", i * piece as u64, &a)
                .unwrap();
            dev.flush().unwrap();
            expected.extend_from_slice(&a);
        }
        let hole = 20 << 10;
        dev.truncate_file("/lambda/frag", (expected.len() + hole) as u64)
            .unwrap();
        expected.resize(expected.len() + hole, 0);
        let tail = seeded(piece, 99);
        dev.write_file("/lambda/frag", expected.len() as u64, &tail)
            .unwrap();
        expected.extend_from_slice(&tail);
        let extents = dev.extents("/lambda/frag").unwrap().extents;
        assert!(extents.len() > 1, "{extents:?}");
        let file = io.open("/lambda/frag").unwrap();
        let size = file.size_bytes();
        assert_eq!(size, expected.len() as u64);
        // A range crossing extents, not page-aligned at either end.
        let (offset, len) = (5000, size - 9000);
        let (bytes, _) = file.read_plain(offset, len).unwrap();
        assert_eq!(bytes, &expected[offset as usize..(offset + len) as usize]);
        let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
        let outs: Vec<Vec<u8>> = [Mode::Host, Mode::Device]
            .iter()
            .map(|&m| {
                file.read_lambda(offset, len, &stats, &small_output(32), m)
                    .unwrap()
                    .output
            })
            .collect();
        assert_eq!(outs[0], outs[1]);
        drop(io);
        stats.unload().unwrap();
    });
}

/// A device output larger than one Memory Read (`MEM_IO_SIZE_MAX`) comes back in pieces
/// and equals the host side's: the bitmap λ decompresses a small run-length input into
/// 16 MiB + 4097 bytes.
#[test]
fn device_outputs_beyond_one_memory_read_come_back_whole() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        let lambda = Lambda::load(dev, "bitmap", &sdk_program("bitmap"), None).unwrap();
        let out_bytes = csx_host::proto::limits::MEM_IO_SIZE_MAX + 4097;
        let nbits = out_bytes * 8;
        // Long runs keep the input small (about 40 KiB).
        let mut s = 7u64;
        let mut input = nbits.to_le_bytes().to_vec();
        let mut covered = 0;
        while covered < nbits {
            let run = (1 + next(&mut s) % 60_000).min(nbits - covered);
            input.extend_from_slice(&(run as u32).to_le_bytes());
            covered += run;
        }
        dev.put_bytes("/lambda/big-rle", &input).unwrap();
        let file = io.open("/lambda/big-rle").unwrap();
        let args = LambdaArgs {
            output_size_bytes: Some(out_bytes),
            ..LambdaArgs::default()
        };
        let len = input.len() as u64;
        let device = file
            .read_lambda(0, len, &lambda, &args, Mode::Device)
            .expect("device side");
        let host = file
            .read_lambda(0, len, &lambda, &args, Mode::Host)
            .expect("host side");
        assert_eq!(device.output.len() as u64, out_bytes);
        assert!(device.output == host.output, "the two sides differ");
        // The first run is zeros; some later byte has ones.
        assert_eq!(device.output[0] & 1, 0);
        assert!(device.output[out_bytes as usize - 5000..]
            .iter()
            .any(|&b| b != 0));
        drop(file);
        drop(io);
        lambda.unload().unwrap();
    });
}

/// λ-IO's consistency rule: a device-side λ-read sees every write completed before it
/// (File Writes go through the image's page cache; the device's uncached media read
/// must still see them), and a host-side read after a λ-write sees the new bytes.
#[test]
fn reads_see_every_completed_write_on_both_sides() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        let io = LambdaIo::new(dev, &options()).unwrap();
        let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
        let n = 8192u64;
        let values = |k: u64| -> Vec<u8> { (0..n).flat_map(|i| (i * k).to_le_bytes()).collect() };
        dev.put_bytes("/lambda/w", &values(1)).unwrap();
        let file = io.open("/lambda/w").unwrap();
        let sum = |out: &[u8]| u64::from_le_bytes(out[8..16].try_into().unwrap());
        for k in 2..6u64 {
            // Overwrite in place, then read at once on each side (host cached first, so
            // a stale host page would show).
            let host_before = file
                .read_lambda(0, n * 8, &stats, &small_output(32), Mode::Host)
                .unwrap();
            assert_eq!(sum(&host_before.output), (k - 1) * n * (n - 1) / 2);
            dev.write_file("/lambda/w", 0, &values(k)).unwrap();
            for mode in [Mode::Device, Mode::Host] {
                let out = file
                    .read_lambda(0, n * 8, &stats, &small_output(32), mode)
                    .unwrap();
                assert_eq!(
                    sum(&out.output),
                    k * n * (n - 1) / 2,
                    "{mode:?} after write {k}"
                );
            }
        }
        drop(file);
        drop(io);
        stats.unload().unwrap();
    });
}

/// The device's free memory and its occupied program slots.
fn footprint(dev: &csx_host::Device) -> (u64, usize) {
    let info = dev.identify().unwrap();
    (info.slm_free_bytes, dev.programs().unwrap().len())
}

#[test]
fn a_failed_stopped_or_panicking_run_leaves_nothing_on_the_device() {
    crate::run(crate::EMBEDDED, |f| {
        let dev = f.dev();
        dev.put_bytes("/lambda/left", &seeded(8192, 5)).unwrap();
        let before = footprint(dev);
        {
            let io = LambdaIo::new(dev, &options()).unwrap();
            let file = io.open("/lambda/left").unwrap();
            let traps = Lambda::load(dev, "traps", &crate::programs::compile(TRAPS), None).unwrap();
            let e = file
                .read_lambda(0, 4096, &traps, &LambdaArgs::default(), Mode::Device)
                .unwrap_err();
            assert!(matches!(e, LambdaError::Trap { .. }), "{e}");
            let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
            assert_eq!(footprint(dev).1, before.1 + 2);
            io.stop_flag().stop(1);
            let e = file
                .read_lambda(0, 4096, &stats, &small_output(32), Mode::Device)
                .unwrap_err();
            assert!(matches!(e, LambdaError::Aborted { .. }), "{e}");
            // Dropped without unloading, as when `?` returns the error.
        }
        assert_eq!(footprint(dev), before);
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let io = LambdaIo::new(dev, &options()).unwrap();
            let file = io.open("/lambda/left").unwrap();
            let stats = Lambda::load(dev, "stats64", &sdk_program("stats64"), None).unwrap();
            file.read_lambda(0, 4096, &stats, &small_output(32), Mode::Device)
                .unwrap();
            assert!(footprint(dev).0 < before.0, "a staging allocation is held");
            panic!("the caller fails mid-run");
        }));
        assert!(unwound.is_err());
        assert_eq!(footprint(dev), before);
    });
}
