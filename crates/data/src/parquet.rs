//! The Parquet copy of a dataset, the oracle's input: written by a Python helper
//! (`crates/data/scripts/columnar_to_parquet.py`, embedded in the binary) with pyarrow,
//! because the Rust `parquet` crate with its Arrow dependencies would cost more compile
//! time than the rest of the workspace's data code; the tests need python3 and DuckDB
//! anyway. `scripts/setup.sh` installs pyarrow; without it the conversion fails naming
//! setup.sh.

use std::path::Path;
use std::process::Command;

use crate::error::DataError;

/// The converter's source.
pub const SCRIPT: &str = include_str!("../scripts/columnar_to_parquet.py");

/// Writes `out/TABLE.parquet` for every table directory of `dataset`.
pub fn write_parquet(dataset: &Path, out: &Path) -> Result<(), DataError> {
    let python = std::env::var("CSX_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(dataset)
        .arg(out)
        .output()
        .map_err(|e| DataError::Tool {
            tool: python.clone(),
            message: format!("cannot start it ({e})"),
        })?;
    if !output.status.success() {
        return Err(DataError::Tool {
            tool: format!("{python} columnar_to_parquet"),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}
