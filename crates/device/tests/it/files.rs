//! File commands and programs that read and write device files by path.

use csx_proto::*;

use crate::common::*;

#[test]
fn put_get_list_stat_delete_extents() {
    let h = Harness::new();
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let c = h.ok(Op::FileWrite {
        path: "/d/one".into(),
        offset: 0,
        data: data.clone(),
        mode: WriteMode::Truncate,
    });
    assert_eq!(c.value, 10_000);
    h.ok(Op::FileWrite {
        path: "/d/two".into(),
        offset: 5,
        data: vec![1, 2],
        mode: WriteMode::Write,
    });
    h.fails(
        Op::FileWrite {
            path: "/d/two".into(),
            offset: 0,
            data: vec![],
            mode: WriteMode::CreateNew,
        },
        Status::FileExists,
    );
    let Reply::Data(got) = h
        .ok(Op::FileRead {
            path: "/d/one".into(),
            offset: 9_990,
            len: 100,
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(got, &data[9_990..]);
    let Reply::Data(got) = h
        .ok(Op::FileRead {
            path: "/d/two".into(),
            offset: 0,
            len: 100,
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(got, [0, 0, 0, 0, 0, 1, 2]);
    let Reply::Files { files, truncated } = h.ok(Op::FileList { dir: "/d".into() }).reply else {
        panic!()
    };
    assert!(!truncated);
    let names: Vec<(&str, u64)> = files
        .iter()
        .map(|f| (f.path.as_str(), f.size_bytes))
        .collect();
    assert_eq!(names, [("/d/one", 10_000), ("/d/two", 7)]);
    let Reply::File(st) = h
        .ok(Op::FileStat {
            path: "d//one".into(),
        })
        .reply
    else {
        panic!()
    };
    assert_eq!((st.path.as_str(), st.size_bytes), ("/d/one", 10_000));
    let Reply::Extents { extents, .. } = h
        .ok(Op::FileExtents {
            path: "/d/one".into(),
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(extents.iter().map(|e| e.len).sum::<u64>(), 10_000);
    assert_eq!(st.extent_count as usize, extents.len());
    // Truncate mode replaces the contents.
    h.ok(Op::FileWrite {
        path: "/d/one".into(),
        offset: 0,
        data: vec![9],
        mode: WriteMode::Truncate,
    });
    let Reply::File(st) = h
        .ok(Op::FileStat {
            path: "/d/one".into(),
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(st.size_bytes, 1);
    h.ok(Op::FileTruncate {
        path: "/d/one".into(),
        size_bytes: 3,
    });
    h.ok(Op::FileDelete {
        path: "/d/one".into(),
    });
    h.fails(
        Op::FileStat {
            path: "/d/one".into(),
        },
        Status::NotFound,
    );
    h.fails(
        Op::FileDelete {
            path: "/d/one".into(),
        },
        Status::NotFound,
    );
    h.fails(
        Op::FileRead {
            path: "/d/one".into(),
            offset: 0,
            len: 1,
        },
        Status::NotFound,
    );
    h.fails(Op::FileStat { path: "/".into() }, Status::InvalidField);
    h.ok(Op::Flush);
}

#[test]
fn program_reads_a_file_by_path() {
    // Delilah's experiment: the program names a file; a registered function reads it.
    let h = Harness::new();
    let content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    h.ok(Op::FileWrite {
        path: "/input/data.bin".into(),
        offset: 0,
        data: content.clone(),
        mode: WriteMode::Truncate,
    });
    let image = compile("files.c");
    h.load(0, &image, Some("read_file"), EngineKind::Jit, 1 << 20);
    h.load(
        1,
        &image,
        Some("read_file"),
        EngineKind::Interpreter,
        1 << 20,
    );
    let w = h.alloc(8192);
    for pind in [0, 1] {
        let c = h.exec(pind, vec![range(w, 0, 8192)], 1000, b"/input/data.bin");
        assert_eq!(c.status, Status::Success, "{:?}", c.detail);
        let sum: u64 = content[1000..].iter().map(|&b| u64::from(b)).sum();
        assert_eq!(c.value, (sum << 20) | 4000);
        assert!(c.detail.is_none());
        assert_eq!(h.read(w, 0, 4), &content[1000..1004]);
        // A missing file: the function's negative code reaches r0, its detail the host.
        let c = h.exec(pind, vec![range(w, 0, 8192)], 0, b"/input/missing");
        assert_eq!(c.status, Status::Success);
        assert_eq!(c.value as i64, errno::CSX_ENOENT);
        let d = c.detail.unwrap();
        assert_eq!(
            (d.function.as_str(), d.code),
            ("csx_file_size", errno::CSX_ENOENT)
        );
        assert!(d.message.contains("/input/missing"), "{}", d.message);
    }
}

#[test]
fn program_writes_a_file() {
    let h = Harness::new();
    h.load(
        0,
        &compile("files.c"),
        Some("write_file"),
        EngineKind::Jit,
        1 << 20,
    );
    let w = h.alloc(20);
    h.write(w, 0, b"written by a program");
    let c = h.exec(0, vec![range(w, 0, 16)], 4, b"/out/result");
    assert_eq!(c.value, 16);
    let Reply::Data(got) = h
        .ok(Op::FileRead {
            path: "/out/result".into(),
            offset: 0,
            len: 100,
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(&got[..4], &[0; 4]);
    assert_eq!(&got[4..], b"written by a pro");
    // And SLM into a file directly (NVM Copy from a memory namespace).
    h.ok(Op::FileWriteFromMem {
        path: "/out/copy".into(),
        offset: 0,
        src: range(w, 8, 8),
    });
    let Reply::Data(got) = h
        .ok(Op::FileRead {
            path: "/out/copy".into(),
            offset: 0,
            len: 100,
        })
        .reply
    else {
        panic!()
    };
    assert_eq!(got, b"by a pro");
}
