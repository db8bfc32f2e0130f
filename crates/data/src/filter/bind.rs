//! The binder: comparisons against a schema and its dictionaries into inclusive ranges
//! of stored values.

use std::collections::HashMap;

use super::{Comparison, Constant, FilterError, Num, Op};
use crate::columnar::{ColumnSchema, ColumnType, Schema};
use crate::error::DataError;
use crate::predicate::domain;

/// The rows whose stored value `v` of `column` has `lo <= v <= hi` and `v` not in
/// `excluded` (and, when `values` is some, `v` in it: an `In` list). An empty range
/// (`lo > hi`, or no value left) keeps no row; its bounds may then lie outside the
/// column's domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub column: String,
    pub lo: i128,
    pub hi: i128,
    pub excluded: Vec<i128>,
    pub values: Option<Vec<i128>>,
}

impl Range {
    /// Whether no row passes.
    pub fn is_empty(&self) -> bool {
        self.lo > self.hi || self.values.as_ref().is_some_and(Vec::is_empty)
    }
}

/// One range per filtered column, in the order the columns first appear (comparisons
/// on one column intersect). `dictionaries` holds the sorted entries of each string
/// column filtered.
pub fn bind(
    comparisons: &[Comparison],
    schema: &Schema,
    dictionaries: &HashMap<String, Vec<String>>,
) -> Result<Vec<Range>, FilterError> {
    let mut ranges: Vec<Range> = Vec::new();
    for c in comparisons {
        let col = column(schema, c)?;
        let dict = match col.ty {
            ColumnType::Dict => {
                Some(
                    dictionaries
                        .get(&col.name)
                        .ok_or_else(|| FilterError::NoDictionary {
                            part: c.text.clone(),
                            column: col.name.clone(),
                        })?,
                )
            }
            _ => None,
        };
        let one = bind_one(col, dict.map(Vec::as_slice), c)?;
        match ranges.iter_mut().find(|r| r.column == col.name) {
            Some(prev) => *prev = merge(prev, one, col.ty),
            None => ranges.push(settle(one, col.ty)),
        }
    }
    Ok(ranges)
}

fn column<'s>(schema: &'s Schema, c: &Comparison) -> Result<&'s ColumnSchema, FilterError> {
    schema.column(&c.column).map_err(|e| {
        let known = match e {
            DataError::UnknownColumn { known, .. } => known,
            other => other.to_string(),
        };
        FilterError::UnknownColumn {
            part: c.text.clone(),
            table: schema.table.clone(),
            column: c.column.clone(),
            known,
        }
    })
}

/// One comparison's range (not yet settled against the domain).
fn bind_one(
    col: &ColumnSchema,
    dict: Option<&[String]>,
    c: &Comparison,
) -> Result<Range, FilterError> {
    let (lo_b, hi_b) = domain(col.ty);
    let mut r = Range {
        column: col.name.clone(),
        lo: lo_b,
        hi: hi_b,
        excluded: Vec::new(),
        values: None,
    };
    let pieces: Vec<(Op, &Constant)> = match c.op {
        Op::In => {
            r.values = Some(in_values(col, dict, c)?);
            Vec::new()
        }
        Op::Between => vec![(Op::Ge, &c.values[0]), (Op::Le, &c.values[1])],
        op => vec![(op, &c.values[0])],
    };
    for (op, value) in pieces {
        let (a, b, ex) = bound(col, dict, op, value, &c.text)?;
        r.lo = r.lo.max(a);
        r.hi = r.hi.min(b);
        r.excluded.extend(ex);
    }
    Ok(r)
}

/// The inclusive range `(lo, hi)` of stored values of `col` with `value op constant`
/// (`op` one of `=`, `!=`, `<`, `<=`, `>`, `>=`) and the value `!=` excludes; `part`
/// names the comparison in errors. Unbounded sides are the column's domain.
pub fn bound(
    col: &ColumnSchema,
    dict: Option<&[String]>,
    op: Op,
    value: &Constant,
    part: &str,
) -> Result<(i128, i128, Option<i128>), FilterError> {
    if col.ty == ColumnType::Dict {
        let Constant::Str(s) = value else {
            return Err(mismatch(col, part));
        };
        return Ok(dict_bound(dict.unwrap_or(&[]), op, s));
    }
    let x = scaled(col, value, part)?;
    let (lo_b, hi_b) = domain(col.ty);
    let int = x.is_integer().then(|| x.floor());
    Ok(match op {
        Op::Eq => int.map_or((1, 0, None), |v| (v, v, None)),
        Op::Ne => (lo_b, hi_b, int),
        Op::Lt => (lo_b, x.ceil() - 1, None),
        Op::Le => (lo_b, x.floor(), None),
        Op::Gt => (x.floor() + 1, hi_b, None),
        _ => (x.ceil(), hi_b, None),
    })
}

