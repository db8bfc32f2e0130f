//! The fused ops picked for `-mcpu=v3` code (32-bit copies and masks before jumps and
//! loads, bit fields, loads from a global table), each run fused and unfused at every
//! fuel budget, counted and not: the same value or trap (at the same pc), the same fuel
//! used, the same bytes and block counts. Each program is a loop around the sequence, so
//! the budgets run out at every iteration; the load sequences also walk off their
//! buffer, so a run traps at the fused load.

use std::sync::Arc;

use super::{decode_program, Interpreter, Kind};
use crate::asm::assemble;
use crate::count::ExecCounts;
use crate::engine::{Engine, RunOptions, RunOutcome};
use crate::helper::{ConformanceHost, FunctionTable};
use crate::memory::{MemoryMap, RegionIdx};
use crate::program::{GlobalSection, Program};
use crate::trap::{Trap, TrapKind};
use crate::verifier::verify;

/// Where the 64-byte read-write buffer of every run is mapped.
const MEM: u64 = RegionIdx::EMBEDDER_FIRST.vaddr(0);

/// What one run gives: its outcome, the buffer after it, the block counts if counted.
type Seen = (RunOutcome, Vec<u8>, Option<Vec<u64>>);

fn run(engine: &Interpreter, fuel: u64, counted: bool, args: [u64; 5]) -> Seen {
    let counts = ExecCounts::new(engine.program.blocks());
    let opts = RunOptions {
        fuel,
        counts: counted.then_some(&counts),
        ..RunOptions::default()
    };
    // Bytes with the top bit set as often as not.
    let mut buf: Vec<u8> = (0..64u8)
        .map(|i| i.wrapping_mul(73).wrapping_add(0x9d))
        .collect();
    let mut map = MemoryMap::new();
    let at = map
        .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut buf)
        .expect("maps");
    assert_eq!(at, MEM);
    let out = engine.run(&mut map, args, &opts, &mut ConformanceHost);
    (out, buf, counted.then(|| counts.values()))
}

/// Assembles `src`, asserts that each `(slot, kind)` of `fused` is what the fused
/// decoding runs there, then runs the program fused and unfused at every fuel budget
/// from 0 to one past a whole run's, counted and not, asserting they agree. Returns the
/// whole run's outcome.
fn agree(src: &str, fused: &[(usize, Kind)], args: [u64; 5]) -> RunOutcome {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let ops = decode_program(&insns, true, None);
    for &(slot, kind) in fused {
        assert_eq!(ops[slot].kind, kind, "slot {slot}");
    }
    agree_program(Program::from_insns("fused", insns), fused, args)
}

/// [`agree`] for a whole program (one with global sections): the kinds of `fused` are
/// those of the interpreter's own decoding, loads proven in range included.
fn agree_program(program: Program, fused: &[(usize, Kind)], args: [u64; 5]) -> RunOutcome {
    let table = Arc::new(FunctionTable::conformance());
    let v = verify(program, table).unwrap_or_else(|e| panic!("{e}"));
    let v = Arc::new(v);
    let (fast, plain) = (Interpreter::new(Arc::clone(&v)), Interpreter::unfused(v));
    for &(slot, kind) in fused {
        assert_eq!(fast.ops[slot].kind, kind, "slot {slot}");
    }
    let whole = run(&plain, 1 << 20, false, args).0;
    for fuel in 0..=whole.fuel_used + 1 {
        for counted in [false, true] {
            let (a, b) = (
                run(&fast, fuel, counted, args),
                run(&plain, fuel, counted, args),
            );
            assert_eq!(a, b, "fuel {fuel}, counted {counted}");
        }
    }
    whole
}

/// The low half of `x`, zero-extended.
fn lo(x: u64) -> u64 {
    x & 0xffff_ffff
}

/// A fuel trap at `pc` is what ends a run whose budget is one short: the loops' fuel
/// is charged at their back-edges, so this is where the sweep's traps land.
fn fuel_trap_at(src: &str, args: [u64; 5], whole: &RunOutcome, pc: u32) {
    let insns = assemble(src).unwrap();
    let table = Arc::new(FunctionTable::conformance());
    let v = Arc::new(verify(Program::from_insns("fused", insns), table).unwrap());
    let out = run(&Interpreter::new(v), whole.fuel_used - 1, false, args).0;
    let kind = TrapKind::FuelExhausted {
        budget: whole.fuel_used - 1,
    };
    assert_eq!(out.result, Err(Trap { pc, kind }));
}

