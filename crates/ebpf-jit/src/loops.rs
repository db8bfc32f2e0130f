//! Loop versioning: which loops get a second, unchecked copy, and which of
//! their memory accesses that copy may make without a bounds check.
//!
//! For a natural loop (one header `h` dominating its body; loops inside it are
//! summarized, see `evaluate`; no calls), every register is evaluated symbolically
//! over one iteration as an affine form of the register values at the header
//! (`c0*r0 + ... + c10*r10 + k`, mod 2^64), or as unknown. A register whose value at every edge back to the header is its
//! own header value plus one constant (the same on every back-edge) is an *induction
//! variable* with that step (step 0: invariant); the rest are unknown at the header. An
//! access whose address is an affine form of induction variables moves by a constant
//! *stride* per iteration: its address in iteration `j` is `a0 + j * stride`, where `a0`
//! is computed from the register values on entry.
//!
//! The translation (see `translate`) then emits, where the loop is entered, a guard that
//! computes for each such access (or span of accesses through one pointer, see
//! [`GuardSpan`]) how many iterations keep it inside one mapped region,
//! takes the minimum `n`, and runs the unchecked copy for at most `n` iterations (a
//! counter on the back-edges, or, when fuel can bound the iterations ([`iteration_cost`]:
//! every charge in the body a backward jump, of any cost, to any slot of the body), the
//! fuel slice itself: an iteration starts only while the slice pays for the most one
//! iteration can charge and fewer than `n` iterations' least charge has been spent, and
//! the charges inside the loop subtract without a check), then the ordinary
//! checked loop from wherever it got to. Both copies charge the interpreter's fuel at the
//! interpreter's points, and the unchecked copy runs only iterations whose accesses are
//! proven in bounds (and whose fuel is paid), so value, trap and fuel are the
//! interpreter's.
//!
//! A register that is no induction variable but equals one plus a constant after every
//! back-edge (clang's rotated loops keep the index before its increment in a second
//! register, `r8 = r3` after `r3 += 1`, and address through it at the top of the next
//! iteration) is taken as that form at the header, and the guard checks that it holds
//! on entry too ([`VersionedLoop::lags`]); then an access through it is strided.
//!
//! A value an iteration stores in an 8-byte frame slot and loads back later in the same
//! iteration is the value stored ([`Slots`]: clang spills an index around an inner loop
//! that needs the registers, heaptop's `i`), as long as nothing that may write the slot
//! runs in between: a store whose bytes the plan's value ranges place elsewhere in the
//! frame does not count, a store through any other pointer or a call does. The same
//! relation holds of loops with inner loops as of flat ones (a lag is checked by the
//! guard wherever the unchecked copy is entered, `reguard` included).
//!
//! Where paths that moved a register by different constants meet, it is a
//! [`Sym::Within`] (the form plus some constant in a short span) instead of unknown, and
//! a register whose back-edge values all lie within a span of one sign past its header
//! value is a *bounded* induction variable (a filter's output cursor, moved on for the
//! rows it keeps: the scan program's stores of the rows kept). A store through one (loads
//! stay checked, see [`strided_accesses`]) moves by a different amount each iteration,
//! but always between 0 and the span's far end, so its bytes over `n` iterations lie
//! inside what a guard bounds with that end as the stride and the span as extra length
//! ([`Steps::stride_bound`], [`LoopAccess::reach`]).

use std::collections::{BTreeMap, BTreeSet};

use csx_ebpf::isa::*;
use csx_ebpf::limits::STACK_FRAME_SIZE;

use crate::analysis::{access_size, flow, insn_len, Flow, FunctionPlan, IfConv};

/// Most slots in a versioned loop (the symbolic pass keeps a state per slot).
const BODY_MAX: usize = 256;

/// Largest stride (bytes per iteration, either way) an unchecked access may have.
const STRIDE_MAX: i64 = 1 << 24;

/// 2^32, the scale between a 32-bit value and its copy in a register's high half.
const HIGH: i64 = 1 << 32;

/// A register's value as an affine form of the header's register values, mod 2^64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sym {
    Unknown,
    Affine {
        coef: [i64; 11],
        k: i64,
    },
    /// What a load of `size` bytes (zero-extended) from the frame at `r10 + off` read
    /// in this iteration. In a loop that calls nothing and never writes those bytes
    /// (`KeptSlots`), that is the slot's value on entry, an invariant (clang's spilled
    /// loop bound, reloaded for every compare); elsewhere it is as good as unknown, and
    /// only [`counted_exit`] looks at it.
    Slot {
        off: i16,
        size: u8,
    },
    /// A value some constant in `[k, k + reach]` past an affine form (mod 2^64,
    /// `0 < reach <= REACH_MAX`): where paths that moved a register by different
    /// constants meet, as an output cursor moved on only for the rows a filter keeps.
    Within {
        coef: [i64; 11],
        k: i64,
        reach: i64,
    },
}

/// Most bytes a [`Sym::Within`] spans (and a register moved by a bounded amount, see
/// [`induction`], may move in one iteration).
const REACH_MAX: i64 = 1 << 16;

/// Most bytes past its form a load the unchecked copy makes may lie (`p[i | 7]`).
const LOAD_REACH_MAX: i64 = 7;

impl Sym {
    fn konst(k: i64) -> Sym {
        Sym::Affine { coef: [0; 11], k }
    }

    fn reg(r: usize) -> Sym {
        let mut coef = [0; 11];
        coef[r] = 1;
        Sym::Affine { coef, k: 0 }
    }

    fn add(self, other: Sym, sign: i64) -> Sym {
        match (self, other) {
            (Sym::Affine { coef: a, k: ka }, Sym::Affine { coef: b, k: kb }) => Sym::Affine {
                coef: std::array::from_fn(|i| a[i].wrapping_add(b[i].wrapping_mul(sign))),
                k: ka.wrapping_add(kb.wrapping_mul(sign)),
            },
            _ => self.add_within(other, sign),
        }
    }

    /// [`Sym::add`] where a side is a [`Sym::Within`]: the spans add (`x - [k, k + r]`
    /// is `[x - k - r, x - k]`).
    fn add_within(self, other: Sym, sign: i64) -> Sym {
        let (Some((a, ka, ra)), Some((b, kb, rb))) = (self.parts(), other.parts()) else {
            return Sym::Unknown;
        };
        let k = match sign {
            1 => ka.wrapping_add(kb),
            -1 => ka.wrapping_sub(kb).wrapping_sub(rb),
            _ => return Sym::Unknown,
        };
        let coef = std::array::from_fn(|i| a[i].wrapping_add(b[i].wrapping_mul(sign)));
        Sym::within(coef, k, ra.saturating_add(rb))
    }

    /// An affine form, a [`Sym::Within`] or, past [`REACH_MAX`], unknown.
    fn within(coef: [i64; 11], k: i64, reach: i64) -> Sym {
        match reach {
            0 => Sym::Affine { coef, k },
            1..=REACH_MAX => Sym::Within { coef, k, reach },
            _ => Sym::Unknown,
        }
    }

    /// The form, constant and reach of an affine form (reach 0) or a [`Sym::Within`].
    fn parts(self) -> Option<([i64; 11], i64, i64)> {
        match self {
            Sym::Affine { coef, k } => Some((coef, k, 0)),
            Sym::Within { coef, k, reach } => Some((coef, k, reach)),
            Sym::Unknown | Sym::Slot { .. } => None,
        }
    }

    /// What a register holds where paths bringing `self` and `other` meet: either
    /// value, so the same form at constants a short way apart is a [`Sym::Within`]
    /// spanning both, and anything else unknown.
    fn join(self, other: Sym) -> Sym {
        if self == other {
            return self;
        }
        match (self.parts(), other.parts()) {
            (Some((a, ka, ra)), Some((b, kb, rb))) if a == b => {
                // `other`'s span from `self`'s constant: a short way either side.
                let d = kb.wrapping_sub(ka);
                if !(-REACH_MAX..=REACH_MAX).contains(&d) {
                    return Sym::Unknown;
                }
                let lo = d.min(0);
                let hi = ra.max(d + rb);
                Sym::within(a, ka.wrapping_add(lo), hi - lo)
            }
            _ => Sym::Unknown,
        }
    }

    /// `self | c` for a constant `c >= 0`: between `self` and `self + c` (the bits of
    /// `c` that `self` lacks are added, without a carry), so the form with `c` more
    /// reach. clang writes `p[i + 1]` as `p[i | 1]` where `i` steps by a multiple of 2
    /// (a word assembled from bytes, `p[i] | p[i | 1] << 8 | ...`).
    fn or_low(self, c: i64) -> Sym {
        match self.parts() {
            Some((coef, k, reach)) => Sym::within(coef, k, reach.saturating_add(c)),
            None => Sym::Unknown,
        }
    }

    fn scale(self, m: i64) -> Sym {
        match self {
            Sym::Affine { coef, k } => Sym::Affine {
                coef: coef.map(|c| c.wrapping_mul(m)),
                k: k.wrapping_mul(m),
            },
            Sym::Unknown | Sym::Slot { .. } | Sym::Within { .. } => Sym::Unknown,
        }
    }

    fn as_const(self) -> Option<i64> {
        match self {
            Sym::Affine { coef, k } if coef == [0; 11] => Some(k),
            _ => None,
        }
    }
}

type State = [Sym; 11];

/// One access the unchecked copy makes without a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoopAccess {
    pub pc: u32,
    /// The address (offset included) as an affine form of the header's registers.
    pub coef: [i64; 11],
    pub k: i64,
    /// Bytes the address may lie past `k` in an iteration, 0 but through a
    /// [`Sym::Within`] (an output cursor: the rows kept before it in the iteration).
    pub reach: i64,
    /// Bytes the address moves per iteration; through a register that moves by a
    /// bounded amount (see [`induction`]), the most it moves (the least, when it
    /// moves down), so every iteration's bytes lie within what the guard bounds.
    pub stride: i64,
    pub size: u8,
    pub write: bool,
    /// Addressed from r10 (coefficient 1 on r10): checked against the stack region.
    pub stack: bool,
}

