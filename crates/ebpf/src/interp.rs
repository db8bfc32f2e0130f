//! The reference interpreter: the semantics every other engine must match in value,
//! trap and fuel.
//!
//! [`Interpreter::new`] pre-decodes the verified program once into 16-byte [`Slot`]s, one
//! per instruction slot (so a slot index is still the pc traps report), with jump targets
//! resolved, `lddw` merged into its first slot and every opcode/operand-form combination
//! its own [`Kind`]: the one table of the interpreter's ops. It then fuses common short
//! sequences (clang's `lsh 32; rsh 32` extension idioms, `mov; add; ldx` indexing,
//! with `lsh 32; arsh 32` after it for signed 32-bit elements, `ldxw; lsh 32; arsh 32`,
//! `add; ldx`, `add; jcc` and `mov; jcc` loop latches, `[mov;] jeq +1; ja` exit tests,
//! `add; mov`, `add; add`, `ldx; mov`, `shift; mov`, `mov; mov`, bitwise CRC's
//! `and; neg; and`, `lsh; mov; add; ldx` scaled indexing, a hash's `xor; mul`; for cpu v3
//! code, whose copies are `mov32`, the same with `mov32` and `mov32; and32|add32|rsh32`,
//! `rsh; and` bit fields and `lddw; add[; ldx]` loads from a global table; a stack
//! array's element, `mov t, r10; add t, K; add t, i[; ldx|stx]`, read or written straight
//! in the stack's host memory; `add; mov|mov32|add; jlt` and `add reg; add; jlt` loop
//! latches, `mov32; and32; lsh` scaled masked indexes) into the first slot of each
//! ([`fuse`]). A load that [`known`] proves inside a global section on every path (a
//! table at a masked or shifted index, say) reads the section's host memory with no
//! check ([`decode_known`]). Runs that count executed blocks ([`crate::count`]) use
//! a second decoding whose fused ops stay inside one block, its leaders' slots marked.
//! [`Interpreter::run`] is then one `match` per instruction over that array, each arm
//! reading only the fields it uses, with no allocation after the run's stack.
//!
//! Semantics follow RFC 9669; the pitfalls other runtimes get wrong are called out where
//! they are handled. Fuel and call depth follow [`crate::engine`] through
//! [`crate::engine::rules`].
//!
//! Invariants: the interpreter trusts only what the verifier established (see
//! [`crate::verifier`]): targets in range, no fall-through past the end, no write to r10,
//! registers ≤ 10, direct helper ids known. Everything else (addresses, `callx` ids,
//! recursion, loops) is checked as it runs, and every fault is a [`Trap`] with its pc.
//!
//! Atomics: regions may be shared by concurrent runs (a device's shared state), so an
//! atomic instruction whose host address is naturally aligned uses a real host atomic
//! (sequentially consistent, as RFC 9669 §5.3's fetch variants are fully ordered). An
//! unaligned atomic, which eBPF does not forbid but no compiler emits, is performed as a
//! plain read-modify-write: correct for one run, not atomic against concurrent runs.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::count::{ExecCounts, NOT_A_LEADER};
use crate::engine::{rules, Engine, EngineRows, RunMemory, RunOptions, RunOutcome, StopFlag};
use crate::helper::{call_helper, FunctionTable, HelperHost};
use crate::isa::*;
use crate::limits::{CALL_DEPTH_MAX, STACK_FRAME_SIZE, STACK_SIZE};
use crate::memory::{read_host, write_host, MemoryMap, RegionIdx};
use crate::program::VerifiedProgram;
use crate::trap::{Trap, TrapKind};

mod known;
mod rare;

/// The interpreter for one verified program. Cheap to share across threads; every run
/// has its own registers, stack and writable globals.
pub struct Interpreter {
    program: Arc<VerifiedProgram>,
    ops: Box<[Slot]>,
    /// The program decoded for runs that count executed blocks, made on first use: fused
    /// only where a fused op stays inside one block ([`decode_program`] with leaders), so the
    /// dispatch loop reaches every leader slot it enters.
    counted_ops: OnceLock<Box<[Slot]>>,
}

impl fmt::Debug for Interpreter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interpreter")
            .field("program", &self.program.name())
            .field("slots", &self.ops.len())
            .finish()
    }
}

impl Interpreter {
    /// Pre-decodes `program`.
    pub fn new(program: Arc<VerifiedProgram>) -> Interpreter {
        let ops = decode_known(&program, None);
        Interpreter {
            program,
            ops,
            counted_ops: OnceLock::new(),
        }
    }

    /// The op each slot's dispatch runs (its kind's name) and how many instruction slots
    /// it stands for (more than one for a fused sequence), slot by slot: for tools that
    /// count which sequences a program runs fused and which it still dispatches one by
    /// one (`csx-bench`'s `fuse_profile` example).
    pub fn decoded_ops(&self) -> Vec<(String, usize)> {
        self.ops
            .iter()
            .map(|s| (format!("{:?}", s.kind), span(s.kind)))
            .collect()
    }

    /// `program` decoded one slot per instruction, without [`fuse`]: the reference the
    /// tests hold the fused form to.
    #[cfg(test)]
    fn unfused(program: Arc<VerifiedProgram>) -> Interpreter {
        let ops = decode_program(program.insns(), false, None);
        let leaders = program.blocks().block_table();
        let counted = decode_program(program.insns(), false, Some(leaders));
        Interpreter {
            program,
            ops,
            counted_ops: OnceLock::from(counted),
        }
    }
}

impl Engine for Interpreter {
    fn program(&self) -> &VerifiedProgram {
        &self.program
    }

    fn run(
        &self,
        mem: &mut MemoryMap<'_>,
        args: [u64; 5],
        opts: &RunOptions<'_>,
        host: &mut dyn HelperHost,
    ) -> RunOutcome {
        if let Some(counts) = opts.counts {
            return self.run_counted(mem, args, opts, counts, host);
        }
        let mut run_mem = RunMemory::new(&self.program);
        let stop = opts.stop.unwrap_or(StopFlag::never());
        run_mem.with_mapped(&self.program, mem, |mem, fp| {
            let start = Start {
                frame_pointer: fp,
                args,
                budget: opts.fuel,
                stop,
                counts: None,
            };
            self.execute::<false>(&self.ops, mem, host, start)
        })
    }
}

/// How a run of the dispatch loop starts: the frame pointer, r1-r5, the fuel, the stop
/// flag, and the block counters of a counted run.
#[derive(Clone, Copy)]
struct Start<'r> {
    frame_pointer: u64,
    args: [u64; 5],
    budget: u64,
    stop: &'r StopFlag,
    counts: Option<&'r ExecCounts>,
}

impl Interpreter {
    /// A run that counts executed blocks (`crate::count`): the unfused slots, with the
    /// dispatch loop bumping a block's counter whenever it reaches the block's leader.
    /// Kept out of line so the uncounted loop in [`Engine::run`] is compiled as before.
    #[inline(never)]
    fn run_counted(
        &self,
        mem: &mut MemoryMap<'_>,
        args: [u64; 5],
        opts: &RunOptions<'_>,
        counts: &ExecCounts,
        host: &mut dyn HelperHost,
    ) -> RunOutcome {
        assert_eq!(
            counts.len(),
            self.program.blocks().len(),
            "one counter per block of the program"
        );
        let ops = self.counted_ops.get_or_init(|| {
            let leaders = self.program.blocks().block_table();
            decode_known(&self.program, Some(leaders))
        });
        let mut run_mem = RunMemory::new(&self.program);
        let stop = opts.stop.unwrap_or(StopFlag::never());
        run_mem.with_mapped(&self.program, mem, |mem, fp| {
            let start = Start {
                frame_pointer: fp,
                args,
                budget: opts.fuel,
                stop,
                counts: Some(counts),
            };
            self.execute::<true>(ops, mem, host, start)
        })
    }
}

/// Atomic read-modify-write operations (RFC 9669 §5.3, Table 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum AtomicOp {
    Add,
    Or,
    And,
    Xor,
    FetchAdd,
    FetchOr,
    FetchAnd,
    FetchXor,
    Xchg,
    CmpXchg,
}

impl AtomicOp {
    /// Every operation, in discriminant order.
    const ALL: [AtomicOp; 10] = [
        AtomicOp::Add,
        AtomicOp::Or,
        AtomicOp::And,
        AtomicOp::Xor,
        AtomicOp::FetchAdd,
        AtomicOp::FetchOr,
        AtomicOp::FetchAnd,
        AtomicOp::FetchXor,
        AtomicOp::Xchg,
        AtomicOp::CmpXchg,
    ];

    /// The operation whose discriminant is `n` (as stored in a [`Slot`]).
    fn from_u8(n: u8) -> AtomicOp {
        AtomicOp::ALL[usize::from(n)]
    }
}

/// Every operation the dispatch loop knows: the interpreter's one table of ops. Each
/// kind is one opcode/operand-form combination (or a fused sequence, see [`fuse`]);
/// [`decode`] maps an instruction to its kind, and the `match` in
/// [`Interpreter::execute`] gives each kind its meaning. Operands live in the [`Slot`]:
///
/// - `...I` kinds use `dst` and `imm` (sign-extended; 32-bit kinds use its low half);
/// - `...R` kinds use `dst` and `src`;
/// - loads use `dst`, `src`, `off`; `St*` use `dst`, `off`, `imm`; `Stx*` and atomics use
///   `dst`, `src`, `off` (atomics keep their [`AtomicOp`] in `aux`);
/// - jumps add `target`, a resolved slot index; `CallHelper` keeps the helper id in
///   `target`, `CallX` its register in `dst`; `Lddw` keeps the high half in `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    // ALU64 with an immediate operand.
    Add64I,
    Sub64I,
    Mul64I,
    Div64I,
    SDiv64I,
    Mod64I,
    SMod64I,
    Or64I,
    And64I,
    Lsh64I,
    Rsh64I,
    Arsh64I,
    Xor64I,
    Mov64I,
    Neg64,
    // ALU64 with a register operand.
    Add64R,
    Sub64R,
    Mul64R,
    Div64R,
    SDiv64R,
    Mod64R,
    SMod64R,
    Or64R,
    And64R,
    Lsh64R,
    Rsh64R,
    Arsh64R,
    Xor64R,
    Mov64R,
    MovSx8To64,
    MovSx16To64,
    MovSx32To64,
    // ALU (32-bit) with an immediate operand; results are zero-extended.
    Add32I,
    Sub32I,
    Mul32I,
    Div32I,
    SDiv32I,
    Mod32I,
    SMod32I,
    Or32I,
    And32I,
    Lsh32I,
    Rsh32I,
    Arsh32I,
    Xor32I,
    Mov32I,
    Neg32,
    // ALU (32-bit) with a register operand.
    Add32R,
    Sub32R,
    Mul32R,
    Div32R,
    SDiv32R,
    Mod32R,
    SMod32R,
    Or32R,
    And32R,
    Lsh32R,
    Rsh32R,
    Arsh32R,
    Xor32R,
    Mov32R,
    MovSx8To32,
    MovSx16To32,
    // Byte order (RFC 9669 §4.2). The VM is little-endian, so `le` only truncates and
    // `be` and `bswap` swap (and truncate).
    Trunc16,
    Trunc32,
    Swap16,
    Swap32,
    Swap64,
    Nop,
    // Loads and stores (RFC 9669 §5).
    Lddw,
    LdxB,
    LdxH,
    LdxW,
    LdxDw,
    LdxSB,
    LdxSH,
    LdxSW,
    StB,
    StH,
    StW,
    StDw,
    StxB,
    StxH,
    StxW,
    StxDw,
    Atomic32,
    Atomic64,
    // Jumps (RFC 9669 §4.3).
    Ja,
    Jeq64I,
    Jne64I,
    Jgt64I,
    Jge64I,
    Jlt64I,
    Jle64I,
    Jsgt64I,
    Jsge64I,
    Jslt64I,
    Jsle64I,
    Jset64I,
    Jeq64R,
    Jne64R,
    Jgt64R,
    Jge64R,
    Jlt64R,
    Jle64R,
    Jsgt64R,
    Jsge64R,
    Jslt64R,
    Jsle64R,
    Jset64R,
    Jeq32I,
    Jne32I,
    Jgt32I,
    Jge32I,
    Jlt32I,
    Jle32I,
    Jsgt32I,
    Jsge32I,
    Jslt32I,
    Jsle32I,
    Jset32I,
    Jeq32R,
    Jne32R,
    Jgt32R,
    Jge32R,
    Jlt32R,
    Jle32R,
    Jsgt32R,
    Jsge32R,
    Jslt32R,
    Jsle32R,
    Jset32R,
    // Calls (RFC 9669 §4.3.1).
    CallHelper,
    CallLocal,
    CallX,
    Exit,
    // Fused sequences (see [`fuse`]): each stands for the ops of its own slot and of the
    // next one to four, which keep their own kinds for the jumps that land on them.
    /// `mov dst, src; lsh dst, 32; arsh dst, 32` (clang's sign-extension idiom; the
    /// `mov` may be a `mov32`, whose result is the same).
    MovSx32x3,
    /// `lsh dst, 32; rsh dst, 32`.
    Zx32x2,
    /// `lsh dst, 32; arsh dst, 32`.
    Sx32x2,
    /// `mov dst, src; add dst, aux`.
    MovAdd,
    /// `mov aux2, src; add aux2, aux; ldx<size> dst, [aux2 + off]`: an indexed load.
    MovAddLdxB,
    MovAddLdxW,
    MovAddLdxDw,
    /// `mov aux2, src; add aux2, aux; ldxw dst, [aux2 + off]; lsh dst, 32; arsh dst, 32`:
    /// an indexed load of a signed 32-bit element (clang's `(i64)int_array[i]`).
    MovAddLdxSW,
    /// `mov dst, src; jeq aux, imm, +1; ja target` (a loop's exit test and back-edge
    /// after a copy; fuel and traps are the `ja`'s).
    MovJeqIJa,
    /// `mov dst, src; mov aux, aux2`.
    MovMov,
    /// `add dst, imm; jlt src, aux, target` (64-bit, registers): a loop latch.
    AddJltR,
    /// `add dst, imm; mov aux, aux2`.
    AddIMov,
    /// `add dst, imm; mov32 aux, aux2`.
    AddIMov32,
    /// `add dst, imm; add aux, target` (the second immediate kept in `target`).
    AddIAddI,
    /// `add dst, src; add aux, target` (the immediate kept in `target`).
    AddRAddI,
    /// `mov dst, src; jlt aux, aux2, target` (64-bit, registers).
    MovJltR,
    /// `mov dst, src; j<cmp> aux, imm, target` (64-bit, equality).
    MovJeqI,
    MovJneI,
    /// `mov dst, src; ja target`.
    MovJa,
    /// `mov32 dst, src; jlt aux, aux2, target` (64-bit, registers): a loop latch
    /// after a 32-bit copy.
    Mov32JltR,
    /// `mov32 dst, src; jeq aux, imm, +1; ja target`.
    Mov32JeqIJa,
    /// `mov32 dst, src; ja target`.
    Mov32Ja,
    /// `jeq dst, imm, +1; ja target`: a loop's exit test and back-edge, as one
    /// inverted test (`target` is the `ja`'s; fuel and traps are the `ja`'s).
    JeqIJa,
    /// `jne dst, imm, +1; ja target`.
    JneIJa,
    /// `mov dst, src; add dst, imm`.
    MovAddI,
    /// `add aux, src; ldx<size> dst, [aux + off]`.
    AddRLdxB,
    AddRLdxW,
    AddRLdxDw,
    /// `and32 dst, imm; neg32 dst; and32 dst, imm2` (a mask from one bit: bitwise
    /// CRC; `imm2` kept in `target`).
    AndNegAnd32I,
    /// `ldx<size> dst, [src + off]; mov aux, aux2`.
    LdxBMov,
    LdxWMov,
    /// `<shift> dst, imm; mov aux, aux2`.
    LshIMov,
    RshIMov,
    /// `lsh aux, imm; mov aux2, src; add aux2, target; ldx<size> dst, [aux2 + off]`: a
    /// scaled indexed load (`target` is the `add`'s source register).
    LshMovAddLdxH,
    LshMovAddLdxW,
    LshMovAddLdxDw,
    /// `xor dst, src; mul dst, aux` (a multiplicative hash's step).
    XorMul,
    /// `ldxw dst, [src + off]; mov32 aux, aux2`.
    LdxWMov32,
    /// `mov32 dst, src; and32 dst, imm`: a masked copy.
    Mov32AndI,
    /// `mov32 dst, src; add32 dst, imm`.
    Mov32AddI,
    /// `mov32 dst, src; rsh32 dst, imm`.
    Mov32RshI,
    /// `rsh dst, imm; and dst, imm2` (a bit field; `imm2` kept in `target`).
    RshIAndI,
    /// `lddw dst, imm/target; add dst, src`: an address inside a global, such as a
    /// table's entry.
    LddwAdd,
    /// `lddw aux2, imm/target; add aux2, aux; ldx<size> dst, [aux2 + off]`: a load from
    /// a global table at an index.
    LddwAddLdxB,
    LddwAddLdxH,
    LddwAddLdxW,
    LddwAddLdxDw,
    /// `add dst, imm; mov aux, aux2; jlt x, y, target` (a loop latch after a copy; `x`
    /// and `y` packed in `src`, `x` in its low four bits).
    AddIMovJltR,
    /// `add dst, imm; mov32 aux, aux2; jlt x, y, target`, likewise.
    AddIMov32JltR,
    /// `add dst, src; add aux, imm; jlt x, y, target` (a latch after an accumulation;
    /// `x` and `y` packed in `aux2`, `x` in its low four bits).
    AddRAddIJltR,
    /// `mov32 dst, src; and32 dst, off; lsh dst, aux2; lddw aux, imm/target; add aux,
    /// dst`: a masked index, scaled, and the address of a table's entry at it.
    Mov32AndILshLddwAdd,
    /// `rsh x, aux2; and x, imm; lddw t, T; add t, x; ldxw dst, [t + off]`, the
    /// load proven inside global section `n` ([`known`]): `x` and `t` packed in `aux`
    /// (`x` in its low four bits), `src` the host address's entry (`GLOBAL_HOST + n`)
    /// and `target` T's offset in the section.
    RshAndLddwAddLdxGlobalW,
    /// `mov32 dst, src; and32 dst, imm; lsh dst, aux` (a masked index, scaled).
    Mov32AndILsh,
    /// `add dst, imm; add aux, off; jlt x, y, target` (a latch stepping two registers;
    /// the second immediate, which fits 16 bits, kept in `off`).
    AddIAddIJltR,
    /// `mov dst, src; add dst, imm; add dst, aux` (`aux` not `dst`): a base, a constant
    /// offset and an index, such as a stack array's element address.
    MovAddIAddR,
    /// `mov aux2, r10; add aux2, imm; add aux2, aux; ldx<size> dst, [aux2 + off]`: a load
    /// from a stack array at an index ([`fp_index`]); an address inside the stack is read
    /// straight from its host memory, any other takes the checked path.
    FpIdxLdxB,
    FpIdxLdxH,
    FpIdxLdxW,
    FpIdxLdxDw,
    /// `mov aux2, r10; add aux2, imm; add aux2, aux; stx<size> [aux2 + off], src`: a store
    /// into a stack array at an index, likewise.
    FpIdxStxB,
    FpIdxStxW,
    FpIdxStxDw,
    // Stack accesses at `r10 + off` proven in range when decoded ([`frame_access`]):
    // they index the current frame's host memory directly, with no region lookup.
    /// `ldx<size> dst, [r10 + off]`.
    LdxFpB,
    LdxFpH,
    LdxFpW,
    LdxFpDw,
    /// `stx<size> [r10 + off], src`.
    StxFpB,
    StxFpH,
    StxFpW,
    StxFpDw,
    /// `st<size> [r10 + off], imm`.
    StFpB,
    StFpH,
    StFpW,
    StFpDw,
    // Loads proven inside a global section when decoded ([`known`]): they read the
    // section's host memory directly, its address in the register file's entry
    // `GLOBAL_HOST + n` for section `n`.
    /// `ldx<size> dst, [src + off]` (the host address's entry in `aux`).
    LdxGlobalB,
    LdxGlobalH,
    LdxGlobalW,
    LdxGlobalDw,
    /// `lddw aux2, imm/target; add aux2, aux; ldx<size> dst, [aux2 + off]` (the host
    /// address's entry in `src`).
    LddwAddLdxGlobalB,
    LddwAddLdxGlobalH,
    LddwAddLdxGlobalW,
    LddwAddLdxGlobalDw,
    /// The second slot of an `lddw`, or anything the verifier would have rejected:
    /// never executed.
    Invalid,
}

/// One pre-decoded instruction in the uniform layout the dispatch loop reads. Every
/// field sits at the same offset whatever the kind, so the loop's field loads are shared
/// by all arms instead of being extracted per variant layout (which cost several
/// instructions per dispatch). Which fields a kind uses is listed at [`Kind`].
///
/// `dst`, `src`, `aux` and `aux2` are register numbers (≤ 10, verified; or, in `aux` of
/// an atomic, the [`AtomicOp`]); `imm` is the immediate, sign-extended when used;
/// `target` is a resolved slot index, a helper id or the high half of an `lddw`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Slot {
    kind: Kind,
    dst: u8,
    src: u8,
    aux: u8,
    aux2: u8,
    /// 1 on a block leader's slot in the decoding for counted runs ([`decode_program`] with leaders),
    /// else 0 (this byte would otherwise be padding).
    lead: u8,
    off: i16,
    target: u32,
    imm: i32,
}

impl Slot {
    /// The immediate, sign-extended to 64 bits (32-bit operations use its low half).
    #[inline(always)]
    fn imm64(&self) -> u64 {
        i64::from(self.imm) as u64
    }

    /// The 64-bit value of an `lddw` slot (or a fused op that starts with one): `imm`
    /// the low half, `target` the high half.
    #[inline(always)]
    fn lddw_value(&self) -> u64 {
        u64::from(self.imm as u32) | (u64::from(self.target) << 32)
    }

    const EMPTY: Slot = Slot {
        kind: Kind::Invalid,
        dst: 0,
        src: 0,
        aux: 0,
        aux2: 0,
        lead: 0,
        off: 0,
        target: 0,
        imm: 0,
    };

    /// A slot of `kind` with every operand of `insn` (each kind reads the ones it uses).
    fn of(kind: Kind, insn: Insn) -> Slot {
        Slot {
            kind,
            dst: insn.dst,
            src: insn.src,
            off: insn.off,
            imm: insn.imm,
            ..Slot::EMPTY
        }
    }
}

// Keep the hot array dense: 16 bytes, four slots per cache line.
const _: () = assert!(std::mem::size_of::<Slot>() == 16);

/// Decodes every slot, fused by [`fuse`] if `fused`. With `leaders` (the program's
/// [`crate::count::BlockMap::block_table`], for runs that count executed blocks) only
/// sequences that enter no block leader after their first slot are fused, and each
/// leader's slot is marked ([`Slot::lead`]). `lddw` is merged into its first slot and its second becomes
/// [`Kind::Invalid`], so slot indices (and so trap pcs and fuel) are unchanged.
fn decode_program(insns: &[Insn], fused: bool, leaders: Option<&[u32]>) -> Box<[Slot]> {
    let mut slots = Vec::with_capacity(insns.len());
    let mut pc = 0;
    while pc < insns.len() {
        let insn = insns[pc];
        if insn.opc == OP_LDDW {
            // The verifier checked the second slot exists.
            let high = insns.get(pc + 1).map_or(0, |t| t.imm as u32);
            slots.push(Slot {
                target: high,
                ..Slot::of(Kind::Lddw, insn)
            });
            slots.push(Slot::EMPTY);
            pc += 2;
        } else {
            slots.push(decode(insn, pc));
            pc += 1;
        }
    }
    slots.truncate(insns.len());
    if fused {
        fuse(&mut slots, leaders);
        for slot in &mut slots {
            slot.kind = frame_access(*slot);
        }
    }
    for (slot, &b) in slots.iter_mut().zip(leaders.unwrap_or_default()) {
        slot.lead = u8::from(b != NOT_A_LEADER);
    }
    slots.into_boxed_slice()
}

