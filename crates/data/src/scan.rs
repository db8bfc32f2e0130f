//! The pushdown scan: projection and selection of one columnar table, run on the
//! device; only the selected values of the projected columns cross to the host.
//!
//! ```text
//! open:            read the schema, check every column file's size, compile the
//!                  predicates into value ranges, emit the scan program (raw eBPF,
//!                  `program`: the ranges, dictionary sizes and layout are constants)
//! for each chunk of rows (ScanOptions::chunk_rows), one per engine at once:
//!   for each column used:  Memory Copy   column rows -> window 0 (on the device)
//!   one run:               Execute       the program: test, keep, copy -> window 1
//!   for each projected:    Memory Read   the kept values -> host
//! ```
//!
//! One pass over the chunk does every predicate and the projection: the program keeps
//! a row when each filtered column's value is in one of its ranges, and copies the
//! row's projected values to the output. It also checks every dictionary code it
//! reads, and stops at a bad one; the host then reads the staged codes back and names
//! the file and row. [`scan_local`] is the host reference.
//!
//! The selection strategies of Delilah (bitmask, unrolled, accelerated filter;
//! [`FilterStrategy`]) are operators of `sdk/ssb` that the SSB runs use
//! (`csx ssb run --filter`); the scan does not.

pub mod program;
pub mod resident;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use csx_host::proto::{EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply};
use csx_host::Device;

use crate::columnar::{
    check_codes, decode_dictionary, ColumnSchema, ColumnType, LocalTable, Schema, Values,
    DICT_SIZE_MAX, SCHEMA_FILE, SCHEMA_SIZE_MAX,
};
use crate::encoding::{skipped_blocks, EncodedColumn};
use crate::error::DataError;
use crate::ops::{self, Meter, Session};
use crate::predicate::{
    compile, compile_within, narrow_ranges, Cmp, Compiled, Predicate, RawRange,
};
use crate::stage::{device_column, DeviceColumn, Staging, Target};
use program::{Input, Layout, Output, BAD_CODE_BASE, PASS_UNKNOWN, SEGMENT_MAX};
use std::sync::Arc;

/// How the SSB operators compute a selection (Delilah's filter strategies).
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
/// Largest chunk asked for (a scan lowers it further so its windows stay under
/// [`program::SEGMENT_MAX`] bytes).
pub const CHUNK_ROWS_MAX: u64 = 1 << 28;

/// How a scan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanOptions {
    pub engine: EngineKind,
    pub chunk_rows: u64,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            engine: EngineKind::Jit,
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
    /// The staged inputs came from a resident entry: nothing was staged.
    pub reused: bool,
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// Reads and validates a table's schema on the device, and checks the size of every
/// column file it names when its files are raw values (an encoded file's size is
/// checked against its header when it is opened for staging,
/// `crate::stage::device_column`: a table's schema costs two commands, not one per
/// column).
pub fn device_schema(session: &mut Session, table_dir: &str) -> Result<Schema, DataError> {
    let path = join(table_dir, SCHEMA_FILE);
    let st = session
        .device()
        .stat(&path)
        .map_err(|e| DataError::device(format!("no table at {table_dir}: {path}"), e))?;
    if st.size_bytes > SCHEMA_SIZE_MAX {
        return Err(DataError::TooLarge {
            what: path,
            needed: st.size_bytes,
            limit: SCHEMA_SIZE_MAX,
        });
    }
    let bytes = session.read_file(&path, 0, st.size_bytes)?;
    let schema = Schema::parse(&bytes, &path)?;
    if schema.encoded() {
        return Ok(schema);
    }
    for c in &schema.columns {
        let p = join(table_dir, &c.file_name());
        let found = session
            .device()
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
    let bytes = session.read_file(&path, 0, st.size_bytes)?;
    decode_dictionary(&bytes, c.entries, &path)
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

/// The operator name of a scan's program in its session.
const SCAN_OPERATOR: &str = "scan";

/// Most value ranges one column's predicates may compile to in a scan program (each
/// costs two compares; the filter operators take [`crate::predicate::RANGES_MAX`]).
pub const SCAN_RANGES_MAX: usize = 256;

/// Device memory a scan's concurrent chunks may take together (at least one chunk).
pub const SCAN_MEMORY_BUDGET: u64 = 256 << 20;

/// One chunk's kept rows.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// The chunk's first row in the table, and its rows.
    pub first_row: u64,
    pub rows: u64,
    /// Rows kept.
    pub kept: u64,
    /// The kept values of each projected column, in the order asked, little-endian
    /// (`kept * width` bytes each).
    pub columns: Vec<Vec<u8>>,
}

/// A batch of chunks whose columns are being staged.
#[derive(Debug)]
struct Staged {
    start: u64,
    count: u64,
    set: u64,
    copies: Staging,
}

/// A scan read chunk by chunk ([`Scanner::next_chunk`]); [`scan`] collects one.
///
/// Opening reads and checks the schema (every column file's size), compiles the
/// predicates and emits the scan program ([`program`]) for this query and chunk size.
/// Chunks run as many at once as the device has engines (within
/// [`SCAN_MEMORY_BUDGET`]): each stages its columns' rows with Memory Copy (on the
/// device), runs the program, and reads back only the kept values; the next batch's
/// copies run on the device's transfer workers while this batch executes.
#[derive(Debug)]
pub struct Scanner<'d> {
    session: Session<'d>,
    table_dir: String,
    schema: Schema,
    /// The staged columns, in the layout's input order.
    inputs: Vec<ColumnSchema>,
    /// Projected column j is layout output `outputs[j]`.
    projected: Vec<ColumnSchema>,
    layout: Layout,
    image: Vec<u8>,
    engine: EngineKind,
    /// The scan program's slot, once loaded (or adopted).
    program: Option<ProgramIndex>,
    nothing: bool,
    chunk: u64,
    chunks: u64,
    next: u64,
    /// Chunks run at once (a batch), and buffer sets (2: the next batch is staged
    /// while this one runs).
    slots: u64,
    sets: u64,
    buffers: Vec<(MemHandle, MemHandle)>,
    /// The staged columns' files (inputs order), the blocks their zone maps exclude,
    /// and per slot a buffer of staged blocks (encoded tables) of `staged_len` bytes.
    files: Vec<Arc<DeviceColumn>>,
    skip: Vec<bool>,
    staged_bufs: Vec<MemHandle>,
    staged_len: u64,
    skipped: u64,
    staged: Option<Staged>,
    ready: VecDeque<Chunk>,
    setup: Meter,
    /// Per chunk, its input window kept by a [`resident::ResidentScans`] entry, and
    /// whether the entry already holds the staged columns.
    resident: Option<(Vec<MemHandle>, bool)>,
}

