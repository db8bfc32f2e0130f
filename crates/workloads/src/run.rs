//! Running workloads on a device through the host API.
//!
//! A [`Runner`] loads and activates each program once per engine and keeps it (in a
//! `csx_host::Session`), then [`Runner::run`] carries out one [`Case`] in the
//! workload's [`Shape`]: allocate the windows, stage the input file into device
//! memory with a Memory Copy (no trip through the host), execute, read the answer
//! back, free the windows. The result
//! carries the answer, every execution's timing and the bytes that crossed to the host,
//! which is what the demo and the benchmarks report.
//!
//! Every run also carries its [`Phases`], Delilah's latency breakdown: program load,
//! activation (verify + JIT compile), staging the input (media → device memory),
//! execution and returning the answer to the host, each in wall time on the host and
//! in the device's modelled time (`Timing::modelled_ns` of the completions). The load
//! and activation phases count only in the run that loaded the program: a runner
//! keeps programs loaded, so call [`Runner::unload_all`] between runs to time them
//! every time. [`read_file_timed`] is the host's side of the same comparison: the
//! input read from the device file to the host.

use std::collections::HashMap;
use std::time::Instant;

use csx_host::session::{Meter, Session, SessionError};
use csx_host::{CallError, Device, ExecuteRequest, Execution};
use csx_proto::limits::{FILE_IO_SIZE_MAX, FUEL_MAX, TIME_LIMIT_MS_MAX};
use csx_proto::{
    Completion, EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply, Timing, WireTrap,
};

use crate::compile::BuildError;
use crate::reference::Stats;
use crate::workloads::{chain_second_invocation, Case, Invocation, Outcome, Shape, Workload};

/// Why a workload could not be run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("building {program}: {source}")]
    Build { program: String, source: BuildError },
    #[error("{step} for {program}: {source}")]
    Device {
        program: String,
        step: &'static str,
        source: CallError,
    },
    #[error("{program} trapped: {trap:?}")]
    Trap { program: String, trap: WireTrap },
    #[error("{step} for {program}: {source}")]
    Session {
        program: String,
        step: &'static str,
        source: Box<SessionError>,
    },
}

/// One workload run on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRun {
    pub outcome: Outcome,
    /// Each execution's timing, in order (two for a chain).
    pub timings: Vec<Timing>,
    /// Bytes that crossed to the host: r0 and the answer read back (for `WriteFile`,
    /// r0 only: the answer is a device file).
    pub host_bytes: u64,
    /// Fuel used by all executions.
    pub fuel_used: u64,
    /// Where the time went (see the module doc).
    pub phases: Phases,
}

/// One phase's time: wall time measured on the host around the commands, and the
/// device's modelled time (the sum of their completions' `modelled_ns`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTime {
    pub wall_ns: u64,
    pub modelled_ns: u64,
}

impl PhaseTime {
    fn add_completion(&mut self, started: Instant, c: &Completion) {
        self.wall_ns += elapsed_ns(started);
        self.modelled_ns += c.timing.modelled_ns;
    }

    /// The wall time since `started` and the modelled time the session's meter added
    /// since `at` (data path and set-up).
    fn since(started: Instant, at: &Meter, s: &Session) -> PhaseTime {
        let d = s.meter.since(at);
        PhaseTime {
            wall_ns: elapsed_ns(started),
            modelled_ns: d.modelled_ns + d.setup_ns,
        }
    }

    /// Both times summed.
    pub fn plus(self, other: PhaseTime) -> PhaseTime {
        PhaseTime {
            wall_ns: self.wall_ns + other.wall_ns,
            modelled_ns: self.modelled_ns + other.modelled_ns,
        }
    }
}

/// Delilah's latency breakdown of one device run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    /// Program load (the image over the link into a slot); zero when already loaded.
    pub load: PhaseTime,
    /// Activation: verification and, for the JIT, compilation; zero when already active.
    pub activate: PhaseTime,
    /// Staging the input from the media into device memory: a Memory Copy, or for
    /// [`Shape::ReadFile`] the program's own `csx_file_read` (its transfer time as the
    /// device measured it; not modelled, see `csx_device::perf`).
    pub stage: PhaseTime,
    /// The execution(s), staging by the program excluded.
    pub execute: PhaseTime,
    /// The answer read back to the host (r0 only when the answer is a device file).
    pub result: PhaseTime,
    /// The part of `activate` the device spent verifying and compiling, as it measured
    /// it (`Timing::prepare_ns`); the rest is the command's round trip and persisting
    /// the slot's state.
    pub prepare_ns: u64,
}

