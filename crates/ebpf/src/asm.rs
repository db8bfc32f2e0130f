//! Assembler for the text syntax of the bpf_conformance `.data` files, used by tests and
//! vectors to write programs by hand. [`crate::disasm`] prints the same syntax.
//!
//! # Syntax
//! One instruction per line; `#` starts a comment; blank lines are ignored.
//!
//! ```text
//! loop:                         # a label names the next instruction's slot
//! mov %r0, 0                    # ALU64: add sub mul div sdiv mod smod or and xor
//! add32 %r1, %r2                #        lsh rsh arsh mov neg; `32` suffix = ALU32
//! movsx832 %r0, %r1             # sign-extending mov: movsx{8,16}32, movsx{8,16,32}64
//! be16 %r0                      # le16/32/64, be16/32/64, bswap16/32/64 (or swap16..)
//! lddw %r1, 0x1122334455667788  # 64-bit immediate, two slots
//! ldxdw %r2, [%r10-8]           # ldx{b,h,w,dw}, ldxs{b,h,w} (sign-extending)
//! stw [%r1+4], 7                # st{b,h,w,dw} [mem], imm
//! stxw [%r1+4], %r2             # stx{b,h,w,dw} [mem], reg
//! lock fetch add32 [%r10-8], %r1  # lock [fetch] {add,or,and,xor}[32], xchg[32], cmpxchg[32]
//! jne %r1, 5, loop              # jeq jgt jge jset jne jsgt jsge jlt jle jslt jsle [32]
//! ja +3                         # target: a label, or an offset +N / -N from the next slot
//! ja32 -2                       # ja with a 32-bit offset (in imm)
//! call 5                        # helper by id
//! call %r2                      # callx: helper id in a register
//! call local func               # local function (a label, or +N / -N)
//! exit
//! .insn 0x0000000000000095      # one raw slot, as the little-endian u64 of its 8 bytes
//! ```
//!
//! Numbers are decimal or `0x` hex, with an optional sign. A 32-bit immediate may be
//! written as any value in `-2^31 ..= 2^32 - 1`; it is stored as its low 32 bits (so
//! `mov %r0, 0xffffffff` stores -1, which the 64-bit `mov` sign-extends, RFC 9669 §4).
//! A label that is all digits (`12:`, as `disassemble` prints before each line) is a pc
//! annotation and is ignored. For compatibility with the conformance suite, a jump to the
//! undefined label `exit` goes to the first `exit` instruction.

use std::collections::HashMap;

use crate::isa::*;

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AsmProblem {
    #[error("unknown mnemonic `{mnemonic}`")]
    UnknownMnemonic { mnemonic: String },
    #[error("`{mnemonic}` takes {expected} operands, found {found}")]
    OperandCount {
        mnemonic: String,
        expected: usize,
        found: usize,
    },
    #[error("operand `{operand}` should be {expected}")]
    BadOperand {
        operand: String,
        expected: &'static str,
    },
    #[error("value {value} is out of range {min}..={max}")]
    OutOfRange { value: i128, min: i128, max: i128 },
    #[error("label `{name}` is already defined on line {first_line}")]
    DuplicateLabel { name: String, first_line: usize },
    #[error("label `{name}` is not defined")]
    UnknownLabel { name: String },
    #[error("`{name}` is not a valid label name")]
    BadLabel { name: String },
    #[error("program has {slots} instruction slots, limit is {limit}")]
    TooLong { slots: usize, limit: usize },
}

/// An assembly error, with the 1-based line it was found on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("line {line}: {problem} in `{text}`")]
pub struct AsmError {
    /// 1-based line number in the source given to [`assemble`].
    pub line: usize,
    /// The line, trimmed.
    pub text: String,
    pub problem: AsmProblem,
}

