//! Loop guards: the accesses through one pointer form bound as one span of bytes
//! (`loops::guard_spans`), and loops inside other loops versioned when their stack
//! accesses are proven inside the frame by the value ranges. Each shape is run past the
//! end of its region at every fuel budget: the unchecked copy must stop where the
//! interpreter traps, at the same pc with the same fuel.

use super::loop_tests::sweep;
use super::*;
use crate::loops::{guard_spans, LoopAccess};

fn access(pc: u32, r: usize, k: i64, size: u8, write: bool) -> LoopAccess {
    let mut coef = [0; 11];
    coef[r] = 1;
    LoopAccess {
        pc,
        coef,
        k,
        reach: 0,
        stride: 8,
        size,
        write,
        stack: false,
    }
}

#[test]
fn accesses_through_one_pointer_share_a_span() {
    // Eight byte loads at r6 + 3 ... r6 + 10 (out of order), a word store at r6 + 0, a
    // load through r7, and one 8 KiB away from the rest.
    let mut accesses: Vec<LoopAccess> = [5, 3, 4, 6, 7, 8, 9, 10]
        .iter()
        .enumerate()
        .map(|(i, &k)| access(i as u32 + 1, 6, k, 1, false))
        .collect();
    accesses.push(access(20, 6, 0, 4, true));
    accesses.push(access(21, 7, 0, 8, false));
    accesses.push(access(22, 6, 8192, 2, false));
    let spans: Vec<(Vec<u32>, i64, i64, bool)> = guard_spans(&accesses)
        .into_iter()
        .map(|s| (s.pcs, s.k, s.len, s.write))
        .collect();
    assert_eq!(
        spans,
        vec![
            (vec![21], 0, 8, false),
            (vec![2, 3, 1, 4, 5, 6, 7, 8], 3, 8, false),
            (vec![22], 8192, 2, false),
            (vec![20], 0, 4, true),
        ]
    );
}

/// Builds a little-endian word from the 8 bytes at region 2 + `start` + 8i for i in
/// 0..`words`, xoring them into r0: clang's unrolled `word |= p[k + j] << 8j`, eight
/// loads through one pointer.
fn words(start: i32, words: u32) -> String {
    let mut body = String::new();
    for j in 0..8 {
        body += &format!("ldxb %r3, [%r6+{j}]\nlsh %r3, {}\nor %r4, %r3\n", 8 * j);
    }
    format!(
        "mov %r0, 0\nmov %r6, %r1\nadd %r6, {start}\nmov %r7, 0\n\
         loop:\nmov %r4, 0\n{body}xor %r0, %r4\nadd %r6, 8\nadd %r7, 1\n\
         jlt %r7, {words}, loop\nexit"
    )
}

#[test]
fn a_span_of_loads_traps_at_the_first_byte_out_of_bounds() {
    // The loop at slot 4 makes its eight loads unchecked, guarded as one span.
    let plans = unchecked_accesses(&words(0, 8));
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0].1.len(), 8);
    let p = program(&words(0, 8), vec![]);
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    let l = crate::loops::plan_loops(p.insns(), &plan.functions[0], true);
    assert_eq!(guard_spans(&l[0].accesses).len(), 1);
    // Region 2 holds 64 bytes: 8 words fit from 0; from 4, the eighth word's fifth
    // byte (slot 5 + 3 * 4) is the first past the end; from -1, the first load traps.
    let want = (0..8u64).fold(0, |a, i| {
        a ^ (0..8).fold(0, |w, j| w | (8 * i + j) << (8 * j))
    });
    assert_eq!(sweep(&words(0, 8)).result, Ok(want));
    for (start, n, pc) in [(4, 8, 5 + 3 * 4), (0, 9, 5), (-1, 2, 5), (60, 1, 5 + 3 * 4)] {
        let out = sweep(&words(start, n));
        assert_eq!(trap_of(&out).pc, pc, "start {start}, {n} words");
    }
}

