//! Abort and time limits on every transport: a spinning execution aborted while it runs
//! and one aborted while it waits in the queue, on both engines; the next run of a slot
//! whose run was aborted before it ran (not run inline, out of the Abort's reach); an
//! abort of an id that is not in flight; a client that goes away with executions in
//! flight; a run stopped at its time limit. A run that is not stopped would spin for an hour (its time limit
//! here), so a missing stop fails the test rather than passing slowly.

use std::time::{Duration, Instant};

use csx_host::proto::{CommandId, EngineKind, MemHandle, ProgramIndex, Status};
use csx_host::{CallError, Device, ExecuteRequest};

use crate::programs::load;
use crate::{Fixture, ENGINES};

/// Writes the device file named by its parameter bytes, then spins until stopped: the
/// file says it runs.
const SPIN_MARKED: &str = r#"
extern long csx_file_write(const char *path, unsigned long path_len, unsigned long offset,
                           const void *src, unsigned long len);
ENTRY(spin_marked) {
    csx_file_write((const char *)args->params, args->params_len, 0, args->params,
                   args->params_len);
    volatile u64 i = 0;
    for (;;) i++;
    return i;
}"#;

/// The time limit of runs that only an abort should stop.
const HOUR_MS: u32 = 3_600_000;

/// How long a test waits for something that happens at once when the device is right.
const PATIENCE: Duration = Duration::from_secs(60);

/// A spin over window `mem` that only an abort stops; it writes the device file
/// `marker` when it starts.
fn spin(pind: ProgramIndex, mem: MemHandle, marker: &str) -> ExecuteRequest {
    ExecuteRequest::new(pind)
        .window(mem, 0, 64)
        .params(marker.as_bytes().to_vec())
        .fuel(csx_host::proto::limits::FUEL_MAX)
        .time_limit_ms(HOUR_MS)
}

/// Waits until the spin that writes `marker` runs.
fn wait_running(dev: &Device, marker: &str) {
    let start = Instant::now();
    loop {
        match dev.stat(marker) {
            Ok(_) => return,
            Err(CallError::NotFound(_)) => {}
            Err(e) => panic!("looking for {marker}: {e}"),
        }
        assert!(start.elapsed() < PATIENCE, "the execution never started");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The error an aborted execution ends with, after waiting for it.
fn aborted(dev: &Device, id: CommandId) -> CallError {
    match dev.wait_execute(id, Some(PATIENCE)) {
        Err(e @ CallError::Aborted(_)) => e,
        other => panic!("expected an aborted execution, got {other:?}"),
    }
}

/// A spin aborted while it runs stops, completes with Aborted naming the pc, and frees
/// its window and its slot.
fn abort_a_running_spin(f: &mut Fixture) {
    let dev = f.dev();
    let mem = dev.alloc(64).unwrap();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let pind = load(f, SPIN_MARKED, engine);
        let marker = format!("/running/{engine:?}");
        let id = dev.submit_execute(&spin(pind, mem, &marker)).unwrap();
        wait_running(dev, &marker);
        assert!(dev.abort(id).unwrap(), "the execution was in flight");
        let e = aborted(dev, id);
        let detail = e.detail().expect("an aborted run says why").message.clone();
        assert!(
            detail.starts_with("aborted by an abort command at pc "),
            "{engine:?}: {detail}"
        );
        // The window and the program are free again.
        dev.read_mem(mem, 0, 1).unwrap();
        dev.unload(pind).unwrap();
    }
    dev.free(mem).unwrap();
}

/// With every engine spinning, an execution waits in the queue; aborted there, it
/// completes at once, without ever running.
fn abort_a_queued_execution(f: &mut Fixture) {
    let dev = f.dev();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let pind = load(f, SPIN_MARKED, engine);
        let mut spinning = Vec::new();
        for i in 0..ENGINES {
            let mem = dev.alloc(64).unwrap();
            let marker = format!("/running/{engine:?}/{i}");
            spinning.push((dev.submit_execute(&spin(pind, mem, &marker)).unwrap(), mem));
            wait_running(dev, &marker);
        }
        let queued_mem = dev.alloc(64).unwrap();
        let queued_marker = format!("/running/{engine:?}/queued");
        let queued = dev
            .submit_execute(&spin(pind, queued_mem, &queued_marker))
            .unwrap();
        assert!(dev.abort(queued).unwrap());
        // It completes while every engine still spins: taken out of the queue.
        let e = aborted(dev, queued);
        assert_eq!(
            e.detail().unwrap().message,
            "aborted by an abort command before it ran"
        );
        for &(id, _) in &spinning {
            assert!(dev.abort(id).unwrap());
        }
        for (id, mem) in spinning {
            aborted(dev, id);
            dev.free(mem).unwrap();
        }
        dev.free(queued_mem).unwrap();
        assert!(
            matches!(dev.stat(&queued_marker), Err(CallError::NotFound(_))),
            "the aborted execution never ran"
        );
        dev.unload(pind).unwrap();
    }
}

