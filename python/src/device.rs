//! `csx._native.Device`: one open device (embedded, `shm://` or `tcp://`), its files,
//! programs and λ-IO reads. The GIL is released around every device call, so Python
//! threads (and Dask workers) use one device at once.
//!
//! Argument types and ranges are checked by the Python layer (`csx/device.py`), which
//! names the argument; what is left here are the device's own checks (statuses) and
//! the protocol's limits.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csx_host::proto::{EngineKind, MemHandle, Op, ProgramIndex, Reply, Status};
use csx_host::session::Session;
use csx_host::transport::inproc::DeviceConfig;
use csx_host::{program_type_of, Device, ExecuteRequest, Execution};
use csx_lambda::{Lambda, LambdaArgs, LambdaIo, LambdaOptions, Mode, Ran, SideCost};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::buffer::Buffer;
use crate::errors::{check_signals, Error, Kind, Result};

/// A device opened from Python (see the module doc).
#[pyclass(module = "csx._native", name = "Device", frozen)]
#[derive(Debug)]
pub struct PyDevice {
    /// `None` once closed.
    inner: Mutex<Option<Arc<Device>>>,
    uri: String,
}

/// Copies a bytes-like object (anything exporting a buffer of unsigned bytes) while the
/// GIL is held: the copy is what the transport sends, and no other Python thread can
/// change it while the device call runs without the GIL.
fn bytes_of(py: Python<'_>, data: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u8>> {
    let buf = PyBuffer::<u8>::get(data).map_err(|e| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be a bytes-like object of unsigned bytes: {e}"
        ))
    })?;
    buf.to_vec(py)
}

fn engine_of(name: &str) -> Result<EngineKind> {
    match name {
        "jit" => Ok(EngineKind::Jit),
        "interp" | "interpreter" => Ok(EngineKind::Interpreter),
        other => Err(Error::value(format!(
            "engine {other:?} is not one of 'jit', 'interp'"
        ))),
    }
}

fn pind_of(pind: u16) -> ProgramIndex {
    ProgramIndex(pind)
}

/// The device-side result of one execution, for Python.
#[pyclass(module = "csx._native", frozen, get_all)]
pub struct ExecResult {
    /// The program's return value as an unsigned 64-bit integer.
    r0: u64,
    /// r0 as the signed value C programs return.
    r0_signed: i64,
    /// The completion status code (0 success, 0xC0 trap).
    status: u8,
    status_name: &'static str,
    trapped: bool,
    /// The trap as text, when the program faulted.
    trap: Option<String>,
    trap_kind: Option<&'static str>,
    trap_pc: Option<u32>,
    fuel_used: u64,
    trace: Vec<String>,
    /// The first registered function that failed during the run (text).
    detail: Option<String>,
    /// The output window's bytes (None without an output window or after a trap).
    output: Option<Py<Buffer>>,
    /// Bytes staged into window 0 (by a device-side copy or from the host).
    staged_bytes: u64,
    /// The device's timing: queued, transfer, prepare, execute, total and modelled ns.
    timing: Py<PyDict>,
    /// Host wall time of the execute command, ns.
    wall_ns: u64,
}

/// What a λ-IO read returned, for Python.
#[pyclass(module = "csx._native", frozen, get_all)]
pub struct LambdaResult {
    /// The first r0 bytes of the output window.
    output: Py<Buffer>,
    /// "host", "device" or "both" (a profiled request whose sides agreed).
    ran: &'static str,
    cache_ratio: f64,
    /// Modelled ns of the request (the side that ran, the slower of a profiled pair).
    modelled_ns: u64,
    /// Cost of each side that ran: media_ns, link_ns, compute_ns, latency_ns,
    /// link_bytes, media_bytes, fuel.
    host: Option<Py<PyDict>>,
    device: Option<Py<PyDict>>,
}

