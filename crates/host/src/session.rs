//! A [`Session`]: one piece of work's programs and device memory, released when it
//! ends, and a [`Meter`] of what its commands cost.
//!
//! Every product crate does the same five things with a device: load and activate
//! programs, allocate device memory, stage data into it by Memory Copy, run executions
//! over it on the engines, read results back, and undo all of it on any failure. A
//! session does them one way:
//!
//! ```text
//! load / load_program + activate   a program into a free slot     (unloaded at the end)
//! load_program_at, leave_loaded    into a named slot; kept past the end on request
//! adopt, adopt_persistent          another's program, by slot or by persistent name
//!                                  (runs name its generation: never a replacement)
//! alloc / fill / write / free      device memory                  (freed at the end)
//! copy_file, start_copy_file+wait  file -> memory, on the device  (media bytes)
//! copy_to_file                     memory -> file, on the device
//! execute, execute_all             one run, or a batch at once on the engines
//! submit_execute + wait / abort    one run, waited for later (or elsewhere), abortable
//! read, read_file                  memory or a file -> the host   (bytes to host)
//! close                            release everything, the meter  (Drop: best effort)
//! ```
//!
//! It is synchronous and issues one command per call (a batch submits one Execute per
//! run, then waits for all of them): no hidden batching, so the protocol stays visible.
//! Releasing happens in [`Session::close`], which reports the first failure, and, best
//! effort, when a session is dropped: after an error (`?` returns past it) and while a
//! panic unwinds. Copies still in flight are waited for before their memory is freed.
//!
//! Modelled time ([`Meter::modelled_ns`]) is the data path's: commands issued one after
//! another add up; a batch run at once ([`Session::execute_all`]) costs its longest run
//! when it is no larger than the device's engine count, and the sum of its runs spread
//! over the engines otherwise. Setting up (loading, activating, allocating, filling and
//! freeing) is counted apart in [`Meter::setup_ns`].

use std::ops::Deref;
use std::sync::Arc;

use csx_proto::limits::{FILE_IO_SIZE_MAX, LOAD_CHUNK_SIZE_MAX, MEM_IO_SIZE_MAX};
use csx_proto::{
    errno, CommandId, Completion, CopySource, EngineKind, MemHandle, MemRange, Op, ProgramIndex,
    ProgramType, Reply, WireTrap,
};

use crate::{CallError, Device, ExecuteRequest, Execution};

/// What a session's commands cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meter {
    /// Modelled device time of the data path, ns (see the module doc for batches).
    pub modelled_ns: u64,
    /// Modelled time of setting up: program loads and activations, memory
    /// allocations, fills and frees.
    pub setup_ns: u64,
    /// Bytes the device sent the host (memory and file reads).
    pub bytes_to_host: u64,
    /// Bytes the host sent the device (memory writes, program images).
    pub bytes_from_host: u64,
    /// Bytes read from the media into device memory (Memory Copy from files).
    pub media_bytes: u64,
    /// Bytes of file copies the device served from its resident memory instead of its
    /// media ([`Session::set_resident`]).
    pub resident_bytes: u64,
    /// Fuel the executions used.
    pub fuel: u64,
    /// Commands issued.
    pub commands: u64,
    /// Executions issued.
    pub executions: u64,
    /// Device wall ns the executions ran (each run's own time on its engine, summed:
    /// runs at once on several engines add up).
    pub execute_ns: u64,
    /// The executions' part of the wall time: per batch of runs at once, its longest
    /// run's execute ns, summed over batches.
    pub execute_span_ns: u64,
    /// Device ns spent verifying and compiling programs at activation.
    pub prepare_ns: u64,
}

impl Meter {
    /// What was added since `earlier` (a copy of this meter taken before).
    pub fn since(&self, earlier: &Meter) -> Meter {
        let mut d = *self;
        d.for_each(earlier, |x, e| *x -= e);
        d
    }

    /// Adds `other` to this meter.
    pub fn add(&mut self, other: &Meter) {
        self.for_each(other, |x, o| *x += o);
    }

    fn for_each(&mut self, other: &Meter, mut f: impl FnMut(&mut u64, u64)) {
        f(&mut self.modelled_ns, other.modelled_ns);
        f(&mut self.setup_ns, other.setup_ns);
        f(&mut self.bytes_to_host, other.bytes_to_host);
        f(&mut self.bytes_from_host, other.bytes_from_host);
        f(&mut self.media_bytes, other.media_bytes);
        f(&mut self.resident_bytes, other.resident_bytes);
        f(&mut self.fuel, other.fuel);
        f(&mut self.commands, other.commands);
        f(&mut self.executions, other.executions);
        f(&mut self.execute_ns, other.execute_ns);
        f(&mut self.execute_span_ns, other.execute_span_ns);
        f(&mut self.prepare_ns, other.prepare_ns);
    }
}

/// Why a session's command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A command failed: `what` names it and what it worked on.
    #[error("{what}: {source}")]
    Device {
        what: String,
        #[source]
        source: CallError,
    },
    /// A program trapped.
    #[error("program {program} trapped: {trap}")]
    Trap { program: String, trap: WireTrap },
    /// A program returned a negative `CSX_E*` code where a count was expected
    /// ([`Session::execute_all_r0`]).
    #[error("program {program} returned {r0} ({code}){detail}")]
    Failed {
        program: String,
        r0: i64,
        code: &'static str,
        /// The first registered function that failed during the run, if one did.
        detail: String,
    },
    /// A copy from a file moved fewer bytes than asked (the file is shorter).
    #[error("{path}: staged {found} bytes at {offset}, expected {expected}")]
    ShortCopy {
        path: String,
        offset: u64,
        found: u64,
        expected: u64,
    },
    /// No persistent program is kept under this name (any more).
    #[error("no program is kept under the name {program:?} on the device (csx program list shows the names)")]
    NotLoaded { program: String },
    /// A read returned fewer bytes than asked.
    #[error("{what}: read {found} bytes, expected {expected}")]
    ShortRead {
        what: String,
        found: u64,
        expected: u64,
    },
}

