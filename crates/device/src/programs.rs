//! The compute namespace: program slots indexed by PIND (TP4091).
//!
//! A slot's lifecycle, checked in debug builds by [`can_transition`]:
//!
//! ```text
//!            load chunk (complete)               activate
//!   Empty ──────────────────────────▶ Loaded ─────────────▶ Active
//!     │  ▲                              │ ▲ ◀───────────────  │
//!     │  │ unload                 unload│ │    deactivate     │
//!     │  └──────────────────────────────┘ │                   │
//!     │  ◀───────────────────────────────────────────────────┘ unload (no runs)
//!     │ load chunk (partial)              │ last chunk
//!     └──────────────────▶ Loading ───────┘
//!                      (chunks; unload → Empty)
//! ```
//!
//! Loading parses the image (an ELF object or raw bytecode) once complete, so a
//! malformed image is refused at load with 8Eh; activation verifies it and builds its
//! engine (the interpreter, or the JIT); executions borrow the engine through a
//! [`RunTicket`], and a slot with runs in flight can be neither deactivated nor
//! unloaded (99h).
//!
//! Ownership: a program belongs to the queue pair that loaded it, and is unloaded when
//! that pair goes ([`Programs::release_client`]), however its client went (a clean
//! close, a crash, a kill, a broken connection): if executions of it are still in
//! flight then, it is unloaded when the last one ends, and no new one starts. Such a
//! program is never written to the state directory, so a daemon or a process that dies
//! holding it leaves nothing behind either.
//!
//! Persistence: only a program made persistent under a name
//! ([`Programs::persist_as`], `Op::PersistProgram`) outlives its loader. It persists in
//! `programs/` in the state directory (the image and a small JSON record with its name,
//! each written atomically), with its activation, and is restored when the device
//! opens. Names are unique among the slots.
//!
//! State directories written before programs had owners persisted every loaded program,
//! meant to stay or not (a killed client's programs included). Their records carry no
//! name: at open such a program is restored as persistent under the name `slotN` (N its
//! slot), loaded but not active, so nothing is lost and none of them holds an
//! activation; `csx program list` shows them and `csx program unload slotN` drops one.
//!
//! Invariants:
//! * `bytes_total` is the sum of `total_size_bytes` over non-empty slots and never
//!   exceeds [`PROGRAM_BYTES_TOTAL_MAX`] (TP4091 MAXPB).
//! * `active_count` is the number of Active slots, at most [`PROGRAMS_ACTIVE_MAX`].
//! * A slot is Active exactly when it holds an engine.
//! * A Loading slot belongs to the queue pair that sent its first chunk: only that pair
//!   continues or restarts the load (another gets 99h); the load is dropped when that
//!   pair goes away.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_ebpf::engine::Engine;
use csx_ebpf::helper::FunctionTable;
use csx_ebpf::program::Program;
use csx_ebpf_jit::{Promotion, Tier, TieredProgram};
use csx_proto::limits::{
    PROGRAMS_ACTIVE_MAX, PROGRAM_BYTES_TOTAL_MAX, PROGRAM_SIZE_MAX, PROGRAM_SLOTS_COUNT,
};
use csx_proto::{ClientId, EngineKind, ProgramIndex, ProgramInfo, ProgramState, ProgramType};

use crate::state::write_atomic;

mod cache;
use cache::{Built, EngineCache, EngineKey};

/// Directory of persisted programs in the state directory.
pub const PROGRAMS_DIR_NAME: &str = "programs";

/// The loader of programs the device restores itself at open (no queue pair has this
/// id: they count from 1).
pub const DEVICE_CLIENT: ClientId = ClientId(0);

/// Whether a slot may move from `from` to `to` (see the module doc).
pub fn can_transition(from: ProgramState, to: ProgramState) -> bool {
    use ProgramState::*;
    matches!(
        (from, to),
        (Empty, Loading)
            | (Empty, Loaded)
            | (Loading, Loading)
            | (Loading, Loaded)
            | (Loading, Empty)
            | (Loaded, Active)
            | (Loaded, Empty)
            | (Active, Loaded)
            | (Active, Empty)
    )
}

/// Why a program operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProgramError {
    #[error("program index {pind} is outside the {PROGRAM_SLOTS_COUNT} slots")]
    InvalidIndex { pind: u16 },
    #[error("slot {pind} holds no program")]
    NoProgram { pind: u16 },
    #[error("program in slot {pind} is not activated")]
    NotActivated { pind: u16 },
    #[error("slot {pind} is in use: {reason}")]
    InUse { pind: u16, reason: &'static str },
    #[error("{count} programs are active, limit is {PROGRAMS_ACTIVE_MAX}")]
    TooManyActive { count: u16 },
    #[error("loading {size_bytes} bytes would make {total_bytes} bytes of programs, limit is {PROGRAM_BYTES_TOTAL_MAX}")]
    BytesExceeded { size_bytes: u32, total_bytes: u64 },
    #[error("program of {size_bytes} bytes exceeds the limit of {PROGRAM_SIZE_MAX}")]
    TooBig { size_bytes: u32 },
    #[error("chunk at offset {offset}: {reason}")]
    BadChunk { offset: u32, reason: String },
    // The layer (loader, verifier, jit) is the failed completion's component
    // (`ToStatus::component`), printed before the message: the message does not repeat it.
    #[error("{message}")]
    Load { message: String },
    #[error("{message}")]
    Verify { message: String },
    #[error("{message}")]
    Jit { message: String },
    #[error("cannot persist slot {pind}: {message}")]
    Persist { pind: u16, message: String },
    #[error("the name {name:?} is taken by the program in slot {pind}")]
    NameTaken { name: String, pind: u16 },
    #[error("slot {pind} belongs to another client; only its loader may {action}")]
    NotOwner { pind: u16, action: &'static str },
    #[error("slot {pind} holds program generation {current}, not generation {named} the {op} names (that program was unloaded and another loaded); {outcome}")]
    Changed {
        pind: u16,
        named: u64,
        current: u64,
        /// The refused command: "execute" or "unload".
        op: &'static str,
        /// What the refusal left: "nothing ran", "the slot's program stays".
        outcome: &'static str,
    },
}

/// Refuses `client` a change to `slot` when another client loaded the program in it and
/// still owns it (the device itself may change any slot).
fn owned_by_another(
    slot: &Slot,
    client: ClientId,
    pind: ProgramIndex,
    action: &'static str,
) -> Result<(), ProgramError> {
    match slot.owner {
        Some(owner) if owner != client && client != DEVICE_CLIENT => Err(ProgramError::NotOwner {
            pind: pind.0,
            action,
        }),
        _ => Ok(()),
    }
}

struct ActiveEngine {
    kind: EngineKind,
    engine: Arc<dyn Engine>,
    /// The same engine, when it is a tiered JIT program (for its tier and promotion).
    tiered: Option<Arc<csx_ebpf_jit::TieredProgram>>,
}

#[derive(Default)]
struct Slot {
    state: SlotStateTag,
    ptype: Option<ProgramType>,
    total_size_bytes: u32,
    image: Vec<u8>,
    entry: Option<String>,
    /// The queue pair whose chunks fill a Loading slot; only it may continue or restart
    /// the load (`Programs::load_chunk`).
    loader: Option<ClientId>,
    name: String,
    active: Option<ActiveEngine>,
    runs_in_flight: u32,
    executions: u64,
    /// The queue pair that loaded the program and owns it; `None` once persistent (or
    /// restored by the device).
    owner: Option<ClientId>,
    /// The name it persists under, when persistent.
    persistent: Option<String>,
    /// Its owner is gone while executions were in flight: it is unloaded when the last
    /// one ends, and no new one begins.
    doomed: bool,
    /// The program's generation (`ProgramInfo::generation`), given when its load
    /// starts; 0 only in an empty slot.
    generation: u64,
}

/// `ProgramState` with a `Default`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotStateTag(ProgramState);

impl Default for SlotStateTag {
    fn default() -> Self {
        SlotStateTag(ProgramState::Empty)
    }
}

impl Slot {
    fn state(&self) -> ProgramState {
        self.state.0
    }

    fn set_state(&mut self, to: ProgramState) {
        debug_assert!(
            can_transition(self.state(), to) || (self.state() == to && to == ProgramState::Loading),
            "slot transition {:?} -> {:?}",
            self.state(),
            to
        );
        self.state = SlotStateTag(to);
    }
}

struct Inner {
    slots: Vec<Slot>,
    bytes_total: u64,
    active_count: u16,
    /// The generation the next load gets (see [`first_generation`]).
    next_generation: u64,
}

/// The first generation a compute namespace gives: the wall clock in nanoseconds, so
/// generations keep growing across restarts of the device (a restarted device's loads
/// never reuse a number a client remembers from before) unless the clock steps back
/// by more than the loads since.
fn first_generation() -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_nanos())
        .unwrap_or(u64::MAX >> 1)
        .max(1)
}

