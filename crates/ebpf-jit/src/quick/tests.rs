//! The quick tier against the interpreter on what is particular to it: every ALU and
//! jump form on every register pair (fixed host registers mean rax, rdx and rcx, which
//! division and shifts use implicitly, must come out right as operands of every kind),
//! r10 read as a value, stack accesses outside the current frame, and a program of the
//! size the compile-time goal is about. The shared JIT tests (`crate::tests`) run the
//! quick tier too, three ways; so do the conformance suite, the vectors and the
//! differential fuzzer (csx-testkit).

use std::sync::Arc;

use proptest::prelude::*;

use csx_ebpf::asm::assemble;
use csx_ebpf::count::ExecCounts;
use csx_ebpf::engine::{Engine, RunOptions, RunOutcome};
use csx_ebpf::helper::{ConformanceHost, FunctionTable, HelperAbort, HelperHost};
use csx_ebpf::interp::Interpreter;
use csx_ebpf::isa::*;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::{GlobalSection, Program, VerifiedProgram};
use csx_ebpf::verifier::verify;

use super::QuickProgram;

fn verified(insns: Vec<Insn>) -> Option<Arc<VerifiedProgram>> {
    let p = Program::from_insns("quick-test", insns);
    verify(p, Arc::new(FunctionTable::conformance()))
        .ok()
        .map(Arc::new)
}

fn run(engine: &dyn Engine) -> (RunOutcome, Vec<u8>) {
    run_with(engine, None)
}

/// [`run`], counting executed blocks into `counts` when given.
fn run_with(engine: &dyn Engine, counts: Option<&ExecCounts>) -> (RunOutcome, Vec<u8>) {
    let mut rw: Vec<u8> = (0..64).map(|i| i * 3 + 1).collect();
    let mut map = MemoryMap::new();
    let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
    let opts = RunOptions {
        fuel: 100_000,
        counts,
        ..RunOptions::default()
    };
    let out = engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut ConformanceHost);
    (out, rw)
}

/// Runs `p` on the interpreter and the quick tier, uncounted and counted; returns the
/// quick outcome after asserting they agree, block counts included.
fn agree(p: &Arc<VerifiedProgram>) -> RunOutcome {
    let quick = QuickProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let interp = Interpreter::new(p.clone());
    let want = run(&interp);
    let got = run(&quick);
    assert_eq!(got, want, "quick vs interpreter");
    let (by_interp, by_quick) = (ExecCounts::new(p.blocks()), ExecCounts::new(p.blocks()));
    assert_eq!(
        run_with(&interp, Some(&by_interp)),
        want,
        "counted interpreter"
    );
    assert_eq!(run_with(&quick, Some(&by_quick)), want, "counted quick run");
    assert_eq!(by_quick.values(), by_interp.values(), "block counts");
    got.0
}

fn check_src(src: &str) -> RunOutcome {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let p = Program::from_insns("quick-test", insns);
    let p = verify(p, Arc::new(FunctionTable::conformance())).unwrap_or_else(|e| panic!("{e}"));
    agree(&Arc::new(p))
}

fn lddw(dst: u8, v: u64) -> [Insn; 2] {
    [
        Insn::new(OP_LDDW, dst, 0, 0, v as u32 as i32),
        Insn::new(0, 0, 0, 0, (v >> 32) as u32 as i32),
    ]
}

/// Sets r0-r9 to `values`, runs `body`, then folds every register into r0 (through
/// the stack), so a clobbered bystander shows as a different result.
fn all_registers(values: &[u64; 10], body: &[Insn]) -> Vec<Insn> {
    let mut insns = Vec::new();
    for (r, v) in values.iter().enumerate() {
        insns.extend(lddw(r as u8, *v));
    }
    insns.extend_from_slice(body);
    for r in 0..10u8 {
        insns.push(Insn::new(
            CLASS_STX | MODE_MEM | SIZE_DW,
            REG_FP,
            r,
            -8 * (i16::from(r) + 1),
            0,
        ));
    }
    insns.push(Insn::new(CLASS_ALU64 | ALU_MOV, 0, 0, 0, 0));
    insns.extend(lddw(2, 0x9e37_79b9_7f4a_7c15));
    for r in 0..10i16 {
        insns.push(Insn::new(
            CLASS_LDX | MODE_MEM | SIZE_DW,
            1,
            REG_FP,
            -8 * (r + 1),
            0,
        ));
        insns.push(Insn::new(CLASS_ALU64 | ALU_MUL | SRC_X, 0, 2, 0, 0));
        insns.push(Insn::new(CLASS_ALU64 | ALU_XOR | SRC_X, 0, 1, 0, 0));
    }
    insns.push(Insn::new(OP_EXIT, 0, 0, 0, 0));
    insns
}

/// Instruction `class | op` reading register `src` when `by_reg`, else immediate `imm`
/// (and src 0).
fn op_insn(class: u8, op: u8, by_reg: bool, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    let (mode, src) = if by_reg { (SRC_X, src) } else { (SRC_K, 0) };
    Insn::new(class | op | mode, dst, src, off, imm)
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(1 << 63),
        Just(0xffff_ffff),
        Just(0x8000_0000),
        (0u64..70),
    ]
}

const ALU_OPS: [u8; 13] = [
    ALU_ADD, ALU_SUB, ALU_MUL, ALU_DIV, ALU_OR, ALU_AND, ALU_LSH, ALU_RSH, ALU_NEG, ALU_MOD,
    ALU_XOR, ALU_MOV, ALU_ARSH,
];

const JMP_OPS: [u8; 11] = [
    JMP_JEQ, JMP_JGT, JMP_JGE, JMP_JSET, JMP_JNE, JMP_JSGT, JMP_JSGE, JMP_JLT, JMP_JLE, JMP_JSLT,
    JMP_JSLE,
];