impl SessionError {
    fn device(what: impl Into<String>, source: CallError) -> SessionError {
        SessionError::Device {
            what: what.into(),
            source,
        }
    }
}

/// A copy started by [`Session::start_copy_file`], not yet waited for.
#[derive(Debug)]
#[must_use = "every started copy must be waited for"]
pub struct PendingCopy {
    id: CommandId,
    path: String,
    offset: u64,
    len: u64,
    /// Files after the first of a copy of several ([`Session::start_copy_files`]).
    more: usize,
    /// Every range of the copy, `(path, offset, len)`, when the session records them
    /// ([`Session::record_file_copies`]); empty otherwise.
    ranges: Vec<(String, u64, u64)>,
}

/// An execution [`Session::submit_execute`] started, not yet waited for: its command id
/// for [`Session::abort`], waited for with [`Session::wait_submitted`] or, by a caller
/// that keeps its session behind a lock, with [`Submitted::wait_on`] outside it and
/// [`Session::finish_submitted`] back inside.
#[derive(Debug)]
#[must_use = "every submitted execution must be waited for"]
pub struct Submitted {
    id: CommandId,
    pind: ProgramIndex,
}

impl Submitted {
    /// The execution's command id.
    pub fn id(&self) -> CommandId {
        self.id
    }

    /// Waits for the run on `dev`, the session's device, without the session: hand the
    /// result to [`Session::finish_submitted`].
    pub fn wait_on(&self, dev: &Device) -> Result<Execution, CallError> {
        let c = dev.client().wait(self.id, None)?;
        Execution::from_completion(c.expect("a wait without a timeout returns a completion"))
    }
}

/// A parameter block (`args->params`): little-endian fields in order, each named as
/// in the C struct it mirrors, so a test can check the layout against the header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    bytes: Vec<u8>,
    fields: Vec<(&'static str, usize, usize)>,
}

impl Params {
    pub fn new() -> Params {
        Params::default()
    }