/// A loop (holding no other versioned loop) with at least one access that can go
/// unchecked.
#[derive(Clone, Debug)]
pub(crate) struct VersionedLoop {
    pub header: u32,
    /// Every slot of the loop (the header included).
    pub body: BTreeSet<u32>,
    pub accesses: Vec<LoopAccess>,
    /// How its unchecked iterations may also run unrolled (see [`Unroll`]).
    pub unroll: Option<Unroll>,
    /// Forms the symbolic pass took for a 32-bit result as they are (see [`Narrow`]).
    pub narrow: Vec<Narrow>,
    /// The least and most fuel one iteration charges.
    pub fuel: Option<IterationFuel>,
    /// Slots at or after an inner loop's header in an iteration: when fuel bounds the
    /// iterations, a backward jump there charges with a check in the unchecked copy
    /// too (an inner loop runs any number of times, so the slice an iteration starts
    /// with cannot cover it), and a refill there resumes in the checked loop.
    pub checked_charges: BTreeSet<u32>,
    /// The loops inside it, each header with the slots of its natural body, when each
    /// of them makes a memory access (else none): the unchecked copy leaves for the
    /// checked loop where one is entered (see `translate/inner.rs`).
    pub inner: BTreeMap<u32, BTreeSet<u32>>,
    /// Slots outside the inner loops every path from which enters an inner loop before
    /// the iteration ends (grep's match setup): cold in the unchecked copy, which leaves
    /// there (see `translate`'s `inner`).
    pub to_inner: BTreeSet<u32>,
    /// Registers the forms take as an induction variable plus a constant at the header,
    /// `(r, t, d)`: `r = t + d` (see [`induction`]); the guard runs the unchecked copy
    /// only when the registers on entry satisfy each.
    pub lags: Vec<(u8, u8, i64)>,
    /// Whether another loop holds it, so its guard runs at every iteration of that
    /// loop (see `translate/cached.rs`).
    pub nested: bool,
}

/// Most bytes one [`GuardSpan`] covers in an iteration.
const SPAN_MAX: i64 = 4096;

/// Accesses of a versioned loop that its guard bounds as one: those through the same
/// pointer form (the same coefficients, so the same stride) in the same direction,
/// whose bytes in an iteration lie within [`SPAN_MAX`] of each other, as the span of
/// bytes they cover (`[k, k + len)` past the form). An iteration whose span lies in one
/// region has each of those accesses in it, so the guard computes one count for
/// clang's unrolled runs of loads (`out[k + 0] ... out[k + 7]`) instead of one each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GuardSpan {
    pub coef: [i64; 11],
    pub k: i64,
    pub len: i64,
    pub stride: i64,
    pub write: bool,
    pub stack: bool,
    /// The slots of the accesses it covers.
    pub pcs: Vec<u32>,
}

/// The spans the guard of a loop with `accesses` bounds (see [`GuardSpan`]).
pub(crate) fn guard_spans(accesses: &[LoopAccess]) -> Vec<GuardSpan> {
    let mut sorted: Vec<&LoopAccess> = accesses.iter().collect();
    sorted.sort_by_key(|a| (a.coef, a.write, a.k));
    let mut spans: Vec<GuardSpan> = Vec::new();
    for a in sorted {
        let end = a.k.checked_add(i64::from(a.size) + a.reach);
        if let Some(s) = spans.last_mut() {
            let len = end.and_then(|e| e.checked_sub(s.k));
            if let Some(len) =
                len.filter(|&l| s.coef == a.coef && s.write == a.write && l <= SPAN_MAX)
            {
                s.len = s.len.max(len);
                s.pcs.push(a.pc);
                continue;
            }
        }
        spans.push(GuardSpan {
            coef: a.coef,
            k: a.k,
            len: i64::from(a.size) + a.reach,
            stride: a.stride,
            write: a.write,
            stack: a.stack,
            pcs: vec![a.pc],
        });
    }
    spans
}

/// A 32-bit result (a zero-extension: an ALU32 `mov`, `add`, `sub` or `lsh`, or
/// `rsh 32` of a value shifted up by 32; a sign-extension: `arsh 32` of one) that the
/// symbolic pass took as the affine form it extends, which is exact while that form,
/// plus `k`'s bias (2^31 for a sign-extension), lies in `[0, 2^32)`. The form moves by
/// `stride` per iteration, so the guard bounds the unchecked iterations to those in
/// which it stays in that range (an int index into a stack array, `buf[j]` with
/// `j--`). By induction over the iterations the guard lets run, every other form of
/// the pass is then exact too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Narrow {
    pub pc: u32,
    /// The form that must stay in `[0, 2^32)`, of the header's registers on entry.
    pub coef: [i64; 11],
    pub k: i64,
    pub stride: i64,
}

/// The loops of `plan` worth versioning.
///
/// `local_calls_ok`: whether a loop may hold local calls (when the program calls no
/// helper, so nothing a callee runs can remap a region).
pub(crate) fn plan_loops(
    insns: &[Insn],
    plan: &FunctionPlan,
    local_calls_ok: bool,
) -> Vec<VersionedLoop> {
    // Only functions with a backward jump can hold a loop.
    let has_back = plan.pcs.iter().any(|&pc| {
        let insn = &insns[pc as usize];
        matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
            && insn.opc & 0xf0 != JMP_CALL
            && insn.opc & 0xf0 != JMP_EXIT
            && (if insn.class() == CLASS_JMP32 && insn.opc & 0xf0 == JMP_JA {
                insn.imm < 0
            } else {
                insn.off < 0
            })
    });
    if !has_back {
        return Vec::new();
    }
    let tails = lddw_tails(insns);
    let Some(graph) = Graph::new(insns, &tails, plan, local_calls_ok) else {
        return Vec::new();
    };
    let found = natural_loops(&graph);
    let mut loops = Vec::new();
    for (i, l) in found.iter().enumerate() {
        let nested = found
            .iter()
            .enumerate()
            .any(|(j, other)| j != i && other.body[l.h]);
        // The back-edges of the loops inside this one.
        let inner_back = found
            .iter()
            .filter(|inner| inner.h != l.h && l.body[inner.h])
            .flat_map(|inner| inner.latches.iter().map(|&u| (u, inner.h)))
            .collect();
        let shape = LoopShape {
            h: l.h,
            latches: &l.latches,
            nested,
            inner_back,
        };
        if let Some(l) = choose_variant(insns, plan, &graph, &shape) {
            loops.push(l);
        }
    }
    innermost_versioned(loops)
}

/// The versioned loops with no other versioned loop inside: a slot's translation
/// belongs to one loop's copies, and a loop holding inner loops is versioned only where
/// none of them is (the inner loop's own plan is the finer one).
fn innermost_versioned(loops: Vec<VersionedLoop>) -> Vec<VersionedLoop> {
    let headers: Vec<u32> = loops.iter().map(|l| l.header).collect();
    loops
        .into_iter()
        .filter(|l| {
            !headers
                .iter()
                .any(|&h| h != l.header && l.body.contains(&h))
        })
        .collect()
}

fn lddw_tails(insns: &[Insn]) -> BTreeSet<u32> {
    let mut tails = BTreeSet::new();
    let mut pc = 0;
    while pc < insns.len() {
        let len = insn_len(&insns[pc]) as usize;
        if len == 2 {
            tails.insert(pc as u32 + 1);
        }
        pc += len;
    }
    tails
}

/// The function's slots as a graph (indexes into `plan.pcs`).
struct Graph {
    n: usize,
    pcs: Vec<u32>,
    succ: Vec<Vec<usize>>,
    pred: Vec<Vec<usize>>,
    /// Slots holding a call that bars versioning (a helper; a local call when the
    /// program calls helpers).
    calls: Vec<bool>,
    /// The node of the function's first slot.
    start: usize,
    /// What each slot may write in the current frame (see [`FrameWrite`]).
    writes: Vec<FrameWrite>,
}

/// The frame bytes a slot may write, as offsets from r10 (see [`Slots`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrameWrite {
    /// None: no store, no call.
    Nothing,
    /// Some of `[lo, hi)`: a store through r10, or through a pointer the plan's value
    /// ranges place in the frame.
    Within(i64, i64),
    /// Any: a store through another pointer (it may hold a frame address), a call.
    Anything,
}

impl FrameWrite {
    /// What slot `pc` may write, by the value ranges of `plan`.
    fn of(insn: &Insn, pc: u32, plan: &FunctionPlan) -> FrameWrite {
        let size = access_size(insn);
        let off = i64::from(insn.off);
        match (insn.class(), insn.opc & 0xe0) {
            (CLASS_ST | CLASS_STX, MODE_MEM | MODE_ATOMIC) => match plan.ranges.frame(pc, insn.dst)
            {
                Some((lo, hi)) => FrameWrite::Within(lo + off, hi + off + size),
                None => FrameWrite::Anything,
            },
            (CLASS_JMP, _) if insn.opc & 0xf0 == JMP_CALL => FrameWrite::Anything,
            _ => FrameWrite::Nothing,
        }
    }
}

/// What an iteration has stored so far in 8-byte frame slots, by offset from r10: the
/// value a later 8-byte load there reads (clang spills an index around an inner loop
/// and reloads it after, heaptop's `i`). A slot leaves the map when anything may have
/// written one of its bytes since.
type Slots = BTreeMap<i16, Sym>;

/// `slots` after node `u` of `g` runs with the registers `s` before it.
fn slots_after(insns: &[Insn], g: &Graph, u: usize, s: &State, slots: &Slots) -> Slots {
    let pc = g.pcs[u];
    let insn = &insns[pc as usize];
    let mut out = slots.clone();
    match g.writes[u] {
        FrameWrite::Nothing => {}
        FrameWrite::Anything => out.clear(),
        FrameWrite::Within(lo, hi) => {
            out.retain(|&off, _| i64::from(off) + 8 <= lo || hi <= i64::from(off))
        }
    }
    let whole_slot = insn.dst == 10 && insn.opc & 0xe0 == MODE_MEM && access_size(insn) == 8;
    let stored = match insn.class() {
        CLASS_STX if whole_slot => s.get(insn.src as usize).copied(),
        CLASS_ST if whole_slot => Some(Sym::konst(i64::from(insn.imm))),
        _ => None,
    };
    if let Some(v) = stored.filter(|v| v.parts().is_some()) {
        out.insert(insn.off, v);
    }
    out
}

