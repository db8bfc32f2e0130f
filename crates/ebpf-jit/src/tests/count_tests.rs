//! Executed-block counts (`csx_ebpf::count`) of the JIT's counting variants (Cranelift's
//! and the quick tier's) against the interpreter's: every hand-written program of `tests` goes through
//! [`assert_counts_agree`]; the tests here pin exact counts on the shapes the counting
//! variant treats specially (if-converted arms, traps mid-block and at back-edges, calls).

use csx_ebpf::count::{ExecCounts, InsnClass, WorkCounts};

use super::*;

/// Runs both engines again with counters; asserts the counted runs equal the uncounted
/// `want` and the two engines' counts are equal, block by block. Returns the counts.
pub(super) fn assert_counts_agree(
    interp: &Interpreter,
    jit: &dyn Engine,
    fuel: u64,
    want: (&RunOutcome, &Vec<u8>),
) -> Vec<u64> {
    let blocks = interp.program().blocks();
    let by_interp = ExecCounts::new(blocks);
    let by_jit = ExecCounts::new(blocks);
    let (out, mem) = run_on_with(interp, fuel, Some(&by_interp));
    assert_eq!((&out, &mem), want, "counted interpreter run, fuel {fuel}");
    let (out, mem) = run_on_with(jit, fuel, Some(&by_jit));
    assert_eq!((&out, &mem), want, "counted jit run, fuel {fuel}");
    assert_eq!(
        by_jit.values(),
        by_interp.values(),
        "block counts, jit vs interpreter, fuel {fuel} (leaders {:?})",
        blocks.leaders()
    );
    by_interp.values()
}

