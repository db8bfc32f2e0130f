//! Load-time verification: turns a loaded [`Program`] into a [`VerifiedProgram`].
//!
//! The verifier checks the program's *shape*, not its values: every slot decodes to an
//! instruction RFC 9669 defines (cpu v4), registers exist and r10 is never written,
//! every jump and local call lands on an instruction inside the program (and inside its
//! own function), no reachable path runs past the last slot, helpers called by id exist,
//! static stack accesses through r10 stay in the frame, and an acyclic call graph is no
//! deeper than [`CALL_DEPTH_MAX`]. Everything that depends on values (pointers, helper
//! ids in `callx`, recursion depth, loop counts) is checked at run time by the engines,
//! which is what lets the verifier stay linear in the program's length.
//!
//! Invariants the engines rely on (and assert in debug builds):
//! * the entry, every jump target and every local call target is an instruction slot in
//!   range, never the second half of an `lddw`;
//! * no reachable instruction falls through past the last slot or into another function;
//! * every register field of every instruction is at most 10, and no instruction writes
//!   r10;
//! * every `call imm` helper id is in the function table.
//!
//! Functions are contiguous: function `f` spans from its start (the entry or a local call
//! target) to the next start. This is the model clang emits and the kernel enforces, and
//! it lets an engine compile or analyse one function at a time.

use std::sync::Arc;

use crate::disasm::format_insn;
use crate::helper::FunctionTable;
use crate::isa::*;
use crate::limits::{
    CALL_DEPTH_MAX, GLOBAL_SECTIONS_MAX, GLOBAL_SECTION_SIZE_MAX, PROGRAM_INSN_COUNT_MAX,
    STACK_FRAME_SIZE,
};
use crate::program::{Program, ProgramInfo, VerifiedProgram};

/// Why a program was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    #[error("program is empty")]
    Empty,
    #[error("program has {slots} instruction slots, limit is {limit}")]
    TooLong { slots: usize, limit: usize },
    #[error("entry slot {entry} is outside the program of {slots} slots")]
    EntryOutOfRange { entry: u32, slots: usize },
    #[error("entry slot {entry} is the second half of an lddw")]
    EntryInLddw { entry: u32 },
    #[error("program has {count} global sections, limit is {limit}")]
    TooManyGlobals { count: usize, limit: usize },
    #[error("global section `{name}` is {size} bytes, limit is {limit}")]
    GlobalTooLarge {
        name: String,
        size: usize,
        limit: usize,
    },
    /// One instruction is invalid; `insn` is its disassembly.
    #[error("pc {pc} (`{insn}`): {reason}")]
    Insn {
        pc: u32,
        insn: String,
        reason: InsnError,
    },
}

