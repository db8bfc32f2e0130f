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
//!  r9 r10 r11  scratch
//! ```
//!
//! Keeping r10 as a host address makes a stack access at r10 plus a constant inside
//! the current 512-byte frame one `[rbp + off]` operand with no check (the stack region
//! always holds `STACK_SIZE` bytes and the depth check keeps every frame inside it). When
//! a program reads r10 as a value, its virtual address is rebuilt in r9 (base of the
//! stack row subtracted, region index 1 set).
//!
//! # Memory
//! Every other access checks the region table inline, exactly as
//! `MemoryMap::translate`: index `addr >> 32` below `REGIONS_MAX`, then
//! `(addr as u32) + size <= len` with the row's read or write length; a failure jumps to
//! a per-site stub that records (pc, addr, size, write) and leaves. The precise kind
//! (out of bounds or read-only) is worked out after the run by `runtime::decode_trap`,
//! as for the Cranelift tier. Nothing is cached, so a helper remapping a region needs
//! no special care. One exception: a global section's bounds are fixed by the program
//! (`translate::KnownRegion`; engines trap a helper that remaps one), so an access
//! through an address computed from an `lddw` of the section's address, in the same
//! straight-line run of code ([`Known`]), whose offset is proven in range for every
//! value of the indexes added (masks, shifts, byte loads), needs no check: its host
//! address is the section's base plus the offset. Likewise for the stack: an address
//! computed from r10 (`mov rX, r10`, constants and bounded indexes added) whose every
//! value lands in the current frame needs no check (the same condition as for r10 plus a
//! constant); its host address is the stack row's base plus `rX - ` the stack's virtual
//! base.
//!
//! # Fuel, stop, traps
//! While compiled code runs, the context's `fuel_used` holds a *slice* of what is left
//! of the budget (at most `rules::STOP_SLICE`; the rest is in `fuel_reserve`), as in the
//! Cranelift tier: one `sub` charges it and its borrow flag sends a short slice to a
//! per-site stub, which calls the shared refill routine. That routine takes the charge
//! from all the fuel left (trapping when the budget is exceeded), looks at the stop flag
//! (so a flag set before the run stops it at its first charge: the slice starts empty)
//! and refills the slice from the reserve; the stub then jumps back. The epilogues turn
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

/// Host register of eBPF r0-r9.
const MAP: [Reg; 10] = [RAX, RDI, RSI, RDX, RCX, R8, RBX, R13, R14, R15];
/// The run's context.
const CTX: Reg = R12;
/// Host address of eBPF r10.
const FP: Reg = RBP;

/// Where the entry frame's rsp is kept during a run: the context's r10 slot, which only
/// the Cranelift tier's local calls use.
const ENTRY_RSP: i32 = offsets::reg(10);

/// Byte offset of the stack's row in the region table.
const STACK_ROW: i32 = RegionIdx::STACK.0 as i32 * RegionEntry::SIZE as i32;
// r10's virtual address is rebuilt by setting bit 32 over the stack offset.
const _: () = assert!(RegionIdx::STACK.0 == 1);
const _: () = assert!(REGIONS_MAX == 32);

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
    /// A failed bounds check of the access at `base + off`.
    Memory {
        pc: u32,
        base: Reg,
        off: i16,
        aux: u64,
    },
}

/// Where a 32-bit displacement must point.
#[derive(Clone, Copy, Debug)]
enum Target {
    Slot(u32),
    Stub(usize),
    /// The shared refill routine.
    Refill,
    Exit,
    Unwind,
}

