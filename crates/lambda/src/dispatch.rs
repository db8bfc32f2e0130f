//! The `auto` dispatcher: λ-IO's cost model (FAST'23 §3.4, equations 1–3) with periodic
//! profiling, choosing for each λ request the side predicted to finish first.
//!
//! The model works in per-byte costs (ns per byte) rather than bandwidths, which is the
//! same thing inverted and keeps the arithmetic in one direction:
//!
//! ```text
//!   s  media → device memory      (1 / B_s)
//!   d  device memory ↔ host link  (1 / B_d)
//!   h  host compute               (1 / B_h)
//!   g  device compute             (1 / βB_h)
//!   α  output bytes / input bytes
//!   c  cached fraction of the input in the host page cache
//!   xs, xd  the host's own I/O per byte it moves: media and link (s and d as the host
//!      sees them)
//!
//!   λ-read  (eq. 3, eq. 1 when c = 0):
//!     host   = (1 − c)·D·xs + (1 − c)·D·xd + D·h
//!     device = D·s + α·D·d + D·g
//!   λ-write (eq. 2):
//!     host   = D·h + α·D·xd + α·D·xs
//!     device = D·d + D·g + α·D·s
//! ```
//!
//! `xs` and `xd` are profiled from the host side's own I/O (its uncached input for a
//! read, its output for a write) rather than taken from the device side's `s` and `d`: a
//! λ-read's device side moves only the output over the link, a few bytes whose cost is
//! the link's per-command latency, so `d` measured there says nothing about moving the
//! input. While no profiled request moved host bytes (all cached), they keep their last
//! estimate, or `s` and `d` before there is one.
//!
//! **Concurrency** ([`Parallelism`]). λ-IO profiles its bandwidths per request while
//! many requests run at once (§3.4.1), so they include the sharing. Our samples are
//! modelled per request alone, so with `T` requests in flight on `T` host threads and a
//! device of `E` engines the dispatcher applies the sharing itself: each request gets a
//! `1/T` share of the media and the link, one host core, and `E/T` device engines, and
//! stages of different requests overlap, so a side's time per request is `T` × its
//! slowest stage's share. Dividing out `T`:
//!
//! ```text
//!   read   host   = max((1 − c)·D·xs, (1 − c)·D·xd, D·h / T)
//!          device = max(D·s, α·D·d, D·g / E)
//!   write  host   = max(D·h / T, α·D·xd, α·D·xs)
//!          device = max(D·d, D·g / E, α·D·s)
//! ```
//!
//! This is the bottleneck model `csx bench lambda` times runs with; without a
//! `Parallelism` the dispatcher uses the equations as printed above (one request alone).
//!
//! Profiling (§3.4.2): per (file, λ) pair, requests are counted in periods of `n`; the
//! first `k` of each period run on both sides, and each side reports what it measured
//! (a [`Sample`]). At the end of the profiling phase the estimates become the trimmed
//! mean of the `k` samples; the rest of the period is dispatched on them. Before the first
//! estimate exists every request is profiled, so the dispatcher never guesses.
//!
//! **The device's floor** ([`DeviceFloor`], [`Dispatcher::host_beats_floor`]). A
//! profiled request runs its host side first. When that side's time, predicted as above,
//! is already below what the device side would take with its compute free (its bytes at
//! the media's and the link's bandwidths), the device cannot win: its side is not run,
//! the request counts as a host run, and the period's profiling ends with the host chosen
//! while the cache holds at least as much of the input. Without it, a warm stream paid
//! one device-side run per period (10-30x a cached host request) to learn what the
//! bandwidths alone already said.
//!
//! Invariant: a [`Dispatcher`] only decides and records; it never runs anything, so it is
//! deterministic for a given sequence of calls (tests rely on that).

use std::collections::HashMap;
use std::fmt;

/// Default profiling period `n` (λ-IO §5.1).
pub const PERIOD_DEFAULT: u32 = 200;

/// Default profiling length `k` (λ-IO §5.1).
pub const PROFILE_LEN_DEFAULT: u32 = 5;

/// Decisions the trace keeps; older ones are dropped (counters keep counting), so a long
/// stream cannot grow the trace without bound.
pub const TRACE_LEN_MAX: usize = 100_000;

