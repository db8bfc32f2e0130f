//! Trip bounds: loops an entry can go around only a few times, whatever the data (a
//! bit count's `x &= x - 1`, a shift right until zero, decimal digits' `x /= 10`), so
//! that a guard where the loop is entered can see the fuel slice pay for every charge
//! the entry can make, and the loop runs a copy whose charges subtract without a check
//! (`translate/bounded.rs`).
//!
//! The bound comes from a *measure* register `m`: on every path from the header back
//! to it, `m`'s next value is its value at the header shrunk (`m & (m - 1)`: one bit
//! fewer; `m >> k`: `k` fewer significant bits; `m / d` for a constant `d >= 2`,
//! unsigned: `log2 d` fewer significant bits, perhaps more set ones; any of them masked
//! by anything), and the path takes a branch that holds only when a value derived from
//! `m` (so `m` itself) is not zero. Each value derived from `m` is zero when `m` is, so
//! an iteration that goes back starts with `m != 0`, and its measure (population
//! count, bit length, or their sum, at most 64, 64 or 128) drops by at least the least
//! drop `d` of any back-edge: an entry takes at most `(max - 1) / d + 1` back-edges.
//!
//! clang keeps `x` in two registers (`r6 = r5` before the loop, `r6 += -1; r6 &= r5;
//! r5 = r6` in it), so the header may take registers as equal: a partition of the
//! registers that every back-edge keeps (registers holding the same value at each
//! back-edge, given the partition at the header), checked at the entry by the guard
//! (a register pair compared; Cranelift folds it where the entry copied one into the
//! other).

use std::collections::{BTreeMap, BTreeSet};

use csx_ebpf::engine::rules;
use csx_ebpf::isa::*;

use crate::analysis::FunctionPlan;
use crate::loops::{plain_loops, PlainLoop};

/// Most fuel a guard may ask the slice for (of its `STOP_SLICE`): a loop needing more
/// would take the checked copy too often to repay its fast one.
const NEED_MAX: u64 = 1 << 14;

/// A loop whose entries take few back-edges (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BoundedLoop {
    pub header: u32,
    /// Every slot of the loop (the header included).
    pub body: BTreeSet<u32>,
    /// Most back-edges one entry takes.
    pub trips: u64,
    /// Most fuel one pass from the header (to a back-edge, or to an edge leaving the
    /// loop, whose own charge aside) charges.
    pub most: u64,
    /// Register pairs the bound takes as equal at the header: the guard compares them.
    pub equal: Vec<(u8, u8)>,
}

impl BoundedLoop {
    /// What the slice must hold at the entry for no charge of the entry inside the loop
    /// to run it out: `trips` passes that go back and one that leaves.
    pub(crate) fn need(&self) -> u64 {
        (self.trips + 1) * self.most
    }
}

/// The bounded loops of `plan` (innermost, call-free, see [`BoundedLoop`]) but those
/// headed at `skip` (versioned loops, with fuel bounds of their own).
pub(crate) fn bounded_loops(
    insns: &[Insn],
    plan: &FunctionPlan,
    skip: &BTreeSet<u32>,
) -> Vec<BoundedLoop> {
    plain_loops(insns, plan)
        .into_iter()
        .filter(|l| !skip.contains(&l.header))
        .filter_map(|l| bound(insns, &l))
        .filter(|b| b.need() <= NEED_MAX)
        .collect()
}

fn bound(insns: &[Insn], l: &PlainLoop) -> Option<BoundedLoop> {
    let classes = header_classes(insns, l);
    let trips = (0..10u8)
        .filter_map(|m| trips_by(insns, l, &classes, m))
        .min()?;
    let most = most_fuel(l)?;
    let mut equal = Vec::new();
    for r in 0..10u8 {
        let rep = classes[r as usize];
        if rep != r {
            equal.push((rep, r));
        }
    }
    Some(BoundedLoop {
        header: l.header,
        body: l.body.clone(),
        trips,
        most,
        equal,
    })
}

/// The registers each conditional jump's edge (taken or not) shows are not zero.
fn nonzero_on(insn: &Insn, taken: bool) -> Vec<u8> {
    let x = insn.opc & SRC_X != 0;
    let (d, s, imm) = (insn.dst, insn.src, insn.imm);
    match (insn.opc & 0xf0, taken) {
        (JMP_JNE, true) | (JMP_JEQ, false) if !x && imm == 0 => vec![d],
        (JMP_JGT, true) | (JMP_JLE, false) => vec![d],
        (JMP_JGE, true) | (JMP_JLT, false) if !x && imm != 0 => vec![d],
        (JMP_JLT, true) | (JMP_JGE, false) if x => vec![s],
        (JMP_JSET, true) if x => vec![d, s],
        (JMP_JSET, true) if imm != 0 => vec![d],
        (JMP_JSGT, true) | (JMP_JSLE, false) if !x && imm >= 0 => vec![d],
        (JMP_JSLT, true) | (JMP_JSGE, false) if !x && imm <= 0 => vec![d],
        (JMP_JSGE, true) | (JMP_JSLT, false) if !x && imm >= 1 => vec![d],
        _ => Vec::new(),
    }
}

