//! Translation of one eBPF function into Cranelift IR.
//!
//! Registers r0-r9 are Cranelift `Variable`s (SSA values, no memory traffic); r10 is a
//! plain value, fixed for the function. The entry function becomes a Cranelift
//! function `fn(ctx) -> status` (see `runtime`): it loads r1-r5 from the context and
//! stores r0 back at `exit`. The context pointer is kept in a stack slot and read from
//! it where it is needed (cold paths: refills, traps, fuel, calls), so it holds no
//! register through loops. A function a local call reaches becomes a function of its
//! own native signature ([`CalleeAbi`], Cranelift's `tail` convention): the registers
//! it may read and the fuel left come in as arguments, and the status, the fuel left,
//! r0 and the r1-r5 it may write go back as return values, all in host registers (an
//! entry that is also called gets both). The caller's r6-r9 live in its own
//! variables, so they survive without a save area. A short pure callee
//! (`analysis::inlinable`) is translated in place at each call instead.
//!
//! Branches become `select`s where `analysis` planned it: triangles, diamonds, loop-
//! closing backward triangles, and speculative regions (see `speculate`).
//!
//! Safety-relevant rules every translation keeps:
//!
//! * **Memory.** An access of `n` bytes at `addr` is legal when region `addr >> 32`
//!   holds `(addr & 0xffff_ffff) + n` bytes. The fast path checks it against a *region
//!   cache* (the region the last load, or store, went to, held in SSA variables so it
//!   stays in registers across loop iterations): `addr - lo <= len - 8`, one `lea`, a
//!   compare and a branch, then `host = addr + delta`. A miss takes a cold
//!   path that reads the region table row (index clamped to the never-mapped row 0 past
//!   the table), checks exactly, refills the cache, or branches to a block that records
//!   (pc, addr, n, write) and leaves through the function's one trap exit. Accesses at r10
//!   plus a constant, or plus an index of known bound (a byte shifted right, a value
//!   masked by a constant, ...), that stay inside the current 512-byte frame need no
//!   check: the stack region is always mapped with `STACK_SIZE` bytes and the depth
//!   check keeps every frame inside it. Other addresses computed from r10 are checked
//!   against the stack first (a constant check, exact for the access's size, so the
//!   frame's top bytes pass) rather than the region caches, so a
//!   stack array indexed by data does not evict the input region from the cache (a miss
//!   of that check goes to the table without refilling the caches either); so
//!   are accesses through a register that `analysis::stack_bases` finds holding such
//!   an address on every path (carried by block parameters or through spill slots,
//!   where per-value facts do not reach).
//!   A global section's bounds are fixed by the program ([`KnownRegion`]): an address
//!   computed from an `lddw` of one (plus constants and bounded indexes) is checked
//!   against its constant bounds first, and not at all when its offset is proven in
//!   range (`lut[b & 15]`); loads from a read-only section are pure values to Cranelift.
//!   The plan's value ranges (`crate::ranges`: bounds from compares, loop exits and
//!   spill slots, frame pointers carried across blocks) drop the check of a frame
//!   access they prove in the frame, and bound the indexes computed from them (`proven`).
//!   Helpers may remap regions, so every helper call resets the caches (to the stack,
//!   which the trampoline guarantees is unchanged, as it does the global sections).
//! * **Fuel.** Charged at taken backward jumps and calls exactly as `csx_ebpf::engine`
//!   says, from a *slice*: a variable holding some of what is left of the budget (at
//!   most [`rules::STOP_SLICE`]), the rest being the context's `fuel_reserve`. A charge
//!   compares the slice with its cost and subtracts; only when the slice is short does
//!   a cold path (`charge_value`) take the charge from the whole fuel left (trapping
//!   right there when the budget is exceeded) and refill the slice from the reserve.
//!   The entry starts with an empty slice; a callee gets the slice as an argument and
//!   hands it back. The context gets the fuel used (budget minus slice minus reserve)
//!   at exits and traps.
//! * **Stop.** The run's stop flag (a word the context points at) is loaded atomically
//!   and tested where the slice is refilled, right after that charge: when it is set,
//!   the run traps there, as `csx_ebpf::engine` says. So a flag set before the run stops
//!   it at its first charge (the slice is empty), and a flag set during a run at a
//!   charge within one slice of fuel.
//! * **Traps** are branches to the exit, never trap instructions (Cranelift's `trap`
//!   would be a SIGILL). Division guards its divisor so the hardware never faults.

use std::collections::{BTreeMap, BTreeSet};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, AliasRegionData, AtomicRmwOp, Block, BlockArg, Endianness, FuncRef,
    InstBuilder, MemFlagsData, SigRef, Signature, StackSlot, StackSlotData, StackSlotKind, Type,
    Value, ValueDef,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module};

use charge::{cost_value, is_bit_test, is_compare, is_const, negate, pay, Cost};
use csx_ebpf::count::BlockMap;
use csx_ebpf::engine::rules;
use csx_ebpf::isa::*;
use csx_ebpf::limits::{CALL_DEPTH_MAX, REGIONS_MAX, STACK_FRAME_SIZE, STACK_SIZE};
use csx_ebpf::memory::{RegionEntry, RegionIdx};

use crate::analysis::{insn_len, is_helper_call, FunctionPlan, IfConv, RegUse};
use crate::count::Counters;
use crate::loops::{self, LoopAccess};
use crate::runtime::{
    helper_trampoline, offsets, trap_code, STATUS_OK, STATUS_TRAP, TRAP_AUX_WRITE,
};

mod bounded;
mod cached;
mod charge;
mod inner;
mod order;
mod proven;
pub(crate) mod spans;
mod unroll;

// The call-depth check reads the depth off the frame pointer: frame `d` (1-based) has
// r10 at offset `STACK_SIZE - (d - 1) * STACK_FRAME_SIZE`, so it relies on the stack
// holding exactly one frame per permitted depth.
const _: () = assert!(STACK_SIZE == STACK_FRAME_SIZE * CALL_DEPTH_MAX);

/// How a block of a speculative region ends ([`Translator::speculate`]): it goes on to a
/// slot, or branches on a condition (taken, fall-through).
#[derive(Clone, Copy, Debug)]
enum Exit {
    To(u32),
    Branch(Value, u32, u32),
}

/// Why an instruction could not be translated. The verifier rejects all of these, so
/// one means the verifier and the JIT disagree on the instruction set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TranslateError {
    Unsupported { pc: u32, opcode: u8 },
}

type TResult<T> = Result<T, TranslateError>;

/// How a function is entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// By the runtime, as the program's entry: `fn(ctx) -> status`.
    Run,
    /// By a local call: the function's [`CalleeAbi`].
    Call,
}

/// Most values a callee returns: status, fuel left, r0-r5 (Cranelift's `tail`
/// convention returns eight integers in registers on x86-64).
const CALLEE_RETURNS_MAX: usize = 8;

/// The native signature of a function a local call reaches (RFC 9669 §4.3.1 says what
/// crosses a call: r1-r5 in, r0-r5 out, r6-r9 kept; the interpreter also lets a callee
/// read the caller's r0 and r6-r9, so those cross too when the callee may read them).
/// Arguments: the context, the fuel left, r10 (when the callee names it or calls),
/// then every register the callee may read or may hand back, ascending. Returns: the
/// status, the fuel left, r0, then every r1-r5 the callee may write; a register it
/// never writes keeps the caller's value without crossing.
#[derive(Clone, Debug)]
pub(crate) struct CalleeAbi {
    pub params: Vec<u8>,
    pub returns: Vec<u8>,
    pub fp: bool,
    pub uses: RegUse,
}

impl CalleeAbi {
    pub(crate) fn new(uses: RegUse) -> CalleeAbi {
        let returned = uses.writes & 0b11_1110;
        let passed = uses.reads | returned | 1;
        CalleeAbi {
            params: (0..10u8).filter(|r| passed >> r & 1 == 1).collect(),
            returns: (1..6u8).filter(|r| returned >> r & 1 == 1).collect(),
            fp: uses.fp,
            uses,
        }
    }

    pub(crate) fn signature(&self, call_conv: CallConv) -> Signature {
        let mut sig = Signature::new(call_conv);
        let params = 2 + usize::from(self.fp) + self.params.len();
        sig.params.extend(vec![AbiParam::new(types::I64); params]);
        let returns = 3 + self.returns.len();
        debug_assert!(returns <= CALLEE_RETURNS_MAX);
        sig.returns.extend(vec![AbiParam::new(types::I64); returns]);
        sig
    }
}

/// Per-program facts every function's translation shares.
pub(crate) struct ProgramEnv<'a> {
    pub insns: &'a [Insn],
    /// The Cranelift function a local call to each callee calls, by start slot.
    pub callee_ids: &'a BTreeMap<u32, FuncId>,
    /// Each callee's signature, by start slot.
    pub abis: &'a BTreeMap<u32, CalleeAbi>,
    /// Whether a helper may run (and could remap regions) during the run.
    pub calls_helpers: bool,
    pub call_conv: CallConv,
    pub frontend_config: TargetFrontendConfig,
    /// The canonical blocks, when compiling the variant that counts them (`count`).
    pub blocks: Option<&'a BlockMap>,
    /// Every function's plan (callees small and pure enough are inlined at their calls).
    pub plans: &'a [FunctionPlan],
    /// The program's global sections.
    pub globals: &'a [KnownRegion],
}

/// What a memory access does once its host address is known.
#[derive(Clone, Copy)]
enum MemOp {
    Load {
        size: u8,
        signed: bool,
    },
    Store {
        size: u8,
        value: Value,
    },
    Atomic {
        size: u8,
        op: i32,
        src: Value,
        r0: Value,
    },
}

impl MemOp {
    fn size(self) -> u8 {
        match self {
            MemOp::Load { size, .. } | MemOp::Store { size, .. } | MemOp::Atomic { size, .. } => {
                size
            }
        }
    }

    fn writes(self) -> bool {
        !matches!(self, MemOp::Load { .. })
    }

    /// Whether the access produces a value (a load, or an atomic's old value).
    fn has_result(self) -> bool {
        !matches!(self, MemOp::Store { .. })
    }
}

/// What a [`PtrFact`] is relative to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// The current function's r10.
    Frame,
    /// Byte 0 of global section `n` (region `RegionIdx::global(n)`), whose bounds the
    /// program fixes (see [`KnownRegion`]).
    Global(usize),
}

/// What is known of a value computed from r10, or from an `lddw` of a global section's
/// address, by adding constants and bounded indexes: it lies in `[anchor + lo, anchor +
/// hi]`, and `host` is its host address (the same computation on the anchor's host
/// address, so that no access needs the virtual address itself, nor a region's delta).
#[derive(Clone, Copy)]
struct PtrFact {
    anchor: Anchor,
    lo: i64,
    hi: i64,
    host: Value,
}

/// A region whose bounds are fixed when the program is loaded: a global section. The
/// engine maps section `n` at `RegionIdx::global(n)` with exactly these lengths for every
/// run (`csx_ebpf::engine::RunMemory`), and no helper may remap it (the trampoline traps
/// a helper that does, see `runtime`), so accesses into it are checked against
/// constants, or not at all where the offset is proven in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KnownRegion {
    pub read_len: u64,
    pub write_len: u64,
}

impl KnownRegion {
    /// The global sections of `program`, in region order.
    pub(crate) fn of(program: &csx_ebpf::program::VerifiedProgram) -> Vec<KnownRegion> {
        program
            .globals()
            .iter()
            .take(RegionIdx::GLOBALS_COUNT as usize)
            .map(|g| KnownRegion {
                read_len: g.data.len() as u64,
                write_len: if g.writable { g.data.len() as u64 } else { 0 },
            })
            .collect()
    }

    /// Bytes an access of this kind (a store when `write`) may touch.
    pub(crate) fn len(self, write: bool) -> u64 {
        if write {
            self.write_len
        } else {
            self.read_len
        }
    }
}

/// Largest offset from r10 (either way) and largest index bound that pointer tracking
/// keeps: far from `i64` overflow, and far beyond any frame.
const FACT_OFFSET_MAX: i64 = 1 << 32;

/// Shortest region the caches hold: `len - 8` must not wrap.
const CACHE_LEN_MIN: i64 = 8;
const _: () = assert!(STACK_SIZE as i64 >= CACHE_LEN_MIN);

/// A region cache: the region an access last went to, as SSA variables. The fast path
/// of an access checks against it alone; a miss consults the table and refills it.
///
/// Invariant: `neg_lo` is `-(idx << 32)` for a region `idx` mapped with `len`
/// (`>= CACHE_LEN_MIN`) bytes for this kind of access, `limit` is `len - 8`, and
/// `delta` is the region's host base plus `neg_lo`. (Keeping `-lo` makes the check's
/// subtraction part of one `lea`; keeping `len - 8` makes one limit serve every access
/// size, at the price of sending accesses to a region's last 7 bytes to the slow path.)
#[derive(Clone, Copy)]
struct CacheVars {
    neg_lo: Variable,
    limit: Variable,
    delta: Variable,
}

/// The values of a [`CacheVars`] at one point.
struct CacheValues {
    neg_lo: Value,
    limit: Value,
    delta: Value,
}

/// Memory flags for the three kinds of memory compiled code touches. Separate alias
/// regions tell Cranelift that program stores never change the region table or the
/// context, so row loads are reused across stores.
struct Flags {
    ctx: MemFlagsData,
    table: MemFlagsData,
    heap: MemFlagsData,
    heap_aligned: MemFlagsData,
}

/// Translates the function `plan` into `builder`'s function.
pub(crate) fn translate_function(
    module: &mut JITModule,
    builder: FunctionBuilder<'_>,
    env: &ProgramEnv<'_>,
    plan: &FunctionPlan,
    entry: Entry,
) -> TResult<()> {
    let mut t = Translator::new(module, builder, env, plan, entry);
    if t.uses.memory || entry == Entry::Run {
        t.reset_caches();
    }
    if entry == Entry::Run && plan.reads_input(env.insns) {
        t.input_delta = Some(t.entry_input_delta());
    }
    let start = t.blocks[&plan.start];
    t.b.ins().jump(start, &[]);
    t.body()?;
    t.unchecked_copies()?;
    t.finish();
    Ok(())
}

struct Translator<'a, 'f> {
    b: FunctionBuilder<'f>,
    insns: &'a [Insn],
    plan: &'a FunctionPlan,
    flags: Flags,
    /// The block of each leader slot.
    blocks: BTreeMap<u32, Block>,
    regs: [Variable; 10],
    /// The slice of fuel this code holds (see "Fuel" in the module doc).
    fuel_left: Variable,
    /// The context pointer as the function received it: read only by loads that may
    /// leave loops (the region table's address, see [`Self::fixed_regions`]) and by
    /// the counting variant's counters; every other use reads [`Self::ctx`].
    ctx: Value,
    /// The slot the entry stores the context pointer in, read by [`Self::ctx`].
    ctx_slot: StackSlot,
    /// r10, the virtual frame pointer.
    fp: Value,
    /// Host address r10 stands for.
    fp_host: Value,
    /// Region caches for loads and for stores (and atomics).
    caches: [CacheVars; 2],
    /// Values known to equal r10, or a global section's start, plus an offset in
    /// `[lo, hi]`, for unchecked accesses (the bounds are kept far from overflow, see
    /// [`FACT_OFFSET_MAX`]).
    pointers: BTreeMap<Value, PtrFact>,
    /// The program's global sections.
    globals: &'a [KnownRegion],
    /// Values computed from r10 by adding a value of unknown range: probably stack
    /// addresses, checked against the stack before the region caches.
    stack_derived: BTreeSet<Value>,
    /// Values known to be at most this (unsigned), e.g. a byte load shifted right.
    bounds: BTreeMap<Value, u64>,
    /// Host address minus virtual address for the stack region (fixed for a run).
    stack_delta: Value,
    /// Host address minus virtual address for the region the entry's r1 points into,
    /// where loads the entry facts prove inside `[r1, r1 + r2)` read unchecked (see
    /// `proven`); `None` elsewhere.
    input_delta: Option<Value>,
    /// Shared exit for traps, entered with the trap record already stored.
    trap_exit: Block,
    /// Shared exit when a callee trapped: its trap is already recorded.
    propagate: Block,
    helper_sig: SigRef,
    callees: BTreeMap<u32, FuncRef>,
    /// Whether the current block still needs a terminator.
    open: bool,
    /// Whether a helper may run during the run (see [`ProgramEnv::calls_helpers`]).
    calls_helpers: bool,
    frontend_config: TargetFrontendConfig,
    /// Block counters, in the counting variant only (see `count`).
    counters: Option<Counters>,
    /// Versioned loops (see `loops`) and the loop of each of their slots.
    loops: Vec<LoopCopy>,
    loop_at: BTreeMap<u32, usize>,
    /// The loop the slot being translated lies in.
    in_loop: Option<usize>,
    /// Whether the unchecked copy of `in_loop` is being translated.
    unchecked: bool,
    /// The slot being translated (where its jumps come from).
    at: u32,
    /// Which copy of `in_loop`'s unrolled groups is being translated (see `unroll`).
    group: Option<usize>,
    entry: Entry,
    /// This function's register use (its signature's, when called).
    uses: RegUse,
    /// The callees' signatures.
    abis: &'a BTreeMap<u32, CalleeAbi>,
    /// Every function's plan, for inlining.
    plans: &'a [FunctionPlan],
    /// While a callee is being inlined: the block its `exit`s jump to.
    inline_exit: Option<Block>,
    /// While code that may run where its branch did not go is being translated (see
    /// `proven`): the plan's value ranges do not hold there.
    speculating: bool,
    /// The access groups checked as one span, by first slot (see `spans`).
    span_groups: BTreeMap<u32, spans::SpanGroup>,
    /// While a group's fast copy is being translated (see `spans`).
    fast_group: Option<spans::FastGroup>,
    /// Loops with a bounded trip count (see `bounded`), and the one of each header.
    bounded: Vec<bounded::BoundedCopy>,
    bounded_at: BTreeMap<u32, usize>,
    /// The bounded loop whose fast copy is being translated.
    fast: Option<usize>,
}

