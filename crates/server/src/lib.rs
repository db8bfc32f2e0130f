//! The device daemon behind `csx device serve`: one device, served to many clients at
//! once over the shm and tcp transports.
//!
//! ```text
//!  Server::start ──▶ one acceptor thread per listen address
//!                      │ (tcp listener / shm handshake socket, polled so shutdown
//!                      │  is noticed within ACCEPT_POLL)
//!                      ▼
//!                    per client: a connection thread (host → device: decode, submit)
//!                                 + a completion thread (device → host: reap, send)
//!                                 around its own device queue pair
//! ```
//!
//! Each client gets its own queue pair, so its allocations and range sets are its own
//! and are reclaimed when it goes, however it goes (clean close, crash, broken
//! connection); its executions in flight are aborted when it goes. [`Server::shutdown`]
//! stops accepting, lets every connection stop taking commands, abort its executions
//! and finish (and answer) the other commands in flight, then closes the device (workers
//! drained, shared state saved, file store flushed).
//!
//! Invariants: at most [`CONNECTIONS_MAX`] connections hold a thread at once; a
//! connection drops its queue pair before it closes its socket or handshake channel, so
//! a client whose close returned sees its memory reclaimed.

#![warn(clippy::too_many_lines)]

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use csx_device::{DeviceError, DeviceRuntime};

use csx_host::transport::shm as shm_transport;

mod help;
mod peer;
mod quota;
mod replies;
// The shared-memory transport's connect and serve paths are still long functions, split
// in their own change; the lint applies to it once they are.
#[allow(clippy::too_many_lines)]
pub mod shm;
pub mod tcp;

pub use quota::{
    ClientLimits, CLIENT_MEMORY_SHARE, CLIENT_QUEUE_DEFAULT, CLIENT_REPLY_BYTES_DEFAULT,
    CLIENT_REPLY_BYTES_MIN, CLIENT_SLOTS_DEFAULT,
};

/// How long a client may take no byte of what the daemon writes to it before the
/// daemon drops it (a client that stopped reading), unless [`ServerOptions::write_stall`]
/// says otherwise.
pub const WRITE_STALL_DEFAULT: Duration = Duration::from_secs(30);

/// How often blocked server threads look at the stop flag: the bound on how long a
/// shutdown waits for an idle thread to notice.
pub const ACCEPT_POLL: Duration = Duration::from_millis(100);

pub use csx_proto::limits::SERVER_CONNECTIONS_MAX as CONNECTIONS_MAX;

/// Connections one source (a tcp client's IP address, an shm client's user) may hold a
/// thread for at once, unless [`ServerOptions::connections_per_source`] says otherwise:
/// so one address or user, however hostile, leaves at least 8 of the
/// [`CONNECTIONS_MAX`] threads to everyone else.
pub const CONNECTIONS_PER_SOURCE_DEFAULT: usize = CONNECTIONS_MAX - 8;

/// Connections one source may have in their handshake at once (they count against its
/// [`CONNECTIONS_PER_SOURCE_DEFAULT`] too): connections that never send their hello hold
/// at most these, however many a source opens, and never its whole share. Many real
/// clients of one host (one tcp source) handshake at once under load, so this is most of
/// the share: what frees a place for them is [`HANDSHAKE_EVICT_AFTER`], not a small cap.
pub const HANDSHAKES_PER_SOURCE: usize = CONNECTIONS_PER_SOURCE_DEFAULT - 8;

/// How long a connection may stay in its handshake before a newer one of its source,
/// finding [`HANDSHAKES_PER_SOURCE`] in their handshake, hangs it up to take its place
/// (a client's own handshake takes milliseconds).
pub const HANDSHAKE_EVICT_AFTER: Duration = Duration::from_millis(500);

/// Where a connection comes from, for [`CONNECTIONS_PER_SOURCE_DEFAULT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Address(std::net::IpAddr),
    User(u32),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Address(ip) => write!(f, "address {ip}"),
            Source::User(uid) => write!(f, "user {uid}"),
        }
    }
}