/// Assembles `src` (the body of a `-- asm` section) into instruction slots.
pub fn assemble(src: &str) -> Result<Vec<Insn>, AsmError> {
    // First pass: parse every line and give each instruction its slot, so that labels
    // defined after their use are known when the second pass encodes jumps.
    let mut lines: Vec<Line<'_>> = Vec::new();
    let mut labels: HashMap<&str, (u32, usize)> = HashMap::new();
    let mut pc: usize = 0;
    let mut first_exit: Option<u32> = None;
    for (idx, raw) in src.lines().enumerate() {
        let line_no = idx + 1;
        let err = |problem| AsmError {
            line: line_no,
            text: raw.trim().to_string(),
            problem,
        };
        let mut rest = raw.split('#').next().unwrap_or("").trim();
        while let Some((name, after)) = split_label(rest) {
            if !is_label_name(name) {
                return Err(err(AsmProblem::BadLabel {
                    name: name.to_string(),
                }));
            }
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                if let Some(&(_, first_line)) = labels.get(name) {
                    return Err(err(AsmProblem::DuplicateLabel {
                        name: name.to_string(),
                        first_line,
                    }));
                }
                labels.insert(name, (slot_u32(pc), line_no));
            }
            rest = after.trim();
        }
        if rest.is_empty() {
            continue;
        }
        let stmt = parse_statement(rest).map_err(err)?;
        if matches!(stmt.form, Form::Exit) && first_exit.is_none() {
            first_exit = Some(slot_u32(pc));
        }
        let slots = if matches!(stmt.form, Form::Lddw) {
            2
        } else {
            1
        };
        lines.push(Line {
            line_no,
            text: raw.trim(),
            pc,
            stmt,
        });
        pc += slots;
        if pc > crate::limits::PROGRAM_INSN_COUNT_MAX {
            return Err(err(AsmProblem::TooLong {
                slots: pc,
                limit: crate::limits::PROGRAM_INSN_COUNT_MAX,
            }));
        }
    }

    // Second pass: resolve targets and encode.
    let resolve = |name: &str| -> Option<u32> {
        match labels.get(name) {
            Some(&(slot, _)) => Some(slot),
            None if name == "exit" => first_exit,
            None => None,
        }
    };
    let mut out = Vec::with_capacity(pc);
    for l in &lines {
        encode(&l.stmt, l.pc, &resolve, &mut out).map_err(|problem| AsmError {
            line: l.line_no,
            text: l.text.to_string(),
            problem,
        })?;
    }
    debug_assert_eq!(out.len(), pc);
    Ok(out)
}

/// Instruction indexes are bounded by `PROGRAM_INSN_COUNT_MAX`, far below `u32::MAX`.
fn slot_u32(pc: usize) -> u32 {
    u32::try_from(pc).expect("the instruction count is checked against PROGRAM_INSN_COUNT_MAX")
}

/// One instruction line after the first pass.
struct Line<'a> {
    line_no: usize,
    text: &'a str,
    pc: usize,
    stmt: Statement,
}

/// A parsed instruction: its form and operands, targets not yet resolved.
struct Statement {
    form: Form,
    ops: Vec<Operand>,
}

/// How an instruction is laid out, with the opcode bits fixed by its mnemonic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `op dst, src|imm`; `off` distinguishes sdiv/smod.
    Alu {
        opc: u8,
        off: i16,
    },
    /// `neg dst`.
    Neg {
        opc: u8,
    },
    /// `movsx dst, src` (register only).
    MovSx {
        opc: u8,
        off: i16,
    },
    /// `le16 dst` and friends: width in imm.
    End {
        opc: u8,
        width: i32,
    },
    Lddw,
    /// `ldx dst, [src+off]`.
    Load {
        opc: u8,
    },
    /// `st [dst+off], imm`.
    Store {
        opc: u8,
    },
    /// `stx [dst+off], src`.
    StoreReg {
        opc: u8,
    },
    /// `lock op [dst+off], src`.
    Atomic {
        opc: u8,
        imm: i32,
    },
    /// `ja target` (16-bit offset).
    Ja,
    /// `ja32 target` (32-bit offset in imm).
    Ja32,
    /// `jxx dst, src|imm, target`.
    Jump {
        opc: u8,
    },
    /// `call id`, `call %reg`, `call local target`.
    Call {
        local: bool,
    },
    Exit,
    /// `.insn 0x...`: a raw slot.
    Raw,
}

/// An operand as written.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Operand {
    Reg(u8),
    Num(i128),
    /// `[%rN+off]`.
    Mem {
        reg: u8,
        off: i128,
    },
    /// A label.
    Name(String),
}

