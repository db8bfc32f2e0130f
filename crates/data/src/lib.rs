//! csx-data: data pipelines on csx devices.
//!
//! * [`columnar`]: the columnar format (one file per column, dictionary-encoded strings,
//!   a schema per table; `docs/design/columnar.md`); [`encoding`]: its version 2, encoded
//!   blocks with zone maps and checksums; [`stage`]: encoded columns staged and expanded
//!   on the device (`csx_unpack`), blocks a zone map excludes never read.
//! * [`ssb::gen`] and [`tpch`]: deterministic generators of the Star Schema Benchmark's
//!   tables and TPC-H's ORDERS and LINEITEM, written columnar; [`parquet`] writes the
//!   Parquet copy the DuckDB oracle reads.
//! * [`put`]: a directory tree onto the device (`csx put -r`).
//! * [`scan`]: the pushdown scan: selection ([`predicate`]) and projection of one table
//!   in one pass on the device by a program emitted for the query (`scan::program`), only
//!   the selected values sent to the host, with bytes and modelled time reported ([`ops`]).
//! * [`ssb`]: the SSB queries on the device by the operators of `sdk/ssb`, three splits.
//!
//! Built on csx-host's public API only: everything the device does here, it does
//! through commands a served device accepts too.

#![warn(clippy::too_many_lines)]

pub mod calendar;
pub mod columnar;
pub mod encoding;
pub mod error;
pub mod filter;
pub mod gen;
pub mod names;
pub mod ops;
pub mod oracle;
pub mod parquet;
pub mod predicate;
pub mod put;
mod python;
pub mod rng;
pub mod scan;
pub mod ssb;
pub mod stage;
pub mod tpch;

pub use columnar::{ColumnSchema, ColumnType, LocalTable, Schema, Values};
pub use error::DataError;
pub use gen::{Benchmark, Dataset};
pub use ops::Meter;
pub use predicate::{Cmp, Predicate};
pub use scan::{
    scan, scan_kept, Chunk, FilterStrategy, ScanColumn, ScanOptions, ScanResult, Scanner,
};
