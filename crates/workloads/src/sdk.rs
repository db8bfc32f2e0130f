//! The C SDK header `csx.h`: where it lives in the repository and how to regenerate it.
//!
//! The text itself is the program ABI's ([`csx_proto::abi::header`]); this module
//! applies it to the built-in device's function table.
//!
//! Invariant: the committed header equals [`builtin_header`] (checked by
//! `tests/it/sdk.rs`).

pub use csx_proto::abi::header::header;

/// The header's path inside the repository.
pub const HEADER_PATH: &str = "sdk/include/csx.h";

/// How to regenerate the committed header, for messages.
pub const REGENERATE: &str = "csx sdk header > sdk/include/csx.h \
     (or: cargo run -p csx-workloads --example gen-header > sdk/include/csx.h, \
     or: CSX_BLESS=1 cargo test -p csx-workloads --test it sdk::)";

/// The header for the built-in device's function table.
pub fn builtin_header() -> String {
    header(&csx_device::functions::function_infos())
}
