//! The memory namespace (SLM): device memory the host allocates, fills, reads and lends
//! to programs as windows.
//!
//! One contiguous buffer of `slm_size_bytes`, zero pages mapped lazily by the OS.
//! Allocations are variable-size ranges of it handed out by a best-fit allocator that
//! coalesces on free (no fixed-size regions: Delilah's 1 GiB data regions fragment,
//! these do not waste more than [`SLM_ALIGNMENT`] per allocation).
//!
//! Every command that touches SLM bytes first takes a [`Leases`]: the byte ranges it
//! reads or writes, checked against the allocation's owner and bounds and against the
//! leases of every other command in flight. A write lease excludes every other lease on
//! overlapping bytes; read leases share. A conflict is refused (status 95h, in use) rather
//! than waited for, as TP4091 does for a memory range set in use.
//!
//! Invariants:
//! * Allocations are disjoint, inside the buffer, and [`SLM_ALIGNMENT`]-aligned.
//! * Bytes under a write lease are reachable only through that lease; bytes under read
//!   leases only for reading. This is what makes [`Leases::slices_mut`] sound.
//! * An allocation is freed only when no lease covers it; freeing a leased allocation
//!   is refused, and reclaiming a departed client's leased allocation defers the free to
//!   its last lease's release.
//! * A client that has departed ([`Slm::reclaim`]) can never allocate again.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use csx_proto::limits::{SLM_ALIGNMENT, SLM_ALLOC_SIZE_MAX};
use csx_proto::{ClientId, MemHandle};

use crate::buffer::RawBuffer;

/// Why an SLM operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlmError {
    #[error(
        "cannot allocate {size_bytes} bytes: {free_bytes} free, largest free run {largest_bytes}"
    )]
    NoMemory {
        size_bytes: u64,
        free_bytes: u64,
        largest_bytes: u64,
    },
    #[error("allocation of {size_bytes} bytes exceeds the limit of {limit}")]
    TooLarge { size_bytes: u64, limit: u64 },
    #[error("no allocation {handle} for this client")]
    UnknownHandle { handle: MemHandle },
    #[error("{len} bytes at offset {offset} reach outside {handle} of {size_bytes} bytes")]
    OutOfRange {
        handle: MemHandle,
        offset: u64,
        len: u64,
        size_bytes: u64,
    },
    #[error("bytes {offset}..+{len} of {handle} are in use by another command")]
    InUse {
        handle: MemHandle,
        offset: u64,
        len: u64,
    },
    #[error("ranges {first} and {second} of the command overlap")]
    Overlap { first: usize, second: usize },
    #[error("the client has disconnected")]
    ClientGone,
}

/// Why [`Slm::share`] refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShareError {
    #[error(transparent)]
    Slm(#[from] SlmError),
    #[error("{handle} ({size_bytes} bytes) does not hold whole pages of its own: allocate a multiple of {PAGE_ALIGNMENT} bytes to map it")]
    NotPages { handle: MemHandle, size_bytes: u64 },
    #[error("cannot make a memory file for the allocation: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes the pages of `bytes` that are not all zero into `file` at their offsets (a fresh
/// file reads as zeros, and untouched device memory stays unbacked).
fn write_nonzero_pages(file: &std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    for (i, page) in bytes.chunks(PAGE_ALIGNMENT as usize).enumerate() {
        if page.iter().any(|&b| b != 0) {
            file.write_all_at(page, (i * PAGE_ALIGNMENT as usize) as u64)?;
        }
    }
    Ok(())
}

/// One range a command asks to lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    pub handle: MemHandle,
    pub offset: u64,
    pub len: u64,
    pub write: bool,
    /// The command writes every byte of the range before anything reads it and reads
    /// none of it (a copy's destination): bytes a previous allocation left there need not
    /// be zeroed first. Until [`Leases::overwritten`] says the command did so, they stay
    /// marked for zeroing before any other lease.
    pub overwrite: bool,
}

#[derive(Debug)]
struct Allocation {
    /// Absolute offset in the buffer.
    start: u64,
    /// Bytes the client asked for (its visible size).
    size_bytes: u64,
    /// Bytes reserved (size rounded up to the alignment).
    reserved_bytes: u64,
    owner: ClientId,
    /// Leases covering it.
    lease_count: u32,
    /// Reclaimed while leased: freed when `lease_count` drops to 0.
    orphaned: bool,
    /// The memory file whose pages back it since [`Slm::share`] (until it is freed).
    shared: Option<OwnedFd>,
    /// Absolute ranges that may still hold a previous allocation's bytes: zeroed when a
    /// lease that may read them is granted (or the allocation is shared), or dropped
    /// once an overwriting lease has written them whole.
    unzeroed: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct LeaseRecord {
    id: u64,
    start: u64,
    end: u64,
    write: bool,
}

/// Best-fit free list with coalescing: free runs by offset and by (size, offset).
#[derive(Debug, Default)]
struct FreeList {
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    free_bytes: u64,
}

impl FreeList {
    fn new(total: u64) -> FreeList {
        let mut f = FreeList::default();
        if total > 0 {
            f.insert(0, total);
        }
        f
    }

    fn insert(&mut self, offset: u64, len: u64) {
        debug_assert!(len > 0);
        self.by_offset.insert(offset, len);
        self.by_size.insert((len, offset));
        self.free_bytes += len;
    }

    fn remove(&mut self, offset: u64, len: u64) {
        let removed = self.by_offset.remove(&offset);
        assert_eq!(removed, Some(len), "free run index out of sync");
        assert!(
            self.by_size.remove(&(len, offset)),
            "free run index out of sync"
        );
        self.free_bytes -= len;
    }

