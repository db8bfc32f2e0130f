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
//! r8 kept (the unrolled form with outputs counts by r6/r7 instead)    r0, r1 scratch
//!
//! per row:   every dict input: code < entries, else return BAD_CODE_BASE - k
//!            every input with ranges: value in one of them, else next row
//!            every output: copy the value, kept += 1
//! ```
//!
//! Three forms of that loop: the unrolled one (no dictionary input; the usual case) tests
//! the input expected to reject the most rows first, sixteen rows a loop, and loads the
//! other inputs of a row only when its tests so far passed (`emit_unrolled`); the
//! pointer form and the shared-base form (above) load every input of every row.
//!
//! The program returns the rows kept, `-22` (CSX_EINVAL) when its windows or row count
//! do not fit the layout it was made for, or `BAD_CODE_BASE - k` at the first
//! dictionary code of input `k` out of range (the host then finds the row).

use csx_ebpf::isa::*;

use csx_ebpf::emit::{jmp_k, jmp_x, size_of, R0, R1};

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
    /// Rows expected to pass `ranges`, parts per million ([`PASS_UNKNOWN`]: not
    /// estimated); the unrolled form tests the inputs with the fewest first.
    pub pass_ppm: u32,
}

/// [`Input::pass_ppm`] without an estimate: every row.
pub const PASS_UNKNOWN: u32 = 1_000_000;

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
    /// The unrolled form's: the end of row `u` of a group (or of the tail's row,
    /// `u` = [`UNROLL`]), where a failed test goes.
    Skip(usize),
    /// The end of input `k`'s range test in row `u`.
    PassAt(usize, usize),
    /// The unrolled form's loop of single rows after the last full group.
    Tail,
}

type Emitter = csx_ebpf::emit::Emitter<Label>;

/// The address `base + segment` in a register: `base` itself with the segment in the
/// offset field when it fits 16 bits, else r1.
fn address(e: &mut Emitter, base: u8, segment: u64) -> (u8, i16) {
    match i16::try_from(segment) {
        Ok(off) => (base, off),
        Err(_) => {
            e.alu_x(ALU_MOV, R1, base);
            e.alu_k(ALU_ADD, R1, segment as i32);
            (R1, 0)
        }
    }
}

fn load(e: &mut Emitter, dst: u8, input: &Input) {
    let base = if input.width == 4 { P4 } else { P8 };
    let (reg, off) = address(e, base, input.segment);
    e.ldx(size_of(input.width), dst, reg, off);
}

fn store(e: &mut Emitter, width: u64, segment: u64, src: u8) {
    let base = if width == 4 { O4 } else { O8 };
    // The value is in r0: the address may use r1.
    let (reg, off) = address(e, base, segment);
    e.stx(size_of(width), reg, src, off);
}

/// The range test of the value in r0 (which it may clobber, and r1), as 64-bit jumps: a
/// 4-byte value is loaded zero-extended, so it compares as its 8 bytes do, and a 64-bit
/// jump costs a device core less than a 32-bit one (which clears the upper half first).
/// A last range up to the width's largest value is open above (no test).
///
/// One range bounded on both sides is one compare: `r0 -= lo; if r0 > hi - lo goto
/// fail` (a value below `lo` wraps above `hi - lo`), so a row costs one branch, not
/// two; a branch a row's value decides is mispredicted often (Q6's dates: about half),
/// and each costs the host core more than the subtraction.
///
/// An 8-byte column's ranges that make one interval of signed values (a decimal's
/// `x < 24` is `[0, 2399]` and every negative value) are tested as that interval
/// ([`signed_interval`]): one signed jump when it is open on one side.
fn range_test(e: &mut Emitter, width: u64, ranges: &[RawRange], fail: Label, pass: Label) {
    let mut ranges = ranges.to_vec();
    if let Some(last) = ranges.last_mut() {
        if width == 4 && last.1 >= u64::from(u32::MAX) {
            last.1 = u64::MAX;
        }
    }
    if let Some((lo, hi)) = signed_interval(width, &ranges) {
        match (lo, hi) {
            (i64::MIN, i64::MAX) => {}
            (0, hi) => e.jump_cmp(JMP_JGT, R0, 8, hi as u64, fail),
            (i64::MIN, hi) => e.jump_cmp(JMP_JSGT, R0, 8, hi as u64, fail),
            (lo, i64::MAX) => e.jump_cmp(JMP_JSLT, R0, 8, lo as u64, fail),
            (lo, hi) => one_compare(e, lo as u64, hi as u64, fail),
        }
        e.label(pass);
        return;
    }
    if let [(lo, hi)] = ranges[..] {
        if lo > 0 && hi < u64::MAX {
            one_compare(e, lo, hi, fail);
            e.label(pass);
            return;
        }
    }
    e.range_test(8, &ranges, fail, pass);
}

