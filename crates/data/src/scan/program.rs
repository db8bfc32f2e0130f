//! The scan program: raw eBPF emitted for one query's selection and projection, with
//! the column layout, the value ranges and the dictionary sizes compiled in as
//! constants. No compiler runs: the instructions are written here directly, so a
//! storage node needs no clang to serve a query.
//!
//! Windows and registers of a run (`cparam1` = the chunk's rows):
//!
//! ```text
//! window 0   the input columns, column k at byte inputs[k].segment (widest first)
//! window 1   the output columns, output j at byte outputs[j].segment
//! r2 row i   r3 rows   r4 win0 + 4i   r5 win0 + 8i   r6 win1 + 4*kept   r7 win1 + 8*kept
//! r8 kept    r0, r1 scratch
//!
//! per row:   every dict input: code < entries, else return BAD_CODE_BASE - k
//!            every input with ranges: value in one of them, else next row
//!            every output: copy the value, kept += 1
//! ```
//!
//! The program returns the rows kept, `-22` (CSX_EINVAL) when its windows or row count
//! do not fit the layout it was made for, or `BAD_CODE_BASE - k` at the first
//! dictionary code of input `k` out of range (the host then finds the row).

use csx_ebpf::isa::*;

use crate::predicate::RawRange;

/// r0 of a bad dictionary code in input `k`: `BAD_CODE_BASE - k` (below every CSX_E code).
pub const BAD_CODE_BASE: i64 = -100_000;
/// CSX_EINVAL.
const EINVAL: i32 = -22;

/// One column the program reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// 4 or 8 bytes.
    pub width: u64,
    /// Byte offset of the column in window 0.
    pub segment: u64,
    /// Dictionary entries (dict columns): every code is checked against it.
    pub dict_entries: Option<u64>,
    /// The raw (unsigned) values a row must have in this column: sorted, disjoint
    /// inclusive ranges; `None`: no condition.
    pub ranges: Option<Vec<RawRange>>,
}

/// One column the program writes: a copy of input `input`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub input: usize,
    /// Byte offset of the column in window 1.
    pub segment: u64,
}

/// What the program is made for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub inputs: Vec<Input>,
    pub outputs: Vec<Output>,
    /// Most rows a run may have.
    pub chunk_rows: u64,
    /// Bytes window 0 and window 1 must have at least.
    pub in_bytes: u64,
    pub out_bytes: u64,
}

const R0: u8 = 0;
const R1: u8 = 1;
const ROW: u8 = 2;
const ROWS: u8 = 3;
const P4: u8 = 4;
const P8: u8 = 5;
const ARGS: u8 = 5;
const O4: u8 = 6;
const O8: u8 = 7;
const KEPT: u8 = 8;

/// Where a jump goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Loop,
    Next,
    Done,
    Einval,
    Bad(usize),
    /// The end of input `k`'s range test: the value passed.
    Pass(usize),
}

struct Emitter {
    code: Vec<Insn>,
    /// (slot of a jump, its target).
    fixups: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Emitter {
    fn op(&mut self, opc: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn {
            opc,
            dst,
            src,
            off,
            imm,
        });
    }

    fn label(&mut self, l: Label) {
        self.labels.push((l, self.code.len()));
    }

    /// `dst = imm` (64 bits): `mov` when the sign-extended imm32 holds it, else `lddw`.
    fn mov64(&mut self, dst: u8, v: u64) {
        if let Ok(imm) = i32::try_from(v as i64) {
            self.op(CLASS_ALU64 | ALU_MOV | SRC_K, dst, 0, 0, imm);
        } else {
            self.op(CLASS_LD | MODE_IMM | SIZE_DW, dst, 0, 0, v as u32 as i32);
            self.op(0, 0, 0, 0, (v >> 32) as u32 as i32);
        }
    }

    fn alu_k(&mut self, alu: u8, dst: u8, imm: i32) {
        self.op(CLASS_ALU64 | alu | SRC_K, dst, 0, 0, imm);
    }

    fn alu_x(&mut self, alu: u8, dst: u8, src: u8) {
        self.op(CLASS_ALU64 | alu | SRC_X, dst, src, 0, 0);
    }

    fn jump(&mut self, insn: Insn, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.code.push(insn);
    }

