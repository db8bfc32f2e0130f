//! Memory Copies from the media, run beside the transfer workers: up to
//! [`COPIES_IN_FLIGHT_MAX`] at once, each a queued read of its own, so that a staging of
//! many copies (a partition's columns, a dimension's) keeps the media busy across the
//! copies' ends instead of draining the read queue at each one.
//!
//! A transfer worker takes its queue in order, as before. A Memory Copy whose sources
//! all read the media (`File`, `ResidentFile`, `Nvm`) it hands to a copier thread and
//! goes on; anything else it runs itself, only once every copy handed out before it has
//! ended (it drains them), except a Memory Read, Write or Fill, which waits only for the
//! copies handed out before it into bytes it touches. Copies handed out after a command
//! began to wait (by another transfer worker) never hold it: a client that keeps
//! submitting copies cannot starve another's file commands. So, against every other
//! transfer command, copies keep the order of the queue: a file written and then copied,
//! a copy and then a read or write of its destination, see each other in that order, as
//! with one worker running everything; a read or write of other bytes (a staging's next
//! headers, a result read back) does not wait for copies it cannot see, nor they for it
//! (copies in flight read only the media, and the worker ends the read or write before it
//! takes the next command).
//! Two copies in flight together only read the media, and a copy waits for any copy in
//! flight into overlapping bytes of the same allocation, so the last one submitted
//! writes them last.
//!
//! Handing a copy out does not wait for a copier: up to [`COPIES_QUEUED_MAX`] wait in
//! the copiers' queue, so the transfer worker goes on to the commands behind a burst of
//! copies (a staging's expected headers, written while its copies and the next ones
//! are read) instead of holding them until all but the last few copies have started.
//! A copier takes the first queued copy that writes no bytes of a copy running or
//! queued before it.
//!
//! A throttled device (`PerfModel::throttle`) holds each command to its modelled time,
//! so there copies run on the transfer worker one at a time, as the model assumes.
//!
//! A copy handed out stays counted in the transfer pool's `running` until it ends, so a
//! short command run inline on a submitting thread (`Pool::claim_idle`) also waits its
//! turn, and shutdown waits for it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use csx_proto::{CopySource, MemHandle, Op};

use super::queue_pair::Job;
use super::Shared;

/// Memory Copies from the media in flight at once: with the media reader pool's
/// `DIRECT_QUEUE_DEPTH` reads, enough that one copy's last pieces overlap the next
/// copies' first.
pub(super) const COPIES_IN_FLIGHT_MAX: usize = 4;

/// Memory Copies handed out and not yet ended (queued for a copier or running): the
/// bound of the copiers' queue, past which a transfer worker waits to hand one out.
/// A staging's copies (a few rounds of a partition each) fit.
pub(super) const COPIES_QUEUED_MAX: usize = 64;

const _: () = assert!(COPIES_IN_FLIGHT_MAX <= COPIES_QUEUED_MAX);

/// Bytes a copy writes: its allocation and `[start, end)` in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Destination {
    handle: MemHandle,
    start: u64,
    end: u64,
}

impl Destination {
    fn overlaps(&self, other: &Destination) -> bool {
        self.handle == other.handle && self.start < other.end && other.start < self.end
    }
}

/// The destination of `job` when it is a copy that only reads the media (and so may run
/// beside other such copies); `None` for any other command.
pub(super) fn detachable(job: &Job) -> Option<Destination> {
    if job.dma.is_some() || job.stop.is_some() {
        return None;
    }
    let Op::MemCopy {
        dst,
        dst_offset,
        sources,
    } = &job.cmd.op
    else {
        return None;
    };
    let media = |s: &CopySource| {
        matches!(
            s,
            CopySource::File { .. } | CopySource::ResidentFile { .. } | CopySource::Nvm { .. }
        )
    };
    if sources.is_empty() || !sources.iter().all(media) {
        return None;
    }
    let len = sources.iter().fold(0u64, |n, s| n.saturating_add(s.len()));
    Some(Destination {
        handle: *dst,
        start: *dst_offset,
        end: dst_offset
            .saturating_add(len)
            .max(dst_offset.saturating_add(1)),
    })
}

/// The device memory `job` reads or writes when it is a Memory Read, Write or Fill
/// (which waits only for copies in flight into those bytes); `None` for any other
/// command.
pub(super) fn memory_access(job: &Job) -> Option<Destination> {
    if job.dma.is_some() || job.stop.is_some() {
        return None;
    }
    let (handle, start, len) = match &job.cmd.op {
        Op::MemRead {
            handle,
            offset,
            len,
        } => (*handle, *offset, *len),
        Op::MemWrite {
            handle,
            offset,
            data,
        } => (*handle, *offset, data.len() as u64),
        Op::MemFill {
            handle,
            offset,
            len,
            ..
        } => (*handle, *offset, *len),
        _ => return None,
    };
    Some(Destination {
        handle,
        start,
        end: start.saturating_add(len).max(start.saturating_add(1)),
    })
}

/// A copy's place in the order copies were handed out.
type Ticket = u64;

#[derive(Default)]
struct State {
    /// Copies handed out, not yet taken by a copier.
    queue: VecDeque<(Job, Destination, Ticket)>,
    /// The copies running on a copier.
    running: Vec<(Destination, Ticket)>,
    /// The ticket of the next copy handed out.
    next: Ticket,
    closed: bool,
    /// Tests only: the copiers take no copy of this ticket or later while set (those
    /// handed out stay in flight), so a test can order commands against a copy without
    /// racing it.
    #[cfg(test)]
    held_from: Option<Ticket>,
    /// Tests only: commands waiting for copies now.
    #[cfg(test)]
    waiting: usize,
}

