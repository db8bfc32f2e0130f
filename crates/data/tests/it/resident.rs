//! Resident SSB runs: the second run of a query on a device with resident memory stages
//! its columns from there (same answer, fewer media bytes), and a write to a column file
//! is seen by the next run.

use csx_data::ssb::queries::query;
use csx_data::ssb::run::{run, ProbeKind, RunOptions, Split};

/// SSB at SF 0.01 under `/ssb` of a fresh device with 64 MiB of resident memory, in raw
/// (first-version) column files: the tests rewrite a column's values in place, and an
/// encoded block spans several of their small rounds (so an encoded table's first run
/// already reuses blocks it staged for an earlier round).
fn raw_dataset() -> (tempfile::TempDir, csx_host::Device) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 1, &mut |_, _, _| {}).unwrap();
    csx_data::columnar::dataset_as_raw(&data).unwrap();
    let config = csx_device::DeviceConfig {
        perf: csx_device::perf::PerfModel::lambda_io(),
        resident_bytes: Some(64 << 20),
        time_limit_ms: Some(csx_host::proto::limits::TIME_LIMIT_MS_MAX),
        ..Default::default()
    };
    let dev = csx_host::Device::init(&tmp.path().join("dev"), config).unwrap();
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    (tmp, dev)
}

/// Overwrites every value of the raw u32 column file at `path` with `v`.
fn fill_u32(dev: &csx_host::Device, path: &str, v: u32) {
    let size = dev.stat(path).unwrap().size_bytes;
    let values: Vec<u8> = (0..size / 4).flat_map(|_| v.to_le_bytes()).collect();
    dev.write_file(path, 0, &values).unwrap();
}

#[test]
fn resident_runs_reuse_columns_and_see_writes() {
    let (_tmp, dev) = raw_dataset();
    let q = query("Q1.1").unwrap();
    let resident = RunOptions {
        resident: true,
        round_rows: 1 << 14,
        ..Default::default()
    };
    let first = run(&dev, "/ssb", q, &resident).unwrap();
    assert!(!first.rows.is_empty());
    assert_eq!(first.meter.resident_bytes, 0, "nothing resident yet");
    let second = run(&dev, "/ssb", q, &resident).unwrap();
    assert_eq!(
        second.rows, first.rows,
        "reused columns give the same answer"
    );
    assert!(second.meter.resident_bytes > 0);
    assert!(
        second.meter.media_bytes < first.meter.media_bytes,
        "{} media bytes, then {}",
        first.meter.media_bytes,
        second.meter.media_bytes
    );
    let discount = (second.reuse.iter())
        .find(|c| c.path == "/ssb/lineorder/lo_discount.col")
        .unwrap_or_else(|| panic!("lo_discount staged: {:?}", second.reuse));
    assert_eq!(discount.resident_bytes, discount.staged_bytes);
    // Every discount becomes 2 (inside Q1.1's 1..3): the answer grows, and the resident
    // run must see it exactly as a fresh one does.
    let path = "/ssb/lineorder/lo_discount.col";
    fill_u32(&dev, path, 2);
    let after = run(&dev, "/ssb", q, &resident).unwrap();
    let fresh = run(&dev, "/ssb", q, &RunOptions::default()).unwrap();
    assert_eq!(after.rows, fresh.rows, "a resident run sees the write");
    assert_ne!(after.rows, first.rows, "the write changed the answer");
    let discount = (after.reuse.iter())
        .find(|c| c.path == path)
        .expect("lo_discount staged");
    assert_eq!(
        discount.resident_bytes, 0,
        "the written column was read again"
    );
}

