//! The loader against real clang output: raw bytecode, ELF objects, their relocations.
//!
//! Method: every C program under `tests/c` is compiled during the test by each compiler
//! variant present (`clang -O2 -target bpf -c`, clang 14 with and without `-g`, clang 19
//! at `-mcpu=v1`, `v3` and `v4`, with and without `-g`). Structural tests check the
//! loaded `Program` (entry, rewritten slots, globals) and the typed errors; run tests
//! verify and interpret the programs and compare r0 with a Rust model of the C code;
//! mutation tests patch relocations by hand and a property test flips bytes of real
//! objects, asserting the loader never panics. A missing `clang` or `clang-19` fails the
//! tests, naming `scripts/setup.sh` (`csx_testkit::tools`); no variant is ever dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use csx_ebpf::engine::{Engine, RunOptions};
use csx_ebpf::helper::{ArgKind, FunctionSig, FunctionTable, HelperAbort, HelperHost};
use csx_ebpf::interp::Interpreter;
use csx_ebpf::isa::{encode_all, CALL_SRC_LOCAL, OP_CALL, OP_LDDW};
use csx_ebpf::limits::GLOBAL_SECTIONS_MAX;
use csx_ebpf::loader::{list_programs, load_elf, load_raw, undefined_functions, LoadError};
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::Program;
use csx_ebpf::trap::TrapKind;
use csx_ebpf::verifier::verify;
use csx_testkit::tools;
use object::elf;
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::LittleEndian;
use proptest::prelude::*;

/// One way of compiling the test programs.
struct Variant {
    label: &'static str,
    /// The compiler, found by `csx_testkit::tools` (which fails loudly without it).
    compiler: fn() -> &'static Path,
    flags: &'static [&'static str],
}

const VARIANTS: &[Variant] = &[
    Variant {
        label: "clang",
        compiler: tools::clang,
        flags: &[],
    },
    Variant {
        label: "clang -g",
        compiler: tools::clang,
        flags: &["-g"],
    },
    Variant {
        label: "clang-19 v1",
        compiler: tools::clang_19,
        flags: &["-mcpu=v1"],
    },
    Variant {
        label: "clang-19 v3",
        compiler: tools::clang_19,
        flags: &["-mcpu=v3"],
    },
    Variant {
        label: "clang-19 v3 -g",
        compiler: tools::clang_19,
        flags: &["-mcpu=v3", "-g"],
    },
    Variant {
        label: "clang-19 v4",
        compiler: tools::clang_19,
        flags: &["-mcpu=v4"],
    },
    Variant {
        label: "clang-19 v4 -g",
        compiler: tools::clang_19,
        flags: &["-mcpu=v4", "-g"],
    },
];

fn source_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Compiles `tests/c/{source}` with `variant` (once per test binary) and returns the object.
fn compile(source: &str, variant: &Variant) -> Arc<Vec<u8>> {
    type Cache = Mutex<HashMap<(String, &'static str), Arc<Vec<u8>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (source.to_string(), variant.label);
    if let Some(object) = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&key)
    {
        return object.clone();
    }
    let path = source_dir().join(source);
    // errors.c defines a COMMON symbol on purpose.
    let common: &[&str] = if source == "errors.c" {
        &["-fcommon"]
    } else {
        &[]
    };
    let flags = common.iter().chain(variant.flags);
    let object = Arc::new(tools::compile_bpf((variant.compiler)(), &path, flags));
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(key, object.clone());
    object
}

/// The object for `source` from every variant.
fn objects(source: &str) -> Vec<(&'static str, Arc<Vec<u8>>)> {
    VARIANTS
        .iter()
        .map(|v| (v.label, compile(source, v)))
        .collect()
}

/// The functions the test device offers.
fn device_functions() -> FunctionTable {
    let mut table = FunctionTable::new();
    let sigs = [
        (
            "csx_memcpy",
            3,
            vec![
                ArgKind::PtrOut { len_arg: 2 },
                ArgKind::PtrIn { len_arg: 2 },
                ArgKind::Scalar,
            ],
        ),
        ("csx_add", 7, vec![ArgKind::Scalar, ArgKind::Scalar]),
    ];
    for (name, id, args) in sigs {
        table
            .insert(FunctionSig {
                name: name.into(),
                id,
                args,
                version: 1,
                doc: String::new(),
            })
            .expect("distinct names and ids");
    }
    table
}

