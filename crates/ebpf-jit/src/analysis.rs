//! Control-flow analysis ahead of translation: which instructions each eBPF function
//! reaches, where Cranelift blocks begin, and which short branches become `select`s.
//!
//! A *function* here is a start slot (the entry, or the target of a local `call`) and
//! every slot reachable from it by fall-through and jumps, calls not followed. Defining
//! functions by reachability rather than by the verifier's `function_starts` means
//! translation never depends on how functions are laid out, only on where control can
//! go; the verifier has already ruled out jumps that leave the program.
//!
//! If-conversion (why: Cranelift does not if-convert, and the branchy filters eBPF
//! programs are made of then run ~10x slower than native code) picks two shapes whose
//! arms hold only a few pure ALU instructions, nothing else jumps into, and so may run
//! unconditionally:
//!
//! ```text
//!  triangle                      diamond
//!    pc:  if cond goto end         pc:    if cond goto else
//!         arm (1..=ARM_MAX)               then-arm (0..=ARM_MAX)
//!    end: ...                             ja join
//!                                  else:  else-arm (1..=ARM_MAX)
//!                                  join:  ...
//! ```
//!
//! A forward branch whose two ways each run a few pure ALU instructions (through any
//! `ja`s) to a common slot is converted too, wherever its arms are laid out and whoever
//! else enters them (`IfConv::Paths`, clang's shape for a merge step): translation
//! copies both arms and jumps to the join.
//!
//! Branchier acyclic regions (the `a && b || c && d` of a filter, whose blocks load
//! fields) become *speculative regions*: a forward-only, single-entry, single-exit slot
//! range holding only ALU instructions, loads and forward jumps. Compiled code runs every
//! block of it with predicates instead of branches, loads through a bounds check whose
//! failure reads a harmless stack slot instead and raises a fault flag (when the load's
//! block really runs), and merges registers with `select`s at the exit. If the flag is
//! set, it starts over at the region's head on the ordinary (cold) translation, which
//! then traps at the exact instruction; the region has no side effects, so running it
//! twice is safe.
//!
//! Forward jumps charge no fuel, so converting them changes no fuel count.

use std::collections::{BTreeMap, BTreeSet};

use crate::ranges::Ranges;
use csx_ebpf::isa::{
    Insn, CALL_SRC_LOCAL, CLASS_ALU, CLASS_ALU64, CLASS_JMP, CLASS_JMP32, CLASS_LD, CLASS_LDX,
    CLASS_ST, CLASS_STX, JMP_CALL, JMP_EXIT, JMP_JA, OP_LDDW, REG_FP, SRC_X,
};

/// Most instructions in one arm of a converted branch. Both arms always run, so the
/// bound keeps the speculative work below the cost of a mispredicted branch.
pub(crate) const ARM_MAX: u32 = 3;

/// Most instructions (jumps included) in a speculative region: every one of them runs on
/// every pass, so the region must stay close to the cost of its mispredictions.
pub(crate) const REGION_INSNS_MAX: u32 = 24;

/// Most loads in a speculative region (each costs a bounds check and a select).
pub(crate) const REGION_LOADS_MAX: u32 = 6;

/// A control-flow fault in a program the verifier should have rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// A jump or call names a slot outside the program, or the second half of an `lddw`.
    BadTarget { pc: u32, target: i64 },
    /// Execution would run past the last slot.
    FallsOffEnd { pc: u32 },
}

/// How control leaves one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Falls through to the next instruction (the slot after, or two after an `lddw`).
    Next,
    /// `ja`: always jumps.
    Jump(u32),
    /// A conditional jump: to the target, or falls through.
    Branch(u32),
    /// A local call to the function starting at the slot; then falls through.
    CallLocal(u32),
    /// `exit`.
    Exit,
}

/// The shape of a branch translated as straight-line code with `select`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IfConv {
    /// The arm `pc + 1 .. end` runs when the condition is false.
    Triangle { end: u32 },
    /// The then-arm `pc + 1 .. else_start - 1` runs when the condition is false, the
    /// else-arm `else_start .. join` when it is true.
    Diamond { else_start: u32, join: u32 },
    /// A loop's closing branch: `if cond goto head` (backward), then the arm
    /// `pc + 1 .. ja`, then `ja head`. Both paths close the loop, so the arm becomes
    /// selects and the two back-edges one, whose fuel charge is selected too.
    BackTriangle { head: u32, ja: u32 },
    /// Two short paths from the branch at `pc` to a common slot `join`, of pure ALU
    /// instructions and `ja`s (its [`FunctionPlan::arms`]), laid out anywhere, their
    /// slots possibly entered from elsewhere too: translation copies both arms as
    /// selects, charges the fuel of the `ja` that goes backwards on the path taken, and
    /// jumps to `join`; the arms' own blocks stay for their other entries.
    Paths { join: u32 },
}

impl IfConv {
    /// The branch at `pc` converted: the slot where translation resumes.
    pub(crate) fn resume(self, pc: u32) -> u32 {
        match self {
            IfConv::Triangle { end } => end,
            IfConv::Diamond { join, .. } => join,
            IfConv::BackTriangle { ja, .. } => ja + 1,
            IfConv::Paths { .. } => pc + 1,
        }
    }

    /// The slot control reaches after the converted code.
    pub(crate) fn join(self) -> u32 {
        match self {
            IfConv::Triangle { end } => end,
            IfConv::Diamond { join, .. } | IfConv::Paths { join } => join,
            IfConv::BackTriangle { head, .. } => head,
        }
    }
}