/// Why one instruction was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InsnError {
    #[error("unknown opcode {opc:#04x}")]
    UnknownOpcode { opc: u8 },
    #[error("legacy packet access (ABS/IND load, opcode {opc:#04x}) is not supported")]
    LegacyPacketAccess { opc: u8 },
    #[error("register r{reg} does not exist, registers are r0 to r10")]
    BadRegister { reg: u8 },
    #[error("write to read-only register r10")]
    WriteToFramePointer,
    #[error("reserved field {field} is {value}, must be 0")]
    ReservedField { field: &'static str, value: i64 },
    #[error("offset is {off}, must be {allowed}")]
    BadOffset { off: i16, allowed: &'static str },
    #[error("byte swap width is {imm}, must be 16, 32 or 64")]
    BadSwapWidth { imm: i32 },
    #[error("unknown atomic operation {imm:#x}")]
    UnknownAtomicOp { imm: i32 },
    #[error("lddw is missing its second slot")]
    LddwTruncated,
    #[error("lddw with src {src} is not a plain constant; the loader must resolve it")]
    LddwSource { src: u8 },
    #[error("jump target {target} is outside the program of {slots} slots")]
    JumpOutOfRange { target: i64, slots: usize },
    #[error("jump target {target} is the second half of an lddw")]
    JumpIntoLddw { target: u32 },
    #[error("jump target {target} leaves the function starting at slot {function}")]
    JumpOutOfFunction { target: u32, function: u32 },
    #[error("call target {target} is outside the program of {slots} slots")]
    CallOutOfRange { target: i64, slots: usize },
    #[error("call target {target} is the second half of an lddw")]
    CallIntoLddw { target: u32 },
    #[error("call with src {src} is not supported (0 calls a helper, 1 a local function)")]
    UnsupportedCall { src: u8 },
    #[error("call to helper {id}, which the function table does not have")]
    UnknownHelper { id: i32 },
    #[error("stack access of {size} bytes at r10{off:+} is outside the {frame}-byte frame")]
    StackOutOfFrame { off: i16, size: u8, frame: usize },
    #[error("execution can run past the last slot")]
    FallsOffEnd,
    #[error("execution falls through into the function starting at slot {function}")]
    FallsIntoFunction { function: u32 },
    #[error("call chain reaches {depth} frames, limit is {limit}")]
    CallDepthExceeded { depth: usize, limit: usize },
}

/// Checks `program` and, if it is valid, wraps it with the table its helper calls were
/// resolved against.
///
/// The steps: the program's shape (length, entry, globals) → every slot on its own
/// (opcode, fields, registers, targets) → function boundaries → paths from the entry
/// (falling off the end, the call graph) → its depth.
pub fn verify(
    program: Program,
    functions: Arc<FunctionTable>,
) -> Result<VerifiedProgram, VerifyError> {
    check_shape(&program)?;
    let insns = &program.insns;
    let tails = find_lddw_tails(insns)?;
    let entry = program.entry;
    if entry as usize >= insns.len() {
        return Err(VerifyError::EntryOutOfRange {
            entry,
            slots: insns.len(),
        });
    }
    if tails[entry as usize] {
        return Err(VerifyError::EntryInLddw { entry });
    }

    let mut info = ProgramInfo {
        function_starts: vec![entry],
        ..ProgramInfo::default()
    };
    let mut pc = 0;
    while pc < insns.len() {
        if !tails[pc] {
            let facts = check_insn(insns, pc, &tails, &functions).map_err(|r| at(insns, pc, r))?;
            match facts {
                Facts::Plain => {}
                Facts::LocalCall(target) => info.function_starts.push(target),
                Facts::Helper(id) => info.helpers_called.push(id),
                Facts::CallX => info.uses_callx = true,
            }
        }
        pc += 1;
    }
    info.function_starts.sort_unstable();
    info.function_starts.dedup();
    info.helpers_called.sort_unstable();
    info.helpers_called.dedup();
    info.lddw_tails = (0..insns.len() as u32)
        .filter(|&pc| tails[pc as usize])
        .collect();

    check_function_bounds(insns, &tails, &info.function_starts)?;
    let calls = check_paths(insns, entry, &info.function_starts)?;
    check_call_depth(insns, entry, &info.function_starts, &calls)?;
    Ok(VerifiedProgram::new(program, functions, info))
}

/// Builds the error for instruction `pc`.
fn at(insns: &[Insn], pc: usize, reason: InsnError) -> VerifyError {
    VerifyError::Insn {
        pc: pc as u32,
        insn: format_insn(insns, pc),
        reason,
    }
}

/// Length, globals.
fn check_shape(program: &Program) -> Result<(), VerifyError> {
    let slots = program.insns.len();
    if slots == 0 {
        return Err(VerifyError::Empty);
    }
    if slots > PROGRAM_INSN_COUNT_MAX {
        return Err(VerifyError::TooLong {
            slots,
            limit: PROGRAM_INSN_COUNT_MAX,
        });
    }
    let count = program.globals.len();
    if count > GLOBAL_SECTIONS_MAX {
        return Err(VerifyError::TooManyGlobals {
            count,
            limit: GLOBAL_SECTIONS_MAX,
        });
    }
    for g in &program.globals {
        if g.data.len() > GLOBAL_SECTION_SIZE_MAX {
            return Err(VerifyError::GlobalTooLarge {
                name: g.name.clone(),
                size: g.data.len(),
                limit: GLOBAL_SECTION_SIZE_MAX,
            });
        }
    }
    Ok(())
}

/// Marks the second slot of every `lddw`, checking that it exists and that its fields
/// other than `imm` are zero (RFC 9669 §5.4: the second slot is a pseudo instruction).
/// Slots are decoded from slot 0 onward, so the split is unambiguous.
fn find_lddw_tails(insns: &[Insn]) -> Result<Vec<bool>, VerifyError> {
    let mut tails = vec![false; insns.len()];
    let mut pc = 0;
    while pc < insns.len() {
        if insns[pc].opc == OP_LDDW {
            let Some(tail) = insns.get(pc + 1) else {
                return Err(at(insns, pc, InsnError::LddwTruncated));
            };
            let reserved = [
                ("opcode of the second slot", i64::from(tail.opc)),
                ("dst of the second slot", i64::from(tail.dst)),
                ("src of the second slot", i64::from(tail.src)),
                ("offset of the second slot", i64::from(tail.off)),
            ];
            for (field, value) in reserved {
                if value != 0 {
                    return Err(at(insns, pc, InsnError::ReservedField { field, value }));
                }
            }
            tails[pc + 1] = true;
            pc += 2;
        } else {
            pc += 1;
        }
    }
    Ok(tails)
}

/// What one instruction contributes to [`ProgramInfo`].
enum Facts {
    Plain,
    LocalCall(u32),
    Helper(u32),
    CallX,
}

/// Checks one instruction (not an lddw tail) on its own.
fn check_insn(
    insns: &[Insn],
    pc: usize,
    tails: &[bool],
    functions: &FunctionTable,
) -> Result<Facts, InsnError> {
    let insn = insns[pc];
    check_reg(insn.dst)?;
    check_reg(insn.src)?;
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 => check_alu(insn).map(|()| Facts::Plain),
        CLASS_JMP | CLASS_JMP32 => check_jmp(insns, pc, tails, functions),
        CLASS_LD => check_ld(insn).map(|()| Facts::Plain),
        _ => check_mem(insn).map(|()| Facts::Plain),
    }
}

fn check_reg(reg: u8) -> Result<(), InsnError> {
    if reg >= REG_COUNT {
        return Err(InsnError::BadRegister { reg });
    }
    Ok(())
}

fn check_writable(reg: u8) -> Result<(), InsnError> {
    if reg == REG_FP {
        return Err(InsnError::WriteToFramePointer);
    }
    Ok(())
}

fn reserved(field: &'static str, value: impl Into<i64>) -> Result<(), InsnError> {
    let value = value.into();
    if value != 0 {
        return Err(InsnError::ReservedField { field, value });
    }
    Ok(())
}

/// ALU and ALU64 (RFC 9669 §4.1, §4.2).
fn check_alu(insn: Insn) -> Result<(), InsnError> {
    let is_64 = insn.class() == CLASS_ALU64;
    let is_x = insn.opc & SRC_X != 0;
    let op = insn.opc & 0xf0;
    check_writable(insn.dst)?;
    match op {
        ALU_NEG => {
            // NEG takes no source operand.
            if is_x {
                return Err(InsnError::UnknownOpcode { opc: insn.opc });
            }
            reserved("src", insn.src)?;
            reserved("offset", insn.off)?;
            return reserved("imm", insn.imm);
        }
        ALU_END => {
            // The source bit picks le/be in ALU; in ALU64 only bswap (K) exists.
            if is_64 && is_x {
                return Err(InsnError::UnknownOpcode { opc: insn.opc });
            }
            reserved("src", insn.src)?;
            reserved("offset", insn.off)?;
            if !matches!(insn.imm, 16 | 32 | 64) {
                return Err(InsnError::BadSwapWidth { imm: insn.imm });
            }
            return Ok(());
        }
        0xe0 | 0xf0 => return Err(InsnError::UnknownOpcode { opc: insn.opc }),
        _ => {}
    }
    match op {
        // sdiv and smod are div and mod with offset 1 (RFC 9669 §4.1).
        ALU_DIV | ALU_MOD => {
            if !matches!(insn.off, 0 | 1) {
                return Err(InsnError::BadOffset {
                    off: insn.off,
                    allowed: "0 or 1",
                });
            }
        }
        // movsx is mov X with offset 8, 16 (or 32 in ALU64).
        ALU_MOV if is_x => {
            let ok = matches!(insn.off, 0 | 8 | 16) || (is_64 && insn.off == 32);
            if !ok {
                let allowed = if is_64 {
                    "0, 8, 16 or 32"
                } else {
                    "0, 8 or 16"
                };
                return Err(InsnError::BadOffset {
                    off: insn.off,
                    allowed,
                });
            }
        }
        _ => reserved("offset", insn.off)?,
    }
    if is_x {
        reserved("imm", insn.imm)
    } else {
        reserved("src", insn.src)
    }
}

