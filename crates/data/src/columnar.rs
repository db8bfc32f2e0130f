//! The columnar format (`docs/design/columnar.md`): a table is a directory holding
//! `schema.json`, one file per column (`NAME.col`) and, for a dictionary-encoded string
//! column, its dictionary beside it (`NAME.dict`). A column file of version 1 holds the
//! fixed-width little-endian values; of version 2 (what the writers write), encoded
//! blocks with zone maps and checksums ([`crate::encoding`]). Both read.
//!
//! The same layout lives on the local disk (written by the generators, read by the host
//! references) and on the device (`csx put -r`), where the scans and queries read it.
//!
//! Invariant: a reader never returns a value it has not validated: a column file of
//! the wrong length, a dictionary with the wrong number of entries or a dictionary index
//! out of range is a [`DataError`] naming the file (and the row), never a wrong answer.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::DataError;

/// The `format` field of every schema.
pub const FORMAT_NAME: &str = "csx-columnar";
/// The layout version this crate writes: encoded column files ([`crate::encoding`]).
pub const FORMAT_VERSION: u32 = 2;
/// The first layout version, raw fixed-width column files: still read (and written by
/// [`TableWriter::create_raw`]).
pub const FORMAT_VERSION_RAW: u32 = 1;
/// The schema's file name in a table directory.
pub const SCHEMA_FILE: &str = "schema.json";
/// Longest column or table name: names become file names on the device.
pub const NAME_SIZE_MAX: usize = 64;
/// Most columns in one table (TPC-H's widest table has 16).
pub const COLUMNS_MAX: usize = 256;
/// Most rows in one table: 2^32 - 1, so a row index fits the u32 of the device
/// operators and a column of 8-byte values stays under 32 GiB.
pub const ROWS_MAX: u64 = u32::MAX as u64;
/// Most entries in one dictionary (codes are u32; a bigger dictionary is not a
/// dictionary encoding any more).
pub const DICT_ENTRIES_MAX: u64 = 1 << 24;
/// Largest schema file accepted.
pub const SCHEMA_SIZE_MAX: u64 = 1 << 20;
/// Largest dictionary file accepted.
pub const DICT_SIZE_MAX: u64 = 1 << 30;

/// The type of a column: how its fixed-width values are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 32-bit integer.
    Uint32,
    /// A calendar date: signed 32-bit days since 1970-01-01 (Arrow's date32).
    Date,
    /// A decimal: signed 64-bit integer scaled by 10^scale (2 for money).
    Decimal,
    /// A dictionary-encoded string: unsigned 32-bit index into `NAME.dict`, whose
    /// entries are sorted, so code order is string order.
    Dict,
}

impl ColumnType {
    /// Bytes per value.
    pub fn width(self) -> u64 {
        match self {
            ColumnType::Int32 | ColumnType::Uint32 | ColumnType::Date | ColumnType::Dict => 4,
            ColumnType::Int64 | ColumnType::Decimal => 8,
        }
    }

    /// Whether values compare as signed integers.
    pub fn signed(self) -> bool {
        !matches!(self, ColumnType::Uint32 | ColumnType::Dict)
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Int32 => "int32",
            ColumnType::Int64 => "int64",
            ColumnType::Uint32 => "uint32",
            ColumnType::Date => "date",
            ColumnType::Decimal => "decimal",
            ColumnType::Dict => "dict",
        }
    }
}

/// One column of a schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnSchema {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    /// Decimal places of a decimal column (0 otherwise).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub scale: u32,
    /// Entries of a dict column's dictionary (0 otherwise).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub entries: u64,
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

impl ColumnSchema {
    pub fn new(name: &str, ty: ColumnType) -> ColumnSchema {
        ColumnSchema {
            name: name.to_string(),
            ty,
            scale: 0,
            entries: 0,
        }
    }

    pub fn decimal(name: &str, scale: u32) -> ColumnSchema {
        ColumnSchema {
            scale,
            ..ColumnSchema::new(name, ColumnType::Decimal)
        }
    }

    /// The column file's name in the table directory.
    pub fn file_name(&self) -> String {
        format!("{}.col", self.name)
    }

    /// The dictionary file's name (dict columns).
    pub fn dict_file_name(&self) -> String {
        format!("{}.dict", self.name)
    }
}

