//! One pass over the instruction slots, emitting x86-64 for each as it comes.
//!
//! # Registers
//! eBPF registers live in fixed host registers for the whole run, the mapping Linux's
//! x86-64 BPF JIT uses for r0-r9 (r0's rax and r3's rdx make division and `cmpxchg`
//! line up with the hardware's fixed operands):
//!
//! ```text
//!  r0 rax   r1 rdi   r2 rsi   r3 rdx   r4 rcx   r5 r8
//!  r6 rbx   r7 r13   r8 r14   r9 r15
//!  r10      rbp holds the *host* address r10 stands for
//!  r12      the run's JitContext
//!  r9       the read cache's host base (see "Memory")
//!  r10 r11  scratch
//! ```
//!
//! Keeping r10 as a host address makes a stack access at r10 plus a constant inside
//! the current 512-byte frame one `[rbp + off]` operand with no check (the stack region
//! always holds `STACK_SIZE` bytes and the depth check keeps every frame inside it). When
//! a program reads r10 as a value, its virtual address is rebuilt in r10 (rbp minus the
//! stack's host base minus its virtual base, kept in the context for the run), or in the
//! destination of a `mov`.
//!
//! # Memory
//! Every other access is checked against a *region cache* (one for loads, one for
//! stores and atomics, three words each in the context's unused register slots): the
//! region an access of that kind last went to, as `-lo` (`lo` its first virtual
//! address), `len - 8` (its length for that kind, less 8) and its host base. A hit is
//! `addr - lo <= len - 8`, unsigned (so the address lies in the region with room for 8
//! bytes: right for every size, since lengths are below 2^32), and the host address is
//! the base plus `addr - lo`: five instructions and three loads from the context, none
//! depending on another. The read cache's base is also kept in r9 for the whole run
//! (set wherever the context's copy changes, reloaded after every native call), so a
//! load addresses `[r11 + r9]`: four instructions and two loads. A miss calls a shared routine per kind that checks the access
//! exactly as `MemoryMap::translate` (index `addr >> 32` below `REGIONS_MAX`, then
//! `(addr as u32) + size <= len` with the row's read or write length), fills the cache
//! with the region (unless shorter than 8 bytes), and comes back with the host address;
//! a failure records (pc, addr, size, write) and leaves. The precise kind (out of
//! bounds or read-only) is worked out after the run by `runtime::decode_trap`, as for
//! the Cranelift tier. Both caches point at the stack at entry and after every helper
//! call (a helper may remap regions; the stack itself never changes during a run, so
//! its host base minus its virtual base is kept for the whole run too).
//!
//! Two or more accesses of one kind through one register in a straight run of slots
//! ([`Group`]: nothing between writes the register or uses r11) are checked once, as the
//! span of their offsets, and then address memory from r11 with no check; where the span
//! is not all in the cached region, a second copy of the run with every access checked
//! on its own runs instead ([`SlowCopy`]), so a trap comes at the same pc, after the
//! same stores, as on the interpreter.
//!
//! A global section's bounds are fixed by the program (`translate::KnownRegion`; engines
//! trap a helper that remaps one), so an access through an address computed from an
//! `lddw` of the section's address, in the same straight-line run of code ([`Known`]),
//! whose offset is proven in range for every value of the indexes added (masks, shifts,
//! byte loads), needs no check: its host address is the section's base plus the offset.
//! Likewise for the stack: an address computed from r10 (`mov rX, r10`, constants and
//! bounded indexes added) whose every value lands in the current frame needs no check
//! (the same condition as for r10 plus a constant); its host address is the register
//! plus the stack's host base minus its virtual base. Later such accesses through the
//! same register in the same straight run use that host address, left in r11, again
//! (`Emitter::proven_host`): a histogram's `count[i]++` computes it once. An address
//! computed from a global's address, or from r10, at an offset the pass cannot bound
//! (a DFA's `next[state * k + class]`, a pointer stepping through a stack array) is
//! checked against the section's or the stack's fixed bounds rather than the cache,
//! which it would otherwise take from the loop's input on every access. Which region
//! such a register points into is kept across jump targets as a hint
//! ([`Known::within`], [`Emitter::hints_at`]): it picks the check, and a wrong hint
//! fails it and goes to the miss routine.
//!
//! # Versioned loops
//! A loop of one straight range of slots closed by its only backward jump, whose
//! accesses the Cranelift tier's loop analysis (`loops::plan_loops`) finds strided (an
//! address that moves by a constant each iteration), gets a second copy with those
//! accesses unchecked (`versioned`): `[reg + off + delta]`, the delta (host minus
//! virtual address of the region) kept in the context. A guard at the loop's header,
//! where the main code enters it, computes for each strided span how many iterations
//! keep its bytes in its kind's cached region, and cuts the fuel slice to what that
//! many iterations charge (moving the rest to the reserve: the fuel left, and every
//! charge, stay the interpreter's). The copy's back edge charges like the checked
//! loop's; a slice it cannot pay leaves for the checked loop's back edge with the
//! charge undone, which charges again, refills (a trap or a stop comes from there) and
//! goes back through the guard. A span outside the cached region fails the guard, and
//! the checked loop runs until its next refill.
//!
//! The slice in a register: a copy whose loop never names some eBPF register (r9
//! first; never r0, r3 or r4, which divisions and shifts use implicitly) keeps the
//! slice in that register's host register, when its code turns out to hold nothing
//! that can trap or refill (every access one the guard proved, at r10 plus a constant
//! in the frame, or proven inside a fixed region; else it is emitted again without):
//! the way out of a trap reads the slice from the context. The register's value goes
//! to the guard's context slot, free by then, and the slice comes in from the context
//! on entry; the back edge charges the register; every way out (the fall-through, the
//! [`Stub::Leave`] of a short slice, a [`Stub::CopyExit`] for each jump out of the
//! loop) puts the slice back in the context and the register's value back first. A charge to the context's slice is a read-modify-write of memory
//! on every iteration's path, which a register charge is not (cksum 0.81, matmul 0.69,
//! hist 0.71 of the CPU time with the back edges' charges taken out altogether).
//!
//! # Fuel, stop, traps
//! While compiled code runs, the context's `fuel_used` holds a *slice* of what is left
//! of the budget (at most `rules::STOP_SLICE`; the rest is in `fuel_reserve`), as in the
//! Cranelift tier: one `sub` charges it and its borrow flag sends a short slice to a
//! per-site stub, which calls the shared refill routine. That routine takes the charge
//! from all the fuel left (trapping when the budget is exceeded), looks at the stop flag
//! (so a flag set before the run stops it at its first charge: the slice starts empty)
//! and refills the slice from the reserve; the stub then jumps back. A loop's closing
//! back edge (the last backward conditional jump to its head, or `jcc +1; ja back`)
//! charges before its compare and undoes the charge where it falls through, so an
//! iteration takes one branch ([`Emitter::back_edge`]). The epilogues turn
//! the fuel left back into fuel used. Traps record code and pc in the context and go to one
//! unwind path: at the entry frame (rsp equal to the one the prologue saved in the
//! context's r10 slot) it returns `STATUS_TRAP`; in a local callee it returns to the
//! caller with r11 = 1, and the caller (after restoring its registers) unwinds further.
//!
//! # Counting
//! The counting variant (`RunOptions::counts`, compiled on demand) adds 1 to a block's
//! counter in the run's buffer (`JitContext::counts`) where its leader's code begins,
//! before the leader's instruction: every way in (jump, call, return, fall through,
//! the prologue's jump to the entry) passes there, and a trap at a jump, call or helper
//! leaves before the next block's leader. That is the rule of `csx_ebpf::count`, with
//! no fused or speculative code to correct for. The uncounted variant has no counter
//! code at all.
//!
//! # Calls
//! A local call pushes r6-r9 and rbp (five words, so with the return address the native
//! stack stays 16-byte aligned), moves rbp one frame down and `call`s the target's code;
//! the callee's `exit` returns with r11 = 0. `exit` at the entry frame leaves through the
//! epilogue. Helpers go through the shared
//! `runtime::helper_trampoline`, with r1-r5 saved around it (the engines leave them
//! unchanged); atomics call `atomic_callout` with the checked host address.

use csx_ebpf::count::BlockMap;
use csx_ebpf::engine::rules;
use csx_ebpf::isa::*;
use csx_ebpf::limits::{REGIONS_MAX, STACK_FRAME_SIZE, STACK_SIZE};
use csx_ebpf::memory::{RegionEntry, RegionIdx};

use super::x64::*;
use crate::runtime::{helper_trampoline, offsets, trap_code, TRAP_AUX_WRITE};
use crate::translate::KnownRegion;
use versioned::QuickLoop;

mod versioned;

/// Host register of eBPF r0-r9.
const MAP: [Reg; 10] = [RAX, RDI, RSI, RDX, RCX, R8, RBX, R13, R14, R15];
/// The run's context.
const CTX: Reg = R12;
/// Host address of eBPF r10.
const FP: Reg = RBP;

/// Where the entry frame's rsp is kept during a run: the context's r10 slot, which only
/// the Cranelift tier's local calls use.
const ENTRY_RSP: i32 = offsets::reg(10);

/// The region caches (see "Memory" in the module doc), for loads and for stores: three
/// words each in the context's r1-r6 slots, which the quick tier reads only in its
/// prologue (`runtime::execute` writes them before every run).
const CACHE_READ: i32 = offsets::reg(1);
const CACHE_WRITE: i32 = offsets::reg(4);
/// A cache's `-(idx << 32)` for its region `idx`: adding it to an address gives the
/// offset into the region when the address lies in it, else 2^32 or more.
const CACHE_NEG_LO: i32 = 0;
/// A cache's region length for its kind of access, minus 8: an offset at most this
/// has room for any access of up to 8 bytes.
const CACHE_LIMIT: i32 = 8;
/// A cache's region's host base.
const CACHE_BASE: i32 = 16;
/// Shortest region the caches hold: its `len - 8` must not wrap.
const CACHE_LEN_MIN: i32 = 8;
const _: () = assert!(STACK_SIZE >= CACHE_LEN_MIN as usize);

/// The read cache's host base, always equal to the context's copy
/// (`CACHE_READ + CACHE_BASE`): set by the prologue, the read miss routine and
/// [`Emitter::reset_caches`], reloaded after a division and an atomic's callout (which
/// use r9 as a scratch).
const READ_BASE: Reg = R9;

/// The stack's host base minus its virtual base, in the context's r7 slot for the whole
/// run (the stack row never changes during a run: a helper that remaps it traps): a
/// stack address plus this is its host address.
const STACK_DELTA: i32 = offsets::reg(7);

/// The cache of loads (`write` false) or of stores and atomics.
fn cache(write: bool) -> i32 {
    if write {
        CACHE_WRITE
    } else {
        CACHE_READ
    }
}

/// Byte offset of the stack's row in the region table.
const STACK_ROW: i32 = RegionIdx::STACK.0 as i32 * RegionEntry::SIZE as i32;
// r10's virtual address is rebuilt by setting bit 32 over the stack offset.
const _: () = assert!(RegionIdx::STACK.0 == 1);
const _: () = assert!(REGIONS_MAX == 32);
// The miss routine sets the write flag of a memory trap with one `bts`.
const _: () = assert!(TRAP_AUX_WRITE.count_ones() == 1 && TRAP_AUX_WRITE > 0);

/// Why a program could not be translated (the verifier rules all of these out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EmitError {
    Unsupported { pc: u32, opcode: u8 },
    BadTarget { pc: u32, target: i64 },
}

type EResult<T> = Result<T, EmitError>;

/// An out-of-line path that records a trap and leaves.
#[derive(Clone, Copy, Debug)]
enum Stub {
    /// A trap with no address: fuel, stop, call depth, helper.
    Trap { code: i64, pc: u32 },
    /// A charge the slice could not pay for at `pc`: refill it, come back to `back`.
    Refill { pc: u32, back: usize },
    /// The back edge of an unchecked loop copy whose charge the slice could not pay
    /// for: the charge of `cost` undone, on to the checked loop's back edge (whose
    /// compare is at slot `compare`), which charges again. `slice`: the register the
    /// copy kept the slice in, if any (`versioned`, "The slice in a register"), put
    /// back first.
    Leave {
        cost: i32,
        compare: u32,
        slice: Option<Reg>,
    },
    /// A jump from an unchecked loop copy that keeps the slice in register `slice` to
    /// slot `target`, outside the loop: the slice put back, then on to the slot.
    CopyExit { slice: Reg, target: u32 },
    /// A backward conditional jump whose charge the slice could not pay for (see
    /// [`Emitter::back_edge`]): the slot `compare` is compared again (its condition
    /// inverted when `invert`); taken, the refill routine is called for `pc` (the slice
    /// already holds the charge) and control goes to slot `target`; not taken, the
    /// charge of `cost` is undone and control comes back to `back`.
    BackEdge {
        pc: u32,
        compare: u32,
        invert: bool,
        cost: i32,
        target: u32,
        back: usize,
    },
    /// An access at pc `pc` of `size` bytes that its region cache does not hold (r11 is
    /// the address minus the cache's `lo`): the shared miss routine checks it on the
    /// region table, refills the cache, and comes back to `back`.
    Miss {
        pc: u32,
        size: u8,
        write: bool,
        back: usize,
        /// Which check missed, and so what r11 holds and how the access at `back`
        /// addresses memory.
        check: Check,
    },
}

/// The check a [`Stub::Miss`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// The region cache's ([`Emitter::cached_access`]): r11 is the address minus the
    /// cache's `lo`.
    Cache,
    /// A global section's bounds ([`Emitter::unbounded_region`]): r11 is the address
    /// itself, and the access at `back` is `[r11 + r10]`, so r10 comes back as the
    /// cache's base.
    Global,
    /// The stack's bounds ([`Emitter::stack_access`]): r11 is the address, and the
    /// access at `back` adds the stack's host base minus its virtual base.
    Stack,
}

/// Where a 32-bit displacement must point.
#[derive(Clone, Copy, Debug)]
enum Target {
    Slot(u32),
    /// Slot `t` in the unchecked copy of versioned loop `i`.
    Copy(usize, u32),
    /// Where the guard of versioned loop `i` enters its copy: before the header's slot
    /// where the copy takes the slice into a register.
    CopyEntry(usize),
    /// The checked header of versioned loop `i`, after its guard.
    Head(usize),
    /// The slow copy of span group `n`.
    Slow(usize),
    Stub(usize),
    /// The shared refill routine.
    Refill,
    /// The shared miss routine of the read (false) or write cache.
    Miss(bool),
    Exit,
    Unwind,
}

