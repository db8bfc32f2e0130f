//! The workload table: each workload of the seeds, its program(s), its dataset, how to
//! set up an execution for a given input, and its reference implementation.
//!
//! This is what `make demo`, `csx bench workloads` and the equivalence tests iterate
//! over. A workload runs in one of four [`Shape`]s; [`crate::run::Session::run`]
//! carries each out on a device, and [`Workload::reference`] computes the same answer
//! on the host.

use crate::gen::{
    self, BitmapSpec, DataSpec, Distribution, IntSpec, IntWidth, TextSpec, VectorSpec,
};
use crate::reference;
use csx_proto::abi::cmp;

/// Which seed paper a workload comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// λ-IO (FAST'23): stats64, stats32, knn, grep, bitmap.
    LambdaIo,
    /// Metal FS: filter and aggregate over 8-byte integers.
    MetalFs,
    /// Delilah (thesis and paper): reading files by path, selection filters.
    Delilah,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::LambdaIo => "λ-IO",
            Origin::MetalFs => "Metal FS",
            Origin::Delilah => "Delilah",
        }
    }
}

/// How a workload's program(s) meet the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// λ-IO's convention: window 0 = the input file staged into device memory, window 1
    /// = `output_size_bytes` of output; the answer is the first r0 bytes of window 1.
    Lambda,
    /// The program reads the input file itself by path (params) into window 0 of
    /// `output_size_bytes`; the answer is the first r0 bytes of window 0.
    ReadFile,
    /// As `Lambda`, and the program writes its answer to the device file named by the
    /// params at offset cparam1; the answer is that file's r0 bytes from cparam1.
    WriteFile,
    /// Two programs chained through device memory: the first runs as `Lambda`; its
    /// output window, cut to r0 bytes, becomes the second's window 0, and the second's
    /// window 1 holds the answer. When the first selects nothing (r0 = 0) there is no
    /// window to pass (windows are never empty), so the host answers for the second
    /// with its reference over no input.
    Chain,
}

/// An execution's scalars and sizes (what `csx exec` takes as flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    pub cparam1: u64,
    pub cparam2: u64,
    /// `args->params`.
    pub params: Vec<u8>,
    /// Bytes of the output window (window 1; window 0 for [`Shape::ReadFile`]); 0 for
    /// none.
    pub output_size_bytes: u64,
}

/// A program's answer: r0 (as the signed `long` C returns) and the output bytes (empty
/// when r0 is negative).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub r0: i64,
    pub output: Vec<u8>,
}

/// Where a run's data lives on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub seed: u64,
    /// Bytes of the input file (window 0 for `Lambda`, `WriteFile`, `Chain`).
    pub input_size_bytes: u64,
    /// The input file's device path.
    pub input_path: String,
    /// The device path `WriteFile` programs write to.
    pub output_path: String,
}

impl Case {
    /// The default paths for a workload's data: `/csx/data/<name>` and
    /// `/csx/out/<name>`.
    pub fn new(workload: &Workload, seed: u64, input_size_bytes: u64) -> Case {
        Case {
            seed,
            input_size_bytes,
            input_path: format!("/csx/data/{}", workload.name),
            output_path: format!("/csx/out/{}", workload.name),
        }
    }
}

/// One workload (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub name: &'static str,
    /// The SDK programs it runs, in order (two for a [`Shape::Chain`]).
    pub programs: &'static [&'static str],
    pub origin: Origin,
    /// One line for tables.
    pub summary: &'static str,
    pub shape: Shape,
    /// Its dataset's specification; `csx gen` with the workload's name uses it.
    pub dataset: fn() -> DataSpec,
    /// The execution's set-up for a case.
    pub invocation: fn(&Case) -> Invocation,
    /// The answer computed on the host from the input file's bytes.
    pub reference: fn(&[u8], &Invocation) -> Outcome,
}

impl Workload {
    /// Generates this workload's input for `seed`: `size_bytes` of data (for bitmap the
    /// decompressed size).
    pub fn generate(&self, seed: u64, size_bytes: u64) -> Result<Vec<u8>, gen::GenError> {
        (self.dataset)().generate(seed, size_bytes)
    }
}

/// Values of the Metal FS datasets: uniform in `0..=METAL_VALUE_MAX`.
pub const METAL_VALUE_MAX: u64 = 999_999_999;
/// The Metal FS filter's bounds: a quarter of the values fall below, so 75% match (the
/// paper's average case).
pub const METAL_BOUNDS: (u64, u64) = (250_000_000, METAL_VALUE_MAX);

/// Values of the Delilah selection column: uniform in `0..=SELECT_VALUE_MAX`.
pub const SELECT_VALUE_MAX: u64 = 999_999;
/// The selection predicate: `x < 500000`, half the values.
pub const SELECT_PREDICATE: (u64, u64) = (cmp::CSX_CMP_LT, 500_000);