/// One arm of an [`IfConv::Paths`]: the pure ALU slots it runs, in order, and the `ja`
/// on it that jumps backwards (slot, target), which charges fuel; at most one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PathArm {
    pub alu: Vec<u32>,
    pub back_jump: Option<(u32, u32)>,
}

/// What translation needs to know about one eBPF function.
#[derive(Clone, Debug)]
pub(crate) struct FunctionPlan {
    /// First slot.
    pub start: u32,
    /// Reachable instruction slots, ascending (second halves of `lddw` excluded).
    pub pcs: Vec<u32>,
    /// Slots that begin a Cranelift block.
    pub leaders: BTreeSet<u32>,
    /// Converted branches, by the slot of their conditional jump.
    pub ifconv: BTreeMap<u32, IfConv>,
    /// The arms of each [`IfConv::Paths`]: the path taken when the condition holds,
    /// then the fall-through's.
    pub arms: BTreeMap<u32, [PathArm; 2]>,
    /// Speculative regions: head slot (a conditional jump) to the slot after the region.
    pub regions: BTreeMap<u32, u32>,
    /// Leaders inside speculative regions: their blocks run only on the fallback path.
    pub cold: BTreeSet<u32>,
    /// Whether a local call reaches this function (otherwise it is only the entry).
    pub is_callee: bool,
    /// Memory accesses whose base register holds an address computed from r10 on every
    /// path that reaches them ([`stack_bases`]): translation checks them against the
    /// stack rather than the region caches.
    pub stack_bases: BTreeSet<u32>,
    /// What each register holds before each slot, on every execution (`ranges`).
    pub ranges: Ranges,
    /// Whether `ranges` carries the entry facts (`ranges`, `entry_args`): what holds when
    /// the run starts with `r1` pointing into a region that holds `r2` bytes from `r1`.
    /// Planned for the program's entry when no local call reaches it, in a program with
    /// no helper call (only a helper changes the region table during a run), in the
    /// variant whose runs check that precondition first (`compiled::Variant::Fast`).
    pub entry_facts: bool,
}

impl FunctionPlan {
    /// Whether some load of this function, run as the program's entry, is proven inside
    /// `[r1, r1 + r2)` of the entry by the entry facts ([`FunctionPlan::entry_facts`]):
    /// then the compiled code reads it unchecked, and a run must check the precondition
    /// first.
    pub(crate) fn reads_input(&self, insns: &[Insn]) -> bool {
        self.entry_facts
            && self.pcs.iter().any(|&pc| {
                let insn = &insns[pc as usize];
                insn.class() == CLASS_LDX
                    && self
                        .ranges
                        .in_input(pc, insn.src, insn.off, access_size(insn))
            })
    }
}

/// Every function of a program, the entry first.
#[derive(Clone, Debug)]
pub(crate) struct ProgramPlan {
    pub functions: Vec<FunctionPlan>,
    /// Whether any reachable instruction calls a helper (`call imm` or `callx`); only
    /// then can the region table change during a run.
    pub calls_helpers: bool,
}

impl ProgramPlan {
    /// Whether the entry function reads inside the entry's input unchecked
    /// ([`FunctionPlan::reads_input`]).
    pub(crate) fn reads_input(&self, insns: &[Insn]) -> bool {
        self.functions.first().is_some_and(|f| f.reads_input(insns))
    }
}

/// What a function does with registers, over every reachable instruction (flow
/// ignored): the basis of a local callee's native signature (`translate::CalleeAbi`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RegUse {
    /// Bit `r`: some instruction may read r`r` (r0-r9), counting the registers a call
    /// hands on (r1-r5 to a helper, r0-r9 to a local callee).
    pub reads: u16,
    /// Bit `r`: some instruction may write r`r`, counting what calls return (r0 from a
    /// helper, r0-r5 from a local callee).
    pub writes: u16,
    /// Some instruction names r10, or a local call needs the frame.
    pub fp: bool,
    /// Some instruction accesses memory or calls a helper.
    pub memory: bool,
}

/// The register use of the function whose reachable slots are `pcs`.
pub(crate) fn reg_use(insns: &[Insn], pcs: &[u32]) -> RegUse {
    let mut u = RegUse::default();
    let bit = |r: u8| if r <= 9 { 1u16 << r } else { 0 };
    for &pc in pcs {
        let insn = &insns[pc as usize];
        // Every register field counts as read, used or not: a safe over-estimate.
        u.reads |= bit(insn.dst) | bit(insn.src);
        u.fp |= insn.dst == REG_FP || insn.src == REG_FP;
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 | CLASS_LDX => u.writes |= bit(insn.dst),
            // `lddw` (and the legacy packet loads, which write r0).
            CLASS_LD => u.writes |= bit(insn.dst) | 1,
            CLASS_ST | CLASS_STX => {
                // An atomic may write its source register (fetch) or r0 (cmpxchg).
                u.writes |= bit(insn.src) | 1;
            }
            _ => {}
        }
        if matches!(insn.class(), CLASS_LDX | CLASS_ST | CLASS_STX)
            || (insn.class() == CLASS_LD && insn.opc != OP_LDDW)
        {
            u.memory = true;
        }
        if matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
            match insn.opc & 0xf0 {
                JMP_CALL if insn.class() == CLASS_JMP => {
                    if is_helper_call(insn) {
                        u.memory = true;
                        u.reads |= 0b11_1110;
                        u.writes |= 1;
                    } else {
                        u.reads |= 0x3ff;
                        u.writes |= 0b11_1111;
                        u.fp = true;
                        u.memory = true;
                    }
                }
                JMP_EXIT => u.reads |= 1,
                _ => {}
            }
        }
    }
    u
}

