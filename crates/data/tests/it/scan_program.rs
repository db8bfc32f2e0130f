//! The emitted scan program alone on a device: random layouts (4- and 8-byte inputs,
//! several ranges, any outputs, row counts around the unrolled form's group size)
//! against a reference written the obvious way, on both engine kinds; what a rejected
//! row costs in instructions; and the argument checks.

use csx_data::rng::Stream;
use csx_data::scan::program::{emit, Input, Layout, Output, PASS_UNKNOWN, UNROLL};
use csx_host::proto::{EngineKind, MemHandle, ProgramType};
use csx_host::{Device, ExecuteRequest, Execution};

/// A random layout of `chunk_rows` rows: 1-5 inputs (widest first), each filtered or
/// not (at least one is), 0-3 outputs.
fn random_layout(rng: &mut Stream, chunk_rows: u64) -> Layout {
    let n = rng.range(1, 5) as usize;
    let mut widths: Vec<u64> = (0..n).map(|_| rng.pick(&[4u64, 8])).collect();
    widths.sort_by_key(|&w| std::cmp::Reverse(w));
    let mut inputs = Vec::new();
    let mut at = 0;
    for (k, &width) in widths.iter().enumerate() {
        let filtered = k == n - 1 || rng.range(0, 2) > 0;
        let ranges = filtered.then(|| {
            let mut lo = rng.range(0, 20) as u64;
            let mut r = Vec::new();
            for _ in 0..rng.range(1, 3) {
                let hi = lo + rng.range(0, 15) as u64;
                r.push((lo, hi));
                lo = hi + 2 + rng.range(0, 10) as u64;
            }
            r
        });
        inputs.push(Input {
            width,
            segment: at,
            dict_entries: None,
            ranges,
            pass_ppm: rng.range(0, i64::from(PASS_UNKNOWN)) as u32,
        });
        at += chunk_rows * width;
    }
    let m = rng.range(0, 3) as usize;
    let picks: Vec<usize> = (0..m)
        .map(|_| rng.range(0, n as i64 - 1) as usize)
        .collect();
    let mut out_at = 0;
    let outputs = picks
        .iter()
        .map(|&input| {
            let o = Output {
                input,
                segment: out_at,
            };
            out_at += chunk_rows * widths[input];
            o
        })
        .collect();
    Layout {
        inputs,
        outputs,
        chunk_rows,
        in_bytes: at,
        out_bytes: out_at,
    }
}

fn value(window: &[u8], input: &Input, row: u64) -> u64 {
    let at = (input.segment + row * input.width) as usize;
    let mut b = [0u8; 8];
    b[..input.width as usize].copy_from_slice(&window[at..at + input.width as usize]);
    u64::from_le_bytes(b)
}

/// The rows kept and the output window, the obvious way.
fn reference(layout: &Layout, window: &[u8], rows: u64) -> (u64, Vec<u8>) {
    let mut out = vec![0u8; layout.out_bytes.max(64) as usize];
    let mut kept = 0;
    for row in 0..rows {
        let pass = layout.inputs.iter().all(|i| match &i.ranges {
            None => true,
            Some(r) => {
                let v = value(window, i, row);
                r.iter().any(|&(lo, hi)| lo <= v && v <= hi)
            }
        });
        if !pass {
            continue;
        }
        for o in &layout.outputs {
            let input = &layout.inputs[o.input];
            let w = input.width as usize;
            let v = value(window, input, row).to_le_bytes();
            let at = (o.segment + kept * input.width) as usize;
            out[at..at + w].copy_from_slice(&v[..w]);
        }
        kept += 1;
    }
    (kept, out)
}

struct Run<'a> {
    dev: &'a Device,
    input: MemHandle,
    output: MemHandle,
}

impl Run<'_> {
    /// Runs `layout`'s program over `rows` rows of the input window (`windows`: bytes
    /// of each window given), the output zeroed first.
    fn run(&self, layout: &Layout, engine: EngineKind, rows: u64, windows: [u64; 2]) -> Execution {
        let image = emit(layout).unwrap();
        let p = (self.dev)
            .load_program_any_slot(ProgramType::Raw, &image, Some("scan"))
            .unwrap();
        self.dev.activate(p, engine).unwrap();
        self.dev.fill_mem(self.output, 0, windows[1], 0).unwrap();
        let req = ExecuteRequest::new(p)
            .cparams(rows, 0)
            .window(self.input, 0, windows[0])
            .window(self.output, 0, windows[1]);
        let x = self.dev.execute(&req).unwrap();
        self.dev.unload(p).unwrap();
        assert!(x.trap.is_none(), "{engine:?}: {:?}", x.trap);
        x
    }
}

