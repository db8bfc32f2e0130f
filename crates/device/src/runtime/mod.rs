//! The device: its namespaces, its worker threads, and the asynchronous
//! submission/completion interface hosts use (through a transport, or embedded).
//!
//! # Threads and queues
//!
//! ```text
//!  QueuePair::submit ──▶ validate ──▶ route ──┬─▶ compute queue ──▶ N engine threads (Execute)
//!  (any thread, returns                       ├─▶ transfer queue ─▶ M transfer workers
//!   immediately)                              │                     (Memory Read/Write/Fill/Copy, files)
//!                                             │                     └─▶ copiers (Memory Copies from
//!                                             │                         the media, several at once)
//!                                             └─▶ admin queue ────▶ 1 admin worker
//!                                                                   (programs, range sets, SLM
//!                                                                    allocation, state, identify)
//!  QueuePair::reap ◀── the pair's completion queue ◀── every worker posts there
//! ```
//!
//! A transport's poller may instead run a short command on its own thread
//! (`QueuePair::submit_inline`: the pair's only command in flight, a worker of its kind
//! idle), so a round trip crosses no hand-off inside the device. An Execute run so is
//! leashed: past [`INLINE_LEASH`] the watchdog calls the pair's overrun hook, and the
//! transport reads the client on another thread until the run ends (its Abort included).
//!
//! Transfers run beside executions, so staging the next input overlaps running the
//! current program. A Memory Copy that pulls from a peer device has its own workers: it
//! waits on the peer, and the peer may be pulling from this device at that moment, its
//! reads served by this device's transfer workers, which no pull ever holds (so daemons
//! pulling from each other, in any cycle, never wait on each other forever). Ordering between commands in flight is not guaranteed (as in NVMe);
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
//! `DeviceRuntime::init` creates the state directory; `DeviceRuntime::open` opens it
//! (one device per directory at a time, enforced by a lock file). `DeviceRuntime::close`
//! refuses new submissions, aborts every execution (running ones stop at their next
//! back-edge or call, queued ones complete without running, all with status Aborted),
//! lets the workers finish the other commands queued, then saves the shared state and
//! flushes the file store. A departing queue pair's executions are aborted the same way
//! and its allocations and range sets reclaimed. Flush does not abort: it waits for the
//! executions running at that moment (they hold the shared state), which their time
//! limits bound.
//!
//! # Abort and time limits
//!
//! Every Execute carries a stop flag from submission to completion (`queue_pair`); Abort
//! sets it by command id, and the watchdog thread (`watchdog`) sets it at the run's
//! time limit (its own, or `time_limit_ms` of `device.json`, 1 s by default). What a set
//! flag does to a run is in [`crate::execute`].
//!
//! # Modules
//!
//! - this one: the [`DeviceRuntime`] and its lifecycle (init, open, close), the state the
//!   workers share;
//! - `queue_pair`: [`QueuePair`], submission (validation, routing, inline runs) and
//!   reaping;
//! - `workers`: the worker pools, and running one command to its completion;
//! - `copies`: Memory Copies from the media, several in flight beside the transfer
//!   workers, in the queue's order against every other transfer command;
//! - `admin`: the command dispatch and the admin commands (programs, range sets, SLM
//!   allocation, state, identify, flush);
//! - `transfer`: data movement (memory and file commands, DMA buffers);
//! - `watchdog`: time limits, and stopping every run at close.
//!
//! Execute is in [`crate::execute`]; every error's status is chosen in [`crate::status`].

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use csx_ebpf::helper::FunctionTable;
use csx_proto::limits::*;
use csx_proto::{ClientId, FunctionInfo, ProgramIndex};

use crate::config::{ConfigError, DeviceConfig, CONFIG_FILE_NAME};
use crate::filestore::{FileStore, FileStoreError};
use crate::functions::{function_infos, function_table};
use crate::nvm::{Nvm, NvmError};
use crate::programs::{Programs, PROGRAMS_DIR_NAME};
use crate::rangeset::RangeSets;
use crate::slm::Slm;
use crate::state::{SharedState, StateError};