#[test]
fn mov32_extension_idioms() {
    use Kind::*;
    // `mov32; lsh 32; arsh 32` and `mov32; lsh 32; rsh 32` on a value whose low half
    // has its sign bit set and whose high half is not zero.
    let src = "
        mov %r6, 6
        mov %r0, 0
    loop:
        mov32 %r3, %r2
        lsh %r3, 32
        arsh %r3, 32
        add %r0, %r3
        mov32 %r4, %r2
        lsh %r4, 32
        rsh %r4, 32
        xor %r0, %r4
        mul %r2, %r5
        add %r6, -1
        jne %r6, 0, loop
        exit";
    let (r2, r5) = (0x1234_5678_9abc_def0u64, 0x9e37_79b9_7f4a_7c15u64);
    let whole = agree(src, &[(2, MovSx32x3), (6, Mov32R)], [MEM, r2, 0, 0, r5]);
    let mut want = 0u64;
    let mut x = r2;
    for _ in 0..6 {
        want = want.wrapping_add(x as u32 as i32 as i64 as u64) ^ lo(x);
        x = x.wrapping_mul(r5);
    }
    assert_eq!(whole.result, Ok(want));
    fuel_trap_at(src, [MEM, r2, 0, 0, r5], &whole, 12);
}

#[test]
fn mov32_before_a_loop_latch() {
    use Kind::*;
    // `add; mov32` and a latch `mov32; jlt` whose compare reads the 32-bit copy: the
    // counter's high half is set, so a 64-bit copy would leave the loop at once.
    let src = "
        mov %r0, 0
        lddw %r3, 0x7fffffff00000000
        mov %r7, 10
    loop:
        xor %r0, %r4
        add %r3, 1
        mov32 %r4, %r2
        add %r2, %r5
        mov32 %r6, %r3
        jlt %r6, %r7, loop
        exit";
    let (r2, r5) = (0xdead_beef_8000_0001u64, 0x1_7000_0003u64);
    let args = [MEM, r2, 0, 0, r5];
    let whole = agree(src, &[(5, AddIMov32), (8, Mov32JltR)], args);
    let (mut want, mut x, mut r4) = (0u64, r2, 0u64);
    for _ in 0..10 {
        want ^= r4;
        r4 = lo(x);
        x = x.wrapping_add(r5);
    }
    assert_eq!(whole.result, Ok(want));
    fuel_trap_at(src, args, &whole, 9);
}

#[test]
fn mov32_before_each_compare() {
    use Kind::*;
    // r0 = 1 unless `mov32 r4, r1; j<cmp> r4, r2` jumps: the compare sees the low half
    // (fused with the copy for `jlt` only, the loop latch kernels run).
    let cases = [
        ("jeq", Mov32R),
        ("jne", Mov32R),
        ("jgt", Mov32R),
        ("jge", Mov32R),
        ("jlt", Mov32JltR),
        ("jle", Mov32R),
    ];
    for (op, kind) in cases {
        let src = format!("mov %r0, 0\n mov32 %r4, %r1\n {op} %r4, %r2, +1\n mov %r0, 1\n exit");
        let pairs = [
            (0xffff_ffff_0000_0002u64, 2u64),
            (0x1_0000_0001, 0x1_0000_0001),
            (5, 4),
            (4, 5),
        ];
        for (a, b) in pairs {
            let taken = match op {
                "jeq" => lo(a) == b,
                "jne" => lo(a) != b,
                "jgt" => lo(a) > b,
                "jge" => lo(a) >= b,
                "jlt" => lo(a) < b,
                _ => lo(a) <= b,
            };
            let out = agree(&src, &[(1, kind)], [a, b, 0, 0, 0]);
            assert_eq!(out.result, Ok(u64::from(!taken)), "{op} on {a:#x}, {b:#x}");
        }
    }
}

#[test]
fn mov32_before_exit_tests_and_ja() {
    use Kind::*;
    // `mov32; jeq +1; ja` as a loop's exit test and back-edge (five rounds), `mov32;
    // jne +1; ja` as one that loops while equal (two rounds), and `mov32; ja`.
    let src = "
        mov %r0, 0
    up:
        add32 %r0, 1
        mov32 %r3, %r1
        jeq %r0, 5, +1
        ja up
        mov %r6, 2
    down:
        add32 %r6, 1
        mov32 %r4, %r2
        jne %r6, 3, +1
        ja down
        add %r0, %r4
        mov32 %r5, %r2
        ja +0
        add %r0, %r5
        add %r0, %r3
        add %r0, %r6
        exit";
    let (r1, r2) = (0xffff_ffff_0000_0009u64, 0xaaaa_aaaa_0000_0007u64);
    let fused = [(2, Mov32JeqIJa), (7, Mov32R), (8, JneIJa), (11, Mov32Ja)];
    let whole = agree(src, &fused, [r1, r2, 0, 0, 0]);
    assert_eq!(whole.result, Ok(5 + 7 + 7 + 9 + 4));
    fuel_trap_at(src, [r1, r2, 0, 0, 0], &whole, 9);
}

