//! csx-data's integration suite: generated data on the device and against DuckDB.
//!
//! Each module opens its own embedded device in a temporary directory. DuckDB (python3
//! with duckdb and pyarrow) is the oracle; a machine without it fails these tests
//! naming scripts/setup.sh.

mod oracle;
mod put_gen;
