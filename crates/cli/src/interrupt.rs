//! Ctrl-C for commands that run programs on a device (`csx exec`, `csx read`): the first
//! SIGINT aborts what the command started there (an Abort of its execution, which then
//! completes as aborted; for `csx read`, the λ-IO handle's stop flag, which aborts its
//! device runs and stops its host runs), so the command still frees what it allocated
//! and exits with [`exit::INTERRUPTED`]; a second SIGINT ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use csx_ebpf::engine::StopFlag;
use csx_host::{CallError, Device, ExecuteRequest, Execution};

use crate::exit;

/// How often a waiting command looks for Ctrl-C.
const POLL: Duration = Duration::from_millis(10);

/// After this long a command says, on standard error, that Ctrl-C stops the program.
pub const NOTICE_AFTER: Duration = Duration::from_secs(1);

/// The first line a command prints when its program runs for [`NOTICE_AFTER`].
pub const NOTICE: &str = "the program is still running on the device; Ctrl-C aborts it";

/// Whether Ctrl-C was pressed since [`Interrupt::install`].
#[derive(Debug, Clone)]
pub struct Interrupt {
    pressed: Arc<AtomicBool>,
}

impl Interrupt {
    /// Takes over SIGINT, SIGTERM and SIGHUP (a `timeout`, a closed terminal) for the
    /// rest of the process: each stops what the command started on the device as Ctrl-C
    /// does. This only makes the ending tidier and quicker: the device unloads a
    /// command's programs and frees its memory when its connection goes, however the
    /// process ends (SIGKILL included).
    pub fn install() -> anyhow::Result<Interrupt> {
        let pressed = Arc::new(AtomicBool::new(false));
        for signal in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            // Runs before the flag is set: only a second signal finds it set.
            signal_hook::flag::register_conditional_shutdown(
                signal,
                i32::from(exit::INTERRUPTED),
                Arc::clone(&pressed),
            )
            .context("cannot install the Ctrl-C handler")?;
            signal_hook::flag::register(signal, Arc::clone(&pressed))
                .context("cannot install the Ctrl-C handler")?;
        }
        Ok(Interrupt { pressed })
    }

    /// Whether Ctrl-C was pressed.
    pub fn pressed(&self) -> bool {
        self.pressed.load(Ordering::Relaxed)
    }

    /// The flag Ctrl-C sets, for a library that looks at it itself (an array's λ read).
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.pressed)
    }

    /// Sets `flag` (a λ-IO handle's, say) when Ctrl-C is pressed, from a thread that
    /// looks every [`POLL`].
    pub fn forward_to(&self, flag: Arc<StopFlag>) {
        let pressed = Arc::clone(&self.pressed);
        std::thread::spawn(move || loop {
            if pressed.load(Ordering::Relaxed) {
                flag.stop(1);
                return;
            }
            std::thread::sleep(POLL);
        });
    }

    /// Runs `request` on `dev` and waits for it; Ctrl-C aborts it on the device (the
    /// result is then [`CallError::Aborted`]). Pressed before the run starts, the run is
    /// not started.
    pub fn execute(&self, dev: &Device, request: &ExecuteRequest) -> Result<Execution, CallError> {
        if self.pressed() {
            return Err(interrupted_before());
        }
        let id = dev.submit_execute(request)?;
        let start = Instant::now();
        let mut noticed = false;
        let mut aborted = false;
        loop {
            if let Some(run) = dev.wait_execute(id, Some(POLL))? {
                return Ok(run);
            }
            if self.pressed() && !aborted {
                eprintln!("csx: interrupted; aborting the program on the device");
                dev.abort(id)?;
                aborted = true;
            }
            if !noticed && start.elapsed() >= NOTICE_AFTER {
                eprintln!("csx: {NOTICE}");
                noticed = true;
            }
        }
    }
}

/// The error of a run Ctrl-C kept from starting.
fn interrupted_before() -> CallError {
    CallError::Aborted(Box::new(csx_host::DeviceFailure {
        op: "execute",
        status: csx_host::proto::Status::Aborted,
        detail: Some(csx_host::proto::ErrorDetail::new(
            "csx",
            0,
            "interrupted before the program started",
        )),
        trap: None,
    }))
}