proptest! {
    // About half the generated programs are ones the verifier refuses (`prop_assume`):
    // the reject limit scales with `PROPTEST_CASES` runs of thousands.
    #![proptest_config(ProptestConfig {
        cases: 600,
        max_global_rejects: 1 << 20,
        ..ProptestConfig::default()
    })]

    /// Every ALU form (width, operand kind, signedness or sign-extension offset, byte
    /// swaps) on any destination r0-r9 and source r0-r10, with every other register
    /// watched.
    #[test]
    fn alu_matches_the_interpreter(
        op in proptest::sample::select(&ALU_OPS[..]),
        wide in any::<bool>(),
        by_reg in any::<bool>(),
        dst in 0u8..10,
        src in 0u8..11,
        off_pick in 0usize..4,
        imm in prop_oneof![any::<i32>(), Just(0), Just(-1), Just(1), (0i32..70)],
        values in proptest::array::uniform10(value()),
        swap in proptest::sample::select(&[16, 32, 64][..]),
    ) {
        let class = if wide { CLASS_ALU64 } else { CLASS_ALU };
        let off = match op {
            ALU_DIV | ALU_MOD => [0, 1, 0, 1][off_pick],
            ALU_MOV if by_reg => [0, 8, 16, 32][off_pick],
            _ => 0,
        };
        let by_reg = by_reg && op != ALU_NEG;
        let insn = op_insn(class, op, by_reg, dst, src, off, imm);
        let p = verified(all_registers(&values, &[insn]));
        prop_assume!(p.is_some());
        agree(&p.unwrap());
        // Byte swaps: `le`/`be` in ALU, `bswap` in ALU64.
        let end = Insn::new(class | ALU_END | if by_reg && !wide { SRC_X } else { 0 }, dst, 0, 0, swap);
        if let Some(p) = verified(all_registers(&values, &[end])) {
            agree(&p);
        }
    }

    /// Every conditional jump form, forward and backward, on any pair of r0-r10.
    #[test]
    fn jumps_match_the_interpreter(
        op in proptest::sample::select(&JMP_OPS[..]),
        wide in any::<bool>(),
        by_reg in any::<bool>(),
        dst in 0u8..11,
        src in 0u8..11,
        imm in prop_oneof![any::<i32>(), Just(0), Just(-1)],
        values in proptest::array::uniform10(value()),
    ) {
        let class = if wide { CLASS_JMP } else { CLASS_JMP32 };
        let jcc = |off: i16| op_insn(class, op, by_reg, dst, src, off, imm);
        // Forward: skip one `add`.
        let forward = [jcc(1), Insn::new(CLASS_ALU64 | ALU_ADD, 6, 0, 0, 0x55)];
        let p = verified(all_registers(&values, &forward));
        prop_assume!(p.is_some());
        agree(&p.unwrap());
        // Backward: a loop that runs while the condition holds, at most 3 times (r9
        // counts), charging fuel on each taken back-edge.
        let mut values = values;
        values[9] = 0;
        let backward = [
            Insn::new(CLASS_ALU64 | ALU_ADD, 9, 0, 0, 1),
            Insn::new(CLASS_JMP | JMP_JGE, 9, 0, 1, 3),
            jcc(-3),
        ];
        if let Some(p) = verified(all_registers(&values, &backward)) {
            agree(&p);
        }
    }

    /// `jcc +1` over a `mov` (emitted as a `cmov`, `Emitter::select_pair`): every
    /// condition on any pair of r0-r10, over a 32- or 64-bit move of an immediate or
    /// of any register into any of r0-r9, taken or not: the moved register's high
    /// half, the value moved, and every bystander are the interpreter's.
    #[test]
    fn selects_match_the_interpreter(
        op in proptest::sample::select(&JMP_OPS[..]),
        wide in any::<bool>(),
        by_reg in any::<bool>(),
        dst in 0u8..11,
        src in 0u8..11,
        imm in prop_oneof![any::<i32>(), Just(0), Just(-1)],
        mov_wide in any::<bool>(),
        mov_reg in any::<bool>(),
        mov_dst in 0u8..10,
        mov_src in 0u8..11,
        mov_imm in prop_oneof![any::<i32>(), Just(0), Just(-1), Just(i32::MIN)],
        values in proptest::array::uniform10(value()),
    ) {
        let class = if wide { CLASS_JMP } else { CLASS_JMP32 };
        let jcc = op_insn(class, op, by_reg, dst, src, 1, imm);
        let mov_class = if mov_wide { CLASS_ALU64 } else { CLASS_ALU };
        let mov = op_insn(mov_class, ALU_MOV, mov_reg, mov_dst, mov_src, 0, mov_imm);
        let p = verified(all_registers(&values, &[jcc, mov]));
        prop_assume!(p.is_some());
        agree(&p.unwrap());
    }
}

/// A 32-bit unsigned `div` or `mod` by a constant (a multiply by `ceil(2^64 / k)`,
/// `Emitter::divide_u32_by_constant`): at the edges of dividend and divisor (`k - 1`,
/// `k`, `k + 1`, `2^32 - 1`, a dividend whose high half is set) into r0, r3 (the
/// registers the multiply uses) and r5, the quotient or remainder and every bystander
/// are the interpreter's.
#[test]
fn divisions_by_constants_at_the_edges() {
    let divisors: [u32; 10] = [
        2,
        3,
        7,
        10,
        641,
        0x7fff_ffff,
        0x8000_0000,
        0x8000_0001,
        0xffff_fffe,
        0xffff_ffff,
    ];
    for k in divisors {
        let k64 = u64::from(k);
        let dividends = [
            0,
            1,
            k64 - 1,
            k64,
            k64 + 1,
            0xffff_ffff,
            0xffff_fffe,
            0x1234_5678_9abc_def0,
            u64::MAX,
        ];
        for x in dividends {
            for (op, dst) in [ALU_DIV, ALU_MOD]
                .into_iter()
                .flat_map(|op| [(op, 0u8), (op, 3), (op, 5)])
            {
                let mut values = [0xa5a5_a5a5_5a5a_5a5a_u64; 10];
                for (r, v) in values.iter_mut().enumerate() {
                    *v ^= r as u64;
                }
                values[usize::from(dst)] = x;
                let insn = Insn::new(CLASS_ALU | op | SRC_K, dst, 0, 0, k as i32);
                let p = verified(all_registers(&values, &[insn])).expect("verifies");
                agree(&p);
            }
        }
    }
}

#[test]
fn r10_read_as_a_value_is_its_virtual_address() {
    let out = check_src("mov %r0, %r10\nexit");
    assert_eq!(
        out.result,
        Ok(RegionIdx::STACK.vaddr(csx_ebpf::limits::STACK_SIZE as u32))
    );
    // Pointer arithmetic on r10, stores of r10 and comparisons with it.
    check_src(
        "mov %r2, %r10\nadd %r2, -16\nstxdw [%r2+0], %r10\nldxdw %r0, [%r10-16]\n\
         sub %r0, %r10\njeq %r0, 0, +1\nmov %r0, 99\nexit",
    );
    check_src("mov %r1, %r10\nlsh %r1, 3\nadd %r1, %r10\nmov32 %r0, %r10\nadd %r0, %r1\nexit");
    check_src("mov %r3, 5\ndiv %r3, %r10\nmov %r0, %r3\nexit");
}

#[test]
fn stack_accesses_outside_the_frame_are_checked() {
    // A callee reads and writes its caller's frame through a copy of r10 (the verifier
    // keeps static r10 accesses in the frame), and runs off the top of the stack.
    check_src(
        "stdw [%r10-8], 41\ncall local f\nexit\n\
         f:\nmov %r1, %r10\nldxdw %r0, [%r1+504]\nadd %r0, 1\nstxdw [%r1+504], %r0\nexit",
    );
    let out = check_src("call local f\nexit\nf:\nmov %r1, %r10\nldxdw %r0, [%r1+512]\nexit");
    assert!(out.result.is_err());
    let out = check_src("mov %r1, %r10\nldxdw %r0, [%r1+0]\nexit");
    assert!(out.result.is_err());
    let out = check_src("mov %r1, %r10\nstb [%r1-4097], 1\nexit");
    assert!(out.result.is_err());
}

#[test]
fn shifts_and_divisions_around_rcx_rdx_rax() {
    // r4 is rcx (the shift count register), r3 rdx and r0 rax (division's).
    for (d, s) in [
        (4, 4),
        (4, 1),
        (1, 4),
        (0, 3),
        (3, 0),
        (3, 3),
        (0, 0),
        (4, 3),
    ] {
        for op in ["lsh", "rsh", "arsh", "div", "mod", "sdiv", "smod"] {
            for w in ["", "32"] {
                let src = format!(
                    "lddw %r0, 0x8000000000000007\nlddw %r1, 0xfedcba9876543210\n\
                     mov %r3, -3\nmov %r4, 35\n{op}{w} %r{d}, %r{s}\n\
                     xor %r0, %r1\nxor %r0, %r3\nxor %r0, %r4\nexit"
                );
                check_src(&src);
            }
        }
    }
}