/// A versioned loop's blocks. Entries from outside reach the guard (the header's own
/// block), which picks the unchecked copy or the checked loop; the unchecked copy's
/// back-edges go through `latch`, which continues in the unchecked copy while the
/// iterations the guard proved safe last, and then in the checked loop (through
/// `leave`). Every edge out of the unchecked copy goes through a block of its own
/// (`leave`, `exits`), so values the checked code needs (constants, which Cranelift
/// makes again at each use) are made there, not in every iteration.
///
/// Two ways to count the iterations: a counter, or (when every charge in the loop is a
/// backward jump, whatever its cost and target in the loop; `loops::iteration_cost`)
/// the fuel slice itself. With `n` the iterations the accesses allow and `least`/`most`
/// the fuel one iteration charges at least/most, the guard sets `limit` to the larger
/// of the slice minus `n * least` (`n` first cut to what the slice pays at `least`) and
/// `most - 1`; an iteration starts while the slice is above `limit`. So an iteration
/// starts only with `most` in the slice (its charges subtract alone), and only before
/// `n` iterations have run (each spent at least `least`). The checked loop's charges
/// resume, after refilling the slice, at a second copy of the guard (`reguard`, cold)
/// when they go to the header, so the guard where the loop is entered keeps only the
/// entry as a predecessor and Cranelift can still fold what is constant there; charges
/// to another slot of the loop resume there, setting `pending`, and the checked loop's
/// edges into the header go through `recheck`, which takes `reguard` when it is set.
struct LoopCopy {
    header: u32,
    body: BTreeSet<u32>,
    accesses: Vec<LoopAccess>,
    /// 32-bit results the plan took as the forms they extend (see `loops::Narrow`).
    narrow: Vec<loops::Narrow>,
    /// Registers the plan took as another plus a constant (`loops::VersionedLoop::lags`).
    lags: Vec<(u8, u8, i64)>,
    /// The checked loop's header block (back-edges of the checked loop go here).
    checked_head: Block,
    /// The unchecked copy's block of each leader in the loop.
    unchecked: BTreeMap<u32, Block>,
    latch: Block,
    /// The latch's way to the checked loop.
    leave: Block,
    /// The unchecked copy's ways out of the loop, by target slot.
    exits: BTreeMap<u32, Block>,
    /// Unchecked iterations left (when `cost` is `None`).
    counter: Variable,
    /// The fuel one iteration charges, when fuel bounds iterations (never in a loop
    /// with an unrolled copy, whose one-by-one copy keeps `counter`).
    cost: Option<loops::IterationFuel>,
    /// The slice below which the unchecked copy stops, set by the guards (with `cost`).
    limit: Option<Variable>,
    /// The guard a refill at the checked loop's back-edge resumes at (with `cost`).
    reguard: Option<Block>,
    /// Set where a refill in the checked loop resumed at a slot other than the header;
    /// cleared by the guards (with `cost`, when some charge goes to such a slot).
    pending: Option<Variable>,
    /// The checked loop's way into its header when `pending` is kept.
    recheck: Option<Block>,
    /// Where a refill at a charge to each such slot resumes (cold; sets `pending`).
    refilled: BTreeMap<u32, Block>,
    /// Host minus virtual address of each unchecked access's region, set by the guards
    /// (one variable for the accesses through one pointer form).
    deltas: BTreeMap<u32, Variable>,
    /// The unrolled copy, when the loop has one.
    group: Option<unroll::GroupCopy>,
    /// Whether another loop holds it (its guard looks at the region cache first, see
    /// `cached`).
    nested: bool,
    /// Slots whose charges keep their check in the unchecked copy (see
    /// `loops::VersionedLoop::checked_charges`).
    checked_charges: BTreeSet<u32>,
    /// The loops inside it, by header, with their slots (see `inner`).
    inner: BTreeMap<u32, BTreeSet<u32>>,
    /// The unchecked copy's ways into each inner header from outside its loop (see
    /// `inner`), by header.
    inner_entries: BTreeMap<u32, Block>,
}

/// The memory flags of a function's loads and stores: context, region table (movable
/// when no helper can remap a region during the run) and program memory.
fn mem_flags(b: &mut FunctionBuilder<'_>, env: &ProgramEnv<'_>) -> Flags {
    let mut region = |id: u32, what: &'static str| {
        Some(b.func.dfg.alias_regions.insert(AliasRegionData {
            user_id: id,
            description: what.into(),
        }))
    };
    let (ctx_r, table_r, heap_r) = (
        region(1, "context"),
        region(2, "region table"),
        region(3, "program memory"),
    );
    let mut table = MemFlagsData::trusted().with_alias_region(table_r);
    if !env.calls_helpers {
        // Without helpers nothing can remap a region during the run, so row loads
        // may be hoisted out of loops. They are always in bounds of the table.
        table = table.with_readonly().with_can_move();
    }
    let heap = MemFlagsData::new()
        .with_notrap()
        .with_endianness(Endianness::Little)
        .with_alias_region(heap_r);
    Flags {
        ctx: MemFlagsData::trusted().with_alias_region(ctx_r),
        table,
        heap,
        heap_aligned: heap.with_aligned(),
    }
}

/// The helper-call signature, and the function references of every local call target
/// of `plan`.
fn declare_callees(
    module: &mut JITModule,
    b: &mut FunctionBuilder<'_>,
    env: &ProgramEnv<'_>,
    plan: &FunctionPlan,
) -> (SigRef, BTreeMap<u32, FuncRef>) {
    let mut helper = Signature::new(env.call_conv);
    helper.params.extend([AbiParam::new(types::I64); 7]);
    helper.returns.push(AbiParam::new(types::I64));
    let helper_sig = b.import_signature(helper);
    let mut callees = BTreeMap::new();
    for &pc in &plan.pcs {
        let insn = &env.insns[pc as usize];
        if insn.opc == OP_CALL && insn.src == CALL_SRC_LOCAL {
            let target = (i64::from(pc) + i64::from(insn.imm) + 1) as u32;
            let id = env.callee_ids[&target];
            callees
                .entry(target)
                .or_insert_with(|| module.declare_func_in_func(id, b.func));
        }
    }
    (helper_sig, callees)
}

/// What the entry block sets up: the context, the registers, the fuel slice and the
/// frame pointer with its host address.
struct EntryState {
    ctx: Value,
    ctx_slot: StackSlot,
    uses: RegUse,
    fuel_left: Variable,
    regs: [Variable; 10],
    fp: Value,
    fp_host: Value,
    stack_delta: Value,
}

impl EntryState {
    /// Creates the entry block and loads the context's state into values and variables.
    fn build(
        b: &mut FunctionBuilder<'_>,
        env: &ProgramEnv<'_>,
        plan: &FunctionPlan,
        entry_kind: Entry,
        flags: &Flags,
    ) -> EntryState {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let params = b.block_params(entry).to_vec();
        let ctx = params[0];
        let ctx_slot =
            b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 8, 3));
        b.ins().stack_store(types::I64, ctx, ctx_slot, 0);
        let uses = match entry_kind {
            Entry::Run => crate::analysis::reg_use(env.insns, &plan.pcs),
            Entry::Call => env.abis[&plan.start].uses,
        };
        // Fuel is kept as a slice of what is left of the budget (the rest is in the
        // context's reserve, which the run starts with the whole budget in): one live
        // value in loops. The entry's slice starts empty, so its first charge refills
        // it and looks at the stop flag.
        let fuel_left = b.declare_var(types::I64);
        let left = match entry_kind {
            Entry::Run => b.ins().iconst(types::I64, 0),
            Entry::Call => params[1],
        };
        b.def_var(fuel_left, left);
        let (passed, fp_param) = passed_params(env, plan, entry_kind, &params);
        let regs: [Variable; 10] = std::array::from_fn(|r| {
            let var = b.declare_var(types::I64);
            let v = match (entry_kind, passed[r]) {
                (Entry::Call, Some(v)) => v,
                (Entry::Run, _) if (1..=5).contains(&r) => {
                    b.ins().load(types::I64, flags.ctx, ctx, offsets::reg(r))
                }
                _ => b.ins().iconst(types::I64, 0),
            };
            b.def_var(var, v);
            var
        });
        let (fp, fp_host, stack_delta) = frame(
            b,
            flags,
            ctx,
            fp_param,
            uses.memory || entry_kind == Entry::Run,
        );
        EntryState {
            ctx,
            ctx_slot,
            uses,
            fuel_left,
            regs,
            fp,
            fp_host,
            stack_delta,
        }
    }
}

/// The entry's r0 and r6-r9 start at 0; a callee's registers are its arguments (after
/// the context, the fuel slice and, when it takes one, the frame pointer).
fn passed_params(
    env: &ProgramEnv<'_>,
    plan: &FunctionPlan,
    entry_kind: Entry,
    params: &[Value],
) -> ([Option<Value>; 10], Option<Value>) {
    let mut passed = [None; 10];
    let mut fp_param = None;
    if entry_kind == Entry::Call {
        let abi = &env.abis[&plan.start];
        let mut next = 2;
        if abi.fp {
            fp_param = Some(params[next]);
            next += 1;
        }
        for &r in &abi.params {
            passed[usize::from(r)] = Some(params[next]);
            next += 1;
        }
    }
    (passed, fp_param)
}

/// The frame pointer, its host address and the stack's host-minus-virtual delta. The
/// entry's r10 is the top of the stack (`runtime::execute` is handed it by
/// `RunMemory::with_mapped`): a constant, so stack addresses are the stack's base plus
/// constants, one live value rather than two.
fn frame(
    b: &mut FunctionBuilder<'_>,
    flags: &Flags,
    ctx: Value,
    fp_param: Option<Value>,
    load_stack_base: bool,
) -> (Value, Value, Value) {
    let (fp, fp_off) = if let Some(fp) = fp_param {
        (fp, b.ins().band_imm_s(fp, 0xffff_ffff))
    } else {
        let top = RegionIdx::STACK.vaddr(STACK_SIZE as u32);
        (
            b.ins().iconst(types::I64, top as i64),
            b.ins().iconst(types::I64, STACK_SIZE as i64),
        )
    };
    let stack_base = if load_stack_base {
        let regions = b.ins().load(types::I64, flags.ctx, ctx, offsets::REGIONS);
        let stack_row = RegionIdx::STACK.0 as i32 * RegionEntry::SIZE as i32;
        b.ins().load(
            types::I64,
            flags.table,
            regions,
            stack_row + RegionEntry::OFFSET_BASE,
        )
    } else {
        b.ins().iconst(types::I64, 0)
    };
    let fp_host = b.ins().iadd(stack_base, fp_off);
    let stack_delta = b.ins().iadd_imm_s(
        stack_base,
        (RegionIdx::STACK.vaddr(0) as i64).wrapping_neg(),
    );
    (fp, fp_host, stack_delta)
}

/// A block for every leader of `plan` (cold where the plan says so).
fn leader_blocks(b: &mut FunctionBuilder<'_>, plan: &FunctionPlan) -> BTreeMap<u32, Block> {
    let mut blocks = BTreeMap::new();
    for &leader in &plan.leaders {
        let block = b.create_block();
        if plan.cold.contains(&leader) {
            b.set_cold_block(block);
        }
        blocks.insert(leader, block);
    }
    blocks
}

/// The versioned loops of `plan`, each with its unchecked copy's blocks and variables,
/// and the loop each body slot belongs to. The counting variant versions loops too: an
/// iteration runs in one copy or the other, and both copies bump the same counters (see
/// `count`).
fn loop_copies(
    b: &mut FunctionBuilder<'_>,
    env: &ProgramEnv<'_>,
    plan: &FunctionPlan,
    blocks: &BTreeMap<u32, Block>,
) -> (Vec<LoopCopy>, BTreeMap<u32, usize>) {
    let mut loop_copies = Vec::new();
    let mut loop_at = BTreeMap::new();
    for l in loops::plan_loops(env.insns, plan, !env.calls_helpers) {
        for &pc in &l.body {
            loop_at.insert(pc, loop_copies.len());
        }
        // A copy that leaves at its inner loops (see `inner`) never runs the slots
        // leading only there but to leave: cold.
        let iteration_cost = loops::iteration_cost(env.insns, plan, &l);
        let leaves = !l.inner.is_empty() && iteration_cost.is_some();
        let equal_sides = match leaves {
            true => inner::equal_sides(env.insns, &l),
            false => BTreeSet::new(),
        };
        let mut unchecked = BTreeMap::new();
        for &pc in &l.body {
            if blocks.contains_key(&pc) {
                let block = b.create_block();
                if plan.cold.contains(&pc)
                    || (leaves && (l.to_inner.contains(&pc) || equal_sides.contains(&pc)))
                {
                    b.set_cold_block(block);
                }
                unchecked.insert(pc, block);
            }
        }
        let group = unroll::GroupCopy::new(b, &l, blocks, plan, env.blocks.is_some());
        let cost = iteration_cost.filter(|_| group.is_none());
        let reguard = cost.map(|_| {
            let block = b.create_block();
            b.set_cold_block(block);
            block
        });
        let limit = cost.map(|_| b.declare_var(types::I64));
        let mid = cost.is_some() && (loops::enters_inside(env.insns, &l) || !l.inner.is_empty());
        let pending = mid.then(|| b.declare_var(types::I64));
        let recheck = mid.then(|| b.create_block());
        // One variable for the accesses through one pointer form: the guard gives them
        // one region, and a join of its two ways (see `cached`) then makes one block
        // parameter for them, not one each (blur3's nine loads took nine registers).
        let mut by_form: BTreeMap<[i64; 11], Variable> = BTreeMap::new();
        let deltas = l
            .accesses
            .iter()
            .map(|a| {
                let var = *by_form
                    .entry(a.coef)
                    .or_insert_with(|| b.declare_var(types::I64));
                (a.pc, var)
            })
            .collect();
        loop_copies.push(LoopCopy {
            header: l.header,
            body: l.body,
            accesses: l.accesses,
            narrow: l.narrow,
            lags: l.lags,
            checked_head: b.create_block(),
            unchecked,
            latch: b.create_block(),
            leave: b.create_block(),
            exits: BTreeMap::new(),
            counter: b.declare_var(types::I64),
            cost,
            limit,
            reguard,
            pending,
            recheck,
            refilled: BTreeMap::new(),
            deltas,
            group,
            nested: l.nested,
            checked_charges: l.checked_charges,
            inner: l.inner,
            inner_entries: BTreeMap::new(),
        });
    }
    (loop_copies, loop_at)
}

