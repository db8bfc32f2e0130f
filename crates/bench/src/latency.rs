//! `csx bench latency`: round trips through a transport (embedded, shm or tcp).
//!
//! Cases, each with 1 and with 8 commands outstanding:
//! * `noop`: Execute of a program that returns at once (`mov r0, 0; exit`);
//! * `read4k`, `read1m`: Memory Read of 4 KiB / 1 MiB of device memory;
//! * `write4k`, `write1m`: Memory Write of 4 KiB / 1 MiB.
//!
//! A command's latency runs from just before its submission to the moment its
//! completion is reaped; throughput is the bytes moved over the wall time of the case.
//! Through shm, reads and writes use buffers in the shared host memory (the device
//! copies straight between them and its memory, as DMA); through the other transports
//! they use the ordinary commands, whose data travels inside them. Each outstanding
//! command has its own allocation, so writes in flight never touch the same bytes.
//! The machine's memcpy bandwidth (1 MiB blocks, the size of the largest case, and
//! 64 MiB, beyond the caches) is printed beside the table, the yardstick for reads.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use clap::Args;
use csx_host::proto::{
    Command, CommandId, Completion, EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply,
    Windows,
};
use csx_host::transport::inproc::embedded::Embedded;
use csx_host::transport::inproc::{InprocOptions, InprocTransport};
use csx_host::transport::shm::{HostBuffer, ShmOptions, ShmTransport};
use csx_host::transport::tcp::{TcpOptions, TcpTransport};
use csx_host::transport::Transport;
use csx_host::DeviceUri;
use serde::Serialize;

use crate::exit;

/// Measure round trips of no-op executions and memory reads and writes.
#[derive(Debug, Args)]
pub struct LatencyBenchArgs {
    /// The device to measure; default: $CSX_DEVICE, else the per-user device.
    #[arg(long, env = "CSX_DEVICE", value_name = "URI")]
    device: Option<String>,
    /// Print a JSON list of rows (`transport`, `op`, `depth`, `p50_ns`, `p99_ns`,
    /// `bytes_per_s`) instead of a table.
    #[arg(long)]
    json: bool,
    /// Milliseconds each case runs (after a warm-up of a tenth of that).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    duration_ms: u64,
}

/// Commands outstanding in the cases.
const DEPTHS: [usize; 2] = [1, 8];

/// Latencies kept per case at most (bounds the bench's memory on a fast transport).
const SAMPLES_MAX: usize = 4 << 20;

/// One case's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Noop,
    Read(usize),
    Write(usize),
}

impl Case {
    const ALL: [(Case, &'static str); 5] = [
        (Case::Noop, "noop"),
        (Case::Read(4096), "read4k"),
        (Case::Write(4096), "write4k"),
        (Case::Read(1 << 20), "read1m"),
        (Case::Write(1 << 20), "write1m"),
    ];

    fn bytes(self) -> usize {
        match self {
            Case::Noop => 0,
            Case::Read(n) | Case::Write(n) => n,
        }
    }
}

/// One result row.
#[derive(Debug, Serialize)]
struct Row {
    transport: &'static str,
    op: &'static str,
    depth: usize,
    p50_ns: u64,
    p99_ns: u64,
    bytes_per_s: f64,
    ops_per_s: f64,
}

/// What the cases need of the device: a no-op program, one allocation per slot.
struct Setup {
    pind: ProgramIndex,
    handles: Vec<MemHandle>,
}

/// A transport with the way the bench drives it.
enum Driver {
    /// Any transport, commands carrying their data.
    Plain(Box<dyn Transport>),
    /// Shm with host-memory buffers: per slot, one of 4 KiB and one of 1 MiB, lent to
    /// the transport while a command uses it.
    Shm {
        t: ShmTransport,
        small: Vec<Option<HostBuffer>>,
        large: Vec<Option<HostBuffer>>,
        lent: HashMap<CommandId, (usize, bool)>,
    },
}

impl Driver {
    fn transport(&self) -> &dyn Transport {
        match self {
            Driver::Plain(t) => t.as_ref(),
            Driver::Shm { t, .. } => t,
        }
    }

