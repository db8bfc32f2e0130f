//! csx-array: several csx devices as one (SCANCOMS/INSTANT).
//!
//! * [`Array`]: members (embedded devices in the array's directory, or devices served
//!   over `tcp://`/`shm://`), one catalog of files placed on one member or striped, and
//!   one tagged block address space ([`tag`]: disk in the upper 9 bits, 512-byte
//!   sectors) with a FIEMAP-like [`Array::map`].
//! * [`link`]: the modelled links and per-link byte accounting.
//! * [`locks`]: COSTA's block locks.
//! * [`d2d`]: device-to-device transfer by tagged block address or device memory.
//! * [`sort`]: the distributed merge sort (instant chain, instant tree, host baseline).
//! * [`lambda`]: λ-IO's λ-read over an array file, run by the members holding it.
//! * [`open`]: one opener for every device URI, `array:DIR` included.
//! * [`model`]: a sort's modelled time from its log, calibrated on the thesis.
//!
//! The crate sits on csx-host's public API and csx-proto; it never reaches device
//! internals.

#![warn(clippy::too_many_lines)]

pub mod array;
pub mod d2d;
pub mod desc;
pub mod error;
pub mod lambda;
pub mod link;
pub mod locks;
pub mod model;
pub mod open;
pub mod sort;
pub mod tag;

pub use array::{Array, FileMap, Member, Placement, TaggedExtent};
pub use desc::{ArrayDesc, FileEntry, Layout};
pub use error::ArrayError;
pub use link::{LinkCounters, LinkModel, LinkStats};
pub use locks::{BlockRange, LockGuard, LockTable};
pub use open::open;
pub use sort::{sort, SortEvent, SortMode, SortOptions, SortReport, Topology};
pub use tag::TaggedAddr;
