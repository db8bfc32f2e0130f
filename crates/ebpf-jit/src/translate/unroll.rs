//! The unrolled copy of a versioned loop (see `loops::Unroll`).
//!
//! A loop whose unchecked copy is planned with an [`Unroll`] gets a third copy: *groups*
//! of `factor` iterations, the body translated `factor` times in a row. In every copy but
//! the last, the loop's counted exit is left out (the guard proved it does not fire
//! there), so a short loop of a fixed trip count runs as straight-line code between
//! group boundaries. Control:
//!
//! * the guard, after computing `n` (iterations whose accesses are in bounds), computes
//!   `r`, a lower bound on the iterations before the counted exit can fire, and
//!   `groups = min(n, r + 1) / factor`: each group's first `factor - 1` iterations stay
//!   in the loop and all `factor` are in bounds;
//! * `head` starts a group when one is left and the fuel slice (see `translate`, Fuel)
//!   covers `factor` iterations' most charge; otherwise `after` goes on in the one-by-one
//!   unchecked copy for what is left of `n` (whose charges refill the slice, and look at
//!   the stop flag, as every charge does), or in the checked loop;
//! * the back-edges inside a group charge their cost by a plain subtraction from the
//!   slice (it cannot run short, so no compare), so fuel used is the interpreter's at
//!   every instruction, a trap inside a group included; the last copy's back-edge
//!   reaches `latch`, which counts the group off.
//!
//! A stop raised while a group runs is seen at the next refill of the slice, within
//! `rules::STOP_SLICE` fuel, as anywhere else in the JIT's code.

use super::*;
use crate::loops::{CountedExit, Unroll};

/// The unrolled copy's blocks and state.
pub(super) struct GroupCopy {
    plan: Unroll,
    head: Block,
    after: Block,
    latch: Block,
    /// The blocks of the loop's leaders, in each of the `factor` copies.
    copies: Vec<BTreeMap<u32, Block>>,
    /// Groups left to run.
    groups: Variable,
}

impl GroupCopy {
    /// The blocks of the unrolled copy of `l`, if it has one (never in the counting
    /// variant, whose counters follow the one-by-one copies).
    pub(super) fn new(
        b: &mut FunctionBuilder<'_>,
        l: &loops::VersionedLoop,
        leaders: &BTreeMap<u32, Block>,
        plan: &FunctionPlan,
        counting: bool,
    ) -> Option<GroupCopy> {
        let unroll = l.unroll.clone().filter(|_| !counting)?;
        let copies = (0..unroll.factor)
            .map(|_| {
                l.body
                    .iter()
                    .filter(|pc| leaders.contains_key(pc))
                    .map(|&pc| {
                        let block = b.create_block();
                        if plan.cold.contains(&pc) {
                            b.set_cold_block(block);
                        }
                        (pc, block)
                    })
                    .collect()
            })
            .collect();
        Some(GroupCopy {
            plan: unroll,
            head: b.create_block(),
            after: b.create_block(),
            latch: b.create_block(),
            copies,
            groups: b.declare_var(types::I64),
        })
    }
}

impl<'a, 'f> Translator<'a, 'f> {
    /// In copy `k` of loop `i`'s groups: the block a transfer to `t` goes to.
    pub(super) fn group_target(&self, i: usize, k: usize, t: u32) -> Option<Block> {
        let l = &self.loops[i];
        let g = l.group.as_ref()?;
        if t == l.header {
            return Some(match g.copies.get(k + 1) {
                Some(next) => next[&t],
                None => g.latch,
            });
        }
        g.copies[k].get(&t).copied()
    }

    /// Whether the conditional jump at `pc` is the counted exit of the group copy being
    /// translated, and not its last copy's: then it is translated as a transfer to its
    /// successor in the loop.
    pub(super) fn elided_exit(&self, pc: u32) -> Option<u32> {
        let (i, k) = (self.in_loop?, self.group?);
        let g = self.loops[i].group.as_ref()?;
        (g.plan.exit.pc == pc && k + 1 < g.copies.len()).then_some(g.plan.exit.stays)
    }

