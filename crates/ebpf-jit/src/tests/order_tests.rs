//! The order Cranelift computes an unrolled group's values in (`translate`'s
//! `fuel_first`): a group whose charge is selected by a compare of a running register
//! (stats64's minimum) computes each charge with its iteration's values. Value, trap
//! (pc, kind) and fuel stay the interpreter's at every budget.

use super::*;

/// `sdk/bench/stats64.c` as clang lays it out, over region 2: r1 the values, r2 the
/// count claimed (in values). The maximum is a forward triangle, the minimum the loop's
/// closing branch converted with its arm (`jlt %r0, %r7, tail` reads last iteration's
/// minimum; its two paths charge 24 and 26).
const RUNNING_MIN: &str = "\
    mov %r3, %r2\nmov %r2, 0\nmov %r4, -1\nmov %r0, 0\njeq %r3, 0, done\n\
    mov %r7, -1\nmov %r6, 0\nmov %r5, 0\nmov %r8, 0\nja head\n\
    tail:\nadd %r0, %r6\nadd %r1, 8\nadd %r5, 1\nmov %r6, %r0\nmov %r8, %r2\n\
    mov %r7, %r4\njlt %r5, %r3, head\n\
    done:\nxor %r0, %r4\nmul %r0, 31\nadd %r0, %r2\nexit\n\
    head:\nldxdw %r0, [%r1+0]\nmov %r2, %r0\njgt %r0, %r8, skip\nmov %r2, %r8\n\
    skip:\nmov %r4, %r0\njlt %r0, %r7, tail\nmov %r4, %r7\nja tail";

/// Runs `p` with region 2 holding `values` (read-only), r1 its address and r2
/// `claimed`, on the interpreter and the JIT at every budget up to one past what it
/// needs, requiring the same outcome; returns the full run's.
fn sweep_values(p: &Arc<VerifiedProgram>, values: &[u64], claimed: u64) -> RunOutcome {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    super::loop_tests::sweep_on_input_r2(p, &bytes, claimed)
}

/// Values whose running minimum and maximum change often (and ties with the minimum,
/// whose path charges the other cost).
fn values(n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| match i % 5 {
            0 => 1000 - i,
            1 => i * 7,
            2 => 1000 - i,
            _ => (i * 2_654_435_761) % 977,
        })
        .collect()
}

fn want(values: &[u64]) -> u64 {
    let sum = values.iter().fold(0u64, |s, &v| s.wrapping_add(v));
    let min = values.iter().copied().min().unwrap_or(u64::MAX);
    let max = values.iter().copied().max().unwrap_or(0);
    (sum ^ min).wrapping_mul(31).wrapping_add(max)
}

/// The loop is unrolled in groups, its value and fuel are the interpreter's at every
/// budget and every count around the group size, and a count claiming more values than
/// the region holds traps at the load past its end (after the groups ran), at every
/// budget.
#[test]
fn a_running_minimum_charges_at_every_budget() {
    assert_eq!(unroll_plans(RUNNING_MIN).len(), 1);
    let p = program(RUNNING_MIN, vec![]);
    for n in [0, 1, 7, 8, 9, 17, 40] {
        let v = values(n);
        let out = sweep_values(&p, &v, n);
        assert_eq!(out.result, Ok(want(&v)), "{n} values");
    }
    let v = values(27);
    let out = sweep_values(&p, &v, 30);
    assert_eq!(trap_of(&out).pc, RUNNING_MIN_LOAD_PC);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

/// The slot of the loop's load (`ldxdw %r0, [%r1+0]`).
const RUNNING_MIN_LOAD_PC: u32 = 21;

/// With each charge computed next to the minimum it compares, no intermediate minimum
/// is kept for the charges: the code is smaller than with every chain first and the
/// charges last (which spilled 14 values and reloaded 16 a group of 8 in stats64):
/// 2,536 code bytes here (groups of 16), 3,048 without.
#[test]
fn a_running_minimum_is_not_kept_for_its_charges() {
    let jit = JitProgram::compile(program(RUNNING_MIN, vec![])).unwrap();
    assert!(
        jit.code_size() < CODE_BYTES_MAX,
        "{} code bytes",
        jit.code_size()
    );
}

const CODE_BYTES_MAX: usize = 2_792;
