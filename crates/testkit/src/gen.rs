//! Random verifiable programs and memory for differential testing: the interpreter (the
//! reference) against the Cranelift JIT and, on x86-64, the quick tier, compared on r0,
//! trap, fuel used and memory afterwards.
//!
//! One generator serves both proptest and cargo-fuzz: [`GenCase::from_bytes`] reads its
//! choices from a byte string (reading zeros once the bytes run out), so proptest's
//! [`strategy`] is just random bytes (and shrinks by shrinking them), and the fuzz target
//! passes libFuzzer's input straight through [`check_bytes`].
//!
//! Programs are built from *items* (one or a few instructions each) in 1-4 functions, so
//! every jump lands on an item inside its own function and every local call on a
//! function start; each function ends with `exit`. What the generator covers: ALU and
//! ALU32 with every operation (division by zero, `INT_MIN / -1`, masked shifts, byte
//! swaps, `movsx`), loads and stores through r10 (always in the frame, as the verifier
//! requires), through the data regions and through arbitrary values (so both in-bounds
//! and every kind of out-of-bounds access), atomics, forward and backward jumps (loops,
//! infinite ones included, bounded by small fuel budgets), local calls with recursion,
//! and helper calls with good and bad pointer arguments.
//!
//! Invariant: every generated program passes the verifier; a rejection is a generator
//! bug and [`differential`] reports it as a failure.

use std::sync::Arc;

use proptest::prelude::*;

use csx_ebpf::count::ExecCounts;
use csx_ebpf::disasm::format_insn;
use csx_ebpf::engine::{Engine, RunOptions, RunOutcome};
use csx_ebpf::helper::{ArgKind, FunctionSig, FunctionTable, HelperAbort, HelperHost};
use csx_ebpf::interp::Interpreter;
use csx_ebpf::isa::*;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::{GlobalSection, Program, VerifiedProgram};
use csx_ebpf::verifier::verify;

/// Region of the writable data buffer (r1 points at it, r2 holds its length).
pub const DATA_REGION: RegionIdx = RegionIdx(2);
/// Region of the read-only buffer (r3 points at it).
pub const RODATA_REGION: RegionIdx = RegionIdx(3);

/// Most items in one generated function (its final `exit` not counted).
const ITEMS_MAX: usize = 40;
/// Most functions in one program.
const FUNCTIONS_MAX: usize = 4;

/// One generated test: a program, the memory it runs over and its budget.
#[derive(Clone, Debug)]
pub struct GenCase {
    pub program: Program,
    /// Contents of [`DATA_REGION`], mapped read-write.
    pub data: Vec<u8>,
    /// Contents of [`RODATA_REGION`], mapped read-only.
    pub rodata: Vec<u8>,
    /// r4 and r5 at entry (r1-r3 describe the regions).
    pub extra_args: [u64; 2],
    /// Fuel budget: usually small, so loops and recursion run out of it.
    pub fuel: u64,
}

/// The helpers generated programs call.
pub fn function_table() -> FunctionTable {
    let mut t = FunctionTable::new();
    let sig = |id: u32, name: &str, args: Vec<ArgKind>| FunctionSig {
        name: name.into(),
        id,
        args,
        version: 1,
        doc: String::new(),
    };
    let entries = [
        sig(1, "gen_sum", vec![ArgKind::Scalar; 5]),
        sig(
            2,
            "gen_fill",
            vec![ArgKind::PtrOut { len_arg: 1 }, ArgKind::Scalar],
        ),
        sig(
            3,
            "gen_checksum",
            vec![ArgKind::PtrIn { len_arg: 1 }, ArgKind::Scalar],
        ),
        sig(4, "gen_abort_if_odd", vec![ArgKind::Scalar]),
    ];
    for e in entries {
        t.insert(e).expect("the generator's table is valid");
    }
    t
}

/// Helper ids in [`function_table`].
const HELPER_IDS: [i32; 4] = [1, 2, 3, 4];