/// The fused decoding of `program` ([`decode_program`], with `leaders` for counted
/// runs), where every load [`known::proven_loads`] proves inside a global section reads
/// it unchecked: a plain load, or the load of an `lddw; add; ldx` table access.
fn decode_known(program: &VerifiedProgram, leaders: Option<&[u32]>) -> Box<[Slot]> {
    use Kind::*;
    let insns = program.insns();
    let mut slots = decode_program(insns, true, leaders);
    let plain = decode_program(insns, false, None);
    let proven = known::proven_loads(&plain, program.globals(), program.blocks().block_table());
    for (i, slot) in slots.iter_mut().enumerate() {
        // The register file's entry of section `n`'s host address, for `proven[i] = n + 1`.
        let host = |k: usize| match proven.get(i + k) {
            Some(&n) if n > 0 => Some((GLOBAL_HOST + usize::from(n) - 1) as u8),
            _ => None,
        };
        let (kind, entry) = match slot.kind {
            LdxB => (LdxGlobalB, host(0)),
            LdxH => (LdxGlobalH, host(0)),
            LdxW => (LdxGlobalW, host(0)),
            LdxDw => (LdxGlobalDw, host(0)),
            LddwAddLdxB => (LddwAddLdxGlobalB, host(3)),
            LddwAddLdxH => (LddwAddLdxGlobalH, host(3)),
            LddwAddLdxW => (LddwAddLdxGlobalW, host(3)),
            LddwAddLdxDw => (LddwAddLdxGlobalDw, host(3)),
            _ => continue,
        };
        let Some(entry) = entry else { continue };
        *slot = match kind {
            LdxGlobalB | LdxGlobalH | LdxGlobalW | LdxGlobalDw => Slot {
                kind,
                aux: entry,
                ..*slot
            },
            _ => Slot {
                kind,
                src: entry,
                ..*slot
            },
        };
    }
    for i in 0..slots.len() {
        let Some(fused) = rsh_and_table_load(slots[i], slots.get(i + 2).copied()) else {
            continue;
        };
        if leaders.is_none_or(|table| stays_in_block(i, fused.kind, table)) {
            slots[i] = fused;
        }
    }
    slots
}

/// The `RshAndLddwAddLdxGlobal...` op for a `rsh x, k; and x, m` op `a` followed by a
/// proven table load `b` (`lddw t, T; add t, x; ldx`, `t` not `x`), if they are that.
fn rsh_and_table_load(a: Slot, b: Option<Slot>) -> Option<Slot> {
    use Kind::*;
    let b = b?;
    let kind = match b.kind {
        LddwAddLdxGlobalW => RshAndLddwAddLdxGlobalW,
        _ => return None,
    };
    // `b`: `aux` the added index, `aux2` the address register.
    if a.kind != RshIAndI || b.aux != a.dst || b.aux2 == a.dst || a.imm < 0 || a.imm > 63 {
        return None;
    }
    // The proof made the table's address an offset in the section its entry names;
    // the op rebuilds the address from the two.
    let section = u32::from(b.src) - GLOBAL_HOST as u32;
    if b.target != RegionIdx::GLOBALS_FIRST.0 + section {
        return None;
    }
    Some(Slot {
        kind,
        dst: b.dst,
        src: b.src,
        aux: a.dst | (b.aux2 << 4),
        aux2: a.imm as u8,
        off: b.off,
        imm: a.target as i32,
        target: b.imm as u32,
        ..Slot::EMPTY
    })
}

/// Replaces the first slot of each common sequence of two to five ops with one fused op
/// that runs them all. Only the first slot changes: a jump to a later slot of the
/// sequence still runs that slot's own op, so behaviour is the same on every path.
/// A fused sequence contains no call, and a jump only as its last op: the fused op
/// advances `pc` to the jump's successor before it jumps, so the fuel charge and any
/// fuel or stop trap are the jump's own, at its pc. A fused load reports its own slot's
/// pc if it traps. The sequences were picked by counting, over all `csx bench vm`
/// kernels, which adjacent pairs and triples run most (each kernel weighted equally;
/// `cargo run -p csx-ebpf --example fuse_profile` counts them on the kernels that
/// csx-bench's `kernel_dump` example writes, compiled at `-mcpu=v3`); the test
/// `fused_and_unfused_agree` and the tests of `fused_tests` hold every one to the
/// unfused decoding.
// One match over the fused sequences, a table read top to bottom: split, the
// sequences and their guards would be apart.
#[allow(clippy::too_many_lines)]
fn fuse(slots: &mut [Slot], leaders: Option<&[u32]>) {
    use Kind::*;
    for i in 0..slots.len() {
        let at = |k: usize| slots.get(i + k).copied().unwrap_or(Slot::EMPTY);
        let (a, b, c) = (at(0), at(1), at(2));
        let shift32 = |s: Slot, kind: Kind| s.kind == kind && s.imm == 32 && s.dst == a.dst;
        let fused = match (a.kind, b.kind) {
            // `mov32` keeps the low half too, so it extends the same way.
            (Mov64R | Mov32R, Lsh64I) if shift32(b, Lsh64I) && shift32(c, Arsh64I) => Slot {
                kind: MovSx32x3,
                ..a
            },
            (Mov64R, Add64R) if b.dst == a.dst => {
                // `a.dst` is the temporary, `a.src + b.src` the address.
                let indexed = match c.kind {
                    LdxB => Some(MovAddLdxB),
                    LdxW => Some(MovAddLdxW),
                    LdxDw => Some(MovAddLdxDw),
                    _ => None,
                };
                let d = at(3);
                let e = at(4);
                let sx = c.kind == LdxW
                    && d.kind == Lsh64I
                    && d.dst == c.dst
                    && d.imm == 32
                    && e.kind == Arsh64I
                    && e.dst == c.dst
                    && e.imm == 32;
                let indexed = if sx { Some(MovAddLdxSW) } else { indexed };
                match indexed {
                    Some(kind) if c.src == a.dst => Slot {
                        kind,
                        dst: c.dst,
                        src: a.src,
                        // `add t, t` after `mov t, src` adds `src` to itself: the handler
                        // reads both operands before writing the temporary.
                        aux: if b.src == a.dst { a.src } else { b.src },
                        aux2: a.dst,
                        off: c.off,
                        ..Slot::EMPTY
                    },
                    _ => Slot {
                        kind: MovAdd,
                        dst: a.dst,
                        src: a.src,
                        aux: b.src,
                        ..Slot::EMPTY
                    },
                }
            }
            (Mov64R, Add64I) if b.dst == a.dst && fp_index(a, b, c, at(3)).is_some() => {
                fp_index(a, b, c, at(3)).unwrap_or(Slot::EMPTY)
            }
            (Mov64R, Add64I) if b.dst == a.dst => Slot {
                kind: MovAddI,
                imm: b.imm,
                ..a
            },
            (Add64R, LdxB | LdxW | LdxDw) if b.src == a.dst => Slot {
                kind: match b.kind {
                    LdxB => AddRLdxB,
                    LdxW => AddRLdxW,
                    _ => AddRLdxDw,
                },
                dst: b.dst,
                src: a.src,
                aux: a.dst,
                off: b.off,
                ..Slot::EMPTY
            },
            (And32I, Neg32) if b.dst == a.dst && c.kind == And32I && c.dst == a.dst => Slot {
                kind: AndNegAnd32I,
                target: c.imm as u32,
                ..a
            },
            (LdxB | LdxW, Mov64R) => Slot {
                kind: if a.kind == LdxB { LdxBMov } else { LdxWMov },
                aux: b.dst,
                aux2: b.src,
                ..a
            },
            (Lsh64I, Mov64R)
                if c.kind == Add64R
                    && c.dst == b.dst
                    && at(3).src == b.dst
                    && matches!(at(3).kind, LdxH | LdxW | LdxDw) =>
            {
                let d = at(3);
                Slot {
                    kind: match d.kind {
                        LdxH => LshMovAddLdxH,
                        LdxW => LshMovAddLdxW,
                        _ => LshMovAddLdxDw,
                    },
                    dst: d.dst,
                    src: b.src,
                    aux: a.dst,
                    aux2: b.dst,
                    off: d.off,
                    target: u32::from(c.src),
                    imm: a.imm,
                    ..Slot::EMPTY
                }
            }
            (LdxW, Mov32R) => Slot {
                kind: LdxWMov32,
                aux: b.dst,
                aux2: b.src,
                ..a
            },
            (Mov32R, And32I) if table_index(a, b, c, at(3), at(5)) => Slot {
                kind: Mov32AndILshLddwAdd,
                aux: at(3).dst,
                aux2: (c.imm & 63) as u8,
                off: b.imm as i16,
                imm: at(3).imm,
                target: at(3).target,
                ..a
            },
            (Mov32R, And32I) if b.dst == a.dst && c.kind == Lsh64I && c.dst == a.dst => Slot {
                kind: Mov32AndILsh,
                imm: b.imm,
                aux: (c.imm & 63) as u8,
                ..a
            },
            (Mov32R, And32I | Add32I | Rsh32I) if b.dst == a.dst => Slot {
                kind: match b.kind {
                    And32I => Mov32AndI,
                    Add32I => Mov32AddI,
                    _ => Mov32RshI,
                },
                imm: b.imm,
                ..a
            },
            (Rsh64I, And64I) if b.dst == a.dst => Slot {
                kind: RshIAndI,
                target: b.imm as u32,
                ..a
            },
            // `lddw a, K; add a, b; [ldx<size> d, [a + off]]`: a table's address, and the
            // load from it (the `lddw` takes two slots: `b` is its second).
            (Lddw, _) if c.kind == Add64R && c.dst == a.dst && c.src != a.dst => {
                let d = at(3);
                let load = match d.kind {
                    _ if d.src != a.dst => None,
                    LdxB => Some(LddwAddLdxB),
                    LdxH => Some(LddwAddLdxH),
                    LdxW => Some(LddwAddLdxW),
                    LdxDw => Some(LddwAddLdxDw),
                    _ => None,
                };
                match load {
                    Some(kind) => Slot {
                        kind,
                        dst: d.dst,
                        aux: c.src,
                        aux2: a.dst,
                        off: d.off,
                        ..a
                    },
                    None => Slot {
                        kind: LddwAdd,
                        src: c.src,
                        ..a
                    },
                }
            }
            (Xor64R, Mul64R) if b.dst == a.dst => Slot {
                kind: XorMul,
                aux: b.src,
                ..a
            },
            // Unless the `mov` starts an indexed address ([`fp_index`]), which saves more.
            (Lsh64I | Rsh64I, Mov64R) if fp_index(b, c, at(3), at(4)).is_none() => Slot {
                kind: if a.kind == Lsh64I { LshIMov } else { RshIMov },
                aux: b.dst,
                aux2: b.src,
                ..a
            },
            (Mov64R | Mov32R, Jlt64R) => Slot {
                kind: if a.kind == Mov32R { Mov32JltR } else { MovJltR },
                dst: a.dst,
                src: a.src,
                aux: b.dst,
                aux2: b.src,
                target: b.target,
                ..Slot::EMPTY
            },
            // `mov; j<eq|ne> +1; ja`.
            (Mov64R | Mov32R, Jeq64I) if b.target as usize == i + 3 && c.kind == Ja => Slot {
                kind: if a.kind == Mov32R {
                    Mov32JeqIJa
                } else {
                    MovJeqIJa
                },
                dst: a.dst,
                src: a.src,
                aux: b.dst,
                imm: b.imm,
                target: c.target,
                ..Slot::EMPTY
            },
            (Mov64R, Jeq64I | Jne64I) => Slot {
                kind: if b.kind == Jeq64I { MovJeqI } else { MovJneI },
                dst: a.dst,
                src: a.src,
                aux: b.dst,
                imm: b.imm,
                target: b.target,
                ..Slot::EMPTY
            },
            (Mov64R | Mov32R, Ja) => Slot {
                kind: if a.kind == Mov32R { Mov32Ja } else { MovJa },
                target: b.target,
                ..a
            },
            // `j<eq|ne> +1` over a `ja`.
            (Jeq64I | Jne64I, Ja) if a.target as usize == i + 2 => Slot {
                kind: if a.kind == Jeq64I { JeqIJa } else { JneIJa },
                target: b.target,
                ..a
            },
            // Unless the second `mov` starts a longer sequence of its own.
            (Mov64R, Mov64R)
                if !matches!(c.kind, Lsh64I | Add64R) && fp_index(b, c, at(3), at(4)).is_none() =>
            {
                Slot {
                    kind: MovMov,
                    dst: a.dst,
                    src: a.src,
                    aux: b.dst,
                    aux2: b.src,
                    ..Slot::EMPTY
                }
            }
            (Add64I, Mov64R | Mov32R | Add64I)
                if c.kind == Jlt64R && (b.kind != Add64I || i16::try_from(b.imm).is_ok()) =>
            {
                Slot {
                    kind: match b.kind {
                        Mov64R => AddIMovJltR,
                        Mov32R => AddIMov32JltR,
                        _ => AddIAddIJltR,
                    },
                    src: c.dst | (c.src << 4),
                    aux: b.dst,
                    aux2: b.src,
                    off: i16::try_from(b.imm).unwrap_or(0),
                    target: c.target,
                    ..a
                }
            }
            (Add64I, jump) => {
                let kind = match jump {
                    Jlt64R => AddJltR,
                    Mov64R => AddIMov,
                    Mov32R => AddIMov32,
                    Add64I => AddIAddI,
                    _ => continue,
                };
                match kind {
                    AddIMov | AddIMov32 => Slot {
                        kind,
                        aux: b.dst,
                        aux2: b.src,
                        ..a
                    },
                    AddIAddI => Slot {
                        kind,
                        aux: b.dst,
                        target: b.imm as u32,
                        ..a
                    },
                    _ => Slot {
                        kind,
                        dst: a.dst,
                        imm: a.imm,
                        src: b.dst,
                        aux: b.src,
                        target: b.target,
                        ..Slot::EMPTY
                    },
                }
            }
            (Add64R, Add64I) if c.kind == Jlt64R => Slot {
                kind: AddRAddIJltR,
                aux: b.dst,
                aux2: c.dst | (c.src << 4),
                imm: b.imm,
                target: c.target,
                ..a
            },
            (Add64R, Add64I) => Slot {
                kind: AddRAddI,
                aux: b.dst,
                target: b.imm as u32,
                ..a
            },
            (Lsh64I, _) if a.imm == 32 && shift32(b, Rsh64I) => Slot { kind: Zx32x2, ..a },
            (Lsh64I, _) if a.imm == 32 && shift32(b, Arsh64I) => Slot { kind: Sx32x2, ..a },
            _ => continue,
        };
        if let Some(table) = leaders {
            if !stays_in_block(i, fused.kind, table) {
                continue;
            }
        }
        slots[i] = fused;
    }
}

/// Whether `a`-`e` (slots `i`, `i + 1`, `i + 2`, `i + 3` and `i + 5`) are `mov32 x, y;
/// and32 x, m; lsh x, k; lddw t, T; add t, x` with `m` fitting 16 bits and `t` not `x`:
/// a masked index, scaled, added to a table's address ([`Kind::Mov32AndILshLddwAdd`]).
fn table_index(a: Slot, b: Slot, c: Slot, d: Slot, e: Slot) -> bool {
    use Kind::*;
    let x = a.dst;
    a.kind == Mov32R
        && b.kind == And32I
        && b.dst == x
        && i16::try_from(b.imm).is_ok()
        && c.kind == Lsh64I
        && c.dst == x
        && d.kind == Lddw
        && d.dst != x
        && e.kind == Add64R
        && e.dst == d.dst
        && e.src == x
}

/// The fused op for `mov t, base; add t, imm; add t, index` (slots `a`, `b`, `c`) and,
/// when `base` is r10 and `d` loads or stores at `t + off`, that access too: a stack
/// array's element ([`Kind::FpIdxLdxB`] ...). `None` when the slots are not that shape,
/// or `index` is `t` (the third op would then double `t`).
fn fp_index(a: Slot, b: Slot, c: Slot, d: Slot) -> Option<Slot> {
    use Kind::*;
    let t = a.dst;
    if a.kind != Mov64R || b.kind != Add64I || b.dst != t {
        return None;
    }
    if c.kind != Add64R || c.dst != t || c.src == t {
        return None;
    }
    let access = match d.kind {
        _ if a.src != REG_FP => None,
        LdxB if d.src == t => Some(FpIdxLdxB),
        LdxH if d.src == t => Some(FpIdxLdxH),
        LdxW if d.src == t => Some(FpIdxLdxW),
        LdxDw if d.src == t => Some(FpIdxLdxDw),
        StxB if d.dst == t => Some(FpIdxStxB),
        StxW if d.dst == t => Some(FpIdxStxW),
        StxDw if d.dst == t => Some(FpIdxStxDw),
        _ => None,
    };
    Some(match access {
        // A load's `dst` is the loaded register, a store's `src` the stored one.
        Some(kind) => Slot {
            kind,
            dst: d.dst,
            src: d.src,
            aux: c.src,
            aux2: t,
            off: d.off,
            imm: b.imm,
            ..Slot::EMPTY
        },
        None => Slot {
            kind: MovAddIAddR,
            dst: t,
            src: a.src,
            aux: c.src,
            imm: b.imm,
            ..Slot::EMPTY
        },
    })
}

/// The kind of `slot` once its stack access is proven in range: a plain load or store
/// at `r10 + off` becomes a `...Fp...` kind when `-STACK_FRAME_SIZE <= off <= -size`,
/// else (or for any other slot) its kind is unchanged. The proof: the verifier rejects
/// every write to r10, so r10 is always the current frame's pointer, `STACK_SIZE -
/// depth * STACK_FRAME_SIZE` bytes into the stack region with `depth < CALL_DEPTH_MAX`
/// (`crate::engine::RunMemory::with_mapped`, [`Kind::CallLocal`]); `size` bytes at `r10
/// + off` then lie inside the region at every depth. Fused ops keep the checked path.
fn frame_access(slot: Slot) -> Kind {
    use Kind::*;
    let (kind, base) = match slot.kind {
        LdxB => (LdxFpB, slot.src),
        LdxH => (LdxFpH, slot.src),
        LdxW => (LdxFpW, slot.src),
        LdxDw => (LdxFpDw, slot.src),
        StxB => (StxFpB, slot.dst),
        StxH => (StxFpH, slot.dst),
        StxW => (StxFpW, slot.dst),
        StxDw => (StxFpDw, slot.dst),
        StB => (StFpB, slot.dst),
        StH => (StFpH, slot.dst),
        StW => (StFpW, slot.dst),
        StDw => (StFpDw, slot.dst),
        other => return other,
    };
    let size = match kind {
        LdxFpB | StxFpB | StFpB => 1,
        LdxFpH | StxFpH | StFpH => 2,
        LdxFpW | StxFpW | StFpW => 4,
        _ => 8,
    };
    let off = i64::from(slot.off);
    if base == REG_FP && off >= -(STACK_FRAME_SIZE as i64) && off <= -size {
        kind
    } else {
        slot.kind
    }
}

/// How many slots a fused op of `kind` runs (1 for every unfused kind).
fn span(kind: Kind) -> usize {
    use Kind::*;
    match kind {
        MovAddLdxSW => 5,
        LshMovAddLdxH | LshMovAddLdxW | LshMovAddLdxDw => 4,
        // An `lddw` takes two slots.
        LddwAddLdxB | LddwAddLdxH | LddwAddLdxW | LddwAddLdxDw => 4,
        LddwAddLdxGlobalB | LddwAddLdxGlobalH | LddwAddLdxGlobalW | LddwAddLdxGlobalDw => 4,
        LddwAdd | MovAddIAddR | AddIMovJltR | AddIMov32JltR | AddIAddIJltR | AddRAddIJltR
        | Mov32AndILsh => 3,
        Mov32AndILshLddwAdd | RshAndLddwAddLdxGlobalW => 6,
        FpIdxLdxB | FpIdxLdxH | FpIdxLdxW | FpIdxLdxDw | FpIdxStxB | FpIdxStxW | FpIdxStxDw => 4,
        MovSx32x3 | MovAddLdxB | MovAddLdxW | MovAddLdxDw | MovJeqIJa | Mov32JeqIJa
        | AndNegAnd32I => 3,
        Zx32x2 | Sx32x2 | MovAdd | MovMov | AddJltR | AddIMov | AddIAddI | AddRAddI | MovJltR
        | MovJeqI | MovJneI | MovJa | JeqIJa | JneIJa | MovAddI | AddRLdxB | AddRLdxW
        | AddRLdxDw | LdxBMov | LdxWMov | LshIMov | RshIMov | XorMul | LdxWMov32 | Mov32AndI
        | Mov32AddI | Mov32RshI | RshIAndI | AddIMov32 | Mov32JltR | Mov32Ja => 2,
        _ => 1,
    }
}

/// The slot (counted from the fused op's own) of the `ja` a `j<eq|ne> +1; ja` op ends
/// with: always a block leader, as it follows a jump; the op bumps its counter itself
/// when it runs the `ja` (see [`Interpreter::execute`]).
fn inner_ja(kind: Kind) -> Option<usize> {
    match kind {
        Kind::JeqIJa | Kind::JneIJa => Some(1),
        Kind::MovJeqIJa | Kind::Mov32JeqIJa => Some(2),
        _ => None,
    }
}

/// Whether a fused op of `kind` at slot `i` runs no block leader after its first slot
/// (its `ja` excepted, see [`inner_ja`]): then a counting loop that bumps a block's
/// counter where it dispatches the block's leader sees every block entered.
/// `leaders` is [`crate::count::BlockMap::block_table`].
fn stays_in_block(i: usize, kind: Kind, leaders: &[u32]) -> bool {
    (1..span(kind))
        .all(|k| Some(k) == inner_ja(kind) || leaders.get(i + k).is_none_or(|&b| b == NOT_A_LEADER))
}

/// Decodes one verified instruction (not `lddw`) at slot `pc`.
fn decode(insn: Insn, pc: usize) -> Slot {
    match insn.class() {
        CLASS_ALU64 | CLASS_ALU => decode_alu(insn),
        CLASS_JMP | CLASS_JMP32 => decode_jmp(insn, pc),
        _ => decode_mem(insn),
    }
}

/// One of four kinds by operand width and form: `[32-bit imm, 32-bit reg, 64-bit imm,
/// 64-bit reg]`.
fn by_form(insn: Insn, wide: bool, kinds: [Kind; 4]) -> Kind {
    let reg = insn.opc & SRC_X != 0;
    kinds[usize::from(wide) * 2 + usize::from(reg)]
}

fn decode_alu(insn: Insn) -> Slot {
    use Kind::*;
    let wide = insn.class() == CLASS_ALU64;
    let reg = insn.opc & SRC_X != 0;
    let signed = insn.off == 1;
    let form = |kinds| by_form(insn, wide, kinds);
    let kind = match insn.opc & 0xf0 {
        ALU_ADD => form([Add32I, Add32R, Add64I, Add64R]),
        ALU_SUB => form([Sub32I, Sub32R, Sub64I, Sub64R]),
        ALU_MUL => form([Mul32I, Mul32R, Mul64I, Mul64R]),
        ALU_DIV if signed => form([SDiv32I, SDiv32R, SDiv64I, SDiv64R]),
        ALU_DIV => form([Div32I, Div32R, Div64I, Div64R]),
        ALU_MOD if signed => form([SMod32I, SMod32R, SMod64I, SMod64R]),
        ALU_MOD => form([Mod32I, Mod32R, Mod64I, Mod64R]),
        ALU_OR => form([Or32I, Or32R, Or64I, Or64R]),
        ALU_AND => form([And32I, And32R, And64I, And64R]),
        ALU_LSH => form([Lsh32I, Lsh32R, Lsh64I, Lsh64R]),
        ALU_RSH => form([Rsh32I, Rsh32R, Rsh64I, Rsh64R]),
        ALU_ARSH => form([Arsh32I, Arsh32R, Arsh64I, Arsh64R]),
        ALU_XOR => form([Xor32I, Xor32R, Xor64I, Xor64R]),
        ALU_NEG if !reg => form([Neg32, Invalid, Neg64, Invalid]),
        ALU_MOV if !reg => form([Mov32I, Invalid, Mov64I, Invalid]),
        ALU_MOV => match (wide, insn.off) {
            (true, 8) => MovSx8To64,
            (true, 16) => MovSx16To64,
            (true, 32) => MovSx32To64,
            (true, _) => Mov64R,
            (false, 8) => MovSx8To32,
            (false, 16) => MovSx16To32,
            // `mov32 reg` zero-extends too.
            (false, _) => Mov32R,
        },
        // `bswap` (RFC 9669 §4.2, ALU64) and `be` (ALU, source bit set) swap the low
        // `imm` bits; `le` (ALU, source bit clear) converts to little-endian, which on
        // this little-endian VM only truncates (`le16`/`le32` clear the upper bits, a
        // classic bug when skipped).
        ALU_END if wide && reg => Invalid,
        ALU_END if wide || reg => match insn.imm {
            16 => Swap16,
            32 => Swap32,
            _ => Swap64,
        },
        ALU_END => match insn.imm {
            16 => Trunc16,
            32 => Trunc32,
            _ => Nop,
        },
        _ => Invalid,
    };
    Slot::of(kind, insn)
}

