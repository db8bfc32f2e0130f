//! Loops with a bounded trip count (`trips`, `translate/bounded.rs`): an entry whose
//! slice holds every charge the loop can make runs a copy whose charges subtract
//! without a check. Value, trap (pc, kind) and fuel stay the interpreter's at every
//! budget, including budgets that run out inside the loop.

use super::loop_tests::sweep;
use super::*;

/// held-out popsum's shape as clang lays it out: for each of region 2's 8 words,
/// `x = w & mask`, then `while (x) { x &= x - 1; total++; }` with `x` in two registers
/// (`r6 = r5` at the entry, `r6 += -1; r6 &= r5; r5 = r6` in the loop). The entry
/// copies r5 into r6 when `copy`, else sets r6 to r5 plus one (the guard's equality
/// then fails: the loop runs checked, and still ends).
fn popsum(mask: u64, copy: bool) -> String {
    let entry = match copy {
        true => "mov %r6, %r5",
        false => "mov %r6, %r5\nadd %r6, 1",
    };
    format!(
        "mov %r0, 0\nmov %r3, 0\nlddw %r4, {mask:#x}\nja head\n\
         bits:\nadd %r6, -1\nand %r6, %r5\nadd %r0, 1\nmov %r5, %r6\njne %r6, 0, bits\n\
         next:\nadd %r3, 1\njlt %r3, 8, head\nexit\n\
         head:\nmov %r5, %r3\nlsh %r5, 3\nmov %r6, %r1\nadd %r6, %r5\nldxdw %r5, [%r6+0]\n\
         and %r5, %r4\njeq %r5, 0, next\n{entry}\nja bits"
    )
}

fn bounded_of(src: &str) -> Vec<crate::trips::BoundedLoop> {
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
    let f = &plan.functions[0];
    let versioned = loops::plan_loops(p.insns(), f, !plan.calls_helpers)
        .iter()
        .map(|l| l.header)
        .collect();
    crate::trips::bounded_loops(p.insns(), f, &versioned)
}

/// The bit loop (slots 5-9) is bounded by its 64 bits, taking r5 and r6 as equal at
/// its header; the word loop is not bounded.
#[test]
fn a_bit_count_loop_is_bounded_by_its_bits() {
    let loops = bounded_of(&popsum(u64::MAX, true));
    assert_eq!(loops.len(), 1);
    let l = &loops[0];
    assert_eq!((l.header, l.body.len()), (5, 5));
    assert_eq!((l.trips, l.most, l.equal.clone()), (64, 5, vec![(5, 6)]));
}

/// Every budget matches the interpreter, the word loop's bit counts being 0 to 64
/// (region 2's words masked), so budgets run out inside the bit loop both where its
/// entry took the fast copy and where the slice was short.
#[test]
fn a_bit_count_loop_matches_at_every_budget() {
    let words: Vec<u64> = (0..8u64)
        .map(|i| u64::from_le_bytes(std::array::from_fn(|b| (i * 8 + b as u64) as u8)))
        .collect();
    for mask in [u64::MAX, 0x0f0f_0f0f_0f0f_0f0f, 0x8000_0000_0000_0001, 0] {
        for copy in [true, false] {
            let out = sweep(&popsum(mask, copy));
            // Entered with r6 = x + 1, the first pass leaves x as it was.
            let extra = u64::from(!copy);
            let want: u64 = words
                .iter()
                .map(|w| w & mask)
                .map(|x| u64::from(x.count_ones()) + if x != 0 { extra } else { 0 })
                .sum();
            assert_eq!(out.result, Ok(want), "mask {mask:#x} copy {copy}");
        }
    }
}

/// isqrt's first loop (`while (bit > x) bit >>= 2`, 32-bit): `bit` at the header is
/// shifted by 2 on the way back, and the back-edge is taken only when the copy made
/// before the shift is above something, so not zero: 32 trips at most. Each of region
/// 2's 16 words is `x`.
fn shift_until_below(start: i32) -> String {
    format!(
        "mov %r0, 0\nmov %r3, 0\n\
         word:\nmov %r6, %r3\nlsh %r6, 2\nadd %r6, %r1\nldxw %r4, [%r6+0]\nmov32 %r5, {start}\n\
         down:\nmov32 %r8, %r5\nrsh32 %r5, 2\njgt32 %r8, %r4, down\n\
         add %r0, %r5\nadd %r3, 1\njlt %r3, 16, word\nexit"
    )
}

#[test]
fn a_shift_until_below_loop_is_bounded_and_matches_at_every_budget() {
    let loops = bounded_of(&shift_until_below(1 << 30));
    assert_eq!(loops.len(), 1);
    assert_eq!((loops[0].header, loops[0].trips, loops[0].most), (7, 32, 3));
    for start in [1 << 30, -1, 0] {
        sweep(&shift_until_below(start));
    }
}