#[test]
fn load_then_mov32() {
    use Kind::*;
    // `ldxw; mov32` walking the buffer: ten words, then (from further in) off its end.
    let src = "
        mov %r0, 0
        mov %r6, 10
    loop:
        ldxw %r4, [%r1]
        mov32 %r5, %r2
        add %r0, %r4
        xor %r0, %r5
        add %r1, 4
        add %r2, %r3
        add %r6, -1
        jne %r6, 0, loop
        exit";
    let (r2, r3) = (0x8000_0000_ffff_fff0u64, 0x3_0000_0007u64);
    let whole = agree(src, &[(2, LdxWMov32)], [MEM, r2, r3, 0, 0]);
    let mut want = 0u64;
    let mut x = r2;
    for i in 0..10u8 {
        let word: Vec<u8> = (4 * i..4 * i + 4)
            .map(|b| b.wrapping_mul(73).wrapping_add(0x9d))
            .collect();
        let word = u64::from(u32::from_le_bytes(word.try_into().unwrap()));
        want = want.wrapping_add(word) ^ lo(x);
        x = x.wrapping_add(r3);
    }
    assert_eq!(whole.result, Ok(want));
    fuel_trap_at(src, [MEM, r2, r3, 0, 0], &whole, 9);
    // From 40 bytes in, the fourth load reads past the buffer: a trap at the load.
    let out = agree(src, &[(2, LdxWMov32)], [MEM + 40, r2, r3, 0, 0]);
    assert!(
        matches!(out.result, Err(Trap { pc: 2, .. })),
        "{:?}",
        out.result
    );
}

#[test]
fn mov32_then_immediate_op() {
    use Kind::*;
    // A masked copy, a 32-bit add (wrapping in the low half) and a 32-bit shift.
    let src = "
        mov %r0, 0
        mov %r6, 12
    loop:
        mov32 %r3, %r2
        and32 %r3, -16
        mov32 %r4, %r2
        add32 %r4, -7
        mov32 %r5, %r2
        rsh32 %r5, 13
        add %r0, %r3
        xor %r0, %r4
        add %r0, %r5
        mul %r2, %r7
        add %r6, -1
        jne %r6, 0, loop
        exit";
    let (r2, r7) = (0xf00d_0000_0000_0003u64, 0x9e37_79b9_7f4a_7c15u64);
    let args = [MEM, r2, 0, 0, 0];
    let fused = [(2, Mov32AndI), (4, Mov32AddI), (6, Mov32RshI)];
    // r7 is not an argument: set it first.
    let src = format!("lddw %r7, {r7:#x}\n{src}");
    let fused: Vec<(usize, Kind)> = fused.iter().map(|&(s, k)| (s + 2, k)).collect();
    let whole = agree(&src, &fused, args);
    let mut want = 0u64;
    let mut x = r2;
    for _ in 0..12 {
        let l = x as u32;
        let a = u64::from(l & 0xffff_fff0);
        let b = u64::from(l.wrapping_sub(7));
        let c = u64::from(l >> 13);
        want = (want.wrapping_add(a) ^ b).wrapping_add(c);
        x = x.wrapping_mul(r7);
    }
    assert_eq!(whole.result, Ok(want));
    fuel_trap_at(&src, args, &whole, 15);
}

#[test]
fn bit_field_shift_and_mask() {
    use Kind::*;
    // `rsh; and` with a mask that sign-extends (-256) and a small one.
    let src = "
        mov %r0, 0
        mov %r6, 9
    loop:
        mov %r3, %r2
        rsh %r3, 5
        and %r3, -256
        add %r0, %r3
        mov %r4, %r2
        rsh %r4, 60
        and %r4, 5
        xor %r0, %r4
        mul %r2, %r5
        add %r6, -1
        jne %r6, 0, loop
        exit";
    let (r2, r5) = (0xfedc_ba98_7654_3210u64, 0x9e37_79b9_7f4a_7c15u64);
    let whole = agree(src, &[(3, RshIAndI), (7, RshIAndI)], [MEM, r2, 0, 0, r5]);
    let mut want = 0u64;
    let mut x = r2;
    for _ in 0..9 {
        want = want.wrapping_add((x >> 5) & !0xff) ^ ((x >> 60) & 5);
        x = x.wrapping_mul(r5);
    }
    assert_eq!(whole.result, Ok(want));
    fuel_trap_at(src, [MEM, r2, 0, 0, r5], &whole, 12);
}