/// Why [`Context::spawn_connection`] refused a connection; the text is for the client.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Every connection thread is taken.
    Full,
    /// This source holds its limit.
    SourceFull { source: Source, limit: usize },
    /// This source has [`HANDSHAKES_PER_SOURCE`] connections in their handshake, none
    /// of them for longer than [`HANDSHAKE_EVICT_AFTER`].
    Handshakes { source: Source },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Full => write!(
                f,
                "the device serves {CONNECTIONS_MAX} connections, its limit; try again later"
            ),
            Refusal::SourceFull { source, limit } => write!(
                f,
                "{source} holds {limit} connections, its limit per source (the device serves {CONNECTIONS_MAX} connections in all); close some and try again"
            ),
            Refusal::Handshakes { source } => write!(
                f,
                "{source} has {HANDSHAKES_PER_SOURCE} connections in their handshake, its limit per source; try again in {} ms",
                HANDSHAKE_EVICT_AFTER.as_millis()
            ),
        }
    }
}

/// Counts a source's connection while it lives.
struct SourceGuard {
    ctx: Arc<Context>,
    source: Source,
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        let mut sources = self.ctx.sources.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = sources.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                sources.remove(&self.source);
            }
        }
    }
}

/// A connection in its handshake: how to hang it up when a newer one of its source
/// takes its place.
struct Handshaking {
    id: u64,
    since: Instant,
    hang_up: Box<dyn Fn() + Send>,
}

impl std::fmt::Debug for Handshaking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshaking")
            .field("id", &self.id)
            .field("since", &self.since)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The connection this thread serves, while it is in its handshake: (source, id).
    static HANDSHAKE: std::cell::Cell<Option<(Source, u64)>> = const { std::cell::Cell::new(None) };
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("listen address {uri:?}: {reason}")]
    BadListen { uri: String, reason: String },
    #[error("cannot listen on {uri}: {source}")]
    Listen { uri: String, source: std::io::Error },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("cannot start a server thread: {source}")]
    Spawn { source: std::io::Error },
    #[error("tls certificate {} or key {}: {source}", cert.display(), key.display())]
    Tls {
        cert: std::path::PathBuf,
        key: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A per-client limit the device cannot honour or that is too small to work.
    #[error("{what} is {value}: {reason}")]
    BadLimit {
        what: &'static str,
        value: String,
        reason: String,
    },
    #[error("a server thread panicked")]
    Panicked,
}

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenAddr {
    /// `tcp://HOST:PORT`; `tcp://:PORT` and `tcp://PORT` mean the loopback address.
    Tcp(SocketAddr),
    /// `shm://NAME`.
    Shm(String),
    /// `tcps://HOST:PORT`: tcp with TLS (needs [`ServerOptions::tls`]).
    Tcps(SocketAddr),
}

impl ListenAddr {
    /// Parses a listen URI (see the variants).
    pub fn parse(uri: &str) -> Result<ListenAddr, ServerError> {
        let bad = |reason: &str| ServerError::BadListen {
            uri: uri.to_string(),
            reason: reason.to_string(),
        };
        if let Some(name) = uri.strip_prefix("shm://") {
            shm_transport::check_name(name).map_err(|reason| bad(&reason))?;
            return Ok(ListenAddr::Shm(name.to_string()));
        }
        let (tls, rest) = match (uri.strip_prefix("tcp://"), uri.strip_prefix("tcps://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err(bad("use tcp://HOST:PORT, tcps://HOST:PORT or shm://NAME")),
        };
        // A missing host is the loopback address: serving beyond this machine is
        // something to ask for by name.
        let spec = match rest.rsplit_once(':') {
            None => format!("127.0.0.1:{rest}"),
            Some(("", port)) => format!("127.0.0.1:{port}"),
            Some(_) => rest.to_string(),
        };
        let addr = spec
            .to_socket_addrs()
            .map_err(|e| bad(&e.to_string()))?
            .next()
            .ok_or_else(|| bad("resolves to no address"))?;
        Ok(if tls {
            ListenAddr::Tcps(addr)
        } else {
            ListenAddr::Tcp(addr)
        })
    }
}

/// How the server runs.
#[derive(Clone, Default)]
pub struct ServerConfig {
    pub listen: Vec<ListenAddr>,
    /// The shared secret tcp clients must present; `None` accepts every client.
    pub token: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .finish()
    }
}