/// Slots `insn` occupies.
pub(crate) fn insn_len(insn: &Insn) -> u32 {
    if insn.opc == OP_LDDW {
        2
    } else {
        1
    }
}

/// Whether `insn` is a helper call (`call imm` with src 0, or `callx`).
pub(crate) fn is_helper_call(insn: &Insn) -> bool {
    insn.class() == CLASS_JMP
        && insn.opc & 0xf0 == JMP_CALL
        && (insn.opc & SRC_X != 0 || insn.src != CALL_SRC_LOCAL)
}

fn target_of(
    insns: &[Insn],
    lddw_tails: &BTreeSet<u32>,
    pc: u32,
    rel: i64,
) -> Result<u32, PlanError> {
    let target = i64::from(pc) + rel + 1;
    match u32::try_from(target) {
        Ok(t) if (t as usize) < insns.len() && !lddw_tails.contains(&t) => Ok(t),
        _ => Err(PlanError::BadTarget { pc, target }),
    }
}

/// How control leaves slot `pc`.
pub(crate) fn flow(insns: &[Insn], lddw_tails: &BTreeSet<u32>, pc: u32) -> Result<Flow, PlanError> {
    let insn = &insns[pc as usize];
    let class = insn.class();
    if class != CLASS_JMP && class != CLASS_JMP32 {
        return Ok(Flow::Next);
    }
    let op = insn.opc & 0xf0;
    Ok(match op {
        JMP_JA if class == CLASS_JMP32 => {
            Flow::Jump(target_of(insns, lddw_tails, pc, i64::from(insn.imm))?)
        }
        JMP_JA => Flow::Jump(target_of(insns, lddw_tails, pc, i64::from(insn.off))?),
        JMP_EXIT => Flow::Exit,
        JMP_CALL if insn.opc & SRC_X == 0 && insn.src == CALL_SRC_LOCAL => {
            Flow::CallLocal(target_of(insns, lddw_tails, pc, i64::from(insn.imm))?)
        }
        JMP_CALL => Flow::Next,
        _ => Flow::Branch(target_of(insns, lddw_tails, pc, i64::from(insn.off))?),
    })
}

/// The slot after `pc` in straight-line order, checked to exist.
fn next_pc(insns: &[Insn], pc: u32) -> Result<u32, PlanError> {
    let next = pc + insn_len(&insns[pc as usize]);
    if (next as usize) < insns.len() {
        Ok(next)
    } else {
        Err(PlanError::FallsOffEnd { pc })
    }
}

/// Plans every function reachable from `entry` (the tests' shorthand).
#[cfg(test)]
pub(crate) fn plan_program(insns: &[Insn], entry: u32) -> Result<ProgramPlan, PlanError> {
    plan_program_with(insns, entry, true, true)
}

/// As [`plan_program`]; `speculate`: whether to plan speculative regions (not in the
/// variant that counts blocks, see `crate::count`); `entry_facts`: whether the entry's
/// ranges may carry the entry facts ([`FunctionPlan::entry_facts`]).
pub(crate) fn plan_program_with(
    insns: &[Insn],
    entry: u32,
    speculate: bool,
    entry_facts: bool,
) -> Result<ProgramPlan, PlanError> {
    if entry as usize >= insns.len() {
        return Err(PlanError::BadTarget {
            pc: entry,
            target: i64::from(entry),
        });
    }
    let lddw_tails = lddw_tails(insns);
    // One stamp per function: slot `pc` was visited by the function being planned when
    // `visited[pc]` equals its stamp. Avoids a fresh set per function.
    let mut visited = vec![0u32; insns.len()];
    let mut functions = Vec::new();
    let mut seen_starts = BTreeSet::from([entry]);
    let mut pending = vec![entry];
    let mut calls_helpers = false;
    let mut callee_starts = BTreeSet::new();
    // Any helper call, reachable or not, rules the entry facts out.
    let facts = entry_facts && !insns.iter().any(is_helper_call);
    while let Some(start) = pending.pop() {
        let stamp = functions.len() as u32 + 1;
        let args = facts && start == entry;
        let (plan, callees) = plan_function(
            insns,
            (&lddw_tails, args),
            start,
            (&mut visited, stamp),
            speculate,
        )?;
        calls_helpers |= plan
            .pcs
            .iter()
            .any(|&pc| is_helper_call(&insns[pc as usize]));
        for callee in callees {
            callee_starts.insert(callee);
            if seen_starts.insert(callee) {
                pending.push(callee);
            }
        }
        functions.push(plan);
    }
    for f in &mut functions {
        f.is_callee = f.start != entry || callee_starts.contains(&entry);
        // A called copy of the entry starts with other r1 and r2: no entry facts.
        if f.entry_facts && f.is_callee {
            f.ranges = crate::ranges::ranges(insns, &lddw_tails, &f.pcs, entry, false)?;
            f.entry_facts = false;
        }
    }
    Ok(ProgramPlan {
        functions,
        calls_helpers,
    })
}

