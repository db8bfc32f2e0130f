//! Unit tests: the JIT against the reference interpreter on hand-written programs that
//! aim at the JIT's own machinery (inline bounds checks per region and the cross-region
//! slow path, fuel at back-edges, the frame-pointer depth check, the helper trampoline,
//! if-conversion). Method: assemble, verify, run on both engines over identical fresh
//! memory, and require equal outcome (r0 or trap, fuel) and equal memory afterwards;
//! some tests also pin the expected trap.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use csx_ebpf::asm::assemble;
use csx_ebpf::engine::{Engine, RunOptions, RunOutcome, StopFlag};
use csx_ebpf::helper::{ArgKind, FunctionSig, FunctionTable, HelperAbort, HelperHost};
use csx_ebpf::interp::Interpreter;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::{GlobalSection, Program, VerifiedProgram};
use csx_ebpf::trap::{Trap, TrapKind};
use csx_ebpf::verifier::verify;

use super::*;
use crate::analysis::IfConv;

mod bounded_tests;
mod cache_tests;
mod count_tests;
mod cursor_tests;
mod extrema_tests;
mod guard_tests;
mod inner_tests;
mod input_tests;
mod loop_tests;
mod range_tests;
mod region_tests;
mod span_tests;
mod stack_tests;

/// Helpers of the test table: 1 sums its arguments, 2 fills `r2` bytes at `r1` with
/// 0xab, 3 aborts, 4 panics, 6 unmaps the stack.
struct TestHost;

impl HelperHost for TestHost {
    fn call(
        &mut self,
        id: u32,
        args: [u64; 5],
        mem: &mut MemoryMap<'_>,
    ) -> Result<u64, HelperAbort> {
        match id {
            1 => Ok(args.iter().fold(0u64, |a, b| a.wrapping_add(*b))),
            2 => {
                let out = mem
                    .slice_mut(args[0], args[1])
                    .expect("checked by call_helper");
                out.fill(0xab);
                Ok(args[1])
            }
            3 => Err(HelperAbort {
                code: -7,
                message: "asked to".into(),
            }),
            4 => panic!("helper 4 always panics"),
            6 => {
                mem.unmap(RegionIdx::STACK);
                Ok(0)
            }
            _ => Err(HelperAbort {
                code: -38,
                message: format!("no helper {id}"),
            }),
        }
    }
}

fn table() -> Arc<FunctionTable> {
    let mut t = FunctionTable::new();
    let sig = |id: u32, name: &str, args: Vec<ArgKind>| FunctionSig {
        name: name.into(),
        id,
        args,
        version: 1,
        doc: String::new(),
    };
    let scalars = vec![ArgKind::Scalar; 5];
    t.insert(sig(1, "sum", scalars.clone())).unwrap();
    t.insert(sig(
        2,
        "fill",
        vec![ArgKind::PtrOut { len_arg: 1 }, ArgKind::Scalar],
    ))
    .unwrap();
    t.insert(sig(3, "abort", vec![])).unwrap();
    t.insert(sig(4, "panic", vec![])).unwrap();
    t.insert(sig(6, "unmap_stack", vec![])).unwrap();
    Arc::new(t)
}

fn program(src: &str, globals: Vec<GlobalSection>) -> Arc<VerifiedProgram> {
    let insns = assemble(src).unwrap_or_else(|e| panic!("{e}"));
    let p = Program {
        insns,
        entry: 0,
        globals,
        name: "test".into(),
    };
    Arc::new(verify(p, table()).unwrap_or_else(|e| panic!("{e}")))
}

/// Region 2: 64 writable bytes `0, 1, 2, ...`; region 3: 16 read-only bytes `0x10..`.
/// r1 = region 2, r2 = its length, r3 = region 3.
fn run_on(engine: &dyn Engine, fuel: u64) -> (RunOutcome, Vec<u8>) {
    run_on_with(engine, fuel, None)
}

/// [`run_on`], counting executed blocks into `counts` when given.
fn run_on_with(
    engine: &dyn Engine,
    fuel: u64,
    counts: Option<&csx_ebpf::count::ExecCounts>,
) -> (RunOutcome, Vec<u8>) {
    let mut rw: Vec<u8> = (0..64).collect();
    let ro: Vec<u8> = (0x10..0x20).collect();
    let mut map = MemoryMap::new();
    let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
    let b = map.map_read_only(RegionIdx(3), &ro).unwrap();
    let out = engine.run(
        &mut map,
        [a, 64, b, 0, 0],
        &RunOptions {
            fuel,
            counts,
            ..RunOptions::default()
        },
        &mut TestHost,
    );
    (out, rw)
}

/// Runs `p` on both engines; asserts they agree and returns the outcome.
fn check_program(p: Arc<VerifiedProgram>, fuel: u64) -> RunOutcome {
    let p_quick = p.clone();
    let interp = Interpreter::new(p.clone());
    let jit = JitProgram::compile(p).unwrap_or_else(|e| panic!("{e}"));
    let (want, want_mem) = run_on(&interp, fuel);
    let (got, got_mem) = run_on(&jit, fuel);
    assert_eq!(got, want, "jit vs interpreter, fuel {fuel}");
    assert_eq!(got_mem, want_mem, "memory after the run, fuel {fuel}");
    count_tests::assert_counts_agree(&interp, &jit, fuel, (&got, &got_mem));
    quick_agrees(&p_quick, &want, &want_mem, fuel);
    got
}

/// The quick tier (where the host has it) agrees with the interpreter's outcome and
/// memory: every test here runs three ways.
#[cfg(target_arch = "x86_64")]
fn quick_agrees(p: &Arc<VerifiedProgram>, want: &RunOutcome, want_mem: &[u8], fuel: u64) {
    let quick = QuickProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let (got, got_mem) = run_on(&quick, fuel);
    assert_eq!(&got, want, "quick vs interpreter, fuel {fuel}");
    assert_eq!(got_mem, want_mem, "memory after the quick run, fuel {fuel}");
    let interp = Interpreter::new(p.clone());
    count_tests::assert_counts_agree(&interp, &quick, fuel, (&got, &got_mem));
}

#[cfg(not(target_arch = "x86_64"))]
fn quick_agrees(_: &Arc<VerifiedProgram>, _: &RunOutcome, _: &[u8], _: u64) {}

/// At every budget below what `full` used, `p` runs out of fuel (with that budget) on
/// every engine; at and above it, the run is `full`'s.
fn every_budget_runs_out_or_matches(p: &Arc<VerifiedProgram>, full: &RunOutcome) {
    for fuel in 0..=full.fuel_used + 1 {
        let out = check_program(p.clone(), fuel);
        if fuel < full.fuel_used {
            assert!(
                matches!(trap_of(&out).kind, TrapKind::FuelExhausted { budget } if budget == fuel)
            );
        } else {
            assert_eq!(&out, full);
        }
    }
}

fn check(src: &str) -> RunOutcome {
    check_program(program(src, vec![]), 1_000_000)
}

fn trap_of(out: &RunOutcome) -> &Trap {
    out.result.as_ref().expect_err("the program should trap")
}

#[test]
fn traps_in_every_region() {
    let cases: &[(&str, TrapKind)] = &[
        // Null page.
        (
            "mov %r0, 0\nldxdw %r0, [%r0+8]\nexit",
            TrapKind::OutOfBounds {
                addr: 8,
                size: 8,
                write: false,
            },
        ),
        // Below the stack, through a computed pointer (wraps into region 0).
        (
            "mov %r4, %r10\nadd %r4, -4100\nldxb %r0, [%r4+0]\nexit",
            TrapKind::OutOfBounds {
                addr: 0xffff_fffc,
                size: 1,
                write: false,
            },
        ),
        // Straddling the stack's end.
        (
            "mov %r4, %r10\nstxdw [%r4-4], %r1\nexit",
            TrapKind::OutOfBounds {
                addr: (1 << 32) + 4092,
                size: 8,
                write: true,
            },
        ),
        // Past the end of an embedder region, positive and negative offsets.
        (
            "ldxw %r0, [%r1+62]\nexit",
            TrapKind::OutOfBounds {
                addr: (2 << 32) + 62,
                size: 4,
                write: false,
            },
        ),
        (
            "add %r1, 8\nldxdw %r0, [%r1-9]\nexit",
            TrapKind::OutOfBounds {
                addr: (2 << 32) - 1,
                size: 8,
                write: false,
            },
        ),
        // Read-only region: store, atomic, and a store past its end (out of bounds).
        (
            "stb [%r3+0], 1\nexit",
            TrapKind::ReadOnly {
                addr: 3 << 32,
                size: 1,
            },
        ),
        (
            "mov %r4, 1\nlock add [%r3+8], %r4\nexit",
            TrapKind::ReadOnly {
                addr: (3 << 32) + 8,
                size: 8,
            },
        ),
        (
            "stw [%r3+14], 1\nexit",
            TrapKind::OutOfBounds {
                addr: (3 << 32) + 14,
                size: 4,
                write: true,
            },
        ),
        // Unmapped embedder region, and a region index past the table.
        (
            "lddw %r4, 0x500000000\nldxb %r0, [%r4+0]\nexit",
            TrapKind::OutOfBounds {
                addr: 5 << 32,
                size: 1,
                write: false,
            },
        ),
        (
            "lddw %r4, 0x2000000010\nstb [%r4+0], 1\nexit",
            TrapKind::OutOfBounds {
                addr: (32 << 32) + 16,
                size: 1,
                write: true,
            },
        ),
        (
            "lddw %r4, -1\nldxb %r0, [%r4+0]\nexit",
            TrapKind::OutOfBounds {
                addr: u64::MAX,
                size: 1,
                write: false,
            },
        ),
    ];
    for (src, kind) in cases {
        let out = check(src);
        assert_eq!(&trap_of(&out).kind, kind, "{src}");
    }
}

#[test]
fn offsets_may_carry_into_the_next_region() {
    // The last byte of region 2's address space plus 2 is byte 1 of region 3: legal.
    let out = check("lddw %r4, 0x2ffffffff\nldxb %r0, [%r4+2]\nexit");
    assert_eq!(out.result, Ok(0x11));
    // And the same from below: byte 0 of region 3 minus one is region 2's last offset.
    let out = check("lddw %r4, 0x300000000\nldxb %r0, [%r4-1]\nexit");
    assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
}

#[test]
fn globals_are_mapped_and_read_only_ones_trap() {
    let globals = vec![
        GlobalSection {
            name: ".rodata".into(),
            data: vec![7; 8],
            writable: false,
        },
        GlobalSection {
            name: ".data".into(),
            data: vec![1; 8],
            writable: true,
        },
    ];
    let src = "lddw %r4, 0x1600000000\nlddw %r5, 0x1700000000\n\
               ldxdw %r0, [%r4+0]\nldxb %r6, [%r5+3]\nadd %r0, %r6\nstxb [%r5+0], %r0\n\
               ldxb %r7, [%r5+0]\nadd %r0, %r7\nstb [%r4+0], 0\nexit";
    let out = check_program(program(src, globals), 100);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::ReadOnly {
            addr: 0x16_0000_0000,
            size: 1
        }
    );
    assert_eq!(trap_of(&out).pc, 10);
}

#[test]
fn stack_accesses_stay_in_their_frame() {
    // Values written in the caller's frame survive a call whose callee writes its own
    // frame at the same r10 offsets, and the callee reads the caller's through a pointer.
    let out = check(
        "stdw [%r10-8], 11\nmov %r1, %r10\ncall local f\nldxdw %r1, [%r10-8]\nadd %r0, %r1\nexit\n\
         f:\nstdw [%r10-8], 22\nldxdw %r0, [%r1-8]\nldxdw %r2, [%r10-8]\nadd %r0, %r2\nexit",
    );
    assert_eq!(out.result, Ok(11 + 22 + 11));
}

#[test]
fn fuel_matches_on_loops_at_every_budget() {
    // Nested loops: a conditional back-edge, a `ja` back-edge and a `ja32` one.
    let src = "mov %r0, 0\nmov %r6, 3\nouter:\nmov %r7, 4\ninner:\nadd %r0, 1\nsub %r7, 1\n\
               jne %r7, 0, inner\nsub %r6, 1\njeq %r6, 0, done\nja32 outer\ndone:\n\
               mov %r8, 2\nagain:\nsub %r8, 1\njeq %r8, 0, end\nja again\nend:\nexit";
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok(12));
    every_budget_runs_out_or_matches(&p, &full);
}

#[test]
fn infinite_loops_stop_on_fuel() {
    let out = check("ja -1");
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::FuelExhausted { budget: 1_000_000 }
    );
    assert_eq!(out.fuel_used, 1_000_001);
}

#[test]
fn recursion_up_to_the_depth_limit() {
    // f(n) = n == 0 ? 0 : 1 + f(n - 1); entry calls f(r4).
    let src = |n: u32| {
        format!(
            "mov %r1, {n}\ncall local f\nexit\n\
             f:\nmov %r0, 0\njeq %r1, 0, out\nmov %r6, %r1\nsub %r1, 1\ncall local f\n\
             add %r0, 1\nmov %r1, %r6\nout:\nexit"
        )
    };
    for n in 0..10u32 {
        let out = check(&src(n));
        // Frames: the entry plus n + 1 activations of f.
        if n + 2 <= 8 {
            assert_eq!(out.result, Ok(u64::from(n)));
        } else {
            let trap = trap_of(&out);
            assert_eq!(trap.kind, TrapKind::CallDepthExceeded { depth_max: 8 });
            assert_eq!(trap.pc, 7);
        }
    }
}

#[test]
fn local_calls_pass_and_keep_the_right_registers() {
    let out = check(
        "mov %r0, 100\nmov %r1, 1\nmov %r5, 5\nmov %r6, 6\nmov %r9, 9\ncall local f\n\
         add %r0, %r6\nadd %r0, %r9\nadd %r0, %r1\nadd %r0, %r5\nexit\n\
         f:\nadd %r0, %r6\nmov %r6, 60\nmov %r9, 90\nmov %r1, 1000\nmov %r5, 5000\nexit",
    );
    // f sees the caller's r0 and r6; the caller gets r0, r1 and r5 back but keeps r6-r9.
    assert_eq!(out.result, Ok(106 + 6 + 9 + 1000 + 5000));
}

#[test]
fn helper_calls_and_their_traps() {
    let sum = "mov %r1, 1\nmov %r2, 0\nmov %r3, 0\nmov %r4, 0\nmov %r5, 4\ncall 1\nexit";
    assert_eq!(check(sum).result, Ok(5));
    // A helper writing through a checked pointer, then its argument checks.
    let out = check("add %r1, 60\nmov %r2, 4\ncall 2\nldxw %r0, [%r1+0]\nexit");
    assert_eq!(out.result, Ok(0xabab_abab));
    let out = check("add %r1, 61\nmov %r2, 4\ncall 2\nexit");
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::HelperArgument {
            helper: 2,
            arg: 0,
            addr: (2 << 32) + 61,
            len: 4
        }
    );
    let out = check("mov %r1, %r3\nmov %r2, 1\ncall 2\nexit");
    assert!(matches!(
        trap_of(&out).kind,
        TrapKind::HelperArgument { helper: 2, .. }
    ));
    let out = check("mov %r0, 1\ncall 3\nexit");
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::HelperAbort {
            helper: 3,
            code: -7,
            message: "asked to".into()
        }
    );
    // callx with an id the table lacks, including one that is not a u32.
    for id in ["7", "-1"] {
        let out = check(&format!("mov %r8, {id}\ncall %r8\nexit"));
        assert!(matches!(trap_of(&out).kind, TrapKind::UnknownHelper { .. }));
        assert_eq!(trap_of(&out).pc, 1);
    }
}

/// A helper that panics aborts the run with the same trap (code, message, pc) and fuel
/// on both engines: compiled code must not be unwound through, and the interpreter
/// reports it the same way.
#[test]
fn helper_panics_become_aborts() {
    assert_eq!(
        csx_ebpf::interp::HELPER_PANIC_CODE,
        crate::runtime::HELPER_PANIC_CODE
    );
    let out = check("mov %r0, 3\ncall 4\nexit");
    let trap = trap_of(&out);
    assert_eq!(trap.pc, 1);
    assert!(
        matches!(&trap.kind, TrapKind::HelperAbort { helper: 4, message, .. } if message.contains("always panics")),
        "{trap}"
    );
}

/// A helper that remaps the stack aborts the run at the call on both engines.
#[test]
fn helpers_may_not_remap_the_stack() {
    let out = check("call 6\nldxdw %r0, [%r10-8]\nexit");
    assert!(matches!(
        trap_of(&out).kind,
        TrapKind::HelperAbort { helper: 6, .. }
    ));
    assert_eq!(trap_of(&out).pc, 0);
}

