//! Executed-work counting: how many instructions of each class a run executed, the
//! same number in every engine kind.
//!
//! # Blocks
//! [`BlockMap::new`] cuts a program into canonical basic blocks once, from the bytecode
//! alone, so every engine sees the same blocks whatever its own control-flow analysis
//! does. A slot is a *leader* (starts a block) when it is:
//!
//! * the entry slot;
//! * the target of a jump (conditional, `ja`, `ja32`) or of a local call;
//! * the slot after a jump, a call (helper, `callx` or local) or an `exit`.
//!
//! A block runs from its leader to the slot before the next leader (the second half of an
//! `lddw` belongs to its first). Its *histogram* counts its instructions by
//! [`InsnClass`]: the work one pass through the whole block does. Slots before the first
//! leader can run only if some jump reaches them, which would make them a leader, so
//! they belong to no block.
//!
//! # Counting rule
//! A run that asks for counts ([`crate::engine::RunOptions::counts`]) gets one counter
//! per block, bumped by one each time control *enters* the block's leader: by a jump, a
//! call, a return, or falling through. The work of the run is the sum over blocks of
//! count × histogram ([`BlockMap::work`]).
//!
//! **A trap mid-block counts the whole block**: the block was entered, so its counter
//! was bumped, and the instructions after the trapping one are charged as if they ran.
//! A trap at a block's last instruction (a fuel or stop trap at a back-edge, a call depth
//! trap, a helper's trap) does not enter the next block. Every engine follows this rule,
//! so interpreter and JIT counts are equal block by block, not only in total.
//!
//! Engines implement the counters their own way (the interpreter bumps a counter when
//! its dispatch loop reaches a leader slot; the JIT keeps counters in SSA variables
//! and adds them into the buffer when a function returns or traps), and only when the
//! caller asks: a run without `counts` does no counting work at all.

use std::cell::Cell;

use crate::isa::*;

/// How many instruction classes [`InsnClass`] has.
pub const CLASS_COUNT: usize = 10;

/// The classes the work of a run is counted in: what a device's cost model prices
/// differently (see `csx_device::perf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum InsnClass {
    /// 64-bit ALU: add, sub, logic, shifts, moves (sign-extending ones too), negation,
    /// byte swaps of class ALU64, and `lddw`.
    Alu64,
    /// 32-bit ALU (class ALU, multiplication and division excepted), byte-order
    /// conversions (`le`/`be`) included.
    Alu32,
    /// Multiplication, 32 or 64 bits.
    Mul,
    /// Division and modulo, signed or unsigned, 32 or 64 bits.
    Div,
    /// Loads (`ldx`, sign-extending loads included).
    Load,
    /// Stores (`st`, `stx`), not atomics.
    Store,
    /// Atomic read-modify-writes.
    Atomic,
    /// 64-bit jumps (class JMP): `ja`, conditional jumps and `exit`.
    Jump,
    /// 32-bit jumps (class JMP32): conditional jumps and `ja32`.
    Jump32,
    /// Calls: helpers, `callx` and local calls (the call instruction only; what the
    /// helper does is not an instruction of the program).
    Call,
}

impl InsnClass {
    /// Every class, in index order.
    pub const ALL: [InsnClass; CLASS_COUNT] = [
        InsnClass::Alu64,
        InsnClass::Alu32,
        InsnClass::Mul,
        InsnClass::Div,
        InsnClass::Load,
        InsnClass::Store,
        InsnClass::Atomic,
        InsnClass::Jump,
        InsnClass::Jump32,
        InsnClass::Call,
    ];

    /// The class's name in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            InsnClass::Alu64 => "alu64",
            InsnClass::Alu32 => "alu32",
            InsnClass::Mul => "mul",
            InsnClass::Div => "div",
            InsnClass::Load => "load",
            InsnClass::Store => "store",
            InsnClass::Atomic => "atomic",
            InsnClass::Jump => "jump",
            InsnClass::Jump32 => "jump32",
            InsnClass::Call => "call",
        }
    }

    /// The class of `insn` (an `lddw`'s first slot counts as one [`InsnClass::Alu64`]).
    pub fn of(insn: &Insn) -> InsnClass {
        let op = insn.opc & 0xf0;
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => {
                let wide = insn.class() == CLASS_ALU64;
                match op {
                    ALU_MUL => InsnClass::Mul,
                    ALU_DIV | ALU_MOD => InsnClass::Div,
                    _ if wide => InsnClass::Alu64,
                    _ => InsnClass::Alu32,
                }
            }
            CLASS_LD => InsnClass::Alu64,
            CLASS_LDX => InsnClass::Load,
            CLASS_ST => InsnClass::Store,
            CLASS_STX if insn.opc & 0xe0 == MODE_ATOMIC => InsnClass::Atomic,
            CLASS_STX => InsnClass::Store,
            CLASS_JMP if op == JMP_CALL => InsnClass::Call,
            CLASS_JMP => InsnClass::Jump,
            _ => InsnClass::Jump32,
        }
    }
}

