//! Our own eBPF vectors (`tests/vectors/**/*.data`): the parser, and the one runner that
//! runs each vector on every engine in [`crate::engines::all`].
//!
//! # Format
//! The uBPF / bpf_conformance `.data` format, with extensions. A file is a list of
//! sections, each opened by a line `-- <name>`; `#` starts a comment anywhere (lines
//! before the first section describe the vector).
//!
//! | section          | body                                                         |
//! |------------------|--------------------------------------------------------------|
//! | `asm`            | the program, in the syntax of `csx_ebpf::asm` (required)     |
//! | `mem`            | hex bytes (`00 01 ff`), mapped read-write, default empty     |
//! | `rodata`         | hex bytes, mapped read-only                                  |
//! | `result`         | expected r0 at exit (`0x..`, decimal, or negative decimal)   |
//! | `error`          | expected trap, one line, see below                           |
//! | `verify-error`   | expected substring of the verifier's error message           |
//! | `fuel`           | fuel budget of the run, default [`FUEL_DEFAULT_VECTORS`]     |
//! | `fuel-used`      | expected fuel charged by the run (trapped or not)            |
//! | `mem-after`      | expected `mem` bytes after the run                           |
//! | `c`              | source the program came from, for the reader (ignored)       |
//!
//! Exactly one of `result`, `error` and `verify-error` must be present.
//!
//! The run: `mem` is mapped at `RegionIdx::EMBEDDER_FIRST` (region 2, address
//! `0x2_0000_0000`) with r1 = its address and r2 = its length, as the conformance suite
//! assumes; `rodata`, when present, at region 3 (`0x3_0000_0000`) with r3 = its address
//! and r4 = its length. The program is verified against [`test_functions`] and run with
//! [`TestHost`]: helper 5 returns r1, 6 is `sum(ptr, len)`, 7 is `fill(ptr, len, byte)`
//! and 8 is `abort(code)` (see [`helper_ids`]).
//!
//! # Trap syntax
//! ```text
//! trap <kind> pc=<slot> [<field>=<value> ...]
//! ```
//! `<kind>` is one of `out-of-bounds-read`, `out-of-bounds-write`, `read-only`,
//! `fuel-exhausted`, `call-depth`, `unknown-helper`, `helper-argument`, `helper-abort`.
//! The optional fields are those of `csx_ebpf::trap::TrapKind` for that kind (`addr`,
//! `size`, `budget`, `depth_max`, `id`, `helper`, `arg`, `len`, `code`); only the fields
//! written are compared. Example: `trap out-of-bounds-write pc=3 addr=0x200000010 size=8`.
//!
//! # Checks
//! Every engine must give the expected value or trap (kind, pc and the fields given),
//! the expected fuel and memory if given, and in any case exactly the same outcome
//! (value or trap, fuel, memory) as the first engine, the interpreter.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use csx_ebpf::asm::{assemble, AsmError};
use csx_ebpf::count::ExecCounts;
use csx_ebpf::engine::{RunOptions, RunOutcome};
use csx_ebpf::helper::{ArgKind, FunctionSig, FunctionTable, HelperAbort, HelperHost};
use csx_ebpf::isa::Insn;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::Program;
use csx_ebpf::trap::{Trap, TrapKind};
use csx_ebpf::verifier::verify;

use crate::engines::EngineFactory;

/// Fuel for a vector without a `-- fuel` section: far more than any vector needs, small
/// enough that a vector that loops by mistake fails in well under a second.
pub const FUEL_DEFAULT_VECTORS: u64 = 10_000_000;

/// Where our vectors live: `tests/vectors` at the workspace root.
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// Why a vector file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VectorError {
    #[error("line {line}: unknown section `{name}`")]
    UnknownSection { line: usize, name: String },
    #[error("line {line}: section `{name}` appears twice")]
    DuplicateSection { line: usize, name: String },
    #[error("line {line}: text before the first section")]
    TextOutsideSection { line: usize },
    #[error("missing `-- asm` section")]
    MissingAsm,
    #[error("needs exactly one of `-- result`, `-- error` and `-- verify-error`, found {found}")]
    Expectation { found: usize },
    #[error("section `{section}` starting on line {line}: {problem}")]
    BadSection {
        section: String,
        line: usize,
        problem: String,
    },
    #[error("asm section starting on line {section_line}: {source}")]
    Asm {
        section_line: usize,
        source: AsmError,
    },
}

