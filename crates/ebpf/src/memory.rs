//! The program's address space: tagged virtual addresses over a table of regions.
//!
//! A program never sees a host address. Every pointer it holds is a *virtual address*:
//!
//! ```text
//!  63                  32 31                   0
//! +----------------------+----------------------+
//! |    region index      |   offset in region   |
//! +----------------------+----------------------+
//! ```
//!
//! The region table has [`REGIONS_MAX`] fixed slots ([`RegionIdx`]). Index 0 is never
//! mapped, so a null pointer (or any small integer) faults. The engines own the stack
//! and global slots; the embedder maps its own buffers (windows, shared state, argument
//! block) into the embedder slots.
//!
//! An access of `size` bytes at `addr` is allowed when
//! `idx = addr >> 32 < REGIONS_MAX` and `(addr as u32) + size <= len`, where `len` is
//! the entry's `read_len` for loads and its `write_len` for stores and atomics. A
//! read-only region has `write_len == 0`. Unmapped entries have both lengths 0, so the
//! one comparison covers them too. This is the check the JIT emits inline.
//!
//! Invariant: an entry's `base` is valid for `max(read_len, write_len)` bytes for the
//! lifetime `'a` of the map, and writable for `write_len` bytes.

use std::marker::PhantomData;

use crate::limits::{REGIONS_MAX, REGION_SIZE_MAX};
use crate::trap::TrapKind;

/// A slot in the region table. The layout of the table is part of the program ABI:
/// programs compiled against it carry these indices in their pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionIdx(pub u32);

impl RegionIdx {
    /// Never mapped: faults every null-ish pointer.
    pub const NULL: RegionIdx = RegionIdx(0);
    /// The call stack, owned by the engine.
    pub const STACK: RegionIdx = RegionIdx(1);
    /// First slot the embedder may map.
    pub const EMBEDDER_FIRST: RegionIdx = RegionIdx(2);
    /// Embedder slots: `EMBEDDER_FIRST .. EMBEDDER_FIRST + EMBEDDER_COUNT`.
    pub const EMBEDDER_COUNT: u32 = 20;
    /// First slot for the program's global data sections, owned by the engine.
    pub const GLOBALS_FIRST: RegionIdx = RegionIdx(22);
    /// Global slots: `GLOBALS_FIRST .. GLOBALS_FIRST + GLOBALS_COUNT`.
    pub const GLOBALS_COUNT: u32 = 10;

    /// The embedder slot `n` (0-based), if there is one.
    pub fn embedder(n: u32) -> Option<RegionIdx> {
        (n < Self::EMBEDDER_COUNT).then_some(RegionIdx(Self::EMBEDDER_FIRST.0 + n))
    }

    /// The global-section slot `n` (0-based), if there is one.
    pub fn global(n: u32) -> Option<RegionIdx> {
        (n < Self::GLOBALS_COUNT).then_some(RegionIdx(Self::GLOBALS_FIRST.0 + n))
    }

    /// The virtual address of byte `offset` of this region.
    pub const fn vaddr(self, offset: u32) -> u64 {
        ((self.0 as u64) << 32) | offset as u64
    }
}

const _: () = assert!(RegionIdx::GLOBALS_FIRST.0 + RegionIdx::GLOBALS_COUNT == REGIONS_MAX as u32);
const _: () =
    assert!(RegionIdx::EMBEDDER_FIRST.0 + RegionIdx::EMBEDDER_COUNT == RegionIdx::GLOBALS_FIRST.0);

/// One row of the region table, read directly by JIT-compiled code.
///
/// ```text
/// offset  size  field
///      0     8  base       host address of byte 0
///      8     8  read_len   bytes loads may touch
///     16     8  write_len  bytes stores may touch (0: read-only or unmapped)
///     24     8  reserved   keeps the row 32 bytes, a shift away
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegionEntry {
    pub base: *mut u8,
    pub read_len: u64,
    pub write_len: u64,
    reserved: u64,
}

