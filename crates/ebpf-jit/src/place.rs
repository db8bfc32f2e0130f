//! Where a function's code starts within a 64-byte line, chosen by timing runs.
//!
//! Where a loop's code falls moves its time a great deal on the x86-64 hosts we
//! measure (AMD Zen 4). Over sixteen placements of otherwise identical code, each 4
//! bytes further past a line (`CSX_JIT_PLACE`, in-process CPU time, quiet machine):
//! hashjoin's JIT took 40.3-54.8 µs a run, grep's 65.6-85.8 µs (1.92-2.50x native);
//! matmul's stayed within 45.0-46.0 µs. Cranelift aligns functions but no block inside
//! them, so a change anywhere above a loop moves it, and its time with it: two builds
//! are compared over several placements, not at the one each happens to get
//! (`docs/benchmarks.md`).
//!
//! Choosing the placement at compile time was tried and not kept: the offset making
//! the function's loops (jumps back, from Cranelift's block layout) span the fewest
//! 64-byte lines in all picked 47.1 µs for hashjoin (best 40.3) and 84.1 µs for grep
//! (best 65.6). What counts is where the blocks a loop runs at each iteration fall,
//! which the layout alone does not tell (hashjoin's key loop skips its probe loop and
//! its miss path on most keys). See `docs/design/vm.md`.
//!
//! So the placement is measured: the entry function is placed [`LINE`] / [`STEP`]
//! times, each copy [`STEP`] bytes further into its line, and [`Placements`] times the
//! program's first runs on each copy in turns of [`TURN`] runs and keeps the one with
//! the least time per unit of fuel, if it beat the unpadded copy by more than
//! [`MARGIN`]. A program whose runs are too short to time (under [`MIN_FUEL`]) stays on
//! the unpadded copy, as does every function a local call reaches, the counting
//! variant, and a function over [`TRIAL_MAX_BYTES`]. `CSX_JIT_PLACE=N` places every
//! function `N` bytes in, and there is no trial; `CSX_JIT_PLACE_LOG` prints each
//! trial's choice and what it measured to stderr.
//!
//! [`padded`] puts the code `pad` bytes into a function aligned to a line, behind a
//! jump over the padding (run once a call). Relative jumps and references to the
//! function's constants move with the code; relocations are shifted by the caller.
//! The padding is a multiple of the buffer's own alignment, so every constant stays
//! as aligned as Cranelift placed it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The line a function's code is placed in, in bytes.
pub(crate) const LINE: u32 = 64;

/// The paddings to place a function's code at: `CSX_JIT_PLACE=N` alone (`N` modulo
/// [`LINE`], rounded down to a multiple of `align`, the code buffer's alignment); else
/// every [`STEP`] bytes of a line when `trial` (an entry function whose placement
/// [`Placements`] chooses by timing runs) and its code is at most [`TRIAL_MAX_BYTES`];
/// else none. Off x86-64, always none.
pub(crate) fn paddings(align: u32, trial: bool, bytes: usize) -> Vec<u32> {
    // The padding is x86-64 code (`padded`): elsewhere every function starts on its line.
    if !cfg!(target_arch = "x86_64") {
        return vec![0];
    }
    let forced = std::env::var("CSX_JIT_PLACE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    match forced {
        Some(n) => vec![padding(n, align)],
        None if trial && bytes <= TRIAL_MAX_BYTES => {
            let mut pads: Vec<u32> = (0..LINE).step_by(STEP).map(|n| padding(n, align)).collect();
            pads.dedup();
            pads
        }
        None => vec![0],
    }
}

/// `n` modulo [`LINE`], rounded down to a multiple of `align`.
fn padding(n: u32, align: u32) -> u32 {
    let align = align.clamp(1, LINE);
    (n % LINE) / align * align
}

/// `code` moved `pad` bytes on: a jump over the padding first (`jmp rel8`, or a `nop`
/// for one byte), the padding filled with `int3`, never run.
pub(crate) fn padded(code: &[u8], pad: u32) -> Vec<u8> {
    const NOP: u8 = 0x90;
    const JMP_REL8: u8 = 0xeb;
    const INT3: u8 = 0xcc;
    let pad = pad as usize;
    let mut out = Vec::with_capacity(pad + code.len());
    match pad {
        0 => {}
        1 => out.push(NOP),
        _ => {
            out.push(JMP_REL8);
            out.push((pad - 2) as u8);
            out.resize(pad, INT3);
        }
    }
    out.extend_from_slice(code);
    out
}

/// Candidate placements are this many bytes apart: eight to a line.
pub(crate) const STEP: usize = 8;

/// The largest function copied once per candidate for a trial (the copies stay mapped
/// as long as the program): 32 KiB, eight copies 256 KiB.
pub(crate) const TRIAL_MAX_BYTES: usize = 32 << 10;

/// Timed runs of each copy before the trial chooses.
const SAMPLES: u32 = 5;

