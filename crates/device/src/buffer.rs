//! [`RawBuffer`]: a fixed-size heap byte buffer reached through a raw pointer, the
//! backing store of the memory namespace ([`crate::slm`]) and of the shared state
//! ([`crate::state`]).
//!
//! Both need bytes that several threads touch at once in disjoint (SLM leases) or
//! deliberately racy (programs writing the shared state through the VM) ways, which
//! no `&mut [u8]` can express. The buffer itself never reads or writes its bytes; each
//! user states, at each access, why it is sound (in `// SAFETY:` comments there).

use std::ptr::NonNull;

/// Alignment of the first byte of a [`RawBuffer::zeroed`] buffer: a page, so that offsets
/// the memory namespace aligns are aligned addresses too (direct media reads go straight
/// into page-aligned device memory, without a bounce copy).
pub(crate) const ZEROED_ALIGNMENT: usize = 4096;

/// Bytes owned by the buffer and freed when it drops: a heap allocation, or (for
/// [`RawBuffer::zeroed`]) an anonymous mapping of its own, whose pages the memory namespace
/// may replace with shared ones (`slm::Slm::share`) without touching the allocator's heap.
pub(crate) struct RawBuffer {
    /// The allocation: `alloc_len` bytes from `ptr`.
    ptr: NonNull<u8>,
    alloc_len: usize,
    /// The buffer: `len` bytes from `ptr + start`.
    start: usize,
    len: usize,
    /// `ptr` is an `mmap` of `alloc_len` bytes (else a `Box<[u8]>`).
    mapped: bool,
}

// SAFETY: the buffer is plain bytes it owns. It hands out only a raw pointer and
// performs no access itself (the drop needs ownership), so moving it to or sharing it
// with another thread cannot race; every access through the pointer is made, and
// justified, by its user (SLM leases, the state gate).
unsafe impl Send for RawBuffer {}
// SAFETY: as above.
unsafe impl Sync for RawBuffer {}

impl RawBuffer {
    /// `len` zero bytes starting at a [`ZEROED_ALIGNMENT`] boundary: an anonymous private
    /// mapping of its own (pages the OS maps lazily), so that whole pages of it may be
    /// replaced by other mappings (`MAP_FIXED`) and restored, never affecting the heap.
    /// Panics when the host cannot reserve the address space (as an allocation aborts).
    pub(crate) fn zeroed(len: usize) -> RawBuffer {
        if len == 0 {
            return RawBuffer::from_vec(Vec::new());
        }
        // SAFETY: an anonymous private mapping without an address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(
            p != libc::MAP_FAILED,
            "cannot map {len} bytes of device memory: {}",
            std::io::Error::last_os_error()
        );
        let ptr = NonNull::new(p.cast::<u8>()).expect("mmap never yields null");
        debug_assert_eq!(ptr.as_ptr() as usize % ZEROED_ALIGNMENT, 0);
        RawBuffer {
            ptr,
            alloc_len: len,
            start: 0,
            len,
            mapped: true,
        }
    }

    /// The bytes of `bytes`, moved into the buffer.
    pub(crate) fn from_vec(bytes: Vec<u8>) -> RawBuffer {
        let len = bytes.len();
        let boxed: Box<[u8]> = bytes.into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(boxed).cast::<u8>()).expect("Box never yields null");
        RawBuffer {
            ptr,
            alloc_len: len,
            start: 0,
            len,
            mapped: false,
        }
    }

    /// Bytes in the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first byte. Valid for `len()` bytes while the buffer lives.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        // Inside the allocation: `start + len <= alloc_len` by construction.
        self.ptr.as_ptr().wrapping_add(self.start)
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: `ptr`/`alloc_len` are the mapping `zeroed` made (pages of it replaced
            // by other mappings go with it); nothing uses the buffer after drop.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.alloc_len) };
            return;
        }
        // SAFETY: `ptr` and `alloc_len` came from `Box::into_raw` of a `Box<[u8]>` of
        // exactly `alloc_len` bytes in `from_vec`, and are turned back into that box once,
        // here.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.alloc_len,
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_its_bytes() {
        let b = RawBuffer::from_vec(vec![1, 2, 3]);
        assert_eq!(b.len(), 3);
        // SAFETY: the buffer holds 3 bytes and nothing else touches them.
        let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) };
        assert_eq!(bytes, [1, 2, 3]);
        let z = RawBuffer::zeroed(4096);
        // SAFETY: as above, 4096 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(z.as_ptr(), z.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert_eq!(z.as_ptr() as usize % ZEROED_ALIGNMENT, 0);
        assert_eq!(RawBuffer::zeroed(0).len(), 0);
    }
}