    /// `if value(reg) <cmp> v goto to`, unsigned, over `width` bytes: a 32-bit jump
    /// for 4-byte values (any u32 fits its imm), a 64-bit one with imm when the
    /// sign-extended imm32 is `v`, else through r1.
    fn jump_cmp(&mut self, cmp: u8, reg: u8, width: u64, v: u64, to: Label) {
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

    /// The address `base + segment` in a register: `base` itself with the segment
    /// in the offset field when it fits 16 bits, else r1.
    fn address(&mut self, base: u8, segment: u64) -> (u8, i16) {
        match i16::try_from(segment) {
            Ok(off) => (base, off),
            Err(_) => {
                self.alu_x(ALU_MOV, R1, base);
                self.alu_k(ALU_ADD, R1, segment as i32);
                (R1, 0)
            }
        }
    }

    fn load(&mut self, dst: u8, input: &Input) {
        let base = if input.width == 4 { P4 } else { P8 };
        let (reg, off) = self.address(base, input.segment);
        let size = if input.width == 4 { SIZE_W } else { SIZE_DW };
        self.op(CLASS_LDX | MODE_MEM | size, dst, reg, off, 0);
    }

    fn store(&mut self, width: u64, segment: u64, src: u8) {
        let base = if width == 4 { O4 } else { O8 };
        // The value is in r0: the address may use r1.
        let (reg, off) = self.address(base, segment);
        let size = if width == 4 { SIZE_W } else { SIZE_DW };
        self.op(CLASS_STX | MODE_MEM | size, reg, src, off, 0);
    }

    fn finish(mut self) -> Vec<u8> {
        for (at, to) in std::mem::take(&mut self.fixups) {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|&(_, pc)| pc)
                .expect("every label the emitter jumps to is placed");
            let off = target as i64 - at as i64 - 1;
            self.code[at].off = i16::try_from(off).expect("scan programs stay under 32 Ki slots");
        }
        self.code.iter().flat_map(|i| i.encode()).collect()
    }
}

/// The largest segment or window size the program can address (an imm32).
pub const SEGMENT_MAX: u64 = i32::MAX as u64;

/// Registers a program in pointer form may give columns and the loop's end: r2-r9.
const COLUMN_REGS: usize = 8;

/// The raw eBPF image of the scan program for `layout` (see the module doc). Every
/// segment and window size must be at most [`SEGMENT_MAX`], widths 4 or 8, and the
/// inputs at most 15.
pub fn emit(layout: &Layout) -> Vec<u8> {
    assert!(layout.in_bytes <= SEGMENT_MAX && layout.out_bytes <= SEGMENT_MAX);
    let mut e = Emitter {
        code: Vec::new(),
        fixups: Vec::new(),
        labels: Vec::new(),
    };
    let n = layout.inputs.len();
    let m = layout.outputs.len();
    if n > 0 && n + m + 1 + usize::from(m == 0) <= COLUMN_REGS {
        emit_pointers(&mut e, layout);
    } else {
        emit_shared(&mut e, layout);
    }
    e.finish()
}

/// A 64-bit jump comparing `dst` with `imm` (its target fixed up later).
fn jmp_k(opc: u8, dst: u8, imm: i32) -> Insn {
    Insn {
        opc: CLASS_JMP | opc | SRC_K,
        dst,
        src: 0,
        off: 0,
        imm,
    }
}

/// A 64-bit jump comparing `dst` with `src`.
fn jmp_x(opc: u8, dst: u8, src: u8) -> Insn {
    Insn {
        opc: CLASS_JMP | opc | SRC_X,
        dst,
        src,
        off: 0,
        imm: 0,
    }
}

/// The argument checks every form starts with: two windows, rows <= chunk_rows,
/// windows as large as the layout; leaves rows in `rows`. Reads r5 (args).
fn check_args(e: &mut Emitter, layout: &Layout, rows: u8) {
    e.op(CLASS_LDX | MODE_MEM | SIZE_W, R1, ARGS, 16, 0);
    e.jump(jmp_k(JMP_JNE, R1, 2), Label::Einval);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, rows, ARGS, 0, 0);
    e.mov64(R1, layout.chunk_rows);
    e.jump(jmp_x(JMP_JGT, rows, R1), Label::Einval);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, ARGS, 24 + 8, 0);
    e.jump(jmp_k(JMP_JLT, R1, layout.in_bytes as i32), Label::Einval);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, ARGS, 24 + 16 + 8, 0);
    e.jump(jmp_k(JMP_JLT, R1, layout.out_bytes as i32), Label::Einval);
}