#[test]
fn atomics_aligned_and_unaligned() {
    let out = check(
        "mov %r4, 5\nlock fetch add [%r1+8], %r4\nmov %r0, %r4\n\
         mov %r5, 3\nlock fetch or32 [%r1+1], %r5\nadd %r0, %r5\n\
         mov %r6, 9\nlock xchg [%r1+3], %r6\nadd %r0, %r6\n\
         ldxdw %r0, [%r1+16]\nmov %r7, 77\nlock cmpxchg [%r1+16], %r7\n\
         lddw %r0, 0x1716151413121110\nlock cmpxchg32 [%r1+17], %r7\n\
         mov %r8, 0\nlock cmpxchg [%r10-8], %r8\nldxdw %r1, [%r1+16]\nadd %r0, %r1\nexit",
    );
    assert!(out.result.is_ok());
}

#[test]
fn division_edge_cases() {
    for op in [
        "div", "sdiv", "mod", "smod", "div32", "sdiv32", "mod32", "smod32",
    ] {
        for (a, b) in [
            ("-9", "0"),
            ("0x8000000000000000", "-1"),
            ("0x80000000", "-1"),
            ("-7", "2"),
        ] {
            let reg = check(&format!(
                "lddw %r0, {a}\nlddw %r2, {b}\n{op} %r0, %r2\nexit"
            ));
            let imm = check(&format!("lddw %r0, {a}\n{op} %r0, {b}\nexit"));
            assert_eq!(reg.result, imm.result, "{op} {a} {b}");
        }
    }
}

/// clang's eBPF for `x % y` with a register `y`: `q = x / y; q *= y; x -= q`, at both
/// widths and with the product either way round, over divisors `0..8` (zero at every
/// eighth step). Each becomes one hardware remainder: no divide is left in the
/// optimized code, and every engine gives the host's remainders (`x` for a zero `y`).
#[test]
fn remainders_by_registers_are_one_divide() {
    let src = "mov %r0, 0\nmov %r6, 0\nloop:\nmov %r3, %r1\nadd %r3, %r6\n\
               ldxdw %r4, [%r3+0]\nldxb %r5, [%r3+0]\nand %r5, 7\n\
               mov %r7, %r4\ndiv %r7, %r5\nmul %r7, %r5\nmov %r8, %r4\nsub %r8, %r7\n\
               mul %r0, 31\nadd %r0, %r8\n\
               mov32 %r7, %r4\ndiv32 %r7, %r5\nmov32 %r9, %r5\nmul32 %r9, %r7\n\
               mov32 %r8, %r4\nsub32 %r8, %r9\nmul %r0, 31\nadd %r0, %r8\n\
               add %r6, 1\njlt %r6, 57, loop\nexit";
    let bytes: Vec<u8> = (0..64).collect();
    let mut want = 0u64;
    for i in 0..57usize {
        let x = u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        let y = u64::from(bytes[i] & 7);
        let r64 = if y == 0 { x } else { x % y };
        let x32 = x as u32;
        let r32 = if y == 0 { x32 } else { x32 % y as u32 };
        want = want.wrapping_mul(31).wrapping_add(r64);
        want = want.wrapping_mul(31).wrapping_add(u64::from(r32));
    }
    let p = program(src, vec![]);
    let funcs = crate::translated::optimized(|| {
        JitProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    });
    use cranelift_codegen::ir::Opcode;
    let count = |op: Opcode| {
        funcs
            .iter()
            .flat_map(|f| {
                f.layout
                    .blocks()
                    .flat_map(|b| f.layout.block_insts(b))
                    .map(|i| f.dfg.insts[i].opcode())
            })
            .filter(|&o| o == op)
            .count()
    };
    // The loop's copies (unrolled groups) each hold their own two remainders.
    assert_eq!(count(Opcode::Udiv), 0);
    assert!(count(Opcode::Urem) >= 2);
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok(want));
    for fuel in [0, 1, full.fuel_used / 2, full.fuel_used - 1, full.fuel_used] {
        let out = check_program(p.clone(), fuel);
        assert_eq!(out.result.is_ok(), fuel >= full.fuel_used, "fuel {fuel}");
    }
}

#[test]
fn if_conversion_keeps_filter_results() {
    // A branchy filter over the 64 input bytes: clamp, count in range, pick the max.
    // Its branches are triangles and a diamond, which the JIT turns into selects, but
    // the running maximum (`jle %r5, %r7`), which stays a branch (`extrema`).
    let src = "mov %r0, 0\nmov %r6, 0\nmov %r7, 0\nmov %r8, 0\n\
               loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\n\
               jlt %r3, 40, small\nmov %r5, 2\nadd %r5, %r3\nja joined\nsmall:\nmov %r5, %r3\nlsh %r5, 1\njoined:\n\
               jgt %r5, 100, skip\nadd %r0, 1\nskip:\n\
               jle %r5, %r7, notmax\nmov %r7, %r5\nnotmax:\n\
               jset %r3, 1, odd\nadd %r8, %r3\nodd:\n\
               add %r6, 1\njlt %r6, %r2, loop\n\
               lsh %r0, 32\nlsh %r7, 16\nor %r0, %r7\nor %r0, %r8\nexit";
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(
        plan.functions[0].ifconv.len(),
        3,
        "{:?}",
        plan.functions[0].ifconv
    );
    let out = check_program(p, 1_000_000);
    let data: Vec<u64> = (0..64).collect();
    let mapped: Vec<u64> = data
        .iter()
        .map(|&x| if x < 40 { x << 1 } else { 2 + x })
        .collect();
    let count = mapped.iter().filter(|&&x| x <= 100).count() as u64;
    let max = mapped.iter().copied().max().unwrap();
    let even_sum: u64 = data.iter().filter(|&&x| x & 1 == 0).sum();
    assert_eq!(out.result, Ok((count << 32) | (max << 16) | even_sum));
}

#[test]
fn runs_concurrently_from_many_threads() {
    let p = program(
        "mov %r0, 0\nloop:\nadd %r0, %r2\nsub %r2, 1\njne %r2, 0, loop\nexit",
        vec![],
    );
    let jit = Arc::new(JitProgram::compile(p).unwrap());
    std::thread::scope(|s| {
        for _ in 0..4 {
            let jit = jit.clone();
            s.spawn(move || {
                for _ in 0..100 {
                    let (out, _) = run_on(&*jit, 10_000);
                    assert_eq!(out.result, Ok(64 * 65 / 2));
                }
            });
        }
    });
    assert!(jit.compile_time() > Duration::ZERO);
    assert!(jit.code_size() > 0);
}

/// Every copy of a program's entry function (`place`: the same code at each placement
/// its trial tries) gives the interpreter's outcome, a trap included, and the trial
/// chooses one of them within its runs. (x86-64 only: elsewhere there is one copy.)
#[cfg(target_arch = "x86_64")]
#[test]
fn every_placement_runs_the_same_and_one_is_chosen() {
    if std::env::var_os("CSX_JIT_PLACE").is_some() {
        panic!("unset CSX_JIT_PLACE: it forces a single placement, and this test tries them all");
    }
    // A loop charged far more fuel than the trial's minimum, so runs are timed; with
    // r2 = 64 (region 2's length) it ends on a load past the region's end.
    let sum = "mov %r0, 0\nmov %r4, 9000\nloop:\nadd %r0, %r4\nsub %r4, 1\njne %r4, 0, loop\n";
    for tail in ["exit", "add %r1, %r2\nldxb %r0, [%r1+0]\nexit"] {
        let p = program(&format!("{sum}{tail}"), vec![]);
        let interp = Interpreter::new(p.clone());
        let jit = JitProgram::compile(p).unwrap();
        let copies = jit.code.entries().copies();
        assert_eq!(
            copies,
            place::LINE as usize / place::STEP,
            "a copy at each step of a line"
        );
        assert_eq!(jit.placement(), None, "chosen before any run");
        let (want, want_mem) = run_on(&interp, 1_000_000);
        assert!(
            want.fuel_used > 20_000,
            "the runs are long enough to be timed"
        );
        let mut runs = 0;
        while jit.placement().is_none() {
            let (got, got_mem) = run_on(&jit, 1_000_000);
            assert_eq!(got, want, "run {runs} of the trial");
            assert_eq!(got_mem, want_mem);
            runs += 1;
            assert!(runs <= 20 * copies, "the trial ends within its patience");
        }
        assert!(
            runs >= 5 * copies,
            "each copy was timed five times first ({runs} runs)"
        );
        let chosen = jit.placement().unwrap();
        assert!(chosen < place::LINE && chosen.is_multiple_of(place::STEP as u32));
        let (got, _) = run_on(&jit, 1_000_000);
        assert_eq!(got, want, "on the chosen copy");
    }
}

/// The loop of clang's eBPF build of `sdk/bench/filter.c`, over 4 records of 16 bytes
/// at r1 (price, quantity, flags, region as u32), with the parameters on the stack.
/// `pass = (price < 20 && quantity >= 10) || ((flags & 1) != 0 && region == 3)`.
fn filter_program(records: u32) -> String {
    format!(
        "mov %r6, 20\nmov %r4, 1\nstdw [%r10-8], 10\nstdw [%r10-16], 3\n\
         mov %r0, 0\nmov %r7, 0\nmov %r8, 0\nmov %r2, {records}\nadd %r1, 12\n\
         loop:\nldxw %r9, [%r1-12]\njge %r9, %r6, second\n\
         ldxw %r3, [%r1-8]\nldxdw %r5, [%r10-8]\njge %r3, %r5, pass\n\
         second:\nldxw %r3, [%r1-4]\nand %r3, %r4\nlsh %r3, 32\nrsh %r3, 32\njeq %r3, 0, next\n\
         ldxw %r3, [%r1+0]\nldxdw %r5, [%r10-16]\njne %r3, %r5, next\n\
         pass:\nadd %r7, %r9\nadd %r0, 1\n\
         next:\nadd %r1, 16\nadd %r8, 1\njgt %r2, %r8, loop\n\
         lsh %r0, 32\nor %r0, %r7\nexit"
    )
}

#[test]
fn speculative_regions_keep_filter_results() {
    let p = program(&filter_program(4), vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(
        plan.functions[0].regions.len(),
        1,
        "{:?}",
        plan.functions[0]
    );
    // The data region holds bytes 0..64: records (0x03020100, 0x07060504, ...).
    let out = check_program(p, 10_000);
    assert!(out.result.is_ok());
}

#[test]
fn speculative_region_faults_only_when_the_load_runs() {
    // Six records over a 64-byte region: the first four are in bounds, the fifth
    // faults in a load inside the region (the region's loads are relative to r1 + 12).
    let src = filter_program(6);
    let out = check_program(program(&src, vec![]), 10_000);
    let trap = trap_of(&out);
    assert!(
        matches!(trap.kind, TrapKind::OutOfBounds { write: false, .. }),
        "{trap}"
    );
    // A load that would fault sits in a block that never runs: no trap.
    let src = "mov %r0, 0\nmov %r4, 7\njeq %r4, 7, skip\nldxw %r0, [%r3+100]\n\
               ldxw %r5, [%r1+0]\nadd %r0, %r5\nskip:\nldxw %r6, [%r1+4]\nadd %r0, %r6\nexit";
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(plan.functions[0].regions.len(), 1);
    let out = check_program(p, 100);
    assert_eq!(out.result, Ok(0x0706_0504));
    // And the same load in a block that runs traps at its own pc.
    let out = check(&src.replace("mov %r4, 7", "mov %r4, 8"));
    assert_eq!(trap_of(&out).pc, 3);
}

/// clang's eBPF for a four-state byte machine (held-out `states`, with a multiply to
/// spread the test region's bytes over the classes): outside a token, in a word, in a
/// number, after a backslash; returns words << 40 ^ numbers << 20 ^ moves. Its
/// classification (slots 20-40) is one speculative region whose join merges r6 from
/// five paths, inside a loop whose byte load the guard proves.
fn state_machine(len: &str) -> String {
    format!(
        "mov %r4, 0\nmov %r0, 0\nmov %r3, 0\nmov %r2, {len}\njeq %r2, 0, done\n\
         mov %r5, 0\nmov32 %r6, 0\nja top\n\
         number:\nadd %r0, 1\nnext:\nadd %r5, 1\njlt %r5, %r2, top\n\
         done:\nlsh %r4, 40\nlsh %r0, 20\nxor %r0, %r4\nxor %r0, %r3\nexit\n\
         top:\nmov32 %r7, %r6\nmov32 %r6, 0\njeq32 %r7, 3, moved\n\
         mov %r8, %r1\nadd %r8, %r5\nmov32 %r6, 3\nldxb %r8, [%r8+0]\n\
         mul32 %r8, 45\nand32 %r8, 127\njeq32 %r8, 92, moved\n\
         mov32 %r6, %r8\nadd32 %r6, -48\nand32 %r6, 255\njgt32 %r6, 9, letter\n\
         mov32 %r6, 1\njeq32 %r7, 1, moved\nmov32 %r6, 2\nja moved\n\
         letter:\nmov32 %r6, 1\nor32 %r8, 32\nadd32 %r8, -97\nand32 %r8, 255\n\
         jlt32 %r8, 26, moved\nmov32 %r6, 0\n\
         moved:\njeq32 %r6, %r7, next\nadd %r3, 1\njeq32 %r7, 2, number\n\
         jne32 %r7, 1, next\nadd %r4, 1\nja next"
    )
}

#[test]
fn speculative_regions_select_on_their_own_branches() {
    // The region's join takes r6 from five paths (the selects on the region's branch
    // conditions, see `Translator::merge_edges`), in both loop copies; the load in it
    // is unchecked in the unchecked copy. Every answer, trap and fuel count is the
    // interpreter's, at every budget.
    const LOAD: u32 = 22;
    let src = state_machine("%r2");
    let p = program(&src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(
        plan.functions[0].regions.len(),
        1,
        "{:?}",
        plan.functions[0]
    );
    let loops = unchecked_accesses(&src);
    assert!(
        loops.iter().any(|(_, a)| a.contains(&(LOAD, 1))),
        "the guard proves the load: {loops:?}"
    );
    let (mut state, mut words, mut numbers, mut moves) = (0u32, 0u64, 0u64, 0u64);
    for b in 0u32..64 {
        let c = b.wrapping_mul(45) & 127;
        let next = if state == 3 {
            0
        } else if c == 92 {
            3
        } else if (48..=57).contains(&c) {
            if state == 1 {
                1
            } else {
                2
            }
        } else if (97..=122).contains(&(c | 32)) {
            1
        } else {
            0
        };
        if next != state {
            moves += 1;
            match state {
                1 => words += 1,
                2 => numbers += 1,
                _ => {}
            }
        }
        state = next;
    }
    assert!(words > 0 && numbers > 0, "the bytes reach every state");
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok((words << 40) ^ (numbers << 20) ^ moves));
    every_budget_runs_out_or_matches(&p, &full);
    // Past the region's end the guard hands over to the checked loop, which traps at
    // the load.
    let out = check(&state_machine("80"));
    assert_eq!(trap_of(&out).pc, LOAD);
}

#[test]
fn backward_triangles_charge_the_path_taken() {
    // A loop closing with `jle ... loop; add; ja loop` (clang's shape for min/max
    // loops, adding instead of keeping the maximum, which stays a branch: `extrema`):
    // one converted back-edge with a selected fuel charge.
    let src = "mov %r0, 0\nmov %r6, 0\nloop:\njge %r6, 24, done\nldxb %r3, [%r1+0]\n\
               xor %r3, 0x15\nand %r3, 31\nadd %r1, 1\nadd %r6, 1\n\
               jle %r3, %r0, loop\nadd %r0, %r3\nja loop\ndone:\nexit";
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert!(matches!(
        plan.functions[0].ifconv.get(&8),
        Some(IfConv::BackTriangle { head: 2, ja: 10 })
    ));
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok(44));
    let mut trap_pcs = BTreeSet::new();
    for fuel in 0..=full.fuel_used {
        let out = check_program(p.clone(), fuel);
        if let Err(trap) = &out.result {
            trap_pcs.insert(trap.pc);
        }
    }
    // Budgets run out on both back-edges.
    assert_eq!(trap_pcs, BTreeSet::from([8, 10]));
}

#[test]
fn region_cache_follows_every_region() {
    // Alternates loads and stores between the data region, the read-only region, a
    // 4-byte global (too short to cache) and the stack through a pointer, touching the
    // last bytes of each; then faults in the read-only region through the warm cache.
    let globals = vec![GlobalSection {
        name: ".data".into(),
        data: vec![9, 8, 7, 6],
        writable: true,
    }];
    let src = "lddw %r5, 0x1600000000\nmov %r4, %r10\nadd %r4, -16\nmov %r6, 0\nmov %r0, 0\n\
               loop:\nldxb %r7, [%r1+63]\nadd %r0, %r7\nldxh %r7, [%r3+14]\nadd %r0, %r7\n\
               ldxb %r7, [%r5+3]\nadd %r0, %r7\nstxb [%r5+2], %r0\nstxdw [%r4+8], %r0\n\
               ldxw %r7, [%r1+60]\nadd %r0, %r7\nstxb [%r1+63], %r6\nldxdw %r7, [%r4+8]\n\
               add %r0, %r7\nadd %r6, 1\njlt %r6, 5, loop\nstxb [%r3+15], %r0\nexit";
    let out = check_program(program(src, globals), 10_000);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::ReadOnly {
            addr: (3 << 32) + 15,
            size: 1
        }
    );
}

