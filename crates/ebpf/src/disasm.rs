//! Disassembler into the text syntax [`crate::asm`] reads (the bpf_conformance `.data`
//! syntax).
//!
//! Invariant: for any slots, `assemble(&disassemble(slots)) == slots`. A slot is printed
//! as a mnemonic only when that text encodes it exactly (every field the syntax cannot
//! express is zero, and the opcode is one RFC 9669 defines); anything else prints as
//! `.insn 0x<slot as little-endian u64>`, which the assembler emits verbatim. Nothing
//! here panics, whatever the slots hold.

use std::fmt::Write as _;

use crate::isa::*;

/// Disassembles slot `pc` of `insns` (reading the second slot of an `lddw`), e.g.
/// `"add %r1, 2"`. Never panics, whatever the slots hold.
pub fn format_insn(insns: &[Insn], pc: usize) -> String {
    match insns.get(pc) {
        Some(i) => format_known(i, insns.get(pc + 1)).unwrap_or_else(|| raw(i)),
        None => format!("<pc {pc} out of range>"),
    }
}

/// Disassembles a whole program, one line per instruction: `<pc>: <insn>`, with the
/// slot after an `lddw` skipped, a `func_<pc>:` label before each local call target and
/// the absolute target of each jump in a comment. The output assembles back to `insns`.
pub fn disassemble(insns: &[Insn]) -> String {
    let function_starts = local_call_targets(insns);
    let mut out = String::new();
    let mut pc = 0;
    while pc < insns.len() {
        if function_starts.binary_search(&pc).is_ok() {
            let _ = writeln!(out, "func_{pc}:");
        }
        let text = format_insn(insns, pc);
        let _ = write!(out, "{pc:>5}: {text}");
        if let Some(target) = jump_target(&insns[pc], pc) {
            let _ = write!(out, "  # -> {target}");
        }
        out.push('\n');
        pc += slots_of(insns, pc);
    }
    out
}

/// Slots the instruction at `pc` takes as printed: 2 for an `lddw` printed as such.
fn slots_of(insns: &[Insn], pc: usize) -> usize {
    match insns.get(pc) {
        Some(i) if i.opc == OP_LDDW && format_lddw(i, insns.get(pc + 1)).is_some() => 2,
        _ => 1,
    }
}

