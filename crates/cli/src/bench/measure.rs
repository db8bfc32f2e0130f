//! Timing a piece of work: warm up, size batches, take the median.
//!
//! One call to the work is timed first (the warm-up, which also faults in memory and
//! fills caches). The batch size is then chosen so that one batch lasts about a
//! twentieth of the time budget, which keeps clock overhead negligible even for
//! sub-microsecond work; batches run until the budget is spent (and at least
//! [`BATCHES_MIN`] ran). The result is the median batch's time per call, which shrugs
//! off the odd preempted batch on a shared machine.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Batches measured at least, however long each one takes.
pub const BATCHES_MIN: usize = 5;

/// Batches a budget is split into, roughly.
const BATCHES_PER_BUDGET: u32 = 20;

/// The timing of one piece of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Median nanoseconds per call.
    pub median_ns: f64,
    /// Fastest batch's nanoseconds per call.
    pub min_ns: f64,
    /// Slowest batch's nanoseconds per call.
    pub max_ns: f64,
    /// Calls timed (the warm-up excluded).
    pub calls: u64,
}

/// Times `work` for about `budget` (see the module doc).
pub fn measure<T>(budget: Duration, mut work: impl FnMut() -> T) -> Measurement {
    let started = Instant::now();
    black_box(work());
    let once = started.elapsed().max(Duration::from_nanos(1));
    let batch_target = budget / BATCHES_PER_BUDGET;
    let batch_calls = (batch_target.as_nanos() / once.as_nanos()).clamp(1, 1 << 30) as u64;

    let mut per_call: Vec<f64> = Vec::with_capacity(BATCHES_PER_BUDGET as usize * 2);
    let started = Instant::now();
    while per_call.len() < BATCHES_MIN || started.elapsed() < budget {
        let batch_started = Instant::now();
        for _ in 0..batch_calls {
            black_box(work());
        }
        per_call.push(batch_started.elapsed().as_nanos() as f64 / batch_calls as f64);
    }
    per_call.sort_by(f64::total_cmp);
    Measurement {
        median_ns: per_call[per_call.len() / 2],
        min_ns: per_call[0],
        max_ns: per_call[per_call.len() - 1],
        calls: batch_calls * per_call.len() as u64,
    }
}

/// Geometric mean of `values` (all positive), or `None` if there are none.
pub fn geomean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    debug_assert!(values.iter().all(|v| *v > 0.0));
    let log_sum: f64 = values.iter().map(|v| v.ln()).sum();
    Some((log_sum / values.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_something() {
        let mut n = 0u64;
        let m = measure(Duration::from_millis(5), || {
            n = n.wrapping_add(1);
            n
        });
        assert!(m.calls >= BATCHES_MIN as u64);
        assert!(m.min_ns <= m.median_ns);
        assert!(m.median_ns <= m.max_ns);
    }

    #[test]
    fn geomean_of_ratios() {
        assert_eq!(geomean(&[]), None);
        let g = geomean(&[2.0, 8.0]).expect("two values");
        assert!((g - 4.0).abs() < 1e-12);
    }
}
