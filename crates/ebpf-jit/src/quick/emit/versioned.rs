//! Versioned loops: a second, unchecked copy of a simple loop, entered through a guard
//! that proves its strided accesses in bounds for as many iterations as the fuel slice
//! lets it run (see "Versioned loops" in the module doc of `emit`).
//!
//! Which loops: one straight range of slots `header..=bottom` with one backward jump,
//! the last slot (a back edge [`Emitter::back_edge`] emits: a conditional jump, or
//! `jcc +1; ja header`), entered only at its header, holding no call, `lddw` or `exit`,
//! and left only by compares of values that move by constants (a counted loop: one that
//! leaves on what it reads, a scan for a token's end, runs too few iterations a guard).
//! One pass over the slots in order ([`strided_accesses`]) follows each register as an
//! affine form of the registers at the header (forward jumps inside the loop merge what
//! agrees); a register that ends the iteration as its header value plus a constant is
//! an induction variable, and an access whose address is a form of induction variables
//! alone moves by a constant stride. Those accesses, grouped as `loops::GuardSpan`s,
//! are the ones the guard proves. A pass that cheap keeps the quick tier's compile
//! fast (`loops::plan_loops`, the Cranelift tier's analysis of the same, took 30 ms for
//! the 4,000-instruction program); it knows less (no 32-bit indexes, no spilled
//! registers): those loops stay checked. The main pass drops, at the header, the spans
//! through registers it takes for the stack's or a global's addresses, which have
//! checks of their own ([`Emitter::prune_spans`]).

use std::collections::BTreeSet;

use csx_ebpf::engine::rules;
use csx_ebpf::isa::*;

use super::*;
use crate::loops::{guard_spans, GuardSpan, LoopAccess};

/// Most slots in a versioned loop.
const BODY_MAX: u32 = 256;

/// Largest stride (bytes per iteration, either way) an unchecked access may have.
const STRIDE_MAX: i64 = 1 << 24;

/// The least number of iterations after the first the guard must prove before it
/// enters the unchecked copy: near a region's end (a loop about to trap) the copy
/// would otherwise run an iteration or two between refills of the slice it shortened.
const RUN_MIN: i32 = 8;

/// Where the guard keeps the fewest proven iterations while it works: the context's r0
/// slot, which nothing reads during a run (the `exit` of the entry frame writes it).
const GUARD_RUNS: i32 = offsets::reg(0);

/// Where a copy that keeps the fuel slice in a register keeps that register's own
/// value while it runs: the guard's slot, free once the guard has entered the copy.
const SLICE_SAVE: i32 = GUARD_RUNS;

/// The eBPF registers whose host registers a copy may keep the slice in, in order of
/// preference: none an instruction uses implicitly (r0 and r3 in a division, r4 in a
/// shift by a register).
const SLICE_CANDIDATES: [u8; 7] = [9, 8, 7, 6, 5, 2, 1];

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
    /// Whether the main pass emitted its guard (see [`Emitter::prune_spans`]), and so
    /// whether it has a copy.
    pub active: bool,
}

/// The loops of `insns` the quick tier versions, by header. `targets` and `bottoms`:
/// [`jump_targets`] and [`loop_bottoms`] of `insns`.
pub(super) fn versioned_loops(
    insns: &[Insn],
    targets: &[bool],
    bottoms: &[bool],
) -> Vec<QuickLoop> {
    // The sources of the jumps to each target, for the loops' single entry.
    let mut sources: std::collections::HashMap<usize, Vec<usize>> = Default::default();
    for (pc, insn) in insns.iter().enumerate() {
        if let Some(t) = jump_target(pc, insn) {
            sources.entry(t).or_default().push(pc);
        }
    }
    let mut out = Vec::new();
    for (b, _) in bottoms.iter().enumerate().filter(|(_, &x)| x) {
        let Some(h) = back_edge_target(b, &insns[b]) else {
            continue;
        };
        // The shape first: it bounds the body, so the scans per loop stay short whatever
        // the program (a far backward jump at every other slot).
        if !one_backward_jump(insns, targets, h, b) {
            continue;
        }
        let inside = |pc: usize| (h..=b).contains(&pc);
        let entered_inside = (h + 1..=b).filter(|&t| targets[t]).any(|t| {
            sources
                .get(&t)
                .is_some_and(|s| s.iter().any(|&pc| !inside(pc)))
        });
        if entered_inside {
            continue;
        }
        if let Some(q) = quick_loop(insns, targets, h as u32, b as u32) {
            out.push(q);
        }
    }
    out.sort_by_key(|q| q.header);
    out.dedup_by_key(|q| q.header);
    out
}

