//! The operator catalogue (Metal FS's operators on csx): device programs that follow the
//! streaming contract of [`csx_proto::abi::op`] (`sdk/ops/*.c`, compiled by
//! `crates/fs/build.rs`), each with its typed parameters, and user operators (any
//! object built with `csx build` that follows the contract).
//!
//! [`Catalogue::parse_stage`] turns one stage of a pipeline (`filter --type u32 --op gt
//! --value 100`) into a [`Stage`]: the program, the parameter bytes at the offsets the
//! program reads, its state size and its output capacity. Every unknown name is an
//! [`OpError`] that names it and lists the valid ones.

use std::fmt;
use std::path::Path;

use csx_proto::abi::op::{lz4_bound, LZ4_FRAME_RAW_MAX};
use csx_proto::limits::PARAMS_SIZE_MAX;

mod objects {
    include!(concat!(env!("OUT_DIR"), "/ops_objects.rs"));
}

/// The type of a parameter's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A flag: present is 1 (8 bytes).
    Bool,
    /// A 64-bit integer: decimal, `0x` hex, negative, or a size (`64MiB`) (8 bytes).
    Int,
    /// One of the names (8 bytes: its index).
    Choice(&'static [&'static str]),
    /// Exactly `size` bytes, given in hex.
    Bytes { size: usize },
    /// Up to `max` bytes of text: an 8-byte length, then the bytes (`max` reserved).
    Text { max: usize },
}

impl ParamKind {
    /// Bytes the parameter takes in the params block.
    pub fn size(self) -> usize {
        match self {
            ParamKind::Bool | ParamKind::Int | ParamKind::Choice(_) => 8,
            ParamKind::Bytes { size } => size,
            ParamKind::Text { max } => 8 + max,
        }
    }

    /// The kind as `csx op list` shows it.
    pub fn describe(self) -> String {
        match self {
            ParamKind::Bool => "bool".into(),
            ParamKind::Int => "int".into(),
            ParamKind::Choice(c) => c.join("|"),
            ParamKind::Bytes { size } => format!("bytes[{size}] (hex)"),
            ParamKind::Text { max } => format!("text (up to {max} bytes)"),
        }
    }
}

/// One typed parameter of an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// `--name`.
    pub name: &'static str,
    /// `-c`, if any.
    pub short: Option<char>,
    pub kind: ParamKind,
    /// Byte offset in the params block (the offset the program reads).
    pub offset: usize,
    /// The value when the parameter is not given; `None`: required (bools default off).
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

/// How large an operator's output buffer must be for an input chunk of `n` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutCap {
    /// `n + extra`.
    Plus(u64),
    /// `max(n, min)`: the operator fills it and asks again (`CSX_OP_AGAIN`).
    AtLeast(u64),
    /// A fixed size.
    Fixed(u64),
    /// `compress`: room for the LZ4 worst case of each 64 KiB frame.
    Compress,
}

impl OutCap {
    pub fn bytes(self, n: u64) -> u64 {
        match self {
            OutCap::Plus(extra) => n + extra,
            OutCap::AtLeast(min) => n.max(min),
            OutCap::Fixed(size) => size,
            OutCap::Compress => {
                let frames = n.div_ceil(64 << 10).max(1);
                n + n / 10 + frames * 40 + 64
            }
        }
    }
}

/// One operator of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSpec {
    pub name: &'static str,
    /// The source in `sdk/ops/` (without `.c`) and its entry function.
    pub source: &'static str,
    pub entry: &'static str,
    pub doc: &'static str,
    pub params: &'static [ParamSpec],
    /// Bytes of per-stream state (zeroed at the stream's start).
    pub state_bytes: u64,
    pub out: OutCap,
    /// Ignores its input: may only start a pipeline (Metal FS's datagen rule).
    pub source_only: bool,
}

const TYPES: &[&str] = &["u32", "u64", "i32", "i64"];
const CMPS: &[&str] = &["eq", "ne", "lt", "le", "gt", "ge", "between"];

