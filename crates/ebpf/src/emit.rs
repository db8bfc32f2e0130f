//! Writing raw eBPF from Rust at run time: an instruction list with jumps to labels of
//! the caller's own type, fixed up when the image is finished. The programs the host
//! makes for one query (csx-data's scan and probe) or one operation (the array sort's
//! calls of registered functions) are written with it; [`crate::asm`] is the text
//! assembler for programs written by hand.
//!
//! [`Emitter::finish`] never panics: a label jumped to but never placed, a label placed
//! twice or a jump farther than a 16-bit offset reaches is an [`EmitError`].

use crate::isa::*;

/// Register numbers, for readability at call sites.
pub const R0: u8 = 0;
pub const R1: u8 = 1;
pub const R2: u8 = 2;
pub const R3: u8 = 3;
pub const R4: u8 = 4;
pub const R5: u8 = 5;
pub const R6: u8 = 6;
pub const R7: u8 = 7;
pub const R8: u8 = 8;
pub const R9: u8 = 9;
/// The frame pointer.
pub const R10: u8 = 10;

/// Why an emitted program could not be finished.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    #[error("label {label} is jumped to (from instruction {at}) but never placed")]
    Unplaced { label: String, at: usize },
    #[error("label {label} is placed twice (at instructions {first} and {second})")]
    PlacedTwice {
        label: String,
        first: usize,
        second: usize,
    },
    #[error(
        "the jump at instruction {at} to label {label} (instruction {target}) spans {offset} \
         slots; a jump reaches {min}..={max}",
        min = i16::MIN,
        max = i16::MAX
    )]
    JumpOutOfRange {
        label: String,
        at: usize,
        target: usize,
        offset: i64,
    },
}

/// An instruction list with labelled jump targets.
#[derive(Debug)]
pub struct Emitter<L> {
    code: Vec<Insn>,
    /// (slot of a jump, its target).
    fixups: Vec<(usize, L)>,
    labels: Vec<(L, usize)>,
}

impl<L: Copy + PartialEq + std::fmt::Debug> Default for Emitter<L> {
    fn default() -> Self {
        Emitter::new()
    }
}

