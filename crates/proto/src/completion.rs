//! Completions: what a device answers, one per command.
//!
//! A [`Completion`] carries the command's id, a [`Status`], a 64-bit value (r0 of an
//! execution, a new handle, a byte count), the trap if a program faulted, the detail of
//! the first failure if anything failed, the per-phase [`Timing`] and a typed [`Reply`].
//!
//! Invariant: [`Completion::validate`] bounds every string and list, so a completion
//! that passes always encodes into at most [`crate::limits::FRAME_SIZE_MAX`] bytes.

use std::fmt;

use crate::command::{EngineKind, FieldError, ProgramType};
use crate::ids::{ClientId, CommandId, FunctionId, ProgramIndex};
use crate::limits::*;
use crate::status::Status;

/// The answer to one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub id: CommandId,
    pub status: Status,
    /// r0 for Execute; the handle or RSID for allocations; a byte count for transfers.
    pub value: u64,
    /// The fault, when `status` is [`Status::Trap`].
    pub trap: Option<WireTrap>,
    /// What failed and why: the first registered function that returned an error during
    /// an execution (even when the program went on), or the component that refused the
    /// command.
    pub detail: Option<ErrorDetail>,
    pub timing: Timing,
    pub reply: Reply,
}

impl Completion {
    /// A completion with only a status.
    pub fn new(id: CommandId, status: Status) -> Completion {
        Completion {
            id,
            status,
            value: 0,
            trap: None,
            detail: None,
            timing: Timing::default(),
            reply: Reply::None,
        }
    }

    /// A failed completion with a message from `component`.
    pub fn error(
        id: CommandId,
        status: Status,
        component: &str,
        message: impl Into<String>,
    ) -> Completion {
        let mut c = Completion::new(id, status);
        c.detail = Some(ErrorDetail::new(component, 0, message));
        c
    }

    /// Bounds every string and list (see the module invariant).
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(t) = &self.trap {
            t.validate()?;
        }
        if let Some(d) = &self.detail {
            d.validate()?;
        }
        self.reply.validate()
    }
}

/// Where the time of a command went, in nanoseconds of wall time on the device.
///
/// `queued` runs from submission to the moment a worker picks the command up;
/// `transfer` is data movement (DMA of the emulation, storage reads and writes, and the
/// file I/O a program does through registered functions); `prepare` is resolving and
/// mapping (and verifying and compiling, for an activation); `execute` is the program's
/// own run, the transfer part excluded; `total` is submission to completion.
/// `modelled` is the duration a device performance model assigns (0 without a model).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    pub queued_ns: u64,
    pub transfer_ns: u64,
    pub prepare_ns: u64,
    pub execute_ns: u64,
    pub total_ns: u64,
    pub modelled_ns: u64,
}

/// What failed and why (Delilah's open question: how a registered function reports an
/// error to the host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorDetail {
    /// The registered function (`csx_file_read`) or device component (`verifier`,
    /// `loader`, `filestore`, `slm`) that failed.
    pub function: String,
    /// The negative csx code the function returned (see [`crate::errno`]); for a
    /// component, the code of its failure when it has one finer than the status (the
    /// file store's: `CSX_EISDIR`, `CSX_ENOTDIR`, ...), else 0.
    pub code: i64,
    pub message: String,
}

impl ErrorDetail {
    /// A detail, with its strings cut to the protocol's limits.
    pub fn new(function: &str, code: i64, message: impl Into<String>) -> ErrorDetail {
        ErrorDetail {
            function: clip(function.to_string(), NAME_SIZE_MAX),
            code,
            message: clip(message.into(), MESSAGE_SIZE_MAX),
        }
    }

    fn validate(&self) -> Result<(), FieldError> {
        check_str("function", &self.function, NAME_SIZE_MAX)?;
        check_str("message", &self.message, MESSAGE_SIZE_MAX)
    }
}

impl fmt::Display for ErrorDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code != 0 {
            write!(
                f,
                "{}: {} ({})",
                self.function,
                self.message,
                crate::abi::errno::name(self.code)
            )
        } else {
            write!(f, "{}: {}", self.function, self.message)
        }
    }
}