/// The work `src` executes (both engines agreeing), with its outcome.
fn work_of(src: &str, fuel: u64) -> (RunOutcome, WorkCounts) {
    let p = program(src, vec![]);
    let interp = Interpreter::new(p.clone());
    let jit = JitProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
    let (want, mem) = run_on(&interp, fuel);
    let counts = assert_counts_agree(&interp, &jit, fuel, (&want, &mem));
    #[cfg(target_arch = "x86_64")]
    {
        let quick = crate::QuickProgram::compile(p.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_counts_agree(&interp, &quick, fuel, (&want, &mem));
    }
    (want, p.blocks().work(&counts))
}

#[test]
fn a_loop_counts_each_pass() {
    let (out, w) = work_of(
        "mov %r0, 0\nmov %r6, 10\nloop:\nadd %r0, %r6\nsub %r6, 1\njne %r6, 0, loop\nexit",
        1000,
    );
    assert_eq!(out.result, Ok(55));
    assert_eq!(w.get(InsnClass::Alu64), 2 + 2 * 10);
    assert_eq!(w.get(InsnClass::Jump), 10 + 1);
    assert_eq!(w.total(), 33);
}

#[test]
fn if_converted_arms_count_when_they_run() {
    // Over the 64 input bytes 0..63: a triangle (x < 40: double it), a diamond
    // (x odd: +1, else +2) and a loop closed by a backward triangle.
    let src = "mov %r0, 0\nmov %r6, 0\n\
               loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\n\
               jge %r3, 40, big\nlsh %r3, 1\nbig:\n\
               jset %r3, 1, odd\nadd %r0, 2\nja joined\nodd:\nadd %r0, 1\njoined:\n\
               add %r6, 1\njlt %r6, %r2, loop\nexit";
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(
        plan.functions[0].ifconv.len(),
        2,
        "{:?}",
        plan.functions[0].ifconv
    );
    let (out, w) = work_of(src, 100_000);
    // Doubled values are even: 0..39 doubled (40 even), 40..63 as they are (12 odd).
    assert_eq!(out.result, Ok(52 * 2 + 12));
    // Per pass: mov, add, load, jge; the triangle's arm (lsh) for 40 of them; jset; the
    // even arm (add, ja) for 52 or the odd arm (add) for 12; add, jlt. Then exit.
    assert_eq!(w.get(InsnClass::Load), 64);
    assert_eq!(w.get(InsnClass::Alu64), 2 + 64 * 4 + 40);
    assert_eq!(w.get(InsnClass::Jump), 64 * 3 + 52 + 1);
}

#[test]
fn backward_triangle_arms_count_when_they_run() {
    // `if r6 < 32 goto loop; r0 += 100; goto loop` until r6 reaches 40.
    let src = "mov %r0, 0\nmov %r6, 0\n\
               loop:\nadd %r6, 1\njge %r6, 40, done\n\
               jlt %r6, 32, loop\nadd %r0, 100\nja loop\n\
               done:\nexit";
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    assert!(
        plan.functions[0]
            .ifconv
            .values()
            .any(|s| matches!(s, IfConv::BackTriangle { .. })),
        "{:?}",
        plan.functions[0].ifconv
    );
    let (out, w) = work_of(src, 100_000);
    assert_eq!(out.result, Ok(800));
    // 40 passes through the head, 39 past the exit test, 8 through the arm (r6 32..39).
    assert_eq!(w.get(InsnClass::Alu64), 2 + 40 + 8);
    assert_eq!(w.get(InsnClass::Jump), 40 + 39 + 8 + 1);
    // Out of fuel at the back-edge: every engine stops at the same block.
    for fuel in [0, 5, 37, 200] {
        work_of(src, fuel);
    }
}

#[test]
fn a_trap_mid_block_counts_the_whole_block() {
    // The load at pc 1 is out of bounds: its block (4 instructions) counts whole.
    let (out, w) = work_of("mov %r0, 1\nldxdw %r0, [%r1+100]\nadd %r0, 1\nexit", 1000);
    assert!(matches!(
        out.result,
        Err(Trap {
            pc: 1,
            kind: TrapKind::OutOfBounds { .. }
        })
    ));
    assert_eq!(w.total(), 4);
    assert_eq!((w.get(InsnClass::Alu64), w.get(InsnClass::Load)), (2, 1));
    // A helper's abort stops the run at the call: the block after it is not entered.
    let (_, w) = work_of("mov %r0, 1\ncall 3\nadd %r0, 1\nexit", 1000);
    assert_eq!(w.total(), 2);
}

#[test]
fn calls_count_the_callee_and_the_return() {
    let src = "mov %r6, 0\nmov %r0, 0\n\
               loop:\ncall local f\nadd %r6, 1\njlt %r6, 5, loop\n\
               mov %r7, %r0\ncall 1\nmov %r0, %r7\nexit\n\
               f:\nadd %r0, 3\nexit";
    let (out, w) = work_of(src, 1000);
    assert_eq!(out.result, Ok(15));
    assert_eq!(w.get(InsnClass::Call), 5 + 1);
    assert_eq!(w.get(InsnClass::Alu64), 2 + 5 + 5 + 2);
    assert_eq!(w.get(InsnClass::Jump), 5 + 5 + 1);
    // Too deep a recursion traps at a call; both engines have counted the same.
    work_of("call local f\nexit\nf:\ncall local f\nexit", 1000);
}

/// A loop whose blocks share counters (a triangle's join and the block after a helper
/// call count with the loop's head), with loads that trap in the head or in a later
/// member of that class at some pass, and fuel running out anywhere: the derived counts
/// equal the interpreter's block by block.
#[test]
fn a_trap_inside_a_class_counts_like_the_interpreter() {
    let src = |limit: u32, off: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\n\
             loop:\nmov %r4, %r6\nlsh %r4, 3\nadd %r4, %r1\nldxb %r3, [%r4+0]\n\
             jge %r3, 24, big\nadd %r0, 1\n\
             big:\nmov %r7, %r0\nmov %r8, %r4\nmov %r1, %r6\ncall 1\n\
             mov %r1, %r8\nsub %r1, %r4\nadd %r1, %r8\nldxb %r5, [%r8+{off}]\nadd %r0, %r5\n\
             jset %r5, 1, odd\nadd %r0, 2\nja joined\nodd:\nadd %r0, 3\njoined:\n\
             mov %r1, %r8\nsub %r1, %r6\nmov %r4, %r6\nlsh %r4, 3\nsub %r1, %r4\n\
             add %r6, 1\njlt %r6, {limit}, loop\nexit"
        )
    };
    // The classes: the head's class takes the triangle's join, the block after the
    // helper call and the diamond's join (the arms and the exit count alone).
    let (classes, leaders, shape) = classes_of(&src(5, 0));
    assert_eq!(leaders, [0, 2, 7, 8, 12, 18, 20, 21, 28]);
    // Entry 0; loop 2; arm 7; join 8; after the call 12; even arm 18; odd arm 20;
    // joined 21; exit 28.
    assert_eq!(
        shape,
        vec![
            vec![0],
            vec![2, 8, 12, 21],
            vec![7],
            vec![18],
            vec![20],
            vec![28]
        ]
    );
    let head = &classes[1].members;
    assert_eq!(head[1].before, vec![(2, 8)], "the head and the arm");
    assert_eq!(head[2].before, vec![(2, 12)], "and the join's block");
    assert_eq!(
        head[3].before,
        vec![(2, 21)],
        "every slot of the pass before it"
    );
    for (limit, off) in [(5, 0), (12, 0), (12, 20), (12, 60), (7, 13)] {
        let src = src(limit, off);
        for fuel in [0, 1, 2, 3, 7, 20, 33, 100_000] {
            work_of(&src, fuel);
        }
    }
    // A helper's abort inside the class: the blocks after the call lose the last pass.
    let abort = "mov %r0, 0\nmov %r6, 0\n\
                 loop:\nadd %r6, 1\njeq %r6, 4, stop\nmov %r1, %r6\ncall 1\nadd %r0, %r1\n\
                 jlt %r6, 10, loop\nexit\nstop:\ncall 3\nexit";
    let (out, _) = work_of(abort, 100_000);
    assert!(out.result.is_err());
}

