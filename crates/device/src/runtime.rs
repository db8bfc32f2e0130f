//! The device: its namespaces, its worker threads, and the asynchronous
//! submission/completion interface hosts use (through a transport, or embedded).
//!
//! # Threads and queues
//!
//! ```text
//!  QueuePair::submit ──▶ validate ──▶ route ──┬─▶ compute queue ──▶ N engine threads (Execute)
//!  (any thread, returns                       ├─▶ transfer queue ─▶ M transfer workers
//!   immediately)                              │                     (Memory Read/Write/Fill/Copy, files)
//!                                             └─▶ admin queue ────▶ 1 admin worker
//!                                                                   (programs, range sets, SLM
//!                                                                    allocation, state, identify)
//!  QueuePair::reap ◀── the pair's completion queue ◀── every worker posts there
//! ```
//!
//! A transport's poller may instead run a short command on its own thread
//! (`QueuePair::submit_inline`: the pair's only command in flight, a worker of its kind
//! idle), so a round trip crosses no hand-off inside the device.
//!
//! Transfers run beside executions, so staging the next input overlaps running the
//! current program. Ordering between commands in flight is not guaranteed (as in NVMe);
//! a command sees every command that *completed* before it was submitted (completion is
//! the synchronisation point). Commands that touch the same SLM bytes concurrently are
//! refused with 95h instead of being serialised (see `slm`).
//!
//! # Bounds
//!
//! A queue pair has at most `depth` commands submitted and not yet reaped; its
//! completion queue has exactly that capacity, so posting never blocks or fails. At most
//! [`QUEUE_PAIRS_MAX`] pairs exist, which bounds every work queue at
//! `QUEUE_PAIRS_MAX × QUEUE_DEPTH_MAX` entries.
//!
//! # Lifecycle
//!
//! `Device::init` creates the state directory; `Device::open` opens it (one device per
//! directory at a time, enforced by a lock file). `Device::close` refuses new
//! submissions, lets the workers finish everything queued, then saves the shared state
//! and flushes the file store. A departing queue pair's allocations and range sets are
//! reclaimed.

use std::fs::{self, File};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use csx_ebpf::helper::FunctionTable;
use csx_proto::limits::*;
use csx_proto::*;

use crate::config::{ConfigError, DeviceConfig, CONFIG_FILE_NAME};
use crate::dma::DmaBuffer;
use crate::filestore::{FileStore, FileStoreError};
use crate::functions::{function_infos, function_table};
use crate::nvm::{Nvm, NvmError};
use crate::programs::{ProgramError, Programs, PROGRAMS_DIR_NAME};
use crate::queue::WorkQueue;
use crate::rangeset::RangeSets;
use crate::slm::{LeaseRequest, Slm, SlmError};
use crate::state::{SharedState, StateError};

/// File name of the NVM image in the state directory.
pub const NVM_FILE_NAME: &str = "nvm.img";

/// File name of the lock that keeps a state directory to one device.
pub const LOCK_FILE_NAME: &str = "device.lock";

/// How long a worker polls its queue before sleeping: long enough to catch the next
/// command of a busy host without a wake-up, short enough to idle cheaply.
pub const WORKER_SPIN: Duration = Duration::from_micros(50);

/// How long `QueuePair::reap` polls before sleeping.
pub const REAP_SPIN: Duration = Duration::from_micros(50);

/// The longest an Execute's previous run of the same slot may have taken for
/// [`QueuePair::submit_inline`] to run it on the submitting thread: a no-op is about a
/// microsecond, and a thread hand-off on a busy machine with few cores costs tens.
pub const INLINE_EXECUTE_NS_MAX: u64 = 20_000;

/// The most bytes a Memory Read or Write run by [`QueuePair::submit_inline`] moves (a
/// 1 MiB copy takes about 40 µs at memcpy speed).
pub const INLINE_TRANSFER_SIZE_MAX: u64 = 1 << 20;

/// Why a device could not be initialised or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{} is already an initialised device", dir.display())]
    AlreadyInitialized { dir: PathBuf },
    #[error("{} is not a device state directory (no {CONFIG_FILE_NAME}); run `csx device init`", dir.display())]
    NotInitialized { dir: PathBuf },
    #[error("{} is in use by another device", dir.display())]
    Locked { dir: PathBuf },
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Nvm(#[from] NvmError),
    #[error(transparent)]
    FileStore(#[from] FileStoreError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("nvm image is {found} bytes, the configuration says {expected}")]
    NvmSizeMismatch { found: u64, expected: u64 },
    #[error("{count} queue pairs are open, limit is {QUEUE_PAIRS_MAX}")]
    TooManyQueuePairs { count: u32 },
    #[error("queue depth {depth} must be between 1 and {QUEUE_DEPTH_MAX}")]
    BadQueueDepth { depth: u32 },
    #[error("the device is closed")]
    Closed,
    #[error("cannot start a worker thread: {source}")]
    Spawn { source: io::Error },
}

/// Why a submission was not accepted (it then produces no completion).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    #[error("queue pair has {depth} commands in flight, its depth")]
    QueueFull { depth: u32 },
    #[error("the device is shutting down")]
    ShuttingDown,
}

/// Which worker pool runs an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Compute,
    Transfer,
    Admin,
}

fn class_of(op: &Op) -> Class {
    match op {
        Op::Execute { .. } => Class::Compute,
        Op::MemWrite { .. }
        | Op::MemRead { .. }
        | Op::MemFill { .. }
        | Op::MemCopy { .. }
        | Op::FileWrite { .. }
        | Op::FileRead { .. }
        | Op::FileList { .. }
        | Op::FileStat { .. }
        | Op::FileDelete { .. }
        | Op::FileTruncate { .. }
        | Op::FileExtents { .. }
        | Op::FileWriteFromMem { .. }
        | Op::DirCreate { .. }
        | Op::DirRemove { .. }
        | Op::FileRename { .. }
        | Op::DirRead { .. }
        | Op::PathStat { .. } => Class::Transfer,
        _ => Class::Admin,
    }
}

pub(crate) struct Job {
    qp: Arc<QpShared>,
    cmd: Command,
    submitted: Instant,
    /// The data of a Memory Read or Write, lent by the transport (see `dma`).
    dma: Option<Box<dyn DmaBuffer>>,
}

#[derive(Debug)]
pub(crate) struct QpShared {
    client: ClientId,
    depth: u32,
    cq: WorkQueue<Completion>,
    in_flight: AtomicU32,
}

