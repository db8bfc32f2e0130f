//! Running workloads on a device through the host API.
//!
//! A [`Session`] loads and activates each program once per engine and keeps it, then
//! [`Session::run`] carries out one [`Case`] in the workload's [`Shape`]: allocate the
//! windows, stage the input file into device memory with a Memory Copy (no trip
//! through the host), execute, read the answer back, free the windows. The result
//! carries the answer, every execution's timing and the bytes that crossed to the host,
//! which is what the demo and the benchmarks report.

use std::collections::HashMap;

use csx_host::{CallError, Device, ExecuteRequest, Execution};
use csx_proto::{EngineKind, MemHandle, ProgramIndex, ProgramType, Timing, WireTrap};

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
}

/// Programs loaded on one device (see the module doc).
#[derive(Debug)]
pub struct Session<'d> {
    dev: &'d Device,
    compiler: Compiler,
    loaded: HashMap<(String, EngineKind), ProgramIndex>,
}

impl<'d> Session<'d> {
    pub fn new(dev: &'d Device, compiler: Compiler) -> Session<'d> {
        Session {
            dev,
            compiler,
            loaded: HashMap::new(),
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
        let pind = self
            .dev
            .load_program_any_slot(ProgramType::Elf, &object, Some(program))
            .map_err(device_error("load"))?;
        self.dev
            .activate(pind, engine)
            .map_err(device_error("activate"))?;
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
        let mut allocs = Allocations::new(self.dev, first);
        let result = self.run_shape(workload, case, inv, engine, &mut allocs);
        let freed = allocs.free_all();
        let run = result?;
        freed?;
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
            let exec = execute(dev, first, &request)?;
            let output = read_answer(dev, dst, &exec).map_err(err("read window 0"))?;
            return Ok(DeviceRun::one(&exec, output));
        }

        let input = allocs.alloc(case.input_size_bytes)?;
        dev.copy_file_to_mem(&case.input_path, 0, case.input_size_bytes, input, 0)
            .map_err(err("stage the input"))?;
        request = request.window(input, 0, case.input_size_bytes);
        let out = if inv.output_size_bytes > 0 {
            let out = allocs.alloc(inv.output_size_bytes)?;
            request = request.window(out, 0, inv.output_size_bytes);
            Some(out)
        } else {
            None
        };
        let exec = execute(dev, first, &request)?;
        let r0 = exec.r0_signed();
        match (workload.shape, out) {
            (Shape::WriteFile, _) if r0 >= 0 && !inv.params.is_empty() => {
                let path = std::str::from_utf8(&inv.params).unwrap_or_default();
                let output = dev
                    .read_file(path, inv.cparam1, r0 as u64)
                    .map_err(err("read the output file"))?;
                let mut run = DeviceRun::one(&exec, output);
                // The answer stays on the device; only r0 crosses to the host (the file
                // is read back here to be compared, which a real workload would not do).
                run.host_bytes = 8;
                Ok(run)
            }
            (Shape::Chain, Some(out)) if r0 >= 0 => {
                self.run_chain_second(workload, engine, exec, out, allocs)
            }
            (_, Some(out)) => {
                let output = read_answer(dev, out, &exec).map_err(err("read window 1"))?;
                Ok(DeviceRun::one(&exec, output))
            }
            (_, None) => Ok(DeviceRun::one(&exec, Vec::new())),
        }
    }

    /// The second stage of a chain: the first's output window, cut to its r0 bytes,
    /// becomes window 0.
    fn run_chain_second(
        &mut self,
        workload: &Workload,
        engine: EngineKind,
        first: Execution,
        first_out: MemHandle,
        allocs: &mut Allocations<'_>,
    ) -> Result<DeviceRun, RunError> {
        let second = workload.programs[1];
        let inv = chain_second_invocation();
        let selected = first.r0;
        if selected == 0 {
            // Nothing selected: no window to pass, so the host answers for the second
            // stage (its reference over no input).
            let mut run = DeviceRun::one(&first, Stats::EMPTY.to_bytes());
            run.outcome.r0 = inv.output_size_bytes as i64;
            return Ok(run);
        }
        let pind = self.program(second, engine)?;
        let out = allocs.alloc(inv.output_size_bytes)?;
        let request = ExecuteRequest::new(pind)
            .window(first_out, 0, selected)
            .window(out, 0, inv.output_size_bytes);
        let exec = execute(self.dev, second, &request)?;
        let output = read_answer(self.dev, out, &exec).map_err(|source| RunError::Device {
            program: second.to_string(),
            step: "read window 1",
            source,
        })?;
        let mut run = DeviceRun::one(&exec, output);
        run.timings.insert(0, first.timing);
        run.fuel_used += first.fuel_used;
        Ok(run)
    }
}

impl DeviceRun {
    fn one(exec: &Execution, output: Vec<u8>) -> DeviceRun {
        DeviceRun {
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

fn execute(dev: &Device, program: &str, request: &ExecuteRequest) -> Result<Execution, RunError> {
    let exec = dev.execute(request).map_err(|source| RunError::Device {
        program: program.to_string(),
        step: "execute",
        source,
    })?;
    if let Some(trap) = exec.trap.clone() {
        return Err(RunError::Trap {
            program: program.to_string(),
            trap,
        });
    }
    Ok(exec)
}

/// The first r0 bytes of `handle`, or nothing when r0 is an error code.
fn read_answer(dev: &Device, handle: MemHandle, exec: &Execution) -> Result<Vec<u8>, CallError> {
    let r0 = exec.r0_signed();
    if r0 <= 0 {
        return Ok(Vec::new());
    }
    dev.read_mem(handle, 0, r0 as u64)
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
