//! The Star Schema Benchmark's tables (O'Neil, O'Neil, Chen and Revilak, SSB spec 3),
//! generated from the specification's distributions, deterministically from a seed:
//! LINEORDER, CUSTOMER, SUPPLIER, PART and DATE.
//!
//! Sizes at scale factor SF: CUSTOMER 30,000 × SF, SUPPLIER 2,000 × SF, PART 200,000 ×
//! (1 + ⌊log2 SF⌋) (200,000 × SF below SF 1), LINEORDER 1,500,000 × SF orders of 1 to 7
//! lines each (≈ 6,000,000 × SF rows), DATE every day of 1992-1998 (2,557 rows).
//! Distributions: TPC-H's for what SSB inherits (order dates uniform over
//! [1992-01-01, 1998-12-31 − 151 days], quantities 1-50, discounts 0-10 %, taxes 0-8 %,
//! commit dates 30-90 days after the order, customer keys never a multiple of 3,
//! TPC-H's retail price formula); nations uniform, cities = nation prefix + digit 0-9.
//! Money is in cents (int32/uint32), dates are `yyyymmdd` keys (uint32).
//!
//! Left out (documented in `docs/design/columnar.md`): the free-text columns
//! (addresses, phones), which no SSB query reads.

use std::path::Path;

use crate::calendar::{civil_from_days, days_from_civil, days_in_month, weekday, yyyymmdd};
use crate::columnar::{ColumnSchema, ColumnType, Domain, TableWriter};
use crate::error::DataError;
use crate::gen::{check_sf, scaled, Benchmark, Dataset, OrderDraws, ProgressFn, PROGRESS_ROWS};
use crate::names::*;
use crate::rng::Stream;

use ColumnType::{Dict, Uint32};

/// First and last day of the DATE table.
pub const FIRST_DAY: (i32, u32, u32) = (1992, 1, 1);
pub const LAST_DAY: (i32, u32, u32) = (1998, 12, 31);

/// Row counts of each table at `sf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsbCounts {
    pub customers: i64,
    pub suppliers: i64,
    pub parts: i64,
    pub orders: i64,
}

impl SsbCounts {
    pub fn at(sf: f64) -> SsbCounts {
        let parts = if sf >= 1.0 {
            200_000 * (1 + sf.log2().floor() as i64)
        } else {
            scaled(200_000, sf)
        };
        SsbCounts {
            customers: scaled(30_000, sf),
            suppliers: scaled(2_000, sf),
            parts,
            orders: scaled(1_500_000, sf),
        }
    }
}

/// Generates every SSB table under `out` (one directory per table) and
/// `out/dataset.json`.
pub fn generate(
    out: &Path,
    sf: f64,
    seed: u64,
    progress: ProgressFn,
) -> Result<Dataset, DataError> {
    check_sf(sf)?;
    let counts = SsbCounts::at(sf);
    let tables = vec![
        ("date".to_string(), date(&out.join("date"), progress)?),
        (
            "customer".to_string(),
            customer(&out.join("customer"), counts, seed, progress)?,
        ),
        (
            "supplier".to_string(),
            supplier(&out.join("supplier"), counts, seed, progress)?,
        ),
        (
            "part".to_string(),
            part(&out.join("part"), counts, seed, progress)?,
        ),
        (
            "lineorder".to_string(),
            lineorder(&out.join("lineorder"), counts, seed, progress)?,
        ),
    ];
    let dataset = Dataset {
        benchmark: Benchmark::Ssb,
        sf,
        seed,
        tables,
    };
    dataset.write(out)?;
    Ok(dataset)
}

/// DATE's columns.
fn date_columns() -> Vec<ColumnSchema> {
    vec![
        ColumnSchema::new("d_datekey", Uint32),
        ColumnSchema::new("d_date", Dict),
        ColumnSchema::new("d_dayofweek", Dict),
        ColumnSchema::new("d_month", Dict),
        ColumnSchema::new("d_year", Uint32),
        ColumnSchema::new("d_yearmonthnum", Uint32),
        ColumnSchema::new("d_yearmonth", Dict),
        ColumnSchema::new("d_daynuminweek", Uint32),
        ColumnSchema::new("d_daynuminmonth", Uint32),
        ColumnSchema::new("d_daynuminyear", Uint32),
        ColumnSchema::new("d_monthnuminyear", Uint32),
        ColumnSchema::new("d_weeknuminyear", Uint32),
        ColumnSchema::new("d_sellingseason", Dict),
        ColumnSchema::new("d_lastdayinweekfl", Uint32),
        ColumnSchema::new("d_lastdayinmonthfl", Uint32),
        ColumnSchema::new("d_holidayfl", Uint32),
        ColumnSchema::new("d_weekdayfl", Uint32),
    ]
}

