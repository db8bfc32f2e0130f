//! `csx bench device`: the embedded device seen from the host API.
//!
//! Cases, all on a fresh embedded device in a temporary directory:
//!
//! 1. **No-op round trip**: `Device::execute` of a program that returns at once (JIT),
//!    one at a time, each timed on the host; p50/p99 after a warm-up. Interleaved with
//!    it, the same through the device's own queue pair (`QueuePair::call`, no host
//!    library), so the library's share is visible. Also the rate with
//!    [`PIPELINE_NOOPS`] executions kept in flight through the asynchronous core.
//! 2. **1 MiB read-and-sum offload**: a Memory Copy of a 1 MiB device file into device
//!    memory, then a summing program over it; each pair timed. Beside it, one execution
//!    of a program that reads the file by path itself, and the same work on the host:
//!    read the 1 MiB through the file API, sum it natively.
//! 3. **Offload vs host over a large warm file** (`--size`, 1 GiB by default): the
//!    whole file summed on the device (chunks staged by Memory Copy into two device
//!    buffers, the copy of the next chunk overlapping the sum of this one) against the
//!    host reading the same bytes through the file API (16 MiB reads, four in flight)
//!    and summing them natively. Both runs must agree on the sum. The file is read once
//!    first so the host finds it in the page cache (warm); the device's reads (Memory
//!    Copy, `csx_file_read`) are its uncached media reads either way. A third way: a
//!    program that reads its chunk by path with `csx_file_read` and sums it, one
//!    execution per chunk and one in flight per engine (no staging command, and every
//!    engine busy).
//! 4. **Uncached media reads** (`--media-size`, 256 MiB by default): the device reading
//!    its own media (Memory Copy from the namespace: queued direct reads) against `fio`
//!    and `dd` with direct I/O at the same block size and queue depth, on the same bytes
//!    of the same image file (module `media`).
//!
//! 5. **Activation of a large program**: load + activate (JIT) + first execution of a
//!    generated 4,000-instruction program (`vm::synthetic_program`), on a device that
//!    tiers JIT activations (the default: quick code at once, Cranelift's in the
//!    background) and on one that waits for Cranelift (`jit_tiering: false`), the two
//!    interleaved round by round; medians and minima.
//!
//! `--only` runs a subset of the cases.
//!
//! The summing program is hand-written eBPF (four words per loop iteration), so the
//! benchmark needs no compiler.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use clap::Args;
use csx_host::proto::limits::FILE_IO_SIZE_MAX;
use csx_host::proto::{
    Command, CommandId, CopySource, EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply,
};
use csx_host::transport::inproc::embedded::Embedded;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::{Device, ExecuteRequest, Execution};
use serde::Serialize;

use crate::exit;
use csx_host::size::{format_size, parse_size};

/// No-op executions timed one by one.
const NOOP_RUNS: usize = 20_000;
/// No-op executions per block; host-library and raw blocks alternate.
const NOOP_BLOCK: usize = 1_000;
/// Warm-up executions before timing.
const WARMUP_RUNS: usize = 2_000;
/// Executions in flight for the pipelined no-op rate.
const PIPELINE_NOOPS: usize = 32;
/// Read-and-sum runs of 1 MiB.
const SUM_1MIB_RUNS: usize = 300;
/// Whole-file passes of each side; the best is reported.
const FILE_PASSES: usize = 3;

/// `mov r0, 0; exit`: the program whose runs measure the path around a program.
pub(crate) const NOOP_ASM: &str = "mov %r0, 0\nexit\n";

/// Sums window 0 (r1 = address, r2 = length) as little-endian u64s; a trailing partial
/// word is ignored.
const SUM_ASM: &str = "
    mov %r0, 0
    mov %r5, %r2
    and %r5, -8
    add %r5, %r1          # r5: end of the whole words
    mov %r4, %r2
    and %r4, -32
    add %r4, %r1          # r4: end of the whole 32-byte blocks
block:
    jge %r1, %r4, word
    ldxdw %r3, [%r1+0]
    add %r0, %r3
    ldxdw %r3, [%r1+8]
    add %r0, %r3
    ldxdw %r3, [%r1+16]
    add %r0, %r3
    ldxdw %r3, [%r1+24]
    add %r0, %r3
    add %r1, 32
    ja block
word:
    jge %r1, %r5, done
    ldxdw %r3, [%r1+0]
    add %r0, %r3
    add %r1, 8
    ja word
done:
    exit
";

