//! Runs every workload once on a temporary embedded device, on the interpreter and the
//! JIT, and natively on the host, and prints whether the answers agree with the times:
//! `cargo run --release -p csx-workloads --example workloads [SIZE_MIB] [SEED]`.
//!
//! A sketch of what `make demo` and `csx bench workloads` do through the library.

use std::time::Instant;

use csx_host::transport::inproc::DeviceConfig;
use csx_host::Device;
use csx_proto::EngineKind;
use csx_workloads::{Case, Runner, WORKLOADS};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map_or(Ok(16), |a| a.parse())?;
    let seed: u64 = args.next().map_or(Ok(1), |a| a.parse())?;
    let size = size_mib << 20;

    let dir = tempfile::tempdir()?;
    let config = DeviceConfig {
        nvm_size_bytes: 4 * size + (64 << 20),
        slm_size_bytes: (4 * size).max(64 << 20),
        ..DeviceConfig::default()
    };
    let dev = Device::init(&dir.path().join("dev"), config)?;
    let mut session = Runner::new(&dev);

    println!(
        "{:<22} {:>9} {:>12} {:>12} {:>12} {:>10}  agree",
        "workload", "input", "host ms", "interp ms", "jit ms", "to host"
    );
    for w in WORKLOADS {
        let data = w.generate(seed, size)?;
        let case = Case::new(w, seed, data.len() as u64);
        dev.put_bytes(&case.input_path, &data)?;
        let inv = (w.invocation)(&case);

        let start = Instant::now();
        let expected = (w.reference)(&data, &inv);
        let host_ms = start.elapsed().as_secs_f64() * 1e3;

        let mut ms = Vec::new();
        let mut agree = true;
        let mut host_bytes = 0;
        for engine in [EngineKind::Interpreter, EngineKind::Jit] {
            let run = session.run(w, &case, &inv, engine)?;
            let execute_ns: u64 = run.timings.iter().map(|t| t.execute_ns).sum();
            ms.push(execute_ns as f64 / 1e6);
            agree &= run.outcome == expected;
            host_bytes = run.host_bytes;
        }
        dev.delete_file(&case.input_path)?;
        if dev.stat(&case.output_path).is_ok() {
            dev.delete_file(&case.output_path)?;
        }
        println!(
            "{:<22} {:>8}K {:>12.2} {:>12.2} {:>12.2} {:>10}  {}",
            w.name,
            data.len() >> 10,
            host_ms,
            ms[0],
            ms[1],
            host_bytes,
            if agree { "yes" } else { "NO" }
        );
    }
    session.close()?;
    dev.close()?;
    Ok(())
}
