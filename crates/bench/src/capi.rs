//! `csx bench capi`: the overhead of libcsx, the SNIA C API (csx-capi). A
//! synchronous no-op compute (`mov r0, 0; exit`) through `csQueueComputeRequest` against
//! the same through the Rust API (`Device::execute`) over the very same connection, in
//! alternating rounds; the median per-call time over the rounds, and their ratio (the
//! issue's goal: within 1.2x).
//!
//! The C path calls libcsx's exported `extern "C"` functions, the code a C program runs
//! (linking csx-capi as an rlib: the call itself is an ordinary function call).

use std::ffi::CString;
use std::time::Instant;

use anyhow::{ensure, Context as _};
use clap::Args;
use std::sync::Arc;

use csx_capi::api::{csAllocMem, csCloseCSx, csFreeMem, csOpenCSx, csQueueComputeRequest};
use csx_capi::registry::Dev;
use csx_capi::status::{name, CS_SUCCESS};
use csx_capi::types::{
    CsComputeArg, CsComputeArgValue, CsComputeRequest, CsDevAfdm, CsDevHandle, CsMemHandle,
    CS_AFDM_TYPE,
};
use csx_host::proto::{EngineKind, MemHandle, ProgramIndex, ProgramType};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::{Device, ExecuteRequest};
use serde::Serialize;

use crate::exit;

/// Measure libcsx's (the SNIA C API's) overhead over the Rust API.
///
/// Runs ROUNDS rounds; each times ITERATIONS no-op computes through the Rust API
/// (`Device::execute`), then as many through the C API (`csQueueComputeRequest`, no
/// callback: synchronous), on one connection. Prints the median ns per call of each path
/// and the ratio C / Rust. By default on a fresh embedded device in a temporary directory
/// (deleted after); --device measures another device (a daemon: tcp://HOST:PORT, shm://NAME),
/// loading the no-op into a free program slot and unloading it after.
///
/// Example: csx bench capi --iterations 20000 --runs 7
#[derive(Debug, Args)]
pub struct CapiBenchArgs {
    /// No-op computes per path per round.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    iterations: u32,
    /// Rounds (odd, so the median is one of them).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    #[arg(long, hide = true, conflicts_with = "runs", value_parser = clap::value_parser!(u32).range(1..))]
    rounds: Option<u32>,
    /// Measure this device instead of a fresh embedded one.
    #[arg(long, value_name = "URI")]
    device: Option<String>,
    #[arg(long, hide = true, value_name = "URI", conflicts_with = "device")]
    uri: Option<String>,
    /// Give each compute one argument: an allocation of this many bytes mapped by
    /// `csAllocMem` (the C path), as a window (the Rust path); and time a third path, the
    /// Rust one plus a write and a read of the whole allocation (what a request naming a
    /// mapping cost when libcsx kept a host copy coherent around each request).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    mapped_bytes: u64,
    /// Print one JSON object (`engine`, `rounds`, `iterations`, `rust_ns`, `c_ns`,
    /// `ratio`, and each round's `rust_rounds_ns` / `c_rounds_ns`) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    uri: String,
    engine: String,
    rounds: u32,
    iterations: u32,
    mapped_bytes: u64,
    rust_ns: f64,
    c_ns: f64,
    ratio: f64,
    /// With `--mapped-bytes`: the Rust path plus a write and a read of the allocation.
    copy_ns: Option<f64>,
    rust_rounds_ns: Vec<f64>,
    c_rounds_ns: Vec<f64>,
    copy_rounds_ns: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

pub fn run(args: CapiBenchArgs) -> anyhow::Result<u8> {
    let mut args = args;
    if let Some(r) = args.rounds.take() {
        eprintln!("csx: bench capi --rounds is deprecated; use --runs");
        args.runs = r;
    }
    if let Some(u) = args.uri.take() {
        eprintln!("csx: bench capi --uri is deprecated; use --device");
        args.device = Some(u);
    }
    let report = measure(&args)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{}, engine {}, {} rounds x {} no-op computes, median per call:",
            report.uri, report.engine, report.rounds, report.iterations
        );
        println!("rust Device::execute      {:>9.0} ns", report.rust_ns);
        println!("C csQueueComputeRequest   {:>9.0} ns", report.c_ns);
        println!("ratio C / Rust            {:>9.3}", report.ratio);
        if let Some(ns) = report.copy_ns {
            println!(
                "rust + copy of {} B   {:>9.0} ns (a mapping kept coherent by copies)",
                report.mapped_bytes, ns
            );
        }
    }
    Ok(exit::SUCCESS)
}

