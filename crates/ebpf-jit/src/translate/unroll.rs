//! The unrolled copy of a versioned loop (see `loops::Unroll`).
//!
//! A loop whose unchecked copy is planned with an [`Unroll`] gets a third copy: *groups*
//! of `factor` iterations, the body translated `factor` times in a row. In every copy but
//! the last, the loop's counted exit is left out (the guard proved it does not fire
//! there), so a short loop of a fixed trip count runs as straight-line code between
//! group boundaries. Control:
//!
//! * the guard, after computing `n` (iterations whose accesses are in bounds, the loop's
//!   counter), computes `r`, a lower bound on the iterations before the counted exit can
//!   fire, and the *slack* `n - min(n, r + 1)`: while the counter minus the slack is at
//!   least `factor`, the next `factor` iterations are in bounds and the first
//!   `factor - 1` of them stay in the loop, whichever copy ran the iterations before;
//! * `head` starts a group when that holds and the fuel slice (see `translate`, Fuel)
//!   covers `factor` iterations' most charge, a short slice first topped up from the
//!   reserve unless the stop flag is set (`top_up_slice`); otherwise `after` goes on in
//!   the one-by-one unchecked copy for what is left of `n` (whose charges refill the
//!   slice, and look at the stop flag, as every charge does), or in the checked loop;
//! * a back-edge of the one-by-one copy whose charge refilled the slice counts its
//!   iteration off and goes back to `head` (`regroup`): a loop entered with a short slice
//!   (the first loop of a run: the slice starts empty) still runs in groups after its
//!   first refill;
//!   A loop whose closing branch is converted with its arm charges a cost selected by
//!   the path taken, and a refill there is not at an iteration's end: its one-by-one
//!   iterations all end at `regroup` instead (`loops::Unroll::selected`);
//! * the back-edges inside a group charge their cost by a plain subtraction from the
//!   slice (it cannot run short, so no compare), the selected cost of the path taken
//!   included, so fuel used is the interpreter's at every instruction, a trap inside a
//!   group included; the last copy's back-edge reaches `latch`, which counts the group
//!   off.
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
    /// Where a one-by-one back-edge whose charge refilled the slice goes on: it counts
    /// the iteration off and tries a group again.
    pub(super) regroup: Block,
    /// The blocks of the loop's leaders, in each of the `factor` copies.
    copies: Vec<BTreeMap<u32, Block>>,
    /// The counter's value when no group is left to run (see the module doc).
    slack: Variable,
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
            regroup: b.create_block(),
            copies,
            slack: b.declare_var(types::I64),
        })
    }
}

impl GroupCopy {
    /// Whether the one-by-one copy's iterations end by trying a group.
    pub(super) fn selected(&self) -> bool {
        self.plan.selected
    }

