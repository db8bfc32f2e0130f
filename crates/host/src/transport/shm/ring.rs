//! The shared region: one memory file mapped by both the device and the host, and every
//! access to it. This and `transport::sys` are the crate's only unsafe modules.
//!
//! Access rules (what makes the unsafe blocks sound):
//! * The mapping covers the whole file, which is sealed against shrinking, so no byte
//!   of it can become unbacked while mapped.
//! * The control words are only touched as atomics (`AtomicU32` views of 4-aligned
//!   words inside the page-aligned mapping).
//! * Everything else (entries, buffers, response areas) is only copied, never
//!   referenced, by the side that does not own it: the peer may be writing it at the
//!   same moment (another process is not bound by Rust's rules), so the bytes copied
//!   are treated as untrusted input and checked after the copy.
//! * A host's [`HostSlice`](Region::slice) views exist only for a heap range the host
//!   owns exclusively (allocated, and named by no command in flight); the device
//!   writes such a range only while a command naming it is in flight.
//!
//! Invariant: every offset and length is checked against the mapping before a copy; an
//! out-of-range one is a programmer error (callers validate untrusted spans with
//! [`Region::contains`] first) and panics instead of touching memory.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

use crate::transport::sys;

/// A memory file mapped shared and writable.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// The memory file, kept open for as long as it is mapped.
    file: File,
}

// SAFETY: the region is a plain byte mapping; every access goes through the atomics or
// raw copies described in the module doc, which are sound from any thread.
unsafe impl Send for Region {}
// SAFETY: as above: no method hands out unsynchronised interior references (the
// `slice` views are `unsafe fn`s whose callers guarantee exclusivity).
unsafe impl Sync for Region {}

impl Region {
    /// Maps all of `file`, which must be sealed against shrinking.
    pub fn map(file: File) -> io::Result<Region> {
        if !sys::is_sealed_against_shrinking(&file)? {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the shared region is not sealed against shrinking",
            ));
        }
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        if len == 0 || len % 4096 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared region of {len} bytes is not whole pages"),
            ));
        }
        // SAFETY: a fresh shared mapping of `len` bytes of an open file descriptor, at an
        // address the kernel chooses; no existing memory is affected. The result is
        // checked for MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success");
        Ok(Region { ptr, len, file })
    }

    /// Bytes mapped (never 0: `map` refuses empty files).
    #[allow(clippy::len_without_is_empty)]
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The memory file (to pass to the peer).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether `len` bytes at `offset` lie inside the mapping.
    #[inline]
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.len as u64)
    }

    #[inline]
    fn check(&self, offset: usize, len: usize) {
        assert!(
            self.contains(offset as u64, len as u64),
            "{len} bytes at {offset} outside a region of {}",
            self.len
        );
    }

    /// The control word at `offset` (4-aligned, inside the mapping).
    #[inline]
    pub fn word(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4);
        assert_eq!(offset % 4, 0, "control words are 4-aligned");
        // SAFETY: the word lies inside the mapping (checked) and is 4-aligned (the
        // mapping is page-aligned and the offset checked), so it is a valid place for an
        // AtomicU32, which has the size and alignment of u32. The mapping lives as long
        // as `self`, which the returned reference borrows. Both sides access control
        // words only atomically (module doc), so there is no mixed access.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: the source range lies inside the mapping (checked); `dst` is private
        // memory that cannot overlap a shared mapping. The bytes may be changing under
        // the copy (module doc); the caller treats them as untrusted.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
    }

    /// Copies `src` into the region at `offset`.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: the target range lies inside the mapping (checked) and is writable
        // (mapped PROT_WRITE); `src` is private memory, so the two do not overlap. No
        // reference to the target bytes exists (module doc).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len());
        }
    }

    /// A view of `len` bytes at `offset`.
    ///
    /// # Safety
    /// The range must be owned exclusively by the caller for the view's lifetime: no
    /// command naming it is in flight (so the device does not write it) and no mutable
    /// view of it exists.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        // SAFETY: inside the mapping (checked), which outlives the borrow of `self`;
        // nothing writes the range meanwhile (the caller's guarantee).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) }
    }

    /// A mutable view of `len` bytes at `offset`.
    ///
    /// # Safety
    /// As [`Region::slice`], and no other view of the range exists.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the caller's guarantee, as documented.
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        // SAFETY: inside the mapping (checked); the caller guarantees no other view or
        // writer of the range exists while this one lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference into it
        // outlives `self` (every view borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn two_mappings_see_each_other() {
        let file = sys::memfd_sealed("csx-ring-test", 8192).unwrap();
        let other = file.try_clone().unwrap();
        let a = Region::map(file).unwrap();
        let b = Region::map(other).unwrap();
        a.word(64).store(7, Ordering::Release);
        assert_eq!(b.word(64).load(Ordering::Acquire), 7);
        a.write(4096, b"shared");
        let mut got = [0u8; 6];
        b.read(4096, &mut got);
        assert_eq!(&got, b"shared");
        assert!(a.contains(8190, 2));
        assert!(!a.contains(8190, 3));
        assert!(!a.contains(u64::MAX, 2));
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn out_of_range_copies_panic() {
        let a = Region::map(sys::memfd_sealed("csx-ring-test", 4096).unwrap()).unwrap();
        a.write(4090, &[0; 8]);
    }

    #[test]
    fn unsealed_files_are_refused() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(4096).unwrap();
        assert!(Region::map(f).is_err());
    }
}
