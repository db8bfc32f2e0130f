//! What the SSB and TPC-H generators share: scale factors, the dataset description
//! (`dataset.json` at the top of a generated directory) and progress reports.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::DataError;

/// Largest scale factor: SF 300's LINEORDER has 1.8 G rows and order keys up to 1.8 G,
/// under the 2^31 of the 32-bit key columns and the row limit of the format.
pub const SF_MAX: f64 = 300.0;

/// The benchmark a dataset was generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Benchmark {
    Ssb,
    Tpch,
}

impl Benchmark {
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::Ssb => "ssb",
            Benchmark::Tpch => "tpch",
        }
    }
}

/// `dataset.json`: what was generated, so a reader (and `csx ssb run`) can check it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub benchmark: Benchmark,
    pub sf: f64,
    pub seed: u64,
    /// `(table, rows)` in generation order; each table is the directory of that name.
    pub tables: Vec<(String, u64)>,
}

/// The dataset file's name.
pub const DATASET_FILE: &str = "dataset.json";

impl Dataset {
    pub fn write(&self, dir: &Path) -> Result<(), DataError> {
        let path = dir.join(DATASET_FILE);
        let mut s = serde_json::to_string_pretty(self).expect("a dataset serializes");
        s.push('\n');
        std::fs::write(&path, s).map_err(|e| DataError::io(&path, e))
    }

    pub fn read(dir: &Path) -> Result<Dataset, DataError> {
        let path = dir.join(DATASET_FILE);
        let bytes = std::fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| DataError::Schema {
            path: path.display().to_string(),
            message: format!("not a dataset description: {e}"),
        })
    }
}

/// Checks a scale factor.
pub fn check_sf(sf: f64) -> Result<(), DataError> {
    if sf.is_finite() && sf > 0.0 && sf <= SF_MAX {
        Ok(())
    } else {
        Err(DataError::ScaleFactor { sf, max: SF_MAX })
    }
}

/// `base × sf` rows, rounded, at least 1.
pub fn scaled(base: u64, sf: f64) -> i64 {
    ((base as f64 * sf).round() as i64).max(1)
}

/// A progress report: `(table, rows done, rows in the table)`.
pub type ProgressFn<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Rows between progress reports.
pub const PROGRESS_ROWS: u64 = 1 << 16;