fn cost_dict(py: Python<'_>, c: &SideCost) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("media_ns", c.media_ns)?;
    d.set_item("link_ns", c.link_ns)?;
    d.set_item("compute_ns", c.compute_ns)?;
    d.set_item("latency_ns", c.latency_ns)?;
    d.set_item("link_bytes", c.link_bytes)?;
    d.set_item("media_bytes", c.media_bytes)?;
    d.set_item("fuel", c.fuel)?;
    d.set_item("modelled_ns", c.modelled_ns())?;
    Ok(d.unbind())
}

/// Window 0 of a run: a device file range (copied on the device) or host bytes.
enum Input {
    File {
        path: String,
        offset: u64,
        len: Option<u64>,
    },
    Data(Vec<u8>),
    None,
}

/// A file as Python sees it: (path, size_bytes, extents).
type FileRow = (String, u64, u32);

/// An execution, the bytes staged into window 0, the output window's bytes and the
/// host's wall ns of the execute command.
type RunOutput = (Execution, u64, Option<Vec<u8>>, u64);

/// Stages the windows, executes, reads the output, on a session that frees what it
/// allocated whatever happens.
fn run_program(
    dev: &Device,
    request: ExecuteRequest,
    input: Input,
    output_size: Option<u64>,
) -> Result<RunOutput> {
    let mut session = Session::new(dev);
    let result = stage_and_execute(&mut session, request, input, output_size);
    let released = session.close();
    let result = result?;
    released?;
    Ok(result)
}

/// Window 0 on `session`: a device file range copied on the device, host bytes, or 8
/// zero bytes. The window and the bytes staged.
fn stage_input(session: &mut Session<'_>, input: Input) -> Result<((MemHandle, u64), u64)> {
    match input {
        Input::File { path, offset, len } => {
            let len = match len {
                Some(l) => l,
                None => session
                    .device()
                    .stat(&path)?
                    .size_bytes
                    .saturating_sub(offset),
            };
            if len == 0 {
                return Err(Error::value(format!(
                    "input {path} at offset {offset} is empty; window 0 needs at least one byte"
                )));
            }
            let h = session.alloc(len)?;
            session.copy_file(&path, offset, len, h, 0)?;
            Ok(((h, len), len))
        }
        Input::Data(data) => {
            if data.is_empty() {
                return Err(Error::value(
                    "input is empty; window 0 needs at least one byte",
                ));
            }
            let len = data.len() as u64;
            let h = session.alloc(len)?;
            session.write(h, 0, &data)?;
            Ok(((h, len), len))
        }
        Input::None => {
            let h = session.alloc(8)?;
            session.fill(h, 0, 8, 0)?;
            Ok(((h, 8), 0))
        }
    }
}

fn stage_and_execute(
    session: &mut Session<'_>,
    request: ExecuteRequest,
    input: Input,
    output_size: Option<u64>,
) -> Result<RunOutput> {
    let ((h0, len0), staged) = stage_input(session, input)?;
    let mut request = request.window(h0, 0, len0);
    let out = match output_size {
        Some(0) => return Err(Error::value("output_size must be at least 1 byte")),
        Some(n) => {
            let h = session.alloc(n)?;
            session.fill(h, 0, n, 0)?;
            request = request.window(h, 0, n);
            Some((h, n))
        }
        None => None,
    };
    let t = Instant::now();
    let run = execute_interruptibly(session.device(), &request)?;
    let wall_ns = t.elapsed().as_nanos() as u64;
    let output = match out {
        Some((h, n)) if !run.trapped() => Some(session.read(h, 0, n)?),
        _ => None,
    };
    Ok((run, staged, output, wall_ns))
}