/// What a vector expects of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// r0 at exit.
    Value(u64),
    /// A trap.
    Trap(TrapExpect),
    /// The verifier rejects the program with a message containing this text.
    VerifyError(String),
}

/// An expected trap: its kind name, pc and the fields the vector pins down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrapExpect {
    pub kind: String,
    pub pc: u32,
    pub fields: Vec<(String, i128)>,
}

/// One parsed vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vector {
    /// The file name, for reports.
    pub name: String,
    pub insns: Vec<Insn>,
    pub mem: Vec<u8>,
    pub rodata: Option<Vec<u8>>,
    pub expect: Expect,
    pub fuel: u64,
    pub fuel_used: Option<u64>,
    pub mem_after: Option<Vec<u8>>,
}

/// A section's name, the 1-based line of its `--` header, and its body.
struct Section<'a> {
    name: &'a str,
    line: usize,
    body: String,
}

fn split_sections(text: &str) -> Result<Vec<Section<'_>>, VectorError> {
    let mut sections: Vec<Section<'_>> = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        if let Some(name) = line.strip_prefix("--") {
            let name = name.trim();
            if sections.iter().any(|s| s.name == name) {
                return Err(VectorError::DuplicateSection {
                    line: idx + 1,
                    name: name.into(),
                });
            }
            sections.push(Section {
                name,
                line: idx + 1,
                body: String::new(),
            });
        } else if let Some(s) = sections.last_mut() {
            s.body.push_str(line);
            s.body.push('\n');
        } else if !strip_comment(line).is_empty() {
            return Err(VectorError::TextOutsideSection { line: idx + 1 });
        }
    }
    Ok(sections)
}

fn strip_comment(line: &str) -> &str {
    line.split('#').next().unwrap_or("").trim()
}

/// The non-comment text of a body, as whitespace-separated words.
fn words(body: &str) -> Vec<&str> {
    body.lines()
        .flat_map(|l| strip_comment(l).split_whitespace())
        .collect()
}

fn parse_int(s: &str) -> Option<i128> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let v = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => i128::from_str_radix(&hex.replace('_', ""), 16).ok()?,
        None => digits.replace('_', "").parse::<i128>().ok()?,
    };
    Some(if neg { -v } else { v })
}

/// A number that must fit in a u64; negative values are taken as two's complement.
fn parse_u64(s: &str) -> Option<u64> {
    let v = parse_int(s)?;
    if (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&v) {
        Some(v as u64)
    } else {
        None
    }
}

fn parse_hex_bytes(body: &str) -> Result<Vec<u8>, String> {
    let digits: String = words(body).concat();
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits, not a whole number of bytes",
            digits.len()
        ));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&digits[i..i + 2], 16)
                .map_err(|_| format!("`{}` is not a hex byte", &digits[i..i + 2]))
        })
        .collect()
}

/// Parses `trap <kind> pc=<n> [field=value ...]` (the word `trap` is optional).
fn parse_trap(body: &str) -> Result<TrapExpect, String> {
    let w = words(body);
    let w = if w.first() == Some(&"trap") {
        &w[1..]
    } else {
        &w[..]
    };
    let (kind, rest) = w.split_first().ok_or("empty trap")?;
    if !TRAP_KINDS.contains(kind) {
        return Err(format!(
            "unknown trap kind `{kind}`, expected one of {TRAP_KINDS:?}"
        ));
    }
    let mut pc = None;
    let mut fields = Vec::new();
    for item in rest {
        let (key, value) = item
            .split_once('=')
            .ok_or(format!("`{item}` is not key=value"))?;
        let value = parse_int(value).ok_or(format!("`{value}` is not a number"))?;
        if key == "pc" {
            pc = Some(u32::try_from(value).map_err(|_| format!("pc {value} out of range"))?);
        } else if trap_fields(&synthetic(kind)).iter().any(|(k, _)| *k == key) {
            fields.push((key.to_string(), value));
        } else {
            return Err(format!("`{kind}` has no field `{key}`"));
        }
    }
    let pc = pc.ok_or("missing pc=<slot>")?;
    Ok(TrapExpect {
        kind: kind.to_string(),
        pc,
        fields,
    })
}

