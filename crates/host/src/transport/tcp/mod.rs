//! The TCP transport (`tcp://HOST:PORT`): the fabrics path, modelled on NVMe/TCP.
//!
//! One TCP connection is one queue pair. The host opens it with an ICReq PDU that asks
//! for a queue depth (and carries the shared secret when the server wants one); the
//! server answers with an ICResp that grants a depth, the queue id and the most data one
//! data PDU carries. From then on commands travel in command capsules, their bulk data
//! (a Memory or File Write's bytes) in host-to-controller data PDUs right behind them;
//! completions come back in response capsules, a read's bytes in controller-to-host
//! data PDUs ahead of its capsule. Any number of commands up to the depth are in flight;
//! completions return in any order. Byte tables: `docs/design/tcp.md`.
//!
//! | file          | owns                                                          |
//! |---------------|---------------------------------------------------------------|
//! | `framing.rs`  | PDU layouts, their encoding, the incremental PDU reader       |
//! | `client.rs`   | [`TcpTransport`], the host side                               |
//! | `server.rs`   | one connection of `csx device serve` (feature `server`)       |
//! | `metrics.rs`  | counters of PDUs and bytes                                    |
//!
//! Invariants: every length read from the socket is checked against a limit below
//! before anything is allocated for it; a peer that breaks the framing gets a
//! termination PDU and a closed connection, a command that is framed correctly but
//! invalid gets an error completion.

mod client;
pub mod framing;
pub mod metrics;
#[cfg(feature = "server")]
pub(crate) mod server;

use std::time::Duration;

use csx_proto::limits::{
    FILE_IO_SIZE_MAX, FRAME_SIZE_MAX, LOAD_CHUNK_SIZE_MAX, MEM_IO_SIZE_MAX, NAME_SIZE_MAX,
    PATH_SIZE_MAX,
};

pub use client::{read_token_file, TcpOptions, TcpTransport, TOKEN_FILE_ENV};

/// Version of the PDU format (ICReq/ICResp PFV). A server refuses other versions.
pub const PDU_FORMAT_VERSION: u16 = 1;

/// Bytes of a shared-secret token. Long enough for any generated secret (a 256-bit key
/// in hex is 64 bytes), short enough that the connect request stays tiny.
pub const TOKEN_SIZE_MAX: usize = 256;

/// Bytes of bulk data in one H2C or C2H data PDU. Big enough that the per-PDU cost
/// vanishes against the copy, small enough that a receiver's PDU buffer stays modest
/// and a 16 MiB transfer interleaves with other connections' traffic.
pub const DATA_PDU_SIZE_MAX: usize = 1 << 20;

/// Bytes of send and receive buffer each side asks for on its socket: room for several
/// whole data PDUs, so a sender writes a 1 MiB PDU without waiting for its receiver to
/// drain the socket (each such wait is a wake-up, tens of µs on a busy VM). The kernel
/// caps it at `net.core.wmem_max` / `rmem_max`.
pub const SOCKET_BUFFER_SIZE: usize = 4 << 20;

const _: () = assert!(SOCKET_BUFFER_SIZE >= 2 * DATA_PDU_SIZE_MAX);

/// Bytes of a command capsule: the encoded command without its bulk data. The largest
/// is a Load Program chunk (carried in the capsule), or a Memory Copy of 256 sources
/// with maximal paths; both fit with room to spare. Bounds what a server buffers per
/// connection for one command header.
pub const COMMAND_CAPSULE_SIZE_MAX: usize = 2 << 20;

/// Bytes of a response capsule: any encoded completion (a listing may approach
/// `FRAME_SIZE_MAX`).
pub const RESPONSE_CAPSULE_SIZE_MAX: usize = FRAME_SIZE_MAX;

/// Bytes of bulk data one command or completion moves in data PDUs.
pub const TRANSFER_SIZE_MAX: usize = MEM_IO_SIZE_MAX as usize;

/// Bytes of a human-readable message in an ICResp or a termination PDU.
pub const PDU_MESSAGE_SIZE_MAX: usize = 1024;

/// How long a server waits for a new connection's ICReq, and a client for the ICResp:
/// a peer that says nothing for this long is not a csx peer.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Commands a client asks to have in flight unless told otherwise.
pub const QUEUE_DEPTH_DEFAULT: u32 = 256;

const _: () =
    assert!(LOAD_CHUNK_SIZE_MAX as usize + NAME_SIZE_MAX + 4096 < COMMAND_CAPSULE_SIZE_MAX);
const _: () = assert!(16 + 12 + 256 * (1 + 16 + 4 + PATH_SIZE_MAX) < COMMAND_CAPSULE_SIZE_MAX);
const _: () = assert!(FILE_IO_SIZE_MAX as usize == TRANSFER_SIZE_MAX);
const _: () = assert!(DATA_PDU_SIZE_MAX <= TRANSFER_SIZE_MAX);
const _: () = assert!(COMMAND_CAPSULE_SIZE_MAX <= FRAME_SIZE_MAX);
