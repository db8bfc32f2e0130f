//! SSB flights 1 and 3 on the device against the host reference and DuckDB: every
//! query on every split, Q1.1 and Q3.3 on every filter strategy and both engine kinds,
//! at SF 0.1 (600 k LINEORDER rows). DuckDB runs the specification's SQL over the
//! Parquet copy; the host reference computes from the columns directly.

use csx_data::columnar::{copy_as_raw, write_encoded_column, ColumnType, Values};
use csx_data::scan::FilterStrategy;
use csx_data::ssb::queries::{query, QUERIES};
use csx_data::ssb::run::{reference, run, LocalSource, ProbeKind, ResultRow, RunOptions, Split};
use csx_host::proto::EngineKind;

fn sorted(mut rows: Vec<ResultRow>) -> Vec<String> {
    let mut v: Vec<String> = rows
        .drain(..)
        .map(|r| format!("{:?} {}", r.keys, r.value))
        .collect();
    v.sort();
    v
}

#[test]
fn ssb_queries_on_the_device_equal_duckdb_and_the_host_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    let pq = tmp.path().join("pq");
    csx_data::ssb::gen::generate(&data, 0.1, 1, &mut |_, _, _| {}).unwrap();
    csx_data::parquet::write_parquet(&data, &pq).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let mut local = LocalSource::new(&data);

    for q in QUERIES {
        let want = reference(&mut local, q).unwrap();
        // Q3.4 (one month, two cities on each side) is empty below about SF 1.
        assert!(
            q.name == "Q3.4" || !want.is_empty(),
            "{} selects nothing at this scale: the test would prove little",
            q.name
        );
        let oracle = csx_data::ssb::duckdb_answers(&pq, &[q]).unwrap().remove(0);
        assert_eq!(
            sorted(want.clone()),
            sorted(oracle.clone()),
            "{}: reference vs DuckDB",
            q.name
        );
        assert!(csx_data::ssb::differences(&oracle, &want).is_empty());
        for split in Split::ALL {
            for probe in ProbeKind::ALL {
                if split == Split::Host && probe == ProbeKind::Operator {
                    continue; // the host-only split runs no probe
                }
                // Rounds of 2^18 rows: three at this scale, staged while probed.
                let opts = RunOptions {
                    split,
                    probe,
                    round_rows: 1 << 18,
                    ..Default::default()
                };
                let got = run(&dev, "/ssb", q, &opts).unwrap();
                assert_eq!(got.rows, want, "{} {} {probe:?}", q.name, split.name());
            }
        }
    }
    for name in ["Q1.1", "Q3.3"] {
        let q = query(name).unwrap();
        let want = reference(&mut local, q).unwrap();
        for strategy in FilterStrategy::ALL {
            for engine in [EngineKind::Interpreter, EngineKind::Jit] {
                for probe in ProbeKind::ALL {
                    let opts = RunOptions {
                        strategy,
                        engine,
                        probe,
                        partitions: Some(3),
                        ..Default::default()
                    };
                    let got = run(&dev, "/ssb", q, &opts).unwrap();
                    assert_eq!(got.rows, want, "{name} {strategy:?} {engine:?} {probe:?}");
                }
            }
        }
    }
    // The same dataset in raw column files (the first version, as older csx wrote it):
    // the same answers, and the encoded one stages less than half the bytes.
    let raw = tmp.path().join("ssb-raw");
    for t in ["lineorder", "customer", "supplier", "part", "date"] {
        copy_as_raw(&data.join(t), &raw.join(t)).unwrap();
    }
    csx_data::put::put_dir(&dev, &raw, "/ssb-raw", &mut |_, _| {}).unwrap();
    for name in ["Q1.1", "Q3.3"] {
        let q = query(name).unwrap();
        let want = reference(&mut local, q).unwrap();
        let old = run(&dev, "/ssb-raw", q, &RunOptions::default()).unwrap();
        let new = run(&dev, "/ssb", q, &RunOptions::default()).unwrap();
        assert_eq!((&old.rows, &new.rows), (&want, &want), "{name}");
        // Rounds of 2^16 rows: raw columns copied into two slot sets in turn, encoded
        // ones expanded into one set, round after probed round.
        let rounds = RunOptions {
            round_rows: 1 << 16,
            ..Default::default()
        };
        for probe in ProbeKind::ALL {
            let opts = RunOptions { probe, ..rounds };
            let old = run(&dev, "/ssb-raw", q, &opts).unwrap();
            let new = run(&dev, "/ssb", q, &opts).unwrap();
            assert_eq!((&old.rows, &new.rows), (&want, &want), "{name} {probe:?}");
        }
        assert!(
            new.meter.media_bytes * 2 < old.meter.media_bytes,
            "{name}: {} encoded vs {} raw media bytes",
            new.meter.media_bytes,
            old.meter.media_bytes
        );
    }
    // Full offload sends a few sums; host-only sends every column the query reads.
    let q = query("Q3.3").unwrap();
    let off = run(&dev, "/ssb", q, &RunOptions::default()).unwrap();
    let host = run(
        &dev,
        "/ssb",
        q,
        &RunOptions {
            split: Split::Host,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        off.meter.bytes_to_host * 10 < host.meter.bytes_to_host,
        "{} vs {}",
        off.meter.bytes_to_host,
        host.meter.bytes_to_host
    );
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

#[test]
fn queries_the_device_cannot_run_are_errors_naming_the_operator_or_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 2, &mut |_, _, _| {}).unwrap();
    // A shared state too small for Q3.3's lookup tables (DATE's alone is 122 KB).
    let config = csx_device::DeviceConfig {
        state_size_bytes: 64 << 10,
        ..Default::default()
    };
    let dev = csx_host::Device::init(&tmp.path().join("small"), config).unwrap();
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let q = query("Q3.3").unwrap();
    let e = run(&dev, "/ssb", q, &RunOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lookup tables") && e.contains("limit is 65536"),
        "{e}"
    );
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();

    // Customer keys that are not 1..rows: the dimension operator refuses them.
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let customer = csx_data::LocalTable::open(&data.join("customer")).unwrap();
    let dict = customer.dictionary("c_city").unwrap();
    let ki1 = dict.iter().position(|c| c == "UNITED KI1").unwrap() as u32;
    // Make row 5 a selected customer with a key far past the table.
    let edit = |name: &str, ty, v: u32| {
        let Values::U32(mut values) = customer.read(name).unwrap() else {
            panic!("{name} holds u32s")
        };
        values[5] = v;
        let path = tmp.path().join(format!("{name}.col"));
        write_encoded_column(&path, ty, &Values::U32(values)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        dev.put_bytes(&format!("/ssb/customer/{name}.col"), &bytes)
            .unwrap();
    };
    edit("c_custkey", ColumnType::Uint32, 1_000_000);
    edit("c_city", ColumnType::Dict, ki1);
    let e = run(&dev, "/ssb", q, &RunOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("ssb_dim") && e.contains("CSX_ERANGE"), "{e}");
    // An unknown query is not a query.
    assert!(query("Q2.1").is_none());
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

/// A flipped bit in block 0 of a dimension's column (staged in one batch with the other
/// dimensions, expanded while LINEORDER's first copies run) or of a LINEORDER column is
/// an error naming table, column, block and part; with the good file back, the answer is
/// the host reference's.
#[test]
fn a_flipped_bit_in_a_staged_ssb_block_names_table_column_and_block() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 3, &mut |_, _, _| {}).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let q = query("Q3.3").unwrap();
    let want = sorted(reference(&mut LocalSource::new(&data), q).unwrap());
    for (table, column, ty) in [
        ("customer", "c_city", ColumnType::Dict),
        ("date", "d_year", ColumnType::Uint32),
        ("lineorder", "lo_revenue", ColumnType::Uint32),
    ] {
        let local = data.join(table).join(format!("{column}.col"));
        let rows = csx_data::LocalTable::open(&data.join(table))
            .unwrap()
            .schema
            .rows;
        let (col, good) =
            csx_data::encoding::EncodedColumn::open_local(table, column, &local, ty, rows).unwrap();
        let on_dev = format!("/ssb/{table}/{column}.col");
        let b0 = col.blocks[0];
        for (at, part) in [(b0.at + 64 + 1, "bad data"), (b0.at + 6, "bad header")] {
            let mut bad = good.clone();
            bad[at as usize] ^= 0x40;
            dev.put_bytes(&on_dev, &bad).unwrap();
            for probe in ProbeKind::ALL {
                let opts = RunOptions {
                    probe,
                    round_rows: 1 << 14,
                    ..Default::default()
                };
                let e = run(&dev, "/ssb", q, &opts).unwrap_err().to_string();
                let named = format!("table {table}, column {column}, block 0");
                assert!(
                    e.contains(&named) && e.contains(part),
                    "{on_dev} at {at}: {e}"
                );
            }
        }
        dev.put_bytes(&on_dev, &good).unwrap();
        let got = run(&dev, "/ssb", q, &RunOptions::default()).unwrap();
        assert_eq!(sorted(got.rows), want, "{on_dev} restored");
    }
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

