//! The host side's view of the device's storage: the NVM image file on this machine,
//! read through the OS page cache, and the host cache budget.
//!
//! Byte n of the namespace is byte n of the image (`csx_device::nvm`), so the host reads
//! a device file's range at its extents' offsets in the image with a plain buffered
//! `pread`, exactly as a host reads an SSD through its page cache. The device's own media
//! reads use `O_DIRECT` and never touch that cache.
//!
//! **Host cache budget.** The OS page cache of this machine is far larger than the
//! datasets a test or benchmark can afford, so "dataset larger than the host cache"
//! needs a smaller cache. Rather than a cgroup, the library keeps one: it remembers the
//! image pages it read, least recently used first, and `posix_fadvise(DONTNEED)`s the
//! oldest beyond `cache_budget_bytes`. Readahead is turned off on our descriptor
//! (`POSIX_FADV_RANDOM`), so the pages cached are the pages read and nothing more.
//!
//! Invariants: the tracked pages never exceed the budget after a read returns; a page
//! the library drops is dropped from the OS cache too (when the page is clean, which it
//! is after a flush: `drop_range` syncs first).

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::sys::{fadvise, ImageMap, PAGE_SIZE};

/// A piece of a device file in the image: `len` bytes at image offset `image_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageRange {
    pub image_offset: u64,
    pub len: u64,
}

/// Page-granular LRU of the image pages the library has read.
#[derive(Debug, Default)]
struct Lru {
    clock: u64,
    stamp_of: HashMap<u64, u64>,
    page_of: BTreeMap<u64, u64>,
}

impl Lru {
    fn touch(&mut self, page: u64) {
        self.clock += 1;
        if let Some(old) = self.stamp_of.insert(page, self.clock) {
            self.page_of.remove(&old);
        }
        self.page_of.insert(self.clock, page);
    }

    fn forget(&mut self, page: u64) {
        if let Some(stamp) = self.stamp_of.remove(&page) {
            self.page_of.remove(&stamp);
        }
    }

    /// Removes the oldest pages until at most `pages_max` remain; returns them.
    fn evict_to(&mut self, pages_max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while self.stamp_of.len() > pages_max {
            let (stamp, page) = self.page_of.pop_first().expect("maps have equal sizes");
            let removed = self.stamp_of.remove(&page);
            debug_assert_eq!(removed, Some(stamp));
            out.push(page);
        }
        debug_assert_eq!(self.stamp_of.len(), self.page_of.len());
        out
    }
}

/// Pages `[first, last]` covering `r`.
fn pages_of(r: ImageRange) -> std::ops::RangeInclusive<u64> {
    debug_assert!(r.len > 0);
    r.image_offset / PAGE_SIZE..=(r.image_offset + r.len - 1) / PAGE_SIZE
}

