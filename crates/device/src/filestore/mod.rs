//! The device's file store: files as extent lists in the NVM namespace, metadata in redb.
//!
//! This is the device's own file system, the one programs read by path (as Delilah's device
//! does) and the host reaches with put, get, list, stat, delete and extents. Files live in a
//! flat namespace of `/`-separated paths (see [`path`] for the canonical spelling); a file
//! is a size plus a list of extents, each mapping a run of the file's blocks to a run of
//! namespace blocks ([`Extent`], like FIEMAP). Extents are first-class: a host-side reader
//! may read a file straight from the image at the extents' namespace offsets, treating the
//! ranges no extent covers as zeros (holes).
//!
//! # Layout
//!
//! - `meta.redb` in the state directory: a redb database with a `superblock` table (format
//!   version, block size, namespace size) and a `files` table from canonical path to the
//!   encoded record (see `record.rs`).
//! - The namespace image holds only file data. Free space is not stored anywhere: at open
//!   it is derived as the complement of every committed extent (`alloc.rs`).
//! - In memory: every record (a `BTreeMap` by path, which also serves listings by prefix),
//!   the allocator, the paths changed since the last flush and the blocks unmapped since
//!   then. All of it sits behind one `RwLock`; reads share it (including their I/O, so a
//!   read never sees blocks reused under it), changes take it exclusively.
//!
//! # Durability and crash safety
//!
//! [`FileStore::flush`] is the durability point. Between flushes, `meta.redb` holds the
//! state of the last flush (the *durable state*) and changes live in memory. The ordering:
//!
//! 1. **Data before metadata.** A flush first `fdatasync`s the image, then commits every
//!    changed record in one durable redb transaction. So every extent the durable state
//!    maps holds, on the media, everything written to it before that flush.
//! 2. **New data never lands in durably mapped blocks.** Blocks unmapped by delete,
//!    truncate or a replacing rename go to a pending list, not to the allocator; they can
//!    be allocated again only after the flush that commits their unmapping. The allocator
//!    therefore only hands out blocks no durable record maps, and a crash can never show a
//!    file holding another file's newer data.
//! 3. **In-place writes.** A write to blocks the file already maps (an overwrite inside
//!    the file, or bytes past its end in its last, partially used block) goes to those
//!    blocks in place, as in a conventional file system. After a crash, a range
//!    overwritten since the last flush may hold the old bytes, the new bytes or a mix (a
//!    torn write). The same holds for the zeroing of the last block's tail when a file
//!    grows, and for in-place bytes a failed write had already written before it failed.
//! 4. **Atomic metadata.** A redb commit is atomic, so after a crash the metadata is
//!    exactly one flushed state: every file, size, rename and delete of that flush, none
//!    from after it. Free space is re-derived from it, so it can neither leak nor be
//!    handed out twice.
//! 5. **Failures poison.** If the image sync or the commit fails, what is durable is
//!    unknown (after a failed `fsync` the kernel may drop the dirty pages and a retry would
//!    falsely succeed), so every later change and flush fails with
//!    [`FileStoreError::Poisoned`]; reopening returns to the durable state. Reads go on.
//!
//! Hence after a crash at any point (process kill or power loss, given a host file system
//! and drive that honour `fdatasync`): every byte acknowledged by a completed flush is
//! intact unless it was overwritten in place after that flush (rule 3); nothing created,
//! deleted or renamed after the last flush is visible; the metadata is consistent.
//!
//! Two conveniences keep the rules cheap: when a write finds too little free space but
//! blocks are pending, the store flushes first to reclaim them (an extra flush is always
//! safe); and dropping the store flushes, best effort (call [`FileStore::flush`] or
//! [`FileStore::close`] to see errors).
//!
//! # Invariants
//!
//! - Every block of the namespace is exactly one of: mapped by one file in memory,
//!   pending, or free in the allocator.
//! - Every block the durable state maps is mapped in memory or pending (rule 2).
//! - No block wholly past a file's size is mapped. The bytes of its last block past the
//!   size are unspecified (after a crash they may hold an unflushed write whose size
//!   change was lost), so growing a file, by a write past its end or by `truncate`, first
//!   zeroes them; new blocks are written whole, the data padded with zeros. Growing thus
//!   never exposes stale bytes.
//! - Path `p` being a file excludes every path below `p/` being one, and `p` being a
//!   directory: the flat namespace stays a tree, so it can be shown as directories.
//!
//! # Directories
//!
//! A directory exists while a file or directory lies below it (*implicit*, as in the flat
//! namespace of old) or when it was made with [`FileStore::mkdir`] (*explicit*, kept in a
//! `dirs` table of `meta.redb`, committed by the same flush as the files). Removing the
//! last entry of a directory makes it explicit, so a directory lasts until `rmdir`, as in
//! POSIX. Renaming a directory moves every path below it in memory; the flush commits the
//! whole move in one transaction, so after a crash it happened entirely or not at all.
//! See `dirs.rs`.

mod alloc;
mod batch;
use csx_proto::crc;
mod dirs;
mod error;
pub mod path;
mod record;
mod sums;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::nvm::{open_private, sync_parent_dir, MediaReads, Nvm, BLOCK_SIZE};
use alloc::{Allocator, BlockRange};
use csx_proto::limits::PARTIAL_DIR;
use record::{ExtentRec, FileRecord, Mapping};
use sums::{BlockSums, Group};

pub use batch::RangeRead;
pub use dirs::{DirEntry, EntryKind, DIRS_MAX};
pub use error::FileStoreError;
pub use path::{PathError, NAME_SIZE_MAX, PATH_SIZE_MAX};
pub use record::EXTENTS_PER_FILE_MAX;

/// Bytes one file may hold (its size, sparse or not). Above any namespace (16 TiB), so a
/// sparse file can be larger than the device, yet far enough from `i64::MAX` that offsets
/// plus lengths never overflow `off_t` on their way to FUSE or the host.
pub const FILE_SIZE_MAX: u64 = 1 << 48;

/// Files one store holds. Every record is kept in memory and read at open, so this bounds
/// the store's memory and open time (about 100 MiB and a second at the limit).
pub const FILES_MAX: usize = 1 << 20;

/// Name of the metadata database in the state directory.
pub const META_FILE_NAME: &str = "meta.redb";

/// redb's page cache. Records are cached by the store itself, so redb's cache only serves
/// commits.
const META_CACHE_BYTES: usize = 16 << 20;

const FILES_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("files");
const SUPERBLOCK_TABLE: TableDefinition<&str, u64> = TableDefinition::new("superblock");
/// Explicit directories: canonical path to creation time (ns since the epoch).
const DIRS_TABLE: TableDefinition<&str, u64> = TableDefinition::new("dirs");
/// Block checksums by group of namespace blocks (see `sums.rs`).
const SUMS_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("block_sums");
const KEY_FORMAT_VERSION: &str = "format_version";
const KEY_BLOCK_SIZE: &str = "block_size";
const KEY_NVM_SIZE: &str = "nvm_size_bytes";
/// Version 2 keeps block checksums. Version 1 (before them) still opens, its blocks
/// unverified until rewritten; the first flush marks it version 2, so a build that does
/// not know checksums cannot open it again and write blocks without them.
const FORMAT_VERSION: u64 = 2;
const FORMAT_VERSION_UNSUMMED: u64 = 1;

