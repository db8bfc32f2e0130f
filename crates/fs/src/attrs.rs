//! Permissions, owners and times the mount keeps for the device's paths.
//!
//! The file store keeps names, bytes, sizes and modification times only. The mount keeps
//! the rest (mode, owner, group, times set by `utimes`, the time of the last attribute
//! change) in one file on the device, [`ATTRS_FILE`], hidden from the mount: a journal
//! of JSON lines, each a change (`set` a path's attributes, `del` a path and everything
//! below it, `mv` a path and everything below it). It is read whole when the mount
//! starts, appended to as attributes change, and rewritten by replace-by-rename (a new
//! file renamed over the old, so a crash leaves one or the other) when it has grown to
//! several times what it describes. A torn last line (a crash mid-append) is ignored.
//!
//! - A path with no record has the defaults: owned by the mounting user and group, mode
//!   0644 for a file and 0755 for a directory. A path whose attributes equal the defaults
//!   costs no record.
//! - A time set by `utimes` holds until the file changes again (its device modification
//!   time moves), then the device's time shows again.
//! - Mode, owner and group changes are flushed to the device before `chmod`/`chown`
//!   return; other records become durable with the next flush (`fsync`, the `close` of
//!   a written file, unmount).
//! - Attributes follow paths: a file deleted and re-created outside the mount (`csx rm`,
//!   `csx put`) keeps the attributes the mount had recorded for its path. Two mounts of one
//!   device at once each keep their own view; a change made by one reaches the other when
//!   it next records a change or remounts.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::core::{FsError, MetalFs};

/// The device file holding the attributes, hidden from the mount.
pub const ATTRS_FILE: &str = "/.csx-attrs";
/// The name [`ATTRS_FILE`] is rewritten under before it is renamed over it.
const ATTRS_NEW: &str = "/.csx-attrs.new";

/// The mode bits a path may carry (permissions, set-id and sticky bits).
pub const MODE_MASK: u32 = 0o7777;

/// Whether `path` is the mount's own bookkeeping, never shown or touched through it.
pub fn is_hidden(path: &str) -> bool {
    path == ATTRS_FILE || path == ATTRS_NEW
}

/// The attributes of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Permission, set-id and sticky bits ([`MODE_MASK`]).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Access time set by `utimes` (ns since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atime_ns: Option<i64>,
    /// Modification time set by `utimes`, and the device's modification time when it
    /// was set: it holds while the device's time is still that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<(i64, u64)>,
    /// Time of the last attribute change (ns since the epoch), 0 for none.
    #[serde(default)]
    pub ctime_ns: i64,
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Record {
    Set { path: String, meta: Meta },
    Del { path: String },
    Mv { from: String, to: String },
}

fn below(path: &str, root: &str) -> bool {
    path == root
        || (path.len() > root.len()
            && path.starts_with(root)
            && path.as_bytes()[root.len()] == b'/')
        || root == "/"
}

/// The attributes of every path that has a record.
#[derive(Debug, Default)]
struct Table {
    map: BTreeMap<String, Meta>,
    /// Bytes of the journal on the device as this mount last wrote or read it.
    len: u64,
    /// Lines in the journal.
    lines: u64,
}

impl Table {
    fn apply(&mut self, r: Record) {
        match r {
            Record::Set { path, meta } => {
                self.map.insert(path, meta);
            }
            Record::Del { path } => self.map.retain(|p, _| !below(p, &path)),
            Record::Mv { from, to } => {
                if from == to || from == "/" {
                    return;
                }
                self.map.retain(|p, _| !below(p, &to));
                let moved: Vec<(String, Meta)> = self
                    .map
                    .iter()
                    .filter(|(p, _)| below(p, &from))
                    .map(|(p, m)| (format!("{to}{}", &p[from.len()..]), *m))
                    .collect();
                self.map.retain(|p, _| !below(p, &from));
                self.map.extend(moved);
            }
        }
    }

    fn parse(bytes: &[u8]) -> Table {
        let mut t = Table {
            len: bytes.len() as u64,
            ..Table::default()
        };
        for line in bytes.split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            t.lines += 1;
            // A line that does not parse is a torn append: skipped.
            if let Ok(r) = serde_json::from_slice::<Record>(line) {
                t.apply(r);
            }
        }
        t
    }
}

/// The mount's attribute table over one device.
#[derive(Debug)]
pub struct Attrs {
    table: Mutex<Table>,
    /// Owner and group of paths with no record.
    pub uid: u32,
    pub gid: u32,
}

fn line(r: &Record) -> Vec<u8> {
    let mut v = serde_json::to_vec(r).expect("a record serializes");
    v.push(b'\n');
    v
}

