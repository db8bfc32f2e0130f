//! Pipelines of operators on the device (`csx pipe`, and the mount's fused shell pipes).
//!
//! Every stage is a program loaded into a device slot; chunks flow from stage to stage
//! through device memory (SLM), never through the host:
//!
//! ```text
//! source ──▶ [in 0|in 1] ──▶ stage 1 ──▶ [out 0|out 1] ──▶ stage 2 ──▶ ... ──▶ sink
//!  file: Memory Copy on the device        each stage: one Execute per chunk
//!  host: Memory Write                     (window 0 = its input buffer, 1 = its output,
//!  none: the first stage generates         2 = its state)
//! ```
//!
//! Each stage owns two output buffers (double buffering) and runs on its own host thread
//! that only submits commands: while stage 2 works on chunk k, stage 1 already fills its
//! other buffer with chunk k+1, so the device's compute engines run the stages at once.
//! A buffer goes back to its producer once the consumer's Execute that read it has
//! completed. Only the sink moves payload across the link: a Memory Read to the host, or
//! nothing at all for a device file (File Write From Memory) or a discard.
//!
//! Failure: a stage that traps or returns a negative `CSX_E*` code stops the pipe; every
//! thread ends, the programs are unloaded, the memory freed, and the error names the
//! stage, the chunk and the trap. Output is never left looking complete: a device file
//! is written under a temporary name (`PATH.csx-pipe-partial`) renamed over `PATH` only
//! after the last chunk and a flush, and deleted on failure (the old `PATH`, if any,
//! stays as it was); a host sink has received the chunks before the failure, and the
//! caller (`csx op pipe --output`) writes to a temporary file it renames only on
//! success.
//!
//! Differences from Metal FS: an operator may appear more than once in a pipeline (each
//! stage has its own slot, buffers and state), and several pipelines may run on one
//! device at once (each holds its own slots and memory).

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csx_host::device::program_type_of;
use csx_host::session::{Session, SessionError};
use csx_host::{CallError, Device, ExecuteRequest};
use csx_proto::abi::op::{OP_AGAIN, OP_FIRST, OP_LAST, OP_LEN_MASK};
use csx_proto::ids::{MemHandle, ProgramIndex};
use csx_proto::limits::{MEM_IO_SIZE_MAX, SLM_ALLOC_SIZE_MAX};
use csx_proto::{EngineKind, MemRange};

use crate::ops::{OpError, Stage};

/// Default bytes of one chunk.
pub const CHUNK_DEFAULT: u64 = 4 << 20;
/// Smallest chunk.
pub const CHUNK_MIN: u64 = 4096;
/// Largest chunk.
pub const CHUNK_MAX: u64 = 256 << 20;

/// Where a pipeline's bytes come from.
pub enum Source {
    /// A device file: chunks staged into device memory on the device (Memory Copy).
    DeviceFile(String),
    /// A host stream: chunks written into device memory (Memory Write).
    Host(Box<dyn Read + Send>),
    /// Nothing: the first stage generates (`datagen`).
    Nothing,
}

/// Where the last stage's bytes go.
pub enum Sink {
    /// A device file, written on the device (File Write From Memory), replaced at the end.
    DeviceFile(String),
    /// A host stream (Memory Read).
    Host(Box<dyn Write + Send>),
    /// Nowhere: the bytes stay on the device (Metal FS's `/dev/null` sink).
    Discard,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::DeviceFile(p) => write!(f, "DeviceFile({p})"),
            Source::Host(_) => f.write_str("Host"),
            Source::Nothing => f.write_str("Nothing"),
        }
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::DeviceFile(p) => write!(f, "DeviceFile({p})"),
            Sink::Host(_) => f.write_str("Host"),
            Sink::Discard => f.write_str("Discard"),
        }
    }
}