const TRAP_KINDS: [&str; 8] = [
    "out-of-bounds-read",
    "out-of-bounds-write",
    "read-only",
    "fuel-exhausted",
    "call-depth",
    "unknown-helper",
    "helper-argument",
    "helper-abort",
];

/// A trap kind with zeroed fields, to list the field names of `kind`.
fn synthetic(kind: &str) -> TrapKind {
    match kind {
        "out-of-bounds-read" => TrapKind::OutOfBounds {
            addr: 0,
            size: 0,
            write: false,
        },
        "out-of-bounds-write" => TrapKind::OutOfBounds {
            addr: 0,
            size: 0,
            write: true,
        },
        "read-only" => TrapKind::ReadOnly { addr: 0, size: 0 },
        "fuel-exhausted" => TrapKind::FuelExhausted { budget: 0 },
        "call-depth" => TrapKind::CallDepthExceeded { depth_max: 0 },
        "unknown-helper" => TrapKind::UnknownHelper { id: 0 },
        "helper-argument" => TrapKind::HelperArgument {
            helper: 0,
            arg: 0,
            addr: 0,
            len: 0,
        },
        _ => TrapKind::HelperAbort {
            helper: 0,
            code: 0,
            message: String::new(),
        },
    }
}

/// The kind name of a trap in the vector syntax.
pub fn trap_kind_name(kind: &TrapKind) -> &'static str {
    match kind {
        TrapKind::OutOfBounds { write: false, .. } => "out-of-bounds-read",
        TrapKind::OutOfBounds { write: true, .. } => "out-of-bounds-write",
        TrapKind::ReadOnly { .. } => "read-only",
        TrapKind::FuelExhausted { .. } => "fuel-exhausted",
        TrapKind::CallDepthExceeded { .. } => "call-depth",
        TrapKind::UnknownHelper { .. } => "unknown-helper",
        TrapKind::HelperArgument { .. } => "helper-argument",
        TrapKind::HelperAbort { .. } => "helper-abort",
        // TrapKind is non-exhaustive; a new kind needs a name here before vectors can
        // expect it.
        _ => "unnamed",
    }
}

/// The comparable fields of a trap, by their names in `TrapKind`.
fn trap_fields(kind: &TrapKind) -> Vec<(&'static str, i128)> {
    match kind {
        TrapKind::OutOfBounds { addr, size, .. } | TrapKind::ReadOnly { addr, size } => {
            vec![("addr", i128::from(*addr)), ("size", i128::from(*size))]
        }
        TrapKind::FuelExhausted { budget } => vec![("budget", i128::from(*budget))],
        TrapKind::CallDepthExceeded { depth_max } => vec![("depth_max", i128::from(*depth_max))],
        TrapKind::UnknownHelper { id } => vec![("id", i128::from(*id))],
        TrapKind::HelperArgument {
            helper,
            arg,
            addr,
            len,
        } => vec![
            ("helper", i128::from(*helper)),
            ("arg", i128::from(*arg)),
            ("addr", i128::from(*addr)),
            ("len", i128::from(*len)),
        ],
        TrapKind::HelperAbort { helper, code, .. } => {
            vec![("helper", i128::from(*helper)), ("code", i128::from(*code))]
        }
        _ => Vec::new(),
    }
}

/// A trap in the vector syntax, with every field, e.g. for a failure message or for
/// writing a new vector.
pub fn describe_trap(trap: &Trap) -> String {
    let mut s = format!("trap {} pc={}", trap_kind_name(&trap.kind), trap.pc);
    for (key, value) in trap_fields(&trap.kind) {
        s.push_str(&format_field(key, value));
    }
    s
}

