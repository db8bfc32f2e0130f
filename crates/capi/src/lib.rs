//! libcsx: the SNIA Computational Storage API (v1.x names, C) over csx devices.
//!
//! A C program includes `sdk/include/cs_api.h` and links `-lcsx` (this crate's cdylib or
//! staticlib). Device names are csx URIs (a state directory for an embedded device,
//! `shm://NAME`, `tcp://HOST:PORT`); everything goes through `csx-host`'s public API.
//!
//! * [`status`]: `CS_STATUS` values and the mapping of every csx error onto one.
//! * [`types`]: the `#[repr(C)]` structures.
//! * [`api`]: the exported functions of memory, requests, events and batches;
//!   [`manage`]: discovery, CSFs, properties; [`v05`]: the v0.5 forms (the FFI boundary:
//!   with [`mapping`], where the unsafe blocks of the crate are).
//! * [`mapping`]: host mappings of device memory.
//! * [`fixed`]: fixed CSF ids, reserved for a program's name.
//! * [`queue`]: asynchronous completion (a worker per device handle) and aborts.
//! * [`registry`]: the handle tables (handles are keys, never dereferenced).
//! * [`header`]: the text of `cs_api.h`, generated from the above.
//!
//! Invariant: no argument C can detect as bad (null pointer, unknown or freed handle,
//! length over a limit, value outside an enum) crashes the caller: it gets a status and
//! `csxGetLastError` a message naming the value and the limit.
#![allow(non_snake_case)]
#![warn(clippy::too_many_lines)]

pub mod api;
pub mod conformance;
pub mod fixed;
pub mod header;
pub mod manage;
pub mod mapping;
pub mod queue;
pub mod registry;
pub mod status;
pub mod types;
pub mod v05;