/// Where the jump (or local call) at `pc` goes, if `insn` is one.
fn jump_target(pc: usize, insn: &Insn) -> Option<usize> {
    if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
        return None;
    }
    let rel = match insn.opc & 0xf0 {
        JMP_EXIT => return None,
        JMP_CALL if insn.src == CALL_SRC_LOCAL => insn.imm,
        JMP_CALL => return None,
        JMP_JA if insn.class() == CLASS_JMP32 => insn.imm,
        _ => i32::from(insn.off),
    };
    usize::try_from(pc as i64 + i64::from(rel) + 1).ok()
}

/// Whether `h..=b` is at most [`BODY_MAX`] slots holding no call and no `lddw`, whose
/// only backward jump is `b`'s, emitted as one back edge.
fn one_backward_jump(insns: &[Insn], targets: &[bool], h: usize, b: usize) -> bool {
    if b + 1 - h > BODY_MAX as usize {
        return false;
    }
    for (pc, insn) in insns.iter().enumerate().take(b + 1).skip(h) {
        let call = matches!(insn.class(), CLASS_JMP | CLASS_JMP32) && insn.opc & 0xf0 == JMP_CALL;
        let back = pc != b && back_edge_target(pc, insn).is_some();
        if call || back || insn.class() == CLASS_LD {
            return false;
        }
    }
    // Any other charge in the copy would refill and come back into it, past what the
    // guard proved: the bottom must be one `Emitter::back_edge` emits.
    let conditional = |i: &Insn| {
        matches!(i.class(), CLASS_JMP | CLASS_JMP32)
            && !matches!(i.opc & 0xf0, JMP_JA | JMP_CALL | JMP_EXIT)
    };
    if insns[b].opc != OP_JA {
        return conditional(&insns[b]);
    }
    // `jcc +1; ja header`, fused into one back edge where the `ja` is no target.
    b > h && conditional(&insns[b - 1]) && insns[b - 1].off == 1 && !targets[b]
}

/// A register's value as an affine form of the registers at the header (`coef . r +
/// k`, mod 2^64), or unknown.
type Form = Option<([i64; 11], i64)>;

/// The forms of r0-r10 at the header: each its own value.
fn header_forms() -> [Form; 11] {
    std::array::from_fn(|r| {
        let mut coef = [0; 11];
        coef[r] = 1;
        Some((coef, 0))
    })
}

/// `a + m * b`, when both are known.
fn form_add(a: Form, b: Form, m: i64) -> Form {
    let ((ca, ka), (cb, kb)) = (a?, b?);
    let coef = std::array::from_fn(|r| ca[r].wrapping_add(cb[r].wrapping_mul(m)));
    Some((coef, ka.wrapping_add(kb.wrapping_mul(m))))
}

fn form_scale(a: Form, m: i64) -> Form {
    let (c, k) = a?;
    Some((c.map(|x| x.wrapping_mul(m)), k.wrapping_mul(m)))
}

fn constant(k: i64) -> Form {
    Some(([0; 11], k))
}

/// Where the forms of two paths meet: what they agree on.
fn meet_forms(a: &[Form; 11], b: &[Form; 11]) -> [Form; 11] {
    std::array::from_fn(|r| if a[r] == b[r] { a[r] } else { None })
}