/// Put before [`SUM_ASM`]: reads window 0's length of the device file named by the
/// parameter bytes, at offset cparam1, into window 0 with `csx_file_read` (function 2),
/// then sums the bytes read. A failed read returns its negative code.
const FILE_READ_PREFIX_ASM: &str = "
    mov %r6, %r1          # r6: window 0
    mov %r7, %r2          # r7: its length
    ldxdw %r3, [%r5+0]    # offset: args->cparam1
    ldxw %r2, [%r5+20]    # path length: args->params_len
    mov %r1, %r5
    add %r1, 280          # path: args->params
    mov %r4, %r6
    mov %r5, %r7
    call 2
    jslt %r0, 0, done
    mov %r1, %r6
    mov %r2, %r0          # sum the bytes read
";

/// Measure the embedded device: no-op round trip, 1 MiB read-and-sum, offload vs host,
/// uncached media reads against fio and dd.
///
/// Runs on a fresh embedded device in a temporary directory (under --dir). The third case
/// sums a --size file on the device (staged by Memory Copy, two buffers of --chunk
/// bytes) and on the host (read through the file API, summed natively) and reports both
/// throughputs and their ratio. The media case reads a --media-size file's bytes of the
/// image with the device's queued direct reads, with fio (same block size and queue
/// depth, direct I/O) and with dd (iflag=direct), and reports all three (fio comes from
/// scripts/setup.sh). Build with --release for meaningful numbers.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  csx bench device\n  csx bench device --size 256MiB --json\n  csx bench device --only media --media-size 1GiB"
)]
pub struct DeviceBenchArgs {
    /// Bytes of the large file of the offload-vs-host case.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    size: u64,
    /// Bytes staged per device execution in the offload-vs-host case.
    /// The default keeps both staging buffers in the last-level cache, so the program
    /// reads what the copy just wrote from cache rather than from DRAM.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = parse_size)]
    chunk: u64,
    /// Engines of the benchmark device (one per core if absent, as `csx device init`).
    #[arg(long, value_name = "N")]
    engines: Option<u32>,
    /// Bytes of the file of the media case (its largest extent is read).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    media_size: u64,
    /// Passes of each reader in the media case; the best is reported.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    media_passes: u32,
    /// Only these cases (comma-separated): noop, sum-1mib, sum-file, media, activate.
    #[arg(long, value_delimiter = ',', value_parser = ["noop", "sum-1mib", "sum-file", "media", "activate"])]
    only: Vec<String>,
    /// Where to create the temporary device (the system temp directory by default).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print one JSON object: {noop, sum_1mib, sum_file, media, activate}; a case not
    /// run is null.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Latency {
    runs: usize,
    p50_ns: u64,
    p99_ns: u64,
    mean_ns: u64,
    min_ns: u64,
}

fn latency(mut samples: Vec<u64>) -> Latency {
    assert!(!samples.is_empty());
    samples.sort_unstable();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Latency {
        runs: samples.len(),
        p50_ns: pick(0.50),
        p99_ns: pick(0.99),
        mean_ns: samples.iter().sum::<u64>() / samples.len() as u64,
        min_ns: samples[0],
    }
}

#[derive(Debug, Serialize)]
struct NoopReport {
    /// `Device::execute`, through the host library and the embedded transport.
    round_trip: Latency,
    /// The device's own `QueuePair::call`, no host library: what the library adds is
    /// the difference.
    queue_pair_round_trip: Latency,
    /// Median of the device's own total (submission to completion) per execution.
    device_total_p50_ns: u64,
    /// Executions per second with `pipelined_depth` in flight.
    pipelined_per_s: f64,
    pipelined_depth: usize,
}

#[derive(Debug, Serialize)]
struct Sum1MiBReport {
    /// Memory Copy of the file into device memory, then the sum: one pair per run.
    offload: Latency,
    offload_bytes_per_s: f64,
    /// One execution whose program reads the file by path (`csx_file_read`) into its
    /// window and sums it: no staging command.
    by_path: Latency,
    by_path_bytes_per_s: f64,
    /// File read to the host, then a native sum.
    host: Latency,
    host_bytes_per_s: f64,
}

