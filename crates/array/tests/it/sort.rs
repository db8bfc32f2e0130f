//! The distributed merge sort: every mode and topology gives the host's sort, byte for
//! byte; merges wait on the sorts' locks; link accounting tells D2D from host copies;
//! a member failing mid-sort is a typed error naming it, and a re-run succeeds.

use std::sync::Mutex;

use csx_array::{sort, Array, ArrayError, Placement, SortEvent, SortMode, SortOptions, Topology};

use crate::common::{embedded, keys, Daemon};

fn sorted(data: &[u8]) -> Vec<u8> {
    let mut v: Vec<u64> = data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    v.sort_unstable();
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn opts(mode: SortMode, topology: Topology, output: &str) -> SortOptions {
    SortOptions {
        mode,
        topology,
        output: Some(output.to_string()),
    }
}

/// Every MergeRead of a member's run comes after that member's Sorted.
fn merges_follow_sorts(events: &[SortEvent]) {
    for (i, e) in events.iter().enumerate() {
        if let SortEvent::MergeRead { from, .. } = e {
            let sorted_before = events[..i]
                .iter()
                .any(|x| matches!(x, SortEvent::Sorted { member, .. } if member == from));
            // Tree rounds after the first read merged runs, which follow all sorts of
            // their inputs; the first read of each member's own run is the check.
            assert!(
                sorted_before,
                "event {i} {e:?} before member {from} sorted: {events:?}"
            );
        }
    }
}

#[test]
fn every_mode_and_topology_sorts_byte_identically() {
    let (_dir, array) = embedded(4);
    // 100_003 keys over 4 members in 16 KiB stripes: uneven parts.
    let data = keys(100_003, 42);
    array
        .put_bytes(
            "/in",
            &data,
            Placement::Striped {
                stripe_bytes: 16 << 10,
            },
        )
        .unwrap();
    let expect = sorted(&data);
    let total = data.len() as u64;
    for (mode, topo) in [
        (SortMode::Instant, Topology::Chain),
        (SortMode::Instant, Topology::Tree),
        (SortMode::Instant, Topology::Multiway),
        (SortMode::Host, Topology::Chain),
        (SortMode::Host, Topology::Tree),
        (SortMode::Host, Topology::Multiway),
    ] {
        let out = format!("/out-{mode:?}-{topo:?}");
        let report = sort(&array, "/in", &opts(mode, topo, &out), &|_| {}).unwrap();
        assert_eq!(array.get_bytes(&out).unwrap(), expect, "{mode:?} {topo:?}");
        assert_eq!(report.keys, 100_003);
        assert_eq!(report.parts, 4);
        merges_follow_sorts(&report.events);
        let l = &report.links;
        match mode {
            SortMode::Instant => {
                assert_eq!(
                    l.host.ingress + l.host.egress,
                    0,
                    "D2D never crosses the host link"
                );
                assert!(l.d2d_bytes > 0);
                assert_eq!(l.host_copies, 0);
            }
            SortMode::Host => {
                assert_eq!(l.d2d_bytes, 0);
                assert_eq!(l.host.ingress, l.host_copy_bytes, "in once ...");
                assert_eq!(l.host.egress, l.host_copy_bytes, "... and out once more");
            }
        }
        if topo == Topology::Chain {
            // The chain moves every run but the merging member's own, once.
            let own = array
                .members()
                .iter()
                .map(|m| m.index)
                .find(|&m| m == report.output_member)
                .unwrap();
            let moved = l.d2d_bytes + l.host_copy_bytes;
            let parts = csx_array::array::piece_sizes(&array.stat("/in").unwrap());
            let own_len = parts.iter().find(|p| p.0 == own).unwrap().1;
            assert_eq!(moved, total - own_len);
        }
    }
    // The input is untouched; sorting in place replaces it atomically.
    assert_eq!(array.get_bytes("/in").unwrap(), data);
    let mut copy = sort(
        &array,
        "/in",
        &opts(SortMode::Instant, Topology::Chain, "/again"),
        &|_| {},
    )
    .unwrap();
    assert_eq!(copy.output_layout, csx_array::Layout::Single { member: 0 });
    copy = sort(
        &array,
        "/again",
        &SortOptions {
            mode: SortMode::Instant,
            topology: Topology::Multiway,
            output: None,
        },
        &|_| {},
    )
    .unwrap();
    assert_eq!(array.get_bytes("/again").unwrap(), expect, "a sorted input");
    assert_eq!(copy.parts, 1);
    sort(
        &array,
        "/in",
        &SortOptions {
            mode: SortMode::Instant,
            topology: Topology::Chain,
            output: None,
        },
        &|_| {},
    )
    .unwrap();
    assert_eq!(array.get_bytes("/in").unwrap(), expect);
    assert!(
        array.orphans().unwrap().is_empty(),
        "no run or old piece is left"
    );
    assert!(array.locks().held().is_empty());
}

#[test]
fn bad_inputs_are_typed() {
    let (_dir, array) = embedded(2);
    array
        .put_bytes("/odd", &[1, 2, 3], Placement::Auto)
        .unwrap();
    let o = opts(SortMode::Instant, Topology::Chain, "/o");
    assert!(matches!(
        sort(&array, "/odd", &o, &|_| {}),
        Err(ArrayError::NotKeys {
            size: 3,
            width: 8,
            ..
        })
    ));
    assert!(matches!(
        sort(&array, "/missing", &o, &|_| {}),
        Err(ArrayError::NotFound { .. })
    ));
    // Parts larger than one file write command (16 MiB) are written in chunks.
    let big = keys((17 << 20) / 8 + 3, 11);
    array.put_bytes("/big", &big, Placement::Member(0)).unwrap();
    sort(&array, "/big", &o, &|_| {}).unwrap();
    assert_eq!(array.get_bytes("/o").unwrap(), sorted(&big));
    // No keys, and keys on one member only: both sort.
    array.put_bytes("/empty", &[], Placement::Auto).unwrap();
    sort(&array, "/empty", &o, &|_| {}).unwrap();
    assert_eq!(array.get_bytes("/o").unwrap(), Vec::<u8>::new());
    let one = keys(1000, 3);
    array.put_bytes("/one", &one, Placement::Member(1)).unwrap();
    for topology in [Topology::Chain, Topology::Tree] {
        let r = sort(
            &array,
            "/one",
            &opts(SortMode::Instant, topology, "/o1"),
            &|_| {},
        )
        .unwrap();
        assert_eq!((r.parts, r.output_member), (1, 1));
        assert_eq!(array.get_bytes("/o1").unwrap(), sorted(&one));
    }
}

#[test]
fn three_tcp_daemons_sort_like_the_embedded_array_and_survive_a_member_failing() {
    let data = keys(60_000, 7);
    let expect = sorted(&data);
    // The embedded reference.
    let (_dir, embedded_array) = embedded(3);
    embedded_array
        .put_bytes("/k", &data, Placement::Striped { stripe_bytes: 8192 })
        .unwrap();
    sort(
        &embedded_array,
        "/k",
        &opts(SortMode::Instant, Topology::Chain, "/s"),
        &|_| {},
    )
    .unwrap();
    let embedded_out = embedded_array.get_bytes("/s").unwrap();
    assert_eq!(embedded_out, expect);

    let daemons: Vec<Daemon> = (0..3).map(|_| Daemon::start()).collect();
    let uris: Vec<String> = daemons.iter().map(|d| d.uri.clone()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("arr");
    let array = Array::init_members(&root, &uris, Default::default()).unwrap();
    array
        .put_bytes("/k", &data, Placement::Striped { stripe_bytes: 8192 })
        .unwrap();
    let instant = sort(
        &array,
        "/k",
        &opts(SortMode::Instant, Topology::Tree, "/s"),
        &|_| {},
    )
    .unwrap();
    assert_eq!(
        array.get_bytes("/s").unwrap(),
        embedded_out,
        "daemons = embedded"
    );
    // The runs moved daemon to daemon (through run files and peer reads): the host link
    // carried none of them. The baseline moves the same runs through the host.
    let l = &instant.links;
    let moved: u64 = instant
        .events
        .iter()
        .filter_map(|e| match e {
            SortEvent::MergeRead {
                from, into, bytes, ..
            } if from != into => Some(*bytes),
            _ => None,
        })
        .sum();
    assert!(moved > 0);
    assert_eq!((l.d2d_bytes, l.host_copy_bytes), (moved, 0), "{l:?}");
    assert_eq!((l.host.ingress, l.host.egress), (0, 0), "{l:?}");
    let host = sort(
        &array,
        "/k",
        &opts(SortMode::Host, Topology::Tree, "/h"),
        &|_| {},
    )
    .unwrap();
    assert_eq!(array.get_bytes("/h").unwrap(), embedded_out);
    let h = &host.links;
    assert_eq!((h.d2d_bytes, h.host_copy_bytes), (0, moved), "{h:?}");
    assert!(
        h.host.ingress + h.host.egress >= 2 * moved,
        "the baseline crosses the host link twice per moved byte: {h:?}"
    );
    // The multiway merge between daemons: ranges of runs daemon to daemon too.
    let mw = sort(
        &array,
        "/k",
        &opts(SortMode::Instant, Topology::Multiway, "/m"),
        &|_| {},
    )
    .unwrap();
    assert!(
        array.get_bytes("/m").unwrap() == embedded_out,
        "multiway over daemons = embedded"
    );
    let moved_mw: u64 = mw
        .events
        .iter()
        .filter_map(|e| match e {
            SortEvent::MergeRead {
                from, into, bytes, ..
            } if from != into => Some(*bytes),
            _ => None,
        })
        .sum();
    let l = &mw.links;
    assert_eq!((l.d2d_bytes, l.host_copy_bytes), (moved_mw, 0), "{l:?}");
    assert_eq!((l.host.ingress, l.host.egress), (0, 0), "{l:?}");
    // No run file is left on any member.
    assert!(array.orphans().unwrap().is_empty());

    // Member 2 disappears once every sub-operation is submitted.
    let daemons = Mutex::new(daemons);
    let e = sort(
        &array,
        "/k",
        &opts(SortMode::Instant, Topology::Chain, "/s2"),
        &|ev| {
            if matches!(ev, SortEvent::Submitted { .. }) {
                daemons.lock().unwrap()[2].stop();
            }
        },
    )
    .unwrap_err();
    assert_eq!(e.member(), Some(2), "the error names the member: {e}");
    assert!(e.to_string().contains(&uris[2]), "{e}");
    assert!(array.locks().held().is_empty(), "its locks are released");
    assert!(
        matches!(array.stat("/s2"), Err(ArrayError::NotFound { .. })),
        "no output"
    );
    drop(array);

    // The member comes back; a re-run succeeds with the same output.
    daemons.lock().unwrap()[2].restart();
    let array = Array::open(&root).unwrap();
    assert_eq!(array.get_bytes("/k").unwrap(), data, "the input is intact");
    sort(
        &array,
        "/k",
        &opts(SortMode::Instant, Topology::Chain, "/s2"),
        &|_| {},
    )
    .unwrap();
    assert_eq!(array.get_bytes("/s2").unwrap(), expect);

    // Member 1 disappears mid-merge (every run sorted, the first range moving) of a
    // multiway sort in place: the error names it, its locks are released, the input is
    // still the input (the output was never named), and after a restart the same sort
    // succeeds.
    let e = sort(
        &array,
        "/k",
        &SortOptions {
            mode: SortMode::Instant,
            topology: Topology::Multiway,
            output: None,
        },
        &|ev| {
            if matches!(ev, SortEvent::MergeRead { .. }) {
                // Stopping a stopped daemon does nothing.
                daemons.lock().unwrap()[1].stop();
            }
        },
    )
    .unwrap_err();
    assert_eq!(e.member(), Some(1), "the error names the member: {e}");
    assert!(array.locks().held().is_empty(), "its locks are released");
    drop(array);
    daemons.lock().unwrap()[1].restart();
    let array = Array::open(&root).unwrap();
    assert_eq!(
        array.get_bytes("/k").unwrap(),
        data,
        "not half-sorted in place"
    );
    sort(
        &array,
        "/k",
        &SortOptions {
            mode: SortMode::Instant,
            topology: Topology::Multiway,
            output: None,
        },
        &|_| {},
    )
    .unwrap();
    assert_eq!(array.get_bytes("/k").unwrap(), expect);
    array.close().unwrap();
}

#[test]
fn the_plan_the_model_prices_is_what_a_real_sort_does() {
    use csx_array::model::{even_parts, even_stripe, plan, price, SortModel};
    for n in [2usize, 3, 4] {
        let (_dir, array) = embedded(n);
        let size = 40_000u64 * 8;
        let data = keys(40_000, n as u64);
        array
            .put_bytes(
                "/in",
                &data,
                Placement::Striped {
                    stripe_bytes: even_stripe(size, n),
                },
            )
            .unwrap();
        for topo in [Topology::Chain, Topology::Tree] {
            for mode in [SortMode::Instant, SortMode::Host] {
                let report = sort(&array, "/in", &opts(mode, topo, "/o"), &|_| {}).unwrap();
                let key = |e: &SortEvent| format!("{e:?}");
                let mut real: Vec<String> = report.events.iter().map(key).collect();
                let mut planned: Vec<String> =
                    plan(&even_parts(size, n), topo).iter().map(key).collect();
                real.sort();
                planned.sort();
                assert_eq!(real, planned, "{n} members, {mode:?} {topo:?}");
                // And so their prices agree.
                let m = SortModel::thesis(125_000_000);
                assert_eq!(
                    price(&report.events, mode, &m),
                    price(&plan(&even_parts(size, n), topo), mode, &m)
                );
            }
        }
    }
}

/// The final merge split over the output member's two engines (merge path) gives the
/// host's sort byte for byte: random keys, keys with few distinct values (ties at every
/// cut), and runs that do not interleave (slices with one side empty, copied), in both
/// topologies over three members (the tree's last round merges two runs and an odd one).
#[test]
fn the_final_merge_split_over_engines_sorts_byte_identically() {
    let (_dir, array) = embedded(3);
    let count = 700_000usize; // 5.6 MB: above the split's minimum
    let random = keys(count, 7);
    let few: Vec<u8> = random
        .chunks_exact(8)
        .flat_map(|c| (u64::from_le_bytes(c.try_into().unwrap()) % 5).to_le_bytes())
        .collect();
    // 64 KiB stripes: stripe k on member k % 3 holds keys in band 2 - k % 3, so member
    // 0's run is all above member 1's, which is all above member 2's.
    let stripe_keys = (64 << 10) / 8;
    let banded: Vec<u8> = random
        .chunks_exact(8)
        .enumerate()
        .flat_map(|(i, c)| {
            let band = 2 - ((i / stripe_keys) % 3) as u64;
            ((band << 40) | (u64::from_le_bytes(c.try_into().unwrap()) >> 24)).to_le_bytes()
        })
        .collect();
    for (name, data) in [("random", &random), ("few", &few), ("banded", &banded)] {
        array.delete("/in").ok();
        array
            .put_bytes(
                "/in",
                data,
                Placement::Striped {
                    stripe_bytes: 64 << 10,
                },
            )
            .unwrap();
        let expect = sorted(data);
        for topology in [Topology::Chain, Topology::Tree] {
            let r = sort(
                &array,
                "/in",
                &opts(SortMode::Instant, topology, "/out"),
                &|_| {},
            )
            .unwrap();
            assert_eq!(r.final_merge_slices, 2, "{name} {topology:?}");
            let got = array.get_bytes("/out").unwrap();
            assert!(
                got == expect,
                "{name} {topology:?}: differs from the host's sort"
            );
        }
    }
    // The multiway merge over the same data: ties at every cut (few), runs that do not
    // overlap (banded: whole slices from one run).
    for (name, data) in [("random", &random), ("few", &few), ("banded", &banded)] {
        array.delete("/in").ok();
        array
            .put_bytes(
                "/in",
                data,
                Placement::Striped {
                    stripe_bytes: 64 << 10,
                },
            )
            .unwrap();
        for mode in [SortMode::Instant, SortMode::Host] {
            let r = sort(
                &array,
                "/in",
                &opts(mode, Topology::Multiway, "/mw"),
                &|_| {},
            )
            .unwrap();
            assert!(
                array.get_bytes("/mw").unwrap() == sorted(data),
                "{name} {mode:?}: the multiway merge differs from the host's sort"
            );
            let stripe = (count as u64).div_ceil(3) * 8;
            assert_eq!(
                r.output_layout,
                csx_array::Layout::Striped {
                    stripe_bytes: stripe,
                    members: vec![0, 1, 2]
                }
            );
            merges_follow_sorts(&r.events);
        }
    }
    // The baseline's final merge (runs moved through the host) splits the same way.
    let r = sort(
        &array,
        "/in",
        &opts(SortMode::Host, Topology::Tree, "/out2"),
        &|_| {},
    )
    .unwrap();
    assert_eq!(r.final_merge_slices, 2);
    array.close().unwrap();
}

/// Free device memory and occupied program slots of every member.
fn footprints(array: &Array) -> Vec<(u64, usize)> {
    array
        .members()
        .iter()
        .map(|m| {
            let info = m.device.identify().unwrap();
            (info.slm_free_bytes, m.device.programs().unwrap().len())
        })
        .collect()
}

#[test]
fn a_sort_done_or_failed_leaves_no_program_or_memory_on_any_member() {
    let (_dir, array) = embedded(2);
    let data = keys(40_000, 5);
    let striped = Placement::Striped {
        stripe_bytes: 16 << 10,
    };
    array.put_bytes("/in", &data, striped).unwrap();
    let before = footprints(&array);
    for mode in [SortMode::Instant, SortMode::Host] {
        for topology in [Topology::Chain, Topology::Tree, Topology::Multiway] {
            sort(&array, "/in", &opts(mode, topology, "/out"), &|_| {}).unwrap();
            assert_eq!(array.get_bytes("/out").unwrap(), sorted(&data));
            assert_eq!(footprints(&array), before, "{mode:?} {topology:?}");
        }
    }
    // Member 1 without memory for its part: the sort fails after member 0 allocated
    // its buffer and both loaded their programs, and releases all of it.
    let dev1 = &array.members()[1].device;
    let blocker = dev1.alloc(before[1].0 - 4096).unwrap();
    let blocked = footprints(&array);
    let e = sort(
        &array,
        "/in",
        &opts(SortMode::Instant, Topology::Chain, "/out"),
        &|_| {},
    )
    .unwrap_err();
    assert_eq!(e.member(), Some(1), "the error names the member: {e}");
    assert_eq!(footprints(&array), blocked);
    dev1.free(blocker).unwrap();
    assert_eq!(footprints(&array), before);
    assert!(array.locks().held().is_empty());
}