/// What the one pass knows of a register's value since the last jump target or call
/// (where everything but the [`Known::within`] hint is forgotten): an unsigned bound,
/// and whether it is an address
/// [`Base`] plus an offset in `[lo, hi]`.
#[derive(Clone, Copy, Debug)]
struct Known {
    bound: u64,
    addr: Option<(Base, i64, i64)>,
    /// An address in a region with fixed bounds plus indexes the pass does not bound
    /// (so no `addr`): a global section's (`Base::Global`), or the stack's (`Base::Fp`:
    /// r10's value plus anything). Accesses through it are checked against the region's
    /// fixed bounds rather than the cache ([`Emitter::unbounded_region`]). Only a
    /// choice of check: a register that is not in the region at run time fails the
    /// check and the miss routine decides, so this survives jump targets as a hint
    /// ([`Emitter::hints_at`]) where nothing else does.
    within: Option<Base>,
}

/// What a [`Known`] address is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    /// The first byte of global section `n`.
    Global(usize),
    /// The virtual address r10 holds (the current frame's top; calls, which move it,
    /// forget everything).
    Fp,
}

impl Known {
    const NOTHING: Known = Known {
        bound: u64::MAX,
        addr: None,
        within: None,
    };

    /// The region [`Emitter::unbounded_region`] checks an access through this value
    /// against: its address's base, or where it is [`Known::within`].
    fn region(&self) -> Option<Base> {
        self.addr.map(|(b, ..)| b).or(self.within)
    }
}

/// Largest offset range a [`Known`] address keeps: far from overflow.
const KNOWN_OFFSET_MAX: i64 = 1 << 32;

/// Machine code for a whole program; execution starts at offset 0.
pub(crate) struct Emitted {
    pub code: Vec<u8>,
}

/// Translates `insns` (a verified program starting at slot `entry`); with `blocks`, the
/// counting variant (see "Counting" in the module doc).
pub(crate) fn emit_program(
    insns: &[Insn],
    entry: u32,
    blocks: Option<&BlockMap>,
    globals: &[KnownRegion],
) -> EResult<Emitted> {
    let mut e = Emitter {
        a: Asm::with_capacity(insns.len() * 24 + 512),
        insns,
        slot_pos: vec![usize::MAX; insns.len()],
        fixups: Vec::new(),
        stubs: Vec::new(),
        targets: jump_targets(insns, entry),
        known: [Known::NOTHING; 10],
        globals,
        group: None,
        slow: Vec::new(),
        proven_host: None,
        bottoms: loop_bottoms(insns),
        hints: Hints::new(insns),
        vloops: Vec::new(),
        copying: None,
        copy_pos: Vec::new(),
        copy_entry: Vec::new(),
        slice: None,
        head_pos: Vec::new(),
        held_delta: None,
    };
    if blocks.is_none() {
        e.vloops = versioned::versioned_loops(insns, &e.targets, &e.bottoms);
        e.copy_pos = e
            .vloops
            .iter()
            .map(|q| vec![usize::MAX; (q.bottom - q.header + 1) as usize])
            .collect();
        e.head_pos = vec![usize::MAX; e.vloops.len()];
        e.copy_entry = vec![usize::MAX; e.vloops.len()];
    }
    e.prologue(entry);
    let heads = loop_heads(insns);
    let mut pc = 0usize;
    let mut falls_through = false;
    while pc < insns.len() {
        if heads[pc] {
            e.a.align_with_nops(LOOP_HEAD_ALIGN);
        }
        (pc, falls_through) = e.slot(pc, blocks, falls_through)?;
    }
    if falls_through {
        // The verifier rules out reaching the end; should it happen anyway the run ends
        // as at an `exit` rather than running into the stubs.
        e.jump(Target::Exit);
    }
    e.finish()
}

/// Where a loop head's code starts (a multiple of this, from a function placed on a
/// 64-byte boundary): on the Zen 4 VM the same small loop ran 4, 5 or 6 cycles an
/// iteration by where it lay (docs/benchmarks-history.md, "code placement").
const LOOP_HEAD_ALIGN: usize = 32;

/// The targets of backward jumps (loop heads) whose code [`emit_program`] aligns: every
/// one but a head that the slot before falls into from inside a loop that is not nested
/// in the head's own (a back edge from `h < t` that jumps from inside the head's loop,
/// before its last back edge). That fall-through is then the other loop's path on every
/// iteration, and the padding would run each time: csv's digit loop falls into the head
/// of the loop its separators close (docs/benchmarks-history.md, "csv and hist"). A
/// head entered by falling through once per entry of its loop (an inner loop's) keeps
/// its alignment.
pub(super) fn loop_heads(insns: &[Insn]) -> Vec<bool> {
    // Every back edge, as (head, source).
    let mut edges = Vec::new();
    for (pc, i) in insns.iter().enumerate() {
        if let Some(h) = back_edge_target(pc, i).filter(|&h| h < insns.len()) {
            edges.push((h, pc));
        }
    }
    // Each head's last back edge: where its loop ends.
    let mut last = vec![None; insns.len()];
    for &(h, s) in &edges {
        last[h] = last[h].max(Some(s));
    }
    edges.sort_unstable();
    // Sweeping the slots: the sources of the back edges to heads before the slot that
    // jump from it or after it, least first.
    let mut open = std::collections::BinaryHeap::new();
    let mut next = 0;
    let mut heads = vec![false; insns.len()];
    for (t, end) in last.iter().enumerate() {
        let Some(end) = *end else { continue };
        while let Some(&(_, s)) = edges.get(next).filter(|&&(h, _)| h < t) {
            open.push(std::cmp::Reverse(s));
            next += 1;
        }
        while open.peek().is_some_and(|&std::cmp::Reverse(s)| s < t) {
            open.pop();
        }
        let falls_in = t > 0 && falls_through(&insns[t - 1]);
        let crossed = open.peek().is_some_and(|&std::cmp::Reverse(s)| s < end);
        heads[t] = !(falls_in && crossed);
    }
    heads
}

/// The back edges that close their loop: for each loop head, the last backward jump to
/// it, where control usually goes round again. [`Emitter::back_edge`] emits these with
/// the charge before the compare (one instruction and one branch fewer when taken,
/// three instructions more when not); an earlier backward jump to the same head (an
/// inner `continue`, or hashjoin's probe that jumps back on a match) keeps the charge on
/// its taken path, cheaper when it is mostly not taken.
pub(super) fn loop_bottoms(insns: &[Insn]) -> Vec<bool> {
    let mut last = vec![None; insns.len()];
    for (pc, i) in insns.iter().enumerate() {
        if let Some(h) = back_edge_target(pc, i).filter(|&h| h < insns.len()) {
            last[h] = Some(pc);
        }
    }
    let mut bottoms = vec![false; insns.len()];
    for pc in last.into_iter().flatten() {
        bottoms[pc] = true;
    }
    bottoms
}

/// Whether the code of ALU instruction `insn` leaves r11 alone: all but shifts by a
/// register and divisions, which use it as scratch.
fn alu_leaves_r11(insn: &Insn) -> bool {
    let op = insn.opc & 0xf0;
    let shift_by_reg = matches!(op, ALU_LSH | ALU_RSH | ALU_ARSH) && insn.opc & SRC_X != 0;
    !shift_by_reg && !matches!(op, ALU_DIV | ALU_MOD)
}

/// The slot a backward jump (not a call) at `pc` goes to, if `insn` is one.
fn back_edge_target(pc: usize, insn: &Insn) -> Option<usize> {
    let jump = matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
        && !matches!(insn.opc & 0xf0, JMP_CALL | JMP_EXIT);
    let rel = if insn.class() == CLASS_JMP32 && insn.opc & 0xf0 == JMP_JA {
        insn.imm
    } else {
        i32::from(insn.off)
    };
    if !jump || rel >= 0 {
        return None;
    }
    usize::try_from(pc as i64 + i64::from(rel) + 1).ok()
}

/// Whether control may go from `insn` to the next slot (anything but `ja` and `exit`;
/// an `lddw`'s second slot too).
fn falls_through(insn: &Insn) -> bool {
    let class = insn.class();
    let op = insn.opc & 0xf0;
    !(matches!(class, CLASS_JMP | CLASS_JMP32) && op == JMP_JA
        || class == CLASS_JMP && op == JMP_EXIT)
}

/// The slots control can reach other than by falling through: the entry, and the
/// targets of jumps and local calls (out-of-range targets are the emitter's error).
fn jump_targets(insns: &[Insn], entry: u32) -> Vec<bool> {
    let mut t = vec![false; insns.len()];
    let mut mark = |pc: usize, rel: i64| {
        if let Ok(to) = usize::try_from(pc as i64 + rel + 1) {
            if let Some(x) = t.get_mut(to) {
                *x = true;
            }
        }
    };
    for (pc, insn) in insns.iter().enumerate() {
        if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
            continue;
        }
        match insn.opc & 0xf0 {
            JMP_EXIT => {}
            JMP_CALL if insn.src == CALL_SRC_LOCAL => mark(pc, i64::from(insn.imm)),
            JMP_CALL => {}
            JMP_JA if insn.class() == CLASS_JMP32 => mark(pc, i64::from(insn.imm)),
            _ => mark(pc, i64::from(insn.off)),
        }
    }
    if let Some(x) = t.get_mut(entry as usize) {
        *x = true;
    }
    t
}

/// Whether `insn` may write eBPF register `r` (`lddw`, ALU and loads write their
/// destination; atomics their source or r0; calls every caller-saved register).
fn writes_register(insn: &Insn, r: u8) -> bool {
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD => insn.dst == r,
        CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => insn.src == r || r == 0,
        CLASS_ST | CLASS_STX => false,
        _ => true,
    }
}

/// The unsigned bound [`Emitter::learn_alu`] knows of ALU instruction `insn`'s result,
/// from what is known of its destination `d` and source `s` before it.
fn alu_bound(insn: &Insn, d: &Known, s: &Known) -> u64 {
    let by_reg = insn.opc & SRC_X != 0;
    let wide = insn.class() == CLASS_ALU64;
    let width = if wide { u64::MAX } else { u64::from(u32::MAX) };
    let imm = if wide {
        i64::from(insn.imm) as u64
    } else {
        u64::from(insn.imm as u32)
    };
    let bits = if wide { 64 } else { 32 };
    let bd = d.bound.min(width);
    match (insn.opc & 0xf0, by_reg) {
        (ALU_AND, false) => bd.min(imm),
        (ALU_AND, true) => bd.min(s.bound),
        // Every bit set in either operand, at most.
        (ALU_OR | ALU_XOR, _) => {
            let bs = if by_reg { s.bound.min(width) } else { imm };
            match bd | bs {
                0 => 0,
                x => u64::MAX >> x.leading_zeros(),
            }
        }
        (ALU_RSH, false) => bd >> (imm % bits),
        (ALU_LSH, false) => {
            let k = (imm % bits) as u32;
            if bd.leading_zeros() >= k + (64 - bits as u32) {
                bd << k
            } else {
                width
            }
        }
        (ALU_MOV, false) => imm,
        (ALU_MOV, true) if insn.off == 0 => s.bound.min(width),
        _ => width,
    }
}

/// The [`Known`] address (base and offset range) of ALU instruction `insn`'s result:
/// moved, a constant added or subtracted, or a bounded index added.
fn alu_addr(insn: &Insn, d: &Known, s: &Known) -> Option<(Base, i64, i64)> {
    let op = insn.opc & 0xf0;
    match (insn.class() == CLASS_ALU64, op, insn.opc & SRC_X != 0) {
        (true, ALU_MOV, true) if insn.off == 0 => s.addr,
        (true, ALU_ADD | ALU_SUB, false) => d.addr.and_then(|(n, lo, hi)| {
            let k = i64::from(insn.imm);
            let k = if op == ALU_ADD { k } else { -k };
            let (lo, hi) = (lo + k, hi + k);
            (lo.abs() <= KNOWN_OFFSET_MAX && hi.abs() <= KNOWN_OFFSET_MAX).then_some((n, lo, hi))
        }),
        (true, ALU_ADD, true) => match (d.addr, s.addr) {
            (Some(g), None) => Some((g, s.bound)),
            (None, Some(g)) => Some((g, d.bound)),
            _ => None,
        }
        .and_then(|((n, lo, hi), index)| {
            let hi = i64::try_from(index).ok()?.checked_add(hi)?;
            (hi <= KNOWN_OFFSET_MAX).then_some((n, lo, hi))
        }),
        _ => None,
    }
}

/// The region ALU instruction `insn`'s result is an address in at an offset the pass
/// does not bound ([`Known::within`]; none where `has_addr`, the offset being known):
/// through moves and adds of anything and constants.
fn alu_within(insn: &Insn, has_addr: bool, d: &Known, s: &Known) -> Option<Base> {
    let global = Known::region;
    match (
        insn.class() == CLASS_ALU64,
        insn.opc & 0xf0,
        insn.opc & SRC_X != 0,
    ) {
        _ if has_addr => None,
        (true, ALU_MOV, true) if insn.off == 0 => global(s),
        (true, ALU_ADD | ALU_SUB, false) => global(d),
        (true, ALU_ADD, true) => match (global(d), global(s)) {
            (Some(n), None) | (None, Some(n)) => Some(n),
            _ => None,
        },
        _ => None,
    }
}

