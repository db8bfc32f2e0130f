//! Data movement on the transfer workers: memory commands (SLM reads, writes, fills and
//! copies, with or without a lent DMA buffer) and file commands.

use std::time::Instant;

use csx_proto::limits::{EXTENTS_MAX, FILE_LIST_ENTRIES_MAX, PAYLOAD_SIZE_MAX};
use csx_proto::{
    ClientId, Completion, CopySource, ExtentInfo, FileInfo, MemHandle, Op, Reply, Status, WriteMode,
};

use super::{ns, Shared};
use crate::dma::DmaBuffer;
use crate::filestore::{FileStoreError, RangeRead};
use crate::slm::LeaseRequest;
use crate::status::{fail, fail_with, fail_with_context, ok, with_reply};

impl Shared {
    /// A Memory Read or Write with its data in a lent buffer (checked by `check_dma`).
    pub(super) fn dma(&self, client: ClientId, op: &Op, buffer: &dyn DmaBuffer) -> Completion {
        let start = Instant::now();
        let len = buffer.len() as u64;
        let (handle, offset, write) = match *op {
            Op::MemWrite { handle, offset, .. } => (handle, offset, true),
            Op::MemRead { handle, offset, .. } => (handle, offset, false),
            ref other => unreachable!("{} was refused at submission", other.name()),
        };
        let req = LeaseRequest {
            handle,
            offset,
            len,
            write,
            overwrite: false,
        };
        let mut c = match self.slm.lease(client, &[req]) {
            Ok(mut leases) if write => {
                buffer.read_into(leases.slice_mut(0));
                ok(len)
            }
            Ok(leases) => {
                buffer.write_from(leases.slice(0));
                ok(len)
            }
            Err(e) => fail_with(&e),
        };
        c.timing.transfer_ns = ns(start.elapsed());
        c
    }

    /// Data movement: SLM and file commands, on the transfer workers.
    pub(super) fn transfer(&self, client: ClientId, op: &Op) -> Completion {
        let start = Instant::now();
        let mut c = match op {
            Op::MemWrite {
                handle,
                offset,
                data,
            } => match self.slm.write(client, *handle, *offset, data) {
                Ok(()) => ok(data.len() as u64),
                Err(e) => fail_with(&e),
            },
            Op::MemRead {
                handle,
                offset,
                len,
            } => {
                let mut buf = vec![0u8; *len as usize];
                match self.slm.read(client, *handle, *offset, &mut buf) {
                    Ok(()) => with_reply(Reply::Data(buf)),
                    Err(e) => fail_with(&e),
                }
            }
            Op::MemFill {
                handle,
                offset,
                len,
                byte,
            } => match self.slm.fill(client, *handle, *offset, *len, *byte) {
                Ok(()) => ok(*len),
                Err(e) => fail_with(&e),
            },
            Op::MemCopy {
                dst,
                dst_offset,
                sources,
            } => self.mem_copy(client, *dst, *dst_offset, sources),
            Op::FileWriteFromMem { path, offset, src } => {
                let req = LeaseRequest {
                    handle: src.handle,
                    offset: src.offset,
                    len: src.len,
                    write: false,
                    overwrite: false,
                };
                match self.slm.lease(client, &[req]) {
                    Ok(leases) => match self.files.write_at(path, *offset, leases.slice(0)) {
                        Ok(()) => ok(src.len),
                        Err(e) => fail_with(&e),
                    },
                    Err(e) => fail_with(&e),
                }
            }
            _ => self.file_op(op),
        };
        c.timing.transfer_ns = ns(start.elapsed());
        c
    }