/// Implements `device_functions`.
struct TestHost;

impl HelperHost for TestHost {
    fn call(
        &mut self,
        id: u32,
        args: [u64; 5],
        mem: &mut MemoryMap<'_>,
    ) -> Result<u64, HelperAbort> {
        match id {
            3 => mem
                .copy(args[0], args[1], args[2])
                .map(|()| args[0])
                .map_err(|trap| HelperAbort {
                    code: -14,
                    message: trap.to_string(),
                }),
            7 => Ok(args[0].wrapping_add(args[1])),
            _ => Err(HelperAbort {
                code: -38,
                message: format!("no function {id}"),
            }),
        }
    }
}

fn load(object: &[u8], select: &str) -> Program {
    load_elf(object, Some(select), &device_functions())
        .unwrap_or_else(|e| panic!("loading {select}: {e}"))
}

fn engine(program: Program) -> Interpreter {
    let verified =
        verify(program, Arc::new(device_functions())).expect("the loaded program verifies");
    Interpreter::new(Arc::new(verified))
}

fn run_once(engine: &Interpreter, args: [u64; 5]) -> Result<u64, TrapKind> {
    let outcome = engine.run(
        &mut MemoryMap::new(),
        args,
        &RunOptions::default(),
        &mut TestHost,
    );
    outcome.result.map_err(|trap| trap.kind)
}

/// Size in bytes of section `name` of `object`, and where its contents start in the file.
fn section_range(object: &[u8], name: &str) -> (usize, usize) {
    let header = elf::FileHeader64::<LittleEndian>::parse(object).expect("clang output parses");
    let sections = header
        .sections(LittleEndian, object)
        .expect("clang output has sections");
    let section = sections
        .iter()
        .find(|s| {
            sections
                .section_name(LittleEndian, s)
                .is_ok_and(|n| n == name.as_bytes())
        })
        .unwrap_or_else(|| panic!("no section {name}"));
    (
        section.sh_offset(LittleEndian) as usize,
        section.sh_size(LittleEndian) as usize,
    )
}

/// File offset of relocation entry `n` for section `target` (an `Elf64_Rel`: r_offset at
/// +0, r_info = symbol << 32 | type at +8).
fn rel_entry(object: &[u8], target: &str, n: usize) -> usize {
    let header = elf::FileHeader64::<LittleEndian>::parse(object).expect("clang output parses");
    let sections = header
        .sections(LittleEndian, object)
        .expect("clang output has sections");
    let target_idx = sections
        .iter()
        .position(|s| {
            sections
                .section_name(LittleEndian, s)
                .is_ok_and(|name| name == target.as_bytes())
        })
        .unwrap_or_else(|| panic!("no section {target}"));
    let rel = sections
        .iter()
        .find(|s| {
            s.sh_type(LittleEndian) == elf::SHT_REL
                && s.sh_info(LittleEndian) as usize == target_idx
        })
        .unwrap_or_else(|| panic!("no relocations for {target}"));
    assert!(
        (n + 1) * 16 <= rel.sh_size(LittleEndian) as usize,
        "{target} has fewer than {} relocations",
        n + 1
    );
    rel.sh_offset(LittleEndian) as usize + n * 16
}

fn read_u64(object: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(object[at..at + 8].try_into().expect("8 bytes"))
}

