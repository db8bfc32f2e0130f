//! Disassembler into the text syntax of the bpf_conformance `.data` files.
//! Being written (issue 2); the signature below is fixed, the body provisional.

use crate::isa::Insn;

/// Disassembles slot `pc` of `insns` (reading the second slot of an `lddw`), e.g.
/// `"add %r1, 2"`. Never panics, whatever the slots hold.
pub fn format_insn(insns: &[Insn], pc: usize) -> String {
    match insns.get(pc) {
        Some(i) => format!(
            "op {:#04x} dst r{} src r{} off {} imm {}",
            i.opc, i.dst, i.src, i.off, i.imm
        ),
        None => format!("<pc {pc} out of range>"),
    }
}
