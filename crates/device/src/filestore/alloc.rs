//! The free-space allocator: which blocks of the namespace no file maps.
//!
//! The free space is a set of maximal runs of free blocks, indexed twice: by start (to
//! coalesce neighbours and to extend a file in place) and by (length, start) (to find the
//! largest run). It is never stored: the file store derives it at open as the complement
//! of every committed extent, so it cannot disagree with the metadata.
//!
//! Policy, aiming at few, large extents per file:
//! 1. Extend in place: if the run starting at the hint (the block after the file's
//!    preceding extent) is free, take from it.
//! 2. Otherwise worst fit: take from the largest free run. When that run follows some
//!    allocated block, start [`GROWTH_RESERVE_BLOCKS`] in (at most half the slack), so the
//!    file before it can still grow in place; two files appended in turn then interleave in
//!    runs of about a megabyte rather than block by block.
//! 3. If the largest run is too small, take all of it and repeat: the fewest extents a
//!    greedy choice gives.
//!
//! Invariants: runs are non-empty, disjoint, never adjacent (always coalesced) and inside
//! `[0, total_blocks)`; `free_blocks` is the sum of their lengths; both indexes hold the
//! same runs.

use std::collections::{BTreeMap, BTreeSet};

/// Blocks left free in front of a new extent placed after another file's blocks, for that
/// file to grow into: 1 MiB of 4 KiB blocks.
pub const GROWTH_RESERVE_BLOCKS: u64 = 256;

/// A run of blocks of the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockRange {
    pub start: u64,
    pub count: u64,
}

impl BlockRange {
    pub fn end(&self) -> u64 {
        self.start + self.count
    }
}

/// A used range overlaps another or leaves the namespace (only from corrupt metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverlapError {
    pub range: BlockRange,
}

#[derive(Debug)]
pub struct Allocator {
    total_blocks: u64,
    free_blocks: u64,
    by_start: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
}

impl Allocator {
    /// The free space of a namespace of `total_blocks` where exactly `used` is allocated.
    /// `used` is sorted here; an overlap or a range past the end is reported.
    pub fn from_used(total_blocks: u64, mut used: Vec<BlockRange>) -> Result<Self, OverlapError> {
        used.sort_unstable();
        let mut alloc = Allocator {
            total_blocks,
            free_blocks: 0,
            by_start: BTreeMap::new(),
            by_len: BTreeSet::new(),
        };
        let mut cursor = 0u64;
        for range in used {
            let end = range.start.checked_add(range.count);
            if range.count == 0 || range.start < cursor || end.is_none_or(|e| e > total_blocks) {
                return Err(OverlapError { range });
            }
            if range.start > cursor {
                alloc.insert_run(cursor, range.start - cursor);
            }
            cursor = range.end();
        }
        if cursor < total_blocks {
            alloc.insert_run(cursor, total_blocks - cursor);
        }
        Ok(alloc)
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    /// Length of the largest free run.
    #[cfg(test)]
    pub fn largest_run(&self) -> u64 {
        self.by_len.last().map_or(0, |&(len, _)| len)
    }

    /// Allocates `count` blocks as one or more runs, in file order. The caller checks
    /// `count <= free_blocks()` first; this never fails then.
    pub fn allocate(&mut self, count: u64, hint: Option<u64>) -> Vec<BlockRange> {
        assert!(count <= self.free_blocks, "allocation beyond free space");
        let mut out: Vec<BlockRange> = Vec::new();
        let mut left = count;
        if let Some(hint) = hint {
            if let Some(&len) = self.by_start.get(&hint) {
                let n = len.min(left);
                self.take(hint, n);
                out.push(BlockRange {
                    start: hint,
                    count: n,
                });
                left -= n;
            }
        }
        while left > 0 {
            let &(len, run_start) = self.by_len.last().expect("free space was checked");
            let (start, n) = if len >= left {
                let reserve = if run_start > 0 {
                    GROWTH_RESERVE_BLOCKS.min((len - left) / 2)
                } else {
                    0
                };
                (run_start + reserve, left)
            } else {
                (run_start, len)
            };
            self.take(start, n);
            match out.last_mut() {
                Some(prev) if prev.end() == start => prev.count += n,
                _ => out.push(BlockRange { start, count: n }),
            }
            left -= n;
        }
        out
    }

    /// Returns a range to the free space, coalescing with its neighbours.
    pub fn release(&mut self, range: BlockRange) {
        assert!(range.count > 0);
        assert!(range.end() <= self.total_blocks);
        let mut start = range.start;
        let mut count = range.count;
        if let Some((&prev_start, &prev_len)) = self.by_start.range(..start).next_back() {
            assert!(prev_start + prev_len <= start, "double free of {range:?}");
            if prev_start + prev_len == start {
                self.remove_run(prev_start, prev_len);
                start = prev_start;
                count += prev_len;
            }
        }
        if let Some((&next_start, &next_len)) = self.by_start.range(range.start..).next() {
            assert!(next_start >= range.end(), "double free of {range:?}");
            if next_start == range.end() {
                self.remove_run(next_start, next_len);
                count += next_len;
            }
        }
        self.insert_run(start, count);
    }

    /// The free runs in block order (for checks).
    #[cfg(test)]
    pub fn runs(&self) -> impl Iterator<Item = BlockRange> + '_ {
        self.by_start
            .iter()
            .map(|(&start, &count)| BlockRange { start, count })
    }

