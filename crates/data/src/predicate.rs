//! Predicates of a pushdown scan: a comparison of one fixed-width column with values in
//! the column's stored units (days for dates, scaled integers for decimals, codes for
//! dict columns: [`literal`] converts text), and their compilation into what the device
//! filter evaluates: a union of at most [`RANGES_MAX`] unsigned ranges of the raw
//! little-endian value.
//!
//! A signed comparison becomes unsigned ranges by splitting at zero: raw values
//! `[0, 2^(w-1))` are the non-negative numbers in order and `[2^(w-1), 2^w)` the negative
//! ones in order, so a signed interval is one raw range or two. Several predicates on
//! one column intersect.

use crate::columnar::{ColumnSchema, ColumnType};
use crate::error::DataError;
use crate::filter::{self, Constant, Num, Op};

/// Most ranges one device filter run evaluates (`SSB_RANGES_MAX` of `sdk/ssb/ssb.h`).
pub const RANGES_MAX: usize = 16;

/// A comparison with values in the column's stored units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq(i64),
    Ne(i64),
    Lt(i64),
    Le(i64),
    Gt(i64),
    Ge(i64),
    /// Inclusive at both ends.
    Between(i64, i64),
    In(Vec<i64>),
}

/// `column CMP value(s)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Predicate {
    pub column: String,
    pub cmp: Cmp,
}

impl Predicate {
    pub fn new(column: &str, cmp: Cmp) -> Predicate {
        Predicate {
            column: column.to_string(),
            cmp,
        }
    }

    /// Whether `v` (a value of a column of type `ty`, widened) satisfies the predicate:
    /// the host reference, straight from the definition.
    pub fn matches(&self, v: i64) -> bool {
        match &self.cmp {
            Cmp::Eq(a) => v == *a,
            Cmp::Ne(a) => v != *a,
            Cmp::Lt(a) => v < *a,
            Cmp::Le(a) => v <= *a,
            Cmp::Gt(a) => v > *a,
            Cmp::Ge(a) => v >= *a,
            Cmp::Between(a, b) => *a <= v && v <= *b,
            Cmp::In(list) => list.contains(&v),
        }
    }
}

/// An inclusive range of raw (unsigned) values.
pub type RawRange = (u64, u64);

/// The domain of a column type as signed i128 bounds: the values a column of that type
/// holds, in its number line (what a comparison's open side extends to).
pub fn domain(ty: ColumnType) -> (i128, i128) {
    match (ty.width(), ty.signed()) {
        (4, true) => (i128::from(i32::MIN), i128::from(i32::MAX)),
        (4, false) => (0, i128::from(u32::MAX)),
        (_, true) => (i128::from(i64::MIN), i128::from(i64::MAX)),
        (_, false) => (0, i128::from(u64::MAX)),
    }
}

/// The intervals of values (in the column's number line) a comparison selects.
fn intervals(cmp: &Cmp, lo: i128, hi: i128) -> Vec<(i128, i128)> {
    let v = |a: &i64| i128::from(*a);
    let raw: Vec<(i128, i128)> = match cmp {
        Cmp::Eq(a) => vec![(v(a), v(a))],
        Cmp::Ne(a) => vec![(lo, v(a) - 1), (v(a) + 1, hi)],
        Cmp::Lt(a) => vec![(lo, v(a) - 1)],
        Cmp::Le(a) => vec![(lo, v(a))],
        Cmp::Gt(a) => vec![(v(a) + 1, hi)],
        Cmp::Ge(a) => vec![(v(a), hi)],
        Cmp::Between(a, b) => vec![(v(a), v(b))],
        Cmp::In(list) => list.iter().map(|a| (v(a), v(a))).collect(),
    };
    raw.into_iter()
        .map(|(a, b)| (a.max(lo), b.min(hi)))
        .filter(|(a, b)| a <= b)
        .collect()
}

