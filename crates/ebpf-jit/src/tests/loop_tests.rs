//! Loops holding other loops: the outer loop's strided accesses go unchecked while the
//! inner loops run checked inside its unchecked copy, and value, trap (pc, kind) and
//! fuel stay the interpreter's at every budget.

use super::*;

/// Runs `src` on every engine once with all the fuel it needs, then on the interpreter
/// and the JIT (each compiled once) at every budget up to one past that, requiring the
/// same outcome and memory; returns the full run's outcome.
pub(super) fn sweep(src: &str) -> RunOutcome {
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    let interp = Interpreter::new(p.clone());
    let jit = JitProgram::compile(p).unwrap_or_else(|e| panic!("{e}"));
    for fuel in 0..=full.fuel_used + 1 {
        assert_eq!(run_on(&jit, fuel), run_on(&interp, fuel), "fuel {fuel}");
    }
    full
}

/// grep's shape by hand: a scan over region 2 (`text[i]`, stride 1) that, at every
/// byte divisible by 8, runs an inner loop comparing up to `m - 1` following bytes
/// (`text[i + j] - j == text[i]`, always true on region 2's `0, 1, 2, ...`); `n` bytes
/// scanned. r0 counts the inner iterations.
fn scan_with_match(n: u32, m: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\n\
         outer:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\nmov %r2, %r3\nand %r2, 7\n\
         jne %r2, 0, next\nmov %r7, 1\n\
         inner:\nmov %r5, %r4\nadd %r5, %r7\nldxb %r8, [%r5+0]\nsub %r8, %r7\n\
         jne %r8, %r3, next\nadd %r0, 1\nadd %r7, 1\njlt %r7, {m}, inner\n\
         next:\nadd %r6, 1\njlt %r6, {n}, outer\nexit"
    )
}

/// The outer scan of [`scan_with_match`] is versioned (its load at slot 4, stride 1);
/// the inner match's load (slot 11) moves with `j`, which the inner loop changes, so it
/// stays checked, and the inner loop on its own (a search on loaded data, nested) is not
/// versioned.
#[test]
fn an_outer_loop_holding_a_search_loop_is_versioned() {
    assert_eq!(
        unchecked_accesses(&scan_with_match(64, 4)),
        vec![(2, vec![(4, 1)])]
    );
    // With a data-indexed load outside the match (`text[text[i]]`, checked), the scan
    // is left as it was: its guard would remove one check of two.
    let indexed = scan_with_match(64, 4).replace(
        "mov %r2, %r3\n",
        "mov %r2, %r1\nadd %r2, %r3\nldxb %r2, [%r2+0]\nmov %r2, %r3\n",
    );
    assert_eq!(unchecked_accesses(&indexed), vec![]);
    assert!(sweep(&indexed).result.is_ok());
}

#[test]
fn an_outer_loop_holding_a_search_loop_matches_at_every_budget() {
    // A do-while match: at least one inner iteration.
    let want = |n: u64, m: u64| (0..n).filter(|i| i % 8 == 0).count() as u64 * (m - 1).max(1);
    for (n, m) in [(1, 2), (9, 3), (17, 8), (57, 8), (64, 1), (64, 2)] {
        let out = sweep(&scan_with_match(n, m));
        assert_eq!(out.result, Ok(want(u64::from(n), u64::from(m))), "{n} {m}");
    }
    // The last inner match runs past the region's end (56 + 8): it traps at the inner
    // load, which the outer loop's guard does not cover.
    let out = sweep(&scan_with_match(64, 9));
    assert_eq!(trap_of(&out).pc, 11);
    // The scan itself runs past the end: the unchecked copy stops where the guard's
    // bound does, and the checked loop traps at the outer load.
    let out = sweep(&scan_with_match(70, 2));
    assert_eq!(trap_of(&out).pc, 4);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

/// An outer loop (`r9` counts its iterations, and `text[r9]` is read) around a search
/// that reads `*r6` and moves `r6` on until it has read a byte that is 3 mod 4: 4 bytes
/// per outer iteration. Without looking along the inner back-edge, `r6` would seem to
/// move 1 byte per outer iteration, and its load would go unchecked.
fn pointer_moved_inside(n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, %r1\nmov %r9, 0\n\
         outer:\nmov %r4, %r1\nadd %r4, %r9\nldxb %r3, [%r4+0]\nadd %r0, %r3\nmov %r7, 0\n\
         inner:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nand %r3, 3\njne %r3, 3, inner\n\
         add %r9, 1\njlt %r9, {n}, outer\nexit"
    )
}