/// How to run a pipeline.
#[derive(Clone, Debug)]
pub struct PipeOptions {
    /// Bytes of one source chunk.
    pub chunk: u64,
    pub engine: EngineKind,
    /// Fuel of each Execute; `None`: the device default.
    pub fuel: Option<u64>,
    /// Counts the source's bytes as they enter the pipeline (for a progress display).
    pub progress: Option<Arc<AtomicU64>>,
    /// Set from outside (a signal, a mount whose proxies are gone) to stop the run: the
    /// Executes in flight are aborted, the programs unloaded, the memory freed, and the
    /// run ends with [`PipeError::Stopped`].
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for PipeOptions {
    fn default() -> PipeOptions {
        PipeOptions {
            chunk: CHUNK_DEFAULT,
            engine: EngineKind::Jit,
            fuel: None,
            progress: None,
            stop: None,
        }
    }
}

/// What one stage did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StageReport {
    pub name: String,
    /// Executes (one per chunk, more when it asked again).
    pub calls: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The device's execution time (completions' execute_ns).
    pub device_ns: u64,
    /// The modelled time under the device's profile.
    pub modelled_ns: u64,
    /// Host wall time with one of its Executes in flight.
    pub busy_ns: u64,
}

/// What a pipeline did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PipeReport {
    pub stages: Vec<StageReport>,
    /// Bytes the source produced.
    pub bytes_in: u64,
    /// Bytes the last stage produced (what the sink received).
    pub bytes_out: u64,
    /// Payload bytes that crossed the link host → device (a host source).
    pub host_to_device: u64,
    /// Payload bytes that crossed the link device → host (a host sink).
    pub device_to_host: u64,
    pub chunk: u64,
    pub wall_ns: u64,
}

/// Why a pipeline failed.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("{what}: {source}")]
    Device {
        what: String,
        #[source]
        source: CallError,
    },
    #[error("stage {stage} ({name}) trapped at chunk {chunk}: {trap}")]
    Trap {
        stage: usize,
        name: String,
        chunk: u64,
        trap: String,
    },
    #[error("stage {stage} ({name}) failed at chunk {chunk} with {code} ({}){}", csx_proto::abi::errno::name(*.code), .detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    Failed {
        stage: usize,
        name: String,
        chunk: u64,
        code: i64,
        detail: Option<String>,
    },
    #[error("stage {stage} ({name}) reported {len} output bytes, its buffer holds {cap}")]
    OutputTooLarge {
        stage: usize,
        name: String,
        len: u64,
        cap: u64,
    },
    #[error("stage {stage} ({name}) asked to be called again without consuming or producing bytes at chunk {chunk}: it makes no progress (an operator answers CSX_OP_AGAIN only with output in the buffer)")]
    NoProgress {
        stage: usize,
        name: String,
        chunk: u64,
    },
    /// A step of the run's session failed (loading, activating, allocating).
    #[error("{what}: {source}")]
    Session {
        what: String,
        #[source]
        source: Box<SessionError>,
    },
    #[error("the pipe was stopped: {0}")]
    Stopped(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

impl PipeError {
    fn session(what: impl Into<String>) -> impl FnOnce(SessionError) -> PipeError {
        let what = what.into();
        move |source| PipeError::Session {
            what,
            source: Box::new(source),
        }
    }

    fn device(what: impl Into<String>) -> impl FnOnce(CallError) -> PipeError {
        let what = what.into();
        move |source| PipeError::Device { what, source }
    }
}

/// A chunk in device memory, on its way from a producer to its consumer.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    buf: MemHandle,
    len: u64,
    last: bool,
}

/// Device memory from `session` (freed when it ends) for `what`, within one
/// allocation's limit.
fn alloc(session: &mut Session<'_>, size: u64, what: &str) -> Result<MemHandle, PipeError> {
    if size > SLM_ALLOC_SIZE_MAX {
        return Err(PipeError::Invalid(format!(
            "{what} needs {size} bytes of device memory, one allocation holds at most {SLM_ALLOC_SIZE_MAX}"
        )));
    }
    session.alloc(size).map_err(PipeError::session(format!(
        "allocating {size} bytes for {what}"
    )))
}

/// The first error of a run; later ones are consequences.
struct FirstError {
    error: Mutex<Option<PipeError>>,
    abort: AtomicBool,
    /// The caller's stop flag ([`PipeOptions::stop`]).
    stop: Option<Arc<AtomicBool>>,
}

impl FirstError {
    fn set(&self, e: PipeError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.abort.store(true, Ordering::Release);
    }