impl Phases {
    /// The phases in order, with their names.
    pub fn named(&self) -> [(&'static str, PhaseTime); 5] {
        [
            ("load", self.load),
            ("activate", self.activate),
            ("stage", self.stage),
            ("execute", self.execute),
            ("result", self.result),
        ]
    }

    /// Every phase summed.
    pub fn total(&self) -> PhaseTime {
        self.named()
            .iter()
            .fold(PhaseTime::default(), |a, (_, p)| a.plus(*p))
    }

    /// Staging, execution and result: the work of one request once the program is
    /// active on the device.
    pub fn request(&self) -> PhaseTime {
        self.stage.plus(self.execute).plus(self.result)
    }
}

/// Workloads run on one device (see the module doc): the programs stay loaded in its
/// session between runs, each run's memory is freed at the run's end.
#[derive(Debug)]
pub struct Runner<'d> {
    dev: &'d Device,
    session: Session<'d>,
    loaded: HashMap<(String, EngineKind), ProgramIndex>,
    /// Load and activation time of programs loaded since the last run began.
    pending: Phases,
}

/// A session's failure as a run's, naming the program and the step.
fn failed<'a>(program: &'a str, step: &'static str) -> impl FnOnce(SessionError) -> RunError + 'a {
    move |e| match e {
        SessionError::Device { source, .. } => RunError::Device {
            program: program.to_string(),
            step,
            source,
        },
        SessionError::Trap { trap, .. } => RunError::Trap {
            program: program.to_string(),
            trap,
        },
        other => RunError::Session {
            program: program.to_string(),
            step,
            source: Box::new(other),
        },
    }
}

impl<'d> Runner<'d> {
    /// A runner on `dev`; the SDK programs it loads are the ones embedded at build
    /// time ([`crate::compile::program`]).
    pub fn new(dev: &'d Device) -> Runner<'d> {
        Runner {
            dev,
            session: Session::new(dev),
            loaded: HashMap::new(),
            pending: Phases::default(),
        }
    }

    pub fn device(&self) -> &'d Device {
        self.dev
    }

    /// The slot of `program` activated for `engine`, loading it the first time.
    pub fn program(&mut self, program: &str, engine: EngineKind) -> Result<ProgramIndex, RunError> {
        if let Some(&pind) = self.loaded.get(&(program.to_string(), engine)) {
            return Ok(pind);
        }
        let object = crate::compile::program(program).map_err(|source| RunError::Build {
            program: program.to_string(),
            source,
        })?;
        let s = &mut self.session;
        let (started, at) = (Instant::now(), s.meter);
        let pind = s
            .load_program(program, ProgramType::Elf, object)
            .map_err(failed(program, "load"))?;
        self.pending.load = self.pending.load.plus(PhaseTime::since(started, &at, s));
        let (started, at) = (Instant::now(), s.meter);
        s.activate(pind, engine)
            .map_err(failed(program, "activate"))?;
        self.pending.activate = self
            .pending
            .activate
            .plus(PhaseTime::since(started, &at, s));
        self.pending.prepare_ns += s.meter.since(&at).prepare_ns;
        self.loaded.insert((program.to_string(), engine), pind);
        Ok(pind)
    }

    /// Unloads every program this runner loaded.
    pub fn unload_all(&mut self) -> Result<(), SessionError> {
        self.loaded.clear();
        self.session.unload_all()
    }

    /// Unloads every program and frees all memory; what the runner's commands cost.
    pub fn close(self) -> Result<Meter, SessionError> {
        self.session.close()
    }

