//! The run-time half of the JIT: the context block compiled code works on, the helper
//! trampoline, and the one call from Rust into compiled code.
//!
//! Compiled functions have the native signature `extern "C" fn(*mut JitContext) -> u64`
//! and return [`STATUS_OK`] or [`STATUS_TRAP`]. Everything else travels through the
//! context: the region table, the fuel budget, count and reserve, the run's stop flag, the
//! register file at function entry and exit (local calls pass r0-r10 this way), the trap
//! record, and the bridge to the helper host.
//!
//! Invariants: no Rust panic unwinds into compiled code (the trampoline catches it and
//! turns it into a [`TrapKind::HelperAbort`]); while a helper runs, compiled code is
//! suspended, so the `&mut MemoryMap` the helper gets is the only live access to it.

use std::ffi::c_void;
use std::mem::offset_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

use csx_ebpf::engine::{rules, EngineRows, RunOptions, RunOutcome, StopFlag};
use csx_ebpf::helper::{call_helper, FunctionTable, HelperHost};
use csx_ebpf::limits::STACK_SIZE;
use csx_ebpf::memory::{MemoryMap, RegionEntry, RegionIdx};
use csx_ebpf::program::VerifiedProgram;
use csx_ebpf::trap::{Trap, TrapKind};

use crate::code_memory::CodeMemory;

/// A compiled function finished with `exit`.
pub(crate) const STATUS_OK: u64 = 0;
/// A compiled function stopped on a trap recorded in the context.
pub(crate) const STATUS_TRAP: u64 = 1;

/// Trap codes in [`JitContext::trap_code`].
pub(crate) mod trap_code {
    /// A load, store or atomic failed its bounds check: `trap_addr` is the address,
    /// `trap_aux` the size in its low 32 bits and 1 for a write in bit 32. The precise
    /// kind (out of bounds or read-only) is computed after the run, out of line.
    pub(crate) const MEMORY: i64 = 1;
    /// The fuel count went over the budget.
    pub(crate) const FUEL: i64 = 2;
    /// A local call would exceed the frame limit.
    pub(crate) const CALL_DEPTH: i64 = 3;
    /// A helper call failed; the trap is in the bridge.
    pub(crate) const HELPER: i64 = 4;
    /// The run's stop flag was set; the reason is in the flag.
    pub(crate) const STOP: i64 = 5;
}

/// Bit of `trap_aux` marking a write.
pub(crate) const TRAP_AUX_WRITE: i64 = 1 << 32;

/// Negative csx error code reported when a helper panics (EFAULT: the host failed).
pub(crate) const HELPER_PANIC_CODE: i64 = -14;

/// The block compiled code receives. Its layout is read by generated code through the
/// offsets in [`offsets`].
#[repr(C)]
#[derive(Debug)]
pub(crate) struct JitContext {
    /// The region table (`MemoryMap::entries_ptr`), fixed for the run.
    pub regions: *mut RegionEntry,
    /// Fuel budget of the run.
    pub fuel_budget: u64,
    /// Fuel charged so far, current at every exit and trap (the quick tier keeps what
    /// is left of the budget here while its code runs).
    pub fuel_used: u64,
    /// Fuel left beyond the slice Cranelift's code holds in a register (see
    /// `translate`, "Fuel"): the budget at the start of a run; what is left is this
    /// plus the slice.
    pub fuel_reserve: u64,
    /// r0-r10 handed to a function at entry; r0-r5 handed back at its `exit`.
    pub regs: [u64; 11],
    /// One of [`trap_code`], valid when a function returned [`STATUS_TRAP`].
    pub trap_code: u64,
    /// Slot of the trapping instruction.
    pub trap_pc: u64,
    /// Faulting address of a memory trap.
    pub trap_addr: u64,
    /// Size and write flag of a memory trap (see [`trap_code::MEMORY`]).
    pub trap_aux: u64,
    /// Set by the trampoline when a helper call trapped.
    pub helper_trapped: u64,
    /// The [`HelperBridge`] of the run, for the trampoline.
    pub bridge: *mut c_void,
    /// The run's [`StopFlag`] word, loaded atomically where fuel is charged.
    pub stop: *const u32,
    /// The run's block counters (`csx_ebpf::count::ExecCounts`), which the counting
    /// variants add to (Cranelift's as its functions leave, the quick tier's at each
    /// leader); null when the run counts nothing.
    pub counts: *mut u64,
}

