//! Resident tables: what an SSB run stages and prepares on the device, kept between
//! runs on one device so that the next run of a query does not do it again.
//!
//! [`ResidentTables`] holds a session of its own on the device. Its memory keeps, per
//! LINEORDER staging plan (the columns, the rounds, the partitions, the selections' zone
//! maps), every round's staged and expanded columns, and per dimension (and its
//! selections) the dimension's staged columns; its programs keep the operators and each emitted probe activated (the JIT's
//! background tier lands once, not per run). A run through it ([`ResidentTables::run`])
//! stages and loads only what it does not hold yet; it still builds the dimensions'
//! tables, probes every row and merges, as a fresh run does.
//!
//! Staleness: before reusing a file's staged columns, a run copies a small sentinel
//! range of the file as a resident copy (`Session::set_resident`). The device serves a
//! resident range only while the file's content version is the one it was read at, and
//! the sentinel is first copied before the columns are staged: a sentinel served from
//! resident memory means no write, truncate, rename or delete touched the file since the
//! staging began. Any other answer (a write, the device's resident memory evicted it, a
//! device without resident memory) restages the file's entry. Evicting is only ever
//! slower, never wrong.
//!
//! Memory: LINEORDER's entries are kept within a byte budget, least recently used
//! first out; a dimension's entry (its columns, a few hundred KB at SF 1) is kept in a
//! session of its own until it is stale or the keeper closes.

use std::collections::HashMap;

use csx_host::proto::{EngineKind, MemHandle, ProgramIndex, ProgramType};
use csx_host::Device;

use crate::error::DataError;
use crate::ops::{self, Meter, Session};
use crate::ssb::queries::QuerySpec;
use crate::ssb::run::{QueryRun, RunOptions, StagedDim};

/// One kept entry: its allocations, their bytes, whether its staging completed, and
/// when it was last used.
#[derive(Debug)]
struct Kept {
    handles: Vec<MemHandle>,
    bytes: u64,
    staged: bool,
    used: u64,
}

/// A dimension's staged columns, in a session of their own (closing it frees every
/// allocation staging made), and the files they came from.
#[derive(Debug)]
struct KeptDim<'d> {
    session: Session<'d>,
    dim: StagedDim,
    files: Vec<String>,
}

/// Staged columns and prepared programs of SSB runs, kept on one device between runs
/// (see the module doc).
#[derive(Debug)]
pub struct ResidentTables<'d> {
    dev: &'d Device,
    session: Session<'d>,
    budget: u64,
    used_bytes: u64,
    clock: u64,
    sentinel: Option<MemHandle>,
    programs: HashMap<(String, EngineKind, Vec<u8>), ProgramIndex>,
    entries: HashMap<String, Kept>,
    dims: HashMap<String, KeptDim<'d>>,
    /// What the last run reused: entries found staged, dimensions found staged, and
    /// programs found loaded.
    pub(crate) reused_entries: u64,
    pub(crate) reused_dims: u64,
    pub(crate) reused_programs: u64,
}