/// Splits a leading `label:` off `s`.
fn split_label(s: &str) -> Option<(&str, &str)> {
    let colon = s.find(':')?;
    let name = s[..colon].trim();
    // A colon inside an operand list is not a label (none of our operands use one).
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains(',') {
        return None;
    }
    Some((name, &s[colon + 1..]))
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Parses one instruction (without label or comment).
fn parse_statement(text: &str) -> Result<Statement, AsmProblem> {
    let (mnemonic, rest) = split_word(text);
    let (form, rest, name) = if mnemonic == "lock" {
        let (word, after) = split_word(rest);
        let (word, after, fetch) = if word == "fetch" {
            let (w, a) = split_word(after);
            (w, a, true)
        } else {
            (word, after, false)
        };
        let form = atomic_form(word, fetch).ok_or_else(|| AsmProblem::UnknownMnemonic {
            mnemonic: format!("lock {}{word}", if fetch { "fetch " } else { "" }),
        })?;
        (form, after, format!("lock {word}"))
    } else if mnemonic == "call" {
        let (word, after) = split_word(rest);
        if word == "local" {
            (Form::Call { local: true }, after, "call local".to_string())
        } else {
            (Form::Call { local: false }, rest, "call".to_string())
        }
    } else {
        let form = mnemonic_form(mnemonic).ok_or_else(|| AsmProblem::UnknownMnemonic {
            mnemonic: mnemonic.to_string(),
        })?;
        (form, rest, mnemonic.to_string())
    };
    let ops = parse_operands(rest)?;
    let expected = operand_count(form);
    if ops.len() != expected {
        return Err(AsmProblem::OperandCount {
            mnemonic: name,
            expected,
            found: ops.len(),
        });
    }
    Ok(Statement { form, ops })
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

fn operand_count(form: Form) -> usize {
    match form {
        Form::Exit => 0,
        Form::Neg { .. } | Form::End { .. } | Form::Ja | Form::Ja32 | Form::Call { .. } => 1,
        Form::Raw => 1,
        Form::Jump { .. } => 3,
        _ => 2,
    }
}

/// Splits an operand list on commas and parses each operand.
fn parse_operands(s: &str) -> Result<Vec<Operand>, AsmProblem> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',').map(|o| parse_operand(o.trim())).collect()
}

fn parse_operand(s: &str) -> Result<Operand, AsmProblem> {
    if s.starts_with('%') {
        return parse_reg(s).map(Operand::Reg);
    }
    if let Some(inner) = s.strip_prefix('[') {
        let bad = || AsmProblem::BadOperand {
            operand: s.to_string(),
            expected: "[%rN+offset]",
        };
        let inner = inner.strip_suffix(']').ok_or_else(bad)?.trim();
        let split = inner.find(['+', '-']);
        let (reg, off) = match split {
            Some(i) => (
                inner[..i].trim(),
                parse_number(&inner[i..]).ok_or_else(bad)?,
            ),
            None => (inner, 0),
        };
        let reg = parse_reg(reg).map_err(|_| bad())?;
        return Ok(Operand::Mem { reg, off });
    }
    if let Some(n) = parse_number(s) {
        return Ok(Operand::Num(n));
    }
    if is_label_name(s) {
        return Ok(Operand::Name(s.to_string()));
    }
    Err(AsmProblem::BadOperand {
        operand: s.to_string(),
        expected: "a register, number or label",
    })
}

fn parse_reg(s: &str) -> Result<u8, AsmProblem> {
    s.strip_prefix("%r")
        .filter(|d| !d.is_empty() && d.len() <= 2 && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u8>().ok())
        .filter(|&r| r < REG_COUNT)
        .ok_or_else(|| AsmProblem::BadOperand {
            operand: s.to_string(),
            expected: "%r0..%r10",
        })
}

/// Parses a decimal or `0x` hex number with an optional sign.
fn parse_number(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, digits) = match s.as_bytes().first()? {
        b'-' => (true, s[1..].trim_start()),
        b'+' => (false, s[1..].trim_start()),
        _ => (false, s),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) if !hex.is_empty() && hex.len() <= 32 => i128::from_str_radix(hex, 16).ok()?,
        Some(_) => return None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse::<i128>().ok()?
        }
        None => return None,
    };
    Some(if neg { -magnitude } else { magnitude })
}

/// The `32` suffix selects the 32-bit class; none (or `64`) the 64-bit one.
fn split_width(m: &str) -> (&str, bool) {
    if let Some(base) = m.strip_suffix("32") {
        (base, true)
    } else {
        (m.strip_suffix("64").unwrap_or(m), false)
    }
}

