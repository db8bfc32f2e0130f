//! [`RunAccount`]: the modelled time of a run of many λ requests.
//!
//! One request's modelled time is its stages one after another ([`super::SideCost`]).
//! A run overlaps requests, so its time is set by its bottleneck. The resources:
//!
//! ```text
//!   resource        capacity           busy with
//!   media           1                  device media reads/writes, host cache misses
//!   link            1                  every byte over the link
//!   host cores      T (the threads)    λ (or native code) on the host
//!   device engines  E (the profile's)  λ on the device
//!   requests        T in flight        each request's own modelled time
//! ```
//!
//! run time = max over resources of busy time / capacity. The last row bounds a run by
//! its dependencies: with one thread (T = 1) it is the sum of the requests' times, which
//! is at least every other row, so a sequential run is simply the sum. Applications
//! running at once share media, link, cores and engines; each keeps its own requests
//! row ([`makespan_ns`]).
//!
//! A command's link latency (doorbell and completion) is in its request's own time but
//! keeps no resource busy: many commands wait at once.
//!
//! A profiled request (both sides ran) keeps both sides' resources busy and lasts as
//! long as its slower side.

use super::file::{LambdaOutput, Ran, SideCost};

/// Totals of a run (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunAccount {
    pub requests_host: u64,
    pub requests_device: u64,
    /// Requests that ran on both sides (auto's profiling).
    pub requests_profiled: u64,
    pub input_bytes: u64,
    pub link_bytes: u64,
    pub media_bytes: u64,
    pub media_ns: u64,
    pub link_ns: u64,
    pub host_compute_ns: u64,
    pub device_compute_ns: u64,
    /// Sum of the requests' own modelled times.
    pub request_ns: u64,
    /// Instructions λ executed, both sides (a profiled request's twice).
    pub insns: u64,
}

/// The totals of two runs together, field by field (applications side by side, or an
/// array's members).
impl std::ops::AddAssign for RunAccount {
    fn add_assign(&mut self, o: RunAccount) {
        self.requests_host += o.requests_host;
        self.requests_device += o.requests_device;
        self.requests_profiled += o.requests_profiled;
        self.input_bytes += o.input_bytes;
        self.link_bytes += o.link_bytes;
        self.media_bytes += o.media_bytes;
        self.media_ns += o.media_ns;
        self.link_ns += o.link_ns;
        self.host_compute_ns += o.host_compute_ns;
        self.device_compute_ns += o.device_compute_ns;
        self.request_ns += o.request_ns;
        self.insns += o.insns;
    }
}

impl RunAccount {
    fn add_side(&mut self, c: &SideCost, host: bool) {
        self.link_bytes += c.link_bytes;
        self.media_bytes += c.media_bytes;
        self.media_ns += c.media_ns;
        self.link_ns += c.link_ns;
        self.insns += c.insns;
        if host {
            self.host_compute_ns += c.compute_ns;
        } else {
            self.device_compute_ns += c.compute_ns;
        }
    }

    /// Adds one λ request of `input_bytes`.
    pub fn add(&mut self, input_bytes: u64, out: &LambdaOutput) {
        match out.ran {
            Ran::Host => self.requests_host += 1,
            Ran::Device => self.requests_device += 1,
            Ran::Both => self.requests_profiled += 1,
        }
        if let Some(h) = &out.host {
            self.add_side(h, true);
        }
        if let Some(d) = &out.device {
            self.add_side(d, false);
        }
        self.input_bytes += input_bytes;
        self.request_ns += out.modelled_ns();
    }

    /// Adds one host-only request that is not a λ (plain reads and native code): its
    /// I/O and compute are in `cost`.
    pub fn add_host(&mut self, input_bytes: u64, cost: &SideCost) {
        self.requests_host += 1;
        self.add_side(cost, true);
        self.input_bytes += input_bytes;
        self.request_ns += cost.modelled_ns();
    }

    /// The run's modelled time with `threads` host threads and `engines` device engines.
    pub fn modelled_ns(&self, threads: u32, engines: u32) -> u64 {
        makespan_ns(&[(*self, threads)], engines)
    }
}

/// The modelled time of applications running at once, each `(account, threads)`, on a
/// device with `engines` engines (see the module doc).
pub fn makespan_ns(apps: &[(RunAccount, u32)], engines: u32) -> u64 {
    assert!(!apps.is_empty());
    let threads_total: u64 = apps.iter().map(|(_, t)| u64::from((*t).max(1))).sum();
    let sum = |f: fn(&RunAccount) -> u64| apps.iter().map(|(a, _)| f(a)).sum::<u64>();
    let own = apps
        .iter()
        .map(|(a, t)| a.request_ns / u64::from((*t).max(1)))
        .max()
        .unwrap_or(0);
    let shared = [
        sum(|a| a.media_ns),
        sum(|a| a.link_ns),
        sum(|a| a.host_compute_ns) / threads_total,
        sum(|a| a.device_compute_ns) / u64::from(engines.max(1)),
    ];
    shared.into_iter().fold(own, u64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(media: u64, link: u64, host: u64, device: u64, requests: u64) -> RunAccount {
        RunAccount {
            media_ns: media,
            link_ns: link,
            host_compute_ns: host,
            device_compute_ns: device,
            request_ns: requests,
            ..RunAccount::default()
        }
    }

    #[test]
    fn bottleneck_and_sequential() {
        let a = account(100, 200, 800, 0, 1100);
        // One thread: the sum of the requests.
        assert_eq!(a.modelled_ns(1, 4), 1100);
        // Eight: the link.
        assert_eq!(a.modelled_ns(8, 4), 200);
        let b = account(300, 10, 0, 2000, 2310);
        // Together: the device engines (2000 / 4) against media 400, b's requests 577.
        assert_eq!(makespan_ns(&[(a, 4), (b, 4)], 4), 577);
        assert_eq!(makespan_ns(&[(a, 4), (b, 4)], 2), 1000);
    }
}
