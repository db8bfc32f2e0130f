//! Media bytes staged per query, encoded (the format's version 2) against raw column
//! files (version 1), the figures of docs/benchmarks.md ("csx bench ssb", staged bytes):
//! SSB Q1.1 and Q3.3 (full offload, emitted probe) and TPC-H Q6 (the pushdown scan), on
//! an embedded device; TPC-H also clustered by l_shipdate, where the zone maps skip.
//! Every answer is checked: encoded equals raw, and Q6 equals DuckDB's over the Parquet
//! copy of the same (clustered) rows.
//!
//! `cargo run -p csx-data --example staged_bytes -- WORK_DIR [SF]`

use std::path::Path;

use csx_data::columnar::{cluster_table, copy_as_raw, LocalTable};
use csx_data::predicate::{literal, Cmp, Predicate};
use csx_data::scan::{scan, ScanOptions, ScanResult};
use csx_data::ssb::queries::query;
use csx_data::ssb::run::{run, RunOptions};

fn q6(li: &LocalTable) -> Vec<Predicate> {
    let col = |n: &str| li.schema.column(n).unwrap().clone();
    let lit = |n: &str, t: &str| literal(&col(n), None, t).unwrap().unwrap();
    vec![
        Predicate::new("l_shipdate", Cmp::Ge(lit("l_shipdate", "1994-01-01"))),
        Predicate::new("l_shipdate", Cmp::Lt(lit("l_shipdate", "1995-01-01"))),
        Predicate::new(
            "l_discount",
            Cmp::Between(lit("l_discount", "0.05"), lit("l_discount", "0.07")),
        ),
        Predicate::new("l_quantity", Cmp::Lt(lit("l_quantity", "24"))),
    ]
}

fn revenue(r: &ScanResult) -> i128 {
    let (p, d) = (&r.columns[0].values, &r.columns[1].values);
    (0..p.len())
        .map(|i| i128::from(p.get_i64(i)) * i128::from(d.get_i64(i)))
        .sum()
}

fn raw_copy(src: &Path, dst: &Path, tables: &[&str]) {
    for t in tables {
        if !dst.join(t).join("schema.json").exists() {
            copy_as_raw(&src.join(t), &dst.join(t)).unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let work = Path::new(args.get(1).expect("usage: staged_bytes WORK_DIR [SF]"));
    let sf: f64 = args.get(2).map_or(1.0, |s| s.parse().unwrap());
    let ssb = work.join("ssb");
    if !ssb.join("lineorder/schema.json").exists() {
        csx_data::ssb::gen::generate(&ssb, sf, 1, &mut |_, _, _| {}).unwrap();
    }
    let tables = ["lineorder", "customer", "supplier", "part", "date"];
    raw_copy(&ssb, &work.join("ssb-raw"), &tables);
    let tpch = work.join("tpch");
    if !tpch.join("lineitem/schema.json").exists() {
        csx_data::tpch::generate(&tpch, sf, 1, &mut |_, _, _| {}).unwrap();
    }
    raw_copy(&tpch, &work.join("tpch-raw"), &["lineitem"]);
    let clustered = work.join("tpch-clustered");
    if !clustered.join("lineitem/schema.json").exists() {
        copy_dir(&tpch.join("lineitem"), &clustered.join("lineitem"));
        cluster_table(&clustered.join("lineitem"), "l_shipdate").unwrap();
    }
    let config = csx_device::DeviceConfig {
        nvm_size_bytes: 8 << 30,
        slm_size_bytes: 2 << 30,
        ..Default::default()
    };
    let _ = std::fs::remove_dir_all(work.join("dev"));
    let dev = csx_host::Device::init(&work.join("dev"), config).unwrap();
    for (local, remote) in [
        (ssb.clone(), "/ssb"),
        (work.join("ssb-raw"), "/ssb-raw"),
        (tpch.join("lineitem"), "/tpch/lineitem"),
        (work.join("tpch-raw/lineitem"), "/tpch-raw/lineitem"),
        (clustered.join("lineitem"), "/tpch-clustered/lineitem"),
    ] {
        csx_data::put::put_dir(&dev, &local, remote, &mut |_, _| {}).unwrap();
    }
    let load_ms = |r: &csx_data::ssb::run::QueryRun| {
        let ns: u64 = r
            .phases
            .iter()
            .filter(|p| p.name == "load")
            .map(|p| p.wall_ns)
            .sum();
        ns as f64 / 1e6
    };
    let repeats: usize = std::env::var("REPEATS").map_or(1, |s| s.parse().unwrap());
    for name in ["Q1.1", "Q3.3"] {
        let q = query(name).unwrap();
        let (mut best_raw, mut best_enc) = (f64::MAX, f64::MAX);
        let (mut wall_raw, mut wall_enc) = (f64::MAX, f64::MAX);
        let mut last = None;
        for _ in 0..repeats {
            let raw = run(&dev, "/ssb-raw", q, &RunOptions::default()).unwrap();
            let enc = run(&dev, "/ssb", q, &RunOptions::default()).unwrap();
            assert_eq!(enc.rows, raw.rows, "{name}");
            best_raw = best_raw.min(load_ms(&raw));
            best_enc = best_enc.min(load_ms(&enc));
            wall_raw = wall_raw.min(raw.wall_ns as f64 / 1e6);
            wall_enc = wall_enc.min(enc.wall_ns as f64 / 1e6);
            last = Some((enc, raw));
        }
        let (enc, raw) = last.unwrap();
        println!(
            "ssb {name} sf {sf}: load phase best of {repeats} interleaved: raw {best_raw:.1} ms, encoded {best_enc:.1} ms; query wall raw {wall_raw:.1} ms, encoded {wall_enc:.1} ms"
        );
        println!(
            "ssb {name} sf {sf}: media bytes raw {} encoded {} ({:.2}x fewer); to host {}",
            raw.meter.media_bytes,
            enc.meter.media_bytes,
            raw.meter.media_bytes as f64 / enc.meter.media_bytes as f64,
            enc.meter.bytes_to_host
        );
    }
    let li = LocalTable::open(&tpch.join("lineitem")).unwrap();
    let preds = q6(&li);
    let cols = ["l_extendedprice", "l_discount"];
    let mut answers = Vec::new();
    for dir in [
        "/tpch-raw/lineitem",
        "/tpch/lineitem",
        "/tpch-clustered/lineitem",
    ] {
        let r = scan(&dev, dir, &cols, &preds, &ScanOptions::default()).unwrap();
        println!(
            "tpch q6 sf {sf} {dir}: media bytes {} rows kept {} revenue {}",
            r.meter.media_bytes,
            r.rows,
            revenue(&r)
        );
        answers.push(revenue(&r));
    }
    dev.close().unwrap();
    assert!(answers.iter().all(|&a| a == answers[0]));
    let pq = work.join("pq-clustered");
    csx_data::parquet::write_parquet(&clustered, &pq).unwrap();
    let sql = "SELECT CAST(sum(l_extendedprice * l_discount) * 10000 AS HUGEINT) FROM lineitem \
               WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' \
               AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";
    let duck = csx_data::oracle::duckdb(&pq, sql).unwrap();
    println!(
        "duckdb q6 over the clustered parquet (x 10^4): {:?}",
        duck[0][0]
    );
    let want = serde_json::json!(answers[0].to_string());
    let got = &duck[0][0];
    assert!(
        got == &want || got.as_i64().map(i128::from) == Some(answers[0]),
        "duckdb {got} vs csx {}",
        answers[0]
    );
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}
