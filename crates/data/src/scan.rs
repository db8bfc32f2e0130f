//! The pushdown scan: projection and selection of one columnar table, run on the
//! device; only the selected values of the projected columns cross to the host.
//!
//! ```text
//! for each chunk of rows (ScanOptions::chunk_rows):
//!   for each column with predicates:   Memory Copy  column chunk -> device memory
//!                                      Execute      filter_<strategy>: mask (&=) selection
//!   for each projected column:         Memory Copy  (unless staged already)
//!                                      Execute      gather: the selected values, in order
//!                                      Memory Read  those values -> host
//! ```
//!
//! Predicates are conjunctions of comparisons on fixed-width columns
//! ([`crate::predicate`]); several on one column merge into one filter run. The
//! schema is read from the device and every column file's size checked against it
//! first; dict columns come back with their dictionary, every code checked (a bad one
//! is an error naming the device file and row). [`scan_local`] is the host reference.

use std::collections::BTreeMap;
use std::time::Instant;

use csx_host::proto::{EngineKind, MemHandle};
use csx_host::Device;

use crate::columnar::{
    check_codes, decode_dictionary, ColumnType, LocalTable, Schema, Values, DICT_SIZE_MAX,
    SCHEMA_FILE, SCHEMA_SIZE_MAX,
};
use crate::error::DataError;
use crate::ops::{put_u32, put_u64, Meter, Run, Session};
use crate::predicate::{compile, Cmp, Compiled, Predicate, RawRange};

/// How the device computes a selection (Delilah's filter strategies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterStrategy {
    /// A bitmask built one value at a time in eBPF.
    Bitmask,
    /// The same, eight values per loop iteration, unrolled by hand.
    Unrolled,
    /// The device's accelerated filter function (`csx_filter_u32`/`csx_filter_u64`).
    Accel,
}

impl FilterStrategy {
    pub const ALL: [FilterStrategy; 3] = [
        FilterStrategy::Bitmask,
        FilterStrategy::Unrolled,
        FilterStrategy::Accel,
    ];

    /// The device operator.
    pub fn operator(self) -> &'static str {
        match self {
            FilterStrategy::Bitmask => "filter_bitmask",
            FilterStrategy::Unrolled => "filter_unrolled",
            FilterStrategy::Accel => "filter_accel",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FilterStrategy::Bitmask => "bitmask",
            FilterStrategy::Unrolled => "unrolled",
            FilterStrategy::Accel => "accel",
        }
    }

    pub fn parse(s: &str) -> Option<FilterStrategy> {
        FilterStrategy::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// Combine modes and the width field of the filter's cparam1 (`sdk/ssb/ssb.h`).
pub const COMBINE_WRITE: u64 = 0;
pub const COMBINE_AND: u64 = 1;

/// Rows per chunk by default: 4 MiB of a 32-bit column.
pub const CHUNK_ROWS_DEFAULT: u64 = 1 << 20;
/// Largest chunk: a chunk of 8-byte values stays within one window (4 GiB).
pub const CHUNK_ROWS_MAX: u64 = 1 << 28;

/// How a scan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanOptions {
    pub engine: EngineKind,
    pub strategy: FilterStrategy,
    pub chunk_rows: u64,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            engine: EngineKind::Jit,
            strategy: FilterStrategy::Bitmask,
            chunk_rows: CHUNK_ROWS_DEFAULT,
        }
    }
}

/// One projected column of a scan's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanColumn {
    pub name: String,
    pub ty: ColumnType,
    /// Decimal places (decimal columns).
    pub scale: u32,
    pub values: Values,
    /// The dictionary (dict columns): `values` are codes into it.
    pub dictionary: Option<Vec<String>>,
}