/// Sorted page numbers as runs `(first page, page count)`.
fn runs(mut pages: Vec<u64>) -> Vec<(u64, u64)> {
    pages.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for p in pages {
        match out.last_mut() {
            Some((first, n)) if *first + *n == p => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// The image on this machine (see the module doc).
#[derive(Debug)]
pub struct LocalImage {
    path: PathBuf,
    file: File,
    map: ImageMap,
    size_bytes: u64,
    cache_budget_bytes: u64,
    lru: Mutex<Lru>,
}

impl LocalImage {
    /// Opens the image at `path` with a host cache of `cache_budget_bytes`.
    pub fn open(path: &Path, cache_budget_bytes: u64) -> io::Result<LocalImage> {
        // Read-write only so `mincore` may report on it (Linux answers for files the
        // caller could write); the host side never writes through it.
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let size_bytes = file.metadata()?.len();
        if size_bytes == 0 {
            return Err(io::Error::other("the image is empty"));
        }
        fadvise(&file, 0, 0, libc::POSIX_FADV_RANDOM)?;
        let map = ImageMap::new(&file, size_bytes)?;
        Ok(LocalImage {
            path: path.to_path_buf(),
            file,
            map,
            size_bytes,
            cache_budget_bytes,
            lru: Mutex::new(Lru::default()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn cache_budget_bytes(&self) -> u64 {
        self.cache_budget_bytes
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, Lru> {
        // The LRU is updated whole under the lock; a panic cannot leave it half-made.
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of `ranges` the OS page cache holds now.
    pub fn cached_bytes(&self, ranges: &[ImageRange]) -> io::Result<u64> {
        let mut cached = 0;
        for r in ranges.iter().filter(|r| r.len > 0) {
            let first = r.image_offset / PAGE_SIZE * PAGE_SIZE;
            let end = r.image_offset + r.len;
            let resident = self.map.resident(first, end - first)?;
            for (i, &res) in resident.iter().enumerate() {
                if res {
                    let page_start = first + i as u64 * PAGE_SIZE;
                    let lo = page_start.max(r.image_offset);
                    let hi = (page_start + PAGE_SIZE).min(end);
                    cached += hi - lo;
                }
            }
        }
        Ok(cached)
    }

    /// Reads `ranges` back to back into `buf` through the page cache, then keeps the
    /// host cache within its budget.
    pub fn read(&self, ranges: &[ImageRange], buf: &mut [u8]) -> io::Result<()> {
        let total: u64 = ranges.iter().map(|r| r.len).sum();
        assert_eq!(total, buf.len() as u64);
        let mut at = 0usize;
        for r in ranges {
            assert!(r.image_offset + r.len <= self.size_bytes);
            let n = r.len as usize;
            self.file
                .read_exact_at(&mut buf[at..at + n], r.image_offset)?;
            at += n;
        }
        let budget_pages = (self.cache_budget_bytes / PAGE_SIZE) as usize;
        let evicted = {
            let mut lru = self.lru();
            for r in ranges.iter().filter(|r| r.len > 0) {
                for p in pages_of(*r) {
                    lru.touch(p);
                }
            }
            lru.evict_to(budget_pages)
        };
        for (first, n) in runs(evicted) {
            fadvise(
                &self.file,
                first * PAGE_SIZE,
                n * PAGE_SIZE,
                libc::POSIX_FADV_DONTNEED,
            )?;
        }
        Ok(())
    }

    /// Drops `ranges` from the OS page cache and the host cache (after syncing the image,
    /// so the pages are clean and the drop takes).
    pub fn drop_ranges(&self, ranges: &[ImageRange]) -> io::Result<()> {
        self.file.sync_data()?;
        let mut pages = Vec::new();
        for r in ranges.iter().filter(|r| r.len > 0) {
            pages.extend(pages_of(*r));
        }
        {
            let mut lru = self.lru();
            for &p in &pages {
                lru.forget(p);
            }
        }
        for (first, n) in runs(pages) {
            fadvise(
                &self.file,
                first * PAGE_SIZE,
                n * PAGE_SIZE,
                libc::POSIX_FADV_DONTNEED,
            )?;
        }
        Ok(())
    }

    /// Drops the whole image from the OS page cache and empties the host cache
    /// (`csx cache drop`).
    pub fn drop_all(&self) -> io::Result<()> {
        self.file.sync_data()?;
        *self.lru() = Lru::default();
        fadvise(&self.file, 0, 0, libc::POSIX_FADV_DONTNEED)
    }

    /// Pages the host cache tracks now.
    pub fn tracked_bytes(&self) -> u64 {
        self.lru().stamp_of.len() as u64 * PAGE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_oldest_and_runs_coalesce() {
        let mut lru = Lru::default();
        for p in [1, 2, 3, 4] {
            lru.touch(p);
        }
        lru.touch(1);
        assert_eq!(lru.evict_to(2), vec![2, 3]);
        assert_eq!(lru.evict_to(2), Vec::<u64>::new());
        lru.forget(4);
        assert_eq!(lru.evict_to(0), vec![1]);
        assert_eq!(runs(vec![5, 1, 2, 3, 7, 6]), vec![(1, 3), (5, 3)]);
        let r = ImageRange {
            image_offset: 4095,
            len: 2,
        };
        assert_eq!(pages_of(r), 0..=1);
    }
}