/// Slots holding the second half of an `lddw`, in straight-line decoding from slot 0.
fn lddw_tails(insns: &[Insn]) -> BTreeSet<u32> {
    let mut tails = BTreeSet::new();
    let mut pc = 0usize;
    while pc < insns.len() {
        if insns[pc].opc == OP_LDDW {
            tails.insert(pc as u32 + 1);
            pc += 2;
        } else {
            pc += 1;
        }
    }
    tails
}

/// One function's plan: the slots reachable from `start`, the branches converted to
/// straight-line code, the block starts, the speculative regions and the stack-based
/// accesses; also the starts of the functions it calls.
fn plan_function(
    insns: &[Insn],
    (lddw_tails, entry_facts): (&BTreeSet<u32>, bool),
    start: u32,
    (visited, stamp): (&mut [u32], u32),
    speculate: bool,
) -> Result<(FunctionPlan, Vec<u32>), PlanError> {
    let reach = reach(insns, lddw_tails, start, (visited, stamp))?;
    let conv = conversions(insns, &reach, speculate);
    let mut leaders = leaders(insns, start, &reach, &conv)?;
    let (regions, cold) = if speculate {
        speculative_regions(insns, &reach, &conv.ifconv, &mut leaders)
    } else {
        (BTreeMap::new(), BTreeSet::new())
    };
    let stack_bases = stack_bases(insns, &reach.pcs, &reach.flows, start)?;
    let ranges = crate::ranges::ranges(insns, lddw_tails, &reach.pcs, start, entry_facts)?;
    let Reach { pcs, callees, .. } = reach;
    Ok((
        FunctionPlan {
            start,
            pcs,
            leaders,
            ifconv: conv.ifconv,
            arms: conv.arms,
            regions,
            cold,
            is_callee: false,
            stack_bases,
            ranges,
            entry_facts,
        },
        callees,
    ))
}

/// What a depth-first search from a function's start finds.
struct Reach {
    /// The slots reached, in order.
    pcs: Vec<u32>,
    /// The starts of local calls' callees, in the order met.
    callees: Vec<u32>,
    /// The jumps (`ja` and conditional) into each slot.
    sources: BTreeMap<u32, Vec<u32>>,
    /// How control leaves each slot reached.
    flows: BTreeMap<u32, Flow>,
}

/// The slots reachable from `start` (marking them `stamp` in `visited`: `mark`), with
/// the jumps into each and the callees met.
fn reach(
    insns: &[Insn],
    lddw_tails: &BTreeSet<u32>,
    start: u32,
    mark: (&mut [u32], u32),
) -> Result<Reach, PlanError> {
    let (visited, stamp) = mark;
    let mut r = Reach {
        pcs: Vec::new(),
        callees: Vec::new(),
        sources: BTreeMap::new(),
        flows: BTreeMap::new(),
    };
    let mut stack = vec![start];
    visited[start as usize] = stamp;
    while let Some(pc) = stack.pop() {
        r.pcs.push(pc);
        let f = flow(insns, lddw_tails, pc)?;
        r.flows.insert(pc, f);
        match f {
            Flow::CallLocal(callee) => r.callees.push(callee),
            Flow::Jump(t) | Flow::Branch(t) => r.sources.entry(t).or_default().push(pc),
            Flow::Next | Flow::Exit => {}
        }
        for t in successors(insns, f, pc)?.into_iter().flatten() {
            if visited[t as usize] != stamp {
                visited[t as usize] = stamp;
                stack.push(t);
            }
        }
    }
    r.pcs.sort_unstable();
    Ok(r)
}

/// Where control goes after slot `pc`, which leaves by `f`: the branch target first
/// (a local call's callee is not a successor: the call returns to the next slot).
fn successors(insns: &[Insn], f: Flow, pc: u32) -> Result<[Option<u32>; 2], PlanError> {
    Ok(match f {
        Flow::Next | Flow::CallLocal(_) => [Some(next_pc(insns, pc)?), None],
        Flow::Jump(t) => [Some(t), None],
        Flow::Branch(t) => [Some(t), Some(next_pc(insns, pc)?)],
        Flow::Exit => [None, None],
    })
}

/// The branches a function translates as straight-line code.
struct Conversions {
    ifconv: BTreeMap<u32, IfConv>,
    /// Both arms of each branch converted as [`IfConv::Paths`].
    arms: BTreeMap<u32, [PathArm; 2]>,
    /// The `ja`s an if-conversion absorbs (they start no block).
    absorbed_jumps: BTreeSet<u32>,
}

