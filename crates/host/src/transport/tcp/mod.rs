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
//! | `conn.rs`     | [`Conn`]: a connection, plain or TLS (`tcps://`, feature tls)  |
//! | `client.rs`   | [`TcpTransport`], the host side                               |
//! | `metrics.rs`  | counters of PDUs and bytes                                    |
//!
//! The device side, one connection of `csx device serve`, is `csx_server::tcp`.
//!
//! Invariants: every length read from the socket is checked against a limit below
//! before anything is allocated for it; a peer that breaks the framing gets a
//! termination PDU and a closed connection, a command that is framed correctly but
//! invalid gets an error completion.

mod client;
pub mod conn;
pub mod framing;
pub mod metrics;

use std::time::Duration;

// The tcp transport's limits, with their reasons, live with every other bound.
pub use csx_proto::limits::{
    TCP_COMMAND_CAPSULE_SIZE_MAX as COMMAND_CAPSULE_SIZE_MAX,
    TCP_DATA_PDU_SIZE_MAX as DATA_PDU_SIZE_MAX,
    TCP_RESPONSE_CAPSULE_SIZE_MAX as RESPONSE_CAPSULE_SIZE_MAX,
    TCP_TOKEN_SIZE_MAX as TOKEN_SIZE_MAX, TRANSFER_SIZE_MAX,
    TRANSPORT_MESSAGE_SIZE_MAX as PDU_MESSAGE_SIZE_MAX,
};

pub use client::{read_token_file, TcpOptions, TcpTransport, TOKEN_FILE_ENV};
pub use conn::Conn;

/// The environment variable naming a PEM file of the certificates (CAs) a client
/// trusts for `tcps://` devices.
pub const TLS_CA_FILE_ENV: &str = "CSX_TLS_CA";

/// Version of the PDU format (ICReq/ICResp PFV). A server refuses other versions.
pub const PDU_FORMAT_VERSION: u16 = 1;

/// How long a server waits for a new connection's ICReq, and a client for the ICResp:
/// a peer that says nothing for this long is not a csx peer.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Commands a client asks to have in flight unless told otherwise.
pub const QUEUE_DEPTH_DEFAULT: u32 = 256;

/// Bytes of send and receive buffer each side asks for on its socket: room for several
/// whole data PDUs, so a sender writes a 1 MiB PDU without waiting for its receiver to
/// drain the socket (each such wait is a wake-up, tens of µs on a busy VM). The kernel
/// caps it at `net.core.wmem_max` / `rmem_max`.
pub const SOCKET_BUFFER_SIZE: usize = 4 << 20;

const _: () = assert!(SOCKET_BUFFER_SIZE >= 2 * DATA_PDU_SIZE_MAX);

/// How long a reader (the host reaping, the device's connection thread) polls its socket
/// before it sleeps in a read: the span of a busy host's gap between commands.
pub const SOCKET_POLL: Duration = Duration::from_micros(50);

/// How long of [`SOCKET_POLL`] it polls without yielding the CPU: a yield is a system
/// call of about a microsecond in a VM, longer than a short command's round trip.
pub const SOCKET_POLL_BUSY: Duration = Duration::from_micros(5);

const _: () = assert!(SOCKET_POLL_BUSY.as_nanos() < SOCKET_POLL.as_nanos());
