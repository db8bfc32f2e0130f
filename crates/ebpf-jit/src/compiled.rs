//! What a program compiled by either tier is: the verified program, its code, and the
//! variant that counts executed blocks (`csx_ebpf::count`), compiled on the first run
//! that asks for counts (or by `prepare_counting`). [`Compiled`] holds that and runs
//! it; a tier is a [`Backend`] that turns a verified program into code, with or without
//! counters. [`crate::JitProgram`] (Cranelift) and, on x86-64, [`crate::QuickProgram`]
//! (the quick tier) are `Compiled` over their backends.

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use csx_ebpf::engine::{Engine, RunMemory, RunOptions, RunOutcome};
use csx_ebpf::helper::HelperHost;
use csx_ebpf::interp::Interpreter;
use csx_ebpf::memory::MemoryMap;
use csx_ebpf::program::VerifiedProgram;

use crate::code_memory::CodeMemory;
use crate::JitError;

/// Which code a [`Backend`] builds for a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    /// The code runs use: where the tier can, it reads inside `[r1, r1 + r2)` of the
    /// entry unchecked where the entry facts prove it (`ranges`, `entry_args`), and
    /// then says so ([`CodeMemory::needs_input`]): a run checks that precondition first.
    Fast,
    /// As `Fast` without the entry facts: for runs whose `r1` and `r2` fail the
    /// precondition.
    Plain,
    /// Adds to the run's block counters (`JitContext::counts`) by the counting rule;
    /// without the entry facts either.
    Counting,
}

/// A tier's code generator.
pub(crate) trait Backend {
    /// The type's name in `Debug` output.
    const NAME: &'static str;

    /// Compiles `program` into executable code of the variant `variant`.
    fn build(program: &VerifiedProgram, variant: Variant) -> Result<CodeMemory, JitError>;
}

/// [`Backend::build`], with a panic inside the compiler (a bug in a tier or in
/// Cranelift, never the program's fault: it was verified) turned into
/// [`JitError::Codegen`], so a program that trips one is refused with a typed error
/// and the device, the daemon or the host application goes on.
fn build_guarded<T: Backend>(
    program: &VerifiedProgram,
    variant: Variant,
) -> Result<CodeMemory, JitError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        #[cfg(test)]
        if PANIC_IN_BUILD.with(|p| p.get()) {
            panic!("a compiler bug (test)");
        }
        T::build(program, variant)
    }))
    .unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(JitError::Codegen {
            program: program.name().to_string(),
            message: format!("internal compiler error in the {} tier: {what}", T::NAME),
        })
    })
}

/// A verified program compiled by the tier `T` (see the module doc).
pub struct Compiled<T> {
    program: Arc<VerifiedProgram>,
    pub(crate) code: CodeMemory,
    compile_time: Duration,
    /// The counting variant, compiled by the first run that asks for counts.
    counted: OnceLock<Result<CodeMemory, JitError>>,
    /// The plain variant, compiled by the first run that fails `code`'s precondition
    /// (when it has one, [`CodeMemory::needs_input`]).
    pub(crate) plain: OnceLock<Result<CodeMemory, JitError>>,
    tier: PhantomData<fn() -> T>,
}

// `Backend` is sealed: only the crate's own tiers are `Compiled`'s parameters.
#[allow(private_bounds)]
impl<T: Backend> Compiled<T> {
    /// Compiles `program` for the host.
    pub fn compile(program: Arc<VerifiedProgram>) -> Result<Compiled<T>, JitError> {
        let started = Instant::now();
        let code = build_guarded::<T>(&program, Variant::Fast)?;
        Ok(Compiled {
            program,
            code,
            compile_time: started.elapsed(),
            counted: OnceLock::new(),
            plain: OnceLock::new(),
            tier: PhantomData,
        })
    }

    /// Compiles the variant that counts executed blocks now, rather than on the first
    /// run that asks for counts (a device that always counts calls this at activation).
    pub fn prepare_counting(&self) -> Result<(), JitError> {
        self.counted_code().map(|_| ())
    }

    fn counted_code(&self) -> Result<&CodeMemory, JitError> {
        self.counted
            .get_or_init(|| build_guarded::<T>(&self.program, Variant::Counting))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The code for a run with `args` over `mem` (stack and globals mapped), from the
    /// code counts or not (`code`): `code` itself unless it reads the entry's input
    /// unchecked and `args` fail its precondition; then the plain variant, compiled now
    /// if no run needed it before (`None` if that failed: a compiler bug).
    fn code_for<'c>(
        &'c self,
        code: &'c CodeMemory,
        mem: &MemoryMap<'_>,
        args: [u64; 5],
    ) -> Option<&'c CodeMemory> {
        // The precondition of code that reads the entry's input unchecked (the entry
        // facts, `ranges`): `r1` points into a region that can be read for `r2` bytes.
        // The region table does not change during such a run (the program calls no
        // helper), so one check at the start holds for the whole run.
        if !code.needs_input() || mem.translate(args[0], args[1], false).is_ok() {
            return Some(code);
        }
        self.plain
            .get_or_init(|| build_guarded::<T>(&self.program, Variant::Plain))
            .as_ref()
            .ok()
    }

    /// Wall-clock time [`Compiled::compile`] took.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Bytes of machine code generated.
    pub fn code_size(&self) -> usize {
        self.code.code_bytes()
    }

    /// How many bytes past a 64-byte line the entry function's code starts: chosen by
    /// timing the first runs on each of several copies, so `None` until then
    /// (`place::Placements`; a tier or a function with one copy has it at once).
    pub fn placement(&self) -> Option<u32> {
        self.code.entries().chosen()
    }

    /// A hash (FNV-1a) of the machine code as emitted, before relocation, where the tier
    /// records one (Cranelift's does): equal programs give equal digests in every
    /// process, since code generation does not depend on hash seeds or addresses.
    pub fn code_digest(&self) -> Option<u64> {
        self.code.digest()
    }
}

impl<T: Backend> std::fmt::Debug for Compiled<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(T::NAME)
            .field("program", &self.program.name())
            .field("code", &self.code)
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl<T: Backend> Engine for Compiled<T> {
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
        let outcome = run_mem.with_mapped(&self.program, mem, |mem, fp| {
            let code = self.code_for(code, mem, args)?;
            Some(crate::runtime::execute(
                code,
                &self.program,
                mem,
                fp,
                args,
                opts,
                host,
            ))
        });
        // The fast variant compiled and the plain one did not (a compiler bug): the run
        // still gets the reference semantics.
        outcome.unwrap_or_else(|| {
            Interpreter::new(Arc::clone(&self.program)).run(mem, args, opts, host)
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Makes this thread's builds panic inside [`build_guarded`] (tests only).
    pub(crate) static PANIC_IN_BUILD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
