//! The instruction set (RFC 9669, up to cpu v4): encoding, opcode fields, decoding.
//!
//! Every instruction is one 8-byte slot, except `lddw`, which takes two:
//!
//! ```text
//! byte   0        1            2..4        4..8
//!      +--------+------------+-----------+------------------+
//!      | opcode | src | dst  |  offset   |    immediate     |
//!      |  u8    | hi4 | lo4  |  i16 LE   |     i32 LE       |
//!      +--------+------------+-----------+------------------+
//! ```
//!
//! The opcode's low 3 bits are the class (RFC 9669 §3):
//!
//! ```text
//!  ALU/ALU64/JMP/JMP32:  | op:4 | source:1 | class:3 |
//!  LD/LDX/ST/STX:        | mode:3 | size:2 | class:3 |
//! ```

/// Instruction classes (RFC 9669 §3, Table 2).
pub const CLASS_LD: u8 = 0x00;
pub const CLASS_LDX: u8 = 0x01;
pub const CLASS_ST: u8 = 0x02;
pub const CLASS_STX: u8 = 0x03;
pub const CLASS_ALU: u8 = 0x04;
pub const CLASS_JMP: u8 = 0x05;
pub const CLASS_JMP32: u8 = 0x06;
pub const CLASS_ALU64: u8 = 0x07;

/// Source bit of arithmetic and jump opcodes (RFC 9669 §3.1): immediate or register.
pub const SRC_K: u8 = 0x00;
pub const SRC_X: u8 = 0x08;

/// Arithmetic operations (RFC 9669 §4.1, Table 5), the opcode's high 4 bits.
pub const ALU_ADD: u8 = 0x00;
pub const ALU_SUB: u8 = 0x10;
pub const ALU_MUL: u8 = 0x20;
/// `div`, or `sdiv` when `offset == 1`.
pub const ALU_DIV: u8 = 0x30;
pub const ALU_OR: u8 = 0x40;
pub const ALU_AND: u8 = 0x50;
pub const ALU_LSH: u8 = 0x60;
pub const ALU_RSH: u8 = 0x70;
pub const ALU_NEG: u8 = 0x80;
/// `mod`, or `smod` when `offset == 1`.
pub const ALU_MOD: u8 = 0x90;
pub const ALU_XOR: u8 = 0xa0;
/// `mov`, or `movsx` when `offset` is 8, 16 or 32.
pub const ALU_MOV: u8 = 0xb0;
pub const ALU_ARSH: u8 = 0xc0;
/// Byte swaps (RFC 9669 §4.2): `le`/`be` in class ALU (source bit selects), `bswap` in
/// ALU64 with source bit 0. The width is in `imm` (16, 32, 64).
pub const ALU_END: u8 = 0xd0;

/// Jump operations (RFC 9669 §4.3, Table 7), the opcode's high 4 bits.
pub const JMP_JA: u8 = 0x00;
pub const JMP_JEQ: u8 = 0x10;
pub const JMP_JGT: u8 = 0x20;
pub const JMP_JGE: u8 = 0x30;
pub const JMP_JSET: u8 = 0x40;
pub const JMP_JNE: u8 = 0x50;
pub const JMP_JSGT: u8 = 0x60;
pub const JMP_JSGE: u8 = 0x70;
/// `call`: src 0 = helper by id in imm, src 1 = local function at pc + imm + 1;
/// with the X source bit (`callx`), the helper id is in register `dst`.
pub const JMP_CALL: u8 = 0x80;
pub const JMP_EXIT: u8 = 0x90;
pub const JMP_JLT: u8 = 0xa0;
pub const JMP_JLE: u8 = 0xb0;
pub const JMP_JSLT: u8 = 0xc0;
pub const JMP_JSLE: u8 = 0xd0;

/// Load/store modes (RFC 9669 §5, Table 9), the opcode's high 3 bits.
pub const MODE_IMM: u8 = 0x00;
pub const MODE_ABS: u8 = 0x20;
pub const MODE_IND: u8 = 0x40;
pub const MODE_MEM: u8 = 0x60;
/// Sign-extending load (cpu v4).
pub const MODE_MEMSX: u8 = 0x80;
pub const MODE_ATOMIC: u8 = 0xc0;

/// Access sizes (RFC 9669 §5.1, Table 10).
pub const SIZE_W: u8 = 0x00;
pub const SIZE_H: u8 = 0x08;
pub const SIZE_B: u8 = 0x10;
pub const SIZE_DW: u8 = 0x18;

