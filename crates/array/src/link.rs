//! The link model and per-link accounting.
//!
//! The topology is INSTANT's (thesis §5.2): the host and every member have one network
//! link to a switch, full duplex, each of the same bandwidth B unless overridden. A
//! byte moving from member a to member b device to device crosses a's link out and b's
//! link in, once; a host-mediated copy crosses a's link out, the host's link in, the
//! host's link out and b's link in: the host link twice (the thesis's Fig. 4.3).
//!
//! [`LinkStats`] counts the bytes each link carried, per direction; [`LinkModel`] turns
//! bytes into modelled nanoseconds, integer arithmetic only, so modelled times are the
//! same on every machine (a bandwidth of 0 is unlimited and costs nothing).

use csx_device::perf::PerfModel;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::error::ArrayError;

/// Fixed cost of one command on a link when none is given: 10 µs, csx's NVMe-oF-like
/// default (the thesis gives none).
pub const COMMAND_LATENCY_DEFAULT_NS: u64 = 10_000;

/// Largest bandwidth accepted: 1 TB/s (as `csx_device::perf`).
pub const BANDWIDTH_MAX_BYTES_PER_SEC: u64 = 1_000_000_000_000;

/// Largest command latency: 1 s.
pub const COMMAND_LATENCY_MAX_NS: u64 = 1_000_000_000;

/// The array's modelled links.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkModel {
    /// The host's link, bytes per second; 0: unlimited.
    pub host_bytes_per_sec: u64,
    /// Each member's link, bytes per second; 0: unlimited.
    pub member_bytes_per_sec: u64,
    /// Fixed cost of a command crossing a link (NVMe-oF over TCP), ns.
    pub command_latency_ns: u64,
    /// Fixed cost of a device-to-device transfer, ns (arrays described before this
    /// field existed read the default, which `uniform` also gives).
    #[serde(default = "d2d_latency_default")]
    pub d2d_latency_ns: u64,
}

fn d2d_latency_default() -> u64 {
    COMMAND_LATENCY_DEFAULT_NS
}

impl Default for LinkModel {
    fn default() -> Self {
        LinkModel::uniform(0)
    }
}

impl LinkModel {
    /// Every link at `bytes_per_sec` (0: unlimited), the default command latency.
    pub fn uniform(bytes_per_sec: u64) -> LinkModel {
        LinkModel {
            host_bytes_per_sec: bytes_per_sec,
            member_bytes_per_sec: bytes_per_sec,
            command_latency_ns: COMMAND_LATENCY_DEFAULT_NS,
            d2d_latency_ns: COMMAND_LATENCY_DEFAULT_NS,
        }
    }

    /// The links of a device profile: the host link's bandwidth and command latency
    /// from the profile's host link (`link_bytes_per_sec`, `link_latency_ns`), every
    /// member's link and the D2D latency from its device-to-device link
    /// (`d2d_bytes_per_sec`, `d2d_latency_ns`). 0 bandwidth: unlimited.
    pub fn from_perf(p: &PerfModel) -> LinkModel {
        LinkModel {
            host_bytes_per_sec: p.link_bytes_per_sec,
            member_bytes_per_sec: p.d2d_bytes_per_sec,
            command_latency_ns: p.link_latency_ns,
            d2d_latency_ns: p.d2d_latency_ns,
        }
    }

    /// Both latencies set to `ns` (the `--command-latency-us` style override).
    pub fn with_latency(self, ns: u64) -> LinkModel {
        LinkModel {
            command_latency_ns: ns,
            d2d_latency_ns: ns,
            ..self
        }
    }

    /// Checks the bounds.
    pub fn check(&self) -> Result<(), ArrayError> {
        for (what, value) in [
            ("host link bandwidth", self.host_bytes_per_sec),
            ("member link bandwidth", self.member_bytes_per_sec),
        ] {
            if value > BANDWIDTH_MAX_BYTES_PER_SEC {
                return Err(ArrayError::OutOfRange {
                    what,
                    value,
                    min: 0,
                    max: BANDWIDTH_MAX_BYTES_PER_SEC,
                });
            }
        }
        for (what, value) in [
            ("command latency (ns)", self.command_latency_ns),
            ("D2D latency (ns)", self.d2d_latency_ns),
        ] {
            if value > COMMAND_LATENCY_MAX_NS {
                return Err(ArrayError::OutOfRange {
                    what,
                    value,
                    min: 0,
                    max: COMMAND_LATENCY_MAX_NS,
                });
            }
        }
        Ok(())
    }

