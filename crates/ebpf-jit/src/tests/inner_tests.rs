//! A versioned loop holding an inner loop leaves its unchecked copy where the inner
//! loop is entered (`translate/inner.rs`): the copy holds only the outer loop's own
//! paths, and its charges subtract without a check. Value, trap (pc, kind) and fuel stay
//! the interpreter's at every budget.

use super::loop_tests::sweep;
use super::*;

/// grep's shape by hand (`sdk/bench/grep.c` as clang lays it out): the scan's
/// iterations end in a shared `tail` with the one backward jump to the header, reached
/// from the scan (a byte not divisible by 8), from inside the inner match (a mismatch)
/// and after it, so the tail's charge is made after the inner loop on some paths and not
/// on others. At a byte divisible by 8 the inner loop compares up to `m - 1` following
/// bytes (`text[i + j] - j == text[i]`, always true on region 2's `0, 1, 2, ...`); `n`
/// bytes scanned; r0 counts the inner iterations.
fn scan_with_shared_tail(n: u32, m: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\n\
         head:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\nmov %r2, %r3\nand %r2, 7\n\
         jne %r2, 0, tail\nmov %r7, 1\n\
         inner:\nmov %r5, %r4\nadd %r5, %r7\nldxb %r8, [%r5+0]\nsub %r8, %r7\n\
         jne %r8, %r3, tail\nadd %r0, 1\nadd %r7, 1\njlt %r7, {m}, inner\n\
         tail:\nadd %r6, 1\njge %r6, {n}, done\nja head\n\
         done:\nexit"
    )
}

/// The scan is versioned around its byte load (slot 4) with fuel bounding its
/// iterations, the match loop (header at slot 9) is its inner loop, and the slot
/// leading only into the match (`mov %r7, 1`) is the copy's cold way out.
#[test]
fn a_scan_around_a_match_loop_knows_its_inner_loop() {
    let p = program(&scan_with_shared_tail(64, 4), vec![]);
    let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
    let loops = loops::plan_loops(p.insns(), &plan.functions[0], !plan.calls_helpers);
    assert_eq!(loops.len(), 1);
    let l = &loops[0];
    assert_eq!((l.header, l.accesses[0].pc), (2, 4));
    assert!(loops::iteration_cost(p.insns(), &plan.functions[0], l).is_some());
    assert_eq!(l.inner.keys().copied().collect::<Vec<_>>(), vec![9]);
    assert_eq!(l.inner[&9], (9..=16).collect());
    assert_eq!(l.to_inner, BTreeSet::from([8]));
    // Without the copy leaving at the match, the tail's charge (`ja head`) would keep
    // its check.
    assert!(l.checked_charges.contains(&19));
}

/// Every budget, including traps inside the match (past the region's end) and at the
/// scan's own load, matches the interpreter: the match runs in the checked loop, and the
/// copy's unchecked charges never outrun the slice.
#[test]
fn a_scan_around_a_match_loop_matches_at_every_budget() {
    let want = |n: u64, m: u64| (0..n).filter(|i| i % 8 == 0).count() as u64 * (m - 1).max(1);
    for (n, m) in [(1, 2), (9, 3), (17, 8), (57, 8), (64, 1), (64, 2), (64, 6)] {
        let out = sweep(&scan_with_shared_tail(n, m));
        assert_eq!(out.result, Ok(want(u64::from(n), u64::from(m))), "{n} {m}");
    }
    // The last match runs past the region's end (56 + 8): the trap is at the match's
    // load, in the checked loop the copy left for.
    let out = sweep(&scan_with_shared_tail(64, 9));
    assert_eq!(trap_of(&out).pc, 11);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
    // The scan runs past the end: its guard stops the copy, the checked loop traps.
    let out = sweep(&scan_with_shared_tail(70, 2));
    assert_eq!(trap_of(&out).pc, 4);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

/// popsum's shape: a bit count (`x &= x - 1`) inside a scan, entered at almost every
/// byte and touching no memory: the copy keeps it (no inner loop to leave at), and its
/// charges keep their checks.
fn scan_with_bit_count(n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\n\
         outer:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\njeq %r3, 0, next\n\
         inner:\nmov %r2, %r3\nsub %r2, 1\nand %r3, %r2\nadd %r0, 1\njne %r3, 0, inner\n\
         next:\nadd %r6, 1\njlt %r6, {n}, outer\nexit"
    )
}

#[test]
fn a_scan_around_a_loop_without_memory_keeps_it_in_its_unchecked_copy() {
    let p = program(&scan_with_bit_count(64), vec![]);
    let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
    let loops = loops::plan_loops(p.insns(), &plan.functions[0], !plan.calls_helpers);
    assert_eq!(loops.len(), 1);
    assert!(loops[0].inner.is_empty() && loops[0].to_inner.is_empty());
    assert!(!loops[0].checked_charges.is_empty());
    let ones = |n: u64| (0..n).map(|b| u64::from(b.count_ones())).sum::<u64>();
    assert_eq!(sweep(&scan_with_bit_count(64)).result, Ok(ones(64)));
    let out = sweep(&scan_with_bit_count(66));
    assert_eq!(trap_of(&out).pc, 4);
}