/// Sorts and merges touching or overlapping ranges.
fn normalize(mut r: Vec<(i128, i128)>) -> Vec<(i128, i128)> {
    r.sort();
    let mut out: Vec<(i128, i128)> = Vec::new();
    for (a, b) in r {
        match out.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn intersect(a: &[(i128, i128)], b: &[(i128, i128)]) -> Vec<(i128, i128)> {
    let mut out = Vec::new();
    for &(a0, a1) in a {
        for &(b0, b1) in b {
            let (lo, hi) = (a0.max(b0), a1.min(b1));
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    normalize(out)
}

/// What the device must do for one column's predicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compiled {
    /// Every value passes: no filter run.
    All,
    /// No value passes: the scan selects nothing.
    Nothing,
    /// The values in any of these raw ranges pass.
    Ranges(Vec<RawRange>),
}

/// Compiles the conjunction of `cmps` on a column of type `ty` into raw ranges, at
/// most [`RANGES_MAX`] (what one filter operator run takes).
pub fn compile(column: &str, ty: ColumnType, cmps: &[&Cmp]) -> Result<Compiled, DataError> {
    compile_within(column, ty, cmps, RANGES_MAX)
}

/// [`compile`] with another limit on the ranges.
pub fn compile_within(
    column: &str,
    ty: ColumnType,
    cmps: &[&Cmp],
    limit: usize,
) -> Result<Compiled, DataError> {
    let (lo, hi) = domain(ty);
    let mut set = vec![(lo, hi)];
    for cmp in cmps {
        set = intersect(&set, &normalize(intervals(cmp, lo, hi)));
    }
    if set.is_empty() {
        return Ok(Compiled::Nothing);
    }
    if set == [(lo, hi)] {
        return Ok(Compiled::All);
    }
    let bits = ty.width() * 8;
    let modulus = 1i128 << bits;
    let mut raw: Vec<RawRange> = Vec::new();
    for (a, b) in set {
        if a >= 0 {
            raw.push((a as u64, b as u64));
        } else if b < 0 {
            raw.push(((a + modulus) as u64, (b + modulus) as u64));
        } else {
            raw.push((0, b as u64));
            raw.push(((a + modulus) as u64, (modulus - 1) as u64));
        }
    }
    raw.sort();
    if raw.len() > limit {
        return Err(DataError::TooLarge {
            what: format!(
                "the predicates on column {column} ({} value ranges)",
                raw.len()
            ),
            needed: raw.len() as u64,
            limit: limit as u64,
        });
    }
    Ok(Compiled::Ranges(raw))
}

/// The raw ranges of 8-byte values `ranges` as ranges of the same values stored in 4
/// bytes (`signed`: two's complement, else unsigned), for a column staged narrowed: the
/// values 4 bytes cannot hold are dropped (no staged value is one of them). Sorted and
/// disjoint, as given; empty when no 4-byte value is in them.
pub fn narrow_ranges(ranges: &[RawRange], signed: bool) -> Vec<RawRange> {
    // The 8-byte raw values 4 bytes hold, and what to subtract to get their 4-byte raw.
    let parts: &[(u64, u64, u64)] = match signed {
        true => &[
            (0, i32::MAX as u64, 0),
            (
                i32::MIN as i64 as u64,
                u64::MAX,
                u64::MAX - u64::from(u32::MAX),
            ),
        ],
        false => &[(0, u32::MAX as u64, 0)],
    };
    let mut out = Vec::new();
    for &(plo, phi, shift) in parts {
        for &(lo, hi) in ranges {
            let (a, b) = (lo.max(plo), hi.min(phi));
            if a <= b {
                out.push((a - shift, b - shift));
            }
        }
    }
    out
}

/// A value of column `col` written as text: a number (integer columns; decimal
/// columns, scaled), a date `yyyy-mm-dd` (date columns), or a string (dict columns: its
/// code in `dictionary`). `None` when no stored value equals it (a string not in the
/// dictionary, a decimal with more places than the column's scale, a number outside
/// the column's domain), which matches no row. Bound as filter strings are
/// ([`crate::filter::bound`]).
pub fn literal(
    col: &ColumnSchema,
    dictionary: Option<&[String]>,
    text: &str,
) -> Result<Option<i64>, DataError> {
    if col.ty == ColumnType::Dict && dictionary.is_none() {
        return Err(DataError::Invalid(format!(
            "{text:?} is not a value of column {} (dict): no dictionary given",
            col.name
        )));
    }
    let c = literal_constant(col, text)?;
    let (lo, hi, _) = filter::bound(col, dictionary, Op::Eq, &c, text)
        .map_err(|e| DataError::Invalid(e.to_string()))?;
    let (lo_b, hi_b) = domain(col.ty);
    Ok((lo == hi && lo_b <= lo && lo <= hi_b).then_some(lo as i64))
}

/// The text of a literal as a filter constant of `col`'s kind: a string for dict
/// columns, a `yyyy-mm-dd` date for date columns, a number for the others.
pub fn literal_constant(col: &ColumnSchema, text: &str) -> Result<Constant, DataError> {
    let bad = |want: &str| {
        DataError::Invalid(format!(
            "{text:?} is not a value of column {} ({}): expected {want}",
            col.name,
            col.ty.name()
        ))
    };
    Ok(match col.ty {
        ColumnType::Dict => Constant::Str(text.to_string()),
        ColumnType::Date => {
            Constant::Date(filter::parse_date(text).ok_or_else(|| bad("yyyy-mm-dd"))?)
        }
        _ => Constant::Number(Num::parse(text.trim()).ok_or_else(|| bad("a number"))?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_matches(c: &Compiled, raw: u64) -> bool {
        match c {
            Compiled::All => true,
            Compiled::Nothing => false,
            Compiled::Ranges(r) => r.iter().any(|&(a, b)| a <= raw && raw <= b),
        }
    }

    /// Narrowed ranges hold a 4-byte raw value exactly when the 8-byte ranges hold the
    /// same value's 8-byte raw, for values at and around every edge.
    #[test]
    fn narrowed_ranges_select_the_same_values_in_4_bytes() {
        let cases: Vec<(ColumnType, Vec<Cmp>)> = vec![
            (ColumnType::Decimal, vec![Cmp::Lt(2400)]),
            (ColumnType::Decimal, vec![Cmp::Between(5, 7)]),
            (ColumnType::Int64, vec![Cmp::Ge(-3)]),
            (ColumnType::Int64, vec![Cmp::Ne(0)]),
            (
                ColumnType::Int64,
                vec![Cmp::In(vec![-1 << 40, -5, 9, 1 << 35])],
            ),
            (ColumnType::Int64, vec![Cmp::Gt(1 << 33)]),
            (ColumnType::Int64, vec![Cmp::Lt(-(1 << 33))]),
            (
                ColumnType::Int64,
                vec![Cmp::Between(-(1 << 33), i64::from(i32::MIN) + 2)],
            ),
        ];
        let mut values = vec![0i64, 1, -1, 5, 7, 8, 2399, 2400, -3, -4, 9];
        values
            .extend([i32::MIN, i32::MIN + 1, i32::MIN + 2, i32::MIN + 3, i32::MAX].map(i64::from));
        for (ty, cmps) in &cases {
            let refs: Vec<&Cmp> = cmps.iter().collect();
            let Compiled::Ranges(wide) = compile("c", *ty, &refs).unwrap() else {
                panic!("{cmps:?} compiles to ranges");
            };
            let narrow = narrow_ranges(&wide, true);
            assert!(narrow.windows(2).all(|w| w[0].1 < w[1].0), "{narrow:?}");
            for &v in &values {
                let want = cmps
                    .iter()
                    .all(|c| Predicate::new("c", c.clone()).matches(v));
                let raw4 = u64::from(v as i32 as u32);
                let got = narrow.iter().any(|&(a, b)| a <= raw4 && raw4 <= b);
                assert_eq!(got, want, "{cmps:?} value {v}: {narrow:?} from {wide:?}");
            }
        }
        assert_eq!(narrow_ranges(&[(1 << 40, 1 << 41)], true), vec![]);
        assert_eq!(
            narrow_ranges(&[(7, u64::MAX)], false),
            vec![(7, u64::from(u32::MAX))]
        );
    }

    #[test]
    fn compiled_ranges_select_exactly_what_the_predicates_select() {
        let values: Vec<i64> = vec![
            i64::from(i32::MIN),
            -1000,
            -3,
            -1,
            0,
            1,
            2,
            3,
            7,
            10,
            1000,
            i64::from(i32::MAX),
        ];
        let cmps = [
            Cmp::Eq(3),
            Cmp::Ne(3),
            Cmp::Lt(0),
            Cmp::Le(-3),
            Cmp::Gt(-2),
            Cmp::Ge(7),
            Cmp::Between(-3, 7),
            Cmp::In(vec![-1000, 2, 10]),
            Cmp::Lt(i64::from(i32::MIN)),
        ];
        for a in &cmps {
            for b in &cmps {
                let c = compile("x", ColumnType::Int32, &[a, b]).unwrap();
                for &v in &values {
                    let want = Predicate::new("x", a.clone()).matches(v)
                        && Predicate::new("x", b.clone()).matches(v);
                    let raw = u64::from(v as i32 as u32);
                    assert_eq!(raw_matches(&c, raw), want, "{a:?} and {b:?} on {v}: {c:?}");
                }
            }
        }
        let u = compile("d", ColumnType::Uint32, &[&Cmp::Ge(0)]).unwrap();
        assert_eq!(u, Compiled::All);
        let d = compile("p", ColumnType::Decimal, &[&Cmp::Between(5, 7)]).unwrap();
        assert_eq!(d, Compiled::Ranges(vec![(5, 7)]));
        let neg = compile("p", ColumnType::Int64, &[&Cmp::Lt(0)]).unwrap();
        assert_eq!(neg, Compiled::Ranges(vec![(1 << 63, u64::MAX)]));
    }

    #[test]
    fn too_many_ranges_is_an_error_naming_the_limit() {
        let list: Vec<i64> = (0..40).map(|i| i * 2).collect();
        let e = compile("k", ColumnType::Int32, &[&Cmp::In(list)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("column k") && e.contains("limit is 16"), "{e}");
    }

    #[test]
    fn literals() {
        let dec = ColumnSchema::decimal("l_discount", 2);
        assert_eq!(literal(&dec, None, "0.05").unwrap(), Some(5));
        assert_eq!(literal(&dec, None, "24").unwrap(), Some(2400));
        // More places than the scale: no stored value equals it.
        assert_eq!(literal(&dec, None, "0.055").unwrap(), None);
        assert_eq!(literal(&dec, None, "-0.5").unwrap(), Some(-50));
        assert!(literal(&dec, None, "five").is_err());
        let date = ColumnSchema::new("l_shipdate", ColumnType::Date);
        assert_eq!(literal(&date, None, "1994-01-01").unwrap(), Some(8766));
        let dict = ColumnSchema::new("c", ColumnType::Dict);
        let d = vec!["A".to_string(), "N".to_string(), "R".to_string()];
        assert_eq!(literal(&dict, Some(&d), "R").unwrap(), Some(2));
        assert_eq!(literal(&dict, Some(&d), "Z").unwrap(), None);
    }
}
