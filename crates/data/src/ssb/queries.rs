//! The SSB queries csx runs on the device (flights 1 and 3 of the SSB specification),
//! as data: the LINEORDER selections, the dimensions joined (each with its selection and
//! group column), the measure, and the SQL DuckDB runs over the Parquet copy as the
//! oracle.

/// A literal comparison, in the text of the query (strings, years, numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lit {
    Eq(&'static str),
    Lt(&'static str),
    Between(&'static str, &'static str),
    In(&'static [&'static str]),
}

/// How a dimension's keys are laid out, for its lookup table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRange {
    /// Keys 1 ..= rows (CUSTOMER, SUPPLIER, PART).
    Dense,
    /// Keys within [lo, hi] (DATE's yyyymmdd keys).
    Fixed(u32, u32),
}

/// One dimension of a star join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimSpec {
    pub table: &'static str,
    pub key: &'static str,
    pub keys: KeyRange,
    /// LINEORDER's foreign key into this dimension.
    pub fk: &'static str,
    pub preds: &'static [(&'static str, Lit)],
    /// The group column and, for an integer one, its value range (dict columns: the
    /// dictionary's codes).
    pub group: Option<(&'static str, Option<(u32, u32)>)>,
}

/// What is summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// `SUM(lo_revenue)`.
    Revenue,
    /// `SUM(lo_extendedprice * lo_discount)`.
    PriceTimesDiscount,
}

impl Measure {
    /// The LINEORDER columns it reads.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Measure::Revenue => &["lo_revenue"],
            Measure::PriceTimesDiscount => &["lo_extendedprice", "lo_discount"],
        }
    }
}

/// One query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuerySpec {
    pub name: &'static str,
    pub lo_preds: &'static [(&'static str, Lit)],
    pub dims: &'static [DimSpec],
    pub measure: Measure,
    /// The query's SQL (SSB spec), as DuckDB runs it over the Parquet copy.
    pub sql: &'static str,
}

const DATE_KEYS: KeyRange = KeyRange::Fixed(19920101, 19981231);
const YEARS: Option<(u32, u32)> = Some((1992, 1998));

const fn date_dim(preds: &'static [(&'static str, Lit)], group: bool) -> DimSpec {
    DimSpec {
        table: "date",
        key: "d_datekey",
        keys: DATE_KEYS,
        fk: "lo_orderdate",
        preds,
        group: if group { Some(("d_year", YEARS)) } else { None },
    }
}

const fn customer(preds: &'static [(&'static str, Lit)], group: &'static str) -> DimSpec {
    DimSpec {
        table: "customer",
        key: "c_custkey",
        keys: KeyRange::Dense,
        fk: "lo_custkey",
        preds,
        group: Some((group, None)),
    }
}

const fn supplier(preds: &'static [(&'static str, Lit)], group: &'static str) -> DimSpec {
    DimSpec {
        table: "supplier",
        key: "s_suppkey",
        keys: KeyRange::Dense,
        fk: "lo_suppkey",
        preds,
        group: Some((group, None)),
    }
}

const KI: &[&str] = &["UNITED KI1", "UNITED KI5"];
const YEARS_92_97: &[(&str, Lit)] = &[("d_year", Lit::Between("1992", "1997"))];

