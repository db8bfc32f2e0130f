//! One file's metadata: its size, times and extent list, and their encoding in redb.
//!
//! An extent maps a run of the file's blocks to a run of namespace blocks. Blocks of the
//! file that no extent maps are holes and read as zeros (a file extended by `truncate`,
//! or written past its end, is sparse).
//!
//! Invariants (checked by [`FileRecord::check`] on every record read from metadata):
//! - extents are sorted by file block, non-empty and do not overlap in the file;
//! - every extent ends at or below `ceil(size / BLOCK_SIZE)`: no block wholly past the end
//!   of the file is mapped;
//! - every extent lies inside the namespace;
//! - there are at most [`EXTENTS_PER_FILE_MAX`] extents.
//!
//! Bytes of the last block past `size` are unspecified; the file store zeroes them before
//! the file grows (see its module docs).
//!
//! # Encoding (value of the `files` table, little-endian)
//!
//! ```text
//! offset  size   field
//! 0       1      format version (1)
//! 1       8      size in bytes
//! 9       8      created, ns since the Unix epoch
//! 17      8      modified, ns since the Unix epoch
//! 25      4      extent count n
//! 29      24*n   extents: file block u64, namespace block u64, block count u64
//! ```

use super::alloc::BlockRange;
use crate::nvm::BLOCK_SIZE;

/// Extents one file may have. Equal to `csx_proto::limits::EXTENTS_MAX`, so a File
/// Extents reply always holds a whole file; it also bounds a record to 1.5 MiB, which the
/// store rewrites whole when the file changes.
pub const EXTENTS_PER_FILE_MAX: usize = 65_536;

const FORMAT_VERSION: u8 = 1;
const HEADER_SIZE: usize = 29;
const EXTENT_SIZE: usize = 24;

/// One extent, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentRec {
    pub file_block: u64,
    pub nvm_block: u64,
    pub count: u64,
}

impl ExtentRec {
    pub fn file_end(&self) -> u64 {
        self.file_block + self.count
    }

    pub fn nvm_range(&self) -> BlockRange {
        BlockRange {
            start: self.nvm_block,
            count: self.count,
        }
    }
}

/// What lies at one block of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Mapped to `nvm_block`, and `run` blocks from there on are contiguous.
    Mapped { nvm_block: u64, run: u64 },
    /// A hole of `run` blocks, up to the next extent; `None` when no extent follows.
    Hole { run: Option<u64> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    pub size: u64,
    pub created_ns: u64,
    pub modified_ns: u64,
    pub extents: Vec<ExtentRec>,
}

impl FileRecord {
    pub fn new(now_ns: u64) -> FileRecord {
        FileRecord {
            size: 0,
            created_ns: now_ns,
            modified_ns: now_ns,
            extents: Vec::new(),
        }
    }

    /// Blocks the file maps.
    pub fn allocated_blocks(&self) -> u64 {
        self.extents.iter().map(|e| e.count).sum()
    }

    /// What lies at file block `block`.
    pub fn lookup(&self, block: u64) -> Mapping {
        let i = self.extents.partition_point(|e| e.file_end() <= block);
        match self.extents.get(i) {
            Some(e) if e.file_block <= block => Mapping::Mapped {
                nvm_block: e.nvm_block + (block - e.file_block),
                run: e.file_end() - block,
            },
            Some(e) => Mapping::Hole {
                run: Some(e.file_block - block),
            },
            None => Mapping::Hole { run: None },
        }
    }

    /// Extents the file would have after [`FileRecord::insert`] of `new`.
    pub fn count_after_insert(&self, new: &[ExtentRec]) -> usize {
        let mut count = 0;
        let mut prev: Option<ExtentRec> = None;
        for e in merge_sorted(&self.extents, new) {
            match prev {
                Some(p) if mergeable(&p, &e) => {}
                _ => count += 1,
            }
            prev = Some(e);
        }
        count
    }

    /// Maps the holes `new` fills (sorted, each inside a hole), merging neighbours that
    /// are contiguous in both the file and the namespace.
    pub fn insert(&mut self, new: &[ExtentRec]) {
        let mut merged: Vec<ExtentRec> = Vec::with_capacity(self.extents.len() + new.len());
        for e in merge_sorted(&self.extents, new) {
            match merged.last_mut() {
                Some(prev) if mergeable(prev, &e) => prev.count += e.count,
                Some(prev) => {
                    assert!(prev.file_end() <= e.file_block, "new extents fill holes");
                    merged.push(e);
                }
                None => merged.push(e),
            }
        }
        self.extents = merged;
    }

