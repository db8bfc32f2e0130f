//! The emitted probe: a star join's fact side as raw eBPF made for one query (as the
//! scan's program is, `scan::program`), with the dimensions' key ranges, the group
//! strides, LINEORDER's own selections and the measure compiled in as constants. It
//! replaces three steps of the operator probe (`sdk/ssb/ssb_probe.c`, with
//! `filter_<strategy>` before it): LINEORDER's selections are tested in the same pass
//! (no mask), the lookup tables' addresses live in registers (the C operator reloads
//! pointers, bases and strides from stack arrays indexed by the dimension for every
//! row), and the sum is added in place.
//!
//! One run is one partition of one round (`cparam1` = its rows):
//!
//! ```text
//! window 0   the partition's staged columns (each at its segment), then room for a copy
//!            of every dimension's lookup table (layout.in_bytes in all)
//! window 1   the output: the partition's u64 sums (aggregate: added to, never zeroed;
//!            the host zeroes them once), or {u32 group, u32 value} per joined row (emit)
//! state      the lookup tables the dimension operators (ssb_dim) wrote
//!
//! start   check windows and rows; csx_memcpy each table from the shared state into
//!         window 0 (and csx_memset the zero entries below a small key base)
//! r2 P (row i of the first tested column)  r3 END  r4-r6 the tables  r7 group
//! r8 output (aggregate: its base, emit: the next tuple)  r9 rows joined  r0, r1 scratch
//! per row LINEORDER's range tests; per dimension: k = fk - base, k < entries, id =
//!         table[k], id != 0, id <= the dimension's groups, group += (id - 1) * stride;
//!         then the measure, added to sums[group] or emitted
//! ```
//!
//! Why the tables are copied into window 0 rather than read in the shared state: the
//! JIT keeps one region cache for loads (the region the last load went to); a row's
//! loads alternating between a window and the shared state would miss it on every
//! load. In one region every load hits. The copy is ~190 KB per run (Q3.3 at SF 1)
//! against hundreds of thousands of rows; the interpreter, which looks every access up
//! in its region table, costs the same either way.
//!
//! r0: the rows joined (aggregate) or emitted (emit), or `-22` (CSX_EINVAL: windows or
//! rows do not fit the layout), `-28` (CSX_ENOSPC: a table leaves the shared state),
//! `-34` (CSX_ERANGE: a table entry above its dimension's groups, or an emitted value
//! over 32 bits), or a negative code from csx_memcpy/csx_memset.

use csx_ebpf::isa::*;
use csx_host::proto::abi::functions::{CSX_MEMCPY, CSX_MEMSET};

use crate::predicate::RawRange;
use csx_ebpf::emit::{jmp_k, jmp_x, R0, R1};

/// Keys below a base this small get zero entries in the copied table, so the lookup
/// needs no subtraction (a dense dimension's keys start at 1).
pub const FOLD_BASE_MAX: u32 = 4096;

/// One dimension the probe joins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDim {
    /// LINEORDER's foreign key (u32) in window 0.
    pub fk_segment: u64,
    /// The table's copy in window 0 ([`copy_bytes`] bytes from here).
    pub lut_segment: u64,
    /// The table in the shared state: u16 entries, entry `key - key_base`.
    pub lut_offset: u64,
    pub entries: u32,
    pub key_base: u32,
    /// Groups of the dimension (entries hold 0 or 1 ..= groups), and the group
    /// index stride.
    pub groups: u64,
    pub stride: u64,
}

impl ProbeDim {
    fn folded(&self) -> u64 {
        folded(self.key_base)
    }
}

/// Entries below a table's copy that are zero so keys index it directly.
fn folded(key_base: u32) -> u64 {
    if key_base <= FOLD_BASE_MAX {
        u64::from(key_base)
    } else {
        0
    }
}

/// Bytes of window 0 the copy of a table of `entries` from `key_base` takes (a
/// multiple of 8).
pub fn copy_bytes(key_base: u32, entries: u32) -> u64 {
    (2 * (folded(key_base) + u64::from(entries))).next_multiple_of(8)
}

/// What the probe does with a joined row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeMode {
    /// Adds the measure to the row's group's u64 in window 1 (`groups` of them).
    Aggregate { groups: u64 },
    /// Writes `{u32 group, u32 value}` to window 1.
    Emit,
}

