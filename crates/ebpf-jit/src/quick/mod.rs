//! The quick tier: a baseline JIT for x86-64 that translates eBPF to machine code in one
//! pass, slot by slot, with no intermediate representation and no register allocation
//! (eBPF registers live in fixed host registers). It compiles a 4,000-instruction
//! program in well under a millisecond, where Cranelift takes tens of milliseconds, and
//! its code is several times faster than the interpreter, if slower than Cranelift's.
//!
//! It is a full engine ([`QuickProgram`]) and the first tier of
//! [`crate::TieredProgram`]. It shares everything but code generation with the Cranelift
//! tier: the context block and run set-up (`runtime::execute`), the helper trampoline,
//! the trap decoding and the executable memory (`code_memory`, code placed through a
//! `JITModule`). So it matches the interpreter in value, trap (kind and pc) and fuel by
//! the same rules (see `emit` for how each is kept).
//!
//! Block counting (`RunOptions::counts`): a second variant of the code with a counter
//! bump at each canonical leader (`emit`, "Counting"), compiled by the first run that
//! asks for counts (or `QuickProgram::prepare_counting`). Holding and running the code
//! is [`Compiled`]'s, shared with the Cranelift tier.
//!
//! Layout: `x64` (the instruction encoder), `emit` (the translation).

mod emit;
mod x64;

use cranelift_codegen::settings;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};

use csx_ebpf::program::VerifiedProgram;

use crate::code_memory::{compiled_fn_signature, CodeMemory};
use crate::compiled::{Backend, Compiled, Variant};
use crate::JitError;
use emit::EmitError;

/// A verified program compiled by the quick tier.
pub type QuickProgram = Compiled<Quick>;

/// The quick tier's code generator, the backend of [`QuickProgram`].
#[derive(Debug)]
pub enum Quick {}

impl Backend for Quick {
    const NAME: &'static str = "QuickProgram";

    /// The quick tier has no entry facts: `Fast` and `Plain` are the same code.
    fn build(program: &VerifiedProgram, variant: Variant) -> Result<CodeMemory, JitError> {
        build(program, variant == Variant::Counting)
    }
}

/// Emits and places `program`'s code; `counting`: the variant with block counters.
fn build(program: &VerifiedProgram, counting: bool) -> Result<CodeMemory, JitError> {
    let name = program.name().to_string();
    let blocks = counting.then(|| program.blocks());
    let globals = crate::translate::KnownRegion::of(program);
    let emitted = emit::emit_program(program.insns(), program.entry(), blocks, &globals).map_err(
        |e| match e {
            EmitError::Unsupported { pc, opcode } => JitError::UnsupportedInstruction {
                program: name.clone(),
                pc,
                opcode,
            },
            EmitError::BadTarget { pc, target } => JitError::BadJumpTarget {
                program: name.clone(),
                pc,
                target,
            },
        },
    )?;
    dump(&name, counting, &emitted.code);
    place(&emitted.code).map_err(|message| JitError::Codegen {
        program: name.clone(),
        message,
    })
}

/// With `CSX_QUICK_DUMP` set to a directory (read once per compile), writes the
/// emitted code to `DIR/NAME.quick.bin` (`NAME.quick-counting.bin` for the counting
/// variant), for reading beside `CSX_JIT_DISASM`'s
/// (`objdump -D -b binary -mi386:x86-64 FILE`). A failed write is ignored: the dump is a
/// reading aid, never part of compiling.
fn dump(name: &str, counting: bool, code: &[u8]) {
    let Some(dir) = std::env::var_os("CSX_QUICK_DUMP") else {
        return;
    };
    let file: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let variant = if counting { "quick-counting" } else { "quick" };
    let path = std::path::Path::new(&dir).join(format!("{file}.{variant}.bin"));
    let _ = std::fs::write(path, code);
}

/// Copies `code` into executable memory through a `JITModule`, as one function with
/// the compiled-function signature.
fn place(code: &[u8]) -> Result<CodeMemory, String> {
    let isa = cranelift_native::builder()
        .map_err(|m| m.to_string())?
        .finish(settings::Flags::new(settings::builder()))
        .map_err(|e| e.to_string())?;
    let mut module = JITModule::new(JITBuilder::with_isa(
        isa,
        cranelift_module::default_libcall_names(),
    ));
    let signature = compiled_fn_signature(module.isa().default_call_conv());
    let id = module
        .declare_function("ebpf_quick", Linkage::Local, &signature)
        .map_err(|e| e.to_string())?;
    module
        // 64-byte placement: the loop heads' alignment (`emit`) is then the same in
        // memory.
        .define_function_bytes(id, 64, code, &[])
        .map_err(|e| e.to_string())?;
    CodeMemory::new(module, &[(id, 0)], code.len())
}

#[cfg(test)]
mod tests;