/// JMP and JMP32 (RFC 9669 §4.3).
fn check_jmp(
    insns: &[Insn],
    pc: usize,
    tails: &[bool],
    functions: &FunctionTable,
) -> Result<Facts, InsnError> {
    let insn = insns[pc];
    let is_32 = insn.class() == CLASS_JMP32;
    let is_x = insn.opc & SRC_X != 0;
    match insn.opc & 0xf0 {
        JMP_JA => {
            if is_x {
                return Err(InsnError::UnknownOpcode { opc: insn.opc });
            }
            reserved("dst", insn.dst)?;
            reserved("src", insn.src)?;
            // `ja` uses the offset; `ja32` (class JMP32) the 32-bit imm.
            if is_32 {
                reserved("offset", insn.off)?;
            } else {
                reserved("imm", insn.imm)?;
            }
        }
        JMP_CALL => return check_call(insns, pc, tails, functions),
        JMP_EXIT => {
            if is_32 || is_x {
                return Err(InsnError::UnknownOpcode { opc: insn.opc });
            }
            reserved("dst", insn.dst)?;
            reserved("src", insn.src)?;
            reserved("offset", insn.off)?;
            reserved("imm", insn.imm)?;
        }
        0xe0 | 0xf0 => return Err(InsnError::UnknownOpcode { opc: insn.opc }),
        _ => {
            if is_x {
                reserved("imm", insn.imm)?;
            } else {
                reserved("src", insn.src)?;
            }
        }
    }
    if let Some(target) = jump_target(insn, pc) {
        check_jump_target(target, tails)?;
    }
    Ok(Facts::Plain)
}

/// `call` and `callx` (RFC 9669 §4.3.1), class JMP only.
fn check_call(
    insns: &[Insn],
    pc: usize,
    tails: &[bool],
    functions: &FunctionTable,
) -> Result<Facts, InsnError> {
    let insn = insns[pc];
    if insn.class() != CLASS_JMP {
        return Err(InsnError::UnknownOpcode { opc: insn.opc });
    }
    reserved("offset", insn.off)?;
    if insn.opc == OP_CALLX {
        // The helper id is in register dst, read at run time.
        reserved("src", insn.src)?;
        reserved("imm", insn.imm)?;
        return Ok(Facts::CallX);
    }
    reserved("dst", insn.dst)?;
    match insn.src {
        0 => {
            let known = u32::try_from(insn.imm)
                .ok()
                .filter(|&id| functions.get(id).is_some());
            known
                .map(Facts::Helper)
                .ok_or(InsnError::UnknownHelper { id: insn.imm })
        }
        CALL_SRC_LOCAL => {
            let target = pc as i64 + i64::from(insn.imm) + 1;
            let slots = tails.len();
            let Some(t) = u32::try_from(target).ok().filter(|&t| (t as usize) < slots) else {
                return Err(InsnError::CallOutOfRange { target, slots });
            };
            if tails[t as usize] {
                return Err(InsnError::CallIntoLddw { target: t });
            }
            Ok(Facts::LocalCall(t))
        }
        src => Err(InsnError::UnsupportedCall { src }),
    }
}

/// The slot a jump instruction may transfer to, unchecked; `None` for non-jumps
/// (calls and exit included).
fn jump_target(insn: Insn, pc: usize) -> Option<i64> {
    let class = insn.class();
    if class != CLASS_JMP && class != CLASS_JMP32 {
        return None;
    }
    match insn.opc & 0xf0 {
        JMP_CALL | JMP_EXIT => None,
        JMP_JA if class == CLASS_JMP32 => Some(pc as i64 + i64::from(insn.imm) + 1),
        _ => Some(pc as i64 + i64::from(insn.off) + 1),
    }
}

fn check_jump_target(target: i64, tails: &[bool]) -> Result<(), InsnError> {
    let slots = tails.len();
    let Some(t) = usize::try_from(target).ok().filter(|&t| t < slots) else {
        return Err(InsnError::JumpOutOfRange { target, slots });
    };
    if tails[t] {
        return Err(InsnError::JumpIntoLddw { target: t as u32 });
    }
    Ok(())
}

/// Class LD: only `lddw` with a plain constant (RFC 9669 §5.4); the legacy packet
/// loads (§5.5) are rejected.
fn check_ld(insn: Insn) -> Result<(), InsnError> {
    let mode = insn.opc & 0xe0;
    if mode == MODE_ABS || mode == MODE_IND {
        return Err(InsnError::LegacyPacketAccess { opc: insn.opc });
    }
    if insn.opc != OP_LDDW {
        return Err(InsnError::UnknownOpcode { opc: insn.opc });
    }
    check_writable(insn.dst)?;
    if insn.src != 0 {
        return Err(InsnError::LddwSource { src: insn.src });
    }
    reserved("offset", insn.off)
}

