//! Resident scans: a scan through a keeper reuses the staged inputs of an earlier scan
//! over the same columns (any predicate), with a fresh scan's answer, and a write to
//! the table between two scans is seen by the second.

use csx_data::columnar::{copy_as_raw, ColumnSchema, ColumnType, LocalTable, TableWriter, Values};
use csx_data::ops::Meter;
use csx_data::predicate::{Cmp, Predicate};
use csx_data::scan::resident::{ResidentScans, Reuse};
use csx_data::scan::{scan, scan_kept, scan_local, ScanOptions};
use csx_data::ScanResult;
use csx_host::{Device, Session};

/// A table `t` of a clustered i64 `k` and an i32 `v` (several blocks, so zone maps skip
/// some), on a device with resident memory as `/t` (encoded) and `/raw` (raw values).
fn setup(tmp: &std::path::Path) -> (Device, LocalTable) {
    let dir = tmp.join("t");
    let rows: i64 = 5 * i64::from(csx_data::encoding::BLOCK_ROWS) + 123;
    let cols = vec![
        ColumnSchema::new("k", ColumnType::Int64),
        ColumnSchema::new("v", ColumnType::Int32),
    ];
    let mut w = TableWriter::create(&dir, "t", cols).unwrap();
    for i in 0..rows {
        w.i64(0, i - 70_000).unwrap();
        w.i32(1, ((i * 7919) % 1000) as i32 - 500).unwrap();
    }
    w.finish(&[]).unwrap();
    copy_as_raw(&dir, &tmp.join("raw")).unwrap();
    let config = csx_device::DeviceConfig {
        perf: csx_device::perf::PerfModel::lambda_io(),
        resident_bytes: Some(16 << 20),
        time_limit_ms: Some(csx_host::proto::limits::TIME_LIMIT_MS_MAX),
        ..Default::default()
    };
    let dev = Device::init(&tmp.join("dev"), config).unwrap();
    csx_data::put::put_dir(&dev, &dir, "/t", &mut |_, _| {}).unwrap();
    csx_data::put::put_dir(&dev, &tmp.join("raw"), "/raw", &mut |_, _| {}).unwrap();
    (dev, LocalTable::open(&dir).unwrap())
}

fn values(r: &ScanResult) -> Vec<Values> {
    r.columns.iter().map(|c| c.values.clone()).collect()
}

const OPTS: ScanOptions = ScanOptions {
    engine: csx_host::proto::EngineKind::Jit,
    chunk_rows: 100_000,
};

#[test]
fn resident_scans_reuse_staged_inputs_for_any_predicate() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, local) = setup(tmp.path());
    let mut keeper = ResidentScans::new(Session::new(&dev), 64 << 20);
    // Zone maps would skip most blocks for each; every case needs other blocks.
    let cases = [
        vec![Predicate::new("k", Cmp::Le(-65_000))],
        vec![Predicate::new("k", Cmp::Between(150_000, 150_100))],
        vec![
            Predicate::new("v", Cmp::In(vec![-499, 7, 498])),
            Predicate::new("k", Cmp::Gt(250_000)),
        ],
    ];
    let mut media = Vec::new();
    let mut kept_bytes = Vec::new();
    for (i, preds) in cases.iter().enumerate() {
        let want = scan_local(&local, &["k", "v"], preds).unwrap();
        let fresh = scan(&dev, "/t", &["k", "v"], preds, &OPTS).unwrap();
        let kept = scan_kept(&dev, "/t", &["k", "v"], preds, &OPTS, Some(&mut keeper)).unwrap();
        assert_eq!(values(&fresh), want, "case {i}");
        // A block a zone map excluded for an earlier predicate is staged whole, so a
        // later one that needs its rows finds them.
        assert_eq!(values(&kept), want, "case {i}: resident");
        assert_eq!(kept.reused, i > 0, "case {i}");
        media.push(kept.meter.media_bytes);
        kept_bytes.push(keeper.kept_bytes());
    }
    // The staging scan's windows were kept, and the reuses found theirs among them.
    assert!(kept_bytes[0] == kept_bytes[1] && kept_bytes[1] == kept_bytes[2]);
    assert!(keeper.kept_bytes() > 0 && keeper.entries() == 1);
    assert!(
        media[1] * 100 < media[0],
        "a reused entry reads only its sentinels: {media:?}"
    );
    // Other columns: an entry of their own.
    let p = [Predicate::new("v", Cmp::Gt(400))];
    let r = scan_kept(&dev, "/t", &["v"], &p, &OPTS, Some(&mut keeper)).unwrap();
    assert!(!r.reused && keeper.entries() == 2);
    assert_eq!(values(&r), scan_local(&local, &["v"], &p).unwrap());
    keeper.close().unwrap();
    dev.close().unwrap();
}