/// `r0 -= lo; if r0 > hi - lo goto fail`, wrapping: keeps the values from `lo` up to
/// `hi`, going past `u64::MAX` to 0 when `hi < lo`.
fn one_compare(e: &mut Emitter, lo: u64, hi: u64, fail: Label) {
    match i32::try_from(lo as i64) {
        Ok(k) => e.alu_k(ALU_SUB, R0, k),
        Err(_) => {
            e.mov64(R1, lo);
            e.alu_x(ALU_SUB, R0, R1);
        }
    }
    e.jump_cmp(JMP_JGT, R0, 8, hi.wrapping_sub(lo), fail);
}

/// The signed interval `[lo, hi]` an 8-byte column's raw `ranges` (sorted, disjoint)
/// hold exactly, if they make one: a range on one side of the sign, or the
/// non-negative values up to `hi` with the negative ones from `lo` up.
fn signed_interval(width: u64, ranges: &[RawRange]) -> Option<(i64, i64)> {
    const SIGN: u64 = 1 << 63;
    if width != 8 {
        return None;
    }
    match ranges[..] {
        [(lo, hi)] if hi < SIGN || lo >= SIGN => Some((lo as i64, hi as i64)),
        [(0, hi), (lo, u64::MAX)] if hi < SIGN && lo >= SIGN => Some((lo as i64, hi as i64)),
        _ => None,
    }
}

/// The largest segment or window size the program can address (an imm32).
pub const SEGMENT_MAX: u64 = i32::MAX as u64;

/// Registers a program in pointer form may give columns and the loop's end: r2-r9.
const COLUMN_REGS: usize = 8;

/// The raw eBPF image of the scan program for `layout` (see the module doc). Every
/// segment and window size must be at most [`SEGMENT_MAX`], widths 4 or 8, and the
/// inputs at most 15.
pub fn emit(layout: &Layout) -> Result<Vec<u8>, csx_ebpf::emit::EmitError> {
    assert!(layout.in_bytes <= SEGMENT_MAX && layout.out_bytes <= SEGMENT_MAX);
    let mut e = Emitter::new();
    let n = layout.inputs.len();
    let m = layout.outputs.len();
    if unrolled_fits(layout) {
        emit_unrolled(&mut e, layout);
    } else if n > 0 && n + m + 1 + usize::from(m == 0) <= COLUMN_REGS {
        emit_pointers(&mut e, layout);
    } else {
        emit_shared(&mut e, layout);
    }
    e.finish()
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
    let r = PointerRegs {
        n: layout.inputs.len(),
        m: layout.outputs.len(),
    };
    check_args(e, layout, R0);
    pointers_setup(e, layout, &r);
    e.jump(jmp_k(JMP_JEQ, R0, 0), Label::Done);
    e.jump(jmp_k(JMP_JA, 0, 0), Label::Loop);
    e.label(Label::Next);
    for (k, input) in layout.inputs.iter().enumerate() {
        e.alu_k(ALU_ADD, r.input(k), input.width as i32);
    }
    e.jump(jmp_x(JMP_JGE, r.input(0), r.end()), Label::Done);
    e.label(Label::Loop);
    pointers_body(e, layout, &r);
    e.jump(jmp_k(JMP_JA, 0, 0), Label::Next);
    e.label(Label::Done);
    if r.m > 0 {
        let w = layout.inputs[layout.outputs[0].input].width;
        e.alu_x(ALU_MOV, R0, r.output(0));
        e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, 10, -8, 0);
        e.alu_x(ALU_SUB, R0, R1);
        e.alu_k(ALU_RSH, R0, w.trailing_zeros() as i32);
    } else {
        e.alu_x(ALU_MOV, R0, r.kept());
    }
    e.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
    exits(e, layout);
}