fn decode_jmp(insn: Insn, pc: usize) -> Slot {
    use Kind::*;
    // RFC 9669 §4.3: the 64-bit comparison uses the immediate sign-extended to 64 bits
    // (one runtime zero-extends it); the 32-bit one uses its low half as is.
    let wide = insn.class() == CLASS_JMP;
    let reg = insn.opc & SRC_X != 0;
    let op = insn.opc & 0xf0;
    // Targets were range-checked by the verifier; `ja32` takes its offset from imm.
    let rel = if !wide && op == JMP_JA {
        i64::from(insn.imm)
    } else {
        i64::from(insn.off)
    };
    let target = (pc as i64 + rel + 1) as u32;
    let form = |kinds| by_form(insn, wide, kinds);
    let kind = match op {
        JMP_JA if !reg => Ja,
        JMP_CALL if wide && !reg && insn.src == CALL_SRC_LOCAL => {
            return Slot {
                target: (pc as i64 + i64::from(insn.imm) + 1) as u32,
                ..Slot::of(CallLocal, insn)
            };
        }
        JMP_CALL if wide && !reg => {
            return Slot {
                target: insn.imm as u32,
                ..Slot::of(CallHelper, insn)
            };
        }
        JMP_CALL if wide => CallX,
        JMP_EXIT if wide && !reg => Exit,
        JMP_JEQ => form([Jeq32I, Jeq32R, Jeq64I, Jeq64R]),
        JMP_JNE => form([Jne32I, Jne32R, Jne64I, Jne64R]),
        JMP_JGT => form([Jgt32I, Jgt32R, Jgt64I, Jgt64R]),
        JMP_JGE => form([Jge32I, Jge32R, Jge64I, Jge64R]),
        JMP_JLT => form([Jlt32I, Jlt32R, Jlt64I, Jlt64R]),
        JMP_JLE => form([Jle32I, Jle32R, Jle64I, Jle64R]),
        JMP_JSGT => form([Jsgt32I, Jsgt32R, Jsgt64I, Jsgt64R]),
        JMP_JSGE => form([Jsge32I, Jsge32R, Jsge64I, Jsge64R]),
        JMP_JSLT => form([Jslt32I, Jslt32R, Jslt64I, Jslt64R]),
        JMP_JSLE => form([Jsle32I, Jsle32R, Jsle64I, Jsle64R]),
        JMP_JSET => form([Jset32I, Jset32R, Jset64I, Jset64R]),
        _ => Invalid,
    };
    Slot {
        target,
        ..Slot::of(kind, insn)
    }
}

fn decode_mem(insn: Insn) -> Slot {
    use Kind::*;
    let kind = match (insn.class(), insn.opc & 0xe0, insn.opc & 0x18) {
        (CLASS_LDX, MODE_MEM, SIZE_B) => LdxB,
        (CLASS_LDX, MODE_MEM, SIZE_H) => LdxH,
        (CLASS_LDX, MODE_MEM, SIZE_W) => LdxW,
        (CLASS_LDX, MODE_MEM, SIZE_DW) => LdxDw,
        (CLASS_LDX, MODE_MEMSX, SIZE_B) => LdxSB,
        (CLASS_LDX, MODE_MEMSX, SIZE_H) => LdxSH,
        (CLASS_LDX, MODE_MEMSX, SIZE_W) => LdxSW,
        (CLASS_ST, MODE_MEM, SIZE_B) => StB,
        (CLASS_ST, MODE_MEM, SIZE_H) => StH,
        (CLASS_ST, MODE_MEM, SIZE_W) => StW,
        (CLASS_ST, MODE_MEM, SIZE_DW) => StDw,
        (CLASS_STX, MODE_MEM, SIZE_B) => StxB,
        (CLASS_STX, MODE_MEM, SIZE_H) => StxH,
        (CLASS_STX, MODE_MEM, SIZE_W) => StxW,
        (CLASS_STX, MODE_MEM, SIZE_DW) => StxDw,
        (CLASS_STX, MODE_ATOMIC, size @ (SIZE_W | SIZE_DW)) => {
            let op = match insn.imm {
                ATOMIC_ADD => AtomicOp::Add,
                ATOMIC_OR => AtomicOp::Or,
                ATOMIC_AND => AtomicOp::And,
                ATOMIC_XOR => AtomicOp::Xor,
                x if x == ATOMIC_ADD | ATOMIC_FETCH => AtomicOp::FetchAdd,
                x if x == ATOMIC_OR | ATOMIC_FETCH => AtomicOp::FetchOr,
                x if x == ATOMIC_AND | ATOMIC_FETCH => AtomicOp::FetchAnd,
                x if x == ATOMIC_XOR | ATOMIC_FETCH => AtomicOp::FetchXor,
                ATOMIC_XCHG => AtomicOp::Xchg,
                ATOMIC_CMPXCHG => AtomicOp::CmpXchg,
                _ => return Slot::of(Invalid, insn),
            };
            let kind = if size == SIZE_DW { Atomic64 } else { Atomic32 };
            return Slot {
                aux: op as u8,
                ..Slot::of(kind, insn)
            };
        }
        _ => Invalid,
    };
    Slot::of(kind, insn)
}

/// Entries of the run's register file: one per `u8`, see [`Interpreter::execute`].
const REG_FILE_SIZE: usize = 256;

/// The register file's entry for the host address of the current frame's top (what r10
/// stands for): past r10, so no verified program names it.
const FRAME_HOST: usize = REG_FP as usize + 1;

/// The register file's entry for the host address of the stack's first byte, for the
/// `FpIdx...` kinds: past r10 too.
const STACK_HOST: usize = FRAME_HOST + 1;

/// The register file's entry for the host address of global section 0's first byte;
/// section `n`'s is `GLOBAL_HOST + n`, for the loads [`known`] proves: past r10 too.
const GLOBAL_HOST: usize = STACK_HOST + 1;

const _: () = assert!(GLOBAL_HOST + RegionIdx::GLOBALS_COUNT as usize <= REG_FILE_SIZE);

/// The virtual address of the stack's first byte.
const STACK_VADDR: u64 = RegionIdx::STACK.vaddr(0);

/// Registers saved by a local call (RFC 9669 §4.3.1: r6-r9 are callee-saved).
#[derive(Clone, Copy, Default)]
struct Frame {
    return_pc: u32,
    saved: [u64; 4],
}

/// `x` as the low half of a register, for 32-bit operations.
#[inline(always)]
fn lo(x: u64) -> u32 {
    x as u32
}

/// RFC 9669 §4.1: division by zero yields 0.
#[inline(always)]
fn div64(a: u64, b: u64) -> u64 {
    a.checked_div(b).unwrap_or(0)
}

/// RFC 9669 §4.1: modulo by zero leaves dst unchanged.
#[inline(always)]
fn mod64(a: u64, b: u64) -> u64 {
    a.checked_rem(b).unwrap_or(a)
}

/// Signed division: by zero yields 0; `MIN / -1` wraps to `MIN` (x86 `idiv` faults).
#[inline(always)]
fn sdiv64(a: u64, b: u64) -> u64 {
    if b == 0 {
        0
    } else {
        (a as i64).wrapping_div(b as i64) as u64
    }
}

/// Signed modulo, truncated like C: by zero leaves dst; `MIN % -1` is 0.
#[inline(always)]
fn smod64(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        (a as i64).wrapping_rem(b as i64) as u64
    }
}

/// 32-bit division; the result (or the unchanged dst of modulo by zero) is
/// zero-extended, as every ALU32 result is.
#[inline(always)]
fn div32(a: u64, b: u64) -> u64 {
    u64::from(lo(a).checked_div(lo(b)).unwrap_or(0))
}

#[inline(always)]
fn mod32(a: u64, b: u64) -> u64 {
    u64::from(lo(a).checked_rem(lo(b)).unwrap_or(lo(a)))
}

#[inline(always)]
fn sdiv32(a: u64, b: u64) -> u64 {
    if lo(b) == 0 {
        0
    } else {
        u64::from((lo(a) as i32).wrapping_div(lo(b) as i32) as u32)
    }
}

#[inline(always)]
fn smod32(a: u64, b: u64) -> u64 {
    if lo(b) == 0 {
        u64::from(lo(a))
    } else {
        u64::from((lo(a) as i32).wrapping_rem(lo(b) as i32) as u32)
    }
}

/// The new memory value of a non-exchanging atomic, or of `xchg`/`cmpxchg`.
#[inline(always)]
fn atomic_new(op: AtomicOp, old: u64, value: u64, expected: u64) -> u64 {
    match op {
        AtomicOp::Add | AtomicOp::FetchAdd => old.wrapping_add(value),
        AtomicOp::Or | AtomicOp::FetchOr => old | value,
        AtomicOp::And | AtomicOp::FetchAnd => old & value,
        AtomicOp::Xor | AtomicOp::FetchXor => old ^ value,
        AtomicOp::Xchg => value,
        AtomicOp::CmpXchg if old == expected => value,
        AtomicOp::CmpXchg => old,
    }
}

/// Performs a 64-bit atomic at `p` and returns the old value.
///
/// # Safety
/// `p` must be valid for reads and writes of 8 bytes, and every concurrent access to
/// those bytes must be atomic or accepted as a race by the embedder
/// ([`MemoryMap::map_raw`]).
unsafe fn atomic64(p: *mut u8, op: AtomicOp, value: u64, expected: u64) -> u64 {
    if p.align_offset(std::mem::align_of::<AtomicU64>()) != 0 {
        // SAFETY: the caller guarantees 8 valid, writable bytes; unaligned accesses.
        unsafe {
            let old = p.cast::<u64>().read_unaligned();
            p.cast::<u64>()
                .write_unaligned(atomic_new(op, old, value, expected));
            return old;
        }
    }
    // SAFETY: `p` is aligned for `AtomicU64` (checked above) and valid for 8 bytes of
    // reads and writes (the caller); concurrent accessors use atomics too (the caller).
    let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
    let ord = Ordering::SeqCst;
    match op {
        AtomicOp::Add | AtomicOp::FetchAdd => a.fetch_add(value, ord),
        AtomicOp::Or | AtomicOp::FetchOr => a.fetch_or(value, ord),
        AtomicOp::And | AtomicOp::FetchAnd => a.fetch_and(value, ord),
        AtomicOp::Xor | AtomicOp::FetchXor => a.fetch_xor(value, ord),
        AtomicOp::Xchg => a.swap(value, ord),
        AtomicOp::CmpXchg => match a.compare_exchange(expected, value, ord, ord) {
            Ok(old) | Err(old) => old,
        },
    }
}

/// Performs a 32-bit atomic at `p` and returns the old value, zero-extended. `value`
/// and `expected` use their low 32 bits (RFC 9669 §5.3).
///
/// # Safety
/// As [`atomic64`], for 4 bytes.
unsafe fn atomic32(p: *mut u8, op: AtomicOp, value: u64, expected: u64) -> u64 {
    let (value, expected) = (lo(value), lo(expected));
    if p.align_offset(std::mem::align_of::<AtomicU32>()) != 0 {
        // SAFETY: the caller guarantees 4 valid, writable bytes; unaligned accesses.
        unsafe {
            let old = p.cast::<u32>().read_unaligned();
            let new = atomic_new(op, old.into(), value.into(), expected.into());
            p.cast::<u32>().write_unaligned(new as u32);
            return old.into();
        }
    }
    // SAFETY: as in `atomic64`, with `AtomicU32`'s alignment checked above.
    let a = unsafe { AtomicU32::from_ptr(p.cast::<u32>()) };
    let ord = Ordering::SeqCst;
    let old = match op {
        AtomicOp::Add | AtomicOp::FetchAdd => a.fetch_add(value, ord),
        AtomicOp::Or | AtomicOp::FetchOr => a.fetch_or(value, ord),
        AtomicOp::And | AtomicOp::FetchAnd => a.fetch_and(value, ord),
        AtomicOp::Xor | AtomicOp::FetchXor => a.fetch_xor(value, ord),
        AtomicOp::Xchg => a.swap(value, ord),
        AtomicOp::CmpXchg => match a.compare_exchange(expected, value, ord, ord) {
            Ok(old) | Err(old) => old,
        },
    };
    old.into()
}

/// The csx code of the [`TrapKind::HelperAbort`] of a helper that panicked or remapped
/// the stack (EFAULT): the same as the JIT's, so the engines agree.
pub const HELPER_PANIC_CODE: i64 = -14;

/// Calls helper `id` through [`call_helper`] as the JIT's trampoline does: a helper that
/// panics, or that remaps the stack or a global section ([`EngineRows`]), aborts the run with
/// [`TrapKind::HelperAbort`] and [`HELPER_PANIC_CODE`] instead of unwinding through the
/// interpreter, so both engines give the same trap.
fn guarded_call(
    functions: &FunctionTable,
    host: &mut dyn HelperHost,
    mem: &mut MemoryMap<'_>,
    id: i64,
    args: [u64; 5],
    rows: &EngineRows,
) -> Result<u64, TrapKind> {
    let called = panic::catch_unwind(AssertUnwindSafe(|| {
        call_helper(functions, host, mem, id, args)
    }));
    let helper = u32::try_from(id).unwrap_or(u32::MAX);
    let abort = |message: String| TrapKind::HelperAbort {
        helper,
        code: HELPER_PANIC_CODE,
        message,
    };
    let r0 = match called {
        Ok(result) => result?,
        Err(payload) => {
            let text = if let Some(s) = payload.downcast_ref::<&str>() {
                s
            } else if let Some(s) = payload.downcast_ref::<String>() {
                s.as_str()
            } else {
                "non-string panic payload"
            };
            return Err(abort(format!("helper panicked: {text}")));
        }
    };
    if !rows.unchanged(mem) {
        return Err(abort(EngineRows::REMAPPED.into()));
    }
    Ok(r0)
}

