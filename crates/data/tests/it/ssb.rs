//! SSB flights 1 and 3 on the device against the host reference and DuckDB: every
//! query on every split, Q1.1 and Q3.3 on every filter strategy and both engine kinds,
//! at SF 0.1 (600 k LINEORDER rows). DuckDB runs the specification's SQL over the
//! Parquet copy; the host reference computes from the columns directly.

use csx_data::scan::FilterStrategy;
use csx_data::ssb::queries::{query, QUERIES};
use csx_data::ssb::run::{reference, run, LocalSource, ResultRow, RunOptions, Split};
use csx_host::proto::EngineKind;
use serde_json::Value;

use crate::oracle::duckdb;

/// DuckDB's rows as result rows (the last column is the sum; SUM over no rows is NULL).
fn from_duckdb(rows: Vec<Vec<Value>>) -> Vec<ResultRow> {
    rows.into_iter()
        .filter(|r| !r.last().unwrap().is_null())
        .map(|mut r| {
            let v = r.pop().unwrap();
            let value = v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .unwrap_or_else(|| panic!("a sum: {v}"));
            ResultRow { keys: r, value }
        })
        .collect()
}

fn sorted(mut rows: Vec<ResultRow>) -> Vec<String> {
    let mut v: Vec<String> = rows
        .drain(..)
        .map(|r| format!("{:?} {}", r.keys, r.value))
        .collect();
    v.sort();
    v
}

#[test]
fn ssb_queries_on_the_device_equal_duckdb_and_the_host_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    let pq = tmp.path().join("pq");
    csx_data::ssb::gen::generate(&data, 0.1, 1, &mut |_, _, _| {}).unwrap();
    csx_data::parquet::write_parquet(&data, &pq).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let mut local = LocalSource::new(&data);

    for q in QUERIES {
        let want = reference(&mut local, q).unwrap();
        // Q3.4 (one month, two cities on each side) is empty below about SF 1.
        assert!(
            q.name == "Q3.4" || !want.is_empty(),
            "{} selects nothing at this scale: the test would prove little",
            q.name
        );
        let oracle = from_duckdb(duckdb(&pq, q.sql));
        assert_eq!(
            sorted(want.clone()),
            sorted(oracle),
            "{}: reference vs DuckDB",
            q.name
        );
        for split in Split::ALL {
            let opts = RunOptions {
                split,
                round_rows: 1 << 18,
                ..Default::default()
            };
            let got = run(&dev, "/ssb", q, &opts).unwrap();
            assert_eq!(got.rows, want, "{} {}", q.name, split.name());
        }
    }
    for name in ["Q1.1", "Q3.3"] {
        let q = query(name).unwrap();
        let want = reference(&mut local, q).unwrap();
        for strategy in FilterStrategy::ALL {
            for engine in [EngineKind::Interpreter, EngineKind::Jit] {
                let opts = RunOptions {
                    strategy,
                    engine,
                    partitions: Some(3),
                    ..Default::default()
                };
                let got = run(&dev, "/ssb", q, &opts).unwrap();
                assert_eq!(got.rows, want, "{name} {strategy:?} {engine:?}");
            }
        }
    }
    // Full offload sends a few sums; host-only sends every column the query reads.
    let q = query("Q3.3").unwrap();
    let off = run(&dev, "/ssb", q, &RunOptions::default()).unwrap();
    let host = run(
        &dev,
        "/ssb",
        q,
        &RunOptions {
            split: Split::Host,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        off.meter.bytes_to_host * 10 < host.meter.bytes_to_host,
        "{} vs {}",
        off.meter.bytes_to_host,
        host.meter.bytes_to_host
    );
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

#[test]
fn queries_the_device_cannot_run_are_errors_naming_the_operator_or_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 2, &mut |_, _, _| {}).unwrap();
    // A shared state too small for Q3.3's lookup tables (DATE's alone is 122 KB).
    let config = csx_device::DeviceConfig {
        state_size_bytes: 64 << 10,
        ..Default::default()
    };
    let dev = csx_host::Device::init(&tmp.path().join("small"), config).unwrap();
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let q = query("Q3.3").unwrap();
    let e = run(&dev, "/ssb", q, &RunOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lookup tables") && e.contains("limit is 65536"),
        "{e}"
    );
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();

    // Customer keys that are not 1..rows: the dimension operator refuses them.
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let mut keys = std::fs::read(data.join("customer/c_custkey.col")).unwrap();
    let cities = std::fs::read(data.join("customer/c_city.col")).unwrap();
    let dict = csx_data::LocalTable::open(&data.join("customer"))
        .unwrap()
        .dictionary("c_city")
        .unwrap();
    let ki1 = dict.iter().position(|c| c == "UNITED KI1").unwrap() as u32;
    // Make row 5 a selected customer with a key far past the table.
    keys[20..24].copy_from_slice(&1_000_000u32.to_le_bytes());
    let mut cities = cities;
    cities[20..24].copy_from_slice(&ki1.to_le_bytes());
    dev.put_bytes("/ssb/customer/c_custkey.col", &keys).unwrap();
    dev.put_bytes("/ssb/customer/c_city.col", &cities).unwrap();
    let e = run(&dev, "/ssb", q, &RunOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("ssb_dim") && e.contains("CSX_ERANGE"), "{e}");
    // An unknown query is not a query.
    assert!(query("Q2.1").is_none());
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}