/// ` key=value`, addresses and large values in hex.
fn format_field(key: &str, value: i128) -> String {
    if key == "addr" || value > 0xffff {
        format!(" {key}={value:#x}")
    } else {
        format!(" {key}={value}")
    }
}

impl TrapExpect {
    /// Whether `trap` is this one: same kind and pc, and every field given matches.
    pub fn matches(&self, trap: &Trap) -> bool {
        let actual = trap_fields(&trap.kind);
        trap_kind_name(&trap.kind) == self.kind
            && trap.pc == self.pc
            && self
                .fields
                .iter()
                .all(|(k, v)| actual.iter().any(|(ak, av)| ak == k && av == v))
    }
}

impl fmt::Display for TrapExpect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trap {} pc={}", self.kind, self.pc)?;
        for (k, v) in &self.fields {
            f.write_str(&format_field(k, *v))?;
        }
        Ok(())
    }
}

/// Parses a vector file's text; `name` is only for reports.
pub fn parse_vector(name: &str, text: &str) -> Result<Vector, VectorError> {
    let sections = split_sections(text)?;
    let mut v = Vector {
        name: name.to_string(),
        insns: Vec::new(),
        mem: Vec::new(),
        rodata: None,
        expect: Expect::Value(0),
        fuel: FUEL_DEFAULT_VECTORS,
        fuel_used: None,
        mem_after: None,
    };
    let mut have_asm = false;
    let mut expectations = Vec::new();
    for s in &sections {
        let bad = |problem: String| VectorError::BadSection {
            section: s.name.to_string(),
            line: s.line,
            problem,
        };
        let number = || parse_number(&s.body).map_err(bad);
        match s.name {
            "asm" => {
                v.insns = assemble(&s.body).map_err(|source| VectorError::Asm {
                    section_line: s.line,
                    source,
                })?;
                have_asm = true;
            }
            "mem" => v.mem = parse_hex_bytes(&s.body).map_err(bad)?,
            "rodata" => v.rodata = Some(parse_hex_bytes(&s.body).map_err(bad)?),
            "mem-after" => v.mem_after = Some(parse_hex_bytes(&s.body).map_err(bad)?),
            "result" => expectations.push(Expect::Value(number()?)),
            "error" => expectations.push(Expect::Trap(parse_trap(&s.body).map_err(bad)?)),
            "verify-error" => {
                let text = expected_message(&s.body).map_err(bad)?;
                expectations.push(Expect::VerifyError(text));
            }
            "fuel" => v.fuel = number()?,
            "fuel-used" => v.fuel_used = Some(number()?),
            // Source code a program was compiled from, kept for the reader.
            "c" => {}
            other => {
                return Err(VectorError::UnknownSection {
                    line: s.line,
                    name: other.into(),
                })
            }
        }
    }
    if !have_asm {
        return Err(VectorError::MissingAsm);
    }
    if expectations.len() != 1 {
        return Err(VectorError::Expectation {
            found: expectations.len(),
        });
    }
    v.expect = expectations.pop().expect("exactly one expectation");
    Ok(v)
}

/// The one number of a section's body.
fn parse_number(body: &str) -> Result<u64, String> {
    let w = words(body);
    match w[..] {
        [one] => parse_u64(one).ok_or_else(|| format!("`{one}` is not a u64")),
        _ => Err(format!("expected one number, found {} words", w.len())),
    }
}

/// The expected verifier message of a `verify-error` section: its lines without
/// comments, joined by spaces; never empty.
fn expected_message(body: &str) -> Result<String, String> {
    let text = body
        .lines()
        .map(strip_comment)
        .collect::<Vec<_>>()
        .join(" ");
    let text = text.trim();
    if text.is_empty() {
        return Err("empty expected message".into());
    }
    Ok(text.to_string())
}

