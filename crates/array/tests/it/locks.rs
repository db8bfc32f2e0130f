//! Block locks: waiting, unlocking on completion, dead owners, typed errors.

use std::sync::mpsc;
use std::time::Duration;

use csx_array::{ArrayError, BlockRange, TaggedAddr};

use crate::common::embedded;

fn range(m: u16, sector: u64, len: u64) -> BlockRange {
    BlockRange {
        start: TaggedAddr::new(m, sector).unwrap(),
        len,
    }
}

#[test]
fn a_request_on_locked_blocks_waits_until_they_unlock() {
    let (_dir, array) = embedded(2);
    let locks = array.locks().clone();
    let guard = locks.lock("sort 0", &[range(0, 0, 8192)], None).unwrap();
    // Other blocks, and the same blocks on another member, are free.
    locks
        .lock("other", &[range(0, 16, 4096), range(1, 0, 8192)], None)
        .unwrap();
    assert!(locks
        .wait_unlocked(&[range(0, 8, 512)], Some(Duration::from_millis(20)))
        .is_err());
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            let g = locks.lock("merge", &[range(0, 4, 1024)], None).unwrap();
            tx.send("merge locked").unwrap();
            g
        })
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "the merge waits"
    );
    guard.unlock();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "merge locked"
    );
    let g = waiter.join().unwrap();
    assert_eq!(locks.held().len(), 1);
    drop(g);
    assert!(locks.held().is_empty());
}

#[test]
fn a_dead_owner_loses_its_locks() {
    let (_dir, array) = embedded(1);
    let locks = array.locks().clone();
    let l2 = locks.clone();
    let died = std::thread::spawn(move || {
        let _g = l2.lock("doomed", &[range(0, 0, 4096)], None).unwrap();
        panic!("the client dies holding its lock");
    })
    .join();
    assert!(died.is_err());
    locks
        .lock("next", &[range(0, 0, 4096)], Some(Duration::from_secs(5)))
        .expect("the dead owner's lock is gone");
}

#[test]
fn bad_ranges_are_typed_errors() {
    let (_dir, array) = embedded(2);
    let locks = array.locks();
    let nvm = array.members()[0].nvm_size_bytes;
    assert!(matches!(
        locks.lock("x", &[range(2, 0, 1)], None),
        Err(ArrayError::NoSuchMember { tag: 2, members: 2 })
    ));
    let e = locks
        .lock("x", &[range(0, nvm / 512, 512)], None)
        .unwrap_err();
    assert!(
        matches!(e, ArrayError::RangeOutOfBounds { limit, .. } if limit == nvm),
        "{e}"
    );
    let e = locks.lock("x", &[range(1, 0, nvm + 1)], None).unwrap_err();
    assert!(
        matches!(e, ArrayError::RangeOutOfBounds { len, .. } if len == nvm + 1),
        "{e}"
    );
    assert!(matches!(
        locks.lock("x", &[range(0, 0, 0)], None),
        Err(ArrayError::OutOfRange { value: 0, .. })
    ));
    assert!(locks.held().is_empty(), "a refused request holds nothing");
}