    /// Nanoseconds to move `bytes` at `bytes_per_sec` (0: unlimited).
    pub fn transfer_ns(bytes: u64, bytes_per_sec: u64) -> u64 {
        if bytes_per_sec == 0 {
            return 0;
        }
        ((u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(bytes_per_sec)))
            .min(u128::from(u64::MAX)) as u64
    }

    /// A device-to-device copy of `bytes`: one command, the bytes over the slower of the
    /// two member links once.
    pub fn d2d_ns(&self, bytes: u64) -> u64 {
        self.d2d_latency_ns + Self::transfer_ns(bytes, self.member_bytes_per_sec)
    }

    /// A host-mediated copy of `bytes`: read to the host, then written out, each its own
    /// command and each over the host link (the host's link carries them twice).
    pub fn host_copy_ns(&self, bytes: u64) -> u64 {
        2 * self.host_transfer_ns(bytes)
    }

    /// One host read or write of `bytes` from or to a member: one command over the host
    /// link and the member's link, bound by the slower.
    pub fn host_transfer_ns(&self, bytes: u64) -> u64 {
        self.command_latency_ns
            + Self::transfer_ns(bytes, self.host_bytes_per_sec)
                .max(Self::transfer_ns(bytes, self.member_bytes_per_sec))
    }
}

/// Parses a link bandwidth: `unlimited` (or `0`), or a number with a bit-rate unit
/// `bps`, `Kbps`, `Mbps`, `Gbps` (also `bit/s`, `Mbit/s`, ...; decimal units, as
/// network links are quoted), or a byte rate `B/s`, `MB/s`, `GB/s`. Returns bytes per
/// second.
pub fn parse_bandwidth(text: &str) -> Result<u64, ArrayError> {
    let t = text.trim().to_ascii_lowercase();
    let bad = || {
        ArrayError::Other(format!(
        "bandwidth {text:?}: use unlimited, or a number with bps, Kbps, Mbps, Gbps (bits) or B/s, MB/s, GB/s (bytes)"
    ))
    };
    if t == "unlimited" || t == "0" {
        return Ok(0);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let unit = unit.trim();
    let (scale, bits) = match unit {
        "bps" | "bit/s" => (1.0, true),
        "kbps" | "kbit/s" => (1e3, true),
        "mbps" | "mbit/s" => (1e6, true),
        "gbps" | "gbit/s" => (1e9, true),
        "b/s" => (1.0, false),
        "kb/s" => (1e3, false),
        "mb/s" => (1e6, false),
        "gb/s" => (1e9, false),
        _ => return Err(bad()),
    };
    let bytes = n * scale / if bits { 8.0 } else { 1.0 };
    if !bytes.is_finite() || bytes < 1.0 || bytes > BANDWIDTH_MAX_BYTES_PER_SEC as f64 {
        return Err(ArrayError::OutOfRange {
            what: "bandwidth (bytes/s)",
            value: bytes.max(0.0) as u64,
            min: 1,
            max: BANDWIDTH_MAX_BYTES_PER_SEC,
        });
    }
    Ok(bytes.round() as u64)
}

/// Bytes one link carried, by direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkBytes {
    /// Out of the node (member or host) onto the switch.
    pub egress: u64,
    /// From the switch into the node.
    pub ingress: u64,
}

/// A snapshot of [`LinkStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    pub host: LinkBytes,
    pub members: Vec<LinkBytes>,
    /// Device-to-device copies and their bytes.
    pub d2d_copies: u64,
    pub d2d_bytes: u64,
    /// Host-mediated member-to-member copies and their bytes.
    pub host_copies: u64,
    pub host_copy_bytes: u64,
}

/// Live per-link byte counters, shared by an array's threads.
#[derive(Debug)]
pub struct LinkStats {
    host: [AtomicU64; 2],
    members: Vec<[AtomicU64; 2]>,
    d2d: [AtomicU64; 2],
    host_copy: [AtomicU64; 2],
}

impl LinkStats {
    pub fn new(members: usize) -> LinkStats {
        LinkStats {
            host: Default::default(),
            members: (0..members).map(|_| Default::default()).collect(),
            d2d: Default::default(),
            host_copy: Default::default(),
        }
    }

    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// The host read `bytes` from member `m`.
    pub fn host_read(&self, m: u16, bytes: u64) {
        Self::add(&self.members[usize::from(m)][0], bytes);
        Self::add(&self.host[1], bytes);
    }

    /// The host wrote `bytes` to member `m`.
    pub fn host_write(&self, m: u16, bytes: u64) {
        Self::add(&self.host[0], bytes);
        Self::add(&self.members[usize::from(m)][1], bytes);
    }

