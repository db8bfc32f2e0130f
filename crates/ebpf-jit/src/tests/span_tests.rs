//! Span groups (`translate/spans`): accesses through one base at constant offsets in a
//! straight run, checked once as a span (loads against the read cache; loads and stores
//! through a stack base against the stack), with the run's ordinary copy taken when the
//! span is not in bounds. An access of the group out of bounds traps at its own pc and
//! address, with the stores and fuel before it the interpreter's, at every budget,
//! whichever access of the group it is.

use super::stack_tests::{every_budget, stack_top};
use super::*;

/// A loop over `k < 64` whose base `r4 = r1 + (13 * k) % 57` (every index 0..56, an
/// order no loop analysis follows) feeds four loads, a byte at `first`, a byte at 2, a
/// half word at `mid` and a byte at `last`, with a store to the frame and one to region
/// 2 between them; r0 sums the loads.
fn group_program(first: i16, mid: i16, last: i16) -> String {
    let at = |off: i16| {
        if off < 0 {
            format!("-{}", -off)
        } else {
            format!("+{off}")
        }
    };
    format!(
        "mov %r0, 0\nmov %r3, 0\nloop:\nmov %r4, %r3\nmul %r4, 13\nmod %r4, 57\nadd %r4, %r1\n\
         ldxb %r5, [%r4{}]\nadd %r0, %r5\nstxdw [%r10-8], %r0\nldxb %r5, [%r4+2]\n\
         stxb [%r1+0], %r5\nadd %r0, %r5\nldxh %r5, [%r4{}]\nadd %r0, %r5\n\
         ldxb %r5, [%r4{}]\nadd %r0, %r5\nadd %r3, 1\njgt %r2, %r3, loop\nexit",
        at(first),
        at(mid),
        at(last)
    )
}

/// The slots of [`group_program`]'s four loads.
const LOADS: [u32; 4] = [6, 9, 12, 14];

#[test]
fn the_loads_form_one_group() {
    let p = program(&group_program(0, 4, 7), vec![]);
    let plan = crate::analysis::plan_program(p.insns(), 0).unwrap();
    let f = &plan.functions[0];
    let groups =
        crate::translate::spans::span_groups(p.insns(), &f.pcs, &f.leaders, &f.stack_bases);
    let g = &groups[&LOADS[0]];
    assert_eq!(g.members, BTreeSet::from(LOADS));
    assert_eq!(
        (g.reg, g.stack, g.last, g.min_off, g.max_end),
        (4, false, LOADS[3], 0, 8)
    );
    assert_eq!(groups.len(), 1);
}

#[test]
fn a_group_in_bounds_runs_at_every_budget() {
    // Index 56 reaches byte 63 (the half word at 60, the byte at 63): every load legal.
    let out = every_budget(&group_program(0, 4, 7));
    assert!(out.result.is_ok(), "{out:?}");
}

#[test]
fn each_load_of_a_group_traps_at_its_own_pc() {
    let region = RegionIdx(2).vaddr(0);
    let cases = [
        // The first load, one byte below the region (index 0, the first iteration).
        (group_program(-1, 4, 7), LOADS[0], region.wrapping_sub(1), 1),
        // The half word at index 56 + 7 = 63 ends one byte past the region.
        (group_program(0, 7, 7), LOADS[2], region + 63, 2),
        // The last load, at index 56 + 8 = 64.
        (group_program(0, 4, 8), LOADS[3], region + 64, 1),
    ];
    for (src, pc, addr, size) in cases {
        let out = every_budget(&src);
        assert_eq!(trap_of(&out).pc, pc, "{src}");
        assert_eq!(
            trap_of(&out).kind,
            TrapKind::OutOfBounds {
                addr,
                size,
                write: false
            },
            "{src}"
        );
    }
}

/// A loop over `k < 11` whose base `r5 = r10 - 16 + p[k]` (region 2's byte `k`, so
/// `k`, a value no range analysis bounds inside the frame) feeds a byte store at
/// `offs[0]`, a byte load at `offs[1]`, a byte store at `offs[2]`, a half-word load at
/// `offs[3]` and a byte load at `offs[4]`, with a frame store between them; r0 sums the
/// loads.
fn stack_group_program(offs: [i16; 5]) -> String {
    let [a, b, c, d, e] = offs;
    format!(
        "mov %r0, 0\nmov %r3, 0\nmov %r2, 11\nloop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\n\
         mov %r5, %r10\nadd %r5, -16\nadd %r5, %r4\nstxb [%r5+{a}], %r3\nldxb %r6, [%r5+{b}]\n\
         add %r0, %r6\nstxb [%r5+{c}], %r3\nstxdw [%r10-32], %r0\nldxh %r6, [%r5+{d}]\n\
         add %r0, %r6\nldxb %r6, [%r5+{e}]\nadd %r0, %r6\nadd %r3, 1\njgt %r2, %r3, loop\nexit"
    )
}

/// The slots of [`stack_group_program`]'s five accesses.
const STACK_ACCESSES: [u32; 5] = [9, 10, 12, 14, 16];

#[test]
fn stack_loads_and_stores_form_one_group() {
    let p = program(&stack_group_program([0, 1, 2, 3, 5]), vec![]);
    let plan = crate::analysis::plan_program(p.insns(), 0).unwrap();
    let f = &plan.functions[0];
    let groups =
        crate::translate::spans::span_groups(p.insns(), &f.pcs, &f.leaders, &f.stack_bases);
    let g = &groups[&STACK_ACCESSES[0]];
    assert_eq!(g.members, BTreeSet::from(STACK_ACCESSES));
    assert_eq!((g.reg, g.stack, g.min_off, g.max_end), (5, true, 0, 6));
    assert_eq!(groups.len(), 1);
}

#[test]
fn each_access_of_a_stack_group_traps_at_its_own_pc() {
    // Index 10 puts offset 5 at r10 - 1: every access legal.
    assert!(every_budget(&stack_group_program([0, 1, 2, 3, 5]))
        .result
        .is_ok());
    let top = stack_top();
    let cases = [
        // The first store, at r10 itself (index 0, the first iteration).
        ([16, 1, 2, 3, 5], STACK_ACCESSES[0], top, 1, true),
        // The half word at index 10 + 5 covers r10 - 1 and r10.
        ([0, 1, 2, 5, 5], STACK_ACCESSES[3], top - 1, 2, false),
        // The last load, at index 10 + 6.
        ([0, 1, 2, 3, 6], STACK_ACCESSES[4], top, 1, false),
    ];
    for (offs, pc, addr, size, write) in cases {
        let src = stack_group_program(offs);
        let out = every_budget(&src);
        assert_eq!(trap_of(&out).pc, pc, "{src}");
        assert_eq!(
            trap_of(&out).kind,
            TrapKind::OutOfBounds { addr, size, write },
            "{src}"
        );
    }
}
