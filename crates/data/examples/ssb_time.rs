//! One SSB query's device run, timed: generates the dataset and an embedded device
//! holding it under WORK the first time, then runs the query RUNS times.
//! `cargo run --release -p csx-data --example ssb_time -- WORK [SF] [RUNS] [QUERY] [SPLIT]`
//! (defaults: 0.1, 5, Q3.3, offload). Prints each run's wall ms, modelled ms and
//! answer rows, then the median wall ms.

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
        let dev = csx_host::Device::init(&state, Default::default())?;
        csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {})?;
        dev
    };
    let opts = RunOptions {
        split,
        ..RunOptions::default()
    };
    let mut walls = Vec::new();
    for _ in 0..runs {
        let r = run(&dev, "/ssb", q, &opts)?;
        println!(
            "wall {:.2} ms, modelled {:.3} ms, {} rows summing {}, {} joined, {} commands",
            r.wall_ns as f64 / 1e6,
            r.meter.modelled_ns as f64 / 1e6,
            r.rows.len(),
            r.rows.iter().map(|x| x.value).sum::<u64>(),
            r.joined,
            r.meter.commands
        );
        walls.push(r.wall_ns);
    }
    walls.sort_unstable();
    if let Some(m) = walls.get(walls.len() / 2) {
        println!("median wall {:.2} ms", *m as f64 / 1e6);
    }
    dev.close()?;
    Ok(())
}
