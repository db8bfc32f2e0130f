//! The device half of a pushdown scan (`csx.scan`, `csx.duckdb.scan`): csx-data's
//! scan (`csx_data::Scanner`), read chunk by chunk from Python.
//!
//! Opening a `Scanner` reads the table's schema, checks its column files and emits the
//! query's scan program (raw eBPF); Python loads that program once per device and query
//! shape and keeps it (`Scanner.use_loaded`). Each `next()` returns one chunk's kept
//! rows, one buffer per projected column: for a chunk the device stages the columns'
//! rows with Memory Copy (the bytes never reach the host), runs the program once over
//! them and only the kept values are read to the host. `meter` adds up what every
//! command cost (modelled ns under the device's performance profile, bytes, fuel).

use std::sync::{Arc, Mutex};

use csx_data::scan::resident::{self, Lease};
use csx_data::stage::DeviceColumn;
use csx_data::{Cmp, Predicate};
use csx_host::proto::{Op, ProgramIndex, Reply};
use csx_host::Device;
use pyo3::prelude::*;

use crate::buffer::Buffer;
use crate::device::PyDevice;
use crate::errors::{Error, Kind, Result};

/// One chunk's kept rows.
#[pyclass(module = "csx._native", frozen, get_all)]
#[derive(Debug)]
pub struct ScanChunk {
    /// The chunk's first row in the table.
    first_row: u64,
    /// Rows of the chunk.
    rows: u64,
    /// Rows kept.
    kept: u64,
    /// One buffer per projected column, in the order asked: `kept * width` bytes.
    columns: Vec<Py<Buffer>>,
}

/// A comparison of csx-data from Python's (column, op, values): op one of = != < <= >
/// >= (one value), between (two), in (any number), values in the column's stored units.
pub(crate) fn predicate_of((column, op, values): &(String, String, Vec<i64>)) -> Result<Predicate> {
    let want = match op.as_str() {
        "between" => Some(2),
        "in" => None,
        _ => Some(1),
    };
    if let Some(n) = want {
        if values.len() != n {
            return Err(Error::value(format!(
                "predicate {column} {op} takes {n} value(s), got {}",
                values.len()
            )));
        }
    }
    let a = values.first().copied().unwrap_or(0);
    let cmp = match op.as_str() {
        "=" => Cmp::Eq(a),
        "!=" => Cmp::Ne(a),
        "<" => Cmp::Lt(a),
        "<=" => Cmp::Le(a),
        ">" => Cmp::Gt(a),
        ">=" => Cmp::Ge(a),
        "between" => Cmp::Between(a, values[1]),
        "in" => Cmp::In(values.clone()),
        other => {
            return Err(Error::value(format!(
                "predicate operator {other:?} is not one of = != < <= > >= between in"
            )))
        }
    };
    Ok(Predicate::new(column, cmp))
}

type Keeper = Arc<Mutex<Option<resident::ResidentScans<'static>>>>;

/// Staged scan inputs kept in device memory between scans on one device, under a byte
/// budget, invalidated by any write to their files (`csx_data::scan::resident`).
#[pyclass(module = "csx._native", frozen)]
#[derive(Debug)]
pub struct ResidentScans {
    /// `None` once closed.
    inner: Keeper,
}

fn lock_keeper(k: &Keeper) -> std::sync::MutexGuard<'_, Option<resident::ResidentScans<'static>>> {
    k.lock().unwrap_or_else(|e| e.into_inner())
}

#[pymethods]
impl ResidentScans {
    /// Nothing kept yet on `device`; at most `budget` bytes of device memory kept.
    /// `keep_inputs=False`: keeps no staged inputs, only the scans' windows between
    /// scans (every scan stages, into windows already mapped).
    #[new]
    #[pyo3(signature = (device, budget=None, keep_inputs=true))]
    fn new(
        device: &Bound<'_, PyDevice>,
        budget: Option<u64>,
        keep_inputs: bool,
    ) -> PyResult<ResidentScans> {
        let dev = device.get().device()?;
        let budget = budget.unwrap_or(resident::RESIDENT_BUDGET_DEFAULT);
        let session = csx_host::Session::shared(dev);
        let keeper = match keep_inputs {
            true => resident::ResidentScans::new(session, budget),
            false => resident::ResidentScans::windows_only(session, budget),
        };
        Ok(ResidentScans {
            inner: Arc::new(Mutex::new(Some(keeper))),
        })
    }

    /// Bytes of device memory kept now.
    #[getter]
    fn kept_bytes(&self) -> u64 {
        lock_keeper(&self.inner)
            .as_ref()
            .map_or(0, |k| k.kept_bytes())
    }

    /// Entries kept now (one per table and set of staged columns).
    #[getter]
    fn entries(&self) -> usize {
        lock_keeper(&self.inner).as_ref().map_or(0, |k| k.entries())
    }

    /// Frees everything kept (idempotent); a scan still reading an entry then fails
    /// with the device's error for freed memory, never a wrong answer.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = lock_keeper(&self.inner).take();
        if let Some(k) = taken {
            py.detach(move || k.close()).map_err(Error::from)?;
        }
        Ok(())
    }
}

