//! Loading programs: raw bytecode, and ELF relocatable objects as clang emits them
//! (`clang -O2 -target bpf -c`, clang 14 and 19, cpu v1 to v4, with or without `-g`).
//!
//! The loader owns the step from bytes to an unverified [`Program`]: it picks the entry
//! function, lays the executable sections it needs out as one instruction vector,
//! resolves every relocation in them and collects the global data sections they use.
//! It never panics on malformed input: every offset, index and size read from the file
//! is checked, and every failure is a [`LoadError`] naming the section, symbol or
//! relocation at fault.
//!
//! # Layout
//! The program's code is every executable section reachable from the entry function's
//! section through call relocations, concatenated in file order; each keeps its slots in
//! order, so calls clang resolved inside a section (pc-relative, no relocation) stay
//! valid. [`Program::entry`] is the entry function's slot in that vector.
//!
//! # Relocations
//! Only relocations that apply to a loaded code section are resolved. Those of other
//! sections (`.rel.BTF`, `.rel.BTF.ext`, `.rel.debug_*`, unused code) are ignored. A
//! global data section that is mapped must carry no relocations at all: its bytes are
//! copied as they are, so a pointer in them (a table of function pointers) could not
//! be fixed up.
//!
//! | relocation (type)   | on       | symbol                          | rewrite                        |
//! |---------------------|----------|---------------------------------|--------------------------------|
//! | `R_BPF_64_64` (1)   | `lddw`   | in `.rodata*`, `.data*`, `.bss*` | constant = `global(n).vaddr(S + A)`, src = 0 |
//! | `R_BPF_64_32` (10)  | `call`   | defined in a code section       | src = 1, imm = T - pc - 1      |
//! | `R_BPF_64_32` (10)  | `call`   | undefined                       | src = 0, imm = the name's id   |
//! | `R_BPF_NONE` (0)    | any      | any                             | none                           |
//! | `R_BPF_64_ABS64` (2), `R_BPF_64_ABS32` (3), `R_BPF_64_NODYLD32` (4) | any | any | error: [`LoadError::UnsupportedRelocation`] |
//! | any other           | any      | any                             | error: [`LoadError::UnknownRelocation`] |
//!
//! * `S` is the symbol's `st_value` (0 for a section symbol), `A` the low 32 bits of the
//!   `lddw` constant, signed. clang 14 and 19 encode the same way: a variable's own
//!   symbol with `A = 0`, or the section symbol with `A` = the variable's offset (static
//!   variables, string literals, constant tables).
//! * `n` is the section's index in [`Program::globals`], assigned in order of first use;
//!   only sections some `lddw` refers to are mapped. `.rodata*` is mapped read-only,
//!   `.data*` and `.bss*` writable (`.bss` as zeros).
//! * `T` is the target's program slot: the base slot of the symbol's section plus
//!   `S / 8 + imm + 1` (libbpf's rule). It covers both of clang's encodings: imm = -1
//!   with a function symbol (global functions), imm = target index - 1 with a section
//!   symbol (static functions).
//! * An undefined callee is looked up by name in the [`FunctionTable`]; an unknown name
//!   is [`LoadError::UnknownFunction`].
//! * clang emits `R_BPF_64_ABS64`, `R_BPF_64_ABS32` and `R_BPF_64_NODYLD32` for debug
//!   info, BTF and pointers stored in data. Only the last reaches a section the loader
//!   maps, and it is refused, naming the section, offset and type.
//!
//! # Choosing the entry function
//! With a name, the function symbol of that name, else the only global function in the
//! executable section of that name. Without one, the only global function in an
//! executable section; if there are several, the only one outside `.text` (the
//! convention that `.text` holds library functions and `SEC("...")` sections hold
//! programs); otherwise the error lists the candidates.

use std::collections::HashSet;
use std::fmt;

use object::elf;
use object::read::elf::{FileHeader, SectionHeader, SectionTable, Sym, SymbolTable};
use object::{LittleEndian, SectionIndex, SymbolIndex};

use crate::helper::FunctionTable;
use crate::isa::{self, DecodeError, Insn, CALL_SRC_LOCAL, OP_CALL, OP_LDDW, SLOT_SIZE};
use crate::limits::{GLOBAL_SECTIONS_MAX, GLOBAL_SECTION_SIZE_MAX, PROGRAM_INSN_COUNT_MAX};
use crate::program::{GlobalSection, Program};

type Elf = elf::FileHeader64<LittleEndian>;

/// Bytes of `e_ident` the loader reads itself, before `object` parses the header:
///
/// ```text
/// byte  0..4        4       5       6..16
///     +----------+-------+-------+---------+
///     | \x7f ELF  | class | data  |   ...   |
///     +----------+-------+-------+---------+
/// ```
const IDENT_SIZE: usize = 16;
const IDENT_CLASS: usize = 4;
const IDENT_DATA: usize = 5;

/// `SLOT_SIZE` as a file offset.
const SLOT_BYTES: u64 = SLOT_SIZE as u64;