    /// Unmaps every block at or past file block `keep_blocks`, returning the namespace
    /// ranges no longer mapped.
    pub fn unmap_from(&mut self, keep_blocks: u64) -> Vec<BlockRange> {
        let mut freed = Vec::new();
        while let Some(last) = self.extents.last_mut() {
            if last.file_end() <= keep_blocks {
                break;
            }
            if last.file_block >= keep_blocks {
                freed.push(last.nvm_range());
                self.extents.pop();
            } else {
                let kept = keep_blocks - last.file_block;
                freed.push(BlockRange {
                    start: last.nvm_block + kept,
                    count: last.count - kept,
                });
                last.count = kept;
            }
        }
        freed
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_SIZE + EXTENT_SIZE * self.extents.len());
        out.push(FORMAT_VERSION);
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.created_ns.to_le_bytes());
        out.extend_from_slice(&self.modified_ns.to_le_bytes());
        let count = u32::try_from(self.extents.len()).expect("extent count is bounded");
        out.extend_from_slice(&count.to_le_bytes());
        for e in &self.extents {
            out.extend_from_slice(&e.file_block.to_le_bytes());
            out.extend_from_slice(&e.nvm_block.to_le_bytes());
            out.extend_from_slice(&e.count.to_le_bytes());
        }
        out
    }

    /// Decodes and checks a record read back from metadata.
    pub fn decode(bytes: &[u8], nvm_blocks: u64) -> Result<FileRecord, String> {
        if bytes.len() < HEADER_SIZE {
            return Err(format!(
                "record is {} bytes, shorter than its {HEADER_SIZE}-byte header",
                bytes.len()
            ));
        }
        if bytes[0] != FORMAT_VERSION {
            return Err(format!(
                "record format {} is unknown, expected {FORMAT_VERSION}",
                bytes[0]
            ));
        }
        let count = u32::from_le_bytes(bytes[25..29].try_into().expect("4 bytes")) as usize;
        if count > EXTENTS_PER_FILE_MAX {
            return Err(format!(
                "record has {count} extents, limit is {EXTENTS_PER_FILE_MAX}"
            ));
        }
        let expected = HEADER_SIZE + EXTENT_SIZE * count;
        if bytes.len() != expected {
            return Err(format!(
                "record is {} bytes, {count} extents need {expected}",
                bytes.len()
            ));
        }
        let extents = bytes[HEADER_SIZE..]
            .chunks_exact(EXTENT_SIZE)
            .map(|c| ExtentRec {
                file_block: u64_at(c, 0),
                nvm_block: u64_at(c, 8),
                count: u64_at(c, 16),
            })
            .collect();
        let record = FileRecord {
            size: u64_at(bytes, 1),
            created_ns: u64_at(bytes, 9),
            modified_ns: u64_at(bytes, 17),
            extents,
        };
        record.check(nvm_blocks)?;
        Ok(record)
    }

    /// Checks the invariants in the module docs.
    pub fn check(&self, nvm_blocks: u64) -> Result<(), String> {
        if self.extents.len() > EXTENTS_PER_FILE_MAX {
            return Err(format!(
                "{} extents, limit is {EXTENTS_PER_FILE_MAX}",
                self.extents.len()
            ));
        }
        let size_blocks = self.size.div_ceil(BLOCK_SIZE);
        let mut prev_end = 0u64;
        for (i, e) in self.extents.iter().enumerate() {
            if e.count == 0 {
                return Err(format!("extent {i} is empty"));
            }
            if e.file_block < prev_end {
                return Err(format!(
                    "extent {i} at file block {} is out of order",
                    e.file_block
                ));
            }
            let file_end = e.file_block.checked_add(e.count);
            let nvm_end = e.nvm_block.checked_add(e.count);
            if file_end.is_none_or(|end| end > size_blocks) {
                return Err(format!(
                    "extent {i} at file block {} lies past the end of the {}-byte file",
                    e.file_block, self.size
                ));
            }
            if nvm_end.is_none_or(|end| end > nvm_blocks) {
                return Err(format!(
                    "extent {i} of {} blocks at namespace block {} lies outside the {nvm_blocks}-block namespace",
                    e.count, e.nvm_block
                ));
            }
            prev_end = e.file_end();
        }
        Ok(())
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn mergeable(prev: &ExtentRec, next: &ExtentRec) -> bool {
    prev.file_end() == next.file_block && prev.nvm_block + prev.count == next.nvm_block
}

/// Two extent lists, each sorted by file block, merged into one sorted sequence.
fn merge_sorted<'a>(
    a: &'a [ExtentRec],
    b: &'a [ExtentRec],
) -> impl Iterator<Item = ExtentRec> + 'a {
    let mut a = a.iter().copied().peekable();
    let mut b = b.iter().copied().peekable();
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if x.file_block <= y.file_block => a.next(),
        (Some(_), Some(_)) => b.next(),
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(file_block: u64, nvm_block: u64, count: u64) -> ExtentRec {
        ExtentRec {
            file_block,
            nvm_block,
            count,
        }
    }

    fn record(size: u64, extents: Vec<ExtentRec>) -> FileRecord {
        FileRecord {
            size,
            created_ns: 1,
            modified_ns: 2,
            extents,
        }
    }

    #[test]
    fn lookup_finds_extents_and_holes() {
        let r = record(10 * BLOCK_SIZE, vec![e(2, 100, 3), e(7, 50, 1)]);
        assert_eq!(r.lookup(0), Mapping::Hole { run: Some(2) });
        assert_eq!(
            r.lookup(2),
            Mapping::Mapped {
                nvm_block: 100,
                run: 3
            }
        );
        assert_eq!(
            r.lookup(4),
            Mapping::Mapped {
                nvm_block: 102,
                run: 1
            }
        );
        assert_eq!(r.lookup(5), Mapping::Hole { run: Some(2) });
        assert_eq!(
            r.lookup(7),
            Mapping::Mapped {
                nvm_block: 50,
                run: 1
            }
        );
        assert_eq!(r.lookup(8), Mapping::Hole { run: None });
    }

    #[test]
    fn insert_merges_contiguous_neighbours() {
        let mut r = record(10 * BLOCK_SIZE, vec![e(0, 10, 2), e(5, 20, 1)]);
        let new = [e(2, 12, 2), e(4, 40, 1)];
        assert_eq!(r.count_after_insert(&new), 3);
        r.insert(&new);
        assert_eq!(r.extents, [e(0, 10, 4), e(4, 40, 1), e(5, 20, 1)]);
        assert_eq!(r.allocated_blocks(), 6);
        r.insert(&[e(6, 21, 2)]);
        assert_eq!(r.extents, [e(0, 10, 4), e(4, 40, 1), e(5, 20, 3)]);
    }

    #[test]
    fn unmap_from_splits_and_frees() {
        let mut r = record(10 * BLOCK_SIZE, vec![e(0, 10, 4), e(6, 30, 3)]);
        let freed = r.unmap_from(2);
        assert_eq!(
            freed,
            [
                BlockRange {
                    start: 30,
                    count: 3
                },
                BlockRange {
                    start: 12,
                    count: 2
                }
            ]
        );
        assert_eq!(r.extents, [e(0, 10, 2)]);
        assert!(r.unmap_from(2).is_empty());
        assert_eq!(
            r.unmap_from(0),
            [BlockRange {
                start: 10,
                count: 2
            }]
        );
        assert!(r.extents.is_empty());
    }

    #[test]
    fn encoding_round_trips_and_rejects_corruption() {
        let r = record(3 * BLOCK_SIZE + 1, vec![e(0, 5, 2), e(3, 9, 1)]);
        let bytes = r.encode();
        assert_eq!(FileRecord::decode(&bytes, 100), Ok(r.clone()));
        assert!(FileRecord::decode(&bytes[..bytes.len() - 1], 100).is_err());
        assert!(FileRecord::decode(&bytes[..3], 100).is_err());
        // Outside a 9-block namespace.
        assert!(FileRecord::decode(&bytes, 9).is_err());
        let mut bad = bytes.clone();
        bad[0] = 9;
        assert!(FileRecord::decode(&bad, 100).is_err());
        // An extent past the end of the file.
        let past = record(BLOCK_SIZE, vec![e(0, 5, 1), e(1, 9, 1)]);
        assert!(FileRecord::decode(&past.encode(), 100).is_err());
        // Overlapping extents.
        let overlap = record(9 * BLOCK_SIZE, vec![e(0, 5, 3), e(2, 9, 1)]);
        assert!(FileRecord::decode(&overlap.encode(), 100).is_err());
        // Overflowing extents.
        let huge = record(u64::MAX, vec![e(0, u64::MAX - 1, 3)]);
        assert!(FileRecord::decode(&huge.encode(), 100).is_err());
        let empty = record(BLOCK_SIZE, vec![e(0, 5, 0)]);
        assert!(FileRecord::decode(&empty.encode(), 100).is_err());
    }
}