/// A bad block of LINEORDER in a later round (decoded beside the probe of the round
/// before it) is an error naming it, never a wrong answer; the query answers again once
/// the column is whole.
#[test]
fn a_flipped_bit_in_a_later_round_names_its_block() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    // 180,000 rows: three blocks of LINEORDER, a round each.
    csx_data::ssb::gen::generate(&data, 0.03, 5, &mut |_, _, _| {}).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let q = query("Q1.1").unwrap();
    let want = sorted(reference(&mut LocalSource::new(&data), q).unwrap());
    assert!(!want.is_empty(), "Q1.1 selects rows at this scale");
    let opts = RunOptions {
        round_rows: 1 << 16,
        ..Default::default()
    };
    let local = data.join("lineorder").join("lo_extendedprice.col");
    let rows = (csx_data::LocalTable::open(&data.join("lineorder")).unwrap())
        .schema
        .rows;
    let (col, good) = csx_data::encoding::EncodedColumn::open_local(
        "lineorder",
        "lo_extendedprice",
        &local,
        ColumnType::Uint32,
        rows,
    )
    .unwrap();
    assert_eq!(col.blocks.len(), 3, "the test needs three rounds");
    let on_dev = "/ssb/lineorder/lo_extendedprice.col";
    for (block, part) in [(2usize, "bad data"), (1, "bad header")] {
        let b = col.blocks[block];
        let at = if part == "bad data" {
            b.at + 64 + 3
        } else {
            b.at + 6
        };
        let mut bad = good.clone();
        bad[at as usize] ^= 0x10;
        dev.put_bytes(on_dev, &bad).unwrap();
        let e = run(&dev, "/ssb", q, &opts).unwrap_err().to_string();
        let named = format!("table lineorder, column lo_extendedprice, block {block}");
        assert!(e.contains(&named) && e.contains(part), "{e}");
    }
    dev.put_bytes(on_dev, &good).unwrap();
    let got = run(&dev, "/ssb", q, &opts).unwrap();
    assert_eq!(sorted(got.rows), want);
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