use queue_pair::QpShared;
pub(crate) use watchdog::LeashHook;
use watchdog::Watchdog;
use workers::{worker, Class, Pool};

mod admin;
mod copies;
mod dirs;
mod queue_pair;
#[cfg(test)]
mod tests;
mod transfer;
mod watchdog;
mod workers;

pub use queue_pair::QueuePair;

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

/// How long an Execute a transport runs inline ([`QueuePair::submit_inline`]) runs
/// before the device calls the pair's hook ([`QueuePair::on_inline_overrun`]), so the
/// transport frees a reader and an Abort for the run is read while the run still holds
/// the transport's thread. Far above an inline run's expected length (the slot's last
/// run took at most [`INLINE_EXECUTE_NS_MAX`]), so short runs never pay for it.
pub const INLINE_LEASH: Duration = Duration::from_millis(1);

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
    #[error(
        "{} holds an unfinished device (its {NVM_FILE_NAME} but no {CONFIG_FILE_NAME}: an \
         earlier init was interrupted, or {CONFIG_FILE_NAME} was removed); if it holds nothing \
         you need, remove the directory and run `csx device init` again",
        dir.display()
    )]
    Unfinished { dir: PathBuf },
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

/// Everything the workers share.
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) config: DeviceConfig,
    pub(crate) engines: u32,
    pub(crate) nvm: Arc<Nvm>,
    pub(crate) files: FileStore,
    pub(crate) slm: Arc<Slm>,
    /// File ranges kept in device memory between commands (see [`crate::resident`]).
    pub(crate) resident: crate::resident::Resident,
    pub(crate) rangesets: RangeSets,
    pub(crate) programs: Programs,
    pub(crate) state: SharedState,
    pub(crate) infos: Vec<FunctionInfo>,
    pub(crate) epoch: Instant,
    restore_failures: Vec<(ProgramIndex, String)>,
    compute: Pool,
    transfer: Pool,
    /// Memory Copies from peers (see the module doc).
    peer: Pool,
    admin: Pool,
    /// Nanoseconds the last Execute of each slot took (`u64::MAX`: none yet), the
    /// guess of how long the next one takes (see `QueuePair::submit_inline`).
    execute_ns_last: Vec<AtomicU64>,
    stopping: AtomicBool,
    next_client: AtomicU32,
    live_pairs: AtomicU32,
    pub(crate) watchdog: Watchdog,
    /// How this device reaches its peers (see [`crate::peer`]); unset: it does not.
    pub(crate) peers: std::sync::OnceLock<Arc<dyn crate::peer::PeerLink>>,
    /// Memory Copies from the media handed out by the transfer workers (`copies`).
    copies: copies::Copies,
}

/// A csx device: NVM namespace with its file store, SLM, shared state, program slots
/// and engines. Talk to it through [`QueuePair`]s.
pub struct DeviceRuntime {
    shared: Option<Arc<Shared>>,
    threads: Vec<JoinHandle<()>>,
    /// The copier threads (`copies`), which end after the transfer workers.
    copiers: Vec<JoinHandle<()>>,
    _lock: File,
}

impl std::fmt::Debug for DeviceRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = self.shared.as_ref().map(|s| s.dir.clone());
        f.debug_struct("DeviceRuntime")
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

/// Creates `dir` and any missing parents with mode 0700 whatever the umask; a directory
/// that exists keeps its mode.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