/// How the server guards the device beyond [`ServerConfig`]: per-client limits and
/// what happens to a departing client's programs (see [`ClientLimits`]).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ServerOptions {
    /// What one client may hold; `None`: [`ClientLimits::unlimited`] (`csx device
    /// serve` passes [`ClientLimits::for_device`] unless told otherwise).
    pub limits: Option<ClientLimits>,
    /// Unload the programs a client loaded and did not unload when it goes (otherwise
    /// they persist, as TP4091's programs do, and only stop counting against it).
    pub reclaim_programs: bool,
    /// The certificate chain and private key (PEM files) of `tcps://` listeners.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// How long a client may take no byte the daemon writes before it is dropped;
    /// `None`: [`WRITE_STALL_DEFAULT`].
    pub write_stall: Option<Duration>,
    /// Serve shm clients running as other users (by default only the daemon's own
    /// user, and root, may connect; see `shm`).
    pub shm_other_users: bool,
    /// Connections one tcp address or shm user may hold at once; `None`:
    /// [`CONNECTIONS_PER_SOURCE_DEFAULT`].
    pub connections_per_source: Option<usize>,
}

impl ServerOptions {
    /// The defaults: no per-client limit beyond the device's own, programs persist.
    pub fn new() -> ServerOptions {
        ServerOptions::default()
    }

    /// With these per-client limits.
    pub fn limits(mut self, limits: ClientLimits) -> ServerOptions {
        self.limits = Some(limits);
        self
    }

    /// Serving `tcps://` addresses with this certificate chain and key (PEM files).
    pub fn tls(mut self, cert: std::path::PathBuf, key: std::path::PathBuf) -> ServerOptions {
        self.tls = Some((cert, key));
        self
    }

    /// At most `n` connections at once from one tcp address or shm user (1 to
    /// [`CONNECTIONS_MAX`]).
    pub fn connections_per_source(mut self, n: usize) -> ServerOptions {
        self.connections_per_source = Some(n);
        self
    }

    /// Dropping a client that takes no byte for `stall` (at least 1 s).
    pub fn write_stall(mut self, stall: Duration) -> ServerOptions {
        self.write_stall = Some(stall);
        self
    }

    /// Serving (`true`) shm clients of any user, not only the daemon's own.
    pub fn shm_other_users(mut self, allow: bool) -> ServerOptions {
        self.shm_other_users = allow;
        self
    }

    /// Unloading (`true`) or keeping the programs of a departed client.
    pub fn reclaim_programs(mut self, reclaim: bool) -> ServerOptions {
        self.reclaim_programs = reclaim;
        self
    }
}

/// Counters an operator reads in the status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStatus {
    /// Clients with a queue pair now.
    pub clients_connected: u64,
    /// Clients that ever had a queue pair.
    pub clients_total: u64,
    /// Connections refused (authentication, no queue pair left, bad handshake).
    pub clients_refused: u64,
    /// Completions sent back to clients.
    pub commands_served: u64,
    /// Bytes of read replies all clients have in flight (see [`ClientLimits::reply_bytes`]).
    pub reply_bytes_held: u64,
}

/// What every server thread shares.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) device: DeviceRuntime,
    pub(crate) token: Option<Vec<u8>>,
    pub(crate) limits: ClientLimits,
    pub(crate) reclaim_programs: bool,
    pub(crate) slot_owners: quota::SlotOwners,
    pub(crate) stopping: AtomicBool,
    pub(crate) clients_connected: AtomicU64,
    pub(crate) clients_total: AtomicU64,
    pub(crate) clients_refused: AtomicU64,
    pub(crate) commands_served: AtomicU64,
    pub(crate) reply_bytes_held: Arc<AtomicU64>,
    pub(crate) write_stall: Duration,
    pub(crate) shm_other_users: bool,
    connections: Mutex<Vec<JoinHandle<()>>>,
    /// Live connections by source, and the most one source may hold.
    sources: Mutex<std::collections::HashMap<Source, usize>>,
    source_max: usize,
    /// Connections in their handshake by source, oldest first.
    handshaking: Mutex<std::collections::HashMap<Source, std::collections::VecDeque<Handshaking>>>,
    next_connection: AtomicU64,
}