/// What a probe program is made for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeLayout {
    /// Most rows a run may have.
    pub rows_max: u64,
    /// LINEORDER's selections: a u32 column in window 0 and the raw values it must
    /// have (sorted, disjoint, inclusive ranges).
    pub filters: Vec<(u64, Vec<RawRange>)>,
    /// 1 to 3 dimensions.
    pub dims: Vec<ProbeDim>,
    /// The measure: one u32 column, or two multiplied.
    pub measure: Vec<u64>,
    pub mode: ProbeMode,
    /// Bytes window 0 must have.
    pub in_bytes: u64,
}

/// Most dimensions a probe joins (registers r4-r6 hold their tables).
pub const PROBE_DIMS_MAX: usize = 3;

const P: u8 = 2;
const END: u8 = 3;
const GROUP: u8 = 7;
const OUT: u8 = 8;
const JOINED: u8 = 9;
const ARGS: u8 = 5;
const STATE: u8 = 6;
const WIN0: u8 = 7;
const ROWS: u8 = 9;

fn lut_reg(d: usize) -> u8 {
    4 + d as u8
}

const EINVAL: i32 = -22;
const ENOSPC: i32 = -28;
const ERANGE: i32 = -34;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Loop,
    Next,
    Done,
    Einval,
    Enospc,
    Erange,
    Fail,
    Pass(usize),
}

type Emitter = csx_ebpf::emit::Emitter<Label>;

/// `dst = *(u32 *)(column at segment, row i)`: through P's offset field when the
/// column is near the anchor, else through r1.
fn load_column(e: &mut Emitter, dst: u8, anchor: u64, segment: u64) {
    let delta = segment as i64 - anchor as i64;
    match i16::try_from(delta) {
        Ok(off) => e.ldx(SIZE_W, dst, P, off),
        Err(_) => {
            e.alu_x(ALU_MOV, R1, P);
            e.alu_k(ALU_ADD, R1, delta as i32);
            e.ldx(SIZE_W, dst, R1, 0);
        }
    }
}

/// The raw eBPF image of the probe for `layout` (see the module doc). Panics on a
/// layout the host never makes: no dimension or more than [`PROBE_DIMS_MAX`], no
/// measure or more than two, or segments past `i32::MAX`.
pub fn emit(layout: &ProbeLayout) -> Result<Vec<u8>, csx_ebpf::emit::EmitError> {
    assert!(!layout.dims.is_empty() && layout.dims.len() <= PROBE_DIMS_MAX);
    assert!(!layout.measure.is_empty() && layout.measure.len() <= 2);
    assert!(layout.in_bytes <= i32::MAX as u64);
    let mut e = Emitter::new();
    check_args(&mut e, layout);
    copy_tables(&mut e, layout);
    let anchor = loop_registers(&mut e, layout);

    e.label(Label::Next);
    e.alu_k(ALU_ADD, P, 4);
    e.jump(jmp_x(JMP_JGE, P, END), Label::Done);
    e.label(Label::Loop);
    select_rows(&mut e, layout, anchor);
    let grouped = join_dims(&mut e, layout, anchor);
    load_column(&mut e, R0, anchor, layout.measure[0]);
    if let Some(&b) = layout.measure.get(1) {
        load_column(&mut e, R1, anchor, b);
        e.alu_x(ALU_MUL, R0, R1);
    }
    output_row(&mut e, layout, grouped);
    e.alu_k(ALU_ADD, JOINED, 1);
    e.goto(Label::Next);

    e.label(Label::Done);
    e.alu_x(ALU_MOV, R0, JOINED);
    e.exit();
    for (l, code) in [
        (Label::Einval, EINVAL),
        (Label::Enospc, ENOSPC),
        (Label::Erange, ERANGE),
    ] {
        e.label(l);
        e.alu_k(ALU_MOV, R0, code);
        e.exit();
    }
    // A device function failed: its code is in r0.
    e.label(Label::Fail);
    e.exit();
    e.finish()
}