/// What the one pass knows of a register's value since the last jump target or call
/// (where everything is forgotten): an unsigned bound, and whether it is an address
/// [`Base`] plus an offset in `[lo, hi]`.
#[derive(Clone, Copy, Debug)]
struct Known {
    bound: u64,
    addr: Option<(Base, i64, i64)>,
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
    };
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
    };
    e.prologue(entry);
    let mut pc = 0usize;
    let mut falls_through = false;
    while pc < insns.len() {
        e.slot_pos[pc] = e.a.pos();
        if let Some(b) = blocks.and_then(|m| m.block_at(pc as u32)) {
            e.count_block(b);
        }
        let insn = insns[pc];
        if e.targets[pc] {
            e.known = [Known::NOTHING; 10];
        }
        let (next, falls) = e.insn(pc as u32, &insn)?;
        e.learn(&insn, insns.get(pc + 1));
        falls_through = falls;
        pc = next as usize;
    }
    if falls_through {
        // The verifier rules out reaching the end; should it happen anyway the run ends
        // as at an `exit` rather than running into the stubs.
        e.jump(Target::Exit);
    }
    e.finish()
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
                self.fixups.push((at, Target::Slot(t), pc));
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

    /// r9 = the virtual address r10 holds (clobbers r11).
    fn fp_value(&mut self) -> Reg {
        self.a.mov_rr(true, R9, FP);
        self.ctx_load(R11, offsets::REGIONS);
        self.a.alu_rm(
            Alu::Sub,
            true,
            R9,
            mem(R11, STACK_ROW + RegionEntry::OFFSET_BASE),
        );
        self.a.bts(R9, 32);
        R9
    }

    /// The host register holding eBPF register `r` for writing.
    fn dst(&self, pc: u32, r: u8) -> EResult<Reg> {
        MAP.get(usize::from(r))
            .copied()
            .ok_or_else(|| self.unsupported(pc))
    }

    /// The host register holding eBPF register `r`'s value (r10's in r9, clobbering
    /// r11).
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
        self.a.alu_ri(Alu::Add, true, FP, STACK_SIZE as i32);
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

    // ---- instructions ------------------------------------------------------------------

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
        } else {
            let k = if wide {
                i64::from(insn.imm) as u64
            } else {
                u64::from(insn.imm as u32)
            };
            if k == 0 {
                self.divide_by_zero(wide, div, d);
                return Ok(());
            }
            if signed && insn.imm == -1 {
                self.divide_by_minus_one(wide, div, d);
                return Ok(());
            }
            self.a.mov_imm(R11, k);
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
        self.a.mov_rr(true, R10, RAX);
        self.a.mov_rr(true, R9, RDX);
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
        self.a.mov_rr(true, RAX, R10);
        self.a.mov_rr(true, RDX, R9);
        self.a.mov_rr(true, d, R11);
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
        let frame = -(STACK_FRAME_SIZE as i32);
        let end = i32::from(off) + i32::from(size);
        if base == REG_FP && i32::from(off) >= frame && end <= 0 {
            return Ok(mem(FP, i32::from(off)));
        }
        // Inside a global section, or the current frame, whatever the indexes (see the
        // module doc): the region's host base plus the offset, `base + (v - vaddr)`.
        if let Some(&Known {
            addr: Some((region, lo, hi)),
            ..
        }) = self.known.get(usize::from(base))
        {
            // The accepted offsets from the region's base, as `[start, end)`.
            let (start, end, idx) = match region {
                Base::Global(n) => (
                    0,
                    self.globals[n].len(write) as i64,
                    RegionIdx::GLOBALS_FIRST.0 as usize + n,
                ),
                Base::Fp => (i64::from(frame), 0, RegionIdx::STACK.0 as usize),
            };
            let off64 = i64::from(off);
            if lo + off64 >= start && hi + off64 + i64::from(size) <= end {
                let row = (idx * RegionEntry::SIZE) as i32;
                let vaddr = RegionIdx(idx as u32).vaddr(0);
                let b = MAP[usize::from(base)];
                self.ctx_load(R11, offsets::REGIONS);
                let a = &mut self.a;
                a.mov_rm(R11, mem(R11, row + RegionEntry::OFFSET_BASE));
                a.mov_imm(R10, vaddr.wrapping_neg());
                a.alu_rr(Alu::Add, true, R10, b);
                a.alu_rr(Alu::Add, true, R11, R10);
                return Ok(mem(R11, i32::from(off)));
            }
        }
        let b = self.src(pc, base)?;
        let a = &mut self.a;
        a.lea(R11, mem(b, i32::from(off)));
        a.mov_rr(true, R10, R11);
        a.shift_ri(Shift::Shr, true, R10, 32);
        a.alu_ri(Alu::Cmp, true, R10, REGIONS_MAX as i32);
        let stub = Stub::Memory {
            pc,
            base: b,
            off,
            aux: u64::from(size) | if write { TRAP_AUX_WRITE as u64 } else { 0 },
        };
        self.jcc_stub(Cond::Ae, stub);
        let a = &mut self.a;
        a.shift_ri(Shift::Shl, false, R10, RegionEntry::SIZE_SHIFT as u8);
        a.alu_rm(Alu::Add, true, R10, mem(CTX, offsets::REGIONS));
        a.mov_rr(false, R11, R11);
        a.alu_ri(Alu::Add, true, R11, i32::from(size));
        let len = if write {
            RegionEntry::OFFSET_WRITE_LEN
        } else {
            RegionEntry::OFFSET_READ_LEN
        };
        a.alu_rm(Alu::Cmp, true, R11, mem(R10, len));
        self.stubs.push(stub);
        let n = self.stubs.len() - 1;
        self.jcc(Cond::A, Target::Stub(n));
        self.a
            .alu_rm(Alu::Add, true, R11, mem(R10, RegionEntry::OFFSET_BASE));
        Ok(mem(R11, -i32::from(size)))
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
            CLASS_ST | CLASS_STX => return,
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

    /// What is [`Known`] of an ALU instruction's result (not a byte swap).
    fn learn_alu(&self, insn: &Insn) -> Known {
        let by_reg = insn.opc & SRC_X != 0;
        let op = insn.opc & 0xf0;
        let get = |k: &[Known; 10], r: u8| match k.get(usize::from(r)) {
            Some(k) => *k,
            // r10 is its own frame's top for as long as anything is known.
            None if r == REG_FP => Known {
                bound: u64::MAX,
                addr: Some((Base::Fp, 0, 0)),
            },
            None => Known::NOTHING,
        };
        let wide = insn.class() == CLASS_ALU64;
        let width = if wide { u64::MAX } else { u64::from(u32::MAX) };
        let d = get(&self.known, insn.dst);
        let s = get(&self.known, insn.src);
        let imm = if wide {
            i64::from(insn.imm) as u64
        } else {
            u64::from(insn.imm as u32)
        };
        let bits = if wide { 64 } else { 32 };
        let bd = d.bound.min(width);
        let bound = match (op, by_reg) {
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
        };
        let addr = match (wide, op, by_reg) {
            (true, ALU_MOV, true) if insn.off == 0 => s.addr,
            (true, ALU_ADD | ALU_SUB, false) => d.addr.and_then(|(n, lo, hi)| {
                let k = i64::from(insn.imm);
                let k = if op == ALU_ADD { k } else { -k };
                let (lo, hi) = (lo + k, hi + k);
                (lo.abs() <= KNOWN_OFFSET_MAX && hi.abs() <= KNOWN_OFFSET_MAX)
                    .then_some((n, lo, hi))
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
        };
        Known { bound, addr }
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
                // The value first: rebuilding r10 into r9 clobbers r11.
                let v = self.src(pc, insn.src)?;
                let m = self.access(pc, insn.dst, insn.off, size, true)?;
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
        let v = self.src(pc, insn.src)?;
        let m = self.access(pc, insn.dst, insn.off, size, true)?;
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
        a.mov_imm(RAX, atomic_callout as *const () as usize as u64);
        a.call_r(RAX);
        a.mov_rr(true, R11, RAX);
        for r in CALLER_SAVED.iter().rev() {
            a.pop(*r);
        }
        if op == ATOMIC_CMPXCHG {
            a.mov_rr(true, RAX, R11);
        } else if fetches {
            a.mov_rr(true, MAP[usize::from(insn.src)], R11);
        }
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
        let cc = match insn.opc & 0xf0 {
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
        };
        let target = self.check_target(pc, insn.off.into())?;
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
        let cost = rules::jump_cost(pc, target);
        if cost == 0 {
            let at = self.a.jcc_rel32(cc);
            return self.fixup_slot(at, pc, insn.off.into());
        }
        // A taken backward jump charges fuel first.
        let skip = self.a.jcc_rel32(cc.invert());
        self.charge(pc, cost);
        let at = self.a.jmp_rel32();
        self.fixup_slot(at, pc, insn.off.into())?;
        self.a.bind_here(skip);
        Ok(())
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
        Ok(())
    }

    // ---- the shared tail -----------------------------------------------------------------

    /// Emits the stubs and shared exits, then patches every displacement.
    fn finish(mut self) -> EResult<Emitted> {
        let (stub_pos, to_mem_trap, mut to_set_trap) = self.emit_stubs();
        let refill = self.emit_refill(&mut to_set_trap);
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
                Target::Stub(n) => stub_pos[n],
                Target::Refill => refill,
                Target::Exit => exit,
                Target::Unwind => unwind,
            };
            self.a.patch_rel32(at, dest);
        }
        Ok(Emitted { code: self.a.buf })
    }

    /// Emits every stub: their positions, and the jumps still to bind to the memory-trap
    /// and the set-trap paths.
    fn emit_stubs(&mut self) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
        let mut stub_pos = Vec::with_capacity(self.stubs.len());
        let mut to_mem_trap = Vec::new();
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
                    // r9 and r10 may hold a value across the charge (r10's, read
                    // into r9 before a `callx`): kept; r11 is free at a charge.
                    self.a.push(R10);
                    self.a.push(R9);
                    self.a.mov_imm(R10, u64::from(pc));
                    let at = self.a.call_rel32();
                    self.fixups.push((at, Target::Refill, pc));
                    self.a.pop(R9);
                    self.a.pop(R10);
                    let at = self.a.jmp_rel32();
                    self.a.patch_rel32(at, back);
                }
                Stub::Memory { pc, base, off, aux } => {
                    self.a.lea(R11, mem(base, i32::from(off)));
                    self.a.mov_imm(R10, u64::from(pc));
                    self.a.mov_imm(R9, aux);
                    to_mem_trap.push(self.a.jmp_rel32());
                }
            }
        }
        (stub_pos, to_mem_trap, to_set_trap)
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
