//! The C API's overhead: a synchronous no-op compute through `csQueueComputeRequest`
//! against the same through the Rust API (`Device::execute`), on one embedded device,
//! one connection, alternating rounds. Issue 14's goal: within 1.2x.
//!
//! `cargo run --release -p csx-capi --example overhead [-- ITERATIONS ROUNDS]`
//!
//! It calls the exported `extern "C"` functions directly: the same code a C caller runs
//! (the call itself is an ordinary function call). Not a `csx bench` subcommand so that
//! the CLI does not build libcsx's cdylib and staticlib.

use std::ffi::CString;
use std::time::Instant;

use csx_capi::api::*;
use csx_capi::status::CS_SUCCESS;
use csx_capi::types::*;
use csx_host::proto::{EngineKind, ProgramIndex, ProgramType};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::{Device, ExecuteRequest};

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: u32 = args
        .next()
        .map_or(20_000, |a| a.parse().expect("ITERATIONS"));
    let rounds: u32 = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("dev");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 16 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    Device::init(&dir, config)
        .expect("init")
        .close()
        .expect("close");

    let name = CString::new(dir.to_str().unwrap()).unwrap();
    let mut dev: CsDevHandle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    let opened = unsafe { csOpenCSx(name.as_ptr(), std::ptr::null_mut(), &mut dev) };
    assert_eq!(opened, CS_SUCCESS);
    // The Rust API over the very same connection.
    let key = dev as usize as u64;
    let shared = csx_capi::registry::with(|r| r.devices[&key].clone());
    let device = &shared.device;
    // mov r0, 0; exit
    let noop: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let pind = ProgramIndex(0);
    device
        .load_program(pind, ProgramType::Raw, &noop, None)
        .expect("load");
    let engine = if device.identify().expect("identify").jit {
        EngineKind::Jit
    } else {
        EngineKind::Interpreter
    };
    device.activate(pind, engine).expect("activate");

    let request = CsComputeRequest {
        dev_handle: dev,
        csf_id: 0,
        num_args: 0,
        args: [],
    };
    let rust_request = ExecuteRequest::new(pind);
    let mut rust_ns = Vec::new();
    let mut c_ns = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iterations {
            let run = device.execute(&rust_request).expect("execute");
            assert_eq!(run.r0, 0);
        }
        rust_ns.push(t.elapsed().as_nanos() as f64 / f64::from(iterations));
        let t = Instant::now();
        for _ in 0..iterations {
            let mut r0 = 1u64;
            // SAFETY: a valid request with no arguments and a valid CompValue.
            let s = unsafe {
                csQueueComputeRequest(
                    &request,
                    std::ptr::null_mut(),
                    None,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut r0,
                )
            };
            assert_eq!((s, r0), (CS_SUCCESS, 0));
        }
        c_ns.push(t.elapsed().as_nanos() as f64 / f64::from(iterations));
    }
    drop(shared);
    assert_eq!(csCloseCSx(dev), CS_SUCCESS);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, c) = (median(&mut rust_ns), median(&mut c_ns));
    println!("engine {engine:?}, {rounds} rounds x {iterations} no-op computes, median per call:");
    println!("rust Device::execute      {r:>9.0} ns");
    println!("C csQueueComputeRequest   {c:>9.0} ns");
    println!("ratio C / Rust            {:>9.3}", c / r);
}
