//! Asynchronous completion: requests queued with a callback or an event run on a worker
//! thread and complete later.
//!
//! * Each device handle has one [`Worker`], started by its first queued request: its
//!   requests run one at a time in the order they were queued, so their callbacks fire in
//!   that order (on the worker's thread). Batches, whose entries may name several
//!   devices, have one worker of their own for the process.
//! * A queued request has a [`Request`] in the registry (its `CS_REQ_HANDLE`) until it
//!   completes or is aborted. [`abort`] stops it: still queued, it completes with
//!   `CSX_ABORTED` without running; a running compute request gets the device's Abort (the
//!   engine stops at its next back-edge or call); a running batch runs no further entry.
//!   A running data transfer cannot be stopped (`CS_HANDLE_IN_USE`); one that finished,
//!   or an unknown handle, is `CS_INVALID_HANDLE`.
//! * [`Worker::shutdown`] (csCloseCSx) aborts every queued request and the running one,
//!   and waits until the worker has delivered every completion (unless it runs on the
//!   worker itself, inside a callback).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::thread::{JoinHandle, ThreadId};

use csx_host::proto::CommandId;
use csx_host::{SessionError, Submitted};

use crate::api::{perform, Completion, Fail, Work};
use crate::registry::{self, Dev};
use crate::status::*;

type R<T> = Result<T, Fail>;

fn fail<T>(status: CsStatus, message: impl Into<String>) -> R<T> {
    Err(Fail {
        status,
        message: message.into(),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a request does, which decides how it can be aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Host, storage and device memory: cannot be stopped once running.
    Transfer,
    /// A CSF execution: the device's Abort stops it.
    Compute,
    /// A batch: stops before its next entry; a running compute entry is aborted.
    Batch,
}

/// Where a queued request is.
#[derive(Debug)]
pub enum Phase {
    /// Waiting for its worker.
    Queued,
    /// Running; `exec` is the device execution in flight, if any.
    Running { exec: Option<(Arc<Dev>, CommandId)> },
}

/// A queued request: what `CS_REQ_HANDLE` names.
#[derive(Debug)]
pub struct Request {
    pub key: u64,
    pub kind: Kind,
    phase: Mutex<Phase>,
    aborted: AtomicBool,
}

impl Request {
    pub fn new(key: u64, kind: Kind) -> Request {
        Request {
            key,
            kind,
            phase: Mutex::new(Phase::Queued),
            aborted: AtomicBool::new(false),
        }
    }

    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    fn set_aborted(&self) {
        self.aborted.store(true, Ordering::Release);
    }

    fn aborted_error(&self) -> Fail {
        Fail {
            status: CSX_ABORTED,
            message: format!("request {} was aborted", self.key),
        }
    }

    /// Marks the request running (a transfer or a batch), or refuses when it was aborted
    /// while queued.
    pub fn start(&self) -> R<()> {
        let mut phase = lock(&self.phase);
        if self.aborted() {
            return Err(self.aborted_error());
        }
        *phase = Phase::Running { exec: None };
        Ok(())
    }

    /// Starts a device execution with `submit` unless the request was aborted (the
    /// error), recording its command id for [`abort`] (atomically: an abort sees the
    /// request either before it started or with its execution).
    pub fn start_exec(
        &self,
        dev: &Arc<Dev>,
        submit: impl FnOnce() -> Result<Submitted, SessionError>,
    ) -> R<Result<Submitted, SessionError>> {
        let mut phase = lock(&self.phase);
        if self.aborted() {
            return Err(self.aborted_error());
        }
        let submitted = submit();
        if let Ok(run) = &submitted {
            *phase = Phase::Running {
                exec: Some((Arc::clone(dev), run.id())),
            };
        }
        Ok(submitted)
    }

    /// The execution [`Request::start_exec`] started has completed.
    pub fn end_exec(&self) {
        *lock(&self.phase) = Phase::Running { exec: None };
    }
}

/// Aborts a queued request (see the module doc): `Ok(CS_SUCCESS)` when it will complete
/// with `CSX_ABORTED`.
///
/// The device's Abort needs no second try: the device registers an execution when it
/// takes the Execute, and takes one queue pair's commands in the order they were sent,
/// so an Abort sent after [`Request::start_exec`] recorded the id always finds the
/// execution unless it has completed. (The device runs an Execute inline on a tcp or shm
/// transport's thread only when its slot's last run ended by itself within
/// microseconds; a stopped run never counts, see csx-device's `execute_guess`, so a
/// long program's Abort is not left waiting behind it.)
pub fn abort(req: &Arc<Request>) -> R<CsStatus> {
    let phase = lock(&req.phase);
    let forget = || registry::with(|r| r.requests.remove(&req.key));
    match (&*phase, req.kind) {
        (Phase::Queued, _) => {
            req.set_aborted();
            forget();
            Ok(CS_SUCCESS)
        }
        (Phase::Running { exec }, Kind::Batch) => {
            // Set under the phase lock: the next entry's `start_exec` sees it, and no
            // further entry runs whether or not this one was still running.
            req.set_aborted();
            if let Some((dev, id)) = exec {
                dev.device.abort(*id)?;
            }
            forget();
            Ok(CS_SUCCESS)
        }
        (Phase::Running { exec: Some((dev, id)) }, Kind::Compute) => {
            if dev.device.abort(*id)? {
                req.set_aborted();
                forget();
                Ok(CS_SUCCESS)
            } else {
                fail(
                    CS_INVALID_HANDLE,
                    format!("request {} has already completed", req.key),
                )
            }
        }
        (Phase::Running { exec: None }, Kind::Compute) => fail(
            CS_INVALID_HANDLE,
            format!("request {} has already completed", req.key),
        ),
        (Phase::Running { .. }, Kind::Transfer) => fail(
            CS_HANDLE_IN_USE,
            format!(
                "request {} is a data transfer already running: it cannot be stopped and completes with its own status",
                req.key
            ),
        ),
    }
}

/// One queued request: what it does and how it completes.
#[derive(Debug)]
pub struct Job {
    pub name: &'static str,
    pub req: Arc<Request>,
    pub work: Work,
    pub done: Completion,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    closing: bool,
    current: Option<Arc<Request>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ready: Condvar,
}

/// A thread running queued requests in order (see the module doc).
#[derive(Default)]
pub struct Worker {
    shared: Arc<Shared>,
    thread: Mutex<Option<(JoinHandle<()>, ThreadId)>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.shared.state);
        f.debug_struct("Worker")
            .field("queued", &st.jobs.len())
            .field("closing", &st.closing)
            .finish()
    }
}