/// The selling season of month `m`.
fn season(m: u32) -> &'static str {
    match m {
        12 => "Christmas",
        1 | 2 => "Winter",
        3..=5 => "Spring",
        6..=8 => "Summer",
        _ => "Fall",
    }
}

fn date(dir: &Path, progress: ProgressFn) -> Result<u64, DataError> {
    let cols = date_columns();
    let first = days_from_civil(FIRST_DAY.0, FIRST_DAY.1, FIRST_DAY.2);
    let last = days_from_civil(LAST_DAY.0, LAST_DAY.1, LAST_DAY.2);
    let date_text = |z: i32| {
        let (y, m, d) = civil_from_days(z);
        format!("{} {d}, {y}", MONTHS[m as usize - 1])
    };
    let year_month = |y: i32, m: u32| format!("{}{y}", &MONTHS[m as usize - 1][..3]);
    let d_date = Domain::new((first..=last).map(date_text));
    let d_dayofweek = Domain::new(WEEKDAYS.iter().map(|s| s.to_string()));
    let d_month = Domain::new(MONTHS.iter().map(|s| s.to_string()));
    let d_yearmonth = Domain::new(
        (FIRST_DAY.0..=LAST_DAY.0).flat_map(|y| (1..=12).map(move |m| year_month(y, m))),
    );
    let seasons = ["Christmas", "Fall", "Spring", "Summer", "Winter"];
    let d_season = Domain::new(seasons.iter().map(|s| s.to_string()));
    let mut w = TableWriter::create(dir, "date", cols)?;
    for z in first..=last {
        let (y, m, d) = civil_from_days(z);
        let wd = weekday(z);
        let doy = (z - days_from_civil(y, 1, 1) + 1) as u32;
        let season = season(m);
        let holiday = matches!((m, d), (1, 1) | (7, 4) | (12, 24) | (12, 25) | (12, 31));
        w.u32(0, yyyymmdd(z) as u32)?;
        w.u32(1, d_date.code(&date_text(z)))?;
        w.u32(2, d_dayofweek.code(WEEKDAYS[wd as usize]))?;
        w.u32(3, d_month.code(MONTHS[m as usize - 1]))?;
        w.u32(4, y as u32)?;
        w.u32(5, (y * 100) as u32 + m)?;
        w.u32(6, d_yearmonth.code(&year_month(y, m)))?;
        w.u32(7, wd + 1)?;
        w.u32(8, d)?;
        w.u32(9, doy)?;
        w.u32(10, m)?;
        w.u32(11, 1 + (doy - 1) / 7)?;
        w.u32(12, d_season.code(season))?;
        w.u32(13, u32::from(wd == 6))?;
        w.u32(14, u32::from(d == days_in_month(y, m)))?;
        w.u32(15, u32::from(holiday))?;
        w.u32(16, u32::from((1..=5).contains(&wd)))?;
    }
    let rows = (last - first + 1) as u64;
    progress("date", rows, rows);
    w.finish(&[
        ("d_date", d_date.entries()),
        ("d_dayofweek", d_dayofweek.entries()),
        ("d_month", d_month.entries()),
        ("d_yearmonth", d_yearmonth.entries()),
        ("d_sellingseason", d_season.entries()),
    ])?;
    Ok(rows)
}

/// Nation, city and region codes of one customer or supplier.
struct Place {
    nation: u32,
    city: u32,
    region: u32,
}

struct Places {
    nation: Domain,
    city: Domain,
    region: Domain,
}

impl Places {
    fn new() -> Places {
        Places {
            nation: Domain::new(NATIONS.iter().map(|n| n.0.to_string())),
            city: Domain::new(all_cities()),
            region: Domain::new(REGIONS.iter().map(|r| r.to_string())),
        }
    }

    fn draw(&self, nations: &mut Stream, digits: &mut Stream) -> Place {
        let n = nations.range(0, NATIONS.len() as i64 - 1) as usize;
        let digit = digits.range(0, 9) as u32;
        Place {
            nation: self.nation.code(NATIONS[n].0),
            city: self.city.code(&city(n, digit)),
            region: self.region.code(REGIONS[NATIONS[n].1]),
        }
    }
}