/// Instructions executed per [`InsnClass`], indexed by the class's discriminant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCounts(pub [u64; CLASS_COUNT]);

impl WorkCounts {
    /// Instructions of `class`.
    pub fn get(&self, class: InsnClass) -> u64 {
        self.0[class as usize]
    }

    /// Instructions of every class.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &n| a.saturating_add(n))
    }

    /// Adds `other` class by class (saturating).
    pub fn add(&mut self, other: &WorkCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    /// `(name, count)` for every class, in index order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        InsnClass::ALL.iter().map(|c| (c.name(), self.get(*c)))
    }
}

/// Marks a slot of [`BlockMap::block_table`] that leads no block.
pub const NOT_A_LEADER: u32 = u32::MAX;

/// A program's canonical basic blocks and their class histograms (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockMap {
    /// Leader slot of each block, ascending.
    leaders: Box<[u32]>,
    /// Per slot: the index of the block it leads, or [`NOT_A_LEADER`].
    block_at: Box<[u32]>,
    /// Per block: its instructions by class.
    histograms: Box<[[u32; CLASS_COUNT]]>,
}

impl BlockMap {
    /// The blocks of `insns` run from `entry`. Works on any slots (jumps out of range are
    /// ignored), but only a verified program's counts mean anything.
    pub fn new(insns: &[Insn], entry: u32) -> BlockMap {
        let n = insns.len();
        let mut leader = vec![false; n];
        let mut tail = vec![false; n];
        let mark = |slot: i64, leader: &mut [bool]| {
            if let Ok(s) = usize::try_from(slot) {
                if s < n {
                    leader[s] = true;
                }
            }
        };
        mark(i64::from(entry), &mut leader);
        let mut pc = 0usize;
        while pc < n {
            let insn = insns[pc];
            let at = pc as i64;
            if insn.opc == OP_LDDW {
                if pc + 1 < n {
                    tail[pc + 1] = true;
                }
                pc += 2;
                continue;
            }
            if matches!(insn.class(), CLASS_JMP | CLASS_JMP32) {
                let is32 = insn.class() == CLASS_JMP32;
                match insn.opc & 0xf0 {
                    JMP_CALL if !is32 => {
                        if insn.src == CALL_SRC_LOCAL && insn.opc & SRC_X == 0 {
                            mark(at + i64::from(insn.imm) + 1, &mut leader);
                        }
                    }
                    JMP_EXIT if !is32 => {}
                    JMP_JA if is32 => mark(at + i64::from(insn.imm) + 1, &mut leader),
                    _ => mark(at + i64::from(insn.off) + 1, &mut leader),
                }
                mark(at + 1, &mut leader);
            }
            pc += 1;
        }
        // A jump into an lddw's second half is rejected by the verifier; never start a
        // block there, so the histogram of the lddw's block stays whole.
        for (l, t) in leader.iter_mut().zip(&tail) {
            if *t {
                *l = false;
            }
        }
        let leaders: Vec<u32> = (0..n).filter(|&s| leader[s]).map(|s| s as u32).collect();
        let mut block_at = vec![NOT_A_LEADER; n];
        let mut histograms = vec![[0u32; CLASS_COUNT]; leaders.len()];
        for (b, &l) in leaders.iter().enumerate() {
            block_at[l as usize] = b as u32;
            let end = leaders.get(b + 1).map_or(n, |&e| e as usize);
            for s in l as usize..end {
                if !tail[s] {
                    histograms[b][InsnClass::of(&insns[s]) as usize] += 1;
                }
            }
        }
        BlockMap {
            leaders: leaders.into_boxed_slice(),
            block_at: block_at.into_boxed_slice(),
            histograms: histograms.into_boxed_slice(),
        }
    }

    /// How many blocks there are.
    pub fn len(&self) -> usize {
        self.leaders.len()
    }

    /// Whether there are none (an empty program).
    pub fn is_empty(&self) -> bool {
        self.leaders.is_empty()
    }

    /// Leader slot of each block, ascending.
    pub fn leaders(&self) -> &[u32] {
        &self.leaders
    }

    /// The block `slot` leads, if it is a leader.
    pub fn block_at(&self, slot: u32) -> Option<usize> {
        match self.block_at.get(slot as usize) {
            Some(&b) if b != NOT_A_LEADER => Some(b as usize),
            _ => None,
        }
    }

    /// Per slot, the block it leads or [`NOT_A_LEADER`] (for engines' dispatch loops).
    pub fn block_table(&self) -> &[u32] {
        &self.block_at
    }

    /// Block `b`'s instructions by class.
    pub fn histogram(&self, b: usize) -> &[u32; CLASS_COUNT] {
        &self.histograms[b]
    }