/// The emitted probe on a hand-made partition: its sums and tuples against a direct
/// computation, and its refusals (rows or windows that do not fit its layout, tables
/// past the shared state, a table entry above its dimension's groups), on both
/// engine kinds.
/// A program that writes the u16 cparam2 at byte cparam1 of the shared state.
fn poke_program() -> Vec<u8> {
    use csx_ebpf::isa::*;
    [
        Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 1, 5, 0, 0),
        Insn::new(CLASS_LDX | MODE_MEM | SIZE_DW, 2, 5, 8, 0),
        Insn::new(CLASS_ALU64 | ALU_ADD | SRC_X, 3, 1, 0, 0),
        Insn::new(CLASS_STX | MODE_MEM | SIZE_H, 3, 2, 0, 0),
        Insn::new(CLASS_ALU64 | ALU_MOV | SRC_K, 0, 0, 0, 0),
        Insn::new(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0),
    ]
    .iter()
    .flat_map(|i| i.encode())
    .collect()
}

/// One run of the probe `image` on `engine` over `rows` rows with windows `[input,
/// output]` (handle, length, from byte 0): its r0, signed (a trap fails the test).
fn run_probe(
    dev: &csx_host::Device,
    image: &[u8],
    engine: EngineKind,
    rows: u64,
    [(input, in_len), (out, out_len)]: [(csx_host::proto::MemHandle, u64); 2],
) -> i64 {
    let pind = dev
        .load_program_any_slot(csx_host::proto::ProgramType::Raw, image, Some("probe"))
        .unwrap();
    dev.activate(pind, engine).unwrap();
    let req = csx_host::ExecuteRequest::new(pind)
        .cparams(rows, 0)
        .window(input, 0, in_len)
        .window(out, 0, out_len);
    let r = dev.execute(&req).unwrap();
    dev.unload(pind).unwrap();
    assert!(r.trap.is_none(), "{engine:?}: {:?}", r.trap);
    r.r0_signed()
}

