//! The pushdown scan against the host reference: both engine kinds, predicates on
//! signed, unsigned, 4- and 8-byte and dict columns, several ranges per column, chunk
//! sizes that leave a partial last chunk; and corrupt tables on the device are errors
//! naming file and row.

use csx_data::columnar::{
    copy_as_raw, write_encoded_column, ColumnSchema, ColumnType, LocalTable, TableWriter, Values,
};
use csx_data::encoding::EncodedColumn;
use csx_data::predicate::{literal, Cmp, Predicate};
use csx_data::scan::{scan, scan_local, ScanOptions};
use csx_host::proto::EngineKind;
use csx_host::Device;

fn setup(tmp: &std::path::Path) -> (Device, LocalTable) {
    let data = tmp.join("tpch");
    csx_data::tpch::generate(&data, 0.001, 11, &mut |_, _, _| {}).unwrap();
    let dev = crate::device(&tmp.join("dev"));
    csx_data::put::put_dir(&dev, &data, "/tpch", &mut |_, _| {}).unwrap();
    let li = LocalTable::open(&data.join("lineitem")).unwrap();
    (dev, li)
}

fn q6_predicates(li: &LocalTable) -> Vec<Predicate> {
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

#[test]
fn device_scans_match_the_host_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, li) = setup(tmp.path());
    let flags = li.dictionary("l_returnflag").unwrap();
    let r = flags.iter().position(|f| f == "R").unwrap() as i64;
    let cases: Vec<(Vec<&str>, Vec<Predicate>)> = vec![
        (vec!["l_extendedprice", "l_discount"], q6_predicates(&li)),
        (
            vec!["l_orderkey", "l_returnflag", "l_shipdate"],
            vec![Predicate::new("l_returnflag", Cmp::Eq(r))],
        ),
        (
            vec!["l_partkey"],
            vec![
                Predicate::new("l_partkey", Cmp::Ne(7)),
                Predicate::new("l_linenumber", Cmp::In(vec![1, 3, 7])),
            ],
        ),
        (
            vec!["l_quantity"],
            vec![Predicate::new("l_tax", Cmp::Gt(-5))],
        ),
        (
            vec!["l_suppkey"],
            vec![Predicate::new("l_orderkey", Cmp::Lt(0))],
        ),
        (vec!["l_linenumber", "l_tax"], vec![]),
        // More value ranges than one filter operator run takes (16).
        (
            vec!["l_orderkey", "l_linenumber"],
            vec![Predicate::new(
                "l_orderkey",
                Cmp::In((0..40).map(|i| i * 3 + 1).collect()),
            )],
        ),
        // Constants that need 64 bits, and a projected column used twice.
        (
            vec!["l_extendedprice", "l_shipmode", "l_extendedprice"],
            vec![
                Predicate::new("l_extendedprice", Cmp::Gt(-(1 << 40))),
                Predicate::new("l_extendedprice", Cmp::Lt(1 << 40)),
                Predicate::new("l_extendedprice", Cmp::Ne(1 << 35)),
            ],
        ),
        // More columns than registers: the program's shared-base form.
        (
            vec![
                "l_orderkey",
                "l_partkey",
                "l_suppkey",
                "l_linenumber",
                "l_quantity",
                "l_shipmode",
            ],
            vec![
                Predicate::new("l_tax", Cmp::Lt(5)),
                Predicate::new("l_receiptdate", Cmp::Gt(9000)),
            ],
        ),
        // A predicate no row can satisfy.
        (
            vec!["l_orderkey"],
            vec![
                Predicate::new("l_quantity", Cmp::Lt(5)),
                Predicate::new("l_quantity", Cmp::Gt(7)),
            ],
        ),
    ];
    for (columns, preds) in &cases {
        let want = scan_local(&li, columns, preds).unwrap();
        for engine in [EngineKind::Interpreter, EngineKind::Jit] {
            for chunk_rows in [1000, 1 << 20] {
                let opts = ScanOptions { engine, chunk_rows };
                let got = scan(&dev, "/tpch/lineitem", columns, preds, &opts).unwrap();
                let values: Vec<Values> = got.columns.iter().map(|c| c.values.clone()).collect();
                assert_eq!(values, want, "{columns:?} {preds:?} {opts:?}");
                assert_eq!(got.rows as usize, want[0].len());
                assert_eq!(got.rows_scanned, li.schema.rows);
                assert!(got.meter.modelled_ns > 0);
            }
        }
    }
    // Selection pays off: Q6's pushdown moves a small part of the two columns.
    let q6 = scan(
        &dev,
        "/tpch/lineitem",
        &["l_extendedprice", "l_discount"],
        &q6_predicates(&li),
        &ScanOptions::default(),
    )
    .unwrap();
    let all_bytes = li.schema.rows * 16;
    assert!(
        q6.meter.bytes_to_host * 5 < all_bytes,
        "{} of {all_bytes}",
        q6.meter.bytes_to_host
    );
    dev.close().unwrap();
}

