//! [`ArrayError`]: every way an array operation fails, each naming the bad value and
//! its limit, or the member that failed.

use std::io;
use std::path::PathBuf;

use csx_host::{CallError, OpenError};

/// Why an array operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArrayError {
    #[error("array {}: {reason}", dir.display())]
    BadDescription { dir: PathBuf, reason: String },
    #[error("array {} already exists (it has {file})", dir.display())]
    Exists { dir: PathBuf, file: &'static str },
    #[error("{} is not an array (no {file})", dir.display())]
    NotAnArray { dir: PathBuf, file: &'static str },
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("an array has {count} members, must be between 1 and {max}")]
    MemberCount { count: usize, max: usize },
    /// A λ (`crate::lambda`) failed to load or run on one member.
    #[error("array member {member} ({uri}): {op}{}: {source}", at_offset(*file_offset))]
    Lambda {
        member: u16,
        uri: String,
        op: &'static str,
        /// The failed request's offset in the array file.
        file_offset: Option<u64>,
        #[source]
        source: Box<csx_lambda::LambdaError>,
    },
    #[error("array member {member} ({uri}): cannot open: {source}")]
    MemberOpen {
        member: u16,
        uri: String,
        #[source]
        source: Box<OpenError>,
    },
    /// A command on one member failed: the member is named by its index and URI.
    #[error("array member {member} ({uri}): {op}: {source}")]
    Member {
        member: u16,
        uri: String,
        op: &'static str,
        #[source]
        source: Box<CallError>,
    },
    /// A step of a member's session failed (a command, or a program that trapped or
    /// returned an error code).
    #[error("array member {member} ({uri}): {source}")]
    Session {
        member: u16,
        uri: String,
        #[source]
        source: Box<csx_host::session::SessionError>,
    },
    #[error("no file {path:?} in the array")]
    NotFound { path: String },
    #[error("array path {path:?}: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error("tag {tag} names no member: the largest tag is {max}")]
    TagOutOfRange { tag: u64, max: u64 },
    #[error("tag {tag} names no member of this array, which has {members} (tags 0 to {})", members - 1)]
    NoSuchMember { tag: u16, members: u16 },
    #[error("sector {sector} does not fit the tagged address's sector field (largest {max})")]
    SectorOutOfRange { sector: u64, max: u64 },
    #[error("{what} {value} is not a multiple of {align}")]
    Unaligned {
        what: &'static str,
        value: u64,
        align: u64,
    },
    #[error("{what} is {value}, must be between {min} and {max}")]
    OutOfRange {
        what: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    /// A block range that does not exist on its member.
    #[error("range of {len} bytes at byte {offset} of member {member} ends past the member's nvm namespace of {limit} bytes")]
    RangeOutOfBounds {
        member: u16,
        offset: u64,
        len: u64,
        limit: u64,
    },
    #[error("cannot {op} local file {}: {source}", path.display())]
    Local {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{path:?} is {size} bytes, not a whole number of {width}-byte keys")]
    NotKeys { path: String, size: u64, width: u64 },
    #[error("lock owner {owner} holds no locks")]
    NotLocked { owner: u64 },
    /// Stopped on request (Ctrl-C); `members`: those whose runs in flight were aborted
    /// (the others had none running, or stopped before their next request).
    #[error("{what} aborted: runs in flight on members {members:?} were aborted")]
    Aborted {
        what: &'static str,
        members: Vec<u16>,
    },
    #[error("{0}")]
    Other(String),
}

impl ArrayError {
    /// The member a failure is about, if it is about one.
    pub fn member(&self) -> Option<u16> {
        match self {
            ArrayError::MemberOpen { member, .. }
            | ArrayError::Member { member, .. }
            | ArrayError::Session { member, .. }
            | ArrayError::Lambda { member, .. } => Some(*member),
            _ => None,
        }
    }
}

fn at_offset(file_offset: Option<u64>) -> String {
    file_offset.map_or(String::new(), |o| format!(" (request at file offset {o})"))
}
