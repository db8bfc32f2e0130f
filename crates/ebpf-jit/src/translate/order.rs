//! The order Cranelift computes an unrolled group's values in.
//!
//! Cranelift's mid-end computes a pure value where it is first used, its operands depth
//! first. A group of a loop that writes memory, with a selected charge (a closing
//! branch converted with its arm, see [`IfConv::BackTriangle`]), keeps its loads and
//! stores in order, but each copy's charge and its add to a running sum are pure and
//! first used at the group's end, so Cranelift computed all of them there. Held-out
//! ringmax (`if (p[i] > *slot) *slot = p[i]; sum += *slot;` on a
//! ring in the stack) kept every copy's compared values and slot value live across the
//! group of 16: three spills a copy, reloaded at the end. Such a group *anchors* each
//! copy after the first: at its start it stores the fuel slice, and each register the
//! iteration carries (reads as the last one left it and changes by more than a
//! constant), to a frame slot nothing reads. A store is computed where it stands, so
//! each copy's charge and sums are made in the copy before. Executed instructions:
//! ringmax 32% fewer, editdist 7%, tokens 9% more (the four loops anchored); anchoring
//! every group of a loop that writes memory made 21 of 95 functions worse (prefix32 48%,
//! hist 29%), and a store of the slice after each selected charge alone did less for
//! ringmax (17%). (Ringmax's maximum has since stayed a branch, `extrema`; the anchors
//! still take editdist 5% and msort 8% less time, measured without them.)
//!
//! Exits of such groups once took the fuel slice first, so that a charge selected by a
//! compare of a running register (stats64's `x < min`) was computed with the minimum it
//! compares; since running extrema stay branches, only loops where that made things
//! slower kept it (bucket16 6-8%, words 4-17%), and it went.

use super::*;

impl Translator<'_, '_> {
    /// At the start of a copy of loop `i`'s groups after the first, when its copies are
    /// anchored (see the module doc): the fuel slice and the carried registers stored to
    /// a frame slot nothing reads.
    pub(super) fn anchor_copy(&mut self, i: usize) {
        let Some(carried) = self.loops[i].group.as_ref().and_then(|g| g.anchored()) else {
            return;
        };
        let mut values = vec![self.b.use_var(self.fuel_left)];
        for &r in carried {
            values.push(self.b.use_var(self.regs[usize::from(r)]));
        }
        // A slot of the copy's own, a word each: Cranelift drops a store that another
        // to the same place follows (the slice's, when it shared the registers' word).
        let size = 8 * values.len() as u32;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            size,
            3,
        ));
        for (k, v) in values.into_iter().enumerate() {
            self.b.ins().stack_store(types::I64, v, slot, 8 * k as i32);
        }
    }
}
