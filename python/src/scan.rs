//! The device half of a pushdown scan (`csx.scan`, `csx.duckdb.scan`): one chunk of
//! rows of a columnar table, filtered and projected on the device.
//!
//! For a chunk, every input column's file range is staged into device memory by a
//! Memory Copy on the device (the bytes never reach the host); the scan program (C
//! generated per query by `python/csx/scan.py`, compiled by clang, run by the device's
//! JIT) reads windows 0..n-1 (the inputs) and writes the selected rows' projected
//! values into window n, one segment of `chunk_rows * width` bytes per output column,
//! returning the number of rows kept; the host then reads `kept * width` bytes of each
//! segment: only the results cross the link.
//!
//! Every command's modelled time is summed (media, link and compute as the device's
//! performance profile prices them), and the bytes read to the host are counted.

use csx_host::proto::{CopySource, MemHandle, Op, ProgramIndex, Reply};
use csx_host::{Device, ExecuteRequest};
use pyo3::prelude::*;

use crate::buffer::Buffer;
use crate::device::PyDevice;
use crate::errors::{Error, Kind, Result};

/// Most bytes one Memory Read moves (`csx_proto::limits::MEM_IO_SIZE_MAX`).
const READ_PIECE: u64 = csx_host::proto::limits::MEM_IO_SIZE_MAX;

/// What one chunk's scan returned.
#[pyclass(module = "csx._native", frozen, get_all)]
#[derive(Debug)]
pub struct ScanChunk {
    /// Rows kept.
    rows: u64,
    /// One buffer per output column: `rows * width` bytes.
    columns: Vec<Py<Buffer>>,
    /// Bytes read back to the host.
    bytes_to_host: u64,
    /// Bytes staged on the device (Memory Copy from the files).
    bytes_staged: u64,
    /// Modelled ns of every command of the chunk, summed.
    modelled_ns: u64,
    /// Modelled ns of the execution alone.
    execute_modelled_ns: u64,
    /// Device ns the program ran (the completion's execute time).
    execute_ns: u64,
    fuel_used: u64,
}

struct Staged {
    rows: u64,
    columns: Vec<Vec<u8>>,
    bytes_to_host: u64,
    bytes_staged: u64,
    modelled_ns: u64,
    execute_modelled_ns: u64,
    execute_ns: u64,
    fuel_used: u64,
}

