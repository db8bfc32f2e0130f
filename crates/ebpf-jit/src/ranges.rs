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
//! * **Entry facts** (the program's entry only, `entry_args`; used only where the run
//!   checked that `r1` points into a region readable for `r2` bytes, see `compiled`):
//!   `len` is the entry's r2. A scalar may also be known at most `len - d`
//!   ([`Val::Len`], from `i < len`, `i <= len` and `i + k` of such), an *input pointer*
//!   is r1 plus an offset in `[lo, hi]` and at most `len - d` ([`Val::Input`]), each
//!   path knows a least `len` (from `len < K` not taken, `len == 0` not taken, and any
//!   value at most `len - d` compared with a constant), and a register known to equal
//!   another plus a constant (`j = i + 4`, no wrap) passes what a compare says of one to
//!   the other. A load of `s` bytes at an input pointer plus `k` is inside the input
//!   when `lo + k >= 0` and `k + s <= d` (or `hi + k + s` is at most the least `len`).
//!
//! Loops: the target of a backward jump (every cycle has one) whose state grew twice has
//! each growing bound widened to the next of a few thresholds (the program's compare and
//! mask constants, one either side of each, and the unsigned type bounds); a frame
//! pointer's range that keeps growing becomes unknown, and an entry fact that moved is
//! dropped. Each bound then grows a bounded number of times, so the pass ends.
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
    /// An unsigned value of at most `max` and at most `len - d`, `len` being the program
    /// entry's r2 (see [`ranges`], `entry_args`): known of the entry function only.
    Len { max: u64, d: i64 },
    /// The program entry's r1 plus an offset of at least `lo` (at least 0), at most `hi`
    /// when known and at most `len - d` when known (one of them is).
    Input {
        lo: i64,
        hi: Option<i64>,
        d: Option<i64>,
    },
}

/// Nothing known.
const TOP: Val = Val::Scalar(u64::MAX);

impl Val {
    /// The unsigned bound this value is known to keep (none for a frame pointer).
    fn bound(self) -> u64 {
        match self {
            Val::Scalar(h) => h,
            Val::Len { max, .. } => max,
            Val::Frame { .. } | Val::Input { .. } => u64::MAX,
        }
    }

    /// The `d` of a value known to be at most `len - d`.
    fn len_d(self) -> Option<i64> {
        match self {
            Val::Len { d, .. } => Some(d),
            _ => None,
        }
    }

    /// A scalar of at most `max`, and of at most `len - d` when `d` is known.
    fn scalar(max: u64, d: Option<i64>) -> Val {
        match d {
            Some(d) if d.abs() <= OFFSET_MAX => Val::Len { max, d },
            _ => Val::Scalar(max),
        }
    }

    /// An input pointer, if one of its upper ends is known and they stay within
    /// [`OFFSET_MAX`].
    fn input(lo: i64, hi: Option<i64>, d: Option<i64>) -> Val {
        let hi = hi.filter(|h| h.abs() <= OFFSET_MAX);
        let d = d.filter(|d| d.abs() <= OFFSET_MAX);
        if !(0..=OFFSET_MAX).contains(&lo) || (hi.is_none() && d.is_none()) {
            return TOP;
        }
        Val::Input { lo, hi, d }
    }

    fn join(self, other: Val) -> Val {
        match (self, other) {
            (Val::Scalar(a), Val::Scalar(b)) => Val::Scalar(a.max(b)),
            (Val::Frame { lo: a, hi: b }, Val::Frame { lo: c, hi: d }) => Val::Frame {
                lo: a.min(c),
                hi: b.max(d),
            },
            // Zero is at most `len - 0` (a counter's start beside its later values).
            (Val::Len { .. } | Val::Scalar(_), Val::Len { .. } | Val::Scalar(_)) => {
                let d_of = |v: Val| {
                    if v == Val::Scalar(0) {
                        Some(0)
                    } else {
                        v.len_d()
                    }
                };
                let d = d_of(self).zip(d_of(other)).map(|(a, b)| a.min(b));
                Val::scalar(self.bound().max(other.bound()), d)
            }
            (Val::Input { lo: a, hi: x, d: e }, Val::Input { lo: b, hi: y, d: f }) => Val::input(
                a.min(b),
                x.zip(y).map(|(x, y)| x.max(y)),
                e.zip(f).map(|(e, f)| e.min(f)),
            ),
            _ => TOP,
        }
    }