#[test]
fn a_register_an_inner_loop_changes_is_not_an_induction_variable() {
    // Only `text[r9]` (slot 5) goes unchecked, not `*r6` (slot 8).
    assert_eq!(
        unchecked_accesses(&pointer_moved_inside(8)),
        vec![(3, vec![(5, 1)])]
    );
    let want: u64 = (0..16u64).map(|i| 17 * i + 6).sum();
    assert_eq!(sweep(&pointer_moved_inside(16)).result, Ok(want));
    // The search leaves the region in the 17th outer iteration.
    let out = sweep(&pointer_moved_inside(20));
    assert_eq!(trap_of(&out).pc, 8);
}

/// An outer loop with an affine access around a counted inner loop over the same
/// region that is versioned on its own.
fn rows_of_sums(rows: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, %r1\nmov %r9, 0\n\
         outer:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nmov %r7, 0\n\
         inner:\nmov %r4, %r6\nadd %r4, %r7\nldxb %r3, [%r4+0]\nadd %r0, %r3\n\
         add %r7, 1\njlt %r7, 8, inner\n\
         add %r6, 8\nadd %r9, 1\njlt %r9, {rows}, outer\nexit"
    )
}

#[test]
fn an_outer_loop_is_not_versioned_around_a_versioned_inner_loop() {
    // The inner loop (header at slot 6) keeps its plan; the outer one, which could
    // make its own load at slot 3 unchecked, is left checked.
    let plans = unchecked_accesses(&rows_of_sums(8));
    assert_eq!(plans, vec![(6, vec![(8, 1)])]);
    let want: u64 = (0..8u64)
        .map(|r| 8 * r + (0..8).map(|j| 8 * r + j).sum::<u64>())
        .sum();
    assert_eq!(sweep(&rows_of_sums(8)).result, Ok(want));
    let out = sweep(&rows_of_sums(9));
    assert_eq!(trap_of(&out).pc, 3);
}

/// Runs `p` with region 2 holding `bytes` (read-only; r1 its address, r2 its length)
/// on the interpreter and the JIT at every budget up to one past what it needs, and
/// requires the same outcome; returns the full run's.
fn sweep_on_input(p: &Arc<VerifiedProgram>, bytes: &[u8]) -> RunOutcome {
    sweep_on_input_r2(p, bytes, bytes.len() as u64)
}

/// [`sweep_on_input`] with r2 = `r2` instead of the input's length.
pub(super) fn sweep_on_input_r2(p: &Arc<VerifiedProgram>, bytes: &[u8], r2: u64) -> RunOutcome {
    let run = |engine: &dyn Engine, fuel: u64| {
        let mut map = MemoryMap::new();
        let a = map.map_read_only(RegionIdx(2), bytes).unwrap();
        let opts = RunOptions {
            fuel,
            ..RunOptions::default()
        };
        engine.run(&mut map, [a, r2, 0, 0, 0], &opts, &mut TestHost)
    };
    let interp = Interpreter::new(p.clone());
    let jit = JitProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let full = run(&interp, u64::MAX);
    assert_eq!(run(&jit, u64::MAX), full, "the whole run");
    for fuel in 0..=full.fuel_used + 1 {
        assert_eq!(run(&jit, fuel), run(&interp, fuel), "fuel {fuel}");
    }
    full
}

/// `sdk/bench/grep.c`'s input: the pattern in the header (length at 16, bytes from
/// 24), then `text` from byte 64 (its length at 8).
fn grep_input(pattern: &[u8], text: &[u8]) -> Vec<u8> {
    let mut input = vec![0u8; 64];
    input[8..16].copy_from_slice(&(text.len() as u64).to_le_bytes());
    input[16..24].copy_from_slice(&(pattern.len() as u64).to_le_bytes());
    input[24..24 + pattern.len()].copy_from_slice(pattern);
    input.extend_from_slice(text);
    input
}