/// Byte offsets into [`JitContext`], for code generation.
pub(crate) mod offsets {
    use super::*;
    pub(crate) const REGIONS: i32 = offset_of!(JitContext, regions) as i32;
    pub(crate) const FUEL_BUDGET: i32 = offset_of!(JitContext, fuel_budget) as i32;
    pub(crate) const FUEL_USED: i32 = offset_of!(JitContext, fuel_used) as i32;
    pub(crate) const FUEL_RESERVE: i32 = offset_of!(JitContext, fuel_reserve) as i32;
    pub(crate) const REGS: i32 = offset_of!(JitContext, regs) as i32;
    pub(crate) const TRAP_CODE: i32 = offset_of!(JitContext, trap_code) as i32;
    pub(crate) const TRAP_PC: i32 = offset_of!(JitContext, trap_pc) as i32;
    pub(crate) const TRAP_ADDR: i32 = offset_of!(JitContext, trap_addr) as i32;
    pub(crate) const TRAP_AUX: i32 = offset_of!(JitContext, trap_aux) as i32;
    pub(crate) const HELPER_TRAPPED: i32 = offset_of!(JitContext, helper_trapped) as i32;
    pub(crate) const STOP: i32 = offset_of!(JitContext, stop) as i32;
    pub(crate) const COUNTS: i32 = offset_of!(JitContext, counts) as i32;

    /// Offset of register `r` in the register file.
    pub(crate) const fn reg(r: usize) -> i32 {
        REGS + 8 * r as i32
    }
}

/// What the trampoline needs to run a helper: the embedder's table and host, and the
/// run's memory map.
struct HelperBridge<'r, 'm> {
    functions: &'r FunctionTable,
    host: &'r mut dyn HelperHost,
    mem: *mut MemoryMap<'m>,
    /// The trap of the last failed helper call.
    trap: Option<TrapKind>,
    /// The rows the engine maps (the stack and the global sections) at the start of
    /// the run: compiled code addresses the stack directly and checks global sections
    /// against the bounds the program fixes, so a helper must not remap them.
    rows: EngineRows,
}

