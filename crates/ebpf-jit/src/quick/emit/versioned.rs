//! Versioned loops: a second, unchecked copy of a simple loop, entered through a guard
//! that proves its strided accesses in bounds for as many iterations as the fuel slice
//! lets it run (see "Versioned loops" in the module doc of `emit`).
//!
//! Which loops: those `loops::plan_loops` versions for the Cranelift tier (the same
//! symbolic pass finds their strided accesses, as affine forms of the registers at the
//! header) that are also one straight range of slots `header..=bottom` with one backward
//! jump, the last slot (a back edge [`Emitter::back_edge`] emits: a conditional jump,
//! or `jcc +1; ja header`), no call, no `lddw`, no inner loop, and no condition the
//! Cranelift guard adds (lags, 32-bit forms). Their accesses through the stack keep
//! their checks; the rest, as `loops::GuardSpan`s, are proven by the guard against the
//! region caches.

use std::collections::BTreeSet;

use csx_ebpf::engine::rules;
use csx_ebpf::isa::*;

use super::*;
use crate::analysis::{plan_program_with, FunctionPlan};
use crate::loops::{guard_spans, plan_loops, GuardSpan, VersionedLoop};

/// The least number of iterations after the first the guard must prove before it
/// enters the unchecked copy: near a region's end (a loop about to trap, or one whose
/// output cursor the guard bounds by its longest step) the copy would otherwise run an
/// iteration or two between refills of the slice it shortened.
const RUN_MIN: i32 = 8;

/// Where the guard keeps the fewest proven iterations while it works: the context's r0
/// slot, which nothing reads during a run (the `exit` of the entry frame writes it).
const GUARD_RUNS: i32 = offsets::reg(0);

/// The host address minus the virtual address of the region the guard proved the
/// loads (the stores) in: an unchecked access is `[reg + off + delta]`. The context's
/// r8 and r9 slots, which the quick tier reads nowhere else.
const DELTA_READ: i32 = offsets::reg(8);
const DELTA_WRITE: i32 = offsets::reg(9);

fn delta(write: bool) -> i32 {
    if write {
        DELTA_WRITE
    } else {
        DELTA_READ
    }
}

/// A loop the quick tier versions.
#[derive(Clone, Debug)]
pub(super) struct QuickLoop {
    pub header: u32,
    /// The loop's back edge: its only backward jump, and its last slot.
    pub bottom: u32,
    /// Fuel the back edge charges: what one iteration costs.
    pub cost: i32,
    pub spans: Vec<GuardSpan>,
    /// The slots of the accesses the spans cover: unchecked in the copy.
    pub unchecked: BTreeSet<u32>,
}

/// The loops of the program at `entry` the quick tier versions, by header. `targets`
/// and `bottoms`: [`jump_targets`] and [`loop_bottoms`] of `insns`.
pub(super) fn versioned_loops(
    insns: &[Insn],
    entry: u32,
    targets: &[bool],
    bottoms: &[bool],
) -> Vec<QuickLoop> {
    // No speculative regions: they are the Cranelift tier's, and loops would only have
    // to hold them whole.
    let Ok(program) = plan_program_with(insns, entry, false) else {
        return Vec::new();
    };
    let mut out: Vec<QuickLoop> = program
        .functions
        .iter()
        .flat_map(|f| {
            plan_loops(insns, f, false)
                .into_iter()
                .filter_map(|l| quick_loop(insns, f, &l, targets, bottoms))
        })
        .collect();
    out.sort_by_key(|q| q.header);
    out.dedup_by_key(|q| q.header);
    out
}