/// The grep kernel as clang compiles it: a scan with two backward jumps into its middle
/// and a pattern match loop inside. Its scan is versioned, and it matches the
/// interpreter at every budget, also when the header claims more text than the region
/// holds (the scan traps at its load past the end).
#[test]
fn the_grep_kernel_matches_at_every_budget() {
    let p = program(GREP_KERNEL, vec![]);
    let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
    let loops = loops::plan_loops(p.insns(), &plan.functions[0], !plan.calls_helpers);
    assert_eq!(loops.len(), 1);
    assert!(loops[0].body.len() > 30, "the scan, not the match");
    // Fuel bounds its iterations; the match loop's charges keep their check.
    assert!(loops[0].fuel.is_some());
    assert!(!loops[0].checked_charges.is_empty());
    let text = b"ab abc\nxabcab\n\nabab abc abcabc\nno\nabc";
    let out = sweep_on_input(&p, &grep_input(b"abc", text));
    assert!(out.result.is_ok());
    let mut long = grep_input(b"ab", text);
    long[8..16].copy_from_slice(&(text.len() as u64 + 3).to_le_bytes());
    let out = sweep_on_input(&p, &long);
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

/// cksum's shape: each term is built in r3, added to the sum in r0 and copied back
/// (`add %r3, %r0; mov %r0, %r3`), so r0 is read in each copy's block before that block
/// has its value; in 64-bit arithmetic, or in 32-bit as clang writes `u32 sum +=
/// (b[2i] << 8) | b[2i+1]` (`add32 %r3, %r0; mov32 %r0, %r3`), where both operands of
/// the addition are narrowed copies made for it, the term's first, so the group orders
/// them by the values they were narrowed from. The sum comes first in each addition, so
/// the group computes its 16 terms one after the other instead of all of them before
/// the first addition (which spilled most of them: 2,736 code bytes in 64-bit, 2,656
/// in 32-bit; 2,416 in order).
#[test]
fn an_unrolled_reduction_through_a_register_copy_keeps_its_terms_in_registers() {
    for w in ["", "32"] {
        let src = format!(
            "mov %r0, 0\nmov %r2, 0\nmov %r6, %r1\nmov %r7, 0\n\
             loop:\nldxh %r4, [%r6+0]\nadd %r2, %r4\nldxb %r3, [%r6+0]\nlsh{w} %r3, 8\n\
             ldxb %r5, [%r6+1]\nor{w} %r3, %r5\nadd{w} %r3, %r0\nmov{w} %r0, %r3\n\
             add %r6, 2\nadd %r7, 1\njlt %r7, 32, loop\nxor %r0, %r2\nexit"
        );
        assert_eq!(unroll_plans(&src).len(), 1);
        let out = sweep(&src);
        let words = (0..32u64).map(|i| (2 * i, 2 * i + 1));
        let sum: u64 = words.clone().map(|(a, b)| (a << 8) | b).sum();
        let le: u64 = words.map(|(a, b)| a | (b << 8)).sum();
        assert_eq!(out.result, Ok(sum ^ le));
        let jit = JitProgram::compile(program(&src, vec![])).unwrap();
        assert!(
            jit.code_size() < 2_560,
            "{w}: {} code bytes",
            jit.code_size()
        );
    }
}

/// A scan over region 2 (`text[i]`, stride 1, unchecked in the loop's unchecked copy)
/// that also reads region 3 at a data index (`ro[text[i] & mask]`, checked: the read
/// cache moves to region 3 inside the copy) and writes region 2 at a data index (the
/// write cache moves to region 2), then, after the loop, reads and writes through both
/// caches again; `n` bytes scanned.
fn scan_with_data_indexed_accesses(n: u32, mask: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nand %r5, {mask}\n\
         mov %r7, %r3\nadd %r7, %r5\nldxb %r8, [%r7+0]\nadd %r0, %r8\n\
         mov %r9, %r1\nadd %r9, %r5\nstxb [%r9+48], %r8\n\
         add %r6, 1\njlt %r6, {n}, loop\n\
         mov %r5, %r0\nand %r5, 15\nmov %r7, %r3\nadd %r7, %r5\nldxb %r8, [%r7+0]\n\
         add %r0, %r8\nmov %r5, %r0\nand %r5, 63\nmov %r7, %r1\nadd %r7, %r5\n\
         ldxb %r8, [%r7+0]\nadd %r0, %r8\nmov %r5, %r0\nand %r5, 31\nmov %r7, %r1\n\
         add %r7, %r5\nstxb [%r7+0], %r0\nexit"
    )
}