impl Interpreter {
    /// The dispatch loop. `pc` is advanced before an op runs, so inside an arm the
    /// current instruction is `pc - 1` (what traps and fuel use).
    // Inlined into the run's closure: as a separate function the loop measured up to
    // 1.8x slower (its hot values spilled differently).
    // `COUNT`: bump `counts` at block leaders (`crate::count`); `ops` must then be
    // decoded with the leaders, so that the loop reaches every leader slot it
    // enters (the `j<eq|ne> +1; ja` ops bump their `ja`'s block themselves).
    #[allow(clippy::too_many_lines)]
    #[inline(always)]
    fn execute<const COUNT: bool>(
        &self,
        ops: &[Slot],
        mem: &mut MemoryMap<'_>,
        host: &mut dyn HelperHost,
        start: Start<'_>,
    ) -> RunOutcome {
        let Start {
            frame_pointer,
            args,
            budget,
            stop,
            counts,
        } = start;
        let leaders: &[u32] = if COUNT {
            self.program.blocks().block_table()
        } else {
            &[]
        };
        // The block counters as memory (`ExecCounts::as_mut_ptr`), and how many.
        let (counters, blocks) = match counts {
            Some(c) if COUNT => (c.as_mut_ptr(), c.len()),
            _ => (std::ptr::null_mut(), 0),
        };
        let functions = self.program.functions();
        let rows = EngineRows::of(mem, &self.program);
        let stack = rows.stack();
        // The `...Fp...` kinds ([`frame_access`]) address the current frame through
        // the host address r10 stands for, kept in `regs[FRAME_HOST]`; they rely on this
        // layout, which `RunMemory::with_mapped` gives every run.
        assert!(
            stack.1 == STACK_SIZE as u64
                && stack.2 == STACK_SIZE as u64
                && frame_pointer == RegionIdx::STACK.vaddr(STACK_SIZE as u32),
            "the interpreter runs with its stack mapped by RunMemory"
        );
        let stack_host = mem.entries()[RegionIdx::STACK.0 as usize].base;
        let frame_host = stack_host.wrapping_add(STACK_SIZE);
        // One entry per possible `u8` register number, so that indexing by a decoded
        // register needs neither a bounds check nor a mask; only r0-r10 are ever named
        // by a verified program.
        let mut regs = [0u64; REG_FILE_SIZE];
        regs[1..6].copy_from_slice(&args);
        regs[usize::from(REG_FP)] = frame_pointer;
        // In the register file's memory, not a local: a local took a machine register
        // from the dispatch loop and made every kernel pay for it in spills.
        regs[FRAME_HOST] = frame_host.expose_provenance() as u64;
        regs[STACK_HOST] = stack_host.expose_provenance() as u64;
        self.map_globals(mem, &mut regs);
        let mut frames = [Frame::default(); CALL_DEPTH_MAX];
        // Frames saved by local calls: live frames are `depth + 1`.
        let mut depth = 0usize;
        // Fuel still unspent: `budget - left` is the fuel used so far. Counting down
        // makes a charge one compare and one subtraction.
        let mut left: u64 = budget;
        // The next slot to run, as a pointer into `ops`; `pc!()` is its index, so the
        // running instruction is `pc!() - 1` (what traps and fuel use). A pointer keeps
        // the dispatch to a kind load and a jump (see the alignment note at the loop).
        let base = ops.as_ptr();
        let mut next = base.wrapping_add(self.program.entry() as usize);

        macro_rules! pc {
            () => {
                (next as usize).wrapping_sub(base as usize) / std::mem::size_of::<Slot>()
            };
        }
        macro_rules! r {
            ($r:expr) => {
                regs[usize::from($r)]
            };
        }
        macro_rules! trap {
            ($kind:expr) => {
                return RunOutcome {
                    result: Err(Trap {
                        pc: (pc!() - 1) as u32,
                        kind: $kind,
                    }),
                    fuel_used: budget - left,
                }
            };
        }
        macro_rules! charge {
            ($cost:expr) => {
                let cost: u64 = $cost;
                // `used + cost > budget` without the sum; the two differ only once a run
                // has used more than `u64::MAX - 65536` fuel, which no run can reach.
                if cost > left {
                    return RunOutcome {
                        result: Err(rules::fuel_trap((pc!() - 1) as u32, budget)),
                        fuel_used: (budget - left).saturating_add(cost),
                    };
                }
                left -= cost;
                // The stop flag is looked at where fuel is charged (`crate::engine`).
                if stop.is_set() {
                    return RunOutcome {
                        result: Err(rules::stop_trap((pc!() - 1) as u32, stop.reason())),
                        fuel_used: budget - left,
                    };
                }
            };
        }
        macro_rules! jump {
            ($target:expr) => {{
                let target = $target;
                if (target as usize) < pc!() {
                    // A backward jump at `pc - 1`: `rules::jump_cost`, already known
                    // to be backward.
                    let cost = (pc!() - target as usize) as u64;
                    debug_assert_eq!(cost, rules::jump_cost((pc!() - 1) as u32, target));
                    charge!(cost);
                }
                next = base.wrapping_add(target as usize);
            }};
        }
        // Enters the block led by slot `$pc` (the counting copy only).
        macro_rules! bump {
            ($pc:expr) => {
                // One compare covers `NOT_A_LEADER` too (`u32::MAX`, never a block).
                if let Some(&b) = leaders.get($pc) {
                    if (b as usize) < blocks {
                        // SAFETY: `counters` points at the `blocks` counters of
                        // `counts`, which this run alone uses (`ExecCounts` is not
                        // `Sync`), and `b < blocks`.
                        unsafe { *counters.add(b as usize) += 1 };
                    }
                }
            };
        }
        // The `ja` a fused `j<eq|ne> +1; ja` op ends with, run when `$cond` (with `next`
        // past the `ja`): it leads a block (it follows a jump), so a counted run bumps it.
        macro_rules! ja_if {
            ($cond:expr, $target:expr) => {
                if $cond {
                    if COUNT {
                        bump!(pc!() - 1);
                    }
                    jump!($target);
                }
            };
        }
        macro_rules! jump_if {
            ($cond:expr, $target:expr) => {
                if $cond {
                    jump!($target)
                }
            };
        }
        macro_rules! addr {
            ($base:expr, $off:expr) => {
                r!($base).wrapping_add($off as i64 as u64)
            };
        }
        macro_rules! load {
            ($dst:expr, $src:expr, $off:expr, $size:expr) => {
                load_at!(r!($src), $off, $size)
            };
        }
        macro_rules! load_at {
            ($base:expr, $off:expr, $size:expr) => {{
                let a = $base.wrapping_add($off as i64 as u64);
                match load_small(mem, a, $size) {
                    Ok(v) => v,
                    Err(kind) => trap!(kind),
                }
            }};
        }
        // The `LddwAddLdx...` kinds of slot `$s`: `aux2 = lddw value + aux`, then `$size`
        // bytes at `aux2 + off` into `dst`, trapping at the load's own slot; or, for the
        // `LddwAddLdxGlobal...` kinds (`global`), the load proven.
        macro_rules! table_load {
            ($s:expr, |$base:ident| $load:expr) => {{
                let $base = $s.lddw_value().wrapping_add(r!($s.aux));
                r!($s.aux2) = $base;
                next = next.wrapping_add(3);
                r!($s.dst) = $load;
            }};
            ($s:expr, global $size:expr) => {
                table_load!($s, |base| global_load!($s.src, base, $s.off, $size))
            };
            ($s:expr, $size:expr) => {
                table_load!($s, |base| load_at!(base, $s.off, $size))
            };
        }
        // The `...Global...` kinds: `$size` bytes at `$base + $off`, an address [`known`]
        // proved inside the global section whose host address is in `regs[$host]`.
        macro_rules! global_load {
            ($host:expr, $base:expr, $off:expr, $size:expr) => {{
                let at = $base.wrapping_add($off as i64 as u64) as u32 as usize;
                let p = std::ptr::with_exposed_provenance::<u8>(regs[usize::from($host)] as usize);
                // SAFETY: `known::proven_loads` admitted the load only when its `$size`
                // bytes lie inside the section on every path (`at` is then their offset
                // in it), and `map_globals` put the section's host address, valid for
                // reads of the length the proof used, in `regs[$host]`; a helper that
                // remaps the section aborts the run.
                unsafe { read_host(p.wrapping_add(at), $size) }
            }};
        }
        // `RshAndLddwAddLdxGlobal...`: the index `(x >> k) & imm` into `x`, the table's
        // entry address into `t`, then the proven load.
        macro_rules! rsh_and_table_load {
            ($s:expr, $size:expr) => {{
                let s: &Slot = $s;
                let (x, t) = (s.aux & 15, s.aux >> 4);
                let index = (r!(x) >> s.aux2) & s.imm64();
                r!(x) = index;
                let n = u64::from(s.src) - GLOBAL_HOST as u64;
                let table =
                    ((u64::from(RegionIdx::GLOBALS_FIRST.0) + n) << 32) | u64::from(s.target);
                let base = table.wrapping_add(index);
                r!(t) = base;
                next = next.wrapping_add(5);
                r!(s.dst) = global_load!(s.src, base, s.off, $size);
            }};
        }
        macro_rules! store {
            ($dst:expr, $off:expr, $size:expr, $value:expr) => {{
                let a = addr!($dst, $off);
                if let Err(kind) = store_small(mem, a, $size, $value) {
                    trap!(kind)
                }
            }};
        }
        // The `...Fp...` kinds: `$size` bytes at `r10 + $off` in the current frame.
        macro_rules! frame_at {
            ($off:expr) => {
                std::ptr::with_exposed_provenance_mut::<u8>(regs[FRAME_HOST] as usize)
                    .wrapping_offset($off as isize)
            };
        }
        macro_rules! frame_load {
            ($off:expr, $size:expr) => {
                // SAFETY: `frame_access` admitted only `-STACK_FRAME_SIZE <= off <=
                // -size`, and `regs[FRAME_HOST]` is `STACK_SIZE - depth * STACK_FRAME_SIZE`
                // bytes into the stack mapped read-write for this run (asserted above),
                // with `depth < CALL_DEPTH_MAX`: the bytes lie inside the stack.
                unsafe { read_host(frame_at!($off), $size) }
            };
        }
        macro_rules! frame_store {
            ($off:expr, $size:expr, $value:expr) => {
                // SAFETY: as in `frame_load`; the stack is mapped writable.
                unsafe { write_host(frame_at!($off), $size, $value) }
            };
        }
        // The `FpIdx...` kinds of slot `$s`: `aux2 = r10 + imm + aux`, `next` past the
        // access (so a trap reports its slot); the access's address, `aux2 + off`.
        macro_rules! fp_index_addr {
            ($s:expr) => {{
                let t = r!(REG_FP).wrapping_add($s.imm64()).wrapping_add(r!($s.aux));
                r!($s.aux2) = t;
                next = next.wrapping_add(3);
                t.wrapping_add($s.off as i64 as u64)
            }};
        }
        // The host address of `$size` bytes at virtual address `$addr` if they lie inside
        // the stack (`STACK_SIZE` bytes at `STACK_VADDR`, mapped read-write at
        // `regs[STACK_HOST]` for the whole run: asserted above, and a helper that remaps
        // it aborts the run), else null.
        macro_rules! in_stack {
            ($addr:expr, $size:expr) => {{
                let o = $addr.wrapping_sub(STACK_VADDR);
                if o <= (STACK_SIZE - $size) as u64 {
                    std::ptr::with_exposed_provenance_mut::<u8>(regs[STACK_HOST] as usize)
                        .wrapping_add(o as usize)
                } else {
                    std::ptr::null_mut()
                }
            }};
        }
        macro_rules! fp_index_load {
            ($s:expr, $size:expr) => {{
                let s: &Slot = $s;
                let a = fp_index_addr!(s);
                let p = in_stack!(a, $size);
                r!(s.dst) = if p.is_null() {
                    load_at!(a, 0, $size)
                } else {
                    // SAFETY: `in_stack` gave `p` only for `$size` bytes inside the stack.
                    unsafe { read_host(p, $size) }
                };
            }};
        }
        macro_rules! fp_index_store {
            ($s:expr, $size:expr) => {{
                let s: &Slot = $s;
                let a = fp_index_addr!(s);
                let p = in_stack!(a, $size);
                if p.is_null() {
                    if let Err(kind) = store_small(mem, a, $size, r!(s.src)) {
                        trap!(kind)
                    }
                } else {
                    // SAFETY: as in `fp_index_load`; the stack is mapped writable.
                    unsafe { write_host(p, $size, r!(s.src)) }
                }
            }};
        }
        macro_rules! helper {
            ($id:expr) => {{
                charge!(rules::CALL_COST);
                let args = [regs[1], regs[2], regs[3], regs[4], regs[5]];
                match guarded_call(functions, host, mem, $id, args, &rows) {
                    Ok(v) => regs[0] = v,
                    Err(kind) => trap!(kind),
                }
            }};
        }

        // Start a 64-byte code line here, before the dispatch loop: the loop's header
        // (slot pointer bump, kind load, jump-table load, indirect jump: about 20 bytes)
        // then sits at a fixed offset from a line start whatever address the linker
        // gives this function. Where the header straddled two lines the whole
        // interpreter ran 1.5x slower on every kernel (measured by shifting the function
        // 0/16/32/48 bytes: docs/benchmarks-history.md, "The interpreter's dispatch and 64-byte
        // code lines"), so before this its speed changed with unrelated code elsewhere
        // in the binary. The compiler places one op's code between here and the header
        // (the op that falls through into it), so the header's offset in its line also
        // depends on that op's size, and the compiler may align that op's last block to
        // 16 bytes. As the loop is now, the 56 bytes of no-ops after the line start put
        // the uncounted header (21 bytes) at offset 12 of a line, inside it (with 24 bytes
        // it sat at offset 44, straddling two lines, and stats32 and stats64 ran 1.5-2x
        // slower; earlier layouts measured 1.1-1.4x slower at offset 48, and up to 1.2x at
        // offset 16, across a 32-byte fetch window). After changing this loop, check with
        // `objdump -d` that the uncounted header, from the loop's label to its `jmp *`,
        // lies in one 64-byte line, in the `csx` binary's release build.
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        // SAFETY: assembler alignment and padding directives and nothing else: they pad
        // the code with no-ops (run once per run), touching no register, flag or memory.
        unsafe {
            std::arch::asm!(
                ".p2align 6",
                ".skip 56, 0x90",
                options(nomem, nostack, preserves_flags)
            );
        }
        loop {
            debug_assert!(pc!() < ops.len());
            // SAFETY: `next` points at a slot of `ops`: the verifier proved that no path
            // from the entry runs past the last slot or lands on an lddw tail (every
            // jump, call and fall-through target is a slot of the program), and a fused
            // op advances only inside its own sequence.
            let s = unsafe { &*next };
            next = next.wrapping_add(1);
            // The counting copy only (a constant `false` leaves the header as it is).
            if COUNT && s.lead != 0 {
                bump!(pc!() - 1);
            }
            // Each arm reads only the fields it uses, straight from the slot.
            match s.kind {
                Kind::Add64I => r!(s.dst) = r!(s.dst).wrapping_add(s.imm64()),
                Kind::Mul64I => r!(s.dst) = r!(s.dst).wrapping_mul(s.imm64()),
                Kind::Or64I => r!(s.dst) |= s.imm64(),
                Kind::And64I => r!(s.dst) &= s.imm64(),
                // Shift amounts are masked to the operand width (RFC 9669 §4.1).
                Kind::Lsh64I => r!(s.dst) <<= s.imm64() & 63,
                Kind::Rsh64I => r!(s.dst) >>= s.imm64() & 63,
                Kind::Arsh64I => r!(s.dst) = ((r!(s.dst) as i64) >> (s.imm64() & 63)) as u64,
                Kind::Xor64I => r!(s.dst) ^= s.imm64(),
                Kind::Mov64I => r!(s.dst) = s.imm64(),
                Kind::Add64R => r!(s.dst) = r!(s.dst).wrapping_add(r!(s.src)),
                Kind::Sub64R => r!(s.dst) = r!(s.dst).wrapping_sub(r!(s.src)),
                Kind::Mul64R => r!(s.dst) = r!(s.dst).wrapping_mul(r!(s.src)),
                Kind::Or64R => r!(s.dst) |= r!(s.src),
                Kind::And64R => r!(s.dst) &= r!(s.src),
                Kind::Lsh64R => r!(s.dst) <<= r!(s.src) & 63,
                Kind::Rsh64R => r!(s.dst) >>= r!(s.src) & 63,
                Kind::Xor64R => r!(s.dst) ^= r!(s.src),
                Kind::Mov64R => r!(s.dst) = r!(s.src),

                // ALU32: operate on the low halves; the result is zero-extended.
                Kind::Add32I => r!(s.dst) = u64::from(lo(r!(s.dst)).wrapping_add(lo(s.imm64()))),
                Kind::Mul32I => r!(s.dst) = u64::from(lo(r!(s.dst)).wrapping_mul(lo(s.imm64()))),
                Kind::Div32I => r!(s.dst) = div32(r!(s.dst), s.imm64()),
                Kind::Or32I => r!(s.dst) = u64::from(lo(r!(s.dst)) | lo(s.imm64())),
                Kind::And32I => r!(s.dst) = u64::from(lo(r!(s.dst)) & lo(s.imm64())),
                Kind::Lsh32I => r!(s.dst) = u64::from(lo(r!(s.dst)) << (s.imm64() & 31)),
                Kind::Rsh32I => r!(s.dst) = u64::from(lo(r!(s.dst)) >> (s.imm64() & 31)),
                Kind::Arsh32I => {
                    r!(s.dst) = u64::from(((lo(r!(s.dst)) as i32) >> (s.imm64() & 31)) as u32)
                }
                Kind::Xor32I => r!(s.dst) = u64::from(lo(r!(s.dst)) ^ lo(s.imm64())),
                Kind::Mov32I => r!(s.dst) = u64::from(lo(s.imm64())),
                Kind::Add32R => r!(s.dst) = u64::from(lo(r!(s.dst)).wrapping_add(lo(r!(s.src)))),
                Kind::Sub32R => r!(s.dst) = u64::from(lo(r!(s.dst)).wrapping_sub(lo(r!(s.src)))),
                Kind::Mul32R => r!(s.dst) = u64::from(lo(r!(s.dst)).wrapping_mul(lo(r!(s.src)))),
                Kind::Div32R => r!(s.dst) = div32(r!(s.dst), r!(s.src)),
                Kind::Or32R => r!(s.dst) = u64::from(lo(r!(s.dst)) | lo(r!(s.src))),
                Kind::And32R => r!(s.dst) = u64::from(lo(r!(s.dst)) & lo(r!(s.src))),
                Kind::Lsh32R => r!(s.dst) = u64::from(lo(r!(s.dst)) << (r!(s.src) & 31)),
                Kind::Rsh32R => r!(s.dst) = u64::from(lo(r!(s.dst)) >> (r!(s.src) & 31)),
                Kind::Xor32R => r!(s.dst) = u64::from(lo(r!(s.dst)) ^ lo(r!(s.src))),
                // `mov32 reg` zero-extends too.
                Kind::Mov32R => r!(s.dst) = u64::from(lo(r!(s.src))),

                // Out of line ([`rare`]): ops that kernels seldom run.
                Kind::Sub64I
                | Kind::Div64I
                | Kind::SDiv64I
                | Kind::Mod64I
                | Kind::SMod64I
                | Kind::Div64R
                | Kind::SDiv64R
                | Kind::Mod64R
                | Kind::SMod64R
                | Kind::Arsh64R
                | Kind::Neg64
                | Kind::MovSx8To64
                | Kind::MovSx16To64
                | Kind::MovSx32To64
                | Kind::Sub32I
                | Kind::SDiv32I
                | Kind::Mod32I
                | Kind::SMod32I
                | Kind::SDiv32R
                | Kind::Mod32R
                | Kind::SMod32R
                | Kind::Arsh32R
                | Kind::Neg32
                | Kind::MovSx8To32
                | Kind::MovSx16To32
                | Kind::Trunc16
                | Kind::Trunc32
                | Kind::Swap16
                | Kind::Swap32
                | Kind::Swap64
                | Kind::Nop => {
                    r!(s.dst) = rare::alu(s, r!(s.dst), r!(s.src));
                }
                Kind::Jge64I
                | Kind::Jle64I
                | Kind::Jsge64I
                | Kind::Jslt64I
                | Kind::Jsle64I
                | Kind::Jset64I
                | Kind::Jeq64R
                | Kind::Jne64R
                | Kind::Jsge64R
                | Kind::Jslt64R
                | Kind::Jsle64R
                | Kind::Jset64R
                | Kind::Jge32I
                | Kind::Jle32I
                | Kind::Jsge32I
                | Kind::Jslt32I
                | Kind::Jsle32I
                | Kind::Jset32I
                | Kind::Jsgt32R
                | Kind::Jsge32R
                | Kind::Jslt32R
                | Kind::Jsle32R
                | Kind::Jset32R => {
                    jump_if!(rare::jump_taken(s, r!(s.dst), r!(s.src)), s.target)
                }
                Kind::Lddw => {
                    r!(s.dst) = u64::from(s.imm as u32) | (u64::from(s.target) << 32);
                    next = next.wrapping_add(1);
                }
                Kind::LdxB => r!(s.dst) = load!(s.dst, s.src, s.off, 1),
                Kind::LdxH => r!(s.dst) = load!(s.dst, s.src, s.off, 2),
                Kind::LdxW => r!(s.dst) = load!(s.dst, s.src, s.off, 4),
                Kind::LdxDw => r!(s.dst) = load!(s.dst, s.src, s.off, 8),
                // Sign-extending loads (cpu v4, RFC 9669 §5.2).
                Kind::StxB => store!(s.dst, s.off, 1, r!(s.src)),
                Kind::StxH => store!(s.dst, s.off, 2, r!(s.src)),
                Kind::StxW => store!(s.dst, s.off, 4, r!(s.src)),
                Kind::StxDw => store!(s.dst, s.off, 8, r!(s.src)),
                // Out of line: sign-extending loads, stores of an immediate outside the
                // frame, atomics.
                Kind::LdxSB
                | Kind::LdxSH
                | Kind::LdxSW
                | Kind::StB
                | Kind::StH
                | Kind::StW
                | Kind::StDw
                | Kind::Atomic32
                | Kind::Atomic64 => {
                    if let Err(kind) = rare_memory_op(s, &mut regs, mem) {
                        trap!(kind)
                    }
                }

                Kind::Ja => jump!(s.target),
                Kind::Jeq64I => jump_if!(r!(s.dst) == s.imm64(), s.target),
                Kind::Jne64I => jump_if!(r!(s.dst) != s.imm64(), s.target),
                Kind::Jgt64I => jump_if!(r!(s.dst) > s.imm64(), s.target),
                Kind::Jlt64I => jump_if!(r!(s.dst) < s.imm64(), s.target),
                Kind::Jsgt64I => {
                    jump_if!((r!(s.dst) as i64) > s.imm64() as i64, s.target)
                }
                Kind::Jgt64R => jump_if!(r!(s.dst) > r!(s.src), s.target),
                Kind::Jge64R => jump_if!(r!(s.dst) >= r!(s.src), s.target),
                Kind::Jlt64R => jump_if!(r!(s.dst) < r!(s.src), s.target),
                Kind::Jle64R => jump_if!(r!(s.dst) <= r!(s.src), s.target),
                Kind::Jsgt64R => {
                    jump_if!((r!(s.dst) as i64) > r!(s.src) as i64, s.target)
                }
                Kind::Jeq32I => jump_if!(lo(r!(s.dst)) == lo(s.imm64()), s.target),
                Kind::Jne32I => jump_if!(lo(r!(s.dst)) != lo(s.imm64()), s.target),
                Kind::Jgt32I => jump_if!(lo(r!(s.dst)) > lo(s.imm64()), s.target),
                Kind::Jlt32I => jump_if!(lo(r!(s.dst)) < lo(s.imm64()), s.target),
                Kind::Jsgt32I => {
                    jump_if!((lo(r!(s.dst)) as i32) > lo(s.imm64()) as i32, s.target)
                }
                Kind::Jeq32R => {
                    jump_if!(lo(r!(s.dst)) == lo(r!(s.src)), s.target)
                }
                Kind::Jne32R => {
                    jump_if!(lo(r!(s.dst)) != lo(r!(s.src)), s.target)
                }
                Kind::Jgt32R => jump_if!(lo(r!(s.dst)) > lo(r!(s.src)), s.target),
                Kind::Jge32R => {
                    jump_if!(lo(r!(s.dst)) >= lo(r!(s.src)), s.target)
                }
                Kind::Jlt32R => jump_if!(lo(r!(s.dst)) < lo(r!(s.src)), s.target),
                Kind::Jle32R => {
                    jump_if!(lo(r!(s.dst)) <= lo(r!(s.src)), s.target)
                }

                // Helper calls: r1-r5 are passed, r0 receives the result; r1-r5 keep
                // their values (the ABI lets s.src program assume nothing about them, and
                // every engine must leave them the same way).
                Kind::CallHelper => helper!(i64::from(s.target)),
                Kind::CallX => helper!(r!(s.dst) as i64),
                Kind::CallLocal => {
                    charge!(rules::CALL_COST);
                    if depth + 2 > CALL_DEPTH_MAX {
                        return RunOutcome {
                            result: Err(rules::call_depth_trap((pc!() - 1) as u32)),
                            fuel_used: budget - left,
                        };
                    }
                    frames[depth] = Frame {
                        return_pc: pc!() as u32,
                        saved: [regs[6], regs[7], regs[8], regs[9]],
                    };
                    depth += 1;
                    r!(REG_FP) = r!(REG_FP).wrapping_sub(rules::FRAME_SIZE);
                    regs[FRAME_HOST] -= STACK_FRAME_SIZE as u64;
                    next = base.wrapping_add(s.target as usize);
                }
                Kind::Exit => {
                    if depth == 0 {
                        return RunOutcome {
                            result: Ok(regs[0]),
                            fuel_used: budget - left,
                        };
                    }
                    depth -= 1;
                    let frame = frames[depth];
                    regs[6..10].copy_from_slice(&frame.saved);
                    r!(REG_FP) = r!(REG_FP).wrapping_add(rules::FRAME_SIZE);
                    regs[FRAME_HOST] += STACK_FRAME_SIZE as u64;
                    next = base.wrapping_add(frame.return_pc as usize);
                }
                Kind::MovSx32x3 => {
                    r!(s.dst) = r!(s.src) as i32 as i64 as u64;
                    next = next.wrapping_add(2);
                }
                Kind::Zx32x2 => {
                    r!(s.dst) = u64::from(lo(r!(s.dst)));
                    next = next.wrapping_add(1);
                }
                Kind::Sx32x2 => {
                    r!(s.dst) = r!(s.dst) as i32 as i64 as u64;
                    next = next.wrapping_add(1);
                }
                Kind::MovAdd => {
                    r!(s.dst) = r!(s.src);
                    r!(s.dst) = r!(s.dst).wrapping_add(r!(s.aux));
                    next = next.wrapping_add(1);
                }
                Kind::MovAddLdxB => {
                    let base = r!(s.src).wrapping_add(r!(s.aux));
                    r!(s.aux2) = base;
                    next = next.wrapping_add(2);
                    r!(s.dst) = load_at!(base, s.off, 1);
                }
                Kind::MovAddLdxW => {
                    let base = r!(s.src).wrapping_add(r!(s.aux));
                    r!(s.aux2) = base;
                    next = next.wrapping_add(2);
                    r!(s.dst) = load_at!(base, s.off, 4);
                }
                Kind::MovAddLdxDw => {
                    let base = r!(s.src).wrapping_add(r!(s.aux));
                    r!(s.aux2) = base;
                    next = next.wrapping_add(2);
                    r!(s.dst) = load_at!(base, s.off, 8);
                }
                Kind::MovAddLdxSW => {
                    let base = r!(s.src).wrapping_add(r!(s.aux));
                    r!(s.aux2) = base;
                    next = next.wrapping_add(2);
                    r!(s.dst) = load_at!(base, s.off, 4) as i32 as i64 as u64;
                    next = next.wrapping_add(2);
                }
                // As `JeqIJa`, after the copy.
                Kind::MovJeqIJa => {
                    r!(s.dst) = r!(s.src);
                    next = next.wrapping_add(2);
                    ja_if!(r!(s.aux) != s.imm64(), s.target);
                }
                Kind::MovMov => {
                    r!(s.dst) = r!(s.src);
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(1);
                }
                Kind::AddJltR => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    next = next.wrapping_add(1);
                    jump_if!(r!(s.src) < r!(s.aux), s.target);
                }
                Kind::AddIMov => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(1);
                }
                Kind::AddIAddI => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    r!(s.aux) = r!(s.aux).wrapping_add(i64::from(s.target as i32) as u64);
                    next = next.wrapping_add(1);
                }
                Kind::AddRAddI => {
                    r!(s.dst) = r!(s.dst).wrapping_add(r!(s.src));
                    r!(s.aux) = r!(s.aux).wrapping_add(i64::from(s.target as i32) as u64);
                    next = next.wrapping_add(1);
                }
                Kind::MovJltR => {
                    r!(s.dst) = r!(s.src);
                    next = next.wrapping_add(1);
                    jump_if!(r!(s.aux) < r!(s.aux2), s.target);
                }
                Kind::MovJeqI => {
                    r!(s.dst) = r!(s.src);
                    next = next.wrapping_add(1);
                    jump_if!(r!(s.aux) == s.imm64(), s.target);
                }
                Kind::MovJneI => {
                    r!(s.dst) = r!(s.src);
                    next = next.wrapping_add(1);
                    jump_if!(r!(s.aux) != s.imm64(), s.target);
                }
                Kind::MovJa => {
                    r!(s.dst) = r!(s.src);
                    next = next.wrapping_add(1);
                    jump!(s.target);
                }
                // The test jumps over the `ja` (to `pc + 1` once `pc` is the `ja`'s
                // successor) or falls through to it.
                Kind::JeqIJa => {
                    next = next.wrapping_add(1);
                    ja_if!(r!(s.dst) != s.imm64(), s.target);
                }
                Kind::JneIJa => {
                    next = next.wrapping_add(1);
                    ja_if!(r!(s.dst) == s.imm64(), s.target);
                }
                Kind::MovAddI => {
                    r!(s.dst) = r!(s.src).wrapping_add(s.imm64());
                    next = next.wrapping_add(1);
                }
                Kind::AddRLdxB => {
                    let base = r!(s.aux).wrapping_add(r!(s.src));
                    r!(s.aux) = base;
                    next = next.wrapping_add(1);
                    r!(s.dst) = load_at!(base, s.off, 1);
                }
                Kind::AddRLdxW => {
                    let base = r!(s.aux).wrapping_add(r!(s.src));
                    r!(s.aux) = base;
                    next = next.wrapping_add(1);
                    r!(s.dst) = load_at!(base, s.off, 4);
                }
                Kind::AddRLdxDw => {
                    let base = r!(s.aux).wrapping_add(r!(s.src));
                    r!(s.aux) = base;
                    next = next.wrapping_add(1);
                    r!(s.dst) = load_at!(base, s.off, 8);
                }
                Kind::AndNegAnd32I => {
                    let mask = (lo(r!(s.dst)) & lo(s.imm64())).wrapping_neg();
                    r!(s.dst) = u64::from(mask & s.target);
                    next = next.wrapping_add(2);
                }
                Kind::LdxBMov => {
                    r!(s.dst) = load!(s.dst, s.src, s.off, 1);
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(1);
                }
                Kind::LdxWMov => {
                    r!(s.dst) = load!(s.dst, s.src, s.off, 4);
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(1);
                }
                Kind::LshIMov => {
                    r!(s.dst) <<= s.imm64() & 63;
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(1);
                }
                Kind::RshIMov => {
                    r!(s.dst) >>= s.imm64() & 63;
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(1);
                }
                Kind::LshMovAddLdxH => {
                    r!(s.aux) <<= s.imm64() & 63;
                    r!(s.aux2) = r!(s.src);
                    r!(s.aux2) = r!(s.aux2).wrapping_add(r!(s.target as u8));
                    next = next.wrapping_add(3);
                    r!(s.dst) = load!(s.dst, s.aux2, s.off, 2);
                }
                Kind::LshMovAddLdxW => {
                    r!(s.aux) <<= s.imm64() & 63;
                    r!(s.aux2) = r!(s.src);
                    r!(s.aux2) = r!(s.aux2).wrapping_add(r!(s.target as u8));
                    next = next.wrapping_add(3);
                    r!(s.dst) = load!(s.dst, s.aux2, s.off, 4);
                }
                Kind::LshMovAddLdxDw => {
                    r!(s.aux) <<= s.imm64() & 63;
                    r!(s.aux2) = r!(s.src);
                    r!(s.aux2) = r!(s.aux2).wrapping_add(r!(s.target as u8));
                    next = next.wrapping_add(3);
                    r!(s.dst) = load!(s.dst, s.aux2, s.off, 8);
                }
                Kind::LdxFpB => r!(s.dst) = frame_load!(s.off, 1),
                Kind::LdxFpH => r!(s.dst) = frame_load!(s.off, 2),
                Kind::LdxFpW => r!(s.dst) = frame_load!(s.off, 4),
                Kind::LdxFpDw => r!(s.dst) = frame_load!(s.off, 8),
                Kind::StxFpB => frame_store!(s.off, 1, r!(s.src)),
                Kind::StxFpH => frame_store!(s.off, 2, r!(s.src)),
                Kind::StxFpW => frame_store!(s.off, 4, r!(s.src)),
                Kind::StxFpDw => frame_store!(s.off, 8, r!(s.src)),
                Kind::StFpB => frame_store!(s.off, 1, s.imm64()),
                Kind::StFpH => frame_store!(s.off, 2, s.imm64()),
                Kind::StFpW => frame_store!(s.off, 4, s.imm64()),
                Kind::StFpDw => frame_store!(s.off, 8, s.imm64()),
                Kind::XorMul => {
                    r!(s.dst) ^= r!(s.src);
                    r!(s.dst) = r!(s.dst).wrapping_mul(r!(s.aux));
                    next = next.wrapping_add(1);
                }
                Kind::AddIMov32 => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    r!(s.aux) = u64::from(lo(r!(s.aux2)));
                    next = next.wrapping_add(1);
                }
                Kind::Mov32JltR => {
                    r!(s.dst) = u64::from(lo(r!(s.src)));
                    next = next.wrapping_add(1);
                    jump_if!(r!(s.aux) < r!(s.aux2), s.target);
                }
                Kind::Mov32JeqIJa => {
                    r!(s.dst) = u64::from(lo(r!(s.src)));
                    next = next.wrapping_add(2);
                    ja_if!(r!(s.aux) != s.imm64(), s.target);
                }
                Kind::Mov32Ja => {
                    r!(s.dst) = u64::from(lo(r!(s.src)));
                    next = next.wrapping_add(1);
                    jump!(s.target);
                }
                Kind::LdxWMov32 => {
                    r!(s.dst) = load!(s.dst, s.src, s.off, 4);
                    r!(s.aux) = u64::from(lo(r!(s.aux2)));
                    next = next.wrapping_add(1);
                }
                Kind::Mov32AndI => {
                    r!(s.dst) = u64::from(lo(r!(s.src)) & lo(s.imm64()));
                    next = next.wrapping_add(1);
                }
                Kind::Mov32AddI => {
                    r!(s.dst) = u64::from(lo(r!(s.src)).wrapping_add(lo(s.imm64())));
                    next = next.wrapping_add(1);
                }
                Kind::Mov32RshI => {
                    r!(s.dst) = u64::from(lo(r!(s.src)) >> (s.imm64() & 31));
                    next = next.wrapping_add(1);
                }
                Kind::RshIAndI => {
                    let mask = i64::from(s.target as i32) as u64;
                    r!(s.dst) = (r!(s.dst) >> (s.imm64() & 63)) & mask;
                    next = next.wrapping_add(1);
                }
                Kind::LddwAdd => {
                    r!(s.dst) = s.lddw_value().wrapping_add(r!(s.src));
                    next = next.wrapping_add(2);
                }
                Kind::LdxGlobalB => r!(s.dst) = global_load!(s.aux, r!(s.src), s.off, 1),
                Kind::LdxGlobalH => r!(s.dst) = global_load!(s.aux, r!(s.src), s.off, 2),
                Kind::LdxGlobalW => r!(s.dst) = global_load!(s.aux, r!(s.src), s.off, 4),
                Kind::LdxGlobalDw => r!(s.dst) = global_load!(s.aux, r!(s.src), s.off, 8),
                Kind::LddwAddLdxGlobalB => table_load!(s, global 1),
                Kind::LddwAddLdxGlobalH => table_load!(s, global 2),
                Kind::LddwAddLdxGlobalW => table_load!(s, global 4),
                Kind::LddwAddLdxGlobalDw => table_load!(s, global 8),
                Kind::LddwAddLdxB => table_load!(s, 1),
                Kind::LddwAddLdxH => table_load!(s, 2),
                Kind::LddwAddLdxW => table_load!(s, 4),
                Kind::LddwAddLdxDw => table_load!(s, 8),
                // The compare's registers are packed in `src` (low four bits first).
                Kind::AddIMovJltR => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    r!(s.aux) = r!(s.aux2);
                    next = next.wrapping_add(2);
                    jump_if!(r!(s.src & 15) < r!(s.src >> 4), s.target);
                }
                Kind::AddIMov32JltR => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    r!(s.aux) = u64::from(lo(r!(s.aux2)));
                    next = next.wrapping_add(2);
                    jump_if!(r!(s.src & 15) < r!(s.src >> 4), s.target);
                }
                Kind::AddIAddIJltR => {
                    r!(s.dst) = r!(s.dst).wrapping_add(s.imm64());
                    r!(s.aux) = r!(s.aux).wrapping_add(s.off as i64 as u64);
                    next = next.wrapping_add(2);
                    jump_if!(r!(s.src & 15) < r!(s.src >> 4), s.target);
                }
                Kind::AddRAddIJltR => {
                    r!(s.dst) = r!(s.dst).wrapping_add(r!(s.src));
                    r!(s.aux) = r!(s.aux).wrapping_add(s.imm64());
                    next = next.wrapping_add(2);
                    jump_if!(r!(s.aux2 & 15) < r!(s.aux2 >> 4), s.target);
                }
                Kind::Mov32AndILshLddwAdd => {
                    let masked = u64::from(lo(r!(s.src)) & (s.off as i32 as u32));
                    let index = masked << s.aux2;
                    r!(s.dst) = index;
                    r!(s.aux) = s.lddw_value().wrapping_add(index);
                    next = next.wrapping_add(5);
                }
                Kind::RshAndLddwAddLdxGlobalW => rsh_and_table_load!(s, 4),
                Kind::Mov32AndILsh => {
                    let masked = u64::from(lo(r!(s.src)) & lo(s.imm64()));
                    r!(s.dst) = masked << s.aux;
                    next = next.wrapping_add(2);
                }
                Kind::MovAddIAddR => {
                    r!(s.dst) = r!(s.src).wrapping_add(s.imm64()).wrapping_add(r!(s.aux));
                    next = next.wrapping_add(2);
                }
                Kind::FpIdxLdxB => fp_index_load!(s, 1),
                Kind::FpIdxLdxH => fp_index_load!(s, 2),
                Kind::FpIdxLdxW => fp_index_load!(s, 4),
                Kind::FpIdxLdxDw => fp_index_load!(s, 8),
                Kind::FpIdxStxB => fp_index_store!(s, 1),
                Kind::FpIdxStxW => fp_index_store!(s, 4),
                Kind::FpIdxStxDw => fp_index_store!(s, 8),
                Kind::Invalid => unreachable!(
                    "pc {}: the verifier admitted an instruction the interpreter cannot run",
                    pc!() - 1
                ),
            }
        }
    }
}