    /// The registers to anchor at each copy's start after the first, when the copies
    /// are anchored (see `order`).
    pub(super) fn anchored(&self) -> Option<&[u8]> {
        (self.plan.selected && !self.plan.read_only).then_some(&self.plan.carried[..])
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

    /// The counted exit of loop `i`'s groups, when it has an unrolled copy.
    pub(super) fn group_exit(&self, i: usize) -> Option<CountedExit> {
        Some(self.loops[i].group.as_ref()?.plan.exit.clone())
    }

    /// Ends the guard of loop `i`, which has an unrolled copy (in its current block, `n`
    /// the iterations proven in bounds, already in the loop's counter, and `stays` the
    /// [`Self::exit_lower_bound`] of its counted exit): the slack, then the first group's
    /// start.
    pub(super) fn guard_groups(&mut self, i: usize, n: Value, stays: Value) {
        let g = self.loops[i].group.as_ref().expect("a loop with groups");
        let (slack, head) = (g.slack, g.head);
        let b = &mut self.b;
        let one_more = b.ins().iadd_imm_s(stays, 1);
        let m = b.ins().umin(n, one_more);
        let s = b.ins().isub(n, m);
        b.def_var(slack, s);
        b.ins().jump(head, &[]);
    }

    /// At a group's start, a slice short of `need`: moves fuel from the reserve into the
    /// slice, up to `rules::STOP_SLICE`, unless the stop flag is set; returns whether the
    /// slice now holds `need`. The fuel used (budget minus slice minus reserve) stays the
    /// same, and no charge is made, so nothing traps here. Without it a loop whose
    /// one-by-one back-edges do not go to its header (clang's rotated loops, the charge
    /// on a jump to the exit test above the header) never got its groups: the slice
    /// starts a run empty, and only such a back-edge's refill went back to `regroup`.
    /// A stop set before the top-up is seen at the next charge, which refills; one set
    /// after it within `STOP_SLICE` fuel, as anywhere.
    fn top_up_slice(&mut self, need: u64) -> Value {
        let fl = self.flags.ctx;
        let flag = self.stop_flag();
        let fill = self.b.create_block();
        let join = self.b.create_block();
        let slice = self.b.append_block_param(join, types::I64);
        self.b.set_cold_block(fill);
        self.b.set_cold_block(join);
        let kept = self.b.use_var(self.fuel_left);
        self.b
            .ins()
            .brif(flag, join, &[BlockArg::Value(kept)], fill, &[]);
        self.b.switch_to_block(fill);
        let ctx = self.ctx();
        let reserve = self
            .b
            .ins()
            .load(types::I64, fl, ctx, offsets::FUEL_RESERVE);
        let total = self.b.ins().iadd(kept, reserve);
        let filled = self.fill_slice(total);
        self.b.ins().jump(join, &[BlockArg::Value(filled)]);
        self.b.switch_to_block(join);
        self.b.def_var(self.fuel_left, slice);
        self.b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, slice, need as i64)
    }

    /// A lower bound, below 2^32, on the iterations in which the counted `exit` does not
    /// leave the loop, from the registers on entry: the distance from `iv` to `bound`
    /// over the step when `iv` starts on the near side of `bound`, else 0. Until then
    /// `iv` stays strictly between its start and `bound`, so it does not wrap and cannot
    /// meet the exit's condition (see `loops::CountedExit`). For an exit on equality,
    /// the distance is taken wrapped, from either side.
    pub(super) fn exit_lower_bound(&mut self, exit: &CountedExit, regs: &[Value; 10]) -> Value {
        let iv = self.eval_form(exit.iv, regs);
        let mut bound = self.eval_form(exit.bound, regs);
        if let Some((off, size)) = exit.bound_slot {
            // In the frame (`loops::frame_slot`), so no check; the loop never writes it.
            let fl = self.flags.heap;
            let b = &mut self.b;
            let slot = if size == 4 {
                b.ins().uload32(fl, self.fp_host, i32::from(off))
            } else {
                b.ins().load(types::I64, fl, self.fp_host, i32::from(off))
            };
            bound = b.ins().iadd(bound, slot);
        }
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
        let mut near = b.ins().icmp(cc, from, to);
        let mut dist = b.ins().isub(to, from);
        if exit.equal {
            // Any distance, wrapped (see `loops::CountedExit`).
            near = b.ins().iconst(types::I8, 1);
            if exit.is32 {
                dist = b.ins().band_imm_s(dist, 0xffff_ffff);
            }
        }
        // Below 2^32 already for a 32-bit exit: two 32-bit values extended alike, the
        // near one below the far one (or the wrapped distance masked).
        if !exit.is32 {
            let cap = b.ins().iconst(types::I64, u32::MAX as i64);
            dist = b.ins().umin(dist, cap);
        }
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
    pub(super) fn eval_form(&mut self, (coef, k): ([i64; 11], i64), regs: &[Value; 10]) -> Value {
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
        let (head, after, latch, regroup, slack) = (g.head, g.after, g.latch, g.regroup, g.slack);
        let (factor, charge) = (g.plan.factor, g.plan.charge);
        let first = g.copies[0][&self.loops[i].header];
        let (counter, unchecked_head, checked) = {
            let l = &self.loops[i];
            (l.counter, l.unchecked[&l.header], l.checked_head)
        };

        // A group starts when its iterations are proven (the counter is at least the
        // slack plus `factor`; both stay below 2^63) and the fuel slice holds its most
        // charge. The stop flag is the slice's business: its refill looks at it.
        self.b.switch_to_block(head);
        let fueled = self.b.create_block();
        let n = self.b.use_var(counter);
        let s = self.b.use_var(slack);
        let proven = self.b.ins().isub(n, s);
        let left =
            self.b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, proven, i64::from(factor));
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
            let top_up = self.b.create_block();
            self.b.set_cold_block(top_up);
            self.b.ins().brif(enough, first, &[], top_up, &[]);
            self.b.switch_to_block(top_up);
            // Back to `head` rather than straight to the group: the group's first block
            // keeps one way in, so the slice is not a value joined there.
            let enough = self.top_up_slice(need);
            self.b.ins().brif(enough, head, &[], after, &[]);
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
        b.ins().jump(head, &[]);

        // A one-by-one iteration whose back-edge refilled the slice: counted off as the
        // one-by-one latch does, then a group if one can start (else `after`: the
        // one-by-one copy while the counter lasts, then the checked loop).
        self.b.switch_to_block(regroup);
        let b = &mut self.b;
        let n = b.use_var(counter);
        let n = b.ins().iadd_imm_s(n, -1);
        b.def_var(counter, n);
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
                    if k > 0 && pc == self.loops[i].header {
                        self.anchor_copy(i);
                    }
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
        let fl = self.flags.heap.with_readonly().with_can_move();
        Some(self.pure_load(host, disp, size, signed, fl))
    }
}