/// Data-indexed accesses inside a versioned loop's unchecked copy move the region
/// caches to other regions: the caches the copy left are the ones the code after it
/// checks with, and value, memory, trap (pc, address) and fuel stay the interpreter's
/// at every budget.
#[test]
fn region_caches_moved_inside_an_unchecked_copy_serve_the_code_after_it() {
    let src = scan_with_data_indexed_accesses(40, 15);
    assert_eq!(unchecked_accesses(&src), vec![(2, vec![(4, 1)])]);
    let full = sweep(&src);
    assert!(full.result.is_ok());
    // Region 3 holds 16 bytes: with a mask of 31 the data index passes its end at
    // `text[16]`, inside the unchecked copy, at the checked load (slot 8).
    let out = sweep(&scan_with_data_indexed_accesses(40, 31));
    let (pc, kind) = (trap_of(&out).pc, &trap_of(&out).kind);
    let past_end = (3 << 32) + 16;
    assert!(
        pc == 8
            && matches!(kind, TrapKind::OutOfBounds { addr, size: 1, write: false } if *addr == past_end),
        "{pc} {kind:?}"
    );
    // The scan leaves region 2 (64 bytes) at `text[64]`: the checked loop traps at the
    // strided load (slot 4) after the unchecked copy ran out.
    let out = sweep(&scan_with_data_indexed_accesses(70, 15));
    assert_eq!(trap_of(&out).pc, 4);
}

/// A 32-bit sum of zero-extended byte, halfword and word loads over `n` bytes of a
/// read-only region (cksum's shape: an unrolled group whose loads are pure values, the
/// sum used on both ways out of the loop, so each load is folded into its extension
/// after Cranelift's mid-end, `extend`), and a 64-bit sum of the bytes beside it.
fn narrow_sums(n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r2, 0\nmov %r6, %r1\nmov %r7, 0\n\
         loop:\nldxb %r3, [%r6+0]\nlsh32 %r3, 8\nldxb %r4, [%r6+1]\nor32 %r3, %r4\n\
         ldxh %r5, [%r6+0]\nadd32 %r3, %r5\nldxw %r5, [%r6+0]\nadd32 %r3, %r5\n\
         add32 %r0, %r3\nldxb %r4, [%r6+3]\nadd %r2, %r4\n\
         add %r6, 2\nadd %r7, 2\njlt %r7, {n}, loop\nlsh %r2, 32\nor %r0, %r2\nexit"
    )
}

/// Narrow loads folded into their extensions read what the interpreter reads, bytes
/// with the high bit set included (a sign extension, or a load one byte off, fails),
/// at every budget and every trip count around the group size; a scan that runs past
/// the region's end traps at the first load past it, with the interpreter's fuel.
#[test]
fn narrow_loads_folded_into_their_extensions_match_at_every_budget() {
    let bytes: Vec<u8> = (0..96u32).map(|i| (i * 37 + 0x80) as u8).collect();
    let at = |i: usize| u64::from(bytes[i]);
    for n in [2, 30, 32, 34, 64, 90] {
        let p = program(&narrow_sums(n), vec![]);
        assert_eq!(unroll_plans(&narrow_sums(n)).len(), 1);
        let out = sweep_on_input(&p, &bytes);
        let (mut sum, mut wide) = (0u32, 0u64);
        for i in (0..n as usize).step_by(2) {
            let half = (at(i) | at(i + 1) << 8) as u32;
            let word = half | ((at(i + 2) | at(i + 3) << 8) as u32) << 16;
            let term = ((at(i) << 8) as u32 | at(i + 1) as u32)
                .wrapping_add(half)
                .wrapping_add(word);
            sum = sum.wrapping_add(term);
            wide += at(i + 3);
        }
        assert_eq!(out.result, Ok(u64::from(sum) | wide << 32), "{n} bytes");
    }
    // 96 bytes mapped: the word load (slot 10) at 94 reads past the end.
    let out = sweep_on_input(&program(&narrow_sums(120), vec![]), &bytes);
    let trap = trap_of(&out);
    let at_94 = (2 << 32) + 94;
    assert!(
        trap.pc == 10
            && matches!(trap.kind, TrapKind::OutOfBounds { addr, size: 4, write: false } if addr == at_94),
        "{trap:?}"
    );
}

