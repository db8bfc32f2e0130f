//! The in-process (embedded) transport: the device runs in the caller's process, on its
//! own worker threads, and commands pass to it by value.
//!
//! Commands and completions are protocol values, moved straight into the device's
//! bounded submission queue and out of its completion queue: no encoding, no copy of
//! the payload, no system call on the fast path (both sides poll briefly before they
//! sleep). [`InprocOptions::wire_check`] routes every command and completion through the
//! wire encoder and decoder instead, so the test suite can exercise the encoding that
//! the shm and tcp transports use without leaving the process.
//!
//! A process opens each state directory once: every [`crate::Device`] opened on the same
//! directory in one process shares one running device (the [`embedded`] registry), each
//! with its own queue pair, as separate hosts of one real device would. The device shuts
//! down cleanly (workers drained, shared state saved, file store flushed) when its last
//! queue pair closes.

mod client;
pub mod embedded;

pub use client::InprocTransport;
pub use csx_device::DeviceConfig;

/// Commands one embedded queue pair holds in flight unless asked otherwise. Deep enough
/// for every engine of a large machine to stay busy from one client.
pub const QUEUE_DEPTH_DEFAULT: u32 = 256;

/// How an embedded queue pair is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InprocOptions {
    /// Commands in flight at most (1..=`csx_proto::limits::QUEUE_DEPTH_MAX`).
    pub queue_depth: u32,
    /// Encode and decode every command and completion with `csx_proto::wire`.
    pub wire_check: bool,
}

impl Default for InprocOptions {
    fn default() -> Self {
        InprocOptions {
            queue_depth: QUEUE_DEPTH_DEFAULT,
            wire_check: false,
        }
    }
}

/// Whether `dir` holds an initialised device (`csx device init` ran there).
pub fn is_initialized(dir: &std::path::Path) -> bool {
    dir.join(csx_device::config::CONFIG_FILE_NAME).is_file()
}