const _: () = assert!(FILE_SIZE_MAX > crate::nvm::NVM_SIZE_MAX);
const _: () = assert!(FILE_SIZE_MAX.is_multiple_of(BLOCK_SIZE));
const _: () = assert!((FILE_SIZE_MAX as u128) < (i64::MAX as u128));

/// One extent of a file, in bytes: `len` bytes of the file from `file_offset` are stored
/// in the namespace (the image) from `nvm_offset`. Both offsets are block-aligned; `len` is
/// a whole number of blocks except in the file's last extent, which ends at the file's
/// size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub file_offset: u64,
    pub nvm_offset: u64,
    pub len: u64,
}

/// What [`FileStore::stat`] and [`FileStore::list`] tell about a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    /// Canonical path.
    pub path: String,
    /// Bytes in the file.
    pub size: u64,
    /// Extents mapping the file (holes are not extents).
    pub extents: u32,
    /// Bytes of namespace the file occupies (whole blocks).
    pub allocated_bytes: u64,
    pub created: SystemTime,
    pub modified: SystemTime,
}

/// The file store. `Send + Sync`; every method takes `&self`.
pub struct FileStore {
    nvm: Arc<Nvm>,
    db: Database,
    meta_path: PathBuf,
    state: RwLock<State>,
    #[cfg(test)]
    hooks: TestHooks,
}

#[derive(Debug)]
struct State {
    files: BTreeMap<String, FileRecord>,
    alloc: Allocator,
    /// Blocks unmapped since the last flush: not allocatable until it commits (rule 2).
    pending_free: Vec<BlockRange>,
    pending_blocks: u64,
    /// Paths whose record changed (or disappeared) since the last flush.
    dirty: BTreeSet<String>,
    /// Each path's content version (see [`FileStore::version`]): the store's base for
    /// paths unchanged since it opened, else a fresh one per change.
    versions: ContentVersions,
    /// Explicit directories (made by `mkdir` or kept after their last entry left), with
    /// their creation time.
    dirs: BTreeMap<String, u64>,
    /// Directories added or removed since the last flush.
    dirty_dirs: BTreeSet<String>,
    /// Whether the image was written since the last flush.
    data_dirty: bool,
    /// Block checksums (see `sums.rs`).
    sums: BlockSums,
    /// The durable format version: [`FORMAT_VERSION_UNSUMMED`] until the first commit of
    /// an image made before checksums.
    format_version: u64,
    poisoned: Option<String>,
    /// Flushes completed, explicit or implicit (tests compare it around an operation).
    #[cfg(test)]
    flushes: u64,
}

#[cfg(test)]
#[derive(Debug, Default)]
struct TestHooks {
    /// Fail the next flush after the image sync, before the metadata commit.
    fail_before_commit: std::sync::atomic::AtomicBool,
    /// Drop without flushing, as a crash would.
    skip_flush_on_drop: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("meta_path", &self.meta_path)
            .field("nvm", &self.nvm.path())
            .finish_non_exhaustive()
    }
}

impl FileStore {
    /// Opens the store in `state_dir`, creating an empty one if `meta.redb` is missing.
    /// A device opened after its initialisation should use [`FileStore::open`], so that a
    /// lost metadata file is an error rather than an empty store.
    pub fn open_or_create(state_dir: &Path, nvm: Arc<Nvm>) -> Result<FileStore, FileStoreError> {
        if state_dir.join(META_FILE_NAME).exists() {
            FileStore::open(state_dir, nvm)
        } else {
            FileStore::create(state_dir, nvm)
        }
    }

    /// Creates an empty store for `nvm` in `state_dir` (created if missing). The metadata
    /// file is built under a temporary name and renamed into place, so `meta.redb` is
    /// either absent or complete.
    pub fn create(state_dir: &Path, nvm: Arc<Nvm>) -> Result<FileStore, FileStoreError> {
        fs::create_dir_all(state_dir).map_err(|source| FileStoreError::StateDir {
            path: state_dir.to_path_buf(),
            op: "create",
            source,
        })?;
        let meta_path = state_dir.join(META_FILE_NAME);
        if meta_path.exists() {
            return Err(FileStoreError::MetaExists { path: meta_path });
        }
        let tmp_path = state_dir.join(format!("{META_FILE_NAME}.tmp"));
        match fs::remove_file(&tmp_path) {
            Err(source) if source.kind() != io::ErrorKind::NotFound => {
                return Err(FileStoreError::StateDir {
                    path: tmp_path,
                    op: "remove",
                    source,
                })
            }
            _ => {}
        }
        init_meta(&tmp_path, nvm.size())?;
        fs::rename(&tmp_path, &meta_path).map_err(|source| FileStoreError::StateDir {
            path: meta_path.clone(),
            op: "create",
            source,
        })?;
        sync_parent_dir(&meta_path).map_err(|source| FileStoreError::StateDir {
            path: state_dir.to_path_buf(),
            op: "sync",
            source,
        })?;
        FileStore::open(state_dir, nvm)
    }

    /// Opens the existing store in `state_dir` over `nvm`. Checks the metadata's integrity,
    /// every record, and that the image is the size the metadata describes.
    pub fn open(state_dir: &Path, nvm: Arc<Nvm>) -> Result<FileStore, FileStoreError> {
        let meta_path = state_dir.join(META_FILE_NAME);
        match fs::metadata(&meta_path) {
            Ok(_) => {}
            Err(source) if source.kind() == io::ErrorKind::NotFound => {
                return Err(FileStoreError::MetaMissing { path: meta_path })
            }
            Err(source) => {
                return Err(FileStoreError::StateDir {
                    path: meta_path,
                    op: "inspect",
                    source,
                })
            }
        }
        let db = open_meta(&meta_path)?;
        let mut state = load_state(&db, &meta_path, &nvm)?;
        state.reclaim_partials();
        Ok(FileStore {
            nvm,
            db,
            meta_path,
            state: RwLock::new(state),
            #[cfg(test)]
            hooks: TestHooks::default(),
        })
    }

    /// Mapped blocks that have no checksum, so read unverified: blocks of an image made
    /// before the store kept checksums (format version 1) not rewritten since. Zero for
    /// an image made since.
    pub fn unverified_blocks(&self) -> u64 {
        let st = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut missing = 0;
        for record in st.files.values() {
            for e in &record.extents {
                let mut known = 0;
                st.sums.for_run(e.nvm_block, e.count, |_, _| known += 1);
                missing += e.count - known;
            }
        }
        missing
    }

    /// The namespace the store lives in.
    pub fn nvm(&self) -> &Arc<Nvm> {
        &self.nvm
    }

    /// Bytes of the namespace.
    pub fn capacity_bytes(&self) -> u64 {
        self.nvm.size()
    }

