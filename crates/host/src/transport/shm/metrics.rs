//! Counters of one shm queue pair, kept by whichever side owns them.
//!
//! They show whether the adaptive polling works: doorbells and interrupts should be
//! rare under load (the peer was polling) and one per command when idle.

use std::sync::atomic::{AtomicU64, Ordering};

/// Events of one side of a queue pair.
#[derive(Debug, Default)]
pub struct ShmMetrics {
    /// Commands submitted (host) or taken from the ring (device).
    pub commands: AtomicU64,
    /// Completions consumed (host) or posted (device).
    pub completions: AtomicU64,
    /// Times this side woke the peer through its eventfd.
    pub notifies: AtomicU64,
    /// Times this side slept on its own eventfd after polling in vain.
    pub sleeps: AtomicU64,
    /// Bytes copied into host memory buffers (host) or moved by the device's copies.
    pub data_bytes: AtomicU64,
}

impl ShmMetrics {
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A copy of the counters now.
    pub fn snapshot(&self) -> ShmMetricsSnapshot {
        ShmMetricsSnapshot {
            commands: self.commands.load(Ordering::Relaxed),
            completions: self.completions.load(Ordering::Relaxed),
            notifies: self.notifies.load(Ordering::Relaxed),
            sleeps: self.sleeps.load(Ordering::Relaxed),
            data_bytes: self.data_bytes.load(Ordering::Relaxed),
        }
    }
}

/// See [`ShmMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmMetricsSnapshot {
    pub commands: u64,
    pub completions: u64,
    pub notifies: u64,
    pub sleeps: u64,
    pub data_bytes: u64,
}