/// The deterministic host behind [`function_table`].
#[derive(Debug, Default, Clone, Copy)]
pub struct GenHost;

impl HelperHost for GenHost {
    fn call(
        &mut self,
        id: u32,
        args: [u64; 5],
        mem: &mut MemoryMap<'_>,
    ) -> Result<u64, HelperAbort> {
        let abort = |message: &str| HelperAbort {
            code: -22,
            message: message.into(),
        };
        match id {
            1 => Ok(args
                .iter()
                .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b))),
            2 => {
                let out = mem
                    .slice_mut(args[0], args[1])
                    .map_err(|_| abort("unchecked"))?;
                for (i, b) in out.iter_mut().enumerate() {
                    *b = (i as u8).wrapping_mul(7).wrapping_add(1);
                }
                Ok(args[1])
            }
            3 => {
                let input = mem
                    .slice(args[0], args[1])
                    .map_err(|_| abort("unchecked"))?;
                Ok(input
                    .iter()
                    .fold(0u64, |a, &b| a.wrapping_mul(257).wrapping_add(u64::from(b))))
            }
            4 if args[0] & 1 == 1 => Err(abort("odd argument")),
            4 => Ok(args[0] / 2),
            _ => Err(abort("unknown helper")),
        }
    }
}

/// Choices read from a byte string; zeros once it is exhausted, so any input (the
/// empty one included) yields a program.
struct Choices<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A value in `0..n` (`n` at most 256).
    fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0 && n <= 256);
        self.byte() as usize % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// A destination register, biased away from r1-r3 so the region pointers live on.
    fn dst(&mut self) -> u8 {
        self.pick(&[0, 0, 4, 5, 6, 7, 8, 9, 0, 4, 5, 6, 7, 8, 9, 1, 2, 3])
    }

    /// A source register (r10 included).
    fn src(&mut self) -> u8 {
        self.below(11) as u8
    }

    /// An immediate, often one of the values that expose semantic corners.
    fn imm(&mut self) -> i32 {
        match self.below(4) {
            0 => self.pick(&[
                0,
                1,
                -1,
                2,
                3,
                7,
                8,
                16,
                31,
                32,
                33,
                63,
                64,
                i32::MIN,
                i32::MAX,
            ]),
            1 => self.byte() as i32 - 128,
            _ => self.u32() as i32,
        }
    }

    /// A 64-bit constant: corner values and pointers into (or just outside) regions.
    fn imm64(&mut self) -> u64 {
        let small = u32::from(self.byte());
        match self.below(8) {
            0 => self.pick(&[
                0,
                1,
                u64::MAX,
                1 << 63,
                (1 << 63) - 1,
                0x8000_0000,
                0xffff_ffff,
            ]),
            1 => DATA_REGION.vaddr(small),
            2 => RODATA_REGION.vaddr(small / 4),
            3 => RegionIdx::STACK.vaddr((STACK_SIZE_U32 - 1).saturating_sub(small * 4)),
            4 => RegionIdx::global(self.below(2) as u32)
                .expect("two globals")
                .vaddr(small / 8),
            // Near the top of a region's offsets: an offset carries into the next region.
            5 => DATA_REGION.vaddr(u32::MAX - small / 16),
            6 => (u64::from(self.u32()) << 32) | u64::from(small),
            _ => self.u64(),
        }
    }

    fn size(&mut self) -> (u8, u8) {
        self.pick(&[(SIZE_B, 1), (SIZE_H, 2), (SIZE_W, 4), (SIZE_DW, 8)])
    }

    /// A base register and offset for an access of `size` bytes. Through r10 the offset
    /// always stays in the frame (the verifier checks that statically).
    fn address(&mut self, size: u8) -> (u8, i16) {
        // Mostly the frame and the start of the data buffer, which are in bounds (so runs
        // go on), sometimes anything (so every kind of fault shows up).
        let base = self.pick(&[10, 10, 10, 10, 1, 1, 1, 1, 3, 3, 0, 4, 5, 6, 7, 8, 9, 2]);
        let off = match (base, self.below(8)) {
            (10, _) => {
                let slots = (512 / i32::from(size)) as usize;
                -(i32::from(size) * (1 + self.below(slots.min(256)) as i32))
            }
            (1 | 3, 0..=5) => i32::from(self.byte() % 9),
            (_, 0..=2) => self.byte() as i32 - 128,
            (_, 3) => i32::from(self.u32() as i16),
            _ => i32::from(self.byte() % 72),
        };
        (base, off as i16)
    }
}