#[test]
fn corrupt_tables_on_the_device_are_errors_naming_file_and_row() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, li) = setup(tmp.path());
    // A dictionary code out of range at row 17 (written with a valid checksum).
    let Values::U32(mut codes) = li.read("l_shipmode").unwrap() else {
        panic!("codes are u32s")
    };
    codes[17] = 99;
    let path = tmp.path().join("l_shipmode.col");
    write_encoded_column(&path, ColumnType::Dict, &Values::U32(codes)).unwrap();
    dev.put_bytes(
        "/tpch/lineitem/l_shipmode.col",
        &std::fs::read(&path).unwrap(),
    )
    .unwrap();
    for preds in [vec![], vec![Predicate::new("l_linenumber", Cmp::Ge(1))]] {
        let e = scan(
            &dev,
            "/tpch/lineitem",
            &["l_shipmode"],
            &preds,
            &ScanOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("/tpch/lineitem/l_shipmode.col")
                && e.contains("row 17")
                && e.contains("index 99"),
            "{e}"
        );
    }
    // A column file cut short.
    let price = std::fs::read(li.dir.join("l_tax.col")).unwrap();
    dev.put_bytes("/tpch/lineitem/l_tax.col", &price[..price.len() - 8])
        .unwrap();
    let e = scan(
        &dev,
        "/tpch/lineitem",
        &["l_tax"],
        &[],
        &ScanOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("/tpch/lineitem/l_tax.col") && e.contains("column l_tax") && e.contains("bytes"),
        "{e}"
    );
    // An unknown column names the table's columns.
    dev.put_bytes("/tpch/lineitem/l_tax.col", &price).unwrap();
    let e = scan(
        &dev,
        "/tpch/lineitem",
        &["l_nope"],
        &[],
        &ScanOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("l_nope") && e.contains("l_orderkey"), "{e}");
    // Nothing was left behind: no programs loaded, all memory free.
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

/// An old table (raw column files) scans as its encoded twin; the encoded one stages
/// fewer bytes.
#[test]
fn raw_tables_of_the_first_version_still_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, li) = setup(tmp.path());
    let raw = tmp.path().join("raw");
    copy_as_raw(&li.dir, &raw).unwrap();
    csx_data::put::put_dir(&dev, &raw, "/raw", &mut |_, _| {}).unwrap();
    let preds = q6_predicates(&li);
    let cols = ["l_extendedprice", "l_discount", "l_shipmode"];
    let old = scan(&dev, "/raw", &cols, &preds, &ScanOptions::default()).unwrap();
    let new = scan(
        &dev,
        "/tpch/lineitem",
        &cols,
        &preds,
        &ScanOptions::default(),
    )
    .unwrap();
    assert_eq!(old.columns, new.columns);
    assert!(old.rows > 0);
    assert!(
        new.meter.media_bytes * 2 < old.meter.media_bytes,
        "{} vs {}",
        new.meter.media_bytes,
        old.meter.media_bytes
    );
    dev.close().unwrap();
}