#[derive(Debug, Serialize)]
struct SumFileReport {
    size_bytes: u64,
    chunk_bytes: u64,
    offload_ns: u64,
    offload_bytes_per_s: f64,
    /// The device's execute time summed over the chunks (staging excluded).
    offload_execute_ns: u64,
    /// The program reads each chunk by path itself (`csx_file_read`), `by_path_buffers`
    /// executions in flight.
    by_path_ns: u64,
    by_path_bytes_per_s: f64,
    by_path_buffers: usize,
    host_ns: u64,
    host_bytes_per_s: f64,
    /// Offload throughput over host throughput (the goal: at least 0.8).
    ratio: f64,
    /// By-path offload throughput over host throughput.
    ratio_by_path: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    engines: u32,
    /// `/proc/loadavg` (1, 5, 15 minutes) before and after: other work on the machine
    /// skews every number.
    load_average_before: Option<[f64; 3]>,
    load_average_after: Option<[f64; 3]>,
    noop: Option<NoopReport>,
    sum_1mib: Option<Sum1MiBReport>,
    sum_file: Option<SumFileReport>,
    media: Option<super::media::MediaReport>,
    activate: Option<ActivateReport>,
}

/// Rounds of the activation case; each times one tiered and one Cranelift activation.
const ACTIVATE_ROUNDS: usize = 7;

/// One way of activating, over [`ACTIVATE_ROUNDS`] rounds.
#[derive(Debug, Serialize)]
struct ActivateTimes {
    /// Load (raw bytecode, persisted in the state directory), as the host sees it.
    load_p50_ns: u64,
    /// Activate on the JIT, as the host sees it.
    activate_p50_ns: u64,
    /// The device's own activation time (verify + compile).
    prepare_p50_ns: u64,
    /// The first execution after activation.
    first_execute_p50_ns: u64,
    /// Load + activate + first execution.
    total_p50_ns: u64,
    total_min_ns: u64,
}

#[derive(Debug, Serialize)]
struct ActivateReport {
    insns: usize,
    rounds: usize,
    /// A device that tiers JIT activations (the default).
    tiered: ActivateTimes,
    /// A device whose activations wait for Cranelift (`jit_tiering: false`).
    cranelift: ActivateTimes,
    /// Median total of `cranelift` over median total of `tiered`.
    speedup: f64,
}

fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// The image of the assembly `src` (csx-ebpf's assembler): the benchmarks' own programs.
pub(crate) fn assemble(src: &str) -> anyhow::Result<Vec<u8>> {
    let insns = csx_ebpf::asm::assemble(src).context("assembling a benchmark program")?;
    Ok(csx_ebpf::isa::encode_all(&insns))
}

fn load(dev: &Device, src: &str) -> anyhow::Result<ProgramIndex> {
    let pind = dev
        .load_program_any_slot(ProgramType::Raw, &assemble(src)?, None)
        .context("load")?;
    dev.activate(pind, EngineKind::Jit).context("activate")?;
    Ok(pind)
}

fn host_sum(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("chunks of 8")))
        .fold(0u64, u64::wrapping_add)
}

fn ok_run(dev: &Device, req: &ExecuteRequest) -> anyhow::Result<Execution> {
    let run = dev.execute(req).context("execute")?;
    ensure!(
        !run.trapped(),
        "the benchmark program trapped: {:?}",
        run.trap
    );
    Ok(run)
}

fn bench_noop(dev: &Device, state: &Path) -> anyhow::Result<NoopReport> {
    let pind = load(dev, NOOP_ASM)?;
    let req = ExecuteRequest::new(pind);
    // The same device's own queue pair, without the host library, for comparison.
    let embedded = Embedded::open(state).context("the embedded device")?;
    let qp = embedded
        .device()
        .queue_pair(1)
        .context("a raw queue pair")?;
    let raw_call = |i: usize| -> anyhow::Result<u64> {
        let t = Instant::now();
        let c = qp
            .call(Command::new(CommandId(i as u64), req.to_op()))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ns = t.elapsed().as_nanos() as u64;
        ensure!(c.status.is_success(), "no-op failed: {}", c.status);
        Ok(ns)
    };
    for i in 0..WARMUP_RUNS {
        ok_run(dev, &req)?;
        raw_call(i)?;
    }
    let mut host = Vec::with_capacity(NOOP_RUNS);
    let mut device = Vec::with_capacity(NOOP_RUNS);
    let mut raw = Vec::with_capacity(NOOP_RUNS);
    // Interleaved in blocks, so load changes on the machine hit both alike.
    for block in 0..NOOP_RUNS / NOOP_BLOCK {
        for _ in 0..NOOP_BLOCK {
            let t = Instant::now();
            let run = ok_run(dev, &req)?;
            host.push(t.elapsed().as_nanos() as u64);
            device.push(run.timing.total_ns);
        }
        for i in 0..NOOP_BLOCK {
            raw.push(raw_call(block * NOOP_BLOCK + i)?);
        }
    }
    drop(qp);
    drop(embedded);
    // Pipelined: keep PIPELINE_NOOPS in flight through the asynchronous core.
    let client = dev.client();
    let total = NOOP_RUNS;
    let t = Instant::now();
    let mut submitted = 0;
    let mut done = 0;
    while done < total {
        while submitted < total && submitted - done < PIPELINE_NOOPS {
            client.submit(req.to_op()).context("submit")?;
            submitted += 1;
        }
        let c = client
            .reap(None)
            .context("reap")?
            .context("a completion is due")?;
        ensure!(c.status.is_success(), "no-op failed: {}", c.status);
        done += 1;
    }
    let pipelined_per_s = total as f64 / t.elapsed().as_secs_f64();
    dev.unload(pind).context("unload")?;
    Ok(NoopReport {
        round_trip: latency(host),
        queue_pair_round_trip: latency(raw),
        device_total_p50_ns: latency(device).p50_ns,
        pipelined_per_s,
        pipelined_depth: PIPELINE_NOOPS,
    })
}

