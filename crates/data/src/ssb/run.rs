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

use csx_host::proto::{EngineKind, MemHandle, ProgramIndex, ProgramType};
use csx_host::{Device, ExecuteRequest};
use serde_json::Value;

use crate::columnar::{ColumnSchema, ColumnType, LocalTable, Schema, Values};
use crate::error::DataError;
use crate::filter::{self, Op};
use crate::ops::{
    self, filter_params, DimParams, Meter, ProbeDimParams, ProbeParams, Session, Window, NO_WINDOW,
};
use crate::predicate::{literal_constant, Cmp, Compiled, Predicate};
use crate::scan::{
    compile_predicates, device_dictionary, device_schema, FilterStrategy, COMBINE_AND,
    COMBINE_WRITE,
};
use crate::ssb::probe::{self, ProbeDim, ProbeLayout, ProbeMode};
use crate::ssb::queries::{DimSpec, KeyRange, Lit, QuerySpec};
use crate::ssb::resident::ResidentTables;

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
    /// Ask the device to keep the staged columns resident and reuse what an earlier
    /// query left there (`csx_host::Session::set_resident`): a device with resident
    /// memory then reads an unchanged column from its media once.
    pub resident: bool,
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
            resident: false,
        }
    }
}

/// LINEORDER rows staged at a time by default: 2 MiB per 32-bit column. Rounds are
/// small so the first one, the only one not staged during another's probe, is short,
/// and because a run's device memory is mostly its slot set and staged-block buffers,
/// sized by the round and mapped page by page by their first writes: at SF 1, a
/// process running Q3.3 takes ~8,200 minor page faults with rounds of 2^19 rows against
/// ~12,400 with 2^20 (~6,100 with 2^18, twice the rounds).
pub const ROUND_ROWS_DEFAULT: u64 = 1 << 19;
/// LINEORDER rounds whose copies are in flight while a round is expanded and probed:
/// with two, the media keeps reading while a round's decoding and probe take longer
/// than the next round's reads.
const ROUNDS_AHEAD: u64 = 2;
/// The operator name of the emitted probe in a run's session.
const EMITTED_PROBE: &str = "ssb_probe_emitted";
/// Most partitions probed at once.
pub const PARTITIONS_MAX: u32 = 16;
/// Most runs submitted in one batch when every round is staged (well within a queue
/// pair's depth).
const RUNS_AT_ONCE_MAX: usize = 32;
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
    /// With [`RunOptions::resident`]: per column file staged, the bytes staged and those
    /// the device served from resident memory (not read from its media again).
    pub reuse: Vec<ColumnReuse>,
    /// Of a run through [`ResidentTables`]: what it found kept.
    pub kept: Option<KeptReuse>,
    /// Every file range the run copied into device memory and waited for, `(path,
    /// offset, len)`, in the order waited for ([`csx_host::Session::file_copies`]):
    /// the bytes [`Meter::media_bytes`] counts, which [`crate::ssb::yardstick`] reads
    /// again.
    pub file_copies: Vec<(String, u64, u64)>,
}

/// What a run through [`ResidentTables`] found kept on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptReuse {
    /// LINEORDER's staged columns were kept and unchanged: no staging at all.
    pub lineorder_reused: bool,
    /// Dimensions whose staged columns were kept and unchanged.
    pub dims_reused: u64,
    /// Programs found loaded and activated.
    pub programs_reused: u64,
    /// Device memory kept after the run, bytes.
    pub kept_bytes: u64,
}

/// One column file's staging in a resident run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnReuse {
    /// The column file's device path.
    pub path: String,
    pub staged_bytes: u64,
    pub resident_bytes: u64,
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
        let dir = format!("{}/{table}", self.dir);
        let path = format!("{dir}/{}", c.file_name());
        let values = crate::stage::read_to_host(self.session, &dir, &schema, column)?;
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

/// A literal comparison on column `col` as a [`Cmp`] in stored units, bound as filter
/// strings are ([`crate::filter::bound`]): a decimal with more places than the column's
/// scale rounds per operator, a string absent from the dictionary orders between its
/// entries.
pub fn cmp_of(col: &ColumnSchema, dict: Option<&[String]>, lit: Lit) -> Result<Cmp, DataError> {
    let range = |op: Op, t: &str| -> Result<(i128, i128), DataError> {
        let (lo, hi, _) = filter::bound(col, dict, op, &literal_constant(col, t)?, t)
            .map_err(|e| DataError::Invalid(e.to_string()))?;
        Ok((lo, hi))
    };
    let (lo, hi) = match lit {
        Lit::Eq(t) => range(Op::Eq, t)?,
        Lit::Lt(t) => range(Op::Lt, t)?,
        Lit::Between(a, b) => {
            let ((lo, _), (_, hi)) = (range(Op::Ge, a)?, range(Op::Le, b)?);
            (lo, hi)
        }
        Lit::In(list) => {
            let mut v = Vec::new();
            for t in list {
                let (lo, hi) = range(Op::Eq, t)?;
                if lo == hi {
                    v.push(lo as i64);
                }
            }
            return Ok(Cmp::In(v));
        }
    };
    let (lo_b, hi_b) = crate::predicate::domain(col.ty);
    let (lo, hi) = (lo.max(lo_b) as i64, hi.min(hi_b) as i64);
    Ok(match (lo, hi) {
        _ if lo > hi => Cmp::In(Vec::new()),
        _ if lo == hi => Cmp::Eq(lo),
        _ => Cmp::Between(lo, hi),
    })
}

/// The predicates of `preds` on `table`, bound to its schema and dictionaries.
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

/// A dimension's selected keys, each with its group value (`Null` without a group
/// column): the hash table of the reference's join.
fn lookup(src: &mut dyn ColumnSource, dim: &DimSpec) -> Result<HashMap<i64, Value>, DataError> {
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
    Ok(map)
}