/// A flipped bit in an encoded block's payload, its header or its directory entry (the
/// zone map) on the device: the scan fails naming table, column and block.
#[test]
fn a_flipped_bit_in_a_block_on_the_device_names_table_column_and_block() {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, li) = setup(tmp.path());
    let p = li.dir.join("l_discount.col");
    let good = std::fs::read(&p).unwrap();
    let (col, _) = EncodedColumn::open_local(
        "lineitem",
        "l_discount",
        &p,
        ColumnType::Decimal,
        li.schema.rows,
    )
    .unwrap();
    let b0 = col.blocks[0];
    let dir0 = col.header.dir_offset as usize;
    for (at, part) in [
        (b0.at as usize + 64 + 1, "bad data"),
        (b0.at as usize + 6, "bad header"),
        (dir0 + 35, "bad directory entry"),
    ] {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        dev.put_bytes("/tpch/lineitem/l_discount.col", &bad)
            .unwrap();
        for cols in [vec!["l_discount"], vec!["l_orderkey"]] {
            let preds = vec![Predicate::new("l_discount", Cmp::Ge(0))];
            let e = scan(
                &dev,
                "/tpch/lineitem",
                &cols,
                &preds,
                &ScanOptions::default(),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("table lineitem, column l_discount, block 0") && e.contains(part),
                "flip at {at}: {e}"
            );
        }
    }
    dev.close().unwrap();
}

/// A crafted file that is self-consistent (every checksum right, the directory intact)
/// but whose block 0 holds a copy of block 1, inline header and all: the device must
/// check each staged header against its directory entry and refuse it, naming the block,
/// not return block 1's rows as block 0's.
#[test]
fn a_block_whose_inline_header_is_not_its_directory_entry_is_refused_on_the_device() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let rows = 2 * u64::from(csx_data::encoding::BLOCK_ROWS);
    let mut w =
        TableWriter::create(&dir, "t", vec![ColumnSchema::new("v", ColumnType::Uint32)]).unwrap();
    // Values over the whole domain: both blocks raw, of the same length.
    let mut x = 0x2545_f491u32;
    for _ in 0..rows {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        w.u32(0, x).unwrap();
    }
    w.finish(&[]).unwrap();
    let p = dir.join("v.col");
    let good = std::fs::read(&p).unwrap();
    let (col, _) = EncodedColumn::open_local("t", "v", &p, ColumnType::Uint32, rows).unwrap();
    let (b0, b1) = (col.blocks[0], col.blocks[1]);
    assert_eq!(
        b0.stored_len(),
        b1.stored_len(),
        "the test needs equal blocks"
    );
    let len = b1.stored_len() as usize;
    let mut bad = good.clone();
    bad.copy_within(b1.at as usize..b1.at as usize + len, b0.at as usize);
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &dir, "/t", &mut |_, _| {}).unwrap();
    // The good file scans; the crafted one fails on the device, whatever the engine.
    let opts = ScanOptions::default();
    let all = scan(&dev, "/t", &["v"], &[], &opts).unwrap();
    assert_eq!(all.rows, rows);
    dev.put_bytes("/t/v.col", &bad).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let opts = ScanOptions {
            engine,
            ..Default::default()
        };
        for preds in [vec![], vec![Predicate::new("v", Cmp::Ge(0))]] {
            let e = scan(&dev, "/t", &["v"], &preds, &opts).unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(
                    e,
                    csx_data::DataError::CorruptBlock {
                        block: 0,
                        part: "header",
                        ..
                    }
                ),
                "{text}"
            );
            assert!(
                text.contains("table t, column v, block 0")
                    && text.contains("differs from its directory entry"),
                "{text}"
            );
        }
    }
    dev.close().unwrap();
}