    /// Removes `[start, start + n)` from the free run that contains it.
    fn take(&mut self, start: u64, n: u64) {
        let (&run_start, &run_len) = self
            .by_start
            .range(..=start)
            .next_back()
            .expect("taken blocks are free");
        assert!(start + n <= run_start + run_len, "taken blocks are free");
        self.remove_run(run_start, run_len);
        if start > run_start {
            self.insert_run(run_start, start - run_start);
        }
        let tail = run_start + run_len - (start + n);
        if tail > 0 {
            self.insert_run(start + n, tail);
        }
    }

    fn insert_run(&mut self, start: u64, count: u64) {
        debug_assert!(count > 0);
        self.by_start.insert(start, count);
        self.by_len.insert((count, start));
        self.free_blocks += count;
    }

    fn remove_run(&mut self, start: u64, count: u64) {
        self.by_start.remove(&start);
        self.by_len.remove(&(count, start));
        self.free_blocks -= count;
    }

    /// Asserts the invariants in the module docs (O(n); tests).
    #[cfg(test)]
    pub fn check(&self) {
        assert_eq!(self.by_start.len(), self.by_len.len());
        let mut sum = 0;
        let mut prev_end: Option<u64> = None;
        for run in self.runs() {
            assert!(run.count > 0);
            assert!(run.end() <= self.total_blocks);
            if let Some(prev_end) = prev_end {
                assert!(run.start > prev_end, "runs are disjoint and coalesced");
            }
            assert!(self.by_len.contains(&(run.count, run.start)));
            prev_end = Some(run.end());
            sum += run.count;
        }
        assert_eq!(sum, self.free_blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, count: u64) -> BlockRange {
        BlockRange { start, count }
    }

    #[test]
    fn derives_free_space_from_used_ranges() {
        let alloc = Allocator::from_used(100, vec![r(50, 10), r(0, 5)]).unwrap();
        assert_eq!(alloc.runs().collect::<Vec<_>>(), [r(5, 45), r(60, 40)]);
        assert_eq!(alloc.free_blocks(), 85);
        alloc.check();
        assert!(Allocator::from_used(100, vec![r(0, 5), r(4, 2)]).is_err());
        assert!(Allocator::from_used(100, vec![r(99, 2)]).is_err());
        assert!(Allocator::from_used(100, vec![r(u64::MAX, 2)]).is_err());
        assert!(Allocator::from_used(100, vec![r(3, 0)]).is_err());
    }

    #[test]
    fn extends_at_hint_then_takes_the_largest_run() {
        let mut alloc = Allocator::from_used(1000, vec![r(0, 10), r(20, 10)]).unwrap();
        // Free: [10, 20) and [30, 1000).
        assert_eq!(alloc.allocate(4, Some(10)), [r(10, 4)]);
        // The hint run is too short: the rest comes from the largest run, past a reserve.
        let got = alloc.allocate(10, Some(14));
        assert_eq!(got[0], r(14, 6));
        assert_eq!(got[1], r(30 + GROWTH_RESERVE_BLOCKS, 4));
        alloc.check();
    }

    #[test]
    fn first_allocation_starts_at_block_zero_and_grows_in_place() {
        let mut alloc = Allocator::from_used(100, vec![]).unwrap();
        assert_eq!(alloc.allocate(3, None), [r(0, 3)]);
        assert_eq!(alloc.allocate(3, Some(3)), [r(3, 3)]);
        // Another file: placed half way into the slack (less than the full reserve).
        assert_eq!(alloc.allocate(2, None), [r(6 + 46, 2)]);
        alloc.check();
    }

    #[test]
    fn spans_several_runs_when_no_run_is_large_enough() {
        let mut alloc =
            Allocator::from_used(100, vec![r(10, 10), r(30, 10), r(50, 10), r(70, 30)]).unwrap();
        // Free: [0,10) [20,30) [40,50) [60,70).
        let got = alloc.allocate(25, None);
        assert_eq!(got.iter().map(|x| x.count).sum::<u64>(), 25);
        assert_eq!(got.len(), 3);
        assert_eq!(alloc.free_blocks(), 15);
        alloc.check();
    }

    #[test]
    fn release_coalesces() {
        let mut alloc = Allocator::from_used(30, vec![r(0, 30)]).unwrap();
        alloc.release(r(10, 5));
        alloc.release(r(20, 5));
        alloc.release(r(15, 5));
        assert_eq!(alloc.runs().collect::<Vec<_>>(), [r(10, 15)]);
        alloc.release(r(0, 10));
        alloc.release(r(25, 5));
        assert_eq!(alloc.runs().collect::<Vec<_>>(), [r(0, 30)]);
        assert_eq!(alloc.largest_run(), 30);
        alloc.check();
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_a_programmer_error() {
        let mut alloc = Allocator::from_used(30, vec![r(0, 10)]).unwrap();
        alloc.release(r(5, 10));
    }
}
