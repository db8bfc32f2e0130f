//! Every workload gives the reference's answer on the interpreter and the JIT, over
//! several seeds and sizes, for its default set-up and for variants that reach its edge
//! cases and error codes (full output windows, bad parameters, empty selections).

use csx_proto::abi::cmp;
use csx_proto::errno::{CSX_EINVAL, CSX_ENOENT, CSX_ENOSPC};
use csx_workloads::gen::{BitmapSpec, DataSpec};
use csx_workloads::reference::{self, KNN_K_MAX};
use csx_workloads::{by_name, Case, Invocation, Runner, Workload};

use crate::{Fixture, ENGINES, SEEDS};

/// Input sizes: tiny, odd (partial values at the end), and a few pages.
const SIZES: &[u64] = &[8, 100, 1003, 4096, 65_536 + 12];

/// Runs `inv` for the case on both engines and compares with the reference.
fn check(session: &mut Runner<'_>, w: &Workload, case: &Case, data: &[u8], inv: &Invocation) {
    let expected = (w.reference)(data, inv);
    for &engine in ENGINES {
        let got = session.run(w, case, inv, engine).unwrap_or_else(|e| {
            panic!(
                "{} seed {} size {} {engine:?}: {e}",
                w.name,
                case.seed,
                data.len()
            )
        });
        assert_eq!(
            got.outcome,
            expected,
            "{} seed {:#x} input {} bytes on {engine:?} with {inv:?}",
            w.name,
            case.seed,
            data.len()
        );
    }
}

/// Generates the workload's data for every seed and size, puts it on the device, and
/// checks the default set-up and every variant `variants` makes from it.
fn check_workload(name: &str, variants: fn(&Case, &Invocation) -> Vec<Invocation>) {
    let w = by_name(name).expect("a workload of the table");
    let fixture = Fixture::new();
    let mut session = Runner::new(&fixture.dev);
    for &seed in SEEDS {
        for &size in SIZES {
            let data = w.generate(seed, size).expect("generate");
            let case = Case::new(w, seed, data.len() as u64);
            fixture
                .dev
                .put_bytes(&case.input_path, &data)
                .expect("put the input");
            let default = (w.invocation)(&case);
            let expected = (w.reference)(&data, &default);
            assert!(
                expected.r0 >= 0,
                "{name}: the default set-up succeeds ({expected:?})"
            );
            check(&mut session, w, &case, &data, &default);
            for inv in variants(&case, &default) {
                check(&mut session, w, &case, &data, &inv);
            }
        }
    }
    session.unload_all().expect("unload");
}

fn with_output(inv: &Invocation, output_size_bytes: u64) -> Invocation {
    Invocation {
        output_size_bytes,
        ..inv.clone()
    }
}

fn with_cparams(inv: &Invocation, cparam1: u64, cparam2: u64) -> Invocation {
    Invocation {
        cparam1,
        cparam2,
        ..inv.clone()
    }
}

fn with_params(inv: &Invocation, params: Vec<u8>) -> Invocation {
    Invocation {
        params,
        ..inv.clone()
    }
}

fn stats_variants(_: &Case, inv: &Invocation) -> Vec<Invocation> {
    vec![
        with_output(inv, 0),
        with_output(inv, 31),
        with_output(inv, 4096),
    ]
}

#[test]
fn stats64() {
    check_workload("stats64", stats_variants);
}

#[test]
fn stats32() {
    check_workload("stats32", stats_variants);
}

#[test]
fn aggregate() {
    check_workload("aggregate", stats_variants);
}

#[test]
fn knn() {
    check_workload("knn", |case, inv| {
        let query = csx_workloads::gen::query_vector(case.seed ^ 1, &Default::default());
        let short_query: Vec<i32> = query.iter().take(3).copied().collect();
        // Wider than the program's stack copy of the query: read from the params.
        let long_query: Vec<i32> = query.iter().chain(&query).take(20).copied().collect();
        vec![
            with_params(inv, reference::knn_params(5, &long_query)),
            with_params(inv, reference::knn_params(1, &query)),
            with_params(inv, reference::knn_params(KNN_K_MAX, &query)),
            with_output(
                &with_params(inv, reference::knn_params(KNN_K_MAX, &query)),
                16 * 1024,
            ),
            with_params(inv, reference::knn_params(7, &short_query)),
            with_params(inv, reference::knn_params(0, &query)),
            with_params(inv, reference::knn_params(KNN_K_MAX + 1, &query)),
            with_params(inv, inv.params[..20].to_vec()),
            with_params(inv, Vec::new()),
            with_cparams(inv, 1_000_000, 0),
            with_cparams(inv, u64::MAX - 2, 0),
            with_output(inv, 16),
            with_output(inv, 0),
        ]
    });
}

