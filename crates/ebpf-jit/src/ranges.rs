//! Value ranges per slot: what every execution of one eBPF function has in r0-r9 when it
//! reaches each reachable slot, as an unsigned upper bound (a *scalar*) or as an offset
//! range from the function's own r10 (a *frame* pointer), for the translation to drop
//! checks that cannot fail (see `translate`, Memory).
//!
//! A forward data-flow (abstract interpretation) over the function's slots, joined by
//! the larger bound at each slot, solved by a worklist in slot order. What it proves:
//!
//! * **Masks, shifts, remainders, loads**: a result's bound from its operands' (the
//!   rules of [`alu_result_bound`], which translation's per-value facts share).
//! * **Dominating compares**: on each edge of a conditional jump, the compared register
//!   is bounded by the other operand (`if i < 16` bounds `i` by 15 on the taken edge,
//!   `if i >= n` by `n`'s bound less one on the fall-through, the relational case), and
//!   `i != K` with `i` at most `K` bounds it by `K - 1` (clang's rotated loops, which
//!   leave at `i == K`). A 32-bit compare bounds a register only when its value fits in
//!   32 bits (then it equals the compared half).
//! * **Spills**: the 64 eight-byte frame slots hold a value each; a reload of an exact
//!   slot gets the value stored. A store through an address the pass does not know to be
//!   at a constant offset from r10 forgets every slot it may overlap (all of them, when
//!   the address is not a frame pointer); calls forget them all.
//! * **Frame pointers** (r10 plus constants and bounded indexes), carried across blocks
//!   and loops, so that an access through one proven inside the frame needs no check.
//!
//! Loops: the target of a backward jump (every cycle has one) whose state grew twice has
//! each growing bound widened to the next of a few thresholds (the program's compare and mask constants, one either side of each,
//! and the unsigned type bounds); a frame pointer's range that keeps growing becomes
//! unknown. Each bound then grows a bounded number of times, so the pass ends.
//!
//! The facts hold of executions, not of copies of code that run a block whose branch did
//! not go there (speculative regions, if-converted arms, inlined callees): translation
//! uses them only in ordinary blocks.

use std::collections::{BTreeMap, BTreeSet};

use csx_ebpf::isa::*;

use crate::analysis::{access_size, flow, insn_len, Flow, PlanError};

/// Largest offset from r10 (either way), and largest index added to a frame pointer,
/// the pass keeps: far from overflow, far beyond a frame.
const OFFSET_MAX: i64 = 1 << 32;

/// Frame slots the pass tracks: `r10 - 8 * (i + 1)` for `i < SLOTS`.
const SLOTS: usize = 64;

/// Joins after which a slot's growing bounds are widened.
const GROWTH_BEFORE_WIDENING: u8 = 2;

/// What a register (or a frame slot) holds at a slot, on every execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Val {
    /// An unsigned value of at most this.
    Scalar(u64),
    /// The function's r10 plus an offset in `[lo, hi]`.
    Frame { lo: i64, hi: i64 },
}

/// Nothing known.
const TOP: Val = Val::Scalar(u64::MAX);

impl Val {
    /// The unsigned bound this value is known to keep (none for a frame pointer).
    fn bound(self) -> u64 {
        match self {
            Val::Scalar(h) => h,
            Val::Frame { .. } => u64::MAX,
        }
    }

    fn join(self, other: Val) -> Val {
        match (self, other) {
            (Val::Scalar(a), Val::Scalar(b)) => Val::Scalar(a.max(b)),
            (Val::Frame { lo: a, hi: b }, Val::Frame { lo: c, hi: d }) => Val::Frame {
                lo: a.min(c),
                hi: b.max(d),
            },
            _ => TOP,
        }
    }

    /// `old` joined with `new`, widened past `old` to the next threshold when it grew.
    fn widen(old: Val, new: Val, thresholds: &[u64]) -> Val {
        let j = old.join(new);
        if j == old {
            return j;
        }
        match j {
            Val::Scalar(h) => {
                let i = thresholds.partition_point(|&t| t < h);
                Val::Scalar(thresholds.get(i).copied().unwrap_or(u64::MAX))
            }
            Val::Frame { .. } => TOP,
        }
    }

