//! Directories of the file store: explicit directories, directory listings with one entry
//! per child, directory rename and removal.
//!
//! In memory an explicit directory `/a/b` is keyed `/a/b/` in `State::dirs`, so that in
//! byte order it sits with the paths below it: the children of a directory `d` are then
//! found by one ordered walk of both maps from `d/`, each child directory's subtree
//! skipped in one step (`d/x0` is the first string after every `d/x/...`, as `'0'` follows
//! `'/'`). Listing order is the order of the entries' *keys*: a file's key is its name,
//! a directory's is its name and `/` (so `x.b` comes before the directory `x`); a listing
//! resumes after a key.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use csx_proto::limits::PARTIAL_DIR;
use redb::{ReadableTable, TableError};

use super::path::{self, PathError, NAME_SIZE_MAX, PATH_SIZE_MAX};
use super::record::FileRecord;
use super::{canonical, meta_corrupt, now_ns, FileStore, FileStoreError, State, DIRS_TABLE};

/// Explicit directories one store holds (implicit ones are bounded by the files).
pub const DIRS_MAX: usize = 1 << 20;

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
}

/// One child of a directory, or what [`FileStore::lookup`] finds at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The last component of the path (empty for the root).
    pub name: String,
    pub kind: EntryKind,
    /// Bytes of a file; 0 for a directory.
    pub size: u64,
    /// A file's last change; an explicit directory's creation; the epoch for an implicit
    /// directory.
    pub modified: SystemTime,
}

impl DirEntry {
    /// The key listings are ordered by and resume after: the name, plus `/` for a
    /// directory.
    pub fn key(&self) -> String {
        match self.kind {
            EntryKind::File => self.name.clone(),
            EntryKind::Dir => format!("{}/", self.name),
        }
    }
}

/// The in-memory key of the explicit directory `path`.
pub(super) fn dir_key(path: &str) -> String {
    format!("{path}/")
}

