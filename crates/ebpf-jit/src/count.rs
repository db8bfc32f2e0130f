//! Block counters in compiled code, for runs that count executed work
//! (`csx_ebpf::count`): the JIT's half of the counting rule, compiled only into the
//! counting variant of a program ([`crate::JitProgram`] builds it on the first run that
//! asks for counts), so uncounted runs execute exactly the code they did before.
//!
//! # One counter per class of blocks
//! Blocks that always run together share one counter ([`plan`]): by flow conservation
//! their counts are equal, so only the first of them, the class's *head*, bumps a
//! counter, and the others' counts are derived from it when the counters are flushed.
//! Two shapes put a block `b` in the class of an earlier block (its *parent*):
//!
//! * a **chain**: `b`'s only predecessor is `a` and `a`'s only successor is `b`;
//! * a **join**: `b`'s predecessors are a branch `h` and the arm(s) `h` branches to,
//!   each arm entered only from `h` and leaving only to `b` (an if-then triangle, or an
//!   if-then-else diamond of two arms): every pass through `h` reaches `b` once;
//! * a **region**: more generally, `h` is `b`'s lowest earlier predecessor and every
//!   block between them (its arms: reached from `h` without passing `b`) is entered only
//!   from `h` and the arms, and leaves only to arms or `b` (never back to `h`, out of the
//!   function or through a local call), as are `b`'s own entries: a row's tests that
//!   each skip to the next row ([`region_parent`]).
//!
//! A pass through a class can stop early only at a trap (a function's `exit` has no
//! successor, so it never has a block after it in a class). A trap in a block *before*
//! member `m` of the pass (its parent's blocks and the arms in between, [`Member::before`])
//! leaves `m` one entry short of its head, so the trap exit subtracts 1 from `m` when the
//! recorded trap pc lies in one of those slot ranges. A trap inside a local callee is not
//! seen by the caller's trap exit (the caller leaves through the propagate exit), so a
//! block ending in a local call is never a parent or an arm: its successor starts a new
//! class. The counts stay equal to the interpreter's block by block, traps included.
//!
//! # The counters
//! Each class gets an `i64` SSA variable, 0 at function entry. Translation adds 1 where
//! the head's code begins (`Translator::body`), and for heads whose code an
//! if-conversion runs unconditionally, adds the arm's predicate instead (`enter_if`).
//! The variables are added into the run's counter buffer (`JitContext::counts`), one
//! slot per member block, when the function leaves: at `exit`, at the trap exit (with the
//! correction above) and at the exit that propagates a callee's trap, so a trap mid-block
//! has counted the whole block, as the rule says. Speculative regions are not planned in
//! this variant (their blocks run on a predicate and may run twice on a fallback).
//! Versioned loops are (`loops`): the guard picks one copy per iteration, and both copies
//! bump the same variables, so an iteration counts once whichever copy runs it.
//!
//! To copy the shape to another compiled tier: the same leaders
//! (`VerifiedProgram::blocks`), one counter per leader (or per class, as here) bumped
//! where its code begins, added into the buffer whose pointer the context holds whenever
//! a function returns or traps.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use csx_ebpf::count::BlockMap;
use csx_ebpf::isa::*;

use crate::analysis::FunctionPlan;
use crate::runtime::offsets;

/// One block of a class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    /// The block's leader slot.
    pub leader: u32,
    /// Its index in the [`BlockMap`] (its slot in the counter buffer).
    pub block: usize,
    /// Slot ranges `lo..hi`, ascending and disjoint: a trap at a slot in one of them
    /// happens after the class's head was entered in a pass and before this block was
    /// (empty for the head).
    pub before: Vec<(u32, u32)>,
}

/// Blocks sharing one counter, the head first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Class {
    pub members: Vec<Member>,
}

impl Class {
    /// The slot whose code bumps the counter.
    pub fn head(&self) -> u32 {
        self.members[0].leader
    }
}

/// A block of the function's control-flow graph over canonical blocks.
struct Node {
    /// Slots `leader..end` (`end` the next canonical leader).
    end: u32,
    succs: Vec<u32>,
    preds: Vec<u32>,
    /// Whether its last instruction is a local call (a callee's trap leaves through
    /// the propagate exit, which cannot tell where it was).
    local_call: bool,
}

/// Stands for the caller as the function entry's predecessor.
const OUTSIDE: u32 = u32::MAX;

/// The counter classes of a function (see the module doc), ordered by head slot, each
/// class's members by leader slot. Every canonical leader among the function's reachable
/// slots is in exactly one class. Three passes over shared tables: the blocks and their
/// edges, each block's parent in its class, then each member's head and slot ranges.
pub(crate) fn plan(insns: &[Insn], blocks: &BlockMap, f: &FunctionPlan) -> Vec<Class> {
    let leaders: Vec<u32> = f
        .pcs
        .iter()
        .copied()
        .filter(|&pc| blocks.block_at(pc).is_some())
        .collect();
    let nodes = graph(insns, blocks, f, &leaders);
    let parent = parents(&nodes, &leaders);
    let (before, head_of) = heads(&nodes, &parent, &leaders);
    classes(blocks, &leaders, &before, &head_of)
}