    /// Bytes not mapped by any file (including blocks freed since the last flush, which
    /// the next flush, implicit if need be, makes allocatable).
    pub fn free_bytes(&self) -> u64 {
        // Two counters are safe to read even from a lock poisoned by a panic.
        let st = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (st.alloc.free_blocks() + st.pending_blocks) * BLOCK_SIZE
    }

    /// Writes `data` at byte `offset` of the file, creating the file if it is missing and
    /// extending it if the write ends past its size (a gap before `offset` becomes a
    /// hole). Blocks the write covers that the file does not map are allocated, preferring
    /// to extend the file's extents in place. On any error nothing changes in the metadata
    /// (though in-place bytes may have been written, see the module docs).
    pub fn write_at(&self, path: &str, offset: u64, data: &[u8]) -> Result<(), FileStoreError> {
        let path = canonical(path)?;
        let end = u128::from(offset) + data.len() as u128;
        if end > u128::from(FILE_SIZE_MAX) {
            return Err(FileStoreError::FileTooLarge {
                path,
                size_bytes: end,
                limit: FILE_SIZE_MAX,
            });
        }
        let mut guard = self.write_state()?;
        let st = &mut *guard;
        st.check_usable()?;
        let now = now_ns();
        let is_new = !st.files.contains_key(&path);
        if is_new {
            st.check_create(&path)?;
        }
        if !data.is_empty() {
            if let Err(e) = self.write_blocks(st, &path, offset, data, now) {
                // Bytes written in place before the failure changed the content.
                st.versions.bump(&path);
                return Err(e);
            }
        } else if is_new {
            st.files.insert(path.clone(), FileRecord::new(now));
        }
        st.touch(path);
        Ok(())
    }

    /// The body of a non-empty [`FileStore::write_at`]: plan, allocate, write, then map.
    fn write_blocks(
        &self,
        st: &mut State,
        path: &str,
        offset: u64,
        data: &[u8],
        now: u64,
    ) -> Result<(), FileStoreError> {
        let end = offset + data.len() as u64;
        let first_block = offset / BLOCK_SIZE;
        let end_block = end.div_ceil(BLOCK_SIZE);
        let empty = FileRecord::new(now);

        // 1. Count the blocks to allocate; reclaim pending blocks by a flush if short.
        let needed = hole_blocks(st.files.get(path).unwrap_or(&empty), first_block, end_block);
        if needed > st.alloc.free_blocks() && st.pending_blocks > 0 {
            self.flush_locked(st)?;
        }
        if needed > st.alloc.free_blocks() {
            return Err(FileStoreError::NoSpace {
                path: path.to_owned(),
                needed_bytes: needed * BLOCK_SIZE,
                free_bytes: st.alloc.free_blocks() * BLOCK_SIZE,
            });
        }

        // 2. Allocate the holes and check the extent bound before touching the image.
        let record = st.files.get(path).unwrap_or(&empty);
        let (pieces, fresh) = plan_write(record, &mut st.alloc, first_block, end_block);
        let count = record.count_after_insert(&fresh);
        if count > EXTENTS_PER_FILE_MAX {
            release_all(&mut st.alloc, &fresh);
            return Err(FileStoreError::TooManyExtents {
                path: path.to_owned(),
                count,
                limit: EXTENTS_PER_FILE_MAX,
            });
        }

        // 3. Zero the old last block past the old size if the write leaves a gap there,
        //    then write the data, new blocks padded with zeros, each block's checksum
        //    updated. Undo the allocation on failure.
        let old_size = st.files.get(path).map_or(0, |r| r.size);
        let new_size = old_size.max(end);
        let written = self.write_pieces(st, path, &pieces, offset, data, old_size, new_size);
        if let Err(err) = written {
            release_all(&mut st.alloc, &fresh);
            return Err(err);
        }

        // 4. Map the new blocks: visible now, durable at the next flush.
        let record = st
            .files
            .entry(path.to_owned())
            .or_insert_with(|| FileRecord::new(now));
        record.insert(&fresh);
        record.size = record.size.max(end);
        record.modified_ns = now;
        debug_assert_eq!(record.check(self.nvm.block_count()), Ok(()));
        Ok(())
    }

    /// Zeroes the bytes of the file's last block past its size, before the file grows
    /// to `new_size`, and updates the block's checksum. Returns whether it wrote.
    fn zero_tail(&self, st: &mut State, path: &str, new_size: u64) -> Result<bool, FileStoreError> {
        let Some(record) = st.files.get(path) else {
            return Ok(false);
        };
        let size = record.size;
        if size.is_multiple_of(BLOCK_SIZE) || new_size <= size {
            return Ok(false);
        }
        let block = size / BLOCK_SIZE;
        let Mapping::Mapped { nvm_block, .. } = record.lookup(block) else {
            return Ok(false);
        };
        let mut scratch = self.read_block(st, path, block, nvm_block, size)?;
        self.write_block(st, block, nvm_block, &mut scratch, new_size)?;
        Ok(true)
    }

    /// Reads file block `block` (at namespace block `nvm_block`) of a file of `size`
    /// bytes for a read-modify-write: verifies the bytes its checksum covers and zeroes
    /// the rest (bytes past the size are unspecified).
    fn read_block(
        &self,
        st: &State,
        path: &str,
        block: u64,
        nvm_block: u64,
        size: u64,
    ) -> Result<Box<[u8]>, FileStoreError> {
        let mut scratch = vec![0u8; BLOCK_SIZE as usize].into_boxed_slice();
        let covered = covered_bytes(size, block);
        self.nvm
            .read_at(nvm_block * BLOCK_SIZE, &mut scratch[..covered])?;
        verify_block(st, path, block, nvm_block, &scratch[..covered])?;
        Ok(scratch)
    }

    /// Writes a whole block assembled in `scratch` and sets its checksum over the bytes a
    /// file of `new_size` bytes has in it.
    fn write_block(
        &self,
        st: &mut State,
        block: u64,
        nvm_block: u64,
        scratch: &mut [u8],
        new_size: u64,
    ) -> Result<(), FileStoreError> {
        let covered = covered_bytes(new_size, block);
        scratch[covered..].fill(0);
        st.data_dirty = true;
        st.sums.set(nvm_block, crc::crc32c(&scratch[..covered]));
        self.nvm.write_at(nvm_block * BLOCK_SIZE, scratch)?;
        Ok(())
    }

