//! The order Cranelift computes an unrolled group's values in.
//!
//! Cranelift's mid-end computes a pure value where it is first used, its operands depth
//! first, and a branch's block arguments in the order of the target's parameters; the
//! SSA builder orders those as it meets the variables: the registers the code after the
//! loop reads, then the fuel slice. A group of a loop whose closing branch is converted
//! with its arm (its charge selected by the path, see [`IfConv::BackTriangle`]) and
//! compares a running register (stats64's `x < min`) is one block of pure values whose
//! only uses are the branch leaving it: every register's chain was computed first and
//! the charges last, so each intermediate minimum stayed live until its charge
//! (stats64 spilled 14 values and reloaded 16 a group of 8). An exit of such a loop's
//! copies takes the fuel slice as its first parameter, so each charge is computed with
//! the minimum it compares, which dies there.
//!
//! A group of a loop that writes memory, with a selected charge, has the opposite
//! problem: its loads and stores stay in order, but each copy's charge and its add to a
//! running sum are pure and first used at the group's end, so Cranelift computed all of
//! them there. Held-out ringmax (`if (p[i] > *slot) *slot = p[i]; sum += *slot;` on a
//! ring in the stack) kept every copy's compared values and slot value live across the
//! group of 16: three spills a copy, reloaded at the end. Such a group *anchors* each
//! copy after the first: at its start it stores the fuel slice, and each register the
//! iteration carries (reads as the last one left it and changes by more than a
//! constant), to a frame slot nothing reads. A store is computed where it stands, so
//! each copy's charge and sums are made in the copy before. Executed instructions:
//! ringmax 32% fewer, editdist 7%, tokens 9% more (the four loops anchored); anchoring
//! every group of a loop that writes memory made 21 of 95 functions worse (prefix32 48%,
//! hist 29%), and a store of the slice after each selected charge alone did less for
//! ringmax (17%).

use super::*;

impl Translator<'_, '_> {
    /// Makes the fuel slice the first parameter of the block being filled (an exit of
    /// loop `i`'s copies, sealed, with more than one predecessor) when the order matters
    /// there (see the module doc and [`Self::charge_reads_running`]).
    pub(super) fn fuel_first(&mut self, i: usize) {
        if self.loops[i].group.is_some() && self.charge_reads_running(i) {
            let _ = self.b.use_var(self.fuel_left);
        }
    }

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

    /// Whether loop `i` closes with a converted branch that compares a *running*
    /// register: one the iteration changes somewhere but not between the header and the
    /// branch, so the branch reads last iteration's value. Only there does the order
    /// matter: a charge selected by a compare of values the iteration computes (a dot
    /// product's sign, held-out dot6) was 14% slower with the fuel slice first, its
    /// values computed for the charges and kept for the sums.
    fn charge_reads_running(&self, i: usize) -> bool {
        let l = &self.loops[i];
        let writes = |q: u32, r: u8| {
            let insn = &self.insns[q as usize];
            matches!(insn.class(), CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD) && insn.dst == r
        };
        l.body.iter().any(|&pc| {
            if !matches!(self.plan.ifconv.get(&pc), Some(IfConv::BackTriangle { .. })) {
                return false;
            }
            let insn = &self.insns[pc as usize];
            let mut regs = vec![insn.dst];
            if insn.opc & SRC_X != 0 {
                regs.push(insn.src);
            }
            regs.into_iter().any(|r| {
                let changed = l.body.iter().any(|&q| writes(q, r));
                let before = l
                    .body
                    .iter()
                    .any(|&q| (l.header..pc).contains(&q) && writes(q, r));
                changed && !before
            })
        })
    }
}