/// The device the rounds run on: a temporary embedded one unless `--device` names one.
fn device_uri(args: &CapiBenchArgs, temp: &std::path::Path) -> anyhow::Result<String> {
    if let Some(u) = &args.device {
        return Ok(u.clone());
    }
    let dir = temp.join("dev");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 64 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    Device::init(&dir, config)
        .context("cannot create the embedded device")?
        .close()?;
    Ok(dir
        .to_str()
        .context("temporary path is not UTF-8")?
        .to_string())
}

/// Opens `uri` through libcsx: its handle and the device behind it.
fn open_c(uri: &str) -> anyhow::Result<(CsDevHandle, Arc<Dev>)> {
    let c_uri = CString::new(uri).context("the URI holds a NUL byte")?;
    let mut dev: CsDevHandle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    let opened = unsafe { csOpenCSx(c_uri.as_ptr(), std::ptr::null_mut(), &mut dev) };
    ensure!(
        opened == CS_SUCCESS,
        "csOpenCSx({uri}) failed: {}",
        name(opened)
    );
    let key = dev as usize as u64;
    let shared = csx_capi::registry::with(|r| r.devices.get(&key).cloned())
        .context("the opened device is not in libcsx's table")?;
    Ok((dev, shared))
}

/// An allocation mapped by `csAllocMem` (`--mapped-bytes`): its C handle, its device
/// handle and its size.
struct Mapped {
    mem: CsMemHandle,
    handle: MemHandle,
    len: u64,
}

/// Allocates `len` mapped bytes and writes them through the mapping.
fn alloc_mapped(dev: CsDevHandle, len: u64) -> anyhow::Result<Mapped> {
    let bytes = i32::try_from(len).context("--mapped-bytes must fit in a C int")?;
    let (mut mem, mut vaddr) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: writable outputs, no flags.
    let s = unsafe { csAllocMem(dev, bytes, std::ptr::null(), &mut mem, &mut vaddr) };
    ensure!(s == CS_SUCCESS, "csAllocMem({len}) failed: {}", name(s));
    // SAFETY: the mapping holds `len` bytes and no request is in flight.
    unsafe { std::ptr::write_bytes(vaddr.cast::<u8>(), 0x5a, len as usize) };
    let handle = csx_capi::registry::with(|r| r.mems.get(&(mem as usize as u64)).map(|m| m.handle))
        .context("the allocation is not in libcsx's table")?;
    Ok(Mapped { mem, handle, len })
}

/// The C request: the no-op, with the mapped allocation as its one argument if any.
fn c_request(dev: CsDevHandle, pind: ProgramIndex, mapped: Option<&Mapped>) -> CsComputeRequest {
    let arg = match mapped {
        Some(m) => CsComputeArg {
            type_: CS_AFDM_TYPE,
            u: CsComputeArgValue {
                dev_mem: CsDevAfdm {
                    mem_handle: m.mem,
                    byte_offset: 0,
                },
            },
        },
        None => CsComputeArg {
            type_: 0,
            u: CsComputeArgValue { value64: 0 },
        },
    };
    CsComputeRequest {
        dev_handle: dev,
        csf_id: u32::from(pind.0),
        num_args: i32::from(mapped.is_some()),
        args: [arg],
    }
}

/// Per-call ns of `n` runs of `call`.
fn time_calls(n: u32, mut call: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let t = Instant::now();
    for _ in 0..n {
        call()?;
    }
    Ok(t.elapsed().as_nanos() as f64 / f64::from(n))
}

/// One C call of `request`, checked.
fn c_call(request: &CsComputeRequest) -> anyhow::Result<()> {
    let mut r0 = 1u64;
    // SAFETY: a valid request (its argument, if any, a live allocation), no callback,
    // and a valid CompValue.
    let s = unsafe {
        csQueueComputeRequest(
            request,
            std::ptr::null_mut(),
            None,
            std::ptr::null_mut(),
            &mut r0,
        )
    };
    ensure!(
        s == CS_SUCCESS && r0 == 0,
        "csQueueComputeRequest returned {} (r0 {r0})",
        name(s)
    );
    Ok(())
}

/// The rounds: each times the Rust path, the C path and (with a mapped allocation) the
/// copy path, in turn.
fn rounds(
    args: &CapiBenchArgs,
    device: &Device,
    request: &CsComputeRequest,
    rust_request: &ExecuteRequest,
    mapped: Option<&Mapped>,
) -> anyhow::Result<[Vec<f64>; 3]> {
    let mut ns: [Vec<f64>; 3] = Default::default();
    let n = args.iterations;
    let mut buf = vec![0u8; mapped.map_or(0, |m| m.len as usize)];
    for round in 0..args.runs {
        if !args.json {
            eprint!("\rround {}/{}", round + 1, args.runs);
        }
        ns[0].push(time_calls(n, || {
            let run = device.execute(rust_request)?;
            ensure!(run.r0 == 0 && !run.trapped(), "the no-op returned {run:?}");
            Ok(())
        })?);
        ns[1].push(time_calls(n, || c_call(request))?);
        if let Some(m) = mapped {
            // What a request naming a mapping cost when the mapping was a host copy kept
            // coherent at request boundaries: write it all, run, read it all back.
            ns[2].push(time_calls(n, || {
                device.write_mem(m.handle, 0, &buf)?;
                device.execute(rust_request)?;
                device.read_mem_into(m.handle, 0, &mut buf)?;
                Ok(())
            })?);
        }
    }
    if !args.json {
        eprintln!();
    }
    Ok(ns)
}

