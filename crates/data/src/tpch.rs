//! TPC-H's ORDERS and LINEITEM (TPC-H 2.x, clause 4.2.3), generated from the
//! specification's distributions, deterministically from a seed.
//!
//! At scale factor SF: ORDERS 1,500,000 × SF rows with sparse keys (8 of every 32),
//! LINEITEM 1 to 7 lines per order (≈ 6,000,000 × SF rows). Customer keys in
//! [1, 150,000 × SF], never a multiple of 3; part keys in [1, 200,000 × SF]; the
//! supplier of a line is one of the part's four (`(p + i·(S/4 + (p−1)/S)) mod S + 1`);
//! order dates uniform over [1992-01-01, 1998-12-31 − 151 days]; ship date 1-121 days
//! after the order, commit date 30-90, receipt date 1-30 after shipping; return flag R
//! or A when received by 1995-06-17, else N; line status O when shipped after
//! 1995-06-17, else F; order status F, O or P from its lines; total price the sum of
//! extended price × (1 + tax) × (1 − discount).
//!
//! Types: keys int32, money and quantities decimal(2) (int64 cents), discount and tax
//! decimal(2) (0.00-0.10, 0.00-0.08), dates `date` (days since 1970-01-01), flags and
//! names dict. Left out: the comment columns (free text no query here reads).

use std::path::Path;

use crate::calendar::days_from_civil;
use crate::columnar::{ColumnSchema, ColumnType, Domain, TableWriter};
use crate::error::DataError;
use crate::gen::{check_sf, scaled, Benchmark, Dataset, OrderDraws, ProgressFn, PROGRESS_ROWS};
use crate::names::*;
use crate::rng::Stream;

use ColumnType::{Date, Dict, Int32};

/// TPC-H's CURRENTDATE: 1995-06-17.
pub fn current_date() -> i32 {
    days_from_civil(1995, 6, 17)
}

/// Row counts at `sf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpchCounts {
    pub customers: i64,
    pub suppliers: i64,
    pub parts: i64,
    pub orders: i64,
    pub clerks: i64,
}

impl TpchCounts {
    pub fn at(sf: f64) -> TpchCounts {
        TpchCounts {
            customers: scaled(150_000, sf),
            suppliers: scaled(10_000, sf),
            parts: scaled(200_000, sf),
            orders: scaled(1_500_000, sf),
            clerks: scaled(1_000, sf),
        }
    }
}

/// The supplier of a part's line: one of its four suppliers (TPC-H 4.2.3, PS_SUPPKEY).
pub fn part_supplier(partkey: i64, i: i64, suppliers: i64) -> i64 {
    (partkey + i * (suppliers / 4 + (partkey - 1) / suppliers)) % suppliers + 1
}

/// ORDERS' columns.
fn orders_columns() -> Vec<ColumnSchema> {
    vec![
        ColumnSchema::new("o_orderkey", Int32),
        ColumnSchema::new("o_custkey", Int32),
        ColumnSchema::new("o_orderstatus", Dict),
        ColumnSchema::decimal("o_totalprice", 2),
        ColumnSchema::new("o_orderdate", Date),
        ColumnSchema::new("o_orderpriority", Dict),
        ColumnSchema::new("o_clerk", Dict),
        ColumnSchema::new("o_shippriority", Int32),
    ]
}

/// LINEITEM's columns.
fn lineitem_columns() -> Vec<ColumnSchema> {
    vec![
        ColumnSchema::new("l_orderkey", Int32),
        ColumnSchema::new("l_partkey", Int32),
        ColumnSchema::new("l_suppkey", Int32),
        ColumnSchema::new("l_linenumber", Int32),
        ColumnSchema::decimal("l_quantity", 2),
        ColumnSchema::decimal("l_extendedprice", 2),
        ColumnSchema::decimal("l_discount", 2),
        ColumnSchema::decimal("l_tax", 2),
        ColumnSchema::new("l_returnflag", Dict),
        ColumnSchema::new("l_linestatus", Dict),
        ColumnSchema::new("l_shipdate", Date),
        ColumnSchema::new("l_commitdate", Date),
        ColumnSchema::new("l_receiptdate", Date),
        ColumnSchema::new("l_shipinstruct", Dict),
        ColumnSchema::new("l_shipmode", Dict),
    ]
}

