//! A queue pair: one client's submission and completion queues. Submission validates a
//! command, routes it to the pool of its class (or runs a short one inline) and never
//! waits; reaping takes completions in any order.
//!
//! Each Execute gets a stop flag when it is submitted, kept in the pair's table of
//! executions until its completion is posted: Abort (answered at submission, on the
//! submitting thread) sets the flags of the executions with its target id, and a pair
//! that closes sets all of its own (see `crate::execute` for what a set flag does).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use csx_ebpf::engine::StopFlag;
use csx_proto::limits::MEM_IO_SIZE_MAX;
use csx_proto::{ClientId, Command, CommandId, Completion, Op, Status};

use super::workers::class_of;
use super::{Shared, SubmitError, REAP_SPIN};
use crate::dma::DmaBuffer;
use crate::execute::StopReason;
use crate::queue::WorkQueue;

pub(crate) struct Job {
    pub(super) qp: Arc<QpShared>,
    pub(super) cmd: Command,
    pub(super) submitted: Instant,
    /// The data of a Memory Read or Write, lent by the transport (see `dma`).
    pub(super) dma: Option<Box<dyn DmaBuffer>>,
    /// An Execute's stop flag, registered in the pair's `executions`.
    pub(super) stop: Option<Arc<StopFlag>>,
    /// Run inline on the submitting thread (`QueuePair::submit_inline`): an Execute's
    /// run is then leashed (`INLINE_LEASH`, the pair's overrun hook).
    pub(super) inline: bool,
}

/// The hook a transport gives [`QueuePair::on_inline_overrun`].
#[derive(Clone)]
pub(super) struct OverrunHook(pub(super) super::watchdog::LeashHook);

impl std::fmt::Debug for OverrunHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OverrunHook")
    }
}

#[derive(Debug)]
pub(crate) struct QpShared {
    pub(super) client: ClientId,
    pub(super) depth: u32,
    pub(super) cq: WorkQueue<Completion>,
    pub(super) in_flight: AtomicU32,
    /// The pair's executions submitted and not yet completed, with their stop flags (at
    /// most `depth`; ids may repeat, as a host may reuse one).
    pub(super) executions: Mutex<Vec<(CommandId, Arc<StopFlag>)>>,
    /// Called when an Execute run inline outlasts `INLINE_LEASH`.
    pub(super) overrun: std::sync::OnceLock<OverrunHook>,
}

impl QpShared {
    pub(super) fn new(client: ClientId, depth: u32) -> QpShared {
        QpShared {
            client,
            depth,
            cq: WorkQueue::new(depth as usize),
            in_flight: AtomicU32::new(0),
            executions: Mutex::new(Vec::new()),
            overrun: std::sync::OnceLock::new(),
        }
    }

    fn executions(&self) -> MutexGuard<'_, Vec<(CommandId, Arc<StopFlag>)>> {
        // Each update is one push or removal; a panic cannot leave it half done.
        self.executions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, id: CommandId) -> Arc<StopFlag> {
        let flag = Arc::new(StopFlag::new());
        self.executions().push((id, Arc::clone(&flag)));
        flag
    }

    /// Forgets an execution's flag (before its completion is posted, so an Abort that
    /// comes after the completion finds nothing).
    pub(super) fn unregister(&self, flag: &Arc<StopFlag>) {
        let mut runs = self.executions();
        if let Some(pos) = runs.iter().position(|(_, f)| Arc::ptr_eq(f, flag)) {
            runs.swap_remove(pos);
        }
    }

    /// Sets the stop flag of every execution with id `target`; how many there were.
    fn abort(&self, target: CommandId) -> u64 {
        let runs = self.executions();
        let mut count = 0;
        for (id, flag) in runs.iter() {
            if *id == target {
                flag.stop(StopReason::Abort.code());
                count += 1;
            }
        }
        count
    }

    /// Sets the stop flag of every execution of the pair with `reason`.
    fn abort_all(&self, reason: StopReason) {
        for (_, flag) in self.executions().iter() {
            flag.stop(reason.code());
        }
    }
}

/// One client's submission and completion queues (an NVMe queue pair).
///
/// `submit` never waits; completions arrive in any order and are matched by
/// [`CommandId`]. Dropping the pair reclaims its SLM allocations, its range sets and the
/// programs it loaded that were not made persistent.
#[derive(Debug)]
pub struct QueuePair {
    pub(super) shared: Weak<Shared>,
    pub(super) qp: Arc<QpShared>,
}

impl QueuePair {
    /// This pair's client id.
    pub fn client(&self) -> ClientId {
        self.qp.client
    }