/// knn: neighbours kept.
pub const KNN_K: u32 = 10;

/// Bytes of bitmap's staging window when it writes to a file.
pub const BITMAP_STAGING_SIZE_BYTES: u64 = 1 << 20;

fn uniform(width: IntWidth, lo: u64, hi: u64) -> DataSpec {
    DataSpec::Ints(IntSpec {
        width,
        distribution: Distribution::Uniform { lo, hi },
    })
}

fn u64_full() -> DataSpec {
    uniform(IntWidth::U64, 0, u64::MAX)
}

fn u32_full() -> DataSpec {
    uniform(IntWidth::U32, 0, u64::from(u32::MAX))
}

fn metal_values() -> DataSpec {
    uniform(IntWidth::U64, 0, METAL_VALUE_MAX)
}

fn select_column() -> DataSpec {
    uniform(IntWidth::U32, 0, SELECT_VALUE_MAX)
}

fn knn_vectors() -> DataSpec {
    DataSpec::Vectors(VectorSpec::default())
}

fn text_rows() -> DataSpec {
    DataSpec::Text(TextSpec::default())
}

fn rle_bitmap() -> DataSpec {
    DataSpec::Bitmap(BitmapSpec::default())
}

fn stats_invocation(_: &Case) -> Invocation {
    Invocation {
        output_size_bytes: reference::STATS_SIZE_BYTES as u64,
        ..Invocation::default()
    }
}

fn knn_invocation(case: &Case) -> Invocation {
    let query = gen::query_vector(case.seed, &VectorSpec::default());
    Invocation {
        params: reference::knn_params(KNN_K, &query),
        output_size_bytes: 16 * u64::from(KNN_K),
        ..Invocation::default()
    }
}

fn grep_invocation(_: &Case) -> Invocation {
    Invocation {
        params: gen::TEXT_PATTERN.to_vec(),
        output_size_bytes: 16,
        ..Invocation::default()
    }
}

fn bitmap_invocation(case: &Case) -> Invocation {
    Invocation {
        params: case.output_path.as_bytes().to_vec(),
        output_size_bytes: BITMAP_STAGING_SIZE_BYTES,
        ..Invocation::default()
    }
}

fn metal_filter_invocation(case: &Case) -> Invocation {
    Invocation {
        cparam1: METAL_BOUNDS.0,
        cparam2: METAL_BOUNDS.1,
        output_size_bytes: case.input_size_bytes.max(8),
        ..Invocation::default()
    }
}

fn metal_fused_invocation(_: &Case) -> Invocation {
    Invocation {
        cparam1: METAL_BOUNDS.0,
        cparam2: METAL_BOUNDS.1,
        output_size_bytes: reference::STATS_SIZE_BYTES as u64,
        ..Invocation::default()
    }
}

fn file_read_invocation(case: &Case) -> Invocation {
    Invocation {
        params: case.input_path.as_bytes().to_vec(),
        output_size_bytes: case.input_size_bytes.max(1),
        ..Invocation::default()
    }
}

fn poslist_invocation(case: &Case) -> Invocation {
    Invocation {
        cparam1: SELECT_PREDICATE.0,
        cparam2: SELECT_PREDICATE.1,
        output_size_bytes: case.input_size_bytes.max(4),
        ..Invocation::default()
    }
}

fn bitmask_invocation(case: &Case) -> Invocation {
    Invocation {
        cparam1: SELECT_PREDICATE.0,
        cparam2: SELECT_PREDICATE.1,
        output_size_bytes: (case.input_size_bytes / 4).div_ceil(8).max(1),
        ..Invocation::default()
    }
}

/// The chain's answer: aggregate over filter's output.
fn filter_then_aggregate(input: &[u8], inv: &Invocation) -> Outcome {
    let first = reference::filter(input, inv);
    if first.r0 < 0 {
        return first;
    }
    reference::aggregate(&first.output, &chain_second_invocation())
}

/// The second program of a chain: no scalars, a 32-byte output.
pub fn chain_second_invocation() -> Invocation {
    Invocation {
        output_size_bytes: reference::STATS_SIZE_BYTES as u64,
        ..Invocation::default()
    }
}

