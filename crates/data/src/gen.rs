//! What the SSB and TPC-H generators share: scale factors, the dataset description
//! (`dataset.json` at the top of a generated directory), progress reports, and the
//! draws of orders and lines ([`OrderDraws`]) both benchmarks take from TPC-H.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::calendar::days_from_civil;
use crate::error::DataError;
use crate::names::{retail_price_cents, sparse_order_key, PRIORITIES};
use crate::rng::Stream;

/// Largest scale factor: SF 300's LINEORDER has 1.8 G rows and order keys up to 1.8 G,
/// under the 2^31 of the 32-bit key columns and the row limit of the format.
pub const SF_MAX: f64 = 300.0;

/// The benchmark a dataset was generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Benchmark {
    Ssb,
    Tpch,
}

impl Benchmark {
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::Ssb => "ssb",
            Benchmark::Tpch => "tpch",
        }
    }
}

/// `dataset.json`: what was generated, so a reader (and `csx ssb run`) can check it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub benchmark: Benchmark,
    pub sf: f64,
    pub seed: u64,
    /// `(table, rows)` in generation order; each table is the directory of that name.
    pub tables: Vec<(String, u64)>,
}

/// The dataset file's name.
pub const DATASET_FILE: &str = "dataset.json";

impl Dataset {
    pub fn write(&self, dir: &Path) -> Result<(), DataError> {
        let path = dir.join(DATASET_FILE);
        let mut s = serde_json::to_string_pretty(self).expect("a dataset serializes");
        s.push('\n');
        std::fs::write(&path, s).map_err(|e| DataError::io(&path, e))
    }

    pub fn read(dir: &Path) -> Result<Dataset, DataError> {
        let path = dir.join(DATASET_FILE);
        let bytes = std::fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| DataError::Schema {
            path: path.display().to_string(),
            message: format!("not a dataset description: {e}"),
        })
    }
}

/// Checks a scale factor.
pub fn check_sf(sf: f64) -> Result<(), DataError> {
    if sf.is_finite() && sf > 0.0 && sf <= SF_MAX {
        Ok(())
    } else {
        Err(DataError::ScaleFactor { sf, max: SF_MAX })
    }
}

/// `base × sf` rows, rounded, at least 1.
pub fn scaled(base: u64, sf: f64) -> i64 {
    ((base as f64 * sf).round() as i64).max(1)
}

/// A progress report: `(table, rows done, rows in the table)`.
pub type ProgressFn<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Rows between progress reports.
pub const PROGRESS_ROWS: u64 = 1 << 16;

/// One order of TPC-H's ORDERS (SSB's LINEORDER follows it): sparse key, customer,
/// date, priority and line count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Order {
    pub orderkey: i64,
    pub custkey: i64,
    /// Days since 1970-01-01.
    pub date: i32,
    pub priority: &'static str,
    pub lines: i64,
}

/// One line of an order: the part, quantity, its price, discount and tax (percent),
/// and the commit date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    pub partkey: i64,
    pub quantity: i64,
    /// The part's retail price and quantity × it, in cents.
    pub price: i64,
    pub extended: i64,
    pub discount: i64,
    pub tax: i64,
    /// Days since 1970-01-01.
    pub commit: i32,
}

/// The draws of orders and their lines that TPC-H (clause 4.2.3) and SSB share, one
/// seeded stream per column as each benchmark names it (`order` prefixes the order's
/// columns, `line` the line's: "o_"/"l_" for TPC-H, "lo_" for both in SSB), so
/// each generator's output stays what it was before they shared this.
#[derive(Clone, Debug)]
pub struct OrderDraws {
    cust: Stream,
    date: Stream,
    prio: Stream,
    lines: Stream,
    part: Stream,
    qty: Stream,
    disc: Stream,
    tax: Stream,
    commit: Stream,
    first: i64,
    last: i64,
}

impl OrderDraws {
    pub fn new(seed: u64, order: &str, line: &str) -> OrderDraws {
        let s = |prefix: &str, name: &str| Stream::new(seed, &format!("{prefix}{name}"));
        OrderDraws {
            cust: s(order, "custkey"),
            date: s(order, "orderdate"),
            prio: s(order, "orderpriority"),
            lines: s(line, "linenumber"),
            part: s(line, "partkey"),
            qty: s(line, "quantity"),
            disc: s(line, "discount"),
            tax: s(line, "tax"),
            commit: s(line, "commitdate"),
            // Order dates: [1992-01-01, 1998-12-31 - 151 days].
            first: i64::from(days_from_civil(1992, 1, 1)),
            last: i64::from(days_from_civil(1998, 12, 31) - 151),
        }
    }

    /// Order `i` (1-based) of a dataset with `customers` customers.
    pub fn order(&mut self, i: i64, customers: i64) -> Order {
        Order {
            orderkey: sparse_order_key(i),
            custkey: order_custkey(&mut self.cust, customers),
            date: self.date.range(self.first, self.last) as i32,
            priority: self.prio.pick(&PRIORITIES),
            lines: self.lines.range(1, 7),
        }
    }

    /// A line of `order` in a dataset with `parts` parts.
    pub fn line(&mut self, order: &Order, parts: i64) -> Line {
        let partkey = self.part.range(1, parts);
        let quantity = self.qty.range(1, 50);
        let price = retail_price_cents(partkey);
        Line {
            partkey,
            quantity,
            price,
            extended: quantity * price,
            discount: self.disc.range(0, 10),
            tax: self.tax.range(0, 8),
            commit: order.date + self.commit.range(30, 90) as i32,
        }
    }
}

/// A customer key that is not a multiple of 3 (TPC-H 4.2.3: a third of the customers
/// place no orders).
pub fn order_custkey(s: &mut Stream, customers: i64) -> i64 {
    if customers < 3 {
        return s.range(1, customers);
    }
    loop {
        let k = s.range(1, customers);
        if k % 3 != 0 {
            return k;
        }
    }
}
