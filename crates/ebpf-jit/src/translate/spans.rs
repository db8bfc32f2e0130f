//! Span groups: accesses through one base register at constant offsets in one straight
//! run of code (clang's unrolled copies of a block into a stack buffer, a word assembled
//! from bytes, a tile's rows and columns), checked once as a span.
//!
//! Where the run's first such access would take a check (the region cache's, or the
//! stack's constant one for a base computed from r10), the span of every access of the
//! group (`base + min_off .. base + max_end`) is checked instead, against the read cache
//! (loads only) or against the stack (loads and stores: the stack is mapped with
//! `STACK_SIZE` bytes for both and never moves), and the run is translated twice: a fast
//! copy whose group accesses go unchecked, taken when the whole span is in bounds, and a
//! cold ordinary copy, every access checked as usual, taken otherwise. Both copies run
//! to the end of the straight run (so what translation knows of the values computed
//! there, such as a table pointer's bounds, is not lost at a join in the middle) and
//! end in one block where translation goes on (the registers and caches are Cranelift
//! variables, so the join merges them). The fast copy runs only when every group access
//! is in bounds, and a run holds no jump, call or leader (no fuel charge, no helper
//! remapping a region), so value, trap (pc and address, taken in the ordinary copy) and
//! fuel are the interpreter's.

use super::*;

/// Fewest accesses a group holds: fewer do not repay the span check.
const MEMBERS_MIN: usize = 3;

/// Most slots from a group's first access to its last (each copy holds them all).
const SEGMENT_SLOTS_MAX: u32 = 512;

/// A group of accesses (see the module doc), keyed by its first access's slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpanGroup {
    /// The base register.
    pub(crate) reg: u8,
    /// Whether the base is computed from r10 on every path (`FunctionPlan::stack_bases`):
    /// the group's loads and stores are checked against the stack, else its loads against
    /// the read cache.
    pub(crate) stack: bool,
    /// The slot of the group's last access.
    pub(crate) last: u32,
    /// The last slot of its straight run (before the jump or leader ending it): both
    /// copies run to there, so the values the run computes after the group keep the
    /// facts translation knows of them (a table pointer's bounds) up to the run's end,
    /// where a block starts anyway.
    pub(crate) end: u32,
    /// The slots of its accesses.
    pub(crate) members: BTreeSet<u32>,
    /// The lowest offset an access starts at, and the highest one ends at.
    pub(crate) min_off: i64,
    pub(crate) max_end: i64,
}

/// The fast copy being translated: its group's base value, host minus virtual address
/// of the span the check saw, and whether its stores go unchecked too.
pub(super) struct FastGroup {
    v: Value,
    delta: Value,
    members: BTreeSet<u32>,
    stores: bool,
}

/// An access through a base register: slot, offset, size, whether it stores.
type Member = (u32, i64, i64, bool);

/// The span groups of a function with reachable slots `pcs`, leaders `leaders` and
/// stack bases `stack_bases`: in each straight run (no leader after its first slot, no
/// jump-class instruction), the accesses through each register other than r10 until it
/// is written (loads only unless the base is a stack base), when at least
/// [`MEMBERS_MIN`]; where runs overlap, the group saving more checks is kept (a region
/// check costs about twice the stack's constant one).
pub(crate) fn span_groups(
    insns: &[Insn],
    pcs: &[u32],
    leaders: &BTreeSet<u32>,
    stack_bases: &BTreeSet<u32>,
) -> BTreeMap<u32, SpanGroup> {
    let mut found: Vec<SpanGroup> = Vec::new();
    let mut open: [Vec<Member>; 10] = Default::default();
    let close = |open: &mut Vec<Member>, reg: usize, found: &mut Vec<SpanGroup>| {
        let all = std::mem::take(open);
        let Some(&(first, ..)) = all.first() else {
            return;
        };
        let stack = stack_bases.contains(&first);
        let members: Vec<Member> = all.into_iter().filter(|m| stack || !m.3).collect();
        if members.len() < MEMBERS_MIN {
            return;
        }
        let (first, last) = (members[0].0, members[members.len() - 1].0);
        let min_off = members.iter().map(|m| m.1).min().unwrap_or(0);
        let max_end = members.iter().map(|m| m.1 + m.2).max().unwrap_or(0);
        if last - first > SEGMENT_SLOTS_MAX || max_end - min_off > STACK_SIZE as i64 {
            return;
        }
        found.push(SpanGroup {
            reg: reg as u8,
            stack,
            last,
            end: last,
            min_off,
            max_end,
            members: members.iter().map(|m| m.0).collect(),
        });
    };
    let close_all = |open: &mut [Vec<Member>; 10], found: &mut Vec<SpanGroup>| {
        for (r, o) in open.iter_mut().enumerate() {
            close(o, r, found);
        }
    };
    for &pc in pcs {
        if leaders.contains(&pc) {
            close_all(&mut open, &mut found);
        }
        let insn = &insns[pc as usize];
        let mode = insn.opc & 0xe0;
        let size = crate::analysis::access_size(insn);
        match insn.class() {
            CLASS_JMP | CLASS_JMP32 => close_all(&mut open, &mut found),
            CLASS_LDX if matches!(mode, MODE_MEM | MODE_MEMSX) && insn.src < 10 => {
                open[insn.src as usize].push((pc, i64::from(insn.off), size, false));
                if insn.dst < 10 {
                    close(&mut open[insn.dst as usize], insn.dst as usize, &mut found);
                }
            }
            CLASS_ST | CLASS_STX if mode == MODE_MEM && insn.dst < 10 => {
                open[insn.dst as usize].push((pc, i64::from(insn.off), size, true));
            }
            CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX if insn.dst < 10 => {
                close(&mut open[insn.dst as usize], insn.dst as usize, &mut found);
            }
            CLASS_STX if mode == MODE_ATOMIC => {
                for r in [insn.src, 0] {
                    if r < 10 {
                        close(&mut open[r as usize], r as usize, &mut found);
                    }
                }
            }
            _ => {}
        }
    }
    close_all(&mut open, &mut found);
    // Each group runs to the end of its straight run.
    for g in &mut found {
        for &pc in pcs.iter().filter(|&&pc| pc > g.last) {
            let class = insns[pc as usize].class();
            if leaders.contains(&pc) || matches!(class, CLASS_JMP | CLASS_JMP32) {
                break;
            }
            g.end = pc;
        }
    }
    let first = |g: &SpanGroup| *g.members.first().expect("a group has members");
    found.retain(|g| g.end - first(g) <= SEGMENT_SLOTS_MAX);
    // The groups saving more first; a group overlapping one kept is dropped.
    let saves = |g: &SpanGroup| g.members.len() * if g.stack { 1 } else { 2 };
    found.sort_by_key(|g| (std::cmp::Reverse(saves(g)), g.last));
    let mut kept: BTreeMap<u32, SpanGroup> = BTreeMap::new();
    for g in found {
        let overlaps = kept.iter().any(|(&f, k)| first(&g) <= k.end && f <= g.end);
        if !overlaps {
            kept.insert(first(&g), g);
        }
    }
    kept
}