struct Emitter<'a> {
    a: Asm,
    insns: &'a [Insn],
    /// [`jump_targets`]: where what is [`Known`] is forgotten.
    targets: Vec<bool>,
    /// What is known of r0-r9 at the slot being emitted.
    known: [Known; 10],
    /// The program's global sections.
    globals: &'a [KnownRegion],
    /// Code offset of each slot (`usize::MAX` for an `lddw` tail).
    slot_pos: Vec<usize>,
    /// Displacements to patch: (field offset, target, pc of the jump).
    fixups: Vec<(usize, Target, u32)>,
    stubs: Vec<Stub>,
    /// The span group being emitted (its fast copy), if any.
    group: Option<Group>,
    /// Every span group's slow copy, emitted after the code.
    slow: Vec<SlowCopy>,
    /// The register whose host address r11 holds, from an access proven in its region
    /// (a global section or the frame) at an earlier slot of this straight run: later
    /// such accesses through it use r11 as it is ([`Emitter::keeps_proven_host`]).
    proven_host: Option<u8>,
    /// [`loop_bottoms`]: the back edges emitted as [`Emitter::back_edge`].
    bottoms: Vec<bool>,
    /// Which registers keep their [`Known::within`] across jump targets.
    hints: Hints,
    /// The loops with an unchecked copy, by header (none in the counting variant).
    vloops: Vec<QuickLoop>,
    /// The loop whose unchecked copy is being emitted.
    copying: Option<usize>,
    /// Code offset of each slot of each loop's copy.
    copy_pos: Vec<Vec<usize>>,
    /// Code offset of each loop copy's entry ([`Target::CopyEntry`]).
    copy_entry: Vec<usize>,
    /// The register the copy being emitted keeps the fuel slice in, if any.
    slice: Option<Reg>,
    /// Code offset of each loop's checked header, after its guard.
    head_pos: Vec<usize>,
    /// In a loop's unchecked copy, whose delta r11 holds (loads' false, stores' true),
    /// from an unchecked access earlier in this straight run.
    held_delta: Option<bool>,
}

/// What [`Known::within`] survives a jump target (see [`Emitter::hints_at`]): the hints
/// at the forward jumps to each slot, and what a loop's body does to each register.
struct Hints {
    /// The hints every forward jump to a slot emitted so far had (no entry: no such
    /// jump yet), one per register, `None` where they differ.
    at_jumps: std::collections::HashMap<usize, [Option<Base>; 10]>,
    /// Each loop head's last back edge ([`loop_bottoms`]).
    loop_end: Vec<Option<usize>>,
    /// Per slot, the registers it writes otherwise than by adding to them or
    /// subtracting from them ([`clobber_mask`]), one bit each.
    clobbers: Vec<u16>,
    /// The region hint of the register last stored, 8 bytes, at r10 - 8 (i + 1) (by
    /// the pass's order of slots, whatever the path): an 8-byte load from there takes
    /// it, so a pointer clang spills and loads back in a loop keeps its hint
    /// ([`Emitter::learn_spill`]).
    spills: [Option<Base>; SPILL_SLOTS],
}

/// The 8-byte slots of a frame [`Hints::spills`] follows.
const SPILL_SLOTS: usize = STACK_FRAME_SIZE / 8;

impl Hints {
    fn new(insns: &[Insn]) -> Hints {
        let mut loop_end = vec![None; insns.len()];
        for (pc, i) in insns.iter().enumerate() {
            if let Some(h) = back_edge_target(pc, i).filter(|&h| h < insns.len()) {
                loop_end[h] = Some(pc);
            }
        }
        let clobbers = insns.iter().map(clobber_mask).collect();
        Hints {
            at_jumps: std::collections::HashMap::new(),
            loop_end,
            clobbers,
            spills: [None; SPILL_SLOTS],
        }
    }
}

/// Each register's hint where `a` and `b` agree.
fn meet(a: [Option<Base>; 10], b: [Option<Base>; 10]) -> [Option<Base>; 10] {
    std::array::from_fn(|r| if a[r] == b[r] { a[r] } else { None })
}

/// The registers `insn` may move out of the region they pointed into, as far as a hint
/// goes, one bit each: what it writes ([`writes_register`]; a call r0-r5), but for a
/// 64-bit add or subtract (a pointer stepping through an array).
fn clobber_mask(insn: &Insn) -> u16 {
    let bit = |r: u8| if r < 10 { 1u16 << r } else { 0 };
    match insn.class() {
        CLASS_ALU64 if matches!(insn.opc & 0xf0, ALU_ADD | ALU_SUB) => 0,
        CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD => bit(insn.dst),
        CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => bit(insn.src) | 1,
        CLASS_JMP | CLASS_JMP32 if insn.opc & 0xf0 == JMP_CALL => 0b11_1111,
        _ => 0,
    }
}

/// Two or more accesses of one kind (loads, or stores) through one register `base`, in
/// one straight run of slots in which nothing writes `base` or uses r11 otherwise (no
/// other checked access, no shift by a register, no division): one check against the
/// region cache proves every offset in `[min, end)` from `base` in the cached region, and
/// leaves r11 at the host address of `base + min` for all of them (loads: r11 plus r9,
/// which nothing in the run changes). Where the check
/// fails, the run's slow copy ([`SlowCopy`]) runs instead, every access checked on its
/// own, so a trap is the interpreter's (pc, and nothing after it done).
#[derive(Clone, Copy, Debug)]
struct Group {
    base: u8,
    write: bool,
    min: i32,
    end: i32,
    /// The first and the last member's slot.
    first: u32,
    last: u32,
    /// `base` is [`Known::within`] the stack: the span is checked against the stack's
    /// bounds, as [`Emitter::stack_access`] checks one access, and r11 is the host
    /// address of `base + min` for loads too.
    stack: bool,
}

/// Widest span a [`Group`] covers.
const GROUP_SPAN_MAX: i32 = 1 << 12;
const _: () = assert!(GROUP_SPAN_MAX as usize <= STACK_SIZE);

/// A span group's slots `start..=end` emitted again with every access checked, entered
/// when the group's check fails, and leaving to `resume` (the fast copy's code after the
/// last member), with `known` what was known at `start`.
#[derive(Clone, Copy, Debug)]
struct SlowCopy {
    start: u32,
    end: u32,
    known: [Known; 10],
    resume: usize,
}

