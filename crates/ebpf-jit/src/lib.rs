//! csx-ebpf-jit: a Cranelift JIT for verified csx eBPF programs, behind the same
//! [`Engine`](csx_ebpf::engine::Engine) trait as the reference interpreter, and matching
//! it exactly in r0, trap (kind and pc) and fuel used.
//!
//! Two tiers: [`JitProgram`] (Cranelift, optimising, tens of milliseconds for a large
//! program) and, on x86-64, `QuickProgram` (the `quick` module: a one-pass baseline JIT
//! that compiles in well under a millisecond), both a [`Compiled`] (`compiled`: the
//! program, its code, the counting variant compiled on demand, the run) over their
//! code generators. [`TieredProgram`] runs the quick code at once and switches to
//! Cranelift's when it is ready (see `tiered`).
//!
//! Pipeline of [`JitProgram::compile`]: plan (control flow per eBPF function, block
//! starts, if-conversions; `analysis`) → set up the host ISA → declare one Cranelift
//! function per eBPF function → translate each (`translate`) → define (compile) each →
//! finalize into executable memory (`code_memory`). A run (`runtime`) maps the stack and
//! globals, hands compiled code a context block, and turns the status it returns into a
//! [`RunOutcome`](csx_ebpf::engine::RunOutcome).
//!
//! Innermost loops are versioned (`loops`): a guard where a loop is entered proves how
//! many iterations keep its strided accesses in bounds, and an unchecked copy of the loop
//! runs those. Setting `CSX_JIT_DISASM` prints each compiled function's machine code
//! (Cranelift's listing) to stderr, for reading what a kernel became; `CSX_JIT_CLIF`
//! prints its Cranelift IR after Cranelift's optimisations (where each value ended up);
//! `CSX_JIT_BYTES=DIR` writes each function's machine code to `DIR` (for `objdump`, to
//! see where each block falls).
//!
//! The entry function is placed at eight offsets into a 64-byte line, and its first
//! long runs time each copy to keep the fastest (`place`: where a loop falls moved its
//! time by up to 1.3x on our hosts). `CSX_JIT_PLACE=N` instead starts every function's
//! code `N` bytes past a line (a measurement knob); `CSX_JIT_PLACE_LOG` prints each
//! choice.
//!
//! Invariants: compiled code touches memory only inside bounds-checked region rows, the
//! current stack frame, its context and, in code whose run first checked that `r1`
//! points into a region readable for `r2` bytes (`compiled`, `CodeMemory::needs_input`),
//! the loads the entry facts prove inside `[r1, r1 + r2)` (`ranges`); it stops only
//! through its exit blocks (no trap instructions, no signals); no panic unwinds through
//! it. `unsafe` lives in `code_memory` (executable memory) and `runtime` (the call into
//! compiled code and the helper trampoline) only.

#![warn(clippy::too_many_lines)]

mod analysis;
mod code_memory;
mod compiled;
mod count;
mod divides;
mod extend;
mod extrema;
mod hoist;
mod loops;
mod params;
mod place;
#[cfg(target_arch = "x86_64")]
mod quick;
mod ranges;
mod runtime;
mod tiered;
mod translate;
mod trips;

pub use compiled::Compiled;
#[cfg(target_arch = "x86_64")]
pub use quick::{Quick, QuickProgram};
pub use tiered::{Promotion, Tier, TieredProgram};

use std::collections::BTreeMap;

use cranelift_codegen::isa::CallConv;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};

use csx_ebpf::program::VerifiedProgram;

use crate::analysis::{PlanError, ProgramPlan};
use crate::code_memory::{compiled_fn_signature, CodeMemory};
use crate::compiled::Variant;
use crate::translate::{Entry, ProgramEnv, TranslateError};