/// A host whose helper 6 (see [`TestHost`]) is replaced by one that unmaps region 2.
struct UnmapHost;

impl HelperHost for UnmapHost {
    fn call(&mut self, id: u32, _: [u64; 5], mem: &mut MemoryMap<'_>) -> Result<u64, HelperAbort> {
        assert_eq!(id, 6);
        mem.unmap(RegionIdx(2));
        Ok(0)
    }
}

#[test]
fn caches_forget_regions_a_helper_unmapped() {
    // The caller caches region 2, a callee's helper unmaps it: the next load traps, in
    // the caller and directly after a helper call alike.
    for src in [
        "ldxb %r0, [%r1+0]\ncall local f\nldxb %r0, [%r1+1]\nexit\nf:\ncall 6\nexit",
        "ldxb %r0, [%r1+0]\ncall 6\nldxb %r0, [%r1+1]\nexit",
    ] {
        let p = program(src, vec![]);
        let run = |engine: &dyn Engine| {
            let mut rw = vec![1u8; 64];
            let mut map = MemoryMap::new();
            let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
            engine.run(
                &mut map,
                [a, 0, 0, 0, 0],
                &RunOptions {
                    fuel: 100,
                    ..RunOptions::default()
                },
                &mut UnmapHost,
            )
        };
        let want = run(&Interpreter::new(p.clone()));
        let got = run(&JitProgram::compile(p).unwrap());
        assert_eq!(got, want);
        assert!(matches!(trap_of(&got).kind, TrapKind::OutOfBounds { .. }));
    }
}

#[test]
fn stack_arrays_indexed_by_data() {
    // A histogram of the high nibbles of region 2's bytes 0..63 in 16 u32 counters at
    // r10-64, indexed by `(byte >> 2) & 60` (clang's shape): a bound the JIT proves keeps
    // every access inside the frame. Bytes 0..63 give 16 each to nibbles 0 to 3.
    let src = "stdw [%r10-64], 0\nstdw [%r10-56], 0\nstdw [%r10-48], 0\nstdw [%r10-40], 0\n\
               stdw [%r10-32], 0\nstdw [%r10-24], 0\nstdw [%r10-16], 0\nstdw [%r10-8], 0\n\
               mov %r6, 0\n\
               loop:\nmov %r3, %r1\nadd %r3, %r6\nldxb %r3, [%r3+0]\nrsh %r3, 2\nand %r3, 60\n\
               mov %r4, %r10\nadd %r4, -64\nadd %r4, %r3\nldxw %r5, [%r4+0]\nadd %r5, 1\n\
               stxw [%r4+0], %r5\nadd %r6, 1\njlt %r6, 64, loop\n\
               ldxw %r0, [%r10-64]\nldxw %r7, [%r10-60]\nlsh %r7, 8\nadd %r0, %r7\n\
               ldxw %r7, [%r10-52]\nlsh %r7, 16\nadd %r0, %r7\n\
               ldxw %r7, [%r10-48]\nlsh %r7, 24\nadd %r0, %r7\nexit";
    let out = check_program(program(src, vec![]), 100_000);
    assert_eq!(out.result, Ok(16 + (16 << 8) + (16 << 16)));
    // The same with 32-bit index arithmetic (`w3 >>= 2; w3 &= 60`).
    let src32 = src.replace("rsh %r3, 2\nand %r3, 60", "rsh32 %r3, 2\nand32 %r3, 60");
    let out = check_program(program(&src32, vec![]), 100_000);
    assert_eq!(out.result, Ok(16 + (16 << 8) + (16 << 16)));
}

#[test]
fn sign_extended_loads_and_jumps_into_their_shifts() {
    // clang's `(i64)p[i]` without `ldxs` (cpu v3): `ldxw; lsh 32; arsh 32`. Region 2's
    // first word is stored negative, its second halfword and fifth byte too; each is
    // loaded and extended that way. (A JIT that makes the three one sign-extending load
    // must keep the shifts where a jump enters them: the second program.)
    let sum = "stw [%r1+0], -5\nsth [%r1+6], -300\nstb [%r1+9], -7\nmov %r0, 0\n\
               ldxw %r3, [%r1+0]\nlsh %r3, 32\narsh %r3, 32\nadd %r0, %r3\n\
               ldxh %r3, [%r1+6]\nlsh %r3, 48\narsh %r3, 48\nadd %r0, %r3\n\
               ldxb %r1, [%r1+9]\nlsh %r1, 56\narsh %r1, 56\nadd %r0, %r1\nexit";
    assert_eq!(check(sum).result, Ok((-312i64) as u64));
    // A jump into the shifts: they run on a value the load did not make (2^32 + 5,
    // which they take to 5). Dropped with the load's extension, the jump's path would
    // keep 2^32 + 5.
    let entered = "lddw %r3, 0x100000005\njne %r2, 0, mid\nldxw %r3, [%r1+0]\n\
                   mid:\nlsh %r3, 32\narsh %r3, 32\nmov %r0, %r3\nexit";
    assert_eq!(check(entered).result, Ok(5));
    // Shifts by other amounts are not an extension of the load: 0xfffffffb << 32 >> 31.
    let other = "stw [%r1+0], -5\nldxw %r0, [%r1+0]\nlsh %r0, 32\narsh %r0, 31\nexit";
    assert_eq!(check(other).result, Ok((-10i64) as u64));
    // An extended load that faults traps at the load, with the interpreter's fuel, in
    // a loop that sums the words of region 2 and reads one past its end.
    let src = "mov %r0, 0\nmov %r6, 0\n\
               loop:\nmov %r3, %r1\nadd %r3, %r6\nldxw %r4, [%r3+0]\nlsh %r4, 32\n\
               arsh %r4, 32\nadd %r0, %r4\nadd %r6, 4\njle %r6, 64, loop\nexit";
    let out = check(src);
    let trap = trap_of(&out);
    assert_eq!(trap.pc, 4);
    assert!(
        matches!(trap.kind, TrapKind::OutOfBounds { write: false, .. }),
        "{trap}"
    );
    every_budget_runs_out_or_matches(&program(src, vec![]), &out);
}

#[test]
fn bounded_indexes_that_may_leave_the_frame_are_checked() {
    // Byte 63 of region 2 shifted left by 4 is 1008: r10 - 512 + 1008 is past the top of
    // the stack. The bound (1020) does not keep the access in the frame, so it is checked
    // and traps exactly as on the interpreter.
    let src = "ldxb %r3, [%r1+63]\nlsh %r3, 4\nmov %r4, %r10\nadd %r4, -512\nadd %r4, %r3\n\
               ldxw %r0, [%r4+0]\nexit";
    let out = check(src);
    let trap = trap_of(&out);
    assert_eq!(trap.pc, 5);
    assert!(
        matches!(trap.kind, TrapKind::OutOfBounds { write: false, .. }),
        "{trap}"
    );
    // Byte 1 instead: r10 - 512 + 16 is inside the frame and reads what was stored.
    let src = "stdw [%r10-496], 77\n".to_string() + &src.replace("+63]", "+1]");
    assert_eq!(check(&src).result, Ok(77));
    // A callee may index past its own frame into its caller's, which is still stack.
    let out = check(
        "stdw [%r10-504], 5\ncall local f\nexit\n\
         f:\nmov %r3, 8\nmov %r4, %r10\nadd %r4, %r3\nldxdw %r0, [%r4+0]\nexit",
    );
    assert_eq!(out.result, Ok(5));
}

#[test]
fn addresses_computed_from_r10_may_point_anywhere() {
    // r10 + (r1 - r10) is r1: a pointer computed from r10 that is not on the stack. The
    // stack check misses and the region table finds region 2, in a loop.
    let src = "mov %r0, 0\nmov %r6, 0\nmov %r5, %r1\nsub %r5, %r10\n\
               loop:\nmov %r4, %r10\nadd %r4, %r5\nadd %r4, %r6\nldxb %r7, [%r4+0]\nadd %r0, %r7\n\
               stxb [%r4+0], %r6\nadd %r6, 1\njlt %r6, 64, loop\nexit";
    let out = check(src);
    assert_eq!(out.result, Ok((0..64).sum()));
}

/// Runs `p` on both engines with `stop` as the run's stop flag; asserts they agree.
fn check_stopped(p: &Arc<VerifiedProgram>, fuel: u64, stop: &StopFlag) -> RunOutcome {
    let run = |engine: &dyn Engine| {
        let mut rw: Vec<u8> = (0..64).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
        let opts = RunOptions {
            fuel,
            stop: Some(stop),
            counts: None,
        };
        (
            engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut TestHost),
            rw,
        )
    };
    let interp = Interpreter::new(p.clone());
    let jit = JitProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let (want, want_mem) = run(&interp);
    let (got, got_mem) = run(&jit);
    assert_eq!(
        got, want,
        "jit vs interpreter with a stop flag, fuel {fuel}"
    );
    assert_eq!(got_mem, want_mem);
    #[cfg(target_arch = "x86_64")]
    {
        let quick = QuickProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
        let (got, got_mem) = run(&quick);
        assert_eq!(
            got, want,
            "quick vs interpreter with a stop flag, fuel {fuel}"
        );
        assert_eq!(got_mem, want_mem);
    }
    got
}

/// A flag set before the run stops it at its first fuel charge (a taken back-edge or a
/// call, in every shape the JIT translates), after the charge, with the same trap and
/// fuel on both engines; straight-line code never looks at it.
#[test]
fn a_set_stop_flag_stops_at_the_first_charge() {
    let stop = StopFlag::new();
    assert!(stop.stop(7));
    assert!(!stop.stop(9), "the first reason stays");
    let stopped = |src: &str, pc: u32, fuel_used: u64| {
        let out = check_stopped(&program(src, vec![]), 1_000_000, &stop);
        assert_eq!(
            out.result,
            Err(Trap {
                pc,
                kind: TrapKind::Stopped { reason: 7 }
            }),
            "{src}"
        );
        assert_eq!(out.fuel_used, fuel_used, "{src}");
    };
    stopped("ja -1", 0, 1);
    // A conditional back-edge closing a 3-slot loop.
    stopped(
        "mov %r0, 0\nloop:\nadd %r0, 1\njlt %r0, 9, loop\nexit",
        2,
        2,
    );
    // A versioned loop whose iterations fuel bounds: its back-edge (slot 8, 5 slots).
    stopped(&strided_sum(0, 1, 16, "ldxb"), 8, 5);
    // Helper and local calls charge 1 before they run.
    stopped("mov %r1, 1\ncall 1\nexit", 1, 1);
    stopped("call local f\nexit\nf:\nmov %r0, 1\nexit", 0, 1);
    // The converted backward triangle of `backward_triangles_charge_the_path_taken`.
    let triangle = "mov %r0, 0\nmov %r6, 0\nloop:\njge %r6, 24, done\nldxb %r3, [%r1+0]\n\
                    xor %r3, 0x15\nand %r3, 31\nadd %r1, 1\nadd %r6, 1\n\
                    jle %r3, %r0, loop\nmov %r0, %r3\nja loop\ndone:\nexit";
    let out = check_stopped(&program(triangle, vec![]), 1_000_000, &stop);
    assert!(
        matches!(
            out.result,
            Err(Trap {
                kind: TrapKind::Stopped { reason: 7 },
                ..
            })
        ),
        "{out:?}"
    );
    // No charge, no stop.
    let out = check_stopped(&program("mov %r0, 3\nja +0\nexit", vec![]), 10, &stop);
    assert_eq!(out.result, Ok(3));
    // The fuel check comes first.
    let out = check_stopped(&program("ja -1", vec![]), 0, &stop);
    assert_eq!(trap_of(&out).kind, TrapKind::FuelExhausted { budget: 0 });
}

/// A flag set by another thread while a one-instruction spin runs stops it, on both
/// engines, long before its fuel runs out.
#[test]
fn a_stop_from_another_thread_ends_a_spin() {
    let p = program("ja -1", vec![]);
    #[allow(unused_mut)]
    let mut engines: Vec<Box<dyn Engine>> = vec![
        Box::new(Interpreter::new(p.clone())),
        Box::new(JitProgram::compile(p.clone()).unwrap()),
    ];
    #[cfg(target_arch = "x86_64")]
    engines.push(Box::new(QuickProgram::compile(p).unwrap()));
    let budget = 1 << 34;
    for engine in &engines {
        let stop = StopFlag::new();
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                stop.stop(3);
            });
            let mut map = MemoryMap::new();
            let opts = RunOptions {
                fuel: budget,
                stop: Some(&stop),
                counts: None,
            };
            engine.run(&mut map, [0; 5], &opts, &mut TestHost)
        });
        assert_eq!(trap_of(&out).kind, TrapKind::Stopped { reason: 3 });
        assert!(out.fuel_used < budget);
    }
}

/// The accesses `loops` plans to make unchecked in `src`'s entry function:
/// (pc, stride) of each, by loop header.
fn unchecked_accesses(src: &str) -> Vec<(u32, Vec<(u32, i64)>)> {
    let p = program(src, vec![]);
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    crate::loops::plan_loops(p.insns(), &plan.functions[0], !plan.calls_helpers)
        .into_iter()
        .map(|l| {
            let a = l.accesses.iter().map(|a| (a.pc, a.stride)).collect();
            (l.header, a)
        })
        .collect()
}

/// Sums `COUNT` values of `SIZE` bytes read at region 2 + `START`, `STEP` bytes apart.
fn strided_sum(start: i32, step: i32, count: u32, load: &str) -> String {
    format!(
        "mov %r0, 0\nmov %r6, %r1\nadd %r6, {start}\nmov %r7, 0\n\
         loop:\n{load} %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, {step}\nadd %r7, 1\n\
         jlt %r7, {count}, loop\nexit"
    )
}

/// clang's rotated loop that keeps the index before its increment in a second
/// register (`r8 = r3` after `r3 += 1`, read through `r8` at the top of the next
/// iteration): `r8` starts at `start` and `r3` at 0, bytes are read at `r1 + r8` until
/// `r3` reaches `end`; the exit is a flag set at the header, as clang writes it. A short
/// loop first fills the fuel slice, so the loop's guard runs on entry (a run's first
/// charge refills the slice, and a loop entered with an empty one guards only after its
/// first iteration, when the relation holds whatever the registers were).
fn lagging_index(start: i32, end: i32) -> String {
    format!(
        "mov %r6, 0\nwarm:\nadd %r6, 1\njlt %r6, 3, warm\n\
         mov %r0, 0\nmov %r3, 0\nmov %r8, {start}\nja head\n\
         body:\nmov %r5, %r1\nadd %r5, %r8\nldxb %r4, [%r5+0]\nadd %r0, %r4\n\
         mov %r8, %r3\njeq %r9, 0, head\nexit\n\
         head:\nadd %r3, 1\nmov %r9, 0\njne %r3, {end}, body\nmov %r9, 1\nja body"
    )
}

#[test]
fn a_lagging_copy_of_an_index_is_an_induction_variable() {
    // `r8` is `r3 - 0` at the header from the second iteration on, and on the first
    // when they start equal: the load through it is strided, and the guard checks the
    // relation on entry (`loops::VersionedLoop::lags`).
    const LOAD: u32 = 9;
    let src = lagging_index(0, 64);
    assert_eq!(unchecked_accesses(&src), vec![(14, vec![(LOAD, 1)])]);
    let p = program(&src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok((0..64).sum()));
    every_budget_runs_out_or_matches(&p, &full);
    // Started apart, the relation fails on entry: the checked loop runs every
    // iteration (the first reads byte 5).
    let apart = check(&lagging_index(5, 64));
    assert_eq!(apart.result, Ok(5 + (1..64).sum::<u64>()));
    // (Unchecked, a first read far past the region would not trap.)
    let far = check(&lagging_index(1000, 64));
    assert_eq!(trap_of(&far).pc, LOAD);
    // Past the region's end the copy stops where the guard said and the checked loop
    // traps at the load.
    let out = check(&lagging_index(0, 70));
    assert_eq!(trap_of(&out).pc, LOAD);
}

