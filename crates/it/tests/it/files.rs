//! The device's file store through the host API: put/get (streamed, chunked), write and
//! read at offsets, list, stat, truncate, extents, delete, and writing device memory
//! into a file.

use csx_host::proto::limits::FILE_IO_SIZE_MAX;
use csx_host::proto::{Op, Status, WriteMode};
use csx_host::{CallError, Progress};

use csx_testkit::bytes::seeded;

use crate::Fixture;

fn small_files(f: &mut Fixture) {
    let dev = f.dev();
    dev.put_bytes("/a/one", b"hello").unwrap();
    dev.put_bytes("/a/two", &seeded(10_000, 2)).unwrap();
    dev.put_bytes("/b", b"").unwrap();
    assert_eq!(dev.read_file("/a/one", 0, 100).unwrap(), b"hello");
    assert_eq!(dev.read_file("/a/one", 1, 3).unwrap(), b"ell");
    assert_eq!(
        dev.read_file("/a/one", 10, 3).unwrap(),
        b"",
        "reads past the end are empty"
    );
    assert_eq!(
        dev.read_file("/a/two", 0, 20_000).unwrap(),
        seeded(10_000, 2)
    );
    assert_eq!(dev.stat("/b").unwrap().size_bytes, 0);
    // Overwrite in place and extend.
    dev.write_file("/a/one", 3, b"p!!").unwrap();
    assert_eq!(dev.read_file("/a/one", 0, 100).unwrap(), b"help!!");
    // A put replaces the whole file.
    dev.put_bytes("/a/one", b"x").unwrap();
    assert_eq!(dev.read_file("/a/one", 0, 100).unwrap(), b"x");
    // Listing, by directory.
    let all: Vec<String> = dev
        .list_files("/")
        .unwrap()
        .files
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(all, ["/a/one", "/a/two", "/b"]);
    let under_a = dev.list_files("/a").unwrap();
    assert!(!under_a.truncated);
    assert_eq!(under_a.files.len(), 2);
    assert_eq!(under_a.files[1].size_bytes, 10_000);
    // Stat, truncate, extents.
    let st = dev.stat("/a/two").unwrap();
    assert_eq!((st.path.as_str(), st.size_bytes), ("/a/two", 10_000));
    dev.truncate_file("/a/two", 20_000).unwrap();
    let grown = dev.read_file("/a/two", 0, 20_000).unwrap();
    assert_eq!(&grown[..10_000], &seeded(10_000, 2)[..]);
    assert!(
        grown[10_000..].iter().all(|&b| b == 0),
        "growth is zero-filled"
    );
    let ext = dev.extents("/a/two").unwrap();
    assert!(!ext.truncated);
    assert!(!ext.extents.is_empty());
    let covered: u64 = ext.extents.iter().map(|e| e.len).sum();
    assert!(
        (10_000..=20_000 + 4096).contains(&covered),
        "extents cover {covered} bytes"
    );
    assert_eq!(ext.extents[0].file_offset, 0);
    // Delete.
    dev.delete_file("/a/one").unwrap();
    assert!(matches!(dev.stat("/a/one"), Err(CallError::NotFound(_))));
    assert!(matches!(
        dev.delete_file("/a/one"),
        Err(CallError::NotFound(_))
    ));
    assert_eq!(dev.list_files("/").unwrap().files.len(), 2);
    // Create-new refuses an existing file.
    let op = Op::FileWrite {
        path: "/b".into(),
        offset: 0,
        data: vec![1],
        mode: WriteMode::CreateNew,
    };
    let e = dev.client().call_ok(op).unwrap_err();
    assert!(matches!(e, CallError::FileExists(_)), "{e}");
    assert_eq!(e.status(), Some(Status::FileExists));
}

/// Files larger than one command's limit stream in chunks, both ways, with progress.
fn put_get_streamed(f: &mut Fixture) {
    let dev = f.dev();
    let len = 2 * FILE_IO_SIZE_MAX as usize + 12_345;
    let data = seeded(len, 7);
    let local = f.scratch().join("big.in");
    std::fs::write(&local, &data).unwrap();
    let mut reports: Vec<Progress> = Vec::new();
    let put = dev
        .put_file(&local, "/big", &mut |p| reports.push(p))
        .unwrap();
    assert_eq!(put, len as u64);
    assert_eq!(reports.len(), 3, "one report per chunk");
    assert!(reports
        .windows(2)
        .all(|w| w[0].done_bytes < w[1].done_bytes));
    assert_eq!(
        reports.last().unwrap(),
        &Progress {
            done_bytes: len as u64,
            total_bytes: len as u64
        }
    );
    assert_eq!(dev.stat("/big").unwrap().size_bytes, len as u64);
    let back = f.scratch().join("big.out");
    let mut got_reports = 0;
    let got = dev
        .get_file("/big", &back, &mut |_| got_reports += 1)
        .unwrap();
    assert_eq!(got, len as u64);
    assert_eq!(got_reports, 3);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the file comes back intact"
    );
    assert!(dev.read_file("/big", 0, len as u64).unwrap() == data);
    // A smaller put replaces it entirely; an empty local file makes an empty device file.
    std::fs::write(&local, b"tiny").unwrap();
    dev.put_file(&local, "/big", &mut |_| {}).unwrap();
    assert_eq!(dev.read_file("/big", 0, u64::MAX).unwrap(), b"tiny");
    std::fs::write(&local, b"").unwrap();
    assert_eq!(dev.put_file(&local, "/empty", &mut |_| {}).unwrap(), 0);
    assert_eq!(dev.stat("/empty").unwrap().size_bytes, 0);
    dev.get_file("/empty", &back, &mut |_| {}).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), b"");
}

/// Device memory written into a file on the device (no host copy).
fn write_from_memory(f: &mut Fixture) {
    let dev = f.dev();
    let h = dev.alloc(1000).unwrap();
    dev.write_mem(h, 0, &seeded(1000, 3)).unwrap();
    let n = dev
        .write_mem_to_file(
            "/from-mem",
            10,
            csx_host::proto::MemRange {
                handle: h,
                offset: 100,
                len: 500,
            },
        )
        .unwrap();
    assert_eq!(n, 500);
    let got = dev.read_file("/from-mem", 0, 1000).unwrap();
    assert_eq!(got.len(), 510);
    assert!(got[..10].iter().all(|&b| b == 0));
    assert_eq!(&got[10..], &seeded(1000, 3)[100..600]);
    dev.free(h).unwrap();
}

crate::backend_tests!(small_files, put_get_streamed, write_from_memory);