impl DeviceRuntime {
    /// Creates a device in `dir` (created if missing; it must not hold a device) and
    /// opens it.
    pub fn init(dir: &Path, config: DeviceConfig) -> Result<DeviceRuntime, DeviceError> {
        config.validate()?;
        // A directory made here is its user's alone (0700, whatever the umask): the
        // image and the metadata hold every stored byte, and another local user must go
        // through a daemon's checks, not read them. A directory given that exists keeps
        // the mode its owner chose.
        create_private_dir(dir).map_err(io_err(dir, "create"))?;
        if dir.join(CONFIG_FILE_NAME).exists() {
            return Err(DeviceError::AlreadyInitialized {
                dir: dir.to_path_buf(),
            });
        }
        let lock = lock_dir(dir)?;
        // An init killed part way leaves files but no configuration. They are not removed
        // here: the same state is a device whose configuration was deleted by hand.
        if dir.join(NVM_FILE_NAME).exists() {
            return Err(DeviceError::Unfinished {
                dir: dir.to_path_buf(),
            });
        }
        // The configuration is written last: a directory without it is not a device, so
        // an interrupted init is never mistaken for a working one.
        let nvm = Arc::new(Nvm::create(dir.join(NVM_FILE_NAME), config.nvm_size_bytes)?);
        nvm.set_media_reads(config.media_reads.unwrap_or_default());
        let files = FileStore::create(dir, Arc::clone(&nvm))?;
        let state = SharedState::create(dir, config.state_size_bytes)?;
        let programs_dir = dir.join(PROGRAMS_DIR_NAME);
        create_private_dir(&programs_dir).map_err(io_err(&programs_dir, "create"))?;
        config.save(dir)?;
        DeviceRuntime::start(dir, config, nvm, files, state, lock)
    }

    /// Opens the device in `dir`.
    pub fn open(dir: &Path) -> Result<DeviceRuntime, DeviceError> {
        if !dir.join(CONFIG_FILE_NAME).exists() {
            return Err(DeviceError::NotInitialized {
                dir: dir.to_path_buf(),
            });
        }
        let lock = lock_dir(dir)?;
        let config = DeviceConfig::load(dir)?;
        let nvm = Arc::new(Nvm::open(dir.join(NVM_FILE_NAME))?);
        nvm.set_media_reads(config.media_reads.unwrap_or_default());
        if nvm.size() != config.nvm_size_bytes {
            return Err(DeviceError::NvmSizeMismatch {
                found: nvm.size(),
                expected: config.nvm_size_bytes,
            });
        }
        let files = FileStore::open(dir, Arc::clone(&nvm))?;
        let state = SharedState::open(dir, config.state_size_bytes)?;
        let programs_dir = dir.join(PROGRAMS_DIR_NAME);
        create_private_dir(&programs_dir).map_err(io_err(&programs_dir, "create"))?;
        DeviceRuntime::start(dir, config, nvm, files, state, lock)
    }

    /// Opens the device in `dir`, initialising it with `config` first if `dir` holds
    /// none (the CLI's per-user default device).
    pub fn open_or_init(dir: &Path, config: DeviceConfig) -> Result<DeviceRuntime, DeviceError> {
        if dir.join(CONFIG_FILE_NAME).exists() {
            DeviceRuntime::open(dir)
        } else {
            DeviceRuntime::init(dir, config)
        }
    }

