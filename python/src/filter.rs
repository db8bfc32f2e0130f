//! csx-data's filter strings and predicate compilation for `csx.filter`: the one parser
//! and binder of filter strings (`csx_data::filter`), the domain of each column type,
//! and the raw (unsigned) ranges the device filter evaluates for one column's
//! comparisons, so Python counts ranges against `RANGES_MAX` with the code the scan runs.
//!
//! Constants cross as `(kind, text, count)`: `("num", "-12.50", 0)` (exact decimal
//! text), `("str", s, 0)`, `("date", "yyyy-mm-dd", 0)`, `("interval", "DAY", n)`, and
//! `("other", repr, 0)` for a value of none of these kinds (which binds to a typed
//! error). A failure comes back as `(kind, message, part)`, kind `"unsupported"` or
//! `"query"`, for `csx.filter` to raise as its own exception classes.

use std::collections::HashMap;

use csx_data::columnar::{ColumnSchema, ColumnType, Schema};
use csx_data::filter::{self as cfilter, Comparison, Constant, FilterError, Num, Op, Unit};
use csx_data::predicate::{self, Compiled};
use pyo3::prelude::*;

use crate::errors::{Error, Result};
use crate::scan::predicate_of;

const TYPES: [ColumnType; 6] = [
    ColumnType::Int32,
    ColumnType::Int64,
    ColumnType::Uint32,
    ColumnType::Date,
    ColumnType::Decimal,
    ColumnType::Dict,
];

fn column_type(name: &str) -> Result<ColumnType> {
    TYPES.into_iter().find(|t| t.name() == name).ok_or_else(|| {
        Error::value(format!(
            "column type {name:?} is not one of int32 int64 uint32 date decimal dict"
        ))
    })
}

/// The names of the column types, in csx-data's order.
#[pyfunction]
pub fn filter_types() -> Vec<&'static str> {
    TYPES.iter().map(|t| t.name()).collect()
}

/// The smallest and largest value a column of type `ty` holds.
#[pyfunction]
pub fn filter_domain(ty: &str) -> PyResult<(i64, i64)> {
    let (lo, hi) = predicate::domain(column_type(ty)?);
    let fit = |v: i128| i64::try_from(v).map_err(|_| Error::value(format!("{ty} bound {v}")));
    Ok((fit(lo)?, fit(hi)?))
}

/// The raw ranges the device filter evaluates for the conjunction of `predicates`
/// ((column, op, values) in stored units, as `Scanner` takes them) on `column` of type
/// `ty`: `None` when every value passes, `[]` when none does; not limited to
/// `RANGES_MAX` (the caller compares the count with it).
#[pyfunction]
pub fn filter_raw_ranges(
    column: &str,
    ty: &str,
    predicates: Vec<(String, String, Vec<i64>)>,
) -> PyResult<Option<Vec<(u64, u64)>>> {
    let ty = column_type(ty)?;
    let preds = predicates
        .iter()
        .map(predicate_of)
        .collect::<Result<Vec<_>>>()?;
    let cmps: Vec<_> = preds.iter().map(|p| &p.cmp).collect();
    let compiled = predicate::compile_within(column, ty, &cmps, usize::MAX).map_err(Error::from)?;
    Ok(match compiled {
        Compiled::All => None,
        Compiled::Nothing => Some(Vec::new()),
        Compiled::Ranges(r) => Some(r),
    })
}

/// A constant as it crosses to Python.
type PyConstant = (String, String, i64);
/// `(column, op, constants, text)`.
type PyComparison = (String, String, Vec<PyConstant>, String);
/// `(column, lo, hi, excluded, values)`.
type PyRange = (String, i128, i128, Vec<i128>, Option<Vec<i128>>);
/// `(kind, message, part)`.
type PyFilterError = (String, String, String);

fn constant_to_py(c: &Constant) -> PyConstant {
    let (kind, text, count) = match c {
        Constant::Number(n) => ("num", n.text(), 0),
        Constant::Str(s) => ("str", s.clone(), 0),
        Constant::Date(d) => ("date", csx_data::calendar::iso(*d), 0),
        Constant::Interval(n, unit) => ("interval", unit.name().to_string(), *n),
        Constant::Other(r) => ("other", r.clone(), 0),
    };
    (kind.to_string(), text, count)
}

fn constant_of_py((kind, text, count): &PyConstant) -> Result<Constant> {
    let bad = || Error::value(format!("filter constant ({kind:?}, {text:?}) is malformed"));
    Ok(match kind.as_str() {
        "num" => Constant::Number(Num::parse(text).ok_or_else(bad)?),
        "str" => Constant::Str(text.clone()),
        "date" => Constant::Date(cfilter::parse_date(text).ok_or_else(bad)?),
        "interval" => Constant::Interval(*count, Unit::parse(text).ok_or_else(bad)?),
        _ => Constant::Other(text.clone()),
    })
}

fn error_to_py(e: &FilterError) -> PyFilterError {
    let kind = match e {
        FilterError::UnknownColumn { .. } | FilterError::NoDictionary { .. } => "query",
        _ => "unsupported",
    };
    (kind.to_string(), e.to_string(), e.part().to_string())
}

/// The comparisons of filter string `text`, or why it does not parse.
#[pyfunction]
pub fn filter_parse(text: &str) -> (Vec<PyComparison>, Option<PyFilterError>) {
    match cfilter::parse(text) {
        Ok(cmps) => (
            cmps.iter()
                .map(|c| {
                    let values = c.values.iter().map(constant_to_py).collect();
                    (
                        c.column.clone(),
                        c.op.name().to_string(),
                        values,
                        c.text.clone(),
                    )
                })
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(error_to_py(&e))),
    }
}

fn comparison_of_py((column, op, values, text): &PyComparison) -> Result<Comparison> {
    let op = Op::of_name(op).ok_or_else(|| {
        Error::value(format!(
            "comparison operator {} is not one of = != < <= > >= between in",
            cfilter::py_repr(op)
        ))
    })?;
    let want = match op {
        Op::In => values.len(),
        Op::Between => 2,
        _ => 1,
    };
    if values.len() != want {
        return Err(Error::value(format!(
            "comparison {} ({}) takes {want} value(s), got {}",
            cfilter::py_repr(text),
            op.name(),
            values.len()
        )));
    }
    Ok(Comparison {
        column: column.clone(),
        op,
        values: values.iter().map(constant_of_py).collect::<Result<_>>()?,
        text: text.clone(),
    })
}

/// The ranges of stored values `comparisons` select in table `table` of `columns`
/// ((name, type, scale)), with the sorted `dictionaries` of its string columns; or why
/// they do not bind.
#[pyfunction]
pub fn filter_bind(
    table: &str,
    columns: Vec<(String, String, u32)>,
    comparisons: Vec<PyComparison>,
    dictionaries: HashMap<String, Vec<String>>,
) -> PyResult<(Vec<PyRange>, Option<PyFilterError>)> {
    let cols = columns
        .iter()
        .map(|(name, ty, scale)| {
            let mut c = ColumnSchema::new(name, column_type(ty)?);
            c.scale = *scale;
            Ok(c)
        })
        .collect::<Result<Vec<_>>>()?;
    let schema = Schema::new(table, 0, cols);
    let cmps = comparisons
        .iter()
        .map(comparison_of_py)
        .collect::<Result<Vec<_>>>()?;
    Ok(match cfilter::bind(&cmps, &schema, &dictionaries) {
        Ok(ranges) => (
            ranges
                .into_iter()
                .map(|r| (r.column, r.lo, r.hi, r.excluded, r.values))
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(error_to_py(&e))),
    })
}
