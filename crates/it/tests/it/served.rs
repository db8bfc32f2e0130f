//! The shm and tcp backends of the suite: each test's device is served in-process by a
//! `csx_server::Server` (the daemon behind `csx device serve`) on a unique shm
//! name or a random loopback port, and every client connects to it as a separate host
//! would.
//!
//! Method: a process-wide registry maps a state directory to its running server. The
//! first open of a directory starts one; `stop` shuts it down cleanly (device closed,
//! file store flushed), so a fixture's restart is a real daemon restart on the same
//! state directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use csx_host::Device;
use csx_server::{ListenAddr, Server, ServerConfig};

use crate::Backend;

/// Which transport a served backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Shm,
    Tcp,
}

fn servers() -> MutexGuard<'static, HashMap<PathBuf, (Server, String)>> {
    static SERVERS: OnceLock<Mutex<HashMap<PathBuf, (Server, String)>>> = OnceLock::new();
    SERVERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A queue name no other test (or test process) uses.
pub fn unique_shm_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "it-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The listen address of a new server of `kind`.
pub fn listen_addr(kind: Kind) -> ListenAddr {
    match kind {
        Kind::Shm => ListenAddr::Shm(unique_shm_name()),
        Kind::Tcp => ListenAddr::Tcp("127.0.0.1:0".parse().expect("a socket address")),
    }
}

/// The URI of the server of `dir`, starting one if none runs.
pub fn uri_of(dir: &Path, kind: Kind) -> String {
    let mut s = servers();
    if let Some((_, uri)) = s.get(dir) {
        return uri.clone();
    }
    let config = ServerConfig {
        listen: vec![listen_addr(kind)],
        ..ServerConfig::default()
    };
    let server = Server::open(dir, config).expect("the device serves");
    let uri = server.uris()[0].clone();
    s.insert(dir.to_path_buf(), (server, uri.clone()));
    uri
}

fn open(dir: &Path, kind: Kind) -> Device {
    let uri = uri_of(dir, kind);
    Device::open(&uri).unwrap_or_else(|e| panic!("{uri} opens: {e}"))
}

fn open_shm(dir: &Path) -> Device {
    open(dir, Kind::Shm)
}

fn open_tcp(dir: &Path) -> Device {
    open(dir, Kind::Tcp)
}

/// Shuts the server of `dir` down cleanly, if one runs.
pub fn stop(dir: &Path) {
    let server = servers().remove(dir);
    if let Some((server, uri)) = server {
        server
            .shutdown()
            .unwrap_or_else(|e| panic!("{uri} shuts down cleanly: {e}"));
    }
}

pub const SHM: Backend = Backend {
    name: "shm",
    open: open_shm,
    stop,
};

pub const TCP: Backend = Backend {
    name: "tcp",
    open: open_tcp,
    stop,
};