/// The block of each leader with its successors and predecessors (the function entry's
/// predecessor is [`OUTSIDE`]).
fn graph(
    insns: &[Insn],
    blocks: &BlockMap,
    f: &FunctionPlan,
    leaders: &[u32],
) -> HashMap<u32, Node> {
    let all = blocks.leaders();
    let pcs = &f.pcs;
    let mut nodes: HashMap<u32, Node> = HashMap::new();
    for &l in leaders {
        let end = all
            .get(all.partition_point(|&x| x <= l))
            .copied()
            .unwrap_or(insns.len() as u32);
        // The block's last instruction: the last reachable slot before `end`.
        let last = pcs[pcs.partition_point(|&x| x < end) - 1];
        let (succs, local_call) = successors(&insns[last as usize], last);
        nodes.insert(
            l,
            Node {
                end,
                succs,
                preds: Vec::new(),
                local_call,
            },
        );
    }
    nodes
        .get_mut(&f.start)
        .expect("a function's first slot leads a block")
        .preds
        .push(OUTSIDE);
    for &l in leaders {
        for s in nodes[&l].succs.clone() {
            if let Some(n) = nodes.get_mut(&s) {
                n.preds.push(l);
            }
        }
    }
    for n in nodes.values_mut() {
        n.preds.sort_unstable();
        n.preds.dedup();
    }
    nodes
}

/// The slots a block ending with `insn` at `last` goes to next (sorted, distinct), and
/// whether that instruction is a local call.
fn successors(insn: &Insn, last: u32) -> (Vec<u32>, bool) {
    let next = if insn.opc == OP_LDDW {
        last + 2
    } else {
        last + 1
    };
    let mut succs = Vec::new();
    let mut local_call = false;
    if matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
        let is32 = insn.class() == CLASS_JMP32;
        match insn.opc & 0xf0 {
            JMP_EXIT if !is32 => {}
            JMP_CALL if !is32 => {
                local_call = insn.src == CALL_SRC_LOCAL && insn.opc & SRC_X == 0;
                succs.push(next);
            }
            JMP_JA => {
                let rel = if is32 { insn.imm } else { i32::from(insn.off) };
                succs.push((i64::from(last) + i64::from(rel) + 1) as u32);
            }
            _ => {
                succs.push((i64::from(last) + i64::from(insn.off) + 1) as u32);
                succs.push(next);
            }
        }
    } else {
        succs.push(next);
    }
    succs.sort_unstable();
    succs.dedup();
    (succs, local_call)
}

/// Each block's parent in its class and the arms between them.
fn parents(nodes: &HashMap<u32, Node>, leaders: &[u32]) -> HashMap<u32, (u32, Vec<u32>)> {
    let mut parent: HashMap<u32, (u32, Vec<u32>)> = HashMap::new();
    for &b in leaders {
        if let Some((h, arms)) = parent_of(nodes, b) {
            // No cycles: `b` must not be an ancestor of its would-be parent.
            let mut at = h;
            let mut cycle = at == b;
            while let Some((up, _)) = parent.get(&at) {
                if *up == b {
                    cycle = true;
                    break;
                }
                at = *up;
            }
            if !cycle {
                parent.insert(b, (h, arms));
            }
        }
    }
    parent
}

/// The would-be parent of block `b` and the arms between them: its one plain
/// predecessor that goes only to it, or the head of an if (one arm) or an if-else (two
/// arms) that joins at it.
fn parent_of(nodes: &HashMap<u32, Node>, b: u32) -> Option<(u32, Vec<u32>)> {
    let only = |v: &[u32], x: u32| v.len() == 1 && v[0] == x;
    let plain = |x: u32| x != OUTSIDE && !nodes[&x].local_call;
    match *nodes[&b].preds.as_slice() {
        [a] if plain(a) && only(&nodes[&a].succs, b) => Some((a, Vec::new())),
        [p, q] if plain(p) && plain(q) => {
            let arm_of = |h: u32, t: u32| {
                plain(h)
                    && only(&nodes[&t].preds, h)
                    && only(&nodes[&t].succs, b)
                    && nodes[&h].succs.len() == 2
            };
            let (np, nq) = (&nodes[&p], &nodes[&q]);
            if np.succs.contains(&q) && np.succs.contains(&b) && arm_of(p, q) {
                Some((p, vec![q]))
            } else if nq.succs.contains(&p) && nq.succs.contains(&b) && arm_of(q, p) {
                Some((q, vec![p]))
            } else if np.preds.len() == 1
                && nq.preds == np.preds
                && np.preds[0] != OUTSIDE
                && {
                    let h = np.preds[0];
                    let hs = &nodes[&h].succs;
                    hs.len() == 2 && hs.contains(&p) && hs.contains(&q)
                }
                && arm_of(np.preds[0], p)
                && arm_of(np.preds[0], q)
            {
                Some((np.preds[0], vec![p, q]))
            } else {
                region_parent(nodes, b)
            }
        }
        _ => region_parent(nodes, b),
    }
}

