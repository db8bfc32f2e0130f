//! The FUSE view of [`MetalFs`]: inode numbers for paths, file handles, and the kernel's
//! requests turned into path operations.
//!
//! - Inodes: a path gets a number when the kernel first looks it up (the root is 1); a
//!   rename renumbers nothing but moves the paths of the inode and everything below it;
//!   unlink and rmdir drop the path. An open file that is unlinked or renamed by another
//!   client answers `ENOENT` (no POSIX "open unlinked file" semantics).
//! - Attributes are never cached by the kernel (TTL 0), so several processes, and clients
//!   outside the mount, see each other's changes at once.
//! - Durability: `fsync`, and the `close` (FUSE flush) of a handle that wrote, flush the
//!   device; what they acknowledged survives a crash of the process holding the device.
//! - Permissions are not stored: files show 0644, directories 0755, owned by the mounting
//!   user; `chmod`/`chown`/`utimes` succeed and change nothing.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use csx_proto::EntryKind;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::core::{Attr, FsError, MetalFs};

const TTL: Duration = Duration::ZERO;
const ROOT: u64 = 1;
const BLOCK: u32 = 4096;

/// Bytes the kernel may send in one write and read ahead: 1 MiB keeps a sequential
/// transfer at one device command per MiB.
pub const IO_SIZE: u32 = 1 << 20;

#[derive(Debug, Default)]
struct Inodes {
    by_ino: HashMap<u64, String>,
    by_path: HashMap<String, u64>,
    next: u64,
}

impl Inodes {
    fn new() -> Inodes {
        let mut i = Inodes {
            next: ROOT + 1,
            ..Inodes::default()
        };
        i.by_ino.insert(ROOT, "/".to_owned());
        i.by_path.insert("/".to_owned(), ROOT);
        i
    }

    fn ino(&mut self, path: &str) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_ino.insert(ino, path.to_owned());
        self.by_path.insert(path.to_owned(), ino);
        ino
    }

    fn forget_path(&mut self, path: &str) {
        if let Some(ino) = self.by_path.remove(path) {
            self.by_ino.remove(&ino);
        }
    }

    /// Moves `from` and every path below it to `to`, dropping what was at `to`.
    fn rename(&mut self, from: &str, to: &str) {
        let below = format!("{from}/");
        let moved: Vec<(String, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.as_str() == from || p.starts_with(&below))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        let to_below = format!("{to}/");
        let replaced: Vec<String> = self
            .by_path
            .keys()
            .filter(|p| p.as_str() == to || p.starts_with(&to_below))
            .cloned()
            .collect();
        for p in replaced {
            self.forget_path(&p);
        }
        for (p, ino) in moved {
            self.by_path.remove(&p);
            let new = format!("{to}{}", &p[from.len()..]);
            self.by_ino.insert(ino, new.clone());
            self.by_path.insert(new, ino);
        }
    }
}

#[derive(Debug)]
struct Handle {
    wrote: AtomicBool,
}

/// A directory listing taken at opendir: (inode, kind, name), `.` and `..` first.
type Listing = Vec<(u64, FileType, String)>;

/// The read-only `/.ops` directory of operator executables (see [`crate::shell`]).
#[derive(Debug, Clone, Default)]
pub struct OpsDir {
    /// (name, the executable's bytes), one per operator.
    pub entries: Vec<(String, Vec<u8>)>,
}

/// The name of the operators' directory under the root.
pub const OPS_DIR_NAME: &str = ".ops";
/// Inode of `/.ops`; its entry i is `OPS_INO + 1 + i` (far above the inodes paths get).
const OPS_INO: u64 = u64::MAX - (1 << 20);

/// The FUSE file system over a [`MetalFs`].
#[derive(Debug)]
pub struct FuseFs {
    fs: Arc<MetalFs>,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, Handle>>,
    dirs: Mutex<HashMap<u64, Listing>>,
    next_fh: AtomicU64,
    uid: u32,
    gid: u32,
    /// Shown as the time of directories the device knows no time of (the root, implicit
    /// directories).
    started: SystemTime,
    ops: Option<OpsDir>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno)
}

fn kind_of(k: EntryKind) -> FileType {
    match k {
        EntryKind::File => FileType::RegularFile,
        EntryKind::Dir => FileType::Directory,
    }
}

fn child(parent: &str, name: &OsStr) -> Result<String, Errno> {
    let name = name.to_str().ok_or(Errno::EINVAL)?;
    Ok(if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    })
}

