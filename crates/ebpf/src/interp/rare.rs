//! The ops the dispatch loop runs out of line: register operations and jump tests that
//! no kernel of `csx bench vm` or of its held-out sets runs often (counted with
//! `fuse_profile --kinds`). Each is a plain function of register values, called from
//! one arm of [`super::Interpreter::execute`]'s `match` for all of them, so the loop's
//! code holds one short call in place of their bodies: its common ops sit closer
//! together and no register of the loop is spent on them. Their meaning is the one
//! RFC 9669 gives each, as in the loop.

use super::{div64, lo, mod32, mod64, sdiv32, sdiv64, smod32, smod64, Kind, Slot};

/// The new value of `dst` after the rare ALU op `s` (one of the kinds the loop's arm for it lists), from the values
/// of its `dst` and `src` registers.
#[cold]
#[inline(never)]
pub(super) fn alu(s: &Slot, dst: u64, src: u64) -> u64 {
    use Kind::*;
    let imm = s.imm64();
    match s.kind {
        Sub64I => dst.wrapping_sub(imm),
        Div64I => div64(dst, imm),
        SDiv64I => sdiv64(dst, imm),
        Mod64I => mod64(dst, imm),
        SMod64I => smod64(dst, imm),
        Div64R => div64(dst, src),
        SDiv64R => sdiv64(dst, src),
        Mod64R => mod64(dst, src),
        SMod64R => smod64(dst, src),
        // Shift amounts are masked to the operand width (RFC 9669 §4.1).
        Arsh64R => ((dst as i64) >> (src & 63)) as u64,
        Neg64 => dst.wrapping_neg(),
        MovSx8To64 => src as i8 as i64 as u64,
        MovSx16To64 => src as i16 as i64 as u64,
        MovSx32To64 => src as i32 as i64 as u64,
        // ALU32: the low halves; the result is zero-extended.
        Sub32I => u64::from(lo(dst).wrapping_sub(lo(imm))),
        SDiv32I => sdiv32(dst, imm),
        Mod32I => mod32(dst, imm),
        SMod32I => smod32(dst, imm),
        SDiv32R => sdiv32(dst, src),
        Mod32R => mod32(dst, src),
        SMod32R => smod32(dst, src),
        Arsh32R => u64::from(((lo(dst) as i32) >> (src & 31)) as u32),
        Neg32 => u64::from(lo(dst).wrapping_neg()),
        MovSx8To32 => u64::from(src as i8 as i32 as u32),
        MovSx16To32 => u64::from(src as i16 as i32 as u32),
        // Byte order: the VM is little-endian, so `le` only truncates.
        Trunc16 => u64::from(dst as u16),
        Trunc32 => u64::from(dst as u32),
        Swap16 => u64::from((dst as u16).swap_bytes()),
        Swap32 => u64::from((dst as u32).swap_bytes()),
        Swap64 => dst.swap_bytes(),
        Nop => dst,
        other => unreachable!("{other:?} is not a rare ALU op"),
    }
}

/// Whether the rare conditional jump `s` (one of the kinds the loop's arm for them lists) is taken, from the values of
/// its `dst` and `src` registers.
#[cold]
#[inline(never)]
pub(super) fn jump_taken(s: &Slot, dst: u64, src: u64) -> bool {
    use Kind::*;
    let imm = s.imm64();
    match s.kind {
        Jge64I => dst >= imm,
        Jle64I => dst <= imm,
        Jsge64I => dst as i64 >= imm as i64,
        Jslt64I => (dst as i64) < imm as i64,
        Jsle64I => dst as i64 <= imm as i64,
        Jset64I => dst & imm != 0,
        Jeq64R => dst == src,
        Jne64R => dst != src,
        Jsge64R => dst as i64 >= src as i64,
        Jslt64R => (dst as i64) < src as i64,
        Jsle64R => dst as i64 <= src as i64,
        Jset64R => dst & src != 0,
        Jge32I => lo(dst) >= lo(imm),
        Jle32I => lo(dst) <= lo(imm),
        Jsge32I => lo(dst) as i32 >= lo(imm) as i32,
        Jslt32I => (lo(dst) as i32) < lo(imm) as i32,
        Jsle32I => lo(dst) as i32 <= lo(imm) as i32,
        Jset32I => lo(dst) & lo(imm) != 0,
        Jsgt32R => lo(dst) as i32 > lo(src) as i32,
        Jsge32R => lo(dst) as i32 >= lo(src) as i32,
        Jslt32R => (lo(dst) as i32) < lo(src) as i32,
        Jsle32R => lo(dst) as i32 <= lo(src) as i32,
        Jset32R => lo(dst) & lo(src) != 0,
        other => unreachable!("{other:?} is not a rare jump"),
    }
}