    /// `self` from a state where `len` is at least `l`, put in the form `other` has so
    /// the two join without losing an entry fact: a scalar of at most `m` is at most
    /// `len - (l - m)` (`l - m` may be negative); an input pointer at most `hi` past r1 is at most
    /// `len - (l - hi)` past it.
    fn at_len(self, other: Val, l: u64) -> Val {
        let l = l.min(OFFSET_MAX as u64) as i64;
        match (self, other) {
            (Val::Scalar(m), Val::Len { .. }) if m <= OFFSET_MAX as u64 => {
                Val::scalar(m, Some(l - m as i64))
            }
            (Val::Input { lo, hi: Some(h), d }, Val::Input { .. }) => {
                Val::input(lo, Some(h), Some(d.map_or(l - h, |d| d.max(l - h))))
            }
            _ => self,
        }
    }

    /// An input pointer moved by `k` (either way, while its offset stays at least 0).
    fn input_plus(self, k: i64) -> Val {
        match self {
            Val::Input { lo, hi, d } if k.abs() <= OFFSET_MAX => {
                Val::input(lo + k, hi.map(|h| h + k), d.map(|d| d - k))
            }
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
            // Each end that moved is dropped (the bound widened as a scalar's).
            Val::Len { max, d } => {
                let max = if max == old.bound() {
                    max
                } else {
                    let i = thresholds.partition_point(|&t| t < max);
                    thresholds.get(i).copied().unwrap_or(u64::MAX)
                };
                Val::scalar(max, (old.len_d() == Some(d)).then_some(d))
            }
            Val::Input { lo, hi, d } => match old {
                Val::Input { lo: a, hi: x, d: e } if a == lo => {
                    Val::input(lo, hi.filter(|_| x == hi), d.filter(|_| e == d))
                }
                _ => TOP,
            },
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

/// The state before one slot: r0-r9, the frame slots, and what `len` (the entry's r2,
/// see [`Val::Len`]) is at least on every path here.
#[derive(Clone, PartialEq, Eq)]
struct State {
    regs: [Val; 10],
    slots: [Val; SLOTS],
    len_min: u64,
    /// `rel[r] = Some((s, k))`: r`r` equals r`s` plus `k` (as integers: the add did
    /// not wrap), so a compare that bounds one bounds the other (`i + 5 <= len`, as
    /// clang writes it, bounds `i`).
    rel: [Option<(u8, i64)>; 10],
}

impl State {
    fn get(&self, r: u8) -> Val {
        match r {
            REG_FP => Val::Frame { lo: 0, hi: 0 },
            r if r < 10 => self.regs[r as usize],
            _ => TOP,
        }
    }

    /// Refines what is known of register `r`'s value (which did not change).
    fn set(&mut self, r: u8, v: Val) {
        if r < 10 {
            self.regs[r as usize] = v;
        }
    }

    /// Gives register `r` a new value `v`: its relations to other registers go.
    fn write(&mut self, r: u8, v: Val) {
        if r < 10 {
            self.regs[r as usize] = v;
            self.rel[r as usize] = None;
            for x in &mut self.rel {
                if x.is_some_and(|(s, _)| s == r) {
                    *x = None;
                }
            }
        }
    }

    /// Passes what is known of register `r`'s `len - d` bound to the registers it equals
    /// plus or minus a constant, and theirs in turn (`j = i + 4`, and a copy `k = i`
    /// made before the compare of `j`).
    fn pass_len_fact_along(&mut self, r: u8) {
        let mut todo = vec![r];
        let mut seen = 1u16 << r;
        while let Some(r) = todo.pop() {
            let Some(d) = self.get(r).len_d() else {
                continue;
            };
            for j in 0..10u8 {
                let up = self.rel[r as usize]
                    .filter(|&(o, _)| o == j)
                    .map(|(_, k)| d + k);
                let down = self.rel[j as usize]
                    .filter(|&(o, _)| o == r)
                    .map(|(_, k)| d - k);
                for e in [up, down].into_iter().flatten() {
                    self.at_most_len_less(j, e);
                    if seen & (1 << j) == 0 {
                        seen |= 1 << j;
                        todo.push(j);
                    }
                }
            }
        }
    }

    /// Register `r` is at most `len - d` (as well as what was known of it).
    fn at_most_len_less(&mut self, r: u8, d: i64) {
        match self.get(r) {
            Val::Scalar(m) => self.set(r, Val::scalar(m, Some(d))),
            Val::Len { max, d: e } => self.set(r, Val::scalar(max, Some(e.max(d)))),
            _ => {}
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
    /// What the entry's `len` is at least before each slot, where more than 0.
    len_min: BTreeMap<u32, u64>,
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
            _ => None,
        }
    }

    /// Whether an access of `size` bytes at register `r` plus `off` before slot `pc`
    /// lies inside `[r1, r1 + r2)` of the program's entry, on every execution of the
    /// entry function as the program's entry (its [`ranges`] made with `entry_args`).
    pub(crate) fn in_input(&self, pc: u32, r: u8, off: i16, size: i64) -> bool {
        let Some(&Val::Input { lo, hi, d }) =
            self.at.get(&pc).and_then(|regs| regs.get(r as usize))
        else {
            return false;
        };
        let off = i64::from(off);
        let len_min = self
            .len_min
            .get(&pc)
            .map_or(0, |&l| l.min(OFFSET_MAX as u64) as i64);
        lo + off >= 0
            && (d.is_some_and(|d| off + size <= d) || hi.is_some_and(|h| h + off + size <= len_min))
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
///
/// `entry_args`: the function is the program's entry, and its facts are used only where
/// it runs as such, with `r1` pointing into a region that holds `r2` bytes from `r1`
/// (checked when the run starts): `r1` is then [`Val::Input`] at offset 0 and `r2`
/// [`Val::Len`]`(0)`, so `len` in these facts is below 2^32.
pub(crate) fn ranges(
    insns: &[Insn],
    tails: &BTreeSet<u32>,
    pcs: &[u32],
    start: u32,
    entry_args: bool,
) -> Result<Ranges, PlanError> {
    let thresholds = thresholds(insns, pcs);
    let mut states: BTreeMap<u32, (State, u8)> = BTreeMap::new();
    let mut entry = State {
        regs: [TOP; 10],
        slots: [TOP; SLOTS],
        len_min: 0,
        rel: [None; 10],
    };
    if entry_args {
        entry.regs[1] = Val::input(0, Some(0), None);
        entry.regs[2] = Val::scalar(u64::MAX, Some(0));
    }
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
    let len_min = states
        .iter()
        .filter(|(_, (s, _))| s.len_min > 0)
        .map(|(&pc, (s, _))| (pc, s.len_min))
        .collect();
    Ok(Ranges {
        at: states
            .into_iter()
            .map(|(pc, (s, _))| (pc, s.regs))
            .collect(),
        len_min,
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
    let (l_old, l_new) = (old.len_min, s.len_min);
    let mut changed = l_new < l_old;
    old.len_min = l_old.min(l_new);
    for (o, n) in old.rel.iter_mut().zip(s.rel) {
        if o.is_some() && *o != n {
            *o = None;
            changed = true;
        }
    }
    let pairs = old
        .regs
        .iter_mut()
        .zip(s.regs)
        .chain(old.slots.iter_mut().zip(s.slots));
    for (o, n) in pairs {
        // Each side in the other's form first (see `Val::at_len`).
        let (o2, n) = (o.at_len(n, l_old), n.at_len(*o, l_new));
        let j = if let Some(thresholds) = widen {
            Val::widen(o2, n, thresholds)
        } else {
            o2.join(n)
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
            let rel = relation(&s, insn);
            s.write(insn.dst, v);
            if let Some(rel) = rel {
                s.rel[insn.dst as usize] = Some(rel);
            }
        }
        CLASS_LD if insn.opc == OP_LDDW => {
            let high = insns.get(pc as usize + 1).map_or(0, |i| i.imm);
            s.write(
                insn.dst,
                Val::Scalar(u64::from(insn.imm as u32) | (u64::from(high as u32) << 32)),
            );
        }
        // The legacy packet loads write r0 and may clobber r1-r5.
        CLASS_LD => (0..=5).for_each(|r| s.write(r, TOP)),
        CLASS_LDX => {
            let v = load(&s, insn);
            s.write(insn.dst, v);
        }
        CLASS_ST | CLASS_STX => store(&mut s, insn),
        // Helper and local calls: r0-r5 change, and memory the callee reaches may too.
        CLASS_JMP if insn.opc & 0xf0 == JMP_CALL => {
            (0..=5).for_each(|r| s.write(r, TOP));
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
            (ALU_ADD, Val::Frame { lo, hi }, Some(x))
            | (ALU_ADD, x, Some(Val::Frame { lo, hi }))
                if matches!(x, Val::Scalar(_) | Val::Len { .. }) =>
            {
                let b = x.bound();
                return if b <= OFFSET_MAX as u64 {
                    Val::frame_plus(lo, hi.saturating_add(b as i64), 0)
                } else {
                    TOP
                };
            }
            (ALU_ADD, f @ Val::Input { .. }, None) => return f.input_plus(k),
            (ALU_SUB, f @ Val::Input { .. }, None) => return f.input_plus(k.wrapping_neg()),
            // The entry's r1 at an offset plus an index: the offset grows by the index's
            // bound, and by at most `len - e` when the index is at most that.
            (ALU_ADD, Val::Input { lo, hi, d }, Some(x))
            | (ALU_ADD, x, Some(Val::Input { lo, hi, d }))
                if matches!(x, Val::Scalar(_) | Val::Len { .. }) =>
            {
                let m = x.bound();
                let small = (m <= OFFSET_MAX as u64).then_some(m as i64);
                let hi2 = small.zip(hi).map(|(m, h)| h + m);
                let by_d = small.zip(d).map(|(m, d)| d - m);
                let by_len = x.len_d().zip(hi).map(|(e, h)| e - h);
                return Val::input(lo, hi2, by_d.max(by_len));
            }
            // An index at most `len - d` plus a constant `k >= 0`: at most `len - (d - k)`
            // (no wrap: `len` is below 2^32 wherever the facts are used).
            (ALU_ADD, Val::Len { max, d }, None) if (0..=OFFSET_MAX).contains(&k) => {
                return Val::scalar(alu_result_bound(insn, max, None), Some(d - k));
            }
            // Plus a small scalar `x`: at most `len - (d - x)`.
            (ALU_ADD, Val::Len { d: e, .. }, Some(Val::Scalar(m)))
            | (ALU_ADD, Val::Scalar(m), Some(Val::Len { d: e, .. }))
                if m <= OFFSET_MAX as u64 =>
            {
                let bound = alu_result_bound(insn, d.bound(), src.map(Val::bound));
                return Val::scalar(bound, Some(e - m as i64));
            }
            _ => {}
        }
    }
    Val::Scalar(alu_result_bound(insn, d.bound(), src.map(Val::bound)))
}

/// What an ALU instruction makes its destination equal to, relative to another
/// register (see `State::rel`): `mov r, s` makes `r = s`, and `add r, k` keeps a
/// relation `r = s + c` as `s + c + k` when the add cannot wrap (`r` is known small,
/// or `c + k` stays at least 0).
fn relation(s: &State, insn: &Insn) -> Option<(u8, i64)> {
    if insn.class() != CLASS_ALU64 || insn.off != 0 || insn.dst >= 10 {
        return None;
    }
    let by_reg = insn.opc & SRC_X != 0;
    match insn.opc & 0xf0 {
        ALU_MOV if by_reg && insn.src < 10 && insn.src != insn.dst => Some((insn.src, 0)),
        ALU_ADD | ALU_SUB if !by_reg => {
            let k = i64::from(insn.imm);
            let k = if insn.opc & 0xf0 == ALU_SUB { -k } else { k };
            let (j, c) = s.rel[insn.dst as usize]?;
            let v = s.get(insn.dst);
            let small = v.len_d().is_some() || v.bound() <= OFFSET_MAX as u64;
            let fits = if k >= 0 { small } else { c + k >= 0 };
            (fits && (c + k).abs() <= OFFSET_MAX).then_some((j, c + k))
        }
        _ => None,
    }
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
        _ => s.forget_slots(),
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
        s.write(insn.src, TOP);
        s.write(0, TOP);
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

/// What a 64-bit compare (`x rel y`, `k` the immediate) says of the entry facts, into
/// `s` (from `out`, the state before it): an `x` below (or at most) a `y` at most
/// `len - d` is at most `len - d - 1` (or `len - d`), as are the registers it equals
/// plus or minus a constant; a value at most `len - e` that is at least a constant `c`
/// means `len` is at least `c + e`. (A 32-bit compare sees halves: nothing.)
fn entry_facts_of_compare(
    out: &State,
    s: &mut State,
    (x, y, rel): (Option<u8>, Option<u8>, &Rel),
    k: u64,
) {
    let len_of = |y: Option<u8>| y.and_then(|r| out.get(r).len_d());
    let fact = match rel {
        Rel::Lt => len_of(y).map(|d| d + 1),
        Rel::Le => len_of(y),
        _ => None,
    };
    if let (Some(r), Some(d)) = (x, fact) {
        s.at_most_len_less(r, d);
        s.pass_len_fact_along(r);
    }
    let least = match (x, y, rel) {
        (None, Some(y), Rel::Lt) => Some((y, k.saturating_add(1))),
        (None, Some(y), Rel::Le) => Some((y, k)),
        (Some(x), None, Rel::Eq) => Some((x, k)),
        (Some(x), None, Rel::Ne) if k == 0 => Some((x, 1)),
        _ => None,
    };
    if let Some((r, c)) = least {
        if let Some(e) = out.get(r).len_d() {
            let l = i128::from(c) + i128::from(e);
            if l > 0 {
                s.len_min = s.len_min.max(l.min(i128::from(OFFSET_MAX)) as u64);
            }
        }
    }
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
    if !is32 {
        entry_facts_of_compare(out, &mut s, (x, y, &rel), k);
    }
    // Bounds register `r` (when the compare sees all of it) by `h`.
    let mut bound = |r: Option<u8>, h: u64| {
        let Some(r) = r else { return };
        let (old, d) = match s.get(r) {
            Val::Scalar(old) => (old, None),
            Val::Len { max, d } => (max, Some(d)),
            _ => return,
        };
        if !is32 || old <= u64::from(u32::MAX) {
            s.set(r, Val::scalar(old.min(h), d));
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

    /// The ranges of a one-function program (no `lddw`) as the program's entry.
    fn entry_ranges_of(src: &str) -> (Vec<Insn>, Ranges) {
        let insns = csx_ebpf::asm::assemble(src).unwrap();
        let plan = crate::analysis::plan_program(&insns, 0).unwrap();
        let pcs = plan.functions[0].pcs.clone();
        let r = ranges(&insns, &BTreeSet::new(), &pcs, 0, true).unwrap();
        (insns, r)
    }

    /// The slot of the only `ldxb` in `insns`.
    fn ldxb_at(insns: &[Insn]) -> u32 {
        let at: Vec<u32> = (0..insns.len() as u32)
            .filter(|&pc| insns[pc as usize].opc == (CLASS_LDX | MODE_MEM | 0x10))
            .collect();
        assert_eq!(at.len(), 1, "one ldxb");
        at[0]
    }

    /// A loop that leaves on what it reads, over `r1[i]` while `i` is below r2.
    const SCAN: &str = "mov %r3, 0\nloop:\n{test}\nmov %r8, %r1\nadd %r8, %r3\n\
                        ldxb %r9, [%r8+0]\nadd %r3, 1\njset %r9, 0x80, loop\nout:\nexit";

    #[test]
    fn an_index_below_the_entry_length_reads_inside_the_entry_input() {
        let (insns, r) = entry_ranges_of(&SCAN.replace("{test}", "jge %r3, %r2, out"));
        let pc = ldxb_at(&insns);
        assert!(r.in_input(pc, 8, 0, 1));
        // Not a byte further, nor two bytes, nor before the start.
        assert!(!r.in_input(pc, 8, 1, 1));
        assert!(!r.in_input(pc, 8, 0, 2));
        assert!(!r.in_input(pc, 8, -1, 1));
        // The same compare the other way round, and `i < len` taken.
        for test in [
            "jle %r2, %r3, out",
            "jlt %r3, %r2, in\nja out\nin:",
            "jgt %r2, %r3, in\nja out\nin:",
        ] {
            let (insns, r) = entry_ranges_of(&SCAN.replace("{test}", test));
            assert!(r.in_input(ldxb_at(&insns), 8, 0, 1), "{test}");
        }
    }

    #[test]
    fn entry_facts_need_the_entry_registers_and_an_unsigned_full_width_compare() {
        for test in [
            // At most the length: the byte at the length is outside.
            "jgt %r3, %r2, out",
            // 32-bit and signed compares say nothing of the 64-bit values.
            "jge32 %r3, %r2, out",
            "jsge %r3, %r2, out",
            // r2 is no longer the length, or r1 no longer the input.
            "mov %r2, 100\njge %r3, %r2, out",
            "add %r2, 1\njge %r3, %r2, out",
            "jge %r3, %r2, out\nadd %r1, -1",
            "jge %r3, %r2, out\nadd %r1, %r3",
            // The index changed after the compare in a way that may pass the length.
            "jge %r3, %r2, out\nadd %r3, 1",
            "jge %r3, %r2, out\nmul %r3, 2",
            "jge %r3, %r2, out\nadd32 %r3, 0",
        ] {
            let (insns, r) = entry_ranges_of(&SCAN.replace("{test}", test));
            assert!(!r.in_input(ldxb_at(&insns), 8, 0, 1), "{test}");
        }
        // The planner gives them to the program's entry, in the plan that asks for them,
        // when no local call reaches the entry and no helper is called.
        let src = SCAN.replace("{test}", "jge %r3, %r2, out");
        let facts = |src: &str, ask: bool| {
            let insns = csx_ebpf::asm::assemble(src).unwrap();
            let plan = crate::analysis::plan_program_with(&insns, 0, true, ask).unwrap();
            let f = &plan.functions[0];
            assert_eq!(f.entry_facts, f.ranges.in_input(ldxb_at(&insns), 8, 0, 1));
            f.entry_facts
        };
        assert!(facts(&src, true));
        assert!(!facts(&src, false));
        let called = src.replace("out:\nexit", "out:\ncall local start\nexit");
        assert!(!facts(&format!("start:\n{called}"), true));
        assert!(!facts(
            &src.replace("out:\nexit", "out:\ncall 1\nexit"),
            true
        ));
    }

    #[test]
    fn entry_facts_survive_spills_and_moves_and_keep_numeric_bounds() {
        let (insns, r) = entry_ranges_of(
            "mov %r3, 0\nstxdw [%r10-8], %r2\nmov %r2, 0\nmov %r6, %r1\nloop:\n\
             ldxdw %r4, [%r10-8]\njge %r3, %r4, out\nmov %r7, %r3\nmov %r8, %r6\n\
             add %r8, %r7\nldxb %r9, [%r8+0]\nadd %r3, 1\njset %r9, 0x80, loop\n\
             out:\nexit",
        );
        assert!(r.in_input(ldxb_at(&insns), 8, 0, 1));
        // A compare with a constant after the length's: both facts hold.
        let (insns, r) =
            entry_ranges_of(&SCAN.replace("{test}", "jge %r3, %r2, out\njge %r3, 100, out"));
        let pc = ldxb_at(&insns);
        assert_eq!(r.bound(pc, 3), 99);
        assert!(r.in_input(pc, 8, 0, 1));
    }

    /// Four bytes at a time while `i + 4 <= len`, as clang writes it: `j = i + 4;
    /// if j > len goto out` ({test} is the compare, then reads at `r1 + i + 3`).
    const BY_FOUR: &str = "mov %r3, 0\nloop:\nmov %r4, %r3\nadd %r4, 4\n{test}\n\
                           mov %r8, %r1\nadd %r8, %r3\nldxb %r9, [%r8+3]\nadd %r3, 4\n\
                           ja loop\nout:\nexit";

    #[test]
    fn a_compare_of_an_index_plus_a_constant_bounds_the_index() {
        // `j = i + 4 <= len`: `i <= len - 4`, so byte `i + 3` is in, `i + 4` is not.
        let (insns, r) = entry_ranges_of(&BY_FOUR.replace("{test}", "jgt %r4, %r2, out"));
        assert!(r.in_input(ldxb_at(&insns), 8, 3, 1));
        assert!(!r.in_input(ldxb_at(&insns), 8, 4, 1));
        // Through a second step (`j = i + 1; j += 3`).
        let (insns, r) = entry_ranges_of(
            &BY_FOUR
                .replace("add %r4, 4", "add %r4, 1\nadd %r4, 3")
                .replace("{test}", "jgt %r4, %r2, out"),
        );
        assert!(r.in_input(ldxb_at(&insns), 8, 3, 1));
        // A copy of `i` made before the compare of `j = i + 4` (clang's `i = j`-style
        // loop updates): the compare bounds the copy through `i`.
        let (insns, r) = entry_ranges_of(
            &BY_FOUR
                .replace("mov %r4, %r3\n", "mov %r7, %r3\nmov %r4, %r3\n")
                .replace("{test}", "jgt %r4, %r2, out")
                .replace("add %r8, %r3", "add %r8, %r7"),
        );
        assert!(r.in_input(ldxb_at(&insns), 8, 3, 1));
        assert!(!r.in_input(ldxb_at(&insns), 8, 4, 1));
        let (insns, r) = entry_ranges_of(
            "mov %r3, 0\nloop:\nmov %r4, %r3\nadd %r4, 4\njgt %r4, %r2, out\n\
             mov %r8, %r1\nadd %r8, %r4\nldxb %r9, [%r8-1]\nmov %r3, %r4\nja loop\nout:\nexit",
        );
        // Reading at `j - 1` needs `j >= 1`: the pass keeps upper bounds only.
        assert!(!r.in_input(ldxb_at(&insns), 8, -1, 1));
        for (test, what) in [
            // `i` moved after `j` was made from it: `j` no longer says where it is.
            ("add %r3, 1\njgt %r4, %r2, out", "i moved"),
            ("mov %r3, %r9\njgt %r4, %r2, out", "i replaced"),
            // `j` moved by a register, or by 32 bits, or compared in 32 bits.
            ("add %r4, %r9\njgt %r4, %r2, out", "j plus a register"),
            ("add32 %r4, 0\njgt %r4, %r2, out", "j truncated"),
            ("jgt32 %r4, %r2, out", "a 32-bit compare"),
        ] {
            let (insns, r) = entry_ranges_of(&BY_FOUR.replace("{test}", test));
            assert!(!r.in_input(ldxb_at(&insns), 8, 3, 1), "{what}");
        }
        // An `i` the pass cannot bound may wrap when 4 is added: `j` small, `i` huge.
        let (insns, r) = entry_ranges_of(
            "ldxdw %r3, [%r10-8]\nmov %r4, %r3\nadd %r4, 4\njgt %r4, %r2, out\n\
             mov %r8, %r1\nadd %r8, %r3\nldxb %r9, [%r8+3]\nout:\nexit",
        );
        assert!(!r.in_input(ldxb_at(&insns), 8, 3, 1));
        // Going down from `j`: `i = j - 4` with `j` unknown may wrap below zero.
        let (insns, r) = entry_ranges_of(
            "ldxdw %r4, [%r10-8]\nmov %r3, %r4\nadd %r3, -4\njgt %r4, %r2, out\n\
             mov %r8, %r1\nadd %r8, %r3\nldxb %r9, [%r8+0]\nout:\nexit",
        );
        assert!(!r.in_input(ldxb_at(&insns), 8, 0, 1));
    }

    #[test]
    fn a_length_tested_against_a_constant_proves_constant_offsets_and_rotated_loops() {
        // `if len < 8 return`: bytes 0-7 of the input are in, byte 8 is not.
        let (insns, r) = entry_ranges_of("jlt %r2, 8, out\nldxb %r0, [%r1+7]\nout:\nexit");
        let pc = ldxb_at(&insns);
        assert!(r.in_input(pc, 1, 7, 1));
        assert!(r.in_input(pc, 1, 0, 8));
        assert!(!r.in_input(pc, 1, 8, 1));
        assert!(!r.in_input(pc, 1, 7, 2));
        for test in ["jgt %r2, 7, in\nja out\nin:", "jge %r2, 8, in\nja out\nin:"] {
            let src = format!("{test}\nldxb %r0, [%r1+7]\nout:\nexit");
            let (insns, r) = entry_ranges_of(&src);
            assert!(r.in_input(ldxb_at(&insns), 1, 7, 1), "{test}");
        }
        // The wrong edge, a 32-bit or signed compare, another register, r2 changed.
        for test in [
            "jge %r2, 8, out",
            "jlt32 %r2, 8, out",
            "jslt %r2, 8, out",
            "jlt %r3, 8, out",
            "add %r2, -1\njlt %r2, 8, out\nadd %r2, 1",
            "jlt %r2, 8, out\nadd %r1, 1",
        ] {
            let src = format!("{test}\nldxb %r0, [%r1+7]\nout:\nexit");
            let (insns, r) = entry_ranges_of(&src);
            assert!(!r.in_input(ldxb_at(&insns), 1, 7, 1), "{test}");
        }
        // An index below `len` that is at least 8: `len` is at least 9.
        let (insns, r) = entry_ranges_of(
            "ldxdw %r3, [%r1+0]\njge %r3, %r2, out\njlt %r3, 8, out\nldxb %r0, [%r1+8]\n\
             out:\nexit",
        );
        assert!(r.in_input(ldxb_at(&insns), 1, 8, 1));
        assert!(!r.in_input(ldxb_at(&insns), 1, 9, 1));
        // clang's rotated loop: `if len == 0 return; i = 0; do { p[i] } while (++i < len)`.
        let rotated = "mov %r0, 0\njeq %r2, 0, out\nmov %r3, 0\nloop:\nmov %r4, %r1\n\
                       add %r4, %r3\nldxb %r5, [%r4+0]\nadd %r0, %r5\nadd %r3, 1\n\
                       jlt %r3, %r2, loop\nout:\nexit";
        let (insns, r) = entry_ranges_of(rotated);
        assert!(r.in_input(ldxb_at(&insns), 4, 0, 1));
        assert!(!r.in_input(ldxb_at(&insns), 4, 1, 1));
        // Without the test before the loop, its first byte may be past an empty input.
        let (insns, r) = entry_ranges_of(&rotated.replace("jeq %r2, 0, out\n", ""));
        assert!(!r.in_input(ldxb_at(&insns), 4, 0, 1));
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
