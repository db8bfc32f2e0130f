//! csx-data: data pipelines on csx devices (issue 13).
//!
//! * [`columnar`]: the columnar format (one file per column, fixed-width little-endian
//!   values, dictionary-encoded strings, a schema per table; `docs/design/columnar.md`).
//! * [`ssb::gen`] and [`tpch`]: deterministic generators of the Star Schema Benchmark's
//!   tables and TPC-H's ORDERS and LINEITEM, written columnar; [`parquet`] writes the
//!   Parquet copy the DuckDB oracle reads.
//! * [`put`]: a directory tree onto the device (`csx put -r`).
//!
//! Built on csx-host's public API only: everything the device does here, it does
//! through commands a served device accepts too.

pub mod calendar;
pub mod columnar;
pub mod error;
pub mod gen;
pub mod names;
pub mod parquet;
pub mod put;
pub mod rng;
pub mod ssb;
pub mod tpch;

pub use columnar::{ColumnSchema, ColumnType, LocalTable, Schema, Values};
pub use error::DataError;
pub use gen::{Benchmark, Dataset};