impl RegionEntry {
    /// Offset of `base` in the row, for code generators.
    pub const OFFSET_BASE: i32 = 0;
    /// Offset of `read_len` in the row, for code generators.
    pub const OFFSET_READ_LEN: i32 = 8;
    /// Offset of `write_len` in the row, for code generators.
    pub const OFFSET_WRITE_LEN: i32 = 16;
    /// Size of a row in bytes (a power of two).
    pub const SIZE: usize = 32;
    /// log2 of [`Self::SIZE`].
    pub const SIZE_SHIFT: u32 = 5;

    const UNMAPPED: RegionEntry = RegionEntry {
        base: std::ptr::null_mut(),
        read_len: 0,
        write_len: 0,
        reserved: 0,
    };
}

const _: () = assert!(std::mem::size_of::<RegionEntry>() == RegionEntry::SIZE);
const _: () = assert!(1 << RegionEntry::SIZE_SHIFT == RegionEntry::SIZE);

/// Errors from mapping a buffer into the region table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    #[error("region {idx} is outside the table of {REGIONS_MAX} regions")]
    IndexOutOfRange { idx: u32 },
    #[error("region of {len} bytes exceeds the limit of {REGION_SIZE_MAX} bytes")]
    TooLarge { len: u64 },
}

/// The region table a run sees, borrowing every mapped buffer for `'a`.
///
/// Cheap to build (a fixed array); an embedder builds one per run, or keeps one and
/// remaps. Engines map the stack and global slots themselves before running.
#[derive(Debug)]
pub struct MemoryMap<'a> {
    entries: [RegionEntry; REGIONS_MAX],
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: a `MemoryMap` is only a table of borrowed slices (`&'a [u8]` or
// `&'a mut [u8]`, see the invariant in the module doc); sending it to another thread is
// the same as sending those borrows, which are `Send`. Raw mappings made with
// `map_raw` carry the caller's promise of the same.
unsafe impl Send for MemoryMap<'_> {}

impl Default for MemoryMap<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> MemoryMap<'a> {
    /// An empty table: every access faults.
    pub fn new() -> Self {
        MemoryMap {
            entries: [RegionEntry::UNMAPPED; REGIONS_MAX],
            _borrow: PhantomData,
        }
    }

    fn check(idx: RegionIdx, len: usize) -> Result<(), MapError> {
        if idx.0 as usize >= REGIONS_MAX {
            return Err(MapError::IndexOutOfRange { idx: idx.0 });
        }
        if len as u64 > REGION_SIZE_MAX {
            return Err(MapError::TooLarge { len: len as u64 });
        }
        Ok(())
    }

    /// Maps `buf` read-only at `idx`; returns the virtual address of its first byte.
    pub fn map_read_only(&mut self, idx: RegionIdx, buf: &'a [u8]) -> Result<u64, MapError> {
        Self::check(idx, buf.len())?;
        self.entries[idx.0 as usize] = RegionEntry {
            // Never written through: write_len is 0.
            base: buf.as_ptr().cast_mut(),
            read_len: buf.len() as u64,
            write_len: 0,
            reserved: 0,
        };
        Ok(idx.vaddr(0))
    }

    /// Maps `buf` readable and writable at `idx`; returns its virtual address.
    pub fn map_read_write(&mut self, idx: RegionIdx, buf: &'a mut [u8]) -> Result<u64, MapError> {
        Self::check(idx, buf.len())?;
        self.entries[idx.0 as usize] = RegionEntry {
            base: buf.as_mut_ptr(),
            read_len: buf.len() as u64,
            write_len: buf.len() as u64,
            reserved: 0,
        };
        Ok(idx.vaddr(0))
    }

    /// Maps `len` bytes at `ptr`, for memory shared between runs on several threads
    /// (a device's shared state) that cannot be lent as a `&mut [u8]`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, and for writes if `writable`, for
    /// as long as this map or any run using it lives. Concurrent writers to the same
    /// bytes race the way concurrent C programs on shared memory do; the caller accepts
    /// that the contents are then unspecified (never that the VM misbehaves).
    pub unsafe fn map_raw(
        &mut self,
        idx: RegionIdx,
        ptr: *mut u8,
        len: usize,
        writable: bool,
    ) -> Result<u64, MapError> {
        Self::check(idx, len)?;
        self.entries[idx.0 as usize] = RegionEntry {
            base: ptr,
            read_len: len as u64,
            write_len: if writable { len as u64 } else { 0 },
            reserved: 0,
        };
        Ok(idx.vaddr(0))
    }

    /// Removes the mapping at `idx` (no-op if out of range or unmapped).
    pub fn unmap(&mut self, idx: RegionIdx) {
        if let Some(e) = self.entries.get_mut(idx.0 as usize) {
            *e = RegionEntry::UNMAPPED;
        }
    }

    /// The raw table, for JIT-compiled code (which receives its address).
    pub fn entries_ptr(&mut self) -> *mut RegionEntry {
        self.entries.as_mut_ptr()
    }

    /// The table, for inspection.
    pub fn entries(&self) -> &[RegionEntry; REGIONS_MAX] {
        &self.entries
    }

    /// Resolves an access of `len` bytes at `addr` to a host pointer, or the trap the
    /// access raises. `len` may be 0 (always allowed inside or at the end of a region).
    #[inline(always)]
    pub fn translate(&self, addr: u64, len: u64, write: bool) -> Result<*mut u8, TrapKind> {
        let idx = (addr >> 32) as usize;
        let off = addr & 0xffff_ffff;
        if let Some(e) = self.entries.get(idx) {
            let limit = if write { e.write_len } else { e.read_len };
            // Written so that no sum can overflow, whatever `len` a helper passes.
            if len <= limit && off <= limit - len {
                // `off + len <= limit <= region length`, so the offset stays in bounds.
                return Ok(e.base.wrapping_add(off as usize));
            }
        }
        Err(self.classify_fault(addr, len, write))
    }

    /// The precise trap for a failed access: out of bounds, or a write to a read-only
    /// region. Kept out of line: it only runs when a program is about to trap.
    #[cold]
    pub fn classify_fault(&self, addr: u64, len: u64, write: bool) -> TrapKind {
        let idx = (addr >> 32) as usize;
        let off = addr & 0xffff_ffff;
        let size = len.min(u64::from(u32::MAX)) as u32;
        match self.entries.get(idx) {
            Some(e)
                if write && e.write_len == 0 && len <= e.read_len && off <= e.read_len - len =>
            {
                TrapKind::ReadOnly { addr, size }
            }
            _ => TrapKind::OutOfBounds { addr, size, write },
        }
    }

    /// Borrows `len` readable bytes at `addr`.
    pub fn slice(&self, addr: u64, len: u64) -> Result<&[u8], TrapKind> {
        let p = self.translate(addr, len, false)?;
        if len == 0 {
            // An unmapped row's base is null, which `from_raw_parts` forbids even for
            // an empty slice.
            return Ok(&[]);
        }
        // SAFETY: `translate` checked that `len` bytes from `p` lie inside a mapped
        // region, valid for reads for `'a` (module invariant). `&self` prevents a
        // `&mut` slice from this map from existing at the same time.
        Ok(unsafe { std::slice::from_raw_parts(p, len as usize) })
    }

    /// Borrows `len` writable bytes at `addr`.
    pub fn slice_mut(&mut self, addr: u64, len: u64) -> Result<&mut [u8], TrapKind> {
        let p = self.translate(addr, len, true)?;
        if len == 0 {
            // See `slice`: the base may be null.
            return Ok(&mut []);
        }
        // SAFETY: `translate` checked that `len` bytes from `p` lie inside a region
        // mapped writable for `'a`. `&mut self` makes this the only live slice.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len as usize) })
    }

    /// Copies `len` bytes from `src` to `dst`, which may overlap (memmove semantics).
    pub fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), TrapKind> {
        let s = self.translate(src, len, false)?;
        let d = self.translate(dst, len, true)?;
        if len == 0 {
            // See `slice`: the bases may be null.
            return Ok(());
        }
        // SAFETY: both ranges were checked to lie inside mapped regions (read and
        // write respectively); `ptr::copy` allows them to overlap.
        unsafe { std::ptr::copy(s, d, len as usize) };
        Ok(())
    }

    /// Loads a little-endian value of `size` bytes (1, 2, 4 or 8), zero-extended.
    #[inline(always)]
    pub fn load(&self, addr: u64, size: u8) -> Result<u64, TrapKind> {
        let p = self.translate(addr, u64::from(size), false)?;
        // SAFETY: `translate` proved `size` readable bytes at `p`; unaligned reads are
        // used because eBPF permits unaligned access.
        Ok(unsafe { read_host(p, u64::from(size)) })
    }

    /// Stores the low `size` bytes (1, 2, 4 or 8) of `value`, little-endian.
    #[inline(always)]
    pub fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), TrapKind> {
        let p = self.translate(addr, u64::from(size), true)?;
        // SAFETY: `translate` proved `size` writable bytes at `p`; unaligned writes
        // because eBPF permits unaligned access.
        unsafe { write_host(p, u64::from(size), value) }
        Ok(())
    }
}

