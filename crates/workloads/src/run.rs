//! Running workloads on a device through the host API.
//!
//! A [`Session`] loads and activates each program once per engine and keeps it, then
//! [`Session::run`] carries out one [`Case`] in the workload's [`Shape`]: allocate the
//! windows, stage the input file into device memory with a Memory Copy (no trip
//! through the host), execute, read the answer back, free the windows. The result
//! carries the answer, every execution's timing and the bytes that crossed to the host,
//! which is what the demo and the benchmarks report.
//!
//! Every run also carries its [`Phases`], Delilah's latency breakdown: program load,
//! activation (verify + JIT compile), staging the input (media → device memory),
//! execution and returning the answer to the host, each in wall time on the host and
//! in the device's modelled time (`Timing::modelled_ns` of the completions). The load
//! and activation phases count only in the run that loaded the program: a session
//! keeps programs loaded, so call [`Session::unload_all`] between runs to time them
//! every time. [`read_file_timed`] is the host's side of the same comparison: the
//! input read from the device file to the host.

use std::collections::HashMap;
use std::time::Instant;

use csx_host::{CallError, Device, ExecuteRequest, Execution};
use csx_proto::limits::{
    FILE_IO_SIZE_MAX, LOAD_CHUNK_SIZE_MAX, MEM_IO_SIZE_MAX, PROGRAM_SLOTS_COUNT,
};
use csx_proto::{
    Completion, CopySource, EngineKind, MemHandle, Op, ProgramIndex, ProgramType, Reply, Timing,
    WireTrap,
};

use crate::compile::{BuildError, Compiler};
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

/// Programs loaded on one device (see the module doc).
#[derive(Debug)]
pub struct Session<'d> {
    dev: &'d Device,
    compiler: Compiler,
    loaded: HashMap<(String, EngineKind), ProgramIndex>,
    /// Load and activation time of programs loaded since the last run began.
    pending: Phases,
}

