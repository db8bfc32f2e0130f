//! Value ranges (`crate::ranges`): indexes bounded by dominating compares (against a
//! constant or a bounded register), by a rotated loop's exit test, frame pointers carried
//! through spill slots, and the slots forgotten where memory may change. Each proof is
//! checked to hold where it should, and each shape is run at the edge of the frame (an
//! access one byte past r10 in the entry function, past the stack) at every fuel budget:
//! an unsound bound would leave that access unchecked, and the JIT would differ from
//! the interpreter, which traps.

use super::stack_tests::{assert_traps_at_the_top, every_budget};
use super::*;
use csx_ebpf::isa::Insn;

/// The slot of the first instruction of `src` that satisfies `is`, and whether the entry
/// function's value ranges prove an access of `size` bytes through `reg` there inside
/// the frame.
fn proven_at(src: &str, is: impl Fn(&Insn) -> bool, reg: u8, size: i64) -> (u32, bool) {
    let p = program(src, vec![]);
    let pc = p.insns().iter().position(is).expect("the access") as u32;
    let plan = crate::analysis::plan_program(p.insns(), p.entry()).unwrap();
    let proven = plan.functions[0].ranges.in_frame(pc, reg, 0, size, 512);
    (pc, proven)
}

/// `stxb [%r5+0], ...`: the access the programs below make at the edge.
fn is_edge_store(i: &Insn) -> bool {
    i.opc == 0x73 && i.dst == 5
}

/// For i in 0..12, byte i of region 2 (that is, i) in r4; `guard` (which may use
/// `{K}`, `{K1}` and `{K8}`, replaced by `k`, `k - 1` and `k - 8`) skips to `skip` unless the index is in range; the store of
/// r3 at r10 - 8 + r4 sits in a block the guard dominates. r0 sums the word at r10 - 8.
fn guarded_store(guard: &str, k: u32) -> String {
    let guard = guard
        .replace("{K1}", &(k - 1).to_string())
        .replace("{K8}", &(k - 8).to_string())
        .replace("{K}", &k.to_string());
    format!(
        "mov %r0, 0\nmov %r3, 0\nmov %r2, 12\nstdw [%r10-8], 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\n{guard}\n\
         mov %r5, %r10\nadd %r5, -8\nadd %r5, %r4\nstxb [%r5+0], %r3\n\
         skip:\nldxdw %r6, [%r10-8]\nadd %r0, %r6\nadd %r3, 1\njgt %r2, %r3, loop\nexit"
    )
}

/// The guards, each letting through indexes below `{K}` (8: the last byte is r10 - 1).
const GUARDS: &[&str] = &[
    "jge %r4, {K}, skip",
    "jlt %r4, {K}, body\nja skip\nbody:",
    "jge32 %r4, {K}, skip",
    "jgt %r4, {K1}, skip",
    "jle %r4, {K1}, body\nja skip\nbody:",
    "jne %r4, {K1}, next\nja body\nnext:\njle %r4, {K1}, body\nja skip\nbody:",
    // Relational bounds: the index below r7 (or at most r7), at most `K` (or `K - 1`):
    // byte 63 - i of region 2 (55 when the index is 8) masked to 0..=7, plus `K - 8` and
    // 1 (or `K - 8`); 8 is below (or equal to) it when `K` is 9.
    "mov %r7, %r1\nadd %r7, 63\nsub %r7, %r3\nldxb %r7, [%r7+0]\nand %r7, 7\n\
     add %r7, {K8}\nadd %r7, 1\njge %r4, %r7, skip",
    "mov %r7, %r1\nadd %r7, 63\nsub %r7, %r3\nldxb %r7, [%r7+0]\nand %r7, 7\n\
     add %r7, {K8}\njgt %r4, %r7, skip",
];

#[test]
fn compares_bound_the_index_they_dominate() {
    for guard in GUARDS {
        let legal = guarded_store(guard, 8);
        let (pc, proven) = proven_at(&legal, is_edge_store, 5, 1);
        assert!(proven, "{guard}: the store needs no check");
        let out = every_budget(&legal);
        assert!(out.result.is_ok(), "{guard}: {out:?}");
        // One more lets index 8 through: r10 itself, one byte past the stack.
        let edge = guarded_store(guard, 9);
        assert_traps_at_the_top(&edge, pc);
        let (_, proven) = proven_at(&edge, is_edge_store, 5, 1);
        assert!(!proven, "{guard}: the store at the edge is checked");
    }
}