/// Everything the workers share.
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) config: DeviceConfig,
    pub(crate) engines: u32,
    pub(crate) nvm: Arc<Nvm>,
    pub(crate) files: FileStore,
    pub(crate) slm: Arc<Slm>,
    pub(crate) rangesets: RangeSets,
    pub(crate) programs: Programs,
    pub(crate) state: SharedState,
    pub(crate) infos: Vec<FunctionInfo>,
    pub(crate) epoch: Instant,
    restore_failures: Vec<(ProgramIndex, String)>,
    compute: Pool,
    transfer: Pool,
    admin: Pool,
    /// Nanoseconds the last Execute of each slot took (`u64::MAX`: none yet), the
    /// guess of how long the next one takes (see `QueuePair::submit_inline`).
    execute_ns_last: Vec<AtomicU64>,
    stopping: AtomicBool,
    next_client: AtomicU32,
    live_pairs: AtomicU32,
}

/// The queue of one class of commands and the count of its workers.
struct Pool {
    queue: WorkQueue<Job>,
    workers: u32,
    /// Jobs of this class running now (on a worker, or inline on a submitter).
    running: AtomicU32,
}

impl Pool {
    fn new(capacity: usize, workers: u32) -> Pool {
        Pool {
            queue: WorkQueue::new(capacity),
            workers,
            running: AtomicU32::new(0),
        }
    }

    /// Claims an idle worker's place for a job run inline; `false` when every worker is
    /// busy or jobs wait in the queue (they go first).
    fn claim_idle(&self) -> bool {
        if !self.queue.is_empty() {
            return false;
        }
        // SeqCst pairs with `Device::shutdown`: either it sees this job running and
        // waits for it, or the submitter sees `stopping` after its claim.
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.workers).then_some(n + 1)
            })
            .is_ok()
    }
}

/// A csx device: NVM namespace with its file store, SLM, shared state, program slots
/// and engines. Talk to it through [`QueuePair`]s.
pub struct Device {
    shared: Option<Arc<Shared>>,
    threads: Vec<JoinHandle<()>>,
    _lock: File,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = self.shared.as_ref().map(|s| s.dir.clone());
        f.debug_struct("Device")
            .field("dir", &dir)
            .field("threads", &self.threads.len())
            .finish()
    }
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> DeviceError + 'a {
    move |source| DeviceError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// How long opening waits for a state directory's lock before reporting it `Locked`.
const LOCK_GRACE: Duration = Duration::from_millis(500);

fn lock_dir(dir: &Path) -> Result<File, DeviceError> {
    let path = dir.join(LOCK_FILE_NAME);
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path, "open"))?;
    let deadline = Instant::now() + LOCK_GRACE;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            // A lock that is only briefly held, as when a process that closed the device
            // had just forked a child (the child shares the lock's open file until its
            // exec closes it), is worth a short wait; a device really open elsewhere is
            // reported after LOCK_GRACE.
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(DeviceError::Locked {
                    dir: dir.to_path_buf(),
                })
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&path, "lock")(e)),
        }
    }
}

impl Device {
    /// Creates a device in `dir` (created if missing; it must not hold a device) and
    /// opens it.
    pub fn init(dir: &Path, config: DeviceConfig) -> Result<Device, DeviceError> {
        config.validate()?;
        fs::create_dir_all(dir).map_err(io_err(dir, "create"))?;
        if dir.join(CONFIG_FILE_NAME).exists() {
            return Err(DeviceError::AlreadyInitialized {
                dir: dir.to_path_buf(),
            });
        }
        let lock = lock_dir(dir)?;
        // The configuration is written last: a directory without it is not a device, so
        // an interrupted init is never mistaken for a working one.
        let nvm = Arc::new(Nvm::create(dir.join(NVM_FILE_NAME), config.nvm_size_bytes)?);
        let files = FileStore::create(dir, Arc::clone(&nvm))?;
        let state = SharedState::create(dir, config.state_size_bytes)?;
        let programs_dir = dir.join(PROGRAMS_DIR_NAME);
        fs::create_dir_all(&programs_dir).map_err(io_err(&programs_dir, "create"))?;
        config.save(dir)?;
        Device::start(dir, config, nvm, files, state, lock)
    }

    /// Opens the device in `dir`.
    pub fn open(dir: &Path) -> Result<Device, DeviceError> {
        if !dir.join(CONFIG_FILE_NAME).exists() {
            return Err(DeviceError::NotInitialized {
                dir: dir.to_path_buf(),
            });
        }
        let lock = lock_dir(dir)?;
        let config = DeviceConfig::load(dir)?;
        let nvm = Arc::new(Nvm::open(dir.join(NVM_FILE_NAME))?);
        if nvm.size() != config.nvm_size_bytes {
            return Err(DeviceError::NvmSizeMismatch {
                found: nvm.size(),
                expected: config.nvm_size_bytes,
            });
        }
        let files = FileStore::open(dir, Arc::clone(&nvm))?;
        let state = SharedState::open(dir, config.state_size_bytes)?;
        let programs_dir = dir.join(PROGRAMS_DIR_NAME);
        fs::create_dir_all(&programs_dir).map_err(io_err(&programs_dir, "create"))?;
        Device::start(dir, config, nvm, files, state, lock)
    }

    /// Opens the device in `dir`, initialising it with `config` first if `dir` holds
    /// none (the CLI's per-user default device).
    pub fn open_or_init(dir: &Path, config: DeviceConfig) -> Result<Device, DeviceError> {
        if dir.join(CONFIG_FILE_NAME).exists() {
            Device::open(dir)
        } else {
            Device::init(dir, config)
        }
    }