/// knn's shape (`sdk/bench/knn.c`): for each of `n` points of `dim` words after a
/// query of `dim` words, an inner loop sums `p[k] - q[k]`. The query's address does not
/// change in the outer loop.
fn distances(dim: u32, n: u32) -> String {
    let bytes = 4 * dim;
    format!(
        "mov %r0, 0\nmov %r6, %r1\nmov %r7, %r1\nadd %r7, {bytes}\nmov %r8, 0\n\
         outer:\nmov %r2, 0\n\
         inner:\nmov %r3, %r6\nadd %r3, %r2\nldxw %r4, [%r3+0]\n\
         mov %r3, %r7\nadd %r3, %r2\nldxw %r5, [%r3+0]\n\
         sub %r5, %r4\nadd %r0, %r5\nadd %r2, 4\njne %r2, {bytes}, inner\n\
         add %r7, {bytes}\nadd %r8, 1\njlt %r8, {n}, outer\nexit"
    )
}

/// The inner loop is versioned on both loads; the query's region (the same at every
/// point) is looked up once, outside both loops, not at every point: the region table
/// is read with flags that let the mid-end move the read out of the outer loop.
#[test]
fn an_inner_loops_invariant_region_is_looked_up_outside_the_outer_loop() {
    use cranelift_codegen::ir::{InstructionData, Opcode};
    let (dim, n) = (8u32, 7u32);
    assert_eq!(
        unchecked_accesses(&distances(dim, n)),
        vec![(6, vec![(8, 4), (11, 4)])]
    );
    let bytes: Vec<u8> = (0..4 * dim * (n + 1)).map(|i| (i * 29 + 3) as u8).collect();
    let word = |i: u32| {
        let i = i as usize * 4;
        u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap())
    };
    let want = (1..=n)
        .flat_map(|pt| (0..dim).map(move |k| (pt, k)))
        .fold(0u64, |s, (pt, k)| {
            s.wrapping_add(u64::from(word(pt * dim + k)).wrapping_sub(u64::from(word(k))))
        });
    let p = program(&distances(dim, n), vec![]);
    let funcs = crate::translated::optimized(|| {
        assert_eq!(sweep_on_input(&p, &bytes).result, Ok(want));
    });
    // One past the input: the last point's load (slot 11) traps, at every budget alike.
    let out = sweep_on_input(&program(&distances(dim, n + 1), vec![]), &bytes);
    assert_eq!(trap_of(&out).pc, 11);
    assert!(!funcs.is_empty());
    for func in &funcs {
        let (_, loops) = crate::hoist::analyses(func);
        // Reads of a row's readable length from the region table, outside every loop.
        let table_row = |inst| {
            let data = func.dfg.insts[inst];
            let table = data
                .alias_region(&func.dfg)
                .is_some_and(|r| func.dfg.alias_regions[r].user_id == 2);
            table
                && matches!(data, InstructionData::Load {
                    opcode: Opcode::Load,
                    offset,
                    ..
                } if i32::from(offset) == csx_ebpf::memory::RegionEntry::OFFSET_READ_LEN)
        };
        let outside = func
            .layout
            .blocks()
            .filter(|&block| loops.innermost_loop(block).is_none())
            .flat_map(|block| func.layout.block_insts(block))
            .filter(|&inst| table_row(inst))
            .count();
        assert_eq!(outside, 1, "{}", func.display());
    }
}

/// A little-endian word assembled from the bytes at `i`, `i | 1`, `i | 2`, `i | 3` past
/// region 2 + `base` (clang's `p[i] | p[i + 1] << 8 | ...` where `i` steps by 4),
/// summed while `i < end`, `i` from `start` by 4.
fn words_from_bytes(base: u32, start: u32, end: u32) -> String {
    let byte = |k: u32| {
        format!(
            "mov %r5, %r6\nor %r5, {k}\nmov %r4, %r1\nadd %r4, %r5\nldxb %r2, [%r4+0]\n\
             lsh %r2, {}\nor %r3, %r2\n",
            8 * k
        )
    };
    format!(
        "mov %r0, 0\nmov %r6, {start}\nadd %r1, {base}\n\
         loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\n{}{}{}\
         add %r0, %r3\nadd %r6, 4\njlt %r6, {end}, loop\nexit",
        byte(1),
        byte(2),
        byte(3)
    )
}