/// What `insn`, an 8-byte load from a frame slot ([`frame_slot`]), reads when an earlier
/// store of the iteration left the slot in `slots`.
fn forwarded(insn: &Insn, slots: &Slots) -> Option<Sym> {
    match frame_slot(insn)? {
        Sym::Slot { off, size: 8 } => slots.get(&off).copied(),
        _ => None,
    }
}

/// The slots known where two paths meet: those both know, as the join of the values.
fn join_slots(a: &Slots, b: &Slots) -> Slots {
    a.iter()
        .filter_map(|(&off, &v)| {
            let j = v.join(*b.get(&off)?);
            j.parts().is_some().then_some((off, j))
        })
        .collect()
}

impl Graph {
    fn new(
        insns: &[Insn],
        tails: &BTreeSet<u32>,
        plan: &FunctionPlan,
        local_calls_ok: bool,
    ) -> Option<Graph> {
        let pcs = plan.pcs.clone();
        let n = pcs.len();
        let index: BTreeMap<u32, usize> = pcs.iter().enumerate().map(|(i, &p)| (p, i)).collect();
        let mut succ = vec![Vec::new(); n];
        let mut pred = vec![Vec::new(); n];
        let mut calls = vec![false; n];
        let mut writes = vec![FrameWrite::Nothing; n];
        for (i, &pc) in pcs.iter().enumerate() {
            let insn = &insns[pc as usize];
            writes[i] = FrameWrite::of(insn, pc, plan);
            let next = pc + insn_len(insn);
            let f = flow(insns, tails, pc).ok()?;
            let targets: Vec<u32> = match f {
                Flow::Next => {
                    calls[i] = insn.class() == CLASS_JMP && insn.opc & 0xf0 == JMP_CALL;
                    vec![next]
                }
                Flow::CallLocal(_) => {
                    calls[i] = !local_calls_ok;
                    vec![next]
                }
                Flow::Jump(t) => vec![t],
                Flow::Branch(t) => vec![t, next],
                Flow::Exit => vec![],
            };
            for t in targets {
                let j = *index.get(&t)?;
                if !succ[i].contains(&j) {
                    succ[i].push(j);
                    pred[j].push(i);
                }
            }
        }
        let start = *index.get(&plan.start)?;
        Some(Graph {
            n,
            start,
            pcs,
            succ,
            pred,
            calls,
            writes,
        })
    }

    /// Immediate dominators (Cooper, Harvey and Kennedy), by node; the start is its own.
    fn dominators(&self) -> Vec<usize> {
        // Reverse postorder from the function's start.
        let start = self.start;
        let mut order = Vec::with_capacity(self.n);
        let mut seen = vec![false; self.n];
        let mut stack = vec![(start, 0usize)];
        seen[start] = true;
        while let Some((u, i)) = stack.pop() {
            if i < self.succ[u].len() {
                stack.push((u, i + 1));
                let v = self.succ[u][i];
                if !seen[v] {
                    seen[v] = true;
                    stack.push((v, 0));
                }
            } else {
                order.push(u);
            }
        }
        order.reverse();
        let mut rpo = vec![usize::MAX; self.n];
        for (i, &u) in order.iter().enumerate() {
            rpo[u] = i;
        }
        const NONE: usize = usize::MAX;
        let mut idom = vec![NONE; self.n];
        idom[start] = start;
        let mut changed = true;
        while changed {
            changed = false;
            for &u in order.iter().skip(1) {
                let mut new = NONE;
                for &p in &self.pred[u] {
                    if idom[p] == NONE {
                        continue;
                    }
                    new = if new == NONE {
                        p
                    } else {
                        let (mut a, mut b) = (p, new);
                        while a != b {
                            while rpo[a] > rpo[b] {
                                a = idom[a];
                            }
                            while rpo[b] > rpo[a] {
                                b = idom[b];
                            }
                        }
                        a
                    };
                }
                if new != idom[u] {
                    idom[u] = new;
                    changed = true;
                }
            }
        }
        idom
    }

    /// Whether `a` dominates `b`.
    fn dominates(&self, idom: &[usize], a: usize, b: usize) -> bool {
        let mut x = b;
        loop {
            if x == a {
                return true;
            }
            let up = idom[x];
            if up == usize::MAX || up == x {
                return false;
            }
            x = up;
        }
    }
}

/// A natural loop: its header, the nodes with back-edges to it, whether another loop
/// holds it.
struct LoopShape<'a> {
    h: usize,
    latches: &'a [usize],
    nested: bool,
    /// The back-edges `(latch, header)` of the loops inside it.
    inner_back: Vec<(usize, usize)>,
}

/// The versioning plan of a loop, taking 32-bit results as the forms they extend (see
/// [`Narrow`]) only where that makes more accesses unchecked than without, and never in
/// place of a plan with an unrolled copy. A loop inside another that neither plan
/// versions may still be versioned around accesses that keep the stack's check (see
/// [`unchecked_at`]) when it unchecks a region access ([`unchecks_a_region`]); one that
/// is keeps the plan it had without them.
fn choose_variant(
    insns: &[Insn],
    plan: &FunctionPlan,
    g: &Graph,
    shape: &LoopShape<'_>,
) -> Option<VersionedLoop> {
    let pick = |stack_checks: bool| {
        let exact = version_loop(insns, plan, g, shape, (false, stack_checks));
        if exact.as_ref().is_some_and(|l| l.unroll.is_some()) {
            return exact;
        }
        let narrowed = version_loop(insns, plan, g, shape, (true, stack_checks));
        let count = |l: &Option<VersionedLoop>| l.as_ref().map_or(0, |l| l.accesses.len());
        if count(&narrowed) > count(&exact) {
            narrowed
        } else {
            exact
        }
    };
    pick(false).or_else(|| pick(true).filter(|l| unchecks_a_region(plan, l)))
}

/// Whether versioned loop `l` makes some access unchecked that would otherwise go
/// through a region cache (not only stack accesses, which keep a constant check
/// anyway): a loop that keeps the stack's checks repays its guard and its second copy
/// only then (a merge between stack buffers at data-dependent indexes took 13% longer
/// versioned; a counting sort's scatter beside its input load, 40% less).
fn unchecks_a_region(plan: &FunctionPlan, l: &VersionedLoop) -> bool {
    l.accesses
        .iter()
        .any(|a| !a.stack && !plan.stack_bases.contains(&a.pc))
}

/// A natural loop of a [`Graph`]: its header, the nodes with back-edges to it, and its
/// body (by node).
struct NaturalLoop {
    h: usize,
    latches: Vec<usize>,
    body: Vec<bool>,
}

/// The natural loops of `g`, by header (a back-edge is an edge to a node that
/// dominates its source).
fn natural_loops(g: &Graph) -> Vec<NaturalLoop> {
    let idom = g.dominators();
    let mut by_header: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for u in 0..g.n {
        for &h in &g.succ[u] {
            if g.dominates(&idom, h, u) {
                by_header.entry(h).or_default().push(u);
            }
        }
    }
    by_header
        .into_iter()
        .map(|(h, latches)| NaturalLoop {
            h,
            body: natural_body(g, h, &latches),
            latches,
        })
        .collect()
}

/// The natural loop of header `h` with back-edges from `latches`: the header and every
/// node reaching a latch without passing it.
fn natural_body(g: &Graph, h: usize, latches: &[usize]) -> Vec<bool> {
    let mut in_body = vec![false; g.n];
    in_body[h] = true;
    let mut work: Vec<usize> = latches.to_vec();
    while let Some(u) = work.pop() {
        if in_body[u] {
            continue;
        }
        in_body[u] = true;
        work.extend(g.pred[u].iter().copied().filter(|&p| !in_body[p]));
    }
    in_body
}

/// The versioning plan for the natural loop `shape`, if it is call-free, translated as
/// whole blocks, and has an access that can go unchecked. `narrow`: take 32-bit results
/// as the forms they extend (see [`Narrow`]).
///
/// A loop holding other loops (grep's scan, whose pattern match is a loop of its own)
/// is evaluated over the acyclic body left without the inner back-edges, each inner
/// header taking as unknown every register that differs along them (see [`evaluate`]);
/// it is not unrolled, and 32-bit results are never taken as forms. Fuel may bound its
/// iterations (see [`iteration_cost`]) over that acyclic body, the charges at or after
/// an inner header excepted ([`VersionedLoop::checked_charges`]).
///
/// A loop inside another runs its guard at every entry, so it is versioned only when it
/// looks long enough to repay it, or the guard is cheap: every access goes unchecked,
/// and either the loop is *counted* (every exit tests induction variables or constants,
/// none tests loaded data) or every access is to the stack (a small array the program
/// walks in short loops of its own). A search loop over a mapped region that usually
/// stops at its first or second iteration (grep's pattern match) would pay the guard
/// for nothing; an insertion sort's shift through a stack array repays it.
fn version_loop(
    insns: &[Insn],
    plan: &FunctionPlan,
    g: &Graph,
    shape: &LoopShape<'_>,
    (narrow, stack_checks): (bool, bool),
) -> Option<VersionedLoop> {
    let in_body = natural_body(g, shape.h, shape.latches);
    if in_body.iter().filter(|&&b| b).count() > BODY_MAX {
        return None;
    }
    let nodes: Vec<usize> = (0..g.n).filter(|&u| in_body[u]).collect();
    if nodes.iter().any(|&u| g.calls[u]) {
        return None;
    }
    let body: BTreeSet<u32> = nodes.iter().map(|&u| g.pcs[u]).collect();
    if !whole_shapes(plan, &body) {
        return None;
    }
    let inner = !shape.inner_back.is_empty();
    if inner && narrow {
        return None;
    }
    let order = body_order(g, &in_body, shape, nodes.len())?;
    let (states, steps) = induction(insns, g, &in_body, shape, &order, narrow);
    let walk = Walk {
        insns,
        g,
        in_body: &in_body,
        order: &order,
        states: &states,
        steps: &steps,
        stack_checks,
    };
    let accesses = strided_accesses(&walk);
    if accesses.is_empty()
        || (shape.nested && !worth_nesting(plan, &walk, &accesses))
        || (inner && !unchecked_around_inner(plan, g, shape, &walk, &accesses))
    {
        return None;
    }
    let narrow = if narrow { narrowed(&walk)? } else { Vec::new() };
    let checked_charges = after_inner(g, &in_body, shape, &order);
    let mut inner_bodies = inner_bodies(g, shape);
    // A copy leaves at its inner loops only when each makes a memory access (grep's
    // match): one without (a bit count's `x &= x - 1`) is entered on most iterations,
    // and leaving there cost a guard each time (popsum 7% slower).
    let touches = |slots: &BTreeSet<u32>| {
        slots
            .iter()
            .any(|&pc| matches!(insns[pc as usize].class(), CLASS_LDX | CLASS_ST | CLASS_STX))
    };
    if !inner_bodies.values().all(touches) {
        inner_bodies.clear();
    }
    let to_inner = to_inner(g, shape, &walk, &inner_bodies);
    let (unroll, fuel) = if inner {
        // A loop's closing branch converted with its arm charges a select: never one
        // of the checked ones.
        let converted = checked_charges
            .iter()
            .any(|pc| matches!(plan.ifconv.get(pc), Some(IfConv::BackTriangle { .. })));
        (None, iteration_fuel(&walk, shape).filter(|_| !converted))
    } else {
        (
            unroll_plan(plan, &walk, &body).map(|mut u| {
                u.carried = (0..10u8)
                    .filter(|&r| {
                        walk.steps.read[r as usize] && walk.steps.exact[r as usize].is_none()
                    })
                    .collect();
                u
            }),
            iteration_fuel(&walk, shape),
        )
    };
    let lags = (0..10)
        .filter_map(|r| walk.steps.lag[r].map(|(t, d)| (r as u8, t as u8, d)))
        .collect();
    let mut l = VersionedLoop {
        lags,
        header: g.pcs[shape.h],
        body,
        accesses,
        unroll,
        narrow,
        fuel,
        checked_charges,
        inner: inner_bodies,
        to_inner,
        nested: shape.nested,
    };
    if shape.nested && !charged_once_at_header(insns, &l) {
        l.fuel = None;
    }
    Some(l)
}

