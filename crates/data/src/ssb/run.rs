//! Running an SSB query on a device, three ways (Delilah's degrees of offload, thesis
//! Fig. 12.7), and the host reference.
//!
//! Full offload ([`Split::Offload`]), as Delilah ran Q3.3:
//!
//! ```text
//! load     Memory Copy: the dimensions' columns, file -> device memory; LINEORDER's
//!          columns round by round (RunOptions::round_rows) into a slot per partition,
//!          the next round's copies running while this round is probed (and round 0's
//!          while the dimensions are built): "load" is the time spent waiting for them
//! dims     per dimension, at once on the engines: filter_<strategy> per selection
//!          column (a mask), then ssb_dim: the dimension's lookup table into the shared
//!          state (key -> compact group id), the groups' values to a small output
//! probe    each round in K partitions, at once on the engines, by the probe emitted
//!          for the query (ProbeKind::Emitted, `probe`: LINEORDER's selections, every
//!          foreign key looked up in a copy of the shared state's tables, the measure
//!          summed per group, in one pass) or by the operators (ProbeKind::Operator:
//!          filter_<strategy> per LINEORDER selection, then ssb_probe)
//! merge    ssb_merge: the partitions' sums into one array; only it crosses the link
//! ```
//!
//! Aggregation on the host ([`Split::HostAgg`]): the probes emit `{group, value}` per
//! joined row and the host sums them. Host only ([`Split::Host`]): the device only reads
//! the columns from its media and sends them; the host runs [`reference`].
//!
//! Each phase's modelled time and wall time are recorded ([`Phase`]; "prepare" is the
//! loading and JIT compilation of the operators, outside the modelled time); the meter
//! counts the bytes that crossed to the host.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use csx_host::proto::{EngineKind, MemHandle, Op};
use csx_host::Device;
use serde_json::Value;

use crate::columnar::{ColumnSchema, ColumnType, LocalTable, Schema, Values};
use crate::error::DataError;
use crate::ops::{put_u32, Meter, PendingCopy, Run, Session, Window};
use crate::predicate::{literal, Cmp, Compiled, Predicate};
use crate::scan::{
    compile_predicates, device_dictionary, device_schema, filter_params, FilterStrategy,
    COMBINE_AND, COMBINE_WRITE,
};
use crate::ssb::probe::{self, ProbeDim, ProbeLayout, ProbeMode};
use crate::ssb::queries::{DimSpec, KeyRange, Lit, QuerySpec};

/// Where the work happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// Every operator on the device; one array of sums crosses the link.
    Offload,
    /// Selection and join on the device; the joined rows' `{group, value}` cross the
    /// link and the host aggregates.
    HostAgg,
    /// The device only reads the columns; the host does everything.
    Host,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Offload, Split::HostAgg, Split::Host];

    pub fn name(self) -> &'static str {
        match self {
            Split::Offload => "offload",
            Split::HostAgg => "host-agg",
            Split::Host => "host",
        }
    }

    pub fn parse(s: &str) -> Option<Split> {
        Split::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// Which program probes LINEORDER.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// Raw eBPF emitted for the query ([`crate::ssb::probe`]): LINEORDER's selections,
    /// the joins and the sum in one pass, the tables' addresses in registers.
    Emitted,
    /// The operators of `sdk/ssb`: `filter_<strategy>` per LINEORDER selection (a
    /// mask), then `ssb_probe` (Delilah's operator chain).
    Operator,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 2] = [ProbeKind::Emitted, ProbeKind::Operator];

    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Emitted => "emitted",
            ProbeKind::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<ProbeKind> {
        ProbeKind::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// How a query runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    pub split: Split,
    pub engine: EngineKind,
    /// How the dimensions' selections run (and, with [`ProbeKind::Operator`],
    /// LINEORDER's).
    pub strategy: FilterStrategy,
    pub probe: ProbeKind,
    /// LINEORDER partitions probed at once; `None`: one per device engine.
    pub partitions: Option<u32>,
    /// Where in the shared state the lookup tables go.
    pub state_offset: u64,
    /// LINEORDER rows staged in device memory at a time.
    pub round_rows: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            split: Split::Offload,
            engine: EngineKind::Jit,
            strategy: FilterStrategy::Bitmask,
            probe: ProbeKind::Emitted,
            partitions: None,
            state_offset: 0,
            round_rows: ROUND_ROWS_DEFAULT,
        }
    }
}

/// LINEORDER rows staged at a time by default: 4 MiB per 32-bit column (rounds are
/// small so the first one, the only one not staged during another's probe, is short).
pub const ROUND_ROWS_DEFAULT: u64 = 1 << 20;
/// The operator name of the emitted probe in a run's session.
const EMITTED_PROBE: &str = "ssb_probe_emitted";
/// Most partitions probed at once.
pub const PARTITIONS_MAX: u32 = 16;
/// Most groups a query's result may have (the probes' sum arrays are dense).
pub const GROUPS_MAX: u64 = 1 << 20;

/// One result row: the group's values (strings for dict columns, numbers otherwise)
/// and the sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultRow {
    pub keys: Vec<Value>,
    pub value: u64,
}

