//! Narrow loads folded into their extensions, and address constants into offsets, after
//! Cranelift's mid-end.
//!
//! The translation gives Cranelift a narrow load from memory that cannot change during
//! the run as a pure `load.i8`/`i16`/`i32` and an extension (`Translator::pure_load`),
//! so the mid-end may merge, hoist and schedule it beside its use. x86-64 lowering folds
//! such a load into its extension (`movzbl (mem)`) only when the loaded value is used
//! once *and* no value computed from it is used twice: a sum carried around an unrolled
//! loop is used on both of the loop's ways out, which marks every value it was computed
//! from as used twice (Cranelift's `compute_use_states`), so each load became a `movzx`
//! from memory followed by a second `movzx` of the register (cksum: 48 of them in a
//! group of 16 iterations). Making the loads extending loads (`uload8` ...) before the
//! mid-end does not help: those are effects, so the mid-end computes every value they
//! feed just before its first effectful use, all the group's loads live at once.
//!
//! So a function is [`define`]d in steps, and one with such loads ([`has_narrow_loads`]):
//! Cranelift's mid-end at the module's ISA; [`fold_narrow_loads`], which replaces each
//! load used only by its extension with the extending load at the extension's place
//! (where the mid-end put it), and [`fold_address_constants`], which moves the constants
//! of a three-term address into the access's offset (the mid-end leaves them inside, so
//! an unrolled group's `p[i + 1]`, `p[i + 2]` each took an `lea`: held-out dot8 29%
//! fewer instructions, knn 3.2%); lowering at the same ISA with the mid-end off.
//! Functions without such loads go through the same steps (for `hoist`, which runs
//! after the folds) but without the folds: the address fold alone gave editdist 3.9%
//! more instructions and no other kernel fewer (cachegrind,
//! docs/benchmarks-history.md). Compiling in steps runs Cranelift's removal of
//! constant block parameters a second time, on what the mid-end left; of the 19
//! built-in kernels and 68 held-out functions that changed the code of grep, msort and
//! kmpcount only: kmpcount ran 1.7% more instructions, grep the same, msort's time did
//! not move (two runs of `csx bench vm`). That second removal now runs before `hoist`
//! (`hoist::tidy_loops`), whose address regroup needs it.
//! Zero extensions, and the sign extension of a 32-bit load (`movslq (mem)`): folding
//! the narrower sign extensions as well (`movswq (mem)`) made a held-out 7-tap FIR over
//! `i16` samples 1.23x slower (the allocator then reloaded the base pointer before each
//! folded load), and no kernel faster than the unsigned folds alone (interleaved A/B,
//! docs/benchmarks-history.md). The 32-bit one alone took knn's `(i64)p[k] - (i64)q[k]`
//! from `movl` and `movslq` per load to one `movslq`: 982,322 -> 851,324 executed
//! instructions, 2-4% less time; no other of the 19 built-in kernels' code changed, and
//! no held-out function's executed instructions moved by more than 0.5%.

use std::collections::BTreeMap;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::{
    DataFlowGraph, Function, Inst, InstBuilder, InstructionData, Opcode, Value, ValueDef,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module, ModuleReloc, ModuleRelocTarget};

/// A zero extension of a movable read-only narrow `load` that nothing else uses, or a
/// sign extension of such a 32-bit load: `(extension, load)`.
fn candidates(func: &Function) -> Vec<(Inst, Inst)> {
    let mut uses = std::collections::BTreeMap::new();
    let mut extends = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                *uses.entry(v).or_insert(0u32) += 1;
            }
            if let InstructionData::Unary {
                opcode: Opcode::Uextend | Opcode::Sextend,
                arg,
            } = func.dfg.insts[inst]
            {
                extends.push((inst, arg));
            }
        }
    }
    extends
        .into_iter()
        .filter_map(|(ext, arg)| {
            let ValueDef::Result(load, _) = func.dfg.value_def(arg) else {
                return None;
            };
            let InstructionData::Load {
                opcode: Opcode::Load,
                flags,
                ..
            } = func.dfg.insts[load]
            else {
                return None;
            };
            let fl = func.dfg.mem_flags[flags];
            let movable = fl.readonly() && fl.can_move();
            let signed = func.dfg.insts[ext].opcode() == Opcode::Sextend;
            let word = func.dfg.value_type(arg).bits() == 32;
            (movable
                && (!signed || word)
                && uses[&arg] == 1
                && func.layout.inst_block(load).is_some())
            .then_some((ext, load))
        })
        .collect()
}