fn mnemonic_form(m: &str) -> Option<Form> {
    match m {
        "lddw" => return Some(Form::Lddw),
        "exit" => return Some(Form::Exit),
        "ja" => return Some(Form::Ja),
        "ja32" => return Some(Form::Ja32),
        "callx" => return Some(Form::Call { local: false }),
        ".insn" => return Some(Form::Raw),
        _ => {}
    }
    if let Some(f) = endian_form(m)
        .or_else(|| memory_form(m))
        .or_else(|| movsx_form(m))
    {
        return Some(f);
    }
    let (base, is32) = split_width(m);
    if let Some(op) = jump_op(base) {
        let class = if is32 { CLASS_JMP32 } else { CLASS_JMP };
        return Some(Form::Jump { opc: class | op });
    }
    let class = if is32 { CLASS_ALU } else { CLASS_ALU64 };
    if base == "neg" {
        return Some(Form::Neg {
            opc: class | ALU_NEG,
        });
    }
    let (op, off) = alu_op(base)?;
    Some(Form::Alu {
        opc: class | op,
        off,
    })
}

fn alu_op(base: &str) -> Option<(u8, i16)> {
    Some(match base {
        "add" => (ALU_ADD, 0),
        "sub" => (ALU_SUB, 0),
        "mul" => (ALU_MUL, 0),
        "div" => (ALU_DIV, 0),
        "sdiv" => (ALU_DIV, 1),
        "or" => (ALU_OR, 0),
        "and" => (ALU_AND, 0),
        "lsh" => (ALU_LSH, 0),
        "rsh" => (ALU_RSH, 0),
        "mod" => (ALU_MOD, 0),
        "smod" => (ALU_MOD, 1),
        "xor" => (ALU_XOR, 0),
        "mov" => (ALU_MOV, 0),
        "arsh" => (ALU_ARSH, 0),
        _ => return None,
    })
}

fn jump_op(base: &str) -> Option<u8> {
    Some(match base {
        "jeq" => JMP_JEQ,
        "jgt" => JMP_JGT,
        "jge" => JMP_JGE,
        "jset" => JMP_JSET,
        "jne" => JMP_JNE,
        "jsgt" => JMP_JSGT,
        "jsge" => JMP_JSGE,
        "jlt" => JMP_JLT,
        "jle" => JMP_JLE,
        "jslt" => JMP_JSLT,
        "jsle" => JMP_JSLE,
        _ => return None,
    })
}

/// Byte swaps (RFC 9669 §4.2): `le`/`be` are class ALU with the source bit choosing the
/// target order; `bswap` is ALU64 with source bit 0.
fn endian_form(m: &str) -> Option<Form> {
    let (opc, width) = if let Some(w) = m.strip_prefix("le") {
        (CLASS_ALU | ALU_END | SRC_K, w)
    } else if let Some(w) = m.strip_prefix("be") {
        (CLASS_ALU | ALU_END | SRC_X, w)
    } else if let Some(w) = m.strip_prefix("bswap").or_else(|| m.strip_prefix("swap")) {
        (CLASS_ALU64 | ALU_END | SRC_K, w)
    } else {
        return None;
    };
    let width = match width {
        "16" => 16,
        "32" => 32,
        "64" => 64,
        _ => return None,
    };
    Some(Form::End { opc, width })
}

/// `movsx{8,16}32` and `movsx{8,16,32}64` (RFC 9669 §4.1: MOVSX, offset = source width).
fn movsx_form(m: &str) -> Option<Form> {
    let (off, class) = match m.strip_prefix("movsx")? {
        "832" => (8, CLASS_ALU),
        "1632" => (16, CLASS_ALU),
        "864" => (8, CLASS_ALU64),
        "1664" => (16, CLASS_ALU64),
        "3264" => (32, CLASS_ALU64),
        _ => return None,
    };
    Some(Form::MovSx {
        opc: class | ALU_MOV | SRC_X,
        off,
    })
}

fn size_bits(s: &str) -> Option<u8> {
    Some(match s {
        "b" => SIZE_B,
        "h" => SIZE_H,
        "w" => SIZE_W,
        "dw" => SIZE_DW,
        _ => return None,
    })
}