/// Every `.data` file under `dir`, sorted by path.
pub fn find_vector_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "data") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Helper ids of [`test_functions`].
pub mod helper_ids {
    /// Returns its first argument (the conformance suite's helper).
    pub const IDENTITY: u32 = 5;
    /// `sum(ptr, len)`: the sum of `len` bytes at `ptr` (a checked input pointer).
    pub const SUM: u32 = 6;
    /// `fill(ptr, len, byte)`: writes `len` copies of `byte` at `ptr` (a checked output
    /// pointer); returns `len`.
    pub const FILL: u32 = 7;
    /// `abort(code)`: aborts the run with `code`.
    pub const ABORT: u32 = 8;
}

/// The function table vectors are verified against: the conformance helper plus
/// helpers with pointer arguments, to test argument checks, and one that aborts.
pub fn test_functions() -> FunctionTable {
    let mut t = FunctionTable::conformance();
    let sigs = [
        (
            helper_ids::SUM,
            "test_sum",
            vec![ArgKind::PtrIn { len_arg: 1 }, ArgKind::Scalar],
        ),
        (
            helper_ids::FILL,
            "test_fill",
            vec![
                ArgKind::PtrOut { len_arg: 1 },
                ArgKind::Scalar,
                ArgKind::Scalar,
            ],
        ),
        (helper_ids::ABORT, "test_abort", vec![ArgKind::Scalar]),
    ];
    for (id, name, args) in sigs {
        t.insert(FunctionSig {
            name: name.into(),
            id,
            args,
            version: 1,
            doc: "vector test helper".into(),
        })
        .expect("test helper ids and names are distinct");
    }
    t
}

/// Implements [`test_functions`].
#[derive(Debug, Default, Clone, Copy)]
pub struct TestHost;

impl HelperHost for TestHost {
    fn call(
        &mut self,
        id: u32,
        args: [u64; 5],
        mem: &mut MemoryMap<'_>,
    ) -> Result<u64, HelperAbort> {
        // Pointer arguments were checked by `call_helper` before this runs; a failure
        // here would be a bug in that check, reported as an abort rather than a panic.
        let unchecked = |_| HelperAbort {
            code: -14,
            message: "pointer not checked".into(),
        };
        match id {
            helper_ids::IDENTITY => Ok(args[0]),
            helper_ids::SUM => {
                let bytes = mem.slice(args[0], args[1]).map_err(unchecked)?;
                Ok(bytes.iter().map(|&b| u64::from(b)).sum())
            }
            helper_ids::FILL => {
                mem.slice_mut(args[0], args[1])
                    .map_err(unchecked)?
                    .fill(args[2] as u8);
                Ok(args[1])
            }
            helper_ids::ABORT => Err(HelperAbort {
                code: args[0] as i64,
                message: "test abort".into(),
            }),
            _ => Err(HelperAbort {
                code: -38,
                message: format!("no test helper {id}"),
            }),
        }
    }
}

/// One engine's run of a vector: the outcome, `mem` afterwards, and the executed-block
/// counts of a second, counted run (`csx_ebpf::count`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineRun {
    pub outcome: RunOutcome,
    pub mem: Vec<u8>,
    pub counts: Vec<u64>,
}

/// Runs `vector` (already verified into `engine`'s program) once without counting and
/// once counting blocks; the counted run must not differ (`Err` says how it does).
fn run_twice(vector: &Vector, engine: &dyn csx_ebpf::engine::Engine) -> Result<EngineRun, String> {
    let (outcome, mem) = run_once(vector, engine, None);
    let counts = ExecCounts::new(engine.program().blocks());
    let counted = run_once(vector, engine, Some(&counts));
    if counted != (outcome.clone(), mem.clone()) {
        return Err(format!(
            "the counted run differs from the uncounted one: {}",
            describe(&counted.0)
        ));
    }
    Ok(EngineRun {
        outcome,
        mem,
        counts: counts.values(),
    })
}

