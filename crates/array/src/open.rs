//! One opener for every device URI, arrays included: [`open`].
//!
//! csx-host parses `array:DIR` but cannot open it (arrays live here, above it). [`open`]
//! opens every other form with [`Device::open`] and an array as a [`Device`] whose
//! transport serves the array's files: identify, list, stat, read, write (a file is
//! replaced whole when its temporary is renamed over it, as `Device::put_bytes` does),
//! rename, delete and flush go to the array's catalog and members. Programs and device
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

use crate::{Array, ArrayError, Placement};

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
    /// Files being written: kept here until renamed into the catalog (or deleted).
    writing: HashMap<String, Vec<u8>>,
    /// The last array file read whole, for a read in chunks.
    read_cache: Option<(String, Vec<u8>)>,
    closed: bool,
}

impl ArrayTransport {
    fn new(array: Array) -> ArrayTransport {
        ArrayTransport {
            array,
            state: Mutex::new(State::default()),
        }
    }

    /// The most bytes files being written may hold in all: the array's capacity.
    fn capacity(&self) -> u64 {
        self.array.members().iter().map(|m| m.nvm_size_bytes).sum()
    }

    /// A file's bytes from `offset`: the file being written, else the array's copy.
    fn read(
        &self,
        state: &mut State,
        id: CommandId,
        path: String,
        offset: u64,
        len: u64,
    ) -> Completion {
        let whole = match state.writing.get(&path) {
            Some(data) => data.clone(),
            None => match &state.read_cache {
                Some((p, data)) if *p == path => data.clone(),
                _ => match self.array.get_bytes(&path) {
                    Ok(data) => {
                        state.read_cache = Some((path.clone(), data.clone()));
                        data
                    }
                    Err(e) => return failed(id, e),
                },
            },
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(whole.len());
        let end = start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
        let mut c = reply(id, Reply::Data(whole[start..end.min(whole.len())].to_vec()));
        c.value = (end.min(whole.len()) - start) as u64;
        c
    }

    /// Writes into the file's pending bytes (entering the catalog at rename or flush),
    /// within the array's capacity.
    fn write(
        &self,
        state: &mut State,
        id: CommandId,
        path: String,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
    ) -> Completion {
        let end = offset.saturating_add(data.len() as u64);
        let pending: u64 = state.writing.values().map(|d| d.len() as u64).sum();
        if end.saturating_add(pending) > self.capacity() {
            return Completion::error(
                id,
                Status::NoSpace,
                "array",
                format!(
                    "writing {path} to byte {end} would hold more than the array's {} bytes",
                    self.capacity()
                ),
            );
        }
        state.read_cache = None;
        let file = state.writing.entry(path.clone()).or_default();
        if mode == WriteMode::Truncate {
            file.clear();
        } else if file.is_empty() {
            // Writing into an array file already written: start from its bytes.
            if let Ok(old) = self.array.get_bytes(&path) {
                *file = old;
            }
        }
        let (offset, end) = (offset as usize, end as usize);
        if file.len() < end {
            file.resize(end, 0);
        }
        file[offset..end].copy_from_slice(data);
        let mut c = Completion::new(id, Status::Success);
        c.value = data.len() as u64;
        c
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
                Some(data) => reply(Reply::File(info(&path, data.len() as u64))),
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
            Op::FileRename { from, to } => {
                state.read_cache = None;
                let result = match state.writing.remove(&from) {
                    Some(data) => self.array.put_bytes(&to, &data, Placement::Auto).map(drop),
                    None => self.array.rename(&from, &to),
                };
                result.map_or_else(failed, |()| Completion::new(id, Status::Success))
            }
            Op::FileDelete { path } => {
                state.read_cache = None;
                if state.writing.remove(&path).is_some() {
                    return Completion::new(id, Status::Success);
                }
                self.array
                    .delete(&path)
                    .map_or_else(failed, |()| Completion::new(id, Status::Success))
            }
            Op::Flush => {
                // A file written in place (not renamed) enters the catalog now.
                for (path, data) in std::mem::take(&mut state.writing) {
                    if let Err(e) = self.array.put_bytes(&path, &data, Placement::Auto) {
                        return failed(e);
                    }
                }
                self.array
                    .flush()
                    .map_or_else(failed, |()| Completion::new(id, Status::Success))
            }
            other => Completion::error(
                id,
                Status::InvalidOpcode,
                "array",
                format!(
                    "{} is an array of {} devices: this handle serves its files; \
                     programs, device memory and {} run on one member \
                     (csx exec --device array:DIR picks the member holding the input)",
                    self.array.dir().display(),
                    self.array.members().len(),
                    other.name(),
                ),
            ),
        }
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
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
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

    #[test]
    fn every_uri_form_opens_and_an_array_serves_its_files() {
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
        // More than the array holds: refused, naming the limit; nothing is left behind.
        let e = dev
            .put_bytes("/big", &vec![7u8; 17 << 20])
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("{} bytes", 16u64 << 20)), "{e}");
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
}