/// The form of the 64-bit ALU result `insn` writes, from the forms before it.
fn alu_form(insn: &Insn, s: &[Form; 11]) -> Form {
    let d = s[usize::from(insn.dst)];
    let x = if insn.opc & SRC_X != 0 {
        *s.get(usize::from(insn.src))?
    } else {
        constant(i64::from(insn.imm))
    };
    match insn.opc & 0xf0 {
        ALU_MOV if insn.off == 0 => x,
        ALU_ADD => form_add(d, x, 1),
        ALU_SUB => form_add(d, x, -1),
        ALU_MUL => match x? {
            (c, k) if c == [0; 11] => form_scale(d, k),
            _ => None,
        },
        ALU_LSH if insn.opc & SRC_X == 0 && (0..63).contains(&insn.imm) => {
            form_scale(d, 1i64 << insn.imm)
        }
        ALU_NEG => form_scale(d, -1),
        _ => None,
    }
}

/// The strided accesses of the loop `h..=b` (see the module doc), or `None` when it
/// makes none.
fn strided_accesses(insns: &[Insn], targets: &[bool], h: u32, b: u32) -> Option<Vec<LoopAccess>> {
    let mut state = header_forms();
    let mut live = true;
    let mut pending: std::collections::HashMap<u32, [Form; 11]> = Default::default();
    let mut seen = Vec::new();
    // The operands of each conditional jump that leaves the loop.
    let mut exits: Vec<[Form; 2]> = Vec::new();
    for pc in h..=b {
        let insn = &insns[pc as usize];
        if pc > h && targets[pc as usize] {
            match (live, pending.remove(&pc)) {
                (true, Some(j)) => state = meet_forms(&state, &j),
                (false, Some(j)) => (state, live) = (j, true),
                (_, None) => {}
            }
        }
        if !live {
            continue;
        }
        match insn.class() {
            CLASS_ALU64 if usize::from(insn.dst) < 10 => {
                state[usize::from(insn.dst)] = alu_form(insn, &state);
            }
            CLASS_ALU if usize::from(insn.dst) < 10 => state[usize::from(insn.dst)] = None,
            CLASS_LDX | CLASS_ST | CLASS_STX => {
                let write = insn.class() != CLASS_LDX;
                let base = if write { insn.dst } else { insn.src };
                let atomic = insn.opc & 0xe0 == MODE_ATOMIC;
                if let (Some(Some((coef, k))), false) = (state.get(usize::from(base)), atomic) {
                    let size = crate::analysis::access_size(insn) as u8;
                    seen.push((pc, *coef, k.wrapping_add(i64::from(insn.off)), size, write));
                }
                if atomic {
                    state[0] = None;
                    state[usize::from(insn.src).min(10)] = None;
                } else if !write {
                    state[usize::from(insn.dst).min(10)] = None;
                }
            }
            CLASS_JMP | CLASS_JMP32 => {
                let op = insn.opc & 0xf0;
                if op == JMP_EXIT {
                    return None;
                } else if let Some(t) = jump_target(pc as usize, insn) {
                    let t = t as u32;
                    if op != JMP_JA && (pc == b || t > b) {
                        let other = if insn.opc & SRC_X != 0 {
                            *state.get(usize::from(insn.src))?
                        } else {
                            constant(0)
                        };
                        exits.push([state[usize::from(insn.dst).min(10)], other]);
                    }
                    if pc == b {
                        break;
                    }
                    if t <= b {
                        let at = pending.entry(t).or_insert(state);
                        *at = meet_forms(at, &state);
                    }
                    live = op != JMP_JA;
                }
            }
            _ => {}
        }
    }
    if !live {
        return None;
    }
    // The back edge at `b` changes no register: `state` is what an iteration leaves.
    let step: [Option<i64>; 11] = std::array::from_fn(|r| match state[r] {
        Some((c, k)) if (0..11).all(|x| c[x] == i64::from(x == r)) => Some(k),
        _ => None,
    });
    // Every way out tests values that move by constants (a counted loop): a loop that
    // leaves on what it reads runs a few iterations for each guard, often (a scan for
    // the end of a token or a match).
    let affine = |f: &Form| f.is_some_and(|(c, _)| (0..11).all(|r| c[r] == 0 || step[r].is_some()));
    if !exits.iter().flatten().all(affine) {
        return None;
    }
    let accesses: Vec<LoopAccess> = seen
        .into_iter()
        .filter_map(|(pc, coef, k, size, write)| {
            let mut stride = 0i64;
            for r in 0..11 {
                if coef[r] != 0 {
                    stride = stride.checked_add(coef[r].checked_mul(step[r]?)?)?;
                }
            }
            (stride.abs() <= STRIDE_MAX).then_some(LoopAccess {
                pc,
                coef,
                k,
                reach: 0,
                stride,
                size,
                write,
                stack: coef[10] != 0,
            })
        })
        .collect();
    (!accesses.is_empty()).then_some(accesses)
}