impl<'a, 'f> Translator<'a, 'f> {
    /// The operands of a commutative ALU operation in a group, the older value first.
    ///
    /// Cranelift computes a pure value where it is first used, its operands in order,
    /// depth first. A group's reduction (`acc += x * y`, eight times) is one chain used
    /// only at the group's end; with the new term first (`r7 += r3`), every term of the
    /// chain is computed before the first addition and all are live at once. The older
    /// operand (the accumulator) first computes them in order. The accumulator is the
    /// operand not computed in the current block (each copy has its own blocks, and a
    /// register read there may be a parameter the SSA builder made while the block was
    /// open, numbered after every value of the copy); between two values of the block,
    /// the lower value number. A 32-bit operation's operands are narrowed copies made
    /// for it (`w3 += w0`: both in the current block, the term's copy made first), so
    /// age is read from the value a change of width was made from.
    pub(super) fn group_operands(&self, op: u8, d: Value, s: Value) -> (Value, Value) {
        let commutes = matches!(op, ALU_ADD | ALU_MUL | ALU_OR | ALU_AND | ALU_XOR);
        if self.group.is_none() || !commutes {
            return (d, s);
        }
        let (rd, rs) = (self.widened_from(d), self.widened_from(s));
        let here = |v: Value| {
            let func = &self.b.func;
            match func.dfg.value_def(v) {
                cranelift_codegen::ir::ValueDef::Result(inst, _) => {
                    func.layout.inst_block(inst) == self.b.current_block()
                }
                _ => false,
            }
        };
        match (here(rd), here(rs)) {
            (true, false) => (s, d),
            (false, true) => (d, s),
            _ if rs < rd => (s, d),
            _ => (d, s),
        }
    }

    /// The value `v` is a change of width of (through `ireduce`, `uextend` and
    /// `sextend`, repeatedly), or `v` itself.
    fn widened_from(&self, v: Value) -> Value {
        let dfg = &self.b.func.dfg;
        let mut v = dfg.resolve_aliases(v);
        while let cranelift_codegen::ir::ValueDef::Result(inst, 0) = dfg.value_def(v) {
            match dfg.insts[inst] {
                cranelift_codegen::ir::InstructionData::Unary {
                    opcode:
                        cranelift_codegen::ir::Opcode::Ireduce
                        | cranelift_codegen::ir::Opcode::Uextend
                        | cranelift_codegen::ir::Opcode::Sextend,
                    arg,
                } => v = dfg.resolve_aliases(arg),
                _ => break,
            }
        }
        v
    }
}