/// Picks the branches to convert: if-conversions, then (with `speculate`, never in the
/// counting variant, whose counters follow the slot layout) path conversions.
fn conversions(insns: &[Insn], reach: &Reach, speculate: bool) -> Conversions {
    let mut c = Conversions {
        ifconv: BTreeMap::new(),
        arms: BTreeMap::new(),
        absorbed_jumps: BTreeSet::new(),
    };
    let mut found = Vec::new();
    for &pc in &reach.pcs {
        let Flow::Branch(t) = reach.flows[&pc] else {
            continue;
        };
        if let Some((shape, ja)) = if_conversion(insns, &reach.flows, &reach.sources, pc, t) {
            found.push((pc, shape, ja, None));
        } else if speculate {
            if let Some((join, both)) = path_conversion(insns, &reach.flows, pc, t) {
                found.push((pc, IfConv::Paths { join }, None, Some(both)));
            }
        }
    }
    // Running extrema stay branches (see `extrema`).
    let ends = crate::extrema::loop_ends(&reach.flows);
    let extrema: Vec<(u32, IfConv, u32)> = found
        .iter()
        .filter_map(|(pc, shape, _, arms)| {
            let head = crate::extrema::carried_extremum(
                insns,
                &reach.pcs,
                &ends,
                *pc,
                *shape,
                arms.as_ref(),
            )?;
            Some((*pc, *shape, head))
        })
        .collect();
    let kept = crate::extrema::kept(&extrema);
    for (pc, shape, ja, arms) in found {
        if kept.contains(&pc) {
            continue;
        }
        c.ifconv.insert(pc, shape);
        c.absorbed_jumps.extend(ja);
        if let Some(both) = arms {
            c.arms.insert(pc, both);
        }
    }
    c
}

/// The block starts the unconverted jumps and the conversions need.
fn leaders(
    insns: &[Insn],
    start: u32,
    reach: &Reach,
    conv: &Conversions,
) -> Result<BTreeSet<u32>, PlanError> {
    let mut leaders = BTreeSet::from([start]);
    for &pc in &reach.pcs {
        match reach.flows[&pc] {
            Flow::Jump(t) if !conv.absorbed_jumps.contains(&pc) => {
                leaders.insert(t);
            }
            Flow::Branch(t) if !conv.ifconv.contains_key(&pc) => {
                leaders.insert(t);
                leaders.insert(next_pc(insns, pc)?);
            }
            Flow::Branch(t) => match conv.ifconv.get(&pc) {
                Some(IfConv::BackTriangle { head, .. }) => {
                    leaders.insert(*head);
                }
                // The arms keep their blocks for their other entries (a block nothing
                // reaches any more is dropped by Cranelift).
                Some(&IfConv::Paths { join }) => {
                    leaders.extend([t, next_pc(insns, pc)?, join]);
                }
                _ => {}
            },
            _ => {}
        }
    }
    Ok(leaders)
}

/// Speculative regions, outermost first, on the branches left unconverted: each
/// region's head and its join (added to `leaders`), and the cold block starts inside
/// the regions.
fn speculative_regions(
    insns: &[Insn],
    reach: &Reach,
    ifconv: &BTreeMap<u32, IfConv>,
    leaders: &mut BTreeSet<u32>,
) -> (BTreeMap<u32, u32>, BTreeSet<u32>) {
    let mut regions = BTreeMap::new();
    let mut cold = BTreeSet::new();
    let mut covered_until = 0;
    for &pc in &reach.pcs {
        if pc < covered_until || ifconv.contains_key(&pc) {
            continue;
        }
        let Flow::Branch(t) = reach.flows[&pc] else {
            continue;
        };
        if let Some(join) = speculative_region(insns, &reach.flows, &reach.sources, pc, t) {
            regions.insert(pc, join);
            leaders.insert(join);
            cold.extend(leaders.iter().copied().filter(|&l| l > pc && l < join));
            covered_until = join;
        }
    }
    (regions, cold)
}

/// Most slots of a callee inlined at its calls.
pub(crate) const INLINE_SLOTS_MAX: usize = 24;

/// Whether calls to the function `f` may be inlined: at most [`INLINE_SLOTS_MAX`]
/// slots of ALU instructions, `lddw`s, forward jumps and `exit`s, none naming r10. Such
/// a body cannot trap, touch memory, call, or charge fuel (no backward jump), so
/// running it in the caller's frame, after the call's fuel charge and depth check and
/// with the caller's r6-r9 restored after it, is what the interpreter's call and
/// return do (it too lets the callee read the caller's r0 and r6-r9, and hands back
/// r0-r5 as the callee left them).
pub(crate) fn inlinable(insns: &[Insn], f: &FunctionPlan) -> bool {
    let simple = |pc: u32| {
        let insn = &insns[pc as usize];
        if insn.dst == REG_FP || insn.src == REG_FP {
            return false;
        }
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => true,
            CLASS_LD => insn.opc == OP_LDDW,
            CLASS_JMP | CLASS_JMP32 => match insn.opc & 0xf0 {
                JMP_EXIT => insn.class() == CLASS_JMP,
                JMP_CALL => false,
                JMP_JA if insn.class() == CLASS_JMP32 => insn.imm >= 0,
                _ => insn.off >= 0,
            },
            _ => false,
        }
    };
    f.pcs.len() <= INLINE_SLOTS_MAX && f.pcs.iter().all(|&pc| simple(pc))
}

