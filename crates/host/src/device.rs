//! [`Device`]: the blocking convenience API over a [`Client`].
//!
//! One method per thing a host does with a device; each builds the command(s), waits,
//! and returns typed values or a typed [`CallError`]. Transfers larger than one
//! command may move (`csx_proto::limits`) are split into chunks and pipelined: up to
//! [`PIPELINE_DEPTH`] chunks are in flight at once, so the device's transfer work
//! overlaps the host's local I/O.
//!
//! For many commands in flight from one thread, or several threads sharing the device,
//! use [`Device::client`] (the asynchronous core) directly; every method here is safe to
//! call from several threads at once.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use csx_proto::limits::{
    FILE_IO_SIZE_MAX, LOAD_CHUNK_SIZE_MAX, MEM_IO_SIZE_MAX, PROGRAM_SLOTS_COUNT,
};
use csx_proto::{
    CommandId, Completion, CopySource, DeviceInfo, DirEntryInfo, EngineKind, ErrorDetail,
    ExtentInfo, FileInfo, FunctionInfo, MemHandle, MemRange, Op, ProgramIndex, ProgramInfo,
    ProgramState, ProgramType, RangeSetId, Reply, Status, WriteMode,
};

use crate::client::Client;
use crate::error::{CallError, DeviceFailure, OpenError};
use crate::execute::{ExecuteRequest, Execution};
use crate::uri::DeviceUri;

/// Chunks of one transfer in flight at once.
pub const PIPELINE_DEPTH: usize = 4;

/// How far a long transfer has come, for progress reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// A file listing; `truncated` when the directory holds more than one reply carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileList {
    pub files: Vec<FileInfo>,
    pub truncated: bool,
}

/// A file's extents (like FIEMAP); `truncated` when there are more than one reply holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extents {
    pub extents: Vec<ExtentInfo>,
    pub truncated: bool,
}

/// Options for opening a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// Commands in flight at most on this client's queue pair.
    pub queue_depth: u32,
    /// Pass every command and completion through the wire encoding even where the
    /// transport does not need it (the embedded one), to test the encoding.
    pub wire_check: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            queue_depth: 256,
            wire_check: false,
        }
    }
}

/// The program type of an image: ELF when it starts with the ELF magic, raw bytecode
/// otherwise.
pub fn program_type_of(image: &[u8]) -> ProgramType {
    if image.starts_with(b"\x7fELF") {
        ProgramType::Elf
    } else {
        ProgramType::Raw
    }
}

/// A connection to one device (see the module doc).
#[derive(Debug)]
pub struct Device {
    client: Client,
    uri: DeviceUri,
}

pub(crate) fn unexpected(op: &'static str, expected: &'static str, reply: &Reply) -> CallError {
    let found = match reply {
        Reply::None => "none",
        Reply::Data(_) => "data",
        Reply::Device(_) => "device",
        Reply::Functions(_) => "functions",
        Reply::Programs(_) => "programs",
        Reply::Files { .. } => "files",
        Reply::File(_) => "file",
        Reply::Extents { .. } => "extents",
        Reply::Execute(_) => "execute",
        Reply::Entries { .. } => "entries",
        Reply::Copied { .. } => "copied",
    };
    CallError::UnexpectedReply {
        op,
        expected,
        found: found.to_string(),
    }
}

impl Device {
    /// Opens the device at `uri` (a state directory path for an embedded device; see
    /// [`DeviceUri`]).
    pub fn open(uri: &str) -> Result<Device, OpenError> {
        Device::open_with(uri, OpenOptions::default())
    }