/// The program `csx bench vm` times the compile of, at 4,000 slots: it compiles and
/// runs the same as on the interpreter.
#[test]
fn a_long_generated_program_compiles_and_agrees() {
    let mut src = String::from("mov %r0, 0\nmov %r6, 0\nmov %r7, 0\n");
    let mut slots = 3;
    while slots < 3990 {
        src.push_str(
            "ldxw %r2, [%r1+8]\nadd %r2, %r6\nmul %r2, 7\nstxw [%r10-8], %r2\n\
             xor %r0, %r2\njlt %r2, 100, +1\nadd %r7, 1\nlsh %r2, 3\n",
        );
        slots += 8;
    }
    src.push_str("add %r0, %r7\nexit");
    let insns = assemble(&src).unwrap();
    assert!(insns.len() >= 3990, "{} slots", insns.len());
    let p = verified(insns).expect("verifies");
    let quick = QuickProgram::compile(p.clone()).unwrap();
    assert!(quick.code_size() > 0);
    agree(&p);
}

/// `cmpxchg` writes r0, not its source, so r10 may be that source; the fetch forms
/// write back into their source register.
#[test]
fn atomics_write_back_where_the_interpreter_does() {
    check_src(
        "mov %r0, 0\nstdw [%r10-8], 0\nmov %r2, %r10\nadd %r2, -8\n\
         lock cmpxchg [%r2+0], %r10\nldxdw %r3, [%r10-8]\nsub %r3, %r10\nmov %r0, %r3\nexit",
    );
    check_src(
        "mov %r0, 7\nmov %r3, 5\nlock cmpxchg32 [%r1+4], %r3\nmov %r4, 9\n\
         lock fetch add [%r1+8], %r4\nlock xchg32 [%r1+12], %r4\nadd %r0, %r4\nexit",
    );
}

/// Runs `src` on the interpreter and the quick tier at every budget from 0 to what a
/// full run uses (and a generous one): value, trap (kind and pc) and fuel agree at each.
fn agree_at_every_budget(src: &str) -> RunOutcome {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let p = verified(insns).expect("verifies");
    let run_at = |engine: &dyn Engine, fuel: u64, counts: Option<&ExecCounts>| {
        let mut rw: Vec<u8> = (0..64).map(|i| i * 3 + 1).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
        let opts = RunOptions {
            fuel,
            counts,
            ..RunOptions::default()
        };
        let out = engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut ConformanceHost);
        (out, rw)
    };
    quick_matches_at_every_budget(&p, run_at)
}

/// The every-budget comparison the helpers above share: `p` compiled by the quick tier
/// and interpreted, each run by `run_at` (engine, budget, block counts to fill or none).
/// At a generous budget and at every budget from 0 to what the full run uses, value,
/// trap (kind and pc), fuel and memory agree; counted, so do block counts. Returns the
/// full run's outcome.
fn quick_matches_at_every_budget(
    p: &Arc<VerifiedProgram>,
    run_at: impl Fn(&dyn Engine, u64, Option<&ExecCounts>) -> (RunOutcome, Vec<u8>),
) -> RunOutcome {
    let quick = QuickProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let interp = Interpreter::new(p.clone());
    let full = run_at(&interp, 100_000, None);
    assert_eq!(run_at(&quick, 100_000, None), full, "quick vs interpreter");
    for fuel in 0..=full.0.fuel_used {
        assert_eq!(
            run_at(&quick, fuel, None),
            run_at(&interp, fuel, None),
            "quick vs interpreter at budget {fuel}"
        );
    }
    // The counting variant: the same outcome and block counts.
    let (by_interp, by_quick) = (ExecCounts::new(p.blocks()), ExecCounts::new(p.blocks()));
    assert_eq!(run_at(&interp, 100_000, Some(&by_interp)), full);
    assert_eq!(run_at(&quick, 100_000, Some(&by_quick)), full, "counted");
    assert_eq!(by_quick.values(), by_interp.values(), "block counts");
    full.0
}

/// `r10 + k + index` with the index bounded by a mask, a shift or a byte load goes
/// unchecked when every value lands in the current frame, and is checked otherwise:
/// an index the bound does not keep in the frame still traps where the interpreter
/// does (the input bytes are `3i + 1`: byte 42 is 127, byte 63 is 190).
#[test]
fn stack_arrays_at_bounded_indexes() {
    // In range: a byte masked to 0..63 times 4 from r10-256 (written, then read).
    for at in [0, 42, 63] {
        let out = agree_at_every_budget(&format!(
            "ldxb %r2, [%r1+{at}]\nand %r2, 63\nlsh %r2, 2\nmov %r3, %r10\nadd %r3, -256\n\
             add %r3, %r2\nstw [%r3+0], 77\nldxw %r0, [%r3+0]\nadd %r0, %r2\nexit"
        ));
        assert!(out.result.is_ok(), "{out:?}");
    }
    // Not provably in range: 8 bytes at up to r10-4 (byte 42 reaches it, past the
    // stack's top in the entry frame), and a byte times 4 from r10-256 unmasked (byte
    // 63 reaches r10+504).
    let out = agree_at_every_budget(
        "ldxb %r2, [%r1+42]\nand %r2, 63\nlsh %r2, 2\nmov %r3, %r10\nadd %r3, -256\n\
         add %r3, %r2\nldxdw %r0, [%r3+0]\nexit",
    );
    assert!(out.result.is_err(), "{out:?}");
    let out = agree_at_every_budget(
        "ldxb %r2, [%r1+63]\nlsh %r2, 2\nmov %r3, %r10\nadd %r3, -256\nadd %r3, %r2\n\
         ldxw %r0, [%r3+0]\nexit",
    );
    assert!(out.result.is_err(), "{out:?}");
    // The same index in a callee's frame lands in its caller's: checked, and allowed.
    let out = agree_at_every_budget(
        "stw [%r10-8], 5\ncall local f\nexit\n\
         f:\nldxb %r2, [%r1+63]\nlsh %r2, 2\nmov %r3, %r10\nadd %r3, -256\nadd %r3, %r2\n\
         ldxw %r0, [%r3+0]\nexit",
    );
    assert!(out.result.is_ok(), "{out:?}");
    // What one path knows is forgotten where another joins it: r3 is r10+8 on the
    // jumping path.
    let out = agree_at_every_budget(
        "ldxb %r2, [%r1+0]\nmov %r3, %r10\nadd %r3, 8\njeq %r2, 1, +2\nmov %r3, %r10\n\
         add %r3, -64\nldxdw %r0, [%r3+0]\nexit",
    );
    assert!(out.result.is_err(), "{out:?}");
}

