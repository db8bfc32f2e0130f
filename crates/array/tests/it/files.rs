//! Files on arrays: placement, striping, round trips, the tagged map, persistence, and
//! the typed errors of bad requests.

use csx_array::{Array, ArrayError, Layout, Placement, TaggedAddr};

use crate::common::{bytes, embedded, read_nvm, Daemon};

#[test]
fn single_and_striped_files_round_trip_and_map_to_their_bytes() {
    let (dir, array) = embedded(3);
    let small = bytes(10_000, 1);
    let big = bytes(5 * 4096 * 3 + 1234, 2);
    let e1 = array
        .put_bytes("/a/small", &small, Placement::Member(2))
        .unwrap();
    assert_eq!(e1.layout, Layout::Single { member: 2 });
    let e2 = array
        .put_bytes("b//big/", &big, Placement::Striped { stripe_bytes: 4096 })
        .unwrap();
    assert!(matches!(
        e2.layout,
        Layout::Striped {
            stripe_bytes: 4096,
            ..
        }
    ));
    assert_eq!(array.get_bytes("/a/small").unwrap(), small);
    assert_eq!(array.get_bytes("/b/big").unwrap(), big);

    // Auto placement goes to the emptiest member: 0 holds 4 + 1 stripes below 1 and 2.
    let e3 = array.put_bytes("/c", b"xyz", Placement::Auto).unwrap();
    let Layout::Single { member } = e3.layout else {
        panic!("single")
    };
    assert_ne!(member, 2, "member 2 holds the most bytes");

    let listed: Vec<String> = array.list("/").into_iter().map(|(p, _)| p).collect();
    assert_eq!(listed, ["/a/small", "/b/big", "/c"]);
    assert_eq!(array.list("/a").len(), 1);

    // The tagged map covers the file exactly, and each extent's tagged address reads
    // back the file's bytes from the member it names.
    for (path, data) in [("/a/small", &small), ("/b/big", &big)] {
        let map = array.map(path).unwrap();
        assert!(!map.truncated);
        let mut next = 0;
        for e in &map.extents {
            assert_eq!(e.file_offset, next, "{path}: extents are contiguous");
            assert_eq!(e.addr.member(), e.member);
            assert_eq!(e.addr.0 >> 55, u64::from(e.member));
            let got = read_nvm(&array, e.member, e.addr.byte_offset(), e.len);
            assert_eq!(
                got,
                data[e.file_offset as usize..(e.file_offset + e.len) as usize],
                "{path}: extent at {} ({})",
                e.file_offset,
                e.addr
            );
            next += e.len;
        }
        assert_eq!(next, data.len() as u64);
    }
    let striped = array.map("/b/big").unwrap();
    let members: std::collections::BTreeSet<u16> =
        striped.extents.iter().map(|e| e.member).collect();
    assert_eq!(members.len(), 3, "a striped file spans every member");

    // Replacing a file commits the new data and deletes the old pieces; the catalog
    // persists across a reopen.
    array
        .put_bytes("/a/small", b"new", Placement::Member(0))
        .unwrap();
    assert!(array.orphans().unwrap().is_empty());
    let root = array.dir().to_path_buf();
    array.close().unwrap();
    let array = Array::open(&root).unwrap();
    assert_eq!(array.get_bytes("/a/small").unwrap(), b"new");
    assert_eq!(array.get_bytes("/b/big").unwrap(), big);
    array.rename("/b/big", "/b/renamed").unwrap();
    assert!(matches!(
        array.stat("/b/big"),
        Err(ArrayError::NotFound { .. })
    ));
    assert_eq!(array.get_bytes("/b/renamed").unwrap(), big);
    array.delete("/b/renamed").unwrap();
    assert_eq!(array.list("/").len(), 2);
    assert!(array.orphans().unwrap().is_empty());
    drop(dir);
}