    /// Writes `data` at `offset` over `pieces`, growing the file from `old_size` to
    /// `new_size`. Blocks the data covers whole are written from it; a block it covers
    /// in part (at most the first and the last) and the old last block are assembled
    /// whole first, their old bytes verified before anything is written, so a checksum
    /// error changes nothing.
    #[allow(clippy::too_many_arguments)]
    fn write_pieces(
        &self,
        st: &mut State,
        path: &str,
        pieces: &[Piece],
        offset: u64,
        data: &[u8],
        old_size: u64,
        new_size: u64,
    ) -> Result<(), FileStoreError> {
        let end = offset + data.len() as u64;
        let first_block = offset / BLOCK_SIZE;
        let last_block = (end - 1) / BLOCK_SIZE;
        let place = |block: u64| -> (u64, bool) {
            let p = pieces
                .iter()
                .find(|p| p.file_block <= block && block < p.file_block + p.count)
                .expect("the pieces cover the write");
            (p.nvm_block + (block - p.file_block), p.fresh)
        };
        // 1. The blocks written in part, read (and verified) or zeroed, then patched.
        let mut partial: Vec<(u64, u64, Box<[u8]>)> = Vec::with_capacity(2);
        for block in [first_block, last_block] {
            let start = block * BLOCK_SIZE;
            let whole = offset <= start && start + BLOCK_SIZE <= end;
            if whole || partial.iter().any(|(b, _, _)| *b == block) {
                continue;
            }
            let (nvm_block, fresh) = place(block);
            let mut scratch = if fresh {
                vec![0u8; BLOCK_SIZE as usize].into_boxed_slice()
            } else {
                self.read_block(st, path, block, nvm_block, old_size)?
            };
            let lo = offset.max(start);
            let hi = end.min(start + BLOCK_SIZE);
            scratch[(lo - start) as usize..(hi - start) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            partial.push((block, nvm_block, scratch));
        }
        // 2. The old last block, if the write leaves a gap after the old size.
        if offset > old_size && !partial.iter().any(|(b, _, _)| *b == old_size / BLOCK_SIZE) {
            self.zero_tail(st, path, new_size)?;
        }
        // 3. Whole blocks, straight from `data`.
        let whole_first = offset.div_ceil(BLOCK_SIZE);
        let whole_end = end / BLOCK_SIZE;
        let mut sums = Vec::new();
        for piece in pieces {
            let lo = piece.file_block.max(whole_first);
            let hi = (piece.file_block + piece.count).min(whole_end);
            if lo >= hi {
                continue;
            }
            let nvm_first = piece.nvm_block + (lo - piece.file_block);
            let bytes =
                &data[(lo * BLOCK_SIZE - offset) as usize..(hi * BLOCK_SIZE - offset) as usize];
            sums.resize((hi - lo) as usize, 0);
            crc::crc32c_chunks(bytes, BLOCK_SIZE as usize, &mut sums);
            st.data_dirty = true;
            st.sums.set_run(nvm_first, &sums);
            self.nvm.write_at(nvm_first * BLOCK_SIZE, bytes)?;
        }
        // 4. The partial blocks, whole.
        for (block, nvm_block, mut scratch) in partial {
            self.write_block(st, block, nvm_block, &mut scratch, new_size)?;
        }
        Ok(())
    }

    /// Reads into `buf` from byte `offset` of the file through the OS page cache; returns
    /// the bytes read, short at the end of the file (0 at or past it). Holes read as zeros.
    pub fn read_at(
        &self,
        path: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, FileStoreError> {
        self.read_impl(path, offset, buf, false)
    }

    /// Like [`FileStore::read_at`] but bypassing the OS page cache
    /// ([`Nvm::read_at_uncached`]): the device reading its own media.
    pub fn read_at_uncached(
        &self,
        path: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, FileStoreError> {
        if self.nvm.media_reads() == MediaReads::Cached {
            return self.read_impl(path, offset, buf, true);
        }
        // Media read direct: every mapped run of the range in one queued read.
        let mut range = [RangeRead {
            path,
            offset,
            dst: buf,
        }];
        let got = self.read_ranges_uncached(&mut range).map_err(|(_, e)| e)?;
        Ok(got[0])
    }

    fn read_impl(
        &self,
        path: &str,
        offset: u64,
        buf: &mut [u8],
        uncached: bool,
    ) -> Result<usize, FileStoreError> {
        let path = canonical(path)?;
        let st = self.read_state()?;
        let record = st.get(&path)?;
        if offset >= record.size {
            return Ok(0);
        }
        let n = (record.size - offset).min(buf.len() as u64) as usize;
        let mut pos = offset;
        let mut done = 0usize;
        while done < n {
            let block = pos / BLOCK_SIZE;
            let in_block = pos % BLOCK_SIZE;
            let left = (n - done) as u64;
            match record.lookup(block) {
                Mapping::Mapped { nvm_block, run } => {
                    let len = (run * BLOCK_SIZE - in_block).min(left) as usize;
                    let dst = &mut buf[done..done + len];
                    let run = MappedRun {
                        path: &path,
                        size: record.size,
                        block,
                        nvm_block,
                        in_block,
                        uncached,
                    };
                    self.read_verified(&st, &run, dst)?;
                    done += len;
                }
                Mapping::Hole { run } => {
                    let hole = run.map_or(u64::MAX, |r| r * BLOCK_SIZE - in_block);
                    let len = hole.min(left) as usize;
                    buf[done..done + len].fill(0);
                    done += len;
                }
            }
            pos = offset + done as u64;
        }
        Ok(n)
    }

    /// Reads `dst.len()` bytes of a mapped run and verifies every block they touch
    /// against its checksum. Blocks whose checksummed bytes `dst` holds exactly (every
    /// block but a partly read first or last one) are verified in `dst`; the others are
    /// read whole into a scratch block, verified there and copied out. An uncached read
    /// of media read direct does not come here ([`FileStore::read_ranges_uncached`]); of
    /// media read through the page cache it is this read, straight into `dst` (no
    /// bounce buffer between the page cache and `dst`).
    fn read_verified(
        &self,
        st: &State,
        run: &MappedRun<'_>,
        dst: &mut [u8],
    ) -> Result<(), FileStoreError> {
        let read = |at: u64, to: &mut [u8]| -> Result<(), FileStoreError> {
            if run.uncached {
                self.nvm.read_at_uncached(at, to)?;
            } else {
                self.nvm.read_at(at, to)?;
            }
            Ok(())
        };
        let bs = BLOCK_SIZE as usize;
        let start = run.in_block as usize;
        let end = start + dst.len();
        let blocks = end.div_ceil(bs) as u64;
        // Blocks [direct_lo, direct_hi) of the run are read straight into `dst`.
        let direct_lo = u64::from(start != 0);
        let last_covered = covered_bytes(run.size, run.block + blocks - 1);
        let last_end = end - (blocks as usize - 1) * bs;
        let direct_hi = if last_end == last_covered || last_end == bs {
            blocks
        } else {
            blocks - 1
        };
        let mut scratch = [0u8; BLOCK_SIZE as usize];
        for k in (0..direct_lo).chain(direct_hi.max(direct_lo)..blocks) {
            let covered = covered_bytes(run.size, run.block + k);
            let block_start = k as usize * bs;
            read((run.nvm_block + k) * BLOCK_SIZE, &mut scratch[..covered])?;
            verify_block(
                st,
                run.path,
                run.block + k,
                run.nvm_block + k,
                &scratch[..covered],
            )?;
            let lo = start.max(block_start);
            let hi = end.min(block_start + bs);
            dst[lo - start..hi - start]
                .copy_from_slice(&scratch[lo - block_start..hi - block_start]);
        }
        if direct_lo < direct_hi {
            let lo = direct_lo as usize * bs - start;
            let hi = (direct_hi as usize * bs).min(end) - start;
            let part = &mut dst[lo..hi];
            read((run.nvm_block + direct_lo) * BLOCK_SIZE, part)?;
            verify_run(st, run, direct_lo, part)?;
        }
        Ok(())
    }

    /// Sets the file's size to `len`. Shrinking unmaps the blocks past the new end (they
    /// become allocatable after the next flush); growing zeroes the rest of the last block
    /// and adds a hole.
    pub fn truncate(&self, path: &str, len: u64) -> Result<(), FileStoreError> {
        let path = canonical(path)?;
        if len > FILE_SIZE_MAX {
            return Err(FileStoreError::FileTooLarge {
                path,
                size_bytes: u128::from(len),
                limit: FILE_SIZE_MAX,
            });
        }
        let mut guard = self.write_state()?;
        let st = &mut *guard;
        st.check_usable()?;
        let size = st.get(&path)?.size;
        if len > size {
            self.zero_tail(st, &path, len)?;
        }
        if len < size && !len.is_multiple_of(BLOCK_SIZE) {
            // The new last block's checksum covers fewer bytes: verify the old ones first.
            let block = len / BLOCK_SIZE;
            if let Mapping::Mapped { nvm_block, .. } = st.get(&path)?.lookup(block) {
                let scratch = self.read_block(st, &path, block, nvm_block, size)?;
                let covered = covered_bytes(len, block);
                st.sums.set(nvm_block, crc::crc32c(&scratch[..covered]));
            }
        }
        let record = st.files.get_mut(&path).expect("checked above");
        if len < record.size {
            let freed = record.unmap_from(len.div_ceil(BLOCK_SIZE));
            st.pending_blocks += freed.iter().map(|r| r.count).sum::<u64>();
            st.pending_free.extend(freed);
        }
        record.size = len;
        record.modified_ns = now_ns();
        st.touch(path);
        Ok(())
    }

    /// What the store knows about one file.
    pub fn stat(&self, path: &str) -> Result<FileStat, FileStoreError> {
        let path = canonical(path)?;
        let st = self.read_state()?;
        let record = st.get(&path)?;
        Ok(file_stat(&path, record))
    }

    /// Files at or below `dir` (`""` or `"/"` for all), sorted by path. A `dir` that is a
    /// file lists that file, as `ls` does.
    pub fn list(&self, dir: &str) -> Result<Vec<FileStat>, FileStoreError> {
        let dir = path::normalize_dir(dir).map_err(|source| FileStoreError::InvalidPath {
            path: path::for_display(dir),
            source,
        })?;
        let st = self.read_state()?;
        let mut out = Vec::new();
        if dir.is_empty() {
            out.extend(st.files.iter().map(|(p, r)| file_stat(p, r)));
        } else {
            if let Some(record) = st.files.get(&dir) {
                out.push(file_stat(&dir, record));
            }
            let prefix = format!("{dir}/");
            out.extend(
                st.files
                    .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                    .take_while(|(p, _)| p.starts_with(&prefix))
                    .map(|(p, r)| file_stat(p, r)),
            );
        }
        Ok(out)
    }

    /// Removes the file; its blocks become allocatable after the next flush.
    pub fn delete(&self, path: &str) -> Result<(), FileStoreError> {
        let path = canonical(path)?;
        let mut guard = self.write_state()?;
        let st = &mut *guard;
        st.check_usable()?;
        let record = st
            .files
            .remove(&path)
            .ok_or_else(|| FileStoreError::NotFound { path: path.clone() })?;
        st.unmap_all(&record);
        st.keep_parent(&path);
        st.touch(path);
        Ok(())
    }

    /// The file's extents in file order, like FIEMAP. Ranges of the file no extent covers
    /// are holes and read as zeros. Valid until the file is next changed.
    pub fn extents(&self, path: &str) -> Result<Vec<Extent>, FileStoreError> {
        let path = canonical(path)?;
        let st = self.read_state()?;
        let record = st.get(&path)?;
        Ok(record
            .extents
            .iter()
            .map(|e| {
                let file_offset = e.file_block * BLOCK_SIZE;
                Extent {
                    file_offset,
                    nvm_offset: e.nvm_block * BLOCK_SIZE,
                    len: (e.count * BLOCK_SIZE).min(record.size - file_offset),
                }
            })
            .collect())
    }

    /// Renames a file, replacing `to` if it is a file (whose blocks are then freed, as by
    /// delete), or a directory with everything below it, replacing `to` if it is an empty
    /// directory (see `dirs.rs`). Renaming a directory into itself is refused.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FileStoreError> {
        let from = canonical(from)?;
        let to = canonical(to)?;
        let mut guard = self.write_state()?;
        let st = &mut *guard;
        st.check_usable()?;
        if !st.files.contains_key(&from) {
            if st.is_dir(&from) {
                return st.rename_dir(&from, &to);
            }
            return Err(FileStoreError::NotFound { path: from });
        }
        if from == to {
            return Ok(());
        }
        if !st.files.contains_key(&to) {
            st.check_tree(&to)?;
        }
        if let Some(replaced) = st.files.remove(&to) {
            st.unmap_all(&replaced);
        }
        let record = st.files.remove(&from).expect("checked above");
        st.files.insert(to.clone(), record);
        st.keep_parent(&from);
        st.touch(from);
        st.touch(to);
        Ok(())
    }

    /// Makes every completed change durable (see the module docs for the ordering).
    pub fn flush(&self) -> Result<(), FileStoreError> {
        let mut guard = self.write_state()?;
        self.flush_locked(&mut guard)
    }

    /// Flushes and closes the store, reporting a flush error that dropping would hide.
    pub fn close(self) -> Result<(), FileStoreError> {
        self.flush()
    }

    fn flush_locked(&self, st: &mut State) -> Result<(), FileStoreError> {
        st.check_usable()?;
        // 1. Data first: everything the new metadata will map reaches the media.
        if st.data_dirty {
            if let Err(err) = self.nvm.sync() {
                st.poisoned = Some(err.to_string());
                return Err(err.into());
            }
            st.data_dirty = false;
        }
        // 2. Then the metadata, atomically.
        if !st.dirty.is_empty() || !st.dirty_dirs.is_empty() || st.sums.has_dirty() {
            #[cfg(test)]
            if self
                .hooks
                .fail_before_commit
                .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                let reason = "injected failure before the metadata commit".to_owned();
                st.poisoned = Some(reason.clone());
                return Err(FileStoreError::Poisoned { reason });
            }
            if let Err(err) = self.commit(st) {
                st.poisoned = Some(err.to_string());
                return Err(err);
            }
            st.dirty.clear();
            st.dirty_dirs.clear();
            st.sums.clear_dirty();
            st.format_version = FORMAT_VERSION;
        }
        // 3. Only now may the blocks the commit unmapped be reused.
        for range in st.pending_free.drain(..) {
            st.alloc.release(range);
        }
        st.pending_blocks = 0;
        #[cfg(test)]
        {
            st.flushes += 1;
        }
        Ok(())
    }

    fn commit(&self, st: &State) -> Result<(), FileStoreError> {
        let meta = |err: redb::Error| meta_error(&self.meta_path, err);
        let txn = self.db.begin_write().map_err(|e| meta(e.into()))?;
        {
            let mut sums = txn.open_table(SUMS_TABLE).map_err(|e| meta(e.into()))?;
            for (index, group) in st.sums.dirty() {
                sums.insert(index, group.encode().as_slice())
                    .map_err(|e| meta(e.into()))?;
            }
            if st.format_version != FORMAT_VERSION {
                let mut superblock = txn
                    .open_table(SUPERBLOCK_TABLE)
                    .map_err(|e| meta(e.into()))?;
                superblock
                    .insert(KEY_FORMAT_VERSION, FORMAT_VERSION)
                    .map_err(|e| meta(e.into()))?;
            }
            let mut table = txn.open_table(FILES_TABLE).map_err(|e| meta(e.into()))?;
            for path in &st.dirty {
                match st.files.get(path) {
                    Some(record) => {
                        let bytes = record.encode();
                        table
                            .insert(path.as_str(), bytes.as_slice())
                            .map_err(|e| meta(e.into()))?;
                    }
                    None => {
                        table.remove(path.as_str()).map_err(|e| meta(e.into()))?;
                    }
                }
            }
            let mut dirs = txn.open_table(DIRS_TABLE).map_err(|e| meta(e.into()))?;
            for path in &st.dirty_dirs {
                match st.dirs.get(&dirs::dir_key(path)) {
                    Some(&created_ns) => {
                        dirs.insert(path.as_str(), created_ns)
                            .map_err(|e| meta(e.into()))?;
                    }
                    None => {
                        dirs.remove(path.as_str()).map_err(|e| meta(e.into()))?;
                    }
                }
            }
        }
        txn.commit().map_err(|e| meta(e.into()))
    }

    /// The content version of `path`: equal for two calls only if no write, truncate,
    /// delete or rename touched the path in between, in this store or since it opened
    /// (versions are unique across every store of the process, so a reopened store never
    /// repeats an old one). What the device keeps resident is valid while it is equal.
    pub fn version(&self, path: &str) -> Result<u64, FileStoreError> {
        let path = canonical(path)?;
        Ok(self.read_state()?.versions.get(&path))
    }

    fn read_state(&self) -> Result<RwLockReadGuard<'_, State>, FileStoreError> {
        self.state.read().map_err(|_| lock_poisoned())
    }

