//! Loop-invariant values Cranelift's mid-end leaves inside loops, moved out after it.
//!
//! The mid-end hoists a pure value out of a loop when every argument is defined
//! outside, but a constant argument is *rematerialized* (`iconst`, and an `iadd`, `band`
//! ... with a constant, are copied into each block that uses them, to keep them out of
//! registers): once a constant has been placed inside a loop, every value computed from
//! it is placed there too. hashjoin's `mask = (1 << bits) - 1` was computed again at
//! each probe of its inner loop (`movl $1; shlx; lea -1`, with `bits` reloaded from the
//! stack), and `32 - bits` at each key.
//!
//! [`hoist_in`] runs after the mid-end (see `extend::define`): for each loop,
//! innermost first, a pure instruction in it whose arguments are all defined outside the
//! loop or are constants moves to the end of the block that immediately dominates the
//! loop's header (before its branch), its constant arguments copied there. Only values
//! the mid-end would have hoisted but for a constant: an instruction of the kinds it
//! rematerializes (an `iadd`, `isub`, `band`, `bor`, `bxor` with a constant, `bnot`),
//! a conversion (`uextend`, `sextend`, `ireduce`) or a compare (`icmp`, fused into its
//! branch when left beside it) moves only when an argument is a value this pass moved,
//! so a chain goes out whole, and the mid-end's choice to keep `p + 64` inside beside
//! `p` stands. Or, but for a compare, when no argument is live in or after the loop
//! without it (nothing else in the loop uses it, and every use outside runs before the
//! loop, in no loop holding it): outside, its result is live across the loop where its
//! argument was. hashjoin's `32 - bits` stayed at each key, `bits` narrowed there;
//! once `1 << bits` has left, the narrowing and the difference leave too, so each loop
//! is gone over again while a round moves something (at most [`LOOP_ROUNDS`]).
//!
//! Before that, a load's or store's address `x + (u + w)` with `x` and `u` defined
//! outside the loop and `w` inside (a host delta, a pointer and an index) is added as
//! `(x + u) + w`, `x + u` made in that dominating block: knn loaded `host + (q + 4k)`
//! with the query pointer reloaded from a spill slot at each load. Same address:
//! addition wraps, so any grouping of the terms gives the same sum.
//!
//! Same values: a moved instruction is pure and cannot trap, and its arguments are the
//! same values at the new place (defined outside the loop, which the new place's block
//! dominates, or constants), so it computes what it computed in the loop, at most once
//! more (when the loop is not entered, or the block that held it did not run).
//!
//! Both need a value passed around a loop unchanged to be seen as the value it is: the
//! mid-end removes such block parameters before its rewrites, not after, and its rewrites
//! make more (a host delta passed back as `delta + 0`). [`tidy_loops`] removes them
//! again first: grep's scan loaded `delta + (p + i)` with `delta` a parameter of the
//! loop's head, so the regroup above never saw an invariant term.
//!
//! Last, [`sink_in`] moves a pure value computed in a loop but used only after
//! leaving it down to where it is used (the nearest block dominating every use, outside
//! every loop that does not hold its definition). The mid-end's value numbering merges
//! a sum the loop needs with the same sum on an exit path; once the regroup takes the
//! loop's use away, the sum is still made at every iteration and held across the loop
//! for the exit: grep's scan made `p + i` at every byte (and reloaded `p` for it) for
//! the path that compares the rest of the pattern. A sunk value is made at most as often
//! as before, from the same arguments (its old block dominates its new one, so they are
//! defined there).
//!
//! Last of all, [`raise_in`] moves the links of a chain of one operation (a sum, a
//! maximum, a running xor: `s1 = s0 + x0; s2 = s1 + x1; ...`) up their block to just
//! after their inputs. The mid-end places a pure value where its first use needs it, so
//! a sum carried through an unrolled group is made at the group's end, after every load
//! it adds: stats64's group of 16 held its 16 loaded values to the end, most of them
//! in spill slots, for its sum and its maximum (25% fewer executed instructions once
//! the chains follow their loads). Same values: a moved instruction is pure and cannot
//! trap, and its new place is after its arguments' definitions and before its uses.