#[test]
fn grep() {
    check_workload("grep", |_, inv| {
        vec![
            with_params(inv, b"a".to_vec()),
            with_params(inv, b"e q".to_vec()),
            with_params(inv, vec![b'z'; 255]),
            with_params(inv, vec![b'z'; 256]),
            with_params(inv, b"a\nb".to_vec()),
            with_params(inv, Vec::new()),
            with_output(inv, 15),
        ]
    });
}

#[test]
fn bitmap() {
    check_workload("bitmap", |_, inv| {
        vec![
            // λ-IO's write: no path, the whole bitmap in window 1 (or too small).
            with_output(&with_params(inv, Vec::new()), 1 << 20),
            with_output(&with_params(inv, Vec::new()), 3),
            // Tiny staging windows: many csx_file_write calls, bytes and words.
            with_output(inv, 1),
            with_output(inv, 7),
            with_output(inv, 13),
            with_output(inv, 64),
            with_cparams(inv, 100, 0),
        ]
    });
}

/// Bitmaps with very short runs (bit-level work) and very long ones (word stores).
#[test]
fn bitmap_run_lengths() {
    let w = by_name("bitmap").unwrap();
    let fixture = Fixture::new();
    let mut session = Runner::new(&fixture.dev);
    for mean_run_bits in [1, 3, 9, 100, 5000] {
        for &seed in SEEDS {
            let data = DataSpec::Bitmap(BitmapSpec { mean_run_bits })
                .generate(seed, 2000)
                .unwrap();
            let case = Case::new(w, seed, data.len() as u64);
            fixture.dev.put_bytes(&case.input_path, &data).unwrap();
            let inv = (w.invocation)(&case);
            check(&mut session, w, &case, &data, &inv);
            check(&mut session, w, &case, &data, &with_output(&inv, 5));
            check(
                &mut session,
                w,
                &case,
                &data,
                &with_output(&with_params(&inv, Vec::new()), 2000),
            );
        }
    }
    // Malformed: runs longer than nbits, a header cut short.
    let mut bad = 10u64.to_le_bytes().to_vec();
    bad.extend_from_slice(&4u32.to_le_bytes());
    bad.extend_from_slice(&7u32.to_le_bytes());
    for data in [bad, vec![1, 2, 3]] {
        let case = Case::new(w, 0, data.len() as u64);
        fixture.dev.put_bytes(&case.input_path, &data).unwrap();
        let inv = (w.invocation)(&case);
        assert_eq!((w.reference)(&data, &inv).r0, CSX_EINVAL);
        check(&mut session, w, &case, &data, &inv);
    }
    session.unload_all().unwrap();
}

fn metal_variants(case: &Case, inv: &Invocation) -> Vec<Invocation> {
    vec![
        with_cparams(inv, 0, u64::MAX),
        with_cparams(inv, 5, 4),
        with_cparams(inv, 400_000_000, 400_000_000),
        with_cparams(inv, 0, 100_000_000),
        with_output(inv, (case.input_size_bytes / 2).max(1)),
        with_output(inv, 8),
        with_output(inv, 0),
    ]
}

#[test]
fn filter() {
    check_workload("filter", metal_variants);
}

#[test]
fn filter_aggregate() {
    check_workload("filter_aggregate", |_, inv| {
        vec![
            with_cparams(inv, 0, u64::MAX),
            with_cparams(inv, 5, 4),
            with_cparams(inv, 0, 100_000_000),
            with_output(inv, 31),
        ]
    });
}