const fn p(
    name: &'static str,
    short: Option<char>,
    kind: ParamKind,
    offset: usize,
    default: Option<&'static str>,
    doc: &'static str,
) -> ParamSpec {
    ParamSpec {
        name,
        short,
        kind,
        offset,
        default,
        doc,
    }
}

/// Every built-in operator.
pub const OPERATORS: &[OpSpec] = &[
    OpSpec {
        name: "passthrough",
        source: "passthrough",
        entry: "passthrough",
        doc: "the output is the input",
        params: &[],
        state_bytes: 0,
        out: OutCap::Plus(0),
        source_only: false,
    },
    OpSpec {
        name: "filter",
        source: "filter",
        entry: "filter",
        doc: "keeps the values with `v OP value` (between: value <= v <= high), compacted",
        params: &[
            p(
                "type",
                Some('t'),
                ParamKind::Choice(TYPES),
                0,
                Some("u64"),
                "value type, little-endian",
            ),
            p(
                "op",
                Some('o'),
                ParamKind::Choice(CMPS),
                8,
                None,
                "comparison",
            ),
            p(
                "value",
                Some('v'),
                ParamKind::Int,
                16,
                None,
                "the operand (between: the low bound, inclusive)",
            ),
            p(
                "high",
                None,
                ParamKind::Int,
                24,
                Some("0"),
                "between: the high bound, inclusive",
            ),
        ],
        state_bytes: 16,
        out: OutCap::Plus(8),
        source_only: false,
    },
    OpSpec {
        name: "aggregate",
        source: "aggregate",
        entry: "aggregate",
        doc: "count, sum, min, max of the values, once at the end (32 bytes: 4 x u64, or text)",
        params: &[
            p(
                "type",
                Some('t'),
                ParamKind::Choice(TYPES),
                0,
                Some("u64"),
                "value type, little-endian",
            ),
            p(
                "text",
                None,
                ParamKind::Bool,
                8,
                None,
                "emit `count N sum N min N max N` as a text line",
            ),
        ],
        state_bytes: 48,
        out: OutCap::Fixed(128),
        source_only: false,
    },
    OpSpec {
        name: "grep",
        source: "grep",
        entry: "grep",
        doc: "the lines that contain a pattern (each with its newline)",
        params: &[
            p(
                "pattern",
                Some('e'),
                ParamKind::Text { max: 256 },
                0,
                None,
                "the bytes to look for",
            ),
            p(
                "invert",
                None,
                ParamKind::Bool,
                264,
                None,
                "the lines that do not contain it",
            ),
        ],
        state_bytes: 8 + 65536,
        out: OutCap::Plus(65537),
        source_only: false,
    },
    OpSpec {
        name: "datagen",
        source: "datagen",
        entry: "datagen",
        doc: "pseudo-random u64 values generated on the device (starts a pipeline only)",
        params: &[
            p(
                "size",
                Some('s'),
                ParamKind::Int,
                0,
                None,
                "bytes to generate (1GiB, 4096, ...)",
            ),
            p(
                "seed",
                None,
                ParamKind::Int,
                8,
                Some("0"),
                "value i is splitmix64(seed + i)",
            ),
            p(
                "modulo",
                None,
                ParamKind::Int,
                16,
                Some("0"),
                "when not 0, every value modulo it",
            ),
        ],
        state_bytes: 8,
        out: OutCap::AtLeast(64 << 10),
        source_only: true,
    },
    OpSpec {
        name: "compress",
        source: "compress",
        entry: "compress",
        doc: "LZ4 compression into csx_lz4 frames (accelerated device function)",
        params: &[],
        state_bytes: 0,
        out: OutCap::Compress,
        source_only: false,
    },
    OpSpec {
        name: "decompress",
        source: "decompress",
        entry: "decompress",
        doc: "csx_lz4 frames back to their bytes (accelerated device function)",
        params: &[],
        state_bytes: (24 + lz4_bound(LZ4_FRAME_RAW_MAX) as u64).next_multiple_of(64),
        out: OutCap::AtLeast(LZ4_FRAME_RAW_MAX as u64),
        source_only: false,
    },
    OpSpec {
        name: "encrypt",
        source: "crypt",
        entry: "crypt",
        doc: "ChaCha20 (RFC 8439) with a 32-byte key and 12-byte nonce (accelerated)",
        params: CRYPT_PARAMS,
        state_bytes: 8,
        out: OutCap::Plus(0),
        source_only: false,
    },
    OpSpec {
        name: "decrypt",
        source: "crypt",
        entry: "crypt",
        doc: "the inverse of encrypt (ChaCha20 is its own inverse)",
        params: CRYPT_PARAMS,
        state_bytes: 8,
        out: OutCap::Plus(0),
        source_only: false,
    },
];