/// Runs `layout`'s program over `rows` rows of `window` (written to the input already)
/// on both engine kinds, checking r0 and the output window against the reference;
/// the rows kept.
fn check_both_engines(
    dev: &Device,
    run: &Run<'_>,
    layout: &Layout,
    window: &[u8],
    rows: u64,
    what: &str,
) -> u64 {
    let (want, want_out) = reference(layout, window, rows);
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let windows = [layout.in_bytes.max(64), layout.out_bytes.max(64)];
        let x = run.run(layout, engine, rows, windows);
        let what = format!("{what}, {engine:?}: {layout:?}");
        assert_eq!(x.r0_signed(), want as i64, "{what}");
        let got = dev.read_mem(run.output, 0, windows[1]).unwrap();
        assert_eq!(got, want_out, "{what}");
    }
    want
}

fn setup(dev: &Device, bytes: u64) -> Run<'_> {
    Run {
        dev,
        input: dev.alloc(bytes).unwrap(),
        output: dev.alloc(bytes).unwrap(),
    }
}

#[test]
fn the_scan_program_keeps_what_the_reference_keeps_on_random_layouts() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let chunk_rows = 3 * UNROLL as u64 + 5;
    let bytes = 5 * 8 * chunk_rows + 64;
    let run = setup(&dev, bytes);
    let mut rng = Stream::new(17, "scan program");
    for case in 0..16 {
        let layout = random_layout(&mut rng, chunk_rows);
        // Small values, so 4- and 8-byte inputs alike land in and out of the ranges.
        let mut window = vec![0u8; bytes as usize];
        for i in &layout.inputs {
            for row in 0..chunk_rows {
                let at = (i.segment + row * i.width) as usize;
                window[at] = rng.range(0, 40) as u8;
            }
        }
        dev.write_mem(run.input, 0, &window).unwrap();
        let u = UNROLL as u64;
        for rows in [0, u - 1, u + 1, chunk_rows] {
            let what = format!("case {case}, {rows} rows");
            check_both_engines(&dev, &run, &layout, &window, rows, &what);
        }
    }
    dev.close().unwrap();
}

/// Q6's shape: three filtered 8-byte inputs and a 4-byte one, two outputs.
fn q6_layout(chunk_rows: u64, first_pass_ppm: u32) -> Layout {
    let input = |width, segment, ranges, pass_ppm| Input {
        width,
        segment,
        dict_entries: None,
        ranges,
        pass_ppm,
    };
    let c = chunk_rows;
    Layout {
        inputs: vec![
            input(8, 0, Some(vec![(5, 7)]), PASS_UNKNOWN),
            input(8, 8 * c, Some(vec![(0, 23)]), PASS_UNKNOWN),
            input(8, 16 * c, None, PASS_UNKNOWN),
            input(4, 24 * c, Some(vec![(100, 200)]), first_pass_ppm),
        ],
        outputs: vec![
            Output {
                input: 2,
                segment: 0,
            },
            Output {
                input: 0,
                segment: 8 * c,
            },
        ],
        chunk_rows: c,
        in_bytes: 28 * c,
        out_bytes: 16 * c,
    }
}

/// A row rejected by the first input tested costs its load, at most two jumps and a
/// share of the loop's instructions: fewer than 4 instructions a row, where a program
/// advancing a pointer per input spends about 8.
#[test]
fn a_row_the_first_test_rejects_costs_under_four_instructions() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let rows = 4000u64;
    let layout = q6_layout(rows, 10_000);
    let run = setup(&dev, layout.in_bytes);
    // The 4-byte input (estimated to pass least, so tested first) rejects every row.
    let window = vec![1u8; layout.in_bytes as usize];
    dev.write_mem(run.input, 0, &window).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let x = run.run(&layout, engine, rows, [layout.in_bytes, layout.out_bytes]);
        assert_eq!(x.r0_signed(), 0);
        let insns: u64 = x.work.iter().sum();
        assert!(insns > 0, "{engine:?}: the device counts work");
        assert!(
            insns < 4 * rows,
            "{engine:?}: {insns} instructions for {rows} rows"
        );
    }
    dev.close().unwrap();
}

/// Too many rows for the layout, or a window smaller than it: CSX_EINVAL, nothing
/// written.
#[test]
fn the_scan_program_refuses_rows_and_windows_that_do_not_fit_its_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let layout = q6_layout(100, PASS_UNKNOWN);
    let run = setup(&dev, layout.in_bytes);
    dev.write_mem(run.input, 0, &vec![6u8; layout.in_bytes as usize])
        .unwrap();
    let full = [layout.in_bytes, layout.out_bytes];
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        assert_eq!(run.run(&layout, engine, 101, full).r0_signed(), -22);
        let short_in = [layout.in_bytes - 8, layout.out_bytes];
        assert_eq!(run.run(&layout, engine, 100, short_in).r0_signed(), -22);
        let short_out = [layout.in_bytes, layout.out_bytes - 8];
        assert_eq!(run.run(&layout, engine, 100, short_out).r0_signed(), -22);
        let out = dev.read_mem(run.output, 0, layout.out_bytes).unwrap();
        assert!(out.iter().all(|&b| b == 0), "{engine:?}");
    }
    dev.close().unwrap();
}

