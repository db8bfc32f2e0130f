//! The system calls of the host side of λ-IO: a read-only mapping of the NVM image for
//! `mincore` (which pages of the image the OS page cache holds), and
//! `posix_fadvise(DONTNEED)` to drop pages from it. All of this module's unsafe is here.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The page size `mincore` reports in. 4 KiB on every Linux target csx runs on; checked
/// against `sysconf` when a mapping is made.
pub const PAGE_SIZE: u64 = 4096;

/// A shared read-only mapping of a whole file, used only to ask `mincore` about it: its
/// bytes are never read through the mapping, so mapping does not populate the cache.
#[derive(Debug)]
pub struct ImageMap {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and never dereferenced; `mincore` on it from several
// threads at once is allowed.
unsafe impl Send for ImageMap {}
// SAFETY: as above: shared use only calls `mincore`.
unsafe impl Sync for ImageMap {}

impl ImageMap {
    /// Maps the first `len` bytes of `file` (`len > 0`).
    pub fn new(file: &File, len: u64) -> io::Result<ImageMap> {
        assert!(len > 0);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page != PAGE_SIZE as libc::c_long {
            return Err(io::Error::other(format!(
                "page size is {page}, the λ host cache assumes {PAGE_SIZE}"
            )));
        }
        let len = usize::try_from(len).map_err(io::Error::other)?;
        // SAFETY: a fresh shared read-only mapping of an open descriptor; the kernel
        // chooses the address, so no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ImageMap { ptr, len })
    }

    /// For each page of `[offset, offset + len)` (page-aligned `offset`), whether the OS
    /// page cache holds it.
    pub fn resident(&self, offset: u64, len: u64) -> io::Result<Vec<bool>> {
        assert!(offset.is_multiple_of(PAGE_SIZE));
        assert!(offset.saturating_add(len) <= self.len as u64);
        let pages = len.div_ceil(PAGE_SIZE) as usize;
        let mut vec = vec![0u8; pages];
        if pages == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the range lies inside our mapping (asserted above) and starts on a
        // page boundary; `vec` holds one byte per page of it.
        let r = unsafe {
            libc::mincore(
                self.ptr.cast::<u8>().add(offset as usize).cast(),
                len as usize,
                vec.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.into_iter().map(|b| b & 1 == 1).collect())
    }
}

impl Drop for ImageMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; nothing refers to it after drop.
        let r = unsafe { libc::munmap(self.ptr, self.len) };
        debug_assert_eq!(r, 0, "munmap of our own mapping cannot fail");
    }
}

/// `posix_fadvise(advice)` over `[offset, offset + len)` of `file` (`len == 0`: to the
/// end).
pub fn fadvise(file: &File, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    let off = libc::off_t::try_from(offset).map_err(io::Error::other)?;
    let n = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: posix_fadvise only reads its scalar arguments; the descriptor is open.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, n, advice) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}