/// csx-data's pushdown scan of one table (see the module doc).
#[pyclass(module = "csx._native", frozen)]
#[derive(Debug)]
pub struct Scanner {
    /// `None` once closed.
    inner: Mutex<Option<csx_data::Scanner<'static>>>,
    program: Vec<u8>,
    chunk_rows: u64,
    chunks: u64,
    /// The resident entry the scan holds until it ends.
    lease: Mutex<Option<(Keeper, Lease)>>,
    /// Whether its inputs were kept (`resident`) and found staged (`reused`).
    resident: bool,
    reused: bool,
}

impl Scanner {
    /// Gives the resident entry back; `complete`: every chunk was staged into it,
    /// from these files.
    fn release(&self, complete: Option<Vec<Arc<DeviceColumn>>>) {
        let taken = self.lease.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((keeper, lease)) = taken {
            if let Some(k) = lock_keeper(&keeper).as_mut() {
                k.release(lease, complete.is_some(), complete);
            }
        }
    }

    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut csx_data::Scanner<'static>) -> Result<T> + Send,
    ) -> Result<T> {
        py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_mut() {
                Some(s) => f(s),
                None => Err(Error::value("the scan is closed")),
            }
        })
    }
}

impl Drop for Scanner {
    /// A scan dropped unread (DuckDB may ask for a stream it never reads) gives its
    /// lease back: the keeper's windows are not held for good.
    fn drop(&mut self) {
        self.release(None);
    }
}

#[pymethods]
impl Scanner {
    /// Opens the scan of `columns` of the table at `table` on `device`, keeping the
    /// rows that satisfy every predicate (column, op, values).
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (device, table, columns, predicates, engine="jit", chunk_rows=None, resident=None))]
    fn new(
        py: Python<'_>,
        device: &Bound<'_, PyDevice>,
        table: String,
        columns: Vec<String>,
        predicates: Vec<(String, String, Vec<i64>)>,
        engine: &str,
        chunk_rows: Option<u64>,
        resident: Option<&Bound<'_, ResidentScans>>,
    ) -> PyResult<Scanner> {
        let engine = crate::data::engine_of(engine)?;
        let preds = predicates
            .iter()
            .map(predicate_of)
            .collect::<Result<Vec<_>>>()?;
        let dev = device.get().device()?;
        let chunk_rows = chunk_rows.unwrap_or(csx_data::scan::CHUNK_ROWS_DEFAULT);
        let keeper = resident.map(|r| r.get().inner.clone());
        let k = keeper.clone();
        let (scanner, lease) = py.detach(move || -> Result<_> {
            let session = csx_host::Session::shared(dev);
            let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
            let opts = csx_data::ScanOptions { engine, chunk_rows };
            let mut guard = k.as_ref().map(lock_keeper);
            match guard.as_mut().and_then(|g| g.as_mut()) {
                Some(keeper) => Ok(csx_data::Scanner::open_kept(
                    session, &table, &cols, &preds, &opts, keeper,
                )?),
                None => Ok((
                    csx_data::Scanner::open(session, &table, &cols, &preds, &opts)?,
                    None,
                )),
            }
        })?;
        let resident = lease.as_ref().is_some_and(|l| l.keeps_inputs());
        let reused = lease.as_ref().is_some_and(|l| l.staged);
        Ok(Scanner {
            program: scanner.program().to_vec(),
            chunk_rows: scanner.chunk_rows(),
            chunks: scanner.chunks(),
            inner: Mutex::new(Some(scanner)),
            lease: Mutex::new(keeper.zip(lease)),
            resident,
            reused,
        })
    }

    /// Whether the scan's staged inputs are kept by a ResidentScans entry.
    #[getter]
    fn resident(&self) -> bool {
        self.resident
    }

    /// Whether that entry held them already (the scan stages nothing).
    #[getter]
    fn reused(&self) -> bool {
        self.reused
    }

    /// The scan program's raw eBPF image.
    #[getter]
    fn program(&self) -> Buffer {
        Buffer::new(self.program.clone())
    }

    /// Rows per chunk (the one asked for, or less so the windows fit).
    #[getter]
    fn chunk_rows(&self) -> u64 {
        self.chunk_rows
    }

    /// Chunks the scan runs (0 when a predicate selects nothing).
    #[getter]
    fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Runs the scan program from `slot`, where the caller loaded and activated
    /// `program` (and keeps it: the scan never unloads it).
    fn use_loaded(&self, py: Python<'_>, slot: u16) -> PyResult<()> {
        Ok(self.with(py, |s| {
            s.use_loaded(ProgramIndex(slot));
            Ok(())
        })?)
    }

    /// The next chunk's kept rows, or None after the last. Python's signal handlers
    /// run first: Ctrl-C stops a scan before its next chunk (a chunk's run is bounded
    /// by the device's time limit).
    fn next(&self, py: Python<'_>) -> PyResult<Option<ScanChunk>> {
        py.check_signals()?;
        let chunk = self.with(py, |s| {
            let c = s.next_chunk()?;
            Ok((c, s.finished().then(|| s.input_files())))
        });
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                // Copies of the batch after may still be in flight: they end before the
                // windows go back to the keeper (another scan may borrow them).
                let taken = (self.inner.lock().unwrap_or_else(|e| e.into_inner())).take();
                if let Some(s) = taken {
                    let _ = py.detach(move || s.close());
                }
                self.release(None);
                return Err(e.into());
            }
        };
        let Some(c) = chunk.0 else {
            self.release(chunk.1);
            return Ok(None);
        };
        let columns = c
            .columns
            .into_iter()
            .map(|b| Py::new(py, Buffer::new(b)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Some(ScanChunk {
            first_row: c.first_row,
            rows: c.rows,
            kept: c.kept,
            columns,
        }))
    }

    /// What the chunks cost so far: (modelled ns, bytes to the host, bytes staged
    /// from the media, fuel, commands, device execute ns).
    #[getter]
    fn meter(&self, py: Python<'_>) -> PyResult<(u64, u64, u64, u64, u64, u64)> {
        Ok(self.with(py, |s| {
            let m = s.meter();
            Ok((
                m.modelled_ns,
                m.bytes_to_host,
                m.media_bytes,
                m.fuel,
                m.commands,
                m.execute_ns,
            ))
        })?)
    }

    /// Frees the scan's device memory (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.release(None);
        let taken = {
            let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            guard.take()
        };
        if let Some(s) = taken {
            py.detach(move || s.close()).map_err(Error::from)?;
        }
        Ok(())
    }
}