#[test]
fn local_files_stream_through_stripes() {
    let (dir, array) = embedded(2);
    let data = bytes(3 << 20, 9);
    let local = dir.path().join("in.bin");
    std::fs::write(&local, &data).unwrap();
    let mut last = None;
    array
        .put_file(
            &local,
            "/x",
            Placement::Striped {
                stripe_bytes: 64 << 10,
            },
            &mut |p| last = Some(p),
        )
        .unwrap();
    assert_eq!(last.unwrap().done_bytes, data.len() as u64);
    let out = dir.path().join("out.bin");
    assert_eq!(
        array.get_file("/x", &out, &mut |_| {}).unwrap(),
        data.len() as u64
    );
    assert_eq!(std::fs::read(&out).unwrap(), data);
    // Each member's link carried half the bytes in and half out.
    let c = array.links().snapshot();
    assert_eq!(
        c.members[0].ingress + c.members[1].ingress,
        data.len() as u64
    );
    assert_eq!(c.host.egress, data.len() as u64);
    assert_eq!(c.host.ingress, data.len() as u64);
}

#[test]
fn bad_requests_are_typed_errors_naming_value_and_limit() {
    let (_dir, array) = embedded(2);
    assert!(matches!(
        array.put_bytes("/x", b"1", Placement::Member(2)),
        Err(ArrayError::NoSuchMember { tag: 2, members: 2 })
    ));
    let e = array
        .put_bytes("/x", b"1", Placement::Striped { stripe_bytes: 1000 })
        .unwrap_err();
    assert!(
        matches!(
            e,
            ArrayError::OutOfRange {
                value: 1000,
                min: 4096,
                ..
            }
        ),
        "{e}"
    );
    let e = array
        .put_bytes("/x", b"1", Placement::Striped { stripe_bytes: 5000 })
        .unwrap_err();
    assert!(
        matches!(
            e,
            ArrayError::Unaligned {
                value: 5000,
                align: 4096,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        array.get_bytes("/none"),
        Err(ArrayError::NotFound { .. })
    ));
    assert!(matches!(
        array.map("/../x"),
        Err(ArrayError::BadPath { .. })
    ));
    assert!(matches!(
        array.member_at(7),
        Err(ArrayError::NoSuchMember { tag: 7, members: 2 })
    ));
    assert!(matches!(
        TaggedAddr::new(600, 0),
        Err(ArrayError::TagOutOfRange { tag: 600, max: 511 })
    ));
    // A member that runs out of space fails the put, naming the member; nothing is
    // committed and no piece is left behind.
    let e = array
        .put_bytes("/huge", &vec![1u8; 70 << 20], Placement::Member(1))
        .unwrap_err();
    assert_eq!(e.member(), Some(1), "{e}");
    assert!(e.to_string().contains("array member 1"), "{e}");
    assert!(matches!(
        array.stat("/huge"),
        Err(ArrayError::NotFound { .. })
    ));
    assert!(array.orphans().unwrap().is_empty());
    // Arrays are not created twice, and a directory without one is not an array.
    let root = array.dir().to_path_buf();
    array.close().unwrap();
    assert!(matches!(
        Array::init_embedded(&root, 2, crate::common::member_config(), Default::default()),
        Err(ArrayError::Exists { .. })
    ));
    assert!(matches!(
        Array::open(&root.join("m0")),
        Err(ArrayError::NotAnArray { .. })
    ));
    assert!(matches!(
        Array::init_embedded(
            &root.join("zero"),
            0,
            crate::common::member_config(),
            Default::default()
        ),
        Err(ArrayError::MemberCount { count: 0, max: 512 })
    ));
}

#[test]
fn daemons_over_tcp_are_members() {
    let daemons: Vec<Daemon> = (0..3).map(|_| Daemon::start()).collect();
    let uris: Vec<String> = daemons.iter().map(|d| d.uri.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("arr");
    let array = Array::init_members(&root, &uris, Default::default()).unwrap();
    let data = bytes(300_000, 5);
    array
        .put_bytes("/d", &data, Placement::Striped { stripe_bytes: 8192 })
        .unwrap();
    assert_eq!(array.get_bytes("/d").unwrap(), data);
    let map = array.map("/d").unwrap();
    assert_eq!(
        map.extents.iter().map(|e| e.len).sum::<u64>(),
        data.len() as u64
    );
    array.close().unwrap();
    let array = Array::open(&root).unwrap();
    assert_eq!(array.members()[1].uri, uris[1]);
    assert_eq!(array.get_bytes("/d").unwrap(), data);
    array.close().unwrap();
    // A member that is gone: opening names it.
    let mut daemons = daemons;
    daemons[2].stop();
    let e = Array::open(&root).unwrap_err();
    assert_eq!(e.member(), Some(2), "{e}");
}