impl<'d> Session<'d> {
    pub fn new(dev: &'d Device, compiler: Compiler) -> Session<'d> {
        Session {
            dev,
            compiler,
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
        let object = self
            .compiler
            .program(program)
            .map_err(|source| RunError::Build {
                program: program.to_string(),
                source,
            })?;
        let device_error = |step| {
            move |source| RunError::Device {
                program: program.to_string(),
                step,
                source,
            }
        };
        let started = Instant::now();
        let (pind, modelled_ns) =
            load_timed(self.dev, &object, program).map_err(device_error("load"))?;
        self.pending.load = self.pending.load.plus(PhaseTime {
            wall_ns: elapsed_ns(started),
            modelled_ns,
        });
        let started = Instant::now();
        let c = self
            .dev
            .client()
            .call_ok(Op::ActivateProgram { pind, engine })
            .map_err(device_error("activate"))?;
        self.pending.activate.add_completion(started, &c);
        self.pending.prepare_ns += c.timing.prepare_ns;
        self.loaded.insert((program.to_string(), engine), pind);
        Ok(pind)
    }

    /// Unloads every program this session loaded.
    pub fn unload_all(&mut self) -> Result<(), CallError> {
        for (_, pind) in self.loaded.drain() {
            self.dev.unload(pind)?;
        }
        Ok(())
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
        let mut allocs = Allocations::new(self.dev, first);
        let result = self.run_shape(workload, case, inv, engine, &mut allocs);
        let freed = allocs.free_all();
        let mut run = result?;
        freed?;
        run.phases.load = self.pending.load;
        run.phases.activate = self.pending.activate;
        run.phases.prepare_ns = self.pending.prepare_ns;
        Ok(run)
    }

    fn run_shape(
        &mut self,
        workload: &Workload,
        case: &Case,
        inv: &Invocation,
        engine: EngineKind,
        allocs: &mut Allocations<'_>,
    ) -> Result<DeviceRun, RunError> {
        let first = workload.programs[0];
        let pind = self.program(first, engine)?;
        let dev = self.dev;
        let err = |step| {
            move |source| RunError::Device {
                program: first.to_string(),
                step,
                source,
            }
        };
        let mut request = ExecuteRequest::new(pind)
            .cparams(inv.cparam1, inv.cparam2)
            .params(inv.params.clone());

        if workload.shape == Shape::ReadFile {
            let dst = allocs.alloc(inv.output_size_bytes)?;
            request = request.window(dst, 0, inv.output_size_bytes);
            let (exec, mut phases) = execute(dev, first, &request)?;
            // The program stages its input itself: its file I/O is the transfer part.
            let staged_ns = exec.timing.transfer_ns.min(phases.execute.wall_ns);
            phases.stage.wall_ns = staged_ns;
            phases.execute.wall_ns -= staged_ns;
            let (output, result) = read_answer(dev, dst, &exec).map_err(err("read window 0"))?;
            phases.result = result;
            return Ok(DeviceRun::one(&exec, output, phases));
        }

        let input = allocs.alloc(case.input_size_bytes)?;
        let started = Instant::now();
        let staged = dev
            .client()
            .call_ok(Op::MemCopy {
                dst: input,
                dst_offset: 0,
                sources: vec![CopySource::File {
                    path: case.input_path.clone(),
                    offset: 0,
                    len: case.input_size_bytes,
                }],
            })
            .map_err(err("stage the input"))?;
        let mut stage = PhaseTime::default();
        stage.add_completion(started, &staged);
        request = request.window(input, 0, case.input_size_bytes);
        let out = if inv.output_size_bytes > 0 {
            let out = allocs.alloc(inv.output_size_bytes)?;
            request = request.window(out, 0, inv.output_size_bytes);
            Some(out)
        } else {
            None
        };
        let (exec, mut phases) = execute(dev, first, &request)?;
        phases.stage = stage;
        let r0 = exec.r0_signed();
        match (workload.shape, out) {
            (Shape::WriteFile, _) if r0 >= 0 && !inv.params.is_empty() => {
                let path = std::str::from_utf8(&inv.params).unwrap_or_default();
                // Not a phase: the file is read back here to be compared, which a real
                // workload would not do.
                let output = dev
                    .read_file(path, inv.cparam1, r0 as u64)
                    .map_err(err("read the output file"))?;
                let mut run = DeviceRun::one(&exec, output, phases);
                // The answer stays on the device; only r0 crosses to the host.
                run.host_bytes = 8;
                Ok(run)
            }
            (Shape::Chain, Some(out)) if r0 >= 0 => {
                self.run_chain_second(workload, engine, exec, phases, out, allocs)
            }
            (_, Some(out)) => {
                let (output, result) =
                    read_answer(dev, out, &exec).map_err(err("read window 1"))?;
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
        allocs: &mut Allocations<'_>,
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
        let out = allocs.alloc(inv.output_size_bytes)?;
        let request = ExecuteRequest::new(pind)
            .window(first_out, 0, selected)
            .window(out, 0, inv.output_size_bytes);
        let (exec, second_phases) = execute(self.dev, second, &request)?;
        let (output, result) =
            read_answer(self.dev, out, &exec).map_err(|source| RunError::Device {
                program: second.to_string(),
                step: "read window 1",
                source,
            })?;
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

/// Runs `request`; the phases carry its execute time (wall and modelled).
fn execute(
    dev: &Device,
    program: &str,
    request: &ExecuteRequest,
) -> Result<(Execution, Phases), RunError> {
    // The workloads are our own programs over inputs of any size: they take the most
    // fuel and time the protocol allows, not the defaults meant for untrusted programs.
    let mut request = request.clone();
    request
        .fuel
        .get_or_insert(csx_host::proto::limits::FUEL_MAX);
    request
        .time_limit_ms
        .get_or_insert(csx_host::proto::limits::TIME_LIMIT_MS_MAX);
    let started = Instant::now();
    let exec = dev.execute(&request).map_err(|source| RunError::Device {
        program: program.to_string(),
        step: "execute",
        source,
    })?;
    let phases = Phases {
        execute: PhaseTime {
            wall_ns: elapsed_ns(started),
            modelled_ns: exec.timing.modelled_ns,
        },
        ..Phases::default()
    };
    if let Some(trap) = exec.trap.clone() {
        return Err(RunError::Trap {
            program: program.to_string(),
            trap,
        });
    }
    Ok((exec, phases))
}

/// The first r0 bytes of `handle` (nothing when r0 is an error code), read in Memory
/// Reads of at most `MEM_IO_SIZE_MAX`, with their time.
fn read_answer(
    dev: &Device,
    handle: MemHandle,
    exec: &Execution,
) -> Result<(Vec<u8>, PhaseTime), CallError> {
    let mut time = PhaseTime::default();
    let r0 = exec.r0_signed();
    if r0 <= 0 {
        return Ok((Vec::new(), time));
    }
    let len = r0 as u64;
    let mut out = Vec::with_capacity(usize::try_from(len).expect("an answer fits in memory"));
    while (out.len() as u64) < len {
        let offset = out.len() as u64;
        let chunk = (len - offset).min(MEM_IO_SIZE_MAX);
        let started = Instant::now();
        let c = dev.client().call_ok(Op::MemRead {
            handle,
            offset,
            len: chunk,
        })?;
        time.add_completion(started, &c);
        match c.reply {
            Reply::Data(d) if d.len() as u64 == chunk => out.extend_from_slice(&d),
            other => return Err(short_reply("mem-read", &other)),
        }
    }
    Ok((out, time))
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

/// Loads `image` into the first empty slot in chunks, one Load Program command each.
/// Returns the slot and the commands' modelled time.
fn load_timed(dev: &Device, image: &[u8], entry: &str) -> Result<(ProgramIndex, u64), CallError> {
    let occupied: Vec<ProgramIndex> = dev.programs()?.into_iter().map(|p| p.pind).collect();
    let Some(pind) = (0..PROGRAM_SLOTS_COUNT)
        .map(ProgramIndex)
        .find(|p| !occupied.contains(p))
    else {
        // The host library's own search reports a full device with the typed error.
        return dev
            .load_program_any_slot(ProgramType::Elf, image, Some(entry))
            .map(|p| (p, 0));
    };
    let total_size_bytes = u32::try_from(image.len()).unwrap_or(u32::MAX);
    let mut modelled_ns = 0;
    for (i, data) in image.chunks(LOAD_CHUNK_SIZE_MAX as usize).enumerate() {
        let c = dev.client().call_ok(Op::LoadProgram {
            pind,
            ptype: ProgramType::Elf,
            total_size_bytes,
            offset: (i * LOAD_CHUNK_SIZE_MAX as usize) as u32,
            data: data.to_vec(),
            entry: (i == 0).then(|| entry.to_string()),
        })?;
        modelled_ns += c.timing.modelled_ns;
    }
    Ok((pind, modelled_ns))
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

/// Device memory a run allocated, freed at its end whatever happened.
struct Allocations<'d> {
    dev: &'d Device,
    program: &'static str,
    handles: Vec<MemHandle>,
}

impl<'d> Allocations<'d> {
    fn new(dev: &'d Device, program: &'static str) -> Allocations<'d> {
        Allocations {
            dev,
            program,
            handles: Vec::new(),
        }
    }

    fn alloc(&mut self, size_bytes: u64) -> Result<MemHandle, RunError> {
        let h = self
            .dev
            .alloc(size_bytes)
            .map_err(|source| RunError::Device {
                program: self.program.to_string(),
                step: "allocate device memory",
                source,
            })?;
        self.handles.push(h);
        Ok(h)
    }

    fn free_all(&mut self) -> Result<(), RunError> {
        let mut first_error = None;
        for h in self.handles.drain(..) {
            if let Err(source) = self.dev.free(h) {
                first_error.get_or_insert(RunError::Device {
                    program: self.program.to_string(),
                    step: "free device memory",
                    source,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
