//! The host library's errors, one enum per boundary.
//!
//! * [`OpenError`]: a device URI could not be opened.
//! * [`TransportError`]: the queue pair itself failed (full, closed, broken).
//! * [`CallError`]: one command failed, on the host (refused by the protocol's limits
//!   before submission), in the transport, or on the device. Device failures are typed
//!   by their completion status, one variant per status, each carrying a
//!   [`DeviceFailure`] with the command's name and the device's own detail message.
//!
//! A trapping program is not a `CallError`: `Device::execute` returns the trap as data
//! in its `Execution` (program faults are values, not errors).

use std::fmt;
use std::io;

use csx_proto::command::FieldError;
use csx_proto::{CommandId, Completion, ErrorDetail, Status, WireError, WireTrap};

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error(
        "device uri {uri:?}: unknown scheme {scheme:?} (known: {})",
        crate::uri::SCHEMES
    )]
    UnknownScheme { uri: String, scheme: String },
    /// `array:DIR`: an array is opened by csx-array (`csx_array::open`), which sits
    /// above this crate; `reason` says why it could not be (here: that this opener
    /// does not open arrays).
    #[error("device uri {uri:?}: {reason}")]
    Array { uri: String, reason: String },
    #[error("device uri {uri:?}: the {scheme} transport is not available in this build")]
    TransportUnavailable { uri: String, scheme: &'static str },
    #[error("device uri {uri:?}: {reason}")]
    BadUri { uri: String, reason: &'static str },
    /// The embedded device refused to open or initialise (not initialised, locked by
    /// another process, corrupt state directory, ...).
    #[cfg(feature = "inproc")]
    #[error(transparent)]
    Embedded(#[from] csx_device::DeviceError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: std::path::PathBuf,
        source: io::Error,
    },
}

/// Why a queue pair failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    #[error("queue pair has {depth} commands in flight, its depth")]
    QueueFull { depth: u32 },
    #[error("the device is closed or shutting down")]
    Closed,
    #[error("the connection to the device is lost: {reason}")]
    Disconnected { reason: String },
    /// The device answered the handshake with a refusal: no queue pair left (the
    /// message names the limit), a bad token, an unsupported version or depth, or a
    /// device shutting down. `status` is the handshake's status name.
    #[error("the device refused the connection: {status}: {reason}")]
    Refused { status: String, reason: String },
    /// The device gave no sign of life for `waited_secs` (`CSX_TIMEOUT`): during the
    /// connect, or while commands were in flight. A stopped, hung or unreachable device.
    #[error("the device at {device} did not answer within {waited_secs} s ({during}); it may be stopped, hung or unreachable (CSX_TIMEOUT sets the wait)")]
    NoAnswer {
        device: String,
        waited_secs: u64,
        during: &'static str,
    },
    /// A setting (an environment variable) holds a value the transport cannot use.
    #[error("{name} is {value:?}: {reason}")]
    BadSetting {
        name: &'static str,
        value: String,
        reason: String,
    },
    #[error("closing the device failed: {message}")]
    CloseFailed { message: String },
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("{op}: {source}")]
    Io { op: &'static str, source: io::Error },
}

/// A command the device refused or failed: which command, the status, and the device's
/// detail (the component or registered function at fault and its message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFailure {
    /// The command's name (`mem-alloc`, `execute`, ...).
    pub op: &'static str,
    pub status: Status,
    pub detail: Option<ErrorDetail>,
    /// The trap, for a command that ran a program which faulted.
    pub trap: Option<WireTrap>,
}