    fn submit(
        &mut self,
        id: CommandId,
        case: Case,
        slot: usize,
        setup: &Setup,
        pattern: &[u8],
    ) -> anyhow::Result<()> {
        let handle = setup.handles[slot];
        let op = match case {
            Case::Noop => Op::Execute {
                pind: setup.pind,
                windows: Windows::Inline(Vec::new()),
                cparam1: 0,
                cparam2: 0,
                params: Vec::new(),
                fuel: None,
                time_limit_ms: None,
                generation: None,
            },
            Case::Read(n) => Op::MemRead {
                handle,
                offset: 0,
                len: n as u64,
            },
            Case::Write(n) => Op::MemWrite {
                handle,
                offset: 0,
                data: match self {
                    Driver::Plain(_) => pattern[..n].to_vec(),
                    Driver::Shm { .. } => Vec::new(),
                },
            },
        };
        let cmd = Command::new(id, op);
        match self {
            Driver::Plain(t) => t.submit(cmd)?,
            Driver::Shm {
                t,
                small,
                large,
                lent,
            } => match case {
                Case::Noop => t.submit(cmd)?,
                Case::Read(n) | Case::Write(n) => {
                    let is_large = n > 4096;
                    let pool = if is_large { large } else { small };
                    let buffer = pool[slot].take().context("a buffer per slot")?;
                    lent.insert(id, (slot, is_large));
                    t.submit_with_buffer(cmd, buffer)?;
                }
            },
        }
        Ok(())
    }