/// The slots an iteration of `shape` reaches from an inner loop's header (those
/// headers included), over the acyclic body in topological `order`.
fn after_inner(
    g: &Graph,
    in_body: &[bool],
    shape: &LoopShape<'_>,
    order: &[usize],
) -> BTreeSet<u32> {
    let mut after = vec![false; g.n];
    for &(_, v) in &shape.inner_back {
        after[v] = true;
    }
    for &u in order {
        if after[u] {
            for &v in &g.succ[u] {
                after[v] |= forward_edge(shape, in_body, u, v);
            }
        }
    }
    (0..g.n).filter(|&u| after[u]).map(|u| g.pcs[u]).collect()
}

/// The headers of the loops inside `shape`, each with the slots of its natural body
/// (the union over its back-edges).
fn inner_bodies(g: &Graph, shape: &LoopShape<'_>) -> BTreeMap<u32, BTreeSet<u32>> {
    let mut latches: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(latch, header) in &shape.inner_back {
        latches.entry(header).or_default().push(latch);
    }
    latches
        .into_iter()
        .map(|(h, ls)| {
            let body = natural_body(g, h, &ls);
            let slots = (0..g.n).filter(|&u| body[u]).map(|u| g.pcs[u]).collect();
            (g.pcs[h], slots)
        })
        .collect()
}

/// The slots of `shape` outside its inner loops from which every path enters an inner
/// loop before it leaves the loop or goes back to the header (see
/// [`VersionedLoop::to_inner`]).
fn to_inner(
    g: &Graph,
    shape: &LoopShape<'_>,
    w: &Walk<'_>,
    inner: &BTreeMap<u32, BTreeSet<u32>>,
) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    if inner.is_empty() {
        return out;
    }
    let in_inner = |pc: u32| inner.values().any(|b| b.contains(&pc));
    for &u in w.order.iter().rev() {
        let pc = g.pcs[u];
        if in_inner(pc) {
            continue;
        }
        let doomed = !g.succ[u].is_empty()
            && g.succ[u].iter().all(|&v| {
                let t = g.pcs[v];
                w.in_body[v] && v != shape.h && (inner.contains_key(&t) || out.contains(&t))
            });
        if doomed {
            out.insert(pc);
        }
    }
    out
}

/// Whether every iteration of `l` charges the same fuel on a back-edge to the header,
/// its first slot. A loop inside another is fuel bounded only then: with back-edges of
/// uneven cost or into a slot before the header it took more instructions bounded than
/// counted (editdist's inner loop, 24 iterations an entry: 13% more, more spills).
fn charged_once_at_header(insns: &[Insn], l: &VersionedLoop) -> bool {
    l.fuel.is_some_and(|f| f.least == f.most)
        && l.body.first() == Some(&l.header)
        && !enters_inside(insns, l)
}

/// Whether translation covers `body` in whole shapes: an if-conversion or speculative
/// region that starts in the loop must end in it.
fn whole_shapes(plan: &FunctionPlan, body: &BTreeSet<u32>) -> bool {
    body.iter().all(|pc| {
        plan.ifconv
            .get(pc)
            .is_none_or(|shape| body.contains(&shape.join()))
            && plan.regions.get(pc).is_none_or(|join| body.contains(join))
    })
}

/// Whether the edge `u -> v` of the loop `shape` stays in its acyclic body: it ends in
/// the body, and is neither a back-edge to the header nor one of an inner loop.
fn forward_edge(shape: &LoopShape<'_>, in_body: &[bool], u: usize, v: usize) -> bool {
    in_body[v] && v != shape.h && !shape.inner_back.contains(&(u, v))
}

/// The body's nodes in topological order without the back-edges to the header and
/// those of inner loops, or `None` when there is a cycle left (an irreducible one).
fn body_order(
    g: &Graph,
    in_body: &[bool],
    shape: &LoopShape<'_>,
    len: usize,
) -> Option<Vec<usize>> {
    let mut indeg: BTreeMap<usize, usize> = BTreeMap::new();
    for u in (0..g.n).filter(|&u| in_body[u]) {
        for &v in &g.succ[u] {
            if forward_edge(shape, in_body, u, v) {
                *indeg.entry(v).or_default() += 1;
            }
        }
    }
    let mut order = Vec::with_capacity(len);
    let mut ready = vec![shape.h];
    while let Some(u) = ready.pop() {
        order.push(u);
        for &v in &g.succ[u] {
            if forward_edge(shape, in_body, u, v) {
                let d = indeg.get_mut(&v).expect("counted");
                *d -= 1;
                if *d == 0 {
                    ready.push(v);
                }
            }
        }
    }
    (order.len() == len).then_some(order)
}

/// What each register moves per iteration: `exact` for induction variables (the
/// same step on every back-edge), `bounded` for a register whose step on each
/// back-edge is some constant in `[lo, hi]`, all of one sign (an output cursor moved
/// on only for the rows kept): a *bounded* induction variable, whose value at the
/// header in iteration `j` lies between its value on entry and that plus `j * hi`.
#[derive(Clone, Copy, Debug)]
struct Steps {
    exact: [Option<i64>; 11],
    bounded: [Option<(i64, i64)>; 11],
    /// A register that is no induction variable itself but, on every back-edge, an
    /// exact induction variable `t` plus a constant `d` (clang's rotated loops keep
    /// the index before its increment in a second register: `r8 = r3` then `r3 += 1`
    /// at the top): `Some((t, d))`, and the header takes it as `t + d`.
    lag: [Option<(usize, i64)>; 11],
    /// The registers some iteration reads with their value at the header
    /// ([`read_at_header`]).
    read: [bool; 11],
}

impl Steps {
    /// Whether a form moves by the same amount every iteration (its registers are all
    /// induction variables with exact steps).
    fn exact_form(&self, coef: &[i64; 11]) -> bool {
        (0..11).all(|r| coef[r] == 0 || self.exact[r].is_some())
    }

    /// The stride a guard may bound a form of the header's registers by: what it
    /// moves per iteration, or for a form that moves by a bounded amount, all of one
    /// sign, the most it moves that way (the hull of its values over `n` iterations
    /// is then what a guard of that stride checks); `None` when it moves both ways, a
    /// register in it is neither kind of induction variable, or it overflows.
    fn stride_bound(&self, coef: &[i64; 11]) -> Option<i64> {
        if self.exact_form(coef) {
            // Induction variables only: the exact stride, wrapping (as addresses do).
            return Some((0..11).fold(0i64, |stride, r| {
                let step = self.exact[r].unwrap_or(0);
                stride.wrapping_add(coef[r].wrapping_mul(step))
            }));
        }
        let (mut lo, mut hi) = (0i64, 0i64);
        for (r, &c) in coef.iter().enumerate().filter(|(_, &c)| c != 0) {
            let (a, b) = match (self.exact[r], self.bounded[r]) {
                (Some(s), _) => (s, s),
                (None, Some(span)) => span,
                (None, None) => return None,
            };
            let (x, y) = (c.checked_mul(a)?, c.checked_mul(b)?);
            lo = lo.checked_add(x.min(y))?;
            hi = hi.checked_add(x.max(y))?;
        }
        match (lo, hi) {
            _ if lo == hi => Some(lo),
            _ if lo >= 0 => Some(hi),
            _ if hi <= 0 => Some(lo),
            _ => None,
        }
    }
}