/// A histogram on the stack (`count[b[i] & 15]++`, the `hist` kernel's shape) in a
/// loop, then summed: the same counts as the interpreter at every budget.
#[test]
fn a_stack_histogram_agrees() {
    let mut src = String::new();
    for k in 1..=16 {
        src.push_str(&format!("stdw [%r10-{}], 0\n", 8 * k));
    }
    src.push_str(
        "mov %r6, 0\n\
         top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r2, [%r4+0]\nand %r2, 15\nlsh %r2, 3\n\
         mov %r3, %r10\nadd %r3, -128\nadd %r3, %r2\nldxdw %r5, [%r3+0]\nadd %r5, 1\n\
         stxdw [%r3+0], %r5\nadd %r6, 1\njlt %r6, 64, top\n\
         mov %r0, 0\nldxdw %r5, [%r10-128]\nadd %r0, %r5\nldxdw %r5, [%r10-120]\nmul %r0, 31\n\
         add %r0, %r5\nldxdw %r5, [%r10-16]\nmul %r0, 31\nadd %r0, %r5\nexit",
    );
    let out = agree_at_every_budget(&src);
    assert!(out.result.is_ok(), "{out:?}");
}

/// Region 3 of [`every_budget_with`]: 4 read-only bytes, shorter than any region the
/// caches hold.
static SHORT: [u8; 4] = [0xa1, 0xb2, 0xc3, 0xd4];

/// A host whose helper 5 maps [`SHORT`] at region 2 (in place of its 64 bytes) and
/// returns 0.
struct RemapHost;

impl HelperHost for RemapHost {
    fn call(&mut self, id: u32, _: [u64; 5], mem: &mut MemoryMap<'_>) -> Result<u64, HelperAbort> {
        assert_eq!(id, 5);
        mem.map_read_only(RegionIdx(2), &SHORT).unwrap();
        Ok(0)
    }
}

/// Runs `src` on the interpreter and the quick tier at every budget from 0 to what a
/// full run uses (and a generous one), with r1 = region 2 (64 writable bytes `3i + 1`),
/// r2 = 64, r3 = region 3 ([`SHORT`], read-only), and [`RemapHost`]'s helper: value,
/// trap (kind and pc), fuel and memory agree at each, and so do block counts.
fn every_budget_with_regions(src: &str) -> RunOutcome {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let p = verified(insns).expect("verifies");
    let run_at = |engine: &dyn Engine, fuel: u64, counts: Option<&ExecCounts>| {
        let mut rw: Vec<u8> = (0..64).map(|i| i * 3 + 1).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
        let b = map.map_read_only(RegionIdx(3), &SHORT).unwrap();
        let opts = RunOptions {
            fuel,
            counts,
            ..RunOptions::default()
        };
        let out = engine.run(&mut map, [a, 64, b, 0, 0], &opts, &mut RemapHost);
        (out, rw)
    };
    quick_matches_at_every_budget(&p, run_at)
}

fn trap_pc(out: &RunOutcome) -> u32 {
    match &out.result {
        Err(t) => t.pc,
        Ok(v) => panic!("no trap: {v}"),
    }
}

/// The region caches (one for loads, one for stores) hold the region an access last
/// went to; a hit is `offset <= len - 8`. Each case is a loop whose accesses leave the
/// cached region or its last 8 bytes at some iteration: value, trap pc and fuel stay the
/// interpreter's at every budget.
#[test]
fn region_caches_follow_the_region_table() {
    // 8-byte loads at every offset of region 2: 56 is the last a hit serves, 57 reaches
    // a byte past the region (a cache limit of `len` rather than `len - 8` reads it).
    let scan = |last: u32, size: &str| {
        format!(
            "mov %r0, 0\nmov %r6, 0\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldx{size} %r5, [%r4+0]\nadd %r0, %r5\n\
             mul %r0, 3\nadd %r6, 1\njle %r6, {last}, top\nexit"
        )
    };
    assert!(every_budget_with_regions(&scan(56, "dw")).result.is_ok());
    assert_eq!(trap_pc(&every_budget_with_regions(&scan(57, "dw"))), 4);
    // 4- and 1-byte accesses in the last 8 bytes miss and are served by the table.
    assert!(every_budget_with_regions(&scan(60, "w")).result.is_ok());
    assert_eq!(trap_pc(&every_budget_with_regions(&scan(61, "w"))), 4);
    assert!(every_budget_with_regions(&scan(63, "b")).result.is_ok());
    assert_eq!(trap_pc(&every_budget_with_regions(&scan(64, "b"))), 4);
    // Loads alternating between region 2 and the 4-byte region 3 (never cached: its
    // `len - 8` would wrap), the fourth pass reading past region 3's end.
    let alternate = |passes: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldxw %r5, [%r4+8]\nadd %r0, %r5\n\
             mov %r4, %r3\nadd %r4, %r6\nldxb %r5, [%r4+0]\nxor %r0, %r5\n\
             add %r6, 1\njlt %r6, {passes}, top\nexit"
        )
    };
    assert!(every_budget_with_regions(&alternate(4)).result.is_ok());
    assert_eq!(trap_pc(&every_budget_with_regions(&alternate(5))), 8);
    // A store after loads of the same region: the store cache is filled from the
    // region's write length, so a store into the read-only region 3 traps (a hit in a
    // cache shared with loads would let it through), and stores into region 2 land.
    let out = every_budget_with_regions(
        "mov %r6, 0\n\
         top:\nmov %r4, %r1\nadd %r4, %r6\nldxdw %r5, [%r4+0]\nadd %r5, 1\n\
         stxdw [%r4+8], %r5\nadd %r6, 8\njlt %r6, 48, top\nldxdw %r0, [%r1+48]\nexit",
    );
    assert!(out.result.is_ok(), "{out:?}");
    let out = every_budget_with_regions(
        "mov %r6, 0\n\
         top:\nldxb %r5, [%r3+0]\nmov %r4, %r1\nadd %r4, %r6\nstxb [%r4+0], %r5\n\
         add %r6, 1\njlt %r6, 3, top\nldxb %r0, [%r3+1]\nstxb [%r3+1], %r0\nexit",
    );
    assert_eq!(trap_pc(&out), 8);
    // Just below region 2 (the last bytes of region 1's 4 GiB of offsets) and past the
    // table's last region, with region 2 cached.
    let out = every_budget_with_regions(
        "ldxdw %r0, [%r1+0]\nmov %r4, %r1\nadd %r4, -4\nldxdw %r5, [%r4+0]\nexit",
    );
    assert_eq!(trap_pc(&out), 3);
    let out = every_budget_with_regions(
        "ldxdw %r0, [%r1+0]\nlddw %r4, 0x2000000000\nstxb [%r4+0], %r0\nexit",
    );
    assert_eq!(trap_pc(&out), 3);
}

/// A helper may remap regions: the caches forget what they held at every helper call,
/// so a load of region 2 at offset 40 after its 64 bytes were replaced by 4 traps.
#[test]
fn a_helper_that_remaps_a_region_empties_the_caches() {
    let src = |k: u32| {
        format!(
            "mov %r6, %r1\nldxdw %r7, [%r6+40]\nstxdw [%r6+32], %r7\nmov %r1, 0\ncall 5\n\
             ldxb %r0, [%r6+{k}]\nexit"
        )
    };
    assert_eq!(every_budget_with_regions(&src(3)).result, Ok(0xd4));
    assert_eq!(trap_pc(&every_budget_with_regions(&src(40))), 5);
}

