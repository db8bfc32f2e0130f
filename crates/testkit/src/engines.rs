//! Every engine, behind one constructor, so tests run each vector on all of them.

use std::sync::Arc;

use csx_ebpf::engine::Engine;
use csx_ebpf::program::VerifiedProgram;

/// Builds an engine for a verified program, or says why it could not.
pub type EngineFactory = fn(Arc<VerifiedProgram>) -> Result<Box<dyn Engine>, String>;

fn interpreter(p: Arc<VerifiedProgram>) -> Result<Box<dyn Engine>, String> {
    Ok(Box::new(csx_ebpf::interp::Interpreter::new(p)))
}

/// All engines, by name: the interpreter first (it is the reference).
pub fn all() -> Vec<(&'static str, EngineFactory)> {
    vec![("interp", interpreter as EngineFactory)]
}
