//! Loads from a global section proven in range when the program is decoded.
//!
//! A global section's region, length and contents' place are fixed for a program's
//! whole life (`crate::engine::RunMemory::with_mapped` maps section `n` at
//! `RegionIdx::global(n)` with exactly its length, and a helper that remaps it aborts
//! the run), and clang addresses a table in one as `lddw t, TABLE; add t, index`, with
//! the index bounded by a mask or a shift just before. [`proven_loads`] follows each
//! basic block from its leader with what it knows of every register (an integer in a
//! range, or an offset range inside one global section) and names the loads whose
//! `size` bytes lie inside the section on every path: those read the section's host
//! memory without a check.
//!
//! The analysis is block-local: at a leader (every jump target, every slot after a jump,
//! call or exit, and the entry, [`crate::count`]) nothing is known, and inside a block
//! the only way into a slot is from the slot before it. Every op that writes a register
//! and is not modelled makes it unknown, so what is kept is exact.

use crate::count::NOT_A_LEADER;
use crate::memory::RegionIdx;
use crate::program::GlobalSection;

use super::{Kind, Slot};

/// What the analysis knows of a register before a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Unknown,
    /// An integer in `lo..=hi`.
    Int {
        lo: u64,
        hi: u64,
    },
    /// `RegionIdx::global(n).vaddr(0) + o` for an `o` in `lo..=hi` (exact integers: the
    /// sum in the register wraps as a `u64` would).
    Global {
        n: u8,
        lo: i64,
        hi: i64,
    },
}

/// Offsets and integers are tracked only while they stay below this, so that no sum of
/// two of them, or with a 32-bit immediate, can overflow an `i64`.
const LIMIT: u64 = 1 << 48;

impl Val {
    fn int(lo: u64, hi: u64) -> Val {
        if lo <= hi {
            Val::Int { lo, hi }
        } else {
            Val::Unknown
        }
    }

    /// The largest value an integer may have (`u64::MAX` when unknown).
    fn max(self) -> u64 {
        match self {
            Val::Int { hi, .. } => hi,
            _ => u64::MAX,
        }
    }

    /// `self + other` (64-bit).
    fn add(self, other: Val) -> Val {
        match (self, other) {
            (Val::Int { lo, hi }, Val::Int { lo: l2, hi: h2 }) if hi < LIMIT && h2 < LIMIT => {
                Val::int(lo + l2, hi + h2)
            }
            (Val::Global { n, lo, hi }, Val::Int { lo: l2, hi: h2 })
            | (Val::Int { lo: l2, hi: h2 }, Val::Global { n, lo, hi })
                if h2 < LIMIT =>
            {
                Val::global(n, lo + l2 as i64, hi + h2 as i64)
            }
            _ => Val::Unknown,
        }
    }

    /// `self + imm` (64-bit, `imm` sign-extended).
    fn add_imm(self, imm: i32) -> Val {
        let k = i64::from(imm);
        match self {
            Val::Int { lo, hi } if hi < LIMIT && lo as i64 + k >= 0 => {
                Val::int((lo as i64 + k) as u64, (hi as i64 + k) as u64)
            }
            Val::Global { n, lo, hi } => Val::global(n, lo + k, hi + k),
            _ => Val::Unknown,
        }
    }

    fn global(n: u8, lo: i64, hi: i64) -> Val {
        if lo.unsigned_abs() < LIMIT && hi.unsigned_abs() < LIMIT && lo <= hi {
            Val::Global { n, lo, hi }
        } else {
            Val::Unknown
        }
    }

    /// The value's low 32 bits, zero-extended (a 32-bit copy).
    fn low32(self) -> Val {
        match self {
            Val::Int { hi, .. } if hi <= u64::from(u32::MAX) => self,
            _ => Val::int(0, u64::from(u32::MAX)),
        }
    }

    /// `self | other` or `self ^ other`: no bit above both operands' highest.
    fn or(self, other: Val) -> Val {
        let top = self.max().max(other.max());
        Val::int(
            0,
            u64::MAX >> top.leading_zeros().min(63) >> u32::from(top == 0),
        )
    }

    /// `self << k` (64-bit, `k < 64`).
    fn shl(self, k: u32) -> Val {
        match self {
            Val::Int { lo, hi } if hi.leading_zeros() >= k => Val::int(lo << k, hi << k),
            _ => Val::Unknown,
        }
    }

    /// `self >> k` (64-bit, logical, `k < 64`).
    fn shr(self, k: u32) -> Val {
        match self {
            Val::Int { lo, hi } => Val::int(lo >> k, hi >> k),
            _ => Val::int(0, u64::MAX >> k),
        }
    }
}

/// The register file the analysis keeps: r0-r10.
type Regs = [Val; 11];

/// The value `lddw` of `v` gives: an offset into global section `n` when `v` points
/// there (for a section of the program), else the integer.
fn constant(v: u64, sections: usize) -> Val {
    let region = v >> 32;
    let first = u64::from(RegionIdx::GLOBALS_FIRST.0);
    match region.checked_sub(first) {
        Some(n) if n < sections as u64 => {
            Val::global(n as u8, i64::from(v as u32), i64::from(v as u32))
        }
        _ => Val::int(v, v),
    }
}