/// Classes LDX, ST, STX (RFC 9669 §5.1-§5.3).
fn check_mem(insn: Insn) -> Result<(), InsnError> {
    let class = insn.class();
    let mode = insn.opc & 0xe0;
    let size = match insn.opc & 0x18 {
        SIZE_B => 1,
        SIZE_H => 2,
        SIZE_W => 4,
        _ => 8,
    };
    let unknown = Err(InsnError::UnknownOpcode { opc: insn.opc });
    let base = match (class, mode) {
        (CLASS_LDX, MODE_MEM) => {
            check_writable(insn.dst)?;
            reserved("imm", insn.imm)?;
            insn.src
        }
        // Sign-extending loads exist for b, h and w only.
        (CLASS_LDX, MODE_MEMSX) if size < 8 => {
            check_writable(insn.dst)?;
            reserved("imm", insn.imm)?;
            insn.src
        }
        (CLASS_ST, MODE_MEM) => {
            reserved("src", insn.src)?;
            insn.dst
        }
        (CLASS_STX, MODE_MEM) => {
            reserved("imm", insn.imm)?;
            insn.dst
        }
        (CLASS_STX, MODE_ATOMIC) if size >= 4 => {
            check_atomic(insn)?;
            insn.dst
        }
        _ => return unknown,
    };
    if base == REG_FP {
        check_stack_access(insn.off, size)?;
    }
    Ok(())
}

/// Atomic operations (RFC 9669 §5.3): the fetching ones write `src` (cmpxchg writes r0).
fn check_atomic(insn: Insn) -> Result<(), InsnError> {
    let plain = [ATOMIC_ADD, ATOMIC_OR, ATOMIC_AND, ATOMIC_XOR];
    let fetch_only = [ATOMIC_XCHG, ATOMIC_CMPXCHG];
    let is_plain = plain.contains(&insn.imm);
    let is_fetch = plain.contains(&(insn.imm & !ATOMIC_FETCH)) && insn.imm & ATOMIC_FETCH != 0;
    if !is_plain && !is_fetch && !fetch_only.contains(&insn.imm) {
        return Err(InsnError::UnknownAtomicOp { imm: insn.imm });
    }
    if insn.imm != ATOMIC_CMPXCHG && !is_plain {
        check_writable(insn.src)?;
    }
    Ok(())
}

/// A static access `[r10 + off]` of `size` bytes must lie in the current frame,
/// `[r10 - 512, r10)`.
fn check_stack_access(off: i16, size: u8) -> Result<(), InsnError> {
    let start = i64::from(off);
    let end = start + i64::from(size);
    if start < -(STACK_FRAME_SIZE as i64) || end > 0 {
        return Err(InsnError::StackOutOfFrame {
            off,
            size,
            frame: STACK_FRAME_SIZE,
        });
    }
    Ok(())
}

/// The start of the function slot `pc` belongs to (`None` before the first start).
fn owner(starts: &[u32], pc: u32) -> Option<u32> {
    let n = starts.partition_point(|&s| s <= pc);
    n.checked_sub(1).map(|i| starts[i])
}

/// Every jump stays inside its own function.
fn check_function_bounds(
    insns: &[Insn],
    tails: &[bool],
    starts: &[u32],
) -> Result<(), VerifyError> {
    for (pc, insn) in insns.iter().enumerate() {
        if tails[pc] {
            continue;
        }
        // Targets were range-checked per instruction, so they fit in u32.
        let Some(target) = jump_target(*insn, pc) else {
            continue;
        };
        let target = target as u32;
        let from = owner(starts, pc as u32);
        if owner(starts, target) != from {
            // A jump leaving code before the first function start enters a function.
            let function = from.or(owner(starts, target)).unwrap_or(0);
            return Err(at(
                insns,
                pc,
                InsnError::JumpOutOfFunction { target, function },
            ));
        }
    }
    Ok(())
}

/// A reachable local call: the call's slot, its function's start and the callee's.
struct CallEdge {
    pc: u32,
    caller: u32,
    callee: u32,
}

/// Walks every path from the entry: no reachable instruction may fall through past the
/// last slot or into the next function. Returns the reachable local calls.
fn check_paths(insns: &[Insn], entry: u32, starts: &[u32]) -> Result<Vec<CallEdge>, VerifyError> {
    let slots = insns.len();
    let mut seen = vec![false; slots];
    let mut work = vec![entry];
    seen[entry as usize] = true;
    let mut calls = Vec::new();
    while let Some(pc) = work.pop() {
        let insn = insns[pc as usize];
        // At most two successors besides the fall-through: a jump or callee target.
        let mut target = None;
        let mut falls_through = true;
        if let Some(t) = jump_target(insn, pc as usize) {
            // Range-checked per instruction, so it fits in u32.
            target = Some(t as u32);
            // `ja` and `ja32` are the unconditional jumps.
            falls_through = insn.opc & 0xf0 != JMP_JA;
        } else if insn.opc == OP_EXIT {
            falls_through = false;
        } else if insn.opc == OP_CALL && insn.src == CALL_SRC_LOCAL {
            let callee = (i64::from(pc) + i64::from(insn.imm) + 1) as u32;
            let caller = owner(starts, pc).unwrap_or(entry);
            calls.push(CallEdge { pc, caller, callee });
            target = Some(callee);
        }
        let mut after = None;
        if falls_through {
            let width = if insn.opc == OP_LDDW { 2 } else { 1 };
            let next = pc as usize + width;
            if next >= slots {
                return Err(at(insns, pc as usize, InsnError::FallsOffEnd));
            }
            let next = next as u32;
            if starts.binary_search(&next).is_ok() {
                let err = InsnError::FallsIntoFunction { function: next };
                return Err(at(insns, pc as usize, err));
            }
            after = Some(next);
        }
        for t in [target, after].into_iter().flatten() {
            if !std::mem::replace(&mut seen[t as usize], true) {
                work.push(t);
            }
        }
    }
    Ok(calls)
}