    fn aborted(&self) -> bool {
        if self.abort.load(Ordering::Acquire) {
            return true;
        }
        if self
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire))
        {
            self.set(PipeError::Stopped("asked to stop".into()));
            return true;
        }
        false
    }

    /// The next value of `rx`, or `None` once the run aborted or the sender is gone (a
    /// thread blocked here never waits for a buffer a failed thread still holds).
    fn recv<T>(&self, rx: &Receiver<T>) -> Option<T> {
        loop {
            if self.aborted() {
                return None;
            }
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(v) => return Some(v),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

/// Runs `stages` from `source` to `sink` on `dev`. The run's programs and device
/// memory live in one session, released when it returns, whatever happened.
pub fn run(
    dev: &Device,
    stages: &[Stage],
    source: Source,
    sink: Sink,
    opts: &PipeOptions,
) -> Result<PipeReport, PipeError> {
    let start = Instant::now();
    check(stages, &source, opts)?;
    let mut session = Session::new(dev);
    let (src_bufs, plans) = prepare(&mut session, stages, &source, opts)?;
    let (output_path, temp_path) = match &sink {
        Sink::DeviceFile(p) => {
            let temp = format!("{p}.csx-pipe-partial");
            // A leftover of an earlier failed run: start clean.
            let _ = dev.delete_file(&temp);
            (Some(p.clone()), Some(temp))
        }
        _ => (None, None),
    };
    let first = FirstError {
        error: Mutex::new(None),
        abort: AtomicBool::new(false),
        stop: opts.stop.clone(),
    };
    let ends = Ends {
        source,
        src_bufs: &src_bufs,
        sink,
        temp: temp_path.as_deref(),
    };
    let mut report = stream(&session, &plans, ends, opts, &first);
    if let Some(e) = first.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        if let Some(t) = &temp_path {
            let _ = dev.delete_file(t);
        }
        return Err(e);
    }
    if let (Some(out), Some(temp)) = (output_path, temp_path) {
        commit(dev, &temp, &out, report.bytes_out)?;
    }
    session.close().map_err(PipeError::session(
        "releasing the pipe's programs and memory",
    ))?;
    report.wall_ns = start.elapsed().as_nanos() as u64;
    Ok(report)
}

/// The arguments' checks, before anything is sent to the device.
fn check(stages: &[Stage], source: &Source, opts: &PipeOptions) -> Result<(), PipeError> {
    if stages.is_empty() {
        return Err(OpError::EmptyStage.into());
    }
    if !(CHUNK_MIN..=CHUNK_MAX).contains(&opts.chunk) {
        return Err(PipeError::Invalid(format!(
            "chunk of {} bytes, must be {CHUNK_MIN}..={CHUNK_MAX}",
            opts.chunk
        )));
    }
    match (source, stages[0].source_only) {
        (Source::Nothing, false) => Err(PipeError::Invalid(format!(
            "no input: give one, or start the pipeline with a generator (datagen); {} reads its input",
            stages[0].name
        ))),
        (Source::DeviceFile(_) | Source::Host(_), true) => Err(PipeError::Invalid(format!(
            "{} generates its stream and ignores input: drop the input",
            stages[0].name
        ))),
        _ => Ok(()),
    }
}

/// Loads every stage and allocates the run's memory in `session`: the source's two
/// buffers (one small one for a generator's empty input), each stage's two outputs and
/// its zeroed state.
fn prepare(
    session: &mut Session<'_>,
    stages: &[Stage],
    source: &Source,
    opts: &PipeOptions,
) -> Result<(Vec<MemHandle>, Vec<StagePlan>), PipeError> {
    let mut pinds = Vec::with_capacity(stages.len());
    for (i, s) in stages.iter().enumerate() {
        let what = format!("stage {} ({})", i + 1, s.name);
        let pind = session
            .load_program_entry(
                &s.name,
                s.entry.as_deref(),
                program_type_of(&s.object),
                &s.object,
            )
            .map_err(PipeError::session(format!("loading {what}")))?;
        session
            .activate(pind, opts.engine)
            .map_err(PipeError::session(format!("activating {what}")))?;
        pinds.push(pind);
    }
    let mut in_cap = opts.chunk;
    let src_bufs = if matches!(source, Source::Nothing) {
        vec![alloc(session, 64, "the empty input")?]
    } else {
        vec![
            alloc(session, in_cap, "input buffer 0")?,
            alloc(session, in_cap, "input buffer 1")?,
        ]
    };
    let mut plans = Vec::with_capacity(stages.len());
    for ((i, s), pind) in stages.iter().enumerate().zip(pinds) {
        let cap = s.out.bytes(in_cap).max(64);
        let what = format!("stage {} ({})", i + 1, s.name);
        let outs = [
            alloc(session, cap, &format!("{what} output 0"))?,
            alloc(session, cap, &format!("{what} output 1"))?,
        ];
        let state_len = s.state_bytes.max(8);
        let state = alloc(session, state_len, &format!("{what} state"))?;
        session
            .fill(state, 0, state_len, 0)
            .map_err(PipeError::session(format!("zeroing {what} state")))?;
        plans.push(StagePlan {
            index: i + 1,
            name: s.name.clone(),
            pind,
            params: s.params.clone(),
            outs,
            cap,
            state,
            state_len,
            fuel: opts.fuel,
        });
        in_cap = cap;
    }
    Ok((src_bufs, plans))
}

/// Where a run's stream starts and ends.
struct Ends<'a> {
    source: Source,
    src_bufs: &'a [MemHandle],
    sink: Sink,
    /// The device sink's temporary file.
    temp: Option<&'a str>,
}

