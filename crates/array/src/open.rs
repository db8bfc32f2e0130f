//! One opener for every device URI, arrays included: [`open`].
//!
//! csx-host parses `array:DIR` but cannot open it (arrays live here, above it). [`open`]
//! opens every other form with [`Device::open`] and an array as a [`Device`] whose
//! transport serves the array's files: identify, list, stat, read, write (a file is
//! replaced whole when its temporary is renamed over it, as `Device::put_bytes` does),
//! rename, delete and flush go to the array's catalog and members. A file being
//! written streams to one member (the emptiest) as an uncommitted piece, so the host
//! holds none of it; renaming it, or a flush, names it in the catalog, and closing the
//! handle first deletes it. Programs and device
//! memory belong to one member, so those commands complete with `InvalidOpcode` and a
//! message saying where to run programs (`csx exec --device array:DIR` picks the member
//! holding the input). libcsx, Python and the CLI open devices through this function.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use csx_host::transport::Transport;
use csx_host::{Client, Device, DeviceUri, OpenError, TransportError};
use csx_proto::command::{Command, Op, WriteMode};
use csx_proto::completion::{FileInfo, Reply};
use csx_proto::{CommandId, Completion, Status};

use crate::{Array, ArrayError, FileEntry, Layout, Placement};

/// Opens the device `uri` names, an array (`array:DIR`, or a directory holding an
/// array's description) included.
pub fn open(uri: &str) -> Result<Device, OpenError> {
    let parsed = DeviceUri::parse(uri)?;
    let dir = match &parsed {
        DeviceUri::Array(dir) => dir.clone(),
        DeviceUri::Embedded(dir) if crate::desc::is_array(dir) => dir.clone(),
        _ => return Device::open(uri),
    };
    let array = Array::open(&dir).map_err(|e| OpenError::Array {
        uri: uri.to_string(),
        reason: e.to_string(),
    })?;
    Ok(Device::with_client(
        Client::new(Box::new(ArrayTransport::new(array))),
        DeviceUri::Array(dir),
    ))
}

/// Commands one array transport holds submitted and not yet reaped.
const QUEUE_DEPTH: u32 = 256;

/// A transport that answers file commands from an array (see the module doc).
#[derive(Debug)]
struct ArrayTransport {
    array: Array,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Completions ready to reap, in submission order.
    done: VecDeque<Completion>,
    /// Files being written, by path: pieces on a member until renamed into the
    /// catalog (or deleted).
    writing: HashMap<String, Pending>,
    closed: bool,
}

/// A file being written: its piece on one member, not yet in the catalog.
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    member: u16,
    size: u64,
}

impl Pending {
    fn entry(&self) -> FileEntry {
        FileEntry {
            id: self.id,
            size_bytes: self.size,
            layout: Layout::Single {
                member: self.member,
            },
        }
    }
}

impl ArrayTransport {
    fn new(array: Array) -> ArrayTransport {
        ArrayTransport {
            array,
            state: Mutex::new(State::default()),
        }
    }

    /// The bytes the members hold in all.
    fn capacity(&self) -> u64 {
        self.array.members().iter().map(|m| m.nvm_size_bytes).sum()
    }

    fn device(&self, member: u16) -> &Device {
        &self.array.members()[usize::from(member)].device
    }

    /// A file's bytes from `offset`: the piece being written, else the array's copy.
    fn read(
        &self,
        state: &mut State,
        id: CommandId,
        path: String,
        offset: u64,
        len: u64,
    ) -> Completion {
        if let Some(p) = state.writing.get(&path) {
            let len = len.min(p.size.saturating_sub(offset));
            let mpath = self.array.member_path(p.id);
            return match self.device(p.member).read_file(&mpath, offset, len) {
                Ok(data) => {
                    let mut c = reply(id, Reply::Data(data));
                    c.value = len;
                    c
                }
                Err(e) => failed(id, self.array.member_error(p.member, "file-read")(e)),
            };
        }
        let read = self
            .array
            .stat(&path)
            .and_then(|entry| self.array.read_range(&entry, offset, len));
        match read {
            Ok(data) => {
                let n = data.len() as u64;
                let mut c = reply(id, Reply::Data(data));
                c.value = n;
                c
            }
            Err(e) => failed(id, e),
        }
    }