    /// A frame pointer moved by `k`, if it stays within [`OFFSET_MAX`].
    fn frame_plus(lo: i64, hi: i64, k: i64) -> Val {
        let (lo, hi) = (lo.saturating_add(k), hi.saturating_add(k));
        if lo.abs() <= OFFSET_MAX && hi.abs() <= OFFSET_MAX {
            Val::Frame { lo, hi }
        } else {
            TOP
        }
    }
}

/// The state before one slot: r0-r9 and the frame slots.
#[derive(Clone, PartialEq, Eq)]
struct State {
    regs: [Val; 10],
    slots: [Val; SLOTS],
}

impl State {
    fn get(&self, r: u8) -> Val {
        match r {
            REG_FP => Val::Frame { lo: 0, hi: 0 },
            r if r < 10 => self.regs[r as usize],
            _ => TOP,
        }
    }

    fn set(&mut self, r: u8, v: Val) {
        if r < 10 {
            self.regs[r as usize] = v;
        }
    }

    fn forget_slots(&mut self) {
        self.slots = [TOP; SLOTS];
    }

    /// Forgets the frame slots that bytes `[lo, hi)` from r10 overlap.
    fn forget_range(&mut self, lo: i64, hi: i64) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            let (slo, shi) = (-8 * (i as i64 + 1), -8 * i as i64);
            if lo < shi && slo < hi {
                *s = TOP;
            }
        }
    }
}

/// The value ranges of one function: the registers' [`Val`]s before each reachable slot.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ranges {
    at: BTreeMap<u32, [Val; 10]>,
}

impl Ranges {
    /// The unsigned bound of register `r` before slot `pc` (`u64::MAX`: unknown).
    pub(crate) fn bound(&self, pc: u32, r: u8) -> u64 {
        match self.at.get(&pc) {
            Some(regs) if r < 10 => regs[r as usize].bound(),
            _ => u64::MAX,
        }
    }

    /// The offsets from r10 that register `r` lies in before slot `pc`, if it is a frame
    /// pointer there.
    pub(crate) fn frame(&self, pc: u32, r: u8) -> Option<(i64, i64)> {
        if r == REG_FP {
            return Some((0, 0));
        }
        match self.at.get(&pc)?.get(r as usize)? {
            Val::Frame { lo, hi } => Some((*lo, *hi)),
            Val::Scalar(_) => None,
        }
    }

    /// Whether an access of `size` bytes at register `r` plus `off` before slot `pc`
    /// lies inside the current frame, `[r10 - frame, r10)`, on every execution.
    pub(crate) fn in_frame(&self, pc: u32, r: u8, off: i16, size: i64, frame: i64) -> bool {
        self.frame(pc, r).is_some_and(|(lo, hi)| {
            lo + i64::from(off) >= -frame && hi + i64::from(off) + size <= 0
        })
    }
}

/// The bound of an ALU result (`insn`, 64- or 32-bit) whose destination operand is at
/// most `bd` and whose source (register or immediate) at most `bs`; the width's maximum
/// when nothing better is known. A 32-bit result is zero-extended, so it never exceeds
/// `u32::MAX`.
pub(crate) fn alu_result_bound(insn: &Insn, bd: u64, bs: Option<u64>) -> u64 {
    let is64 = insn.class() == CLASS_ALU64;
    let op = insn.opc & 0xf0;
    let width_max = if is64 { u64::MAX } else { u64::from(u32::MAX) };
    let bits = if is64 { 64 } else { 32 };
    let imm = if is64 {
        i64::from(insn.imm) as u64
    } else {
        u64::from(insn.imm as u32)
    };
    let by_reg = bs.is_some();
    let bd = bd.min(width_max);
    let bs = bs.unwrap_or(imm).min(width_max);
    let bound = match op {
        ALU_AND => bd.min(bs),
        // Every bit set in either operand, at most.
        ALU_OR | ALU_XOR => match bd | bs {
            0 => 0,
            x => u64::MAX >> x.leading_zeros(),
        },
        ALU_ADD => bd.saturating_add(bs),
        ALU_MUL => bd.saturating_mul(bs),
        ALU_RSH if !by_reg => bd >> (imm % bits),
        ALU_LSH if !by_reg => {
            let k = (imm % bits) as u32;
            if bd.leading_zeros() >= k + (64 - bits as u32) {
                bd << k
            } else {
                width_max
            }
        }
        ALU_MOD if !by_reg && insn.off == 0 && imm != 0 => bd.min(imm - 1),
        ALU_MOV if insn.off == 0 => bs,
        _ => width_max,
    };
    bound.min(width_max)
}

