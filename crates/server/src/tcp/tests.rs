//! The race at the end of an inline run, made deterministic: a test holds the connection
//! thread after its inline run has ended and before it takes the read side back, so the
//! helper is still reading when the client's next commands arrive. What the helper reads
//! then must never run on its own thread: a long run there would hold the read side, and
//! the run's Abort would go unread until its time limit (CI hit this once by timing).

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::{limits::FUEL_MAX, EngineKind, ProgramType};
use csx_host::{CallError, Device, ExecuteRequest};

use crate::{ListenAddr, Server, ServerConfig};
use csx_testkit::programs::COUNT_DOWN;

/// Whether a connection thread that has just ended an inline run waits before taking its
/// read side back, and how many times one waited.
static HOLD: Mutex<(bool, u32)> = Mutex::new((false, 0));
static RELEASED: Condvar = Condvar::new();

/// Where the connection thread waits while a test holds it (`Connection::run`), if the
/// helper was reading in its place (`helper_reading`: the read side is taken).
pub(super) fn hold_after_inline_run(helper_reading: bool) {
    let mut hold = HOLD.lock().unwrap_or_else(|p| p.into_inner());
    if !(helper_reading && hold.0) {
        return;
    }
    hold.1 += 1;
    while hold.0 {
        hold = RELEASED.wait(hold).unwrap_or_else(|p| p.into_inner());
    }
}

fn times_held() -> u32 {
    HOLD.lock().unwrap_or_else(|p| p.into_inner()).1
}

/// Holds connection threads after their inline runs until dropped (also on a panic, so
/// the server can shut down).
struct Hold;

impl Hold {
    fn start() -> Hold {
        HOLD.lock().unwrap_or_else(|p| p.into_inner()).0 = true;
        Hold
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        HOLD.lock().unwrap_or_else(|p| p.into_inner()).0 = false;
        RELEASED.notify_all();
    }
}

/// A long run's time limit: an Abort that goes unread lets the run reach it, and the
/// run's result says so.
const TIME_LIMIT_MS: u32 = 20_000;

fn long_run(pind: csx_host::proto::ProgramIndex) -> ExecuteRequest {
    ExecuteRequest::new(pind)
        .cparams(u64::MAX, 0)
        .fuel(FUEL_MAX)
        .time_limit_ms(TIME_LIMIT_MS)
}

fn short_runs(dev: &Device, pind: csx_host::proto::ProgramIndex, what: &str) {
    for _ in 0..3 {
        let short = dev
            .execute(&ExecuteRequest::new(pind).cparams(10, 0))
            .unwrap_or_else(|e| panic!("{what}: a short run failed: {e}"));
        assert_eq!(short.r0, 0, "{what}");
    }
}

/// How many times the test sets its scene up before it gives up.
const ATTEMPTS: usize = 8;

/// Aborts a long run inline, holds the connection thread from its end, and aborts a
/// second long run submitted meanwhile: both are aborted while they run.
fn abort_while_held(dev: &Device, pind: csx_host::proto::ProgramIndex) {
    // Short runs make the slot look short, so the long one runs inline on the
    // connection thread; past its leash the helper reads in its place.
    short_runs(dev, pind, "before");
    let first = dev.submit_execute(&long_run(pind)).expect("submits");
    std::thread::sleep(Duration::from_millis(50));
    let (first_in_flight, first_result, second_in_flight, second_result) = {
        // From the first run's end, the connection thread keeps the read side lent.
        let _hold = Hold::start();
        let in_flight = dev.abort(first).expect("the first Abort is answered");
        let first_result = dev.wait_execute(first, Some(Duration::from_secs(120)));
        // The helper reads these: the short runs make the slot look short again, so a
        // helper that ran what it read inline would run the long one on its own thread.
        short_runs(dev, pind, "while held");
        let second = dev.submit_execute(&long_run(pind)).expect("submits");
        std::thread::sleep(Duration::from_millis(50));
        let second_in_flight = dev.abort(second).expect("the second Abort is answered");
        let second_result = dev.wait_execute(second, Some(Duration::from_secs(120)));
        (in_flight, first_result, second_in_flight, second_result)
    };
    assert!(first_in_flight, "the first run had ended: {first_result:?}");
    assert!(
        matches!(first_result, Err(CallError::Aborted(_))),
        "the first run: {first_result:?}"
    );
    assert!(
        second_in_flight && matches!(second_result, Err(CallError::Aborted(_))),
        "the second run was not aborted while it ran (in flight when aborted: \
         {second_in_flight}): {second_result:?}"
    );
}

#[test]
fn what_the_helper_reads_after_an_inline_run_never_runs_on_its_thread() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: 4 << 20,
        slm_size_bytes: 4 << 20,
        state_size_bytes: 4096,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let device = DeviceRuntime::init(dir.path(), config).expect("init");
    let server = Server::start(
        device,
        ServerConfig {
            listen: vec![ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())],
            token: None,
        },
    )
    .expect("serves");
    let dev = Device::open(&server.uris()[0].clone()).expect("connects");
    let pind = dev
        .load_program_any_slot(ProgramType::Raw, &COUNT_DOWN, None)
        .expect("loads");
    dev.activate(pind, EngineKind::Interpreter)
        .expect("activates");

    // The scenario needs the first long run inline and past its leash; on a loaded
    // machine the slot may not look short enough, so it is tried again.
    for _ in 0..ATTEMPTS {
        abort_while_held(&dev, pind);
        if times_held() > 0 {
            break;
        }
    }
    assert!(
        times_held() > 0,
        "in {ATTEMPTS} attempts no long run ran inline past its leash"
    );
    short_runs(&dev, pind, "after");
    drop(dev);
    server.shutdown().expect("shuts down");
}