/// Runs the rounds (see [`CapiBenchArgs`]).
fn measure(args: &CapiBenchArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let uri = device_uri(args, temp.path())?;
    let (dev, shared) = open_c(&uri)?;
    let device = &shared.device;
    let noop = crate::device::assemble(crate::device::NOOP_ASM)?;
    let pind = device.load_program_any_slot(ProgramType::Raw, &noop, None)?;
    let engine = if device.identify()?.jit {
        EngineKind::Jit
    } else {
        EngineKind::Interpreter
    };
    device.activate(pind, engine)?;
    let mapped = match args.mapped_bytes {
        0 => None,
        len => Some(alloc_mapped(dev, len)?),
    };
    let request = c_request(dev, pind, mapped.as_ref());
    let mut rust_request = ExecuteRequest::new(pind);
    if let Some(m) = &mapped {
        rust_request = rust_request.window(m.handle, 0, m.len);
    }
    let [rust_ns, c_ns, copy_ns] = rounds(args, device, &request, &rust_request, mapped.as_ref())?;
    if let Some(m) = &mapped {
        // SAFETY: a handle from csAllocMem.
        let s = unsafe { csFreeMem(m.mem, std::ptr::null()) };
        ensure!(s == CS_SUCCESS, "csFreeMem failed: {}", name(s));
    }
    device.deactivate(pind)?;
    device.unload(pind)?;
    drop(shared);
    let closed = csCloseCSx(dev);
    ensure!(closed == CS_SUCCESS, "csCloseCSx failed: {}", name(closed));
    let (r, c) = (median(&rust_ns), median(&c_ns));
    Ok(Report {
        uri: if args.device.is_some() {
            uri
        } else {
            "(temporary embedded device)".into()
        },
        engine: format!("{engine:?}"),
        rounds: args.runs,
        iterations: args.iterations,
        mapped_bytes: args.mapped_bytes,
        rust_ns: r,
        c_ns: c,
        ratio: c / r,
        copy_ns: (!copy_ns.is_empty()).then(|| median(&copy_ns)),
        rust_rounds_ns: rust_ns,
        c_rounds_ns: c_ns,
        copy_rounds_ns: copy_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_paths_run_every_round_on_one_device() {
        let args = CapiBenchArgs {
            iterations: 20,
            runs: 3,
            rounds: None,
            device: None,
            uri: None,
            mapped_bytes: 0,
            json: true,
        };
        let r = measure(&args).expect("the bench runs");
        assert_eq!((r.rust_rounds_ns.len(), r.c_rounds_ns.len()), (3, 3));
        assert!(r
            .rust_rounds_ns
            .iter()
            .chain(&r.c_rounds_ns)
            .all(|&ns| ns > 0.0));
        assert!(r.rust_rounds_ns.contains(&r.rust_ns) && r.c_rounds_ns.contains(&r.c_ns));
        assert_eq!(r.ratio, r.c_ns / r.rust_ns);
    }

    #[test]
    fn a_mapped_argument_adds_the_copy_path() {
        let args = CapiBenchArgs {
            iterations: 3,
            runs: 1,
            rounds: None,
            device: None,
            uri: None,
            mapped_bytes: 1 << 20,
            json: true,
        };
        let r = measure(&args).expect("the bench runs");
        assert_eq!(r.copy_rounds_ns.len(), 1);
        assert_eq!(r.copy_ns, Some(r.copy_rounds_ns[0]));
        assert!(r.c_ns > 0.0 && r.copy_rounds_ns[0] > 0.0);
    }

    #[test]
    fn a_device_that_cannot_be_opened_is_an_error_naming_it() {
        let args = CapiBenchArgs {
            iterations: 1,
            runs: 1,
            rounds: None,
            device: Some("bogus://x".into()),
            uri: None,
            mapped_bytes: 0,
            json: true,
        };
        let e = measure(&args).expect_err("no such device").to_string();
        assert!(e.contains("bogus://x") && e.contains("CS_ENODEV"), "{e}");
    }
}