/// An execution's hold on an active program.
pub struct RunTicket<'a> {
    programs: &'a Programs,
    pind: ProgramIndex,
    /// The program's engine.
    pub engine: Arc<dyn Engine>,
}

impl std::fmt::Debug for RunTicket<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTicket")
            .field("pind", &self.pind)
            .finish_non_exhaustive()
    }
}

impl Drop for RunTicket<'_> {
    fn drop(&mut self) {
        let mut guard = self.programs.lock();
        let inner = &mut *guard;
        let slot = &mut inner.slots[usize::from(self.pind.0)];
        assert!(slot.runs_in_flight > 0, "a ticket's run is counted");
        slot.runs_in_flight -= 1;
        if slot.doomed && slot.runs_in_flight == 0 {
            // Its owner went while this run was in flight: unload it now (it was never
            // written to the state directory).
            empty_slot(inner, usize::from(self.pind.0));
        }
    }
}

/// Empties slot `idx` of a program that is not persistent, releasing its bytes and its
/// activation.
fn empty_slot(inner: &mut Inner, idx: usize) {
    let slot = &mut inner.slots[idx];
    debug_assert!(slot.persistent.is_none() && slot.runs_in_flight == 0);
    if slot.state() == ProgramState::Active {
        inner.active_count -= 1;
    }
    inner.bytes_total -= u64::from(slot.total_size_bytes);
    slot.set_state(ProgramState::Empty);
    *slot = Slot::default();
}

/// One Load Program chunk: the fields of the command ([`Programs::load_chunk`]).
#[derive(Clone, Copy, Debug)]
pub struct LoadChunk<'a> {
    pub pind: ProgramIndex,
    pub ptype: ProgramType,
    /// The whole image's size, the same in every chunk.
    pub total_size_bytes: u32,
    /// Where `data` goes in the image; a load starts with offset 0.
    pub offset: u32,
    pub data: &'a [u8],
    /// The entry function of an ELF image (`None`: its only one).
    pub entry: Option<&'a str>,
}

/// The compute namespace.
pub struct Programs {
    inner: Mutex<Inner>,
    functions: Arc<FunctionTable>,
    jit_enabled: bool,
    /// Whether executions count their work, so a JIT activation also compiles the
    /// counting variant (see [`Programs::with_counting`]).
    count_work: bool,
    /// How a JIT activation is tiered, if it is (see [`Programs::with_tiering`]).
    tiering: Option<Promotion>,
    dir: Option<PathBuf>,
    /// Engines of recent activations, reused by an activation of the same image
    /// (see `cache`).
    engines: Mutex<EngineCache>,
}

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// What `programs/<pind>.json` records.
#[derive(serde::Serialize, serde::Deserialize)]
struct SlotRecord {
    ptype: String,
    entry: Option<String>,
    /// "interpreter", "jit" or null.
    engine: Option<String>,
    /// The name the program persists under; absent in records written before programs
    /// had owners (see the module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

/// How long each phase of an activation took.
#[derive(Clone, Copy, Debug, Default)]
pub struct ActivationTiming {
    /// Parsing and verifying.
    pub verify: Duration,
    /// Building the engine (the JIT compile; when tiered, the quick tier's).
    pub compile: Duration,
}

/// Starts a load (or restarts one) in `slot` for `client`: releases what the slot held
/// from `bytes_total`, then reserves `total_size_bytes` under the device's total.
fn start_load(
    slot: &mut Slot,
    (bytes_total, next_generation): (&mut u64, &mut u64),
    client: ClientId,
    chunk: &LoadChunk<'_>,
) -> Result<(), ProgramError> {
    let total_size_bytes = chunk.total_size_bytes;
    *bytes_total -= u64::from(slot.total_size_bytes);
    let total = *bytes_total + u64::from(total_size_bytes);
    if total > PROGRAM_BYTES_TOTAL_MAX {
        *slot = Slot::default();
        return Err(ProgramError::BytesExceeded {
            size_bytes: total_size_bytes,
            total_bytes: total,
        });
    }
    *bytes_total = total;
    slot.ptype = Some(chunk.ptype);
    slot.total_size_bytes = total_size_bytes;
    slot.image = Vec::with_capacity(total_size_bytes as usize);
    slot.entry = chunk.entry.map(str::to_owned);
    slot.loader = Some(client);
    slot.generation = *next_generation;
    *next_generation += 1;
    slot.set_state(ProgramState::Loading);
    Ok(())
}

/// Why a chunk after the first does not continue the load in `slot`, if it does not:
/// it must start where the image ends, repeat the first chunk's size and type, and not
/// name the entry.
fn next_chunk_fits(slot: &Slot, chunk: &LoadChunk<'_>) -> Result<(), String> {
    if slot.image.len() != chunk.offset as usize {
        return Err(format!("expected offset {}", slot.image.len()));
    }
    if slot.total_size_bytes != chunk.total_size_bytes || slot.ptype != Some(chunk.ptype) {
        return Err("total size or program type differs from the first chunk".into());
    }
    if chunk.entry.is_some() {
        return Err("only the first chunk may name the entry".into());
    }
    Ok(())
}

fn slot_index(pind: ProgramIndex) -> Result<usize, ProgramError> {
    if pind.0 >= PROGRAM_SLOTS_COUNT {
        return Err(ProgramError::InvalidIndex { pind: pind.0 });
    }
    Ok(usize::from(pind.0))
}

impl Programs {
    /// An empty compute namespace whose programs call `functions`. With `dir`, loaded
    /// programs persist there.
    pub fn new(functions: Arc<FunctionTable>, jit_enabled: bool, dir: Option<PathBuf>) -> Programs {
        Programs {
            inner: Mutex::new(Inner {
                slots: (0..PROGRAM_SLOTS_COUNT).map(|_| Slot::default()).collect(),
                bytes_total: 0,
                active_count: 0,
                next_generation: first_generation(),
            }),
            functions,
            jit_enabled,
            count_work: false,
            tiering: Some(Promotion::Background),
            dir,
            engines: Mutex::new(EngineCache::default()),
        }
    }

    /// Tells activations that every execution will count its work
    /// (`PerfModel::counts_work`), so a JIT activation compiles the counting variant too.
    pub fn with_counting(mut self, count_work: bool) -> Programs {
        self.count_work = count_work;
        self
    }

    /// Whether a JIT activation is tiered (the default): it compiles the quick tier's
    /// code (well under a millisecond) and returns, the program runs on it at once, and
    /// Cranelift's code replaces it when a background compile lands (see
    /// `csx_ebpf_jit::TieredProgram`; results, fuel and counts are the same on both).
    /// Without tiering, activation waits for Cranelift.
    pub fn with_tiering(self, tiering: bool) -> Programs {
        self.with_promotion(tiering.then_some(Promotion::Background))
    }