/// `lsh 32` then `rsh 32` (`arsh 32`) on one register is emitted as one zero- (sign-)
/// extension; a pair whose second half is a jump target, another register's shift or
/// another count stays two shifts.
#[test]
fn shift_pairs_extend_like_the_two_shifts() {
    let values = [
        0x8000_0000_8000_0001,
        0xffff_ffff_7fff_ffff,
        0x1234_5678_9abc_def0,
        u64::MAX,
        0,
        0x0000_0001_ffff_fffe,
        1 << 63,
        0x7fff_ffff,
        0x8000_0000,
        0xdead_beef_cafe_f00d,
    ];
    let shift = |op: u8, r: u8, k: i32| Insn::new(CLASS_ALU64 | op, r, 0, 0, k);
    for second in [ALU_RSH, ALU_ARSH] {
        let mut body = Vec::new();
        for r in 0..10 {
            body.push(shift(ALU_LSH, r, 32));
            body.push(shift(second, r, 32));
        }
        agree(&verified(all_registers(&values, &body)).unwrap());
        // Not fused: another register, another count.
        let body = [
            shift(ALU_LSH, 3, 32),
            shift(second, 4, 32),
            shift(ALU_LSH, 5, 32),
            shift(second, 5, 31),
            shift(ALU_LSH, 6, 31),
            shift(second, 6, 32),
        ];
        agree(&verified(all_registers(&values, &body)).unwrap());
        // The second shift is a jump target: reached with r1 unshifted when r2 is odd.
        let body = [
            Insn::new(CLASS_JMP | JMP_JSET, 2, 0, 1, 1),
            shift(ALU_LSH, 1, 32),
            shift(second, 1, 32),
        ];
        for v2 in [0u64, 1] {
            let mut values = values;
            values[2] = v2;
            agree(&verified(all_registers(&values, &body)).unwrap());
        }
    }
}

/// Accesses through one register in a straight run are checked once as a span (a span
/// group); where the span leaves the cached region, the run's slow copy checks each one,
/// so a trap comes at the first access out of bounds, with the stores before it done.
/// Region 2 holds 64 bytes.
#[test]
fn span_groups_trap_at_the_first_access_out_of_bounds() {
    // A byte at +0 and a word at +1, stored then loaded, at every offset up to `last`:
    // at 60 the word ends at 65, past the region, after the byte's store at 60 (the
    // stores are seen in the memory compared).
    let stores = |last: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nstb [%r4+0], 7\nstxw [%r4+1], %r6\n\
             stdw [%r10-8], 5\nadd %r0, %r6\nadd %r6, 1\njle %r6, {last}, top\n\
             ldxdw %r0, [%r1+56]\nexit"
        )
    };
    assert!(every_budget_with_regions(&stores(59)).result.is_ok());
    assert_eq!(trap_pc(&every_budget_with_regions(&stores(60))), 5);
    // Loads at -4, +6 and +12 (a span of 20 bytes, checked at both ends) from r1 + 4 +
    // 4i, with r10's frame read between them and the base overwritten by the last: 12
    // passes end at byte 64, the 13th reads past it.
    let loads = |passes: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\nstdw [%r10-8], 3\n\
             top:\nmov %r4, %r6\nlsh %r4, 2\nadd %r4, %r1\nadd %r4, 4\n\
             ldxw %r5, [%r4-4]\nldxdw %r7, [%r10-8]\nadd %r0, %r7\nadd %r0, %r5\n\
             ldxh %r5, [%r4+6]\nxor %r0, %r5\nldxw %r4, [%r4+12]\nmul %r0, 31\nadd %r0, %r4\n\
             add %r6, 1\njlt %r6, {passes}, top\nexit"
        )
    };
    assert!(every_budget_with_regions(&loads(12)).result.is_ok());
    assert_eq!(trap_pc(&every_budget_with_regions(&loads(13))), 13);
    // Below the region: the span's low end, not its first access, is out of bounds.
    let out = every_budget_with_regions(
        "ldxb %r0, [%r1+0]\nldxb %r5, [%r1+3]\nldxb %r6, [%r1-1]\nadd %r0, %r6\nexit",
    );
    assert_eq!(trap_pc(&out), 2);
    // The read-only region 3 (never cached): a store group there goes to the slow copy,
    // which traps at the first store; a load group reads it.
    let out = every_budget_with_regions(
        "ldxb %r0, [%r3+0]\nldxb %r5, [%r3+3]\nadd %r0, %r5\nstb [%r3+0], 1\nstb [%r3+1], 2\nexit",
    );
    assert_eq!(trap_pc(&out), 3);
    // A group in a counted block whose second member is another block's leader: the
    // counts agree (checked by the sweep).
    let out = every_budget_with_regions(
        "mov %r6, 0\ntop:\nldxb %r0, [%r1+0]\njeq %r6, 1, +1\nldxb %r5, [%r1+1]\n\
         ldxb %r5, [%r1+2]\nadd %r6, 1\njlt %r6, 3, top\nexit",
    );
    assert!(out.result.is_ok(), "{out:?}");
}

/// A loop's last backward conditional jump charges its fuel before the compare and
/// undoes the charge when it falls through (`Emitter::back_edge`), and `jcc +1; ja back`
/// is one such jump with its condition inverted; an earlier backward jump to the same
/// head charges on its taken path: value, trap pc and fuel stay the
/// interpreter's at every budget, for every kind of compare (unsigned, signed, 32-bit,
/// `jset`, r10 as an operand), with the exit iteration's charge made and undone (the
/// budget that a full run uses leaves the slice empty there), and where the `ja` is a
/// jump target of its own (not fused).
#[test]
fn back_edges_charge_first_and_undo_on_exit() {
    let loops = [
        "mov %r6, 0\ntop:\nadd %r0, %r6\nadd %r6, 1\njlt %r6, 20, top\n",
        "mov %r7, 0\ntop:\nadd %r0, %r7\nadd %r7, 3\njeq %r7, 30, +1\nja top\n",
        "mov32 %r8, -10\ntop:\nadd32 %r8, 1\nadd %r0, 1\njslt32 %r8, 0, top\n",
        "mov %r9, 0xff\ntop:\nrsh %r9, 1\nadd %r0, 2\njset %r9, 0x7f, top\n",
        "mov %r5, %r10\nadd %r5, -40\ntop:\nadd %r5, 8\nadd %r0, 1\njlt %r5, %r10, top\n",
        "mov %r5, %r10\nadd %r5, -40\ntop:\nadd %r5, 8\nadd %r0, 1\njgt %r10, %r5, +1\n\
         ja +1\nja top\n",
        // The `ja` is also the target of the jump before the loop: not fused.
        "mov %r7, 0\njeq %r7, 0, back\ntop:\nadd %r0, %r7\nadd %r7, 5\njeq %r7, 40, +1\n\
         back:\nja top\n",
        // Two backward jumps to one head: the earlier one (taken once) keeps its charge
        // on the taken path, the last closes the loop.
        "mov %r6, 0\ntop:\nadd %r6, 1\njeq %r6, 3, top\nadd %r0, %r6\njlt %r6, 10, top\n",
        // Nested: the inner loop's exit falls into the outer loop's back edge.
        "mov %r6, 0\nouter:\nmov %r7, 0\ninner:\nldxb %r3, [%r1+0]\nadd %r0, %r3\n\
         add %r7, 1\njlt %r7, 4, inner\nadd %r6, 1\njeq %r6, 5, +1\nja outer\n",
    ];
    for body in loops {
        let out = agree_at_every_budget(&format!("mov %r0, 0\n{body}exit"));
        assert!(out.result.is_ok(), "{body}: {out:?}");
        assert!(out.fuel_used > 0, "{body}: {out:?}");
    }
}

