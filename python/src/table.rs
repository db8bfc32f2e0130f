//! Columnar tables read and written by csx-data (`csx.arrow`): Python never parses a
//! column file itself.
//!
//! Reading goes through csx-data's reader whatever the format version: a raw column's
//! length, an encoded column's header, directory, block headers and checksums, a
//! dictionary's entries and every dict code are checked there, and a failure is the
//! reader's error (naming the table, column, block and part for a bad block). The values
//! come back as one buffer per column of fixed-width little-endian values, which Arrow
//! views without a copy.
//!
//! Writing goes through csx-data's `TableWriter` (the current version, encoded, unless
//! raw files are asked for) into a
//! private local directory, whose files are then put on the device, the schema last.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use csx_data::columnar::{check_codes, SCHEMA_FILE};
use csx_data::{ColumnSchema, ColumnType, LocalTable, Schema, Values};
use csx_host::Device;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffer::Buffer;
use crate::device::PyDevice;
use crate::errors::{Error, Kind, Result};

/// A table's schema as Python sees it: (table name, version, rows, [(column, type,
/// scale, dictionary entries)]).
type SchemaInfo = (String, u32, u64, Vec<(String, &'static str, u32, u64)>);

/// One column read: (name, values, the dictionary of a dict column).
type ColumnRead = (String, Py<Buffer>, Option<Vec<String>>);

fn schema_info(schema: &Schema) -> SchemaInfo {
    let columns = schema
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.ty.name(), c.scale, c.entries))
        .collect();
    (schema.table.clone(), schema.version, schema.rows, columns)
}

fn buffer_of(values: Values) -> Buffer {
    match values {
        Values::I32(v) => Buffer::from_i32(v),
        Values::I64(v) => Buffer::from_i64(v),
        Values::U32(v) => Buffer::from_u32(v),
    }
}

/// The columns asked for (all when `None`), each checked to be in the schema.
fn names_of(schema: &Schema, columns: Option<Vec<String>>) -> Result<Vec<String>> {
    let names = columns.unwrap_or_else(|| schema.columns.iter().map(|c| c.name.clone()).collect());
    for n in &names {
        schema.column(n)?;
    }
    Ok(names)
}

fn into_py(
    py: Python<'_>,
    read: Vec<(String, Values, Option<Vec<String>>)>,
) -> PyResult<Vec<ColumnRead>> {
    read.into_iter()
        .map(|(n, v, d)| Ok((n, Py::new(py, buffer_of(v))?, d)))
        .collect()
}

/// Reads `columns` (all when None) of the table at `table` on `device` with csx-data's
/// reader: (schema, [(column, values, dictionary)], bytes the device sent, modelled ns).
#[pyfunction]
#[pyo3(signature = (device, table, columns=None))]
pub fn table_read(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    table: String,
    columns: Option<Vec<String>>,
) -> PyResult<(SchemaInfo, Vec<ColumnRead>, u64, u64)> {
    let dev = device.get().device()?;
    type Read = (Schema, Vec<(String, Values, Option<Vec<String>>)>, u64, u64);
    let (schema, read, bytes, ns) = py.detach(move || -> Result<Read> {
        let mut session = csx_host::Session::shared(dev);
        let schema = csx_data::scan::device_schema(&mut session, &table)?;
        let names = names_of(&schema, columns)?;
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let c = schema.column(&n)?;
            let values = csx_data::stage::read_to_host(&mut session, &table, &schema, &n)?;
            let dict = if c.ty == ColumnType::Dict {
                let d = csx_data::scan::device_dictionary(&mut session, &table, &schema, &n)?;
                if let Values::U32(codes) = &values {
                    let path = format!("{}/{}", table.trim_end_matches('/'), c.file_name());
                    check_codes(codes, d.len() as u64, &path, 0)?;
                }
                Some(d)
            } else {
                None
            };
            out.push((n, values, dict));
        }
        let m = session.meter;
        Ok((schema, out, m.bytes_to_host, m.modelled_ns))
    })?;
    Ok((schema_info(&schema), into_py(py, read)?, bytes, ns))
}

