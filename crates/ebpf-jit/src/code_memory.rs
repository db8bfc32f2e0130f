//! Executable memory: owns the finalized `JITModule` holding a program's machine code,
//! hands out the entry point, and frees the code when the program is dropped.
//!
//! Invariants: the module is finalized before any pointer leaves this module and is
//! never mutated afterwards (so sharing it between threads is sharing read-only,
//! executable pages); the code is freed only in `Drop`, when no run can be in progress
//! because every run borrows the owning `JitProgram`.

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_codegen::isa::CallConv;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module};

use crate::place::Placements;
use crate::runtime::JitContext;

/// The type of every compiled eBPF function: takes the run context, returns a status.
pub(crate) type CompiledFn = unsafe extern "C" fn(*mut JitContext) -> u64;

/// The Cranelift signature matching [`CompiledFn`] under the host's C calling convention.
pub(crate) fn compiled_fn_signature(call_conv: CallConv) -> Signature {
    let mut sig = Signature::new(call_conv);
    sig.params.push(AbiParam::new(types::I64));
    sig.returns.push(AbiParam::new(types::I64));
    sig
}

/// A program's finalized machine code.
pub(crate) struct CodeMemory {
    /// `Some` until `Drop` frees it.
    module: Option<JITModule>,
    /// The entry function, in one copy or several placed differently (`place`).
    entries: Placements<CompiledFn>,
    code_bytes: usize,
    /// FNV-1a of the machine code as emitted, before relocation (see `with_digest`).
    digest: Option<u64>,
    /// Whether the code reads the entry's input unchecked (see `needs_input`).
    needs_input: bool,
}

// SAFETY: after `new` the module is never mutated or read except to free it in `Drop`
// (which has `&mut self`); the code pages are read-only and executable, and compiled
// code keeps all run state in the context each run passes in, so several threads may
// run it at once.
unsafe impl Send for CodeMemory {}
// SAFETY: as for `Send`: shared access only ever calls the immutable entry points, and
// the choice among them (`Placements`) is atomics and a mutex.
unsafe impl Sync for CodeMemory {}

impl std::fmt::Debug for CodeMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeMemory")
            .field("copies", &self.entries.copies())
            .field("placed", &self.entries.chosen())
            .field("code_bytes", &self.code_bytes)
            .finish()
    }
}

impl CodeMemory {
    /// Finalizes `module` (relocations, then making the code executable) and keeps the
    /// addresses of `entries`, the copies of the entry function with their padding
    /// (`place`), the unpadded first; each must have been declared with
    /// [`compiled_fn_signature`]. A failure (making memory executable) is described by
    /// the returned message.
    pub(crate) fn new(
        mut module: JITModule,
        entries: &[(FuncId, u32)],
        code_bytes: usize,
    ) -> Result<CodeMemory, String> {
        let expected = compiled_fn_signature(module.isa().default_call_conv());
        for &(entry, _) in entries {
            assert_eq!(
                module.declarations().get_function_decl(entry).signature,
                expected,
                "the entry function must have the compiled-function signature"
            );
        }
        module.finalize_definitions().map_err(|e| e.to_string())?;
        let copies = entries
            .iter()
            .map(|&(entry, pad)| {
                let ptr = module.get_finalized_function(entry);
                assert!(!ptr.is_null());
                // SAFETY: `ptr` is the finalized, executable code of a function declared
                // (checked above) with one pointer-sized parameter and one 64-bit result
                // in the host's default C calling convention, which is `CompiledFn`'s
                // ABI. It stays valid until `free_memory` in `Drop`.
                let entry = unsafe { std::mem::transmute::<*const u8, CompiledFn>(ptr) };
                (pad, entry)
            })
            .collect();
        Ok(CodeMemory {
            module: Some(module),
            entries: Placements::new(copies),
            code_bytes,
            digest: None,
            needs_input: false,
        })
    }

    /// The entry function's copies and the choice among them.
    pub(crate) fn entries(&self) -> &Placements<CompiledFn> {
        &self.entries
    }

    /// Bytes of machine code emitted for the program.
    pub(crate) fn code_bytes(&self) -> usize {
        self.code_bytes
    }

    /// Records `digest`, a hash of the code as emitted (before relocation, so it does
    /// not depend on where the code was placed).
    pub(crate) fn with_digest(mut self, digest: u64) -> CodeMemory {
        self.digest = Some(digest);
        self
    }

    /// The digest recorded by `with_digest`, if the tier records one.
    pub(crate) fn digest(&self) -> Option<u64> {
        self.digest
    }

    /// Marks the code as reading inside `[r1, r1 + r2)` of the entry unchecked where the
    /// entry facts prove it (`compiled::Variant::Fast`).
    pub(crate) fn with_needs_input(mut self, needs: bool) -> CodeMemory {
        self.needs_input = needs;
        self
    }

    /// Whether a run of this code must first check that `r1` points into a region that
    /// can be read for `r2` bytes from `r1` (and run other code when it cannot).
    pub(crate) fn needs_input(&self) -> bool {
        self.needs_input
    }
}

impl Drop for CodeMemory {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: `&mut self` means no run is borrowing the program, and the entry
            // pointers never escape a run (they are only called inside `runtime::execute`
            // with `&self`), so no code from this module is executing or will be called.
            unsafe { module.free_memory() };
        }
    }
}