fn write_u64(object: &mut [u8], at: usize, value: u64) {
    object[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// The 64-bit constant of the `lddw` at `slot`.
fn lddw_value(program: &Program, slot: usize) -> u64 {
    assert_eq!(program.insns[slot].opc, OP_LDDW);
    u64::from(program.insns[slot].imm as u32)
        | (u64::from(program.insns[slot + 1].imm as u32) << 32)
}

fn lddw_slots(program: &Program) -> Vec<usize> {
    let mut slots = Vec::new();
    let mut slot = 0;
    while slot < program.insns.len() {
        if program.insns[slot].opc == OP_LDDW {
            slots.push(slot);
            slot += 1;
        }
        slot += 1;
    }
    slots
}

/// Checks the invariants every loaded program keeps: each `lddw` of a global points
/// inside (or one past) its section, and every local call lands in the program.
fn check_program(label: &str, program: &Program) {
    assert!(
        (program.entry as usize) < program.insns.len(),
        "{label}: entry in range"
    );
    assert!(program.globals.len() <= GLOBAL_SECTIONS_MAX);
    for slot in lddw_slots(program) {
        assert_eq!(
            program.insns[slot].src, 0,
            "{label}: lddw at {slot} still has a pseudo source"
        );
        let value = lddw_value(program, slot);
        // Plain 64-bit constants are left alone; the test programs use none that look
        // like a global's address.
        let region = (value >> 32) as u32;
        let n = region.wrapping_sub(RegionIdx::GLOBALS_FIRST.0);
        if n >= RegionIdx::GLOBALS_COUNT {
            continue;
        }
        let global = program
            .globals
            .get(n as usize)
            .unwrap_or_else(|| panic!("{label}: lddw {value:#x} names no global"));
        assert!(
            (value as u32 as usize) <= global.data.len(),
            "{label}: lddw {value:#x} beyond {}",
            global.name
        );
    }
    for (slot, insn) in program.insns.iter().enumerate() {
        if insn.opc == OP_CALL && insn.src == CALL_SRC_LOCAL {
            let target = slot as i64 + i64::from(insn.imm) + 1;
            assert!(
                (0..program.insns.len() as i64).contains(&target),
                "{label}: call at {slot} to {target}"
            );
        }
    }
}

#[test]
fn raw_bytecode_loads_at_slot_zero() {
    for (label, object) in objects("loops.c") {
        let program = load(&object, "collatz");
        let raw = load_raw("collatz.bin", &encode_all(&program.insns)).expect("whole slots");
        assert_eq!(raw.insns, program.insns, "{label}");
        assert_eq!(raw.entry, 0);
        assert_eq!(raw.name, "collatz.bin");
        assert!(raw.globals.is_empty());
    }
    assert!(matches!(
        load_raw("short", &[0x95; 7]),
        Err(LoadError::Raw { .. })
    ));
}

#[test]
fn programs_are_chosen_by_symbol_or_section() {
    for (label, object) in objects("sections.c") {
        for (select, name) in [
            ("second", "second"),
            ("csx/first", "first"),
            ("pair_b", "pair_b"),
        ] {
            let program = load(&object, select);
            assert_eq!(program.name, name, "{label}: {select}");
            check_program(label, &program);
        }
        // Only the chosen section is loaded: `mov r0, 2; exit`.
        let second = load(&object, "csx/second");
        assert_eq!((second.insns.len(), second.entry), (2, 0), "{label}");
        // Two functions share csx/pair; the second starts at slot 2.
        assert_eq!(load(&object, "pair_b").entry, 2, "{label}");
        assert_eq!(load(&object, "pair_a").entry, 0, "{label}");
    }
}

#[test]
fn unclear_choices_list_the_candidates() {
    for (label, object) in objects("sections.c") {
        let table = device_functions();
        let err = load_elf(&object, None, &table).expect_err("four programs");
        let message = err.to_string();
        for name in [
            "first (csx/first)",
            "second (csx/second)",
            "pair_a (csx/pair)",
            "pair_b (csx/pair)",
        ] {
            assert!(message.contains(name), "{label}: {message}");
        }
        assert!(
            matches!(err, LoadError::AmbiguousProgram { select: None, ref candidates } if candidates.len() == 4)
        );
        let err = load_elf(&object, Some("csx/pair"), &table).expect_err("two in csx/pair");
        assert!(
            matches!(err, LoadError::AmbiguousProgram { ref candidates, .. } if candidates.len() == 2),
            "{err}"
        );
        let err = load_elf(&object, Some("third"), &table).expect_err("no third");
        assert!(
            matches!(err, LoadError::ProgramNotFound { ref select, .. } if select == "third"),
            "{err}"
        );
        assert!(err.to_string().contains("first (csx/first)"), "{err}");
    }
}

#[test]
fn a_single_program_needs_no_name() {
    for (label, object) in objects("single.c") {
        let program = load_elf(&object, None, &device_functions()).expect("one global function");
        assert_eq!(program.name, "only", "{label}");
        check_program(label, &program);
    }
    // calls.c has a global library function in .text and one program outside it.
    for (label, object) in objects("calls.c") {
        let program =
            load_elf(&object, None, &device_functions()).expect("one program outside .text");
        assert_eq!(program.name, "calls", "{label}");
    }
}

#[test]
fn programs_are_listed_with_sections_and_sizes() {
    for (label, object) in objects("sections.c") {
        let listed: Vec<(String, String, u64)> = list_programs(&object)
            .expect("parses")
            .into_iter()
            .map(|p| (p.name, p.section, p.slot_count))
            .collect();
        let expected = [
            ("first", "csx/first"),
            ("second", "csx/second"),
            ("pair_a", "csx/pair"),
            ("pair_b", "csx/pair"),
        ];
        assert_eq!(listed.len(), expected.len(), "{label}: {listed:?}");
        for (name, section) in expected {
            assert!(
                listed.contains(&(name.into(), section.into(), 2)),
                "{label}: {name} in {listed:?}"
            );
        }
    }
    for (label, object) in objects("calls.c") {
        let names: Vec<String> = list_programs(&object)
            .expect("parses")
            .into_iter()
            .map(|p| p.name)
            .collect();
        // `square` and `triple` are static: not programs.
        let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["add3", "calls", "plus1"], "{label}");
    }
}

/// The program slot of every function symbol, if the executable sections of `object`
/// named in `loaded` are laid out one after another in file order.
fn function_slots(object: &[u8], loaded: &[&str]) -> HashMap<String, i64> {
    let header = elf::FileHeader64::<LittleEndian>::parse(object).expect("clang output parses");
    let sections = header
        .sections(LittleEndian, object)
        .expect("clang output has sections");
    let mut bases = HashMap::new();
    let mut base = 0;
    for (idx, section) in sections.enumerate() {
        let name = sections.section_name(LittleEndian, section).expect("named");
        if loaded.iter().any(|l| l.as_bytes() == name) {
            bases.insert(idx, base);
            base += section.sh_size(LittleEndian) as i64 / 8;
        }
    }
    let symbols = sections
        .symbols(LittleEndian, object, elf::SHT_SYMTAB)
        .expect("symtab");
    let mut slots = HashMap::new();
    for (idx, sym) in symbols.enumerate() {
        let section = symbols
            .symbol_section(LittleEndian, sym, idx)
            .expect("valid");
        if let (elf::STT_FUNC, Some(base)) = (sym.st_type(), section.and_then(|s| bases.get(&s))) {
            let name =
                String::from_utf8_lossy(symbols.symbol_name(LittleEndian, sym).expect("named"));
            slots.insert(
                name.into_owned(),
                base + sym.st_value(LittleEndian) as i64 / 8,
            );
        }
    }
    slots
}

#[test]
fn local_calls_point_into_the_combined_program() {
    for (label, object) in objects("calls.c") {
        let program = load(&object, "calls");
        check_program(label, &program);
        // .text (square, plus1, add3), csx/lib (triple) and csx/calls are all loaded.
        let loaded = [".text", "csx/lib", "csx/calls"];
        let slots: usize = loaded.iter().map(|s| section_range(&object, s).1 / 8).sum();
        assert_eq!(program.insns.len(), slots, "{label}");
        let functions = function_slots(&object, &loaded);
        assert_eq!(i64::from(program.entry), functions["calls"], "{label}");
        let mut callees: Vec<&str> = program
            .insns
            .iter()
            .enumerate()
            .filter(|(_, i)| i.opc == OP_CALL)
            .map(|(slot, i)| {
                assert_eq!(i.src, CALL_SRC_LOCAL, "{label}: only local calls");
                let target = slot as i64 + i64::from(i.imm) + 1;
                let callee = functions.iter().find(|(_, &start)| start == target);
                callee.map_or("?", |(name, _)| name.as_str())
            })
            .collect();
        callees.sort_unstable();
        // calls → square, add3, triple; add3 → square (no relocation), plus1 (relocation).
        assert_eq!(
            callees,
            ["add3", "plus1", "square", "square", "triple"],
            "{label}"
        );
    }
}

#[test]
fn extern_functions_resolve_by_name() {
    for (label, object) in objects("externs.c") {
        let program = load(&object, "use_externs");
        check_program(label, &program);
        let helpers: Vec<(u8, i32)> = program
            .insns
            .iter()
            .filter(|i| i.opc == OP_CALL)
            .map(|i| (i.src, i.imm))
            .collect();
        assert_eq!(
            helpers,
            [(0, 3), (0, 7)],
            "{label}: csx_memcpy then csx_add"
        );
        // A helper called by fixed id has no relocation and stays as it is.
        let fixed = load(&object, "use_fixed");
        assert!(
            fixed
                .insns
                .iter()
                .any(|i| i.opc == OP_CALL && i.src == 0 && i.imm == 7),
            "{label}"
        );
        assert_eq!(
            undefined_functions(&object).expect("parses"),
            ["csx_add", "csx_memcpy"],
            "{label}"
        );
    }
}

#[test]
fn unknown_extern_functions_are_named() {
    for (label, object) in objects("unknown.c") {
        let err =
            load_elf(&object, Some("unknown"), &device_functions()).expect_err("unknown function");
        assert!(
            matches!(&err, LoadError::UnknownFunction { name, section, .. }
                if name == "csx_no_such_function" && section == "csx/unknown"),
            "{label}: {err:?}"
        );
        assert!(
            err.to_string().contains("csx_no_such_function"),
            "{label}: {err}"
        );
        // The other program never reaches the unknown call, so it loads.
        load(&object, "known");
        assert_eq!(
            undefined_functions(&object).expect("parses"),
            ["csx_no_such_function"],
            "{label}"
        );
    }
}

#[test]
fn globals_are_mapped_per_section() {
    for (label, object) in objects("globals.c") {
        let bss = load(&object, "bump_bss");
        check_program(label, &bss);
        assert_eq!(bss.globals.len(), 1, "{label}");
        assert_eq!(bss.globals[0].name, ".bss");
        assert!(bss.globals[0].writable);
        assert!(bss.globals[0].data.iter().all(|&b| b == 0));
        let lddw = lddw_slots(&bss)[0];
        assert_eq!(
            lddw_value(&bss, lddw) >> 32,
            u64::from(RegionIdx::GLOBALS_FIRST.0),
            "{label}"
        );

        let data = load(&object, "bump_data");
        assert_eq!(
            (data.globals[0].name.as_str(), data.globals[0].writable),
            (".data", true),
            "{label}"
        );
        assert!(
            data.globals[0]
                .data
                .windows(8)
                .any(|w| w == 40u64.to_le_bytes()),
            "{label}"
        );

        let table = load(&object, "prime_sum");
        assert_eq!(table.globals.len(), 1, "{label}");
        assert!(
            table.globals[0].name.starts_with(".rodata") && !table.globals[0].writable,
            "{label}"
        );
        let primes: Vec<u8> = [2u32, 3, 5, 7]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        assert!(
            table.globals[0].data.windows(16).any(|w| w == primes),
            "{label}"
        );

        let literal = load(&object, "literal_at");
        assert!(
            literal.globals[0].name.starts_with(".rodata.str"),
            "{label}: {}",
            literal.globals[0].name
        );
        assert!(
            literal.globals[0].data.starts_with(b"a string literal\0"),
            "{label}"
        );

        // Regions are numbered in order of first use, and each section is mapped once.
        let all = load(&object, "all_globals");
        check_program(label, &all);
        let mut names: Vec<&str> = all.globals.iter().map(|g| g.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, [".bss", ".data", ".rodata"], "{label}");
        for slot in lddw_slots(&all) {
            let region = (lddw_value(&all, slot) >> 32) as u32;
            assert!(
                (RegionIdx::GLOBALS_FIRST.0..RegionIdx::GLOBALS_FIRST.0 + 3).contains(&region),
                "{label}"
            );
        }
    }
}

#[test]
fn constructs_the_loader_refuses_are_named() {
    let table = device_functions();
    for (label, object) in objects("errors.c") {
        let err = load_elf(&object, Some("use_extern_var"), &table).expect_err("extern variable");
        assert!(
            matches!(&err, LoadError::UndefinedSymbol { symbol, .. } if symbol == "ext_var"),
            "{label}: {err:?}"
        );
        let err = load_elf(&object, Some("use_common"), &table).expect_err("common symbol");
        assert!(
            matches!(&err, LoadError::CommonSymbol { symbol, .. } if symbol == "common_var"),
            "{label}: {err:?}"
        );
        let err = load_elf(&object, Some("use_custom_section"), &table).expect_err("csx_cfg");
        assert!(
            matches!(&err, LoadError::UnsupportedDataSection { target, symbol, .. } if target == "csx_cfg" && symbol == "cfg"),
            "{label}: {err:?}"
        );
        let err = load_elf(&object, Some("use_fn_table"), &table).expect_err("function pointers");
        assert!(
            matches!(&err, LoadError::UnsupportedRelocation { section, offset: 0, kind: "R_BPF_64_ABS64", .. } if section == ".data"),
            "{label}: {err:?}"
        );
        assert!(err.to_string().contains(".data+0x0"), "{label}: {err}");
        let err = load_elf(&object, Some("use_many_globals"), &table).expect_err("11 sections");
        assert_eq!(
            err,
            LoadError::TooManyGlobals {
                count: GLOBAL_SECTIONS_MAX + 1,
                limit: GLOBAL_SECTIONS_MAX
            },
            "{label}"
        );
        let err = load_elf(&object, Some("use_huge"), &table).expect_err("huge .bss");
        assert!(
            matches!(&err, LoadError::GlobalTooLarge { section, size, .. }
                if section == ".bss" && *size == (1 << 20) + 8),
            "{label}: {err:?}"
        );
    }
}

#[test]
fn malformed_headers_are_typed_errors() {
    let table = device_functions();
    let (_, object) = objects("single.c").swap_remove(0);
    let patched = |at: usize, bytes: &[u8]| {
        let mut copy = object.to_vec();
        copy[at..at + bytes.len()].copy_from_slice(bytes);
        load_elf(&copy, None, &table)
    };
    assert_eq!(
        patched(18, &62u16.to_le_bytes()),
        Err(LoadError::WrongMachine { machine: 62 })
    );
    assert_eq!(
        patched(16, &2u16.to_le_bytes()),
        Err(LoadError::NotRelocatable { e_type: 2 })
    );
    assert_eq!(patched(4, &[1]), Err(LoadError::NotElf64 { class: 1 }));
    assert_eq!(
        patched(5, &[2]),
        Err(LoadError::NotLittleEndian { encoding: 2 })
    );
    assert_eq!(
        patched(0, b"\x7fELG"),
        Err(LoadError::NotElf { len: object.len() })
    );
    assert!(
        matches!(patched(6, &[9]), Err(LoadError::Malformed { .. })),
        "bad ELF version"
    );
    assert_eq!(
        load_elf(b"garbage", None, &table),
        Err(LoadError::NotElf { len: 7 })
    );
    assert_eq!(
        load_elf(&[], None, &table),
        Err(LoadError::NotElf { len: 0 })
    );
    // Cut short anywhere, the object is refused without a panic.
    for len in (0..object.len()).step_by(7) {
        assert!(
            load_elf(&object[..len], None, &table).is_err(),
            "truncated to {len} bytes"
        );
    }
    // Misaligned input parses like aligned input.
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&object);
    assert_eq!(
        load_elf(&shifted[1..], None, &table),
        load_elf(&object, None, &table)
    );
}