#[test]
fn an_entry_is_sized_by_the_widths_it_stages() {
    // Every value of the i64 `k` fits 4 bytes, so it is staged at 4 bytes a row (as the
    // i32 `v` is), and its entry takes as much device memory as `v`'s, not twice it.
    let tmp = tempfile::tempdir().unwrap();
    let (dev, local) = setup(tmp.path());
    let mut keeper = ResidentScans::new(Session::new(&dev), 64 << 20);
    let mut entry_bytes = Vec::new();
    for (col, cmp) in [("k", Cmp::Gt(250_000)), ("v", Cmp::Gt(400))] {
        let p = [Predicate::new(col, cmp)];
        let before = keeper.entry_bytes();
        for i in 0..2 {
            let r = scan_kept(&dev, "/t", &[col], &p, &OPTS, Some(&mut keeper)).unwrap();
            assert_eq!(
                values(&r),
                scan_local(&local, &[col], &p).unwrap(),
                "{col} {i}"
            );
            assert_eq!(r.reused, i == 1, "{col} {i}");
        }
        entry_bytes.push(keeper.entry_bytes() - before);
    }
    let rows = 5 * u64::from(csx_data::encoding::BLOCK_ROWS) + 123;
    assert!(entry_bytes[1] >= rows * 4, "{entry_bytes:?}");
    assert_eq!(entry_bytes[0], entry_bytes[1], "k's entry and v's");
    keeper.close().unwrap();
    dev.close().unwrap();
}

#[test]
fn a_write_while_a_scan_opens_its_files_is_seen_by_the_next_scan() {
    // The keeper checks an entry's files before the scan reads them (`reuse`), not after
    // (`acquire` checks nothing): a write in between, which the scan's view of the
    // file may miss, makes the next scan stage again.
    let tmp = tempfile::tempdir().unwrap();
    let (dev, _) = setup(tmp.path());
    let mut keeper = ResidentScans::new(Session::new(&dev), 64 << 20);
    let files = vec!["/raw/v.col".to_string()];
    let mut m = Meter::default();
    let Reuse::Checked(checked) = keeper.reuse("e", &files, &mut m).unwrap() else {
        panic!("a new entry is checked, not staged");
    };
    dev.write_file("/raw/v.col", 0, &7i32.to_le_bytes())
        .unwrap();
    let lease = keeper.acquire(checked, &[4096], &mut m).unwrap().unwrap();
    assert!(!lease.staged);
    keeper.release(lease, true, None);
    let Reuse::Checked(checked) = keeper.reuse("e", &files, &mut m).unwrap() else {
        panic!("the write after the check makes the entry stale");
    };
    let lease = keeper.acquire(checked, &[4096], &mut m).unwrap().unwrap();
    keeper.release(lease, true, None);
    // Nothing written since: the entry serves the next scan.
    assert!(matches!(
        keeper.reuse("e", &files, &mut m).unwrap(),
        Reuse::Staged(_)
    ));
    keeper.close().unwrap();
    dev.close().unwrap();
}

#[test]
fn scans_through_a_windows_only_keeper_stage_into_kept_windows() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, local) = setup(tmp.path());
    let mut keeper = ResidentScans::windows_only(Session::new(&dev), 64 << 20);
    // Zone maps skip other blocks each time: a window's bytes from the scan before
    // (rows of blocks this one skips, kept values past this one's) are never read.
    let cases = [
        vec![Predicate::new("k", Cmp::Between(150_000, 150_100))],
        vec![Predicate::new("k", Cmp::Le(-65_000))],
        vec![Predicate::new("v", Cmp::In(vec![-499, 7, 498]))],
        vec![Predicate::new("k", Cmp::Gt(250_000))],
    ];
    let mut kept_bytes = Vec::new();
    for (i, preds) in cases.iter().enumerate() {
        let want = scan_local(&local, &["k", "v"], preds).unwrap();
        for table in ["/t", "/raw"] {
            let fresh = scan(&dev, table, &["k", "v"], preds, &OPTS).unwrap();
            let kept =
                scan_kept(&dev, table, &["k", "v"], preds, &OPTS, Some(&mut keeper)).unwrap();
            assert_eq!(values(&kept), want, "case {i} {table}");
            assert!(!kept.reused && kept.meter.media_bytes == fresh.meter.media_bytes);
            if i > 0 {
                // No window allocated nor freed: fewer commands than the fresh scan's.
                assert!(
                    kept.meter.commands < fresh.meter.commands,
                    "case {i} {table}: {} commands, fresh {}",
                    kept.meter.commands,
                    fresh.meter.commands
                );
            }
        }
        kept_bytes.push(keeper.kept_bytes());
    }
    assert_eq!(keeper.entries(), 0);
    assert!(kept_bytes[0] > 0 && kept_bytes.iter().all(|&b| b == kept_bytes[0]));
    keeper.close().unwrap();
    dev.close().unwrap();
}