/// Cuts `s` to at most `limit` bytes on a character boundary.
pub fn clip(mut s: String, limit: usize) -> String {
    if s.len() > limit {
        let mut end = limit;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn check_str(field: &'static str, s: &str, limit: usize) -> Result<(), FieldError> {
    if s.len() > limit {
        return Err(FieldError::TooLong {
            field,
            len: s.len() as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

fn check_count(field: &'static str, count: usize, limit: usize) -> Result<(), FieldError> {
    if count > limit {
        return Err(FieldError::TooMany {
            field,
            count: count as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

/// A program fault as it crosses the wire. Mirrors `csx_ebpf::trap::TrapKind` (this
/// crate does not depend on the VM); the device converts one into the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireTrap {
    /// Index of the faulting instruction, in 8-byte instructions (`lddw` counts two).
    pub pc: u32,
    pub kind: WireTrapKind,
}

/// See `csx_ebpf::trap::TrapKind`; [`WireTrapKind::Other`] carries kinds newer than this
/// protocol as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireTrapKind {
    OutOfBounds {
        addr: u64,
        size: u32,
        write: bool,
    },
    ReadOnly {
        addr: u64,
        size: u32,
    },
    FuelExhausted {
        budget: u64,
    },
    CallDepthExceeded {
        depth_max: u32,
    },
    UnknownHelper {
        id: i64,
    },
    HelperArgument {
        helper: u32,
        arg: u8,
        addr: u64,
        len: u64,
    },
    HelperAbort {
        helper: u32,
        code: i64,
        message: String,
    },
    Other {
        message: String,
    },
}

impl WireTrap {
    fn validate(&self) -> Result<(), FieldError> {
        match &self.kind {
            WireTrapKind::HelperAbort { message, .. } | WireTrapKind::Other { message } => {
                check_str("trap message", message, MESSAGE_SIZE_MAX)
            }
            _ => Ok(()),
        }
    }

    /// A short snake_case name of the kind, for JSON output.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            WireTrapKind::OutOfBounds { .. } => "out_of_bounds",
            WireTrapKind::ReadOnly { .. } => "read_only",
            WireTrapKind::FuelExhausted { .. } => "fuel_exhausted",
            WireTrapKind::CallDepthExceeded { .. } => "call_depth_exceeded",
            WireTrapKind::UnknownHelper { .. } => "unknown_helper",
            WireTrapKind::HelperArgument { .. } => "helper_argument",
            WireTrapKind::HelperAbort { .. } => "helper_abort",
            WireTrapKind::Other { .. } => "other",
        }
    }
}

impl fmt::Display for WireTrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireTrapKind::OutOfBounds { addr, size, write } => write!(
                f,
                "out-of-bounds {} of {size} bytes at {addr:#x}",
                if *write { "write" } else { "read" }
            ),
            WireTrapKind::ReadOnly { addr, size } => {
                write!(f, "write of {size} bytes to read-only memory at {addr:#x}")
            }
            WireTrapKind::FuelExhausted { budget } => write!(f, "fuel exhausted (budget {budget})"),
            WireTrapKind::CallDepthExceeded { depth_max } => {
                write!(f, "call depth exceeded (limit is {depth_max} frames)")
            }
            WireTrapKind::UnknownHelper { id } => write!(f, "call to unknown helper {id}"),
            WireTrapKind::HelperArgument {
                helper,
                arg,
                addr,
                len,
            } => write!(
                f,
                "helper {helper} argument {arg}: {len} bytes at {addr:#x} are not accessible"
            ),
            WireTrapKind::HelperAbort {
                helper,
                code,
                message,
            } => {
                write!(f, "helper {helper} aborted with code {code}: {message}")
            }
            WireTrapKind::Other { message } => f.write_str(message),
        }
    }
}

impl fmt::Display for WireTrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at pc {}", self.kind, self.pc)
    }
}

/// The typed result a command returns besides its value.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Reply {
    #[default]
    None,
    /// Bytes read (Memory Read, File Read).
    Data(Vec<u8>),
    /// Identify.
    Device(DeviceInfo),
    /// List Functions.
    Functions(Vec<FunctionInfo>),
    /// List Programs.
    Programs(Vec<ProgramInfo>),
    /// File List; `truncated` when more files matched than one reply holds.
    Files {
        files: Vec<FileInfo>,
        truncated: bool,
    },
    /// File Stat.
    File(FileInfo),
    /// File Extents; `truncated` when the file has more extents than one reply holds.
    Extents {
        extents: Vec<ExtentInfo>,
        truncated: bool,
    },
    /// Execute.
    Execute(ExecuteInfo),
    /// Directory Read, Path Stat; `truncated` when more entries follow.
    Entries {
        entries: Vec<DirEntryInfo>,
        truncated: bool,
    },
    /// Memory Copy with resident sources: of the bytes copied, those served from the
    /// device's resident memory instead of its media.
    Copied { resident_bytes: u64 },
}

