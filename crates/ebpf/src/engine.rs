//! What every execution engine promises, and the run set-up they share.
//!
//! # Fuel
//! Fuel bounds a run's work. Engines charge it at exactly these points, and nowhere else,
//! so the interpreter and the JIT agree on it to the unit:
//!
//! * a taken jump (conditional or `ja`) whose target slot is at or before its own slot
//!   charges `pc - target + 1`, the length of the loop it closes;
//! * every `call` (helper, local function or `callx`) charges 1.
//!
//! The charge is added before the transfer. If the total then exceeds the budget, the run
//! stops with [`TrapKind::FuelExhausted`] at that instruction, and the reported
//! `fuel_used` is the total including that charge. Straight-line code is bounded by the
//! program's length, so this bounds every run.
//!
//! # Stopping
//! A run may carry a [`StopFlag`] that another thread sets (an abort, a deadline). Engines
//! look at it only where they charge fuel, right after the charge: if the
//! flag holds a reason then, the run stops with [`TrapKind::Stopped`] at that instruction,
//! and `fuel_used` includes that charge. A fuel trap at the same point comes first. So a
//! flag set before the run stops it at its first taken backward jump or call, at the same
//! pc with the same fuel on every engine. A flag set during a run stops it at a charge
//! within [`rules::STOP_SLICE`] fuel (and one helper call) of being set: the interpreter
//! looks at every charge, the JIT only when the slice of fuel its code holds runs out
//! (see `csx-ebpf-jit`), so where a run stopped mid-way ends may differ between engines.
//!
//! # Calls
//! A local call pushes a frame: the callee's r10 is the caller's r10 minus
//! [`STACK_FRAME_SIZE`]; r6-r9 are saved and restored across it; r1-r5 are passed as they
//! are. A call that would make more than [`CALL_DEPTH_MAX`] frames live (the entry's
//! included) stops with [`TrapKind::CallDepthExceeded`] at the call, after its fuel.
//!
//! # Memory
//! Before a run, the engine maps a zeroed stack at [`RegionIdx::STACK`] (r10 starts at its
//! end) and each global section at its region, writable sections as fresh copies. The
//! embedder's regions are whatever it mapped in the [`MemoryMap`].

use std::sync::atomic::{AtomicU32, Ordering};

use crate::count::ExecCounts;
use crate::helper::HelperHost;
use crate::limits::{CALL_DEPTH_MAX, FUEL_DEFAULT, STACK_FRAME_SIZE, STACK_SIZE};
use crate::memory::{MemoryMap, RegionIdx};
use crate::program::{GlobalSection, VerifiedProgram};
use crate::trap::{Trap, TrapKind};

/// Per-run settings. Build them as `RunOptions { fuel, ..RunOptions::default() }`.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions<'a> {
    /// Fuel budget (see the module doc).
    pub fuel: u64,
    /// Checked where fuel is charged (see "Stopping" in the module doc); `None`: the run
    /// cannot be stopped from outside.
    pub stop: Option<&'a StopFlag>,
    /// Block counters to add this run's executed blocks to (see [`crate::count`]);
    /// `None`: the run counts nothing and pays nothing for counting. Must have one
    /// counter per block of the program's [`VerifiedProgram::blocks`].
    pub counts: Option<&'a ExecCounts>,
}

impl Default for RunOptions<'_> {
    fn default() -> Self {
        RunOptions {
            fuel: FUEL_DEFAULT,
            stop: None,
            counts: None,
        }
    }
}

/// A request that a run stop, set from any thread: its reason is a non-zero code the
/// embedder chooses (csx-device: abort, deadline, shutdown), reported in
/// [`TrapKind::Stopped`]. Once set it stays set, with its first reason.
#[derive(Debug, Default)]
pub struct StopFlag(AtomicU32);

impl StopFlag {
    /// A flag holding no reason.
    pub const fn new() -> StopFlag {
        StopFlag(AtomicU32::new(0))
    }

