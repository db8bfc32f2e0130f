//! Commands: what a host asks of a device.
//!
//! A [`Command`] is an id the host chose plus an [`Op`]. Ops follow the NVMe
//! Computational Programs and SLM command sets where those have an equivalent (Load
//! Program, Program Activation Management, Memory Range Set Management, Execute
//! Program, Memory Read/Write/Copy/Fill) and add the device's own file store, shared
//! state and discovery commands.
//!
//! Invariant: [`Command::validate`] accepts exactly the commands the wire encoder may
//! encode and the device may run; every length in a valid command is within
//! [`crate::limits`].

use crate::ids::{CommandId, MemHandle, ProgramIndex, RangeSetId};
use crate::limits::*;
use crate::status::Status;

/// One request to a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Echoed in the completion.
    pub id: CommandId,
    /// What to do.
    pub op: Op,
}

/// The format of a program image (TP4091 PTYPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramType {
    /// An ELF relocatable object from `clang -target bpf -c`.
    Elf,
    /// Raw eBPF bytecode: 8-byte instructions (`lddw` takes two), entry at instruction 0,
    /// no globals.
    Raw,
}

/// Which engine an activated program runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// The reference interpreter: no compile time, slower runs.
    Interpreter,
    /// The Cranelift JIT: compiles at activation, fast runs.
    Jit,
}

/// A byte range of one SLM allocation (a TP4091 memory range descriptor, with the
/// allocation handle standing in for the memory namespace id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemRange {
    pub handle: MemHandle,
    pub offset: u64,
    pub len: u64,
}

/// The windows of an execution: a registered range set, or ranges given inline
/// (TP4091 RSID = 0 with NUMR ranges in the data buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Windows {
    RangeSet(RangeSetId),
    Inline(Vec<MemRange>),
}

/// Where a Memory Copy reads one of its source ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopySource {
    /// Bytes of a device file (its extents are resolved on the device).
    File { path: String, offset: u64, len: u64 },
    /// The same bytes, kept resident: the device keeps them in its resident memory
    /// after reading them (within its resident budget, least recently used first out)
    /// and serves this range from there, without reading its media, while the file is
    /// unchanged. A device without resident memory reads them as `File`. The completion's
    /// reply says how many bytes came from resident memory (`Reply::Copied`).
    ResidentFile { path: String, offset: u64, len: u64 },
    /// Bytes of the NVM namespace, by byte address.
    Nvm { offset: u64, len: u64 },
    /// Bytes of another SLM allocation.
    Mem {
        handle: MemHandle,
        offset: u64,
        len: u64,
    },
    /// Bytes of a peer device's NVM namespace, by byte address: the device reads them
    /// from the peer over its own connection to it (a device-to-device transfer; the
    /// bytes never pass through the host). `peer` is the peer's device URI
    /// (`tcp://HOST:PORT`); a device without peer links answers Unsupported.
    Peer { peer: String, offset: u64, len: u64 },
}

impl CopySource {
    /// Bytes this source contributes.
    pub fn len(&self) -> u64 {
        match self {
            CopySource::File { len, .. }
            | CopySource::ResidentFile { len, .. }
            | CopySource::Nvm { len, .. }
            | CopySource::Mem { len, .. }
            | CopySource::Peer { len, .. } => *len,
        }
    }

    /// Whether it contributes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a File Write treats an existing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// Create the file if missing; overwrite bytes in place, extending it if needed.
    Write,
    /// Create the file if missing, truncate it to zero bytes first (a "put").
    Truncate,
    /// Create the file; fail with [`Status::FileExists`] if it exists.
    CreateNew,
}

