//! csx-proto: the device protocol. Commands, completions, status codes, identifiers,
//! limits and the binary wire encoding.
//!
//! Only these types cross a transport. This crate depends on nothing of the device or
//! the VM: the device converts its own types (traps, function signatures) into the
//! wire mirrors defined here.

pub mod command;
pub mod completion;
pub mod ids;
pub mod limits;
pub mod status;
pub mod wire;

pub use command::{
    validate_dir, validate_path, Command, CopySource, EngineKind, FieldError, MemRange, Op,
    ProgramType, Windows, WriteMode,
};
pub use completion::{
    Completion, DeviceInfo, DirEntryInfo, EntryKind, ErrorDetail, ExecuteInfo, ExtentInfo,
    FileInfo, FunctionInfo, ProgramInfo, ProgramState, Reply, Timing, WireArgKind, WireTrap,
    WireTrapKind,
};
pub use ids::{ClientId, CommandId, FunctionId, MemHandle, ProgramIndex, RangeSetId};
pub use status::{errno, Status};
pub use wire::{
    decode_command, decode_command_header, decode_completion, encode_command, encode_completion,
    WireError,
};

/// Version of the program ABI: the entry registers, the layout of `struct csx_args`,
/// the region map and the registered function ids. Programs built for one version run
/// on every later device with the same number.
pub const ABI_VERSION: u32 = 1;