/// Runs a copy makes in a row during the trial, the first untimed (see
/// [`Placements::pick`]). One run each in turn understated the differences: hashjoin's
/// copies measured within 4.4% of each other, and its pick then ran about 25% faster
/// than the unpadded copy.
const TURN: usize = 3;

/// A run charged less fuel than this is not timed: a few microseconds at most, where
/// the clock's own cost and a stray interrupt outweigh where the code lies.
const MIN_FUEL: u64 = 20_000;

/// A trial that has not timed every copy [`SAMPLES`] times after this many runs a copy
/// (the program's runs are too short) ends on the first copy, the unpadded one.
const PATIENCE: u32 = 4 * SAMPLES;

/// How much faster than the unpadded copy (a fraction of its time) another must have
/// run to be chosen: sboxmix's eight copies ran within 2.4% of each other, and its
/// choice among them ran 5% slower than the unpadded copy in later runs (median of
/// eight processes, noisy); grep's choice was 15% faster, hashjoin's 4.4%.
const MARGIN: f64 = 0.03;

/// [`Placements::chosen`] before the trial has chosen.
const UNDECIDED: usize = usize::MAX;

/// Copies of a program's entry function, each placed differently in its line, and the
/// choice among them: the copy whose runs took the least time per unit of fuel (per
/// eBPF instruction run, near enough) over its fastest of [`SAMPLES`] runs. Until then
/// runs take the copies in turns (`pick`) and report their time (`record`).
///
/// Measured rather than predicted because the layout alone does not tell which
/// placement is fast (see the module doc). Every copy is the same code, so which one
/// runs never changes a result, a trap or the fuel charged: only the time.
pub(crate) struct Placements<F> {
    /// Each copy's padding and entry point; the first is unpadded.
    entries: Vec<(u32, F)>,
    /// The index of the chosen copy, or [`UNDECIDED`].
    chosen: AtomicUsize,
    /// The next copy in turn during the trial.
    next: AtomicUsize,
    trial: Mutex<Trial>,
}

/// What a trial has seen so far.
struct Trial {
    /// Per copy: the least nanoseconds per unit of fuel of a timed run.
    fastest: Vec<f64>,
    /// Per copy: runs timed.
    timed: Vec<u32>,
    /// Runs recorded, timed or not.
    runs: u32,
}

impl<F: Copy> Placements<F> {
    /// The copies `entries` (padding, entry point), the unpadded one first; one copy is
    /// chosen at once.
    pub(crate) fn new(entries: Vec<(u32, F)>) -> Placements<F> {
        assert!(!entries.is_empty(), "a program has an entry function");
        let n = entries.len();
        Placements {
            chosen: AtomicUsize::new(if n == 1 { 0 } else { UNDECIDED }),
            next: AtomicUsize::new(0),
            trial: Mutex::new(Trial {
                fastest: vec![f64::INFINITY; n],
                timed: vec![0; n],
                runs: 0,
            }),
            entries,
        }
    }

    /// The copy a run is to call and, when the run is to be timed, its index for
    /// [`record`]. During the trial the copies take turns of [`TURN`] runs; a turn's
    /// first run is not timed (it warms the copy's code and branch predictions after
    /// the other copies).
    ///
    /// [`record`]: Placements::record
    pub(crate) fn pick(&self) -> (F, Option<usize>) {
        match self.chosen.load(Ordering::Acquire) {
            UNDECIDED => {
                let k = self.next.fetch_add(1, Ordering::Relaxed);
                let i = k / TURN % self.entries.len();
                (self.entries[i].1, (!k.is_multiple_of(TURN)).then_some(i))
            }
            c => (self.entries[c].1, None),
        }
    }