/// Streams the chunks: one thread per stage and one for the sink, the source on this
/// one, each buffer handed on by channel and given back by its consumer. Errors go to
/// `first`; the report counts what moved.
fn stream(
    session: &Session<'_>,
    plans: &[StagePlan],
    ends: Ends<'_>,
    opts: &PipeOptions,
    first: &FirstError,
) -> PipeReport {
    let dev = session.device();
    let mut report = PipeReport {
        chunk: opts.chunk,
        ..PipeReport::default()
    };
    std::thread::scope(|scope| {
        // Free lists: the producer's receiver, a sender for its consumer to give back.
        let (src_free_tx, src_free_rx) = sync_channel::<MemHandle>(2);
        for &b in ends.src_bufs {
            src_free_tx.send(b).expect("room for two");
        }
        let (tx0, rx) = sync_channel::<Chunk>(1);
        let (stage_handles, rx, upstream_free) =
            spawn_stages(scope, dev, plans, (rx, src_free_tx), first);
        let (sink, temp) = (ends.sink, ends.temp);
        let sink_handle = scope.spawn(move || {
            run_sink(dev, sink, temp, rx, upstream_free, first).unwrap_or_else(|e| {
                first.set(e);
                (0, 0)
            })
        });
        let source = SourceIo {
            bufs: ends.src_bufs,
            chunk: opts.chunk,
            free: src_free_rx,
            out: tx0,
            progress: opts.progress.as_deref(),
        };
        let (bytes_in, to_device) =
            run_source(dev, ends.source, source, first).unwrap_or_else(|e| {
                first.set(e);
                (0, 0)
            });
        report.bytes_in = bytes_in;
        report.host_to_device = to_device;
        for h in stage_handles {
            report.stages.push(h.join().unwrap_or_default());
        }
        let (bytes_out, to_host) = sink_handle.join().unwrap_or((0, 0));
        report.bytes_out = bytes_out;
        report.device_to_host = to_host;
    });
    report
}

/// Starts one thread per stage, chained by channels from the source's (`upstream`:
/// its chunks and its free list); returns their handles and the last stage's chunks
/// and free list, for the sink.
#[allow(clippy::type_complexity)]
fn spawn_stages<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    dev: &'env Device,
    plans: &'env [StagePlan],
    upstream: (Receiver<Chunk>, SyncSender<MemHandle>),
    first: &'env FirstError,
) -> (
    Vec<std::thread::ScopedJoinHandle<'scope, StageReport>>,
    Receiver<Chunk>,
    SyncSender<MemHandle>,
) {
    let (mut rx, mut upstream_free) = upstream;
    let mut handles = Vec::new();
    for plan in plans {
        let (free_tx, free_rx) = sync_channel::<MemHandle>(2);
        for &b in &plan.outs {
            free_tx.send(b).expect("room for two");
        }
        let (tx, next_rx) = sync_channel::<Chunk>(1);
        let io = StageIo {
            input: std::mem::replace(&mut rx, next_rx),
            give_back: std::mem::replace(&mut upstream_free, free_tx.clone()),
            free: free_rx,
            free_self: free_tx,
            output: tx,
        };
        handles.push(scope.spawn(move || {
            let mut st = StageReport {
                name: plan.name.clone(),
                ..StageReport::default()
            };
            if let Err(e) = plan.run(dev, io, first, &mut st) {
                first.set(e);
            }
            st
        }));
    }
    (handles, rx, upstream_free)
}