/// Loads `select` from a copy of `object` changed by `patch`.
fn load_patched(
    object: &[u8],
    select: &str,
    patch: impl FnOnce(&mut Vec<u8>),
) -> Result<Program, LoadError> {
    let mut copy = object.to_vec();
    patch(&mut copy);
    load_elf(&copy, Some(select), &device_functions())
}

#[test]
fn malformed_relocations_are_typed_errors() {
    for (label, object) in objects("globals.c") {
        let rel = rel_entry(&object, "csx/bss", 0);
        let (text_at, text_size) = section_range(&object, "csx/bss");
        let info = read_u64(&object, rel + 8);
        let err =
            load_patched(&object, "bump_bss", |o| write_u64(o, rel, 4)).expect_err("mid-slot");
        assert!(
            matches!(err, LoadError::RelocationOffset { offset: 4, .. }),
            "{label}: {err:?}"
        );
        let past_end = text_size as u64 + 8;
        let err = load_patched(&object, "bump_bss", |o| write_u64(o, rel, past_end))
            .expect_err("past the end");
        assert!(
            matches!(err, LoadError::RelocationOffset { offset, .. } if offset == past_end),
            "{label}: {err:?}"
        );
        // The last slot is `exit`, not `lddw`.
        let last = text_size as u64 - 8;
        let err = load_patched(&object, "bump_bss", |o| write_u64(o, rel, last))
            .expect_err("not an lddw");
        assert!(
            matches!(
                err,
                LoadError::WrongInstruction {
                    kind: "R_BPF_64_64",
                    expected: "lddw",
                    opcode: 0x95,
                    ..
                }
            ),
            "{label}: {err:?}"
        );
        // An `lddw` opcode in the last slot is cut off by the end of the section.
        let err = load_patched(&object, "bump_bss", |o| {
            write_u64(o, rel, last);
            o[text_at + last as usize] = OP_LDDW;
        })
        .expect_err("truncated lddw");
        assert!(
            matches!(err, LoadError::TruncatedLddw { .. }),
            "{label}: {err:?}"
        );
        let err = load_patched(&object, "bump_bss", |o| {
            write_u64(o, rel + 8, info & !0xffff_ffff | 77)
        })
        .expect_err("unknown type");
        assert!(
            matches!(err, LoadError::UnknownRelocation { r_type: 77, .. }),
            "{label}: {err:?}"
        );
        let err = load_patched(&object, "bump_bss", |o| {
            write_u64(o, rel + 8, info & !0xffff_ffff | 2)
        })
        .expect_err("ABS64 in code");
        assert!(
            matches!(
                err,
                LoadError::UnsupportedRelocation {
                    kind: "R_BPF_64_ABS64",
                    ..
                }
            ),
            "{label}: {err:?}"
        );
        let err = load_patched(&object, "bump_bss", |o| {
            write_u64(o, rel + 8, (9999 << 32) | 1)
        })
        .expect_err("bad symbol");
        assert!(
            matches!(err, LoadError::BadSymbolIndex { index: 9999, .. }),
            "{label}: {err:?}"
        );
        // Two relocations on one slot.
        let first = read_u64(&object, rel_entry(&object, "csx/all", 0));
        let second = rel_entry(&object, "csx/all", 1);
        let err = load_patched(&object, "all_globals", |o| write_u64(o, second, first))
            .expect_err("duplicate");
        assert!(
            matches!(err, LoadError::DuplicateRelocation { .. }),
            "{label}: {err:?}"
        );
    }
}

