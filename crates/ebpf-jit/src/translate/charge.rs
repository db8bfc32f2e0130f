//! A back-edge's fuel charge picked by a condition, and what the translation knows of
//! that condition: whether it is a 0/1 value by how it was made, so that the charge can be
//! paid as arithmetic on it ([`pay`]).

use cranelift_codegen::ir::condcodes::{CondCode as _, IntCC};
use cranelift_codegen::ir::{
    types, DataFlowGraph, InstBuilder, InstructionData as D, Opcode as O, Value, ValueDef,
};
use cranelift_frontend::FunctionBuilder;

/// The immediate of `v` when an `iconst` makes it.
fn iconst(dfg: &DataFlowGraph, v: Value) -> Option<i64> {
    let inst = dfg.value_def(dfg.resolve_aliases(v)).inst()?;
    match dfg.insts[inst] {
        D::UnaryImm {
            opcode: O::Iconst,
            imm,
        } => Some(imm.bits()),
        _ => None,
    }
}

/// The fuel a back-edge charges: a constant, or one of two picked by a condition (a
/// converted loop-closing branch, whose two paths jump back from different slots).
#[derive(Clone, Copy)]
pub(super) enum Cost {
    Fixed(u64),
    /// `bit`: may be paid as arithmetic on the condition's bit (see [`pay`]).
    Picked {
        cond: Value,
        taken: u64,
        fall: u64,
        bit: bool,
    },
}

/// `cost` as one value: a constant, or a `select` of the two.
pub(super) fn cost_value(b: &mut FunctionBuilder<'_>, cost: Cost) -> Value {
    match cost {
        Cost::Fixed(c) => b.ins().iconst(types::I64, c as i64),
        Cost::Picked {
            cond, taken, fall, ..
        } => {
            let t = b.ins().iconst(types::I64, taken as i64);
            let f = b.ins().iconst(types::I64, fall as i64);
            b.ins().select(cond, t, f)
        }
    }
}

/// `left - cost`, wrapping. A picked cost whose condition is known to be 0 or 1
/// ([`bit_of`]) and whose two constants differ by 1, 2, 4 or 8 is paid as
/// `left - fall - bit * (taken - fall)`: an `lea` on the bit, which the code usually
/// has already (a count of hits), where a `select` of two constants is two moves, a
/// test and a `cmov` per charge (held-out fir3 19% fewer instructions, pred32 2%).
pub(super) fn pay(b: &mut FunctionBuilder<'_>, left: Value, cost: Cost) -> Value {
    if let Cost::Picked {
        cond,
        taken,
        fall,
        bit: true,
    } = cost
    {
        let step = taken.wrapping_sub(fall) as i64;
        let scale = step.unsigned_abs();
        // A scale an `lea` has; a multiply on the fuel's chain costs more than a select.
        if matches!(scale, 1 | 2 | 4 | 8) {
            if let Some(bit) = bit_of(b, cond) {
                let left = b.ins().iadd_imm_s(left, (fall as i64).wrapping_neg());
                let s = b.ins().ishl_imm_s(bit, i64::from(scale.trailing_zeros()));
                return if step > 0 {
                    b.ins().isub(left, s)
                } else {
                    b.ins().iadd(left, s)
                };
            }
        }
    }
    let cost = cost_value(b, cost);
    b.ins().isub(left, cost)
}

/// Most `and`/`or`/`xor`/`select`s deep [`is_bit`] looks (extensions are free).
const BIT_DEPTH: u32 = 6;

/// Whether `v` is 0 or 1 by how it was made: a compare, an extension or reduction of
/// one, an `and` with one, an `or`/`xor`/`select` of two, or the constant 0 or 1.
fn is_bit(dfg: &DataFlowGraph, v: Value, depth: u32) -> bool {
    let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(v)) else {
        return false;
    };
    let deeper = |x: Value| depth > 0 && is_bit(dfg, x, depth - 1);
    match dfg.insts[inst] {
        D::IntCompare { .. } => true,
        D::UnaryImm { .. } => matches!(iconst(dfg, v), Some(0 | 1)),
        // Free: the translation wraps every 32-bit result in these.
        D::Unary {
            opcode: O::Uextend | O::Ireduce,
            arg,
        } => is_bit(dfg, arg, depth),
        D::Binary {
            opcode: O::Band,
            args: [x, y],
        } => deeper(x) || deeper(y),
        D::Binary {
            opcode: O::Bor | O::Bxor,
            args: [x, y],
        } => deeper(x) && deeper(y),
        D::Ternary {
            opcode: O::Select,
            args: [_, x, y],
        } => deeper(x) && deeper(y),
        _ => false,
    }
}