    /// Tiering with the promotion `promotion` (`None`: no tiering, activation waits for
    /// Cranelift); `Promotion::Manual` leaves promotion to [`Programs::optimize`].
    pub fn with_promotion(mut self, promotion: Option<Promotion>) -> Programs {
        self.tiering = promotion;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // See `Slm::lock`: no method leaves the table half-updated across a panic point.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The function table programs are linked and verified against.
    pub fn functions(&self) -> &Arc<FunctionTable> {
        &self.functions
    }

    /// Applies one Load Program chunk from queue pair `client`. Returns the bytes
    /// received so far.
    ///
    /// A slot that is Loading belongs to the queue pair that sent its first chunk:
    /// chunks from any other pair, even a first chunk (offset 0) that would restart the
    /// load, are refused with 99h (program in use), so two hosts can never interleave or
    /// silently restart each other's loads. The load is released when its pair
    /// restarts or unloads it, or goes away ([`Programs::abandon_loads`]); an Unload
    /// from any pair also empties it.
    pub fn load_chunk(&self, client: ClientId, chunk: LoadChunk<'_>) -> Result<u32, ProgramError> {
        let (pind, offset, total_size_bytes) = (chunk.pind, chunk.offset, chunk.total_size_bytes);
        let idx = slot_index(pind)?;
        if total_size_bytes > PROGRAM_SIZE_MAX {
            return Err(ProgramError::TooBig {
                size_bytes: total_size_bytes,
            });
        }
        let bad = |reason: &str| ProgramError::BadChunk {
            offset,
            reason: reason.to_string(),
        };
        let mut guard = self.lock();
        let inner = &mut *guard;
        let slot = &mut inner.slots[idx];
        match (slot.state(), offset) {
            (ProgramState::Loaded | ProgramState::Active, _) => {
                return Err(ProgramError::InUse {
                    pind: pind.0,
                    reason: "the slot holds a program; unload it first",
                })
            }
            (ProgramState::Loading, _) if slot.loader != Some(client) => {
                return Err(ProgramError::InUse {
                    pind: pind.0,
                    reason: "another queue pair is loading a program into it",
                })
            }
            (ProgramState::Empty, 0) | (ProgramState::Loading, 0) => {
                let counters = (&mut inner.bytes_total, &mut inner.next_generation);
                start_load(slot, counters, client, &chunk)?;
            }
            (ProgramState::Empty, _) => {
                return Err(bad("no load in progress; the first chunk has offset 0"))
            }
            (ProgramState::Loading, _) => {
                next_chunk_fits(slot, &chunk).map_err(|r| bad(&r))?;
            }
        }
        if offset as usize + chunk.data.len() > total_size_bytes as usize {
            return Err(bad("chunk runs past the program's total size"));
        }
        slot.image.extend_from_slice(chunk.data);
        let received = slot.image.len() as u32;
        if received < total_size_bytes {
            return Ok(received);
        }
        // The image is complete: parse it now so a malformed image is refused at load.
        self.complete_load(slot, &mut inner.bytes_total, client, pind)?;
        Ok(received)
    }

    /// Parses the complete image of `slot` (loaded by `client`): the slot is Loaded, or
    /// emptied (its bytes released from `bytes_total`) when the image is malformed.
    fn complete_load(
        &self,
        slot: &mut Slot,
        bytes_total: &mut u64,
        client: ClientId,
        pind: ProgramIndex,
    ) -> Result<(), ProgramError> {
        match self.parse(
            slot.ptype.expect("set by the first chunk"),
            &slot.image,
            slot.entry.as_deref(),
            pind,
        ) {
            Ok(program) => {
                slot.name = program.name;
                // The loader owns it (the device's own restores are owned by nobody);
                // it is written to the state directory only once persistent.
                slot.owner = (client != DEVICE_CLIENT).then_some(client);
                slot.set_state(ProgramState::Loaded);
                Ok(())
            }
            Err(e) => {
                *bytes_total -= u64::from(slot.total_size_bytes);
                slot.set_state(ProgramState::Empty);
                *slot = Slot::default();
                Err(e)
            }
        }
    }

    /// Makes the program in `pind` persistent under `name` for its owner `client`: it
    /// no longer goes with `client`'s queue pair, and it is written to the state
    /// directory (image and record, with its activation). Refused when the slot holds
    /// no complete program (0x8F), belongs to another client or is doomed (99h), or the
    /// name is taken by another slot (99h, naming it). Asking again with the same name
    /// is a success.
    pub fn persist_as(
        &self,
        client: ClientId,
        pind: ProgramIndex,
        name: &str,
    ) -> Result<(), ProgramError> {
        let idx = slot_index(pind)?;
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Some((other, _)) = inner
            .slots
            .iter()
            .enumerate()
            .find(|(i, s)| *i != idx && s.persistent.as_deref() == Some(name))
        {
            return Err(ProgramError::NameTaken {
                name: name.to_string(),
                pind: other as u16,
            });
        }
        let slot = &mut inner.slots[idx];
        match slot.state() {
            ProgramState::Empty | ProgramState::Loading => {
                return Err(ProgramError::NoProgram { pind: pind.0 })
            }
            ProgramState::Loaded | ProgramState::Active => {}
        }
        match (&slot.persistent, slot.owner) {
            (Some(have), _) if have == name => return Ok(()),
            (Some(have), _) => {
                return Err(ProgramError::NameTaken {
                    name: have.clone(),
                    pind: pind.0,
                })
            }
            (None, Some(owner)) if owner == client && !slot.doomed => {}
            _ => {
                return Err(ProgramError::NotOwner {
                    pind: pind.0,
                    action: "make it persistent",
                })
            }
        }
        slot.persistent = Some(name.to_string());
        slot.owner = None;
        let record = SlotRecord {
            ptype: ptype_name(slot.ptype.expect("a loaded slot has a type")).into(),
            entry: slot.entry.clone(),
            engine: slot.active.as_ref().map(|a| engine_name(a.kind).into()),
            name: Some(name.to_string()),
        };
        let image = slot.image.clone();
        // Written under the lock, so an unload or a deactivation of this slot cannot
        // overtake the files (both are rare admin commands).
        if let Err(e) = self.persist(pind, Some((&image, &record))) {
            let slot = &mut inner.slots[idx];
            slot.persistent = None;
            slot.owner = Some(client);
            // Best effort: what was half written goes.
            let _ = self.persist(pind, None);
            return Err(e);
        }
        Ok(())
    }

    /// Releases everything queue pair `client` holds, as its pair goes: loads in
    /// progress are dropped, and each program it loaded that is not persistent is
    /// unloaded, at once if no execution of it is in flight, else when the last one
    /// ends (none starts meanwhile). Returns how many programs it held.
    pub fn release_client(&self, client: ClientId) -> usize {
        let mut released = self.abandon_loads(client);
        let mut guard = self.lock();
        let inner = &mut *guard;
        for idx in 0..inner.slots.len() {
            let slot = &mut inner.slots[idx];
            if slot.owner != Some(client) || slot.persistent.is_some() {
                continue;
            }
            released += 1;
            slot.owner = None;
            if slot.runs_in_flight > 0 {
                slot.doomed = true;
            } else {
                empty_slot(inner, idx);
            }
        }
        released
    }

    fn parse(
        &self,
        ptype: ProgramType,
        image: &[u8],
        entry: Option<&str>,
        pind: ProgramIndex,
    ) -> Result<Program, ProgramError> {
        let loaded = match ptype {
            ProgramType::Elf => csx_ebpf::loader::load_elf(image, entry, &self.functions),
            ProgramType::Raw => csx_ebpf::loader::load_raw(&format!("raw{}", pind.0), image),
        };
        loaded.map_err(|e| ProgramError::Load {
            message: e.to_string(),
        })
    }

    /// Empties every slot still Loading for `client` (its queue pair is gone), so its
    /// half-sent image no longer holds the slot or program bytes. Returns how many.
    pub fn abandon_loads(&self, client: ClientId) -> usize {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let mut abandoned = 0;
        for slot in &mut inner.slots {
            if slot.state() == ProgramState::Loading && slot.loader == Some(client) {
                inner.bytes_total -= u64::from(slot.total_size_bytes);
                slot.set_state(ProgramState::Empty);
                *slot = Slot::default();
                abandoned += 1;
            }
        }
        abandoned
    }

    /// Empties a slot (deactivating it first) for `client`. Refused while runs are in
    /// flight, for a program another client loaded and still owns (a persistent
    /// program has no owner: any client may unload it), and, when the caller names the
    /// generation of the program it means, for any other program in the slot.
    pub fn unload(
        &self,
        client: ClientId,
        pind: ProgramIndex,
        generation: Option<u64>,
    ) -> Result<(), ProgramError> {
        let idx = slot_index(pind)?;
        let mut guard = self.lock();
        let inner = &mut *guard;
        let slot = &mut inner.slots[idx];
        owned_by_another(slot, client, pind, "unload it")?;
        match slot.state() {
            ProgramState::Empty => return Err(ProgramError::NoProgram { pind: pind.0 }),
            _ if generation.is_some_and(|g| g != slot.generation) => {
                return Err(ProgramError::Changed {
                    pind: pind.0,
                    named: generation.unwrap_or_default(),
                    current: slot.generation,
                    op: "unload",
                    outcome: "the slot's program stays",
                })
            }
            _ if slot.runs_in_flight > 0 => {
                return Err(ProgramError::InUse {
                    pind: pind.0,
                    reason: "executions are in flight",
                })
            }
            ProgramState::Active => inner.active_count -= 1,
            ProgramState::Loading | ProgramState::Loaded => {}
        }
        let was_persisted = slot.persistent.is_some();
        inner.bytes_total -= u64::from(slot.total_size_bytes);
        slot.set_state(ProgramState::Empty);
        *slot = Slot::default();
        drop(guard);
        if was_persisted {
            self.persist(pind, None)?;
        }
        Ok(())
    }

    /// Verifies the slot's program and builds its engine.
    pub fn activate(
        &self,
        pind: ProgramIndex,
        kind: EngineKind,
    ) -> Result<ActivationTiming, ProgramError> {
        let idx = slot_index(pind)?;
        // First, check the slot and copy out what the build needs, then build without
        // holding the lock (a JIT compile takes milliseconds; executions keep running).
        let Some((ptype, image, entry)) = self.activation_source(idx, pind, kind)? else {
            return Ok(ActivationTiming::default());
        };
        let (active, timing) = self.build(ptype, &image, entry.as_deref(), pind, kind)?;
        // Then install it, if the slot did not change meanwhile (only the admin worker
        // changes slots, so it cannot have; checked all the same).
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.active_count >= PROGRAMS_ACTIVE_MAX {
            return Err(ProgramError::TooManyActive {
                count: inner.active_count,
            });
        }
        let slot = &mut inner.slots[idx];
        if slot.state() != ProgramState::Loaded || slot.image != image {
            return Err(ProgramError::InUse {
                pind: pind.0,
                reason: "the slot changed during activation",
            });
        }
        if slot.doomed {
            return Err(ProgramError::NoProgram { pind: pind.0 });
        }
        slot.active = Some(active);
        slot.executions = 0;
        slot.set_state(ProgramState::Active);
        inner.active_count += 1;
        let record = slot.persistent.as_ref().map(|name| SlotRecord {
            ptype: ptype_name(ptype).into(),
            entry: slot.entry.clone(),
            engine: Some(engine_name(kind).into()),
            name: Some(name.clone()),
        });
        drop(guard);
        if let Some(record) = record {
            self.persist_record(pind, &record)?;
        }
        Ok(timing)
    }

    /// What activating slot `idx` on `kind` builds (type, image, entry), copied out under
    /// the lock; `None` when it is already active on `kind`.
    #[allow(clippy::type_complexity)]
    fn activation_source(
        &self,
        idx: usize,
        pind: ProgramIndex,
        kind: EngineKind,
    ) -> Result<Option<(ProgramType, Vec<u8>, Option<String>)>, ProgramError> {
        let inner = self.lock();
        let slot = &inner.slots[idx];
        match slot.state() {
            ProgramState::Empty | ProgramState::Loading => {
                return Err(ProgramError::NoProgram { pind: pind.0 })
            }
            ProgramState::Active if slot.active.as_ref().map(|a| a.kind) == Some(kind) => {
                return Ok(None)
            }
            ProgramState::Active => {
                return Err(ProgramError::InUse {
                    pind: pind.0,
                    reason: "active on another engine; deactivate first",
                })
            }
            ProgramState::Loaded => {}
        }
        if inner.active_count >= PROGRAMS_ACTIVE_MAX {
            return Err(ProgramError::TooManyActive {
                count: inner.active_count,
            });
        }
        Ok(Some((
            slot.ptype.expect("a loaded slot has a type"),
            slot.image.clone(),
            slot.entry.clone(),
        )))
    }

    /// The slot's engine: a kept one built from the same image (see `cache`), or a new
    /// one, then kept.
    fn build(
        &self,
        ptype: ProgramType,
        image: &[u8],
        entry: Option<&str>,
        pind: ProgramIndex,
        kind: EngineKind,
    ) -> Result<(ActiveEngine, ActivationTiming), ProgramError> {
        let key = EngineKey::new(ptype, kind, entry, pind, image);
        let kept = self.engine_cache().take(&key);
        if let Some(Built { engine, tiered }) = kept {
            let active = ActiveEngine {
                kind,
                engine,
                tiered,
            };
            return Ok((active, ActivationTiming::default()));
        }
        let (active, timing) = self.build_engine(&key, pind)?;
        let built = Built {
            engine: Arc::clone(&active.engine),
            tiered: active.tiered.clone(),
        };
        self.engine_cache().keep(key, built);
        Ok((active, timing))
    }

    fn engine_cache(&self) -> MutexGuard<'_, EngineCache> {
        // The cache is changed by whole statements: a panic cannot leave it half-updated.
        self.engines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parses and verifies the image `key` names and builds its engine.
    fn build_engine(
        &self,
        key: &EngineKey,
        pind: ProgramIndex,
    ) -> Result<(ActiveEngine, ActivationTiming), ProgramError> {
        let (ptype, image, entry, kind) =
            (key.ptype, &key.image[..], key.entry.as_deref(), key.kind);
        let start = Instant::now();
        let program = self.parse(ptype, image, entry, pind)?;
        let verified =
            csx_ebpf::verifier::verify(program, Arc::clone(&self.functions)).map_err(|e| {
                ProgramError::Verify {
                    message: e.to_string(),
                }
            })?;
        let verified = Arc::new(verified);
        let verify = start.elapsed();
        let start = Instant::now();
        let jit_error = |e: csx_ebpf_jit::JitError| ProgramError::Jit {
            message: e.to_string(),
        };
        let mut tiered_engine = None;
        let engine: Arc<dyn Engine> = match kind {
            EngineKind::Interpreter => Arc::new(csx_ebpf::interp::Interpreter::new(verified)),
            EngineKind::Jit if !self.jit_enabled => {
                return Err(ProgramError::Jit {
                    message: "the JIT is disabled on this device".into(),
                })
            }
            EngineKind::Jit => match self.tiering {
                Some(promotion) => {
                    // Where every execution counts its work (`crate::execute`), both
                    // tiers compile their counting variants before a run can use them.
                    let tiered = TieredProgram::with_counting(verified, promotion, self.count_work)
                        .map_err(jit_error)?;
                    let tiered = Arc::new(tiered);
                    tiered_engine = Some(Arc::clone(&tiered));
                    tiered
                }
                None => {
                    let jit = csx_ebpf_jit::JitProgram::compile(verified).map_err(jit_error)?;
                    // Where every execution counts its work, compile the counting
                    // variant now, at activation, not in the first execution's time.
                    if self.count_work {
                        jit.prepare_counting().map_err(jit_error)?;
                    }
                    Arc::new(jit)
                }
            },
        };
        let active = ActiveEngine {
            kind,
            engine,
            tiered: tiered_engine,
        };
        Ok((
            active,
            ActivationTiming {
                verify,
                compile: start.elapsed(),
            },
        ))
    }

    /// Releases the slot's engine. Refused while runs are in flight.
    pub fn deactivate(&self, client: ClientId, pind: ProgramIndex) -> Result<(), ProgramError> {
        let idx = slot_index(pind)?;
        let mut guard = self.lock();
        let inner = &mut *guard;
        let slot = &mut inner.slots[idx];
        owned_by_another(slot, client, pind, "deactivate it")?;
        match slot.state() {
            ProgramState::Empty | ProgramState::Loading => {
                return Err(ProgramError::NoProgram { pind: pind.0 })
            }
            ProgramState::Loaded => return Err(ProgramError::NotActivated { pind: pind.0 }),
            ProgramState::Active if slot.runs_in_flight > 0 => {
                return Err(ProgramError::InUse {
                    pind: pind.0,
                    reason: "executions are in flight",
                })
            }
            ProgramState::Active => {}
        }
        slot.active = None;
        slot.set_state(ProgramState::Loaded);
        inner.active_count -= 1;
        let record = slot.persistent.as_ref().map(|name| SlotRecord {
            ptype: ptype_name(slot.ptype.expect("a loaded slot has a type")).into(),
            entry: slot.entry.clone(),
            engine: None,
            name: Some(name.clone()),
        });
        drop(guard);
        match record {
            Some(record) => self.persist_record(pind, &record),
            None => Ok(()),
        }
    }

    /// The tier a tiered JIT activation runs on now; `None` when the slot's engine is
    /// not tiered (the interpreter, or a JIT activation without tiering).
    pub fn jit_tier(&self, pind: ProgramIndex) -> Result<Option<Tier>, ProgramError> {
        Ok(self.tiered(pind)?.map(|t| t.tier()))
    }

    /// Promotes a tiered JIT activation to Cranelift's code now (compiling on this thread
    /// unless the optimised code is there already; a background compile still running is
    /// not waited for); a failed compile is reported (the program keeps running on the
    /// quick tier). Nothing to do for an engine that is not tiered.
    pub fn optimize(&self, pind: ProgramIndex) -> Result<(), ProgramError> {
        match self.tiered(pind)? {
            Some(t) => t.optimize().map_err(|e| ProgramError::Jit {
                message: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn tiered(&self, pind: ProgramIndex) -> Result<Option<Arc<TieredProgram>>, ProgramError> {
        let idx = slot_index(pind)?;
        let inner = self.lock();
        let slot = &inner.slots[idx];
        match slot.state() {
            ProgramState::Empty | ProgramState::Loading => {
                Err(ProgramError::NoProgram { pind: pind.0 })
            }
            ProgramState::Loaded => Err(ProgramError::NotActivated { pind: pind.0 }),
            ProgramState::Active => Ok(slot.active.as_ref().and_then(|a| a.tiered.clone())),
        }
    }

    /// Borrows the slot's engine for one execution.
    pub fn begin_run(&self, pind: ProgramIndex) -> Result<RunTicket<'_>, ProgramError> {
        self.begin_run_of(pind, None)
    }

    /// Borrows the slot's engine for one execution of the program of generation
    /// `generation` (`None`: whichever program the slot holds). Another program in
    /// the slot is refused ([`ProgramError::Changed`]) before anything runs.
    pub fn begin_run_of(
        &self,
        pind: ProgramIndex,
        generation: Option<u64>,
    ) -> Result<RunTicket<'_>, ProgramError> {
        let idx = slot_index(pind)?;
        let mut inner = self.lock();
        let slot = &mut inner.slots[idx];
        match slot.state() {
            ProgramState::Empty | ProgramState::Loading => {
                Err(ProgramError::NoProgram { pind: pind.0 })
            }
            _ if generation.is_some_and(|g| g != slot.generation) => Err(ProgramError::Changed {
                pind: pind.0,
                named: generation.unwrap_or_default(),
                current: slot.generation,
                op: "execute",
                outcome: "nothing ran",
            }),
            ProgramState::Loaded => Err(ProgramError::NotActivated { pind: pind.0 }),
            // Its owner is gone; it is unloaded when the runs in flight end.
            ProgramState::Active if slot.doomed => Err(ProgramError::NoProgram { pind: pind.0 }),
            ProgramState::Active => {
                let engine = Arc::clone(
                    &slot
                        .active
                        .as_ref()
                        .expect("an active slot has an engine")
                        .engine,
                );
                slot.runs_in_flight += 1;
                slot.executions += 1;
                Ok(RunTicket {
                    programs: self,
                    pind,
                    engine,
                })
            }
        }
    }

    /// The occupied slots (TP4091 log page 82h), with their programs' generations.
    pub fn list(&self) -> Vec<ProgramInfo> {
        let inner = self.lock();
        inner
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state() != ProgramState::Empty)
            .map(|(i, s)| ProgramInfo {
                pind: ProgramIndex(i as u16),
                state: s.state(),
                ptype: s.ptype.expect("an occupied slot has a type"),
                size_bytes: s.total_size_bytes,
                loaded_bytes: s.image.len() as u32,
                name: s.name.clone(),
                engine: s.active.as_ref().map(|a| a.kind),
                executions: s.executions,
                owner: s.owner,
                persistent: s.persistent.clone(),
                generation: Some(s.generation),
            })
            .collect()
    }

    // ------------------------------------------------------------------------------
    // Persistence.

    fn paths(&self, pind: ProgramIndex) -> Option<(PathBuf, PathBuf)> {
        let dir = self.dir.as_ref()?;
        Some((
            dir.join(format!("{}.img", pind.0)),
            dir.join(format!("{}.json", pind.0)),
        ))
    }

    fn persist(
        &self,
        pind: ProgramIndex,
        contents: Option<(&[u8], &SlotRecord)>,
    ) -> Result<(), ProgramError> {
        let Some((img, json)) = self.paths(pind) else {
            return Ok(());
        };
        let err = |e: &dyn std::fmt::Display| ProgramError::Persist {
            pind: pind.0,
            message: e.to_string(),
        };
        match contents {
            Some((image, record)) => {
                write_atomic(&img, image).map_err(|e| err(&e))?;
                self.persist_record(pind, record)
            }
            None => {
                // The record goes first: a record without an image is ignored at restore.
                for p in [&json, &img] {
                    match fs::remove_file(p) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(err(&e)),
                    }
                }
                Ok(())
            }
        }
    }

    fn persist_record(&self, pind: ProgramIndex, record: &SlotRecord) -> Result<(), ProgramError> {
        let Some((_, json)) = self.paths(pind) else {
            return Ok(());
        };
        let bytes = serde_json::to_vec_pretty(record).expect("a record always serializes");
        write_atomic(&json, &bytes).map_err(|e| ProgramError::Persist {
            pind: pind.0,
            message: e.to_string(),
        })
    }

    /// Reloads persisted slots (and reactivates those that were active). Returns what
    /// could not be restored, slot by slot; those slots stay empty or loaded.
    pub fn restore(&self) -> Vec<(ProgramIndex, ProgramError)> {
        let Some(dir) = self.dir.clone() else {
            return Vec::new();
        };
        let mut failures = Vec::new();
        for i in 0..PROGRAM_SLOTS_COUNT {
            let pind = ProgramIndex(i);
            if let Err(e) = self.restore_slot(&dir, pind) {
                failures.push((pind, e));
            }
        }
        failures
    }

    /// Names the program in `pind` persistent `name`, unless the name is invalid or
    /// another slot holds it; says whether it did.
    fn claim_name(&self, pind: ProgramIndex, name: &str) -> bool {
        let mut inner = self.lock();
        let taken = inner
            .slots
            .iter()
            .any(|s| s.persistent.as_deref() == Some(name));
        let slot = &mut inner.slots[usize::from(pind.0)];
        if !taken && csx_proto::validate_program_name(name).is_ok() {
            slot.persistent = Some(name.to_string());
            true
        } else {
            false
        }
    }

    fn restore_slot(&self, dir: &Path, pind: ProgramIndex) -> Result<(), ProgramError> {
        let json = dir.join(format!("{}.json", pind.0));
        let Ok(bytes) = fs::read(&json) else {
            return Ok(());
        };
        let bad = |message: String| ProgramError::Persist {
            pind: pind.0,
            message,
        };
        let record: SlotRecord =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("{}: {e}", json.display())))?;
        let image =
            fs::read(dir.join(format!("{}.img", pind.0))).map_err(|e| bad(e.to_string()))?;
        let ptype = match record.ptype.as_str() {
            "elf" => ProgramType::Elf,
            "raw" => ProgramType::Raw,
            other => return Err(bad(format!("unknown program type {other:?}"))),
        };
        let size = u32::try_from(image.len()).map_err(|_| ProgramError::TooBig {
            size_bytes: u32::MAX,
        })?;
        // Replay the load (owned by nobody), then name it.
        self.load_chunk(
            DEVICE_CLIENT,
            LoadChunk {
                pind,
                ptype,
                total_size_bytes: size,
                offset: 0,
                data: &image,
                entry: record.entry.as_deref(),
            },
        )?;
        let (name, engine) = match &record.name {
            Some(name) => (name.clone(), record.engine.as_deref()),
            // A record from before programs had owners: kept, inactive, under its slot's
            // name (see the module doc); its record is rewritten with that name.
            None => (format!("slot{}", pind.0), None),
        };
        if !self.claim_name(pind, &name) {
            let _ = self.unload(DEVICE_CLIENT, pind, None);
            return Err(bad(format!(
                "{}: the name {name:?} is invalid or taken by another slot",
                json.display()
            )));
        }
        if record.name.is_none() {
            let record = SlotRecord {
                ptype: record.ptype.clone(),
                entry: record.entry.clone(),
                engine: None,
                name: Some(name),
            };
            self.persist_record(pind, &record)?;
        }
        match engine {
            None => Ok(()),
            Some("jit") => self.activate(pind, EngineKind::Jit).map(drop),
            Some(_) => self.activate(pind, EngineKind::Interpreter).map(drop),
        }
    }
}

