//! TPC-H Q6's pushdown scan on an existing device holding /tpch/lineitem, timed:
//! `cargo run --release -p csx-data --example scan_q6 -- DEVICE_DIR [RUNS] [jit|interp]
//! [resident]`. Prints each run's wall ms, the device's execute ms (summed over runs at
//! once and their span) and the rows kept; `resident`: through resident scans (the
//! first run stages, the others reuse; the device needs resident memory). Each run's
//! modelled ms and fuel are printed too.
//!
//! `scan_q6 --init DEVICE_DIR SF PROFILE`: makes the device (performance profile
//! `PROFILE`: unthrottled, lambda-io or daisy; resident memory, as the tpch bench's)
//! with TPC-H lineitem at scale `SF` in /tpch/lineitem.

use csx_data::predicate::{literal, Cmp, Predicate};
use csx_data::scan::resident::{ResidentScans, RESIDENT_BUDGET_DEFAULT};
use csx_data::scan::{device_schema, scan_kept, ScanOptions};
use csx_host::proto::EngineKind;
use csx_host::Session;

/// `--init DEVICE_DIR SF PROFILE` (see the module doc).
fn init(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [dir, sf, profile] = args else {
        return Err("usage: scan_q6 --init DEVICE_DIR SF PROFILE".into());
    };
    // As `python -m csx.bench tpch` makes its devices: room for resident scans.
    let config = csx_device::DeviceConfig {
        perf: csx_device::perf::PerfModel::profile(profile)?,
        nvm_size_bytes: 8 << 30,
        slm_size_bytes: 2 << 30,
        resident_bytes: Some(16 << 20),
        ..Default::default()
    };
    let dev = csx_host::Device::init(std::path::Path::new(dir), config)?;
    let data = tempfile::tempdir()?;
    csx_data::tpch::generate(data.path(), sf.parse()?, 1, &mut |_, _, _| {})?;
    let li = data.path().join("lineitem");
    csx_data::put::put_dir(&dev, &li, "/tpch/lineitem", &mut |_, _| {})?;
    dev.close()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--init") {
        return init(&args[2..]);
    }
    let dir = args
        .get(1)
        .ok_or("usage: scan_q6 DEVICE_DIR [RUNS] [jit|interp]")?;
    let runs: u32 = args.get(2).map_or(Ok(3), |s| s.parse())?;
    let engine = match args.get(3).map(String::as_str) {
        Some("interp") => EngineKind::Interpreter,
        _ => EngineKind::Jit,
    };
    let dev = csx_host::Device::open(dir)?;
    let table = "/tpch/lineitem";
    let schema = {
        let mut s = Session::new(&dev);
        device_schema(&mut s, table)?
    };
    let lit = |c: &str, t: &str| -> Result<i64, Box<dyn std::error::Error>> {
        Ok(literal(schema.column(c)?, None, t)?.ok_or("no literal")?)
    };
    let preds = vec![
        Predicate::new("l_shipdate", Cmp::Ge(lit("l_shipdate", "1994-01-01")?)),
        Predicate::new("l_shipdate", Cmp::Lt(lit("l_shipdate", "1995-01-01")?)),
        Predicate::new(
            "l_discount",
            Cmp::Between(lit("l_discount", "0.05")?, lit("l_discount", "0.07")?),
        ),
        Predicate::new("l_quantity", Cmp::Lt(lit("l_quantity", "24")?)),
    ];
    let opts = ScanOptions {
        engine,
        ..ScanOptions::default()
    };
    let mut keeper = (args.get(4).map(String::as_str) == Some("resident"))
        .then(|| ResidentScans::new(Session::new(&dev), RESIDENT_BUDGET_DEFAULT));
    for _ in 0..runs {
        let cols = ["l_extendedprice", "l_discount"];
        let r = scan_kept(&dev, table, &cols, &preds, &opts, keeper.as_mut())?;
        println!(
            "wall {:.1} ms, modelled {:.1} ms, fuel {}, execute {:.1} ms (span {:.1} ms), {} executions, {} commands, kept {}, reused {}",
            r.wall_ns as f64 / 1e6,
            r.meter.modelled_ns as f64 / 1e6,
            r.meter.fuel,
            r.meter.execute_ns as f64 / 1e6,
            r.meter.execute_span_ns as f64 / 1e6,
            r.meter.executions,
            r.meter.commands,
            r.rows,
            r.reused
        );
    }
    keeper.map(ResidentScans::close).transpose()?;
    dev.close()?;
    Ok(())
}
