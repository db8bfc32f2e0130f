//! Program faults. A trap is a value, never a signal or a panic: every engine returns
//! the same [`Trap`] for the same program, input and fuel.

use std::fmt;

/// Why a run stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrapKind {
    /// A load, store or atomic touched bytes outside every mapped region.
    OutOfBounds { addr: u64, size: u32, write: bool },
    /// A store or atomic to a region mapped read-only.
    ReadOnly { addr: u64, size: u32 },
    /// The run used more fuel than its budget.
    FuelExhausted { budget: u64 },
    /// A call would exceed the frame limit ([`crate::limits::CALL_DEPTH_MAX`]).
    CallDepthExceeded { depth_max: u32 },
    /// `callx` (or a call the verifier could not see) named a helper the function table
    /// does not have.
    UnknownHelper { id: i64 },
    /// A pointer argument of a helper does not cover the bytes its signature requires.
    HelperArgument {
        helper: u32,
        arg: u8,
        addr: u64,
        len: u64,
    },
    /// A helper asked to abort the run.
    HelperAbort {
        helper: u32,
        code: i64,
        message: String,
    },
    /// The run's stop flag was set (an abort or a deadline; `reason` is the embedder's
    /// code, see `crate::engine::StopFlag`).
    Stopped { reason: u32 },
}

/// A fault with the slot index (pc) of the instruction that raised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trap {
    pub pc: u32,
    pub kind: TrapKind,
}

impl fmt::Display for TrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrapKind::OutOfBounds { addr, size, write } => write!(
                f,
                "out-of-bounds {} of {size} bytes at {addr:#x}",
                if *write { "write" } else { "read" }
            ),
            TrapKind::ReadOnly { addr, size } => {
                write!(f, "write of {size} bytes to read-only memory at {addr:#x}")
            }
            TrapKind::FuelExhausted { budget } => write!(f, "fuel exhausted (budget {budget})"),
            TrapKind::CallDepthExceeded { depth_max } => {
                write!(f, "call depth exceeded (limit is {depth_max} frames)")
            }
            TrapKind::UnknownHelper { id } => write!(f, "call to unknown helper {id}"),
            TrapKind::HelperArgument {
                helper,
                arg,
                addr,
                len,
            } => write!(
                f,
                "helper {helper} argument {arg}: {len} bytes at {addr:#x} are not accessible"
            ),
            TrapKind::HelperAbort {
                helper,
                code,
                message,
            } => {
                write!(f, "helper {helper} aborted with code {code}: {message}")
            }
            TrapKind::Stopped { reason } => write!(f, "stopped from outside (reason {reason})"),
        }
    }
}

impl fmt::Display for Trap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at pc {}", self.kind, self.pc)
    }
}

impl std::error::Error for Trap {}