/// `l` as a [`QuickLoop`], or `None` when it is not of the shape the quick tier versions
/// (see the module doc).
fn quick_loop(
    insns: &[Insn],
    plan: &FunctionPlan,
    l: &VersionedLoop,
    targets: &[bool],
    bottoms: &[bool],
) -> Option<QuickLoop> {
    if !(l.inner.is_empty() && l.lags.is_empty() && l.narrow.is_empty()) {
        return None;
    }
    let h = l.header;
    let b = *l.body.last()?;
    // One straight range of slots (an `lddw` leaves a hole: its tail is no slot).
    if *l.body.first()? != h || l.body.len() != (b - h + 1) as usize {
        return None;
    }
    for pc in h..=b {
        let insn = &insns[pc as usize];
        if insn.class() == CLASS_LD {
            return None;
        }
        if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
            continue;
        }
        match insn.opc & 0xf0 {
            JMP_CALL => return None,
            JMP_EXIT => {}
            _ => {
                let back = back_edge_target(pc as usize, insn);
                if back.is_some() && (pc != b || back != Some(h as usize)) {
                    return None;
                }
            }
        }
    }
    let last = &insns[b as usize];
    if last.opc == OP_JA {
        // `jcc +1; ja header`, fused into one back edge where the `ja` is no target.
        let c = b.checked_sub(1).filter(|&c| c >= h)?;
        let jcc = &insns[c as usize];
        let conditional = matches!(jcc.class(), CLASS_JMP | CLASS_JMP32)
            && !matches!(jcc.opc & 0xf0, JMP_JA | JMP_CALL | JMP_EXIT);
        if !(conditional && jcc.off == 1 && !targets[b as usize]) {
            return None;
        }
    }
    if !bottoms[b as usize] || back_edge_target(b as usize, last) != Some(h as usize) {
        return None;
    }
    let cost = i32::try_from(rules::jump_cost(b, h)).ok()?;
    // Through the stack (r10's forms, and pointers made from r10 on every path) the
    // quick tier has checks of its own, against the stack's fixed bounds.
    let fits = |s: &GuardSpan| {
        !s.stack
            && !s.pcs.iter().any(|pc| plan.stack_bases.contains(pc))
            && s.coef[10] == 0
            && s.coef.iter().all(|&c| i32::try_from(c).is_ok())
            && (1..=i64::from(GROUP_SPAN_MAX)).contains(&s.len)
            && s.stride.unsigned_abs() <= 1 << 24
    };
    let spans: Vec<GuardSpan> = guard_spans(&l.accesses).into_iter().filter(fits).collect();
    if spans.is_empty() {
        return None;
    }
    let unchecked = spans.iter().flat_map(|s| s.pcs.iter().copied()).collect();
    Some(QuickLoop {
        header: h,
        bottom: b,
        cost,
        spans,
        unchecked,
    })
}

