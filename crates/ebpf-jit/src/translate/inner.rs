//! The unchecked copy of a versioned loop that holds inner loops (grep's scan, whose
//! pattern match is a loop of its own) leaves for the checked loop where an inner loop
//! is entered, and holds only the outer loop's own paths.
//!
//! Every access of such a loop outside its inner loops goes unchecked (see
//! `loops::unchecked_around_inner`); the inner loops run rarely (grep's match starts at
//! a byte equal to the pattern's first). With the inner loops inside the unchecked copy,
//! the copy's values were live across them: the allocator spilled the scan's own values
//! for the inner loop's sake and reloaded them on the hot path (grep reloaded 7 values
//! and stored 2 a byte), and every charge an iteration makes after an inner header kept
//! its check, as an inner loop may spend any fuel (`loops::VersionedLoop::
//! checked_charges`), so grep's scan paid two fuel compares a byte.
//!
//! So, when fuel bounds the loop's iterations (`LoopCopy::cost`): an edge of the
//! unchecked copy into an inner header from outside that inner loop goes to the checked
//! loop's block of that header, setting `pending`, so the checked loop's next edge into
//! the outer header runs the guard again (`reguard`) and the unchecked copy goes on from
//! there. The copy translates none of the inner loops' slots, and every charge left in
//! it subtracts without a check: an iteration in the copy runs a path of the loop's
//! acyclic body that enters no inner loop, whose charges are at most the iteration's
//! most (`loops::iteration_fuel`), which the latch or guard saw the slice pay for.
//!
//! The copy's blocks that lead only into an inner loop (`loops::VersionedLoop::
//! to_inner`) and the equal side of each equality test in the loop (`jne`'s fall-through,
//! `jeq`'s target: a byte equal to a newline or to the pattern's first) are cold, so the
//! copy's hot path is laid out straight: grep's scan took three taken branches a byte,
//! and its speed followed them, not its instruction count (`equal_sides`).
//!
//! Only loops whose inner loops all make a memory access leave there (see
//! `loops::VersionedLoop::inner`).
//!
//! Both copies translate the same slots with the same variables, so leaving for the
//! checked loop at any slot keeps value, trap and fuel; the checked loop makes every
//! check and charge the interpreter does.

use super::*;

/// The slots of loop `l` where an equality test in the loop goes when its operands are
/// equal (`jne`'s fall-through, `jeq`'s target), its header aside: taken as the rare side.
pub(super) fn equal_sides(insns: &[Insn], l: &loops::VersionedLoop) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for &q in &l.body {
        let insn = &insns[q as usize];
        if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
            continue;
        }
        let target = (i64::from(q) + i64::from(insn.off) + 1) as u32;
        match insn.opc & 0xf0 {
            JMP_JNE if target != q + 1 => out.insert(q + 1),
            JMP_JEQ if target != q + 1 => out.insert(target),
            _ => false,
        };
    }
    out.remove(&l.header);
    out
}

impl Translator<'_, '_> {
    /// Whether the unchecked copy of loop `i` leaves for the checked loop at its inner
    /// headers (see the module doc).
    pub(super) fn leaves_at_inner(&self, i: usize) -> bool {
        let l = &self.loops[i];
        !l.inner.is_empty() && l.cost.is_some() && l.pending.is_some()
    }

    /// Whether slot `pc` of loop `i` lies in one of its inner loops that the unchecked
    /// copy leaves at, so the copy does not translate it. A block of the copy open at
    /// such a slot (a fall-through into an inner header) ends with the jump there.
    pub(super) fn skipped_inner(&mut self, i: usize, pc: u32) -> bool {
        if !self.leaves_at_inner(i) || !self.loops[i].inner.values().any(|b| b.contains(&pc)) {
            return false;
        }
        if self.open && self.loops[i].unchecked.contains_key(&pc) {
            let to = self.target(pc);
            self.b.ins().jump(to, &[]);
            self.open = false;
        }
        true
    }

    /// Whether a charge at `slot` in the unchecked copy of loop `i` keeps its check.
    pub(super) fn charge_checked_in_copy(&self, i: usize, slot: u32) -> bool {
        self.loops[i].checked_charges.contains(&slot) && !self.leaves_at_inner(i)
    }

    /// In the unchecked copy of loop `i`: the block an edge from the slot being
    /// translated to `t` goes through when `t` is the header of a loop inside it, the
    /// edge enters that loop from outside it, and the copy leaves there.
    pub(super) fn inner_entry(&mut self, i: usize, t: u32) -> Option<Block> {
        if !self.leaves_at_inner(i) {
            return None;
        }
        let from = self.at;
        let l = &mut self.loops[i];
        let body = l.inner.get(&t)?;
        if body.contains(&from) {
            return None;
        }
        let b = &mut self.b;
        Some(*l.inner_entries.entry(t).or_insert_with(|| b.create_block()))
    }

    /// Fills loop `i`'s inner entry blocks: `pending` set, then the checked loop's block
    /// of the inner header.
    pub(super) fn inner_entry_blocks(&mut self, i: usize) {
        for (t, block) in std::mem::take(&mut self.loops[i].inner_entries) {
            self.enter(block);
            let pending = self.loops[i].pending.expect("kept when leaving at inner");
            let one = self.b.ins().iconst(types::I64, 1);
            self.b.def_var(pending, one);
            let to = self.blocks[&t];
            self.b.ins().jump(to, &[]);
        }
    }
}
