//! One SSB query's device run, timed: generates the dataset and an embedded device
//! holding it under WORK the first time, then runs the query RUNS times.
//! `cargo run --release -p csx-data --example ssb_time -- WORK [SF] [RUNS] [QUERY] [SPLIT]`
//! (defaults: 0.1, 5, Q3.3, offload). Prints each run's wall ms, modelled ms, answer
//! rows and its phases (wall ms, device commands), then the median wall ms.
//! `RESIDENT=1` asks for resident staging (the device is made with resident memory);
//! `KEEP=1` runs through `csx_data::ssb::resident::ResidentTables` (staged LINEORDER
//! and loaded programs kept between the runs); `ENGINE=interp` runs the programs on the
//! interpreter (default: the JIT); `MEDIA=cached` makes a new device read its media
//! through the page cache (`media_reads`, a warm image; default: direct); `ROUND_ROWS=N`
//! stages LINEORDER in rounds of N rows.

use csx_data::ssb::queries::query;
use csx_data::ssb::run::{run, RunOptions, Split};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let work = std::path::PathBuf::from(
        args.get(1)
            .ok_or("usage: ssb_time WORK [SF] [RUNS] [QUERY] [SPLIT]")?,
    );
    let sf: f64 = args.get(2).map_or(Ok(0.1), |s| s.parse())?;
    let runs: u32 = args.get(3).map_or(Ok(5), |s| s.parse())?;
    let name = args.get(4).map_or("Q3.3", String::as_str);
    let split = args
        .get(5)
        .map_or(Some(Split::Offload), |s| Split::parse(s))
        .ok_or("split: offload, host-agg or host")?;
    let q = query(name).ok_or("no such query")?;
    let data = work.join("data");
    let state = work.join("dev");
    let dev = if state.exists() {
        csx_host::Device::open(state.to_str().ok_or("a UTF-8 path")?)?
    } else {
        csx_data::ssb::gen::generate(&data, sf, 1, &mut |_, _, _| {})?;
        let config = csx_host::transport::inproc::DeviceConfig {
            resident_bytes: Some(1 << 30),
            slm_size_bytes: 2 << 30,
            media_reads: Some(
                std::env::var("MEDIA").map_or(Ok(Default::default()), |m| m.parse())?,
            ),
            ..Default::default()
        };
        let dev = csx_host::Device::init(&state, config)?;
        csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {})?;
        dev
    };
    let opts = RunOptions {
        split,
        resident: std::env::var("RESIDENT").is_ok_and(|v| v == "1"),
        engine: match std::env::var("ENGINE").as_deref() {
            Ok("interp") => csx_host::proto::EngineKind::Interpreter,
            _ => csx_host::proto::EngineKind::Jit,
        },
        round_rows: std::env::var("ROUND_ROWS")
            .map_or(Ok(RunOptions::default().round_rows), |v| v.parse())?,
        ..RunOptions::default()
    };
    let mut keep = std::env::var("KEEP")
        .is_ok_and(|v| v == "1")
        .then(|| csx_data::ssb::resident::ResidentTables::new(&dev, 1 << 30));
    let mut walls = Vec::new();
    for _ in 0..runs {
        let r = match keep.as_mut() {
            Some(k) => k.run("/ssb", q, &opts)?,
            None => run(&dev, "/ssb", q, &opts)?,
        };
        println!(
            "wall {:.2} ms, modelled {:.3} ms, {} rows summing {}, {} joined, {} commands",
            r.wall_ns as f64 / 1e6,
            r.meter.modelled_ns as f64 / 1e6,
            r.rows.len(),
            r.rows.iter().map(|x| x.value).sum::<u64>(),
            r.joined,
            r.meter.commands
        );
        let phases: Vec<String> = (r.phases.iter())
            .map(|p| {
                let (wall, vm) = (p.wall_ns as f64 / 1e6, p.vm_ns as f64 / 1e6);
                format!("{} {wall:.2}/{vm:.2} ms {}c", p.name, p.commands)
            })
            .collect();
        println!("  phases (wall/vm, commands): {}", phases.join(", "));
        if let Some(k) = r.kept {
            println!("  kept: {k:?}");
        }
        walls.push(r.wall_ns);
    }
    walls.sort_unstable();
    if let Some(m) = walls.get(walls.len() / 2) {
        println!("median wall {:.2} ms", *m as f64 / 1e6);
    }
    keep.map(|k| k.close()).transpose()?;
    dev.close()?;
    Ok(())
}