/// Times one load + activate + first execution of `image` on `dev`, then frees the
/// slot: [load, activate, the device's prepare, first execution] in ns, and r0.
fn activate_once(dev: &Device, image: &[u8], mem: MemHandle) -> anyhow::Result<([u64; 4], u64)> {
    let t = Instant::now();
    let pind = dev
        .load_program_any_slot(ProgramType::Raw, image, None)
        .context("load")?;
    let load = t.elapsed().as_nanos() as u64;
    let t = Instant::now();
    let prepare_ns = dev.activate(pind, EngineKind::Jit).context("activate")?;
    let activate = t.elapsed().as_nanos() as u64;
    let t = Instant::now();
    let run = ok_run(dev, &ExecuteRequest::new(pind).window(mem, 0, 64))?;
    let execute = t.elapsed().as_nanos() as u64;
    dev.unload(pind).context("unload")?;
    Ok(([load, activate, prepare_ns, execute], run.r0))
}

fn activate_times(samples: &[[u64; 4]]) -> ActivateTimes {
    let median = |f: &dyn Fn(&[u64; 4]) -> u64| {
        let mut v: Vec<u64> = samples.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let total = |s: &[u64; 4]| s[0] + s[1] + s[3];
    ActivateTimes {
        load_p50_ns: median(&|s| s[0]),
        activate_p50_ns: median(&|s| s[1]),
        prepare_p50_ns: median(&|s| s[2]),
        first_execute_p50_ns: median(&|s| s[3]),
        total_p50_ns: median(&total),
        total_min_ns: samples.iter().map(total).min().unwrap_or(0),
    }
}

/// Case 5 (see the module doc): two small devices under `dir`, one tiered, one not.
fn bench_activate(dir: &Path) -> anyhow::Result<ActivateReport> {
    let src = super::vm::synthetic_program(super::vm::COMPILE_INSNS);
    let insns = csx_ebpf::asm::assemble(&src).context("assembling the synthetic program")?;
    let image = csx_ebpf::isa::encode_all(&insns);
    let small = |tiering: bool| DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 1 << 20,
        state_size_bytes: 4096,
        engines: Some(1),
        jit_tiering: Some(tiering),
        ..DeviceConfig::default()
    };
    let tiered_dev = Device::init(&dir.join("tiered"), small(true))
        .context("cannot create the tiered benchmark device")?;
    let cranelift_dev = Device::init(&dir.join("cranelift"), small(false))
        .context("cannot create the benchmark device without tiering")?;
    let input = pattern(64);
    let mut mems = Vec::new();
    for dev in [&tiered_dev, &cranelift_dev] {
        let mem = dev.alloc(4096).context("alloc")?;
        dev.write_mem(mem, 0, &input).context("write")?;
        mems.push(mem);
    }
    let (mut tiered, mut cranelift) = (Vec::new(), Vec::new());
    let mut last_cranelift = std::time::Duration::from_millis(300);
    // One round of each first, untimed (page faults, thread start-up).
    for round in 0..=ACTIVATE_ROUNDS {
        let (times, r0) = activate_once(&tiered_dev, &image, mems[0])?;
        // Let the tiered program's background Cranelift compile finish, so it does not
        // compete with the next activation.
        std::thread::sleep(last_cranelift.mul_f64(1.5));
        let t = Instant::now();
        let (ctimes, cr0) = activate_once(&cranelift_dev, &image, mems[1])?;
        last_cranelift = t.elapsed();
        ensure!(
            r0 == cr0,
            "tiered r0 {r0:#x} differs from Cranelift's {cr0:#x}"
        );
        if round > 0 {
            tiered.push(times);
            cranelift.push(ctimes);
        }
    }
    for (dev, mem) in [tiered_dev, cranelift_dev].into_iter().zip(mems) {
        dev.free(mem).context("free")?;
        dev.close().context("closing a benchmark device")?;
    }
    let tiered = activate_times(&tiered);
    let cranelift = activate_times(&cranelift);
    Ok(ActivateReport {
        insns: insns.len(),
        rounds: ACTIVATE_ROUNDS,
        speedup: cranelift.total_p50_ns as f64 / tiered.total_p50_ns as f64,
        tiered,
        cranelift,
    })
}