/// The registers of the pointer form: `n` inputs from r2, `m` outputs after them,
/// then END, then the kept counter (only without outputs).
struct PointerRegs {
    n: usize,
    m: usize,
}

impl PointerRegs {
    fn input(&self, k: usize) -> u8 {
        2 + k as u8
    }
    fn output(&self, j: usize) -> u8 {
        2 + (self.n + j) as u8
    }
    fn end(&self) -> u8 {
        2 + (self.n + self.m) as u8
    }
    fn kept(&self) -> u8 {
        self.end() + 1
    }
}

/// The pointer form's registers set: every input at its segment of window 0, END at
/// input 0's end, every output at its segment of window 1 (output 0's start saved at
/// [r10-8]), or the kept counter zeroed. r0 still holds the rows.
fn pointers_setup(e: &mut Emitter, layout: &Layout, r: &PointerRegs) {
    // Window 1's address to the stack, window 0's to r1: r5 is a column from here.
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, ARGS, 24 + 16, 0);
    e.op(CLASS_STX | MODE_MEM | SIZE_DW, 10, R1, -16, 0);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, ARGS, 24, 0);
    for (k, input) in layout.inputs.iter().enumerate() {
        e.alu_x(ALU_MOV, r.input(k), R1);
        if input.segment > 0 {
            e.alu_k(ALU_ADD, r.input(k), input.segment as i32);
        }
    }
    let w0 = layout.inputs[0].width;
    e.alu_x(ALU_MOV, r.end(), R0);
    e.alu_k(ALU_LSH, r.end(), w0.trailing_zeros() as i32);
    e.alu_x(ALU_ADD, r.end(), r.input(0));
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, R1, 10, -16, 0);
    for (j, out) in layout.outputs.iter().enumerate() {
        e.alu_x(ALU_MOV, r.output(j), R1);
        if out.segment > 0 {
            e.alu_k(ALU_ADD, r.output(j), out.segment as i32);
        }
    }
    if r.m > 0 {
        e.op(CLASS_STX | MODE_MEM | SIZE_DW, 10, r.output(0), -8, 0);
    } else {
        e.alu_k(ALU_MOV, r.kept(), 0);
    }
}

