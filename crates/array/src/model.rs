//! Modelled time of a distributed merge sort, and the thesis's calibration.
//!
//! A sort's modelled time is computed from its log of sub-operations
//! ([`crate::SortEvent`]: who sorted how many bytes, which run moved where in which
//! merge round, how many bytes each merge produced) and a [`SortModel`], never from a
//! measured time, so it is the same on every machine. The composition follows the
//! thesis's own description (§4.1-4.2, §6.2.1):
//!
//! ```text
//!   sort phase   = max over members  (L + part/Rs + σ·part/B)            disks in parallel
//!   merge round  = transfers + max over merges of the round (L + out/Rm + φ·out/B)
//!     transfers  = instant: max over the round's D2D copies (L + run/B)   one link crossing
//!                  host:    sum over the round's copies 2·(L + run/B)     host link twice,
//!                                                                          one disk at a time
//!   read back    = L + output/B
//!   total        = sort phase + sum of merge rounds + read back
//! ```
//!
//! L is the command latency, B the link bandwidth, Rs and Rm the devices' sort and merge
//! rates, σ and φ the link passes of the sort's and the merge's own I/O (the thesis's
//! Harvest reads its input through COSTA and merges through a temporary file system and
//! `dd`; what these cost on its AWS testbed is not stated).
//!
//! **Calibration.** The thesis gives no absolute runtime, rate or latency: only six
//! gains (its Fig. 5.4). [`SortModel::thesis`]'s four constants (Rs = 400 MB/s,
//! Rm = 200 MB/s, σ = 4, φ = 1.375) are the best fit of this formula to those six numbers
//! on a grid search (largest error 0.69 percentage points), with L = 10 µs. They are a
//! fit, not a measurement: four parameters on six targets.

use serde::Serialize;

use crate::array::stripe_piece_lens;
use crate::link::LinkModel;
use crate::sort::{SortEvent, SortMode, Topology};

/// What a modelled sort costs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SortModel {
    pub link: LinkModel,
    /// Device sort rate, bytes per second of input (0: free).
    pub sort_bytes_per_sec: u64,
    /// Device merge rate, bytes per second of output (0: free).
    pub merge_bytes_per_sec: u64,
    /// Times a sort's part crosses its member's link, in thousandths.
    pub sort_link_passes_milli: u64,
    /// Times a merge's output crosses the merging member's link, in thousandths.
    pub merge_link_passes_milli: u64,
}

impl SortModel {
    /// The calibration on the thesis's six gains (module doc), every link at
    /// `bytes_per_sec` (0: unlimited).
    pub fn thesis(bytes_per_sec: u64) -> SortModel {
        SortModel {
            link: LinkModel::uniform(bytes_per_sec),
            sort_bytes_per_sec: 400_000_000,
            merge_bytes_per_sec: 200_000_000,
            sort_link_passes_milli: 4000,
            merge_link_passes_milli: 1375,
        }
    }
}

/// A sort's modelled time, by phase, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ModelledSort {
    pub sort_ns: u64,
    pub merge_ns: u64,
    /// Of `merge_ns`: the transfers of runs between members.
    pub transfer_ns: u64,
    pub read_back_ns: u64,
    pub total_ns: u64,
}

fn rate_ns(bytes: u64, per_sec: u64) -> u64 {
    LinkModel::transfer_ns(bytes, per_sec)
}

fn passes_ns(bytes: u64, passes_milli: u64, per_sec: u64) -> u64 {
    rate_ns(
        ((u128::from(bytes) * u128::from(passes_milli)) / 1000).min(u128::from(u64::MAX)) as u64,
        per_sec,
    )
}