fn at_ns(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn name_of(path: &str) -> &str {
    path.rfind('/').map_or(path, |i| &path[i + 1..])
}

fn parent_of(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

impl FileStore {
    /// What is at `path`: a file, a directory (explicit or implicit; `""` or `/` is the
    /// root) or nothing ([`FileStoreError::NotFound`]).
    pub fn lookup(&self, path: &str) -> Result<DirEntry, FileStoreError> {
        let path = dir_canonical(path)?;
        let st = self.read_state()?;
        st.entry(&path)
            .ok_or(FileStoreError::NotFound { path: path.clone() })
    }

    /// The children of directory `dir` in key order (see the module docs), those whose key
    /// is after `after` (`""` for the first), at most `max`; and whether more follow.
    pub fn read_dir(
        &self,
        dir: &str,
        after: &str,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool), FileStoreError> {
        let dir = dir_canonical(dir)?;
        let st = self.read_state()?;
        if st.files.contains_key(&dir) {
            return Err(FileStoreError::NotADir { path: dir });
        }
        if !st.is_dir(&dir) {
            return Err(FileStoreError::NotFound { path: dir });
        }
        let prefix = dir_key(&dir);
        let mut cursor = match after.strip_suffix('/') {
            _ if after.is_empty() => Bound::Excluded(prefix.clone()),
            Some(name) => Bound::Included(format!("{prefix}{name}0")),
            None => Bound::Excluded(format!("{prefix}{after}")),
        };
        let mut out = Vec::new();
        loop {
            let next_file = st
                .files
                .range::<String, _>((cursor.clone(), Bound::Unbounded))
                .next()
                .map(|(p, r)| (p, Some(r)));
            let next_dir = st
                .dirs
                .range::<String, _>((cursor.clone(), Bound::Unbounded))
                .next()
                .map(|(p, _)| (p, None));
            let next = match (next_file, next_dir) {
                (Some(f), Some(d)) => Some(if f.0 < d.0 { f } else { d }),
                (f, d) => f.or(d),
            };
            let Some((p, record)) = next.filter(|(p, _)| p.starts_with(&prefix)) else {
                return Ok((out, false));
            };
            if out.len() >= max {
                return Ok((out, true));
            }
            let rest = &p[prefix.len()..];
            match (rest.find('/'), record) {
                (None, Some(record)) => {
                    out.push(file_entry(rest, record));
                    cursor = Bound::Excluded(p.clone());
                }
                (slash, _) => {
                    let name = &rest[..slash.unwrap_or(rest.len())];
                    out.push(st.dir_entry(&format!("{dir}/{name}")));
                    cursor = Bound::Included(format!("{prefix}{name}0"));
                }
            }
        }
    }

    /// Makes the directory `path`. Its parents need not exist (they become implicit
    /// directories). Fails if anything exists at `path` or a proper prefix is a file.
    pub fn mkdir(&self, path: &str) -> Result<(), FileStoreError> {
        let path = canonical(path)?;
        let mut guard = self.write_state()?;
        let st = &mut *guard;
        st.check_usable()?;
        if st.files.contains_key(&path) || st.is_dir(&path) {
            return Err(FileStoreError::Exists { path });
        }
        let file_above = path::ancestors(&path)
            .find(|a| st.files.contains_key(*a))
            .map(str::to_owned);
        if let Some(file) = file_above {
            return Err(FileStoreError::NotADirectory { file, path });
        }
        if st.dirs.len() >= DIRS_MAX {
            return Err(FileStoreError::TooManyDirs {
                path,
                count: st.dirs.len(),
                limit: DIRS_MAX,
            });
        }
        st.dirs.insert(dir_key(&path), now_ns());
        st.dirty_dirs.insert(path);
        Ok(())
    }

    /// Removes the empty directory `path`.
    pub fn rmdir(&self, path: &str) -> Result<(), FileStoreError> {
        let path = canonical(path)?;
        let mut guard = self.write_state()?;
        let st = &mut *guard;
        st.check_usable()?;
        if st.files.contains_key(&path) {
            return Err(FileStoreError::NotADir { path });
        }
        if !st.is_dir(&path) {
            return Err(FileStoreError::NotFound { path });
        }
        if st.has_children(&path) {
            return Err(FileStoreError::DirNotEmpty { path });
        }
        st.dirs.remove(&dir_key(&path));
        st.keep_parent(&path);
        st.dirty_dirs.insert(path);
        Ok(())
    }
}

fn dir_canonical(path: &str) -> Result<String, FileStoreError> {
    path::normalize_dir(path).map_err(|source| FileStoreError::InvalidPath {
        path: path::for_display(path),
        source,
    })
}

fn file_entry(name: &str, record: &FileRecord) -> DirEntry {
    DirEntry {
        name: name.to_owned(),
        kind: EntryKind::File,
        size: record.size,
        modified: at_ns(record.modified_ns),
    }
}

impl State {
    pub(super) fn entry(&self, path: &str) -> Option<DirEntry> {
        if let Some(record) = self.files.get(path) {
            return Some(file_entry(name_of(path), record));
        }
        self.is_dir(path).then(|| self.dir_entry(path))
    }

    fn dir_entry(&self, path: &str) -> DirEntry {
        DirEntry {
            name: name_of(path).to_owned(),
            kind: EntryKind::Dir,
            size: 0,
            modified: at_ns(self.dirs.get(&dir_key(path)).copied().unwrap_or(0)),
        }
    }

    /// Keeps the parent of `path`, whose entry was just removed, as an explicit directory
    /// if it has no entry left, so that a directory lasts until it is removed.
    pub(super) fn keep_parent(&mut self, path: &str) {
        let parent = parent_of(path);
        // The staging directory of whole-file writes never lingers once empty.
        if parent.is_empty() || parent == PARTIAL_DIR || self.has_children(parent) {
            return;
        }
        self.dirs.insert(dir_key(parent), now_ns());
        self.dirty_dirs.insert(parent.to_owned());
    }

    /// Renames directory `from` (checked to be one) to `to`, with everything below it.
    /// `to` must be missing or an empty directory, and not lie below `from`. Nothing
    /// changes on error.
    /// A directory `from` may move to `to`: not into itself, and `to` is no file, has
    /// no file among its ancestors, and is no directory with entries.
    fn check_rename_target(&self, from: &str, to: &str) -> Result<(), FileStoreError> {
        if path::is_within(to, from) {
            return Err(FileStoreError::RenameIntoItself {
                from: from.to_owned(),
                to: to.to_owned(),
            });
        }
        if self.files.contains_key(to) {
            return Err(FileStoreError::NotADir {
                path: to.to_owned(),
            });
        }
        if let Some(file) = path::ancestors(to).find(|a| self.files.contains_key(*a)) {
            return Err(FileStoreError::NotADirectory {
                path: to.to_owned(),
                file: file.to_owned(),
            });
        }
        if self.has_children(to) {
            return Err(FileStoreError::DirNotEmpty {
                path: to.to_owned(),
            });
        }
        Ok(())
    }

    pub(super) fn rename_dir(&mut self, from: &str, to: &str) -> Result<(), FileStoreError> {
        if from == to {
            return Ok(());
        }
        self.check_rename_target(from, to)?;
        let from_prefix = dir_key(from);
        let below = |p: &&String| p.starts_with(&from_prefix);
        let files: Vec<String> = self
            .files
            .range::<String, _>((Bound::Included(from_prefix.clone()), Bound::Unbounded))
            .map(|(p, _)| p)
            .take_while(below)
            .cloned()
            .collect();
        let dirs: Vec<String> = self
            .dirs
            .range::<String, _>((Bound::Included(from_prefix.clone()), Bound::Unbounded))
            .map(|(p, _)| p)
            .take_while(below)
            .cloned()
            .collect();
        let moved = |p: &str| format!("{to}{}", &p[from.len()..]);
        // Every new path must be a valid path: check them all before changing anything.
        for p in files.iter().chain(&dirs) {
            let new = moved(p);
            let len = new.trim_end_matches('/').len();
            if len > PATH_SIZE_MAX {
                return Err(FileStoreError::InvalidPath {
                    path: path::for_display(&new),
                    source: PathError::TooLong {
                        len,
                        limit: PATH_SIZE_MAX,
                    },
                });
            }
        }
        let to_name = name_of(to).len();
        if to_name > NAME_SIZE_MAX {
            return Err(FileStoreError::InvalidPath {
                path: path::for_display(to),
                source: PathError::NameTooLong {
                    len: to_name,
                    limit: NAME_SIZE_MAX,
                },
            });
        }
        if self.dirs.remove(&dir_key(to)).is_some() {
            self.dirty_dirs.insert(to.to_owned());
        }
        for p in files {
            let record = self.files.remove(&p).expect("listed above");
            let new = moved(&p);
            self.files.insert(new.clone(), record);
            self.touch(p);
            self.touch(new);
        }
        for key in dirs {
            let created = self.dirs.remove(&key).expect("listed above");
            let new = moved(&key);
            self.dirty_dirs.insert(key.trim_end_matches('/').to_owned());
            self.dirty_dirs.insert(new.trim_end_matches('/').to_owned());
            self.dirs.insert(new, created);
        }
        self.keep_parent(from);
        Ok(())
    }
}

/// Reads and checks the `dirs` table (missing in stores made before directories: empty).
pub(super) fn read_dirs(
    txn: &redb::ReadTransaction,
    meta_path: &Path,
    files: &BTreeMap<String, FileRecord>,
) -> Result<BTreeMap<String, u64>, FileStoreError> {
    let corrupt = |reason: String| meta_corrupt(meta_path, reason);
    let table = match txn.open_table(DIRS_TABLE) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(corrupt(format!("dirs table: {e}"))),
    };
    let mut dirs = BTreeMap::new();
    for entry in table
        .iter()
        .map_err(|e| corrupt(format!("dirs table: {e}")))?
    {
        let (key, value) = entry.map_err(|e| corrupt(format!("dirs table: {e}")))?;
        let path = key.value();
        if !path::is_canonical(path) {
            return Err(corrupt(format!(
                "directory path \"{}\" is not canonical",
                path::for_display(path)
            )));
        }
        if let Some(file) = std::iter::once(path)
            .chain(path::ancestors(path))
            .find(|p| files.contains_key(*p))
        {
            return Err(corrupt(format!(
                "directory {path} is, or lies below, the file {file}"
            )));
        }
        if dirs.len() >= DIRS_MAX {
            return Err(corrupt(format!("more than {DIRS_MAX} directories")));
        }
        dirs.insert(dir_key(path), value.value());
    }
    Ok(dirs)
}