/// A table's `schema.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    pub format: String,
    pub version: u32,
    pub table: String,
    pub rows: u64,
    pub columns: Vec<ColumnSchema>,
}

fn check_name(kind: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_SIZE_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{kind} name {name:?} must be 1 to {NAME_SIZE_MAX} characters of a-z, 0-9 and _"
        ))
    }
}

impl Schema {
    pub fn new(table: &str, rows: u64, columns: Vec<ColumnSchema>) -> Schema {
        Schema {
            format: FORMAT_NAME.to_string(),
            version: FORMAT_VERSION,
            table: table.to_string(),
            rows,
            columns,
        }
    }

    /// Parses and validates a schema; `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &str) -> Result<Schema, DataError> {
        let bad = |message: String| DataError::Schema {
            path: path.to_string(),
            message,
        };
        let schema: Schema =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not a schema: {e}")))?;
        schema.validate().map_err(bad)?;
        Ok(schema)
    }

    /// Checks the fields against the format's rules and limits.
    pub fn validate(&self) -> Result<(), String> {
        if self.format != FORMAT_NAME {
            return Err(format!(
                "format is {:?}, expected {FORMAT_NAME:?}",
                self.format
            ));
        }
        if self.version != FORMAT_VERSION && self.version != FORMAT_VERSION_RAW {
            return Err(format!(
                "version {} is not supported, this build reads versions {FORMAT_VERSION_RAW} and {FORMAT_VERSION}",
                self.version
            ));
        }
        check_name("table", &self.table)?;
        if self.rows > ROWS_MAX {
            return Err(format!("{} rows, the limit is {ROWS_MAX}", self.rows));
        }
        if self.columns.is_empty() || self.columns.len() > COLUMNS_MAX {
            return Err(format!(
                "{} columns, must be 1 to {COLUMNS_MAX}",
                self.columns.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.columns {
            check_name("column", &c.name)?;
            if !seen.insert(c.name.as_str()) {
                return Err(format!("column {:?} appears twice", c.name));
            }
            if c.ty == ColumnType::Decimal && c.scale > 18 {
                return Err(format!(
                    "column {}: scale {} out of range, at most 18",
                    c.name, c.scale
                ));
            }
            if c.ty != ColumnType::Decimal && c.scale != 0 {
                return Err(format!("column {}: only decimals have a scale", c.name));
            }
            if c.ty == ColumnType::Dict && c.entries > DICT_ENTRIES_MAX {
                return Err(format!(
                    "column {}: {} dictionary entries, the limit is {DICT_ENTRIES_MAX}",
                    c.name, c.entries
                ));
            }
            if c.ty != ColumnType::Dict && c.entries != 0 {
                return Err(format!("column {}: only dict columns have entries", c.name));
            }
        }
        Ok(())
    }

    /// Whether the table's column files are encoded (version 2) rather than raw.
    pub fn encoded(&self) -> bool {
        self.version >= FORMAT_VERSION
    }

    pub fn column(&self, name: &str) -> Result<&ColumnSchema, DataError> {
        self.columns
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| DataError::UnknownColumn {
                table: self.table.clone(),
                column: name.to_string(),
                known: self
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a schema serializes");
        s.push('\n');
        s
    }
}

// ---------------------------------------------------------------------------------------
// Values.

/// A column's values in memory, typed by width and signedness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    U32(Vec<u32>),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::I32(v) => v.len(),
            Values::I64(v) => v.len(),
            Values::U32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` widened to i64.
    pub fn get_i64(&self, i: usize) -> i64 {
        match self {
            Values::I32(v) => i64::from(v[i]),
            Values::I64(v) => v[i],
            Values::U32(v) => i64::from(v[i]),
        }
    }

    /// Decodes little-endian bytes of a column of type `ty`.
    pub fn from_le_bytes(ty: ColumnType, bytes: &[u8]) -> Values {
        match ty {
            ColumnType::Int32 | ColumnType::Date => Values::I32(
                bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            ),
            ColumnType::Uint32 | ColumnType::Dict => Values::U32(
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            ),
            ColumnType::Int64 | ColumnType::Decimal => Values::I64(
                bytes
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            ),
        }
    }

    /// Appends `other` (of the same kind).
    pub fn extend(&mut self, other: Values) {
        match (self, other) {
            (Values::I32(a), Values::I32(b)) => a.extend(b),
            (Values::I64(a), Values::I64(b)) => a.extend(b),
            (Values::U32(a), Values::U32(b)) => a.extend(b),
            (a, b) => panic!("extending {a:?} by values of another kind {b:?}"),
        }
    }

    /// An empty vector of the kind of `ty`.
    pub fn empty(ty: ColumnType) -> Values {
        match ty {
            ColumnType::Int32 | ColumnType::Date => Values::I32(Vec::new()),
            ColumnType::Uint32 | ColumnType::Dict => Values::U32(Vec::new()),
            ColumnType::Int64 | ColumnType::Decimal => Values::I64(Vec::new()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Dictionaries.

/// Encodes a dictionary file: entries joined by `\n`, with a final `\n`.
pub fn encode_dictionary(entries: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        debug_assert!(!e.contains('\n'), "dictionary entries hold no newline");
        out.extend_from_slice(e.as_bytes());
        out.push(b'\n');
    }
    out
}

/// Decodes and checks a dictionary file against the schema's entry count.
pub fn decode_dictionary(bytes: &[u8], entries: u64, path: &str) -> Result<Vec<String>, DataError> {
    let bad = |message: String| DataError::Dictionary {
        path: path.to_string(),
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8: {e}")))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(bad("the last entry has no final newline".to_string()));
    }
    let list: Vec<String> = text.lines().map(str::to_string).collect();
    if list.len() as u64 != entries {
        return Err(bad(format!(
            "{} entries, the schema says {entries}",
            list.len()
        )));
    }
    Ok(list)
}

/// Checks every code of a dict column against the dictionary size; the first bad one
/// is an error naming the file and its row (`first_row` is the row of `codes[0]`).
pub fn check_codes(
    codes: &[u32],
    entries: u64,
    path: &str,
    first_row: u64,
) -> Result<(), DataError> {
    match codes.iter().position(|&c| u64::from(c) >= entries) {
        None => Ok(()),
        Some(i) => Err(DataError::DictionaryIndex {
            path: path.to_string(),
            row: first_row + i as u64,
            code: codes[i],
            entries,
        }),
    }
}

/// A sorted set of strings and each one's code, for writing a dict column.
#[derive(Clone, Debug)]
pub struct Domain {
    entries: Vec<String>,
    codes: HashMap<String, u32>,
}

impl Domain {
    /// The domain of `values` (sorted, duplicates dropped).
    pub fn new<I: IntoIterator<Item = String>>(values: I) -> Domain {
        let mut entries: Vec<String> = values.into_iter().collect();
        entries.sort();
        entries.dedup();
        let codes = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.clone(), i as u32))
            .collect();
        Domain { entries, codes }
    }

    pub fn code(&self, value: &str) -> u32 {
        *self
            .codes
            .get(value)
            .unwrap_or_else(|| panic!("{value:?} is not in the domain"))
    }

    pub fn code_opt(&self, value: &str) -> Option<u32> {
        self.codes.get(value).copied()
    }

    pub fn entries(&self) -> &[String] {
        &self.entries
    }
}

// ---------------------------------------------------------------------------------------
// Writing.

/// Where one column's values go.
#[derive(Debug)]
enum ColumnSink {
    Raw(BufWriter<File>),
    Encoded(crate::encoding::ColumnEncoder),
}

/// Writes one table: each column streams to its file, encoded in blocks (version 2,
/// [`TableWriter::create`]) or raw (version 1, [`TableWriter::create_raw`]).
#[derive(Debug)]
pub struct TableWriter {
    dir: PathBuf,
    schema: Schema,
    files: Vec<ColumnSink>,
    rows: Vec<u64>,
}

impl TableWriter {
    /// Creates `dir` (and parents) and the encoded column files of `columns`; dict
    /// columns' dictionaries are written at [`TableWriter::finish`] from `dictionaries`.
    pub fn create(
        dir: &Path,
        table: &str,
        columns: Vec<ColumnSchema>,
    ) -> Result<TableWriter, DataError> {
        TableWriter::create_version(dir, table, columns, FORMAT_VERSION)
    }

    /// [`TableWriter::create`] writing raw column files (version 1).
    pub fn create_raw(
        dir: &Path,
        table: &str,
        columns: Vec<ColumnSchema>,
    ) -> Result<TableWriter, DataError> {
        TableWriter::create_version(dir, table, columns, FORMAT_VERSION_RAW)
    }

    fn create_version(
        dir: &Path,
        table: &str,
        columns: Vec<ColumnSchema>,
        version: u32,
    ) -> Result<TableWriter, DataError> {
        std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
        let mut files = Vec::new();
        for c in &columns {
            let path = dir.join(c.file_name());
            files.push(if version == FORMAT_VERSION_RAW {
                let f = File::create(&path).map_err(|e| DataError::io(&path, e))?;
                ColumnSink::Raw(BufWriter::with_capacity(1 << 16, f))
            } else {
                ColumnSink::Encoded(crate::encoding::ColumnEncoder::create(
                    &path,
                    c.ty,
                    crate::encoding::BLOCK_ROWS,
                )?)
            });
        }
        let n = columns.len();
        let mut schema = Schema::new(table, 0, columns);
        schema.version = version;
        Ok(TableWriter {
            dir: dir.to_path_buf(),
            schema,
            files,
            rows: vec![0; n],
        })
    }

    fn put(&mut self, col: usize, v: i64) -> Result<(), DataError> {
        self.rows[col] += 1;
        let width = self.schema.columns[col].ty.width() as usize;
        match &mut self.files[col] {
            ColumnSink::Raw(f) => f
                .write_all(&v.to_le_bytes()[..width])
                .map_err(|e| DataError::io(self.dir.join(self.schema.columns[col].file_name()), e)),
            ColumnSink::Encoded(e) => e.push(v),
        }
    }

    pub fn i32(&mut self, col: usize, v: i32) -> Result<(), DataError> {
        self.put(col, i64::from(v))
    }

    pub fn i64(&mut self, col: usize, v: i64) -> Result<(), DataError> {
        self.put(col, v)
    }

    pub fn u32(&mut self, col: usize, v: u32) -> Result<(), DataError> {
        self.put(col, i64::from(v))
    }

    /// Flushes the columns, writes the dictionaries (`(column, entries)`) and the
    /// schema. Every column must have the same number of rows.
    pub fn finish(mut self, dictionaries: &[(&str, &[String])]) -> Result<Schema, DataError> {
        let rows = self.rows[0];
        for (i, &r) in self.rows.iter().enumerate() {
            assert_eq!(
                r, rows,
                "column {} has {r} rows, not {rows}",
                self.schema.columns[i].name
            );
        }
        for (i, f) in std::mem::take(&mut self.files).into_iter().enumerate() {
            match f {
                ColumnSink::Raw(mut f) => f.flush().map_err(|e| {
                    DataError::io(self.dir.join(self.schema.columns[i].file_name()), e)
                })?,
                ColumnSink::Encoded(e) => {
                    e.finish()?;
                }
            }
        }
        for &(name, entries) in dictionaries {
            let col = self
                .schema
                .columns
                .iter_mut()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("no column {name}"));
            assert_eq!(col.ty, ColumnType::Dict, "{name} is not a dict column");
            col.entries = entries.len() as u64;
            let path = self.dir.join(col.dict_file_name());
            std::fs::write(&path, encode_dictionary(entries))
                .map_err(|e| DataError::io(&path, e))?;
        }
        self.schema.rows = rows;
        if let Err(message) = self.schema.validate() {
            return Err(DataError::Schema {
                path: self.dir.join(SCHEMA_FILE).display().to_string(),
                message,
            });
        }
        let path = self.dir.join(SCHEMA_FILE);
        std::fs::write(&path, self.schema.to_json()).map_err(|e| DataError::io(&path, e))?;
        Ok(self.schema)
    }
}

// ---------------------------------------------------------------------------------------
// Reading a local table.

/// A table directory on the local disk.
#[derive(Clone, Debug)]
pub struct LocalTable {
    pub dir: PathBuf,
    pub schema: Schema,
}

impl LocalTable {
    /// Reads and validates `dir/schema.json`, and checks every column file's length.
    pub fn open(dir: &Path) -> Result<LocalTable, DataError> {
        let path = dir.join(SCHEMA_FILE);
        let len = std::fs::metadata(&path)
            .map_err(|e| DataError::io(&path, e))?
            .len();
        if len > SCHEMA_SIZE_MAX {
            return Err(DataError::TooLarge {
                what: path.display().to_string(),
                needed: len,
                limit: SCHEMA_SIZE_MAX,
            });
        }
        let bytes = std::fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        let schema = Schema::parse(&bytes, &path.display().to_string())?;
        for c in &schema.columns {
            let p = dir.join(c.file_name());
            let found = std::fs::metadata(&p)
                .map_err(|e| DataError::io(&p, e))?
                .len();
            if schema.version == FORMAT_VERSION {
                let mut head = [0u8; 64];
                let mut f = File::open(&p).map_err(|e| DataError::io(&p, e))?;
                std::io::Read::read_exact(&mut f, &mut head).map_err(|e| DataError::io(&p, e))?;
                crate::encoding::FileHeader::parse(&head, c.ty, schema.rows, found).map_err(
                    |message| DataError::CorruptColumn {
                        table: schema.table.clone(),
                        column: c.name.clone(),
                        path: p.display().to_string(),
                        message,
                    },
                )?;
                continue;
            }
            let expected = schema.rows * c.ty.width();
            if found != expected {
                return Err(DataError::ColumnLength {
                    path: p.display().to_string(),
                    found,
                    expected,
                    rows: schema.rows,
                    width: c.ty.width(),
                });
            }
        }
        Ok(LocalTable {
            dir: dir.to_path_buf(),
            schema,
        })
    }

    /// A column's values; dict codes are checked against the dictionary's size.
    pub fn read(&self, name: &str) -> Result<Values, DataError> {
        let c = self.schema.column(name)?;
        let path = self.dir.join(c.file_name());
        if self.schema.version == FORMAT_VERSION {
            let (col, bytes) = crate::encoding::EncodedColumn::open_local(
                &self.schema.table,
                name,
                &path,
                c.ty,
                self.schema.rows,
            )?;
            let values = col.decode_all(&bytes)?;
            if let (ColumnType::Dict, Values::U32(codes)) = (c.ty, &values) {
                check_codes(codes, c.entries, &path.display().to_string(), 0)?;
            }
            return Ok(values);
        }
        let bytes = std::fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        let expected = self.schema.rows * c.ty.width();
        if bytes.len() as u64 != expected {
            return Err(DataError::ColumnLength {
                path: path.display().to_string(),
                found: bytes.len() as u64,
                expected,
                rows: self.schema.rows,
                width: c.ty.width(),
            });
        }
        let values = Values::from_le_bytes(c.ty, &bytes);
        if let (ColumnType::Dict, Values::U32(codes)) = (c.ty, &values) {
            check_codes(codes, c.entries, &path.display().to_string(), 0)?;
        }
        Ok(values)
    }

    /// A dict column's dictionary.
    pub fn dictionary(&self, name: &str) -> Result<Vec<String>, DataError> {
        let c = self.schema.column(name)?;
        if c.ty != ColumnType::Dict {
            return Err(DataError::Invalid(format!(
                "column {name} of {} is {}, not dict",
                self.schema.table,
                c.ty.name()
            )));
        }
        let path = self.dir.join(c.dict_file_name());
        let len = std::fs::metadata(&path)
            .map_err(|e| DataError::io(&path, e))?
            .len();
        if len > DICT_SIZE_MAX {
            return Err(DataError::TooLarge {
                what: path.display().to_string(),
                needed: len,
                limit: DICT_SIZE_MAX,
            });
        }
        let bytes = std::fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        decode_dictionary(&bytes, c.entries, &path.display().to_string())
    }
}

/// Writes the table at `src` again at `dst` in raw column files (version 1): what a
/// reader of the first version only (the Parquet converter) reads.
pub fn copy_as_raw(src: &Path, dst: &Path) -> Result<Schema, DataError> {
    let t = LocalTable::open(src)?;
    let mut w = TableWriter::create_raw(dst, &t.schema.table, t.schema.columns.clone())?;
    let mut dicts = Vec::new();
    for (i, c) in t.schema.columns.iter().enumerate() {
        let values = t.read(&c.name)?;
        for r in 0..values.len() {
            w.put(i, values.get_i64(r))?;
        }
        if c.ty == ColumnType::Dict {
            dicts.push((c.name.clone(), t.dictionary(&c.name)?));
        }
    }
    let refs: Vec<(&str, &[String])> = dicts
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    w.finish(&refs)
}

/// Rewrites the table at `dir` with its rows in the order of column `by` (a stable
/// sort): a clustered table, whose zone maps on `by` (and on columns that follow it)
/// exclude whole blocks of a range predicate. Same version, same rows, same answers to
/// any query that does not depend on row order. The files are replaced one by one,
/// `schema.json` last.
pub fn cluster_table(dir: &Path, by: &str) -> Result<Schema, DataError> {
    let t = LocalTable::open(dir)?;
    let key = t.read(by)?;
    let mut order: Vec<usize> = (0..key.len()).collect();
    order.sort_by_key(|&i| key.get_i64(i));
    drop(key);
    let tmp = dir.with_extension("clustering");
    let mut w = TableWriter::create_version(
        &tmp,
        &t.schema.table,
        t.schema.columns.clone(),
        t.schema.version,
    )?;
    let mut dicts = Vec::new();
    for (i, c) in t.schema.columns.iter().enumerate() {
        let values = t.read(&c.name)?;
        for &r in &order {
            w.put(i, values.get_i64(r))?;
        }
        if c.ty == ColumnType::Dict {
            dicts.push((c.name.clone(), t.dictionary(&c.name)?));
        }
    }
    let refs: Vec<(&str, &[String])> = dicts
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let schema = w.finish(&refs)?;
    replace_table(&tmp, dir, &schema)?;
    Ok(schema)
}

/// Moves the table written at `tmp` over the one at `dir`, file by file, `schema.json`
/// last, and removes `tmp`.
fn replace_table(tmp: &Path, dir: &Path, schema: &Schema) -> Result<(), DataError> {
    let mut names: Vec<String> = schema.columns.iter().map(ColumnSchema::file_name).collect();
    names.extend(
        (schema.columns.iter())
            .filter(|c| c.ty == ColumnType::Dict)
            .map(ColumnSchema::dict_file_name),
    );
    names.push(SCHEMA_FILE.to_string());
    for n in names {
        std::fs::rename(tmp.join(&n), dir.join(&n)).map_err(|e| DataError::io(dir.join(&n), e))?;
    }
    std::fs::remove_dir(tmp).map_err(|e| DataError::io(tmp, e))
}

/// Rewrites every table of the dataset at `dir` in raw column files (version 1), in
/// place: for readers that know only the first version (Python's `csx.arrow` and
/// `csx.dask` read column files themselves).
pub fn dataset_as_raw(dir: &Path) -> Result<(), DataError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| DataError::io(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| DataError::io(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let table = e.path();
        if table.join(SCHEMA_FILE).is_file() {
            let tmp = table.with_extension("raw");
            let schema = copy_as_raw(&table, &tmp)?;
            replace_table(&tmp, &table, &schema)?;
        }
    }
    Ok(())
}

/// Writes one encoded column file of `values` (of a column of type `ty`) at `path`.
pub fn write_encoded_column(path: &Path, ty: ColumnType, values: &Values) -> Result<(), DataError> {
    let mut e = crate::encoding::ColumnEncoder::create(path, ty, crate::encoding::BLOCK_ROWS)?;
    for r in 0..values.len() {
        e.push(values.get_i64(r))?;
    }
    e.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample table in raw column files (version 1).
    fn sample(dir: &Path) -> Schema {
        let mut w = TableWriter::create_raw(
            dir,
            "t",
            vec![
                ColumnSchema::new("a", ColumnType::Int32),
                ColumnSchema::decimal("p", 2),
                ColumnSchema::new("s", ColumnType::Dict),
            ],
        )
        .unwrap();
        let dom = Domain::new(["b".to_string(), "a".to_string(), "c".to_string()]);
        for i in 0..10 {
            w.i32(0, i - 3).unwrap();
            w.i64(1, i64::from(i) * 101).unwrap();
            w.u32(2, dom.code(["a", "b", "c"][i as usize % 3])).unwrap();
        }
        w.finish(&[("s", dom.entries())]).unwrap()
    }

    #[test]
    fn a_table_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let schema = sample(tmp.path());
        assert_eq!(schema.rows, 10);
        let t = LocalTable::open(tmp.path()).unwrap();
        assert_eq!(t.schema, schema);
        assert_eq!(t.read("a").unwrap().get_i64(0), -3);
        assert_eq!(
            t.read("p").unwrap(),
            Values::I64((0..10).map(|i| i * 101).collect())
        );
        assert_eq!(t.dictionary("s").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(t.read("s").unwrap().get_i64(4), 1);
    }

    #[test]
    fn a_short_column_file_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        sample(tmp.path());
        let p = tmp.path().join("p.col");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = LocalTable::open(tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains("p.col") && e.contains("77 bytes, expected 80"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_dictionary_index_names_file_and_row() {
        let tmp = tempfile::tempdir().unwrap();
        sample(tmp.path());
        let p = tmp.path().join("s.col");
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[7 * 4..8 * 4].copy_from_slice(&9u32.to_le_bytes());
        std::fs::write(&p, bytes).unwrap();
        let t = LocalTable::open(tmp.path()).unwrap();
        let e = t.read("s").unwrap_err().to_string();
        assert!(
            e.contains("s.col") && e.contains("row 7") && e.contains("index 9"),
            "{e}"
        );
    }

    #[test]
    fn a_dictionary_of_the_wrong_size_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        sample(tmp.path());
        std::fs::write(tmp.path().join("s.dict"), "a\nb\n").unwrap();
        let t = LocalTable::open(tmp.path()).unwrap();
        let e = t.dictionary("s").unwrap_err().to_string();
        assert!(
            e.contains("s.dict") && e.contains("2 entries, the schema says 3"),
            "{e}"
        );
    }

    #[test]
    fn bad_schemas_are_refused_with_the_reason() {
        let cases = [
            (
                r#"{"format":"x","version":1,"table":"t","rows":1,"columns":[{"name":"a","type":"int32"}]}"#,
                "format",
            ),
            (
                r#"{"format":"csx-columnar","version":3,"table":"t","rows":1,"columns":[{"name":"a","type":"int32"}]}"#,
                "version 3",
            ),
            (
                r#"{"format":"csx-columnar","version":1,"table":"T","rows":1,"columns":[{"name":"a","type":"int32"}]}"#,
                "table name",
            ),
            (
                r#"{"format":"csx-columnar","version":1,"table":"t","rows":1,"columns":[]}"#,
                "0 columns",
            ),
            (
                r#"{"format":"csx-columnar","version":1,"table":"t","rows":1,"columns":[{"name":"a","type":"float"}]}"#,
                "not a schema",
            ),
            (
                r#"{"format":"csx-columnar","version":1,"table":"t","rows":99999999999,"columns":[{"name":"a","type":"int32"}]}"#,
                "rows, the limit",
            ),
            (
                r#"{"format":"csx-columnar","version":1,"table":"t","rows":1,"columns":[{"name":"a","type":"int32"},{"name":"a","type":"int32"}]}"#,
                "twice",
            ),
        ];
        for (json, want) in cases {
            let e = Schema::parse(json.as_bytes(), "x/schema.json")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(want) && e.contains("x/schema.json"),
                "{json}: {e}"
            );
        }
    }

    /// A table of every type across block boundaries, raw and encoded.
    fn wide(dir: &Path, encoded: bool, rows: i64) -> Schema {
        let cols = vec![
            ColumnSchema::new("a", ColumnType::Int32),
            ColumnSchema::new("b", ColumnType::Int64),
            ColumnSchema::new("c", ColumnType::Uint32),
            ColumnSchema::new("d", ColumnType::Date),
            ColumnSchema::decimal("e", 2),
            ColumnSchema::new("s", ColumnType::Dict),
        ];
        let mut w = match encoded {
            true => TableWriter::create(dir, "w", cols),
            false => TableWriter::create_raw(dir, "w", cols),
        }
        .unwrap();
        let dom = Domain::new(["x".to_string(), "y".to_string()]);
        for i in 0..rows {
            w.i32(0, if i % 3 == 0 { i32::MIN } else { -(i as i32) })
                .unwrap();
            w.i64(
                1,
                if i == rows - 1 {
                    i64::MIN
                } else {
                    i * 1_000_003
                },
            )
            .unwrap();
            w.u32(2, if i < 70_000 { u32::MAX } else { 0 }).unwrap();
            w.i32(3, 9000 + (i % 400) as i32).unwrap();
            w.i64(4, 7).unwrap();
            w.u32(5, (i % 2) as u32).unwrap();
        }
        w.finish(&[("s", dom.entries())]).unwrap()
    }

    #[test]
    fn encoded_tables_read_as_their_raw_twins_across_block_boundaries() {
        let block = crate::encoding::BLOCK_ROWS as i64;
        for rows in [1, block - 1, block, block + 1, 2 * block + 5] {
            let (raw, enc) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            assert_eq!(wide(raw.path(), false, rows).version, FORMAT_VERSION_RAW);
            assert_eq!(wide(enc.path(), true, rows).version, FORMAT_VERSION);
            let (r, e) = (
                LocalTable::open(raw.path()).unwrap(),
                LocalTable::open(enc.path()).unwrap(),
            );
            for c in ["a", "b", "c", "d", "e", "s"] {
                assert_eq!(r.read(c).unwrap(), e.read(c).unwrap(), "{c} of {rows} rows");
            }
            if rows > 1000 {
                let size = |d: &Path| std::fs::metadata(d.join("d.col")).unwrap().len();
                assert!(size(enc.path()) * 2 < size(raw.path()), "dates pack");
            }
        }
    }

    /// A flipped bit in a block's payload, its header or its directory entry (zone map)
    /// is an error naming table, column and block; never other values.
    #[test]
    fn a_flipped_bit_in_an_encoded_column_names_table_column_and_block() {
        use crate::encoding::EncodedColumn;
        let tmp = tempfile::tempdir().unwrap();
        let block = crate::encoding::BLOCK_ROWS as i64;
        wide(tmp.path(), true, 2 * block + 5);
        let p = tmp.path().join("d.col");
        let good = std::fs::read(&p).unwrap();
        let (col, _) =
            EncodedColumn::open_local("w", "d", &p, ColumnType::Date, 2 * block as u64 + 5)
                .unwrap();
        let b1 = col.blocks[1];
        let dir1 = col.header.dir_offset as usize + 64;
        let cases = [
            (b1.at as usize + 64 + 10, "bad data"),
            (b1.at as usize + 5, "bad header"),
            (dir1 + 33, "bad directory entry (block header and zone map)"),
            (dir1 + 41, "bad directory entry (block header and zone map)"),
        ];
        for (at, part) in cases {
            let mut bad = good.clone();
            bad[at] ^= 0x08;
            std::fs::write(&p, &bad).unwrap();
            let t = LocalTable::open(tmp.path()).unwrap();
            let e = t.read("d").unwrap_err();
            assert!(matches!(e, DataError::CorruptBlock { block: 1, .. }), "{e}");
            let e = e.to_string();
            assert!(
                e.contains("table w, column d, block 1") && e.contains(part),
                "flip at {at}: {e}"
            );
        }
        // The file header.
        let mut bad = good.clone();
        bad[20] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        let e = LocalTable::open(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("column d") && e.contains("checksum"), "{e}");
    }

    /// A generated dataset rewritten raw in place reads the same; a table clustered
    /// by a column holds the same rows in that column's order.
    #[test]
    fn datasets_go_raw_and_tables_cluster_without_changing_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("tpch");
        crate::tpch::generate(&data, 0.001, 3, &mut |_, _, _| {}).unwrap();
        let li = data.join("lineitem");
        let before = LocalTable::open(&li).unwrap();
        let cols: Vec<String> = before
            .schema
            .columns
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let values: Vec<Values> = cols.iter().map(|c| before.read(c).unwrap()).collect();
        assert!(before.schema.encoded());
        dataset_as_raw(&data).unwrap();
        let raw = LocalTable::open(&li).unwrap();
        assert_eq!(raw.schema.version, FORMAT_VERSION_RAW);
        for (c, v) in cols.iter().zip(&values) {
            assert_eq!(&raw.read(c).unwrap(), v, "{c}");
        }
        assert_eq!(
            raw.dictionary("l_shipmode").unwrap(),
            before.dictionary("l_shipmode").unwrap()
        );
        cluster_table(&li, "l_shipdate").unwrap();
        let sorted = LocalTable::open(&li).unwrap();
        let dates = sorted.read("l_shipdate").unwrap();
        assert!((1..dates.len()).all(|i| dates.get_i64(i - 1) <= dates.get_i64(i)));
        let rows = |t: &[Values]| {
            let mut r: Vec<Vec<i64>> = (0..t[0].len())
                .map(|i| t.iter().map(|v| v.get_i64(i)).collect())
                .collect();
            r.sort();
            r
        };
        let after: Vec<Values> = cols.iter().map(|c| sorted.read(c).unwrap()).collect();
        assert_eq!(rows(&after), rows(&values));
        assert!(!li.with_extension("clustering").exists());
    }
}
