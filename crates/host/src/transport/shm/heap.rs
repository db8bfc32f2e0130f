//! The host's allocator over its host memory: first fit over a map of free runs,
//! coalescing on free.
//!
//! First fit keeps the allocations at the low end of the heap, so the pages a busy
//! client touches stay few and warm.
//!
//! Invariants: free runs and allocations are disjoint, [`HEAP_ALIGNMENT`]-aligned, and
//! together tile the heap exactly; adjacent free runs are always merged.

use std::collections::BTreeMap;

use super::HEAP_ALIGNMENT;

/// A range of host memory: region offset and length (rounded up to the alignment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub offset: u64,
    pub len: u64,
}

/// Free runs of the heap (see the module doc).
#[derive(Debug)]
pub struct Heap {
    /// Offset → length of each free run.
    free: BTreeMap<u64, u64>,
    start: u64,
    size: u64,
    free_bytes: u64,
}

impl Heap {
    /// A heap of `size` bytes from region offset `start` (both aligned).
    pub fn new(start: u64, size: u64) -> Heap {
        assert_eq!(start % HEAP_ALIGNMENT, 0);
        assert_eq!(size % HEAP_ALIGNMENT, 0);
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(start, size);
        }
        Heap {
            free,
            start,
            size,
            free_bytes: size,
        }
    }

    /// Bytes of the heap.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes free now.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// `len` bytes (at least one alignment unit), or `None` when no free run is large
    /// enough now.
    pub fn alloc(&mut self, len: u64) -> Option<Block> {
        let len = len.max(1).div_ceil(HEAP_ALIGNMENT) * HEAP_ALIGNMENT;
        let (&offset, &run) = self.free.iter().find(|(_, &run)| run >= len)?;
        self.free.remove(&offset);
        if run > len {
            self.free.insert(offset + len, run - len);
        }
        self.free_bytes -= len;
        Some(Block { offset, len })
    }

    /// Returns `b` (from [`Heap::alloc`] of this heap, not yet freed).
    pub fn free(&mut self, b: Block) {
        assert!(b.offset >= self.start && b.offset + b.len <= self.start + self.size);
        let mut offset = b.offset;
        let mut len = b.len;
        if let Some((&prev, &prev_len)) = self.free.range(..offset).next_back() {
            assert!(prev + prev_len <= offset, "double free of {b:?}");
            if prev + prev_len == offset {
                self.free.remove(&prev);
                offset = prev;
                len += prev_len;
            }
        }
        if let Some((&next, &next_len)) = self.free.range(offset..).next() {
            assert!(b.offset + b.len <= next, "double free of {b:?}");
            if b.offset + b.len == next {
                self.free.remove(&next);
                len += next_len;
            }
        }
        self.free.insert(offset, len);
        self.free_bytes += b.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_first_fit_and_coalesces() {
        let mut h = Heap::new(4096, 64 * 100);
        let a = h.alloc(1).unwrap();
        assert_eq!(
            a,
            Block {
                offset: 4096,
                len: 64
            }
        );
        let b = h.alloc(100).unwrap();
        assert_eq!(b.len, 128);
        let c = h.alloc(64 * 97).unwrap();
        assert!(h.alloc(1).is_none(), "full");
        h.free(b);
        assert_eq!(
            h.alloc(64).unwrap().offset,
            b.offset,
            "first fit reuses the hole"
        );
        h.free(a);
        h.free(c);
        h.free(Block {
            offset: b.offset,
            len: 64,
        });
        assert_eq!(h.free_bytes(), h.size());
        assert_eq!(h.free.len(), 1, "everything merged back");
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let mut h = Heap::new(0, 64 * 4);
        let a = h.alloc(64).unwrap();
        let _b = h.alloc(64).unwrap();
        h.free(a);
        h.free(a);
    }
}
