//! The native half of the Python package `csx` (`csx._native`), built by maturin from
//! `python/pyproject.toml`. The public API is the Python package (`python/csx`), which
//! checks argument types and sizes and names the bad argument; this module binds
//! csx-host's `Device`, csx-lambda's λ-IO reads, csx-server's daemon and
//! csx-workloads' compiler, releasing the GIL around every device call.
//!
//! Data path: `Device.get` reads a file into one Rust `Vec<u8>` and hands it to Python
//! as a `Buffer` (buffer protocol, read-only), which numpy and pyarrow view without a
//! copy. `Device.put` copies the caller's bytes once, while the GIL is held, then sends
//! them without it.

// Buffers lend typed column values to Python as little-endian bytes.
#[cfg(not(target_endian = "little"))]
compile_error!(
    "csx's columnar format and buffers are little-endian: build on a little-endian host"
);

mod buffer;
mod data;
mod device;
mod errors;
mod filter;
mod scan;
mod server;
mod table;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<buffer::Buffer>()?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<device::ExecResult>()?;
    m.add_class::<device::LambdaResult>()?;
    m.add_class::<server::PyServer>()?;
    m.add_class::<scan::ScanChunk>()?;
    m.add_class::<scan::Scanner>()?;
    m.add_class::<scan::ResidentScans>()?;
    m.add_function(wrap_pyfunction!(scan::get_timed, m)?)?;
    m.add_function(wrap_pyfunction!(scan::table_schema, m)?)?;
    m.add_function(wrap_pyfunction!(scan::table_dictionary, m)?)?;
    m.add_function(wrap_pyfunction!(filter::filter_types, m)?)?;
    m.add_function(wrap_pyfunction!(filter::filter_domain, m)?)?;
    m.add_function(wrap_pyfunction!(filter::filter_raw_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(filter::filter_parse, m)?)?;
    m.add_function(wrap_pyfunction!(filter::filter_bind, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_read, m)?)?;
    m.add_function(wrap_pyfunction!(table::local_table_read, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_write, m)?)?;
    m.add_function(wrap_pyfunction!(data::generate, m)?)?;
    m.add_function(wrap_pyfunction!(data::write_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(data::put_dir, m)?)?;
    m.add_class::<data::SsbRun>()?;
    m.add_function(wrap_pyfunction!(data::ssb_run, m)?)?;
    m.add_function(wrap_pyfunction!(data::ssb_queries, m)?)?;
    m.add_function(wrap_pyfunction!(device::build, m)?)?;
    m.add_function(wrap_pyfunction!(device::sdk_program, m)?)?;
    m.add_function(wrap_pyfunction!(device::sdk_programs, m)?)?;
    m.add_function(wrap_pyfunction!(errors::statuses, m)?)?;
    m.add("RANGES_MAX", csx_data::predicate::RANGES_MAX)?;
    m.add("ABI_VERSION", csx_host::proto::abi::ABI_VERSION)?;
    // The package's one version: the workspace's (Cargo.toml), which maturin also
    // writes into the wheel's metadata.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The Cargo profile ("dev" or "release") and the optimisation level this module
    // was built with (python/build.rs): the dev profile runs the device unoptimised.
    m.add("BUILD_PROFILE", env!("CSX_BUILD_PROFILE"))?;
    m.add("BUILD_OPT_LEVEL", env!("CSX_BUILD_OPT_LEVEL"))?;
    Ok(())
}
