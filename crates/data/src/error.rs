//! [`DataError`]: every failure of csx-data, each naming the bad value, the file and
//! the row where there is one, and the limit.

use std::path::PathBuf;

use csx_host::{CallError, OpenError};

/// What went wrong generating, reading, scanning or querying columnar data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: bad schema: {message}")]
    Schema { path: String, message: String },
    #[error("{path}: {found} bytes, expected {expected} ({rows} rows of {width} bytes)")]
    ColumnLength {
        path: String,
        found: u64,
        expected: u64,
        rows: u64,
        width: u64,
    },
    #[error("{path}: row {row}: dictionary index {code} out of range, the dictionary has {entries} entries")]
    DictionaryIndex {
        path: String,
        row: u64,
        code: u32,
        entries: u64,
    },
    #[error("{path}: {message}")]
    Dictionary { path: String, message: String },
    /// A block of an encoded column whose header, zone map (its directory entry) or
    /// payload fails its checksum or is inconsistent.
    #[error("table {table}, column {column}, block {block}: bad {part}: {message}")]
    CorruptBlock {
        table: String,
        column: String,
        block: u64,
        part: &'static str,
        message: String,
    },
    /// An encoded column file whose header is bad.
    #[error("table {table}, column {column} ({path}): bad column file: {message}")]
    CorruptColumn {
        table: String,
        column: String,
        path: String,
        message: String,
    },
    #[error("table {table} has no column {column:?}; columns: {known}")]
    UnknownColumn {
        table: String,
        column: String,
        known: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("scale factor {sf} out of range: must be > 0 and at most {max}")]
    ScaleFactor { sf: f64, max: f64 },
    #[error("the device operator {operator} failed: {message}")]
    Operator { operator: String, message: String },
    #[error("{what} needs {needed} bytes, the limit is {limit}")]
    TooLarge {
        what: String,
        needed: u64,
        limit: u64,
    },
    #[error("{what}: {source}")]
    Device {
        what: String,
        #[source]
        source: CallError,
    },
    #[error("opening the device: {0}")]
    Open(#[from] OpenError),
    #[error("{tool}: {message}; run scripts/setup.sh")]
    Tool { tool: String, message: String },
    #[error("emitting a device program: {0}")]
    Emit(#[from] csx_ebpf::emit::EmitError),
}

impl DataError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> DataError {
        DataError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn device(what: impl Into<String>, source: CallError) -> DataError {
        DataError::Device {
            what: what.into(),
            source,
        }
    }
}
