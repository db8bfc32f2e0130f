//! csx-proto: the device protocol (commands, completions, status codes, identifiers,
//! limits, the binary wire encoding) and the program ABI ([`abi`]).
//!
//! Only these types cross a transport. This crate depends on nothing of the device or
//! the VM: the device converts its own types (traps, function signatures) into the
//! wire mirrors defined here.

#![warn(clippy::too_many_lines)]

pub mod abi;
pub mod command;
pub mod completion;
pub mod crc;
pub mod ids;
pub mod limits;
pub mod status;
pub mod wire;

pub use abi::{errno, ABI_VERSION};
pub use command::{
    validate_dir, validate_path, validate_program_name, Command, CopySource, EngineKind,
    FieldError, MemRange, Op, ProgramType, Windows, WriteMode,
};
pub use completion::{
    Completion, DeviceInfo, DirEntryInfo, EntryKind, ErrorDetail, ExecuteInfo, ExtentInfo,
    FileInfo, FunctionInfo, ProgramInfo, ProgramState, Reply, Timing, WireArgKind, WireTrap,
    WireTrapKind,
};
pub use ids::{ClientId, CommandId, FunctionId, MemHandle, ProgramIndex, RangeSetId};
pub use status::Status;
pub use wire::{
    decode_command, decode_command_header, decode_completion, encode_command, encode_completion,
    WireError,
};
