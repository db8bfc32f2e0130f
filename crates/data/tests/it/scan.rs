//! The pushdown scan against the host reference: both engine kinds, predicates on
//! signed, unsigned, 4- and 8-byte and dict columns, several ranges per column, chunk
//! sizes that leave a partial last chunk; and corrupt tables on the device are errors
//! naming file and row.

use csx_data::columnar::{LocalTable, Values};
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
    // A dictionary code out of range at row 17.
    let mut codes = std::fs::read(li.dir.join("l_shipmode.col")).unwrap();
    codes[17 * 4..18 * 4].copy_from_slice(&99u32.to_le_bytes());
    dev.put_bytes("/tpch/lineitem/l_shipmode.col", &codes)
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
        &["l_orderkey"],
        &[],
        &ScanOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("/tpch/lineitem/l_tax.col") && e.contains("expected"),
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
