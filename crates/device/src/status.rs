//! Errors to completion statuses, in one place and one style.
//!
//! Every error a command can end with implements [`ToStatus`]: the status it completes
//! with (TP4091's codes where they apply, NVMe's generic ones, then ours; see
//! `csx_proto::status`) and the component the completion's error detail names. A handler
//! ends a failed command with [`fail_with`]. The one status that depends on where an
//! error happens, not only on the error (memory outside its allocation, met while
//! resolving windows, is a bad range set), is chosen here too ([`window_status`]). A file
//! store error's negative `CSX_E*` code for programs sits beside its status
//! ([`file_errno`]), so the two cannot drift apart.

use std::fmt::Display;

use csx_proto::abi::errno::*;
use csx_proto::{CommandId, Completion, Reply, Status};

use crate::filestore::{FileStoreError, PathError};
use crate::nvm::NvmError;
use crate::programs::ProgramError;
use crate::rangeset::RangeSetError;
use crate::slm::SlmError;
use crate::state::StateError;

/// An error that ends a command: its completion status and the refusing component.
pub trait ToStatus: Display {
    /// The completion status.
    fn status(&self) -> Status;
    /// The component named in the completion's error detail.
    fn component(&self) -> &'static str;
    /// The `CSX_E*` code in the completion's error detail (0: none finer than the status).
    fn code(&self) -> i64 {
        0
    }
}

/// A successful completion with `value`.
pub(crate) fn ok(value: u64) -> Completion {
    let mut c = Completion::new(CommandId(0), Status::Success);
    c.value = value;
    c
}

/// A successful completion carrying `reply`.
pub(crate) fn with_reply(reply: Reply) -> Completion {
    let mut c = ok(0);
    c.reply = reply;
    c
}

/// A failed completion. Prefer [`fail_with`]; this is for refusals that are not an
/// error value (a file that exists, a short read).
pub(crate) fn fail(status: Status, component: &str, message: impl Into<String>) -> Completion {
    Completion::error(CommandId(0), status, component, message)
}

/// The failed completion of `e`.
pub(crate) fn fail_with(e: &dyn ToStatus) -> Completion {
    with_code(fail(e.status(), e.component(), e.to_string()), e.code())
}

/// `c` with `code` in its error detail.
fn with_code(mut c: Completion, code: i64) -> Completion {
    if let Some(d) = &mut c.detail {
        d.code = code;
    }
    c
}

/// The failed completion of `e`, its message prefixed by `context` (which part of the
/// command failed).
pub(crate) fn fail_with_context(e: &dyn ToStatus, context: &str) -> Completion {
    with_code(
        fail(e.status(), e.component(), format!("{context}: {e}")),
        e.code(),
    )
}

/// The status of a memory error met while resolving an execution's windows or a range
/// set's ranges: a range outside its allocation makes the set invalid (8Ch); anything
/// else is the memory error's own status.
pub fn window_status(e: &SlmError) -> Status {
    match e {
        SlmError::OutOfRange { .. } => Status::InvalidMemoryRangeSet,
        other => other.status(),
    }
}

impl ToStatus for SlmError {
    fn status(&self) -> Status {
        match self {
            SlmError::NoMemory { .. } | SlmError::TooLarge { .. } => Status::InsufficientResources,
            SlmError::UnknownHandle { .. } | SlmError::ClientGone => Status::InvalidMemoryNamespace,
            SlmError::OutOfRange { .. } => Status::OutOfRange,
            SlmError::InUse { .. } => Status::MemoryRangeSetInUse,
            SlmError::Overlap { .. } => Status::OverlappingMemoryRanges,
        }
    }

    fn component(&self) -> &'static str {
        "slm"
    }
}

impl ToStatus for RangeSetError {
    fn status(&self) -> Status {
        match self {
            RangeSetError::TooManySets { .. } => Status::MaximumMemoryRangeSetsExceeded,
            RangeSetError::TooManyRanges { .. } => Status::MaximumMemoryRangesExceeded,
            RangeSetError::BadLength { .. } => Status::InvalidMemoryRangeSet,
            RangeSetError::Memory { source, .. } => window_status(source),
            RangeSetError::Overlap { .. } => Status::OverlappingMemoryRanges,
            RangeSetError::Unknown { .. } => Status::InvalidMemoryRangeSetId,
            RangeSetError::InUse { .. } => Status::MemoryRangeSetInUse,
        }
    }

    fn component(&self) -> &'static str {
        "rangeset"
    }
}

impl ToStatus for ProgramError {
    fn status(&self) -> Status {
        match self {
            ProgramError::InvalidIndex { .. } => Status::InvalidProgramIndex,
            ProgramError::NoProgram { .. } => Status::NoProgram,
            ProgramError::NotActivated { .. } => Status::ProgramNotActivated,
            ProgramError::InUse { .. }
            | ProgramError::NameTaken { .. }
            | ProgramError::NotOwner { .. } => Status::ProgramInUse,
            ProgramError::TooManyActive { .. } => Status::MaximumProgramsActivated,
            ProgramError::BytesExceeded { .. } => Status::MaximumProgramBytesExceeded,
            ProgramError::TooBig { .. } => Status::ProgramTooBig,
            ProgramError::BadChunk { .. } => Status::InvalidField,
            ProgramError::Load { .. } | ProgramError::Verify { .. } => Status::InvalidProgramData,
            ProgramError::Jit { .. } => Status::InsufficientProgramResources,
            ProgramError::Persist { .. } => Status::IoError,
            ProgramError::Changed { .. } => Status::ProgramChanged,
        }
    }