impl State {
    /// The copies handed out and not yet ended (queued or running).
    fn in_flight(&self) -> impl Iterator<Item = (&Destination, Ticket)> {
        (self.queue.iter().map(|(_, d, t)| (d, *t)))
            .chain(self.running.iter().map(|(d, t)| (d, *t)))
    }

    /// Whether a copy handed out before `ticket` for which `holds` is true is in flight.
    fn holds_before(&self, ticket: Ticket, holds: impl Fn(&Destination) -> bool) -> bool {
        self.in_flight().any(|(d, t)| t < ticket && holds(d))
    }
}

/// The copies handed out by the transfer workers and the copiers' queue.
#[derive(Default)]
pub(super) struct Copies {
    state: Mutex<State>,
    changed: Condvar,
}

impl Copies {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(g).unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `job` (writing `dst`) to the copiers, once fewer than
    /// [`COPIES_QUEUED_MAX`] are in flight; it runs once no copy handed out before it
    /// writes bytes of `dst` ([`Copies::take`]).
    pub(super) fn hand_off(&self, job: Job, dst: Destination) {
        let mut g = self.lock();
        while g.queue.len() + g.running.len() >= COPIES_QUEUED_MAX {
            g = self.wait(g);
        }
        let ticket = g.next;
        g.next += 1;
        g.queue.push_back((job, dst, ticket));
        drop(g);
        self.changed.notify_all();
    }

    /// Waits until every copy handed out before now has ended.
    pub(super) fn drain(&self) {
        self.wait_for(|_| true);
    }

    /// Waits until no copy handed out before now for which `holds` is true is in
    /// flight.
    fn wait_for(&self, holds: impl Fn(&Destination) -> bool) {
        let mut g = self.lock();
        let now = g.next;
        #[cfg(test)]
        {
            g.waiting += 1;
            self.changed.notify_all();
        }
        while g.holds_before(now, &holds) {
            g = self.wait(g);
        }
        #[cfg(test)]
        {
            g.waiting -= 1;
        }
    }

    /// Waits until the copies `job` must follow have ended, of those handed out before
    /// now: for a Memory Read, Fill or Write ([`memory_access`]), those into bytes it
    /// touches; for anything else, every one.
    pub(super) fn wait_before(&self, job: &Job) {
        match memory_access(job) {
            Some(bytes) => self.wait_for(|d| d.overlaps(&bytes)),
            None => self.drain(),
        }
    }

    /// The next copy to run; `None` once closed and empty.
    fn take(&self) -> Option<(Job, Ticket)> {
        let mut g = self.lock();
        loop {
            #[cfg(test)]
            let held_from = g.held_from.unwrap_or(Ticket::MAX);
            #[cfg(not(test))]
            let held_from = Ticket::MAX;
            // The first queued copy whose bytes no copy before it (running, or queued
            // ahead of it) writes: overlapping copies run in queue order.
            let st = &mut *g;
            let ready = (0..st.queue.len()).find(|&i| {
                let (_, dst, ticket) = &st.queue[i];
                *ticket < held_from
                    && !st.running.iter().any(|(d, _)| d.overlaps(dst))
                    && !st.queue.iter().take(i).any(|(_, d, _)| d.overlaps(dst))
            });
            if let Some((job, dst, ticket)) = ready.and_then(|i| st.queue.remove(i)) {
                st.running.push((dst, ticket));
                return Some((job, ticket));
            }
            if g.closed {
                return None;
            }
            g = self.wait(g);
        }
    }

    fn ended(&self, ticket: Ticket) {
        let mut g = self.lock();
        if let Some(i) = g.running.iter().position(|(_, t)| *t == ticket) {
            g.running.swap_remove(i);
        }
        drop(g);
        self.changed.notify_all();
    }

    /// Tests only: holds the copiers (`true`) or lets them go on (`false`).
    #[cfg(test)]
    pub(super) fn hold(&self, on: bool) {
        self.hold_from(on.then_some(0));
    }

    /// Tests only: the copiers take no copy handed out as the `n`th (from 0) or later
    /// (`Some(n)`), or take every copy (`None`).
    #[cfg(test)]
    pub(super) fn hold_from(&self, n: Option<Ticket>) {
        self.lock().held_from = n;
        self.changed.notify_all();
    }

    /// Tests only: waits until `waiting` commands wait for copies and `queued` copies
    /// wait for a copier.
    #[cfg(test)]
    pub(super) fn wait_until(&self, waiting: usize, queued: usize) {
        let mut g = self.lock();
        while g.waiting != waiting || g.queue.len() != queued {
            g = self.wait(g);
        }
    }

    /// No more copies come: the copiers end once the queue is empty. Called after the
    /// transfer workers have ended.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

/// A copier thread: runs the copies handed out until closed.
pub(super) fn copier(shared: &Shared) {
    while let Some((job, ticket)) = shared.copies.take() {
        shared.run(job);
        // Ended before it stops counting as running: whoever sees the pool idle sees no
        // copy in flight either.
        shared.copies.ended(ticket);
        shared.transfer.running.fetch_sub(1, Ordering::AcqRel);
    }
}