/// What a scan returned and what it cost.
#[derive(Clone, Debug)]
pub struct ScanResult {
    pub columns: Vec<ScanColumn>,
    /// Rows selected.
    pub rows: u64,
    /// Rows of the table.
    pub rows_scanned: u64,
    /// Modelled time, bytes to the host, media bytes, fuel, commands.
    pub meter: Meter,
    /// Wall-clock time on this machine.
    pub wall_ns: u64,
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// Reads and validates a table's schema on the device, and checks the size of every
/// column file it names.
pub fn device_schema(session: &mut Session, table_dir: &str) -> Result<Schema, DataError> {
    let dev = session.device();
    let path = join(table_dir, SCHEMA_FILE);
    let st = dev
        .stat(&path)
        .map_err(|e| DataError::device(format!("no table at {table_dir}: {path}"), e))?;
    if st.size_bytes > SCHEMA_SIZE_MAX {
        return Err(DataError::TooLarge {
            what: path,
            needed: st.size_bytes,
            limit: SCHEMA_SIZE_MAX,
        });
    }
    let bytes = session.read_file(&path, st.size_bytes)?;
    let schema = Schema::parse(&bytes, &path)?;
    for c in &schema.columns {
        let p = join(table_dir, &c.file_name());
        let found = dev
            .stat(&p)
            .map_err(|e| DataError::device(format!("column file {p}"), e))?
            .size_bytes;
        let expected = schema.rows * c.ty.width();
        if found != expected {
            return Err(DataError::ColumnLength {
                path: p,
                found,
                expected,
                rows: schema.rows,
                width: c.ty.width(),
            });
        }
    }
    Ok(schema)
}

/// Reads a dict column's dictionary from the device.
pub fn device_dictionary(
    session: &mut Session,
    table_dir: &str,
    schema: &Schema,
    column: &str,
) -> Result<Vec<String>, DataError> {
    let c = schema.column(column)?;
    let path = join(table_dir, &c.dict_file_name());
    let st = session
        .device()
        .stat(&path)
        .map_err(|e| DataError::device(format!("dictionary {path}"), e))?;
    if st.size_bytes > DICT_SIZE_MAX {
        return Err(DataError::TooLarge {
            what: path,
            needed: st.size_bytes,
            limit: DICT_SIZE_MAX,
        });
    }
    let bytes = session.read_file(&path, st.size_bytes)?;
    decode_dictionary(&bytes, c.entries, &path)
}

/// The filter's parameter block for `ranges`.
pub fn filter_params(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + 16 * ranges.len());
    put_u32(&mut p, ranges.len() as u32);
    put_u32(&mut p, 0);
    for &(lo, hi) in ranges {
        put_u64(&mut p, lo);
        put_u64(&mut p, hi);
    }
    p
}

/// Groups predicates by column and compiles each column's conjunction.
pub fn compile_predicates(
    schema: &Schema,
    predicates: &[Predicate],
) -> Result<Vec<(String, ColumnType, Compiled)>, DataError> {
    let mut by_col: BTreeMap<&str, Vec<&Cmp>> = BTreeMap::new();
    for p in predicates {
        schema.column(&p.column)?;
        by_col.entry(p.column.as_str()).or_default().push(&p.cmp);
    }
    let mut out = Vec::new();
    for (name, cmps) in by_col {
        let ty = schema.column(name)?.ty;
        out.push((name.to_string(), ty, compile(name, ty, &cmps)?));
    }
    Ok(out)
}

/// One column's filter: its name, type and the raw ranges it keeps.
type ColumnFilter = (String, ColumnType, Vec<RawRange>);

/// The row (within the chunk) of the `k`-th selected value, from the mask's bytes.
fn selected_row(mask: &[u8], k: u64) -> u64 {
    let mut seen = 0;
    for (i, byte) in mask.iter().enumerate() {
        for b in 0..8 {
            if byte & (1 << b) != 0 {
                if seen == k {
                    return i as u64 * 8 + b;
                }
                seen += 1;
            }
        }
    }
    u64::MAX
}