use std::collections::{BTreeMap, BTreeSet};

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::{
    types, Block, Function, Inst, InstBuilder, InstructionData, Opcode, Value, ValueDef,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::loop_analysis::{Loop, LoopAnalysis};
use cranelift_codegen::Context;

/// Whether `op` computes its result from its arguments alone: no memory, no trap, no
/// control flow, no other effect.
fn pure(op: Opcode) -> bool {
    !(op.can_load()
        || op.can_store()
        || op.can_trap()
        || op.other_side_effects()
        || op.is_branch()
        || op.is_terminator()
        || op.is_call())
}

/// The constant `v` is, if an `iconst` defines it.
fn constant(func: &Function, v: Value) -> Option<Inst> {
    match func.dfg.value_def(v) {
        ValueDef::Result(inst, 0)
            if matches!(
                func.dfg.insts[inst],
                InstructionData::UnaryImm {
                    opcode: Opcode::Iconst,
                    ..
                }
            ) =>
        {
            Some(inst)
        }
        _ => None,
    }
}

/// Whether the mid-end would copy `inst` into each block using it, or it costs about
/// as little there (a conversion; a compare, which lowering fuses into the branch that
/// uses it): such an instruction moves only with a moved argument.
fn cheap(func: &Function, inst: Inst) -> bool {
    let data = &func.dfg.insts[inst];
    match data.opcode() {
        Opcode::Iadd | Opcode::Isub | Opcode::Band | Opcode::Bor | Opcode::Bxor => func
            .dfg
            .inst_args(inst)
            .iter()
            .any(|&a| constant(func, a).is_some()),
        Opcode::Bnot
        | Opcode::Uextend
        | Opcode::Sextend
        | Opcode::Ireduce
        | Opcode::Iconst
        | Opcode::Icmp => true,
        _ => false,
    }
}

/// The block where a value is defined.
fn def_block(func: &Function, v: Value) -> Option<Block> {
    match func.dfg.value_def(v) {
        ValueDef::Result(inst, _) => func.layout.inst_block(inst),
        ValueDef::Param(block, _) => Some(block),
        _ => None,
    }
}

/// The address of the load or store `inst` as `x + (u + w)` (either association of
/// either sum) where `x` and `u` are defined outside the loop (`outside` says which
/// values are) and `w` inside, none of them a constant: `(x, u, w)`. grep's scan
/// loaded `host + (p + i)`, the host delta and the text pointer both invariant; as
/// `(host + p) + i` the first sum leaves the loop.
fn regroupable(
    func: &Function,
    inst: Inst,
    outside: &dyn Fn(&Function, Value) -> Option<bool>,
) -> Option<(Value, Value, Value)> {
    let addr = match func.dfg.insts[inst] {
        InstructionData::Load { arg, .. } => arg,
        InstructionData::Store { args, .. } => args[1],
        _ => return None,
    };
    let sum = |v: Value| match func.dfg.value_def(func.dfg.resolve_aliases(v)) {
        ValueDef::Result(def, 0) => match func.dfg.insts[def] {
            InstructionData::Binary {
                opcode: Opcode::Iadd,
                args: [a, b],
            } if func.dfg.value_type(a) == types::I64 => Some((a, b)),
            _ => None,
        },
        _ => None,
    };
    let at = |v: Value| {
        constant(func, v)
            .is_none()
            .then(|| outside(func, v))
            .flatten()
    };
    let split = |p: Value, q: Value| match (at(p), at(q)) {
        (Some(true), Some(false)) => Some((p, q)),
        (Some(false), Some(true)) => Some((q, p)),
        _ => None,
    };
    let (a, b) = sum(addr)?;
    let (x, y) = split(a, b)?;
    let (c, d) = sum(y)?;
    let (u, w) = split(c, d)?;
    Some((x, u, w))
}

/// Puts `inst` (in no block) at the end of `to`, before its branch, and returns its
/// result; or, when an instruction already `placed` there computes the same, returns
/// that one's result and leaves `inst` out (a copy the mid-end made for another block:
/// one is enough).
fn place(func: &mut Function, inst: Inst, to: Block, placed: &mut Vec<Inst>) -> Value {
    let ty = func.dfg.ctrl_typevar(inst);
    let same = placed.iter().copied().find(|&p| {
        func.dfg.ctrl_typevar(p) == ty
            && func.dfg.insts[p].eq(&func.dfg.insts[inst], &func.dfg.value_lists)
    });
    if let Some(p) = same {
        return func.dfg.first_result(p);
    }
    let last = func.layout.last_inst(to).expect("a block ends in a branch");
    func.layout.insert_inst(inst, last);
    placed.push(inst);
    func.dfg.first_result(inst)
}

/// The loop passes after the mid-end, in order (see the module doc): block parameters
/// that pass one value removed, [`hoist_in`], [`sink_in`].
pub(crate) fn tidy_loops(ctx: &mut Context, isa: &dyn TargetIsa) -> Result<(), String> {
    ctx.compute_cfg();
    ctx.compute_domtree();
    ctx.remove_constant_phis(isa)
        .map_err(|e| format!("{e:?}"))?;
    ctx.func.dfg.resolve_all_aliases();
    // Neither pass changes the control flow: one dominator tree and loop nest serve both.
    ctx.compute_loop_analysis();
    hoist_in(&mut ctx.func, &ctx.domtree, &ctx.loop_analysis);
    // The hoist makes a copy of an instruction placed twice an alias of the first: the
    // sink counts each use through the aliases, as a use of the value it resolves to.
    sink_in(&mut ctx.func, &ctx.domtree, &ctx.loop_analysis);
    raise_in(&mut ctx.func);
    Ok(())
}

/// Whether [`raise_in`] may move an instruction of kind `op`: arithmetic and selects,
/// whose place sets where their result and arguments are live (not a compare, an
/// extension or a narrowing, which lowering folds into the branch, load or use beside
/// them wherever they stand).
fn raisable(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Iadd
            | Opcode::Isub
            | Opcode::Imul
            | Opcode::Band
            | Opcode::Bor
            | Opcode::Bxor
            | Opcode::Bnot
            | Opcode::Ineg
            | Opcode::Ishl
            | Opcode::Ushr
            | Opcode::Sshr
            | Opcode::Rotl
            | Opcode::Rotr
            | Opcode::Umin
            | Opcode::Umax
            | Opcode::Smin
            | Opcode::Smax
            | Opcode::Select
    )
}

/// The values used outside the block that defines them (branch arguments included).
fn used_elsewhere(func: &Function) -> SecondaryMap<Value, bool> {
    let mut elsewhere = SecondaryMap::new();
    let home = |v: Value| match func.dfg.value_def(v) {
        ValueDef::Result(inst, _) => func.layout.inst_block(inst),
        ValueDef::Param(block, _) => Some(block),
        _ => None,
    };
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                let v = func.dfg.resolve_aliases(v);
                if home(v) != Some(block) {
                    elsewhere[v] = true;
                }
            }
        }
    }
    elsewhere
}

/// For the instructions `order` of one block: each one's index, and for each value they
/// use, how many of them use it (added to what `users` holds) and the last of them.
fn count_users(
    func: &Function,
    order: &[Inst],
    index: &mut SecondaryMap<Inst, usize>,
    users: &mut SecondaryMap<Value, (u32, Option<Inst>)>,
) {
    for (k, &inst) in order.iter().enumerate() {
        index[inst] = k;
        let mut seen: Vec<Value> = Vec::new();
        for v in func.dfg.inst_values(inst) {
            let v = func.dfg.resolve_aliases(v);
            if !seen.contains(&v) {
                seen.push(v);
                let u = &mut users[v];
                *u = (u.0 + 1, Some(inst));
            }
        }
    }
}

