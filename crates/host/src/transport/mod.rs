//! Transports: how commands reach a device and completions come back.
//!
//! A [`Transport`] is one queue pair to one device: the host submits [`Command`]s and
//! reaps [`Completion`]s, in any order, matched by [`csx_proto::CommandId`] (as NVMe and
//! io_uring queue pairs). It moves protocol values and nothing else; whether it passes
//! them by value (in-process), through rings in shared memory or as frames on a socket
//! (both with the `csx_proto::wire` encoding) is its own business, invisible above it.
//!
//! | transport | URI                      | how a command travels                         |
//! |-----------|--------------------------|-----------------------------------------------|
//! | inproc    | a path, `inproc://PATH`  | by value into the device's submission queue   |
//! | shm       | `shm://NAME`             | encoded into a submission ring                |
//! | tcp       | `tcp://HOST:PORT`        | encoded into length-prefixed frames           |
//!
//! Invariant: only protocol types cross a transport.
//! Invariant: a transport never holds more than [`Transport::queue_depth`] commands
//! submitted and not yet reaped; a submission past that fails with
//! [`TransportError::QueueFull`] and changes nothing.
//! Invariant: every accepted submission produces exactly one completion, unless the
//! transport fails.

use std::fmt;
use std::time::Duration;

use csx_proto::{Command, Completion};

use crate::error::TransportError;

// `bulk`, `sys`, the framing modules and `shm::ring` are public for the server halves
// of the transports, in `csx-server`.
pub mod bulk;
mod framing;
#[cfg(feature = "inproc")]
pub mod inproc;
// The shared-memory transport's connect and serve paths are still long functions, split
// in their own change; the lint applies to it once they are.
#[allow(clippy::too_many_lines)]
pub mod shm;
pub mod sys;
pub mod tcp;

/// Environment variable: whole seconds a client waits for a device that gives no sign
/// of life, both for the answer to its connect and, with commands in flight, between
/// two signs of life (a served device sends one every [`KEEP_ALIVE_INTERVAL`] while
/// commands are in flight, so a long execution is not silence).
pub const TIMEOUT_ENV: &str = "CSX_TIMEOUT";

/// How long a client waits for the answer to its connect unless `CSX_TIMEOUT` says.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// How long a client with commands in flight waits for a sign of life from the device
/// unless `CSX_TIMEOUT` says.
pub const ANSWER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(15);

/// How often a served device shows a client with commands in flight that it lives: a
/// tcp keep-alive PDU when it wrote nothing else for this long; on shm, the heartbeat
/// word of the control page.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// The most `CSX_TIMEOUT` may say, in seconds.
pub const TIMEOUT_SECS_MAX: u64 = 3600;

/// How long a client waits for a silent device (see [`TIMEOUT_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// For the answer to the connect (the whole handshake).
    pub connect: Duration,
    /// With commands in flight, between two signs of life.
    pub answer: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: CONNECT_TIMEOUT_DEFAULT,
            answer: ANSWER_TIMEOUT_DEFAULT,
        }
    }
}

impl Timeouts {
    /// The defaults, or both set to `CSX_TIMEOUT` seconds when it is set.
    pub fn from_env() -> Result<Timeouts, TransportError> {
        match std::env::var(TIMEOUT_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(Timeouts::default()),
            Ok(v) if v.is_empty() => Ok(Timeouts::default()),
            Ok(v) => Timeouts::parse(&v),
            Err(std::env::VarError::NotUnicode(_)) => Timeouts::parse("(not UTF-8)"),
        }
    }

    /// Both set to `text` seconds (1 to [`TIMEOUT_SECS_MAX`]).
    pub fn parse(text: &str) -> Result<Timeouts, TransportError> {
        let bad = |why: String| TransportError::BadSetting {
            name: TIMEOUT_ENV,
            value: text.to_string(),
            reason: why,
        };
        let secs: u64 = text
            .trim()
            .parse()
            .map_err(|_| bad("must be whole seconds".to_string()))?;
        if secs == 0 {
            return Err(bad("must be at least 1".to_string()));
        }
        if secs > TIMEOUT_SECS_MAX {
            return Err(bad(format!("must be at most {TIMEOUT_SECS_MAX}")));
        }
        let t = Duration::from_secs(secs);
        Ok(Timeouts {
            connect: t,
            answer: t,
        })
    }
}

/// One queue pair to a device. Shared by every thread of a [`crate::Client`]; the
/// client serialises reaping (one thread reaps at a time) but submits from any thread.
pub trait Transport: Send + Sync + fmt::Debug {
    /// A short name for messages and benchmarks: `inproc`, `shm`, `tcp`.
    fn name(&self) -> &'static str;

    /// The most commands this pair holds submitted and not yet reaped.
    fn queue_depth(&self) -> u32;

    /// Hands `cmd` to the device. Never waits for the device to run it. The command has
    /// already passed `Command::validate` on the host; the device checks it again.
    fn submit(&self, cmd: Command) -> Result<(), TransportError>;

    /// A completion if one is ready now, without waiting.
    fn try_reap(&self) -> Result<Option<Completion>, TransportError>;

    /// The next completion, waiting up to `timeout` (`None`: as long as it takes).
    /// `Ok(None)` on timeout, and possibly at once when nothing is in flight (a caller
    /// may reap while another thread is between choosing a command id and submitting
    /// it, so that is not an error).
    fn reap(&self, timeout: Option<Duration>) -> Result<Option<Completion>, TransportError>;

    /// Ends the queue pair: the device reclaims its memory allocations and range sets,
    /// and a device this transport runs (an embedded one whose last client this was)
    /// shuts down cleanly. Dropping a transport does the same, losing the errors.
    fn close(self: Box<Self>) -> Result<(), TransportError>;

    /// A memory file holding this pair's device-memory allocation `handle` (which must
    /// reserve whole pages), for the host to map shared: its pages are the device's memory
    /// until the allocation is freed. Only a device on this machine can (embedded, shm);
    /// the default refuses with `Unsupported`.
    fn share_mem(
        &self,
        handle: csx_proto::MemHandle,
    ) -> Result<std::os::fd::OwnedFd, TransportError> {
        let _ = handle;
        Err(TransportError::Io {
            op: "map device memory",
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "the {} transport cannot map device memory into this process",
                    self.name()
                ),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_from_text() {
        let t = Timeouts::parse("7").unwrap();
        assert_eq!(t.connect, Duration::from_secs(7));
        assert_eq!(t.answer, Duration::from_secs(7));
        for (bad, why) in [
            ("0", "must be at least 1"),
            ("3601", "must be at most 3600"),
            ("1.5", "must be whole seconds"),
            ("x", "must be whole seconds"),
        ] {
            let e = Timeouts::parse(bad).unwrap_err().to_string();
            assert_eq!(e, format!("CSX_TIMEOUT is {bad:?}: {why}"));
        }
    }
}