/// One phase of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    pub name: &'static str,
    pub modelled_ns: u64,
    pub wall_ns: u64,
    /// Of the wall time, what the device's VMs ran ([`Meter::execute_span_ns`]): the
    /// rest is commands, copies, staging and the host.
    pub vm_ns: u64,
    /// Device commands issued in the phase.
    pub commands: u64,
}

/// A query's answer and what it cost.
#[derive(Clone, Debug)]
pub struct QueryRun {
    pub query: &'static str,
    pub rows: Vec<ResultRow>,
    pub options: RunOptions,
    pub meter: Meter,
    pub phases: Vec<Phase>,
    /// Host time spent computing (aggregating, or the whole query for `host`).
    pub host_ns: u64,
    pub wall_ns: u64,
    pub partitions: u32,
    /// LINEORDER rows joined.
    pub joined: u64,
}

// ---------------------------------------------------------------------------------------
// Columns, wherever they are.

/// Where the reference reads columns from.
pub trait ColumnSource {
    fn schema(&mut self, table: &str) -> Result<Schema, DataError>;
    fn values(&mut self, table: &str, column: &str) -> Result<Values, DataError>;
    fn dictionary(&mut self, table: &str, column: &str) -> Result<Vec<String>, DataError>;
}

/// A dataset directory on the local disk.
#[derive(Debug)]
pub struct LocalSource {
    dir: std::path::PathBuf,
    tables: HashMap<String, LocalTable>,
}

impl LocalSource {
    pub fn new(dir: &std::path::Path) -> LocalSource {
        LocalSource {
            dir: dir.to_path_buf(),
            tables: HashMap::new(),
        }
    }

    fn table(&mut self, name: &str) -> Result<&LocalTable, DataError> {
        if !self.tables.contains_key(name) {
            let t = LocalTable::open(&self.dir.join(name))?;
            self.tables.insert(name.to_string(), t);
        }
        Ok(&self.tables[name])
    }
}

impl ColumnSource for LocalSource {
    fn schema(&mut self, table: &str) -> Result<Schema, DataError> {
        Ok(self.table(table)?.schema.clone())
    }

    fn values(&mut self, table: &str, column: &str) -> Result<Values, DataError> {
        self.table(table)?.read(column)
    }

    fn dictionary(&mut self, table: &str, column: &str) -> Result<Vec<String>, DataError> {
        self.table(table)?.dictionary(column)
    }
}

/// A dataset on the device, read whole to the host (the host-only split).
struct DeviceSource<'s, 'd> {
    session: &'s mut Session<'d>,
    dir: String,
    schemas: HashMap<String, Schema>,
}

impl ColumnSource for DeviceSource<'_, '_> {
    fn schema(&mut self, table: &str) -> Result<Schema, DataError> {
        if !self.schemas.contains_key(table) {
            let s = device_schema(self.session, &format!("{}/{table}", self.dir))?;
            self.schemas.insert(table.to_string(), s);
        }
        Ok(self.schemas[table].clone())
    }

    fn values(&mut self, table: &str, column: &str) -> Result<Values, DataError> {
        let schema = self.schema(table)?;
        let c = schema.column(column)?;
        let path = format!("{}/{table}/{}", self.dir, c.file_name());
        let bytes = self.session.read_file(&path, schema.rows * c.ty.width())?;
        let values = Values::from_le_bytes(c.ty, &bytes);
        if let Values::U32(codes) = &values {
            if c.ty == ColumnType::Dict {
                crate::columnar::check_codes(codes, c.entries, &path, 0)?;
            }
        }
        Ok(values)
    }

    fn dictionary(&mut self, table: &str, column: &str) -> Result<Vec<String>, DataError> {
        let schema = self.schema(table)?;
        device_dictionary(
            self.session,
            &format!("{}/{table}", self.dir),
            &schema,
            column,
        )
    }
}

// ---------------------------------------------------------------------------------------
// Literals.

/// A literal comparison on column `col` as a [`Cmp`] in stored units.
pub fn cmp_of(col: &ColumnSchema, dict: Option<&[String]>, lit: Lit) -> Result<Cmp, DataError> {
    let one = |t: &str| literal(col, dict, t);
    // The first code at or after a string (dict columns are sorted).
    let code_at = |t: &str| -> Result<i64, DataError> {
        match dict {
            Some(d) if col.ty == ColumnType::Dict => {
                Ok(d.partition_point(|e| e.as_str() < t) as i64)
            }
            _ => one(t).map(|v| v.unwrap_or(0)),
        }
    };
    Ok(match lit {
        Lit::Eq(t) => match one(t)? {
            Some(v) => Cmp::Eq(v),
            None => Cmp::In(Vec::new()),
        },
        Lit::Lt(t) => Cmp::Lt(code_at(t)?),
        Lit::Between(a, b) => {
            let hi = match (dict, col.ty) {
                (Some(d), ColumnType::Dict) => d.partition_point(|e| e.as_str() <= b) as i64 - 1,
                _ => code_at(b)?,
            };
            Cmp::Between(code_at(a)?, hi)
        }
        Lit::In(list) => {
            let mut v = Vec::new();
            for t in list {
                if let Some(x) = one(t)? {
                    v.push(x);
                }
            }
            Cmp::In(v)
        }
    })
}