/// If the reachable call graph is acyclic, its longest chain of frames (the entry's
/// included) must fit in [`CALL_DEPTH_MAX`]. Recursion is bounded at run time instead.
fn check_call_depth(
    insns: &[Insn],
    entry: u32,
    starts: &[u32],
    calls: &[CallEdge],
) -> Result<(), VerifyError> {
    let index = |start: u32| {
        starts
            .binary_search(&start)
            .expect("every caller and callee is a start")
    };
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); starts.len()];
    for (i, c) in calls.iter().enumerate() {
        edges[index(c.caller)].push(i);
    }
    // Iterative post-order DFS: `depth[f]` is the frames of the deepest chain from f,
    // `deepest[f]` the call edge that starts it.
    const UNSEEN: u8 = 0;
    const ACTIVE: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![UNSEEN; starts.len()];
    let mut depth = vec![1usize; starts.len()];
    let mut deepest: Vec<Option<usize>> = vec![None; starts.len()];
    let root = index(entry);
    let mut stack = vec![(root, 0usize)];
    state[root] = ACTIVE;
    while let Some(&mut (f, ref mut next_edge)) = stack.last_mut() {
        if let Some(&e) = edges[f].get(*next_edge) {
            *next_edge += 1;
            let g = index(calls[e].callee);
            match state[g] {
                UNSEEN => {
                    state[g] = ACTIVE;
                    stack.push((g, 0));
                }
                // A cycle: recursion, bounded at run time.
                ACTIVE => return Ok(()),
                _ => {}
            }
            continue;
        }
        state[f] = DONE;
        for &e in &edges[f] {
            let g = index(calls[e].callee);
            if depth[g] + 1 > depth[f] {
                depth[f] = depth[g] + 1;
                deepest[f] = Some(e);
            }
        }
        stack.pop();
    }
    if depth[root] <= CALL_DEPTH_MAX {
        return Ok(());
    }
    // Follow the deepest chain to the call that creates the first frame too many.
    let mut f = root;
    let mut frames = 1;
    loop {
        let e = deepest[f].expect("a function deeper than one frame has a deepest call");
        frames += 1;
        if frames > CALL_DEPTH_MAX {
            let reason = InsnError::CallDepthExceeded {
                depth: depth[root],
                limit: CALL_DEPTH_MAX,
            };
            return Err(at(insns, calls[e].pc as usize, reason));
        }
        f = index(calls[e].callee);
    }
}

#[cfg(test)]
mod tests {
    //! Every rejection the verifier makes, each with its message, plus the programs it
    //! must accept (recursion, stores through r10, unreachable tails) and the facts it
    //! records.

    use super::*;
    use crate::program::GlobalSection;

    const EXIT: Insn = Insn::new(OP_EXIT, 0, 0, 0, 0);

    fn alu64(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(CLASS_ALU64 | op | SRC_K, dst, 0, 0, imm)
    }

    fn mov(dst: u8, imm: i32) -> Insn {
        alu64(ALU_MOV, dst, imm)
    }

    fn ja(off: i16) -> Insn {
        Insn::new(OP_JA, 0, 0, off, 0)
    }

    fn call_local(imm: i32) -> Insn {
        Insn::new(OP_CALL, 0, CALL_SRC_LOCAL, 0, imm)
    }

    fn lddw(dst: u8, imm: i32) -> [Insn; 2] {
        [Insn::new(OP_LDDW, dst, 0, 0, imm), Insn::new(0, 0, 0, 0, 0)]
    }

    fn check(insns: Vec<Insn>) -> Result<VerifiedProgram, VerifyError> {
        verify(
            Program::from_insns("test", insns),
            Arc::new(FunctionTable::conformance()),
        )
    }