/// The memory accesses among `pcs` whose base register holds a stack address on every
/// path from `start`: r10, or a register copied from one or computed from one by adding
/// or subtracting, or reloaded from a frame slot (at r10 plus a constant) that was
/// stored such an address (the `src` and `dst` of a loop that walks a stack buffer,
/// which a block parameter carries, often through a spill, and so translation's
/// per-value facts do not see).
///
/// A forward data-flow over registers r0-r9 and the 64 eight-byte slots of the frame
/// (a bit set: it holds such an address), met by intersection at joins, solved by a
/// worklist. Stores through other pointers are assumed not to overwrite spill slots.
/// It only picks which fast check an access tries first: every access is still checked
/// exactly, so a wrong guess costs a cold miss, never safety.
fn stack_bases(
    insns: &[Insn],
    pcs: &[u32],
    flows: &BTreeMap<u32, Flow>,
    start: u32,
) -> Result<BTreeSet<u32>, PlanError> {
    // Entry state of each slot; slots not reached yet hold every bit (the top).
    let mut state: BTreeMap<u32, StackFacts> = pcs
        .iter()
        .map(|&pc| {
            let top = StackFacts {
                regs: u16::MAX,
                frame: u64::MAX,
            };
            (pc, top)
        })
        .collect();
    state.insert(
        start,
        StackFacts {
            regs: FP_BIT,
            frame: 0,
        },
    );
    let mut work = BTreeSet::from([start]);
    while let Some(pc) = work.pop_first() {
        let out = state[&pc].after(&insns[pc as usize]);
        for t in successors(insns, flows[&pc], pc)?.into_iter().flatten() {
            if let Some(old) = state.get_mut(&t) {
                let met = old.meet(out);
                if met != *old {
                    *old = met;
                    work.insert(t);
                }
            }
        }
    }
    Ok(pcs
        .iter()
        .copied()
        .filter(|&pc| {
            let insn = &insns[pc as usize];
            let base = match insn.class() {
                CLASS_LDX => insn.src,
                CLASS_ST | CLASS_STX => insn.dst,
                _ => return false,
            };
            (state[&pc].regs | FP_BIT) & reg_bit(base) != 0
        })
        .collect())
}

/// r10's bit in [`StackFacts::regs`].
const FP_BIT: u16 = 1 << REG_FP;

/// Register `r`'s bit in [`StackFacts::regs`] (none for an out-of-range number).
fn reg_bit(r: u8) -> u16 {
    if r <= 10 {
        1u16 << r
    } else {
        0
    }
}

/// What [`stack_bases`] knows before one slot: the registers (bit `r`) and the
/// eight-byte frame slots (bit `i` for r10 - 8(i+1)) that hold a stack address.
#[derive(Clone, Copy, PartialEq, Eq)]
struct StackFacts {
    regs: u16,
    frame: u64,
}

impl StackFacts {
    /// At a join: what holds on every incoming path.
    fn meet(self, other: StackFacts) -> StackFacts {
        StackFacts {
            regs: self.regs & other.regs,
            frame: self.frame & other.frame,
        }
    }

    /// The facts after `insn` runs (the transfer function).
    fn after(self, insn: &Insn) -> StackFacts {
        use csx_ebpf::isa::{ALU_ADD, ALU_MOV, ALU_SUB, MODE_ATOMIC, MODE_MEM};
        let (mut s, mut frame) = (self.regs | FP_BIT, self.frame);
        let (dst, src) = (reg_bit(insn.dst), reg_bit(insn.src));
        let by_reg = insn.opc & SRC_X != 0;
        let mode = insn.opc & 0xe0;
        match insn.class() {
            CLASS_ALU64 => {
                let carried = match insn.opc & 0xf0 {
                    ALU_MOV if by_reg && insn.off == 0 => s & src != 0,
                    ALU_ADD | ALU_SUB if !by_reg => s & dst != 0,
                    ALU_ADD => s & (dst | src) != 0,
                    ALU_SUB => s & dst != 0,
                    _ => false,
                };
                s = if carried { s | dst } else { s & !dst };
            }
            CLASS_LDX => {
                let reloaded = insn.src == REG_FP
                    && mode == MODE_MEM
                    && frame_slots(insn.off, access_size(insn))
                        .1
                        .is_some_and(|i| frame & (1 << i) != 0);
                s = if reloaded { s | dst } else { s & !dst };
            }
            CLASS_ST | CLASS_STX if insn.dst == REG_FP => {
                let (mask, exact) = frame_slots(insn.off, access_size(insn));
                frame &= !mask;
                if insn.class() == CLASS_STX && mode == MODE_MEM && s & src != 0 {
                    if let Some(i) = exact {
                        frame |= 1 << i;
                    }
                }
                if mode == MODE_ATOMIC {
                    s &= !(src | 1);
                }
            }
            CLASS_ALU => s &= !dst,
            CLASS_LD if insn.opc == OP_LDDW => s &= !dst,
            // The legacy packet loads write r0 and may clobber r1-r5.
            CLASS_LD => s &= !0b11_1111,
            // An atomic may write its source (fetch) or r0 (cmpxchg).
            CLASS_STX if mode == MODE_ATOMIC => s &= !(src | 1),
            CLASS_JMP if insn.opc & 0xf0 == JMP_CALL => s &= !0b11_1111,
            _ => {}
        }
        StackFacts {
            regs: s | FP_BIT,
            frame,
        }
    }
}

/// The bytes a load or store moves.
pub(crate) fn access_size(insn: &Insn) -> i64 {
    use csx_ebpf::isa::{SIZE_B, SIZE_H, SIZE_W};
    match insn.opc & 0x18 {
        SIZE_B => 1,
        SIZE_H => 2,
        SIZE_W => 4,
        _ => 8,
    }
}

/// The frame slots an access of `size` bytes at r10 + `off` overlaps, as a mask, and
/// the slot it exactly covers (an aligned 8-byte access), if any.
fn frame_slots(off: i16, size: i64) -> (u64, Option<u32>) {
    let lo = i64::from(off);
    let hi = lo + size;
    let mut mask = 0u64;
    for i in 0..64i64 {
        let (slo, shi) = (-8 * (i + 1), -8 * i);
        if lo < shi && slo < hi {
            mask |= 1 << i;
        }
    }
    let exact = (size == 8 && lo % 8 == 0 && (-512..0).contains(&lo)).then(|| (-lo / 8 - 1) as u32);
    (mask, exact)
}

