//! A running minimum or maximum a loop carries stays a branch (`extrema`), one a loop,
//! its closing branch first; the other short branches stay `select`s. Either way value,
//! trap and fuel are the interpreter's at every budget.

use super::*;

/// The converted branches of `src`'s entry function.
fn converted(src: &str) -> BTreeSet<u32> {
    let p = program(src, vec![]);
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    plan.functions[0].ifconv.keys().copied().collect()
}

/// The slot of the first instruction of `src` (one a line, labels on lines of their
/// own, no `lddw`) that starts with `text`.
fn slot_of(src: &str, text: &str) -> u32 {
    let mut insns = src.lines().map(str::trim).filter(|l| !l.ends_with(':'));
    insns.position(|l| l.starts_with(text)).unwrap() as u32
}

/// stats32's shape as clang lays it out, over `n` of region 2's bytes (`v = p[i] ^ 42`):
/// the maximum in r0 through a branch inside the body, the minimum in r7 through the
/// closing branch, both carried through copies at the latch; returns `max << 8 | min`.
fn min_max(n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r7, 255\nmov %r6, 0\nmov %r8, 255\nmov %r3, 0\nja body\n\
         latch:\nmov %r0, %r6\nmov %r7, %r8\nadd %r3, 1\njge %r3, {n}, done\n\
         body:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r5, [%r4+0]\nxor %r5, 42\n\
         mov %r6, %r5\njgt %r5, %r0, skip\nmov %r6, %r0\n\
         skip:\nmov %r8, %r5\njlt %r5, %r7, latch\nmov %r8, %r7\nja latch\n\
         done:\nlsh %r0, 8\nor %r0, %r7\nexit"
    )
}

#[test]
fn a_running_minimum_closing_the_loop_stays_a_branch_and_the_maximum_a_select() {
    let src = min_max(8);
    let max = slot_of(&src, "jgt %r5, %r0");
    let min = slot_of(&src, "jlt %r5, %r7");
    let conv = converted(&src);
    assert!(conv.contains(&max), "{conv:?}");
    assert!(!conv.contains(&min), "{conv:?}");
    for n in [1u32, 2, 7, 16, 64] {
        let v = (0..u64::from(n)).map(|i| i ^ 42);
        let want = v.clone().max().unwrap() << 8 | v.min().unwrap();
        assert_eq!(check_every_budget(&min_max(n)).result, Ok(want), "{n}");
    }
}

/// Held-out ringmax's shape: the maximum of each slot of an 8-byte ring on the stack,
/// loaded, compared, and stored back at the loop's header; r0 sums the slots' values.
fn ring_of_maxima(n: u32) -> String {
    ring_with(n, "mov %r4, %r6")
}

#[test]
fn a_maximum_kept_in_memory_stays_a_branch() {
    let src = ring_of_maxima(8);
    let max = slot_of(&src, "jgt %r4, %r6");
    assert!(!converted(&src).contains(&max));
    for n in [1u32, 2, 15, 16, 17, 64] {
        let mut ring = [0u64; 8];
        let want: u64 = (0..u64::from(n))
            .map(|i| {
                let v = i ^ 42;
                let slot = &mut ring[(v & 7) as usize];
                *slot = (*slot).max(v);
                *slot
            })
            .sum();
        assert_eq!(
            check_every_budget(&ring_of_maxima(n)).result,
            Ok(want),
            "{n}"
        );
    }
}

/// Euclid by subtraction on two carried values: `lo = min(u, v)`, `u = max(u, v) - lo`,
/// `v = lo` until `u` is 0; returns the steps in the high half, the divisor in the low.
fn subtractive_gcd(a: u32, b: u32) -> String {
    format!(
        "mov %r6, {a}\nmov %r7, {b}\nmov %r0, 0\n\
         head:\nadd %r0, 1\nmov %r8, %r6\njlt %r6, %r7, low\nmov %r8, %r7\n\
         low:\njgt %r6, %r7, high\nmov %r6, %r7\n\
         high:\nsub %r6, %r8\nmov %r7, %r8\njne %r6, 0, head\n\
         lsh %r0, 32\nor %r0, %r7\nexit"
    )
}

/// A count of bytes over a threshold: the branch picks 1 or 0, not a compared value.
fn over_threshold(n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r3, 0\n\
         head:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r5, [%r4+0]\nmov %r6, 1\n\
         jgt %r5, 30, over\nmov %r6, 0\n\
         over:\nadd %r0, %r6\nadd %r3, 1\njlt %r3, {n}, head\nexit"
    )
}

#[test]
fn extremes_of_two_carried_values_and_picks_of_other_values_stay_selects() {
    let gcd = subtractive_gcd(84, 18);
    let conv = converted(&gcd);
    assert!(conv.contains(&slot_of(&gcd, "jlt %r6, %r7")), "{conv:?}");
    assert!(conv.contains(&slot_of(&gcd, "jgt %r6, %r7")), "{conv:?}");
    let (mut u, mut v, mut steps) = (84u64, 18u64, 0u64);
    while u != 0 {
        let lo = u.min(v);
        (u, v, steps) = (u.max(v) - lo, lo, steps + 1);
    }
    assert_eq!(v, 6);
    assert_eq!(check_every_budget(&gcd).result, Ok(steps << 32 | v));

    let count = over_threshold(64);
    assert!(converted(&count).contains(&slot_of(&count, "jgt %r5, 30")));
    assert_eq!(check_every_budget(&count).result, Ok(64 - 31));
}

/// `sdk/bench/stats64.c` as clang lays it out, over region 2: r1 the values, r2 the
/// count claimed (in values). The maximum is a forward triangle (a select), the minimum
/// the loop's closing branch (`jlt %r0, %r7, tail` reads last iteration's minimum; its
/// two paths charge 24 and 26), kept a branch.
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
    let conv = converted(RUNNING_MIN);
    assert!(
        conv.contains(&slot_of(RUNNING_MIN, "jgt %r0, %r8")),
        "{conv:?}"
    );
    assert!(
        !conv.contains(&slot_of(RUNNING_MIN, "jlt %r0, %r7")),
        "{conv:?}"
    );
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

/// A loop longer than the extrema are looked for in (`extrema::LOOP_SLOTS_MAX`):
/// its running minimum stays a select.
#[test]
fn a_running_minimum_in_a_long_loop_stays_a_select() {
    let pad = "add %r9, 1\n".repeat(130);
    let src = format!(
        "mov %r0, 255\nmov %r3, 0\nmov %r9, 0\n\
         head:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r5, [%r4+0]\n{pad}\
         jge %r5, %r0, next\nmov %r0, %r5\n\
         next:\nadd %r3, 1\njlt %r3, 64, head\nexit"
    );
    let min = slot_of(&src, "jge %r5, %r0");
    assert!(converted(&src).contains(&min));
    let short = src.replace(&pad, "");
    assert!(!converted(&short).contains(&slot_of(&short, "jge %r5, %r0")));
    assert_eq!(check_program(program(&src, vec![]), u64::MAX).result, Ok(0));
}