/// Why a dispatcher configuration is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    #[error("profiling length {k} must be between 1 and the period {n}")]
    BadProfileLen { k: u32, n: u32 },
}

/// Where a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Host,
    Device,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Host => "host",
            Side::Device => "device",
        })
    }
}

/// A λ-read pulls data from the file through λ; a λ-write pushes λ's output into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Read,
    Write,
}

/// The profiling key: a file and a λ (λ-IO profiles each pair separately, which is what
/// lets collocated applications dispatch independently).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub path: String,
    pub lambda: String,
    pub direction: Direction,
}

/// What one side measured for one profiled request. Times are ns (modelled or real, as
/// the caller chooses, but the same kind for both sides); `None`: that side did not run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub input_bytes: u64,
    pub output_bytes: u64,
    /// The cached fraction of the input when the host side ran.
    pub cache_ratio: f64,
    /// Host side: running λ.
    pub host_compute_ns: Option<u64>,
    /// Host side: its own I/O (uncached input for a read, output for a write) over
    /// the media.
    pub host_media_ns: Option<u64>,
    /// Host side: the same over the link.
    pub host_link_ns: Option<u64>,
    /// Host side: the bytes that I/O moved.
    pub host_io_bytes: Option<u64>,
    /// Device side: media ↔ device memory.
    pub media_ns: Option<u64>,
    /// Device side: the link (output back for a read, input over for a write).
    pub link_ns: Option<u64>,
    /// Device side: running λ.
    pub device_compute_ns: Option<u64>,
    /// Per-command latencies of each side (in a request's time alone, not in a
    /// shared stage).
    pub host_latency_ns: Option<u64>,
    pub device_latency_ns: Option<u64>,
}

/// The profiled per-byte costs of one key (see the module table).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    pub s: f64,
    pub d: f64,
    pub h: f64,
    pub g: f64,
    pub alpha: f64,
    pub xs: f64,
    pub xd: f64,
    /// Per-command latencies per input byte, host and device side.
    pub lh: f64,
    pub ld: f64,
}

/// Requests in flight and where they run (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallelism {
    /// Host threads issuing requests (`T`), each with a core.
    pub host_threads: u32,
    /// Device engines (`E`).
    pub device_engines: u32,
}

impl Estimate {
    /// Predicted (host, device) ns for `bytes` of input with cached fraction `c`: one
    /// request alone (`None`), or per request with `p` in flight (see the module doc).
    pub fn predict(
        &self,
        direction: Direction,
        bytes: u64,
        c: f64,
        p: Option<Parallelism>,
    ) -> (f64, f64) {
        let dd = bytes as f64;
        let miss = 1.0 - c.clamp(0.0, 1.0);
        let a = self.alpha;
        // The stages of each side, per direction: host (I/O media, I/O link, compute),
        // device (media, link, compute).
        let (host, device) = match direction {
            Direction::Read => (
                [miss * dd * self.xs, miss * dd * self.xd, dd * self.h],
                [dd * self.s, a * dd * self.d, dd * self.g],
            ),
            Direction::Write => (
                [a * dd * self.xs, a * dd * self.xd, dd * self.h],
                [a * dd * self.s, dd * self.d, dd * self.g],
            ),
        };
        match p {
            None => (
                host.iter().sum::<f64>() + dd * self.lh,
                device.iter().sum::<f64>() + dd * self.ld,
            ),
            Some(p) => {
                let t = f64::from(p.host_threads.max(1));
                let e = f64::from(p.device_engines.max(1));
                (
                    host[0].max(host[1]).max(host[2] / t),
                    device[0].max(device[1]).max(device[2] / e),
                )
            }
        }
    }
}

/// What no device run can beat, per byte: its media and link at the device's bandwidths
/// (compute free). From the device's performance model, not from samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceFloor {
    /// Media ↔ device memory, ns per byte.
    pub s: f64,
    /// Device memory ↔ host link, ns per byte.
    pub d: f64,
}

/// How much faster (relatively) one side must be predicted after a profiled sample for
/// that sample to end the period's profiling (see [`Dispatcher::record`]).
pub const DECISIVE_MARGIN: f64 = 0.25;