impl Reply {
    fn validate(&self) -> Result<(), FieldError> {
        match self {
            Reply::None => Ok(()),
            Reply::Data(d) => check_str_bytes("data", d.len(), PAYLOAD_SIZE_MAX),
            Reply::Device(info) => info.validate(),
            Reply::Functions(fs) => {
                check_count("functions", fs.len(), FUNCTIONS_MAX)?;
                fs.iter().try_for_each(FunctionInfo::validate)
            }
            Reply::Programs(ps) => {
                check_count("programs", ps.len(), PROGRAM_SLOTS_COUNT as usize)?;
                // A listing reports every program's generation or none (the wire
                // carries them as a separate reply kind).
                let with = ps.iter().any(|p| p.generation.is_some());
                for p in ps {
                    check_str("name", &p.name, NAME_SIZE_MAX)?;
                    if with && p.generation.is_none() {
                        return Err(FieldError::Empty {
                            field: "program generation in a listing with generations",
                        });
                    }
                    crate::command::check_generation(p.generation)?;
                }
                Ok(())
            }
            Reply::Files { files, .. } => {
                check_count("files", files.len(), FILE_LIST_ENTRIES_MAX)?;
                let mut bytes = 0usize;
                for f in files {
                    check_str("path", &f.path, PATH_SIZE_MAX)?;
                    bytes += f.path.len() + FileInfo::FIXED_SIZE;
                }
                check_str_bytes("file list", bytes, PAYLOAD_SIZE_MAX)
            }
            Reply::File(f) => check_str("path", &f.path, PATH_SIZE_MAX),
            Reply::Entries { entries, .. } => {
                check_count("entries", entries.len(), FILE_LIST_ENTRIES_MAX)?;
                let mut bytes = 0usize;
                for e in entries {
                    check_str("name", &e.name, PATH_SIZE_MAX)?;
                    bytes += e.name.len() + DirEntryInfo::FIXED_SIZE;
                }
                check_str_bytes("directory listing", bytes, PAYLOAD_SIZE_MAX)
            }
            Reply::Extents { extents, .. } => check_count("extents", extents.len(), EXTENTS_MAX),
            Reply::Copied { .. } => Ok(()),
            Reply::Execute(e) => {
                check_count("trace", e.trace.len(), TRACE_MESSAGES_MAX)?;
                check_count("work classes", e.work.len(), WORK_CLASSES_MAX)?;
                e.trace
                    .iter()
                    .try_for_each(|t| check_str("trace", t, TRACE_MESSAGE_SIZE_MAX))
            }
        }
    }
}

fn check_str_bytes(field: &'static str, len: usize, limit: usize) -> Result<(), FieldError> {
    if len > limit {
        return Err(FieldError::TooLong {
            field,
            len: len as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

/// What an execution reports besides r0.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ExecuteInfo {
    /// Fuel the run used (see `csx_ebpf::engine`).
    pub fuel_used: u64,
    /// Messages from `csx_trace`, in order.
    pub trace: Vec<String>,
    /// Instructions the run executed per class, in `csx_ebpf::count::InsnClass` order
    /// (alu64, alu32, mul, div, load, store, atomic, jump, jump32, call), counted by
    /// block with a trap counting its whole block; empty when the device did not count.
    /// The device's modelled compute time comes from these (`csx_device::perf`).
    pub work: Vec<u64>,
}

/// Identify: the device's geometry and limits (the Identify fields of TP4091's compute
/// namespace — MAXACT, MAXMEMRS, MAXMEMR, MAXPB — and the SLM's size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device software's version.
    pub version: String,
    /// Version of the program ABI (`struct csx_args`, entry registers, function ids).
    pub abi_version: u32,
    pub nvm_size_bytes: u64,
    pub slm_size_bytes: u64,
    pub slm_free_bytes: u64,
    pub state_size_bytes: u64,
    pub engines: u32,
    pub program_slots: u16,
    pub programs_active_max: u16,
    pub range_sets_max: u16,
    pub ranges_per_set_max: u16,
    pub params_size_max: u32,
    pub program_size_max: u32,
    pub load_chunk_size_max: u32,
    pub mem_io_size_max: u64,
    pub file_io_size_max: u64,
    pub queue_depth_max: u32,
    pub fuel_default: u64,
    /// Whether activation with [`EngineKind::Jit`] is available.
    pub jit: bool,
}

impl DeviceInfo {
    fn validate(&self) -> Result<(), FieldError> {
        check_str("version", &self.version, NAME_SIZE_MAX)
    }
}

/// How one argument register of a registered function is checked. Mirrors
/// `csx_ebpf::helper::ArgKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireArgKind {
    Scalar,
    /// Bytes the function reads; their count is argument `len_arg` (0-based).
    PtrIn {
        len_arg: u8,
    },
    /// Bytes the function writes; their count is argument `len_arg`.
    PtrOut {
        len_arg: u8,
    },
}

/// One registered device function, as the device publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionInfo {
    /// The immediate of `call imm`.
    pub id: FunctionId,
    /// The C name programs declare `extern`.
    pub name: String,
    /// r1.. in order, at most 5.
    pub args: Vec<WireArgKind>,
    pub version: u32,
    /// The C declaration, e.g. `long csx_trace(const char *msg, unsigned long len);`.
    pub c_decl: String,
    /// One line for `csx functions`.
    pub doc: String,
}