impl<L: Copy + PartialEq + std::fmt::Debug> Emitter<L> {
    pub fn new() -> Emitter<L> {
        Emitter {
            code: Vec::new(),
            fixups: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// Slots emitted so far (an `lddw` takes two).
    pub fn len(&self) -> usize {
        self.code.len()
    }

    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// One instruction slot, as given.
    pub fn op(&mut self, opc: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn {
            opc,
            dst,
            src,
            off,
            imm,
        });
    }

    /// Places label `l` at the next instruction.
    pub fn label(&mut self, l: L) {
        self.labels.push((l, self.code.len()));
    }

    /// `dst = imm` (64 bits): `mov` when the sign-extended imm32 holds it, else `lddw`.
    pub fn mov64(&mut self, dst: u8, v: u64) {
        if let Ok(imm) = i32::try_from(v as i64) {
            self.op(CLASS_ALU64 | ALU_MOV | SRC_K, dst, 0, 0, imm);
        } else {
            self.op(OP_LDDW, dst, 0, 0, v as u32 as i32);
            self.op(0, 0, 0, 0, (v >> 32) as u32 as i32);
        }
    }

    /// A 64-bit ALU operation with an immediate: `dst <alu>= imm`.
    pub fn alu_k(&mut self, alu: u8, dst: u8, imm: i32) {
        self.op(CLASS_ALU64 | alu | SRC_K, dst, 0, 0, imm);
    }

    /// A 64-bit ALU operation between registers: `dst <alu>= src`.
    pub fn alu_x(&mut self, alu: u8, dst: u8, src: u8) {
        self.op(CLASS_ALU64 | alu | SRC_X, dst, src, 0, 0);
    }

    /// A 32-bit ALU operation with an immediate (the result is zero-extended).
    pub fn alu32_k(&mut self, alu: u8, dst: u8, imm: i32) {
        self.op(CLASS_ALU | alu | SRC_K, dst, 0, 0, imm);
    }

    /// `dst = *(size *)(src + off)`.
    pub fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.op(CLASS_LDX | MODE_MEM | size, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = src`.
    pub fn stx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.op(CLASS_STX | MODE_MEM | size, dst, src, off, 0);
    }

    pub fn exit(&mut self) {
        self.op(OP_EXIT, 0, 0, 0, 0);
    }

    /// A call of device function `id` (arguments in r1-r5, result in r0; r1-r5 are
    /// clobbered).
    pub fn call(&mut self, id: i32) {
        self.op(OP_CALL, 0, 0, 0, id);
    }

    /// `insn`, its offset fixed up to label `to` by [`Emitter::finish`].
    pub fn jump(&mut self, insn: Insn, to: L) {
        self.fixups.push((self.code.len(), to));
        self.code.push(insn);
    }

    /// `goto to`.
    pub fn goto(&mut self, to: L) {
        self.jump(jmp_k(JMP_JA, 0, 0), to);
    }

    /// `if value(reg) <cmp> v goto to`, unsigned, over `width` bytes: a 32-bit jump
    /// for 4-byte values (any u32 fits its imm), a 64-bit one with imm when the
    /// sign-extended imm32 is `v`, else through r1 (clobbered).
    pub fn jump_cmp(&mut self, cmp: u8, reg: u8, width: u64, v: u64, to: L) {
        let (class, imm) = if width == 4 {
            (CLASS_JMP32, Some(v as u32 as i32))
        } else {
            (CLASS_JMP, i32::try_from(v as i64).ok())
        };
        let (src, src_reg, imm) = match imm {
            Some(imm) => (SRC_K, 0, imm),
            None => {
                self.mov64(R1, v);
                (SRC_X, R1, 0)
            }
        };
        self.jump(
            Insn {
                opc: class | cmp | src,
                dst: reg,
                src: src_reg,
                off: 0,
                imm,
            },
            to,
        );
    }

    /// The range test of a value in r0 of `width` bytes: a value in none of `ranges`
    /// (sorted, disjoint, inclusive) jumps to `fail`; one in a range goes on past the
    /// test, where label `pass` is placed (used when there are several ranges).
    pub fn range_test(&mut self, width: u64, ranges: &[(u64, u64)], fail: L, pass: L) {
        let max = if width == 4 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        };
        for (j, &(lo, hi)) in ranges.iter().enumerate() {
            // Reaching range j means the value is above range j-1.
            if lo > 0 {
                self.jump_cmp(JMP_JLT, R0, width, lo, fail);
            }
            if j + 1 < ranges.len() {
                self.jump_cmp(JMP_JLE, R0, width, hi, pass);
            } else if hi < max {
                self.jump_cmp(JMP_JGT, R0, width, hi, fail);
            }
        }
        if ranges.is_empty() {
            self.goto(fail);
        }
        self.label(pass);
    }

    /// The image: every jump fixed up to its label.
    pub fn finish(mut self) -> Result<Vec<u8>, EmitError> {
        for (i, (l, first)) in self.labels.iter().enumerate() {
            if let Some((_, second)) = self.labels[i + 1..].iter().find(|(m, _)| m == l) {
                return Err(EmitError::PlacedTwice {
                    label: format!("{l:?}"),
                    first: *first,
                    second: *second,
                });
            }
        }
        for (at, to) in std::mem::take(&mut self.fixups) {
            let Some(target) = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|&(_, pc)| pc)
            else {
                return Err(EmitError::Unplaced {
                    label: format!("{to:?}"),
                    at,
                });
            };
            let offset = target as i64 - at as i64 - 1;
            self.code[at].off = i16::try_from(offset).map_err(|_| EmitError::JumpOutOfRange {
                label: format!("{to:?}"),
                at,
                target,
                offset,
            })?;
        }
        Ok(self.code.iter().flat_map(|i| i.encode()).collect())
    }
}

/// A 64-bit jump comparing `dst` with `imm` (its target fixed up later).
pub fn jmp_k(opc: u8, dst: u8, imm: i32) -> Insn {
    Insn {
        opc: CLASS_JMP | opc | SRC_K,
        dst,
        src: 0,
        off: 0,
        imm,
    }
}

/// A 64-bit jump comparing `dst` with `src`.
pub fn jmp_x(opc: u8, dst: u8, src: u8) -> Insn {
    Insn {
        opc: CLASS_JMP | opc | SRC_X,
        dst,
        src,
        off: 0,
        imm: 0,
    }
}

/// The load/store size field of a 4- or 8-byte value.
pub fn size_of(width: u64) -> u8 {
    if width == 4 {
        SIZE_W
    } else {
        SIZE_DW
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum L {
        Out,
        Back,
    }

    #[test]
    fn emits_what_the_assembler_assembles() {
        let mut e = Emitter::new();
        e.ldx(SIZE_DW, R3, R5, 0);
        e.label(L::Back);
        e.jump(jmp_k(JMP_JEQ, R3, 0), L::Out);
        e.alu_k(ALU_SUB, R3, 1);
        e.goto(L::Back);
        e.label(L::Out);
        e.mov64(R0, 0x1_0000_0000);
        e.call(18);
        e.exit();
        let image = e.finish().expect("every label placed");
        let text = "ldxdw %r3, [%r5+0]\njeq %r3, 0, +2\nsub %r3, 1\nja -3\n\
                    lddw %r0, 0x100000000\ncall 18\nexit\n";
        let insns = assemble(text).expect("assembles");
        assert_eq!(
            image,
            insns.iter().flat_map(|i| i.encode()).collect::<Vec<u8>>()
        );
    }

    #[test]
    fn an_unplaced_label_is_an_error() {
        let mut e: Emitter<L> = Emitter::new();
        e.exit();
        e.goto(L::Out);
        let err = e.finish().unwrap_err();
        assert_eq!(
            err,
            EmitError::Unplaced {
                label: "Out".into(),
                at: 1
            }
        );
        assert!(err.to_string().contains("Out"), "{err}");
    }

    #[test]
    fn a_label_placed_twice_is_an_error() {
        let mut e: Emitter<L> = Emitter::new();
        e.label(L::Out);
        e.exit();
        e.label(L::Out);
        assert!(matches!(
            e.finish(),
            Err(EmitError::PlacedTwice {
                first: 0,
                second: 1,
                ..
            })
        ));
    }

    #[test]
    fn a_jump_beyond_sixteen_bits_is_an_error() {
        let mut e: Emitter<L> = Emitter::new();
        e.goto(L::Out);
        for _ in 0..=i16::MAX as usize {
            e.alu_k(ALU_ADD, R0, 1);
        }
        e.label(L::Out);
        e.exit();
        let err = e.finish().unwrap_err();
        assert!(
            matches!(err, EmitError::JumpOutOfRange { at: 0, offset, .. } if offset == 32768),
            "{err:?}"
        );
        // One slot fewer reaches.
        let mut e: Emitter<L> = Emitter::new();
        e.goto(L::Out);
        for _ in 0..i16::MAX as usize {
            e.alu_k(ALU_ADD, R0, 1);
        }
        e.label(L::Out);
        e.exit();
        assert!(e.finish().is_ok());
    }
}
