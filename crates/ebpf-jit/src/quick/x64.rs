//! A small x86-64 encoder: exactly the instructions the quick tier emits, written from
//! the Intel SDM's encoding tables (legacy prefix 0x66, REX, opcode, ModRM, SIB,
//! displacement, immediate).
//!
//! Every method appends one instruction to [`Asm::buf`]. Jumps are emitted with 32-bit
//! displacements and patched once their target is known ([`Asm::patch_rel32`]).

/// A general-purpose register, by its hardware number (0-15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reg(pub u8);

pub(crate) const RAX: Reg = Reg(0);
pub(crate) const RCX: Reg = Reg(1);
pub(crate) const RDX: Reg = Reg(2);
pub(crate) const RBX: Reg = Reg(3);
pub(crate) const RSP: Reg = Reg(4);
pub(crate) const RBP: Reg = Reg(5);
pub(crate) const RSI: Reg = Reg(6);
pub(crate) const RDI: Reg = Reg(7);
pub(crate) const R8: Reg = Reg(8);
pub(crate) const R9: Reg = Reg(9);
pub(crate) const R10: Reg = Reg(10);
pub(crate) const R11: Reg = Reg(11);
pub(crate) const R12: Reg = Reg(12);
pub(crate) const R13: Reg = Reg(13);
pub(crate) const R14: Reg = Reg(14);
pub(crate) const R15: Reg = Reg(15);

impl Reg {
    fn low(self) -> u8 {
        self.0 & 7
    }

    fn high(self) -> u8 {
        (self.0 >> 3) & 1
    }
}

/// A memory operand `[base + index + disp]` (no index, or one scaled by 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mem {
    pub base: Reg,
    pub index: Option<Reg>,
    pub disp: i32,
}

/// `[base + disp]`.
pub(crate) fn mem(base: Reg, disp: i32) -> Mem {
    Mem {
        base,
        index: None,
        disp,
    }
}

/// `[base + index + disp]`; `index` is not rsp (which a SIB byte cannot name as one).
pub(crate) fn mem_index(base: Reg, index: Reg, disp: i32) -> Mem {
    assert_ne!(index, RSP, "rsp is no index");
    Mem {
        base,
        index: Some(index),
        disp,
    }
}

/// The r/m operand of an instruction.
#[derive(Clone, Copy, Debug)]
enum Rm {
    Reg(Reg),
    Mem(Mem),
}

/// Two-operand integer operations that have both a register and an immediate form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alu {
    Add,
    Or,
    And,
    Sub,
    Xor,
    Cmp,
}

impl Alu {
    /// The ModRM `reg` digit of the `0x81`/`0x83` immediate forms.
    fn digit(self) -> u8 {
        match self {
            Alu::Add => 0,
            Alu::Or => 1,
            Alu::And => 4,
            Alu::Sub => 5,
            Alu::Xor => 6,
            Alu::Cmp => 7,
        }
    }

    /// The `r/m op= reg` opcode; `reg op= r/m` is this plus 2.
    fn opcode(self) -> u8 {
        self.digit() * 8 + 1
    }
}

/// Shifts and rotates (`0xc1`/`0xd3` with this digit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shift {
    Ror = 1,
    Shl = 4,
    Shr = 5,
    Sar = 7,
}

/// One-operand group-3 operations (`0xf7` with this digit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unary {
    Neg = 3,
    /// `rdx:rax = rax * r` (unsigned, the whole product).
    Mul = 4,
    Div = 6,
    Idiv = 7,
}

/// Condition codes, the low nibble of `jcc` (`0x0f 0x80 + cc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cond {
    /// Below (unsigned <).
    B = 2,
    /// Above or equal (unsigned >=).
    Ae = 3,
    E = 4,
    Ne = 5,
    /// Below or equal (unsigned <=).
    Be = 6,
    /// Above (unsigned >).
    A = 7,
    /// Less (signed <).
    L = 0xc,
    /// Greater or equal (signed >=).
    Ge = 0xd,
    /// Less or equal (signed <=).
    Le = 0xe,
    /// Greater (signed >).
    G = 0xf,
}