/// Why a verified program could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JitError {
    /// Cranelift does not support the host machine.
    #[error("host machine is not supported by cranelift: {message}")]
    UnsupportedHost { message: String },
    /// Cranelift rejected the generated code or could not emit it (a JIT bug).
    #[error("program `{program}`: cranelift failed: {message}")]
    Codegen { program: String, message: String },
    /// An instruction the JIT does not translate (the verifier should have rejected it).
    #[error("program `{program}`: unsupported instruction {opcode:#04x} at pc {pc}")]
    UnsupportedInstruction {
        program: String,
        pc: u32,
        opcode: u8,
    },
    /// A jump or call to a slot outside the program or into an `lddw`.
    #[error("program `{program}`: jump at pc {pc} to invalid slot {target}")]
    BadJumpTarget {
        program: String,
        pc: u32,
        target: i64,
    },
    /// Control would run past the last instruction.
    #[error("program `{program}`: control falls off the end after pc {pc}")]
    FallsOffEnd { program: String, pc: u32 },
}

/// A verified program compiled to native code by Cranelift (the optimising tier).
pub type JitProgram = Compiled<Cranelift>;

/// The optimising tier's code generator (Cranelift), the backend of [`JitProgram`].
#[derive(Debug)]
pub enum Cranelift {}

/// The program's plan for `variant` (see `analysis`), its errors as [`JitError`]s.
fn plan_of(program: &VerifiedProgram, variant: Variant) -> Result<ProgramPlan, JitError> {
    let name = program.name();
    let counting = variant == Variant::Counting;
    let facts = variant == Variant::Fast;
    let plan = analysis::plan_program_with(program.insns(), program.entry(), !counting, facts);
    plan.map_err(|e| match e {
        PlanError::BadTarget { pc, target } => JitError::BadJumpTarget {
            program: name.to_string(),
            pc,
            target,
        },
        PlanError::FallsOffEnd { pc } => JitError::FallsOffEnd {
            program: name.to_string(),
            pc,
        },
    })
}

/// A module for the host ISA, optimising for speed.
fn host_module(
    codegen: &dyn Fn(&dyn std::fmt::Display) -> JitError,
) -> Result<JITModule, JitError> {
    Ok(JITModule::new(JITBuilder::with_isa(
        host_isa(codegen, "speed")?,
        cranelift_module::default_libcall_names(),
    )))
}

/// The host ISA at Cranelift's `opt_level`.
fn host_isa(
    codegen: &dyn Fn(&dyn std::fmt::Display) -> JitError,
    opt_level: &str,
) -> Result<cranelift_codegen::isa::OwnedTargetIsa, JitError> {
    let mut flags = settings::builder();
    for (flag, value) in [
        ("opt_level", opt_level),
        ("use_colocated_libcalls", "false"),
        ("is_pic", "false"),
        (
            "enable_verifier",
            if cfg!(debug_assertions) {
                "true"
            } else {
                "false"
            },
        ),
    ] {
        flags.set(flag, value).map_err(|e| codegen(&e))?;
    }
    cranelift_native::builder()
        .map_err(|m| JitError::UnsupportedHost {
            message: m.to_string(),
        })?
        .finish(settings::Flags::new(flags))
        .map_err(|e| codegen(&e))
}

/// Compiles `ctx`'s function into `module` as `id` through `extend::define`: the
/// mid-end, then the passes after it (narrow loads and address constants folded when
/// the function has such loads; loop invariants moved out, `hoist`), then lowering with
/// `lowering`, the host ISA with the mid-end off (made on first use), and the code
/// placed in a line (`place`; copies at each placement a trial tries when `trial`);
/// returns each copy's function and how many bytes past the line's start it is.
fn define(
    module: &mut JITModule,
    lowering: &mut Option<cranelift_codegen::isa::OwnedTargetIsa>,
    id: cranelift_module::FuncId,
    ctx: &mut cranelift_codegen::Context,
    trial: bool,
    codegen: &dyn Fn(&dyn std::fmt::Display) -> JitError,
) -> Result<Vec<(cranelift_module::FuncId, u32)>, JitError> {
    let narrow = extend::has_narrow_loads(&ctx.func);
    if lowering.is_none() {
        *lowering = Some(host_isa(codegen, "none")?);
    }
    let lowering = lowering.as_deref().expect("made just now");
    extend::define(module, lowering, id, ctx, narrow, trial).map_err(|e| codegen(&e))
}

impl compiled::Backend for Cranelift {
    const NAME: &'static str = "JitProgram";

