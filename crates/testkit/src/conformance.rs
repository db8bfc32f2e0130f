//! The bpf_conformance suite, read in place from `../shared/conformance/vectors.json`
//! (or `$CSX_SHARED_DIR/conformance/vectors.json`), never copied into the repository.
//!
//! Each vector is a pre-assembled program, optional memory and the expected r0. The run
//! follows the suite's conventions: the memory is mapped read-write at
//! `RegionIdx::EMBEDDER_FIRST` with r1 = its address and r2 = its length (when a test has
//! no memory, the suite's plugin protocol passes none, so r1 = r2 = 0), the function
//! table is [`FunctionTable::conformance`] (helper 5 returns its first argument), and the
//! host is [`ConformanceHost`].
//!
//! Invariant: a missing or unreadable suite is an error naming the path it tried, so a
//! test built on [`load_vectors`] fails loudly instead of passing with nothing to run.

use std::path::PathBuf;
use std::sync::Arc;

use csx_ebpf::count::ExecCounts;
use csx_ebpf::engine::{RunOptions, RunOutcome};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::isa::decode_all;
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::Program;
use csx_ebpf::verifier::verify;

use crate::engines::EngineFactory;

/// Fuel for one conformance run: far more than any vector needs (the heaviest charges a
/// few thousand), small enough that an engine bug that loops ends in well under a second.
pub const CONFORMANCE_FUEL: u64 = 10_000_000;

/// One test of the suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConformanceVector {
    /// File name of the `.data` source, e.g. `add.data`.
    pub name: String,
    /// Bytecode: 8-byte little-endian slots.
    pub code: Vec<u8>,
    /// Initial memory (may be empty).
    pub mem: Vec<u8>,
    /// Expected r0.
    pub result: u64,
    /// The cpu version the test needs (1-4).
    pub cpu_version: u32,
    /// Group bitmask (base32=1, base64=2, atomic32=4, atomic64=8, divmul32=16,
    /// divmul64=32, packet=64, callx=128).
    pub groups: u32,
}

/// Why the suite could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceError {
    #[error(
        "cannot read the bpf_conformance suite at {}: {source} \
         (it is read in place from ../shared/conformance; set CSX_SHARED_DIR to the \
         directory holding conformance/ if it lives elsewhere)",
        path.display()
    )]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: vector `{name}`: {message}", path.display())]
    Malformed {
        path: PathBuf,
        name: String,
        message: String,
    },
}

/// The record as stored in `vectors.json`.
#[derive(serde::Deserialize)]
struct RawVector {
    name: String,
    code: String,
    mem: String,
    result: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    parse_error: String,
    cpu_version: u32,
    groups: u32,
}

/// Where the suite is read from: `conformance/vectors.json` in
/// [`crate::tools::shared_dir`].
pub fn vectors_path() -> PathBuf {
    crate::tools::shared_dir().join("conformance/vectors.json")
}

/// Reads every vector of the suite.
pub fn load_vectors() -> Result<Vec<ConformanceVector>, ConformanceError> {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path).map_err(|source| ConformanceError::Unreadable {
        path: path.clone(),
        source,
    })?;
    let raw: Vec<RawVector> =
        serde_json::from_str(&text).map_err(|source| ConformanceError::Json {
            path: path.clone(),
            source,
        })?;
    raw.into_iter()
        .map(|r| {
            convert(&r).map_err(|message| ConformanceError::Malformed {
                path: path.clone(),
                name: r.name.clone(),
                message,
            })
        })
        .collect()
}

fn convert(r: &RawVector) -> Result<ConformanceVector, String> {
    // Every stored vector expects a value; one expecting an error would need a runner
    // that checks errors, so refuse it rather than misjudge it.
    if !r.error.is_empty() || !r.parse_error.is_empty() {
        return Err(format!(
            "expects an error ({}{}), not a value",
            r.error, r.parse_error
        ));
    }
    let digits = r
        .result
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X");
    let result = u64::from_str_radix(digits, 16)
        .map_err(|e| format!("result `{}` is not a hex u64: {e}", r.result))?;
    Ok(ConformanceVector {
        name: r.name.clone(),
        code: hex(&r.code).map_err(|e| format!("code: {e}"))?,
        mem: hex(&r.mem).map_err(|e| format!("mem: {e}"))?,
        result,
        cpu_version: r.cpu_version,
        groups: r.groups,
    })
}

/// Decodes a string of hex digit pairs (whitespace ignored).
fn hex(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits ({})", digits.len()));
    }
    digits
        .chunks_exact(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
            u8::from_str_radix(text, 16).map_err(|e| format!("`{text}`: {e}"))
        })
        .collect()
}

/// Verifies and runs `v` on the engine `engine_factory` builds, once without and once
/// with block counting (`csx_ebpf::count`); returns the counted run's block counters.
/// `Err` says what went wrong (decode, verification, engine construction, trap, wrong
/// r0, or a counted run that differs from the uncounted one).
pub fn run_vector(
    v: &ConformanceVector,
    engine_factory: EngineFactory,
) -> Result<Vec<u64>, String> {
    let insns = decode_all(&v.code).map_err(|e| format!("decode: {e}"))?;
    let program = Program::from_insns(v.name.clone(), insns);
    let verified = verify(program, Arc::new(FunctionTable::conformance()))
        .map_err(|e| format!("verify: {e}"))?;
    let engine = engine_factory(Arc::new(verified)).map_err(|e| format!("engine: {e}"))?;

    let run = |counts: Option<&ExecCounts>| -> Result<(RunOutcome, Vec<u8>), String> {
        let mut mem = v.mem.clone();
        let mut map = MemoryMap::new();
        let (addr, len) = if mem.is_empty() {
            (0, 0)
        } else {
            let len = mem.len() as u64;
            let addr = map
                .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut mem)
                .map_err(|e| format!("map: {e}"))?;
            (addr, len)
        };
        let opts = RunOptions {
            fuel: CONFORMANCE_FUEL,
            counts,
            ..RunOptions::default()
        };
        let outcome = engine.run(&mut map, [addr, len, 0, 0, 0], &opts, &mut ConformanceHost);
        Ok((outcome, mem))
    };
    let (outcome, mem) = run(None)?;
    match &outcome.result {
        Ok(r0) if *r0 == v.result => {}
        Ok(r0) => return Err(format!("r0 is {r0:#x}, expected {:#x}", v.result)),
        Err(trap) => return Err(format!("trapped: {trap} (expected r0 {:#x})", v.result)),
    }
    let counts = ExecCounts::new(engine.program().blocks());
    let counted = run(Some(&counts))?;
    if counted != (outcome, mem) {
        return Err(format!(
            "the counted run differs from the uncounted one: {:?}",
            counted.0
        ));
    }
    Ok(counts.values())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_decoding() {
        assert_eq!(hex("00ff 1a").unwrap(), vec![0, 0xff, 0x1a]);
        assert_eq!(hex("").unwrap(), Vec::<u8>::new());
        assert!(hex("0").is_err());
        assert!(hex("zz").is_err());
    }
}