#[test]
fn a_write_between_resident_scans_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, _) = setup(tmp.path());
    let mut keeper = ResidentScans::new(Session::new(&dev), 64 << 20);
    let preds = [Predicate::new("v", Cmp::In(vec![-500, 3, 499]))];
    let run = |keeper: &mut ResidentScans| {
        scan_kept(&dev, "/raw", &["k"], &preds, &OPTS, Some(keeper)).unwrap()
    };
    let first = run(&mut keeper);
    let second = run(&mut keeper);
    assert!(!first.reused && second.reused);
    assert_eq!(values(&first), values(&second));
    // Every v becomes 3: every row passes.
    let path = "/raw/v.col";
    let size = dev.stat(path).unwrap().size_bytes;
    let threes: Vec<u8> = (0..size / 4).flat_map(|_| 3i32.to_le_bytes()).collect();
    dev.write_file(path, 0, &threes).unwrap();
    let after = run(&mut keeper);
    let fresh = scan(&dev, "/raw", &["k"], &preds, &OPTS).unwrap();
    assert!(!after.reused, "the written column is staged again");
    assert_eq!(
        values(&after),
        values(&fresh),
        "a resident scan sees the write"
    );
    assert_eq!(after.rows, size / 4);
    assert_ne!(after.rows, first.rows);
    let again = run(&mut keeper);
    assert!(again.reused);
    assert_eq!(again.rows, after.rows);
    keeper.close().unwrap();
    dev.close().unwrap();
}

#[test]
fn a_scan_gets_the_memory_idle_windows_hold_when_the_device_is_short() {
    // One engine (the windows' sizes do not depend on the machine's cores) and 10 MiB of
    // device memory: the first scan's windows (3.9 MB: an input and an output window of
    // 82k rows in each of two buffer sets) fit, and so do the second's (7.9 MB: twice the
    // rows a chunk), but not both.
    let tmp = tempfile::tempdir().unwrap();
    let (_, local) = setup(tmp.path());
    let config = csx_device::DeviceConfig {
        perf: csx_device::perf::PerfModel::unthrottled(),
        slm_size_bytes: 10 << 20,
        engines: Some(1),
        time_limit_ms: Some(csx_host::proto::limits::TIME_LIMIT_MS_MAX),
        ..Default::default()
    };
    let dev = Device::init(&tmp.path().join("small"), config).unwrap();
    csx_data::put::put_dir(&dev, &tmp.path().join("raw"), "/raw", &mut |_, _| {}).unwrap();
    // A budget far above the device's memory: the keeper frees nothing for it.
    let mut keeper = ResidentScans::windows_only(Session::new(&dev), 1 << 30);
    let preds = [Predicate::new("v", Cmp::Gt(400))];
    let want = scan_local(&local, &["k", "v"], &preds).unwrap();
    let small = ScanOptions {
        chunk_rows: 90_000,
        ..OPTS
    };
    let first = scan_kept(&dev, "/raw", &["k", "v"], &preds, &small, Some(&mut keeper)).unwrap();
    assert_eq!(values(&first), want);
    let idle = keeper.kept_bytes();
    assert!(
        idle > 3 << 20,
        "the first scan's windows stay idle: {idle} bytes"
    );
    // No idle window fits the second scan's sizes, and the device has no room for new
    // ones beside them: the keeper frees its idle windows and lends none, and the scan
    // allocates its own.
    let large = ScanOptions {
        chunk_rows: 180_000,
        ..OPTS
    };
    let second = scan_kept(&dev, "/raw", &["k", "v"], &preds, &large, Some(&mut keeper))
        .expect("the keeper's idle windows give way to a scan that needs the memory");
    assert_eq!(values(&second), want);
    assert_eq!(keeper.kept_bytes(), 0, "nothing lent, nothing idle");
    // The next scan lends windows again.
    let third = scan_kept(&dev, "/raw", &["k", "v"], &preds, &large, Some(&mut keeper)).unwrap();
    assert_eq!(values(&third), want);
    assert!(keeper.kept_bytes() > 0);
    keeper.close().unwrap();
    dev.close().unwrap();
}
