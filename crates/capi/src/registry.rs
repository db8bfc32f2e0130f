//! The handle tables. A C handle is a key into one of these tables, never a pointer the
//! library dereferences, so a null, stale, freed or wrong-kind handle is found out and
//! answered with `CS_INVALID_HANDLE` (or `CS_INVALID_EVENT`). Keys come from one counter
//! for every kind and are never reused.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};

use csx_host::proto::{MemHandle, ProgramIndex};
use csx_host::{Device, Session, SessionError};

use crate::status::CsStatus;

/// An open device.
#[derive(Debug)]
pub struct Dev {
    pub name: String,
    /// Shared with the sessions of its handles ([`Handle`]).
    pub device: Arc<Device>,
    /// `csxSetComputeLimits`: the fuel of this handle's compute requests (0: the device's
    /// default).
    pub fuel: AtomicU64,
    /// `csxSetComputeLimits`: their time limit in ms (0: the device's default).
    pub time_limit_ms: AtomicU32,
    /// The worker that runs this handle's queued (callback or event) requests in order.
    pub worker: crate::queue::Worker,
}

impl Dev {
    pub fn new(name: String, device: Device) -> Dev {
        Dev {
            name,
            device: Arc::new(device),
            fuel: AtomicU64::new(0),
            time_limit_ms: AtomicU32::new(0),
            worker: crate::queue::Worker::default(),
        }
    }
}

/// Where a fixed CSF id's program was found: its slot and its generation (`None` from a
/// device that predates generations: the run then names none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedSlot {
    pub pind: ProgramIndex,
    pub generation: Option<u64>,
}

/// What one device handle holds on its device: a [`Session`] with the memory allocated
/// and the CSFs downloaded through the handle (the memory is freed when the handle
/// closes; downloaded CSFs are device state and stay loaded), and its fixed-id lookups.
#[derive(Debug)]
pub struct Handle {
    /// Locked for one short command at a time (an allocation, a free, a load, the
    /// submission of an execution), never while an execution runs.
    session: Mutex<Session<'static>>,
    /// Fixed CSF id -> the slot its program was found in and the program's generation
    /// (`None` from a device that predates generations), which each run names so the
    /// device refuses it if the slot holds another program. Ids are never released; an
    /// entry goes when this handle unloads its slot, or when a run finds the slot empty,
    /// inactive or holding another program (the lookup is then made again).
    pub fixed: Mutex<HashMap<u32, FixedSlot>>,
}

impl Handle {
    pub fn new(dev: &Dev) -> Handle {
        Handle {
            session: Mutex::new(Session::shared(Arc::clone(&dev.device))),
            fixed: Mutex::new(HashMap::new()),
        }
    }

    /// The session, for one short step.
    pub fn session(&self) -> MutexGuard<'_, Session<'static>> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The generation of the program this handle found in slot `pind` by a fixed id,
    /// when it knows one.
    pub fn generation_in(&self, pind: ProgramIndex) -> Option<u64> {
        let fixed = self.fixed.lock().unwrap_or_else(|p| p.into_inner());
        fixed
            .values()
            .find(|found| found.pind == pind)
            .and_then(|found| found.generation)
    }

    /// Forgets the fixed ids found in slot `pind`.
    pub fn forget_slot(&self, pind: ProgramIndex) {
        let mut fixed = self.fixed.lock().unwrap_or_else(|p| p.into_inner());
        fixed.retain(|_, found| found.pind != pind);
    }

    /// Frees the memory allocated through the handle (the handle is closing); the
    /// first failure.
    pub fn release(&self) -> Result<(), SessionError> {
        let mut s = self.session();
        let freed = s.free_all();
        let forgotten = s.unload_all();
        freed.and(forgotten)
    }
}

/// A device-memory allocation.
#[derive(Clone, Debug)]
pub struct Mem {
    /// The device handle that allocated it (closing that handle frees it).
    pub dev: u64,
    pub handle: MemHandle,
    pub size: u64,
    /// Its host mapping, when the caller asked for one (see [`crate::mapping`]); its
    /// device allocation then holds `size` rounded up to whole pages.
    pub map: Option<Arc<crate::mapping::Mapping>>,
}

/// An event: the last completion signalled to it (status, context, the failure's
/// message), until polled.
#[derive(Debug, Default)]
pub struct Event {
    pub done: Option<(CsStatus, usize, String)>,
}

/// A batch: entries (copies of the caller's requests) and their edges.
#[derive(Debug, Default)]
pub struct Batch {
    pub max: usize,
    pub entries: Vec<crate::api::Desc>,
    /// `(a, b)`: entry `a` runs before entry `b`.
    pub edges: Vec<(usize, usize)>,
}

/// Every table.
#[derive(Debug, Default)]
pub struct Registry {
    next: u64,
    pub devices: HashMap<u64, Arc<Dev>>,
    /// What each open device handle holds (same keys as `devices`).
    pub handles: HashMap<u64, Arc<Handle>>,
    pub mems: HashMap<u64, Mem>,
    pub events: HashMap<u64, Event>,
    pub batches: HashMap<u64, Batch>,
    /// File handles (`csxOpenFile`): a path of the device's file store.
    pub files: HashMap<u64, String>,
    /// Queued requests in flight (a request leaves when it completes or is aborted).
    pub requests: HashMap<u64, Arc<crate::queue::Request>>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Runs `f` on the tables. No device call happens inside: callers clone what they need.
pub fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard: MutexGuard<'_, Option<Registry>> =
        REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(Registry::default))
}

impl Registry {
    /// A fresh key (never 0, never reused).
    pub fn key(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// The key a handle carries.
pub fn key_of(handle: *mut c_void) -> u64 {
    handle as usize as u64
}

/// The handle of a key.
pub fn handle_of(key: u64) -> *mut c_void {
    key as usize as *mut c_void
}
