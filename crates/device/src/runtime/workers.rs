//! The worker pools (compute, transfer, peer, admin), their threads, and running one
//! command to its completion, on a worker or inline on a submitting thread.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use csx_proto::{Completion, CopySource, Op, ProgramIndex, Status, WireTrapKind};

use super::queue_pair::{post, Job};
use super::{ns, Shared, INLINE_EXECUTE_NS_MAX, INLINE_TRANSFER_SIZE_MAX, WORKER_SPIN};
use crate::execute::StopReason;
use crate::queue::WorkQueue;
use crate::status::fail;

/// Which worker pool runs an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    Compute,
    Transfer,
    /// A Memory Copy that pulls from a peer device: it waits on that peer, which may be
    /// pulling from this device at the same moment, so it never holds a transfer worker
    /// (those serve the peers' reads; see `crate::peer`).
    Peer,
    Admin,
}

pub(super) fn class_of(op: &Op) -> Class {
    match op {
        Op::Execute { .. } => Class::Compute,
        Op::MemCopy { sources, .. }
            if sources.iter().any(|s| matches!(s, CopySource::Peer { .. })) =>
        {
            Class::Peer
        }
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

/// The queue of one class of commands and the count of its workers.
pub(super) struct Pool {
    pub(super) queue: WorkQueue<Job>,
    workers: u32,
    /// Jobs of this class running now (on a worker, or inline on a submitter).
    pub(super) running: AtomicU32,
}

impl Pool {
    pub(super) fn new(capacity: usize, workers: u32) -> Pool {
        Pool {
            queue: WorkQueue::new(capacity),
            workers,
            running: AtomicU32::new(0),
        }
    }

    /// Claims an idle worker's place for a job run inline; `false` when every worker is
    /// busy or jobs wait in the queue (they go first).
    pub(super) fn claim_idle(&self) -> bool {
        if !self.queue.is_empty() {
            return false;
        }
        // SeqCst pairs with `DeviceRuntime::shutdown`: either it sees this job running and
        // waits for it, or the submitter sees `stopping` after its claim.
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.workers).then_some(n + 1)
            })
            .is_ok()
    }
}

/// What an Execute's run (`took_ns` long, `c` its completion) says about how long the
/// slot's next run takes, the guess `QueuePair::submit_inline` goes by: `None` when it
/// says nothing new (the program never started: an empty slot, a bad window), `u64::MAX`
/// (not known, so never inline) when a limit or a stop ended it (an Abort, the time
/// limit, fuel, a closing pair or device: `stopped` is its stop flag being set), and its
/// time when the program ended by itself (exit, or a fault of its own).
///
/// A stopped run must not make its slot look short: an Execute run inline keeps the
/// transport's thread, which then reads no Abort for it until the run ends. A long
/// program aborted before it ran (a few microseconds) would otherwise run inline next
/// time, out of reach of its Abort until its time limit.
pub(super) fn execute_guess(stopped: bool, c: &Completion, took_ns: u64) -> Option<u64> {
    if stopped || matches!(c.status, Status::Aborted | Status::TimeLimitExceeded) {
        return Some(u64::MAX);
    }
    match &c.trap {
        Some(t) if matches!(t.kind, WireTrapKind::FuelExhausted { .. }) => Some(u64::MAX),
        Some(_) => Some(took_ns),
        None if c.status.is_success() => Some(took_ns),
        None => None,
    }
}

pub(super) fn worker(shared: &Shared, class: Class) {
    let pool = shared.pool(class);
    while let Some(job) = pool.queue.pop(WORKER_SPIN, None) {
        pool.running.fetch_add(1, Ordering::AcqRel);
        if class == Class::Transfer {
            // A copy from the media runs on a copier (still counted as running until
            // it ends); anything else waits for the copies before it that it may see
            // (`copies`). A throttled device holds each command to its modelled time,
            // so copies in flight together would beat its modelled media: there they
            // run here.
            match super::copies::detachable(&job) {
                Some(dst) if !shared.config.perf.throttle => {
                    shared.copies.hand_off(job, dst);
                    continue;
                }
                _ => shared.copies.wait_before(&job),
            }
        }
        shared.run(job);
        pool.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    pub(super) fn pool(&self, class: Class) -> &Pool {
        match class {
            Class::Compute => &self.compute,
            Class::Transfer => &self.transfer,
            Class::Peer => &self.peer,
            Class::Admin => &self.admin,
        }
    }

    /// Whether `op` is short enough to run inline (see `QueuePair::submit_inline`).
    pub(super) fn is_short(&self, job: &Job) -> bool {
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

    /// Records `ns` as the guess of how long the next Execute of slot `pind` takes.
    fn set_execute_guess(&self, pind: ProgramIndex, ns: u64) {
        if let Some(last) = self.execute_ns_last.get(usize::from(pind.0)) {
            last.store(ns, Ordering::Relaxed);
        }
    }

    /// Runs `job` on this thread and posts its completion.
    pub(super) fn run(&self, job: Job) {
        let started = Instant::now();
        // Only a throttled execution's floor needs its CPU time (a system call each way).
        let timed = self.config.perf.throttle && matches!(job.cmd.op, Op::Execute { .. });
        let cpu_started = timed.then(thread_cpu_ns);
        // A panic here is a device bug; it fails this command, not the worker (and so
        // not every later command). The tables recover from lock poisoning.
        if let Some(stop) = &job.stop {
            if self.stopping.load(Ordering::Acquire) {
                // The device is closing: a queued execution does not run.
                stop.stop(StopReason::Shutdown.code());
            }
        }
        let handled =
            panic::catch_unwind(AssertUnwindSafe(|| match (job.dma.as_deref(), &job.stop) {
                (Some(buffer), _) => self.dma(job.qp.client, &job.cmd.op, buffer),
                (None, Some(stop)) => {
                    let leash = job
                        .inline
                        .then(|| job.qp.overrun.get().map(|h| Arc::clone(&h.0)))
                        .flatten();
                    self.execute(job.qp.client, &job.cmd.op, stop, leash)
                }
                (None, None) => self.handle(job.qp.client, &job.cmd),
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
        match &job.cmd.op {
            Op::Execute { pind, .. } => {
                let stopped = job.stop.as_ref().is_some_and(|s| s.is_set());
                if let Some(guess) = execute_guess(stopped, &c, ns(started.elapsed())) {
                    self.set_execute_guess(*pind, guess);
                }
            }
            // Another program, or the same one on another engine: its runs are unknown.
            Op::ActivateProgram { pind, .. }
            | Op::DeactivateProgram { pind }
            | Op::UnloadProgram { pind, .. } => self.set_execute_guess(*pind, u64::MAX),
            _ => {}
        }
        // The performance model stamps the modelled time and holds the completion
        // until the command has taken it in real time (crate::perf).
        let cpu_ns = cpu_started.map_or(u64::MAX, |at| thread_cpu_ns().saturating_sub(at));
        self.config.perf.apply(&job.cmd.op, &mut c, started, cpu_ns);
        c.id = job.cmd.id;
        c.timing.queued_ns = started.duration_since(job.submitted).as_nanos() as u64;
        c.timing.total_ns = job.submitted.elapsed().as_nanos() as u64;
        // The buffer goes before the completion: the transport may reuse its memory as
        // soon as the host reaps.
        drop(job.dma);
        if let Some(stop) = &job.stop {
            job.qp.unregister(stop);
        }
        post(&job.qp, c);
    }
}

/// The CPU time the calling thread has used, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}