const STACK_SIZE_U32: u32 = csx_ebpf::limits::STACK_SIZE as u32;

/// Where a generated instruction's jump or call goes, resolved at layout.
#[derive(Clone, Copy, Debug)]
enum Fixup {
    None,
    /// A jump to an item of the same function, through `off`.
    JumpOff(usize),
    /// A `ja32` to an item of the same function, through `imm`.
    JumpImm(usize),
    /// A local call to a function.
    Call(usize),
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    insn: Insn,
    fixup: Fixup,
}

fn plain(opc: u8, dst: u8, src: u8, off: i16, imm: i32) -> Pending {
    Pending {
        insn: Insn::new(opc, dst, src, off, imm),
        fixup: Fixup::None,
    }
}

impl GenCase {
    /// Builds a case from arbitrary bytes. Never panics; the program always verifies
    /// against [`function_table`].
    pub fn from_bytes(bytes: &[u8]) -> GenCase {
        let mut c = Choices { bytes, pos: 0 };
        let data: Vec<u8> = (0..16 + c.below(49)).map(|_| c.byte()).collect();
        let rodata: Vec<u8> = (0..c.below(32)).map(|_| c.byte()).collect();
        let extra_args = [c.imm64(), u64::from(c.byte())];
        let fuel = match c.below(8) {
            0 => 0,
            1 => c.below(8) as u64,
            2 | 3 => c.below(256) as u64,
            4 | 5 => u64::from(c.u32() % 4096),
            _ => 100_000,
        };
        let globals = vec![
            GlobalSection {
                name: ".rodata".into(),
                data: (0..8 + c.below(24)).map(|_| c.byte()).collect(),
                writable: false,
            },
            GlobalSection {
                name: ".data".into(),
                data: (0..8 + c.below(24)).map(|_| c.byte()).collect(),
                writable: true,
            },
        ];
        let n_functions = 1 + c.below(FUNCTIONS_MAX);
        let functions: Vec<Vec<Vec<Pending>>> = (0..n_functions)
            .map(|_| gen_function(&mut c, n_functions))
            .collect();
        let insns = layout(&functions);
        GenCase {
            program: Program {
                insns,
                entry: 0,
                globals,
                name: "gen".into(),
            },
            data,
            rodata,
            extra_args,
            fuel,
        }
    }

    /// The program, disassembled one slot per line, for failure reports.
    pub fn listing(&self) -> String {
        let insns = &self.program.insns;
        (0..insns.len())
            .map(|pc| format!("{pc:4}: {}\n", format_insn(insns, pc)))
            .collect()
    }

    /// Runs the case on `engine` with `fuel`; returns the outcome and the data region
    /// afterwards.
    pub fn run(&self, engine: &dyn Engine, fuel: u64) -> (RunOutcome, Vec<u8>) {
        self.run_with(engine, fuel, None)
    }

    /// As [`GenCase::run`], counting executed blocks into `counts` when given.
    pub fn run_with(
        &self,
        engine: &dyn Engine,
        fuel: u64,
        counts: Option<&ExecCounts>,
    ) -> (RunOutcome, Vec<u8>) {
        let mut data = self.data.clone();
        let mut map = MemoryMap::new();
        let r1 = map
            .map_read_write(DATA_REGION, &mut data)
            .expect("a small buffer maps");
        let r3 = map
            .map_read_only(RODATA_REGION, &self.rodata)
            .expect("a small buffer maps");
        let args = [
            r1,
            self.data.len() as u64,
            r3,
            self.extra_args[0],
            self.extra_args[1],
        ];
        let out = engine.run(
            &mut map,
            args,
            &RunOptions {
                fuel,
                counts,
                ..RunOptions::default()
            },
            &mut GenHost,
        );
        (out, data)
    }
}