fn memory_form(m: &str) -> Option<Form> {
    if let Some(sz) = m.strip_prefix("ldxs") {
        let size = size_bits(sz).filter(|&s| s != SIZE_DW)?;
        return Some(Form::Load {
            opc: CLASS_LDX | MODE_MEMSX | size,
        });
    }
    if let Some(sz) = m.strip_prefix("ldx") {
        return Some(Form::Load {
            opc: CLASS_LDX | MODE_MEM | size_bits(sz)?,
        });
    }
    if let Some(sz) = m.strip_prefix("stx") {
        return Some(Form::StoreReg {
            opc: CLASS_STX | MODE_MEM | size_bits(sz)?,
        });
    }
    if let Some(sz) = m.strip_prefix("st") {
        return Some(Form::Store {
            opc: CLASS_ST | MODE_MEM | size_bits(sz)?,
        });
    }
    None
}

/// `lock` operations (RFC 9669 §5.3): the `32` suffix selects a 4-byte access.
fn atomic_form(word: &str, fetch: bool) -> Option<Form> {
    let (base, is32) = split_width(word);
    let imm = match base {
        "add" => ATOMIC_ADD,
        "or" => ATOMIC_OR,
        "and" => ATOMIC_AND,
        "xor" => ATOMIC_XOR,
        "xchg" => ATOMIC_XCHG,
        "cmpxchg" => ATOMIC_CMPXCHG,
        _ => return None,
    };
    let imm = if fetch { imm | ATOMIC_FETCH } else { imm };
    let size = if is32 { SIZE_W } else { SIZE_DW };
    Some(Form::Atomic {
        opc: CLASS_STX | MODE_ATOMIC | size,
        imm,
    })
}

fn in_range(value: i128, min: i128, max: i128) -> Result<i128, AsmProblem> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(AsmProblem::OutOfRange { value, min, max })
    }
}

/// A 32-bit immediate, written signed or as its unsigned bit pattern.
fn imm32(value: i128) -> Result<i32, AsmProblem> {
    let v = in_range(value, i128::from(i32::MIN), i128::from(u32::MAX))?;
    Ok(v as u32 as i32)
}

fn off16(value: i128) -> Result<i16, AsmProblem> {
    Ok(in_range(value, i128::from(i16::MIN), i128::from(i16::MAX))? as i16)
}

fn reg_of(op: &Operand) -> Result<u8, AsmProblem> {
    match op {
        Operand::Reg(r) => Ok(*r),
        other => Err(bad(other, "a register")),
    }
}

fn num_of(op: &Operand) -> Result<i128, AsmProblem> {
    match op {
        Operand::Num(n) => Ok(*n),
        other => Err(bad(other, "a number")),
    }
}

fn mem_of(op: &Operand) -> Result<(u8, i16), AsmProblem> {
    match op {
        Operand::Mem { reg, off } => Ok((*reg, off16(*off)?)),
        other => Err(bad(other, "a memory operand [%rN+offset]")),
    }
}

fn bad(op: &Operand, expected: &'static str) -> AsmProblem {
    let operand = match op {
        Operand::Reg(r) => format!("%r{r}"),
        Operand::Num(n) => n.to_string(),
        Operand::Mem { reg, off } => format!("[%r{reg}{off:+}]"),
        Operand::Name(s) => s.clone(),
    };
    AsmProblem::BadOperand { operand, expected }
}

/// The register-or-immediate second operand of ALU and jump instructions: the source
/// bit, the src register and the immediate.
fn source_of(op: &Operand) -> Result<(u8, u8, i32), AsmProblem> {
    match op {
        Operand::Reg(r) => Ok((SRC_X, *r, 0)),
        Operand::Num(n) => Ok((SRC_K, 0, imm32(*n)?)),
        other => Err(bad(other, "a register or number")),
    }
}

/// A jump target as an offset from the slot after `pc`.
fn target_of(
    op: &Operand,
    pc: usize,
    resolve: &dyn Fn(&str) -> Option<u32>,
) -> Result<i128, AsmProblem> {
    match op {
        Operand::Num(n) => Ok(*n),
        Operand::Name(name) => {
            let slot =
                resolve(name).ok_or_else(|| AsmProblem::UnknownLabel { name: name.clone() })?;
            Ok(i128::from(slot) - (pc as i128 + 1))
        }
        other => Err(bad(other, "a label or an offset +N / -N")),
    }
}