/// A clustered column's zone maps skip blocks: the skipped blocks are never staged
/// (fewer media bytes) and the answers equal the host reference's and an unskipped
/// scan's (the raw twin has no zone maps).
#[test]
fn zone_maps_skip_blocks_without_changing_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let rows: i64 = 5 * i64::from(csx_data::encoding::BLOCK_ROWS) + 123;
    let mut w = TableWriter::create(
        &dir,
        "t",
        vec![
            ColumnSchema::new("k", ColumnType::Int64),
            ColumnSchema::new("v", ColumnType::Int32),
        ],
    )
    .unwrap();
    for i in 0..rows {
        w.i64(0, i - 70_000).unwrap();
        w.i32(1, ((i * 7919) % 1000) as i32 - 500).unwrap();
    }
    w.finish(&[]).unwrap();
    copy_as_raw(&dir, &tmp.path().join("raw")).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &dir, "/t", &mut |_, _| {}).unwrap();
    csx_data::put::put_dir(&dev, &tmp.path().join("raw"), "/raw", &mut |_, _| {}).unwrap();
    let local = LocalTable::open(&dir).unwrap();
    let cases = [
        vec![Predicate::new("k", Cmp::Lt(-60_000))],
        vec![Predicate::new("k", Cmp::Between(100_000, 100_010))],
        vec![
            Predicate::new("k", Cmp::Ge(200_000)),
            Predicate::new("v", Cmp::In(vec![-500, 3, 499])),
        ],
        vec![Predicate::new("v", Cmp::Gt(10_000))],
    ];
    for (i, preds) in cases.iter().enumerate() {
        let opts = ScanOptions {
            chunk_rows: 100_000,
            ..Default::default()
        };
        let want = scan_local(&local, &["k", "v"], preds).unwrap();
        let got = scan(&dev, "/t", &["k", "v"], preds, &opts).unwrap();
        let raw = scan(&dev, "/raw", &["k", "v"], preds, &opts).unwrap();
        let values = |r: &csx_data::ScanResult| -> Vec<Values> {
            r.columns.iter().map(|c| c.values.clone()).collect()
        };
        assert_eq!(values(&got), want, "case {i}");
        assert_eq!(values(&raw), want, "case {i}");
        let all = scan(&dev, "/t", &["k", "v"], &[], &opts).unwrap();
        if i < 3 {
            assert!(
                got.meter.media_bytes * 2 < all.meter.media_bytes,
                "case {i}: {} of {}",
                got.meter.media_bytes,
                all.meter.media_bytes
            );
        }
    }
    dev.close().unwrap();
}

/// 8-byte columns whose zone maps fit 4 bytes are staged as 4-byte values (fewer cache
/// lines a row), one with a block that does not stays 8; answers equal the host
/// reference's for predicates around the 4-byte edges, negative values and constants
/// beyond 4 bytes, on both engines, and the projected values come back at 8 bytes.
#[test]
fn columns_whose_values_fit_4_bytes_are_staged_narrow_with_the_same_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let rows: i64 = 2 * i64::from(csx_data::encoding::BLOCK_ROWS) + 77;
    let mut price = ColumnSchema::new("price", ColumnType::Decimal);
    price.scale = 2;
    let mut w = TableWriter::create(
        &dir,
        "t",
        vec![
            ColumnSchema::new("n", ColumnType::Int64),
            ColumnSchema::new("wide", ColumnType::Int64),
            price,
            ColumnSchema::new("d", ColumnType::Date),
        ],
    )
    .unwrap();
    let edges = [i64::from(i32::MIN), i64::from(i32::MAX), -1, 0, 1];
    for i in 0..rows {
        let n = match i % 97 {
            k @ 0..=4 => edges[k as usize],
            _ => (i * 7919) % 200_001 - 100_000,
        };
        // The last block holds one value over 4 bytes: the column stays 8 bytes.
        let wide = if i == rows - 3 {
            1 << 40
        } else {
            i % 1000 - 500
        };
        w.i64(0, n).unwrap();
        w.i64(1, wide).unwrap();
        w.i64(2, (i * 31) % 1_000_000).unwrap();
        w.i32(3, (i % 2500) as i32).unwrap();
    }
    w.finish(&[]).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &dir, "/t", &mut |_, _| {}).unwrap();
    let local = LocalTable::open(&dir).unwrap();
    let cols = ["n", "wide", "price"];
    let opts = ScanOptions::default();
    let sc = csx_data::scan::Scanner::open(
        csx_data::ops::Session::new(&dev),
        "/t",
        &cols,
        &[Predicate::new("d", Cmp::Lt(100))],
        &opts,
    )
    .unwrap();
    let mut widths = sc.staged_widths();
    widths.sort();
    assert_eq!(widths, [("d", 4), ("n", 4), ("price", 4), ("wide", 8)]);
    sc.close().unwrap();
    let min = i64::from(i32::MIN);
    let cases = [
        vec![Predicate::new("n", Cmp::Lt(0))],
        vec![
            Predicate::new("n", Cmp::Ge(-3)),
            Predicate::new("n", Cmp::Le(2)),
        ],
        vec![Predicate::new("n", Cmp::Between(min, min + 1))],
        vec![Predicate::new("n", Cmp::Gt(i64::from(i32::MAX) - 1))],
        vec![Predicate::new("n", Cmp::Gt(-(1 << 40)))],
        vec![Predicate::new("n", Cmp::Lt(-(1 << 40)))],
        vec![
            Predicate::new("n", Cmp::Ne(0)),
            Predicate::new("price", Cmp::Lt(5000)),
        ],
        vec![Predicate::new("n", Cmp::In(vec![-1, 1, 1 << 35, min]))],
        vec![Predicate::new("wide", Cmp::Gt(1 << 39))],
        vec![
            Predicate::new("price", Cmp::Between(100, 90_000)),
            Predicate::new("d", Cmp::Lt(9)),
        ],
    ];
    for (i, preds) in cases.iter().enumerate() {
        let want = scan_local(&local, &cols, preds).unwrap();
        for engine in [EngineKind::Interpreter, EngineKind::Jit] {
            let opts = ScanOptions {
                engine,
                chunk_rows: 50_001,
            };
            let got = scan(&dev, "/t", &cols, preds, &opts).unwrap();
            let values: Vec<Values> = got.columns.iter().map(|c| c.values.clone()).collect();
            assert_eq!(values, want, "case {i} {engine:?}");
        }
    }
    dev.close().unwrap();
}