/// clang's rotated loop: the index stored at r10 - 64 + i, then `i += 1`, leaving at
/// `i == n`. With `n` 64 the last store is r10 - 1.
fn rotated_loop(n: u32) -> String {
    format!(
        "mov %r3, 0\nstdw [%r10-8], 0\n\
         loop:\nmov %r5, %r10\nadd %r5, -64\nadd %r5, %r3\nstxb [%r5+0], %r3\n\
         add %r3, 1\njne %r3, {n}, loop\nldxdw %r0, [%r10-8]\nexit"
    )
}

#[test]
fn a_rotated_loop_exit_bounds_its_counter() {
    let (pc, proven) = proven_at(&rotated_loop(64), is_edge_store, 5, 1);
    assert!(proven, "the store needs no check");
    let out = every_budget(&rotated_loop(64));
    assert_eq!(
        out.result,
        Ok(u64::from_le_bytes([56, 57, 58, 59, 60, 61, 62, 63]))
    );
    assert_traps_at_the_top(&rotated_loop(65), pc);
    let (_, proven) = proven_at(&rotated_loop(65), is_edge_store, 5, 1);
    assert!(!proven, "the store at the edge is checked");
}

/// A frame pointer r10 - `base` made before the loop, spilled to r10 - 16 and reloaded
/// in every iteration (a block parameter and a spill slot: per-value facts do not
/// reach it), plus byte i of region 2 masked to 0..=7.
fn spilled_base(base: u32) -> String {
    format!(
        "mov %r3, 0\nmov %r2, 12\nstdw [%r10-8], 0\nmov %r6, %r10\nadd %r6, -{base}\n\
         stxdw [%r10-16], %r6\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\nand %r4, 7\n\
         ldxdw %r5, [%r10-16]\nadd %r5, %r4\nstxb [%r5+0], %r3\nadd %r3, 1\n\
         jgt %r2, %r3, loop\nldxdw %r0, [%r10-8]\nexit"
    )
}

#[test]
fn frame_pointers_carried_through_spill_slots() {
    let (pc, proven) = proven_at(&spilled_base(8), is_edge_store, 5, 1);
    assert!(proven, "the store needs no check");
    let out = every_budget(&spilled_base(8));
    assert_eq!(
        out.result,
        Ok(u64::from_le_bytes([8, 9, 10, 11, 4, 5, 6, 7]))
    );
    assert_traps_at_the_top(&spilled_base(7), pc);
    let (_, proven) = proven_at(&spilled_base(7), is_edge_store, 5, 1);
    assert!(!proven, "the store at the edge is checked");
}

#[test]
fn spill_slots_are_forgotten_where_memory_may_change() {
    // A frame pointer spilled to r10 - 16, then the slot overwritten by a helper (2
    // fills it with 0xab) or by a store through an address the pass cannot place (r10
    // computed as r1 - r1 + r10): the reloaded value is no frame pointer, and the store
    // through it traps at the interpreter's address.
    let spill = "mov %r6, %r10\nadd %r6, -8\nstxdw [%r10-16], %r6\n";
    let after = "ldxdw %r5, [%r10-16]\nstxb [%r5+0], %r0\nmov %r0, 0\nexit";
    let by_helper = format!("{spill}mov %r1, %r10\nadd %r1, -16\nmov %r2, 8\ncall 2\n{after}");
    let by_store =
        format!("{spill}mov %r7, %r1\nsub %r7, %r1\nadd %r7, %r10\nstdw [%r7-16], 4096\n{after}");
    for (src, addr) in [(by_helper, 0xabab_abab_abab_abab), (by_store, 4096)] {
        let (pc, proven) = proven_at(&src, is_edge_store, 5, 1);
        assert!(!proven, "{src}");
        let out = every_budget(&src);
        assert_eq!(trap_of(&out).pc, pc, "{src}");
        assert_eq!(
            trap_of(&out).kind,
            TrapKind::OutOfBounds {
                addr,
                size: 1,
                write: true
            },
            "{src}"
        );
    }
}