/// Encodes one statement at slot `pc`, appending its slots to `out`.
fn encode(
    stmt: &Statement,
    pc: usize,
    resolve: &dyn Fn(&str) -> Option<u32>,
    out: &mut Vec<Insn>,
) -> Result<(), AsmProblem> {
    let ops = &stmt.ops;
    let insn = match stmt.form {
        Form::Alu { opc, off } => {
            let (src_bit, src, imm) = source_of(&ops[1])?;
            Insn::new(opc | src_bit, reg_of(&ops[0])?, src, off, imm)
        }
        Form::Neg { opc } => Insn::new(opc, reg_of(&ops[0])?, 0, 0, 0),
        Form::MovSx { opc, off } => Insn::new(opc, reg_of(&ops[0])?, reg_of(&ops[1])?, off, 0),
        Form::End { opc, width } => Insn::new(opc, reg_of(&ops[0])?, 0, 0, width),
        Form::Lddw => {
            let v = in_range(num_of(&ops[1])?, i128::from(i64::MIN), i128::from(u64::MAX))?;
            let v = v as u64;
            out.push(Insn::new(OP_LDDW, reg_of(&ops[0])?, 0, 0, v as u32 as i32));
            Insn::new(0, 0, 0, 0, (v >> 32) as u32 as i32)
        }
        Form::Load { opc } => {
            let (src, off) = mem_of(&ops[1])?;
            Insn::new(opc, reg_of(&ops[0])?, src, off, 0)
        }
        Form::Store { opc } => {
            let (dst, off) = mem_of(&ops[0])?;
            Insn::new(opc, dst, 0, off, imm32(num_of(&ops[1])?)?)
        }
        Form::StoreReg { opc } => {
            let (dst, off) = mem_of(&ops[0])?;
            Insn::new(opc, dst, reg_of(&ops[1])?, off, 0)
        }
        Form::Atomic { opc, imm } => {
            let (dst, off) = mem_of(&ops[0])?;
            Insn::new(opc, dst, reg_of(&ops[1])?, off, imm)
        }
        Form::Ja => Insn::new(OP_JA, 0, 0, off16(target_of(&ops[0], pc, resolve)?)?, 0),
        Form::Ja32 => {
            let off = target_of(&ops[0], pc, resolve)?;
            let off = in_range(off, i128::from(i32::MIN), i128::from(i32::MAX))? as i32;
            Insn::new(CLASS_JMP32 | JMP_JA, 0, 0, 0, off)
        }
        Form::Jump { opc } => {
            let (src_bit, src, imm) = source_of(&ops[1])?;
            let off = off16(target_of(&ops[2], pc, resolve)?)?;
            Insn::new(opc | src_bit, reg_of(&ops[0])?, src, off, imm)
        }
        Form::Call { local } => encode_call(&ops[0], local, pc, resolve)?,
        Form::Exit => Insn::new(OP_EXIT, 0, 0, 0, 0),
        Form::Raw => {
            let v = in_range(num_of(&ops[0])?, 0, i128::from(u64::MAX))? as u64;
            Insn::decode(v.to_le_bytes())
        }
    };
    out.push(insn);
    Ok(())
}

