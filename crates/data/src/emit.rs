//! Writing raw eBPF by hand: the small assembler the programs csx-data emits at run time
//! share (the scan's, `scan::program`, and the SSB probe's, `ssb::probe`). Jumps go to
//! labels of the caller's own type and are fixed up when the image is finished.

use csx_ebpf::isa::*;

pub(crate) const R0: u8 = 0;
pub(crate) const R1: u8 = 1;

/// An instruction list with labelled jump targets.
pub(crate) struct Emitter<L> {
    code: Vec<Insn>,
    /// (slot of a jump, its target).
    fixups: Vec<(usize, L)>,
    labels: Vec<(L, usize)>,
}

impl<L: Copy + PartialEq + std::fmt::Debug> Emitter<L> {
    pub(crate) fn new() -> Emitter<L> {
        Emitter {
            code: Vec::new(),
            fixups: Vec::new(),
            labels: Vec::new(),
        }
    }

    pub(crate) fn op(&mut self, opc: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn {
            opc,
            dst,
            src,
            off,
            imm,
        });
    }

    /// Places label `l` at the next instruction.
    pub(crate) fn label(&mut self, l: L) {
        self.labels.push((l, self.code.len()));
    }

    /// `dst = imm` (64 bits): `mov` when the sign-extended imm32 holds it, else `lddw`.
    pub(crate) fn mov64(&mut self, dst: u8, v: u64) {
        if let Ok(imm) = i32::try_from(v as i64) {
            self.op(CLASS_ALU64 | ALU_MOV | SRC_K, dst, 0, 0, imm);
        } else {
            self.op(CLASS_LD | MODE_IMM | SIZE_DW, dst, 0, 0, v as u32 as i32);
            self.op(0, 0, 0, 0, (v >> 32) as u32 as i32);
        }
    }

    pub(crate) fn alu_k(&mut self, alu: u8, dst: u8, imm: i32) {
        self.op(CLASS_ALU64 | alu | SRC_K, dst, 0, 0, imm);
    }

    pub(crate) fn alu_x(&mut self, alu: u8, dst: u8, src: u8) {
        self.op(CLASS_ALU64 | alu | SRC_X, dst, src, 0, 0);
    }

    /// A 32-bit ALU operation with an immediate (the result is zero-extended).
    pub(crate) fn alu32_k(&mut self, alu: u8, dst: u8, imm: i32) {
        self.op(CLASS_ALU | alu | SRC_K, dst, 0, 0, imm);
    }

    /// `dst = *(size *)(src + off)`.
    pub(crate) fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.op(CLASS_LDX | MODE_MEM | size, dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = src`.
    pub(crate) fn stx(&mut self, size: u8, dst: u8, src: u8, off: i16) {
        self.op(CLASS_STX | MODE_MEM | size, dst, src, off, 0);
    }

    pub(crate) fn exit(&mut self) {
        self.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
    }

    /// A call of device function `id` (arguments in r1-r5, result in r0; r1-r5 are
    /// clobbered).
    pub(crate) fn call(&mut self, id: i32) {
        self.op(CLASS_JMP | JMP_CALL, 0, 0, 0, id);
    }

    pub(crate) fn jump(&mut self, insn: Insn, to: L) {
        self.fixups.push((self.code.len(), to));
        self.code.push(insn);
    }

    /// `goto to`.
    pub(crate) fn goto(&mut self, to: L) {
        self.jump(jmp_k(JMP_JA, 0, 0), to);
    }

    /// `if value(reg) <cmp> v goto to`, unsigned, over `width` bytes: a 32-bit jump
    /// for 4-byte values (any u32 fits its imm), a 64-bit one with imm when the
    /// sign-extended imm32 is `v`, else through r1.
    pub(crate) fn jump_cmp(&mut self, cmp: u8, reg: u8, width: u64, v: u64, to: L) {
        let (class, imm) = if width == 4 {
            (CLASS_JMP32, Some(v as u32 as i32))
        } else {
            (CLASS_JMP, i32::try_from(v as i64).ok())
        };
        match imm {
            Some(imm) => self.jump(
                Insn {
                    opc: class | cmp | SRC_K,
                    dst: reg,
                    src: 0,
                    off: 0,
                    imm,
                },
                to,
            ),
            None => {
                self.mov64(R1, v);
                self.jump(
                    Insn {
                        opc: class | cmp | SRC_X,
                        dst: reg,
                        src: R1,
                        off: 0,
                        imm: 0,
                    },
                    to,
                );
            }
        }
    }

    /// The range test of a value in r0 of `width` bytes: a value in none of `ranges`
    /// (sorted, disjoint, inclusive) jumps to `fail`; one in a range goes on past the
    /// test, where the caller places label `pass` (used when there are several ranges).
    pub(crate) fn range_test(&mut self, width: u64, ranges: &[(u64, u64)], fail: L, pass: L) {
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
    pub(crate) fn finish(mut self) -> Vec<u8> {
        for (at, to) in std::mem::take(&mut self.fixups) {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|&(_, pc)| pc)
                .unwrap_or_else(|| panic!("label {to:?} is jumped to but never placed"));
            let off = target as i64 - at as i64 - 1;
            self.code[at].off =
                i16::try_from(off).expect("emitted programs stay under 32 Ki slots");
        }
        self.code.iter().flat_map(|i| i.encode()).collect()
    }
}

/// A 64-bit jump comparing `dst` with `imm` (its target fixed up later).
pub(crate) fn jmp_k(opc: u8, dst: u8, imm: i32) -> Insn {
    Insn {
        opc: CLASS_JMP | opc | SRC_K,
        dst,
        src: 0,
        off: 0,
        imm,
    }
}

/// A 64-bit jump comparing `dst` with `src`.
pub(crate) fn jmp_x(opc: u8, dst: u8, src: u8) -> Insn {
    Insn {
        opc: CLASS_JMP | opc | SRC_X,
        dst,
        src,
        off: 0,
        imm: 0,
    }
}

/// The load/store size field of a 4- or 8-byte value.
pub(crate) fn size_of(width: u64) -> u8 {
    if width == 4 {
        SIZE_W
    } else {
        SIZE_DW
    }
}