/// Whether `func` has a narrow load [`fold_narrow_loads`] would fold.
pub(crate) fn has_narrow_loads(func: &Function) -> bool {
    !candidates(func).is_empty()
}

/// Replaces every extension [`candidates`] finds with the extending load (`uload8`,
/// `uload16`, `uload32`, `sload32`) at the extension's
/// place, and removes the load. Same value: the memory cannot change during the run, and the
/// address is valid wherever the mid-end could have put the load (`can_move`).
pub(crate) fn fold_narrow_loads(func: &mut Function) {
    for (ext, load) in candidates(func) {
        let InstructionData::Load {
            flags,
            arg: addr,
            offset,
            ..
        } = func.dfg.insts[load]
        else {
            unreachable!("a candidate's load is a load");
        };
        let fl = func.dfg.mem_flags[flags];
        let from = func.dfg.value_type(func.dfg.first_result(load));
        let to = func.dfg.ctrl_typevar(ext);
        let signed = func.dfg.insts[ext].opcode() == Opcode::Sextend;
        let r = func.replace(ext);
        match (from.bits(), signed) {
            (8, false) => r.uload8(to, fl, addr, offset),
            (16, false) => r.uload16(to, fl, addr, offset),
            (32, false) => r.uload32(fl, addr, offset),
            (32, true) => r.sload32(fl, addr, offset),
            _ => unreachable!("an extended value is narrower than 64 bits"),
        };
        func.layout.remove_inst(load);
    }
}

/// How deep [`split_sum`] looks through additions (an unrolled group's induction
/// variable is a chain of one addition per copy).
const TERMS_DEPTH: u32 = 24;

/// `v` as a sum of values (pushed on `terms`) and a constant (returned, wrapping),
/// through `iadd`s and `iconst`s at most `depth` deep; an addition of more than three
/// values is kept whole, as one.
fn split_sum(dfg: &DataFlowGraph, v: Value, depth: u32, terms: &mut Vec<Value>) -> i64 {
    let v = dfg.resolve_aliases(v);
    if let ValueDef::Result(inst, 0) = dfg.value_def(v) {
        match dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => return imm.bits(),
            InstructionData::Binary {
                opcode: Opcode::Iadd,
                args: [a, b],
            } if depth > 0 => {
                let mut inner = Vec::new();
                let k = split_sum(dfg, a, depth - 1, &mut inner).wrapping_add(split_sum(
                    dfg,
                    b,
                    depth - 1,
                    &mut inner,
                ));
                if inner.len() <= 3 {
                    terms.extend(inner);
                    return k;
                }
            }
            _ => {}
        }
    }
    terms.push(v);
    0
}

/// The sum of [`split_sum`]'s values of `v` (`None`: `v` is a constant) and how many
/// it adds, made at the cursor in `v`'s own association (the mid-end's: a
/// loop-invariant pair stays one value, computed outside the loop), with a new
/// addition only where a constant left one.
fn without_constants(cur: &mut FuncCursor<'_>, v: Value, depth: u32) -> (Option<Value>, usize) {
    let v = cur.func.dfg.resolve_aliases(v);
    if let ValueDef::Result(inst, 0) = cur.func.dfg.value_def(v) {
        match cur.func.dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                ..
            } => return (None, 0),
            InstructionData::Binary {
                opcode: Opcode::Iadd,
                args: [a, b],
            } if depth > 0 => {
                let (sa, na) = without_constants(cur, a, depth - 1);
                let (sb, nb) = without_constants(cur, b, depth - 1);
                if na + nb <= 3 {
                    let sum = match (sa, sb) {
                        (None, None) => None,
                        (Some(x), None) | (None, Some(x)) => Some(x),
                        (Some(x), Some(y)) if x == a && y == b => Some(v),
                        (Some(x), Some(y)) => Some(cur.ins().iadd(x, y)),
                    };
                    return (sum, na + nb);
                }
            }
            _ => {}
        }
    }
    (Some(v), 1)
}

