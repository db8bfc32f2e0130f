//! Bindings of csx-data (`csx.data` in Python): the SSB and TPC-H generators, the
//! Parquet copy, `put -r` and the SSB runs (the pushdown scan is `crate::scan`).

use std::path::PathBuf;

use csx_data::FilterStrategy;
use csx_host::proto::EngineKind;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device::PyDevice;
use crate::errors::{Error, Kind, Result};

impl From<csx_data::DataError> for Error {
    fn from(e: csx_data::DataError) -> Error {
        match e {
            csx_data::DataError::Device { source, what } => {
                let mut err: Error = source.into();
                err.message = format!("{what}: {}", err.message);
                err
            }
            other => Error::new(Kind::Data, other.to_string()),
        }
    }
}

/// Generates benchmark `kind` ("tpch" or "ssb") at scale factor `sf` into `out`
/// (columnar, one directory per table, in the format `csx gen` writes); returns
/// {table: rows}.
#[pyfunction]
#[pyo3(signature = (kind, out, sf, seed=1))]
pub fn generate<'py>(
    py: Python<'py>,
    kind: &str,
    out: PathBuf,
    sf: f64,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = kind.to_string();
    let dataset = py.detach(move || -> Result<csx_data::Dataset> {
        let mut progress = |_: &str, _: u64, _: u64| {};
        match kind.as_str() {
            "tpch" => Ok(csx_data::tpch::generate(&out, sf, seed, &mut progress)?),
            "ssb" => Ok(csx_data::ssb::gen::generate(&out, sf, seed, &mut progress)?),
            other => Err(Error::value(format!(
                "benchmark {other:?} is not one of 'tpch', 'ssb'"
            ))),
        }
    })?;
    let d = PyDict::new(py);
    for (table, rows) in dataset.tables {
        d.set_item(table, rows)?;
    }
    Ok(d)
}

/// Writes `out/TABLE.parquet` for every table of the generated dataset `dataset`.
#[pyfunction]
pub fn write_parquet(py: Python<'_>, dataset: PathBuf, out: PathBuf) -> PyResult<()> {
    py.detach(move || -> Result<()> { Ok(csx_data::parquet::write_parquet(&dataset, &out)?) })?;
    Ok(())
}

/// Copies the local directory `local` to `dev_dir` on the device (`csx put -r`);
/// returns (files, directories, bytes).
#[pyfunction]
pub fn put_dir(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    local: PathBuf,
    dev_dir: String,
) -> PyResult<(u64, u64, u64)> {
    let dev = device.get().device()?;
    let s = py.detach(move || -> Result<csx_data::put::PutSummary> {
        Ok(csx_data::put::put_dir(
            &dev,
            &local,
            &dev_dir,
            &mut |_, _| {},
        )?)
    })?;
    Ok((s.files, s.dirs, s.bytes))
}

fn strategy_of(name: &str) -> Result<FilterStrategy> {
    FilterStrategy::parse(name).ok_or_else(|| {
        Error::value(format!(
            "strategy {name:?} is not one of 'bitmask', 'unrolled', 'accel'"
        ))
    })
}

pub(crate) fn engine_of(name: &str) -> Result<EngineKind> {
    match name {
        "jit" => Ok(EngineKind::Jit),
        "interp" => Ok(EngineKind::Interpreter),
        other => Err(Error::value(format!(
            "engine {other:?} is not one of 'jit', 'interp'"
        ))),
    }
}

/// One SSB query run on the device (csx-data's `ssb::run`).
#[pyclass(module = "csx._native", frozen, get_all)]
#[derive(Debug)]
pub struct SsbRun {
    query: &'static str,
    /// The query's SQL (the SSB specification's), as DuckDB runs it.
    sql: &'static str,
    /// The result rows as JSON: [[keys...], sum] per row, sorted.
    rows_json: String,
    split: &'static str,
    modelled_ns: u64,
    bytes_to_host: u64,
    media_bytes: u64,
    fuel: u64,
    commands: u64,
    /// (name, modelled ns, wall ns) per phase.
    phases: Vec<(&'static str, u64, u64)>,
    host_ns: u64,
    wall_ns: u64,
    partitions: u32,
    joined: u64,
}

/// The SSB queries csx runs: (name, SQL).
#[pyfunction]
pub fn ssb_queries() -> Vec<(&'static str, &'static str)> {
    csx_data::ssb::queries::QUERIES
        .iter()
        .map(|q| (q.name, q.sql))
        .collect()
}

/// Runs SSB query `query` over the dataset at `data_dir` on the device.
#[pyfunction]
#[pyo3(signature = (device, data_dir, query, split="offload", engine="jit", strategy="bitmask", partitions=None, probe="emitted"))]
#[allow(clippy::too_many_arguments)]
pub fn ssb_run(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    data_dir: String,
    query: &str,
    split: &str,
    engine: &str,
    strategy: &str,
    partitions: Option<u32>,
    probe: &str,
) -> PyResult<SsbRun> {
    let q = csx_data::ssb::queries::query(query).ok_or_else(|| {
        let known: Vec<&str> = csx_data::ssb::queries::QUERIES
            .iter()
            .map(|q| q.name)
            .collect();
        Error::value(format!(
            "query {query:?} is not one of {}",
            known.join(", ")
        ))
    })?;
    let split = csx_data::ssb::run::Split::parse(split).ok_or_else(|| {
        Error::value(format!(
            "split {split:?} is not one of 'offload', 'host-agg', 'host'"
        ))
    })?;
    let probe = csx_data::ssb::run::ProbeKind::parse(probe).ok_or_else(|| {
        Error::value(format!(
            "probe {probe:?} is not one of 'emitted', 'operator'"
        ))
    })?;
    let opts = csx_data::ssb::run::RunOptions {
        split,
        engine: engine_of(engine)?,
        strategy: strategy_of(strategy)?,
        probe,
        partitions,
        ..csx_data::ssb::run::RunOptions::default()
    };
    let dev = device.get().device()?;
    let r = py.detach(move || -> Result<csx_data::ssb::run::QueryRun> {
        Ok(csx_data::ssb::run::run(&dev, &data_dir, q, &opts)?)
    })?;
    let rows: Vec<serde_json::Value> = r
        .rows
        .iter()
        .map(|row| serde_json::json!([row.keys, row.value]))
        .collect();
    Ok(SsbRun {
        query: r.query,
        sql: q.sql,
        rows_json: serde_json::Value::Array(rows).to_string(),
        split: r.options.split.name(),
        modelled_ns: r.meter.modelled_ns,
        bytes_to_host: r.meter.bytes_to_host,
        media_bytes: r.meter.media_bytes,
        fuel: r.meter.fuel,
        commands: r.meter.commands,
        phases: r
            .phases
            .iter()
            .map(|p| (p.name, p.modelled_ns, p.wall_ns))
            .collect(),
        host_ns: r.host_ns,
        wall_ns: r.wall_ns,
        partitions: r.partitions,
        joined: r.joined,
    })
}