/// Writes the u16 `v` at byte `at` of the shared state with the poke program `p`.
fn poke(dev: &csx_host::Device, p: csx_host::proto::ProgramIndex, at: u64, v: u16) {
    let req = csx_host::ExecuteRequest::new(p).cparams(at, u64::from(v));
    assert_eq!(dev.execute(&req).unwrap().r0, 0);
}

#[test]
fn the_emitted_probe_joins_sums_and_refuses_what_does_not_fit() {
    use csx_data::ssb::probe::{emit, ProbeDim, ProbeLayout, ProbeMode};
    use csx_host::proto::ProgramType;

    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let poke_image = poke_program();
    // Dimension 0: keys 1..=8 (a folded base), table at state byte 0; dimension 1:
    // keys 20_000_000..=20_000_003 (subtracted), table at byte 64. Two groups each.
    let lut0: [u16; 8] = [1, 0, 2, 1, 0, 0, 1, 2];
    let lut1: [u16; 4] = [1, 2, 0, 1];
    let n = 100u64;
    let fk0: Vec<u32> = (0..n as u32).map(|i| i % 10 + 1).collect();
    let fk1: Vec<u32> = (0..n as u32).map(|i| 20_000_000 + i % 9 / 2).collect();
    let sel: Vec<u32> = (0..n as u32).map(|i| i % 7).collect();
    let a: Vec<u32> = (0..n as u32).map(|i| 1000 + i).collect();
    let b: Vec<u32> = (0..n as u32).map(|i| i % 3 + 1).collect();
    let mut want = [0u64; 4];
    let mut tuples = Vec::new();
    for i in 0..n as usize {
        let id0 = lut0.get(fk0[i] as usize - 1).copied().unwrap_or(0);
        let id1 = lut1
            .get((fk1[i] - 20_000_000) as usize)
            .copied()
            .unwrap_or(0);
        if id0 == 0 || id1 == 0 || !matches!(sel[i], 1 | 2 | 5) {
            continue;
        }
        let g = (id0 as usize - 1) * 2 + id1 as usize - 1;
        let v = u64::from(a[i]) * u64::from(b[i]);
        want[g] += v;
        tuples.push((g as u32, v as u32));
    }
    assert!(tuples.len() > 5 && want.iter().all(|&s| s > 0), "{want:?}");
    let seg = 512u64;
    let dims = vec![
        ProbeDim {
            fk_segment: 0,
            lut_segment: 5 * seg,
            lut_offset: 0,
            entries: 8,
            key_base: 1,
            groups: 2,
            stride: 2,
        },
        ProbeDim {
            fk_segment: seg,
            lut_segment: 5 * seg + 64,
            lut_offset: 64,
            entries: 4,
            key_base: 20_000_000,
            groups: 2,
            stride: 1,
        },
    ];
    let layout = |mode| ProbeLayout {
        rows_max: 128,
        filters: vec![(2 * seg, vec![(1, 2), (5, 5)])],
        dims: dims.clone(),
        measure: vec![3 * seg, 4 * seg],
        mode,
        in_bytes: 5 * seg + 128,
    };
    let input = dev.alloc(5 * seg + 128).unwrap();
    for (k, col) in [&fk0, &fk1, &sel, &a, &b].into_iter().enumerate() {
        let bytes: Vec<u8> = col.iter().flat_map(|v| v.to_le_bytes()).collect();
        dev.write_mem(input, k as u64 * seg, &bytes).unwrap();
    }
    let out = dev.alloc(1024).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let p = dev
            .load_program_any_slot(ProgramType::Raw, &poke_image, Some("poke"))
            .unwrap();
        dev.activate(p, engine).unwrap();
        let put = |at: u64, v: u16| poke(&dev, p, at, v);
        for (i, &v) in lut0.iter().enumerate() {
            put(2 * i as u64, v);
        }
        for (i, &v) in lut1.iter().enumerate() {
            put(64 + 2 * i as u64, v);
        }
        let run = |l: &ProbeLayout, rows: u64, out_len: u64| {
            dev.fill_mem(out, 0, 1024, 0).unwrap();
            let windows = [(input, 5 * seg + 128), (out, out_len)];
            run_probe(&dev, &emit(l).unwrap(), engine, rows, windows)
        };
        let words = |bytes: Vec<u8>| -> Vec<u64> {
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        // Aggregate: the sums, added to what window 1 holds (zeroed here).
        let agg = layout(ProbeMode::Aggregate { groups: 4 });
        assert_eq!(run(&agg, n, 32), tuples.len() as i64, "{engine:?}");
        assert_eq!(words(dev.read_mem(out, 0, 32).unwrap()), want, "{engine:?}");
        // Emit: {group, value} per joined row, in row order.
        let emit_l = layout(ProbeMode::Emit);
        assert_eq!(run(&emit_l, n, n * 8), tuples.len() as i64, "{engine:?}");
        let got: Vec<(u32, u32)> = dev
            .read_mem(out, 0, tuples.len() as u64 * 8)
            .unwrap()
            .chunks_exact(8)
            .map(|c| {
                (
                    u32::from_le_bytes(c[..4].try_into().unwrap()),
                    u32::from_le_bytes(c[4..].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(got, tuples, "{engine:?}");
        // No rows: nothing joined.
        assert_eq!(run(&agg, 0, 32), 0);
        // More rows than the layout, an output too short: CSX_EINVAL.
        assert_eq!(run(&agg, 129, 32), -22);
        assert_eq!(run(&agg, n, 24), -22);
        assert_eq!(run(&emit_l, n, n * 8 - 8), -22);
        // A table past the shared state: CSX_ENOSPC.
        let mut far = layout(ProbeMode::Aggregate { groups: 4 });
        far.dims[1].lut_offset = 1 << 40;
        assert_eq!(run(&far, n, 32), -28);
        // An entry above its dimension's groups: CSX_ERANGE, never a wrong sum.
        put(2 * 2, 3);
        assert_eq!(run(&agg, n, 32), -34);
        put(2 * 2, 2);
        dev.unload(p).unwrap();
    }
    dev.free(input).unwrap();
    dev.free(out).unwrap();
    assert!(dev.programs().unwrap().is_empty());
    dev.close().unwrap();
}

/// Several one-range selections tested together (one branch a row), beside one of two
/// ranges tested alone: ranges from 0, past 2^31 and as wide as the domain allows, with
/// every boundary value (the one below and above each range, 0 and u32::MAX), on both
/// engines, give the host's sum and count.
#[test]
fn the_emitted_probe_tests_several_selections_together() {
    use csx_data::ssb::probe::{emit, ProbeDim, ProbeLayout, ProbeMode};
    use csx_host::proto::ProgramType;

    let tmp = tempfile::tempdir().unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    let filters: [Vec<(u64, u64)>; 5] = [
        vec![(1, 3)],
        vec![(0, 24)],
        vec![(1 << 31, u64::from(u32::MAX) - 1)],
        vec![(1, u64::from(u32::MAX))],
        vec![(2, 3), (7, 9)],
    ];
    // Each column's values: mostly in its ranges, and every boundary.
    let values = |ranges: &[(u64, u64)]| -> Vec<u32> {
        let mut v = Vec::new();
        for &(lo, hi) in ranges {
            v.extend([lo, hi, lo + (hi - lo) / 2, lo, hi]);
            v.extend(lo.checked_sub(1));
            v.extend((hi < u64::from(u32::MAX)).then_some(hi + 1));
        }
        v.extend([0, u64::from(u32::MAX)]);
        v.into_iter().map(|x| x as u32).collect()
    };
    let n = 2000u64;
    let seg = 8192u64;
    let cols: Vec<Vec<u32>> = (filters.iter().enumerate())
        .map(|(k, r)| {
            let vals = values(r);
            let step = [7usize, 11, 13, 17, 19][k];
            (0..n as usize)
                .map(|i| vals[(i * step + i / 3) % vals.len()])
                .collect()
        })
        .collect();
    let fk: Vec<u32> = (0..n as u32).map(|i| i % 4 + 1).collect();
    let measure: Vec<u32> = (0..n as u32).map(|i| i * 3 + 1).collect();
    let lut: [u16; 4] = [1, 1, 0, 1];
    let (mut want_sum, mut want_rows) = (0u64, 0i64);
    for i in 0..n as usize {
        let passes = (filters.iter().zip(&cols)).all(|(r, c)| {
            r.iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&u64::from(c[i])))
        });
        if passes && lut[fk[i] as usize - 1] == 1 {
            want_sum += u64::from(measure[i]);
            want_rows += 1;
        }
    }
    assert!(
        want_rows > 10 && want_rows < n as i64 / 2,
        "{want_rows} rows pass"
    );
    let layout = ProbeLayout {
        rows_max: n,
        filters: (filters.iter().enumerate())
            .map(|(k, r)| ((2 + k as u64) * seg, r.clone()))
            .collect(),
        dims: vec![ProbeDim {
            fk_segment: 0,
            lut_segment: 7 * seg,
            lut_offset: 0,
            entries: 4,
            key_base: 1,
            groups: 1,
            stride: 1,
        }],
        measure: vec![seg],
        mode: ProbeMode::Aggregate { groups: 1 },
        in_bytes: 7 * seg + 64,
    };
    let input = dev.alloc(layout.in_bytes).unwrap();
    let all = [&fk, &measure].into_iter().chain(cols.iter());
    for (k, col) in all.enumerate() {
        let bytes: Vec<u8> = col.iter().flat_map(|v| v.to_le_bytes()).collect();
        dev.write_mem(input, k as u64 * seg, &bytes).unwrap();
    }
    let out = dev.alloc(64).unwrap();
    let image = emit(&layout).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let p = dev
            .load_program_any_slot(ProgramType::Raw, &poke_program(), Some("poke"))
            .unwrap();
        dev.activate(p, engine).unwrap();
        for (i, &v) in lut.iter().enumerate() {
            poke(&dev, p, 2 * i as u64, v);
        }
        dev.fill_mem(out, 0, 64, 0).unwrap();
        let windows = [(input, layout.in_bytes), (out, 8)];
        let joined = run_probe(&dev, &image, engine, n, windows);
        assert_eq!(joined, want_rows, "{engine:?}");
        let sum = u64::from_le_bytes(dev.read_mem(out, 0, 8).unwrap().try_into().unwrap());
        assert_eq!(sum, want_sum, "{engine:?}");
        dev.unload(p).unwrap();
    }
    dev.close().unwrap();
}

/// A partition's columns land back to back in its buffer of staged blocks: their ranges
/// go to the device as one Memory Copy (read there as one queued read), and expand to
/// the columns' values; a flipped bit in the third column's block, staged in that one
/// copy, is still an error naming its table, column and block.
#[test]
fn a_partitions_columns_are_staged_by_one_copy() {
    use csx_data::stage::{device_column, DeviceColumn, Staging, Target};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 3, &mut |_, _, _| {}).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let names = ["lo_custkey", "lo_suppkey", "lo_revenue", "lo_orderdate"];
    let local = csx_data::LocalTable::open(&data.join("lineorder")).unwrap();
    let rows = local.schema.rows;
    let (first, n) = (1000u64, rows - 3000);
    // `between`: what happens to the files after their directories were read.
    let stage = |dev: &csx_host::Device,
                 between: &dyn Fn()|
     -> Result<(Vec<u8>, u64), csx_data::DataError> {
        let mut s = csx_data::ops::Session::new(dev);
        let schema = csx_data::scan::device_schema(&mut s, "/ssb/lineorder")?;
        let cols: Vec<Arc<DeviceColumn>> = (names.iter())
            .map(|c| device_column(&mut s, "/ssb/lineorder", &schema, c).map(Arc::new))
            .collect::<Result<_, _>>()?;
        assert!(cols.iter().all(|c| c.encoded().is_some()));
        between();
        let bound: u64 = cols.iter().map(|c| c.staged_bound(n)).sum();
        let staged = s.alloc(bound)?;
        let dst = s.alloc(4 * n * 4)?;
        let mut st = Staging::default();
        let t = st.target(Target::new(staged, bound, dst, 4 * n * 4));
        for (i, c) in cols.iter().enumerate() {
            st.stage_rows(&mut s, c, (first, n), &[], t, i as u64 * n * 4)?;
        }
        st.submit(&mut s)?;
        let before = s.meter.commands;
        let expansion = st.wait_copies(&mut s)?;
        let copies = s.meter.commands - before;
        expansion.expand(&mut s)?;
        Ok((s.read(dst, 0, 4 * n * 4)?, copies))
    };
    let (bytes, commands) = stage(&dev, &|| {}).unwrap();
    // One copy, and one write of the expected headers.
    assert_eq!(commands, 2);
    for (i, c) in names.iter().enumerate() {
        let Values::U32(want) = local.read(c).unwrap() else {
            panic!("{c} is a column of u32")
        };
        let got = &bytes[i * n as usize * 4..][..n as usize * 4];
        let got: Vec<u32> = (got.chunks_exact(4))
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(got[..] == want[first as usize..(first + n) as usize], "{c}");
    }
    let path = data.join("lineorder").join("lo_revenue.col");
    let (col, good) = csx_data::encoding::EncodedColumn::open_local(
        "lineorder",
        "lo_revenue",
        &path,
        ColumnType::Uint32,
        rows,
    )
    .unwrap();
    let mut bad = good.clone();
    bad[col.blocks[0].at as usize + 64 + 9] ^= 0x02;
    dev.put_bytes("/ssb/lineorder/lo_revenue.col", &bad)
        .unwrap();
    let e = stage(&dev, &|| {}).unwrap_err().to_string();
    assert!(
        e.contains("table lineorder, column lo_revenue, block 0"),
        "{e}"
    );
    // Cut short after its directory was read: the copy fails naming the file.
    dev.put_bytes("/ssb/lineorder/lo_revenue.col", &good)
        .unwrap();
    let cut = || {
        let half = &good[..col.blocks[0].at as usize + 100];
        dev.put_bytes("/ssb/lineorder/lo_revenue.col", half)
            .unwrap();
    };
    let e = stage(&dev, &cut).unwrap_err().to_string();
    assert!(e.contains("/ssb/lineorder/lo_revenue.col"), "{e}");
    dev.close().unwrap();
}

