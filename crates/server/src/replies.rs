//! The per-client bound on reply bytes in flight: the bytes of the read replies
//! (File Read, Memory Read) a client has asked for and not yet taken off its
//! connection. Without it a client that asks for reads and never reads its socket (or
//! its completion ring) makes the daemon hold every reply: 256 commands of 16 MiB each.
//!
//! A read reserves its length before it is submitted and gives it back once its reply
//! has been handed to the client (written to the socket, copied into host memory) or
//! dropped with the client. A read that does not fit waits, so the connection stops
//! taking that client's commands until the client reads; other clients are not
//! affected. A client that stops reading altogether is dropped by the write stall limit
//! (`ServerOptions::write_stall`), which frees what it held.
//!
//! Invariant: the bytes held are at most the limit, except that one read larger than
//! the limit may be held alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use csx_proto::CommandId;

#[derive(Debug, Default)]
struct Held {
    bytes: u64,
    by_command: HashMap<CommandId, u64>,
}

/// Why a read was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotAdmitted {
    /// The id already has a read in flight on this connection.
    Duplicate,
    /// The wait was abandoned (the client is gone or the server is stopping).
    GaveUp,
}

/// One connection's reply bytes in flight (see the module doc).
#[derive(Debug)]
pub(crate) struct ReplyBudget {
    limit: u64,
    held: Mutex<Held>,
    freed: Condvar,
    /// The server-wide total, for the status.
    total: Arc<AtomicU64>,
}

impl ReplyBudget {
    pub(crate) fn new(limit: u64, total: Arc<AtomicU64>) -> ReplyBudget {
        ReplyBudget {
            limit,
            held: Mutex::new(Held::default()),
            freed: Condvar::new(),
            total,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `bytes` for the reply of `id`, waiting while the client holds too much.
    /// While it waits it calls `give_up` (without the budget's lock, so `give_up` may
    /// post completions, which release) at least every `recheck` (at once again when
    /// `recheck` is zero), and stops when it says so.
    pub(crate) fn reserve(
        &self,
        id: CommandId,
        bytes: u64,
        recheck: Duration,
        mut give_up: impl FnMut() -> bool,
    ) -> Result<(), NotAdmitted> {
        if bytes == 0 {
            return Ok(());
        }
        loop {
            let mut h = self.lock();
            if h.by_command.contains_key(&id) {
                return Err(NotAdmitted::Duplicate);
            }
            // A read larger than the limit goes alone.
            if h.bytes == 0 || h.bytes + bytes <= self.limit {
                h.bytes += bytes;
                h.by_command.insert(id, bytes);
                self.total.fetch_add(bytes, Ordering::Relaxed);
                return Ok(());
            }
            if !recheck.is_zero() {
                drop(
                    self.freed
                        .wait_timeout(h, recheck)
                        .unwrap_or_else(|p| p.into_inner()),
                );
            } else {
                drop(h);
            }
            if give_up() {
                return Err(NotAdmitted::GaveUp);
            }
        }
    }

    /// Gives back what `id` reserved (nothing if it reserved nothing).
    pub(crate) fn release(&self, id: CommandId) {
        let mut h = self.lock();
        if let Some(bytes) = h.by_command.remove(&id) {
            h.bytes -= bytes;
            self.total.fetch_sub(bytes, Ordering::Relaxed);
            self.freed.notify_all();
        }
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.lock().bytes
    }
}

impl Drop for ReplyBudget {
    fn drop(&mut self) {
        let h = self.held.get_mut().unwrap_or_else(|p| p.into_inner());
        self.total.fetch_sub(h.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wait_for_room_and_one_large_read_goes_alone() {
        let total = Arc::new(AtomicU64::new(0));
        let b = ReplyBudget::new(100, Arc::clone(&total));
        let ms = Duration::from_millis(10);
        b.reserve(CommandId(1), 60, ms, || false).unwrap();
        assert_eq!(
            b.reserve(CommandId(1), 10, ms, || false),
            Err(NotAdmitted::Duplicate)
        );
        // No room: the wait gives up when told.
        assert_eq!(
            b.reserve(CommandId(2), 50, ms, || true),
            Err(NotAdmitted::GaveUp)
        );
        std::thread::scope(|s| {
            let waiter = s.spawn(|| b.reserve(CommandId(2), 50, ms, || false));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiter.is_finished(), "a read past the limit waits");
            b.release(CommandId(1));
            waiter.join().unwrap().unwrap();
        });
        assert_eq!(b.held(), 50);
        assert_eq!(total.load(Ordering::Relaxed), 50);
        b.release(CommandId(2));
        b.reserve(CommandId(3), 500, ms, || false).unwrap();
        assert_eq!(b.held(), 500);
        drop(b);
        assert_eq!(total.load(Ordering::Relaxed), 0);
    }
}
