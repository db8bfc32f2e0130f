//! Per-client limits: what one connection may hold of the device's shared resources, so
//! that one client cannot starve the others.
//!
//! | resource            | limit ([`ClientLimits`])  | how it is enforced                      |
//! |---------------------|---------------------------|-----------------------------------------|
//! | commands in flight  | `queued_commands`         | the queue depth granted at the handshake |
//! | SLM bytes allocated | `memory_bytes`            | Memory Allocate refused past it (89h)    |
//! | program slots held  | `program_slots`           | a new Load Program refused past it (8Ah) |
//! | reply bytes in flight | `reply_bytes`           | the connection stops taking reads (`crate::replies`) |
//!
//! The device already keeps each client's allocations and loads apart and reclaims them
//! when its queue pair goes; the server adds the quotas, counted per connection by
//! [`Quota`] from the commands it admits and the completions the device returns (never
//! from the completions a connection makes itself, so a client cannot fake one). A
//! refusal is an error completion naming the value, the client's holding and the limit;
//! the connection goes on.
//!
//! Slots: a slot counts against the client that loaded it (its first chunk completed)
//! until anyone unloads it or the client goes. The device itself unloads a departed
//! client's programs when its queue pair goes, on every transport and however the client
//! went, except those the client made persistent by name (`Op::PersistProgram`), which
//! stay and then count against no client. So the server never unloads anything itself:
//! `reclaim_programs` is now what always happens.
//!
//! Invariant: `memory_reserved + memory_used` is at most `memory_bytes`; the slots
//! counted for a client plus its first chunks in flight are at most `program_slots`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use csx_device::QueuePair;
use csx_proto::{Command, CommandId, Completion, Op, Status};

/// What one client may hold at once (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// Bytes of SLM one client may hold allocated (`csx device serve --client-memory`).
    pub memory_bytes: u64,
    /// Commands one client may have in flight: the most queue depth granted
    /// (`--client-queue`).
    pub queued_commands: u32,
    /// Program slots one client may hold loaded or loading (`--client-slots`).
    pub program_slots: u16,
    /// Bytes of read replies one client may have in flight, asked for and not yet
    /// taken off its connection (`--client-reply-memory`; see `crate::replies`).
    pub reply_bytes: u64,
}

/// Default share of the device's SLM one client may hold: a quarter.
pub const CLIENT_MEMORY_SHARE: u64 = 4;
/// Default commands in flight per client.
pub const CLIENT_QUEUE_DEFAULT: u32 = 256;
/// Default program slots per client: a quarter of the device's.
pub const CLIENT_SLOTS_DEFAULT: u16 = csx_proto::limits::PROGRAM_SLOTS_COUNT / 4;
/// Default reply bytes in flight per client: two of the largest reads, so a client
/// that pipelines reads keeps one arriving while it takes the other, and 64 clients
/// that never read hold at most 2 GiB.
pub const CLIENT_REPLY_BYTES_DEFAULT: u64 = 2 * csx_proto::limits::TRANSFER_SIZE_MAX as u64;
/// The fewest reply bytes in flight a client may be allowed: one of the largest reads.
pub const CLIENT_REPLY_BYTES_MIN: u64 = csx_proto::limits::TRANSFER_SIZE_MAX as u64;

impl ClientLimits {
    /// No limit beyond the device's own: a client may hold all of its SLM and slots.
    /// [`Server::start`](crate::Server::start)'s default, so an embedding program or a
    /// test sees the whole device.
    pub fn unlimited(slm_size_bytes: u64) -> ClientLimits {
        ClientLimits {
            memory_bytes: slm_size_bytes.max(1),
            queued_commands: csx_proto::limits::QUEUE_DEPTH_MAX,
            program_slots: csx_proto::limits::PROGRAM_SLOTS_COUNT,
            reply_bytes: CLIENT_REPLY_BYTES_DEFAULT,
        }
    }

    /// The shared-daemon defaults for a device with `slm_size_bytes` of SLM (those of
    /// `csx device serve`): a quarter of the SLM, 16 slots, 256 commands.
    pub fn for_device(slm_size_bytes: u64) -> ClientLimits {
        ClientLimits {
            memory_bytes: (slm_size_bytes / CLIENT_MEMORY_SHARE).max(1 << 20),
            queued_commands: CLIENT_QUEUE_DEFAULT,
            program_slots: CLIENT_SLOTS_DEFAULT,
            reply_bytes: CLIENT_REPLY_BYTES_DEFAULT,
        }
    }
}

/// Which client loaded each slot, across connections: an Unload from any client frees
/// the loader's count.
pub(crate) type SlotOwners = Mutex<HashMap<u16, u32>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A command whose completion changes the counts.
#[derive(Clone, Copy, Debug)]
enum Tracked {
    Alloc { size: u64 },
    Free { handle: u64 },
    Load { pind: u16, first: bool, last: bool },
    Unload { pind: u16 },
}

#[derive(Debug, Default)]
struct State {
    pending: HashMap<CommandId, Tracked>,
    /// Live allocations: handle → bytes.
    handles: HashMap<u64, u64>,
    memory_used: u64,
    /// Bytes of allocations in flight.
    memory_reserved: u64,
    /// Slots whose first chunk is in flight.
    loads_in_flight: HashSet<u16>,
}

