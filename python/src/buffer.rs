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
    data: Storage,
}

/// The vector behind a buffer, kept in the type it was made as, so typed results
/// (csx-data's column values) are lent to Python without copying them into bytes.
enum Storage {
    Bytes(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U32(Vec<u32>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        fn of<T>(v: &[T]) -> &[u8] {
            // SAFETY: i32, i64 and u32 (the only T used) have no padding and every byte
            // pattern is a valid u8; the slice covers exactly the vector's initialised
            // elements, and u8's alignment of 1 is met by any address.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        match self {
            Storage::Bytes(v) => v,
            Storage::I32(v) => of(v),
            Storage::I64(v) => of(v),
            Storage::U32(v) => of(v),
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes)", self.bytes().len())
    }
}

impl Buffer {
    pub fn new(data: Vec<u8>) -> Buffer {
        Buffer {
            data: Storage::Bytes(data),
        }
    }

    /// Little-endian i32 values (the bytes are the machine's: csx builds only for
    /// little-endian hosts, as the columnar format is little-endian).
    pub fn from_i32(data: Vec<i32>) -> Buffer {
        Buffer {
            data: Storage::I32(data),
        }
    }

    pub fn from_i64(data: Vec<i64>) -> Buffer {
        Buffer {
            data: Storage::I64(data),
        }
    }

    pub fn from_u32(data: Vec<u32>) -> Buffer {
        Buffer {
            data: Storage::U32(data),
        }
    }

    fn bytes(&self) -> &[u8] {
        self.data.bytes()
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
        let data = slf.get().bytes();
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
        self.bytes().len()
    }

    /// A copy of the bytes.
    fn __bytes__(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    fn __repr__(&self) -> String {
        format!("csx.Buffer({} bytes)", self.bytes().len())
    }

    /// The address of the first byte (for alignment checks).
    #[getter]
    fn address(&self) -> usize {
        self.bytes().as_ptr() as usize
    }
}
