//! [`Buffer`]: bytes that came back from the device, owned by Rust and lent to Python
//! through the buffer protocol.
//!
//! `numpy.frombuffer(buf, dtype)`, `memoryview(buf)` and `pyarrow.py_buffer(buf)` all
//! view the same memory without a copy; the views keep the `Buffer` alive. The bytes
//! never change after construction (the class is frozen and exports read-only views),
//! so no view can observe a write.

use std::ffi::{c_int, c_void};

use pyo3::ffi;
use pyo3::prelude::*;

/// Read-only bytes from the device (supports the buffer protocol: wrap it with
/// `numpy.frombuffer`, `memoryview` or `pyarrow.py_buffer` without copying).
#[pyclass(module = "csx._native", frozen)]
pub struct Buffer {
    data: Vec<u8>,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes)", self.data.len())
    }
}

impl Buffer {
    pub fn new(data: Vec<u8>) -> Buffer {
        Buffer { data }
    }
}

#[pymethods]
impl Buffer {
    /// # Safety
    /// Called by CPython with a valid `view` to fill (the buffer protocol's contract).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let data = &slf.get().data;
        let len = ffi::Py_ssize_t::try_from(data.len())
            .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("buffer too large"))?;
        // SAFETY: `view` is the valid, writable Py_buffer CPython passes to this slot.
        // PyBuffer_FillInfo stores a new reference to `slf` in view->obj, so the frozen
        // Buffer (and the Vec's heap block, which is never reallocated or written after
        // construction) outlives every view. readonly=1: a consumer asking for a
        // writable view gets BufferError, so the memory is never written through it.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                data.as_ptr() as *mut c_void,
                len,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// A copy of the bytes.
    fn __bytes__(&self) -> Vec<u8> {
        self.data.clone()
    }

    fn __repr__(&self) -> String {
        format!("csx.Buffer({} bytes)", self.data.len())
    }

    /// The address of the first byte (for alignment checks).
    #[getter]
    fn address(&self) -> usize {
        self.data.as_ptr() as usize
    }
}