impl Context {
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    pub(crate) fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Runs `serve` on a new thread for one connection from `source`, or refuses when
    /// [`CONNECTIONS_MAX`] are running or `source` holds its limit (the caller then tells
    /// the client and closes the connection).
    ///
    /// The connection counts as in its handshake until its thread calls
    /// [`Context::client_connected`]; `hang_up` ends it (shuts its socket down) when a
    /// newer connection of `source` takes its place (see [`HANDSHAKES_PER_SOURCE`]).
    pub(crate) fn spawn_connection(
        self: &Arc<Self>,
        name: String,
        source: Source,
        hang_up: Box<dyn Fn() + Send>,
        serve: impl FnOnce(Arc<Context>) + Send + 'static,
    ) -> Result<(), Refusal> {
        let id = self.make_room_to_handshake(source, hang_up)?;
        let spawned = self.spawn_counted(name, source, id, serve);
        if spawned.is_err() {
            self.handshake_over(source, id);
        }
        spawned
    }

    /// Takes a handshake place for a new connection of `source`: a free one, or the
    /// place of its oldest connection in its handshake for longer than
    /// [`HANDSHAKE_EVICT_AFTER`], which is hung up.
    fn make_room_to_handshake(
        &self,
        source: Source,
        hang_up: Box<dyn Fn() + Send>,
    ) -> Result<u64, Refusal> {
        let mut all = self.handshaking.lock().unwrap_or_else(|p| p.into_inner());
        let mine = all.entry(source).or_default();
        if mine.len() >= HANDSHAKES_PER_SOURCE {
            if mine
                .front()
                .is_some_and(|h| h.since.elapsed() < HANDSHAKE_EVICT_AFTER)
            {
                return Err(Refusal::Handshakes { source });
            }
            let oldest = mine.pop_front().expect("not empty");
            tracing::warn!(%source, "hanging up a connection silent in its handshake for a newer one");
            (oldest.hang_up)();
        }
        let id = self.next_connection.fetch_add(1, Ordering::Relaxed);
        mine.push_back(Handshaking {
            id,
            since: Instant::now(),
            hang_up,
        });
        Ok(id)
    }