    /// Writes into the file's piece on its member (entering the catalog at rename or
    /// flush); the first write of a path starts its piece.
    fn write(
        &self,
        state: &mut State,
        id: CommandId,
        path: String,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
    ) -> Completion {
        let mut p = match state.writing.get(&path) {
            Some(p) if mode != WriteMode::Truncate => *p,
            _ => match self.start_piece(state, &path, mode) {
                Ok(p) => p,
                Err(e) => return failed(id, e),
            },
        };
        let end = offset.saturating_add(data.len() as u64);
        let mpath = self.array.member_path(p.id);
        if let Err(e) = self.device(p.member).write_file(&mpath, offset, data) {
            if e.status() == Some(Status::NoSpace) {
                let room = self.array.members()[usize::from(p.member)].nvm_size_bytes;
                return Completion::error(
                    id,
                    Status::NoSpace,
                    "array",
                    format!(
                        "writing {path} to byte {end}: its member {} (of {room} bytes) is full                          (the array holds {} bytes in all; a file larger than one member is striped:                          csx put --stripe SIZE)",
                        p.member,
                        self.capacity()
                    ),
                );
            }
            return failed(id, self.array.member_error(p.member, "file-write")(e));
        }
        self.array.links().host_write(p.member, data.len() as u64);
        p.size = p.size.max(end);
        state.writing.insert(path, p);
        let mut c = Completion::new(id, Status::Success);
        c.value = data.len() as u64;
        c
    }

    /// A new empty piece for `path` on the emptiest member; a write into an array file
    /// already written (not truncating) starts from a copy of its bytes.
    fn start_piece(
        &self,
        state: &mut State,
        path: &str,
        mode: WriteMode,
    ) -> Result<Pending, ArrayError> {
        if let Some(old) = state.writing.remove(path) {
            self.drop_piece(&old);
        }
        let Layout::Single { member } = self.array.resolve_layout(Placement::Auto)? else {
            unreachable!("automatic placement puts a file on one member")
        };
        let mut p = Pending {
            id: self.array.reserve_id(),
            member,
            size: 0,
        };
        let mpath = self.array.member_path(p.id);
        let dev = self.device(member);
        dev.put_bytes(&mpath, &[])
            .map_err(self.array.member_error(member, "file-write"))?;
        let old = match mode {
            WriteMode::Truncate => None,
            _ => self.array.stat(path).ok(),
        };
        if let Some(old) = old {
            let copied = self.array.read_pieces(
                &old,
                &mut |buf| {
                    dev.write_file(&mpath, p.size, buf)
                        .map_err(self.array.member_error(member, "file-write"))?;
                    p.size += buf.len() as u64;
                    Ok(())
                },
                &mut |_| {},
            );
            if let Err(e) = copied {
                self.drop_piece(&p);
                return Err(e);
            }
        }
        Ok(p)
    }

    /// Deletes a piece never named in the catalog (best effort: a failure leaves an
    /// orphan, which `Array::orphans` finds).
    fn drop_piece(&self, p: &Pending) {
        let _ = self
            .device(p.member)
            .delete_file(&self.array.member_path(p.id));
    }

    /// Names a written piece `path` in the catalog, once it is durable on its member.
    fn commit(&self, path: &str, p: &Pending) -> Result<(), ArrayError> {
        let committed = crate::desc::normalize_path(path).and_then(|path| {
            self.device(p.member)
                .flush()
                .map_err(self.array.member_error(p.member, "flush"))?;
            self.array.commit(&path, p.entry())
        });
        if committed.is_err() {
            self.drop_piece(p);
        }
        committed
    }