/// The chained pipeline, and its agreement with the fused program.
#[test]
fn filter_then_aggregate() {
    check_workload("filter_then_aggregate", |_, inv| {
        vec![
            with_cparams(inv, 0, u64::MAX),
            with_cparams(inv, 5, 4),
            with_cparams(inv, 0, 100_000_000),
            with_output(inv, 8),
        ]
    });
    let chained = by_name("filter_then_aggregate").unwrap();
    let fused = by_name("filter_aggregate").unwrap();
    let fixture = Fixture::new();
    let mut session = Runner::new(&fixture.dev);
    for &seed in SEEDS {
        let data = chained.generate(seed, 10_000).unwrap();
        let case = Case::new(chained, seed, data.len() as u64);
        fixture.dev.put_bytes(&case.input_path, &data).unwrap();
        let fused_case = Case {
            input_path: case.input_path.clone(),
            ..Case::new(fused, seed, data.len() as u64)
        };
        for (lo, hi) in [(0, u64::MAX), (5, 4), (300_000_000, 700_000_000)] {
            for &engine in ENGINES {
                let a = session
                    .run(
                        chained,
                        &case,
                        &with_cparams(&(chained.invocation)(&case), lo, hi),
                        engine,
                    )
                    .unwrap();
                let b = session
                    .run(
                        fused,
                        &fused_case,
                        &with_cparams(&(fused.invocation)(&fused_case), lo, hi),
                        engine,
                    )
                    .unwrap();
                assert_eq!(
                    a.outcome, b.outcome,
                    "seed {seed} bounds {lo}..={hi} {engine:?}"
                );
                assert_eq!(a.timings.len(), if lo > hi { 1 } else { 2 });
            }
        }
    }
    session.unload_all().unwrap();
}

#[test]
fn file_read() {
    check_workload("file_read", |case, inv| {
        let size = case.input_size_bytes;
        vec![
            with_cparams(inv, size / 3, 0),
            with_cparams(inv, size, 0),
            with_cparams(inv, size + 100, 0),
            with_output(inv, (size / 2).max(1)),
            with_output(&with_cparams(inv, 1, 0), size + 4096),
            with_params(inv, Vec::new()),
        ]
    });
}

/// A path that does not exist: the program returns csx_file_read's CSX_ENOENT, and
/// the host learns which function failed.
#[test]
fn file_read_of_a_missing_file() {
    let w = by_name("file_read").unwrap();
    let fixture = Fixture::new();
    let mut session = Runner::new(&fixture.dev);
    let case = Case::new(w, 0, 64);
    let inv = (w.invocation)(&case);
    for &engine in ENGINES {
        let run = session.run(w, &case, &inv, engine).unwrap();
        assert_eq!(run.outcome.r0, CSX_ENOENT);
    }
    session.unload_all().unwrap();
}

fn select_variants(case: &Case, inv: &Invocation) -> Vec<Invocation> {
    let mut v = Vec::new();
    for op in cmp::CSX_CMP_EQ..=cmp::CSX_CMP_GE {
        for operand in [0, 123_456, 999_999, u64::from(u32::MAX), u64::MAX] {
            v.push(with_cparams(inv, op, operand));
        }
    }
    v.push(with_cparams(inv, cmp::CSX_CMP_GE + 1, 0));
    v.push(with_output(inv, (case.input_size_bytes / 64).max(1)));
    v.push(with_output(inv, 0));
    v
}

#[test]
fn select_poslist() {
    check_workload("select_poslist", select_variants);
}

#[test]
fn select_bitmask() {
    check_workload("select_bitmask", select_variants);
}

#[test]
fn select_accel() {
    check_workload("select_accel", select_variants);
}

/// The error codes the variants reach are the documented ones.
#[test]
fn variants_reach_the_error_codes() {
    let w = by_name("filter").unwrap();
    let data = w.generate(1, 4096).unwrap();
    let case = Case::new(w, 1, 4096);
    let inv = (w.invocation)(&case);
    assert_eq!((w.reference)(&data, &with_output(&inv, 8)).r0, CSX_ENOSPC);
    assert_eq!((w.reference)(&data, &with_output(&inv, 0)).r0, CSX_EINVAL);
}