/// One row of the pointer form: dict checks, range tests (fail: next row), the
/// outputs copied (or the row counted).
fn pointers_body(e: &mut Emitter, layout: &Layout, r: &PointerRegs) {
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(entries) = input.dict_entries {
            e.op(
                CLASS_LDX | MODE_MEM | size_of(input.width),
                R0,
                r.input(k),
                0,
                0,
            );
            e.jump_cmp(JMP_JGE, R0, 8, entries, Label::Bad(k));
        }
    }
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(ranges) = &input.ranges {
            e.op(
                CLASS_LDX | MODE_MEM | size_of(input.width),
                R0,
                r.input(k),
                0,
                0,
            );
            range_test(e, input.width, ranges, Label::Next, Label::Pass(k));
        }
    }
    for (j, out) in layout.outputs.iter().enumerate() {
        let input = &layout.inputs[out.input];
        let size = size_of(input.width);
        e.op(CLASS_LDX | MODE_MEM | size, R0, r.input(out.input), 0, 0);
        e.op(CLASS_STX | MODE_MEM | size, r.output(j), R0, 0, 0);
        e.alu_k(ALU_ADD, r.output(j), input.width as i32);
    }
    if r.m == 0 {
        e.alu_k(ALU_ADD, r.kept(), 1);
    }
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
            load(e, R0, input);
            e.jump_cmp(JMP_JGE, R0, 8, entries, Label::Bad(k));
        }
    }
    for (k, input) in layout.inputs.iter().enumerate() {
        if let Some(ranges) = &input.ranges {
            load(e, R0, input);
            range_test(e, input.width, ranges, Label::Next, Label::Pass(k));
        }
    }
    for out in &layout.outputs {
        let input = &layout.inputs[out.input];
        load(e, R0, input);
        store(e, input.width, out.segment, R0);
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

/// Most rows per group of the unrolled form ([`group_rows`] picks a group's rows).
pub const UNROLL: usize = 16;

/// Most instruction slots the unrolled form's group loop may span: the device's JIT
/// versions a loop of up to 256 slots (a copy whose strided loads need no bounds check,
/// run for as many iterations as a guard at its entry proves in bounds), so a loop of
/// more runs every load of every row through a check, and at Q6's shape (16 rows of
/// about 20 slots) took 23 machine instructions a row against about 7.
pub const GROUP_SLOTS_MAX: usize = 240;

/// Slots of the group loop besides its rows: at most four pointers advanced, the test
/// that jumps back.
const GROUP_OVERHEAD: usize = 5;

/// The unrolled form's own registers (P4, P8, O4, O8 and KEPT are the shared form's):
/// the first tested input at the group's first row, its value past the last full
/// group, and the second tested input at the group's first row. FIRST's value past the
/// last row is at [r10 + TAIL_END].
const FIRST: u8 = 2;
const GROUP_END: u8 = 3;
const SECOND: u8 = 9;
const TAIL_END: i16 = -8;

/// Whether the unrolled form serves `layout`: an input with ranges to test first and
/// no dictionary input (every code of one is checked, and this form loads an input
/// only for the rows whose earlier tests passed).
fn unrolled_fits(layout: &Layout) -> bool {
    layout.inputs.iter().any(|i| i.ranges.is_some())
        && layout.inputs.iter().all(|i| i.dict_entries.is_none())
        && layout.in_bytes + UNROLL as u64 * 8 <= SEGMENT_MAX
}

/// The inputs with ranges, in the order the unrolled form tests them: the fewest rows
/// expected to pass first ([`Input::pass_ppm`]), layout order among equals.
fn test_order(layout: &Layout) -> Vec<usize> {
    let mut order: Vec<usize> = (0..layout.inputs.len())
        .filter(|&k| layout.inputs[k].ranges.is_some())
        .collect();
    order.sort_by_key(|&k| layout.inputs[k].pass_ppm);
    order
}

/// Rows per group of the unrolled form for `layout`: the most, a power of two up to
/// [`UNROLL`], whose group loop fits [`GROUP_SLOTS_MAX`] slots (each row measured as
/// emitted at the group's last place, where its offsets are largest), at least one.
pub fn group_rows(layout: &Layout) -> usize {
    let order = test_order(layout);
    let mut probe = Emitter::new();
    unrolled_row(&mut probe, layout, &order, UNROLL - 1, UNROLL - 1);
    let row = probe.len().max(1);
    let mut group = UNROLL;
    while group > 1 && group * row + GROUP_OVERHEAD > GROUP_SLOTS_MAX {
        group /= 2;
    }
    group
}

/// Unrolled form: rows in groups of G = [`group_rows`], then one at a time. A row loads the
/// first tested input only (through FIRST, its place in the group in the offset), and
/// each other input only when the tests before it passed (the second tested through
/// SECOND, the others at their segment's offset from FIRST or SECOND when one of them
/// reads a column of their width, else from P4/P8, window 0 plus the group's first row
/// times the width: [`width_base`]); so a row that
/// fails its first test costs a load and one or two jumps, and the loop's own
/// instructions are shared by a group.
///
/// ```text
///          if FIRST >= GROUP_END goto tail
///   loop:  row u of 0..G: tests (fail: goto skip u), outputs copied (the output
///          pointers moved on), kept += 1 (only without outputs)
///          skip u: ...; FIRST, SECOND, P4, P8 += G rows; if FIRST < GROUP_END goto loop
///   tail:  if FIRST >= TAIL_END goto done
///          one row the same way; the same += 1 row; goto tail
///   done:  r0 = kept, or (O8 - window 1) / 8 (else O4's / 4: [`kept_from`])
/// ```
fn emit_unrolled(e: &mut Emitter, layout: &Layout) {
    let order = test_order(layout);
    let group = group_rows(layout);
    check_args(e, layout, R0);
    unrolled_setup(e, layout, &order, group);
    e.jump(jmp_x(JMP_JGE, FIRST, GROUP_END), Label::Tail);
    e.label(Label::Loop);
    for u in 0..group {
        unrolled_row(e, layout, &order, u, u);
    }
    unrolled_advance(e, layout, &order, group as u64);
    e.jump(jmp_x(JMP_JLT, FIRST, GROUP_END), Label::Loop);
    e.label(Label::Tail);
    e.ldx(SIZE_DW, R1, 10, TAIL_END);
    e.jump(jmp_x(JMP_JGE, FIRST, R1), Label::Done);
    unrolled_row(e, layout, &order, UNROLL, 0);
    unrolled_advance(e, layout, &order, 1);
    e.goto(Label::Tail);
    e.label(Label::Done);
    match kept_from(layout) {
        // kept = (the output pointer - window 1) / its width.
        Some((reg, w)) => {
            e.alu_x(ALU_MOV, R0, reg);
            e.ldx(SIZE_DW, R1, 10, OUT_START);
            e.alu_x(ALU_SUB, R0, R1);
            e.alu_k(ALU_RSH, R0, w.trailing_zeros() as i32);
        }
        None => e.alu_x(ALU_MOV, R0, KEPT),
    }
    e.op(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0);
    exits(e, layout);
}

/// Where window 1's address is kept on the stack by the unrolled form when it counts
/// the rows kept by an output pointer ([`kept_from`]).
const OUT_START: i16 = -16;

/// The output pointer (O8, else O4) and its width the unrolled form counts the rows
/// kept by, when it has outputs: it moves one width per kept row, so no register of
/// its own counts them (one register fewer live in the loop, one instruction fewer a
/// kept row).
fn kept_from(layout: &Layout) -> Option<(u8, u64)> {
    [(O8, 8), (O4, 4)]
        .into_iter()
        .find(|&(_, w)| (layout.outputs.iter()).any(|o| layout.inputs[o.input].width == w))
}

/// The unrolled form's registers set from the args (r0 holds the rows): O4/O8 at
/// window 1, P4/P8 at window 0, FIRST and SECOND at the segments of the first two
/// inputs of `order`, the two ends, the kept counter zeroed, and with outputs
/// window 1's address saved at [r10 + OUT_START] (the rows kept are counted from it).
fn unrolled_setup(e: &mut Emitter, layout: &Layout, order: &[usize], group: usize) {
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, O4, ARGS, 24 + 16, 0);
    e.alu_x(ALU_MOV, O8, O4);
    e.op(CLASS_LDX | MODE_MEM | SIZE_DW, P4, ARGS, 24, 0);
    // r5 (args) is P8 from here.
    e.alu_x(ALU_MOV, P8, P4);
    for (&k, reg) in order.iter().zip([FIRST, SECOND]) {
        e.alu_x(ALU_MOV, reg, P4);
        if layout.inputs[k].segment > 0 {
            e.alu_k(ALU_ADD, reg, layout.inputs[k].segment as i32);
        }
    }
    let shift = layout.inputs[order[0]].width.trailing_zeros() as i32;
    e.alu_x(ALU_MOV, R1, R0);
    e.alu_k(ALU_LSH, R1, shift);
    e.alu_x(ALU_ADD, R1, FIRST);
    e.stx(SIZE_DW, 10, R1, TAIL_END);
    e.alu_x(ALU_MOV, GROUP_END, R0);
    e.alu_k(ALU_AND, GROUP_END, -(group as i32));
    e.alu_k(ALU_LSH, GROUP_END, shift);
    e.alu_x(ALU_ADD, GROUP_END, FIRST);
    e.alu_k(ALU_MOV, KEPT, 0);
    if kept_from(layout).is_some() {
        e.stx(SIZE_DW, 10, O4, OUT_START);
    }
}

