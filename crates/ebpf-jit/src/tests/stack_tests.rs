//! The stack as a region known when the program is compiled: an access through an
//! address computed from r10 whose index the JIT cannot bound is checked against the
//! stack's constant bounds for its exact size, so bytes up to r10 itself pass and the
//! first byte past the top of the stack traps, at the interpreter's pc, address and fuel.

use super::*;

/// `lddw`/`stxdw` the bytes `1, 2, ..., 8` at r10 - 8, then, for each byte `b` of
/// region 2 (`0, 1, ...`, r2 of them), `index` turns `b` (in r4) into an index added
/// to r10 - 8 and `access` (through r5) uses it; r0 sums the loads.
fn top_of_frame_program(index: &str, access: &str) -> String {
    format!(
        "lddw %r6, 0x0807060504030201\nstxdw [%r10-8], %r6\nmov %r0, 0\nmov %r3, 0\n\
         loop:\nmov %r4, %r1\nadd %r4, %r3\nldxb %r4, [%r4+0]\n{index}\n\
         mov %r5, %r10\nadd %r5, -8\nadd %r5, %r4\n{access}\nadd %r3, 1\n\
         jgt %r2, %r3, loop\nexit"
    )
}

/// The slot of the access in [`top_of_frame_program`] with a one-instruction `index`.
const ACCESS_PC: u32 = 12;

/// The virtual address one past the stack's last byte (the entry's r10).
pub(super) fn stack_top() -> u64 {
    RegionIdx::STACK.vaddr(csx_ebpf::limits::STACK_SIZE as u32)
}

/// Every budget; returns the full run's outcome.
pub(super) fn every_budget(src: &str) -> RunOutcome {
    let p = program(src, vec![]);
    let full = check_program(p.clone(), u64::MAX);
    every_budget_runs_out_or_matches(&p, &full);
    full
}

/// Runs `src` at every budget and asserts it traps at `pc` writing one byte at the
/// stack's top, as the interpreter does.
pub(super) fn assert_traps_at_the_top(src: &str, pc: u32) {
    let out = every_budget(src);
    assert_eq!(trap_of(&out).pc, pc, "{src}");
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: stack_top(),
            size: 1,
            write: true
        },
        "{src}"
    );
}

#[test]
fn loads_at_the_top_of_the_stack_through_a_data_index() {
    let bytes: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
    for (load, size) in [("ldxb", 1u64), ("ldxh", 2), ("ldxw", 4), ("ldxdw", 8)] {
        // `b % m` reaches 8 - size, the last index whose access ends at r10, then
        // 8 - size + 1, one byte past the stack.
        let m = 8 - size + 2;
        let access = format!("{load} %r5, [%r5+0]\nadd %r0, %r5");
        // A bounded index (the remainder), and one read back from a spill slot, whose
        // bound the JIT does not know.
        for index in [
            format!("mod %r4, {m}"),
            format!("mod %r4, {m}\nstxdw [%r10-16], %r4\nldxdw %r4, [%r10-16]"),
        ] {
            let src = top_of_frame_program(&index, &access);
            let pc = ACCESS_PC + index.lines().count() as u32 - 1;
            // Bytes 0 .. m - 1 of region 2: every index in range, read at every budget.
            let legal = src.replacen("mov %r0, 0", &format!("mov %r0, 0\nmov %r2, {}", m - 1), 1);
            let want: u64 = (0..m - 1)
                .map(|k| (0..size).fold(0, |v, j| v | bytes[(k + j) as usize] << (8 * j)))
                .sum();
            assert_eq!(every_budget(&legal).result, Ok(want), "{load} {index}");
            // All 64 bytes: byte m - 1 gives the index one past the top.
            let out = every_budget(&src);
            assert_eq!(trap_of(&out).pc, pc, "{load} {index}");
            assert_eq!(
                trap_of(&out).kind,
                TrapKind::OutOfBounds {
                    addr: stack_top() - 8 + (m - 1),
                    size: size as u32,
                    write: false
                },
                "{load} {index}"
            );
        }
    }
}

#[test]
fn stores_at_the_top_of_the_stack_through_a_data_index() {
    // `stxb` at r10 - 8 + (b % 9): r10 - 1 is the last byte written, r10 traps.
    let access = "stxb [%r5+0], %r3\nldxdw %r5, [%r10-8]\nadd %r0, %r5";
    let src = top_of_frame_program("mod %r4, 9", access);
    let legal = src.replacen("mov %r0, 0", "mov %r0, 0\nmov %r2, 8", 1);
    let sums = |n: u64| -> u64 {
        let mut stack = 0x0807_0605_0403_0201u64;
        (0..n)
            .map(|i| {
                stack = stack & !(0xff << (8 * i)) | i << (8 * i);
                stack
            })
            .fold(0u64, u64::wrapping_add)
    };
    assert_eq!(every_budget(&legal).result, Ok(sums(8)));
    assert_traps_at_the_top(&src, ACCESS_PC);
}

#[test]
fn speculative_loads_at_the_top_of_the_stack() {
    // The load sits in a speculative region (a branch that never goes over it): its
    // check raises the region's fault flag only past r10, where the ordinary
    // translation then traps at the load's pc.
    let access = "jeq %r3, 1000, skip\nldxb %r5, [%r5+0]\nadd %r0, %r5\nskip:";
    let src = top_of_frame_program("mod %r4, 9", access);
    let p = program(&src, vec![]);
    let plan = crate::analysis::plan_program(p.insns(), 0).unwrap();
    assert_eq!(plan.functions[0].regions.len(), 1, "the load is speculated");
    let legal = src.replacen("mov %r0, 0", "mov %r0, 0\nmov %r2, 8", 1);
    assert_eq!(every_budget(&legal).result, Ok((1..=8).sum()));
    let out = every_budget(&src);
    assert_eq!(trap_of(&out).pc, ACCESS_PC + 1);
    assert_eq!(
        trap_of(&out).kind,
        TrapKind::OutOfBounds {
            addr: stack_top(),
            size: 1,
            write: false
        }
    );
}
