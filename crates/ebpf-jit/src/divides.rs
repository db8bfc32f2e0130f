//! Remainder tests against zero as divisibility tests, between translation and
//! Cranelift's own passes.
//!
//! eBPF has a cheap `mod`, yet clang's eBPF backend writes `x % 7 == 0` as
//! `q = x / 7; q *= 7; x -= q; if x == 0` (its divisions are "cheap" there, so it
//! neither keeps the `mod` nor makes the test below), and Cranelift turns the division
//! into a multiply by a magic number with shifts and a fix-up: twelve x86-64
//! instructions for one test (a u32 filter `... || (x & 0xff) % 7 == 0`). A remainder
//! by a constant `c = c0 << s` (`c0` odd) is zero exactly when
//! `rotr(x * inv(c0), s) <= (2^N - 1) / c`, with `inv(c0)` the inverse of `c0` modulo
//! `2^N` and everything unsigned and wrapping at the width `N` (Granlund and
//! Montgomery; Hacker's Delight, 10-17): a multiply, a rotate when `c` is even, and a
//! compare. Each `icmp eq`/`ne` of such a remainder (`urem x, c`, or `x - (x / c) * c`)
//! with zero becomes that test. It computes the same truth value for every `x`, so it
//! cannot change a result, a trap or a fuel count; the division, if nothing else uses
//! it, is dead and goes with Cranelift's mid-end.

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, DataFlowGraph, Function, Inst, InstBuilder, InstructionData, Opcode, Type, Value,
    ValueDef,
};

/// The constant `v` is, as an unsigned value of its type's width.
fn constant(dfg: &DataFlowGraph, v: Value) -> Option<u64> {
    let v = strip(dfg, v);
    let ValueDef::Result(inst, 0) = dfg.value_def(v) else {
        return None;
    };
    match dfg.insts[inst] {
        InstructionData::UnaryImm {
            opcode: Opcode::Iconst,
            imm,
        } => Some(imm.bits() as u64 & mask(dfg.value_type(v))),
        _ => None,
    }
}

/// All ones at `ty`'s width (only `i32` and `i64` reach here).
fn mask(ty: Type) -> u64 {
    if ty == types::I32 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    }
}

/// The unary instruction defining `v`, as (opcode, arg).
fn unary(dfg: &DataFlowGraph, v: Value) -> Option<(Opcode, Value)> {
    let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(v)) else {
        return None;
    };
    match dfg.insts[inst] {
        InstructionData::Unary { opcode, arg } => Some((opcode, dfg.resolve_aliases(arg))),
        _ => None,
    }
}

/// `v` without the round trips the translation makes between a 32-bit result and the
/// 64-bit register holding it: `ireduce.i32 (uextend.i64 x)` is `x`; a `ireduce` of
/// anything else is kept (two of one register compare equal, see [`same`]).
fn strip(dfg: &DataFlowGraph, v: Value) -> Value {
    let mut v = dfg.resolve_aliases(v);
    while let Some((Opcode::Ireduce, a)) = unary(dfg, v) {
        match unary(dfg, a) {
            Some((Opcode::Uextend, x)) if dfg.value_type(x) == dfg.value_type(v) => v = x,
            _ => break,
        }
    }
    v
}

/// Whether `a` and `b` are one value: the same after [`strip`], or reductions of one
/// register value to the same type.
fn same(dfg: &DataFlowGraph, a: Value, b: Value) -> bool {
    let (a, b) = (strip(dfg, a), strip(dfg, b));
    if a == b {
        return true;
    }
    match (unary(dfg, a), unary(dfg, b)) {
        (Some((Opcode::Ireduce, x)), Some((Opcode::Ireduce, y))) => {
            x == y && dfg.value_type(a) == dfg.value_type(b)
        }
        _ => false,
    }
}

/// The binary instruction defining `v` (after [`strip`]), as (opcode, args).
fn binary(dfg: &DataFlowGraph, v: Value) -> Option<(Opcode, [Value; 2])> {
    let ValueDef::Result(inst, 0) = dfg.value_def(strip(dfg, v)) else {
        return None;
    };
    match dfg.insts[inst] {
        InstructionData::Binary { opcode, args } => Some((opcode, args)),
        _ => None,
    }
}