/// The items of one function, then its final `exit` as the last item.
fn gen_function(c: &mut Choices<'_>, n_functions: usize) -> Vec<Vec<Pending>> {
    let n = c.below(ITEMS_MAX + 1);
    let mut items: Vec<Vec<Pending>> = (0..n).map(|i| gen_item(c, i, n, n_functions)).collect();
    items.push(vec![plain(OP_EXIT, 0, 0, 0, 0)]);
    items
}

/// Item `i` of `n`: one instruction or a short sequence.
// One arm per kind of instruction, weighted side by side: the weights are only
// comparable in one place.
fn gen_item(c: &mut Choices<'_>, i: usize, n: usize, n_functions: usize) -> Vec<Pending> {
    match c.below(100) {
        0..=29 => vec![gen_alu(c)],
        30..=34 => gen_lddw(c),
        35..=46 => gen_load(c),
        47..=56 => gen_store(c),
        57..=61 => gen_atomic(c),
        62..=73 => {
            let target = (i + 1 + c.below(8)).min(n);
            vec![gen_jump(c, target)]
        }
        74..=77 => {
            let target = i.saturating_sub(c.below(8));
            vec![gen_jump(c, target)]
        }
        78..=79 => {
            // A loop closed twice, `if cond goto L; alu; ja L` (clang's min/max shape).
            let target = i.saturating_sub(c.below(8));
            let jcc = gen_cond_jump(c, target);
            let ja = Pending {
                insn: Insn::new(OP_JA, 0, 0, 0, 0),
                fixup: Fixup::JumpOff(target),
            };
            vec![jcc, gen_alu(c), ja]
        }
        80..=84 => {
            let f = c.below(n_functions);
            vec![Pending {
                insn: Insn::new(OP_CALL, 0, CALL_SRC_LOCAL, 0, 0),
                fixup: Fixup::Call(f),
            }]
        }
        85..=91 => gen_helper_call(c),
        92..=93 => vec![plain(OP_CALLX, c.src(), 0, 0, 0)],
        94..=95 => vec![plain(OP_EXIT, 0, 0, 0, 0)],
        96..=97 => gen_indexed_pointer(c),
        _ => gen_derived_pointer(c),
    }
}

/// A 64-bit immediate load (two slots).
fn gen_lddw(c: &mut Choices<'_>) -> Vec<Pending> {
    let v = c.imm64();
    let dst = c.dst();
    vec![
        plain(OP_LDDW, dst, 0, 0, v as u32 as i32),
        plain(0, 0, 0, 0, (v >> 32) as u32 as i32),
    ]
}

/// A load, sign-extending for some narrow sizes.
fn gen_load(c: &mut Choices<'_>) -> Vec<Pending> {
    let (size_bits, size) = c.size();
    let (base, off) = c.address(size);
    let signed = size < 8 && c.chance(30);
    let mode = if signed { MODE_MEMSX } else { MODE_MEM };
    vec![plain(CLASS_LDX | mode | size_bits, c.dst(), base, off, 0)]
}

/// A store of an immediate or a register.
fn gen_store(c: &mut Choices<'_>) -> Vec<Pending> {
    let (size_bits, size) = c.size();
    let (base, off) = c.address(size);
    if c.chance(40) {
        let imm = c.imm();
        vec![plain(CLASS_ST | MODE_MEM | size_bits, base, 0, off, imm)]
    } else {
        vec![plain(
            CLASS_STX | MODE_MEM | size_bits,
            base,
            c.src(),
            off,
            0,
        )]
    }
}