    fn start(
        dir: &Path,
        config: DeviceConfig,
        nvm: Arc<Nvm>,
        files: FileStore,
        state: SharedState,
        lock: File,
    ) -> Result<Device, DeviceError> {
        let engines = config.engines_effective();
        let transfer_workers = config.transfer_workers_effective();
        let functions: Arc<FunctionTable> = Arc::new(function_table());
        let jit = config.jit.unwrap_or(true);
        let programs = Programs::new(functions, jit, Some(dir.join(PROGRAMS_DIR_NAME)));
        // Slots that fail to restore stay empty or loaded; the host sees them in a
        // listing, and the embedder in `Device::restore_failures`.
        let restore_failures = programs
            .restore()
            .into_iter()
            .map(|(pind, e)| (pind, e.to_string()))
            .collect();
        let queue_capacity = (QUEUE_PAIRS_MAX * QUEUE_DEPTH_MAX) as usize;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            slm: Arc::new(Slm::new(config.slm_size_bytes)),
            config,
            engines,
            nvm,
            files,
            rangesets: RangeSets::new(),
            programs,
            state,
            infos: function_infos(),
            epoch: Instant::now(),
            restore_failures,
            compute: Pool::new(queue_capacity, engines),
            transfer: Pool::new(queue_capacity, transfer_workers),
            admin: Pool::new(queue_capacity, 1),
            execute_ns_last: (0..PROGRAM_SLOTS_COUNT)
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
            stopping: AtomicBool::new(false),
            next_client: AtomicU32::new(1),
            live_pairs: AtomicU32::new(0),
        });
        let mut device = Device {
            shared: Some(Arc::clone(&shared)),
            threads: Vec::new(),
            _lock: lock,
        };
        let pools = [
            (Class::Compute, engines, "engine"),
            (Class::Transfer, transfer_workers, "transfer"),
            (Class::Admin, 1, "admin"),
        ];
        for (class, count, name) in pools {
            for i in 0..count {
                let s = Arc::clone(&shared);
                let handle = std::thread::Builder::new()
                    .name(format!("csx-{name}-{i}"))
                    .spawn(move || worker(&s, class))
                    .map_err(|source| DeviceError::Spawn { source })?;
                device.threads.push(handle);
            }
        }
        Ok(device)
    }

    fn shared(&self) -> &Arc<Shared> {
        self.shared
            .as_ref()
            .expect("an open device has its shared state")
    }

    /// Opens a queue pair (a client) with room for `depth` commands in flight.
    pub fn queue_pair(&self, depth: u32) -> Result<QueuePair, DeviceError> {
        let shared = self.shared();
        if depth == 0 || depth > QUEUE_DEPTH_MAX {
            return Err(DeviceError::BadQueueDepth { depth });
        }
        if shared.stopping.load(Ordering::Acquire) {
            return Err(DeviceError::Closed);
        }
        let count = shared.live_pairs.fetch_add(1, Ordering::AcqRel);
        if count >= QUEUE_PAIRS_MAX {
            shared.live_pairs.fetch_sub(1, Ordering::AcqRel);
            return Err(DeviceError::TooManyQueuePairs { count });
        }
        let client = ClientId(shared.next_client.fetch_add(1, Ordering::Relaxed));
        shared.slm.register_client(client);
        Ok(QueuePair {
            shared: Arc::downgrade(shared),
            qp: Arc::new(QpShared {
                client,
                depth,
                cq: WorkQueue::new(depth as usize),
                in_flight: AtomicU32::new(0),
            }),
        })
    }

    /// The configuration the device runs with.
    pub fn config(&self) -> &DeviceConfig {
        &self.shared().config
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.shared().dir
    }

    /// Engine threads running.
    pub fn engines(&self) -> u32 {
        self.shared().engines
    }

    /// Program slots persisted in the state directory that could not be restored at
    /// open (for example because the function table changed), with the reason.
    pub fn restore_failures(&self) -> &[(ProgramIndex, String)] {
        &self.shared().restore_failures
    }

    /// The device's file store, for host-side readers in the same process (issue 6's
    /// host runtime reads extents itself).
    pub fn file_store(&self) -> &FileStore {
        &self.shared().files
    }

    /// Finishes everything queued, saves the shared state and flushes the file store.
    pub fn close(mut self) -> Result<(), DeviceError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), DeviceError> {
        let Some(shared) = self.shared.take() else {
            return Ok(());
        };
        shared.stopping.store(true, Ordering::SeqCst);
        shared.compute.queue.close();
        shared.transfer.queue.close();
        shared.admin.queue.close();
        for t in self.threads.drain(..) {
            // A worker that panicked has already posted nothing more; the rest of the
            // shutdown still runs so the file store is flushed.
            let _ = t.join();
        }
        // Commands a transport thread runs inline (`QueuePair::submit_inline`, short by
        // its rule) finish before the state is saved, as the workers' did.
        for pool in [&shared.compute, &shared.transfer, &shared.admin] {
            while pool.running.load(Ordering::SeqCst) > 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        let saved = shared.state.save();
        let flushed = shared.files.flush();
        drop(shared);
        saved?;
        flushed?;
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Errors are lost here; `close` reports them.
        let _ = self.shutdown();
    }
}

/// One client's submission and completion queues (an NVMe queue pair).
///
/// `submit` never waits; completions arrive in any order and are matched by
/// [`CommandId`]. Dropping the pair reclaims its SLM allocations and range sets.
#[derive(Debug)]
pub struct QueuePair {
    shared: Weak<Shared>,
    qp: Arc<QpShared>,
}

impl QueuePair {
    /// This pair's client id.
    pub fn client(&self) -> ClientId {
        self.qp.client
    }

    /// Most commands in flight.
    pub fn depth(&self) -> u32 {
        self.qp.depth
    }

    /// Commands submitted and not yet reaped.
    pub fn in_flight(&self) -> u32 {
        self.qp.in_flight.load(Ordering::Acquire)
    }

    /// Queues `cmd`. A command that fails validation is accepted and completes with
    /// its error status; only a full pair or a closing device refuse outright.
    pub fn submit(&self, cmd: Command) -> Result<(), SubmitError> {
        self.submit_inner(cmd, None, false)
    }

    /// Like [`QueuePair::submit_with_buffer`] (with `buffer`) or [`QueuePair::submit`]
    /// (without), but runs a short command on the calling thread when it is the only
    /// one of this pair in flight and a worker of its kind is idle (run to
    /// completion): its completion is ready when this returns.
    ///
    /// A round trip then crosses no thread hand-off inside the device, which on a busy
    /// machine with few cores saves a wake-up of tens of µs. Short means: a Memory Read
    /// or Write of at most [`INLINE_TRANSFER_SIZE_MAX`] bytes, or an Execute whose
    /// slot's previous run took at most [`INLINE_EXECUTE_NS_MAX`]; never when the
    /// performance model throttles (its waits would block the caller). Everything else
    /// is queued as usual. An inline command takes an idle worker's place, so the device
    /// runs about as many commands of a kind at once as it has workers of that kind (a
    /// worker that takes a queued job while an inline one runs may add one).
    pub fn submit_inline(
        &self,
        cmd: Command,
        buffer: Option<Box<dyn DmaBuffer>>,
    ) -> Result<(), SubmitError> {
        self.submit_inner(cmd, buffer, true)
    }

