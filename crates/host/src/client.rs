//! The asynchronous core: submit many commands, collect their completions in any order.
//!
//! A [`Client`] owns one queue pair (a [`Transport`]) and may be shared by any number of
//! threads. Every thread may submit; completions are matched to their commands by
//! [`CommandId`] (as NVMe and io_uring match theirs), so each thread waits for exactly
//! its own, whichever thread happened to take it off the queue pair.
//!
//! # Reaping
//!
//! One thread at a time reaps from the transport (the *reaper*); a thread that waits and
//! finds no reaper becomes one, the others sleep. The reaper hands every completion that
//! is not its own to the table, where its owner finds it, and wakes the sleepers. This is
//! the leader/follower pattern: no extra thread, and a single-threaded caller never
//! sleeps on the table at all (it is always the reaper).
//!
//! # Bounds
//!
//! A command is *outstanding* from its submission until a caller receives its
//! completion. At most `queue_depth` are outstanding, which bounds both the transport's
//! in-flight commands and the table of completions reaped but not yet received.
//!
//! Invariants: every outstanding command's completion is received exactly once; a
//! completion whose id is not outstanding (a device bug) is counted in
//! [`Client::stray_completions`] and dropped, never delivered.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_proto::{Command, CommandId, Completion, Op};

use crate::error::{CallError, TransportError};
use crate::transport::Transport;

/// The outstanding commands and the completions reaped for them.
#[derive(Debug, Default)]
struct Table {
    /// Submitted, completion not yet received by a caller.
    outstanding: HashSet<CommandId>,
    /// Reaped from the transport, waiting for their caller.
    ready: HashMap<CommandId, Completion>,
    /// Ids whose completions only [`Client::wait`] receives: submitted with
    /// [`Client::submit_private`], or waited for by id now. [`Client::reap`] leaves
    /// them alone.
    awaited: HashSet<CommandId>,
    /// Whether a thread is reaping from the transport now.
    reaping: bool,
    /// Threads sleeping on `changed`.
    sleepers: u32,
}

/// One queue pair to a device, shared by threads (see the module doc).
#[derive(Debug)]
pub struct Client {
    transport: Option<Box<dyn Transport>>,
    depth: u32,
    next_id: AtomicU64,
    table: Mutex<Table>,
    changed: Condvar,
    stray: AtomicU64,
}

/// What a waiting thread is after.
#[derive(Clone, Copy)]
enum Want {
    /// This command's completion.
    One(CommandId),
    /// Any completion no other thread waits for by id.
    Any,
}

impl Client {
    /// A client over `transport`.
    pub fn new(transport: Box<dyn Transport>) -> Client {
        let depth = transport.queue_depth();
        assert!(depth > 0, "a transport holds at least one command");
        Client {
            transport: Some(transport),
            depth,
            next_id: AtomicU64::new(1),
            table: Mutex::new(Table::default()),
            changed: Condvar::new(),
            stray: AtomicU64::new(0),
        }
    }

    fn transport(&self) -> &dyn Transport {
        self.transport
            .as_deref()
            .expect("the transport is only taken by close")
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table's invariants hold between statements; a panicking thread cannot
        // leave it half-updated in a way the others would misread.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self, t: &Table) {
        if t.sleepers > 0 {
            self.changed.notify_all();
        }
    }

    /// A memory file holding the device-memory allocation `handle` of this client, to map
    /// shared (see [`Transport::share_mem`]).
    pub fn share_mem(
        &self,
        handle: csx_proto::MemHandle,
    ) -> Result<std::os::fd::OwnedFd, crate::error::TransportError> {
        self.transport().share_mem(handle)
    }