/// Runs `vector` (already verified into `engine`'s program) once.
fn run_once(
    vector: &Vector,
    engine: &dyn csx_ebpf::engine::Engine,
    counts: Option<&ExecCounts>,
) -> (RunOutcome, Vec<u8>) {
    let mut mem = vector.mem.clone();
    let rodata = vector.rodata.clone().unwrap_or_default();
    let mem_len = mem.len() as u64;
    // The map borrows `mem` for the run only; the block ends the borrow so the bytes
    // can be returned.
    let outcome = {
        let mut map = MemoryMap::new();
        let mem_addr = map
            .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut mem)
            .expect("vector memory fits a region");
        let mut args = [mem_addr, mem_len, 0, 0, 0];
        if vector.rodata.is_some() {
            let idx = RegionIdx::embedder(1).expect("the table has a second embedder region");
            args[2] = map
                .map_read_only(idx, &rodata)
                .expect("vector rodata fits a region");
            args[3] = rodata.len() as u64;
        }
        let opts = RunOptions {
            fuel: vector.fuel,
            counts,
            ..RunOptions::default()
        };
        engine.run(&mut map, args, &opts, &mut TestHost)
    };
    (outcome, mem)
}

fn describe(outcome: &RunOutcome) -> String {
    let r = match &outcome.result {
        Ok(v) => format!("result {v:#x}"),
        Err(t) => describe_trap(t),
    };
    format!("{r} (fuel used {})", outcome.fuel_used)
}

/// Checks one engine's run against the vector's expectations.
fn check_run(vector: &Vector, run: &EngineRun) -> Vec<String> {
    let mut problems = Vec::new();
    let got = describe(&run.outcome);
    match (&vector.expect, &run.outcome.result) {
        (Expect::Value(want), Ok(v)) if v == want => {}
        (Expect::Value(want), _) => problems.push(format!("expected result {want:#x}, got {got}")),
        (Expect::Trap(want), Err(t)) if want.matches(t) => {}
        (Expect::Trap(want), _) => problems.push(format!("expected {want}, got {got}")),
        (Expect::VerifyError(_), _) => problems.push("ran a program that should not verify".into()),
    }
    if let Some(want) = vector.fuel_used {
        if run.outcome.fuel_used != want {
            problems.push(format!("expected fuel used {want}, got {got}"));
        }
    }
    if let Some(want) = &vector.mem_after {
        if &run.mem != want {
            problems.push(format!(
                "expected mem after {}, got {}",
                hex(want),
                hex(&run.mem)
            ));
        }
    }
    problems
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `vector` on every engine in `engines` and returns what went wrong, one line per
/// problem, each naming the engine. Empty means the vector passed everywhere.
pub fn run_vector(vector: &Vector, engines: &[(&'static str, EngineFactory)]) -> Vec<String> {
    let functions = Arc::new(test_functions());
    let program = Program::from_insns(vector.name.clone(), vector.insns.clone());
    let verified = match (verify(program, functions), &vector.expect) {
        (Err(e), Expect::VerifyError(want)) if e.to_string().contains(want.as_str()) => {
            return Vec::new()
        }
        (Err(e), Expect::VerifyError(want)) => {
            return vec![format!(
                "expected verify error containing `{want}`, got `{e}`"
            )]
        }
        (Ok(_), Expect::VerifyError(want)) => {
            return vec![format!(
                "expected verify error containing `{want}`, but it verified"
            )]
        }
        (Err(e), _) => return vec![format!("verifier rejected it: {e}")],
        (Ok(p), _) => Arc::new(p),
    };
    let mut problems = Vec::new();
    let mut reference: Option<(&str, EngineRun)> = None;
    for &(engine_name, factory) in engines {
        let engine = match factory(Arc::clone(&verified)) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("{engine_name}: could not build the engine: {e}"));
                continue;
            }
        };
        let run = match run_twice(vector, engine.as_ref()) {
            Ok(run) => run,
            Err(e) => {
                problems.push(format!("{engine_name}: {e}"));
                continue;
            }
        };
        problems.extend(
            check_run(vector, &run)
                .into_iter()
                .map(|p| format!("{engine_name}: {p}")),
        );
        match &reference {
            None => reference = Some((engine_name, run)),
            Some((ref_name, ref_run)) if *ref_run != run => problems.push(format!(
                "{engine_name}: differs from {ref_name}: {} vs {}{}",
                describe(&run.outcome),
                describe(&ref_run.outcome),
                if run.mem != ref_run.mem {
                    " (and mem after)"
                } else if run.counts != ref_run.counts {
                    " (executed-block counts)"
                } else {
                    ""
                }
            )),
            Some(_) => {}
        }
    }
    problems
}