    /// Queues a Memory Write whose data is `buffer` (the op's own `data` must be empty)
    /// or a Memory Read whose data goes to `buffer` (of exactly the length read), so the
    /// device copies straight between host memory and SLM (see `dma`). The completion's
    /// value is the bytes moved; a read's reply is `Reply::None`. Any other op, or a
    /// buffer of the wrong length, completes with `InvalidField`.
    pub fn submit_with_buffer(
        &self,
        cmd: Command,
        buffer: Box<dyn DmaBuffer>,
    ) -> Result<(), SubmitError> {
        self.submit_inner(cmd, Some(buffer), false)
    }

    fn submit_inner(
        &self,
        cmd: Command,
        dma: Option<Box<dyn DmaBuffer>>,
        inline: bool,
    ) -> Result<(), SubmitError> {
        let submitted = Instant::now();
        let Some(shared) = self.shared.upgrade() else {
            return Err(SubmitError::ShuttingDown);
        };
        if shared.stopping.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        let in_flight = self.qp.in_flight.fetch_add(1, Ordering::AcqRel);
        if in_flight >= self.qp.depth {
            self.qp.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::QueueFull {
                depth: self.qp.depth,
            });
        }
        let checked = match &dma {
            None => cmd.validate().map_err(|e| (e.status(), e.to_string())),
            Some(buffer) => check_dma(&cmd.op, buffer.len()),
        };
        if let Err((status, message)) = checked {
            let mut c = Completion::error(cmd.id, status, "protocol", message);
            c.timing.total_ns = submitted.elapsed().as_nanos() as u64;
            post(&self.qp, c);
            return Ok(());
        }
        let pool = shared.pool(class_of(&cmd.op));
        let job = Job {
            qp: Arc::clone(&self.qp),
            cmd,
            submitted,
            dma,
        };
        let alone = in_flight == 0;
        if inline && alone && shared.is_short(&job) && pool.claim_idle() {
            if shared.stopping.load(Ordering::SeqCst) {
                // A shutdown began; it no longer waits for new work.
                pool.running.fetch_sub(1, Ordering::SeqCst);
                self.qp.in_flight.fetch_sub(1, Ordering::AcqRel);
                return Err(SubmitError::ShuttingDown);
            }
            shared.run(job);
            pool.running.fetch_sub(1, Ordering::SeqCst);
            return Ok(());
        }
        if pool.queue.push(job).is_err() {
            // Closed by a concurrent shutdown (never full: pairs × depth bound it).
            self.qp.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::ShuttingDown);
        }
        Ok(())
    }

    /// A completion if one is ready.
    pub fn try_reap(&self) -> Option<Completion> {
        let c = self.qp.cq.try_pop()?;
        self.qp.in_flight.fetch_sub(1, Ordering::AcqRel);
        Some(c)
    }

    /// The next completion, waiting up to `timeout` (`None`: until one arrives). Returns
    /// `None` on timeout, or at once if nothing is in flight.
    pub fn reap(&self, timeout: Option<Duration>) -> Option<Completion> {
        if self.in_flight() == 0 {
            return None;
        }
        let c = self.qp.cq.pop(REAP_SPIN, timeout)?;
        self.qp.in_flight.fetch_sub(1, Ordering::AcqRel);
        Some(c)
    }

    /// Submits `cmd` and waits for its completion: a blocking convenience for a pair
    /// with nothing else in flight (a completion of another command would be lost, so
    /// that is refused).
    pub fn call(&self, cmd: Command) -> Result<Completion, SubmitError> {
        assert_eq!(
            self.in_flight(),
            0,
            "QueuePair::call needs a pair with nothing in flight"
        );
        self.submit(cmd)?;
        // The only command in flight completes; workers always post.
        Ok(self.reap(None).expect("a submitted command completes"))
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            // Range sets first: `RangeSets::create` checks the SLM under its own lock.
            shared.rangesets.reclaim(self.qp.client);
            shared.programs.abandon_loads(self.qp.client);
            shared.slm.reclaim(self.qp.client);
            shared.live_pairs.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Checks a command submitted with a DMA buffer of `len` bytes.
fn check_dma(op: &Op, len: usize) -> Result<(), (Status, String)> {
    op.validate().map_err(|e| (e.status(), e.to_string()))?;
    let bad = |message: String| Err((Status::InvalidField, message));
    match op {
        Op::MemWrite { data, offset, .. } => {
            if !data.is_empty() {
                return bad("a memory write with a buffer carries no data of its own".into());
            }
            if len as u64 > MEM_IO_SIZE_MAX {
                return bad(format!(
                    "buffer has {len} bytes, limit is {MEM_IO_SIZE_MAX}"
                ));
            }
            if offset.checked_add(len as u64).is_none() {
                return bad(format!("write of {len} bytes at offset {offset} overflows"));
            }
            Ok(())
        }
        Op::MemRead { len: read_len, .. } if *read_len == len as u64 => Ok(()),
        Op::MemRead { len: read_len, .. } => bad(format!(
            "buffer has {len} bytes, the read asks for {read_len}"
        )),
        other => bad(format!("{} takes no buffer", other.name())),
    }
}

fn post(qp: &QpShared, c: Completion) {
    debug_assert!(
        c.validate().is_ok(),
        "device built an invalid completion: {:?}",
        c.validate()
    );
    // The pair's in-flight count reserved this slot at submission.
    let pushed = qp.cq.push(c);
    assert!(
        pushed.is_ok(),
        "completion queue overflow: in-flight accounting is broken"
    );
}

fn worker(shared: &Shared, class: Class) {
    let pool = shared.pool(class);
    while let Some(job) = pool.queue.pop(WORKER_SPIN, None) {
        pool.running.fetch_add(1, Ordering::AcqRel);
        shared.run(job);
        pool.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    fn pool(&self, class: Class) -> &Pool {
        match class {
            Class::Compute => &self.compute,
            Class::Transfer => &self.transfer,
            Class::Admin => &self.admin,
        }
    }

    /// Whether `op` is short enough to run inline (see `QueuePair::submit_inline`).
    fn is_short(&self, job: &Job) -> bool {
        if self.config.perf.throttle {
            return false;
        }
        let lent = job.dma.as_ref().map_or(0, |b| b.len() as u64);
        match &job.cmd.op {
            Op::Execute { pind, .. } => self
                .execute_ns_last
                .get(usize::from(pind.0))
                .is_some_and(|ns| ns.load(Ordering::Relaxed) <= INLINE_EXECUTE_NS_MAX),
            Op::MemRead { len, .. } => *len <= INLINE_TRANSFER_SIZE_MAX,
            Op::MemWrite { data, .. } => {
                data.len() as u64 <= INLINE_TRANSFER_SIZE_MAX && lent <= INLINE_TRANSFER_SIZE_MAX
            }
            _ => false,
        }
    }

    /// Runs `job` on this thread and posts its completion.
    fn run(&self, job: Job) {
        let started = Instant::now();
        // A panic here is a device bug; it fails this command, not the worker (and so
        // not every later command). The tables recover from lock poisoning.
        let handled = panic::catch_unwind(AssertUnwindSafe(|| match job.dma.as_deref() {
            Some(buffer) => self.dma(job.qp.client, &job.cmd.op, buffer),
            None => self.handle(job.qp.client, &job.cmd),
        }));
        let mut c = handled.unwrap_or_else(|payload| {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            fail(
                Status::Internal,
                "device",
                format!("{} failed: {message}", job.cmd.op.name()),
            )
        });
        if let Op::Execute { pind, .. } = &job.cmd.op {
            if let Some(last) = self.execute_ns_last.get(usize::from(pind.0)) {
                last.store(ns(started.elapsed()), Ordering::Relaxed);
            }
        }
        // The performance model stamps the modelled time and holds the completion
        // until the command has taken it in real time (crate::perf).
        self.config.perf.apply(&job.cmd.op, &mut c, started);
        c.id = job.cmd.id;
        c.timing.queued_ns = started.duration_since(job.submitted).as_nanos() as u64;
        c.timing.total_ns = job.submitted.elapsed().as_nanos() as u64;
        // The buffer goes before the completion: the transport may reuse its memory as
        // soon as the host reaps.
        drop(job.dma);
        post(&job.qp, c);
    }
}

// ------------------------------------------------------------------------------------
// Command handlers (everything but Execute, which is in `execute`).

pub(crate) fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

fn ok(value: u64) -> Completion {
    let mut c = Completion::new(CommandId(0), Status::Success);
    c.value = value;
    c
}

fn with_reply(reply: Reply) -> Completion {
    let mut c = ok(0);
    c.reply = reply;
    c
}

fn fail(status: Status, component: &str, message: impl Into<String>) -> Completion {
    Completion::error(CommandId(0), status, component, message)
}

fn slm_fail(e: &SlmError) -> Completion {
    fail(e.status(), "slm", e.to_string())
}

fn program_fail(e: &ProgramError) -> Completion {
    fail(e.status(), e.component(), e.to_string())
}

/// The completion status for a file store error.
pub fn file_status(e: &FileStoreError) -> Status {
    match e {
        FileStoreError::NotFound { .. } => Status::NotFound,
        FileStoreError::Exists { .. } => Status::FileExists,
        FileStoreError::DirNotEmpty { .. } => Status::NotEmpty,
        FileStoreError::InvalidPath { .. }
        | FileStoreError::NotADirectory { .. }
        | FileStoreError::NotADir { .. }
        | FileStoreError::RenameIntoItself { .. }
        | FileStoreError::IsADirectory { .. } => Status::InvalidField,
        FileStoreError::TooManyDirs { .. } => Status::NoSpace,
        FileStoreError::NoSpace { .. }
        | FileStoreError::TooManyExtents { .. }
        | FileStoreError::TooManyFiles { .. } => Status::NoSpace,
        FileStoreError::FileTooLarge { .. } => Status::OutOfRange,
        FileStoreError::ImageTruncated { .. }
        | FileStoreError::ImageSizeMismatch { .. }
        | FileStoreError::MetaCorrupt { .. }
        | FileStoreError::MetaMissing { .. } => Status::Corrupt,
        FileStoreError::Nvm(NvmError::OutOfRange { .. }) => Status::OutOfRange,
        _ => Status::IoError,
    }
}

fn entry_info(e: crate::filestore::DirEntry) -> DirEntryInfo {
    DirEntryInfo {
        name: e.name,
        kind: match e.kind {
            crate::filestore::EntryKind::File => EntryKind::File,
            crate::filestore::EntryKind::Dir => EntryKind::Dir,
        },
        size_bytes: e.size,
        modified_ns: e
            .modified
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    }
}

fn file_fail(e: &FileStoreError) -> Completion {
    fail(file_status(e), "filestore", e.to_string())
}

impl Shared {
    fn handle(&self, client: ClientId, cmd: &Command) -> Completion {
        match &cmd.op {
            Op::Execute { .. } => self.execute(client, &cmd.op),
            Op::Identify => with_reply(Reply::Device(self.identify())),
            Op::ListFunctions => with_reply(Reply::Functions(self.infos.clone())),
            Op::ListPrograms => with_reply(Reply::Programs(self.programs.list())),
            Op::LoadProgram {
                pind,
                ptype,
                total_size_bytes,
                offset,
                data,
                entry,
            } => {
                let start = Instant::now();
                let r = self.programs.load_chunk(
                    client,
                    *pind,
                    *ptype,
                    *total_size_bytes,
                    *offset,
                    data,
                    entry.as_deref(),
                );
                let mut c = match r {
                    Ok(received) => ok(u64::from(received)),
                    Err(e) => program_fail(&e),
                };
                c.timing.transfer_ns = ns(start.elapsed());
                c
            }
            Op::UnloadProgram { pind } => self
                .programs
                .unload(*pind)
                .map_or_else(|e| program_fail(&e), |()| ok(0)),
            Op::ActivateProgram { pind, engine } => match self.programs.activate(*pind, *engine) {
                Ok(t) => {
                    let mut c = ok(0);
                    c.timing.prepare_ns = ns(t.verify + t.compile);
                    c
                }
                Err(e) => program_fail(&e),
            },
            Op::DeactivateProgram { pind } => self
                .programs
                .deactivate(*pind)
                .map_or_else(|e| program_fail(&e), |()| ok(0)),
            Op::RangeSetCreate { ranges } => match self.rangesets.create(&self.slm, client, ranges)
            {
                Ok(rsid) => ok(u64::from(rsid.0)),
                Err(e) => fail(e.status(), "rangeset", e.to_string()),
            },
            Op::RangeSetDelete { rsid } => match self.rangesets.delete(client, *rsid) {
                Ok(()) => ok(0),
                Err(e) => fail(e.status(), "rangeset", e.to_string()),
            },
            Op::ClearState { offset, len } => match self.state.clear(*offset, *len) {
                Ok(()) => ok(0),
                Err(e) => fail(Status::OutOfRange, "state", e.to_string()),
            },
            Op::Flush => self.flush(),
            Op::MemAlloc { size_bytes } => match self.slm.alloc(client, *size_bytes) {
                Ok(h) => ok(u64::from(h.0)),
                Err(e) => slm_fail(&e),
            },
            Op::MemFree { handle } => self
                .slm
                .free(client, *handle)
                .map_or_else(|e| slm_fail(&e), |()| ok(0)),
            _ => self.transfer(client, &cmd.op),
        }
    }

    fn identify(&self) -> DeviceInfo {
        DeviceInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            abi_version: ABI_VERSION,
            nvm_size_bytes: self.nvm.size(),
            slm_size_bytes: self.slm.size_bytes(),
            slm_free_bytes: self.slm.free_bytes(),
            state_size_bytes: self.state.size_bytes(),
            engines: self.engines,
            program_slots: PROGRAM_SLOTS_COUNT,
            programs_active_max: PROGRAMS_ACTIVE_MAX,
            range_sets_max: RANGE_SETS_MAX,
            ranges_per_set_max: RANGES_PER_SET_MAX as u16,
            params_size_max: PARAMS_SIZE_MAX as u32,
            program_size_max: PROGRAM_SIZE_MAX,
            load_chunk_size_max: LOAD_CHUNK_SIZE_MAX,
            mem_io_size_max: MEM_IO_SIZE_MAX,
            file_io_size_max: FILE_IO_SIZE_MAX,
            queue_depth_max: QUEUE_DEPTH_MAX,
            fuel_default: csx_ebpf::limits::FUEL_DEFAULT,
            jit: self.config.jit.unwrap_or(true),
        }
    }

    fn flush(&self) -> Completion {
        let start = Instant::now();
        let mut c = match (self.files.flush(), self.state.save()) {
            (Ok(()), Ok(())) => ok(0),
            (Err(e), _) => file_fail(&e),
            (_, Err(e)) => fail(Status::IoError, "state", e.to_string()),
        };
        c.timing.transfer_ns = ns(start.elapsed());
        c
    }

    /// A Memory Read or Write with its data in a lent buffer (checked by `check_dma`).
    fn dma(&self, client: ClientId, op: &Op, buffer: &dyn DmaBuffer) -> Completion {
        let start = Instant::now();
        let len = buffer.len() as u64;
        let (handle, offset, write) = match *op {
            Op::MemWrite { handle, offset, .. } => (handle, offset, true),
            Op::MemRead { handle, offset, .. } => (handle, offset, false),
            ref other => unreachable!("{} was refused at submission", other.name()),
        };
        let req = LeaseRequest {
            handle,
            offset,
            len,
            write,
        };
        let mut c = match self.slm.lease(client, &[req]) {
            Ok(mut leases) if write => {
                buffer.read_into(leases.slice_mut(0));
                ok(len)
            }
            Ok(leases) => {
                buffer.write_from(leases.slice(0));
                ok(len)
            }
            Err(e) => slm_fail(&e),
        };
        c.timing.transfer_ns = ns(start.elapsed());
        c
    }

    /// Data movement: SLM and file commands, on the transfer workers.
    fn transfer(&self, client: ClientId, op: &Op) -> Completion {
        let start = Instant::now();
        let mut c = match op {
            Op::MemWrite {
                handle,
                offset,
                data,
            } => match self.slm.write(client, *handle, *offset, data) {
                Ok(()) => ok(data.len() as u64),
                Err(e) => slm_fail(&e),
            },
            Op::MemRead {
                handle,
                offset,
                len,
            } => {
                let mut buf = vec![0u8; *len as usize];
                match self.slm.read(client, *handle, *offset, &mut buf) {
                    Ok(()) => with_reply(Reply::Data(buf)),
                    Err(e) => slm_fail(&e),
                }
            }
            Op::MemFill {
                handle,
                offset,
                len,
                byte,
            } => match self.slm.fill(client, *handle, *offset, *len, *byte) {
                Ok(()) => ok(*len),
                Err(e) => slm_fail(&e),
            },
            Op::MemCopy {
                dst,
                dst_offset,
                sources,
            } => self.mem_copy(client, *dst, *dst_offset, sources),
            Op::FileWriteFromMem { path, offset, src } => {
                let req = LeaseRequest {
                    handle: src.handle,
                    offset: src.offset,
                    len: src.len,
                    write: false,
                };
                match self.slm.lease(client, &[req]) {
                    Ok(leases) => match self.files.write_at(path, *offset, leases.slice(0)) {
                        Ok(()) => ok(src.len),
                        Err(e) => file_fail(&e),
                    },
                    Err(e) => slm_fail(&e),
                }
            }
            _ => self.file_op(op),
        };
        c.timing.transfer_ns = ns(start.elapsed());
        c
    }

    fn mem_copy(
        &self,
        client: ClientId,
        dst: MemHandle,
        dst_offset: u64,
        sources: &[CopySource],
    ) -> Completion {
        let total: u64 = sources.iter().map(CopySource::len).sum();
        // Lease the destination and every SLM source in one step.
        let mut reqs = vec![LeaseRequest {
            handle: dst,
            offset: dst_offset,
            len: total,
            write: true,
        }];
        for s in sources {
            if let CopySource::Mem {
                handle,
                offset,
                len,
            } = *s
            {
                reqs.push(LeaseRequest {
                    handle,
                    offset,
                    len,
                    write: false,
                });
            }
        }
        let mut leases = match self.slm.lease(client, &reqs) {
            Ok(l) => l,
            Err(e) => return slm_fail(&e),
        };
        let mut slices = leases.slices_mut();
        let (head, rest) = slices.split_at_mut(1);
        let out = head[0]
            .as_mut()
            .expect("the destination is leased writable");
        let mut pos = 0usize;
        let mut mem_sources = rest.iter();
        for (i, s) in sources.iter().enumerate() {
            let len = s.len() as usize;
            let piece = &mut out[pos..pos + len];
            if let CopySource::Mem { .. } = s {
                let src: &[u8] = match mem_sources.next().expect("one lease per memory source") {
                    Ok(s) => s,
                    Err(s) => s,
                };
                piece.copy_from_slice(src);
            } else if let Err(c) = self.copy_from_storage(i, s, piece) {
                return *c;
            }
            pos += len;
        }
        ok(total)
    }

    /// Reads storage source `i` (a file or NVM range) into `piece`, exactly, from the
    /// media: uncached, so a device-side read neither benefits from nor fills the host's
    /// page cache of the image (λ-IO's host/device comparison depends on it).
    fn copy_from_storage(
        &self,
        i: usize,
        s: &CopySource,
        piece: &mut [u8],
    ) -> Result<(), Box<Completion>> {
        match s {
            CopySource::File { path, offset, len } => {
                match self.files.read_at_uncached(path, *offset, piece) {
                    Ok(n) if n as u64 == *len => Ok(()),
                    Ok(n) => {
                        let message =
                            format!("source {i}: {path} has {n} of {len} bytes at {offset}");
                        Err(Box::new(fail(Status::OutOfRange, "filestore", message)))
                    }
                    Err(e) => {
                        let message = format!("source {i}: {e}");
                        Err(Box::new(fail(file_status(&e), "filestore", message)))
                    }
                }
            }
            CopySource::Nvm { offset, .. } => {
                self.nvm.read_at_uncached(*offset, piece).map_err(|e| {
                    let status = match e {
                        NvmError::OutOfRange { .. } => Status::OutOfRange,
                        _ => Status::IoError,
                    };
                    Box::new(fail(status, "nvm", format!("source {i}: {e}")))
                })
            }
            CopySource::Mem { .. } => unreachable!("memory sources are copied from their leases"),
        }
    }

    fn file_op(&self, op: &Op) -> Completion {
        let r: Result<Completion, FileStoreError> = (|| {
            Ok(match op {
                Op::FileWrite {
                    path,
                    offset,
                    data,
                    mode,
                } => {
                    match mode {
                        WriteMode::Write => {}
                        WriteMode::Truncate => match self.files.truncate(path, 0) {
                            Ok(()) | Err(FileStoreError::NotFound { .. }) => {}
                            Err(e) => return Err(e),
                        },
                        WriteMode::CreateNew => match self.files.stat(path) {
                            Ok(_) => {
                                return Ok(fail(
                                    Status::FileExists,
                                    "filestore",
                                    format!("{path} exists"),
                                ))
                            }
                            Err(FileStoreError::NotFound { .. }) => {}
                            Err(e) => return Err(e),
                        },
                    }
                    self.files.write_at(path, *offset, data)?;
                    ok(data.len() as u64)
                }
                Op::FileRead { path, offset, len } => {
                    let size = self.files.stat(path)?.size;
                    let n = size.saturating_sub(*offset).min(*len) as usize;
                    let mut buf = vec![0u8; n];
                    let got = self.files.read_at(path, *offset, &mut buf)?;
                    buf.truncate(got);
                    with_reply(Reply::Data(buf))
                }
                Op::FileList { dir } => {
                    let all = self.files.list(dir)?;
                    let mut files = Vec::new();
                    let mut bytes = 0usize;
                    let mut truncated = false;
                    for st in all {
                        bytes += st.path.len() + FileInfo::FIXED_SIZE;
                        if files.len() >= FILE_LIST_ENTRIES_MAX || bytes > PAYLOAD_SIZE_MAX {
                            truncated = true;
                            break;
                        }
                        files.push(FileInfo {
                            path: st.path,
                            size_bytes: st.size,
                            extent_count: st.extents,
                        });
                    }
                    with_reply(Reply::Files { files, truncated })
                }
                Op::FileStat { path } => {
                    let st = self.files.stat(path)?;
                    with_reply(Reply::File(FileInfo {
                        path: st.path,
                        size_bytes: st.size,
                        extent_count: st.extents,
                    }))
                }
                Op::FileDelete { path } => {
                    self.files.delete(path)?;
                    ok(0)
                }
                Op::FileTruncate { path, size_bytes } => {
                    self.files.truncate(path, *size_bytes)?;
                    ok(0)
                }
                Op::FileExtents { path } => {
                    let all = self.files.extents(path)?;
                    let truncated = all.len() > EXTENTS_MAX;
                    let extents = all
                        .into_iter()
                        .take(EXTENTS_MAX)
                        .map(|e| ExtentInfo {
                            file_offset: e.file_offset,
                            nvm_offset: e.nvm_offset,
                            len: e.len,
                        })
                        .collect();
                    with_reply(Reply::Extents { extents, truncated })
                }
                Op::DirCreate { path } => {
                    self.files.mkdir(path)?;
                    ok(0)
                }
                Op::DirRemove { path } => {
                    self.files.rmdir(path)?;
                    ok(0)
                }
                Op::FileRename { from, to } => {
                    self.files.rename(from, to)?;
                    ok(0)
                }
                Op::DirRead { dir, after, max } => {
                    let (all, more) = self.files.read_dir(dir, after, *max as usize)?;
                    let mut entries = Vec::with_capacity(all.len());
                    let mut bytes = 0usize;
                    let mut truncated = more;
                    for e in all {
                        bytes += e.name.len() + DirEntryInfo::FIXED_SIZE;
                        if bytes > PAYLOAD_SIZE_MAX {
                            truncated = true;
                            break;
                        }
                        entries.push(entry_info(e));
                    }
                    with_reply(Reply::Entries { entries, truncated })
                }
                Op::PathStat { path } => {
                    let e = self.files.lookup(path)?;
                    with_reply(Reply::Entries {
                        entries: vec![entry_info(e)],
                        truncated: false,
                    })
                }
                other => unreachable!("{} is not a file op", other.name()),
            })
        })();
        r.unwrap_or_else(|e| file_fail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device of 1 MiB of storage, `slm_size_bytes` of memory and one engine, in a
    /// temporary directory (kept alive by the first element).
    fn tiny_device(slm_size_bytes: u64) -> (tempfile::TempDir, Device) {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = DeviceConfig {
            nvm_size_bytes: 1 << 20,
            slm_size_bytes,
            state_size_bytes: 4096,
            engines: Some(1),
            ..DeviceConfig::default()
        };
        let dev = Device::init(dir.path(), config).expect("init");
        (dir, dev)
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Device>();
        check::<QueuePair>();
    }

    #[test]
    fn dma_buffers_move_memory_data() {
        use crate::dma::tests::HeapBuffer;
        use std::sync::Mutex;

        let (_dir, dev) = tiny_device(1 << 20);
        let qp = dev.queue_pair(4).expect("queue pair");
        let alloc = qp
            .call(Command::new(CommandId(1), Op::MemAlloc { size_bytes: 64 }))
            .expect("submit");
        let handle = MemHandle(alloc.value as u32);
        let write = Op::MemWrite {
            handle,
            offset: 8,
            data: vec![],
        };
        let source = Box::new(HeapBuffer(Mutex::new(vec![7u8; 16])));
        qp.submit_with_buffer(Command::new(CommandId(2), write), source)
            .expect("submit");
        let c = qp.reap(None).expect("completion");
        assert_eq!((c.status, c.value), (Status::Success, 16));
        let read = Op::MemRead {
            handle,
            offset: 0,
            len: 32,
        };
        let c = qp
            .call(Command::new(CommandId(3), read.clone()))
            .expect("submit");
        let Reply::Data(expected) = c.reply else {
            panic!("a read replies with data")
        };
        let target = std::sync::Arc::new(HeapBuffer(Mutex::new(vec![0u8; 32])));
        #[derive(Debug)]
        struct Shared(std::sync::Arc<HeapBuffer>);
        impl DmaBuffer for Shared {
            fn len(&self) -> usize {
                self.0.len()
            }
            fn read_into(&self, dst: &mut [u8]) {
                self.0.read_into(dst)
            }
            fn write_from(&self, src: &[u8]) {
                self.0.write_from(src)
            }
        }
        let lent = Box::new(Shared(std::sync::Arc::clone(&target)));
        qp.submit_with_buffer(Command::new(CommandId(4), read), lent)
            .expect("submit");
        let c = qp.reap(None).expect("completion");
        assert_eq!(
            (c.status, c.value, c.reply),
            (Status::Success, 32, Reply::None)
        );
        assert_eq!(*target.0.lock().expect("not poisoned"), expected);
        // A buffer of the wrong length, or with an op that takes none, is refused.
        let short = Op::MemRead {
            handle,
            offset: 0,
            len: 8,
        };
        let wrong = Box::new(HeapBuffer(Mutex::new(vec![0u8; 4])));
        qp.submit_with_buffer(Command::new(CommandId(5), short), wrong)
            .expect("submit");
        assert_eq!(
            qp.reap(None).expect("completion").status,
            Status::InvalidField
        );
        let flush = Box::new(HeapBuffer(Mutex::new(vec![0u8; 4])));
        qp.submit_with_buffer(Command::new(CommandId(6), Op::Flush), flush)
            .expect("submit");
        assert_eq!(
            qp.reap(None).expect("completion").status,
            Status::InvalidField
        );
        drop(qp);
        dev.close().expect("close");
    }

    /// A short command submitted inline while the pair has nothing else in flight has
    /// its completion ready when `submit_inline` returns; an Execute is short only once
    /// its slot has run quickly, and a long transfer is queued as usual.
    #[test]
    fn short_commands_run_inline() {
        use crate::dma::tests::HeapBuffer;
        use std::sync::Mutex;

        let (_dir, dev) = tiny_device(4 << 20);
        let qp = dev.queue_pair(4).expect("queue pair");
        let size_bytes = INLINE_TRANSFER_SIZE_MAX * 2;
        let alloc = qp
            .call(Command::new(CommandId(1), Op::MemAlloc { size_bytes }))
            .expect("submit");
        assert_eq!(alloc.status, Status::Success);
        let handle = MemHandle(alloc.value as u32);
        let read = |len: u64| Op::MemRead {
            handle,
            offset: 0,
            len,
        };
        let buffer = Box::new(HeapBuffer(Mutex::new(vec![0u8; 4096])));
        qp.submit_inline(Command::new(CommandId(2), read(4096)), Some(buffer))
            .expect("submit");
        let c = qp.try_reap().expect("an inline command has completed");
        assert_eq!(
            (c.id, c.status, c.value),
            (CommandId(2), Status::Success, 4096)
        );

        let shared = qp.shared.upgrade().expect("the device is open");
        let job = |op: Op, dma: Option<Box<dyn DmaBuffer>>| Job {
            qp: Arc::clone(&qp.qp),
            cmd: Command::new(CommandId(9), op),
            submitted: Instant::now(),
            dma,
        };
        let long = Box::new(HeapBuffer(Mutex::new(vec![0u8; size_bytes as usize])));
        assert!(!shared.is_short(&job(read(size_bytes), None)));
        let write = Op::MemWrite {
            handle,
            offset: 0,
            data: vec![],
        };
        assert!(!shared.is_short(&job(write, Some(long))));
        assert!(!shared.is_short(&job(Op::Identify, None)));
        let exec = Op::Execute {
            pind: ProgramIndex(3),
            windows: Windows::Inline(vec![]),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
        };
        assert!(!shared.is_short(&job(exec.clone(), None)), "never ran");
        shared.execute_ns_last[3].store(INLINE_EXECUTE_NS_MAX, Ordering::Relaxed);
        assert!(shared.is_short(&job(exec.clone(), None)));
        // The slot is empty: the execute fails, inline, and its time is recorded.
        qp.submit_inline(Command::new(CommandId(3), exec), None)
            .expect("submit");
        let c = qp.try_reap().expect("an inline command has completed");
        assert_eq!(c.id, CommandId(3));
        assert!(!c.status.is_success());
        assert_ne!(shared.execute_ns_last[3].load(Ordering::Relaxed), u64::MAX);
        drop(shared);
        drop(qp);
        dev.close().expect("close");
    }

    /// A load in progress belongs to its queue pair: another pair's first chunk into
    /// the slot is refused (99h) instead of restarting it, until the owner goes away.
    #[test]
    fn a_departing_pair_releases_its_load() {
        let (_dir, dev) = tiny_device(1 << 20);
        let (first, second) = (
            dev.queue_pair(2).expect("pair"),
            dev.queue_pair(2).expect("pair"),
        );
        // mov r0, 42; exit
        let image = [0xb7, 0, 0, 0, 42, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        let chunk = |id: u64, data: &[u8]| {
            Command::new(
                CommandId(id),
                Op::LoadProgram {
                    pind: ProgramIndex(7),
                    ptype: ProgramType::Raw,
                    total_size_bytes: 16,
                    offset: 0,
                    data: data.to_vec(),
                    entry: None,
                },
            )
        };
        let c = first.call(chunk(1, &image[..8])).expect("submit");
        assert_eq!((c.status, c.value), (Status::Success, 8));
        let c = second.call(chunk(2, &image)).expect("submit");
        assert_eq!(c.status, Status::ProgramInUse);
        drop(first);
        let c = second.call(chunk(3, &image)).expect("submit");
        assert_eq!((c.status, c.value), (Status::Success, 16));
        drop(second);
        dev.close().expect("close");
    }

    #[test]
    fn ops_go_to_their_pool() {
        assert_eq!(class_of(&Op::Identify), Class::Admin);
        assert_eq!(
            class_of(&Op::MemRead {
                handle: MemHandle(1),
                offset: 0,
                len: 1
            }),
            Class::Transfer
        );
        let exec = Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::Inline(vec![]),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
        };
        assert_eq!(class_of(&exec), Class::Compute);
    }
}