/// Each filtered column's value ranges (at most [`SCAN_RANGES_MAX`]), and whether a
/// predicate selects nothing.
fn scan_ranges(
    schema: &Schema,
    predicates: &[Predicate],
) -> Result<(BTreeMap<String, Vec<RawRange>>, bool), DataError> {
    let mut by_col: BTreeMap<&str, Vec<&Cmp>> = BTreeMap::new();
    for p in predicates {
        schema.column(&p.column)?;
        by_col.entry(p.column.as_str()).or_default().push(&p.cmp);
    }
    let mut ranges: BTreeMap<String, Vec<RawRange>> = BTreeMap::new();
    let mut nothing = false;
    for (name, cmps) in by_col {
        let ty = schema.column(name)?.ty;
        match compile_within(name, ty, &cmps, SCAN_RANGES_MAX)? {
            Compiled::All => {}
            Compiled::Nothing => nothing = true,
            Compiled::Ranges(r) => {
                ranges.insert(name.to_string(), r);
            }
        }
    }
    Ok((ranges, nothing))
}

/// Chunks under this many rows are not made smaller to spread a table over the
/// engines (a chunk's commands cost the same whatever its rows).
pub const SPREAD_MIN_ROWS: u64 = 1 << 16;

/// The rows of a scan's chunk: `asked` (already within the table and
/// [`SEGMENT_MAX`]), or less so that the table splits into a multiple of `engines`
/// chunks of equal size, each small enough that a buffer set of `engines` chunks (at
/// `slot_row_bytes` bytes a row) fits [`SCAN_MEMORY_BUDGET`]: every batch then gives
/// every engine a chunk (the last batch may have one short chunk: chunks are whole
/// encoded blocks where that fits), in as few batches as fit (each batch's commands
/// wait for the one before). `asked` when that would make chunks under
/// [`SPREAD_MIN_ROWS`] (or under `asked`, when smaller).
fn spread_chunk(rows: u64, asked: u64, slot_row_bytes: u64, engines: u64) -> u64 {
    let engines = engines.max(1);
    let fit = (SCAN_MEMORY_BUDGET / (engines * slot_row_bytes.max(1))).max(1);
    let chunks = rows.div_ceil(asked.min(fit)).div_ceil(engines) * engines;
    if chunks == 0 {
        return asked;
    }
    let mut chunk = rows.div_ceil(chunks);
    // Whole encoded blocks a chunk where that fits and keeps the chunks: a block
    // split between two chunks is decoded for each.
    let whole = chunk.next_multiple_of(u64::from(crate::encoding::BLOCK_ROWS));
    if whole <= asked.min(fit) && rows.div_ceil(whole) == chunks {
        chunk = whole;
    }
    if chunk < SPREAD_MIN_ROWS.min(asked) {
        asked
    } else {
        chunk
    }
}

/// The staged columns and the scan program's layout: the filtered columns, then the
/// projected ones, widest first so every segment is aligned; projected column j is
/// output j (outputs widest first too); chunks no larger than asked nor than
/// [`SEGMENT_MAX`] allows, spread evenly over the device's `engines`
/// ([`spread_chunk`]).
fn plan_layout(
    schema: &Schema,
    columns: &[&str],
    projected: &[ColumnSchema],
    ranges: &BTreeMap<String, Vec<RawRange>>,
    chunk_rows: u64,
    engines: u64,
) -> Result<(Vec<ColumnSchema>, Layout), DataError> {
    let mut inputs: Vec<ColumnSchema> = Vec::new();
    for name in ranges
        .keys()
        .map(String::as_str)
        .chain(columns.iter().copied())
    {
        if !inputs.iter().any(|c| c.name == name) {
            inputs.push(schema.column(name)?.clone());
        }
    }
    inputs.sort_by_key(|c| std::cmp::Reverse(c.ty.width()));
    let in_row: u64 = inputs.iter().map(|c| c.ty.width()).sum();
    let out_row: u64 = projected.iter().map(|c| c.ty.width()).sum();
    let chunk = chunk_rows
        .min(schema.rows.max(1))
        .min(SEGMENT_MAX / in_row.max(out_row).max(1));
    let chunk = spread_chunk(schema.rows, chunk, 2 * in_row + out_row, engines);
    let mut layout = Layout {
        inputs: Vec::new(),
        outputs: Vec::new(),
        chunk_rows: chunk,
        in_bytes: chunk * in_row,
        out_bytes: chunk * out_row,
    };
    let mut at = 0;
    for c in &inputs {
        layout.inputs.push(Input {
            width: c.ty.width(),
            segment: at,
            dict_entries: (c.ty == ColumnType::Dict).then_some(c.entries),
            ranges: ranges.get(&c.name).cloned(),
            pass_ppm: PASS_UNKNOWN,
        });
        at += chunk * c.ty.width();
    }
    let widths: Vec<u64> = projected.iter().map(|c| c.ty.width()).collect();
    let (segments, _) = output_segments(&widths, chunk);
    for (j, c) in projected.iter().enumerate() {
        let input = (inputs.iter())
            .position(|i| i.name == c.name)
            .expect("every projected column is staged");
        layout.outputs.push(Output {
            input,
            segment: segments[j],
        });
    }
    Ok((inputs, layout))
}

