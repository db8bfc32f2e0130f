//! Uncached reads of several file ranges at once: the mapped runs of every range go to
//! the media as one queued read ([`Nvm::read_runs_checked`]), each piece verified
//! against its blocks' checksums on its reader. [`FileStore::read_at_uncached`] of
//! media read direct is this read of one range.

use super::record::Mapping;
use super::{canonical, verify_run, FileStore, FileStoreError, MappedRun, State};
use crate::nvm::{BlockRun, MediaReads, BLOCK_SIZE};

/// One range of [`FileStore::read_ranges_uncached`]: `dst.len()` bytes of `path` from
/// byte `offset`.
#[derive(Debug)]
pub struct RangeRead<'a> {
    pub path: &'a str,
    pub offset: u64,
    pub dst: &'a mut [u8],
}

/// A mapped run to read, and the range it belongs to.
struct Planned<'p> {
    range: usize,
    run: MappedRun<'p>,
}

impl FileStore {
    /// Reads every range of `ranges` bypassing the OS page cache, as
    /// [`FileStore::read_at_uncached`] reads each, but in one queued read of the media:
    /// many short ranges (the blocks of several column files) keep as many reads in
    /// flight as one long range does. Returns the bytes read of each range (short at the
    /// end of its file, 0 at or past it; holes read as zeros), or the index of the first
    /// range that failed and its error (its file missing, a block failing its checksum,
    /// the media).
    pub fn read_ranges_uncached(
        &self,
        ranges: &mut [RangeRead<'_>],
    ) -> Result<Vec<usize>, (usize, FileStoreError)> {
        if self.nvm.media_reads() == MediaReads::Cached {
            return (ranges.iter_mut().enumerate())
                .map(|(i, r)| {
                    self.read_impl(r.path, r.offset, r.dst, true)
                        .map_err(|e| (i, e))
                })
                .collect();
        }
        let paths = (ranges.iter().enumerate())
            .map(|(i, r)| canonical(r.path).map_err(|e| (i, e)))
            .collect::<Result<Vec<String>, _>>()?;
        let st = self.read_state().map_err(|e| (0, e))?;
        let mut planned = Vec::new();
        let mut runs = Vec::new();
        let mut lens = Vec::with_capacity(ranges.len());
        for (i, r) in ranges.iter_mut().enumerate() {
            let n =
                plan_range(&st, (i, &paths[i]), r, &mut planned, &mut runs).map_err(|e| (i, e))?;
            lens.push(n);
        }
        let check = |k: usize, at: u64, piece: &[u8]| -> Result<(), FileStoreError> {
            let run = &planned[k].run;
            let first = at / BLOCK_SIZE;
            // The file's last block is checksummed over the bytes the file holds.
            let held = run.size.saturating_sub((run.block + first) * BLOCK_SIZE);
            let n = (piece.len() as u64).min(held) as usize;
            verify_run(&st, run, first, &piece[..n])
        };
        self.nvm
            .read_runs_checked(runs, &check)
            .map_err(|(k, e)| (planned[k].range, e))?;
        Ok(lens)
    }
}

/// Plans range `i` (its file's canonical path `path`): its holes zeroed in its
/// destination now, its mapped runs added to `planned` and `runs`; returns the bytes
/// the range reads.
fn plan_range<'p, 'd>(
    st: &State,
    (i, path): (usize, &'p str),
    r: &'d mut RangeRead<'_>,
    planned: &mut Vec<Planned<'p>>,
    runs: &mut Vec<BlockRun<'d>>,
) -> Result<usize, FileStoreError> {
    let record = st.get(path)?;
    if r.offset >= record.size {
        return Ok(0);
    }
    let n = (record.size - r.offset).min(r.dst.len() as u64) as usize;
    let mut rest: &'d mut [u8] = &mut r.dst[..n];
    let mut pos = r.offset;
    while !rest.is_empty() {
        let block = pos / BLOCK_SIZE;
        let in_block = pos % BLOCK_SIZE;
        let left = rest.len() as u64;
        match record.lookup(block) {
            Mapping::Mapped { nvm_block, run } => {
                let len = (run * BLOCK_SIZE - in_block).min(left) as usize;
                let (dst, tail) = std::mem::take(&mut rest).split_at_mut(len);
                let blocks = (in_block + len as u64).div_ceil(BLOCK_SIZE);
                runs.push(BlockRun {
                    offset: nvm_block * BLOCK_SIZE,
                    len: blocks * BLOCK_SIZE,
                    skip: in_block as usize,
                    dst,
                });
                planned.push(Planned {
                    range: i,
                    run: MappedRun {
                        path,
                        size: record.size,
                        block,
                        nvm_block,
                        in_block,
                        uncached: true,
                    },
                });
                rest = tail;
                pos += len as u64;
            }
            Mapping::Hole { run } => {
                let hole = run.map_or(u64::MAX, |r| r * BLOCK_SIZE - in_block);
                let len = hole.min(left) as usize;
                let (dst, tail) = std::mem::take(&mut rest).split_at_mut(len);
                dst.fill(0);
                rest = tail;
                pos += len as u64;
            }
        }
    }
    Ok(n)
}