impl FunctionInfo {
    fn validate(&self) -> Result<(), FieldError> {
        check_str("name", &self.name, NAME_SIZE_MAX)?;
        check_count("args", self.args.len(), 5)?;
        check_str("c_decl", &self.c_decl, MESSAGE_SIZE_MAX)?;
        check_str("doc", &self.doc, MESSAGE_SIZE_MAX)
    }
}

/// A program slot's state (TP4091 Program Descriptor occupancy and Activated bits;
/// `Loading` is ours: a chunked load in progress).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramState {
    Empty,
    Loading,
    Loaded,
    Active,
}

/// One occupied program slot (TP4091 log page 82h entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramInfo {
    pub pind: ProgramIndex,
    pub state: ProgramState,
    pub ptype: ProgramType,
    /// The image's full size.
    pub size_bytes: u32,
    /// Bytes received so far (equal to `size_bytes` once loaded).
    pub loaded_bytes: u32,
    /// The entry function's name, or empty for raw bytecode.
    pub name: String,
    /// The engine, when active.
    pub engine: Option<EngineKind>,
    /// Executions since activation.
    pub executions: u64,
    /// The queue pair that loaded it and owns it: the program is unloaded when that
    /// pair goes. `None` for a persistent program (or one the device restored).
    pub owner: Option<ClientId>,
    /// The name a persistent program is kept under (`Op::PersistProgram`); `None` for a
    /// program that lives only as long as its owner.
    pub persistent: Option<String>,
    /// The program's generation: a number the device gives each program it loads and
    /// never gives another (it changes when the slot is unloaded and loaded again), so
    /// an Execute can name the program it means (`Op::Execute::generation`). Reported
    /// only by `Op::ListProgramsWithGenerations`; `None` from `Op::ListPrograms`.
    pub generation: Option<u64>,
}

/// A device file's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    pub path: String,
    pub size_bytes: u64,
    pub extent_count: u32,
}

impl FileInfo {
    /// Bytes of a file entry on the wire besides its path.
    pub const FIXED_SIZE: usize = 4 + 8 + 4;
}

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
}

/// One entry of a directory: its name (the last component), kind, size (0 for a
/// directory) and last change (a directory's creation; 0 when unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryInfo {
    pub name: String,
    pub kind: EntryKind,
    pub size_bytes: u64,
    pub modified_ns: u64,
}

impl DirEntryInfo {
    /// Bytes of an entry on the wire besides its name.
    pub const FIXED_SIZE: usize = 1 + 8 + 8 + 4;
}

/// One extent of a file: `len` bytes at `file_offset` live at `nvm_offset` in the
/// NVM namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentInfo {
    pub file_offset: u64,
    pub nvm_offset: u64,
    pub len: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("héllo".into(), 2), "h");
        assert_eq!(clip("abc".into(), 5), "abc");
    }

    #[test]
    fn detail_display() {
        let d = ErrorDetail::new("csx_file_read", crate::errno::CSX_ENOENT, "no file /x");
        assert_eq!(d.to_string(), "csx_file_read: no file /x (CSX_ENOENT)");
    }

    #[test]
    fn validate_bounds_lists() {
        let mut c = Completion::new(CommandId(1), Status::Success);
        c.reply = Reply::Execute(ExecuteInfo {
            fuel_used: 0,
            trace: vec![String::new(); TRACE_MESSAGES_MAX + 1],
            work: Vec::new(),
        });
        assert!(c.validate().is_err());
        c.reply = Reply::Execute(ExecuteInfo {
            fuel_used: 0,
            trace: Vec::new(),
            work: vec![0; WORK_CLASSES_MAX + 1],
        });
        assert!(c.validate().is_err());
    }
}
