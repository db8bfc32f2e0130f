//! DuckDB as the oracle: the SQL of a query run by DuckDB over the Parquet copy of a
//! dataset (one view per `.parquet` file, named after it), in python3 (`$CSX_PYTHON`
//! if set). A missing python3 or duckdb is an error naming `scripts/setup.sh`.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use crate::error::DataError;
use crate::python::run_script;

/// The Python side: argv[1] the Parquet directory, argv[2] a JSON list of SQL texts;
/// prints a JSON list with each query's rows (decimals as strings, dates ISO).
const SCRIPT: &str = r#"
import json, os, sys, datetime, decimal
try:
    import duckdb
except ImportError as e:
    sys.exit(f"duckdb is missing ({e})")
con = duckdb.connect()
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if f.endswith('.parquet'):
        con.execute(f"CREATE VIEW \"{f[:-8]}\" AS SELECT * FROM read_parquet('{os.path.join(d, f)}')")
def conv(v):
    if isinstance(v, decimal.Decimal): return str(v)
    if isinstance(v, (datetime.date, datetime.datetime)): return v.isoformat()
    return v
out = []
for sql in json.loads(sys.argv[2]):
    out.append([[conv(v) for v in r] for r in con.execute(sql).fetchall()])
print(json.dumps(out))
"#;

/// The rows of each SQL text in `sqls`, run by one DuckDB over the Parquet files in
/// `parquet_dir`, in order.
pub fn duckdb_many(parquet_dir: &Path, sqls: &[&str]) -> Result<Vec<Vec<Vec<Value>>>, DataError> {
    let list = serde_json::to_string(sqls).expect("strings serialize");
    let out = run_script(
        SCRIPT,
        &[parquet_dir.as_os_str(), OsStr::new(&list)],
        "(the DuckDB oracle)",
    )?;
    let rows: Vec<Vec<Vec<Value>>> =
        serde_json::from_slice(&out.stdout).map_err(|e| DataError::Tool {
            tool: out.tool.clone(),
            message: format!("printed something that is not the rows' JSON ({e})"),
        })?;
    if rows.len() != sqls.len() {
        return Err(DataError::Tool {
            tool: out.tool,
            message: format!("answered {} queries of {}", rows.len(), sqls.len()),
        });
    }
    Ok(rows)
}

/// The rows of `sql` over the Parquet files in `parquet_dir`.
pub fn duckdb(parquet_dir: &Path, sql: &str) -> Result<Vec<Vec<Value>>, DataError> {
    Ok(duckdb_many(parquet_dir, &[sql])?.remove(0))
}
