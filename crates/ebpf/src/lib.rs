//! csx-ebpf: the csx eBPF virtual machine, minus the JIT (which is `csx-ebpf-jit`).
//!
//! Pipeline: bytes or ELF → [`loader`] → [`program::Program`] → [`verifier`] →
//! [`program::VerifiedProgram`] → an [`engine::Engine`] (the interpreter in [`interp`],
//! the Cranelift JIT in `csx-ebpf-jit`) → [`engine::RunOutcome`].
//!
//! Invariants: this crate does no I/O; no program, however malformed, makes any function
//! here panic, loop forever or touch memory outside the regions it was given.

#![warn(clippy::too_many_lines)]

pub mod asm;
pub mod count;
pub mod disasm;
pub mod emit;
pub mod engine;
pub mod helper;
pub mod interp;
pub mod isa;
pub mod limits;
pub mod loader;
pub mod memory;
pub mod program;
pub mod trap;
pub mod verifier;
