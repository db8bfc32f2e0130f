//! Bounded queues between submitters, workers and reapers.
//!
//! A [`WorkQueue`] is a FIFO with a fixed capacity. Consumers poll it for a short spin
//! before sleeping on a condition variable, so a command that arrives while its worker
//! is still spinning is picked up in well under a microsecond, and an idle worker costs
//! nothing. Producers wake a consumer only when one sleeps.
//!
//! Invariants: the queue never holds more than its capacity; a push that would exceed
//! it, or a push after [`WorkQueue::close`], hands the item back; once closed and
//! drained, every pop returns `None`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A bounded multi-producer multi-consumer FIFO.
#[derive(Debug)]
pub struct WorkQueue<T> {
    items: Mutex<VecDeque<T>>,
    ready: Condvar,
    /// Items queued, readable without the lock (for spinning).
    len: AtomicUsize,
    /// Consumers waiting on `ready`; read and written under the lock.
    sleepers: AtomicUsize,
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
        let wake = self.sleepers.load(Ordering::Relaxed) > 0;
        drop(items);
        if wake {
            self.ready.notify_one();
        }
        Ok(())
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

    /// Takes the oldest item: spins for up to `spin`, then sleeps until one arrives, the
    /// queue is closed and empty (`None`), or `timeout` passes (`None`).
    pub fn pop(&self, spin: Duration, timeout: Option<Duration>) -> Option<T> {
        let start = Instant::now();
        loop {
            if let Some(item) = self.try_pop() {
                return Some(item);
            }
            if self.closed.load(Ordering::Acquire) || start.elapsed() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
        let deadline = timeout.map(|t| start + t);
        let mut items = self.lock();
        loop {
            if let Some(item) = items.pop_front() {
                self.len.store(items.len(), Ordering::Release);
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
