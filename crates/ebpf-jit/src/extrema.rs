//! Branches left as branches although they could become `select`s: the update of a
//! running minimum or maximum that a loop carries from one iteration to the next.
//!
//! A `select` computes its value from both of its inputs, so a loop whose iteration
//! takes the previous iteration's minimum through a compare and a `select` runs them
//! one after the other on every iteration (stats32's minimum and maximum over 16,384
//! words: two cycles an element each). A branch the processor predicts lets the next
//! iteration start from the value it guessed. The running extremum of data is the
//! branch it predicts best: after `i` elements of data in no order, a new minimum
//! comes with chance `1/i`, and data in order updates it always. So a converted branch
//! is kept a branch when it picks between the two values it compares (a minimum or a
//! maximum), one of them is carried and the other is not (CPU time, `docs/benchmarks.md`:
//! stats32 0.76x, stats64 0.83x, ringmax 0.78x, knn 0.90x, kadane 0.94x):
//!
//! - carried: the value the picked register had when the iteration began
//!   (`m = max(m, x)`, through any register copies), or a value loaded this iteration
//!   from the place where the loop stores the picked register (`*slot = max(*slot,
//!   x)`, held in memory between iterations);
//! - not carried: a constant, or a value the iteration computed or loaded. Two carried
//!   values compared (binary GCD's `min(u, v)`) follow each other, not the data's
//!   extremes, and stay converted.
//!
//! A branch whose `select` merely feeds a sum (`n += x > k`), picks values other than
//! the compared ones (`x -= x >= b ? b : 0`), or compares values the iteration
//! computed afresh is left converted: those branches follow the data, and mispredicted
//! they cost several times the `select` (blur3, gfmul, isqrtsum: 1.7-3.8x slower as
//! branches). The choice changes only speed, never what the program computes or the
//! fuel it uses.

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::{Flow, IfConv, PathArm};
use csx_ebpf::isa::{
    Insn, ALU_MOV, CLASS_ALU, CLASS_ALU64, CLASS_JMP, CLASS_JMP32, CLASS_LD, CLASS_LDX, CLASS_STX,
    JMP_CALL, JMP_JGE, JMP_JGT, JMP_JLE, JMP_JLT, JMP_JSGE, JMP_JSGT, JMP_JSLE, JMP_JSLT,
    MODE_ATOMIC, MODE_MEM, SRC_X,
};

/// What a register holds, as far as a walk in slot order can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sym {
    /// The value register `r` had when the iteration began.
    Entry(u8),
    /// A constant.
    Imm(i64),
    /// The value the instruction at this slot wrote.
    Def(u32),
}

type Regs = [Sym; 11];

/// Applies `insn` at `pc` to `regs`: a `mov` copies, every other write is a new value.
fn step(regs: &mut Regs, pc: u32, insn: &Insn) {
    let dst = usize::from(insn.dst).min(10);
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 if insn.opc & 0xf0 == ALU_MOV => {
            regs[dst] = if insn.opc & SRC_X != 0 {
                regs[usize::from(insn.src).min(10)]
            } else {
                Sym::Imm(i64::from(insn.imm))
            };
        }
        CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD => regs[dst] = Sym::Def(pc),
        CLASS_JMP if insn.opc & 0xf0 == JMP_CALL => regs[..6].fill(Sym::Def(pc)),
        CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => {
            regs[0] = Sym::Def(pc);
            regs[usize::from(insn.src).min(10)] = Sym::Def(pc);
        }
        _ => {}
    }
}

/// Whether `insn` writes register `r` (as [`step`] sees it).
fn writes(insn: &Insn, r: u8) -> bool {
    let mut regs: Regs = std::array::from_fn(|i| Sym::Entry(i as u8));
    step(&mut regs, 0, insn);
    regs[usize::from(r)] != Sym::Entry(r)
}

/// Most slots from a loop's header to its last backward jump for the loop's branches to
/// be looked at. The loops these extrema were found in span 15 (ringmax) to 37 (knn)
/// slots; a loop several times longer does enough other work an iteration that one
/// compare chain does not set its pace, and the bound keeps each branch's walks short
/// (a program of a million slots stays linear).
const LOOP_SLOTS_MAX: u32 = 120;

/// The loops of a function as slots: for each slot a backward jump goes to, the last
/// backward jump to it.
pub(crate) fn loop_ends(flows: &BTreeMap<u32, Flow>) -> BTreeMap<u32, u32> {
    let mut ends = BTreeMap::new();
    for (&q, f) in flows {
        if let Flow::Jump(t) | Flow::Branch(t) = *f {
            if t <= q {
                let end = ends.entry(t).or_insert(q);
                *end = (*end).max(q);
            }
        }
    }
    ends
}

/// The innermost loop around `pc` of at most [`LOOP_SLOTS_MAX`] slots: the latest
/// header at or before `pc` whose last backward jump is at or after it.
fn enclosing_loop(ends: &BTreeMap<u32, u32>, pc: u32) -> Option<(u32, u32)> {
    let (&head, &end) = ends
        .range(pc.saturating_sub(LOOP_SLOTS_MAX)..=pc)
        .rev()
        .find(|(_, &end)| end >= pc)?;
    (end - head <= LOOP_SLOTS_MAX).then_some((head, end))
}

/// The reached slots of `pcs` (sorted) in `from .. to`.
fn slots(pcs: &[u32], from: u32, to: u32) -> &[u32] {
    &pcs[pcs.partition_point(|&q| q < from)..pcs.partition_point(|&q| q < to)]
}