    /// Plans, translates and finalizes `program`'s code of `variant` (the counting one
    /// with block counters, see `count`).
    fn build(program: &VerifiedProgram, variant: Variant) -> Result<CodeMemory, JitError> {
        let counting = variant == Variant::Counting;
        let name = program.name().to_string();
        let codegen = |e: &dyn std::fmt::Display| JitError::Codegen {
            program: name.clone(),
            message: e.to_string(),
        };

        // Plan: which slots each eBPF function reaches, where blocks start, which
        // branches become selects.
        let insns = program.insns();
        let plan = plan_of(program, variant)?;
        let mut module = host_module(&codegen)?;
        // The host ISA with Cranelift's mid-end off, for functions whose narrow loads
        // are folded into their extensions after the mid-end (see `extend`).
        let mut lowering_isa = None;
        let call_conv = module.isa().default_call_conv();

        // Declare every function first, so calls can refer to any of them: the entry
        // with the runtime's signature, each function a local call reaches with its own
        // (`translate::CalleeAbi`; an entry that is also called gets both).
        let signature = compiled_fn_signature(call_conv);
        let entry_start = program.entry();
        let entry_id = module
            .declare_function(&format!("ebpf_{entry_start}"), Linkage::Local, &signature)
            .map_err(|e| codegen(&e))?;
        let mut callee_ids = BTreeMap::new();
        let mut abis = BTreeMap::new();
        for f in plan.functions.iter().filter(|f| f.is_callee) {
            let abi = translate::CalleeAbi::new(analysis::reg_use(insns, &f.pcs));
            let id = module
                .declare_function(
                    &format!("ebpf_call_{}", f.start),
                    Linkage::Local,
                    &abi.signature(CallConv::Tail),
                )
                .map_err(|e| codegen(&e))?;
            callee_ids.insert(f.start, id);
            abis.insert(f.start, abi);
        }

        // Translate and define each function.
        let env = ProgramEnv {
            insns,
            callee_ids: &callee_ids,
            abis: &abis,
            calls_helpers: plan.calls_helpers,
            call_conv,
            frontend_config: module.isa().frontend_config(),
            blocks: counting.then(|| program.blocks()),
            plans: &plan.functions,
            globals: &translate::KnownRegion::of(program),
        };
        let mut ctx = module.make_context();
        let mut builder_ctx = FunctionBuilderContext::new();
        let mut code_bytes = 0;
        let mut digest = Fnv1a::default();
        let mut to_define = Vec::new();
        let mut entries = Vec::new();
        for f in &plan.functions {
            if f.start == entry_start {
                to_define.push((f, Entry::Run, entry_id, signature.clone()));
            }
            if let Some(&id) = callee_ids.get(&f.start) {
                to_define.push((f, Entry::Call, id, abis[&f.start].signature(CallConv::Tail)));
            }
        }
        for (f, entry, id, sig) in to_define {
            ctx.func.signature = sig;
            let builder = FunctionBuilder::new(&mut ctx.func, &mut builder_ctx);
            translate::translate_function(&mut module, builder, &env, f, entry)
                .map_err(|e| unsupported(&name, e))?;
            before_mid_end(&mut ctx.func);
            let dump = std::env::var_os("CSX_JIT_DISASM").is_some();
            if dump {
                ctx.set_disasm(true);
            }
            // The entry's placement is chosen by timing runs (`place::Placements`),
            // except in the counting variant.
            let run = entry == Entry::Run;
            let placed = define(
                &mut module,
                &mut lowering_isa,
                id,
                &mut ctx,
                run && !counting,
                &codegen,
            )?;
            #[cfg(test)]
            translated::note_optimized(&ctx.func);
            dump_function(&ctx, &name, f.start, &placed, dump);
            if let Some(c) = ctx.compiled_code() {
                code_bytes += c.code_info().total_size as usize + placed[0].1 as usize;
                digest.write(c.code_buffer());
            }
            if run {
                entries = placed;
            }
            module.clear_context(&mut ctx);
        }

        // Finalize: apply relocations and make the code executable.
        CodeMemory::new(module, &entries, code_bytes)
            .map(|c| {
                c.with_digest(digest.0)
                    .with_needs_input(plan.reads_input(insns))
            })
            .map_err(|e| codegen(&e))
    }
}

