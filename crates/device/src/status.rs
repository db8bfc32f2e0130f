//! Errors to completion statuses, in one place.

use csx_proto::{CommandId, Completion, Reply, Status};

use crate::filestore::FileStoreError;
use crate::nvm::NvmError;
use crate::programs::ProgramError;
use crate::slm::SlmError;

pub(crate) fn ok(value: u64) -> Completion {
    let mut c = Completion::new(CommandId(0), Status::Success);
    c.value = value;
    c
}

pub(crate) fn with_reply(reply: Reply) -> Completion {
    let mut c = ok(0);
    c.reply = reply;
    c
}

pub(crate) fn fail(status: Status, component: &str, message: impl Into<String>) -> Completion {
    Completion::error(CommandId(0), status, component, message)
}

pub(crate) fn slm_fail(e: &SlmError) -> Completion {
    fail(e.status(), "slm", e.to_string())
}

pub(crate) fn program_fail(e: &ProgramError) -> Completion {
    fail(e.status(), e.component(), e.to_string())
}

/// The completion status for a file store error.
pub fn file_status(e: &FileStoreError) -> Status {
    match e {
        FileStoreError::NotFound { .. } => Status::NotFound,
        FileStoreError::Exists { .. } => Status::FileExists,
        FileStoreError::DirNotEmpty { .. } => Status::NotEmpty,
        FileStoreError::InvalidPath { .. }
        | FileStoreError::NotADirectory { .. }
        | FileStoreError::NotADir { .. }
        | FileStoreError::RenameIntoItself { .. }
        | FileStoreError::IsADirectory { .. } => Status::InvalidField,
        FileStoreError::TooManyDirs { .. } => Status::NoSpace,
        FileStoreError::NoSpace { .. }
        | FileStoreError::TooManyExtents { .. }
        | FileStoreError::TooManyFiles { .. } => Status::NoSpace,
        FileStoreError::FileTooLarge { .. } => Status::OutOfRange,
        FileStoreError::ImageTruncated { .. }
        | FileStoreError::ImageSizeMismatch { .. }
        | FileStoreError::MetaCorrupt { .. }
        | FileStoreError::MetaMissing { .. } => Status::Corrupt,
        FileStoreError::Nvm(NvmError::OutOfRange { .. }) => Status::OutOfRange,
        _ => Status::IoError,
    }
}

pub(crate) fn file_fail(e: &FileStoreError) -> Completion {
    fail(file_status(e), "filestore", e.to_string())
}
