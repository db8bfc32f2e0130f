//! csx-data's integration suite: generated data on the device and against DuckDB.
//!
//! Each module opens its own embedded device in a temporary directory. DuckDB (python3
//! with duckdb and pyarrow) is the oracle; a machine without it fails these tests
//! naming scripts/setup.sh.

mod oracle;
mod put_gen;
mod resident;
mod scan;
mod scan_program;
mod scan_resident;
mod ssb;

/// An embedded device under the lambda-io profile (so modelled times are not zero),
/// with the protocol's longest time limit: a wall-clock limit is no test's business
/// (the default second ran out for an interpreted scan on a loaded machine).
pub fn device(dir: &std::path::Path) -> csx_host::Device {
    let config = csx_device::DeviceConfig {
        perf: csx_device::perf::PerfModel::lambda_io(),
        time_limit_ms: Some(csx_host::proto::limits::TIME_LIMIT_MS_MAX),
        ..Default::default()
    };
    csx_host::Device::init(dir, config).unwrap()
}
