//! Host-side reference implementations of the SDK's programs.
//!
//! Each function computes, from the same input bytes and the same [`Invocation`], the
//! bytes the program leaves in its output and the r0 it returns, errors included (a
//! missing or short output window, bad parameters). The equivalence tests compare the
//! device's interpreter and JIT against these exactly, and the benchmarks time them as
//! "native on the host". They are written for clarity, not speed, except where a
//! benchmark would otherwise be unfair (the loops are plain slices and iterators that
//! the compiler vectorises).
//!
//! Each function's contract is the header comment of `sdk/programs/<name>.c`.

use csx_proto::abi::cmp;
use csx_proto::errno::{CSX_EINVAL, CSX_ENOSPC};

use crate::workloads::{Invocation, Outcome};

/// Entries knn keeps at most (`KNN_K_MAX` in knn.c).
pub const KNN_K_MAX: u32 = 1024;

/// Bytes of a grep pattern at most (`GREP_PATTERN_SIZE_MAX` in grep.c).
pub const GREP_PATTERN_SIZE_MAX: usize = 255;

/// Bytes of the `{ count, sum, min, max }` record of stats64, stats32, aggregate and
/// filter_aggregate.
pub const STATS_SIZE_BYTES: usize = 32;

fn error(code: i64) -> Outcome {
    Outcome {
        r0: code,
        output: Vec::new(),
    }
}

fn u64s(input: &[u8]) -> impl Iterator<Item = u64> + '_ {
    input
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
}

fn u32s(input: &[u8]) -> impl Iterator<Item = u32> + '_ {
    input
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("chunks of 4")))
}

/// `{ count, sum, min, max }` of the values, as the programs lay it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub count: u64,
    pub sum: u64,
    pub min: u64,
    pub max: u64,
}

impl Stats {
    pub const EMPTY: Stats = Stats {
        count: 0,
        sum: 0,
        min: u64::MAX,
        max: 0,
    };