/// The device output exists only once it is whole: flush, then rename the temporary
/// file over the old one.
fn commit(dev: &Device, temp: &str, out: &str, bytes_out: u64) -> Result<(), PipeError> {
    if bytes_out == 0 {
        dev.write_file(temp, 0, &[])
            .map_err(PipeError::device(format!("creating {temp}")))?;
    }
    dev.flush()
        .map_err(PipeError::device("flushing the output"))?;
    dev.rename(temp, out)
        .map_err(PipeError::device(format!("renaming {temp} to {out}")))?;
    dev.flush()
        .map_err(PipeError::device("flushing the rename"))
}

struct StagePlan {
    index: usize,
    name: String,
    pind: ProgramIndex,
    params: Vec<u8>,
    outs: [MemHandle; 2],
    cap: u64,
    state: MemHandle,
    state_len: u64,
    fuel: Option<u64>,
}

/// A stage's channels: chunks in from its producer (given back when consumed), its
/// own free output buffers, and chunks out to its consumer.
struct StageIo {
    input: Receiver<Chunk>,
    give_back: SyncSender<MemHandle>,
    free: Receiver<MemHandle>,
    free_self: SyncSender<MemHandle>,
    output: SyncSender<Chunk>,
}

/// One Execute of a stage: chunk `chunk` (the `chunk_no`th) into `out`.
struct Call {
    chunk: Chunk,
    out: MemHandle,
    is_first: bool,
    chunk_no: u64,
}

/// What one Execute of a stage produced: `len` bytes in its output buffer, and whether
/// it asks to be called again on the same input.
struct Produced {
    len: u64,
    again: bool,
}

impl StagePlan {
    fn run(
        &self,
        dev: &Device,
        io: StageIo,
        first: &FirstError,
        st: &mut StageReport,
    ) -> Result<(), PipeError> {
        let mut chunk_no = 0u64;
        let mut is_first = true;
        while let Some(c) = first.recv(&io.input) {
            st.bytes_in += c.len;
            loop {
                let Some(out) = first.recv(&io.free) else {
                    return Ok(());
                };
                let call = Call {
                    chunk: c,
                    out,
                    is_first,
                    chunk_no,
                };
                let Some(p) = self.call(dev, call, first, st)? else {
                    return Ok(());
                };
                is_first = false;
                st.bytes_out += p.len;
                let last = c.last && !p.again;
                if p.len > 0 || last {
                    let next = Chunk {
                        buf: out,
                        len: p.len,
                        last,
                    };
                    if io.output.send(next).is_err() {
                        return Ok(());
                    }
                } else {
                    let _ = io.free_self.send(out);
                }
                if !p.again {
                    break;
                }
            }
            chunk_no += 1;
            let _ = io.give_back.send(c.buf);
            if c.last {
                break;
            }
        }
        Ok(())
    }