    fn largest(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    /// The smallest run that fits `len` bytes starting at a multiple of `align`; takes
    /// that part of it (the head before it, if any, stays free).
    fn allocate(&mut self, len: u64, align: u64) -> Option<u64> {
        let (run_len, offset, start) = self
            .by_size
            .range((len, 0)..)
            .map(|&(run_len, offset)| (run_len, offset, offset.next_multiple_of(align)))
            .find(|&(run_len, offset, start)| start + len <= offset + run_len)?;
        self.remove(offset, run_len);
        if start > offset {
            self.insert(offset, start - offset);
        }
        if offset + run_len > start + len {
            self.insert(start + len, offset + run_len - start - len);
        }
        Some(start)
    }

    /// Returns a run, merging it with free neighbours.
    fn release(&mut self, mut offset: u64, mut len: u64) {
        if let Some((&prev, &prev_len)) = self.by_offset.range(..offset).next_back() {
            assert!(prev + prev_len <= offset, "double free at {offset}");
            if prev + prev_len == offset {
                self.remove(prev, prev_len);
                offset = prev;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.by_offset.get(&(offset + len)) {
            self.remove(offset + len, next_len);
            len += next_len;
        }
        self.insert(offset, len);
    }
}

#[derive(Debug)]
struct Inner {
    free: FreeList,
    allocs: HashMap<MemHandle, Allocation>,
    leases: Vec<LeaseRecord>,
    live_clients: HashSet<ClientId>,
    next_handle: u32,
    next_lease: u64,
    /// Ranges that may hold nonzero bytes (every range ever handed out), disjoint and
    /// coalesced: start -> end. The rest of the buffer is still the OS's zero pages, so
    /// an allocation there needs no zeroing (nor the page faults zeroing would take).
    dirty: BTreeMap<u64, u64>,
}

impl Inner {
    /// The absolute byte ranges of `owner`'s `requests`, checked against their
    /// allocations' owner and bounds.
    fn spans_of(
        &self,
        owner: ClientId,
        requests: &[LeaseRequest],
    ) -> Result<Vec<(u64, u64)>, SlmError> {
        let mut spans = Vec::with_capacity(requests.len());
        for r in requests {
            let a = match self.allocs.get(&r.handle) {
                Some(a) if a.owner == owner && !a.orphaned => a,
                _ => return Err(SlmError::UnknownHandle { handle: r.handle }),
            };
            let end = r.offset.checked_add(r.len);
            if end.is_none_or(|e| e > a.size_bytes) {
                return Err(SlmError::OutOfRange {
                    handle: r.handle,
                    offset: r.offset,
                    len: r.len,
                    size_bytes: a.size_bytes,
                });
            }
            spans.push((a.start + r.offset, a.start + r.offset + r.len));
        }
        Ok(spans)
    }

    /// The parts of `[start, end)` that may hold nonzero bytes; marks the whole range so.
    fn dirty_then_mark(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut parts = Vec::new();
        let (mut lo, mut hi) = (start, end);
        // A run reaching into or touching the range from below, then every run starting
        // inside it (or touching its end): each is cut out and merged into one.
        let below = self
            .dirty
            .range(..start)
            .next_back()
            .map(|(&s, &e)| (s, e))
            .filter(|&(_, e)| e >= start);
        if let Some((s, e)) = below {
            if e > start {
                parts.push((start, e.min(end)));
            }
            self.dirty.remove(&s);
            lo = s;
            hi = hi.max(e);
        }
        let inside: Vec<(u64, u64)> = self
            .dirty
            .range(start..=end)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in inside {
            if s < end {
                parts.push((s, e.min(end)));
            }
            self.dirty.remove(&s);
            hi = hi.max(e);
        }
        self.dirty.insert(lo, hi);
        parts
    }
}

/// Refuses a command whose own ranges overlap where one of them writes.
fn check_own_overlaps(requests: &[LeaseRequest], spans: &[(u64, u64)]) -> Result<(), SlmError> {
    for i in 0..requests.len() {
        for j in i + 1..requests.len() {
            let overlap = spans[i].0 < spans[j].1 && spans[j].0 < spans[i].1;
            if overlap && (requests[i].write || requests[j].write) {
                return Err(SlmError::Overlap {
                    first: i,
                    second: j,
                });
            }
        }
    }
    Ok(())
}

/// The memory namespace.
pub struct Slm {
    buffer: RawBuffer,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Slm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slm")
            .field("size_bytes", &self.buffer.len())
            .finish_non_exhaustive()
    }
}

/// Allocations of at least this many bytes start on a page ([`PAGE_ALIGNMENT`]), so that
/// direct media reads (Memory Copy from storage) go straight into them instead of through
/// a bounce buffer; smaller ones on [`SLM_ALIGNMENT`]. At most one page in 16 is lost to
/// the alignment.
pub const PAGE_ALIGNED_MIN: u64 = 64 << 10;

/// The page alignment of large allocations: the media's direct-read alignment.
pub const PAGE_ALIGNMENT: u64 = crate::nvm::DIRECT_IO_ALIGNMENT as u64;

const _: () = assert!(PAGE_ALIGNMENT as usize == crate::buffer::ZEROED_ALIGNMENT);
const _: () = assert!(PAGE_ALIGNMENT.is_multiple_of(SLM_ALIGNMENT));

fn round_up(len: u64) -> u64 {
    len.div_ceil(SLM_ALIGNMENT) * SLM_ALIGNMENT
}

/// The alignment of an allocation of `reserved_bytes`.
fn alignment(reserved_bytes: u64) -> u64 {
    if reserved_bytes >= PAGE_ALIGNED_MIN || reserved_bytes.is_multiple_of(PAGE_ALIGNMENT) {
        PAGE_ALIGNMENT
    } else {
        SLM_ALIGNMENT
    }
}

impl Slm {
    /// A namespace of `size_bytes`, all free.
    pub fn new(size_bytes: u64) -> Slm {
        let len = usize::try_from(size_bytes).expect("the configured SLM size fits in memory");
        let usable = size_bytes - size_bytes % SLM_ALIGNMENT;
        Slm {
            buffer: RawBuffer::zeroed(len),
            inner: Mutex::new(Inner {
                free: FreeList::new(usable),
                allocs: HashMap::new(),
                leases: Vec::new(),
                live_clients: HashSet::new(),
                next_handle: 1,
                next_lease: 1,
                dirty: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock is a bug in this module; the table is still
        // consistent enough to keep serving (no method leaves it half-updated before an
        // assertion), so poisoning is ignored rather than spread to every thread.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of the namespace.
    pub fn size_bytes(&self) -> u64 {
        self.buffer.len() as u64
    }

    /// Bytes not allocated.
    pub fn free_bytes(&self) -> u64 {
        self.lock().free.free_bytes
    }

    /// Allows `client` to allocate.
    pub fn register_client(&self, client: ClientId) {
        let fresh = self.lock().live_clients.insert(client);
        assert!(fresh, "client ids are never reused");
    }

    /// Allocates `size_bytes` for `owner`.
    pub fn alloc(&self, owner: ClientId, size_bytes: u64) -> Result<MemHandle, SlmError> {
        if size_bytes == 0 || size_bytes > SLM_ALLOC_SIZE_MAX {
            return Err(SlmError::TooLarge {
                size_bytes,
                limit: SLM_ALLOC_SIZE_MAX,
            });
        }
        let reserved_bytes = round_up(size_bytes);
        let mut inner = self.lock();
        if !inner.live_clients.contains(&owner) {
            return Err(SlmError::ClientGone);
        }
        // A page-aligned place if there is one, else any (alignment is speed, not
        // correctness: direct reads bounce through an aligned buffer otherwise).
        let start = (inner
            .free
            .allocate(reserved_bytes, alignment(reserved_bytes)))
        .or_else(|| inner.free.allocate(reserved_bytes, SLM_ALIGNMENT));
        let Some(start) = start else {
            return Err(SlmError::NoMemory {
                size_bytes,
                free_bytes: inner.free.free_bytes,
                largest_bytes: inner.free.largest(),
            });
        };
        debug_assert_eq!(start % SLM_ALIGNMENT, 0);
        assert!(start + reserved_bytes <= self.buffer.len() as u64);
        let dirty = inner.dirty_then_mark(start, start + reserved_bytes);
        let handle = loop {
            let h = MemHandle(inner.next_handle);
            inner.next_handle = inner.next_handle.checked_add(1).unwrap_or(1);
            if h != MemHandle::NONE && !inner.allocs.contains_key(&h) {
                break h;
            }
        };
        inner.allocs.insert(
            handle,
            Allocation {
                start,
                size_bytes,
                reserved_bytes,
                owner,
                lease_count: 0,
                orphaned: false,
                shared: None,
                unzeroed: dirty,
            },
        );
        drop(inner);
        // Allocations read as zeros, so no client sees another's old bytes: the bytes
        // ever handed out are zeroed before the first lease that may read them (a copy
        // that overwrites them whole spares that), the never-touched rest is the OS's
        // zero pages. Those are mapped by the first write, on the thread that writes
        // (a copier, an engine), not here: mapping them in advance held the allocating
        // client for the whole range (a staging's 4.4 MB slot 2.3-3.8 ms, the disk idle
        // meanwhile) and saved no time where a client fills them (the array sort).
        Ok(handle)
    }

    /// Zeroes the parts of `a`'s unzeroed ranges inside `[start, end)` and forgets them.
    /// Called under the lock, before a lease on the range is granted (or the allocation
    /// is shared).
    fn zero_unzeroed(&self, a: &mut Allocation, start: u64, end: u64) {
        cut_ranges(&mut a.unzeroed, start, end, |lo, hi| self.zero(lo, hi - lo));
    }

    fn zero(&self, start: u64, len: u64) {
        // SAFETY: the range lies inside an allocation (so inside the buffer) whose
        // bookkeeping the caller holds under the lock, and no lease covers it: the lease
        // about to be granted on it is not yet recorded (nor handed out), and any other
        // lease on it would have conflicted or found these bytes zeroed already.
        unsafe {
            std::ptr::write_bytes(self.buffer.as_ptr().add(start as usize), 0, len as usize);
        }
    }

    /// Frees `owner`'s allocation `handle`; refused while a command uses it.
    pub fn free(&self, owner: ClientId, handle: MemHandle) -> Result<(), SlmError> {
        let mut inner = self.lock();
        let a = match inner.allocs.get(&handle) {
            Some(a) if a.owner == owner && !a.orphaned => a,
            _ => return Err(SlmError::UnknownHandle { handle }),
        };
        if a.lease_count > 0 {
            return Err(SlmError::InUse {
                handle,
                offset: 0,
                len: a.size_bytes,
            });
        }
        let a = inner.allocs.remove(&handle).expect("looked up above");
        self.retire(&mut inner, a);
        Ok(())
    }

    /// A memory file holding `owner`'s allocation `handle`, to map into a host: from now
    /// on the allocation's pages *are* that file's (the namespace's range is remapped onto
    /// it, its bytes kept), so what the host writes through its mapping is what commands
    /// read, with no copy either way. Sharing again returns the same file. When the
    /// allocation is freed its range goes back to private pages: the file (and any host
    /// mapping of it) then holds no device memory. The allocation must start on a page
    /// and reserve whole pages (allocate a multiple of [`PAGE_ALIGNMENT`]), so that the
    /// file holds its bytes and no other allocation's; no command may be using it.
    pub fn share(&self, owner: ClientId, handle: MemHandle) -> Result<OwnedFd, ShareError> {
        let mut inner = self.lock();
        let a = match inner.allocs.get_mut(&handle) {
            Some(a) if a.owner == owner && !a.orphaned => a,
            _ => return Err(SlmError::UnknownHandle { handle }.into()),
        };
        if let Some(fd) = &a.shared {
            return Ok(fd.try_clone()?);
        }
        if a.start % PAGE_ALIGNMENT != 0 || a.reserved_bytes % PAGE_ALIGNMENT != 0 {
            return Err(ShareError::NotPages {
                handle,
                size_bytes: a.size_bytes,
            });
        }
        if a.lease_count > 0 {
            return Err(SlmError::InUse {
                handle,
                offset: 0,
                len: a.size_bytes,
            }
            .into());
        }
        // The host maps every byte of it: none may be a previous allocation's.
        let (start, end) = (a.start, a.start + a.reserved_bytes);
        self.zero_unzeroed(a, start, end);
        let fd = self.remap_shared(handle, a.start, a.reserved_bytes)?;
        let out = fd.try_clone()?;
        a.shared = Some(fd);
        Ok(out)
    }

    /// Moves the bytes of `[start, start + len)` (whole pages, held by no lease) into a
    /// fresh memory file and maps that file over the range.
    fn remap_shared(&self, handle: MemHandle, start: u64, len: u64) -> std::io::Result<OwnedFd> {
        let name = std::ffi::CString::new(format!("csx-slm-{}", handle.0)).expect("no NUL");
        // SAFETY: a NUL-terminated name and flags; the result is checked.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor memfd_create just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let file = std::fs::File::from(fd);
        file.set_len(len)?;
        // SAFETY: the range lies inside the buffer (allocations do), belongs to one
        // allocation and no lease covers it (checked by the caller under the lock, which
        // is held), so nothing writes it meanwhile; the slice ends before the remap below.
        let bytes = unsafe {
            std::slice::from_raw_parts(self.buffer.as_ptr().add(start as usize), len as usize)
        };
        write_nonzero_pages(&file, bytes)?;
        let at = self.buffer.as_ptr().wrapping_add(start as usize);
        // SAFETY: `[at, at + len)` is whole pages of the buffer's own anonymous mapping
        // (`RawBuffer::zeroed`; the buffer is page-aligned and so are `start` and `len`),
        // and no reference into it is alive (as above). MAP_FIXED replaces exactly those
        // pages with the file's, which hold the same bytes; the result is checked.
        let p = unsafe {
            libc::mmap(
                at.cast(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        assert_eq!(p.cast::<u8>(), at, "MAP_FIXED maps where it is told");
        Ok(OwnedFd::from(file))
    }

    /// Returns a removed allocation's range to the free list; a shared one first gets
    /// private zero pages back, so its memory file no longer reaches the namespace.
    fn retire(&self, inner: &mut Inner, a: Allocation) {
        if a.shared.is_some() {
            let at = self.buffer.as_ptr().wrapping_add(a.start as usize);
            // SAFETY: the range is whole pages of the buffer's own mapping that the
            // allocation held (checked by `share`), and the allocation has just been
            // removed with no lease on it, so no reference into it is alive. MAP_FIXED
            // replaces them with fresh private zero pages; the result is checked.
            let p = unsafe {
                libc::mmap(
                    at.cast(),
                    a.reserved_bytes as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            // Without its pages back the range would stay the file's: a host still
            // mapping it would reach the next allocation there. Never reuse it then.
            if p == libc::MAP_FAILED {
                return;
            }
        }
        inner.free.release(a.start, a.reserved_bytes);
    }

    /// The size of `owner`'s allocation `handle`.
    pub fn size_of(&self, owner: ClientId, handle: MemHandle) -> Result<u64, SlmError> {
        let inner = self.lock();
        match inner.allocs.get(&handle) {
            Some(a) if a.owner == owner && !a.orphaned => Ok(a.size_bytes),
            _ => Err(SlmError::UnknownHandle { handle }),
        }
    }

    /// Frees everything `owner` allocated (deferring leased allocations to their last
    /// release) and refuses it further allocations.
    pub fn reclaim(&self, owner: ClientId) {
        let mut inner = self.lock();
        inner.live_clients.remove(&owner);
        let mine: Vec<MemHandle> = inner
            .allocs
            .iter()
            .filter(|(_, a)| a.owner == owner)
            .map(|(h, _)| *h)
            .collect();
        for h in mine {
            let a = inner.allocs.get_mut(&h).expect("listed above");
            if a.lease_count > 0 {
                a.orphaned = true;
            } else {
                let a = inner.allocs.remove(&h).expect("listed above");
                self.retire(&mut inner, a);
            }
        }
    }

    /// Takes leases on every range of `requests` at once, or none of them.
    pub fn lease(
        self: &Arc<Self>,
        owner: ClientId,
        requests: &[LeaseRequest],
    ) -> Result<Leases, SlmError> {
        let mut inner = self.lock();
        // First, resolve every range to absolute bytes, checking owner and bounds.
        let spans = inner.spans_of(owner, requests)?;
        // Then, the command's own ranges must not overlap where one of them writes.
        check_own_overlaps(requests, &spans)?;
        // Next, no lease of another command may conflict.
        for (r, &(start, end)) in requests.iter().zip(&spans) {
            let conflict = inner
                .leases
                .iter()
                .any(|l| l.start < end && start < l.end && (l.write || r.write));
            if conflict {
                return Err(SlmError::InUse {
                    handle: r.handle,
                    offset: r.offset,
                    len: r.len,
                });
            }
        }
        // Then, a range that may be read has its old bytes zeroed first.
        for (r, &(start, end)) in requests.iter().zip(&spans) {
            if !(r.write && r.overwrite) {
                let a = inner.allocs.get_mut(&r.handle).expect("resolved above");
                self.zero_unzeroed(a, start, end);
            }
        }
        // Finally, record them.
        let mut granted = Vec::with_capacity(requests.len());
        for (r, &(start, end)) in requests.iter().zip(&spans) {
            let id = inner.next_lease;
            inner.next_lease += 1;
            inner.leases.push(LeaseRecord {
                id,
                start,
                end,
                write: r.write,
            });
            inner
                .allocs
                .get_mut(&r.handle)
                .expect("resolved above")
                .lease_count += 1;
            granted.push(Granted {
                id,
                handle: r.handle,
                start,
                len: end - start,
                write: r.write,
            });
        }
        Ok(Leases {
            slm: Arc::clone(self),
            granted,
        })
    }

    fn release(&self, granted: &[Granted]) {
        let mut inner = self.lock();
        for g in granted {
            let pos = inner
                .leases
                .iter()
                .position(|l| l.id == g.id)
                .expect("a granted lease is recorded");
            inner.leases.swap_remove(pos);
            let a = inner
                .allocs
                .get_mut(&g.handle)
                .expect("a leased allocation is not freed");
            a.lease_count -= 1;
            if a.orphaned && a.lease_count == 0 {
                let a = inner.allocs.remove(&g.handle).expect("looked up above");
                self.retire(&mut inner, a);
            }
        }
    }

    /// Copies `buf.len()` bytes from `owner`'s allocation into `buf`.
    pub fn read(
        self: &Arc<Self>,
        owner: ClientId,
        handle: MemHandle,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), SlmError> {
        let req = LeaseRequest {
            handle,
            offset,
            len: buf.len() as u64,
            write: false,
            overwrite: false,
        };
        let leases = self.lease(owner, &[req])?;
        buf.copy_from_slice(leases.slice(0));
        Ok(())
    }

    /// Copies `data` into `owner`'s allocation.
    pub fn write(
        self: &Arc<Self>,
        owner: ClientId,
        handle: MemHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), SlmError> {
        let req = LeaseRequest {
            handle,
            offset,
            len: data.len() as u64,
            write: true,
            overwrite: true,
        };
        let mut leases = self.lease(owner, &[req])?;
        leases.slice_mut(0).copy_from_slice(data);
        leases.overwritten(0);
        Ok(())
    }

    /// Sets `len` bytes of `owner`'s allocation to `byte`.
    pub fn fill(
        self: &Arc<Self>,
        owner: ClientId,
        handle: MemHandle,
        offset: u64,
        len: u64,
        byte: u8,
    ) -> Result<(), SlmError> {
        let req = LeaseRequest {
            handle,
            offset,
            len,
            write: true,
            overwrite: true,
        };
        let mut leases = self.lease(owner, &[req])?;
        leases.slice_mut(0).fill(byte);
        leases.overwritten(0);
        Ok(())
    }

    /// Checks the allocator's bookkeeping (tests and debug builds; O(n)).
    pub fn check(&self) {
        let inner = self.lock();
        let mut runs: Vec<(u64, u64)> =
            inner.free.by_offset.iter().map(|(&o, &l)| (o, l)).collect();
        runs.extend(inner.allocs.values().map(|a| (a.start, a.reserved_bytes)));
        runs.sort_unstable();
        let mut end = 0;
        for (o, l) in runs {
            assert_eq!(o, end, "gap or overlap at {o}");
            end = o + l;
        }
        assert_eq!(
            end,
            self.buffer.len() as u64 - self.buffer.len() as u64 % SLM_ALIGNMENT
        );
        let reserved: u64 = inner.allocs.values().map(|a| a.reserved_bytes).sum();
        assert_eq!(reserved + inner.free.free_bytes, end);
        let mut last = None;
        for (&s, &e) in &inner.dirty {
            assert!(s < e && e <= self.buffer.len() as u64, "dirty run {s}..{e}");
            if let Some(l) = last {
                assert!(l < s, "dirty runs touch or overlap at {s}");
            }
            last = Some(e);
        }
        for a in inner.allocs.values() {
            let n = inner
                .leases
                .iter()
                .filter(|l| l.start < a.start + a.reserved_bytes && a.start < l.end)
                .count();
            assert_eq!(n as u32, a.lease_count);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Granted {
    id: u64,
    handle: MemHandle,
    start: u64,
    len: u64,
    write: bool,
}

/// Ranges of SLM a command holds; released on drop.
pub struct Leases {
    slm: Arc<Slm>,
    granted: Vec<Granted>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("granted", &self.granted)
            .finish_non_exhaustive()
    }
}

impl Leases {
    /// Number of ranges held.
    pub fn len(&self) -> usize {
        self.granted.len()
    }

    /// Whether no range is held.
    pub fn is_empty(&self) -> bool {
        self.granted.is_empty()
    }

    /// Range `i`, readable.
    pub fn slice(&self, i: usize) -> &[u8] {
        let g = self.granted[i];
        // SAFETY: the lease table holds a lease on these bytes for as long as `self`
        // lives; no writer lease overlaps it unless it is this lease itself, and writes
        // through it need `&mut self`, which `&self` excludes. The range lies inside the
        // buffer (checked against the allocation, which lies inside the buffer).
        unsafe {
            std::slice::from_raw_parts(
                self.slm.buffer.as_ptr().add(g.start as usize),
                g.len as usize,
            )
        }
    }

    /// Range `i`, writable. Panics if it was leased for reading only.
    pub fn slice_mut(&mut self, i: usize) -> &mut [u8] {
        let g = self.granted[i];
        assert!(g.write, "range {i} was leased read-only");
        // SAFETY: a write lease excludes every other lease on these bytes, and `&mut
        // self` excludes every other slice from this `Leases`; the range is inside the
        // buffer (see `slice`).
        unsafe {
            std::slice::from_raw_parts_mut(
                self.slm.buffer.as_ptr().add(g.start as usize),
                g.len as usize,
            )
        }
    }

    /// Every range at once, writable ones as `Ok(&mut)`, read-only ones as `Err(&)`, for
    /// mapping them all into one VM memory map.
    pub fn slices_mut(&mut self) -> Vec<Result<&mut [u8], &[u8]>> {
        let base = self.slm.buffer.as_ptr();
        self.granted
            .iter()
            .map(|g| {
                // SAFETY: as in `slice_mut` and `slice`. The ranges of one `Leases` do not
                // overlap where either is writable (checked in `Slm::lease`), so these
                // slices are disjoint from each other wherever one is mutable, and all of
                // them borrow `self` mutably, so no other slice of it exists meanwhile.
                unsafe {
                    let p = base.add(g.start as usize);
                    if g.write {
                        Ok(std::slice::from_raw_parts_mut(p, g.len as usize))
                    } else {
                        Err(&*std::ptr::slice_from_raw_parts(p, g.len as usize))
                    }
                }
            })
            .collect()
    }
}

impl Leases {
    /// Says that the command wrote range `i` (leased to overwrite) whole: none of its
    /// bytes is a previous allocation's any more, so no later lease zeroes them.
    pub fn overwritten(&self, i: usize) {
        let g = self.granted[i];
        assert!(g.write, "range {i} was leased read-only");
        let mut inner = self.slm.lock();
        let a = inner
            .allocs
            .get_mut(&g.handle)
            .expect("a leased allocation is not freed");
        cut_ranges(&mut a.unzeroed, g.start, g.start + g.len, |_, _| {});
    }
}

/// Removes `[start, end)` from `ranges` (half-open, absolute), calling `cut` with each
/// part removed.
fn cut_ranges(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64, mut cut: impl FnMut(u64, u64)) {
    let mut keep = Vec::with_capacity(ranges.len());
    for &(s, e) in ranges.iter() {
        let (lo, hi) = (s.max(start), e.min(end));
        if lo >= hi {
            keep.push((s, e));
            continue;
        }
        cut(lo, hi);
        if s < lo {
            keep.push((s, lo));
        }
        if hi < e {
            keep.push((hi, e));
        }
    }
    *ranges = keep;
}

impl Drop for Leases {
    fn drop(&mut self) {
        self.slm.release(&self.granted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ClientId = ClientId(1);
    const B: ClientId = ClientId(2);

    fn slm(size: u64) -> Arc<Slm> {
        let s = Arc::new(Slm::new(size));
        s.register_client(A);
        s.register_client(B);
        s
    }

    fn w(handle: MemHandle, offset: u64, len: u64) -> LeaseRequest {
        LeaseRequest {
            handle,
            offset,
            len,
            write: true,
            overwrite: false,
        }
    }

    #[test]
    fn large_allocations_start_on_a_page() {
        let s = slm(1 << 20);
        let small = s.alloc(A, 100).unwrap();
        let large = s.alloc(A, PAGE_ALIGNED_MIN).unwrap();
        let leases = s.lease(A, &[w(small, 0, 100), w(large, 0, 4096)]).unwrap();
        let addr = |i: usize| leases.slice(i).as_ptr() as u64;
        assert_eq!(addr(0) % SLM_ALIGNMENT, 0);
        assert_eq!(addr(1) % PAGE_ALIGNMENT, 0, "{:#x}", addr(1));
        drop(leases);
        s.check();
        // The head skipped for the alignment stays free for small allocations.
        assert_eq!(s.free_bytes(), (1 << 20) - 128 - PAGE_ALIGNED_MIN);
        let fill: Vec<MemHandle> = (0..31).map(|_| s.alloc(A, 128).unwrap()).collect();
        s.check();
        assert_eq!(fill.len(), 31);
        // A space too tight for an aligned start still takes an unaligned allocation.
        let tight = slm(PAGE_ALIGNED_MIN + 64);
        let _head = tight.alloc(A, 64).unwrap();
        assert!(tight.alloc(A, PAGE_ALIGNED_MIN).is_ok());
    }

    #[test]
    fn alloc_free_coalesce() {
        let s = slm(4096);
        let a = s.alloc(A, 1000).unwrap();
        let b = s.alloc(A, 1000).unwrap();
        let c = s.alloc(A, 1000).unwrap();
        s.check();
        assert_eq!(s.free_bytes(), 4096 - 3 * 1024);
        assert!(matches!(s.alloc(A, 2048), Err(SlmError::NoMemory { .. })));
        s.free(A, b).unwrap();
        s.free(A, a).unwrap();
        s.check();
        // a and b merged: 2048 contiguous bytes fit again.
        let d = s.alloc(A, 2048).unwrap();
        s.check();
        s.free(A, c).unwrap();
        s.free(A, d).unwrap();
        assert_eq!(s.free_bytes(), 4096);
        assert_eq!(s.free(A, d), Err(SlmError::UnknownHandle { handle: d }));
    }

    #[test]
    fn owners_and_bounds() {
        let s = slm(4096);
        let a = s.alloc(A, 100).unwrap();
        assert_eq!(s.free(B, a), Err(SlmError::UnknownHandle { handle: a }));
        assert!(matches!(
            s.lease(B, &[w(a, 0, 1)]),
            Err(SlmError::UnknownHandle { .. })
        ));
        assert!(matches!(
            s.lease(A, &[w(a, 50, 51)]),
            Err(SlmError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.lease(A, &[w(a, u64::MAX, 2)]),
            Err(SlmError::OutOfRange { .. })
        ));
        s.write(A, a, 98, &[7, 8]).unwrap();
        let mut buf = [0u8; 3];
        s.read(A, a, 97, &mut buf).unwrap();
        assert_eq!(buf, [0, 7, 8]);
    }

    #[test]
    fn leases_conflict_and_release() {
        let s = slm(4096);
        let a = s.alloc(A, 100).unwrap();
        let l = s.lease(A, &[w(a, 0, 10)]).unwrap();
        assert!(matches!(
            s.lease(A, &[w(a, 9, 1)]),
            Err(SlmError::InUse { .. })
        ));
        assert!(s.lease(A, &[w(a, 10, 1)]).is_ok());
        assert!(matches!(s.free(A, a), Err(SlmError::InUse { .. })));
        drop(l);
        let r1 = s
            .lease(
                A,
                &[LeaseRequest {
                    handle: a,
                    offset: 0,
                    len: 10,
                    write: false,
                    overwrite: false,
                }],
            )
            .unwrap();
        let r2 = s
            .lease(
                A,
                &[LeaseRequest {
                    handle: a,
                    offset: 5,
                    len: 10,
                    write: false,
                    overwrite: false,
                }],
            )
            .unwrap();
        assert!(s.lease(A, &[w(a, 0, 1)]).is_err());
        drop((r1, r2));
        assert!(matches!(
            s.lease(A, &[w(a, 0, 10), w(a, 5, 1)]),
            Err(SlmError::Overlap {
                first: 0,
                second: 1
            })
        ));
        s.check();
        s.free(A, a).unwrap();
    }

    #[test]
    fn reclaim_defers_leased_allocations() {
        let s = slm(4096);
        let a = s.alloc(A, 100).unwrap();
        let _b = s.alloc(A, 100).unwrap();
        let l = s.lease(A, &[w(a, 0, 1)]).unwrap();
        s.reclaim(A);
        assert_eq!(s.free_bytes(), 4096 - 128);
        assert_eq!(s.alloc(A, 1), Err(SlmError::ClientGone));
        drop(l);
        assert_eq!(s.free_bytes(), 4096);
        s.check();
    }

    /// `len` bytes of a memory file, mapped shared (unmapped on drop), as a host maps
    /// what `Slm::share` returns.
    struct HostMap(*mut u8, usize);

    impl HostMap {
        fn new(fd: &OwnedFd, len: usize) -> HostMap {
            // SAFETY: a shared mapping of an open descriptor, no address hint; checked.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            HostMap(p.cast(), len)
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: `len` mapped bytes; the tests touch them only between commands.
            unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
        }
    }

    impl Drop for HostMap {
        fn drop(&mut self) {
            // SAFETY: the mapping `new` made.
            unsafe { libc::munmap(self.0.cast(), self.1) };
        }
    }

    #[test]
    fn a_shared_allocation_is_the_mapping_and_free_detaches_it() {
        let s = slm(1 << 20);
        let filler = s.alloc(A, 64).unwrap();
        let a = s.alloc(A, 8192).unwrap();
        s.fill(A, a, 4096, 4096, 0x5a).unwrap();
        let fd = s.share(A, a).unwrap();
        let mut map = HostMap::new(&fd, 8192);
        // The bytes it held before come along; writes either way need no copy.
        assert_eq!(map.bytes()[4096], 0x5a);
        assert_eq!(map.bytes()[0], 0);
        map.bytes()[..4].copy_from_slice(b"host");
        let mut seen = [0u8; 4];
        s.read(A, a, 0, &mut seen).unwrap();
        assert_eq!(&seen, b"host");
        s.write(A, a, 100, b"device").unwrap();
        assert_eq!(&map.bytes()[100..106], b"device");
        // Sharing again gives the same memory.
        let mut again = HostMap::new(&s.share(A, a).unwrap(), 8192);
        assert_eq!(&again.bytes()[..4], b"host");
        // Another client gets nothing; nor does a command-held allocation.
        assert!(matches!(
            s.share(B, a),
            Err(ShareError::Slm(SlmError::UnknownHandle { .. }))
        ));
        let lease = s.lease(A, &[w(a, 0, 16)]).unwrap();
        let b = s.alloc(A, 4096).unwrap();
        let held = s.lease(A, &[w(b, 0, 16)]).unwrap();
        assert!(matches!(
            s.share(A, b),
            Err(ShareError::Slm(SlmError::InUse { .. }))
        ));
        drop((lease, held));
        // Freed: the old mapping no longer reaches device memory, and the allocation
        // made in its place starts zeroed.
        s.free(A, a).unwrap();
        map.bytes()[..4].copy_from_slice(b"late");
        let c = s.alloc(A, 8192).unwrap();
        let mut fresh = [1u8; 8];
        s.read(A, c, 0, &mut fresh).unwrap();
        assert_eq!(fresh, [0; 8]);
        s.write(A, c, 0, b"new").unwrap();
        assert_eq!(&map.bytes()[..4], b"late");
        drop(again);
        s.free(A, filler).unwrap();
        s.check();
    }

    #[test]
    fn only_whole_page_allocations_are_shared() {
        let s = slm(1 << 20);
        let small = s.alloc(A, 100).unwrap();
        assert!(matches!(
            s.share(A, small),
            Err(ShareError::NotPages { .. })
        ));
        let paged = s.alloc(A, 4096).unwrap();
        assert!(s.share(A, paged).is_ok());
        // A departed client's shared allocation is reclaimed like any other.
        s.reclaim(A);
        s.check();
        assert_eq!(
            s.free_bytes(),
            s.size_bytes() - s.size_bytes() % SLM_ALIGNMENT
        );
    }

    #[test]
    fn allocations_start_zeroed() {
        let s = slm(4096);
        let a = s.alloc(A, 64).unwrap();
        s.fill(A, a, 0, 64, 0xAA).unwrap();
        s.free(A, a).unwrap();
        let b = s.alloc(A, 64).unwrap();
        let mut buf = [1u8; 64];
        s.read(A, b, 0, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 64]);
    }

    #[test]
    fn only_bytes_ever_handed_out_are_zeroed_again() {
        let s = slm(1 << 20);
        // Fresh memory: nothing to zero.
        assert!(s.lock().dirty_then_mark(0, 4096).is_empty());
        // Parts overlapping what was handed out, merged into one run.
        assert_eq!(s.lock().dirty_then_mark(8192, 12288), []);
        assert_eq!(
            s.lock().dirty_then_mark(2048, 10240),
            [(2048, 4096), (8192, 10240)]
        );
        assert_eq!(s.lock().dirty, BTreeMap::from([(0, 12288)]));
        // A run touching the range from below is merged without being zeroed.
        assert_eq!(s.lock().dirty_then_mark(12288, 16384), []);
        assert_eq!(s.lock().dirty_then_mark(0, 16384), [(0, 16384)]);
        assert_eq!(s.lock().dirty, BTreeMap::from([(0, 16384)]));
        // Through the allocator: written bytes freed and taken again read as zeros, and
        // the books hold one run per contiguous stretch ever allocated.
        let s = slm(1 << 16);
        let a = s.alloc(A, 1000).unwrap();
        let b = s.alloc(A, 3000).unwrap();
        s.fill(A, a, 0, 1000, 0xAA).unwrap();
        s.fill(A, b, 0, 3000, 0xBB).unwrap();
        s.free(A, a).unwrap();
        s.free(A, b).unwrap();
        let c = s.alloc(A, 8000).unwrap();
        let mut buf = vec![1u8; 8000];
        s.read(A, c, 0, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
        s.check();
        assert_eq!(s.lock().dirty.len(), 1);
        // Large allocations: fresh parts the OS zero pages, dirty parts zeroed, all zero.
        let s = slm(8 << 20);
        let a = s.alloc(A, 3 << 20).unwrap();
        let mut buf = vec![1u8; 5 << 20];
        s.read(A, a, 0, &mut buf[..3 << 20]).unwrap();
        assert!(buf[..3 << 20].iter().all(|&x| x == 0));
        s.fill(A, a, 0, 3 << 20, 0xCC).unwrap();
        s.free(A, a).unwrap();
        let b = s.alloc(A, 5 << 20).unwrap();
        buf.fill(1);
        s.read(A, b, 0, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
        s.check();
    }

    proptest::proptest! {
        /// Random allocations, frees, leases and reclaims keep the allocator's books
        /// balanced and never hand out overlapping bytes.
        #[test]
        fn random_operations_keep_invariants(ops in proptest::collection::vec((0u8..4, 1u64..5000, 0usize..16), 1..200)) {
            let s = slm(1 << 16);
            let mut live: Vec<(ClientId, MemHandle)> = Vec::new();
            let mut held = Vec::new();
            for (kind, size, pick) in ops {
                let owner = if size % 2 == 0 { A } else { B };
                match kind {
                    0 => {
                        if let Ok(h) = s.alloc(owner, size) {
                            live.push((owner, h));
                        }
                    }
                    1 if !live.is_empty() => {
                        let (o, h) = live[pick % live.len()];
                        if s.free(o, h).is_ok() {
                            live.retain(|&(_, x)| x != h);
                        }
                    }
                    2 if !live.is_empty() => {
                        let (o, h) = live[pick % live.len()];
                        if let Ok(l) = s.lease(o, &[w(h, 0, 1)]) {
                            held.push(l);
                        }
                    }
                    _ => {
                        held.clear();
                    }
                }
                s.check();
            }
            held.clear();
            s.reclaim(A);
            s.reclaim(B);
            s.check();
            proptest::prop_assert_eq!(s.free_bytes(), 1 << 16);
        }
    }

    #[test]
    fn slices_mut_are_disjoint() {
        let s = slm(4096);
        let a = s.alloc(A, 64).unwrap();
        let b = s.alloc(A, 64).unwrap();
        let mut l = s.lease(A, &[w(a, 0, 8), w(b, 0, 8)]).unwrap();
        let mut v = l.slices_mut();
        v[0].as_mut().unwrap().fill(1);
        v[1].as_mut().unwrap().fill(2);
        drop(v);
        assert_eq!(l.slice(0), &[1; 8]);
        assert_eq!(l.slice(1), &[2; 8]);
    }

    /// Memory freed dirty and allocated again is never read with its old bytes: a lease
    /// to overwrite skips the zeroing only until it says it wrote the range whole; one
    /// that fails (drops without saying so) leaves its range to be zeroed before the
    /// next lease, and the parts it did not cover are zeroed for any reader.
    #[test]
    fn old_bytes_are_zeroed_before_any_read_unless_overwritten_whole() {
        let s = slm(1 << 16);
        let dirty = |s: &Arc<Slm>| {
            let a = s.alloc(A, 4096).unwrap();
            s.fill(A, a, 0, 4096, 0xEE).unwrap();
            s.free(A, a).unwrap();
            let b = s.alloc(A, 4096).unwrap();
            assert!(s.lock().allocs[&b].unzeroed.iter().any(|&(x, y)| x < y));
            b
        };
        let ow = |h, offset, len| LeaseRequest {
            overwrite: true,
            ..w(h, offset, len)
        };
        // Overwritten whole: the new bytes stay; the rest reads as zeros.
        let b = dirty(&s);
        let mut l = s.lease(A, &[ow(b, 100, 200)]).unwrap();
        l.slice_mut(0).fill(7);
        l.overwritten(0);
        drop(l);
        let mut buf = vec![1u8; 4096];
        s.read(A, b, 0, &mut buf).unwrap();
        assert!(buf[..100].iter().all(|&x| x == 0));
        assert!(buf[100..300].iter().all(|&x| x == 7));
        assert!(buf[300..].iter().all(|&x| x == 0));
        s.free(A, b).unwrap();
        // A copy that failed half-way: its bytes are zeroed before the next read.
        let b = dirty(&s);
        let mut l = s.lease(A, &[ow(b, 0, 4096)]).unwrap();
        l.slice_mut(0)[..10].fill(7);
        drop(l);
        s.read(A, b, 0, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
        s.free(A, b).unwrap();
        // A lease that may read (a program's window) zeroes first; so does sharing.
        let b = dirty(&s);
        let l = s.lease(A, &[w(b, 0, 4096)]).unwrap();
        assert!(l.slice(0).iter().all(|&x| x == 0));
        drop(l);
        s.free(A, b).unwrap();
        let b = dirty(&s);
        let fd = s.share(A, b).unwrap();
        let mut shared = vec![1u8; 4096];
        let file = std::fs::File::from(fd);
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut shared, 0).unwrap();
        assert!(shared.iter().all(|&x| x == 0));
        s.check();
    }
}