/// The end (exclusive) of the speculative region headed by the conditional jump at
/// `head` to `t`, if there is one: the smallest slot range from `head` that every jump
/// inside stays in (forward only) and that nothing outside jumps into, holding only
/// ALU instructions (no division), `lddw`, loads and jumps, within the size bounds.
fn speculative_region(
    insns: &[Insn],
    flows: &BTreeMap<u32, Flow>,
    sources: &BTreeMap<u32, Vec<u32>>,
    head: u32,
    t: u32,
) -> Option<u32> {
    use csx_ebpf::isa::{ALU_DIV, ALU_MOD, CLASS_LD, CLASS_LDX};
    if t <= head {
        return None;
    }
    let mut join = t;
    let (mut count, mut loads, mut branches) = (1, 0, 1);
    let mut q = head + 1;
    while q < join {
        let insn = &insns[q as usize];
        let len = insn_len(insn);
        // Slots no path reaches (and `lddw` tails) have no flow and never run.
        if let Some(&f) = flows.get(&q) {
            match f {
                Flow::Next => match insn.class() {
                    CLASS_ALU | CLASS_ALU64 if !matches!(insn.opc & 0xf0, ALU_DIV | ALU_MOD) => {}
                    CLASS_LD => {}
                    CLASS_LDX => loads += 1,
                    _ => return None,
                },
                Flow::Jump(tq) | Flow::Branch(tq) if tq > q => {
                    branches += 1;
                    join = join.max(tq);
                }
                _ => return None,
            }
            count += 1;
            if count > REGION_INSNS_MAX || loads > REGION_LOADS_MAX {
                return None;
            }
        }
        q += len;
    }
    let inside = |p: &u32| (head..join).contains(p);
    let single_entry =
        (head + 1..join).all(|q| sources.get(&q).is_none_or(|s| s.iter().all(inside)));
    // A lone branch over pure ALU code is the simple shapes' business.
    (single_entry && (loads > 0 || branches > 1)).then_some(join)
}

/// Whether `insn` may run speculatively in a converted arm: a pure ALU operation that
/// cannot trap. Division is pure too (by zero it yields 0 or keeps dst) but costs far
/// more than the branch it would save.
fn is_simple_alu(insn: &Insn) -> bool {
    use csx_ebpf::isa::{ALU_DIV, ALU_MOD};
    let class = insn.class();
    (class == CLASS_ALU || class == CLASS_ALU64)
        && insn.dst != REG_FP
        && !matches!(insn.opc & 0xf0, ALU_DIV | ALU_MOD)
}

fn arm_is_simple(insns: &[Insn], from: u32, to: u32) -> bool {
    to - from <= ARM_MAX && (from..to).all(|pc| is_simple_alu(&insns[pc as usize]))
}

/// The if-conversion of the conditional jump at `pc` to `t`, if it has a convertible
/// shape, with the slot of the diamond's `ja` (which then needs no block of its own).
fn if_conversion(
    insns: &[Insn],
    flows: &BTreeMap<u32, Flow>,
    sources: &BTreeMap<u32, Vec<u32>>,
    pc: u32,
    t: u32,
) -> Option<(IfConv, Option<u32>)> {
    // Nothing but this branch may enter the region: arm instructions run unconditionally.
    let untargeted = |from: u32, to: u32, except: Option<u32>| {
        (from..to).all(|q| match sources.get(&q) {
            None => true,
            Some(s) => Some(q) == except && s.as_slice() == [pc],
        })
    };
    if t <= pc {
        // Backward triangle: the arm ends in a `ja` to the same loop head.
        let arm_end = (pc + 1..=pc + 1 + ARM_MAX)
            .find(|&q| !insns.get(q as usize).is_some_and(is_simple_alu))?;
        return match flows.get(&arm_end) {
            Some(&Flow::Jump(j)) if j == t && untargeted(pc + 1, arm_end + 1, None) => Some((
                IfConv::BackTriangle {
                    head: t,
                    ja: arm_end,
                },
                Some(arm_end),
            )),
            _ => None,
        };
    }
    // Diamond: the instruction before the target is a forward `ja` past the else-arm.
    if t >= pc + 2 {
        if let Some(&Flow::Jump(join)) = flows.get(&(t - 1)) {
            if join > t
                && arm_is_simple(insns, pc + 1, t - 1)
                && arm_is_simple(insns, t, join)
                && untargeted(pc + 1, join, Some(t))
            {
                return Some((
                    IfConv::Diamond {
                        else_start: t,
                        join,
                    },
                    Some(t - 1),
                ));
            }
        }
    }
    if arm_is_simple(insns, pc + 1, t) && untargeted(pc + 1, t, None) {
        return Some((IfConv::Triangle { end: t }, None));
    }
    None
}

/// Most steps (instructions and jumps) followed from a branch on one arm of a
/// [`IfConv::Paths`] while looking for the join.
const PATH_STEPS_MAX: usize = 8;