/// The dictionaries of ORDERS and LINEITEM.
struct Domains {
    status: Domain,
    flags: Domain,
    line_status: Domain,
    priorities: Domain,
    clerks: Domain,
    instruct: Domain,
    modes: Domain,
}

impl Domains {
    fn new(counts: &TpchCounts) -> Domains {
        Domains {
            status: Domain::new(["F", "O", "P"].map(String::from)),
            flags: Domain::new(["A", "N", "R"].map(String::from)),
            line_status: Domain::new(["F", "O"].map(String::from)),
            priorities: Domain::new(PRIORITIES.iter().map(|s| s.to_string())),
            clerks: Domain::new((1..=counts.clerks).map(|k| format!("Clerk#{k:09}"))),
            instruct: Domain::new(SHIP_INSTRUCT.iter().map(|s| s.to_string())),
            modes: Domain::new(SHIP_MODES.iter().map(|s| s.to_string())),
        }
    }
}

/// The draws of a line beyond [`OrderDraws::line`]'s, each its own stream.
struct LineStreams {
    supp: Stream,
    ship: Stream,
    receipt: Stream,
    flag: Stream,
    instr: Stream,
    mode: Stream,
}

impl LineStreams {
    fn new(seed: u64) -> LineStreams {
        LineStreams {
            supp: Stream::new(seed, "l_suppkey"),
            ship: Stream::new(seed, "l_shipdate"),
            receipt: Stream::new(seed, "l_receiptdate"),
            flag: Stream::new(seed, "l_returnflag"),
            instr: Stream::new(seed, "l_shipinstruct"),
            mode: Stream::new(seed, "l_shipmode"),
        }
    }
}

/// What an order takes from its lines: the total price in cents, and whether any line
/// is open (O) and any fulfilled (F).
struct LinesSummary {
    total_cents: i64,
    any_o: bool,
    any_f: bool,
}

/// Draws and writes `order`'s lines.
fn write_lines(
    lw: &mut TableWriter,
    order: &crate::gen::Order,
    draws: &mut OrderDraws,
    st: &mut LineStreams,
    (d, counts): (&Domains, &TpchCounts),
) -> Result<LinesSummary, DataError> {
    let today = current_date();
    let (orderkey, odate) = (order.orderkey as i32, order.date);
    let mut sum = LinesSummary {
        total_cents: 0,
        any_o: false,
        any_f: false,
    };
    for ln in 1..=order.lines {
        let l = draws.line(order, counts.parts);
        let (partkey, qty, ext, disc, tax) = (l.partkey, l.quantity, l.extended, l.discount, l.tax);
        let suppkey = part_supplier(partkey, st.supp.range(0, 3), counts.suppliers);
        let ship = odate + st.ship.range(1, 121) as i32;
        let receipt = ship + st.receipt.range(1, 30) as i32;
        let flag = if receipt <= today {
            st.flag.pick(&["R", "A"])
        } else {
            "N"
        };
        let ls = if ship > today { "O" } else { "F" };
        sum.any_o |= ls == "O";
        sum.any_f |= ls == "F";
        sum.total_cents += ext * (100 + tax) * (100 - disc) / 10_000;
        lw.i32(0, orderkey)?;
        lw.i32(1, partkey as i32)?;
        lw.i32(2, suppkey as i32)?;
        lw.i32(3, ln as i32)?;
        lw.i64(4, qty * 100)?;
        lw.i64(5, ext)?;
        lw.i64(6, disc)?;
        lw.i64(7, tax)?;
        lw.u32(8, d.flags.code(flag))?;
        lw.u32(9, d.line_status.code(ls))?;
        lw.i32(10, ship)?;
        lw.i32(11, l.commit)?;
        lw.i32(12, receipt)?;
        lw.u32(13, d.instruct.code(st.instr.pick(&SHIP_INSTRUCT)))?;
        lw.u32(14, d.modes.code(st.mode.pick(&SHIP_MODES)))?;
    }
    Ok(sum)
}