#[test]
fn call_relocations_are_checked() {
    for (label, object) in objects("calls.c") {
        let (calls_at, _) = section_range(&object, "csx/calls");
        // The first call in csx/calls goes to `square` through the .text section symbol,
        // with the target in imm; point it far past the end of .text.
        let rel = rel_entry(&object, "csx/calls", 0);
        let call_at = calls_at + read_u64(&object, rel) as usize;
        assert_eq!(object[call_at], OP_CALL, "{label}");
        let err = load_patched(&object, "calls", |o| {
            o[call_at + 4..call_at + 8].copy_from_slice(&1000i32.to_le_bytes())
        })
        .expect_err("target out of range");
        assert!(
            matches!(&err, LoadError::CallTargetOutOfRange { target_section, target: 1001, .. } if target_section == ".text"),
            "{label}: {err:?}"
        );
        // A call relocation on something other than a call.
        let err = load_patched(&object, "calls", |o| o[call_at] = 0xb7).expect_err("not a call");
        assert!(
            matches!(
                err,
                LoadError::WrongInstruction {
                    expected: "call",
                    opcode: 0xb7,
                    ..
                }
            ),
            "{label}: {err:?}"
        );
    }
}

/// Expected result of running one program.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Value(u64),
    ReadOnlyTrap,
}