/// Most blocks between a region's entry and its join ([`region_parent`]).
const REGION_BLOCKS_MAX: usize = 64;

/// The would-be parent of `b` as the join of a *region*: its lowest predecessor `h`
/// before it, when every block reached from `h` without passing `b` (the arms) is
/// entered only from `h` and the arms, never returns to `h`, leaves the function, or
/// ends in a local call, and `b` is entered only from them too. Every pass through `h`
/// then reaches `b` exactly once (a trap aside), whatever the arms do: the tests of a
/// row that each may skip the rest of it, the scan program's shape (an if-then with
/// several exits to one join, which the triangle and diamond do not cover).
fn region_parent(nodes: &HashMap<u32, Node>, b: u32) -> Option<(u32, Vec<u32>)> {
    let bn = &nodes[&b];
    let h = *bn.preds.iter().find(|&&p| p < b)?;
    if h == OUTSIDE || nodes[&h].local_call {
        return None;
    }
    let mut arms: Vec<u32> = Vec::new();
    let mut work: Vec<u32> = nodes[&h].succs.clone();
    while let Some(x) = work.pop() {
        if x == b || arms.contains(&x) {
            continue;
        }
        let n = nodes.get(&x)?;
        if x == h || n.local_call || n.succs.is_empty() || arms.len() == REGION_BLOCKS_MAX {
            return None;
        }
        arms.push(x);
        work.extend(n.succs.iter().copied());
    }
    let inside = |p: &u32| *p == h || arms.contains(p);
    if arms.is_empty() || !bn.preds.iter().all(inside) {
        return None;
    }
    if !arms.iter().all(|a| nodes[a].preds.iter().all(inside)) {
        return None;
    }
    arms.sort_unstable();
    Some((h, arms))
}

/// Each member's slot ranges before it, and its head.
type Heads = (HashMap<u32, Vec<(u32, u32)>>, HashMap<u32, u32>);

/// Heads, and each member's slot ranges before it (memoized along the parent links).
fn heads(
    nodes: &HashMap<u32, Node>,
    parent: &HashMap<u32, (u32, Vec<u32>)>,
    leaders: &[u32],
) -> Heads {
    let mut before: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    let mut head_of: HashMap<u32, u32> = HashMap::new();
    for &b in leaders {
        let mut path = vec![b];
        while let Some((up, _)) = parent.get(path.last().expect("non-empty")) {
            if before.contains_key(up) {
                path.push(*up);
                break;
            }
            path.push(*up);
        }
        let top = *path.last().expect("non-empty");
        if let std::collections::hash_map::Entry::Vacant(e) = before.entry(top) {
            e.insert(Vec::new());
            head_of.insert(top, top);
        }
        for i in (0..path.len() - 1).rev() {
            let m = path[i];
            let (up, arms) = &parent[&m];
            let mut ranges = before[up].clone();
            ranges.push((*up, nodes[up].end));
            ranges.extend(arms.iter().map(|&a| (a, nodes[&a].end)));
            before.insert(m, coalesce(ranges));
            head_of.insert(m, head_of[up]);
        }
    }
    (before, head_of)
}

/// The classes: members grouped by head, the head first, classes ordered by head slot.
fn classes(
    blocks: &BlockMap,
    leaders: &[u32],
    before: &HashMap<u32, Vec<(u32, u32)>>,
    head_of: &HashMap<u32, u32>,
) -> Vec<Class> {
    let mut classes: Vec<Class> = Vec::new();
    let mut index: HashMap<u32, usize> = HashMap::new();
    for &b in leaders {
        let head = head_of[&b];
        let member = Member {
            leader: b,
            block: blocks.block_at(b).expect("a leader"),
            before: before[&b].clone(),
        };
        match index.get(&head) {
            Some(&i) => classes[i].members.push(member),
            None => {
                index.insert(head, classes.len());
                classes.push(Class {
                    members: vec![member],
                });
            }
        }
    }
    for c in &mut classes {
        let head = head_of[&c.members[0].leader];
        // The head first (a chain may jump backwards, so it is not always the lowest).
        c.members.sort_by_key(|m| (m.leader != head, m.leader));
    }
    classes.sort_by_key(Class::head);
    classes
}