/// The parameters of encrypt and decrypt (one program, ChaCha20 being its own inverse).
const CRYPT_PARAMS: &[ParamSpec] = &[
    p(
        "key",
        Some('k'),
        ParamKind::Bytes { size: 32 },
        0,
        None,
        "32 bytes, 64 hex digits",
    ),
    p(
        "nonce",
        Some('n'),
        ParamKind::Bytes { size: 12 },
        32,
        Some("000000000000000000000000"),
        "12 bytes, 24 hex digits",
    ),
];

/// State of a user operator (`csx build` object) when its stage does not say.
pub const USER_STATE_BYTES: u64 = 64 << 10;
/// Output room of a user operator beyond its input chunk.
pub const USER_OUT_EXTRA: u64 = 64 << 10;

/// Why a stage is not a valid operator with valid parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("unknown operator `{name}`; the operators are: {}", .valid.join(", "))]
    UnknownOperator { name: String, valid: Vec<String> },
    #[error("{op}: unknown parameter `{param}`; its parameters are: {}", list_or_none(.valid))]
    UnknownParam {
        op: String,
        param: String,
        valid: Vec<String>,
    },
    #[error("{op}: --{param} needs a value")]
    MissingValue { op: String, param: String },
    #[error("{op}: --{param} is required")]
    Required { op: String, param: String },
    #[error("{op}: --{param} {value:?}: {reason}")]
    BadValue {
        op: String,
        param: String,
        value: String,
        reason: String,
    },
    #[error("{op}: unexpected argument {arg:?} (parameters are --name VALUE)")]
    Positional { op: String, arg: String },
    #[error("an empty stage: write `op [--param value]...` between the `|`s")]
    EmptyStage,
    #[error("cannot read the user operator {path}: {reason}")]
    UserObject { path: String, reason: String },
    #[error("{op} ignores its input, so it may only start a pipeline (it is stage {index})")]
    SourceNotFirst { op: String, index: usize },
    #[error("unterminated quote in the pipeline {text:?}")]
    Quote { text: String },
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

/// One resolved stage: a program to load and what to run it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// The operator's name, or the object's path for a user operator.
    pub name: String,
    pub object: Vec<u8>,
    pub entry: Option<String>,
    /// The params block.
    pub params: Vec<u8>,
    pub state_bytes: u64,
    pub out: OutCap,
    pub source_only: bool,
}

/// The built-in operators and how stages name them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Catalogue;

impl Catalogue {
    /// Every built-in operator.
    pub fn operators(&self) -> &'static [OpSpec] {
        OPERATORS
    }

    /// The operator named `name`.
    pub fn get(&self, name: &str) -> Result<&'static OpSpec, OpError> {
        OPERATORS
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| OpError::UnknownOperator {
                name: name.to_owned(),
                valid: OPERATORS.iter().map(|o| o.name.to_owned()).collect(),
            })
    }

    /// The compiled object of a built-in operator.
    pub fn object(&self, spec: &OpSpec) -> &'static [u8] {
        objects::OBJECTS
            .iter()
            .find(|(name, _)| *name == spec.source)
            .map(|(_, o)| *o)
            .expect("build.rs compiles every source the catalogue names")
    }

    /// A whole pipeline: stages separated by `|`.
    pub fn parse_pipeline(&self, text: &str) -> Result<Vec<Stage>, OpError> {
        let mut stages = Vec::new();
        for (i, words) in split_pipeline(text)?.into_iter().enumerate() {
            let stage = self.parse_stage(&words)?;
            if stage.source_only && i > 0 {
                return Err(OpError::SourceNotFirst {
                    op: stage.name,
                    index: i + 1,
                });
            }
            stages.push(stage);
        }
        if stages.is_empty() {
            return Err(OpError::EmptyStage);
        }
        Ok(stages)
    }

    /// One stage: an operator name (or the path of a `csx build` object: it contains a
    /// `/` or ends in `.o`) and its parameters.
    pub fn parse_stage(&self, words: &[String]) -> Result<Stage, OpError> {
        let Some((name, rest)) = words.split_first() else {
            return Err(OpError::EmptyStage);
        };
        if name.contains('/') || name.ends_with(".o") {
            return user_stage(name, rest);
        }
        let spec = self.get(name)?;
        Ok(Stage {
            name: spec.name.to_owned(),
            object: self.object(spec).to_vec(),
            entry: Some(spec.entry.to_owned()),
            params: encode_params(spec, rest)?,
            state_bytes: spec.state_bytes,
            out: spec.out,
            source_only: spec.source_only,
        })
    }
}