/// LINEORDER's selections: a row outside any goes to the next row. Two or more
/// selections of one range each are tested together, with one branch: a value minus
/// its range's start (32-bit), minus the range's width (64-bit), is negative exactly
/// when the value is in the range, so the AND of those differences is negative exactly
/// when every value is in its range. Rows pass such selections unpredictably (Q1.1's
/// `lo_discount` one row in four, `lo_quantity` one in two): one branch a row instead
/// of one or two a selection costs a few more instructions and far fewer
/// mispredictions. Selections of several ranges are tested one range at a time, after.
fn select_rows(e: &mut Emitter, layout: &ProbeLayout, anchor: u64) {
    let single = |ranges: &Vec<RawRange>| ranges.len() == 1;
    let together = layout.filters.iter().filter(|f| single(&f.1)).count() >= 2;
    if together {
        let tested = layout.filters.iter().filter(|f| single(&f.1));
        for (i, (segment, ranges)) in tested.enumerate() {
            let dst = if i == 0 { R0 } else { R1 };
            load_column(e, dst, anchor, *segment);
            in_range_sign(e, dst, ranges[0]);
            if i > 0 {
                e.alu_x(ALU_AND, R0, R1);
            }
        }
        e.jump(jmp_k(JMP_JSGE, R0, 0), Label::Next);
    }
    for (k, (segment, ranges)) in layout.filters.iter().enumerate() {
        if !(together && single(ranges)) {
            load_column(e, R0, anchor, *segment);
            e.range_test(4, ranges, Label::Next, Label::Pass(k));
        }
    }
}

/// `reg` (a u32 value) becomes negative (as an i64) exactly when the value is in
/// `lo..=hi` (a u32 range narrower than the whole domain).
fn in_range_sign(e: &mut Emitter, reg: u8, (lo, hi): RawRange) {
    debug_assert!(lo <= hi && hi <= u64::from(u32::MAX) && hi - lo < u64::from(u32::MAX));
    if lo > 0 {
        // The 32-bit subtraction wraps values below the range above its width.
        e.alu32_k(ALU_SUB, reg, lo as u32 as i32);
    }
    let mut width = hi - lo + 1;
    while width > 0 {
        let step = width.min(i32::MAX as u64);
        e.alu_k(ALU_SUB, reg, step as i32);
        width -= step;
    }
}

/// The arguments: two windows, rows within the layout, windows large enough, the
/// shared state holding every table; then STATE, OUT and WIN0 set.
fn check_args(e: &mut Emitter, layout: &ProbeLayout) {
    e.ldx(SIZE_W, R1, ARGS, 16);
    e.jump(jmp_k(JMP_JNE, R1, 2), Label::Einval);
    e.ldx(SIZE_DW, ROWS, ARGS, 0);
    e.mov64(R1, layout.rows_max);
    e.jump(jmp_x(JMP_JGT, ROWS, R1), Label::Einval);
    e.ldx(SIZE_DW, R1, ARGS, 24 + 8);
    e.jump(jmp_k(JMP_JLT, R1, layout.in_bytes as i32), Label::Einval);
    e.ldx(SIZE_DW, R0, ARGS, 24 + 16 + 8);
    match layout.mode {
        ProbeMode::Aggregate { groups } => {
            e.mov64(R1, groups * 8);
        }
        ProbeMode::Emit => {
            e.alu_x(ALU_MOV, R1, ROWS);
            e.alu_k(ALU_LSH, R1, 3);
        }
    }
    e.jump(jmp_x(JMP_JLT, R0, R1), Label::Einval);
    let state_needed = layout
        .dims
        .iter()
        .map(|d| d.lut_offset + 2 * u64::from(d.entries))
        .max()
        .unwrap_or(0);
    e.mov64(R1, state_needed);
    e.jump(jmp_x(JMP_JLT, 4, R1), Label::Enospc);
    e.alu_x(ALU_MOV, STATE, 3);
    e.ldx(SIZE_DW, OUT, ARGS, 24 + 16);
    e.ldx(SIZE_DW, WIN0, ARGS, 24);
}

/// The dimensions' tables from the shared state into window 0 (r1-r5 are the calls'
/// arguments and clobbered).
fn copy_tables(e: &mut Emitter, layout: &ProbeLayout) {
    for d in &layout.dims {
        let folded = d.folded();
        if folded > 0 {
            e.alu_x(ALU_MOV, 1, WIN0);
            e.alu_k(ALU_ADD, 1, d.lut_segment as i32);
            e.mov64(2, 0);
            e.mov64(3, 2 * folded);
            e.call(CSX_MEMSET as i32);
            e.jump(jmp_k(JMP_JSLT, R0, 0), Label::Fail);
        }
        e.alu_x(ALU_MOV, 1, WIN0);
        e.alu_k(ALU_ADD, 1, (d.lut_segment + 2 * folded) as i32);
        e.alu_x(ALU_MOV, 2, STATE);
        if d.lut_offset > 0 {
            e.mov64(R0, d.lut_offset);
            e.alu_x(ALU_ADD, 2, R0);
        }
        e.mov64(3, 2 * u64::from(d.entries));
        e.call(CSX_MEMCPY as i32);
        e.jump(jmp_k(JMP_JSLT, R0, 0), Label::Fail);
    }
}