#[test]
fn a_nested_loop_exiting_on_a_flag_is_versioned() {
    // `lagging_index`'s loop twice over, inside an outer loop: a nested loop is
    // versioned only when no data decides how long it runs, and this one exits on a
    // flag that only its induction test writes (`loops::worth_nesting`).
    const LOAD: u32 = 7;
    let src = "mov %r0, 0\nmov %r7, 0\n\
               outer:\nmov %r3, 0\nmov %r8, 0\nja head\n\
               body:\nmov %r5, %r1\nadd %r5, %r8\nldxb %r4, [%r5+0]\nadd %r0, %r4\n\
               mov %r8, %r3\njeq %r9, 0, head\nadd %r7, 1\njlt %r7, 2, outer\nexit\n\
               head:\nadd %r3, 1\nmov %r9, 0\njne %r3, 64, body\nmov %r9, 1\nja body";
    assert_eq!(unchecked_accesses(src), vec![(14, vec![(LOAD, 1)])]);
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok(2 * (0..64).sum::<u64>()));
    every_budget_runs_out_or_matches(&p, &full);
    // A flag that data picks (a byte compared) leaves it checked.
    let data = src.replace("mov %r9, 0\njne", "mov %r9, 0\njeq %r4, 200, body\njne");
    assert_eq!(unchecked_accesses(&data), vec![]);
}

#[test]
fn versioned_loops_are_found_with_their_strides() {
    // The loop at slot 4: its load (slot 4) moves 4 bytes per iteration.
    assert_eq!(
        unchecked_accesses(&strided_sum(0, 4, 16, "ldxw")),
        vec![(4, vec![(4, 4)])]
    );
    // Through a pointer computed inside the loop from an index: 8 * i + r1, two loads
    // (one at +4) and a store; the invariant load from r3 moves by 0.
    let src = "mov %r0, 0\nmov %r7, 0\n\
               loop:\nmov %r4, %r7\nlsh %r4, 3\nadd %r4, %r1\nldxw %r5, [%r4+0]\n\
               ldxw %r8, [%r4+4]\nstxw [%r4+0], %r8\nldxb %r9, [%r3+1]\nadd %r0, %r9\n\
               add %r7, 1\njlt %r7, 8, loop\nexit";
    assert_eq!(
        unchecked_accesses(src),
        vec![(2, vec![(5, 8), (6, 8), (7, 8), (8, 0)])]
    );
    // A register changed by a data-dependent amount is no induction variable.
    let src = "mov %r0, 0\nmov %r6, %r1\n\
               loop:\nldxb %r3, [%r6+0]\nadd %r6, %r3\nadd %r0, 1\njlt %r0, 8, loop\nexit";
    assert_eq!(unchecked_accesses(src), vec![]);
    // Inside another loop, a counted loop is versioned, a search loop (an exit on
    // loaded data) is not; alone, the search loop is.
    let nested = |exit: &str| {
        format!(
            "mov %r0, 0\nmov %r8, 0\nouter:\nmov %r6, %r1\nmov %r7, 0\n\
             inner:\nldxb %r3, [%r6+0]\n{exit}add %r0, %r3\nadd %r6, 1\nadd %r7, 1\n\
             jlt %r7, 8, inner\nnext:\nadd %r8, 1\njlt %r8, 4, outer\nexit"
        )
    };
    assert_eq!(unchecked_accesses(&nested("")), vec![(4, vec![(4, 1)])]);
    assert_eq!(check(&nested("")).result, Ok(4 * (0..8).sum::<u64>()));
    let search = nested("jeq %r3, 5, next\n");
    assert_eq!(unchecked_accesses(&search), vec![]);
    assert_eq!(check(&search).result, Ok(4 * (0..5).sum::<u64>()));
    let alone = search.replace("jlt %r8, 4, outer", "ja next2\nnext2:");
    assert_eq!(unchecked_accesses(&alone), vec![(4, vec![(4, 1)])]);
    // A loop with a local call in it is versioned when the program calls no helper
    // (nothing can remap a region then), left alone when it does.
    let src = "mov %r6, 0\nmov %r9, %r1\nloop:\nldxb %r3, [%r9+0]\ncall local f\n\
               add %r6, 1\njlt %r6, 4, loop\nexit\nf:\nmov %r0, 1\nexit";
    assert_eq!(unchecked_accesses(src), vec![(2, vec![(2, 0)])]);
    let helper = src.replace("mov %r0, 1\nexit", "mov %r0, 1\ncall 1\nexit");
    assert_eq!(unchecked_accesses(&helper), vec![]);
    assert_eq!(check(src).result, Ok(1));
    assert!(check(&helper).result.is_ok());
}

#[test]
fn local_calls_in_versioned_loops_match_the_interpreter() {
    // Sums f(word) over COUNT words of region 2, f(x) = 3x + r6, which also writes r2
    // and r5; 16 words fit, the 17th traps at the load; every fuel budget of the
    // 5-word run.
    let src = |count: u32| {
        format!(
            "mov %r8, 0\nmov %r6, %r1\nmov %r7, 0\n\
             loop:\nldxw %r1, [%r6+0]\ncall local f\nadd %r8, %r0\nadd %r8, %r5\n\
             add %r6, 4\nadd %r7, 1\njlt %r7, {count}, loop\nmov %r0, %r8\nexit\n\
             f:\nmov %r0, %r1\nmul %r0, 3\nadd %r0, %r6\nmov %r2, 7\nmov %r5, %r2\nexit"
        )
    };
    assert_eq!(unchecked_accesses(&src(16)), vec![(3, vec![(3, 4)])]);
    assert!(check(&src(16)).result.is_ok());
    let out = check(&src(17));
    assert_eq!(trap_of(&out).pc, 3);
    let p = program(&src(5), vec![]);
    let full = check_program(p.clone(), u64::MAX);
    for fuel in 0..=full.fuel_used + 1 {
        check_program(p.clone(), fuel);
    }
}

#[test]
fn callees_get_every_register_and_hand_back_r0_to_r5() {
    // The callee reads r0-r10 (more arguments than host argument registers) and
    // writes r1-r5 (every return register); one path leaves r3 and r4 as they came.
    let src = "mov %r0, 1\nmov %r1, 2\nmov %r2, 3\nmov %r3, 4\nmov %r4, 5\nmov %r5, 6\n\
               mov %r6, 7\nmov %r7, 8\nmov %r8, 9\nmov %r9, 10\nstxdw [%r10-8], %r9\n\
               call local f\nmul %r0, 3\nadd %r0, %r1\nmul %r0, 3\nadd %r0, %r2\n\
               mul %r0, 3\nadd %r0, %r3\nmul %r0, 3\nadd %r0, %r4\nmul %r0, 3\n\
               add %r0, %r5\nadd %r0, %r6\nadd %r0, %r9\nexit\n\
               f:\nadd %r0, %r1\nadd %r0, %r2\nadd %r0, %r6\nadd %r0, %r7\nadd %r0, %r8\n\
               add %r0, %r9\nstxdw [%r10-8], %r0\nldxdw %r1, [%r10-8]\nmov %r2, %r5\n\
               mov %r5, 100\njgt %r0, 1000, skip\nmov %r3, 40\nmov %r4, 50\n\
               skip:\nmov %r6, 0\nexit";
    // f: r0 = 40, r1 = 40, r2 = 6, r3 = 40, r4 = 50, r5 = 100; the caller keeps r6, r9.
    let want = [40u64, 6, 40, 50, 100].iter().fold(40, |a, &v| a * 3 + v) + 7 + 10;
    assert_eq!(check(src).result, Ok(want));
    // The other path: r0 over 1000 leaves r3 and r4 as the caller had them.
    let big = src.replace("mov %r0, 1\n", "mov %r0, 2000\n");
    let r0 = 2000u64 + 39;
    let want = [r0, 6, 4, 5, 100].iter().fold(r0, |a, &v| a * 3 + v) + 7 + 10;
    assert_eq!(check(&big).result, Ok(want));
}

#[test]
fn versioned_loops_trap_at_the_first_access_out_of_bounds() {
    // Region 2 holds 64 bytes: 16 words fit, the 17th traps, at the load, with the
    // interpreter's fuel. Misaligned starts and strides that end inside a word too.
    for (start, step, count, load) in [
        (0, 4, 16, "ldxw"),
        (0, 4, 17, "ldxw"),
        (2, 4, 15, "ldxw"),
        (2, 4, 16, "ldxw"),
        (0, 1, 64, "ldxb"),
        (0, 1, 65, "ldxb"),
        (60, -4, 16, "ldxw"),
        (60, -4, 17, "ldxw"),
        (0, 0, 100, "ldxdw"),
        (64, 1, 3, "ldxb"),
        (-1, 1, 3, "ldxb"),
        (0, 24, 3, "ldxdw"),
        (0, 24, 4, "ldxdw"),
    ] {
        let out = check(&strided_sum(start, step, count, load));
        let fits = |i: i64| {
            let a = i64::from(start) + i * i64::from(step);
            let size = match load {
                "ldxb" => 1,
                "ldxw" => 4,
                _ => 8,
            };
            a >= 0 && a + size <= 64
        };
        match (0..i64::from(count)).find(|&i| !fits(i)) {
            None => assert!(out.result.is_ok(), "{start} {step} {count}: {out:?}"),
            Some(_) => {
                let trap = trap_of(&out);
                assert_eq!(trap.pc, 4, "{start} {step} {count}");
                assert!(matches!(trap.kind, TrapKind::OutOfBounds { .. }), "{trap}");
            }
        }
    }
}

#[test]
fn versioned_loops_charge_fuel_at_every_budget() {
    let p = program(&strided_sum(0, 2, 30, "ldxh"), vec![]);
    let full = check_program(p.clone(), u64::MAX);
    assert!(full.result.is_ok());
    for fuel in 0..=full.fuel_used + 1 {
        check_program(p.clone(), fuel);
    }
}

#[test]
fn versioned_loops_store_and_respect_read_only_regions() {
    // Stores of 8 bytes walking down from the last word of region 2; one word too many
    // traps below its start.
    let store = |base: &str, n: u32| {
        format!(
            "mov %r6, {base}\nadd %r6, 56\nmov %r7, {n}\n\
             loop:\nstxdw [%r6+0], %r7\nsub %r6, 8\nsub %r7, 1\njne %r7, 0, loop\n\
             mov %r0, 0\nexit"
        )
    };
    assert_eq!(check(&store("%r1", 8)).result, Ok(0));
    let out = check(&store("%r1", 9));
    assert_eq!(trap_of(&out).pc, 3);
    // Region 3 is read-only: the guard sends the loop to the checked copy, which traps
    // at the first store.
    let out = check(&store("%r3", 1));
    let trap = trap_of(&out);
    assert_eq!(trap.pc, 3);
    assert!(
        matches!(trap.kind, TrapKind::OutOfBounds { write: true, .. }),
        "{trap}"
    );
}

#[test]
fn versioned_loops_over_two_regions_and_the_stack() {
    // Copies region 3 (16 bytes) into a stack buffer through a pointer, then into
    // region 2 at a stride of 2, summing as it goes; one byte too many traps reading
    // region 3.
    let copy = |n: u32| {
        format!(
            "mov %r0, 0\nmov %r6, %r10\nadd %r6, -32\nmov %r7, 0\nmov %r8, %r1\n\
             loop:\nmov %r4, %r3\nadd %r4, %r7\nldxb %r5, [%r4+0]\nstxb [%r6+0], %r5\n\
             ldxb %r5, [%r6+0]\nstxb [%r8+1], %r5\nadd %r0, %r5\nadd %r6, 1\nadd %r8, 2\n\
             add %r7, 1\njlt %r7, {n}, loop\nexit"
        )
    };
    let plan = unchecked_accesses(&copy(16));
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].1.len(), 4, "{plan:?}");
    assert_eq!(check(&copy(16)).result, Ok((0x10..0x20).sum()));
    let out = check(&copy(17));
    assert_eq!(trap_of(&out).pc, 7);
    // Walking the stack buffer up past the top of the stack traps there too.
    let up = "mov %r0, 0\nmov %r6, %r10\nadd %r6, -8\nmov %r7, 0\n\
              loop:\nstxb [%r6+0], %r7\nadd %r6, 1\nadd %r7, 1\njlt %r7, 9, loop\nexit";
    assert_eq!(trap_of(&check(up)).pc, 4);
}

/// A program with a bit of everything the translator keeps in maps and sets: a loop of
/// triangles and a diamond (if-conversion), a versioned loop calling a local function,
/// a callee reading and writing many registers, stack stores.
const DIGEST_SRC: &str = "mov %r7, %r1\nmov %r8, %r2\ncall local branchy\nmov %r9, %r0\n\
    mov %r1, %r7\nmov %r2, %r8\ncall local strided\nadd %r0, %r9\nstxdw [%r10-8], %r0\n\
    call local regs\nldxdw %r1, [%r10-8]\nadd %r0, %r1\nexit\n\
    branchy:\nmov %r0, 0\nmov %r6, 0\nmov %r7, 0\nmov %r8, 0\n\
    bloop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\n\
    jlt %r3, 40, small\nmov %r5, 2\nadd %r5, %r3\nja joined\nsmall:\nmov %r5, %r3\nlsh %r5, 1\n\
    joined:\njgt %r5, 100, skip\nadd %r0, 1\nskip:\njle %r5, %r7, notmax\nmov %r7, %r5\n\
    notmax:\njset %r3, 1, odd\nadd %r8, %r3\nodd:\nadd %r6, 1\njlt %r6, %r2, bloop\n\
    lsh %r0, 32\nlsh %r7, 16\nor %r0, %r7\nor %r0, %r8\nexit\n\
    strided:\nmov %r8, 0\nmov %r6, %r1\nmov %r7, 0\n\
    sloop:\nldxw %r1, [%r6+0]\ncall local f\nadd %r8, %r0\nadd %r8, %r5\n\
    add %r6, 4\nadd %r7, 1\njlt %r7, 16, sloop\nmov %r0, %r8\nexit\n\
    f:\nmov %r0, %r1\nmul %r0, 3\nadd %r0, %r6\nmov %r2, 7\nmov %r5, %r2\nexit\n\
    regs:\nmov %r1, 2\nmov %r2, 3\nmov %r3, 4\nmov %r4, 5\nmov %r5, 6\n\
    mov %r6, 7\nmov %r7, 8\nmov %r8, 9\nmov %r9, 10\ncall local g\nmul %r0, 3\n\
    add %r0, %r1\nmul %r0, 3\nadd %r0, %r2\nmul %r0, 3\nadd %r0, %r3\nmul %r0, 3\n\
    add %r0, %r4\nadd %r0, %r5\nadd %r0, %r6\nadd %r0, %r9\nexit\n\
    g:\nadd %r0, %r1\nadd %r0, %r2\nadd %r0, %r6\nadd %r0, %r7\nadd %r0, %r8\n\
    add %r0, %r9\nstxdw [%r10-8], %r0\nldxdw %r1, [%r10-8]\nmov %r2, %r5\n\
    mov %r5, 100\njgt %r0, 1000, gskip\nmov %r3, 40\nmov %r4, 50\ngskip:\nmov %r6, 0\nexit";

/// [`DIGEST_SRC`] after eight copies of a loop nest of stack stores, strided loads and
/// triangles in its entry function (more blocks and loops for the maps to hold).
fn digest_program() -> String {
    let mut src = String::from("mov %r7, %r1\nmov %r8, %r2\nstxdw [%r10-80], %r2\nmov %r9, 0\n");
    for k in 0..8 {
        src += &format!(
            "mov %r6, 0\nmov %r1, %r7\n\
             o{k}:\nmov %r2, 0\n\
             i{k}:\nldxh %r3, [%r1+{k}]\njgt %r3, {lim}, s{k}\nadd %r9, %r3\ns{k}:\n\
             mov %r4, %r3\nand %r4, 7\nlsh %r4, 3\nmov %r5, %r10\nsub %r5, 64\nadd %r5, %r4\n\
             stxdw [%r5+0], %r9\nmov %r0, %r3\nmul %r0, %r9\nxor %r0, %r6\nadd %r8, %r0\n\
             rsh %r0, 3\nadd %r9, %r0\nxor %r7, %r0\nxor %r7, %r0\n\
             add %r1, 2\nadd %r2, 1\njlt %r2, 8, i{k}\n\
             ldxdw %r3, [%r10-{off}]\nxor %r9, %r3\nmov %r1, %r7\nadd %r6, 1\njlt %r6, 3, o{k}\n",
            lim = 3000 + 1000 * k,
            off = 8 * (k + 1),
        );
    }
    src += "stxdw [%r10-72], %r9\nmov %r1, %r7\nldxdw %r2, [%r10-80]\n";
    src + DIGEST_SRC
        .strip_prefix("mov %r7, %r1\nmov %r8, %r2\n")
        .unwrap()
}

/// The code digests of [`digest_program`] and of clang's eBPF build of the grep kernel.
fn code_digests() -> [u64; 2] {
    [digest_program(), GREP_KERNEL.to_string()].map(|src| {
        let jit = JitProgram::compile(program(&src, vec![])).unwrap_or_else(|e| panic!("{e}"));
        jit.code_digest().expect("Cranelift's code has a digest")
    })
}

const GREP_KERNEL: &str = include_str!("tests/grep_kernel.s");

/// Set in the child processes of `codegen_is_the_same_in_every_process`.
const DIGEST_CHILD: &str = "CSX_JIT_TEST_DIGEST_CHILD";

