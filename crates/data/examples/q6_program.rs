//! The scan program of TPC-H Q6's shape alone on a device, over one chunk of rows drawn
//! from Q6's column domains (ship dates uniform over the 2,526 days of LINEITEM,
//! discounts 0.00-0.10, quantities 1-50), for reading what a row costs the engine:
//! `cargo run --release -p csx-data --example q6_program -- [RUNS] [ROWS] [jit|cranelift|interp]`.
//! Prints each run's rows kept, instructions counted (the model's), fuel and execute ns;
//! run it under `valgrind --tool=callgrind` to count the JIT-compiled code's own
//! machine instructions (the unnamed object). `CSX_Q6_IMAGE=PATH` writes the program's
//! raw image to PATH (`csx vm disasm PATH` reads it).

use csx_data::rng::Stream;
use csx_data::scan::program::{emit, Input, Layout, Output, PASS_UNKNOWN};
use csx_host::proto::{EngineKind, ProgramType};
use csx_host::ExecuteRequest;

/// Q6's layout at `c` rows: price, discount, quantity (8 bytes), ship date (4 bytes);
/// price and discount copied out.
fn q6_layout(c: u64) -> Layout {
    let input = |width, segment, ranges: Option<Vec<(u64, u64)>>, pass_ppm| Input {
        width,
        segment,
        dict_entries: None,
        ranges,
        pass_ppm,
    };
    Layout {
        inputs: vec![
            input(8, 0, None, PASS_UNKNOWN),
            input(8, 8 * c, Some(vec![(5, 7)]), 272_727),
            input(
                8,
                16 * c,
                Some(vec![(0, 2399), (1 << 63, u64::MAX)]),
                460_000,
            ),
            input(4, 24 * c, Some(vec![(8766, 9130)]), 144_000),
        ],
        outputs: vec![
            Output {
                input: 0,
                segment: 0,
            },
            Output {
                input: 1,
                segment: 8 * c,
            },
        ],
        chunk_rows: c,
        in_bytes: 28 * c,
        out_bytes: 16 * c,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: u32 = args.get(1).map_or(Ok(3), |s| s.parse())?;
    let rows: u64 = args.get(2).map_or(Ok(786_432), |s| s.parse())?;
    let tier = args.get(3).map_or("jit", String::as_str);
    let engine = match tier {
        "interp" => EngineKind::Interpreter,
        _ => EngineKind::Jit,
    };
    let layout = q6_layout(rows);
    let mut window = vec![0u8; layout.in_bytes as usize];
    let mut rng = Stream::new(6, "q6 program");
    for row in 0..rows as usize {
        let price = rng.range(90_000, 10_494_950) as u64;
        let disc = rng.range(0, 10) as u64;
        let qty = 100 * rng.range(1, 50) as u64;
        let ship = rng.range(8036, 8036 + 2525) as u32;
        window[8 * row..8 * row + 8].copy_from_slice(&price.to_le_bytes());
        let at = 8 * rows as usize + 8 * row;
        window[at..at + 8].copy_from_slice(&disc.to_le_bytes());
        let at = 16 * rows as usize + 8 * row;
        window[at..at + 8].copy_from_slice(&qty.to_le_bytes());
        let at = 24 * rows as usize + 4 * row;
        window[at..at + 4].copy_from_slice(&ship.to_le_bytes());
    }
    let tmp = tempfile::tempdir()?;
    let mut perf = csx_device::perf::PerfModel::lambda_io();
    perf.throttle = false;
    // CSX_Q6_COUNT=0: runs not counted (the code a profile without device instruction
    // costs runs); counted by default, as under lambda-io and daisy.
    if std::env::var("CSX_Q6_COUNT").is_ok_and(|v| v == "0") {
        perf.count_work = Some(false);
    }
    // "cranelift": no tiering, every run on Cranelift's code; "jit": tiered (the quick
    // tier until the background compile lands).
    let config = csx_device::DeviceConfig {
        perf,
        jit_tiering: (tier == "cranelift").then_some(false),
        ..Default::default()
    };
    let dev = csx_host::Device::init(&tmp.path().join("dev"), config)?;
    let input = dev.alloc(layout.in_bytes)?;
    let output = dev.alloc(layout.out_bytes)?;
    dev.write_mem(input, 0, &window)?;
    let image = emit(&layout)?;
    println!("program: {} slots", image.len() / 8);
    if let Some(path) = std::env::var_os("CSX_Q6_IMAGE") {
        // The raw image, for `csx vm disasm`.
        std::fs::write(path, &image)?;
    }
    let p = dev.load_program_any_slot(ProgramType::Raw, &image, Some("scan"))?;
    dev.activate(p, engine)?;
    for _ in 0..runs {
        let req = ExecuteRequest::new(p)
            .cparams(rows, 0)
            .window(input, 0, layout.in_bytes)
            .window(output, 0, layout.out_bytes);
        let x = dev.execute(&req)?;
        let insns: u64 = x.work.iter().sum();
        println!(
            "kept {}, {} instructions counted ({:.2} a row), fuel {}, execute {:.2} ms",
            x.r0_signed(),
            insns,
            insns as f64 / rows as f64,
            x.fuel_used,
            x.timing.execute_ns as f64 / 1e6
        );
    }
    dev.unload(p)?;
    dev.close()?;
    Ok(())
}