#[test]
fn loads_at_an_index_ored_with_a_constant_are_strided() {
    // The four loads (slots 5, 10, 17, 24) move by 4 an iteration: `i | k` lies within
    // `k` bytes past `i`.
    let loads = vec![(5, 4), (10, 4), (17, 4), (24, 4)];
    assert_eq!(
        unchecked_accesses(&words_from_bytes(0, 0, 64)),
        vec![(3, loads)]
    );
    // Region 2 holds 0, 1, 2, ... 63. Every word inside it; past its end, a trap at the
    // first byte out: at `i | 0` (`i` = 64), or in the middle of a word (from 58, the
    // second word's `i | 2` = 64); an odd start, where `i | 1` is `i` itself. At every
    // budget.
    let word = |base: u64, i: u64| {
        (0..4)
            .map(|k| ((base + (i | k)) & 0xff) << (8 * k))
            .sum::<u64>()
    };
    for (base, start, end, trap_at) in [
        (0, 0, 64, None),
        (0, 0, 68, Some(64)),
        (0, 1, 65, None),
        (0, 1, 66, Some(65)),
        (58, 0, 4, None),
        (58, 0, 8, Some(64)),
    ] {
        let out = sweep(&words_from_bytes(base, start, end));
        let case = format!("base {base}, start {start}, end {end}");
        match trap_at {
            None => {
                let want: u64 = (u64::from(start)..u64::from(end))
                    .step_by(4)
                    .map(|i| word(u64::from(base), i))
                    .sum();
                assert_eq!(out.result, Ok(want), "{case}");
            }
            Some(at) => match trap_of(&out).kind {
                TrapKind::OutOfBounds {
                    addr, write: false, ..
                } => {
                    assert_eq!(addr & 0xffff_ffff, at, "{case}: the first byte out");
                }
                _ => panic!("{case}: {out:?}"),
            },
        }
    }
}

/// A scan over region 2 (`r1[i]`, `i` in r6, stride 1) that, at every byte divisible by
/// 8, spills `i` to `r10 - 16`, runs an inner loop that reuses r6, and reloads `i`, as
/// clang does when an inner loop needs the registers; `between` runs after the inner
/// loop, before the reload. r0 sums the bytes and the inner iterations.
fn spilled_around_inner(n: u32, between: &str) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\nadd %r0, %r3\n\
         mov %r2, %r3\nand %r2, 7\njne %r2, 0, next\n\
         stxdw [%r10-16], %r6\nmov %r6, 0\n\
         inner:\nadd %r6, 1\nadd %r0, 1\njlt %r6, 3, inner\n\
         {between}ldxdw %r6, [%r10-16]\n\
         next:\nadd %r6, 1\njlt %r6, {n}, loop\nexit"
    )
}

#[test]
fn an_index_spilled_around_an_inner_loop_is_an_induction_variable() {
    // The reload reads what the iteration stored: `i` stays an induction variable, so
    // the scan's load (slot 4) goes unchecked.
    assert_eq!(
        unchecked_accesses(&spilled_around_inner(64, "")),
        vec![(2, vec![(4, 1)])]
    );
    // A store that may overwrite the slot in between: through a pointer the value
    // ranges place on it, or through one they cannot place (r1, into region 2).
    for between in [
        "mov %r5, %r10\nadd %r5, -12\nstw [%r5+0], 9\n",
        "stxdw [%r1+0], %r3\n",
    ] {
        let src = spilled_around_inner(64, between);
        assert_eq!(unchecked_accesses(&src), vec![], "{between}");
        assert!(sweep(&src).result.is_ok());
    }
    // A store beside the slot keeps it.
    let beside = spilled_around_inner(64, "mov %r5, %r10\nadd %r5, -24\nstxdw [%r5+0], %r3\n");
    assert_eq!(unchecked_accesses(&beside), vec![(2, vec![(4, 1)])]);
    // Region 2 holds 0, 1, ... 63: at every budget, inside it and past its end.
    let want = |n: u64| (0..n).sum::<u64>() + 3 * (0..n).filter(|i| i % 8 == 0).count() as u64;
    for n in [1, 9, 64] {
        assert_eq!(
            sweep(&spilled_around_inner(n, "")).result,
            Ok(want(u64::from(n)))
        );
        assert_eq!(sweep(&beside).result, Ok(want(64)));
    }
    let out = sweep(&spilled_around_inner(70, ""));
    assert!(matches!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds { addr, write: false, .. } if addr & 0xffff_ffff == 64
    ));
}