/// Reads `columns` (all when None) of the local table directory `dir` with csx-data's
/// reader: (schema, [(column, values, dictionary)]).
#[pyfunction]
#[pyo3(signature = (dir, columns=None))]
pub fn local_table_read(
    py: Python<'_>,
    dir: PathBuf,
    columns: Option<Vec<String>>,
) -> PyResult<(SchemaInfo, Vec<ColumnRead>)> {
    type Read = (Schema, Vec<(String, Values, Option<Vec<String>>)>);
    let (schema, read) = py.detach(move || -> Result<Read> {
        let t = LocalTable::open(&dir)?;
        let names = names_of(&t.schema, columns)?;
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let values = t.read(&n)?;
            let dict = if t.schema.column(&n)?.ty == ColumnType::Dict {
                Some(t.dictionary(&n)?)
            } else {
                None
            };
            out.push((n, values, dict));
        }
        Ok((t.schema, out))
    })?;
    Ok((schema_info(&schema), into_py(py, read)?))
}

fn column_type(name: &str) -> Result<ColumnType> {
    Ok(match name {
        "int32" => ColumnType::Int32,
        "int64" => ColumnType::Int64,
        "uint32" => ColumnType::Uint32,
        "date" => ColumnType::Date,
        "decimal" => ColumnType::Decimal,
        "dict" => ColumnType::Dict,
        other => {
            return Err(Error::value(format!(
                "column type {other:?} is not one of int32 int64 uint32 date decimal dict"
            )))
        }
    })
}

/// A private local directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "csx-put-table-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // `create_dir`, not `create_dir_all`: the directory must be new (ours alone).
        std::fs::create_dir(&dir).map_err(|e| {
            Error::new(
                Kind::Io,
                format!("cannot make the scratch directory {}: {e}", dir.display()),
            )
        })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One column to write: (name, type, decimal scale, little-endian values).
type ColumnWrite = (String, String, u32, Vec<u8>);

/// Writes the table locally with csx-data's `TableWriter` (the current version),
/// after checking every column and dictionary.
fn write_local(
    dir: &Path,
    table: &str,
    columns: &[ColumnWrite],
    dictionaries: &[(String, Vec<String>)],
    raw: bool,
) -> Result<Schema> {
    let (schema_cols, rows) = column_schemas(table, columns)?;
    check_dictionaries(columns, dictionaries)?;
    // The names (and the rest of the schema) are checked before anything is written.
    Schema::new(table, rows, schema_cols.clone())
        .validate()
        .map_err(|m| Error::value(format!("table {table}: {m}")))?;
    let mut w = if raw {
        csx_data::columnar::TableWriter::create_raw(dir, table, schema_cols)?
    } else {
        csx_data::columnar::TableWriter::create(dir, table, schema_cols)?
    };
    for (i, (_, ty, _, data)) in columns.iter().enumerate() {
        match Values::from_le_bytes(column_type(ty)?, data) {
            Values::I32(v) => v.into_iter().try_for_each(|x| w.i32(i, x))?,
            Values::I64(v) => v.into_iter().try_for_each(|x| w.i64(i, x))?,
            Values::U32(v) => v.into_iter().try_for_each(|x| w.u32(i, x))?,
        }
    }
    let dicts: Vec<(&str, &[String])> = dictionaries
        .iter()
        .map(|(n, e)| (n.as_str(), e.as_slice()))
        .collect();
    Ok(w.finish(&dicts)?)
}

/// The columns' schemas and the rows they all hold (whole values, one row count).
fn column_schemas(table: &str, columns: &[ColumnWrite]) -> Result<(Vec<ColumnSchema>, u64)> {
    if columns.is_empty() {
        return Err(Error::value(format!("table {table} has no columns")));
    }
    let mut schema_cols = Vec::with_capacity(columns.len());
    let mut rows = None;
    for (name, ty, scale, data) in columns {
        let ty = column_type(ty)?;
        let w = ty.width() as usize;
        if data.len() % w != 0 {
            return Err(Error::value(format!(
                "column {name}: {} bytes is not a whole number of {w}-byte values",
                data.len()
            )));
        }
        let n = data.len() / w;
        if *rows.get_or_insert(n) != n {
            return Err(Error::value(format!(
                "column {name} has {n} rows, the first column has {}",
                rows.unwrap_or(0)
            )));
        }
        let mut c = ColumnSchema::new(name, ty);
        if ty == ColumnType::Decimal {
            c.scale = *scale;
        }
        schema_cols.push(c);
    }
    Ok((schema_cols, rows.unwrap_or(0) as u64))
}

