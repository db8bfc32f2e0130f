//! Counters of one TCP connection, kept by whichever side owns it.
//!
//! Relaxed atomics: they are statistics, read for status lines and benchmarks, and
//! order nothing.

use std::sync::atomic::{AtomicU64, Ordering};

/// PDUs and bytes one connection moved.
#[derive(Debug, Default)]
pub struct TcpMetrics {
    /// Command capsules sent (host) or received (server).
    pub commands: AtomicU64,
    /// Response capsules received (host) or sent (server).
    pub completions: AtomicU64,
    /// Data PDUs either way.
    pub data_pdus: AtomicU64,
    /// Bulk bytes in data PDUs, host to controller.
    pub h2c_bytes: AtomicU64,
    /// Bulk bytes in data PDUs, controller to host.
    pub c2h_bytes: AtomicU64,
}

impl TcpMetrics {
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A copy of the counters now.
    pub fn snapshot(&self) -> TcpMetricsSnapshot {
        TcpMetricsSnapshot {
            commands: self.commands.load(Ordering::Relaxed),
            completions: self.completions.load(Ordering::Relaxed),
            data_pdus: self.data_pdus.load(Ordering::Relaxed),
            h2c_bytes: self.h2c_bytes.load(Ordering::Relaxed),
            c2h_bytes: self.c2h_bytes.load(Ordering::Relaxed),
        }
    }
}

/// See [`TcpMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpMetricsSnapshot {
    pub commands: u64,
    pub completions: u64,
    pub data_pdus: u64,
    pub h2c_bytes: u64,
    pub c2h_bytes: u64,
}
