//! An Execute the daemon runs inline on a connection's own thread (its slot's last run
//! was short) is still aborted promptly when this run is long: the transport frees a
//! reader when the run outlasts its leash, which reads the Abort.

use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::{EngineKind, ProgramType};
use csx_host::{CallError, Device, ExecuteRequest};
use csx_server::{ListenAddr, Server, ServerConfig};
use csx_testkit::programs::COUNT_DOWN;

/// The long run's time limit: only an Abort that is never read waits for it.
const TIME_LIMIT_MS: u32 = 60_000;

/// Far below the time limit, far above an Abort's round trip on a loaded machine.
const ABORT_BOUND: Duration = Duration::from_secs(10);

fn serve(listen: ListenAddr) -> (tempfile::TempDir, Server) {
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
            listen: vec![listen],
            token: None,
        },
    )
    .expect("serves");
    (dir, server)
}

/// Short runs make the slot look short (so its next Execute runs inline); the next run
/// is long and gets aborted: its Abort is answered and the run stops well within
/// [`ABORT_BOUND`], not at its time limit. Twice, on the same connection, on both
/// engines.
fn short_then_long_is_aborted(uri: &str) {
    let dev = Device::open(uri).expect("connects");
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        let pind = dev
            .load_program_any_slot(ProgramType::Raw, &COUNT_DOWN, None)
            .expect("loads");
        dev.activate(pind, engine).expect("activates");
        for round in 0..2 {
            for _ in 0..3 {
                let short = dev
                    .execute(&ExecuteRequest::new(pind).cparams(10, 0))
                    .expect("a short run");
                assert_eq!(short.r0, 0);
            }
            let long = ExecuteRequest::new(pind)
                .cparams(u64::MAX, 0)
                .fuel(csx_host::proto::limits::FUEL_MAX)
                .time_limit_ms(TIME_LIMIT_MS);
            let id = dev.submit_execute(&long).expect("submits");
            // Let it run past the leash (and the connection thread be inside it).
            std::thread::sleep(Duration::from_millis(50));
            let asked = Instant::now();
            let in_flight = dev.abort(id).expect("abort answered");
            let answered = asked.elapsed();
            let result = dev.wait_execute(id, Some(Duration::from_secs(120)));
            let stopped = asked.elapsed();
            assert!(
                answered < ABORT_BOUND && stopped < ABORT_BOUND,
                "{uri} {engine:?} round {round}: the Abort was answered after {answered:?} \
                 and the run stopped after {stopped:?}, limit {ABORT_BOUND:?} \
                 (the time limit is {TIME_LIMIT_MS} ms): {result:?}"
            );
            assert!(
                in_flight,
                "{uri} {engine:?} round {round}: the run had ended"
            );
            assert!(
                matches!(result, Err(CallError::Aborted(_))),
                "{uri} {engine:?} round {round}: {result:?} after {stopped:?}"
            );
        }
        dev.deactivate(pind).expect("deactivates");
        dev.unload(pind).expect("unloads");
    }
}

#[test]
fn an_inline_run_is_aborted_promptly_over_tcp() {
    let (_dir, server) = serve(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()));
    short_then_long_is_aborted(&server.uris()[0].clone());
    server.shutdown().expect("shuts down");
}

#[test]
fn an_inline_run_is_aborted_promptly_over_shm() {
    let name = format!("csx-inline-abort-{}", std::process::id());
    let (_dir, server) = serve(ListenAddr::Shm(name));
    short_then_long_is_aborted(&server.uris()[0].clone());
    server.shutdown().expect("shuts down");
}
