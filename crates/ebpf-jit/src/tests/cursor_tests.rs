//! Output cursors: a register a loop moves on by a constant only on some paths (a
//! filter's output pointer, moved for the rows it keeps) is a bounded induction
//! variable, and the stores through it go unchecked in the loop's unchecked copy, with
//! value, trap (pc, kind), fuel and memory still the interpreter's at every budget.

use super::loop_tests::sweep;
use super::*;

/// A filter over region 3's 16 bytes (`0x10..0x20`), `rows` rows an iteration (`n` a
/// multiple of it): row `u` keeps its byte when `byte & mask` is not 0, storing it at
/// the cursor `r8` (from region 2 + `start`) and at `r8 + apart`, then moving `r8` on
/// by `step` (1 or -1; `steps` gives each row's own, when they differ). r0 counts the
/// rows kept. Slot of row `u`'s first store: `5 + 10 * u + 4`.
fn filter(rows: u32, n: u32, mask: u8, start: i32, apart: i32, steps: &[i32]) -> String {
    let mut src =
        format!("mov %r0, 0\nmov %r6, %r3\nmov %r8, %r1\nadd %r8, {start}\nmov %r7, 0\nloop:\n");
    for u in 0..rows {
        let step = steps[u as usize % steps.len()];
        src += &format!(
            "ldxb %r4, [%r6+{u}]\nmov %r5, %r4\nand %r5, {mask}\njeq %r5, 0, skip{u}\n\
             stxb [%r8+0], %r4\nmov %r9, %r8\nadd %r9, {apart}\nstxb [%r9+0], %r4\n\
             add %r8, {step}\nadd %r0, 1\nskip{u}:\n"
        );
    }
    src += &format!("add %r6, {rows}\nadd %r7, {rows}\njlt %r7, {n}, loop\nexit");
    src
}

/// The slots of row `u`'s two stores in [`filter`].
fn stores(u: u32) -> [u32; 2] {
    [5 + 10 * u + 4, 5 + 10 * u + 7]
}

#[test]
fn stores_through_a_cursor_moved_for_kept_rows_go_unchecked() {
    // One row an iteration: the cursor moves 0 or 1 byte, so its stores are bounded
    // by a stride of 1 (the load, slot 5, moves exactly 1).
    let plan = unchecked_accesses(&filter(1, 16, 1, 0, 32, &[1]));
    assert_eq!(plan, vec![(5, vec![(5, 1), (9, 1), (12, 1)])]);
    // Two rows: the second row's stores are at the cursor plus 0 or 1 (a `Within`),
    // and the cursor moves up to 2 an iteration.
    let plan = unchecked_accesses(&filter(2, 16, 1, 0, 32, &[1]));
    let [a, b] = stores(0);
    let [c, d] = stores(1);
    assert_eq!(
        plan,
        vec![(5, vec![(5, 2), (a, 2), (b, 2), (15, 2), (c, 2), (d, 2)])]
    );
    // Moving down: strides of -2.
    let plan = unchecked_accesses(&filter(2, 16, 1, 63, -32, &[-1]));
    assert_eq!(
        plan,
        vec![(5, vec![(5, 2), (a, -2), (b, -2), (15, 2), (c, -2), (d, -2)])]
    );
    // A load through the cursor (a merge's input, moved on when its value is taken)
    // stays checked: its guard would bound the cursor moving every iteration.
    let src = filter(1, 16, 1, 0, 32, &[1]).replace("stxb [%r9+0], %r4", "ldxb %r2, [%r9+0]");
    assert_eq!(unchecked_accesses(&src), vec![(5, vec![(5, 1), (9, 1)])]);
    // Up in one row and down in the other: no bound of one sign, the stores stay
    // checked.
    let plan = unchecked_accesses(&filter(2, 16, 1, 32, 8, &[1, -1]));
    assert_eq!(plan, vec![(5, vec![(5, 2), (15, 2)])]);
}

#[test]
fn cursor_stores_match_the_interpreter_at_every_budget() {
    // mask 1 keeps the 8 odd bytes; 0xff keeps all 16; 0x40 keeps none.
    for rows in [1, 2, 4] {
        for (mask, kept) in [(1u8, 8u64), (0xff, 16), (0x40, 0)] {
            // The second copy's last byte at 63: in bounds.
            let apart = 64 - kept as i32;
            let out = sweep(&filter(rows, 16, mask, 0, apart, &[1]));
            assert_eq!(out.result, Ok(kept), "rows {rows} mask {mask}");
            let out = sweep(&filter(rows, 16, mask, 63, -(64 - kept as i32), &[-1]));
            assert_eq!(out.result, Ok(kept), "rows {rows} mask {mask} down");
        }
    }
}

#[test]
fn cursor_stores_trap_where_the_interpreter_does() {
    // The last kept row's second store is one byte past region 2 (up) or below it
    // (down): it traps there, at every budget, after the first copy's store ran; the
    // rows before it ran in the unchecked copy as far as its guard allowed.
    for rows in [1, 2, 4] {
        for (mask, kept) in [(1u8, 8i32), (0xff, 16)] {
            // Both masks keep byte 15, the last, in row 15 % rows.
            let last = 15 % rows;
            let out = sweep(&filter(rows, 16, mask, 0, 64 - kept + 1, &[1]));
            assert_eq!(trap_of(&out).pc, stores(last)[1], "rows {rows} mask {mask}");
            assert!(matches!(
                trap_of(&out).kind,
                TrapKind::OutOfBounds { write: true, .. }
            ));
            let out = sweep(&filter(rows, 16, mask, 63, -(64 - kept + 1), &[-1]));
            assert_eq!(trap_of(&out).pc, stores(last)[1], "rows {rows} mask {mask}");
        }
    }
    // The cursor starts in read-only region 3: the guard sends every iteration to the
    // checked loop, which traps at the first store (byte 1, the first odd one).
    let src = filter(2, 16, 1, 0, 1, &[1]).replace("mov %r8, %r1\n", "mov %r8, %r3\n");
    assert_eq!(trap_of(&sweep(&src)).pc, stores(1)[0]);
}