    fn mem_copy(
        &self,
        client: ClientId,
        dst: MemHandle,
        dst_offset: u64,
        sources: &[CopySource],
    ) -> Completion {
        let total: u64 = sources.iter().map(CopySource::len).sum();
        // Lease the destination and every SLM source in one step.
        let reqs = copy_leases(dst, dst_offset, total, sources);
        let mut leases = match self.slm.lease(client, &reqs) {
            Ok(l) => l,
            Err(e) => return fail_with(&e),
        };
        let mut slices = leases.slices_mut();
        let (head, rest) = slices.split_at_mut(1);
        let out = head[0]
            .as_mut()
            .expect("the destination is leased writable");
        let mut resident_bytes = 0;
        let mut files = Vec::new();
        let mut mem_sources = rest.iter();
        let mut rest_out: &mut [u8] = out;
        for (i, s) in sources.iter().enumerate() {
            let (piece, tail) = std::mem::take(&mut rest_out).split_at_mut(s.len() as usize);
            rest_out = tail;
            let done = match s {
                CopySource::Mem { .. } => {
                    let src: &[u8] = match mem_sources.next().expect("one lease per memory source")
                    {
                        Ok(s) => s,
                        Err(s) => s,
                    };
                    piece.copy_from_slice(src);
                    Ok(())
                }
                CopySource::ResidentFile { path, offset, len } => self
                    .copy_resident(i, path, *offset, *len, piece)
                    .map(|hit| resident_bytes += if hit { *len } else { 0 }),
                CopySource::File { path, offset, .. } => {
                    files.push((
                        i,
                        RangeRead {
                            path,
                            offset: *offset,
                            dst: piece,
                        },
                    ));
                    Ok(())
                }
                _ => self.copy_from_storage(i, s, piece),
            };
            if let Err(c) = done {
                return *c;
            }
        }
        if let Err(c) = self.copy_files(files) {
            return *c;
        }
        // Every byte of the destination is the sources' now.
        leases.overwritten(0);
        let mut c = ok(total);
        if sources
            .iter()
            .any(|s| matches!(s, CopySource::ResidentFile { .. }))
        {
            c.reply = Reply::Copied { resident_bytes };
        }
        c
    }

