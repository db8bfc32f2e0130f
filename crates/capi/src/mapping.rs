//! Host mappings of device memory (`csAllocMem`'s `VAddressPtr`).
//!
//! A mapping is the allocation's own memory: the device hands out a memory file whose
//! pages *are* the allocation (`csx_device::slm::Slm::share`: in this process for an
//! embedded device, passed over the shm socket by a served one), and the library maps it
//! shared. What the host writes through the pointer is what the device's commands read,
//! and what they write is there when they complete; nothing is copied. The host must
//! not touch a mapping while a request using its allocation is in flight (as with any
//! buffer a request owns). `csFreeMem` unmaps it (the device meanwhile gives the
//! allocation's range private pages again), so a later access faults in the caller.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

/// A shared mapping of a device allocation's memory file, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is an address range owned by this value; the library never reads
// or writes through it (only C does, under the API's contract), so moving or sharing the
// owner between threads cannot race.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: no method accesses the bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` (> 0, whole pages of the file) bytes of `file` shared, or the error.
    pub fn of_file(file: &OwnedFd, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a shared mapping of a file descriptor this process owns, with no
        // address hint, has no preconditions; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).expect("mmap never yields null");
        Ok(Mapping { ptr, len })
    }

    /// The address C receives.
    pub fn addr(&self) -> *mut std::ffi::c_void {
        self.ptr.as_ptr().cast()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping `of_file` made; the library holds no
        // reference into it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
