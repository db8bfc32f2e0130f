//! λ-IO file offload on the host: run a λ (an eBPF program in λ-IO's calling convention)
//! over a device file's range, on the host or on the device, and the `auto` dispatcher
//! that chooses between them ([`dispatch`]).
//!
//! λ-IO's convention: window 0 (r1/r2) is the input, `args->windows[1]` the output
//! buffer (as large as the input unless asked otherwise), r0 the output length in bytes
//! or a negative `CSX_E*` code. The same object file runs on both sides
//! ([`program::Lambda`]); the host side runs it through the device's own execution
//! path (`csx_device::execute::run_on_windows`), so both sides see identical memory.
//!
//! ```no_run
//! use csx_lambda::{Lambda, LambdaArgs, LambdaIo, LambdaOptions, Mode};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = csx_host::Device::open("/var/lib/csx/dev0")?;
//! let io = LambdaIo::new(&dev, &LambdaOptions::default())?;
//! let stats = Lambda::load(&dev, "stats64", &std::fs::read("stats64.o")?, None)?;
//! let file = io.open("/data/numbers")?;
//! let args = LambdaArgs { output_size_bytes: Some(32), ..LambdaArgs::default() };
//! let out = file.read_lambda(0, 1 << 20, &stats, &args, Mode::Auto)?;
//! println!("{:?} ran on {:?}", out.output, out.ran);
//! # Ok(()) }
//! ```
//!
//! Consistency: a device-side read sees every write completed before it (the device's
//! media reads are direct and Linux writes back cached pages first); a λ-write flushes
//! and then drops its range from the host cache, so a later host-side read goes to the
//! media.
//!
//! Invariant: in `auto`, a profiled request's two outputs are compared and must be
//! equal; otherwise the request fails with [`LambdaError::SidesDisagree`].

#![warn(clippy::too_many_lines)]

pub mod account;
pub mod dispatch;
mod file;
pub mod local;
pub mod program;
mod sys;

pub use account::{makespan_ns, RunAccount};
pub use dispatch::{
    Choice, Counters, Decision, DeviceFloor, Direction, Dispatcher, Estimate, Key, Parallelism,
    Sample, Side,
};
pub use file::{
    LambdaFile, LambdaIo, LambdaOptions, LambdaOutput, Mode, Ran, SideCost, CACHE_BUDGET_DEFAULT,
    STAGING_SIZE_MIN,
};
pub use program::{Lambda, LambdaArgs};

use csx_host::session::SessionError;
use csx_host::CallError;

/// Why a λ request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LambdaError {
    /// The device refused or failed a command.
    #[error(transparent)]
    Device(#[from] CallError),
    /// The λ's object file does not load, verify or compile on the host.
    #[error("λ {lambda} does not load: {reason}")]
    Load { lambda: String, reason: String },
    /// The host side needs the device's image on this machine.
    #[error("host side unavailable for {uri}: {reason}")]
    NoLocalImage { uri: String, reason: String },
    /// An I/O on the local image failed.
    #[error("host image {op} failed: {source}")]
    LocalIo {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("range of {len} bytes at offset {offset} is outside {path} ({size_bytes} bytes)")]
    OutOfRange {
        path: String,
        offset: u64,
        len: u64,
        size_bytes: u64,
    },
    #[error("{path} has more extents than one reply carries")]
    TooManyExtents { path: String },
    /// The λ trapped.
    #[error("λ trapped on the {side}: {trap}")]
    Trap { side: Side, trap: String },
    /// The λ was stopped through [`LambdaIo::stop_flag`] (on the device, by an Abort).
    #[error("λ aborted on the {side}")]
    Aborted { side: Side },
    /// The λ returned a negative code.
    #[error("λ failed on the {side} with {name} ({code})")]
    Failed { side: Side, code: i64, name: String },
    #[error("λ returned {r0} on the {side}, more than its {window_bytes}-byte output window")]
    OutputTooLong {
        side: Side,
        r0: u64,
        window_bytes: u64,
    },
    /// A profiled request's host and device outputs differ (a bug in one side).
    #[error("host and device disagree on {path}: {host_bytes} against {device_bytes} output bytes or different contents")]
    SidesDisagree {
        path: String,
        host_bytes: u64,
        device_bytes: u64,
    },
    #[error("bad λ options: {0}")]
    Options(String),
    /// A session command failed other than by the device's refusal.
    #[error(transparent)]
    Session(SessionError),
}

impl From<SessionError> for LambdaError {
    /// A command's refusal is the device's error, as from a direct call.
    fn from(e: SessionError) -> LambdaError {
        match e {
            SessionError::Device { source, .. } => LambdaError::Device(source),
            other => LambdaError::Session(other),
        }
    }
}

impl LambdaError {
    fn local(op: &'static str) -> impl FnOnce(std::io::Error) -> LambdaError {
        move |source| LambdaError::LocalIo { op, source }
    }
}
