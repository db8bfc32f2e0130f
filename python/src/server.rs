//! `csx._native.Server`: a device daemon in this process (what `csx device serve`
//! runs), for tests and notebooks that want a `tcp://` or `shm://` device without the
//! CLI.

use std::path::PathBuf;
use std::sync::Mutex;

use csx_server::{ListenAddr, Server, ServerConfig};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{Error, Kind, Result};

/// A running daemon serving one device.
#[pyclass(module = "csx._native", name = "Server", frozen)]
#[derive(Debug)]
pub struct PyServer {
    /// `None` once shut down.
    inner: Mutex<Option<Server>>,
    uris: Vec<String>,
}

#[pymethods]
impl PyServer {
    /// Serves the device in the state directory `state` on every URI of `listen`
    /// (tcp://HOST:PORT with port 0 for any free port, shm://NAME).
    #[staticmethod]
    #[pyo3(signature = (state, listen, token=None))]
    fn start(
        py: Python<'_>,
        state: PathBuf,
        listen: Vec<String>,
        token: Option<String>,
    ) -> PyResult<PyServer> {
        let server = py.detach(move || -> Result<Server> {
            let listen = listen
                .iter()
                .map(|u| ListenAddr::parse(u))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let config = ServerConfig {
                listen,
                token: token.map(String::into_bytes),
            };
            Ok(Server::open(&state, config)?)
        })?;
        let uris = server.uris().to_vec();
        Ok(PyServer {
            inner: Mutex::new(Some(server)),
            uris,
        })
    }

    /// The URIs clients connect to (the ports the system chose for port 0).
    #[getter]
    fn uris(&self) -> Vec<String> {
        self.uris.clone()
    }

    /// Counters: clients_connected, clients_total, clients_refused, commands_served.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let server = guard
            .as_ref()
            .ok_or_else(|| Error::new(Kind::Closed, "the server is shut down"))?;
        let s = server.status();
        let d = PyDict::new(py);
        d.set_item("clients_connected", s.clients_connected)?;
        d.set_item("clients_total", s.clients_total)?;
        d.set_item("clients_refused", s.clients_refused)?;
        d.set_item("commands_served", s.commands_served)?;
        Ok(d)
    }

    /// Stops accepting, answers what is in flight, disconnects clients and closes the
    /// device. Shutting down twice does nothing.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(server) = taken {
            py.detach(move || server.shutdown().map_err(Error::from))?;
        }
        Ok(())
    }
}