/// Whether predicted times `h` and `d` differ by at least [`DECISIVE_MARGIN`] of the
/// faster one.
fn is_decisive(h: f64, d: f64) -> bool {
    let (fast, slow) = (h.min(d), h.max(d));
    fast > 0.0 && slow >= fast * (1.0 + DECISIVE_MARGIN)
}

/// Mean of `xs` without its smallest and largest value when there are at least three.
pub fn trimmed_mean(xs: &mut [f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let kept = if xs.len() >= 3 {
        &xs[1..xs.len() - 1]
    } else {
        &xs[..]
    };
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

/// One request's decision, for the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The request's number within its key, from 0.
    pub request: u64,
    pub key: Key,
    pub bytes: u64,
    pub cache_ratio: f64,
    /// `Profile`: run on both sides; otherwise the chosen side.
    pub choice: Choice,
    /// Predicted (host, device) ns; `None` while profiling.
    pub predicted_ns: Option<(f64, f64)>,
}

/// What the dispatcher tells the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Run on both sides and report a [`Sample`] (the result of either is the answer).
    Profile,
    Run(Side),
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} #{} {} B cache {:.0}%: ",
            self.key.path,
            self.key.lambda,
            self.request,
            self.bytes,
            self.cache_ratio * 100.0
        )?;
        match (self.choice, self.predicted_ns) {
            (Choice::Profile, _) => f.write_str("profile (both sides)"),
            (Choice::Run(side), Some((h, d))) => write!(
                f,
                "{side} (predicted host {:.1} µs, device {:.1} µs)",
                h / 1000.0,
                d / 1000.0
            ),
            (Choice::Run(side), None) => write!(f, "{side}"),
        }
    }
}

/// Requests per side and in profiling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub requests_host: u64,
    pub requests_device: u64,
    pub requests_profiled: u64,
}

#[derive(Debug, Default)]
struct KeyState {
    requests: u64,
    samples: Vec<Sample>,
    estimate: Option<Estimate>,
    /// The period's profiling ended early: a sample's prediction was decisive.
    settled: bool,
    /// This period's host side beat the device's floor at this cached fraction.
    floor_win: Option<f64>,
}

/// The `auto` dispatcher for any number of (file, λ) keys.
#[derive(Debug)]
pub struct Dispatcher {
    period: u32,
    profile_len: u32,
    parallelism: Option<Parallelism>,
    keys: HashMap<Key, KeyState>,
    counters: Counters,
    trace: Vec<Decision>,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher::new(PERIOD_DEFAULT, PROFILE_LEN_DEFAULT).expect("the defaults are valid")
    }
}

impl Dispatcher {
    /// A dispatcher profiling the first `profile_len` of every `period` requests per key.
    pub fn new(period: u32, profile_len: u32) -> Result<Dispatcher, DispatchError> {
        if profile_len == 0 || profile_len > period {
            return Err(DispatchError::BadProfileLen {
                k: profile_len,
                n: period,
            });
        }
        Ok(Dispatcher {
            period,
            profile_len,
            parallelism: None,
            keys: HashMap::new(),
            counters: Counters::default(),
            trace: Vec::new(),
        })
    }

    /// Predicts with `p` requests in flight (see the module doc); `None`: one alone.
    pub fn set_parallelism(&mut self, p: Option<Parallelism>) {
        self.parallelism = p;
    }

    /// Decides where request `bytes` of `key` with cached fraction `cache_ratio` runs.
    pub fn decide(&mut self, key: &Key, bytes: u64, cache_ratio: f64) -> Choice {
        let state = self.keys.entry(key.clone()).or_default();
        let request = state.requests;
        state.requests += 1;
        if request.is_multiple_of(u64::from(self.period)) {
            state.settled = false;
            state.floor_win = None;
        }
        let in_profile =
            request % u64::from(self.period) < u64::from(self.profile_len) && !state.settled;
        let floor_holds = state.floor_win.is_some_and(|c0| cache_ratio >= c0);
        let (choice, predicted_ns) = match (&state.estimate, in_profile) {
            (_, false) if floor_holds => (Choice::Run(Side::Host), None),
            (Some(est), false) => {
                let (h, d) = est.predict(key.direction, bytes, cache_ratio, self.parallelism);
                let side = if h <= d { Side::Host } else { Side::Device };
                (Choice::Run(side), Some((h, d)))
            }
            _ => (Choice::Profile, None),
        };
        match choice {
            Choice::Profile => self.counters.requests_profiled += 1,
            Choice::Run(Side::Host) => self.counters.requests_host += 1,
            Choice::Run(Side::Device) => self.counters.requests_device += 1,
        }
        if self.trace.len() >= TRACE_LEN_MAX {
            self.trace.remove(0);
        }
        self.trace.push(Decision {
            request,
            key: key.clone(),
            bytes,
            cache_ratio,
            choice,
            predicted_ns,
        });
        choice
    }

