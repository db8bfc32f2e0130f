//! Execute Program through the host API: windows inline and from range sets, cparams,
//! parameter bytes, output windows, traces, traps, fuel, the timing breakdown, and a
//! program that reads a device file by path (Delilah's experiment).

use csx_host::proto::{EngineKind, Status, WireTrapKind};
use csx_host::ExecuteRequest;

use crate::programs::{load, ADD_BYTES, FILE_SUM, OOB, SPIN, SUM64, TRACE};
use crate::Fixture;

fn sum_bytes(data: &[u8]) -> u64 {
    data.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .fold(0, u64::wrapping_add)
}

/// The flow: put a file, stage a range of it into device memory with a Memory
/// Copy, sum it on both engines.
fn sum_staged_file(f: &mut Fixture) {
    let dev = f.dev();
    let data = csx_testkit::bytes::seeded(1 << 20, 21);
    dev.put_bytes("/numbers", &data).unwrap();
    let mem = dev.alloc(1 << 20).unwrap();
    dev.copy_file_to_mem("/numbers", 0, 1 << 20, mem, 0)
        .unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let pind = load(f, SUM64, engine);
        let run = dev
            .execute(&ExecuteRequest::new(pind).window(mem, 0, 1 << 20))
            .unwrap();
        assert_eq!(run.status, Status::Success);
        assert_eq!(run.r0, sum_bytes(&data), "{engine:?}");
        assert!(run.trap.is_none());
        assert!(run.fuel_used > 0);
        let t = run.timing;
        assert!(t.total_ns > 0 && t.execute_ns > 0, "{t:?}");
        assert!(t.total_ns >= t.execute_ns, "{t:?}");
        // A sub-range window sees only its bytes.
        let run = dev
            .execute(&ExecuteRequest::new(pind).window(mem, 8, 16))
            .unwrap();
        assert_eq!(run.r0, sum_bytes(&data[8..24]));
        dev.unload(pind).unwrap();
    }
    dev.free(mem).unwrap();
}

/// Window 1 as output; windows from a range set; cparams.
fn output_window_and_range_set(f: &mut Fixture) {
    let dev = f.dev();
    let pind = load(f, ADD_BYTES, EngineKind::Jit);
    let input = dev.alloc(256).unwrap();
    let output = dev.alloc(256).unwrap();
    let bytes: Vec<u8> = (0..=255).collect();
    dev.write_mem(input, 0, &bytes).unwrap();
    let req = ExecuteRequest::new(pind)
        .window(input, 0, 256)
        .window(output, 0, 100)
        .cparams(3, 0);
    let run = dev.execute(&req).unwrap();
    assert_eq!(run.r0, 100);
    let out = dev.read_mem(output, 0, 100).unwrap();
    assert_eq!(
        out,
        bytes[..100]
            .iter()
            .map(|b| b.wrapping_add(3))
            .collect::<Vec<_>>()
    );
    let rsid = dev
        .create_range_set(vec![
            csx_host::proto::MemRange {
                handle: input,
                offset: 0,
                len: 256,
            },
            csx_host::proto::MemRange {
                handle: output,
                offset: 0,
                len: 256,
            },
        ])
        .unwrap();
    let run = dev
        .execute(&ExecuteRequest::new(pind).range_set(rsid).cparams(1, 0))
        .unwrap();
    assert_eq!(run.r0, 256);
    assert_eq!(dev.read_mem(output, 255, 1).unwrap(), [0]);
    dev.delete_range_set(rsid).unwrap();
    dev.free(input).unwrap();
    dev.free(output).unwrap();
}

fn trace_trap_and_fuel(f: &mut Fixture) {
    let dev = f.dev();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let traced = load(f, TRACE, engine);
        let run = dev.execute(&ExecuteRequest::new(traced)).unwrap();
        assert_eq!(run.r0, 7);
        assert_eq!(run.trace, ["hello from the device"]);

        let oob = load(f, OOB, engine);
        let mem = dev.alloc(16).unwrap();
        let run = dev
            .execute(&ExecuteRequest::new(oob).window(mem, 0, 16))
            .unwrap();
        assert!(run.trapped());
        assert_eq!(run.status, Status::Trap);
        let trap = run.trap.expect("a trap");
        assert!(
            matches!(
                trap.kind,
                WireTrapKind::OutOfBounds {
                    size: 1,
                    write: false,
                    ..
                }
            ),
            "{trap}"
        );

        let spin = load(f, SPIN, engine);
        let run = dev
            .execute(&ExecuteRequest::new(spin).fuel(10_000))
            .unwrap();
        let trap = run.trap.expect("fuel runs out");
        assert_eq!(trap.kind, WireTrapKind::FuelExhausted { budget: 10_000 });
        for pind in [traced, oob, spin] {
            dev.unload(pind).unwrap();
        }
        dev.free(mem).unwrap();
    }
}

/// Delilah's experiment: the program opens a device file by path and reads it itself
/// with `csx_file_read`, chunk by chunk into its window; a missing file comes back as
/// a negative code with the function's detail.
fn program_reads_file_by_path(f: &mut Fixture) {
    let dev = f.dev();
    let data = csx_testkit::bytes::seeded(3 << 20, 8);
    dev.put_bytes("/delilah/input", &data).unwrap();
    let buf = dev.alloc(64 << 10).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let pind = load(f, FILE_SUM, engine);
        let req = ExecuteRequest::new(pind)
            .window(buf, 0, 64 << 10)
            .params(b"/delilah/input".to_vec());
        let run = dev.execute(&req).unwrap();
        assert_eq!(run.r0, sum_bytes(&data), "{engine:?}");
        assert!(run.detail.is_none());
        assert!(
            run.timing.transfer_ns > 0,
            "file reads count as transfer: {:?}",
            run.timing
        );

        let req = ExecuteRequest::new(pind)
            .window(buf, 0, 4096)
            .params(b"/delilah/missing".to_vec());
        let run = dev.execute(&req).unwrap();
        assert_eq!(
            run.status,
            Status::Success,
            "the program handles the error itself"
        );
        assert_eq!(run.r0_signed(), csx_host::proto::errno::CSX_ENOENT);
        let detail = run.detail.expect("the failing function is reported");
        assert_eq!(detail.function, "csx_file_read");
        assert_eq!(detail.code, csx_host::proto::errno::CSX_ENOENT);
        dev.unload(pind).unwrap();
    }
    dev.free(buf).unwrap();
}

/// Many executions in flight from one thread through the asynchronous core, collected
/// in whatever order they complete.
fn async_submit_and_reap(f: &mut Fixture) {
    let dev = f.dev();
    let pind = load(f, crate::programs::MIX, EngineKind::Jit);
    let client = dev.client();
    let mut expected = std::collections::HashMap::new();
    for i in 0..200u64 {
        let id = client
            .submit(ExecuteRequest::new(pind).cparams(i, 1).to_op())
            .unwrap();
        expected.insert(id, i * 1000003 + 1);
    }
    assert_eq!(client.outstanding(), 200);
    while let Some(c) = client.reap(None).unwrap() {
        let want = expected
            .remove(&c.id)
            .expect("each completion once, for a command we sent");
        assert_eq!(c.value, want);
    }
    assert!(expected.is_empty(), "every command completed");
    assert_eq!(client.outstanding(), 0);
}

crate::backend_tests!(
    sum_staged_file,
    output_window_and_range_set,
    trace_trap_and_fuel,
    program_reads_file_by_path,
    async_submit_and_reap,
);