fn customer(
    dir: &Path,
    counts: SsbCounts,
    seed: u64,
    progress: ProgressFn,
) -> Result<u64, DataError> {
    let cols = vec![
        ColumnSchema::new("c_custkey", Uint32),
        ColumnSchema::new("c_name", Dict),
        ColumnSchema::new("c_city", Dict),
        ColumnSchema::new("c_nation", Dict),
        ColumnSchema::new("c_region", Dict),
        ColumnSchema::new("c_mktsegment", Dict),
    ];
    let places = Places::new();
    let names = Domain::new((1..=counts.customers).map(|k| format!("Customer#{k:09}")));
    let segments = Domain::new(SEGMENTS.iter().map(|s| s.to_string()));
    let mut nations = Stream::new(seed, "c_nation");
    let mut digits = Stream::new(seed, "c_city");
    let mut seg = Stream::new(seed, "c_mktsegment");
    let mut w = TableWriter::create(dir, "customer", cols)?;
    let n = counts.customers as u64;
    for k in 1..=counts.customers {
        let p = places.draw(&mut nations, &mut digits);
        w.u32(0, k as u32)?;
        w.u32(1, (k - 1) as u32)?; // names sort in key order (zero-padded)
        w.u32(2, p.city)?;
        w.u32(3, p.nation)?;
        w.u32(4, p.region)?;
        w.u32(5, segments.code(seg.pick(&SEGMENTS)))?;
        if (k as u64).is_multiple_of(PROGRESS_ROWS) {
            progress("customer", k as u64, n);
        }
    }
    progress("customer", n, n);
    w.finish(&[
        ("c_name", names.entries()),
        ("c_city", places.city.entries()),
        ("c_nation", places.nation.entries()),
        ("c_region", places.region.entries()),
        ("c_mktsegment", segments.entries()),
    ])?;
    Ok(n)
}

fn supplier(
    dir: &Path,
    counts: SsbCounts,
    seed: u64,
    progress: ProgressFn,
) -> Result<u64, DataError> {
    let cols = vec![
        ColumnSchema::new("s_suppkey", Uint32),
        ColumnSchema::new("s_name", Dict),
        ColumnSchema::new("s_city", Dict),
        ColumnSchema::new("s_nation", Dict),
        ColumnSchema::new("s_region", Dict),
    ];
    let places = Places::new();
    let names = Domain::new((1..=counts.suppliers).map(|k| format!("Supplier#{k:09}")));
    let mut nations = Stream::new(seed, "s_nation");
    let mut digits = Stream::new(seed, "s_city");
    let mut w = TableWriter::create(dir, "supplier", cols)?;
    let n = counts.suppliers as u64;
    for k in 1..=counts.suppliers {
        let p = places.draw(&mut nations, &mut digits);
        w.u32(0, k as u32)?;
        w.u32(1, (k - 1) as u32)?;
        w.u32(2, p.city)?;
        w.u32(3, p.nation)?;
        w.u32(4, p.region)?;
    }
    progress("supplier", n, n);
    w.finish(&[
        ("s_name", names.entries()),
        ("s_city", places.city.entries()),
        ("s_nation", places.nation.entries()),
        ("s_region", places.region.entries()),
    ])?;
    Ok(n)
}

/// PART's columns.
fn part_columns() -> Vec<ColumnSchema> {
    vec![
        ColumnSchema::new("p_partkey", Uint32),
        ColumnSchema::new("p_name", Dict),
        ColumnSchema::new("p_mfgr", Dict),
        ColumnSchema::new("p_category", Dict),
        ColumnSchema::new("p_brand1", Dict),
        ColumnSchema::new("p_color", Dict),
        ColumnSchema::new("p_type", Dict),
        ColumnSchema::new("p_size", Uint32),
        ColumnSchema::new("p_container", Dict),
    ]
}

/// A part's name: two different colours.
fn part_name(a: usize, b: usize) -> String {
    format!("{} {}", COLORS[a], COLORS[b])
}

/// PART's dictionaries.
struct PartDomains {
    name: Domain,
    mfgr: Domain,
    category: Domain,
    brand: Domain,
    color: Domain,
    ty: Domain,
    container: Domain,
}

