//! Bounded queues between submitters, workers and reapers.
//!
//! A [`WorkQueue`] is a FIFO with a fixed capacity. A consumer that finds it empty polls
//! it for a short spin before sleeping on a condition variable, so a command that
//! arrives while a worker still spins is picked up in about a microsecond, and an idle
//! worker costs nothing.
//!
//! At most one consumer spins at a time (the *spinner*); the others sleep at once. On a
//! machine with few cores, several threads spinning beside the submitter and the
//! transport's poller get some of them descheduled, and a descheduled thread costs a
//! wake-up of tens of µs on the critical path. A producer wakes a sleeper only when no
//! consumer spins; a spinner that takes an item gives up the role and, if items remain,
//! wakes a sleeper for them.
//!
//! Invariants: the queue never holds more than its capacity; a push that would exceed
//! it, or a push after [`WorkQueue::close`], hands the item back; once closed and
//! drained, every pop returns `None`; an item pushed while no consumer spins wakes a
//! sleeper (if there is one), and one pushed while a consumer spins is taken by it or
//! handed on by it, so no item waits for a consumer that sleeps.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a spinner polls without yielding the CPU before it yields between looks: a
/// yield is a system call (about a microsecond in a VM), longer than many commands.
pub const SPIN_BUSY: Duration = Duration::from_micros(5);

/// A bounded multi-producer multi-consumer FIFO.
#[derive(Debug)]
pub struct WorkQueue<T> {
    items: Mutex<VecDeque<T>>,
    ready: Condvar,
    /// Items queued, readable without the lock (for spinning).
    len: AtomicUsize,
    /// Consumers waiting on `ready`; read and written under the lock.
    sleepers: AtomicUsize,
    /// A consumer spins on `len`. Claimed without the lock; given up, and read by
    /// producers, only under it (so a producer that sees no spinner wakes a sleeper, and
    /// a spinner that gives up sees every item pushed while it held the role).
    spinning: AtomicBool,
    closed: AtomicBool,
    capacity: usize,
}