fn ptype_name(t: ProgramType) -> &'static str {
    match t {
        ProgramType::Elf => "elf",
        ProgramType::Raw => "raw",
    }
}

fn engine_name(k: EngineKind) -> &'static str {
    match k {
        EngineKind::Interpreter => "interpreter",
        EngineKind::Jit => "jit",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk of a raw image (no entry name) from `client`.
    pub(super) fn raw_chunk(
        p: &Programs,
        client: ClientId,
        pind: ProgramIndex,
        total_size_bytes: u32,
        offset: u32,
        data: &[u8],
    ) -> Result<u32, ProgramError> {
        let chunk = LoadChunk {
            pind,
            ptype: ProgramType::Raw,
            total_size_bytes,
            offset,
            data,
            entry: None,
        };
        p.load_chunk(client, chunk)
    }
    use crate::status::ToStatus;
    use csx_ebpf::isa::Insn;
    use csx_proto::Status;

    /// `mov r0, 42; exit` as raw bytes.
    fn ret42() -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&[0xb7, 0x00, 0x00, 0x00, 42, 0, 0, 0]);
        v.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
        v
    }

    fn programs() -> Programs {
        Programs::new(Arc::new(FunctionTable::new()), true, None)
    }

    /// Two queue pairs.
    const C1: ClientId = ClientId(1);
    const C2: ClientId = ClientId(2);

    /// A slot Loading for one queue pair refuses every chunk of another, even a first
    /// chunk that would restart the load, with 99h; its own pair may go on or restart;
    /// once its pair is gone the slot is empty and its bytes are released.
    #[test]
    fn a_load_in_progress_belongs_to_its_queue_pair() {
        let p = programs();
        let pind = ProgramIndex(4);
        let img = ret42();
        assert_eq!(raw_chunk(&p, C1, pind, 16, 0, &img[..8]).unwrap(), 8);
        for offset in [0, 8] {
            let chunk = &img[offset as usize..];
            let e = raw_chunk(&p, C2, pind, 16, offset, chunk).unwrap_err();
            assert_eq!(e.status(), Status::ProgramInUse, "{e}");
            assert!(e.to_string().contains("another queue pair"), "{e}");
        }
        // The owner's load was not disturbed: it restarts, then completes.
        assert_eq!(raw_chunk(&p, C1, pind, 16, 0, &img[..8]).unwrap(), 8);
        assert_eq!(raw_chunk(&p, C1, pind, 16, 8, &img[8..]).unwrap(), 16);
        assert_eq!(p.list()[0].state, ProgramState::Loaded);
        assert_eq!(p.abandon_loads(C1), 0, "a loaded program is not abandoned");
        p.unload(DEVICE_CLIENT, pind, None).unwrap();

        // A pair that goes away mid-load releases the slot and its bytes.
        raw_chunk(&p, C1, pind, 16, 0, &img[..8]).unwrap();
        assert_eq!(p.lock().bytes_total, 16);
        assert_eq!(p.abandon_loads(C2), 0);
        assert_eq!(p.abandon_loads(C1), 1);
        assert!(p.list().is_empty());
        assert_eq!(p.lock().bytes_total, 0);
        assert_eq!(raw_chunk(&p, C2, pind, 16, 0, &img).unwrap(), 16);
    }

    #[test]
    fn transition_table() {
        use ProgramState::*;
        assert!(can_transition(Empty, Loaded));
        assert!(can_transition(Active, Loaded));
        assert!(!can_transition(Empty, Active));
        assert!(!can_transition(Loading, Active));
        assert!(!can_transition(Active, Active));
        let _ = std::mem::size_of::<Insn>();
    }

    #[test]
    fn lifecycle_status_codes() {
        let p = programs();
        let pind = ProgramIndex(3);
        assert_eq!(p.begin_run(pind).unwrap_err().status(), Status::NoProgram);
        assert_eq!(
            p.begin_run(ProgramIndex(PROGRAM_SLOTS_COUNT))
                .unwrap_err()
                .status(),
            Status::InvalidProgramIndex
        );
        let img = ret42();
        assert_eq!(raw_chunk(&p, C1, pind, 16, 0, &img[..8]).unwrap(), 8);
        assert_eq!(p.list()[0].state, ProgramState::Loading);
        assert_eq!(p.begin_run(pind).unwrap_err().status(), Status::NoProgram);
        assert_eq!(
            raw_chunk(&p, C1, pind, 16, 4, &img[8..12])
                .unwrap_err()
                .status(),
            Status::InvalidField
        );
        assert_eq!(raw_chunk(&p, C1, pind, 16, 8, &img[8..]).unwrap(), 16);
        assert_eq!(p.list()[0].state, ProgramState::Loaded);
        assert_eq!(
            raw_chunk(&p, C1, pind, 16, 0, &img).unwrap_err().status(),
            Status::ProgramInUse
        );
        assert_eq!(
            p.begin_run(pind).unwrap_err().status(),
            Status::ProgramNotActivated
        );
        assert_eq!(
            p.deactivate(DEVICE_CLIENT, pind).unwrap_err().status(),
            Status::ProgramNotActivated
        );
        p.activate(pind, EngineKind::Interpreter).unwrap();
        {
            let t = p.begin_run(pind).unwrap();
            assert_eq!(t.engine.program().insns().len(), 2);
            assert_eq!(
                p.deactivate(DEVICE_CLIENT, pind).unwrap_err().status(),
                Status::ProgramInUse
            );
            assert_eq!(
                p.unload(DEVICE_CLIENT, pind, None).unwrap_err().status(),
                Status::ProgramInUse
            );
        }
        assert_eq!(p.list()[0].executions, 1);
        p.deactivate(DEVICE_CLIENT, pind).unwrap();
        p.unload(DEVICE_CLIENT, pind, None).unwrap();
        assert!(p.list().is_empty());
        assert_eq!(
            p.unload(DEVICE_CLIENT, pind, None).unwrap_err().status(),
            Status::NoProgram
        );
    }

    #[test]
    fn bad_images_are_refused_at_load() {
        let p = programs();
        let e = raw_chunk(&p, C1, ProgramIndex(0), 5, 0, &[1, 2, 3, 4, 5]).unwrap_err();
        assert_eq!(e.status(), Status::InvalidProgramData);
        let e = p
            .load_chunk(
                C1,
                LoadChunk {
                    pind: ProgramIndex(0),
                    ptype: ProgramType::Elf,
                    total_size_bytes: 4,
                    offset: 0,
                    data: b"\x7fELX",
                    entry: None,
                },
            )
            .unwrap_err();
        assert_eq!(e.status(), Status::InvalidProgramData);
        assert!(p.list().is_empty());
        // An unverifiable program loads (it parses) but does not activate: jump out of range.
        let bad = [0x05, 0, 0x10, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        raw_chunk(&p, C1, ProgramIndex(1), 16, 0, &bad).unwrap();
        let e = p
            .activate(ProgramIndex(1), EngineKind::Interpreter)
            .unwrap_err();
        assert_eq!(e.status(), Status::InvalidProgramData);
        assert_eq!(e.component(), "verifier");
    }

    #[test]
    fn active_and_byte_limits() {
        let p = programs();
        let img = ret42();
        for i in 0..=PROGRAMS_ACTIVE_MAX {
            raw_chunk(&p, C1, ProgramIndex(i), 16, 0, &img).unwrap();
        }
        for i in 0..PROGRAMS_ACTIVE_MAX {
            p.activate(ProgramIndex(i), EngineKind::Interpreter)
                .unwrap();
        }
        let e = p
            .activate(ProgramIndex(PROGRAMS_ACTIVE_MAX), EngineKind::Interpreter)
            .unwrap_err();
        assert_eq!(e.status(), Status::MaximumProgramsActivated);
        // The small programs above take a few bytes, so one fewer full-size one fits.
        let big = (PROGRAM_BYTES_TOTAL_MAX / u64::from(PROGRAM_SIZE_MAX)) as u16 - 1;
        for i in 0..big {
            let pind = ProgramIndex(40 + i);
            raw_chunk(&p, C1, pind, PROGRAM_SIZE_MAX, 0, &img).unwrap();
        }
        let e = raw_chunk(&p, C1, ProgramIndex(60), PROGRAM_SIZE_MAX, 0, &img).unwrap_err();
        assert_eq!(e.status(), Status::MaximumProgramBytesExceeded);
    }

    #[test]
    fn persists_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(FunctionTable::new());
        let p = Programs::new(Arc::clone(&table), true, Some(dir.path().to_path_buf()));
        for pind in [2, 5, 6, 7] {
            raw_chunk(&p, C1, ProgramIndex(pind), 16, 0, &ret42()).unwrap();
        }
        p.activate(ProgramIndex(2), EngineKind::Interpreter)
            .unwrap();
        p.persist_as(C1, ProgramIndex(2), "two").unwrap();
        p.persist_as(C1, ProgramIndex(5), "five").unwrap();
        p.persist_as(C1, ProgramIndex(6), "six").unwrap();
        p.unload(DEVICE_CLIENT, ProgramIndex(6), None).unwrap();
        // Slot 7 is loaded and active but not persistent: never written.
        p.activate(ProgramIndex(7), EngineKind::Interpreter)
            .unwrap();
        let mut files: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["2.img", "2.json", "5.img", "5.json"]);
        drop(p);
        let q = Programs::new(table, true, Some(dir.path().to_path_buf()));
        assert!(q.restore().is_empty());
        let list: Vec<_> = q
            .list()
            .into_iter()
            .map(|i| (i.pind.0, i.state, i.persistent, i.owner))
            .collect();
        assert_eq!(
            list,
            [
                (2, ProgramState::Active, Some("two".to_string()), None),
                (5, ProgramState::Loaded, Some("five".to_string()), None)
            ]
        );
    }

    /// The generation of the program in `pind`, as listed.
    fn generation_of(p: &Programs, pind: ProgramIndex) -> u64 {
        let listed = p.list().into_iter().find(|i| i.pind == pind);
        listed.and_then(|i| i.generation).expect("an occupied slot")
    }

    /// Every load gives its program a generation no other program had, kept while it
    /// stays loaded (activation, runs, persistence); a run naming a generation the slot
    /// no longer holds is refused with ProgramChanged naming both, and nothing runs. A
    /// restarted device's programs get generations past every earlier one.
    #[test]
    fn a_run_naming_a_replaced_programs_generation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let table = Arc::new(FunctionTable::new());
        let p = Programs::new(Arc::clone(&table), true, Some(dir.path().to_path_buf()));
        let pind = ProgramIndex(3);
        raw_chunk(&p, C1, pind, 16, 0, &ret42()).unwrap();
        let first = generation_of(&p, pind);
        p.activate(pind, EngineKind::Interpreter).unwrap();
        drop(p.begin_run_of(pind, Some(first)).unwrap());
        assert_eq!(generation_of(&p, pind), first);
        p.unload(DEVICE_CLIENT, pind, None).unwrap();
        assert_eq!(
            p.begin_run_of(pind, Some(first)).unwrap_err().status(),
            Status::NoProgram
        );
        raw_chunk(&p, C2, pind, 16, 0, &ret42()).unwrap();
        let second = generation_of(&p, pind);
        assert!(second > first);
        for state in ["loaded", "active"] {
            let e = p.begin_run_of(pind, Some(first)).unwrap_err();
            assert_eq!(e.status(), Status::ProgramChanged, "{state}");
            let text = e.to_string();
            assert!(text.contains(&first.to_string()) && text.contains(&second.to_string()));
            p.activate(pind, EngineKind::Interpreter)
                .unwrap_or_default();
        }
        assert_eq!(p.list()[0].executions, 0, "the refused runs did not count");
        drop(p.begin_run_of(pind, Some(second)).unwrap());
        drop(p.begin_run_of(pind, None).unwrap());
        p.persist_as(C2, pind, "three").unwrap();
        assert_eq!(generation_of(&p, pind), second);
        drop(p);
        let q = Programs::new(table, true, Some(dir.path().to_path_buf()));
        assert!(q.restore().is_empty());
        let restored = generation_of(&q, pind);
        assert!(restored > second);
        let e = q.begin_run_of(pind, Some(second)).unwrap_err();
        assert_eq!(e.status(), Status::ProgramChanged);
    }

    /// An unload naming a generation the slot no longer holds is refused with
    /// ProgramChanged naming the slot and both generations, and the program in the slot
    /// stays loaded and active; one naming the generation the slot holds unloads it.
    #[test]
    fn an_unload_naming_a_replaced_programs_generation_is_refused() {
        let p = programs();
        let pind = ProgramIndex(2);
        raw_chunk(&p, C1, pind, 16, 0, &ret42()).unwrap();
        p.persist_as(C1, pind, "shared").unwrap();
        let looked_up = generation_of(&p, pind);
        // Another client replaces it between the look-up and the unload.
        p.unload(C2, pind, None).unwrap();
        raw_chunk(&p, C2, pind, 16, 0, &ret42()).unwrap();
        p.persist_as(C2, pind, "shared").unwrap();
        p.activate(pind, EngineKind::Interpreter).unwrap();
        let replacement = generation_of(&p, pind);
        let e = p.unload(C1, pind, Some(looked_up)).unwrap_err();
        assert_eq!(e.status(), Status::ProgramChanged);
        let text = e.to_string();
        for named in [
            "slot 2",
            &looked_up.to_string(),
            &replacement.to_string(),
            "unload",
        ] {
            assert!(text.contains(named), "{named} in {text}");
        }
        assert_eq!(generation_of(&p, pind), replacement);
        assert_eq!(p.list()[0].state, ProgramState::Active);
        drop(p.begin_run_of(pind, Some(replacement)).unwrap());
        p.unload(C1, pind, Some(replacement)).unwrap();
        assert!(p.list().is_empty());
        let e = p.unload(C1, pind, Some(replacement)).unwrap_err();
        assert_eq!(e.status(), Status::NoProgram);
    }

    /// A program goes with its owner (at once, or when its last run ends, no run
    /// starting meanwhile), a persistent one does not; only its owner names it, and a
    /// name belongs to one slot.
    #[test]
    fn programs_go_with_their_owner_unless_persistent() {
        let p = programs();
        for pind in [1, 2, 3] {
            raw_chunk(&p, C1, ProgramIndex(pind), 16, 0, &ret42()).unwrap();
            p.activate(ProgramIndex(pind), EngineKind::Interpreter)
                .unwrap();
        }
        raw_chunk(&p, C2, ProgramIndex(4), 16, 0, &ret42()).unwrap();
        let e = p.persist_as(C2, ProgramIndex(3), "x").unwrap_err();
        assert_eq!(e.status(), Status::ProgramInUse);
        p.persist_as(C1, ProgramIndex(3), "x").unwrap();
        let e = p.persist_as(C2, ProgramIndex(4), "x").unwrap_err();
        assert_eq!(
            e,
            ProgramError::NameTaken {
                name: "x".into(),
                pind: 3
            }
        );
        let ticket = p.begin_run(ProgramIndex(2)).unwrap();
        assert_eq!(p.release_client(C1), 2, "slots 1 and 2; 3 is persistent");
        let left: Vec<u16> = p.list().iter().map(|i| i.pind.0).collect();
        assert_eq!(left, [2, 3, 4], "slot 2 waits for its run");
        assert_eq!(p.lock().active_count, 2);
        assert_eq!(
            p.begin_run(ProgramIndex(2)).unwrap_err().status(),
            Status::NoProgram
        );
        assert_eq!(
            p.persist_as(C1, ProgramIndex(2), "y").unwrap_err().status(),
            Status::ProgramInUse
        );
        drop(ticket);
        let left: Vec<u16> = p.list().iter().map(|i| i.pind.0).collect();
        assert_eq!(left, [3, 4]);
        assert_eq!(p.lock().active_count, 1);
        assert_eq!(p.lock().bytes_total, 32);
        assert_eq!(p.release_client(C2), 1);
        assert_eq!(p.list().len(), 1);
    }

    /// Only a program's owner may unload or deactivate it: another client (of the same
    /// user or another) cannot empty the slot and put its own program where the owner's
    /// next run would hand it the owner's memory. A persistent program has no owner.
    #[test]
    fn only_the_owner_unloads_or_deactivates_its_program() {
        let p = programs();
        raw_chunk(&p, C1, ProgramIndex(1), 16, 0, &ret42()).unwrap();
        p.activate(ProgramIndex(1), EngineKind::Interpreter)
            .unwrap();
        for e in [
            p.unload(C2, ProgramIndex(1), None).unwrap_err(),
            p.deactivate(C2, ProgramIndex(1)).unwrap_err(),
        ] {
            assert!(matches!(e, ProgramError::NotOwner { pind: 1, .. }), "{e}");
            assert_eq!(e.status(), Status::ProgramInUse);
            assert!(e.to_string().contains("only its loader may"), "{e}");
        }
        assert_eq!(p.list().len(), 1, "the slot is untouched");
        assert!(p.begin_run(ProgramIndex(1)).is_ok());
        p.deactivate(C1, ProgramIndex(1)).unwrap();
        p.unload(C1, ProgramIndex(1), None).unwrap();
        raw_chunk(&p, C1, ProgramIndex(2), 16, 0, &ret42()).unwrap();
        p.persist_as(C1, ProgramIndex(2), "shared").unwrap();
        p.unload(C2, ProgramIndex(2), None).unwrap();
        assert!(p.list().is_empty());
    }

    /// A state directory from before programs had owners: its records carry no name.
    /// Each program comes back persistent as `slotN`, loaded but not active, and its
    /// record is rewritten with that name.
    #[test]
    fn records_without_a_name_come_back_named_by_slot_and_inactive() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("7.img"), ret42()).unwrap();
        fs::write(
            dir.path().join("7.json"),
            br#"{"ptype": "raw", "entry": null, "engine": "jit"}"#,
        )
        .unwrap();
        let p = Programs::new(
            Arc::new(FunctionTable::new()),
            true,
            Some(dir.path().to_path_buf()),
        );
        assert!(p.restore().is_empty());
        let list = p.list();
        assert_eq!(list.len(), 1);
        assert_eq!(
            (
                list[0].pind.0,
                list[0].state,
                list[0].persistent.as_deref(),
                list[0].owner
            ),
            (7, ProgramState::Loaded, Some("slot7"), None)
        );
        let record: SlotRecord =
            serde_json::from_slice(&fs::read(dir.path().join("7.json")).unwrap()).unwrap();
        assert_eq!(record.name.as_deref(), Some("slot7"));
    }
}