    /// The work of a run whose block counters are `counts` (one per block).
    pub fn work(&self, counts: &[u64]) -> WorkCounts {
        assert_eq!(counts.len(), self.len(), "one counter per block");
        let mut w = WorkCounts::default();
        for (h, &c) in self.histograms.iter().zip(counts) {
            for (acc, &k) in w.0.iter_mut().zip(h) {
                *acc = acc.saturating_add(c.saturating_mul(u64::from(k)));
            }
        }
        w
    }
}

/// The block counters one run fills: one per block of the program's [`BlockMap`].
/// Engines add to them, so a buffer reused across runs accumulates (call
/// [`ExecCounts::reset`] between runs to count each alone). Not shareable between
/// threads: one run at a time uses it.
#[derive(Debug, PartialEq, Eq)]
pub struct ExecCounts {
    blocks: Box<[Cell<u64>]>,
}

impl ExecCounts {
    /// Zeroed counters for `map`'s blocks.
    pub fn new(map: &BlockMap) -> ExecCounts {
        ExecCounts {
            blocks: (0..map.len()).map(|_| Cell::new(0)).collect(),
        }
    }

    /// How many counters there are.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The counters' values.
    pub fn values(&self) -> Vec<u64> {
        self.blocks.iter().map(Cell::get).collect()
    }

    /// Adds `n` to block `b`'s counter.
    #[inline(always)]
    pub fn add(&self, b: usize, n: u64) {
        let c = &self.blocks[b];
        c.set(c.get().wrapping_add(n));
    }

    /// Sets every counter to 0.
    pub fn reset(&self) {
        for c in self.blocks.iter() {
            c.set(0);
        }
    }

    /// The counters as `u64`s in memory, for compiled code that adds to them (a `Cell`
    /// may be written through a pointer made from a shared reference).
    pub fn as_mut_ptr(&self) -> *mut u64 {
        self.blocks.as_ptr().cast::<u64>().cast_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    fn map(src: &str) -> BlockMap {
        let insns = assemble(src).expect("test program assembles");
        BlockMap::new(&insns, 0)
    }

    #[test]
    fn leaders_are_entry_targets_and_after_transfers() {
        let m = map("mov %r0, 0
             mov %r1, 10
             add %r0, %r1
             sub %r1, 1
             jne %r1, 0, -3
             lddw %r2, 0x100000000
             call 1
             mov32 %r3, 1
             exit");
        // 0: entry; 2: jump target; 5: after the jump; 8: after the call.
        assert_eq!(m.leaders(), &[0, 2, 5, 8]);
        assert_eq!(m.block_at(2), Some(1));
        assert_eq!(m.block_at(3), None);
        let h = |b: usize, c: InsnClass| m.histogram(b)[c as usize];
        assert_eq!(h(0, InsnClass::Alu64), 2);
        assert_eq!((h(1, InsnClass::Alu64), h(1, InsnClass::Jump)), (2, 1));
        // The lddw is one instruction, its second half none.
        assert_eq!((h(2, InsnClass::Alu64), h(2, InsnClass::Call)), (1, 1));
        assert_eq!((h(3, InsnClass::Alu32), h(3, InsnClass::Jump)), (1, 1));
        let w = m.work(&[1, 10, 1, 1]);
        assert_eq!(w.get(InsnClass::Alu64), 2 + 20 + 1);
        assert_eq!(w.get(InsnClass::Jump), 10 + 1);
        assert_eq!(w.total(), 2 + 30 + 2 + 2);
    }

    #[test]
    fn classes() {
        let insns = assemble(
            "mul %r1, 3
             div32 %r1, 3
             mod %r1, %r2
             ldxb %r1, [%r2+0]
             stxw [%r10-4], %r1
             stw [%r10-8], 1
             lock add [%r10-8], %r1
             jlt32 %r1, 3, +0
             le16 %r1
             call 5
             exit",
        )
        .expect("assembles");
        let classes: Vec<&str> = insns.iter().map(|i| InsnClass::of(i).name()).collect();
        assert_eq!(
            classes,
            [
                "mul", "div", "div", "load", "store", "store", "atomic", "jump32", "alu32", "call",
                "jump"
            ]
        );
    }

    #[test]
    fn counters_accumulate_and_reset() {
        let m = map("ja +0\nexit");
        let c = ExecCounts::new(&m);
        assert_eq!(c.len(), 2);
        c.add(1, 3);
        c.add(1, 2);
        assert_eq!(c.values(), [0, 5]);
        c.reset();
        assert_eq!(c.values(), [0, 0]);
    }

    #[test]
    fn jumps_out_of_range_are_ignored() {
        let insns = vec![
            Insn::new(OP_JA, 0, 0, 100, 0),
            Insn::new(CLASS_JMP | JMP_JEQ, 1, 0, -50, 0),
            Insn::new(OP_EXIT, 0, 0, 0, 0),
        ];
        let m = BlockMap::new(&insns, 0);
        assert_eq!(m.leaders(), &[0, 1, 2]);
    }
}