/// Splits `a --x 1 | b 'c d'` into stages of words (single and double quotes group).
pub fn split_pipeline(text: &str) -> Result<Vec<Vec<String>>, OpError> {
    let mut stages = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '|') => {
                if let Some(w) = word.take() {
                    stages.last_mut().expect("never empty").push(w);
                }
                stages.push(Vec::new());
            }
            (None, c) if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    stages.last_mut().expect("never empty").push(w);
                }
            }
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err(OpError::Quote {
            text: text.to_owned(),
        });
    }
    if let Some(w) = word.take() {
        stages.last_mut().expect("never empty").push(w);
    }
    if stages.iter().any(Vec::is_empty) {
        return Err(OpError::EmptyStage);
    }
    Ok(stages)
}

/// The params block of a built-in operator from `--name value` words.
pub fn encode_params(spec: &OpSpec, words: &[String]) -> Result<Vec<u8>, OpError> {
    let size = spec
        .params
        .iter()
        .map(|p| p.offset + p.kind.size())
        .max()
        .unwrap_or(0);
    debug_assert!(size <= PARAMS_SIZE_MAX);
    let mut block = vec![0u8; size];
    let given = given_values(spec, words)?;
    if spec.name == "filter" {
        check_filter(spec, &given)?;
    }
    for (param, value) in spec.params.iter().zip(given) {
        let value = match (value, param.default, param.kind) {
            (Some(v), _, _) => v,
            (None, Some(d), _) => d.to_owned(),
            (None, None, ParamKind::Bool) => "false".to_owned(),
            (None, None, _) => {
                return Err(OpError::Required {
                    op: spec.name.to_owned(),
                    param: param.name.to_owned(),
                })
            }
        };
        encode_value(spec, param, value, &mut block)?;
    }
    Ok(block)
}

/// The value given for each of `spec`'s parameters in `words` (`--name value`,
/// `--name=value`, `-c value`; a bool's value is optional).
fn given_values(spec: &OpSpec, words: &[String]) -> Result<Vec<Option<String>>, OpError> {
    let mut given: Vec<Option<String>> = vec![None; spec.params.len()];
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let (key, inline) = if let Some(long) = w.strip_prefix("--") {
            match long.split_once('=') {
                Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                None => (long.to_owned(), None),
            }
        } else if let Some(short) = w.strip_prefix('-').filter(|s| s.chars().count() == 1) {
            let c = short.chars().next().expect("one char");
            match spec.params.iter().find(|p| p.short == Some(c)) {
                Some(p) => (p.name.to_owned(), None),
                None => (short.to_owned(), None),
            }
        } else {
            return Err(OpError::Positional {
                op: spec.name.to_owned(),
                arg: w.clone(),
            });
        };
        let Some(idx) = spec.params.iter().position(|p| p.name == key) else {
            return Err(OpError::UnknownParam {
                op: spec.name.to_owned(),
                param: key,
                valid: spec
                    .params
                    .iter()
                    .map(|p| format!("--{}", p.name))
                    .collect(),
            });
        };
        let param = &spec.params[idx];
        let value = if param.kind == ParamKind::Bool {
            inline.unwrap_or_else(|| "true".to_owned())
        } else if let Some(v) = inline {
            v
        } else {
            i += 1;
            words.get(i).cloned().ok_or_else(|| OpError::MissingValue {
                op: spec.name.to_owned(),
                param: key.clone(),
            })?
        };
        given[idx] = Some(value);
        i += 1;
    }
    Ok(given)
}