/// A histogram of the low 3 bits of `blocks` blocks of 8 bytes of region 2 in eight
/// counters on the stack (`cnt[p[8b + k] & 7]++`), the inner loop over a block inside
/// the loop over blocks; r0 is the counters weighted by their index.
fn block_histogram(blocks: u32) -> String {
    format!(
        "stdw [%r10-8], 0\nstdw [%r10-16], 0\nstdw [%r10-24], 0\nstdw [%r10-32], 0\n\
         mov %r6, %r1\nmov %r8, 0\n\
         outer:\nmov %r7, 0\n\
         inner:\nmov %r4, %r6\nadd %r4, %r7\nldxb %r3, [%r4+0]\nand %r3, 7\nlsh %r3, 2\n\
         mov %r9, %r10\nadd %r9, -32\nadd %r9, %r3\nldxw %r5, [%r9+0]\nadd %r5, 1\n\
         stxw [%r9+0], %r5\nadd %r7, 1\njlt %r7, 8, inner\n\
         add %r6, 8\nadd %r8, 1\njlt %r8, {blocks}, outer\n\
         mov %r0, 0\nmov %r7, 0\nmov %r9, %r10\nadd %r9, -32\n\
         sum:\nldxw %r5, [%r9+0]\nmul %r5, %r7\nadd %r0, %r5\nadd %r9, 4\nadd %r7, 1\n\
         jlt %r7, 8, sum\nexit"
    )
}

#[test]
fn a_stack_histogram_inside_a_block_loop_is_versioned() {
    // The inner loop (header at slot 7) goes unchecked: its input load (slot 9) moves
    // a byte per iteration; the counter's load and store are proven in the frame.
    let plans = unchecked_accesses(&block_histogram(8));
    assert!(plans.contains(&(7, vec![(9, 1)])), "{plans:?}");
    // Region 2 is 0, 1, ..., 63: each counter counts 8 bytes.
    let want: u64 = (0..8).map(|i| 8 * i).sum();
    assert_eq!(sweep(&block_histogram(8)).result, Ok(want));
    // A ninth block reads past the region: the load traps at its first byte.
    let out = sweep(&block_histogram(9));
    assert_eq!(trap_of(&out).pc, 9);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

/// A scatter of each byte of `blocks` blocks of 8 bytes of region 2 into a stack buffer
/// at an index loaded from the data (`out[8 p[i]] = p[i]`, past the frame's top for a
/// byte of 8 or more), the inner loop over a block inside the loop over blocks; r0 sums
/// the words stored.
fn block_scatter(blocks: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, %r1\nmov %r8, 0\n\
         outer:\nmov %r7, 0\n\
         inner:\nmov %r4, %r6\nadd %r4, %r7\nldxb %r3, [%r4+0]\nmov %r2, %r3\nlsh %r2, 3\n\
         mov %r9, %r10\nadd %r9, -64\nadd %r9, %r2\nstxdw [%r9+0], %r3\nldxdw %r5, [%r9+0]\n\
         add %r0, %r5\nadd %r7, 1\njlt %r7, 8, inner\n\
         add %r6, 8\nadd %r8, 1\njlt %r8, {blocks}, outer\nexit"
    )
}

#[test]
fn a_scatter_into_the_stack_inside_a_block_loop_is_versioned() {
    // The inner loop (header at slot 4) goes unchecked: its input load (slot 6) moves a
    // byte per iteration; the store and load at a loaded index keep the stack's check.
    let plans = unchecked_accesses(&block_scatter(1));
    assert!(plans.contains(&(4, vec![(6, 1)])), "{plans:?}");
    assert_eq!(sweep(&block_scatter(1)).result, Ok((0..8).sum()));
    // The second block's first byte is 8: its store lands past the frame and traps.
    let out = sweep(&block_scatter(2));
    assert_eq!(trap_of(&out).pc, 12);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

#[test]
fn a_scatter_between_stack_buffers_inside_a_block_loop_stays_unversioned() {
    // The same scatter reading its bytes from the stack: the versioned copy would leave
    // every region access as it was (the stack's checks stay), so the inner loop (now at
    // slot 5) keeps one copy.
    let src = block_scatter(2).replace("mov %r6, %r1", "mov %r6, %r10\nadd %r6, -128");
    let plans = unchecked_accesses(&src);
    assert!(plans.iter().all(|(h, _)| *h != 5), "{plans:?}");
    assert_eq!(sweep(&src).result, Ok(0));
}