    fn run(&self, state: &mut State, cmd: Command) -> Completion {
        let id = cmd.id;
        let failed = |e: ArrayError| failed(id, e);
        let reply = |r: Reply| reply(id, r);
        let info = |path: &str, size_bytes: u64| FileInfo {
            path: path.to_string(),
            size_bytes,
            extent_count: 1,
        };
        match cmd.op {
            Op::Identify => match self.array.members()[0].device.identify() {
                Ok(mut d) => {
                    d.nvm_size_bytes = self.capacity();
                    reply(Reply::Device(d))
                }
                Err(e) => Completion::error(id, Status::Internal, "array member 0", e.to_string()),
            },
            Op::ListFunctions => match self.array.members()[0].device.functions() {
                // Every member runs the same device software: one table for all.
                Ok(f) => reply(Reply::Functions(f)),
                Err(e) => Completion::error(id, Status::Internal, "array member 0", e.to_string()),
            },
            Op::FileList { dir } => {
                let files = self
                    .array
                    .list(&dir)
                    .iter()
                    .map(|(p, e)| info(p, e.size_bytes))
                    .collect();
                reply(Reply::Files {
                    files,
                    truncated: false,
                })
            }
            Op::FileStat { path } => match state.writing.get(&path) {
                Some(p) => reply(Reply::File(info(&path, p.size))),
                None => match self.array.stat(&path) {
                    Ok(e) => reply(Reply::File(info(&path, e.size_bytes))),
                    Err(e) => failed(e),
                },
            },
            Op::FileRead { path, offset, len } => self.read(state, id, path, offset, len),
            Op::FileWrite {
                path,
                offset,
                data,
                mode,
            } => self.write(state, id, path, offset, &data, mode),
            Op::FileRename { from, to } => self.rename(state, id, &from, &to),
            Op::FileDelete { path } => self.delete(state, id, &path),
            Op::Flush => self.flush(state, id),
            other => self.refused(id, &other),
        }
    }

    /// A file being written is committed under its new name; an array file renamed.
    fn rename(&self, state: &mut State, id: CommandId, from: &str, to: &str) -> Completion {
        let result = match state.writing.remove(from) {
            Some(p) => self.commit(to, &p),
            None => self.array.rename(from, to),
        };
        result.map_or_else(|e| failed(id, e), |()| Completion::new(id, Status::Success))
    }

    fn delete(&self, state: &mut State, id: CommandId, path: &str) -> Completion {
        if let Some(p) = state.writing.remove(path) {
            self.drop_piece(&p);
            return Completion::new(id, Status::Success);
        }
        self.array
            .delete(path)
            .map_or_else(|e| failed(id, e), |()| Completion::new(id, Status::Success))
    }

    /// Files written in place (not renamed) enter the catalog, then every member
    /// flushes.
    fn flush(&self, state: &mut State, id: CommandId) -> Completion {
        let mut first = Ok(());
        for (path, p) in std::mem::take(&mut state.writing) {
            let committed = self.commit(&path, &p);
            if first.is_ok() {
                first = committed;
            }
        }
        first
            .and_then(|()| self.array.flush())
            .map_or_else(|e| failed(id, e), |()| Completion::new(id, Status::Success))
    }

    /// Programs and device memory belong to one member.
    fn refused(&self, id: CommandId, op: &Op) -> Completion {
        Completion::error(
            id,
            Status::InvalidOpcode,
            "array",
            format!(
                "{} is an array of {} devices: this handle serves its files; \
                 programs, device memory and {} run on one member \
                 (csx exec --device array:DIR picks the member holding the input)",
                self.array.dir().display(),
                self.array.members().len(),
                op.name(),
            ),
        )
    }
}

impl Transport for ArrayTransport {
    fn name(&self) -> &'static str {
        "array"
    }

    fn queue_depth(&self) -> u32 {
        QUEUE_DEPTH
    }

    fn submit(&self, cmd: Command) -> Result<(), TransportError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.closed {
            return Err(TransportError::Closed);
        }
        if state.done.len() >= QUEUE_DEPTH as usize {
            return Err(TransportError::QueueFull { depth: QUEUE_DEPTH });
        }
        let completion = self.run(&mut state, cmd);
        state.done.push_back(completion);
        Ok(())
    }

    fn try_reap(&self) -> Result<Option<Completion>, TransportError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(state.done.pop_front())
    }

    fn reap(&self, _timeout: Option<Duration>) -> Result<Option<Completion>, TransportError> {
        // Commands complete as they are submitted: nothing to wait for.
        self.try_reap()
    }

    fn close(self: Box<Self>) -> Result<(), TransportError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.closed = true;
        // Files neither renamed nor flushed were never written: their pieces go.
        for p in std::mem::take(&mut state.writing).values() {
            self.drop_piece(p);
        }
        drop(state);
        self.array
            .close()
            .map_err(|e| TransportError::Disconnected {
                reason: e.to_string(),
            })
    }
}

/// A failed command's completion, the array error mapped to a status.
fn failed(id: CommandId, e: ArrayError) -> Completion {
    let status = match e {
        ArrayError::NotFound { .. } => Status::NotFound,
        ArrayError::BadPath { .. } => Status::InvalidField,
        _ => Status::Internal,
    };
    Completion::error(id, status, "array", e.to_string())
}