    fn write_state(&self) -> Result<RwLockWriteGuard<'_, State>, FileStoreError> {
        self.state.write().map_err(|_| lock_poisoned())
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        #[cfg(test)]
        if self
            .hooks
            .skip_flush_on_drop
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        // Best effort: a caller who needs the error calls flush or close.
        let _ = self.flush();
    }
}

impl State {
    fn check_usable(&self) -> Result<(), FileStoreError> {
        match &self.poisoned {
            Some(reason) => Err(FileStoreError::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn get(&self, path: &str) -> Result<&FileRecord, FileStoreError> {
        self.files
            .get(path)
            .ok_or_else(|| FileStoreError::NotFound {
                path: path.to_owned(),
            })
    }

    /// Whether any file or explicit directory lies below `dir`.
    fn has_children(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        let below = |p: &str| p.starts_with(&prefix);
        self.files
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|(p, _)| below(p))
            || self
                .dirs
                .range::<str, _>((Bound::Excluded(prefix.as_str()), Bound::Unbounded))
                .next()
                .is_some_and(|(p, _)| below(p))
    }

    /// Whether `path` is a directory, explicit or implicit (the root always is).
    fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || self.dirs.contains_key(&dirs::dir_key(path)) || self.has_children(path)
    }

    /// Checks that a file may be created at `path` without breaking the tree shape.
    fn check_tree(&self, path: &str) -> Result<(), FileStoreError> {
        if let Some(file) = path::ancestors(path).find(|a| self.files.contains_key(*a)) {
            return Err(FileStoreError::NotADirectory {
                path: path.to_owned(),
                file: file.to_owned(),
            });
        }
        if self.is_dir(path) {
            return Err(FileStoreError::IsADirectory {
                path: path.to_owned(),
            });
        }
        Ok(())
    }

    fn check_create(&self, path: &str) -> Result<(), FileStoreError> {
        self.check_tree(path)?;
        if self.files.len() >= FILES_MAX {
            return Err(FileStoreError::TooManyFiles {
                path: path.to_owned(),
                count: self.files.len(),
                limit: FILES_MAX,
            });
        }
        Ok(())
    }

    /// Moves every block of a record that left the namespace to the pending list.
    /// Removes everything under [`PARTIAL_DIR`]: the temporaries of whole-file writes
    /// whose writer died before renaming them into place. Only called at open, when no
    /// writer can be using one. Durable at the next flush; until then a crash brings
    /// them back to be removed again.
    fn reclaim_partials(&mut self) {
        let dir = PARTIAL_DIR;
        let prefix = dirs::dir_key(dir);
        let stale: Vec<String> = self
            .files
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(p, _)| p.clone())
            .collect();
        for path in stale {
            if let Some(record) = self.files.remove(&path) {
                self.unmap_all(&record);
            }
            self.touch(path);
        }
        let explicit: Vec<String> = self
            .dirs
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for key in explicit {
            self.dirs.remove(&key);
            self.dirty_dirs.insert(key.trim_end_matches('/').to_owned());
        }
    }