/// Every dictionary belongs to a dict column, holds no newline and covers its codes;
/// every dict column has one.
fn check_dictionaries(
    columns: &[ColumnWrite],
    dictionaries: &[(String, Vec<String>)],
) -> Result<()> {
    for (name, entries) in dictionaries {
        let Some((_, _, _, data)) = columns.iter().find(|c| &c.0 == name && c.1 == "dict") else {
            return Err(Error::value(format!(
                "a dictionary is given for {name}, which is not a dict column"
            )));
        };
        if let Some(e) = entries.iter().find(|e| e.contains('\n')) {
            return Err(Error::value(format!(
                "column {name}: dictionary entry {e:?} holds a newline, which a dictionary cannot store"
            )));
        }
        let codes = Values::from_le_bytes(ColumnType::Dict, data);
        if let Values::U32(codes) = &codes {
            check_codes(codes, entries.len() as u64, &format!("column {name}"), 0)?;
        }
    }
    for (name, ty, _, _) in columns {
        if ty == "dict" && !dictionaries.iter().any(|d| &d.0 == name) {
            return Err(Error::value(format!(
                "column {name} is dict: give its dictionary"
            )));
        }
    }
    Ok(())
}

/// Puts the files of the local table `local` at `dev_dir`, the schema last, and
/// flushes: a reader never sees a schema whose columns are not all there.
fn put_files(dev: &Device, local: &Path, dev_dir: &str, schema: &Schema) -> Result<()> {
    let dev_dir = dev_dir.trim_end_matches('/');
    match dev.mkdir(dev_dir) {
        Ok(()) | Err(csx_host::CallError::FileExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut files = Vec::new();
    for c in &schema.columns {
        files.push(c.file_name());
        if c.ty == ColumnType::Dict {
            files.push(c.dict_file_name());
        }
    }
    files.push(SCHEMA_FILE.to_string());
    for f in files {
        let path = format!("{dev_dir}/{f}");
        dev.put_file_unflushed(&local.join(&f), &path, &mut |_| {})
            .map_err(|e| Error::new(Kind::Device, format!("putting {path}: {e}")))?;
    }
    dev.flush()?;
    Ok(())
}

/// Writes a table at `table` on `device` with csx-data's writer (the current format
/// version): `columns` [(name, type, decimal scale, little-endian values)],
/// `dictionaries` [(dict column, sorted entries)]; `raw` writes version 1 (raw column
/// files, for readers of a column file's bytes). Returns the schema written.
#[pyfunction]
#[pyo3(signature = (device, table, name, columns, dictionaries, raw=false))]
pub fn table_write<'py>(
    py: Python<'py>,
    device: &Bound<'py, PyDevice>,
    table: String,
    name: String,
    columns: Vec<(String, String, u32, Bound<'py, PyBytes>)>,
    dictionaries: Vec<(String, Vec<String>)>,
    raw: bool,
) -> PyResult<SchemaInfo> {
    let dev = device.get().device()?;
    let columns: Vec<ColumnWrite> = columns
        .into_iter()
        .map(|(n, t, s, b)| (n, t, s, b.as_bytes().to_vec()))
        .collect();
    let schema = py.detach(move || -> Result<Schema> {
        let scratch = Scratch::new()?;
        let local = scratch.0.join("t");
        let schema = write_local(&local, &name, &columns, &dictionaries, raw)?;
        put_files(&dev, &local, &table, &schema)?;
        Ok(schema)
    })?;
    Ok(schema_info(&schema))
}