/// The slots control visits from `from` on while it runs pure ALU instructions and
/// follows `ja`s, `from` first, ending at the first slot that is neither (or after
/// [`PATH_STEPS_MAX`] steps, or where a cycle closes).
fn straight_path(insns: &[Insn], flows: &BTreeMap<u32, Flow>, from: u32) -> Vec<u32> {
    let mut seen = vec![from];
    let mut q = from;
    while seen.len() <= PATH_STEPS_MAX {
        q = match flows.get(&q) {
            Some(Flow::Next) if is_simple_alu(&insns[q as usize]) => q + 1,
            Some(&Flow::Jump(t)) => t,
            _ => break,
        };
        if seen.contains(&q) {
            break;
        }
        seen.push(q);
    }
    seen
}

/// The [`IfConv::Paths`] conversion of the conditional jump at `pc` to `t`, if both
/// ways reach a common slot (the join) over at most [`ARM_MAX`] pure ALU instructions
/// and one backward `ja` each, with work on at least one of them: the join and the
/// arms (taken, fall-through).
fn path_conversion(
    insns: &[Insn],
    flows: &BTreeMap<u32, Flow>,
    pc: u32,
    t: u32,
) -> Option<(u32, [PathArm; 2])> {
    // A backward branch charges fuel itself when taken: left to the ordinary shapes.
    if t <= pc {
        return None;
    }
    let taken = straight_path(insns, flows, t);
    let fall = straight_path(insns, flows, pc + 1);
    let (j_fall, &join) = fall.iter().enumerate().find(|(_, q)| taken.contains(q))?;
    let j_taken = taken.iter().position(|&q| q == join)?;
    let arm = |path: &[u32]| -> Option<PathArm> {
        let mut arm = PathArm::default();
        for &q in path {
            match flows[&q] {
                Flow::Jump(target) if target <= q => {
                    if arm.back_jump.replace((q, target)).is_some() {
                        return None;
                    }
                }
                Flow::Jump(_) => {}
                _ => arm.alu.push(q),
            }
        }
        (arm.alu.len() as u32 <= ARM_MAX).then_some(arm)
    };
    let both = [arm(&taken[..j_taken])?, arm(&fall[..j_fall])?];
    (both.iter().any(|a| !a.alu.is_empty()) && join != pc).then_some((join, both))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(opc: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn::new(opc, dst, src, off, imm)
    }

    const MOV_K: u8 = 0xb7;
    const ADD_K: u8 = 0x07;
    const JEQ_K: u8 = 0x15;
    const JA: u8 = 0x05;
    const EXIT: u8 = 0x95;

    #[test]
    fn triangle_is_converted_and_needs_no_block() {
        let p = [
            i(MOV_K, 0, 0, 0, 1),
            i(JEQ_K, 1, 0, 1, 0),
            i(ADD_K, 0, 0, 0, 1),
            i(EXIT, 0, 0, 0, 0),
        ];
        let plan = plan_program(&p, 0).unwrap();
        let f = &plan.functions[0];
        assert_eq!(f.ifconv.get(&1), Some(&IfConv::Triangle { end: 3 }));
        assert_eq!(f.leaders, BTreeSet::from([0]));
        assert!(!plan.calls_helpers);
    }

    #[test]
    fn diamond_is_converted() {
        let p = [
            i(JEQ_K, 1, 0, 2, 0),
            i(MOV_K, 0, 0, 0, 1),
            i(JA, 0, 0, 1, 0),
            i(MOV_K, 0, 0, 0, 2),
            i(EXIT, 0, 0, 0, 0),
        ];
        let f = &plan_program(&p, 0).unwrap().functions[0];
        assert_eq!(
            f.ifconv.get(&0),
            Some(&IfConv::Diamond {
                else_start: 3,
                join: 4
            })
        );
        assert_eq!(f.leaders, BTreeSet::from([0]));
    }

    #[test]
    fn targeted_arm_is_not_converted() {
        let p = [
            i(JEQ_K, 1, 0, 2, 0),
            i(JEQ_K, 2, 0, 0, 0),
            i(MOV_K, 0, 0, 0, 1),
            i(EXIT, 0, 0, 0, 0),
        ];
        let f = &plan_program(&p, 0).unwrap().functions[0];
        // The first branch's arm holds a jump; the second one's arm is empty.
        assert!(!f.ifconv.contains_key(&0));
        assert_eq!(f.ifconv.get(&1), Some(&IfConv::Triangle { end: 2 }));
    }

    #[test]
    fn loops_and_calls() {
        let p = [
            i(0x85, 0, 1, 0, 2), // call local 3
            i(JA, 0, 0, -1, 0),  // ja -1: a self loop
            i(EXIT, 0, 0, 0, 0), // unreachable
            i(MOV_K, 0, 0, 0, 0),
            i(EXIT, 0, 0, 0, 0),
        ];
        let plan = plan_program(&p, 0).unwrap();
        assert_eq!(plan.functions.len(), 2);
        assert_eq!(plan.functions[0].pcs, vec![0, 1]);
        assert_eq!(plan.functions[1].start, 3);
        assert!(plan.functions[0].leaders.contains(&1));
    }

    #[test]
    fn bad_control_flow_is_reported() {
        assert_eq!(
            plan_program(&[i(JA, 0, 0, 5, 0)], 0).unwrap_err(),
            PlanError::BadTarget { pc: 0, target: 6 }
        );
        assert_eq!(
            plan_program(&[i(MOV_K, 0, 0, 0, 0)], 0).unwrap_err(),
            PlanError::FallsOffEnd { pc: 0 }
        );
    }
}