impl FuseFs {
    pub fn new(fs: Arc<MetalFs>) -> FuseFs {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        FuseFs {
            fs,
            inodes: Mutex::new(Inodes::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            uid,
            gid,
            started: SystemTime::now(),
            ops: None,
        }
    }

    /// Shows `/.ops` with these operator executables.
    pub fn with_ops(mut self, ops: OpsDir) -> FuseFs {
        self.ops = Some(ops);
        self
    }

    /// The attributes of an inode of `/.ops`, if `ino` is one.
    fn ops_attr(&self, ino: u64) -> Option<FileAttr> {
        let ops = self.ops.as_ref()?;
        if ino == OPS_INO {
            let a = Attr {
                kind: EntryKind::Dir,
                size: 0,
                modified: std::time::UNIX_EPOCH,
            };
            let mut attr = self.attr(ino, &a);
            attr.perm = 0o555;
            return Some(attr);
        }
        let i = ino.checked_sub(OPS_INO + 1)? as usize;
        let (_, bytes) = ops.entries.get(i)?;
        let a = Attr {
            kind: EntryKind::File,
            size: bytes.len() as u64,
            modified: std::time::UNIX_EPOCH,
        };
        let mut attr = self.attr(ino, &a);
        attr.perm = 0o555;
        Some(attr)
    }

    /// The inode of `name` in `parent`, when it is `/.ops` or one of its entries.
    fn ops_lookup(&self, parent: u64, name: &OsStr) -> Option<Result<FileAttr, Errno>> {
        let ops = self.ops.as_ref()?;
        if parent == ROOT && name == OPS_DIR_NAME {
            return self.ops_attr(OPS_INO).map(Ok);
        }
        if parent != OPS_INO {
            return None;
        }
        Some(
            ops.entries
                .iter()
                .position(|(n, _)| OsStr::new(n) == name)
                .and_then(|i| self.ops_attr(OPS_INO + 1 + i as u64))
                .ok_or(Errno::ENOENT),
        )
    }

    fn is_ops(&self, ino: u64) -> bool {
        self.ops.is_some() && ino >= OPS_INO
    }

    /// The path operations underneath.
    pub fn metal(&self) -> &MetalFs {
        &self.fs
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        lock(&self.inodes)
            .by_ino
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        child(&self.path(parent)?, name)
    }

    fn attr(&self, ino: u64, a: &Attr) -> FileAttr {
        let (kind, perm, nlink) = match a.kind {
            EntryKind::File => (FileType::RegularFile, 0o644, 1),
            EntryKind::Dir => (FileType::Directory, 0o755, 2),
        };
        let time = if a.modified == std::time::UNIX_EPOCH {
            self.started
        } else {
            a.modified
        };
        FileAttr {
            ino: INodeNo(ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK,
            flags: 0,
        }
    }

    /// The attributes of `path`, numbering it.
    fn entry(&self, path: &str) -> Result<FileAttr, Errno> {
        let a = self.fs.stat(path).map_err(|e| errno(&e))?;
        let ino = lock(&self.inodes).ino(path);
        Ok(self.attr(ino, &a))
    }

    fn new_fh(&self) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.files).insert(
            fh,
            Handle {
                wrote: AtomicBool::new(false),
            },
        );
        fh
    }

    fn mark_written(&self, fh: FileHandle) {
        if let Some(h) = lock(&self.files).get(&fh.0) {
            h.wrote.store(true, Ordering::Relaxed);
        }
    }