/// The value ranges of the function whose reachable slots are `pcs` (from `start`).
pub(crate) fn ranges(
    insns: &[Insn],
    tails: &BTreeSet<u32>,
    pcs: &[u32],
    start: u32,
) -> Result<Ranges, PlanError> {
    let thresholds = thresholds(insns, pcs);
    let mut states: BTreeMap<u32, (State, u8)> = BTreeMap::new();
    let entry = State {
        regs: [TOP; 10],
        slots: [TOP; SLOTS],
    };
    states.insert(start, (entry, 0));
    let mut work = BTreeSet::from([start]);
    while let Some(pc) = work.pop_first() {
        let insn = &insns[pc as usize];
        let f = flow(insns, tails, pc)?;
        let out = after(&states[&pc].0, insns, pc);
        let next = pc + insn_len(insn);
        let edges: [(Option<u32>, Option<State>); 2] = match f {
            Flow::Next | Flow::CallLocal(_) => [(Some(next), Some(out)), (None, None)],
            Flow::Jump(t) => [(Some(t), Some(out)), (None, None)],
            Flow::Branch(t) => [
                (Some(t), refine(&out, insn, true)),
                (Some(next), refine(&out, insn, false)),
            ],
            Flow::Exit => [(None, None), (None, None)],
        };
        for (t, s) in edges {
            let (Some(t), Some(s)) = (t, s) else { continue };
            let widen = t <= pc;
            if merge(&mut states, t, s, widen.then_some(&thresholds[..])) {
                work.insert(t);
            }
        }
    }
    Ok(Ranges {
        at: states
            .into_iter()
            .map(|(pc, (s, _))| (pc, s.regs))
            .collect(),
    })
}

/// Joins `s` into the state before `t`; whether that changed it. Along a backward jump
/// (`thresholds` given), a state that grew before is widened.
fn merge(
    states: &mut BTreeMap<u32, (State, u8)>,
    t: u32,
    s: State,
    thresholds: Option<&[u64]>,
) -> bool {
    let Some((old, grown)) = states.get_mut(&t) else {
        states.insert(t, (s, 0));
        return true;
    };
    let widen = thresholds.filter(|_| *grown >= GROWTH_BEFORE_WIDENING);
    let mut changed = false;
    let pairs = old
        .regs
        .iter_mut()
        .zip(s.regs)
        .chain(old.slots.iter_mut().zip(s.slots));
    for (o, n) in pairs {
        let j = if let Some(thresholds) = widen {
            Val::widen(*o, n, thresholds)
        } else {
            o.join(n)
        };
        if j != *o {
            *o = j;
            changed = true;
        }
    }
    if changed {
        *grown = grown.saturating_add(1);
    }
    changed
}

/// The widening thresholds: each compare's and mask's constant and one either side,
/// the unsigned type bounds and the frame size, ascending.
fn thresholds(insns: &[Insn], pcs: &[u32]) -> Vec<u64> {
    let mut t: BTreeSet<u64> = [0xff, 0xffff, 0x1ff, u64::from(u32::MAX), u64::MAX].into();
    for &pc in pcs {
        let insn = &insns[pc as usize];
        let constant = match insn.class() {
            CLASS_JMP | CLASS_JMP32 if insn.opc & SRC_X == 0 => Some(insn.imm),
            CLASS_ALU | CLASS_ALU64 if insn.opc & 0xf0 == ALU_AND && insn.opc & SRC_X == 0 => {
                Some(insn.imm)
            }
            _ => None,
        };
        if let Some(k) = constant {
            let k = i64::from(k) as u64;
            t.extend([k.wrapping_sub(1), k, k.wrapping_add(1)]);
        }
    }
    t.into_iter().collect()
}

