//! The device side of csx-data: the operators of `sdk/ssb` (compiled by `build.rs`),
//! their parameter blocks (the structs of `sdk/ssb/ssb.h`), and the few conventions the
//! pipelines share over a [`csx_host::Session`]: operators load by name and run with
//! the operator budget, and a session's failures become [`DataError`]s.
//!
//! The session does the bookkeeping: programs unloaded and memory freed when it ends
//! (also on error and panic), and a [`Meter`] of what each command cost: modelled
//! nanoseconds (the device's performance model, the same on every machine), bytes to
//! and from the host, bytes read from the media and fuel.

use csx_host::proto::limits::COPY_SOURCES_MAX;
use csx_host::proto::{CopySource, EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply};
use csx_host::session::{Params, SessionError};
use csx_host::ExecuteRequest;

pub use csx_host::session::{Meter, PendingCopy, Session};

use crate::error::DataError;

mod compiled {
    include!(concat!(env!("OUT_DIR"), "/ssb_programs.rs"));
}

/// Every operator: `(name, eBPF object)`.
pub fn programs() -> &'static [(&'static str, &'static [u8])] {
    compiled::OBJECTS
}

/// The eBPF object of operator `name`.
pub fn program(name: &str) -> Option<&'static [u8]> {
    compiled::OBJECTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, o)| *o)
}

/// Device memory a [`files_unchanged`] check copies its sentinels into: one byte for
/// each of [`COPY_SOURCES_MAX`] files.
pub const SENTINELS_BYTES: u64 = COPY_SOURCES_MAX as u64;

/// Whether every file of `files` is unchanged since its sentinel (its first byte) was
/// first copied: the copy is served from the device's resident memory only while the
/// file's content version is the one it was read at, so a write, rename or delete since
/// (or an eviction, or a device without resident memory) answers `false`. Copying also
/// marks the versions a staging that follows starts from. One Memory Copy per
/// [`COPY_SOURCES_MAX`] files into `sentinel` ([`SENTINELS_BYTES`] bytes), charged to
/// the session's meter. A file that cannot give its first byte (gone, empty) is not unchanged; the
/// staging that follows reports it.
pub fn files_unchanged(s: &mut Session, sentinel: MemHandle, files: &[String]) -> bool {
    let mut unchanged = true;
    for group in files.chunks(COPY_SOURCES_MAX) {
        let sources = group
            .iter()
            .map(|path| CopySource::ResidentFile {
                path: path.clone(),
                offset: 0,
                len: 1,
            })
            .collect();
        let want = group.len() as u64;
        let op = Op::MemCopy {
            dst: sentinel,
            dst_offset: 0,
            sources,
        };
        let Ok(c) = s.device().client().call_ok(op) else {
            unchanged = false;
            continue;
        };
        let resident = match c.reply {
            Reply::Copied { resident_bytes } => resident_bytes.min(c.value),
            _ => 0,
        };
        let meter = &mut s.meter;
        meter.commands += 1;
        meter.modelled_ns += c.timing.modelled_ns;
        meter.media_bytes += c.value - resident;
        meter.resident_bytes += resident;
        unchanged &= c.value == want && resident == want;
    }
    unchanged
}

/// Fuel of one operator run: 2^36, far above the ~10 fuel per row the operators use.
pub const OPERATOR_FUEL: u64 = 1 << 36;
/// Time limit of one operator run: 10 minutes (an interpreter probe of SF 100's rounds).
pub const OPERATOR_TIME_LIMIT_MS: u32 = 600_000;

/// A window of an execution: `(allocation, offset, length)`.
pub type Window = (MemHandle, u64, u64);

/// Loads operator `name` of the catalogue and activates it on `engine`.
pub fn load(s: &mut Session, name: &str, engine: EngineKind) -> Result<ProgramIndex, DataError> {
    let image = program(name).ok_or_else(|| DataError::Operator {
        operator: name.to_string(),
        message: "no such operator in this build".to_string(),
    })?;
    Ok(s.load(name, ProgramType::Elf, image, engine)?)
}