#[test]
fn global_table_address_and_load() {
    use Kind::*;
    // `lddw; add; ldx<size>` for every size, and `lddw; add` whose address is used
    // later: the "table" is the buffer, indexed by r6 until a load leaves it.
    let src = format!(
        "
        mov %r0, 0
        mov %r6, 0
    loop:
        lddw %r3, {MEM:#x}
        add %r3, %r6
        ldxb %r4, [%r3+1]
        add %r0, %r4
        lddw %r5, {m8:#x}
        add %r5, %r6
        ldxh %r4, [%r5-2]
        xor %r0, %r4
        lddw %r7, {MEM:#x}
        add %r7, %r6
        ldxw %r4, [%r7]
        add %r0, %r4
        lddw %r8, {MEM:#x}
        add %r8, %r6
        ldxdw %r4, [%r8+16]
        xor %r0, %r4
        lddw %r9, {MEM:#x}
        add %r9, %r6
        lsh %r0, 1
        ldxb %r4, [%r9]
        add %r0, %r4
        lddw %r3, {MEM:#x}
        add %r3, %r3
        add %r6, 5
        ja loop",
        m8 = MEM + 8
    );
    let fused = [
        (2, LddwAddLdxB),
        (7, LddwAddLdxH),
        (12, LddwAddLdxW),
        (17, LddwAddLdxDw),
        (22, LddwAdd),
        (28, Kind::Lddw),
    ];
    let whole = agree(&src, &fused, [0; 5]);
    // r6 = 45: the doubleword at 16 + 45 ends past the 64 bytes.
    assert!(
        matches!(whole.result, Err(Trap { pc: 20, .. })),
        "{:?}",
        whole.result
    );
}

#[test]
fn stack_array_at_an_index() {
    use Kind::*;
    // `mov t, r10; add t, K; add t, i` then a load or store at `t + off`, every size;
    // two whose index leads out of the stack into the buffer (the checked path); the
    // address alone; one whose index is the temporary (not fused). The index grows
    // until the `ldxh` reads past the stack's top.
    let src = "
        mov %r0, 0
        mov %r6, 0
        mov %r7, %r1
        sub %r7, %r10
        add %r7, 64
    loop:
        mov %r3, %r10
        add %r3, -64
        add %r3, %r6
        stxb [%r3+1], %r6
        mov %r3, %r10
        add %r3, -96
        add %r3, %r6
        stxh [%r3], %r0
        mov %r3, %r10
        add %r3, -128
        add %r3, %r6
        stxw [%r3-2], %r3
        mov %r3, %r10
        add %r3, -160
        add %r3, %r6
        stxdw [%r3], %r6
        mov %r4, %r10
        add %r4, -64
        add %r4, %r6
        ldxb %r4, [%r4+1]
        add %r0, %r4
        mov %r8, %r6
        lsh %r8, 1
        mov %r3, %r10
        add %r3, -97
        add %r3, %r8
        ldxh %r5, [%r3+1]
        xor %r0, %r5
        mov %r3, %r10
        add %r3, -128
        add %r3, %r6
        ldxw %r5, [%r3-2]
        add %r0, %r5
        mov %r3, %r10
        add %r3, -160
        add %r3, %r6
        ldxdw %r5, [%r3]
        xor %r0, %r5
        mov %r3, %r10
        add %r3, -64
        add %r3, %r7
        ldxdw %r5, [%r3+8]
        add %r0, %r5
        mov %r3, %r10
        add %r3, -64
        add %r3, %r7
        stxb [%r3+3], %r0
        mov %r5, %r1
        add %r5, 2
        add %r5, %r6
        xor %r0, %r5
        mov %r5, %r10
        add %r5, -8
        add %r5, %r5
        add %r0, %r5
        add %r6, 5
        ja loop";
    let fused = [
        (5, FpIdxStxB),
        (9, MovAddIAddR),
        (13, FpIdxStxW),
        (17, FpIdxStxDw),
        (21, FpIdxLdxB),
        (27, Lsh64I),
        (28, FpIdxLdxH),
        (33, FpIdxLdxW),
        (38, FpIdxLdxDw),
        (43, FpIdxLdxDw),
        (48, FpIdxStxB),
        (52, MovAddIAddR),
        (56, MovAddI),
    ];
    let whole = agree(src, &fused, [MEM, 0, 0, 0, 0]);
    // r6 = 50: the halfword at r10 - 97 + 100 + 1 lies past the stack's top.
    assert!(
        matches!(
            whole.result,
            Err(Trap {
                pc: 31,
                kind: TrapKind::OutOfBounds { size: 2, .. }
            })
        ),
        "{:?}",
        whole.result
    );
}

#[test]
fn loop_latches_after_two_steps() {
    use Kind::*;
    // `add; mov; jlt`, `add; mov32; jlt` (a 64-bit copy would compare 0x1_0000_0005),
    // each after an op that does not fuse with the `add`,
    // `add; add; jlt` with a compare register above r7 (the packing's high half), and
    // `add; add` whose immediate does not fit 16 bits (not a latch).
    let src = "
        mov %r0, 0
        mov %r6, 0
        mov %r7, 40
        lddw %r9, 0x100000005
    loop1:
        xor %r0, %r6
        add %r6, 3
        mov %r8, %r0
        jlt %r6, %r7, loop1
        mov %r6, 0
    loop2:
        xor %r0, %r8
        add %r6, 1
        mov32 %r8, %r9
        jlt %r6, %r8, loop2
        mov %r9, 12
        mov %r4, 0
    loop3:
        xor %r0, %r1
        add %r4, 1
        add %r1, -2
        jlt %r4, %r9, loop3
    loop4:
        add %r0, %r4
        add %r4, 1
        add %r1, 100000
        jlt %r4, %r7, loop4
        add %r0, %r1
        exit";
    let fused = [
        (6, AddIMovJltR),
        (11, AddIMov32JltR),
        (17, AddIAddIJltR),
        (21, AddIAddI),
    ];
    let r1 = 0x0123_4567_89ab_cdefu64;
    let whole = agree(src, &fused, [r1, 0, 0, 0, 0]);
    let mut want: u64 = (0..14).fold(0, |w, k| w ^ (3 * k));
    want ^= want;
    for _ in 0..4 {
        want ^= 5;
    }
    let mut x = r1;
    for _ in 0..12 {
        want ^= x;
        x = x.wrapping_sub(2);
    }
    want += (12..40).sum::<u64>();
    want = want.wrapping_add(x + 28 * 100_000);
    assert_eq!(whole.result, Ok(want));
    fuel_trap_at(src, [r1, 0, 0, 0, 0], &whole, 23);
}

/// Where global sections 0 and 1 of [`with_tables`] are mapped.
const TABLE: u64 = RegionIdx::GLOBALS_FIRST.vaddr(0);
const SCRATCH: u64 = RegionIdx(RegionIdx::GLOBALS_FIRST.0 + 1).vaddr(0);

/// `src` assembled with two global sections: a read-only 64-byte table (byte `k` is
/// `k * 37 + 11`) at [`TABLE`] and a writable 16-byte one at [`SCRATCH`].
fn with_tables(src: &str) -> Program {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let table = GlobalSection {
        name: ".rodata".into(),
        data: (0..64u8)
            .map(|k| k.wrapping_mul(37).wrapping_add(11))
            .collect(),
        writable: false,
    };
    let scratch = GlobalSection {
        name: ".bss".into(),
        data: vec![0; 16],
        writable: true,
    };
    Program {
        globals: vec![table, scratch],
        ..Program::from_insns("tables", insns)
    }
}

/// The table of [`with_tables`] read as `size` little-endian bytes at `at`.
fn table_at(at: usize, size: usize) -> u64 {
    (0..size).fold(0, |v, k| {
        v | u64::from(((at + k) as u8).wrapping_mul(37).wrapping_add(11)) << (8 * k)
    })
}

#[test]
fn table_loads_at_masked_indexes() {
    use Kind::*;
    // The probe's shape (`lut[p[i] & 15] * lut[p[i] >> 4]`, four-byte entries), then
    // every size at a masked index, each at the section's last bytes with a positive
    // or negative offset: all proven. The walk over the buffer's 64 bytes ends with a
    // load past the buffer, which traps.
    let src = format!(
        "
        mov %r0, 0
        mov %r3, 0
    loop:
        mov %r4, %r1
        add %r4, %r3
        ldxb %r4, [%r4]
        mov32 %r5, %r4
        and32 %r5, 15
        lsh %r5, 2
        lddw %r6, {TABLE:#x}
        add %r6, %r5
        rsh %r4, 2
        and %r4, 60
        lddw %r5, {TABLE:#x}
        add %r5, %r4
        ldxw %r4, [%r5]
        ldxw %r5, [%r6]
        mul32 %r4, %r5
        add %r0, %r4
        mov %r4, %r3
        and %r4, 62
        lddw %r5, {TABLE:#x}
        add %r5, %r4
        ldxh %r4, [%r5]
        add %r0, %r4
        mov %r4, %r3
        and %r4, 7
        lsh %r4, 3
        lddw %r5, {t8:#x}
        add %r5, %r4
        ldxdw %r4, [%r5-8]
        xor %r0, %r4
        mov %r4, %r3
        and %r4, 63
        lddw %r5, {TABLE:#x}
        add %r5, %r4
        ldxb %r4, [%r5]
        add %r0, %r4
        add %r3, 1
        jlt %r3, %r2, loop
        exit",
        t8 = TABLE + 8
    );
    let fused = [
        (2, MovAddLdxB),
        (13, LddwAddLdxGlobalW),
        (17, LdxGlobalW),
        (22, LddwAddLdxGlobalH),
        (30, LddwAddLdxGlobalDw),
        (37, LddwAddLdxGlobalB),
        (5, Mov32AndILshLddwAdd),
        (11, RshAndLddwAddLdxGlobalW),
        (41, AddRAddIJltR),
    ];
    let whole = agree_program(with_tables(&src), &fused, [MEM, 64, 0, 0, 0]);
    let buf: Vec<u8> = (0..64u8)
        .map(|i| i.wrapping_mul(73).wrapping_add(0x9d))
        .collect();
    let mut want = 0u64;
    for (i, &b) in buf.iter().enumerate() {
        let lut = |k: usize| table_at(4 * k, 4);
        let p = lut(usize::from(b & 15)) as u32;
        let q = lut(usize::from(b >> 4)) as u32;
        want = want.wrapping_add(u64::from(p.wrapping_mul(q)));
        want = want.wrapping_add(table_at(i & 62, 2));
        want ^= table_at((i & 7) * 8, 8);
        want = want.wrapping_add(table_at(i & 63, 1));
    }
    assert_eq!(whole.result, Ok(want));
    // One byte past the buffer: the probe's first load traps at its own slot.
    let past = agree_program(with_tables(&src), &fused, [MEM, 65, 0, 0, 0]);
    assert!(
        matches!(
            past.result,
            Err(Trap {
                pc: 4,
                kind: TrapKind::OutOfBounds { .. }
            })
        ),
        "{:?}",
        past.result
    );
}

/// `body` (which indexes with r3 and adds what it loads to r0) in a loop over r3 from 0
/// to r2 = `n`, in a program with [`with_tables`]'s sections, the body from slot 2; the
/// run fused and unfused agree at every budget, and slot `at.0` decodes to `at.1`.
fn table_loop(body: &str, at: (usize, Kind), n: u64) -> RunOutcome {
    let src = format!(
        "
        mov %r0, 0
        mov %r3, 0
    loop:
        {body}
        add %r3, 1
        jlt %r3, %r2, loop
        exit"
    );
    agree_program(with_tables(&src), &[at], [MEM, n, 0, 0, 0])
}

/// Asserts that `out` is an out-of-bounds trap at `pc`.
fn traps_at(out: &RunOutcome, pc: u32) {
    assert!(
        matches!(out.result, Err(Trap { pc: p, kind: TrapKind::OutOfBounds { .. } }) if p == pc),
        "{:?}",
        out.result
    );
}

#[test]
fn table_loads_left_checked() {
    use Kind::*;
    // Slot 2 `mov`, 3 `and`, 4-5 `lddw`, 6 `add`, 7 the load. A mask one too wide for
    // a four-byte entry: index 61 reads past the table's end.
    let wide = format!(
        "mov %r4, %r3
        and %r4, 63
        lddw %r5, {TABLE:#x}
        add %r5, %r4
        ldxw %r4, [%r5]
        add %r0, %r4"
    );
    traps_at(&table_loop(&wide, (4, LddwAddLdxW), 64), 7);
    let sum: u64 = (0..61).map(|i| table_at(i, 4)).sum();
    assert_eq!(table_loop(&wide, (4, LddwAddLdxW), 61).result, Ok(sum));
    // The same with a mask that fits: proven.
    let fits = wide.replace("63", "60");
    let sum: u64 = (0..64).map(|i| table_at(i & 60, 4)).sum();
    assert_eq!(
        table_loop(&fits, (4, LddwAddLdxGlobalW), 64).result,
        Ok(sum)
    );
    // An offset before the table's start: traps at once.
    let before = format!(
        "mov %r4, %r3
        and %r4, 15
        lddw %r5, {TABLE:#x}
        add %r5, %r4
        ldxb %r4, [%r5-1]
        add %r0, %r4"
    );
    traps_at(&table_loop(&before, (4, LddwAddLdxB), 4), 7);
    // A negative mask bounds nothing: index 64 leaves the table.
    let negative = before.replace("15", "-2").replace("[%r5-1]", "[%r5]");
    traps_at(&table_loop(&negative, (4, LddwAddLdxB), 70), 7);
    // The buffer's address as a constant: not a global section, so checked; index 64
    // leaves it.
    let constant = format!(
        "mov %r4, %r3
        and %r4, 127
        lddw %r5, {MEM:#x}
        add %r5, %r4
        ldxb %r4, [%r5]
        add %r0, %r4"
    );
    traps_at(&table_loop(&constant, (4, LddwAddLdxB), 70), 7);
    // `(i & 15) | 48` for a four-byte entry: 61 and up read past the end (at i = 13).
    let or = format!(
        "mov %r4, %r3
        and %r4, 15
        or %r4, 48
        lddw %r5, {TABLE:#x}
        add %r5, %r4
        ldxw %r4, [%r5]
        add %r0, %r4"
    );
    traps_at(&table_loop(&or, (5, LddwAddLdxW), 64), 8);
    let or = or.replace("48", "16");
    let sum: u64 = (0..64).map(|i| table_at((i & 15) | 16, 4)).sum();
    assert_eq!(table_loop(&or, (5, LddwAddLdxGlobalW), 64).result, Ok(sum));
}

#[test]
fn table_loads_at_xor_indexes() {
    use Kind::*;
    // A table-driven CRC's shape, four bits at a time: the index is the low bits of
    // the state xor a byte's high half, bounded by both; the state's 32-bit shift,
    // xor and copy keep it unknown.
    let src = format!(
        "
        mov %r0, 0
        mov %r3, 0
        mov32 %r4, -1
    loop:
        mov %r5, %r1
        add %r5, %r3
        ldxb %r5, [%r5]
        rsh %r5, 4
        mov32 %r0, %r4
        and32 %r0, 15
        xor32 %r0, %r5
        lsh %r0, 2
        lddw %r5, {TABLE:#x}
        add %r5, %r0
        ldxw %r0, [%r5]
        rsh32 %r4, 4
        xor32 %r0, %r4
        add %r3, 1
        mov32 %r4, %r0
        jlt %r3, %r2, loop
        exit"
    );
    let fused = [(3, MovAddLdxB), (7, Mov32AndI), (11, LddwAddLdxGlobalW)];
    let whole = agree_program(with_tables(&src), &fused, [MEM, 64, 0, 0, 0]);
    let mut crc = u32::MAX;
    for i in 0..64u8 {
        let b = i.wrapping_mul(73).wrapping_add(0x9d) >> 4;
        let at = usize::from((crc as u8 & 15) ^ b) * 4;
        crc = table_at(at, 4) as u32 ^ (crc >> 4);
    }
    assert_eq!(whole.result, Ok(u64::from(crc)));
}

#[test]
fn table_loads_known_only_inside_a_block() {
    use Kind::*;
    // An in-range table load right after a block leader stays checked: falling
    // through, its address is inside the table, but a jump lands there with the
    // buffer's address 64 + r3 bytes in, which leaves it. The writable section read back
    // after a store is the run's own copy.
    let src = format!(
        "
        mov %r0, 0
        mov %r3, 0
    loop:
        lddw %r8, {SCRATCH:#x}
        mov %r4, %r3
        and %r4, 12
        add %r8, %r4
        stxw [%r8], %r3
        ldxw %r4, [%r8]
        add %r0, %r4
        mov %r5, %r1
        add %r5, %r3
        add %r5, 60
        jge %r3, 4, load
        mov %r4, %r3
        and %r4, 15
        lddw %r5, {TABLE:#x}
        add %r5, %r4
    load:
        ldxb %r4, [%r5]
        add %r0, %r4
        add %r3, 1
        jlt %r3, %r2, loop
        exit"
    );
    let fused = [(8, LdxGlobalW), (19, LdxB)];
    let out = agree_program(with_tables(&src), &fused, [MEM, 8, 0, 0, 0]);
    traps_at(&out, 19);
    let sum: u64 = (0..4).map(|i| i + table_at(i as usize, 1)).sum();
    let ok = agree_program(with_tables(&src), &fused, [MEM, 4, 0, 0, 0]);
    assert_eq!(ok.result, Ok(sum));
}

#[test]
fn accumulating_latch_and_scaled_mask() {
    use Kind::*;
    // `mov32; and32; lsh` with a negative mask (all 32 bits) and a shift past 32, then
    // from a register into itself; `add r, s; add i, k; jlt` whose sum and step are the
    // same register, then one comparing registers above r7 (the packing's high half).
    let src = "
        mov %r0, 0
        mov %r6, -3
        mov %r7, 0
        mov %r9, 100
    loop1:
        mov32 %r4, %r2
        and32 %r4, -1
        lsh %r4, 33
        xor %r0, %r4
        mov32 %r2, %r2
        and32 %r2, 0x7f0f
        lsh %r2, 3
        add %r2, %r5
        add %r7, %r2
        add %r7, 1
        jlt %r7, %r1, loop1
        mov %r8, 0
    loop2:
        add %r9, %r6
        add %r8, 2
        jlt %r8, %r9, loop2
        add %r0, %r9
        add %r0, %r7
        exit";
    let fused = [
        (4, Mov32AndILsh),
        (8, Mov32AndILsh),
        (12, AddRAddIJltR),
        (16, AddRAddIJltR),
    ];
    let (r1, r2, r5) = (2_000_000u64, 0xdead_beef_1234_5678u64, 1000u64);
    let whole = agree(src, &fused, [r1, r2, 0, 0, r5]);
    let (mut want, mut x, mut r7) = (0u64, r2, 0u64);
    loop {
        want ^= lo(x) << 33;
        x = ((lo(x) & 0x7f0f) << 3) + r5;
        r7 += x + 1;
        if r7 >= r1 {
            break;
        }
    }
    let (mut r8, mut r9) = (0u64, 100u64);
    loop {
        r9 -= 3;
        r8 += 2;
        if r8 >= r9 {
            break;
        }
    }
    assert_eq!(whole.result, Ok(want.wrapping_add(r9).wrapping_add(r7)));
    fuel_trap_at(src, [r1, r2, 0, 0, r5], &whole, 18);
}

#[test]
fn table_index_and_load_in_one() {
    use Kind::*;
    // `rsh; and; lddw; add; ldx` for every size with the load proven (one whose index
    // is also the loaded register, one the address register), and one whose load is
    // not proven (not fused); `mov32; and32; lsh; lddw; add` from a register into
    // itself, then with a mask too wide for 16 bits and with the address register the
    // index (neither fused).
    // Each `rsh; and; lddw; add; ldx<size> dst, [r5 + off]; <op> r0, dst`.
    let lookups = [
        (58, 63, TABLE, "ldxb", 4, 0, "add"),
        (3, 62, TABLE, "ldxh", 5, 0, "add"),
        (40, 60, TABLE + 4, "ldxw", 4, -4, "add"),
        (7, 56, TABLE, "ldxdw", 4, 0, "xor"),
        (7, 60, TABLE, "ldxdw", 4, 0, "xor"),
    ];
    let mut src = String::from(
        "
        mov %r0, 0
        mov %r3, 0
    loop:
        ldxdw %r6, [%r1]
        add %r1, 1",
    );
    for (k, m, table, ld, d, off, op) in lookups {
        src += &format!(
            "
            mov %r4, %r6
            rsh %r4, {k}
            and %r4, {m}
            lddw %r5, {table:#x}
            add %r5, %r4
            {ld} %r{d}, [%r5{off:+}]
            {op} %r0, %r{d}"
        );
    }
    src += &format!(
        "
        mov32 %r6, %r6
        and32 %r6, 15
        lsh %r6, 2
        lddw %r7, {TABLE:#x}
        add %r7, %r6
        ldxw %r4, [%r7]
        add %r0, %r4
        mov32 %r4, %r3
        and32 %r4, 0x10000
        lsh %r4, 2
        lddw %r7, {MEM:#x}
        add %r7, %r4
        add %r0, %r7
        mov32 %r4, %r3
        and32 %r4, 7
        lsh %r4, 2
        lddw %r4, {TABLE:#x}
        add %r4, %r4
        add %r0, %r4
        add %r3, 1
        ja loop"
    );
    let fused = [
        (5, RshIAndI),
        (7, LddwAddLdxGlobalB),
        (13, RshIAndI),
        (15, LddwAddLdxGlobalH),
        (21, RshAndLddwAddLdxGlobalW),
        (29, RshIAndI),
        (31, LddwAddLdxGlobalDw),
        (37, RshIAndI),
        (39, LddwAddLdxDw),
        (44, Mov32AndILshLddwAdd),
        (52, Mov32AndILsh),
        (59, Mov32AndILsh),
    ];
    let whole = agree_program(with_tables(&src), &fused, [MEM, 0, 0, 0, 0]);
    // The unproven `ldxdw` at index 60 reads past the table (first at r1 = 17 bytes in,
    // before the loop's first load leaves the buffer).
    traps_at(&whole, 42);
}