impl<'a, 'f> Translator<'a, 'f> {
    /// Creates every block, variable and loop copy of one function: the translator's
    /// fields.
    fn new(
        module: &mut JITModule,
        mut b: FunctionBuilder<'f>,
        env: &ProgramEnv<'a>,
        plan: &'a FunctionPlan,
        entry_kind: Entry,
    ) -> Self {
        let flags = mem_flags(&mut b, env);
        let (helper_sig, callees) = declare_callees(module, &mut b, env, plan);
        let start = EntryState::build(&mut b, env, plan, entry_kind, &flags);
        let counters = env
            .blocks
            .map(|m| Counters::new(&mut b, m, env.insns, plan));
        let blocks = leader_blocks(&mut b, plan);
        let caches = [(); 2].map(|()| CacheVars {
            neg_lo: b.declare_var(types::I64),
            limit: b.declare_var(types::I64),
            delta: b.declare_var(types::I64),
        });
        let (loop_copies, loop_at) = loop_copies(&mut b, env, plan, &blocks);
        // Not in the counting variant, whose counters follow the copies it knows.
        let bounded: Vec<bounded::BoundedCopy> = match env.blocks {
            Some(_) => Vec::new(),
            None => {
                let versioned = loop_copies.iter().map(|l| l.header).collect();
                crate::trips::bounded_loops(env.insns, plan, &versioned)
                    .into_iter()
                    .map(bounded::BoundedCopy::new)
                    .collect()
            }
        };
        let bounded_at = bounded
            .iter()
            .enumerate()
            .map(|(k, c)| (c.plan.header, k))
            .collect();
        let trap_exit = b.create_block();
        b.set_cold_block(trap_exit);
        let propagate = b.create_block();
        b.set_cold_block(propagate);
        Translator {
            b,
            insns: env.insns,
            plan,
            flags,
            blocks,
            regs: start.regs,
            fuel_left: start.fuel_left,
            ctx: start.ctx,
            ctx_slot: start.ctx_slot,
            fp: start.fp,
            fp_host: start.fp_host,
            caches,
            pointers: BTreeMap::from([(
                start.fp,
                PtrFact {
                    anchor: Anchor::Frame,
                    lo: 0,
                    hi: 0,
                    host: start.fp_host,
                },
            )]),
            globals: env.globals,
            stack_derived: BTreeSet::new(),
            bounds: BTreeMap::new(),
            stack_delta: start.stack_delta,
            input_delta: None,
            trap_exit,
            propagate,
            helper_sig,
            callees,
            open: false,
            calls_helpers: env.calls_helpers,
            frontend_config: env.frontend_config,
            counters,
            loops: loop_copies,
            loop_at,
            in_loop: None,
            unchecked: false,
            at: 0,
            group: None,
            entry: entry_kind,
            uses: start.uses,
            abis: env.abis,
            plans: env.plans,
            inline_exit: None,
            speculating: false,
            span_groups: spans::span_groups(env.insns, &plan.pcs, &plan.leaders, &plan.stack_bases),
            fast_group: None,
            bounded,
            bounded_at,
            fast: None,
        }
    }

    /// The block a jump (or fall-through) from the current slot to `t` goes to: inside
    /// a versioned loop, its header means the back-edge of the copy being translated,
    /// and a slot outside the unchecked copy one of its exit blocks.
    fn target(&mut self, t: u32) -> Block {
        match self.bounded_target(t) {
            Some(b) => b,
            None => self.context_target(t),
        }
    }

    /// [`Self::target`] but for bounded loops (see `bounded`).
    fn context_target(&mut self, t: u32) -> Block {
        if let Some(i) = self.in_loop {
            if let Some(b) = self.group.and_then(|k| self.group_target(i, k, t)) {
                return b;
            }
            let l = &mut self.loops[i];
            if self.unchecked {
                if t == l.header {
                    // A one-by-one iteration of a loop with a selected charge ends by
                    // trying a group (see `loops::Unroll::selected`).
                    return match &l.group {
                        Some(g) if g.selected() => g.regroup,
                        _ => l.latch,
                    };
                }
                if let Some(b) = self.inner_entry(i, t) {
                    return b;
                }
                let l = &mut self.loops[i];
                if let Some(&b) = l.unchecked.get(&t) {
                    return b;
                }
                let b = &mut self.b;
                return *l.exits.entry(t).or_insert_with(|| b.create_block());
            } else if t == l.header {
                return l.recheck.unwrap_or(l.checked_head);
            }
        }
        self.blocks[&t]
    }

    /// Translates the reachable instructions in slot order, one block per leader.
    fn body(&mut self) -> TResult<()> {
        let plan = self.plan;
        // Slots below `resume` were consumed by an if-conversion.
        let mut resume = 0;
        for &pc in &plan.pcs {
            if pc < resume {
                continue;
            }
            if let Some(&block) = self.blocks.get(&pc) {
                if self.open {
                    let to = self.target(pc);
                    self.b.ins().jump(to, &[]);
                }
                self.in_loop = self.loop_at.get(&pc).copied();
                self.b.switch_to_block(block);
                self.open = true;
                if let Some(i) = self.in_loop.filter(|&i| self.loops[i].header == pc) {
                    self.guard(i);
                    let head = self.loops[i].checked_head;
                    self.b.switch_to_block(head);
                }
            }
            assert!(
                self.open,
                "slot {pc} is reached only by fall-through, so its block is open"
            );
            if let Some(c) = &self.counters {
                c.enter(&mut self.b, pc);
            }
            self.at = pc;
            resume = match self.span_group(pc)? {
                Some(next) => next,
                None => self.insn(pc)?,
            };
        }
        assert!(!self.open, "the last reachable instruction ends its block");
        self.bounded_copies()
    }

    /// Translates the unchecked copy of every versioned loop, and its latch.
    fn unchecked_copies(&mut self) -> TResult<()> {
        let plan = self.plan;
        for i in 0..self.loops.len() {
            self.in_loop = Some(i);
            self.unchecked = true;
            let mut resume = 0;
            for &pc in &plan.pcs {
                if pc < resume || !self.loops[i].body.contains(&pc) {
                    continue;
                }
                if self.skipped_inner(i, pc) {
                    continue;
                }
                if let Some(&block) = self.loops[i].unchecked.get(&pc) {
                    if self.open {
                        let to = self.target(pc);
                        self.b.ins().jump(to, &[]);
                    }
                    self.b.switch_to_block(block);
                    self.open = true;
                }
                assert!(self.open, "slot {pc} of a loop copy is in an open block");
                if let Some(c) = &self.counters {
                    c.enter(&mut self.b, pc);
                }
                self.at = pc;
                resume = self.insn(pc)?;
            }
            assert!(!self.open, "a loop copy ends its last block");
            self.bounded_copies()?;
            let l = &self.loops[i];
            let (latch, leave, counter, head, checked) = (
                l.latch,
                l.leave,
                l.counter,
                l.unchecked[&l.header],
                l.checked_head,
            );
            self.b.switch_to_block(latch);
            let more = if let Some(limit) = l.limit {
                let limit = self.b.use_var(limit);
                let slice = self.b.use_var(self.fuel_left);
                self.b.ins().icmp(IntCC::UnsignedGreaterThan, slice, limit)
            } else {
                let left = self.b.use_var(counter);
                let left = self.b.ins().iadd_imm_s(left, -1);
                self.b.def_var(counter, left);
                left
            };
            self.b.ins().brif(more, head, &[], leave, &[]);
            self.enter(leave);
            self.clear_pending(i);
            self.b.ins().jump(checked, &[]);
            self.group_copies(i)?;
            let exits = std::mem::take(&mut self.loops[i].exits);
            for (t, exit) in exits {
                self.enter(exit);
                self.clear_pending(i);
                let to = self.blocks[&t];
                self.b.ins().jump(to, &[]);
            }
            self.inner_entry_blocks(i);
            self.resume_blocks(i);
            if let Some(reguard) = self.loops[i].reguard {
                self.b.switch_to_block(reguard);
                self.guard(i);
            }
        }
        self.in_loop = None;
        self.unchecked = false;
        Ok(())
    }

    /// On the unchecked copy's way out to the checked loop or past the loop: `pending`
    /// is clear there (the guards clear it, and nothing in the copy sets it; a refill in
    /// the copy resumes at a guard or at a block that sets it), so saying so keeps it
    /// from being carried around the copy's iterations in a register.
    fn clear_pending(&mut self, i: usize) {
        if let Some(pending) = self.loops[i].pending {
            let zero = self.b.ins().iconst(types::I64, 0);
            self.b.def_var(pending, zero);
        }
    }

    /// Emits loop `i`'s guard in the current block (the header's, entered from outside
    /// the loop, or the loop's `reguard`): for each access the unchecked copy makes, how
    /// many iterations keep it inside the region it starts in (see `loops`), and for each
    /// 32-bit result taken as a form, how many keep that form in range; the unchecked copy
    /// runs the fewest of those, and the checked loop takes over when that is none or
    /// they are done.
    fn guard(&mut self, i: usize) {
        let spans = loops::guard_spans(&self.loops[i].accesses);
        let regs = self.snapshot();
        let stays = self
            .group_exit(i)
            .map(|exit| self.exit_lower_bound(&exit, &regs));
        if let Some(stays) = stays.filter(|_| self.loops[i].nested) {
            // Both ways end the guard: the hit's count is `stays + 1`, so its slack
            // folds to zero (see `cached`).
            let (runs, miss) = self.cached_guard(i, &spans, &regs, stays);
            self.guard_tail(i, runs, &regs, Some(stays));
            self.enter(miss);
            let n = self.span_trips(i, &spans, &regs, true);
            self.guard_tail(i, n, &regs, Some(stays));
            return;
        }
        let n = self.span_trips(i, &spans, &regs, false);
        self.guard_tail(i, n, &regs, stays);
    }

    /// Ends loop `i`'s guard in the current block, `n` the iterations whose accesses it
    /// proved in bounds from the registers on entry `regs` (and `stays` the lower bound
    /// of the counted exit of a loop with groups): the fewer that keep each 32-bit form
    /// in range and that satisfy the lags, the fuel limit, and the way into the copies.
    fn guard_tail(&mut self, i: usize, mut n: Value, regs: &[Value; 10], stays: Option<Value>) {
        for w in self.loops[i].narrow.clone() {
            let m = self.narrow_trips(&w, regs);
            n = self.b.ins().umin(n, m);
        }
        // The forms take a lagging register as its induction variable plus a constant
        // (`loops::VersionedLoop::lags`): none of the unchecked copy's iterations when
        // the registers on entry do not say so.
        for (r, t, d) in self.loops[i].lags.clone() {
            let diff = self
                .b
                .ins()
                .isub(regs[usize::from(r)], regs[usize::from(t)]);
            let holds = self.b.ins().icmp_imm_s(IntCC::Equal, diff, d);
            let none = self.b.ins().iconst(types::I64, 0);
            n = self.b.ins().select(holds, n, none);
        }
        if let Some(cost) = self.loops[i].cost {
            self.fuel_limit(i, n, cost);
        }
        let l = &self.loops[i];
        let (counter, head, checked) = (l.counter, l.unchecked[&l.header], l.checked_head);
        let go = match l.limit {
            // Some iteration is paid for exactly when the limit is below the slice.
            // Testing that here (not `n`) makes Cranelift compute the limit here: its
            // only other use is the latch, and a value first needed inside a loop is
            // computed there when an operand is a constant (made again in each block).
            Some(limit) => {
                let limit = self.b.use_var(limit);
                let slice = self.b.use_var(self.fuel_left);
                self.b.ins().icmp(IntCC::UnsignedGreaterThan, slice, limit)
            }
            None => {
                self.b.def_var(counter, n);
                if let Some(stays) = stays {
                    self.guard_groups(i, n, stays);
                    return;
                }
                n
            }
        };
        self.b.ins().brif(go, head, &[], checked, &[]);
    }

    /// For loop `i`'s guard: how many iterations, from the registers on entry `regs`,
    /// keep every span in the region it starts in (the fewest of [`Self::access_trips`]),
    /// each access's delta defined for the unchecked copy. `refill`: the region each span
    /// starts in is cached for the next guard to find (see `cached`).
    fn span_trips(
        &mut self,
        i: usize,
        spans: &[loops::GuardSpan],
        regs: &[Value; 10],
        refill: bool,
    ) -> Value {
        let mut n: Option<Value> = None;
        // Accesses through the same pointer (the same form but for the constant) must
        // stay in the region the first of them starts in: (index, row, delta) by form.
        let mut groups: BTreeMap<[i64; 11], (Value, Value, Value)> = BTreeMap::new();
        for span in spans {
            let (count, delta) = self.access_trips(span, regs, &mut groups, refill);
            n = Some(match n {
                Some(m) => self.b.ins().umin(m, count),
                None => count,
            });
            for pc in &span.pcs {
                let var = self.loops[i].deltas[pc];
                self.b.def_var(var, delta);
            }
        }
        n.expect("a versioned loop has an unchecked access")
    }

    /// For the guard of loop `i`, whose accesses allow `n` iterations and whose
    /// iterations charge `cost`: the slice above which an iteration may start (see
    /// [`LoopCopy`]). The slice is below 2^32, so `div` applies, and `n` cut to what it
    /// pays at `least` keeps the subtraction from wrapping.
    fn fuel_limit(&mut self, i: usize, n: Value, cost: loops::IterationFuel) {
        let slice = self.b.use_var(self.fuel_left);
        let least = cost.least as i64;
        let paid = div(&mut self.b, slice, least);
        let n = self.b.ins().umin(n, paid);
        let spent = self.b.ins().imul_imm_s(n, least);
        let mut limit = self.b.ins().isub(slice, spent);
        if cost.most != cost.least {
            let floor = self.b.ins().iconst(types::I64, cost.most as i64 - 1);
            limit = self.b.ins().umax(limit, floor);
        }
        let var = self.loops[i].limit.expect("a loop with a cost has a limit");
        self.b.def_var(var, limit);
        if let Some(pending) = self.loops[i].pending {
            let zero = self.b.ins().iconst(types::I64, 0);
            self.b.def_var(pending, zero);
        }
    }

    /// Loop `i`'s blocks where a refill in its checked loop resumes at a slot other than
    /// the header (noting that the header should guard again), and its checked way into
    /// the header, which does (see [`LoopCopy`]).
    fn resume_blocks(&mut self, i: usize) {
        let Some(pending) = self.loops[i].pending else {
            return;
        };
        for (t, block) in std::mem::take(&mut self.loops[i].refilled) {
            self.enter(block);
            let one = self.b.ins().iconst(types::I64, 1);
            self.b.def_var(pending, one);
            let to = self.blocks[&t];
            self.b.ins().jump(to, &[]);
        }
        let l = &self.loops[i];
        let (recheck, reguard, head) = (l.recheck, l.reguard, l.checked_head);
        let (recheck, reguard) = (
            recheck.expect("kept with pending"),
            reguard.expect("a cost"),
        );
        self.enter(recheck);
        let set = self.b.use_var(pending);
        self.b.ins().brif(set, reguard, &[], head, &[]);
    }