/// Moves each link of a chain (see the module doc) up its block to just after the last
/// of its arguments made there; returns how many instructions moved. A link is a
/// raisable instruction with an argument that the same operation made in the block and
/// only it uses, or whose result only the same operation uses: one value of the chain
/// is live at every point of the block before and after, and each input dies at its
/// link instead of waiting for the chain.
fn raise_in(func: &mut Function) -> usize {
    let elsewhere = used_elsewhere(func);
    let blocks: Vec<Block> = func.layout.blocks().collect();
    let mut moved = 0;
    // Per block: each instruction's index in `order`, and for each value how many of the
    // block's instructions use it and the last of them. Linear in the block's size but
    // for the indexes a move shifts.
    let mut index: SecondaryMap<Inst, usize> = SecondaryMap::new();
    let mut users: SecondaryMap<Value, (u32, Option<Inst>)> = SecondaryMap::new();
    for block in blocks {
        let mut order: Vec<Inst> = func.layout.block_insts(block).collect();
        count_users(func, &order, &mut index, &mut users);
        let mut i = 0;
        while i < order.len() {
            let inst = order[i];
            i += 1;
            if !raisable(func.dfg.insts[inst].opcode()) || func.dfg.inst_results(inst).len() != 1 {
                continue;
            }
            let args: Vec<Value> = func
                .dfg
                .inst_args(inst)
                .iter()
                .map(|&a| func.dfg.resolve_aliases(a))
                .collect();
            // Just after the last argument made in this block (its parameters are there
            // from the start).
            let at = |v: Value| match func.dfg.value_def(v) {
                ValueDef::Result(d, _) if func.layout.inst_block(d) == Some(block) => {
                    Some(index[d] + 1)
                }
                _ => None,
            };
            let to = args.iter().filter_map(|&a| at(a)).max().unwrap_or(0);
            if to + 1 >= i {
                continue;
            }
            // A link of a chain: an argument is the result of the same operation used
            // only here, or the result is used only by the same operation.
            let op = func.dfg.insts[inst].opcode();
            let only_user = |v: Value| match users[v] {
                (1, user) if !elsewhere[v] => user,
                _ => None,
            };
            let after = args.iter().any(|&a| match func.dfg.value_def(a) {
                ValueDef::Result(d, _) => {
                    func.dfg.insts[d].opcode() == op
                        && at(a).is_some()
                        && only_user(a) == Some(inst)
                }
                _ => false,
            });
            let before = only_user(func.dfg.first_result(inst))
                .is_some_and(|u| func.dfg.insts[u].opcode() == op);
            if !after && !before {
                continue;
            }
            order.remove(i - 1);
            order.insert(to, inst);
            for (k, &x) in order.iter().enumerate().take(i).skip(to) {
                index[x] = k;
            }
            func.layout.remove_inst(inst);
            func.layout.insert_inst(inst, order[to + 1]);
            moved += 1;
        }
    }
    moved
}

/// `func`'s dominator tree and loop nest.
#[cfg(test)]
pub(crate) fn analyses(func: &Function) -> (DominatorTree, LoopAnalysis) {
    let cfg = cranelift_codegen::flowgraph::ControlFlowGraph::with_function(func);
    let domtree = DominatorTree::with_function(func, &cfg);
    let mut loops = LoopAnalysis::new();
    loops.compute(func, &cfg, &domtree);
    (domtree, loops)
}

/// [`hoist_in`] with `func`'s own analyses.
#[cfg(test)]
fn hoist_invariants(func: &mut Function) -> usize {
    let (domtree, loops) = analyses(func);
    hoist_in(func, &domtree, &loops)
}

/// How many times [`hoist_in`] goes over one loop at most.
const LOOP_ROUNDS: usize = 3;

/// Each value's users in `func`, by instruction (once per instruction).
fn users_of(func: &Function) -> SecondaryMap<Value, Vec<Inst>> {
    let mut users: SecondaryMap<Value, Vec<Inst>> = SecondaryMap::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                let v = func.dfg.resolve_aliases(v);
                if users[v].last() != Some(&inst) {
                    users[v].push(inst);
                }
            }
        }
    }
    users
}

/// Moves loop-invariant values out of their loops (see the module doc), given `func`'s
/// dominator tree and loop nest; returns how many instructions moved.
fn hoist_in(func: &mut Function, domtree: &DominatorTree, loops: &LoopAnalysis) -> usize {
    let rpo: Vec<Block> = domtree.cfg_rpo().copied().collect();
    // Innermost first: what leaves an inner loop may then leave its parent.
    let mut order: Vec<Loop> = loops.loops().collect();
    let depth = |lp: Loop| {
        let mut d = 0;
        let mut at = loops.loop_parent(lp);
        while let Some(p) = at {
            d += 1;
            at = loops.loop_parent(p);
        }
        d
    };
    order.sort_by_key(|&lp| std::cmp::Reverse(depth(lp)));
    let mut users = users_of(func);
    let mut moved_values: BTreeSet<Value> = BTreeSet::new();
    let mut moved = 0;
    for lp in order {
        let header = loops.loop_header(lp);
        let Some(to) = domtree.idom(header).filter(|&to| !loops.is_in_loop(to, lp)) else {
            continue;
        };
        let blocks: Vec<Block> = rpo
            .iter()
            .copied()
            .filter(|&b| loops.is_in_loop(b, lp))
            .collect();
        let mut out = LoopExit {
            lp,
            to,
            loops,
            domtree,
            copies: BTreeMap::new(),
            placed: Vec::new(),
        };
        // A value that leaves may leave another's argument with no other use in the
        // loop (`bits` fed `1 << bits` and `32 - bits`): one more round then.
        for _ in 0..LOOP_ROUNDS {
            let before = moved;
            for &block in &blocks {
                let insts: Vec<Inst> = func.layout.block_insts(block).collect();
                for inst in insts {
                    moved += usize::from(out.regroup(func, inst, &mut users));
                    if out.hoistable(func, inst, &users, &moved_values) {
                        moved_values.insert(out.move_out(func, inst));
                        moved += 1;
                    }
                }
            }
            if moved == before {
                break;
            }
        }
    }
    moved
}