/// [`MemoryMap::load`] of 1, 2, 4 or 8 bytes, its check in one comparison: `off + size`
/// cannot overflow when `off` is a 32-bit offset, so `off + size <= read_len` is the
/// same test as `translate`'s overflow-proof pair.
#[inline(always)]
fn load_small(mem: &MemoryMap<'_>, addr: u64, size: u8) -> Result<u64, TrapKind> {
    let off = addr & 0xffff_ffff;
    if let Some(e) = mem.entries().get((addr >> 32) as usize) {
        if off + u64::from(size) <= e.read_len {
            // SAFETY: a row's `base` is valid for reads of `read_len` bytes while the map
            // lives (`crate::memory`'s invariant), and `off + size <= read_len`.
            return Ok(unsafe { read_host(e.base.wrapping_add(off as usize), u64::from(size)) });
        }
    }
    Err(mem.classify_fault(addr, u64::from(size), false))
}

/// [`MemoryMap::store`] of 1, 2, 4 or 8 bytes, checked as in [`load_small`].
#[inline(always)]
fn store_small(mem: &mut MemoryMap<'_>, addr: u64, size: u8, value: u64) -> Result<(), TrapKind> {
    let off = addr & 0xffff_ffff;
    if let Some(e) = mem.entries().get((addr >> 32) as usize) {
        if off + u64::from(size) <= e.write_len {
            // SAFETY: a row's `base` is valid for writes of `write_len` bytes while the
            // map lives (`crate::memory`'s invariant), and `off + size <= write_len`.
            unsafe { write_host(e.base.wrapping_add(off as usize), u64::from(size), value) };
            return Ok(());
        }
    }
    Err(mem.classify_fault(addr, u64::from(size), true))
}

/// The memory ops [`Interpreter::execute`] runs out of line, as seldom run: `ldxs<size>`
/// (sign-extending loads), `st<size>` of an immediate at an address not proven inside
/// the frame, and atomics. `Err` is the trap, at the op's own pc.
#[cold]
#[inline(never)]
fn rare_memory_op(
    s: &Slot,
    regs: &mut [u64; REG_FILE_SIZE],
    mem: &mut MemoryMap<'_>,
) -> Result<(), TrapKind> {
    let addr = regs[usize::from(s.dst)].wrapping_add(s.off as i64 as u64);
    let load = |size| {
        load_small(
            mem,
            regs[usize::from(s.src)].wrapping_add(s.off as i64 as u64),
            size,
        )
    };
    let atomic = |size| {
        let op = AtomicOp::from_u8(s.aux);
        let p = mem.translate(addr, size, true)?;
        let (value, expected) = (regs[usize::from(s.src)], regs[0]);
        // SAFETY: `translate` proved `size` writable (hence readable) bytes at `p` in a
        // region mapped for this run; concurrent accessors of a shared region are the
        // embedder's contract (`map_raw`).
        let old = unsafe {
            if size == 4 {
                atomic32(p, op, value, expected)
            } else {
                atomic64(p, op, value, expected)
            }
        };
        Ok((op, old))
    };
    match s.kind {
        // Sign-extending loads (cpu v4, RFC 9669 §5.2).
        Kind::LdxSB => regs[usize::from(s.dst)] = load(1)? as i8 as i64 as u64,
        Kind::LdxSH => regs[usize::from(s.dst)] = load(2)? as i16 as i64 as u64,
        Kind::LdxSW => regs[usize::from(s.dst)] = load(4)? as i32 as i64 as u64,
        Kind::StB => store_small(mem, addr, 1, s.imm64())?,
        Kind::StH => store_small(mem, addr, 2, s.imm64())?,
        Kind::StW => store_small(mem, addr, 4, s.imm64())?,
        Kind::StDw => store_small(mem, addr, 8, s.imm64())?,
        Kind::Atomic32 | Kind::Atomic64 => {
            let (op, old) = atomic(if s.kind == Kind::Atomic32 { 4 } else { 8 })?;
            write_back_atomic(regs, op, s.src, old);
        }
        other => unreachable!("{other:?} is not a rare memory op"),
    }
    Ok(())
}

/// Writes an atomic's fetched value: into `s.src` for the fetch variants and `xchg`, into
/// r0 for `cmpxchg` (RFC 9669 §5.3); 32-bit values arrive zero-extended.
#[inline(always)]
fn write_back_atomic(regs: &mut [u64; REG_FILE_SIZE], op: AtomicOp, src: u8, old: u64) {
    match op {
        AtomicOp::Add | AtomicOp::Or | AtomicOp::And | AtomicOp::Xor => {}
        AtomicOp::CmpXchg => regs[0] = old,
        _ => regs[usize::from(src)] = old,
    }
}

impl Interpreter {
    /// Puts each global section's host address in the register file (`GLOBAL_HOST + n`),
    /// for the loads [`known`] proved inside it when the program was decoded: the proof
    /// took the section's length from the program, so this checks that the run maps it
    /// with that length, as `RunMemory::with_mapped` does.
    #[inline(never)]
    fn map_globals(&self, mem: &MemoryMap<'_>, regs: &mut [u64; REG_FILE_SIZE]) {
        let sections = self.program.globals().iter();
        for (n, g) in sections.take(RegionIdx::GLOBALS_COUNT as usize).enumerate() {
            let row = &mem.entries()[RegionIdx::GLOBALS_FIRST.0 as usize + n];
            assert_eq!(
                row.read_len,
                g.data.len() as u64,
                "the interpreter runs with its global sections mapped by RunMemory"
            );
            regs[GLOBAL_HOST + n] = row.base.expose_provenance() as u64;
        }
    }
}

#[cfg(test)]
mod fused_tests;

#[cfg(test)]
mod tests {
    //! Every trap kind, the fuel and call rules, and each semantic pitfall listed in
    //! ebpf-notes.md, on hand-built programs (`Insn::new`, no assembler).

    use super::*;
    use crate::helper::{ArgKind, ConformanceHost, FunctionSig, FunctionTable, HelperAbort};
    use crate::limits::{STACK_FRAME_SIZE, STACK_SIZE};
    use crate::memory::RegionIdx;
    use crate::program::{GlobalSection, Program};
    use crate::trap::TrapKind;
    use crate::verifier::verify;

    const EXIT: Insn = Insn::new(OP_EXIT, 0, 0, 0, 0);