impl Emitter<'_> {
    fn unsupported(&self, pc: u32) -> EmitError {
        EmitError::Unsupported {
            pc,
            opcode: self.insns[pc as usize].opc,
        }
    }

    // ---- plumbing ----------------------------------------------------------------------

    fn jump(&mut self, t: Target) {
        let at = self.a.jmp_rel32();
        self.fixups.push((at, t, 0));
    }

    fn jcc(&mut self, cc: Cond, t: Target) {
        let at = self.a.jcc_rel32(cc);
        self.fixups.push((at, t, 0));
    }

    /// `jcc` to a new stub.
    fn jcc_stub(&mut self, cc: Cond, stub: Stub) {
        self.stubs.push(stub);
        let n = self.stubs.len() - 1;
        self.jcc(cc, Target::Stub(n));
    }

    /// A jump (or call) to slot `target` of the jump at `pc`.
    fn fixup_slot(&mut self, at: usize, pc: u32, rel: i64) -> EResult<()> {
        let target = i64::from(pc) + rel + 1;
        match u32::try_from(target) {
            Ok(t) if (t as usize) < self.insns.len() => {
                let target = self.slot_target(t);
                self.fixups.push((at, target, pc));
                Ok(())
            }
            _ => Err(EmitError::BadTarget { pc, target }),
        }
    }

    /// `dst = [ctx + off]`.
    fn ctx_load(&mut self, dst: Reg, off: i32) {
        self.a.mov_rm(dst, mem(CTX, off));
    }

    /// `dst` = host address of the stack region's first byte.
    fn stack_base(&mut self, dst: Reg) {
        self.ctx_load(dst, offsets::REGIONS);
        self.a
            .mov_rm(dst, mem(dst, STACK_ROW + RegionEntry::OFFSET_BASE));
    }

    /// r10 = the virtual address r10 holds.
    fn fp_value(&mut self) -> Reg {
        self.fp_value_into(R10);
        R10
    }

    /// `dst` = the virtual address r10 holds.
    fn fp_value_into(&mut self, dst: Reg) {
        self.a.mov_rr(true, dst, FP);
        self.a.alu_rm(Alu::Sub, true, dst, mem(CTX, STACK_DELTA));
    }

    /// r9 = the read cache's host base again, after code that used r9.
    fn reload_read_base(&mut self) {
        self.ctx_load(READ_BASE, CACHE_READ + CACHE_BASE);
    }

    /// The host register holding eBPF register `r` for writing.
    fn dst(&self, pc: u32, r: u8) -> EResult<Reg> {
        MAP.get(usize::from(r))
            .copied()
            .ok_or_else(|| self.unsupported(pc))
    }

    /// The host register holding eBPF register `r`'s value (r10's rebuilt in r10).
    fn src(&mut self, pc: u32, r: u8) -> EResult<Reg> {
        match r {
            0..=9 => Ok(MAP[usize::from(r)]),
            REG_FP => Ok(self.fp_value()),
            _ => Err(self.unsupported(pc)),
        }
    }

    /// Turns the context's fuel slice back into fuel used: the budget minus slice
    /// and reserve. Clobbers r11.
    fn store_fuel_used(&mut self) {
        self.ctx_load(R11, offsets::FUEL_BUDGET);
        self.a
            .alu_rm(Alu::Sub, true, R11, mem(CTX, offsets::FUEL_USED));
        self.a
            .alu_rm(Alu::Sub, true, R11, mem(CTX, offsets::FUEL_RESERVE));
        self.a.mov_mr(mem(CTX, offsets::FUEL_USED), R11);
    }

    /// Host registers callee-saved in the C ABI, in push order.
    const SAVED: [Reg; 6] = [RBX, RBP, R12, R13, R14, R15];

    fn prologue(&mut self, entry: u32) {
        for r in Self::SAVED {
            self.a.push(r);
        }
        // Six pushes and the return address leave rsp 8 below a 16-byte boundary.
        self.a.alu_ri(Alu::Sub, true, RSP, 8);
        self.a.mov_rr(true, CTX, RDI);
        // The entry frame's rsp, which tells `exit` and the unwind path whether they
        // are in the entry frame: `regs[10]` is not read again by anyone.
        self.a.mov_mr(mem(CTX, ENTRY_RSP), RSP);
        for (r, host) in MAP.iter().enumerate().skip(1).take(5) {
            self.ctx_load(*host, offsets::reg(r));
        }
        for r in [0, 6, 7, 8, 9] {
            self.a.alu_rr(Alu::Xor, false, MAP[r], MAP[r]);
        }
        self.stack_base(FP);
        self.a
            .mov_imm(R11, RegionIdx::STACK.vaddr(0).wrapping_neg());
        self.a.alu_rr(Alu::Add, true, R11, FP);
        self.a.mov_mr(mem(CTX, STACK_DELTA), R11);
        self.a.alu_ri(Alu::Add, true, FP, STACK_SIZE as i32);
        self.reset_caches();
        // An empty slice: the run's first charge refills it (the runtime put the whole
        // budget in the reserve).
        self.a.store_imm(8, mem(CTX, offsets::FUEL_USED), 0);
        let at = self.a.jmp_rel32();
        self.fixups.push((at, Target::Slot(entry), entry));
    }

    /// Charges `cost` fuel at `pc` from the slice; a short slice goes to the refill
    /// routine (which traps, stops, or refills and comes back).
    fn charge(&mut self, pc: u32, cost: u64) {
        let cost = i32::try_from(cost).expect("jump costs are below the program length");
        // A refill comes back here: in a loop's unchecked copy that would run
        // iterations the guard did not prove (`versioned` admits no such charge).
        debug_assert!(
            self.copying.is_none(),
            "a charge in an unchecked copy at {pc}"
        );
        self.a
            .alu_mi(Alu::Sub, true, mem(CTX, offsets::FUEL_USED), cost);
        self.stubs.push(Stub::Refill { pc, back: 0 });
        let n = self.stubs.len() - 1;
        self.jcc(Cond::B, Target::Stub(n));
        self.stubs[n] = Stub::Refill {
            pc,
            back: self.a.pos(),
        };
    }

    /// Adds 1 to block `b`'s counter in the run's buffer (clobbers r11, which holds
    /// nothing across slots).
    fn count_block(&mut self, b: usize) {
        let off = i32::try_from(b * 8).expect("a program has at most 2^20 slots");
        self.ctx_load(R11, offsets::COUNTS);
        self.a.alu_mi(Alu::Add, true, mem(R11, off), 1);
    }

    // ---- the pass ----------------------------------------------------------------------

    /// Whether a block of the counting variant (`blocks`) starts at slot `pc`.
    fn counted_leader(blocks: Option<&BlockMap>, pc: usize) -> bool {
        blocks.is_some_and(|m| m.block_at(pc as u32).is_some())
    }

    /// Emits slot `pc` (or a fused pair from it) in [`emit_program`]'s pass: what is
    /// known and the proven host address forgotten where they must be, a span group
    /// opened where one starts and closed after its last member. Returns the next slot
    /// and whether control may fall through to it.
    fn slot(
        &mut self,
        pc: usize,
        blocks: Option<&BlockMap>,
        falls_in: bool,
    ) -> EResult<(usize, bool)> {
        self.slot_pos[pc] = self.a.pos();
        if let Some(b) = blocks.and_then(|m| m.block_at(pc as u32)) {
            self.count_block(b);
        }
        let insn = self.insns[pc];
        if self.targets[pc] {
            self.known = self.hints_at(pc, falls_in).map(|within| Known {
                within,
                ..Known::NOTHING
            });
        }
        if let Some(i) = self.versioned_at(pc as u32) {
            if self.prune_spans(i) {
                self.loop_guard(i);
                self.a.align_with_nops(LOOP_HEAD_ALIGN);
            }
            self.head_pos[i] = self.a.pos();
        }
        let leader = self.targets[pc] || Self::counted_leader(blocks, pc);
        if leader || !self.keeps_proven_host(&insn) {
            self.proven_host = None;
        }
        if self.fused_pair(pc, &insn, blocks)? {
            return Ok((pc + 2, true));
        }
        if self.group.is_none() {
            if let Some(g) = self.find_group(pc, blocks) {
                self.open_group(pc as u32, g);
            }
        }
        let (next, falls) = self.insn(pc as u32, &insn)?;
        if self.proven_host.is_some_and(|r| writes_register(&insn, r)) {
            self.proven_host = None;
        }
        self.learn(&insn, self.insns.get(pc + 1));
        self.note_forward_jump(pc, &insn);
        if self.group.is_some_and(|g| g.last <= pc as u32) {
            self.group = None;
            let resume = self.a.pos();
            if let Some(s) = self.slow.last_mut() {
                s.resume = resume;
            }
        }
        Ok((next as usize, falls))
    }

    /// Slots `pc` and `pc + 1` emitted together where the second is no leader: a shift
    /// pair as one extension ([`Emitter::extension`]), or, in uncounted code only,
    /// `jcc +1; mov` as one `cmov` ([`Emitter::select_pair`]) or `jcc +1; ja back` as
    /// one back edge ([`Emitter::jump_over_back_edge`]). Returns whether it emitted
    /// them.
    fn fused_pair(&mut self, pc: usize, insn: &Insn, blocks: Option<&BlockMap>) -> EResult<bool> {
        let Some(next) = self.insns.get(pc + 1) else {
            return Ok(false);
        };
        let leader = self.targets[pc + 1] || Self::counted_leader(blocks, pc + 1);
        if !leader && self.extension(insn, next) {
            if self.proven_host == Some(insn.dst) {
                self.proven_host = None;
            }
            self.learn(insn, Some(next));
            self.mark_slot(pc + 1);
            self.learn(next, self.insns.get(pc + 2));
            return Ok(true);
        }
        if blocks.is_none()
            && !self.targets[pc + 1]
            && (self.select_pair(pc as u32, insn, next)?
                || self.jump_over_back_edge(pc as u32, insn, next)?)
        {
            self.note_forward_jump(pc, insn);
            self.mark_slot(pc + 1);
            return Ok(true);
        }
        Ok(false)
    }

    /// The [`Known::within`] hints at jump target `pc`, where everything else is
    /// forgotten: those on which the slot before (when control falls in from it,
    /// `falls_in`, or `pc` is a loop head no forward jump reaches) and every forward
    /// jump to `pc` agree, and at a loop head only for
    /// registers that the loop's body (the head to its last back edge) changes by adds
    /// and subtracts at most. A hint only picks the check (see [`Known::within`]), so
    /// being wrong costs time, never a different result.
    fn hints_at(&self, pc: usize, falls_in: bool) -> [Option<Base>; 10] {
        // A loop head that only back edges reach (clang's rotated loops, entered by a
        // jump into the body) takes what the slot before left: the loop's own entry is
        // usually just before it.
        let jumps = self.hints.at_jumps.get(&pc).copied();
        let rotated = jumps.is_none() && self.hints.loop_end[pc].is_some();
        let before = (falls_in || rotated).then(|| self.known.map(|k| k.region()));
        let mut hints = match (before, jumps) {
            (Some(a), Some(b)) => meet(a, b),
            (a, b) => a.or(b).unwrap_or([None; 10]),
        };
        if hints.iter().all(Option::is_none) {
            return hints;
        }
        if let Some(end) = self.hints.loop_end[pc] {
            let body = self.hints.clobbers[pc..=end].iter().fold(0, |m, c| m | c);
            for (r, h) in hints.iter_mut().enumerate() {
                if body & 1 << r != 0 {
                    *h = None;
                }
            }
        }
        hints
    }

    /// Records the hints at a forward jump (conditional or not) at slot `pc` for its
    /// target ([`Emitter::hints_at`]).
    fn note_forward_jump(&mut self, pc: usize, insn: &Insn) {
        let jump = matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
            && !matches!(insn.opc & 0xf0, JMP_CALL | JMP_EXIT);
        let rel = if insn.class() == CLASS_JMP32 && insn.opc & 0xf0 == JMP_JA {
            insn.imm
        } else {
            i32::from(insn.off)
        };
        let Ok(target) = usize::try_from(pc as i64 + i64::from(rel) + 1) else {
            return;
        };
        if !jump || rel < 0 || target >= self.insns.len() {
            return;
        }
        let now = self.known.map(|k| k.region());
        self.hints
            .at_jumps
            .entry(target)
            .and_modify(|h| *h = meet(*h, now))
            .or_insert(now);
    }

    // ---- instructions ------------------------------------------------------------------

    /// `lsh rX, 32` then `rsh rX, 32` (or `arsh`), clang's zero- (sign-) extension of a
    /// 32-bit value: emits it as one `mov r32, r32` (`movsxd`) and returns true, or
    /// emits nothing and returns false. The caller fuses only where `next` is no
    /// block's leader, so nothing can jump or count between the two.
    fn extension(&mut self, insn: &Insn, next: &Insn) -> bool {
        let shift = |i: &Insn, op: u8| {
            i.opc == CLASS_ALU64 | op | SRC_K && i.imm == 32 && i.dst == insn.dst
        };
        if !shift(insn, ALU_LSH) || usize::from(insn.dst) >= MAP.len() {
            return false;
        }
        let d = MAP[usize::from(insn.dst)];
        if shift(next, ALU_RSH) {
            self.a.mov_rr(false, d, d);
        } else if shift(next, ALU_ARSH) {
            self.a.movsx_rr(32, true, d, d);
        } else {
            return false;
        }
        true
    }

    /// Emits slot `pc`; returns the next slot and whether control may fall through.
    fn insn(&mut self, pc: u32, insn: &Insn) -> EResult<(u32, bool)> {
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => self.alu(pc, insn)?,
            CLASS_LD => {
                if insn.opc != OP_LDDW {
                    return Err(self.unsupported(pc));
                }
                let high = self
                    .insns
                    .get(pc as usize + 1)
                    .ok_or_else(|| self.unsupported(pc))?
                    .imm;
                let value = u64::from(insn.imm as u32) | (u64::from(high as u32) << 32);
                let d = self.dst(pc, insn.dst)?;
                self.a.mov_imm(d, value);
                return Ok((pc + 2, true));
            }
            CLASS_LDX => self.load(pc, insn)?,
            CLASS_ST | CLASS_STX => self.store(pc, insn)?,
            _ => return self.jump_class(pc, insn),
        }
        Ok((pc + 1, true))
    }

    fn alu(&mut self, pc: u32, insn: &Insn) -> EResult<()> {
        let wide = insn.class() == CLASS_ALU64;
        let op = insn.opc & 0xf0;
        let by_reg = insn.opc & SRC_X != 0;
        let d = self.dst(pc, insn.dst)?;
        let imm = insn.imm;
        let simple = match op {
            ALU_ADD => Some(Alu::Add),
            ALU_SUB => Some(Alu::Sub),
            ALU_OR => Some(Alu::Or),
            ALU_AND => Some(Alu::And),
            ALU_XOR => Some(Alu::Xor),
            _ => None,
        };
        if let Some(alu) = simple {
            if by_reg {
                let s = self.src(pc, insn.src)?;
                self.a.alu_rr(alu, wide, d, s);
            } else {
                self.a.alu_ri(alu, wide, d, imm);
            }
            return Ok(());
        }
        match op {
            ALU_MUL if by_reg => {
                let s = self.src(pc, insn.src)?;
                self.a.imul_rr(wide, d, s);
            }
            ALU_MUL => self.a.imul_ri(wide, d, imm),
            ALU_LSH | ALU_RSH | ALU_ARSH => {
                let shift = match op {
                    ALU_LSH => Shift::Shl,
                    ALU_RSH => Shift::Shr,
                    _ => Shift::Sar,
                };
                if by_reg {
                    let s = self.src(pc, insn.src)?;
                    self.shift_by_reg(shift, wide, d, s);
                } else {
                    // The count is masked to the operand width (RFC 9669 §4.1).
                    let count = (imm as u32 & if wide { 63 } else { 31 }) as u8;
                    if count != 0 {
                        self.a.shift_ri(shift, wide, d, count);
                    } else if !wide {
                        self.a.mov_rr(false, d, d);
                    }
                }
            }
            ALU_NEG if !by_reg => self.a.unary(Unary::Neg, wide, d),
            ALU_DIV | ALU_MOD => {
                self.divide(pc, insn, wide, op == ALU_DIV, insn.off == 1, d)?;
            }
            ALU_MOV if !by_reg => {
                let v = if wide {
                    i64::from(imm) as u64
                } else {
                    u64::from(imm as u32)
                };
                self.a.mov_imm(d, v);
            }
            // `movsx` for offsets 8/16/32 (8/16 in ALU32); any other offset is a plain
            // `mov`, as the interpreter decodes it. `mov32` zero-extends.
            ALU_MOV if wide && insn.off == 0 && insn.src == REG_FP => self.fp_value_into(d),
            ALU_MOV => {
                let s = self.src(pc, insn.src)?;
                match (wide, insn.off) {
                    (true, 8 | 16 | 32) => self.a.movsx_rr(insn.off as u8, true, d, s),
                    (false, 8 | 16) => self.a.movsx_rr(insn.off as u8, false, d, s),
                    _ => self.a.mov_rr(wide, d, s),
                }
            }
            ALU_END => self.byte_swap(pc, insn, wide, by_reg, d)?,
            _ => return Err(self.unsupported(pc)),
        }
        Ok(())
    }

    /// `d op= s` with the count in cl: rcx (r4) is saved in r11 around it.
    fn shift_by_reg(&mut self, shift: Shift, wide: Wide, d: Reg, s: Reg) {
        let t = if d == RCX { R11 } else { d };
        self.a.mov_rr(true, R11, RCX);
        if s != RCX {
            self.a.mov_rr(true, RCX, s);
        }
        self.a.shift_cl(shift, wide, t);
        if !wide {
            // A 32-bit shift by 0 leaves the upper half alone on some CPUs: clear it.
            self.a.mov_rr(false, t, t);
        }
        self.a.mov_rr(true, RCX, R11);
    }

    /// `div`/`mod` (`signed`: `sdiv`/`smod`). By zero the quotient is 0 and the
    /// remainder the dividend; by -1 signed, the quotient is the negation and the
    /// remainder 0 (the hardware would fault on `MIN / -1`). 32-bit results, the
    /// unchanged dividend included, are zero-extended.
    fn divide(
        &mut self,
        pc: u32,
        insn: &Insn,
        wide: Wide,
        div: bool,
        signed: bool,
        d: Reg,
    ) -> EResult<()> {
        let by_reg = insn.opc & SRC_X != 0;
        if by_reg {
            let s = self.src(pc, insn.src)?;
            self.a.mov_rr(true, R11, s);
        } else if self.divide_by_immediate(insn, wide, div, signed, d) {
            return Ok(());
        }
        let mut special = Vec::new();
        if by_reg {
            self.a.test_rr(wide, R11, R11);
            special.push((self.a.jcc_rel32(Cond::E), false));
            if signed {
                self.a.alu_ri(Alu::Cmp, wide, R11, -1);
                special.push((self.a.jcc_rel32(Cond::E), true));
            }
        }
        self.save_rax_rdx();
        if d != RAX {
            self.a.mov_rr(true, RAX, d);
        }
        if signed {
            self.a.sign_extend_rax(wide);
        } else {
            self.a.alu_rr(Alu::Xor, false, RDX, RDX);
        }
        let op = if signed { Unary::Idiv } else { Unary::Div };
        self.a.unary(op, wide, R11);
        self.a.mov_rr(true, R11, if div { RAX } else { RDX });
        self.restore_rax_rdx(d);
        if special.is_empty() {
            return Ok(());
        }
        let mut done = vec![self.a.jmp_rel32()];
        for (at, minus_one) in special {
            self.a.bind_here(at);
            if minus_one {
                self.divide_by_minus_one(wide, div, d);
            } else {
                self.divide_by_zero(wide, div, d);
            }
            done.push(self.a.jmp_rel32());
        }
        for at in done {
            self.a.bind_here(at);
        }
        Ok(())
    }

    /// The cases of a division by an immediate that need no `div`, emitted (by zero, by
    /// -1 signed, and 32-bit unsigned by any constant above 1), returning true; else
    /// r11 = the divisor, returning false.
    fn divide_by_immediate(
        &mut self,
        insn: &Insn,
        wide: Wide,
        div: bool,
        signed: bool,
        d: Reg,
    ) -> bool {
        let k = if wide {
            i64::from(insn.imm) as u64
        } else {
            u64::from(insn.imm as u32)
        };
        if k == 0 {
            self.divide_by_zero(wide, div, d);
        } else if signed && insn.imm == -1 {
            self.divide_by_minus_one(wide, div, d);
        } else if !signed && !wide && k > 1 {
            self.divide_u32_by_constant(div, k, d);
        } else {
            self.a.mov_imm(R11, k);
            return false;
        }
        true
    }

    /// r0's and r3's values (rax, rdx) to r10 and r9, for code that needs rax and rdx;
    /// [`Emitter::restore_rax_rdx`] puts them back.
    fn save_rax_rdx(&mut self) {
        self.a.mov_rr(true, R10, RAX);
        self.a.mov_rr(true, R9, RDX);
    }

    /// rax and rdx back from r10 and r9, r9 the read base again, then `d = r11` (the
    /// result, which may go to rax or rdx).
    fn restore_rax_rdx(&mut self, d: Reg) {
        self.a.mov_rr(true, RAX, R10);
        self.a.mov_rr(true, RDX, R9);
        self.reload_read_base();
        self.a.mov_rr(true, d, R11);
    }

    /// A 32-bit unsigned `div` or `mod` by a constant `k` (2 to 2^32 - 1) without a
    /// `div`: the quotient of `x < 2^32` is the high half of `x * m`, `m = ceil(2^64 /
    /// k)` (with `e = m * k - 2^64 < k`, `x * m / 2^64 = x / k + x * e / (k * 2^64)`,
    /// and the second term is below `1 / k`, so the floor does not move), and the
    /// remainder `x - q * k` in 32 bits. A `div` by a constant in a loop (`(x & 0xff) %
    /// 7`, clang's `q = x / 7; q *= 7; x -= q`) costs its latency on every iteration.
    fn divide_u32_by_constant(&mut self, div: bool, k: u64, d: Reg) {
        let m = ((1u128 << 64).div_ceil(u128::from(k))) as u64;
        // Where `x` is once rax and rdx are in use.
        let x = match d {
            RAX => R10,
            RDX => R9,
            _ => d,
        };
        self.save_rax_rdx();
        self.a.mov_rr(false, RAX, d);
        self.a.mov_imm(RDX, m);
        self.a.unary(Unary::Mul, true, RDX);
        if div {
            self.a.mov_rr(true, R11, RDX);
        } else {
            self.a.imul_rri(false, R11, RDX, k as u32 as i32);
            self.a.unary(Unary::Neg, false, R11);
            self.a.alu_rr(Alu::Add, false, R11, x);
        }
        self.restore_rax_rdx(d);
    }

    fn divide_by_zero(&mut self, wide: Wide, div: bool, d: Reg) {
        if div {
            self.a.alu_rr(Alu::Xor, false, d, d);
        } else if !wide {
            self.a.mov_rr(false, d, d);
        }
    }

    fn divide_by_minus_one(&mut self, wide: Wide, div: bool, d: Reg) {
        if div {
            self.a.unary(Unary::Neg, wide, d);
        } else {
            self.a.alu_rr(Alu::Xor, false, d, d);
        }
    }

    /// `le`/`be` (class ALU) and `bswap` (class ALU64), RFC 9669 §4.2, decoded as the
    /// interpreter does: `le` truncates on this little-endian VM, the others swap.
    fn byte_swap(&mut self, pc: u32, insn: &Insn, wide: Wide, by_reg: bool, d: Reg) -> EResult<()> {
        if wide && by_reg {
            return Err(self.unsupported(pc));
        }
        match (insn.imm, wide || by_reg) {
            (16, false) => self.a.movzx_rr(16, d, d),
            (32, false) => self.a.mov_rr(false, d, d),
            (_, false) => {}
            (16, true) => {
                self.a.ror16_8(d);
                self.a.movzx_rr(16, d, d);
            }
            (32, true) => self.a.bswap(false, d),
            (_, true) => self.a.bswap(true, d),
        }
        Ok(())
    }

    fn access_size(&self, pc: u32, insn: &Insn) -> EResult<u8> {
        Ok(match insn.opc & 0x18 {
            SIZE_B => 1,
            SIZE_H => 2,
            SIZE_W => 4,
            SIZE_DW => 8,
            _ => return Err(self.unsupported(pc)),
        })
    }

    /// The operand for an access of `size` bytes at eBPF register `base` plus `off`,
    /// checked (see the module doc). A checked operand is `[r11 - size]`.
    fn access(&mut self, pc: u32, base: u8, off: i16, size: u8, write: bool) -> EResult<Mem> {
        if let Some(m) = self.unchecked_access(pc, base, off, write) {
            return Ok(m);
        }
        if let Some(g) = self.group {
            if g.base == base && g.write == write && (g.first..=g.last).contains(&pc) {
                let disp = i32::from(off) - g.min;
                return Ok(if write || g.stack {
                    mem(R11, disp)
                } else {
                    mem_index(R11, READ_BASE, disp)
                });
            }
        }
        let frame = -(STACK_FRAME_SIZE as i32);
        let end = i32::from(off) + i32::from(size);
        if base == REG_FP && i32::from(off) >= frame && end <= 0 {
            return Ok(mem(FP, i32::from(off)));
        }
        // Every path below but the first sets r11 anew.
        let held = self.proven_host.take();
        if let Some(m) = self.proven_access(base, off, size, write, held) {
            return Ok(m);
        }
        if let Some(m) = self.unbounded_region(pc, base, off, size, write) {
            return Ok(m);
        }
        self.cached_access(pc, base, off, size, write)
    }

    /// An access through a register [`Known`] to be a global section's or the frame's
    /// address at offsets all in range (see the module doc): the region's host base plus
    /// the offset, `base + (v - vaddr)`, or r11 as it is where it still holds that
    /// register's host address (`held`, [`Emitter::proven_host`]). `None` (nothing
    /// emitted) when the register is no such address or the offsets are not all in
    /// range.
    fn proven_access(
        &mut self,
        base: u8,
        off: i16,
        size: u8,
        write: bool,
        held: Option<u8>,
    ) -> Option<Mem> {
        let Some(&Known {
            addr: Some((region, lo, hi)),
            ..
        }) = self.known.get(usize::from(base))
        else {
            return None;
        };
        // The accepted offsets from the region's base, as `[start, end)`.
        let (start, end, idx) = match region {
            Base::Global(n) => (
                0,
                self.globals[n].len(write) as i64,
                RegionIdx::GLOBALS_FIRST.0 as usize + n,
            ),
            Base::Fp => (-(STACK_FRAME_SIZE as i64), 0, RegionIdx::STACK.0 as usize),
        };
        let off64 = i64::from(off);
        if lo + off64 < start || hi + off64 + i64::from(size) > end {
            return None;
        }
        self.proven_host = Some(base);
        if held == Some(base) {
            return Some(mem(R11, i32::from(off)));
        }
        let b = MAP[usize::from(base)];
        if region == Base::Fp {
            self.a.mov_rr(true, R11, b);
            self.a.alu_rm(Alu::Add, true, R11, mem(CTX, STACK_DELTA));
            return Some(mem(R11, i32::from(off)));
        }
        let row = (idx * RegionEntry::SIZE) as i32;
        let vaddr = RegionIdx(idx as u32).vaddr(0);
        self.ctx_load(R11, offsets::REGIONS);
        let a = &mut self.a;
        a.mov_rm(R11, mem(R11, row + RegionEntry::OFFSET_BASE));
        a.mov_imm(R10, vaddr.wrapping_neg());
        a.alu_rr(Alu::Add, true, R10, b);
        a.alu_rr(Alu::Add, true, R11, R10);
        Some(mem(R11, i32::from(off)))
    }

    /// An access checked against its kind's region cache: `addr - lo <= len - 8`,
    /// unsigned, then the host address `base + (addr - lo)`; a miss goes to a stub
    /// ([`Stub::Miss`]), which comes back with r11 set so that the same `add` gives the
    /// host address.
    fn cached_access(
        &mut self,
        pc: u32,
        base: u8,
        off: i16,
        size: u8,
        write: bool,
    ) -> EResult<Mem> {
        let b = self.src(pc, base)?;
        let c = cache(write);
        let a = &mut self.a;
        if off == 0 {
            a.mov_rr(true, R11, b);
        } else {
            a.lea(R11, mem(b, i32::from(off)));
        }
        a.alu_rm(Alu::Add, true, R11, mem(CTX, c + CACHE_NEG_LO));
        a.alu_rm(Alu::Cmp, true, R11, mem(CTX, c + CACHE_LIMIT));
        let n = self.miss_branch(pc, size, write, Check::Cache);
        self.miss_returns_here(n);
        if !write {
            return Ok(mem_index(R11, READ_BASE, 0));
        }
        self.a.alu_rm(Alu::Add, true, R11, mem(CTX, c + CACHE_BASE));
        Ok(mem(R11, 0))
    }

    /// Whether r11 still holds [`Emitter::proven_host`]'s host address when `insn`'s code
    /// starts, given that it held it after the slot before (which was no leader): ALU
    /// instructions leave r11 alone (but shifts by a register and divisions), and so do
    /// accesses through that register or at r10 plus a constant in the frame; anything
    /// else (another access, jumps, calls, atomics) may use it. A proven access through
    /// the register itself checks again that its offset is proven, and writing the
    /// register ends the run after its slot ([`writes_register`]).
    fn keeps_proven_host(&self, insn: &Insn) -> bool {
        let Some(r) = self.proven_host else {
            return false;
        };
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => alu_leaves_r11(insn),
            CLASS_LDX | CLASS_ST | CLASS_STX => {
                insn.opc & 0xe0 != MODE_ATOMIC
                    && self.cache_access(insn).is_none_or(|(base, ..)| base == r)
            }
            _ => false,
        }
    }

    /// An access through an address in a region with fixed bounds (a global section,
    /// or the stack) at an offset the pass cannot bound ([`Known::within`], or an
    /// `addr` not proven in range), checked against the region's fixed length instead
    /// of the cache (a loop reading its input and a table or a stack array through one
    /// cache would miss on every access): `offset <= len - size`, then
    /// `[base + offset]`; outside the region, the miss routine decides exactly as for
    /// any other access. The operand, or `None` when the base is in no such region (or
    /// no access of this kind fits in it).
    fn unbounded_region(
        &mut self,
        pc: u32,
        base: u8,
        off: i16,
        size: u8,
        write: bool,
    ) -> Option<Mem> {
        let (idx, len) = match self.known.get(usize::from(base))?.region()? {
            Base::Global(n) => (
                RegionIdx::GLOBALS_FIRST.0 as usize + n,
                i64::try_from(self.globals[n].len(write)).ok()?,
            ),
            Base::Fp => return Some(self.stack_access(pc, base, off, size, write)),
        };
        let limit = i32::try_from(len - i64::from(size))
            .ok()
            .filter(|&l| l >= 0)?;
        let row = (idx * RegionEntry::SIZE) as i32;
        let vaddr = RegionIdx(idx as u32).vaddr(0);
        let b = MAP[usize::from(base)];
        self.a.lea(R11, mem(b, i32::from(off)));
        self.a.mov_imm(R10, vaddr.wrapping_neg());
        self.a.alu_rr(Alu::Add, true, R10, R11);
        self.a.alu_ri(Alu::Cmp, true, R10, limit);
        let n = self.miss_branch(pc, size, write, Check::Global);
        self.ctx_load(R11, offsets::REGIONS);
        self.a.mov_rm(R11, mem(R11, row + RegionEntry::OFFSET_BASE));
        self.miss_returns_here(n);
        Some(mem_index(R11, R10, 0))
    }

    /// Jumps to a new miss stub for the access at `pc` when the compare just emitted says
    /// above (unsigned); its index, for [`Emitter::miss_returns_here`].
    fn miss_branch(&mut self, pc: u32, size: u8, write: bool, check: Check) -> usize {
        self.stubs.push(Stub::Miss {
            pc,
            size,
            write,
            back: 0,
            check,
        });
        let n = self.stubs.len() - 1;
        self.jcc(Cond::A, Target::Stub(n));
        n
    }

    /// Miss stub `n` returns to the code emitted next.
    fn miss_returns_here(&mut self, n: usize) {
        let back = self.a.pos();
        if let Stub::Miss { back: b, .. } = &mut self.stubs[n] {
            *b = back;
        }
    }

    /// An access through a register in the stack at an offset the pass cannot bound,
    /// checked against the stack's bounds (its row holds `STACK_SIZE` bytes both ways
    /// and never changes during a run): `addr - vbase <= STACK_SIZE - size`, unsigned,
    /// then `[addr + (host base - vbase)]` ([`STACK_DELTA`]): six instructions. Anywhere
    /// else, the stub calls the miss routine, which decides exactly.
    fn stack_access(&mut self, pc: u32, base: u8, off: i16, size: u8, write: bool) -> Mem {
        let b = MAP[usize::from(base)];
        let limit = STACK_SIZE as i32 - i32::from(size);
        self.stack_offset(b, i32::from(off));
        self.a.alu_ri(Alu::Cmp, true, R10, limit);
        let n = self.miss_branch(pc, size, write, Check::Stack);
        self.miss_returns_here(n);
        self.a.alu_rm(Alu::Add, true, R11, mem(CTX, STACK_DELTA));
        mem(R11, 0)
    }

    /// r11 = `b + off`, and r10 = its offset from the stack's virtual base (wrapped when
    /// below it).
    fn stack_offset(&mut self, b: Reg, off: i32) {
        self.a.lea(R11, mem(b, off));
        self.a
            .mov_imm(R10, RegionIdx::STACK.vaddr(0).wrapping_neg());
        self.a.alu_rr(Alu::Add, true, R10, R11);
    }

    /// The memory access of `insn` that would take the region cache's check: its base
    /// register, offset, size and kind; `None` for any other instruction (atomics
    /// included) and for accesses proven in bounds without r11 (r10 plus a constant in
    /// the frame).
    fn cache_access(&self, insn: &Insn) -> Option<(u8, i16, u8, bool)> {
        let size = match insn.opc & 0x18 {
            SIZE_B => 1,
            SIZE_H => 2,
            SIZE_W => 4,
            _ => 8,
        };
        let (base, write) = match (insn.class(), insn.opc & 0xe0) {
            (CLASS_LDX, MODE_MEM | MODE_MEMSX) => (insn.src, false),
            (CLASS_ST | CLASS_STX, MODE_MEM) => (insn.dst, true),
            _ => return None,
        };
        let end = i32::from(insn.off) + size;
        if base == REG_FP && i32::from(insn.off) >= -(STACK_FRAME_SIZE as i32) && end <= 0 {
            return None;
        }
        Some((base, insn.off, size as u8, write))
    }

    /// The [`Group`] starting at slot `pc`, if its access and at least one more form one
    /// (see [`Group`]); `blocks`' leaders end a run too.
    fn find_group(&self, pc: usize, blocks: Option<&BlockMap>) -> Option<Group> {
        let (base, off, size, write) = self.cache_access(&self.insns[pc])?;
        // r10's accesses outside the frame, and registers the one pass proves in a
        // region, keep their own paths.
        if base == REG_FP
            || usize::from(base) >= MAP.len()
            || self.known[usize::from(base)].addr.is_some()
        {
            return None;
        }
        let mut g = Group {
            base,
            write,
            min: i32::from(off),
            end: i32::from(off) + i32::from(size),
            first: pc as u32,
            last: pc as u32,
            stack: self.known[usize::from(base)].within == Some(Base::Fp),
        };
        let writes_base = |i: &Insn| match i.class() {
            CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD => i.dst == base,
            _ => false,
        };
        if writes_base(&self.insns[pc]) {
            return None;
        }
        let mut at = pc + 1;
        while let Some(insn) = self.insns.get(at) {
            if self.targets[at] || blocks.is_some_and(|m| m.block_at(at as u32).is_some()) {
                break;
            }
            match insn.class() {
                CLASS_JMP | CLASS_JMP32 => break,
                CLASS_LD => {
                    if writes_base(insn) {
                        break;
                    }
                    at += 2;
                    continue;
                }
                CLASS_ALU | CLASS_ALU64 => {
                    let op = insn.opc & 0xf0;
                    let shift_by_reg =
                        matches!(op, ALU_LSH | ALU_RSH | ALU_ARSH) && insn.opc & SRC_X != 0;
                    if writes_base(insn) || shift_by_reg || matches!(op, ALU_DIV | ALU_MOD) {
                        break;
                    }
                }
                _ => match self.cache_access(insn) {
                    Some((b, off, size, w)) if b == base && w == write => {
                        let min = g.min.min(i32::from(off));
                        let end = g.end.max(i32::from(off) + i32::from(size));
                        if end - min > GROUP_SPAN_MAX {
                            break;
                        }
                        (g.min, g.end, g.last) = (min, end, at as u32);
                        if writes_base(insn) {
                            break;
                        }
                    }
                    Some(_) => break,
                    // An atomic, or r10 plus a constant in the frame (no r11).
                    None if insn.opc & 0xe0 == MODE_ATOMIC => break,
                    None if writes_base(insn) => break,
                    None => {}
                },
            }
            at += 1;
        }
        (g.last > g.first).then_some(g)
    }

    /// Emits the check of span group `g` (see [`Group`]) before its first member at `pc`,
    /// and starts its fast copy.
    fn open_group(&mut self, pc: u32, g: Group) {
        let c = cache(g.write);
        let b = MAP[usize::from(g.base)];
        let n = self.slow.len();
        self.slow.push(SlowCopy {
            start: pc,
            end: g.last,
            known: self.known,
            resume: 0,
        });
        if g.stack {
            // The span `[min, end)` is at most `GROUP_SPAN_MAX`, the stack's size.
            self.stack_offset(b, g.min);
            self.a
                .alu_ri(Alu::Cmp, true, R10, STACK_SIZE as i32 - (g.end - g.min));
            self.jcc(Cond::A, Target::Slow(n));
            self.a.alu_rm(Alu::Add, true, R11, mem(CTX, STACK_DELTA));
            self.group = Some(g);
            return;
        }
        let a = &mut self.a;
        a.lea(R11, mem(b, g.min));
        a.alu_rm(Alu::Add, true, R11, mem(CTX, c + CACHE_NEG_LO));
        a.alu_rm(Alu::Cmp, true, R11, mem(CTX, c + CACHE_LIMIT));
        self.jcc(Cond::A, Target::Slow(n));
        // Below `len - 8` at `base + min` (so in the region) and at `base + end - 8`:
        // the whole span is in the region.
        let wide = g.end - g.min - CACHE_LEN_MIN;
        if wide > 0 {
            self.a.lea(R10, mem(R11, wide));
            self.a
                .alu_rm(Alu::Cmp, true, R10, mem(CTX, c + CACHE_LIMIT));
            self.jcc(Cond::A, Target::Slow(n));
        }
        if g.write {
            self.a.alu_rm(Alu::Add, true, R11, mem(CTX, c + CACHE_BASE));
        }
        self.group = Some(g);
    }

    /// Emits every span group's slow copy (see [`SlowCopy`]); returns their positions.
    fn emit_slow_copies(&mut self) -> EResult<Vec<usize>> {
        let mut pos = Vec::with_capacity(self.slow.len());
        for s in std::mem::take(&mut self.slow) {
            pos.push(self.a.pos());
            self.known = s.known;
            self.group = None;
            let mut pc = s.start;
            while pc <= s.end {
                self.proven_host = None;
                let insn = self.insns[pc as usize];
                let (next, _) = self.insn(pc, &insn)?;
                self.learn(&insn, self.insns.get(pc as usize + 1));
                pc = next;
            }
            let at = self.a.jmp_rel32();
            self.a.patch_rel32(at, s.resume);
        }
        Ok(pos)
    }

    /// Points both region caches at the stack, which is always mapped with
    /// `STACK_SIZE` bytes for loads and stores: in the prologue, and after a helper
    /// call (a helper may remap regions), with r9 the read cache's base. Clobbers r11.
    fn reset_caches(&mut self) {
        self.stack_base(R11);
        self.a.mov_rr(true, READ_BASE, R11);
        for c in [CACHE_READ, CACHE_WRITE] {
            self.a.mov_mr(mem(CTX, c + CACHE_BASE), R11);
        }
        self.a
            .mov_imm(R11, RegionIdx::STACK.vaddr(0).wrapping_neg());
        for c in [CACHE_READ, CACHE_WRITE] {
            self.a.mov_mr(mem(CTX, c + CACHE_NEG_LO), R11);
            self.a.store_imm(
                8,
                mem(CTX, c + CACHE_LIMIT),
                STACK_SIZE as i32 - CACHE_LEN_MIN,
            );
        }
    }

    /// Updates what is [`Known`] after `insn` (whose `lddw` tail is `tail`) ran.
    fn learn(&mut self, insn: &Insn, tail: Option<&Insn>) {
        let dst = usize::from(insn.dst);
        let op = insn.opc & 0xf0;
        let new = match insn.class() {
            // A byte swap's result may be 64 bits wide in either class.
            CLASS_ALU64 | CLASS_ALU if op == ALU_END => Known::NOTHING,
            CLASS_ALU64 | CLASS_ALU => self.learn_alu(insn),
            CLASS_LD if insn.opc != OP_LDDW => {
                self.known = [Known::NOTHING; 10];
                return;
            }
            CLASS_LD => self.learn_lddw(insn, tail),
            CLASS_LDX => Known {
                bound: match (insn.opc & 0xe0, insn.opc & 0x18) {
                    (MODE_MEM, SIZE_B) => 0xff,
                    (MODE_MEM, SIZE_H) => 0xffff,
                    (MODE_MEM, SIZE_W) => 0xffff_ffff,
                    _ => u64::MAX,
                },
                addr: None,
                within: self
                    .spill_slot(
                        insn.src,
                        insn.off,
                        insn.opc == CLASS_LDX | MODE_MEM | SIZE_DW,
                    )
                    .and_then(|i| self.hints.spills[i]),
            },
            CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => {
                // An atomic may write its source (fetch) or r0 (cmpxchg).
                for r in [usize::from(insn.src), 0] {
                    if let Some(k) = self.known.get_mut(r) {
                        *k = Known::NOTHING;
                    }
                }
                return;
            }
            CLASS_ST | CLASS_STX => {
                self.learn_spill(insn);
                return;
            }
            _ if op == JMP_CALL => {
                self.known = [Known::NOTHING; 10];
                return;
            }
            _ => return,
        };
        if let Some(k) = self.known.get_mut(dst) {
            *k = new;
        }
    }

    /// The slot of [`Hints::spills`] an access at `base + off` touches, when `base` is
    /// r10 and the access lies in the frame; `None` otherwise, and where `whole` (an
    /// 8-byte access at a multiple of 8) is false.
    fn spill_slot(&self, base: u8, off: i16, whole: bool) -> Option<usize> {
        let frame = STACK_FRAME_SIZE as i32;
        let off = i32::from(off);
        (base == REG_FP && whole && off < 0 && off >= -frame && off % 8 == 0)
            .then(|| (-off / 8 - 1) as usize)
    }

    /// A store at r10 plus a constant: an 8-byte store of a register keeps the
    /// register's region hint for the slot ([`Hints::spills`]); any other store into the
    /// slot forgets it.
    fn learn_spill(&mut self, insn: &Insn) {
        if insn.dst != REG_FP || insn.opc & 0xe0 != MODE_MEM {
            return;
        }
        let whole = insn.opc & 0x18 == SIZE_DW && insn.class() == CLASS_STX;
        let region = match insn.src {
            REG_FP => Some(Base::Fp),
            r => self.known.get(usize::from(r)).and_then(Known::region),
        };
        let aligned = i32::from(insn.off).div_euclid(8) * 8;
        let Ok(aligned) = i16::try_from(aligned) else {
            return;
        };
        if let Some(i) = self.spill_slot(REG_FP, aligned, true) {
            self.hints.spills[i] = if whole && aligned == insn.off {
                region
            } else {
                None
            };
        }
    }

    /// What is [`Known`] of an ALU instruction's result (not a byte swap).
    fn learn_alu(&self, insn: &Insn) -> Known {
        let get = |k: &[Known; 10], r: u8| match k.get(usize::from(r)) {
            Some(k) => *k,
            // r10 is its own frame's top for as long as anything is known.
            None if r == REG_FP => Known {
                bound: u64::MAX,
                addr: Some((Base::Fp, 0, 0)),
                within: None,
            },
            None => Known::NOTHING,
        };
        let d = get(&self.known, insn.dst);
        let s = get(&self.known, insn.src);
        let addr = alu_addr(insn, &d, &s);
        Known {
            bound: alu_bound(insn, &d, &s),
            addr,
            within: alu_within(insn, addr.is_some(), &d, &s),
        }
    }

    /// What is [`Known`] of an `lddw`'s value (whose second slot is `tail`): the value
    /// itself, and the global it points into when it is one's address.
    fn learn_lddw(&self, insn: &Insn, tail: Option<&Insn>) -> Known {
        let high = tail.map_or(0, |t| t.imm);
        let value = u64::from(insn.imm as u32) | (u64::from(high as u32) << 32);
        let off = value & 0xffff_ffff;
        let global = ((value >> 32) as u32)
            .checked_sub(RegionIdx::GLOBALS_FIRST.0)
            .map(|n| n as usize)
            .filter(|&n| self.globals.get(n).is_some_and(|g| off <= g.read_len))
            .map(|n| (Base::Global(n), off as i64, off as i64));
        Known {
            bound: value,
            addr: global,
            within: None,
        }
    }

    /// `ldx` and the sign-extending `ldxs` (RFC 9669 §5.1, §5.2).
    fn load(&mut self, pc: u32, insn: &Insn) -> EResult<()> {
        let size = self.access_size(pc, insn)?;
        let kind = match (insn.opc & 0xe0, size) {
            (MODE_MEM, 1) => Load::U8,
            (MODE_MEM, 2) => Load::U16,
            (MODE_MEM, 4) => Load::U32,
            (MODE_MEM, _) => Load::U64,
            (MODE_MEMSX, 1) => Load::S8,
            (MODE_MEMSX, 2) => Load::S16,
            (MODE_MEMSX, 4) => Load::S32,
            _ => return Err(self.unsupported(pc)),
        };
        let d = self.dst(pc, insn.dst)?;
        let m = self.access(pc, insn.src, insn.off, size, false)?;
        self.a.load(kind, d, m);
        Ok(())
    }

    /// `st` (immediate), `stx` (register) and the atomics (RFC 9669 §5.3).
    fn store(&mut self, pc: u32, insn: &Insn) -> EResult<()> {
        let size = self.access_size(pc, insn)?;
        match (insn.class(), insn.opc & 0xe0) {
            (CLASS_ST, MODE_MEM) => {
                let m = self.access(pc, insn.dst, insn.off, size, true)?;
                self.a.store_imm(size, m, insn.imm);
            }
            (CLASS_STX, MODE_MEM) => {
                // The address first: its check may use r10 (a miss's stub, a global's
                // offset), where r10's value is rebuilt; rebuilding it leaves r11 alone.
                let m = self.access(pc, insn.dst, insn.off, size, true)?;
                let v = self.src(pc, insn.src)?;
                self.a.store(size, m, v);
            }
            (CLASS_STX, MODE_ATOMIC) if size >= 4 => self.atomic(pc, insn, size)?,
            _ => return Err(self.unsupported(pc)),
        }
        Ok(())
    }

    /// An atomic read-modify-write: checked like a store, then performed by
    /// [`atomic_callout`] (atomics are rare; the callout matches the interpreter's
    /// aligned-atomic / unaligned-plain rule by construction).
    fn atomic(&mut self, pc: u32, insn: &Insn, size: u8) -> EResult<()> {
        let op = insn.imm;
        let valid = crate::translate::atomic_op_supported(op);
        let fetches = op & ATOMIC_FETCH != 0;
        // The fetched value goes to `src`, except `cmpxchg`'s, which goes to r0.
        if !valid || (fetches && op != ATOMIC_CMPXCHG && insn.src > 9) {
            return Err(self.unsupported(pc));
        }
        // The address first, as for a store.
        let m = self.access(pc, insn.dst, insn.off, size, true)?;
        let v = self.src(pc, insn.src)?;
        let a = &mut self.a;
        a.lea(R11, m);
        a.mov_rr(true, R10, v);
        const CALLER_SAVED: [Reg; 6] = [RAX, RDI, RSI, RDX, RCX, R8];
        for r in CALLER_SAVED {
            a.push(r);
        }
        // Six pushes keep rsp 16-byte aligned (see `prologue`).
        a.mov_rr(true, RCX, RAX);
        a.mov_rr(true, RDX, R10);
        a.mov_imm(RSI, u64::from(op as u32) | (u64::from(size) << 32));
        a.mov_rr(true, RDI, R11);
        // Called through r9, so the read cache's base must be reloaded after it
        // (whatever the callout's own code does with r9).
        a.mov_imm(READ_BASE, atomic_callout as *const () as usize as u64);
        a.call_r(READ_BASE);
        a.mov_rr(true, R11, RAX);
        for r in CALLER_SAVED.iter().rev() {
            a.pop(*r);
        }
        if op == ATOMIC_CMPXCHG {
            a.mov_rr(true, RAX, R11);
        } else if fetches {
            a.mov_rr(true, MAP[usize::from(insn.src)], R11);
        }
        self.reload_read_base();
        Ok(())
    }

    /// JMP and JMP32 (RFC 9669 §4.3).
    fn jump_class(&mut self, pc: u32, insn: &Insn) -> EResult<(u32, bool)> {
        let wide = insn.class() == CLASS_JMP;
        let by_reg = insn.opc & SRC_X != 0;
        let op = insn.opc & 0xf0;
        let next = pc + 1;
        match op {
            JMP_JA if !by_reg => {
                let rel = if wide { insn.off.into() } else { insn.imm };
                let target = self.check_target(pc, i64::from(rel))?;
                let cost = rules::jump_cost(pc, target);
                if cost > 0 {
                    self.charge(pc, cost);
                }
                let at = self.a.jmp_rel32();
                self.fixup_slot(at, pc, i64::from(rel))?;
                Ok((next, false))
            }
            JMP_EXIT if wide && !by_reg => {
                self.jump(Target::Exit);
                Ok((next, false))
            }
            JMP_CALL if wide && !by_reg && insn.src == CALL_SRC_LOCAL => {
                self.local_call(pc, i64::from(insn.imm))?;
                Ok((next, true))
            }
            JMP_CALL if wide => {
                self.helper_call(pc, insn, by_reg)?;
                Ok((next, true))
            }
            _ => {
                self.conditional(pc, insn, wide, by_reg)?;
                Ok((next, true))
            }
        }
    }

    fn check_target(&self, pc: u32, rel: i64) -> EResult<u32> {
        let target = i64::from(pc) + rel + 1;
        match u32::try_from(target) {
            Ok(t) if (t as usize) < self.insns.len() => Ok(t),
            _ => Err(EmitError::BadTarget { pc, target }),
        }
    }

    fn conditional(&mut self, pc: u32, insn: &Insn, wide: Wide, by_reg: bool) -> EResult<()> {
        let cc = self.condition(pc, insn)?;
        let target = self.check_target(pc, insn.off.into())?;
        let cost = rules::jump_cost(pc, target);
        if cost > 0 && self.bottoms[pc as usize] {
            return self.back_edge(pc, pc, false, target);
        }
        self.compare(pc, insn, wide, by_reg)?;
        if cost == 0 {
            let at = self.a.jcc_rel32(cc);
            return self.fixup_slot(at, pc, insn.off.into());
        }
        // Any other backward jump charges fuel on its taken path, jumped over.
        let skip = self.a.jcc_rel32(cc.invert());
        self.charge(pc, cost);
        let at = self.a.jmp_rel32();
        self.fixup_slot(at, pc, insn.off.into())?;
        self.a.bind_here(skip);
        Ok(())
    }

    /// The condition code of conditional jump `insn`.
    fn condition(&self, pc: u32, insn: &Insn) -> EResult<Cond> {
        Ok(match insn.opc & 0xf0 {
            JMP_JEQ => Cond::E,
            JMP_JNE | JMP_JSET => Cond::Ne,
            JMP_JGT => Cond::A,
            JMP_JGE => Cond::Ae,
            JMP_JLT => Cond::B,
            JMP_JLE => Cond::Be,
            JMP_JSGT => Cond::G,
            JMP_JSGE => Cond::Ge,
            JMP_JSLT => Cond::L,
            JMP_JSLE => Cond::Le,
            _ => return Err(self.unsupported(pc)),
        })
    }

    /// Sets the flags for conditional jump `insn` (`cmp` or `test`).
    fn compare(&mut self, pc: u32, insn: &Insn, wide: Wide, by_reg: bool) -> EResult<()> {
        let a = self.src(pc, insn.dst)?;
        let test = insn.opc & 0xf0 == JMP_JSET;
        if by_reg {
            let b = self.src(pc, insn.src)?;
            if test {
                self.a.test_rr(wide, a, b);
            } else {
                self.a.alu_rr(Alu::Cmp, wide, a, b);
            }
        } else if test {
            self.a.test_ri(wide, a, insn.imm);
        } else {
            self.a.alu_ri(Alu::Cmp, wide, a, insn.imm);
        }
        Ok(())
    }

    /// A loop's back edge ([`loop_bottoms`]): the conditional jump at slot `compare`
    /// (its condition inverted when `invert`) taken goes to slot `target` (before it)
    /// charging fuel at `pc`. The charge comes first, then the compare and one `jcc` to the loop head,
    /// and the fall-through undoes the charge: one taken branch and two not taken an
    /// iteration, where a charge on the taken path needs a jump over it too. Nothing
    /// reads the slice between the charge and its undoing; a slice too short for the
    /// charge goes to a [`Stub::BackEdge`], which compares again and either refills
    /// (taken: the refill routine sees the charge at `pc`, as if it were made on the
    /// taken path) or undoes the charge (not taken).
    fn back_edge(&mut self, pc: u32, compare: u32, invert: bool, target: u32) -> EResult<()> {
        let cost = i32::try_from(rules::jump_cost(pc, target))
            .expect("jump costs are below the program length");
        if let Some(i) = self.copying {
            return self.copy_back_edge(i, pc, (compare, invert), cost);
        }
        // A versioned loop's checked copy goes round past its guard.
        let head = match self.versioned_at(target) {
            Some(i) if self.vloops[i].bottom == pc => Target::Head(i),
            _ => Target::Slot(target),
        };
        let insn = self.insns[compare as usize];
        let mut cc = self.condition(compare, &insn)?;
        if invert {
            cc = cc.invert();
        }
        let fuel = mem(CTX, offsets::FUEL_USED);
        self.a.alu_mi(Alu::Sub, true, fuel, cost);
        self.stubs.push(Stub::BackEdge {
            pc,
            compare,
            invert,
            cost,
            target,
            back: 0,
        });
        let n = self.stubs.len() - 1;
        self.jcc(Cond::B, Target::Stub(n));
        let wide = insn.class() == CLASS_JMP;
        self.compare(compare, &insn, wide, insn.opc & SRC_X != 0)?;
        let at = self.a.jcc_rel32(cc);
        self.fixups.push((at, head, pc));
        self.a.alu_mi(Alu::Add, true, fuel, cost);
        if let Stub::BackEdge { back, .. } = &mut self.stubs[n] {
            *back = self.a.pos();
        }
        Ok(())
    }

    /// `jcc +1` at `pc` over a `mov` at `pc + 1` (clang's way to set a flag or pick one
    /// of two values, `w8 = 1; if w6 != 0 goto +1; w8 = 0`): emitted as a `cmov` of the
    /// move's value where the condition does not hold, and returns true; false (nothing
    /// emitted) for any other pair, or one that reads r10 (whose value is built in the
    /// scratch register the move's value goes to). A branch on data that goes either
    /// way costs a misprediction on half the rows; a forward jump charges no fuel, so
    /// the fuel is the interpreter's. The caller fuses only where `pc + 1` is no block's
    /// leader.
    fn select_pair(&mut self, pc: u32, insn: &Insn, next: &Insn) -> EResult<bool> {
        let conditional = matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
            && !matches!(insn.opc & 0xf0, JMP_JA | JMP_CALL | JMP_EXIT);
        let by_reg = insn.opc & SRC_X != 0;
        let mov = matches!(next.class(), CLASS_ALU | CLASS_ALU64)
            && next.opc & 0xf0 == ALU_MOV
            && next.off == 0;
        let from_reg = next.opc & SRC_X != 0;
        if !conditional
            || insn.off != 1
            || !mov
            || insn.dst == REG_FP
            || (by_reg && insn.src == REG_FP)
            || next.dst >= REG_FP
            || (from_reg && next.src >= REG_FP)
        {
            return Ok(false);
        }
        let wide = next.class() == CLASS_ALU64;
        let value = match (from_reg, wide) {
            (true, true) => MAP[usize::from(next.src)],
            (true, false) => {
                self.a.mov_rr(false, R10, MAP[usize::from(next.src)]);
                R10
            }
            (false, true) => {
                self.a.mov_imm(R10, i64::from(next.imm) as u64);
                R10
            }
            (false, false) => {
                self.a.mov_imm(R10, u64::from(next.imm as u32));
                R10
            }
        };
        let cc = self.condition(pc, insn)?;
        self.compare(pc, insn, insn.class() == CLASS_JMP, by_reg)?;
        self.a.cmov(cc.invert(), MAP[usize::from(next.dst)], value);
        self.known[usize::from(next.dst)] = Known::NOTHING;
        if self.proven_host == Some(next.dst) {
            self.proven_host = None;
        }
        Ok(true)
    }

    /// `jcc +1` at `pc` then `ja` back at `pc + 1` (clang's loop bottom when the exit
    /// test is not the back edge's): emitted as one [`Emitter::back_edge`] with the
    /// condition inverted, and returns true; false (nothing emitted) for any other pair.
    /// The caller fuses only where `pc + 1` is no block's leader.
    fn jump_over_back_edge(&mut self, pc: u32, insn: &Insn, next: &Insn) -> EResult<bool> {
        let conditional = matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
            && !matches!(insn.opc & 0xf0, JMP_JA | JMP_CALL | JMP_EXIT);
        if !conditional || insn.off != 1 || next.opc != OP_JA || next.off >= 0 {
            return Ok(false);
        }
        if !self.bottoms[pc as usize + 1] {
            return Ok(false);
        }
        let target = self.check_target(pc + 1, next.off.into())?;
        self.back_edge(pc + 1, pc, true, target)?;
        Ok(true)
    }

    /// A bpf-to-bpf call (see "Calls" in the module doc).
    fn local_call(&mut self, pc: u32, rel: i64) -> EResult<()> {
        self.check_target(pc, rel)?;
        self.charge(pc, rules::CALL_COST);
        // The deepest permitted frame has r10 one frame above the stack's base.
        self.stack_base(R11);
        self.a.alu_ri(Alu::Add, true, R11, STACK_FRAME_SIZE as i32);
        self.a.alu_rr(Alu::Cmp, true, FP, R11);
        self.jcc_stub(
            Cond::Be,
            Stub::Trap {
                code: trap_code::CALL_DEPTH,
                pc,
            },
        );
        const FRAME: [Reg; 5] = [RBX, R13, R14, R15, FP];
        for r in FRAME {
            self.a.push(r);
        }
        self.a.alu_ri(Alu::Sub, true, FP, STACK_FRAME_SIZE as i32);
        let at = self.a.call_rel32();
        self.fixup_slot(at, pc, rel)?;
        for r in FRAME.iter().rev() {
            self.a.pop(*r);
        }
        self.a.test_rr(false, R11, R11);
        self.jcc(Cond::Ne, Target::Unwind);
        Ok(())
    }

    /// `call imm` (helper) or `callx dst`, through `runtime::helper_trampoline`.
    fn helper_call(&mut self, pc: u32, insn: &Insn, by_reg: bool) -> EResult<()> {
        // The id the interpreter passes: the immediate as an unsigned 32-bit value, or
        // the whole register.
        let id_reg = if by_reg {
            Some(self.src(pc, insn.dst)?)
        } else {
            None
        };
        self.charge(pc, rules::CALL_COST);
        match id_reg {
            Some(r) => self.a.mov_rr(true, R11, r),
            None => self.a.mov_imm(R11, u64::from(insn.imm as u32)),
        }
        let a = &mut self.a;
        // Six words: the seventh argument at [rsp], r1-r5 saved above it; rsp stays
        // 16-byte aligned.
        a.alu_ri(Alu::Sub, true, RSP, 48);
        for (r, host) in MAP.iter().enumerate().skip(1).take(5) {
            a.mov_mr(mem(RSP, 8 * r as i32), *host);
        }
        // trampoline(ctx, id, r1, r2, r3, r4, r5): rdi, rsi, rdx, rcx, r8, r9, [rsp].
        a.mov_mr(mem(RSP, 0), R8);
        a.mov_rr(true, R9, RCX);
        a.mov_rr(true, R8, RDX);
        a.mov_rr(true, RCX, RSI);
        a.mov_rr(true, RDX, RDI);
        a.mov_rr(true, RSI, R11);
        a.mov_rr(true, RDI, CTX);
        a.mov_imm(RAX, helper_trampoline as *const () as usize as u64);
        a.call_r(RAX);
        for (r, host) in MAP.iter().enumerate().skip(1).take(5) {
            a.mov_rm(*host, mem(RSP, 8 * r as i32));
        }
        a.alu_ri(Alu::Add, true, RSP, 48);
        a.alu_mi(Alu::Cmp, true, mem(CTX, offsets::HELPER_TRAPPED), 0);
        self.jcc_stub(
            Cond::Ne,
            Stub::Trap {
                code: trap_code::HELPER,
                pc,
            },
        );
        self.reset_caches();
        Ok(())
    }

    // ---- the shared tail -----------------------------------------------------------------

    /// Emits the stubs and shared exits, then patches every displacement.
    fn finish(mut self) -> EResult<Emitted> {
        self.emit_loop_copies()?;
        let slow_pos = self.emit_slow_copies()?;
        let (stub_pos, mut to_mem_trap, mut to_set_trap) = self.emit_stubs()?;
        let refill = self.emit_refill(&mut to_set_trap);
        let miss = [false, true].map(|write| self.emit_miss(write, &mut to_mem_trap));
        let (unwind, exit) = self.emit_exits(to_mem_trap, to_set_trap);
        for (at, target, pc) in std::mem::take(&mut self.fixups) {
            let dest = match target {
                Target::Slot(t) => match self.slot_pos[t as usize] {
                    usize::MAX => {
                        return Err(EmitError::BadTarget {
                            pc,
                            target: i64::from(t),
                        })
                    }
                    p => p,
                },
                Target::Copy(i, t) => self.copy_pos[i][(t - self.vloops[i].header) as usize],
                Target::CopyEntry(i) => self.copy_entry[i],
                Target::Head(i) => self.head_pos[i],
                Target::Stub(n) => stub_pos[n],
                Target::Slow(n) => slow_pos[n],
                Target::Refill => refill,
                Target::Miss(write) => miss[usize::from(write)],
                Target::Exit => exit,
                Target::Unwind => unwind,
            };
            self.a.patch_rel32(at, dest);
        }
        Ok(Emitted { code: self.a.buf })
    }

    /// Emits every stub: their positions, and the jumps still to bind to the memory-trap
    /// and the set-trap paths.
    /// A [`Stub::BackEdge`]'s out-of-line part: the compare again; not taken, the
    /// charge undone and back to the fall-through; taken, the refill and on to the head.
    fn back_edge_stub(
        &mut self,
        pc: u32,
        (compare, invert): (u32, bool),
        cost: i32,
        target: u32,
        back: usize,
    ) -> EResult<()> {
        let insn = self.insns[compare as usize];
        let mut cc = self.condition(compare, &insn)?;
        if invert {
            cc = cc.invert();
        }
        let wide = insn.class() == CLASS_JMP;
        self.compare(compare, &insn, wide, insn.opc & SRC_X != 0)?;
        let taken = self.a.jcc_rel32(cc);
        self.a
            .alu_mi(Alu::Add, true, mem(CTX, offsets::FUEL_USED), cost);
        let at = self.a.jmp_rel32();
        self.a.patch_rel32(at, back);
        self.a.bind_here(taken);
        self.call_refill(pc);
        let at = self.a.jmp_rel32();
        self.fixups.push((at, Target::Slot(target), pc));
        Ok(())
    }

    fn emit_stubs(&mut self) -> EResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        let mut stub_pos = Vec::with_capacity(self.stubs.len());
        let to_mem_trap = Vec::new();
        let mut to_set_trap = Vec::new();
        for stub in std::mem::take(&mut self.stubs) {
            stub_pos.push(self.a.pos());
            match stub {
                Stub::Trap { code, pc } => {
                    self.a.mov_imm(R10, u64::from(pc));
                    self.a.mov_imm(R9, code as u64);
                    to_set_trap.push(self.a.jmp_rel32());
                }
                Stub::Refill { pc, back } => {
                    self.call_refill(pc);
                    let at = self.a.jmp_rel32();
                    self.a.patch_rel32(at, back);
                }
                Stub::Leave {
                    cost,
                    compare,
                    slice,
                } => {
                    if let Some(r) = slice {
                        self.put_slice_back(r);
                    }
                    self.a
                        .alu_mi(Alu::Add, true, mem(CTX, offsets::FUEL_USED), cost);
                    self.jump(Target::Slot(compare));
                }
                Stub::CopyExit { slice, target } => {
                    self.put_slice_back(slice);
                    self.jump(Target::Slot(target));
                }
                Stub::BackEdge {
                    pc,
                    compare,
                    invert,
                    cost,
                    target,
                    back,
                } => self.back_edge_stub(pc, (compare, invert), cost, target, back)?,
                Stub::Miss {
                    pc,
                    size,
                    write,
                    back,
                    check,
                } => self.miss_stub(pc, size, write, back, check),
            }
        }
        Ok((stub_pos, to_mem_trap, to_set_trap))
    }

    /// A [`Stub::Miss`]: r11 back to the address, the miss routine called (r10 = pc and
    /// size), and r11 (and r10 for a global's check) made what the access at `back`
    /// expects.
    fn miss_stub(&mut self, pc: u32, size: u8, write: bool, back: usize, check: Check) {
        match check {
            Check::Cache => {
                self.a
                    .alu_rm(Alu::Sub, true, R11, mem(CTX, cache(write) + CACHE_NEG_LO));
            }
            Check::Stack | Check::Global => {}
        }
        self.a.mov_imm(R10, u64::from(pc) | u64::from(size) << 32);
        let at = self.a.call_rel32();
        self.fixups.push((at, Target::Miss(write), pc));
        // The routine left r11 = host address minus the cache's base.
        match check {
            Check::Cache => {}
            Check::Global if write => self.ctx_load(R10, CACHE_WRITE + CACHE_BASE),
            Check::Global => self.a.mov_rr(true, R10, READ_BASE),
            Check::Stack => {
                if write {
                    self.a
                        .alu_rm(Alu::Add, true, R11, mem(CTX, CACHE_WRITE + CACHE_BASE));
                } else {
                    self.a.alu_rr(Alu::Add, true, R11, READ_BASE);
                }
                self.a.alu_rm(Alu::Sub, true, R11, mem(CTX, STACK_DELTA));
            }
        }
        let at = self.a.jmp_rel32();
        self.a.patch_rel32(at, back);
    }

    /// Calls the refill routine for a charge at `pc`. r9 (the read cache's base) and r10
    /// (r10's value, read before a `callx`'s charge) are kept; r11 is free at a charge.
    fn call_refill(&mut self, pc: u32) {
        self.a.push(R10);
        self.a.push(R9);
        self.a.mov_imm(R10, u64::from(pc));
        let at = self.a.call_rel32();
        self.fixups.push((at, Target::Refill, pc));
        self.a.pop(R9);
        self.a.pop(R10);
    }

    /// Emits the refill routine and returns its position; its fuel and stop traps join
    /// `to_set_trap`. A stub calls it with r10 = pc after the charge left the slice
    /// short: the slice then holds `slice - cost` wrapped, so adding the reserve carries
    /// exactly when all the fuel left pays for the charge, and the sum is what is left
    /// after it. On a trap neither field changes (the fuel used, budget minus both,
    /// includes the charge) and the routine drops its return address and the stub's two
    /// saved registers before leaving through the trap path.
    fn emit_refill(&mut self, to_set_trap: &mut Vec<usize>) -> usize {
        let refill = self.a.pos();
        let a = &mut self.a;
        a.mov_rm(R11, mem(CTX, offsets::FUEL_USED));
        a.alu_rm(Alu::Add, true, R11, mem(CTX, offsets::FUEL_RESERVE));
        let to_fuel_trap = a.jcc_rel32(Cond::Ae);
        a.mov_rm(R9, mem(CTX, offsets::STOP));
        a.alu_mi(Alu::Cmp, false, mem(R9, 0), 0);
        let to_stop_trap = a.jcc_rel32(Cond::Ne);
        a.mov_imm(R9, rules::STOP_SLICE);
        a.alu_rr(Alu::Cmp, true, R11, R9);
        let full = a.jcc_rel32(Cond::Ae);
        a.mov_rr(true, R9, R11);
        a.bind_here(full);
        a.alu_rr(Alu::Sub, true, R11, R9);
        a.mov_mr(mem(CTX, offsets::FUEL_RESERVE), R11);
        a.mov_mr(mem(CTX, offsets::FUEL_USED), R9);
        a.ret();
        for (at, code) in [
            (to_fuel_trap, trap_code::FUEL),
            (to_stop_trap, trap_code::STOP),
        ] {
            a.bind_here(at);
            a.alu_ri(Alu::Add, true, RSP, 24);
            a.mov_imm(R9, code as u64);
            to_set_trap.push(a.jmp_rel32());
        }
        refill
    }

    /// Emits the miss routine of the read (`write` false) or write cache and returns its
    /// position; its trap joins `to_mem_trap`. A [`Stub::Miss`] calls it with r11 = the
    /// address and r10 = pc | size << 32. It checks the access exactly as
    /// `MemoryMap::translate` (index below `REGIONS_MAX`, `offset + size <= len`); on
    /// success it refills the cache with the region (unless shorter than
    /// [`CACHE_LEN_MIN`]) and returns r11 = host address minus the cache's base, which
    /// the access site adds back; the read routine sets r9 to the read cache's base, the
    /// write routine keeps r9.
    fn emit_miss(&mut self, write: bool, to_mem_trap: &mut Vec<usize>) -> usize {
        let c = cache(write);
        let len = if write {
            RegionEntry::OFFSET_WRITE_LEN
        } else {
            RegionEntry::OFFSET_READ_LEN
        };
        let routine = self.a.pos();
        let a = &mut self.a;
        // [rsp] the address, [rsp+8] pc | size << 32, [rsp+16] r9, [rsp+24] the return.
        a.push(R9);
        a.push(R10);
        a.push(R11);
        a.mov_rr(true, R10, R11);
        a.shift_ri(Shift::Shr, true, R10, 32);
        a.alu_ri(Alu::Cmp, true, R10, REGIONS_MAX as i32);
        let mut fail = vec![a.jcc_rel32(Cond::Ae)];
        a.shift_ri(Shift::Shl, false, R10, RegionEntry::SIZE_SHIFT as u8);
        a.alu_rm(Alu::Add, true, R10, mem(CTX, offsets::REGIONS));
        a.mov_rm(R9, mem(RSP, 8));
        a.shift_ri(Shift::Shr, true, R9, 32);
        a.mov_rr(false, R11, R11);
        a.alu_rr(Alu::Add, true, R11, R9);
        a.alu_rm(Alu::Cmp, true, R11, mem(R10, len));
        fail.push(a.jcc_rel32(Cond::A));
        // In bounds: r11 = host address.
        a.alu_rr(Alu::Sub, true, R11, R9);
        a.alu_rm(Alu::Add, true, R11, mem(R10, RegionEntry::OFFSET_BASE));
        a.mov_rm(R9, mem(R10, len));
        a.alu_ri(Alu::Cmp, true, R9, CACHE_LEN_MIN);
        let short = a.jcc_rel32(Cond::B);
        a.alu_ri(Alu::Sub, true, R9, CACHE_LEN_MIN);
        a.mov_mr(mem(CTX, c + CACHE_LIMIT), R9);
        a.mov_rm(R9, mem(R10, RegionEntry::OFFSET_BASE));
        a.mov_mr(mem(CTX, c + CACHE_BASE), R9);
        a.mov_rm(R9, mem(RSP, 0));
        a.shift_ri(Shift::Shr, true, R9, 32);
        a.shift_ri(Shift::Shl, true, R9, 32);
        a.unary(Unary::Neg, true, R9);
        a.mov_mr(mem(CTX, c + CACHE_NEG_LO), R9);
        a.bind_here(short);
        a.alu_rm(Alu::Sub, true, R11, mem(CTX, c + CACHE_BASE));
        a.alu_ri(Alu::Add, true, RSP, 16);
        a.pop(R9);
        if !write {
            // r9 is the read cache's base (the access adds it back).
            a.mov_rm(READ_BASE, mem(CTX, c + CACHE_BASE));
        }
        a.ret();
        // Out of bounds: the memory trap path takes r11 = address, r9 = size and write
        // flag, r10 = pc, with rsp as at the access.
        for at in fail {
            a.bind_here(at);
        }
        a.pop(R11);
        a.pop(R10);
        a.alu_ri(Alu::Add, true, RSP, 16);
        a.mov_rr(true, R9, R10);
        a.shift_ri(Shift::Shr, true, R9, 32);
        if write {
            a.bts(R9, TRAP_AUX_WRITE.trailing_zeros() as u8);
        }
        a.mov_rr(false, R10, R10);
        to_mem_trap.push(a.jmp_rel32());
        routine
    }

    /// Emits the trap paths and the two exits (trap unwind, normal exit) with their
    /// epilogues; returns the unwind's and the exit's positions.
    fn emit_exits(&mut self, to_mem_trap: Vec<usize>, to_set_trap: Vec<usize>) -> (usize, usize) {
        let a = &mut self.a;
        // Memory traps: r11 = address, r9 = size and write flag, r10 = pc.
        for at in to_mem_trap {
            a.bind_here(at);
        }
        a.mov_mr(mem(CTX, offsets::TRAP_ADDR), R11);
        a.mov_mr(mem(CTX, offsets::TRAP_AUX), R9);
        a.mov_imm(R9, trap_code::MEMORY as u64);
        // Other traps: r9 = code, r10 = pc.
        for at in to_set_trap {
            a.bind_here(at);
        }
        a.mov_mr(mem(CTX, offsets::TRAP_CODE), R9);
        a.mov_mr(mem(CTX, offsets::TRAP_PC), R10);
        let unwind = a.pos();
        self.at_entry_frame();
        let to_trap_epilogue = self.a.jcc_rel32(Cond::E);
        self.a.mov_imm(R11, 1);
        self.a.ret();
        let exit = self.a.pos();
        self.at_entry_frame();
        let to_ok_epilogue = self.a.jcc_rel32(Cond::E);
        self.a.alu_rr(Alu::Xor, false, R11, R11);
        self.a.ret();

        self.a.bind_here(to_ok_epilogue);
        self.a.mov_mr(mem(CTX, offsets::reg(0)), RAX);
        self.store_fuel_used();
        self.a.alu_rr(Alu::Xor, false, RAX, RAX);
        let to_restore = self.a.jmp_rel32();
        self.a.bind_here(to_trap_epilogue);
        self.store_fuel_used();
        self.a.mov_imm(RAX, crate::runtime::STATUS_TRAP);
        self.a.bind_here(to_restore);
        self.a.alu_ri(Alu::Add, true, RSP, 8);
        for r in Self::SAVED.iter().rev() {
            self.a.pop(*r);
        }
        self.a.ret();
        (unwind, exit)
    }

    /// Compares rsp with the entry frame's: equal in the entry frame. (Not rbp against
    /// the stack row: a helper that remapped the stack leaves the row changed while the
    /// run unwinds from its trap.)
    fn at_entry_frame(&mut self) {
        self.a.alu_rm(Alu::Cmp, true, RSP, mem(CTX, ENTRY_RSP));
    }
}