impl fmt::Display for DeviceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.status)?;
        if let Some(trap) = &self.trap {
            write!(f, ": {trap}")?;
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

macro_rules! call_errors {
    ($( $(#[$doc:meta])* $variant:ident => $($status:ident)|+ ; )*) => {
        /// Why a command failed.
        #[derive(Debug, thiserror::Error)]
        #[non_exhaustive]
        pub enum CallError {
            /// The host refused the command before submitting it: a field is outside
            /// the protocol's limits (`csx_proto::limits`).
            #[error("{op}: refused before submission: {source}")]
            Invalid { op: &'static str, source: FieldError },
            #[error(transparent)]
            Transport(#[from] TransportError),
            /// Waiting for a command this client does not have in flight.
            #[error("{id} is not in flight on this client")]
            UnknownCommand { id: CommandId },
            /// The device answered with a reply of the wrong shape (a device bug).
            #[error("{op}: the device answered with an unexpected reply ({found}), expected {expected}")]
            UnexpectedReply { op: &'static str, expected: &'static str, found: String },
            $( $(#[$doc])* #[error("{0}")] $variant(Box<DeviceFailure>), )*
            /// A status this library does not know (a newer device).
            #[error("{0}")]
            Other(Box<DeviceFailure>),
        }

        impl CallError {
            /// The typed error for a failed completion of command `op`.
            pub fn from_completion(op: &'static str, c: Completion) -> CallError {
                debug_assert!(!c.status.is_success());
                let failure = Box::new(DeviceFailure { op, status: c.status, detail: c.detail, trap: c.trap });
                match failure.status {
                    $( $(Status::$status)|+ => CallError::$variant(failure), )*
                    _ => CallError::Other(failure),
                }
            }

            /// The device's failure, when the device refused or failed the command.
            pub fn failure(&self) -> Option<&DeviceFailure> {
                match self {
                    $( CallError::$variant(f) )|* | CallError::Other(f) => Some(f),
                    _ => None,
                }
            }
        }
    };
}

call_errors! {
    /// A field is malformed or an opcode unknown to the device.
    InvalidField => InvalidField | InvalidOpcode;
    /// The device failed through its own fault.
    Internal => Internal;
    /// The command was aborted: by [`crate::Client::abort`], because its queue pair
    /// closed, or because the device is shutting down (the detail says which).
    Aborted => Aborted;
    /// The execution ran past its time limit (the detail names the limit).
    TimeLimitExceeded => TimeLimitExceeded;
    /// The Execute or Unload named a program generation and the slot holds another
    /// program (unloaded and replaced meanwhile); nothing ran or was unloaded.
    ProgramChanged => ProgramChanged;
    /// A namespace the command names is not reachable.
    NamespaceNotReachable => NamespaceNotReachable;
    /// Device memory (SLM) or another resource is exhausted.
    InsufficientResources => InsufficientResources;
    /// The compute namespace lacks resources for the program.
    InsufficientProgramResources => InsufficientProgramResources;
    /// A memory handle is unknown or belongs to another client.
    InvalidMemoryHandle => InvalidMemoryNamespace;
    /// A window or range lies outside its allocation, is empty or too long.
    InvalidRangeSet => InvalidMemoryRangeSet;
    /// No range set has this id.
    UnknownRangeSet => InvalidMemoryRangeSetId;
    /// The program image is malformed, or the loader or verifier refused it.
    InvalidProgram => InvalidProgramData | InvalidProgramType;
    /// The program index is outside the slot table.
    InvalidProgramIndex => InvalidProgramIndex;
    /// Too many ranges in one set or execution.
    TooManyRanges => MaximumMemoryRangesExceeded;
    /// Too many range sets on the device.
    TooManyRangeSets => MaximumMemoryRangeSetsExceeded;
    /// Too many programs active at once.
    TooManyActivePrograms => MaximumProgramsActivated;
    /// Loaded programs would exceed the device's program bytes.
    ProgramBytesExceeded => MaximumProgramBytesExceeded;
    /// The memory is in use by another command in flight.
    MemoryInUse => MemoryRangeSetInUse;
    /// The slot holds no program.
    NoProgram => NoProgram;
    /// Two ranges of the command overlap.
    OverlappingRanges => OverlappingMemoryRanges;
    /// The program is loaded but not activated.
    ProgramNotActivated => ProgramNotActivated;
    /// The slot is occupied, or its program is running or active.
    ProgramInUse => ProgramInUse | ProgramIndexNotDownloadable;
    /// The program image is larger than a slot holds.
    ProgramTooBig => ProgramTooBig;
    /// A program trapped (only where a trap is not the command's result).
    Trap => Trap;
    /// No file at the path.
    NotFound => NotFound;
    /// A file exists at the path.
    FileExists => FileExists;
    /// The NVM namespace is full.
    NoSpace => NoSpace;
    /// An offset or length reaches outside its object.
    OutOfRange => OutOfRange;
    /// The device's storage failed.
    Io => IoError;
    /// The device's persistent data is corrupt.
    Corrupt => Corrupt;
    /// The device's queue pair is full.
    QueueFull => QueueFull;
    /// The directory is not empty.
    NotEmpty => NotEmpty;
}

impl CallError {
    /// The completion status, when the device failed the command.
    pub fn status(&self) -> Option<Status> {
        self.failure().map(|f| f.status)
    }

    /// The device's detail message, when it gave one.
    pub fn detail(&self) -> Option<&ErrorDetail> {
        self.failure().and_then(|f| f.detail.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_variants_with_detail() {
        let c = Completion::error(CommandId(3), Status::NotFound, "filestore", "no file /x");
        let e = CallError::from_completion("file-stat", c);
        assert!(matches!(e, CallError::NotFound(_)));
        assert_eq!(e.status(), Some(Status::NotFound));
        assert_eq!(
            e.to_string(),
            "file-stat: not found (0xc1): filestore: no file /x"
        );
        for &s in Status::ALL.iter().filter(|s| !s.is_success()) {
            let e = CallError::from_completion("x", Completion::new(CommandId(1), s));
            assert!(
                !matches!(e, CallError::Other(_)),
                "{s:?} has no typed variant"
            );
            assert_eq!(e.status(), Some(s));
        }
    }
}