/// Every query, in the specification's order.
pub const QUERIES: &[QuerySpec] = &[
    QuerySpec {
        name: "Q1.1",
        lo_preds: &[
            ("lo_discount", Lit::Between("1", "3")),
            ("lo_quantity", Lit::Lt("25")),
        ],
        dims: &[date_dim(&[("d_year", Lit::Eq("1993"))], false)],
        measure: Measure::PriceTimesDiscount,
        sql: "SELECT SUM(lo_extendedprice * lo_discount) AS revenue FROM lineorder, \"date\" \
              WHERE lo_orderdate = d_datekey AND d_year = 1993 \
              AND lo_discount BETWEEN 1 AND 3 AND lo_quantity < 25",
    },
    QuerySpec {
        name: "Q1.2",
        lo_preds: &[
            ("lo_discount", Lit::Between("4", "6")),
            ("lo_quantity", Lit::Between("26", "35")),
        ],
        dims: &[date_dim(&[("d_yearmonthnum", Lit::Eq("199401"))], false)],
        measure: Measure::PriceTimesDiscount,
        sql: "SELECT SUM(lo_extendedprice * lo_discount) AS revenue FROM lineorder, \"date\" \
              WHERE lo_orderdate = d_datekey AND d_yearmonthnum = 199401 \
              AND lo_discount BETWEEN 4 AND 6 AND lo_quantity BETWEEN 26 AND 35",
    },
    QuerySpec {
        name: "Q1.3",
        lo_preds: &[
            ("lo_discount", Lit::Between("5", "7")),
            ("lo_quantity", Lit::Between("26", "35")),
        ],
        dims: &[date_dim(
            &[
                ("d_weeknuminyear", Lit::Eq("6")),
                ("d_year", Lit::Eq("1994")),
            ],
            false,
        )],
        measure: Measure::PriceTimesDiscount,
        sql: "SELECT SUM(lo_extendedprice * lo_discount) AS revenue FROM lineorder, \"date\" \
              WHERE lo_orderdate = d_datekey AND d_weeknuminyear = 6 AND d_year = 1994 \
              AND lo_discount BETWEEN 5 AND 7 AND lo_quantity BETWEEN 26 AND 35",
    },
    QuerySpec {
        name: "Q3.1",
        lo_preds: &[],
        dims: &[
            customer(&[("c_region", Lit::Eq("ASIA"))], "c_nation"),
            supplier(&[("s_region", Lit::Eq("ASIA"))], "s_nation"),
            date_dim(YEARS_92_97, true),
        ],
        measure: Measure::Revenue,
        sql: "SELECT c_nation, s_nation, d_year, SUM(lo_revenue) AS revenue \
              FROM customer, lineorder, supplier, \"date\" \
              WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey \
              AND c_region = 'ASIA' AND s_region = 'ASIA' AND d_year >= 1992 AND d_year <= 1997 \
              GROUP BY c_nation, s_nation, d_year ORDER BY d_year ASC, revenue DESC",
    },
    QuerySpec {
        name: "Q3.2",
        lo_preds: &[],
        dims: &[
            customer(&[("c_nation", Lit::Eq("UNITED STATES"))], "c_city"),
            supplier(&[("s_nation", Lit::Eq("UNITED STATES"))], "s_city"),
            date_dim(YEARS_92_97, true),
        ],
        measure: Measure::Revenue,
        sql: "SELECT c_city, s_city, d_year, SUM(lo_revenue) AS revenue \
              FROM customer, lineorder, supplier, \"date\" \
              WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey \
              AND c_nation = 'UNITED STATES' AND s_nation = 'UNITED STATES' \
              AND d_year >= 1992 AND d_year <= 1997 \
              GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    },
    QuerySpec {
        name: "Q3.3",
        lo_preds: &[],
        dims: &[
            customer(&[("c_city", Lit::In(KI))], "c_city"),
            supplier(&[("s_city", Lit::In(KI))], "s_city"),
            date_dim(YEARS_92_97, true),
        ],
        measure: Measure::Revenue,
        sql: "SELECT c_city, s_city, d_year, SUM(lo_revenue) AS revenue \
              FROM customer, lineorder, supplier, \"date\" \
              WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey \
              AND (c_city = 'UNITED KI1' OR c_city = 'UNITED KI5') \
              AND (s_city = 'UNITED KI1' OR s_city = 'UNITED KI5') \
              AND d_year >= 1992 AND d_year <= 1997 \
              GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    },
    QuerySpec {
        name: "Q3.4",
        lo_preds: &[],
        dims: &[
            customer(&[("c_city", Lit::In(KI))], "c_city"),
            supplier(&[("s_city", Lit::In(KI))], "s_city"),
            date_dim(&[("d_yearmonth", Lit::Eq("Dec1997"))], true),
        ],
        measure: Measure::Revenue,
        sql: "SELECT c_city, s_city, d_year, SUM(lo_revenue) AS revenue \
              FROM customer, lineorder, supplier, \"date\" \
              WHERE lo_custkey = c_custkey AND lo_suppkey = s_suppkey AND lo_orderdate = d_datekey \
              AND (c_city = 'UNITED KI1' OR c_city = 'UNITED KI5') \
              AND (s_city = 'UNITED KI1' OR s_city = 'UNITED KI5') \
              AND d_yearmonth = 'Dec1997' \
              GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    },
];

/// The query called `name` (`Q3.3`, `q3.3` or `3.3`).
pub fn query(name: &str) -> Option<&'static QuerySpec> {
    let n = name.trim_start_matches(['Q', 'q']);
    QUERIES.iter().find(|q| &q.name[1..] == n)
}

/// The names of every query, for messages.
pub fn names() -> String {
    QUERIES
        .iter()
        .map(|q| q.name)
        .collect::<Vec<_>>()
        .join(", ")
}