/// The predicates of `preds` on `table`, compiled against its schema and dictionaries.
fn predicates(
    src: &mut dyn ColumnSource,
    table: &str,
    preds: &[(&str, Lit)],
) -> Result<Vec<Predicate>, DataError> {
    let schema = src.schema(table)?;
    let mut out = Vec::new();
    for &(col, lit) in preds {
        let c = schema.column(col)?;
        let dict = if c.ty == ColumnType::Dict {
            Some(src.dictionary(table, col)?)
        } else {
            None
        };
        out.push(Predicate::new(col, cmp_of(c, dict.as_deref(), lit)?));
    }
    Ok(out)
}

/// A group column's value as the result shows it.
fn group_value(dict: Option<&[String]>, v: i64) -> Value {
    match dict {
        Some(d) => Value::String(d.get(v as usize).cloned().unwrap_or_default()),
        None => Value::from(v),
    }
}

/// Orders result rows as the queries do: the last key (the year) ascending, the sum
/// descending, then the other keys.
pub fn sort_rows(rows: &mut [ResultRow]) {
    rows.sort_by(|a, b| {
        let year = |r: &ResultRow| r.keys.last().and_then(Value::as_i64).unwrap_or(0);
        year(a)
            .cmp(&year(b))
            .then(b.value.cmp(&a.value))
            .then_with(|| format!("{:?}", a.keys).cmp(&format!("{:?}", b.keys)))
    });
}

// ---------------------------------------------------------------------------------------
// The host reference.

/// The query computed on the host from `src`'s columns, straight from its definition:
/// hash joins on the dimensions' keys, a map of sums.
pub fn reference(src: &mut dyn ColumnSource, q: &QuerySpec) -> Result<Vec<ResultRow>, DataError> {
    let mut lookups: Vec<(HashMap<i64, Value>, Values)> = Vec::new();
    for dim in q.dims {
        let preds = predicates(src, dim.table, dim.preds)?;
        let pred_values: Vec<Values> = preds
            .iter()
            .map(|p| src.values(dim.table, &p.column))
            .collect::<Result<_, _>>()?;
        let keys = src.values(dim.table, dim.key)?;
        let group = match dim.group {
            Some((g, _)) => {
                let schema = src.schema(dim.table)?;
                let dict = if schema.column(g)?.ty == ColumnType::Dict {
                    Some(src.dictionary(dim.table, g)?)
                } else {
                    None
                };
                Some((src.values(dim.table, g)?, dict))
            }
            None => None,
        };
        let mut map = HashMap::new();
        for i in 0..keys.len() {
            if preds
                .iter()
                .zip(&pred_values)
                .all(|(p, v)| p.matches(v.get_i64(i)))
            {
                let gv = match &group {
                    Some((v, dict)) => group_value(dict.as_deref(), v.get_i64(i)),
                    None => Value::Null,
                };
                map.insert(keys.get_i64(i), gv);
            }
        }
        lookups.push((map, src.values("lineorder", dim.fk)?));
    }
    let lo_preds = predicates(src, "lineorder", q.lo_preds)?;
    let lo_values: Vec<Values> = lo_preds
        .iter()
        .map(|p| src.values("lineorder", &p.column))
        .collect::<Result<_, _>>()?;
    let measure: Vec<Values> = q
        .measure
        .columns()
        .iter()
        .map(|c| src.values("lineorder", c))
        .collect::<Result<_, _>>()?;
    let n = measure[0].len();
    let mut sums: BTreeMap<String, (Vec<Value>, u64)> = BTreeMap::new();
    'rows: for i in 0..n {
        if !lo_preds
            .iter()
            .zip(&lo_values)
            .all(|(p, v)| p.matches(v.get_i64(i)))
        {
            continue;
        }
        let mut keys = Vec::new();
        for (map, fk) in &lookups {
            match map.get(&fk.get_i64(i)) {
                Some(Value::Null) => {}
                Some(v) => keys.push(v.clone()),
                None => continue 'rows,
            }
        }
        let v = measure.iter().map(|m| m.get_i64(i) as u64).product::<u64>();
        let e = sums.entry(format!("{keys:?}")).or_insert((keys, 0));
        e.1 += v;
    }
    let mut rows: Vec<ResultRow> = sums
        .into_values()
        .map(|(keys, value)| ResultRow { keys, value })
        .collect();
    sort_rows(&mut rows);
    Ok(rows)
}

// ---------------------------------------------------------------------------------------
// On the device.

/// A phase timer: modelled time from the meter, wall time from the clock.
struct Clock {
    started: Instant,
    at: Meter,
}

impl Clock {
    fn start(s: &Session) -> Clock {
        Clock {
            started: Instant::now(),
            at: s.meter,
        }
    }

