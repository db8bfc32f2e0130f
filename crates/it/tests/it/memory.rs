//! Device memory (SLM) and discovery through the host API: identify, the function
//! table, alloc/free, write/read (chunked), fill, Memory Copy from files, the NVM
//! namespace and other allocations, range sets, shared-state clearing and flush.

use csx_host::proto::limits::MEM_IO_SIZE_MAX;
use csx_host::proto::{CopySource, MemRange, ABI_VERSION};

use crate::{Fixture, ENGINES, NVM_SIZE, SLM_SIZE, STATE_SIZE};
use csx_testkit::bytes::seeded;

fn identify_and_functions(f: &mut Fixture) {
    let dev = f.dev();
    let info = dev.identify().unwrap();
    assert_eq!(info.abi_version, ABI_VERSION);
    assert_eq!(info.nvm_size_bytes, NVM_SIZE);
    assert_eq!(info.slm_size_bytes, SLM_SIZE);
    assert_eq!(info.slm_free_bytes, SLM_SIZE);
    assert_eq!(info.state_size_bytes, STATE_SIZE);
    assert_eq!(info.engines, ENGINES);
    assert!(info.load_chunk_size_max > 0);
    let functions = dev.functions().unwrap();
    for name in [
        "csx_file_size",
        "csx_file_read",
        "csx_file_write",
        "csx_memcpy",
        "csx_memset",
        "csx_now_ns",
        "csx_trace",
    ] {
        let found = functions.iter().find(|f| f.name == name);
        let found = found.unwrap_or_else(|| panic!("{name} is not in the function table"));
        assert!(
            found.c_decl.contains(name),
            "{name}'s declaration: {}",
            found.c_decl
        );
        assert!(!found.doc.is_empty());
    }
    assert!(
        functions.len() >= 9,
        "the accelerated filters and sort are published too"
    );
    dev.flush().unwrap();
    dev.clear_state(0, 0).unwrap();
    dev.clear_state(8, 16).unwrap();
}

fn alloc_write_read_fill_free(f: &mut Fixture) {
    let dev = f.dev();
    let len = MEM_IO_SIZE_MAX as usize + 4096 + 3;
    let h = dev.alloc(len as u64).unwrap();
    assert!(dev.identify().unwrap().slm_free_bytes <= SLM_SIZE - len as u64);
    // Fresh memory reads as zeros.
    assert!(dev.read_mem(h, 0, 4096).unwrap().iter().all(|&b| b == 0));
    // Writes and reads larger than one command are chunked.
    let data = seeded(len, 11);
    dev.write_mem(h, 0, &data).unwrap();
    assert!(dev.read_mem(h, 0, len as u64).unwrap() == data);
    assert_eq!(dev.read_mem(h, 5, 10).unwrap(), &data[5..15]);
    dev.fill_mem(h, 100, 50, 0xAB).unwrap();
    let got = dev.read_mem(h, 90, 70).unwrap();
    assert_eq!(&got[..10], &data[90..100]);
    assert!(got[10..60].iter().all(|&b| b == 0xAB));
    assert_eq!(&got[60..], &data[150..160]);
    dev.free(h).unwrap();
    assert_eq!(dev.identify().unwrap().slm_free_bytes, SLM_SIZE);
}

fn memory_copy(f: &mut Fixture) {
    let dev = f.dev();
    let file = seeded(100_000, 5);
    dev.put_bytes("/in", &file).unwrap();
    let dst = dev.alloc(200_000).unwrap();
    // A file range, on the device.
    assert_eq!(
        dev.copy_file_to_mem("/in", 1000, 5000, dst, 0).unwrap(),
        5000
    );
    assert_eq!(dev.read_mem(dst, 0, 5000).unwrap(), &file[1000..6000]);
    // Several sources back to back: a file range, the namespace at the file's first
    // extent, and another allocation.
    let other = dev.alloc(64).unwrap();
    dev.write_mem(other, 0, &[9u8; 64]).unwrap();
    let ext = dev.extents("/in").unwrap().extents[0];
    let sources = vec![
        CopySource::File {
            path: "/in".into(),
            offset: 0,
            len: 10,
        },
        CopySource::Nvm {
            offset: ext.nvm_offset,
            len: 20,
        },
        CopySource::Mem {
            handle: other,
            offset: 0,
            len: 64,
        },
    ];
    assert_eq!(dev.copy_to_mem(dst, 10_000, sources).unwrap(), 94);
    let got = dev.read_mem(dst, 10_000, 94).unwrap();
    assert_eq!(&got[..10], &file[..10]);
    assert_eq!(
        &got[10..30],
        &file[ext.file_offset as usize..ext.file_offset as usize + 20]
    );
    assert_eq!(&got[30..], &[9u8; 64]);
    dev.free(other).unwrap();
    dev.free(dst).unwrap();
}

fn range_sets(f: &mut Fixture) {
    let dev = f.dev();
    let a = dev.alloc(4096).unwrap();
    let b = dev.alloc(4096).unwrap();
    let ranges = vec![
        MemRange {
            handle: a,
            offset: 0,
            len: 4096,
        },
        MemRange {
            handle: b,
            offset: 8,
            len: 100,
        },
    ];
    let rsid = dev.create_range_set(ranges.clone()).unwrap();
    let rsid2 = dev.create_range_set(ranges[..1].to_vec()).unwrap();
    assert_ne!(rsid, rsid2);
    dev.delete_range_set(rsid).unwrap();
    dev.delete_range_set(rsid2).unwrap();
    assert!(matches!(
        dev.delete_range_set(rsid),
        Err(csx_host::CallError::UnknownRangeSet(_))
    ));
    dev.free(a).unwrap();
    dev.free(b).unwrap();
}

crate::backend_tests!(
    identify_and_functions,
    alloc_write_read_fill_free,
    memory_copy,
    range_sets
);
