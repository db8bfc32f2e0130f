//! An unchecked loop copy whose own accesses do not use the region caches points them
//! at the stack at the top of every iteration (so their old values are not carried
//! around the loop): the inner loops' checked accesses then miss and refill, with the
//! caches' exact bounds, and value, trap (pc, kind) and fuel stay the interpreter's at
//! every budget.

use super::loop_tests::sweep;
use super::*;

/// Each versioned loop of `src`'s entry: its header and whether its unchecked copy
/// starts every iteration with the caches at the stack.
fn fresh_caches(src: &str) -> Vec<(u32, bool)> {
    let p = program(src, vec![]);
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    crate::loops::plan_loops(p.insns(), &plan.functions[0], !plan.calls_helpers)
        .into_iter()
        .map(|l| (l.header, l.fresh_caches))
        .collect()
}

/// A scan of region 2 (`text[i]`, unchecked) that, at every `i` divisible by 4 and
/// below `n`, reads a stack address hidden in region 2 (r10 - 24, read back from
/// `text[56]` at a constant offset, unchecked, so no analysis knows it is a stack
/// address) and runs an inner loop of two iterations `j` making two checked loads: 8
/// bytes at that address plus `i` (the first access through the read cache in the
/// iteration, so the one that meets the caches the unchecked copy pointed at the
/// stack), then a byte of region 3 at `j + extra` (`extra` a register or 0; the inner loop
/// leaves at a byte 255, which region 3 does not hold: a search, not versioned itself). The stack's
/// last 24 bytes hold `1..=8` three times. `i = 20` reads the stack at r10 - 4: 4 bytes
/// past its end.
fn scan_with_hidden_stack_reads(n: u32, extra: &str) -> String {
    format!(
        "mov %r0, 0\nmov %r9, %r10\nadd %r9, -24\nstxdw [%r1+56], %r9\n\
         lddw %r8, 0x0807060504030201\nstxdw [%r10-24], %r8\nstxdw [%r10-16], %r8\n\
         stxdw [%r10-8], %r8\nmov %r6, 0\n\
         outer:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nand %r5, 3\n\
         jne %r5, 0, next\nmov %r7, 0\nldxdw %r9, [%r1+56]\nadd %r9, %r6\n\
         inner:\nldxdw %r5, [%r9+0]\nadd %r0, %r5\n\
         mov %r5, %r3\nadd %r5, %r7\nadd %r5, {extra}\nldxb %r5, [%r5+0]\n\
         jeq %r5, 255, next\nadd %r0, %r5\nadd %r7, 1\njlt %r7, 2, inner\n\
         next:\nadd %r6, 1\njlt %r6, {n}, outer\nexit"
    )
}

/// Slots of the loads in [`scan_with_hidden_stack_reads`].
const REGION3_LOAD: u32 = 23;
const STACK_LOAD: u32 = 18;

#[test]
fn a_loop_whose_accesses_skip_the_caches_starts_each_iteration_with_fresh_caches() {
    // The scan's load is its only access outside the inner loop: unchecked.
    let scan = scan_with_hidden_stack_reads(20, "0");
    assert_eq!(fresh_caches(&scan), vec![(10, true)]);
    // A strided sum: no checked access at all.
    let sum = "mov %r0, 0\nmov %r6, %r1\nmov %r7, 0\n\
               loop:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nadd %r7, 1\n\
               jlt %r7, 60, loop\nexit";
    assert_eq!(fresh_caches(sum), vec![(3, true)]);
    // A table load at a loaded index in the loop itself goes through the read cache at
    // every iteration: the caches keep what they hold.
    let lookup = sum.replace(
        "add %r0, %r3\n",
        "mov %r5, %r3\nand %r5, 15\nadd %r5, %r2\nldxb %r5, [%r5+0]\nadd %r0, %r5\n",
    );
    let lookup = lookup.replace("mov %r0, 0\n", "mov %r0, 0\nmov %r2, %r3\n");
    assert_eq!(fresh_caches(&lookup), vec![(4, false)]);
    let out = sweep(&lookup);
    assert!(out.result.is_ok());
}

#[test]
fn inner_loops_refill_fresh_caches_with_exact_bounds_at_every_budget() {
    let stack_word = |i: u64| -> u64 {
        // The 8 bytes at r10 - 24 + i of `1..=8` repeated.
        (0..8).map(|k| ((i + k) % 8 + 1) << (8 * k)).sum()
    };
    // i = 0, 4, ..., 16: every read in bounds (r10 - 8 is the last whole word).
    let out = sweep(&scan_with_hidden_stack_reads(20, "0"));
    let want: u64 = (0..20)
        .step_by(4)
        .map(|i| 2 * stack_word(i) + 0x10 + 0x11)
        .fold(0u64, |a, b| a.wrapping_add(b));
    assert_eq!(out.result, Ok(want));
    // i = 20 reads 8 bytes at r10 - 4 through the read cache, which the unchecked copy
    // pointed at the stack: a hit would read past the stack; it must trap there.
    let out = sweep(&scan_with_hidden_stack_reads(24, "0"));
    assert_eq!(trap_of(&out).pc, STACK_LOAD);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
    // Region 3's byte at j + i runs past its 16 bytes at i = 16 (the stack read after
    // it would still be in bounds): the trap is the region 3 load's.
    let out = sweep(&scan_with_hidden_stack_reads(24, "%r6"));
    assert_eq!(trap_of(&out).pc, REGION3_LOAD);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}