#[cfg(test)]
mod tiering_tests {
    use super::*;
    use csx_ebpf::count::ExecCounts;
    use csx_ebpf::engine::{RunOptions, RunOutcome};
    use csx_ebpf::helper::ConformanceHost;
    use csx_ebpf::memory::MemoryMap;

    use crate::status::ToStatus;

    /// Sums i * 31 + (i >> 3) for i below r1, with a data-dependent branch: a loop of
    /// several blocks, so block counts can differ between engines if one is wrong.
    fn loop_image() -> Vec<u8> {
        let src = "mov %r0, 0\nmov %r2, 0\nloop:\njge %r2, %r1, done\nmov %r3, %r2\n\
                   mul %r3, 31\nmov %r4, %r2\nrsh %r4, 3\njset %r2, 4, odd\nadd %r0, %r3\n\
                   ja next\nodd:\nxor %r0, %r4\nnext:\nadd %r2, 1\nja loop\ndone:\nexit";
        let insns = csx_ebpf::asm::assemble(src).expect("the test program assembles");
        csx_ebpf::isa::encode_all(&insns)
    }

    /// One counted run of slot `pind`: outcome and block counts.
    fn run(p: &Programs, pind: ProgramIndex, n: u64, fuel: u64) -> (RunOutcome, Vec<u64>) {
        let t = p.begin_run(pind).unwrap();
        let counts = ExecCounts::new(t.engine.program().blocks());
        let opts = RunOptions {
            fuel,
            counts: Some(&counts),
            ..RunOptions::default()
        };
        let mut map = MemoryMap::new();
        let out = t
            .engine
            .run(&mut map, [n, 0, 0, 0, 0], &opts, &mut ConformanceHost);
        (out, counts.values())
    }

