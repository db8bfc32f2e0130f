//! The Star Schema Benchmark: its generator ([`gen`]), the queries csx runs
//! ([`queries`]: flights 1 and 3) and their execution on the device and on the host
//! ([`run`]).

pub mod gen;
pub mod probe;
pub mod queries;
pub mod resident;
pub mod run;
pub mod yardstick;

use std::path::Path;

use csx_host::Device;
use serde_json::Value;

use crate::error::DataError;
use crate::ssb::queries::QuerySpec;
use crate::ssb::run::ResultRow;

/// The device directory of the SSB dataset at `sf` by default: `/ssb/sf1`, `/ssb/sf0.01`.
pub fn default_dir(sf: f64) -> String {
    format!("/ssb/sf{sf}")
}

/// Makes sure the dataset at `dev_dir` exists on the device: when its LINEORDER schema
/// is missing, generates SSB at `sf` (seed `seed`) into a temporary directory, puts it
/// there and deletes the local copy. Returns whether it generated. `progress` hears
/// what is happening, for a progress line.
pub fn ensure_dataset(
    dev: &Device,
    dev_dir: &str,
    sf: f64,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<bool, DataError> {
    let schema = format!("{}/lineorder/schema.json", dev_dir.trim_end_matches('/'));
    if dev.stat(&schema).is_ok() {
        return Ok(false);
    }
    let tmp = tempfile::tempdir().map_err(|e| DataError::io(std::env::temp_dir(), e))?;
    progress(&format!("generating SSB at SF {sf}"));
    gen::generate(tmp.path(), sf, seed, &mut |table, done, total| {
        if done == total {
            progress(&format!("generated {table}"));
        }
    })?;
    progress(&format!("putting the dataset to {dev_dir}"));
    crate::put::put_dir(dev, tmp.path(), dev_dir, &mut |_, _| {})?;
    Ok(true)
}

/// DuckDB's answers to `queries`: each one's SQL run by one DuckDB over the Parquet copy
/// in `parquet_dir` ([`crate::oracle`]), as result rows (the last column is the sum; a
/// group whose SUM is NULL, i.e. over no rows, is left out as csx leaves it out).
pub fn duckdb_answers(
    parquet_dir: &Path,
    queries: &[&QuerySpec],
) -> Result<Vec<Vec<ResultRow>>, DataError> {
    let sqls: Vec<&str> = queries.iter().map(|q| q.sql).collect();
    let answers = crate::oracle::duckdb_many(parquet_dir, &sqls)?;
    answers
        .into_iter()
        .zip(queries)
        .map(|(rows, q)| {
            rows.into_iter()
                .filter(|r| r.last().is_some_and(|v| !v.is_null()))
                .map(|mut r| {
                    let v = r.pop().expect("a non-empty row");
                    let value = v
                        .as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                        .ok_or_else(|| {
                            DataError::Invalid(format!(
                                "{}: DuckDB's sum {v} is not a non-negative integer",
                                q.name
                            ))
                        })?;
                    Ok(ResultRow { keys: r, value })
                })
                .collect()
        })
        .collect()
}

/// How `got` differs from `want` as multisets of rows (order aside): one line per row
/// missing from `got` ("- keys sum") or extra in it ("+ keys sum"); empty when equal.
pub fn differences(want: &[ResultRow], got: &[ResultRow]) -> Vec<String> {
    let text = |rows: &[ResultRow]| {
        let mut v: Vec<String> = rows
            .iter()
            .map(|r| {
                let keys: Vec<String> = r.keys.iter().map(Value::to_string).collect();
                format!("[{}] {}", keys.join(", "), r.value)
            })
            .collect();
        v.sort();
        v
    };
    let (w, g) = (text(want), text(got));
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < w.len() || j < g.len() {
        match (w.get(i), g.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                out.push(format!("- {a}"));
                i += 1;
            }
            (Some(_), Some(b)) => {
                out.push(format!("+ {b}"));
                j += 1;
            }
            (Some(a), None) => {
                out.push(format!("- {a}"));
                i += 1;
            }
            (None, Some(b)) => {
                out.push(format!("+ {b}"));
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: &str, year: i64, value: u64) -> ResultRow {
        ResultRow {
            keys: vec![Value::from(k), Value::from(year)],
            value,
        }
    }

    #[test]
    fn differences_name_missing_and_extra_rows_whatever_the_order() {
        let want = vec![row("A", 1992, 5), row("B", 1993, 7), row("B", 1993, 7)];
        let same = vec![row("B", 1993, 7), row("A", 1992, 5), row("B", 1993, 7)];
        assert!(differences(&want, &same).is_empty());
        let got = vec![row("A", 1992, 6), row("B", 1993, 7)];
        assert_eq!(
            differences(&want, &got),
            vec![
                "- [\"A\", 1992] 5".to_string(),
                "+ [\"A\", 1992] 6".to_string(),
                "- [\"B\", 1993] 7".to_string(),
            ]
        );
        assert_eq!(differences(&[], &want[..1]), vec!["+ [\"A\", 1992] 5"]);
    }
}