impl Emitter<'_> {
    /// The versioned loop whose header is slot `pc`, if any.
    pub(super) fn versioned_at(&self, pc: u32) -> Option<usize> {
        self.vloops.binary_search_by_key(&pc, |q| q.header).ok()
    }

    /// Where the code of a jump to slot `t` goes: the unchecked copy's slot while one is
    /// emitted and `t` is in its loop, else the slot's code.
    pub(super) fn slot_target(&self, t: u32) -> Target {
        match self.copying {
            Some(i) if (self.vloops[i].header..=self.vloops[i].bottom).contains(&t) => {
                Target::Copy(i, t)
            }
            _ => Target::Slot(t),
        }
    }

    /// Records that slot `pc`'s code starts here: in the unchecked copy while one is
    /// emitted, else in the main code.
    pub(super) fn mark_slot(&mut self, pc: usize) {
        let pos = self.a.pos();
        match self.copying {
            Some(i) => self.copy_pos[i][pc - self.vloops[i].header as usize] = pos,
            None => self.slot_pos[pc] = pos,
        }
    }

    /// The operand of an access at `pc` the guard of the copy being emitted proved in
    /// bounds, or `None`.
    pub(super) fn unchecked_access(
        &mut self,
        pc: u32,
        base: u8,
        off: i16,
        write: bool,
    ) -> Option<Mem> {
        let i = self.copying?;
        if !self.vloops[i].unchecked.contains(&pc) || usize::from(base) >= MAP.len() {
            return None;
        }
        self.proven_host = None;
        if self.held_delta != Some(write) {
            self.ctx_load(R11, delta(write));
            self.held_delta = Some(write);
        }
        Some(mem_index(MAP[usize::from(base)], R11, i32::from(off)))
    }

    /// Whether r11 still holds [`Emitter::held_delta`]'s delta when `insn`'s code (slot
    /// `pc` of the copy being emitted) starts, given that it held it after the slot
    /// before (which was no jump target): ALU instructions leave r11 alone (but shifts
    /// by a register and divisions), and so do unchecked accesses, accesses at r10 plus
    /// a constant in the frame, and forward conditional jumps.
    fn keeps_delta(&self, pc: u32, insn: &Insn) -> bool {
        let unchecked = |i: usize| self.vloops[i].unchecked.contains(&pc);
        match (insn.class(), self.copying) {
            (_, None) => false,
            (CLASS_ALU | CLASS_ALU64, _) => {
                let op = insn.opc & 0xf0;
                let shift_by_reg =
                    matches!(op, ALU_LSH | ALU_RSH | ALU_ARSH) && insn.opc & SRC_X != 0;
                !shift_by_reg && !matches!(op, ALU_DIV | ALU_MOD)
            }
            (CLASS_LDX | CLASS_ST | CLASS_STX, Some(i)) => {
                insn.opc & 0xe0 != MODE_ATOMIC
                    && (unchecked(i) || self.cache_access(insn).is_none())
            }
            (CLASS_JMP | CLASS_JMP32, _) => {
                !matches!(insn.opc & 0xf0, JMP_JA | JMP_CALL | JMP_EXIT) && insn.off >= 0
            }
            _ => false,
        }
    }

    /// Loop `i`'s guard, at its header in the main code (which jumps from outside the
    /// loop, and refills at its back edge, reach): for each span, the iterations after
    /// the first that keep its bytes in its kind's cached region, the fewest of them
    /// `m`; with `m` at least [`RUN_MIN`], the slice cut to `m` iterations' charges
    /// (the rest moved to the reserve, so the fuel left is the same), the regions'
    /// deltas stored, and on to the copy. Else, or where a span is not in the cached
    /// region, on to the checked loop, which comes back here when its slice runs out.
    /// Clobbers r10 and r11.
    pub(super) fn loop_guard(&mut self, i: usize) {
        let q = self.vloops[i].clone();
        let mut fails = Vec::new();
        self.a.mov_imm(R11, 1 << 32);
        self.a.mov_mr(mem(CTX, GUARD_RUNS), R11);
        for s in &q.spans {
            self.span_runs(s, &mut fails);
        }
        let a = &mut self.a;
        a.mov_rm(R10, mem(CTX, GUARD_RUNS));
        a.alu_ri(Alu::Cmp, true, R10, RUN_MIN);
        fails.push(a.jcc_rel32(Cond::B));
        a.imul_ri(true, R10, q.cost);
        a.mov_rm(R11, mem(CTX, offsets::FUEL_USED));
        a.alu_rr(Alu::Sub, true, R11, R10);
        let keep = a.jcc_rel32(Cond::Be);
        a.alu_rm(Alu::Add, true, R11, mem(CTX, offsets::FUEL_RESERVE));
        a.mov_mr(mem(CTX, offsets::FUEL_RESERVE), R11);
        a.mov_mr(mem(CTX, offsets::FUEL_USED), R10);
        a.bind_here(keep);
        for write in [false, true] {
            if q.spans.iter().any(|s| s.write == write) {
                let c = cache(write);
                a.mov_rm(R10, mem(CTX, c + CACHE_BASE));
                a.alu_rm(Alu::Add, true, R10, mem(CTX, c + CACHE_NEG_LO));
                a.mov_mr(mem(CTX, delta(write)), R10);
            }
        }
        self.jump(Target::Copy(i, q.header));
        for at in fails {
            self.a.bind_here(at);
        }
    }

    /// One span's part of [`Emitter::loop_guard`]: its offset `o` in the cached region
    /// on entry and the last offset `last` at which its bytes fit; `o > last` fails.
    /// Then `(last - o) / stride` going up, `o / -stride` going down, lowers the count
    /// at [`GUARD_RUNS`] (a stride of 0 leaves it).
    fn span_runs(&mut self, s: &GuardSpan, fails: &mut Vec<usize>) {
        let c = cache(s.write);
        self.form(&s.coef, s.k);
        let a = &mut self.a;
        a.alu_rm(Alu::Add, true, R11, mem(CTX, c + CACHE_NEG_LO));
        a.mov_rm(R10, mem(CTX, c + CACHE_LIMIT));
        // `len - 8` plus 8 less the span's length: below 0 when the region is shorter.
        let len = i32::try_from(s.len).expect("spans are at most GROUP_SPAN_MAX long");
        a.alu_ri(Alu::Add, true, R10, CACHE_LEN_MIN - len);
        fails.push(a.jcc_rel32(Cond::L));
        a.alu_rr(Alu::Cmp, true, R11, R10);
        fails.push(a.jcc_rel32(Cond::A));
        if s.stride == 0 {
            return;
        }
        if s.stride > 0 {
            a.alu_rr(Alu::Sub, true, R10, R11);
        } else {
            a.mov_rr(true, R10, R11);
        }
        let step = s.stride.unsigned_abs();
        if step.is_power_of_two() {
            if step > 1 {
                a.shift_ri(Shift::Shr, true, R10, step.trailing_zeros() as u8);
            }
        } else {
            a.push(RAX);
            a.push(RDX);
            a.mov_rr(true, RAX, R10);
            a.alu_rr(Alu::Xor, false, RDX, RDX);
            a.mov_imm(R10, step);
            a.unary(Unary::Div, true, R10);
            a.mov_rr(true, R10, RAX);
            a.pop(RDX);
            a.pop(RAX);
        }
        a.alu_rm(Alu::Cmp, true, R10, mem(CTX, GUARD_RUNS));
        let more = a.jcc_rel32(Cond::Ae);
        a.mov_mr(mem(CTX, GUARD_RUNS), R10);
        a.bind_here(more);
    }

    /// r11 = the affine form `coef . (r0..r9) + k` of the registers now (mod 2^64);
    /// clobbers r10. The coefficients fit in 32 bits, r10's is 0 ([`quick_loop`]).
    fn form(&mut self, coef: &[i64; 11], k: i64) {
        self.a.mov_imm(R11, k as u64);
        for (r, &c) in coef.iter().take(MAP.len()).enumerate() {
            let host = MAP[r];
            match c {
                0 => {}
                1 => self.a.alu_rr(Alu::Add, true, R11, host),
                -1 => self.a.alu_rr(Alu::Sub, true, R11, host),
                _ => {
                    self.a.mov_rr(true, R10, host);
                    self.a
                        .imul_ri(true, R10, i32::try_from(c).expect("checked by quick_loop"));
                    self.a.alu_rr(Alu::Add, true, R11, R10);
                }
            }
        }
    }

    /// The back edge of the copy of loop `i` at `pc` (see [`Emitter::back_edge`]):
    /// taken, to the copy's header; a slice too short for the charge leaves for the
    /// checked loop's back edge with the charge undone (it charges again, refills and
    /// goes back through the guard); falling through, the charge undone and on to the
    /// main code after the loop.
    pub(super) fn copy_back_edge(
        &mut self,
        i: usize,
        pc: u32,
        (compare, invert): (u32, bool),
        cost: i32,
    ) -> EResult<()> {
        let insn = self.insns[compare as usize];
        let mut cc = self.condition(compare, &insn)?;
        if invert {
            cc = cc.invert();
        }
        let fuel = mem(CTX, offsets::FUEL_USED);
        self.a.alu_mi(Alu::Sub, true, fuel, cost);
        self.jcc_stub(Cond::B, Stub::Leave { cost, compare });
        let wide = insn.class() == CLASS_JMP;
        self.compare(compare, &insn, wide, insn.opc & SRC_X != 0)?;
        self.jcc(cc, Target::Copy(i, self.vloops[i].header));
        self.a.alu_mi(Alu::Add, true, fuel, cost);
        self.jump(Target::Slot(pc + 1));
        Ok(())
    }

    /// Emits each versioned loop's unchecked copy (after the main code, before the
    /// stubs): the slots of the loop again, what is known starting from nothing, no
    /// span groups, and the spans' accesses unchecked.
    pub(super) fn emit_loop_copies(&mut self) -> EResult<()> {
        for i in 0..self.vloops.len() {
            let (h, b) = (
                self.vloops[i].header as usize,
                self.vloops[i].bottom as usize,
            );
            self.a.align_with_nops(LOOP_HEAD_ALIGN);
            self.copying = Some(i);
            self.known = [Known::NOTHING; 10];
            self.group = None;
            self.proven_host = None;
            self.held_delta = None;
            let mut pc = h;
            while pc <= b {
                self.mark_slot(pc);
                let insn = self.insns[pc];
                if self.targets[pc] {
                    self.known = [Known::NOTHING; 10];
                }
                if self.targets[pc] || !self.keeps_proven_host(&insn) {
                    self.proven_host = None;
                }
                if self.targets[pc] || !self.keeps_delta(pc as u32, &insn) {
                    self.held_delta = None;
                }
                if self.fused_pair(pc, &insn, None)? {
                    pc += 2;
                    continue;
                }
                let (next, _) = self.insn(pc as u32, &insn)?;
                if self.proven_host.is_some_and(|r| writes_register(&insn, r)) {
                    self.proven_host = None;
                }
                self.learn(&insn, self.insns.get(pc + 1));
                pc = next as usize;
            }
            self.copying = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_ebpf::asm::assemble;

    fn loops_of(src: &str) -> Vec<QuickLoop> {
        let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
        versioned_loops(&insns, 0, &jump_targets(&insns, 0), &loop_bottoms(&insns))
    }

    /// A loop over its input is versioned, with its strided load unchecked; one that
    /// calls a helper, one with an inner loop, and accesses only through r10 are not.
    #[test]
    fn which_loops_are_versioned() {
        let sum = "mov %r0, 0\nmov %r6, 0\n\
                   top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
                   add %r6, 1\njlt %r6, %r2, top\nexit";
        let found = loops_of(sum);
        assert_eq!(found.len(), 1, "{found:?}");
        let q = &found[0];
        assert_eq!((q.header, q.bottom, q.cost), (2, 7, 6));
        assert_eq!(q.unchecked, BTreeSet::from([4]));
        assert_eq!(q.spans[0].stride, 1);
        let call = "mov %r0, 0\nmov %r6, 0\n\
                    top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nmov %r7, %r1\n\
                    mov %r1, %r5\ncall 5\nmov %r1, %r7\nadd %r6, 1\njlt %r6, %r2, top\nexit";
        assert!(loops_of(call).is_empty());
        let nested = "mov %r0, 0\nmov %r6, 0\n\
                      outer:\nmov %r7, 0\ninner:\nmov %r4, %r1\nadd %r4, %r7\n\
                      ldxb %r5, [%r4+0]\nadd %r0, %r5\nadd %r7, 1\njlt %r7, 8, inner\n\
                      add %r6, 1\njlt %r6, 4, outer\nexit";
        let found = loops_of(nested);
        assert!(found.iter().all(|q| q.header == 3), "{found:?}");
        let stack = "mov %r0, 0\nmov %r6, 0\nmov %r3, %r10\nadd %r3, -64\n\
                     top:\nldxb %r5, [%r3+0]\nadd %r0, %r5\nadd %r3, 1\nadd %r6, 1\n\
                     jlt %r6, 64, top\nexit";
        assert!(loops_of(stack).is_empty());
    }
}
