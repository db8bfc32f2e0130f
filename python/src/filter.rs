//! csx-data's predicate compilation for `csx.filter`: the domain of each column type and
//! the raw (unsigned) ranges the device filter evaluates for one column's comparisons,
//! so Python counts ranges against `RANGES_MAX` with the code the scan runs.

use csx_data::columnar::ColumnType;
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