    /// Appends the 32-bit field `name`.
    pub fn u32(mut self, name: &'static str, v: u32) -> Params {
        self.fields.push((name, self.bytes.len(), 4));
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends the 64-bit field `name`.
    pub fn u64(mut self, name: &'static str, v: u64) -> Params {
        self.fields.push((name, self.bytes.len(), 8));
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// The fields: `(name, byte offset, size)`, in order.
    pub fn fields(&self) -> &[(&'static str, usize, usize)] {
        &self.fields
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// The device a session works on: borrowed, or shared (a session that outlives the
/// caller's stack frame, as a scan read batch by batch from Python does).
#[derive(Debug)]
enum DeviceRef<'d> {
    Borrowed(&'d Device),
    Shared(Arc<Device>),
}

impl Deref for DeviceRef<'_> {
    type Target = Device;

    fn deref(&self) -> &Device {
        match self {
            DeviceRef::Borrowed(d) => d,
            DeviceRef::Shared(d) => d,
        }
    }
}

/// A program the session runs: loaded by it (unloaded at the end) or adopted.
#[derive(Debug)]
struct Held {
    name: String,
    pind: ProgramIndex,
    owned: bool,
    /// The generation of the program meant, when known: every run names it, so a
    /// program another client put in the slot meanwhile is refused, not run.
    generation: Option<u64>,
    /// Found by its persistent name ([`Session::adopt_persistent`]): a run refused for
    /// another program in the slot looks the name up again.
    by_name: bool,
    /// The slot the program is in now: `pind` (the caller's handle) unless a lookup
    /// by name found it moved.
    at: ProgramIndex,
}

impl Held {
    fn owned(name: &str, pind: ProgramIndex) -> Held {
        Held {
            name: name.to_string(),
            pind,
            owned: true,
            generation: None,
            by_name: false,
            at: pind,
        }
    }
}

/// Programs, memory and accounting of one piece of work on one device (see the module
/// doc).
#[derive(Debug)]
pub struct Session<'d> {
    dev: DeviceRef<'d>,
    engines: Option<u64>,
    programs: Vec<Held>,
    memory: Vec<MemHandle>,
    /// Allocations of `memory` kept idle for reuse ([`Session::keep`]), with their sizes.
    idle: Vec<(MemHandle, u64)>,
    /// Commands submitted and not yet waited for: releasing waits for them before
    /// freeing the memory they use.
    in_flight: Vec<CommandId>,
    /// File copies ask the device to keep their ranges resident.
    resident: bool,
    /// Per file copied with `resident` set: (bytes copied, bytes served resident).
    reuse: std::collections::BTreeMap<String, (u64, u64)>,
    /// With [`Session::record_file_copies`] on, every file range of the copies waited
    /// for, `(path, offset, len)`, in the order they were waited for
    /// ([`Session::file_copies`]); `None` (nothing kept) otherwise.
    file_copies: Option<Vec<(String, u64, u64)>>,
    pub meter: Meter,
}

impl<'d> Session<'d> {
    /// An empty session on `dev`.
    pub fn new(dev: &'d Device) -> Session<'d> {
        Session::with(DeviceRef::Borrowed(dev))
    }

    /// A session that holds its device (no borrow).
    pub fn shared(dev: Arc<Device>) -> Session<'static> {
        Session::with(DeviceRef::Shared(dev))
    }

    fn with(dev: DeviceRef<'d>) -> Session<'d> {
        Session {
            dev,
            engines: None,
            programs: Vec::new(),
            memory: Vec::new(),
            idle: Vec::new(),
            in_flight: Vec::new(),
            resident: false,
            reuse: std::collections::BTreeMap::new(),
            file_copies: None,
            meter: Meter::default(),
        }
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The device's compute engines (asked once).
    pub fn engines(&mut self) -> Result<u64, SessionError> {
        if let Some(n) = self.engines {
            return Ok(n);
        }
        let info = self
            .dev
            .identify()
            .map_err(|e| SessionError::device("identify", e))?;
        let n = u64::from(info.engines.max(1));
        self.engines = Some(n);
        Ok(n)
    }

    /// The name a program was loaded or adopted under (its slot otherwise).
    pub fn program_name(&self, pind: ProgramIndex) -> String {
        self.programs
            .iter()
            .rev()
            .find(|h| h.pind == pind)
            .map_or_else(|| format!("in slot {}", pind.0), |h| h.name.clone())
    }

    /// The slot of a program this session loaded or adopted under `name`, if it holds
    /// one (so a helper program is loaded once per session).
    pub fn find_program(&self, name: &str) -> Option<ProgramIndex> {
        self.programs
            .iter()
            .rev()
            .find(|h| h.name == name)
            .map(|h| h.pind)
    }

    /// One command, waited for; its cost goes to the data path's modelled time
    /// (`setup`: to the set-up time).
    fn call(
        &mut self,
        what: impl FnOnce() -> String,
        op: Op,
        setup: bool,
    ) -> Result<Completion, SessionError> {
        let c = self
            .dev
            .client()
            .call_ok(op)
            .map_err(|e| SessionError::device(what(), e))?;
        self.meter.commands += 1;
        if setup {
            self.meter.setup_ns += c.timing.modelled_ns;
        } else {
            self.meter.modelled_ns += c.timing.modelled_ns;
        }
        Ok(c)
    }

    // ---------------------------------------------------------------------------------
    // Programs.

    /// Loads `image` into a free slot and activates it on `engine`; unloaded when the
    /// session ends. `name` is the ELF entry function (ignored for raw images) and the
    /// name errors use.
    pub fn load(
        &mut self,
        name: &str,
        ptype: ProgramType,
        image: &[u8],
        engine: EngineKind,
    ) -> Result<ProgramIndex, SessionError> {
        let pind = self.load_program(name, ptype, image)?;
        self.activate(pind, engine)?;
        Ok(pind)
    }

    /// Loads `image` into a free slot without activating it (see [`Session::load`]);
    /// a slot another host takes meanwhile is skipped.
    pub fn load_program(
        &mut self,
        name: &str,
        ptype: ProgramType,
        image: &[u8],
    ) -> Result<ProgramIndex, SessionError> {
        self.load_program_entry(name, Some(name), ptype, image)
    }

    /// [`Session::load_program`] with the entry function given apart from the name
    /// errors use; `None`: the object's default entry (see `csx_ebpf::loader`).
    pub fn load_program_entry(
        &mut self,
        name: &str,
        entry: Option<&str>,
        ptype: ProgramType,
        image: &[u8],
    ) -> Result<ProgramIndex, SessionError> {
        let what = || format!("loading program {name}");
        let occupied: Vec<ProgramIndex> = self
            .dev
            .programs()
            .map_err(|e| SessionError::device(what(), e))?
            .into_iter()
            .map(|p| p.pind)
            .collect();
        let free = (0..csx_proto::limits::PROGRAM_SLOTS_COUNT)
            .map(ProgramIndex)
            .filter(|p| !occupied.contains(p));
        let mut last = None;
        for pind in free {
            match self.load_into((name, entry), pind, ptype, image) {
                Ok(()) => return Ok(pind),
                Err(e @ CallError::ProgramInUse(_)) => last = Some(e),
                Err(e) => return Err(SessionError::device(what(), e)),
            }
        }
        // Every slot is taken: the device's own refusal names the limit.
        let e = match last {
            Some(e) => e,
            None => match self.dev.load_program_any_slot(ptype, image, entry) {
                Ok(pind) => {
                    self.programs.push(Held::owned(name, pind));
                    return Ok(pind);
                }
                Err(e) => e,
            },
        };
        Err(SessionError::device(what(), e))
    }

    /// Sends `image` to slot `pind` chunk by chunk; the slot is the session's from the
    /// first accepted chunk.
    fn load_into(
        &mut self,
        (name, entry): (&str, Option<&str>),
        pind: ProgramIndex,
        ptype: ProgramType,
        image: &[u8],
    ) -> Result<(), CallError> {
        let total_size_bytes = u32::try_from(image.len()).unwrap_or(u32::MAX);
        let chunk = LOAD_CHUNK_SIZE_MAX as usize;
        let chunks = image.len().div_ceil(chunk).max(1);
        for i in 0..chunks {
            let data = &image[i * chunk..((i + 1) * chunk).min(image.len())];
            let c = self.dev.client().call_ok(Op::LoadProgram {
                pind,
                ptype,
                total_size_bytes,
                offset: (i * chunk) as u32,
                data: data.to_vec(),
                entry: entry.filter(|_| i == 0).map(str::to_string),
            })?;
            if i == 0 {
                self.programs.push(Held::owned(name, pind));
            }
            self.meter.commands += 1;
            self.meter.setup_ns += c.timing.modelled_ns;
            self.meter.bytes_from_host += data.len() as u64;
        }
        Ok(())
    }

    /// Loads `image` into slot `pind` (which must be empty), held by the session like
    /// [`Session::load_program`]'s; `entry` as for [`Session::load_program_entry`].
    pub fn load_program_at(
        &mut self,
        name: &str,
        entry: Option<&str>,
        pind: ProgramIndex,
        ptype: ProgramType,
        image: &[u8],
    ) -> Result<(), SessionError> {
        self.load_into((name, entry), pind, ptype, image)
            .map_err(|e| {
                SessionError::device(format!("loading program {name} into slot {}", pind.0), e)
            })
    }

    /// Leaves the program in `pind` loaded when the session ends (the session still
    /// names it in errors; [`Session::unload_slot`] still unloads it).
    pub fn leave_loaded(&mut self, pind: ProgramIndex) {
        for h in self.programs.iter_mut().filter(|h| h.pind == pind) {
            h.owned = false;
        }
    }

    /// Unloads the program slot `pind` holds, whoever loaded it, and forgets it. When
    /// the generation of the program meant there is known (`generation`, else that of
    /// a program the session adopted in that slot), the unload names it: a program
    /// another client put in the slot since stays and the unload fails
    /// ([`CallError::ProgramChanged`]).
    pub fn unload_slot(
        &mut self,
        pind: ProgramIndex,
        generation: Option<u64>,
    ) -> Result<(), SessionError> {
        let name = self.program_name(pind);
        let held = self
            .programs
            .iter()
            .find(|h| h.pind == pind && h.at == pind);
        let generation = generation.or(held.and_then(|h| h.generation));
        self.programs.retain(|h| h.pind != pind);
        let what = || format!("unloading program {name}");
        let op = Op::UnloadProgram { pind, generation };
        self.call(what, op, true)?;
        Ok(())
    }

    /// Unloads the persistent program kept under `name`: its slot and generation from
    /// one listing, and the unload names that generation, so a program another client
    /// put in the slot between the listing and the unload stays (the unload fails
    /// with [`CallError::ProgramChanged`]). Returns the slot it was in.
    pub fn unload_persistent(&mut self, name: &str) -> Result<ProgramIndex, SessionError> {
        let (pind, generation) = self.look_up(name)?;
        let what = || format!("unloading program {name} (slot {})", pind.0);
        let op = Op::UnloadProgram {
            pind,
            generation: Some(generation),
        };
        self.call(what, op, true)?;
        Ok(pind)
    }

    /// Verifies and prepares (for the JIT: compiles) the program in `pind` for `engine`.
    pub fn activate(&mut self, pind: ProgramIndex, engine: EngineKind) -> Result<(), SessionError> {
        let name = self.program_name(pind);
        let c = self.call(
            || format!("activating program {name}"),
            Op::ActivateProgram { pind, engine },
            true,
        )?;
        self.meter.prepare_ns += c.timing.prepare_ns;
        Ok(())
    }

    /// Runs the program someone else loaded into `pind` under `name`; the session
    /// never unloads it. Its runs name the generation the slot holds now (listed with
    /// opcode 0Eh; none on a device that predates generations), so a program put in
    /// the slot later is refused ([`CallError::ProgramChanged`]), never run.
    pub fn adopt(&mut self, name: &str, pind: ProgramIndex) {
        let generation = self.dev.programs_with_generations().ok().and_then(|list| {
            list.into_iter()
                .find(|p| p.pind == pind)
                .and_then(|p| p.generation)
        });
        self.programs.push(Held {
            name: name.to_string(),
            pind,
            owned: false,
            generation,
            by_name: false,
            at: pind,
        });
    }

    /// Runs the persistent program kept under `name` (`csx program load NAME`): its
    /// slot, from the listing with generations. Each run names the generation found; a
    /// run the device refuses because another program is in the slot now looks `name`
    /// up once more and runs it where it is (or fails naming it:
    /// [`SessionError::NotLoaded`]). The session never unloads it.
    pub fn adopt_persistent(&mut self, name: &str) -> Result<ProgramIndex, SessionError> {
        let (pind, generation) = self.look_up(name)?;
        self.programs.push(Held {
            name: name.to_string(),
            pind,
            owned: false,
            generation: Some(generation),
            by_name: true,
            at: pind,
        });
        Ok(pind)
    }

    /// The slot and generation of the persistent program `name`.
    fn look_up(&mut self, name: &str) -> Result<(ProgramIndex, u64), SessionError> {
        let list = self
            .dev
            .programs_with_generations()
            .map_err(|e| SessionError::device(format!("looking up program {name}"), e))?;
        self.meter.commands += 1;
        list.into_iter()
            .find(|p| p.persistent.as_deref() == Some(name))
            .and_then(|p| Some((p.pind, p.generation?)))
            .ok_or_else(|| SessionError::NotLoaded {
                program: name.to_string(),
            })
    }

    /// Unloads a program the session loaded, before the session ends.
    pub fn unload(&mut self, pind: ProgramIndex) -> Result<(), SessionError> {
        let Some(i) = self.programs.iter().position(|h| h.pind == pind) else {
            return Ok(());
        };
        let held = self.programs.remove(i);
        if held.owned {
            let what = || format!("unloading program {}", held.name);
            let op = Op::UnloadProgram {
                pind: held.at,
                generation: held.generation,
            };
            self.call(what, op, true)?;
        }
        Ok(())
    }

    /// Unloads every program the session loaded (it keeps its memory).
    pub fn unload_all(&mut self) -> Result<(), SessionError> {
        let mut first = None;
        while let Some(pind) = self.programs.last().map(|h| h.pind) {
            if let Err(e) = self.unload(pind) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    // ---------------------------------------------------------------------------------
    // Memory.

    /// Allocates `bytes` of device memory, freed when the session ends.
    pub fn alloc(&mut self, bytes: u64) -> Result<MemHandle, SessionError> {
        let c = self.call(
            || format!("allocating {bytes} bytes of device memory"),
            Op::MemAlloc { size_bytes: bytes },
            true,
        )?;
        let h = MemHandle(u32::try_from(c.value).expect("handles are u32 on the wire"));
        self.memory.push(h);
        Ok(h)
    }

    /// Frees an allocation of the session before it ends.
    pub fn free(&mut self, h: MemHandle) -> Result<(), SessionError> {
        let Some(i) = self.memory.iter().position(|&m| m == h) else {
            return Ok(());
        };
        self.memory.remove(i);
        self.idle.retain(|&(m, _)| m != h);
        self.call(
            || "freeing device memory".to_string(),
            Op::MemFree { handle: h },
            true,
        )?;
        Ok(())
    }

    /// Frees every allocation of the session (it keeps its programs).
    pub fn free_all(&mut self) -> Result<(), SessionError> {
        self.wait_in_flight();
        let mut first = None;
        while let Some(&h) = self.memory.last() {
            if let Err(e) = self.free(h) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// An allocation of at least `bytes` for work that hands it back with
    /// [`Session::keep`] (a stream of equal requests then reuses one): the smallest kept
    /// allocation that fits, else a new one of `bytes`. When the device refuses the new
    /// one and allocations are kept, those are freed (they may hold the memory it
    /// needs) and it is asked once more. Returns the handle and its size.
    pub fn take(&mut self, bytes: u64) -> Result<(MemHandle, u64), SessionError> {
        let best = self
            .idle
            .iter()
            .enumerate()
            .filter(|(_, &(_, size))| size >= bytes)
            .min_by_key(|(_, &(_, size))| size)
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(self.idle.swap_remove(i));
        }
        match self.alloc(bytes) {
            Ok(h) => Ok((h, bytes)),
            Err(_) if !self.idle.is_empty() => {
                self.free_idle()?;
                Ok((self.alloc(bytes)?, bytes))
            }
            Err(e) => Err(e),
        }
    }

    /// Keeps the session's allocation `h` of `bytes` idle for a later
    /// [`Session::take`]; it is freed by [`Session::free_idle`] or when the session
    /// ends.
    pub fn keep(&mut self, h: MemHandle, bytes: u64) {
        if self.memory.contains(&h) && !self.idle.iter().any(|&(m, _)| m == h) {
            self.idle.push((h, bytes));
        }
    }

    /// Frees every allocation kept idle (the first failure, after trying each).
    pub fn free_idle(&mut self) -> Result<(), SessionError> {
        let mut first = None;
        for (h, _) in std::mem::take(&mut self.idle) {
            if let Err(e) = self.free(h) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Allocations kept idle, and their bytes.
    pub fn idle(&self) -> (usize, u64) {
        (self.idle.len(), self.idle.iter().map(|&(_, n)| n).sum())
    }

    /// Sets `len` bytes of `h` from `offset` to `byte`.
    pub fn fill(
        &mut self,
        h: MemHandle,
        offset: u64,
        len: u64,
        byte: u8,
    ) -> Result<(), SessionError> {
        let op = Op::MemFill {
            handle: h,
            offset,
            len,
            byte,
        };
        self.call(|| format!("filling {len} bytes of device memory"), op, true)?;
        Ok(())
    }

    /// Writes `data` from the host at `offset` of `h`.
    pub fn write(&mut self, h: MemHandle, offset: u64, data: &[u8]) -> Result<(), SessionError> {
        for (i, piece) in data.chunks(MEM_IO_SIZE_MAX as usize).enumerate() {
            let op = Op::MemWrite {
                handle: h,
                offset: offset + i as u64 * MEM_IO_SIZE_MAX,
                data: piece.to_vec(),
            };
            let n = piece.len();
            self.call(|| format!("writing {n} bytes of device memory"), op, false)?;
            self.meter.bytes_from_host += n as u64;
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------
    // Copies on the device.

    /// From now on, file copies ([`Session::copy_file`], [`Session::start_copy_file`])
    /// ask the device to keep the ranges they read resident in its memory and to serve
    /// them from there while the file is unchanged (`CopySource::ResidentFile`; a device
    /// without resident memory reads its media as before). [`Meter::resident_bytes`]
    /// and [`Session::reuse`] say what was served so.
    pub fn set_resident(&mut self, on: bool) {
        self.resident = on;
    }

    /// Whether file copies ask the device to keep their ranges resident
    /// ([`Session::set_resident`]).
    pub fn is_resident(&self) -> bool {
        self.resident
    }

    /// Per file copied while [`Session::set_resident`] was on: (bytes copied, bytes
    /// the device served from resident memory), by path.
    pub fn reuse(&self) -> &std::collections::BTreeMap<String, (u64, u64)> {
        &self.reuse
    }

    /// Every file range of the session's Memory Copies that completed and were waited
    /// for, `(path, offset, len)`, in the order they were waited for (a copy of several
    /// ranges adds each, in its order): the file bytes [`Meter::media_bytes`] counts
    /// (and, with [`Session::set_resident`], those served from resident memory). A
    /// copy started and never waited for (released at the end) is not among them. A
    /// media yardstick reads the same bytes again.
    /// Empty unless [`Session::record_file_copies`] was turned on first.
    pub fn file_copies(&self) -> &[(String, u64, u64)] {
        self.file_copies.as_deref().unwrap_or_default()
    }

    /// Keep every waited copy's file ranges for [`Session::file_copies`] from now on
    /// (off by default: a long session would otherwise hold one entry per copy).
    pub fn record_file_copies(&mut self) {
        self.file_copies.get_or_insert_with(Vec::new);
    }

    fn copy_op(&self, path: &str, offset: u64, len: u64, dst: MemHandle, dst_offset: u64) -> Op {
        let path = path.to_string();
        let source = match self.resident {
            true => CopySource::ResidentFile { path, offset, len },
            false => CopySource::File { path, offset, len },
        };
        Op::MemCopy {
            dst,
            dst_offset,
            sources: vec![source],
        }
    }

    /// Stages `len` bytes of the device file `path` from `offset` into `dst` at
    /// `dst_offset` (a Memory Copy: on the device, from the media). A shorter file is
    /// an error.
    pub fn copy_file(
        &mut self,
        path: &str,
        offset: u64,
        len: u64,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<(), SessionError> {
        let op = self.copy_op(path, offset, len, dst, dst_offset);
        let what = || format!("staging {len} bytes of {path} at {offset}");
        let c = self.call(what, op, false)?;
        self.copied(path, offset, len, &c)?;
        if let Some(kept) = &mut self.file_copies {
            kept.push((path.to_string(), offset, len));
        }
        Ok(())
    }

    fn copied(
        &mut self,
        path: &str,
        offset: u64,
        len: u64,
        c: &Completion,
    ) -> Result<(), SessionError> {
        if c.value != len {
            return Err(SessionError::ShortCopy {
                path: path.to_string(),
                offset,
                found: c.value,
                expected: len,
            });
        }
        let resident = match c.reply {
            Reply::Copied { resident_bytes } => resident_bytes.min(len),
            _ => 0,
        };
        self.meter.media_bytes += len - resident;
        self.meter.resident_bytes += resident;
        if self.resident {
            let e = self.reuse.entry(path.to_string()).or_default();
            e.0 += len;
            e.1 += resident;
        }
        Ok(())
    }

    /// Starts [`Session::copy_file`] without waiting: the copy runs on the device's
    /// transfer workers while the caller does other work. Every started copy must go
    /// to [`Session::wait_copies`] (the session waits for forgotten ones before it
    /// frees their memory).
    pub fn start_copy_file(
        &mut self,
        path: &str,
        offset: u64,
        len: u64,
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<PendingCopy, SessionError> {
        self.start_copy_files(&[(path, offset, len)], dst, dst_offset)
    }

    /// [`Session::start_copy_file`] of several file ranges, `(path, offset, len)` each,
    /// copied back to back into `dst` from `dst_offset` by one Memory Copy: the device
    /// reads all of them as one queued read of its media. At most
    /// [`csx_proto::limits::COPY_SOURCES_MAX`] ranges.
    ///
    /// # Panics
    ///
    /// With no range, or ranges of several files in a session with
    /// [`Session::set_resident`] on (the device reports what it served resident per
    /// copy, and the session keeps that per file).
    pub fn start_copy_files(
        &mut self,
        ranges: &[(&str, u64, u64)],
        dst: MemHandle,
        dst_offset: u64,
    ) -> Result<PendingCopy, SessionError> {
        let (path, offset, _) = *ranges.first().expect("a copy of at least one file range");
        assert!(
            !self.resident || ranges.iter().all(|r| r.0 == path),
            "a resident session copies one file at a time"
        );
        let len = ranges.iter().map(|r| r.2).sum();
        let op = match self.copy_op(path, offset, len, dst, dst_offset) {
            Op::MemCopy {
                dst,
                dst_offset,
                sources,
            } if ranges.len() > 1 => {
                let file = |&(path, offset, len): &(&str, u64, u64)| match sources[0] {
                    CopySource::ResidentFile { .. } => CopySource::ResidentFile {
                        path: path.to_string(),
                        offset,
                        len,
                    },
                    _ => CopySource::File {
                        path: path.to_string(),
                        offset,
                        len,
                    },
                };
                Op::MemCopy {
                    dst,
                    dst_offset,
                    sources: ranges.iter().map(file).collect(),
                }
            }
            op => op,
        };
        let id = self.dev.client().submit_private(op).map_err(|e| {
            let what = match ranges.len() {
                1 => format!("staging {len} bytes of {path} at {offset}"),
                n => format!(
                    "staging {len} bytes of {path} at {offset} and {} more ranges",
                    n - 1
                ),
            };
            SessionError::device(what, e)
        })?;
        self.in_flight.push(id);
        Ok(PendingCopy {
            id,
            path: path.to_string(),
            offset,
            len,
            more: ranges.len() - 1,
            ranges: match self.file_copies {
                Some(_) => (ranges.iter())
                    .map(|&(p, o, l)| (p.to_string(), o, l))
                    .collect(),
                None => Vec::new(),
            },
        })
    }

    /// Waits for every copy of `copies` (all of them, even after a failure) and
    /// returns the first failure.
    pub fn wait_copies(&mut self, copies: Vec<PendingCopy>) -> Result<(), SessionError> {
        let mut first = None;
        for p in copies {
            if let Err(e) = self.wait_copy(p) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn wait_copy(&mut self, p: PendingCopy) -> Result<(), SessionError> {
        self.in_flight.retain(|&i| i != p.id);
        let what = || match p.more {
            0 => format!("staging {} bytes of {} at {}", p.len, p.path, p.offset),
            n => format!(
                "staging {} bytes of {} at {} and {n} more ranges",
                p.len, p.path, p.offset
            ),
        };
        let c = match self.dev.client().wait(p.id, None) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => return Err(SessionError::device(what(), e)),
        };
        self.meter.commands += 1;
        self.meter.modelled_ns += c.timing.modelled_ns;
        if !c.status.is_success() {
            let e = CallError::from_completion("mem-copy", c);
            return Err(SessionError::device(what(), e));
        }
        self.copied(&p.path, p.offset, p.len, &c)?;
        if let Some(kept) = &mut self.file_copies {
            kept.extend(p.ranges);
        }
        Ok(())
    }

    /// Writes `src` into the device file `path` at `offset`, on the device; returns the
    /// bytes written.
    pub fn copy_to_file(
        &mut self,
        path: &str,
        offset: u64,
        src: MemRange,
    ) -> Result<u64, SessionError> {
        let op = Op::FileWriteFromMem {
            path: path.to_string(),
            offset,
            src,
        };
        let len = src.len;
        let c = self.call(
            || format!("writing {len} bytes of device memory to {path}"),
            op,
            false,
        )?;
        Ok(c.value)
    }

    // ---------------------------------------------------------------------------------
    // Reads to the host.

    /// Reads `len` bytes of device memory from `offset` of `h` to the host.
    pub fn read(&mut self, h: MemHandle, offset: u64, len: u64) -> Result<Vec<u8>, SessionError> {
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        while (out.len() as u64) < len {
            let at = out.len() as u64;
            let n = (len - at).min(MEM_IO_SIZE_MAX);
            let op = Op::MemRead {
                handle: h,
                offset: offset + at,
                len: n,
            };
            let c = self.call(|| format!("reading {n} bytes of device memory"), op, false)?;
            match c.reply {
                Reply::Data(d) if d.len() as u64 == n => out.extend_from_slice(&d),
                other => {
                    return Err(SessionError::ShortRead {
                        what: "a memory read".to_string(),
                        found: if let Reply::Data(d) = other {
                            d.len() as u64
                        } else {
                            0
                        },
                        expected: n,
                    })
                }
            }
        }
        self.meter.bytes_to_host += len;
        Ok(out)
    }

    /// The sizes of the device files `paths`, asked all at once: every stat is
    /// submitted before the first is waited for, so the device answers them back to
    /// back instead of one round trip each.
    pub fn stat_files(&mut self, paths: &[&str]) -> Result<Vec<u64>, SessionError> {
        let ops = paths.iter().map(|p| Op::FileStat {
            path: p.to_string(),
        });
        let mut sizes = Vec::with_capacity(paths.len());
        let mut commands = 0;
        let r = self.dev.pipeline(ops, |_, c| {
            commands += 1;
            match c.reply {
                Reply::File(f) => {
                    sizes.push(f.size_bytes);
                    Ok(())
                }
                other => Err(crate::device::unexpected("file-stat", "file", &other)),
            }
        });
        self.meter.commands += commands;
        r.map_err(|e| {
            let at = sizes.len().min(paths.len().saturating_sub(1));
            SessionError::device(format!("file {}", paths.get(at).unwrap_or(&"")), e)
        })?;
        Ok(sizes)
    }

    /// Reads several ranges of device files, `(path, offset, len)` each, to the host
    /// (File Reads of at most `FILE_IO_SIZE_MAX` bytes, asked all at once as
    /// [`Session::stat_files`] does): their bytes, in order. A file that ends before its
    /// range does is an error; one naming the file.
    pub fn read_files(
        &mut self,
        ranges: &[(&str, u64, u64)],
    ) -> Result<Vec<Vec<u8>>, SessionError> {
        // Each range in reads of at most FILE_IO_SIZE_MAX, tagged with its range.
        let mut reads = Vec::new();
        for (i, &(path, offset, len)) in ranges.iter().enumerate() {
            let mut at = 0;
            while at < len {
                let n = (len - at).min(FILE_IO_SIZE_MAX);
                reads.push((i, path, offset + at, n));
                at += n;
            }
        }
        let ops = reads.iter().map(|&(_, path, offset, len)| Op::FileRead {
            path: path.to_string(),
            offset,
            len,
        });
        let mut out: Vec<Vec<u8>> = ranges.iter().map(|_| Vec::new()).collect();
        let mut failed: Option<SessionError> = None;
        let mut modelled = 0;
        let mut commands = 0;
        let r = self.dev.pipeline(ops, |k, c| {
            commands += 1;
            modelled += c.timing.modelled_ns;
            let (i, _, _, n) = reads[k];
            match c.reply {
                Reply::Data(d) if d.len() as u64 == n => {
                    out[i].extend_from_slice(&d);
                    Ok(())
                }
                other => {
                    let found = match &other {
                        Reply::Data(d) => out[i].len() as u64 + d.len() as u64,
                        _ => out[i].len() as u64,
                    };
                    let (path, offset, len) = ranges[i];
                    failed.get_or_insert(SessionError::ShortRead {
                        what: format!("{path} from {offset}"),
                        found,
                        expected: len,
                    });
                    // Stops the reads; the short read is the error returned.
                    Err(crate::device::unexpected("file-read", "data", &other))
                }
            }
        });
        self.meter.commands += commands;
        self.meter.modelled_ns += modelled;
        if let Some(e) = failed {
            return Err(e);
        }
        // Completions come in order: the failed read is the first not done.
        r.map_err(|e| {
            let path = reads.get(commands as usize).map_or("", |r| r.1);
            SessionError::device(format!("reading {path}"), e)
        })?;
        self.meter.bytes_to_host += ranges.iter().map(|r| r.2).sum::<u64>();
        Ok(out)
    }

    /// Reads `len` bytes of the device file `path` from `offset` to the host (File
    /// Reads: media and link). A file that ends first is an error.
    pub fn read_file(
        &mut self,
        path: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, SessionError> {
        let mut one = self.read_files(&[(path, offset, len)])?;
        Ok(one.pop().expect("one range asked, one read"))
    }

    // ---------------------------------------------------------------------------------
    // Executions.

    /// Runs one execution. A trap is an error ([`SessionError::Trap`]); r0 is the
    /// caller's to read (a negative `CSX_E*` may be an answer).
    ///
    /// A program adopted by its persistent name ([`Session::adopt_persistent`]) that
    /// the device finds replaced in its slot (or gone from it) is looked up by name
    /// once more and run where it is now.
    pub fn execute(&mut self, run: &ExecuteRequest) -> Result<Execution, SessionError> {
        match self.execute_once(run) {
            Err(SessionError::Device {
                source: CallError::ProgramChanged(_) | CallError::NoProgram(_),
                ..
            }) if self.held_by_name(run.pind).is_some() => {
                let name = self.held_by_name(run.pind).expect("just seen");
                let (at, generation) = self.look_up(&name)?;
                for h in self.programs.iter_mut().filter(|h| h.pind == run.pind) {
                    (h.at, h.generation) = (at, Some(generation));
                }
                self.execute_once(run)
            }
            r => r,
        }
    }

    fn execute_once(&mut self, run: &ExecuteRequest) -> Result<Execution, SessionError> {
        let s = self.submit_execute(run)?;
        self.wait_submitted(s)
    }

    /// The persistent name of the program held as `pind`, when it was adopted by it.
    fn held_by_name(&self, pind: ProgramIndex) -> Option<String> {
        self.programs
            .iter()
            .rev()
            .find(|h| h.pind == pind)
            .filter(|h| h.by_name)
            .map(|h| h.name.clone())
    }

    /// Starts one execution without waiting (see [`Submitted`]); the session waits for
    /// it before freeing memory if nobody else does.
    pub fn submit_execute(&mut self, run: &ExecuteRequest) -> Result<Submitted, SessionError> {
        let id = self.submit(run)?;
        Ok(Submitted { id, pind: run.pind })
    }

    /// Waits for a submitted execution: [`Session::execute`]'s result.
    pub fn wait_submitted(&mut self, s: Submitted) -> Result<Execution, SessionError> {
        let result = s.wait_on(&self.dev);
        self.finish_submitted(s, result)
    }

    /// Meters a submitted execution that [`Submitted::wait_on`] waited for; a trap is an
    /// error, as in [`Session::execute`].
    pub fn finish_submitted(
        &mut self,
        s: Submitted,
        result: Result<Execution, CallError>,
    ) -> Result<Execution, SessionError> {
        self.in_flight.retain(|&i| i != s.id);
        let x = self.finish(s.pind, result)?;
        self.meter.modelled_ns += x.timing.modelled_ns;
        self.meter.execute_span_ns += x.timing.execute_ns;
        Ok(x)
    }

    /// Asks the device to stop a submitted execution (NVMe's Abort): its wait then
    /// returns the error `CallError::Aborted`. Whether it was still in flight.
    pub fn abort(&self, s: &Submitted) -> Result<bool, SessionError> {
        self.dev.client().abort(s.id).map_err(|e| {
            SessionError::device(format!("aborting program {}", self.program_name(s.pind)), e)
        })
    }

    /// Runs every execution of `runs` at once (their output windows must not overlap):
    /// one Execute each, all submitted, then all waited for. Their results in order,
    /// or the first failure (after every run finished).
    pub fn execute_all(&mut self, runs: &[ExecuteRequest]) -> Result<Vec<Execution>, SessionError> {
        let engines = if runs.len() > 1 { self.engines()? } else { 1 };
        let mut ids = Vec::with_capacity(runs.len());
        let mut first = None;
        for run in runs {
            match self.submit(run) {
                Ok(id) => ids.push((run.pind, id)),
                Err(e) => {
                    first = Some(e);
                    break;
                }
            }
        }
        let mut done = Vec::with_capacity(ids.len());
        let (mut longest, mut sum, mut span) = (0u64, 0u64, 0u64);
        for (pind, id) in ids {
            let result = self.wait_execution(id);
            match self.finish(pind, result) {
                Ok(x) => {
                    longest = longest.max(x.timing.modelled_ns);
                    sum += x.timing.modelled_ns;
                    span = span.max(x.timing.execute_ns);
                    done.push(x);
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        self.meter.execute_span_ns += span;
        self.meter.modelled_ns += longest.max(sum.div_ceil(engines));
        Ok(done)
    }

    /// [`Session::execute_all`] for programs whose r0 is a count: their r0s, a
    /// negative one being [`SessionError::Failed`].
    pub fn execute_all_r0(&mut self, runs: &[ExecuteRequest]) -> Result<Vec<u64>, SessionError> {
        let done = self.execute_all(runs)?;
        runs.iter()
            .zip(done)
            .map(|(run, x)| self.count(run.pind, &x))
            .collect()
    }

    /// [`Session::execute`] for a program whose r0 is a count (see
    /// [`Session::execute_all_r0`]).
    pub fn execute_r0(&mut self, run: &ExecuteRequest) -> Result<u64, SessionError> {
        let x = self.execute(run)?;
        self.count(run.pind, &x)
    }

    fn count(&self, pind: ProgramIndex, x: &Execution) -> Result<u64, SessionError> {
        let r0 = x.r0_signed();
        if r0 >= 0 {
            return Ok(x.r0);
        }
        let detail = x
            .detail
            .as_ref()
            .map(|d| format!(" ({}: {})", d.function, d.message))
            .unwrap_or_default();
        Err(SessionError::Failed {
            program: self.program_name(pind),
            r0,
            code: errno::name(r0),
            detail,
        })
    }

    fn submit(&mut self, run: &ExecuteRequest) -> Result<CommandId, SessionError> {
        let mut op = run.to_op();
        // A program held with its generation runs only if the slot still holds it.
        if let (
            Op::Execute {
                pind, generation, ..
            },
            Some(h),
        ) = (
            &mut op,
            self.programs.iter().rev().find(|h| h.pind == run.pind),
        ) {
            if generation.is_none() && h.generation.is_some() {
                (*pind, *generation) = (h.at, h.generation);
            }
        }
        let id = self.dev.client().submit_private(op).map_err(|e| {
            SessionError::device(
                format!("running program {}", self.program_name(run.pind)),
                e,
            )
        })?;
        self.in_flight.push(id);
        Ok(id)
    }

    fn wait_execution(&mut self, id: CommandId) -> Result<Execution, CallError> {
        self.in_flight.retain(|&i| i != id);
        let c = self.dev.client().wait(id, None)?;
        Execution::from_completion(c.expect("a wait without a timeout returns a completion"))
    }

    /// Meters a finished run; a trap is an error.
    fn finish(
        &mut self,
        pind: ProgramIndex,
        result: Result<Execution, CallError>,
    ) -> Result<Execution, SessionError> {
        let x = result.map_err(|e| {
            SessionError::device(format!("running program {}", self.program_name(pind)), e)
        })?;
        self.meter.commands += 1;
        self.meter.executions += 1;
        self.meter.fuel += x.fuel_used;
        self.meter.execute_ns += x.timing.execute_ns;
        if let Some(trap) = &x.trap {
            return Err(SessionError::Trap {
                program: self.program_name(pind),
                trap: trap.clone(),
            });
        }
        Ok(x)
    }

    // ---------------------------------------------------------------------------------
    // The end.

    /// Frees the session's memory and unloads its programs; what it all cost. The
    /// first failure is returned (after trying every release).
    pub fn close(mut self) -> Result<Meter, SessionError> {
        self.release()?;
        Ok(self.meter)
    }

    fn wait_in_flight(&mut self) {
        for id in std::mem::take(&mut self.in_flight) {
            // An error path left a command in flight: it must not touch freed memory.
            let _ = self.dev.client().wait(id, None);
        }
    }

    fn release(&mut self) -> Result<(), SessionError> {
        let freed = self.free_all();
        let unloaded = self.unload_all();
        freed.and(unloaded)
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // Best effort: close() reports errors; a session dropped after an error or in a
        // panic only tries to leave the device as it found it.
        let _ = self.release();
    }
}

#[cfg(all(test, feature = "inproc"))]
mod tests;
