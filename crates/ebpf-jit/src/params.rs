//! Merging of block parameters that always hold equal values, between translation and
//! Cranelift's own passes.
//!
//! eBPF code copies registers a lot (`r3 = r7`, `r6 = r4` before a loop's back-edge),
//! and each copy leaves two variables holding one value. The SSA builder gives each of
//! them its own parameter at every join, and Cranelift keeps both (its constant-phi
//! pass only removes parameters with a single value flowing in), so a loop carries the
//! value in two registers and spills sooner.
//!
//! Two parameters `p` and `q` of a block are merged when every edge into the block
//! passes them the same value, or passes `(p, q)` or `(q, p)` themselves. That is sound
//! by induction over the block's entries: the first entry comes over an edge of the
//! first kind, and an edge of the second kind is taken only after an earlier entry, at
//! which `p == q` held. "The same value" is one SSA value, or two `iconst`s of one type
//! and immediate. Merging changes no computed value, so it cannot change a result, a
//! trap or a fuel count.

use std::collections::{BTreeMap, BTreeSet};

use cranelift_codegen::ir::{
    Block, BlockArg, Function, Inst, InstructionData, Opcode, Value, ValueDef,
};

/// Most passes over the function: a merge in one block can make two parameters of a
/// block it jumps to equal, so a few rounds catch chains; each round is linear in the
/// edges times the parameter pairs.
const ROUNDS_MAX: usize = 4;

/// Merges the equal parameters of every block of `func` but the entry.
pub(crate) fn merge_equal_params(func: &mut Function) {
    let entry = func.layout.entry_block();
    for _ in 0..ROUNDS_MAX {
        let edges = incoming_edges(func);
        let mut changed = false;
        let blocks: Vec<Block> = func.layout.blocks().collect();
        for block in blocks {
            if Some(block) == entry {
                continue;
            }
            let Some(incoming) = edges.get(&block) else {
                continue;
            };
            while let Some((i, j)) = equal_pair(func, block, incoming) {
                merge(func, block, incoming, i, j);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Whether `inst` only computes its results (no memory access, trap, call or control
/// flow), so that it can go when nothing uses them.
fn is_pure(func: &Function, inst: Inst) -> bool {
    let op = func.dfg.insts[inst].opcode();
    !(op.is_terminator()
        || op.is_branch()
        || op.is_call()
        || op.can_load()
        || op.can_store()
        || op.can_trap()
        || op.other_side_effects())
}

/// Removes block parameters whose value nothing needs, and the pure instructions only
/// they needed.
///
/// The SSA builder gives a block a parameter for every register read on some path
/// below it, including reads that only feed a `select` of an if-conversion or the
/// argument of another such parameter; a register computed in a loop and never read
/// after it still travels around the back-edge. Cranelift removes dead pure
/// instructions but not dead parameters, so these cost a register (or a spill) in every
/// loop they cross.
///
/// A value is needed when an instruction that is not pure uses it (a store, a load's
/// address, a branch condition, a return value, a call argument), when a needed pure
/// instruction uses it, or when it is passed to a needed parameter. Everything else is
/// removed; no removed instruction has an effect, so no result, trap or fuel count
/// changes.
pub(crate) fn remove_dead_params(func: &mut Function) {
    let entry = func.layout.entry_block();
    let edges = incoming_edges(func);
    let mut needed: BTreeSet<Value> = BTreeSet::new();
    let mut work: Vec<Value> = Vec::new();
    let need = |v: Value, needed: &mut BTreeSet<Value>, work: &mut Vec<Value>| {
        if needed.insert(v) {
            work.push(v);
        }
    };
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if !is_pure(func, inst) {
                for &a in func.dfg.inst_args(inst) {
                    need(func.dfg.resolve_aliases(a), &mut needed, &mut work);
                }
            }
        }
    }
    while let Some(v) = work.pop() {
        match func.dfg.value_def(v) {
            ValueDef::Result(inst, _) => {
                for &a in func.dfg.inst_args(inst) {
                    need(func.dfg.resolve_aliases(a), &mut needed, &mut work);
                }
            }
            ValueDef::Param(block, i) => {
                if Some(block) == entry {
                    continue;
                }
                for &edge in edges.get(&block).map_or(&[][..], |e| &e[..]) {
                    let Some(args) = edge_args(func, edge) else {
                        // An argument that is not a plain value: keep everything.
                        return;
                    };
                    need(args[i], &mut needed, &mut work);
                }
            }
            _ => {}
        }
    }

    let blocks: Vec<Block> = func.layout.blocks().collect();
    for &block in &blocks {
        if Some(block) == entry {
            continue;
        }
        let params = func.dfg.block_params(block).to_vec();
        for (j, p) in params.iter().enumerate().rev() {
            if needed.contains(p) {
                continue;
            }
            for &(inst, k) in edges.get(&block).map_or(&[][..], |e| &e[..]) {
                let dfg = &mut func.dfg;
                let dests = dfg.insts[inst]
                    .branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables);
                dests[k].remove(j, &mut dfg.value_lists);
            }
            func.dfg.remove_block_param(*p);
        }
    }
    for &block in &blocks {
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        for inst in insts {
            let dead = is_pure(func, inst)
                && func
                    .dfg
                    .inst_results(inst)
                    .iter()
                    .all(|r| !needed.contains(r));
            if dead {
                func.layout.remove_inst(inst);
            }
        }
    }
}

/// Every edge into each block: the branch and the index of its destination.
fn incoming_edges(func: &Function) -> BTreeMap<Block, Vec<(Inst, usize)>> {
    let mut edges: BTreeMap<Block, Vec<(Inst, usize)>> = BTreeMap::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let dests = func.dfg.insts[inst]
                .branch_destination(&func.dfg.jump_tables, &func.dfg.exception_tables);
            for (k, call) in dests.iter().enumerate() {
                edges
                    .entry(call.block(&func.dfg.value_lists))
                    .or_default()
                    .push((inst, k));
            }
        }
    }
    edges
}