/// `(x, c)` when `r` is the unsigned remainder of `x` by the non-zero constant `c`:
/// `urem x, c`, or `x - (x / c) * c` (the product either way round).
fn remainder(dfg: &DataFlowGraph, r: Value) -> Option<(Value, u64)> {
    match binary(dfg, r)? {
        (Opcode::Urem, [x, c]) => constant(dfg, c).filter(|&c| c != 0).map(|c| (x, c)),
        (Opcode::Isub, [x, m]) => {
            let (Opcode::Imul, [a, b]) = binary(dfg, m)? else {
                return None;
            };
            let (q, k) = match (constant(dfg, a), constant(dfg, b)) {
                (None, Some(k)) => (a, k),
                (Some(k), None) => (b, k),
                _ => return None,
            };
            let (Opcode::Udiv, [y, c]) = binary(dfg, q)? else {
                return None;
            };
            (same(dfg, y, x) && constant(dfg, c) == Some(k) && k != 0).then_some((x, k))
        }
        _ => None,
    }
}

/// The inverse of odd `c` modulo 2^64 (Newton's iteration doubles the correct low
/// bits: 3 from `c` itself, then 6, 12, 24, 48, 96).
fn inverse(c: u64) -> u64 {
    debug_assert!(c & 1 == 1);
    let mut x = c;
    for _ in 0..5 {
        x = x.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(x)));
    }
    x
}

/// Which `icmp` compares a remainder by a constant with zero: the instruction, its
/// condition (`eq` or `ne`) and the remainder's `(x, c)`.
fn tests(func: &Function) -> Vec<(Inst, IntCC, Value, u64)> {
    let dfg = &func.dfg;
    let mut found = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let (cond, r) = match dfg.insts[inst] {
                InstructionData::IntCompare {
                    opcode: Opcode::Icmp,
                    cond,
                    args: [a, b],
                } => match (constant(dfg, a), constant(dfg, b)) {
                    (_, Some(0)) => (cond, a),
                    (Some(0), _) => (cond, b),
                    _ => continue,
                },
                _ => continue,
            };
            if !matches!(cond, IntCC::Equal | IntCC::NotEqual) {
                continue;
            }
            // A zero extension keeps a value's being zero.
            let mut r = strip(dfg, r);
            while let Some((Opcode::Uextend, a)) = unary(dfg, r) {
                r = strip(dfg, a);
            }
            let ty = dfg.value_type(r);
            if ty != types::I32 && ty != types::I64 {
                continue;
            }
            if let Some((x, c)) = remainder(dfg, r) {
                found.push((inst, cond, x, c));
            }
        }
    }
    found
}

/// Rewrites each `icmp eq`/`ne` of a remainder by a constant with zero in `func` as a
/// divisibility test (see the module doc).
pub(crate) fn fold_divisibility_tests(func: &mut Function) {
    for (inst, cond, x, c) in tests(func) {
        let ty = func.dfg.value_type(x);
        let m = mask(ty);
        let shift = c.trailing_zeros();
        let inv = inverse(c >> shift) & m;
        let limit = m / c;
        let mut cur = FuncCursor::new(func).at_inst(inst);
        let inv = cur.ins().iconst(ty, inv as i64);
        let mut t = cur.ins().imul(x, inv);
        if shift != 0 {
            t = cur.ins().rotr_imm_s(t, i64::from(shift));
        }
        let limit = cur.ins().iconst(ty, limit as i64);
        let cc = if cond == IntCC::Equal {
            IntCC::UnsignedLessThanOrEqual
        } else {
            IntCC::UnsignedGreaterThan
        };
        func.dfg.insts[inst] = InstructionData::IntCompare {
            opcode: Opcode::Icmp,
            cond: cc,
            args: [t, limit],
        };
    }
}

/// The select `v` is (after [`strip`]), as (condition, if true, if false).
fn select(dfg: &DataFlowGraph, v: Value) -> Option<[Value; 3]> {
    let ValueDef::Result(inst, 0) = dfg.value_def(strip(dfg, v)) else {
        return None;
    };
    match dfg.insts[inst] {
        InstructionData::Ternary {
            opcode: Opcode::Select,
            args,
        } => Some(args.map(|a| dfg.resolve_aliases(a))),
        _ => None,
    }
}

/// Whether `zero` is `icmp eq y, 0`.
fn is_zero_test(dfg: &DataFlowGraph, zero: Value, y: Value) -> bool {
    let ValueDef::Result(inst, 0) = dfg.value_def(dfg.resolve_aliases(zero)) else {
        return false;
    };
    match dfg.insts[inst] {
        InstructionData::IntCompare {
            opcode: Opcode::Icmp,
            cond: IntCC::Equal,
            args: [a, b],
        } => constant(dfg, b) == Some(0) && same(dfg, a, y),
        _ => false,
    }
}

