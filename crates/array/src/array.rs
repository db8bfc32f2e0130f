//! [`Array`]: several csx devices behind one namespace of files and one tagged block
//! address space.
//!
//! An array file lives on one member (`Layout::Single`) or is striped across members
//! (`Layout::Striped`); on each member its bytes are one member file,
//! `/csx-array/ARRAY/ID`, so the members' own file stores allocate and persist them and
//! the array keeps only the catalog (see [`crate::desc`] for the crash rules).
//! [`Array::map`] is the FIEMAP of the array: a file's extents as tagged block
//! addresses.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use csx_host::proto::limits::FILE_IO_SIZE_MAX;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::{CallError, Device, Progress};
use serde::Serialize;

use crate::desc::{
    self, absolute, member_path, normalize_path, ArrayDesc, Catalog, FileEntry, Layout, MemberDesc,
    CATALOG_FILE, DESC_FILE, FORMAT_VERSION,
};
use crate::error::ArrayError;
use crate::link::{LinkModel, LinkStats};
use crate::locks::LockTable;
use crate::tag::{TaggedAddr, MEMBERS_MAX, SECTOR_SIZE};

/// Smallest stripe: one file-store block.
pub const STRIPE_MIN: u64 = 4096;
/// Largest stripe: 1 GiB.
pub const STRIPE_MAX: u64 = 1 << 30;
/// Bytes a striped put or get holds in memory at once (about; at least one stripe per
/// member).
pub const STRIPE_BUFFER_BYTES: u64 = 64 << 20;

/// How a file of `layout` is cut: the stripe size, the members in stripe order, and the
/// bytes one round of a copy moves (whole stripe groups, about `STRIPE_BUFFER_BYTES`).
/// A single-member file is one "stripe" of four maximal file I/Os.
fn stripe_geometry(layout: &Layout) -> (u64, Vec<u16>, u64) {
    let (stripe, order) = match layout {
        Layout::Single { member } => (FILE_IO_SIZE_MAX * 4, vec![*member]),
        Layout::Striped {
            stripe_bytes,
            members,
        } => (*stripe_bytes, members.clone()),
    };
    let group = stripe * order.len() as u64;
    let buf_len = group * (STRIPE_BUFFER_BYTES / group).max(1);
    (stripe, order, buf_len)
}

/// Where [`Array::put_bytes`] and [`Array::put_file`] place a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On the member holding the fewest array bytes (the lowest index on a tie).
    Auto,
    /// On this member.
    Member(u16),
    /// Striped across every member, `stripe_bytes` at a time.
    Striped { stripe_bytes: u64 },
}

/// One member of an open array.
#[derive(Debug)]
pub struct Member {
    pub index: u16,
    /// The URI it was opened with.
    pub uri: String,
    pub device: Device,
    pub nvm_size_bytes: u64,
}

/// One extent of an array file as a tagged block address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TaggedExtent {
    /// Where in the array file.
    pub file_offset: u64,
    pub len: u64,
    pub member: u16,
    /// The first sector, tagged with the member.
    pub addr: TaggedAddr,
}

/// A file's place in the array: [`Array::map`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMap {
    pub path: String,
    pub entry: FileEntry,
    /// Sorted by `file_offset`.
    pub extents: Vec<TaggedExtent>,
    /// A member had more extents than one reply carries.
    pub truncated: bool,
}

/// An open array (see the module doc).
#[derive(Debug)]
pub struct Array {
    dir: PathBuf,
    desc: ArrayDesc,
    members: Vec<Member>,
    catalog: Mutex<Catalog>,
    links: LinkStats,
    locks: LockTable,
}

fn check_count(count: usize) -> Result<(), ArrayError> {
    if count == 0 || count > MEMBERS_MAX {
        return Err(ArrayError::MemberCount {
            count,
            max: MEMBERS_MAX,
        });
    }
    Ok(())
}