    /// For the guard: how many iterations, from the registers on entry `regs`, keep
    /// the bytes of span `a` inside the region they start in (0 when they start outside),
    /// and the host minus virtual address of that region. `groups` holds the region of
    /// each pointer form seen so far.
    fn access_trips(
        &mut self,
        a: &loops::GuardSpan,
        regs: &[Value; 10],
        groups: &mut BTreeMap<[i64; 11], (Value, Value, Value)>,
        refill: bool,
    ) -> (Value, Value) {
        let addr = self.eval_form((a.coef, a.k), regs);
        if a.stack {
            return (self.stack_trips(a, addr), self.stack_delta);
        }
        let b = &mut self.b;
        let idx = b.ins().ushr_imm_s(addr, 32);
        let off = b.ins().band_imm_s(addr, 0xffff_ffff);
        let (same, len, delta) = if a.stack {
            let same = b
                .ins()
                .icmp_imm_s(IntCC::Equal, idx, i64::from(RegionIdx::STACK.0));
            let len = b.ins().iconst(types::I64, STACK_SIZE as i64);
            (same, len, self.stack_delta)
        } else {
            let (gidx, row, delta) = match groups.get(&a.coef) {
                Some(&g) => g,
                None => {
                    // The table's address may leave loops here: a row whose address is
                    // invariant in an outer loop is then found once, before it.
                    let regions = self.fixed_regions();
                    let (row, _) = self.row_of(regions, addr);
                    let b = &mut self.b;
                    let base =
                        b.ins()
                            .load(types::I64, self.flags.table, row, RegionEntry::OFFSET_BASE);
                    let lo = b.ins().ishl_imm_s(idx, 32);
                    let delta = b.ins().isub(base, lo);
                    groups.insert(a.coef, (idx, row, delta));
                    (idx, row, delta)
                }
            };
            let field = if a.write {
                RegionEntry::OFFSET_WRITE_LEN
            } else {
                RegionEntry::OFFSET_READ_LEN
            };
            let len = self.b.ins().load(types::I64, self.flags.table, row, field);
            if refill {
                self.refill_from_guard(a.write, gidx, delta, len);
            }
            let b = &mut self.b;
            (b.ins().icmp(IntCC::Equal, idx, gidx), len, delta)
        };
        let b = &mut self.b;
        let end = b.ins().iadd_imm_s(off, a.len);
        let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, len);
        let ok = b.ins().band(same, fits);
        let count = match a.stride.signum() {
            1 => {
                let room = b.ins().isub(len, end);
                let q = div(b, room, a.stride);
                b.ins().iadd_imm_s(q, 1)
            }
            -1 => {
                let q = div(b, off, -a.stride);
                b.ins().iadd_imm_s(q, 1)
            }
            _ => b.ins().iconst(types::I64, i64::MAX),
        };
        let zero = b.ins().iconst(types::I64, 0);
        (b.ins().select(ok, count, zero), delta)
    }

    /// [`Self::access_trips`] for a span through the stack, whose region and length are
    /// constants: the offset from the stack's first byte (wrapped, so an address in
    /// another region is above any bound) compared once with the last offset at which
    /// the span's bytes fit, instead of the region index and the end compared apart.
    fn stack_trips(&mut self, a: &loops::GuardSpan, addr: Value) -> Value {
        let b = &mut self.b;
        let last = STACK_SIZE as i64 - a.len;
        if last < 0 {
            return b.ins().iconst(types::I64, 0);
        }
        let start = RegionIdx::STACK.vaddr(0) as i64;
        let rel = b.ins().iadd_imm_s(addr, start.wrapping_neg());
        trips_within(b, rel, last, a.stride)
    }

    /// How many iterations, from the registers on entry `regs`, keep the form of `w` in
    /// `[0, 2^32)` (0 when it starts outside): the iterations in which the 32-bit result
    /// it stands for is that form.
    fn narrow_trips(&mut self, w: &loops::Narrow, regs: &[Value; 10]) -> Value {
        let v = self.eval_form((w.coef, w.k), regs);
        trips_within(&mut self.b, v, 0xffff_ffff, w.stride)
    }

    /// Fills the shared exits and completes the function.
    fn finish(mut self) {
        self.b.switch_to_block(self.trap_exit);
        self.store_fuel();
        self.flush_counters(true);
        self.return_trap();

        self.b.switch_to_block(self.propagate);
        self.flush_counters(false);
        self.return_trap();

        self.b.seal_all_blocks();
        self.b.finalize(self.frontend_config);
    }

    /// Returns the trap status (the trap and the fuel are in the context); a callee's
    /// other return values are then meaningless.
    fn return_trap(&mut self) {
        let status = self.b.ins().iconst(types::I64, STATUS_TRAP as i64);
        let mut values = vec![status];
        if self.entry == Entry::Call {
            let abi = &self.abis[&self.plan.start];
            let zero = self.b.ins().iconst(types::I64, 0);
            values.resize(3 + abi.returns.len(), zero);
        }
        self.b.ins().return_(&values);
    }

    /// Adds the block counters into the run's buffer (counting variant only);
    /// `trapped` at the trap exit.
    fn flush_counters(&mut self, trapped: bool) {
        if let Some(c) = &self.counters {
            c.flush(&mut self.b, self.ctx, self.flags.ctx, trapped);
        }
    }

    /// Switches to `block`, an internal block whose every predecessor is already
    /// emitted, and seals it.
    ///
    /// Sealing early lets the SSA builder resolve a register to the one value that
    /// reaches a block instead of adding a block parameter for it: unsealed join blocks
    /// in a loop (the continuation of each bounds check) otherwise form cycles of
    /// redundant parameters that no later pass removes, each costing a register or a
    /// spill in the loop. Leaders stay unsealed until the end (sealing the non-loop ones
    /// early too made the filter benchmark's speculative regions about 10% slower).
    fn enter(&mut self, block: Block) {
        self.b.switch_to_block(block);
        self.b.seal_block(block);
    }

    fn unsupported(&self, pc: u32) -> TranslateError {
        TranslateError::Unsupported {
            pc,
            opcode: self.insns[pc as usize].opc,
        }
    }

    /// Translates the instruction at `pc`; returns the slot where translation goes on.
    fn insn(&mut self, pc: u32) -> TResult<u32> {
        let insn = self.insns[pc as usize];
        let next = pc + insn_len(&insn);
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => self.alu(pc, &insn)?,
            CLASS_LD => self.lddw(pc, &insn)?,
            CLASS_LDX => self.load(pc, &insn)?,
            CLASS_ST | CLASS_STX => self.store(pc, &insn)?,
            _ => return self.jump_class(pc, &insn),
        }
        Ok(next)
    }

    // ---- registers -------------------------------------------------------------------

    fn reg(&mut self, pc: u32, r: u8) -> TResult<Value> {
        match r {
            0..=9 => Ok(self.b.use_var(self.regs[r as usize])),
            REG_FP => Ok(self.fp),
            _ => Err(self.unsupported(pc)),
        }
    }

    fn set_reg(&mut self, pc: u32, r: u8, v: Value) -> TResult<()> {
        if r > 9 {
            return Err(self.unsupported(pc));
        }
        self.b.def_var(self.regs[r as usize], v);
        Ok(())
    }

    /// Register `r` as `ty` (its low 32 bits for `I32`).
    fn reg_as(&mut self, pc: u32, r: u8, ty: Type) -> TResult<Value> {
        let v = self.reg(pc, r)?;
        Ok(if ty == types::I32 {
            self.b.ins().ireduce(types::I32, v)
        } else {
            v
        })
    }

    /// The immediate as an operand of type `ty`: sign-extended for 64-bit operations,
    /// the raw 32 bits for 32-bit ones (RFC 9669 §4).
    fn imm(&mut self, imm: i32, ty: Type) -> Value {
        let bits = if ty == types::I32 {
            i64::from(imm as u32)
        } else {
            i64::from(imm)
        };
        self.b.ins().iconst(ty, bits)
    }

    fn snapshot(&mut self) -> [Value; 10] {
        std::array::from_fn(|r| self.b.use_var(self.regs[r]))
    }

    // ---- ALU -------------------------------------------------------------------------

    /// ALU and ALU64 instructions (RFC 9669 §4.1, §4.2).
    fn alu(&mut self, pc: u32, insn: &Insn) -> TResult<()> {
        let is64 = insn.class() == CLASS_ALU64;
        let op = insn.opc & 0xf0;
        let by_reg = insn.opc & SRC_X != 0;
        if op == ALU_END {
            return self.byte_swap(pc, insn, is64, by_reg);
        }
        let ty = if is64 { types::I64 } else { types::I32 };
        let d = self.reg_as(pc, insn.dst, ty)?;
        let s = if by_reg {
            self.reg_as(pc, insn.src, ty)?
        } else {
            self.imm(insn.imm, ty)
        };
        let k = (!by_reg).then_some(insn.imm);
        let (d, s) = self.group_operands(op, d, s);
        let b = &mut self.b;
        let result = match op {
            ALU_ADD => b.ins().iadd(d, s),
            ALU_SUB => b.ins().isub(d, s),
            ALU_MUL => b.ins().imul(d, s),
            ALU_OR => b.ins().bor(d, s),
            ALU_AND => b.ins().band(d, s),
            ALU_XOR => b.ins().bxor(d, s),
            // Cranelift masks shift amounts by the operand width, as eBPF does.
            ALU_LSH => b.ins().ishl(d, s),
            ALU_RSH => b.ins().ushr(d, s),
            ALU_ARSH => b.ins().sshr(d, s),
            ALU_NEG if !by_reg => b.ins().ineg(d),
            ALU_DIV | ALU_MOD => match insn.off {
                0 => self.unsigned_div(op == ALU_DIV, d, s, k, ty),
                1 => self.signed_div(op == ALU_DIV, d, s, k, ty),
                _ => return Err(self.unsupported(pc)),
            },
            ALU_MOV => match (by_reg, insn.off, is64) {
                (_, 0, _) => s,
                (true, 8 | 16 | 32, true) | (true, 8 | 16, false) => {
                    let narrow = Type::int(insn.off as u16).expect("8, 16 or 32 bits");
                    let low = b.ins().ireduce(narrow, s);
                    b.ins().sextend(ty, low)
                }
                _ => return Err(self.unsupported(pc)),
            },
            _ => return Err(self.unsupported(pc)),
        };
        let result = if is64 {
            result
        } else {
            self.b.ins().uextend(types::I64, result)
        };
        self.alu_facts(pc, insn, result)?;
        self.set_reg(pc, insn.dst, result)
    }

    /// Records what is known of an ALU result: its unsigned bound, and where it points
    /// relative to r10. `mov` of a register (the same value) keeps the source's facts.
    fn alu_facts(&mut self, pc: u32, insn: &Insn, result: Value) -> TResult<()> {
        let d = self.reg(pc, insn.dst)?;
        let s = if insn.opc & SRC_X != 0 {
            Some(self.reg(pc, insn.src)?)
        } else {
            None
        };
        let (bd, bs) = self.alu_bound(pc, insn, (d, s), result);
        if insn.class() == CLASS_ALU64 {
            self.pointer_facts(insn, (d, bd), (s, bs), result);
        }
        Ok(())
    }

    /// Records the unsigned bound of ALU result `result` (of `insn` at `pc` on `d` and
    /// `s`, the source register's value if it has one); returns the operands' bounds.
    /// Those include what the plan's value ranges prove at `pc` (see `proven`).
    fn alu_bound(
        &mut self,
        pc: u32,
        insn: &Insn,
        (d, s): (Value, Option<Value>),
        result: Value,
    ) -> (u64, u64) {
        let is64 = insn.class() == CLASS_ALU64;
        let width_max = if is64 { u64::MAX } else { u64::from(u32::MAX) };
        let bd = self.bound_of(d).min(self.proven_bound(pc, insn.dst));
        let bs = s.map(|s| self.bound_of(s).min(self.proven_bound(pc, insn.src)));
        let bound = crate::ranges::alu_result_bound(insn, bd, bs);
        // A `mov` gives back its source: a bound proven at `pc` only is not that value's.
        if bound < u64::MAX && result != d && Some(result) != s {
            self.bounds.insert(result, bound);
        }
        let imm = if is64 {
            i64::from(insn.imm) as u64
        } else {
            u64::from(insn.imm as u32)
        };
        (bd.min(width_max), bs.unwrap_or(imm).min(width_max))
    }

    /// Records where a 64-bit ALU result `result` points (of `insn` on `d` and `s`, each
    /// with its bound): a pointer from r10 or a global section moved by a constant or a
    /// bounded index, or at least derived from the stack.
    fn pointer_facts(
        &mut self,
        insn: &Insn,
        (d, bd): (Value, u64),
        (s, bs): (Option<Value>, u64),
        result: Value,
    ) {
        let op = insn.opc & 0xf0;
        // Track pointers from r10 and from global sections through constant `add`/`sub`
        // and the `add` of a bounded index.
        let within = |lo: i64, hi: i64| lo.abs() <= FACT_OFFSET_MAX && hi.abs() <= FACT_OFFSET_MAX;
        let fact = match (op, s) {
            (ALU_ADD | ALU_SUB, None) => match self.pointers.get(&d).copied() {
                Some(f) => {
                    let k = i64::from(insn.imm);
                    let k = if op == ALU_ADD { k } else { -k };
                    let (lo, hi) = (f.lo + k, f.hi + k);
                    within(lo, hi).then(|| PtrFact {
                        anchor: f.anchor,
                        lo,
                        hi,
                        host: self.b.ins().iadd_imm_s(f.host, k),
                    })
                }
                None => None,
            },
            (ALU_ADD, Some(s)) => {
                let d_fact = self.pointers.get(&d).copied();
                let s_fact = self.pointers.get(&s).copied();
                let (f, index, bound) = match (d_fact, s_fact) {
                    (Some(f), None) => (Some(f), s, bs),
                    (None, Some(f)) => (Some(f), d, bd),
                    _ => (None, d, u64::MAX),
                };
                match f {
                    Some(f) if bound <= FACT_OFFSET_MAX as u64 => {
                        let hi = f.hi + bound as i64;
                        within(f.lo, hi).then(|| PtrFact {
                            anchor: f.anchor,
                            lo: f.lo,
                            hi,
                            host: self.b.ins().iadd(f.host, index),
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        match fact {
            Some(fact) => {
                self.pointers.insert(result, fact);
            }
            None => {
                let from_stack = |v: &Value| {
                    self.pointers
                        .get(v)
                        .is_some_and(|f| f.anchor == Anchor::Frame)
                        || self.stack_derived.contains(v)
                };
                let derived = match (op, s) {
                    (ALU_ADD | ALU_SUB, None) => from_stack(&d),
                    (ALU_ADD, Some(s)) => from_stack(&d) || from_stack(&s),
                    (ALU_SUB, Some(_)) => from_stack(&d),
                    _ => false,
                };
                if derived {
                    self.stack_derived.insert(result);
                }
            }
        }
    }

    /// The unsigned bound known for `v` (`u64::MAX` when nothing is known).
    fn bound_of(&self, v: Value) -> u64 {
        self.bounds.get(&v).copied().unwrap_or(u64::MAX)
    }

    /// `div`/`mod`: by zero, the quotient is 0 and the remainder is the dividend.
    fn unsigned_div(&mut self, div: bool, x: Value, y: Value, k: Option<i32>, ty: Type) -> Value {
        let b = &mut self.b;
        match k.map(|k| {
            if ty == types::I32 {
                i64::from(k as u32)
            } else {
                i64::from(k)
            }
        }) {
            Some(0) if div => b.ins().iconst(ty, 0),
            Some(0) => x,
            Some(_) if div => b.ins().udiv(x, y),
            Some(_) => b.ins().urem(x, y),
            None => {
                let zero = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                let one = b.ins().iconst(ty, 1);
                let safe = b.ins().select(zero, one, y);
                if div {
                    let q = b.ins().udiv(x, safe);
                    let z = b.ins().iconst(ty, 0);
                    b.ins().select(zero, z, q)
                } else {
                    let r = b.ins().urem(x, safe);
                    b.ins().select(zero, x, r)
                }
            }
        }
    }

    /// `sdiv`/`smod` (offset 1): by zero as unsigned; by -1 the quotient is the wrapping
    /// negation (`INT_MIN / -1 = INT_MIN`) and the remainder 0, computed without the
    /// hardware divide, which faults on `INT_MIN / -1`.
    fn signed_div(&mut self, div: bool, x: Value, y: Value, k: Option<i32>, ty: Type) -> Value {
        let b = &mut self.b;
        match k {
            Some(0) if div => b.ins().iconst(ty, 0),
            Some(0) => x,
            Some(-1) if div => b.ins().ineg(x),
            Some(-1) => b.ins().iconst(ty, 0),
            Some(_) if div => b.ins().sdiv(x, y),
            Some(_) => b.ins().srem(x, y),
            None => {
                let zero = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                let minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                let special = b.ins().bor(zero, minus_one);
                let one = b.ins().iconst(ty, 1);
                let safe = b.ins().select(special, one, y);
                if div {
                    let q = b.ins().sdiv(x, safe);
                    let neg = b.ins().ineg(x);
                    let q = b.ins().select(minus_one, neg, q);
                    let z = b.ins().iconst(ty, 0);
                    b.ins().select(zero, z, q)
                } else {
                    // `x % 1 == 0`, which is also the answer for a divisor of -1.
                    let r = b.ins().srem(x, safe);
                    b.ins().select(zero, x, r)
                }
            }
        }
    }

    /// `le`/`be` (class ALU) and `bswap` (class ALU64), RFC 9669 §4.2. The host is
    /// little-endian, so `le` truncates and `be`/`bswap` swap.
    fn byte_swap(&mut self, pc: u32, insn: &Insn, is64: bool, by_reg: bool) -> TResult<()> {
        if is64 && by_reg {
            return Err(self.unsupported(pc));
        }
        let swap = is64 || by_reg;
        let v = self.reg(pc, insn.dst)?;
        let b = &mut self.b;
        let result = match (insn.imm, swap) {
            (16, false) => b.ins().band_imm_s(v, 0xffff),
            (32, false) => b.ins().band_imm_s(v, 0xffff_ffff),
            (64, false) => v,
            (16 | 32, true) => {
                let narrow = Type::int(insn.imm as u16).expect("16 or 32 bits");
                let low = b.ins().ireduce(narrow, v);
                let swapped = b.ins().bswap(low);
                b.ins().uextend(types::I64, swapped)
            }
            (64, true) => b.ins().bswap(v),
            _ => return Err(self.unsupported(pc)),
        };
        self.set_reg(pc, insn.dst, result)
    }

    /// `lddw dst, imm64` (RFC 9669 §5.4): the loader has already turned every symbolic
    /// form into a plain constant.
    fn lddw(&mut self, pc: u32, insn: &Insn) -> TResult<()> {
        if insn.opc != OP_LDDW {
            return Err(self.unsupported(pc));
        }
        let high = self
            .insns
            .get(pc as usize + 1)
            .ok_or_else(|| self.unsupported(pc))?
            .imm;
        let value = u64::from(insn.imm as u32) | (u64::from(high as u32) << 32);
        let v = self.b.ins().iconst(types::I64, value as i64);
        self.note_global_address(v, value);
        self.set_reg(pc, insn.dst, v)
    }

    /// Records that `v`, the constant `value`, points into a global section (a table
    /// in `.rodata`, a variable in `.data`): its host address is the section's base
    /// plus the offset.
    fn note_global_address(&mut self, v: Value, value: u64) {
        let idx = (value >> 32) as u32;
        let off = value & 0xffff_ffff;
        let Some(n) = idx.checked_sub(RegionIdx::GLOBALS_FIRST.0) else {
            return;
        };
        let n = n as usize;
        let Some(region) = self.globals.get(n) else {
            return;
        };
        if off > region.read_len {
            return;
        }
        let base = self.global_base(n);
        let host = self.b.ins().iadd_imm_s(base, off as i64);
        self.pointers.insert(
            v,
            PtrFact {
                anchor: Anchor::Global(n),
                lo: off as i64,
                hi: off as i64,
                host,
            },
        );
    }

    /// The host address of global section `n`'s first byte. The row never changes
    /// during a run (see [`KnownRegion`]), so its load may move and merge freely.
    fn global_base(&mut self, n: usize) -> Value {
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        let regions = self.fixed_regions();
        let idx = RegionIdx::GLOBALS_FIRST.0 as usize + n;
        let row = (idx * RegionEntry::SIZE) as i32;
        self.b
            .ins()
            .load(types::I64, fixed, regions, row + RegionEntry::OFFSET_BASE)
    }

    // ---- memory ----------------------------------------------------------------------

    fn access_size(&self, pc: u32, insn: &Insn) -> TResult<u8> {
        Ok(match insn.opc & 0x18 {
            SIZE_B => 1,
            SIZE_H => 2,
            SIZE_W => 4,
            SIZE_DW => 8,
            _ => return Err(self.unsupported(pc)),
        })
    }

    /// The access an `ldx`/`ldxs` instruction makes.
    fn load_op(&self, pc: u32, insn: &Insn) -> TResult<MemOp> {
        let size = self.access_size(pc, insn)?;
        let signed = match insn.opc & 0xe0 {
            MODE_MEM => false,
            MODE_MEMSX if size < 8 => true,
            _ => return Err(self.unsupported(pc)),
        };
        if insn.dst > 9 {
            return Err(self.unsupported(pc));
        }
        Ok(MemOp::Load { size, signed })
    }

    /// `ldx` and the sign-extending `ldxs` (RFC 9669 §5.1, §5.2).
    fn load(&mut self, pc: u32, insn: &Insn) -> TResult<()> {
        let op = self.load_op(pc, insn)?;
        let v = self.access(pc, insn.src, insn.off, op)?;
        let v = v.expect("loads produce a value");
        self.note_load_bound(op, v);
        self.set_reg(pc, insn.dst, v)
    }

    /// `st` (immediate), `stx` (register) and the atomics (RFC 9669 §5.3).
    fn store(&mut self, pc: u32, insn: &Insn) -> TResult<()> {
        let size = self.access_size(pc, insn)?;
        let mode = insn.opc & 0xe0;
        match (insn.class(), mode) {
            (CLASS_ST, MODE_MEM) => {
                let value = self.b.ins().iconst(types::I64, i64::from(insn.imm));
                self.access(pc, insn.dst, insn.off, MemOp::Store { size, value })?;
            }
            (CLASS_STX, MODE_MEM) => {
                let value = self.reg(pc, insn.src)?;
                self.access(pc, insn.dst, insn.off, MemOp::Store { size, value })?;
            }
            (CLASS_STX, MODE_ATOMIC) if size >= 4 => self.atomic(pc, insn, size)?,
            _ => return Err(self.unsupported(pc)),
        }
        Ok(())
    }

    fn atomic(&mut self, pc: u32, insn: &Insn, size: u8) -> TResult<()> {
        let op = insn.imm;
        if !atomic_op_supported(op) {
            return Err(self.unsupported(pc));
        }
        let src = self.reg(pc, insn.src)?;
        let r0 = self.reg(pc, 0)?;
        let old = self
            .access(pc, insn.dst, insn.off, MemOp::Atomic { size, op, src, r0 })?
            .expect("atomics produce the old value");
        if op == ATOMIC_CMPXCHG {
            self.set_reg(pc, 0, old)?;
        } else if op & ATOMIC_FETCH != 0 {
            self.set_reg(pc, insn.src, old)?;
        }
        Ok(())
    }

    /// Records the bound of a zero-extending load's value.
    fn note_load_bound(&mut self, op: MemOp, v: Value) {
        if let MemOp::Load {
            size: size @ 1..=4,
            signed: false,
        } = op
        {
            self.bounds.insert(v, (1u64 << (8 * u32::from(size))) - 1);
        }
    }

    /// Where an access of `size` bytes at `v + off` (register `reg` at slot `pc`) lies
    /// inside the current frame, `[r10 - 512, r10)`, whatever the value of any index
    /// added to r10 (or as the plan's value ranges prove): its host base and
    /// displacement. Such an access needs no check (see the module doc).
    fn frame_access(
        &mut self,
        (pc, reg): (u32, u8),
        v: Value,
        off: i16,
        size: i64,
    ) -> Option<(Value, i32)> {
        self.known_frame_access(v, off, size).or_else(|| {
            let host = self.proven_frame_access(pc, reg, v, off, size)?;
            Some((host, i32::from(off)))
        })
    }

    /// [`Self::frame_access`] from what is known of the value `v` itself.
    fn known_frame_access(&self, v: Value, off: i16, size: i64) -> Option<(Value, i32)> {
        let f = *self.pointers.get(&v)?;
        if f.anchor != Anchor::Frame {
            return None;
        }
        let (lo, hi) = (f.lo + i64::from(off), f.hi + i64::from(off));
        if lo < -(STACK_FRAME_SIZE as i64) || hi + size > 0 {
            return None;
        }
        if lo == hi {
            return Some((self.fp_host, lo as i32));
        }
        Some((f.host, i32::from(off)))
    }

    /// Whether the access at `pc` through `v` probably goes to the stack: `v` was
    /// computed from r10 in this block, or the access's base register holds an address
    /// computed from r10 on every path (`FunctionPlan::stack_bases`). Such accesses try
    /// the stack's constant check first instead of the region caches.
    fn stack_based(&self, pc: u32, v: Value) -> bool {
        self.pointers
            .get(&v)
            .is_some_and(|f| f.anchor == Anchor::Frame)
            || self.stack_derived.contains(&v)
            || self.plan.stack_bases.contains(&pc)
    }

    /// Where an access of `size` bytes at `v + off` lies inside the global section `v`
    /// was computed from, whatever the value of any index added to the section's
    /// address: its host base, displacement, and the flags to access it with (a
    /// read-only section never changes during a run, so its loads are pure values that
    /// Cranelift may merge and hoist). Such an access needs no check.
    fn global_access(
        &mut self,
        v: Value,
        off: i16,
        size: i64,
        write: bool,
    ) -> Option<(Value, i32, MemFlagsData)> {
        let f = *self.pointers.get(&v)?;
        let Anchor::Global(n) = f.anchor else {
            return None;
        };
        let region = self.globals[n];
        let (lo, hi) = (f.lo + i64::from(off), f.hi + i64::from(off));
        if lo < 0 || hi + size > region.len(write) as i64 {
            return None;
        }
        let fl = if region.write_len == 0 {
            self.flags.heap.with_readonly().with_can_move()
        } else {
            self.flags.heap
        };
        Some((f.host, i32::from(off), fl))
    }

    /// The fast check an access of `size` bytes through `v` tries first: the stack's
    /// constant check for an address computed from r10, the constant bounds of the
    /// global section an address was computed from, else the region cache; and whether
    /// it is the region cache, which a miss then refills.
    ///
    /// A miss of the constant checks leaves the cache as it was (it is only a hint),
    /// so the cache variables are not redefined inside a loop that reaches the stack
    /// or a section this way: they are then no loop-carried values its hot path passes
    /// on. partition's scans over a stack array reloaded the three of them at every
    /// byte, to hand them to the join after the check.
    fn first_check(&mut self, pc: u32, v: Value, size: i64, write: bool) -> (CacheValues, bool) {
        if self.stack_based(pc, v) {
            return (self.stack_cache(size), false);
        }
        if let Some(c) = self.global_cache(v, size, write) {
            return (c, false);
        }
        (self.cache(write), true)
    }

    /// The global section `v` was computed from as a region cache with its exact,
    /// constant bounds for an access of `size` bytes (`len - size`, not a cache's
    /// `len - 8`): an address that leaves it, into another region, misses and takes the
    /// exact check on the table.
    fn global_cache(&mut self, v: Value, size: i64, write: bool) -> Option<CacheValues> {
        let Anchor::Global(n) = self.pointers.get(&v)?.anchor else {
            return None;
        };
        let len = self.globals[n].len(write) as i64;
        if len < size {
            return None;
        }
        let lo = RegionIdx(RegionIdx::GLOBALS_FIRST.0 + n as u32).vaddr(0) as i64;
        let base = self.global_base(n);
        let b = &mut self.b;
        Some(CacheValues {
            neg_lo: b.ins().iconst(types::I64, lo.wrapping_neg()),
            limit: b.ins().iconst(types::I64, len - size),
            delta: b.ins().iadd_imm_s(base, lo.wrapping_neg()),
        })
    }

    /// The stack as a region cache for an access of `size` bytes: constant, always
    /// valid (the stack is always mapped with `STACK_SIZE` bytes, for loads and stores,
    /// and never moves during a run), with its exact bound (`STACK_SIZE - size`, not a
    /// cache's `len - 8`): a byte array in the frame's top 8 bytes, such as a small
    /// table indexed by data (`pat[k]`), hits, rather than taking the table check and
    /// evicting the input's region from the read cache on every access.
    fn stack_cache(&mut self, size: i64) -> CacheValues {
        let lo = RegionIdx::STACK.vaddr(0) as i64;
        CacheValues {
            neg_lo: self.b.ins().iconst(types::I64, lo.wrapping_neg()),
            limit: self.b.ins().iconst(types::I64, STACK_SIZE as i64 - size),
            delta: self.stack_delta,
        }
    }

    /// Emits a checked access of `op.size()` bytes at `reg + off`; returns the loaded
    /// (or old) value, zero- or sign-extended to 64 bits.
    fn access(&mut self, pc: u32, reg: u8, off: i16, op: MemOp) -> TResult<Option<Value>> {
        let size = i64::from(op.size());
        let v = self.reg(pc, reg)?;

        // The current frame, `[r10 - 512, r10)`, needs no check (see the module doc).
        if let Some((host, disp)) = self.frame_access((pc, reg), v, off, size) {
            return Ok(self.emit_op(host, disp, op));
        }
        // Nor does an access proven inside the global section its address came from.
        if let Some((host, disp, fl)) = self.global_access(v, off, size, op.writes()) {
            return Ok(self.emit_op_with(host, disp, op, fl));
        }
        // Nor a load the entry facts prove inside the entry's input.
        if let Some(host) = self.proven_input_access(pc, reg, v, off, op) {
            return Ok(self.emit_op(host, i32::from(off), op));
        }
        // In a loop's unchecked copy, the guard proved this access in bounds.
        if let Some(host) = self.proven_by_guard(pc, v) {
            return Ok(self.emit_unchecked(pc, host, i32::from(off), op));
        }

        // In the fast copy of a span group, its span check proved this access in bounds.
        if let Some(host) = self.group_member(pc, v, op.writes()) {
            return Ok(self.emit_op(host, i32::from(off), op));
        }

        // Hit: the access lies in the cached region. An address computed from r10 is
        // checked against the stack instead, so that stack accesses at a variable index
        // do not evict the region another access keeps in the cache.
        // Nor does its miss refill the cache (see `first_check`).
        let (first, cached) = self.first_check(pc, v, size, op.writes());
        let hit = self.cache_hit(&first, v, off);
        // The hit runs the operation in its own block (falling through, with the
        // `delta + v + off` addressing); the miss is cold: the exact check on the
        // table, then a refill and the operation, or the trap. (Joining both paths
        // at one operation, with the delta as a block parameter, put a move and a jump
        // on every hit: fnv, cksum, grep and matmul got 25-90% slower.)
        let hit_block = self.b.create_block();
        let miss = self.b.create_block();
        let cont = self.b.create_block();
        let result = op
            .has_result()
            .then(|| self.b.append_block_param(cont, types::I64));
        self.b.set_cold_block(miss);
        self.b.ins().brif(hit, hit_block, &[], miss, &[]);

        self.enter(hit_block);
        let host = self.b.ins().iadd(first.delta, v);
        let r = self.emit_op(host, i32::from(off), op);
        self.jump_with(cont, r);

        self.enter(miss);
        let addr = self.b.ins().iadd_imm_s(v, i64::from(off));
        // A cold path keeps its read of the table's address where it is: merged with
        // other reads and moved, it would hold a register across the function.
        let regions = self.regions();
        let (row, lo) = self.row_of(regions, addr);
        let len_field = if op.writes() {
            RegionEntry::OFFSET_WRITE_LEN
        } else {
            RegionEntry::OFFSET_READ_LEN
        };
        let b = &mut self.b;
        let len = b.ins().load(types::I64, self.flags.table, row, len_field);
        let end = b.ins().iadd_imm_s(lo, size);
        let ok = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, len);
        let fill = self.b.create_block();
        let trap = self.b.create_block();
        self.b.set_cold_block(fill);
        self.b.set_cold_block(trap);
        self.b.ins().brif(ok, fill, &[], trap, &[]);

        self.enter(trap);
        let aux = size | if op.writes() { TRAP_AUX_WRITE } else { 0 };
        self.jump_to_trap(trap_code::MEMORY, pc, Some(addr), aux);

        self.enter(fill);
        let base = self
            .b
            .ins()
            .load(types::I64, self.flags.table, row, RegionEntry::OFFSET_BASE);
        let host = self.b.ins().iadd(base, lo);
        let r = self.emit_op(host, 0, op);
        if cached {
            self.refill(op.writes(), &first, addr, base, len);
        }
        self.jump_with(cont, r);

        self.enter(cont);
        Ok(result)
    }

    fn jump_with(&mut self, block: Block, v: Option<Value>) {
        match v {
            Some(v) => self.b.ins().jump(block, &[BlockArg::Value(v)]),
            None => self.b.ins().jump(block, &[]),
        };
    }

    /// The current values of the read (or write) region cache.
    fn cache(&mut self, write: bool) -> CacheValues {
        let vars = self.caches[usize::from(write)];
        CacheValues {
            neg_lo: self.b.use_var(vars.neg_lo),
            limit: self.b.use_var(vars.limit),
            delta: self.b.use_var(vars.delta),
        }
    }

    /// Whether an access of at most 8 bytes at `v + off` lies in the cached region:
    /// `(v - lo) + off <= len - 8`, unsigned. Safe for every size, because a cached
    /// `len` is at least [`CACHE_LEN_MIN`] (so `len - 8` does not wrap) and below 2^32
    /// (so an address in any other region gives a larger difference). The constant
    /// checks of the stack and of global sections pass `len - size` as the limit: exact.
    fn cache_hit(&mut self, cache: &CacheValues, v: Value, off: i16) -> Value {
        let b = &mut self.b;
        let rel = b.ins().iadd(v, cache.neg_lo);
        let rel = b.ins().iadd_imm_s(rel, i64::from(off));
        b.ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, rel, cache.limit)
    }

    /// After a miss at `addr` passed the exact check: caches its region (base `base`,
    /// length `len` for this kind of access) unless it is too short to cache.
    fn refill(&mut self, write: bool, old: &CacheValues, addr: Value, base: Value, len: Value) {
        let b = &mut self.b;
        let lo = b.ins().band_imm_s(addr, !0xffff_ffff);
        let region_delta = b.ins().isub(base, lo);
        self.cache_region(write, old, lo, region_delta, len);
    }

    /// Caches (for accesses that write when `write`) the region starting at virtual
    /// address `lo`, host minus virtual address `delta`, `len` bytes for this kind of
    /// access, unless it is shorter than [`CACHE_LEN_MIN`]: then `old` stays.
    fn cache_region(
        &mut self,
        write: bool,
        old: &CacheValues,
        lo: Value,
        delta: Value,
        len: Value,
    ) {
        let vars = self.caches[usize::from(write)];
        let b = &mut self.b;
        let keep = b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, len, CACHE_LEN_MIN);
        let neg_lo = b.ins().ineg(lo);
        let neg_lo = b.ins().select(keep, old.neg_lo, neg_lo);
        let limit = b.ins().iadd_imm_s(len, -8);
        let limit = b.ins().select(keep, old.limit, limit);
        let delta = b.ins().select(keep, old.delta, delta);
        b.def_var(vars.neg_lo, neg_lo);
        b.def_var(vars.limit, limit);
        b.def_var(vars.delta, delta);
    }

    /// Points both region caches at the stack, which is always mapped with
    /// `STACK_SIZE` bytes: at entry, and after a helper (which may remap regions).
    fn reset_caches(&mut self) {
        let lo = RegionIdx::STACK.vaddr(0) as i64;
        let neg_lo = self.b.ins().iconst(types::I64, lo.wrapping_neg());
        let limit = self.b.ins().iconst(types::I64, STACK_SIZE as i64 - 8);
        let stack_base = self.stack_base();
        let delta = self.b.ins().iadd(stack_base, neg_lo);
        for c in self.caches {
            self.b.def_var(c.neg_lo, neg_lo);
            self.b.def_var(c.limit, limit);
            self.b.def_var(c.delta, delta);
        }
    }

    /// The context pointer, read from the entry's slot where it is needed: the
    /// context is touched on cold paths (refills, traps, fuel, calls), and a value
    /// live across the function would hold a register through every loop.
    fn ctx(&mut self) -> Value {
        self.b
            .ins()
            .stack_load(types::I64, types::I64, self.ctx_slot, 0)
    }

    /// The region table, read from the context where it is needed (the cold paths)
    /// rather than kept live across the function.
    fn regions(&mut self) -> Value {
        let ctx = self.ctx();
        self.b
            .ins()
            .load(types::I64, self.flags.ctx, ctx, offsets::REGIONS)
    }

    /// The region table, read with flags that let the mid-end merge the read and move
    /// it out of loops: the field never changes during a run.
    fn fixed_regions(&mut self) -> Value {
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        self.b
            .ins()
            .load(types::I64, fixed, self.ctx, offsets::REGIONS)
    }

    /// Host address of the stack region (which never moves during a run).
    fn stack_base(&mut self) -> Value {
        let regions = self.regions();
        let row = RegionIdx::STACK.0 as i32 * RegionEntry::SIZE as i32;
        self.b.ins().load(
            types::I64,
            self.flags.table,
            regions,
            row + RegionEntry::OFFSET_BASE,
        )
    }

    /// The region-table row address for virtual address `v` (row 0, never mapped, when
    /// the index is past the table at `regions`) and the offset part of `v`.
    fn row_of(&mut self, regions: Value, v: Value) -> (Value, Value) {
        let b = &mut self.b;
        let idx = b.ins().ushr_imm_s(v, 32);
        let in_table = b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, idx, REGIONS_MAX as i64);
        let zero = b.ins().iconst(types::I64, 0);
        let idx = b.ins().select(in_table, idx, zero);
        let row_off = b.ins().ishl_imm_s(idx, i64::from(RegionEntry::SIZE_SHIFT));
        let row = b.ins().iadd(regions, row_off);
        let lo = b.ins().band_imm_s(v, 0xffff_ffff);
        (row, lo)
    }

    /// Performs `op` at the checked host address `host + disp`.
    fn emit_op(&mut self, host: Value, disp: i32, op: MemOp) -> Option<Value> {
        self.emit_op_with(host, disp, op, self.flags.heap)
    }

    /// [`Self::emit_op`] with the memory flags `fl` (a load with `readonly` and
    /// `can_move` is a pure value, see [`Self::pure_load`]).
    fn emit_op_with(
        &mut self,
        host: Value,
        disp: i32,
        op: MemOp,
        fl: MemFlagsData,
    ) -> Option<Value> {
        if let MemOp::Load { size, signed } = op {
            if fl.readonly() && fl.can_move() {
                return Some(self.pure_load(host, disp, size, signed, fl));
            }
        }
        let b = &mut self.b;
        match op {
            MemOp::Load { size, signed } => Some(match (size, signed) {
                (1, false) => b.ins().uload8(types::I64, fl, host, disp),
                (2, false) => b.ins().uload16(types::I64, fl, host, disp),
                (4, false) => b.ins().uload32(fl, host, disp),
                (1, true) => b.ins().sload8(types::I64, fl, host, disp),
                (2, true) => b.ins().sload16(types::I64, fl, host, disp),
                (4, true) => b.ins().sload32(fl, host, disp),
                _ => b.ins().load(types::I64, fl, host, disp),
            }),
            MemOp::Store { size, value } => {
                match size {
                    1 => b.ins().istore8(fl, value, host, disp),
                    2 => b.ins().istore16(fl, value, host, disp),
                    4 => b.ins().istore32(fl, value, host, disp),
                    _ => b.ins().store(fl, value, host, disp),
                };
                None
            }
            MemOp::Atomic { size, op, src, r0 } => {
                Some(self.emit_atomic(host, disp, size, op, src, r0))
            }
        }
    }

    /// A load Cranelift treats as a pure value (merged with equal loads, hoisted out of
    /// loops, computed beside its use): `fl` must say `readonly` and `can_move`, so the
    /// memory must not change during the run and `host + disp` must be valid wherever
    /// the value is computed. Only `load` (not `uload8` ...) can be pure: narrow loads
    /// are loaded at their width and extended (a sign extension then folds into the
    /// load).
    fn pure_load(
        &mut self,
        host: Value,
        disp: i32,
        size: u8,
        signed: bool,
        fl: MemFlagsData,
    ) -> Value {
        let ty = match size {
            1 => types::I8,
            2 => types::I16,
            4 => types::I32,
            _ => return self.b.ins().load(types::I64, fl, host, disp),
        };
        let v = self.b.ins().load(ty, fl, host, disp);
        if signed {
            self.b.ins().sextend(types::I64, v)
        } else {
            self.b.ins().uextend(types::I64, v)
        }
    }

    /// An atomic read-modify-write; returns the old value zero-extended. Aligned
    /// addresses use the host's atomic instructions; unaligned ones (allowed by eBPF) a
    /// plain load and store, as the interpreter does, because a locked access that
    /// straddles cache lines is a split lock, which the kernel may punish or kill.
    fn emit_atomic(
        &mut self,
        host: Value,
        disp: i32,
        size: u8,
        op: i32,
        src: Value,
        r0: Value,
    ) -> Value {
        let ty = if size == 4 { types::I32 } else { types::I64 };
        let b = &mut self.b;
        let p = b.ins().iadd_imm_s(host, i64::from(disp));
        let misalign = b.ins().band_imm_s(p, i64::from(size) - 1);
        let (x, expected) = if ty == types::I32 {
            (
                b.ins().ireduce(types::I32, src),
                b.ins().ireduce(types::I32, r0),
            )
        } else {
            (src, r0)
        };
        let atomic = self.b.create_block();
        let plain = self.b.create_block();
        let done = self.b.create_block();
        let old = self.b.append_block_param(done, ty);
        self.b.ins().brif(misalign, plain, &[], atomic, &[]);

        self.enter(atomic);
        let fl = self.flags.heap_aligned;
        let rmw = |o| Some(o);
        let rmw_op = match op & !ATOMIC_FETCH {
            ATOMIC_ADD => rmw(AtomicRmwOp::Add),
            ATOMIC_OR => rmw(AtomicRmwOp::Or),
            ATOMIC_AND => rmw(AtomicRmwOp::And),
            ATOMIC_XOR => rmw(AtomicRmwOp::Xor),
            _ if op == ATOMIC_XCHG => rmw(AtomicRmwOp::Xchg),
            _ => None,
        };
        let v = match rmw_op {
            Some(o) => self.b.ins().atomic_rmw(ty, fl, o, p, x),
            None => self.b.ins().atomic_cas(fl, p, expected, x),
        };
        self.b.ins().jump(done, &[BlockArg::Value(v)]);

        self.enter(plain);
        let fl = self.flags.heap;
        let b = &mut self.b;
        let v = b.ins().load(ty, fl, p, 0);
        let new = match rmw_op {
            Some(AtomicRmwOp::Add) => b.ins().iadd(v, x),
            Some(AtomicRmwOp::Or) => b.ins().bor(v, x),
            Some(AtomicRmwOp::And) => b.ins().band(v, x),
            Some(AtomicRmwOp::Xor) => b.ins().bxor(v, x),
            Some(_) => x,
            None => {
                let eq = b.ins().icmp(IntCC::Equal, v, expected);
                b.ins().select(eq, x, v)
            }
        };
        b.ins().store(fl, new, p, 0);
        self.b.ins().jump(done, &[BlockArg::Value(v)]);

        self.enter(done);
        if ty == types::I32 {
            self.b.ins().uextend(types::I64, old)
        } else {
            old
        }
    }

    // ---- control flow ----------------------------------------------------------------

    /// Ends the current block with a jump to the trap exit recording `code` at `pc`.
    fn jump_to_trap(&mut self, code: i64, pc: u32, addr: Option<Value>, aux: i64) {
        let pc = self.b.ins().iconst(types::I64, i64::from(pc));
        self.jump_to_trap_at(code, pc, addr, aux);
    }

    /// As [`Self::jump_to_trap`], with the pc as a value.
    fn jump_to_trap_at(&mut self, code: i64, pc: Value, addr: Option<Value>, aux: i64) {
        let code = self.b.ins().iconst(types::I64, code);
        self.jump_to_trap_with(code, pc, addr, aux);
    }

    /// As [`Self::jump_to_trap`], with the code and the pc as values. The trap record
    /// is stored here, in the cold block, and the shared exit takes no parameters:
    /// constants passed to it would be hoisted out of loops by Cranelift and held in
    /// registers (or spilled) on the hot path.
    fn jump_to_trap_with(&mut self, code: Value, pc: Value, addr: Option<Value>, aux: i64) {
        let fl = self.flags.ctx;
        let ctx = self.ctx();
        let b = &mut self.b;
        b.ins().store(fl, code, ctx, offsets::TRAP_CODE);
        b.ins().store(fl, pc, ctx, offsets::TRAP_PC);
        let addr = addr.unwrap_or_else(|| b.ins().iconst(types::I64, 0));
        b.ins().store(fl, addr, ctx, offsets::TRAP_ADDR);
        let aux = b.ins().iconst(types::I64, aux);
        b.ins().store(fl, aux, ctx, offsets::TRAP_AUX);
        b.ins().jump(self.trap_exit, &[]);
    }

    /// Branches to a cold trap block recording `code` at `pc` when `cond` holds, and
    /// continues in a fresh block otherwise.
    fn trap_if(&mut self, cond: Value, code: i64, pc: u32) {
        let trap = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(trap);
        self.b.ins().brif(cond, trap, &[], cont, &[]);
        self.enter(trap);
        self.jump_to_trap(code, pc, None, 0);
        self.enter(cont);
    }

    /// Charges `cost` fuel at `pc` (see [`Self::charge_value`]).
    fn charge(&mut self, pc: u32, cost: u64) {
        let cost = self.b.ins().iconst(types::I64, cost as i64);
        self.charge_value(cost, |b| b.ins().iconst(types::I64, i64::from(pc)), None);
    }

    /// Charges `cost` fuel (a constant, or picked by a condition) at the pc `trap_pc`
    /// makes. The hot path is a compare, a subtract and a branch on the slice. When the
    /// slice is short, a cold path takes the charge from all the fuel left (slice plus
    /// reserve): it traps when that is exceeded, else looks at the stop flag (and stops
    /// there when it is set), else refills the slice with up to `STOP_SLICE` of the
    /// rest and goes on, at `resume` when given (a versioned loop's guard), else right
    /// after the charge.
    fn charge_value(
        &mut self,
        cost: Value,
        trap_pc: impl Fn(&mut FunctionBuilder<'f>) -> Value,
        resume: Option<Block>,
    ) {
        // The slice is short exactly when it is below the cost. Comparing before the
        // subtraction, and subtracting on each path on its own, lets the hot path be a
        // compare, a branch and a subtraction in place (the slice is dead after it),
        // with no copy of the slice kept for the cold path. On the cold path what is
        // left of the slice goes negative: the fuel used, budget minus slice minus
        // reserve, includes the charge whether the run goes on or traps (`store_fuel`).
        let left = self.b.use_var(self.fuel_left);
        let short = self.b.ins().icmp(IntCC::UnsignedLessThan, left, cost);
        let refill = self.b.create_block();
        let hot = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(refill);
        self.b.ins().brif(short, refill, &[], hot, &[]);

        self.enter(hot);
        let paid = self.b.ins().isub(left, cost);
        self.b.def_var(self.fuel_left, paid);
        self.b.ins().jump(cont, &[]);

        self.enter(refill);
        let after = self.b.ins().isub(left, cost);
        self.b.def_var(self.fuel_left, after);
        let fl = self.flags.ctx;
        let ctx = self.ctx();
        let reserve = self
            .b
            .ins()
            .load(types::I64, fl, ctx, offsets::FUEL_RESERVE);
        // The charge exceeds the budget when the reserve cannot cover what the slice
        // lacks; else what is left after it is slice plus reserve minus cost.
        let lack = self.b.ins().ineg(after);
        let out = self.b.ins().icmp(IntCC::UnsignedLessThan, reserve, lack);
        let fuel_trap = self.b.create_block();
        let look = self.b.create_block();
        self.b.set_cold_block(fuel_trap);
        self.b.set_cold_block(look);
        self.b.ins().brif(out, fuel_trap, &[], look, &[]);
        self.enter(fuel_trap);
        let pc = trap_pc(&mut self.b);
        self.jump_to_trap_at(trap_code::FUEL, pc, None, 0);

        self.enter(look);
        let flag = self.stop_flag();
        let stop_trap = self.b.create_block();
        let refilled = self.b.create_block();
        self.b.set_cold_block(stop_trap);
        self.b.set_cold_block(refilled);
        self.b.ins().brif(flag, stop_trap, &[], refilled, &[]);
        self.enter(stop_trap);
        let pc = trap_pc(&mut self.b);
        self.jump_to_trap_at(trap_code::STOP, pc, None, 0);

        self.enter(refilled);
        let rest = self.b.ins().iadd(after, reserve);
        let slice = self.fill_slice(rest);
        self.b.def_var(self.fuel_left, slice);
        self.b.ins().jump(resume.unwrap_or(cont), &[]);
        self.enter(cont);
    }

    /// Splits `total`, the fuel left, into a slice of at most `rules::STOP_SLICE`, which
    /// it returns, and the reserve, which it stores in the context.
    fn fill_slice(&mut self, total: Value) -> Value {
        let most = self.b.ins().iconst(types::I64, rules::STOP_SLICE as i64);
        let slice = self.b.ins().umin(total, most);
        let reserve = self.b.ins().isub(total, slice);
        let ctx = self.ctx();
        self.b
            .ins()
            .store(self.flags.ctx, reserve, ctx, offsets::FUEL_RESERVE);
        slice
    }

    /// The run's stop flag, read atomically, so Cranelift neither hoists the read nor
    /// merges it with another.
    fn stop_flag(&mut self) -> Value {
        let ctx = self.ctx();
        let stop = self
            .b
            .ins()
            .load(types::I64, self.flags.ctx, ctx, offsets::STOP);
        self.b
            .ins()
            .atomic_load(types::I32, MemFlagsData::trusted(), stop)
    }

    /// Stores the fuel used so far (budget minus slice minus reserve) into the context.
    fn store_fuel(&mut self) {
        let fl = self.flags.ctx;
        let ctx = self.ctx();
        let budget = self.b.ins().load(types::I64, fl, ctx, offsets::FUEL_BUDGET);
        let reserve = self
            .b
            .ins()
            .load(types::I64, fl, ctx, offsets::FUEL_RESERVE);
        let left = self.b.use_var(self.fuel_left);
        let left = self.b.ins().iadd(left, reserve);
        let used = self.b.ins().isub(budget, left);
        self.b.ins().store(fl, used, ctx, offsets::FUEL_USED);
    }

    /// JMP and JMP32 instructions (RFC 9669 §4.3); returns the slot to go on at.
    fn jump_class(&mut self, pc: u32, insn: &Insn) -> TResult<u32> {
        let is32 = insn.class() == CLASS_JMP32;
        let op = insn.opc & 0xf0;
        let next = pc + 1;
        match op {
            JMP_JA => {
                let rel = if is32 { insn.imm } else { i32::from(insn.off) };
                let target = (i64::from(pc) + i64::from(rel) + 1) as u32;
                self.jump_to(pc, target);
                Ok(next)
            }
            JMP_EXIT if !is32 => {
                self.exit();
                Ok(next)
            }
            JMP_CALL if !is32 => {
                if is_helper_call(insn) {
                    self.helper_call(pc, insn)?;
                } else {
                    let target = (i64::from(pc) + i64::from(insn.imm) + 1) as u32;
                    match self.inlinable(target) {
                        Some(callee) => self.inline_call(pc, callee)?,
                        None => self.local_call(pc, target),
                    }
                }
                Ok(next)
            }
            _ if self.elided_exit(pc).is_some() => {
                let stays = self.elided_exit(pc).expect("just checked");
                self.jump_to(pc, stays);
                Ok(next)
            }
            _ => {
                let cond = self.condition(pc, insn, is32)?;
                let target = (i64::from(pc) + i64::from(insn.off) + 1) as u32;
                if let Some(&shape) = self.plan.ifconv.get(&pc) {
                    self.speculating(|t| t.if_convert(cond, pc, shape))?;
                    return Ok(shape.resume(pc));
                }
                if let Some(&join) = self.plan.regions.get(&pc) {
                    self.speculating(|t| t.speculate(pc, cond, target, join))?;
                    return Ok(next);
                }
                self.branch(pc, cond, target, next);
                Ok(next)
            }
        }
    }

    /// The loop being translated, when fuel bounds its iterations and `target` is one of
    /// its slots.
    fn fuel_bounded(&self, target: u32) -> Option<usize> {
        self.in_loop
            .filter(|&i| self.loops[i].cost.is_some() && self.loops[i].body.contains(&target))
    }

    /// Charges `cost` for a backward jump to `target` at the pc `trap_pc` makes. In an
    /// unrolled group, a subtraction (the group's start saw the slice pay for it). In a
    /// loop fuel bounds, to one of its slots (see [`LoopCopy`]): the unchecked copy
    /// subtracts alone (the latch or guard saw the slice pay for the iteration) unless
    /// `slot` is one of the loop's checked charges; the checked loop (and such a
    /// charge), after a refill, resumes at `reguard` for the header, else at a block
    /// that sets `pending` and goes on to `target`. Elsewhere, an ordinary charge.
    fn back_charge(
        &mut self,
        cost: Cost,
        trap_pc: impl Fn(&mut FunctionBuilder<'f>) -> Value,
        target: u32,
        slot: u32,
    ) {
        let bounded = self.fuel_bounded(target);
        // A fast copy's guard saw the slice pay for it; or a group's start, or the
        // unchecked copy's latch or guard, saw the slice pay for the iteration.
        let proven = self.fast_charge(target)
            || self.group.is_some()
            || bounded.is_some_and(|i| self.unchecked && !self.charge_checked_in_copy(i, slot));
        if proven {
            let left = self.b.use_var(self.fuel_left);
            let left = pay(&mut self.b, left, cost);
            self.b.def_var(self.fuel_left, left);
            return;
        }
        let cost = cost_value(&mut self.b, cost);
        let Some(i) = bounded else {
            self.charge_value(cost, trap_pc, None);
            return;
        };
        let resume = if target == self.loops[i].header {
            self.loops[i].reguard
        } else {
            let b = &mut self.b;
            let block = *self.loops[i].refilled.entry(target).or_insert_with(|| {
                let block = b.create_block();
                b.set_cold_block(block);
                block
            });
            Some(block)
        };
        self.charge_value(cost, trap_pc, resume);
    }

    /// A back-edge charge the slice is already known to cover (a versioned loop's guard,
    /// or an unrolled group's start, checked it): a subtract, no test.
    fn charge_proven(&mut self, cost: u64) {
        let left = self.b.use_var(self.fuel_left);
        let left = self.b.ins().iadd_imm_s(left, (cost as i64).wrapping_neg());
        self.b.def_var(self.fuel_left, left);
    }

    /// An unconditional transfer to `target`, charging fuel if it goes backwards.
    ///
    /// A backward jump inside a loop whose iterations fuel bounds (`LoopCopy::cost`): in
    /// the unchecked copy the latch or guard saw the slice pay for it, so it only
    /// subtracts; in the checked loop, a refill of the slice leads back to the guard,
    /// which can go back to the unchecked copy ([`Self::back_charge`]).
    fn jump_to(&mut self, pc: u32, target: u32) {
        let cost = rules::jump_cost(pc, target);
        if cost > 0 && self.fast_charge(target) {
            // A fast copy's guard saw the slice pay for it (see `bounded`).
            self.charge_proven(cost);
        } else if cost > 0 && self.group.is_some() {
            // The group's start made sure the slice covers it.
            self.charge_proven(cost);
        } else if cost > 0
            && self.unchecked
            && self
                .fuel_bounded(target)
                .is_some_and(|i| !self.charge_checked_in_copy(i, pc))
        {
            self.charge_proven(cost);
        } else if cost > 0 && self.fuel_bounded(target).is_some() {
            let at = |b: &mut FunctionBuilder<'f>| b.ins().iconst(types::I64, i64::from(pc));
            self.back_charge(Cost::Fixed(cost), at, target, pc);
        } else if cost > 0 {
            // A one-by-one back-edge of a loop with groups tries a group again after a
            // refill (see `unroll`).
            let regroup = self
                .in_loop
                .filter(|&i| self.unchecked && self.loops[i].header == target)
                .and_then(|i| self.loops[i].group.as_ref())
                .map(|g| g.regroup);
            match regroup {
                Some(regroup) => {
                    let cost = self.b.ins().iconst(types::I64, cost as i64);
                    let at =
                        |b: &mut FunctionBuilder<'f>| b.ins().iconst(types::I64, i64::from(pc));
                    self.charge_value(cost, at, Some(regroup));
                }
                None => self.charge(pc, cost),
            }
        }
        let block = self.target(target);
        self.b.ins().jump(block, &[]);
        self.open = false;
    }

    fn branch(&mut self, pc: u32, cond: Value, target: u32, next: u32) {
        if rules::jump_cost(pc, target) > 0 && self.fast_charge(target) {
            self.fast_back_branch(pc, cond, target, next);
            return;
        }
        let taken = self.target(target);
        let fall = self.target(next);
        if rules::jump_cost(pc, target) > 0 {
            // Cranelift lays a branch's second successor out first after it (its block
            // order is a reverse postorder that visits successors first to last). In
            // a versioned loop's unchecked copy the charge on the way back (a subtract
            // on to the latch) is named second, so iterations fall through into it
            // where naming it first put the way out of the loop in between: a taken
            // branch there and another back (held-out partition 13% fewer
            // instructions, revhash 12%). The checked loops keep their order (turned
            // too: horspool 13% more instructions, primes and transpose 5% fewer).
            let charge = self.b.create_block();
            if self.unchecked {
                let leave = negate(&mut self.b, cond);
                self.b.ins().brif(leave, fall, &[], charge, &[]);
            } else {
                self.b.ins().brif(cond, charge, &[], fall, &[]);
            }
            self.enter(charge);
            self.jump_to(pc, target);
        } else if taken == fall {
            self.b.ins().jump(fall, &[]);
        } else {
            self.b.ins().brif(cond, taken, &[], fall, &[]);
        }
        self.open = false;
    }

    /// The condition of a conditional jump, as a Cranelift boolean.
    fn condition(&mut self, pc: u32, insn: &Insn, is32: bool) -> TResult<Value> {
        let ty = if is32 { types::I32 } else { types::I64 };
        let a = self.reg_as(pc, insn.dst, ty)?;
        let b = if insn.opc & SRC_X != 0 {
            self.reg_as(pc, insn.src, ty)?
        } else {
            self.imm(insn.imm, ty)
        };
        let cc = match insn.opc & 0xf0 {
            JMP_JEQ => IntCC::Equal,
            JMP_JNE => IntCC::NotEqual,
            JMP_JGT => IntCC::UnsignedGreaterThan,
            JMP_JGE => IntCC::UnsignedGreaterThanOrEqual,
            JMP_JLT => IntCC::UnsignedLessThan,
            JMP_JLE => IntCC::UnsignedLessThanOrEqual,
            JMP_JSGT => IntCC::SignedGreaterThan,
            JMP_JSGE => IntCC::SignedGreaterThanOrEqual,
            JMP_JSLT => IntCC::SignedLessThan,
            JMP_JSLE => IntCC::SignedLessThanOrEqual,
            JMP_JSET => {
                let both = self.b.ins().band(a, b);
                return Ok(self.b.ins().icmp_imm_s(IntCC::NotEqual, both, 0));
            }
            _ => return Err(self.unsupported(pc)),
        };
        Ok(self.b.ins().icmp(cc, a, b))
    }

    /// In the counting variant, counts each arm of the converted branch at `pc` under
    /// its predicate.
    fn count_arms(&mut self, cond: Value, pc: u32, shape: IfConv) {
        if let Some(c) = &self.counters {
            // Both arms run, so each arm's blocks count under its predicate, before the
            // back-edge charge of `if_convert` can trap (the counting rule in
            // `csx_ebpf::count`).
            let not = self.b.ins().bxor_imm_s(cond, 1);
            match shape {
                IfConv::Triangle { end: arm_end } | IfConv::BackTriangle { ja: arm_end, .. } => {
                    // A back triangle's `ja` belongs to its arm's block.
                    let to = if matches!(shape, IfConv::BackTriangle { .. }) {
                        arm_end + 1
                    } else {
                        arm_end
                    };
                    c.enter_if(&mut self.b, (self.ctx, self.flags.ctx), (pc + 1, to), not);
                }
                IfConv::Diamond { else_start, join } => {
                    c.enter_if(
                        &mut self.b,
                        (self.ctx, self.flags.ctx),
                        (pc + 1, else_start),
                        not,
                    );
                    c.enter_if(
                        &mut self.b,
                        (self.ctx, self.flags.ctx),
                        (else_start, join),
                        cond,
                    );
                }
                IfConv::Paths { .. } => {
                    unreachable!("the counting variant plans no path conversions")
                }
            }
        }
    }

    /// Translates both arms of the converted branch at `pc` one after the other: the
    /// registers as the taken path leaves them, and as the fall-through leaves them.
    fn arm_values(&mut self, pc: u32, shape: IfConv) -> TResult<([Value; 10], [Value; 10])> {
        let before = self.snapshot();
        let values = match shape {
            IfConv::Triangle { end: arm_end } | IfConv::BackTriangle { ja: arm_end, .. } => {
                for q in pc + 1..arm_end {
                    let insn = self.insns[q as usize];
                    self.alu(q, &insn)?;
                }
                (before, self.snapshot())
            }
            IfConv::Diamond { else_start, join } => {
                for q in pc + 1..else_start - 1 {
                    let insn = self.insns[q as usize];
                    self.alu(q, &insn)?;
                }
                let then_values = self.snapshot();
                for (r, v) in before.iter().enumerate() {
                    self.b.def_var(self.regs[r], *v);
                }
                for q in else_start..join {
                    let insn = self.insns[q as usize];
                    self.alu(q, &insn)?;
                }
                (self.snapshot(), then_values)
            }
            IfConv::Paths { .. } => {
                let [taken_arm, fall_arm] = &self.plan.arms[&pc];
                for &q in &taken_arm.alu {
                    let insn = self.insns[q as usize];
                    self.alu(q, &insn)?;
                }
                let taken_values = self.snapshot();
                for (r, v) in before.iter().enumerate() {
                    self.b.def_var(self.regs[r], *v);
                }
                for &q in &fall_arm.alu {
                    let insn = self.insns[q as usize];
                    self.alu(q, &insn)?;
                }
                (taken_values, self.snapshot())
            }
        };
        Ok(values)
    }

    /// Translates a converted branch (see `analysis`) as straight-line code: every arm
    /// runs, and each register an arm changed takes its value through a `select`.
    fn if_convert(&mut self, cond: Value, pc: u32, shape: IfConv) -> TResult<()> {
        self.count_arms(cond, pc, shape);
        let (taken, fallthrough) = self.arm_values(pc, shape)?;
        let mut selects = false;
        for r in 0..10 {
            let v = if taken[r] == fallthrough[r] {
                taken[r]
            } else {
                let dfg = &self.b.func.dfg;
                selects |= !(is_const(dfg, taken[r]) && is_const(dfg, fallthrough[r]));
                self.b.ins().select(cond, taken[r], fallthrough[r])
            };
            self.b.def_var(self.regs[r], v);
        }
        if let IfConv::BackTriangle { head, ja } = shape {
            // One back-edge for both paths: charge the taken path's cost, and report
            // its instruction, whichever it was.
            // A compare whose flags the arm's selects of values (not of two constants,
            // which become the bit) use already: the charge's select shares them
            // (stats64's running minimum: an `lea` on the bit made the slice's chain
            // two cycles an iteration, 6% slower). A test of a bit against zero is no
            // such compare: the bit itself is paid with.
            let flags = selects
                && is_compare(&self.b.func.dfg, cond)
                && !is_bit_test(&self.b.func.dfg, cond);
            let cost = Cost::Picked {
                cond,
                taken: rules::jump_cost(pc, head),
                fall: rules::jump_cost(ja, head),
                bit: !flags,
            };
            self.back_charge(
                cost,
                |b| {
                    let pc_taken = b.ins().iconst(types::I64, i64::from(pc));
                    let pc_fall = b.ins().iconst(types::I64, i64::from(ja));
                    b.ins().select(cond, pc_taken, pc_fall)
                },
                head,
                pc,
            );
            let block = self.target(head);
            self.b.ins().jump(block, &[]);
            self.open = false;
        }
        if let IfConv::Paths { join } = shape {
            let plan = self.plan;
            let [taken, fall] = &plan.arms[&pc];
            self.charge_either(cond, taken.back_jump, fall.back_jump);
            let block = self.target(join);
            self.b.ins().jump(block, &[]);
            self.open = false;
        }
        Ok(())
    }

    /// The fuel charge of a converted branch whose two paths may each hold a backward
    /// `ja` (slot, target): charges the one on the path `cond` picks (true: `taken`),
    /// traps at its slot when the budget is exceeded (and looks at the stop flag there),
    /// exactly as if that `ja` had run; a path without one charges nothing.
    fn charge_either(&mut self, cond: Value, taken: Option<(u32, u32)>, fall: Option<(u32, u32)>) {
        let cost_of = |j: Option<(u32, u32)>| j.map_or(0, |(q, t)| rules::jump_cost(q, t));
        let pc_of = |j: Option<(u32, u32)>| j.map_or(0, |(q, _)| q);
        let (cost_taken, cost_fall) = (cost_of(taken), cost_of(fall));
        let (pc_taken, pc_fall) = (pc_of(taken), pc_of(fall));
        if cost_taken == 0 && cost_fall == 0 {
            return;
        }
        let pick = |b: &mut FunctionBuilder<'f>, x: u64, y: u64| {
            if x == y {
                b.ins().iconst(types::I64, x as i64)
            } else {
                let x = b.ins().iconst(types::I64, x as i64);
                let y = b.ins().iconst(types::I64, y as i64);
                b.ins().select(cond, x, y)
            }
        };
        let cost = pick(&mut self.b, cost_taken, cost_fall);
        // A path without a backward `ja` charges 0, which never takes the cold path: so
        // the stop flag is looked at only after a charge.
        self.charge_value(
            cost,
            |b| pick(b, u64::from(pc_taken), u64::from(pc_fall)),
            None,
        );
    }

    /// Translates the speculative region `head .. join` (see `analysis`) as
    /// straight-line code: each block runs under a predicate, registers merge through
    /// `select`s where blocks join, and loads that fail their bounds check read a stack
    /// slot instead and raise the fault flag if their block really runs. When the flag is
    /// set, control restores the registers and takes the ordinary translation of the
    /// region (cold blocks), which redoes the work exactly and traps where it should.
    fn speculate(&mut self, head: u32, cond: Value, target: u32, join: u32) -> TResult<()> {
        let plan = self.plan;
        let entry = self.snapshot();
        let next = head + 1;
        let not_cond = self.b.ins().bxor_imm_s(cond, 1);
        // Edges into each block of the region (and the join): (predicate, registers).
        let mut incoming: BTreeMap<u32, Vec<(Value, [Value; 10])>> = BTreeMap::new();
        incoming.entry(target).or_default().push((cond, entry));
        incoming.entry(next).or_default().push((not_cond, entry));
        // How each block translated so far ends (the head's branch too), by its first slot.
        let mut exits: BTreeMap<u32, (Exit, [Value; 10])> = BTreeMap::new();
        exits.insert(head, (Exit::Branch(cond, target, next), entry));
        // The selects merging registers where blocks join (see `speculative_load`).
        let mut merged: BTreeSet<Value> = BTreeSet::new();
        let mut fault: Option<Value> = None;
        // The running block's predicate and first slot, or `None` between blocks.
        let mut pred: Option<Value> = None;
        let mut block = head;
        let first = plan.pcs.partition_point(|&p| p <= head);
        let last = plan.pcs.partition_point(|&p| p < join);
        for &q in &plan.pcs[first..last] {
            if let Some(mut edges) = incoming.remove(&q) {
                if let Some(p) = pred {
                    let regs = self.snapshot();
                    edges.push((p, regs));
                    exits.insert(block, (Exit::To(q), regs));
                }
                pred = Some(self.merge_edges(q, &edges, &exits, &mut merged));
                block = q;
            }
            let Some(p) = pred else { continue };
            let insn = self.insns[q as usize];
            match insn.class() {
                CLASS_ALU | CLASS_ALU64 => self.alu(q, &insn)?,
                CLASS_LD => self.lddw(q, &insn)?,
                CLASS_LDX => {
                    let bad = self.speculative_load(q, &insn, &merged)?;
                    if let Some(bad) = bad {
                        let bad = self.b.ins().band(bad, p);
                        fault = Some(match fault {
                            Some(f) => self.b.ins().bor(f, bad),
                            None => bad,
                        });
                    }
                }
                _ => {
                    let is32 = insn.class() == CLASS_JMP32;
                    let regs = self.snapshot();
                    if insn.opc & 0xf0 == JMP_JA {
                        let rel = if is32 { insn.imm } else { i32::from(insn.off) };
                        let t = (i64::from(q) + i64::from(rel) + 1) as u32;
                        incoming.entry(t).or_default().push((p, regs));
                        exits.insert(block, (Exit::To(t), regs));
                    } else {
                        let c = self.condition(q, &insn, is32)?;
                        let t = (i64::from(q) + i64::from(insn.off) + 1) as u32;
                        let taken = self.b.ins().band(p, c);
                        let not_c = self.b.ins().bxor_imm_s(c, 1);
                        let fall = self.b.ins().band(p, not_c);
                        incoming.entry(t).or_default().push((taken, regs));
                        incoming.entry(q + 1).or_default().push((fall, regs));
                        exits.insert(block, (Exit::Branch(c, t, q + 1), regs));
                    }
                    pred = None;
                }
            }
        }
        let mut edges = incoming.remove(&join).unwrap_or_default();
        if let Some(p) = pred {
            let regs = self.snapshot();
            edges.push((p, regs));
            exits.insert(block, (Exit::To(join), regs));
        }
        debug_assert!(
            incoming.is_empty(),
            "every edge in a region goes forward to a block"
        );
        self.merge_edges(join, &edges, &exits, &mut merged);

        let join_block = self.target(join);
        match fault {
            None => {
                self.b.ins().jump(join_block, &[]);
                self.open = false;
            }
            Some(fault) => {
                let restore = self.b.create_block();
                self.b.set_cold_block(restore);
                self.b.ins().brif(fault, restore, &[], join_block, &[]);
                self.enter(restore);
                for (r, v) in entry.iter().enumerate() {
                    self.b.def_var(self.regs[r], *v);
                }
                self.branch(head, cond, target, next);
            }
        }
        Ok(())
    }

    /// Enters block `k` of a speculative region from `edges` (exactly one of whose
    /// predicates holds when `k` really runs): sets the registers to those control
    /// arrives with and returns the block's predicate (the `or` of the edges').
    ///
    /// The registers are selects on the region's own branch conditions, not on the
    /// edges' predicates (gated SSA's gamma): walking back from `k` over the blocks
    /// before it (`exits`, each block's end), a block's way out that reaches `k` brings
    /// its registers there, one that jumps past `k` never reaches it (the region only
    /// goes forward) and does not count, and a branch both of whose ways reach `k`
    /// selects between them on its condition. So a nested `c1 ? x : c2 ? y : z` costs a
    /// compare and a conditional move per branch, where the predicates (a chain of
    /// `and`s per path, materialized as bytes) cost several instructions more per edge.
    /// When `k` does not run, its registers are some path's values, which only other
    /// speculated work reads (loads are checked and their faults gated by predicates).
    fn merge_edges(
        &mut self,
        k: u32,
        edges: &[(Value, [Value; 10])],
        exits: &BTreeMap<u32, (Exit, [Value; 10])>,
        merged: &mut BTreeSet<Value>,
    ) -> Value {
        let mut pred = edges.last().expect("a reached block has an edge").0;
        for (p, _) in edges[..edges.len() - 1].iter().rev() {
            pred = self.b.ins().bor(pred, *p);
        }
        let regs = if let [(_, regs)] = edges {
            *regs
        } else {
            self.arrivals(k, exits, merged)
        };
        for (r, v) in regs.iter().enumerate() {
            self.b.def_var(self.regs[r], *v);
        }
        pred
    }

    /// The registers control arrives at slot `k` with from the region's head (see
    /// [`Self::merge_edges`]): every block in `exits` begins before `k`. The selects
    /// made go into `merged`.
    fn arrivals(
        &mut self,
        k: u32,
        exits: &BTreeMap<u32, (Exit, [Value; 10])>,
        merged: &mut BTreeSet<Value>,
    ) -> [Value; 10] {
        // What arrives at `k` from the end of each block, latest block first (a block
        // only goes forward, so the blocks it reaches are done by then).
        let mut reaches: BTreeMap<u32, Option<[Value; 10]>> = BTreeMap::new();
        let arrive = |reaches: &BTreeMap<u32, Option<[Value; 10]>>, to: u32, regs| {
            if to == k {
                Some(regs)
            } else if to > k {
                None
            } else {
                debug_assert!(reaches.contains_key(&to), "slot {to} starts a block");
                reaches.get(&to).copied().flatten()
            }
        };
        for (&start, &(exit, regs)) in exits.iter().rev() {
            debug_assert!(start < k);
            let out = match exit {
                Exit::To(to) => arrive(&reaches, to, regs),
                Exit::Branch(c, taken, fall) => {
                    match (arrive(&reaches, taken, regs), arrive(&reaches, fall, regs)) {
                        (Some(t), Some(f)) => Some(std::array::from_fn(|r| {
                            if t[r] == f[r] {
                                t[r]
                            } else {
                                let v = self.b.ins().select(c, t[r], f[r]);
                                merged.insert(v);
                                v
                            }
                        })),
                        (t, f) => t.or(f),
                    }
                }
            };
            reaches.insert(start, out);
        }
        let (&head, _) = exits.first_key_value().expect("the head's exit");
        reaches[&head].expect("a block with edges is reached from the head")
    }

    /// A load that may run although its block does not: on a failed bounds check it
    /// reads the current frame instead. Returns the failed-check flag (`None` when the
    /// load needs no check).
    ///
    /// In a loop's unchecked copy, a load whose slot the guard proved (`deltas`) needs
    /// no check either when its address is not computed from `merged`, the selects of
    /// registers where the region's blocks join: then it is the same function of the
    /// region's entry registers on every path, the affine form of the iteration that
    /// `loops` evaluated symbolically (branch conditions play no part in a form), and
    /// so in bounds whether or not its block really runs. (Checked against the region
    /// cache instead, it missed on every pass: nothing in the unchecked copy fills the
    /// cache, so the fault flag sent every iteration to the cold translation.) An
    /// address that a join selects may be another path's garbage, and stays checked.
    fn speculative_load(
        &mut self,
        pc: u32,
        insn: &Insn,
        merged: &BTreeSet<Value>,
    ) -> TResult<Option<Value>> {
        let op = self.load_op(pc, insn)?;
        let size = i64::from(op.size());
        let off = insn.off;
        let v = self.reg(pc, insn.src)?;
        let unchecked = if let Some((host, disp)) = self.frame_access((pc, insn.src), v, off, size)
        {
            self.emit_op(host, disp, op)
        } else if let Some((host, disp, fl)) = self.global_access(v, off, size, false) {
            self.emit_op_with(host, disp, op, fl)
        } else if self.unchecked && !self.computed_from(v, merged) {
            self.proven_by_guard(pc, v)
                .and_then(|host| self.emit_unchecked(pc, host, i32::from(off), op))
        } else {
            None
        };
        if let Some(value) = unchecked {
            self.note_load_bound(op, value);
            self.set_reg(pc, insn.dst, value)?;
            return Ok(None);
        }
        let (cache, _) = self.first_check(pc, v, size, false);
        let ok = self.cache_hit(&cache, v, off);
        let b = &mut self.b;
        let host = b.ins().iadd(cache.delta, v);
        let host = b.ins().iadd_imm_s(host, i64::from(off));
        let safe = b.ins().iadd_imm_s(self.fp_host, -8);
        let addr = b.ins().select(ok, host, safe);
        let value = self.emit_op(addr, 0, op).expect("loads produce a value");
        self.note_load_bound(op, value);
        self.set_reg(pc, insn.dst, value)?;
        Ok(Some(self.b.ins().bxor_imm_s(ok, 1)))
    }

    /// In a loop's unchecked copy, the host address of an access at `pc` through `v`
    /// that the loop's guard proved in bounds (`LoopCopy::deltas`).
    fn proven_by_guard(&mut self, pc: u32, v: Value) -> Option<Value> {
        let i = self.in_loop.filter(|_| self.unchecked)?;
        let delta = self.b.use_var(*self.loops[i].deltas.get(&pc)?);
        Some(self.b.ins().iadd(delta, v))
    }

    /// Whether `v` is computed from any of `values`, looking through the instructions
    /// of the current block (where a speculative region is translated, and so every
    /// select it makes).
    fn computed_from(&self, v: Value, values: &BTreeSet<Value>) -> bool {
        if values.is_empty() {
            return false;
        }
        let func = &self.b.func;
        let here = self.b.current_block();
        let mut todo = vec![v];
        let mut seen = BTreeSet::new();
        while let Some(v) = todo.pop() {
            let v = func.dfg.resolve_aliases(v);
            if values.contains(&v) {
                return true;
            }
            if !seen.insert(v) {
                continue;
            }
            if let ValueDef::Result(inst, _) = func.dfg.value_def(v) {
                if func.layout.inst_block(inst) == here {
                    todo.extend_from_slice(func.dfg.inst_args(inst));
                }
            }
        }
        false
    }

    /// `exit`: the entry hands r0 and the fuel count back through the context; a
    /// callee returns the fuel left, r0 and the r1-r5 it may have written (the caller
    /// sees r1-r5 as the callee left them).
    fn exit(&mut self) {
        if let Some(cont) = self.inline_exit {
            self.b.ins().jump(cont, &[]);
            self.open = false;
            return;
        }
        self.flush_counters(false);
        let status = self.b.ins().iconst(types::I64, STATUS_OK as i64);
        match self.entry {
            Entry::Run => {
                let r0 = self.b.use_var(self.regs[0]);
                let ctx = self.ctx();
                self.b.ins().store(self.flags.ctx, r0, ctx, offsets::reg(0));
                self.store_fuel();
                self.b.ins().return_(&[status]);
            }
            Entry::Call => {
                let mut values = vec![status, self.b.use_var(self.fuel_left)];
                values.push(self.b.use_var(self.regs[0]));
                for &r in &self.abis[&self.plan.start].returns {
                    values.push(self.b.use_var(self.regs[usize::from(r)]));
                }
                self.b.ins().return_(&values);
            }
        }
        self.open = false;
    }

    /// `call imm` (helper) or `callx`: charges fuel, then goes through the trampoline.
    fn helper_call(&mut self, pc: u32, insn: &Insn) -> TResult<()> {
        self.charge(pc, rules::CALL_COST);
        let id = if insn.opc & SRC_X != 0 {
            self.reg(pc, insn.dst)?
        } else {
            self.b.ins().iconst(types::I64, i64::from(insn.imm))
        };
        let ctx = self.ctx();
        let mut args = vec![ctx, id];
        for r in 1..=5 {
            args.push(self.b.use_var(self.regs[r]));
        }
        let trampoline = self
            .b
            .ins()
            .iconst(types::I64, helper_trampoline as *const () as usize as i64);
        let call = self
            .b
            .ins()
            .call_indirect(self.helper_sig, trampoline, &args);
        let r0 = self.b.inst_results(call)[0];
        let ctx = self.ctx();
        let trapped = self
            .b
            .ins()
            .load(types::I64, self.flags.ctx, ctx, offsets::HELPER_TRAPPED);
        self.trap_if(trapped, trap_code::HELPER, pc);
        self.reset_caches();
        self.set_reg(pc, 0, r0)
    }

    /// What every local call does first, as the interpreter does: charge its fuel (and
    /// test the stop flag), then trap if this frame is the deepest permitted (its r10
    /// at the frame size).
    fn enter_call(&mut self, pc: u32) {
        self.charge(pc, rules::CALL_COST);
        let fp_off = self.b.ins().band_imm_s(self.fp, 0xffff_ffff);
        let too_deep = self.b.ins().icmp_imm_s(
            IntCC::UnsignedLessThanOrEqual,
            fp_off,
            STACK_FRAME_SIZE as i64,
        );
        self.trap_if(too_deep, trap_code::CALL_DEPTH, pc);
    }

    /// The plan of the callee starting at `target` when its calls may be inlined
    /// ([`crate::analysis::inlinable`]): not in the counting variant (whose counters
    /// follow the callee's own blocks), nor inside an inlined callee, nor when the
    /// callee shares slots with the caller.
    fn inlinable(&self, target: u32) -> Option<&'a FunctionPlan> {
        if self.counters.is_some() || self.inline_exit.is_some() {
            return None;
        }
        let f = self.plans.iter().find(|f| f.start == target)?;
        let shared = f
            .pcs
            .iter()
            .any(|pc| self.plan.pcs.binary_search(pc).is_ok());
        (!shared && crate::analysis::inlinable(self.insns, f)).then_some(f)
    }

    /// A local call to `callee` (see [`Self::inlinable`]) translated in place: its
    /// blocks become blocks of this function, its `exit`s jump back here.
    fn inline_call(&mut self, pc: u32, callee: &'a FunctionPlan) -> TResult<()> {
        self.enter_call(pc);
        let saved: Vec<Value> = (6..=9).map(|r| self.b.use_var(self.regs[r])).collect();
        let cont = self.b.create_block();
        let outer_plan = std::mem::replace(&mut self.plan, callee);
        let inner: BTreeMap<u32, Block> = callee
            .leaders
            .iter()
            .map(|&l| (l, self.b.create_block()))
            .collect();
        let outer_blocks = std::mem::replace(&mut self.blocks, inner);
        // The callee's jumps go to its own blocks, never to a loop's copies or exits:
        // inside a versioned loop, `target` would take its slots for loop exits.
        let outer_loop = self.in_loop.take();
        self.inline_exit = Some(cont);
        let start = self.blocks[&callee.start];
        self.b.ins().jump(start, &[]);
        self.open = false;
        let mut resume = 0;
        let mut result = Ok(());
        for &cpc in &callee.pcs {
            if cpc < resume {
                continue;
            }
            if let Some(&block) = self.blocks.get(&cpc) {
                if self.open {
                    let to = self.target(cpc);
                    self.b.ins().jump(to, &[]);
                }
                self.b.switch_to_block(block);
                self.open = true;
            }
            assert!(
                self.open,
                "slot {cpc} of an inlined callee is in an open block"
            );
            match self.insn(cpc) {
                Ok(r) => resume = r,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.plan = outer_plan;
        self.blocks = outer_blocks;
        self.in_loop = outer_loop;
        self.inline_exit = None;
        result?;
        assert!(!self.open, "an inlined callee ends in exits");
        self.b.switch_to_block(cont);
        self.open = true;
        for (r, v) in (6..=9).zip(saved) {
            self.b.def_var(self.regs[r], v);
        }
        Ok(())
    }

    /// A local call (RFC 9669 §4.3.1): charges fuel, checks the depth, passes the fuel
    /// left, the callee's r10 (one frame down) and the registers it reads as arguments
    /// ([`CalleeAbi`]), and takes the fuel left, r0 and the r1-r5 it writes back as
    /// return values. r6-r9 stay in this function's variables, so they survive the call
    /// without being saved.
    fn local_call(&mut self, pc: u32, target: u32) {
        self.enter_call(pc);
        let abi = &self.abis[&target];
        let ctx = self.ctx();
        let mut args = vec![ctx, self.b.use_var(self.fuel_left)];
        if abi.fp {
            args.push(self.b.ins().iadd_imm_s(self.fp, -(STACK_FRAME_SIZE as i64)));
        }
        for &r in &abi.params {
            args.push(self.b.use_var(self.regs[usize::from(r)]));
        }
        let call = self.b.ins().call(self.callees[&target], &args);
        let results = self.b.inst_results(call).to_vec();
        let cont = self.b.create_block();
        self.b
            .ins()
            .brif(results[0], self.propagate, &[], cont, &[]);
        self.enter(cont);
        self.b.def_var(self.fuel_left, results[1]);
        self.b.def_var(self.regs[0], results[2]);
        for (&r, &v) in abi.returns.iter().zip(&results[3..]) {
            self.b.def_var(self.regs[usize::from(r)], v);
        }
        // A helper the callee ran may have remapped the regions this function cached.
        if self.calls_helpers {
            self.reset_caches();
        }
    }
}

/// Whether `op` (an atomic instruction's `imm`) is one both tiers compile: add, or, and,
/// xor (with or without fetch), xchg, cmpxchg.
pub(crate) fn atomic_op_supported(op: i32) -> bool {
    matches!(
        op & !ATOMIC_FETCH,
        ATOMIC_ADD | ATOMIC_OR | ATOMIC_AND | ATOMIC_XOR
    ) || op == ATOMIC_XCHG
        || op == ATOMIC_CMPXCHG
}

/// How many steps of `stride` keep `v` in `[0, top]` (`top < 2^32`), counting the
/// step at `v` itself: `(top - v) / stride + 1` going up, `v / -stride + 1` going down,
/// up to two fewer (see [`div`]), and 0 when `v` starts outside (above `top`, unsigned,
/// so below 0 too). A stride of 0 keeps it there for good.
fn trips_within(b: &mut FunctionBuilder<'_>, v: Value, top: i64, stride: i64) -> Value {
    let inside = b.ins().icmp_imm_s(IntCC::UnsignedLessThanOrEqual, v, top);
    let count = match stride.signum() {
        1 => {
            let top = b.ins().iconst(types::I64, top);
            let room = b.ins().isub(top, v);
            let q = div(b, room, stride);
            b.ins().iadd_imm_s(q, 1)
        }
        -1 => {
            let q = div(b, v, -stride);
            b.ins().iadd_imm_s(q, 1)
        }
        _ => b.ins().iconst(types::I64, i64::MAX),
    };
    let zero = b.ins().iconst(types::I64, 0);
    b.ins().select(inside, count, zero)
}

/// `x / d` for `x < 2^32` and `d > 0`, or (for a `d` not a power of two) up to two less:
/// `x * floor(2^32 / d) >> 32`, a multiply instead of a divide. A versioned loop's guard
/// counts iterations with it: counting fewer is safe, the checked loop runs the rest.
fn div(b: &mut FunctionBuilder<'_>, x: Value, d: i64) -> Value {
    if d.count_ones() == 1 {
        b.ins().ushr_imm_s(x, i64::from(d.trailing_zeros()))
    } else {
        let m = b.ins().imul_imm_s(x, (1i64 << 32) / d);
        b.ins().ushr_imm_s(m, 32)
    }
}