/// A crafted file whose raw blocks' zone maps (inline and in the directory, every
/// checksum right) say the values fit 4 bytes when they do not: the scan stages the
/// column narrow, and the device finds the first value over 4 bytes as it decodes, an
/// error naming table, column and block, never a truncated value.
#[test]
fn a_zone_map_that_lies_about_4_bytes_is_an_error_not_a_truncated_value() {
    use csx_host::proto::abi::colblock::{BlockHeader, BLOCK_HEADER_SIZE};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t");
    let rows = 2 * u64::from(csx_data::encoding::BLOCK_ROWS);
    let mut w =
        TableWriter::create(&dir, "t", vec![ColumnSchema::new("v", ColumnType::Int64)]).unwrap();
    // Values over the whole domain: raw blocks.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..rows {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.i64(0, x as i64).unwrap();
    }
    w.finish(&[]).unwrap();
    let p = dir.join("v.col");
    let mut bad = std::fs::read(&p).unwrap();
    let (col, _) = EncodedColumn::open_local("t", "v", &p, ColumnType::Int64, rows).unwrap();
    let dir0 = col.header.dir_offset as usize;
    for (k, b) in col.blocks.iter().enumerate() {
        let at = b.at as usize;
        let mut h = BlockHeader::parse(&bad[at..at + BLOCK_HEADER_SIZE]).unwrap();
        assert_eq!(h.encoding, 0, "the test needs raw blocks");
        (h.min, h.max) = (-5, 5);
        let lie = h.encode();
        bad[at..at + BLOCK_HEADER_SIZE].copy_from_slice(&lie);
        let d = dir0 + k * BLOCK_HEADER_SIZE;
        bad[d..d + BLOCK_HEADER_SIZE].copy_from_slice(&lie);
    }
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &dir, "/t", &mut |_, _| {}).unwrap();
    dev.put_bytes("/t/v.col", &bad).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let opts = ScanOptions {
            engine,
            ..Default::default()
        };
        let e = scan(&dev, "/t", &["v"], &[], &opts).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(
                e,
                csx_data::DataError::CorruptBlock {
                    block: 0,
                    part: "data",
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains("table t, column v, block 0") && text.contains("outside 4 bytes"),
            "{text}"
        );
    }
    dev.close().unwrap();
}