/// The insertion-sort checksum of `sort_checksum` in loops.c.
fn sort_checksum(mut seed: u64) -> u64 {
    let mut v = [0u32; 32];
    for x in &mut v {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *x = (seed >> 33) as u32;
    }
    v.sort_unstable();
    v.iter()
        .enumerate()
        .map(|(i, &x)| u64::from(x) * (i as u64 + 1))
        .sum()
}

fn collatz(mut n: u64) -> u64 {
    let mut steps = 0;
    while n > 1 {
        n = if n & 1 == 1 { 3 * n + 1 } else { n / 2 };
        steps += 1;
    }
    steps
}

const PRIMES: [u64; 16] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53];
const TEXT: &[u8] = b"the quick brown fox jumps over the lazy dog";

/// (source, program, r1, r2, expected).
fn run_cases() -> Vec<(&'static str, &'static str, u64, u64, Expect)> {
    use Expect::*;
    let count = |start: usize, c: u8| TEXT[start & 31..].iter().filter(|&&b| b == c).count() as u64;
    let greeting: u64 = b"hello, device\0".iter().map(|&b| u64::from(b)).sum();
    vec![
        ("loops.c", "collatz", 27, 0, Value(collatz(27))),
        ("loops.c", "collatz", 1, 0, Value(0)),
        (
            "loops.c",
            "sort_checksum",
            12345,
            0,
            Value(sort_checksum(12345)),
        ),
        ("loops.c", "sort_checksum", 0, 0, Value(sort_checksum(0))),
        ("globals.c", "bump_bss", 0, 0, Value(1)),
        ("globals.c", "bump_data", 0, 0, Value(42)),
        ("globals.c", "bump_static", 0, 0, Value(6)),
        (
            "globals.c",
            "prime_sum",
            20,
            0,
            Value(PRIMES.iter().sum::<u64>() + PRIMES[..4].iter().sum::<u64>()),
        ),
        (
            "globals.c",
            "count_char",
            0,
            u64::from(b'o'),
            Value(count(0, b'o')),
        ),
        (
            "globals.c",
            "count_char",
            13,
            u64::from(b'e'),
            Value(count(13, b'e')),
        ),
        ("globals.c", "literal_at", 2, 0, Value(u64::from(b's'))),
        ("globals.c", "literal_at", 17, 0, Value(u64::from(b' '))),
        (
            "globals.c",
            "all_globals",
            5,
            0,
            Value(40 + 5 + PRIMES[5] + u64::from(TEXT[5])),
        ),
        ("globals.c", "write_rodata", 3, 0, ReadOnlyTrap),
        ("calls.c", "calls", 7, 0, Value(49 + (49 + 2 + 2) + 21)),
        ("externs.c", "use_externs", 100, 0, Value(greeting + 100)),
        ("externs.c", "use_fixed", 41, 0, Value(42)),
        ("single.c", "only", 20, 0, Value(41)),
        ("sections.c", "pair_b", 0, 0, Value(4)),
        ("unknown.c", "known", 9, 0, Value(10)),
    ]
}

