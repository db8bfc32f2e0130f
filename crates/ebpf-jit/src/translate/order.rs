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