/// Sorts `ranges` and merges those that overlap or touch.
fn coalesce(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// One function's block counters.
pub(crate) struct Counters {
    /// By head slot: its class's variable.
    heads: HashMap<u32, Variable>,
    /// Every class with its variable, by head slot (the flush order).
    classes: Vec<(Class, Variable)>,
    /// Heads of one-block classes, with the block's index.
    single: HashMap<u32, usize>,
}

impl Counters {
    /// Counters for the function `f`'s classes, set to 0 in the current (entry) block.
    pub(crate) fn new(
        b: &mut FunctionBuilder<'_>,
        blocks: &BlockMap,
        insns: &[Insn],
        f: &FunctionPlan,
    ) -> Counters {
        let mut heads = HashMap::new();
        let mut single = HashMap::new();
        let mut classes = Vec::new();
        let zero = b.ins().iconst(types::I64, 0);
        for class in plan(insns, blocks, f) {
            let var = b.declare_var(types::I64);
            b.def_var(var, zero);
            heads.insert(class.head(), var);
            if let [m] = class.members.as_slice() {
                single.insert(m.leader, m.block);
            }
            classes.push((class, var));
        }
        Counters {
            heads,
            classes,
            single,
        }
    }

    /// Adds 1 to the counter of the class `pc` heads, if it heads one.
    pub(crate) fn enter(&self, b: &mut FunctionBuilder<'_>, pc: u32) {
        if let Some(&var) = self.heads.get(&pc) {
            let n = b.use_var(var);
            let n = b.ins().iadd_imm_s(n, 1);
            b.def_var(var, n);
        }
    }

    /// Adds `runs` (a Cranelift boolean, 0 or 1) to the count of every class headed by a
    /// slot in `from..to`: an if-converted arm, which runs when `runs` holds. A class of
    /// one block (an arm's usual class: its successor is a join) is added straight into
    /// the run's buffer, so an arm in a loop keeps no counter live across the back-edge
    /// (one less value to hold in a register or spill); the buffer then holds its count
    /// at once, and the class's variable, added at flush, holds only plain entries.
    pub(crate) fn enter_if(
        &self,
        b: &mut FunctionBuilder<'_>,
        (ctx, flags): (Value, MemFlagsData),
        (from, to): (u32, u32),
        runs: Value,
    ) {
        let mut one = None;
        for pc in from..to {
            if let Some(&var) = self.heads.get(&pc) {
                let add = *one.get_or_insert_with(|| b.ins().uextend(types::I64, runs));
                if let Some(&block) = self.single.get(&pc) {
                    let base = b.ins().load(types::I64, flags, ctx, offsets::COUNTS);
                    let off = i32::try_from(block * 8).expect("a program has at most 2^20 slots");
                    let buf = MemFlagsData::trusted();
                    let old = b.ins().load(types::I64, buf, base, off);
                    let new = b.ins().iadd(old, add);
                    b.ins().store(buf, new, base, off);
                } else {
                    let n = b.use_var(var);
                    let n = b.ins().iadd(n, add);
                    b.def_var(var, n);
                }
            }
        }
    }

    /// Adds every member's count into the run's buffer; the function is about to leave.
    /// `trapped`: at the trap exit, where the context holds the trap's pc and members
    /// the last pass did not reach count one less than their head.
    pub(crate) fn flush(
        &self,
        b: &mut FunctionBuilder<'_>,
        ctx: Value,
        flags: MemFlagsData,
        trapped: bool,
    ) {
        if self.classes.is_empty() {
            return;
        }
        let base = b.ins().load(types::I64, flags, ctx, offsets::COUNTS);
        let trap_pc = trapped.then(|| b.ins().load(types::I64, flags, ctx, offsets::TRAP_PC));
        let buf = MemFlagsData::trusted();
        for (class, var) in &self.classes {
            let n = b.use_var(*var);
            for m in &class.members {
                let mut count = n;
                if let (Some(pc), false) = (trap_pc, m.before.is_empty()) {
                    let mut short: Option<Value> = None;
                    for &(lo, hi) in &m.before {
                        let d = b.ins().iadd_imm_s(pc, -i64::from(lo));
                        let inside =
                            b.ins()
                                .icmp_imm_u(IntCC::UnsignedLessThan, d, i64::from(hi - lo));
                        short = Some(match short {
                            Some(s) => b.ins().bor(s, inside),
                            None => inside,
                        });
                    }
                    let short = short.expect("a member after its head has slots before it");
                    let short = b.ins().uextend(types::I64, short);
                    count = b.ins().isub(n, short);
                }
                let off = i32::try_from(m.block * 8).expect("a program has at most 2^20 slots");
                let old = b.ins().load(types::I64, buf, base, off);
                let new = b.ins().iadd(old, count);
                b.ins().store(buf, new, base, off);
            }
        }
    }
}