/// Generates ORDERS and LINEITEM under `out` and `out/dataset.json`.
pub fn generate(
    out: &Path,
    sf: f64,
    seed: u64,
    progress: ProgressFn,
) -> Result<Dataset, DataError> {
    check_sf(sf)?;
    let counts = TpchCounts::at(sf);
    let d = Domains::new(&counts);
    let mut draws = OrderDraws::new(seed, "o_", "l_");
    let mut s_clerk = Stream::new(seed, "o_clerk");
    let mut streams = LineStreams::new(seed);

    let mut ow = TableWriter::create(&out.join("orders"), "orders", orders_columns())?;
    let mut lw = TableWriter::create(&out.join("lineitem"), "lineitem", lineitem_columns())?;
    let mut line_rows = 0u64;
    let total = counts.orders as u64;
    for i in 1..=counts.orders {
        let order = draws.order(i, counts.customers);
        let sum = write_lines(&mut lw, &order, &mut draws, &mut streams, (&d, &counts))?;
        line_rows += order.lines as u64;
        let st = match (sum.any_o, sum.any_f) {
            (true, false) => "O",
            (false, true) => "F",
            _ => "P",
        };
        ow.i32(0, order.orderkey as i32)?;
        ow.i32(1, order.custkey as i32)?;
        ow.u32(2, d.status.code(st))?;
        ow.i64(3, sum.total_cents)?;
        ow.i32(4, order.date)?;
        ow.u32(5, d.priorities.code(order.priority))?;
        ow.u32(6, s_clerk.range(0, counts.clerks - 1) as u32)?;
        ow.i32(7, 0)?;
        if (i as u64).is_multiple_of(PROGRESS_ROWS) {
            progress("orders+lineitem", i as u64, total);
        }
    }
    progress("orders+lineitem", total, total);
    ow.finish(&[
        ("o_orderstatus", d.status.entries()),
        ("o_orderpriority", d.priorities.entries()),
        ("o_clerk", d.clerks.entries()),
    ])?;
    lw.finish(&[
        ("l_returnflag", d.flags.entries()),
        ("l_linestatus", d.line_status.entries()),
        ("l_shipinstruct", d.instruct.entries()),
        ("l_shipmode", d.modes.entries()),
    ])?;
    let dataset = Dataset {
        benchmark: Benchmark::Tpch,
        sf,
        seed,
        tables: vec![
            ("orders".to_string(), total),
            ("lineitem".to_string(), line_rows),
        ],
    };
    dataset.write(out)?;
    Ok(dataset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columnar::LocalTable;

    #[test]
    fn lineitem_follows_the_specification() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = generate(tmp.path(), 0.001, 3, &mut |_, _, _| {}).unwrap();
        assert_eq!(ds.tables[0], ("orders".to_string(), 1500));
        let li = LocalTable::open(&tmp.path().join("lineitem")).unwrap();
        let n = li.schema.rows as usize;
        let ship = li.read("l_shipdate").unwrap();
        let receipt = li.read("l_receiptdate").unwrap();
        let flag = li.read("l_returnflag").unwrap();
        let status = li.read("l_linestatus").unwrap();
        let disc = li.read("l_discount").unwrap();
        let supp = li.read("l_suppkey").unwrap();
        let part = li.read("l_partkey").unwrap();
        let today = i64::from(current_date());
        for i in 0..n {
            assert!((0..=10).contains(&disc.get_i64(i)));
            // Dictionaries are sorted: A=0, N=1, R=2; F=0, O=1.
            assert_eq!(flag.get_i64(i) == 1, receipt.get_i64(i) > today);
            assert_eq!(status.get_i64(i) == 1, ship.get_i64(i) > today);
            let p = part.get_i64(i);
            let s = supp.get_i64(i);
            assert!(
                (0..4).any(|k| part_supplier(p, k, 10) == s),
                "part {p} supplier {s}"
            );
        }
        assert_eq!(li.dictionary("l_returnflag").unwrap(), vec!["A", "N", "R"]);
    }
}