/// The counter classes of `src`'s entry function, its blocks' leaders, and each class's
/// members by leader.
fn classes_of(src: &str) -> (Vec<crate::count::Class>, Vec<u32>, Vec<Vec<u32>>) {
    let p = program(src, vec![]);
    let plan = analysis::plan_program(p.insns(), 0).unwrap();
    let classes = crate::count::plan(p.insns(), p.blocks(), &plan.functions[0]);
    let shape = classes
        .iter()
        .map(|c| c.members.iter().map(|m| m.leader).collect())
        .collect();
    (classes, p.blocks().leaders().to_vec(), shape)
}

/// A row of tests in a loop, each able to skip to the next row (the scan program's
/// shape): the skip block joins the loop head's class as a region's join, and a load
/// trapping in an arm at some pass, or fuel running out anywhere, still leaves every
/// block's count equal to the interpreter's.
#[test]
fn a_region_with_several_exits_shares_its_head_counter() {
    let src = |limit: u32, off: u32| {
        format!(
            "mov %r0, 0\nmov %r6, 0\n\
             loop:\nmov %r4, %r1\nadd %r4, %r6\nldxb %r3, [%r4+0]\njgt %r3, 40, skip\n\
             ldxb %r5, [%r4+{off}]\njset %r5, 1, skip\n\
             add %r0, %r5\njgt %r5, 30, skip\n\
             add %r0, 1\nstxb [%r4+0], %r0\n\
             skip:\nadd %r6, 1\njlt %r6, {limit}, loop\nexit"
        )
    };
    let (classes, leaders, shape) = classes_of(&src(5, 0));
    assert_eq!(leaders, [0, 2, 6, 8, 10, 12, 14]);
    // Entry 0; row head 2 with its join 12; the arms 6, 8, 10 alone; exit 14.
    assert_eq!(
        shape,
        vec![vec![0], vec![2, 12], vec![6], vec![8], vec![10], vec![14]]
    );
    assert_eq!(
        classes[1].members[1].before,
        vec![(2, 12)],
        "the head and every arm"
    );
    for (limit, off) in [(5, 0), (20, 0), (20, 50), (40, 30), (64, 1)] {
        let src = src(limit, off);
        for fuel in [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 100_000] {
            work_of(&src, fuel);
        }
    }
}