#[test]
fn codegen_is_the_same_in_every_process() {
    if std::env::var_os(DIGEST_CHILD).is_some() {
        println!("digest={:016x?}", code_digests());
        return;
    }
    // Both programs run and agree with the interpreter; the generated one has the
    // shapes it should.
    let src = digest_program();
    for src in [&src, GREP_KERNEL] {
        let out = check(src);
        assert!(out.result.is_ok(), "{out:?}");
    }
    let p = program(&src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert!(plan.functions.iter().any(|f| f.ifconv.len() >= 3));
    assert!(plan.functions.iter().filter(|f| f.is_callee).count() >= 4);
    // Every hash map in this process and in each child is seeded differently, so
    // codegen that followed hash order would differ between these compilations.
    let here = code_digests();
    assert_eq!(code_digests(), here, "two compiles in one process");
    let exe = std::env::current_exe().unwrap();
    for child in 0..3 {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "tests::codegen_is_the_same_in_every_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIGEST_CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child {child}: {stdout}");
        let got = stdout
            .lines()
            .find_map(|l| l.split_once("digest=").map(|(_, d)| d.trim()))
            .unwrap_or_else(|| panic!("child {child} printed no digest: {stdout}"));
        assert_eq!(got, format!("{here:016x?}"), "child process {child}");
    }
}

/// A merge-like loop over the 64 input bytes: the branch at slot 6 picks one of two
/// paths to `join` (slot 8): the fall-through arm (slot 7) or the taken arm `big`
/// (slots 14-15) laid out after the loop, which ends in a backward `ja` (slot 16) and is
/// also entered from the branch at slot 5. Bytes from `limit` on take `big`.
fn merge_paths_program(limit: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\nmov %r7, 0\nmov %r8, 0\n\
         loop:\nldxb %r3, [%r1+0]\njeq %r3, 9, big\njge %r3, {limit}, big\n\
         add %r6, 1\n\
         join:\nadd %r0, %r3\nstxb [%r1+0], %r0\nadd %r1, 1\nadd %r8, 1\n\
         jlt %r8, %r2, loop\nja out\n\
         big:\nadd %r7, 2\nmov %r3, %r7\nja join\n\
         out:\nlsh %r6, 32\nor %r0, %r6\nlsh %r7, 16\nxor %r0, %r7\nexit"
    )
}

#[test]
fn branches_to_two_paths_become_selects_with_the_fuel_of_the_path_taken() {
    let p = program(&merge_paths_program(40), vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    let f = &plan.functions[0];
    assert_eq!(f.ifconv.get(&6), Some(&IfConv::Paths { join: 8 }));
    let [taken, fall] = &f.arms[&6];
    assert_eq!(
        (taken.alu.as_slice(), taken.back_jump),
        (&[14, 15][..], Some((16, 8)))
    );
    assert_eq!((fall.alu.as_slice(), fall.back_jump), (&[7][..], None));
    // The counting variant keeps the branch (its counters follow the slots).
    let counting = analysis::plan_program_with(p.insns(), 0, false, false).unwrap();
    assert_eq!(counting.functions[0].ifconv.get(&6), None);
    // r6 counts the bytes below the limit, r7 twice the others; `join` adds the byte or r7.
    let want = {
        let (mut r0, mut r6, mut r7) = (0u64, 0u64, 0u64);
        for x in 0..64u64 {
            let v = if x == 9 || x >= 40 {
                r7 += 2;
                r7
            } else {
                r6 += 1;
                x
            };
            r0 += v;
        }
        (r0 | (r6 << 32)) ^ (r7 << 16)
    };
    let full = check_program(p.clone(), u64::MAX);
    assert_eq!(full.result, Ok(want));
    // Every budget: the fuel runs out on the taken arm's `ja` and on the loop's edge.
    let mut trap_pcs = BTreeSet::new();
    for fuel in 0..=full.fuel_used {
        if let Err(trap) = &check_program(p.clone(), fuel).result {
            trap_pcs.insert(trap.pc);
        }
    }
    assert_eq!(trap_pcs, BTreeSet::from([12, 16]));
    // Both ways again with every byte on one path.
    for limit in [0, 200] {
        let p = program(&merge_paths_program(limit), vec![]);
        let full = check_program(p.clone(), u64::MAX);
        for fuel in (0..=full.fuel_used).step_by(7) {
            check_program(p.clone(), fuel);
        }
    }
}

#[test]
fn backward_branches_to_joining_paths_keep_their_own_fuel_charge() {
    // The branch at slot 4 goes back to slot 2 (a charge of 3 when taken), whose path
    // (slots 2-3) meets the fall-through at slot 5: not converted, or a loop would run
    // without charging that back-edge (a spin without it would never stop).
    let src = "mov %r0, 0\nja br\ntop:\nadd %r0, 1\nja j\nbr:\njlt %r0, 1000, top\n\
               j:\njlt %r0, 1000, br\nexit";
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(plan.functions[0].ifconv.get(&4), None);
    let out = check_program(p.clone(), u64::MAX);
    assert_eq!((out.result, out.fuel_used), (Ok(1000), 1000 * 3 + 999 * 2));
    let spin = program(
        "ja br\ntop:\nmov %r0, 1\nja j\nbr:\njne %r1, 0, top\nj:\nja br",
        vec![],
    );
    assert_eq!(
        trap_of(&check_program(spin, 5000)).kind,
        TrapKind::FuelExhausted { budget: 5000 }
    );
}

#[test]
fn a_set_stop_flag_stops_at_the_first_charge_of_a_converted_path() {
    let stop = StopFlag::new();
    assert!(stop.stop(3));
    // Byte 0 takes `big` (a charge of 9 at its `ja`, slot 16) when the limit is 0, else
    // the fall-through arm, which charges nothing: the loop's edge (slot 12) stops it.
    for (limit, pc) in [(0, 16), (40, 12)] {
        let out = check_stopped(
            &program(&merge_paths_program(limit), vec![]),
            1 << 20,
            &stop,
        );
        assert_eq!(
            out.result,
            Err(Trap {
                pc,
                kind: TrapKind::Stopped { reason: 3 }
            })
        );
        assert_eq!(out.fuel_used, 9);
    }
}

/// The unrolled copies `loops` plans in `src`'s entry function: (header, factor, most
/// charge per iteration, counted exit's slot, its step, signed, 32-bit) of each.
fn unroll_plans(src: &str) -> Vec<(u32, u32, u64, u32, i64, bool, bool)> {
    unroll_exits(src)
        .into_iter()
        .map(|(h, f, c, e)| (h, f, c, e.pc, e.step, e.signed, e.is32))
        .collect()
}

/// Each unrolled loop's header, factor, charge and counted exit.
fn unroll_exits(src: &str) -> Vec<(u32, u32, u64, crate::loops::CountedExit)> {
    let p = program(src, vec![]);
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    crate::loops::plan_loops(p.insns(), &plan.functions[0], !plan.calls_helpers)
        .into_iter()
        .filter_map(|l| {
            let u = l.unroll?;
            Some((l.header, u.factor, u.charge, u.exit))
        })
        .collect()
}

/// Runs `src` on every engine at every fuel budget up to one past what it needs.
fn check_every_budget(src: &str) -> RunOutcome {
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    for fuel in 0..=full.fuel_used + 1 {
        check_program(p.clone(), fuel);
    }
    full
}

#[test]
fn counted_loops_get_an_unrolled_copy() {
    // `jlt %r7, COUNT, loop` closes a 5-slot loop: it leaves when r7 (+1 per iteration)
    // reaches COUNT, unsigned; 16 copies; the back-edge costs 5.
    assert_eq!(
        unroll_plans(&strided_sum(0, 4, 16, "ldxw")),
        vec![(4, 16, 5, 8, 1, false, false)]
    );
    // Counting down to zero (`jne`: it leaves on equality), a signed and a 32-bit exit,
    // the counter on the right-hand side.
    let down = "mov %r0, 0\nmov %r6, %r1\nmov %r7, 8\n\
                loop:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nsub %r7, 1\n\
                jne %r7, 0, loop\nexit";
    assert_eq!(unroll_plans(down), vec![(3, 16, 5, 7, -1, false, false)]);
    let signed = down.replace("jne %r7, 0, loop", "jsgt %r7, 0, loop");
    assert_eq!(unroll_plans(&signed), vec![(3, 16, 5, 7, -1, true, false)]);
    let low = down.replace("jne %r7, 0, loop", "jgt32 %r7, 0, loop");
    assert_eq!(unroll_plans(&low), vec![(3, 16, 5, 7, -1, false, true)]);
    let right = down.replace("jne %r7, 0, loop", "mov %r8, 0\njlt %r8, %r7, loop");
    assert_eq!(unroll_plans(&right), vec![(3, 16, 6, 8, -1, false, false)]);
    // The exit in the middle (knn's shape: `if (i == n) break;` then `ja`).
    let middle = "mov %r0, 0\nmov %r7, 0\n\
                  loop:\nmov %r4, %r1\nadd %r4, %r7\nldxw %r3, [%r4+0]\nadd %r0, %r3\n\
                  add %r7, 4\njeq %r7, 64, done\nja loop\ndone:\nexit";
    assert_eq!(unroll_plans(middle), vec![(2, 16, 7, 7, 4, false, false)]);
    // Moving away from its bound, or tested on loaded data, an exit is not counted.
    let away = down.replace("jne %r7, 0, loop", "jlt %r7, 100, loop");
    assert_eq!(unroll_plans(&away), vec![]);
    let data = down.replace("jne %r7, 0, loop", "jne %r3, 0, loop");
    assert_eq!(unroll_plans(&data), vec![]);
    // A call in the loop keeps it one by one.
    let call = "mov %r6, 0\nmov %r9, %r1\nloop:\nldxb %r3, [%r9+0]\ncall local f\n\
                add %r6, 1\njlt %r6, 4, loop\nexit\nf:\nmov %r0, 1\nexit";
    assert_eq!(unroll_plans(call), vec![]);
    // Long bodies get fewer copies: 34 slots, 8 copies; 35 slots, 4.
    let long = strided_sum(0, 1, 8, "ldxb").replace("add %r0, %r3\n", &"add %r0, %r3\n".repeat(30));
    assert_eq!(unroll_plans(&long), vec![(4, 8, 34, 37, 1, false, false)]);
    let longer =
        strided_sum(0, 1, 8, "ldxb").replace("add %r0, %r3\n", &"add %r0, %r3\n".repeat(31));
    assert_eq!(unroll_plans(&longer), vec![(4, 4, 35, 38, 1, false, false)]);
    assert_eq!(check(&long).result, Ok(30 * (0..8).sum::<u64>()));
}

#[test]
fn unrolled_loops_match_the_interpreter_at_every_trip_count_and_budget() {
    // Trip counts around multiples of the factor (16), from 1 to 33, each at every fuel
    // budget: a budget running out inside what would be a group is only seen one by
    // one, at the back-edge where the interpreter sees it.
    for count in [1, 2, 7, 15, 16, 17, 31, 32, 33] {
        let out = check_every_budget(&strided_sum(0, 1, count, "ldxb"));
        assert_eq!(out.result, Ok((0..u64::from(count)).sum()), "{count}");
    }
    // Too many iterations for the region: the groups stop where the guard's bound does,
    // the checked loop traps at the load.
    let out = check(&strided_sum(8, 2, 40, "ldxh"));
    assert_eq!(trap_of(&out).pc, 4);
    // Down to zero, signed, 32-bit, from the right-hand side, with steps not a power of
    // two; starts on the far side of the bound run one by one (one iteration here).
    let down = |n: i32, step: i32, exit: &str| {
        format!(
            "mov %r0, 0\nmov %r6, %r1\nmov %r7, {n}\n\
             loop:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nsub %r7, {step}\n\
             {exit}\nexit"
        )
    };
    for (n, step) in [(8, 1), (13, 1), (60, 3), (61, 3), (36, 12)] {
        for exit in [
            "jne %r7, 0, loop",
            "jsgt %r7, 0, loop",
            "jgt32 %r7, 0, loop",
            "jsgt32 %r7, 0, loop",
            "mov %r8, 0\njlt %r8, %r7, loop",
            "jge %r7, 5, loop",
        ] {
            check_every_budget(&down(n, step, exit));
        }
    }
    assert!(check(&down(-5, 1, "jsgt %r7, 0, loop")).result.is_ok());
    // Counting up to a bound in a register, or 32-bit with the high half set.
    for (start, bound) in [
        (0u64, 10u64),
        (3, 10),
        (10, 3),
        (0xffff_fff0, 0x1_0000_0004),
    ] {
        let src = format!(
            "mov %r0, 0\nmov %r6, %r1\nlddw %r7, {start}\nlddw %r8, {bound}\n\
             loop:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nadd %r7, 1\n\
             jlt32 %r7, %r8, loop\nexit"
        );
        check_every_budget(&src);
        check_every_budget(&src.replace("jlt32", "jlt"));
    }
    // The widest 32-bit distances, 2^32 - 1 (the guard's count of them is not clamped:
    // it is below 2^32 already), unsigned and signed: the reads run off region 2 and
    // trap where the interpreter does, at every budget.
    // A step of 3 takes the multiply for the division (`div`), which needs them so.
    for (start, bound, jump, step) in [
        (0u64, 0xffff_ffffu64, "jlt32", 1),
        (0, 0xffff_ffff, "jlt32", 3),
        (0x8000_0000, 0x7fff_ffff, "jslt32", 1),
        (0xffff_ffff_8000_0000, 0x7fff_ffff, "jslt32", 3),
    ] {
        let src = format!(
            "mov %r0, 0\nmov %r6, %r1\nlddw %r7, {start}\nlddw %r8, {bound}\n\
             loop:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nadd %r7, {step}\n\
             {jump} %r7, %r8, loop\nexit"
        );
        let plans = unroll_plans(&src);
        assert!(
            matches!(plans[..], [(_, _, _, _, s, _, true)] if s == step),
            "{plans:?}"
        );
        let full = check_every_budget(&src);
        assert!(
            matches!(trap_of(&full).kind, TrapKind::OutOfBounds { .. }),
            "{full:?}"
        );
    }
}

#[test]
fn unrolled_loops_keep_their_other_exits_and_traps() {
    // knn's shape: a 16-trip inner loop (exit in the middle) entered for every point.
    let nest = "mov %r0, 0\nmov %r8, 0\nmov %r9, %r1\n\
                outer:\nmov %r7, 0\nmov %r5, 0\n\
                inner:\nmov %r4, %r9\nadd %r4, %r7\nldxb %r3, [%r4+0]\nlsh %r3, 56\n\
                arsh %r3, 56\nmul %r3, %r3\nadd %r5, %r3\nadd %r7, 1\njeq %r7, 16, next\n\
                ja inner\nnext:\nadd %r0, %r5\nadd %r9, 16\nadd %r8, 1\njlt %r8, 4, outer\n\
                exit";
    assert_eq!(unroll_plans(nest).len(), 1);
    let want: u64 = (0..64u64).map(|b| b * b).sum();
    assert_eq!(check_every_budget(nest).result, Ok(want));
    // Five points: the fifth runs off the region's end (64 bytes) at its first load.
    let out = check(&nest.replace("jlt %r8, 4, outer", "jlt %r8, 5, outer"));
    assert_eq!(trap_of(&out).pc, 7);
    // A second exit on loaded data leaves a group in the middle.
    let search = strided_sum(0, 1, 40, "ldxb")
        .replace("add %r0, %r3\n", "add %r0, %r3\njeq %r3, 11, done\n")
        .replace("exit", "done:\nexit");
    assert_eq!(check_every_budget(&search).result, Ok((0..=11).sum()));
    // A checked access inside a group (the data-indexed load) traps mid-group with the
    // interpreter's fuel: bytes of region 2 index region 2, the 40th (39) is fine, an
    // index past 63 is not.
    let indexed = |bias: u32| {
        format!(
            "mov %r0, 0\nmov %r6, %r1\nmov %r7, 0\n\
             loop:\nldxb %r3, [%r6+0]\nadd %r3, {bias}\nmov %r4, %r1\nadd %r4, %r3\n\
             ldxb %r5, [%r4+0]\nadd %r0, %r5\nadd %r6, 1\nadd %r7, 1\njlt %r7, 30, loop\nexit"
        )
    };
    assert!(check_every_budget(&indexed(10)).result.is_ok());
    let out = check_every_budget(&indexed(45));
    assert_eq!(trap_of(&out).pc, 7);
}

#[test]
fn a_set_stop_flag_stops_an_unrolled_loop_at_its_first_charge() {
    let stop = StopFlag::new();
    assert!(stop.stop(5));
    let src = strided_sum(0, 1, 40, "ldxb");
    assert_eq!(unroll_plans(&src).len(), 1);
    let out = check_stopped(&program(&src, vec![]), 1_000_000, &stop);
    assert_eq!(
        out.result,
        Err(Trap {
            pc: 8,
            kind: TrapKind::Stopped { reason: 5 }
        })
    );
    assert_eq!(out.fuel_used, 5);
}

/// Programs whose runs take many slices of fuel (`rules::STOP_SLICE`): a versioned
/// loop with a counted exit (a byte sum over region 2, 64 bytes, inside an outer loop:
/// it runs in unrolled groups, which start only when the slice covers them), the same
/// sum with a body too long to unroll (fuel bounds its unchecked iterations), a loop with no memory access (never versioned), and a loop with a local
/// call (the slice crosses the call both ways).
fn many_slices_programs() -> Vec<(&'static str, String)> {
    vec![
        (
            "versioned",
            "mov %r0, 0\nmov %r8, 0\nouter:\nmov %r6, %r1\nmov %r7, 0\n\
             inner:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nadd %r7, 1\n\
             jlt %r7, 64, inner\nadd %r8, 1\njlt %r8, 2000, outer\nexit"
                .into(),
        ),
        (
            "versioned, long body",
            format!(
                "mov %r0, 0\nmov %r8, 0\nouter:\nmov %r6, %r1\nmov %r7, 0\n\
                 inner:\nldxb %r3, [%r6+0]\n{}add %r6, 1\nadd %r7, 1\n\
                 jlt %r7, 64, inner\nadd %r8, 1\njlt %r8, 100, outer\nexit",
                "add %r0, %r3\n".repeat(140)
            ),
        ),
        (
            "plain",
            "mov %r0, 0\nloop:\nadd %r0, 3\nxor %r0, 5\njlt %r0, 300000, loop\nexit".into(),
        ),
        (
            "call",
            "mov %r6, 0\nmov %r7, 0\nloop:\nmov %r1, %r6\ncall local f\nadd %r7, %r0\n\
             add %r6, 1\njlt %r6, 70000, loop\nmov %r0, %r7\nexit\n\
             f:\nmov %r0, %r1\nand %r0, 7\nexit"
                .into(),
        ),
        ("two charges", two_charges(60_000)),
        (
            "back-edges of two costs into a slot before the header",
            format!(
                "mov %r0, 0\nmov %r6, %r1\nmov %r7, 0\nja head\n\
                 latch:\nadd %r0, %r4\nadd %r7, 1\njlt %r7, 45000, head\nexit\n\
                 head:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nmov %r4, %r7\nand %r4, 3\n\
                 jgt %r4, 1, latch\n{CONVERTED_ARM}\nja latch"
            ),
        ),
    ]
}

/// The arm of [`rotated_two_costs`] that becomes selects with its closing branch.
const CONVERTED_ARM: &str = "add %r4, 5";

/// An arm that keeps its closing branch a branch (a store is no pure ALU instruction).
const STORING_ARM: &str = "stxb [%r10-1], %r4\nadd %r4, 5";

/// stats32's loop shape: entered at its header in the middle (`ja head`), whose closing
/// branch and the `ja` after its `arm` both go back to a slot before the header
/// (`latch`, 4) at different costs (slot 12 to 4: 9; the `ja`: 11 or more), and whose
/// latch branches forward to the header. `n` iterations over region 2's 64 bytes; the
/// load (slot 9) traps in the 65th.
fn rotated_two_costs(n: u32, arm: &str) -> String {
    format!(
        "mov %r0, 0\nmov %r6, %r1\nmov %r7, 0\nja head\n\
         latch:\nadd %r0, %r4\nadd %r6, 1\nadd %r7, 1\njlt %r7, {n}, head\nexit\n\
         head:\nldxb %r3, [%r6+0]\nmov %r4, %r3\nand %r4, 3\njgt %r4, 1, latch\n\
         {arm}\nja latch"
    )
}

/// [`rotated_two_costs`] matches the interpreter at every budget, through both paths of
/// each iteration, up to the region's end and trapping past it.
#[test]
fn back_edges_of_two_costs_into_a_slot_before_the_header_match_at_every_budget() {
    let want = |n: u64| -> u64 {
        (0..n)
            .map(|i| if i & 3 > 1 { i & 3 } else { (i & 3) + 5 })
            .sum()
    };
    for arm in [CONVERTED_ARM, STORING_ARM] {
        for n in [1u32, 2, 3, 5, 17, 63, 64] {
            let out = check_every_budget(&rotated_two_costs(n, arm));
            assert_eq!(out.result, Ok(want(u64::from(n))), "{arm} {n}");
        }
        for n in [65u32, 70] {
            let out = check_every_budget(&rotated_two_costs(n, arm));
            let trap = trap_of(&out);
            assert_eq!(trap.pc, 9, "{arm} {n}");
            assert!(matches!(trap.kind, TrapKind::OutOfBounds { .. }), "{trap}");
        }
    }
}

/// Held-out ringmax's layout over `n` of region 2's bytes (byte `i` is `i`): `v = p[i] ^
/// 42` compared with its slot in an 8-byte ring on the stack at `v & 7`; when `v` is not
/// larger, `arm` (one instruction) sets r4, the slot's new value, stored back at the
/// loop's header and added to a running sum in r0.
fn ring_with(n: u32, arm: &str) -> String {
    format!(
        "mov %r0, 0\nstdw [%r10-8], 0\nmov %r3, 0\nja head\n\
         latch:\nstxb [%r5+0], %r4\nadd %r0, %r4\nadd %r3, 1\njlt %r3, {n}, head\nexit\n\
         head:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\nxor %r4, 42\nmov %r6, %r4\n\
         and %r6, 7\nmov %r5, %r10\nadd %r5, -8\nadd %r5, %r6\nldxb %r6, [%r5+0]\n\
         jgt %r4, %r6, latch\n{arm}\nja latch"
    )
}

/// [`ring_with`] storing 9 when `v` is not larger (a converted closing branch: two
/// costs; not the running maximum ringmax keeps, which stays a branch, see `extrema`).
fn ring_max(n: u32) -> String {
    ring_with(n, "mov %r4, 9")
}

/// The unrolled copy of a loop that writes memory and charges a selected cost knows the
/// registers it carries (the running sum, not the counter), whose values and the fuel
/// slice each copy stores (`translate::order`); the groups still match the interpreter
/// at every budget, through both paths.
#[test]
fn a_writing_loop_with_a_selected_charge_carries_its_sum_through_its_groups() {
    let p = program(&ring_max(40), vec![]);
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    let unrolls: Vec<_> = crate::loops::plan_loops(p.insns(), &plan.functions[0], true)
        .into_iter()
        .filter_map(|l| l.unroll)
        .map(|u| (u.factor, u.selected, u.read_only, u.carried))
        .collect();
    assert_eq!(unrolls, vec![(16, true, false, vec![0])]);
    let want = |n: u32| {
        let mut ring = [0u64; 8];
        (0..u64::from(n))
            .map(|i| {
                let v = i ^ 42;
                let slot = &mut ring[(v & 7) as usize];
                *slot = if v > *slot { v & 0xff } else { 9 };
                *slot
            })
            .sum::<u64>()
    };
    for n in [1u32, 2, 15, 16, 17, 33, 64] {
        let out = check_every_budget(&ring_max(n));
        assert_eq!(out.result, Ok(want(n)), "{n}");
    }
}

/// A loop of `n` iterations in grep's shape: a conditional backward branch into the
/// middle of the loop, and a `ja` back to its header, so most iterations charge fuel
/// twice (and some three times) at different pcs with different costs.
fn two_charges(n: u32) -> String {
    format!(
        "mov %r0, 0\nmov %r6, 0\nhead:\nadd %r6, 1\nmov %r3, %r6\nand %r3, 3\n\
         jne %r3, 0, other\nadd %r0, 7\nmid:\nadd %r0, 1\njgt %r6, {n}, done\nja head\n\
         other:\njne %r3, 2, mid\nadd %r0, 100\nja mid\ndone:\nexit"
    )
}

#[test]
fn two_charges_per_iteration_match_at_every_budget() {
    let p = program(&two_charges(9), vec![]);
    let full = check_program(p.clone(), u64::MAX);
    // Iterations 1..=10: r6 % 4 == 0 adds 8, == 2 adds 101, else 1.
    let want: u64 = (1..=10u64)
        .map(|i| match i % 4 {
            0 => 8,
            2 => 101,
            _ => 1,
        })
        .sum();
    assert_eq!(full.result, Ok(want));
    every_budget_runs_out_or_matches(&p, &full);
}

/// [`two_charges`] with a load in its header, so it is versioned: fuel bounds a loop
/// whose iterations charge once (the `ja` to the header) or twice (first a backward jump
/// into its middle), and it matches the interpreter at every budget.
#[test]
fn iterations_charging_once_or_twice_match_at_every_budget() {
    let with_load = |n: u32| {
        two_charges(n).replace(
            "head:\nadd %r6, 1\n",
            "head:\nldxb %r5, [%r1+5]\nadd %r0, %r5\nadd %r6, 1\n",
        )
    };
    let p = program(&with_load(9), vec![]);
    let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
    let f = &plan.functions[0];
    let costs: Vec<_> = loops::plan_loops(p.insns(), f, !plan.calls_helpers)
        .iter()
        .map(|l| loops::iteration_cost(p.insns(), f, l))
        .collect();
    // `ja head` (slot 11 to 2) costs 10; `jne %r3, 2, mid` (12 to 9) 4; `ja mid` (14 to
    // 9) 6.
    assert_eq!(costs, vec![span(10, 16)]);
    for n in [0, 1, 2, 3, 9, 20] {
        let out = check_every_budget(&with_load(n));
        assert!(out.result.is_ok(), "{n}: {out:?}");
    }
}

/// A run over many slices uses the interpreter's fuel, and at every budget around the
/// first few slice boundaries it runs out at the interpreter's pc with its fuel: the
/// slice is refilled from the reserve exactly, and the last charge that fits runs.
#[test]
fn fuel_slices_refill_across_many_slices() {
    let slice = csx_ebpf::engine::rules::STOP_SLICE;
    for (name, src) in many_slices_programs() {
        let p = program(&src, vec![]);
        let full = check_program(p.clone(), u64::MAX);
        assert!(full.result.is_ok(), "{name}: {full:?}");
        assert!(full.fuel_used > 6 * slice, "{name}: {}", full.fuel_used);
        let exact = check_program(p.clone(), full.fuel_used);
        assert_eq!(exact, full, "{name}: a budget of exactly the fuel needed");
        let mut budgets: Vec<u64> = vec![full.fuel_used - 1];
        for k in [1, 2, 5] {
            budgets.extend((k * slice - 7)..=(k * slice + 7));
        }
        for fuel in budgets {
            let out = check_program(p.clone(), fuel);
            assert_eq!(
                out.result.as_ref().map_err(|t| &t.kind),
                Err(&TrapKind::FuelExhausted { budget: fuel }),
                "{name}, fuel {fuel}"
            );
            assert!(out.fuel_used > fuel, "{name}, fuel {fuel}");
        }
    }
}

/// The first two of `many_slices_programs` take the two unchecked paths: the counted
/// loop an unrolled copy (its one-by-one copy keeps a counter), the long one none (fuel
/// bounds its unchecked iterations).
#[test]
fn many_slices_programs_cover_groups_and_fuel_bounded_loops() {
    let progs = many_slices_programs();
    let costs = |src: &str| {
        let p = program(src, vec![]);
        let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
        let f = &plan.functions[0];
        loops::plan_loops(p.insns(), f, !plan.calls_helpers)
            .iter()
            .map(|l| loops::iteration_cost(p.insns(), f, l))
            .collect::<Vec<_>>()
    };
    assert_eq!(unroll_plans(&progs[0].1).len(), 1);
    assert_eq!(unroll_plans(&progs[1].1).len(), 0);
    assert_eq!(costs(&progs[1].1), vec![span(144, 144)]);
    assert_eq!(costs(&progs[5].1), vec![span(9, 11)]);
}

fn span(least: u64, most: u64) -> Option<loops::IterationFuel> {
    Some(loops::IterationFuel { least, most })
}

/// Which loops fuel bounds (`loops::iteration_cost`), with the least and most fuel one
/// iteration charges: one with back-edges of different costs, or entered at a header
/// that is not its first slot, too; not one with a call.
#[test]
fn iteration_costs_of_versioned_loops() {
    let cost = |src: &str| {
        let p = program(src, vec![]);
        let plan = analysis::plan_program(p.insns(), p.entry()).unwrap();
        let f = &plan.functions[0];
        crate::loops::plan_loops(p.insns(), f, !plan.calls_helpers)
            .iter()
            .map(|l| crate::loops::iteration_cost(p.insns(), f, l))
            .collect::<Vec<_>>()
    };
    // Slots 4-8, the back-edge at slot 8: 5 per iteration.
    assert_eq!(cost(&strided_sum(0, 4, 16, "ldxw")), vec![span(5, 5)]);
    // Two back-edges of different lengths.
    let two = "mov %r0, 0\nmov %r7, 0\nloop:\nldxb %r3, [%r1+0]\nadd %r1, 1\nadd %r7, 1\n\
               jeq %r3, 3, loop\nadd %r0, %r3\njlt %r7, 16, loop\nexit";
    assert_eq!(cost(two), vec![span(4, 6)]);
    // A local call in the body.
    let call = "mov %r6, 0\nmov %r9, %r1\nloop:\nldxb %r3, [%r9+0]\ncall local f\n\
                add %r6, 1\njlt %r6, 4, loop\nexit\nf:\nmov %r0, 1\nexit";
    assert_eq!(cost(call), vec![None]);
    // Entered in the middle: the header (slot 3) is not the body's first slot.
    let rotated = "mov %r0, 0\nmov %r7, 0\nja head\nbody:\nldxb %r3, [%r1+0]\nadd %r0, %r3\n\
                   add %r1, 1\nadd %r7, 1\nhead:\njlt %r7, 16, body\nexit";
    assert_eq!(cost(rotated), vec![span(5, 5)]);
    // Back-edges into a slot before the header, of costs 9 and 11 (a converted closing
    // branch) or 9 and 12 (a store in the arm keeps it a branch).
    assert_eq!(
        cost(&rotated_two_costs(16, CONVERTED_ARM)),
        vec![span(9, 11)]
    );
    assert_eq!(cost(&rotated_two_costs(16, STORING_ARM)), vec![span(9, 12)]);
    for src in [two, call, rotated] {
        let p = program(src, vec![]);
        let full = check_program(p.clone(), u64::MAX);
        for fuel in 0..=full.fuel_used + 1 {
            check_program(p.clone(), fuel);
        }
    }
}

/// A host whose helper 1 raises the run's stop flag (reason 5).
struct StopHost<'a>(&'a StopFlag);