#[test]
fn loaded_programs_run() {
    for (source, select, r1, r2, expect) in run_cases() {
        for (label, object) in objects(source) {
            let program = load(&object, select);
            check_program(label, &program);
            let result = run_once(&engine(program), [r1, r2, 0, 0, 0]);
            let what = format!("{label}: {select}({r1}, {r2})");
            match expect {
                Expect::Value(value) => assert_eq!(result, Ok(value), "{what}"),
                Expect::ReadOnlyTrap => {
                    assert!(
                        matches!(result, Err(TrapKind::ReadOnly { size: 1, .. })),
                        "{what}: {result:?}"
                    )
                }
            }
        }
    }
}

#[test]
fn writable_globals_start_fresh_every_run() {
    for (label, object) in objects("globals.c") {
        for (select, expected) in [("bump_bss", 1), ("bump_data", 42), ("bump_static", 6)] {
            let engine = engine(load(&object, select));
            for run in 0..3 {
                assert_eq!(
                    run_once(&engine, [0; 5]),
                    Ok(expected),
                    "{label}: {select} run {run}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Flips bytes of real objects, anywhere or in the section headers (at the end of
    /// clang's output), and optionally truncates: every entry point returns, no panic.
    #[test]
    fn mutated_objects_never_panic(
        source in prop::sample::select(vec!["calls.c", "globals.c", "externs.c", "errors.c"]),
        debug in any::<bool>(),
        writes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..8),
        cut in prop::option::weighted(0.2, any::<prop::sample::Index>()),
    ) {
        let variant = &VARIANTS[usize::from(debug)];
        let mut object = compile(source, variant).to_vec();
        let len = object.len();
        for (at, byte, near_end) in writes {
            let at = if near_end { len - 1 - at.index(len / 4) } else { at.index(len) };
            object[at] = byte;
        }
        if let Some(cut) = cut {
            object.truncate(cut.index(len));
        }
        let table = device_functions();
        for select in [None, Some("calls"), Some("all_globals"), Some("use_externs"), Some("csx/fn_table")] {
            if let Ok(program) = load_elf(&object, select, &table) {
                prop_assert!((program.entry as usize) < program.insns.len());
            }
        }
        let _ = list_programs(&object);
        let _ = undefined_functions(&object);
    }
}