/// The slots of each way out of the converted branch at `pc` (taken, fall-through)
/// that run before the join: ALU instructions only.
fn arm_slots(pc: u32, shape: IfConv, arms: Option<&[PathArm; 2]>) -> (Vec<u32>, Vec<u32>) {
    match shape {
        IfConv::Triangle { end: arm_end } | IfConv::BackTriangle { ja: arm_end, .. } => {
            (Vec::new(), (pc + 1..arm_end).collect())
        }
        IfConv::Diamond { else_start, join } => (
            (else_start..join).collect(),
            (pc + 1..else_start - 1).collect(),
        ),
        IfConv::Paths { .. } => arms.map_or((Vec::new(), Vec::new()), |[t, f]| {
            (t.alu.clone(), f.alu.clone())
        }),
    }
}

/// The header of the innermost loop around the converted branch at `pc` if the branch
/// updates a running minimum or maximum that loop carries (see the module
/// documentation).
pub(crate) fn carried_extremum(
    insns: &[Insn],
    pcs: &[u32],
    ends: &BTreeMap<u32, u32>,
    pc: u32,
    shape: IfConv,
    arms: Option<&[PathArm; 2]>,
) -> Option<u32> {
    let branch = &insns[pc as usize];
    let ordered = matches!(
        branch.opc & 0xf0,
        JMP_JGT | JMP_JGE | JMP_JLT | JMP_JLE | JMP_JSGT | JMP_JSGE | JMP_JSLT | JMP_JSLE
    );
    if !matches!(branch.class(), CLASS_JMP | CLASS_JMP32) || !ordered {
        return None;
    }
    let (head, end) = enclosing_loop(ends, pc)?;
    let mut regs: Regs = std::array::from_fn(|i| Sym::Entry(i as u8));
    for &q in slots(pcs, head, pc) {
        step(&mut regs, q, &insns[q as usize]);
    }
    let a = regs[usize::from(branch.dst).min(10)];
    let b = if branch.opc & SRC_X != 0 {
        regs[usize::from(branch.src).min(10)]
    } else {
        Sym::Imm(i64::from(branch.imm))
    };
    let (taken_slots, fall_slots) = arm_slots(pc, shape, arms);
    let run = |slots: &[u32]| {
        let mut r = regs;
        for &q in slots {
            step(&mut r, q, &insns[q as usize]);
        }
        r
    };
    let (taken, fall) = (run(&taken_slots), run(&fall_slots));
    (0..10u8)
        .any(|d| {
            let (x, y) = (taken[usize::from(d)], fall[usize::from(d)]);
            let picks_compared = x != y && ((x, y) == (a, b) || (x, y) == (b, a));
            let carried = |v: Sym| v == Sym::Entry(d) || stored_back(insns, pcs, (head, end), v, d);
            let fresh = |v: Sym| !matches!(v, Sym::Entry(_));
            picks_compared && ((carried(a) && fresh(b)) || (carried(b) && fresh(a)))
        })
        .then_some(head)
}

/// Which of the `candidates` (slot, shape, the header [`carried_extremum`] gave) stay
/// branches: one a loop, its closing branch ([`IfConv::BackTriangle`]) if it is one,
/// else the first. A branch kept inside the body splits every iteration into two paths
/// that join again, and each more doubles them: kadane's two running maxima kept as
/// branches took 1.34x the time of both converted, either one alone 0.87x and 0.98x.
/// A closing branch splits only the way back (stats32: its closing minimum kept, 0.63x;
/// its maximum inside the body, 0.92x).
pub(crate) fn kept(candidates: &[(u32, IfConv, u32)]) -> BTreeSet<u32> {
    let mut per_loop: BTreeMap<u32, (u32, IfConv)> = BTreeMap::new();
    for &(pc, shape, head) in candidates {
        let closing = |s: IfConv| matches!(s, IfConv::BackTriangle { .. });
        per_loop
            .entry(head)
            .and_modify(|k| {
                if closing(shape) && !closing(k.1) {
                    *k = (pc, shape);
                }
            })
            .or_insert((pc, shape));
    }
    per_loop.values().map(|&(pc, _)| pc).collect()
}

/// Whether `v` was loaded by an instruction of the loop `head ..= end` from an address
/// the loop stores register `d` to, with the same width, its base register unchanged
/// from the load to the store (or, for a store earlier in the loop, which the next
/// iteration runs, from the load to the loop's end and from its start to the store).
fn stored_back(insns: &[Insn], pcs: &[u32], (head, end): (u32, u32), v: Sym, d: u8) -> bool {
    let Sym::Def(load_pc) = v else {
        return false;
    };
    let load = &insns[load_pc as usize];
    if load.class() != CLASS_LDX || load.opc & 0xe0 != MODE_MEM {
        return false;
    }
    // The first slot from `from` on (before `to`) that writes the base, else `to`.
    let kept_until = |from: u32, to: u32| {
        slots(pcs, from, to)
            .iter()
            .copied()
            .find(|&q| writes(&insns[q as usize], load.src))
            .unwrap_or(to)
    };
    let after_load = kept_until(load_pc + 1, end + 1);
    let from_head = kept_until(head, load_pc);
    slots(pcs, head, end + 1).iter().any(|&q| {
        let s = &insns[q as usize];
        let base_kept = if q > load_pc {
            q <= after_load
        } else {
            after_load == end + 1 && q <= from_head
        };
        s.class() == CLASS_STX
            && s.opc & 0xe0 == MODE_MEM
            && s.opc & 0x18 == load.opc & 0x18
            && s.dst == load.src
            && s.off == load.off
            && s.src == d
            && base_kept
    })
}
