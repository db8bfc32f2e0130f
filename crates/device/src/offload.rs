//! What a host needs to run a device program itself, as λ-IO's host side
//! (`csx-lambda`) does: the device's own execution path and function table, so both
//! sides see identical memory and calls, and where a device keeps its image and its
//! configuration. Crates above the device use this surface and nothing else of its
//! internals.

pub use crate::config::DeviceConfig;
pub use crate::execute::{run_on_windows, wire_trap, RunCall, STATE_REGION};
pub use crate::functions::{function_table, CallContext};
pub use crate::perf::PerfModel;
pub use crate::runtime::NVM_FILE_NAME;