    /// Asks the run to stop with `reason` (not 0). Returns `false` when a reason was
    /// already set (which stays).
    pub fn stop(&self, reason: u32) -> bool {
        assert_ne!(reason, 0, "a stop reason is not 0");
        self.0
            .compare_exchange(0, reason, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The reason the run was asked to stop for, 0 while it was not.
    #[inline(always)]
    pub fn reason(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// Whether a stop was asked for.
    #[inline(always)]
    pub fn is_set(&self) -> bool {
        self.reason() != 0
    }

    /// The flag's word, for compiled code that loads it atomically (4-byte aligned).
    pub fn as_ptr(&self) -> *const u32 {
        self.0.as_ptr().cast_const()
    }

    /// A flag that is never set, for runs without one.
    pub fn never() -> &'static StopFlag {
        static NEVER: StopFlag = StopFlag::new();
        &NEVER
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOutcome {
    /// r0 at `exit` from the entry function, or the trap.
    pub result: Result<u64, Trap>,
    /// Fuel charged (see the module doc).
    pub fuel_used: u64,
}

/// An execution engine bound to one verified program.
pub trait Engine: Send + Sync {
    /// The program this engine runs.
    fn program(&self) -> &VerifiedProgram;

    /// Runs the program once. `args` are r1-r5. Never panics on any program or input:
    /// faults are [`Trap`]s in the outcome.
    fn run(
        &self,
        mem: &mut MemoryMap<'_>,
        args: [u64; 5],
        opts: &RunOptions<'_>,
        host: &mut dyn HelperHost,
    ) -> RunOutcome;
}

/// The memory an engine owns for one run: the stack and copies of writable globals.
#[derive(Debug)]
pub struct RunMemory {
    stack: Box<[u8]>,
    globals: Vec<Vec<u8>>,
}

impl RunMemory {
    /// Fresh run memory for `program`.
    pub fn new(program: &VerifiedProgram) -> RunMemory {
        RunMemory {
            stack: vec![0u8; STACK_SIZE].into_boxed_slice(),
            globals: program
                .globals()
                .iter()
                .map(|g| {
                    if g.writable {
                        g.data.clone()
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
        }
    }

    /// Maps this run memory and `program`'s read-only globals into `mem`, runs `f` with
    /// the initial frame pointer, and unmaps them again before returning.
    pub fn with_mapped<R>(
        &mut self,
        program: &VerifiedProgram,
        mem: &mut MemoryMap<'_>,
        f: impl FnOnce(&mut MemoryMap<'_>, u64) -> R,
    ) -> R {
        // SAFETY: the stack and global buffers are owned by `self` and `program`, both
        // borrowed for this whole call; the mappings are removed below before either
        // borrow ends, and `f` cannot keep the map (it only borrows it).
        unsafe {
            mem.map_raw(
                RegionIdx::STACK,
                self.stack.as_mut_ptr(),
                self.stack.len(),
                true,
            )
            .expect("the stack slot is in the table and the stack is small");
        }
        let mut mapped = Vec::with_capacity(program.globals().len());
        for (n, g) in program.globals().iter().enumerate() {
            let Some(idx) = GlobalSection::region(n) else {
                break;
            };
            let (ptr, len) = if g.writable {
                (self.globals[n].as_mut_ptr(), self.globals[n].len())
            } else {
                (g.data.as_ptr().cast_mut(), g.data.len())
            };
            // SAFETY: as above; read-only sections are mapped without write access, so
            // the `cast_mut` pointer is never written through.
            unsafe {
                mem.map_raw(idx, ptr, len, g.writable)
                    .expect("the verifier bounded global count and size");
            }
            mapped.push(idx);
        }
        let r = f(mem, RegionIdx::STACK.vaddr(STACK_SIZE as u32));
        mem.unmap(RegionIdx::STACK);
        for idx in mapped {
            mem.unmap(idx);
        }
        r
    }
}

/// The rows of the region table an engine maps for a run (the stack's and each global
/// section's), as they were when the run started. A helper must leave them as they are:
/// compiled code addresses the stack directly and checks global sections against the
/// bounds the program fixes, so a helper that remaps one aborts the run with
/// [`TrapKind::HelperAbort`] ([`EngineRows::REMAPPED`]) on every engine.
#[derive(Clone, Copy, Debug)]
pub struct EngineRows {
    /// Region index, base, read length and write length of each row; `len` are used.
    rows: [(u32, usize, u64, u64); 1 + RegionIdx::GLOBALS_COUNT as usize],
    len: usize,
}

impl EngineRows {
    /// The message of the abort when a helper remapped one of these rows.
    pub const REMAPPED: &'static str =
        "helper remapped a region the engine owns (the stack or a global section)";

    /// The stack's row and the rows of `program`'s global sections in `mem`.
    pub fn of(mem: &MemoryMap<'_>, program: &VerifiedProgram) -> EngineRows {
        let globals = program
            .globals()
            .len()
            .min(RegionIdx::GLOBALS_COUNT as usize);
        let mut rows = EngineRows {
            rows: [(0, 0, 0, 0); 1 + RegionIdx::GLOBALS_COUNT as usize],
            len: 1 + globals,
        };
        for k in 0..rows.len {
            let idx = match k {
                0 => RegionIdx::STACK.0,
                _ => RegionIdx::GLOBALS_FIRST.0 + k as u32 - 1,
            };
            let e = &mem.entries()[idx as usize];
            rows.rows[k] = (idx, e.base as usize, e.read_len, e.write_len);
        }
        rows
    }

    /// The stack's row: base, read length and write length.
    pub fn stack(&self) -> (usize, u64, u64) {
        let (_, base, read, write) = self.rows[0];
        (base, read, write)
    }

    /// Whether every row is still as it was in `mem`.
    #[inline]
    pub fn unchanged(&self, mem: &MemoryMap<'_>) -> bool {
        self.rows[..self.len]
            .iter()
            .all(|&(idx, base, read, write)| {
                let e = &mem.entries()[idx as usize];
                (e.base as usize, e.read_len, e.write_len) == (base, read, write)
            })
    }
}

/// Shared fuel and call-depth rules, so engines cannot drift apart.
pub mod rules {
    use super::*;

    /// Fuel a taken jump at `pc` to `target` charges.
    #[inline(always)]
    pub fn jump_cost(pc: u32, target: u32) -> u64 {
        if target <= pc {
            u64::from(pc - target) + 1
        } else {
            0
        }
    }

    /// Fuel a call charges.
    pub const CALL_COST: u64 = 1;

    /// Most fuel a run may use between a flag being set and the charge at which an
    /// engine sees it (and stops): engines may look at the flag only once per slice of
    /// this much fuel, but always at the first charge of a run.
    pub const STOP_SLICE: u64 = 1 << 16;

    /// The trap for exceeding the frame limit.
    pub fn call_depth_trap(pc: u32) -> Trap {
        Trap {
            pc,
            kind: TrapKind::CallDepthExceeded {
                depth_max: CALL_DEPTH_MAX as u32,
            },
        }
    }

    /// The trap for exceeding the fuel budget.
    pub fn fuel_trap(pc: u32, budget: u64) -> Trap {
        Trap {
            pc,
            kind: TrapKind::FuelExhausted { budget },
        }
    }

    /// The trap for a run stopped by its [`StopFlag`] with `reason`.
    pub fn stop_trap(pc: u32, reason: u32) -> Trap {
        Trap {
            pc,
            kind: TrapKind::Stopped { reason },
        }
    }

    /// Bytes each frame takes on the stack.
    pub const FRAME_SIZE: u64 = STACK_FRAME_SIZE as u64;
}