/// The operations a device runs. Each variant's doc says what comes back in the
/// completion's `value` and `reply` on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Describe the device. Reply: `Reply::Device`.
    Identify,
    /// The registered device functions. Reply: `Reply::Functions`.
    ListFunctions,
    /// The occupied program slots (TP4091 log page 82h). Reply: `Reply::Programs`,
    /// without generations (`ProgramInfo::generation` is `None`).
    ListPrograms,
    /// The occupied program slots with each program's generation
    /// (`ProgramInfo::generation`), which an Execute may name. Reply: `Reply::Programs`.
    ListProgramsWithGenerations,
    /// One chunk of a program image (TP4091 Load Program, SEL = 0). Chunks arrive in
    /// order: `offset` is the bytes received so far (0 starts over). The slot holds a
    /// loaded program once `offset + data.len() == total_size_bytes`. `entry` names the
    /// ELF function to run (the first function in `.text` if absent); only the chunk at
    /// offset 0 may carry it. Value: bytes received so far.
    LoadProgram {
        pind: ProgramIndex,
        ptype: ProgramType,
        total_size_bytes: u32,
        offset: u32,
        data: Vec<u8>,
        entry: Option<String>,
    },
    /// Empty a slot (TP4091 Load Program, SEL = 1). An active program is deactivated
    /// first; a program with executions in flight is refused.
    UnloadProgram {
        pind: ProgramIndex,
        /// The generation of the program the caller means (`ProgramInfo::generation`,
        /// never 0): the device refuses the unload with [`Status::ProgramChanged`] when
        /// the slot holds another program (the one looked up was unloaded and another
        /// loaded since), and the other program stays. `None` unloads whatever the slot
        /// holds.
        generation: Option<u64>,
    },
    /// Verify the program and prepare its engine (TP4091 Program Activation
    /// Management, activate).
    ActivateProgram {
        pind: ProgramIndex,
        engine: EngineKind,
    },
    /// Release the program's engine (Program Activation Management, deactivate).
    DeactivateProgram { pind: ProgramIndex },
    /// Make the loaded program in `pind` persistent under `name`: it no longer belongs
    /// to the queue pair that loaded it (a program that is not persistent is unloaded
    /// when its loader's pair goes), it is kept in the state directory with its
    /// activation, and it is restored when the device opens. Only the loader may ask;
    /// the name is unique among the device's programs (see [`validate_program_name`]).
    PersistProgram { pind: ProgramIndex, name: String },
    /// Allocate `size_bytes` of SLM. Value: the new handle.
    MemAlloc { size_bytes: u64 },
    /// Free an allocation.
    MemFree { handle: MemHandle },
    /// Host → SLM (SLM Memory Write). Value: bytes written.
    MemWrite {
        handle: MemHandle,
        offset: u64,
        data: Vec<u8>,
    },
    /// SLM → host (SLM Memory Read). Reply: `Reply::Data`.
    MemRead {
        handle: MemHandle,
        offset: u64,
        len: u64,
    },
    /// Set `len` bytes to `byte` (SLM Memory Fill).
    MemFill {
        handle: MemHandle,
        offset: u64,
        len: u64,
        byte: u8,
    },
    /// Stage storage (or other SLM) into an allocation, sources back to back from
    /// `dst_offset` (SLM Memory Copy). Value: bytes copied.
    MemCopy {
        dst: MemHandle,
        dst_offset: u64,
        sources: Vec<CopySource>,
    },
    /// Register a memory range set (TP4091 Memory Range Set Management, create). Value:
    /// the RSID.
    RangeSetCreate { ranges: Vec<MemRange> },
    /// Delete a memory range set.
    RangeSetDelete { rsid: RangeSetId },
    /// Run a program (TP4091 Execute Program). Value: r0. Reply: `Reply::Execute`.
    /// A trap completes with [`Status::Trap`] and the trap.
    Execute {
        pind: ProgramIndex,
        windows: Windows,
        cparam1: u64,
        cparam2: u64,
        params: Vec<u8>,
        /// The run's fuel budget; `None` takes the device default.
        fuel: Option<u64>,
        /// The run's time limit in milliseconds (1 ..= `TIME_LIMIT_MS_MAX`), counted from
        /// the moment it starts running; `None` takes the device default
        /// (`time_limit_ms` in `device.json`, 1 s unless set). A run past it stops and
        /// completes with [`Status::TimeLimitExceeded`].
        time_limit_ms: Option<u32>,
        /// The generation of the program the caller means (`ProgramInfo::generation`,
        /// never 0): the device refuses the run with [`Status::ProgramChanged`] when
        /// the slot holds another program (another client unloaded it and loaded a
        /// different one). `None` runs whatever the slot holds.
        generation: Option<u64>,
    },
    /// Stop the executions with command id `target` of this queue pair (NVMe's Abort,
    /// scoped to the submitting queue pair): a queued one completes without running, a
    /// running one stops at its next back-edge or call; either completes with
    /// [`Status::Aborted`]. Value: how many executions were asked to stop (0 when none
    /// with that id was in flight; a run that finished meanwhile completes as it ended).
    /// Other commands are short and not abortable (value 0).
    Abort { target: CommandId },
    /// Zero `len` bytes of the shared state from `offset`; `len == 0` means "to the
    /// end" (as Delilah's Clear State, where size 0 clears everything).
    ClearState { offset: u64, len: u64 },
    /// Write bytes to a device file. Value: bytes written.
    FileWrite {
        path: String,
        offset: u64,
        data: Vec<u8>,
        mode: WriteMode,
    },
    /// Read bytes of a device file; fewer than `len` at its end. Reply: `Reply::Data`.
    FileRead { path: String, offset: u64, len: u64 },
    /// Files whose path starts with the directory `dir` ("/" for all). Reply:
    /// `Reply::Files`.
    FileList { dir: String },
    /// One file's metadata. Reply: `Reply::File`.
    FileStat { path: String },
    /// Delete a file.
    FileDelete { path: String },
    /// Set a file's size, zero-filling on growth.
    FileTruncate { path: String, size_bytes: u64 },
    /// A file's extents in the NVM namespace (like FIEMAP). Reply: `Reply::Extents`.
    FileExtents { path: String },
    /// Write SLM bytes into a device file (NVM Copy from a memory namespace, TP4091
    /// descriptor format 4h). Value: bytes written.
    FileWriteFromMem {
        path: String,
        offset: u64,
        src: MemRange,
    },
    /// Make every completed write durable: file data and metadata, the shared state.
    Flush,
    /// Make a directory (its parents need not exist).
    DirCreate { path: String },
    /// Remove an empty directory.
    DirRemove { path: String },
    /// Rename a file (replacing a file at `to`) or a directory with everything below it
    /// (replacing an empty directory at `to`).
    FileRename { from: String, to: String },
    /// The children of directory `dir` whose key (name, `/` added for a directory) sorts
    /// after `after` (`""`: from the first), at most `max`. Reply: `Reply::Entries`.
    DirRead {
        dir: String,
        after: String,
        max: u32,
    },
    /// What is at a path: a file or a directory (`""` or `/` is the root). Reply:
    /// `Reply::Entries` with one entry.
    PathStat { path: String },
}