impl PartDomains {
    fn new() -> PartDomains {
        let n = COLORS.len();
        PartDomains {
            name: Domain::new((0..n).flat_map(|a| {
                (0..n)
                    .filter(move |&b| b != a)
                    .map(move |b| part_name(a, b))
            })),
            mfgr: Domain::new((1..=5).map(|m| format!("MFGR#{m}"))),
            category: Domain::new(
                (1..=5).flat_map(|m| (1..=5).map(move |c| format!("MFGR#{m}{c}"))),
            ),
            brand: Domain::new((1..=5).flat_map(|m| {
                (1..=5).flat_map(move |c| (1..=40).map(move |b| format!("MFGR#{m}{c}{b}")))
            })),
            color: Domain::new(COLORS.iter().map(|s| s.to_string())),
            ty: Domain::new(TYPE_S1.iter().flat_map(|a| {
                TYPE_S2
                    .iter()
                    .flat_map(move |b| TYPE_S3.iter().map(move |c| format!("{a} {b} {c}")))
            })),
            container: Domain::new(
                CONTAINER_S1
                    .iter()
                    .flat_map(|a| CONTAINER_S2.iter().map(move |b| format!("{a} {b}"))),
            ),
        }
    }

    fn entries(&self) -> [(&'static str, &[String]); 7] {
        [
            ("p_name", self.name.entries()),
            ("p_mfgr", self.mfgr.entries()),
            ("p_category", self.category.entries()),
            ("p_brand1", self.brand.entries()),
            ("p_color", self.color.entries()),
            ("p_type", self.ty.entries()),
            ("p_container", self.container.entries()),
        ]
    }
}

/// PART's draws, each column its own stream.
struct PartStreams {
    name: Stream,
    mfgr: Stream,
    cat: Stream,
    brand: Stream,
    color: Stream,
    ty: Stream,
    size: Stream,
    cont: Stream,
}

impl PartStreams {
    fn new(seed: u64) -> PartStreams {
        PartStreams {
            name: Stream::new(seed, "p_name"),
            mfgr: Stream::new(seed, "p_mfgr"),
            cat: Stream::new(seed, "p_category"),
            brand: Stream::new(seed, "p_brand1"),
            color: Stream::new(seed, "p_color"),
            ty: Stream::new(seed, "p_type"),
            size: Stream::new(seed, "p_size"),
            cont: Stream::new(seed, "p_container"),
        }
    }
}

/// Draws and writes part `k`.
fn part_row(
    w: &mut TableWriter,
    k: i64,
    d: &PartDomains,
    s: &mut PartStreams,
) -> Result<(), DataError> {
    let a = s.name.range(0, COLORS.len() as i64 - 1) as usize;
    let mut b = s.name.range(0, COLORS.len() as i64 - 2) as usize;
    if b >= a {
        b += 1;
    }
    let m = s.mfgr.range(1, 5);
    let c = s.cat.range(1, 5);
    let br = s.brand.range(1, 40);
    w.u32(0, k as u32)?;
    w.u32(1, d.name.code(&part_name(a, b)))?;
    w.u32(2, d.mfgr.code(&format!("MFGR#{m}")))?;
    w.u32(3, d.category.code(&format!("MFGR#{m}{c}")))?;
    w.u32(4, d.brand.code(&format!("MFGR#{m}{c}{br}")))?;
    w.u32(5, d.color.code(s.color.pick(&COLORS)))?;
    let t = format!(
        "{} {} {}",
        s.ty.pick(&TYPE_S1),
        s.ty.pick(&TYPE_S2),
        s.ty.pick(&TYPE_S3)
    );
    w.u32(6, d.ty.code(&t))?;
    w.u32(7, s.size.range(1, 50) as u32)?;
    let ct = format!(
        "{} {}",
        s.cont.pick(&CONTAINER_S1),
        s.cont.pick(&CONTAINER_S2)
    );
    w.u32(8, d.container.code(&ct))?;
    Ok(())
}

fn part(dir: &Path, counts: SsbCounts, seed: u64, progress: ProgressFn) -> Result<u64, DataError> {
    let d = PartDomains::new();
    let mut streams = PartStreams::new(seed);
    let mut w = TableWriter::create(dir, "part", part_columns())?;
    let n = counts.parts as u64;
    for k in 1..=counts.parts {
        part_row(&mut w, k, &d, &mut streams)?;
        if (k as u64).is_multiple_of(PROGRESS_ROWS) {
            progress("part", k as u64, n);
        }
    }
    progress("part", n, n);
    w.finish(&d.entries())?;
    Ok(n)
}

/// Column indices of LINEORDER, in schema order.
mod lo {
    pub const ORDERKEY: usize = 0;
    pub const LINENUMBER: usize = 1;
    pub const CUSTKEY: usize = 2;
    pub const PARTKEY: usize = 3;
    pub const SUPPKEY: usize = 4;
    pub const ORDERDATE: usize = 5;
    pub const ORDERPRIORITY: usize = 6;
    pub const SHIPPRIORITY: usize = 7;
    pub const QUANTITY: usize = 8;
    pub const EXTENDEDPRICE: usize = 9;
    pub const ORDTOTALPRICE: usize = 10;
    pub const DISCOUNT: usize = 11;
    pub const REVENUE: usize = 12;
    pub const SUPPLYCOST: usize = 13;
    pub const TAX: usize = 14;
    pub const COMMITDATE: usize = 15;
    pub const SHIPMODE: usize = 16;
}

/// LINEORDER's columns, in the order of [`lo`].
fn lineorder_columns() -> Vec<ColumnSchema> {
    vec![
        ColumnSchema::new("lo_orderkey", Uint32),
        ColumnSchema::new("lo_linenumber", Uint32),
        ColumnSchema::new("lo_custkey", Uint32),
        ColumnSchema::new("lo_partkey", Uint32),
        ColumnSchema::new("lo_suppkey", Uint32),
        ColumnSchema::new("lo_orderdate", Uint32),
        ColumnSchema::new("lo_orderpriority", Dict),
        ColumnSchema::new("lo_shippriority", Uint32),
        ColumnSchema::new("lo_quantity", Uint32),
        ColumnSchema::new("lo_extendedprice", Uint32),
        ColumnSchema::new("lo_ordtotalprice", Uint32),
        ColumnSchema::new("lo_discount", Uint32),
        ColumnSchema::new("lo_revenue", Uint32),
        ColumnSchema::new("lo_supplycost", Uint32),
        ColumnSchema::new("lo_tax", Uint32),
        ColumnSchema::new("lo_commitdate", Uint32),
        ColumnSchema::new("lo_shipmode", Dict),
    ]
}

/// One order's line as drawn: (partkey, suppkey, quantity, extprice, discount, revenue,
/// supplycost, tax, commit, mode).
type LoLine = [i64; 10];

/// Writes an order's drawn `lines`; `prio`: its priority's code, `total`: its total
/// price.
fn write_order_lines(
    w: &mut TableWriter,
    order: &crate::gen::Order,
    prio: u32,
    lines: &[LoLine],
    total: i64,
) -> Result<(), DataError> {
    for (ln, l) in lines.iter().enumerate() {
        w.u32(lo::ORDERKEY, order.orderkey as u32)?;
        w.u32(lo::LINENUMBER, ln as u32 + 1)?;
        w.u32(lo::CUSTKEY, order.custkey as u32)?;
        w.u32(lo::PARTKEY, l[0] as u32)?;
        w.u32(lo::SUPPKEY, l[1] as u32)?;
        w.u32(lo::ORDERDATE, yyyymmdd(order.date) as u32)?;
        w.u32(lo::ORDERPRIORITY, prio)?;
        w.u32(lo::SHIPPRIORITY, 0)?;
        w.u32(lo::QUANTITY, l[2] as u32)?;
        w.u32(lo::EXTENDEDPRICE, l[3] as u32)?;
        w.u32(lo::ORDTOTALPRICE, total as u32)?;
        w.u32(lo::DISCOUNT, l[4] as u32)?;
        w.u32(lo::REVENUE, l[5] as u32)?;
        w.u32(lo::SUPPLYCOST, l[6] as u32)?;
        w.u32(lo::TAX, l[7] as u32)?;
        w.u32(lo::COMMITDATE, l[8] as u32)?;
        w.u32(lo::SHIPMODE, l[9] as u32)?;
    }
    Ok(())
}

fn lineorder(
    dir: &Path,
    counts: SsbCounts,
    seed: u64,
    progress: ProgressFn,
) -> Result<u64, DataError> {
    let priorities = Domain::new(PRIORITIES.iter().map(|s| s.to_string()));
    let modes = Domain::new(SHIP_MODES.iter().map(|s| s.to_string()));
    let mut draws = OrderDraws::new(seed, "lo_", "lo_");
    let mut s_supp = Stream::new(seed, "lo_suppkey");
    let mut s_mode = Stream::new(seed, "lo_shipmode");
    let mut w = TableWriter::create(dir, "lineorder", lineorder_columns())?;
    let mut rows = 0u64;
    let total_orders = counts.orders as u64;
    let mut lines: Vec<LoLine> = Vec::with_capacity(7);
    for i in 1..=counts.orders {
        let order = draws.order(i, counts.customers);
        lines.clear();
        let mut total = 0i64;
        for _ in 0..order.lines {
            let l = draws.line(&order, counts.parts);
            let (partkey, qty, ext, disc, tax) =
                (l.partkey, l.quantity, l.extended, l.discount, l.tax);
            let suppkey = s_supp.range(1, counts.suppliers);
            let revenue = ext * (100 - disc) / 100;
            let cost = 6 * l.price / 10;
            let commit = yyyymmdd(l.commit) as i64;
            let mode = i64::from(modes.code(s_mode.pick(&SHIP_MODES)));
            total += ext * (100 - disc) * (100 + tax) / 10_000;
            lines.push([
                partkey, suppkey, qty, ext, disc, revenue, cost, tax, commit, mode,
            ]);
        }
        write_order_lines(
            &mut w,
            &order,
            priorities.code(order.priority),
            &lines,
            total,
        )?;
        rows += order.lines as u64;
        if (i as u64).is_multiple_of(PROGRESS_ROWS) {
            progress("lineorder", i as u64, total_orders);
        }
    }
    progress("lineorder", total_orders, total_orders);
    w.finish(&[
        ("lo_orderpriority", priorities.entries()),
        ("lo_shipmode", modes.entries()),
    ])?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columnar::LocalTable;

    #[test]
    fn counts_follow_the_specification() {
        let c = SsbCounts::at(1.0);
        assert_eq!(
            (c.customers, c.suppliers, c.parts, c.orders),
            (30_000, 2_000, 200_000, 1_500_000)
        );
        assert_eq!(SsbCounts::at(10.0).parts, 800_000);
        assert_eq!(SsbCounts::at(0.01).customers, 300);
    }

    #[test]
    fn generation_is_deterministic_and_follows_the_distributions() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let ds = generate(a.path(), 0.002, 9, &mut |_, _, _| {}).unwrap();
        generate(b.path(), 0.002, 9, &mut |_, _, _| {}).unwrap();
        for (table, rows) in &ds.tables {
            let ta = LocalTable::open(&a.path().join(table)).unwrap();
            assert_eq!(ta.schema.rows, *rows);
            for c in &ta.schema.columns {
                let fa = std::fs::read(a.path().join(table).join(c.file_name())).unwrap();
                let fb = std::fs::read(b.path().join(table).join(c.file_name())).unwrap();
                assert_eq!(fa, fb, "{table}.{}", c.name);
                ta.read(&c.name).unwrap(); // dictionary codes in range
            }
        }
        let lo = LocalTable::open(&a.path().join("lineorder")).unwrap();
        let n = lo.schema.rows as usize;
        assert!((12_000..=12_800).contains(&n), "{n} rows for 3000 orders");
        let qty = lo.read("lo_quantity").unwrap();
        let disc = lo.read("lo_discount").unwrap();
        let date = lo.read("lo_orderdate").unwrap();
        let cust = lo.read("lo_custkey").unwrap();
        let ext = lo.read("lo_extendedprice").unwrap();
        let rev = lo.read("lo_revenue").unwrap();
        for i in 0..n {
            assert!((1..=50).contains(&qty.get_i64(i)));
            assert!((0..=10).contains(&disc.get_i64(i)));
            assert!(
                (19920101..=19980802).contains(&date.get_i64(i)),
                "{}",
                date.get_i64(i)
            );
            assert_ne!(cust.get_i64(i) % 3, 0);
            assert_eq!(
                rev.get_i64(i),
                ext.get_i64(i) * (100 - disc.get_i64(i)) / 100
            );
        }
        let d = LocalTable::open(&a.path().join("date")).unwrap();
        assert_eq!(d.schema.rows, 2557);
        let cities = LocalTable::open(&a.path().join("customer"))
            .unwrap()
            .dictionary("c_city")
            .unwrap();
        assert!(cities.contains(&"UNITED KI1".to_string()));
    }
}