/// A scan whose index lags its successor (`r7 = r6; r6 += 1`, reading through r7), with
/// an inner loop at every byte divisible by 8; r6 starts at `next`, r7 at 0 (the
/// relation holds on entry when `next` is 1).
fn lagging_around_inner(next: u32, n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r7, 0\nmov %r6, {next}\n\
         loop:\nmov %r4, %r1\nadd %r4, %r7\nldxb %r3, [%r4+0]\nadd %r0, %r3\n\
         mov %r2, %r3\nand %r2, 7\njne %r2, 0, next\nmov %r8, 0\n\
         inner:\nadd %r8, 1\nadd %r0, 1\njlt %r8, 3, inner\n\
         next:\nmov %r7, %r6\nadd %r6, 1\njle %r6, {n}, loop\nexit"
    )
}

#[test]
fn a_lagging_index_around_an_inner_loop_is_strided() {
    assert_eq!(
        unchecked_accesses(&lagging_around_inner(1, 64)),
        vec![(3, vec![(5, 1)])]
    );
    // Inside region 2, past its end, and with the relation broken on entry (the guard
    // then runs the checked loop): the interpreter's outcome at every budget.
    for (next, n) in [(1, 64), (1, 70), (5, 64), (5, 70)] {
        sweep(&lagging_around_inner(next, n));
    }
    let out = sweep(&lagging_around_inner(1, 70));
    assert!(matches!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds { addr, write: false, .. } if addr & 0xffff_ffff == 64
    ));
}

/// knn's shape by hand: an outer loop over `rows` rows of `w` bytes of region 2, the
/// first at byte `start`, each `ostep` bytes past the one before, and for each row an
/// inner loop over `k` (`0..w`, or `w - 1` down to 0 when `down`) summing
/// `row[k] * q[k]`, `q` set up by `q_setup` in r9; when `store`, the inner loop also
/// writes the product back to `row[k]`. r0 is the sum.
fn rows_against(
    w: u32,
    (start, ostep, rows): (i32, i32, u32),
    q: &str,
    store: bool,
    down: bool,
) -> String {
    let write = if store { "stxb [%r4+0], %r3\n" } else { "" };
    let (first, step) = if down {
        (
            format!("mov %r7, {}\n", w - 1),
            "sub %r7, 1\njsge %r7, 0, inner\n".to_string(),
        )
    } else {
        (
            "mov %r7, 0\n".to_string(),
            format!("add %r7, 1\njlt %r7, {w}, inner\n"),
        )
    };
    format!(
        "lddw %r2, 0x0102030405060708\nstxdw [%r10-16], %r2\nstxdw [%r10-8], %r2\n\
         {q}mov %r0, 0\nmov %r6, {start}\nmov %r8, {rows}\n\
         outer:\n{first}\
         inner:\nmov %r4, %r1\nadd %r4, %r6\nadd %r4, %r7\nldxb %r3, [%r4+0]\n\
         mov %r5, %r9\nadd %r5, %r7\nldxb %r2, [%r5+0]\nmul %r3, %r2\nadd %r0, %r3\n\
         {write}{step}\
         add %r6, {ostep}\nsub %r8, 1\njne %r8, 0, outer\nexit"
    )
}