fn print_activate(a: &ActivateReport) {
    println!(
        "activation of a {}-instruction program (load + activate on the JIT + first execution), median of {}:",
        a.insns, a.rounds
    );
    for (name, t) in [
        ("tiered (default)", &a.tiered),
        ("cranelift first", &a.cranelift),
    ] {
        println!(
            "  {name:<18} total {:>8.3} ms (min {:.3})  load {:.3} ms  activate {:.3} ms (device prepare {:.3})  first execution {:.3} ms",
            t.total_p50_ns as f64 * 1e-6,
            t.total_min_ns as f64 * 1e-6,
            t.load_p50_ns as f64 * 1e-6,
            t.activate_p50_ns as f64 * 1e-6,
            t.prepare_p50_ns as f64 * 1e-6,
            t.first_execute_p50_ns as f64 * 1e-6,
        );
    }
    println!("  tiered is {:.1}x faster to a first result", a.speedup);
}

pub(crate) fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x243F_6A88_85A3_08D3u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn bench_sum_1mib(
    dev: &Device,
    sum: ProgramIndex,
    file_sum: ProgramIndex,
) -> anyhow::Result<Sum1MiBReport> {
    const LEN: u64 = 1 << 20;
    let data = pattern(LEN as usize);
    let want = host_sum(&data);
    dev.put_bytes("/bench/1mib", &data).context("put")?;
    let mem = dev.alloc(LEN).context("alloc")?;
    let req = ExecuteRequest::new(sum).window(mem, 0, LEN);
    let by_path_req = ExecuteRequest::new(file_sum)
        .window(mem, 0, LEN)
        .params(b"/bench/1mib".to_vec());
    let mut offload = Vec::new();
    let mut by_path = Vec::new();
    let mut host = Vec::new();
    for i in 0..SUM_1MIB_RUNS + SUM_1MIB_RUNS / 10 {
        let t = Instant::now();
        dev.copy_file_to_mem("/bench/1mib", 0, LEN, mem, 0)
            .context("memory copy")?;
        let run = ok_run(dev, &req)?;
        let offload_ns = t.elapsed().as_nanos() as u64;
        ensure!(
            run.r0 == want,
            "offloaded sum {} differs from {want}",
            run.r0
        );
        let t = Instant::now();
        let run = ok_run(dev, &by_path_req)?;
        let by_path_ns = t.elapsed().as_nanos() as u64;
        ensure!(run.r0 == want, "by-path sum {} differs from {want}", run.r0);
        let t = Instant::now();
        let bytes = dev.read_file("/bench/1mib", 0, LEN).context("file read")?;
        let got = std::hint::black_box(host_sum(&bytes));
        let host_ns = t.elapsed().as_nanos() as u64;
        ensure!(got == want, "host sum differs");
        // The first tenth is the warm-up.
        if i >= SUM_1MIB_RUNS / 10 {
            offload.push(offload_ns);
            by_path.push(by_path_ns);
            host.push(host_ns);
        }
    }
    dev.free(mem).context("free")?;
    let offload = latency(offload);
    let by_path = latency(by_path);
    let host = latency(host);
    Ok(Sum1MiBReport {
        offload_bytes_per_s: LEN as f64 / (offload.p50_ns as f64 * 1e-9),
        offload,
        by_path_bytes_per_s: LEN as f64 / (by_path.p50_ns as f64 * 1e-9),
        by_path,
        host_bytes_per_s: LEN as f64 / (host.p50_ns as f64 * 1e-9),
        host,
    })
}

/// Waits for `id` and checks it succeeded.
fn wait_ok(dev: &Device, id: CommandId) -> anyhow::Result<csx_host::proto::Completion> {
    let c = dev
        .client()
        .wait(id, None)
        .context("wait")?
        .context("a completion is due")?;
    if !c.status.is_success() {
        bail!(
            "{}",
            csx_host::CallError::from_completion("benchmark command", c)
        );
    }
    Ok(c)
}