/// Slots that `call local` instructions target, sorted and deduplicated.
fn local_call_targets(insns: &[Insn]) -> Vec<usize> {
    let mut v: Vec<usize> = insns
        .iter()
        .enumerate()
        .filter(|(_, i)| i.opc == OP_CALL && i.src == CALL_SRC_LOCAL)
        .filter_map(|(pc, i)| relative(pc, i64::from(i.imm)))
        .filter(|&t| t < insns.len())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The absolute target of a jump or local call at `pc`, if it has one in `usize`.
fn jump_target(i: &Insn, pc: usize) -> Option<usize> {
    let class = i.class();
    if class != CLASS_JMP && class != CLASS_JMP32 {
        return None;
    }
    match i.opc & 0xf0 {
        JMP_EXIT => None,
        JMP_CALL if i.opc == OP_CALL && i.src == CALL_SRC_LOCAL => relative(pc, i64::from(i.imm)),
        JMP_CALL => None,
        JMP_JA if class == CLASS_JMP32 => relative(pc, i64::from(i.imm)),
        _ => relative(pc, i64::from(i.off)),
    }
}

fn relative(pc: usize, off: i64) -> Option<usize> {
    usize::try_from(i64::try_from(pc).ok()?.checked_add(1)?.checked_add(off)?).ok()
}

/// The `.insn` form: the slot's 8 bytes as a little-endian u64.
fn raw(i: &Insn) -> String {
    format!(".insn {:#018x}", u64::from_le_bytes(i.encode()))
}

/// The mnemonic form of `i`, or `None` if no mnemonic encodes it exactly.
fn format_known(i: &Insn, next: Option<&Insn>) -> Option<String> {
    if i.dst >= REG_COUNT || i.src >= REG_COUNT {
        return None;
    }
    match i.class() {
        CLASS_ALU | CLASS_ALU64 => format_alu(i),
        CLASS_JMP | CLASS_JMP32 => format_jump(i),
        CLASS_LD => format_lddw(i, next),
        CLASS_LDX => format_load(i),
        CLASS_ST => format_store_imm(i),
        _ => format_store_reg(i),
    }
}

/// Immediates print in decimal when short, else in signed hex.
fn imm(v: i64) -> String {
    if (-0xffff..=0xffff).contains(&v) {
        v.to_string()
    } else if v < 0 {
        format!("-{:#x}", v.unsigned_abs())
    } else {
        format!("{v:#x}")
    }
}

fn offset(off: i64) -> String {
    if off < 0 {
        off.to_string()
    } else {
        format!("+{off}")
    }
}

fn mem(reg: u8, off: i16) -> String {
    match off {
        0 => format!("[%r{reg}]"),
        o if o < 0 => format!("[%r{reg}{o}]"),
        o => format!("[%r{reg}+{o}]"),
    }
}

/// Arithmetic (RFC 9669 §4): `op dst, src|imm`, `neg`, `movsx`, byte swaps.
fn format_alu(i: &Insn) -> Option<String> {
    let is64 = i.class() == CLASS_ALU64;
    let suffix = if is64 { "" } else { "32" };
    let x = i.opc & SRC_X != 0;
    let op = i.opc & 0xf0;
    if op == ALU_END {
        return format_end(i, is64, x);
    }
    if op == ALU_NEG {
        let canonical = !x && i.src == 0 && i.off == 0 && i.imm == 0;
        return canonical.then(|| format!("neg{suffix} %r{}", i.dst));
    }
    if op == ALU_MOV && x && i.off != 0 {
        let ok = matches!((i.off, is64), (8 | 16, _) | (32, true)) && i.imm == 0;
        let to = if is64 { 64 } else { 32 };
        return ok.then(|| format!("movsx{}{to} %r{}, %r{}", i.off, i.dst, i.src));
    }
    let name = match (op, i.off) {
        (ALU_ADD, 0) => "add",
        (ALU_SUB, 0) => "sub",
        (ALU_MUL, 0) => "mul",
        (ALU_DIV, 0) => "div",
        (ALU_DIV, 1) => "sdiv",
        (ALU_OR, 0) => "or",
        (ALU_AND, 0) => "and",
        (ALU_LSH, 0) => "lsh",
        (ALU_RSH, 0) => "rsh",
        (ALU_MOD, 0) => "mod",
        (ALU_MOD, 1) => "smod",
        (ALU_XOR, 0) => "xor",
        (ALU_MOV, 0) => "mov",
        (ALU_ARSH, 0) => "arsh",
        _ => return None,
    };
    let source = source(i, x)?;
    Some(format!("{name}{suffix} %r{}, {source}", i.dst))
}

/// The register-or-immediate operand: the unused field must be zero.
fn source(i: &Insn, x: bool) -> Option<String> {
    match x {
        true if i.imm == 0 => Some(format!("%r{}", i.src)),
        false if i.src == 0 => Some(imm(i64::from(i.imm))),
        _ => None,
    }
}

/// Byte swaps (RFC 9669 §4.2).
fn format_end(i: &Insn, is64: bool, x: bool) -> Option<String> {
    if i.src != 0 || i.off != 0 || !matches!(i.imm, 16 | 32 | 64) {
        return None;
    }
    let name = match (is64, x) {
        (false, false) => "le",
        (false, true) => "be",
        (true, false) => "bswap",
        (true, true) => return None,
    };
    Some(format!("{name}{} %r{}", i.imm, i.dst))
}

/// Jumps, calls and exit (RFC 9669 §4.3).
fn format_jump(i: &Insn) -> Option<String> {
    let is32 = i.class() == CLASS_JMP32;
    let x = i.opc & SRC_X != 0;
    let op = i.opc & 0xf0;
    match op {
        JMP_EXIT => {
            let canonical = !is32 && !x && i.dst == 0 && i.src == 0 && i.off == 0 && i.imm == 0;
            return canonical.then(|| "exit".to_string());
        }
        JMP_CALL => return format_call(i, is32, x),
        JMP_JA => {
            let canonical = !x && i.dst == 0 && i.src == 0;
            return match is32 {
                false if canonical && i.imm == 0 => {
                    Some(format!("ja {}", offset(i64::from(i.off))))
                }
                true if canonical && i.off == 0 => {
                    Some(format!("ja32 {}", offset(i64::from(i.imm))))
                }
                _ => None,
            };
        }
        _ => {}
    }
    let name = match op {
        JMP_JEQ => "jeq",
        JMP_JGT => "jgt",
        JMP_JGE => "jge",
        JMP_JSET => "jset",
        JMP_JNE => "jne",
        JMP_JSGT => "jsgt",
        JMP_JSGE => "jsge",
        JMP_JLT => "jlt",
        JMP_JLE => "jle",
        JMP_JSLT => "jslt",
        JMP_JSLE => "jsle",
        _ => return None,
    };
    let suffix = if is32 { "32" } else { "" };
    let source = source(i, x)?;
    Some(format!(
        "{name}{suffix} %r{}, {source}, {}",
        i.dst,
        offset(i64::from(i.off))
    ))
}

fn format_call(i: &Insn, is32: bool, x: bool) -> Option<String> {
    if is32 || i.off != 0 {
        return None;
    }
    match (x, i.src) {
        (true, 0) if i.imm == 0 => Some(format!("call %r{}", i.dst)),
        (false, 0) if i.dst == 0 => Some(format!("call {}", imm(i64::from(i.imm)))),
        (false, CALL_SRC_LOCAL) if i.dst == 0 => {
            Some(format!("call local {}", offset(i64::from(i.imm))))
        }
        _ => None,
    }
}

/// `lddw` (RFC 9669 §5.4): only the plain 64-bit immediate form (src 0) has a mnemonic;
/// its second slot must be all zero but the high half of the value.
fn format_lddw(i: &Insn, next: Option<&Insn>) -> Option<String> {
    let next = next?;
    let canonical = i.opc == OP_LDDW && i.src == 0 && i.off == 0;
    let tail_canonical = next.opc == 0 && next.dst == 0 && next.src == 0 && next.off == 0;
    if !canonical || !tail_canonical {
        return None;
    }
    let v = u64::from(i.imm as u32) | (u64::from(next.imm as u32) << 32);
    Some(format!("lddw %r{}, {v:#x}", i.dst))
}

fn size_name(opc: u8) -> &'static str {
    match opc & 0x18 {
        SIZE_W => "w",
        SIZE_H => "h",
        SIZE_B => "b",
        _ => "dw",
    }
}