/// Induction variables: assume every register is one, evaluate, drop those whose
/// back-edge value is neither `header + step` (same step everywhere) nor `header` plus
/// a bounded step ([`Steps`]), until stable. The states at each node's entry, and each
/// register's step (`None` in both of [`Steps`]: not an induction variable).
///
/// A register dropped so whose value on every back-edge is an exact induction variable
/// `t`'s plus one constant `d` equals `t + d` at the header from the second iteration
/// on, and on the first too when its value on entry does: the header takes it as that
/// form ([`Steps::lag`]) and the guard checks the entry (`VersionedLoop::lags`), so an
/// access through it is strided. Only in loops without inner loops, whose unchecked
/// copy is entered through the guard alone.
fn induction(
    insns: &[Insn],
    g: &Graph,
    in_body: &[bool],
    shape: &LoopShape<'_>,
    order: &[usize],
    narrow: bool,
) -> (BTreeMap<usize, State>, Steps) {
    let mut good = [true; 11];
    let mut lag: [Option<(usize, i64)>; 11] = [None; 11];
    // Registers whose relation failed once: never tried again, so the loop ends. One
    // that no iteration reads before writing it needs none (its value at the header
    // matters to nothing, and requiring the relation on entry could only fail).
    let read = read_at_header(insns, g, in_body, shape, order);
    let mut no_lag: [bool; 11] = std::array::from_fn(|r| !read[r]);
    loop {
        let mut header: State = std::array::from_fn(|r| match lag[r] {
            Some((t, d)) => Sym::reg(t).add(Sym::konst(d), 1),
            None if good[r] => Sym::reg(r),
            None => Sym::Unknown,
        });
        header[10] = Sym::reg(10);
        let states = evaluate(insns, g, in_body, shape, order, header, narrow);
        let mut steps = Steps {
            exact: [None; 11],
            bounded: [None; 11],
            lag,
            read,
        };
        steps.exact[10] = Some(0);
        let mut changed = false;
        for (r, good) in good.iter_mut().enumerate().take(10).filter(|(_, ok)| **ok) {
            match latch_steps(insns, g, shape, &states, narrow, r) {
                Some((lo, hi)) if lo == hi => steps.exact[r] = Some(lo),
                Some(span) => steps.bounded[r] = Some(span),
                None => {
                    *good = false;
                    changed = true;
                }
            }
        }
        if changed {
            // Settle the induction variables first (a relation names one).
            lag = [None; 11];
            continue;
        }
        for r in 0..10 {
            if good[r] || no_lag[r] {
                continue;
            }
            let found = (0..10)
                .filter(|&t| t != r && good[t] && steps.exact[t].is_some())
                .find_map(|t| latch_offset(insns, g, shape, &states, narrow, r, t).map(|d| (t, d)));
            match (lag[r], found) {
                (Some(had), Some(now)) if had == now => {}
                (None, Some(now)) => {
                    lag[r] = Some(now);
                    changed = true;
                }
                (Some(_), _) => {
                    lag[r] = None;
                    no_lag[r] = true;
                    changed = true;
                }
                (None, None) => no_lag[r] = true,
            }
        }
        if !changed {
            return (states, steps);
        }
    }
}

/// Which registers some iteration reads with the value they had at the header: a read
/// reached from the header on a path that does not write the register first.
fn read_at_header(
    insns: &[Insn],
    g: &Graph,
    in_body: &[bool],
    shape: &LoopShape<'_>,
    order: &[usize],
) -> [bool; 11] {
    // The registers still holding their header value at each node's entry, as bits.
    let mut held: BTreeMap<usize, u16> = BTreeMap::from([(shape.h, 0x7ff)]);
    let mut read = 0u16;
    for &u in order {
        let here = held.get(&u).copied().unwrap_or(0);
        let (reads, writes) = reads_writes(&insns[g.pcs[u] as usize]);
        read |= here & reads;
        let after = here & !writes;
        for &v in g.succ[u]
            .iter()
            .filter(|&&v| forward_edge(shape, in_body, u, v))
        {
            *held.entry(v).or_insert(0) |= after;
        }
    }
    std::array::from_fn(|r| read & (1 << r) != 0)
}

/// The registers `insn` reads and writes, as bits (a register field that may be read
/// counts as read: safe for [`read_at_header`], whose answer only picks relations to
/// check).
fn reads_writes(insn: &Insn) -> (u16, u16) {
    let bit = |r: u8| if r <= 10 { 1u16 << r } else { 0 };
    let src = if insn.opc & SRC_X != 0 {
        bit(insn.src)
    } else {
        0
    };
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 if insn.opc & 0xf0 == ALU_MOV => (src, bit(insn.dst)),
        CLASS_ALU | CLASS_ALU64 => (bit(insn.dst) | src, bit(insn.dst)),
        CLASS_LDX => (bit(insn.src), bit(insn.dst)),
        CLASS_LD => (0, bit(insn.dst)),
        CLASS_ST => (bit(insn.dst), 0),
        // An atomic may write its source register (fetch) or r0 (cmpxchg).
        CLASS_STX => (bit(insn.dst) | bit(insn.src) | 1, bit(insn.src) | 1),
        _ => match insn.opc & 0xf0 {
            JMP_JA => (0, 0),
            JMP_EXIT => (1, 0),
            JMP_CALL => (0x3ff, 0x3f),
            _ => (bit(insn.dst) | src, 0),
        },
    }
}

/// The constant `d` with register `r` equal to `t + d` after every back-edge of
/// `shape`, if there is one.
fn latch_offset(
    insns: &[Insn],
    g: &Graph,
    shape: &LoopShape<'_>,
    states: &BTreeMap<usize, State>,
    narrow: bool,
    r: usize,
    t: usize,
) -> Option<i64> {
    let mut offset = None;
    for &u in shape.latches {
        let after = transfer(insns, g.pcs[u], &states[&u], narrow);
        let d = after[r].add(after[t], -1).as_const()?;
        if offset.is_some_and(|o| o != d) {
            return None;
        }
        offset = Some(d);
    }
    offset
}

/// The least and most register `r` moves from the header along the back-edges of
/// `shape`, when each moves it by a constant or by a bounded amount and all those
/// moves are of one sign (or all the same constant).
fn latch_steps(
    insns: &[Insn],
    g: &Graph,
    shape: &LoopShape<'_>,
    states: &BTreeMap<usize, State>,
    narrow: bool,
    r: usize,
) -> Option<(i64, i64)> {
    let mut span: Option<(i64, i64)> = None;
    for &u in shape.latches {
        let after = transfer(insns, g.pcs[u], &states[&u], narrow);
        let (coef, k, reach) = after[r].add(Sym::reg(r), -1).parts()?;
        if coef != [0; 11] {
            return None;
        }
        let (lo, hi) = (k, k.checked_add(reach)?);
        span = Some(span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
    }
    let (lo, hi) = span?;
    let one_sign = lo == hi || lo >= 0 || hi <= 0;
    (one_sign && hi - lo <= REACH_MAX).then_some((lo, hi))
}

/// The accesses whose address is affine in induction variables, with a stride the
/// guard can bound.
fn strided_accesses(w: &Walk<'_>) -> Vec<LoopAccess> {
    let mut accesses = Vec::new();
    for &u in w.order {
        let pc = w.g.pcs[u];
        let insn = &w.insns[pc as usize];
        let (base, write) = match (insn.class(), insn.opc & 0xe0) {
            (CLASS_LDX, MODE_MEM | MODE_MEMSX) => (insn.src, false),
            (CLASS_ST | CLASS_STX, MODE_MEM) => (insn.dst, true),
            _ => continue,
        };
        let size = match insn.opc & 0x18 {
            SIZE_B => 1,
            SIZE_H => 2,
            SIZE_W => 4,
            _ => 8,
        };
        let Some((coef, k, reach)) = w.states[&u].get(base as usize).and_then(|s| s.parts()) else {
            continue;
        };
        let stack = match coef[10] {
            0 => false,
            1 => true,
            _ => continue,
        };
        let Some(stride) = w.steps.stride_bound(&coef) else {
            continue;
        };
        // Through a bounded induction variable, stores only (an output cursor, which
        // the guard bounds by the most it moves, as far as the loop runs when every row
        // is kept): loads through cursors moved on different paths (a merge's two
        // inputs, each moved on only when its value is taken) get a guard that bounds
        // both moving every iteration, which stopped the unchecked copy of the merge
        // sort's loop early (`msort` 20-37% slower). A load a few bytes past a form of
        // induction variables that move by constants (`p[i | 1]`) is bounded exactly.
        if !write && (reach > LOAD_REACH_MAX || !w.steps.exact_form(&coef)) {
            continue;
        }
        // r10 plus a constant: the frame check of `translate` covers it already.
        if stack && coef[..10].iter().all(|&c| c == 0) {
            continue;
        }
        if !(-STRIDE_MAX..=STRIDE_MAX).contains(&stride) {
            continue;
        }
        accesses.push(LoopAccess {
            pc,
            coef,
            k: k.wrapping_add(i64::from(insn.off)),
            reach,
            stride,
            size,
            write,
            stack,
        });
    }
    accesses.sort_unstable_by_key(|a| a.pc);
    accesses
}

/// Whether a loop holding inner loops repays its guard and the fuel bound's test at
/// each iteration: every access outside the inner loops goes unchecked (or is at r10
/// plus a constant). grep's scan does (its byte load; the match loop runs at a first
/// byte only); a hash probe whose table loads stay checked (hashjoin) took 20% more
/// instructions versioned.
fn unchecked_around_inner(
    plan: &FunctionPlan,
    g: &Graph,
    shape: &LoopShape<'_>,
    w: &Walk<'_>,
    accesses: &[LoopAccess],
) -> bool {
    let mut inside = vec![false; g.n];
    for &(latch, header) in &shape.inner_back {
        for (u, b) in natural_body(g, header, &[latch]).into_iter().enumerate() {
            inside[u] |= b;
        }
    }
    w.order
        .iter()
        .filter(|&&u| !inside[u])
        .all(|&u| unchecked_at(plan, w, u, accesses))
}

/// Whether node `u` makes no access, or one that goes unchecked: in the unchecked copy,
/// at r10 plus a constant, or where the plan's value ranges prove it inside the frame
/// (a stack table indexed by a masked byte, `cnt[p[i] >> 4]++`); or one that keeps
/// only the stack's constant check (a base computed from r10 on every path,
/// `FunctionPlan::stack_bases`: a scatter into a stack buffer at a loaded index,
/// `out[cnt[v]++] = v`), which costs a compare, not a region cache's loads, when the
/// walk `w` allows those.
fn unchecked_at(plan: &FunctionPlan, w: &Walk<'_>, u: usize, accesses: &[LoopAccess]) -> bool {
    let pc = w.g.pcs[u];
    let insn = &w.insns[pc as usize];
    let memory = matches!(insn.class(), CLASS_LDX | CLASS_ST | CLASS_STX);
    !memory
        || accesses.iter().any(|a| a.pc == pc)
        || frame_constant(insn, &w.states[&u])
        || proven_in_frame(plan, insn, pc)
        || (w.stack_checks && plan.stack_bases.contains(&pc) && insn.opc & 0xe0 != MODE_ATOMIC)
}

/// Whether the plan's value ranges prove the access `insn` at `pc` inside the current
/// frame (translation then emits it without a check, see `translate::proven`).
fn proven_in_frame(plan: &FunctionPlan, insn: &Insn, pc: u32) -> bool {
    let base = match insn.class() {
        CLASS_LDX => insn.src,
        CLASS_ST | CLASS_STX if insn.opc & 0xe0 == MODE_MEM => insn.dst,
        _ => return false,
    };
    let frame = csx_ebpf::limits::STACK_FRAME_SIZE as i64;
    plan.ranges
        .in_frame(pc, base, insn.off, access_size(insn), frame)
}

/// Whether a loop inside another repays its guard (see [`version_loop`]). An access
/// through a base that holds an address computed from r10 on every path
/// (`FunctionPlan::stack_bases`) counts as a stack access here.
fn worth_nesting(plan: &FunctionPlan, w: &Walk<'_>, accesses: &[LoopAccess]) -> bool {
    let all_unchecked = w.order.iter().all(|&u| unchecked_at(plan, w, u, accesses));
    let counted = w.order.iter().all(|&u| {
        let leaves = w.g.succ[u].iter().any(|&v| !w.in_body[v]);
        !leaves || induction_test(&w.insns[w.g.pcs[u] as usize], &w.states[&u])
    });
    // Or every branch in the body tests induction variables or a flag that only
    // constants were written to: such a flag was picked by those tests too (clang's
    // rotated loops exit on one), so no data decides how long the loop runs.
    let counted = counted
        || w.order.iter().all(|&u| {
            let insn = &w.insns[w.g.pcs[u] as usize];
            let branch = matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
                && !matches!(insn.opc & 0xf0, JMP_JA | JMP_EXIT | JMP_CALL);
            !branch || induction_test(insn, &w.states[&u]) || flag_test(insn, &w.states[&u])
        });
    let stack = |a: &LoopAccess| a.stack || plan.stack_bases.contains(&a.pc);
    all_unchecked && (counted || accesses.iter().all(stack))
}

/// The 32-bit results the pass took as the forms they extend, each with the stride of
/// that form, or `None` when one moves too far per iteration to bound.
fn narrowed(w: &Walk<'_>) -> Option<Vec<Narrow>> {
    let mut out = Vec::new();
    for &u in w.order {
        let pc = w.g.pcs[u];
        let Some((_, Sym::Affine { coef, k })) = narrowing(&w.insns[pc as usize], &w.states[&u])
        else {
            continue;
        };
        let stride = w.steps.stride_bound(&coef)?;
        if !(-STRIDE_MAX..=STRIDE_MAX).contains(&stride) {
            return None;
        }
        out.push(Narrow {
            pc,
            coef,
            k,
            stride,
        });
    }
    Some(out)
}

/// Whether `insn` accesses memory at r10 plus a constant (checked, if at all, by the
/// frame rule of `translate`, never by a region cache).
fn frame_constant(insn: &Insn, s: &State) -> bool {
    let base = if insn.class() == CLASS_LDX {
        insn.src
    } else {
        insn.dst
    };
    let mut r10 = [0; 11];
    r10[10] = 1;
    matches!(s.get(base as usize), Some(Sym::Affine { coef, .. }) if *coef == r10)
        && insn.opc & 0xe0 != MODE_ATOMIC
}

/// Whether `insn`, a conditional jump, compares a register holding one of a few
/// constants (paths that wrote different constants met) with a constant or an affine
/// form.
fn flag_test(insn: &Insn, s: &State) -> bool {
    let flag =
        matches!(s.get(usize::from(insn.dst)), Some(Sym::Within { coef, .. }) if *coef == [0; 11]);
    let other =
        insn.opc & SRC_X == 0 || matches!(s.get(usize::from(insn.src)), Some(Sym::Affine { .. }));
    flag && other
}

/// Whether `insn`, a loop exit, is a conditional jump comparing affine forms of
/// induction variables (or constants), not loaded data.
fn induction_test(insn: &Insn, s: &State) -> bool {
    let op = insn.opc & 0xf0;
    if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32) || matches!(op, JMP_JA | JMP_EXIT) {
        return false;
    }
    let affine = |r: u8| matches!(s.get(r as usize), Some(Sym::Affine { .. }));
    affine(insn.dst) && (insn.opc & SRC_X == 0 || affine(insn.src))
}