impl Array {
    /// Creates an array of `count` embedded members in `dir` (`dir/m0`, `dir/m1`, ...),
    /// each created with `config`, and opens it.
    pub fn init_embedded(
        dir: &Path,
        count: usize,
        config: DeviceConfig,
        link: LinkModel,
    ) -> Result<Array, ArrayError> {
        check_count(count)?;
        let dir = absolute(dir);
        Self::prepare_dir(&dir)?;
        let mut members = Vec::with_capacity(count);
        for i in 0..count {
            let sub = dir.join(format!("m{i}"));
            let device =
                Device::init(&sub, config.clone()).map_err(|source| ArrayError::MemberOpen {
                    member: i as u16,
                    uri: sub.display().to_string(),
                    source: Box::new(source),
                })?;
            members.push((format!("m{i}"), device));
        }
        Self::create(dir, members, link)
    }

    /// Creates an array in `dir` over existing devices (`tcp://`, `shm://` or state
    /// directories) and opens it.
    pub fn init_members(dir: &Path, uris: &[String], link: LinkModel) -> Result<Array, ArrayError> {
        check_count(uris.len())?;
        let dir = absolute(dir);
        Self::prepare_dir(&dir)?;
        let mut members = Vec::with_capacity(uris.len());
        for (i, uri) in uris.iter().enumerate() {
            let device = Device::open(uri).map_err(|source| ArrayError::MemberOpen {
                member: i as u16,
                uri: uri.clone(),
                source: Box::new(source),
            })?;
            members.push((uri.clone(), device));
        }
        Self::create(dir, members, link)
    }

    fn prepare_dir(dir: &Path) -> Result<(), ArrayError> {
        if desc::is_array(dir) {
            return Err(ArrayError::Exists {
                dir: dir.to_path_buf(),
                file: DESC_FILE,
            });
        }
        std::fs::create_dir_all(dir).map_err(|source| ArrayError::Io {
            op: "create",
            path: dir.to_path_buf(),
            source,
        })
    }