    fn unmap_all(&mut self, record: &FileRecord) {
        for e in &record.extents {
            self.pending_free.push(e.nvm_range());
            self.pending_blocks += e.count;
        }
    }
}

/// A run of the blocks one write covers: already mapped, or `fresh`ly allocated.
#[derive(Debug, Clone, Copy)]
struct Piece {
    file_block: u64,
    nvm_block: u64,
    count: u64,
    fresh: bool,
}

/// Where a read of a mapped run lies: file block `block` at namespace block `nvm_block`,
/// from byte `in_block` of that block, in a file of `size` bytes.
struct MappedRun<'a> {
    path: &'a str,
    size: u64,
    block: u64,
    nvm_block: u64,
    in_block: u64,
    uncached: bool,
}

/// Verifies whole blocks `first..` of `run` read into `part` (the last one may be the
/// file's partly covered last block) against their checksums in one pass.
fn verify_run(
    st: &State,
    run: &MappedRun<'_>,
    first: u64,
    part: &[u8],
) -> Result<(), FileStoreError> {
    let bs = BLOCK_SIZE as usize;
    let whole = part.len() / bs;
    let mut got = vec![0u32; whole];
    crc::crc32c_chunks(&part[..whole * bs], bs, &mut got);
    if whole * bs < part.len() {
        got.push(crc::crc32c(&part[whole * bs..]));
    }
    let mut bad = None;
    st.sums
        .for_run(run.nvm_block + first, got.len() as u64, |i, sum| {
            if bad.is_none() && got[i as usize] != sum {
                bad = Some((i, sum));
            }
        });
    if let Some((i, expected)) = bad {
        return Err(FileStoreError::Checksum {
            path: run.path.to_owned(),
            block: run.block + first + i,
            nvm_offset: (run.nvm_block + first + i) * BLOCK_SIZE,
            expected,
            actual: got[i as usize],
        });
    }
    Ok(())
}