/// Moves the constants of a load's or store's address into its offset where the rest
/// is a sum of three values: `delta + (p + (i + 4))`, `delta + (p + (i + 8))`, ... (an
/// unrolled group's `p[i + 1]`, `p[i + 2]` through a host base, a pointer and an
/// index) become accesses at offsets 4, 8, ... from one sum of the three, made once in
/// the block, where each took an `lea` of its own (the mid-end keeps the constant
/// inside, and x86-64 addresses two registers and a constant). Same address: the sum
/// and the offset add up to it, wrapping as addresses do.
pub(crate) fn fold_address_constants(func: &mut Function) {
    let blocks: Vec<_> = func.layout.blocks().collect();
    for block in blocks {
        // The sums made in this block, by the values they add.
        let mut sums: BTreeMap<Vec<Value>, Value> = BTreeMap::new();
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        for inst in insts {
            let (addr, offset) = match func.dfg.insts[inst] {
                InstructionData::Load { arg, offset, .. } => (arg, offset),
                InstructionData::Store { args, offset, .. } => (args[1], offset),
                _ => continue,
            };
            let mut terms = Vec::new();
            let k = split_sum(&func.dfg, addr, TERMS_DEPTH, &mut terms);
            let moved = i64::from(offset)
                .checked_add(k)
                .and_then(|o| i32::try_from(o).ok());
            let Some(moved) = moved.filter(|_| k != 0 && terms.len() == 3) else {
                continue;
            };
            terms.sort_unstable();
            let base = match sums.get(&terms) {
                Some(&sum) => sum,
                None => {
                    let mut cur = FuncCursor::new(func).at_inst(inst);
                    let (sum, _) = without_constants(&mut cur, addr, TERMS_DEPTH);
                    let sum = sum.expect("three values, not a constant");
                    sums.insert(terms, sum);
                    sum
                }
            };
            match &mut func.dfg.insts[inst] {
                InstructionData::Load { arg, offset, .. } => {
                    *arg = base;
                    *offset = moved.into();
                }
                InstructionData::Store { args, offset, .. } => {
                    args[1] = base;
                    *offset = moved.into();
                }
                _ => unreachable!("matched as a load or a store above"),
            }
        }
    }
}