    /// A memory file holding this client's allocation `handle`, for a host to map (see
    /// [`crate::slm::Slm::share`]): only the client that allocated it gets one.
    pub fn share_mem(
        &self,
        handle: csx_proto::MemHandle,
    ) -> Result<std::os::fd::OwnedFd, crate::slm::ShareError> {
        let Some(shared) = self.shared.upgrade() else {
            return Err(crate::slm::SlmError::ClientGone.into());
        };
        shared.slm.share(self.qp.client, handle)
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
    /// worker that takes a queued job while an inline one runs may add one). An inline
    /// Execute still running [`INLINE_LEASH`] after it began calls the pair's hook
    /// ([`QueuePair::on_inline_overrun`]), for the transport to read its Abort.
    pub fn submit_inline(
        &self,
        cmd: Command,
        buffer: Option<Box<dyn DmaBuffer>>,
    ) -> Result<(), SubmitError> {
        self.submit_inner(cmd, buffer, true)
    }

    /// Has the device call `hook` (on its watchdog thread; it must not block) whenever
    /// an Execute this pair runs inline ([`QueuePair::submit_inline`]) still runs
    /// [`INLINE_LEASH`] after it began. The run holds the submitting thread, so a
    /// transport that reads its client on that thread frees another reader in `hook`:
    /// an Abort for the run is then read and acted on while it runs. Set once: `false`
    /// when a hook was already set.
    pub fn on_inline_overrun(&self, hook: impl Fn() + Send + Sync + 'static) -> bool {
        self.qp.overrun.set(OverrunHook(Arc::new(hook))).is_ok()
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
        if let Op::Abort { target } = cmd.op {
            // Answered here, so an abort never waits behind other work.
            self.answer_abort(&shared, cmd.id, target, submitted);
            return Ok(());
        }
        let pool = shared.pool(class_of(&cmd.op));
        let stop = matches!(cmd.op, Op::Execute { .. }).then(|| self.qp.register(cmd.id));
        let mut job = Job {
            qp: Arc::clone(&self.qp),
            cmd,
            submitted,
            dma,
            stop,
            inline: false,
        };
        let alone = in_flight == 0;
        if inline && alone && shared.is_short(&job) && pool.claim_idle() {
            job.inline = true;
            if shared.stopping.load(Ordering::SeqCst) {
                // A shutdown began; it no longer waits for new work.
                pool.running.fetch_sub(1, Ordering::SeqCst);
                self.refuse(job);
                return Err(SubmitError::ShuttingDown);
            }
            shared.run(job);
            pool.running.fetch_sub(1, Ordering::SeqCst);
            return Ok(());
        }
        if let Err(job) = pool.queue.push(job) {
            // Closed by a concurrent shutdown (never full: pairs × depth bound it).
            self.refuse(job);
            return Err(SubmitError::ShuttingDown);
        }
        Ok(())
    }

    /// Aborts `target` and posts the Abort's completion (`id`): its value is the runs
    /// stopped. Those still queued complete now (as aborted, without running) rather
    /// than when an engine gets to them.
    fn answer_abort(&self, shared: &Shared, id: CommandId, target: CommandId, submitted: Instant) {
        let mut c = Completion::new(id, Status::Success);
        c.value = self.qp.abort(target);
        if c.value > 0 {
            let qp = &self.qp;
            let queued = shared
                .compute
                .queue
                .take_where(|job| Arc::ptr_eq(&job.qp, qp) && job.cmd.id == target);
            for job in queued {
                shared.run(job);
            }
        }
        c.timing.total_ns = submitted.elapsed().as_nanos() as u64;
        post(&self.qp, c);
    }

    /// Undoes the accounting of a job that will not run.
    fn refuse(&self, job: Job) {
        if let Some(flag) = &job.stop {
            self.qp.unregister(flag);
        }
        self.qp.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// Stops every execution of this pair in flight (queued ones complete without
    /// running), as when the pair closes; a transport calls this when its client is
    /// gone, before it waits for the pair's last completions. Their completions say
    /// Aborted, naming the closed pair.
    pub fn abort_all(&self) {
        self.qp.abort_all(StopReason::QueueClosed);
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
        // Executions still in flight stop now (nobody will reap them); their leases keep
        // the memory reclaimed below until they end, within a loop iteration.
        self.abort_all();
        if let Some(shared) = self.shared.upgrade() {
            // Range sets first: `RangeSets::create` checks the SLM under its own lock.
            shared.rangesets.reclaim(self.qp.client);
            // Its programs go with it, unless made persistent (those still running go
            // when their runs end).
            shared.programs.release_client(self.qp.client);
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

pub(super) fn post(qp: &QpShared, c: Completion) {
    debug_assert!(
        c.validate().is_ok(),
        "device built an invalid completion: {:?}",
        c.validate()
    );
    // The pair's in-flight count reserved this entry at submission.
    let pushed = qp.cq.push(c);
    assert!(
        pushed.is_ok(),
        "completion queue overflow: in-flight accounting is broken"
    );
}
