//! Host mappings of device memory (`csAllocMem`'s `VAddressPtr`).
//!
//! A mapping is host memory of the allocation's size (anonymous pages of its own, so an
//! access after `csFreeMem` faults in the caller instead of landing in another
//! allocation) that the library keeps coherent with the device at command boundaries:
//! before a request that uses the allocation on the device runs, the mapping's bytes are
//! written to it; after the request, the allocation's bytes are read back into the
//! mapping. So a program writes its input through the pointer, queues a compute request,
//! and reads the result through the pointer once the request has completed, as the API's
//! examples do. The host must not touch a mapping while a request using its allocation is
//! in flight (as with any buffer a request owns).

use std::ptr::NonNull;

/// An anonymous private mapping of `len` bytes, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the library reads and writes it
// only from the one thread running a request that uses it (the API's contract keeps the
// caller off it meanwhile), so sharing the owner between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: no method mutates through `&self` except the two copy routines,
// which the worker calls for one request at a time.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` (> 0) zeroed bytes, or `None` when the host has no room.
    pub fn new(len: usize) -> Option<Mapping> {
        // SAFETY: an anonymous private mapping with no address hint has no preconditions;
        // the result is checked against MAP_FAILED.
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
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast::<u8>()).map(|ptr| Mapping { ptr, len })
    }

    /// The address C receives.
    pub fn addr(&self) -> *mut std::ffi::c_void {
        self.ptr.as_ptr().cast()
    }

    /// The mapping's bytes, to write to the device.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` mapped, readable bytes live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping's bytes, to fill from the device.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: `len` mapped, writable bytes live as long as `self`; only the worker
        // running the request that uses the allocation touches them meanwhile (the API's
        // contract), so no other reference is alive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping `new` made; nothing uses it after drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
