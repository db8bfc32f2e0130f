//! The VM engines a benchmark or `csx vm` builds: verification and engine construction,
//! timed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use csx_ebpf::engine::Engine;
use csx_ebpf::helper::FunctionTable;
use csx_ebpf::program::{Program, VerifiedProgram};

/// Which engine runs the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// The reference interpreter.
    Interp,
    /// The Cranelift JIT.
    Jit,
    /// The quick tier: the one-pass baseline JIT (x86-64 only).
    Quick,
}

impl EngineKind {
    /// The name printed and written to JSON: `interp`, `jit` or `quick`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Interp => "interp",
            EngineKind::Jit => "jit",
            EngineKind::Quick => "quick",
        }
    }
}

/// Verifies `program` against `functions`.
pub fn verify_program(
    label: &str,
    program: Program,
    functions: Arc<FunctionTable>,
) -> anyhow::Result<Arc<VerifiedProgram>> {
    let verified = csx_ebpf::verifier::verify(program, functions)
        .with_context(|| format!("verifying {label}"))?;
    Ok(Arc::new(verified))
}

/// An engine for `program`, and how long building it took (JIT compile time).
pub fn build_engine(
    kind: EngineKind,
    program: Arc<VerifiedProgram>,
) -> anyhow::Result<(Box<dyn Engine>, Duration)> {
    match kind {
        EngineKind::Interp => {
            let started = Instant::now();
            let engine = csx_ebpf::interp::Interpreter::new(program);
            Ok((Box::new(engine), started.elapsed()))
        }
        EngineKind::Jit => {
            let name = program.name().to_string();
            let jit = csx_ebpf_jit::JitProgram::compile(program)
                .with_context(|| format!("JIT-compiling {name}"))?;
            let took = jit.compile_time();
            Ok((Box::new(jit), took))
        }
        #[cfg(target_arch = "x86_64")]
        EngineKind::Quick => {
            let name = program.name().to_string();
            let quick = csx_ebpf_jit::QuickProgram::compile(program)
                .with_context(|| format!("quick-compiling {name}"))?;
            let took = quick.compile_time();
            Ok((Box::new(quick), took))
        }
        #[cfg(not(target_arch = "x86_64"))]
        EngineKind::Quick => {
            anyhow::bail!("the quick tier exists only on x86-64 hosts; use the jit or interp")
        }
    }
}