    /// Runs `workload` over the case's input file (already on the device) with the
    /// given set-up, on `engine`.
    pub fn run(
        &mut self,
        workload: &Workload,
        case: &Case,
        inv: &Invocation,
        engine: EngineKind,
    ) -> Result<DeviceRun, RunError> {
        let first = workload.programs[0];
        self.pending = Phases::default();
        let result = self.run_shape(workload, case, inv, engine);
        let freed = self
            .session
            .free_all()
            .map_err(failed(first, "free device memory"));
        let mut run = result?;
        freed?;
        run.phases.load = self.pending.load;
        run.phases.activate = self.pending.activate;
        run.phases.prepare_ns = self.pending.prepare_ns;
        Ok(run)
    }

    fn alloc(&mut self, program: &str, bytes: u64) -> Result<MemHandle, RunError> {
        self.session
            .alloc(bytes)
            .map_err(failed(program, "allocate device memory"))
    }

    fn run_shape(
        &mut self,
        workload: &Workload,
        case: &Case,
        inv: &Invocation,
        engine: EngineKind,
    ) -> Result<DeviceRun, RunError> {
        let first = workload.programs[0];
        let pind = self.program(first, engine)?;
        let mut request = ExecuteRequest::new(pind)
            .cparams(inv.cparam1, inv.cparam2)
            .params(inv.params.clone());

        if workload.shape == Shape::ReadFile {
            let dst = self.alloc(first, inv.output_size_bytes)?;
            request = request.window(dst, 0, inv.output_size_bytes);
            let (exec, mut phases) = self.execute(first, &request)?;
            // The program stages its input itself: its file I/O is the transfer part.
            let staged_ns = exec.timing.transfer_ns.min(phases.execute.wall_ns);
            phases.stage.wall_ns = staged_ns;
            phases.execute.wall_ns -= staged_ns;
            let (output, result) = self.read_answer(first, dst, &exec, "read window 0")?;
            phases.result = result;
            return Ok(DeviceRun::one(&exec, output, phases));
        }

        let input = self.alloc(first, case.input_size_bytes)?;
        let (started, at) = (Instant::now(), self.session.meter);
        self.session
            .copy_file(&case.input_path, 0, case.input_size_bytes, input, 0)
            .map_err(failed(first, "stage the input"))?;
        let stage = PhaseTime::since(started, &at, &self.session);
        request = request.window(input, 0, case.input_size_bytes);
        let out = if inv.output_size_bytes > 0 {
            let out = self.alloc(first, inv.output_size_bytes)?;
            request = request.window(out, 0, inv.output_size_bytes);
            Some(out)
        } else {
            None
        };
        let (exec, mut phases) = self.execute(first, &request)?;
        phases.stage = stage;
        let r0 = exec.r0_signed();
        match (workload.shape, out) {
            (Shape::WriteFile, _) if r0 >= 0 && !inv.params.is_empty() => {
                let path = std::str::from_utf8(&inv.params).unwrap_or_default();
                // Not a phase: the file is read back here to be compared, which a real
                // workload would not do.
                let output = self
                    .session
                    .read_file(path, inv.cparam1, r0 as u64)
                    .map_err(failed(first, "read the output file"))?;
                let mut run = DeviceRun::one(&exec, output, phases);
                // The answer stays on the device; only r0 crosses to the host.
                run.host_bytes = 8;
                Ok(run)
            }
            (Shape::Chain, Some(out)) if r0 >= 0 => {
                self.run_chain_second(workload, engine, exec, phases, out)
            }
            (_, Some(out)) => {
                let (output, result) = self.read_answer(first, out, &exec, "read window 1")?;
                phases.result = result;
                Ok(DeviceRun::one(&exec, output, phases))
            }
            (_, None) => Ok(DeviceRun::one(&exec, Vec::new(), phases)),
        }
    }