/// `(zero, safe, udiv)` when `x - m` is a remainder by a register: `m = q * y` (either way
/// round) with `q` the quotient translation emits for `x / y`,
/// `select(zero, 0, udiv(x, safe))`, where `zero = icmp eq y, 0` and
/// `safe = select(zero, 1, y)`.
fn register_remainder(dfg: &DataFlowGraph, x: Value, m: Value) -> Option<(Value, Value, Inst)> {
    let (Opcode::Imul, [a, b]) = binary(dfg, m)? else {
        return None;
    };
    [(a, b), (b, a)].into_iter().find_map(|(q, y)| {
        let [zero, z, quotient] = select(dfg, q)?;
        let (Opcode::Udiv, [dividend, safe]) = binary(dfg, quotient)? else {
            return None;
        };
        let [zero2, one, divisor] = select(dfg, safe)?;
        let fits = constant(dfg, z) == Some(0)
            && same(dfg, dividend, x)
            && zero2 == zero
            && constant(dfg, one) == Some(1)
            && same(dfg, divisor, y)
            && is_zero_test(dfg, zero, y)
            && dfg.value_type(safe) == dfg.value_type(x);
        let ValueDef::Result(udiv, 0) = dfg.value_def(strip(dfg, quotient)) else {
            return None;
        };
        fits.then_some((zero, safe, udiv))
    })
}

/// Rewrites each `x - (x / y) * y` of a register `y` in `func` (clang's eBPF for
/// `x % y`, with translation's guard for a zero `y`) as `select(y == 0, x, x % safe)`,
/// `safe` being the guarded divisor: one hardware divide whose remainder is used
/// directly, without the multiply and subtraction after it. Both give `x` when `y` is
/// zero and the remainder otherwise, so no result, trap or fuel count changes. The
/// quotient's divide goes when nothing else uses it: its divisor is never zero, but
/// Cranelift keeps every divide for the trap it could raise.
pub(crate) fn fold_register_remainders(func: &mut Function) {
    let mut found = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let InstructionData::Binary {
                opcode: Opcode::Isub,
                args: [x, m],
            } = func.dfg.insts[inst]
            {
                if let Some((zero, safe, udiv)) = register_remainder(&func.dfg, x, m) {
                    found.push((inst, x, zero, safe, udiv));
                }
            }
        }
    }
    if found.is_empty() {
        return;
    }
    let mut divides = Vec::new();
    for (inst, x, zero, safe, udiv) in found {
        let mut cur = FuncCursor::new(func).at_inst(inst);
        let r = cur.ins().urem(x, safe);
        func.dfg.insts[inst] = InstructionData::Ternary {
            opcode: Opcode::Select,
            args: [zero, x, r],
        };
        divides.push(udiv);
    }
    crate::hoist::remove_dead_and(func, |inst| divides.contains(&inst));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test the rewrite makes, computed on the host.
    fn divides(x: u64, c: u64, bits: u32) -> bool {
        let m = if bits == 32 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        };
        let s = c.trailing_zeros();
        let t = x.wrapping_mul(inverse(c >> s)) & m;
        let rotated = if s == 0 {
            t
        } else {
            ((t >> s) | (t << (bits - s))) & m
        };
        rotated <= m / c
    }

    #[test]
    fn the_inverse_times_the_divisor_is_one() {
        for c in (1..2000u64)
            .step_by(2)
            .chain([u64::MAX, 0x9e37_79b9_7f4a_7c15])
        {
            assert_eq!(c.wrapping_mul(inverse(c)), 1, "c = {c}");
        }
    }

    #[test]
    fn the_test_agrees_with_the_remainder() {
        let mut xs: Vec<u64> = (0..300).collect();
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            xs.push(s);
        }
        xs.extend([
            u64::MAX,
            u64::MAX - 1,
            u64::from(u32::MAX),
            1 << 63,
            1 << 31,
        ]);
        let cs = (1..70u64).chain([96, 255, 256, 1000, 1 << 31, (1 << 32) - 1, 3 << 40]);
        for c in cs {
            for &x in &xs {
                assert_eq!(
                    divides(x, c, 64),
                    x.is_multiple_of(c),
                    "x = {x}, c = {c}, 64 bits"
                );
                if c <= u64::from(u32::MAX) {
                    let x = x & u64::from(u32::MAX);
                    assert_eq!(
                        divides(x, c, 32),
                        x.is_multiple_of(c),
                        "x = {x}, c = {c}, 32 bits"
                    );
                }
            }
        }
    }
}