/// The new value of `s.dst` after slot `s` (an unfused op that writes `dst`), from the
/// registers before it.
fn alu(s: &Slot, regs: &Regs, sections: usize) -> Val {
    use Kind::*;
    let d = regs[usize::from(s.dst)];
    let src = || {
        regs.get(usize::from(s.src))
            .copied()
            .unwrap_or(Val::Unknown)
    };
    match s.kind {
        Mov64I => Val::int(s.imm64(), s.imm64()),
        Mov32I => Val::int(u64::from(s.imm as u32), u64::from(s.imm as u32)),
        Mov64R => src(),
        Mov32R => src().low32(),
        Lddw => constant(s.lddw_value(), sections),
        // A mask that is not negative bounds the result by itself; any mask keeps it
        // at most the value masked.
        And64I if s.imm >= 0 => Val::int(0, (s.imm as u64).min(d.max())),
        And64I => Val::int(0, d.max()),
        And32I => Val::int(0, u64::from(s.imm as u32).min(d.low32().max())),
        And64R => Val::int(0, d.max().min(src().max())),
        Or64R | Xor64R => d.or(src()),
        Or32R | Xor32R => d.low32().or(src().low32()),
        Or64I | Xor64I if s.imm >= 0 => d.or(Val::int(s.imm64(), s.imm64())),
        Or32I | Xor32I => d
            .low32()
            .or(Val::int(u64::from(s.imm as u32), u64::from(s.imm as u32))),
        Lsh64I => d.shl((s.imm & 63) as u32),
        Rsh64I => d.shr((s.imm & 63) as u32),
        Rsh32I => d.low32().shr((s.imm & 31) as u32),
        Add64I => d.add_imm(s.imm),
        Add64R => d.add(src()),
        // Loads zero-extend.
        LdxB => Val::int(0, 0xff),
        LdxH => Val::int(0, 0xffff),
        LdxW => Val::int(0, u64::from(u32::MAX)),
        _ => Val::Unknown,
    }
}

/// How an unfused op changes what is known of the registers.
fn step(s: &Slot, regs: &mut Regs, sections: usize) {
    use Kind::*;
    match s.kind {
        // Stores and jumps write no register.
        StB | StH | StW | StDw | StxB | StxH | StxW | StxDw | Nop => {}
        Ja | Jeq64I | Jne64I | Jgt64I | Jge64I | Jlt64I | Jle64I | Jsgt64I | Jsge64I | Jslt64I
        | Jsle64I | Jset64I | Jeq64R | Jne64R | Jgt64R | Jge64R | Jlt64R | Jle64R | Jsgt64R
        | Jsge64R | Jslt64R | Jsle64R | Jset64R | Jeq32I | Jne32I | Jgt32I | Jge32I | Jlt32I
        | Jle32I | Jsgt32I | Jsge32I | Jslt32I | Jsle32I | Jset32I | Jeq32R | Jne32R | Jgt32R
        | Jge32R | Jlt32R | Jle32R | Jsgt32R | Jsge32R | Jslt32R | Jsle32R | Jset32R => {}
        // Calls, atomics and anything unexpected: forget everything.
        CallHelper | CallLocal | CallX | Exit | Atomic32 | Atomic64 | Invalid => {
            *regs = [Val::Unknown; 11];
        }
        _ => {
            let v = alu(s, regs, sections);
            if let Some(r) = regs.get_mut(usize::from(s.dst)) {
                *r = v;
            }
        }
    }
}

/// The size of a load kind's access, for the loads this proves.
fn load_size(kind: Kind) -> Option<i64> {
    match kind {
        Kind::LdxB => Some(1),
        Kind::LdxH => Some(2),
        Kind::LdxW => Some(4),
        Kind::LdxDw => Some(8),
        _ => None,
    }
}

/// Per slot of the unfused decoding `slots`, `n + 1` when the slot is a load whose bytes
/// lie inside global section `n` (of `globals`) on every path that reaches it, else 0.
/// `leaders` is the program's [`crate::count::BlockMap::block_table`].
pub(super) fn proven_loads(slots: &[Slot], globals: &[GlobalSection], leaders: &[u32]) -> Vec<u8> {
    let mut proven = vec![0u8; slots.len()];
    let mut regs: Regs = [Val::Unknown; 11];
    for (i, s) in slots.iter().enumerate() {
        // An `lddw`'s second slot: part of the `lddw`, never run.
        if i > 0 && slots[i - 1].kind == Kind::Lddw {
            continue;
        }
        if leaders.get(i).is_none_or(|&b| b != NOT_A_LEADER) {
            regs = [Val::Unknown; 11];
        }
        if let (Some(size), Some(&Val::Global { n, lo, hi })) =
            (load_size(s.kind), regs.get(usize::from(s.src)))
        {
            let len = globals
                .get(usize::from(n))
                .map_or(0, |g| g.data.len() as i64);
            let off = i64::from(s.off);
            if lo + off >= 0 && hi + off + size <= len {
                proven[i] = n + 1;
            }
        }
        step(s, &mut regs, globals.len());
    }
    proven
}