    /// Records a profiled request's measurements; after the `k`-th sample of a period
    /// (or any sample while no estimate exists) the key's estimate is recomputed.
    ///
    /// A sample after which the estimate from the period's samples so far predicts one
    /// side at least [`DECISIVE_MARGIN`] faster than the other ends the period's
    /// profiling at once:
    /// more samples would cost a slower-side run each and could not change the choice
    /// (on a short stream, 32 requests of 8 MiB, five profiled requests were 15% of the
    /// work). A closer call is profiled the full `k`, and its estimate is their trimmed
    /// mean, as λ-IO does.
    pub fn record(&mut self, key: &Key, sample: Sample) {
        let k = self.profile_len as usize;
        let parallelism = self.parallelism;
        let state = self.keys.entry(key.clone()).or_default();
        state.samples.push(sample);
        let decisive = match estimate(key.direction, &state.samples, state.estimate) {
            Some(est) => {
                let (h, d) = est.predict(
                    key.direction,
                    sample.input_bytes,
                    sample.cache_ratio,
                    parallelism,
                );
                is_decisive(h, d)
            }
            None => false,
        };
        if state.samples.len() >= k || state.estimate.is_none() || decisive {
            if let Some(est) = estimate(key.direction, &state.samples, state.estimate) {
                state.estimate = Some(est);
            }
            if state.samples.len() >= k || decisive {
                state.samples.clear();
            }
            state.settled |= decisive;
        }
    }

    /// After the host side of a profiled request of `key` ran (`host`: its fields of a
    /// [`Sample`]; the device's are ignored): whether the device side may be skipped,
    /// because the host's predicted time is below the device's `floor` for the same
    /// bytes (see the module doc). When it is, the request is recorded as a host run (in
    /// the counters and the trace) and the period's profiling ends, the host chosen
    /// while the cached fraction stays at least `host.cache_ratio`.
    pub fn host_beats_floor(&mut self, key: &Key, host: &Sample, floor: DeviceFloor) -> bool {
        let bytes = host.input_bytes;
        if bytes == 0 {
            return false;
        }
        let per_byte = |ns: Option<u64>, n: u64| match (ns, n) {
            (Some(t), n) if n > 0 => t as f64 / n as f64,
            _ => 0.0,
        };
        let io = host.host_io_bytes.unwrap_or(0);
        let partial = Estimate {
            s: floor.s,
            d: floor.d,
            h: per_byte(host.host_compute_ns, bytes),
            g: 0.0,
            alpha: host.output_bytes as f64 / bytes as f64,
            xs: per_byte(host.host_media_ns, io),
            xd: per_byte(host.host_link_ns, io),
            lh: per_byte(host.host_latency_ns, bytes),
            ld: 0.0,
        };
        let (h, d) = partial.predict(key.direction, bytes, host.cache_ratio, self.parallelism);
        if h.total_cmp(&d) != std::cmp::Ordering::Less {
            return false;
        }
        let state = self.keys.entry(key.clone()).or_default();
        state.settled = true;
        state.floor_win = Some(host.cache_ratio);
        self.counters.requests_profiled -= 1;
        self.counters.requests_host += 1;
        let last =
            (self.trace.iter_mut().rev()).find(|t| t.key == *key && t.choice == Choice::Profile);
        if let Some(t) = last {
            t.choice = Choice::Run(Side::Host);
            t.predicted_ns = Some((h, d));
        }
        true
    }

