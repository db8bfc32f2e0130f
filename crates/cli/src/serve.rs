//! `csx device serve`: run a device as a daemon, for other processes (shm) and other
//! hosts (tcp).
//!
//! The daemon is `csx_server::Server`; this module parses the command line, sets
//! up logging to stderr, turns SIGINT and SIGTERM into a clean shutdown, and prints a
//! status line an operator can read while it runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use csx_host::transport::tcp::read_token_file;
use csx_server::{ClientLimits, ListenAddr, Server, ServerConfig, ServerOptions, ServerStatus};

use crate::exit;

/// Serve a device to other processes and hosts until SIGINT or SIGTERM.
///
/// Clients open it with `--device shm://NAME` (processes on this machine, through shared
/// memory) or `--device tcp://HOST:PORT` (over the network; `tcps://HOST:PORT` with TLS,
/// given --tls-cert and --tls-key, clients setting CSX_TLS_CA to the CA's PEM file). `tcp://:PORT` listens on
/// the loopback address only; name a host (`tcp://0.0.0.0:PORT`) to serve beyond this
/// machine, with `--token-file` so that only holders of the secret may connect (they
/// set CSX_TOKEN_FILE). On SIGINT or SIGTERM the daemon stops taking commands, aborts
/// the programs running, finishes and answers the other commands in flight, and closes
/// the device (file store flushed, shared state saved). A client that disconnects has
/// its programs aborted too.
///
/// Each client may hold at most --client-memory of SLM (default: a quarter of the
/// device's), --client-slots program slots (default 16 of 64) and --client-queue
/// commands in flight (default 256); past a limit its command fails with an error naming
/// the limit, and other clients are unaffected. With --reclaim-programs the programs a
/// client loaded and did not unload are unloaded when it disconnects or dies.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The device's state directory (made by `csx device init`).
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    /// Where to listen: `shm://NAME`, `tcp://HOST:PORT` or `tcps://HOST:PORT` (TLS);
    /// repeat for several.
    #[arg(long, value_name = "URI", required = true)]
    listen: Vec<String>,
    /// A file holding the shared secret tcp clients must present.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The certificate chain (PEM) of `tcps://` listeners; clients trust its CA
    /// through CSX_TLS_CA.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// SLM one client may hold allocated, e.g. 64MiB (default: a quarter of the device's).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    client_memory: Option<u64>,
    /// Device memory kept for resident file ranges, e.g. 512MiB (default: the device's
    /// `resident_bytes`, else none): Memory Copies that ask for it (`csx ssb run
    /// --resident`) leave their ranges there, shared by every client and process, least
    /// recently used out first, dropped when their file changes.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    resident_memory: Option<u64>,
    /// Program slots one client may hold loaded or loading.
    #[arg(long, value_name = "N", default_value_t = csx_server::CLIENT_SLOTS_DEFAULT,
          value_parser = clap::value_parser!(u16).range(1..))]
    client_slots: u16,
    /// Commands one client may have in flight (the most queue depth granted).
    #[arg(long, value_name = "N", default_value_t = csx_server::CLIENT_QUEUE_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    client_queue: u32,
    /// Bytes of read replies one client may have asked for and not yet read, e.g.
    /// 64MiB (default 32MiB, at least 16MiB): past it the daemon takes no more of
    /// that client's commands until it reads.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    client_reply_memory: Option<u64>,
    /// Seconds a client may take none of the replies written to it before the daemon
    /// drops it (default 30).
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    write_stall: u64,
    /// Serve shm clients running as other users too (by default only this user's and
    /// root's). They reach the socket with CSX_SHM_DIR set to this daemon's socket
    /// directory.
    #[arg(long)]
    shm_other_users: bool,
    /// Connections one tcp client address (or one shm user) may hold at once (default
    /// 72 of the daemon's 80); past it that source is refused with a message naming
    /// the limit, and other sources still get in.
    #[arg(long, value_name = "N", default_value_t = csx_server::CONNECTIONS_PER_SOURCE_DEFAULT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=csx_server::CONNECTIONS_MAX as u64))]
    connections_per_source: usize,
    /// Unload the programs a client leaves loaded when it disconnects or dies.
    #[arg(long)]
    reclaim_programs: bool,
    /// Seconds between status lines (0: none).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    status_interval: u64,
    /// Log level: error, warn, info, debug or trace (default: $CSX_LOG, else info).
    #[arg(long, value_name = "LEVEL", env = "CSX_LOG")]
    log: Option<String>,
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    match csx_host::size::parse_size(text) {
        Ok(0) => Err("must be at least 1 byte".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// How often the main thread looks for a signal.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

fn init_logging(level: Option<&str>) -> anyhow::Result<()> {
    let level = match level.unwrap_or("info").to_ascii_lowercase().as_str() {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "info" => tracing::Level::INFO,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        other => {
            anyhow::bail!("unknown log level {other:?} (use error, warn, info, debug or trace)")
        }
    };
    // A second call (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    Ok(())
}

fn status_line(s: &ServerStatus) -> String {
    format!(
        "{} clients connected ({} since start, {} refused), {} commands served",
        s.clients_connected, s.clients_total, s.clients_refused, s.commands_served
    )
}

/// Runs the daemon until a signal.
pub fn run(args: ServeArgs) -> anyhow::Result<u8> {
    init_logging(args.log.as_deref())?;
    let listen = args
        .listen
        .iter()
        .map(|uri| ListenAddr::parse(uri))
        .collect::<Result<Vec<_>, _>>()?;
    let token = match &args.token_file {
        Some(path) => Some(
            read_token_file(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))?,
        ),
        None => None,
    };
    // Signals only set a flag; the main thread does the shutdown.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    let config = ServerConfig { listen, token };
    let device = csx_device::DeviceRuntime::open(&args.state)
        .with_context(|| format!("cannot open the device in {}", args.state.display()))?;
    if let Some(bytes) = args.resident_memory {
        device.resident().set_budget(bytes);
    }
    let limits = client_limits(&args, device.config().slm_size_bytes);
    let server = Server::start_with(device, config, server_options(&args, limits))
        .with_context(|| format!("cannot serve the device in {}", args.state.display()))?;
    tracing::info!(
        memory = %csx_host::size::format_size(limits.memory_bytes),
        slots = limits.program_slots,
        queue = limits.queued_commands,
        reply_memory = %csx_host::size::format_size(limits.reply_bytes),
        reclaim_programs = args.reclaim_programs,
        "per-client limits"
    );
    let uris = server.uris().join(" ");
    tracing::info!(state = %args.state.display(), %uris, "serving");
    // Scripts read the addresses (a tcp port chosen by the system) from stdout.
    println!("csx: serving {} on {uris}", args.state.display());
    wait_for_stop(&server, &stop, Duration::from_secs(args.status_interval));
    tracing::info!("shutting down: aborting executions, finishing other commands in flight");
    let final_status = server.status();
    server
        .shutdown()
        .context("the device did not shut down cleanly")?;
    tracing::info!("device closed; {}", status_line(&final_status));
    Ok(exit::SUCCESS)
}

/// Each client's limits: the flags, else the defaults for a device of `slm_size_bytes`
/// of memory.
fn client_limits(args: &ServeArgs, slm_size_bytes: u64) -> ClientLimits {
    let defaults = ClientLimits::for_device(slm_size_bytes);
    ClientLimits {
        memory_bytes: args.client_memory.unwrap_or(defaults.memory_bytes),
        queued_commands: args.client_queue,
        program_slots: args.client_slots,
        reply_bytes: args.client_reply_memory.unwrap_or(defaults.reply_bytes),
    }
}

fn server_options(args: &ServeArgs, limits: ClientLimits) -> ServerOptions {
    let options = ServerOptions::new()
        .limits(limits)
        .reclaim_programs(args.reclaim_programs)
        .write_stall(Duration::from_secs(args.write_stall))
        .shm_other_users(args.shm_other_users)
        .connections_per_source(args.connections_per_source);
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => options.tls(cert.clone(), key.clone()),
        _ => options,
    }
}

/// Waits until `stop` is set, logging the server's status every `interval` when it
/// changed (never when `interval` is zero).
fn wait_for_stop(server: &Server, stop: &AtomicBool, interval: Duration) {
    let mut last_status = Instant::now();
    let mut last = server.status();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(SIGNAL_POLL);
        if !interval.is_zero() && last_status.elapsed() >= interval {
            let now = server.status();
            if now != last {
                tracing::info!("status: {}", status_line(&now));
                last = now;
            }
            last_status = Instant::now();
        }
    }
}