    /// Connection `id` of `source` left its handshake (connected, or gone).
    fn handshake_over(&self, source: Source, id: u64) {
        let mut all = self.handshaking.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mine) = all.get_mut(&source) {
            mine.retain(|h| h.id != id);
            if mine.is_empty() {
                all.remove(&source);
            }
        }
    }

    fn spawn_counted(
        self: &Arc<Self>,
        name: String,
        source: Source,
        id: u64,
        serve: impl FnOnce(Arc<Context>) + Send + 'static,
    ) -> Result<(), Refusal> {
        let mut connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        // Finished threads are joined here, so the list holds live ones only.
        let (done, live): (Vec<_>, Vec<_>) = connections.drain(..).partition(|h| h.is_finished());
        *connections = live;
        for h in done {
            let _ = h.join();
        }
        if connections.len() >= CONNECTIONS_MAX {
            return Err(Refusal::Full);
        }
        {
            let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
            let held = sources.entry(source).or_insert(0);
            if *held >= self.source_max {
                return Err(Refusal::SourceFull {
                    source,
                    limit: self.source_max,
                });
            }
            *held += 1;
        }
        let guard = SourceGuard {
            ctx: Arc::clone(self),
            source,
        };
        let ctx = Arc::clone(self);
        match std::thread::Builder::new().name(name).spawn(move || {
            let _guard = guard;
            HANDSHAKE.with(|h| h.set(Some((source, id))));
            serve(Arc::clone(&ctx));
            // A connection whose handshake failed leaves its place too.
            if let Some((source, id)) = HANDSHAKE.with(std::cell::Cell::take) {
                ctx.handshake_over(source, id);
            }
        }) {
            Ok(h) => {
                connections.push(h);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a connection thread");
                Err(Refusal::Full)
            }
        }
    }

    /// A connection got its queue pair (called on its thread: it leaves its handshake).
    pub(crate) fn client_connected(&self) {
        if let Some((source, id)) = HANDSHAKE.with(std::cell::Cell::take) {
            self.handshake_over(source, id);
        }
        Context::count(&self.clients_connected, 1);
        Context::count(&self.clients_total, 1);
    }

    /// A connection dropped its queue pair.
    pub(crate) fn client_disconnected(&self) {
        self.clients_connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Refuses per-client limits the device cannot honour (more than it has) or too small
/// to work, naming the value and the bound.
fn check_limits(limits: &ClientLimits, slm_size_bytes: u64) -> Result<(), ServerError> {
    use csx_proto::limits::{PROGRAM_SLOTS_COUNT, QUEUE_DEPTH_MAX};
    let bad = |what, value: String, reason: String| {
        Err(ServerError::BadLimit {
            what,
            value,
            reason,
        })
    };
    let size = csx_host::size::format_size;
    if limits.memory_bytes == 0 {
        return bad(
            "the client memory limit",
            "0".into(),
            "must be at least 1 byte".into(),
        );
    }
    if limits.memory_bytes > slm_size_bytes {
        return bad(
            "the client memory limit",
            size(limits.memory_bytes),
            format!("the device has only {} of SLM", size(slm_size_bytes)),
        );
    }
    if limits.program_slots == 0 {
        return bad(
            "the client program slot limit",
            "0".into(),
            "must be at least 1".into(),
        );
    }
    if limits.program_slots > PROGRAM_SLOTS_COUNT {
        return bad(
            "the client program slot limit",
            limits.program_slots.to_string(),
            format!("the device has only {PROGRAM_SLOTS_COUNT} program slots"),
        );
    }
    if limits.queued_commands == 0 {
        return bad(
            "the client queue limit",
            "0".into(),
            "must be at least 1".into(),
        );
    }
    if limits.queued_commands > QUEUE_DEPTH_MAX {
        return bad(
            "the client queue limit",
            limits.queued_commands.to_string(),
            format!("a queue holds at most {QUEUE_DEPTH_MAX} commands"),
        );
    }
    if limits.reply_bytes < CLIENT_REPLY_BYTES_MIN {
        return bad(
            "the client reply memory limit",
            size(limits.reply_bytes),
            format!(
                "must be at least {} (one of the largest reads)",
                size(CLIENT_REPLY_BYTES_MIN)
            ),
        );
    }
    Ok(())
}

/// A running device daemon (see the module doc).
#[derive(Debug)]
pub struct Server {
    /// Taken by `shutdown` to close the device.
    ctx: Option<Arc<Context>>,
    acceptors: Vec<JoinHandle<()>>,
    bound: Vec<String>,
    shm_paths: Vec<std::path::PathBuf>,
}

/// The connections allowed per source address and the write stall limit of `options`
/// (defaults when unset), each checked against its range.
fn check_connection_limits(options: &ServerOptions) -> Result<(usize, Duration), ServerError> {
    let source_max = options
        .connections_per_source
        .unwrap_or(CONNECTIONS_PER_SOURCE_DEFAULT);
    if !(1..=CONNECTIONS_MAX).contains(&source_max) {
        return Err(ServerError::BadLimit {
            what: "the connections per source",
            value: source_max.to_string(),
            reason: format!("must be 1..={CONNECTIONS_MAX}"),
        });
    }
    let write_stall = options.write_stall.unwrap_or(WRITE_STALL_DEFAULT);
    if write_stall < Duration::from_secs(1) {
        return Err(ServerError::BadLimit {
            what: "the write stall limit",
            value: format!("{write_stall:?}"),
            reason: "must be at least 1 s".to_string(),
        });
    }
    Ok((source_max, write_stall))
}

/// The TLS configuration of `tcps://` listeners, from the certificate and key files of
/// `options` (none without them).
fn tls_config(options: &ServerOptions) -> Result<Option<Arc<rustls::ServerConfig>>, ServerError> {
    Ok(match &options.tls {
        Some((cert, key)) => Some(
            csx_host::transport::tcp::conn::tls::server_config(cert, key).map_err(|source| {
                ServerError::Tls {
                    cert: cert.clone(),
                    key: key.clone(),
                    source,
                }
            })?,
        ),
        None => None,
    })
}

impl Server {
    /// Opens the device in the state directory `dir` and serves it.
    pub fn open(dir: &Path, config: ServerConfig) -> Result<Server, ServerError> {
        Server::start(DeviceRuntime::open(dir)?, config)
    }

    /// Opens the device in `dir` and serves it with `options`.
    pub fn open_with(
        dir: &Path,
        config: ServerConfig,
        options: ServerOptions,
    ) -> Result<Server, ServerError> {
        Server::start_with(DeviceRuntime::open(dir)?, config, options)
    }

    /// Serves `device` on every address of `config`, with the default options.
    pub fn start(device: DeviceRuntime, config: ServerConfig) -> Result<Server, ServerError> {
        Server::start_with(device, config, ServerOptions::default())
    }

    /// Serves `device` on every address of `config`.
    pub fn start_with(
        device: DeviceRuntime,
        config: ServerConfig,
        options: ServerOptions,
    ) -> Result<Server, ServerError> {
        if config.listen.is_empty() {
            return Err(ServerError::BadListen {
                uri: String::new(),
                reason: "no listen address".to_string(),
            });
        }
        let limits = options
            .limits
            .unwrap_or_else(|| ClientLimits::unlimited(device.config().slm_size_bytes));
        check_limits(&limits, device.config().slm_size_bytes)?;
        let (source_max, write_stall) = check_connection_limits(&options)?;
        let tls = tls_config(&options)?;
        let unverified = device.file_store().unverified_blocks();
        if unverified > 0 {
            tracing::warn!(
                blocks = unverified,
                bytes = unverified * csx_device::nvm::BLOCK_SIZE,
                "the image was made before the file store kept block checksums: these blocks read unverified until they are rewritten"
            );
        }
        // A served device reads its peers' storage itself (D2D over tcp).
        device.set_peer_link(Arc::new(peer::TcpPeers::default()));
        let ctx = Arc::new(Context {
            device,
            token: config.token,
            limits,
            reclaim_programs: options.reclaim_programs,
            slot_owners: Default::default(),
            stopping: AtomicBool::new(false),
            clients_connected: AtomicU64::new(0),
            clients_total: AtomicU64::new(0),
            clients_refused: AtomicU64::new(0),
            commands_served: AtomicU64::new(0),
            reply_bytes_held: Arc::new(AtomicU64::new(0)),
            write_stall,
            shm_other_users: options.shm_other_users,
            connections: Mutex::new(Vec::new()),
            sources: Mutex::new(std::collections::HashMap::new()),
            source_max,
            handshaking: Mutex::new(std::collections::HashMap::new()),
            next_connection: AtomicU64::new(0),
        });
        let mut server = Server {
            ctx: Some(ctx),
            acceptors: Vec::new(),
            bound: Vec::new(),
            shm_paths: Vec::new(),
        };
        for addr in &config.listen {
            // On failure the listeners already started are stopped by `Drop`.
            server.listen(addr, tls.as_ref())?;
        }
        Ok(server)
    }

    fn ctx(&self) -> &Arc<Context> {
        self.ctx.as_ref().expect("present until shutdown")
    }

    fn listen(
        &mut self,
        addr: &ListenAddr,
        tls: Option<&Arc<rustls::ServerConfig>>,
    ) -> Result<(), ServerError> {
        let spawn = |name: String, run: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(run)
                .map_err(|source| ServerError::Spawn { source })
        };
        match addr {
            ListenAddr::Tcp(sa) | ListenAddr::Tcps(sa) => {
                let tls = match addr {
                    ListenAddr::Tcps(_) => Some(Arc::clone(tls.ok_or_else(|| {
                        ServerError::BadListen {
                            uri: format!("tcps://{sa}"),
                            reason: "tcps needs a certificate and key (--tls-cert, --tls-key)"
                                .to_string(),
                        }
                    })?)),
                    _ => None,
                };
                let scheme = if tls.is_some() { "tcps" } else { "tcp" };
                let uri = format!("{scheme}://{sa}");
                let listener = TcpListener::bind(sa).map_err(|source| ServerError::Listen {
                    uri: uri.clone(),
                    source,
                })?;
                let local = listener
                    .local_addr()
                    .map_err(|source| ServerError::Listen {
                        uri: uri.clone(),
                        source,
                    })?;
                if !local.ip().is_loopback() && self.ctx().token.is_none() {
                    tracing::warn!(
                        address = %local,
                        "serving beyond loopback without a token: any host that reaches this address may use the device"
                    );
                }
                let ctx = Arc::clone(self.ctx());
                let h = spawn(
                    format!("csx-accept-{local}"),
                    Box::new(move || tcp::accept_loop(listener, &ctx, tls)),
                )?;
                self.acceptors.push(h);
                self.bound.push(format!("{scheme}://{local}"));
            }
            ListenAddr::Shm(name) => {
                let other_users = self.ctx().shm_other_users;
                let (listener, path) =
                    shm::bind(name, other_users).map_err(|source| ServerError::Listen {
                        uri: format!("shm://{name}"),
                        source,
                    })?;
                let ctx = Arc::clone(self.ctx());
                let h = spawn(
                    format!("csx-accept-shm-{name}"),
                    Box::new(move || shm::accept_loop(listener, &ctx)),
                )?;
                self.acceptors.push(h);
                self.bound.push(format!("shm://{name}"));
                self.shm_paths.push(path);
            }
        }
        Ok(())
    }

    /// The URIs clients connect to, with the ports the system chose for port 0.
    pub fn uris(&self) -> &[String] {
        &self.bound
    }

    /// The per-client limits in force.
    pub fn limits(&self) -> ClientLimits {
        self.ctx().limits
    }

    /// Counters for a status line.
    pub fn status(&self) -> ServerStatus {
        let c = self.ctx();
        ServerStatus {
            clients_connected: c.clients_connected.load(Ordering::Relaxed),
            clients_total: c.clients_total.load(Ordering::Relaxed),
            clients_refused: c.clients_refused.load(Ordering::Relaxed),
            commands_served: c.commands_served.load(Ordering::Relaxed),
            reply_bytes_held: c.reply_bytes_held.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, answers every command in flight (executions aborted, the others
    /// finished), disconnects every client, and closes the device.
    pub fn shutdown(mut self) -> Result<(), ServerError> {
        self.stop_threads()?;
        let ctx = self.ctx.take().expect("present until shutdown");
        // Every thread holding the context has been joined.
        let ctx = Arc::try_unwrap(ctx).map_err(|_| ServerError::Panicked)?;
        ctx.device.close()?;
        Ok(())
    }

    fn stop_threads(&mut self) -> Result<(), ServerError> {
        let Some(ctx) = self.ctx.as_ref() else {
            return Ok(());
        };
        ctx.stopping.store(true, Ordering::Release);
        let mut panicked = false;
        for h in self.acceptors.drain(..) {
            panicked |= h.join().is_err();
        }
        let connections: Vec<_> = ctx
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for h in connections {
            panicked |= h.join().is_err();
        }
        for path in self.shm_paths.drain(..) {
            let _ = std::fs::remove_file(path);
        }
        if panicked {
            return Err(ServerError::Panicked);
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // `shutdown` already stopped everything; otherwise stop now, losing errors. The
        // device closes when the last reference to the context goes.
        let _ = self.stop_threads();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            ListenAddr::parse("tcp://:7000").unwrap(),
            ListenAddr::Tcp("127.0.0.1:7000".parse().unwrap())
        );
        assert_eq!(
            ListenAddr::parse("tcp://7001").unwrap(),
            ListenAddr::Tcp("127.0.0.1:7001".parse().unwrap())
        );
        assert_eq!(
            ListenAddr::parse("tcp://127.0.0.1:0").unwrap(),
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            ListenAddr::parse("shm://dev0").unwrap(),
            ListenAddr::Shm("dev0".into())
        );
        assert!(ListenAddr::parse("shm://a/b").is_err());
        assert_eq!(
            ListenAddr::parse("tcps://:7002").unwrap(),
            ListenAddr::Tcps("127.0.0.1:7002".parse().unwrap())
        );
        assert!(ListenAddr::parse("udp://x:1").is_err());
        assert!(ListenAddr::parse("tcp://:notaport").is_err());
    }
}