/// The whole file summed on the device: returns (sum, wall ns, execute ns).
fn offload_pass(
    dev: &Device,
    sum: ProgramIndex,
    path: &str,
    size: u64,
    bufs: [MemHandle; 2],
    chunk: u64,
) -> anyhow::Result<(u64, u64, u64)> {
    let client = dev.client();
    let segments: Vec<(u64, u64)> = (0..size.div_ceil(chunk))
        .map(|i| (i * chunk, (size - i * chunk).min(chunk)))
        .collect();
    let copy = |i: usize| {
        let (offset, len) = segments[i];
        let sources = vec![CopySource::File {
            path: path.to_string(),
            offset,
            len,
        }];
        client.submit_private(Op::MemCopy {
            dst: bufs[i % 2],
            dst_offset: 0,
            sources,
        })
    };
    let t = Instant::now();
    let mut total = 0u64;
    let mut execute_ns = 0u64;
    let mut pending_copy = Some(copy(0).context("submit copy")?);
    for i in 0..segments.len() {
        wait_ok(dev, pending_copy.take().expect("a copy per segment"))?;
        let req = ExecuteRequest::new(sum).window(bufs[i % 2], 0, segments[i].1);
        let exec = client
            .submit_private(req.to_op())
            .context("submit execute")?;
        if i + 1 < segments.len() {
            pending_copy = Some(copy(i + 1).context("submit copy")?);
        }
        let c = wait_ok(dev, exec)?;
        total = total.wrapping_add(c.value);
        execute_ns += c.timing.execute_ns;
    }
    Ok((total, t.elapsed().as_nanos() as u64, execute_ns))
}

/// The whole file summed by a program that reads each chunk by path itself; one
/// execution per chunk, one per buffer in flight (so every engine has work). Returns
/// (sum, wall ns).
fn by_path_pass(
    dev: &Device,
    file_sum: ProgramIndex,
    path: &str,
    size: u64,
    bufs: &[MemHandle],
    chunk: u64,
) -> anyhow::Result<(u64, u64)> {
    let client = dev.client();
    let count = size.div_ceil(chunk);
    let t = Instant::now();
    let mut in_flight = std::collections::VecDeque::new();
    let mut next = 0u64;
    let mut total = 0u64;
    while next < count || !in_flight.is_empty() {
        while next < count && in_flight.len() < bufs.len() {
            let buf = bufs[(next % bufs.len() as u64) as usize];
            let req = ExecuteRequest::new(file_sum)
                .window(buf, 0, chunk)
                .cparams(next * chunk, 0)
                .params(path.as_bytes().to_vec());
            in_flight.push_back(
                client
                    .submit_private(req.to_op())
                    .context("submit execute")?,
            );
            next += 1;
        }
        let c = wait_ok(dev, in_flight.pop_front().expect("one is in flight"))?;
        // A sum may have its top bit set, so a failed read shows only in the detail.
        if let Some(d) = &c.detail {
            bail!("the program's file read failed: {d}");
        }
        total = total.wrapping_add(c.value);
    }
    Ok((total, t.elapsed().as_nanos() as u64))
}

/// The whole file read to the host and summed natively: returns (sum, wall ns).
fn host_pass(dev: &Device, path: &str, size: u64) -> anyhow::Result<(u64, u64)> {
    let client = dev.client();
    let chunk = FILE_IO_SIZE_MAX;
    let count = size.div_ceil(chunk);
    let read = |i: u64| {
        client.submit_private(Op::FileRead {
            path: path.to_string(),
            offset: i * chunk,
            len: (size - i * chunk).min(chunk),
        })
    };
    let t = Instant::now();
    let mut in_flight = std::collections::VecDeque::new();
    let mut next = 0;
    let mut total = 0u64;
    while next < count || !in_flight.is_empty() {
        while next < count && in_flight.len() < csx_host::PIPELINE_DEPTH {
            in_flight.push_back(read(next).context("submit read")?);
            next += 1;
        }
        let c = wait_ok(dev, in_flight.pop_front().expect("one is in flight"))?;
        let Reply::Data(bytes) = c.reply else {
            bail!("a file read returned no data")
        };
        total = total.wrapping_add(host_sum(&bytes));
    }
    Ok((total, t.elapsed().as_nanos() as u64))
}