impl Translator<'_, '_> {
    /// Translates the run of the span group starting at `pc`, if there is one and its
    /// first access would take the check its group assumed (see the module doc); returns
    /// the slot after the group's run (`SpanGroup::end`), where translation goes on.
    pub(super) fn span_group(&mut self, pc: u32) -> TResult<Option<u32>> {
        let Some(g) = self.span_groups.get(&pc).cloned() else {
            return Ok(None);
        };
        let v = self.reg(pc, g.reg)?;
        let insn = self.insns[pc as usize];
        let size = crate::analysis::access_size(&insn);
        let framed = self.ranges_hold()
            && self
                .plan
                .ranges
                .in_frame(pc, g.reg, insn.off, size, STACK_FRAME_SIZE as i64);
        // A global section's constant check stays; a pointer from r10 whose range
        // leaves the frame takes the stack's check, so it may head a stack group.
        let global = self
            .pointers
            .get(&v)
            .is_some_and(|f| matches!(f.anchor, Anchor::Global(_)));
        if self.unchecked || framed || global || self.stack_based(pc, v) != g.stack {
            return Ok(None);
        }
        let (hit, delta) = if g.stack {
            let lo = RegionIdx::STACK.vaddr(0) as i64;
            let b = &mut self.b;
            let rel = b.ins().iadd_imm_s(v, g.min_off.wrapping_sub(lo));
            let room = STACK_SIZE as i64 - (g.max_end - g.min_off);
            let hit = b
                .ins()
                .icmp_imm_s(IntCC::UnsignedLessThanOrEqual, rel, room);
            (hit, self.stack_delta)
        } else {
            let cache = self.cache(false);
            let b = &mut self.b;
            let rel = b.ins().iadd(v, cache.neg_lo);
            let first = b.ins().iadd_imm_s(rel, g.min_off);
            let last = b.ins().iadd_imm_s(rel, g.max_end - 8);
            let first_in = b
                .ins()
                .icmp(IntCC::UnsignedLessThanOrEqual, first, cache.limit);
            let last_in = b
                .ins()
                .icmp(IntCC::UnsignedLessThanOrEqual, last, cache.limit);
            (b.ins().band(first_in, last_in), cache.delta)
        };
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        let join = self.b.create_block();
        self.b.set_cold_block(slow);
        self.b.ins().brif(hit, fast, &[], slow, &[]);

        self.enter(fast);
        self.fast_group = Some(FastGroup {
            v,
            delta,
            members: g.members.clone(),
            stores: g.stack,
        });
        let r = self.group_run(pc, g.end);
        self.fast_group = None;
        r?;
        self.b.ins().jump(join, &[]);

        self.enter(slow);
        self.group_run(pc, g.end)?;
        self.b.ins().jump(join, &[]);

        self.enter(join);
        let next = g.end + insn_len(&self.insns[g.end as usize]);
        Ok(Some(next))
    }

    /// Translates the reachable slots `first..=last` (a straight run: no leader after
    /// `first`, whose counter `body` already entered).
    fn group_run(&mut self, first: u32, last: u32) -> TResult<()> {
        let plan = self.plan;
        for &pc in plan.pcs.iter().filter(|&&pc| (first..=last).contains(&pc)) {
            if pc != first {
                if let Some(c) = &self.counters {
                    c.enter(&mut self.b, pc);
                }
            }
            self.at = pc;
            self.insn(pc)?;
        }
        Ok(())
    }

    /// The host address of an access at `pc` through `v` in the fast copy of its group,
    /// whose span check proved it in bounds.
    pub(super) fn group_member(&mut self, pc: u32, v: Value, write: bool) -> Option<Value> {
        let g = self.fast_group.as_ref()?;
        if (write && !g.stores) || g.v != v || !g.members.contains(&pc) {
            return None;
        }
        let delta = g.delta;
        Some(self.b.ins().iadd(delta, v))
    }
}