    /// The file sources of a copy (`(source index, range)`), exactly, from the media in
    /// one queued read ([`crate::filestore::FileStore::read_ranges_uncached`]): the
    /// blocks of every source in flight together.
    fn copy_files(&self, mut files: Vec<(usize, RangeRead<'_>)>) -> Result<(), Box<Completion>> {
        if files.is_empty() {
            return Ok(());
        }
        let (index, mut ranges): (Vec<usize>, Vec<RangeRead<'_>>) = files.drain(..).unzip();
        let got = match self.files.read_ranges_uncached(&mut ranges) {
            Ok(got) => got,
            Err((k, e)) => {
                let context = format!("source {}", index[k]);
                return Err(Box::new(fail_with_context(&e, &context)));
            }
        };
        for ((r, n), i) in ranges.iter().zip(got).zip(index) {
            if n != r.dst.len() {
                let (path, len, offset) = (r.path, r.dst.len(), r.offset);
                let message = format!("source {i}: {path} has {n} of {len} bytes at {offset}");
                return Err(Box::new(fail(Status::OutOfRange, "filestore", message)));
            }
        }
        Ok(())
    }

    /// A resident source: from the device's resident memory when the range is there at
    /// the file's current content version (returns true), else from the media, then kept
    /// (within the resident budget) under the version read before the media read, so a
    /// write racing with it leaves an entry that never matches.
    fn copy_resident(
        &self,
        i: usize,
        path: &str,
        offset: u64,
        len: u64,
        piece: &mut [u8],
    ) -> Result<bool, Box<Completion>> {
        let version = (self.files.version(path))
            .map_err(|e| Box::new(fail_with_context(&e, &format!("source {i}"))))?;
        if let Some(bytes) = self.resident.get(path, offset, len, version) {
            piece.copy_from_slice(&bytes);
            return Ok(true);
        }
        let file = CopySource::File {
            path: path.to_string(),
            offset,
            len,
        };
        self.copy_from_storage(i, &file, piece)?;
        self.resident.insert(path, offset, version, piece);
        Ok(false)
    }

    /// Reads storage source `i` (a file or NVM range) into `piece`, exactly, from the
    /// media: uncached, so a device-side read neither benefits from nor fills the host's
    /// page cache of the image (λ-IO's host/device comparison depends on it).
    fn copy_from_storage(
        &self,
        i: usize,
        s: &CopySource,
        piece: &mut [u8],
    ) -> Result<(), Box<Completion>> {
        match s {
            CopySource::File { path, offset, len } => {
                match self.files.read_at_uncached(path, *offset, piece) {
                    Ok(n) if n as u64 == *len => Ok(()),
                    Ok(n) => {
                        let message =
                            format!("source {i}: {path} has {n} of {len} bytes at {offset}");
                        Err(Box::new(fail(Status::OutOfRange, "filestore", message)))
                    }
                    Err(e) => Err(Box::new(fail_with_context(&e, &format!("source {i}")))),
                }
            }
            CopySource::Nvm { offset, .. } => self
                .nvm
                .read_at_uncached(*offset, piece)
                .map_err(|e| Box::new(fail_with_context(&e, &format!("source {i}")))),
            CopySource::Peer { peer, offset, .. } => {
                let Some(link) = self.peers.get() else {
                    let message = format!(
                        "source {i}: this device has no peer links, so it cannot read {peer} \
                         (an embedded device; serve it with `csx device serve`)"
                    );
                    return Err(Box::new(fail(Status::InvalidField, "peer", message)));
                };
                link.read_nvm(peer, *offset, piece).map_err(|e| {
                    let status = match e {
                        crate::peer::PeerError::Unreachable { .. } => Status::NamespaceNotReachable,
                        crate::peer::PeerError::Refused { .. } => Status::OutOfRange,
                    };
                    Box::new(fail(status, "peer", format!("source {i}: {e}")))
                })
            }
            CopySource::Mem { .. } | CopySource::ResidentFile { .. } => {
                unreachable!("memory and resident sources are copied by mem_copy")
            }
        }
    }

    /// A file write in `mode`: truncating first, or refused when the file exists.
    fn file_write(
        &self,
        path: &str,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
    ) -> Result<Completion, FileStoreError> {
        match mode {
            WriteMode::Write => {}
            WriteMode::Truncate => match self.files.truncate(path, 0) {
                Ok(()) | Err(FileStoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            },
            WriteMode::CreateNew => match self.files.stat(path) {
                Ok(_) => {
                    return Ok(fail(
                        Status::FileExists,
                        "filestore",
                        format!("{path} exists"),
                    ))
                }
                Err(FileStoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            },
        }
        self.files.write_at(path, offset, data)?;
        Ok(ok(data.len() as u64))
    }

    /// The files under `dir`, as many as one reply holds (then `truncated`).
    fn file_list(&self, dir: &str) -> Result<Completion, FileStoreError> {
        let all = self.files.list(dir)?;
        let mut files = Vec::new();
        let mut bytes = 0usize;
        let mut truncated = false;
        for st in all {
            bytes += st.path.len() + FileInfo::FIXED_SIZE;
            if files.len() >= FILE_LIST_ENTRIES_MAX || bytes > PAYLOAD_SIZE_MAX {
                truncated = true;
                break;
            }
            files.push(FileInfo {
                path: st.path,
                size_bytes: st.size,
                extent_count: st.extents,
            });
        }
        Ok(with_reply(Reply::Files { files, truncated }))
    }

    fn file_op(&self, op: &Op) -> Completion {
        let r: Result<Completion, FileStoreError> = (|| {
            Ok(match op {
                Op::FileWrite {
                    path,
                    offset,
                    data,
                    mode,
                } => self.file_write(path, *offset, data, *mode)?,
                Op::FileRead { path, offset, len } => {
                    let size = self.files.stat(path)?.size;
                    let n = size.saturating_sub(*offset).min(*len) as usize;
                    let mut buf = vec![0u8; n];
                    let got = self.files.read_at(path, *offset, &mut buf)?;
                    buf.truncate(got);
                    with_reply(Reply::Data(buf))
                }
                Op::FileList { dir } => self.file_list(dir)?,
                Op::FileStat { path } => {
                    let st = self.files.stat(path)?;
                    with_reply(Reply::File(FileInfo {
                        path: st.path,
                        size_bytes: st.size,
                        extent_count: st.extents,
                    }))
                }
                Op::FileDelete { path } => {
                    self.files.delete(path)?;
                    ok(0)
                }
                Op::FileTruncate { path, size_bytes } => {
                    self.files.truncate(path, *size_bytes)?;
                    ok(0)
                }
                Op::FileExtents { path } => {
                    let all = self.files.extents(path)?;
                    let truncated = all.len() > EXTENTS_MAX;
                    let extents = all
                        .into_iter()
                        .take(EXTENTS_MAX)
                        .map(|e| ExtentInfo {
                            file_offset: e.file_offset,
                            nvm_offset: e.nvm_offset,
                            len: e.len,
                        })
                        .collect();
                    with_reply(Reply::Extents { extents, truncated })
                }
                Op::DirCreate { .. }
                | Op::DirRemove { .. }
                | Op::FileRename { .. }
                | Op::DirRead { .. }
                | Op::PathStat { .. } => self.dir_op(op)?,
                other => unreachable!("{} is not a file op", other.name()),
            })
        })();
        r.unwrap_or_else(|e| fail_with(&e))
    }
}

/// The leases of a copy of `total` bytes to `dst` at `dst_offset`: the destination
/// (writable) first, then each memory source (read-only) in order.
fn copy_leases(
    dst: MemHandle,
    dst_offset: u64,
    total: u64,
    sources: &[CopySource],
) -> Vec<LeaseRequest> {
    let mut reqs = vec![LeaseRequest {
        handle: dst,
        offset: dst_offset,
        len: total,
        write: true,
        overwrite: true,
    }];
    for s in sources {
        if let CopySource::Mem {
            handle,
            offset,
            len,
        } = *s
        {
            reqs.push(LeaseRequest {
                handle,
                offset,
                len,
                write: false,
                overwrite: false,
            });
        }
    }
    reqs
}