/// Whether slot `pc` is a conditional jump (not `ja`, a call or `exit`).
fn conditional(insn: &Insn) -> bool {
    matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
        && !matches!(insn.opc & 0xf0, JMP_JA | JMP_CALL | JMP_EXIT)
}

/// The target of a conditional jump at `pc`.
fn target(insn: &Insn, pc: u32) -> u32 {
    (i64::from(pc) + i64::from(insn.off) + 1) as u32
}

// ---- equal registers at the header ---------------------------------------------------

/// The registers each register's value is written by at `pc` (an id per slot and
/// register for a value no earlier one holds).
fn value_ids(insns: &[Insn], pc: u32, ids: &mut [u32; 11]) {
    let insn = &insns[pc as usize];
    let fresh = 1_000 + pc * 16;
    match insn.class() {
        CLASS_ALU64 if insn.opc == ALU_MOV | SRC_X | CLASS_ALU64 && insn.off == 0 => {
            ids[insn.dst as usize] = ids[insn.src as usize];
        }
        CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD => {
            ids[insn.dst as usize] = fresh + u32::from(insn.dst);
        }
        CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => {
            ids[insn.src as usize] = fresh + u32::from(insn.src);
            ids[0] = fresh;
        }
        _ => {}
    }
}

/// Each register's value id at each back-edge, the header's registers taking the ids
/// `start` gives.
fn latch_ids(insns: &[Insn], l: &PlainLoop, start: [u32; 11]) -> Vec<[u32; 11]> {
    let mut at: BTreeMap<u32, [u32; 11]> = BTreeMap::from([(l.header, start)]);
    let mut back = Vec::new();
    for &pc in &l.order {
        let Some(mut ids) = at.get(&pc).copied() else {
            continue;
        };
        value_ids(insns, pc, &mut ids);
        for &v in &l.succ[&pc] {
            if v == l.header {
                back.push(ids);
            } else if l.body.contains(&v) {
                at.entry(v)
                    .and_modify(|have| {
                        for r in 0..11 {
                            if have[r] != ids[r] {
                                have[r] = 2_000_000 + v * 16 + r as u32;
                            }
                        }
                    })
                    .or_insert(ids);
            }
        }
    }
    back
}

/// The partition of r0-r9 at the header that every back-edge keeps, as each register's
/// class representative (the least register of its class), starting from the registers
/// the back-edges leave equal.
fn header_classes(insns: &[Insn], l: &PlainLoop) -> [u8; 11] {
    let mut rep: [u8; 11] = std::array::from_fn(|r| r as u8);
    let mut first = true;
    loop {
        let start: [u32; 11] = std::array::from_fn(|r| u32::from(rep[r]));
        let back = latch_ids(insns, l, start);
        let mut next = rep;
        for r in 0..10 {
            next[r] = (0..=r)
                .find(|&q| (first || rep[q] == rep[r]) && back.iter().all(|ids| ids[q] == ids[r]))
                .expect("r is its own") as u8;
        }
        next[10] = 10;
        if !first && next == rep {
            return rep;
        }
        rep = next;
        first = false;
    }
}

// ---- the measure -----------------------------------------------------------------------

/// What a register holds in terms of the measure register's value `m` at the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Der {
    Unknown,
    /// `m` itself.
    Exact,
    /// `m - 1` (in 64 or 32 bits).
    Dec,
    /// A value that is zero when `m` is, with at least `bits` fewer significant bits
    /// than `m` (none fewer than zero) and, when `pop` is some, at least that many fewer
    /// set bits (`None`: perhaps more set bits than `m`, as `m / 10` may have).
    Shrunk {
        pop: Option<u32>,
        bits: u32,
    },
}

/// The drops of a [`Der::Shrunk`]: set bits (`None` ordering below every drop, as no
/// drop at all), significant bits.
type Drops = (Option<u32>, u32);

impl Der {
    fn drops(self) -> Option<Drops> {
        match self {
            Der::Exact => Some((Some(0), 0)),
            Der::Shrunk { pop, bits } => Some((pop, bits)),
            Der::Unknown | Der::Dec => None,
        }
    }

    fn shrunk((pop, bits): Drops) -> Der {
        Der::Shrunk { pop, bits }
    }

    fn join(self, other: Der) -> Der {
        if self == other {
            return self;
        }
        match (self.drops(), other.drops()) {
            (Some((p, b)), Some((q, c))) => Der::shrunk((p.min(q), b.min(c))),
            _ => Der::Unknown,
        }
    }
}

/// The state at a slot: each register's [`Der`], and whether the path has shown `m`
/// is not zero.
type State = ([Der; 11], bool);