/// Input `k`'s value of row `u` of the group into r0 (r1 may be clobbered): through
/// FIRST or SECOND for the first two inputs of `order`, else from P4/P8.
fn unrolled_load(e: &mut Emitter, layout: &Layout, order: &[usize], k: usize, u: usize) {
    let input = &layout.inputs[k];
    let size = size_of(input.width);
    let at = u as u64 * input.width;
    if let Some(j) = order.iter().take(2).position(|&o| o == k) {
        e.ldx(size, R0, [FIRST, SECOND][j], at as i16);
        return;
    }
    let (base, from) = width_base(layout, order, input.width);
    // A segment before the base's is a negative offset (wrapping, within an imm32).
    let (reg, off) = address(e, base, input.segment.wrapping_sub(from).wrapping_add(at));
    e.ldx(size, R0, reg, off);
}

/// The register the unrolled form reaches an input of `width` bytes (other than the
/// first two tested) through, and the segment it points into at the group's first row:
/// FIRST or SECOND when one of them reads a column of that width (so no pointer of
/// its own moves with the rows), else P4/P8 (window 0's start).
fn width_base(layout: &Layout, order: &[usize], width: u64) -> (u8, u64) {
    for (&k, reg) in order.iter().zip([FIRST, SECOND]) {
        if layout.inputs[k].width == width {
            return (reg, layout.inputs[k].segment);
        }
    }
    (if width == 4 { P4 } else { P8 }, 0)
}