    /// One Execute of the stage, its result checked; `None` once the run was aborted.
    fn call(
        &self,
        dev: &Device,
        call: Call,
        first: &FirstError,
        st: &mut StageReport,
    ) -> Result<Option<Produced>, PipeError> {
        let Call {
            chunk: c,
            out,
            is_first,
            chunk_no,
        } = call;
        let flags = if is_first { OP_FIRST } else { 0 } | if c.last { OP_LAST } else { 0 };
        let in_window = if c.len == 0 { 64 } else { c.len };
        let mut req = ExecuteRequest::new(self.pind)
            .window(c.buf, 0, in_window)
            .window(out, 0, self.cap)
            .window(self.state, 0, self.state_len)
            .cparams(flags, c.len)
            .params(self.params.clone());
        if let Some(f) = self.fuel {
            req = req.fuel(f);
        }
        let t0 = Instant::now();
        let Some(ex) = execute(dev, &req, first).map_err(PipeError::device(format!(
            "stage {} ({}) at chunk {chunk_no}",
            self.index, self.name
        )))?
        else {
            return Ok(None);
        };
        st.busy_ns += t0.elapsed().as_nanos() as u64;
        st.calls += 1;
        st.device_ns += ex.timing.execute_ns;
        st.modelled_ns += ex.timing.modelled_ns;
        self.checked(&ex, chunk_no).map(Some)
    }

    /// What an Execute produced, or the typed error of a trap, a negative code, an
    /// output larger than the buffer or a call that made no progress.
    fn checked(&self, ex: &csx_host::Execution, chunk: u64) -> Result<Produced, PipeError> {
        let (stage, name) = (self.index, self.name.clone());
        if ex.trapped() {
            let trap = ex
                .trap
                .as_ref()
                .map_or_else(|| "a trap".to_owned(), |t| format!("{t:?}"));
            return Err(PipeError::Trap {
                stage,
                name,
                chunk,
                trap,
            });
        }
        if ex.r0_signed() < 0 {
            return Err(PipeError::Failed {
                stage,
                name,
                chunk,
                code: ex.r0_signed(),
                detail: ex
                    .detail
                    .as_ref()
                    .map(|d| format!("{}: {}", d.function, d.message)),
            });
        }
        let again = ex.r0 & OP_AGAIN != 0;
        let len = ex.r0 & OP_LEN_MASK;
        if len > self.cap {
            return Err(PipeError::OutputTooLarge {
                stage,
                name,
                len,
                cap: self.cap,
            });
        }
        if again && len == 0 {
            return Err(PipeError::NoProgress { stage, name, chunk });
        }
        Ok(Produced { len, again })
    }
}

/// How often a stage waiting for its Execute looks at the run's stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Runs `req`, aborting it when the run stops; `None` once it was aborted.
fn execute(
    dev: &Device,
    req: &ExecuteRequest,
    first: &FirstError,
) -> Result<Option<csx_host::Execution>, CallError> {
    let id = dev.submit_execute(req)?;
    loop {
        if first.aborted() {
            let _ = dev.abort(id);
            // The device answers an aborted execute promptly; its result no longer
            // matters, but waiting for it keeps the slot's next command in order.
            let _ = dev.wait_execute(id, Some(Duration::from_secs(5)));
            return Ok(None);
        }
        if let Some(ex) = dev.wait_execute(id, Some(STOP_POLL))? {
            return Ok(Some(ex));
        }
    }
}

/// The source's buffers and channels: free buffers in, filled chunks out.
struct SourceIo<'a> {
    bufs: &'a [MemHandle],
    chunk: u64,
    free: Receiver<MemHandle>,
    out: SyncSender<Chunk>,
    progress: Option<&'a AtomicU64>,
}

/// Feeds the first stage from `source`; returns (bytes read, bytes from the host).
fn run_source(
    dev: &Device,
    source: Source,
    io: SourceIo<'_>,
    first: &FirstError,
) -> Result<(u64, u64), PipeError> {
    match source {
        Source::Nothing => {
            let _ = io.out.send(Chunk {
                buf: io.bufs[0],
                len: 0,
                last: true,
            });
            Ok((0, 0))
        }
        Source::DeviceFile(path) => source_device_file(dev, &path, &io, first).map(|n| (n, 0)),
        Source::Host(reader) => source_host(dev, reader, &io, first).map(|n| (n, n)),
    }
}

