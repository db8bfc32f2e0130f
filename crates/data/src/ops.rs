//! The device side of csx-data: the operators of `sdk/ssb` (compiled by `build.rs`),
//! loaded into program slots and activated on one engine kind, device memory, and a
//! [`Meter`] that adds up what each command cost: modelled nanoseconds (the device's
//! performance model, the same on every machine), bytes to and from the host, bytes
//! read from the media and fuel.
//!
//! A [`Session`] frees its memory and unloads its programs when closed (and, best
//! effort, when dropped), so a failed query leaves the device as it found it.
//!
//! Modelled time: commands issued one after another add up; a batch of executions run
//! at once on the device's engines ([`Session::execute_all`]) costs its longest run
//! when the batch is no larger than the device's engine count, and the sum of its runs
//! spread over the engines otherwise.

use std::collections::{HashMap, HashSet};
use std::ops::Deref;
use std::sync::Arc;

use csx_host::proto::limits::{FILE_IO_SIZE_MAX, MEM_IO_SIZE_MAX};
use csx_host::proto::{CopySource, EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply};
use csx_host::{CallError, Device, ExecuteRequest, Execution};

use crate::error::DataError;

mod compiled {
    include!(concat!(env!("OUT_DIR"), "/ssb_programs.rs"));
}

/// Every operator: `(name, eBPF object)`.
pub fn programs() -> &'static [(&'static str, &'static [u8])] {
    compiled::PROGRAMS
}

/// The eBPF object of operator `name`.
pub fn program(name: &str) -> Option<&'static [u8]> {
    compiled::PROGRAMS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, o)| *o)
}

/// Fuel of one operator run: 2^36, far above the ~10 fuel per row the operators use.
pub const OPERATOR_FUEL: u64 = 1 << 36;
/// Time limit of one operator run: 10 minutes (an interpreter probe of SF 100's rounds).
pub const OPERATOR_TIME_LIMIT_MS: u32 = 600_000;

/// What a run of commands cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meter {
    /// Modelled device time, ns (see the module doc for concurrent runs).
    pub modelled_ns: u64,
    /// Bytes the device sent the host (memory and file reads).
    pub bytes_to_host: u64,
    /// Bytes the host sent the device.
    pub bytes_from_host: u64,
    /// Bytes read from the media into device memory (Memory Copy from files).
    pub media_bytes: u64,
    /// Fuel the operators used.
    pub fuel: u64,
    /// Commands issued.
    pub commands: u64,
    /// Executions issued.
    pub executions: u64,
    /// Device wall ns the executions ran (each run's own time on its engine, summed:
    /// runs at once on several engines add up).
    pub execute_ns: u64,
    /// The executions' part of the wall time: per batch of runs at once, its longest
    /// run's execute ns, summed over batches (what wall time the VMs alone explain).
    pub execute_span_ns: u64,
}

impl Meter {
    /// What was added since `earlier` (a copy of this meter taken before).
    pub fn since(&self, earlier: &Meter) -> Meter {
        Meter {
            modelled_ns: self.modelled_ns - earlier.modelled_ns,
            bytes_to_host: self.bytes_to_host - earlier.bytes_to_host,
            bytes_from_host: self.bytes_from_host - earlier.bytes_from_host,
            media_bytes: self.media_bytes - earlier.media_bytes,
            fuel: self.fuel - earlier.fuel,
            commands: self.commands - earlier.commands,
            executions: self.executions - earlier.executions,
            execute_ns: self.execute_ns - earlier.execute_ns,
            execute_span_ns: self.execute_span_ns - earlier.execute_span_ns,
        }
    }

    pub fn add(&mut self, other: &Meter) {
        self.modelled_ns += other.modelled_ns;
        self.bytes_to_host += other.bytes_to_host;
        self.bytes_from_host += other.bytes_from_host;
        self.media_bytes += other.media_bytes;
        self.fuel += other.fuel;
        self.commands += other.commands;
        self.executions += other.executions;
        self.execute_ns += other.execute_ns;
        self.execute_span_ns += other.execute_span_ns;
    }
}