    fn create(
        dir: PathBuf,
        members: Vec<(String, Device)>,
        link: LinkModel,
    ) -> Result<Array, ArrayError> {
        link.check()?;
        let desc = ArrayDesc {
            format_version: FORMAT_VERSION,
            id: desc::fresh_id(),
            members: members
                .iter()
                .map(|(uri, _)| MemberDesc { uri: uri.clone() })
                .collect(),
            link,
        };
        desc.check(&dir)?;
        desc::write_json(&dir, CATALOG_FILE, &Catalog::default())?;
        desc::write_json(&dir, DESC_FILE, &desc)?;
        let members = members
            .into_iter()
            .enumerate()
            .map(|(i, (_, device))| Self::member(&desc, &dir, i, device))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::assemble(dir, desc, members, Catalog::default()))
    }

    /// Opens the array in `dir`.
    pub fn open(dir: &Path) -> Result<Array, ArrayError> {
        let dir = absolute(dir);
        let desc: ArrayDesc = desc::read_json(&dir, DESC_FILE)?;
        desc.check(&dir)?;
        let catalog: Catalog = desc::read_json(&dir, CATALOG_FILE)?;
        catalog.check(&dir, desc.members.len())?;
        let mut members = Vec::with_capacity(desc.members.len());
        for i in 0..desc.members.len() {
            let uri = desc.member_uri(&dir, i);
            let device = Device::open(&uri).map_err(|source| ArrayError::MemberOpen {
                member: i as u16,
                uri: uri.clone(),
                source: Box::new(source),
            })?;
            members.push(Self::member(&desc, &dir, i, device)?);
        }
        Ok(Self::assemble(dir, desc, members, catalog))
    }

    fn member(
        desc: &ArrayDesc,
        dir: &Path,
        i: usize,
        device: Device,
    ) -> Result<Member, ArrayError> {
        let uri = desc.member_uri(dir, i);
        let info = device.identify().map_err(|source| ArrayError::Member {
            member: i as u16,
            uri: uri.clone(),
            op: "identify",
            source: Box::new(source),
        })?;
        Ok(Member {
            index: i as u16,
            uri,
            device,
            nvm_size_bytes: info.nvm_size_bytes,
        })
    }

    fn assemble(dir: PathBuf, desc: ArrayDesc, members: Vec<Member>, catalog: Catalog) -> Array {
        let n = members.len();
        Array {
            dir,
            desc,
            links: LinkStats::new(n),
            locks: LockTable::new(members.iter().map(|m| m.nvm_size_bytes).collect()),
            members,
            catalog: Mutex::new(catalog),
        }
    }

    /// Closes every member (embedded ones save their state); the first error wins.
    pub fn close(self) -> Result<(), ArrayError> {
        let mut first = Ok(());
        for m in self.members {
            let (index, uri) = (m.index, m.uri.clone());
            if let Err(source) = m.device.close() {
                if first.is_ok() {
                    first = Err(ArrayError::Member {
                        member: index,
                        uri,
                        op: "close",
                        source: Box::new(source),
                    });
                }
            }
        }
        first
    }

    /// Keeps member `tag`'s connection and closes the others (for running a program
    /// next to a file on that member).
    pub fn into_member(self, tag: u16) -> Result<Device, ArrayError> {
        self.member_at(tag)?;
        let mut kept = None;
        for m in self.members {
            if m.index == tag {
                kept = Some(m.device);
            } else {
                let (index, uri) = (m.index, m.uri.clone());
                m.device.close().map_err(|source| ArrayError::Member {
                    member: index,
                    uri,
                    op: "close",
                    source: Box::new(source),
                })?;
            }
        }
        Ok(kept.expect("checked above"))
    }

    // ---------------------------------------------------------------------------------
    // Accessors.

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn desc(&self) -> &ArrayDesc {
        &self.desc
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Member `tag`, or a typed error naming the tag and the member count.
    pub fn member_at(&self, tag: u16) -> Result<&Member, ArrayError> {
        self.members
            .get(usize::from(tag))
            .ok_or(ArrayError::NoSuchMember {
                tag,
                members: self.members.len() as u16,
            })
    }

    /// The per-link byte counters.
    pub fn links(&self) -> &LinkStats {
        &self.links
    }

    /// The modelled links.
    pub fn link_model(&self) -> &LinkModel {
        &self.desc.link
    }

    /// The block lock table (COSTA's).
    pub fn locks(&self) -> &LockTable {
        &self.locks
    }

    /// Wraps a member's call error with the member's name.
    pub fn member_error(
        &self,
        member: u16,
        op: &'static str,
    ) -> impl FnOnce(CallError) -> ArrayError + '_ {
        move |source| ArrayError::Member {
            member,
            uri: self.members[usize::from(member)].uri.clone(),
            op,
            source: Box::new(source),
        }
    }

    /// Maps a failed session step on `member` to the error naming it.
    pub fn session_error(
        &self,
        member: u16,
    ) -> impl FnOnce(csx_host::session::SessionError) -> ArrayError + '_ {
        move |source| ArrayError::Session {
            member,
            uri: self.members[usize::from(member)].uri.clone(),
            source: Box::new(source),
        }
    }

    fn catalog(&self) -> MutexGuard<'_, Catalog> {
        self.catalog.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The member path of piece `id`.
    pub fn member_path(&self, id: u64) -> String {
        member_path(&self.desc.id, id)
    }

    // ---------------------------------------------------------------------------------
    // Files.

    /// The files under `dir` (`/` for all), sorted by path.
    pub fn list(&self, dir: &str) -> Vec<(String, FileEntry)> {
        self.catalog()
            .files
            .iter()
            .filter(|(p, _)| desc::is_under(p, dir))
            .map(|(p, e)| (p.clone(), e.clone()))
            .collect()
    }

    /// One file's catalog entry.
    pub fn stat(&self, path: &str) -> Result<FileEntry, ArrayError> {
        let path = normalize_path(path)?;
        self.catalog()
            .files
            .get(&path)
            .cloned()
            .ok_or(ArrayError::NotFound { path })
    }

    pub(crate) fn resolve_layout(&self, placement: Placement) -> Result<Layout, ArrayError> {
        match placement {
            Placement::Member(m) => {
                self.member_at(m)?;
                Ok(Layout::Single { member: m })
            }
            Placement::Auto => {
                let cat = self.catalog();
                let mut used = vec![0u64; self.members.len()];
                for e in cat.files.values() {
                    for (m, bytes) in piece_sizes(e) {
                        used[usize::from(m)] += bytes;
                    }
                }
                let member = (0..used.len()).min_by_key(|&i| used[i]).unwrap_or(0) as u16;
                Ok(Layout::Single { member })
            }
            Placement::Striped { stripe_bytes } => {
                if !(STRIPE_MIN..=STRIPE_MAX).contains(&stripe_bytes) {
                    return Err(ArrayError::OutOfRange {
                        what: "stripe size",
                        value: stripe_bytes,
                        min: STRIPE_MIN,
                        max: STRIPE_MAX,
                    });
                }
                if !stripe_bytes.is_multiple_of(STRIPE_MIN) {
                    return Err(ArrayError::Unaligned {
                        what: "stripe size",
                        value: stripe_bytes,
                        align: STRIPE_MIN,
                    });
                }
                Ok(Layout::Striped {
                    stripe_bytes,
                    members: (0..self.members.len() as u16).collect(),
                })
            }
        }
    }

    pub(crate) fn reserve_id(&self) -> u64 {
        let mut cat = self.catalog();
        let id = cat.next_id;
        cat.next_id += 1;
        id
    }

    /// Names `entry` as `path` in the catalog (replacing and then deleting what was
    /// there): the commit point of every write.
    pub(crate) fn commit(&self, path: &str, entry: FileEntry) -> Result<(), ArrayError> {
        let old = {
            let mut cat = self.catalog();
            let mut next = cat.clone();
            let old = next.files.insert(path.to_string(), entry);
            desc::write_json(&self.dir, CATALOG_FILE, &next)?;
            *cat = next;
            old
        };
        if let Some(old) = old {
            // Best effort: the new data is committed; a failure leaves an orphan.
            let _ = self.delete_pieces(&old);
        }
        Ok(())
    }

    /// Deletes an entry's pieces on every member that holds one and flushes those
    /// members. A piece already missing (a member that lost it) counts as deleted; the
    /// other pieces are deleted whatever fails, and the first failure is returned.
    fn delete_pieces(&self, entry: &FileEntry) -> Result<(), ArrayError> {
        let path = self.member_path(entry.id);
        let mut first = Ok(());
        for m in layout_members(&entry.layout) {
            let device = &self.members[usize::from(m)].device;
            let done = match device.delete_file(&path) {
                Ok(()) | Err(CallError::NotFound(_)) => {
                    device.flush().map_err(self.member_error(m, "flush"))
                }
                Err(e) => Err(self.member_error(m, "file-delete")(e)),
            };
            if first.is_ok() {
                first = done;
            }
        }
        first
    }

    /// Makes everything written to the members so far durable (flushes each).
    pub fn flush(&self) -> Result<(), ArrayError> {
        self.flush_members(self.members.iter().map(|m| m.index))
    }

    /// Flushes the members `tags`, in parallel.
    pub(crate) fn flush_members(
        &self,
        tags: impl IntoIterator<Item = u16>,
    ) -> Result<(), ArrayError> {
        let tags: Vec<u16> = tags.into_iter().collect();
        let results: Vec<Result<(), ArrayError>> = std::thread::scope(|s| {
            let handles: Vec<_> = tags
                .iter()
                .map(|&m| {
                    s.spawn(move || {
                        self.members[usize::from(m)]
                            .device
                            .flush()
                            .map_err(self.member_error(m, "flush"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a member flush panicked"))
                .collect()
        });
        results.into_iter().collect()
    }

    /// Deletes an array file.
    pub fn delete(&self, path: &str) -> Result<(), ArrayError> {
        let path = normalize_path(path)?;
        let old = {
            let mut cat = self.catalog();
            let mut next = cat.clone();
            let Some(old) = next.files.remove(&path) else {
                return Err(ArrayError::NotFound { path });
            };
            desc::write_json(&self.dir, CATALOG_FILE, &next)?;
            *cat = next;
            old
        };
        self.delete_pieces(&old)
    }

    /// Renames an array file (replacing `to`), atomically: the catalog is the only thing
    /// that changes.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), ArrayError> {
        let from = normalize_path(from)?;
        let to = normalize_path(to)?;
        let old = {
            let mut cat = self.catalog();
            let mut next = cat.clone();
            let Some(entry) = next.files.remove(&from) else {
                return Err(ArrayError::NotFound { path: from });
            };
            let old = next.files.insert(to, entry);
            desc::write_json(&self.dir, CATALOG_FILE, &next)?;
            *cat = next;
            old
        };
        if let Some(old) = old {
            let _ = self.delete_pieces(&old);
        }
        Ok(())
    }

    /// Makes the array file `path` hold exactly `data`, placed per `placement`.
    pub fn put_bytes(
        &self,
        path: &str,
        data: &[u8],
        placement: Placement,
    ) -> Result<FileEntry, ArrayError> {
        let mut src = Source::Bytes(data);
        self.put_from(path, &mut src, data.len() as u64, placement, &mut |_| {})
    }

    /// Streams the local file `local` into the array file `path`.
    pub fn put_file(
        &self,
        local: &Path,
        path: &str,
        placement: Placement,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<FileEntry, ArrayError> {
        let lerr = |op| {
            move |source| ArrayError::Local {
                op,
                path: local.to_path_buf(),
                source,
            }
        };
        let file = std::fs::File::open(local).map_err(lerr("open"))?;
        let size = file.metadata().map_err(lerr("stat"))?.len();
        let mut src = Source::File(file, local.to_path_buf());
        self.put_from(path, &mut src, size, placement, progress)
    }

    fn put_from(
        &self,
        path: &str,
        src: &mut Source<'_>,
        size: u64,
        placement: Placement,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<FileEntry, ArrayError> {
        let path = normalize_path(path)?;
        let layout = self.resolve_layout(placement)?;
        let entry = FileEntry {
            id: self.reserve_id(),
            size_bytes: size,
            layout,
        };
        // The pieces are durable on every member before the catalog names them, so a
        // crash of any member after the commit cannot leave the file with a piece
        // missing; the catalog commit is itself atomic and durable (`desc::write_json`).
        let written = self
            .write_pieces(&entry, src, progress)
            .and_then(|()| self.flush_members(layout_members(&entry.layout)));
        if let Err(e) = written {
            let _ = self.delete_pieces(&entry);
            return Err(e);
        }
        self.commit(&path, entry.clone())?;
        Ok(entry)
    }

    /// Writes a new entry's pieces from `src`.
    pub(crate) fn write_pieces(
        &self,
        entry: &FileEntry,
        src: &mut Source<'_>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ArrayError> {
        let mpath = self.member_path(entry.id);
        let size = entry.size_bytes;
        // Every piece starts empty (a fresh id, but a crash may have left an orphan).
        for m in layout_members(&entry.layout) {
            self.members[usize::from(m)]
                .device
                .put_bytes(&mpath, &[])
                .map_err(self.member_error(m, "file-write"))?;
        }
        let (stripe, order, buf_len) = stripe_geometry(&entry.layout);
        let n = order.len() as u64;
        let mut done = 0u64;
        while done < size {
            let len = buf_len.min(size - done);
            let buf = src.read(len)?;
            let pieces = split_stripes(&buf, order.len(), stripe);
            let piece_offset = done / n;
            let results: Vec<Result<(), ArrayError>> = std::thread::scope(|s| {
                let handles: Vec<_> = pieces
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| !p.is_empty())
                    .map(|(j, piece)| {
                        let m = order[j];
                        let mpath = &mpath;
                        s.spawn(move || {
                            self.members[usize::from(m)]
                                .device
                                .write_file(mpath, piece_offset, piece)
                                .map_err(self.member_error(m, "file-write"))?;
                            self.links.host_write(m, piece.len() as u64);
                            Ok(())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a member writer panicked"))
                    .collect()
            });
            results.into_iter().collect::<Result<(), _>>()?;
            done += len;
            progress(Progress {
                done_bytes: done,
                total_bytes: size,
            });
        }
        Ok(())
    }

    /// Reads the whole array file `path`.
    pub fn get_bytes(&self, path: &str) -> Result<Vec<u8>, ArrayError> {
        let entry = self.stat(path)?;
        let mut out = Vec::with_capacity(entry.size_bytes as usize);
        self.read_pieces(
            &entry,
            &mut |buf| {
                out.extend_from_slice(buf);
                Ok(())
            },
            &mut |_| {},
        )?;
        Ok(out)
    }

    /// Bytes `[offset, offset + len)` of the array file `entry` (fewer at its end):
    /// only the stripes the range touches are read, each from its member.
    pub fn read_range(
        &self,
        entry: &FileEntry,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ArrayError> {
        let mpath = self.member_path(entry.id);
        let end = offset.saturating_add(len).min(entry.size_bytes);
        let (stripe, order) = stripes(&entry.layout);
        let n = order.len() as u64;
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            // Stripe q of the file is stripe q / n of member q % n's piece.
            let (q, within) = (pos / stripe, pos % stripe);
            let take = (stripe - within).min(end - pos);
            let m = order[(q % n) as usize];
            let piece_offset = (q / n) * stripe + within;
            let d = self.members[usize::from(m)]
                .device
                .read_file(&mpath, piece_offset, take)
                .map_err(self.member_error(m, "file-read"))?;
            self.links.host_read(m, d.len() as u64);
            if d.len() as u64 != take {
                return Err(ArrayError::Other(format!(
                    "array member {m}: piece {mpath} is short: {} bytes at {piece_offset}, expected {take}",
                    d.len()
                )));
            }
            out.extend_from_slice(&d);
            pos += take;
        }
        Ok(out)
    }

    /// Streams the array file `path` into the local file `local` (created or replaced).
    pub fn get_file(
        &self,
        path: &str,
        local: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64, ArrayError> {
        use std::io::Write as _;
        let entry = self.stat(path)?;
        let lerr = |op| {
            move |source| ArrayError::Local {
                op,
                path: local.to_path_buf(),
                source,
            }
        };
        // Not a regular file (a pipe, /dev/stdout): written in place, nothing to sync.
        if std::fs::metadata(local).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .open(local)
                .map_err(lerr("open"))?;
            self.read_pieces(
                &entry,
                &mut |buf| out.write_all(buf).map_err(lerr("write")),
                progress,
            )?;
            return Ok(entry.size_bytes);
        }
        // A synced temporary renamed over `local`: never a partial file under its name.
        let name = local
            .file_name()
            .map_or_else(|| "get".into(), |n| n.to_string_lossy().into_owned());
        let tmp = local.with_file_name(format!(".{name}.csx-partial-{}", std::process::id()));
        let terr = |op| {
            let tmp = tmp.clone();
            move |source| ArrayError::Local {
                op,
                path: tmp,
                source,
            }
        };
        let result = (|| {
            let mut file = std::fs::File::create(&tmp).map_err(terr("create"))?;
            self.read_pieces(
                &entry,
                &mut |buf| file.write_all(buf).map_err(lerr("write")),
                progress,
            )?;
            file.sync_all().map_err(terr("sync"))?;
            drop(file);
            std::fs::rename(&tmp, local).map_err(lerr("replace"))?;
            let parent = match local.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(lerr("sync the directory of"))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map(|()| entry.size_bytes)
    }

    /// Reads an entry's bytes in order, a buffer at a time, into `sink`.
    pub(crate) fn read_pieces(
        &self,
        entry: &FileEntry,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), ArrayError>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ArrayError> {
        let mpath = self.member_path(entry.id);
        let size = entry.size_bytes;
        let (stripe, order, buf_len) = stripe_geometry(&entry.layout);
        let n = order.len() as u64;
        let mut done = 0u64;
        while done < size {
            let len = buf_len.min(size - done);
            let piece_offset = done / n;
            let lens = stripe_piece_lens(len, order.len(), stripe);
            let pieces: Vec<Result<Vec<u8>, ArrayError>> = std::thread::scope(|s| {
                let handles: Vec<_> = lens
                    .iter()
                    .enumerate()
                    .map(|(j, &plen)| {
                        let m = order[j];
                        let mpath = &mpath;
                        s.spawn(move || {
                            if plen == 0 {
                                return Ok(Vec::new());
                            }
                            let d = self.members[usize::from(m)]
                                .device
                                .read_file(mpath, piece_offset, plen)
                                .map_err(self.member_error(m, "file-read"))?;
                            self.links.host_read(m, d.len() as u64);
                            if d.len() as u64 != plen {
                                return Err(ArrayError::Other(format!(
                                    "array member {m}: piece {mpath} is short: {} bytes at {piece_offset}, expected {plen}",
                                    d.len()
                                )));
                            }
                            Ok(d)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a member reader panicked"))
                    .collect()
            });
            let pieces = pieces.into_iter().collect::<Result<Vec<_>, _>>()?;
            sink(&join_stripes(&pieces, len as usize, stripe))?;
            done += len;
            progress(Progress {
                done_bytes: done,
                total_bytes: size,
            });
        }
        Ok(())
    }

    /// The FIEMAP of an array file: its extents as tagged block addresses, in file
    /// order.
    pub fn map(&self, path: &str) -> Result<FileMap, ArrayError> {
        let path = normalize_path(path)?;
        let entry = self.stat(&path)?;
        let mpath = self.member_path(entry.id);
        let (stripe, order) = stripes(&entry.layout);
        let n = order.len() as u64;
        let mut extents = Vec::new();
        let mut truncated = false;
        for (j, &m) in order.iter().enumerate() {
            let ext = self.members[usize::from(m)]
                .device
                .extents(&mpath)
                .map_err(self.member_error(m, "file-extents"))?;
            truncated |= ext.truncated;
            for e in ext.extents {
                // Split at stripe boundaries: consecutive piece bytes belong to stripes
                // n apart in the file.
                let mut p = e.file_offset;
                let end = e.file_offset + e.len;
                while p < end {
                    let (q, within) = if stripe == u64::MAX {
                        (0, p)
                    } else {
                        (p / stripe, p % stripe)
                    };
                    let take = if stripe == u64::MAX {
                        end - p
                    } else {
                        (stripe - within).min(end - p)
                    };
                    let file_offset = if stripe == u64::MAX {
                        p
                    } else {
                        (q * n + j as u64) * stripe + within
                    };
                    let nvm = e.nvm_offset + (p - e.file_offset);
                    extents.push(TaggedExtent {
                        file_offset,
                        len: take,
                        member: m,
                        addr: TaggedAddr::from_byte_offset(m, nvm - nvm % SECTOR_SIZE)?,
                    });
                    p += take;
                }
            }
        }
        extents.sort_by_key(|e| e.file_offset);
        Ok(FileMap {
            path,
            entry,
            extents,
            truncated,
        })
    }

    /// Member files under this array's prefix that the catalog does not name (left by a
    /// crash between writing data and committing it): `(member, member path)`.
    pub fn orphans(&self) -> Result<Vec<(u16, String)>, ArrayError> {
        let live: std::collections::HashSet<String> = self
            .catalog()
            .files
            .values()
            .map(|e| self.member_path(e.id))
            .collect();
        let prefix = format!("/csx-array/{}", self.desc.id);
        let mut out = Vec::new();
        for m in &self.members {
            let list = m
                .device
                .list_files(&prefix)
                .map_err(self.member_error(m.index, "file-list"))?;
            out.extend(
                list.files
                    .into_iter()
                    .filter(|f| !live.contains(&f.path))
                    .map(|f| (m.index, f.path)),
            );
        }
        Ok(out)
    }
}

/// Where put bytes come from.
pub(crate) enum Source<'a> {
    Bytes(&'a [u8]),
    File(std::fs::File, PathBuf),
}

impl Source<'_> {
    fn read(&mut self, len: u64) -> Result<Vec<u8>, ArrayError> {
        use std::io::Read as _;
        match self {
            Source::Bytes(b) => {
                let (head, rest) = b.split_at(len as usize);
                *b = rest;
                Ok(head.to_vec())
            }
            Source::File(f, path) => {
                let mut buf = vec![0u8; len as usize];
                f.read_exact(&mut buf).map_err(|source| ArrayError::Local {
                    op: "read",
                    path: path.clone(),
                    source,
                })?;
                Ok(buf)
            }
        }
    }
}

/// A layout's stripe size (`u64::MAX` for a file on one member: one stripe) and its
/// members in stripe order.
pub fn stripes(layout: &Layout) -> (u64, Vec<u16>) {
    match layout {
        Layout::Single { member } => (u64::MAX, vec![*member]),
        Layout::Striped {
            stripe_bytes,
            members,
        } => (*stripe_bytes, members.clone()),
    }
}

/// The members an entry has pieces on.
pub fn layout_members(layout: &Layout) -> Vec<u16> {
    match layout {
        Layout::Single { member } => vec![*member],
        Layout::Striped { members, .. } => members.clone(),
    }
}

/// Bytes of each member's piece of an entry.
pub fn piece_sizes(entry: &FileEntry) -> Vec<(u16, u64)> {
    match &entry.layout {
        Layout::Single { member } => vec![(*member, entry.size_bytes)],
        Layout::Striped {
            stripe_bytes,
            members,
        } => members
            .iter()
            .copied()
            .zip(stripe_piece_lens(
                entry.size_bytes,
                members.len(),
                *stripe_bytes,
            ))
            .collect(),
    }
}

/// Lengths of the `n` pieces of `len` bytes striped `stripe` at a time from stripe 0.
pub fn stripe_piece_lens(len: u64, n: usize, stripe: u64) -> Vec<u64> {
    let n64 = n as u64;
    let full = len / stripe;
    let tail = len % stripe;
    (0..n64)
        .map(|j| {
            let stripes = full / n64 + u64::from(j < full % n64);
            stripes * stripe + if j == full % n64 { tail } else { 0 }
        })
        .collect()
}

/// Splits `buf` (starting on a stripe-group boundary) into the `n` members' pieces.
fn split_stripes(buf: &[u8], n: usize, stripe: u64) -> Vec<Vec<u8>> {
    let mut pieces = vec![Vec::new(); n];
    for (k, chunk) in buf.chunks(stripe as usize).enumerate() {
        pieces[k % n].extend_from_slice(chunk);
    }
    pieces
}

/// The inverse of [`split_stripes`].
fn join_stripes(pieces: &[Vec<u8>], len: usize, stripe: u64) -> Vec<u8> {
    let n = pieces.len();
    let s = stripe as usize;
    let mut out = Vec::with_capacity(len);
    let mut k = 0usize;
    while out.len() < len {
        let piece = &pieces[k % n];
        let start = (k / n) * s;
        let end = (start + s).min(piece.len());
        out.extend_from_slice(&piece[start..end]);
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_round_trip() {
        for len in [0usize, 1, 4095, 4096, 4097, 3 * 4096, 10 * 4096 + 17] {
            let buf: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            for n in 1..5 {
                let pieces = split_stripes(&buf, n, 4096);
                let lens = stripe_piece_lens(len as u64, n, 4096);
                assert_eq!(
                    pieces.iter().map(|p| p.len() as u64).collect::<Vec<_>>(),
                    lens,
                    "len {len} n {n}"
                );
                assert_eq!(join_stripes(&pieces, len, 4096), buf);
            }
        }
    }

    /// A range of a striped file reads only the stripes it touches, from their members,
    /// and equals the same bytes of the whole file.
    #[test]
    fn a_range_read_touches_only_its_stripes() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = DeviceConfig {
            nvm_size_bytes: 8 << 20,
            slm_size_bytes: 1 << 20,
            ..Default::default()
        };
        let array =
            Array::init_embedded(&tmp.path().join("a"), 3, cfg, LinkModel::default()).unwrap();
        let data: Vec<u8> = (0..1_000_003u32).map(|i| (i * 13 % 251) as u8).collect();
        let entry = array
            .put_bytes("/s", &data, Placement::Striped { stripe_bytes: 4096 })
            .unwrap();
        for (offset, len) in [
            (0u64, 1u64),
            (4095, 2),
            (4096 * 3 - 5, 4096 * 2 + 10),
            (999_990, 100),
            (123_457, 65_536),
            (2_000_000, 9),
        ] {
            array.links().reset();
            let got = array.read_range(&entry, offset, len).unwrap();
            let start = (offset as usize).min(data.len());
            let end = (offset + len).min(data.len() as u64) as usize;
            assert_eq!(got, &data[start..end], "offset {offset} len {len}");
            // Only the asked bytes crossed to the host.
            assert_eq!(array.links().snapshot().host.ingress, got.len() as u64);
        }
        array.close().unwrap();
    }
}