/// A range bounded on both sides is tested with one compare of `value - lo`: values
/// just below `lo` (which wrap), at both bounds, just above `hi`, zero and the largest
/// the width holds, for a `lo` an immediate holds and one it does not, in every form.
#[test]
fn one_bounded_range_keeps_exactly_its_values_at_every_edge() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let cases: [(u64, u64, u64); 4] = [
        (4, 8766, 9130),
        (4, 0x8000_0001, 0xffff_fff0),
        (8, 5, 7),
        (8, 0x1_0000_0000, 0x8000_0000_0000_0005),
    ];
    for (width, lo, hi) in cases {
        let max = if width == 4 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        };
        let values = [0, 1, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, max - 1, max];
        let rows = 3 * UNROLL as u64 + values.len() as u64;
        let mut window = vec![0u8; (rows * (width + 8)) as usize];
        let mut layout = Layout {
            inputs: vec![Input {
                width,
                segment: 0,
                dict_entries: None,
                ranges: Some(vec![(lo, hi)]),
                pass_ppm: PASS_UNKNOWN,
            }],
            outputs: vec![Output {
                input: 0,
                segment: 0,
            }],
            chunk_rows: rows,
            in_bytes: rows * width,
            out_bytes: rows * width,
        };
        for row in 0..rows {
            let v = values[(row as usize * 7) % values.len()];
            let at = (row * width) as usize;
            window[at..at + width as usize].copy_from_slice(&v.to_le_bytes()[..width as usize]);
        }
        // The unrolled form, then the pointer form (a dictionary input rules the
        // unrolled one out: an 8-byte column of codes all 0).
        for dict in [false, true] {
            if dict {
                layout.inputs.insert(
                    0,
                    Input {
                        width: 8,
                        segment: rows * width,
                        dict_entries: Some(1),
                        ranges: None,
                        pass_ppm: PASS_UNKNOWN,
                    },
                );
                layout.in_bytes += rows * 8;
                layout.outputs[0].input = 1;
            }
            let run = setup(&dev, layout.in_bytes.max(64));
            dev.write_mem(run.input, 0, &window[..layout.in_bytes as usize])
                .unwrap();
            let want = check_both_engines(&dev, &run, &layout, &window, rows, "an edge");
            assert!(want > 0 && want < rows, "{width} {lo} {hi}: {want} kept");
        }
    }
    dev.close().unwrap();
}

/// An 8-byte column's ranges that make one interval of signed values (a decimal's
/// `x < 24`: `[0, 2399]` and every negative value; `x >= 5`; two negative bounds; every
/// value) keep exactly their values: each bound, its neighbours, zero, -1 and both
/// extremes, on both engine kinds.
#[test]
fn signed_intervals_keep_exactly_their_values_at_every_edge() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let sign = 1u64 << 63;
    let cases: [Vec<(u64, u64)>; 5] = [
        vec![(0, 2399), (sign, u64::MAX)],
        vec![(5, sign - 1)],
        vec![(sign + 5, u64::MAX - 3)],
        vec![(0, 7), (u64::MAX - 9, u64::MAX)],
        vec![(0, sign - 1), (sign, u64::MAX)],
    ];
    for ranges in cases {
        let mut values = vec![0, 1, u64::MAX, u64::MAX - 1, sign, sign + 1, sign - 1];
        for &(lo, hi) in &ranges {
            values.extend([
                lo,
                hi,
                lo.wrapping_sub(1),
                hi.wrapping_add(1),
                lo + 1,
                hi - 1,
            ]);
        }
        let rows = 3 * UNROLL as u64 + values.len() as u64;
        let layout = Layout {
            inputs: vec![Input {
                width: 8,
                segment: 0,
                dict_entries: None,
                ranges: Some(ranges.clone()),
                pass_ppm: PASS_UNKNOWN,
            }],
            outputs: vec![Output {
                input: 0,
                segment: 0,
            }],
            chunk_rows: rows,
            in_bytes: rows * 8,
            out_bytes: rows * 8,
        };
        let mut window = vec![0u8; (rows * 8) as usize];
        for row in 0..rows as usize {
            let v = values[(row * 7) % values.len()];
            window[8 * row..8 * row + 8].copy_from_slice(&v.to_le_bytes());
        }
        let run = setup(&dev, layout.in_bytes);
        dev.write_mem(run.input, 0, &window).unwrap();
        let want = check_both_engines(&dev, &run, &layout, &window, rows, "a signed edge");
        assert!(want > 0, "{ranges:?}: nothing kept");
    }
    dev.close().unwrap();
}

/// Q6's group loop is small enough for the JIT to version it (its loads then go
/// unchecked): eight rows a group, and the rows a group holds at most [`UNROLL`].
#[test]
fn q6s_group_loop_fits_the_slots_the_jit_versions() {
    use csx_data::scan::program::{group_rows, GROUP_SLOTS_MAX};
    let layout = q6_layout(786_432, 144_000);
    let group = group_rows(&layout);
    assert_eq!(group, 8);
    let image = emit(&layout).unwrap();
    // The whole program (checks, setup, the group loop, the tail, exits) is within
    // twice the loop's bound: the loop itself is under it.
    assert!(
        image.len() / 8 < 2 * GROUP_SLOTS_MAX,
        "{} slots",
        image.len() / 8
    );
}
