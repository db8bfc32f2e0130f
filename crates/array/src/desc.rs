//! What an array is, persisted in its state directory:
//!
//! | file           | contents                                                     |
//! |----------------|--------------------------------------------------------------|
//! | `array.json`   | [`ArrayDesc`]: format version, array id, member URIs, links  |
//! | `catalog.json` | [`Catalog`]: every array file's size, layout and member name |
//! | `m0/`, `m1/`.. | the state directories of embedded members                    |
//!
//! Both JSON files are replaced atomically (written to a temporary file, synced, renamed,
//! directory synced), so a crash leaves either the old or the new catalog. A file's data
//! is written to fresh member files before the catalog names them and old member files
//! are deleted only after, so a crash never leaves a catalog entry naming missing or
//! half-written data (at worst orphaned member files, which [`crate::Array::fsck`]
//! lists).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::ArrayError;
use crate::link::LinkModel;

/// The array description's file name.
pub const DESC_FILE: &str = "array.json";
/// The catalog's file name.
pub const CATALOG_FILE: &str = "catalog.json";
/// The layout version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One member: how to reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDesc {
    /// A device URI (`tcp://HOST:PORT`, `shm://NAME`, or a state directory); a relative
    /// path is relative to the array's directory (embedded members are `m0`, `m1`, ...).
    pub uri: String,
}

/// `array.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayDesc {
    pub format_version: u32,
    /// Names this array's files on shared members (`/csx-array/ID/...`).
    pub id: String,
    pub members: Vec<MemberDesc>,
    /// The modelled links (host link, device-to-device links).
    #[serde(default)]
    pub link: LinkModel,
}

/// How a file's bytes are spread over members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layout {
    /// All bytes on one member.
    Single { member: u16 },
    /// Stripe k (bytes `k*stripe_bytes ..`) on `members[k % n]`, at byte
    /// `(k / n) * stripe_bytes` of that member's piece.
    Striped {
        stripe_bytes: u64,
        members: Vec<u16>,
    },
}

/// One array file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Names the member files (`/csx-array/ARRAY/ID`).
    pub id: u64,
    pub size_bytes: u64,
    pub layout: Layout,
}

/// `catalog.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub next_id: u64,
    pub files: BTreeMap<String, FileEntry>,
}

/// The canonical spelling of an array path: leading `/`, no empty or `.` components,
/// no `..`, no NUL, at most `csx_proto::limits::PATH_SIZE_MAX` bytes.
pub fn normalize_path(path: &str) -> Result<String, ArrayError> {
    let bad = |reason| ArrayError::BadPath {
        path: path.to_string(),
        reason,
    };
    if path.contains('\0') {
        return Err(bad("contains NUL"));
    }
    let mut out = String::with_capacity(path.len() + 1);
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(bad("has a `..` component")),
            p => {
                out.push('/');
                out.push_str(p);
            }
        }
    }
    if out.is_empty() {
        return Err(bad("names no file"));
    }
    if out.len() > csx_proto::limits::PATH_SIZE_MAX {
        return Err(ArrayError::OutOfRange {
            what: "path length",
            value: out.len() as u64,
            min: 1,
            max: csx_proto::limits::PATH_SIZE_MAX as u64,
        });
    }
    Ok(out)
}

/// Whether the canonical `path` is under the directory `dir` (`/` or `` for all).
pub fn is_under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    dir.is_empty() || path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ArrayError + 'a {
    move |source| ArrayError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `value` as pretty JSON to `dir/name`, atomically.
pub(crate) fn write_json<T: Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
) -> Result<(), ArrayError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let text = serde_json::to_vec_pretty(value).expect("descriptions serialize");
    {
        let mut f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(&text).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("sync", &tmp))?;
    }
    fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))
}