impl HelperHost for StopHost<'_> {
    fn call(&mut self, id: u32, _: [u64; 5], _: &mut MemoryMap<'_>) -> Result<u64, HelperAbort> {
        assert_eq!(id, 1);
        self.0.stop(5);
        Ok(0)
    }
}

/// A flag raised during the run (by a helper, so at a known point) stops every engine
/// within one slice of fuel after it: the interpreter at the next charge, the compiled
/// tiers as the helper call returns (their trampoline looks at the flag after every
/// helper, so a loop of long helper calls stops at the first one to end after a stop).
#[test]
fn a_stop_raised_mid_run_is_seen_within_one_slice() {
    let slice = csx_ebpf::engine::rules::STOP_SLICE;
    // 300 spins, the helper (slot 3), then a versioned loop over region 2 (back-edge at
    // slot 10) forever (slot 11).
    let src = "mov %r0, 0\nspin:\nadd %r0, 1\njlt %r0, 300, spin\ncall 1\n\
               again:\nmov %r6, %r1\nmov %r7, 0\n\
               inner:\nldxb %r3, [%r6+0]\nadd %r0, %r3\nadd %r6, 1\nadd %r7, 1\n\
               jlt %r7, 64, inner\nja again";
    let p = program(src, vec![]);
    let raised_at = 299 * 2 + 1;
    let mut engines: Vec<(&str, Box<dyn Engine>)> = vec![
        ("interpreter", Box::new(Interpreter::new(p.clone()))),
        ("jit", Box::new(JitProgram::compile(p.clone()).unwrap())),
    ];
    #[cfg(target_arch = "x86_64")]
    engines.push(("quick", Box::new(QuickProgram::compile(p.clone()).unwrap())));
    for (name, engine) in &engines {
        let stop = StopFlag::new();
        let mut rw: Vec<u8> = (0..64).collect();
        let mut map = MemoryMap::new();
        let a = map.map_read_write(RegionIdx(2), &mut rw).unwrap();
        let opts = RunOptions {
            fuel: 1 << 40,
            stop: Some(&stop),
            counts: None,
        };
        let out = engine.run(&mut map, [a, 64, 0, 0, 0], &opts, &mut StopHost(&stop));
        let trap = trap_of(&out);
        assert_eq!(trap.kind, TrapKind::Stopped { reason: 5 }, "{name}");
        assert!(
            out.fuel_used >= raised_at && out.fuel_used <= raised_at + slice,
            "{name}: stopped after {} fuel, the flag was raised after {raised_at}",
            out.fuel_used
        );
        if *name == "interpreter" {
            assert_eq!((trap.pc, out.fuel_used), (10, raised_at + 5));
        } else {
            assert_eq!(
                (trap.pc, out.fuel_used),
                (3, raised_at),
                "{name}: at the call"
            );
        }
    }
}

