//! Block counters in compiled code, for runs that count executed work
//! (`csx_ebpf::count`): the JIT's half of the counting rule, compiled only into the
//! counting variant of a program ([`crate::JitProgram`] builds it on the first run that
//! asks for counts), so uncounted runs execute exactly the code they did before.
//!
//! Each canonical leader a function reaches gets an `i64` SSA variable, 0 at function
//! entry. Translation adds 1 where the leader's code begins (`Translator::body`), and
//! for leaders whose code an if-conversion runs unconditionally, adds the arm's
//! predicate instead (`enter_if`). The variables are added into the run's counter
//! buffer (`JitContext::counts`) when the function leaves: at `exit`, at the trap exit
//! and at the exit that propagates a callee's trap, so a trap mid-block has counted the
//! whole block, as the rule says. Speculative regions are not planned in this variant
//! (their blocks run on a predicate and may run twice on a fallback). Versioned loops
//! are (`loops`): the guard picks one copy per iteration, and both copies bump the same
//! variables, so an iteration counts once whichever copy runs it.
//!
//! To copy the shape to another compiled tier: the same leaders
//! (`VerifiedProgram::blocks`), one counter per leader bumped where its code begins,
//! added into the buffer whose pointer the context holds whenever a function returns
//! or traps.

use std::collections::HashMap;

use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, Variable};

use csx_ebpf::count::BlockMap;

use crate::runtime::offsets;

/// One function's block counters.
pub(crate) struct Counters {
    /// By leader slot: the block's index in the [`BlockMap`] and its variable.
    vars: HashMap<u32, (usize, Variable)>,
    /// The leader slots of `vars`, ascending (the flush order).
    order: Vec<u32>,
}

impl Counters {
    /// Counters for the leaders among `pcs`, set to 0 in the current (entry) block.
    pub(crate) fn new(b: &mut FunctionBuilder<'_>, blocks: &BlockMap, pcs: &[u32]) -> Counters {
        let mut vars = HashMap::new();
        let mut order = Vec::new();
        let zero = b.ins().iconst(types::I64, 0);
        for &pc in pcs {
            if let Some(block) = blocks.block_at(pc) {
                let var = b.declare_var(types::I64);
                b.def_var(var, zero);
                vars.insert(pc, (block, var));
                order.push(pc);
            }
        }
        order.sort_unstable();
        Counters { vars, order }
    }

    /// Adds 1 to the counter of the block `pc` leads, if it leads one.
    pub(crate) fn enter(&self, b: &mut FunctionBuilder<'_>, pc: u32) {
        if let Some(&(_, var)) = self.vars.get(&pc) {
            let n = b.use_var(var);
            let n = b.ins().iadd_imm_s(n, 1);
            b.def_var(var, n);
        }
    }

    /// Adds `runs` (a Cranelift boolean, 0 or 1) to the counter of every block led by a
    /// slot in `from..to`: an if-converted arm, which runs when `runs` holds.
    pub(crate) fn enter_if(&self, b: &mut FunctionBuilder<'_>, from: u32, to: u32, runs: Value) {
        let mut one = None;
        for pc in from..to {
            if let Some(&(_, var)) = self.vars.get(&pc) {
                let add = *one.get_or_insert_with(|| b.ins().uextend(types::I64, runs));
                let n = b.use_var(var);
                let n = b.ins().iadd(n, add);
                b.def_var(var, n);
            }
        }
    }

    /// Adds every counter into the run's buffer; the function is about to leave.
    pub(crate) fn flush(&self, b: &mut FunctionBuilder<'_>, ctx: Value, flags: MemFlagsData) {
        if self.order.is_empty() {
            return;
        }
        let base = b.ins().load(types::I64, flags, ctx, offsets::COUNTS);
        let buf = MemFlagsData::trusted();
        for pc in &self.order {
            let (block, var) = self.vars[pc];
            let n = b.use_var(var);
            let off = i32::try_from(block * 8).expect("a program has at most 2^20 slots");
            let old = b.ins().load(types::I64, buf, base, off);
            let new = b.ins().iadd(old, n);
            b.ins().store(buf, new, base, off);
        }
    }
}
