//! `csx bench capi`: the overhead of libcsx, the SNIA C API (csx-capi). A
//! synchronous no-op compute (`mov r0, 0; exit`) through `csQueueComputeRequest` against
//! the same through the Rust API (`Device::execute`) over the very same connection, in
//! alternating rounds; the median per-call time over the rounds, and their ratio (the
//! issue's goal: within 1.2x).
//!
//! The C path calls libcsx's exported `extern "C"` functions, the code a C program runs
//! (linking csx-capi as an rlib: the call itself is an ordinary function call).

use std::ffi::CString;
use std::path::Path;
use std::time::Instant;

use anyhow::{ensure, Context as _};
use clap::Args;
use csx_capi::api::{csCloseCSx, csOpenCSx, csQueueComputeRequest};
use csx_capi::status::{name, CS_SUCCESS};
use csx_capi::types::{CsComputeArg, CsComputeArgValue, CsComputeRequest, CsDevHandle};
use csx_host::proto::{EngineKind, ProgramIndex, ProgramType};
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
    rust_ns: f64,
    c_ns: f64,
    ratio: f64,
    rust_rounds_ns: Vec<f64>,
    c_rounds_ns: Vec<f64>,
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
    }
    Ok(exit::SUCCESS)
}

/// Runs the rounds (see [`CapiBenchArgs`]).
fn measure(args: &CapiBenchArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let uri = match &args.device {
        Some(u) => u.clone(),
        None => fresh_device(temp.path())?,
    };
    let c_uri = CString::new(uri.clone()).context("the URI holds a NUL byte")?;
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
    let device = &shared.device;
    let (pind, engine) = load_noop(device)?;
    let request = CsComputeRequest {
        dev_handle: dev,
        csf_id: u32::from(pind.0),
        num_args: 0,
        args: [CsComputeArg {
            type_: 0,
            u: CsComputeArgValue { value64: 0 },
        }],
    };
    let (rust_ns, c_ns) = time_rounds(args, device, pind, &request)?;
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
        rust_ns: r,
        c_ns: c,
        ratio: c / r,
        rust_rounds_ns: rust_ns,
        c_rounds_ns: c_ns,
    })
}

/// A fresh embedded device in `dir`; returns its URI.
fn fresh_device(dir: &Path) -> anyhow::Result<String> {
    let dir = dir.join("dev");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 16 << 20,
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

/// Loads and activates the no-op (`mov r0, 0; exit`) in a free slot, with the JIT where
/// the device has one.
fn load_noop(device: &Device) -> anyhow::Result<(ProgramIndex, EngineKind)> {
    let noop: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let pind = device.load_program_any_slot(ProgramType::Raw, &noop, None)?;
    let engine = if device.identify()?.jit {
        EngineKind::Jit
    } else {
        EngineKind::Interpreter
    };
    device.activate(pind, engine)?;
    Ok((pind, engine))
}

/// Each round's ns per call through the Rust API and through the C API, alternating.
fn time_rounds(
    args: &CapiBenchArgs,
    device: &Device,
    pind: ProgramIndex,
    request: &CsComputeRequest,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let rust_request = ExecuteRequest::new(pind);
    let mut rust_ns = Vec::new();
    let mut c_ns = Vec::new();
    let n = args.iterations;
    for round in 0..args.runs {
        if !args.json {
            eprint!("\rround {}/{}", round + 1, args.runs);
        }
        let t = Instant::now();
        for _ in 0..n {
            let run = device.execute(&rust_request)?;
            ensure!(run.r0 == 0 && !run.trapped(), "the no-op returned {run:?}");
        }
        rust_ns.push(t.elapsed().as_nanos() as f64 / f64::from(n));
        let t = Instant::now();
        for _ in 0..n {
            c_compute(request)?;
        }
        c_ns.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    if !args.json {
        eprintln!();
    }
    Ok((rust_ns, c_ns))
}

/// One synchronous no-op compute through `csQueueComputeRequest`.
fn c_compute(request: &CsComputeRequest) -> anyhow::Result<()> {
    let mut r0 = 1u64;
    // SAFETY: a valid request with no arguments, no callback, and a valid CompValue.
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
    fn a_device_that_cannot_be_opened_is_an_error_naming_it() {
        let args = CapiBenchArgs {
            iterations: 1,
            runs: 1,
            rounds: None,
            device: Some("bogus://x".into()),
            uri: None,
            json: true,
        };
        let e = measure(&args).expect_err("no such device").to_string();
        assert!(e.contains("bogus://x") && e.contains("CS_ENODEV"), "{e}");
    }
}