/// An execution as Python sees it.
fn exec_result(
    py: Python<'_>,
    run: Execution,
    staged_bytes: u64,
    output: Option<Vec<u8>>,
    wall_ns: u64,
) -> PyResult<ExecResult> {
    let t = run.timing;
    let timing = PyDict::new(py);
    timing.set_item("queued_ns", t.queued_ns)?;
    timing.set_item("transfer_ns", t.transfer_ns)?;
    timing.set_item("prepare_ns", t.prepare_ns)?;
    timing.set_item("execute_ns", t.execute_ns)?;
    timing.set_item("total_ns", t.total_ns)?;
    timing.set_item("modelled_ns", t.modelled_ns)?;
    let output = match output {
        Some(bytes) => Some(Py::new(py, Buffer::new(bytes))?),
        None => None,
    };
    Ok(ExecResult {
        r0: run.r0,
        r0_signed: run.r0_signed(),
        status: run.status.code(),
        status_name: run.status.name(),
        trapped: run.status == Status::Trap,
        trap: run.trap.as_ref().map(|t| t.to_string()),
        trap_kind: run.trap.as_ref().map(|t| t.kind_name()),
        trap_pc: run.trap.as_ref().map(|t| t.pc),
        fuel_used: run.fuel_used,
        trace: run.trace,
        detail: run.detail.as_ref().map(|d| d.to_string()),
        output,
        staged_bytes,
        timing: timing.unbind(),
        wall_ns,
    })
}

/// A λ-IO read's arguments, checked.
struct LambdaRead {
    path: String,
    image: Vec<u8>,
    name: String,
    entry: Option<String>,
    offset: u64,
    length: Option<u64>,
    mode: Mode,
    args: LambdaArgs,
    state_dir: Option<PathBuf>,
}

impl LambdaRead {
    /// Loads the λ, reads, unloads it. Ctrl-C sets the λ-IO handle's stop flag (once
    /// the handle exists), which aborts the λ's device runs and stops its host runs.
    fn run(self, dev: &Device) -> Result<csx_lambda::LambdaOutput> {
        let stop = Mutex::new(None);
        let pending_stop = std::sync::atomic::AtomicBool::new(false);
        interruptibly(
            || -> Result<csx_lambda::LambdaOutput> {
                let options = LambdaOptions {
                    state_dir: self.state_dir.clone(),
                    ..LambdaOptions::default()
                };
                let io = LambdaIo::new(dev, &options)?;
                let flag = io.stop_flag();
                *stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&flag));
                if pending_stop.load(std::sync::atomic::Ordering::Acquire) {
                    flag.stop(1);
                }
                let lambda = Lambda::load(dev, &self.name, &self.image, self.entry.as_deref())?;
                let result = io.open(&self.path).and_then(|file| {
                    let len = self
                        .length
                        .unwrap_or(file.size_bytes().saturating_sub(self.offset));
                    file.read_lambda(self.offset, len, &lambda, &self.args, self.mode)
                });
                let unloaded = lambda.unload();
                let out = result?;
                unloaded?;
                Ok(out)
            },
            || {
                pending_stop.store(true, std::sync::atomic::Ordering::Release);
                if let Some(f) = stop.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                    f.stop(1);
                }
            },
        )
    }
}

/// A λ-IO read's output as Python sees it.
fn lambda_result(py: Python<'_>, out: csx_lambda::LambdaOutput) -> PyResult<LambdaResult> {
    let ran = match out.ran {
        Ran::Host => "host",
        Ran::Device => "device",
        Ran::Both => "both",
    };
    let modelled_ns = out.modelled_ns();
    Ok(LambdaResult {
        ran,
        cache_ratio: out.cache_ratio,
        modelled_ns,
        host: out.host.as_ref().map(|c| cost_dict(py, c)).transpose()?,
        device: out.device.as_ref().map(|c| cost_dict(py, c)).transpose()?,
        output: Py::new(py, Buffer::new(out.output))?,
    })
}

/// How often a call waiting for the device runs Python's signal handlers.
const SIGNAL_POLL: Duration = Duration::from_millis(10);