/// The query computed on the host from `src`'s columns, straight from its definition:
/// hash joins on the dimensions' keys, a map of sums.
pub fn reference(src: &mut dyn ColumnSource, q: &QuerySpec) -> Result<Vec<ResultRow>, DataError> {
    let lookups = (q.dims.iter())
        .map(|dim| Ok((lookup(src, dim)?, src.values("lineorder", dim.fk)?)))
        .collect::<Result<Vec<_>, DataError>>()?;
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

/// With `CSX_SSB_TRACE` set, a timeline of the run on stderr: each phase's spans and
/// the load phase's steps, in ms since the process's first trace (a measuring aid, not
/// output).
fn trace(what: std::fmt::Arguments<'_>) {
    static ORIGIN: std::sync::OnceLock<Option<Instant>> = std::sync::OnceLock::new();
    let origin = ORIGIN.get_or_init(|| std::env::var_os("CSX_SSB_TRACE").map(|_| Instant::now()));
    if let Some(o) = origin {
        eprintln!("trace {:9.3} {what}", o.elapsed().as_secs_f64() * 1e3);
    }
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
        trace(format_args!(
            "phase {name} span {:.3} ms",
            wall_ns as f64 / 1e6
        ));
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

/// Runs `q` over the dataset at `data_dir` on the device.
pub fn run(
    dev: &Device,
    data_dir: &str,
    q: &'static QuerySpec,
    opts: &RunOptions,
) -> Result<QueryRun, DataError> {
    run_kept(dev, data_dir, q, opts, None)
}

/// [`run`], staging LINEORDER into and loading the programs from `keep` when given
/// ([`ResidentTables::run`]).
pub(crate) fn run_kept(
    dev: &Device,
    data_dir: &str,
    q: &'static QuerySpec,
    opts: &RunOptions,
    mut keep: Option<&mut ResidentTables<'_>>,
) -> Result<QueryRun, DataError> {
    let started = Instant::now();
    let data_dir = data_dir.trim_end_matches('/');
    let mut s = Session::new(dev);
    s.set_resident(opts.resident);
    // One run's copies (a few hundred), for `QueryRun::file_copies`.
    s.record_file_copies();
    let partitions = match opts.partitions {
        Some(p) => p,
        None => s.engines()? as u32,
    }
    .clamp(1, PARTITIONS_MAX);
    let mut phases = Vec::new();
    let answer = if opts.split == Split::Host {
        on_host(&mut s, data_dir, q, &mut phases)?
    } else {
        Plan::new(data_dir, q, opts, partitions)?.run(&mut s, keep.as_deref_mut(), &mut phases)?
    };
    let kept = keep.map(|k| KeptReuse {
        lineorder_reused: k.reused_entries > 0,
        programs_reused: k.reused_programs,
        kept_bytes: k.kept_bytes(),
        dims_reused: k.reused_dims,
    });
    let reuse = (s.reuse().iter())
        .map(|(path, &(staged_bytes, resident_bytes))| ColumnReuse {
            path: path.clone(),
            staged_bytes,
            resident_bytes,
        })
        .collect();
    let file_copies = s.file_copies().to_vec();
    let meter = s.close()?;
    Ok(QueryRun {
        query: q.name,
        rows: answer.rows,
        options: *opts,
        meter,
        phases,
        host_ns: answer.host_ns,
        wall_ns: started.elapsed().as_nanos() as u64,
        partitions,
        joined: answer.joined,
        reuse,
        kept,
        file_copies,
    })
}

/// A run's result rows, host time and rows joined.
struct Answer {
    rows: Vec<ResultRow>,
    host_ns: u64,
    joined: u64,
}

/// The host-only split: the columns read whole, the reference on the host.
fn on_host(
    s: &mut Session,
    data_dir: &str,
    q: &QuerySpec,
    phases: &mut Vec<Phase>,
) -> Result<Answer, DataError> {
    let clock = Clock::start(s);
    let host_start = Instant::now();
    let mut src = DeviceSource {
        session: s,
        dir: data_dir.to_string(),
        schemas: HashMap::new(),
    };
    let rows = reference(&mut src, q)?;
    let host_ns = host_start.elapsed().as_nanos() as u64;
    clock.phase(s, "read+host", phases);
    Ok(Answer {
        rows,
        host_ns,
        joined: 0,
    })
}

/// The predicates of `preds` on the table at `dir`, bound to its schema and the
/// device's dictionaries.
fn bind(
    s: &mut Session,
    dir: &str,
    schema: &Schema,
    preds: &[(&str, Lit)],
) -> Result<Vec<Predicate>, DataError> {
    let mut out = Vec::new();
    for &(col, lit) in preds {
        let c = schema.column(col)?;
        let dict = if c.ty == ColumnType::Dict {
            Some(device_dictionary(s, dir, schema, col)?)
        } else {
            None
        };
        out.push(Predicate::new(col, cmp_of(c, dict.as_deref(), lit)?));
    }
    Ok(out)
}

/// A dimension's group column staged on the device.
#[derive(Clone, Debug)]
struct StagedGroup {
    column: MemHandle,
    /// Values it may hold, and the smallest.
    count: u32,
    base: u32,
    dict: Option<Vec<String>>,
}

/// A dimension staged on the device.
#[derive(Clone, Debug)]
pub(crate) struct StagedDim {
    spec: &'static DimSpec,
    rows: u64,
    keys: MemHandle,
    mask: MemHandle,
    scratch: Option<MemHandle>,
    filters: Vec<(MemHandle, Vec<(u64, u64)>)>,
    nothing: bool,
    group: Option<StagedGroup>,
    remap: MemHandle,
    out: MemHandle,
    lut_offset: u64,
    key_base: u32,
    lut_entries: u32,
}

impl StagedDim {
    /// Stages dimension `spec` (the table at `dir`): keys, a mask, its selections'
    /// columns, its group column; its lookup table goes at `lut_offset` of the state.
    fn stage(
        s: &mut Session,
        dir: &str,
        spec: &'static DimSpec,
        strategy: FilterStrategy,
        lut_offset: u64,
    ) -> Result<StagedDim, DataError> {
        // Every column of the dimension staged together, expanded in one batch.
        let mut batch = crate::stage::Staging::default();
        match StagedDim::start(s, dir, spec, strategy, lut_offset, &mut batch) {
            Ok(d) => {
                batch.finish(s)?;
                Ok(d)
            }
            Err(e) => {
                batch.abandon(s);
                Err(e)
            }
        }
    }

    /// [`StagedDim::stage`] with the copies started in `batch`: the dimension's columns
    /// hold their values once `batch` is finished.
    fn start(
        s: &mut Session,
        dir: &str,
        spec: &'static DimSpec,
        strategy: FilterStrategy,
        lut_offset: u64,
        batch: &mut crate::stage::Staging,
    ) -> Result<StagedDim, DataError> {
        let schema = device_schema(s, dir)?;
        let rows = schema.rows;
        let (key_base, key_last) = match spec.keys {
            KeyRange::Dense => (1u32, rows as u32),
            KeyRange::Fixed(lo, hi) => (lo, hi),
        };
        let (keys, filters, nothing, group) =
            StagedDim::stage_columns(s, dir, &schema, spec, batch)?;
        let words = rows.div_ceil(64).max(1);
        let mask = ops::alloc(s, words * 8)?;
        let scratch = match strategy {
            FilterStrategy::Accel => Some(ops::alloc(s, 3 * words * 8)?),
            _ => None,
        };
        let count = u64::from(group.as_ref().map_or(1, |g| g.count));
        Ok(StagedDim {
            spec,
            rows,
            keys,
            mask,
            scratch,
            filters,
            nothing,
            group,
            remap: ops::alloc(s, 2 * count)?,
            out: ops::alloc(s, 4 * count)?,
            lut_offset,
            key_base,
            lut_entries: key_last.saturating_sub(key_base) + 1,
        })
    }

    /// Starts staging the dimension's key, selection and group columns in `batch`.
    #[allow(clippy::type_complexity)]
    fn stage_columns(
        s: &mut Session,
        dir: &str,
        schema: &Schema,
        spec: &'static DimSpec,
        batch: &mut crate::stage::Staging,
    ) -> Result<
        (
            MemHandle,
            Vec<(MemHandle, Vec<(u64, u64)>)>,
            bool,
            Option<StagedGroup>,
        ),
        DataError,
    > {
        let preds = bind(s, dir, schema, spec.preds)?;
        let compiled = compile_predicates(schema, &preds)?;
        // Every column staged opened together: the key, the selected ones, the group.
        let mut names = vec![spec.key.to_string()];
        let selected = (compiled.iter())
            .filter(|(_, _, c)| matches!(c, Compiled::Ranges(_)))
            .map(|(col, _, _)| col.as_str());
        for name in selected.chain(spec.group.map(|(g, _)| g)) {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut opened = crate::stage::device_columns(s, dir, schema, &refs)?
            .into_iter()
            .map(Some)
            .collect::<Vec<_>>();
        let mut staged: Vec<Option<MemHandle>> = vec![None; names.len()];
        // Stages column `name` (opened above) once; its memory (a selection and the
        // group on one column share it: both only read it).
        let mut stage = |s: &mut Session, name: &str, batch: &mut crate::stage::Staging| {
            let i = names.iter().position(|n| n == name).expect("opened above");
            if let Some(h) = staged[i] {
                return Ok(h);
            }
            let column = opened[i].take().expect("each column staged once");
            let h = crate::stage::stage_opened_into(s, column, schema.rows, batch)?;
            staged[i] = Some(h);
            Ok::<MemHandle, DataError>(h)
        };
        let keys = stage(s, spec.key, batch)?;
        let mut filters = Vec::new();
        let mut nothing = false;
        for (col, _, compiled) in compiled {
            match compiled {
                Compiled::Nothing => nothing = true,
                Compiled::All => {}
                Compiled::Ranges(r) => filters.push((stage(s, &col, batch)?, r)),
            }
        }
        let group = match spec.group {
            Some((g, range)) => {
                let column = stage(s, g, batch)?;
                Some(StagedDim::group(s, (dir, schema), (g, range), column)?)
            }
            None => None,
        };
        Ok((keys, filters, nothing, group))
    }

    /// The dimension's group column `g` (value range `range`), staged at `column`.
    fn group(
        s: &mut Session,
        (dir, schema): (&str, &Schema),
        (g, range): (&str, Option<(u32, u32)>),
        column: MemHandle,
    ) -> Result<StagedGroup, DataError> {
        let c = schema.column(g)?;
        let (count, base, dict) = match (c.ty, range) {
            (ColumnType::Dict, _) => (
                c.entries as u32,
                0,
                Some(device_dictionary(s, dir, schema, g)?),
            ),
            (_, Some((lo, hi))) => (hi - lo + 1, lo, None),
            (_, None) => {
                return Err(DataError::Invalid(format!(
                    "group column {g} of {} is {} without a value range",
                    schema.table,
                    c.ty.name()
                )))
            }
        };
        Ok(StagedGroup {
            column,
            count: count.max(1),
            base,
            dict,
        })
    }

    /// The files staging dimension `spec` (the table at `dir`) reads: the schema, and
    /// the key, selection and group columns with their dictionaries.
    fn files(s: &mut Session, dir: &str, spec: &DimSpec) -> Result<Vec<String>, DataError> {
        let schema = device_schema(s, dir)?;
        let mut files = vec![format!("{dir}/{}", crate::columnar::SCHEMA_FILE)];
        let group = spec.group.map(|(g, _)| g);
        let names = std::iter::once(spec.key).chain(spec.preds.iter().map(|p| p.0));
        for name in names.chain(group) {
            let c = schema.column(name)?;
            files.push(format!("{dir}/{}", c.file_name()));
            if c.ty == ColumnType::Dict {
                files.push(format!("{dir}/{}", c.dict_file_name()));
            }
        }
        files.sort();
        files.dedup();
        Ok(files)
    }

    fn mask_window(&self) -> Window {
        (self.mask, 0, self.rows.div_ceil(64) * 8)
    }

    /// The run of `filter` for selection `step` of this dimension.
    fn filter_run(&self, filter: ProgramIndex, step: usize) -> ExecuteRequest {
        let (col, ranges) = &self.filters[step];
        let mut w = vec![(*col, 0, self.rows * 4), self.mask_window()];
        if let Some(sc) = self.scratch {
            w.push((sc, 0, 3 * self.rows.div_ceil(64) * 8));
        }
        let combine = if step == 0 {
            COMBINE_WRITE
        } else {
            COMBINE_AND
        };
        ops::run(filter, &w)
            .cparams(4 | combine << 8, 0)
            .params(filter_params(ranges).into_bytes())
    }

    /// The run of ssb_dim: keys, mask, group column, scratch, output (without a group
    /// column, windows 2 and 3 are unused but distinct: a byte each of the scratch).
    fn dim_run(&self, dim: ProgramIndex) -> ExecuteRequest {
        let params = DimParams {
            lut_offset: self.lut_offset as u32,
            lut_entries: self.lut_entries,
            key_base: self.key_base,
            group_count: self.group.as_ref().map_or(0, |g| g.count),
            group_base: self.group.as_ref().map_or(0, |g| g.base),
        };
        let keys = (self.keys, 0, self.rows * 4);
        let w = match &self.group {
            Some(g) => {
                let count = u64::from(g.count);
                vec![
                    keys,
                    self.mask_window(),
                    (g.column, 0, self.rows * 4),
                    (self.remap, 0, 2 * count),
                    (self.out, 0, 4 * count),
                ]
            }
            None => vec![
                keys,
                self.mask_window(),
                (self.remap, 0, 1),
                (self.remap, 1, 1),
                (self.out, 0, 4),
            ],
        };
        ops::run(dim, &w).params(params.params().into_bytes())
    }
}

/// LINEORDER rounds whose copies are in flight, in round order.
type Pending = std::collections::VecDeque<crate::stage::Staging>;

/// Waits for every round's copies in `pending`, expanding nothing (after a failure).
fn abandon_all(s: &mut Session, pending: &mut Pending) {
    for p in pending.drain(..) {
        p.abandon(s);
    }
}

/// The partitions of a round of `n` rows: `(first row, rows)`, 64-row aligned.
fn round_parts(n: u64, partitions: u64) -> Vec<(u64, u64)> {
    let part = n.div_ceil(partitions).next_multiple_of(64);
    (0..partitions)
        .map(|p| (p * part, n.saturating_sub(p * part).min(part)))
        .filter(|&(_, len)| len > 0)
        .collect()
}

/// LINEORDER's side of a run: the columns the probe reads, its own selections, and the
/// staging slots, one buffer per partition (its columns back to back, then, for the
/// emitted probe, room for the lookup tables' copies): `slots[set * partitions + p]`
/// holds partition p's columns, column `i` at `i * col_bytes`. A run's own slots are
/// one set when every staged column is encoded (the copies land in buffers of staged
/// blocks, and a round's expansion, which alone writes the slots, runs after the round
/// before is probed), else two when there are several rounds, so that raw columns are
/// copied into the next round's slots while this one is probed. The copies of a round land in buffers of staged blocks, free again
/// once the round is expanded: with one more set of those than rounds staged ahead
/// ([`ROUNDS_AHEAD`]), round `r + 2`'s copies start while round `r + 1`'s are still
/// in flight, before round `r` is expanded and probed.
struct Lineorder {
    dir: String,
    rows: u64,
    round: u64,
    rounds: u64,
    part_max: u64,
    cols: Vec<&'static str>,
    filters: Vec<(&'static str, Vec<(u64, u64)>)>,
    nothing: bool,
    col_bytes: u64,
    in_bytes: u64,
    lut_segments: Vec<u64>,
    partitions: u64,
    /// Slot sets: see the type's doc ([`Lineorder::staging_state`] narrows a run's own
    /// two to one).
    sets: std::cell::Cell<u64>,
    /// Sets of buffers of staged blocks (`LoStaging::staged`).
    staged_sets: u64,
    slots: std::cell::RefCell<Vec<MemHandle>>,
    /// The resident entry the slots are kept under, and whether they hold every round
    /// already (nothing to stage).
    kept: Option<String>,
    staged_already: bool,
    /// The columns' files and the staged-block buffers, made at the first staging.
    staging: std::cell::RefCell<Option<LoStaging>>,
    /// The table's schema, read once by [`Lineorder::plan`].
    schema: Schema,
}

/// LINEORDER's staging state: each staged column's file (`cols` order), the blocks a
/// zone map excludes, and the buffers of staged blocks (`bound` bytes each) of each
/// staging set, one per partition (`staged[set * partitions + p]`), allocated as the
/// sets are first used.
struct LoStaging {
    files: Vec<std::sync::Arc<crate::stage::DeviceColumn>>,
    skip: Vec<bool>,
    bound: u64,
    staged: Vec<(MemHandle, u64)>,
}

impl Lineorder {
    fn plan(
        s: &mut Session,
        (dir, keep): (String, Option<&mut ResidentTables<'_>>),
        q: &QuerySpec,
        opts: &RunOptions,
        partitions: u32,
        dims: &[StagedDim],
    ) -> Result<Lineorder, DataError> {
        let schema = device_schema(s, &dir)?;
        let rows = schema.rows;
        let round = opts.round_rows.min(rows.next_multiple_of(64)).max(64);
        let rounds = rows.div_ceil(round).max(1);
        let part_max = round.div_ceil(u64::from(partitions)).next_multiple_of(64);
        let preds = bind(s, &dir, &schema, q.lo_preds)?;
        let (cols, filters, nothing) = Lineorder::columns(q, &schema, &preds)?;
        let col_bytes = part_max * 4;
        let mut in_bytes = cols.len() as u64 * col_bytes;
        let mut lut_segments = Vec::new();
        if opts.probe == ProbeKind::Emitted {
            for d in dims {
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
        let key = format!(
            "{dir} rows {rows} round {round} partitions {partitions} columns {cols:?} selections {filters:?} slot {in_bytes}"
        );
        let files = (cols.iter())
            .map(|c| Ok(format!("{dir}/{}", schema.column(c)?.file_name())))
            .collect::<Result<Vec<_>, DataError>>()?;
        let (sets, slots, kept, staged_already) = Lineorder::place(
            s,
            (keep, key, &files),
            (rounds, u64::from(partitions), in_bytes),
        )?;
        Ok(Lineorder {
            dir,
            rows,
            round,
            rounds,
            part_max,
            cols,
            filters,
            nothing,
            col_bytes,
            in_bytes,
            lut_segments,
            partitions: u64::from(partitions),
            sets: std::cell::Cell::new(sets),
            staged_sets: match kept {
                Some(_) => sets,
                None => rounds.min(ROUNDS_AHEAD + 1),
            },
            slots: std::cell::RefCell::new(slots),
            kept,
            staged_already,
            staging: std::cell::RefCell::new(None),
            schema,
        })
    }

    /// Where the rounds are staged: `(sets, slots, kept entry, staged already)`. With
    /// `keep` able to keep them (entry `key`, staged from `files`), a slot set for every
    /// round, kept, and maybe staged already; else two sets (one for a single round) of
    /// the run's own.
    #[allow(clippy::type_complexity)]
    fn place(
        s: &mut Session,
        (keep, key, files): (Option<&mut ResidentTables<'_>>, String, &[String]),
        (rounds, partitions, in_bytes): (u64, u64, u64),
    ) -> Result<(u64, Vec<MemHandle>, Option<String>, bool), DataError> {
        let kept = match keep {
            Some(k) => {
                let sizes = vec![in_bytes; (rounds * partitions) as usize];
                k.entry(s, &key, &sizes, files)?
            }
            None => None,
        };
        Ok(match kept {
            Some((slots, staged)) => (rounds, slots, Some(key), staged),
            None => {
                // None yet: each set is allocated when its first round's copies are
                // in flight (`Lineorder::ensure_slots`), so the device maps its pages
                // while the media is read.
                let sets = if rounds > 1 { 2 } else { 1 };
                (sets, Vec::new(), None, false)
            }
        })
    }

    /// The staged columns (foreign keys, measures, selected columns), the selections'
    /// ranges, and whether a selection selects nothing.
    #[allow(clippy::type_complexity)]
    fn columns(
        q: &QuerySpec,
        schema: &Schema,
        preds: &[Predicate],
    ) -> Result<
        (
            Vec<&'static str>,
            Vec<(&'static str, Vec<(u64, u64)>)>,
            bool,
        ),
        DataError,
    > {
        let mut cols: Vec<&'static str> = q.dims.iter().map(|d| d.fk).collect();
        for c in q.measure.columns() {
            if !cols.contains(c) {
                cols.push(c);
            }
        }
        let mut nothing = false;
        let mut filters = Vec::new();
        for (col, _, compiled) in compile_predicates(schema, preds)? {
            let name = q
                .lo_preds
                .iter()
                .find(|p| p.0 == col)
                .expect("a predicate column")
                .0;
            match compiled {
                Compiled::Nothing => nothing = true,
                Compiled::All => {}
                Compiled::Ranges(r) => {
                    if !cols.contains(&name) {
                        cols.push(name);
                    }
                    filters.push((name, r));
                }
            }
        }
        for c in &cols {
            if schema.column(c)?.ty.width() != 4 {
                return Err(DataError::Operator {
                    operator: "ssb_probe".to_string(),
                    message: format!("column {c} is not 32-bit"),
                });
            }
        }
        Ok((cols, filters, nothing))
    }

    /// Where column `c` sits in a slot.
    fn segment(&self, c: &str) -> u64 {
        let i = self
            .cols
            .iter()
            .position(|x| *x == c)
            .expect("a staged column");
        i as u64 * self.col_bytes
    }

    /// Allocates the slots of sets up to `set` not allocated yet ([`Lineorder::place`]
    /// leaves a run's own to this: [`Lineorder::stage`] calls it once the set's first
    /// round's copies are in flight).
    fn ensure_slots(&self, s: &mut Session, set: u64) -> Result<(), DataError> {
        let want = ((set + 1) * self.partitions) as usize;
        while self.slots.borrow().len() < want {
            trace(format_args!("slot alloc {} bytes", self.in_bytes));
            let h = ops::alloc(s, self.in_bytes)?;
            self.slots.borrow_mut().push(h);
        }
        trace(format_args!("slots of set {set} allocated"));
        Ok(())
    }

    /// Rounds whose copies may be in flight while a round is expanded and probed:
    /// [`ROUNDS_AHEAD`], but one when raw columns are copied straight into the slots
    /// (two sets: round `r + 2`'s copies would overwrite round `r`'s columns), unless
    /// every round has slots of its own (kept).
    fn rounds_ahead(&self) -> u64 {
        let guard = self.staging.borrow();
        let raw = (guard.as_ref()).is_some_and(|st| st.files.iter().any(|f| f.encoded().is_none()));
        match raw && self.sets.get() < self.rounds {
            true => self.sets.get() - 1,
            false => ROUNDS_AHEAD,
        }
    }

    /// Partition `p`'s slot in set `set` (allocated: [`Lineorder::ensure_slots`]).
    fn slot(&self, set: u64, p: usize) -> MemHandle {
        self.slots.borrow()[(set * self.partitions) as usize + p]
    }

    /// Round `r`'s rows: `(first row, rows)`.
    fn round_rows(&self, r: u64) -> (u64, u64) {
        let start = r * self.round;
        (start, self.round.min(self.rows - start))
    }

    /// Opens the staged columns' files, finds the blocks LINEORDER's selections'
    /// zone maps exclude and allocates a buffer of staged blocks per slot (encoded
    /// columns), once.
    fn staging_state(&self, s: &mut Session) -> Result<(), DataError> {
        if self.staging.borrow().is_some() {
            return Ok(());
        }
        let files = crate::stage::device_columns(s, &self.dir, &self.schema, &self.cols)?;
        let files: Vec<_> = files.into_iter().map(std::sync::Arc::new).collect();
        if self.kept.is_none() && files.iter().all(|f| f.encoded().is_some()) {
            // Only the expansions write the slots, each after the round before is
            // probed (`Plan::run`): one set serves every round, so a run maps half the
            // fresh device memory.
            self.sets.set(1);
        }
        let zone: Vec<(&crate::encoding::EncodedColumn, &[(u64, u64)])> = (self.filters.iter())
            .filter_map(|(c, r)| {
                let i = self.cols.iter().position(|x| x == c)?;
                Some((files[i].encoded()?, r.as_slice()))
            })
            .collect();
        let skip = crate::encoding::skipped_blocks(&zone);
        let bound: u64 = files.iter().map(|f| f.staged_bound(self.part_max)).sum();
        *self.staging.borrow_mut() = Some(LoStaging {
            files,
            skip,
            bound,
            staged: Vec::new(),
        });
        Ok(())
    }

    /// Allocates the buffers of staged blocks of staging sets up to `set` not
    /// allocated yet (none for raw columns).
    fn ensure_staged(&self, s: &mut Session, set: u64) -> Result<(), DataError> {
        let want = ((set + 1) * self.partitions) as usize;
        let mut guard = self.staging.borrow_mut();
        let st = guard.as_mut().expect("the staging state is made first");
        while st.staged.len() < want {
            trace(format_args!("staged-block buffer alloc {} bytes", st.bound));
            let buf = match st.bound {
                0 => (MemHandle::NONE, 0),
                n => (ops::alloc(s, n)?, n),
            };
            st.staged.push(buf);
        }
        Ok(())
    }

    /// Starts staging round `r` into slot set `set`: the Memory Copies of its columns
    /// (of an encoded column, of the blocks no zone map excludes) run on the device's
    /// transfer workers; [`Lineorder::wait`] waits for them and expands the blocks.
    /// When every column is encoded, the copies land in the staged-block buffers and
    /// the set's slots are only written by the expansion: a set not allocated yet is
    /// allocated once the copies are in flight.
    fn stage(&self, s: &mut Session, r: u64) -> Result<crate::stage::Staging, DataError> {
        trace(format_args!("round {r}: stage"));
        self.staging_state(s)?;
        let (set, staged_set) = (r % self.sets.get(), r % self.staged_sets);
        self.ensure_staged(s, staged_set)?;
        let guard = self.staging.borrow();
        let st = guard.as_ref().expect("the staging state was just made");
        let raw = st.files.iter().any(|f| f.encoded().is_none());
        if raw {
            self.ensure_slots(s, set)?;
        }
        let allocated = self.slots.borrow().len() as u64 > set * self.partitions;
        let (start, n) = self.round_rows(r);
        let mut staging = crate::stage::Staging::default();
        let mut targets = Vec::new();
        for (p, (off, len)) in round_parts(n, self.partitions).into_iter().enumerate() {
            let (buf, buf_len) = st.staged[(staged_set * self.partitions) as usize + p];
            let dst = match allocated {
                true => self.slot(set, p),
                false => MemHandle::NONE,
            };
            let t = staging.target(crate::stage::Target::new(buf, buf_len, dst, self.in_bytes));
            targets.push((t, p));
            for (i, f) in st.files.iter().enumerate() {
                let dst = i as u64 * self.col_bytes;
                if let Err(e) = staging.stage_rows(s, f, (start + off, len), &st.skip, t, dst) {
                    staging.abandon(s);
                    return Err(e);
                }
            }
        }
        // The last partition's columns, gathered into one copy, start now too.
        if let Err(e) = staging.submit(s) {
            staging.abandon(s);
            return Err(e);
        }
        trace(format_args!("round {r}: copies started"));
        if !allocated {
            if let Err(e) = self.ensure_slots(s, set) {
                staging.abandon(s);
                return Err(e);
            }
            for (t, p) in targets {
                staging.set_dst(t, self.slot(set, p));
            }
        }
        Ok(staging)
    }

    /// Waits for a round's staging and expands its encoded blocks on the engines.
    fn wait(&self, s: &mut Session, staging: crate::stage::Staging) -> Result<(), DataError> {
        staging.finish(s)
    }
}

/// The operators a run loads.
struct Operators {
    filter: ProgramIndex,
    dim: ProgramIndex,
    merge: ProgramIndex,
    /// The probe: ssb_probe, or the emitted one once the groups are known.
    probe: Option<ProgramIndex>,
}

/// The dimensions' groups: each dimension's group values (by compact id), their
/// counts, each dimension's stride in the dense group index, and the groups in all.
struct Groups {
    values: Vec<Vec<u32>>,
    counts: Vec<u64>,
    strides: Vec<u64>,
    total: u64,
}

impl Groups {
    fn new(q: &QuerySpec, values: Vec<Vec<u32>>, dims: usize) -> Result<Groups, DataError> {
        let counts: Vec<u64> = if values.is_empty() {
            vec![0; dims]
        } else {
            values.iter().map(|g| g.len() as u64).collect()
        };
        let total = counts.iter().product::<u64>().max(1);
        if total > GROUPS_MAX {
            return Err(DataError::TooLarge {
                what: format!("{}'s groups", q.name),
                needed: total,
                limit: GROUPS_MAX,
            });
        }
        let mut strides = vec![1u64; dims];
        for d in (0..dims.saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * counts[d + 1];
        }
        Ok(Groups {
            values,
            counts,
            strides,
            total,
        })
    }
}

/// Where the probes write: offload, one array of sums per partition (emitted: added
/// to over the rounds, zeroed once) or per partition and round (the operator zeroes
/// its own); host-agg, the joined rows of a round.
struct ProbeOut {
    out: MemHandle,
    /// The operator probe's selection mask of a round, and the accelerated filter's
    /// scratch.
    mask: MemHandle,
    scratch: Option<MemHandle>,
    partials: u64,
}

/// A query's run on the device (see the module doc): planned, then its phases in
/// order over one session.
struct Plan<'a> {
    data_dir: &'a str,
    q: &'static QuerySpec,
    opts: RunOptions,
    partitions: u32,
    emitted: bool,
    /// Every round is staged already (kept): the emitted probe runs every round's
    /// partitions in one batch, each into its own sums.
    all_at_once: bool,
    /// Nothing can join: a selection selects nothing, or a table or dimension is
    /// empty.
    empty: bool,
    sums: Vec<u64>,
    joined: u64,
    host_ns: u64,
}

impl<'a> Plan<'a> {
    fn new(
        data_dir: &'a str,
        q: &'static QuerySpec,
        opts: &RunOptions,
        partitions: u32,
    ) -> Result<Plan<'a>, DataError> {
        if opts.round_rows == 0 || !opts.round_rows.is_multiple_of(64) {
            return Err(DataError::Invalid(format!(
                "round of {} rows: must be a positive multiple of 64",
                opts.round_rows
            )));
        }
        Ok(Plan {
            data_dir,
            q,
            opts: *opts,
            partitions,
            emitted: opts.probe == ProbeKind::Emitted,
            all_at_once: false,
            empty: false,
            sums: Vec::new(),
            joined: 0,
            host_ns: 0,
        })
    }

    /// The phases: load (every dimension's copies, then LINEORDER round 0's, started),
    /// prepare (overlapping them), load (the dimensions' blocks expanded while round 0's
    /// copies run), dims, probe (rounds), merge, then the decoding.
    fn run(
        mut self,
        s: &mut Session,
        mut keep: Option<&mut ResidentTables<'_>>,
        phases: &mut Vec<Phase>,
    ) -> Result<Answer, DataError> {
        trace(format_args!("plan run"));
        let clock = Clock::start(s);
        let (dims, lo, dim_copies, mut pending) = self.start_loading(s, keep.as_deref_mut())?;
        clock.phase(s, "load", phases);
        let mut ops =
            self.prepare_over_copies(s, keep.as_deref_mut(), dim_copies, &mut pending, phases)?;
        let groups = self.build_dims(s, &ops, &dims, phases)?;
        let groups = Groups::new(self.q, groups, dims.len())?;
        self.sums = vec![0; groups.total as usize];
        if self.empty {
            Plan::nothing_to_probe(s, &lo, pending.pop_front(), phases)?;
            return Ok(self.answer(&dims, &groups));
        }
        if self.emitted {
            let clock = Clock::start(s);
            let probe = self.load_emitted_probe(s, keep.as_deref_mut(), &dims, &lo, &groups)?;
            ops.probe = Some(probe);
            clock.phase(s, "prepare", phases);
        }
        let out = self.probe_out(s, &lo, groups.total)?;
        if self.all_at_once {
            self.probe_kept(s, &ops, (&lo, &groups, &out), phases)?;
        }
        let rounds = if self.all_at_once { 0 } else { lo.rounds };
        for r in 0..rounds {
            let clock = Clock::start(s);
            if !lo.staged_already {
                Plan::stage_round(s, &lo, r, &mut pending)?;
            }
            // Waiting for the staged columns is loading, as in Delilah's breakdown.
            clock.phase(s, "load", phases);
            let clock = Clock::start(s);
            self.probe_round(s, &ops, r, (&dims, &lo, &groups, &out))?;
            clock.phase(s, "probe", phases);
        }
        if let (Some(k), Some(key)) = (keep, &lo.kept) {
            // Every round is staged in the kept slots now.
            k.staged(key);
        }
        if self.opts.split == Split::Offload {
            let clock = Clock::start(s);
            self.merge(s, &ops, &out, groups.total)?;
            clock.phase(s, "merge", phases);
        }
        Ok(self.answer(&dims, &groups))
    }

    /// Round `r` staged (its copies first in `pending`, or started now) and expanded;
    /// the next rounds' copies, up to [`ROUNDS_AHEAD`] of them, start before this
    /// round's blocks are expanded, so their media reads overlap the decoding and the
    /// probe (and they are left in `pending`). On an error every round's copies in
    /// `pending` are waited for.
    fn stage_round(
        s: &mut Session,
        lo: &Lineorder,
        r: u64,
        pending: &mut Pending,
    ) -> Result<(), DataError> {
        let copies = match pending.pop_front() {
            Some(c) => Ok(c),
            None => lo.stage(s, r),
        };
        trace(format_args!("round {r}: wait copies"));
        let mut done = copies.and_then(|c| c.wait_copies(s));
        trace(format_args!("round {r}: copies done"));
        if let Ok(expansion) = done {
            done = (|| {
                let ahead = r + 1 + pending.len() as u64;
                for next in ahead..lo.rounds.min(r + 1 + lo.rounds_ahead()) {
                    pending.push_back(lo.stage(s, next)?);
                }
                Ok(expansion)
            })();
        }
        trace(format_args!("round {r}: expand"));
        match done.and_then(|expansion| expansion.expand(s)) {
            Ok(()) => {
                trace(format_args!("round {r}: expanded"));
                Ok(())
            }
            Err(e) => {
                abandon_all(s, pending);
                Err(e)
            }
        }
    }

    /// The operators loaded and compiled while the first copies run, then the
    /// dimensions' copies finished (their waiting and expansion is loading). On an error
    /// LINEORDER's copies in `pending` are waited for too.
    fn prepare_over_copies(
        &self,
        s: &mut Session,
        keep: Option<&mut ResidentTables<'_>>,
        dim_copies: crate::stage::Staging,
        pending: &mut Pending,
        phases: &mut Vec<Phase>,
    ) -> Result<Operators, DataError> {
        let prepared = self.prepare(s, keep, phases);
        let clock = Clock::start(s);
        let finished = match prepared {
            Ok(ops) => dim_copies.finish(s).map(|()| ops),
            Err(e) => {
                dim_copies.abandon(s);
                Err(e)
            }
        };
        if finished.is_err() {
            abandon_all(s, pending);
        }
        clock.phase(s, "load", phases);
        finished
    }

    /// The load phase's start: every dimension's copies, then LINEORDER's plan and round
    /// 0's copies (a dimension kept in `keep` is staged, or found, on its own). The
    /// caller finishes the dimensions' copies (their blocks expanded while LINEORDER's
    /// copies run); round 0's go on while the dimensions are built.
    #[allow(clippy::type_complexity)]
    fn start_loading(
        &mut self,
        s: &mut Session,
        mut keep: Option<&mut ResidentTables<'_>>,
    ) -> Result<(Vec<StagedDim>, Lineorder, crate::stage::Staging, Pending), DataError> {
        let (dims, dim_copies) = self.load_dims(s, keep.as_deref_mut())?;
        let lo_dir = format!("{}/lineorder", self.data_dir);
        let lo_keep = (lo_dir, keep);
        let lo = match Lineorder::plan(s, lo_keep, self.q, &self.opts, self.partitions, &dims) {
            Ok(lo) => lo,
            Err(e) => {
                dim_copies.abandon(s);
                return Err(e);
            }
        };
        self.empty = lo.nothing || lo.rows == 0 || dims.iter().any(|d| d.nothing || d.rows == 0);
        self.all_at_once = self.emitted && self.opts.split == Split::Offload && lo.staged_already;
        // Round 0's copies, and the rounds' staged ahead of it, so that the media
        // keeps reading while the operators are prepared and the dimensions built.
        let mut pending = Pending::new();
        if !(self.empty || lo.staged_already) {
            let mut r = 0;
            while r < lo.rounds && r <= lo.rounds_ahead() {
                match lo.stage(s, r) {
                    Ok(st) => pending.push_back(st),
                    Err(e) => {
                        dim_copies.abandon(s);
                        abandon_all(s, &mut pending);
                        return Err(e);
                    }
                }
                r += 1;
            }
        }
        Ok((dims, lo, dim_copies, pending))
    }

    /// Nothing can join: round 0's copies (if started) waited for, an empty probe
    /// phase.
    fn nothing_to_probe(
        s: &mut Session,
        lo: &Lineorder,
        pending: Option<crate::stage::Staging>,
        phases: &mut Vec<Phase>,
    ) -> Result<(), DataError> {
        if let Some(c) = pending {
            let clock = Clock::start(s);
            lo.wait(s, c)?;
            clock.phase(s, "load", phases);
        }
        Clock::start(s).phase(s, "probe", phases);
        Ok(())
    }

    /// Every round of a kept LINEORDER (all staged) probed by the emitted probe in
    /// batches of every round's partitions, each run into its own sums.
    fn probe_kept(
        &mut self,
        s: &mut Session,
        ops: &Operators,
        (lo, groups, out): (&Lineorder, &Groups, &ProbeOut),
        phases: &mut Vec<Phase>,
    ) -> Result<(), DataError> {
        let clock = Clock::start(s);
        let probe = ops.probe.expect("the emitted probe is loaded");
        let runs: Vec<ExecuteRequest> = (0..lo.rounds)
            .flat_map(|r| self.emitted_runs(probe, r, lo, groups, out))
            .collect();
        for batch in runs.chunks(RUNS_AT_ONCE_MAX) {
            self.joined += s.execute_all_r0(batch)?.iter().sum::<u64>();
        }
        clock.phase(s, "probe", phases);
        Ok(())
    }

    /// Loads and activates (JIT-compiles) every operator first, so the phases after
    /// time execution alone (Delilah: "a series of operations": transfer, prepare,
    /// execute).
    fn prepare(
        &self,
        s: &mut Session,
        mut keep: Option<&mut ResidentTables<'_>>,
        phases: &mut Vec<Phase>,
    ) -> Result<Operators, DataError> {
        let clock = Clock::start(s);
        let engine = self.opts.engine;
        let mut load = |s: &mut Session, name: &str| match keep.as_deref_mut() {
            Some(k) => k.program(s, name, None, engine),
            None => ops::load(s, name, engine),
        };
        let ops = Operators {
            filter: load(s, self.opts.strategy.operator())?,
            dim: load(s, "ssb_dim")?,
            merge: load(s, "ssb_merge")?,
            probe: match self.opts.probe {
                ProbeKind::Operator => Some(load(s, "ssb_probe")?),
                ProbeKind::Emitted => None,
            },
        };
        clock.phase(s, "prepare", phases);
        Ok(ops)
    }

    /// Starts staging every dimension into one batch, returned with them for the caller
    /// to finish (a dimension kept in `keep` is staged, or found, on its own, finished);
    /// their lookup tables must fit the shared state.
    fn load_dims(
        &self,
        s: &mut Session,
        keep: Option<&mut ResidentTables<'_>>,
    ) -> Result<(Vec<StagedDim>, crate::stage::Staging), DataError> {
        let mut batch = crate::stage::Staging::default();
        match self.start_dims(s, keep, &mut batch) {
            Ok(dims) => Ok((dims, batch)),
            Err(e) => {
                batch.abandon(s);
                Err(e)
            }
        }
    }

    /// [`Plan::load_dims`]'s work, the fresh dimensions' copies started in `batch`.
    fn start_dims(
        &self,
        s: &mut Session,
        mut keep: Option<&mut ResidentTables<'_>>,
        batch: &mut crate::stage::Staging,
    ) -> Result<Vec<StagedDim>, DataError> {
        let state_size = s
            .device()
            .identify()
            .map_err(|e| DataError::device("identify", e))?
            .state_size_bytes;
        let mut dims = Vec::new();
        let mut lut_at = self.opts.state_offset.next_multiple_of(8);
        for spec in self.q.dims {
            let dir = format!("{}/{}", self.data_dir, spec.table);
            let strategy = self.opts.strategy;
            let d = match keep.as_deref_mut() {
                Some(k) => {
                    let key = format!("{dir} {spec:?} {strategy:?} at {lut_at}");
                    let files = |s: &mut Session| StagedDim::files(s, &dir, spec);
                    let stage = |k: &mut Session| StagedDim::stage(k, &dir, spec, strategy, lut_at);
                    k.dim(s, &key, self.opts.resident, files, stage)?
                }
                None => StagedDim::start(s, &dir, spec, strategy, lut_at, batch)?,
            };
            lut_at = (lut_at + 2 * u64::from(d.lut_entries)).next_multiple_of(8);
            dims.push(d);
        }
        if lut_at > state_size {
            return Err(DataError::TooLarge {
                what: format!(
                    "{}'s lookup tables in the shared state (from offset {})",
                    self.q.name, self.opts.state_offset
                ),
                needed: lut_at,
                limit: state_size,
            });
        }
        Ok(dims)
    }

    /// The dimensions' selections, then their lookup tables, each step at once on the
    /// engines; each dimension's group values (none when nothing can join).
    fn build_dims(
        &mut self,
        s: &mut Session,
        ops: &Operators,
        dims: &[StagedDim],
        phases: &mut Vec<Phase>,
    ) -> Result<Vec<Vec<u32>>, DataError> {
        let clock = Clock::start(s);
        for d in dims.iter().filter(|d| d.filters.is_empty()) {
            s.fill(d.mask, 0, d.rows.div_ceil(64).max(1) * 8, 0xff)?;
        }
        let steps = dims.iter().map(|d| d.filters.len()).max().unwrap_or(0);
        let mut groups = Vec::new();
        if !self.empty {
            for step in 0..steps {
                let runs: Vec<ExecuteRequest> = (dims.iter())
                    .filter(|d| step < d.filters.len())
                    .map(|d| d.filter_run(ops.filter, step))
                    .collect();
                s.execute_all_r0(&runs)?;
            }
            let runs: Vec<ExecuteRequest> = dims.iter().map(|d| d.dim_run(ops.dim)).collect();
            let counts = s.execute_all_r0(&runs)?;
            for (d, &n) in dims.iter().zip(&counts) {
                let bytes = s.read(d.out, 0, n * 4)?;
                groups.push(bytes.chunks_exact(4).map(le_u32).collect());
            }
            self.empty = counts.contains(&0);
        }
        clock.phase(s, "dims", phases);
        Ok(if self.empty { Vec::new() } else { groups })
    }

    /// Emits and loads the probe for this query, its tables and groups.
    fn load_emitted_probe(
        &self,
        s: &mut Session,
        keep: Option<&mut ResidentTables<'_>>,
        dims: &[StagedDim],
        lo: &Lineorder,
        groups: &Groups,
    ) -> Result<ProgramIndex, DataError> {
        let layout = ProbeLayout {
            rows_max: lo.part_max,
            filters: (lo.filters.iter())
                .map(|(c, r)| (lo.segment(c), r.clone()))
                .collect(),
            dims: (dims.iter().enumerate())
                .map(|(i, d)| ProbeDim {
                    fk_segment: lo.segment(d.spec.fk),
                    lut_segment: lo.lut_segments[i],
                    lut_offset: d.lut_offset,
                    entries: d.lut_entries,
                    key_base: d.key_base,
                    groups: groups.counts[i],
                    stride: groups.strides[i],
                })
                .collect(),
            measure: self
                .q
                .measure
                .columns()
                .iter()
                .map(|c| lo.segment(c))
                .collect(),
            mode: match self.opts.split {
                Split::Offload => ProbeMode::Aggregate {
                    groups: groups.total,
                },
                _ => ProbeMode::Emit,
            },
            in_bytes: lo.in_bytes,
        };
        let image = probe::emit(&layout)?;
        match keep {
            Some(k) => k.program(s, EMITTED_PROBE, Some(&image), self.opts.engine),
            None => Ok(s.load(EMITTED_PROBE, ProgramType::Raw, &image, self.opts.engine)?),
        }
    }

    /// Allocates what the probes write (see [`ProbeOut`]).
    fn probe_out(
        &self,
        s: &mut Session,
        lo: &Lineorder,
        total: u64,
    ) -> Result<ProbeOut, DataError> {
        let operator_filters = !self.emitted && !lo.filters.is_empty();
        let mask = match operator_filters {
            true => ops::alloc(s, lo.round / 8)?,
            false => MemHandle::NONE,
        };
        let scratch = match operator_filters && self.opts.strategy == FilterStrategy::Accel {
            true => Some(ops::alloc(s, 3 * lo.round / 8)?),
            false => None,
        };
        let partials = match self.emitted && !self.all_at_once {
            true => lo.partitions,
            false => lo.rounds * lo.partitions,
        };
        let out = match self.opts.split {
            Split::Offload => {
                let bytes = partials * total * 8;
                let h = ops::alloc(s, bytes)?;
                if self.emitted {
                    s.fill(h, 0, bytes, 0)?;
                }
                h
            }
            _ => ops::alloc(s, lo.round * 8)?,
        };
        Ok(ProbeOut {
            out,
            mask,
            scratch,
            partials,
        })
    }

    /// Probes round `r` (staged) in partitions at once on the engines; host-agg adds
    /// the emitted rows to the sums here.
    fn probe_round(
        &mut self,
        s: &mut Session,
        ops: &Operators,
        r: u64,
        (dims, lo, groups, out): (&[StagedDim], &Lineorder, &Groups, &ProbeOut),
    ) -> Result<(), DataError> {
        let set = r % lo.sets.get();
        let parts = round_parts(lo.round_rows(r).1, lo.partitions);
        let probe = ops.probe.expect("a probe is loaded before the rounds");
        let runs: Vec<ExecuteRequest> = if self.emitted {
            self.emitted_runs(probe, r, lo, groups, out)
        } else {
            self.filter_round(s, ops.filter, lo, out, set, &parts)?;
            (parts.iter().enumerate())
                .map(|(p, &part)| {
                    self.operator_probe(probe, (dims, lo, groups, out), r, (set, p), part)
                })
                .collect()
        };
        let joined = s.execute_all_r0(&runs)?;
        self.joined += joined.iter().sum::<u64>();
        if self.opts.split == Split::HostAgg {
            for (&(off, _), &k) in parts.iter().zip(&joined) {
                let bytes = s.read(out.out, off * 8, k * 8)?;
                self.aggregate(&bytes, groups.total)?;
            }
        }
        Ok(())
    }

    /// The emitted probe's runs of round `r` (staged), one per partition.
    fn emitted_runs(
        &self,
        probe: ProgramIndex,
        r: u64,
        lo: &Lineorder,
        groups: &Groups,
        out: &ProbeOut,
    ) -> Vec<ExecuteRequest> {
        let set = r % lo.sets.get();
        let parts = round_parts(lo.round_rows(r).1, lo.partitions);
        (parts.iter().enumerate())
            .map(|(p, &(off, len))| {
                let w = [
                    (lo.slot(set, p), 0, lo.in_bytes),
                    self.out_window(out, groups, r, p, (off, len)),
                ];
                ops::run(probe, &w).cparams(len, 0)
            })
            .collect()
    }

    /// Window of partition `p`'s output in round `r`.
    fn out_window(
        &self,
        out: &ProbeOut,
        groups: &Groups,
        r: u64,
        p: usize,
        (off, len): (u64, u64),
    ) -> Window {
        let sums = groups.total * 8;
        match self.opts.split {
            Split::Offload if self.emitted && !self.all_at_once => (out.out, p as u64 * sums, sums),
            Split::Offload => {
                let partial = r * u64::from(self.partitions) + p as u64;
                (out.out, partial * sums, sums)
            }
            _ => (out.out, off * 8, len * 8),
        }
    }

    /// The operator probe's selections of a round: each LINEORDER filter over every
    /// partition at once, into the round's mask.
    fn filter_round(
        &self,
        s: &mut Session,
        filter: ProgramIndex,
        lo: &Lineorder,
        out: &ProbeOut,
        set: u64,
        parts: &[(u64, u64)],
    ) -> Result<(), DataError> {
        for (i, (col, ranges)) in lo.filters.iter().enumerate() {
            let combine = if i == 0 { COMBINE_WRITE } else { COMBINE_AND };
            let runs: Vec<ExecuteRequest> = (parts.iter().enumerate())
                .map(|(p, &(off, len))| {
                    let mut w = vec![
                        (lo.slot(set, p), lo.segment(col), len * 4),
                        (out.mask, off / 8, len.div_ceil(64) * 8),
                    ];
                    if let Some(sc) = out.scratch {
                        w.push((sc, 3 * off / 8, 3 * len.div_ceil(64) * 8));
                    }
                    ops::run(filter, &w)
                        .cparams(4 | combine << 8, 0)
                        .params(filter_params(ranges).into_bytes())
                })
                .collect();
            s.execute_all_r0(&runs)?;
        }
        Ok(())
    }

    /// The ssb_probe run of partition `p` (in slot set `set`) of round `r`.
    fn operator_probe(
        &self,
        probe: ProgramIndex,
        (dims, lo, groups, out): (&[StagedDim], &Lineorder, &Groups, &ProbeOut),
        r: u64,
        (set, p): (u64, usize),
        (off, len): (u64, u64),
    ) -> ExecuteRequest {
        let slot = lo.slot(set, p);
        let mut w: Vec<Window> = Vec::new();
        let mut window = |x: Window| {
            w.push(x);
            w.len() as u32 - 1
        };
        let mut params = ProbeParams {
            mode: u32::from(self.opts.split != Split::Offload),
            groups: groups.total as u32,
            ..ProbeParams::default()
        };
        for (d, &stride) in dims.iter().zip(&groups.strides) {
            params.dims.push(ProbeDimParams {
                fk_window: window((slot, lo.segment(d.spec.fk), len * 4)),
                lut_offset: d.lut_offset as u32,
                lut_entries: d.lut_entries,
                key_base: d.key_base,
                stride: stride as u32,
            });
        }
        let cols = self.q.measure.columns();
        params.a_window = window((slot, lo.segment(cols[0]), len * 4));
        params.b_window = match cols.get(1) {
            Some(c) => window((slot, lo.segment(c), len * 4)),
            None => NO_WINDOW,
        };
        params.mask_window = match lo.filters.is_empty() {
            true => NO_WINDOW,
            false => window((out.mask, off / 8, len.div_ceil(64) * 8)),
        };
        params.out_window = window(self.out_window(out, groups, r, p, (off, len)));
        ops::run(probe, &w).params(params.params().into_bytes())
    }

    /// Adds host-agg's emitted `{group, value}` rows to the sums.
    fn aggregate(&mut self, bytes: &[u8], total: u64) -> Result<(), DataError> {
        let t = Instant::now();
        for c in bytes.chunks_exact(8) {
            let g = le_u32(&c[..4]) as usize;
            let v = le_u32(&c[4..]);
            match self.sums.get_mut(g) {
                Some(x) => *x += u64::from(v),
                None => {
                    return Err(DataError::Operator {
                        operator: "ssb_probe".to_string(),
                        message: format!("emitted group {g}, there are {total}"),
                    })
                }
            }
        }
        self.host_ns += t.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// ssb_merge: the partitions' sums into one array, the only one that crosses the
    /// link.
    fn merge(
        &mut self,
        s: &mut Session,
        ops: &Operators,
        out: &ProbeOut,
        total: u64,
    ) -> Result<(), DataError> {
        let fin = ops::alloc(s, total * 8)?;
        let w = [(out.out, 0, out.partials * total * 8), (fin, 0, total * 8)];
        s.execute_r0(&ops::run(ops.merge, &w).cparams(total, out.partials))?;
        let bytes = s.read(fin, 0, total * 8)?;
        for (x, c) in self.sums.iter_mut().zip(bytes.chunks_exact(8)) {
            *x = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        Ok(())
    }

    /// The result rows: every group with a non-zero sum, its keys decoded.
    fn answer(self, dims: &[StagedDim], groups: &Groups) -> Answer {
        let mut rows = Vec::new();
        if !self.empty && self.joined > 0 {
            for (g, &v) in self.sums.iter().enumerate() {
                let mut keys = Vec::new();
                let mut joined_group = true;
                for (i, d) in dims.iter().enumerate() {
                    let id = (g as u64 / groups.strides[i]) % groups.counts[i];
                    if let Some(group) = &d.group {
                        let value = groups.values[i][id as usize];
                        keys.push(group_value(group.dict.as_deref(), i64::from(value)));
                    }
                    joined_group &= id < groups.counts[i];
                }
                if v > 0 && joined_group {
                    rows.push(ResultRow { keys, value: v });
                }
            }
        }
        sort_rows(&mut rows);
        Answer {
            rows,
            host_ns: self.host_ns,
            joined: self.joined,
        }
    }
}

fn le_u32(c: &[u8]) -> u32 {
    u32::from_le_bytes(c.try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_bind_as_filter_strings_do() {
        let dec = ColumnSchema::decimal("lo_discount", 2);
        let min = i64::MIN;
        // More places than the scale: each operator rounds its own way.
        assert_eq!(
            cmp_of(&dec, None, Lit::Lt("0.055")).unwrap(),
            Cmp::Between(min, 5)
        );
        let between = cmp_of(&dec, None, Lit::Between("0.055", "0.075")).unwrap();
        assert_eq!(between, Cmp::Between(6, 7));
        assert_eq!(
            cmp_of(&dec, None, Lit::Eq("0.055")).unwrap(),
            Cmp::In(vec![])
        );
        assert_eq!(cmp_of(&dec, None, Lit::Eq("0.05")).unwrap(), Cmp::Eq(5));
        let list = cmp_of(&dec, None, Lit::In(&["0.05", "0.055", "1"])).unwrap();
        assert_eq!(list, Cmp::In(vec![5, 100]));
        // Strings absent from the dictionary order between its entries.
        let city = ColumnSchema::new("c_city", ColumnType::Dict);
        let d: Vec<String> = ["AIR", "MAIL", "SHIP"].map(String::from).to_vec();
        let d = Some(d.as_slice());
        assert_eq!(
            cmp_of(&city, d, Lit::Lt("zzz")).unwrap(),
            Cmp::Between(0, 2)
        );
        assert_eq!(
            cmp_of(&city, d, Lit::Between("B", "RAIL")).unwrap(),
            Cmp::Eq(1)
        );
        assert_eq!(cmp_of(&city, d, Lit::Eq("RAIL")).unwrap(), Cmp::In(vec![]));
        let e = cmp_of(&dec, None, Lit::Eq("five")).unwrap_err().to_string();
        assert!(e.contains("\"five\"") && e.contains("lo_discount"), "{e}");
    }
}