    /// The second stage of a chain: the first's output window, cut to its r0 bytes,
    /// becomes window 0.
    fn run_chain_second(
        &mut self,
        workload: &Workload,
        engine: EngineKind,
        first: Execution,
        first_phases: Phases,
        first_out: MemHandle,
    ) -> Result<DeviceRun, RunError> {
        let second = workload.programs[1];
        let inv = chain_second_invocation();
        let selected = first.r0;
        if selected == 0 {
            // Nothing selected: no window to pass, so the host answers for the second
            // stage (its reference over no input).
            let mut run = DeviceRun::one(&first, Stats::EMPTY.to_bytes(), first_phases);
            run.outcome.r0 = inv.output_size_bytes as i64;
            return Ok(run);
        }
        let pind = self.program(second, engine)?;
        let out = self.alloc(second, inv.output_size_bytes)?;
        let request = ExecuteRequest::new(pind)
            .window(first_out, 0, selected)
            .window(out, 0, inv.output_size_bytes);
        let (exec, second_phases) = self.execute(second, &request)?;
        let (output, result) = self.read_answer(second, out, &exec, "read window 1")?;
        let phases = Phases {
            execute: first_phases.execute.plus(second_phases.execute),
            result,
            ..first_phases
        };
        let mut run = DeviceRun::one(&exec, output, phases);
        run.timings.insert(0, first.timing);
        run.fuel_used += first.fuel_used;
        Ok(run)
    }

    /// Runs `request`; the phases carry its execute time (wall and modelled).
    fn execute(
        &mut self,
        program: &str,
        request: &ExecuteRequest,
    ) -> Result<(Execution, Phases), RunError> {
        // The workloads are our own programs over inputs of any size: they take the
        // most fuel and time the protocol allows, not the defaults meant for untrusted
        // programs.
        let mut request = request.clone();
        request.fuel.get_or_insert(FUEL_MAX);
        request.time_limit_ms.get_or_insert(TIME_LIMIT_MS_MAX);
        let started = Instant::now();
        let exec = self
            .session
            .execute(&request)
            .map_err(failed(program, "execute"))?;
        let phases = Phases {
            execute: PhaseTime {
                wall_ns: elapsed_ns(started),
                modelled_ns: exec.timing.modelled_ns,
            },
            ..Phases::default()
        };
        Ok((exec, phases))
    }

    /// The first r0 bytes of `handle` (nothing when r0 is an error code), with their
    /// time.
    fn read_answer(
        &mut self,
        program: &str,
        handle: MemHandle,
        exec: &Execution,
        step: &'static str,
    ) -> Result<(Vec<u8>, PhaseTime), RunError> {
        let r0 = exec.r0_signed();
        if r0 <= 0 {
            return Ok((Vec::new(), PhaseTime::default()));
        }
        let (started, at) = (Instant::now(), self.session.meter);
        let out = self
            .session
            .read(handle, 0, r0 as u64)
            .map_err(failed(program, step))?;
        Ok((out, PhaseTime::since(started, &at, &self.session)))
    }
}

impl DeviceRun {
    fn one(exec: &Execution, output: Vec<u8>, phases: Phases) -> DeviceRun {
        DeviceRun {
            phases,
            host_bytes: output.len() as u64 + 8,
            outcome: Outcome {
                r0: exec.r0_signed(),
                output,
            },
            timings: vec![exec.timing],
            fuel_used: exec.fuel_used,
        }
    }
}

/// Reads `len` bytes of the device file `path` to the host in File Reads of at most
/// `FILE_IO_SIZE_MAX`, with their time: the host's way of getting at the input.
pub fn read_file_timed(
    dev: &Device,
    path: &str,
    len: u64,
) -> Result<(Vec<u8>, PhaseTime), CallError> {
    let mut time = PhaseTime::default();
    let mut out = Vec::with_capacity(usize::try_from(len).expect("a read fits in memory"));
    while (out.len() as u64) < len {
        let offset = out.len() as u64;
        let chunk = (len - offset).min(FILE_IO_SIZE_MAX);
        let started = Instant::now();
        let c = dev.client().call_ok(Op::FileRead {
            path: path.to_string(),
            offset,
            len: chunk,
        })?;
        time.add_completion(started, &c);
        match c.reply {
            Reply::Data(d) if d.len() as u64 == chunk => out.extend_from_slice(&d),
            other => return Err(short_reply("file-read", &other)),
        }
    }
    Ok((out, time))
}

fn short_reply(op: &'static str, reply: &Reply) -> CallError {
    let found = match reply {
        Reply::Data(d) => format!("{} bytes", d.len()),
        _ => "not data".to_string(),
    };
    CallError::UnexpectedReply {
        op,
        expected: "data of the length asked",
        found,
    }
}

fn elapsed_ns(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