/// The arguments edge `(inst, k)` passes, or `None` if one is not a plain value.
fn edge_args(func: &Function, (inst, k): (Inst, usize)) -> Option<Vec<Value>> {
    let dests =
        func.dfg.insts[inst].branch_destination(&func.dfg.jump_tables, &func.dfg.exception_tables);
    dests[k]
        .args(&func.dfg.value_lists)
        .map(|a| match a {
            BlockArg::Value(v) => Some(func.dfg.resolve_aliases(v)),
            _ => None,
        })
        .collect()
}

/// Whether `a` and `b` are known to be equal wherever both are defined.
fn same_value(func: &Function, a: Value, b: Value) -> bool {
    if a == b {
        return true;
    }
    let imm = |v: Value| {
        let inst = func.dfg.value_def(v).inst()?;
        match func.dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => Some((func.dfg.value_type(v), imm.bits())),
            _ => None,
        }
    };
    matches!((imm(a), imm(b)), (Some(x), Some(y)) if x == y)
}

/// The first pair of parameters of `block` that are equal on every edge (see the
/// module doc).
fn equal_pair(func: &Function, block: Block, incoming: &[(Inst, usize)]) -> Option<(usize, usize)> {
    let params = func.dfg.block_params(block);
    let n = params.len();
    if n < 2 || incoming.is_empty() {
        return None;
    }
    let mut args = Vec::with_capacity(incoming.len());
    for &edge in incoming {
        let a = edge_args(func, edge)?;
        debug_assert_eq!(a.len(), n, "an edge passes one argument per parameter");
        args.push(a);
    }
    for i in 0..n {
        for j in i + 1..n {
            let (p, q) = (params[i], params[j]);
            let equal = args.iter().all(|a| {
                let (x, y) = (a[i], a[j]);
                same_value(func, x, y) || (x == p && y == q) || (x == q && y == p)
            });
            if equal {
                return Some((i, j));
            }
        }
    }
    None
}