    /// Adds the time since the start to phase `name` (a phase met twice accumulates).
    fn phase(self, s: &Session, name: &'static str, phases: &mut Vec<Phase>) {
        let d = s.meter.since(&self.at);
        let wall_ns = self.started.elapsed().as_nanos() as u64;
        match phases.iter_mut().find(|p| p.name == name) {
            Some(p) => {
                p.modelled_ns += d.modelled_ns;
                p.wall_ns += wall_ns;
                p.vm_ns += d.execute_span_ns;
                p.commands += d.commands;
            }
            None => phases.push(Phase {
                name,
                modelled_ns: d.modelled_ns,
                wall_ns,
                vm_ns: d.execute_span_ns,
                commands: d.commands,
            }),
        }
    }
}

/// A dimension staged on the device.
struct StagedDim {
    spec: &'static DimSpec,
    rows: u64,
    keys: MemHandle,
    mask: MemHandle,
    scratch: Option<MemHandle>,
    filters: Vec<(MemHandle, Vec<(u64, u64)>)>,
    nothing: bool,
    group: Option<(MemHandle, u32, u32, Option<Vec<String>>)>,
    remap: MemHandle,
    out: MemHandle,
    lut_offset: u64,
    key_base: u32,
    lut_entries: u32,
}

fn fill(s: &mut Session, h: MemHandle, len: u64, byte: u8) -> Result<(), DataError> {
    s.device()
        .client()
        .call_ok(Op::MemFill {
            handle: h,
            offset: 0,
            len,
            byte,
        })
        .map_err(|e| DataError::device("filling device memory", e))?;
    Ok(())
}

fn dim_params(d: &StagedDim) -> Vec<u8> {
    let mut p = Vec::new();
    put_u32(&mut p, d.lut_offset as u32);
    put_u32(&mut p, d.lut_entries);
    put_u32(&mut p, d.key_base);
    let (count, base) = d.group.as_ref().map_or((0, 0), |g| (g.1, g.2));
    put_u32(&mut p, count);
    put_u32(&mut p, base);
    put_u32(&mut p, 0);
    p
}

/// The partitions of a round of `n` rows: `(first row, rows)`, 64-row aligned.
fn round_parts(n: u64, partitions: u64) -> Vec<(u64, u64)> {
    let part = n.div_ceil(partitions).next_multiple_of(64);
    (0..partitions)
        .map(|p| (p * part, n.saturating_sub(p * part).min(part)))
        .filter(|&(_, len)| len > 0)
        .collect()
}

/// Where LINEORDER's rounds are staged: `slots[set * partitions + p]` holds partition
/// p's columns, column `i` at `i * col_bytes`.
struct LoStaging<'a> {
    dir: &'a str,
    cols: &'a [&'static str],
    col_bytes: u64,
    slots: &'a [MemHandle],
    partitions: u64,
    round: u64,
    rows: u64,
}

impl LoStaging<'_> {
    /// Starts the Memory Copies of round `r` into slot set `set` (on the device's
    /// transfer workers; the caller waits for them).
    fn stage(&self, s: &mut Session, r: u64, set: u64) -> Result<Vec<PendingCopy>, DataError> {
        let start = r * self.round;
        let n = self.round.min(self.rows - start);
        let mut copies = Vec::new();
        for (p, (off, len)) in round_parts(n, self.partitions).into_iter().enumerate() {
            let slot = self.slots[(set * self.partitions) as usize + p];
            for (i, c) in self.cols.iter().enumerate() {
                let path = format!("{}/{c}.col", self.dir);
                let at = (start + off) * 4;
                match s.start_copy_file(&path, at, len * 4, slot, i as u64 * self.col_bytes) {
                    Ok(x) => copies.push(x),
                    Err(e) => {
                        let _ = s.wait_copies(copies);
                        return Err(e);
                    }
                }
            }
        }
        Ok(copies)
    }
}