/// A function an object offers as an entry point, for listings and error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramSymbol {
    /// The function's symbol name.
    pub name: String,
    /// The executable section that holds it.
    pub section: String,
    /// Its size in instruction slots (from the symbol's size).
    pub slot_count: u64,
}

impl fmt::Display for ProgramSymbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (section {}, {} slots)",
            self.name, self.section, self.slot_count
        )
    }
}

/// Why bytes could not be loaded as a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("raw bytecode: {source}")]
    Raw {
        #[from]
        source: DecodeError,
    },
    #[error("not an ELF file ({len} bytes without an ELF identification)")]
    NotElf { len: usize },
    #[error("ELF class {class} is not ELF64 (2)")]
    NotElf64 { class: u8 },
    #[error("ELF data encoding {encoding} is not little-endian (1)")]
    NotLittleEndian { encoding: u8 },
    #[error("ELF machine {machine} is not BPF ({})", elf::EM_BPF)]
    WrongMachine { machine: u16 },
    #[error(
        "ELF type {e_type} is not a relocatable object (ET_REL, {})",
        elf::ET_REL
    )]
    NotRelocatable { e_type: u16 },
    #[error("malformed ELF: {detail}")]
    Malformed { detail: String },
    #[error("object has no global function in an executable section")]
    NoProgram,
    #[error("no function or executable section named `{select}`; programs: {}", list(.candidates))]
    ProgramNotFound {
        select: String,
        candidates: Vec<ProgramSymbol>,
    },
    #[error("{} programs match, choose one by name or section: {}", .candidates.len(), list(.candidates))]
    AmbiguousProgram {
        select: Option<String>,
        candidates: Vec<ProgramSymbol>,
    },
    #[error("function `{name}` at offset {value:#x} is not an instruction of section {section} ({size} bytes)")]
    BadFunctionSymbol {
        name: String,
        section: String,
        value: u64,
        size: u64,
    },
    #[error("executable section {section} is {size} bytes, not a multiple of {SLOT_SIZE}")]
    CodeSectionSize { section: String, size: u64 },
    #[error("program has {slots} instruction slots, limit is {limit}")]
    TooLong { slots: u64, limit: usize },
    #[error("relocation at {section}+{offset:#x} is not at the start of an instruction (section is {size} bytes)")]
    RelocationOffset {
        section: String,
        offset: u64,
        size: u64,
    },
    #[error("relocation at {section}+{offset:#x} names symbol {index}, which does not exist")]
    BadSymbolIndex {
        section: String,
        offset: u64,
        index: u32,
    },
    #[error("{kind} at {section}+{offset:#x} (symbol `{symbol}`) is on opcode {opcode:#04x}, not {expected}")]
    WrongInstruction {
        section: String,
        offset: u64,
        kind: &'static str,
        symbol: String,
        opcode: u8,
        expected: &'static str,
    },
    #[error("lddw at {section}+{offset:#x} is cut off by the end of the section")]
    TruncatedLddw { section: String, offset: u64 },
    #[error("call at {section}+{offset:#x} (slot {}) names unknown function `{name}`", .offset / SLOT_BYTES)]
    UnknownFunction {
        name: String,
        section: String,
        offset: u64,
    },
    #[error("function `{name}` has id {id}, which does not fit a call instruction's imm")]
    FunctionIdTooLarge { name: String, id: u32 },
    #[error(
        "lddw at {section}+{offset:#x} refers to `{symbol}`, which is not defined in this object"
    )]
    UndefinedSymbol {
        section: String,
        offset: u64,
        symbol: String,
    },
    #[error("relocation at {section}+{offset:#x} refers to common symbol `{symbol}` (compile with -fno-common)")]
    CommonSymbol {
        section: String,
        offset: u64,
        symbol: String,
    },
    #[error("lddw at {section}+{offset:#x} refers to `{symbol}` in section {target}, which is not .rodata*, .data* or .bss*")]
    UnsupportedDataSection {
        section: String,
        offset: u64,
        symbol: String,
        target: String,
    },
    #[error(
        "call at {section}+{offset:#x} targets `{symbol}`, which is not in an executable section"
    )]
    CallTargetNotCode {
        section: String,
        offset: u64,
        symbol: String,
    },
    #[error("call at {section}+{offset:#x} targets slot {target} of section {target_section}, which has {slot_count} slots")]
    CallTargetOutOfRange {
        section: String,
        offset: u64,
        target_section: String,
        target: i64,
        slot_count: u64,
    },
    #[error(
        "symbol `{symbol}` at offset {value:#x} lies outside its section {target} ({size} bytes)"
    )]
    SymbolOutOfSection {
        symbol: String,
        target: String,
        value: u64,
        size: u64,
    },
    #[error("{kind} at {section}+{offset:#x} (symbol `{symbol}`) is not supported")]
    UnsupportedRelocation {
        section: String,
        offset: u64,
        kind: &'static str,
        symbol: String,
    },
    #[error("relocation type {r_type} at {section}+{offset:#x} is unknown")]
    UnknownRelocation {
        section: String,
        offset: u64,
        r_type: u32,
    },
    #[error("relocation section {rel_section} for {section} has explicit addends (SHT_RELA), which BPF objects never use")]
    RelaSection {
        section: String,
        rel_section: String,
    },
    #[error("two relocations apply to {section}+{offset:#x}")]
    DuplicateRelocation { section: String, offset: u64 },
    #[error("program uses {count} global data sections, limit is {limit}")]
    TooManyGlobals { count: usize, limit: usize },
    #[error("global data section {section} is {size} bytes, limit is {limit}")]
    GlobalTooLarge {
        section: String,
        size: u64,
        limit: usize,
    },
}