/// The state at the entry of each body node, given the header's.
///
/// Inner loops: their back-edges are left out of `order`, so a first pass gives each
/// inner header the merge of its entries only. Every register whose value along an
/// inner back-edge differs from the header's is then taken as unknown at that header,
/// and the pass runs again, until no back-edge brings a new difference (each round
/// makes one more register unknown, so this ends). The states are then those of the
/// whole body, every path through the inner loops included.
fn evaluate(
    insns: &[Insn],
    g: &Graph,
    in_body: &[bool],
    shape: &LoopShape<'_>,
    order: &[usize],
    header: State,
    narrow: bool,
) -> BTreeMap<usize, State> {
    // One pass over the acyclic body, `unknown` holding for inner headers the
    // registers taken as unknown there, `forget` the frame slots (see [`Slots`]).
    let once = |unknown: &BTreeMap<usize, [bool; 11]>, forget: &BTreeMap<usize, BTreeSet<i16>>| {
        let mut states: BTreeMap<usize, State> = BTreeMap::from([(shape.h, header)]);
        let mut slots: BTreeMap<usize, Slots> = BTreeMap::from([(shape.h, Slots::new())]);
        for &u in order {
            let s = states.get_mut(&u).expect("a node's entries come before it");
            if let Some(mask) = unknown.get(&u) {
                for r in (0..11).filter(|&r| mask[r]) {
                    s[r] = Sym::Unknown;
                }
            }
            let known = slots.get_mut(&u).expect("a node's entries come before it");
            if let Some(gone) = forget.get(&u) {
                known.retain(|off, _| !gone.contains(off));
            }
            let (after, after_slots) = step(insns, g, u, s, known, narrow);
            for &v in g.succ[u]
                .iter()
                .filter(|&&v| forward_edge(shape, in_body, u, v))
            {
                states
                    .entry(v)
                    .and_modify(|s| {
                        for r in 0..11 {
                            s[r] = s[r].join(after[r]);
                        }
                    })
                    .or_insert(after);
                slots
                    .entry(v)
                    .and_modify(|s| *s = join_slots(s, &after_slots))
                    .or_insert_with(|| after_slots.clone());
            }
        }
        (states, slots)
    };
    let mut unknown: BTreeMap<usize, [bool; 11]> = BTreeMap::new();
    let mut forget: BTreeMap<usize, BTreeSet<i16>> = BTreeMap::new();
    loop {
        let (states, slots) = once(&unknown, &forget);
        let mut changed = false;
        for &(u, v) in &shape.inner_back {
            let (after, after_slots) = step(insns, g, u, &states[&u], &slots[&u], narrow);
            let mask = unknown.entry(v).or_insert([false; 11]);
            for r in 0..11 {
                if !mask[r] && states[&v][r] != after[r] && states[&v][r] != Sym::Unknown {
                    mask[r] = true;
                    changed = true;
                }
            }
            let gone = forget.entry(v).or_default();
            for (&off, known) in &slots[&v] {
                if after_slots.get(&off) != Some(known) && gone.insert(off) {
                    changed = true;
                }
            }
        }
        if !changed {
            return states;
        }
    }
}

/// The registers and frame slots after node `u` of `g` runs from `s` and `slots`: an
/// 8-byte load from a slot the iteration stored reads what was stored.
fn step(
    insns: &[Insn],
    g: &Graph,
    u: usize,
    s: &State,
    slots: &Slots,
    narrow: bool,
) -> (State, Slots) {
    let insn = &insns[g.pcs[u] as usize];
    let mut after = transfer(insns, g.pcs[u], s, narrow);
    if let Some(v) = forwarded(insn, slots) {
        after[insn.dst as usize] = v;
    }
    (after, slots_after(insns, g, u, s, slots))
}

/// A 32-bit result as the form it extends, and the form that must lie in `[0, 2^32)`
/// for that to be exact (see [`Narrow`]); `None` for any other instruction.
fn narrowing(insn: &Insn, s: &State) -> Option<(Sym, Sym)> {
    let dst = insn.dst as usize;
    if dst >= 10 {
        return None;
    }
    let op = insn.opc & 0xf0;
    let by_reg = insn.opc & SRC_X != 0;
    let src = || {
        if by_reg {
            s.get(insn.src as usize).copied().unwrap_or(Sym::Unknown)
        } else {
            Sym::konst(i64::from(insn.imm))
        }
    };
    let d = s[dst];
    let form = match (insn.class(), op) {
        // A 32-bit operation: its result is the low half of the 64-bit one, zero-extended.
        (CLASS_ALU, ALU_MOV) if by_reg && insn.off == 0 => src(),
        (CLASS_ALU, ALU_ADD) => d.add(src(), 1),
        (CLASS_ALU, ALU_SUB) => d.add(src(), -1),
        (CLASS_ALU, ALU_LSH) if !by_reg => d.scale(1i64.wrapping_shl(insn.imm as u32 & 31)),
        // `x << 32 >> 32` (or `s>> 32`): the low half of x, zero- (sign-) extended.
        (CLASS_ALU64, ALU_RSH | ALU_ARSH) if !by_reg && insn.imm == 32 => match d {
            Sym::Affine { coef, k } if coef.iter().all(|c| c % HIGH == 0) && k % HIGH == 0 => {
                Sym::Affine {
                    coef: coef.map(|c| c / HIGH),
                    k: k / HIGH,
                }
            }
            _ => Sym::Unknown,
        },
        _ => return None,
    };
    if !matches!(form, Sym::Affine { .. }) {
        return None;
    }
    let bias = if op == ALU_ARSH { 1 << 31 } else { 0 };
    Some((form, form.add(Sym::konst(bias), 1)))
}

/// The frame slot a load reads, when it is a zero-extending load of 4 or 8 bytes at
/// `r10 + off` wholly inside the frame (so it never traps).
fn frame_slot(insn: &Insn) -> Option<Sym> {
    let size = access_size(insn);
    let off = i64::from(insn.off);
    (insn.class() == CLASS_LDX
        && insn.opc & 0xe0 == MODE_MEM
        && insn.src == 10
        && matches!(size, 4 | 8)
        && off >= -(STACK_FRAME_SIZE as i64)
        && off + size <= 0)
        .then_some(Sym::Slot {
            off: insn.off,
            size: size as u8,
        })
}