/// `cond` as an `i64` 0 or 1 when [`is_bit`] knows it is one (nonzero is true, so the
/// value is the condition).
fn bit_of(b: &mut FunctionBuilder<'_>, cond: Value) -> Option<Value> {
    let dfg = &b.func.dfg;
    if !is_bit(dfg, cond, BIT_DEPTH) {
        return None;
    }
    // A branch on a bit tests it against zero: the bit itself is the condition.
    let mut cond = dfg.resolve_aliases(cond);
    if let Some(x) = bit_tested(dfg, cond) {
        cond = x;
    }
    // A 32-bit bit taken from a register: the register (what a count of hits adds).
    if let ValueDef::Result(inst, 0) = dfg.value_def(cond) {
        if let D::Unary {
            opcode: O::Ireduce,
            arg,
        } = dfg.insts[inst]
        {
            if dfg.value_type(arg) == types::I64 && is_bit(dfg, arg, BIT_DEPTH) {
                cond = dfg.resolve_aliases(arg);
            }
        }
    }
    let ty = b.func.dfg.value_type(cond);
    Some(if ty == types::I64 {
        cond
    } else {
        b.ins().uextend(types::I64, cond)
    })
}

/// Whether `v` is made by an `icmp` (whose flags a `select` on it uses directly).
pub(super) fn is_compare(dfg: &DataFlowGraph, v: Value) -> bool {
    matches!(
        dfg.value_def(dfg.resolve_aliases(v)),
        ValueDef::Result(i, 0)
            if matches!(dfg.insts[i], D::IntCompare { .. })
    )
}

/// Whether `v` is an `iconst`, or an extension of one (a 32-bit `mov`).
pub(super) fn is_const(dfg: &DataFlowGraph, v: Value) -> bool {
    let ValueDef::Result(i, 0) = dfg.value_def(dfg.resolve_aliases(v)) else {
        return false;
    };
    match dfg.insts[i] {
        D::UnaryImm { .. } => iconst(dfg, v).is_some(),
        D::Unary {
            opcode: O::Uextend | O::Sextend | O::Ireduce,
            arg,
        } => is_const(dfg, arg),
        _ => false,
    }
}

/// The bit `cond` tests when it is `icmp ne bit, 0` (either way round).
fn bit_tested(dfg: &DataFlowGraph, cond: Value) -> Option<Value> {
    let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(cond)) else {
        return None;
    };
    let D::IntCompare {
        cond: IntCC::NotEqual,
        args: [x, y],
        ..
    } = dfg.insts[inst]
    else {
        return None;
    };
    let zero = |v: Value| iconst(dfg, v) == Some(0);
    if zero(y) && is_bit(dfg, x, BIT_DEPTH) {
        Some(x)
    } else if zero(x) && is_bit(dfg, y, BIT_DEPTH) {
        Some(y)
    } else {
        None
    }
}

/// Whether `cond` tests a bit against zero ([`bit_tested`]).
pub(super) fn is_bit_test(dfg: &DataFlowGraph, cond: Value) -> bool {
    bit_tested(dfg, cond).is_some()
}

/// `!cond`: the complemented compare when an `icmp` makes `cond` (so the branch on it
/// still fuses with the compare), else `cond == 0`.
pub(super) fn negate(b: &mut FunctionBuilder<'_>, cond: Value) -> Value {
    let dfg = &b.func.dfg;
    if let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(cond)) {
        if let D::IntCompare {
            cond: cc,
            args: [x, y],
            ..
        } = dfg.insts[inst]
        {
            return b.ins().icmp(cc.complement(), x, y);
        }
    }
    b.ins().icmp_imm_s(IntCC::Equal, cond, 0)
}
