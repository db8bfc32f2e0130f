//! csx-host: the host library. Open a device, move data to and from it, load programs
//! and run them next to the data.
//!
//! ```no_run
//! use csx_host::{Device, ExecuteRequest};
//! use csx_proto::{EngineKind, ProgramType};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = Device::open("/var/lib/csx/dev0")?;           // an embedded device
//! dev.put_bytes("/data/numbers", &[1, 0, 0, 0, 0, 0, 0, 0])?;
//! let image = std::fs::read("sum.bpf.o")?;
//! let pind = dev.load_program_any_slot(ProgramType::Elf, &image, None)?;
//! dev.activate(pind, EngineKind::Jit)?;
//! let mem = dev.alloc(8)?;
//! dev.copy_file_to_mem("/data/numbers", 0, 8, mem, 0)?;   // on the device
//! let run = dev.execute(&ExecuteRequest::new(pind).window(mem, 0, 8))?;
//! println!("r0 = {}", run.r0);
//! # Ok(()) }
//! ```
//!
//! Layers, bottom up:
//! * [`transport::Transport`]: one queue pair to a device; moves `csx_proto` commands
//!   and completions. [`transport::inproc`] runs the device in this process.
//! * [`Client`]: the asynchronous core. Submit many commands, collect completions in any
//!   order, matched by `CommandId`; shared by threads.
//! * [`Device`]: the blocking convenience API, one method per host operation.
//! * [`Session`]: one piece of work's programs and device memory, released when it
//!   ends (also on error and panic), and a [`Meter`] of what its commands cost.
//!
//! The daemon that serves a device over shm and tcp is `csx-server`; λ-IO is
//! `csx-lambda`; both build on this crate.
//!
//! Invariant: only protocol types cross a transport; this crate reaches the device
//! runtime only through the `inproc` feature's transport.

#![warn(clippy::too_many_lines)]

pub mod client;
pub mod device;
pub mod error;
pub mod execute;
pub mod files;
pub mod session;
pub mod size;
pub mod transport;
pub mod uri;

pub use client::Client;
pub use device::{
    program_type_of, Device, Extents, FileList, OpenOptions, Progress, PIPELINE_DEPTH,
};
pub use error::{CallError, DeviceFailure, OpenError, TransportError};
pub use execute::{ExecuteRequest, Execution};
pub use files::FileTransferError;
pub use session::{Meter, Params, PendingCopy, Session, SessionError, Submitted};
pub use uri::DeviceUri;

/// The protocol crate, re-exported so users name the same types.
pub use csx_proto as proto;