    fn start(
        dir: &Path,
        config: DeviceConfig,
        nvm: Arc<Nvm>,
        files: FileStore,
        state: SharedState,
        lock: File,
    ) -> Result<DeviceRuntime, DeviceError> {
        let engines = config.engines_effective();
        let transfer_workers = config.transfer_workers_effective();
        let functions: Arc<FunctionTable> = Arc::new(function_table());
        let jit = config.jit.unwrap_or(true);
        let programs = Programs::new(functions, jit, Some(dir.join(PROGRAMS_DIR_NAME)))
            .with_counting(config.perf.counts_work())
            .with_tiering(config.jit_tiering.unwrap_or(true));
        // Slots that fail to restore stay empty or loaded; the host sees them in a
        // listing, and the embedder in `DeviceRuntime::restore_failures`.
        let restore_failures = programs
            .restore()
            .into_iter()
            .map(|(pind, e)| (pind, e.to_string()))
            .collect();
        let queue_capacity = (QUEUE_PAIRS_MAX * QUEUE_DEPTH_MAX) as usize;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            slm: Arc::new(Slm::new(config.slm_size_bytes)),
            resident: crate::resident::Resident::new(config.resident_bytes.unwrap_or(0)),
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
            peer: Pool::new(queue_capacity, transfer_workers),
            admin: Pool::new(queue_capacity, 1),
            execute_ns_last: (0..PROGRAM_SLOTS_COUNT)
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
            stopping: AtomicBool::new(false),
            next_client: AtomicU32::new(1),
            live_pairs: AtomicU32::new(0),
            watchdog: Watchdog::default(),
            peers: std::sync::OnceLock::new(),
            copies: copies::Copies::default(),
        });
        let mut device = DeviceRuntime {
            shared: Some(Arc::clone(&shared)),
            threads: Vec::new(),
            copiers: Vec::new(),
            _lock: lock,
        };
        device.spawn_threads(&shared, engines, transfer_workers)?;
        Ok(device)
    }

    /// Starts the worker threads (each pool's, by class) and the watchdog's.
    fn spawn_threads(
        &mut self,
        shared: &Arc<Shared>,
        engines: u32,
        transfer_workers: u32,
    ) -> Result<(), DeviceError> {
        let pools = [
            (Class::Compute, engines, "engine"),
            (Class::Transfer, transfer_workers, "transfer"),
            (Class::Peer, transfer_workers, "peer"),
            (Class::Admin, 1, "admin"),
        ];
        for (class, count, name) in pools {
            for i in 0..count {
                let s = Arc::clone(shared);
                let handle = std::thread::Builder::new()
                    .name(format!("csx-{name}-{i}"))
                    .spawn(move || worker(&s, class))
                    .map_err(|source| DeviceError::Spawn { source })?;
                self.threads.push(handle);
            }
        }
        for i in 0..copies::COPIES_IN_FLIGHT_MAX {
            let s = Arc::clone(shared);
            let handle = std::thread::Builder::new()
                .name(format!("csx-copier-{i}"))
                .spawn(move || copies::copier(&s))
                .map_err(|source| DeviceError::Spawn { source })?;
            self.copiers.push(handle);
        }
        let s = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name("csx-watchdog".into())
            .spawn(move || s.watchdog.run())
            .map_err(|source| DeviceError::Spawn { source })?;
        self.threads.push(handle);
        Ok(())
    }

    fn shared(&self) -> &Arc<Shared> {
        self.shared
            .as_ref()
            .expect("an open device has its shared state")
    }

    /// Lets this device read its peers' storage through `link` (Memory Copy's peer
    /// sources). Set once: `false` when a link was already installed.
    pub fn set_peer_link(&self, link: Arc<dyn crate::peer::PeerLink>) -> bool {
        self.shared().peers.set(link).is_ok()
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
            qp: Arc::new(QpShared::new(client, depth)),
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

    /// The device's resident memory (file ranges kept between commands and clients):
    /// its budget can be changed while the device runs (lowering it evicts at once).
    pub fn resident(&self) -> &crate::resident::Resident {
        &self.shared().resident
    }

    /// The device's file store, for host-side readers in the same process (λ-IO's host
    /// side reads a file's extents from the image itself).
    pub fn file_store(&self) -> &FileStore {
        &self.shared().files
    }

    /// Aborts every execution, finishes the other commands queued, saves the shared
    /// state and flushes the file store.
    pub fn close(mut self) -> Result<(), DeviceError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), DeviceError> {
        let Some(shared) = self.shared.take() else {
            return Ok(());
        };
        shared.stopping.store(true, Ordering::SeqCst);
        // Running executions stop now and later ones at once; queued executions see
        // `stopping` and complete without running (`Shared::run`).
        shared.watchdog.close();
        shared.compute.queue.close();
        shared.transfer.queue.close();
        shared.peer.queue.close();
        shared.admin.queue.close();
        for t in self.threads.drain(..) {
            // A worker that panicked has already posted nothing more; the rest of the
            // shutdown still runs so the file store is flushed.
            let _ = t.join();
        }
        // The transfer workers hand out no more copies now.
        shared.copies.close();
        for t in self.copiers.drain(..) {
            let _ = t.join();
        }
        // Commands a transport thread runs inline (`QueuePair::submit_inline`, short by
        // its rule) finish before the state is saved, as the workers' did.
        for pool in [
            &shared.compute,
            &shared.transfer,
            &shared.peer,
            &shared.admin,
        ] {
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

impl Drop for DeviceRuntime {
    fn drop(&mut self) {
        // Errors are lost here; `close` reports them.
        let _ = self.shutdown();
    }
}

/// A duration in nanoseconds, saturating.
pub(crate) fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}
