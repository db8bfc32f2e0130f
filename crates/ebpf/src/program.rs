//! Programs before and after verification.
//!
//! A [`Program`] is what a loader produces: instruction slots, the entry slot, and the
//! global data sections its `lddw` constants point into. [`crate::verifier::verify`]
//! turns it into a [`VerifiedProgram`], the only form engines accept.

use std::sync::{Arc, OnceLock};

use crate::count::BlockMap;
use crate::helper::FunctionTable;
use crate::isa::Insn;
use crate::memory::RegionIdx;

/// A global data section mapped as a region for every run.
///
/// Section `n` of [`Program::globals`] is mapped at `RegionIdx::global(n)`; the loader
/// has already rewritten every `lddw` that refers to it into that virtual address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalSection {
    /// ELF section name (`.rodata.str1.1`, `.data`, `.bss`, ...), for messages.
    pub name: String,
    /// Initial contents; `.bss` is zeros of its size.
    pub data: Vec<u8>,
    /// Whether stores may touch it. A writable section is copied fresh for every run,
    /// so runs never see each other's globals.
    pub writable: bool,
}

impl GlobalSection {
    /// The region this section is mapped at, for section number `n`.
    pub fn region(n: usize) -> Option<RegionIdx> {
        u32::try_from(n).ok().and_then(RegionIdx::global)
    }
}

/// A program as loaded, not yet verified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    /// Instruction slots (`lddw` takes two).
    pub insns: Vec<Insn>,
    /// Slot where execution starts.
    pub entry: u32,
    /// Global data sections, in region order.
    pub globals: Vec<GlobalSection>,
    /// A name for messages (the ELF symbol, or the file name).
    pub name: String,
}

impl Program {
    /// A program from raw slots starting at slot 0, with no globals.
    pub fn from_insns(name: impl Into<String>, insns: Vec<Insn>) -> Program {
        Program {
            insns,
            entry: 0,
            globals: Vec::new(),
            name: name.into(),
        }
    }
}

/// Facts the verifier established, which engines may rely on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramInfo {
    /// Slots where a local function starts (the entry included), sorted.
    pub function_starts: Vec<u32>,
    /// Slots that are the second half of an `lddw`: never a jump target.
    pub lddw_tails: Vec<u32>,
    /// Helper ids the program calls directly (`call imm`), sorted.
    pub helpers_called: Vec<u32>,
    /// Whether the program uses `callx` (helper id known only at run time).
    pub uses_callx: bool,
}

/// A program the verifier accepted, with the function table it was checked against.
#[derive(Clone, Debug)]
pub struct VerifiedProgram {
    program: Program,
    functions: Arc<FunctionTable>,
    info: ProgramInfo,
    /// Canonical basic blocks, computed on first use (see [`crate::count`]).
    blocks: OnceLock<BlockMap>,
}

impl VerifiedProgram {
    /// Only the verifier builds these.
    pub(crate) fn new(program: Program, functions: Arc<FunctionTable>, info: ProgramInfo) -> Self {
        VerifiedProgram {
            program,
            functions,
            info,
            blocks: OnceLock::new(),
        }
    }

    /// The program's canonical basic blocks and their instruction-class histograms,
    /// shared by every engine that counts executed work (see [`crate::count`]).
    pub fn blocks(&self) -> &BlockMap {
        self.blocks
            .get_or_init(|| BlockMap::new(self.insns(), self.entry()))
    }

    /// The instruction slots.
    pub fn insns(&self) -> &[Insn] {
        &self.program.insns
    }

    /// The slot where execution starts.
    pub fn entry(&self) -> u32 {
        self.program.entry
    }

    /// Global data sections in region order.
    pub fn globals(&self) -> &[GlobalSection] {
        &self.program.globals
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.program.name
    }

    /// The function table calls are resolved against.
    pub fn functions(&self) -> &Arc<FunctionTable> {
        &self.functions
    }

    /// What verification established.
    pub fn info(&self) -> &ProgramInfo {
        &self.info
    }

    /// The program as loaded.
    pub fn program(&self) -> &Program {
        &self.program
    }
}
