//! Every engine, behind one constructor, so tests run each vector on all of them.

use std::sync::Arc;

use csx_ebpf::engine::Engine;
use csx_ebpf::program::VerifiedProgram;

/// Builds an engine for a verified program, or says why it could not.
pub type EngineFactory = fn(Arc<VerifiedProgram>) -> Result<Box<dyn Engine>, String>;

fn interpreter(p: Arc<VerifiedProgram>) -> Result<Box<dyn Engine>, String> {
    Ok(Box::new(csx_ebpf::interp::Interpreter::new(p)))
}

fn jit(p: Arc<VerifiedProgram>) -> Result<Box<dyn Engine>, String> {
    csx_ebpf_jit::JitProgram::compile(p)
        .map(|j| Box::new(j) as Box<dyn Engine>)
        .map_err(|e| e.to_string())
}

#[cfg(target_arch = "x86_64")]
fn quick(p: Arc<VerifiedProgram>) -> Result<Box<dyn Engine>, String> {
    csx_ebpf_jit::QuickProgram::compile(p)
        .map(|j| Box::new(j) as Box<dyn Engine>)
        .map_err(|e| e.to_string())
}

/// All engines, by name: the interpreter first (it is the reference), then the
/// Cranelift JIT and, on x86-64, the quick tier.
pub fn all() -> Vec<(&'static str, EngineFactory)> {
    #[allow(unused_mut)]
    let mut engines = vec![
        ("interp", interpreter as EngineFactory),
        ("jit", jit as EngineFactory),
    ];
    #[cfg(target_arch = "x86_64")]
    engines.push(("quick", quick as EngineFactory));
    engines
}

#[cfg(test)]
mod tests {
    /// Every suite that runs "on every engine" runs the quick tier where the host has it:
    /// dropping it from the list would silently shrink them to two engines.
    #[test]
    fn every_tier_is_listed() {
        let names: Vec<&str> = super::all().iter().map(|(n, _)| *n).collect();
        let want: &[&str] = if cfg!(target_arch = "x86_64") {
            &["interp", "jit", "quick"]
        } else {
            &["interp", "jit"]
        };
        assert_eq!(names, want);
    }
}
