//! Timing pieces of work: warm up, size batches, interleave, take the median.
//!
//! A [`Sampler`] times one call to its work first (the warm-up, which also faults in
//! memory and fills caches) and sizes batches from it, so that clock overhead is
//! negligible even for sub-microsecond work. The caller then gives it stretches of
//! time; to compare several pieces of work on a machine whose load changes, it
//! interleaves them (a stretch of each in turn, several rounds), so every piece sees
//! the same mix of quiet and busy moments. The result is the median batch's time per
//! call, which shrugs off the odd preempted batch.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// A clock that times batches, in nanoseconds from any fixed start: wall time
/// ([`wall_clock`]) or, say, the running thread's CPU time.
pub type Clock = fn() -> u64;

/// Nanoseconds of wall time since the first call.
pub fn wall_clock() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Batches a budget is split into, roughly.
pub const BATCHES_PER_BUDGET: u32 = 20;

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

/// Batches of one piece of work, gathered over one or more stretches of time.
#[derive(Debug, Clone)]
pub struct Sampler {
    batch_calls: u64,
    per_call_ns: Vec<f64>,
    clock: Clock,
}

impl Sampler {
    /// Runs `work` once (the warm-up) and sizes batches to last about `batch_target`.
    pub fn new<T>(batch_target: Duration, mut work: impl FnMut() -> T) -> Sampler {
        let started = Instant::now();
        black_box(work());
        let once = started.elapsed().max(Duration::from_nanos(1));
        let batch_calls = (batch_target.as_nanos() / once.as_nanos()).clamp(1, 1 << 30) as u64;
        Sampler {
            batch_calls,
            per_call_ns: Vec::new(),
            clock: wall_clock,
        }
    }

    /// Times later batches with `clock` instead of wall time.
    pub fn with_clock(self, clock: Clock) -> Sampler {
        Sampler { clock, ..self }
    }

    /// A sampler for work timed elsewhere (another process), in batches of
    /// `batch_calls` calls; [`Sampler::record`] takes its batches.
    pub fn external(batch_calls: u64) -> Sampler {
        Sampler {
            batch_calls: batch_calls.max(1),
            per_call_ns: Vec::new(),
            clock: wall_clock,
        }
    }

    /// Adds batches timed elsewhere, as nanoseconds per call.
    pub fn record(&mut self, per_call_ns: &[f64]) {
        self.per_call_ns.extend_from_slice(per_call_ns);
    }

    /// Runs batches of `work` for about `duration`, at least one.
    pub fn run_for<T>(&mut self, duration: Duration, mut work: impl FnMut() -> T) {
        let started = Instant::now();
        loop {
            let batch_started = (self.clock)();
            for _ in 0..self.batch_calls {
                black_box(work());
            }
            let batch_ns = (self.clock)().saturating_sub(batch_started) as f64;
            self.per_call_ns.push(batch_ns / self.batch_calls as f64);
            if started.elapsed() >= duration {
                break;
            }
        }
    }

    /// The median, fastest and slowest batch. Needs at least one batch.
    pub fn finish(mut self) -> Measurement {
        assert!(
            !self.per_call_ns.is_empty(),
            "finish() before any batch ran"
        );
        self.per_call_ns.sort_by(f64::total_cmp);
        let n = self.per_call_ns.len();
        Measurement {
            median_ns: self.per_call_ns[n / 2],
            min_ns: self.per_call_ns[0],
            max_ns: self.per_call_ns[n - 1],
            calls: self.batch_calls * n as u64,
        }
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
        let mut work = || {
            n = n.wrapping_add(1);
            n
        };
        let mut sampler = Sampler::new(Duration::from_micros(100), &mut work);
        for _ in 0..3 {
            sampler.run_for(Duration::from_millis(1), &mut work);
        }
        let m = sampler.finish();
        assert!(m.calls >= 3);
        assert!(m.min_ns <= m.median_ns);
        assert!(m.median_ns <= m.max_ns);
    }

    /// Batches timed elsewhere give the same statistics as batches timed here.
    #[test]
    fn external_batches() {
        let mut sampler = Sampler::external(4);
        sampler.record(&[30.0, 10.0]);
        sampler.record(&[20.0]);
        let m = sampler.finish();
        assert_eq!(m.median_ns, 20.0);
        assert_eq!((m.min_ns, m.max_ns), (10.0, 30.0));
        assert_eq!(m.calls, 12);
    }

    #[test]
    fn geomean_of_ratios() {
        assert_eq!(geomean(&[]), None);
        let g = geomean(&[2.0, 8.0]).expect("two values");
        assert!((g - 4.0).abs() < 1e-12);
    }
}