/// A copy started by [`Session::start_copy_file`], not yet waited for.
#[derive(Debug)]
pub struct PendingCopy {
    id: csx_host::proto::CommandId,
    path: String,
    offset: u64,
    len: u64,
}

/// A window of an execution: `(allocation, offset, length)`.
pub type Window = (MemHandle, u64, u64);

/// One execution to run.
#[derive(Clone, Debug)]
pub struct Run {
    pub operator: &'static str,
    pub windows: Vec<Window>,
    pub cparam1: u64,
    pub cparam2: u64,
    pub params: Vec<u8>,
}

impl Run {
    pub fn new(operator: &'static str, windows: Vec<Window>) -> Run {
        Run {
            operator,
            windows,
            cparam1: 0,
            cparam2: 0,
            params: Vec::new(),
        }
    }

    pub fn cparams(mut self, c1: u64, c2: u64) -> Run {
        self.cparam1 = c1;
        self.cparam2 = c2;
        self
    }

    pub fn params(mut self, params: Vec<u8>) -> Run {
        self.params = params;
        self
    }
}

/// The device a session works on: borrowed, or shared (a session that outlives the
/// caller's stack frame, as a Python scan does).
#[derive(Debug)]
enum DeviceRef<'d> {
    Borrowed(&'d Device),
    Shared(Arc<Device>),
}

impl Deref for DeviceRef<'_> {
    type Target = Device;

    fn deref(&self) -> &Device {
        match self {
            DeviceRef::Borrowed(d) => d,
            DeviceRef::Shared(d) => d,
        }
    }
}

/// Programs, memory and accounting of one piece of work on one device.
#[derive(Debug)]
pub struct Session<'d> {
    dev: DeviceRef<'d>,
    engine: EngineKind,
    engines: u64,
    loaded: HashMap<&'static str, ProgramIndex>,
    /// Programs loaded by someone else ([`Session::adopt`]): run, never unloaded here.
    adopted: HashSet<&'static str>,
    allocs: Vec<MemHandle>,
    /// Copies started and not yet waited for: closing waits for them before freeing
    /// the memory they write.
    in_flight: Vec<csx_host::proto::CommandId>,
    pub meter: Meter,
}

/// The negative `CSX_E*` code's name, for error messages.
fn errno_name(code: i64) -> &'static str {
    match code {
        -2 => "CSX_ENOENT",
        -5 => "CSX_EIO",
        -7 => "CSX_E2BIG",
        -12 => "CSX_ENOMEM",
        -14 => "CSX_EFAULT",
        -22 => "CSX_EINVAL",
        -28 => "CSX_ENOSPC",
        -34 => "CSX_ERANGE",
        _ => "a CSX_E code",
    }
}

impl<'d> Session<'d> {
    /// A session on `dev` whose operators run on `engine`.
    pub fn new(dev: &'d Device, engine: EngineKind) -> Result<Session<'d>, DataError> {
        Session::with(DeviceRef::Borrowed(dev), engine)
    }

    /// A session that holds its device (no borrow): for work that outlives the
    /// caller's stack frame, such as a scan read batch by batch from Python.
    pub fn shared(dev: Arc<Device>, engine: EngineKind) -> Result<Session<'static>, DataError> {
        Session::with(DeviceRef::Shared(dev), engine)
    }