/// The state after the instruction at `pc` runs (its edges not yet refined).
fn after(s: &State, insns: &[Insn], pc: u32) -> State {
    let insn = &insns[pc as usize];
    let mut s = s.clone();
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 => {
            let v = alu(&s, insn);
            s.set(insn.dst, v);
        }
        CLASS_LD if insn.opc == OP_LDDW => {
            let high = insns.get(pc as usize + 1).map_or(0, |i| i.imm);
            s.set(
                insn.dst,
                Val::Scalar(u64::from(insn.imm as u32) | (u64::from(high as u32) << 32)),
            );
        }
        // The legacy packet loads write r0 and may clobber r1-r5.
        CLASS_LD => (0..=5).for_each(|r| s.set(r, TOP)),
        CLASS_LDX => {
            let v = load(&s, insn);
            s.set(insn.dst, v);
        }
        CLASS_ST | CLASS_STX => store(&mut s, insn),
        // Helper and local calls: r0-r5 change, and memory the callee reaches may too.
        CLASS_JMP if insn.opc & 0xf0 == JMP_CALL => {
            (0..=5).for_each(|r| s.set(r, TOP));
            s.forget_slots();
        }
        _ => {}
    }
    s
}

/// The value an ALU instruction leaves in its destination.
fn alu(s: &State, insn: &Insn) -> Val {
    let op = insn.opc & 0xf0;
    let by_reg = insn.opc & SRC_X != 0;
    let d = s.get(insn.dst);
    let src = by_reg.then(|| s.get(insn.src));
    if op == ALU_END {
        return TOP;
    }
    if insn.class() == CLASS_ALU64 {
        let k = i64::from(insn.imm);
        match (op, d, src) {
            (ALU_MOV, _, Some(v)) if insn.off == 0 => return v,
            (ALU_ADD, Val::Frame { lo, hi }, None) => return Val::frame_plus(lo, hi, k),
            (ALU_SUB, Val::Frame { lo, hi }, None) => return Val::frame_plus(lo, hi, -k),
            (ALU_ADD, Val::Frame { lo, hi }, Some(Val::Scalar(b)))
            | (ALU_ADD, Val::Scalar(b), Some(Val::Frame { lo, hi })) => {
                return if b <= OFFSET_MAX as u64 {
                    Val::frame_plus(lo, hi.saturating_add(b as i64), 0)
                } else {
                    TOP
                };
            }
            _ => {}
        }
    }
    Val::Scalar(alu_result_bound(insn, d.bound(), src.map(Val::bound)))
}

/// The value a load leaves in its destination.
fn load(s: &State, insn: &Insn) -> Val {
    if insn.opc & 0xe0 != MODE_MEM {
        return TOP;
    }
    let size = access_size(insn);
    if insn.src == REG_FP && size == 8 {
        if let Some(i) = exact_slot(insn.off) {
            return s.slots[i];
        }
    }
    match size {
        8 => TOP,
        n => Val::Scalar((1u64 << (8 * n)) - 1),
    }
}

/// What a store (or an atomic) does to the frame slots and registers.
fn store(s: &mut State, insn: &Insn) {
    let size = access_size(insn);
    let mode = insn.opc & 0xe0;
    let off = i64::from(insn.off);
    match s.get(insn.dst) {
        Val::Frame { lo, hi } => s.forget_range(lo + off, hi + off + size),
        Val::Scalar(_) => s.forget_slots(),
    }
    if insn.dst == REG_FP && size == 8 && mode == MODE_MEM {
        if let Some(i) = exact_slot(insn.off) {
            s.slots[i] = match insn.class() {
                CLASS_STX => s.get(insn.src),
                _ => Val::Scalar(i64::from(insn.imm) as u64),
            };
        }
    }
    if mode == MODE_ATOMIC {
        // A fetch writes its source register; a compare-exchange, r0.
        s.set(insn.src, TOP);
        s.set(0, TOP);
    }
}

