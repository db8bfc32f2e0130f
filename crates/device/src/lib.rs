//! csx-device: the computational storage device runtime.
//!
//! A [`DeviceRuntime`] (one device, running: the device side of every transport; the
//! host's handle to a device is `csx_host::Device`) owns an NVM namespace (a backing
//! image with the [`filestore`] on top), a memory namespace ([`slm`]), a persistent
//! shared state region ([`state`]), a compute namespace of program slots ([`programs`]),
//! memory range sets ([`rangeset`]), the registered device functions programs call
//! ([`functions`]) and the worker threads that run commands ([`runtime`], [`execute`]).
//! Hosts talk to it through [`QueuePair`]s: submit [`csx_proto::Command`]s, reap
//! [`csx_proto::Completion`]s. The program ABI it implements is [`csx_proto::abi`]; every
//! error's completion status is chosen in [`status`].
//!
//! Invariant: no command, however malformed, panics the device or corrupts its file
//! store; every failure is a typed status in a completion.

#![warn(clippy::too_many_lines)]

mod buffer;
pub mod config;
pub mod dma;
pub mod execute;
pub mod filestore;
pub mod functions;
pub mod nvm;
pub mod offload;
pub mod peer;
pub mod perf;
pub mod programs;
pub mod queue;
pub mod rangeset;
pub mod resident;
pub mod runtime;
pub mod slm;
pub mod state;
pub mod status;

pub use config::DeviceConfig;
pub use dma::DmaBuffer;
pub use perf::{PerfError, PerfModel};
pub use runtime::{DeviceError, DeviceRuntime, QueuePair, SubmitError, INLINE_LEASH};