/// A translation error of program `name` as a [`JitError`].
fn unsupported(name: &str, e: TranslateError) -> JitError {
    match e {
        TranslateError::Unsupported { pc, opcode } => JitError::UnsupportedInstruction {
            program: name.to_string(),
            pc,
            opcode,
        },
    }
}

/// The passes over a translated function before Cranelift's mid-end: divisibility
/// tests and remainders by registers folded (`divides`), equal and dead block
/// parameters removed (`params`; remainders after, see `divides`).
fn before_mid_end(func: &mut cranelift_codegen::ir::Function) {
    divides::fold_divisibility_tests(func);
    params::merge_equal_params(func);
    params::remove_dead_params(func);
    divides::fold_register_remainders(func);
    #[cfg(test)]
    translated::note(func);
}

/// What the reading aids of the module doc ask for, of the function starting at slot
/// `start` of program `name`, compiled in `ctx` and `placed` (copies, each so many
/// bytes past a line): Cranelift's listing (`disasm`: `CSX_JIT_DISASM`), its IR after
/// the mid-end (`CSX_JIT_CLIF`), its machine code written to a file
/// (`CSX_JIT_BYTES=DIR`).
fn dump_function(
    ctx: &cranelift_codegen::Context,
    name: &str,
    start: u32,
    placed: &[(cranelift_module::FuncId, u32)],
    disasm: bool,
) {
    let compiled = ctx.compiled_code();
    if disasm {
        if let Some(v) = compiled.and_then(|c| c.vcode.as_ref()) {
            let pads: Vec<u32> = placed.iter().map(|p| p.1).collect();
            eprintln!("== {name} function {start} (placed {pads:?} bytes past a line)\n{v}");
        }
    }
    if std::env::var_os("CSX_JIT_CLIF").is_some() {
        eprintln!("== clif {start}\n{}", ctx.func.display());
    }
    if let (Some(dir), Some(c)) = (std::env::var_os("CSX_JIT_BYTES"), compiled) {
        let path = std::path::Path::new(&dir).join(format!("{name}.{start}.bin"));
        if let Err(e) = std::fs::write(&path, c.code_buffer()) {
            eprintln!("CSX_JIT_BYTES: cannot write {}: {e}", path.display());
        }
    }
}

/// The functions compilations on this thread translated, as Cranelift IR before its
/// mid-end and after it, for tests that look at what translation emitted and what the
/// optimizations made of it.
#[cfg(test)]
pub(crate) mod translated {
    use std::cell::RefCell;

    use cranelift_codegen::ir::Function;

    thread_local! {
        static SEEN: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
        static OPTIMIZED: RefCell<Option<Vec<Function>>> = const { RefCell::new(None) };
    }

    pub(crate) fn note(func: &Function) {
        SEEN.with(|s| {
            if let Some(seen) = s.borrow_mut().as_mut() {
                seen.push(func.display().to_string());
            }
        });
    }

    /// Keeps `func` as Cranelift's optimizations left it, when [`optimized`] asks.
    pub(crate) fn note_optimized(func: &Function) {
        OPTIMIZED.with(|s| {
            if let Some(seen) = s.borrow_mut().as_mut() {
                seen.push(func.clone());
            }
        });
    }

    /// Runs `f`, and returns the functions it translated.
    pub(crate) fn during(f: impl FnOnce()) -> Vec<String> {
        SEEN.with(|s| *s.borrow_mut() = Some(Vec::new()));
        f();
        SEEN.with(|s| s.borrow_mut().take()).unwrap_or_default()
    }

    /// Runs `f`, and returns the functions it compiled, after the mid-end and the loop
    /// tidy (what is lowered to machine code).
    pub(crate) fn optimized(f: impl FnOnce()) -> Vec<Function> {
        OPTIMIZED.with(|s| *s.borrow_mut() = Some(Vec::new()));
        f();
        OPTIMIZED
            .with(|s| s.borrow_mut().take())
            .unwrap_or_default()
    }
}

/// FNV-1a, 64 bits: the code digest (`Compiled::code_digest`).
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests;