/// The staged columns on the device (headers and directories read and checked) and the
/// blocks their zone maps exclude under `ranges`.
fn open_inputs(
    session: &mut Session<'_>,
    table_dir: &str,
    schema: &Schema,
    inputs: &[ColumnSchema],
    ranges: &BTreeMap<String, Vec<RawRange>>,
) -> Result<(Vec<Arc<DeviceColumn>>, Vec<bool>), DataError> {
    let files = (inputs.iter())
        .map(|c| device_column(session, table_dir, schema, &c.name).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let skip = zone_skips(inputs, &files, ranges);
    Ok((files, skip))
}

/// The blocks the staged columns' zone maps exclude under `ranges`.
fn zone_skips(
    inputs: &[ColumnSchema],
    files: &[Arc<DeviceColumn>],
    ranges: &BTreeMap<String, Vec<RawRange>>,
) -> Vec<bool> {
    let zone: Vec<(&EncodedColumn, &[RawRange])> = (inputs.iter().zip(files))
        .filter_map(|(c, f)| Some((f.encoded()?, ranges.get(&c.name)?.as_slice())))
        .collect();
    skipped_blocks(&zone)
}

/// Stages as 4-byte values every input of 8 whose blocks all narrow to 4
/// ([`DeviceColumn::narrows_to_4`]; a decimal price or quantity): a row's values
/// then take fewer cache lines, which a scan over resident columns is bound by (Q6's
/// scan program 1.7x faster with its three decimals in 4 bytes than in 8). Its ranges
/// become the same values' 4-byte ones ([`narrow_ranges`]), the segments are laid out
/// again (in the same order, each aligned to its width: never more bytes than before),
/// and the outputs of a narrowed input are widened back on the host ([`widen`]). Depends
/// on the files alone, never the predicate, so a resident entry serves every predicate
/// (its windows keep the sizes of the unnarrowed plan, made before the files are read).
fn narrow_inputs(layout: &mut Layout, inputs: &[ColumnSchema], files: &[Arc<DeviceColumn>]) {
    let chunk = layout.chunk_rows;
    let mut at = 0;
    for ((input, c), f) in layout.inputs.iter_mut().zip(inputs).zip(files) {
        if input.width == 8 && f.narrows_to_4() {
            input.width = 4;
            if let Some(r) = &mut input.ranges {
                *r = narrow_ranges(r, c.ty.signed());
            }
        }
        at = u64::next_multiple_of(at, input.width);
        input.segment = at;
        at += chunk * input.width;
    }
    debug_assert!(at <= layout.in_bytes, "narrowing never grows the inputs");
    layout.in_bytes = at;
    let widths: Vec<u64> = (layout.outputs.iter())
        .map(|o| layout.inputs[o.input].width)
        .collect();
    let (segments, out_bytes) = output_segments(&widths, chunk);
    for (o, s) in layout.outputs.iter_mut().zip(segments) {
        o.segment = s;
    }
    layout.out_bytes = out_bytes;
}

/// The output window's layout for outputs of `widths` bytes a value, `chunk` rows each:
/// each output's segment (widest first, so every segment is aligned) and the bytes in all.
fn output_segments(widths: &[u64], chunk: u64) -> (Vec<u64>, u64) {
    let mut order: Vec<usize> = (0..widths.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(widths[j]));
    let mut segments = vec![0; widths.len()];
    let mut at = 0;
    for &j in &order {
        segments[j] = at;
        at += chunk * widths[j];
    }
    (segments, at)
}

/// Kept values of `staged` bytes each (`bytes`) as values of column type `ty`'s width:
/// 4-byte values of a narrowed 8-byte column sign-extended (or zero-extended for an
/// unsigned type); values already of the type's width unchanged.
fn widen(bytes: Vec<u8>, staged: u64, ty: ColumnType) -> Vec<u8> {
    if staged == ty.width() {
        return bytes;
    }
    let (values, _) = bytes.as_chunks::<4>();
    let wide = |v: &[u8; 4]| match ty.signed() {
        true => i64::from(i32::from_le_bytes(*v)).to_le_bytes(),
        false => u64::from(u32::from_le_bytes(*v)).to_le_bytes(),
    };
    values.iter().flat_map(wide).collect()
}

/// Each filtered input's [`Input::pass_ppm`] from its zone maps (encoded columns), so
/// the program tests first the input that rejects the most rows.
fn estimate_passes(layout: &mut Layout, files: &[Arc<DeviceColumn>]) {
    for (input, f) in layout.inputs.iter_mut().zip(files) {
        if let (Some(ranges), Some(col)) = (&input.ranges, f.encoded()) {
            input.pass_ppm = pass_estimate(col, ranges);
        }
    }
}

/// The share of `col`'s rows its zone maps suggest are in `ranges` (raw values, as
/// [`crate::encoding::excluded`] reads them), parts per million: per block, the part
/// of `[min, max]` the ranges cover, the values taken as spread evenly.
fn pass_estimate(col: &EncodedColumn, ranges: &[RawRange]) -> u32 {
    let mask = if col.header.ty.width() == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    let (mut passing, mut rows) = (0f64, 0f64);
    for h in &col.blocks {
        let (min, max) = (h.min, h.max.max(h.min));
        let raw: Vec<(u64, u64)> = if !col.header.ty.signed() || min >= 0 || max < 0 {
            vec![((min as u64) & mask, (max as u64) & mask)]
        } else {
            vec![(0, max as u64), ((min as u64) & mask, mask)]
        };
        let span = (max as i128 - min as i128 + 1) as f64;
        let covered: f64 = (raw.iter())
            .flat_map(|&(a, b)| ranges.iter().map(move |&(lo, hi)| (a.max(lo), b.min(hi))))
            .filter(|(lo, hi)| lo <= hi)
            .map(|(lo, hi)| (hi - lo) as f64 + 1.0)
            .sum();
        passing += f64::from(h.rows) * (covered / span).min(1.0);
        rows += f64::from(h.rows);
    }
    if rows == 0.0 {
        return PASS_UNKNOWN;
    }
    (passing / rows * f64::from(PASS_UNKNOWN)) as u32
}

/// How many chunks run at once (slots, at most one per engine) and in how many buffer
/// sets (two when they fit the scan's memory budget, so staging overlaps the runs), for
/// `per_slot` bytes of device memory a chunk: more engines at work first, then the
/// overlap.
fn buffer_sets(per_slot: u64, chunks: u64, engines: u64) -> (u64, u64) {
    let slots_in = |sets: u64| {
        (SCAN_MEMORY_BUDGET / (sets * per_slot.max(1)))
            .clamp(1, engines)
            .min(chunks.max(1))
    };
    let (one, two) = (slots_in(1), slots_in(2));
    let (slots, mut sets) = if one > two || 2 * per_slot > SCAN_MEMORY_BUDGET {
        (one, 1)
    } else {
        (two, 2)
    };
    if chunks <= slots {
        sets = 1;
    }
    (slots, sets)
}

/// A scan's plan: what opening decides before it reads any column file.
struct Plan {
    schema: Schema,
    projected: Vec<ColumnSchema>,
    ranges: BTreeMap<String, Vec<RawRange>>,
    nothing: bool,
    inputs: Vec<ColumnSchema>,
    layout: Layout,
    chunks: u64,
}

impl Plan {
    /// Reads and checks the schema, compiles the predicates and lays out the program.
    fn new(
        session: &mut Session<'_>,
        table_dir: &str,
        columns: &[&str],
        predicates: &[Predicate],
        opts: &ScanOptions,
    ) -> Result<Plan, DataError> {
        let chunk_rows = opts.chunk_rows;
        if chunk_rows == 0 || chunk_rows > CHUNK_ROWS_MAX {
            return Err(DataError::Invalid(format!(
                "chunk of {chunk_rows} rows, must be 1 to {CHUNK_ROWS_MAX}"
            )));
        }
        let schema = device_schema(session, table_dir)?;
        let projected = columns
            .iter()
            .map(|c| schema.column(c).cloned())
            .collect::<Result<Vec<_>, _>>()?;
        let (ranges, nothing) = scan_ranges(&schema, predicates)?;
        let engines = session.engines()?;
        let (inputs, layout) =
            plan_layout(&schema, columns, &projected, &ranges, chunk_rows, engines)?;
        let chunks = match nothing {
            true => 0,
            false => schema.rows.div_ceil(layout.chunk_rows),
        };
        Ok(Plan {
            schema,
            projected,
            ranges,
            nothing,
            inputs,
            layout,
            chunks,
        })
    }
}

/// The resident entry a scan of `plan` may keep: its key (the table, the staged columns
/// in input order, the chunk size and the rows) and the files it is staged from (the
/// schema first); `None` when the scan runs no chunk.
fn resident_key_of(table_dir: &str, plan: &Plan) -> Option<(String, Vec<String>)> {
    if plan.chunks == 0 {
        return None;
    }
    let dir = table_dir.trim_end_matches('/');
    let names: Vec<&str> = plan.inputs.iter().map(|c| c.name.as_str()).collect();
    let chunk = plan.layout.chunk_rows;
    let key = format!("{dir}|{}|{chunk}|{}", names.join(","), plan.schema.rows);
    let files = std::iter::once(join(dir, SCHEMA_FILE))
        .chain(plan.inputs.iter().map(|c| join(dir, &c.file_name())))
        .collect();
    Some((key, files))
}

impl<'d> Scanner<'d> {
    /// Plans the scan of `columns` of the table at `table_dir`, keeping the rows that
    /// satisfy every predicate, on `opts`' engine kind and chunk size. Nothing runs
    /// yet but the schema's reads.
    pub fn open(
        mut session: Session<'d>,
        table_dir: &str,
        columns: &[&str],
        predicates: &[Predicate],
        opts: &ScanOptions,
    ) -> Result<Scanner<'d>, DataError> {
        let plan = Plan::new(&mut session, table_dir, columns, predicates, opts)?;
        Scanner::with_inputs(session, table_dir, plan, opts, None)
    }

    /// [`Scanner::open`] through `keeper`: the scan's entry lent when it can be kept
    /// (its columns' headers and directories not read again when it is staged and
    /// unchanged), and with a staged entry its output windows; give the lease back
    /// with [`resident::ResidentScans::release`] once the scan ends.
    pub fn open_kept(
        mut session: Session<'d>,
        table_dir: &str,
        columns: &[&str],
        predicates: &[Predicate],
        opts: &ScanOptions,
        keeper: &mut resident::ResidentScans<'_>,
    ) -> Result<(Scanner<'d>, Option<resident::Lease>), DataError> {
        let plan = Plan::new(&mut session, table_dir, columns, predicates, opts)?;
        let mut m = Meter::default();
        // A staged entry serves the scan with the files it was staged from; without one,
        // the files are read first (after their sentinels: `reuse`), so the entry is sized
        // by what the scan stages (narrowed columns: `narrow_inputs`).
        let found = match resident_key_of(table_dir, &plan) {
            Some((key, files)) => keeper.reuse(&key, &files, &mut m)?,
            None => resident::Reuse::Nothing,
        };
        let (mut lease, checked) = match found {
            resident::Reuse::Staged(l) => (Some(l), None),
            resident::Reuse::Checked(c) => (None, Some(c)),
            resident::Reuse::Nothing => (None, None),
        };
        let known = lease.as_ref().and_then(|l| l.columns.clone());
        let mut sc = match Scanner::with_inputs(session, table_dir, plan, opts, known) {
            Ok(sc) => sc,
            Err(e) => {
                if let Some(l) = lease {
                    keeper.release(l, false, None);
                }
                return Err(e);
            }
        };
        let sizes = vec![sc.layout.in_bytes.max(64); sc.chunks as usize];
        if let Some(mut l) = lease.take_if(|l| l.bytes != sizes.iter().sum::<u64>()) {
            // Staged at other sizes than this scan's (never, for unchanged files): this
            // scan stages into windows of its own, and the next one into a new entry.
            l.staged = false;
            keeper.release(l, false, None);
        }
        if let Some(c) = checked {
            lease = keeper.acquire(c, &sizes, &mut m)?;
        }
        if let Some(l) = &lease {
            sc.use_resident(l.chunks.clone(), l.staged);
        }
        if sc.chunks > 0 {
            let windows = match keeper.lend_windows(&sc.window_sizes(), &mut m) {
                Ok(w) => w,
                Err(e) => {
                    if let Some(l) = lease {
                        keeper.release(l, false, None);
                    }
                    return Err(e);
                }
            };
            sc.use_windows(&windows);
            match &mut lease {
                Some(l) => l.windows = windows,
                None if !windows.is_empty() => lease = Some(resident::Lease::windows(windows)),
                None => {}
            }
        }
        sc.charge(&m);
        Ok((sc, lease))
    }

    /// The scan of `plan`, its inputs' files `known` (the same columns, opened before
    /// and unchanged since) or opened now.
    fn with_inputs(
        mut session: Session<'d>,
        table_dir: &str,
        plan: Plan,
        opts: &ScanOptions,
        known: Option<Vec<Arc<DeviceColumn>>>,
    ) -> Result<Scanner<'d>, DataError> {
        let (chunk, chunks) = (plan.layout.chunk_rows, plan.chunks);
        let (files, skip) = match known {
            Some(files) if files.len() == plan.inputs.len() => {
                let skip = zone_skips(&plan.inputs, &files, &plan.ranges);
                (files, skip)
            }
            _ => open_inputs(
                &mut session,
                table_dir,
                &plan.schema,
                &plan.inputs,
                &plan.ranges,
            )?,
        };
        let mut layout = plan.layout;
        estimate_passes(&mut layout, &files);
        narrow_inputs(&mut layout, &plan.inputs, &files);
        let staged_len: u64 = files.iter().map(|f| f.staged_bound(chunk)).sum();
        let image = program::emit(&layout)?;
        let per_slot = layout.in_bytes.max(64) + layout.out_bytes.max(64) + staged_len;
        let (slots, sets) = buffer_sets(per_slot, chunks, session.engines()?);
        let setup = session.meter;
        Ok(Scanner {
            session,
            table_dir: table_dir.trim_end_matches('/').to_string(),
            schema: plan.schema,
            inputs: plan.inputs,
            projected: plan.projected,
            layout,
            image,
            engine: opts.engine,
            program: None,
            nothing: plan.nothing,
            chunk,
            chunks,
            next: 0,
            slots,
            sets,
            buffers: Vec::new(),
            files,
            skip,
            staged_bufs: Vec::new(),
            staged_len,
            skipped: 0,
            staged: None,
            ready: VecDeque::new(),
            setup,
            resident: None,
        })
    }

    /// The staged columns' files (for [`resident::ResidentScans::release`]).
    pub fn input_files(&self) -> Vec<Arc<DeviceColumn>> {
        self.files.clone()
    }

    /// Reads chunk `c`'s inputs from `chunks[c]` (a resident entry's, of the sizes
    /// `open_kept`'s sizes) instead of buffers of its own: `staged` says
    /// they hold the staged columns already (nothing is staged), else the scan stages
    /// into them, every block (a zone map skips none: the entry serves any predicate).
    /// Call before the first chunk (and before [`Scanner::window_sizes`]).
    pub fn use_resident(&mut self, chunks: Vec<MemHandle>, staged: bool) {
        assert_eq!(chunks.len() as u64, self.chunks, "one window per chunk");
        if !staged {
            self.skip.iter_mut().for_each(|s| *s = false);
        }
        self.resident = Some((chunks, staged));
    }

    /// Buffer sets the scan's windows make (one when a resident entry holds every
    /// chunk's staged columns: nothing is staged while a batch runs).
    fn sets_used(&self) -> u64 {
        if self.resident_staged() {
            1
        } else {
            self.sets
        }
    }

    /// Bytes of each window the scan uses besides a resident entry's input windows, in
    /// the order [`Scanner::use_windows`] takes them: per slot of each buffer set, its
    /// input window (without an entry), its output window, and (while staging an
    /// encoded table) its staged blocks' buffer.
    pub fn window_sizes(&self) -> Vec<u64> {
        let staging = self.staged_len > 0 && !self.resident_staged();
        let mut sizes = Vec::new();
        for _ in 0..self.slots * self.sets_used() {
            if self.resident.is_none() {
                sizes.push(self.layout.in_bytes.max(64));
            }
            sizes.push(self.layout.out_bytes.max(64));
            if staging {
                sizes.push(self.staged_len);
            }
        }
        sizes
    }

    /// Uses `windows` (of at least [`Scanner::window_sizes`]' bytes, in its order) for
    /// the scan's windows instead of allocating them: windows kept between scans (a
    /// [`resident::ResidentScans`]' lent ones) are mapped already and need no zeroing.
    /// Their bytes may be anything: a chunk's windows are written before they are read.
    /// Empty: the scan allocates its own. Call before the first chunk.
    pub fn use_windows(&mut self, windows: &[MemHandle]) {
        if windows.is_empty() || !self.buffers.is_empty() {
            return;
        }
        assert_eq!(
            windows.len(),
            self.window_sizes().len(),
            "one window per size"
        );
        let staging = self.staged_len > 0 && !self.resident_staged();
        let mut it = windows.iter().copied();
        let mut next = || it.next().expect("counted above");
        for _ in 0..self.slots * self.sets_used() {
            let input = match self.resident {
                None => next(),
                Some(_) => MemHandle::NONE,
            };
            let output = next();
            self.buffers.push((input, output));
            if staging {
                self.staged_bufs.push(next());
            }
        }
    }

    /// Whether every chunk ran (so a resident entry staged by this scan is complete).
    pub fn finished(&self) -> bool {
        self.next == self.chunks
    }

    /// Adds `m` to what the scan cost (a resident entry's checks).
    pub fn charge(&mut self, m: &Meter) {
        self.session.meter.add(m);
    }

    /// Chunk `c`'s input window and the buffer set's slot `k` it would use.
    fn input_of(&self, c: u64, k: usize) -> MemHandle {
        match &self.resident {
            Some((chunks, _)) => chunks[c as usize],
            None => self.buffers[k].0,
        }
    }

    /// The resident entry already holds every chunk's staged columns.
    fn resident_staged(&self) -> bool {
        matches!(self.resident, Some((_, true)))
    }

    /// The table's schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The projected columns, in the order asked.
    pub fn columns(&self) -> &[ColumnSchema] {
        &self.projected
    }

    /// The scan program's raw eBPF (the same bytes for the same query shape, table
    /// size and chunk size).
    pub fn program(&self) -> &[u8] {
        &self.image
    }

    /// Each staged input's name and the bytes a value takes staged: its type's width,
    /// or 4 for an 8-byte column narrowed ([`narrow_inputs`]).
    pub fn staged_widths(&self) -> Vec<(&str, u64)> {
        (self.inputs.iter().zip(&self.layout.inputs))
            .map(|(c, l)| (c.name.as_str(), l.width))
            .collect()
    }

    /// Rows per chunk, and chunks (0 when a predicate selects nothing).
    pub fn chunk_rows(&self) -> u64 {
        self.chunk
    }

    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Runs the program in `slot`, loaded and activated by the caller from
    /// [`Scanner::program`] (and kept by it: the scan never unloads it). Without this
    /// the scan loads the program itself on its first chunk.
    pub fn use_loaded(&mut self, slot: ProgramIndex) {
        self.session.adopt(SCAN_OPERATOR, slot);
        self.program = Some(slot);
    }

    /// What the scan's chunks cost so far (the schema's reads excluded).
    pub fn meter(&self) -> Meter {
        self.session.meter.since(&self.setup)
    }

    /// What opening cost: the schema's and the size checks' commands.
    pub fn setup_meter(&self) -> Meter {
        self.setup
    }

    /// The next chunk's kept rows, `None` after the last.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, DataError> {
        if self.ready.is_empty() && self.next < self.chunks {
            self.run_batch()?;
        }
        Ok(self.ready.pop_front())
    }

    /// The scan program's slot, and the chunks' buffers, made the first time.
    fn prepare(&mut self) -> Result<ProgramIndex, DataError> {
        let pind = match self.program {
            Some(p) => p,
            None => {
                let image = &self.image;
                let p = (self.session).load(SCAN_OPERATOR, ProgramType::Raw, image, self.engine)?;
                *self.program.insert(p)
            }
        };
        while (self.buffers.len() as u64) < self.slots * self.sets_used() {
            let input = match self.resident {
                Some(_) => MemHandle::NONE,
                None => ops::alloc(&mut self.session, self.layout.in_bytes)?,
            };
            let output = ops::alloc(&mut self.session, self.layout.out_bytes)?;
            self.buffers.push((input, output));
            if self.staged_len > 0 && !self.resident_staged() {
                let b = ops::alloc(&mut self.session, self.staged_len)?;
                self.staged_bufs.push(b);
            }
        }
        Ok(pind)
    }

    fn path(&self, c: &ColumnSchema) -> String {
        join(&self.table_dir, &c.file_name())
    }

    /// Starts staging the batch of chunks from `start` into buffer set `set`.
    fn stage(&mut self, start: u64, set: u64) -> Result<Staged, DataError> {
        let end = (start + self.slots).min(self.chunks);
        let mut copies = Staging::default();
        for (i, c) in (start..end).enumerate() {
            let k = (set * self.slots) as usize + i;
            let input = self.input_of(c, k);
            let staged = self.staged_bufs.get(k).copied().unwrap_or(MemHandle::NONE);
            let t = copies.target(Target::new(
                staged,
                self.staged_len,
                input,
                self.layout.in_bytes.max(64),
            ));
            let first = c * self.chunk;
            let rows = self.chunk.min(self.schema.rows - first);
            for (f, l) in self.files.iter().zip(&self.layout.inputs) {
                let r = copies.stage_rows_as(
                    &mut self.session,
                    f,
                    (first, rows),
                    &self.skip,
                    (t, l.segment),
                    l.width,
                );
                if let Err(e) = r {
                    copies.abandon(&mut self.session);
                    return Err(e);
                }
            }
        }
        self.skipped += copies.skipped;
        Ok(Staged {
            start,
            count: end - start,
            set,
            copies,
        })
    }

    /// Waits for every copy still in flight.
    fn drain(&mut self) {
        if let Some(s) = self.staged.take() {
            s.copies.abandon(&mut self.session);
        }
    }

    /// Runs the next batch of chunks at once (staging the batch after it meanwhile).
    fn run_batch(&mut self) -> Result<(), DataError> {
        let pind = self.prepare()?;
        let current = match self.staged.take() {
            Some(s) => s,
            None if self.resident_staged() => Staged {
                start: self.next,
                count: self.slots.min(self.chunks - self.next),
                set: 0,
                copies: Staging::default(),
            },
            None => self.stage(self.next, 0)?,
        };
        let result = self.run_staged(pind, current);
        if result.is_err() {
            self.drain();
        }
        result
    }

    /// Each chunk of `chunks`, run from buffer set `set`: its first row, its rows, its
    /// input window and its output window.
    fn batch_windows(
        &self,
        chunks: std::ops::Range<u64>,
        set: u64,
    ) -> Vec<(u64, u64, MemHandle, MemHandle)> {
        let base = (set * self.slots) as usize;
        (chunks.enumerate())
            .map(|(i, c)| {
                let first = c * self.chunk;
                let rows = self.chunk.min(self.schema.rows - first);
                (
                    first,
                    rows,
                    self.input_of(c, base + i),
                    self.buffers[base + i].1,
                )
            })
            .collect()
    }

    fn run_staged(&mut self, pind: ProgramIndex, current: Staged) -> Result<(), DataError> {
        let Staged {
            start,
            count,
            set,
            copies,
        } = current;
        copies.finish(&mut self.session)?;
        let after = start + count;
        if self.sets == 2 && after < self.chunks && !self.resident_staged() {
            self.staged = Some(self.stage(after, 1 - set)?);
        }
        let batch = self.batch_windows(start..after, set);
        let runs: Vec<_> = batch
            .iter()
            .map(|&(_, rows, input, output)| {
                let windows = [
                    (input, 0, self.layout.in_bytes.max(64)),
                    (output, 0, self.layout.out_bytes.max(64)),
                ];
                ops::run(pind, &windows).cparams(rows, 0)
            })
            .collect();
        let done = self.session.execute_all(&runs)?;
        let mut reads = Vec::new();
        let mut kept_of = Vec::with_capacity(batch.len());
        for (&(first, rows, input, output), x) in batch.iter().zip(done) {
            let r0 = x.r0_signed();
            if r0 < 0 {
                return Err(self.failure(r0, first, rows, input));
            }
            let kept = r0 as u64;
            if kept > rows {
                return Err(DataError::Operator {
                    operator: SCAN_OPERATOR.to_string(),
                    message: format!("kept {kept} of the {rows} rows {first}..{}", first + rows),
                });
            }
            for o in &self.layout.outputs {
                reads.push((output, o.segment, kept * self.layout.inputs[o.input].width));
            }
            kept_of.push(kept);
        }
        let mut values = read_all(&mut self.session, &reads)?.into_iter();
        for (&(first, rows, _, _), kept) in batch.iter().zip(kept_of) {
            let columns = (self.projected.iter().zip(&self.layout.outputs))
                .zip(values.by_ref())
                .map(|((c, o), v)| widen(v, self.layout.inputs[o.input].width, c.ty))
                .collect();
            self.ready.push_back(Chunk {
                first_row: first,
                rows,
                kept,
                columns,
            });
        }
        self.next = after;
        Ok(())
    }

    /// The error of a run that returned `r0 < 0`: a bad dictionary code names the
    /// file and row (found by reading the staged codes back).
    fn failure(&mut self, r0: i64, first: u64, rows: u64, input: MemHandle) -> DataError {
        let k = BAD_CODE_BASE - r0;
        if let Some((c, l)) = usize::try_from(k).ok().and_then(|k| {
            Some((
                self.inputs.get(k)?.clone(),
                self.layout.inputs.get(k)?.clone(),
            ))
        }) {
            let path = self.path(&c);
            let codes = match self.session.read(input, l.segment, rows * 4) {
                Ok(b) => b,
                Err(e) => return e.into(),
            };
            if let Values::U32(codes) = Values::from_le_bytes(ColumnType::Uint32, &codes) {
                if let Err(e) = check_codes(&codes, c.entries, &path, first) {
                    return e;
                }
            }
            return DataError::Invalid(format!(
                "{path}: a dictionary index in rows {first}..{} is out of range",
                first + rows
            ));
        }
        DataError::Operator {
            operator: SCAN_OPERATOR.to_string(),
            message: format!(
                "returned {r0} on rows {first}..{} (the program's windows do not fit its layout)",
                first + rows
            ),
        }
    }

    /// Frees the scan's memory (and its program, unless [`Scanner::use_loaded`]);
    /// returns everything the scan cost, opening included.
    pub fn close(mut self) -> Result<Meter, DataError> {
        self.drain();
        Ok(self.session.close()?)
    }

    /// Blocks (of every staged column) zone maps excluded so far: not read from the
    /// media.
    pub fn skipped_blocks(&self) -> u64 {
        self.skipped
    }

    /// Whether a predicate selects no row at all (the scan runs no chunk).
    pub fn selects_nothing(&self) -> bool {
        self.nothing
    }
}