    /// A JIT activation runs before its promotion (on the quick tier, x86-64) and after
    /// it (on Cranelift's code) with the interpreter's result, fuel and block counts,
    /// traps included.
    #[test]
    fn a_tiered_activation_runs_before_and_after_promotion() {
        let p = Programs::new(Arc::new(FunctionTable::new()), true, None)
            .with_counting(true)
            .with_promotion(Some(Promotion::Manual));
        let (jit, interp) = (ProgramIndex(1), ProgramIndex(2));
        for pind in [jit, interp] {
            let img = loop_image();
            let len = img.len() as u32;
            tests::raw_chunk(&p, ClientId(1), pind, len, 0, &img).unwrap();
        }
        let timing = p.activate(jit, EngineKind::Jit).unwrap();
        p.activate(interp, EngineKind::Interpreter).unwrap();
        assert_eq!(p.jit_tier(interp).unwrap(), None);
        let first = if cfg!(target_arch = "x86_64") {
            Tier::Quick
        } else {
            Tier::Optimized
        };
        assert_eq!(p.jit_tier(jit).unwrap(), Some(first));
        assert!(timing.compile > Duration::ZERO);
        let cases = [(100, 1_000_000), (100, 300), (0, 100), (20, 1_000_000)];
        for (n, fuel) in cases {
            let want = run(&p, interp, n, fuel);
            assert_eq!(run(&p, jit, n, fuel), want, "n {n} fuel {fuel}, {first:?}");
        }
        assert!(run(&p, interp, 100, 300).0.result.is_err(), "a fuel trap");
        assert_eq!(p.jit_tier(jit).unwrap(), Some(first), "manual promotion");
        p.optimize(jit).unwrap();
        assert_eq!(p.jit_tier(jit).unwrap(), Some(Tier::Optimized));
        for (n, fuel) in cases {
            let want = run(&p, interp, n, fuel);
            assert_eq!(run(&p, jit, n, fuel), want, "n {n} fuel {fuel}, optimized");
        }
        // Neither query nor promotion applies to an empty or inactive slot.
        p.deactivate(DEVICE_CLIENT, jit).unwrap();
        assert_eq!(
            p.jit_tier(jit).unwrap_err().status(),
            csx_proto::Status::ProgramNotActivated
        );
        assert_eq!(
            p.optimize(ProgramIndex(9)).unwrap_err().status(),
            csx_proto::Status::NoProgram
        );
    }

