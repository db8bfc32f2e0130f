//! The file store's error type: one enum for every operation, each variant naming the
//! path, value and limit involved.

use std::io;
use std::path::PathBuf;

use super::path::PathError;
use crate::nvm::NvmError;

/// Errors of the file store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileStoreError {
    /// The path is not a valid device path (shown escaped and shortened).
    #[error("invalid path \"{path}\": {source}")]
    InvalidPath {
        path: String,
        #[source]
        source: PathError,
    },
    /// No file has this path.
    #[error("no such file: {path}")]
    NotFound { path: String },
    /// A proper prefix of the path is a file, so the path cannot name a file below it.
    #[error("cannot create {path}: {file} is a file, not a directory")]
    NotADirectory { path: String, file: String },
    /// The path is a directory: files exist below it.
    #[error("{path} is a directory")]
    IsADirectory { path: String },
    /// Something already exists at the path (`mkdir`).
    #[error("{path} already exists")]
    Exists { path: String },
    /// The path is a file where a directory is needed (`rmdir`, listing, rename of a
    /// directory over a file).
    #[error("{path} is a file, not a directory")]
    NotADir { path: String },
    /// The directory still has entries (`rmdir`, rename over a directory).
    #[error("directory {path} is not empty")]
    DirNotEmpty { path: String },
    /// A directory cannot be moved below itself.
    #[error("cannot move directory {from} into itself ({to})")]
    RenameIntoItself { from: String, to: String },
    /// The store already holds [`super::DIRS_MAX`] explicit directories.
    #[error("cannot make directory {path}: the store holds {count} directories, limit is {limit}")]
    TooManyDirs {
        path: String,
        count: usize,
        limit: usize,
    },
    /// The namespace has too few free blocks; nothing was changed.
    #[error("no space for {path}: {needed_bytes} bytes needed, {free_bytes} free")]
    NoSpace {
        path: String,
        needed_bytes: u64,
        free_bytes: u64,
    },
    /// The operation would make the file larger than [`super::FILE_SIZE_MAX`].
    #[error("{path} would be {size_bytes} bytes, limit is {limit}")]
    FileTooLarge {
        path: String,
        size_bytes: u128,
        limit: u64,
    },
    /// The operation would split the file into more than
    /// [`super::EXTENTS_PER_FILE_MAX`] extents; nothing was changed.
    #[error("{path} would have {count} extents, limit is {limit}")]
    TooManyExtents {
        path: String,
        count: usize,
        limit: usize,
    },
    /// The store already holds [`super::FILES_MAX`] files.
    #[error("cannot create {path}: the store holds {count} files, limit is {limit}")]
    TooManyFiles {
        path: String,
        count: usize,
        limit: usize,
    },
    /// A block of a file does not match its checksum: its bytes changed on the media
    /// since the store wrote them. Nothing of the read is returned.
    #[error("{path}: block {block} (file bytes {}..{}, namespace offset {nvm_offset}) fails its checksum: stored crc32c {expected:#010x}, the block's bytes give {actual:#010x}; the data on the media is corrupt", block * crate::nvm::BLOCK_SIZE, (block + 1) * crate::nvm::BLOCK_SIZE)]
    Checksum {
        path: String,
        block: u64,
        nvm_offset: u64,
        expected: u32,
        actual: u32,
    },
    /// The namespace failed.
    #[error(transparent)]
    Nvm(#[from] NvmError),
    /// The image is smaller than the namespace the metadata describes.
    #[error("nvm image {} is {size_bytes} bytes, its metadata describes {expected_bytes}: the image is truncated", path.display())]
    ImageTruncated {
        path: PathBuf,
        size_bytes: u64,
        expected_bytes: u64,
    },
    /// The image is larger than the namespace the metadata describes (another image?).
    #[error("nvm image {} is {size_bytes} bytes, its metadata describes {expected_bytes}", path.display())]
    ImageSizeMismatch {
        path: PathBuf,
        size_bytes: u64,
        expected_bytes: u64,
    },
    /// [`super::FileStore::open`] found no metadata file.
    #[error("file store metadata {} is missing", path.display())]
    MetaMissing { path: PathBuf },
    /// [`super::FileStore::create`] found a metadata file already.
    #[error("file store metadata {} already exists", path.display())]
    MetaExists { path: PathBuf },
    /// Another handle (in this or another process) has the metadata open.
    #[error("file store metadata {} is in use by another handle", path.display())]
    MetaInUse { path: PathBuf },
    /// The metadata file is not a valid store, or contradicts itself or the image.
    #[error("file store metadata {} is corrupt: {reason}", path.display())]
    MetaCorrupt { path: PathBuf, reason: String },
    /// The metadata store failed.
    #[error("file store metadata {} failed: {source}", path.display())]
    Meta {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    /// The state directory could not be prepared.
    #[error("cannot {op} {}: {source}", path.display())]
    StateDir {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// An earlier sync or commit failed, so what is durable is unknown; the store refuses
    /// changes until it is reopened (which returns it to its last durable state).
    #[error("file store is unusable after an earlier failure ({reason}); reopen it")]
    Poisoned { reason: String },
}