    pub fn add(&mut self, x: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(x);
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    /// Combines the statistics of two parts of one input.
    pub fn merge(self, other: Stats) -> Stats {
        Stats {
            count: self.count + other.count,
            sum: self.sum.wrapping_add(other.sum),
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }

    pub fn to_bytes(self) -> Vec<u8> {
        [self.count, self.sum, self.min, self.max]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// Parses a program's 32-byte record.
    pub fn from_bytes(bytes: &[u8]) -> Option<Stats> {
        if bytes.len() != STATS_SIZE_BYTES {
            return None;
        }
        let mut v = u64s(bytes);
        Some(Stats {
            count: v.next()?,
            sum: v.next()?,
            min: v.next()?,
            max: v.next()?,
        })
    }
}

fn stats_outcome(inv: &Invocation, stats: impl FnOnce() -> Stats) -> Outcome {
    if inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    if inv.output_size_bytes < STATS_SIZE_BYTES as u64 {
        return error(CSX_ENOSPC);
    }
    Outcome {
        r0: STATS_SIZE_BYTES as i64,
        output: stats().to_bytes(),
    }
}

/// stats64.c.
pub fn stats64(input: &[u8], inv: &Invocation) -> Outcome {
    stats_outcome(inv, || {
        let mut s = Stats::EMPTY;
        u64s(input).for_each(|x| s.add(x));
        s
    })
}

/// stats32.c.
pub fn stats32(input: &[u8], inv: &Invocation) -> Outcome {
    stats_outcome(inv, || {
        let mut s = Stats::EMPTY;
        u32s(input).for_each(|x| s.add(u64::from(x)));
        s
    })
}

/// aggregate.c (the same record as stats64).
pub fn aggregate(input: &[u8], inv: &Invocation) -> Outcome {
    stats64(input, inv)
}

/// filter_aggregate.c. Branch-free, as a tuned host loop would be: the Metal FS paper's
/// point is that a branchy CPU filter slows down at middling selectivity.
pub fn filter_aggregate(input: &[u8], inv: &Invocation) -> Outcome {
    let (lo, hi) = (inv.cparam1, inv.cparam2);
    stats_outcome(inv, || {
        let (mut count, mut sum, mut min, mut max) = (0u64, 0u64, u64::MAX, 0u64);
        for x in u64s(input) {
            let keep = u64::from(lo <= x && x <= hi);
            let mask = keep.wrapping_neg();
            count += keep;
            sum = sum.wrapping_add(x & mask);
            min = min.min(x | !mask);
            max = max.max(x & mask);
        }
        Stats {
            count,
            sum,
            min,
            max,
        }
    })
}

/// filter.c.
pub fn filter(input: &[u8], inv: &Invocation) -> Outcome {
    if inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    let (lo, hi) = (inv.cparam1, inv.cparam2);
    let kept: Vec<u64> = u64s(input).filter(|x| lo <= *x && *x <= hi).collect();
    // The program fails on the first value past the window's capacity.
    if kept.len() as u64 > inv.output_size_bytes / 8 {
        return error(CSX_ENOSPC);
    }
    let output: Vec<u8> = kept.iter().flat_map(|x| x.to_le_bytes()).collect();
    Outcome {
        r0: output.len() as i64,
        output,
    }
}

/// The knn parameter block: `{ u32 dim; u32 k; i32 query[dim]; }`.
pub fn knn_params(k: u32, query: &[i32]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + 4 * query.len());
    p.extend_from_slice(&(query.len() as u32).to_le_bytes());
    p.extend_from_slice(&k.to_le_bytes());
    for q in query {
        p.extend_from_slice(&q.to_le_bytes());
    }
    p
}

/// One knn result entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KnnHit {
    pub dist: u64,
    pub index: u64,
}

/// Parses knn's output entries.
pub fn knn_hits(output: &[u8]) -> Vec<KnnHit> {
    let v: Vec<u64> = u64s(output).collect();
    v.chunks_exact(2)
        .map(|c| KnnHit {
            dist: c[0],
            index: c[1],
        })
        .collect()
}

/// knn.c.
pub fn knn(input: &[u8], inv: &Invocation) -> Outcome {
    let p = &inv.params;
    if p.len() < 8 {
        return error(CSX_EINVAL);
    }
    let dim = u32::from_le_bytes(p[0..4].try_into().expect("4 bytes")) as usize;
    let k = u32::from_le_bytes(p[4..8].try_into().expect("4 bytes"));
    if dim == 0 || k == 0 || k > KNN_K_MAX || p.len() < 8 + 4 * dim {
        return error(CSX_EINVAL);
    }
    if inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    let query: Vec<i64> = u32s(&p[8..8 + 4 * dim])
        .map(|q| i64::from(q as i32))
        .collect();
    let n = input.len() / (4 * dim);
    let kept_max = (k as usize).min(n);
    if inv.output_size_bytes < 16 * kept_max as u64 {
        return error(CSX_ENOSPC);
    }
    let mut hits: Vec<KnnHit> = input
        .chunks_exact(4 * dim)
        .enumerate()
        .map(|(i, v)| {
            let dist = u32s(v).zip(&query).fold(0u64, |acc, (x, q)| {
                let diff = (i64::from(x as i32) - q) as u64;
                acc.wrapping_add(diff.wrapping_mul(diff))
            });
            KnnHit {
                dist,
                index: inv.cparam1.wrapping_add(i as u64),
            }
        })
        .collect();
    // Ties go to the lower position in the window (the index may wrap with cparam1).
    // Partition around the k-th, then sort only the k kept: linear in the vectors.
    let mut order: Vec<(u64, usize)> = hits.iter().enumerate().map(|(i, h)| (h.dist, i)).collect();
    if kept_max > 0 && kept_max < order.len() {
        order.select_nth_unstable(kept_max - 1);
    }
    order.truncate(kept_max);
    order.sort_unstable();
    hits = order.into_iter().map(|(_, i)| hits[i]).collect();
    let output: Vec<u8> = hits
        .iter()
        .flat_map(|h| [h.dist.to_le_bytes(), h.index.to_le_bytes()])
        .flatten()
        .collect();
    Outcome {
        r0: output.len() as i64,
        output,
    }
}

/// `{ matching_rows, rows }` from grep's output.
pub fn grep_counts(output: &[u8]) -> Option<(u64, u64)> {
    let v: Vec<u64> = u64s(output).collect();
    match v.as_slice() {
        [hits, rows] => Some((*hits, *rows)),
        _ => None,
    }
}

/// grep.c.
pub fn grep(input: &[u8], inv: &Invocation) -> Outcome {
    let pat = &inv.params;
    if pat.is_empty() || pat.len() > GREP_PATTERN_SIZE_MAX || pat.contains(&b'\n') {
        return error(CSX_EINVAL);
    }
    if inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    if inv.output_size_bytes < 16 {
        return error(CSX_ENOSPC);
    }
    let mut rows: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    // The piece after the last '\n' is a row only if it is not empty.
    if rows.last().is_some_and(|r| r.is_empty()) {
        rows.pop();
    }
    let hits = rows.iter().filter(|r| contains(r, pat)).count() as u64;
    let mut output = hits.to_le_bytes().to_vec();
    output.extend_from_slice(&(rows.len() as u64).to_le_bytes());
    Outcome { r0: 16, output }
}

/// Whether `pattern` (not empty) occurs in `haystack`: candidates found by their first
/// byte, then compared, as grep.c does.
fn contains(haystack: &[u8], pattern: &[u8]) -> bool {
    let first = pattern[0];
    let mut from = 0;
    while let Some(p) = haystack[from..].iter().position(|&b| b == first) {
        let at = from + p;
        if haystack[at..].starts_with(pattern) {
            return true;
        }
        from = at + 1;
    }
    false
}

/// bitmap.c. The output is the whole bitmap, whether the program leaves it in window 1
/// or writes it to a file (params = path).
pub fn bitmap(input: &[u8], inv: &Invocation) -> Outcome {
    if inv.output_size_bytes == 0 || input.len() < 8 {
        return error(CSX_EINVAL);
    }
    let nbits = u64::from_le_bytes(input[..8].try_into().expect("8 bytes"));
    let total = nbits.div_ceil(8);
    let to_file = !inv.params.is_empty();
    if !to_file && inv.output_size_bytes < total {
        return error(CSX_ENOSPC);
    }
    let mut covered = 0u64;
    let mut ones = Vec::new();
    for (r, len) in u32s(&input[8..]).enumerate() {
        let len = u64::from(len);
        if len > nbits - covered {
            return error(CSX_EINVAL);
        }
        if r % 2 == 1 {
            ones.push((covered, len));
        }
        covered += len;
    }
    let mut output = vec![0u8; usize::try_from(total).expect("a bitmap fits in memory")];
    for (start, len) in ones {
        set_bits(&mut output, start, len);
    }
    Outcome {
        r0: total as i64,
        output,
    }
}

/// Sets `len` bits from bit `start`.
fn set_bits(bytes: &mut [u8], start: u64, len: u64) {
    let mut bit = start;
    let end = start + len;
    while bit < end && !bit.is_multiple_of(8) {
        bytes[(bit / 8) as usize] |= 1 << (bit % 8);
        bit += 1;
    }
    while end - bit >= 8 {
        bytes[(bit / 8) as usize] = 0xff;
        bit += 8;
    }
    while bit < end {
        bytes[(bit / 8) as usize] |= 1 << (bit % 8);
        bit += 1;
    }
}

/// file_read.c: `input` is the whole device file; the output is window 0.
pub fn file_read(file: &[u8], inv: &Invocation) -> Outcome {
    if inv.params.is_empty() || inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    let start = usize::try_from(inv.cparam1)
        .unwrap_or(usize::MAX)
        .min(file.len());
    let len =
        (file.len() - start).min(usize::try_from(inv.output_size_bytes).unwrap_or(usize::MAX));
    Outcome {
        r0: len as i64,
        output: file[start..start + len].to_vec(),
    }
}

/// Whether `x OP operand` holds, as the filter functions and the select programs test.
pub fn compare(op: u64, x: u64, operand: u64) -> Option<bool> {
    predicate(op).map(|p| p(x, operand))
}

/// The comparison `op` names, chosen once so a loop does not decide it per value.
fn predicate(op: u64) -> Option<fn(u64, u64) -> bool> {
    Some(match op {
        cmp::CSX_CMP_EQ => |x, a| x == a,
        cmp::CSX_CMP_NE => |x, a| x != a,
        cmp::CSX_CMP_LT => |x, a| x < a,
        cmp::CSX_CMP_LE => |x, a| x <= a,
        cmp::CSX_CMP_GT => |x, a| x > a,
        cmp::CSX_CMP_GE => |x, a| x >= a,
        _ => return None,
    })
}

/// select_poslist.c.
pub fn select_poslist(input: &[u8], inv: &Invocation) -> Outcome {
    let Some(pred) = predicate(inv.cparam1) else {
        return error(CSX_EINVAL);
    };
    if inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    let a = inv.cparam2;
    let positions: Vec<u32> = u32s(input)
        .enumerate()
        .filter(|&(_, x)| pred(u64::from(x), a))
        .map(|(i, _)| i as u32)
        .collect();
    // The program fails on the first position past the window's capacity.
    if positions.len() as u64 > inv.output_size_bytes / 4 {
        return error(CSX_ENOSPC);
    }
    let output: Vec<u8> = positions.iter().flat_map(|p| p.to_le_bytes()).collect();
    Outcome {
        r0: output.len() as i64,
        output,
    }
}

/// select_bitmask.c and select_accel.c (the same bytes by contract).
pub fn select_bitmask(input: &[u8], inv: &Invocation) -> Outcome {
    if inv.output_size_bytes == 0 {
        return error(CSX_EINVAL);
    }
    let n = input.len() / 4;
    let bytes = n.div_ceil(8);
    if inv.output_size_bytes < bytes as u64 {
        return error(CSX_ENOSPC);
    }
    let Some(pred) = predicate(inv.cparam1) else {
        return error(CSX_EINVAL);
    };
    let a = inv.cparam2;
    let output: Vec<u8> = input[..4 * n]
        .chunks(32)
        .map(|eight| {
            u32s(eight)
                .enumerate()
                .fold(0u8, |b, (t, x)| b | (u8::from(pred(u64::from(x), a)) << t))
        })
        .collect();
    debug_assert_eq!(output.len(), bytes);
    Outcome {
        r0: bytes as i64,
        output,
    }
}

/// select_accel.c.
pub fn select_accel(input: &[u8], inv: &Invocation) -> Outcome {
    select_bitmask(input, inv)
}

/// The positions a bitmask selects, ascending: turns a bitmask result into a position
/// list so the three select programs can be compared.
pub fn bitmask_positions(bitmask: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    for (byte_idx, &b) in bitmask.iter().enumerate() {
        for bit in 0..8 {
            if b & (1 << bit) != 0 {
                out.push((byte_idx * 8 + bit) as u32);
            }
        }
    }
    out
}

/// The positions of a position-list result.
pub fn poslist_positions(output: &[u8]) -> Vec<u32> {
    u32s(output).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(output_size_bytes: u64) -> Invocation {
        Invocation {
            output_size_bytes,
            ..Invocation::default()
        }
    }

    fn le64(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn stats_of_values_and_of_nothing() {
        let out = stats64(&le64(&[5, 1, 9]), &inv(32));
        assert_eq!(out.r0, 32);
        assert_eq!(
            Stats::from_bytes(&out.output),
            Some(Stats {
                count: 3,
                sum: 15,
                min: 1,
                max: 9
            })
        );
        let empty = stats32(&[1, 2, 3], &inv(64));
        assert_eq!(Stats::from_bytes(&empty.output), Some(Stats::EMPTY));
        assert_eq!(stats64(&[], &inv(31)).r0, CSX_ENOSPC);
        assert_eq!(stats64(&[], &inv(0)).r0, CSX_EINVAL);
    }

    #[test]
    fn filter_keeps_inclusive_bounds_and_reports_a_full_window() {
        let input = le64(&[1, 5, 7, 10, 11]);
        let i = Invocation {
            cparam1: 5,
            cparam2: 10,
            output_size_bytes: 40,
            ..Invocation::default()
        };
        let out = filter(&input, &i);
        assert_eq!(out.output, le64(&[5, 7, 10]));
        let small = Invocation {
            output_size_bytes: 16,
            ..i.clone()
        };
        assert_eq!(filter(&input, &small).r0, CSX_ENOSPC);
        let fused = filter_aggregate(&input, &i);
        assert_eq!(fused.output, aggregate(&out.output, &i).output);
    }

    #[test]
    fn knn_keeps_the_nearest_with_ties_by_index() {
        let query = [0i32, 0];
        let vectors: Vec<u8> = [[3i32, 4], [1, 1], [-1, -1], [10, 0]]
            .iter()
            .flatten()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let i = Invocation {
            cparam1: 100,
            params: knn_params(3, &query),
            output_size_bytes: 48,
            ..Invocation::default()
        };
        let out = knn(&vectors, &i);
        assert_eq!(out.r0, 48);
        let hits = knn_hits(&out.output);
        assert_eq!(
            hits,
            [
                KnnHit {
                    dist: 2,
                    index: 101
                },
                KnnHit {
                    dist: 2,
                    index: 102
                },
                KnnHit {
                    dist: 25,
                    index: 100
                }
            ]
        );
    }

    #[test]
    fn grep_counts_rows() {
        let i = Invocation {
            params: b"ab".to_vec(),
            output_size_bytes: 16,
            ..Invocation::default()
        };
        let out = grep(b"xxab\nab\n\nzz\nqab", &i);
        assert_eq!(grep_counts(&out.output), Some((3, 5)));
        let out = grep(b"a\nb\n", &i);
        assert_eq!(grep_counts(&out.output), Some((0, 2)));
    }

    #[test]
    fn bitmap_decompresses_runs() {
        let mut input = 20u64.to_le_bytes().to_vec();
        for run in [3u32, 10, 1] {
            input.extend_from_slice(&run.to_le_bytes());
        }
        let out = bitmap(&input, &inv(3));
        assert_eq!(out.r0, 3);
        // Bits 3..13 set.
        assert_eq!(out.output, [0b1111_1000, 0b0001_1111, 0]);
        assert_eq!(bitmap(&input, &inv(2)).r0, CSX_ENOSPC);
        let mut bad = 4u64.to_le_bytes().to_vec();
        bad.extend_from_slice(&5u32.to_le_bytes());
        assert_eq!(bitmap(&bad, &inv(8)).r0, CSX_EINVAL);
    }

    #[test]
    fn select_three_ways_agree() {
        let input: Vec<u8> = [4u32, 9, 2, 9, 0, 7, 9, 1, 9]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let i = Invocation {
            cparam1: cmp::CSX_CMP_GE,
            cparam2: 7,
            output_size_bytes: 64,
            ..Invocation::default()
        };
        let pos = select_poslist(&input, &i);
        let mask = select_bitmask(&input, &i);
        assert_eq!(poslist_positions(&pos.output), [1, 3, 5, 6, 8]);
        assert_eq!(bitmask_positions(&mask.output), [1, 3, 5, 6, 8]);
        assert_eq!(mask.r0, 2);
    }
}