    fn with(dev: DeviceRef<'d>, engine: EngineKind) -> Result<Session<'d>, DataError> {
        let info = dev
            .identify()
            .map_err(|e| DataError::device("identify", e))?;
        Ok(Session {
            dev,
            engine,
            engines: u64::from(info.engines.max(1)),
            loaded: HashMap::new(),
            adopted: HashSet::new(),
            allocs: Vec::new(),
            in_flight: Vec::new(),
            meter: Meter::default(),
        })
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The device's compute engines.
    pub fn engines(&self) -> u64 {
        self.engines
    }

    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// Loads and activates operator `name` (once per session).
    pub fn prepare(&mut self, name: &'static str) -> Result<ProgramIndex, DataError> {
        if let Some(&p) = self.loaded.get(name) {
            return Ok(p);
        }
        let image = program(name).ok_or_else(|| DataError::Operator {
            operator: name.to_string(),
            message: "no such operator in this build".to_string(),
        })?;
        let pind = self
            .dev
            .load_program_any_slot(ProgramType::Elf, image, Some(name))
            .map_err(|e| DataError::device(format!("loading operator {name}"), e))?;
        self.loaded.insert(name, pind);
        self.dev
            .activate(pind, self.engine)
            .map_err(|e| DataError::device(format!("activating operator {name}"), e))?;
        Ok(pind)
    }

    /// Loads raw eBPF `image` (a program made at run time) as operator `name` and
    /// activates it on the session's engine kind; unloaded when the session closes.
    pub fn load_raw(
        &mut self,
        name: &'static str,
        image: &[u8],
    ) -> Result<ProgramIndex, DataError> {
        if let Some(p) = self.loaded.remove(name) {
            if !self.adopted.remove(name) {
                self.dev
                    .unload(p)
                    .map_err(|e| DataError::device(format!("unloading operator {name}"), e))?;
            }
        }
        let pind = self
            .dev
            .load_program_any_slot(ProgramType::Raw, image, Some(name))
            .map_err(|e| DataError::device(format!("loading operator {name}"), e))?;
        self.loaded.insert(name, pind);
        self.dev
            .activate(pind, self.engine)
            .map_err(|e| DataError::device(format!("activating operator {name}"), e))?;
        Ok(pind)
    }

    /// Runs operator `name` from `pind`, a slot someone else loaded and activated
    /// (and unloads): the session never unloads it.
    pub fn adopt(&mut self, name: &'static str, pind: ProgramIndex) {
        self.loaded.insert(name, pind);
        self.adopted.insert(name);
    }

    /// Allocates device memory, freed when the session closes.
    pub fn alloc(&mut self, bytes: u64) -> Result<MemHandle, DataError> {
        let h = self.dev.alloc(bytes.max(64)).map_err(|e| {
            DataError::device(format!("allocating {bytes} bytes of device memory"), e)
        })?;
        self.allocs.push(h);
        self.meter.commands += 1;
        Ok(h)
    }

    fn call(
        &mut self,
        what: impl FnOnce() -> String,
        op: Op,
    ) -> Result<csx_host::proto::Completion, DataError> {
        let c = self
            .dev
            .client()
            .call_ok(op)
            .map_err(|e| DataError::device(what(), e))?;
        self.meter.commands += 1;
        self.meter.modelled_ns += c.timing.modelled_ns;
        Ok(c)
    }

    /// Stages `len` bytes of the device file `path` from `offset` into `dst` (a Memory
    /// Copy: on the device, from the media).
    pub fn copy_file(
        &mut self,
        path: &str,
        offset: u64,
        len: u64,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<(), DataError> {
        let op = Op::MemCopy {
            dst,
            dst_offset,
            sources: vec![CopySource::File {
                path: path.to_string(),
                offset,
                len,
            }],
        };
        let c = self.call(|| format!("staging {len} bytes of {path} at {offset}"), op)?;
        if c.value != len {
            return Err(DataError::Invalid(format!(
                "{path}: staged {} bytes at {offset}, expected {len} (the file is shorter than its schema says)",
                c.value
            )));
        }
        self.meter.media_bytes += len;
        Ok(())
    }

    /// Starts [`Session::copy_file`] without waiting for it: the copy runs on the
    /// device's transfer workers while the caller does other work (an execution);
    /// [`Session::wait_copies`] finishes it. Every started copy must be waited for.
    pub fn start_copy_file(
        &mut self,
        path: &str,
        offset: u64,
        len: u64,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<PendingCopy, DataError> {
        let op = Op::MemCopy {
            dst,
            dst_offset,
            sources: vec![CopySource::File {
                path: path.to_string(),
                offset,
                len,
            }],
        };
        let id = self.dev.client().submit_private(op).map_err(|e| {
            DataError::device(format!("staging {len} bytes of {path} at {offset}"), e)
        })?;
        self.in_flight.push(id);
        Ok(PendingCopy {
            id,
            path: path.to_string(),
            offset,
            len,
        })
    }

    /// Waits for every copy of `copies` (all of them, even after a failure) and
    /// returns the first failure.
    pub fn wait_copies(&mut self, copies: Vec<PendingCopy>) -> Result<(), DataError> {
        let mut first = None;
        for p in copies {
            self.in_flight.retain(|&i| i != p.id);
            let what = || format!("staging {} bytes of {} at {}", p.len, p.path, p.offset);
            let c = match self.dev.client().wait(p.id, None) {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    first.get_or_insert(DataError::device(what(), e));
                    continue;
                }
            };
            self.meter.commands += 1;
            self.meter.modelled_ns += c.timing.modelled_ns;
            if !c.status.is_success() {
                first.get_or_insert(DataError::device(
                    what(),
                    CallError::from_completion("mem-copy", c),
                ));
                continue;
            }
            if c.value != p.len {
                first.get_or_insert(DataError::Invalid(format!(
                    "{}: staged {} bytes at {}, expected {} (the file is shorter than its schema says)",
                    p.path, c.value, p.offset, p.len
                )));
                continue;
            }
            self.meter.media_bytes += p.len;
        }
        first.map_or(Ok(()), Err)
    }

    /// Reads device memory to the host.
    pub fn read(&mut self, h: MemHandle, offset: u64, len: u64) -> Result<Vec<u8>, DataError> {
        let mut out = Vec::with_capacity(len as usize);
        let mut at = 0;
        while at < len {
            let n = (len - at).min(MEM_IO_SIZE_MAX);
            let op = Op::MemRead {
                handle: h,
                offset: offset + at,
                len: n,
            };
            let c = self.call(|| format!("reading {n} bytes of device memory"), op)?;
            match c.reply {
                Reply::Data(d) if d.len() as u64 == n => out.extend_from_slice(&d),
                _ => {
                    return Err(DataError::Invalid(format!(
                        "a memory read of {n} bytes returned another length"
                    )))
                }
            }
            at += n;
        }
        self.meter.bytes_to_host += len;
        Ok(out)
    }

    /// Reads `len` bytes of a device file from its start to the host (File Reads:
    /// media and link).
    pub fn read_file(&mut self, path: &str, len: u64) -> Result<Vec<u8>, DataError> {
        let mut out = Vec::with_capacity(len as usize);
        while (out.len() as u64) < len {
            let offset = out.len() as u64;
            let n = (len - offset).min(FILE_IO_SIZE_MAX);
            let op = Op::FileRead {
                path: path.to_string(),
                offset,
                len: n,
            };
            let c = self.call(|| format!("reading {path}"), op)?;
            match c.reply {
                Reply::Data(d) if !d.is_empty() => out.extend_from_slice(&d),
                _ => {
                    return Err(DataError::Invalid(format!(
                        "{path}: ends at {offset} bytes, expected {len}"
                    )))
                }
            }
        }
        self.meter.bytes_to_host += len;
        Ok(out)
    }

    fn request(&mut self, run: &Run) -> Result<ExecuteRequest, DataError> {
        let pind = self.prepare(run.operator)?;
        // An operator scans a whole chunk or partition (millions of rows on the
        // interpreter): it gets more than the device's default budgets.
        let mut req = ExecuteRequest::new(pind)
            .cparams(run.cparam1, run.cparam2)
            .params(run.params.clone())
            .fuel(OPERATOR_FUEL)
            .time_limit_ms(OPERATOR_TIME_LIMIT_MS);
        for &(h, off, len) in &run.windows {
            req = req.window(h, off, len);
        }
        Ok(req)
    }

    /// r0 and the modelled ns of a finished run; a negative r0 is an error unless
    /// `signed` (the caller interprets it).
    fn finish(
        &mut self,
        operator: &str,
        result: Result<Execution, CallError>,
        signed: bool,
    ) -> Result<(u64, u64, u64), DataError> {
        let x = result.map_err(|e| DataError::device(format!("operator {operator}"), e))?;
        self.meter.commands += 1;
        self.meter.executions += 1;
        self.meter.fuel += x.fuel_used;
        self.meter.execute_ns += x.timing.execute_ns;
        if let Some(trap) = &x.trap {
            return Err(DataError::Operator {
                operator: operator.to_string(),
                message: format!("trapped: {trap}"),
            });
        }
        if x.r0_signed() < 0 && !signed {
            let detail = x
                .detail
                .as_ref()
                .map(|d| format!(" ({}: {})", d.function, d.message))
                .unwrap_or_default();
            return Err(DataError::Operator {
                operator: operator.to_string(),
                message: format!(
                    "returned {} ({}){detail}",
                    x.r0_signed(),
                    errno_name(x.r0_signed())
                ),
            });
        }
        Ok((x.r0, x.timing.modelled_ns, x.timing.execute_ns))
    }

    /// Runs one execution and returns its r0.
    pub fn execute(&mut self, run: &Run) -> Result<u64, DataError> {
        let req = self.request(run)?;
        let result = self.dev.execute(&req);
        let (r0, ns, exec_ns) = self.finish(run.operator, result, false)?;
        self.meter.modelled_ns += ns;
        self.meter.execute_span_ns += exec_ns;
        Ok(r0)
    }

    /// Runs every execution of `runs` at once (their windows must not overlap) and
    /// returns their r0s in order.
    pub fn execute_all(&mut self, runs: &[Run]) -> Result<Vec<u64>, DataError> {
        self.execute_batch(runs, false)
    }

    /// [`Session::execute_all`] for operators whose negative r0 means something to the
    /// caller: r0s as signed, never an error.
    pub fn execute_all_signed(&mut self, runs: &[Run]) -> Result<Vec<i64>, DataError> {
        Ok(self
            .execute_batch(runs, true)?
            .into_iter()
            .map(|r| r as i64)
            .collect())
    }

    fn execute_batch(&mut self, runs: &[Run], signed: bool) -> Result<Vec<u64>, DataError> {
        let mut ids = Vec::new();
        for run in runs {
            let req = self.request(run)?;
            let id = self.dev.client().submit_private(req.to_op()).map_err(|e| {
                DataError::device(format!("submitting operator {}", run.operator), e)
            })?;
            ids.push(id);
        }
        let mut results = Vec::new();
        for id in ids {
            let c = self
                .dev
                .client()
                .wait(id, None)
                .map(|c| c.expect("a wait without a timeout returns a completion"));
            results.push(c.and_then(Execution::from_completion));
        }
        let mut r0s = Vec::new();
        let mut times = Vec::new();
        let mut span = 0;
        let mut first_err = None;
        for (run, result) in runs.iter().zip(results) {
            match self.finish(run.operator, result, signed) {
                Ok((r0, ns, exec_ns)) => {
                    r0s.push(r0);
                    times.push(ns);
                    span = span.max(exec_ns);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        self.meter.execute_span_ns += span;
        let longest = times.iter().copied().max().unwrap_or(0);
        let spread = times.iter().sum::<u64>().div_ceil(self.engines);
        self.meter.modelled_ns += longest.max(spread);
        Ok(r0s)
    }

    /// Frees the session's memory and unloads its programs.
    pub fn close(mut self) -> Result<Meter, DataError> {
        self.release()?;
        Ok(self.meter)
    }

    fn release(&mut self) -> Result<(), DataError> {
        let mut first = None;
        for id in std::mem::take(&mut self.in_flight) {
            // An error path left a copy in flight: it must not write freed memory.
            let _ = self.dev.client().wait(id, None);
        }
        for h in self.allocs.drain(..) {
            if let Err(e) = self.dev.free(h) {
                first.get_or_insert(DataError::device("freeing device memory", e));
            }
        }
        for (name, pind) in self.loaded.drain() {
            if self.adopted.contains(name) {
                continue;
            }
            if let Err(e) = self.dev.unload(pind) {
                first.get_or_insert(DataError::device(format!("unloading operator {name}"), e));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // Best effort: close() reports errors; a dropped session after an error only
        // tries to leave the device clean.
        let _ = self.release();
    }
}

/// Little-endian encoding helpers for operator parameters.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