/// An atomic read-modify-write, fetching or not.
fn gen_atomic(c: &mut Choices<'_>) -> Vec<Pending> {
    let (size_bits, size) = c.pick(&[(SIZE_W, 4u8), (SIZE_DW, 8)]);
    let (base, off) = c.address(size);
    let op = c.pick(&[
        ATOMIC_ADD,
        ATOMIC_OR,
        ATOMIC_AND,
        ATOMIC_XOR,
        ATOMIC_ADD | ATOMIC_FETCH,
        ATOMIC_OR | ATOMIC_FETCH,
        ATOMIC_AND | ATOMIC_FETCH,
        ATOMIC_XOR | ATOMIC_FETCH,
        ATOMIC_XCHG,
        ATOMIC_CMPXCHG,
    ]);
    // Fetching forms write `src`, which must not be r10.
    let src = if op & ATOMIC_FETCH != 0 && op != ATOMIC_CMPXCHG {
        c.dst()
    } else {
        c.src()
    };
    vec![plain(
        CLASS_STX | MODE_ATOMIC | size_bits,
        base,
        src,
        off,
        op,
    )]
}

/// A pointer plus a bounded index, as a data-indexed array is addressed:
/// `dst = src & mask` (or `src >> k`, or a 32-bit `and`), `dst += base`, `dst += off`.
/// Through r10 the JIT may prove such accesses in the frame.
fn gen_indexed_pointer(c: &mut Choices<'_>) -> Vec<Pending> {
    let dst = c.pick(&[4u8, 5, 6, 7, 8, 9]);
    let src = c.src();
    let base = c.pick(&[10u8, 10, 1, 3]);
    let off = -(i32::from(c.byte()) * 2);
    let bound = match c.below(3) {
        0 => {
            let mask = c.pick(&[7, 15, 60, 63, 255, 504, 1023]);
            plain(CLASS_ALU64 | ALU_AND | SRC_K, dst, 0, 0, mask)
        }
        1 => plain(
            CLASS_ALU64 | ALU_RSH | SRC_K,
            dst,
            0,
            0,
            52 + c.below(12) as i32,
        ),
        _ => plain(
            CLASS_ALU | ALU_AND | SRC_K,
            dst,
            0,
            0,
            c.pick(&[60, 255, 4095]),
        ),
    };
    vec![
        plain(CLASS_ALU64 | ALU_MOV | SRC_X, dst, src, 0, 0),
        bound,
        plain(CLASS_ALU64 | ALU_ADD | SRC_X, dst, base, 0, 0),
        plain(CLASS_ALU64 | ALU_ADD | SRC_K, dst, 0, 0, off),
    ]
}

/// A derived pointer: r10 or a region pointer plus a small offset.
fn gen_derived_pointer(c: &mut Choices<'_>) -> Vec<Pending> {
    let dst = c.pick(&[4u8, 5, 6, 7, 8, 9]);
    let base = c.pick(&[10u8, 1, 3]);
    let off = c.byte() as i32 - 160;
    vec![
        plain(CLASS_ALU64 | ALU_MOV | SRC_X, dst, base, 0, 0),
        plain(CLASS_ALU64 | ALU_ADD | SRC_K, dst, 0, 0, off),
    ]
}

fn gen_alu(c: &mut Choices<'_>) -> Pending {
    let is64 = c.chance(60);
    let class = if is64 { CLASS_ALU64 } else { CLASS_ALU };
    let dst = c.dst();
    let op = c.pick(&[
        ALU_ADD, ALU_SUB, ALU_MUL, ALU_DIV, ALU_OR, ALU_AND, ALU_LSH, ALU_RSH, ALU_NEG, ALU_MOD,
        ALU_XOR, ALU_MOV, ALU_MOV, ALU_ARSH, ALU_END,
    ]);
    let by_reg = c.chance(50);
    match op {
        ALU_NEG => plain(class | op, dst, 0, 0, 0),
        ALU_END => {
            let width = c.pick(&[16, 32, 64]);
            let src_bit = if !is64 && by_reg { SRC_X } else { SRC_K };
            plain(class | op | src_bit, dst, 0, 0, width)
        }
        _ => {
            let off = match op {
                ALU_DIV | ALU_MOD => c.below(2) as i16,
                ALU_MOV if by_reg => {
                    let widths: &[i16] = if is64 {
                        &[0, 0, 8, 16, 32]
                    } else {
                        &[0, 0, 8, 16]
                    };
                    c.pick(widths)
                }
                _ => 0,
            };
            if by_reg {
                plain(class | op | SRC_X, dst, c.src(), off, 0)
            } else {
                plain(class | op | SRC_K, dst, 0, off, c.imm())
            }
        }
    }
}