/// Prices a sort's log (module doc).
pub fn price(events: &[SortEvent], mode: SortMode, model: &SortModel) -> ModelledSort {
    let l = model.link.command_latency_ns;
    let b = model.link.member_bytes_per_sec;
    let mut out = ModelledSort::default();
    let mut rounds: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    for e in events {
        match *e {
            SortEvent::Sorted { bytes, .. } => {
                let t = l
                    + rate_ns(bytes, model.sort_bytes_per_sec)
                    + passes_ns(bytes, model.sort_link_passes_milli, b);
                out.sort_ns = out.sort_ns.max(t);
            }
            SortEvent::MergeRead {
                round,
                from,
                into,
                bytes,
            } if from != into => {
                let r = rounds.entry(round).or_default();
                match mode {
                    SortMode::Instant => r.0 = r.0.max(model.link.d2d_ns(bytes)),
                    SortMode::Host => r.0 += model.link.host_copy_ns(bytes),
                }
            }
            SortEvent::Merged { round, bytes, .. } => {
                let t = l
                    + rate_ns(bytes, model.merge_bytes_per_sec)
                    + passes_ns(bytes, model.merge_link_passes_milli, b);
                let r = rounds.entry(round).or_default();
                r.1 = r.1.max(t);
            }
            SortEvent::Committed { bytes, .. } => {
                out.read_back_ns = model.link.host_transfer_ns(bytes);
            }
            _ => {}
        }
    }
    for (transfer, merge) in rounds.values() {
        out.transfer_ns += transfer;
        out.merge_ns += transfer + merge;
    }
    out.total_ns = out.sort_ns + out.merge_ns + out.read_back_ns;
    out
}

/// The stripe a sort benchmark puts `size` bytes over `n` members with: each member
/// an equal part, in whole 4 KiB blocks.
pub fn even_stripe(size: u64, n: usize) -> u64 {
    size.div_ceil(n as u64).div_ceil(4096).max(1) * 4096
}

/// The log a sort of parts `parts` (member, bytes; in member order) produces, in a
/// canonical order: what [`crate::sort`] emits, without running it.
pub fn plan(parts: &[(u16, u64)], topology: Topology) -> Vec<SortEvent> {
    let mut ev = vec![SortEvent::Submitted { parts: parts.len() }];
    ev.extend(
        parts
            .iter()
            .map(|&(member, bytes)| SortEvent::Sorted { member, bytes }),
    );
    let total: u64 = parts.iter().map(|p| p.1).sum();
    let last = match topology {
        Topology::Chain => {
            let t = parts[0].0;
            let mut acc = 0;
            for (k, &(m, len)) in parts.iter().enumerate() {
                ev.push(SortEvent::MergeRead {
                    round: k as u32,
                    from: m,
                    into: t,
                    bytes: len,
                });
                if acc > 0 {
                    ev.push(SortEvent::Merged {
                        round: k as u32,
                        into: t,
                        bytes: acc + len,
                    });
                }
                acc += len;
            }
            t
        }
        Topology::Tree => plan_tree(parts, &mut ev),
        Topology::Multiway => {
            // The slices a multiway merge cuts depend on the keys; this is what uniform
            // keys give on average: member k's slice takes from every run its share.
            let n = parts.len() as u64;
            let stripe = (total / 8).div_ceil(n).max(1) * 8;
            for (k, &(m, _)) in parts.iter().enumerate() {
                let slice = stripe.min(total.saturating_sub(k as u64 * stripe));
                for &(from, len) in parts {
                    let bytes = if total == 0 {
                        0
                    } else {
                        (u128::from(len) * u128::from(slice) / u128::from(total)) as u64
                    };
                    if from != m {
                        ev.push(SortEvent::MergeRead {
                            round: 1,
                            from,
                            into: m,
                            bytes,
                        });
                    }
                }
                ev.push(SortEvent::Merged {
                    round: 1,
                    into: m,
                    bytes: slice,
                });
            }
            parts[0].0
        }
    };
    ev.push(SortEvent::Committed {
        member: last,
        bytes: total,
    });
    ev
}