    /// The pc and reason of an instruction-level rejection, after checking that the
    /// message has the documented shape.
    fn reject(insns: Vec<Insn>) -> (u32, InsnError) {
        let copy = insns.clone();
        match check(insns) {
            Err(e @ VerifyError::Insn { .. }) => {
                let VerifyError::Insn {
                    pc,
                    ref insn,
                    ref reason,
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(insn, &format_insn(&copy, pc as usize));
                assert_eq!(e.to_string(), format!("pc {pc} (`{insn}`): {reason}"));
                (pc, reason.clone())
            }
            other => panic!("expected an instruction rejection, got {other:?}"),
        }
    }

    /// The reason's message for a one-instruction rejection at `pc`.
    fn reason_at(insns: Vec<Insn>, pc: u32) -> String {
        let (got, reason) = reject(insns);
        assert_eq!(got, pc, "rejected at the wrong pc: {reason}");
        reason.to_string()
    }

    #[test]
    fn accepts_minimal_program() {
        let v = check(vec![mov(0, 1), EXIT]).expect("valid");
        assert_eq!(v.info().function_starts, vec![0]);
        assert!(v.info().lddw_tails.is_empty());
        assert!(!v.info().uses_callx);
    }

    #[test]
    fn program_shape_errors() {
        assert_eq!(check(vec![]).unwrap_err(), VerifyError::Empty);
        assert_eq!(check(vec![]).unwrap_err().to_string(), "program is empty");

        let long = vec![EXIT; PROGRAM_INSN_COUNT_MAX + 1];
        let e = check(long).unwrap_err();
        assert_eq!(
            e.to_string(),
            "program has 1000001 instruction slots, limit is 1000000"
        );

        let mut p = Program::from_insns("p", vec![EXIT]);
        p.entry = 1;
        let e = verify(p, Arc::new(FunctionTable::new())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "entry slot 1 is outside the program of 1 slots"
        );

        let [a, b] = lddw(0, 1);
        let mut p = Program::from_insns("p", vec![a, b, EXIT]);
        p.entry = 1;
        let e = verify(p, Arc::new(FunctionTable::new())).unwrap_err();
        assert_eq!(e.to_string(), "entry slot 1 is the second half of an lddw");
    }

    #[test]
    fn global_section_limits() {
        let section = |size: usize| GlobalSection {
            name: ".data".into(),
            data: vec![0; size],
            writable: true,
        };
        let mut p = Program::from_insns("p", vec![EXIT]);
        p.globals = vec![section(1); GLOBAL_SECTIONS_MAX + 1];
        let e = verify(p, Arc::new(FunctionTable::new())).unwrap_err();
        assert_eq!(e.to_string(), "program has 11 global sections, limit is 10");

        let mut p = Program::from_insns("p", vec![EXIT]);
        p.globals = vec![section(GLOBAL_SECTION_SIZE_MAX + 1)];
        let e = verify(p, Arc::new(FunctionTable::new())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "global section `.data` is 1048577 bytes, limit is 1048576"
        );

        let mut p = Program::from_insns("p", vec![EXIT]);
        p.globals = vec![section(GLOBAL_SECTION_SIZE_MAX); GLOBAL_SECTIONS_MAX];
        assert!(verify(p, Arc::new(FunctionTable::new())).is_ok());
    }

    #[test]
    fn unknown_opcodes() {
        let cases = [
            0xe7u8, // ALU64 op 0xe0
            0xf4,   // ALU op 0xf0
            0x8c,   // neg with X source
            0xdf,   // ALU64 END with X source
            0x0d,   // ja with X source
            0x96,   // exit in JMP32
            0x86,   // call in JMP32
            0xe5,   // JMP op 0xe0
            0x00,   // class LD, not lddw
            0x99,   // ldxsdw does not exist
            0xa1,   // LDX mode 0xa0
            0x82,   // ST with MEMSX mode
            0xc2,   // ST with ATOMIC mode
            0xd3,   // atomic byte
            0xcb,   // atomic half
        ];
        for opc in cases {
            let msg = reason_at(vec![Insn::new(opc, 0, 0, 0, 0), EXIT], 0);
            assert_eq!(
                msg,
                format!("unknown opcode {opc:#04x}"),
                "opcode {opc:#04x}"
            );
        }
    }

    #[test]
    fn legacy_packet_access() {
        for opc in [0x20u8, 0x28, 0x30, 0x40, 0x48, 0x50] {
            let msg = reason_at(vec![Insn::new(opc, 0, 0, 0, 0), EXIT], 0);
            assert_eq!(
                msg,
                format!("legacy packet access (ABS/IND load, opcode {opc:#04x}) is not supported")
            );
        }
    }

    #[test]
    fn bad_registers() {
        let msg = reason_at(vec![mov(11, 0), EXIT], 0);
        assert_eq!(msg, "register r11 does not exist, registers are r0 to r10");
        let add_x = Insn::new(CLASS_ALU64 | ALU_ADD | SRC_X, 0, 15, 0, 0);
        let msg = reason_at(vec![add_x, EXIT], 0);
        assert_eq!(msg, "register r15 does not exist, registers are r0 to r10");
    }

    #[test]
    fn writes_to_r10() {
        let msg = reason_at(vec![mov(0, 0), mov(10, 1), EXIT], 1);
        assert_eq!(msg, "write to read-only register r10");
        // The full message names pc, disassembly and reason.
        let insns = vec![mov(10, 1), EXIT];
        let e = check(insns.clone()).unwrap_err();
        let expected = format!(
            "pc 0 (`{}`): write to read-only register r10",
            format_insn(&insns, 0)
        );
        assert_eq!(e.to_string(), expected);

        let ldx = Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 10, 1, 0, 0);
        assert_eq!(
            reason_at(vec![ldx, EXIT], 0),
            "write to read-only register r10"
        );
        let [a, b] = lddw(10, 1);
        assert_eq!(
            reason_at(vec![a, b, EXIT], 0),
            "write to read-only register r10"
        );
        let fetch_add = Insn::new(
            CLASS_STX | MODE_ATOMIC | SIZE_DW,
            1,
            10,
            0,
            ATOMIC_ADD | ATOMIC_FETCH,
        );
        assert_eq!(
            reason_at(vec![fetch_add, EXIT], 0),
            "write to read-only register r10"
        );
        let xchg = Insn::new(CLASS_STX | MODE_ATOMIC | SIZE_W, 1, 10, 0, ATOMIC_XCHG);
        assert_eq!(
            reason_at(vec![xchg, EXIT], 0),
            "write to read-only register r10"
        );
        let neg = Insn::new(CLASS_ALU | ALU_NEG, 10, 0, 0, 0);
        assert_eq!(
            reason_at(vec![neg, EXIT], 0),
            "write to read-only register r10"
        );
    }