/// The inner loop of [`rows_against`] runs in groups, and its guard, entered once a
/// row, first asks the region caches whether the row and `q` stay in the regions they
/// hold (`translate/cached.rs`): with `q` in region 2 beside the rows, on the stack, or
/// in region 3 (the read cache then holds one of the two and the guard makes its
/// lookups every row), reading or writing the rows, up or down: the interpreter's value,
/// memory and fuel at every budget; a row that starts inside region 2 and runs past its
/// end, or one that starts before it, traps at its first byte out, where the
/// interpreter does, after rows the caches' check let through.
#[test]
fn a_nested_loops_guard_tries_the_region_caches_first() {
    let qs = [
        "mov %r9, %r1\n",
        "mov %r9, %r10\nadd %r9, -16\n",
        "mov %r9, %r3\n",
    ];
    let traps_at = |out: &RunOutcome, at: u64| {
        matches!(
            trap_of(out).kind,
            TrapKind::OutOfBounds { addr, write: false, .. } if addr & 0xffff_ffff == at
        )
    };
    for q in qs {
        for (store, down) in [(false, false), (true, false), (false, true)] {
            let case = format!("{q} store {store} down {down}");
            let src = rows_against(8, (8, 8, 7), q, store, down);
            assert_eq!(unroll_exits(&src).len(), 1, "{case}");
            assert!(sweep(&src).result.is_ok(), "{case}");
            // Rows of 12 from byte 8: the fifth is 56..68.
            let out = sweep(&rows_against(12, (8, 12, 5), q, store, down));
            assert!(traps_at(&out, if down { 67 } else { 64 }), "{case}");
            // Rows of 12 down from byte 40: the fifth is -8..4.
            let out = sweep(&rows_against(12, (40, -12, 5), q, store, down));
            assert!(
                traps_at(&out, if down { 0xffff_ffff } else { 0xffff_fff8 }),
                "{case}"
            );
        }
    }
    // Rows of 5 (`q`'s span, region 2's first 5 bytes, is shorter than the caches' 8)
    // ending 4 bytes from region 2's end, and rows of 16 against region 3's 16 bytes.
    assert!(sweep(&rows_against(5, (5, 5, 11), qs[0], false, false))
        .result
        .is_ok());
    assert!(sweep(&rows_against(16, (16, 16, 3), qs[2], true, false))
        .result
        .is_ok());
}

/// A loop closed by an equality test (`jne`, or `jne32` when `w` is "32"): `k` from
/// `start`, moving `step` an iteration, leaves when it equals `stop`; each iteration
/// adds `k` and the next byte of region 2, from its first, to r0.
fn closed_by_equality(w: &str, (start, step, stop): (i64, i32, i32)) -> String {
    format!(
        "lddw %r6, {start:#x}\nmov %r7, %r1\nmov %r0, 0\n\
         loop:\nldxb %r3, [%r7+0]\nadd %r0, %r3\nadd %r0, %r6\n\
         add %r7, 1\nadd %r6, {step}\njne{w} %r6, {stop}, loop\nexit"
    )
}

/// Loops closed by an equality test run in groups from the wrapped distance to their
/// bound (`loops::CountedExit::equal`): counted down to -1 (revhash's `jne` after
/// `k -= 1`) for every trip count from 1 to 48 (the region has room for more, so the
/// exit alone ends the groups), up to zero, 32-bit ones wrapping through 2^32 or through
/// zero, and a distance the step does not divide (the test never holds: the pointer
/// runs past region 2's end). The interpreter's value, trap and fuel at every budget: a
/// group that left out a test that should have left runs on.
#[test]
fn loops_closed_by_an_equality_test_run_in_groups() {
    let prog = |w: &str, counts: (i64, i32, i32)| {
        let src = closed_by_equality(w, counts);
        let exits = unroll_exits(&src);
        assert_eq!(exits.len(), 1, "{src}");
        let e = &exits[0].3;
        assert!(e.equal && e.is32 == (w == "32"), "{e:?}");
        src
    };
    for trips in 1..=48 {
        let out = sweep(&prog("", (trips - 1, -1, -1)));
        let want = (0..trips as u64).sum::<u64>() * 2;
        assert_eq!(out.result, Ok(want), "{trips} trips");
    }
    for counts in [(-37, 1, 0), (5, -1, -30), (0, 3, 63)] {
        assert!(sweep(&prog("", counts)).result.is_ok(), "{counts:?}");
    }
    // 32-bit: from 2^32 - 20 up to 12 through zero, 32 steps; from 3 down to -16.
    assert!(sweep(&prog("32", ((1 << 32) - 20, 1, 12))).result.is_ok());
    assert!(sweep(&prog("32", (3, -1, -16))).result.is_ok());
    // Never equal: 2 steps from 1 towards 40, reading bytes until 64.
    let out = sweep(&prog("", (1, 2, 40)));
    assert!(matches!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds { addr, write: false, .. } if addr & 0xffff_ffff == 64
    ));
}