/// [`hoist_in`] on one loop: where its invariant values go (`to`, the block that
/// immediately dominates its header), the constants copied there (by the original) and
/// the instructions moved there.
struct LoopExit<'a> {
    lp: Loop,
    to: Block,
    loops: &'a LoopAnalysis,
    domtree: &'a DominatorTree,
    copies: BTreeMap<Inst, Value>,
    placed: Vec<Inst>,
}

impl LoopExit<'_> {
    /// Whether `v` is defined outside the loop (`None`: in no block).
    fn outside(&self, func: &Function, v: Value) -> Option<bool> {
        def_block(func, v).map(|b| !self.loops.is_in_loop(b, self.lp))
    }

    /// Whether nothing but `inst` in the loop uses `a`, and nothing after it: every use
    /// outside is in a block that runs before the loop (dominates its head) and in no
    /// loop holding it. Moved out, `inst`'s result is then live where `a` was.
    fn dies_in(&self, func: &Function, inst: Inst, users: &[Inst]) -> bool {
        users.iter().all(|&u| {
            let Some(b) = func.layout.inst_block(u) else {
                return true;
            };
            if self.loops.is_in_loop(b, self.lp) {
                return u == inst;
            }
            let mut up = self.loops.loop_parent(self.lp);
            while let Some(p) = up {
                if self.loops.is_in_loop(b, p) {
                    return false;
                }
                up = self.loops.loop_parent(p);
            }
            self.domtree
                .block_dominates(b, self.loops.loop_header(self.lp))
        })
    }

    /// The regroup of the module doc: `x + (u + w)` as `(x + u) + w`, `x + u` made in
    /// `to`, when `inst` is a load or store with such an address.
    fn regroup(
        &mut self,
        func: &mut Function,
        inst: Inst,
        users: &mut SecondaryMap<Value, Vec<Inst>>,
    ) -> bool {
        let outside = |func: &Function, v: Value| self.outside(func, v);
        let Some((x, u, w)) = regroupable(func, inst, &outside) else {
            return false;
        };
        let fresh = func.dfg.make_inst(InstructionData::Binary {
            opcode: Opcode::Iadd,
            args: [x, u],
        });
        func.dfg.make_inst_results(fresh, types::I64);
        let sum = place(func, fresh, self.to, &mut self.placed);
        let addr = FuncCursor::new(func).at_inst(inst).ins().iadd(sum, w);
        match &mut func.dfg.insts[inst] {
            InstructionData::Load { arg, .. } => *arg = addr,
            InstructionData::Store { args, .. } => args[1] = addr,
            _ => unreachable!("regroupable is a load or a store"),
        }
        let add = func.dfg.value_def(addr).unwrap_inst();
        for (v, user) in [(x, fresh), (u, fresh), (sum, add), (w, add), (addr, inst)] {
            users[v].push(user);
        }
        true
    }

    /// Whether `inst` moves out: pure, every argument a constant or defined outside
    /// (not all constants); and, for the kinds the mid-end keeps beside their uses
    /// ([`cheap`]), an argument this pass moved, or no argument that stays live in
    /// the loop without it (not for a compare, which its branch fuses).
    fn hoistable(
        &self,
        func: &Function,
        inst: Inst,
        users: &SecondaryMap<Value, Vec<Inst>>,
        moved_values: &BTreeSet<Value>,
    ) -> bool {
        let op = func.dfg.insts[inst].opcode();
        if op == Opcode::Iconst || !pure(op) || func.dfg.inst_results(inst).len() != 1 {
            return false;
        }
        let args = func.dfg.inst_args(inst);
        let invariant = args
            .iter()
            .all(|&a| constant(func, a).is_some() || self.outside(func, a) == Some(true));
        if !invariant || args.iter().all(|&a| constant(func, a).is_some()) {
            return false;
        }
        !cheap(func, inst)
            || args.iter().any(|a| moved_values.contains(a))
            || (op != Opcode::Icmp
                && args
                    .iter()
                    .all(|&a| constant(func, a).is_some() || self.dies_in(func, inst, &users[a])))
    }

    /// Moves `inst` to the end of `to` (its constants copied there, or merged with an
    /// instruction placed there that computes the same); returns its old result.
    fn move_out(&mut self, func: &mut Function, inst: Inst) -> Value {
        let last = func
            .layout
            .last_inst(self.to)
            .expect("a block ends in a branch");
        for i in 0..func.dfg.inst_args(inst).len() {
            let a = func.dfg.inst_args(inst)[i];
            let Some(c) = constant(func, a).filter(|_| self.outside(func, a) != Some(true)) else {
                continue;
            };
            let copy = *self.copies.entry(c).or_insert_with(|| {
                let clone = func.dfg.clone_inst(c);
                func.layout.insert_inst(clone, last);
                func.dfg.first_result(clone)
            });
            func.dfg.inst_args_mut(inst)[i] = copy;
        }
        func.layout.remove_inst(inst);
        let result = func.dfg.first_result(inst);
        let kept = place(func, inst, self.to, &mut self.placed);
        if kept != result {
            func.dfg.detach_inst_results(inst);
            func.dfg.change_to_alias(result, kept);
        }
        result
    }
}

