//! The Parquet copy of a dataset, the oracle's input: written by a Python helper
//! (`crates/data/scripts/columnar_to_parquet.py`, embedded in the binary) with pyarrow,
//! because the Rust `parquet` crate with its Arrow dependencies would cost more compile
//! time than the rest of the workspace's data code; the tests need python3 and DuckDB
//! anyway. `scripts/setup.sh` installs pyarrow; without it the conversion fails naming
//! setup.sh.

use std::path::Path;

use crate::columnar::{copy_as_raw, SCHEMA_FILE};
use crate::error::DataError;
use crate::python::run_script;

/// The converter's source.
pub const SCRIPT: &str = include_str!("../scripts/columnar_to_parquet.py");

/// Writes `out/TABLE.parquet` for every table directory of `dataset`. The converter
/// reads raw column files (version 1): encoded tables are first written raw to a
/// temporary directory (decoded, and their checksums checked, by
/// [`crate::columnar::copy_as_raw`]).
pub fn write_parquet(dataset: &Path, out: &Path) -> Result<(), DataError> {
    let tmp = tempfile::tempdir().map_err(|e| DataError::io(std::env::temp_dir(), e))?;
    let mut entries: Vec<_> = std::fs::read_dir(dataset)
        .map_err(|e| DataError::io(dataset, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| DataError::io(dataset, e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let dir = e.path();
        if dir.join(SCHEMA_FILE).is_file() {
            copy_as_raw(&dir, &tmp.path().join(e.file_name()))?;
        }
    }
    run_script(
        SCRIPT,
        &[tmp.path().as_os_str(), out.as_os_str()],
        "columnar_to_parquet",
    )?;
    Ok(())
}