    #[test]
    fn r10_may_be_read_and_stored_through() {
        let insns = vec![
            Insn::new(CLASS_ALU64 | ALU_MOV | SRC_X, 1, 10, 0, 0),
            Insn::new(CLASS_ST | MODE_MEM | SIZE_DW, 10, 0, -8, 7),
            Insn::new(CLASS_STX | MODE_MEM | SIZE_B, 10, 1, -512, 0),
            Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 0, 10, -8, 0),
            // A plain (non-fetch) atomic add with src r10 only reads r10.
            Insn::new(CLASS_STX | MODE_ATOMIC | SIZE_DW, 10, 10, -16, ATOMIC_ADD),
            // cmpxchg writes r0, not src.
            Insn::new(
                CLASS_STX | MODE_ATOMIC | SIZE_DW,
                10,
                10,
                -16,
                ATOMIC_CMPXCHG,
            ),
            EXIT,
        ];
        check(insns).expect("valid");
    }

    #[test]
    fn reserved_fields() {
        let cases = [
            (
                Insn::new(CLASS_ALU64 | ALU_ADD | SRC_K, 0, 1, 0, 0),
                "reserved field src is 1, must be 0",
            ),
            (
                Insn::new(CLASS_ALU64 | ALU_ADD | SRC_X, 0, 1, 0, 3),
                "reserved field imm is 3, must be 0",
            ),
            (
                Insn::new(CLASS_ALU64 | ALU_ADD | SRC_K, 0, 0, 2, 0),
                "reserved field offset is 2, must be 0",
            ),
            (
                Insn::new(CLASS_ALU | ALU_NEG, 0, 0, 0, 5),
                "reserved field imm is 5, must be 0",
            ),
            (
                Insn::new(OP_EXIT, 1, 0, 0, 0),
                "reserved field dst is 1, must be 0",
            ),
            (
                Insn::new(OP_JA, 0, 0, 0, 4),
                "reserved field imm is 4, must be 0",
            ),
            (
                Insn::new(CLASS_JMP32 | JMP_JA, 0, 0, 1, 0),
                "reserved field offset is 1, must be 0",
            ),
            (
                Insn::new(CLASS_JMP | JMP_JEQ | SRC_K, 0, 2, 0, 0),
                "reserved field src is 2, must be 0",
            ),
            (
                Insn::new(OP_CALL, 3, 0, 0, 5),
                "reserved field dst is 3, must be 0",
            ),
            (
                Insn::new(OP_CALLX, 2, 0, 0, 1),
                "reserved field imm is 1, must be 0",
            ),
            (
                Insn::new(CLASS_LDX | MODE_MEM | SIZE_W, 0, 1, 0, 1),
                "reserved field imm is 1, must be 0",
            ),
            (
                Insn::new(CLASS_ST | MODE_MEM | SIZE_W, 1, 2, 0, 1),
                "reserved field src is 2, must be 0",
            ),
            (
                Insn::new(CLASS_STX | MODE_MEM | SIZE_W, 1, 2, 0, 1),
                "reserved field imm is 1, must be 0",
            ),
        ];
        for (insn, msg) in cases {
            assert_eq!(reason_at(vec![insn, EXIT], 0), msg, "{insn:?}");
        }
        let tail = Insn::new(0, 1, 0, 0, 0);
        let insns = vec![Insn::new(OP_LDDW, 0, 0, 0, 0), tail, EXIT];
        assert_eq!(
            reason_at(insns, 0),
            "reserved field dst of the second slot is 1, must be 0"
        );
    }

    #[test]
    fn offsets_and_widths() {
        let sdiv3 = Insn::new(CLASS_ALU64 | ALU_DIV | SRC_K, 0, 0, 3, 1);
        assert_eq!(
            reason_at(vec![sdiv3, EXIT], 0),
            "offset is 3, must be 0 or 1"
        );
        let movsx32_in_alu = Insn::new(CLASS_ALU | ALU_MOV | SRC_X, 0, 1, 32, 0);
        assert_eq!(
            reason_at(vec![movsx32_in_alu, EXIT], 0),
            "offset is 32, must be 0, 8 or 16"
        );
        let movsx_bad = Insn::new(CLASS_ALU64 | ALU_MOV | SRC_X, 0, 1, 24, 0);
        assert_eq!(
            reason_at(vec![movsx_bad, EXIT], 0),
            "offset is 24, must be 0, 8, 16 or 32"
        );
        let le24 = Insn::new(CLASS_ALU | ALU_END, 0, 0, 0, 24);
        assert_eq!(
            reason_at(vec![le24, EXIT], 0),
            "byte swap width is 24, must be 16, 32 or 64"
        );
        let atomic = Insn::new(CLASS_STX | MODE_ATOMIC | SIZE_DW, 1, 2, 0, 0x10);
        assert_eq!(
            reason_at(vec![atomic, EXIT], 0),
            "unknown atomic operation 0x10"
        );
        let xchg_nofetch = Insn::new(CLASS_STX | MODE_ATOMIC | SIZE_DW, 1, 2, 0, 0xe0);
        assert_eq!(
            reason_at(vec![xchg_nofetch, EXIT], 0),
            "unknown atomic operation 0xe0"
        );
        // The valid forms are accepted.
        let valid = vec![
            Insn::new(CLASS_ALU64 | ALU_MOD | SRC_X, 0, 1, 1, 0),
            Insn::new(CLASS_ALU64 | ALU_MOV | SRC_X, 0, 1, 32, 0),
            Insn::new(CLASS_ALU | ALU_MOV | SRC_X, 0, 1, 16, 0),
            Insn::new(CLASS_ALU | ALU_END | SRC_X, 0, 0, 0, 64),
            Insn::new(CLASS_ALU64 | ALU_END, 0, 0, 0, 16),
            Insn::new(CLASS_LDX | MODE_MEMSX | SIZE_W, 0, 1, 0, 0),
            Insn::new(
                CLASS_STX | MODE_ATOMIC | SIZE_W,
                1,
                2,
                0,
                ATOMIC_XOR | ATOMIC_FETCH,
            ),
            EXIT,
        ];
        check(valid).expect("valid");
    }

    #[test]
    fn lddw_errors() {
        let msg = reason_at(vec![EXIT, Insn::new(OP_LDDW, 0, 0, 0, 0)], 1);
        assert_eq!(msg, "lddw is missing its second slot");
        let insns = vec![Insn::new(OP_LDDW, 0, 1, 0, 0), Insn::default(), EXIT];
        assert_eq!(
            reason_at(insns, 0),
            "lddw with src 1 is not a plain constant; the loader must resolve it"
        );
    }

    #[test]
    fn jump_targets() {
        let msg = reason_at(vec![ja(5), EXIT], 0);
        assert_eq!(msg, "jump target 6 is outside the program of 2 slots");
        let msg = reason_at(vec![ja(-2), EXIT], 0);
        assert_eq!(msg, "jump target -1 is outside the program of 2 slots");
        let ja32 = Insn::new(CLASS_JMP32 | JMP_JA, 0, 0, 0, 100);
        assert_eq!(
            reason_at(vec![ja32, EXIT], 0),
            "jump target 101 is outside the program of 2 slots"
        );
        let [a, b] = lddw(0, 1);
        let msg = reason_at(vec![ja(1), a, b, EXIT], 0);
        assert_eq!(msg, "jump target 2 is the second half of an lddw");
        let jeq = Insn::new(CLASS_JMP | JMP_JEQ | SRC_K, 1, 0, 1, 0);
        let msg = reason_at(vec![jeq, a, b, EXIT], 0);
        assert_eq!(msg, "jump target 2 is the second half of an lddw");
    }

    #[test]
    fn calls() {
        let msg = reason_at(vec![call_local(9), EXIT], 0);
        assert_eq!(msg, "call target 10 is outside the program of 2 slots");
        let [a, b] = lddw(0, 1);
        let msg = reason_at(vec![call_local(2), EXIT, a, b, EXIT], 0);
        assert_eq!(msg, "call target 3 is the second half of an lddw");
        let kfunc = Insn::new(OP_CALL, 0, 2, 0, 1);
        assert_eq!(
            reason_at(vec![kfunc, EXIT], 0),
            "call with src 2 is not supported (0 calls a helper, 1 a local function)"
        );
        let helper = Insn::new(OP_CALL, 0, 0, 0, 6);
        assert_eq!(
            reason_at(vec![helper, EXIT], 0),
            "call to helper 6, which the function table does not have"
        );
        let negative = Insn::new(OP_CALL, 0, 0, 0, -1);
        assert_eq!(
            reason_at(vec![negative, EXIT], 0),
            "call to helper -1, which the function table does not have"
        );
    }

    #[test]
    fn stack_bounds() {
        let cases = [
            (
                Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 0, 10, 0, 0),
                "stack access of 8 bytes at r10+0 is outside the 512-byte frame",
            ),
            (
                Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 0, 10, -4, 0),
                "stack access of 8 bytes at r10-4 is outside the 512-byte frame",
            ),
            (
                Insn::new(CLASS_ST | MODE_MEM | SIZE_B, 10, 0, -513, 0),
                "stack access of 1 bytes at r10-513 is outside the 512-byte frame",
            ),
            (
                Insn::new(CLASS_STX | MODE_MEM | SIZE_H, 10, 1, 100, 0),
                "stack access of 2 bytes at r10+100 is outside the 512-byte frame",
            ),
            (
                Insn::new(CLASS_STX | MODE_ATOMIC | SIZE_W, 10, 1, -2, ATOMIC_ADD),
                "stack access of 4 bytes at r10-2 is outside the 512-byte frame",
            ),
        ];
        for (insn, msg) in cases {
            assert_eq!(reason_at(vec![insn, EXIT], 0), msg);
        }
        let edges = vec![
            Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 0, 10, -512, 0),
            Insn::new(CLASS_LDX | MODE_MEM | SIZE_B, 0, 10, -1, 0),
            EXIT,
        ];
        check(edges).expect("valid");
    }

    #[test]
    fn falling_off_the_end() {
        assert_eq!(
            reason_at(vec![mov(0, 0)], 0),
            "execution can run past the last slot"
        );
        let jeq = Insn::new(CLASS_JMP | JMP_JEQ | SRC_K, 0, 0, 1, 0);
        assert_eq!(
            reason_at(vec![jeq, EXIT, mov(0, 1)], 2),
            "execution can run past the last slot"
        );
        let [a, b] = lddw(0, 1);
        assert_eq!(
            reason_at(vec![a, b], 0),
            "execution can run past the last slot"
        );
        // A helper call returns, so it falls through.
        let call = Insn::new(OP_CALL, 0, 0, 0, 5);
        assert_eq!(
            reason_at(vec![call], 0),
            "execution can run past the last slot"
        );
        // Unreachable slots after the last exit may be anything valid.
        check(vec![EXIT, mov(0, 1)]).expect("valid");
        check(vec![ja(1), EXIT, ja(-2)]).expect("valid");
    }

    #[test]
    fn function_boundaries() {
        // main: call f; (falls into f)   f: exit
        let msg = reason_at(vec![call_local(0), EXIT], 0);
        assert_eq!(
            msg,
            "execution falls through into the function starting at slot 1"
        );
        // main jumps into f's body.
        let insns = vec![call_local(2), ja(2), EXIT, mov(0, 1), EXIT];
        assert_eq!(
            reason_at(insns, 1),
            "jump target 4 leaves the function starting at slot 0"
        );
        let info = check(vec![call_local(1), EXIT, mov(0, 1), EXIT]).expect("valid");
        assert_eq!(info.info().function_starts, vec![0, 2]);
    }

    #[test]
    fn call_depth() {
        // A chain main -> f1 -> ... -> fn: function k is `call +1; exit` at 2k.
        let chain = |n: usize| {
            let mut insns = Vec::new();
            for _ in 0..n {
                insns.push(call_local(1));
                insns.push(EXIT);
            }
            insns.push(EXIT);
            insns
        };
        // main + 7 callees = 8 frames.
        check(chain(CALL_DEPTH_MAX - 1)).expect("8 frames fit");
        let (pc, reason) = reject(chain(CALL_DEPTH_MAX));
        assert_eq!(
            reason.to_string(),
            "call chain reaches 9 frames, limit is 8"
        );
        // Function k starts at 2k; the eighth function's call makes the ninth frame.
        assert_eq!(pc, 2 * (CALL_DEPTH_MAX as u32 - 1));
        // Recursion is left to the run-time limit.
        check(vec![call_local(1), EXIT, call_local(-1), EXIT]).expect("recursion is allowed");
    }

    #[test]
    fn program_info() {
        let [a, b] = lddw(3, 7);
        let insns = vec![
            a,
            b,
            Insn::new(OP_CALL, 0, 0, 0, 5),
            Insn::new(OP_CALL, 0, 0, 0, 5),
            Insn::new(OP_CALLX, 3, 0, 0, 0),
            call_local(1),
            EXIT,
            EXIT,
        ];
        let v = check(insns).expect("valid");
        let info = v.info();
        assert_eq!(info.lddw_tails, vec![1]);
        assert_eq!(info.helpers_called, vec![5]);
        assert!(info.uses_callx);
        assert_eq!(info.function_starts, vec![0, 7]);
    }
}