fn bench_sum_file(
    dev: &Device,
    (sum, file_sum): (ProgramIndex, ProgramIndex),
    size: u64,
    chunk: u64,
    by_path_buffers: usize,
) -> anyhow::Result<SumFileReport> {
    let path = "/bench/large";
    // Write the file in 16 MiB pieces of a repeating pattern, so memory stays small.
    let piece = pattern(FILE_IO_SIZE_MAX as usize);
    let mut written = 0u64;
    dev.put_bytes(path, &[]).context("create the large file")?;
    while written < size {
        let n = (size - written).min(piece.len() as u64) as usize;
        dev.write_file(path, written, &piece[..n])
            .context("write the large file")?;
        written += n as u64;
    }
    let bufs = [
        dev.alloc(chunk).context("alloc")?,
        dev.alloc(chunk).context("alloc")?,
    ];
    let mut many = Vec::new();
    for _ in 0..by_path_buffers {
        many.push(dev.alloc(chunk).context("alloc")?);
    }
    // Warm the page cache (and check both sides agree).
    let (want, _) = host_pass(dev, path, size)?;
    let mut best_offload = (u64::MAX, 0);
    let mut best_by_path = u64::MAX;
    let mut best_host = u64::MAX;
    for _ in 0..FILE_PASSES {
        let (got, ns) = by_path_pass(dev, file_sum, path, size, &many, chunk)?;
        ensure!(
            got == want,
            "by-path sum {got} differs from the host's {want}"
        );
        best_by_path = best_by_path.min(ns);
        let (got, ns, exec_ns) = offload_pass(dev, sum, path, size, bufs, chunk)?;
        ensure!(
            got == want,
            "offloaded sum {got} differs from the host's {want}"
        );
        if ns < best_offload.0 {
            best_offload = (ns, exec_ns);
        }
        let (got, ns) = host_pass(dev, path, size)?;
        ensure!(got == want, "host sums differ between passes");
        best_host = best_host.min(ns);
    }
    for b in bufs.into_iter().chain(many) {
        dev.free(b).context("free")?;
    }
    dev.delete_file(path).context("delete")?;
    let rate = |ns: u64| size as f64 / (ns as f64 * 1e-9);
    Ok(SumFileReport {
        size_bytes: size,
        chunk_bytes: chunk,
        offload_ns: best_offload.0,
        offload_bytes_per_s: rate(best_offload.0),
        offload_execute_ns: best_offload.1,
        by_path_ns: best_by_path,
        by_path_bytes_per_s: rate(best_by_path),
        by_path_buffers,
        host_ns: best_host,
        host_bytes_per_s: rate(best_host),
        ratio: rate(best_offload.0) / rate(best_host),
        ratio_by_path: rate(best_by_path) / rate(best_host),
    })
}

fn gib_per_s(bytes_per_s: f64) -> String {
    format!("{:.2} GiB/s", bytes_per_s / (1u64 << 30) as f64)
}

fn print_human(r: &Report) {
    println!("embedded device, {} engines", r.engines);
    if let (Some(b), Some(a)) = (r.load_average_before, r.load_average_after) {
        println!(
            "load average before {:.2} {:.2} {:.2}, after {:.2} {:.2} {:.2}",
            b[0], b[1], b[2], a[0], a[1], a[2]
        );
    }
    if let Some(n) = &r.noop {
        print_noop(n);
    }
    if let Some(s) = &r.sum_1mib {
        print_sum_1mib(s);
    }
    if let Some(f) = &r.sum_file {
        print_sum_file(f);
    }
    if let Some(m) = &r.media {
        super::media::print_media(m);
    }
    if let Some(a) = &r.activate {
        print_activate(a);
    }
}

fn print_noop(n: &NoopReport) {
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "no-op execute round trip   p50 {:.2} µs   p99 {:.2} µs   mean {:.2} µs   ({} runs; device total p50 {:.2} µs)",
        us(n.round_trip.p50_ns),
        us(n.round_trip.p99_ns),
        us(n.round_trip.mean_ns),
        n.round_trip.runs,
        us(n.device_total_p50_ns)
    );
    println!(
        "no-op, raw queue pair      p50 {:.2} µs   p99 {:.2} µs   mean {:.2} µs   (the device without the host library)",
        us(n.queue_pair_round_trip.p50_ns),
        us(n.queue_pair_round_trip.p99_ns),
        us(n.queue_pair_round_trip.mean_ns)
    );
    println!(
        "no-op pipelined            {:.0} executions/s with {} in flight",
        n.pipelined_per_s, n.pipelined_depth
    );
}

