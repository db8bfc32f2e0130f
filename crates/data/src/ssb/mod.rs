//! The Star Schema Benchmark: its generator ([`gen`]), the queries csx runs
//! ([`queries`]: flights 1 and 3) and their execution on the device and on the host
//! ([`run`]).

pub mod gen;
pub mod probe;
pub mod queries;
pub mod run;

use csx_host::Device;

use crate::error::DataError;

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