/// One connection's counts (see the module doc).
#[derive(Debug)]
pub(crate) struct Quota {
    client: u32,
    limits: ClientLimits,
    state: Mutex<State>,
    /// Entries of `state.pending`, read without the lock on every completion.
    tracked: AtomicUsize,
}

impl Quota {
    pub(crate) fn new(client: u32, limits: ClientLimits) -> Quota {
        Quota {
            client,
            limits,
            state: Mutex::new(State::default()),
            tracked: AtomicUsize::new(0),
        }
    }

    /// Checks `cmd` against the limits before it is submitted; `Err` is the completion
    /// that refuses it. A command admitted must reach [`Quota::completed`] or
    /// [`Quota::not_submitted`].
    pub(crate) fn admit(&self, cmd: &Command, owners: &SlotOwners) -> Result<(), Box<Completion>> {
        let refuse = |status, message: String| {
            Err(Box::new(Completion::error(
                cmd.id, status, "server", message,
            )))
        };
        let Some(tracked) = tracked_of(&cmd.op) else {
            return Ok(());
        };
        let mut s = lock(&self.state);
        if s.pending.contains_key(&cmd.id) {
            return refuse(
                Status::InvalidField,
                format!("{} is already in flight on this connection", cmd.id),
            );
        }
        match tracked {
            Tracked::Alloc { size } => {
                let held = s.memory_used + s.memory_reserved;
                let limit = self.limits.memory_bytes;
                if held.checked_add(size).is_none_or(|total| total > limit) {
                    return refuse(
                        Status::InsufficientResources,
                        format!(
                            "client memory limit: {size} bytes asked with {held} held, limit {limit} bytes per client"
                        ),
                    );
                }
                s.memory_reserved += size;
            }
            Tracked::Load {
                pind, first: true, ..
            } => {
                let owners = lock(owners);
                let mine = owners.get(&pind) == Some(&self.client);
                if !mine && !s.loads_in_flight.contains(&pind) {
                    let held = owners.values().filter(|&&c| c == self.client).count()
                        + s.loads_in_flight.len();
                    let limit = usize::from(self.limits.program_slots);
                    if held >= limit {
                        return refuse(
                            Status::InsufficientProgramResources,
                            format!(
                                "client program slot limit: slot {pind} asked with {held} held, limit {limit} slots per client"
                            ),
                        );
                    }
                    s.loads_in_flight.insert(pind);
                }
            }
            _ => {}
        }
        s.pending.insert(cmd.id, tracked);
        self.tracked.store(s.pending.len(), Ordering::Release);
        Ok(())
    }

    /// An admitted command that the device never took (its completion is the
    /// connection's own).
    pub(crate) fn not_submitted(&self, id: CommandId, owners: &SlotOwners) {
        let refused = Completion::new(id, Status::Aborted);
        self.completed(&refused, owners);
    }

    /// Counts the completion of an admitted command. Call it with every completion the
    /// device returns, and only those.
    pub(crate) fn completed(&self, c: &Completion, owners: &SlotOwners) {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = lock(&self.state);
        let Some(t) = s.pending.remove(&c.id) else {
            return;
        };
        self.tracked.store(s.pending.len(), Ordering::Release);
        let ok = c.status.is_success();
        match t {
            Tracked::Alloc { size } => {
                s.memory_reserved -= size;
                if ok {
                    s.handles.insert(c.value, size);
                    s.memory_used += size;
                }
            }
            Tracked::Free { handle } => {
                if ok {
                    if let Some(size) = s.handles.remove(&handle) {
                        s.memory_used -= size;
                    }
                }
            }
            Tracked::Load { pind, first, last } => {
                if first {
                    s.loads_in_flight.remove(&pind);
                }
                let mut owners = lock(owners);
                if ok && first {
                    owners.insert(pind, self.client);
                } else if !ok && last && owners.get(&pind) == Some(&self.client) {
                    // A refused last chunk (verification failed) empties the slot.
                    owners.remove(&pind);
                }
            }
            Tracked::Unload { pind } => {
                if ok {
                    lock(owners).remove(&pind);
                }
            }
        }
    }

    /// At the end of a connection, with nothing in flight: forgets the slots this client
    /// holds. The device unloads those that are not persistent when `qp` is dropped (see
    /// the module doc), whatever `reclaim` says; so this unloads nothing itself and
    /// returns 0.
    pub(crate) fn release(&self, _qp: &QueuePair, owners: &SlotOwners, _reclaim: bool) -> usize {
        lock(owners).retain(|_, c| *c != self.client);
        0
    }
}

/// What the quota tracks of `op` until it completes: memory allocated or freed, program
/// loads and unloads; `None` for the rest.
fn tracked_of(op: &Op) -> Option<Tracked> {
    Some(match op {
        Op::MemAlloc { size_bytes } => Tracked::Alloc { size: *size_bytes },
        Op::MemFree { handle } => Tracked::Free {
            handle: u64::from(handle.0),
        },
        Op::LoadProgram {
            pind,
            offset,
            data,
            total_size_bytes,
            ..
        } => Tracked::Load {
            pind: pind.0,
            first: *offset == 0,
            last: u64::from(*offset) + data.len() as u64 >= u64::from(*total_size_bytes),
        },
        Op::UnloadProgram { pind, .. } => Tracked::Unload { pind: pind.0 },
        _ => return None,
    })
}