/// Writes `value` of `param` into the parameter block at its offset.
fn encode_value(
    spec: &OpSpec,
    param: &ParamSpec,
    value: String,
    block: &mut [u8],
) -> Result<(), OpError> {
    let bad = |reason: String| OpError::BadValue {
        op: spec.name.to_owned(),
        param: param.name.to_owned(),
        value: value.clone(),
        reason,
    };
    let at = param.offset;
    match param.kind {
        ParamKind::Bool => {
            let v = match value.as_str() {
                "true" | "1" | "yes" => 1u64,
                "false" | "0" | "no" => 0,
                _ => return Err(bad("a bool is true or false".into())),
            };
            block[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        ParamKind::Int => {
            let v = parse_int(&value).map_err(bad)?;
            block[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        ParamKind::Choice(choices) => {
            let Some(v) = choices.iter().position(|c| *c == value) else {
                return Err(bad(format!("one of {}", choices.join(", "))));
            };
            block[at..at + 8].copy_from_slice(&(v as u64).to_le_bytes());
        }
        ParamKind::Bytes { size } => {
            let bytes = parse_hex(&value).map_err(bad)?;
            if bytes.len() != size {
                return Err(bad(format!(
                    "{} bytes, must be {size} ({} hex digits)",
                    bytes.len(),
                    2 * size
                )));
            }
            block[at..at + size].copy_from_slice(&bytes);
        }
        ParamKind::Text { max } => {
            if value.len() > max {
                return Err(bad(format!("{} bytes, at most {max}", value.len())));
            }
            block[at..at + 8].copy_from_slice(&(value.len() as u64).to_le_bytes());
            block[at + 8..at + 8 + value.len()].copy_from_slice(value.as_bytes());
        }
    }
    Ok(())
}

/// The filter's operands must fit the comparison (a negative operand for an unsigned type
/// would compare as a huge number), and `between` needs both bounds, low first.
fn check_filter(spec: &OpSpec, given: &[Option<String>]) -> Result<(), OpError> {
    let text = |name: &str| {
        spec.params
            .iter()
            .position(|p| p.name == name)
            .and_then(|i| {
                given[i]
                    .clone()
                    .or_else(|| spec.params[i].default.map(str::to_owned))
            })
    };
    let ty = text("type").unwrap_or_else(|| "u64".into());
    let op = text("op").unwrap_or_default();
    let high_given = spec
        .params
        .iter()
        .position(|p| p.name == "high")
        .is_some_and(|i| given[i].is_some());
    let bad = |param: &str, value: &str, reason: String| OpError::BadValue {
        op: spec.name.to_owned(),
        param: param.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if op == "between" && !high_given {
        return Err(OpError::Required {
            op: format!("{} --op between", spec.name),
            param: "high".into(),
        });
    }
    // The operands are 64-bit, compared as i64 for a signed type and u64 otherwise.
    let (lo, hi): (i128, i128) = if ty.starts_with('i') {
        (i128::from(i64::MIN), i128::from(i64::MAX))
    } else {
        (0, i128::from(u64::MAX))
    };
    let mut bounds = Vec::new();
    for name in ["value", "high"] {
        let Some(v) = text(name) else { continue };
        if name == "high" && !high_given {
            continue;
        }
        let t = v.trim();
        let n: i128 = if t.starts_with('-') {
            t.parse::<i128>()
                .map_err(|_| bad(name, &v, "not an integer".into()))?
        } else {
            i128::from(parse_int(t).map_err(|r| bad(name, &v, r))?)
        };
        if !(lo..=hi).contains(&n) {
            return Err(bad(
                name,
                &v,
                format!("out of range for --type {ty} ({lo}..={hi})"),
            ));
        }
        bounds.push(n);
    }
    if let [low, high] = bounds[..] {
        if low > high {
            return Err(bad(
                "high",
                &text("high").unwrap_or_default(),
                format!("below the low bound --value {low}"),
            ));
        }
    }
    Ok(())
}

/// An integer parameter: decimal (may be negative), `0x` hex, or a size (`64MiB`).
pub fn parse_int(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).map_err(|e| format!("not a hex integer: {e}"));
    }
    if let Some(neg) = t.strip_prefix('-') {
        let v: i64 = neg
            .parse::<u64>()
            .ok()
            .and_then(|m| 0i64.checked_sub_unsigned(m))
            .ok_or_else(|| "not an integer in the i64 range".to_owned())?;
        return Ok(v as u64);
    }
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    csx_host::size::parse_size(t).map_err(|e| format!("not an integer or a size: {e}"))
}

fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let t = text.trim();
    if !t.len().is_multiple_of(2) {
        return Err("an odd number of hex digits".into());
    }
    (0..t.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(t.get(i..i + 2).unwrap_or("?"), 16)
                .map_err(|_| format!("not hex at digit {}", i + 1))
        })
        .collect()
}

/// A user operator: `PATH.o [--int N | --bytes TEXT | --hex HEX | --state-bytes N]...`,
/// its params block the values in order.
fn user_stage(path: &str, words: &[String]) -> Result<Stage, OpError> {
    let object = std::fs::read(Path::new(path)).map_err(|e| OpError::UserObject {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let mut stage = Stage {
        name: path.to_owned(),
        object,
        entry: None,
        params: Vec::new(),
        state_bytes: USER_STATE_BYTES,
        out: OutCap::Plus(USER_OUT_EXTRA),
        source_only: false,
    };
    for pair in words.chunks(2) {
        let (name, value) = user_param(path, pair)?;
        let bad = |reason: String| OpError::BadValue {
            op: path.to_owned(),
            param: name.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let params = &mut stage.params;
        match name {
            "int" => params.extend_from_slice(&parse_int(value).map_err(bad)?.to_le_bytes()),
            "bytes" => params.extend_from_slice(value.as_bytes()),
            "hex" => params.extend(parse_hex(value).map_err(bad)?),
            "state-bytes" => stage.state_bytes = parse_int(value).map_err(bad)?,
            _ => stage.entry = Some(value.to_owned()),
        }
        if stage.params.len() > PARAMS_SIZE_MAX {
            return Err(bad(format!(
                "params of {} bytes, at most {PARAMS_SIZE_MAX}",
                stage.params.len()
            )));
        }
    }
    Ok(stage)
}

/// One `--NAME VALUE` pair of a user operator's words: (NAME, VALUE).
fn user_param<'w>(path: &str, pair: &'w [String]) -> Result<(&'w str, &'w str), OpError> {
    const NAMES: [&str; 5] = ["int", "bytes", "hex", "state-bytes", "entry"];
    let key = &pair[0];
    let Some(name) = key.strip_prefix("--") else {
        return Err(OpError::Positional {
            op: path.to_owned(),
            arg: key.clone(),
        });
    };
    if !NAMES.contains(&name) {
        return Err(OpError::UnknownParam {
            op: path.to_owned(),
            param: name.to_owned(),
            valid: NAMES.iter().map(|n| format!("--{n}")).collect(),
        });
    }
    let value = pair.get(1).ok_or_else(|| OpError::MissingValue {
        op: path.to_owned(),
        param: name.to_owned(),
    })?;
    Ok((name, value))
}

impl fmt::Display for OpSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)?;
        for p in self.params {
            let short = p.short.map(|c| format!("-{c}|")).unwrap_or_default();
            match (p.kind, p.default) {
                (ParamKind::Bool, _) => write!(f, " [{short}--{}]", p.name)?,
                (k, Some(_)) => write!(f, " [{short}--{} {}]", p.name, k.describe())?,
                (k, None) => write!(f, " {short}--{} {}", p.name, k.describe())?,
            }
        }
        Ok(())
    }
}