/// Loads address `[r11 + r9]`, r9 being the read cache's host base for the whole run
/// (`emit::READ_BASE`): it stays right across what uses r9 or changes the cache (a
/// division, an atomic's callout, a read miss to a region too short to cache, a miss in
/// a local callee, a store of r10's value through the write cache, a span group of
/// loads; the first load hits the stack through the cache the prologue set): value, trap pc, fuel and memory are the interpreter's at every budget.
#[test]
fn the_read_base_survives_what_uses_r9() {
    let src = "mov %r8, 0\nmov %r6, 0\nmov %r2, %r10\nstdw [%r10-8], 5\n\
               top:\nldxdw %r4, [%r2-8]\nadd %r8, %r4\nldxb %r4, [%r1+5]\nadd %r8, %r4\nmov %r5, 7\ndiv %r4, %r5\n\
               ldxb %r4, [%r1+9]\nadd %r8, %r4\nldxb %r4, [%r3+1]\nadd %r8, %r4\n\
               ldxb %r4, [%r1+11]\nadd %r8, %r4\nstxdw [%r1+16], %r10\nldxdw %r4, [%r1+16]\n\
               sub %r4, %r10\nadd %r8, %r4\nmov %r7, 1\nlock fetch add [%r1+32], %r7\n\
               ldxb %r4, [%r1+13]\nadd %r8, %r4\nadd %r8, %r7\ncall local f\nadd %r8, %r0\n\
               ldxb %r4, [%r1+20]\nldxb %r5, [%r1+21]\nadd %r8, %r4\nadd %r8, %r5\n\
               mod %r8, 100003\nldxh %r4, [%r1+24]\nadd %r8, %r4\n\
               add %r6, 1\njlt %r6, 3, top\nmov %r0, %r8\nexit\n\
               f:\nldxb %r0, [%r3+2]\nldxb %r4, [%r1+40]\nadd %r0, %r4\nexit";
    let out = every_budget_with_regions(src);
    assert!(out.result.is_ok(), "{out:?}");
}

/// Accesses through one register proven in the frame, in a straight run, compute its
/// host address once (`Emitter::proven_host`) and use it again until the register is
/// written or something else uses r11 (a division, a shift by a register, another
/// register's checked access); an access at r10 plus a constant keeps it. Value, fuel
/// and memory are the interpreter's at every budget, for each byte the index comes from.
#[test]
fn proven_accesses_share_a_host_address_until_it_changes() {
    for at in [0, 5, 63] {
        let out = agree_at_every_budget(&format!(
            "ldxb %r2, [%r1+{at}]\nand %r2, 15\nlsh %r2, 3\nmov %r3, %r10\nadd %r3, -256\n\
             add %r3, %r2\nstdw [%r3+0], 11\nldxdw %r4, [%r3+0]\nadd %r3, 8\n\
             stdw [%r3+0], 22\nldxdw %r5, [%r3-8]\nadd %r4, %r5\nmov %r6, 7\ndiv %r6, 3\n\
             ldxdw %r5, [%r3+0]\nadd %r4, %r5\nldxb %r7, [%r1+3]\nldxdw %r5, [%r3+0]\n\
             add %r4, %r5\nmov %r8, 3\nlsh %r6, %r8\nstxdw [%r3+8], %r4\n\
             stdw [%r10-8], 9\nldxdw %r5, [%r3+8]\nadd %r4, %r5\nldxdw %r5, [%r10-8]\n\
             add %r4, %r5\nmov %r3, %r10\nadd %r3, -64\nldxdw %r0, [%r3+0]\n\
             add %r0, %r4\nadd %r0, %r6\nadd %r0, %r7\nexit"
        ));
        assert!(out.result.is_ok(), "{out:?}");
    }
}

/// Loop heads are aligned (`emit::loop_heads`) but where the slot before falls in from
/// a loop not nested in the head's: csv's shape (a digit loop falling into the head of
/// the loop its separators close) leaves that head unpadded; an inner loop's head, and
/// a head after a `ja`, stay aligned. The programs agree with the interpreter.
#[test]
fn loop_heads_fallen_into_by_another_loop_are_not_padded() {
    let heads = |src: &str| {
        let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
        let heads = super::emit::loop_heads(&insns);
        agree_at_every_budget(src);
        (0..insns.len()).filter(|&i| heads[i]).collect::<Vec<_>>()
    };
    let csv = "mov %r0, 0\nmov %r5, 0\ntop:\nldxb %r8, [%r1+0]\njgt %r8, 100, sep\n\
               add %r0, %r8\nnext:\nadd %r5, 1\njlt %r5, 10, top\nexit\n\
               sep:\nadd %r0, 1\nja next";
    assert_eq!(heads(csv), [2]);
    let nested = "mov %r0, 0\nmov %r6, 0\nouter:\nmov %r7, 0\ninner:\nadd %r0, 1\n\
                  add %r7, 1\njlt %r7, 4, inner\nadd %r6, 1\njlt %r6, 4, outer\nexit";
    assert_eq!(heads(nested), [2, 3]);
    // The second loop's head follows a `ja`: nothing falls into it.
    let after_ja = "mov %r0, 0\nmov %r5, 0\ntop:\nadd %r0, 3\nja skip\nnext:\nadd %r0, 1\n\
                    skip:\nadd %r5, 1\njlt %r5, 10, top\njlt %r0, 50, next\nexit";
    assert_eq!(heads(after_ja), [2, 4]);
}

/// Runs `src` with `globals` on the interpreter and the quick tier at every budget from
/// 0 to what a full run uses: value, trap (kind and pc), fuel and memory agree at each,
/// and block counts too.
fn every_budget_with_globals(src: &str, globals: Vec<GlobalSection>) -> RunOutcome {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let p = Program {
        insns,
        entry: 0,
        globals,
        name: "quick-test".into(),
    };
    let p = Arc::new(
        verify(p, Arc::new(FunctionTable::conformance())).unwrap_or_else(|e| panic!("{e}")),
    );
    let run_at = |engine: &dyn Engine, fuel: u64, counts: Option<&ExecCounts>| {
        let mut rw: Vec<u8> = (0..64).map(|i| i * 3 + 1).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
        let opts = RunOptions {
            fuel,
            counts,
            ..RunOptions::default()
        };
        let out = engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut ConformanceHost);
        (out, rw)
    };
    quick_matches_at_every_budget(&p, run_at)
}