    fn component(&self) -> &'static str {
        match self {
            ProgramError::Load { .. } => "loader",
            ProgramError::Verify { .. } => "verifier",
            ProgramError::Jit { .. } => "jit",
            _ => "programs",
        }
    }
}

impl ToStatus for StateError {
    fn status(&self) -> Status {
        match self {
            StateError::OutOfRange { .. } => Status::OutOfRange,
            StateError::SizeMismatch { .. } => Status::Corrupt,
            StateError::Io { .. } => Status::IoError,
        }
    }

    fn component(&self) -> &'static str {
        "state"
    }
}

impl ToStatus for NvmError {
    fn status(&self) -> Status {
        match self {
            NvmError::OutOfRange { .. } => Status::OutOfRange,
            _ => Status::IoError,
        }
    }

    fn component(&self) -> &'static str {
        "nvm"
    }
}

/// A file store error's completion status and its `CSX_E*` code for a program.
fn file_outcome(e: &FileStoreError) -> (Status, i64) {
    match e {
        FileStoreError::NotFound { .. } => (Status::NotFound, CSX_ENOENT),
        FileStoreError::Exists { .. } => (Status::FileExists, CSX_EEXIST),
        FileStoreError::DirNotEmpty { .. } => (Status::NotEmpty, CSX_EBUSY),
        FileStoreError::InvalidPath { .. }
        | FileStoreError::NotADirectory { .. }
        | FileStoreError::NotADir { .. }
        | FileStoreError::RenameIntoItself { .. }
        | FileStoreError::IsADirectory { .. } => (Status::InvalidField, CSX_EINVAL),
        FileStoreError::TooManyDirs { .. } => (Status::NoSpace, CSX_ENOSPC),
        FileStoreError::NoSpace { .. }
        | FileStoreError::TooManyExtents { .. }
        | FileStoreError::TooManyFiles { .. } => (Status::NoSpace, CSX_ENOSPC),
        FileStoreError::FileTooLarge { .. } => (Status::OutOfRange, CSX_EFBIG),
        FileStoreError::ImageTruncated { .. }
        | FileStoreError::ImageSizeMismatch { .. }
        | FileStoreError::MetaCorrupt { .. }
        | FileStoreError::MetaMissing { .. } => (Status::Corrupt, CSX_EBADMSG),
        FileStoreError::Checksum { .. } => (Status::Corrupt, CSX_EIO),
        FileStoreError::Nvm(NvmError::OutOfRange { .. }) => (Status::OutOfRange, CSX_EIO),
        _ => (Status::IoError, CSX_EIO),
    }
}

/// The negative code a registered function returns to a program for a file store error.
pub fn file_errno(e: &FileStoreError) -> i64 {
    file_outcome(e).1
}

/// The code in a failed file command's error detail: [`file_errno`], finer where one
/// status covers several cases (a host tells "is a directory" from "not a directory"
/// by it, never by the message). Programs keep seeing [`file_errno`]: ABI version 1's
/// functions return what they always returned.
pub fn file_detail_code(e: &FileStoreError) -> i64 {
    match e {
        FileStoreError::InvalidPath {
            source: PathError::TooLong { .. } | PathError::NameTooLong { .. },
            ..
        } => CSX_ENAMETOOLONG,
        FileStoreError::NotADirectory { .. } | FileStoreError::NotADir { .. } => CSX_ENOTDIR,
        FileStoreError::IsADirectory { .. } => CSX_EISDIR,
        other => file_errno(other),
    }
}

impl ToStatus for FileStoreError {
    fn status(&self) -> Status {
        file_outcome(self).0
    }

    fn component(&self) -> &'static str {
        "filestore"
    }

    fn code(&self) -> i64 {
        file_detail_code(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_proto::MemHandle;

    #[test]
    fn window_errors_outside_an_allocation_are_bad_range_sets() {
        let out = SlmError::OutOfRange {
            handle: MemHandle(1),
            offset: 8,
            len: 8,
            size_bytes: 8,
        };
        assert_eq!(out.status(), Status::OutOfRange);
        assert_eq!(window_status(&out), Status::InvalidMemoryRangeSet);
        let memory = RangeSetError::Memory {
            index: 0,
            source: out,
        };
        assert_eq!(memory.status(), Status::InvalidMemoryRangeSet);
        assert_eq!(memory.component(), "rangeset");
    }

    #[test]
    fn file_errors_agree_between_status_and_errno() {
        let cases = [
            (
                FileStoreError::NotFound { path: "/x".into() },
                Status::NotFound,
                CSX_ENOENT,
            ),
            (
                FileStoreError::IsADirectory { path: "/d".into() },
                Status::InvalidField,
                CSX_EINVAL,
            ),
            (
                FileStoreError::MetaMissing { path: "/m".into() },
                Status::Corrupt,
                CSX_EBADMSG,
            ),
            (
                FileStoreError::Poisoned {
                    reason: "sync".into(),
                },
                Status::IoError,
                CSX_EIO,
            ),
        ];
        for (e, status, code) in cases {
            assert_eq!((e.status(), file_errno(&e)), (status, code), "{e}");
            assert_eq!(e.component(), "filestore");
        }
        // The detail's code tells apart what one status folds together.
        let dir = FileStoreError::IsADirectory { path: "/d".into() };
        assert_eq!(dir.code(), CSX_EISDIR);
        let detail = fail_with(&dir).detail.unwrap();
        assert_eq!(
            (detail.function.as_str(), detail.code),
            ("filestore", CSX_EISDIR)
        );
        let not_dir = FileStoreError::NotADir { path: "/f".into() };
        assert_eq!(not_dir.code(), CSX_ENOTDIR);
        let gone = FileStoreError::NotFound { path: "/x".into() };
        assert_eq!(gone.code(), CSX_ENOENT);
    }
}
