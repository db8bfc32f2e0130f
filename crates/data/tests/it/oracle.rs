//! The DuckDB oracle: runs SQL over a directory of Parquet files (one view per file,
//! named after it) in python3 and returns the rows as JSON values.

use std::path::Path;
use std::process::Command;

const ORACLE: &str = r#"
import json, os, sys, datetime, decimal
try:
    import duckdb
except ImportError as e:
    sys.exit(f"duckdb is missing ({e}): run scripts/setup.sh")
con = duckdb.connect()
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if f.endswith('.parquet'):
        con.execute(f"CREATE VIEW \"{f[:-8]}\" AS SELECT * FROM read_parquet('{os.path.join(d, f)}')")
def conv(v):
    if isinstance(v, decimal.Decimal): return str(v)
    if isinstance(v, (datetime.date, datetime.datetime)): return v.isoformat()
    return v
rows = con.execute(sys.argv[2]).fetchall()
print(json.dumps([[conv(v) for v in r] for r in rows]))
"#;

/// The rows of `sql` over the Parquet files in `parquet_dir`.
pub fn duckdb(parquet_dir: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(ORACLE)
        .arg(parquet_dir)
        .arg(sql)
        .output()
        .expect("python3 runs (install it with scripts/setup.sh)");
    assert!(
        out.status.success(),
        "the DuckDB oracle failed (run scripts/setup.sh for python3, duckdb, pyarrow): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the oracle prints JSON")
}