/// The atomic read-modify-write of an `atomic` instruction, called by compiled code with
/// the host address the bounds check produced. `op_size` is the instruction's `imm` in
/// its low 32 bits and the access size (4 or 8) above. Returns the old value,
/// zero-extended.
///
/// An aligned address uses a host atomic (sequentially consistent, as the interpreter);
/// an unaligned one (allowed by eBPF, never emitted by compilers) a plain
/// read-modify-write, as the interpreter does.
extern "C" fn atomic_callout(ptr: *mut u8, op_size: u64, value: u64, expected: u64) -> u64 {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
    let op = op_size as u32 as i32;
    let size = op_size >> 32;
    let new = |old: u64, value: u64, expected: u64| match op & !ATOMIC_FETCH {
        ATOMIC_ADD => old.wrapping_add(value),
        ATOMIC_OR => old | value,
        ATOMIC_AND => old & value,
        ATOMIC_XOR => old ^ value,
        _ if op == ATOMIC_XCHG => value,
        _ if old == expected => value,
        _ => old,
    };
    if size == 8 {
        if !ptr.cast::<u64>().is_aligned() {
            // SAFETY: compiled code passes an address its bounds check proved writable
            // (hence readable) for 8 bytes in a region mapped for this run; unaligned
            // accesses, as eBPF allows.
            unsafe {
                let old = ptr.cast::<u64>().read_unaligned();
                ptr.cast::<u64>().write_unaligned(new(old, value, expected));
                return old;
            }
        }
        // SAFETY: as above, and aligned for `AtomicU64` (checked); concurrent accessors
        // of shared regions use atomics or accept the race (`MemoryMap::map_raw`).
        let a = unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) };
        match op {
            ATOMIC_XCHG => a.swap(value, SeqCst),
            ATOMIC_CMPXCHG => match a.compare_exchange(expected, value, SeqCst, SeqCst) {
                Ok(old) | Err(old) => old,
            },
            _ => match op & !ATOMIC_FETCH {
                ATOMIC_ADD => a.fetch_add(value, SeqCst),
                ATOMIC_OR => a.fetch_or(value, SeqCst),
                ATOMIC_AND => a.fetch_and(value, SeqCst),
                _ => a.fetch_xor(value, SeqCst),
            },
        }
    } else {
        let (value, expected) = (value as u32, expected as u32);
        if !ptr.cast::<u32>().is_aligned() {
            // SAFETY: as for the 8-byte case, for 4 bytes.
            unsafe {
                let old = ptr.cast::<u32>().read_unaligned();
                let v = new(old.into(), value.into(), expected.into());
                ptr.cast::<u32>().write_unaligned(v as u32);
                return old.into();
            }
        }
        // SAFETY: as for the 8-byte case, with `AtomicU32`'s alignment checked.
        let a = unsafe { AtomicU32::from_ptr(ptr.cast::<u32>()) };
        let old = match op {
            ATOMIC_XCHG => a.swap(value, SeqCst),
            ATOMIC_CMPXCHG => match a.compare_exchange(expected, value, SeqCst, SeqCst) {
                Ok(old) | Err(old) => old,
            },
            _ => match op & !ATOMIC_FETCH {
                ATOMIC_ADD => a.fetch_add(value, SeqCst),
                ATOMIC_OR => a.fetch_or(value, SeqCst),
                ATOMIC_AND => a.fetch_and(value, SeqCst),
                _ => a.fetch_xor(value, SeqCst),
            },
        };
        old.into()
    }
}