impl<'d> ResidentTables<'d> {
    /// Nothing kept yet on `dev`; at most `budget` bytes of device memory kept.
    pub fn new(dev: &'d Device, budget: u64) -> ResidentTables<'d> {
        ResidentTables {
            dev,
            session: Session::new(dev),
            budget,
            used_bytes: 0,
            clock: 0,
            sentinel: None,
            programs: HashMap::new(),
            entries: HashMap::new(),
            dims: HashMap::new(),
            reused_entries: 0,
            reused_dims: 0,
            reused_programs: 0,
        }
    }

    /// Runs `q` over the dataset at `data_dir` as [`crate::ssb::run::run`] does, staging
    /// and loading only what is not kept yet (and keeping it).
    pub fn run(
        &mut self,
        data_dir: &str,
        q: &'static QuerySpec,
        opts: &RunOptions,
    ) -> Result<QueryRun, DataError> {
        self.reused_entries = 0;
        self.reused_dims = 0;
        self.reused_programs = 0;
        let dev = self.dev;
        crate::ssb::run::run_kept(dev, data_dir, q, opts, Some(self))
    }

    /// Bytes of device memory kept now.
    pub fn kept_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Frees everything kept; what keeping it cost.
    pub fn close(self) -> Result<Meter, DataError> {
        let mut first = Ok(());
        for (_, d) in self.dims {
            if let Err(e) = d.session.close() {
                first = first.and(Err(e));
            }
        }
        let meter = self.session.close()?;
        first?;
        Ok(meter)
    }

    /// Dimension entry `key`: kept and unchanged, or staged now by `stage` into a
    /// session of its own (`files` names the files it stages from, read with the run's
    /// session; their sentinels are copied before the staging starts).
    pub(crate) fn dim(
        &mut self,
        run: &mut Session,
        key: &str,
        resident: bool,
        files: impl FnOnce(&mut Session) -> Result<Vec<String>, DataError>,
        stage: impl FnOnce(&mut Session<'d>) -> Result<StagedDim, DataError>,
    ) -> Result<StagedDim, DataError> {
        if let Some(kept) = self.dims.get(key) {
            let files = kept.files.clone();
            if self.files_unchanged(run, &files)? {
                self.reused_dims += 1;
                return Ok(self.dims[key].dim.clone());
            }
            let stale = self.dims.remove(key).expect("an entry just found");
            stale.session.close()?;
        }
        let files = files(run)?;
        self.files_unchanged(run, &files)?;
        let mut session = Session::new(self.dev);
        session.set_resident(resident);
        let staged = stage(&mut session);
        run.meter.add(&session.meter);
        let dim = staged?;
        session.meter = Meter::default();
        let kept = KeptDim {
            session,
            dim: dim.clone(),
            files,
        };
        self.dims.insert(key.to_string(), kept);
        Ok(dim)
    }

    /// The keeper's own session, for staging into kept memory; `run` is the query's
    /// session, which is charged what the keeper's session spends meanwhile.
    pub(crate) fn with_session<T>(
        &mut self,
        run: &mut Session,
        resident: bool,
        f: impl FnOnce(&mut Session<'d>) -> Result<T, DataError>,
    ) -> Result<T, DataError> {
        let before = self.session.meter;
        self.session.set_resident(resident);
        let out = f(&mut self.session);
        let spent = self.session.meter.since(&before);
        run.meter.add(&spent);
        out
    }

    /// The program `name` (`image`, or the catalogue's operator when `image` is
    /// `None`) activated on `engine`, loaded once; the run's session adopts it.
    pub(crate) fn program(
        &mut self,
        run: &mut Session,
        name: &str,
        image: Option<&[u8]>,
        engine: EngineKind,
    ) -> Result<ProgramIndex, DataError> {
        let key = (name.to_string(), engine, image.unwrap_or_default().to_vec());
        let pind = match self.programs.get(&key) {
            Some(&p) => {
                self.reused_programs += 1;
                p
            }
            None => {
                let p = self.with_session(run, false, |k| match image {
                    Some(img) => Ok(k.load(name, ProgramType::Raw, img, engine)?),
                    None => ops::load(k, name, engine),
                })?;
                self.programs.insert(key, p);
                p
            }
        };
        run.adopt(name, pind);
        Ok(pind)
    }

    /// Whether every file of `files` is unchanged since it was last checked
    /// ([`ops::files_unchanged`]), charged to the run's meter.
    fn files_unchanged(&mut self, run: &mut Session, files: &[String]) -> Result<bool, DataError> {
        let sentinel = match self.sentinel {
            Some(h) => h,
            None => {
                let h = self.with_session(run, false, |k| ops::alloc(k, ops::SENTINELS_BYTES))?;
                self.sentinel = Some(h);
                h
            }
        };
        Ok(ops::files_unchanged(run, sentinel, files))
    }

    /// The kept allocations of entry `key` (`sizes` bytes each, staged from `files`):
    /// `(handles, staged)`, where `staged` says their content is complete and current.
    /// A missing or stale entry is (re)made empty; `None` when it cannot be kept within
    /// the budget (the run then stages into its own memory).
    pub(crate) fn entry(
        &mut self,
        run: &mut Session,
        key: &str,
        sizes: &[u64],
        files: &[String],
    ) -> Result<Option<(Vec<MemHandle>, bool)>, DataError> {
        let unchanged = self.files_unchanged(run, files)?;
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(key) {
            e.used = self.clock;
            e.staged &= unchanged;
            if e.staged {
                self.reused_entries += 1;
            }
            return Ok(Some((e.handles.clone(), e.staged)));
        }
        let bytes: u64 = sizes.iter().map(|&b| b.max(64)).sum();
        if bytes > self.budget {
            return Ok(None);
        }
        self.evict_for(bytes)?;
        let handles = self.with_session(run, false, |k| {
            sizes.iter().map(|&b| ops::alloc(k, b)).collect()
        })?;
        let kept = Kept {
            handles: Vec::clone(&handles),
            bytes,
            staged: false,
            used: self.clock,
        };
        self.used_bytes += bytes;
        self.entries.insert(key.to_string(), kept);
        Ok(Some((handles, false)))
    }

    /// Marks entry `key` staged: its content is complete.
    pub(crate) fn staged(&mut self, key: &str) {
        if let Some(e) = self.entries.get_mut(key) {
            e.staged = true;
        }
    }

    /// Frees least recently used entries until `bytes` more fit the budget.
    fn evict_for(&mut self, bytes: u64) -> Result<(), DataError> {
        let mut by_age: Vec<(u64, String)> = (self.entries.iter())
            .map(|(k, e)| (e.used, k.clone()))
            .collect();
        by_age.sort_unstable();
        for (_, key) in by_age {
            if self.used_bytes + bytes <= self.budget {
                break;
            }
            let e = self.entries.remove(&key).expect("a kept entry");
            for h in e.handles {
                self.session.free(h)?;
            }
            self.used_bytes -= e.bytes;
        }
        Ok(())
    }
}
