//! Block checksums: a CRC32C for every mapped namespace block, kept by namespace block.
//!
//! # What a checksum covers
//!
//! The checksum of a block mapped by a file covers the file's bytes in that block: the
//! whole block, except in the file's last block, where it covers the bytes up to the
//! file's size. Bytes past the size are unspecified (module docs of the store) and not
//! covered, so an append into the last block after a flush does not invalidate the
//! durable checksum of the bytes that flush made durable.
//!
//! # Where they live
//!
//! In memory, by namespace block, in groups of [`GROUP_BLOCKS`] (a group exists once one
//! of its blocks has a checksum); in `meta.redb`, in a `block_sums` table from group index
//! to the group's encoding. Changed groups are written by the same transaction that
//! commits the file records, after the image's `fdatasync`, so the durable checksums
//! describe the bytes the durable records map. Keeping them by namespace block means a
//! rename, delete or truncate never moves a checksum; a block freed and reused gets a new
//! one when it is written.
//!
//! A block may have no checksum: every block of an image made before checksums existed
//! (format version 1), until it is rewritten. Such a block reads unverified.
//!
//! # Encoding (value of the `block_sums` table)
//!
//! ```text
//! offset  size   field
//! 0       128    bitmap: bit i (of byte i/8, least significant first) set when block i
//!                of the group has a checksum
//! 128     4096   1024 CRC32C values, little-endian, block i at 128 + 4*i
//! ```

use std::collections::{BTreeMap, BTreeSet};

pub const GROUP_BLOCKS: u64 = 1024;
const BITMAP_BYTES: usize = (GROUP_BLOCKS / 8) as usize;
pub const GROUP_BYTES: usize = BITMAP_BYTES + 4 * GROUP_BLOCKS as usize;

#[derive(Clone)]
pub struct Group {
    known: [u64; (GROUP_BLOCKS / 64) as usize],
    sums: [u32; GROUP_BLOCKS as usize],
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known: u32 = self.known.iter().map(|w| w.count_ones()).sum();
        write!(f, "Group {{ known: {known} }}")
    }
}

impl Group {
    fn empty() -> Group {
        Group {
            known: [0; (GROUP_BLOCKS / 64) as usize],
            sums: [0; GROUP_BLOCKS as usize],
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(GROUP_BYTES);
        for w in &self.known {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for s in &self.sums {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Group, String> {
        if bytes.len() != GROUP_BYTES {
            return Err(format!(
                "checksum group is {} bytes, expected {GROUP_BYTES}",
                bytes.len()
            ));
        }
        let mut g = Group::empty();
        for (w, b) in g
            .known
            .iter_mut()
            .zip(bytes[..BITMAP_BYTES].chunks_exact(8))
        {
            *w = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
        for (s, b) in g.sums.iter_mut().zip(bytes[BITMAP_BYTES..].chunks_exact(4)) {
            *s = u32::from_le_bytes(b.try_into().expect("4 bytes"));
        }
        Ok(g)
    }
}

/// Every block checksum of the store, and the groups changed since the last flush.
#[derive(Debug, Default)]
pub struct BlockSums {
    groups: BTreeMap<u64, Box<Group>>,
    dirty: BTreeSet<u64>,
}

impl BlockSums {
    pub fn from_groups(groups: BTreeMap<u64, Box<Group>>) -> BlockSums {
        BlockSums {
            groups,
            dirty: BTreeSet::new(),
        }
    }

    /// The checksum of namespace block `block`, if it has one.
    pub fn get(&self, block: u64) -> Option<u32> {
        let g = self.groups.get(&(block / GROUP_BLOCKS))?;
        let i = (block % GROUP_BLOCKS) as usize;
        (g.known[i / 64] >> (i % 64) & 1 == 1).then_some(g.sums[i])
    }

    /// Sets the checksum of namespace block `block`.
    pub fn set(&mut self, block: u64, sum: u32) {
        let gi = block / GROUP_BLOCKS;
        let g = self
            .groups
            .entry(gi)
            .or_insert_with(|| Box::new(Group::empty()));
        let i = (block % GROUP_BLOCKS) as usize;
        g.known[i / 64] |= 1 << (i % 64);
        g.sums[i] = sum;
        self.dirty.insert(gi);
    }

    /// Sets the checksums of `sums.len()` consecutive blocks from `first`.
    pub fn set_run(&mut self, first: u64, sums: &[u32]) {
        for (i, &s) in sums.iter().enumerate() {
            self.set(first + i as u64, s);
        }
    }

    /// Calls `f(i, sum)` for each of `count` consecutive blocks from `first` (i counted
    /// from 0) that has a checksum.
    pub fn for_run(&self, first: u64, count: u64, mut f: impl FnMut(u64, u32)) {
        let mut block = first;
        let end = first + count;
        while block < end {
            let gi = block / GROUP_BLOCKS;
            let group_end = ((gi + 1) * GROUP_BLOCKS).min(end);
            if let Some(g) = self.groups.get(&gi) {
                for b in block..group_end {
                    let i = (b % GROUP_BLOCKS) as usize;
                    if g.known[i / 64] >> (i % 64) & 1 == 1 {
                        f(b - first, g.sums[i]);
                    }
                }
            }
            block = group_end;
        }
    }

    /// Groups changed since the last flush, with their contents.
    pub fn dirty(&self) -> impl Iterator<Item = (u64, &Group)> + '_ {
        self.dirty
            .iter()
            .map(|gi| (*gi, &**self.groups.get(gi).expect("a dirty group exists")))
    }

    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub fn clear_dirty(&mut self) {
        self.dirty.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_round_trip() {
        let mut s = BlockSums::default();
        s.set(3, 0xDEAD_BEEF);
        s.set(GROUP_BLOCKS + 5, 7);
        assert_eq!(s.get(3), Some(0xDEAD_BEEF));
        assert_eq!(s.get(4), None);
        assert_eq!(s.get(GROUP_BLOCKS + 5), Some(7));
        assert_eq!(s.get(9 * GROUP_BLOCKS), None);
        let dirty: Vec<u64> = s.dirty().map(|(g, _)| g).collect();
        assert_eq!(dirty, [0, 1]);
        let g = s.groups.get(&0).unwrap();
        let back = Group::decode(&g.encode()).unwrap();
        assert_eq!(back.encode(), g.encode());
        assert!(Group::decode(&[0; 10]).is_err());
        let mut seen = Vec::new();
        s.for_run(2, GROUP_BLOCKS + 10, |i, v| seen.push((i, v)));
        assert_eq!(seen, [(1, 0xDEAD_BEEF), (GROUP_BLOCKS + 3, 7)]);
    }
}