/// Runs `request` and waits for it, running Python's signal handlers every
/// [`SIGNAL_POLL`]: when one raises (Ctrl-C's KeyboardInterrupt), the run is aborted on
/// the device, its completion waited for, and that exception is the result (as the
/// CLI's Ctrl-C does). A handler that raises before the run starts keeps it from
/// starting.
fn execute_interruptibly(dev: &Device, request: &ExecuteRequest) -> Result<Execution> {
    check_signals()?;
    let id = dev.submit_execute(request)?;
    let mut raised: Option<Error> = None;
    loop {
        let done = dev.wait_execute(id, Some(SIGNAL_POLL));
        match (done, raised.take()) {
            (Ok(Some(run)), None) => return Ok(run),
            (Err(e), None) => return Err(e.into()),
            // Aborted (or finished anyway): the exception is the answer.
            (Ok(Some(_)) | Err(_), Some(r)) => return Err(r),
            (Ok(None), Some(r)) => raised = Some(r),
            (Ok(None), None) => {
                if let Err(r) = check_signals() {
                    dev.abort(id)?;
                    raised = Some(r);
                }
            }
        }
    }
}

/// Runs `work` on a thread of its own while this one runs Python's signal handlers
/// every [`SIGNAL_POLL`]; when one raises, `stop` is called once (it stops the work,
/// which then returns early) and the exception is the result.
fn interruptibly<T: Send>(work: impl FnOnce() -> Result<T> + Send, stop: impl Fn()) -> Result<T> {
    check_signals()?;
    std::thread::scope(|scope| {
        let handle = scope.spawn(work);
        let mut raised: Option<Error> = None;
        while !handle.is_finished() {
            std::thread::sleep(SIGNAL_POLL);
            if raised.is_none() {
                if let Err(r) = check_signals() {
                    stop();
                    raised = Some(r);
                }
            }
        }
        let out = handle
            .join()
            .unwrap_or_else(|_| Err(Error::new(Kind::Device, "the call's thread panicked")));
        match raised {
            Some(r) => Err(r),
            None => out,
        }
    })
}

impl PyDevice {
    pub(crate) fn device(&self) -> Result<Arc<Device>> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .cloned()
            .ok_or_else(|| Error::new(Kind::Closed, format!("device {} is closed", self.uri)))
    }

    fn wrap(dev: Device) -> PyDevice {
        let uri = dev.uri().to_string();
        PyDevice {
            inner: Mutex::new(Some(Arc::new(dev))),
            uri,
        }
    }
}

#[pymethods]
impl PyDevice {
    /// Opens the device at `uri`: a state directory (embedded), shm://NAME,
    /// tcp://HOST:PORT, tcps://HOST:PORT or array:DIR (an array's files).
    #[staticmethod]
    fn open(py: Python<'_>, uri: String) -> PyResult<PyDevice> {
        let dev = py.detach(move || csx_array::open(&uri).map_err(Error::from))?;
        Ok(PyDevice::wrap(dev))
    }

    /// Creates an embedded device in the state directory `path` and opens it.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, profile=None, nvm_size=None, slm_size=None, state_size=None, engines=None, resident_memory=None, throttle=None))]
    fn init(
        py: Python<'_>,
        path: PathBuf,
        profile: Option<String>,
        nvm_size: Option<u64>,
        slm_size: Option<u64>,
        state_size: Option<u64>,
        engines: Option<u32>,
        resident_memory: Option<u64>,
        throttle: Option<bool>,
    ) -> PyResult<PyDevice> {
        let dev = py.detach(move || -> Result<Device> {
            let mut config = DeviceConfig {
                nvm_size_bytes: nvm_size.unwrap_or(4 << 30),
                slm_size_bytes: slm_size.unwrap_or(1 << 30),
                state_size_bytes: state_size.unwrap_or(1 << 20),
                engines,
                resident_bytes: resident_memory,
                ..DeviceConfig::default()
            };
            if let Some(p) = &profile {
                config
                    .set_profile(p)
                    .map_err(|e| Error::value(format!("profile {p:?}: {e}")))?;
            }
            if let Some(t) = throttle {
                config.perf.throttle = t;
            }
            Ok(Device::init(&path, config)?)
        })?;
        Ok(PyDevice::wrap(dev))
    }