/// The loop's registers (tables, row pointer at the anchor column, its end, the
/// counters), then into the loop (or done for no rows); the anchor's segment.
fn loop_registers(e: &mut Emitter, layout: &ProbeLayout) -> u64 {
    let anchor = layout
        .filters
        .first()
        .map_or(layout.dims[0].fk_segment, |f| f.0);
    for (i, d) in layout.dims.iter().enumerate() {
        e.alu_x(ALU_MOV, lut_reg(i), WIN0);
        e.alu_k(ALU_ADD, lut_reg(i), d.lut_segment as i32);
    }
    e.alu_x(ALU_MOV, P, WIN0);
    if anchor > 0 {
        e.alu_k(ALU_ADD, P, anchor as i32);
    }
    e.alu_x(ALU_MOV, END, ROWS);
    e.alu_k(ALU_LSH, END, 2);
    e.alu_x(ALU_ADD, END, P);
    e.mov64(JOINED, 0);
    e.mov64(GROUP, 0);
    e.jump(jmp_x(JMP_JEQ, P, END), Label::Done);
    e.goto(Label::Loop);
    anchor
}

/// Each dimension's lookup of the row's foreign key (no match: the next row), its
/// group id folded into GROUP; whether any dimension groups.
fn join_dims(e: &mut Emitter, layout: &ProbeLayout, anchor: u64) -> bool {
    let mut grouped = false;
    for (i, d) in layout.dims.iter().enumerate() {
        load_column(e, R0, anchor, d.fk_segment);
        let folded = d.folded();
        let limit = folded + u64::from(d.entries);
        if folded == 0 {
            e.alu32_k(ALU_SUB, R0, d.key_base as i32);
        }
        // The 32-bit compare sees the 32-bit key (or key - base, wrapped).
        e.jump_cmp(JMP_JGE, R0, 4, limit.min(u64::from(u32::MAX)), Label::Next);
        e.alu_k(ALU_LSH, R0, 1);
        e.alu_x(ALU_ADD, R0, lut_reg(i));
        e.ldx(SIZE_H, R0, R0, 0);
        e.jump(jmp_k(JMP_JEQ, R0, 0), Label::Next);
        e.jump_cmp(JMP_JGT, R0, 8, d.groups, Label::Erange);
        if d.groups > 1 {
            if grouped {
                e.alu_k(ALU_SUB, R0, 1);
                if d.stride != 1 {
                    e.alu_k(ALU_MUL, R0, d.stride as i32);
                }
                e.alu_x(ALU_ADD, GROUP, R0);
            } else {
                e.alu_x(ALU_MOV, GROUP, R0);
                e.alu_k(ALU_SUB, GROUP, 1);
                if d.stride != 1 {
                    e.alu_k(ALU_MUL, GROUP, d.stride as i32);
                }
                grouped = true;
            }
        }
    }
    grouped
}

/// The row's measure (in R0) added to its group's sum, or emitted with its group.
fn output_row(e: &mut Emitter, layout: &ProbeLayout, grouped: bool) {
    match layout.mode {
        ProbeMode::Aggregate { .. } => {
            // GROUP < groups: every dimension's id was checked against its groups.
            if grouped {
                e.alu_x(ALU_MOV, R1, GROUP);
                e.alu_k(ALU_LSH, R1, 3);
                e.alu_x(ALU_ADD, R1, OUT);
            } else {
                e.alu_x(ALU_MOV, R1, OUT);
            }
            // The group register is dead from here (the next row sets it again when
            // it is used): it holds the old sum.
            e.ldx(SIZE_DW, GROUP, R1, 0);
            e.alu_x(ALU_ADD, GROUP, R0);
            e.stx(SIZE_DW, R1, GROUP, 0);
        }
        ProbeMode::Emit => {
            e.alu_x(ALU_MOV, R1, R0);
            e.alu_k(ALU_RSH, R1, 32);
            e.jump(jmp_k(JMP_JNE, R1, 0), Label::Erange);
            e.stx(SIZE_W, OUT, GROUP, 0);
            e.stx(SIZE_W, OUT, R0, 4);
            e.alu_k(ALU_ADD, OUT, 8);
        }
    }
}