/// An access through a global's address at an offset the one pass cannot bound (a DFA's
/// `next[state * 5 + class]`, the state loaded in the loop before) is checked against
/// the section's length, not the region cache, and goes to the miss routine outside it:
/// in range; past the table's end (a trap at the interpreter's pc); below its start (in
/// no region); 2^32 past it (in the next section, which the interpreter reads and
/// writes); and stores into a writable section: value, trap, fuel and memory agree at
/// every budget.
#[test]
fn globals_at_unbounded_offsets_agree() {
    let sections = |table_len: usize| {
        vec![
            GlobalSection {
                name: ".rodata".into(),
                data: (0..table_len).map(|i| (i * 3 % 8) as u8).collect(),
                writable: false,
            },
            GlobalSection {
                name: ".data".into(),
                data: vec![5; 16],
                writable: true,
            },
        ]
    };
    let dfa = |extra: &str| {
        format!(
            "mov %r0, 0\nmov %r5, 0\nmov %r6, 0\ntop:\nlddw %r7, 0x1600000000\n\
             lddw %r9, 0x1700000000\nmov %r8, %r1\nadd %r8, %r6\nldxb %r3, [%r8+0]\nand %r3, 7\n\
             mul %r5, 5\nadd %r5, %r3\nmov %r4, %r7\nadd %r4, %r5\n{extra}\
             ldxb %r5, [%r4+0]\nadd %r0, %r5\nmov %r2, %r9\nadd %r2, %r5\nstxb [%r2+0], %r6\n\
             add %r6, 1\njlt %r6, 20, top\nlddw %r9, 0x1700000000\nldxdw %r2, [%r9+8]\n\
             add %r0, %r2\nexit"
        )
    };
    // Every index is below 43: in range.
    let out = every_budget_with_globals(&dfa(""), sections(43));
    assert!(out.result.is_ok(), "{out:?}");
    // A shorter table: some index reaches past its end.
    let out = every_budget_with_globals(&dfa(""), sections(30));
    assert!(out.result.is_err(), "{out:?}");
    // Below the table's start: region 0x15, unmapped.
    let out = every_budget_with_globals(&dfa("add %r4, -8\n"), sections(43));
    assert!(out.result.is_err(), "{out:?}");
    // 2^32 on: the next section (16 bytes), read where the index stays in it.
    let out = every_budget_with_globals(
        &dfa(
            "mov %r2, %r5\nand %r2, 15\nlddw %r4, 0x100000000\nadd %r2, %r4\n\
              mov %r4, %r7\nadd %r4, %r2\n",
        ),
        sections(43),
    );
    assert!(out.result.is_ok(), "{out:?}");
}

/// A loop reading its input and a stack array through a pointer kept in a stack slot
/// and loaded back (as clang spills one): the slot keeps the pointer's region hint
/// (`Hints::spills`), so its accesses are checked against the stack's bounds and the
/// read cache stays on the input; stores alternate the same way. Value, trap pc, fuel
/// and memory are the interpreter's at every budget, in the stack, straddling its top
/// (8 bytes at 4 below it), past its top, and below its base.
#[test]
fn spilled_stack_pointers_keep_their_region() {
    let src = |start: i32, passes: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\nmov %r3, %r10\nadd %r3, {start}\nstxdw [%r10-200], %r3\n\
             ldxdw %r3, [%r10-200]\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
             ldxdw %r5, [%r3+0]\nadd %r0, %r5\nmul %r0, 3\nstxdw [%r3+0], %r0\n\
             stxb [%r4+0], %r5\nldxw %r5, [%r3+4]\nadd %r0, %r5\nstxh [%r3+6], %r0\n\
             add %r3, 8\nadd %r6, 1\njlt %r6, {passes}, top\nldxdw %r5, [%r10-64]\n\
             add %r0, %r5\nexit"
        )
    };
    // Eight passes over r10-64..r10: in the stack.
    assert!(agree_at_every_budget(&src(-64, 8)).result.is_ok());
    // The second pass's 8-byte load at r10-4 reaches 4 bytes past the stack's top.
    assert_eq!(trap_pc(&agree_at_every_budget(&src(-12, 3))), 10);
    // The third pass's load at r10.
    assert_eq!(trap_pc(&agree_at_every_budget(&src(-16, 3))), 10);
    // 8 bytes below the stack's first byte (the entry frame is the top of 8).
    assert_eq!(trap_pc(&agree_at_every_budget(&src(-4104, 2))), 10);
    // The stack's last 8 bytes (a 4-byte load and a 2-byte store ending at its top) and
    // its first 8.
    assert!(agree_at_every_budget(&src(-8, 1)).result.is_ok());
    assert!(agree_at_every_budget(&src(-4096, 1)).result.is_ok());
}

/// A pointer into a stack array set before a loop and stepped by adds in it (colsum24's
/// `cols[c] += m[i * 24 + c]`) keeps its region across the loop's head as a hint
/// (`Known::within`): its accesses are checked against the stack's fixed bounds, not
/// the cache the input's loads use. The hint only picks the check: a register hinted
/// as the stack that holds an input address (r10 plus the input's distance from it)
/// fails it and the miss routine serves it. Value, trap pc, fuel and memory are the
/// interpreter's at every budget: in the stack, straddling its top, below its base.
#[test]
fn stack_pointers_carried_into_loops_are_checked_against_the_stack() {
    let src = |start: i32, passes: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\nmov %r3, %r10\nadd %r3, {start}\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
             ldxw %r7, [%r3+0]\nadd %r7, %r5\nstxw [%r3+0], %r7\nadd %r0, %r7\n\
             ldxdw %r5, [%r3+0]\nxor %r0, %r5\nadd %r3, 4\nadd %r6, 1\n\
             jlt %r6, {passes}, top\nldxdw %r5, [%r10-64]\nadd %r0, %r5\nexit"
        )
    };
    assert!(agree_at_every_budget(&src(-64, 14)).result.is_ok());
    // The 8-byte load at r10-4 (the third pass from r10-12) reaches past the top.
    assert_eq!(trap_pc(&agree_at_every_budget(&src(-12, 3))), 12);
    assert_eq!(trap_pc(&agree_at_every_budget(&src(-4100, 2))), 8);
    // Hinted as the stack, pointing at the input: r3 = r10 + (r1 - r10).
    let out = agree_at_every_budget(
        "mov %r0, 0\nmov %r6, 0\nmov %r3, %r1\nsub %r3, %r10\nmov %r2, %r10\nadd %r2, %r3\n\
         top:\nldxb %r5, [%r2+0]\nadd %r0, %r5\nstxb [%r2+1], %r0\nadd %r2, 1\n\
         add %r6, 1\njlt %r6, 70, top\nexit",
    );
    assert_eq!(trap_pc(&out), 8);
}