/// `ldx` and the sign-extending `ldxs` (RFC 9669 §5.1, §5.2).
fn format_load(i: &Insn) -> Option<String> {
    if i.imm != 0 {
        return None;
    }
    let size = size_name(i.opc);
    let name = match i.opc & 0xe0 {
        MODE_MEM => format!("ldx{size}"),
        MODE_MEMSX if size != "dw" => format!("ldxs{size}"),
        _ => return None,
    };
    Some(format!("{name} %r{}, {}", i.dst, mem(i.src, i.off)))
}

fn format_store_imm(i: &Insn) -> Option<String> {
    if i.opc & 0xe0 != MODE_MEM || i.src != 0 {
        return None;
    }
    let size = size_name(i.opc);
    Some(format!(
        "st{size} {}, {}",
        mem(i.dst, i.off),
        imm(i64::from(i.imm))
    ))
}

/// `stx` and atomics (RFC 9669 §5.1, §5.3).
fn format_store_reg(i: &Insn) -> Option<String> {
    let size = size_name(i.opc);
    let target = mem(i.dst, i.off);
    match i.opc & 0xe0 {
        MODE_MEM if i.imm == 0 => Some(format!("stx{size} {target}, %r{}", i.src)),
        MODE_ATOMIC if size == "w" || size == "dw" => {
            let suffix = if size == "w" { "32" } else { "" };
            let name = match i.imm {
                ATOMIC_ADD => "add",
                ATOMIC_OR => "or",
                ATOMIC_AND => "and",
                ATOMIC_XOR => "xor",
                x if x == ATOMIC_ADD | ATOMIC_FETCH => "fetch add",
                x if x == ATOMIC_OR | ATOMIC_FETCH => "fetch or",
                x if x == ATOMIC_AND | ATOMIC_FETCH => "fetch and",
                x if x == ATOMIC_XOR | ATOMIC_FETCH => "fetch xor",
                ATOMIC_XCHG => "xchg",
                ATOMIC_CMPXCHG => "cmpxchg",
                _ => return None,
            };
            Some(format!("lock {name}{suffix} {target}, %r{}", i.src))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    #[test]
    fn formats() {
        let p =
            assemble("lddw %r1, 0x1122334455667788\njne %r1, -1, -3\ncall local -4\nexit").unwrap();
        assert_eq!(format_insn(&p, 0), "lddw %r1, 0x1122334455667788");
        assert_eq!(format_insn(&p, 2), "jne %r1, -1, -3");
        assert_eq!(format_insn(&p, 3), "call local -4");
        assert_eq!(format_insn(&p, 9), "<pc 9 out of range>");
        // A lone lddw head (no second slot) and an undefined opcode print raw.
        assert_eq!(format_insn(&p[..1], 0), ".insn 0x5566778800000118");
        assert_eq!(
            format_insn(&[Insn::new(0xff, 0, 0, 0, 0)], 0),
            ".insn 0x00000000000000ff"
        );
        let text = disassemble(&p);
        assert!(text.contains("func_0:\n    0: lddw"), "{text}");
        assert!(text.contains("    2: jne %r1, -1, -3  # -> 0\n"), "{text}");
    }

    /// Every single slot, with varied fields, survives disassembly and reassembly.
    #[test]
    fn every_opcode_round_trips() {
        let fields = [
            (0u8, 0u8, 0i16, 0i32),
            (1, 2, -8, 16),
            (10, 10, 1, 0xf1),
            (15, 11, 32, -1),
        ];
        for opc in 0..=255u8 {
            for &(dst, src, off, imm) in &fields {
                let i = [Insn::new(opc, dst, src, off, imm)];
                let text = disassemble(&i);
                assert_eq!(assemble(&text).as_deref(), Ok(&i[..]), "{text}");
            }
        }
    }
}