/// An unconditional (`ja`, `ja32`) or conditional jump to item `target`.
fn gen_jump(c: &mut Choices<'_>, target: usize) -> Pending {
    match c.below(10) {
        0 => Pending {
            insn: Insn::new(OP_JA, 0, 0, 0, 0),
            fixup: Fixup::JumpOff(target),
        },
        1 => Pending {
            insn: Insn::new(CLASS_JMP32 | JMP_JA, 0, 0, 0, 0),
            fixup: Fixup::JumpImm(target),
        },
        _ => gen_cond_jump(c, target),
    }
}

/// A conditional jump (JMP or JMP32, register or immediate) to item `target`.
fn gen_cond_jump(c: &mut Choices<'_>, target: usize) -> Pending {
    let class = if c.chance(30) { CLASS_JMP32 } else { CLASS_JMP };
    let op = c.pick(&[
        JMP_JEQ, JMP_JGT, JMP_JGE, JMP_JSET, JMP_JNE, JMP_JSGT, JMP_JSGE, JMP_JLT, JMP_JLE,
        JMP_JSLT, JMP_JSLE,
    ]);
    let dst = c.src();
    let insn = if c.chance(50) {
        Insn::new(class | op | SRC_X, dst, c.src(), 0, 0)
    } else {
        Insn::new(class | op | SRC_K, dst, 0, 0, c.imm())
    };
    Pending {
        insn,
        fixup: Fixup::JumpOff(target),
    }
}

/// A helper call, often with r1/r2 set up as a pointer and a length first.
fn gen_helper_call(c: &mut Choices<'_>) -> Vec<Pending> {
    let id = c.pick(&HELPER_IDS);
    let mut seq = Vec::new();
    if c.chance(70) {
        let base = c.pick(&[10u8, 1, 1, 3]);
        let off = if base == 10 {
            -(1 + c.below(256) as i32) * 2
        } else {
            c.below(80) as i32 - 8
        };
        let len = c.pick(&[0, 1, 2, 4, 8, 16, 64, 600, -1]);
        seq.push(plain(CLASS_ALU64 | ALU_MOV | SRC_X, 1, base, 0, 0));
        seq.push(plain(CLASS_ALU64 | ALU_ADD | SRC_K, 1, 0, 0, off));
        seq.push(plain(CLASS_ALU64 | ALU_MOV | SRC_K, 2, 0, 0, len));
    }
    seq.push(plain(OP_CALL, 0, 0, 0, id));
    seq
}

/// Lays the functions out one after another and resolves jumps and calls.
fn layout(functions: &[Vec<Vec<Pending>>]) -> Vec<Insn> {
    // Slot of every item (and of each function's start). Every pending instruction is
    // one slot: an `lddw` is generated as two, its second slot a pending of its own.
    let mut item_slot: Vec<Vec<i64>> = Vec::new();
    let mut next = 0i64;
    for f in functions {
        let mut starts = Vec::new();
        for item in f {
            starts.push(next);
            next += item.len() as i64;
        }
        item_slot.push(starts);
    }
    let mut insns = Vec::with_capacity(next as usize);
    for (fi, f) in functions.iter().enumerate() {
        for item in f {
            for p in item {
                let pc = insns.len() as i64;
                let mut insn = p.insn;
                match p.fixup {
                    Fixup::None => {}
                    Fixup::JumpOff(t) => insn.off = (item_slot[fi][t] - pc - 1) as i16,
                    Fixup::JumpImm(t) => insn.imm = (item_slot[fi][t] - pc - 1) as i32,
                    Fixup::Call(g) => insn.imm = (item_slot[g][0] - pc - 1) as i32,
                }
                insns.push(insn);
            }
        }
    }
    insns
}

