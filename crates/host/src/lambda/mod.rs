//! λ-IO file offload on the host: run a λ (an eBPF program in λ-IO's calling convention)
//! over a device file's range, on the host or on the device, and the `auto` dispatcher
//! that chooses between them ([`dispatch`]).

pub mod dispatch;

pub use dispatch::{Choice, Counters, Decision, Direction, Dispatcher, Key, Sample, Side};