/// A `callx` of a register the quick tier reads into a scratch register before its
/// charge, which refills the (empty) slice: the id survives the refill (found by the
/// differential fuzzer: the refill routine once clobbered it).
#[test]
fn a_refill_keeps_the_register_a_callx_reads() {
    assert!(check("mov %r6, 1\ncall %r6\nexit").result.is_ok());
    let out = check("call %r10\nexit");
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::UnknownHelper {
            id: RegionIdx::STACK.vaddr(csx_ebpf::limits::STACK_SIZE as u32) as i64
        }
    );
}

#[test]
fn stack_bases_follow_copies_spills_and_loops() {
    // r2 walks a stack buffer, carried around the loop through a spill slot at r10-8;
    // r1 (region 2) and a value reloaded from a slot a narrower store overwrote are not
    // stack addresses; `lddw` leaves the other registers alone.
    let src = "mov %r2, %r10\nadd %r2, -64\nstxdw [%r10-8], %r2\nstxdw [%r10-16], %r2\n\
               stw [%r10-12], 0\nmov %r6, 0\n\
               loop:\nldxdw %r3, [%r10-8]\nlddw %r5, 0x100000000\nstxw [%r3+0], %r6\n\
               ldxb %r4, [%r1+0]\nadd %r3, 4\nstxdw [%r10-8], %r3\nadd %r6, 1\n\
               jlt %r6, 8, loop\n\
               ldxdw %r7, [%r10-16]\nldxw %r0, [%r7+0]\nldxw %r0, [%r2+28]\nexit";
    let insns = assemble(src).unwrap();
    let plan = crate::analysis::plan_program(&insns, 0).unwrap();
    let bases: Vec<u32> = plan.functions[0].stack_bases.iter().copied().collect();
    // Slots 2-4 (stores at r10), 6 (the reload), 9 (through r3 after `lddw`), 12 (the
    // spill back), 15 (the reload of the clobbered slot: at r10), 17 (through r2).
    // Not 10 (through r1) nor 16 (through r7, reloaded from the clobbered slot).
    assert_eq!(bases, vec![2, 3, 4, 6, 9, 12, 15, 17]);
    // r7 is the pointer with its high half zeroed: region 0, which traps, on every
    // engine at the same slot (after the loop's stores).
    let out = check(src);
    assert_eq!(trap_of(&out).pc, 16);
    let fine = check(&src.replace("ldxw %r0, [%r7+0]\n", ""));
    assert_eq!(fine.result, Ok(7));
}

#[test]
fn loop_carried_stack_pointers_trap_where_the_interpreter_does() {
    // A pointer into the stack, carried around a loop through a spill, walks down past
    // the bottom of the stack region: the store that leaves it traps at the same slot
    // and address on every engine (`check` compares them), after the stores before it.
    let src = "mov %r2, %r10\nadd %r2, -8\nstxdw [%r10-8], %r2\nmov %r6, 0\n\
               loop:\nldxdw %r3, [%r10-8]\nstxdw [%r3+0], %r6\nadd %r3, -256\n\
               stxdw [%r10-8], %r3\nadd %r6, 1\nja loop";
    let out = check(src);
    let trap = trap_of(&out);
    assert_eq!(trap.pc, 5);
    assert!(
        matches!(trap.kind, TrapKind::OutOfBounds { write: true, .. }),
        "{trap}"
    );
    // The same walk through a register that once held a stack address but is moved
    // to region 2 by arithmetic (r10 - r10 + r1): the stack check misses, the region
    // table finds region 2, and the stores land there.
    let src = "mov %r2, %r10\nsub %r2, %r10\nadd %r2, %r1\nstxdw [%r10-8], %r2\nmov %r6, 0\n\
               loop:\nldxdw %r3, [%r10-8]\nstxb [%r3+0], %r6\nadd %r3, 1\n\
               stxdw [%r10-8], %r3\nadd %r6, 1\njlt %r6, 64, loop\nldxb %r0, [%r1+63]\nexit";
    assert_eq!(check(src).result, Ok(63));
}

#[test]
fn pure_callees_are_inlined_with_the_calls_fuel_depth_and_registers() {
    // `clamp` (forward branches, ALU, an `lddw`) may be inlined; callees that load,
    // loop, call or name r10 may not.
    let callee = |body: &str| format!("mov %r1, 1\ncall local f\nexit\nf:\n{body}\nexit");
    let inlinable = |src: &str| {
        let insns = assemble(src).unwrap();
        let plan = crate::analysis::plan_program(&insns, 0).unwrap();
        crate::analysis::inlinable(&insns, &plan.functions[1])
    };
    assert!(inlinable(&callee(
        "mov %r0, %r1\njgt %r0, 10, big\nlddw %r2, 0x100000000\nadd %r0, %r2\nja out\n\
         big:\nmov %r0, 10\nout:\nmov %r6, 0"
    )));
    assert!(!inlinable(&callee("ldxb %r0, [%r1+0]")));
    assert!(!inlinable(&callee(
        "mov %r0, 0\nback:\nadd %r0, 1\njlt %r0, 3, back"
    )));
    assert!(!inlinable(&callee("call 1")));
    assert!(!inlinable(&callee("mov %r0, %r10")));
    assert!(!inlinable(&callee(&"add %r0, 1\n".repeat(30))));

    // A loop calling `clamp(x, lo = r6)`, which also reads the caller's r7, clobbers
    // r6-r9 (restored on return) and hands back r1-r5: every fuel budget stops at the
    // same slot, the call's charge included, on every engine.
    let src = "mov %r0, 0\nmov %r6, 5\nmov %r7, 100\nmov %r8, 0\n\
               loop:\nmov %r1, %r8\nmul %r1, 3\ncall local clamp\nadd %r0, %r1\nadd %r0, %r6\n\
               add %r0, %r7\nadd %r8, 1\njlt %r8, 9, loop\nexit\n\
               clamp:\nmov %r2, %r1\njge %r1, %r6, high\nmov %r1, %r6\nja out\n\
               high:\njle %r1, 20, out\nmov %r1, 20\n\
               out:\nadd %r1, %r7\nmov %r6, 0\nmov %r7, 0\nmov %r8, 77\nmov %r9, 1\nexit";
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    // clamp(3i, 5..=20) + 100, plus r6 = 5 and r7 = 100, for i in 0..9.
    let want: u64 = (0..9u64).map(|i| (3 * i).clamp(5, 20) + 100 + 105).sum();
    assert_eq!(full.result, Ok(want));
    every_budget_runs_out_or_matches(&p, &full);

    // The depth check still runs: f recurses n times and calls the pure `leaf` at
    // the bottom: n + 3 frames, too many past the limit of 8.
    for n in 4..8u32 {
        let src = format!(
            "mov %r1, {n}\ncall local f\nexit\n\
             f:\njeq %r1, 0, bottom\nsub %r1, 1\ncall local f\nadd %r0, 1\nexit\n\
             bottom:\ncall local leaf\nexit\n\
             leaf:\nmov %r0, 1\nexit"
        );
        let out = check(&src);
        if n + 3 <= 8 {
            assert_eq!(out.result, Ok(u64::from(n) + 1));
        } else {
            let trap = trap_of(&out);
            assert_eq!(trap.kind, TrapKind::CallDepthExceeded { depth_max: 8 });
            // The inlined call at slot 8 when only `leaf` is one too many, else the
            // recursive call at slot 5.
            assert_eq!(trap.pc, if n + 2 <= 8 { 8 } else { 5 });
        }
    }
}

/// A versioned loop whose body calls an inlinable callee: the callee's slots are
/// translated inside the loop's unchecked copy with the callee's own blocks, not taken
/// for exits of the loop (the JIT once panicked compiling the bench's `calls` kernel).
#[test]
fn an_inlined_callee_inside_a_versioned_loop() {
    let src = "mov %r9, %r1\nmov %r0, 0\nmov %r6, 5\nmov %r8, 0\n\
               loop:\nldxb %r1, [%r9+0]\ncall local clamp\nadd %r0, %r1\nadd %r9, 1\n\
               add %r8, 1\njlt %r8, 64, loop\nexit\n\
               clamp:\njge %r1, %r6, high\nmov %r1, %r6\nja out\n\
               high:\njle %r1, 20, out\nmov %r1, 20\nout:\nexit";
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    let want: u64 = (0..64u64).map(|i| i.clamp(5, 20)).sum();
    assert_eq!(full.result, Ok(want));
    for fuel in (0..=full.fuel_used + 1).step_by(7) {
        check_program(p.clone(), fuel);
    }
}

