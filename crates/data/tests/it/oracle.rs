//! The DuckDB oracle (csx_data::oracle): runs SQL over a directory of Parquet files (one
//! view per file, named after it) in python3 and returns the rows as JSON values.

use std::path::Path;

/// The rows of `sql` over the Parquet files in `parquet_dir`; a missing python3 or duckdb
/// fails the test naming scripts/setup.sh.
pub fn duckdb(parquet_dir: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    csx_data::oracle::duckdb(parquet_dir, sql)
        .unwrap_or_else(|e| panic!("the DuckDB oracle failed: {e}"))
}