/// A successful command's completion carrying `r`.
fn reply(id: CommandId, r: Reply) -> Completion {
    let mut c = Completion::new(id, Status::Success);
    c.reply = r;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkModel;

    /// A fresh array of two small embedded members, in a temporary directory.
    fn two_member_array() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("arr");
        let cfg = csx_host::transport::inproc::DeviceConfig {
            nvm_size_bytes: 8 << 20,
            slm_size_bytes: 1 << 20,
            ..Default::default()
        };
        Array::init_embedded(&dir, 2, cfg, LinkModel::default())
            .unwrap()
            .close()
            .unwrap();
        (tmp, dir)
    }

    #[test]
    fn every_uri_form_opens_and_an_array_serves_its_files() {
        let (tmp, dir) = two_member_array();
        let uri = format!("array:{}", dir.display());
        let dev = open(&uri).unwrap();
        assert_eq!(dev.uri(), &DeviceUri::Array(dir.clone()));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        dev.put_bytes("/d/x", &data).unwrap();
        dev.flush().unwrap();
        assert_eq!(dev.read_file("/d/x", 0, u64::MAX).unwrap(), data);
        assert_eq!(dev.read_file("/d/x", 10, 5).unwrap(), &data[10..15]);
        let list = dev.list_files("/").unwrap();
        assert_eq!(list.files.len(), 1);
        assert_eq!(list.files[0].size_bytes, data.len() as u64);
        // A program needs one member: refused with a message naming the array.
        let e = dev
            .load_program_any_slot(csx_proto::ProgramType::Raw, &[0; 8], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is an array of 2 devices"), "{e}");
        // More than a member holds: refused, naming the limits; nothing is left behind.
        let e = dev
            .put_bytes("/big", &vec![7u8; 9 << 20])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("(of {} bytes) is full", 8u64 << 20)),
            "{e}"
        );
        assert!(e.contains(&format!("{} bytes in all", 16u64 << 20)), "{e}");
        assert_eq!(dev.list_files("/").unwrap().files.len(), 1);
        dev.close().unwrap();
        // The file is in the array's catalog: the array itself sees it.
        let array = Array::open(&dir).unwrap();
        assert_eq!(array.get_bytes("/d/x").unwrap(), data);
        array.close().unwrap();
        // A bare directory holding an array opens the same way.
        let dev = open(dir.to_str().unwrap()).unwrap();
        dev.delete_file("/d/x").unwrap();
        assert!(dev.stat("/d/x").is_err());
        dev.close().unwrap();
        // Device::open refuses an array, naming the opener; unknown schemes list them.
        let e = Device::open(&uri).unwrap_err().to_string();
        assert!(e.contains("csx_array::open"), "{e}");
        let e = open("nvme://x").unwrap_err().to_string();
        assert!(e.contains("array:DIR") && e.contains("tcp://"), "{e}");
        assert!(open(&format!("array:{}", tmp.path().join("none").display())).is_err());
    }

    #[test]
    fn a_file_being_written_lives_on_a_member_until_named() {
        let (_tmp, dir) = two_member_array();
        let uri = format!("array:{}", dir.display());
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 249) as u8).collect();
        // Written in place and flushed: named at the flush, read back whole.
        let dev = open(&uri).unwrap();
        dev.write_file("/w", 0, &data[..100_000]).unwrap();
        dev.write_file("/w", 100_000, &data[100_000..]).unwrap();
        assert_eq!(dev.stat("/w").unwrap().size_bytes, data.len() as u64);
        assert_eq!(
            dev.read_file("/w", 99_990, 20).unwrap(),
            &data[99_990..100_010]
        );
        dev.flush().unwrap();
        // Written and never named: the handle's close deletes its piece.
        dev.write_file("/lost", 0, &data).unwrap();
        dev.close().unwrap();
        let array = Array::open(&dir).unwrap();
        assert_eq!(array.get_bytes("/w").unwrap(), data);
        assert!(array.stat("/lost").is_err());
        assert_eq!(array.orphans().unwrap(), Vec::new());
        // A piece is one member's file: the bytes were on that member before the
        // catalog named them (the entry is the piece that was written).
        let entry = array.stat("/w").unwrap();
        let Layout::Single { member } = entry.layout else {
            panic!("{entry:?}")
        };
        let piece = array.members()[usize::from(member)]
            .device
            .read_file(&array.member_path(entry.id), 0, u64::MAX)
            .unwrap();
        assert_eq!(piece, data);
        array.close().unwrap();
    }
}
