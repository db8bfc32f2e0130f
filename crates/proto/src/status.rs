//! Completion status codes. (The negative codes registered functions return to programs
//! are part of the program ABI: [`crate::abi::errno`].)
//!
//! Status values 88h–9Bh are the command-specific status codes of the NVMe
//! Computational Programs and Subsystem Local Memory command sets (NVMe Base 2.3,
//! Fig. 104), with their meanings. 00h–0Fh follow NVMe's generic command status.
//! C0h and above are ours, in the range NVMe leaves to vendors.
//! Invariant: a code, once published, keeps its number and meaning.

use std::fmt;

macro_rules! statuses {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, $text:literal; )*) => {
        /// How a command ended.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Status {
            $( $(#[$doc])* $name, )*
        }

        impl Status {
            /// Every status, in code order.
            pub const ALL: &'static [Status] = &[$(Status::$name,)*];

            /// The status code carried on the wire.
            pub const fn code(self) -> u8 {
                match self { $(Status::$name => $code,)* }
            }

            /// The status with this code, if there is one.
            pub const fn from_code(code: u8) -> Option<Status> {
                match code { $($code => Some(Status::$name),)* _ => None }
            }

            /// A short lowercase description.
            pub const fn text(self) -> &'static str {
                match self { $(Status::$name => $text,)* }
            }

            /// The variant's name, for JSON output and logs.
            pub const fn name(self) -> &'static str {
                match self { $(Status::$name => stringify!($name),)* }
            }
        }
    };
}

statuses! {
    /// The command did what it asked.
    Success = 0x00, "success";
    /// The opcode is not one this device knows.
    InvalidOpcode = 0x01, "invalid opcode";
    /// A field is malformed or out of its documented range.
    InvalidField = 0x02, "invalid field in command";
    /// The device failed in a way that is its own fault.
    Internal = 0x06, "internal device error";
    /// The command was aborted (NVMe's Command Abort Requested): by an Abort command,
    /// because its queue pair closed, or because the device is shutting down; the
    /// detail says which.
    Aborted = 0x07, "command aborted";
    /// A namespace named by the command is not reachable from the compute namespace.
    NamespaceNotReachable = 0x88, "namespace not reachable";
    /// The device lacks memory or another resource for the command (full SLM).
    InsufficientResources = 0x89, "insufficient resources";
    /// The compute namespace lacks resources to load or activate the program.
    InsufficientProgramResources = 0x8A, "insufficient program resources";
    /// A memory handle is unknown or belongs to another client.
    InvalidMemoryNamespace = 0x8B, "invalid memory namespace or handle";
    /// A memory range set (or inline range list) is invalid: a range lies outside its
    /// allocation, is empty, or is too long for a window.
    InvalidMemoryRangeSet = 0x8C, "invalid memory range set";
    /// No memory range set has this RSID.
    InvalidMemoryRangeSetId = 0x8D, "invalid memory range set identifier";
    /// The program image is malformed or the verifier refused it.
    InvalidProgramData = 0x8E, "invalid program data";
    /// The PIND is outside the slot table.
    InvalidProgramIndex = 0x8F, "invalid program index";
    /// The program type is not one the device accepts.
    InvalidProgramType = 0x90, "invalid program type";
    /// More ranges than a set may hold.
    MaximumMemoryRangesExceeded = 0x91, "maximum memory ranges exceeded";
    /// More memory range sets than the device may hold.
    MaximumMemoryRangeSetsExceeded = 0x92, "maximum memory range sets exceeded";
    /// Activating would exceed the number of programs active at once.
    MaximumProgramsActivated = 0x93, "maximum programs activated";
    /// Loading would exceed the bytes all loaded programs may take.
    MaximumProgramBytesExceeded = 0x94, "maximum program bytes exceeded";
    /// The memory (range set, allocation or window) is in use by a command in flight.
    MemoryRangeSetInUse = 0x95, "memory range set in use";
    /// The slot holds no program.
    NoProgram = 0x96, "no program";
    /// Two ranges of the command overlap.
    OverlappingMemoryRanges = 0x97, "overlapping memory ranges";
    /// The program is loaded but not activated.
    ProgramNotActivated = 0x98, "program not activated";
    /// The slot is occupied, or its program is running or active.
    ProgramInUse = 0x99, "program in use";
    /// The slot holds a device-defined program and cannot be loaded.
    ProgramIndexNotDownloadable = 0x9A, "program index not downloadable";
    /// The program is larger than a slot may hold.
    ProgramTooBig = 0x9B, "program too big";
    /// The program trapped; the completion carries the trap.
    Trap = 0xC0, "program trapped";
    /// No file at the path.
    NotFound = 0xC1, "not found";
    /// A file already exists at the path.
    FileExists = 0xC2, "file exists";
    /// The NVM namespace has no room for the data.
    NoSpace = 0xC3, "no space left on the namespace";
    /// An offset or length reaches outside its object (allocation, file, namespace).
    OutOfRange = 0xC4, "offset or length out of range";
    /// Reading or writing the backing storage failed.
    IoError = 0xC5, "storage i/o error";
    /// The device's persistent data failed a consistency check.
    Corrupt = 0xC6, "corrupt device data";
    /// The queue pair already has its maximum of commands in flight.
    QueueFull = 0xC7, "queue full";
    /// The directory still has entries.
    NotEmpty = 0xC8, "directory not empty";
    /// The execution ran past its time limit and was stopped; the detail names the limit.
    TimeLimitExceeded = 0xC9, "execution time limit exceeded";
    /// The Execute or Unload named a program generation and the slot holds another program (it
    /// was unloaded and a different one loaded meanwhile); nothing ran or was unloaded.
    ProgramChanged = 0xCA, "program changed";
}

impl Status {
    /// Whether the command succeeded.
    pub const fn is_success(self) -> bool {
        matches!(self, Status::Success)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#04x})", self.text(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &s in Status::ALL {
            assert!(seen.insert(s.code()), "duplicate code {:#x}", s.code());
            assert_eq!(Status::from_code(s.code()), Some(s));
        }
        assert_eq!(Status::from_code(0xff), None);
    }

    #[test]
    fn tp4091_codes() {
        assert_eq!(Status::InvalidProgramIndex.code(), 0x8F);
        assert_eq!(Status::ProgramNotActivated.code(), 0x98);
        assert_eq!(Status::ProgramInUse.code(), 0x99);
        assert_eq!(Status::MaximumProgramsActivated.code(), 0x93);
        assert_eq!(Status::NoProgram.code(), 0x96);
        assert_eq!(Status::InvalidProgramData.code(), 0x8E);
        assert_eq!(Status::ProgramTooBig.code(), 0x9B);
        assert_eq!(Status::OverlappingMemoryRanges.code(), 0x97);
        assert_eq!(Status::MaximumMemoryRangesExceeded.code(), 0x91);
        assert_eq!(Status::InsufficientResources.code(), 0x89);
        assert_eq!(Status::ProgramTooBig.to_string(), "program too big (0x9b)");
    }
}