/// The range test of input `k`, its value in r0: a value in none of the ranges
/// jumps to `fail`; one in range `j` goes on past the test.
fn range_test(e: &mut Emitter, k: usize, input: &Input, ranges: &[RawRange], fail: Label) {
    let max = if input.width == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    for (j, &(lo, hi)) in ranges.iter().enumerate() {
        // Reaching range j means the value is above range j-1.
        if lo > 0 {
            e.jump_cmp(JMP_JLT, R0, input.width, lo, fail);
        }
        if j + 1 < ranges.len() {
            e.jump_cmp(JMP_JLE, R0, input.width, hi, Label::Pass(k));
        } else if hi < max {
            e.jump_cmp(JMP_JGT, R0, input.width, hi, fail);
        }
    }
    if ranges.is_empty() {
        e.jump(jmp_k(JMP_JA, 0, 0), fail);
    }
    e.label(Label::Pass(k));
}

fn size_of(width: u64) -> u8 {
    if width == 4 {
        SIZE_W
    } else {
        SIZE_DW
    }
}

fn exits(e: &mut Emitter, layout: &Layout) {
    e.label(Label::Einval);
    e.alu_k(ALU_MOV, R0, EINVAL);
    e.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
    for (k, input) in layout.inputs.iter().enumerate() {
        if input.dict_entries.is_some() {
            e.label(Label::Bad(k));
            e.alu_k(ALU_MOV, R0, (BAD_CODE_BASE - k as i64) as i32);
            e.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
        }
    }
}

/// Pointer form (when the columns fit in registers), the shape clang gives such a
/// loop: a register per input and per output column, advanced by its width; the
/// loop's advance block comes first, and a row that fails a test jumps back to it.
///
/// ```text
///         inputs r2.., outputs after them, END (input 0's end) last; [r10-8] output 0's start
///   next: advance every input; if input 0 >= END goto done
///   body: dict checks, range tests (fail: goto next), copy outputs, goto next
///   done: r0 = (output 0 - its start) / width   (or the kept counter without outputs)
/// ```
fn emit_pointers(e: &mut Emitter, layout: &Layout) {
    let n = layout.inputs.len();
    let m = layout.outputs.len();
    let input_reg = |k: usize| 2 + k as u8;
    let output_reg = |j: usize| 2 + (n + j) as u8;
    let end = 2 + (n + m) as u8;
    let kept = end + 1; // only without outputs
    check_args(e, layout, R0);
    // Window 1's address to the stack, window 0's to r1: r5 is a column from here.
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, ARGS, 24 + 16, 0);
    e.op(CLASS_STX | MODE_MEM | SIZE_DW, 10, R1, -16, 0);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, ARGS, 24, 0);
    for (k, input) in layout.inputs.iter().enumerate() {
        e.alu_x(ALU_MOV, input_reg(k), R1);
        if input.segment > 0 {
            e.alu_k(ALU_ADD, input_reg(k), input.segment as i32);
        }
    }
    let w0 = layout.inputs[0].width;
    e.alu_x(ALU_MOV, end, R0);
    e.alu_k(ALU_LSH, end, w0.trailing_zeros() as i32);
    e.alu_x(ALU_ADD, end, input_reg(0));
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, 10, -16, 0);
    for (j, out) in layout.outputs.iter().enumerate() {
        e.alu_x(ALU_MOV, output_reg(j), R1);
        if out.segment > 0 {
            e.alu_k(ALU_ADD, output_reg(j), out.segment as i32);
        }
    }
    if m > 0 {
        e.op(CLASS_STX | MODE_MEM | SIZE_DW, 10, output_reg(0), -8, 0);
    } else {
        e.alu_k(ALU_MOV, kept, 0);
    }
    e.jump(jmp_k(JMP_JEQ, R0, 0), Label::Done);
    e.jump(jmp_k(JMP_JA, 0, 0), Label::Loop);
    e.label(Label::Next);
    for (k, input) in layout.inputs.iter().enumerate() {
        e.alu_k(ALU_ADD, input_reg(k), input.width as i32);
    }
    e.jump(jmp_x(JMP_JGE, input_reg(0), end), Label::Done);
    e.label(Label::Loop);
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(entries) = input.dict_entries {
            e.op(
                CLASS_LDX | MODE_MEM | size_of(input.width),
                R0,
                input_reg(k),
                0,
                0,
            );
            e.jump_cmp(JMP_JGE, R0, input.width, entries, Label::Bad(k));
        }
    }
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(ranges) = &input.ranges {
            e.op(
                CLASS_LDX | MODE_MEM | size_of(input.width),
                R0,
                input_reg(k),
                0,
                0,
            );
            range_test(e, k, input, ranges, Label::Next);
        }
    }
    for (j, out) in layout.outputs.iter().enumerate() {
        let input = &layout.inputs[out.input];
        let size = size_of(input.width);
        e.op(CLASS_LDX | MODE_MEM | size, R0, input_reg(out.input), 0, 0);
        e.op(CLASS_STX | MODE_MEM | size, output_reg(j), R0, 0, 0);
        e.alu_k(ALU_ADD, output_reg(j), input.width as i32);
    }
    if m == 0 {
        e.alu_k(ALU_ADD, kept, 1);
    }
    e.jump(jmp_k(JMP_JA, 0, 0), Label::Next);
    e.label(Label::Done);
    if m > 0 {
        let w = layout.inputs[layout.outputs[0].input].width;
        e.alu_x(ALU_MOV, R0, output_reg(0));
        e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, 10, -8, 0);
        e.alu_x(ALU_SUB, R0, R1);
        e.alu_k(ALU_RSH, R0, w.trailing_zeros() as i32);
    } else {
        e.alu_x(ALU_MOV, R0, kept);
    }
    e.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
    exits(e, layout);
}