    /// Activating an image again takes the engine built last time (already promoted
    /// here), with the same results; the same raw image in another slot, or on the
    /// interpreter, does not.
    #[test]
    fn activating_the_same_image_again_reuses_its_engine() {
        let p = Programs::new(Arc::new(FunctionTable::new()), true, None)
            .with_promotion(Some(Promotion::Manual));
        let img = loop_image();
        let (a, b) = (ProgramIndex(1), ProgramIndex(2));
        for pind in [a, b] {
            tests::raw_chunk(&p, ClientId(1), pind, img.len() as u32, 0, &img).unwrap();
        }
        p.activate(a, EngineKind::Jit).unwrap();
        p.optimize(a).unwrap();
        let want = run(&p, a, 100, 1_000_000);
        p.deactivate(DEVICE_CLIENT, a).unwrap();
        let timing = p.activate(a, EngineKind::Jit).unwrap();
        assert_eq!(p.jit_tier(a).unwrap(), Some(Tier::Optimized), "kept engine");
        assert_eq!(timing.compile, Duration::ZERO, "nothing compiled");
        assert_eq!(run(&p, a, 100, 1_000_000), want);
        let first = if cfg!(target_arch = "x86_64") {
            Tier::Quick
        } else {
            Tier::Optimized
        };
        p.activate(b, EngineKind::Jit).unwrap();
        assert_eq!(
            p.jit_tier(b).unwrap(),
            Some(first),
            "a raw image's slot is its name"
        );
        p.deactivate(DEVICE_CLIENT, a).unwrap();
        p.activate(a, EngineKind::Interpreter).unwrap();
        assert_eq!(
            p.jit_tier(a).unwrap(),
            None,
            "the interpreter is another engine"
        );
        assert_eq!(run(&p, a, 100, 1_000_000), want);
    }

    /// Without tiering, activation waits for Cranelift: the program is not tiered.
    #[test]
    fn without_tiering_activation_compiles_with_cranelift() {
        let p = Programs::new(Arc::new(FunctionTable::new()), true, None).with_tiering(false);
        let img = loop_image();
        let pind = ProgramIndex(0);
        tests::raw_chunk(&p, ClientId(1), pind, img.len() as u32, 0, &img).unwrap();
        p.activate(pind, EngineKind::Jit).unwrap();
        assert_eq!(p.jit_tier(pind).unwrap(), None);
        p.optimize(pind).unwrap();
        let t = p.begin_run(pind).unwrap();
        let mut map = MemoryMap::new();
        let out = t.engine.run(
            &mut map,
            [10, 0, 0, 0, 0],
            &RunOptions::default(),
            &mut ConformanceHost,
        );
        assert!(out.result.is_ok());
    }
}