fn list(candidates: &[ProgramSymbol]) -> String {
    if candidates.is_empty() {
        return "none".to_string();
    }
    let names: Vec<String> = candidates
        .iter()
        .map(|c| format!("{} ({})", c.name, c.section))
        .collect();
    names.join(", ")
}

fn malformed(e: object::read::Error) -> LoadError {
    LoadError::Malformed {
        detail: e.to_string(),
    }
}

/// The relocation types of the BPF ELF ABI (LLVM's `ELFRelocs/BPF.def`).
const R_BPF_NONE: u32 = 0;
const R_BPF_64_64: u32 = 1;
const R_BPF_64_ABS64: u32 = 2;
const R_BPF_64_ABS32: u32 = 3;
const R_BPF_64_NODYLD32: u32 = 4;
const R_BPF_64_32: u32 = 10;

fn relocation_name(r_type: u32) -> Option<&'static str> {
    match r_type {
        R_BPF_NONE => Some("R_BPF_NONE"),
        R_BPF_64_64 => Some("R_BPF_64_64"),
        R_BPF_64_ABS64 => Some("R_BPF_64_ABS64"),
        R_BPF_64_ABS32 => Some("R_BPF_64_ABS32"),
        R_BPF_64_NODYLD32 => Some("R_BPF_64_NODYLD32"),
        R_BPF_64_32 => Some("R_BPF_64_32"),
        _ => None,
    }
}

/// Loads raw little-endian bytecode: every 8 bytes one slot, execution from slot 0.
pub fn load_raw(name: &str, bytes: &[u8]) -> Result<Program, LoadError> {
    let insns = isa::decode_all(bytes)?;
    Ok(Program::from_insns(name, insns))
}

/// Loads one program from an ELF relocatable object for BPF.
///
/// `select` names the entry function, by symbol or by section (see the module doc);
/// `functions` resolves calls to `extern` functions by name.
pub fn load_elf(
    bytes: &[u8],
    select: Option<&str>,
    functions: &FunctionTable,
) -> Result<Program, LoadError> {
    // First, parse the headers and find the entry function.
    let object = Object::parse(bytes)?;
    let entry = object.select_program(select)?;
    // Then, lay out every code section the entry can reach, in file order.
    let reachable = object.reachable_code(entry.section)?;
    let mut linker = Linker::new(&object, &reachable)?;
    let entry_slot = linker.slot_of_function(&entry)?;
    // Next, resolve the relocations of each loaded section.
    for idx in 0..linker.code.len() {
        linker.relocate_section(idx, functions)?;
    }
    // Finally, copy out the global data sections the code refers to.
    let globals = linker.finish_globals()?;
    debug_assert!(entry_slot < linker.insns.len());
    Ok(Program {
        insns: linker.insns,
        entry: u32::try_from(entry_slot).expect("programs are shorter than PROGRAM_INSN_COUNT_MAX"),
        globals,
        name: entry.name,
    })
}

/// The global functions in executable sections: the programs `load_elf` may choose from.
pub fn list_programs(bytes: &[u8]) -> Result<Vec<ProgramSymbol>, LoadError> {
    let object = Object::parse(bytes)?;
    let functions = object.functions()?;
    Ok(functions
        .iter()
        .filter(|f| f.global)
        .map(|f| object.program_symbol(f))
        .collect())
}

