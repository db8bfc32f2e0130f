//! What the plan's value ranges (`crate::ranges`) prove, used where translation emits
//! ordinary code: a register's bound at a slot (for the bounds of the values computed
//! there, so a stack array indexed by a loop-carried or compared index goes unchecked),
//! accesses through a frame pointer proven inside the current frame, and, in the
//! program's entry, loads proven inside `[r1, r1 + r2)` of the entry by the entry facts
//! (`FunctionPlan::entry_facts`; such code runs only where the run's start checked that `r1`
//! points into a region readable for `r2` bytes, `CodeMemory::needs_input`).
//!
//! The ranges hold of executions that reach a slot. Code that runs a block whose branch
//! did not go there (if-converted arms, speculative regions) and an inlined callee's
//! body (its slots are another function's) use none of them: [`Translator::speculating`]
//! and `inline_exit` mark those.

use super::*;

impl Translator<'_, '_> {
    /// Runs `f` with the value ranges off (see the module doc).
    pub(super) fn speculating<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let was = std::mem::replace(&mut self.speculating, true);
        let r = f(self);
        self.speculating = was;
        r
    }

    /// Whether the value ranges hold for the code being translated.
    pub(super) fn ranges_hold(&self) -> bool {
        !self.speculating && self.inline_exit.is_none()
    }

    /// The bound the value ranges prove for register `r` before slot `pc`.
    pub(super) fn proven_bound(&self, pc: u32, r: u8) -> u64 {
        if self.ranges_hold() {
            self.plan.ranges.bound(pc, r)
        } else {
            u64::MAX
        }
    }

    /// The host address of `v` (register `reg` at slot `pc`) when the value ranges prove
    /// an access of `size` bytes at `v + off` inside the current frame, `[r10 - 512,
    /// r10)`: such an access needs no check (see the module doc of `translate`).
    pub(super) fn proven_frame_access(
        &mut self,
        pc: u32,
        reg: u8,
        v: Value,
        off: i16,
        size: i64,
    ) -> Option<Value> {
        let frame = STACK_FRAME_SIZE as i64;
        (self.ranges_hold() && self.plan.ranges.in_frame(pc, reg, off, size, frame))
            .then(|| self.b.ins().iadd(self.stack_delta, v))
    }

    /// The host address of `v` (register `reg` at slot `pc`) when `op` is a load of the
    /// program's entry that the entry facts prove inside `[r1, r1 + r2)`: the region of
    /// r1 at entry, fixed for the run, so the address is `v` moved by its delta.
    pub(super) fn proven_input_access(
        &mut self,
        pc: u32,
        reg: u8,
        v: Value,
        off: i16,
        op: MemOp,
    ) -> Option<Value> {
        let delta = self.input_delta?;
        let size = i64::from(op.size());
        let proven = !op.writes()
            && self.entry == Entry::Run
            && self.plan.entry_facts
            && self.ranges_hold()
            && self.plan.ranges.in_input(pc, reg, off, size);
        proven.then(|| self.b.ins().iadd(delta, v))
    }

    /// The host-minus-virtual delta of the region r1 points into, computed in the entry
    /// block from the entry's r1 (see [`Self::proven_input_access`]).
    pub(super) fn entry_input_delta(&mut self) -> Value {
        let r1 = self.b.use_var(self.regs[1]);
        let regions = self.regions();
        let (row, lo) = self.row_of(regions, r1);
        let base = self
            .b
            .ins()
            .load(types::I64, self.flags.table, row, RegionEntry::OFFSET_BASE);
        let start = self.b.ins().iadd(base, lo);
        self.b.ins().isub(start, r1)
    }
}