/// Chunks of one whole-file read in flight at once (as `Device::read_file` does).
const READ_DEPTH: usize = 4;

/// Reads the whole file `path` with pipelined File Read commands; returns the bytes and
/// the commands' modelled ns summed.
fn read_timed(dev: &Device, path: &str) -> Result<(Vec<u8>, u64)> {
    let size = dev.stat(path)?.size_bytes;
    let piece = csx_host::proto::limits::FILE_IO_SIZE_MAX;
    let client = dev.client();
    let mut out = Vec::with_capacity(size as usize);
    let mut ns = 0;
    let mut next = 0;
    let mut in_flight = std::collections::VecDeque::new();
    let mut failure: Option<Error> = None;
    loop {
        while failure.is_none() && next < size && in_flight.len() < READ_DEPTH {
            let len = (size - next).min(piece);
            match client.submit_private(Op::FileRead {
                path: path.to_string(),
                offset: next,
                len,
            }) {
                Ok(id) => in_flight.push_back((id, len)),
                Err(e) => failure = Some(e.into()),
            }
            next += len;
        }
        let Some((id, len)) = in_flight.pop_front() else {
            break;
        };
        // Every submitted command is waited for, even after a failure.
        let c = match client.wait(id, None) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                failure.get_or_insert(e.into());
                continue;
            }
        };
        if failure.is_some() {
            continue;
        }
        if !c.status.is_success() {
            failure = Some(csx_host::CallError::from_completion("file-read", c).into());
            continue;
        }
        ns += c.timing.modelled_ns;
        match c.reply {
            Reply::Data(d) if d.len() as u64 == len => out.extend_from_slice(&d),
            _ => {
                failure = Some(Error::new(
                    Kind::Device,
                    "file-read: the device answered with the wrong length",
                ))
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok((out, ns)),
    }
}

/// Reads a whole file as the host-only path does (File Read commands), returning
/// its bytes and the commands' modelled ns summed.
#[pyfunction]
pub fn get_timed(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    path: String,
) -> PyResult<(Buffer, u64)> {
    let dev = device.get().device()?;
    let (data, ns) = py.detach(move || read_timed(&dev, &path))?;
    Ok((Buffer::new(data), ns))
}

/// A table's schema as csx-data reads it on the device (the column files' sizes
/// checked): (table name, rows, [(column, type, scale, dictionary entries)]).
type SchemaRow = (String, u64, Vec<(String, &'static str, u32, u64)>);

/// Reads the schema of the columnar table at `table` on `device` with csx-data's reader
/// (so Python follows the format csx-data reads).
#[pyfunction]
pub fn table_schema(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    table: String,
) -> PyResult<SchemaRow> {
    let dev = device.get().device()?;
    let schema = py.detach(move || -> Result<csx_data::Schema> {
        let mut session = csx_host::Session::shared(dev);
        Ok(csx_data::scan::device_schema(&mut session, &table)?)
    })?;
    let columns = schema
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.ty.name(), c.scale, c.entries))
        .collect();
    Ok((schema.table, schema.rows, columns))
}

/// The dictionary of dict column `column` of the table at `table`, read and checked
/// by csx-data (entries in code order).
#[pyfunction]
pub fn table_dictionary(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    table: String,
    column: String,
) -> PyResult<Vec<String>> {
    let dev = device.get().device()?;
    Ok(py.detach(move || -> Result<Vec<String>> {
        let mut session = csx_host::Session::shared(dev);
        let schema = csx_data::scan::device_schema(&mut session, &table)?;
        Ok(csx_data::scan::device_dictionary(
            &mut session,
            &table,
            &schema,
            &column,
        )?)
    })?)
}