/// proptest strategy for cases: random bytes, shrunk as bytes.
pub fn strategy() -> impl Strategy<Value = GenCase> {
    proptest::collection::vec(any::<u8>(), 0..2048).prop_map(|b| GenCase::from_bytes(&b))
}

/// Verifies `case` and runs it on the interpreter, the JIT and the quick tier, at its
/// own budget and at a large one; describes the first difference.
pub fn differential(case: &GenCase) -> Result<(), String> {
    let verified = verify(case.program.clone(), Arc::new(function_table()))
        .map_err(|e| format!("generated program does not verify: {e}\n{}", case.listing()))?;
    let verified = Arc::new(verified);
    differential_verified(case, &verified)
}

fn differential_verified(case: &GenCase, program: &Arc<VerifiedProgram>) -> Result<(), String> {
    let interp = Interpreter::new(program.clone());
    let jit = csx_ebpf_jit::JitProgram::compile(program.clone())
        .map_err(|e| format!("jit compile failed: {e}\n{}", case.listing()))?;
    #[allow(unused_mut)]
    let mut engines: Vec<(&str, Box<dyn Engine>)> = vec![("jit", Box::new(jit))];
    #[cfg(target_arch = "x86_64")]
    engines.push((
        "quick",
        Box::new(
            csx_ebpf_jit::QuickProgram::compile(program.clone())
                .map_err(|e| format!("quick compile failed: {e}\n{}", case.listing()))?,
        ),
    ));
    for fuel in [case.fuel, 100_000] {
        let want = case.run(&interp, fuel);
        for (name, engine) in &engines {
            let got = case.run(engine.as_ref(), fuel);
            if got != want {
                return Err(format!(
                    "fuel {fuel}: interpreter {:?} (data {:02x?})\n             {name} {:?} (data {:02x?})\n{}",
                    want.0,
                    want.1,
                    got.0,
                    got.1,
                    case.listing()
                ));
            }
        }
        // Counting changes nothing, and every engine counts the same blocks.
        let blocks = program.blocks();
        let counted_run = |engine: &dyn Engine| -> Result<Vec<u64>, String> {
            let counts = ExecCounts::new(blocks);
            let run = case.run_with(engine, fuel, Some(&counts));
            if run != want {
                return Err(format!(
                    "fuel {fuel}: a counted run differs: {:?}, uncounted {:?}\n{}",
                    run.0,
                    want.0,
                    case.listing()
                ));
            }
            Ok(counts.values())
        };
        let reference = counted_run(&interp)?;
        for (name, engine) in &engines {
            let got = counted_run(engine.as_ref())?;
            if got != reference {
                return Err(format!(
                    "fuel {fuel}: executed-block counts differ (leaders {:?}):\n\
                     interpreter {:?}\n        {name} {:?}\n{}",
                    blocks.leaders(),
                    reference,
                    got,
                    case.listing()
                ));
            }
        }
    }
    Ok(())
}

/// The fuzz target's body: any bytes → a case → the differential check; panics on a
/// difference (libFuzzer then saves the input).
pub fn check_bytes(bytes: &[u8]) {
    let case = GenCase::from_bytes(bytes);
    if let Err(e) = differential(&case) {
        panic!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_make_a_verifiable_program() {
        for seed in 0u64..200 {
            let bytes: Vec<u8> = (0..512u64)
                .map(|i| (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 57)) as u8 ^ i as u8)
                .collect();
            let case = GenCase::from_bytes(&bytes);
            verify(case.program.clone(), Arc::new(function_table()))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", case.listing()));
        }
        let empty = GenCase::from_bytes(&[]);
        assert!(verify(empty.program, Arc::new(function_table())).is_ok());
    }
}
