//! Metal FS on csx: the device's file store as a file system.
//!
//! - [`core`]: [`MetalFs`], path operations over a [`csx_host::Device`] (the file system
//!   without FUSE; tests and tools call it directly).
//! - [`attrs`]: the permissions, owners and times the mount keeps in a file on the
//!   device.
//! - [`fuse`]: [`fuse::FuseFs`], the `fuser` file system over a `MetalFs` (inodes, handles,
//!   durability at `fsync` and `close`).
//! - [`mount`]: mounting in the foreground or on a thread, unmounting, mount checks.
//! - [`ops`]: the operator catalogue (Metal FS's operators: `sdk/ops/*.c`) and how a
//!   pipeline's stages name them and their parameters.
//! - [`pipe`]: running a pipeline of operators on the device, chunk by chunk through
//!   device memory (`csx pipe`).
//! - [`procstat`]: the fields of "/proc/PID/stat" the mount reads (state, parent, start).
//! - [`unlinked`]: files removed while the mount has them open, kept until their last
//!   close.
//! - [`shell`]: the mount's `.ops/` executables, their proxies and the mount's server that
//!   fuses shell pipes of operators into one device pipeline.
//!
//! The device is reached only through csx-host's public API, so a mount works the same on
//! an embedded device and on a daemon (`shm://`, `tcp://`).

#![warn(clippy::too_many_lines)]

pub mod attrs;
pub mod core;
pub mod fuse;
pub mod mount;
pub mod ops;
pub mod pipe;
pub mod procstat;
pub mod shell;
pub mod unlinked;

pub use crate::core::{Attr, Entry, FsError, MetalFs};