/// Defines function `id` in `module` from `ctx`: Cranelift's mid-end at the module's
/// ISA; [`fold_narrow_loads`] and [`fold_address_constants`] when `narrow` (the
/// function had narrow loads to fold before the mid-end); `hoist::tidy_loops`;
/// then lowering with `lowering` (the same host ISA at `opt_level` none, so the mid-end
/// does not run again and move the values the extending loads feed, see the module
/// doc, or sink what was hoisted); then the code placed in a line-aligned function
/// (`place`): `id` first, and when `trial` (the program's entry) a copy at each other
/// placement the trial tries, declared here. Returns each copy's function and how many
/// bytes past a line its code starts, `id`'s first.
pub(crate) fn define(
    module: &mut JITModule,
    lowering: &dyn TargetIsa,
    id: FuncId,
    ctx: &mut Context,
    narrow: bool,
    trial: bool,
) -> Result<Vec<(FuncId, u32)>, String> {
    let mut plane = cranelift_codegen::control::ControlPlane::default();
    ctx.optimize(module.isa(), &mut plane)
        .map_err(|e| format!("{e:?}"))?;
    if narrow {
        fold_narrow_loads(&mut ctx.func);
        fold_address_constants(&mut ctx.func);
    }
    crate::hoist::tidy_loops(ctx, module.isa())?;
    ctx.compile(lowering, &mut plane)
        .map_err(|e| format!("{:?}", e.inner))?;
    let compiled = ctx.compiled_code().expect("compiled just now");
    // Aligned to a line, the code placed in it (`place`).
    let align = u64::from(compiled.buffer.alignment)
        .max(u64::from(module.isa().function_alignment().minimum))
        .max(module.isa().symbol_alignment())
        .max(u64::from(crate::place::LINE));
    let code = compiled.code_buffer();
    let pads = crate::place::paddings(compiled.buffer.alignment, trial, code.len());
    let mut placed = Vec::with_capacity(pads.len());
    for (n, &pad) in pads.iter().enumerate() {
        let copy = if n == 0 {
            id
        } else {
            module
                .declare_anonymous_function(&ctx.func.signature)
                .map_err(|e| format!("{e:?}"))?
        };
        // Every place in the code, and every reference into it, moves by `pad`.
        let relocs: Vec<ModuleReloc> = compiled
            .buffer
            .relocs()
            .iter()
            .map(|r| {
                let mut r = ModuleReloc::from_mach_reloc(r, &ctx.func, copy);
                r.offset += pad;
                if let ModuleRelocTarget::FunctionOffset(f, at) = r.name {
                    r.name = ModuleRelocTarget::FunctionOffset(f, at + pad);
                }
                r
            })
            .collect();
        let bytes = crate::place::padded(code, pad);
        module
            .define_function_bytes(copy, align, &bytes, &relocs)
            .map_err(|e| format!("{e:?}"))?;
        placed.push((copy, pad));
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::ir::types;
    use cranelift_codegen::ir::{AbiParam, MemFlagsData, Signature, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    use super::*;

    /// A function loading a byte at `p` with `flags`, zero-extending it to 32 bits and
    /// returning the sum of the extension with itself (used twice, as a sum carried
    /// around a loop is); `extra_use`: the loaded byte is also returned.
    fn byte_sum(flags: MemFlagsData, extra_use: bool) -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I32));
        sig.returns.push(AbiParam::new(types::I8));
        let mut func = Function::with_name_signature(UserFuncName::default(), sig);
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry)[0];
        let byte = b.ins().load(types::I8, flags, p, 3);
        let wide = b.ins().uextend(types::I32, byte);
        let sum = b.ins().iadd(wide, wide);
        let other = if extra_use {
            byte
        } else {
            b.ins().iconst(types::I8, 0)
        };
        b.ins().return_(&[sum, other]);
        b.seal_all_blocks();
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        b.finalize(isa.frontend_config());
        func
    }

    fn opcodes(func: &Function) -> Vec<Opcode> {
        let block = func.layout.entry_block().expect("an entry block");
        func.layout
            .block_insts(block)
            .map(|i| func.dfg.insts[i].opcode())
            .collect()
    }

    #[test]
    fn a_movable_read_only_narrow_load_used_once_becomes_an_extending_load() {
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        let mut func = byte_sum(fixed, false);
        assert!(has_narrow_loads(&func));
        fold_narrow_loads(&mut func);
        assert_eq!(
            opcodes(&func),
            [Opcode::Uload8, Opcode::Iadd, Opcode::Iconst, Opcode::Return]
        );
        let block = func.layout.entry_block().expect("an entry block");
        let first = func.layout.first_inst(block).expect("a first instruction");
        let InstructionData::Load { offset, .. } = func.dfg.insts[first] else {
            panic!("{:?}", func.dfg.insts[first]);
        };
        assert_eq!(i32::from(offset), 3);
        assert_eq!(
            func.dfg.value_type(func.dfg.first_result(first)),
            types::I32
        );
        assert!(!has_narrow_loads(&func));
    }

    #[test]
    fn loads_that_may_change_or_have_other_uses_stay() {
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        for func in [
            byte_sum(MemFlagsData::trusted(), false),
            byte_sum(MemFlagsData::trusted().with_readonly(), false),
            byte_sum(fixed, true),
        ] {
            assert!(!has_narrow_loads(&func));
            let mut folded = func.clone();
            fold_narrow_loads(&mut folded);
            assert_eq!(opcodes(&folded), opcodes(&func));
            assert_eq!(opcodes(&func)[..2], [Opcode::Load, Opcode::Uextend]);
        }
    }

    /// A function loading a `ty` at `p` (read-only, movable), sign-extending it to 64
    /// bits and returning the extension added to itself.
    fn signed_sum(ty: types::Type) -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::default(), sig);
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry)[0];
        let fixed = MemFlagsData::trusted().with_readonly().with_can_move();
        let narrow = b.ins().load(ty, fixed, p, 8);
        let wide = b.ins().sextend(types::I64, narrow);
        let sum = b.ins().iadd(wide, wide);
        b.ins().return_(&[sum]);
        b.seal_all_blocks();
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        b.finalize(isa.frontend_config());
        func
    }

    #[test]
    fn only_a_word_is_folded_into_its_sign_extension() {
        let mut func = signed_sum(types::I32);
        assert!(has_narrow_loads(&func));
        fold_narrow_loads(&mut func);
        assert_eq!(
            opcodes(&func),
            [Opcode::Sload32, Opcode::Iadd, Opcode::Return]
        );
        let block = func.layout.entry_block().expect("an entry block");
        let first = func.layout.first_inst(block).expect("a first instruction");
        assert_eq!(
            func.dfg.value_type(func.dfg.first_result(first)),
            types::I64
        );
        for ty in [types::I8, types::I16] {
            let func = signed_sum(ty);
            assert!(!has_narrow_loads(&func), "{ty}");
            let mut folded = func.clone();
            fold_narrow_loads(&mut folded);
            assert_eq!(
                opcodes(&folded),
                [Opcode::Load, Opcode::Sextend, Opcode::Iadd, Opcode::Return]
            );
        }
    }

    /// `d + (p + (i + 4 * k))` loaded for k in `ks` (an unrolled group's addresses: a
    /// host base, a pointer, an index, a constant), then `p + (i + 12)` (two values and
    /// a constant: x86-64 addresses it as it is) and `(d + p) + (i + 8)` (the group's
    /// three, associated otherwise); returns the function and the loads in order.
    fn group_loads(ks: &[i64]) -> (Function, Vec<Inst>) {
        let mut sig = Signature::new(CallConv::SystemV);
        for _ in 0..3 {
            sig.params.push(AbiParam::new(types::I64));
        }
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::default(), sig);
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let [d, p, i] = [0, 1, 2].map(|n| b.block_params(entry)[n]);
        let fl = MemFlagsData::trusted();
        let mut sum = b.ins().iconst(types::I64, 0);
        let mut load = |b: &mut FunctionBuilder<'_>, addr| {
            let v = b.ins().load(types::I64, fl, addr, 0);
            sum = b.ins().iadd(sum, v);
        };
        for &k in ks {
            let c = b.ins().iconst(types::I64, 4 * k);
            let ik = b.ins().iadd(i, c);
            let pik = b.ins().iadd(p, ik);
            let addr = b.ins().iadd(d, pik);
            load(&mut b, addr);
        }
        let twelve = b.ins().iconst(types::I64, 12);
        let i12 = b.ins().iadd(i, twelve);
        let addr = b.ins().iadd(p, i12);
        load(&mut b, addr);
        let dp = b.ins().iadd(d, p);
        let eight = b.ins().iconst(types::I64, 8);
        let i8 = b.ins().iadd(i, eight);
        let addr = b.ins().iadd(dp, i8);
        load(&mut b, addr);
        b.ins().return_(&[sum]);
        b.seal_all_blocks();
        let isa = crate::host_isa(&|e| panic!("{e}"), "none").expect("the host ISA");
        b.finalize(isa.frontend_config());
        let block = func.layout.entry_block().expect("an entry block");
        let loads = func
            .layout
            .block_insts(block)
            .filter(|&i| func.dfg.insts[i].opcode() == Opcode::Load)
            .collect();
        (func, loads)
    }

    #[test]
    fn address_constants_move_into_the_offset_of_one_shared_sum() {
        let (mut func, loads) = group_loads(&[1, 2, 3]);
        let before: Vec<_> = loads.iter().map(|&l| func.dfg.insts[l]).collect();
        fold_address_constants(&mut func);
        let at = |inst: Inst| match func.dfg.insts[inst] {
            InstructionData::Load { arg, offset, .. } => (arg, i32::from(offset)),
            ref other => panic!("{other:?}"),
        };
        let (base, first) = at(loads[0]);
        assert_eq!(first, 4);
        assert_eq!(at(loads[1]), (base, 8));
        assert_eq!(at(loads[2]), (base, 12));
        // Two values and a constant stay as they were.
        assert_eq!(func.dfg.insts[loads[3]], before[3]);
        // The same three values associated otherwise: the same sum.
        assert_eq!(at(loads[4]), (base, 8));
        // The sum is `d + (p + i)`, made before the first load.
        let block = func.layout.entry_block().expect("an entry block");
        let params = func.dfg.block_params(block).to_vec();
        let add = |v: Value| {
            let ValueDef::Result(def, _) = func.dfg.value_def(v) else {
                panic!("{v} is computed");
            };
            match func.dfg.insts[def] {
                InstructionData::Binary {
                    opcode: Opcode::Iadd,
                    args,
                } => (def, args),
                ref other => panic!("{other:?}"),
            }
        };
        let (def, [d, pi]) = add(base);
        assert_eq!(d, params[0]);
        assert_eq!(add(pi).1, [params[1], params[2]]);
        assert!(func.layout.pp_cmp(def, loads[0]).is_lt());
    }

    #[test]
    fn an_offset_past_i32_keeps_its_address() {
        // 4 * 2^29 = 2^31: the offset would leave i32.
        let (mut func, loads) = group_loads(&[1 << 29]);
        let before = func.dfg.insts[loads[0]];
        fold_address_constants(&mut func);
        assert_eq!(func.dfg.insts[loads[0]], before);
    }
}