/// The code range of `code op s` over sorted dictionary entries: a string absent
/// from the dictionary still orders between its neighbours.
fn dict_bound(entries: &[String], op: Op, s: &str) -> (i128, i128, Option<i128>) {
    let n = entries.len() as i128;
    let lo_i = entries.partition_point(|e| e.as_str() < s) as i128;
    let hi_i = entries.partition_point(|e| e.as_str() <= s) as i128;
    let found = lo_i < hi_i;
    match op {
        Op::Eq if found => (lo_i, lo_i, None),
        Op::Eq => (1, 0, None),
        Op::Ne => (0, n - 1, found.then_some(lo_i)),
        Op::Lt => (0, lo_i - 1, None),
        Op::Le => (0, hi_i - 1, None),
        Op::Gt => (hi_i, n - 1, None),
        _ => (lo_i, n - 1, None),
    }
}

/// The constant as a (possibly fractional) stored value of a number or date column.
fn scaled(col: &ColumnSchema, value: &Constant, part: &str) -> Result<Num, FilterError> {
    match (col.ty, value) {
        (ColumnType::Date, Constant::Date(d)) => Ok(Num::int(i128::from(*d))),
        (ColumnType::Date, Constant::Str(s)) => super::value::parse_date(s)
            .map(|d| Num::int(i128::from(d)))
            .ok_or_else(|| FilterError::BadDate {
                part: part.to_string(),
                text: s.clone(),
            }),
        (ColumnType::Decimal, Constant::Number(x)) => Ok(x.shifted(col.scale)),
        (ColumnType::Date, _) => Err(mismatch(col, part)),
        (_, Constant::Number(x)) => Ok(x.clone()),
        _ => Err(mismatch(col, part)),
    }
}

fn mismatch(col: &ColumnSchema, part: &str) -> FilterError {
    let why = match col.ty {
        ColumnType::Dict => format!(
            "column {} holds strings; compare it with a 'string'",
            col.name
        ),
        ColumnType::Date => format!(
            "column {} is a date; compare it with DATE 'yyyy-mm-dd'",
            col.name
        ),
        ty => format!(
            "column {} is {}; compare it with a number",
            col.name,
            ty.name()
        ),
    };
    FilterError::Mismatch {
        part: part.to_string(),
        why,
    }
}

/// The stored values of an `In` list (values the column cannot hold are dropped).
fn in_values(
    col: &ColumnSchema,
    dict: Option<&[String]>,
    c: &Comparison,
) -> Result<Vec<i128>, FilterError> {
    let mut out = Vec::new();
    let (lo_b, hi_b) = domain(col.ty);
    for v in &c.values {
        if col.ty == ColumnType::Dict {
            let Constant::Str(s) = v else {
                return Err(mismatch(col, &c.text));
            };
            let entries = dict.unwrap_or(&[]);
            if let Ok(i) = entries.binary_search_by(|e| e.as_str().cmp(s)) {
                out.push(i as i128);
            }
            continue;
        }
        let x = scaled(col, v, &c.text)?;
        if x.within(lo_b, hi_b) {
            out.push(x.floor());
        }
    }
    Ok(out)
}

/// `next` intersected with the earlier range `prev` on the same column.
fn merge(prev: &Range, mut next: Range, ty: ColumnType) -> Range {
    next.lo = next.lo.max(prev.lo);
    next.hi = next.hi.min(prev.hi);
    let mut excluded = prev.excluded.clone();
    excluded.append(&mut next.excluded);
    next.excluded = excluded;
    if let Some(pv) = &prev.values {
        next.values = Some(match next.values {
            None => pv.clone(),
            Some(v) => v.into_iter().filter(|x| pv.contains(x)).collect(),
        });
    }
    settle(next, ty)
}

/// Clamps to the domain, keeps the exclusions inside the range (sorted, once) and
/// folds them into an `In` list.
fn settle(mut r: Range, ty: ColumnType) -> Range {
    let (lo_b, hi_b) = domain(ty);
    r.lo = r.lo.max(lo_b);
    r.hi = r.hi.min(hi_b);
    let (lo, hi) = (r.lo, r.hi);
    r.excluded.retain(|e| lo <= *e && *e <= hi);
    r.excluded.sort_unstable();
    r.excluded.dedup();
    if let Some(values) = &mut r.values {
        values.retain(|v| lo <= *v && *v <= hi && !r.excluded.contains(v));
        values.sort_unstable();
        values.dedup();
        r.excluded.clear();
    }
    r
}