/// Atomic operations, in `imm` (RFC 9669 §5.3, Table 11).
pub const ATOMIC_ADD: i32 = 0x00;
pub const ATOMIC_OR: i32 = 0x40;
pub const ATOMIC_AND: i32 = 0x50;
pub const ATOMIC_XOR: i32 = 0xa0;
/// Modifier bit: return the old value in `src`.
pub const ATOMIC_FETCH: i32 = 0x01;
/// Exchange (always fetches).
pub const ATOMIC_XCHG: i32 = 0xe0 | ATOMIC_FETCH;
/// Compare and exchange against r0 (always fetches into r0).
pub const ATOMIC_CMPXCHG: i32 = 0xf0 | ATOMIC_FETCH;

/// `lddw dst, imm64` (two slots).
pub const OP_LDDW: u8 = CLASS_LD | MODE_IMM | SIZE_DW;
/// `exit`.
pub const OP_EXIT: u8 = CLASS_JMP | JMP_EXIT;
/// `call imm`.
pub const OP_CALL: u8 = CLASS_JMP | JMP_CALL;
/// `callx dst`.
pub const OP_CALLX: u8 = CLASS_JMP | JMP_CALL | SRC_X;
/// `ja off` (or `ja32 imm` in class JMP32, cpu v4).
pub const OP_JA: u8 = CLASS_JMP | JMP_JA;

/// `src` value of a `call` that targets a local (bpf-to-bpf) function.
pub const CALL_SRC_LOCAL: u8 = 1;

/// Register numbers: r0 return value, r1-r5 arguments, r6-r9 callee-saved,
/// r10 read-only frame pointer.
pub const REG_COUNT: u8 = 11;
/// The frame pointer, read-only.
pub const REG_FP: u8 = 10;

/// Bytes in one instruction slot.
pub const SLOT_SIZE: usize = 8;

/// One decoded 8-byte instruction slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    pub opc: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// Decodes one slot.
    pub fn decode(b: [u8; SLOT_SIZE]) -> Insn {
        Insn {
            opc: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes one slot.
    pub fn encode(&self) -> [u8; SLOT_SIZE] {
        let o = self.off.to_le_bytes();
        let i = self.imm.to_le_bytes();
        [
            self.opc,
            (self.src << 4) | (self.dst & 0x0f),
            o[0],
            o[1],
            i[0],
            i[1],
            i[2],
            i[3],
        ]
    }

    /// The class (low 3 bits of the opcode).
    pub fn class(&self) -> u8 {
        self.opc & 0x07
    }

    /// Builds an instruction from its fields.
    pub const fn new(opc: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            opc,
            dst,
            src,
            off,
            imm,
        }
    }
}

/// Errors decoding raw bytecode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("bytecode is {len} bytes, not a multiple of {SLOT_SIZE}")]
    Misaligned { len: usize },
    #[error("bytecode is empty")]
    Empty,
    #[error("program has {slots} instruction slots, limit is {limit}")]
    TooLong { slots: usize, limit: usize },
}

/// Decodes raw little-endian bytecode into slots.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<Insn>, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    if !bytes.len().is_multiple_of(SLOT_SIZE) {
        return Err(DecodeError::Misaligned { len: bytes.len() });
    }
    let slots = bytes.len() / SLOT_SIZE;
    if slots > crate::limits::PROGRAM_INSN_COUNT_MAX {
        return Err(DecodeError::TooLong {
            slots,
            limit: crate::limits::PROGRAM_INSN_COUNT_MAX,
        });
    }
    Ok(bytes
        .chunks_exact(SLOT_SIZE)
        .map(|c| Insn::decode(c.try_into().expect("chunks_exact yields 8-byte chunks")))
        .collect())
}

/// Encodes slots back to bytecode.
pub fn encode_all(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.encode()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let i = Insn::new(0xb7, 3, 9, -2, -7);
        assert_eq!(Insn::decode(i.encode()), i);
        assert_eq!(i.encode()[1], 0x93);
    }

    #[test]
    fn decode_errors() {
        assert_eq!(decode_all(&[]), Err(DecodeError::Empty));
        assert_eq!(decode_all(&[0; 9]), Err(DecodeError::Misaligned { len: 9 }));
    }
}