/// The tree's merge events (see [`plan`]); returns the member holding the result.
fn plan_tree(parts: &[(u16, u64)], ev: &mut Vec<SortEvent>) -> u16 {
    for &(m, len) in parts {
        ev.push(SortEvent::MergeRead {
            round: 0,
            from: m,
            into: m,
            bytes: len,
        });
    }
    let mut runs: Vec<(u16, u64)> = parts.to_vec();
    let mut round = 0;
    while runs.len() > 1 {
        round += 1;
        let mut next = Vec::new();
        for pair in runs.chunks(2) {
            match *pair {
                [(am, alen), (bm, blen)] => {
                    ev.push(SortEvent::MergeRead {
                        round,
                        from: bm,
                        into: am,
                        bytes: blen,
                    });
                    ev.push(SortEvent::Merged {
                        round,
                        into: am,
                        bytes: alen + blen,
                    });
                    next.push((am, alen + blen));
                }
                [one] => next.push(one),
                _ => unreachable!("chunks of at most two"),
            }
        }
        runs = next;
    }
    runs[0].0
}

/// The parts a striped put of `size` bytes over `n` members at [`even_stripe`] gives.
pub fn even_parts(size: u64, n: usize) -> Vec<(u16, u64)> {
    stripe_piece_lens(size, n, even_stripe(size, n))
        .into_iter()
        .enumerate()
        .filter(|&(_, len)| len > 0)
        .map(|(m, len)| (m as u16, len))
        .collect()
}

/// The thesis's six gains (Fig. 5.4): (disks, Gbit/s, % gain of INSTANT over OAS) for
/// a 512 MB merge sort.
pub const THESIS_GAINS: [(usize, u64, f64); 6] = [
    (2, 1, 8.81),
    (4, 1, 8.60),
    (8, 1, 7.80),
    (2, 10, 4.20),
    (4, 10, 2.84),
    (8, 10, 2.65),
];

/// The modelled gain (%) of instant over host for a chain sort of `size` bytes over
/// `disks` members at `bytes_per_sec`, from the plan.
pub fn modelled_gain(size: u64, disks: usize, model: &SortModel) -> f64 {
    let ev = plan(&even_parts(size, disks), Topology::Chain);
    let host = price(&ev, SortMode::Host, model).total_ns as f64;
    let instant = price(&ev, SortMode::Instant, model).total_ns as f64;
    100.0 * (host - instant) / host
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calibration_reproduces_the_thesis_within_two_points() {
        for (disks, gbps, thesis) in THESIS_GAINS {
            let model = SortModel::thesis(gbps * 125_000_000);
            let g = modelled_gain(512 << 20, disks, &model);
            assert!(
                (g - thesis).abs() < 2.0,
                "{disks} disks at {gbps} Gbit/s: modelled {g:.2}%, thesis {thesis}%"
            );
        }
    }

    #[test]
    fn instant_saves_exactly_the_second_host_crossing() {
        // Chain over 2 disks of 1 MB at 1 Gbit/s: instant saves one crossing of the
        // moved run (512 KB) plus one command.
        let model = SortModel::thesis(125_000_000);
        let ev = plan(&[(0, 512 << 10), (1, 512 << 10)], Topology::Chain);
        let h = price(&ev, SortMode::Host, &model);
        let i = price(&ev, SortMode::Instant, &model);
        assert_eq!(h.sort_ns, i.sort_ns);
        assert_eq!(h.read_back_ns, i.read_back_ns);
        assert_eq!(
            h.total_ns - i.total_ns,
            model.link.host_copy_ns(512 << 10) - model.link.d2d_ns(512 << 10)
        );
        // Unlimited links: only the command latency differs.
        let free = SortModel::thesis(0);
        let d = price(&ev, SortMode::Host, &free).total_ns
            - price(&ev, SortMode::Instant, &free).total_ns;
        assert_eq!(d, free.link.command_latency_ns);
    }
}