/// Columns opened together (`device_columns`: their sizes, headers and directories
/// each asked for all of them at once) are the columns opened one by one; a target
/// given its destination only once its copies are in flight (`Staging::set_dst`, as
/// LINEORDER's slots are) expands there; a missing or cut file among those opened
/// together is an error naming it.
#[test]
fn columns_opened_together_stage_into_a_destination_given_after_the_copies() {
    use csx_data::stage::{device_column, device_columns, Staging, Target};
    use csx_host::proto::MemHandle;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 3, &mut |_, _, _| {}).unwrap();
    let dev = crate::device(&tmp.path().join("dev"));
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let dir = "/ssb/lineorder";
    let names = ["lo_custkey", "lo_suppkey", "lo_revenue", "lo_orderdate"];
    let local = csx_data::LocalTable::open(&data.join("lineorder")).unwrap();
    let rows = local.schema.rows;
    let mut s = csx_data::ops::Session::new(&dev);
    let schema = csx_data::scan::device_schema(&mut s, dir).unwrap();
    let together = device_columns(&mut s, dir, &schema, &names).unwrap();
    assert_eq!(together.len(), names.len());
    for (c, name) in together.iter().zip(names) {
        let one = device_column(&mut s, dir, &schema, name).unwrap();
        assert!(c.encoded().is_some(), "{name}");
        assert_eq!(format!("{c:?}"), format!("{one:?}"), "{name}");
    }
    // Staged with no destination yet; the destination given once the copy is in flight.
    let cols: Vec<Arc<_>> = together.into_iter().map(Arc::new).collect();
    let bound: u64 = cols.iter().map(|c| c.staged_bound(rows)).sum();
    let staged = s.alloc(bound).unwrap();
    let len = names.len() as u64 * rows * 4;
    let mut st = Staging::default();
    let t = st.target(Target::new(staged, bound, MemHandle::NONE, len));
    for (i, c) in cols.iter().enumerate() {
        st.stage_rows(&mut s, c, (0, rows), &[], t, i as u64 * rows * 4)
            .unwrap();
    }
    st.submit(&mut s).unwrap();
    let dst = s.alloc(len).unwrap();
    st.set_dst(t, dst);
    st.finish(&mut s).unwrap();
    let bytes = s.read(dst, 0, len).unwrap();
    for (i, c) in names.iter().enumerate() {
        let Values::U32(want) = local.read(c).unwrap() else {
            panic!("{c} is a column of u32")
        };
        let got: Vec<u32> = (bytes[i * rows as usize * 4..][..rows as usize * 4].chunks_exact(4))
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(got == want, "{c}");
    }
    // A file cut below its header, then one missing: each named.
    dev.put_bytes("/ssb/lineorder/lo_revenue.col", &[0u8; 10])
        .unwrap();
    let e = device_columns(&mut s, dir, &schema, &names)
        .unwrap_err()
        .to_string();
    assert!(e.contains("lo_revenue"), "{e}");
    dev.delete_file("/ssb/lineorder/lo_suppkey.col").unwrap();
    let e = device_columns(&mut s, dir, &schema, &names)
        .unwrap_err()
        .to_string();
    assert!(e.contains("/ssb/lineorder/lo_suppkey.col"), "{e}");
    drop(s);
    dev.close().unwrap();
}