/// The state after the instruction at `pc`; `narrow`: with 32-bit results taken as the
/// forms they extend (see [`Narrow`]).
fn transfer(insns: &[Insn], pc: u32, s: &State, narrow: bool) -> State {
    let insn = &insns[pc as usize];
    let mut out = *s;
    let dst = insn.dst as usize;
    if narrow {
        if let Some((form, _)) = narrowing(insn, s) {
            out[dst] = form;
            return out;
        }
    }
    match insn.class() {
        CLASS_ALU64 if dst < 10 => {
            let op = insn.opc & 0xf0;
            let by_reg = insn.opc & SRC_X != 0;
            let src = if by_reg {
                s.get(insn.src as usize).copied().unwrap_or(Sym::Unknown)
            } else {
                Sym::konst(i64::from(insn.imm))
            };
            let d = s[dst];
            out[dst] = match op {
                ALU_MOV if insn.off == 0 => src,
                ALU_ADD => d.add(src, 1),
                ALU_SUB => d.add(src, -1),
                ALU_MUL => match (d.as_const(), src.as_const()) {
                    (_, Some(m)) => d.scale(m),
                    (Some(m), _) => src.scale(m),
                    _ => Sym::Unknown,
                },
                ALU_LSH if !by_reg => d.scale(1i64.wrapping_shl(insn.imm as u32 & 63)),
                ALU_NEG if !by_reg => d.scale(-1),
                ALU_OR if !by_reg && insn.imm >= 0 => d.or_low(i64::from(insn.imm)),
                _ => Sym::Unknown,
            };
        }
        CLASS_ALU if dst < 10 => {
            out[dst] = if insn.opc == (CLASS_ALU | ALU_MOV) && insn.off == 0 {
                Sym::konst(i64::from(insn.imm as u32))
            } else {
                Sym::Unknown
            };
        }
        CLASS_LD if dst < 10 => {
            let high = insns.get(pc as usize + 1).map_or(0, |i| i.imm);
            out[dst] =
                Sym::konst((u64::from(insn.imm as u32) | u64::from(high as u32) << 32) as i64);
        }
        CLASS_LDX if dst < 10 => out[dst] = frame_slot(insn).unwrap_or(Sym::Unknown),
        // A call returns r0 (a local callee r1-r5 too) and keeps r6-r9 and r10.
        CLASS_JMP if insn.opc & 0xf0 == JMP_CALL => {
            out[..6].fill(Sym::Unknown);
        }
        CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => {
            out[0] = Sym::Unknown;
            if let Some(x) = out.get_mut(insn.src as usize) {
                *x = Sym::Unknown;
            }
            out[10] = s[10];
        }
        _ => {}
    }
    out
}

/// The least and the most fuel one iteration of a versioned loop charges: over every
/// path from the header back to it (the body without its edges into the header and
/// the back-edges of inner loops is acyclic), the sum of the costs of the backward
/// jumps it takes (an inner loop's back-edges, charged with a check, not counted). Every such path holds
/// one (it goes back in slot order somewhere), so `least` is at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IterationFuel {
    pub least: u64,
    pub most: u64,
}

/// The fuel span of one iteration (see [`IterationFuel`]), from the body's topological
/// order; `None` when a sum overflows.
fn iteration_fuel(w: &Walk<'_>, shape: &LoopShape<'_>) -> Option<IterationFuel> {
    let h = shape.h;
    let merge = |slot: &mut Option<(u64, u64)>, (lo, hi): (u64, u64)| {
        *slot = Some(slot.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
    };
    let mut reach: BTreeMap<usize, Option<(u64, u64)>> = BTreeMap::new();
    reach.insert(h, Some((0, 0)));
    let mut span = None;
    for &u in w.order {
        let Some(&Some((lo, hi))) = reach.get(&u) else {
            continue;
        };
        let next = |v: &&usize| **v == h || forward_edge(shape, w.in_body, u, **v);
        for &v in w.g.succ[u].iter().filter(next) {
            let c = csx_ebpf::engine::rules::jump_cost(w.g.pcs[u], w.g.pcs[v]);
            let path = (lo.checked_add(c)?, hi.checked_add(c)?);
            if v == h {
                merge(&mut span, path);
            } else {
                merge(reach.entry(v).or_default(), path);
            }
        }
    }
    let (least, most) = span?;
    Some(IterationFuel { least, most })
}

/// The fuel span of each iteration of `l` when fuel can bound its iterations: every
/// charge in the body is a backward jump (no call), and each is the jump itself or a
/// loop's closing branch converted with its arm ([`IfConv::BackTriangle`], whose charge
/// is selected), not a `ja` inside another converted branch's path. The jumps may go to
/// any slot of the body, the header or not, and cost different fuel. Then the guard may
/// let the unchecked copy start only iterations the fuel slice pays for at their most,
/// and that copy's charges inside the loop subtract without a check (see `translate`).
/// Backward jumps that leave the loop charge as usual.
pub(crate) fn iteration_cost(
    insns: &[Insn],
    plan: &FunctionPlan,
    l: &VersionedLoop,
) -> Option<IterationFuel> {
    for &pc in &l.body {
        let path_jump = !matches!(plan.ifconv.get(&pc), Some(IfConv::BackTriangle { .. }))
            && plan
                .arms
                .get(&pc)
                .is_some_and(|arms| arms.iter().any(|a| a.back_jump.is_some()));
        let insn = &insns[pc as usize];
        let call = insn.class() == CLASS_JMP && insn.opc & 0xf0 == JMP_CALL;
        if path_jump || call {
            return None;
        }
    }
    l.fuel
}

/// Whether a backward jump in `l` goes to a slot of the body other than its header.
pub(crate) fn enters_inside(insns: &[Insn], l: &VersionedLoop) -> bool {
    l.body.iter().any(|&pc| {
        let insn = &insns[pc as usize];
        let op = insn.opc & 0xf0;
        if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32) || op == JMP_CALL || op == JMP_EXIT {
            return false;
        }
        let rel = if insn.class() == CLASS_JMP32 && op == JMP_JA {
            insn.imm
        } else {
            i32::from(insn.off)
        };
        let target = i64::from(pc) + i64::from(rel) + 1;
        u32::try_from(target).is_ok_and(|t| t <= pc && t != l.header && l.body.contains(&t))
    })
}

// ---- unrolling (see `translate::unroll`) ---------------------------------------------

/// Largest unroll factor.
const UNROLL_FACTOR_MAX: usize = 16;

/// Most slots the unrolled copy of one loop may hold (its factor times the body's):
/// [`UNROLL_FACTOR_MAX`] copies of a body of up to 17 slots, so a 16-trip inner loop
/// of that size (knn's distance over 16 coordinates) runs whole, with no group loop
/// around it. Against 12 copies of 16 slots: knn 7.8% fewer executed instructions
/// (0.92 of the time), held-out functions 1.5% fewer (geomean; fir7 22% fewer,
/// ringmax 8% more); Cranelift compiles up to a quarter more (knn, hist).
const UNROLL_SLOTS_MAX: usize = UNROLL_FACTOR_MAX * 17;

/// How a versioned loop's unchecked iterations also run in *groups*: `factor` copies of
/// the body one after the other, with the counted `exit` test left out of all but the
/// last copy. The guard works out how many whole groups run before that exit can fire
/// (and inside the iterations proven in bounds); a group starts only when the fuel
/// slice holds `factor * charge`, so its back-edges charge by a plain subtraction that
/// cannot run out (the stop flag is looked at where the slice is refilled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unroll {
    pub factor: u32,
    /// Most fuel one iteration can charge: the costs of every backward jump in it.
    pub charge: u64,
    pub exit: CountedExit,
    /// Whether the loop writes no memory (no store, no atomic): then the group's loads
    /// that move with the iterations may be treated as pure (see `translate::unroll`).
    pub read_only: bool,
    /// Whether a charge is selected by a converted branch: a refill there cannot try a
    /// group again, so the one-by-one copy tries one at each iteration's end instead.
    pub selected: bool,
    /// The registers an iteration reads as the last one left them and changes by more
    /// than a constant (a running sum, not a counter).
    pub carried: Vec<u8>,
}

/// Which frame slots a loop leaves as they were on entry: it calls nothing (checked
/// by [`unroll_plan`]), and every store in it (atomics included) is at `r10` plus a
/// constant, so it writes only the frame bytes those constants name. A store through
/// any other register could reach the frame, so after one no slot is kept.
#[derive(Default)]
struct KeptSlots {
    /// `[off, off + size)` of each store at `r10 + off`.
    frame_stores: Vec<(i64, i64)>,
    /// Whether some store goes through another register.
    other_stores: bool,
}

impl KeptSlots {
    fn note(&mut self, insn: &Insn) {
        if !matches!(insn.class(), CLASS_ST | CLASS_STX) {
            return;
        }
        if insn.dst == 10 {
            let off = i64::from(insn.off);
            self.frame_stores.push((off, off + access_size(insn)));
        } else {
            self.other_stores = true;
        }
    }

    /// Whether the `size` bytes at `r10 + off` keep their value on entry.
    fn keeps(&self, off: i16, size: u8) -> bool {
        let (lo, hi) = (i64::from(off), i64::from(off) + i64::from(size));
        !self.other_stores && self.frame_stores.iter().all(|&(a, b)| b <= lo || hi <= a)
    }
}

