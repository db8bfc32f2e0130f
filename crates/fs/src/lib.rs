//! Metal FS on csx: the device's file store as a file system.
//!
//! - [`core`]: [`MetalFs`], path operations over a [`csx_host::Device`] (the file system
//!   without FUSE; tests and tools call it directly).
//! - [`fuse`]: [`fuse::FuseFs`], the `fuser` file system over a `MetalFs` (inodes, handles,
//!   durability at `fsync` and `close`).
//! - [`mount`]: mounting in the foreground or on a thread, unmounting, mount checks.
//!
//! The device is reached only through csx-host's public API, so a mount works the same on
//! an embedded device and on a daemon (`shm://`, `tcp://`).

pub mod core;
pub mod fuse;
pub mod mount;

pub use crate::core::{Attr, Entry, FsError, MetalFs};