/// Names of the `extern` functions the object's code calls, sorted, each once.
///
/// These are what `load_elf` resolves against a [`FunctionTable`]; checking them
/// against a device's table tells whether the object can load there.
pub fn undefined_functions(bytes: &[u8]) -> Result<Vec<String>, LoadError> {
    let object = Object::parse(bytes)?;
    let mut names = Vec::new();
    for section in object.code_sections() {
        for reloc in object.relocations(section)? {
            if reloc.r_type != R_BPF_64_32 {
                continue;
            }
            let symbol = object.symbol(section, &reloc)?;
            if symbol.place == Place::Undefined {
                names.push(symbol.name);
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// A function symbol defined in an executable section.
#[derive(Clone, Debug)]
struct Function {
    name: String,
    section: SectionIndex,
    value: u64,
    size: u64,
    global: bool,
}

/// Where a symbol lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Undefined,
    Common,
    Absolute,
    Section { section: SectionIndex, value: u64 },
}

/// A symbol as a relocation sees it; a section symbol is named after its section.
#[derive(Clone, Debug)]
struct Symbol {
    name: String,
    place: Place,
}

/// One `Elf64_Rel` entry.
#[derive(Clone, Copy, Debug)]
struct Reloc {
    offset: u64,
    r_type: u32,
    symbol: u32,
}

/// A parsed object: the header checked, the section and symbol tables located.
struct Object<'d> {
    data: &'d [u8],
    sections: SectionTable<'d, Elf>,
    symbols: SymbolTable<'d, Elf>,
    /// For each section, the relocation sections (`SHT_REL` or `SHT_RELA`) that apply
    /// to it. Only their headers are read here; entries are parsed when needed.
    rel_sections: Vec<Vec<SectionIndex>>,
}

impl<'d> Object<'d> {
    /// Checks the ELF identification and header, then finds the tables.
    fn parse(data: &'d [u8]) -> Result<Object<'d>, LoadError> {
        if data.len() < IDENT_SIZE || data[..4] != elf::ELFMAG {
            return Err(LoadError::NotElf { len: data.len() });
        }
        let class = data[IDENT_CLASS];
        if class != elf::ELFCLASS64 {
            return Err(LoadError::NotElf64 { class });
        }
        let encoding = data[IDENT_DATA];
        if encoding != elf::ELFDATA2LSB {
            return Err(LoadError::NotLittleEndian { encoding });
        }
        let header = Elf::parse(data).map_err(malformed)?;
        let e_type = header.e_type(LittleEndian);
        if e_type != elf::ET_REL {
            return Err(LoadError::NotRelocatable { e_type });
        }
        let machine = header.e_machine(LittleEndian);
        if machine != elf::EM_BPF {
            return Err(LoadError::WrongMachine { machine });
        }
        let sections = header.sections(LittleEndian, data).map_err(malformed)?;
        let symbols = sections
            .symbols(LittleEndian, data, elf::SHT_SYMTAB)
            .map_err(malformed)?;
        let mut rel_sections = vec![Vec::new(); sections.len()];
        for (idx, header) in sections.enumerate() {
            let sh_type = header.sh_type(LittleEndian);
            if sh_type != elf::SHT_REL && sh_type != elf::SHT_RELA {
                continue;
            }
            // A relocation section naming no valid target applies to nothing we load.
            if let Some(list) = rel_sections.get_mut(header.sh_info(LittleEndian) as usize) {
                list.push(idx);
            }
        }
        Ok(Object {
            data,
            sections,
            symbols,
            rel_sections,
        })
    }

    fn header(
        &self,
        idx: SectionIndex,
    ) -> Result<&'d elf::SectionHeader64<LittleEndian>, LoadError> {
        self.sections.section(idx).map_err(malformed)
    }

    fn section_name(&self, idx: SectionIndex) -> String {
        match self
            .sections
            .section(idx)
            .and_then(|h| self.sections.section_name(LittleEndian, h))
        {
            Ok(name) => String::from_utf8_lossy(name).into_owned(),
            Err(_) => format!("#{}", idx.0),
        }
    }

    fn section_size(&self, idx: SectionIndex) -> Result<u64, LoadError> {
        Ok(self.header(idx)?.sh_size(LittleEndian))
    }

    /// Whether section `idx` holds code: allocated, executable, with contents.
    fn is_code(&self, idx: SectionIndex) -> bool {
        let Ok(header) = self.sections.section(idx) else {
            return false;
        };
        let flags = header.sh_flags(LittleEndian);
        let code_flags = u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR);
        header.sh_type(LittleEndian) == elf::SHT_PROGBITS && flags & code_flags == code_flags
    }

    fn code_sections(&self) -> Vec<SectionIndex> {
        (1..self.sections.len())
            .map(SectionIndex)
            .filter(|&idx| self.is_code(idx))
            .collect()
    }

    /// Every function symbol defined in an executable section, in symbol-table order.
    fn functions(&self) -> Result<Vec<Function>, LoadError> {
        let mut functions = Vec::new();
        for (idx, sym) in self.symbols.enumerate() {
            if sym.st_type() != elf::STT_FUNC {
                continue;
            }
            let section = match self.symbols.symbol_section(LittleEndian, sym, idx) {
                Ok(Some(section)) if self.is_code(section) => section,
                _ => continue,
            };
            let name = self
                .symbols
                .symbol_name(LittleEndian, sym)
                .map_err(malformed)?;
            let bind = sym.st_bind();
            functions.push(Function {
                name: String::from_utf8_lossy(name).into_owned(),
                section,
                value: sym.st_value(LittleEndian),
                size: sym.st_size(LittleEndian),
                global: bind == elf::STB_GLOBAL || bind == elf::STB_WEAK,
            });
        }
        Ok(functions)
    }

    fn program_symbol(&self, function: &Function) -> ProgramSymbol {
        ProgramSymbol {
            name: function.name.clone(),
            section: self.section_name(function.section),
            slot_count: function.size / SLOT_BYTES,
        }
    }

    /// Picks the entry function (rules in the module doc).
    fn select_program(&self, select: Option<&str>) -> Result<Function, LoadError> {
        let functions = self.functions()?;
        let globals: Vec<&Function> = functions.iter().filter(|f| f.global).collect();
        let symbols = |list: &[&Function]| list.iter().map(|f| self.program_symbol(f)).collect();
        let Some(select) = select else {
            let outside_text: Vec<&Function> = globals
                .iter()
                .copied()
                .filter(|f| self.section_name(f.section) != ".text")
                .collect();
            return match (globals.as_slice(), outside_text.as_slice()) {
                ([], _) => Err(LoadError::NoProgram),
                ([only], _) | (_, [only]) => Ok((*only).clone()),
                _ => Err(LoadError::AmbiguousProgram {
                    select: None,
                    candidates: symbols(&globals),
                }),
            };
        };
        let by_name: Vec<&Function> = functions.iter().filter(|f| f.name == select).collect();
        let by_section: Vec<&Function> = globals
            .iter()
            .copied()
            .filter(|f| self.section_name(f.section) == select)
            .collect();
        let matches = if by_name.is_empty() {
            by_section
        } else {
            by_name
        };
        match matches.as_slice() {
            [only] => Ok((*only).clone()),
            [] => Err(LoadError::ProgramNotFound {
                select: select.to_string(),
                candidates: symbols(&globals),
            }),
            _ => Err(LoadError::AmbiguousProgram {
                select: Some(select.to_string()),
                candidates: symbols(&matches),
            }),
        }
    }

    /// The relocation entries that apply to section `target`, in file order.
    fn relocations(&self, target: SectionIndex) -> Result<Vec<Reloc>, LoadError> {
        let mut relocs = Vec::new();
        let Some(rel_sections) = self.rel_sections.get(target.0) else {
            return Ok(relocs);
        };
        for &rel_idx in rel_sections {
            let header = self.header(rel_idx)?;
            let Some((entries, link)) = header.rel(LittleEndian, self.data).map_err(malformed)?
            else {
                return Err(LoadError::RelaSection {
                    section: self.section_name(target),
                    rel_section: self.section_name(rel_idx),
                });
            };
            if link != self.symbols.section() {
                return Err(LoadError::Malformed {
                    detail: format!(
                        "relocation section {} links section {}, not the symbol table",
                        self.section_name(rel_idx),
                        link.0
                    ),
                });
            }
            relocs.extend(entries.iter().map(|rel| Reloc {
                offset: rel.r_offset.get(LittleEndian),
                r_type: rel.r_type(LittleEndian),
                symbol: rel.r_sym(LittleEndian),
            }));
        }
        Ok(relocs)
    }

    /// The symbol relocation `reloc` (in section `section`) refers to.
    fn symbol(&self, section: SectionIndex, reloc: &Reloc) -> Result<Symbol, LoadError> {
        let index = SymbolIndex(reloc.symbol as usize);
        let sym = match self.symbols.symbol(index) {
            Ok(sym) if index.0 != 0 => sym,
            _ => {
                return Err(LoadError::BadSymbolIndex {
                    section: self.section_name(section),
                    offset: reloc.offset,
                    index: reloc.symbol,
                })
            }
        };
        let place = match sym.st_shndx(LittleEndian) {
            elf::SHN_COMMON => Place::Common,
            elf::SHN_ABS => Place::Absolute,
            _ => match self
                .symbols
                .symbol_section(LittleEndian, sym, index)
                .map_err(malformed)?
            {
                None => Place::Undefined,
                Some(section) => Place::Section {
                    section,
                    value: sym.st_value(LittleEndian),
                },
            },
        };
        let name = match place {
            Place::Section { section, .. } if sym.st_type() == elf::STT_SECTION => {
                self.section_name(section)
            }
            _ => {
                let name = self
                    .symbols
                    .symbol_name(LittleEndian, sym)
                    .map_err(malformed)?;
                String::from_utf8_lossy(name).into_owned()
            }
        };
        Ok(Symbol { name, place })
    }

    /// The error for relocation `reloc` of section `section`, which the loader does
    /// not apply: unsupported if its type is known, unknown otherwise.
    fn refuse(&self, section: SectionIndex, reloc: &Reloc) -> LoadError {
        let name = self.section_name(section);
        let Some(kind) = relocation_name(reloc.r_type) else {
            return LoadError::UnknownRelocation {
                section: name,
                offset: reloc.offset,
                r_type: reloc.r_type,
            };
        };
        let symbol = match self.symbol(section, reloc) {
            Ok(symbol) => symbol.name,
            Err(_) => format!("#{}", reloc.symbol),
        };
        LoadError::UnsupportedRelocation {
            section: name,
            offset: reloc.offset,
            kind,
            symbol,
        }
    }

    /// The executable sections reachable from `start` through call relocations,
    /// `start` included, in file order.
    fn reachable_code(&self, start: SectionIndex) -> Result<Vec<SectionIndex>, LoadError> {
        let mut seen = HashSet::from([start]);
        let mut pending = vec![start];
        while let Some(section) = pending.pop() {
            for reloc in self.relocations(section)? {
                if reloc.r_type != R_BPF_64_32 {
                    continue;
                }
                let symbol = self.symbol(section, &reloc)?;
                if let Place::Section {
                    section: target, ..
                } = symbol.place
                {
                    if self.is_code(target) && seen.insert(target) {
                        pending.push(target);
                    }
                }
            }
        }
        let mut sections: Vec<SectionIndex> = seen.into_iter().collect();
        sections.sort_unstable_by_key(|s| s.0);
        Ok(sections)
    }
}

/// A code section placed in the program.
struct CodeSection {
    idx: SectionIndex,
    name: String,
    /// Slot of its first instruction in the program.
    base: usize,
    slot_count: usize,
}

/// Builds one program out of an object's sections.
struct Linker<'o, 'd> {
    object: &'o Object<'d>,
    code: Vec<CodeSection>,
    insns: Vec<Insn>,
    /// Program slots a relocation already rewrote.
    relocated: HashSet<usize>,
    /// Data sections mapped so far; entry `n` becomes region `global(n)`.
    globals: Vec<SectionIndex>,
}

impl<'o, 'd> Linker<'o, 'd> {
    /// Decodes `sections` into one instruction vector.
    fn new(object: &'o Object<'d>, sections: &[SectionIndex]) -> Result<Self, LoadError> {
        let mut code = Vec::with_capacity(sections.len());
        let mut contents = Vec::with_capacity(sections.len());
        let mut base = 0;
        for &idx in sections {
            let name = object.section_name(idx);
            let header = object.header(idx)?;
            // Reading the contents first bounds every size below by the file's length.
            let bytes = header.data(LittleEndian, object.data).map_err(malformed)?;
            let size = bytes.len() as u64;
            if !size.is_multiple_of(SLOT_BYTES) {
                return Err(LoadError::CodeSectionSize {
                    section: name,
                    size,
                });
            }
            let slot_count = bytes.len() / SLOT_SIZE;
            if base + slot_count > PROGRAM_INSN_COUNT_MAX {
                return Err(LoadError::TooLong {
                    slots: (base + slot_count) as u64,
                    limit: PROGRAM_INSN_COUNT_MAX,
                });
            }
            code.push(CodeSection {
                idx,
                name,
                base,
                slot_count,
            });
            contents.push(bytes);
            base += slot_count;
        }
        let mut insns = Vec::with_capacity(base);
        for (section, bytes) in code.iter().zip(contents) {
            assert_eq!(insns.len(), section.base);
            insns.extend(bytes.chunks_exact(SLOT_SIZE).map(|chunk| {
                Insn::decode(
                    chunk
                        .try_into()
                        .expect("chunks_exact yields SLOT_SIZE bytes"),
                )
            }));
        }
        assert_eq!(insns.len(), base);
        Ok(Linker {
            object,
            code,
            insns,
            relocated: HashSet::new(),
            globals: Vec::new(),
        })
    }

    /// The program slot where `function` starts.
    fn slot_of_function(&self, function: &Function) -> Result<usize, LoadError> {
        let section = self
            .code
            .iter()
            .find(|c| c.idx == function.section)
            .expect("the entry's section is always loaded");
        let size = section.slot_count as u64 * SLOT_BYTES;
        if !function.value.is_multiple_of(SLOT_BYTES) || function.value >= size {
            return Err(LoadError::BadFunctionSymbol {
                name: function.name.clone(),
                section: section.name.clone(),
                value: function.value,
                size,
            });
        }
        Ok(section.base + (function.value / SLOT_BYTES) as usize)
    }

    /// Applies every relocation of loaded section `code_idx`, then checks its
    /// relocation-free local calls stay inside it.
    fn relocate_section(
        &mut self,
        code_idx: usize,
        functions: &FunctionTable,
    ) -> Result<(), LoadError> {
        let section_idx = self.code[code_idx].idx;
        for reloc in self.object.relocations(section_idx)? {
            if reloc.r_type == R_BPF_NONE {
                continue;
            }
            let slot = self.slot_of_reloc(code_idx, &reloc)?;
            if !self.relocated.insert(slot) {
                return Err(LoadError::DuplicateRelocation {
                    section: self.code[code_idx].name.clone(),
                    offset: reloc.offset,
                });
            }
            match reloc.r_type {
                R_BPF_64_64 => self.relocate_lddw(code_idx, slot, &reloc)?,
                R_BPF_64_32 => self.relocate_call(code_idx, slot, &reloc, functions)?,
                _ => return Err(self.unsupported(code_idx, &reloc)),
            }
        }
        self.check_local_calls(code_idx)
    }

    fn unsupported(&self, code_idx: usize, reloc: &Reloc) -> LoadError {
        self.object.refuse(self.code[code_idx].idx, reloc)
    }

    /// The program slot `reloc` applies to, checking it is a whole slot of the section.
    fn slot_of_reloc(&self, code_idx: usize, reloc: &Reloc) -> Result<usize, LoadError> {
        let section = &self.code[code_idx];
        let size = section.slot_count as u64 * SLOT_BYTES;
        if !reloc.offset.is_multiple_of(SLOT_BYTES) || reloc.offset >= size {
            return Err(LoadError::RelocationOffset {
                section: section.name.clone(),
                offset: reloc.offset,
                size,
            });
        }
        Ok(section.base + (reloc.offset / SLOT_BYTES) as usize)
    }

    fn wrong_instruction(
        &self,
        code_idx: usize,
        reloc: &Reloc,
        symbol: String,
        expected: &'static str,
    ) -> LoadError {
        let slot = self.code[code_idx].base + (reloc.offset / SLOT_BYTES) as usize;
        LoadError::WrongInstruction {
            section: self.code[code_idx].name.clone(),
            offset: reloc.offset,
            kind: relocation_name(reloc.r_type).unwrap_or("relocation"),
            symbol,
            opcode: self.insns[slot].opc,
            expected,
        }
    }

    /// `R_BPF_64_64`: points an `lddw` at a global data section.
    fn relocate_lddw(
        &mut self,
        code_idx: usize,
        slot: usize,
        reloc: &Reloc,
    ) -> Result<(), LoadError> {
        let section = &self.code[code_idx];
        let symbol = self.object.symbol(section.idx, reloc)?;
        if self.insns[slot].opc != OP_LDDW {
            return Err(self.wrong_instruction(code_idx, reloc, symbol.name, "lddw"));
        }
        let section_name = section.name.clone();
        if slot + 1 >= section.base + section.slot_count {
            return Err(LoadError::TruncatedLddw {
                section: section_name,
                offset: reloc.offset,
            });
        }
        let (target, value) = match symbol.place {
            Place::Section { section, value } => (section, value),
            Place::Undefined => {
                return Err(LoadError::UndefinedSymbol {
                    section: section_name,
                    offset: reloc.offset,
                    symbol: symbol.name,
                })
            }
            Place::Common => {
                return Err(LoadError::CommonSymbol {
                    section: section_name,
                    offset: reloc.offset,
                    symbol: symbol.name,
                })
            }
            Place::Absolute => return Err(self.unsupported(code_idx, reloc)),
        };
        let n = self.global_index(code_idx, reloc, &symbol.name, target)?;
        let size = self.object.section_size(target)?;
        if value > size {
            return Err(LoadError::SymbolOutOfSection {
                symbol: symbol.name,
                target: self.object.section_name(target),
                value,
                size,
            });
        }
        // value <= GLOBAL_SECTION_SIZE_MAX, so the sum stays far from overflow. Offsets
        // outside the section are kept as the program computes them: they fault on use.
        let offset = value as i64 + i64::from(self.insns[slot].imm);
        let region = GlobalSection::region(n).expect("global_index keeps n below GLOBALS_COUNT");
        let addr = region.vaddr(0).wrapping_add_signed(offset);
        self.insns[slot].src = 0;
        self.insns[slot].imm = addr as u32 as i32;
        self.insns[slot + 1].imm = (addr >> 32) as u32 as i32;
        Ok(())
    }

    /// The global number of data section `target`, mapping it on first use.
    fn global_index(
        &mut self,
        code_idx: usize,
        reloc: &Reloc,
        symbol: &str,
        target: SectionIndex,
    ) -> Result<usize, LoadError> {
        if let Some(n) = self.globals.iter().position(|&g| g == target) {
            return Ok(n);
        }
        let name = self.object.section_name(target);
        let header = self.object.header(target)?;
        let is_data_name = [".rodata", ".data", ".bss"]
            .iter()
            .any(|p| name.starts_with(p));
        let flags = header.sh_flags(LittleEndian);
        let allocated = flags & u64::from(elf::SHF_ALLOC) != 0;
        let executable = flags & u64::from(elf::SHF_EXECINSTR) != 0;
        if !is_data_name || !allocated || executable {
            return Err(LoadError::UnsupportedDataSection {
                section: self.code[code_idx].name.clone(),
                offset: reloc.offset,
                symbol: symbol.to_string(),
                target: name,
            });
        }
        let size = header.sh_size(LittleEndian);
        if size > GLOBAL_SECTION_SIZE_MAX as u64 {
            return Err(LoadError::GlobalTooLarge {
                section: name,
                size,
                limit: GLOBAL_SECTION_SIZE_MAX,
            });
        }
        if self.globals.len() >= GLOBAL_SECTIONS_MAX {
            return Err(LoadError::TooManyGlobals {
                count: self.globals.len() + 1,
                limit: GLOBAL_SECTIONS_MAX,
            });
        }
        self.globals.push(target);
        Ok(self.globals.len() - 1)
    }

    /// `R_BPF_64_32`: turns a `call` into a local call or a helper call.
    fn relocate_call(
        &mut self,
        code_idx: usize,
        slot: usize,
        reloc: &Reloc,
        functions: &FunctionTable,
    ) -> Result<(), LoadError> {
        let section = &self.code[code_idx];
        let symbol = self.object.symbol(section.idx, reloc)?;
        if self.insns[slot].opc != OP_CALL {
            return Err(self.wrong_instruction(code_idx, reloc, symbol.name, "call"));
        }
        let (target_idx, value) = match symbol.place {
            Place::Undefined => {
                let Some(sig) = functions.by_name(&symbol.name) else {
                    return Err(LoadError::UnknownFunction {
                        name: symbol.name,
                        section: section.name.clone(),
                        offset: reloc.offset,
                    });
                };
                let Ok(id) = i32::try_from(sig.id) else {
                    return Err(LoadError::FunctionIdTooLarge {
                        name: symbol.name,
                        id: sig.id,
                    });
                };
                self.insns[slot].src = 0;
                self.insns[slot].imm = id;
                return Ok(());
            }
            Place::Section { section, value } if self.object.is_code(section) => (section, value),
            _ => {
                return Err(LoadError::CallTargetNotCode {
                    section: section.name.clone(),
                    offset: reloc.offset,
                    symbol: symbol.name,
                })
            }
        };
        let target = self
            .code
            .iter()
            .find(|c| c.idx == target_idx)
            .expect("reachable_code loaded every section a call relocation names");
        // libbpf's rule, which fits both encodings clang uses (see the module doc).
        let index = (value / SLOT_BYTES) as i64 + i64::from(self.insns[slot].imm) + 1;
        if !value.is_multiple_of(SLOT_BYTES) || index < 0 || index >= target.slot_count as i64 {
            return Err(LoadError::CallTargetOutOfRange {
                section: section.name.clone(),
                offset: reloc.offset,
                target_section: target.name.clone(),
                target: index,
                slot_count: target.slot_count as u64,
            });
        }
        let target_slot = target.base as i64 + index;
        self.insns[slot].src = CALL_SRC_LOCAL;
        self.insns[slot].imm = i32::try_from(target_slot - slot as i64 - 1)
            .expect("programs are shorter than 2^31 slots");
        Ok(())
    }

    /// Checks that local calls without a relocation (pc-relative, resolved by clang)
    /// land inside their own section, the only place clang points them.
    fn check_local_calls(&self, code_idx: usize) -> Result<(), LoadError> {
        let section = &self.code[code_idx];
        for slot in section.base..section.base + section.slot_count {
            let insn = self.insns[slot];
            if insn.opc != OP_CALL || insn.src != CALL_SRC_LOCAL || self.relocated.contains(&slot) {
                continue;
            }
            let target = slot as i64 + i64::from(insn.imm) + 1;
            let end = (section.base + section.slot_count) as i64;
            if target < section.base as i64 || target >= end {
                return Err(LoadError::CallTargetOutOfRange {
                    section: section.name.clone(),
                    offset: ((slot - section.base) as u64) * SLOT_BYTES,
                    target_section: section.name.clone(),
                    target: target - section.base as i64,
                    slot_count: section.slot_count as u64,
                });
            }
        }
        Ok(())
    }

    /// Copies the mapped data sections, refusing any that carries relocations.
    fn finish_globals(&self) -> Result<Vec<GlobalSection>, LoadError> {
        let mut globals = Vec::with_capacity(self.globals.len());
        for &idx in &self.globals {
            let name = self.object.section_name(idx);
            if let Some(reloc) = self
                .object
                .relocations(idx)?
                .iter()
                .find(|r| r.r_type != R_BPF_NONE)
            {
                return Err(self.object.refuse(idx, reloc));
            }
            let header = self.object.header(idx)?;
            let size = header.sh_size(LittleEndian);
            assert!(
                size <= GLOBAL_SECTION_SIZE_MAX as u64,
                "global_index checked the size"
            );
            let data = if header.sh_type(LittleEndian) == elf::SHT_NOBITS {
                vec![0u8; size as usize]
            } else {
                header
                    .data(LittleEndian, self.object.data)
                    .map_err(malformed)?
                    .to_vec()
            };
            globals.push(GlobalSection {
                writable: !name.starts_with(".rodata"),
                name,
                data,
            });
        }
        assert!(globals.len() <= GLOBAL_SECTIONS_MAX);
        Ok(globals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip() {
        let bytes = [0xb7, 0x00, 0, 0, 7, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        let program = load_raw("seven", &bytes).expect("two whole slots");
        assert_eq!(program.entry, 0);
        assert_eq!(program.insns.len(), 2);
        assert_eq!(program.insns[0].imm, 7);
        assert_eq!(program.name, "seven");
    }

    #[test]
    fn raw_errors() {
        assert_eq!(
            load_raw("x", &[]),
            Err(LoadError::Raw {
                source: DecodeError::Empty
            })
        );
        assert_eq!(
            load_raw("x", &[0; 12]),
            Err(LoadError::Raw {
                source: DecodeError::Misaligned { len: 12 }
            })
        );
    }

    #[test]
    fn header_errors() {
        let table = FunctionTable::new();
        assert_eq!(
            load_elf(b"\x7fEL", None, &table),
            Err(LoadError::NotElf { len: 3 })
        );
        let mut ident = [0u8; 64];
        ident[..4].copy_from_slice(&elf::ELFMAG);
        ident[IDENT_CLASS] = elf::ELFCLASS32;
        assert_eq!(list_programs(&ident), Err(LoadError::NotElf64 { class: 1 }));
        ident[IDENT_CLASS] = elf::ELFCLASS64;
        ident[IDENT_DATA] = elf::ELFDATA2MSB;
        assert_eq!(
            list_programs(&ident),
            Err(LoadError::NotLittleEndian { encoding: 2 })
        );
    }

    #[test]
    fn relocation_names() {
        assert_eq!(relocation_name(R_BPF_64_32), Some("R_BPF_64_32"));
        assert_eq!(relocation_name(11), None);
    }
}