    fn sync_reply(&self, reply: ReplyEmpty) {
        match self.fs.sync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Best effort: the kernel may cap either below what we ask.
        let _ = config.set_max_write(IO_SIZE);
        if let Err(max) = config.set_max_readahead(IO_SIZE) {
            let _ = config.set_max_readahead(max);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some(r) = self.ops_lookup(parent.0, name) {
            match r {
                Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
                Err(e) => reply.error(e),
            }
            return;
        }
        match self
            .child_path(parent, name)
            .and_then(|path| self.entry(&path))
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if self.is_ops(ino.0) {
            match self.ops_attr(ino.0) {
                Some(attr) => reply.attr(&TTL, &attr),
                None => reply.error(Errno::ENOENT),
            }
            return;
        }
        match self.path(ino).and_then(|path| self.entry(&path)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.path(ino).and_then(|path| {
            if let Some(size) = size {
                self.fs.truncate(&path, size).map_err(|e| errno(&e))?;
                if let Some(fh) = fh {
                    self.mark_written(fh);
                }
            }
            self.entry(&path)
        });
        match r {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.child_path(parent, name).and_then(|path| {
            self.fs.mkdir(&path).map_err(|e| errno(&e))?;
            self.entry(&path)
        });
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.child_path(parent, name).and_then(|path| {
            self.fs.unlink(&path).map_err(|e| errno(&e))?;
            lock(&self.inodes).forget_path(&path);
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.child_path(parent, name).and_then(|path| {
            self.fs.rmdir(&path).map_err(|e| errno(&e))?;
            lock(&self.inodes).forget_path(&path);
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let from = self.child_path(parent, name)?;
            let to = self.child_path(newparent, newname)?;
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                return Err(Errno::EINVAL);
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) && self.fs.stat(&to).is_ok() {
                return Err(Errno::EEXIST);
            }
            self.fs.rename(&from, &to).map_err(|e| errno(&e))?;
            lock(&self.inodes).rename(&from, &to);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.is_ops(ino.0) {
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                reply.error(Errno::EROFS);
            } else {
                reply.opened(FileHandle(self.new_fh()), FopenFlags::empty());
            }
            return;
        }
        match self.path(ino).and_then(|path| self.entry(&path)) {
            Ok(a) if a.kind == FileType::Directory => reply.error(Errno::EISDIR),
            Ok(_) => reply.opened(FileHandle(self.new_fh()), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.child_path(parent, name).and_then(|path| {
            let exclusive = flags & libc::O_EXCL != 0;
            self.fs.create(&path, exclusive).map_err(|e| errno(&e))?;
            self.entry(&path)
        });
        match r {
            Ok(attr) => {
                let fh = self.new_fh();
                // A created file is a change to make durable at close.
                self.mark_written(FileHandle(fh));
                reply.created(
                    &TTL,
                    &attr,
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                );
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if self.is_ops(ino.0) {
            let entry = self.ops.as_ref().and_then(|o| {
                ino.0
                    .checked_sub(OPS_INO + 1)
                    .and_then(|i| o.entries.get(i as usize))
            });
            match entry {
                Some((_, bytes)) => {
                    let start = (offset as usize).min(bytes.len());
                    let end = (start + size as usize).min(bytes.len());
                    reply.data(&bytes[start..end]);
                }
                None => reply.error(Errno::EISDIR),
            }
            return;
        }
        let r = self.path(ino).and_then(|path| {
            self.fs
                .read(&path, offset, u64::from(size))
                .map_err(|e| errno(&e))
        });
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.path(ino).and_then(|path| {
            self.mark_written(fh);
            self.fs.write(&path, offset, data).map_err(|e| errno(&e))
        });
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let wrote = lock(&self.files)
            .get(&fh.0)
            .is_some_and(|h| h.wrote.swap(false, Ordering::Relaxed));
        if wrote {
            self.sync_reply(reply);
        } else {
            reply.ok();
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let wrote = lock(&self.files)
            .remove(&fh.0)
            .is_some_and(|h| h.wrote.load(Ordering::Relaxed));
        if wrote {
            self.sync_reply(reply);
        } else {
            reply.ok();
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_reply(reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let (Some(ops), true) = (&self.ops, ino.0 == OPS_INO) {
            let mut listing: Listing = vec![
                (OPS_INO, FileType::Directory, ".".to_owned()),
                (ROOT, FileType::Directory, "..".to_owned()),
            ];
            for (i, (name, _)) in ops.entries.iter().enumerate() {
                listing.push((OPS_INO + 1 + i as u64, FileType::RegularFile, name.clone()));
            }
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            lock(&self.dirs).insert(fh, listing);
            reply.opened(FileHandle(fh), FopenFlags::empty());
            return;
        }
        let r = self.path(ino).and_then(|path| {
            let entries = self.fs.list(&path).map_err(|e| errno(&e))?;
            let parent = match path.rfind('/') {
                Some(0) | None => "/".to_owned(),
                Some(i) => path[..i].to_owned(),
            };
            let mut inodes = lock(&self.inodes);
            let mut listing: Listing = vec![
                (ino.0, FileType::Directory, ".".to_owned()),
                (inodes.ino(&parent), FileType::Directory, "..".to_owned()),
            ];
            if self.ops.is_some() && ino.0 == ROOT {
                listing.push((OPS_INO, FileType::Directory, OPS_DIR_NAME.to_owned()));
            }
            for e in entries {
                let p = child(&path, OsStr::new(&e.name))?;
                listing.push((inodes.ino(&p), kind_of(e.attr.kind), e.name));
            }
            Ok(listing)
        });
        match r {
            Ok(listing) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                lock(&self.dirs).insert(fh, listing);
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dirs = lock(&self.dirs);
        let Some(listing) = dirs.get(&fh.0) else {
            reply.error(Errno::EBADF);
            return;
        };
        for (i, (ino, kind, name)) in listing.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_reply(reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.device().identify() {
            Ok(info) => {
                // The protocol tells the namespace's size, not its free space: df shows
                // the capacity as free.
                let blocks = info.nvm_size_bytes / u64::from(BLOCK);
                reply.statfs(blocks, blocks, blocks, 0, 0, BLOCK, 255, BLOCK);
            }
            Err(e) => reply.error(Errno::from_i32(crate::core::errno_of(&e))),
        }
    }
}