/// Runs `q` over the dataset at `data_dir` on the device.
pub fn run(
    dev: &Device,
    data_dir: &str,
    q: &'static QuerySpec,
    opts: &RunOptions,
) -> Result<QueryRun, DataError> {
    let started = Instant::now();
    let data_dir = data_dir.trim_end_matches('/');
    let mut s = Session::new(dev, opts.engine)?;
    let partitions = opts
        .partitions
        .unwrap_or(s.engines() as u32)
        .clamp(1, PARTITIONS_MAX);
    let mut phases = Vec::new();
    if opts.split == Split::Host {
        let clock = Clock::start(&s);
        let host_start = Instant::now();
        let mut src = DeviceSource {
            session: &mut s,
            dir: data_dir.to_string(),
            schemas: HashMap::new(),
        };
        let rows = reference(&mut src, q)?;
        let host_ns = host_start.elapsed().as_nanos() as u64;
        clock.phase(&s, "read+host", &mut phases);
        let meter = s.close()?;
        return Ok(QueryRun {
            query: q.name,
            rows,
            options: *opts,
            meter,
            phases,
            host_ns,
            wall_ns: started.elapsed().as_nanos() as u64,
            partitions,
            joined: 0,
        });
    }
    if opts.round_rows == 0 || !opts.round_rows.is_multiple_of(64) {
        return Err(DataError::Invalid(format!(
            "round of {} rows: must be a positive multiple of 64",
            opts.round_rows
        )));
    }
    let info = dev
        .identify()
        .map_err(|e| DataError::device("identify", e))?;

    // Prepare: load and activate (JIT-compile) every operator first, so the phases
    // below time execution alone (Delilah: "a series of operations": transfer,
    // prepare, execute).
    let clock = Clock::start(&s);
    for op in [opts.strategy.operator(), "ssb_dim", "ssb_merge"] {
        s.prepare(op)?;
    }
    if opts.probe == ProbeKind::Operator {
        s.prepare("ssb_probe")?;
    }
    clock.phase(&s, "prepare", &mut phases);

    // Load: schemas, dictionaries, and the dimensions' columns.
    let clock = Clock::start(&s);
    let lo_dir = format!("{data_dir}/lineorder");
    let lo_schema = device_schema(&mut s, &lo_dir)?;
    let mut dims: Vec<StagedDim> = Vec::new();
    let mut lut_at = opts.state_offset.next_multiple_of(8);
    for spec in q.dims {
        let dir = format!("{data_dir}/{}", spec.table);
        let schema = device_schema(&mut s, &dir)?;
        let rows = schema.rows;
        let (key_base, key_last) = match spec.keys {
            KeyRange::Dense => (1u32, rows as u32),
            KeyRange::Fixed(lo, hi) => (lo, hi),
        };
        let lut_entries = key_last.saturating_sub(key_base) + 1;
        let words = rows.div_ceil(64).max(1);
        let keys = s.alloc(rows * 4)?;
        s.copy_file(&format!("{dir}/{}.col", spec.key), 0, rows * 4, keys, 0)?;
        let mask = s.alloc(words * 8)?;
        let scratch = if opts.strategy == FilterStrategy::Accel {
            Some(s.alloc(3 * words * 8)?)
        } else {
            None
        };
        // Selections, each column's predicates merged.
        let mut preds = Vec::new();
        for &(col, lit) in spec.preds {
            let c = schema.column(col)?;
            let dict = if c.ty == ColumnType::Dict {
                Some(device_dictionary(&mut s, &dir, &schema, col)?)
            } else {
                None
            };
            preds.push(Predicate::new(col, cmp_of(c, dict.as_deref(), lit)?));
        }
        let mut filters = Vec::new();
        let mut nothing = false;
        for (col, ty, compiled) in compile_predicates(&schema, &preds)? {
            match compiled {
                Compiled::Nothing => nothing = true,
                Compiled::All => {}
                Compiled::Ranges(r) => {
                    let h = s.alloc(rows * ty.width())?;
                    s.copy_file(&format!("{dir}/{col}.col"), 0, rows * ty.width(), h, 0)?;
                    filters.push((h, r));
                }
            }
        }
        let group = match spec.group {
            Some((g, range)) => {
                let c = schema.column(g)?;
                let h = s.alloc(rows * 4)?;
                s.copy_file(&format!("{dir}/{g}.col"), 0, rows * 4, h, 0)?;
                let (count, base, dict) = match (c.ty, range) {
                    (ColumnType::Dict, _) => (
                        c.entries as u32,
                        0,
                        Some(device_dictionary(&mut s, &dir, &schema, g)?),
                    ),
                    (_, Some((lo, hi))) => (hi - lo + 1, lo, None),
                    (_, None) => {
                        return Err(DataError::Invalid(format!(
                            "group column {g} of {} is {} without a value range",
                            spec.table,
                            c.ty.name()
                        )))
                    }
                };
                Some((h, count.max(1), base, dict))
            }
            None => None,
        };
        let remap = s.alloc(2 * u64::from(group.as_ref().map_or(1, |g| g.1)))?;
        let out = s.alloc(4 * u64::from(group.as_ref().map_or(1, |g| g.1)))?;
        let lut_offset = lut_at;
        lut_at = (lut_at + 2 * u64::from(lut_entries)).next_multiple_of(8);
        dims.push(StagedDim {
            spec,
            rows,
            keys,
            mask,
            scratch,
            filters,
            nothing,
            group,
            remap,
            out,
            lut_offset,
            key_base,
            lut_entries,
        });
    }
    if lut_at > info.state_size_bytes {
        return Err(DataError::TooLarge {
            what: format!(
                "{}'s lookup tables in the shared state (from offset {})",
                q.name, opts.state_offset
            ),
            needed: lut_at,
            limit: info.state_size_bytes,
        });
    }
    // LINEORDER: the columns the probe reads, its own selections, and the staging
    // slots: one buffer per partition (its columns back to back, then, for the
    // emitted probe, room for the lookup tables' copies), in two sets when there are
    // several rounds, so that the next round is staged while this one is probed.
    let rows = lo_schema.rows;
    let round = opts.round_rows.min(rows.next_multiple_of(64)).max(64);
    let rounds = rows.div_ceil(round).max(1);
    let part_max = round.div_ceil(u64::from(partitions)).next_multiple_of(64);
    let mut lo_cols: Vec<&'static str> = q.dims.iter().map(|d| d.fk).collect();
    for c in q.measure.columns() {
        if !lo_cols.contains(c) {
            lo_cols.push(c);
        }
    }
    let mut lo_preds = Vec::new();
    for &(col, lit) in q.lo_preds {
        let c = lo_schema.column(col)?;
        let dict = if c.ty == ColumnType::Dict {
            Some(device_dictionary(&mut s, &lo_dir, &lo_schema, col)?)
        } else {
            None
        };
        lo_preds.push(Predicate::new(col, cmp_of(c, dict.as_deref(), lit)?));
    }
    let mut lo_nothing = false;
    let mut lo_filters: Vec<(&'static str, Vec<(u64, u64)>)> = Vec::new();
    for (col, _, compiled) in compile_predicates(&lo_schema, &lo_preds)? {
        let name = q
            .lo_preds
            .iter()
            .find(|p| p.0 == col)
            .expect("a predicate column")
            .0;
        match compiled {
            Compiled::Nothing => lo_nothing = true,
            Compiled::All => {}
            Compiled::Ranges(r) => {
                if !lo_cols.contains(&name) {
                    lo_cols.push(name);
                }
                lo_filters.push((name, r));
            }
        }
    }
    for c in &lo_cols {
        if lo_schema.column(c)?.ty.width() != 4 {
            return Err(DataError::Operator {
                operator: "ssb_probe".to_string(),
                message: format!("column {c} is not 32-bit"),
            });
        }
    }
    let emitted = opts.probe == ProbeKind::Emitted;
    let col_bytes = part_max * 4;
    let segment = |c: &str| -> u64 {
        lo_cols
            .iter()
            .position(|x| *x == c)
            .expect("a staged column") as u64
            * col_bytes
    };
    let mut in_bytes = lo_cols.len() as u64 * col_bytes;
    let mut lut_segments = Vec::new();
    if emitted {
        for d in &dims {
            lut_segments.push(in_bytes);
            in_bytes += probe::copy_bytes(d.key_base, d.lut_entries);
        }
    }
    if in_bytes > i32::MAX as u64 {
        return Err(DataError::TooLarge {
            what: format!("{}'s staging slot of {part_max} rows", q.name),
            needed: in_bytes,
            limit: i32::MAX as u64,
        });
    }
    let sets = if rounds > 1 { 2 } else { 1 };
    let mut slots = Vec::new();
    for _ in 0..sets * u64::from(partitions) {
        slots.push(s.alloc(in_bytes)?);
    }
    let staging = LoStaging {
        dir: &lo_dir,
        cols: &lo_cols,
        col_bytes,
        slots: &slots,
        partitions: u64::from(partitions),
        round,
        rows,
    };
    let mut empty = lo_nothing || rows == 0 || dims.iter().any(|d| d.nothing || d.rows == 0);
    // Round 0's copies run while the dimensions are built.
    let mut pending = if empty {
        None
    } else {
        Some(staging.stage(&mut s, 0, 0)?)
    };
    clock.phase(&s, "load", &mut phases);

    // Dimensions: selections, then lookup tables, each step at once on the engines.
    let clock = Clock::start(&s);
    let steps = dims.iter().map(|d| d.filters.len()).max().unwrap_or(0);
    for d in dims.iter().filter(|d| d.filters.is_empty()) {
        fill(&mut s, d.mask, d.rows.div_ceil(64).max(1) * 8, 0xff)?;
    }
    for step in 0..steps {
        let runs: Vec<Run> = dims
            .iter()
            .filter(|d| step < d.filters.len())
            .map(|d| {
                let (col, ranges) = &d.filters[step];
                let mut w: Vec<Window> =
                    vec![(*col, 0, d.rows * 4), (d.mask, 0, d.rows.div_ceil(64) * 8)];
                if let Some(sc) = d.scratch {
                    w.push((sc, 0, 3 * d.rows.div_ceil(64) * 8));
                }
                let combine = if step == 0 {
                    COMBINE_WRITE
                } else {
                    COMBINE_AND
                };
                Run::new(opts.strategy.operator(), w)
                    .cparams(4 | combine << 8, 0)
                    .params(filter_params(ranges))
            })
            .collect();
        if !empty {
            s.execute_all(&runs)?;
        }
    }
    let mut groups: Vec<Vec<u32>> = Vec::new();
    if !empty {
        let runs: Vec<Run> = dims
            .iter()
            .map(|d| {
                let run = Run::new("ssb_dim", Vec::new()).params(dim_params(d));
                match &d.group {
                    Some((h, count, ..)) => {
                        let count = u64::from(*count);
                        let w = vec![
                            (d.keys, 0, d.rows * 4),
                            (d.mask, 0, d.rows.div_ceil(64) * 8),
                            (*h, 0, d.rows * 4),
                            (d.remap, 0, 2 * count),
                            (d.out, 0, 4 * count),
                        ];
                        Run { windows: w, ..run }
                    }
                    None => no_group_windows(run, d),
                }
            })
            .collect();
        let counts = s.execute_all(&runs)?;
        for (d, &n) in dims.iter().zip(&counts) {
            let bytes = s.read(d.out, 0, n * 4)?;
            groups.push(
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            );
        }
        empty = counts.contains(&0);
    }
    clock.phase(&s, "dims", &mut phases);

    // Probe: LINEORDER in rounds, each in partitions at once on the engines.
    if empty {
        if let Some(c) = pending.take() {
            let clock = Clock::start(&s);
            s.wait_copies(c)?;
            clock.phase(&s, "load", &mut phases);
        }
    }
    let ngroups: Vec<u64> = if empty {
        vec![0; dims.len()]
    } else {
        groups.iter().map(|g| g.len() as u64).collect()
    };
    let total_groups: u64 = ngroups.iter().product::<u64>().max(1);
    if total_groups > GROUPS_MAX {
        return Err(DataError::TooLarge {
            what: format!("{}'s groups", q.name),
            needed: total_groups,
            limit: GROUPS_MAX,
        });
    }
    let mut strides = vec![1u64; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * ngroups[d + 1];
    }
    let mut sums = vec![0u64; total_groups as usize];
    let mut joined_total = 0;
    let mut host_ns = 0u64;
    if !empty {
        if emitted {
            let clock = Clock::start(&s);
            let layout = ProbeLayout {
                rows_max: part_max,
                filters: lo_filters
                    .iter()
                    .map(|(c, r)| (segment(c), r.clone()))
                    .collect(),
                dims: dims
                    .iter()
                    .enumerate()
                    .map(|(i, d)| ProbeDim {
                        fk_segment: segment(d.spec.fk),
                        lut_segment: lut_segments[i],
                        lut_offset: d.lut_offset,
                        entries: d.lut_entries,
                        key_base: d.key_base,
                        groups: ngroups[i],
                        stride: strides[i],
                    })
                    .collect(),
                measure: q.measure.columns().iter().map(|c| segment(c)).collect(),
                mode: match opts.split {
                    Split::Offload => ProbeMode::Aggregate {
                        groups: total_groups,
                    },
                    _ => ProbeMode::Emit,
                },
                in_bytes,
            };
            s.load_raw(EMITTED_PROBE, &probe::emit(&layout))?;
            clock.phase(&s, "prepare", &mut phases);
        }
        // The operator probe's selection mask of a round (and the accelerated filter's
        // scratch).
        let mask = if !emitted && !lo_filters.is_empty() {
            s.alloc(round / 8)?
        } else {
            MemHandle::NONE
        };
        let scratch =
            if !emitted && opts.strategy == FilterStrategy::Accel && !lo_filters.is_empty() {
                Some(s.alloc(3 * round / 8)?)
            } else {
                None
            };
        // Offload: one array of sums per partition (emitted: added to over the rounds,
        // zeroed once here) or per partition and round (the operator zeroes its own);
        // host-agg: the joined rows of a round.
        let partials_count = if emitted {
            u64::from(partitions)
        } else {
            rounds * u64::from(partitions)
        };
        let out = match opts.split {
            Split::Offload => {
                let bytes = partials_count * total_groups * 8;
                let h = s.alloc(bytes)?;
                if emitted {
                    fill(&mut s, h, bytes, 0)?;
                }
                h
            }
            _ => s.alloc(round * 8)?,
        };
        for r in 0..rounds {
            let set = r % sets;
            let start = r * round;
            let n = round.min(rows - start);
            // Waiting for the staged columns is loading, as in Delilah's breakdown.
            let clock = Clock::start(&s);
            let copies = match pending.take() {
                Some(c) => c,
                None => staging.stage(&mut s, r, set)?,
            };
            s.wait_copies(copies)?;
            if r + 1 < rounds {
                pending = Some(staging.stage(&mut s, r + 1, (r + 1) % sets)?);
            }
            clock.phase(&s, "load", &mut phases);
            let probing = Clock::start(&s);
            let parts = round_parts(n, u64::from(partitions));
            let slot_of = |p: usize| slots[(set * u64::from(partitions)) as usize + p];
            let out_window = |p: usize, off: u64, len: u64| -> Window {
                match opts.split {
                    Split::Offload if emitted => {
                        (out, p as u64 * total_groups * 8, total_groups * 8)
                    }
                    Split::Offload => (
                        out,
                        (r * u64::from(partitions) + p as u64) * total_groups * 8,
                        total_groups * 8,
                    ),
                    _ => (out, off * 8, len * 8),
                }
            };
            let runs: Vec<Run> = if emitted {
                parts
                    .iter()
                    .enumerate()
                    .map(|(p, &(off, len))| {
                        Run::new(
                            EMITTED_PROBE,
                            vec![(slot_of(p), 0, in_bytes), out_window(p, off, len)],
                        )
                        .cparams(len, 0)
                    })
                    .collect()
            } else {
                for (i, (col, ranges)) in lo_filters.iter().enumerate() {
                    let runs: Vec<Run> = parts
                        .iter()
                        .enumerate()
                        .map(|(p, &(off, len))| {
                            let mut w: Vec<Window> = vec![
                                (slot_of(p), segment(col), len * 4),
                                (mask, off / 8, len.div_ceil(64) * 8),
                            ];
                            if let Some(sc) = scratch {
                                w.push((sc, 3 * off / 8, 3 * len.div_ceil(64) * 8));
                            }
                            let combine = if i == 0 { COMBINE_WRITE } else { COMBINE_AND };
                            Run::new(opts.strategy.operator(), w)
                                .cparams(4 | combine << 8, 0)
                                .params(filter_params(ranges))
                        })
                        .collect();
                    s.execute_all(&runs)?;
                }
                parts
                    .iter()
                    .enumerate()
                    .map(|(p, &(off, len))| {
                        let slot = slot_of(p);
                        let mut w: Vec<Window> = Vec::new();
                        let mut params = Vec::new();
                        put_u32(
                            &mut params,
                            if opts.split == Split::Offload { 0 } else { 1 },
                        );
                        put_u32(&mut params, dims.len() as u32);
                        let mut dim_fields = Vec::new();
                        for (d, stride) in dims.iter().zip(&strides) {
                            dim_fields.push((w.len() as u32, d, *stride));
                            w.push((slot, segment(d.spec.fk), len * 4));
                        }
                        let a = w.len() as u32;
                        let cols = q.measure.columns();
                        w.push((slot, segment(cols[0]), len * 4));
                        let b = if cols.len() > 1 {
                            w.push((slot, segment(cols[1]), len * 4));
                            w.len() as u32 - 1
                        } else {
                            u32::MAX
                        };
                        let m = if lo_filters.is_empty() {
                            u32::MAX
                        } else {
                            w.push((mask, off / 8, len.div_ceil(64) * 8));
                            w.len() as u32 - 1
                        };
                        let o = w.len() as u32;
                        w.push(out_window(p, off, len));
                        put_u32(&mut params, m);
                        put_u32(&mut params, a);
                        put_u32(&mut params, b);
                        put_u32(&mut params, o);
                        put_u32(&mut params, total_groups as u32);
                        put_u32(&mut params, 0);
                        for (fw, d, stride) in dim_fields {
                            put_u32(&mut params, fw);
                            put_u32(&mut params, d.lut_offset as u32);
                            put_u32(&mut params, d.lut_entries);
                            put_u32(&mut params, d.key_base);
                            put_u32(&mut params, stride as u32);
                        }
                        Run::new("ssb_probe", w).params(params)
                    })
                    .collect()
            };
            let joined = s.execute_all(&runs)?;
            joined_total += joined.iter().sum::<u64>();
            if opts.split == Split::HostAgg {
                for (&(off, _), &k) in parts.iter().zip(&joined) {
                    let bytes = s.read(out, off * 8, k * 8)?;
                    let t = Instant::now();
                    for c in bytes.chunks_exact(8) {
                        let g = u32::from_le_bytes(c[..4].try_into().expect("4 bytes")) as usize;
                        let v = u32::from_le_bytes(c[4..].try_into().expect("4 bytes"));
                        match sums.get_mut(g) {
                            Some(x) => *x += u64::from(v),
                            None => {
                                return Err(DataError::Operator {
                                    operator: "ssb_probe".to_string(),
                                    message: format!("emitted group {g}, there are {total_groups}"),
                                })
                            }
                        }
                    }
                    host_ns += t.elapsed().as_nanos() as u64;
                }
            }
            probing.phase(&s, "probe", &mut phases);
        }
        if opts.split == Split::Offload {
            let clock = Clock::start(&s);
            let fin = s.alloc(total_groups * 8)?;
            let run = Run::new(
                "ssb_merge",
                vec![
                    (out, 0, partials_count * total_groups * 8),
                    (fin, 0, total_groups * 8),
                ],
            )
            .cparams(total_groups, partials_count);
            s.execute(&run)?;
            let bytes = s.read(fin, 0, total_groups * 8)?;
            for (x, c) in sums.iter_mut().zip(bytes.chunks_exact(8)) {
                *x = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            }
            clock.phase(&s, "merge", &mut phases);
        }
    } else {
        Clock::start(&s).phase(&s, "probe", &mut phases);
    }

    // Decode the groups.
    let mut rows_out = Vec::new();
    if !empty && joined_total > 0 {
        for (g, &v) in sums.iter().enumerate() {
            let mut keys = Vec::new();
            let mut joined_group = true;
            for (i, d) in dims.iter().enumerate() {
                let id = (g as u64 / strides[i]) % ngroups[i];
                if let Some((_, _, _, dict)) = &d.group {
                    keys.push(group_value(
                        dict.as_deref(),
                        i64::from(groups[i][id as usize]),
                    ));
                }
                joined_group &= id < ngroups[i];
            }
            if v > 0 && joined_group {
                rows_out.push(ResultRow { keys, value: v });
            }
        }
    }
    sort_rows(&mut rows_out);
    let meter = s.close()?;
    Ok(QueryRun {
        query: q.name,
        rows: rows_out,
        options: *opts,
        meter,
        phases,
        host_ns,
        wall_ns: started.elapsed().as_nanos() as u64,
        partitions,
        joined: joined_total,
    })
}

/// The windows of ssb_dim for a dimension without a group column: keys, mask, then
/// the output at index 4 (windows 2 and 3 unused but distinct, one byte each of the
/// scratch allocation).
fn no_group_windows(run: Run, d: &StagedDim) -> Run {
    let w = vec![
        (d.keys, 0, d.rows * 4),
        (d.mask, 0, d.rows.div_ceil(64) * 8),
        (d.remap, 0, 1),
        (d.remap, 1, 1),
        (d.out, 0, 4),
    ];
    Run { windows: w, ..run }
}