    /// The transport's name (`inproc`, `shm`, `tcp`).
    pub fn transport_name(&self) -> &'static str {
        self.transport().name()
    }

    /// The most commands outstanding at once.
    pub fn queue_depth(&self) -> u32 {
        self.depth
    }

    /// Commands submitted whose completion no caller has received yet.
    pub fn outstanding(&self) -> usize {
        self.lock().outstanding.len()
    }

    /// Completions the device sent for no outstanding command (always 0 on a correct
    /// device; the tests check it).
    pub fn stray_completions(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    /// Submits `op` without waiting for it to run. Checks it against the protocol's
    /// limits first. Fails with [`TransportError::QueueFull`] when `queue_depth`
    /// commands are outstanding. Its completion goes to [`Client::wait`] with the id, or
    /// to [`Client::reap`].
    pub fn submit(&self, op: Op) -> Result<CommandId, CallError> {
        self.submit_inner(op, false, false)
    }

    /// As [`Client::submit`], but waits for an outstanding command's completion to be
    /// received (by another thread) when the queue pair is full.
    pub fn submit_wait(&self, op: Op) -> Result<CommandId, CallError> {
        self.submit_inner(op, true, false)
    }

    /// As [`Client::submit_wait`], but the completion is kept for [`Client::wait`] with
    /// the id: [`Client::reap`] never takes it. The blocking calls use this, so a thread
    /// reaping "any" completion never steals theirs.
    pub fn submit_private(&self, op: Op) -> Result<CommandId, CallError> {
        self.submit_inner(op, true, true)
    }

    fn submit_inner(&self, op: Op, block: bool, private: bool) -> Result<CommandId, CallError> {
        op.validate().map_err(|source| CallError::Invalid {
            op: op.name(),
            source,
        })?;
        let id = CommandId(self.next_id.fetch_add(1, Ordering::Relaxed));
        {
            let mut t = self.lock();
            while t.outstanding.len() >= self.depth as usize {
                if !block {
                    return Err(TransportError::QueueFull { depth: self.depth }.into());
                }
                t.sleepers += 1;
                t = self.changed.wait(t).unwrap_or_else(|p| p.into_inner());
                t.sleepers -= 1;
            }
            let fresh = t.outstanding.insert(id);
            assert!(fresh, "command ids are never reused");
            if private {
                t.awaited.insert(id);
            }
        }
        if let Err(e) = self.transport().submit(Command::new(id, op)) {
            let mut t = self.lock();
            t.outstanding.remove(&id);
            t.awaited.remove(&id);
            self.wake(&t);
            return Err(e.into());
        }
        Ok(id)
    }

    /// Waits for the completion of `id`, up to `timeout` (`None`: as long as it takes).
    /// `Ok(None)` on timeout; the command stays outstanding and may be waited for again.
    pub fn wait(
        &self,
        id: CommandId,
        timeout: Option<Duration>,
    ) -> Result<Option<Completion>, CallError> {
        let mut t = self.lock();
        if !t.outstanding.contains(&id) {
            return Err(CallError::UnknownCommand { id });
        }
        let claimed_here = t.awaited.insert(id);
        let r = self.collect(t, Want::One(id), timeout);
        if claimed_here && !matches!(r, Ok(Some(_))) {
            self.lock().awaited.remove(&id);
        }
        r
    }

    /// The next completion that no thread waits for by id (see [`Client::wait`]), up to
    /// `timeout`. `Ok(None)` on timeout, or at once when no such command is outstanding.
    pub fn reap(&self, timeout: Option<Duration>) -> Result<Option<Completion>, CallError> {
        let t = self.lock();
        self.collect(t, Want::Any, timeout)
    }

    /// Submits `op` and waits for its completion (whatever its status).
    pub fn call(&self, op: Op) -> Result<Completion, CallError> {
        let id = self.submit_private(op)?;
        Ok(self
            .wait(id, None)?
            .expect("a wait without a timeout returns a completion"))
    }

    /// Submits `op`, waits, and turns a failed status into the typed [`CallError`].
    pub fn call_ok(&self, op: Op) -> Result<Completion, CallError> {
        let name = op.name();
        let c = self.call(op)?;
        if c.status.is_success() {
            Ok(c)
        } else {
            Err(CallError::from_completion(name, c))
        }
    }

    /// Asks the device to stop the execution `id` submitted on this client (NVMe's
    /// Abort): queued, it completes without running; running, it stops at its next
    /// back-edge or call. Its completion, received as usual, then has status Aborted.
    /// Returns whether the device had an execution `id` in flight (`false`: it had
    /// already completed, or `id` is not an execution). Needs a free place in the
    /// queue pair, as every command does.
    pub fn abort(&self, id: CommandId) -> Result<bool, CallError> {
        let c = self.call_ok(Op::Abort { target: id })?;
        Ok(c.value > 0)
    }

    /// Takes a completion `want` may receive from the ready table.
    fn take_ready(t: &mut Table, want: Want) -> Option<Completion> {
        let id = match want {
            Want::One(id) => id,
            Want::Any => *t.ready.keys().find(|id| !t.awaited.contains(id))?,
        };
        let c = t.ready.remove(&id)?;
        t.outstanding.remove(&id);
        t.awaited.remove(&id);
        Some(c)
    }

    /// Whether `c`, just reaped, is what `want` waits for.
    fn wanted(t: &Table, want: Want, c: &Completion) -> bool {
        match want {
            Want::One(id) => c.id == id,
            Want::Any => !t.awaited.contains(&c.id),
        }
    }

    /// Waits (as a sleeper) until the table changes or `remaining` passes.
    fn sleep<'a>(
        &'a self,
        mut t: MutexGuard<'a, Table>,
        remaining: Option<Duration>,
    ) -> MutexGuard<'a, Table> {
        t.sleepers += 1;
        t = match remaining {
            None => self.changed.wait(t).unwrap_or_else(|p| p.into_inner()),
            Some(r) => {
                self.changed
                    .wait_timeout(t, r)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        t.sleepers -= 1;
        t
    }

    /// Files a completion the reaper received: returned when it is what the reaper
    /// wants, else kept ready for its waiter; one for no outstanding command is counted
    /// stray and dropped.
    fn file(&self, t: &mut Table, want: Want, c: Completion) -> Option<Completion> {
        if !t.outstanding.contains(&c.id) || t.ready.contains_key(&c.id) {
            self.stray.fetch_add(1, Ordering::Relaxed);
            debug_assert!(false, "completion for {} which is not outstanding", c.id);
            None
        } else if Self::wanted(t, want, &c) {
            t.outstanding.remove(&c.id);
            t.awaited.remove(&c.id);
            Some(c)
        } else {
            t.ready.insert(c.id, c);
            None
        }
    }

    /// The loop every waiting thread runs (see "Reaping" in the module doc).
    fn collect<'a>(
        &'a self,
        mut t: MutexGuard<'a, Table>,
        want: Want,
        timeout: Option<Duration>,
    ) -> Result<Option<Completion>, CallError> {
        let deadline = timeout.map(|d| Instant::now() + d);
        loop {
            if let Some(c) = Self::take_ready(&mut t, want) {
                self.wake(&t);
                return Ok(Some(c));
            }
            if let Want::One(id) = want {
                // Another thread waiting for the same id received it.
                if !t.outstanding.contains(&id) {
                    return Err(CallError::UnknownCommand { id });
                }
            }
            if matches!(want, Want::Any) && t.outstanding.iter().all(|id| t.awaited.contains(id)) {
                return Ok(None);
            }
            let now = Instant::now();
            let expired = deadline.is_some_and(|d| now >= d);
            let remaining = deadline.map(|d| d.saturating_duration_since(now));
            if t.reaping {
                if expired {
                    return Ok(None);
                }
                t = self.sleep(t, remaining);
                continue;
            }
            // Become the reaper. Past the deadline, only take what is there already.
            t.reaping = true;
            drop(t);
            let reaped = if expired {
                self.transport().try_reap()
            } else {
                self.transport().reap(remaining)
            };
            t = self.lock();
            t.reaping = false;
            match reaped {
                Ok(Some(c)) => {
                    let mine = self.file(&mut t, want, c);
                    self.wake(&t);
                    if mine.is_some() {
                        return Ok(mine);
                    }
                }
                Ok(None) => {
                    self.wake(&t);
                    if expired {
                        return Ok(None);
                    }
                    // Nothing in flight yet: the command is between its id and its
                    // submission on another thread. Let that thread run.
                    drop(t);
                    std::thread::yield_now();
                    t = self.lock();
                }
                Err(e) => {
                    self.wake(&t);
                    return Err(e.into());
                }
            }
        }
    }

    /// Ends the queue pair (see [`Transport::close`]). Outstanding commands are
    /// abandoned: the device finishes them, but nobody receives their completions.
    pub fn close(mut self) -> Result<(), TransportError> {
        match self.transport.take() {
            Some(t) => t.close(),
            None => Ok(()),
        }
    }
}
