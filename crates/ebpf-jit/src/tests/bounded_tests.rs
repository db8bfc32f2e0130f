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
        assert_eq!((l.header, l.trips, l.low), (16, trips, None));
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

/// Binary GCD's trailing-zero strips (`while (!(x & 1)) x >>= 1`) on `x = start <<
/// i` for each of region 2's 8 word indexes `i`, in two layouts: clang's for
/// `gcdpairs`' second and third loops (`old = x; x >>= 1; if (!(old & 1)) go back`,
/// `first` false) and for its first (`x >>= 1; if (!(x & 1)) go back`, entered only
/// with `x` even: `first` true). `s` is "" or "32". r0 sums what each strip leaves. The
/// test lies before the header (slot 14), as in [`digits`], so every pass charges. Word
/// 0 strips 2 instead: its charges refill the slice (a run starts with an empty one),
/// so the later entries see the slice the guard compares with the loop's need.
fn strip(s: &str, first: bool, start: u64) -> String {
    let (head, tested) = match first {
        true => (format!("rsh{s} %r5, 1\n"), "%r5"),
        false => (format!("mov{s} %r7, %r5\nrsh{s} %r5, 1\n"), "%r7"),
    };
    format!(
        "mov %r0, 0\nmov %r3, 0\nja word\n\
         test:\nmov{s} %r8, {tested}\nand{s} %r8, 1\njeq{s} %r8, 0, strip\n\
         add %r0, %r5\nadd %r3, 1\njge %r3, 8, done\n\
         word:\nlddw %r5, {start:#x}\nlsh %r5, %r3\njne %r3, 0, strip\nmov %r5, 2\n\
         strip:\n{head}ja test\n\
         done:\nexit"
    )
}

/// Runs `src` on the interpreter and the JIT at every budget up to `most`: for
/// programs that loop for good on some data (a strip of zero).
fn sweep_to(src: &str, most: u64) {
    let p = program(src, vec![]);
    let interp = Interpreter::new(p.clone());
    let jit = JitProgram::compile(p).unwrap_or_else(|e| panic!("{e}"));
    for fuel in 0..=most {
        assert_eq!(run_on(&jit, fuel), run_on(&interp, fuel), "fuel {fuel}");
    }
}

/// A strip is bounded where the entry has a set bit (in the low 32 bits, for 32-bit
/// shifts) and, for the first layout, a clear low bit: at most 63 back-edges (31). The
/// bound is tight (`1 << 63` takes 63, `1 << 31` in 32 bits 31): one lower and the
/// sweep fails. Entries the guard turns away loop for good in the checked copy, which
/// runs out of fuel where the interpreter does: zero, `1 << 40` in 32 bits (a set bit,
/// none in the low half), an odd value in the first layout (its first shift may clear
/// it). A guard that let them into the fast copy would not end.
#[test]
fn trailing_zero_strips_are_bounded_where_the_entry_has_a_set_bit() {
    let zero = crate::trips::LowBits {
        reg: 5,
        width: 64,
        zeros: 0,
    };
    for (s, first, trips, low) in [
        ("", false, 63, zero),
        ("32", false, 31, crate::trips::LowBits { width: 32, ..zero }),
        ("", true, 63, crate::trips::LowBits { zeros: 1, ..zero }),
        (
            "32",
            true,
            31,
            crate::trips::LowBits {
                width: 32,
                zeros: 1,
                ..zero
            },
        ),
    ] {
        let loops = bounded_of(&strip(s, first, 1));
        assert_eq!(loops.len(), 1, "{s} {first}");
        assert_eq!(
            (loops[0].header, loops[0].trips, loops[0].low),
            (14, trips, Some(low))
        );
    }
    for (s, first) in [("", false), ("32", false), ("", true), ("32", true)] {
        for start in [1 << 56, 1 << 24, 0x0123_4567_89ab_cdef, 6, 1 << 40] {
            let keeps = start & if s.is_empty() { u64::MAX } else { 0xffff_ffff } != 0;
            if keeps {
                sweep(&strip(s, first, start));
            } else {
                sweep_to(&strip(s, first, start), 1000);
            }
        }
        // Zero, and (the first layout) odd entries, stay checked.
        sweep_to(&strip(s, first, 0), 1000);
        sweep_to(&strip(s, first, 1), 1000);
    }
}

/// Strips that are not bounded: an arithmetic shift, a shift by 2 with one bit
/// tested (`2` would go to zero and stay), a test of another register, a shift by a
/// register.
#[test]
fn strips_that_may_not_end_are_not_bounded() {
    let cases = [
        "loop:\nmov %r7, %r5\narsh %r5, 1\nand %r7, 1\njeq %r7, 0, loop\nexit",
        "loop:\nmov %r7, %r5\nrsh %r5, 2\nand %r7, 1\njeq %r7, 0, loop\nexit",
        "loop:\nmov %r7, %r6\nrsh %r5, 1\nand %r7, 1\njeq %r7, 0, loop\nexit",
        "loop:\nmov %r7, %r5\nrsh %r5, %r2\nand %r7, 1\njeq %r7, 0, loop\nexit",
        "loop:\nrsh %r5, 2\nmov %r7, %r5\nand %r7, 1\njeq %r7, 0, loop\nexit",
    ];
    for src in cases {
        let src = format!("mov %r0, 1\nldxdw %r5, [%r1+0]\nmov %r2, 1\nmov %r6, 2\n{src}");
        assert!(bounded_of(&src).is_empty(), "{src}");
    }
}