impl Cond {
    /// The condition that holds exactly when this one does not.
    pub(crate) fn invert(self) -> Cond {
        match self {
            Cond::B => Cond::Ae,
            Cond::Ae => Cond::B,
            Cond::E => Cond::Ne,
            Cond::Ne => Cond::E,
            Cond::Be => Cond::A,
            Cond::A => Cond::Be,
            Cond::L => Cond::Ge,
            Cond::Ge => Cond::L,
            Cond::Le => Cond::G,
            Cond::G => Cond::Le,
        }
    }
}

/// How a load extends the value it reads to 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
}

/// Operand size of an instruction that has 32- and 64-bit forms: `true` for 64 bits.
/// A 32-bit operation zero-extends its result into the whole register.
pub(crate) type Wide = bool;

/// The code buffer.
#[derive(Debug, Default)]
pub(crate) struct Asm {
    pub buf: Vec<u8>,
}

impl Asm {
    pub(crate) fn with_capacity(n: usize) -> Asm {
        Asm {
            buf: Vec::with_capacity(n),
        }
    }

    /// Current offset (where the next instruction starts).
    pub(crate) fn pos(&self) -> usize {
        self.buf.len()
    }

    /// Pads with multi-byte `nop`s up to the next multiple of `align`.
    pub(crate) fn align_with_nops(&mut self, align: usize) {
        const NOPS: [&[u8]; 9] = [
            &[0x90],
            &[0x66, 0x90],
            &[0x0f, 0x1f, 0x00],
            &[0x0f, 0x1f, 0x40, 0x00],
            &[0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
            &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        ];
        let mut gap = (align - self.pos() % align) % align;
        while gap > 0 {
            let n = gap.min(NOPS.len());
            self.buf.extend_from_slice(NOPS[n - 1]);
            gap -= n;
        }
    }

    fn byte(&mut self, b: u8) {
        self.buf.push(b);
    }

    fn imm32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Prefixes, opcode and ModRM (+ SIB and displacement) of one instruction. `reg` is
    /// the ModRM reg field: a register number or an opcode digit. `byte_regs` forces a
    /// REX prefix, so that registers 4-7 mean spl/bpl/sil/dil in byte operations.
    fn op(&mut self, p66: bool, wide: Wide, byte_regs: bool, opcode: &[u8], reg: u8, rm: Rm) {
        if p66 {
            self.byte(0x66);
        }
        let (base, index) = match rm {
            Rm::Reg(r) => (r, None),
            Rm::Mem(m) => (m.base, m.index),
        };
        let rex = 0x40
            | (u8::from(wide) << 3)
            | (((reg >> 3) & 1) << 2)
            | (index.map_or(0, Reg::high) << 1)
            | base.high();
        if rex != 0x40 || byte_regs {
            self.byte(rex);
        }
        self.buf.extend_from_slice(opcode);
        let reg = (reg & 7) << 3;
        match rm {
            Rm::Reg(r) => self.byte(0xc0 | reg | r.low()),
            Rm::Mem(m) => {
                let disp8 = i8::try_from(m.disp).ok();
                // rbp/r13 as a base with no displacement would mean rip-relative (or
                // no base), so they always take one.
                let (mode, disp_len) = match disp8 {
                    Some(0) if base.low() != 5 => (0x00, 0),
                    Some(_) => (0x40, 1),
                    None => (0x80, 4),
                };
                match index {
                    // A SIB byte: scale 1, the index, the base.
                    Some(i) => {
                        self.byte(mode | reg | 4);
                        self.byte((i.low() << 3) | base.low());
                    }
                    None => {
                        self.byte(mode | reg | base.low());
                        // rsp/r12 as a base need a SIB byte (no index).
                        if base.low() == 4 {
                            self.byte(0x24);
                        }
                    }
                }
                match disp_len {
                    0 => {}
                    1 => self.byte(m.disp as u8),
                    _ => self.imm32(m.disp),
                }
            }
        }
    }

    /// `op dst, src` (register to register).
    pub(crate) fn alu_rr(&mut self, op: Alu, wide: Wide, dst: Reg, src: Reg) {
        self.op(false, wide, false, &[op.opcode()], src.0, Rm::Reg(dst));
    }

    /// `op dst, imm` (the immediate sign-extended to 64 bits in the wide form).
    pub(crate) fn alu_ri(&mut self, op: Alu, wide: Wide, dst: Reg, imm: i32) {
        self.alu_imm(op, wide, Rm::Reg(dst), imm);
    }

    /// `op [m], imm`.
    pub(crate) fn alu_mi(&mut self, op: Alu, wide: Wide, m: Mem, imm: i32) {
        self.alu_imm(op, wide, Rm::Mem(m), imm);
    }

    fn alu_imm(&mut self, op: Alu, wide: Wide, rm: Rm, imm: i32) {
        match i8::try_from(imm) {
            Ok(b) => {
                self.op(false, wide, false, &[0x83], op.digit(), rm);
                self.byte(b as u8);
            }
            Err(_) => {
                self.op(false, wide, false, &[0x81], op.digit(), rm);
                self.imm32(imm);
            }
        }
    }

    /// `op dst, [m]`.
    pub(crate) fn alu_rm(&mut self, op: Alu, wide: Wide, dst: Reg, m: Mem) {
        self.op(false, wide, false, &[op.opcode() + 2], dst.0, Rm::Mem(m));
    }

    /// `test a, b`.
    pub(crate) fn test_rr(&mut self, wide: Wide, a: Reg, b: Reg) {
        self.op(false, wide, false, &[0x85], b.0, Rm::Reg(a));
    }

    /// `test a, imm`.
    pub(crate) fn test_ri(&mut self, wide: Wide, a: Reg, imm: i32) {
        self.op(false, wide, false, &[0xf7], 0, Rm::Reg(a));
        self.imm32(imm);
    }

    /// `mov dst, src`.
    pub(crate) fn mov_rr(&mut self, wide: Wide, dst: Reg, src: Reg) {
        self.op(false, wide, false, &[0x89], src.0, Rm::Reg(dst));
    }

    /// `mov dst, [m]` (64 bits).
    pub(crate) fn mov_rm(&mut self, dst: Reg, m: Mem) {
        self.op(false, true, false, &[0x8b], dst.0, Rm::Mem(m));
    }

    /// `mov [m], src` (64 bits).
    pub(crate) fn mov_mr(&mut self, m: Mem, src: Reg) {
        self.op(false, true, false, &[0x89], src.0, Rm::Mem(m));
    }

    /// Loads from `m` into `dst`, extended to 64 bits as `kind` says.
    pub(crate) fn load(&mut self, kind: Load, dst: Reg, m: Mem) {
        let rm = Rm::Mem(m);
        match kind {
            Load::U8 => self.op(false, false, false, &[0x0f, 0xb6], dst.0, rm),
            Load::U16 => self.op(false, false, false, &[0x0f, 0xb7], dst.0, rm),
            Load::U32 => self.op(false, false, false, &[0x8b], dst.0, rm),
            Load::U64 => self.op(false, true, false, &[0x8b], dst.0, rm),
            Load::S8 => self.op(false, true, false, &[0x0f, 0xbe], dst.0, rm),
            Load::S16 => self.op(false, true, false, &[0x0f, 0xbf], dst.0, rm),
            Load::S32 => self.op(false, true, false, &[0x63], dst.0, rm),
        }
    }

    /// Stores the low `size` bytes (1, 2, 4 or 8) of `src` at `m`.
    pub(crate) fn store(&mut self, size: u8, m: Mem, src: Reg) {
        let rm = Rm::Mem(m);
        match size {
            1 => self.op(false, false, true, &[0x88], src.0, rm),
            2 => self.op(true, false, false, &[0x89], src.0, rm),
            4 => self.op(false, false, false, &[0x89], src.0, rm),
            _ => self.op(false, true, false, &[0x89], src.0, rm),
        }
    }

    /// Stores the low `size` bytes (1, 2, 4 or 8) of `imm` sign-extended to 64 bits.
    pub(crate) fn store_imm(&mut self, size: u8, m: Mem, imm: i32) {
        let rm = Rm::Mem(m);
        match size {
            1 => {
                self.op(false, false, false, &[0xc6], 0, rm);
                self.byte(imm as u8);
            }
            2 => {
                self.op(true, false, false, &[0xc7], 0, rm);
                self.buf.extend_from_slice(&(imm as u16).to_le_bytes());
            }
            4 => {
                self.op(false, false, false, &[0xc7], 0, rm);
                self.imm32(imm);
            }
            _ => {
                self.op(false, true, false, &[0xc7], 0, rm);
                self.imm32(imm);
            }
        }
    }

    /// Sets `dst` to `v` with the shortest encoding.
    pub(crate) fn mov_imm(&mut self, dst: Reg, v: u64) {
        if let Ok(v32) = u32::try_from(v) {
            // `mov r32, imm32` zero-extends.
            if dst.high() != 0 {
                self.byte(0x41);
            }
            self.byte(0xb8 + dst.low());
            self.imm32(v32 as i32);
        } else if let Ok(s) = i32::try_from(v as i64) {
            // `mov r64, imm32` sign-extends.
            self.op(false, true, false, &[0xc7], 0, Rm::Reg(dst));
            self.imm32(s);
        } else {
            self.byte(0x48 | dst.high());
            self.byte(0xb8 + dst.low());
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// `lea dst, [m]`.
    pub(crate) fn lea(&mut self, dst: Reg, m: Mem) {
        self.op(false, true, false, &[0x8d], dst.0, Rm::Mem(m));
    }

    /// `op dst, imm` for a shift or rotate (the count is masked by the hardware).
    pub(crate) fn shift_ri(&mut self, op: Shift, wide: Wide, dst: Reg, count: u8) {
        self.op(false, wide, false, &[0xc1], op as u8, Rm::Reg(dst));
        self.byte(count);
    }

    /// `op dst, cl`.
    pub(crate) fn shift_cl(&mut self, op: Shift, wide: Wide, dst: Reg) {
        self.op(false, wide, false, &[0xd3], op as u8, Rm::Reg(dst));
    }

    /// `ror dst16, 8`: swaps the two low bytes, leaves the rest.
    pub(crate) fn ror16_8(&mut self, dst: Reg) {
        self.op(true, false, false, &[0xc1], Shift::Ror as u8, Rm::Reg(dst));
        self.byte(8);
    }

    /// `imul dst, src`.
    pub(crate) fn imul_rr(&mut self, wide: Wide, dst: Reg, src: Reg) {
        self.op(false, wide, false, &[0x0f, 0xaf], dst.0, Rm::Reg(src));
    }

    /// `imul dst, dst, imm`.
    pub(crate) fn imul_ri(&mut self, wide: Wide, dst: Reg, imm: i32) {
        self.op(false, wide, false, &[0x69], dst.0, Rm::Reg(dst));
        self.imm32(imm);
    }

    /// `cmovcc dst, src` (64 bits: a 32-bit `cmov` would clear `dst`'s high half even
    /// when the condition does not hold).
    pub(crate) fn cmov(&mut self, cc: Cond, dst: Reg, src: Reg) {
        self.op(
            false,
            true,
            false,
            &[0x0f, 0x40 + cc as u8],
            dst.0,
            Rm::Reg(src),
        );
    }

    /// `imul dst, src, imm`.
    pub(crate) fn imul_rri(&mut self, wide: Wide, dst: Reg, src: Reg, imm: i32) {
        self.op(false, wide, false, &[0x69], dst.0, Rm::Reg(src));
        self.imm32(imm);
    }

    /// `neg`, `mul`, `div` or `idiv` of `r`.
    pub(crate) fn unary(&mut self, op: Unary, wide: Wide, r: Reg) {
        self.op(false, wide, false, &[0xf7], op as u8, Rm::Reg(r));
    }

    /// `cqo` (wide) or `cdq`: sign-extends rax (eax) into rdx (edx).
    pub(crate) fn sign_extend_rax(&mut self, wide: Wide) {
        if wide {
            self.byte(0x48);
        }
        self.byte(0x99);
    }

    /// `movzx dst32, src8/16` (`bits` 8 or 16), zero-extending into all 64 bits.
    pub(crate) fn movzx_rr(&mut self, bits: u8, dst: Reg, src: Reg) {
        let opc = if bits == 8 { 0xb6 } else { 0xb7 };
        self.op(false, false, bits == 8, &[0x0f, opc], dst.0, Rm::Reg(src));
    }

    /// `movsx dst, src8/16/32` (`bits` 8, 16 or 32) into 32 or 64 bits.
    pub(crate) fn movsx_rr(&mut self, bits: u8, wide: Wide, dst: Reg, src: Reg) {
        match bits {
            8 => self.op(false, wide, true, &[0x0f, 0xbe], dst.0, Rm::Reg(src)),
            16 => self.op(false, wide, false, &[0x0f, 0xbf], dst.0, Rm::Reg(src)),
            _ => self.op(false, true, false, &[0x63], dst.0, Rm::Reg(src)),
        }
    }

    /// `bswap r` (32 or 64 bits).
    pub(crate) fn bswap(&mut self, wide: Wide, r: Reg) {
        let rex = 0x40 | (u8::from(wide) << 3) | r.high();
        if rex != 0x40 {
            self.byte(rex);
        }
        self.byte(0x0f);
        self.byte(0xc8 + r.low());
    }

    /// `bts r64, bit`: sets one bit.
    pub(crate) fn bts(&mut self, r: Reg, bit: u8) {
        self.op(false, true, false, &[0x0f, 0xba], 5, Rm::Reg(r));
        self.byte(bit);
    }

    pub(crate) fn push(&mut self, r: Reg) {
        if r.high() != 0 {
            self.byte(0x41);
        }
        self.byte(0x50 + r.low());
    }

    pub(crate) fn pop(&mut self, r: Reg) {
        if r.high() != 0 {
            self.byte(0x41);
        }
        self.byte(0x58 + r.low());
    }

    pub(crate) fn ret(&mut self) {
        self.byte(0xc3);
    }

    /// `call r` (an absolute address in a register).
    pub(crate) fn call_r(&mut self, r: Reg) {
        self.op(false, false, false, &[0xff], 2, Rm::Reg(r));
    }

    /// `call rel32`; returns where the displacement is, for [`Asm::patch_rel32`].
    pub(crate) fn call_rel32(&mut self) -> usize {
        self.byte(0xe8);
        self.rel32_field()
    }

    /// `jmp rel32`; returns where the displacement is.
    pub(crate) fn jmp_rel32(&mut self) -> usize {
        self.byte(0xe9);
        self.rel32_field()
    }

    /// `jcc rel32`; returns where the displacement is.
    pub(crate) fn jcc_rel32(&mut self, cc: Cond) -> usize {
        self.byte(0x0f);
        self.byte(0x80 + cc as u8);
        self.rel32_field()
    }

    fn rel32_field(&mut self) -> usize {
        let at = self.pos();
        self.imm32(0);
        at
    }

    /// Points the displacement at `at` (from a jump or call) to code offset `target`.
    pub(crate) fn patch_rel32(&mut self, at: usize, target: usize) {
        let rel = target as i64 - (at as i64 + 4);
        let rel = i32::try_from(rel).expect("code stays far below 2 GiB");
        self.buf[at..at + 4].copy_from_slice(&rel.to_le_bytes());
    }

    /// Points the displacement at `at` to the current offset.
    pub(crate) fn bind_here(&mut self, at: usize) {
        let here = self.pos();
        self.patch_rel32(at, here);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes one instruction with `f` and returns its bytes.
    fn enc(f: impl FnOnce(&mut Asm)) -> Vec<u8> {
        let mut a = Asm::default();
        f(&mut a);
        a.buf
    }

    // The expected bytes below were checked with GNU as and objdump (`as --64`,
    // `objdump -d -M intel`).

    #[test]
    fn register_forms() {
        assert_eq!(enc(|a| a.mov_rr(true, RAX, RBX)), [0x48, 0x89, 0xd8]);
        assert_eq!(
            enc(|a| a.alu_rr(Alu::Add, true, R13, R14)),
            [0x4d, 0x01, 0xf5]
        );
        assert_eq!(
            enc(|a| a.alu_rr(Alu::Sub, false, RDI, R8)),
            [0x44, 0x29, 0xc7]
        );
        assert_eq!(enc(|a| a.alu_rr(Alu::Xor, false, RAX, RAX)), [0x31, 0xc0]);
        assert_eq!(enc(|a| a.test_rr(true, R11, R11)), [0x4d, 0x85, 0xdb]);
        assert_eq!(enc(|a| a.imul_rr(true, RBX, R15)), [0x49, 0x0f, 0xaf, 0xdf]);
        assert_eq!(enc(|a| a.unary(Unary::Div, true, R11)), [0x49, 0xf7, 0xf3]);
        assert_eq!(enc(|a| a.unary(Unary::Neg, false, RCX)), [0xf7, 0xd9]);
        assert_eq!(
            enc(|a| a.shift_cl(Shift::Sar, true, RDX)),
            [0x48, 0xd3, 0xfa]
        );
        assert_eq!(
            enc(|a| a.shift_ri(Shift::Shl, false, R9, 3)),
            [0x41, 0xc1, 0xe1, 3]
        );
        assert_eq!(enc(|a| a.ror16_8(RSI)), [0x66, 0xc1, 0xce, 8]);
        assert_eq!(enc(|a| a.bswap(true, R14)), [0x49, 0x0f, 0xce]);
        assert_eq!(enc(|a| a.bswap(false, RAX)), [0x0f, 0xc8]);
        assert_eq!(enc(|a| a.movzx_rr(8, RAX, RSI)), [0x40, 0x0f, 0xb6, 0xc6]);
        assert_eq!(enc(|a| a.movzx_rr(16, R8, RDX)), [0x44, 0x0f, 0xb7, 0xc2]);
        assert_eq!(
            enc(|a| a.movsx_rr(8, true, RBX, RDI)),
            [0x48, 0x0f, 0xbe, 0xdf]
        );
        assert_eq!(enc(|a| a.movsx_rr(32, true, RAX, R13)), [0x49, 0x63, 0xc5]);
        assert_eq!(enc(|a| a.bts(R11, 32)), [0x49, 0x0f, 0xba, 0xeb, 32]);
        assert_eq!(enc(|a| a.push(R15)), [0x41, 0x57]);
        assert_eq!(enc(|a| a.pop(RBX)), [0x5b]);
        assert_eq!(enc(|a| a.call_r(RAX)), [0xff, 0xd0]);
    }

    #[test]
    fn immediates() {
        assert_eq!(
            enc(|a| a.alu_ri(Alu::Add, true, RAX, 1)),
            [0x48, 0x83, 0xc0, 1]
        );
        assert_eq!(
            enc(|a| a.alu_ri(Alu::Cmp, false, R10, 32)),
            [0x41, 0x83, 0xfa, 0x20]
        );
        assert_eq!(
            enc(|a| a.alu_ri(Alu::And, true, RDX, 0x1234_5678)),
            [0x48, 0x81, 0xe2, 0x78, 0x56, 0x34, 0x12]
        );
        assert_eq!(
            enc(|a| a.test_ri(false, RBX, 0x100)),
            [0xf7, 0xc3, 0, 1, 0, 0]
        );
        assert_eq!(
            enc(|a| a.imul_ri(true, R13, -3)),
            [0x4d, 0x69, 0xed, 0xfd, 0xff, 0xff, 0xff]
        );
        assert_eq!(enc(|a| a.mov_imm(R10, 7)), [0x41, 0xba, 7, 0, 0, 0]);
        assert_eq!(
            enc(|a| a.mov_imm(RAX, u64::MAX)),
            [0x48, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            enc(|a| a.mov_imm(R9, 1 << 32)),
            [0x49, 0xb9, 0, 0, 0, 0, 1, 0, 0, 0]
        );
    }

    #[test]
    fn memory_forms() {
        // r12 as a base needs a SIB byte; rbp and r13 always a displacement.
        assert_eq!(
            enc(|a| a.mov_rm(RAX, mem(R12, 8))),
            [0x49, 0x8b, 0x44, 0x24, 0x08]
        );
        assert_eq!(
            enc(|a| a.mov_rm(RCX, mem(R13, 0))),
            [0x49, 0x8b, 0x4d, 0x00]
        );
        assert_eq!(
            enc(|a| a.mov_mr(mem(RBP, -8), RDI)),
            [0x48, 0x89, 0x7d, 0xf8]
        );
        assert_eq!(enc(|a| a.mov_rm(RDX, mem(R11, 0))), [0x49, 0x8b, 0x13]);
        assert_eq!(
            enc(|a| a.load(Load::U8, RSI, mem(RBP, -512))),
            [0x0f, 0xb6, 0xb5, 0x00, 0xfe, 0xff, 0xff]
        );
        assert_eq!(
            enc(|a| a.load(Load::S32, R14, mem(R11, -4))),
            [0x4d, 0x63, 0x73, 0xfc]
        );
        assert_eq!(
            enc(|a| a.load(Load::S16, RAX, mem(RSP, 16))),
            [0x48, 0x0f, 0xbf, 0x44, 0x24, 0x10]
        );
    }

    #[test]
    fn stores_and_memory_operands() {
        // A byte store from sil needs a REX prefix.
        assert_eq!(
            enc(|a| a.store(1, mem(R11, -1), RSI)),
            [0x41, 0x88, 0x73, 0xff]
        );
        assert_eq!(
            enc(|a| a.store(1, mem(RBP, -1), RSI)),
            [0x40, 0x88, 0x75, 0xff]
        );
        assert_eq!(
            enc(|a| a.store(2, mem(RBP, -2), R8)),
            [0x66, 0x44, 0x89, 0x45, 0xfe]
        );
        assert_eq!(
            enc(|a| a.store_imm(2, mem(RBP, -2), 0x1234)),
            [0x66, 0xc7, 0x45, 0xfe, 0x34, 0x12]
        );
        assert_eq!(
            enc(|a| a.store_imm(8, mem(R11, -8), -1)),
            [0x49, 0xc7, 0x43, 0xf8, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            enc(|a| a.alu_mi(Alu::Sub, true, mem(R12, 16), 5)),
            [0x49, 0x83, 0x6c, 0x24, 0x10, 0x05]
        );
        assert_eq!(
            enc(|a| a.alu_rm(Alu::Cmp, true, R11, mem(R10, 8))),
            [0x4d, 0x3b, 0x5a, 0x08]
        );
        assert_eq!(
            enc(|a| a.lea(R11, mem(RDI, 300))),
            [0x4c, 0x8d, 0x9f, 0x2c, 1, 0, 0]
        );
    }

    #[test]
    fn base_plus_index_forms() {
        // Base plus index: `movzx edx, byte [r11+r9]`, `mov eax, [r11+r9+0x10]`,
        // `mov [rcx+r9-4], r8d`, and r13 as a base still with a displacement.
        assert_eq!(
            enc(|a| a.load(Load::U8, RDX, mem_index(R11, R9, 0))),
            [0x43, 0x0f, 0xb6, 0x14, 0x0b]
        );
        assert_eq!(
            enc(|a| a.load(Load::U32, RAX, mem_index(R11, R9, 16))),
            [0x43, 0x8b, 0x44, 0x0b, 0x10]
        );
        assert_eq!(
            enc(|a| a.store(4, mem_index(RCX, R9, -4), R8)),
            [0x46, 0x89, 0x44, 0x09, 0xfc]
        );
        assert_eq!(
            enc(|a| a.mov_rm(RSI, mem_index(R13, RAX, 0))),
            [0x49, 0x8b, 0x74, 0x05, 0x00]
        );
    }

    #[test]
    fn jumps_patch_to_their_target() {
        let mut a = Asm::default();
        let j = a.jcc_rel32(Cond::Ne);
        a.ret();
        a.bind_here(j);
        assert_eq!(a.buf, [0x0f, 0x85, 1, 0, 0, 0, 0xc3]);
        let mut a = Asm::default();
        let j = a.jmp_rel32();
        a.patch_rel32(j, 0);
        assert_eq!(a.buf, [0xe9, 0xfb, 0xff, 0xff, 0xff]);
        assert_eq!(Cond::A.invert(), Cond::Be);
        assert_eq!(Cond::L.invert().invert(), Cond::L);
    }
}