/// Versioned loops (`emit/versioned.rs`): a guard at the header proves the loop's strided
/// accesses in the cached region for as many iterations as it lets the fuel slice pay
/// for, then an unchecked copy runs them; a charge the cut slice cannot pay leaves for
/// the checked loop, which refills and goes back through the guard. Region 2 holds 64
/// bytes `3i + 1`; value, trap pc, fuel and memory are the interpreter's at every
/// budget, for loads and stores, strides up, down, of 1, 3 and 4 bytes, a fused
/// `jcc +1; ja` back edge, loops that run out of their region, and beside them loops
/// left on what they read or by an `exit` (not versioned: the same code as before).
#[test]
fn versioned_loops_agree_at_every_budget() {
    // r1 + i for i up to `last` (63 is the region's last byte).
    let bytes = |last: u32| {
        format!(
            "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r6, 0\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\nmul %r0, 3\n\
             add %r6, 1\njle %r6, {last}, top\nexit"
        )
    };
    assert!(agree_at_every_budget(&bytes(63)).result.is_ok());
    assert_eq!(trap_pc(&agree_at_every_budget(&bytes(64))), 5);
    // Words through a stepped pointer, down from the end; past the start it traps.
    let down = |passes: u32| {
        format!(
            "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r3, %r1\nadd %r3, 60\nmov %r6, 0\n\
             top:\nldxw %r5, [%r3+0]\nxor %r0, %r5\nadd %r0, 7\nadd %r3, -4\n\
             add %r6, 1\njlt %r6, {passes}, top\nexit"
        )
    };
    assert!(agree_at_every_budget(&down(16)).result.is_ok());
    assert_eq!(trap_pc(&agree_at_every_budget(&down(17))), 5);
    // A stride of 3 (the guard divides), 2-byte loads at +0 and +1 as one span.
    let threes = |passes: u32| {
        format!(
            "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r3, %r1\nmov %r6, 0\n\
             top:\nldxh %r5, [%r3+0]\nadd %r0, %r5\nldxh %r5, [%r3+1]\nxor %r0, %r5\n\
             add %r3, 3\nadd %r6, 1\njlt %r6, {passes}, top\nexit"
        )
    };
    assert!(agree_at_every_budget(&threes(21)).result.is_ok());
    assert_eq!(trap_pc(&agree_at_every_budget(&threes(22))), 4);
    // Stores after a store fills the write cache: a strided fill, then a read back.
    let fill = |last: u32| {
        format!(
            "mov %r0, 0\nstb [%r1+0], 9\nmov %r6, 0\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nstxb [%r4+0], %r6\nldxb %r5, [%r4+0]\n\
             add %r0, %r5\nadd %r6, 1\njle %r6, {last}, top\nldxdw %r0, [%r1+40]\nexit"
        )
    };
    assert!(agree_at_every_budget(&fill(63)).result.is_ok());
    assert_eq!(trap_pc(&agree_at_every_budget(&fill(64))), 5);
    // `jcc +1; ja top` closing the loop, a branch inside on a byte's value.
    let out = agree_at_every_budget(
        "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r6, 0\n\
         top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njeq %r5, 178, +1\n\
         add %r0, %r5\nadd %r6, 1\njeq %r6, 64, +1\nja top\nexit",
    );
    assert!(out.result.is_ok(), "{out:?}");
    // An early exit on a byte's value.
    let out = agree_at_every_budget(
        "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r6, 0\n\
         top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\njeq %r5, 178, out\n\
         add %r0, %r5\nadd %r6, 1\njeq %r6, 64, +1\nja top\nout:\nexit",
    );
    assert!(out.result.is_ok(), "{out:?}");
    // An `exit` inside the loop, and no load before it (the read cache is the stack's
    // on entry: the guard fails and the checked loop runs).
    let out = agree_at_every_budget(
        "mov %r0, 0\nmov %r6, 0\n\
         top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
         jlt %r0, 1000, +1\nexit\nadd %r6, 1\njlt %r6, 64, top\nexit",
    );
    assert!(out.result.is_ok(), "{out:?}");
}

/// A copy that keeps the slice in a register (`emit/versioned.rs`, r9's here: the loop
/// names every other candidate) gives r9 back and the slice back to the context on
/// every way out: the loop's end, a jump out of it on its index, and a slice too
/// short (at every budget); a loop that reads one byte past the region leaves the
/// copy and traps in the checked loop. Value, trap pc, fuel and memory are the
/// interpreter's at every budget, with r9 live across the loop; likewise for a copy
/// that can trap, which keeps the slice in the context.
#[test]
fn a_slice_in_a_register_comes_back_on_every_way_out() {
    let src = |last: u32, exit_at: u32| {
        format!(
            "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r9, 0x5a5a\nmov %r6, 0\n\
             mov %r7, 5\nmov %r8, 11\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
             mul %r0, 3\nadd %r7, %r5\nxor %r8, %r7\nmov %r2, %r8\nmov %r3, %r0\n\
             jeq %r6, {exit_at}, out\nadd %r6, 1\njle %r6, {last}, top\n\
             out:\nadd %r0, %r9\nxor %r0, %r2\nmul %r9, %r6\nadd %r0, %r9\nexit"
        )
    };
    let done = agree_at_every_budget(&src(63, 99));
    assert!(done.result.is_ok(), "{done:?}");
    let left = agree_at_every_budget(&src(63, 40));
    assert!(left.result.is_ok(), "{left:?}");
    assert_ne!(left.result, done.result);
    assert_eq!(trap_pc(&agree_at_every_budget(&src(64, 99))), 8);
    // A load at an index read from the input stays checked in the copy, and may trap
    // there: that copy charges the context's slice (emitted again without the
    // register), and a trap in it reports the interpreter's fuel.
    let gather = |mask: u32| {
        format!(
            "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r6, 0\n\
             top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nand %r5, {mask}\n\
             mov %r3, %r1\nadd %r3, %r5\nldxb %r7, [%r3+0]\nadd %r0, %r7\n\
             add %r6, 1\njlt %r6, 64, top\nexit"
        )
    };
    assert!(agree_at_every_budget(&gather(63)).result.is_ok());
    assert_eq!(trap_pc(&agree_at_every_budget(&gather(255))), 9);
}

/// A versioned loop over 64 KiB: its iterations outlast many slices, and the guard
/// cuts the slice, so the copy leaves for the checked loop at each refill and comes
/// back through the guard. Value, trap pc and fuel are the interpreter's at budgets
/// around the slice's size and its multiples and at the full run's.
#[test]
fn versioned_loops_across_refills() {
    const LEN: usize = 1 << 16;
    let src = "mov %r0, 0\nldxb %r5, [%r1+0]\nmov %r6, 0\n\
               top:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\nadd %r0, %r5\n\
               mul %r0, 3\nadd %r6, 1\njlt %r6, %r2, top\nexit";
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let p = verified(insns).expect("verifies");
    let quick = QuickProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let interp = Interpreter::new(p.clone());
    let run_at = |engine: &dyn Engine, fuel: u64, len: usize| {
        let mut rw: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
        let opts = RunOptions {
            fuel,
            ..RunOptions::default()
        };
        engine.run(
            &mut map,
            [a, len as u64, 0, 0, 0],
            &opts,
            &mut ConformanceHost,
        )
    };
    let full = run_at(&interp, 10_000_000, LEN);
    assert!(full.result.is_ok(), "{full:?}");
    let slice = csx_ebpf::engine::rules::STOP_SLICE;
    let mut budgets = vec![10_000_000, full.fuel_used, full.fuel_used - 1];
    for k in 1..=full.fuel_used / slice {
        budgets.extend([k * slice - 1, k * slice, k * slice + 1, k * slice + 4]);
    }
    for fuel in budgets {
        assert_eq!(
            run_at(&quick, fuel, LEN),
            run_at(&interp, fuel, LEN),
            "budget {fuel}"
        );
    }
    // One byte past the region: the last iteration traps, after every slice.
    let past = run_at(&interp, 10_000_000, LEN + 1);
    assert_eq!(trap_pc(&past), 5);
    assert_eq!(run_at(&quick, 10_000_000, LEN + 1), past);
}