/// Bytes of file block `block` a file of `size` bytes holds: what its checksum covers.
fn covered_bytes(size: u64, block: u64) -> usize {
    size.saturating_sub(block * BLOCK_SIZE).min(BLOCK_SIZE) as usize
}

/// Checks `bytes` (the covered bytes of file block `block`, at namespace block
/// `nvm_block`) against the block's checksum, if it has one.
fn verify_block(
    st: &State,
    path: &str,
    block: u64,
    nvm_block: u64,
    bytes: &[u8],
) -> Result<(), FileStoreError> {
    let Some(expected) = st.sums.get(nvm_block) else {
        return Ok(());
    };
    let actual = crc::crc32c(bytes);
    if actual == expected {
        return Ok(());
    }
    Err(FileStoreError::Checksum {
        path: path.to_owned(),
        block,
        nvm_offset: nvm_block * BLOCK_SIZE,
        expected,
        actual,
    })
}

/// Blocks in `[first, end)` the record does not map.
fn hole_blocks(record: &FileRecord, first: u64, end: u64) -> u64 {
    let mut block = first;
    let mut holes = 0;
    while block < end {
        match record.lookup(block) {
            Mapping::Mapped { run, .. } => block += run.min(end - block),
            Mapping::Hole { run } => {
                let n = run.map_or(end - block, |r| r.min(end - block));
                holes += n;
                block += n;
            }
        }
    }
    holes
}

/// Splits `[first, end)` into pieces, allocating the holes. Each hole is allocated with
/// the block after the previous piece as the hint, so a file written in order grows in
/// place. Returns the pieces and the new extents. Free space was checked by the caller.
fn plan_write(
    record: &FileRecord,
    alloc: &mut Allocator,
    first: u64,
    end: u64,
) -> (Vec<Piece>, Vec<ExtentRec>) {
    let mut pieces = Vec::new();
    let mut fresh = Vec::new();
    let mut hint = match first.checked_sub(1).map(|b| record.lookup(b)) {
        Some(Mapping::Mapped { nvm_block, .. }) => Some(nvm_block + 1),
        _ => None,
    };
    let mut block = first;
    while block < end {
        match record.lookup(block) {
            Mapping::Mapped { nvm_block, run } => {
                let count = run.min(end - block);
                pieces.push(Piece {
                    file_block: block,
                    nvm_block,
                    count,
                    fresh: false,
                });
                hint = Some(nvm_block + count);
                block += count;
            }
            Mapping::Hole { run } => {
                let count = run.map_or(end - block, |r| r.min(end - block));
                for range in alloc.allocate(count, hint) {
                    pieces.push(Piece {
                        file_block: block,
                        nvm_block: range.start,
                        count: range.count,
                        fresh: true,
                    });
                    fresh.push(ExtentRec {
                        file_block: block,
                        nvm_block: range.start,
                        count: range.count,
                    });
                    hint = Some(range.end());
                    block += range.count;
                }
            }
        }
    }
    (pieces, fresh)
}

/// Returns never-mapped allocations to the allocator (a failed write).
fn release_all(alloc: &mut Allocator, fresh: &[ExtentRec]) {
    for e in fresh {
        alloc.release(e.nvm_range());
    }
}

fn canonical(path: &str) -> Result<String, FileStoreError> {
    path::normalize(path).map_err(|source| FileStoreError::InvalidPath {
        path: path::for_display(path),
        source,
    })
}