    /// Ends loop `i`'s guard (in its current block, `n` the iterations proven in bounds,
    /// already in the loop's counter): the number of groups, then the first group's
    /// start. Returns false when the loop has no unrolled copy.
    pub(super) fn guard_groups(&mut self, i: usize, n: Value, regs: &[Value; 10]) -> bool {
        let Some(g) = &self.loops[i].group else {
            return false;
        };
        let (exit, factor, groups, head) = (g.plan.exit.clone(), g.plan.factor, g.groups, g.head);
        let stays = self.exit_lower_bound(&exit, regs);
        let b = &mut self.b;
        let one_more = b.ins().iadd_imm_s(stays, 1);
        let m = b.ins().umin(n, one_more);
        let count = b.ins().ushr_imm_s(m, i64::from(factor.trailing_zeros()));
        b.def_var(groups, count);
        b.ins().jump(head, &[]);
        true
    }

    /// A lower bound, below 2^32, on the iterations in which the counted `exit` does not
    /// leave the loop, from the registers on entry: the distance from `iv` to `bound`
    /// over the step when `iv` starts on the near side of `bound`, else 0. Until then
    /// `iv` stays strictly between its start and `bound`, so it does not wrap and cannot
    /// meet the exit's condition (see `loops::CountedExit`).
    fn exit_lower_bound(&mut self, exit: &CountedExit, regs: &[Value; 10]) -> Value {
        let iv = self.eval_form(exit.iv, regs);
        let bound = self.eval_form(exit.bound, regs);
        let b = &mut self.b;
        let ext = |b: &mut FunctionBuilder<'f>, v: Value| {
            if !exit.is32 {
                v
            } else if exit.signed {
                let low = b.ins().ireduce(types::I32, v);
                b.ins().sextend(types::I64, low)
            } else {
                b.ins().band_imm_s(v, 0xffff_ffff)
            }
        };
        let (iv, bound) = (ext(b, iv), ext(b, bound));
        let (from, to) = if exit.step > 0 {
            (iv, bound)
        } else {
            (bound, iv)
        };
        let cc = if exit.signed {
            IntCC::SignedLessThan
        } else {
            IntCC::UnsignedLessThan
        };
        let near = b.ins().icmp(cc, from, to);
        let dist = b.ins().isub(to, from);
        let cap = b.ins().iconst(types::I64, u32::MAX as i64);
        let dist = b.ins().umin(dist, cap);
        // `floor(dist / step)` or (for a step not a power of two) up to two less.
        let step = exit.step.unsigned_abs() as i64;
        let q = if step.count_ones() == 1 {
            b.ins().ushr_imm_s(dist, i64::from(step.trailing_zeros()))
        } else {
            let m = b.ins().imul_imm_s(dist, (1i64 << 32) / step);
            b.ins().ushr_imm_s(m, 32)
        };
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().select(near, q, zero)
    }

    /// The value of an affine form of the header's registers (`regs`, and r10).
    fn eval_form(&mut self, (coef, k): ([i64; 11], i64), regs: &[Value; 10]) -> Value {
        let b = &mut self.b;
        let mut v = b.ins().iconst(types::I64, k);
        for (r, &c) in coef.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let x = if r == 10 { self.fp } else { regs[r] };
            let term = if c == 1 { x } else { b.ins().imul_imm_s(x, c) };
            v = b.ins().iadd(v, term);
        }
        v
    }

    /// Translates loop `i`'s unrolled copy (if it has one): the group start, the
    /// `factor` copies of the body, the latch and the fallback.
    pub(super) fn group_copies(&mut self, i: usize) -> TResult<()> {
        let Some(g) = &self.loops[i].group else {
            return Ok(());
        };
        let (head, after, latch, groups) = (g.head, g.after, g.latch, g.groups);
        let (factor, charge) = (g.plan.factor, g.plan.charge);
        let first = g.copies[0][&self.loops[i].header];
        let (counter, unchecked_head, checked) = {
            let l = &self.loops[i];
            (l.counter, l.unchecked[&l.header], l.checked_head)
        };

        // A group starts with one left and the fuel slice holding its most charge (two
        // branches). The stop flag is the slice's business: its refill looks at it.
        self.b.switch_to_block(head);
        let fueled = self.b.create_block();
        let left = self.b.use_var(groups);
        self.b.ins().brif(left, fueled, &[], after, &[]);
        self.enter(fueled);
        let need = charge.saturating_mul(u64::from(factor));
        if need > rules::STOP_SLICE {
            self.b.ins().jump(after, &[]);
        } else {
            let slice = self.b.use_var(self.fuel_left);
            let enough =
                self.b
                    .ins()
                    .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, slice, need as i64);
            self.b.ins().brif(enough, first, &[], after, &[]);
        }

        // Otherwise: one by one for what is left of the iterations in bounds.
        self.b.switch_to_block(after);
        let n = self.b.use_var(counter);
        self.b.ins().brif(n, unchecked_head, &[], checked, &[]);

        self.b.switch_to_block(latch);
        let b = &mut self.b;
        let n = b.use_var(counter);
        let n = b.ins().iadd_imm_s(n, -i64::from(factor));
        b.def_var(counter, n);
        let left = b.use_var(groups);
        let left = b.ins().iadd_imm_s(left, -1);
        b.def_var(groups, left);
        b.ins().jump(head, &[]);

        let plan = self.plan;
        for k in 0..factor as usize {
            self.group = Some(k);
            let mut resume = 0;
            for &pc in &plan.pcs {
                if pc < resume || !self.loops[i].body.contains(&pc) {
                    continue;
                }
                let block = self.loops[i]
                    .group
                    .as_ref()
                    .and_then(|g| g.copies[k].get(&pc));
                if let Some(&block) = block {
                    if self.open {
                        let to = self.target(pc);
                        self.b.ins().jump(to, &[]);
                    }
                    self.b.switch_to_block(block);
                    self.open = true;
                }
                assert!(self.open, "slot {pc} of a group copy is in an open block");
                resume = self.insn(pc)?;
            }
            assert!(!self.open, "a group copy ends its last block");
        }
        self.group = None;
        Ok(())
    }
}