/// Drops parameter `j` of `block` (and its argument on every edge) and makes it an
/// alias of parameter `i`.
fn merge(func: &mut Function, block: Block, incoming: &[(Inst, usize)], i: usize, j: usize) {
    let params = func.dfg.block_params(block);
    let (keep, drop) = (params[i], params[j]);
    for &(inst, k) in incoming {
        let dfg = &mut func.dfg;
        let dests =
            dfg.insts[inst].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables);
        dests[k].remove(j, &mut dfg.value_lists);
    }
    func.dfg.remove_block_param(drop);
    func.dfg.change_to_alias(drop, keep);
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::{types, AbiParam, InstBuilder, Signature, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_codegen::settings;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    use super::*;

    /// A loop `head(p, q)`: entered with `(a, b)`, closed with `back(p, q)`; returns
    /// `p - q` so both parameters are used. Returns the function and `head`.
    fn looping(
        a: i64,
        b: i64,
        back: impl Fn(&mut FunctionBuilder<'_>, Value, Value) -> (Value, Value),
    ) -> (Function, Block) {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::default(), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut fb = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = fb.create_block();
        let head = fb.create_block();
        let done = fb.create_block();
        fb.append_block_params_for_function_params(entry);
        let p = fb.append_block_param(head, types::I64);
        let q = fb.append_block_param(head, types::I64);
        fb.switch_to_block(entry);
        let cond = fb.block_params(entry)[0];
        let a = fb.ins().iconst(types::I64, a);
        let b = fb.ins().iconst(types::I64, b);
        fb.ins()
            .jump(head, &[BlockArg::Value(a), BlockArg::Value(b)]);
        fb.switch_to_block(head);
        let (x, y) = back(&mut fb, p, q);
        fb.ins().brif(
            cond,
            head,
            &[BlockArg::Value(x), BlockArg::Value(y)],
            done,
            &[],
        );
        fb.switch_to_block(done);
        let d = fb.ins().isub(p, q);
        fb.ins().return_(&[d]);
        fb.seal_all_blocks();
        let isa = cranelift_native::builder()
            .expect("the tests run on a supported host")
            .finish(settings::Flags::new(settings::builder()))
            .expect("default flags are valid");
        fb.finalize(isa.frontend_config());
        (func, head)
    }

    fn params_after_merge(mut func: Function, head: Block) -> usize {
        merge_equal_params(&mut func);
        func.dfg.block_params(head).len()
    }

    #[test]
    fn equal_constants_and_swapped_back_edge_merge() {
        let (f, head) = looping(7, 7, |_, p, q| (q, p));
        assert_eq!(params_after_merge(f, head), 1);
        let (f, head) = looping(7, 7, |fb, p, _| {
            let n = fb.ins().iadd_imm_s(p, 1);
            (n, n)
        });
        assert_eq!(params_after_merge(f, head), 1);
    }

    /// A loop carrying `p` (returned after it) and `q` (only ever incremented): `q`'s
    /// parameter and its increment go, `p`'s stay.
    #[test]
    fn parameters_nothing_reads_are_removed() {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::default(), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut fb = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = fb.create_block();
        let head = fb.create_block();
        let done = fb.create_block();
        fb.append_block_params_for_function_params(entry);
        let p = fb.append_block_param(head, types::I64);
        let q = fb.append_block_param(head, types::I64);
        fb.switch_to_block(entry);
        let cond = fb.block_params(entry)[0];
        let zero = fb.ins().iconst(types::I64, 0);
        fb.ins()
            .jump(head, &[BlockArg::Value(zero), BlockArg::Value(zero)]);
        fb.switch_to_block(head);
        let p1 = fb.ins().iadd_imm_s(p, 1);
        let q1 = fb.ins().iadd_imm_s(q, 1);
        fb.ins().brif(
            cond,
            head,
            &[BlockArg::Value(p1), BlockArg::Value(q1)],
            done,
            &[],
        );
        fb.switch_to_block(done);
        fb.ins().return_(&[p]);
        fb.seal_all_blocks();
        let isa = cranelift_native::builder()
            .expect("the tests run on a supported host")
            .finish(settings::Flags::new(settings::builder()))
            .expect("default flags are valid");
        fb.finalize(isa.frontend_config());
        let inst_of = |v: Value| func.dfg.value_def(v).unwrap_inst();
        let (p1_inst, q1_inst) = (inst_of(p1), inst_of(q1));
        remove_dead_params(&mut func);
        assert_eq!(func.dfg.block_params(head), &[p]);
        assert_eq!(func.layout.inst_block(p1_inst), Some(head));
        assert_eq!(func.layout.inst_block(q1_inst), None);
        cranelift_codegen::verifier::verify_function(&func, isa.flags())
            .expect("the function stays valid");
    }

    #[test]
    fn different_values_stay_apart() {
        let (f, head) = looping(7, 8, |_, p, q| (p, q));
        assert_eq!(params_after_merge(f, head), 2);
        let (f, head) = looping(7, 7, |fb, p, q| {
            let n = fb.ins().iadd_imm_s(p, 1);
            (n, q)
        });
        assert_eq!(params_after_merge(f, head), 2);
    }
}