impl SourceIo<'_> {
    /// Counts `n` bytes of input consumed, for the caller's progress.
    fn count(&self, n: u64) {
        if let Some(p) = self.progress {
            p.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Copies the device file into the source's buffers on the device, a chunk at a
/// time; returns the bytes read.
fn source_device_file(
    dev: &Device,
    path: &str,
    io: &SourceIo<'_>,
    first: &FirstError,
) -> Result<u64, PipeError> {
    let size = dev
        .stat(path)
        .map_err(PipeError::device(format!("the input {path}")))?
        .size_bytes;
    let mut off = 0u64;
    loop {
        let Some(buf) = first.recv(&io.free) else {
            return Ok(off);
        };
        let n = io.chunk.min(size - off);
        if n > 0 {
            let got = dev
                .copy_file_to_mem(path, off, n, buf, 0)
                .map_err(PipeError::device(format!("reading {path} at {off}")))?;
            if got != n {
                return Err(PipeError::Invalid(format!(
                    "{path} changed size while the pipe read it ({got} of {n} bytes at {off})"
                )));
            }
        }
        off += n;
        io.count(n);
        let last = off >= size;
        if io.out.send(Chunk { buf, len: n, last }).is_err() || last {
            return Ok(off);
        }
    }
}

/// Writes the host reader's bytes into the source's buffers, a chunk at a time;
/// returns the bytes read (all of which crossed from the host).
fn source_host(
    dev: &Device,
    mut reader: Box<dyn Read + Send>,
    io: &SourceIo<'_>,
    first: &FirstError,
) -> Result<u64, PipeError> {
    let mut data = vec![0u8; io.chunk as usize];
    let mut total = 0u64;
    loop {
        let Some(buf) = first.recv(&io.free) else {
            return Ok(total);
        };
        let n = fill(&mut *reader, &mut data)?;
        let last = n < data.len();
        if n > 0 {
            dev.write_mem(buf, 0, &data[..n])
                .map_err(PipeError::device("writing input into device memory"))?;
        }
        total += n as u64;
        io.count(n as u64);
        let chunk = Chunk {
            buf,
            len: n as u64,
            last,
        };
        if io.out.send(chunk).is_err() || last {
            return Ok(total);
        }
    }
}

/// Fills `data` from `reader` (a pipe gives short reads); fewer bytes only at the end
/// of the stream.
fn fill(reader: &mut dyn Read, data: &mut [u8]) -> Result<usize, PipeError> {
    let mut n = 0usize;
    while n < data.len() {
        match reader.read(&mut data[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(PipeError::Io {
                    what: "reading the input".into(),
                    source: e,
                })
            }
        }
    }
    Ok(n)
}

/// Takes the last stage's chunks to `sink` (a device sink writes `temp`); returns
/// (bytes written, bytes to the host).
fn run_sink(
    dev: &Device,
    sink: Sink,
    temp: Option<&str>,
    input: Receiver<Chunk>,
    give_back: SyncSender<MemHandle>,
    first: &FirstError,
) -> Result<(u64, u64), PipeError> {
    let (mut n_bytes, mut n_to_host) = (0u64, 0u64);
    let (bytes, to_host) = (&mut n_bytes, &mut n_to_host);
    let mut sink = sink;
    let mut buf = Vec::new();
    while let Some(c) = first.recv(&input) {
        if c.len > 0 {
            match &mut sink {
                Sink::DeviceFile(_) => {
                    let path = temp.expect("a device sink has a temporary path");
                    dev.write_mem_to_file(
                        path,
                        *bytes,
                        MemRange {
                            handle: c.buf,
                            offset: 0,
                            len: c.len,
                        },
                    )
                    .map_err(PipeError::device(format!("writing {path} at {}", *bytes)))?;
                }
                Sink::Host(w) => {
                    buf.resize(c.len as usize, 0);
                    dev.read_mem_into(c.buf, 0, &mut buf)
                        .map_err(PipeError::device("reading the output from device memory"))?;
                    *to_host += c.len;
                    w.write_all(&buf).map_err(|e| PipeError::Io {
                        what: "writing the output".into(),
                        source: e,
                    })?;
                }
                Sink::Discard => {}
            }
        }
        *bytes += c.len;
        let _ = give_back.send(c.buf);
        if c.last {
            break;
        }
    }
    if let Sink::Host(w) = &mut sink {
        w.flush().map_err(|e| PipeError::Io {
            what: "flushing the output".into(),
            source: e,
        })?;
    }
    Ok((n_bytes, n_to_host))
}

const _: () = assert!(CHUNK_MAX <= MEM_IO_SIZE_MAX * 16);