/// A run of the operator in `pind` over `windows`. An operator scans a whole chunk or
/// partition (millions of rows on the interpreter): it gets more than the device's
/// default budgets.
pub fn run(pind: ProgramIndex, windows: &[Window]) -> ExecuteRequest {
    windows.iter().fold(
        ExecuteRequest::new(pind)
            .fuel(OPERATOR_FUEL)
            .time_limit_ms(OPERATOR_TIME_LIMIT_MS),
        |req, &(h, off, len)| req.window(h, off, len),
    )
}

/// Allocates device memory for an operator (at least 64 bytes: an empty column still
/// gets a window).
pub fn alloc(s: &mut Session, bytes: u64) -> Result<MemHandle, DataError> {
    Ok(s.alloc(bytes.max(64))?)
}

impl From<SessionError> for DataError {
    fn from(e: SessionError) -> DataError {
        match e {
            SessionError::Device { what, source } => DataError::Device { what, source },
            SessionError::Trap { program, trap } => DataError::Operator {
                operator: program,
                message: format!("trapped: {trap}"),
            },
            SessionError::Failed {
                program,
                r0,
                code,
                detail,
            } => DataError::Operator {
                operator: program,
                message: format!("returned {r0} ({code}){detail}"),
            },
            SessionError::ShortCopy { .. } => {
                DataError::Invalid(format!("{e} (the file is shorter than its schema says)"))
            }
            other => DataError::Invalid(other.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parameter blocks, field for field the structs of `sdk/ssb/ssb.h`.

/// `struct ssb_filter_params` for `ranges` (`{lo, hi}` each, inclusive).
pub fn filter_params(ranges: &[(u64, u64)]) -> Params {
    let p = Params::new()
        .u32("nranges", ranges.len() as u32)
        .u32("pad", 0);
    ranges.iter().fold(p, |p, &(lo, hi)| {
        p.u64("ranges.lo", lo).u64("ranges.hi", hi)
    })
}

/// `struct ssb_dim_params`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DimParams {
    pub lut_offset: u32,
    pub lut_entries: u32,
    pub key_base: u32,
    pub group_count: u32,
    pub group_base: u32,
}

impl DimParams {
    pub fn params(&self) -> Params {
        Params::new()
            .u32("lut_offset", self.lut_offset)
            .u32("lut_entries", self.lut_entries)
            .u32("key_base", self.key_base)
            .u32("group_count", self.group_count)
            .u32("group_base", self.group_base)
            .u32("pad", 0)
    }
}

/// `SSB_NO_WINDOW`: no window in a window-index field.
pub const NO_WINDOW: u32 = u32::MAX;

/// `struct ssb_probe_dim`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeDimParams {
    pub fk_window: u32,
    pub lut_offset: u32,
    pub lut_entries: u32,
    pub key_base: u32,
    pub stride: u32,
}

/// `struct ssb_probe_params` (its `dims` cut to the dimensions used).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeParams {
    /// 0: aggregate into the output, 1: emit `{group, value}` per joined row.
    pub mode: u32,
    pub mask_window: u32,
    pub a_window: u32,
    pub b_window: u32,
    pub out_window: u32,
    pub groups: u32,
    pub dims: Vec<ProbeDimParams>,
}

impl ProbeParams {
    pub fn params(&self) -> Params {
        let p = Params::new()
            .u32("mode", self.mode)
            .u32("ndims", self.dims.len() as u32)
            .u32("mask_window", self.mask_window)
            .u32("a_window", self.a_window)
            .u32("b_window", self.b_window)
            .u32("out_window", self.out_window)
            .u32("groups", self.groups)
            .u32("pad", 0);
        self.dims.iter().fold(p, |p, d| {
            p.u32("dims.fk_window", d.fk_window)
                .u32("dims.lut_offset", d.lut_offset)
                .u32("dims.lut_entries", d.lut_entries)
                .u32("dims.key_base", d.key_base)
                .u32("dims.stride", d.stride)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of `struct name` in `header`: `(name, offset, size)`, C's natural
    /// alignment, an array of structs given `n` elements (named `array.field`).
    fn c_fields(header: &str, name: &str, n: usize) -> Vec<(String, usize, usize)> {
        let start = header
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("struct {name} in ssb.h"));
        let body = &header[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
        let mut out: Vec<(String, usize, usize)> = Vec::new();
        let mut at = 0;
        for decl in body.split(';').map(str::trim).filter(|d| !d.is_empty()) {
            let (ty, names) = decl.rsplit_once(' ').unwrap();
            let ty = ty.trim();
            if let Some(inner) = ty.strip_prefix("struct ") {
                let array = names.split('[').next().unwrap();
                for _ in 0..n {
                    for (f, off, size) in c_fields(header, inner, 0) {
                        out.push((format!("{array}.{f}"), at + off, size));
                    }
                    at += c_fields(header, inner, 0)
                        .iter()
                        .map(|f| f.2)
                        .sum::<usize>();
                }
                continue;
            }
            // `csx_u64 lo, hi` declares two fields.
            let (ty, first) = ty.split_once(' ').map_or((ty, None), |(t, f)| (t, Some(f)));
            let size = match ty {
                "csx_u32" => 4,
                "csx_u64" => 8,
                other => panic!("field type {other} in struct {name}"),
            };
            for f in first.into_iter().chain(names.split(',')) {
                let f = f.trim().trim_end_matches(',');
                if f.is_empty() {
                    continue;
                }
                at = at.next_multiple_of(size);
                out.push((f.to_string(), at, size));
                at += size;
            }
        }
        out
    }

    fn rust_fields(p: &Params) -> Vec<(String, usize, usize)> {
        p.fields()
            .iter()
            .map(|&(n, o, s)| (n.to_string(), o, s))
            .collect()
    }

    #[test]
    fn parameter_blocks_match_the_c_header() {
        let header =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../sdk/ssb/ssb.h"))
                .unwrap();
        for n in [1, 2, 16] {
            let ranges: Vec<(u64, u64)> = (0..n as u64).map(|i| (i, i + 1)).collect();
            assert_eq!(
                rust_fields(&filter_params(&ranges)),
                c_fields(&header, "ssb_filter_params", n)
            );
        }
        assert_eq!(
            rust_fields(&DimParams::default().params()),
            c_fields(&header, "ssb_dim_params", 0)
        );
        for n in 1..=3 {
            let p = ProbeParams {
                dims: vec![ProbeDimParams::default(); n],
                ..ProbeParams::default()
            };
            assert_eq!(
                rust_fields(&p.params()),
                c_fields(&header, "ssb_probe_params", n)
            );
        }
        assert_eq!(
            rust_fields(&crate::stage::piece_params(&Default::default())),
            c_fields(&header, "col_unpack_piece", 0)
        );
        // The parse itself: the probe's first dimension sits after eight u32s.
        let fields = c_fields(&header, "ssb_probe_params", 1);
        assert_eq!(fields[8], ("dims.fk_window".to_string(), 32, 4));
    }

    #[test]
    fn parameter_blocks_encode_little_endian_in_order() {
        let d = DimParams {
            lut_offset: 8,
            lut_entries: 2,
            key_base: 1,
            group_count: 5,
            group_base: 1992,
        };
        let b = d.params().into_bytes();
        let words: Vec<u32> = b
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [8, 2, 1, 5, 1992, 0]);
        let f = filter_params(&[(3, 9)]).into_bytes();
        assert_eq!(f.len(), 24);
        assert_eq!(u64::from_le_bytes(f[16..24].try_into().unwrap()), 9);
    }
}