impl<'a, 'f> Translator<'a, 'f> {
    /// Performs `op` at `host + disp`, an access at `pc` the guard proved in bounds.
    ///
    /// In a group of a loop that writes no memory, a load whose address moves with the
    /// iterations is marked read-only and movable, which makes it a pure value to Cranelift: it is
    /// then computed next to its use rather than where the body has it (otherwise every
    /// load of a group comes first and their values are spilled until the arithmetic,
    /// which Cranelift places at the group's end). It cannot move out of the group: its
    /// address depends on an induction variable the group changes; inside the group
    /// nothing writes memory, and values leaving the group are branch arguments, so the
    /// load happens before the group is left.
    pub(super) fn emit_unchecked(
        &mut self,
        pc: u32,
        host: Value,
        disp: i32,
        op: MemOp,
    ) -> Option<Value> {
        let pure = match (self.in_loop, self.group) {
            (Some(i), Some(_)) => {
                let l = &self.loops[i];
                matches!(op, MemOp::Load { .. })
                    && l.group.as_ref().is_some_and(|g| g.plan.read_only)
                    && l.accesses.iter().any(|a| a.pc == pc && a.stride != 0)
            }
            _ => false,
        };
        let MemOp::Load { size, signed } = op else {
            return self.emit_op(host, disp, op);
        };
        if !pure {
            return self.emit_op(host, disp, op);
        }
        // Only `load` (not `uload8` ...) can be pure: narrow loads are loaded at their
        // width and extended (a sign extension then folds into the load).
        let fl = self.flags.heap.with_readonly().with_can_move();
        let ty = match size {
            1 => types::I8,
            2 => types::I16,
            4 => types::I32,
            _ => return Some(self.b.ins().load(types::I64, fl, host, disp)),
        };
        let v = self.b.ins().load(ty, fl, host, disp);
        Some(if signed {
            self.b.ins().sextend(types::I64, v)
        } else {
            self.b.ins().uextend(types::I64, v)
        })
    }
}

impl<'a, 'f> Translator<'a, 'f> {
    /// The operands of a commutative ALU operation in a group, the older value first.
    ///
    /// Cranelift computes a pure value where it is first used, its operands in order,
    /// depth first. A group's reduction (`acc += x * y`, eight times) is one chain used
    /// only at the group's end; with the new term first (`r7 += r3`), every term of the
    /// chain is computed before the first addition and all are live at once. The older
    /// operand (the accumulator: a lower value number) first computes them in order.
    pub(super) fn group_operands(&self, op: u8, d: Value, s: Value) -> (Value, Value) {
        let commutes = matches!(op, ALU_ADD | ALU_MUL | ALU_OR | ALU_AND | ALU_XOR);
        if self.group.is_some() && commutes && s < d {
            (s, d)
        } else {
            (d, s)
        }
    }
}