    /// The current estimate for `key`.
    pub fn estimate(&self, key: &Key) -> Option<Estimate> {
        self.keys.get(key).and_then(|s| s.estimate)
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The decisions so far, oldest first (at most [`TRACE_LEN_MAX`]).
    pub fn trace(&self) -> &[Decision] {
        &self.trace
    }
}

/// Per-byte costs from `samples` (trimmed means); `None` unless both sides were seen.
fn estimate(
    direction: Direction,
    samples: &[Sample],
    previous: Option<Estimate>,
) -> Option<Estimate> {
    let per_byte = |f: &dyn Fn(&Sample) -> Option<(u64, u64)>| {
        let mut xs: Vec<f64> = samples
            .iter()
            .filter_map(f)
            .filter(|&(_, bytes)| bytes > 0)
            .map(|(ns, bytes)| ns as f64 / bytes as f64)
            .collect();
        trimmed_mean(&mut xs)
    };
    let h = per_byte(&|s| s.host_compute_ns.map(|t| (t, s.input_bytes)))?;
    let g = per_byte(&|s| s.device_compute_ns.map(|t| (t, s.input_bytes)))?;
    let s_cost = per_byte(&|s| {
        let moved = match direction {
            Direction::Read => s.input_bytes,
            Direction::Write => s.output_bytes,
        };
        s.media_ns.map(|t| (t, moved))
    })
    .unwrap_or(0.0);
    let d = per_byte(&|s| {
        let moved = match direction {
            Direction::Read => s.output_bytes,
            Direction::Write => s.input_bytes,
        };
        s.link_ns.map(|t| (t, moved))
    })
    .unwrap_or(0.0);
    let mut alphas: Vec<f64> = samples
        .iter()
        .filter(|s| s.input_bytes > 0)
        .map(|s| s.output_bytes as f64 / s.input_bytes as f64)
        .collect();
    let alpha = trimmed_mean(&mut alphas).unwrap_or(0.0);
    let xs = per_byte(&|s| s.host_media_ns.zip(s.host_io_bytes))
        .or(previous.map(|p| p.xs))
        .unwrap_or(s_cost);
    let xd = per_byte(&|s| s.host_link_ns.zip(s.host_io_bytes))
        .or(previous.map(|p| p.xd))
        .unwrap_or(d);
    let lh = per_byte(&|s| s.host_latency_ns.map(|t| (t, s.input_bytes))).unwrap_or(0.0);
    let ld = per_byte(&|s| s.device_latency_ns.map(|t| (t, s.input_bytes))).unwrap_or(0.0);
    Some(Estimate {
        s: s_cost,
        d,
        h,
        g,
        alpha,
        xs,
        xd,
        lh,
        ld,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(direction: Direction) -> Key {
        Key {
            path: "/data".to_string(),
            lambda: "stats64".to_string(),
            direction,
        }
    }

    /// A λ-IO-like device: s = 0.28, d = 0.31, g = 2.4·h ns per byte.
    fn sample(h: f64, alpha: f64) -> Sample {
        let bytes = 1u64 << 20;
        let b = bytes as f64;
        Sample {
            input_bytes: bytes,
            output_bytes: (b * alpha) as u64,
            cache_ratio: 0.0,
            host_compute_ns: Some((b * h) as u64),
            host_media_ns: Some((b * 0.28) as u64),
            host_link_ns: Some((b * 0.31) as u64),
            host_io_bytes: Some(bytes),
            media_ns: Some((b * 0.28) as u64),
            link_ns: Some((b * alpha * 0.31) as u64),
            device_compute_ns: Some((b * h * 2.4) as u64),
            host_latency_ns: Some(0),
            device_latency_ns: Some(0),
        }
    }

    /// `n` cold 1 MiB requests' choices, each profiled one recording `profiled`.
    fn decide_cold(disp: &mut Dispatcher, k: &Key, n: usize, profiled: Sample) -> Vec<Choice> {
        (0..n)
            .map(|_| {
                let c = disp.decide(k, 1 << 20, 0.0);
                if c == Choice::Profile {
                    disp.record(k, profiled);
                }
                c
            })
            .collect()
    }

    #[test]
    fn profiles_first_k_of_every_period() {
        let mut disp = Dispatcher::new(10, 3).unwrap();
        let k = key(Direction::Read);
        let choices = decide_cold(&mut disp, &k, 20, sample(0.2, 0.001));
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(*c == Choice::Profile, i % 10 < 3, "request {i}: {c:?}");
        }
        assert_eq!(disp.counters().requests_profiled, 6);
        assert_eq!(disp.trace().len(), 20);
        assert!(Dispatcher::new(5, 6).is_err());
        assert!(Dispatcher::new(5, 0).is_err());
    }

    #[test]
    fn cheap_lambda_goes_to_the_device_cold_and_the_host_warm() {
        // stats64-like: light compute (h = 0.2 ns/B), tiny output.
        let mut disp = Dispatcher::new(200, 5).unwrap();
        let k = key(Direction::Read);
        for _ in 0..5 {
            assert_eq!(disp.decide(&k, 1 << 20, 0.0), Choice::Profile);
            disp.record(&k, sample(0.2, 0.001));
        }
        // Cold: host 0.59 + 0.2 = 0.79 ns/B against device 0.28 + 0.48 = 0.76 ns/B.
        assert_eq!(disp.decide(&k, 1 << 20, 0.0), Choice::Run(Side::Device));
        // Warm: the host reads from its cache.
        assert_eq!(disp.decide(&k, 1 << 20, 1.0), Choice::Run(Side::Host));
        let last = disp.trace().last().unwrap().to_string();
        assert!(last.contains("host (predicted host"), "{last}");
    }

    #[test]
    fn heavy_lambda_stays_on_the_host() {
        // stats32-like: twice the compute per byte.
        let mut disp = Dispatcher::new(200, 5).unwrap();
        let k = key(Direction::Read);
        for _ in 0..5 {
            disp.decide(&k, 1 << 20, 0.0);
            disp.record(&k, sample(0.4, 0.001));
        }
        assert_eq!(disp.decide(&k, 1 << 20, 0.0), Choice::Run(Side::Host));
        // Host 0.99 against device 1.24 ns/B is decisive: the first sample settled it.
        assert_eq!(disp.counters().requests_profiled, 1);
        assert_eq!(disp.counters().requests_host, 5);
    }

    #[test]
    fn parallel_prediction_takes_the_slowest_stage() {
        let est = Estimate {
            s: 1.0,
            d: 2.0,
            h: 8.0,
            g: 20.0,
            alpha: 0.5,
            xs: 1.0,
            xd: 2.0,
            lh: 0.0,
            ld: 0.0,
        };
        let p = Parallelism {
            host_threads: 8,
            device_engines: 4,
        };
        // host = max(1, 2, 8/8), device = max(1, 0.5·2, 20/4).
        assert_eq!(est.predict(Direction::Read, 1, 0.0, Some(p)), (2.0, 5.0));
        // Cached: the host is left with its compute share.
        assert_eq!(est.predict(Direction::Read, 1, 1.0, Some(p)), (1.0, 5.0));
        let mut disp = Dispatcher::new(10, 1).unwrap();
        disp.set_parallelism(Some(p));
        let k = key(Direction::Read);
        disp.decide(&k, 1 << 20, 0.0);
        disp.record(&k, sample(0.2, 0.001));
        // Alone the device loses (0.79 against 0.76 + ... see above); eight at a time the
        // link (0.31 ns/B) bounds the host, the media (0.28) the device.
        assert_eq!(disp.decide(&k, 1 << 20, 0.0), Choice::Run(Side::Device));
    }

    #[test]
    fn a_decisive_sample_ends_the_profiling_of_its_period() {
        // Heavy compute (h = 2 ns/B): host 0.59 + 2 = 2.59 against device 0.28 + 4.8
        // = 5.08 ns/B, the host twice as fast: one profiled request settles it.
        let mut disp = Dispatcher::new(20, 5).unwrap();
        let k = key(Direction::Read);
        let choices = decide_cold(&mut disp, &k, 45, sample(2.0, 0.001));
        for (i, c) in choices.iter().enumerate() {
            let want = match i % 20 {
                0 => Choice::Profile,
                _ => Choice::Run(Side::Host),
            };
            assert_eq!(*c, want, "request {i}");
        }
        assert_eq!(disp.counters().requests_profiled, 3);
        // A close call (0.79 against 0.76 ns/B) is profiled the whole k.
        let mut close = Dispatcher::new(20, 5).unwrap();
        for i in 0..5 {
            assert_eq!(
                close.decide(&k, 1 << 20, 0.0),
                Choice::Profile,
                "request {i}"
            );
            close.record(&k, sample(0.2, 0.001));
        }
        assert_eq!(close.decide(&k, 1 << 20, 0.0), Choice::Run(Side::Device));
        assert!(is_decisive(1.0, 1.25) && is_decisive(1.25, 1.0));
        assert!(!is_decisive(1.0, 1.2) && !is_decisive(0.0, 1.0));
    }

    /// The host's half of `sample`: what a profiled request knows before its device
    /// side runs.
    fn host_half(mut s: Sample, cache_ratio: f64) -> Sample {
        s.cache_ratio = cache_ratio;
        s.media_ns = None;
        s.link_ns = None;
        s.device_compute_ns = None;
        s.device_latency_ns = None;
        if cache_ratio >= 1.0 {
            s.host_media_ns = Some(0);
            s.host_link_ns = Some(0);
            s.host_io_bytes = Some(0);
        }
        s
    }

    #[test]
    fn a_host_side_below_the_device_floor_skips_the_device_side() {
        // Warm: the host computes at 0.2 ns/B from its cache; the device cannot read the
        // media faster than 0.28 ns/B. One host run settles the period.
        let floor = DeviceFloor { s: 0.28, d: 0.31 };
        let mut disp = Dispatcher::new(20, 5).unwrap();
        let k = key(Direction::Read);
        let mut choices = Vec::new();
        for _ in 0..25 {
            let c = disp.decide(&k, 1 << 20, 1.0);
            if c == Choice::Profile {
                assert!(disp.host_beats_floor(&k, &host_half(sample(0.2, 0.001), 1.0), floor));
            }
            choices.push(c);
        }
        for (i, c) in choices.iter().enumerate() {
            let want = match i % 20 {
                0 => Choice::Profile,
                _ => Choice::Run(Side::Host),
            };
            assert_eq!(*c, want, "request {i}");
        }
        // The two "profiled" requests ran on the host alone and count so.
        let n = disp.counters();
        assert_eq!(
            (n.requests_host, n.requests_device, n.requests_profiled),
            (25, 0, 0)
        );
        let first = disp.trace()[0].to_string();
        assert!(first.contains("host (predicted host"), "{first}");
        // The cache went cold within the period: the floor no longer says anything, so
        // the request is profiled, and a cold host (0.59 + 0.2 ns/B) does not beat the
        // floor: the device side runs.
        assert_eq!(disp.decide(&k, 1 << 20, 0.0), Choice::Profile);
        assert!(!disp.host_beats_floor(&k, &host_half(sample(0.2, 0.001), 0.0), floor));
        // Heavy compute cold: above the floor, so both sides are still measured.
        let mut heavy = Dispatcher::new(20, 5).unwrap();
        assert_eq!(heavy.decide(&k, 1 << 20, 0.0), Choice::Profile);
        assert!(!heavy.host_beats_floor(&k, &host_half(sample(2.0, 0.001), 0.0), floor));
        assert_eq!(heavy.counters().requests_profiled, 1);
    }

    #[test]
    fn trimmed_mean_drops_the_extremes() {
        assert_eq!(trimmed_mean(&mut []), None);
        assert_eq!(trimmed_mean(&mut [1.0, 3.0]), Some(2.0));
        assert_eq!(trimmed_mean(&mut [100.0, 1.0, 2.0, 3.0, 0.0]), Some(2.0));
    }

    #[test]
    fn write_model_follows_equation_2() {
        let est = Estimate {
            s: 1.0,
            d: 2.0,
            h: 3.0,
            g: 4.0,
            alpha: 0.5,
            xs: 1.0,
            xd: 2.0,
            lh: 0.0,
            ld: 0.0,
        };
        // host = D·h + α·D·d + α·D·s = 3 + 1 + 0.5; device = D·d + D·g + α·D·s = 2 + 4 + 0.5.
        assert_eq!(est.predict(Direction::Write, 1, 0.0, None), (4.5, 6.5));
        // Read with half cached: host = 0.5·1 + 0.5·2 + 3; device = 1 + 0.5·2 + 4.
        assert_eq!(est.predict(Direction::Read, 1, 0.5, None), (4.5, 6.0));
    }
}