    fn alu64(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(CLASS_ALU64 | op | SRC_K, dst, 0, 0, imm)
    }
    fn alu64x(op: u8, dst: u8, src: u8) -> Insn {
        Insn::new(CLASS_ALU64 | op | SRC_X, dst, src, 0, 0)
    }
    fn alu32(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(CLASS_ALU | op | SRC_K, dst, 0, 0, imm)
    }
    fn alu32x(op: u8, dst: u8, src: u8) -> Insn {
        Insn::new(CLASS_ALU | op | SRC_X, dst, src, 0, 0)
    }
    fn mov(dst: u8, imm: i32) -> Insn {
        alu64(ALU_MOV, dst, imm)
    }
    fn movx(dst: u8, src: u8) -> Insn {
        alu64x(ALU_MOV, dst, src)
    }
    fn lddw(dst: u8, v: u64) -> [Insn; 2] {
        [
            Insn::new(OP_LDDW, dst, 0, 0, v as i32),
            Insn::new(0, 0, 0, 0, (v >> 32) as i32),
        ]
    }
    fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(CLASS_LDX | MODE_MEM | size, dst, src, off, 0)
    }
    fn ldxs(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(CLASS_LDX | MODE_MEMSX | size, dst, src, off, 0)
    }
    fn stx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(CLASS_STX | MODE_MEM | size, dst, src, off, 0)
    }
    fn st(size: u8, dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(CLASS_ST | MODE_MEM | size, dst, 0, off, imm)
    }
    fn atomic(size: u8, dst: u8, src: u8, off: i16, op: i32) -> Insn {
        Insn::new(CLASS_STX | MODE_ATOMIC | size, dst, src, off, op)
    }
    fn jmp(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(CLASS_JMP | op | SRC_K, dst, 0, off, imm)
    }
    fn ja(off: i16) -> Insn {
        Insn::new(OP_JA, 0, 0, off, 0)
    }
    fn call_local(imm: i32) -> Insn {
        Insn::new(OP_CALL, 0, CALL_SRC_LOCAL, 0, imm)
    }
    fn call(id: i32) -> Insn {
        Insn::new(OP_CALL, 0, 0, 0, id)
    }

    /// One slot or an `lddw` pair, for [`prog!`].
    trait Slots {
        fn slots(&self) -> &[Insn];
    }
    impl Slots for Insn {
        fn slots(&self) -> &[Insn] {
            std::slice::from_ref(self)
        }
    }
    impl Slots for [Insn; 2] {
        fn slots(&self) -> &[Insn] {
            self
        }
    }

    /// Concatenates single slots and `lddw` pairs.
    macro_rules! prog {
        ($($e:expr),* $(,)?) => {{
            let mut v: Vec<Insn> = Vec::new();
            $( v.extend_from_slice(Slots::slots(&$e)); )*
            v
        }};
    }

    fn interp(program: Program, table: FunctionTable) -> Interpreter {
        let verified = verify(program, Arc::new(table)).unwrap_or_else(|e| panic!("{e}"));
        Interpreter::new(Arc::new(verified))
    }

    /// Runs `insns` with `mem` mapped read-write in region 2 (r1 = its address, r2 = its
    /// length) under `fuel`, returning the outcome and the memory after the run.
    fn run_full(insns: Vec<Insn>, mem: &mut [u8], fuel: u64) -> RunOutcome {
        let engine = interp(
            Program::from_insns("t", insns),
            FunctionTable::conformance(),
        );
        let mut map = MemoryMap::new();
        let len = mem.len() as u64;
        let addr = map
            .map_read_write(RegionIdx::EMBEDDER_FIRST, mem)
            .expect("maps");
        engine.run(
            &mut map,
            [addr, len, 0, 0, 0],
            &RunOptions {
                fuel,
                ..RunOptions::default()
            },
            &mut ConformanceHost,
        )
    }

    fn run(insns: Vec<Insn>) -> u64 {
        let out = run_full(insns, &mut [], 1_000_000);
        out.result.unwrap_or_else(|t| panic!("trapped: {t}"))
    }

    fn run_mem(insns: Vec<Insn>, mem: &mut [u8]) -> u64 {
        let out = run_full(insns, mem, 1_000_000);
        out.result.unwrap_or_else(|t| panic!("trapped: {t}"))
    }

    fn trap(insns: Vec<Insn>, mem: &mut [u8]) -> Trap {
        match run_full(insns, mem, 1_000_000).result {
            Err(t) => t,
            Ok(v) => panic!("expected a trap, got r0 = {v:#x}"),
        }
    }

    const MEM: u64 = RegionIdx::EMBEDDER_FIRST.vaddr(0);
    const STACK_END: u64 = RegionIdx::STACK.vaddr(STACK_SIZE as u32);

    // ---- Traps ----

    #[test]
    fn out_of_bounds_stack() {
        // Past the top of the stack: r10 itself, read through a copy.
        let t = trap(prog![movx(1, 10), ldx(SIZE_DW, 0, 1, 0), EXIT], &mut []);
        let kind = TrapKind::OutOfBounds {
            addr: STACK_END,
            size: 8,
            write: false,
        };
        assert_eq!(t, Trap { pc: 1, kind });
        // Below the bottom of the whole stack.
        let t = trap(prog![movx(1, 10), st(SIZE_B, 1, -4097, 0), EXIT], &mut []);
        let kind = TrapKind::OutOfBounds {
            addr: STACK_END - 4097,
            size: 1,
            write: true,
        };
        assert_eq!(t, Trap { pc: 1, kind });
        // Straddling the end.
        let t = trap(prog![movx(1, 10), stx(SIZE_W, 1, 1, -2), EXIT], &mut []);
        assert_eq!(
            t.kind,
            TrapKind::OutOfBounds {
                addr: STACK_END - 2,
                size: 4,
                write: true
            }
        );
    }

    #[test]
    fn out_of_bounds_embedder_region() {
        let mut mem = [1u8, 2, 3, 4];
        let t = trap(prog![ldx(SIZE_W, 0, 1, 1), EXIT], &mut mem);
        assert_eq!(
            t,
            Trap {
                pc: 0,
                kind: TrapKind::OutOfBounds {
                    addr: MEM + 1,
                    size: 4,
                    write: false
                }
            }
        );
        let t = trap(prog![mov(0, 0), st(SIZE_H, 1, 3, 9), EXIT], &mut mem);
        assert_eq!(
            t,
            Trap {
                pc: 1,
                kind: TrapKind::OutOfBounds {
                    addr: MEM + 3,
                    size: 2,
                    write: true
                }
            }
        );
        // A negative offset wraps below the region's start: out of bounds too.
        let t = trap(prog![ldx(SIZE_B, 0, 1, -1), EXIT], &mut mem);
        assert_eq!(
            t.kind,
            TrapKind::OutOfBounds {
                addr: MEM - 1,
                size: 1,
                write: false
            }
        );
        assert_eq!(mem, [1, 2, 3, 4], "a failed store writes nothing");
    }

    #[test]
    fn null_and_unmapped() {
        let t = trap(prog![mov(1, 0), ldx(SIZE_B, 0, 1, 0), EXIT], &mut []);
        assert_eq!(
            t,
            Trap {
                pc: 1,
                kind: TrapKind::OutOfBounds {
                    addr: 0,
                    size: 1,
                    write: false
                }
            }
        );
        // Region 7 is not mapped; region 40 is beyond the table.
        for addr in [RegionIdx(7).vaddr(0), 40u64 << 32, u64::MAX] {
            let t = trap(prog![lddw(1, addr), ldx(SIZE_DW, 0, 1, 0), EXIT], &mut []);
            assert_eq!(
                t.kind,
                TrapKind::OutOfBounds {
                    addr,
                    size: 8,
                    write: false
                }
            );
            assert_eq!(t.pc, 2);
        }
    }

    #[test]
    fn globals_and_read_only() {
        let mut program = Program::from_insns(
            "g",
            prog![
                lddw(1, RegionIdx::global(0).unwrap().vaddr(0)),
                lddw(2, RegionIdx::global(1).unwrap().vaddr(0)),
                ldx(SIZE_W, 0, 1, 0), // rodata word
                stx(SIZE_W, 2, 0, 0), // copy into .data
                ldx(SIZE_W, 0, 2, 0),
                jmp(JMP_JNE, 3, 0, 1), // pc 7: r3 == 0 returns the word
                EXIT,
                jmp(JMP_JNE, 3, 1, 1), // r3 == 1 writes .rodata
                st(SIZE_B, 1, 0, 1),   // pc 10
                ldx(SIZE_B, 0, 2, 4),  // pc 11: reads past .data
                EXIT,
            ],
        );
        program.globals = vec![
            GlobalSection {
                name: ".rodata".into(),
                data: vec![7, 0, 0, 0],
                writable: false,
            },
            GlobalSection {
                name: ".data".into(),
                data: vec![0; 4],
                writable: true,
            },
        ];
        let engine = interp(program, FunctionTable::new());
        let run = |r3: u64| {
            let mut map = MemoryMap::new();
            engine.run(
                &mut map,
                [0, 0, r3, 0, 0],
                &RunOptions::default(),
                &mut ConformanceHost,
            )
        };
        assert_eq!(run(0).result, Ok(7));
        let ro = RegionIdx::global(0).unwrap().vaddr(0);
        assert_eq!(
            run(1).result,
            Err(Trap {
                pc: 10,
                kind: TrapKind::ReadOnly { addr: ro, size: 1 }
            })
        );
        let data_end = RegionIdx::global(1).unwrap().vaddr(4);
        let kind = TrapKind::OutOfBounds {
            addr: data_end,
            size: 1,
            write: false,
        };
        assert_eq!(run(2).result, Err(Trap { pc: 11, kind }));
        // Writable globals are fresh for every run.
        let mut map = MemoryMap::new();
        let twice = |map: &mut MemoryMap<'_>| {
            engine.run(
                map,
                [0, 0, 0, 0, 0],
                &RunOptions::default(),
                &mut ConformanceHost,
            )
        };
        assert_eq!(twice(&mut map).result, Ok(7));
        assert_eq!(twice(&mut map).result, Ok(7));
        // The engine unmapped its regions after the run.
        assert!(map.load(ro, 1).is_err());
        assert!(map.load(RegionIdx::STACK.vaddr(0), 1).is_err());
    }

    #[test]
    fn read_only_embedder_region() {
        let engine = interp(
            Program::from_insns("ro", prog![st(SIZE_B, 1, 0, 1), EXIT]),
            FunctionTable::new(),
        );
        let buf = [0u8; 4];
        let mut map = MemoryMap::new();
        let addr = map.map_read_only(RegionIdx::EMBEDDER_FIRST, &buf).unwrap();
        let out = engine.run(
            &mut map,
            [addr, 0, 0, 0, 0],
            &RunOptions::default(),
            &mut ConformanceHost,
        );
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 0,
                kind: TrapKind::ReadOnly { addr, size: 1 }
            })
        );
        // Atomics are writes too.
        let engine = interp(
            Program::from_insns("ro", prog![atomic(SIZE_W, 1, 2, 0, ATOMIC_ADD), EXIT]),
            FunctionTable::new(),
        );
        let out = engine.run(
            &mut map,
            [addr, 0, 0, 0, 0],
            &RunOptions::default(),
            &mut ConformanceHost,
        );
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 0,
                kind: TrapKind::ReadOnly { addr, size: 4 }
            })
        );
    }

    #[test]
    fn fuel_exhaustion_on_infinite_loop() {
        let out = run_full(prog![ja(-1)], &mut [], 100);
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 0,
                kind: TrapKind::FuelExhausted { budget: 100 }
            })
        );
        // 101 iterations of cost 1: the charge that exceeds the budget is counted.
        assert_eq!(out.fuel_used, 101);
        // A budget of 0 stops at the first backward jump.
        let out = run_full(prog![mov(0, 0), ja(-2)], &mut [], 0);
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 1,
                kind: TrapKind::FuelExhausted { budget: 0 }
            })
        );
        assert_eq!(out.fuel_used, 2);
    }

    #[test]
    fn fuel_accounting() {
        // Loop of 3 slots run 10 times: 10 taken backward jumps of cost 3, minus the
        // last not taken; plus 1 for a helper call; forward jumps are free.
        let insns = prog![
            mov(0, 0),
            ja(0),                // forward, free
            alu64(ALU_ADD, 0, 1), // loop head (pc 2)
            mov(1, 0),
            jmp(JMP_JLT, 0, 10, -3), // back to pc 2 while r0 < 10: cost 3
            call(5),                 // r0 = r1 = 0, cost 1
            alu64(ALU_ADD, 0, 10),
            EXIT,
        ];
        let out = run_full(insns, &mut [], 1000);
        assert_eq!(out.result, Ok(10));
        assert_eq!(out.fuel_used, 9 * 3 + 1);
        // Exactly enough fuel succeeds; one less traps at the call.
        let insns2 = prog![mov(1, 3), call(5), call(5), EXIT];
        assert_eq!(run_full(insns2.clone(), &mut [], 2).result, Ok(3));
        let out = run_full(insns2, &mut [], 1);
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 2,
                kind: TrapKind::FuelExhausted { budget: 1 }
            })
        );
        assert_eq!(out.fuel_used, 2);
    }

    #[test]
    fn call_depth_on_recursion() {
        // main: call f; exit.  f: call f; exit.
        let insns = prog![call_local(1), EXIT, call_local(-1), EXIT];
        let out = run_full(insns, &mut [], 1000);
        let depth_max = CALL_DEPTH_MAX as u32;
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 2,
                kind: TrapKind::CallDepthExceeded { depth_max }
            })
        );
        // One call from main and seven recursive calls fit (8 frames); the eighth
        // recursive call is charged, then traps.
        assert_eq!(out.fuel_used, CALL_DEPTH_MAX as u64);
    }

    #[test]
    fn bounded_recursion_returns() {
        // f(r1): if r1 == 0 return 0; return f(r1 - 1) + 1, with r1 = 6: main and
        // f(6)..f(0) are exactly 8 frames.
        let insns = prog![
            mov(1, 6),
            call_local(1),
            EXIT,
            jmp(JMP_JNE, 1, 0, 2), // f at pc 3
            mov(0, 0),
            EXIT,
            alu64(ALU_SUB, 1, 1),
            call_local(-5),
            alu64(ALU_ADD, 0, 1),
            EXIT,
        ];
        assert_eq!(run(insns), 6);
    }

    #[test]
    fn unknown_helper_via_callx() {
        let insns = prog![mov(2, 99), Insn::new(OP_CALLX, 2, 0, 0, 0), EXIT];
        let out = run_full(insns, &mut [], 10);
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 1,
                kind: TrapKind::UnknownHelper { id: 99 }
            })
        );
        assert_eq!(out.fuel_used, 1);
        // A negative id is reported as such.
        let insns = prog![mov(2, -1), Insn::new(OP_CALLX, 2, 0, 0, 0), EXIT];
        assert_eq!(
            trap(insns, &mut []).kind,
            TrapKind::UnknownHelper { id: -1 }
        );
        // callx to a known helper works (bpf_conformance callx: r2 = 5).
        let insns = prog![mov(1, 42), mov(2, 5), Insn::new(OP_CALLX, 2, 0, 0, 0), EXIT];
        assert_eq!(run(insns), 42);
    }

    /// A host whose helper 7 sums the bytes `(r1, r2)` points to.
    struct SumHost;
    impl HelperHost for SumHost {
        fn call(
            &mut self,
            id: u32,
            args: [u64; 5],
            mem: &mut MemoryMap<'_>,
        ) -> Result<u64, HelperAbort> {
            match id {
                7 => {
                    let bytes = mem.slice(args[0], args[1]).map_err(|k| HelperAbort {
                        code: -14,
                        message: k.to_string(),
                    })?;
                    Ok(bytes.iter().map(|&b| u64::from(b)).sum())
                }
                _ => Err(HelperAbort {
                    code: -38,
                    message: format!("no helper {id}"),
                }),
            }
        }
    }

    fn sum_table() -> FunctionTable {
        let mut t = FunctionTable::new();
        t.insert(FunctionSig {
            name: "sum".into(),
            id: 7,
            args: vec![ArgKind::PtrIn { len_arg: 1 }, ArgKind::Scalar],
            version: 1,
            doc: String::new(),
        })
        .unwrap();
        t.insert(FunctionSig {
            name: "nothing".into(),
            id: 8,
            args: vec![],
            version: 1,
            doc: String::new(),
        })
        .unwrap();
        t
    }

    #[test]
    fn helper_pointer_argument_out_of_range() {
        let engine = interp(Program::from_insns("h", prog![call(7), EXIT]), sum_table());
        let mut buf = [1u8, 2, 3];
        let mut map = MemoryMap::new();
        let addr = map
            .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut buf)
            .unwrap();
        let opts = RunOptions::default();
        let out = engine.run(&mut map, [addr, 3, 0, 0, 0], &opts, &mut SumHost);
        assert_eq!(out.result, Ok(6));
        let out = engine.run(&mut map, [addr, 4, 0, 0, 0], &opts, &mut SumHost);
        let kind = TrapKind::HelperArgument {
            helper: 7,
            arg: 0,
            addr,
            len: 4,
        };
        assert_eq!(out.result, Err(Trap { pc: 0, kind }));
        // The stack is a valid argument.
        let insns = prog![
            st(SIZE_B, 10, -1, 9),
            movx(1, 10),
            alu64(ALU_ADD, 1, -1),
            mov(2, 1),
            call(7),
            EXIT
        ];
        let engine = interp(Program::from_insns("h", insns), sum_table());
        assert_eq!(
            engine.run(&mut map, [0; 5], &opts, &mut SumHost).result,
            Ok(9)
        );
    }

    #[test]
    fn helper_abort() {
        let engine = interp(
            Program::from_insns("h", prog![mov(0, 0), call(8), EXIT]),
            sum_table(),
        );
        let out = engine.run(
            &mut MemoryMap::new(),
            [0; 5],
            &RunOptions::default(),
            &mut SumHost,
        );
        let kind = TrapKind::HelperAbort {
            helper: 8,
            code: -38,
            message: "no helper 8".into(),
        };
        assert_eq!(out.result, Err(Trap { pc: 1, kind }));
    }

    /// A host whose helper 9 panics and helper 10 unmaps the stack.
    struct RudeHost;
    impl HelperHost for RudeHost {
        fn call(
            &mut self,
            id: u32,
            _args: [u64; 5],
            mem: &mut MemoryMap<'_>,
        ) -> Result<u64, HelperAbort> {
            match id {
                9 => panic!("helper 9 always panics"),
                10 => {
                    mem.unmap(RegionIdx::STACK);
                    Ok(0)
                }
                _ => Ok(0),
            }
        }
    }

    /// A host whose helper 11 unmaps the first embedder region.
    struct UnmapHost;
    impl HelperHost for UnmapHost {
        fn call(
            &mut self,
            id: u32,
            _: [u64; 5],
            mem: &mut MemoryMap<'_>,
        ) -> Result<u64, HelperAbort> {
            assert_eq!(id, 11);
            mem.unmap(RegionIdx::EMBEDDER_FIRST);
            Ok(0)
        }
    }

    /// Loads and stores keep a region's exact bounds for every access size after earlier
    /// accesses to it, a region read first is still read-only, a region a helper unmaps
    /// faults at the next access, and four regions read in turn give their own bytes:
    /// what any caching of regions in the interpreter must keep.
    #[test]
    // One scenario in its order: each step depends on the state the previous left.
    #[allow(clippy::too_many_lines)]
    fn region_bounds_stay_exact_across_accesses_and_helpers() {
        let mut t = FunctionTable::new();
        t.insert(FunctionSig {
            name: "unmap".into(),
            id: 11,
            args: vec![],
            version: 1,
            doc: String::new(),
        })
        .unwrap();
        let run = |insns: Vec<Insn>, map: &mut MemoryMap<'_>, args: [u64; 5]| {
            let engine = interp(Program::from_insns("c", insns), t.clone());
            engine.run(map, args, &RunOptions::default(), &mut UnmapHost)
        };
        let sizes = [(SIZE_B, 1u8), (SIZE_H, 2), (SIZE_W, 4), (SIZE_DW, 8)];
        // Every size at every offset of a 16-byte region, after a first access filled the
        // cache with it: in bounds up to the last byte, a trap one past.
        let mut bytes: Vec<u8> = (1..=16).collect();
        for (code, n) in sizes {
            for o in 0..=16i16 {
                let mut map = MemoryMap::new();
                let a = map
                    .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut bytes)
                    .unwrap();
                let fits = o as u64 + u64::from(n) <= 16;
                let want_load = if fits {
                    let mut v = [0u8; 8];
                    for (i, b) in v.iter_mut().take(usize::from(n)).enumerate() {
                        *b = o as u8 + 1 + i as u8;
                    }
                    Ok(u64::from_le_bytes(v))
                } else {
                    Err(Trap {
                        pc: 1,
                        kind: TrapKind::OutOfBounds {
                            addr: a + o as u64,
                            size: u32::from(n),
                            write: false,
                        },
                    })
                };
                let out = run(
                    prog![ldx(SIZE_B, 3, 1, 0), ldx(code, 0, 1, o), EXIT],
                    &mut map,
                    [a, 0, 0, 0, 0],
                );
                assert_eq!(out.result, want_load, "load of {n} at {o}");
                let out = run(
                    prog![st(SIZE_B, 1, 0, 1), stx(code, 1, 2, o), mov(0, 7), EXIT],
                    &mut map,
                    [a, u64::MAX, 0, 0, 0],
                );
                let want_store = if fits {
                    Ok(7)
                } else {
                    Err(Trap {
                        pc: 1,
                        kind: TrapKind::OutOfBounds {
                            addr: a + o as u64,
                            size: u32::from(n),
                            write: true,
                        },
                    })
                };
                assert_eq!(out.result, want_store, "store of {n} at {o}");
                // Put the bytes back (the stores wrote 0xff).
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = i as u8 + 1;
                }
            }
        }
        // A read-only region cached for loads is still read-only.
        let ro = [5u8; 8];
        let mut map = MemoryMap::new();
        let a = map.map_read_only(RegionIdx::EMBEDDER_FIRST, &ro).unwrap();
        let out = run(
            prog![ldx(SIZE_B, 0, 1, 0), stx(SIZE_B, 1, 0, 1), EXIT],
            &mut map,
            [a, 0, 0, 0, 0],
        );
        let kind = TrapKind::ReadOnly {
            addr: a + 1,
            size: 1,
        };
        assert_eq!(out.result, Err(Trap { pc: 1, kind }));
        // A helper that unmaps a cached region: the next load and store trap.
        let mut buf = [3u8; 8];
        for second in [ldx(SIZE_B, 0, 1, 0), stx(SIZE_B, 1, 0, 0)] {
            let mut map = MemoryMap::new();
            let a = map
                .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut buf)
                .unwrap();
            let insns = prog![
                ldx(SIZE_B, 0, 1, 0),
                stx(SIZE_B, 1, 0, 0),
                call(11),
                second,
                EXIT
            ];
            let out = run(insns, &mut map, [a, 0, 0, 0, 0]);
            let write = second.opc & 0x07 == CLASS_STX;
            let kind = TrapKind::OutOfBounds {
                addr: a,
                size: 1,
                write,
            };
            assert_eq!(out.result, Err(Trap { pc: 3, kind }));
        }
        // Four regions in turn (more than the rows of a cache), twice round.
        let mut bufs: Vec<[u8; 8]> = (0..4u8).map(|r| [10 * (r + 1); 8]).collect();
        let mut map = MemoryMap::new();
        let mut args = [0u64; 5];
        for (n, b) in bufs.iter_mut().enumerate() {
            args[n] = map
                .map_read_write(RegionIdx::embedder(n as u32).unwrap(), b)
                .unwrap();
        }
        let mut insns = prog![mov(0, 0)];
        for _ in 0..2 {
            for r in 1..=4 {
                insns.extend(prog![ldx(SIZE_B, 6, r, 7), alu64(ALU_ADD, 0, 0)]);
                insns.push(Insn::new(CLASS_ALU64 | ALU_ADD | SRC_X, 0, 6, 0, 0));
            }
        }
        insns.push(EXIT);
        assert_eq!(
            run(insns, &mut map, args).result,
            Ok(2 * (10 + 20 + 30 + 40))
        );
    }

    /// A helper that panics, or remaps the stack, aborts the run with a trap at the
    /// call (as the JIT's trampoline reports it) instead of unwinding through the
    /// interpreter; the call's fuel is charged.
    #[test]
    fn helper_panics_and_stack_remaps_become_aborts() {
        let mut t = FunctionTable::new();
        for (id, name) in [(9, "panic"), (10, "unmap_stack")] {
            t.insert(FunctionSig {
                name: name.into(),
                id,
                args: vec![],
                version: 1,
                doc: String::new(),
            })
            .unwrap();
        }
        let insns = prog![mov(0, 3), call(9), EXIT];
        let engine = interp(Program::from_insns("h", insns), t.clone());
        let opts = RunOptions::default();
        let out = engine.run(&mut MemoryMap::new(), [0; 5], &opts, &mut RudeHost);
        let Err(Trap {
            pc: 1,
            kind:
                TrapKind::HelperAbort {
                    helper: 9,
                    code: HELPER_PANIC_CODE,
                    message,
                },
        }) = &out.result
        else {
            panic!("a panicking helper aborts the run: {:?}", out.result);
        };
        assert!(message.contains("always panics"), "{message}");
        assert_eq!(out.fuel_used, rules::CALL_COST);
        let insns = prog![call(10), ldx(SIZE_DW, 0, 10, -8), EXIT];
        let engine = interp(Program::from_insns("h", insns), t);
        let out = engine.run(&mut MemoryMap::new(), [0; 5], &opts, &mut RudeHost);
        assert!(
            matches!(
                out.result,
                Err(Trap {
                    pc: 0,
                    kind: TrapKind::HelperAbort {
                        helper: 10,
                        code: HELPER_PANIC_CODE,
                        ..
                    }
                })
            ),
            "{:?}",
            out.result
        );
    }

    // ---- Fused sequences ----

    /// Runs `insns` with `args` on the fused and the unfused decoding, asserts they
    /// agree (value or trap, fuel) and returns the outcome.
    fn run_both(insns: Vec<Insn>, args: [u64; 5], fuel: u64) -> RunOutcome {
        let v = verify(
            Program::from_insns("f", insns),
            Arc::new(FunctionTable::conformance()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let v = Arc::new(v);
        let opts = RunOptions {
            fuel,
            ..RunOptions::default()
        };
        let fused = Interpreter::new(Arc::clone(&v));
        let plain = Interpreter::unfused(v);
        let a = fused.run(&mut MemoryMap::new(), args, &opts, &mut ConformanceHost);
        let b = plain.run(&mut MemoryMap::new(), args, &opts, &mut ConformanceHost);
        assert_eq!(a, b, "fused and unfused decodings disagree");
        a
    }

    #[test]
    fn frame_accesses_proven_at_decode() {
        use Kind::*;
        // Decoding alone: offsets -8 and -512 are proven; 504 (the caller's frame) and
        // -1 for two bytes (past the frame's end) keep the checked path (the verifier
        // rejects both, so only decoding sees them).
        let raw = [
            st(SIZE_DW, 10, -8, 1),
            stx(SIZE_B, 10, 1, -512),
            ldx(SIZE_DW, 0, 10, 504),
            ldx(SIZE_H, 3, 10, -2),
            ldx(SIZE_H, 4, 10, -1),
            stx(SIZE_W, 10, 1, -513),
            ldx(SIZE_W, 0, 1, -8),
            EXIT,
        ];
        let kinds: Vec<Kind> = decode_program(&raw, true, None)
            .iter()
            .map(|s| s.kind)
            .collect();
        assert_eq!(
            kinds,
            [StFpDw, StxFpB, LdxDw, LdxFpH, LdxH, StxW, LdxW, Exit]
        );
        assert_eq!(decode_program(&raw, false, None)[0].kind, StDw);
        // The decoding for counted runs gets them too.
        let blocks = crate::count::BlockMap::new(&raw, 0);
        let counted = decode_program(&raw, true, Some(blocks.block_table()));
        let counted: Vec<Kind> = counted.iter().map(|s| s.kind).collect();
        assert_eq!(counted, kinds);
        // The caller stores at both ends of its frame and calls a function that writes
        // its own frame at the same offsets; the caller's bytes must be intact.
        let insns = prog![
            st(SIZE_DW, 10, -8, 111),
            mov(1, 7),
            stx(SIZE_B, 10, 1, -512),
            call_local(5),
            ldx(SIZE_DW, 2, 10, -8),
            alu64x(ALU_ADD, 0, 2),
            ldx(SIZE_B, 2, 10, -512),
            alu64x(ALU_ADD, 0, 2),
            EXIT,
            st(SIZE_DW, 10, -8, 222),
            st(SIZE_B, 10, -512, 9),
            ldx(SIZE_DW, 0, 10, -8),
            ldx(SIZE_B, 3, 10, -512),
            alu64x(ALU_ADD, 0, 3),
            EXIT
        ];
        // The callee's 222 + 9, then the caller's 111 and 7: 349.
        assert_eq!(run_both(insns.to_vec(), [0; 5], 1000).result, Ok(349));
        // Deep recursion moves the frame down to the stack's first byte: each level
        // stores its depth at `r10 - 512` and `r10 - 8`, and sums them on the way out.
        let deep = prog![
            mov(1, 0),
            call_local(1),
            EXIT,
            stx(SIZE_DW, 10, 1, -8),
            stx(SIZE_B, 10, 1, -512),
            alu64(ALU_ADD, 1, 1),
            mov(0, 0),
            jmp(JMP_JGE, 1, CALL_DEPTH_MAX as i32 - 1, 1),
            call_local(-6),
            ldx(SIZE_DW, 2, 10, -8),
            alu64x(ALU_ADD, 0, 2),
            ldx(SIZE_B, 2, 10, -512),
            alu64x(ALU_ADD, 0, 2),
            EXIT
        ];
        // Depths 0..=6 stored twice each: 2 * 21.
        assert_eq!(run_both(deep.to_vec(), [0; 5], 1000).result, Ok(42));
    }

    #[test]
    fn fused_alu_pairs() {
        // add-imm then mov reading the register just added to; two add-imms on one
        // register; add-reg then add-imm on its source.
        let insns = prog![
            alu64(ALU_ADD, 1, 5),
            movx(2, 1),
            alu64(ALU_ADD, 3, 3),
            alu64(ALU_ADD, 3, -10),
            alu64x(ALU_ADD, 4, 5),
            alu64(ALU_ADD, 5, 7),
            movx(0, 2),
            alu64x(ALU_ADD, 0, 3),
            alu64x(ALU_ADD, 0, 4),
            alu64x(ALU_ADD, 0, 5),
            EXIT,
        ];
        let ops = decode_program(&insns, true, None);
        let kinds: Vec<Kind> = ops.iter().map(|s| s.kind).collect();
        assert_eq!(
            &kinds[..5],
            [
                Kind::AddIMov,
                Kind::Mov64R,
                Kind::AddIAddI,
                Kind::Add64I,
                Kind::AddRAddI
            ]
        );
        // r2 = 1 + 5; r3 = 100 - 7; r4 = 1000 + 10000; r5 = 10000 + 7.
        let out = run_both(insns, [1, 0, 100, 1000, 10000], 0);
        assert_eq!(out.result, Ok(6 + 93 + 11_000 + 10_007));
    }

    #[test]
    fn fused_xor_mul() {
        // `h ^= r2; h *= r3`, and `mul r0, r0` after the xor squares the xored value.
        let hash = prog![
            movx(0, 1),
            alu64x(ALU_XOR, 0, 2),
            alu64x(ALU_MUL, 0, 3),
            EXIT
        ];
        let square = prog![
            movx(0, 1),
            alu64x(ALU_XOR, 0, 2),
            alu64x(ALU_MUL, 0, 0),
            EXIT
        ];
        for (insns, want) in [(hash, (5 ^ 3) * 7), (square, (5 ^ 3) * (5 ^ 3))] {
            assert_eq!(decode_program(&insns, true, None)[1].kind, Kind::XorMul);
            assert_eq!(run_both(insns, [5, 3, 7, 0, 0], 0).result, Ok(want));
        }
    }

    #[test]
    fn fused_mov_and_compare() {
        use Kind::*;
        // r0 = 1 unless `r4 = r1; j<cmp> r4, r2` jumps: the compare sees the moved value
        // (fused with the copy for `jlt` only, the loop latch kernels run).
        let cases = [
            (JMP_JEQ, Mov64R),
            (JMP_JNE, Mov64R),
            (JMP_JGT, Mov64R),
            (JMP_JGE, Mov64R),
            (JMP_JLT, MovJltR),
            (JMP_JLE, Mov64R),
        ];
        for (op, kind) in cases {
            let insns = prog![
                mov(0, 0),
                movx(4, 1),
                Insn::new(CLASS_JMP | op | SRC_X, 4, 2, 1, 0),
                mov(0, 1),
                EXIT,
            ];
            assert_eq!(decode_program(&insns, true, None)[1].kind, kind);
            for (a, b) in [(1u64, 2u64), (2, 1), (3, 3), (u64::MAX, 0)] {
                let taken = match op {
                    JMP_JEQ => a == b,
                    JMP_JNE => a != b,
                    JMP_JGT => a > b,
                    JMP_JGE => a >= b,
                    JMP_JLT => a < b,
                    _ => a <= b,
                };
                let out = run_both(insns.clone(), [a, b, 0, 0, 0], 10);
                assert_eq!(out.result, Ok(u64::from(!taken)), "op {op:#x} on {a}, {b}");
            }
        }
        for (op, kind) in [(JMP_JEQ, MovJeqI), (JMP_JNE, MovJneI)] {
            let insns = prog![mov(0, 0), movx(4, 1), jmp(op, 4, -3, 1), mov(0, 1), EXIT];
            assert_eq!(decode_program(&insns, true, None)[1].kind, kind);
            for a in [-3i64 as u64, 3, 0xffff_fffd] {
                let taken = (a == -3i64 as u64) == (op == JMP_JEQ);
                let out = run_both(insns.clone(), [a, 0, 0, 0, 0], 10);
                assert_eq!(out.result, Ok(u64::from(!taken)));
            }
        }
        // `mov; ja` backwards: charged as the `ja`, at its pc.
        let insns = prog![mov(0, 0), alu64(ALU_SUB, 0, 1), movx(2, 0), ja(-3), EXIT];
        assert_eq!(decode_program(&insns, true, None)[2].kind, MovJa);
        let out = run_both(insns, [0; 5], 30);
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 3,
                kind: TrapKind::FuelExhausted { budget: 30 }
            })
        );
        assert_eq!(out.fuel_used, 33);
    }

    #[test]
    fn counted_runs_fuse_inside_blocks() {
        use Kind::*;
        // pc 2-4: `mov; add; ldxb` with pc 3 the back-edge's target; pc 7-8: `jeq +1; ja`.
        let insns = prog![
            mov(0, 0),
            mov(2, 0),
            movx(3, 1),
            alu64x(ALU_ADD, 3, 2),
            ldx(SIZE_B, 4, 3, 0),
            alu64x(ALU_ADD, 0, 4),
            alu64(ALU_ADD, 2, 1),
            jmp(JMP_JEQ, 2, 8, 1),
            ja(-6),
            EXIT
        ];
        let v = Arc::new(
            verify(
                Program::from_insns("f", insns.clone()),
                Arc::new(FunctionTable::new()),
            )
            .unwrap(),
        );
        assert_eq!(v.blocks().leaders(), &[0, 3, 8, 9]);
        let free = decode_program(&insns, true, None);
        let counted = decode_program(&insns, true, Some(v.blocks().block_table()));
        // The indexed load would run the leader at pc 3 unseen: not fused for counting.
        assert_eq!((free[2].kind, counted[2].kind), (MovAddLdxB, Mov64R));
        // The exit test keeps its fusion: it bumps the `ja`'s block itself.
        assert_eq!((free[7].kind, counted[7].kind), (JeqIJa, JeqIJa));
        let leads: Vec<u8> = counted.iter().map(|s| s.lead).collect();
        assert_eq!(leads, [1, 0, 0, 1, 0, 0, 0, 0, 1, 1]);
        // Every fuel budget, trapping anywhere in the loop: the same outcome and the
        // same counts as the unfused slots.
        for fuel in 0..80 {
            let mut outs = Vec::new();
            for engine in [
                Interpreter::new(Arc::clone(&v)),
                Interpreter::unfused(Arc::clone(&v)),
            ] {
                let counts = ExecCounts::new(v.blocks());
                let opts = RunOptions {
                    fuel,
                    counts: Some(&counts),
                    ..RunOptions::default()
                };
                let mut buf: Vec<u8> = (1..=64u8).collect();
                let mut map = MemoryMap::new();
                let mem = map
                    .map_read_only(RegionIdx::EMBEDDER_FIRST, &buf[..])
                    .unwrap();
                let out = engine.run(&mut map, [mem, 0, 0, 0, 0], &opts, &mut ConformanceHost);
                buf.clear();
                outs.push((out, counts.values()));
            }
            assert_eq!(outs[0], outs[1], "fuel {fuel}");
            if fuel == 79 {
                // Bytes at offsets 0, 1, 3, 6, 10, 15, 21, 28 (each its offset + 1).
                assert_eq!(outs[0].0.result, Ok(92));
                assert_eq!(outs[0].1, [1, 8, 7, 1]);
            }
        }
    }

    #[test]
    fn fused_loop_exit_test_and_back_edge() {
        // pc 1: r0 += 1; pc 2: jeq r0, 10, +1; pc 3: ja -3 (to pc 1); pc 4: exit.
        let insns = prog![
            mov(0, 0),
            alu64(ALU_ADD, 0, 1),
            jmp(JMP_JEQ, 0, 10, 1),
            ja(-3),
            EXIT
        ];
        assert_eq!(decode_program(&insns, true, None)[2].kind, Kind::JeqIJa);
        // Nine back-edges of cost 3, charged at the `ja` (pc 3).
        let out = run_both(insns.clone(), [0; 5], 27);
        assert_eq!((out.result, out.fuel_used), (Ok(10), 27));
        let out = run_both(insns.clone(), [0; 5], 26);
        let kind = TrapKind::FuelExhausted { budget: 26 };
        assert_eq!((out.result, out.fuel_used), (Err(Trap { pc: 3, kind }), 27));
        // A stop flag set before the run stops it at the first back-edge, the `ja`.
        let v = verify(
            Program::from_insns("f", insns),
            Arc::new(FunctionTable::new()),
        )
        .unwrap();
        let stop = StopFlag::new();
        stop.stop(7);
        let opts = RunOptions {
            fuel: 100,
            stop: Some(&stop),
            counts: None,
        };
        let out = Interpreter::new(Arc::new(v)).run(
            &mut MemoryMap::new(),
            [0; 5],
            &opts,
            &mut ConformanceHost,
        );
        let kind = TrapKind::Stopped { reason: 7 };
        assert_eq!((out.result, out.fuel_used), (Err(Trap { pc: 3, kind }), 3));
        // The `jne` form: leaves the loop while r0 differs from 10.
        let insns = prog![
            mov(0, 9),
            alu64(ALU_ADD, 0, 1),
            jmp(JMP_JNE, 0, 10, 1),
            ja(-3),
            EXIT
        ];
        assert_eq!(decode_program(&insns, true, None)[2].kind, Kind::JneIJa);
        let out = run_both(insns, [0; 5], 100);
        assert_eq!((out.result, out.fuel_used), (Ok(11), 3));
    }

    // ---- Semantics and pitfalls ----

    #[test]
    fn jump_immediate_is_sign_extended() {
        // RFC 9669 §4.3: imm is sign-extended for 64-bit comparisons.
        let insns = prog![
            mov(0, 0),
            lddw(1, 0xffff_ffff_8000_0000),
            jmp(JMP_JEQ, 1, i32::MIN, 1),
            EXIT,
            mov(0, 1),
            // JMP32 compares the low halves: 0x8000_0000 == imm as u32.
            Insn::new(CLASS_JMP32 | JMP_JEQ | SRC_K, 1, 0, 1, i32::MIN),
            EXIT,
            mov(0, 2),
            // Unsigned 64-bit: 0x8000_0000 < 0xffff_ffff_8000_0001 after sign extension.
            lddw(1, 0x8000_0000),
            jmp(JMP_JLT, 1, i32::MIN + 1, 1),
            EXIT,
            mov(0, 3),
            EXIT,
        ];
        assert_eq!(run(insns), 3);
    }

    #[test]
    fn signed_jumps() {
        let insns = prog![
            mov(0, 0),
            mov(1, -5),
            jmp(JMP_JSGT, 1, -6, 1),
            EXIT,
            mov(0, 1),
            jmp(JMP_JGT, 1, -6, 1), // unsigned: 0xff..fb > 0xff..fa too
            EXIT,
            mov(0, 2),
            jmp(JMP_JSLT, 1, 0, 1),
            EXIT,
            mov(0, 3),
            jmp(JMP_JSET, 1, 2, 1), // -5 = ...1011: bit 1 set
            EXIT,
            mov(0, 4),
            alu32(ALU_MOV, 2, -1), // r2 = 0xffff_ffff
            Insn::new(CLASS_JMP32 | JMP_JSLT | SRC_K, 2, 0, 1, 0), // as i32: -1 < 0
            EXIT,
            mov(0, 5),
            Insn::new(CLASS_JMP | JMP_JSGT | SRC_K, 2, 0, 1, 0), // as i64: positive
            EXIT,
            mov(0, 6),
            EXIT,
        ];
        assert_eq!(run(insns), 6);
    }

    #[test]
    fn alu32_zero_extends() {
        assert_eq!(
            run(prog![mov(0, -1), alu32(ALU_ADD, 0, 0), EXIT]),
            0xffff_ffff
        );
        assert_eq!(
            run(prog![mov(1, -1), alu32x(ALU_MOV, 0, 1), EXIT]),
            0xffff_ffff
        );
        assert_eq!(
            run(prog![mov(0, -1), alu32(ALU_MOV, 0, -2), EXIT]),
            0xffff_fffe
        );
        assert_eq!(
            run(prog![mov(0, 1), alu32(ALU_NEG, 0, 0), EXIT]),
            0xffff_ffff
        );
        assert_eq!(
            run(prog![mov(0, 2), alu32(ALU_SUB, 0, 3), EXIT]),
            0xffff_ffff
        );
        // 64-bit mov of an immediate sign-extends.
        assert_eq!(run(prog![mov(0, -1), EXIT]), u64::MAX);
    }

    #[test]
    fn byte_order() {
        let v = 0x1122_3344_5566_7788u64;
        let end = |class: u8, x: u8, w: i32| {
            prog![lddw(0, v), Insn::new(class | ALU_END | x, 0, 0, 0, w), EXIT]
        };
        assert_eq!(run(end(CLASS_ALU, SRC_K, 16)), 0x7788, "le16 truncates");
        assert_eq!(
            run(end(CLASS_ALU, SRC_K, 32)),
            0x5566_7788,
            "le32 truncates"
        );
        assert_eq!(run(end(CLASS_ALU, SRC_K, 64)), v);
        assert_eq!(run(end(CLASS_ALU, SRC_X, 16)), 0x8877);
        assert_eq!(run(end(CLASS_ALU, SRC_X, 32)), 0x8877_6655);
        assert_eq!(run(end(CLASS_ALU, SRC_X, 64)), 0x8877_6655_4433_2211);
        assert_eq!(run(end(CLASS_ALU64, SRC_K, 16)), 0x8877);
        assert_eq!(run(end(CLASS_ALU64, SRC_K, 32)), 0x8877_6655);
        assert_eq!(run(end(CLASS_ALU64, SRC_K, 64)), 0x8877_6655_4433_2211);
    }

    #[test]
    fn division_and_modulo_by_zero() {
        let v = 0xffff_ffff_0000_0005u64;
        assert_eq!(
            run(prog![lddw(0, v), mov(1, 0), alu64x(ALU_DIV, 0, 1), EXIT]),
            0
        );
        assert_eq!(run(prog![lddw(0, v), alu64(ALU_DIV, 0, 0), EXIT]), 0);
        assert_eq!(run(prog![lddw(0, v), alu32(ALU_DIV, 0, 0), EXIT]), 0);
        assert_eq!(
            run(prog![lddw(0, v), mov(1, 0), alu64x(ALU_MOD, 0, 1), EXIT]),
            v
        );
        assert_eq!(run(prog![lddw(0, v), alu64(ALU_MOD, 0, 0), EXIT]), v);
        // 32-bit modulo by zero leaves dst, zero-extended.
        assert_eq!(
            run(prog![lddw(0, v), mov(1, 0), alu32x(ALU_MOD, 0, 1), EXIT]),
            5
        );
        assert_eq!(run(prog![lddw(0, v), alu32(ALU_MOD, 0, 0), EXIT]), 5);
        // The upper half of the divisor is ignored in 32-bit division.
        assert_eq!(
            run(prog![
                mov(0, 10),
                lddw(1, 1 << 32),
                alu32x(ALU_DIV, 0, 1),
                EXIT
            ]),
            0
        );
        // Signed forms by zero.
        let sdiv = |class: u8, op: u8| Insn::new(class | op | SRC_K, 0, 0, 1, 0);
        assert_eq!(run(prog![mov(0, -7), sdiv(CLASS_ALU64, ALU_DIV), EXIT]), 0);
        assert_eq!(
            run(prog![mov(0, -7), sdiv(CLASS_ALU64, ALU_MOD), EXIT]),
            (-7i64) as u64
        );
        assert_eq!(
            run(prog![mov(0, -7), sdiv(CLASS_ALU, ALU_MOD), EXIT]),
            0xffff_fff9
        );
        // A negative 64-bit divisor immediate is sign-extended (unsigned division).
        assert_eq!(run(prog![mov(0, -1), alu64(ALU_DIV, 0, -1), EXIT]), 1);
        assert_eq!(run(prog![mov(0, 12), alu64(ALU_DIV, 0, -1), EXIT]), 0);
    }

    #[test]
    fn signed_division_edges() {
        let sx = |class: u8, op: u8, imm: i32| Insn::new(class | op | SRC_K, 0, 0, 1, imm);
        let min64 = i64::MIN as u64;
        assert_eq!(
            run(prog![lddw(0, min64), sx(CLASS_ALU64, ALU_DIV, -1), EXIT]),
            min64
        );
        assert_eq!(
            run(prog![lddw(0, min64), sx(CLASS_ALU64, ALU_MOD, -1), EXIT]),
            0
        );
        let min32 = 0x8000_0000u64;
        assert_eq!(
            run(prog![mov(0, i32::MIN), sx(CLASS_ALU, ALU_DIV, -1), EXIT]),
            min32
        );
        assert_eq!(
            run(prog![mov(0, i32::MIN), sx(CLASS_ALU, ALU_MOD, -1), EXIT]),
            0
        );
        // Register forms.
        let sxr = |class: u8, op: u8| Insn::new(class | op | SRC_X, 0, 1, 1, 0);
        assert_eq!(
            run(prog![
                lddw(0, min64),
                mov(1, -1),
                sxr(CLASS_ALU64, ALU_DIV),
                EXIT
            ]),
            min64
        );
        assert_eq!(
            run(prog![
                mov(0, i32::MIN),
                mov(1, -1),
                sxr(CLASS_ALU, ALU_MOD),
                EXIT
            ]),
            0
        );
        // Truncating signed results: -7 / 2 = -3, -7 % 2 = -1, 7 % -2 = 1.
        assert_eq!(
            run(prog![mov(0, -7), sx(CLASS_ALU64, ALU_DIV, 2), EXIT]),
            (-3i64) as u64
        );
        assert_eq!(
            run(prog![mov(0, -7), sx(CLASS_ALU64, ALU_MOD, 2), EXIT]),
            u64::MAX
        );
        assert_eq!(run(prog![mov(0, 7), sx(CLASS_ALU, ALU_MOD, -2), EXIT]), 1);
        assert_eq!(
            run(prog![mov(0, -7), sx(CLASS_ALU, ALU_DIV, 2), EXIT]),
            0xffff_fffd
        );
    }

    #[test]
    fn shifts_are_masked() {
        assert_eq!(run(prog![mov(0, 1), alu64(ALU_LSH, 0, 65), EXIT]), 2);
        assert_eq!(run(prog![mov(0, 1), alu32(ALU_LSH, 0, 33), EXIT]), 2);
        assert_eq!(
            run(prog![mov(0, 1), mov(1, -1), alu64x(ALU_LSH, 0, 1), EXIT]),
            1 << 63
        );
        assert_eq!(
            run(prog![mov(0, -1), alu32(ALU_RSH, 0, 36), EXIT]),
            0x0fff_ffff
        );
        assert_eq!(
            run(prog![mov(0, -16), alu64(ALU_ARSH, 0, 66), EXIT]),
            (-4i64) as u64
        );
        // arsh32 works on the low half's sign, then zero-extends.
        assert_eq!(
            run(prog![mov(0, i32::MIN), alu32(ALU_ARSH, 0, 4), EXIT]),
            0xf800_0000
        );
        assert_eq!(
            run(prog![
                lddw(0, 0x8000_0000_0000_0000),
                mov(1, 32),
                alu32x(ALU_ARSH, 0, 1),
                EXIT
            ]),
            0
        );
    }

    #[test]
    fn movsx() {
        let sx = |class: u8, off: i16| Insn::new(class | ALU_MOV | SRC_X, 0, 1, off, 0);
        let v = 0x0000_0001_8000_80f0u64;
        assert_eq!(
            run(prog![lddw(1, v), sx(CLASS_ALU64, 8), EXIT]),
            (-16i64) as u64
        );
        assert_eq!(
            run(prog![lddw(1, v), sx(CLASS_ALU64, 16), EXIT]),
            0xffff_ffff_ffff_80f0
        );
        assert_eq!(
            run(prog![lddw(1, v), sx(CLASS_ALU64, 32), EXIT]),
            0xffff_ffff_8000_80f0
        );
        assert_eq!(run(prog![lddw(1, v), sx(CLASS_ALU, 8), EXIT]), 0xffff_fff0);
        assert_eq!(run(prog![lddw(1, v), sx(CLASS_ALU, 16), EXIT]), 0xffff_80f0);
        assert_eq!(run(prog![lddw(1, v), sx(CLASS_ALU64, 0), EXIT]), v);
    }

    #[test]
    fn loads_and_stores() {
        let mut mem = [0x80u8, 0xff, 0x00, 0x90, 0, 0, 0, 0];
        assert_eq!(
            run_mem(prog![ldxs(SIZE_B, 0, 1, 0), EXIT], &mut mem),
            (-128i64) as u64
        );
        assert_eq!(
            run_mem(prog![ldxs(SIZE_H, 0, 1, 0), EXIT], &mut mem),
            0xffff_ffff_ffff_ff80
        );
        assert_eq!(
            run_mem(prog![ldxs(SIZE_W, 0, 1, 0), EXIT], &mut mem),
            0xffff_ffff_9000_ff80
        );
        assert_eq!(
            run_mem(prog![ldx(SIZE_W, 0, 1, 0), EXIT], &mut mem),
            0x9000_ff80
        );
        assert_eq!(run_mem(prog![ldx(SIZE_H, 0, 1, 1), EXIT], &mut mem), 0x00ff);
        // st imm sign-extends then truncates; stdw stores the sign-extended imm.
        run_mem(prog![st(SIZE_DW, 1, 0, -2), mov(0, 0), EXIT], &mut mem);
        assert_eq!(mem, [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        run_mem(
            prog![
                st(SIZE_H, 1, 2, 0x1234),
                lddw(3, 0xaabb_ccdd_eeff_0011),
                stx(SIZE_B, 1, 3, 7),
                EXIT
            ],
            &mut mem,
        );
        assert_eq!(mem, [0xfe, 0xff, 0x34, 0x12, 0xff, 0xff, 0xff, 0x11]);
        // The stack starts zeroed and round-trips values.
        let insns = prog![
            ldx(SIZE_DW, 0, 10, -8),
            lddw(3, 0x55),
            stx(SIZE_DW, 10, 3, -8),
            ldx(SIZE_DW, 4, 10, -8),
            alu64x(ALU_ADD, 0, 4),
            EXIT
        ];
        assert_eq!(run(insns), 0x55);
    }

    #[test]
    fn ja32_uses_imm() {
        let ja32 = |imm: i32| Insn::new(CLASS_JMP32 | JMP_JA, 0, 0, 0, imm);
        let insns = prog![
            mov(0, 1),
            ja32(2),
            mov(0, 2),
            EXIT,
            alu64(ALU_ADD, 0, 10),
            EXIT
        ];
        assert_eq!(run(insns), 11);
        // Backward ja32 pays fuel like ja.
        let out = run_full(prog![ja32(-1)], &mut [], 5);
        assert_eq!(
            out.result,
            Err(Trap {
                pc: 0,
                kind: TrapKind::FuelExhausted { budget: 5 }
            })
        );
        assert_eq!(out.fuel_used, 6);
    }

    #[test]
    fn atomics_on_the_stack() {
        let insns = prog![
            st(SIZE_DW, 10, -8, 10),
            mov(1, 5),
            atomic(SIZE_DW, 10, 1, -8, ATOMIC_ADD | ATOMIC_FETCH), // r1 = 10, mem = 15
            mov(2, 3),
            atomic(SIZE_DW, 10, 2, -8, ATOMIC_OR), // mem = 15
            atomic(SIZE_DW, 10, 2, -8, ATOMIC_AND | ATOMIC_FETCH), // r2 = 15, mem = 3
            mov(3, 6),
            atomic(SIZE_DW, 10, 3, -8, ATOMIC_XOR), // mem = 5
            mov(4, 100),
            atomic(SIZE_DW, 10, 4, -8, ATOMIC_XCHG), // r4 = 5, mem = 100
            ldx(SIZE_DW, 0, 10, -8),
            // r0 = 100*1000 + r1*100 + r2 ... combine: 100 + 10*1000 + 15*100000 + 5*10^7
            alu64(ALU_MUL, 1, 1000),
            alu64(ALU_MUL, 2, 100_000),
            alu64(ALU_MUL, 4, 10_000_000),
            alu64x(ALU_ADD, 0, 1),
            alu64x(ALU_ADD, 0, 2),
            alu64x(ALU_ADD, 0, 4),
            EXIT,
        ];
        assert_eq!(run(insns), 100 + 10_000 + 1_500_000 + 50_000_000);
    }

    #[test]
    fn cmpxchg() {
        // 64-bit: success stores src and returns the old value in r0.
        let insns = prog![
            st(SIZE_DW, 10, -8, 7),
            mov(0, 7),
            mov(1, 9),
            atomic(SIZE_DW, 10, 1, -8, ATOMIC_CMPXCHG),
            ldx(SIZE_DW, 2, 10, -8),
            alu64(ALU_MUL, 2, 100),
            alu64x(ALU_ADD, 0, 2),
            EXIT,
        ];
        assert_eq!(run(insns), 7 + 900);
        // Failure leaves memory and loads the current value into r0.
        let insns = prog![
            st(SIZE_DW, 10, -8, 7),
            mov(0, 8),
            mov(1, 9),
            atomic(SIZE_DW, 10, 1, -8, ATOMIC_CMPXCHG),
            ldx(SIZE_DW, 2, 10, -8),
            alu64(ALU_MUL, 2, 100),
            alu64x(ALU_ADD, 0, 2),
            EXIT,
        ];
        assert_eq!(run(insns), 7 + 700);
        // 32-bit: compares the low half of r0, and r0 receives the old value
        // zero-extended, whether or not the exchange happens.
        let insns = prog![
            st(SIZE_W, 10, -4, -1),
            mov(0, -1), // r0 = 0xffff_ffff_ffff_ffff: low half matches
            mov(1, 0x22),
            atomic(SIZE_W, 10, 1, -4, ATOMIC_CMPXCHG),
            ldx(SIZE_W, 2, 10, -4),
            jmp(JMP_JEQ, 2, 0x22, 1),
            EXIT,
            EXIT,
        ];
        assert_eq!(run(insns), 0xffff_ffff);
        let insns = prog![
            st(SIZE_W, 10, -4, 5),
            lddw(0, 0xffff_ffff_0000_0006),
            mov(1, 0x22),
            atomic(SIZE_W, 10, 1, -4, ATOMIC_CMPXCHG),
            ldx(SIZE_W, 2, 10, -4),
            jmp(JMP_JEQ, 2, 5, 1),
            mov(0, -1),
            EXIT,
        ];
        assert_eq!(run(insns), 5);
    }

    #[test]
    fn atomics_32_bit_fetch_zero_extends() {
        let insns = prog![
            st(SIZE_W, 10, -4, -2),
            mov(1, -1), // only the low half (0xffff_ffff) is added
            atomic(SIZE_W, 10, 1, -4, ATOMIC_ADD | ATOMIC_FETCH),
            ldx(SIZE_W, 0, 10, -4),
            Insn::new(CLASS_JMP32 | JMP_JEQ | SRC_K, 0, 0, 1, -3), // 0xffff_fffd
            EXIT,
            movx(0, 1),
            EXIT,
        ];
        assert_eq!(run(insns), 0xffff_fffe);
        let insns = prog![
            lddw(1, 0xaaaa_aaaa_0000_0001),
            atomic(SIZE_W, 10, 1, -4, ATOMIC_XCHG),
            movx(0, 1),
            EXIT
        ];
        assert_eq!(run(insns), 0);
    }

    #[test]
    fn out_of_line_memory_ops_trap_at_their_own_pc() {
        // `ldxs`, `st` of an immediate and atomics run out of the dispatch loop: a trap
        // still names the op's own pc and the fuel used up to it.
        let mut mem = [0u8; 8];
        let oob = |addr: u64, size: u32, write: bool| TrapKind::OutOfBounds { addr, size, write };
        let cases = [
            (ldxs(SIZE_H, 0, 1, 7), oob(MEM + 7, 2, false)),
            (st(SIZE_W, 1, 6, 1), oob(MEM + 6, 4, true)),
            (
                atomic(SIZE_DW, 1, 2, 1, ATOMIC_ADD | ATOMIC_FETCH),
                oob(MEM + 1, 8, true),
            ),
            (atomic(SIZE_W, 1, 2, -1, ATOMIC_XCHG), oob(MEM - 1, 4, true)),
        ];
        for (op, kind) in cases {
            // Two taken back-edges of cost 2 before the op at pc 4.
            let insns = prog![
                mov(0, 0),
                alu64(ALU_ADD, 0, 1),
                jmp(JMP_JLT, 0, 3, -2),
                mov(2, 2),
                op,
                EXIT
            ];
            let out = run_full(insns, &mut mem, 100);
            assert_eq!(out.result, Err(Trap { pc: 4, kind }));
            assert_eq!(out.fuel_used, 4);
        }
        assert_eq!(mem, [0; 8], "a failed op writes nothing");
    }

    #[test]
    fn unaligned_atomics() {
        // At offset 1 of an 8-byte-aligned buffer the host address is misaligned: the
        // operation falls back to a plain read-modify-write with the same result.
        #[repr(align(8))]
        struct Aligned([u8; 16]);
        let mut buf = Aligned([0; 16]);
        buf.0[1] = 40;
        let insns = prog![
            mov(2, 2),
            atomic(SIZE_DW, 1, 2, 1, ATOMIC_ADD | ATOMIC_FETCH),
            mov(3, 7),
            atomic(SIZE_W, 1, 3, 9, ATOMIC_XCHG),
            ldx(SIZE_DW, 0, 1, 1),
            EXIT,
        ];
        assert_eq!(run_mem(insns, &mut buf.0), 42);
        assert_eq!(buf.0[9], 7);
        assert_eq!(buf.0[1], 42);
    }

    #[test]
    fn atomics_are_atomic_across_threads() {
        // Several runs add to one shared counter at the same time: no update is lost.
        let insns = prog![
            mov(2, 1),
            mov(3, 0),
            atomic(SIZE_DW, 1, 2, 0, ATOMIC_ADD), // loop head
            alu64(ALU_ADD, 3, 1),
            jmp(JMP_JLT, 3, 10_000, -3),
            mov(0, 0),
            EXIT,
        ];
        let engine = Arc::new(interp(
            Program::from_insns("c", insns),
            FunctionTable::new(),
        ));
        let counter = std::sync::atomic::AtomicU64::new(0);
        let ptr = counter.as_ptr().cast::<u8>();
        let addr = ptr as usize;
        std::thread::scope(|s| {
            for _ in 0..4 {
                let engine = Arc::clone(&engine);
                s.spawn(move || {
                    let mut map = MemoryMap::new();
                    // SAFETY: `counter` outlives the scope; every access is atomic.
                    let va =
                        unsafe { map.map_raw(RegionIdx::EMBEDDER_FIRST, addr as *mut u8, 8, true) }
                            .unwrap();
                    let out = engine.run(
                        &mut map,
                        [va, 0, 0, 0, 0],
                        &RunOptions::default(),
                        &mut ConformanceHost,
                    );
                    assert_eq!(out.result, Ok(0));
                });
            }
        });
        assert_eq!(counter.load(Ordering::SeqCst), 40_000);
    }

    #[test]
    fn local_call_semantics() {
        // main (0..): set r1-r9, store to its frame, call f, then check everything.
        // f (F..): r0 = r1 + r5, clobber r6-r9, store to its own frame, r2 = r10.
        let main = prog![
            mov(1, 1),
            mov(5, 5),
            mov(6, 6),
            mov(7, 7),
            mov(8, 8),
            mov(9, 9),
            st(SIZE_DW, 10, -8, 77),
            call_local(0), // patched below
            // Expected: r0 = 6, r6-r9 intact, [r10-8] = 77, r10 - r2 = 512.
            jmp(JMP_JNE, 0, 6, 12),
            jmp(JMP_JNE, 6, 6, 11),
            jmp(JMP_JNE, 7, 7, 10),
            jmp(JMP_JNE, 8, 8, 9),
            jmp(JMP_JNE, 9, 9, 8),
            ldx(SIZE_DW, 3, 10, -8),
            jmp(JMP_JNE, 3, 77, 6),
            movx(4, 10),
            alu64x(ALU_SUB, 4, 2),
            jmp(JMP_JNE, 4, STACK_FRAME_SIZE as i32, 3),
            // r1 was changed by the callee and stays changed.
            jmp(JMP_JNE, 1, 100, 2),
            mov(0, 1),
            EXIT,
            mov(0, -1),
            EXIT,
        ];
        let f = prog![
            movx(0, 1),
            alu64x(ALU_ADD, 0, 5),
            mov(1, 100),
            mov(6, 0),
            mov(7, 0),
            mov(8, 0),
            mov(9, 0),
            st(SIZE_DW, 10, -8, 99),
            movx(2, 10),
            EXIT,
        ];
        let mut insns = main.clone();
        let call_pc = 7;
        insns[call_pc] = call_local((main.len() - call_pc - 1) as i32);
        insns.extend(f);
        assert_eq!(run(insns), 1);
    }

    #[test]
    fn arguments_and_entry() {
        // Execution starts at `entry`; r1-r5 are the arguments, r10 the stack end.
        let mut program = Program::from_insns(
            "e",
            prog![
                mov(0, 9),
                EXIT,
                movx(0, 1),
                alu64x(ALU_ADD, 0, 5),
                movx(2, 10),
                alu64x(ALU_SUB, 2, 0),
                EXIT
            ],
        );
        program.entry = 2;
        let engine = interp(program, FunctionTable::new());
        let out = engine.run(
            &mut MemoryMap::new(),
            [40, 0, 0, 0, 2],
            &RunOptions::default(),
            &mut ConformanceHost,
        );
        assert_eq!(
            out,
            RunOutcome {
                result: Ok(42),
                fuel_used: 0
            }
        );
        assert_eq!(engine.program().entry(), 2);
    }

    #[test]
    fn helper_calls_pass_arguments() {
        // Helper 5 returns r1; r1-r5 are left as they were.
        let insns = prog![mov(1, 3), call(5), alu64x(ALU_ADD, 0, 1), EXIT];
        assert_eq!(run(insns), 6);
    }

    #[test]
    fn lddw_and_mov64() {
        assert_eq!(
            run(prog![lddw(0, 0x1122_3344_5566_7788), EXIT]),
            0x1122_3344_5566_7788
        );
        assert_eq!(run(prog![lddw(0, 0x8000_0000), EXIT]), 0x8000_0000);
        // A jump over an lddw lands after both slots.
        assert_eq!(run(prog![mov(0, 1), ja(2), lddw(0, 5), EXIT]), 1);
    }

    #[test]
    fn arithmetic_wraps() {
        assert_eq!(run(prog![mov(0, -1), alu64(ALU_ADD, 0, 2), EXIT]), 1);
        assert_eq!(
            run(prog![lddw(0, i64::MIN as u64), alu64(ALU_NEG, 0, 0), EXIT]),
            i64::MIN as u64
        );
        assert_eq!(
            run(prog![mov(0, i32::MIN), alu32(ALU_NEG, 0, 0), EXIT]),
            0x8000_0000
        );
        assert_eq!(run(prog![lddw(0, 1 << 62), alu64(ALU_MUL, 0, 4), EXIT]), 0);
        assert_eq!(
            run(prog![mov(0, 0x10000), alu32(ALU_MUL, 0, 0x10000), EXIT]),
            0
        );
        assert_eq!(run(prog![mov(0, -1), alu64(ALU_MUL, 0, -1), EXIT]), 1);
    }

    /// Random programs: whatever the verifier accepts, the interpreter runs without
    /// panicking, on any arguments and a small fuel budget.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        const OPCODES: &[u8] = &[
            0x07, 0x0f, 0x17, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f,
            0x77, 0x7f, 0x87, 0x97, 0x9f, 0xa7, 0xaf, 0xb7, 0xbf, 0xc7, 0xcf, 0xd7, 0x04, 0x0c,
            0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3c, 0x44, 0x4c, 0x54, 0x5c, 0x64, 0x6c, 0x74, 0x7c,
            0x84, 0x94, 0x9c, 0xa4, 0xac, 0xb4, 0xbc, 0xc4, 0xcc, 0xd4, 0xdc, 0x05, 0x15, 0x1d,
            0x25, 0x2d, 0x35, 0x3d, 0x45, 0x4d, 0x55, 0x5d, 0x65, 0x6d, 0x75, 0x7d, 0xa5, 0xad,
            0xb5, 0xbd, 0xc5, 0xcd, 0xd5, 0xdd, 0x06, 0x16, 0x1e, 0x26, 0x2e, 0x36, 0x3e, 0x46,
            0x4e, 0x56, 0x5e, 0x66, 0x6e, 0x76, 0x7e, 0xa6, 0xae, 0xb6, 0xbe, 0xc6, 0xce, 0xd6,
            0xde, 0x85, 0x8d, 0x95, 0x18, 0x61, 0x69, 0x71, 0x79, 0x81, 0x89, 0x91, 0x62, 0x6a,
            0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xc3, 0xdb,
        ];
        const ATOMIC_OPS: &[i32] = &[0x00, 0x01, 0x40, 0x41, 0x50, 0x51, 0xa0, 0xa1, 0xe1, 0xf1];

        /// Clears the fields the verifier requires to be zero, so that most generated
        /// programs get as far as running.
        fn sanitize(opc: u8, dst: u8, src: u8, off: i16, imm: i32) -> Vec<Insn> {
            let class = opc & 0x07;
            let x = opc & SRC_X != 0;
            let op = opc & 0xf0;
            let mut i = Insn::new(opc, dst, src, off, imm);
            match class {
                CLASS_ALU | CLASS_ALU64 => {
                    i.dst = if dst == REG_FP { 0 } else { dst };
                    if x {
                        i.imm = 0
                    } else {
                        i.src = 0
                    }
                    i.off = match op {
                        ALU_DIV | ALU_MOD => off & 1,
                        ALU_MOV if x => [0, 8, 16, 32][(imm as usize) & 3],
                        _ => 0,
                    };
                    if op == ALU_MOV && x && class == CLASS_ALU && i.off == 32 {
                        i.off = 0;
                    }
                    if op == ALU_END {
                        i.imm = [16, 32, 64, 16][(imm as usize) & 3];
                        i.src = 0;
                    }
                    if op == ALU_NEG {
                        i.imm = 0;
                        i.src = 0;
                    }
                }
                CLASS_JMP | CLASS_JMP32 => match op {
                    JMP_JA => {
                        i = Insn::new(opc, 0, 0, 0, 0);
                        if class == CLASS_JMP32 {
                            i.imm = i32::from(off)
                        } else {
                            i.off = off
                        }
                    }
                    JMP_CALL if x => i = Insn::new(opc, dst, 0, 0, 0),
                    JMP_CALL if off & 1 == 1 => i = Insn::new(opc, 0, 1, 0, imm % 8),
                    JMP_CALL => i = Insn::new(opc, 0, 0, 0, 5),
                    JMP_EXIT => i = Insn::new(opc, 0, 0, 0, 0),
                    _ => {
                        if x {
                            i.imm = 0
                        } else {
                            i.src = 0
                        }
                    }
                },
                CLASS_LD => {
                    let d = if dst == REG_FP { 0 } else { dst };
                    // Pointers into the stack and the mapped buffer, or anything.
                    let v = match imm & 3 {
                        0 => RegionIdx::STACK.vaddr(4096 - 64),
                        1 => MEM,
                        _ => imm as u64,
                    };
                    return prog![lddw(d, v)].to_vec();
                }
                CLASS_LDX => {
                    i.dst = if dst == REG_FP { 0 } else { dst };
                    i.imm = 0;
                }
                CLASS_ST => i.src = 0,
                _ if opc & 0xe0 == MODE_ATOMIC => {
                    i.imm = ATOMIC_OPS[(imm as usize) % ATOMIC_OPS.len()];
                    if i.src == REG_FP {
                        i.src = 0
                    }
                }
                _ => i.imm = 0,
            }
            vec![i]
        }

        /// Points every jump and local call at some instruction of the program (chosen
        /// by its random offset), so that generated programs are mostly accepted.
        fn retarget(insns: &mut [Insn]) {
            let n = insns.len();
            let mut tails = vec![false; n];
            let mut pc = 0;
            while pc < n {
                if insns[pc].opc == OP_LDDW && pc + 1 < n {
                    tails[pc + 1] = true;
                    pc += 1;
                }
                pc += 1;
            }
            for pc in 0..n {
                let i = insns[pc];
                let class = i.class();
                if tails[pc] || (class != CLASS_JMP && class != CLASS_JMP32) {
                    continue;
                }
                let op = i.opc & 0xf0;
                let uses_imm = (op == JMP_JA && class == CLASS_JMP32)
                    || (op == JMP_CALL && i.src == CALL_SRC_LOCAL);
                if op == JMP_EXIT || (op == JMP_CALL && !uses_imm) {
                    continue;
                }
                let seed = if uses_imm {
                    i.imm.unsigned_abs() as usize
                } else {
                    usize::from(i.off.unsigned_abs())
                };
                let mut target = (seed * 7 + pc) % n;
                if tails[target] {
                    target -= 1;
                }
                let rel = target as i64 - pc as i64 - 1;
                if uses_imm {
                    insns[pc].imm = rel as i32;
                } else {
                    insns[pc].off = rel as i16;
                }
            }
        }

        fn insn() -> impl Strategy<Value = Vec<Insn>> {
            (
                prop::sample::select(OPCODES),
                0u8..11,
                0u8..11,
                prop_oneof![-8i16..8, -520i16..0],
                prop_oneof![-8i32..8, any::<i32>()],
            )
                .prop_map(|(opc, dst, src, off, imm)| sanitize(opc, dst, src, off, imm))
        }

        /// One sequence [`fuse`] may fuse, with random registers and operands, or one
        /// random instruction. The second result marks the slots whose jump offset
        /// must survive [`retarget`].
        fn chunk() -> impl Strategy<Value = (Vec<Insn>, Vec<bool>)> {
            prop_oneof![3 => chunk_64(), 1 => chunk_32()]
        }

        /// Registers `(d, s, a, b)`, immediates `(imm, imm2)`, and a compare, a size and
        /// an offset.
        type Operands = ((u8, u8, u8, u8), (i32, i32), (u8, u8, i16));

        /// A chunk's random operands: registers `(d, s, a, b)` (`s` and `b` may be r10),
        /// immediates `(imm, imm2)`, and a compare, a size and an offset.
        fn operands() -> impl Strategy<Value = Operands> {
            let jcc = prop::sample::select(vec![
                JMP_JEQ, JMP_JNE, JMP_JGT, JMP_JGE, JMP_JLT, JMP_JLE, JMP_JSGT,
            ]);
            let size = prop::sample::select(vec![SIZE_B, SIZE_H, SIZE_W, SIZE_DW]);
            (
                (0u8..10, 0u8..11, 0u8..10, 0u8..11),
                (prop_oneof![-8i32..8, Just(32), any::<i32>()], -8i32..8),
                (jcc, size, -8i16..8),
            )
        }

        /// [`chunk`]'s sequences of 64-bit ops: an indexed load, add/mov pairs, mov or
        /// add before a compare, `jcc +1; ja`, clang's extension idioms.
        fn chunk_64() -> impl Strategy<Value = (Vec<Insn>, Vec<bool>)> {
            (0u8..29, operands(), insn()).prop_map(
                |(which, ((d, s, a, b), (imm, imm2), (op, size, off)), any)| {
                    let jx = Insn::new(CLASS_JMP | op | SRC_X, a, b, off, 0);
                    let ji = Insn::new(CLASS_JMP | op | SRC_K, a, 0, off, imm);
                    let insns = match which {
                        0 => vec![movx(d, s), alu64x(ALU_ADD, d, b), ldx(size, a, d, off)],
                        1 => vec![alu64(ALU_ADD, d, imm), movx(a, s)],
                        2 => vec![alu64(ALU_ADD, d, imm), alu64(ALU_ADD, a, imm2)],
                        3 => vec![alu64x(ALU_ADD, d, s), alu64(ALU_ADD, a, imm2)],
                        4 => vec![movx(d, s), jx],
                        5 => vec![movx(d, s), ji],
                        6 => vec![movx(d, s), ja(off)],
                        7 => {
                            let test = if imm2 < 0 { JMP_JEQ } else { JMP_JNE };
                            let test = jmp(test, d, imm2, 1);
                            return (vec![test, ja(off)], vec![true, false]);
                        }
                        8 => vec![alu64(ALU_ADD, d, imm2), jx],
                        9 => vec![movx(d, s), alu64(ALU_LSH, d, 32), alu64(ALU_RSH, d, 32)],
                        10 => vec![movx(d, s), alu64(ALU_LSH, d, 32), alu64(ALU_ARSH, d, 32)],
                        11 => vec![movx(d, s), alu64(ALU_ADD, d, imm)],
                        12 => vec![alu64x(ALU_ADD, d, s), ldx(size, a, d, off)],
                        13 => vec![
                            alu64(ALU_AND, d, imm),
                            Insn::new(CLASS_ALU64 | ALU_NEG, d, 0, 0, 0),
                            alu64x(ALU_AND, d, s),
                        ],
                        14 => {
                            let size = if size == SIZE_B { SIZE_B } else { SIZE_W };
                            vec![ldx(size, d, s, off), movx(a, b)]
                        }
                        15 => {
                            let shift = if imm2 < 0 { ALU_LSH } else { ALU_RSH };
                            vec![alu64(shift, d, imm), movx(a, b)]
                        }
                        16 => vec![
                            movx(d, s),
                            alu64x(ALU_ADD, d, b),
                            ldx(SIZE_W, a, d, off),
                            alu64(ALU_LSH, a, 32),
                            alu64(ALU_ARSH, a, 32),
                        ],
                        17 => vec![
                            ldx(SIZE_W, d, s, off),
                            alu64(ALU_LSH, d, 32),
                            alu64(ALU_ARSH, d, 32),
                        ],
                        18 => {
                            let test = if imm2 < 0 { JMP_JEQ } else { JMP_JNE };
                            let test = jmp(test, a, imm2, 1);
                            return (vec![movx(d, s), test, ja(off)], vec![false, true, false]);
                        }
                        19 => vec![
                            alu64(ALU_LSH, a, imm2 & 3),
                            movx(d, s),
                            alu64x(ALU_ADD, d, b),
                            ldx(size, a, d, off),
                        ],
                        20 => vec![alu64x(ALU_XOR, d, s), alu64x(ALU_MUL, d, b)],
                        23 => vec![
                            alu32(ALU_AND, d, imm),
                            Insn::new(CLASS_ALU | ALU_NEG, d, 0, 0, 0),
                            alu32(ALU_AND, d, imm2.wrapping_mul(0x1357_9bdf)),
                        ],
                        // Stack accesses at `r10 + off`, at and past both ends of
                        // the proven range (`frame_access`), stored then loaded.
                        21 | 22 => {
                            let bytes = [4i16, 2, 1, 8][usize::from(size >> 3)];
                            let off = match imm2 {
                                -8..=-6 => -512 - off.abs() % 2,
                                -5..=-3 => -bytes + 1 - off.abs() % 2,
                                _ => -8 * (off.abs() + 1) - imm2 as i16,
                            };
                            let st = if which == 21 {
                                stx(size, REG_FP, s, off)
                            } else {
                                st(size, REG_FP, off, imm)
                            };
                            vec![st, ldx(size, d, REG_FP, off), ldx(size, a, REG_FP, off - 1)]
                        }
                        _ => any,
                    };
                    let keep = vec![false; insns.len()];
                    (insns, keep)
                },
            )
        }

        /// [`chunk`]'s sequences with 32-bit copies and masks (`mov32` before a compare,
        /// a `ja`, an exit test or after an `add` or a load; `mov32; <op>32 imm`), bit
        /// fields, and an `lddw` address plus an index, loaded from.
        fn chunk_32() -> impl Strategy<Value = (Vec<Insn>, Vec<bool>)> {
            (0u8..7, operands()).prop_map(
                |(which, ((d, s, a, b), (imm, imm2), (op, size, off)))| {
                    let jx = Insn::new(CLASS_JMP | op | SRC_X, a, b, off, 0);
                    let insns = match which {
                        0 => vec![alu32x(ALU_MOV, d, s), jx],
                        1 => vec![alu64(ALU_ADD, d, imm), alu32x(ALU_MOV, a, s)],
                        2 => {
                            let test = if imm2 < 0 { JMP_JEQ } else { JMP_JNE };
                            let test = jmp(test, a, imm2, 1);
                            let copy = alu32x(ALU_MOV, d, s);
                            return (vec![copy, test, ja(off)], vec![false, true, false]);
                        }
                        3 => vec![alu32x(ALU_MOV, d, s), ja(off)],
                        4 => {
                            let op = [ALU_AND, ALU_ADD, ALU_RSH][usize::from(b % 3)];
                            vec![
                                ldx(SIZE_W, d, s, off),
                                alu32x(ALU_MOV, a, b),
                                alu32x(ALU_MOV, d, s),
                                alu32(op, d, imm & 31),
                            ]
                        }
                        5 => {
                            let shift = if imm2 < 0 { ALU_ARSH } else { ALU_RSH };
                            vec![
                                alu32x(ALU_MOV, d, s),
                                alu64(ALU_LSH, d, 32),
                                alu64(shift, d, 32),
                                alu64(ALU_RSH, a, imm & 63),
                                alu64(ALU_AND, a, imm2),
                            ]
                        }
                        // A global's address (the buffer's, or near it) plus an index,
                        // then a load from it.
                        _ => {
                            let near = MEM.wrapping_add((i64::from(imm2) * 8) as u64);
                            let [l0, l1] = lddw(d, near);
                            vec![l0, l1, alu64x(ALU_ADD, d, b), ldx(size, a, d, off)]
                        }
                    };
                    let keep = vec![false; insns.len()];
                    (insns, keep)
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]
            /// The fused decoding runs every program exactly as the unfused one: value
            /// or trap, fuel, and memory.
            #[test]
            fn fused_and_unfused_agree(
                chunks in prop::collection::vec(chunk(), 1..12),
                args in prop::array::uniform5(prop_oneof![Just(MEM), Just(0u64), any::<u64>()]),
                fuel in prop_oneof![0u64..40, Just(500)],
            ) {
                let mut insns = Vec::new();
                let mut keep = Vec::new();
                for (c, k) in chunks {
                    insns.extend(c);
                    keep.extend(k);
                }
                insns.push(EXIT);
                keep.push(false);
                let kept: Vec<Insn> = insns.clone();
                retarget(&mut insns);
                for (pc, k) in keep.iter().enumerate() {
                    if *k {
                        insns[pc] = kept[pc];
                    }
                }
                let table = Arc::new(FunctionTable::conformance());
                if let Ok(v) = verify(Program::from_insns("fuzz", insns), table) {
                    let v = Arc::new(v);
                    let mut outs = Vec::new();
                    for engine in [Interpreter::new(Arc::clone(&v)), Interpreter::unfused(Arc::clone(&v))] {
                        // Uncounted, then counted (fused only inside blocks, bumping at
                        // leaders; the unfused engine counts on its unfused slots).
                        for counted in [false, true] {
                            let counts = ExecCounts::new(v.blocks());
                            let opts = RunOptions {
                                fuel,
                                counts: counted.then_some(&counts),
                                ..RunOptions::default()
                            };
                            // Bytes with the top bit set as often as not, so sign extension
                            // of loaded values matters.
                            let mut buf: Vec<u8> =
                                (0..64u8).map(|i| i.wrapping_mul(73).wrapping_add(0x9d)).collect();
                            let mut map = MemoryMap::new();
                            map.map_read_write(RegionIdx::EMBEDDER_FIRST, &mut buf).expect("maps");
                            let out = engine.run(&mut map, args, &opts, &mut ConformanceHost);
                            outs.push((out, buf, counted.then(|| counts.values())));
                        }
                    }
                    // fused, fused counted, unfused, unfused counted.
                    prop_assert_eq!(&outs[0], &outs[2]);
                    prop_assert_eq!(&outs[1], &outs[3]);
                    prop_assert_eq!((&outs[0].0, &outs[0].1), (&outs[1].0, &outs[1].1));
                }
            }

            #[test]
            fn verified_programs_never_panic(
                parts in prop::collection::vec(insn(), 1..30),
                args in prop::array::uniform5(prop_oneof![Just(MEM), Just(0u64), any::<u64>()]),
            ) {
                let mut insns: Vec<Insn> = parts.concat();
                insns.push(EXIT);
                retarget(&mut insns);
                let table = Arc::new(FunctionTable::conformance());
                if let Ok(v) = verify(Program::from_insns("fuzz", insns), table) {
                    let engine = Interpreter::new(Arc::new(v));
                    let mut buf = [0u8; 64];
                    let mut map = MemoryMap::new();
                    map.map_read_write(RegionIdx::EMBEDDER_FIRST, &mut buf).expect("maps");
                    let opts = RunOptions { fuel: 500, ..RunOptions::default() };
                    let out = engine.run(&mut map, args, &opts, &mut ConformanceHost);
                    prop_assert!(out.fuel_used <= 500 || out.result.is_err());
                }
            }
        }
    }
}