/// Called by compiled code for `call imm` (helper) and `callx`: runs helper `id` through
/// [`call_helper`], the path the interpreter uses too, and returns r0. On a trap it
/// stores the trap in the bridge, sets `helper_trapped` and returns 0.
pub(crate) extern "C" fn helper_trampoline(
    ctx: *mut JitContext,
    id: u64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
) -> u64 {
    // SAFETY: compiled code passes the context `execute` handed it; `execute` keeps the
    // context alive and unaliased for the whole run, and compiled code is suspended
    // while this call runs.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: `ctx.bridge` was set by `execute` to a live `HelperBridge` on its stack,
    // used by nothing else while compiled code runs.
    let bridge = unsafe { &mut *ctx.bridge.cast::<HelperBridge<'_, '_>>() };
    // SAFETY: `bridge.mem` comes from the `&mut MemoryMap` `execute` borrows for the
    // run; compiled code only reads the table through `ctx.regions` and is suspended
    // now, so this is the only live reference.
    let mem = unsafe { &mut *bridge.mem };
    let functions = bridge.functions;
    let host = &mut *bridge.host;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        call_helper(functions, host, mem, id as i64, [a1, a2, a3, a4, a5])
    }));
    let helper = u32::try_from(id).unwrap_or(u32::MAX);
    let result = match outcome {
        Ok(r) => r,
        Err(payload) => Err(TrapKind::HelperAbort {
            helper,
            code: HELPER_PANIC_CODE,
            message: format!("helper panicked: {}", panic_message(payload.as_ref())),
        }),
    };
    let result = result.and_then(|r0| {
        if bridge.rows.unchanged(mem) {
            Ok(r0)
        } else {
            Err(TrapKind::HelperAbort {
                helper,
                code: HELPER_PANIC_CODE,
                message: EngineRows::REMAPPED.into(),
            })
        }
    });
    // A stop asked for while the helper ran ends the run here, at the call: compiled
    // code looks at the flag only when its fuel slice runs out, which a loop of long
    // helper calls reaches seconds later. One load per call, next to the call's cost.
    // SAFETY: `ctx.stop` is `StopFlag::as_ptr` of the run's flag (or the never-set
    // one), an `AtomicU32`'s word, 4-byte aligned, which `execute` keeps alive for the
    // whole run; it is only accessed atomically here and everywhere else.
    let flag = unsafe { AtomicU32::from_ptr(ctx.stop.cast_mut()) };
    let reason = flag.load(Ordering::Relaxed);
    let result = result.and_then(|r0| {
        if reason == 0 {
            Ok(r0)
        } else {
            Err(TrapKind::Stopped { reason })
        }
    });
    match result {
        Ok(r0) => r0,
        Err(kind) => {
            bridge.trap = Some(kind);
            ctx.helper_trapped = 1;
            0
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

/// Runs compiled code once over `mem`, which already has the stack and globals mapped
/// (`fp` is the initial frame pointer), and turns its status into an outcome.
pub(crate) fn execute(
    code: &CodeMemory,
    program: &VerifiedProgram,
    mem: &mut MemoryMap<'_>,
    fp: u64,
    args: [u64; 5],
    opts: &RunOptions<'_>,
    host: &mut dyn HelperHost,
) -> RunOutcome {
    // Compiled entry functions take r10 as this constant (see `translate`).
    assert_eq!(
        fp,
        RegionIdx::STACK.vaddr(STACK_SIZE as u32),
        "the engine maps the stack and starts r10 at its top"
    );
    let stop = opts.stop.unwrap_or(StopFlag::never());
    let rows = EngineRows::of(mem, program);
    let functions = program.functions();
    let mem_ptr: *mut MemoryMap<'_> = mem;
    let mut bridge = HelperBridge {
        functions,
        host,
        mem: mem_ptr,
        trap: None,
        rows,
    };
    let mut regs = [0u64; 11];
    regs[1..6].copy_from_slice(&args);
    regs[10] = fp;
    let mut ctx = JitContext {
        // SAFETY: `mem_ptr` was just made from a live `&mut MemoryMap`.
        regions: unsafe { (*mem_ptr).entries_ptr() },
        fuel_budget: opts.fuel,
        fuel_used: 0,
        fuel_reserve: opts.fuel,
        regs,
        trap_code: 0,
        trap_pc: 0,
        trap_addr: 0,
        trap_aux: 0,
        helper_trapped: 0,
        bridge: (&raw mut bridge).cast::<c_void>(),
        stop: stop.as_ptr(),
        counts: opts.counts.map_or(std::ptr::null_mut(), |c| c.as_mut_ptr()),
    };
    let (entry, timed) = code.entries().pick();
    let started = timed.map(|_| std::time::Instant::now());
    // SAFETY: `entry` is (a copy of) the program's compiled entry function, whose
    // signature is `extern "C" fn(*mut JitContext) -> u64` (checked by `CodeMemory::new`). The
    // context is fully initialised: `regions` points at the 32-row table of `mem`, which
    // stays borrowed (through `mem_ptr`) until this call returns and whose rows describe
    // live buffers (the `MemoryMap` invariant); the stack row is mapped by the engine
    // for the whole run; `bridge` and the stop flag outlive the call; the counting
    // variant (the only code that writes through `counts`) runs only with a counter
    // buffer, which the engine's `run` checked has one `u64` per block its code counts
    // and which outlives the call. Compiled code touches memory only
    // through rows it has bounds-checked, the stack frame the depth check guarantees
    // (see `translate`), the entry's input where the entry facts prove the access
    // inside it (code that does so runs only after `Compiled::run` found `r1` in a
    // region readable for `r2` bytes, `CodeMemory::needs_input`), and this context; it
    // never unwinds.
    let status = unsafe { entry(&raw mut ctx) };
    if let (Some(copy), Some(started)) = (timed, started) {
        code.entries()
            .record(copy, started.elapsed(), ctx.fuel_used);
    }
    // Compiled code has returned: from here on `mem` is used directly again.
    let result = match status {
        STATUS_OK => Ok(ctx.regs[0]),
        _ => {
            debug_assert_eq!(status, STATUS_TRAP);
            Err(decode_trap(&ctx, &mut bridge, mem, stop))
        }
    };
    RunOutcome {
        result,
        fuel_used: ctx.fuel_used,
    }
}

/// The [`Trap`] a context records, classifying memory faults against `mem` the way the
/// interpreter does.
fn decode_trap(
    ctx: &JitContext,
    bridge: &mut HelperBridge<'_, '_>,
    mem: &MemoryMap<'_>,
    stop: &StopFlag,
) -> Trap {
    let pc = u32::try_from(ctx.trap_pc).expect("compiled code records slot indices");
    match ctx.trap_code as i64 {
        trap_code::MEMORY => {
            let size = ctx.trap_aux & 0xffff_ffff;
            let write = ctx.trap_aux & TRAP_AUX_WRITE as u64 != 0;
            Trap {
                pc,
                kind: mem.classify_fault(ctx.trap_addr, size, write),
            }
        }
        trap_code::FUEL => rules::fuel_trap(pc, ctx.fuel_budget),
        trap_code::CALL_DEPTH => rules::call_depth_trap(pc),
        // The flag keeps its first reason, so this is the value compiled code saw.
        trap_code::STOP => rules::stop_trap(pc, stop.reason()),
        trap_code::HELPER => Trap {
            pc,
            kind: bridge
                .trap
                .take()
                .expect("a helper trap is recorded with its kind"),
        },
        other => panic!("compiled code recorded unknown trap code {other}"),
    }
}