fn transfer(insn: &Insn, regs: &mut [Der; 11]) {
    let (d, s) = (insn.dst as usize, insn.src as usize);
    let x = insn.opc & SRC_X != 0;
    let class = insn.class();
    let width = if class == CLASS_ALU { 32 } else { 64 };
    match class {
        CLASS_ALU | CLASS_ALU64 => {
            let a = regs[d];
            regs[d] = match insn.opc & 0xf0 {
                ALU_MOV if x && insn.off == 0 && width == 64 => regs[s],
                ALU_MOV if x && insn.off == 0 => regs[s].drops().map_or(Der::Unknown, Der::shrunk),
                ALU_ADD if !x && insn.imm == -1 && a == Der::Exact => Der::Dec,
                ALU_SUB if !x && insn.imm == 1 && a == Der::Exact => Der::Dec,
                ALU_AND if x => match (a, regs[s]) {
                    (Der::Exact, Der::Dec) | (Der::Dec, Der::Exact) => Der::shrunk((Some(1), 0)),
                    (p, q) => match (p.drops(), q.drops()) {
                        (Some((p1, b1)), Some((p2, b2))) => Der::shrunk((p1.max(p2), b1.max(b2))),
                        (Some(k), None) | (None, Some(k)) => Der::shrunk(k),
                        (None, None) => Der::Unknown,
                    },
                },
                ALU_AND => a.drops().map_or(Der::Unknown, Der::shrunk),
                ALU_RSH if !x && insn.off == 0 && (1..width).contains(&insn.imm) => a
                    .drops()
                    .map_or(Der::Unknown, |(p, b)| Der::shrunk((p, b + insn.imm as u32))),
                // An unsigned division by a constant `d >= 2` drops `log2 d` bits at
                // least (a 32-bit one divides the low half, no longer than `m`); it may
                // set more bits. Not `sdiv` (offset 1), nor a divisor in a register.
                ALU_DIV if !x && insn.off == 0 && insn.imm >= 2 => {
                    a.drops().map_or(Der::Unknown, |(_, b)| {
                        Der::shrunk((None, b + insn.imm.ilog2()))
                    })
                }
                _ => Der::Unknown,
            };
        }
        CLASS_LDX | CLASS_LD => regs[d] = Der::Unknown,
        CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => {
            regs[s] = Der::Unknown;
            regs[0] = Der::Unknown;
        }
        _ => {}
    }
}

/// The most back-edges an entry of `l` takes, by measure register `m` (see the module
/// doc), or `None` when `m` does not bound them.
fn trips_by(insns: &[Insn], l: &PlainLoop, classes: &[u8; 11], m: u8) -> Option<u64> {
    let mut start = [Der::Unknown; 11];
    for r in 0..10 {
        if classes[r] == classes[m as usize] {
            start[r] = Der::Exact;
        }
    }
    let mut at: BTreeMap<u32, State> = BTreeMap::from([(l.header, (start, false))]);
    // The drops of `m` at each back-edge.
    let mut back: Vec<Drops> = Vec::new();
    for &pc in &l.order {
        let (mut regs, nonzero) = *at.get(&pc)?;
        let insn = &insns[pc as usize];
        transfer(insn, &mut regs);
        let succ = &l.succ[&pc];
        for &v in succ {
            let mut shown = nonzero;
            if conditional(insn) && succ.len() == 2 {
                let taken = v == target(insn, pc);
                shown |= nonzero_on(insn, taken)
                    .iter()
                    .any(|&r| regs[r as usize].drops().is_some());
            }
            if v == l.header {
                let (pop, bits) = regs[m as usize].drops()?;
                if !shown || pop.unwrap_or(0) + bits == 0 {
                    return None;
                }
                back.push((pop, bits));
            } else if l.body.contains(&v) {
                at.entry(v)
                    .and_modify(|(have, seen)| {
                        for r in 0..11 {
                            have[r] = have[r].join(regs[r]);
                        }
                        *seen &= shown;
                    })
                    .or_insert((regs, shown));
            }
        }
    }
    // The measure each back-edge drops by at least `d`, at most `max` on entry (a
    // measure some back-edge has no drop of bounds nothing).
    let least = |f: fn(&Drops) -> Option<u32>| back.iter().map(f).min().flatten();
    let by = |max: u64, d: Option<u32>| d.filter(|&d| d > 0).map(|d| (max - 1) / u64::from(d) + 1);
    [
        by(64, least(|&(p, _)| p)),
        by(64, least(|&(_, b)| Some(b))),
        by(128, least(|&(p, b)| p.map(|p| p + b))),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// The most fuel a pass through `l` from its header charges: the costs of the body's
/// edges on the way to a back-edge (its cost included) or to an edge leaving the loop
/// (its cost not included).
fn most_fuel(l: &PlainLoop) -> Option<u64> {
    let mut reach: BTreeMap<u32, u64> = BTreeMap::from([(l.header, 0)]);
    let mut most = 0;
    for &pc in &l.order {
        let Some(&c) = reach.get(&pc) else {
            continue;
        };
        most = most.max(c);
        for &v in &l.succ[&pc] {
            if v == l.header {
                most = most.max(c.checked_add(rules::jump_cost(pc, v))?);
            } else if l.body.contains(&v) {
                let c = c.checked_add(rules::jump_cost(pc, v))?;
                let e = reach.entry(v).or_insert(c);
                *e = (*e).max(c);
            }
        }
    }
    Some(most)
}