/// The media yardstick reads exactly the bytes a run staged: one file range per range
/// the run copied, their lengths summing to the run's media bytes, and the image bytes
/// at the mapped namespace ranges, in order, equal to the files' bytes at the copied
/// ranges (a wrong extent mapping, a range left out or read twice, fails this).
#[test]
fn the_media_yardstick_reads_exactly_the_staged_bytes() {
    use csx_data::ssb::yardstick;
    use std::os::unix::fs::FileExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("ssb");
    csx_data::ssb::gen::generate(&data, 0.01, 3, &mut |_, _, _| {}).unwrap();
    let dir = tmp.path().join("dev");
    let dev = crate::device(&dir);
    csx_data::put::put_dir(&dev, &data, "/ssb", &mut |_, _| {}).unwrap();
    let opts = RunOptions {
        round_rows: 1 << 14,
        ..Default::default()
    };
    let got = run(&dev, "/ssb", query("Q3.3").unwrap(), &opts).unwrap();
    let copies = &got.file_copies;
    // Every column of the query: 3 of LINEORDER's 4 rounds at least, and the dimensions.
    assert!(copies.len() > 8, "{} file ranges copied", copies.len());
    let plan = yardstick::plan(&dev, copies).unwrap();
    assert_eq!(plan.file_ranges, copies.len() as u64);
    assert_eq!(plan.file_bytes, copies.iter().map(|c| c.2).sum::<u64>());
    assert_eq!(plan.hole_bytes, 0, "column files are written whole");
    assert_eq!(plan.media_bytes, got.meter.media_bytes);
    assert_eq!(
        plan.ranges.iter().map(|r| r.len).sum::<u64>(),
        got.meter.media_bytes
    );
    let image = std::fs::File::open(dir.join("nvm.img")).unwrap();
    let mut on_media = Vec::new();
    for r in &plan.ranges {
        let mut b = vec![0u8; r.len as usize];
        image.read_exact_at(&mut b, r.offset).unwrap();
        on_media.extend_from_slice(&b);
    }
    let mut staged = Vec::new();
    for (path, offset, len) in copies {
        staged.extend_from_slice(&dev.read_file(path, *offset, *len).unwrap());
    }
    assert!(
        on_media == staged,
        "the image's bytes differ from the files'"
    );
    // The direct read covers them, widened to whole blocks (where the file system
    // takes O_DIRECT at all).
    let reqs = yardstick::requests(&plan.ranges);
    assert!(reqs.iter().all(|r| r.1 <= yardstick::REQUEST_SIZE));
    match yardstick::read_direct(&dir.join("nvm.img"), &reqs, yardstick::QUEUED_DEPTH) {
        Ok(r) => {
            assert_eq!(r.requests, reqs.len() as u64);
            assert!(r.read_bytes >= plan.media_bytes);
        }
        Err(e) => assert!(e.to_string().contains("nvm.img"), "{e}"),
    }
    dev.close().unwrap();
}