/// The worker of batches.
pub static BATCHES: LazyLock<Worker> = LazyLock::new(Worker::default);

impl Worker {
    /// Queues `job`, starting the thread on first use.
    pub fn push(&self, job: Job) -> R<()> {
        let mut thread = lock(&self.thread);
        {
            let mut st = lock(&self.shared.state);
            if st.closing {
                return fail(CS_DEVICE_NOT_AVAILABLE, "the device is being closed");
            }
            st.jobs.push_back(job);
        }
        if thread.is_none() {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("csx-capi-worker".into())
                .spawn(move || serve(&shared));
            match spawned {
                Ok(h) => {
                    let id = h.thread().id();
                    *thread = Some((h, id));
                }
                Err(e) => {
                    lock(&self.shared.state).jobs.pop_back();
                    return fail(
                        CS_OUT_OF_RESOURCES,
                        format!("cannot start the worker thread: {e}"),
                    );
                }
            }
        }
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Aborts every queued request and the running one, lets the worker deliver their
    /// completions, and waits for it to end (unless called on the worker, from a
    /// callback: it then ends after that callback returns).
    pub fn shutdown(&self) {
        let current = {
            let mut st = lock(&self.shared.state);
            st.closing = true;
            for job in &st.jobs {
                job.req.set_aborted();
            }
            st.current.clone()
        };
        self.shared.ready.notify_all();
        if let Some(req) = current {
            req.set_aborted();
            let exec = match &*lock(&req.phase) {
                Phase::Running {
                    exec: Some((dev, id)),
                } => Some((Arc::clone(dev), *id)),
                _ => None,
            };
            if let Some((dev, id)) = exec {
                let _ = dev.device.abort(id);
            }
        }
        let handle = lock(&self.thread).take();
        if let Some((h, id)) = handle {
            if std::thread::current().id() != id {
                let _ = h.join();
            }
        }
    }
}

/// The worker's loop: one job at a time until closing and empty.
fn serve(shared: &Shared) {
    loop {
        let job = {
            let mut st = lock(&shared.state);
            loop {
                if let Some(job) = st.jobs.pop_front() {
                    st.current = Some(Arc::clone(&job.req));
                    break job;
                }
                if st.closing {
                    return;
                }
                st = shared.ready.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        run(job);
        lock(&shared.state).current = None;
    }
}

fn run(job: Job) {
    let Job {
        name,
        req,
        work,
        done,
    } = job;
    let result = catch_unwind(AssertUnwindSafe(|| perform(&work, &req))).unwrap_or_else(|_| {
        fail(
            CS_FATAL_ERROR,
            "the library panicked while running the request (a bug)",
        )
    });
    // An aborted batch whose last entry completed still reports the abort it accepted.
    let result = match result {
        Ok(_) if req.kind == Kind::Batch && req.aborted() => Err(req.aborted_error()),
        other => other,
    };
    registry::with(|r| r.requests.remove(&req.key));
    // The request's device references go before the callback, which may close it.
    drop(work);
    // SAFETY: the caller's contract for the completion's pointers (CompValue valid until
    // the request completes).
    unsafe { done.deliver(name, result) };
}
