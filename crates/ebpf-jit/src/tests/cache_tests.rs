//! Accesses through a stack address no analysis knows (read back from a region): a
//! loop the guard bounds by the stack region, whose checked loop goes on past the
//! stack's end, and an outer scan whose inner search reads through such a pointer. The
//! region caches' bounds are what stops them there: value, trap (pc, kind) and fuel
//! stay the interpreter's at every budget.

use super::loop_tests::sweep;
use super::*;

/// The stack's last 40 bytes set to `1..=8` five times, and r10 - 40 hidden in region
/// 2 (`text[56]`), then read back into r6, so no analysis knows r6 is a stack address:
/// its accesses go through the read cache.
const HIDDEN_STACK: &str = "mov %r9, %r10\nadd %r9, -40\nstxdw [%r1+56], %r9\n\
     lddw %r8, 0x0807060504030201\nstxdw [%r10-40], %r8\nstxdw [%r10-32], %r8\n\
     stxdw [%r10-24], %r8\nstxdw [%r10-16], %r8\nstxdw [%r10-8], %r8\n\
     mov %r0, 0\nldxdw %r6, [%r1+56]\n";

/// The 8 bytes at r10 - 40 + `o` of [`HIDDEN_STACK`].
fn stack_word(o: u64) -> u64 {
    (0..8).map(|k| ((o + k) % 8 + 1) << (8 * k)).sum()
}

/// Sums `n` words read 4 bytes apart from r10 - 40 through r6 (a strided access the
/// guard bounds by the stack region: 9 iterations end at r10 - 8, the 10th reads 4
/// bytes past r10).
fn hidden_stack_sum(n: u32) -> String {
    format!(
        "{HIDDEN_STACK}mov %r7, 0\n\
         loop:\nldxdw %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 4\nadd %r7, 1\n\
         jlt %r7, {n}, loop\nexit"
    )
}

/// Slot of the load in [`hidden_stack_sum`].
const SUM_LOAD: u32 = 13;

#[test]
fn a_strided_loop_through_a_hidden_stack_pointer_traps_past_the_stack_at_every_budget() {
    let out = sweep(&hidden_stack_sum(9));
    let want = (0..9).fold(0u64, |a, k| a.wrapping_add(stack_word(4 * k)));
    assert_eq!(out.result, Ok(want));
    // The guard lets the unchecked copy run the 9 words inside the stack; the 10th is
    // read by the checked loop through the read cache: its last 4 bytes lie past the
    // stack, so it must trap there (a cache hit would read them).
    let out = sweep(&hidden_stack_sum(10));
    assert_eq!(trap_of(&out).pc, SUM_LOAD);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

/// A scan of region 2 (`text[i]`, unchecked) that, at every `i` divisible by 4 and
/// below `n`, runs an inner search of two iterations `j` making two checked loads: 8
/// bytes at r10 - 40 + `i` (through the hidden pointer), then a byte of region 3 at
/// `j + extra` (`extra` a register or 0; the search leaves at a byte 255, which region 3
/// does not hold). `i = 36` reads the stack at r10 - 4: 4 bytes past its end.
fn scan_with_hidden_stack_reads(n: u32, extra: &str) -> String {
    format!(
        "{HIDDEN_STACK}mov %r9, %r6\nmov %r6, 0\n\
         outer:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nand %r5, 3\n\
         jne %r5, 0, next\nmov %r7, 0\nmov %r2, %r9\nadd %r2, %r6\n\
         inner:\nldxdw %r5, [%r2+0]\nadd %r0, %r5\n\
         mov %r5, %r3\nadd %r5, %r7\nadd %r5, {extra}\nldxb %r5, [%r5+0]\n\
         jeq %r5, 255, next\nadd %r0, %r5\nadd %r7, 1\njlt %r7, 2, inner\n\
         next:\nadd %r6, 1\njlt %r6, {n}, outer\nexit"
    )
}

#[test]
fn inner_searches_through_the_caches_match_at_every_budget() {
    let out = sweep(&scan_with_hidden_stack_reads(36, "0"));
    let want = (0..36)
        .step_by(4)
        .map(|i| 2 * stack_word(i) + 0x10 + 0x11)
        .fold(0u64, |a, b| a.wrapping_add(b));
    assert_eq!(out.result, Ok(want));
    let out = sweep(&scan_with_hidden_stack_reads(40, "0"));
    assert_eq!(trap_of(&out).pc, 22);
    // Region 3's byte at j + i runs past its 16 bytes at i = 16.
    let out = sweep(&scan_with_hidden_stack_reads(40, "%r6"));
    assert_eq!(trap_of(&out).pc, 27);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}