fn file_stat(path: &str, record: &FileRecord) -> FileStat {
    FileStat {
        path: path.to_owned(),
        size: record.size,
        extents: u32::try_from(record.extents.len()).expect("extent count is bounded"),
        allocated_bytes: record.allocated_blocks() * BLOCK_SIZE,
        created: UNIX_EPOCH + Duration::from_nanos(record.created_ns),
        modified: UNIX_EPOCH + Duration::from_nanos(record.modified_ns),
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn lock_poisoned() -> FileStoreError {
    FileStoreError::Poisoned {
        reason: "a thread panicked while holding the metadata lock".to_owned(),
    }
}

fn meta_error(path: &Path, err: redb::Error) -> FileStoreError {
    FileStoreError::Meta {
        path: path.to_path_buf(),
        source: Box::new(err),
    }
}

fn meta_corrupt(path: &Path, reason: impl Into<String>) -> FileStoreError {
    FileStoreError::MetaCorrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes a fresh metadata database at `path` describing a namespace of `nvm_size` bytes.
fn init_meta(path: &Path, nvm_size: u64) -> Result<(), FileStoreError> {
    let meta = |err: redb::Error| meta_error(path, err);
    // The file is made here, private, for redb to fill: redb would create it with the
    // umask's mode, readable by every local user.
    open_private(fs::OpenOptions::new().write(true).create_new(true), path).map_err(|source| {
        FileStoreError::StateDir {
            path: path.to_path_buf(),
            op: "create",
            source,
        }
    })?;
    let db = Database::builder()
        .set_cache_size(META_CACHE_BYTES)
        .create(path)
        .map_err(|e| meta(e.into()))?;
    let txn = db.begin_write().map_err(|e| meta(e.into()))?;
    {
        let mut superblock = txn
            .open_table(SUPERBLOCK_TABLE)
            .map_err(|e| meta(e.into()))?;
        for (key, value) in [
            (KEY_FORMAT_VERSION, FORMAT_VERSION),
            (KEY_BLOCK_SIZE, BLOCK_SIZE),
            (KEY_NVM_SIZE, nvm_size),
        ] {
            superblock.insert(key, value).map_err(|e| meta(e.into()))?;
        }
        txn.open_table(FILES_TABLE).map_err(|e| meta(e.into()))?;
        txn.open_table(DIRS_TABLE).map_err(|e| meta(e.into()))?;
        txn.open_table(SUMS_TABLE).map_err(|e| meta(e.into()))?;
    }
    txn.commit().map_err(|e| meta(e.into()))
}

/// Opens and integrity-checks the metadata database. redb may panic on a file it did not
/// write; such a panic is caught and reported as corruption, since the file is not ours to
/// trust.
fn open_meta(path: &Path) -> Result<Database, FileStoreError> {
    let opened = catch_unwind(AssertUnwindSafe(|| {
        let mut db = Database::builder()
            .set_cache_size(META_CACHE_BYTES)
            .open(path)?;
        db.check_integrity()?;
        Ok::<Database, redb::DatabaseError>(db)
    }));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => Err(FileStoreError::MetaInUse {
            path: path.to_path_buf(),
        }),
        Ok(Err(redb::DatabaseError::Storage(redb::StorageError::Io(err))))
            if err.kind() != io::ErrorKind::InvalidData =>
        {
            Err(meta_error(path, redb::StorageError::Io(err).into()))
        }
        Ok(Err(err)) => Err(meta_corrupt(path, err.to_string())),
        Err(_) => Err(meta_corrupt(
            path,
            "the metadata store failed while reading it",
        )),
    }
}

/// Reads the superblock and every record, checks them against the image and derives the
/// free space.
fn load_state(db: &Database, meta_path: &Path, nvm: &Nvm) -> Result<State, FileStoreError> {
    let txn = db
        .begin_read()
        .map_err(|e| meta_error(meta_path, e.into()))?;
    let format_version = check_superblock(&txn, meta_path, nvm)?;
    let files = read_records(&txn, meta_path, nvm)?;
    let sums = if format_version == FORMAT_VERSION_UNSUMMED {
        BlockSums::default()
    } else {
        read_sums(&txn, meta_path, nvm)?
    };
    let dirs = dirs::read_dirs(&txn, meta_path, &files)?;
    let used = files
        .values()
        .flat_map(|r| r.extents.iter().map(|e| e.nvm_range()))
        .collect();
    let alloc = Allocator::from_used(nvm.block_count(), used).map_err(|overlap| {
        let owners: Vec<&str> = files
            .iter()
            .filter(|(_, r)| {
                r.extents.iter().any(|e| {
                    e.nvm_block < overlap.range.end() && overlap.range.start < e.nvm_range().end()
                })
            })
            .map(|(p, _)| p.as_str())
            .collect();
        meta_corrupt(
            meta_path,
            format!(
                "namespace blocks {}..{} are mapped more than once (files {})",
                overlap.range.start,
                overlap.range.end(),
                owners.join(", ")
            ),
        )
    })?;
    Ok(State {
        files,
        alloc,
        pending_free: Vec::new(),
        pending_blocks: 0,
        dirty: BTreeSet::new(),
        versions: ContentVersions::new(),
        dirs,
        dirty_dirs: BTreeSet::new(),
        data_dirty: false,
        sums,
        format_version,
        poisoned: None,
        #[cfg(test)]
        flushes: 0,
    })
}

/// Content versions of paths (see [`FileStore::version`]).
#[derive(Debug)]
struct ContentVersions {
    /// The version of every path not changed since the store opened.
    base: u64,
    changed: HashMap<String, u64>,
}

/// The next content version of any store in the process.
static NEXT_VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_version() -> u64 {
    NEXT_VERSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ContentVersions {
    fn new() -> ContentVersions {
        ContentVersions {
            base: next_version(),
            changed: HashMap::new(),
        }
    }

    fn get(&self, path: &str) -> u64 {
        self.changed.get(path).copied().unwrap_or(self.base)
    }

    fn bump(&mut self, path: &str) {
        self.changed.insert(path.to_string(), next_version());
    }
}

impl State {
    /// Marks `path` changed: its record is written at the next flush, and its content
    /// version moves on.
    fn touch(&mut self, path: String) {
        self.versions.bump(&path);
        self.dirty.insert(path);
    }
}

/// Checks the superblock's format and block size, and that the image is the namespace it
/// describes.
fn check_superblock(
    txn: &redb::ReadTransaction,
    meta_path: &Path,
    nvm: &Nvm,
) -> Result<u64, FileStoreError> {
    let corrupt = |reason: String| meta_corrupt(meta_path, reason);
    let superblock = txn
        .open_table(SUPERBLOCK_TABLE)
        .map_err(|e| corrupt(format!("superblock: {e}")))?;
    let field = |key: &str| -> Result<u64, FileStoreError> {
        match superblock.get(key) {
            Ok(Some(value)) => Ok(value.value()),
            Ok(None) => Err(corrupt(format!("superblock has no {key}"))),
            Err(e) => Err(corrupt(format!("superblock: {e}"))),
        }
    };
    let version = field(KEY_FORMAT_VERSION)?;
    if version != FORMAT_VERSION && version != FORMAT_VERSION_UNSUMMED {
        return Err(corrupt(format!(
            "format version {version} is unknown, expected {FORMAT_VERSION}"
        )));
    }
    let block_size = field(KEY_BLOCK_SIZE)?;
    if block_size != BLOCK_SIZE {
        return Err(corrupt(format!(
            "block size {block_size}, expected {BLOCK_SIZE}"
        )));
    }
    let expected_bytes = field(KEY_NVM_SIZE)?;
    if nvm.size() < expected_bytes {
        return Err(FileStoreError::ImageTruncated {
            path: nvm.path().to_path_buf(),
            size_bytes: nvm.size(),
            expected_bytes,
        });
    }
    if nvm.size() > expected_bytes {
        return Err(FileStoreError::ImageSizeMismatch {
            path: nvm.path().to_path_buf(),
            size_bytes: nvm.size(),
            expected_bytes,
        });
    }
    Ok(version)
}

/// Reads every group of block checksums.
fn read_sums(
    txn: &redb::ReadTransaction,
    meta_path: &Path,
    nvm: &Nvm,
) -> Result<BlockSums, FileStoreError> {
    let corrupt = |reason: String| meta_corrupt(meta_path, reason);
    let table = txn
        .open_table(SUMS_TABLE)
        .map_err(|e| corrupt(format!("block checksums table: {e}")))?;
    let groups_max = nvm.block_count().div_ceil(sums::GROUP_BLOCKS);
    let mut groups = BTreeMap::new();
    for entry in table
        .iter()
        .map_err(|e| corrupt(format!("block checksums table: {e}")))?
    {
        let (key, value) = entry.map_err(|e| corrupt(format!("block checksums table: {e}")))?;
        let index = key.value();
        if index >= groups_max {
            return Err(corrupt(format!(
                "block checksum group {index} lies outside the {groups_max}-group namespace"
            )));
        }
        let group = Group::decode(value.value())
            .map_err(|reason| corrupt(format!("block checksum group {index}: {reason}")))?;
        groups.insert(index, Box::new(group));
    }
    Ok(BlockSums::from_groups(groups))
}

/// Reads and checks every record of the `files` table.
fn read_records(
    txn: &redb::ReadTransaction,
    meta_path: &Path,
    nvm: &Nvm,
) -> Result<BTreeMap<String, FileRecord>, FileStoreError> {
    let corrupt = |reason: String| meta_corrupt(meta_path, reason);
    let table = txn
        .open_table(FILES_TABLE)
        .map_err(|e| corrupt(format!("files table: {e}")))?;
    let mut files = BTreeMap::new();
    for entry in table
        .iter()
        .map_err(|e| corrupt(format!("files table: {e}")))?
    {
        let (key, value) = entry.map_err(|e| corrupt(format!("files table: {e}")))?;
        let path = key.value().to_owned();
        if !path::is_canonical(&path) {
            return Err(corrupt(format!(
                "file path \"{}\" is not canonical",
                path::for_display(&path)
            )));
        }
        if files.len() >= FILES_MAX {
            return Err(corrupt(format!("more than {FILES_MAX} files")));
        }
        let record = FileRecord::decode(value.value(), nvm.block_count())
            .map_err(|reason| corrupt(format!("file {path}: {reason}")))?;
        files.insert(path, record);
    }
    Ok(files)
}

#[cfg(test)]
mod tests;