/// Scans `columns` of the table at `table_dir` on the device, keeping the rows that
/// satisfy every predicate (see [`Scanner`]); dict columns come back with their
/// dictionaries.
pub fn scan(
    dev: &Device,
    table_dir: &str,
    columns: &[&str],
    predicates: &[Predicate],
    opts: &ScanOptions,
) -> Result<ScanResult, DataError> {
    scan_kept(dev, table_dir, columns, predicates, opts, None)
}

/// [`scan`], its staged inputs kept by `keeper` when given (see [`resident`]): a scan
/// whose entry is kept and unchanged stages nothing ([`ScanResult::reused`]).
pub fn scan_kept(
    dev: &Device,
    table_dir: &str,
    columns: &[&str],
    predicates: &[Predicate],
    opts: &ScanOptions,
    keeper: Option<&mut resident::ResidentScans<'_>>,
) -> Result<ScanResult, DataError> {
    let started = Instant::now();
    let session = Session::new(dev);
    let (mut sc, mut lease) = match keeper {
        Some(k) => {
            let (sc, l) = Scanner::open_kept(session, table_dir, columns, predicates, opts, k)?;
            (sc, l.map(|l| (k, l)))
        }
        None => (
            Scanner::open(session, table_dir, columns, predicates, opts)?,
            None,
        ),
    };
    let mut out = match result_columns(&mut sc, table_dir) {
        Ok(out) => out,
        Err(e) => {
            if let Some((k, l)) = lease.take() {
                k.release(l, false, None);
            }
            return Err(e);
        }
    };
    let reused = lease.as_ref().is_some_and(|(_, l)| l.staged);
    let rows = collect_chunks(&mut sc, &mut out);
    if rows.is_err() {
        // Copies still in flight end before their windows go back to the keeper.
        sc.drain();
    }
    if let Some((k, l)) = lease {
        let complete = rows.is_ok() && sc.finished();
        k.release(l, complete, complete.then(|| sc.input_files()));
    }
    let rows = rows?;
    let rows_scanned = sc.schema().rows;
    let meter = sc.close()?;
    Ok(ScanResult {
        columns: out,
        rows,
        rows_scanned,
        meter,
        wall_ns: started.elapsed().as_nanos() as u64,
        reused,
    })
}

