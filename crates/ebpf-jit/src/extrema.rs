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

/// The innermost loop around `pc` as slots: the latest header a backward jump at or
/// after `pc` goes to at or before it, and the last such jump to that header.
fn enclosing_loop(flows: &BTreeMap<u32, Flow>, pc: u32) -> Option<(u32, u32)> {
    let backs = flows.iter().filter_map(|(&q, f)| match *f {
        Flow::Jump(t) | Flow::Branch(t) if t <= pc && pc <= q => Some((t, q)),
        _ => None,
    });
    let head = backs.clone().map(|(t, _)| t).max()?;
    let end = backs.filter(|&(t, _)| t == head).map(|(_, q)| q).max()?;
    Some((head, end))
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
    flows: &BTreeMap<u32, Flow>,
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
    let (head, end) = enclosing_loop(flows, pc)?;
    let mut regs: Regs = std::array::from_fn(|i| Sym::Entry(i as u8));
    for &q in pcs.iter().filter(|&&q| head <= q && q < pc) {
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
    let size = load.opc & 0x18;
    let in_loop = |from: u32, to: u32| pcs.iter().filter(move |&&q| from <= q && q < to);
    let base_kept =
        |from: u32, to: u32| in_loop(from, to).all(|&q| !writes(&insns[q as usize], load.src));
    in_loop(head, end + 1).any(|&q| {
        let s = &insns[q as usize];
        s.class() == CLASS_STX
            && s.opc & 0xe0 == MODE_MEM
            && s.opc & 0x18 == size
            && s.dst == load.src
            && s.off == load.off
            && s.src == d
            && if q > load_pc {
                base_kept(load_pc + 1, q)
            } else {
                base_kept(load_pc + 1, end + 1) && base_kept(head, q)
            }
    })
}