/// A program aborted before it ran (microseconds) must not look short to the device: a
/// short Execute runs inline on the tcp or shm transport's thread, which then reads no
/// Abort until the run ends. The queued run here is aborted behind spins of another
/// slot; the next run of its slot, alone in flight, must still stop at its Abort (with
/// the old rule it ran inline over tcp and shm, and this test failed at its 30 s time
/// limit: the csAbortRequest flake of the C API).
fn abort_reaches_the_next_run_of_a_slot_aborted_before_it_ran(f: &mut Fixture) {
    let dev = f.dev();
    let blocker = load(f, SPIN_MARKED, EngineKind::Jit);
    let pind = load(f, SPIN_MARKED, EngineKind::Jit);
    let mut spinning = Vec::new();
    for i in 0..ENGINES {
        let mem = dev.alloc(64).unwrap();
        let marker = format!("/blocking/{i}");
        spinning.push((
            dev.submit_execute(&spin(blocker, mem, &marker)).unwrap(),
            mem,
        ));
        wait_running(dev, &marker);
    }
    let mem = dev.alloc(64).unwrap();
    let queued = dev.submit_execute(&spin(pind, mem, "/queued")).unwrap();
    assert!(dev.abort(queued).unwrap());
    let e = aborted(dev, queued);
    assert_eq!(
        e.detail().unwrap().message,
        "aborted by an abort command before it ran"
    );
    for &(id, _) in &spinning {
        assert!(dev.abort(id).unwrap());
    }
    for (id, blocker_mem) in spinning {
        aborted(dev, id);
        dev.free(blocker_mem).unwrap();
    }
    // Alone in flight, every engine idle. A time limit well under an hour: a run out of
    // the Abort's reach fails this test at its limit instead of hanging it.
    let next = dev
        .submit_execute(&spin(pind, mem, "/next").time_limit_ms(30_000))
        .unwrap();
    wait_running(dev, "/next");
    assert!(dev.abort(next).unwrap(), "the run was still in flight");
    let e = aborted(dev, next);
    assert!(
        e.detail()
            .unwrap()
            .message
            .starts_with("aborted by an abort command at pc "),
        "{e}"
    );
    dev.free(mem).unwrap();
    dev.unload(pind).unwrap();
    dev.unload(blocker).unwrap();
}

/// Abort of an id with no execution in flight is answered, not refused: `false`.
fn abort_an_unknown_id(f: &mut Fixture) {
    let dev = f.dev();
    assert!(!dev.abort(CommandId(u64::MAX)).unwrap());
    // A finished execution's id is no longer in flight either.
    let pind = load(f, crate::programs::SPIN, EngineKind::Jit);
    let id = dev
        .submit_execute(&ExecuteRequest::new(pind).fuel(1000))
        .unwrap();
    let run = dev.wait_execute(id, None).unwrap().expect("completes");
    assert_eq!(run.status, Status::Trap);
    assert!(!dev.abort(id).unwrap());
    dev.unload(pind).unwrap();
}

/// A client that closes with executions running and queued: they are aborted, so its
/// device memory comes back and the program's slot is free, without waiting for them.
fn closing_a_client_aborts_its_executions(f: &mut Fixture) {
    let dev = f.dev();
    let free_before = dev.identify().unwrap().slm_free_bytes;
    let pind = load(f, SPIN_MARKED, EngineKind::Jit);
    let other = f.open();
    // More executions than engines: some run, the rest wait in the queue.
    for i in 0..ENGINES + 2 {
        let mem = other.alloc(64).unwrap();
        let marker = format!("/running/{i}");
        other.submit_execute(&spin(pind, mem, &marker)).unwrap();
        if i == 0 {
            wait_running(&other, &marker);
        }
    }
    assert!(dev.identify().unwrap().slm_free_bytes < free_before);
    // The program is running, so its slot cannot be emptied.
    assert!(matches!(dev.unload(pind), Err(CallError::ProgramInUse(_))));
    let closing = std::thread::spawn(move || other.close());
    let start = Instant::now();
    while dev.identify().unwrap().slm_free_bytes != free_before {
        assert!(
            start.elapsed() < PATIENCE,
            "the closed client's memory never came back"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Close returns (an abandoned execution no longer holds it up) and the slot is free.
    closing.join().unwrap().unwrap();
    let start = Instant::now();
    loop {
        match dev.unload(pind) {
            Ok(()) => break,
            Err(CallError::ProgramInUse(_)) if start.elapsed() < PATIENCE => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("unloading after the client closed: {e}"),
        }
    }
}

/// A run past its time limit stops with TimeLimitExceeded naming the limit, on both
/// engines, whatever its fuel.
fn time_limit_stops_a_spin(f: &mut Fixture) {
    let dev = f.dev();
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let pind = load(f, crate::programs::SPIN, engine);
        let req = ExecuteRequest::new(pind)
            .fuel(csx_host::proto::limits::FUEL_MAX)
            .time_limit_ms(20);
        match dev.execute(&req) {
            Err(e @ CallError::TimeLimitExceeded(_)) => {
                let message = &e.detail().unwrap().message;
                assert!(
                    message.starts_with("ran past its time limit of 20 ms: stopped at pc "),
                    "{message}"
                );
            }
            other => panic!("{engine:?}: expected the time limit, got {other:?}"),
        }
        dev.unload(pind).unwrap();
    }
    // Out of range: refused before submission, naming the limit.
    let e = dev
        .execute(&ExecuteRequest::new(ProgramIndex(0)).time_limit_ms(0))
        .unwrap_err();
    assert!(matches!(e, CallError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("3600000"), "{e}");
}

crate::backend_tests!(
    abort_a_running_spin,
    abort_a_queued_execution,
    abort_reaches_the_next_run_of_a_slot_aborted_before_it_ran,
    abort_an_unknown_id,
    closing_a_client_aborts_its_executions,
    time_limit_stops_a_spin,
);