#[allow(clippy::too_many_arguments)]
fn run_chunk(
    dev: &Device,
    slot: u16,
    inputs: &[(String, u64)],
    first_row: u64,
    rows: u64,
    out_widths: &[u64],
    fuel: Option<u64>,
    handles: &mut Vec<MemHandle>,
) -> Result<Staged> {
    let client = dev.client();
    let mut modelled_ns = 0;
    let mut bytes_staged = 0;
    let mut request = ExecuteRequest::new(ProgramIndex(slot)).cparams(rows, 0);
    if let Some(f) = fuel {
        request = request.fuel(f);
    }
    for (path, width) in inputs {
        let len = rows * width;
        let h = dev.alloc(len)?;
        handles.push(h);
        let c = client.call_ok(Op::MemCopy {
            dst: h,
            dst_offset: 0,
            sources: vec![CopySource::File {
                path: path.clone(),
                offset: first_row * width,
                len,
            }],
        })?;
        if c.value != len {
            return Err(Error::new(
                Kind::Device,
                format!(
                    "{path}: staged {} bytes of rows {first_row}..{}, expected {len} (is the column file short?)",
                    c.value,
                    first_row + rows
                ),
            ));
        }
        modelled_ns += c.timing.modelled_ns;
        bytes_staged += len;
        request = request.window(h, 0, len);
    }
    let row_bytes: u64 = out_widths.iter().sum();
    let out_len = (rows * row_bytes).max(8);
    let out = dev.alloc(out_len)?;
    handles.push(out);
    request = request.window(out, 0, out_len);
    let run = dev.execute(&request)?;
    modelled_ns += run.timing.modelled_ns;
    if run.trapped() {
        let trap = run.trap.as_ref().map(|t| t.to_string()).unwrap_or_default();
        return Err(Error::new(
            Kind::Device,
            format!(
                "the scan program trapped on rows {first_row}..{}: {trap}",
                first_row + rows
            ),
        ));
    }
    let kept = run.r0_signed();
    if kept < 0 || kept as u64 > rows {
        return Err(Error::new(
            Kind::Device,
            format!(
                "the scan program returned {kept} for rows {first_row}..{} (a negative csx code or more rows than the chunk has)",
                first_row + rows
            ),
        ));
    }
    let kept = kept as u64;
    let mut columns = Vec::with_capacity(out_widths.len());
    let mut bytes_to_host = 0;
    let mut segment = 0;
    for width in out_widths {
        let len = kept * width;
        let mut bytes = if len <= READ_PIECE {
            Vec::new()
        } else {
            Vec::with_capacity(len as usize)
        };
        let mut at = 0;
        while at < len {
            let piece = (len - at).min(READ_PIECE);
            let c = client.call_ok(Op::MemRead {
                handle: out,
                offset: segment + at,
                len: piece,
            })?;
            modelled_ns += c.timing.modelled_ns;
            match c.reply {
                // A segment read in one command is lent as it came.
                Reply::Data(d) if d.len() as u64 == piece && piece == len => bytes = d,
                Reply::Data(d) if d.len() as u64 == piece => bytes.extend_from_slice(&d),
                _ => {
                    return Err(Error::new(
                        Kind::Device,
                        "mem-read: the device answered with the wrong length",
                    ))
                }
            }
            at += piece;
        }
        bytes_to_host += len;
        columns.push(bytes);
        segment += rows * width;
    }
    Ok(Staged {
        rows: kept,
        columns,
        bytes_to_host,
        bytes_staged,
        modelled_ns,
        execute_modelled_ns: run.timing.modelled_ns,
        execute_ns: run.timing.execute_ns,
        fuel_used: run.fuel_used,
    })
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

/// Scans rows [`first_row`, +`rows`) with the scan program in `slot`: `inputs` are
/// (column file, value width) staged as windows 0..n-1, `out_widths` the widths of
/// the output columns in window n (see the module doc).
#[pyfunction]
#[pyo3(signature = (device, slot, inputs, first_row, rows, out_widths, fuel=None))]
#[allow(clippy::too_many_arguments)]
pub fn scan_chunk(
    py: Python<'_>,
    device: &Bound<'_, PyDevice>,
    slot: u16,
    inputs: Vec<(String, u64)>,
    first_row: u64,
    rows: u64,
    out_widths: Vec<u64>,
    fuel: Option<u64>,
) -> PyResult<ScanChunk> {
    if rows == 0 {
        return Err(Error::value("rows must be at least 1").into());
    }
    if inputs.is_empty() || inputs.len() + 1 > csx_host::proto::limits::WINDOWS_MAX {
        return Err(Error::value(format!(
            "a scan stages 1 to {} input columns, got {}",
            csx_host::proto::limits::WINDOWS_MAX - 1,
            inputs.len()
        ))
        .into());
    }
    for (path, width) in &inputs {
        if !matches!(width, 1 | 2 | 4 | 8) {
            return Err(Error::value(format!("{path}: width {width} is not 1, 2, 4 or 8")).into());
        }
    }
    let dev = device.get().device()?;
    let staged = py.detach(move || {
        let mut handles = Vec::new();
        let result = run_chunk(
            &dev,
            slot,
            &inputs,
            first_row,
            rows,
            &out_widths,
            fuel,
            &mut handles,
        );
        for h in handles {
            // A failed free after a failed scan must not hide the scan's error.
            let freed = dev.free(h);
            if result.is_ok() {
                freed?;
            }
        }
        result
    })?;
    let columns = staged
        .columns
        .into_iter()
        .map(|c| Py::new(py, Buffer::new(c)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(ScanChunk {
        rows: staged.rows,
        columns,
        bytes_to_host: staged.bytes_to_host,
        bytes_staged: staged.bytes_staged,
        modelled_ns: staged.modelled_ns,
        execute_modelled_ns: staged.execute_modelled_ns,
        execute_ns: staged.execute_ns,
        fuel_used: staged.fuel_used,
    })
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
