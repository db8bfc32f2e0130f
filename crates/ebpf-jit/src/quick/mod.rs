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
//! asks for counts (or [`QuickProgram::prepare_counting`]).
//!
//! Layout: `x64` (the instruction encoder), `emit` (the translation).

mod emit;
mod x64;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cranelift_codegen::settings;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};

use csx_ebpf::engine::{Engine, RunMemory, RunOptions, RunOutcome};
use csx_ebpf::helper::HelperHost;
use csx_ebpf::memory::MemoryMap;
use csx_ebpf::program::VerifiedProgram;

use crate::code_memory::{compiled_fn_signature, CodeMemory};
use crate::JitError;
use emit::EmitError;

/// A verified program compiled by the quick tier.
pub struct QuickProgram {
    program: Arc<VerifiedProgram>,
    code: CodeMemory,
    compile_time: Duration,
    /// The variant that counts executed blocks, compiled by the first run that asks
    /// for counts.
    counted: OnceLock<Result<CodeMemory, JitError>>,
}

impl std::fmt::Debug for QuickProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuickProgram")
            .field("program", &self.program.name())
            .field("code", &self.code)
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl QuickProgram {
    /// Compiles `program` for the host (x86-64).
    pub fn compile(program: Arc<VerifiedProgram>) -> Result<QuickProgram, JitError> {
        let started = Instant::now();
        let code = build(&program, false)?;
        Ok(QuickProgram {
            program,
            code,
            compile_time: started.elapsed(),
            counted: OnceLock::new(),
        })
    }

    /// Compiles the variant that counts executed blocks now, rather than on the first
    /// run that asks for counts (a device that always counts calls this at activation).
    pub fn prepare_counting(&self) -> Result<(), JitError> {
        self.counted_code().map(|_| ())
    }

    fn counted_code(&self) -> Result<&CodeMemory, JitError> {
        self.counted
            .get_or_init(|| build(&self.program, true))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Wall-clock time [`QuickProgram::compile`] took.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Bytes of machine code generated.
    pub fn code_size(&self) -> usize {
        self.code.code_bytes()
    }
}

/// Emits and places `program`'s code; `counting`: the variant with block counters.
fn build(program: &VerifiedProgram, counting: bool) -> Result<CodeMemory, JitError> {
    let name = program.name().to_string();
    let blocks = counting.then(|| program.blocks());
    let emitted =
        emit::emit_program(program.insns(), program.entry(), blocks).map_err(|e| match e {
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
        })?;
    place(&emitted.code).map_err(|message| JitError::Codegen {
        program: name.clone(),
        message,
    })
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
        .define_function_bytes(id, 16, code, &[])
        .map_err(|e| e.to_string())?;
    CodeMemory::new(module, id, code.len())
}

impl Engine for QuickProgram {
    fn program(&self) -> &VerifiedProgram {
        &self.program
    }

    fn run(
        &self,
        mem: &mut MemoryMap<'_>,
        args: [u64; 5],
        opts: &RunOptions<'_>,
        host: &mut dyn HelperHost,
    ) -> RunOutcome {
        let code = match opts.counts {
            None => &self.code,
            Some(counts) => {
                assert_eq!(
                    counts.len(),
                    self.program.blocks().len(),
                    "one counter per block of the program"
                );
                match self.counted_code() {
                    Ok(code) => code,
                    // The uncounted variant compiled, so this is a bug; the run still
                    // runs, and reports it by leaving the counters untouched.
                    Err(_) => {
                        let uncounted = RunOptions {
                            counts: None,
                            ..*opts
                        };
                        return self.run(mem, args, &uncounted, host);
                    }
                }
            }
        };
        let mut run_mem = RunMemory::new(&self.program);
        let functions = self.program.functions();
        run_mem.with_mapped(&self.program, mem, |mem, fp| {
            crate::runtime::execute(code, functions, mem, fp, args, opts, host)
        })
    }
}

#[cfg(test)]
mod tests;