/// Removes every pure instruction whose result nothing uses (the regroup's old sums),
/// and then the ones only those used, so that none keeps its arguments in a loop.
fn remove_dead(func: &mut Function) {
    remove_dead_and(func, |_| false);
}

/// [`remove_dead`], counting as pure too each instruction `also` accepts (a division
/// whose guarded divisor cannot be zero, which Cranelift keeps for its trap).
pub(crate) fn remove_dead_and(func: &mut Function, also: impl Fn(Inst) -> bool) {
    let mut uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    let mut all = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                uses[func.dfg.resolve_aliases(v)] += 1;
            }
            all.push(inst);
        }
    }
    let dead = |func: &Function, uses: &SecondaryMap<Value, u32>, inst: Inst| {
        (pure(func.dfg.insts[inst].opcode()) || also(inst))
            && !func.dfg.inst_results(inst).is_empty()
            && func.dfg.inst_results(inst).iter().all(|&r| uses[r] == 0)
    };
    let mut work: Vec<Inst> = all.into_iter().filter(|&i| dead(func, &uses, i)).collect();
    while let Some(inst) = work.pop() {
        if func.layout.inst_block(inst).is_none() {
            continue;
        }
        func.layout.remove_inst(inst);
        let args: Vec<Value> = func.dfg.inst_values(inst).collect();
        for v in args {
            let v = func.dfg.resolve_aliases(v);
            uses[v] = uses[v].saturating_sub(1);
            if let ValueDef::Result(def, _) = func.dfg.value_def(v) {
                if func.layout.inst_block(def).is_some() && dead(func, &uses, def) {
                    work.push(def);
                }
            }
        }
    }
}

/// Where a value defined in block `def` of loop `lp` and used in `uses` (all outside
/// `lp`) is made instead: the nearest block dominating every use, then out of every
/// loop that does not hold `def`; none when that block is `def`, is in `lp`, or is not
/// dominated by `def`.
fn exit_block(
    def: Block,
    lp: Loop,
    uses: &[Block],
    domtree: &DominatorTree,
    loops: &LoopAnalysis,
) -> Option<Block> {
    let mut to = *uses.first()?;
    while !uses.iter().all(|&b| domtree.block_dominates(to, b)) {
        to = domtree.idom(to)?;
    }
    while let Some(m) = loops.innermost_loop(to) {
        if loops.is_in_loop(def, m) {
            break;
        }
        to = domtree.idom(to)?;
    }
    let fits = to != def && !loops.is_in_loop(to, lp) && domtree.block_dominates(def, to);
    fits.then_some(to)
}