/// Why a command is outside the protocol's limits or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    #[error("{field} has {len} bytes, limit is {limit}")]
    TooLong {
        field: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("{field} has {count} entries, limit is {limit}")]
    TooMany {
        field: &'static str,
        count: u64,
        limit: u64,
    },
    #[error("{field} is empty")]
    Empty { field: &'static str },
    #[error("{field} is {value}, limit is {limit}")]
    OutOfRange {
        field: &'static str,
        value: u64,
        limit: u64,
    },
    /// A value outside `min..=max` (below the minimum or above the maximum).
    #[error("{field} of {value}{unit}, must be {min}..={max}")]
    NotInRange {
        field: &'static str,
        value: u64,
        /// Printed after the value (" ms"), or empty.
        unit: &'static str,
        min: u64,
        max: u64,
    },
    #[error("program name {name:?}: {reason}")]
    BadProgramName { name: String, reason: &'static str },
    #[error("{field}: offset {offset} plus length {len} overflows")]
    Overflow {
        field: &'static str,
        offset: u64,
        len: u64,
    },
    #[error("chunk at offset {offset} of {len} bytes runs past the program's {total} bytes")]
    ChunkPastEnd { offset: u32, len: u32, total: u32 },
    #[error("entry name given on a chunk at offset {offset}, only the first chunk may name it")]
    EntryNotFirst { offset: u32 },
    #[error("range set id 0 is reserved for inline ranges")]
    ReservedRangeSetId,
    #[error("memory handle 0 is never allocated")]
    NullHandle,
    #[error("path {path:?}: {reason}")]
    BadPath { path: String, reason: &'static str },
}

impl FieldError {
    /// The completion status the device reports for this error.
    pub fn status(&self) -> Status {
        match self {
            FieldError::TooLong {
                field: "program", ..
            } => Status::ProgramTooBig,
            FieldError::OutOfRange { field: "pind", .. } => Status::InvalidProgramIndex,
            FieldError::TooMany {
                field: "ranges", ..
            } => Status::MaximumMemoryRangesExceeded,
            FieldError::ReservedRangeSetId => Status::InvalidMemoryRangeSetId,
            FieldError::NullHandle => Status::InvalidMemoryNamespace,
            FieldError::Empty { field: "range" } | FieldError::TooLong { field: "range", .. } => {
                Status::InvalidMemoryRangeSet
            }
            _ => Status::InvalidField,
        }
    }
}

/// Checks a device path as the protocol sees it: non-empty, at most [`PATH_SIZE_MAX`]
/// bytes, no NUL, no `..` component. The device's file store then puts it in its one
/// canonical spelling (leading `/`, no repeated `/`, no `.`), so `a//b` and `/a/b` name
/// the same file; a path that is only slashes and dots names no file and is refused
/// there.
pub fn validate_path(path: &str) -> Result<(), FieldError> {
    let bad = |reason| {
        Err(FieldError::BadPath {
            path: truncate_for_message(path),
            reason,
        })
    };
    if path.len() > PATH_SIZE_MAX {
        return Err(FieldError::TooLong {
            field: "path",
            len: path.len() as u64,
            limit: PATH_SIZE_MAX as u64,
        });
    }
    if path.is_empty() {
        return bad("is empty");
    }
    if path.contains('\0') {
        return bad("must not contain NUL");
    }
    if path.split('/').any(|part| part == "..") {
        return bad("has a '..' component");
    }
    Ok(())
}

/// Checks a directory for File List: as [`validate_path`], but the root (`/` or the
/// empty string) is allowed.
pub fn validate_dir(dir: &str) -> Result<(), FieldError> {
    if dir.is_empty() || dir == "/" {
        return Ok(());
    }
    validate_path(dir)
}

fn truncate_for_message(s: &str) -> String {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn check_len(field: &'static str, len: u64, limit: u64) -> Result<(), FieldError> {
    if len > limit {
        return Err(FieldError::TooLong { field, len, limit });
    }
    Ok(())
}

fn check_span(field: &'static str, offset: u64, len: u64) -> Result<(), FieldError> {
    if offset.checked_add(len).is_none() {
        return Err(FieldError::Overflow { field, offset, len });
    }
    Ok(())
}

fn check_pind(pind: ProgramIndex) -> Result<(), FieldError> {
    if pind.0 >= PROGRAM_SLOTS_COUNT {
        return Err(FieldError::OutOfRange {
            field: "pind",
            value: u64::from(pind.0),
            limit: u64::from(PROGRAM_SLOTS_COUNT) - 1,
        });
    }
    Ok(())
}

fn check_handle(handle: MemHandle) -> Result<(), FieldError> {
    if handle == MemHandle::NONE {
        return Err(FieldError::NullHandle);
    }
    Ok(())
}

/// Bytes of a persistent program's name at most.
pub const PROGRAM_NAME_SIZE_MAX: usize = 64;

/// Checks a persistent program's name: 1..=[`PROGRAM_NAME_SIZE_MAX`] bytes of ASCII
/// letters, digits, `_`, `-` and `.`, starting with a letter or digit, and not all
/// digits (so a name never reads as a slot number).
pub fn validate_program_name(name: &str) -> Result<(), FieldError> {
    let bad = |reason| {
        Err(FieldError::BadProgramName {
            name: name.chars().take(PROGRAM_NAME_SIZE_MAX + 8).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > PROGRAM_NAME_SIZE_MAX {
        return bad("longer than 64 bytes");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return bad("only ASCII letters, digits, `_`, `-` and `.` are allowed");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return bad("must start with a letter or a digit");
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return bad("must not be all digits (that reads as a slot number)");
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return Err(FieldError::Empty { field: "entry" });
    }
    check_len("entry", name.len() as u64, NAME_SIZE_MAX as u64)
}

/// Checks ranges that become windows (a range set or inline ranges).
pub fn validate_ranges(ranges: &[MemRange], allow_empty_list: bool) -> Result<(), FieldError> {
    if ranges.len() > RANGES_PER_SET_MAX {
        return Err(FieldError::TooMany {
            field: "ranges",
            count: ranges.len() as u64,
            limit: RANGES_PER_SET_MAX as u64,
        });
    }
    if ranges.is_empty() && !allow_empty_list {
        return Err(FieldError::Empty { field: "ranges" });
    }
    for r in ranges {
        check_handle(r.handle)?;
        if r.len == 0 {
            return Err(FieldError::Empty { field: "range" });
        }
        check_len("range", r.len, WINDOW_SIZE_MAX)?;
        check_span("range", r.offset, r.len)?;
    }
    Ok(())
}

fn validate_load(
    pind: ProgramIndex,
    total_size_bytes: u32,
    offset: u32,
    data: &[u8],
    entry: Option<&str>,
) -> Result<(), FieldError> {
    check_pind(pind)?;
    check_len(
        "program",
        u64::from(total_size_bytes),
        u64::from(PROGRAM_SIZE_MAX),
    )?;
    if total_size_bytes == 0 {
        return Err(FieldError::Empty { field: "program" });
    }
    check_len("chunk", data.len() as u64, u64::from(LOAD_CHUNK_SIZE_MAX))?;
    // The chunk length fits in u32: it is at most LOAD_CHUNK_SIZE_MAX.
    let len = data.len() as u32;
    if u64::from(offset) + u64::from(len) > u64::from(total_size_bytes) {
        return Err(FieldError::ChunkPastEnd {
            offset,
            len,
            total: total_size_bytes,
        });
    }
    if data.is_empty() {
        return Err(FieldError::Empty { field: "chunk" });
    }
    if let Some(name) = entry {
        if offset != 0 {
            return Err(FieldError::EntryNotFirst { offset });
        }
        check_name(name)?;
    }
    Ok(())
}

fn validate_copy(
    dst: MemHandle,
    dst_offset: u64,
    sources: &[CopySource],
) -> Result<(), FieldError> {
    check_handle(dst)?;
    if sources.is_empty() {
        return Err(FieldError::Empty { field: "sources" });
    }
    if sources.len() > COPY_SOURCES_MAX {
        return Err(FieldError::TooMany {
            field: "sources",
            count: sources.len() as u64,
            limit: COPY_SOURCES_MAX as u64,
        });
    }
    let mut total: u64 = 0;
    for s in sources {
        match s {
            CopySource::File { path, offset, len }
            | CopySource::ResidentFile { path, offset, len } => {
                validate_path(path)?;
                check_span("source", *offset, *len)?;
            }
            CopySource::Nvm { offset, len } => check_span("source", *offset, *len)?,
            CopySource::Mem {
                handle,
                offset,
                len,
            } => {
                check_handle(*handle)?;
                check_span("source", *offset, *len)?;
            }
            CopySource::Peer { peer, offset, len } => {
                if peer.is_empty() {
                    return Err(FieldError::Empty { field: "peer" });
                }
                if peer.len() > PATH_SIZE_MAX {
                    return Err(FieldError::TooLong {
                        field: "peer",
                        len: peer.len() as u64,
                        limit: PATH_SIZE_MAX as u64,
                    });
                }
                check_span("source", *offset, *len)?;
            }
        }
        total = total.saturating_add(s.len());
    }
    check_len("copy", total, COPY_SIZE_MAX)?;
    check_span("destination", dst_offset, total)
}

/// An allocation is not empty and not over the device's largest.
fn check_alloc(size_bytes: u64) -> Result<(), FieldError> {
    if size_bytes == 0 {
        return Err(FieldError::Empty {
            field: "allocation",
        });
    }
    check_len("allocation", size_bytes, SLM_ALLOC_SIZE_MAX)
}

/// A command names a range set by an id the device hands out, never the reserved one.
fn check_rsid(rsid: RangeSetId) -> Result<(), FieldError> {
    if rsid == RangeSetId::NONE {
        return Err(FieldError::ReservedRangeSetId);
    }
    Ok(())
}

/// An execute's windows: a named range set (not the reserved id) or inline ranges.
fn check_windows(windows: &Windows) -> Result<(), FieldError> {
    match windows {
        Windows::RangeSet(rsid) => check_rsid(*rsid),
        Windows::Inline(ranges) => validate_ranges(ranges, true),
    }
}

/// A fuel budget, when given, is in `1..=FUEL_MAX`.
fn check_fuel(fuel: Option<u64>) -> Result<(), FieldError> {
    match fuel {
        Some(f) if f == 0 || f > FUEL_MAX => Err(FieldError::NotInRange {
            field: "fuel",
            value: f,
            unit: "",
            min: 1,
            max: FUEL_MAX,
        }),
        _ => Ok(()),
    }
}

/// A time limit, when given, is in `1..=TIME_LIMIT_MS_MAX` milliseconds.
fn check_time_limit(ms: Option<u32>) -> Result<(), FieldError> {
    match ms {
        Some(ms) if ms == 0 || ms > TIME_LIMIT_MS_MAX => Err(FieldError::NotInRange {
            field: "time limit",
            value: u64::from(ms),
            unit: " ms",
            min: 1,
            max: u64::from(TIME_LIMIT_MS_MAX),
        }),
        _ => Ok(()),
    }
}

/// A named program generation is never 0 (no program has it).
pub(crate) fn check_generation(generation: Option<u64>) -> Result<(), FieldError> {
    match generation {
        Some(0) => Err(FieldError::NotInRange {
            field: "program generation",
            value: 0,
            unit: "",
            min: 1,
            max: u64::MAX,
        }),
        _ => Ok(()),
    }
}

/// A directory read asks for `1..=FILE_LIST_ENTRIES_MAX` entries.
fn check_entry_count(max: u32) -> Result<(), FieldError> {
    if max == 0 || max as usize > FILE_LIST_ENTRIES_MAX {
        return Err(FieldError::NotInRange {
            field: "entry count",
            value: u64::from(max),
            unit: "",
            min: 1,
            max: FILE_LIST_ENTRIES_MAX as u64,
        });
    }
    Ok(())
}

impl Op {
    /// Checks every field against the protocol's limits and shapes. The device runs
    /// only commands that pass; the wire encoder encodes only those.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            Op::Identify
            | Op::ListFunctions
            | Op::ListPrograms
            | Op::ListProgramsWithGenerations
            | Op::Flush => Ok(()),
            Op::LoadProgram {
                pind,
                total_size_bytes,
                offset,
                data,
                entry,
                ..
            } => validate_load(*pind, *total_size_bytes, *offset, data, entry.as_deref()),
            Op::UnloadProgram { pind, generation } => {
                check_pind(*pind)?;
                check_generation(*generation)
            }
            Op::ActivateProgram { pind, .. } | Op::DeactivateProgram { pind } => check_pind(*pind),
            Op::PersistProgram { pind, name } => {
                check_pind(*pind)?;
                validate_program_name(name)
            }
            Op::MemAlloc { .. }
            | Op::MemFree { .. }
            | Op::MemWrite { .. }
            | Op::MemRead { .. }
            | Op::MemFill { .. }
            | Op::MemCopy { .. }
            | Op::RangeSetCreate { .. }
            | Op::RangeSetDelete { .. } => self.validate_memory_op(),
            Op::Execute {
                pind,
                windows,
                params,
                fuel,
                time_limit_ms,
                generation,
                ..
            } => {
                check_pind(*pind)?;
                check_windows(windows)?;
                check_len("params", params.len() as u64, PARAMS_SIZE_MAX as u64)?;
                check_fuel(*fuel)?;
                check_time_limit(*time_limit_ms)?;
                check_generation(*generation)
            }
            Op::Abort { .. } => Ok(()),
            Op::ClearState { offset, len } => check_span("clear", *offset, *len),
            Op::FileWrite { .. }
            | Op::FileRead { .. }
            | Op::FileList { .. }
            | Op::FileStat { .. }
            | Op::FileDelete { .. }
            | Op::FileExtents { .. }
            | Op::FileTruncate { .. }
            | Op::DirCreate { .. }
            | Op::DirRemove { .. }
            | Op::FileRename { .. }
            | Op::DirRead { .. }
            | Op::PathStat { .. }
            | Op::FileWriteFromMem { .. } => self.validate_file_op(),
        }
    }

    /// [`Op::validate`] of the device memory's commands: handles, then sizes and spans.
    fn validate_memory_op(&self) -> Result<(), FieldError> {
        match self {
            Op::MemAlloc { size_bytes } => check_alloc(*size_bytes),
            Op::MemFree { handle } => check_handle(*handle),
            Op::MemWrite {
                handle,
                offset,
                data,
            } => {
                check_handle(*handle)?;
                check_len("data", data.len() as u64, MEM_IO_SIZE_MAX)?;
                check_span("write", *offset, data.len() as u64)
            }
            Op::MemRead {
                handle,
                offset,
                len,
            } => {
                check_handle(*handle)?;
                check_len("read", *len, MEM_IO_SIZE_MAX)?;
                check_span("read", *offset, *len)
            }
            Op::MemFill {
                handle,
                offset,
                len,
                ..
            } => {
                check_handle(*handle)?;
                check_len("fill", *len, SLM_ALLOC_SIZE_MAX)?;
                check_span("fill", *offset, *len)
            }
            Op::MemCopy {
                dst,
                dst_offset,
                sources,
            } => validate_copy(*dst, *dst_offset, sources),
            Op::RangeSetCreate { ranges } => validate_ranges(ranges, false),
            Op::RangeSetDelete { rsid } => check_rsid(*rsid),
            // `validate` routes only the memory commands here.
            _ => Ok(()),
        }
    }

    /// [`Op::validate`] of the file store's commands: paths, then sizes and spans.
    fn validate_file_op(&self) -> Result<(), FieldError> {
        match self {
            Op::FileWrite {
                path, offset, data, ..
            } => {
                validate_path(path)?;
                check_len("data", data.len() as u64, FILE_IO_SIZE_MAX)?;
                check_span("write", *offset, data.len() as u64)
            }
            Op::FileRead { path, offset, len } => {
                validate_path(path)?;
                check_len("read", *len, FILE_IO_SIZE_MAX)?;
                check_span("read", *offset, *len)
            }
            Op::FileList { dir } => validate_dir(dir),
            Op::FileStat { path } | Op::FileDelete { path } | Op::FileExtents { path } => {
                validate_path(path)
            }
            Op::FileTruncate { path, .. } => validate_path(path),
            Op::DirCreate { path } | Op::DirRemove { path } => validate_path(path),
            Op::FileRename { from, to } => {
                validate_path(from)?;
                validate_path(to)
            }
            Op::DirRead { dir, after, max } => {
                validate_dir(dir)?;
                check_len("after", after.len() as u64, NAME_SIZE_MAX as u64 + 1)?;
                check_entry_count(*max)
            }
            Op::PathStat { path } => validate_dir(path),
            Op::FileWriteFromMem { path, offset, src } => {
                validate_path(path)?;
                validate_ranges(std::slice::from_ref(src), false)?;
                check_len("write", src.len, FILE_IO_SIZE_MAX)?;
                check_span("write", *offset, src.len)
            }
            // `validate` routes only the file store's commands here.
            _ => Ok(()),
        }
    }

    /// The opcode on the wire (see `docs/design/wire.md`).
    pub fn opcode(&self) -> u8 {
        match self {
            Op::Identify => 0x01,
            Op::ListFunctions => 0x02,
            Op::ListPrograms => 0x03,
            Op::ListProgramsWithGenerations => 0x0E,
            Op::LoadProgram { .. } => 0x04,
            Op::UnloadProgram { .. } => 0x05,
            Op::ActivateProgram { .. } => 0x06,
            Op::DeactivateProgram { .. } => 0x07,
            Op::PersistProgram { .. } => 0x0D,
            Op::RangeSetCreate { .. } => 0x08,
            Op::RangeSetDelete { .. } => 0x09,
            Op::ClearState { .. } => 0x0A,
            Op::Flush => 0x0B,
            Op::Abort { .. } => 0x0C,
            Op::MemAlloc { .. } => 0x10,
            Op::MemFree { .. } => 0x11,
            Op::MemWrite { .. } => 0x12,
            Op::MemRead { .. } => 0x13,
            Op::MemFill { .. } => 0x14,
            Op::MemCopy { .. } => 0x15,
            Op::Execute { .. } => 0x20,
            Op::FileWrite { .. } => 0x30,
            Op::FileRead { .. } => 0x31,
            Op::FileList { .. } => 0x32,
            Op::FileStat { .. } => 0x33,
            Op::FileDelete { .. } => 0x34,
            Op::FileTruncate { .. } => 0x35,
            Op::FileExtents { .. } => 0x36,
            Op::FileWriteFromMem { .. } => 0x37,
            Op::DirCreate { .. } => 0x38,
            Op::DirRemove { .. } => 0x39,
            Op::FileRename { .. } => 0x3A,
            Op::DirRead { .. } => 0x3B,
            Op::PathStat { .. } => 0x3C,
        }
    }

    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Identify => "identify",
            Op::ListFunctions => "list-functions",
            Op::ListPrograms => "list-programs",
            Op::ListProgramsWithGenerations => "list-programs-with-generations",
            Op::LoadProgram { .. } => "load-program",
            Op::UnloadProgram { .. } => "unload-program",
            Op::ActivateProgram { .. } => "activate-program",
            Op::DeactivateProgram { .. } => "deactivate-program",
            Op::PersistProgram { .. } => "persist-program",
            Op::RangeSetCreate { .. } => "range-set-create",
            Op::RangeSetDelete { .. } => "range-set-delete",
            Op::ClearState { .. } => "clear-state",
            Op::Flush => "flush",
            Op::Abort { .. } => "abort",
            Op::MemAlloc { .. } => "mem-alloc",
            Op::MemFree { .. } => "mem-free",
            Op::MemWrite { .. } => "mem-write",
            Op::MemRead { .. } => "mem-read",
            Op::MemFill { .. } => "mem-fill",
            Op::MemCopy { .. } => "mem-copy",
            Op::Execute { .. } => "execute",
            Op::FileWrite { .. } => "file-write",
            Op::FileRead { .. } => "file-read",
            Op::FileList { .. } => "file-list",
            Op::FileStat { .. } => "file-stat",
            Op::FileDelete { .. } => "file-delete",
            Op::FileTruncate { .. } => "file-truncate",
            Op::FileExtents { .. } => "file-extents",
            Op::FileWriteFromMem { .. } => "file-write-from-mem",
            Op::DirCreate { .. } => "dir-create",
            Op::DirRemove { .. } => "dir-remove",
            Op::FileRename { .. } => "file-rename",
            Op::DirRead { .. } => "dir-read",
            Op::PathStat { .. } => "path-stat",
        }
    }

    /// Bytes of bulk data the command carries to the device (a transport may move them
    /// out of band, as shm does through its host memory region).
    pub fn data_len(&self) -> usize {
        match self {
            Op::LoadProgram { data, .. }
            | Op::MemWrite { data, .. }
            | Op::FileWrite { data, .. } => data.len(),
            _ => 0,
        }
    }
}

impl Command {
    /// A command.
    pub fn new(id: CommandId, op: Op) -> Command {
        Command { id, op }
    }

    /// See [`Op::validate`].
    pub fn validate(&self) -> Result<(), FieldError> {
        self.op.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(validate_path("/a").is_ok());
        assert!(validate_path("/dir/file.bin").is_ok());
        assert!(validate_path("relative//x/./y").is_ok());
        for bad in ["", "/a/..", "../a", "/a\0b"] {
            assert!(validate_path(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("/{}", "x".repeat(PATH_SIZE_MAX));
        assert!(matches!(
            validate_path(&long),
            Err(FieldError::TooLong { .. })
        ));
        assert!(validate_dir("/").is_ok());
        assert!(validate_dir("").is_ok());
        assert!(validate_dir("/d/").is_ok());
        assert!(validate_dir("/d/..").is_err());
    }

    #[test]
    fn load_chunks() {
        let op = |total, offset, len: usize, entry: Option<&str>| Op::LoadProgram {
            pind: ProgramIndex(1),
            ptype: ProgramType::Elf,
            total_size_bytes: total,
            offset,
            data: vec![0; len],
            entry: entry.map(String::from),
        };
        assert!(op(10, 0, 10, Some("main")).validate().is_ok());
        assert!(op(10, 5, 5, None).validate().is_ok());
        assert_eq!(
            op(10, 5, 6, None).validate(),
            Err(FieldError::ChunkPastEnd {
                offset: 5,
                len: 6,
                total: 10
            })
        );
        assert_eq!(
            op(10, 5, 5, Some("m")).validate(),
            Err(FieldError::EntryNotFirst { offset: 5 })
        );
        let big = op(PROGRAM_SIZE_MAX + 1, 0, 1, None).validate().unwrap_err();
        assert_eq!(big.status(), Status::ProgramTooBig);
        let bad_pind = Op::ActivateProgram {
            pind: ProgramIndex(PROGRAM_SLOTS_COUNT),
            engine: EngineKind::Jit,
        };
        assert_eq!(
            bad_pind.validate().unwrap_err().status(),
            Status::InvalidProgramIndex
        );
    }

    #[test]
    fn dir_read_entry_count_names_its_range() {
        let op = |max| Op::DirRead {
            dir: "/".into(),
            after: String::new(),
            max,
        };
        assert!(op(1).validate().is_ok());
        let zero = op(0).validate().unwrap_err().to_string();
        assert_eq!(
            zero,
            format!("entry count of 0, must be 1..={FILE_LIST_ENTRIES_MAX}")
        );
        let over = FILE_LIST_ENTRIES_MAX as u32 + 1;
        let big = op(over).validate().unwrap_err().to_string();
        assert_eq!(
            big,
            format!("entry count of {over}, must be 1..={FILE_LIST_ENTRIES_MAX}")
        );
    }

    #[test]
    fn execute_limits() {
        let r = MemRange {
            handle: MemHandle(1),
            offset: 0,
            len: 8,
        };
        let exec = |ranges: Vec<MemRange>, params: usize, fuel| Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::Inline(ranges),
            cparam1: 0,
            cparam2: 0,
            params: vec![0; params],
            fuel,
            time_limit_ms: None,
            generation: None,
        };
        assert!(exec(vec![r; WINDOWS_MAX], PARAMS_SIZE_MAX, None)
            .validate()
            .is_ok());
        assert!(exec(vec![], 0, Some(1)).validate().is_ok());
        let e = exec(vec![r; WINDOWS_MAX + 1], 0, None)
            .validate()
            .unwrap_err();
        assert_eq!(e.status(), Status::MaximumMemoryRangesExceeded);
        assert!(exec(vec![r], PARAMS_SIZE_MAX + 1, None).validate().is_err());
        assert!(exec(vec![r], 0, Some(0)).validate().is_err());
        let empty = MemRange { len: 0, ..r };
        assert_eq!(
            exec(vec![empty], 0, None).validate().unwrap_err().status(),
            Status::InvalidMemoryRangeSet
        );
        let rs0 = Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::RangeSet(RangeSetId::NONE),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: None,
            generation: None,
        };
        assert_eq!(
            rs0.validate().unwrap_err().status(),
            Status::InvalidMemoryRangeSetId
        );
        let timed = |ms| Op::Execute {
            pind: ProgramIndex(0),
            windows: Windows::Inline(vec![]),
            cparam1: 0,
            cparam2: 0,
            params: vec![],
            fuel: None,
            time_limit_ms: Some(ms),
            generation: None,
        };
        assert!(timed(1).validate().is_ok());
        assert!(timed(TIME_LIMIT_MS_MAX).validate().is_ok());
        for bad in [0, TIME_LIMIT_MS_MAX + 1] {
            let e = timed(bad).validate().unwrap_err();
            assert_eq!(e.status(), Status::InvalidField);
            assert!(
                e.to_string().contains(&TIME_LIMIT_MS_MAX.to_string()),
                "{e}"
            );
        }
    }

    #[test]
    fn spans_do_not_overflow() {
        let op = Op::MemRead {
            handle: MemHandle(1),
            offset: u64::MAX,
            len: 2,
        };
        assert!(matches!(op.validate(), Err(FieldError::Overflow { .. })));
        let op = Op::MemRead {
            handle: MemHandle::NONE,
            offset: 0,
            len: 2,
        };
        assert_eq!(
            op.validate().unwrap_err().status(),
            Status::InvalidMemoryNamespace
        );
    }
}
