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
use csx_ebpf::memory::MemoryMap;
use csx_ebpf::program::VerifiedProgram;

use crate::code_memory::CodeMemory;
use crate::JitError;

/// A tier's code generator.
pub(crate) trait Backend {
    /// The type's name in `Debug` output.
    const NAME: &'static str;

    /// Compiles `program` into executable code; `counting`: the variant that adds to
    /// the run's block counters (`JitContext::counts`) by the counting rule.
    fn build(program: &VerifiedProgram, counting: bool) -> Result<CodeMemory, JitError>;
}

/// [`Backend::build`], with a panic inside the compiler (a bug in a tier or in
/// Cranelift, never the program's fault: it was verified) turned into
/// [`JitError::Codegen`], so a program that trips one is refused with a typed error
/// and the device, the daemon or the host application goes on.
fn build_guarded<T: Backend>(
    program: &VerifiedProgram,
    counting: bool,
) -> Result<CodeMemory, JitError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        #[cfg(test)]
        if PANIC_IN_BUILD.with(|p| p.get()) {
            panic!("a compiler bug (test)");
        }
        T::build(program, counting)
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
    tier: PhantomData<fn() -> T>,
}

// `Backend` is sealed: only the crate's own tiers are `Compiled`'s parameters.
#[allow(private_bounds)]
impl<T: Backend> Compiled<T> {
    /// Compiles `program` for the host.
    pub fn compile(program: Arc<VerifiedProgram>) -> Result<Compiled<T>, JitError> {
        let started = Instant::now();
        let code = build_guarded::<T>(&program, false)?;
        Ok(Compiled {
            program,
            code,
            compile_time: started.elapsed(),
            counted: OnceLock::new(),
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
            .get_or_init(|| build_guarded::<T>(&self.program, true))
            .as_ref()
            .map_err(Clone::clone)
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
        run_mem.with_mapped(&self.program, mem, |mem, fp| {
            crate::runtime::execute(code, &self.program, mem, fp, args, opts, host)
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Makes this thread's builds panic inside [`build_guarded`] (tests only).
    pub(crate) static PANIC_IN_BUILD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