/// A panic inside a compiler tier (a bug, never the verified program's fault) is a typed
/// `Codegen` error naming the program, on both tiers, and ordinary compiles go on.
#[test]
fn a_panic_in_the_compiler_is_a_typed_error() {
    let p = program("mov %r0, 7\nexit", vec![]);
    crate::compiled::PANIC_IN_BUILD.with(|f| f.set(true));
    let err = JitProgram::compile(p.clone()).map(|_| ()).unwrap_err();
    #[cfg(target_arch = "x86_64")]
    let quick = QuickProgram::compile(p.clone()).map(|_| ()).unwrap_err();
    crate::compiled::PANIC_IN_BUILD.with(|f| f.set(false));
    match err {
        JitError::Codegen { program, message } => {
            assert_eq!(program, "test");
            assert!(message.contains("internal compiler error"), "{message}");
            assert!(message.contains("a compiler bug (test)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    #[cfg(target_arch = "x86_64")]
    assert!(matches!(quick, JitError::Codegen { .. }), "{quick:?}");
    assert_eq!(check("mov %r0, 7\nexit").result, Ok(7));
}

/// An insertion sort of six u32s on the stack, descending at first so that every shift
/// runs to the front. The shift loop (nested in the outer one, exiting on loaded data)
/// counts `j` down in r5 with `dec` (`add`, or the 32-bit `add32`), loads `buf[j]`
/// through `ext` of it (`zext`: `lsh 32; rsh 32`, `sext`: `lsh 32; arsh 32`, `mov32`),
/// stores through a pointer walking down, and goes on while `j > limit` (signed): at
/// `limit` 0 it sorts; below 0 it reaches `j = -1`, whose 32-bit index is no longer
/// `j` (zero-extended: 2^32 - 1, out of the frame).
fn stack_isort(dec: &str, ext: &str, limit: i32) -> String {
    let ext = match ext {
        "zext" => "mov %r6, %r5\nlsh %r6, 32\nrsh %r6, 32\n",
        "sext" => "mov %r6, %r5\nlsh %r6, 32\narsh %r6, 32\n",
        _ => "mov32 %r6, %r5\n",
    };
    format!(
        "mov %r1, 0\n\
         fill:\nmov %r2, %r1\nlsh %r2, 2\nmov %r3, %r10\nadd %r3, -24\nadd %r3, %r2\n\
         mov %r4, 6\nsub %r4, %r1\nstxw [%r3+0], %r4\nadd %r1, 1\njlt %r1, 6, fill\n\
         mov %r1, 1\n\
         outer:\nmov %r2, %r1\nlsh %r2, 2\nmov %r3, %r10\nadd %r3, -24\nadd %r3, %r2\n\
         ldxw %r3, [%r3+0]\nmov %r4, %r10\nadd %r4, -24\nadd %r4, %r2\nmov %r5, %r1\n\
         inner:\n{dec} %r5, -1\n{ext}lsh %r6, 2\nmov %r8, %r10\nadd %r8, -24\n\
         add %r8, %r6\nldxw %r8, [%r8+0]\njle %r8, %r3, place\nstxw [%r4+0], %r8\n\
         add %r4, -4\njsgt %r5, {limit}, inner\n\
         place:\nstxw [%r4+0], %r3\nadd %r1, 1\njlt %r1, 6, outer\n\
         ldxw %r0, [%r10-24]\nldxw %r2, [%r10-4]\nlsh %r2, 8\nadd %r0, %r2\n\
         ldxw %r2, [%r10-12]\nlsh %r2, 16\nadd %r0, %r2\nexit"
    )
}

#[test]
fn shifts_through_a_stack_array_at_a_32_bit_index_go_unchecked() {
    // The shift loop (header at slot 22): the load through the extended index and the
    // store through the walking pointer both move 4 bytes down per iteration, though
    // the loop sits inside another and leaves on loaded data.
    for ext in ["zext", "sext", "mov32"] {
        let plan = unchecked_accesses(&stack_isort("add", ext, 0));
        let inner = plan.iter().find(|(h, _)| *h == 22);
        let strides: Vec<i64> = inner.map_or(vec![], |(_, a)| a.iter().map(|a| a.1).collect());
        assert_eq!(strides, vec![-4, -4], "{ext}: {plan:?}");
    }
    // Sorted: 1, 6 and 4 at buf[0], buf[5], buf[3].
    let want = 1 + (6 << 8) + (4 << 16);
    for ext in ["zext", "sext", "mov32"] {
        assert_eq!(check(&stack_isort("add", ext, 0)).result, Ok(want));
        assert_eq!(check(&stack_isort("add32", ext, 0)).result, Ok(want));
    }
}

#[test]
fn a_32_bit_index_leaving_its_range_matches_the_interpreter_at_every_budget() {
    // Past j = 0 the zero-extended index is 2^32 - 1 and the load traps (the unchecked
    // copy must have stopped before); sign-extended, j = -1 reads below the array,
    // inside the frame, and the shift goes on down the frame until the data stops it.
    // Value, trap, fuel and memory match the interpreter's (at every budget for three).
    for dec in ["add", "add32"] {
        for ext in ["zext", "sext", "mov32"] {
            for limit in [0, -3] {
                let src = stack_isort(dec, ext, limit);
                let every = matches!(
                    (dec, ext, limit),
                    ("add", "zext", -3) | ("add32", "mov32", -3) | ("add", "sext", 0)
                );
                let out = if every {
                    check_every_budget(&src)
                } else {
                    check(&src)
                };
                let traps = limit < 0 && ext != "sext";
                assert_eq!(out.result.is_err(), traps, "{dec} {ext} {limit}: {out:?}");
            }
        }
    }
}

/// stats64's loop as clang lays it out: entered at its loads (`ja head`), the running
/// maximum a forward triangle, the running minimum the loop's closing branch converted
/// with its arm (`jlt ... latch; mov; ja latch`: 24 or 26 fuel, by the path), and the
/// sum, the pointer and the count moved at `latch`, which leaves after `count` bytes.
fn min_max_sum(count: u32) -> String {
    format!(
        "mov %r2, 0\nmov %r4, -1\nmov %r0, 0\nmov %r7, -1\nmov %r6, 0\nmov %r5, 0\n\
         mov %r8, 0\nja head\n\
         latch:\nadd %r0, %r6\nadd %r1, 1\nadd %r5, 1\nmov %r6, %r0\nmov %r8, %r2\n\
         mov %r7, %r4\njlt %r5, {count}, head\n\
         mul %r0, 1000003\nxor %r0, %r4\nmul %r0, 1000003\nxor %r0, %r2\nexit\n\
         head:\nldxb %r0, [%r1+0]\nxor %r0, 0x2b\nmul %r0, 37\nand %r0, 63\nmov %r2, %r0\n\
         jgt %r0, %r8, above\nmov %r2, %r8\n\
         above:\nmov %r4, %r0\njlt %r0, %r7, latch\nmov %r4, %r7\nja latch"
    )
}

#[test]
fn loops_whose_paths_charge_different_fuel_run_in_groups_at_every_budget() {
    // The loop has groups, although its two paths charge different fuel.
    let plans = unroll_plans(&min_max_sum(64));
    assert_eq!(plans.len(), 1, "{plans:?}");
    assert!(plans[0].1 >= 2, "{plans:?}");
    let want = |count: u64| {
        let xs: Vec<u64> = (0..count).map(|i| ((i ^ 0x2b) * 37) & 63).collect();
        let (min, max) = (xs.iter().min().unwrap(), xs.iter().max().unwrap());
        let sum: u64 = xs.iter().sum();
        ((sum.wrapping_mul(1_000_003) ^ min).wrapping_mul(1_000_003)) ^ max
    };
    // Around multiples of the factor; at every budget the value, the trap's pc and the
    // fuel used are the interpreter's (`check_program`), so a group charging one path's
    // cost for the other's is seen at the budgets near its end.
    for count in [1, 2, 7, 8, 9, 15, 16, 17, 33, 63, 64] {
        let out = check_every_budget(&min_max_sum(count));
        assert_eq!(out.result, Ok(want(u64::from(count))), "{count}");
    }
    // Past the region's end: the checked loop traps at the load.
    let out = check(&min_max_sum(70));
    assert_eq!(trap_of(&out).pc, 20);
}

#[test]
fn a_rotated_loop_tops_up_the_slice_to_start_its_groups() {
    // stats64's layout (`min_max_sum`): the back-edges jump to the latch above the
    // header, so a one-by-one iteration whose charge refilled the slice is not at an
    // iteration's end and cannot go back to the group start. A run's slice starts
    // empty: the group start moves fuel from the reserve into it (the stop flag clear)
    // and tests it again, else the loop ran one by one for the whole run.
    let src = min_max_sum(64);
    let plans = unroll_plans(&src);
    assert_eq!(plans.len(), 1, "{plans:?}");
    let need = u64::from(plans[0].1) * plans[0].2;
    let p = program(&src, vec![]);
    let seen = crate::translated::during(|| {
        check_program(p.clone(), 1_000_000);
    });
    let grouped: Vec<&String> = seen
        .iter()
        .filter(|f| f.contains(&format!(" = {need}")))
        .collect();
    assert!(!grouped.is_empty(), "{seen:?}");
    for func in grouped {
        // The group start's test of the slice, and the same test after the top-up.
        let tests = func
            .lines()
            .filter(|l| {
                l.contains(" = icmp") && l.contains(" uge ") && l.ends_with(&format!(" = {need}"))
            })
            .count();
        assert_eq!(tests, 2, "{func}");
    }
    // A stop flag set before the run: no top-up, so the first charge (a refill of the
    // empty slice) sees it, as on the interpreter.
    let stop = StopFlag::new();
    assert!(stop.stop(3));
    let out = check_stopped(&p, 1_000_000, &stop);
    assert!(
        matches!(
            out.result,
            Err(Trap {
                kind: TrapKind::Stopped { reason: 3 },
                ..
            })
        ),
        "{out:?}"
    );
}

/// pred32's loop as clang lays it out: the count spilled to the frame before the loop
/// (`[r10 - 8]`) and reloaded for the exit's compare in every iteration, the loop
/// entered at its load (`ja head`) and closed by a converted branch (`jgt ... latch;
/// mov; ja latch`, two paths charging different fuel). `write` is put in the body
/// right after the reload (see [`SLOT_WRITES`]).
fn spilled_bound(count: u32, write: &str) -> String {
    format!(
        "mov %r3, {count}\nstxdw [%r10-8], %r3\nmov %r3, 0\nmov %r0, 0\nmov %r4, 0\n\
         ja head\n\
         latch:\nadd %r0, %r6\nadd %r1, 1\nadd %r4, 1\nldxdw %r3, [%r10-8]\n{write}\
         jlt %r4, %r3, head\nexit\n\
         head:\nldxb %r5, [%r1+0]\nmov %r6, %r5\nmul %r6, 3\njgt %r5, 20, latch\n\
         mov %r6, 1\nja latch"
    )
}

/// Stores [`spilled_bound`]'s body may make, and whether the count's slot keeps its
/// value: none; a spill of r0 to another slot; the count taken down by one through
/// r10, or through a copy of r10 (not a constant offset from r10, so any slot may
/// change), and reloaded from the slot for the compare (so the compare reads the slot:
/// without the check that the loop never writes it, both the plan and the every-budget
/// sweep below fail).
const SLOT_WRITES: [(&str, bool); 4] = [
    ("", true),
    ("stxdw [%r10-16], %r0\nstw [%r10-20], 7\n", true),
    (
        "add %r3, -1\nstxdw [%r10-8], %r3\nldxdw %r3, [%r10-8]\n",
        false,
    ),
    (
        "mov %r2, %r10\nadd %r3, -1\nstxdw [%r2-8], %r3\nldxdw %r3, [%r10-8]\n",
        false,
    ),
];

#[test]
fn a_bound_spilled_to_the_frame_gives_a_counted_exit_at_every_budget() {
    // The exit compares with the slot's value, invariant when the loop does not write
    // it: a counted exit, and groups. Written (or perhaps written), no counted exit.
    for (write, kept) in SLOT_WRITES {
        let exits = unroll_exits(&spilled_bound(64, write));
        if kept {
            assert_eq!(exits.len(), 1, "{write}: {exits:?}");
            assert_eq!(exits[0].3.bound_slot, Some((-8, 8)), "{exits:?}");
            assert!(exits[0].1 >= 2, "{exits:?}");
        } else {
            assert_eq!(exits, vec![], "{write}");
        }
    }
    let want = |count: u64| {
        (0..count)
            .map(|x| if x > 20 { x * 3 } else { 1 })
            .sum::<u64>()
    };
    // Value, trap pc and fuel at every budget, around multiples of the factor; a count
    // written down in the loop meets the index at half of it.
    for (write, kept) in SLOT_WRITES {
        for count in [1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 40, 63, 64] {
            let out = check_every_budget(&spilled_bound(count, write));
            let n = if kept {
                u64::from(count)
            } else {
                u64::from(count).div_ceil(2)
            };
            assert_eq!(out.result, Ok(want(n)), "{write} {count}");
        }
    }
    // Past the region's end, inside the iterations the slot's count gives the groups:
    // the checked loop traps at the load, at every budget.
    for (write, _) in &SLOT_WRITES[..2] {
        let out = check_every_budget(&spilled_bound(70, write));
        let load = 12 + write.matches('\n').count() as u32;
        assert_eq!(trap_of(&out).pc, load, "{write}");
        assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
    }
}

/// A scan loop as clang lays one out under register pressure: the bound (`r6`) and
/// the byte sought (`r9`) spilled before the loop and reloaded on its rare path, which
/// spills and reloads the hit count too (the shape of the grep kernel's loop). `count`
/// bytes are scanned: past the 64 of memory, the load traps inside the loop. `reload`
/// is the byte's reload, plain or sign-extending.
fn spilled_scan(count: u32, reload: &str) -> String {
    format!(
        "mov %r6, {count}\nstxdw [%r10-16], %r6\nldxb %r9, [%r1+0]\nand %r9, 7\n\
         stxw [%r10-24], %r9\nmov %r5, 0\nmov %r4, 0\nmov %r0, 0\n\
         head:\nmov %r2, %r1\nadd %r2, %r5\nldxb %r2, [%r2+0]\nand %r2, 7\n\
         jne %r2, %r9, next\n\
         stxdw [%r10-8], %r4\nmov %r6, 0\nmov %r9, 0\nmov %r4, %r5\nadd %r0, %r4\n\
         ldxdw %r4, [%r10-8]\nadd %r4, 1\n{reload} %r9, [%r10-24]\nldxdw %r6, [%r10-16]\n\
         next:\nadd %r5, 1\njlt %r5, %r6, head\n\
         mul %r0, 1000003\nadd %r0, %r4\nexit"
    )
}

#[test]
fn a_scan_with_spills_reloaded_on_its_rare_path_at_every_budget() {
    // Memory holds 0..64: a byte's low 3 bits are 0 every 8 bytes.
    let want = |count: u64| {
        let hits: Vec<u64> = (0..count).filter(|i| i % 8 == 0).collect();
        (hits.iter().sum::<u64>() * 1_000_003) + hits.len() as u64
    };
    for reload in ["ldxw", "ldxsw"] {
        for count in [1, 2, 8, 9, 17, 63, 64] {
            let out = check_every_budget(&spilled_scan(count, reload));
            assert_eq!(out.result, Ok(want(u64::from(count))), "{reload} {count}");
        }
        // Past memory's end: the load in the loop traps, at every budget.
        let out = check_every_budget(&spilled_scan(70, reload));
        assert_eq!(trap_of(&out).pc, 10, "{reload}");
        assert!(matches!(trap_of(&out).kind, TrapKind::OutOfBounds { .. }));
    }
}

#[test]
fn frame_loads_of_each_width_and_through_a_made_address_read_what_was_stored() {
    // Each width stored from a value with every byte set, loaded zero- and
    // sign-extended; an immediate store; and a load of a slot through an address made
    // without r10 (the stack's virtual address), which reads the bytes stored through
    // r10. (Written for a change that kept frame slots in variables, measured slower
    // and reverted: a JIT that forwards stores to loads must still extend them as
    // memory does and still write the frame.)
    let top = RegionIdx::STACK.vaddr(0) + csx_ebpf::limits::STACK_SIZE as u64;
    let src = format!(
        "lddw %r3, 0x89abcdeffedcba98\n\
         stxw [%r10-8], %r3\nldxw %r4, [%r10-8]\nldxsw %r5, [%r10-8]\n\
         stxh [%r10-16], %r3\nldxh %r6, [%r10-16]\nldxsh %r7, [%r10-16]\n\
         stxb [%r10-24], %r3\nldxb %r8, [%r10-24]\nldxsb %r9, [%r10-24]\n\
         stdw [%r10-32], -5\nldxdw %r1, [%r10-32]\n\
         lddw %r2, {}\nldxdw %r2, [%r2+0]\n\
         mov %r0, %r4\nmul %r0, 31\nadd %r0, %r5\nmul %r0, 31\nadd %r0, %r6\n\
         mul %r0, 31\nadd %r0, %r7\nmul %r0, 31\nadd %r0, %r8\nmul %r0, 31\n\
         add %r0, %r9\nmul %r0, 31\nadd %r0, %r1\nmul %r0, 31\nadd %r0, %r2\nexit",
        top - 32
    );
    let want = [
        0xfedc_ba98u64,
        0xffff_ffff_fedc_ba98,
        0xba98,
        0xffff_ffff_ffff_ba98,
        0x98,
        0xffff_ffff_ffff_ff98,
        (-5i64) as u64,
        (-5i64) as u64,
    ]
    .iter()
    .fold(0u64, |acc, &x| acc.wrapping_mul(31).wrapping_add(x));
    let out = check_every_budget(&src);
    assert_eq!(out.result, Ok(want));
}

/// A scan over the stack (the shape of the partition kernel's two scans): an offset from
/// r10 starting at `start` (plus a byte of memory, 0, so the start is not a constant to
/// the JIT) moves by `step`, and the word at r10 plus it is read each iteration until it
/// is the 7 stored at `r10 - 16`.
fn stack_scan(start: i64, step: i64) -> String {
    format!(
        "stdw [%r10-16], 7\nldxb %r3, [%r1+0]\nmov %r2, %r3\nadd %r2, {start}\nmov %r0, 0\n\
         loop:\nmov %r5, %r10\nadd %r5, %r2\nldxdw %r4, [%r5+0]\nadd %r0, 1\n\
         add %r2, {step}\njeq %r4, 0, loop\nexit"
    )
}

#[test]
fn stack_scans_are_guarded_at_the_stacks_bounds() {
    // The guard of a versioned loop through the stack compares the offset from the
    // stack's first byte with the last offset at which the word fits: a start at either
    // end, straddling either end (below the stack, the address is in region 0) or past
    // it; value, trap pc and address, fuel at every budget. (Fails with that offset one
    // byte too high: the unchecked copy reads past the stack's end.)
    let top = RegionIdx::STACK.vaddr(0) + csx_ebpf::limits::STACK_SIZE as u64;
    let found = [(-4096, 8, 511), (-24, 8, 2), (-8, -8, 2), (-16, -8, 1)];
    for (start, step, want) in found {
        let out = check_every_budget(&stack_scan(start, step));
        assert_eq!(out.result, Ok(want), "{start} {step}");
    }
    let traps = [
        (-8, 8, top),
        (-4, 8, top - 4),
        (-7, 8, top - 7),
        (-15, 8, top - 7),
        (-4100, 8, top - 4100),
        (-4097, 8, top - 4097),
        (-4104, 8, top - 4104),
        (-24, -8, top - 4096 - 8),
        (-4100, -8, top - 4100),
    ];
    for (start, step, addr) in traps {
        let out = check_every_budget(&stack_scan(start, step));
        let trap = trap_of(&out);
        assert_eq!(trap.pc, 7, "{start} {step}");
        assert!(
            matches!(trap.kind, TrapKind::OutOfBounds { addr: a, size: 8, write: false } if a == addr),
            "{start} {step}: {trap}"
        );
    }
}

#[test]
fn remainder_tests_against_zero_keep_their_truth() {
    // `x % c == 0` as clang's eBPF writes it (divide, multiply back, subtract, branch
    // on zero), which the JIT makes a multiply by an inverse and a compare (`divides`):
    // both widths, odd, even and large divisors, both senses of the branch, and `mod`
    // itself; the value is mixed from the input so it covers all 64 bits.
    let cases = [
        ("32", "7"),
        ("32", "12"),
        ("32", "1"),
        ("32", "0x80000000"),
        ("32", "-3"),
        ("", "7"),
        ("", "96"),
        ("", "0x7fffffff"),
        ("", "-1"),
    ];
    for (w, c) in cases {
        for branch in ["jeq", "jne"] {
            for rem in [
                format!("mov{w} %r9, %r3\ndiv{w} %r9, {c}\nmul{w} %r9, {c}\nsub{w} %r3, %r9"),
                format!("mod{w} %r3, {c}"),
            ] {
                let src = format!(
                    "mov %r0, 0\nmov %r6, 0\nlddw %r7, 0x9e3779b97f4a7c15\n\
                     loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\n\
                     mul %r3, %r7\nxor %r3, %r6\n\
                     {rem}\n{branch}{w} %r3, 0, hit\nja next\nhit:\nadd %r0, 1\n\
                     next:\nadd %r6, 1\njlt %r6, %r2, loop\nexit"
                );
                let out = check(&src);
                let want = (0..64u64)
                    .filter(|&i| {
                        let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i;
                        let zero = if w == "32" {
                            let c = parse_imm(c) as u32;
                            (x as u32).is_multiple_of(c)
                        } else {
                            let c = parse_imm(c) as i32 as i64 as u64;
                            x.is_multiple_of(c)
                        };
                        zero == (branch == "jeq")
                    })
                    .count() as u64;
                assert_eq!(out.result, Ok(want), "{src}");
            }
        }
    }
}

/// An immediate of the test sources above, as the assembler reads it.
fn parse_imm(s: &str) -> i64 {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let v = s.strip_prefix("0x").map_or_else(
        || s.parse().unwrap(),
        |h| i64::from_str_radix(h, 16).unwrap(),
    );
    if neg {
        -v
    } else {
        v
    }
}

#[test]
fn picked_charges_on_a_bit_match_at_every_budget() {
    // A u8 filter shaped as clang writes pred32's: the two tests become bits (`w7`,
    // `w8`, triangles the JIT converts), their `or` decides the loop-closing branch,
    // and both ways jump back to the latch from different slots (a backward triangle
    // whose charge is picked by a bit, paid as arithmetic on it in the unrolled group).
    let src = "mov %r0, 0\nmov %r2, 0\nmov %r6, 0\nja head\n\
               latch:\nadd %r0, %r5\nadd %r2, %r8\nadd %r6, 1\njge %r6, 64, done\n\
               head:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r5, [%r4+0]\n\
               mov32 %r7, 1\njgt32 %r5, 40, big\nmov32 %r7, 0\nbig:\n\
               mov32 %r8, %r5\nand32 %r8, 3\nmov32 %r3, 1\njeq32 %r8, 0, four\nmov32 %r3, 0\nfour:\n\
               mov32 %r8, %r7\nor32 %r8, %r3\n\
               jne32 %r8, 0, latch\nmov %r5, 0\nja latch\n\
               done:\nlsh %r0, 8\nor %r0, %r2\nexit";
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    let picked: Vec<u64> = (0..64u64)
        .filter(|&b| b > 40 || b.is_multiple_of(4))
        .collect();
    let sum: u64 = picked.iter().sum();
    assert_eq!(full.result, Ok((sum << 8) | picked.len() as u64));
    every_budget_runs_out_or_matches(&p, &full);
}

#[test]
fn stack_checks_leave_the_region_cache_alone() {
    // partition's scan: `do i++ while (a[i] < pivot)` over a stack array, the index
    // bounded only by the data, between two loads of region 2 through the region
    // cache. The scan's access takes the stack's constant check, whose miss goes to
    // the region table; it stops at byte 8 of the array (9 > pivot 5), and 6 is added.
    let src = "stdw [%r10-64], 0\nstdw [%r10-56], 9\nldxb %r7, [%r1+5]\nmov %r6, -1\n\
               loop:\nadd %r6, 1\nmov %r4, %r10\nadd %r4, -64\nadd %r4, %r6\n\
               ldxb %r5, [%r4+0]\njlt %r5, %r7, loop\nldxb %r0, [%r1+6]\nadd %r0, %r6\nexit";
    let p = program(src, vec![]);
    let seen = crate::translated::during(|| {
        assert_eq!(check_program(p.clone(), 100_000).result, Ok(14));
    });
    assert!(!seen.is_empty());
    for func in &seen {
        // A refill keeps the old region when the new one is shorter than 8 bytes:
        // `len < 8`, a compare with the constant 8 nothing else here makes.
        let refills = func
            .lines()
            .filter(|l| l.contains("= icmp.i64 ult ") && l.ends_with(" = 8"))
            .count();
        // The first load's miss refills the cache the last load reads; the stack
        // access's miss leaves it be, so the cache is not carried around the scan.
        assert_eq!(refills, 1, "{func}");
    }
}
