//! Rust errors to Python exceptions.
//!
//! Every fallible call of the module returns [`Error`], built without the GIL held; it
//! becomes a Python exception through `csx.errors._from_native`, which picks the class
//! (the hierarchy lives in Python, `python/csx/errors.py`, so it can be documented,
//! subclassed and type-checked there). A device failure carries its completion status
//! (code and name), the command, and the device's detail (the function or component at
//! fault, its negative csx code and its message).

use csx_host::{CallError, FileTransferError, OpenError};
use csx_lambda::LambdaError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Which Python class family an error belongs to (see `csx/errors.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The device refused or failed a command: has a status.
    Device,
    /// The host refused a command before sending it (a field over a protocol limit).
    Limit,
    /// The device could not be opened.
    Open,
    /// The connection to the device failed.
    Transport,
    /// A program did not compile, load or verify on the host.
    Build,
    /// λ-IO failed on the host side (not a device status).
    Lambda,
    /// The daemon could not start or stop.
    Server,
    /// A local file could not be read or written.
    Io,
    /// Columnar data is corrupt or malformed, or a csx-data query cannot run.
    Data,
    /// The device handle was closed.
    Closed,
    /// A bad argument the native side detected (ValueError).
    Value,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Limit => "limit",
            Kind::Open => "open",
            Kind::Transport => "transport",
            Kind::Build => "build",
            Kind::Lambda => "lambda",
            Kind::Server => "server",
            Kind::Io => "io",
            Kind::Data => "data",
            Kind::Closed => "closed",
            Kind::Value => "value",
        }
    }
}

/// A failure on the native side, ready to become a Python exception.
#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    /// The device's failure, for [`Kind::Device`].
    pub failure: Option<Box<csx_host::DeviceFailure>>,
    /// A Python exception raised while the call waited (a signal handler's
    /// KeyboardInterrupt): raised as it is, after the device run was stopped.
    pub raised: Option<PyErr>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            failure: None,
            raised: None,
        }
    }

    pub fn value(message: impl Into<String>) -> Error {
        Error::new(Kind::Value, message)
    }

    /// An error of command `op` that came back as a failed execution (a trap).
    pub fn device(message: impl Into<String>, failure: csx_host::DeviceFailure) -> Error {
        Error {
            kind: Kind::Device,
            message: message.into(),
            failure: Some(Box::new(failure)),
            raised: None,
        }
    }

    /// A Python exception to raise as it is (see [`Error::raised`]).
    pub fn python(e: PyErr) -> Error {
        Error {
            kind: Kind::Value,
            message: e.to_string(),
            failure: None,
            raised: Some(e),
        }
    }
}

/// Runs the signal handlers Python has pending (Ctrl-C's raises KeyboardInterrupt).
/// Called without the GIL held, from a call that waits for the device: it takes the
/// GIL for the moment of the check.
pub fn check_signals() -> Result<()> {
    Python::attach(|py| py.check_signals()).map_err(Error::python)
}

impl From<CallError> for Error {
    fn from(e: CallError) -> Error {
        let message = e.to_string();
        match e {
            CallError::Invalid { .. } => Error::new(Kind::Limit, message),
            CallError::Transport(_) => Error::new(Kind::Transport, message),
            other => match other.failure() {
                Some(f) => Error::device(message, f.clone()),
                None => Error::new(Kind::Transport, message),
            },
        }
    }
}

impl From<csx_host::SessionError> for Error {
    /// A session step's failure: the device's status when it failed a command, with
    /// the step named in the message.
    fn from(e: csx_host::SessionError) -> Error {
        let message = e.to_string();
        match e {
            csx_host::SessionError::Device { source, .. } => Error {
                message,
                ..Error::from(source)
            },
            _ => Error::new(Kind::Io, message),
        }
    }
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        let kind = match e {
            OpenError::Transport(_) => Kind::Transport,
            _ => Kind::Open,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<FileTransferError> for Error {
    fn from(e: FileTransferError) -> Error {
        match e {
            FileTransferError::Call(c) => c.into(),
            other => Error::new(Kind::Io, other.to_string()),
        }
    }
}

impl From<LambdaError> for Error {
    fn from(e: LambdaError) -> Error {
        match e {
            LambdaError::Device(c) => c.into(),
            other => Error::new(Kind::Lambda, other.to_string()),
        }
    }
}

impl From<csx_workloads::compile::BuildError> for Error {
    fn from(e: csx_workloads::compile::BuildError) -> Error {
        Error::new(Kind::Build, e.to_string())
    }
}

impl From<csx_server::ServerError> for Error {
    fn from(e: csx_server::ServerError) -> Error {
        Error::new(Kind::Server, e.to_string())
    }
}

fn exception(py: Python<'_>, e: Error) -> PyResult<PyErr> {
    let fields = PyDict::new(py);
    if let Some(f) = &e.failure {
        fields.set_item("status", f.status.code())?;
        fields.set_item("status_name", f.status.name())?;
        fields.set_item("op", f.op)?;
        if let Some(d) = &f.detail {
            fields.set_item("function", &d.function)?;
            fields.set_item("code", d.code)?;
            fields.set_item("detail", &d.message)?;
        }
        if let Some(t) = &f.trap {
            fields.set_item("trap", t.to_string())?;
            fields.set_item("trap_kind", t.kind_name())?;
            fields.set_item("pc", t.pc)?;
        }
    }
    let make = py.import("csx.errors")?.getattr("_from_native")?;
    let value = make.call1((e.kind.name(), e.message, fields))?;
    Ok(PyErr::from_value(value))
}

impl From<Error> for PyErr {
    fn from(mut e: Error) -> PyErr {
        if let Some(raised) = e.raised.take() {
            return raised;
        }
        Python::attach(|py| {
            let message = e.message.clone();
            match exception(py, e) {
                Ok(err) => err,
                // The package's own module is missing or broken: say so with the
                // original message rather than lose it.
                Err(import) => PyRuntimeError::new_err(format!(
                    "{message} (and csx.errors could not build the exception: {import})"
                )),
            }
        })
    }
}

/// Every completion status of the protocol: (code, name, description), in code order
/// (the table `csx.errors` maps to exception classes; its test walks this one).
#[pyfunction]
pub fn statuses() -> Vec<(u16, &'static str, &'static str)> {
    csx_host::proto::Status::ALL
        .iter()
        .map(|s| (u16::from(s.code()), s.name(), s.text()))
        .collect()
}