    /// Member `from` sent `bytes` straight to member `to`.
    pub fn d2d(&self, from: u16, to: u16, bytes: u64) {
        Self::add(&self.members[usize::from(from)][0], bytes);
        Self::add(&self.members[usize::from(to)][1], bytes);
        Self::add(&self.d2d[0], 1);
        Self::add(&self.d2d[1], bytes);
    }

    /// `bytes` went from member `from` to member `to` through the host.
    pub fn host_copy(&self, from: u16, to: u16, bytes: u64) {
        self.host_read(from, bytes);
        self.host_write(to, bytes);
        Self::add(&self.host_copy[0], 1);
        Self::add(&self.host_copy[1], bytes);
    }

    /// The counters now.
    pub fn snapshot(&self) -> LinkCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let pair = |p: &[AtomicU64; 2]| LinkBytes {
            egress: get(&p[0]),
            ingress: get(&p[1]),
        };
        LinkCounters {
            host: pair(&self.host),
            members: self.members.iter().map(pair).collect(),
            d2d_copies: get(&self.d2d[0]),
            d2d_bytes: get(&self.d2d[1]),
            host_copies: get(&self.host_copy[0]),
            host_copy_bytes: get(&self.host_copy[1]),
        }
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for c in self
            .host
            .iter()
            .chain(self.members.iter().flatten())
            .chain(&self.d2d)
            .chain(&self.host_copy)
        {
            c.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("1Gbps").unwrap(), 125_000_000);
        assert_eq!(parse_bandwidth("20 Mbps").unwrap(), 2_500_000);
        assert_eq!(parse_bandwidth("40gbit/s").unwrap(), 5_000_000_000);
        assert_eq!(parse_bandwidth("3GB/s").unwrap(), 3_000_000_000);
        assert_eq!(parse_bandwidth("unlimited").unwrap(), 0);
        assert!(parse_bandwidth("fast").is_err());
        assert!(parse_bandwidth("5 furlongs").is_err());
        assert!(matches!(
            parse_bandwidth("9000GB/s"),
            Err(ArrayError::OutOfRange { .. })
        ));
    }

    #[test]
    fn d2d_crosses_host_link_never_host_copy_twice() {
        let s = LinkStats::new(2);
        s.d2d(0, 1, 100);
        s.host_copy(0, 1, 100);
        let c = s.snapshot();
        assert_eq!(c.host.ingress, 100);
        assert_eq!(c.host.egress, 100);
        assert_eq!(c.members[0].egress, 200);
        assert_eq!(c.members[1].ingress, 200);
        assert_eq!((c.d2d_copies, c.d2d_bytes), (1, 100));
        assert_eq!((c.host_copies, c.host_copy_bytes), (1, 100));
        let m = LinkModel::uniform(125_000_000);
        assert_eq!(m.d2d_ns(125_000_000), 10_000 + 1_000_000_000);
        assert_eq!(m.host_copy_ns(125_000_000), 2 * (10_000 + 1_000_000_000));
    }

    #[test]
    fn a_profiles_links_and_the_old_description_format() {
        let p = PerfModel {
            link_bytes_per_sec: 3_000_000_000,
            link_latency_ns: 12_000,
            d2d_bytes_per_sec: 125_000_000,
            d2d_latency_ns: 50_000,
            ..PerfModel::unthrottled()
        };
        let l = LinkModel::from_perf(&p);
        assert_eq!(
            (l.host_bytes_per_sec, l.member_bytes_per_sec),
            (3_000_000_000, 125_000_000)
        );
        assert_eq!(
            l.d2d_ns(125_000_000),
            50_000 + 1_000_000_000,
            "D2D: its own link"
        );
        assert_eq!(
            l.host_transfer_ns(0),
            12_000,
            "host commands: the host link's"
        );
        assert!(l.check().is_ok());
        assert!(matches!(
            LinkModel::uniform(0)
                .with_latency(COMMAND_LATENCY_MAX_NS + 1)
                .check(),
            Err(ArrayError::OutOfRange {
                what: "command latency (ns)",
                ..
            })
        ));
        // An array.json written before the D2D latency existed.
        let old: LinkModel = serde_json::from_str(
            r#"{"host_bytes_per_sec":0,"member_bytes_per_sec":0,"command_latency_ns":7}"#,
        )
        .unwrap();
        assert_eq!(old.d2d_latency_ns, COMMAND_LATENCY_DEFAULT_NS);
    }
}
