//! Delilah's selection filter written three ways (position list, bitmask in eBPF, the
//! accelerated csx_filter_u32) selects the same rows, on both engines, for every
//! operator, and matches the position list the reference computes.

use csx_proto::abi::cmp;
use csx_workloads::reference::{bitmask_positions, compare, poslist_positions};
use csx_workloads::{by_name, Case, Invocation, Runner};

use crate::{Fixture, ENGINES, SEEDS};

#[test]
fn three_ways_select_the_same_rows() {
    let fixture = Fixture::new();
    let mut session = Runner::new(&fixture.dev);
    let ways = ["select_poslist", "select_bitmask", "select_accel"].map(|n| by_name(n).unwrap());
    for &seed in SEEDS {
        for size in [4u64, 36, 4000, 40_004] {
            let data = ways[0].generate(seed, size).unwrap();
            let column: Vec<u64> = data
                .chunks_exact(4)
                .map(|c| u64::from(u32::from_le_bytes(c.try_into().unwrap())))
                .collect();
            for way in ways {
                let case = Case::new(way, seed, size);
                fixture.dev.put_bytes(&case.input_path, &data).unwrap();
            }
            for op in cmp::CSX_CMP_EQ..=cmp::CSX_CMP_GE {
                let operand = column.get(column.len() / 2).copied().unwrap_or(7);
                let expected: Vec<u32> = column
                    .iter()
                    .enumerate()
                    .filter(|(_, &x)| compare(op, x, operand) == Some(true))
                    .map(|(i, _)| i as u32)
                    .collect();
                for &engine in ENGINES {
                    for way in ways {
                        let case = Case::new(way, seed, size);
                        let inv = Invocation {
                            cparam1: op,
                            cparam2: operand,
                            ..(way.invocation)(&case)
                        };
                        let run = session.run(way, &case, &inv, engine).unwrap();
                        assert!(
                            run.outcome.r0 >= 0,
                            "{} {engine:?}: {}",
                            way.name,
                            run.outcome.r0
                        );
                        let got = if way.name == "select_poslist" {
                            poslist_positions(&run.outcome.output)
                        } else {
                            bitmask_positions(&run.outcome.output)
                        };
                        assert_eq!(
                            got, expected,
                            "{} seed {seed} size {size} op {op} {engine:?}",
                            way.name
                        );
                    }
                }
            }
        }
    }
    session.unload_all().unwrap();
}