    /// Notes that a run of copy `i` took `elapsed` and was charged `fuel`; chooses once
    /// every copy has been timed enough, or the trial has gone on too long.
    pub(crate) fn record(&self, i: usize, elapsed: Duration, fuel: u64) {
        let mut t = self.trial.lock().unwrap_or_else(PoisonError::into_inner);
        if self.chosen.load(Ordering::Acquire) != UNDECIDED {
            return;
        }
        t.runs += 1;
        if fuel >= MIN_FUEL {
            let per_fuel = elapsed.as_nanos() as f64 / fuel as f64;
            t.fastest[i] = t.fastest[i].min(per_fuel);
            t.timed[i] += 1;
        }
        let choice = if t.timed.iter().all(|&n| n >= SAMPLES) {
            let fastest = t
                .fastest
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(at, _)| at);
            // Within the margin of the unpadded copy, the difference is as likely noise.
            let clear = t.fastest[fastest] < t.fastest[0] * (1.0 - MARGIN);
            Some(if clear { fastest } else { 0 })
        } else if t.runs >= PATIENCE * self.entries.len() as u32 {
            Some(0)
        } else {
            None
        };
        if let Some(c) = choice {
            if std::env::var_os("CSX_JIT_PLACE_LOG").is_some() {
                let seen: Vec<String> = (self.entries.iter().zip(&t.fastest))
                    .map(|((pad, _), ns)| format!("{pad}: {ns:.4}"))
                    .collect();
                eprintln!(
                    "csx-jit: placed {} bytes past a line after {} runs (ns per unit of fuel, \
                     fastest run, by placement: {})",
                    self.entries[c].0,
                    t.runs,
                    seen.join(", ")
                );
            }
            self.chosen.store(c, Ordering::Release);
        }
    }

    /// The padding of the chosen copy, once chosen.
    pub(crate) fn chosen(&self) -> Option<u32> {
        match self.chosen.load(Ordering::Acquire) {
            UNDECIDED => None,
            c => Some(self.entries[c].0),
        }
    }

    /// How many copies there are.
    pub(crate) fn copies(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_padding_keeps_the_constants_aligned() {
        assert_eq!(padding(6, 1), 6);
        assert_eq!(padding(70, 1), 6);
        assert_eq!(padding(70, 16), 0);
        assert_eq!(padding(40, 16), 32);
        assert_eq!(padding(63, 0), 63);
    }

    /// Copies whose entry points are their indexes (the trial only hands them out).
    fn copies(pads: &[u32]) -> Placements<usize> {
        Placements::new(pads.iter().copied().zip(0..).collect())
    }

    #[test]
    fn the_copies_take_turns_whose_first_run_is_not_timed() {
        let p = copies(&[0, 8, 16]);
        let turns: Vec<Option<usize>> = (0..2 * 3 * TURN).map(|_| p.pick().1).collect();
        let want: Vec<Option<usize>> = (0..2 * 3 * TURN)
            .map(|k| (!k.is_multiple_of(TURN)).then_some(k / TURN % 3))
            .collect();
        assert_eq!(turns, want);
    }

    #[test]
    fn the_copy_fastest_per_unit_of_fuel_is_chosen() {
        let p = copies(&[0, 8, 16]);
        // Copy 1 is the fastest per unit of fuel, though not the fastest run: its runs
        // do more work. Copy 2 has one fast outlier, slower than copy 1's best.
        let times = |copy: usize, run: u64| match copy {
            0 => (Duration::from_micros(50), 50_000),
            1 => (Duration::from_micros(90 + run), 100_000),
            _ => (
                Duration::from_micros(if run == 3 { 46 } else { 60 }),
                50_000,
            ),
        };
        for run in 0..u64::from(SAMPLES) {
            for copy in 0..3 {
                assert_eq!(
                    p.chosen(),
                    None,
                    "chosen before copy {copy} was timed enough"
                );
                let (elapsed, fuel) = times(copy, run);
                p.record(copy, elapsed, fuel);
            }
        }
        assert_eq!(p.chosen(), Some(8));
        assert_eq!(p.pick().1, None, "no run is timed once chosen");
        // A late report (a run that started during the trial) changes nothing.
        p.record(0, Duration::from_nanos(1), 1 << 40);
        assert_eq!(p.chosen(), Some(8));
    }

    #[test]
    fn a_copy_about_as_fast_as_the_unpadded_one_is_not_chosen() {
        let p = copies(&[0, 8]);
        for _ in 0..SAMPLES {
            p.record(0, Duration::from_nanos(100_000), MIN_FUEL);
            p.record(1, Duration::from_nanos(98_000), MIN_FUEL);
        }
        assert_eq!(p.chosen(), Some(0), "2% faster is within the margin");
    }

    #[test]
    fn short_runs_end_the_trial_on_the_unpadded_copy() {
        let p = copies(&[0, 8, 16, 24]);
        let patience = PATIENCE as usize * 4;
        for run in 0..patience {
            assert_eq!(p.chosen(), None, "run {run}");
            let copy = run % 4;
            // Copy 3's runs are fast but too short to time.
            let fuel = if copy == 3 { MIN_FUEL - 1 } else { MIN_FUEL };
            let ns = if copy == 3 { 1 } else { 100_000 + copy as u64 };
            p.record(copy, Duration::from_nanos(ns), fuel);
        }
        assert_eq!(p.chosen(), Some(0));
    }

    #[test]
    fn one_copy_is_chosen_at_once() {
        let p = copies(&[0]);
        assert_eq!(p.chosen(), Some(0));
        assert_eq!(p.pick().1, None);
    }

    #[test]
    fn the_padding_is_jumped_over() {
        let code = [0x55, 0xc3];
        assert_eq!(padded(&code, 0), code);
        assert_eq!(padded(&code, 1), [0x90, 0x55, 0xc3]);
        let p = padded(&code, 6);
        assert_eq!(p, [0xeb, 4, 0xcc, 0xcc, 0xcc, 0xcc, 0x55, 0xc3]);
        // The jump lands on the code's first byte.
        assert_eq!(2 + usize::from(p[1]), 6);
        // The longest padding still fits a rel8 jump.
        let p = padded(&code, LINE - 1);
        assert_eq!(2 + usize::from(p[1]), LINE as usize - 1);
    }
}