    #[getter]
    fn uri(&self) -> String {
        self.uri.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// Closes the device (an embedded device whose last client this was shuts down).
    /// Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(arc) = taken else {
            return Ok(());
        };
        py.detach(move || -> Result<()> {
            match Arc::try_unwrap(arc) {
                Ok(dev) => Ok(dev.close()?),
                // Another thread is in a call on this device: the last one to finish
                // drops it, which closes the queue pair.
                Err(_) => Ok(()),
            }
        })?;
        Ok(())
    }

    /// The device's identity and limits, as a dict.
    fn identify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dev = self.device()?;
        let i = py.detach(move || dev.identify().map_err(Error::from))?;
        let d = PyDict::new(py);
        d.set_item("version", i.version)?;
        d.set_item("abi_version", i.abi_version)?;
        d.set_item("nvm_size_bytes", i.nvm_size_bytes)?;
        d.set_item("slm_size_bytes", i.slm_size_bytes)?;
        d.set_item("slm_free_bytes", i.slm_free_bytes)?;
        d.set_item("state_size_bytes", i.state_size_bytes)?;
        d.set_item("engines", i.engines)?;
        d.set_item("program_slots", i.program_slots)?;
        d.set_item("params_size_max", i.params_size_max)?;
        d.set_item("program_size_max", i.program_size_max)?;
        d.set_item("fuel_default", i.fuel_default)?;
        d.set_item("jit", i.jit)?;
        Ok(d)
    }

    /// Makes the device file `path` hold exactly `data` (a bytes-like object).
    fn put(&self, py: Python<'_>, path: String, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let bytes = bytes_of(py, data, "data")?;
        let dev = self.device()?;
        let n = bytes.len() as u64;
        py.detach(move || dev.put_bytes(&path, &bytes).map_err(Error::from))?;
        Ok(n)
    }

    /// Up to `length` bytes of `path` from `offset` (to its end when `length` is None).
    #[pyo3(signature = (path, offset=0, length=None))]
    fn get(
        &self,
        py: Python<'_>,
        path: String,
        offset: u64,
        length: Option<u64>,
    ) -> PyResult<Buffer> {
        let dev = self.device()?;
        let data = py.detach(move || -> Result<Vec<u8>> {
            let size = dev.stat(&path)?.size_bytes;
            if offset > size {
                return Err(Error::value(format!(
                    "offset {offset} is past the end of {path} ({size} bytes)"
                )));
            }
            let len = length.unwrap_or(size - offset).min(size - offset);
            if len <= csx_host::proto::limits::FILE_IO_SIZE_MAX {
                // One command: lend its reply vector as it came (no assembly copy).
                let c = dev.client().call_ok(Op::FileRead {
                    path: path.clone(),
                    offset,
                    len,
                })?;
                return match c.reply {
                    Reply::Data(d) if d.len() as u64 == len => Ok(d),
                    _ => Err(Error::new(
                        Kind::Device,
                        format!("file-read {path}: the device answered with the wrong length"),
                    )),
                };
            }
            Ok(dev.read_file(&path, offset, len)?)
        })?;
        Ok(Buffer::new(data))
    }

    /// Streams the local file `local` into the device file `path`; returns the bytes.
    fn put_file(&self, py: Python<'_>, local: PathBuf, path: String) -> PyResult<u64> {
        let dev = self.device()?;
        Ok(py.detach(move || {
            dev.put_file(&local, &path, &mut |_| {})
                .map_err(Error::from)
        })?)
    }

    /// Streams the device file `path` into the local file `local`; returns the bytes.
    fn get_file(&self, py: Python<'_>, path: String, local: PathBuf) -> PyResult<u64> {
        let dev = self.device()?;
        Ok(py.detach(move || {
            dev.get_file(&path, &local, &mut |_| {})
                .map_err(Error::from)
        })?)
    }

    /// The files under `dir`: a list of (path, size_bytes, extents), and whether the
    /// listing was cut short.
    fn ls(&self, py: Python<'_>, dir: String) -> PyResult<(Vec<FileRow>, bool)> {
        let dev = self.device()?;
        let list = py.detach(move || dev.list_files(&dir).map_err(Error::from))?;
        let files = list
            .files
            .into_iter()
            .map(|f| (f.path, f.size_bytes, f.extent_count))
            .collect();
        Ok((files, list.truncated))
    }

    /// (path, size_bytes, extents) of one file.
    fn stat(&self, py: Python<'_>, path: String) -> PyResult<FileRow> {
        let dev = self.device()?;
        let f = py.detach(move || dev.stat(&path).map_err(Error::from))?;
        Ok((f.path, f.size_bytes, f.extent_count))
    }

    /// Deletes a file.
    fn rm(&self, py: Python<'_>, path: String) -> PyResult<()> {
        let dev = self.device()?;
        Ok(py.detach(move || dev.delete_file(&path).map_err(Error::from))?)
    }

    /// Makes a directory.
    fn mkdir(&self, py: Python<'_>, path: String) -> PyResult<()> {
        let dev = self.device()?;
        Ok(py.detach(move || dev.mkdir(&path).map_err(Error::from))?)
    }

    /// Flushes the device: what it acknowledged survives a crash.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let dev = self.device()?;
        Ok(py.detach(move || dev.flush().map_err(Error::from))?)
    }

    /// Loads a program image into a free slot and activates it on `engine`; returns the
    /// slot and the loaded program's generation (`None` from a device that predates
    /// generations), which `unload` names. The slot is unloaded again if activation
    /// fails.
    #[pyo3(signature = (image, entry=None, engine="jit"))]
    fn load(
        &self,
        py: Python<'_>,
        image: Vec<u8>,
        entry: Option<String>,
        engine: &str,
    ) -> PyResult<(u16, Option<u64>)> {
        let engine = engine_of(engine)?;
        let dev = self.device()?;
        let (pind, generation) = py.detach(move || -> Result<(ProgramIndex, Option<u64>)> {
            let pind =
                dev.load_program_any_slot(program_type_of(&image), &image, entry.as_deref())?;
            if let Err(e) = dev.activate(pind, engine) {
                let _ = dev.unload(pind);
                return Err(e.into());
            }
            let listed = dev.programs_with_generations_if_known()?;
            let found = listed.into_iter().find(|p| p.pind == pind);
            Ok((pind, found.and_then(|p| p.generation)))
        })?;
        Ok((pind.0, generation))
    }

    /// Unloads the program in `slot` (the device deactivates it first). With
    /// `generation` (as `load` returned it), only that program: another one in the
    /// slot stays, and `csx.ProgramStateError` (status ProgramChanged) is raised.
    #[pyo3(signature = (slot, generation=None))]
    fn unload(&self, py: Python<'_>, slot: u16, generation: Option<u64>) -> PyResult<()> {
        let dev = self.device()?;
        py.detach(move || -> Result<()> {
            let pind = pind_of(slot);
            Ok(dev.unload_generation(pind, generation)?)
        })?;
        Ok(())
    }

    /// Runs the program in `slot`. Window 0 is the device file range `input_path`
    /// [`input_offset`, +`input_length`) (copied on the device), or `input_data` (host
    /// bytes), or 8 zero bytes; window 1 is `output_size` zeroed bytes, read back.
    #[pyo3(signature = (slot, input_path=None, input_offset=0, input_length=None, input_data=None, output_size=None, cparam1=0, cparam2=0, params=None, fuel=None, time_limit_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        slot: u16,
        input_path: Option<String>,
        input_offset: u64,
        input_length: Option<u64>,
        input_data: Option<&Bound<'_, PyAny>>,
        output_size: Option<u64>,
        cparam1: u64,
        cparam2: u64,
        params: Option<&Bound<'_, PyAny>>,
        fuel: Option<u64>,
        time_limit_ms: Option<u32>,
    ) -> PyResult<ExecResult> {
        let input = match (input_path, input_data) {
            (Some(_), Some(_)) => {
                return Err(Error::value("give input_path or input_data, not both").into())
            }
            (Some(path), None) => Input::File {
                path,
                offset: input_offset,
                len: input_length,
            },
            (None, Some(data)) => Input::Data(bytes_of(py, data, "input")?),
            (None, None) => Input::None,
        };
        let params = match params {
            Some(p) => bytes_of(py, p, "params")?,
            None => Vec::new(),
        };
        let mut request = ExecuteRequest::new(pind_of(slot))
            .cparams(cparam1, cparam2)
            .params(params);
        if let Some(f) = fuel {
            request = request.fuel(f);
        }
        if let Some(ms) = time_limit_ms {
            request = request.time_limit_ms(ms);
        }
        let dev = self.device()?;
        let (run, staged, output, wall_ns) =
            py.detach(move || run_program(&dev, request, input, output_size))?;
        exec_result(py, run, staged, output, wall_ns)
    }

    /// λ-IO: runs the λ `image` over [`offset`, +`length`) of the device file `path` in
    /// `mode` ("host", "device" or "auto"); the output is the λ's first r0 bytes.
    #[pyo3(signature = (path, image, name, entry=None, offset=0, length=None, mode="device", output_size=None, cparam1=0, cparam2=0, params=None, fuel=None, state_dir=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_lambda(
        &self,
        py: Python<'_>,
        path: String,
        image: Vec<u8>,
        name: String,
        entry: Option<String>,
        offset: u64,
        length: Option<u64>,
        mode: &str,
        output_size: Option<u64>,
        cparam1: u64,
        cparam2: u64,
        params: Option<&Bound<'_, PyAny>>,
        fuel: Option<u64>,
        state_dir: Option<PathBuf>,
    ) -> PyResult<LambdaResult> {
        let mode: Mode = mode.parse().map_err(Error::value)?;
        let params = match params {
            Some(p) => bytes_of(py, p, "params")?,
            None => Vec::new(),
        };
        let args = LambdaArgs {
            cparam1,
            cparam2,
            params,
            output_size_bytes: output_size,
            fuel,
        };
        let dev = self.device()?;
        let read = LambdaRead {
            path,
            image,
            name,
            entry,
            offset,
            length,
            mode,
            args,
            state_dir,
        };
        let out = py.detach(|| read.run(&dev))?;
        lambda_result(py, out)
    }

    fn __repr__(&self) -> String {
        format!("csx.Device({:?})", self.uri)
    }
}

/// The eBPF object of C source `source` (text), compiled with clang against the SDK
/// header; cached by content. `name` names it in clang's messages.
#[pyfunction]
#[pyo3(signature = (source, name="program"))]
pub fn build<'py>(py: Python<'py>, source: String, name: &str) -> PyResult<Bound<'py, PyBytes>> {
    let name = name.to_string();
    let object = py.detach(move || -> Result<Vec<u8>> {
        let compiler = csx_workloads::compile::Compiler::new()?;
        Ok(compiler.compile_source(&name, &source, &[])?)
    })?;
    Ok(PyBytes::new(py, &object))
}

/// The eBPF object of the SDK program `name` (sdk/programs: stats64, filter, ...), built
/// in: no clang needed.
#[pyfunction]
pub fn sdk_program<'py>(py: Python<'py>, name: String) -> PyResult<Bound<'py, PyBytes>> {
    let object = csx_workloads::compile::program(&name).map_err(Error::from)?;
    Ok(PyBytes::new(py, object))
}

/// The names of the SDK's programs.
#[pyfunction]
pub fn sdk_programs() -> Vec<&'static str> {
    csx_workloads::compile::PROGRAMS
        .iter()
        .map(|p| p.name)
        .collect()
}