impl Attrs {
    /// Reads the journal of `fs`'s device (none yet: every path has the defaults);
    /// paths without a record belong to `uid`/`gid`.
    pub fn load(fs: &MetalFs, uid: u32, gid: u32) -> Result<Attrs, FsError> {
        let bytes = read_journal(fs)?;
        let a = Attrs {
            table: Mutex::new(Table::parse(&bytes)),
            uid,
            gid,
        };
        Ok(a)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The defaults for a path with no record.
    pub fn default_meta(&self, dir: bool) -> Meta {
        Meta {
            mode: if dir { 0o755 } else { 0o644 },
            uid: self.uid,
            gid: self.gid,
            atime_ns: None,
            mtime: None,
            ctime_ns: 0,
        }
    }

    /// The attributes of `path` (a directory when `dir`).
    pub fn get(&self, path: &str, dir: bool) -> Meta {
        self.lock()
            .map
            .get(path)
            .copied()
            .unwrap_or_else(|| self.default_meta(dir))
    }

    /// Appends `r` to the journal and applies it. When the device's journal is not as
    /// this mount left it (another mount wrote), it is read again first.
    fn record(&self, fs: &MetalFs, r: Record) -> Result<(), FsError> {
        let mut t = self.lock();
        let on_device = match fs.stat(ATTRS_FILE) {
            Ok(a) => a.size,
            Err(e) if e.errno == libc::ENOENT => 0,
            Err(e) => return Err(e),
        };
        if on_device != t.len {
            *t = Table::parse(&read_journal(fs)?);
        }
        let bytes = line(&r);
        fs.write(ATTRS_FILE, t.len, &bytes)?;
        t.len += bytes.len() as u64;
        t.lines += 1;
        t.apply(r);
        if t.lines > 64 && t.lines > 4 * t.map.len() as u64 {
            compact(fs, &mut t)?;
        }
        Ok(())
    }

    /// Sets the attributes of `path`; a path whose attributes equal the defaults and
    /// that has no record gets none.
    pub fn set(&self, fs: &MetalFs, path: &str, dir: bool, meta: Meta) -> Result<(), FsError> {
        let has = self.lock().map.contains_key(path);
        if !has && meta == self.default_meta(dir) {
            return Ok(());
        }
        self.record(
            fs,
            Record::Set {
                path: path.to_owned(),
                meta,
            },
        )
    }

    /// Forgets `path` and everything below it (unlink, rmdir; a fresh file at a path).
    pub fn remove(&self, fs: &MetalFs, path: &str) -> Result<(), FsError> {
        let any = self.lock().map.keys().any(|p| below(p, path));
        if !any {
            return Ok(());
        }
        self.record(
            fs,
            Record::Del {
                path: path.to_owned(),
            },
        )
    }

    /// Moves the attributes of `from` and everything below it to `to`, dropping those
    /// at `to` (a rename).
    pub fn rename(&self, fs: &MetalFs, from: &str, to: &str) -> Result<(), FsError> {
        let any = self
            .lock()
            .map
            .keys()
            .any(|p| below(p, from) || below(p, to));
        if !any {
            return Ok(());
        }
        self.record(
            fs,
            Record::Mv {
                from: from.to_owned(),
                to: to.to_owned(),
            },
        )
    }

    /// Paths with a record (for tests and tools).
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn read_journal(fs: &MetalFs) -> Result<Vec<u8>, FsError> {
    match fs.stat(ATTRS_FILE) {
        Ok(a) => fs.read(ATTRS_FILE, 0, a.size),
        Err(e) if e.errno == libc::ENOENT => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Rewrites the journal as one `set` line per path, by replace-by-rename.
fn compact(fs: &MetalFs, t: &mut Table) -> Result<(), FsError> {
    let mut bytes = Vec::new();
    for (path, meta) in &t.map {
        bytes.extend(line(&Record::Set {
            path: path.clone(),
            meta: *meta,
        }));
    }
    let _ = fs.unlink(ATTRS_NEW);
    fs.write(ATTRS_NEW, 0, &bytes)?;
    if bytes.is_empty() {
        fs.create(ATTRS_NEW, false)?;
    }
    fs.sync()?;
    fs.rename(ATTRS_NEW, ATTRS_FILE)?;
    fs.sync()?;
    t.len = bytes.len() as u64;
    t.lines = t.map.len() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mode: u32) -> Meta {
        Meta {
            mode,
            uid: 1,
            gid: 2,
            atime_ns: None,
            mtime: None,
            ctime_ns: 0,
        }
    }

    #[test]
    fn a_journal_replays_sets_moves_and_deletes_and_skips_a_torn_line() {
        let mut j = Vec::new();
        for r in [
            Record::Set {
                path: "/d/a".into(),
                meta: meta(0o600),
            },
            Record::Set {
                path: "/d/b".into(),
                meta: meta(0o640),
            },
            Record::Set {
                path: "/dx".into(),
                meta: meta(0o700),
            },
            Record::Mv {
                from: "/d".into(),
                to: "/e".into(),
            },
            Record::Del {
                path: "/e/b".into(),
            },
        ] {
            j.extend(line(&r));
        }
        j.extend_from_slice(b"{\"op\":\"set\",\"path\":\"/e/a\",\"me");
        let t = Table::parse(&j);
        assert_eq!(t.map.get("/e/a").map(|m| m.mode), Some(0o600));
        assert!(!t.map.contains_key("/e/b"));
        assert!(!t.map.contains_key("/d/a"));
        // A sibling whose name starts with the moved directory's stays.
        assert_eq!(t.map.get("/dx").map(|m| m.mode), Some(0o700));
        assert_eq!(t.map.len(), 2);
    }
}
