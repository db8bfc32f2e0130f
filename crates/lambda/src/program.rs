//! [`Lambda`]: one eBPF object file, loaded on both sides: into a device program slot
//! (activated on the device's JIT) for the device side, and verified and compiled by the
//! host's JIT (`csx-ebpf-jit`, tiered: quick code at once, Cranelift's when ready)
//! against the device's function table for the host side. The device slot is held by a
//! [`Session`]: it is unloaded when the λ is unloaded or dropped, also after an error or
//! in a panic.

use std::sync::Arc;
use std::time::Instant;

use csx_device::offload::{run_on_windows, CallContext, RunCall};
use csx_ebpf::count::{ExecCounts, WorkCounts};
use csx_ebpf::engine::{Engine, RunOutcome, StopFlag};
use csx_proto::{EngineKind, ProgramIndex};

use super::LambdaError;
use csx_host::session::Session;
use csx_host::{program_type_of, Device};

/// An execution's scalars for one λ request (what `struct csx_args` carries besides the
/// windows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LambdaArgs {
    pub cparam1: u64,
    pub cparam2: u64,
    pub params: Vec<u8>,
    /// Bytes of the output window; `None`: as large as the input (λ-IO's default).
    pub output_size_bytes: Option<u64>,
    /// Fuel budget per run; `None`: the VM default.
    pub fuel: Option<u64>,
}

/// A λ loaded on both sides (see the module doc).
pub struct Lambda<'d> {
    name: String,
    pind: ProgramIndex,
    host_engine: Arc<dyn Engine>,
    /// Holds the device slot.
    session: Session<'d>,
}

impl std::fmt::Debug for Lambda<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lambda")
            .field("name", &self.name)
            .field("pind", &self.pind)
            .finish_non_exhaustive()
    }
}

impl<'d> Lambda<'d> {
    /// Loads `image` (an ELF object or raw bytecode) into a free slot of `dev`, activates
    /// it on the device's JIT (its interpreter when the device has no JIT), and compiles
    /// it on the host. `name` keys the dispatcher's profile of this λ.
    pub fn load(
        dev: &'d Device,
        name: &str,
        image: &[u8],
        entry: Option<&str>,
    ) -> Result<Lambda<'d>, LambdaError> {
        // First, the host side: a program the device would refuse is refused here too,
        // with the verifier's reason, before a slot is taken.
        let host_engine = host_engine(name, image, entry)?;
        // Then, the device side; a failure past the load drops the session, which
        // unloads the slot.
        let mut session = Session::new(dev);
        let pind = session.load_program_entry(name, entry, program_type_of(image), image)?;
        let engine = if dev.identify()?.jit {
            EngineKind::Jit
        } else {
            EngineKind::Interpreter
        };
        session.activate(pind, engine)?;
        Ok(Lambda {
            name: name.to_string(),
            pind,
            host_engine,
            session,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device slot.
    pub fn pind(&self) -> ProgramIndex {
        self.pind
    }

    /// Frees the device slot (dropping the λ frees it too, without reporting a
    /// failure).
    pub fn unload(self) -> Result<(), LambdaError> {
        self.session.close()?;
        Ok(())
    }

    /// Runs the λ on the host over `input` and `output` (windows 0 and 1), through the
    /// device's own execution path (`csx_device::execute::run_on_windows`), without a
    /// shared state (r4 = 0) and without device files; with the work it executed
    /// (`csx_ebpf::count`), which the host side's modelled compute is priced from.
    pub(crate) fn run_host(
        &self,
        input: &mut [u8],
        output: &mut [u8],
        args: &LambdaArgs,
        stop: &StopFlag,
    ) -> (RunOutcome, WorkCounts) {
        run_counted(self.host_engine.as_ref(), input, output, args, Some(stop))
    }
}

/// The host side of λ `name`: `image` (an ELF object, `entry` its function, or raw
/// bytecode) loaded and verified against the device's function table, then compiled by
/// the host JIT, tiered as the device's (the quick tier's code runs at once,
/// Cranelift's takes over when its background compile lands), every run counting its
/// work. A program the device would refuse is `LambdaError::Load` with the reason.
pub fn host_engine(
    name: &str,
    image: &[u8],
    entry: Option<&str>,
) -> Result<Arc<dyn Engine>, LambdaError> {
    let load_error = |reason: String| LambdaError::Load {
        lambda: name.to_string(),
        reason,
    };
    let table = csx_device::offload::function_table();
    let program = match program_type_of(image) {
        csx_proto::ProgramType::Elf => csx_ebpf::loader::load_elf(image, entry, &table),
        _ => csx_ebpf::loader::load_raw(name, image),
    }
    .map_err(|e| load_error(e.to_string()))?;
    let verified = csx_ebpf::verifier::verify(program, Arc::new(table))
        .map_err(|e| load_error(e.to_string()))?;
    let jit = csx_ebpf_jit::TieredProgram::with_counting(
        Arc::new(verified),
        csx_ebpf_jit::Promotion::Background,
        true,
    )
    .map_err(|e| load_error(e.to_string()))?;
    Ok(Arc::new(jit))
}

/// Runs `engine` on the host over `input` and `output` (windows 0 and 1), through the
/// device's own execution path (`csx_device::execute::run_on_windows`), without a
/// shared state (r4 = 0) and without device files; with the work it executed
/// (`csx_ebpf::count`), which the host side's modelled compute is priced from. `stop`
/// stops it at its next back-edge or call once set.
pub fn run_counted(
    engine: &dyn Engine,
    input: &mut [u8],
    output: &mut [u8],
    args: &LambdaArgs,
    stop: Option<&StopFlag>,
) -> (RunOutcome, WorkCounts) {
    let blocks = engine.program().blocks();
    let counts = ExecCounts::new(blocks);
    let call = RunCall {
        cparam1: args.cparam1,
        cparam2: args.cparam2,
        params: &args.params,
        fuel: args.fuel.unwrap_or(csx_ebpf::limits::FUEL_DEFAULT),
        stop,
        counts: Some(&counts),
    };
    let mut ctx = CallContext::without_files(Instant::now());
    let outcome = run_on_windows(
        engine,
        vec![input, output],
        |mem| {
            let addr = mem
                .map_read_write(csx_device::offload::STATE_REGION, &mut [])
                .expect("an empty region always maps");
            (addr, 0)
        },
        &call,
        &mut ctx,
    );
    (outcome, blocks.work(&counts.values()))
}
