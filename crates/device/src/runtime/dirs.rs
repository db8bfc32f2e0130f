//! Directory commands on the transfer workers: make, remove, rename, read, stat.

use csx_proto::limits::PAYLOAD_SIZE_MAX;
use csx_proto::{Completion, DirEntryInfo, EntryKind, Op, Reply};

use super::Shared;
use crate::filestore::{self, FileStoreError};
use crate::status::{ok, with_reply};

fn entry_info(e: filestore::DirEntry) -> DirEntryInfo {
    DirEntryInfo {
        name: e.name,
        kind: match e.kind {
            filestore::EntryKind::File => EntryKind::File,
            filestore::EntryKind::Dir => EntryKind::Dir,
        },
        size_bytes: e.size,
        modified_ns: e
            .modified
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    }
}

impl Shared {
    pub(super) fn dir_op(&self, op: &Op) -> Result<Completion, FileStoreError> {
        Ok(match op {
            Op::DirCreate { path } => {
                self.files.mkdir(path)?;
                ok(0)
            }
            Op::DirRemove { path } => {
                self.files.rmdir(path)?;
                ok(0)
            }
            Op::FileRename { from, to } => {
                self.files.rename(from, to)?;
                ok(0)
            }
            Op::DirRead { dir, after, max } => {
                let (all, more) = self.files.read_dir(dir, after, *max as usize)?;
                let mut entries = Vec::with_capacity(all.len());
                let mut bytes = 0usize;
                let mut truncated = more;
                for e in all {
                    bytes += e.name.len() + DirEntryInfo::FIXED_SIZE;
                    if bytes > PAYLOAD_SIZE_MAX {
                        truncated = true;
                        break;
                    }
                    entries.push(entry_info(e));
                }
                with_reply(Reply::Entries { entries, truncated })
            }
            Op::PathStat { path } => with_reply(Reply::Entries {
                entries: vec![entry_info(self.files.lookup(path)?)],
                truncated: false,
            }),
            other => unreachable!("{} is not a directory op", other.name()),
        })
    }
}