/// Moves a pure value computed in a loop but used only after leaving it to where it
/// is used (see the module doc), given `func`'s dominator tree and loop nest; returns
/// how many instructions moved.
fn sink_in(func: &mut Function, domtree: &DominatorTree, loops: &LoopAnalysis) -> usize {
    if loops.loops().next().is_none() {
        return 0;
    }
    remove_dead(func);
    // The instructions using each value: `(value, user)` pairs sorted by value.
    let mut users: Vec<(Value, Inst)> = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            users.extend(
                func.dfg
                    .inst_values(inst)
                    .map(|v| (func.dfg.resolve_aliases(v), inst)),
            );
        }
    }
    users.sort_unstable();
    let mut blocks: Vec<Block> = Vec::new();
    let order: Vec<Block> = domtree.cfg_postorder().to_vec();
    let mut moved = 0;
    for def in order {
        let Some(lp) = loops.innermost_loop(def) else {
            continue;
        };
        let insts: Vec<Inst> = func.layout.block_insts(def).collect();
        for inst in insts.into_iter().rev() {
            let op = func.dfg.insts[inst].opcode();
            if op == Opcode::Iconst || !pure(op) || func.dfg.inst_results(inst).len() != 1 {
                continue;
            }
            let result = func.dfg.first_result(inst);
            let from = users.partition_point(|&(v, _)| v < result);
            blocks.clear();
            blocks.extend(
                users[from..]
                    .iter()
                    .take_while(|&&(v, _)| v == result)
                    .filter_map(|&(_, u)| func.layout.inst_block(u)),
            );
            if blocks.is_empty() || blocks.iter().any(|&b| loops.is_in_loop(b, lp)) {
                continue;
            }
            let Some(to) = exit_block(def, lp, &blocks, domtree, loops) else {
                continue;
            };
            let first = func
                .layout
                .first_inst(to)
                .expect("a block ends in a branch");
            func.layout.remove_inst(inst);
            func.layout.insert_inst(inst, first);
            moved += 1;
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::condcodes::IntCC;
    use cranelift_codegen::ir::{AbiParam, MemFlagsData, Signature, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    use super::*;

    /// An empty function of three `i64`s returning one.
    fn three_args() -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        for _ in 0..3 {
            sig.params.push(AbiParam::new(types::I64));
        }
        sig.returns.push(AbiParam::new(types::I64));
        Function::with_name_signature(UserFuncName::default(), sig)
    }

    /// The host ISA at `opt_level` speed, as the JIT's module has it.
    fn speed() -> cranelift_codegen::isa::OwnedTargetIsa {
        crate::host_isa(&|e| panic!("{e}"), "speed").expect("the host ISA")
    }

    /// `func` after Cranelift's mid-end.
    fn after_mid_end(func: Function) -> Function {
        let mut ctx = Context::for_function(func);
        let mut plane = cranelift_codegen::control::ControlPlane::default();
        ctx.optimize(&*speed(), &mut plane)
            .expect("the mid-end runs");
        ctx.func
    }

    /// hashjoin's loops in small: for `j` in `0..n`, for `i` in `0..n`,
    /// `s += (i + j) & ((1 << bits) - 1)` and `s += p + 64`, and `s += n / bits` when
    /// `alt` (a division of invariants, which can trap and must stay where it is).
    /// Returns the function after Cranelift's mid-end, and its blocks: entry, outer
    /// loop's head, inner loop's body.
    fn probe_loops(alt: bool) -> (Function, [Block; 3]) {
        let mut func = three_args();
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let [entry, outer, inner, body, next, exit] = [(); 6].map(|()| b.create_block());
        b.append_block_params_for_function_params(entry);
        let j = b.append_block_param(outer, types::I64);
        let s = b.append_block_param(outer, types::I64);
        let i = b.append_block_param(inner, types::I64);
        let si = b.append_block_param(inner, types::I64);
        let out = b.append_block_param(exit, types::I64);
        b.switch_to_block(entry);
        let [bits, n, p] = [0, 1, 2].map(|k| b.block_params(entry)[k]);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(outer, &[zero.into(), zero.into()]);
        b.switch_to_block(outer);
        let done = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, j, n);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins()
            .brif(done, exit, &[s.into()], inner, &[zero.into(), s.into()]);
        b.switch_to_block(inner);
        let done = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, n);
        b.ins().brif(done, next, &[], body, &[]);
        b.switch_to_block(body);
        let i1 = b.ins().iadd_imm_s(i, 1);
        let ij = b.ins().iadd(i, j);
        let one = b.ins().iconst(types::I64, 1);
        let slots = b.ins().ishl(one, bits);
        let mask = b.ins().iadd_imm_s(slots, -1);
        let slot = b.ins().band(ij, mask);
        let mut s1 = b.ins().iadd(si, slot);
        let base = b.ins().iadd_imm_s(p, 64);
        s1 = b.ins().iadd(s1, base);
        if alt {
            let q = b.ins().udiv(n, bits);
            s1 = b.ins().iadd(s1, q);
        }
        b.ins().jump(inner, &[i1.into(), s1.into()]);
        b.switch_to_block(next);
        let j1 = b.ins().iadd_imm_s(j, 1);
        b.ins().jump(outer, &[j1.into(), si.into()]);
        b.switch_to_block(exit);
        b.ins().return_(&[out]);
        b.seal_all_blocks();
        b.finalize(speed().frontend_config());
        (after_mid_end(func), [entry, outer, body])
    }

    /// The blocks holding an instruction with `op`, in layout order.
    fn blocks_of(func: &Function, op: Opcode) -> Vec<Block> {
        func.layout
            .blocks()
            .filter(|&b| {
                func.layout
                    .block_insts(b)
                    .any(|i| func.dfg.insts[i].opcode() == op)
            })
            .collect()
    }

    /// An unrolled reduction as the mid-end leaves it (stats64's group): four loads,
    /// then a sum and a maximum of them, each chain made after every load, so all four
    /// loaded values are live at once. After [`raise_in`] each link follows its load,
    /// so no chain uses a loaded value after the next load, and every value is the same
    /// instruction's; a shift of a load that is no link of a chain stays where it was.
    #[test]
    fn a_reduction_chain_is_made_as_its_inputs_arrive() {
        let mut func = three_args();
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let [p, s0, m0] = [0, 1, 2].map(|k| b.block_params(entry)[k]);
        let flags = MemFlagsData::trusted().with_readonly();
        let loads: Vec<Value> = (0..4)
            .map(|k| b.ins().load(types::I64, flags, p, 8 * k))
            .collect();
        let (mut s, mut m) = (s0, m0);
        for &l in &loads {
            s = b.ins().iadd(s, l);
        }
        for &l in &loads {
            m = b.ins().umax(m, l);
        }
        // No link of a chain: stays after both.
        let shifted = b.ins().ushr_imm_u(loads[0], 8);
        let out = b.ins().bxor(s, m);
        let out = b.ins().bxor(out, shifted);
        b.ins().return_(&[out]);
        b.seal_all_blocks();
        b.finalize(speed().frontend_config());
        let before = func.display().to_string();
        // Whether each load's last use by a chain comes before the next load.
        let interleaved = |func: &Function| {
            let order: Vec<Inst> = func.layout.block_insts(entry).collect();
            let at = |v: Value| {
                let ValueDef::Result(i, _) = func.dfg.value_def(v) else {
                    panic!("a load's result")
                };
                order.iter().position(|&x| x == i).expect("in the block")
            };
            loads.windows(2).all(|w| {
                order
                    .iter()
                    .enumerate()
                    .filter(|&(_, &x)| {
                        matches!(func.dfg.insts[x].opcode(), Opcode::Iadd | Opcode::Umax)
                            && func.dfg.inst_args(x).contains(&w[0])
                    })
                    .all(|(k, _)| k < at(w[1]))
            })
        };
        assert!(!interleaved(&func));
        // Every link but the last sum's, which already follows the last load, and the
        // first `bxor` (a chain of two `bxor`s), which moves above the shift.
        assert_eq!(raise_in(&mut func), 8, "{}", func.display());
        assert!(interleaved(&func), "{}", func.display());
        let ValueDef::Result(shift, _) = func.dfg.value_def(shifted) else {
            panic!("an instruction's result")
        };
        let at = |i: Inst| func.layout.block_insts(entry).position(|x| x == i);
        let last_umax = func
            .layout
            .block_insts(entry)
            .rfind(|&i| func.dfg.insts[i].opcode() == Opcode::Umax)
            .expect("the maximum's chain");
        assert!(at(shift) > at(last_umax), "{}", func.display());
        // Only the order changed.
        let sorted = |text: &str| {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        assert_eq!(sorted(&func.display().to_string()), sorted(&before));
    }

    #[test]
    fn a_value_computed_from_a_rematerialized_constant_leaves_its_loop() {
        let (mut func, [entry, outer, body]) = probe_loops(false);
        let adds = |func: &Function| {
            func.layout
                .block_insts(body)
                .filter(|&i| func.dfg.insts[i].opcode() == Opcode::Iadd)
                .count()
        };
        // The mid-end left the shift in the outer loop (its `1` rematerialized there)
        // and made the mask again in the inner one (`+ -1` rematerialized).
        assert_eq!(blocks_of(&func, Opcode::Ishl), [outer]);
        assert_eq!(adds(&func), 6);
        // The shift, the mask, and the inner loop's copy of the mask, which becomes
        // the first one.
        assert_eq!(hoist_invariants(&mut func), 3, "{}", func.display());
        assert_eq!(blocks_of(&func, Opcode::Ishl), [entry]);
        assert_eq!(adds(&func), 5);
        let band = func
            .layout
            .block_insts(body)
            .find(|&i| func.dfg.insts[i].opcode() == Opcode::Band)
            .expect("the inner loop still masks");
        let mask = func.dfg.resolve_aliases(func.dfg.inst_args(band)[1]);
        assert_eq!(def_block(&func, mask), Some(entry));
        // `p + 64` stays in the outer loop, where the mid-end put it.
        assert!(blocks_of(&func, Opcode::Iadd).contains(&outer));
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        cranelift_codegen::verify_function(&func, &*isa).expect("still valid IR");
    }

    /// `s += *(host + (p + i))` for `i` in `0..n` (grep's scan: a host delta, a
    /// pointer, an index), after the mid-end; returns it and its entry and body blocks.
    fn scan_loop() -> (Function, [Block; 2]) {
        let mut func = three_args();
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let [entry, head, body, exit] = [(); 4].map(|()| b.create_block());
        b.append_block_params_for_function_params(entry);
        let i = b.append_block_param(head, types::I64);
        let s = b.append_block_param(head, types::I64);
        let out = b.append_block_param(exit, types::I64);
        b.switch_to_block(entry);
        let [host, p, n] = [0, 1, 2].map(|k| b.block_params(entry)[k]);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(head, &[zero.into(), zero.into()]);
        b.switch_to_block(head);
        let done = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, n);
        b.ins().brif(done, exit, &[s.into()], body, &[]);
        b.switch_to_block(body);
        let pi = b.ins().iadd(p, i);
        let addr = b.ins().iadd(host, pi);
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        let byte = b.ins().uload8(types::I64, fixed, addr, 64);
        let s1 = b.ins().iadd(s, byte);
        let i1 = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(head, &[i1.into(), s1.into()]);
        b.switch_to_block(exit);
        b.ins().return_(&[out]);
        b.seal_all_blocks();
        b.finalize(speed().frontend_config());
        (after_mid_end(func), [entry, body])
    }

    #[test]
    fn an_address_adds_its_invariant_terms_before_the_loop() {
        let (mut func, [entry, body]) = scan_loop();
        let load = || {
            func.layout
                .block_insts(body)
                .find(|&i| func.dfg.insts[i].opcode() == Opcode::Uload8)
                .expect("the loop loads")
        };
        let sum_args = |func: &Function, v: Value| match func.dfg.value_def(v) {
            ValueDef::Result(def, 0) => match func.dfg.insts[def] {
                InstructionData::Binary {
                    opcode: Opcode::Iadd,
                    args,
                } => args,
                ref other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let InstructionData::Load { arg, .. } = func.dfg.insts[load()] else {
            panic!("a load");
        };
        // As built: the host delta plus a sum made in the loop.
        assert_eq!(def_block(&func, sum_args(&func, arg)[1]), Some(body));
        assert_eq!(hoist_invariants(&mut func), 1, "{}", func.display());
        let load = func
            .layout
            .block_insts(body)
            .find(|&i| func.dfg.insts[i].opcode() == Opcode::Uload8)
            .expect("the loop loads");
        let InstructionData::Load { arg, offset, .. } = func.dfg.insts[load] else {
            panic!("a load");
        };
        assert_eq!(i32::from(offset), 64);
        let [outer, index] = sum_args(&func, arg);
        let params = func.dfg.block_params(entry).to_vec();
        assert_eq!(def_block(&func, outer), Some(entry));
        assert_eq!(sum_args(&func, outer), [params[0], params[1]]);
        assert_eq!(def_block(&func, index).map(|b| b != entry), Some(true));
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        cranelift_codegen::verify_function(&func, &*isa).expect("still valid IR");
    }

    /// hashjoin's key loop as the mid-end left it, built directly: `bits` (a
    /// parameter) is narrowed and taken from 32 inside the loop, and shifted into a
    /// mask there too: `s += (i >> (32 - bits)) & ((1 << bits) - 1)` for `i` in `0..n`.
    /// With `after`, the function also returns `s + bits`, so `bits` is live after the
    /// loop. Returns it and its entry and body blocks.
    fn shift_loop(after: bool) -> (Function, [Block; 2]) {
        let mut func = three_args();
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let [entry, head, body, exit] = [(); 4].map(|()| b.create_block());
        b.append_block_params_for_function_params(entry);
        let i = b.append_block_param(head, types::I64);
        let s = b.append_block_param(head, types::I64);
        b.switch_to_block(entry);
        let [bits, n] = [0, 1].map(|k| b.block_params(entry)[k]);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(head, &[zero.into(), zero.into()]);
        b.switch_to_block(head);
        let done = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, n);
        b.ins().brif(done, exit, &[], body, &[]);
        b.switch_to_block(body);
        let narrow = b.ins().ireduce(types::I32, bits);
        let c32 = b.ins().iconst(types::I32, 32);
        let shift = b.ins().isub(c32, narrow);
        let i32 = b.ins().ireduce(types::I32, i);
        let shifted = b.ins().ushr(i32, shift);
        let wide = b.ins().uextend(types::I64, shifted);
        let one = b.ins().iconst(types::I64, 1);
        let slots = b.ins().ishl(one, bits);
        let mask = b.ins().iadd_imm_s(slots, -1);
        let t = b.ins().band(wide, mask);
        let s1 = b.ins().iadd(s, t);
        let i1 = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(head, &[i1.into(), s1.into()]);
        b.switch_to_block(exit);
        let out = if after { b.ins().iadd(s, bits) } else { s };
        b.ins().return_(&[out]);
        b.seal_all_blocks();
        b.finalize(speed().frontend_config());
        (func, [entry, body])
    }

    /// `32 - bits` leaves the loop once the shift has left it and nothing else there
    /// uses `bits` (a second round); not when `bits` is live after the loop, where
    /// moving it out would hold both `bits` and `32 - bits` across the loop.
    #[test]
    fn a_narrowed_argument_the_loop_uses_once_leaves_with_its_use() {
        let (mut func, [entry, body]) = shift_loop(false);
        // The shift, the mask (made from a moved value), then the narrowing of
        // `bits` and `32 - bits`.
        assert_eq!(hoist_invariants(&mut func), 4, "{}", func.display());
        assert_eq!(blocks_of(&func, Opcode::Isub), [entry]);
        assert_eq!(blocks_of(&func, Opcode::Ishl), [entry]);
        // The index's narrowing stays.
        assert_eq!(blocks_of(&func, Opcode::Ireduce), [entry, body]);
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        cranelift_codegen::verify_function(&func, &*isa).expect("still valid IR");

        let (mut func, [entry, body]) = shift_loop(true);
        assert_eq!(hoist_invariants(&mut func), 2, "{}", func.display());
        assert_eq!(blocks_of(&func, Opcode::Ishl), [entry]);
        assert_eq!(blocks_of(&func, Opcode::Isub), [body]);
        cranelift_codegen::verify_function(&func, &*isa).expect("still valid IR");
    }

    #[test]
    fn a_division_stays_in_its_loop() {
        let (mut func, [.., body]) = probe_loops(true);
        assert_eq!(blocks_of(&func, Opcode::Udiv), [body]);
        hoist_invariants(&mut func);
        assert_eq!(blocks_of(&func, Opcode::Udiv), [body]);
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        cranelift_codegen::verify_function(&func, &*isa).expect("still valid IR");
    }

    /// grep's scan in small, after the mid-end: for `i` in `0..n`, load the byte at
    /// `d + (p + i) + 64`; when it is a newline, leave with `(p + i) * 7` (the exit path
    /// makes the same sum, which the mid-end merges with the loop's). With `phi`, the
    /// host delta `d` is a parameter of the loop's head, passed back as `d + 0` (one
    /// value around the loop once the mid-end has simplified it). Returns the function
    /// and its loop body and exit path.
    fn exit_scan(phi: bool) -> (Function, [Block; 2]) {
        let mut func = three_args();
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let [entry, head, body, next, found, exit] = [(); 6].map(|()| b.create_block());
        b.append_block_params_for_function_params(entry);
        let i = b.append_block_param(head, types::I64);
        let s = b.append_block_param(head, types::I64);
        let d = b.append_block_param(head, types::I64);
        let out = b.append_block_param(exit, types::I64);
        b.switch_to_block(entry);
        let [host, p, n] = [0, 1, 2].map(|k| b.block_params(entry)[k]);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(head, &[zero.into(), zero.into(), host.into()]);
        b.switch_to_block(head);
        let done = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, n);
        b.ins().brif(done, exit, &[s.into()], body, &[]);
        b.switch_to_block(body);
        let pi = b.ins().iadd(p, i);
        let base = if phi { d } else { host };
        let addr = b.ins().iadd(base, pi);
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        let byte = b.ins().uload8(types::I64, fixed, addr, 64);
        let newline = b.ins().icmp_imm_s(IntCC::Equal, byte, 10);
        b.ins().brif(newline, found, &[], next, &[]);
        b.switch_to_block(next);
        let s1 = b.ins().iadd(s, byte);
        let i1 = b.ins().iadd_imm_s(i, 1);
        let d1 = b.ins().iadd_imm_s(d, 0);
        b.ins().jump(head, &[i1.into(), s1.into(), d1.into()]);
        b.switch_to_block(found);
        let again = b.ins().iadd(p, i);
        let r = b.ins().imul_imm_s(again, 7);
        b.ins().return_(&[r]);
        b.switch_to_block(exit);
        b.ins().return_(&[out]);
        b.seal_all_blocks();
        b.finalize(speed().frontend_config());
        (after_mid_end(func), [body, found])
    }

    #[test]
    fn a_sum_only_an_exit_path_uses_is_made_there() {
        for phi in [false, true] {
            let (func, [body, found]) = exit_scan(phi);
            let adds = |func: &Function, block: Block| {
                func.layout
                    .block_insts(block)
                    .filter(|&i| func.dfg.insts[i].opcode() == Opcode::Iadd)
                    .count()
            };
            // As the mid-end leaves it: `p + i` and the address made in the body, the
            // exit path reusing the first.
            assert_eq!((adds(&func, body), adds(&func, found)), (2, 0), "{phi}");
            let mut ctx = Context::for_function(func);
            tidy_loops(&mut ctx, &*speed()).expect("the loop passes run");
            let func = &ctx.func;
            // The body adds the index to a sum made before the loop, and `p + i` is
            // made on the exit path only.
            assert_eq!(
                (adds(func, body), adds(func, found)),
                (1, 1),
                "{phi}: {}",
                func.display()
            );
            let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
            cranelift_codegen::verify_function(func, &*isa).expect("still valid IR");
        }
    }
}