/// The loop `h..=b` as a [`QuickLoop`] (its shape checked by the caller), or `None`
/// when it has no strided access the guard can prove.
fn quick_loop(insns: &[Insn], targets: &[bool], h: u32, b: u32) -> Option<QuickLoop> {
    let accesses = strided_accesses(insns, targets, h, b)?;
    let cost = i32::try_from(rules::jump_cost(b, h)).ok()?;
    // Through r10 the quick tier has checks of its own, against the stack's bounds.
    let fits = |s: &GuardSpan| {
        !s.stack
            && s.coef[10] == 0
            && s.coef.iter().all(|&c| i32::try_from(c).is_ok())
            && (1..=i64::from(GROUP_SPAN_MAX)).contains(&s.len)
    };
    let spans: Vec<GuardSpan> = guard_spans(&accesses).into_iter().filter(fits).collect();
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
        active: false,
    })
}

/// The host register the copy of loop `q` may keep the fuel slice in (see "The slice
/// in a register" in the module doc): that of the first of [`SLICE_CANDIDATES`] no
/// slot of the loop names, if any.
fn slice_register(insns: &[Insn], q: &QuickLoop) -> Option<Reg> {
    let slots = &insns[q.header as usize..=q.bottom as usize];
    SLICE_CANDIDATES
        .into_iter()
        .find(|&r| slots.iter().all(|insn| insn.dst != r && insn.src != r))
        .map(|r| MAP[usize::from(r)])
}