/// Reads `dir/name` as JSON.
pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(
    dir: &Path,
    name: &'static str,
) -> Result<T, ArrayError> {
    let path = dir.join(name);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ArrayError::NotAnArray {
                dir: dir.to_path_buf(),
                file: name,
            })
        }
        Err(e) => return Err(io("read", &path)(e)),
    };
    serde_json::from_slice(&text).map_err(|e| ArrayError::BadDescription {
        dir: dir.to_path_buf(),
        reason: format!("{name}: {e}"),
    })
}

/// Whether `dir` holds an array.
pub fn is_array(dir: &Path) -> bool {
    dir.join(DESC_FILE).is_file()
}

impl ArrayDesc {
    /// Checks the description's own consistency.
    pub(crate) fn check(&self, dir: &Path) -> Result<(), ArrayError> {
        let bad = |reason: String| ArrayError::BadDescription {
            dir: dir.to_path_buf(),
            reason,
        };
        if self.format_version != FORMAT_VERSION {
            return Err(bad(format!(
                "format version {} (this build reads {FORMAT_VERSION})",
                self.format_version
            )));
        }
        if self.members.is_empty() || self.members.len() > crate::tag::MEMBERS_MAX {
            return Err(ArrayError::MemberCount {
                count: self.members.len(),
                max: crate::tag::MEMBERS_MAX,
            });
        }
        if self.id.is_empty() || !self.id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad(format!("id {:?} is not alphanumeric", self.id)));
        }
        self.link.check().map_err(|e| bad(e.to_string()))
    }

    /// The URI to open member `i` with (relative paths resolved against `dir`).
    pub fn member_uri(&self, dir: &Path, i: usize) -> String {
        let uri = &self.members[i].uri;
        if uri.contains("://") || Path::new(uri).is_absolute() {
            uri.clone()
        } else {
            dir.join(uri).to_string_lossy().into_owned()
        }
    }
}

impl Catalog {
    /// Checks every entry against the member count.
    pub(crate) fn check(&self, dir: &Path, members: usize) -> Result<(), ArrayError> {
        for (path, e) in &self.files {
            let ok = match &e.layout {
                Layout::Single { member } => usize::from(*member) < members,
                Layout::Striped {
                    stripe_bytes,
                    members: m,
                } => {
                    *stripe_bytes > 0
                        && !m.is_empty()
                        && m.iter().all(|&x| usize::from(x) < members)
                }
            };
            if !ok || e.id >= self.next_id {
                return Err(ArrayError::BadDescription {
                    dir: dir.to_path_buf(),
                    reason: format!("catalog entry {path:?} is inconsistent: {e:?}"),
                });
            }
        }
        Ok(())
    }
}

/// A fresh array id: 16 hex digits from the clock and the process id.
pub(crate) fn fresh_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = (nanos ^ (u64::from(std::process::id()) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!("{mixed:016x}")
}

/// The member-side path of piece `id` of array `array_id`.
pub fn member_path(array_id: &str, id: u64) -> String {
    format!("/csx-array/{array_id}/{id}")
}

/// `dir` made absolute without touching the file system beyond the current directory.
pub(crate) fn absolute(dir: &Path) -> PathBuf {
    let joined = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(dir))
            .unwrap_or_else(|_| dir.to_path_buf())
    };
    // `components` drops the `.` components inside a path.
    joined.components().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(normalize_path("a//b/./c/").unwrap(), "/a/b/c");
        assert_eq!(normalize_path("/x").unwrap(), "/x");
        assert!(matches!(
            normalize_path("/a/../b"),
            Err(ArrayError::BadPath { .. })
        ));
        assert!(matches!(
            normalize_path("//"),
            Err(ArrayError::BadPath { .. })
        ));
        assert!(matches!(
            normalize_path("a\0"),
            Err(ArrayError::BadPath { .. })
        ));
        assert!(is_under("/data/x", "/data"));
        assert!(is_under("/data/x", "/"));
        assert!(!is_under("/database", "/data"));
    }
}