    fn reap(&mut self) -> anyhow::Result<Completion> {
        loop {
            match self {
                Driver::Plain(t) => {
                    if let Some(c) = t.reap(Some(Duration::from_secs(30)))? {
                        return Ok(c);
                    }
                }
                Driver::Shm {
                    t,
                    small,
                    large,
                    lent,
                } => {
                    if let Some((c, buffer)) = t.reap_with_buffer(Some(Duration::from_secs(30)))? {
                        if let (Some(b), Some((slot, is_large))) = (buffer, lent.remove(&c.id)) {
                            let pool = if is_large { large } else { small };
                            pool[slot] = Some(b);
                        }
                        return Ok(c);
                    }
                }
            }
        }
    }
}

/// Submits one command and waits for it (setup and teardown only).
fn call(driver: &mut Driver, next: &mut u64, op: Op) -> anyhow::Result<Completion> {
    *next += 1;
    let id = CommandId(*next);
    let t = driver.transport();
    t.submit(Command::new(id, op))?;
    loop {
        if let Some(c) = t.reap(Some(Duration::from_secs(30)))? {
            ensure!(c.id == id, "completion of {} while waiting for {id}", c.id);
            ensure!(c.status.is_success(), "setup command failed: {}", c.status);
            return Ok(c);
        }
    }
}

fn open(uri: &str) -> anyhow::Result<Driver> {
    const DEPTH: u32 = 16;
    Ok(match DeviceUri::parse(uri)? {
        DeviceUri::Embedded(dir) => {
            let e =
                Embedded::open(&dir).with_context(|| format!("cannot open {}", dir.display()))?;
            let options = InprocOptions {
                queue_depth: DEPTH,
                wire_check: false,
            };
            Driver::Plain(Box::new(InprocTransport::new(e, options)?))
        }
        DeviceUri::Tcp { addr } => Driver::Plain(Box::new(TcpTransport::connect(
            &addr,
            &TcpOptions::from_env(DEPTH)?,
        )?)),
        DeviceUri::Shm { name } => {
            let options = ShmOptions {
                queue_depth: DEPTH,
                host_memory_bytes: 64 << 20,
            };
            let t = ShmTransport::connect(&name, &options)?;
            let mut small = Vec::new();
            let mut large = Vec::new();
            for _ in 0..DEPTHS[1] {
                small.push(Some(t.alloc_buffer(4096)?));
                let mut b = t.alloc_buffer(1 << 20)?;
                b.as_mut_slice().fill(0x5a);
                large.push(Some(b));
            }
            Driver::Shm {
                t,
                small,
                large,
                lent: HashMap::new(),
            }
        }
        other => bail!("cannot benchmark {other}"),
    })
}

fn setup(driver: &mut Driver, next: &mut u64) -> anyhow::Result<Setup> {
    let image = crate::device::assemble(crate::device::NOOP_ASM)?;
    let listed = call(driver, next, Op::ListPrograms)?;
    let Reply::Programs(programs) = listed.reply else {
        bail!("list-programs answered without a listing");
    };
    let pind = (0..csx_host::proto::limits::PROGRAM_SLOTS_COUNT)
        .map(ProgramIndex)
        .find(|p| !programs.iter().any(|q| q.pind == *p))
        .context("every program slot is occupied")?;
    call(
        driver,
        next,
        Op::LoadProgram {
            pind,
            ptype: ProgramType::Raw,
            total_size_bytes: image.len() as u32,
            offset: 0,
            data: image,
            entry: None,
        },
    )?;
    call(
        driver,
        next,
        Op::ActivateProgram {
            pind,
            engine: EngineKind::Jit,
        },
    )?;
    let mut handles = Vec::new();
    for _ in 0..DEPTHS[1] {
        let c = call(
            driver,
            next,
            Op::MemAlloc {
                size_bytes: 1 << 20,
            },
        )?;
        handles.push(MemHandle(u32::try_from(c.value)?));
    }
    Ok(Setup { pind, handles })
}

fn teardown(driver: &mut Driver, next: &mut u64, setup: &Setup) -> anyhow::Result<()> {
    call(
        driver,
        next,
        Op::UnloadProgram {
            pind: setup.pind,
            generation: None,
        },
    )?;
    for &handle in &setup.handles {
        call(driver, next, Op::MemFree { handle })?;
    }
    Ok(())
}

/// Runs one case for `duration` after a warm-up; returns its row.
fn measure(
    driver: &mut Driver,
    next: &mut u64,
    setup: &Setup,
    (case, name): (Case, &'static str),
    depth: usize,
    duration: Duration,
) -> anyhow::Result<Row> {
    let pattern = vec![0xa5u8; case.bytes()];
    let mut samples = Vec::new();
    let mut in_flight: HashMap<CommandId, (Instant, usize)> = HashMap::new();
    let mut free: Vec<usize> = (0..depth).collect();
    let warm_up = duration / 10;
    let mut ops = 0u64;
    let started = Instant::now();
    let mut timed_from = None;
    loop {
        let now = Instant::now();
        if timed_from.is_none() && now - started >= warm_up {
            timed_from = Some(now);
            samples.clear();
            ops = 0;
        }
        if timed_from.is_some_and(|t| now - t >= duration) || samples.len() >= SAMPLES_MAX {
            break;
        }
        while let Some(slot) = free.pop() {
            *next += 1;
            let id = CommandId(*next);
            in_flight.insert(id, (Instant::now(), slot));
            driver.submit(id, case, slot, setup, &pattern)?;
        }
        let c = driver.reap()?;
        let done = Instant::now();
        let (sent, slot) = in_flight
            .remove(&c.id)
            .with_context(|| format!("completion of {}, which is not in flight", c.id))?;
        ensure!(c.status.is_success(), "{name} failed: {}", c.status);
        samples.push(u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX));
        ops += 1;
        free.push(slot);
    }
    let wall = timed_from.map_or(Duration::ZERO, |t| t.elapsed());
    while !in_flight.is_empty() {
        let c = driver.reap()?;
        in_flight.remove(&c.id);
    }
    ensure!(!samples.is_empty(), "{name}: no command completed");
    samples.sort_unstable();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let secs = wall.as_secs_f64().max(1e-9);
    Ok(Row {
        transport: driver.transport().name(),
        op: name,
        depth,
        p50_ns: pick(0.50),
        p99_ns: pick(0.99),
        bytes_per_s: (ops as f64 * case.bytes() as f64 / secs).round(),
        ops_per_s: (ops as f64 / secs).round(),
    })
}

/// Bytes per second of copying `block` bytes between two warm buffers.
pub fn memcpy_bytes_per_s(block: usize, duration: Duration) -> f64 {
    let src = vec![0x3cu8; block];
    let mut dst = vec![0u8; block];
    dst.copy_from_slice(&src);
    let mut copies = 0u64;
    let started = Instant::now();
    while started.elapsed() < duration {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        copies += 1;
    }
    copies as f64 * block as f64 / started.elapsed().as_secs_f64()
}

fn gib(bytes_per_s: f64) -> String {
    format!("{:.2} GiB/s", bytes_per_s / f64::from(1u32 << 30))
}

pub fn run(
    args: LatencyBenchArgs,
    device: &dyn Fn() -> anyhow::Result<String>,
) -> anyhow::Result<u8> {
    let uri = match &args.device {
        Some(uri) => uri.clone(),
        None => device()?,
    };
    let duration = Duration::from_millis(args.duration_ms.max(1));
    let mut driver = open(&uri).with_context(|| format!("cannot open device {uri}"))?;
    let mut next = 0u64;
    let setup = setup(&mut driver, &mut next)?;
    let mut rows = Vec::new();
    for case in Case::ALL {
        for depth in DEPTHS {
            rows.push(measure(
                &mut driver,
                &mut next,
                &setup,
                case,
                depth,
                duration,
            )?);
        }
    }
    teardown(&mut driver, &mut next, &setup)?;
    let transport = driver.transport().name();
    close(driver)?;
    let memcpy = [
        memcpy_bytes_per_s(1 << 20, duration),
        memcpy_bytes_per_s(64 << 20, duration),
    ];
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        eprintln!(
            "csx: memcpy on this machine: {} (1 MiB blocks), {} (64 MiB blocks)",
            gib(memcpy[0]),
            gib(memcpy[1])
        );
    } else {
        println!(
            "device {uri} ({transport}), {} ms per case",
            duration.as_millis()
        );
        print_table(&rows, memcpy);
    }
    Ok(exit::SUCCESS)
}