fn print_sum_1mib(s: &Sum1MiBReport) {
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "1 MiB read-and-sum offload p50 {:.1} µs   p99 {:.1} µs   {}",
        us(s.offload.p50_ns),
        us(s.offload.p99_ns),
        gib_per_s(s.offload_bytes_per_s)
    );
    println!(
        "1 MiB by-path read-and-sum p50 {:.1} µs   p99 {:.1} µs   {}   (one execution: csx_file_read, then the sum)",
        us(s.by_path.p50_ns),
        us(s.by_path.p99_ns),
        gib_per_s(s.by_path_bytes_per_s)
    );
    println!(
        "1 MiB read + sum on host   p50 {:.1} µs   p99 {:.1} µs   {}",
        us(s.host.p50_ns),
        us(s.host.p99_ns),
        gib_per_s(s.host_bytes_per_s)
    );
}

fn print_sum_file(f: &SumFileReport) {
    println!(
        "sum of a warm {} file, {} chunks:",
        format_size(f.size_bytes),
        format_size(f.chunk_bytes),
    );
    println!(
        "  host (file reads + native sum)     {}  ({:.3} s)",
        gib_per_s(f.host_bytes_per_s),
        f.host_ns as f64 * 1e-9
    );
    println!(
        "  offload, staged by Memory Copy     {}  ({:.3} s; execute {:.3} s)  offload/host {:.2}",
        gib_per_s(f.offload_bytes_per_s),
        f.offload_ns as f64 * 1e-9,
        f.offload_execute_ns as f64 * 1e-9,
        f.ratio
    );
    println!(
        "  offload, program reads by path     {}  ({:.3} s; {} in flight)  offload/host {:.2}",
        gib_per_s(f.by_path_bytes_per_s),
        f.by_path_ns as f64 * 1e-9,
        f.by_path_buffers,
        f.ratio_by_path
    );
}

pub fn run(args: DeviceBenchArgs) -> anyhow::Result<u8> {
    ensure!(args.size >= 8, "--size must be at least 8 bytes");
    ensure!(
        args.chunk >= 8 && args.chunk <= u64::from(u32::MAX),
        "--chunk must be between 8 bytes and 4 GiB"
    );
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::Builder::new()
        .prefix("csx-bench-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a directory in {}", base.display()))?;
    let state = tmp.path().join("dev");
    // One by-path execution in flight per engine (one per core by default), at least 2.
    let by_path_buffers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let wants = |case: &str| args.only.is_empty() || args.only.iter().any(|c| c == case);
    let config = bench_config(&args, by_path_buffers);
    let load_average_before = load_average();
    let dev = Device::init(&state, config).context("cannot create the benchmark device")?;
    let engines = dev.identify().context("identify")?.engines;
    let noop = wants("noop")
        .then(|| bench_noop(&dev, &state))
        .transpose()?;
    let sum = load(&dev, SUM_ASM)?;
    let file_sum = load(&dev, &format!("{FILE_READ_PREFIX_ASM}{SUM_ASM}"))?;
    let sum_1mib = wants("sum-1mib")
        .then(|| bench_sum_1mib(&dev, sum, file_sum))
        .transpose()?;
    let sum_file = wants("sum-file")
        .then(|| {
            bench_sum_file(
                &dev,
                (sum, file_sum),
                args.size,
                args.chunk,
                by_path_buffers,
            )
        })
        .transpose()?;
    dev.unload(sum).context("unload")?;
    dev.unload(file_sum).context("unload")?;
    let image = state.join(csx_device::offload::NVM_FILE_NAME);
    let media = wants("media")
        .then(|| super::media::bench_media(&dev, &image, args.media_size, args.media_passes))
        .transpose()?;
    dev.close().context("closing the benchmark device")?;
    let activate = wants("activate")
        .then(|| bench_activate(tmp.path()))
        .transpose()?;
    let report = Report {
        engines,
        load_average_before,
        load_average_after: load_average(),
        noop,
        sum_1mib,
        sum_file,
        media,
        activate,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else {
        print_human(&report);
    }
    Ok(exit::SUCCESS)
}

/// The benchmark device: room for the file and the media case on NVM, for the staging
/// and by-path buffers in memory.
fn bench_config(args: &DeviceBenchArgs, by_path_buffers: usize) -> DeviceConfig {
    DeviceConfig {
        nvm_size_bytes: (args.size + args.media_size + (64 << 20)).next_multiple_of(4096),
        // Two staging buffers, the by-path buffers, the 1 MiB case and the media buffer.
        slm_size_bytes: ((2 + by_path_buffers as u64) * args.chunk
            + (4 << 20)
            + super::media::MEDIA_COPY_SIZE)
            .next_multiple_of(4096),
        state_size_bytes: 4096,
        engines: args.engines,
        ..DeviceConfig::default()
    }
}
