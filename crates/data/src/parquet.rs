//! The Parquet copy of a dataset, the oracle's input: written by a Python helper
//! (`crates/data/scripts/columnar_to_parquet.py`, embedded in the binary) with pyarrow,
//! because the Rust `parquet` crate with its Arrow dependencies would cost more compile
//! time than the rest of the workspace's data code; the tests need python3 and DuckDB
//! anyway. `scripts/setup.sh` installs pyarrow; without it the conversion fails naming
//! setup.sh.

use std::path::Path;

use crate::error::DataError;
use crate::python::run_script;

/// The converter's source.
pub const SCRIPT: &str = include_str!("../scripts/columnar_to_parquet.py");

/// Writes `out/TABLE.parquet` for every table directory of `dataset`.
pub fn write_parquet(dataset: &Path, out: &Path) -> Result<(), DataError> {
    run_script(
        SCRIPT,
        &[dataset.as_os_str(), out.as_os_str()],
        "columnar_to_parquet",
    )?;
    Ok(())
}