/// The result's columns, empty, with their dictionaries.
fn result_columns(sc: &mut Scanner<'_>, table_dir: &str) -> Result<Vec<ScanColumn>, DataError> {
    let mut out = Vec::new();
    for c in sc.columns().to_vec() {
        let dictionary = if c.ty == ColumnType::Dict {
            let schema = sc.schema().clone();
            Some(device_dictionary(
                &mut sc.session,
                table_dir,
                &schema,
                &c.name,
            )?)
        } else {
            None
        };
        out.push(ScanColumn {
            name: c.name.clone(),
            ty: c.ty,
            scale: c.scale,
            values: Values::empty(c.ty),
            dictionary,
        });
    }
    Ok(out)
}

/// Runs every chunk, appending its kept values to `out`; the rows kept.
fn collect_chunks(sc: &mut Scanner<'_>, out: &mut [ScanColumn]) -> Result<u64, DataError> {
    let mut rows = 0;
    while let Some(chunk) = sc.next_chunk()? {
        rows += chunk.kept;
        for (col, bytes) in out.iter_mut().zip(&chunk.columns) {
            col.values.extend(Values::from_le_bytes(col.ty, bytes));
        }
    }
    Ok(rows)
}

/// Reads every `(handle, offset, len)` of device memory to the host at once (a batch's
/// kept values): every Memory Read submitted, then each waited for (even after a
/// failure), metered as [`Session::read`] meters one; an empty read sends nothing.
fn read_all(
    session: &mut Session<'_>,
    reads: &[(MemHandle, u64, u64)],
) -> Result<Vec<Vec<u8>>, DataError> {
    let piece = csx_host::proto::limits::MEM_IO_SIZE_MAX;
    let client = session.device().client();
    let mut ids = Vec::new();
    let mut failure = None;
    for (i, &(handle, offset, len)) in reads.iter().enumerate() {
        let mut at = 0;
        while at < len && failure.is_none() {
            let n = (len - at).min(piece);
            let op = Op::MemRead {
                handle,
                offset: offset + at,
                len: n,
            };
            match client.submit_private(op) {
                Ok(id) => ids.push((i, id, n)),
                Err(e) => failure = Some(DataError::device("reading kept values", e)),
            }
            at += n;
        }
    }
    let mut out: Vec<Vec<u8>> = reads
        .iter()
        .map(|r| Vec::with_capacity(r.2 as usize))
        .collect();
    let (mut commands, mut modelled, mut bytes) = (0, 0, 0);
    for (i, id, n) in ids {
        let c = match client.wait(id, None) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                failure.get_or_insert(DataError::device("reading kept values", e));
                continue;
            }
        };
        commands += 1;
        modelled += c.timing.modelled_ns;
        if !c.status.is_success() {
            let e = csx_host::CallError::from_completion("mem-read", c);
            failure.get_or_insert(DataError::device("reading kept values", e));
            continue;
        }
        match c.reply {
            Reply::Data(d) if d.len() as u64 == n => {
                out[i].extend_from_slice(&d);
                bytes += n;
            }
            _ => {
                failure.get_or_insert(DataError::Invalid(format!(
                    "reading kept values: the device answered a read of {n} bytes with another length"
                )));
            }
        }
    }
    session.meter.commands += commands;
    session.meter.modelled_ns += modelled;
    session.meter.bytes_to_host += bytes;
    match failure {
        Some(e) => Err(e),
        None => Ok(out),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_table_splits_into_a_multiple_of_the_engines_in_whole_blocks() {
        // TPC-H Q6 at SF 1: three 8-byte inputs and a 4-byte one, two 8-byte outputs.
        let rows = 6_002_926;
        let chunk = spread_chunk(rows, 1 << 20, 2 * 28 + 16, 4);
        assert_eq!(chunk % u64::from(crate::encoding::BLOCK_ROWS), 0);
        assert_eq!(rows.div_ceil(chunk) % 4, 0, "chunk {chunk}");
        // A set of four slots fits the scan's memory, in two batches.
        assert!(4 * chunk * 72 <= SCAN_MEMORY_BUDGET);
        assert_eq!(rows.div_ceil(chunk), 8, "chunk {chunk}");
        // A table of one asked chunk is spread too.
        for rows in [300_000_u64, 600_000] {
            let one = spread_chunk(rows, rows, 72, 4);
            assert_eq!(rows.div_ceil(one), 4, "{rows} rows");
        }
    }

    #[test]
    fn every_engine_gets_a_chunk_before_staging_overlaps_the_runs() {
        let mib = 1 << 20;
        // Four chunks of 50 MiB fit once, not twice: four at once, one set.
        assert_eq!(buffer_sets(50 * mib, 8, 4), (4, 1));
        // Twice fits: four at once, two sets.
        assert_eq!(buffer_sets(20 * mib, 8, 4), (4, 2));
        // Neither: as many as fit once.
        assert_eq!(buffer_sets(100 * mib, 8, 4), (2, 1));
        assert_eq!(buffer_sets(300 * mib, 8, 4), (1, 1));
        // No batch after the first: one set.
        assert_eq!(buffer_sets(mib, 3, 4), (3, 1));
    }

    #[test]
    fn small_chunks_and_one_engine_keep_the_chunk_asked() {
        assert_eq!(spread_chunk(20_000, 7_001, 12, 4), 7_001);
        assert_eq!(spread_chunk(50_000, 50_000, 12, 4), 50_000);
        assert_eq!(spread_chunk(6_002_926, 1 << 20, 72, 1), 1 << 20);
        assert_eq!(spread_chunk(0, 1, 72, 4), 1);
        // Already a multiple of the engines: as asked.
        assert_eq!(spread_chunk(400_000, 100_000, 12, 4), 100_000);
    }
}