impl<T> WorkQueue<T> {
    /// An empty queue holding at most `capacity` items.
    pub fn new(capacity: usize) -> WorkQueue<T> {
        assert!(capacity > 0);
        WorkQueue {
            items: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            ready: Condvar::new(),
            len: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            spinning: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<T>> {
        // A deque of items has no invariant a panic could break.
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `item`, or hands it back if the queue is full or closed.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut items = self.lock();
        if self.closed.load(Ordering::Relaxed) || items.len() >= self.capacity {
            return Err(item);
        }
        items.push_back(item);
        self.len.store(items.len(), Ordering::Release);
        let wake =
            self.sleepers.load(Ordering::Relaxed) > 0 && !self.spinning.load(Ordering::Relaxed);
        drop(items);
        if wake {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Takes every item `pick` selects out of the queue, oldest first, wherever they
    /// wait (an Abort takes its queued executions out this way).
    pub fn take_where(&self, mut pick: impl FnMut(&T) -> bool) -> Vec<T> {
        if self.len.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut items = self.lock();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(items.len());
        for item in items.drain(..) {
            if pick(&item) {
                taken.push(item);
            } else {
                kept.push_back(item);
            }
        }
        *items = kept;
        self.len.store(items.len(), Ordering::Release);
        taken
    }

    /// Takes the oldest item without waiting.
    pub fn try_pop(&self) -> Option<T> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut items = self.lock();
        let item = items.pop_front();
        self.len.store(items.len(), Ordering::Release);
        item
    }

    /// Takes the oldest item: spins for up to `spin` (when no other consumer spins),
    /// then sleeps until one arrives, the queue is closed and empty (`None`), or
    /// `timeout` passes (`None`).
    pub fn pop(&self, spin: Duration, timeout: Option<Duration>) -> Option<T> {
        let start = Instant::now();
        if let Some(item) = self.try_pop() {
            return Some(item);
        }
        if !spin.is_zero() && self.claim_spinning() {
            if let Some(item) = self.spin(start, spin) {
                return Some(item);
            }
        }
        self.sleep(start, timeout)
    }

    fn claim_spinning(&self) -> bool {
        self.spinning
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The spinner's loop: polls until an item comes, `spin` passes since `start`, or
    /// the queue closes; gives up the role in every case.
    fn spin(&self, start: Instant, spin: Duration) -> Option<T> {
        loop {
            if self.len.load(Ordering::Acquire) > 0 {
                let mut items = self.lock();
                if let Some(item) = items.pop_front() {
                    self.len.store(items.len(), Ordering::Release);
                    self.spinning.store(false, Ordering::Relaxed);
                    // Producers did not wake anyone while this thread spun.
                    let wake = !items.is_empty() && self.sleepers.load(Ordering::Relaxed) > 0;
                    drop(items);
                    if wake {
                        self.ready.notify_one();
                    }
                    return Some(item);
                }
            }
            if self.closed.load(Ordering::Acquire) || start.elapsed() >= spin {
                break;
            }
            if start.elapsed() < SPIN_BUSY {
                std::hint::spin_loop();
            } else {
                // Yield rather than burn the core: on a machine with few cores the
                // thread that will push the next item may need it.
                std::thread::yield_now();
            }
        }
        let items = self.lock();
        self.spinning.store(false, Ordering::Relaxed);
        // The sleep that follows looks at the items under the lock again.
        drop(items);
        None
    }

    fn sleep(&self, start: Instant, timeout: Option<Duration>) -> Option<T> {
        let deadline = timeout.map(|t| start + t);
        let mut items = self.lock();
        loop {
            if let Some(item) = items.pop_front() {
                self.len.store(items.len(), Ordering::Release);
                // Items pushed while a consumer spun woke nobody: pass them on.
                let wake = !items.is_empty()
                    && self.sleepers.load(Ordering::Relaxed) > 0
                    && !self.spinning.load(Ordering::Relaxed);
                drop(items);
                if wake {
                    self.ready.notify_one();
                }
                return Some(item);
            }
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            let woken = match deadline {
                None => self.ready.wait(items).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        self.sleepers.fetch_sub(1, Ordering::Relaxed);
                        return None;
                    }
                    self.ready
                        .wait_timeout(items, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            items = woken;
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Refuses further pushes and wakes every sleeper; items already queued can still be
    /// popped.
    pub fn close(&self) {
        let items = self.lock();
        self.closed.store(true, Ordering::Release);
        drop(items);
        self.ready.notify_all();
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether nothing is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most items it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bounded_fifo() {
        let q = WorkQueue::new(2);
        q.push(1).unwrap();
        q.push(2).unwrap();
        assert_eq!(q.push(3), Err(3));
        assert_eq!(q.pop(Duration::ZERO, Some(Duration::ZERO)), Some(1));
        assert_eq!(q.try_pop(), Some(2));
        assert_eq!(q.pop(Duration::ZERO, Some(Duration::from_millis(1))), None);
        q.push(4).unwrap();
        q.close();
        assert_eq!(q.push(5), Err(5));
        assert_eq!(q.pop(Duration::ZERO, None), Some(4));
        assert_eq!(q.pop(Duration::ZERO, None), None);
    }

    #[test]
    fn take_where_keeps_the_order_of_the_rest() {
        let q = WorkQueue::new(8);
        for i in 0..6 {
            q.push(i).unwrap();
        }
        assert_eq!(q.take_where(|i| i % 2 == 1), vec![1, 3, 5]);
        assert_eq!(q.take_where(|_| false), Vec::<i32>::new());
        assert_eq!(q.try_pop(), Some(0));
        assert_eq!(q.try_pop(), Some(2));
        assert_eq!(q.try_pop(), Some(4));
        assert_eq!(q.try_pop(), None);
    }

    /// Items pushed while one consumer spins and the others sleep wake nobody at the
    /// push; the spinner and then each consumer it or another wakes hand the rest on,
    /// so every consumer gets one without another push.
    #[test]
    fn the_spinner_hands_items_on_to_sleepers() {
        let q = Arc::new(WorkQueue::new(16));
        let consumers: Vec<_> = (0..3)
            .map(|_| {
                let q = Arc::clone(&q);
                // A spin that never ends by itself: the spinner leaves only with an item.
                std::thread::spawn(move || q.pop(Duration::from_secs(3600), None))
            })
            .collect();
        loop {
            let sleeping = q.lock().is_empty() && q.sleepers.load(Ordering::Relaxed) == 2;
            if sleeping && q.spinning.load(Ordering::Relaxed) {
                break;
            }
            std::thread::yield_now();
        }
        for i in 0..3 {
            q.push(i).unwrap();
        }
        let mut got: Vec<u32> = consumers
            .into_iter()
            .map(|c| c.join().unwrap().expect("an item"))
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2]);
        assert!(!q.spinning.load(Ordering::Relaxed));
    }

    #[test]
    fn wakes_sleepers_across_threads() {
        let q = Arc::new(WorkQueue::new(1024));
        let consumers: Vec<_> = (0..3)
            .map(|_| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(v) = q.pop(Duration::from_micros(10), None) {
                        got.push(v);
                    }
                    got
                })
            })
            .collect();
        for i in 0..10_000u32 {
            while q.push(i).is_err() {
                std::thread::yield_now();
            }
        }
        q.close();
        let mut all: Vec<u32> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10_000).collect::<Vec<_>>());
    }
}