/// An exit of a loop that compares an induction variable with an invariant: the loop
/// leaves at `pc` when `iv` has reached `bound` (moving `step` per iteration: up for a
/// positive step, down for a negative one, in the signedness `signed`, on the low 32
/// bits when `is32`). Until it has, `iv` does not wrap, so from its values on entry the
/// guard can bound from below the iterations that stay (see the guard's use). An exit
/// taken only when `iv` equals `bound` (`equal`: clang's `jne` closing a loop counted
/// down to -1 or up to 0) leaves no sooner than the distance from `iv` to `bound` in
/// the direction of the step, modulo 2^64 (2^32 when `is32`), over the step: wrapping
/// on the way does not matter to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CountedExit {
    /// The conditional jump, and its successor inside the loop.
    pub pc: u32,
    pub stays: u32,
    /// `iv`'s value at `pc` in the first iteration, an affine form of the header's
    /// registers on entry (coefficients of r0-r10, constant).
    pub iv: ([i64; 11], i64),
    /// What `iv` adds per iteration (never 0).
    pub step: i64,
    /// The invariant side, as a form of the header's registers on entry, plus the
    /// value of `bound_slot` when there is one.
    pub bound: ([i64; 11], i64),
    /// A frame slot `(off, size)` the loop reads at `r10 + off` and never writes (it
    /// calls nothing and stores only at other constant offsets from r10, see
    /// `KeptSlots`): its value on entry is part of the bound.
    pub bound_slot: Option<(i16, u8)>,
    pub signed: bool,
    pub is32: bool,
    pub equal: bool,
}

/// What the symbolic evaluation of a loop found, for [`unroll_plan`].
struct Walk<'a> {
    insns: &'a [Insn],
    g: &'a Graph,
    in_body: &'a [bool],
    order: &'a [usize],
    states: &'a BTreeMap<usize, State>,
    steps: &'a Steps,
    /// Whether an access that keeps only the stack's constant check counts as unchecked
    /// in a nested loop's cost (see [`unchecked_at`]).
    stack_checks: bool,
}

/// Whether and how the versioned loop `body` is unrolled: it needs a counted exit, no
/// calls, and every fuel charge at a plain jump or at a loop's closing branch converted
/// with its arm ([`IfConv::BackTriangle`], whose two paths charge different fuel: the
/// group charges the one taken, and `charge` counts both, more than either path).
fn unroll_plan(plan: &FunctionPlan, w: &Walk<'_>, body: &BTreeSet<u32>) -> Option<Unroll> {
    let tails = lddw_tails(w.insns);
    let mut charge: u64 = 0;
    let mut read_only = true;
    let mut kept = KeptSlots::default();
    let mut selected = false;
    for &pc in body {
        let insn = &w.insns[pc as usize];
        read_only &= !matches!(insn.class(), CLASS_ST | CLASS_STX);
        kept.note(insn);
        if insn.class() == CLASS_JMP && insn.opc & 0xf0 == JMP_CALL {
            return None;
        }
        match plan.ifconv.get(&pc) {
            Some(IfConv::BackTriangle { .. }) => selected = true,
            Some(IfConv::Paths { .. }) if plan.arms[&pc].iter().any(|a| a.back_jump.is_some()) => {
                return None
            }
            _ => {}
        }
        if let Ok(Flow::Jump(t) | Flow::Branch(t)) = flow(w.insns, &tails, pc) {
            charge = charge.checked_add(csx_ebpf::engine::rules::jump_cost(pc, t))?;
        }
    }
    let factor = (2..=UNROLL_FACTOR_MAX)
        .rev()
        .filter(|f| f.is_power_of_two())
        .find(|f| f * body.len() <= UNROLL_SLOTS_MAX)?;
    let exit = w
        .order
        .iter()
        .filter_map(|&u| counted_exit(plan, w, u, &kept))
        .min_by_key(|e| e.pc)?;
    Some(Unroll {
        factor: factor as u32,
        charge,
        exit,
        read_only,
        selected,
        carried: Vec::new(),
    })
}

/// The exit at node `u`, if it is a conditional jump with one successor in the loop that
/// compares an induction variable moving towards an invariant bound.
fn counted_exit(
    plan: &FunctionPlan,
    w: &Walk<'_>,
    u: usize,
    kept: &KeptSlots,
) -> Option<CountedExit> {
    let pc = w.g.pcs[u];
    let insn = &w.insns[pc as usize];
    let is32 = insn.class() == CLASS_JMP32;
    let op = insn.opc & 0xf0;
    if !matches!(insn.class(), CLASS_JMP | CLASS_JMP32)
        || matches!(op, JMP_JA | JMP_EXIT | JMP_CALL | JMP_JSET)
    {
        return None;
    }
    // Translated as a plain branch: no converted shape or speculative region holds it.
    if plan.ifconv.contains_key(&pc)
        || plan
            .regions
            .iter()
            .any(|(&head, &join)| (head..join).contains(&pc))
    {
        return None;
    }
    let target = (i64::from(pc) + i64::from(insn.off) + 1) as u32;
    let next = pc + 1;
    let inside = |t: u32| w.g.pcs.binary_search(&t).is_ok_and(|i| w.in_body[i]);
    // The comparison under which the loop leaves.
    let (leaves_when, stays) = match (inside(target), inside(next)) {
        (false, true) => (op, next),
        (true, false) => (negate(op)?, target),
        _ => return None,
    };
    let s = &w.states[&u];
    let a = s[usize::from(insn.dst)];
    let b = if insn.opc & SRC_X != 0 {
        *s.get(usize::from(insn.src))?
    } else if is32 {
        Sym::konst(i64::from(insn.imm as u32))
    } else {
        Sym::konst(i64::from(insn.imm))
    };
    // What a side moves per iteration: a frame slot a read-only loop never writes is
    // invariant.
    let stride = |sym: Sym| match sym {
        Sym::Affine { coef, .. } => (0..11).try_fold(0i64, |acc, r| {
            if coef[r] == 0 {
                return Some(acc);
            }
            acc.checked_add(coef[r].checked_mul(w.steps.exact[r]?)?)
        }),
        Sym::Slot { off, size } if kept.keeps(off, size) => Some(0),
        Sym::Slot { .. } | Sym::Unknown | Sym::Within { .. } => None,
    };
    // `iv` on the left, moving; `bound` invariant.
    let (iv, bound, step, leaves_when) = match (stride(a)?, stride(b)?) {
        (d, 0) if d != 0 => (a, b, d, leaves_when),
        (0, d) if d != 0 => (b, a, d, mirror(leaves_when)),
        _ => return None,
    };
    let Sym::Affine { coef, k } = iv else {
        return None;
    };
    let iv = (coef, k);
    let (bound, bound_slot) = match bound {
        Sym::Affine { coef, k } => ((coef, k), None),
        Sym::Slot { off, size } => (([0; 11], 0), Some((off, size))),
        Sym::Unknown | Sym::Within { .. } => return None,
    };
    if !(-STRIDE_MAX..=STRIDE_MAX).contains(&step) {
        return None;
    }
    // Moving up, it leaves on reaching the bound (>=, >, ==); down, symmetrically.
    let signed = match (step > 0, leaves_when) {
        (true, JMP_JEQ | JMP_JGE | JMP_JGT) | (false, JMP_JEQ | JMP_JLE | JMP_JLT) => false,
        (true, JMP_JSGE | JMP_JSGT) | (false, JMP_JSLE | JMP_JSLT) => true,
        _ => return None,
    };
    Some(CountedExit {
        pc,
        stays,
        iv,
        step,
        bound,
        bound_slot,
        signed,
        is32,
        equal: leaves_when == JMP_JEQ,
    })
}

/// The comparison that holds exactly when `op`'s does not.
fn negate(op: u8) -> Option<u8> {
    Some(match op {
        JMP_JEQ => JMP_JNE,
        JMP_JNE => JMP_JEQ,
        JMP_JGT => JMP_JLE,
        JMP_JLE => JMP_JGT,
        JMP_JGE => JMP_JLT,
        JMP_JLT => JMP_JGE,
        JMP_JSGT => JMP_JSLE,
        JMP_JSLE => JMP_JSGT,
        JMP_JSGE => JMP_JSLT,
        JMP_JSLT => JMP_JSGE,
        _ => return None,
    })
}

/// `op` with its operands swapped: `a op b` is `b (mirror op) a`.
fn mirror(op: u8) -> u8 {
    match op {
        JMP_JGT => JMP_JLT,
        JMP_JLT => JMP_JGT,
        JMP_JGE => JMP_JLE,
        JMP_JLE => JMP_JGE,
        JMP_JSGT => JMP_JSLT,
        JMP_JSLT => JMP_JSGT,
        JMP_JSGE => JMP_JSLE,
        JMP_JSLE => JMP_JSGE,
        other => other,
    }
}

// ---- natural loops for `trips` -------------------------------------------------------

/// A natural loop with no loop inside it and no call, its body translated in whole
/// shapes (see `trips`, which bounds such loops' trip counts).
#[derive(Clone, Debug)]
pub(crate) struct PlainLoop {
    pub header: u32,
    /// Every slot of the loop (the header included).
    pub body: BTreeSet<u32>,
    /// The body's slots in a topological order of its edges without those into the
    /// header (the header first).
    pub order: Vec<u32>,
    /// Each slot's successors (in the body or not).
    pub succ: BTreeMap<u32, Vec<u32>>,
}

/// The innermost call-free natural loops of `plan` (see [`PlainLoop`]).
pub(crate) fn plain_loops(insns: &[Insn], plan: &FunctionPlan) -> Vec<PlainLoop> {
    let tails = lddw_tails(insns);
    let Some(g) = Graph::new(insns, &tails, plan, false) else {
        return Vec::new();
    };
    let found = natural_loops(&g);
    let mut out = Vec::new();
    for (i, l) in found.iter().enumerate() {
        let in_body = &l.body;
        let holds_loop = found
            .iter()
            .enumerate()
            .any(|(j, inner)| j != i && in_body[inner.h]);
        let nodes: Vec<usize> = (0..g.n).filter(|&u| in_body[u]).collect();
        if holds_loop || nodes.len() > BODY_MAX || nodes.iter().any(|&u| g.calls[u]) {
            continue;
        }
        let body: BTreeSet<u32> = nodes.iter().map(|&u| g.pcs[u]).collect();
        if !whole_shapes(plan, &body) {
            continue;
        }
        let shape = LoopShape {
            h: l.h,
            latches: &l.latches,
            nested: false,
            inner_back: Vec::new(),
        };
        let Some(order) = body_order(&g, in_body, &shape, nodes.len()) else {
            continue;
        };
        let succ = nodes
            .iter()
            .map(|&u| (g.pcs[u], g.succ[u].iter().map(|&v| g.pcs[v]).collect()))
            .collect();
        out.push(PlainLoop {
            header: g.pcs[l.h],
            body,
            order: order.iter().map(|&u| g.pcs[u]).collect(),
            succ,
        });
    }
    out
}