/// Row `u` of the group: every test (a failure goes to `Skip(label)`), then the
/// outputs copied and the row counted.
fn unrolled_row(e: &mut Emitter, layout: &Layout, order: &[usize], label: usize, u: usize) {
    for &k in order {
        let input = &layout.inputs[k];
        let ranges = input.ranges.as_deref().unwrap_or_default();
        unrolled_load(e, layout, order, k, u);
        range_test(
            e,
            input.width,
            ranges,
            Label::Skip(label),
            Label::PassAt(label, k),
        );
    }
    for out in &layout.outputs {
        let width = layout.inputs[out.input].width;
        unrolled_load(e, layout, order, out.input, u);
        store(e, width, out.segment, R0);
    }
    for (w, reg) in [(4, O4), (8, O8)] {
        if (layout.outputs.iter()).any(|o| layout.inputs[o.input].width == w) {
            e.alu_k(ALU_ADD, reg, w as i32);
        }
    }
    if kept_from(layout).is_none() {
        e.alu_k(ALU_ADD, KEPT, 1);
    }
    e.label(Label::Skip(label));
}

/// FIRST, SECOND, and the bases of the widths other inputs read through, moved
/// `rows` rows on.
fn unrolled_advance(e: &mut Emitter, layout: &Layout, order: &[usize], rows: u64) {
    for (&k, reg) in order.iter().zip([FIRST, SECOND]) {
        e.alu_k(ALU_ADD, reg, (rows * layout.inputs[k].width) as i32);
    }
    for (w, reg) in [(4, P4), (8, P8)] {
        let other = |k: usize| !order.iter().take(2).any(|&o| o == k);
        let own = width_base(layout, order, w).0 == reg;
        if own && (layout.inputs.iter().enumerate()).any(|(k, i)| other(k) && i.width == w) {
            e.alu_k(ALU_ADD, reg, (rows * w) as i32);
        }
    }
}