/// Closes the transport (through shm, after a line of the host side's counters).
fn close(driver: Driver) -> anyhow::Result<()> {
    match driver {
        Driver::Plain(t) => t.close()?,
        Driver::Shm {
            t, small, large, ..
        } => {
            let m = t.metrics().snapshot();
            eprintln!(
                "csx: shm host side: {} commands, {} doorbells rung, {} sleeps on the interrupt",
                m.commands, m.notifies, m.sleeps
            );
            drop((small, large));
            Box::new(t).close()?;
        }
    }
    Ok(())
}

/// The rows and the memcpy yardstick (bytes per second of 1 MiB and 64 MiB blocks).
fn print_table(rows: &[Row], memcpy: [f64; 2]) {
    println!(
        "{:<8} {:>5} {:>12} {:>12} {:>14} {:>12}",
        "op", "depth", "p50", "p99", "throughput", "ops/s"
    );
    for r in rows {
        let through = if r.bytes_per_s > 0.0 {
            gib(r.bytes_per_s)
        } else {
            "-".to_string()
        };
        println!(
            "{:<8} {:>5} {:>9.2} µs {:>9.2} µs {:>14} {:>12.0}",
            r.op,
            r.depth,
            r.p50_ns as f64 / 1e3,
            r.p99_ns as f64 / 1e3,
            through,
            r.ops_per_s
        );
    }
    println!(
        "memcpy: {} (1 MiB blocks), {} (64 MiB blocks)",
        gib(memcpy[0]),
        gib(memcpy[1])
    );
}
