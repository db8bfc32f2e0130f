//! `--engine interp|jit|quick`: the one spelling for choosing an engine.
//!
//! The older `--interp`, `--jit` and `--quick` flags stay accepted as hidden aliases;
//! each prints one deprecation line on stderr and then behaves as `--engine` would.

use clap::{Args, ValueEnum};
use csx_host::proto::EngineKind as DeviceKind;

/// An engine of the VM on this host: the interpreter, the JIT or the quick tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// The reference interpreter.
    #[value(alias = "interpreter")]
    Interp,
    /// The Cranelift JIT.
    Jit,
    /// The quick tier: the one-pass baseline JIT (x86-64 only).
    Quick,
}

/// An engine a device runs programs on: the interpreter or the JIT (a device has no
/// quick tier, so `--engine quick` is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceEngine {
    /// The reference interpreter.
    #[value(alias = "interpreter")]
    Interp,
    /// The Cranelift JIT.
    Jit,
}

impl DeviceEngine {
    /// The engine kind of the device protocol.
    pub fn kind(self) -> DeviceKind {
        match self {
            DeviceEngine::Interp => DeviceKind::Interpreter,
            DeviceEngine::Jit => DeviceKind::Jit,
        }
    }
}

/// Prints the one-line note for an old engine flag.
fn deprecated(flag: &str, value: &str) {
    eprintln!("csx: --{flag} is deprecated; use --engine {value}");
}

/// `--engine interp|jit|quick` for commands that run the VM on this host (default jit),
/// with the old `--interp`, `--jit` and `--quick` as hidden aliases.
#[derive(Debug, Clone, Copy, Args)]
#[group(multiple = false)]
pub struct EngineChoice {
    /// The engine to run on [default: jit].
    #[arg(long, value_enum, value_name = "ENGINE")]
    engine: Option<Engine>,
    #[arg(long, hide = true)]
    interp: bool,
    #[arg(long, hide = true)]
    jit: bool,
    #[arg(long, hide = true)]
    quick: bool,
}

impl EngineChoice {
    /// The old flag given, if any, and the engine it names.
    fn old_flag(self) -> Option<(&'static str, Engine)> {
        if self.interp {
            Some(("interp", Engine::Interp))
        } else if self.jit {
            Some(("jit", Engine::Jit))
        } else if self.quick {
            Some(("quick", Engine::Quick))
        } else {
            None
        }
    }

    /// The chosen engine, if any flag chose one (an old flag prints its note here, so
    /// call this once).
    pub fn chosen(self) -> Option<Engine> {
        if self.engine.is_some() {
            return self.engine;
        }
        let (flag, engine) = self.old_flag()?;
        deprecated(flag, flag);
        Some(engine)
    }

    /// The chosen engine without the deprecation note: for the conformance plugin, whose
    /// runner passes its documented `--plugin_options --interp` to every vector.
    pub fn chosen_quietly(self) -> Option<Engine> {
        self.engine.or_else(|| self.old_flag().map(|(_, e)| e))
    }
}

/// `--engine interp|jit` for commands that run programs on a device (default jit), with
/// the old `--interp` and `--jit` as hidden aliases.
#[derive(Debug, Clone, Copy, Args)]
#[group(multiple = false)]
pub struct DeviceEngineChoice {
    /// The engine the device runs the program on [default: jit].
    #[arg(long, value_enum, value_name = "ENGINE")]
    engine: Option<DeviceEngine>,
    #[arg(long, hide = true)]
    interp: bool,
    #[arg(long, hide = true)]
    jit: bool,
}

impl DeviceEngineChoice {
    /// The chosen engine, jit by default (an old flag prints its note here, so call this
    /// once).
    pub fn kind(self) -> DeviceKind {
        if let Some(e) = self.engine {
            return e.kind();
        }
        if self.interp {
            deprecated("interp", "interp");
            DeviceKind::Interpreter
        } else {
            if self.jit {
                deprecated("jit", "jit");
            }
            DeviceKind::Jit
        }
    }
}