    /// As [`Device::open`], with options.
    pub fn open_with(uri: &str, options: OpenOptions) -> Result<Device, OpenError> {
        let parsed = DeviceUri::parse(uri)?;
        match &parsed {
            #[cfg(feature = "inproc")]
            DeviceUri::Embedded(dir) => {
                let embedded = crate::transport::inproc::embedded::Embedded::open(dir)?;
                Device::over_embedded(embedded, parsed, options)
            }
            DeviceUri::Shm { name } => {
                let t = crate::transport::shm::ShmTransport::connect(
                    name,
                    &crate::transport::shm::ShmOptions {
                        queue_depth: options.queue_depth,
                        ..Default::default()
                    },
                )?;
                Ok(Device::with_client(Client::new(Box::new(t)), parsed))
            }
            DeviceUri::Tcp { addr } => {
                let t = crate::transport::tcp::TcpTransport::connect(
                    addr,
                    &crate::transport::tcp::TcpOptions::from_env(options.queue_depth)?,
                )?;
                Ok(Device::with_client(Client::new(Box::new(t)), parsed))
            }
            #[cfg(feature = "tls")]
            DeviceUri::Tcps { addr } => {
                use crate::transport::tcp::{conn::tls, TLS_CA_FILE_ENV};
                let ca = std::env::var_os(TLS_CA_FILE_ENV)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| OpenError::BadUri {
                        uri: uri.to_string(),
                        reason: "tcps needs CSX_TLS_CA: a PEM file of the certificates to trust",
                    })?;
                let ca = std::path::PathBuf::from(ca);
                let config = tls::client_config(&ca).map_err(|source| OpenError::Io {
                    op: "read the TLS certificates of CSX_TLS_CA,",
                    path: ca.clone(),
                    source,
                })?;
                let t = crate::transport::tcp::TcpTransport::connect_tls(
                    addr,
                    &crate::transport::tcp::TcpOptions::from_env(options.queue_depth)?,
                    config,
                )?;
                Ok(Device::with_client(Client::new(Box::new(t)), parsed))
            }
            DeviceUri::Array(_) => Err(OpenError::Array {
                uri: uri.to_string(),
                reason: "an array of devices is opened by csx_array::open (as the csx CLI, libcsx and Python do), not Device::open".to_string(),
            }),
            #[allow(unreachable_patterns)] // Reachable without the `inproc` feature.
            other => Err(OpenError::TransportUnavailable {
                uri: uri.to_string(),
                scheme: other.transport(),
            }),
        }
    }

    /// Creates an embedded device in the state directory `dir` and opens it.
    #[cfg(feature = "inproc")]
    pub fn init(
        dir: &Path,
        config: crate::transport::inproc::DeviceConfig,
    ) -> Result<Device, OpenError> {
        let embedded = crate::transport::inproc::embedded::Embedded::init(dir, config)?;
        Device::over_embedded(
            embedded,
            DeviceUri::Embedded(dir.to_path_buf()),
            OpenOptions::default(),
        )
    }

    #[cfg(feature = "inproc")]
    fn over_embedded(
        embedded: std::sync::Arc<crate::transport::inproc::embedded::Embedded>,
        uri: DeviceUri,
        options: OpenOptions,
    ) -> Result<Device, OpenError> {
        use crate::transport::inproc::{InprocOptions, InprocTransport};
        let transport = InprocTransport::new(
            embedded,
            InprocOptions {
                queue_depth: options.queue_depth,
                wire_check: options.wire_check,
            },
        )?;
        Ok(Device::with_client(Client::new(Box::new(transport)), uri))
    }

    /// A device over an existing client (a transport built by hand).
    pub fn with_client(client: Client, uri: DeviceUri) -> Device {
        Device { client, uri }
    }

    /// The asynchronous core, for many commands in flight.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Where this device is.
    pub fn uri(&self) -> &DeviceUri {
        &self.uri
    }

    /// Ends this client's queue pair (its allocations and range sets are reclaimed). An
    /// embedded device whose last client this was shuts down and reports any error
    /// saving its state.
    pub fn close(self) -> Result<(), CallError> {
        Ok(self.client.close()?)
    }

    fn call(&self, op: Op) -> Result<Completion, CallError> {
        self.client.call_ok(op)
    }

    // ---------------------------------------------------------------------------------
    // Discovery.

    /// The device's geometry and limits.
    pub fn identify(&self) -> Result<DeviceInfo, CallError> {
        match self.call(Op::Identify)?.reply {
            Reply::Device(info) => Ok(info),
            other => Err(unexpected("identify", "device", &other)),
        }
    }

    /// The registered device functions programs may call.
    pub fn functions(&self) -> Result<Vec<FunctionInfo>, CallError> {
        match self.call(Op::ListFunctions)?.reply {
            Reply::Functions(f) => Ok(f),
            other => Err(unexpected("list-functions", "functions", &other)),
        }
    }

    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), CallError> {
        self.call(Op::Flush).map(drop)
    }

    /// Zeroes `len` bytes of the shared state from `offset` (`len == 0`: to the end).
    pub fn clear_state(&self, offset: u64, len: u64) -> Result<(), CallError> {
        self.call(Op::ClearState { offset, len }).map(drop)
    }

    // ---------------------------------------------------------------------------------
    // Programs.

    /// The occupied program slots.
    pub fn programs(&self) -> Result<Vec<ProgramInfo>, CallError> {
        match self.call(Op::ListPrograms)?.reply {
            Reply::Programs(p) => Ok(p),
            other => Err(unexpected("list-programs", "programs", &other)),
        }
    }

    /// The occupied slots with each program's generation (an Execute may name it:
    /// [`crate::ExecuteRequest::generation`]). A device that predates generations
    /// refuses the command (`CallError::InvalidField`, unknown opcode).
    pub fn programs_with_generations(&self) -> Result<Vec<ProgramInfo>, CallError> {
        match self.call(Op::ListProgramsWithGenerations)?.reply {
            Reply::Programs(p) => Ok(p),
            other => Err(unexpected(
                "list-programs-with-generations",
                "programs",
                &other,
            )),
        }
    }

    /// The occupied slots, with each program's generation when the device gives them
    /// ([`Device::programs_with_generations`]); a device that predates generations (it
    /// refuses that listing as an unknown opcode) is listed the old way, without them.
    pub fn programs_with_generations_if_known(&self) -> Result<Vec<ProgramInfo>, CallError> {
        match self.programs_with_generations() {
            Err(CallError::InvalidField(f)) if f.status == Status::InvalidOpcode => self.programs(),
            listed => listed,
        }
    }

    /// Loads `image` into slot `pind` in chunks. `entry` names the ELF function to run.
    pub fn load_program(
        &self,
        pind: ProgramIndex,
        ptype: ProgramType,
        image: &[u8],
        entry: Option<&str>,
    ) -> Result<(), CallError> {
        let total_size_bytes = u32::try_from(image.len()).unwrap_or(u32::MAX);
        let mut offset = 0usize;
        // Chunks go one at a time: the device takes them in order.
        loop {
            let end = (offset + LOAD_CHUNK_SIZE_MAX as usize).min(image.len());
            self.call(Op::LoadProgram {
                pind,
                ptype,
                total_size_bytes,
                offset: offset as u32,
                data: image[offset..end].to_vec(),
                entry: if offset == 0 {
                    entry.map(str::to_owned)
                } else {
                    None
                },
            })?;
            offset = end;
            if offset >= image.len() {
                return Ok(());
            }
        }
    }

    /// Loads `image` into the first empty slot and returns it. A slot another host
    /// takes meanwhile is skipped.
    pub fn load_program_any_slot(
        &self,
        ptype: ProgramType,
        image: &[u8],
        entry: Option<&str>,
    ) -> Result<ProgramIndex, CallError> {
        let occupied: Vec<ProgramIndex> = self.programs()?.into_iter().map(|p| p.pind).collect();
        let mut last = None;
        for pind in (0..PROGRAM_SLOTS_COUNT)
            .map(ProgramIndex)
            .filter(|p| !occupied.contains(p))
        {
            match self.load_program(pind, ptype, image, entry) {
                Ok(()) => return Ok(pind),
                Err(e @ CallError::ProgramInUse(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            CallError::InsufficientProgramResources(Box::new(DeviceFailure {
                op: "load-program",
                status: Status::InsufficientProgramResources,
                detail: Some(ErrorDetail::new(
                    "host",
                    0,
                    format!("all {PROGRAM_SLOTS_COUNT} program slots are occupied"),
                )),
                trap: None,
            }))
        }))
    }

    /// Verifies and prepares the program in `pind` for `engine`. Returns the device's
    /// preparation time (verify + compile) in nanoseconds.
    pub fn activate(&self, pind: ProgramIndex, engine: EngineKind) -> Result<u64, CallError> {
        Ok(self
            .call(Op::ActivateProgram { pind, engine })?
            .timing
            .prepare_ns)
    }

    /// Releases the program's engine; it stays loaded.
    pub fn deactivate(&self, pind: ProgramIndex) -> Result<(), CallError> {
        self.call(Op::DeactivateProgram { pind }).map(drop)
    }

    /// Makes the program this client loaded into `pind` persistent under `name`: it
    /// stays loaded (with its activation) when this client goes and across restarts of
    /// the device, until someone unloads it. Without this, a program is unloaded when
    /// the connection that loaded it goes.
    pub fn persist_program(&self, pind: ProgramIndex, name: &str) -> Result<(), CallError> {
        self.call(Op::PersistProgram {
            pind,
            name: name.to_string(),
        })
        .map(drop)
    }

    /// Empties slot `pind`, whatever program it holds.
    pub fn unload(&self, pind: ProgramIndex) -> Result<(), CallError> {
        self.unload_generation(pind, None)
    }

    /// Empties slot `pind` if it holds the program of `generation` (as listed by
    /// [`Device::programs_with_generations`]); another program there stays and the
    /// unload fails with `CallError::ProgramChanged`. `None` empties the slot whatever
    /// it holds.
    pub fn unload_generation(
        &self,
        pind: ProgramIndex,
        generation: Option<u64>,
    ) -> Result<(), CallError> {
        self.call(Op::UnloadProgram { pind, generation }).map(drop)
    }

    /// The state of slot `pind` (`Empty` when it is not listed).
    pub fn program_state(&self, pind: ProgramIndex) -> Result<ProgramState, CallError> {
        let found = self.programs()?.into_iter().find(|p| p.pind == pind);
        Ok(found.map_or(ProgramState::Empty, |p| p.state))
    }

    /// Runs a program. A trap is a result, not an error: see [`Execution::trap`].
    pub fn execute(&self, request: &ExecuteRequest) -> Result<Execution, CallError> {
        let c = self.client.call(request.to_op())?;
        Execution::from_completion(c)
    }

    /// Starts a program without waiting: the command id, for
    /// [`Device::wait_execute`] and [`Device::abort`].
    pub fn submit_execute(&self, request: &ExecuteRequest) -> Result<CommandId, CallError> {
        self.client.submit_private(request.to_op())
    }

    /// The result of an execution [`Device::submit_execute`] started, waiting up to
    /// `timeout` (`None`: as long as it takes); `Ok(None)` when it is still running.
    pub fn wait_execute(
        &self,
        id: CommandId,
        timeout: Option<Duration>,
    ) -> Result<Option<Execution>, CallError> {
        match self.client.wait(id, timeout)? {
            Some(c) => Execution::from_completion(c).map(Some),
            None => Ok(None),
        }
    }

    /// Stops the execution `id` (see [`Client::abort`]); its result is then the error
    /// [`CallError::Aborted`]. Whether it was still in flight.
    pub fn abort(&self, id: CommandId) -> Result<bool, CallError> {
        self.client.abort(id)
    }

    // ---------------------------------------------------------------------------------
    // Device memory (SLM) and range sets.

    /// Allocates `size_bytes` of device memory.
    pub fn alloc(&self, size_bytes: u64) -> Result<MemHandle, CallError> {
        let value = self.call(Op::MemAlloc { size_bytes })?.value;
        Ok(MemHandle(
            u32::try_from(value).expect("handles are u32 on the wire"),
        ))
    }

    /// Frees an allocation.
    pub fn free(&self, handle: MemHandle) -> Result<(), CallError> {
        self.call(Op::MemFree { handle }).map(drop)
    }

    /// Writes `data` at `offset` of an allocation (in pipelined chunks).
    pub fn write_mem(&self, handle: MemHandle, offset: u64, data: &[u8]) -> Result<(), CallError> {
        let chunk = MEM_IO_SIZE_MAX as usize;
        let ops = data
            .chunks(chunk)
            .enumerate()
            .map(|(i, piece)| Op::MemWrite {
                handle,
                offset: offset + (i * chunk) as u64,
                data: piece.to_vec(),
            });
        self.pipeline(ops, |_, _| Ok(()))
    }

    /// Reads `len` bytes at `offset` of an allocation.
    pub fn read_mem(&self, handle: MemHandle, offset: u64, len: u64) -> Result<Vec<u8>, CallError> {
        let mut buf = vec![0u8; usize::try_from(len).expect("a read fits in memory")];
        self.read_mem_into(handle, offset, &mut buf)?;
        Ok(buf)
    }

    /// Fills `buf` from `offset` of an allocation (in pipelined chunks).
    pub fn read_mem_into(
        &self,
        handle: MemHandle,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), CallError> {
        let chunk = MEM_IO_SIZE_MAX as usize;
        let len = buf.len();
        let ops = (0..len.div_ceil(chunk)).map(|i| Op::MemRead {
            handle,
            offset: offset + (i * chunk) as u64,
            len: (len - i * chunk).min(chunk) as u64,
        });
        self.pipeline(ops, |i, c| {
            let at = i * chunk;
            let want = (len - at).min(chunk);
            match c.reply {
                Reply::Data(d) if d.len() == want => {
                    buf[at..at + want].copy_from_slice(&d);
                    Ok(())
                }
                other => Err(unexpected("mem-read", "data of the length asked", &other)),
            }
        })
    }

    /// Sets `len` bytes from `offset` of an allocation to `byte`.
    pub fn fill_mem(
        &self,
        handle: MemHandle,
        offset: u64,
        len: u64,
        byte: u8,
    ) -> Result<(), CallError> {
        self.call(Op::MemFill {
            handle,
            offset,
            len,
            byte,
        })
        .map(drop)
    }

    /// Stages `sources` back to back into an allocation from `dst_offset`, on the device
    /// (a Memory Copy: the bytes never travel to the host). Returns the bytes copied.
    pub fn copy_to_mem(
        &self,
        dst: MemHandle,
        dst_offset: u64,
        sources: Vec<CopySource>,
    ) -> Result<u64, CallError> {
        Ok(self
            .call(Op::MemCopy {
                dst,
                dst_offset,
                sources,
            })?
            .value)
    }

    /// Stages `len` bytes of the device file `path` from `offset` into `dst` at
    /// `dst_offset` (see [`Device::copy_to_mem`]).
    pub fn copy_file_to_mem(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<u64, CallError> {
        self.copy_to_mem(
            dst,
            dst_offset,
            vec![CopySource::File {
                path: path.to_string(),
                offset,
                len,
            }],
        )
    }

    /// Writes the bytes of `src` into the device file `path` at `offset`, on the device.
    pub fn write_mem_to_file(
        &self,
        path: &str,
        offset: u64,
        src: MemRange,
    ) -> Result<u64, CallError> {
        Ok(self
            .call(Op::FileWriteFromMem {
                path: path.to_string(),
                offset,
                src,
            })?
            .value)
    }

    /// Registers a memory range set (its ranges become windows 0, 1, ... of an
    /// execution).
    pub fn create_range_set(&self, ranges: Vec<MemRange>) -> Result<RangeSetId, CallError> {
        let value = self.call(Op::RangeSetCreate { ranges })?.value;
        Ok(RangeSetId(
            u16::try_from(value).expect("range set ids are u16 on the wire"),
        ))
    }

    /// Deletes a memory range set.
    pub fn delete_range_set(&self, rsid: RangeSetId) -> Result<(), CallError> {
        self.call(Op::RangeSetDelete { rsid }).map(drop)
    }

    // ---------------------------------------------------------------------------------
    // Files.

    /// Writes `data` to the device file `path` at `offset` (creating it, extending it if
    /// needed), in pipelined chunks.
    pub fn write_file(&self, path: &str, offset: u64, data: &[u8]) -> Result<(), CallError> {
        let chunk = FILE_IO_SIZE_MAX as usize;
        let ops = data
            .chunks(chunk)
            .enumerate()
            .map(|(i, piece)| Op::FileWrite {
                path: path.to_string(),
                offset: offset + (i * chunk) as u64,
                data: piece.to_vec(),
                mode: WriteMode::Write,
            });
        self.pipeline(ops, |_, _| Ok(()))
    }

    /// Makes the device file `path` hold exactly `data`, replacing it whole: the bytes
    /// go to a temporary file that is then renamed over `path`, so a reader, or the
    /// device after a crash, sees the old file or the new one, never a mix. Durable at
    /// the next [`Device::flush`] (which [`Device::put_file`] does itself).
    pub fn put_bytes(&self, path: &str, data: &[u8]) -> Result<(), CallError> {
        let tmp = crate::files::partial_path();
        let written = self.write_new(&tmp, data);
        crate::files::commit_partial(self, &tmp, path, written)
    }

    /// Makes the device file `path` hold exactly `data`, writing in place.
    fn write_new(&self, path: &str, data: &[u8]) -> Result<(), CallError> {
        let first = data.len().min(FILE_IO_SIZE_MAX as usize);
        // The truncating write completes before any other chunk is sent: chunks in
        // flight together may run in any order.
        self.call(Op::FileWrite {
            path: path.to_string(),
            offset: 0,
            data: data[..first].to_vec(),
            mode: WriteMode::Truncate,
        })?;
        self.write_file(path, first as u64, &data[first..])
    }

    /// Reads up to `len` bytes of the device file `path` from `offset` (fewer at its
    /// end).
    pub fn read_file(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, CallError> {
        let size = self.stat(path)?.size_bytes;
        let len = size.saturating_sub(offset).min(len);
        let mut out = Vec::with_capacity(usize::try_from(len).expect("a read fits in memory"));
        let chunk = FILE_IO_SIZE_MAX;
        let ops = (0..len.div_ceil(chunk)).map(|i| Op::FileRead {
            path: path.to_string(),
            offset: offset + i * chunk,
            len: (len - i * chunk).min(chunk),
        });
        self.pipeline(ops, |_, c| match c.reply {
            Reply::Data(d) => {
                out.extend_from_slice(&d);
                Ok(())
            }
            other => Err(unexpected("file-read", "data", &other)),
        })?;
        Ok(out)
    }

    /// Streams the local file `local` into the device file `path`, replacing it whole
    /// (by rename), and flushes the device: when this returns `Ok` the new file is
    /// durable, and at no point can a crash leave a partial file under `path`. Returns
    /// the bytes written. `progress` hears after every chunk.
    pub fn put_file(
        &self,
        local: &Path,
        path: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64, crate::files::FileTransferError> {
        crate::files::put(self, local, path, progress)
    }

    /// [`Device::put_file`] without the flush, for a batch of files flushed once at its
    /// end: the file is replaced whole by rename as before, so a crash leaves the old
    /// file or the new one, never a partial one, but the new file is durable only after
    /// the caller's next [`Device::flush`] returns.
    pub fn put_file_unflushed(
        &self,
        local: &Path,
        path: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64, crate::files::FileTransferError> {
        crate::files::put_unflushed(self, local, path, progress)
    }

    /// [`Device::put_file`] from a stream (standard input, a pipe), read to its end;
    /// `name` labels the input in errors.
    pub fn put_reader(
        &self,
        input: &mut dyn std::io::Read,
        name: &Path,
        path: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64, crate::files::FileTransferError> {
        crate::files::put_from(self, input, name, 0, path, progress)
    }

    /// Streams the device file `path` into the local file `local`, replacing it whole
    /// (a synced temporary renamed over it; a `local` that is not a regular file, such
    /// as a pipe, is written in place). Returns the bytes read.
    pub fn get_file(
        &self,
        path: &str,
        local: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64, crate::files::FileTransferError> {
        crate::files::get(self, path, local, progress)
    }

    /// Streams the device file `path` into `out` (standard output, a pipe); `name`
    /// labels the output in errors. Returns the bytes read.
    pub fn get_writer(
        &self,
        path: &str,
        out: &mut dyn std::io::Write,
        name: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64, crate::files::FileTransferError> {
        crate::files::get_into(self, path, out, name, progress)
    }

    /// The files under the directory `dir` (`/` for all).
    pub fn list_files(&self, dir: &str) -> Result<FileList, CallError> {
        match self
            .call(Op::FileList {
                dir: dir.to_string(),
            })?
            .reply
        {
            Reply::Files { files, truncated } => Ok(FileList { files, truncated }),
            other => Err(unexpected("file-list", "files", &other)),
        }
    }

    /// One file's metadata.
    pub fn stat(&self, path: &str) -> Result<FileInfo, CallError> {
        match self
            .call(Op::FileStat {
                path: path.to_string(),
            })?
            .reply
        {
            Reply::File(f) => Ok(f),
            other => Err(unexpected("file-stat", "file", &other)),
        }
    }

    /// Deletes a file.
    pub fn delete_file(&self, path: &str) -> Result<(), CallError> {
        self.call(Op::FileDelete {
            path: path.to_string(),
        })
        .map(drop)
    }

    /// Sets a file's size, zero-filling on growth.
    pub fn truncate_file(&self, path: &str, size_bytes: u64) -> Result<(), CallError> {
        self.call(Op::FileTruncate {
            path: path.to_string(),
            size_bytes,
        })
        .map(drop)
    }

    /// Makes a directory (its parents need not exist).
    pub fn mkdir(&self, path: &str) -> Result<(), CallError> {
        self.call(Op::DirCreate {
            path: path.to_string(),
        })
        .map(drop)
    }

    /// Removes an empty directory ([`CallError::NotEmpty`] otherwise).
    pub fn rmdir(&self, path: &str) -> Result<(), CallError> {
        self.call(Op::DirRemove {
            path: path.to_string(),
        })
        .map(drop)
    }

    /// Renames a file or a directory (with everything below it); replaces a file at
    /// `to` by a file, an empty directory by a directory.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), CallError> {
        self.call(Op::FileRename {
            from: from.to_string(),
            to: to.to_string(),
        })
        .map(drop)
    }

    /// One page of directory `dir`: the entries whose key (name, plus `/` for a
    /// directory, see [`DirEntryInfo`]) sorts after `after` (`""` for the first), at most
    /// `max`; and whether more follow.
    pub fn read_dir(
        &self,
        dir: &str,
        after: &str,
        max: u32,
    ) -> Result<(Vec<DirEntryInfo>, bool), CallError> {
        match self
            .call(Op::DirRead {
                dir: dir.to_string(),
                after: after.to_string(),
                max,
            })?
            .reply
        {
            Reply::Entries { entries, truncated } => Ok((entries, truncated)),
            other => Err(unexpected("dir-read", "entries", &other)),
        }
    }

    /// What is at `path`: a file or a directory (`/` is the root).
    pub fn path_stat(&self, path: &str) -> Result<DirEntryInfo, CallError> {
        match self
            .call(Op::PathStat {
                path: path.to_string(),
            })?
            .reply
        {
            Reply::Entries { mut entries, .. } if entries.len() == 1 => {
                Ok(entries.pop().expect("one entry"))
            }
            other => Err(unexpected("path-stat", "one entry", &other)),
        }
    }

    /// Where a file's bytes live in the NVM namespace.
    pub fn extents(&self, path: &str) -> Result<Extents, CallError> {
        match self
            .call(Op::FileExtents {
                path: path.to_string(),
            })?
            .reply
        {
            Reply::Extents { extents, truncated } => Ok(Extents { extents, truncated }),
            other => Err(unexpected("file-extents", "extents", &other)),
        }
    }

    // ---------------------------------------------------------------------------------
    // Pipelining.

    /// Runs `ops` with up to [`PIPELINE_DEPTH`] in flight, handing each successful
    /// completion to `done` with its index, in order. Stops at the first failure (after
    /// collecting what is in flight, so no completion is left behind).
    pub(crate) fn pipeline(
        &self,
        ops: impl Iterator<Item = Op>,
        mut done: impl FnMut(usize, Completion) -> Result<(), CallError>,
    ) -> Result<(), CallError> {
        let mut in_flight: VecDeque<(usize, &'static str, CommandId)> = VecDeque::new();
        let mut ops = ops.enumerate();
        let mut first_error: Option<CallError> = None;
        loop {
            while first_error.is_none() && in_flight.len() < PIPELINE_DEPTH {
                let Some((i, op)) = ops.next() else { break };
                let name = op.name();
                match self.client.submit_private(op) {
                    Ok(id) => in_flight.push_back((i, name, id)),
                    Err(e) => first_error = Some(e),
                }
            }
            let Some((i, name, id)) = in_flight.pop_front() else {
                break;
            };
            let c = match self.client.wait(id, None) {
                Ok(c) => c.expect("a wait without a timeout returns a completion"),
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            if first_error.is_some() {
                continue;
            }
            let r = if c.status.is_success() {
                done(i, c)
            } else {
                Err(CallError::from_completion(name, c))
            };
            if let Err(e) = r {
                first_error = Some(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