/// The frame slot an aligned eight-byte access at r10 + `off` covers exactly.
fn exact_slot(off: i16) -> Option<usize> {
    let off = i64::from(off);
    (off % 8 == 0 && (-(SLOTS as i64) * 8..0).contains(&off)).then(|| (-off / 8 - 1) as usize)
}

/// An order a taken (or not taken) compare establishes between its operands.
enum Rel {
    /// The first is below the second.
    Lt,
    /// The first is at most the second.
    Le,
    Eq,
    Ne,
}

/// The state on one edge of the conditional jump `insn`: its registers bounded by what
/// the compare says on that edge (`taken`).
fn refine(out: &State, insn: &Insn, taken: bool) -> Option<State> {
    let op = insn.opc & 0xf0;
    let is32 = insn.class() == CLASS_JMP32;
    let (a, b) = (Some(insn.dst), (insn.opc & SRC_X != 0).then_some(insn.src));
    // (first, second, relation) with the operands in the order the relation reads.
    let (x, y, rel) = match (op, taken) {
        (JMP_JLT, true) | (JMP_JGE, false) => (a, b, Rel::Lt),
        (JMP_JLE, true) | (JMP_JGT, false) => (a, b, Rel::Le),
        (JMP_JGT, true) | (JMP_JLE, false) => (b, a, Rel::Lt),
        (JMP_JGE, true) | (JMP_JLT, false) => (b, a, Rel::Le),
        (JMP_JEQ, true) | (JMP_JNE, false) => (a, b, Rel::Eq),
        (JMP_JEQ, false) | (JMP_JNE, true) => (a, b, Rel::Ne),
        _ => return Some(out.clone()),
    };
    let k = if is32 {
        u64::from(insn.imm as u32)
    } else {
        i64::from(insn.imm) as u64
    };
    // The bound of an operand as the compare sees it (`None`: the immediate).
    let seen = |r: Option<u8>| match r {
        None => k,
        Some(r) if is32 => out.get(r).bound().min(u64::from(u32::MAX)),
        Some(r) => out.get(r).bound(),
    };
    let (hx, hy) = (seen(x), seen(y));
    let mut s = out.clone();
    // Bounds register `r` (when the compare sees all of it) by `h`.
    let mut bound = |r: Option<u8>, h: u64| {
        let Some(r) = r else { return };
        if let Val::Scalar(old) = s.get(r) {
            if !is32 || old <= u64::from(u32::MAX) {
                s.set(r, Val::Scalar(old.min(h)));
            }
        }
    };
    match rel {
        Rel::Lt => {
            if hy > 0 {
                bound(x, hy - 1);
            }
        }
        Rel::Le => bound(x, hy),
        Rel::Eq => {
            bound(x, hy);
            bound(y, hx);
        }
        // `x != K` with `x` at most `K`: below `K`.
        Rel::Ne if y.is_none() && hx == k && k > 0 => bound(x, k - 1),
        Rel::Ne => {}
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges_of(src: &str) -> Ranges {
        let insns = csx_ebpf::asm::assemble(src).unwrap();
        let plan = crate::analysis::plan_program(&insns, 0).unwrap();
        plan.functions[0].ranges.clone()
    }

    #[test]
    fn a_rotated_loop_counter_is_bounded_by_its_exit_test() {
        let r = ranges_of(
            "mov %r3, 0\nloop:\nmov %r5, %r10\nadd %r5, -64\nadd %r5, %r3\nstxb [%r5+0], %r3\n\
             add %r3, 1\njne %r3, 64, loop\nexit",
        );
        assert_eq!(r.bound(3, 3), 63);
        assert_eq!(r.frame(4, 5), Some((-64, -1)));
    }
}