/// Reads a little-endian value of `size` bytes (1, 2, 4 or 8) at `p`, zero-extended.
///
/// # Safety
/// `p` must be valid for reads of `size` bytes (any alignment).
#[inline(always)]
pub(crate) unsafe fn read_host(p: *const u8, size: u64) -> u64 {
    // SAFETY: the caller's promise; unaligned reads, as eBPF permits unaligned access.
    unsafe {
        match size {
            1 => u64::from(p.read()),
            2 => u64::from(p.cast::<u16>().read_unaligned()),
            4 => u64::from(p.cast::<u32>().read_unaligned()),
            _ => p.cast::<u64>().read_unaligned(),
        }
    }
}

/// Writes the low `size` bytes (1, 2, 4 or 8) of `value` at `p`, little-endian.
///
/// # Safety
/// `p` must be valid for writes of `size` bytes (any alignment).
#[inline(always)]
pub(crate) unsafe fn write_host(p: *mut u8, size: u64, value: u64) {
    // SAFETY: the caller's promise; unaligned writes, as eBPF permits unaligned access.
    unsafe {
        match size {
            1 => p.write(value as u8),
            2 => p.cast::<u16>().write_unaligned(value as u16),
            4 => p.cast::<u32>().write_unaligned(value as u32),
            _ => p.cast::<u64>().write_unaligned(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_page_faults() {
        let m = MemoryMap::new();
        assert_eq!(
            m.load(0, 8),
            Err(TrapKind::OutOfBounds {
                addr: 0,
                size: 8,
                write: false
            })
        );
    }

    #[test]
    fn bounds_and_read_only() {
        let mut a = [1u8, 2, 3, 4];
        let b = [9u8; 4];
        let mut m = MemoryMap::new();
        let va = m.map_read_write(RegionIdx(2), &mut a).unwrap();
        let vb = m.map_read_only(RegionIdx(3), &b).unwrap();
        assert_eq!(m.load(va, 4), Ok(0x0403_0201));
        assert!(matches!(
            m.load(va + 1, 4),
            Err(TrapKind::OutOfBounds { .. })
        ));
        assert_eq!(
            m.store(vb, 1, 0),
            Err(TrapKind::ReadOnly { addr: vb, size: 1 })
        );
        assert!(matches!(
            m.store(vb + 4, 1, 0),
            Err(TrapKind::OutOfBounds { .. })
        ));
        m.store(va + 3, 1, 7).unwrap();
        assert_eq!(m.load(va + 3, 1), Ok(7));
        // A huge region index is out of range, not a panic.
        assert!(m.load(u64::MAX, 1).is_err());
    }

    #[test]
    fn empty_ranges_on_unmapped_rows() {
        let mut m = MemoryMap::new();
        assert_eq!(m.slice(0, 0), Ok(&[][..]));
        assert!(m.slice_mut(0, 0).unwrap().is_empty());
        assert_eq!(m.copy(0, 0, 0), Ok(()));
    }

    #[test]
    fn copy_overlapping() {
        let mut a = *b"abcdef";
        let mut m = MemoryMap::new();
        let va = m.map_read_write(RegionIdx(2), &mut a).unwrap();
        m.copy(va + 1, va, 4).unwrap();
        assert_eq!(m.slice(va, 6).unwrap(), b"aabcdf");
    }
}
