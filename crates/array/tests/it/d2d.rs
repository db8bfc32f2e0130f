//! Daemon-to-daemon transfer: a tcp member pulls another tcp member's blocks itself.
//! The bytes cross the D2D link once and the host link never; a peer that died fails
//! the transfer with an error naming it, and once it is back a re-run succeeds.

use csx_array::d2d::Route;
use csx_array::{Array, BlockRange, Placement};

use crate::common::{bytes, Daemon};

fn ranges(array: &Array, path: &str) -> Vec<BlockRange> {
    array
        .map(path)
        .unwrap()
        .extents
        .iter()
        .map(|e| BlockRange {
            start: e.addr,
            len: e.len,
        })
        .collect()
}

#[test]
fn a_daemon_pulls_its_peers_blocks_without_the_host() {
    let mut daemons: Vec<Daemon> = (0..3).map(|_| Daemon::start()).collect();
    let uris: Vec<String> = daemons.iter().map(|d| d.uri.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let array = Array::init_members(&dir.path().join("arr"), &uris, Default::default()).unwrap();
    // Larger than one memory I/O command (16 MiB): the peer reads in several pieces.
    let data = bytes((17 << 20) + 4097, 9);
    array.put_bytes("/p", &data, Placement::Member(0)).unwrap();
    let blocks = ranges(&array, "/p");
    let dst_dev = &array.members()[2].device;
    let h = dst_dev.alloc(data.len() as u64 + 8).unwrap();
    let before = array.links().snapshot();
    let (n, route) = array.d2d_read_blocks(&blocks, 2, h, 8).unwrap();
    let after = array.links().snapshot();
    assert_eq!((n, route), (data.len() as u64, Route::Peer));
    assert_eq!(
        dst_dev.read_mem(h, 8, n).unwrap(),
        data,
        "the bytes arrived"
    );
    let len = data.len() as u64;
    assert_eq!(
        after.host.ingress - before.host.ingress,
        0,
        "not via the host"
    );
    assert_eq!(
        after.host.egress - before.host.egress,
        0,
        "not via the host"
    );
    assert_eq!(after.d2d_copies - before.d2d_copies, 1);
    assert_eq!(after.d2d_bytes - before.d2d_bytes, len, "one crossing");
    assert_eq!(after.members[0].egress - before.members[0].egress, len);
    assert_eq!(after.members[2].ingress - before.members[2].ingress, len);
    assert_eq!(after.host_copies, before.host_copies);

    // The source daemon dies: member 2's connection to it breaks, and the transfer
    // fails naming member 0, its URI, and no bytes are accounted.
    daemons[0].stop();
    let e = array.d2d_read_blocks(&blocks, 2, h, 8).unwrap_err();
    assert_eq!(e.member(), Some(0), "the error names the peer: {e}");
    assert!(e.to_string().contains(&uris[0]), "{e}");
    assert_eq!(array.links().snapshot().d2d_bytes, after.d2d_bytes);
    // It comes back on the same address: member 2 reconnects and the re-run succeeds.
    daemons[0].restart();
    dst_dev.fill_mem(h, 0, len + 8, 0).unwrap();
    assert_eq!(
        array.d2d_read_blocks(&blocks, 2, h, 8).unwrap().1,
        Route::Peer
    );
    assert_eq!(dst_dev.read_mem(h, 8, len).unwrap(), data);
    dst_dev.free(h).unwrap();
    drop(array);
}

/// A range past the peer's namespace is refused by the peer: a typed error from the
/// destination member naming the offset, not a hang or a crash.
#[test]
fn a_bad_peer_range_is_a_typed_error() {
    let daemons: Vec<Daemon> = (0..2).map(|_| Daemon::start()).collect();
    let uris: Vec<String> = daemons.iter().map(|d| d.uri.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let array = Array::init_members(&dir.path().join("arr"), &uris, Default::default()).unwrap();
    let dev = &array.members()[1].device;
    let h = dev.alloc(8192).unwrap();
    // Ask member 1 directly for 4 KiB at the last block of member 0's namespace + 1.
    let nvm = array.members()[0].nvm_size_bytes;
    let e = dev
        .copy_to_mem(
            h,
            0,
            vec![csx_host::proto::CopySource::Peer {
                peer: uris[0].clone(),
                offset: nvm - 4096 + 1,
                len: 4096,
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains(&uris[0]), "{e}");
    assert!(e.to_string().contains(&(nvm - 4096 + 1).to_string()), "{e}");
    // An embedded device has no peer links: it says so.
    let (_d, embedded) = crate::common::embedded(1);
    let edev = &embedded.members()[0].device;
    let eh = edev.alloc(4096).unwrap();
    let e = edev
        .copy_to_mem(
            eh,
            0,
            vec![csx_host::proto::CopySource::Peer {
                peer: uris[0].clone(),
                offset: 0,
                len: 4096,
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("no peer links"), "{e}");
}
