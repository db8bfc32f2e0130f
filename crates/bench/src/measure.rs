//! Timing pieces of work: warm up, size batches, interleave, take the median.
//!
//! A [`Sampler`] times one call to its work first (the warm-up, which also faults in
//! memory and fills caches) and sizes batches from it, so that clock overhead is
//! negligible even for sub-microsecond work. The caller then gives it stretches of
//! time; to compare several pieces of work on a machine whose load changes, it
//! interleaves them (a stretch of each in turn, several rounds), so every piece sees
//! the same mix of quiet and busy moments. Each stretch is a round; the result is the
//! median over rounds of each round's fastest batch ([`Measurement::steady_ns`]), with
//! the median batch kept beside it.
//!
//! Why not the median batch: a batch is slowed by whatever else shares the core while it
//! runs (another process's time slice, a sibling hardware thread of the host, caches and
//! branch predictors refilled after another column), never sped up beyond what the work
//! costs, and those slowdowns come in bursts that can cover half a cell's batches. On
//! the shared 2-vCPU machine the median of native `csv` moved 42.8-81.2 µs and `isort`
//! 185-300 µs across nine processes of one binary, while the fastest batch moved
//! 42.3-73.8 and 182.6-184.7 (`docs/benchmarks-history.md`, "the native column"). A
//! round's fastest batch leaves out what slowed the round's other batches; the median
//! over rounds then leaves out a round that was slow throughout (a burst longer than a
//! round), or one lucky batch.

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
    /// The median over rounds (stretches given to [`Sampler::run_for`] or
    /// [`Sampler::record`]) of each round's fastest batch, nanoseconds per call: the
    /// figure least moved by other work on the machine (see the module's note).
    pub steady_ns: f64,
}

/// Batches of one piece of work, gathered over one or more stretches of time.
#[derive(Debug, Clone)]
pub struct Sampler {
    batch_calls: u64,
    per_call_ns: Vec<f64>,
    /// Each round's fastest batch, nanoseconds per call.
    round_best_ns: Vec<f64>,
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
            round_best_ns: Vec::new(),
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
            round_best_ns: Vec::new(),
            clock: wall_clock,
        }
    }

    /// Adds one round of batches timed elsewhere, as nanoseconds per call.
    pub fn record(&mut self, per_call_ns: &[f64]) {
        self.per_call_ns.extend_from_slice(per_call_ns);
        if let Some(best) = per_call_ns.iter().copied().min_by(f64::total_cmp) {
            self.round_best_ns.push(best);
        }
    }

    /// Runs one round: batches of `work` for about `duration`, at least one.
    pub fn run_for<T>(&mut self, duration: Duration, mut work: impl FnMut() -> T) {
        let started = Instant::now();
        let first = self.per_call_ns.len();
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
        let best = self.per_call_ns[first..]
            .iter()
            .copied()
            .min_by(f64::total_cmp)
            .expect("a round runs at least one batch");
        self.round_best_ns.push(best);
    }

    /// The median, fastest and slowest batch. Needs at least one batch.
    pub fn finish(mut self) -> Measurement {
        assert!(
            !self.per_call_ns.is_empty(),
            "finish() before any batch ran"
        );
        self.per_call_ns.sort_by(f64::total_cmp);
        self.round_best_ns.sort_by(f64::total_cmp);
        let n = self.per_call_ns.len();
        Measurement {
            median_ns: self.per_call_ns[n / 2],
            min_ns: self.per_call_ns[0],
            max_ns: self.per_call_ns[n - 1],
            calls: self.batch_calls * n as u64,
            steady_ns: self.round_best_ns[self.round_best_ns.len() / 2],
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
        assert!(m.min_ns <= m.steady_ns && m.steady_ns <= m.max_ns);
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
        // Rounds [30, 10] and [20]: their best 10 and 20, the upper median 20.
        assert_eq!(m.steady_ns, 20.0);
    }

    /// A round slowed throughout and a lucky batch both stay out of the steady figure.
    #[test]
    fn steady_leaves_out_slow_rounds_and_lucky_batches() {
        let mut sampler = Sampler::external(1);
        for round in [
            &[12.0, 10.0, 11.0][..],
            &[30.0, 31.0, 29.0],
            &[10.5, 15.0],
            &[2.0, 10.2],
            &[10.1, 40.0, 40.0, 40.0],
        ] {
            sampler.record(round);
        }
        let m = sampler.finish();
        // Round bests 10, 29, 10.5, 2, 10.1: the median 10.1 (the median batch is 15).
        assert_eq!(m.steady_ns, 10.1);
        assert_eq!(m.median_ns, 15.0);
        assert_eq!(m.min_ns, 2.0);
    }

    #[test]
    fn geomean_of_ratios() {
        assert_eq!(geomean(&[]), None);
        let g = geomean(&[2.0, 8.0]).expect("two values");
        assert!((g - 4.0).abs() < 1e-12);
    }
}
