//! Persistence across a close and reopen of the device: files, the shared state, and
//! programs kept by name survive; memory allocations and unnamed programs do not.

use csx_host::proto::{EngineKind, ProgramState};
use csx_host::{CallError, ExecuteRequest};

use crate::programs::{load, COUNTER};
use crate::Fixture;

fn files_and_state_survive_restart(f: &mut Fixture) {
    let data = csx_testkit::bytes::seeded(5 << 20, 99);
    let pind = load(f, COUNTER, EngineKind::Jit);
    let unnamed = load(f, COUNTER, EngineKind::Interpreter);
    f.dev().persist_program(pind, "counter").unwrap();
    {
        let dev = f.dev();
        dev.put_bytes("/keep/me", &data).unwrap();
        dev.put_bytes("/gone", b"x").unwrap();
        dev.delete_file("/gone").unwrap();
        for n in 1..=3 {
            assert_eq!(dev.execute(&ExecuteRequest::new(pind)).unwrap().r0, n);
        }
        // An allocation left behind: device memory does not survive a restart.
        dev.alloc(64).unwrap();
    }
    f.restart();
    let dev = f.dev();
    assert!(
        dev.read_file("/keep/me", 0, u64::MAX).unwrap() == data,
        "file content survives"
    );
    assert!(matches!(dev.stat("/gone"), Err(CallError::NotFound(_))));
    assert_eq!(dev.list_files("/").unwrap().files.len(), 1);
    assert_eq!(
        dev.identify().unwrap().slm_free_bytes,
        crate::SLM_SIZE,
        "memory starts empty"
    );
    // The unnamed program went with its client; the named one is still there, and
    // the shared state kept its count.
    assert_eq!(dev.program_state(unnamed).unwrap(), ProgramState::Empty);
    let state = dev.program_state(pind).unwrap();
    assert!(
        matches!(state, ProgramState::Active | ProgramState::Loaded),
        "{state:?}"
    );
    dev.activate(pind, EngineKind::Jit).unwrap();
    assert_eq!(dev.execute(&ExecuteRequest::new(pind)).unwrap().r0, 4);
    // Clearing the state resets the count, and that survives too.
    dev.clear_state(0, 0).unwrap();
    assert_eq!(dev.execute(&ExecuteRequest::new(pind)).unwrap().r0, 1);
    f.restart();
    let dev = f.dev();
    dev.activate(pind, EngineKind::Jit).unwrap();
    assert_eq!(dev.execute(&ExecuteRequest::new(pind)).unwrap().r0, 2);
}

/// Flushed data survives even when the device is not closed cleanly... within one
/// process we cannot kill the device, but a flush followed by a restart must show it.
fn flush_then_restart(f: &mut Fixture) {
    f.dev().put_bytes("/flushed", b"durable").unwrap();
    f.dev().flush().unwrap();
    f.restart();
    assert_eq!(f.dev().read_file("/flushed", 0, 100).unwrap(), b"durable");
}

crate::backend_tests!(files_and_state_survive_restart, flush_then_restart);