/// Every workload, λ-IO's first.
pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "stats64",
        programs: &["stats64"],
        origin: Origin::LambdaIo,
        summary: "count, sum, min and max of u64 values",
        shape: Shape::Lambda,
        dataset: u64_full,
        invocation: stats_invocation,
        reference: reference::stats64,
    },
    Workload {
        name: "stats32",
        programs: &["stats32"],
        origin: Origin::LambdaIo,
        summary: "count, sum, min and max of u32 values",
        shape: Shape::Lambda,
        dataset: u32_full,
        invocation: stats_invocation,
        reference: reference::stats32,
    },
    Workload {
        name: "knn",
        programs: &["knn"],
        origin: Origin::LambdaIo,
        summary: "10 nearest 16-dimensional i32 vectors to a query",
        shape: Shape::Lambda,
        dataset: knn_vectors,
        invocation: knn_invocation,
        reference: reference::knn,
    },
    Workload {
        name: "grep",
        programs: &["grep"],
        origin: Origin::LambdaIo,
        summary: "rows containing a pattern",
        shape: Shape::Lambda,
        dataset: text_rows,
        invocation: grep_invocation,
        reference: reference::grep,
    },
    Workload {
        name: "bitmap",
        programs: &["bitmap"],
        origin: Origin::LambdaIo,
        summary: "decompress a run-length bitmap into a device file",
        shape: Shape::WriteFile,
        dataset: rle_bitmap,
        invocation: bitmap_invocation,
        reference: reference::bitmap,
    },
    Workload {
        name: "filter",
        programs: &["filter"],
        origin: Origin::MetalFs,
        summary: "u64 values within bounds (75% selected)",
        shape: Shape::Lambda,
        dataset: metal_values,
        invocation: metal_filter_invocation,
        reference: reference::filter,
    },
    Workload {
        name: "aggregate",
        programs: &["aggregate"],
        origin: Origin::MetalFs,
        summary: "sum, min, max and count of u64 values",
        shape: Shape::Lambda,
        dataset: metal_values,
        invocation: stats_invocation,
        reference: reference::aggregate,
    },
    Workload {
        name: "filter_aggregate",
        programs: &["filter_aggregate"],
        origin: Origin::MetalFs,
        summary: "filter and aggregate fused in one program",
        shape: Shape::Lambda,
        dataset: metal_values,
        invocation: metal_fused_invocation,
        reference: reference::filter_aggregate,
    },
    Workload {
        name: "filter_then_aggregate",
        programs: &["filter", "aggregate"],
        origin: Origin::MetalFs,
        summary: "filter, then aggregate over its output in device memory",
        shape: Shape::Chain,
        dataset: metal_values,
        invocation: metal_filter_invocation,
        reference: filter_then_aggregate,
    },
    Workload {
        name: "file_read",
        programs: &["file_read"],
        origin: Origin::Delilah,
        summary: "the program reads a device file by path",
        shape: Shape::ReadFile,
        dataset: u64_full,
        invocation: file_read_invocation,
        reference: reference::file_read,
    },
    Workload {
        name: "select_poslist",
        programs: &["select_poslist"],
        origin: Origin::Delilah,
        summary: "selection x < 500000 over u32s as a position list",
        shape: Shape::Lambda,
        dataset: select_column,
        invocation: poslist_invocation,
        reference: reference::select_poslist,
    },
    Workload {
        name: "select_bitmask",
        programs: &["select_bitmask"],
        origin: Origin::Delilah,
        summary: "the same selection as a bitmask, in eBPF",
        shape: Shape::Lambda,
        dataset: select_column,
        invocation: bitmask_invocation,
        reference: reference::select_bitmask,
    },
    Workload {
        name: "select_accel",
        programs: &["select_accel"],
        origin: Origin::Delilah,
        summary: "the same selection through csx_filter_u32",
        shape: Shape::Lambda,
        dataset: select_column,
        invocation: bitmask_invocation,
        reference: reference::select_accel,
    },
];

/// The workload called `name`.
pub fn by_name(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_programs_exist() {
        for (i, w) in WORKLOADS.iter().enumerate() {
            assert!(WORKLOADS[..i].iter().all(|o| o.name != w.name));
            assert_eq!(
                w.programs.len(),
                if w.shape == Shape::Chain { 2 } else { 1 }
            );
            for p in w.programs {
                assert!(crate::compile::PROGRAMS.iter().any(|s| s.name == *p), "{p}");
            }
            assert!((w.dataset)().validate().is_ok());
        }
        for p in crate::compile::PROGRAMS {
            assert!(
                WORKLOADS.iter().any(|w| w.programs.contains(&p.name)),
                "{} unused",
                p.name
            );
        }
    }

    #[test]
    fn metal_selects_three_quarters() {
        let w = by_name("filter").unwrap();
        let data = w.generate(1, 8 * 4000).unwrap();
        let case = Case::new(w, 1, data.len() as u64);
        let out = (w.reference)(&data, &(w.invocation)(&case));
        let share = out.output.len() as f64 / data.len() as f64;
        assert!((0.7..0.8).contains(&share), "{share}");
    }
}
