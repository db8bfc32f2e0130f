//! Loops with a bounded trip count (`trips`): a bit count's `while (x) x &= x - 1`, a
//! shift right or a division by a constant until zero. Where such a loop is entered, a
//! guard compares the fuel slice with what every charge of the entry can add up to
//! (`BoundedLoop::need`: the most back-edges an entry takes, plus one, times the most
//! one pass charges) and the register pairs the bound takes as equal; when both hold,
//! the entry runs a *fast copy* of the loop whose charges inside it subtract without a
//! check, and whose conditional back-edges subtract before the branch (the branch goes
//! straight to the header, a fall-through exit adding the charge back), so an
//! iteration takes one taken branch.
//! Otherwise the entry runs the loop as translated in its context (the checked loop),
//! every charge checked, so the out-of-fuel pc and the fuel used are the interpreter's.
//!
//! The fast copy makes the same accesses with the same checks, and its charges are the
//! interpreter's: it charges each one exactly, only without the compare, on a slice that
//! the guard saw holds them all (a charge in the copy never refills; the stop flag is
//! looked at on refills, as in unrolled groups). Edges leaving the loop go where the
//! context's would (its checked loop, or a versioned loop's unchecked copy holding it),
//! charging as there.
//!
//! A context is the function's body pass or a versioned loop's unchecked copy; each
//! entry edge into a bounded loop's header from outside it, in a context, goes through
//! a guard block of that context, and the context gets its own fast copy. Not in the
//! counting variant, nor in unrolled groups.

use super::*;
use crate::trips::BoundedLoop;

/// A bounded loop's blocks in the context being translated.
pub(super) struct BoundedCopy {
    pub(super) plan: BoundedLoop,
    /// The fast copy's block of each leader in the loop.
    fast: BTreeMap<u32, Block>,
    /// The guard block of the context, with where it goes when the guard fails.
    guard: Option<(Block, Block)>,
}

impl BoundedCopy {
    pub(super) fn new(plan: BoundedLoop) -> BoundedCopy {
        BoundedCopy {
            plan,
            fast: BTreeMap::new(),
            guard: None,
        }
    }
}

impl Translator<'_, '_> {
    /// The block an edge from the slot being translated (`at`) to `t` goes to when a
    /// bounded loop decides it: a slot of the fast copy being translated, or the guard
    /// of a bounded loop's header entered from outside the loop.
    pub(super) fn bounded_target(&mut self, t: u32) -> Option<Block> {
        if self.group.is_some() {
            return None;
        }
        if let Some(k) = self.fast {
            if self.bounded[k].plan.body.contains(&t) {
                let b = &mut self.b;
                return Some(
                    *self.bounded[k]
                        .fast
                        .entry(t)
                        .or_insert_with(|| b.create_block()),
                );
            }
        }
        let &k = self.bounded_at.get(&t)?;
        if self.bounded[k].plan.body.contains(&self.at) || !self.bounded_here(k) {
            return None;
        }
        if let Some((guard, _)) = self.bounded[k].guard {
            return Some(guard);
        }
        let fail = self.context_target(t);
        let guard = self.b.create_block();
        self.bounded[k].guard = Some((guard, fail));
        Some(guard)
    }

    /// Whether the context being translated translates bounded loop `k`'s slots: the
    /// body pass does; a versioned loop's unchecked copy when the loop lies in it and
    /// the copy does not leave at its inner loops.
    fn bounded_here(&self, k: usize) -> bool {
        match (self.unchecked, self.in_loop) {
            (false, _) => true,
            (true, Some(i)) => {
                self.loops[i].body.contains(&self.bounded[k].plan.header)
                    && !self.leaves_at_inner(i)
            }
            (true, None) => false,
        }
    }

    /// Whether a charge on an edge to `target` is one the fast copy being translated
    /// makes without a check (the edge stays in the loop).
    pub(super) fn fast_charge(&self, target: u32) -> bool {
        self.fast
            .is_some_and(|k| self.bounded[k].plan.body.contains(&target))
    }

    /// A conditional backward branch of the fast copy to `target` in the loop: the
    /// charge subtracts before the branch, which goes straight to `target`; the
    /// fall-through adds it back and goes on to `next`.
    pub(super) fn fast_back_branch(&mut self, pc: u32, cond: Value, target: u32, next: u32) {
        let cost = rules::jump_cost(pc, target) as i64;
        let taken = self.target(target);
        let fall = self.target(next);
        let left = self.b.use_var(self.fuel_left);
        let paid = self.b.ins().iadd_imm_s(left, cost.wrapping_neg());
        self.b.def_var(self.fuel_left, paid);
        let undo = self.b.create_block();
        self.b.ins().brif(cond, taken, &[], undo, &[]);
        self.enter(undo);
        let back = self.b.ins().iadd_imm_s(paid, cost);
        self.b.def_var(self.fuel_left, back);
        self.b.ins().jump(fall, &[]);
        self.open = false;
    }

    /// After a context's slots: each guard the context made, and the fast copy its
    /// loop runs when the guard holds (whose edges may make guards of their own).
    pub(super) fn bounded_copies(&mut self) -> TResult<()> {
        let (in_loop, at) = (self.in_loop, self.at);
        while let Some(k) = (0..self.bounded.len()).find(|&k| self.bounded[k].guard.is_some()) {
            let (guard, fail) = self.bounded[k].guard.take().expect("just found");
            let header = self.bounded[k].plan.header;
            if !self.unchecked {
                self.in_loop = self.loop_at.get(&header).copied();
            }
            self.fast = Some(k);
            let head = self.target(header);
            self.b.switch_to_block(guard);
            let go = self.bounded_guard(k);
            self.b.ins().brif(go, head, &[], fail, &[]);
            self.fast_copy(k)?;
            self.fast = None;
            self.bounded[k].fast.clear();
        }
        (self.in_loop, self.at) = (in_loop, at);
        Ok(())
    }

    /// The guard's condition: the slice holds the loop's need, and the registers the
    /// bound takes as equal are.
    fn bounded_guard(&mut self, k: usize) -> Value {
        let need = self.bounded[k].plan.need() as i64;
        let slice = self.b.use_var(self.fuel_left);
        let mut go = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, slice, need);
        for (a, c) in self.bounded[k].plan.equal.clone() {
            let x = self.b.use_var(self.regs[a as usize]);
            let y = self.b.use_var(self.regs[c as usize]);
            let same = self.b.ins().icmp(IntCC::Equal, x, y);
            go = self.b.ins().band(go, same);
        }
        go
    }

    /// Translates bounded loop `k`'s fast copy in the current context.
    fn fast_copy(&mut self, k: usize) -> TResult<()> {
        let plan = self.plan;
        let mut resume = 0;
        for &pc in &plan.pcs {
            if pc < resume || !self.bounded[k].plan.body.contains(&pc) {
                continue;
            }
            if self.blocks.contains_key(&pc) {
                let block = self.target(pc);
                if self.open {
                    self.b.ins().jump(block, &[]);
                }
                self.b.switch_to_block(block);
                self.open = true;
            }
            assert!(self.open, "slot {pc} of a fast copy is in an open block");
            self.at = pc;
            resume = self.insn(pc)?;
        }
        assert!(!self.open, "a fast copy ends its last block");
        Ok(())
    }
}