/// Scans `columns` of the table at `table_dir` on the device, keeping the rows that
/// satisfy every predicate.
pub fn scan(
    dev: &Device,
    table_dir: &str,
    columns: &[&str],
    predicates: &[Predicate],
    opts: &ScanOptions,
) -> Result<ScanResult, DataError> {
    let started = Instant::now();
    if opts.chunk_rows == 0 || opts.chunk_rows > CHUNK_ROWS_MAX {
        return Err(DataError::Invalid(format!(
            "chunk of {} rows, must be 1 to {CHUNK_ROWS_MAX}",
            opts.chunk_rows
        )));
    }
    let mut s = Session::new(dev, opts.engine)?;
    let schema = device_schema(&mut s, table_dir)?;
    let mut projected = Vec::new();
    for &c in columns {
        let col = schema.column(c)?.clone();
        let dictionary = if col.ty == ColumnType::Dict {
            Some(device_dictionary(&mut s, table_dir, &schema, c)?)
        } else {
            None
        };
        projected.push(ScanColumn {
            name: col.name.clone(),
            ty: col.ty,
            scale: col.scale,
            values: Values::empty(col.ty),
            dictionary,
        });
    }
    let compiled = compile_predicates(&schema, predicates)?;
    let nothing = compiled.iter().any(|(_, _, c)| *c == Compiled::Nothing);
    let filters: Vec<ColumnFilter> = compiled
        .into_iter()
        .filter_map(|(n, t, c)| match c {
            Compiled::Ranges(r) => Some((n, t, r)),
            _ => None,
        })
        .collect();
    let rows = schema.rows;
    let mut selected_total = 0u64;
    if !nothing && rows > 0 {
        let chunk = opts.chunk_rows.min(rows);
        let words = chunk.div_ceil(64);
        // One staging buffer per column the scan reads.
        let mut staged: BTreeMap<String, MemHandle> = BTreeMap::new();
        for name in filters
            .iter()
            .map(|f| f.0.as_str())
            .chain(columns.iter().copied())
        {
            if !staged.contains_key(name) {
                let w = schema.column(name)?.ty.width();
                staged.insert(name.to_string(), s.alloc(chunk * w)?);
            }
        }
        let mask = s.alloc(words * 8)?;
        let scratch = if opts.strategy == FilterStrategy::Accel && !filters.is_empty() {
            Some(s.alloc(3 * words * 8)?)
        } else {
            None
        };
        let out = s.alloc(chunk * 8)?;
        let mut start = 0;
        while start < rows {
            let n = chunk.min(rows - start);
            let mut loaded: Vec<&str> = Vec::new();
            let mut selected = n;
            for (i, (name, ty, ranges)) in filters.iter().enumerate() {
                let w = ty.width();
                let buf = staged[name];
                s.copy_file(
                    &join(table_dir, &format!("{name}.col")),
                    start * w,
                    n * w,
                    buf,
                    0,
                )?;
                loaded.push(name);
                let mut windows = vec![(buf, 0, n * w), (mask, 0, n.div_ceil(64) * 8)];
                if let Some(sc) = scratch {
                    windows.push((sc, 0, 3 * n.div_ceil(64) * 8));
                }
                let combine = if i == 0 { COMBINE_WRITE } else { COMBINE_AND };
                let run = Run::new(opts.strategy.operator(), windows)
                    .cparams(w | combine << 8, 0)
                    .params(filter_params(ranges));
                selected = s.execute(&run)?;
                if selected == 0 {
                    break;
                }
            }
            if selected > 0 {
                for col in projected.iter_mut() {
                    let w = col.ty.width();
                    let buf = staged[&col.name];
                    let path = join(table_dir, &format!("{}.col", col.name));
                    if !loaded.contains(&col.name.as_str()) {
                        s.copy_file(&path, start * w, n * w, buf, 0)?;
                    }
                    let bytes = if filters.is_empty() {
                        s.read(buf, 0, n * w)?
                    } else {
                        let run = Run::new(
                            "gather",
                            vec![
                                (buf, 0, n * w),
                                (mask, 0, n.div_ceil(64) * 8),
                                (out, 0, selected * w),
                            ],
                        )
                        .cparams(w, 0);
                        let k = s.execute(&run)?;
                        if k != selected {
                            return Err(DataError::Operator {
                                operator: "gather".to_string(),
                                message: format!(
                                    "gathered {k} values, the filter selected {selected}"
                                ),
                            });
                        }
                        s.read(out, 0, k * w)?
                    };
                    let values = Values::from_le_bytes(col.ty, &bytes);
                    if let (Some(dict), Values::U32(codes)) = (&col.dictionary, &values) {
                        if let Some(k) = codes.iter().position(|&c| c as usize >= dict.len()) {
                            let row = if filters.is_empty() {
                                k as u64
                            } else {
                                let m = s.read(mask, 0, n.div_ceil(64) * 8)?;
                                selected_row(&m, k as u64)
                            };
                            check_codes(&codes[k..=k], dict.len() as u64, &path, start + row)?;
                        }
                    }
                    col.values.extend(values);
                }
                selected_total += selected;
            }
            start += n;
        }
    }
    let meter = s.close()?;
    Ok(ScanResult {
        columns: projected,
        rows: selected_total,
        rows_scanned: rows,
        meter,
        wall_ns: started.elapsed().as_nanos() as u64,
    })
}

/// The host reference: the same scan over a local table, from the predicates'
/// definitions.
pub fn scan_local(
    table: &LocalTable,
    columns: &[&str],
    predicates: &[Predicate],
) -> Result<Vec<Values>, DataError> {
    let mut pred_values = Vec::new();
    for p in predicates {
        pred_values.push(table.read(&p.column)?);
    }
    let keep: Vec<usize> = (0..table.schema.rows as usize)
        .filter(|&i| {
            predicates
                .iter()
                .zip(&pred_values)
                .all(|(p, v)| p.matches(v.get_i64(i)))
        })
        .collect();
    let mut out = Vec::new();
    for &c in columns {
        let v = table.read(c)?;
        out.push(match v {
            Values::I32(x) => Values::I32(keep.iter().map(|&i| x[i]).collect()),
            Values::I64(x) => Values::I64(keep.iter().map(|&i| x[i]).collect()),
            Values::U32(x) => Values::U32(keep.iter().map(|&i| x[i]).collect()),
        });
    }
    Ok(out)
}