/// Shared-base form (any number of columns): r4/r5 advance by 4/8 bytes per row from
/// window 0, r6/r7 by 4/8 per kept row from window 1, and each column is reached at
/// its segment from the base of its width.
fn emit_shared(e: &mut Emitter, layout: &Layout) {
    check_args(e, layout, ROWS);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, P4, ARGS, 24, 0);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, O4, ARGS, 24 + 16, 0);
    // r5 (args) is free from here.
    e.alu_x(ALU_MOV, P8, P4);
    e.alu_x(ALU_MOV, O8, O4);
    e.alu_k(ALU_MOV, ROW, 0);
    e.alu_k(ALU_MOV, KEPT, 0);
    e.jump(jmp_k(JMP_JEQ, ROWS, 0), Label::Done);

    e.label(Label::Loop);
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(entries) = input.dict_entries {
            e.load(R0, input);
            e.jump_cmp(JMP_JGE, R0, input.width, entries, Label::Bad(k));
        }
    }
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(ranges) = &input.ranges {
            e.load(R0, input);
            range_test(e, k, input, ranges, Label::Next);
        }
    }
    for out in &layout.outputs {
        let input = &layout.inputs[out.input];
        e.load(R0, input);
        e.store(input.width, out.segment, R0);
    }
    let widths = |w: u64| {
        layout
            .outputs
            .iter()
            .any(|o| layout.inputs[o.input].width == w)
    };
    if widths(4) {
        e.alu_k(ALU_ADD, O4, 4);
    }
    if widths(8) {
        e.alu_k(ALU_ADD, O8, 8);
    }
    e.alu_k(ALU_ADD, KEPT, 1);
    e.label(Label::Next);
    if layout.inputs.iter().any(|i| i.width == 4) {
        e.alu_k(ALU_ADD, P4, 4);
    }
    if layout.inputs.iter().any(|i| i.width == 8) {
        e.alu_k(ALU_ADD, P8, 8);
    }
    e.alu_k(ALU_ADD, ROW, 1);
    e.jump(jmp_x(JMP_JLT, ROW, ROWS), Label::Loop);
    e.label(Label::Done);
    e.alu_x(ALU_MOV, R0, KEPT);
    e.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
    exits(e, layout);
}