/// Runs through resident tables: the second run of a query stages nothing from
/// LINEORDER and loads no program, with the fresh run's answer; another query in
/// between keeps its own entry; a write to a staged column is seen; a budget too small
/// to keep anything still answers right.
#[test]
fn resident_tables_keep_staged_columns_and_programs_and_see_writes() {
    use csx_data::ssb::resident::ResidentTables;
    let (_tmp, dev) = raw_dataset();
    let opts = RunOptions {
        resident: true,
        round_rows: 1 << 14,
        ..Default::default()
    };
    let fresh = |name: &str| run(&dev, "/ssb", query(name).unwrap(), &opts).unwrap();
    let mut tables = ResidentTables::new(&dev, 256 << 20);
    let q11 = query("Q1.1").unwrap();
    let first = tables.run("/ssb", q11, &opts).unwrap();
    let kept = first
        .kept
        .expect("a run through resident tables says what it kept");
    assert!(
        !kept.lineorder_reused && kept.programs_reused == 0,
        "{kept:?}"
    );
    assert!(kept.kept_bytes > 0);
    assert_eq!(first.rows, fresh("Q1.1").rows);
    let other = tables.run("/ssb", query("Q3.2").unwrap(), &opts).unwrap();
    assert_eq!(other.rows, fresh("Q3.2").rows);
    let second = tables.run("/ssb", q11, &opts).unwrap();
    assert_eq!(second.rows, first.rows);
    let kept = second.kept.unwrap();
    assert!(kept.lineorder_reused && kept.dims_reused == 1, "{kept:?}");
    // the filter, dim and merge operators and the emitted probe
    assert_eq!(kept.programs_reused, 4, "{kept:?}");
    assert!(
        second
            .reuse
            .iter()
            .all(|c| !c.path.contains("/lineorder/") || c.staged_bytes <= 64),
        "only LINEORDER's sentinels were copied: {:?}",
        second.reuse
    );
    let load: u64 = (second.phases.iter())
        .filter(|p| p.name == "load")
        .map(|p| p.commands)
        .sum();
    let first_load: u64 = (first.phases.iter())
        .filter(|p| p.name == "load")
        .map(|p| p.commands)
        .sum();
    assert!(load < first_load, "load commands {first_load}, then {load}");
    // Every discount becomes 2: the kept columns are stale and must be staged again.
    let path = "/ssb/lineorder/lo_discount.col";
    fill_u32(&dev, path, 2);
    let after = tables.run("/ssb", q11, &opts).unwrap();
    let kept = after.kept.unwrap();
    assert!(!kept.lineorder_reused && kept.dims_reused == 1, "{kept:?}");
    assert_eq!(after.rows, fresh("Q1.1").rows, "a kept run sees the write");
    assert_ne!(after.rows, first.rows, "the write changed the answer");
    let again = tables.run("/ssb", q11, &opts).unwrap();
    assert!(again.kept.unwrap().lineorder_reused);
    assert_eq!(again.rows, after.rows);
    // Every date is in 1993 now (Q1.1's year): the kept dimension is stale.
    fill_u32(&dev, "/ssb/date/d_year.col", 1993);
    let dated = tables.run("/ssb", q11, &opts).unwrap();
    let kept = dated.kept.unwrap();
    assert!(kept.lineorder_reused && kept.dims_reused == 0, "{kept:?}");
    assert_eq!(
        dated.rows,
        fresh("Q1.1").rows,
        "a kept run sees the dimension's write"
    );
    assert_ne!(dated.rows, after.rows, "the write changed the answer");
    // The operator probe and aggregation on the host over kept rounds: the fresh answers.
    for variant in [
        RunOptions {
            probe: ProbeKind::Operator,
            ..opts
        },
        RunOptions {
            split: Split::HostAgg,
            ..opts
        },
    ] {
        let want = run(&dev, "/ssb", q11, &variant).unwrap().rows;
        for _ in 0..2 {
            assert_eq!(
                tables.run("/ssb", q11, &variant).unwrap().rows,
                want,
                "{variant:?}"
            );
        }
    }
    tables.close().unwrap();
    // Too small a budget keeps no columns: every run stages, and answers the same.
    let mut small = ResidentTables::new(&dev, 1 << 10);
    for _ in 0..2 {
        let r = small.run("/ssb", q11, &opts).unwrap();
        assert!(!r.kept.unwrap().lineorder_reused);
        assert_eq!(r.rows, dated.rows);
    }
    small.close().unwrap();
}