/// `call`: a number is a helper id, a register is `callx`, a label (or `local +N`) is a
/// local function at `pc + 1 + imm`.
fn encode_call(
    op: &Operand,
    local: bool,
    pc: usize,
    resolve: &dyn Fn(&str) -> Option<u32>,
) -> Result<Insn, AsmProblem> {
    match op {
        Operand::Reg(r) if !local => Ok(Insn::new(OP_CALLX, *r, 0, 0, 0)),
        Operand::Num(n) if !local => Ok(Insn::new(OP_CALL, 0, 0, 0, imm32(*n)?)),
        Operand::Num(_) | Operand::Name(_) => {
            let off = target_of(op, pc, resolve)?;
            let off = in_range(off, i128::from(i32::MIN), i128::from(i32::MAX))? as i32;
            Ok(Insn::new(OP_CALL, 0, CALL_SRC_LOCAL, 0, off))
        }
        other => Err(bad(other, "a helper id, a register or a label")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(src: &str) -> Insn {
        let v = assemble(src).unwrap();
        assert_eq!(v.len(), 1, "{src}");
        v[0]
    }

    #[test]
    fn basic_forms() {
        assert_eq!(one("mov %r0, -1"), Insn::new(0xb7, 0, 0, 0, -1));
        assert_eq!(one("mov32 %r1, 0xffffffff"), Insn::new(0xb4, 1, 0, 0, -1));
        assert_eq!(one("add %r1, %r2"), Insn::new(0x0f, 1, 2, 0, 0));
        assert_eq!(one("sdiv32 %r1, 3"), Insn::new(0x34, 1, 0, 1, 3));
        assert_eq!(one("movsx1664 %r1, %r2"), Insn::new(0xbf, 1, 2, 16, 0));
        assert_eq!(one("be16 %r3"), Insn::new(0xdc, 3, 0, 0, 16));
        assert_eq!(one("bswap64 %r3"), Insn::new(0xd7, 3, 0, 0, 64));
        assert_eq!(one("ldxsh %r1, [%r10-2]"), Insn::new(0x89, 1, 10, -2, 0));
        assert_eq!(one("stw [%r1+4], 7"), Insn::new(0x62, 1, 0, 4, 7));
        assert_eq!(one("stxdw [%r1], %r2"), Insn::new(0x7b, 1, 2, 0, 0));
        assert_eq!(
            one("lock fetch add32 [%r10-8], %r1"),
            Insn::new(0xc3, 10, 1, -8, 1)
        );
        assert_eq!(
            one("lock cmpxchg [%r1+0], %r2"),
            Insn::new(0xdb, 1, 2, 0, 0xf1)
        );
        assert_eq!(one("call 5"), Insn::new(0x85, 0, 0, 0, 5));
        assert_eq!(one("call %r2"), Insn::new(0x8d, 2, 0, 0, 0));
        assert_eq!(one("call local -1"), Insn::new(0x85, 0, 1, 0, -1));
        assert_eq!(one("ja32 -2"), Insn::new(0x06, 0, 0, 0, -2));
        assert_eq!(one("jsle32 %r1, -3, +7"), Insn::new(0xd6, 1, 0, 7, -3));
        assert_eq!(one(".insn 0x0000000100000095"), Insn::new(0x95, 0, 0, 0, 1));
    }

    #[test]
    fn labels_and_lddw() {
        let src = "top:\n lddw %r1, 0x1122334455667788 # two slots\n jne %r1, 0, top\nexit";
        let v = assemble(src).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0], Insn::new(0x18, 1, 0, 0, 0x5566_7788));
        assert_eq!(v[1], Insn::new(0, 0, 0, 0, 0x1122_3344));
        assert_eq!(v[2].off, -3);
        // Forward reference and the conformance suite's implicit `exit` label.
        let v = assemble("ja exit\nja end\nexit\nend: exit").unwrap();
        assert_eq!((v[0].off, v[1].off), (1, 1));
    }

    #[test]
    fn errors_name_the_line() {
        let e = assemble("mov %r0, 1\nfrob %r1\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(e.text, "frob %r1");
        assert!(matches!(e.problem, AsmProblem::UnknownMnemonic { .. }));
        assert!(e.to_string().starts_with("line 2: unknown mnemonic `frob`"));
        let e = assemble("ja nowhere").unwrap_err();
        assert!(matches!(e.problem, AsmProblem::UnknownLabel { .. }));
        let e = assemble("a:\na:\nexit").unwrap_err();
        assert!(matches!(
            e.problem,
            AsmProblem::DuplicateLabel { first_line: 1, .. }
        ));
        let e = assemble("mov %r11, 1").unwrap_err();
        assert!(matches!(e.problem, AsmProblem::BadOperand { .. }));
        let e = assemble("mov %r1, 0x100000000").unwrap_err();
        assert!(matches!(e.problem, AsmProblem::OutOfRange { .. }));
        let e = assemble("ldxw %r1, [%r2+40000]").unwrap_err();
        assert!(matches!(e.problem, AsmProblem::OutOfRange { .. }));
        let e = assemble("exit %r0").unwrap_err();
        assert!(matches!(
            e.problem,
            AsmProblem::OperandCount {
                expected: 0,
                found: 1,
                ..
            }
        ));
    }
}