/// Loops whose trips the data decides are not bounded: a count down (`x -= 1` until
/// zero), a shift left, a shift by a register, a loop exiting on a compare that does not
/// show the shrunk register is not zero, and one that shrinks on one path only.
#[test]
fn unbounded_loops_are_not_bounded() {
    let cases = [
        "ldxdw %r5, [%r1+0]\nloop:\nadd %r5, -1\njne %r5, 0, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nlsh %r5, 1\njne %r5, 0, loop\nexit",
        "ldxdw %r5, [%r1+0]\nldxdw %r2, [%r1+8]\nloop:\nrsh %r5, %r2\njne %r5, 0, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nrsh %r5, 1\njne %r0, 0, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\njeq %r0, 0, skip\nrsh %r5, 1\nskip:\njne %r5, 0, loop\nexit",
    ];
    for src in cases {
        let src = format!("mov %r0, 1\n{src}");
        assert!(bounded_of(&src).is_empty(), "{src}");
    }
}

/// itoa's digit loop (`do { *--p = '0' + x % 10; x /= 10; } while (x)`, the test on
/// the copy made before the division), 64-bit or 32-bit, for each of region 2's 8 words
/// `w`: `x = w ^ start`, `d` the divisor, and the loop goes back while the old `x` is
/// above `above`. r0 sums the digits. Its test lies before its header (slot 16), which
/// jumps back to it: every pass charges, the one that leaves too, so the guard's need
/// (one pass more than the back-edges) is exact.
fn digits(narrow: bool, d: i32, above: i32, start: u64) -> String {
    let s = if narrow { "32" } else { "" };
    format!(
        "mov %r0, 0\nmov %r3, 0\nlddw %r9, {start:#x}\nja word\n\
         test:\nmov{s} %r8, %r5\nsub{s} %r8, %r7\nadd %r0, %r8\njgt{s} %r5, {above}, digit\n\
         add %r3, 1\njge %r3, 8, done\n\
         word:\nmov %r6, %r3\nlsh %r6, 3\nadd %r6, %r1\nldxdw %r4, [%r6+0]\nxor %r4, %r9\n\
         digit:\nmov{s} %r5, %r4\ndiv{s} %r4, {d}\nmov{s} %r7, %r4\nmul{s} %r7, {d}\nja test\n\
         done:\nexit"
    )
}

/// A division by a constant `d >= 2` drops `log2 d` significant bits at least: the
/// digit loop is bounded by `63 / log2 d + 1` back-edges. Halving until
/// the old value is zero takes exactly 64 from `u64::MAX`, so that bound is tight: a
/// bound one lower lets the fast copy run past the slice, and the sweep fails.
#[test]
fn a_division_by_a_constant_is_bounded_and_matches_at_every_budget() {
    for (narrow, d, above, trips) in [(false, 10, 9, 22), (true, 10, 9, 22), (false, 2, 0, 64)] {
        let loops = bounded_of(&digits(narrow, d, above, 0));
        assert_eq!(loops.len(), 1, "narrow {narrow} d {d}");
        let l = &loops[0];
        assert_eq!((l.header, l.trips), (16, trips));
    }
    for (narrow, d, above) in [(false, 10, 9), (true, 10, 9), (false, 2, 0), (true, 3, 0)] {
        for start in [
            0,
            u64::MAX,
            1 << 63,
            0xffff_ffff,
            12_345_678_901_234_567_890,
        ] {
            let out = sweep(&digits(narrow, d, above, start));
            assert!(out.result.is_ok(), "narrow {narrow} d {d} start {start:#x}");
        }
    }
}

/// Divisions that bound nothing: by a register, by one, signed (`sdiv`), a remainder.
#[test]
fn divisions_that_do_not_shrink_are_not_bounded() {
    let cases = [
        "ldxdw %r5, [%r1+0]\nldxdw %r2, [%r1+8]\nloop:\nmov %r6, %r5\ndiv %r5, %r2\njgt %r6, 9, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nmov %r6, %r5\ndiv %r5, 1\njgt %r6, 9, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nmov %r6, %r5\nsdiv %r5, 10\njgt %r6, 9, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nmov %r6, %r5\nsdiv32 %r5, 10\njgt %r6, 9, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nmov %r6, %r5\nmod %r5, 10\njgt %r6, 9, loop\nexit",
        "ldxdw %r5, [%r1+0]\nloop:\nmov %r6, %r5\ndiv %r5, -1\njgt %r6, 9, loop\nexit",
    ];
    for src in cases {
        let src = format!("mov %r0, 1\n{src}");
        assert!(bounded_of(&src).is_empty(), "{src}");
    }
}