impl Emitter<'_> {
    /// The versioned loop whose header is slot `pc`, if any.
    pub(super) fn versioned_at(&self, pc: u32) -> Option<usize> {
        self.vloops.binary_search_by_key(&pc, |q| q.header).ok()
    }

    /// Drops loop `i`'s spans through a register the pass takes at its header for an
    /// address in the stack or a global section ([`Known::region`]: those accesses are
    /// checked against the region's fixed bounds, never the cache the guard asks), and
    /// returns whether any span is left, which makes the loop [`QuickLoop::active`].
    pub(super) fn prune_spans(&mut self, i: usize) -> bool {
        let known = self.known;
        let q = &mut self.vloops[i];
        q.spans
            .retain(|s| (0..MAP.len()).all(|r| s.coef[r] == 0 || known[r].region().is_none()));
        q.unchecked = q.spans.iter().flat_map(|s| s.pcs.iter().copied()).collect();
        q.active = !q.spans.is_empty();
        q.active
    }

    /// Where the code of a jump to slot `t` goes: the unchecked copy's slot while one is
    /// emitted and `t` is in its loop, else the slot's code (through a
    /// [`Stub::CopyExit`] from a copy that keeps the slice in a register).
    pub(super) fn slot_target(&mut self, t: u32) -> Target {
        match (self.copying, self.slice) {
            (Some(i), _) if (self.vloops[i].header..=self.vloops[i].bottom).contains(&t) => {
                Target::Copy(i, t)
            }
            (Some(_), Some(slice)) => {
                self.stubs.push(Stub::CopyExit { slice, target: t });
                Target::Stub(self.stubs.len() - 1)
            }
            _ => Target::Slot(t),
        }
    }

    /// The context's slice, charged in register `slice` since the copy's entry, back in
    /// the context, and `slice`'s own value back from [`SLICE_SAVE`].
    pub(super) fn put_slice_back(&mut self, slice: Reg) {
        self.a.mov_mr(mem(CTX, offsets::FUEL_USED), slice);
        self.a.mov_rm(slice, mem(CTX, SLICE_SAVE));
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
            (CLASS_ALU | CLASS_ALU64, _) => alu_leaves_r11(insn),
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
        self.jump(Target::CopyEntry(i));
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
        let slice = self.slice;
        match slice {
            Some(r) => self.a.alu_ri(Alu::Sub, true, r, cost),
            None => self
                .a
                .alu_mi(Alu::Sub, true, mem(CTX, offsets::FUEL_USED), cost),
        }
        self.jcc_stub(
            Cond::B,
            Stub::Leave {
                cost,
                compare,
                slice,
            },
        );
        let wide = insn.class() == CLASS_JMP;
        self.compare(compare, &insn, wide, insn.opc & SRC_X != 0)?;
        self.jcc(cc, Target::Copy(i, self.vloops[i].header));
        match slice {
            Some(r) => {
                self.a.alu_ri(Alu::Add, true, r, cost);
                self.put_slice_back(r);
            }
            None => self
                .a
                .alu_mi(Alu::Add, true, mem(CTX, offsets::FUEL_USED), cost),
        }
        self.jump(Target::Slot(pc + 1));
        Ok(())
    }

    /// Emits each versioned loop's unchecked copy (after the main code, before the
    /// stubs): the slots of the loop again, what is known starting from nothing, no
    /// span groups, and the spans' accesses unchecked.
    pub(super) fn emit_loop_copies(&mut self) -> EResult<()> {
        for i in 0..self.vloops.len() {
            if !self.vloops[i].active {
                continue;
            }
            let mark = (self.a.pos(), self.stubs.len(), self.fixups.len());
            self.slice = slice_register(self.insns, &self.vloops[i]);
            self.emit_copy(i)?;
            if self.slice.is_some() && self.may_trap_since(mark.1, mark.2) {
                self.a.buf.truncate(mark.0);
                self.stubs.truncate(mark.1);
                self.fixups.truncate(mark.2);
                self.slice = None;
                self.emit_copy(i)?;
            }
            self.slice = None;
        }
        Ok(())
    }

    /// Loop `i`'s copy: its entry (taking the slice into [`Emitter::slice`], if
    /// any), then its slots.
    fn emit_copy(&mut self, i: usize) -> EResult<()> {
        let (h, b) = (
            self.vloops[i].header as usize,
            self.vloops[i].bottom as usize,
        );
        self.copy_entry[i] = self.a.pos();
        if let Some(r) = self.slice {
            self.a.mov_mr(mem(CTX, SLICE_SAVE), r);
            self.a.mov_rm(r, mem(CTX, offsets::FUEL_USED));
        }
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
        Ok(())
    }

    /// Whether the code emitted since the stubs numbered `stubs` and the fixups
    /// numbered `fixups` can trap or refill (a memory check's miss, a trap of its
    /// own, a charge outside the back edge): a way out that reads the slice from
    /// the context. A copy's own ways out ([`Stub::Leave`], [`Stub::CopyExit`], its
    /// slots, the main code after the loop) put the slice back first.
    fn may_trap_since(&self, stubs: usize, fixups: usize) -> bool {
        let stub = |s: &Stub| !matches!(s, Stub::Leave { .. } | Stub::CopyExit { .. });
        let target = |t: &Target| {
            matches!(
                t,
                Target::Refill | Target::Miss(_) | Target::Exit | Target::Unwind
            )
        };
        self.stubs[stubs..].iter().any(stub)
            || self.fixups[fixups..].iter().any(|(_, t, _)| target(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_ebpf::asm::assemble;

    fn loops_of(src: &str) -> Vec<QuickLoop> {
        let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
        versioned_loops(&insns, &jump_targets(&insns, 0), &loop_bottoms(&insns))
    }

    /// The copy may keep the slice in r9's host register when no slot of the loop
    /// names r9, in r8's when r9 is named, and in none when every candidate is named.
    #[test]
    fn which_register_may_hold_the_slice() {
        let body = |uses: &str| {
            format!(
                "mov %r0, 0\nmov %r6, 0\n\
                 top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
                 {uses}add %r6, 1\njlt %r6, %r2, top\nexit"
            )
        };
        let slice = |src: &str| {
            let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
            let found = versioned_loops(&insns, &jump_targets(&insns, 0), &loop_bottoms(&insns));
            assert_eq!(found.len(), 1, "{src}: {found:?}");
            slice_register(&insns, &found[0])
        };
        assert_eq!(slice(&body("")), Some(MAP[9]));
        assert_eq!(slice(&body("mov %r9, %r0\n")), Some(MAP[8]));
        assert_eq!(slice(&body("stxdw [%r10-8], %r9\n")), Some(MAP[8]));
        let all = "mov %r9, %r0\nmov %r8, %r0\nmov %r7, %r0\n";
        assert_eq!(slice(&body(all)), None);
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
        // Closed by a `ja` alone, or a `gotol`: no back edge of the copy's kind.
        let ja = "mov %r0, 0\nmov %r6, 0\n\
                  top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r6, 1\n\
                  jge %r6, %r2, +2\nadd %r0, %r5\nja top\nexit";
        assert!(loops_of(ja).is_empty());
        let mut insns = assemble(sum).unwrap_or_else(|e| panic!("{e}"));
        insns[7] = Insn::new(CLASS_JMP32 | JMP_JA, 0, 0, 0, -6);
        let bottoms = loop_bottoms(&insns);
        assert!(bottoms[7]);
        assert!(versioned_loops(&insns, &jump_targets(&insns, 0), &bottoms).is_empty());
        assert!(loops_of("top:\nja top\nexit").is_empty());
        // Left on a byte it reads, or by an `exit`: not counted.
        let scan = "mov %r0, 0\nmov %r6, 0\n\
                    top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njeq %r5, 0, +2\n\
                    add %r6, 1\njlt %r6, %r2, top\nexit";
        assert!(loops_of(scan).is_empty());
        let exits = "mov %r0, 0\nmov %r6, 0\n\
                     top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njne %r5, 0, +1\n\
                     exit\nadd %r6, 1\njlt %r6, %r2, top\nexit";
        assert!(loops_of(exits).is_empty());
        // A branch inside on what it reads, with a counted exit as well: versioned.
        let inside = "mov %r0, 0\nmov %r6, 0\n\
                      top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njeq %r5, 0, +1\n\
                      add %r0, %r5\nadd %r6, 1\njgt %r6, 4000, +1\nja top\nexit";
        assert_eq!(loops_of(inside).len(), 1);
        let nested = "mov %r0, 0\nmov %r6, 0\n\
                      outer:\nmov %r7, 0\ninner:\nmov %r4, %r1\nadd %r4, %r7\n\
                      ldxb %r5, [%r4+0]\nadd %r0, %r5\nadd %r7, 1\njlt %r7, 8, inner\n\
                      add %r6, 1\njlt %r6, 4, outer\nexit";
        let found = loops_of(nested);
        assert!(found.iter().all(|q| q.header == 3), "{found:?}");
        let stack = "mov %r0, 0\nmov %r6, 0\n\
                     top:\nmov %r3, %r10\nadd %r3, -64\nadd %r3, %r6\nldxb %r5, [%r3+0]\n\
                     add %r0, %r5\nadd %r6, 1\njlt %r6, 64, top\nexit";
        assert!(loops_of(stack).is_empty());
        // A 32-bit index, and an index moved on only on one path, stride nothing.
        let narrow = "mov %r0, 0\nmov %r6, 0\n\
                      top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
                      add32 %r6, 1\njlt %r6, %r2, top\nexit";
        assert!(loops_of(narrow).is_empty());
        let skipped = "mov %r0, 0\nmov %r6, 0\n\
                       top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njeq %r5, 0, +1\n\
                       add %r6, 1\nadd %r0, 1\njlt %r0, %r2, top\nexit";
        assert!(loops_of(skipped).is_empty());
        // Moved on by the same amount on both paths: strided.
        let both = "mov %r0, 0\nmov %r6, 0\n\
                    top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njeq %r5, 0, +2\n\
                    add %r6, 2\nja +1\nadd %r6, 2\nadd %r0, 1\njlt %r6, %r2, top\nexit";
        let found = loops_of(both);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].spans[0].stride, 2);
    }
}