/// Parses and runs every vector file under `dir` on every engine. Returns the number of
/// files and the failures as `(file name, problem)`; a file that does not parse is a
/// failure too.
pub fn run_dir(
    dir: &Path,
    engines: &[(&'static str, EngineFactory)],
) -> std::io::Result<(usize, Vec<(String, String)>)> {
    let files = find_vector_files(dir)?;
    let mut failures = Vec::new();
    for path in &files {
        let name = path.strip_prefix(dir).unwrap_or(path).display().to_string();
        let text = std::fs::read_to_string(path)?;
        match parse_vector(&name, &text) {
            Ok(v) => failures.extend(
                run_vector(&v, engines)
                    .into_iter()
                    .map(|p| (name.clone(), p)),
            ),
            Err(e) => failures.push((name.clone(), format!("does not parse: {e}"))),
        }
    }
    Ok((files.len(), failures))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_section() {
        let text = "# what it checks\n-- asm\nmov %r0, 1 # one\nexit\n-- mem\n00 01\nff\n\
                    -- rodata\n02\n-- fuel\n100\n-- fuel-used\n0\n-- mem-after\n0001ff\n\
                    -- error\ntrap out-of-bounds-write pc=3 addr=0x200000010 size=8\n";
        let v = parse_vector("t", text).unwrap();
        assert_eq!(v.insns.len(), 2);
        assert_eq!(v.mem, vec![0, 1, 0xff]);
        assert_eq!(v.rodata, Some(vec![2]));
        assert_eq!((v.fuel, v.fuel_used), (100, Some(0)));
        assert_eq!(v.mem_after, Some(vec![0, 1, 0xff]));
        let Expect::Trap(t) = &v.expect else {
            panic!("expected a trap: {:?}", v.expect)
        };
        assert_eq!(t.kind, "out-of-bounds-write");
        assert_eq!(t.pc, 3);
        let trap = Trap {
            pc: 3,
            kind: TrapKind::OutOfBounds {
                addr: 0x2_0000_0010,
                size: 8,
                write: true,
            },
        };
        assert!(t.matches(&trap));
        assert_eq!(
            describe_trap(&trap),
            "trap out-of-bounds-write pc=3 addr=0x200000010 size=8"
        );
        assert!(!t.matches(&Trap { pc: 2, ..trap }));
    }

    #[test]
    fn rejects_bad_files() {
        let e = |t: &str| parse_vector("t", t).unwrap_err();
        assert!(matches!(
            e("-- asm\nexit\n"),
            VectorError::Expectation { found: 0 }
        ));
        assert!(matches!(e("-- result\n1\n"), VectorError::MissingAsm));
        assert!(matches!(
            e("-- asm\nexit\n-- reslt\n1\n"),
            VectorError::UnknownSection { .. }
        ));
        assert!(matches!(
            e("-- asm\nfrob\n-- result\n1\n"),
            VectorError::Asm { .. }
        ));
        assert!(matches!(
            e("-- asm\nexit\n-- error\ntrap fuel-exhausted addr=1 pc=0\n"),
            VectorError::BadSection { .. }
        ));
        assert!(matches!(
            e("-- asm\nexit\n-- result\n1\n-- result\n1\n"),
            VectorError::DuplicateSection { .. }
        ));
        assert!(matches!(
            e("exit\n-- asm\nexit\n"),
            VectorError::TextOutsideSection { line: 1 }
        ));
    }

    #[test]
    fn result_accepts_negative_decimal() {
        let v = parse_vector("t", "-- asm\nexit\n-- result\n-1\n").unwrap();
        assert_eq!(v.expect, Expect::Value(u64::MAX));
    }
}
