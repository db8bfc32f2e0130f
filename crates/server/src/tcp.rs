//! The device side of TCP connections: accepting, the handshake, and one connection's
//! two threads.
//!
//! The connection thread reads PDUs, rebuilds each command (its capsule plus the H2C
//! data behind it) and submits it to the connection's queue pair; the completion
//! thread reaps the pair and writes C2H data and response capsules, batching whatever
//! is ready into one write. A short command alone in flight runs on the connection
//! thread itself, which then sends its completion (`Connection::submit`); while it runs
//! an Execute so, the read side is lent, and a third thread (`Connection::help`, see
//! `crate::help`) reads in its place if the run outlasts its leash.
//!
//! Invariants: a framing error (bad header, a data PDU out of sequence, a length over
//! its limit) ends the connection with a C2HTermReq; a well-framed command that does
//! not decode, names another queue, or overflows the queue gets an error completion;
//! the queue pair is dropped (its memory reclaimed) only after every command in flight
//! has completed, and before the socket closes.

use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};

use csx_host::transport::tcp::conn::{tls::TlsConn, Conn};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};

use csx_device::{QueuePair, SubmitError};
use csx_proto::limits::QUEUE_DEPTH_MAX;
use csx_proto::{
    decode_command, wire::encode_completion_into, Command, CommandId, Completion, Status, WireError,
};

use csx_host::transport::bulk;
use csx_host::transport::tcp::framing::{
    data_header, decode_command_capsule, decode_data, response_capsule_header, secrets_equal,
    CommandCapsule, ConnectStatus, FramingError, ICReq, ICResp, PduReader, PduType, TermReason,
    TermReq, CAPSULE_PSH_SIZE, DATA_PSH_SIZE, ICREQ_SIZE_MAX, PDU_HEADER_SIZE,
};
use csx_host::transport::tcp::{
    COMMAND_CAPSULE_SIZE_MAX, DATA_PDU_SIZE_MAX, HANDSHAKE_TIMEOUT, SOCKET_BUFFER_SIZE,
    TRANSFER_SIZE_MAX,
};

use crate::help::HelpSignal;
use crate::quota::Quota;
use crate::replies::{NotAdmitted, ReplyBudget};
use crate::{Context, ACCEPT_POLL};
use csx_host::transport::tcp::framing::keep_alive_pdu;
use csx_host::transport::KEEP_ALIVE_INTERVAL;

/// The longest PDU a connection accepts after the handshake.
const PLEN_MAX: usize = PDU_HEADER_SIZE
    + if CAPSULE_PSH_SIZE + COMMAND_CAPSULE_SIZE_MAX > DATA_PSH_SIZE + DATA_PDU_SIZE_MAX {
        CAPSULE_PSH_SIZE + COMMAND_CAPSULE_SIZE_MAX
    } else {
        DATA_PSH_SIZE + DATA_PDU_SIZE_MAX
    };

/// Hangs a connection in its handshake up from another thread (a newer connection of
/// its source takes its place).
fn hang_up(stream: &std::net::TcpStream) -> Option<Box<dyn Fn() + Send>> {
    let s = stream.try_clone().ok()?;
    Some(Box::new(move || {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }))
}

/// Accepts connections until the server stops.
/// With `tls`, each connection is a TLS server connection with that configuration.
pub(crate) fn accept_loop(
    listener: TcpListener,
    ctx: &Arc<Context>,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(error = %e, "cannot poll the tcp listener");
        return;
    }
    while !ctx.stopping() {
        match listener.accept() {
            Ok((stream, peer)) => {
                // The listener is non-blocking for polling; connections are not.
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                // One deadline for the whole handshake (TLS and the connect request),
                // from the moment of the accept.
                let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
                let name = format!("csx-tcp-{peer}");
                // Kept to tell a refused plain client why (a TLS client would not
                // understand plain bytes: it only sees the connection close).
                let refusal = match tls {
                    None => stream.try_clone().ok(),
                    Some(_) => None,
                };
                let tls = tls.clone();
                let source = crate::Source::Address(peer.ip());
                let Some(hang_up) = hang_up(&stream) else {
                    continue;
                };
                let spawned = ctx.spawn_connection(name, source, hang_up, move |ctx| {
                    let conn = match tls {
                        None => Conn::Plain(stream),
                        Some(config) => {
                            match TlsConn::accept(stream, config, deadline).map(Conn::Tls) {
                                Ok(c) => c,
                                Err(e) => {
                                    let error = match e.kind() {
                                        io::ErrorKind::UnexpectedEof => "the client closed the connection during the handshake (it may not trust this certificate, or not speak TLS)".to_string(),
                                        _ => e.to_string(),
                                    };
                                    tracing::warn!(%peer, %error, "tls handshake failed");
                                    Context::count(&ctx.clients_refused, 1);
                                    return;
                                }
                            }
                        }
                    };
                    serve(conn, peer, deadline, &ctx)
                });
                if let Err(why) = spawned {
                    Context::count(&ctx.clients_refused, 1);
                    tracing::warn!(%peer, reason = %why, "refusing a connection");
                    if let Some(mut s) = refusal {
                        refuse_full(&mut s, &why);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                csx_host::transport::sys::wait_readable(&listener, ACCEPT_POLL);
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

/// Tells a plain client refused at the connection limit why, without reading its
/// request (an ICResp needs none of it) and without waiting on it.
fn refuse_full(s: &mut std::net::TcpStream, why: &crate::Refusal) {
    let resp = ICResp {
        status: ConnectStatus::Unavailable,
        queue_depth: 0,
        data_pdu_size_max: DATA_PDU_SIZE_MAX as u32,
        queue_id: 0,
        message: why.to_string(),
    };
    let _ = s.set_nonblocking(true);
    let _ = s.write_all(&resp.encode());
}

/// The write side, shared by both threads of a connection.
#[derive(Debug)]
struct Sender {
    stream: Mutex<Conn>,
    /// Set once a write failed: the client is gone, completions are dropped.
    dead: AtomicBool,
    /// A client that takes no byte for this long is gone (`Conn::set_write_stall`).
    stall: Duration,
    /// When the last write ended, for the keep-alives.
    last_write: Mutex<Instant>,
}

impl Sender {
    fn lock(&self) -> MutexGuard<'_, Conn> {
        self.stream.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    fn write(&self, w: &mut Conn, slices: &mut [IoSlice<'_>]) {
        if self.dead() {
            return;
        }
        if let Err(e) = w.write_stalling(slices, self.stall) {
            tracing::debug!(error = %e, "write to client failed");
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                tracing::warn!(
                    stall = ?self.stall,
                    "the client took none of its replies for the write stall limit; dropping it"
                );
            }
            self.dead.store(true, Ordering::Relaxed);
            let _ = w.shutdown(Shutdown::Both);
        }
        *self.last_write.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Sends a keep-alive when nothing was written for [`KEEP_ALIVE_INTERVAL`].
    fn keep_alive(&self) {
        let quiet = self
            .last_write
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if quiet >= KEEP_ALIVE_INTERVAL && !self.dead() {
            let pdu = keep_alive_pdu();
            self.write(&mut self.lock(), &mut [IoSlice::new(&pdu)]);
        }
    }
}

/// The sending half of a connection: a clone of its socket.
fn new_sender(stream: &Conn, ctx: &Context) -> io::Result<Arc<Sender>> {
    Ok(Arc::new(Sender {
        stream: Mutex::new(stream.try_clone()?),
        dead: AtomicBool::new(false),
        stall: ctx.write_stall,
        last_write: Mutex::new(Instant::now()),
    }))
}

/// Starts the connection's completion thread (`send_completions`).
fn spawn_completions(
    qp: &Arc<QueuePair>,
    sender: &Arc<Sender>,
    draining: &Arc<AtomicBool>,
    ctx: &Arc<Context>,
    quota: &Arc<Quota>,
    replies: &Arc<ReplyBudget>,
    queue_id: u32,
) -> io::Result<std::thread::JoinHandle<()>> {
    let (qp, sender, draining, ctx, quota, replies) = (
        Arc::clone(qp),
        Arc::clone(sender),
        Arc::clone(draining),
        Arc::clone(ctx),
        Arc::clone(quota),
        Arc::clone(replies),
    );
    std::thread::Builder::new()
        .name(format!("csx-tcp-cq-{queue_id}"))
        .spawn(move || send_completions(&qp, &sender, &draining, &ctx, &quota, &replies))
}

/// The device calls this (on its watchdog thread) when an Execute this connection's
/// thread runs inline outlasts its leash: the helper takes over reading while the run
/// holds this thread (`Connection::help`).
fn call_help_on_overrun(qp: &QueuePair, help: &Arc<HelpSignal>) {
    let help = Arc::clone(help);
    qp.on_inline_overrun(move || help.request());
}

/// Gives back what a departed client held: its queue pair (its memory and, when the
/// server reclaims programs, its programs) goes now.
fn release_client(
    quota: &Quota,
    qp: Arc<QueuePair>,
    ctx: &Context,
    peer: SocketAddr,
    queue_id: u32,
) {
    let reclaimed = quota.release(&qp, &ctx.slot_owners, ctx.reclaim_programs);
    if reclaimed > 0 {
        tracing::info!(%peer, client = queue_id, programs = reclaimed, "unloaded the programs of a departed client");
    }
    drop(Arc::into_inner(qp));
    ctx.client_disconnected();
}

/// Reads commands until the connection ends, with the helper thread standing by to
/// read while an inline run holds this one; returns why it ended.
fn run_reading(conn: &Connection<'_>, help: &HelpSignal, queue_id: u32) -> Ending {
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name(format!("csx-tcp-help-{queue_id}"))
            .spawn_scoped(scope, || conn.help());
        let why = conn.run();
        help.close();
        if let Ok(h) = helper {
            let _ = h.join();
        }
        why
    })
}

/// Logs why the connection ends and, when the server ends it, tells the client why.
fn say_goodbye(sender: &Sender, why: &Ending, peer: SocketAddr, queue_id: u32) {
    if let Ending::Broken(error) = why {
        tracing::debug!(%peer, client = queue_id, %error, "connection broken");
    }
    if let Ending::Fatal(reason, message) = why {
        tracing::warn!(%peer, client = queue_id, %message, "closing the connection");
        let term = TermReq::encode(PduType::C2HTermReq, *reason, message);
        sender.write(&mut sender.lock(), &mut [IoSlice::new(&term)]);
    } else if let Ending::Stopping = why {
        let term = TermReq::encode(
            PduType::C2HTermReq,
            TermReason::ShuttingDown,
            "the device is shutting down",
        );
        sender.write(&mut sender.lock(), &mut [IoSlice::new(&term)]);
    }
}

/// One connection: handshake, then the two threads.
fn serve(mut stream: Conn, peer: SocketAddr, deadline: Instant, ctx: &Arc<Context>) {
    let _ = stream.tcp().set_nodelay(true);
    let _ = stream.set_write_stall(ctx.write_stall);
    if let Err(e) = csx_host::transport::sys::set_socket_buffers(stream.tcp(), SOCKET_BUFFER_SIZE) {
        tracing::debug!(%peer, error = %e, "cannot size the socket buffers");
    }
    let mut reader = PduReader::new(ICREQ_SIZE_MAX);
    let Some((qp, queue_id)) = handshake(&mut stream, &mut reader, peer, deadline, ctx) else {
        Context::count(&ctx.clients_refused, 1);
        return;
    };
    ctx.client_connected();
    tracing::info!(%peer, client = queue_id, depth = qp.depth(), "tcp client connected");
    reader.set_plen_max(PLEN_MAX);
    let sender = match new_sender(&stream, ctx) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "cannot clone the socket");
            ctx.client_disconnected();
            return;
        }
    };
    serve_pair(stream, reader, &sender, qp, queue_id, peer, ctx);
}

/// A connected client's queue pair: runs its two threads until the connection ends,
/// then gives back what the client held and closes the socket.
fn serve_pair(
    stream: Conn,
    reader: PduReader,
    sender: &Arc<Sender>,
    qp: QueuePair,
    queue_id: u32,
    peer: SocketAddr,
    ctx: &Arc<Context>,
) {
    let qp = Arc::new(qp);
    let quota = Arc::new(Quota::new(queue_id, ctx.limits));
    let replies = Arc::new(ReplyBudget::new(
        ctx.limits.reply_bytes,
        Arc::clone(&ctx.reply_bytes_held),
    ));
    let draining = Arc::new(AtomicBool::new(false));
    let completions = spawn_completions(&qp, sender, &draining, ctx, &quota, &replies, queue_id);
    let completions = match completions {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "cannot start the completion thread");
            ctx.client_disconnected();
            return;
        }
    };
    let lend = Lend::default();
    let help = Arc::new(HelpSignal::default());
    call_help_on_overrun(&qp, &help);
    let conn = Connection {
        qp: &qp,
        queue_id,
        sender,
        completer: completions.thread().clone(),
        quota: &quota,
        replies: &replies,
        ctx,
        side: Mutex::new(ReadSide {
            stream,
            reader,
            pending: None,
        }),
        lend: &lend,
        help: &help,
    };
    let why = run_reading(&conn, &help, queue_id);
    let stream = conn
        .side
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .stream;
    // Stop taking commands and abort the executions in flight (the client is gone, or
    // the device is closing); the completion thread answers those in flight and exits.
    qp.abort_all();
    draining.store(true, Ordering::Release);
    completions.thread().unpark();
    let _ = completions.join();
    say_goodbye(sender, &why, peer, queue_id);
    // The queue pair goes first (reclaiming the client's memory and, when the server
    // reclaims programs, its programs), then the socket: a client that waits for the
    // close knows its resources are back.
    release_client(&quota, qp, ctx, peer, queue_id);
    let _ = stream.shutdown(Shutdown::Both);
    tracing::info!(%peer, client = queue_id, reason = ?why, "tcp client disconnected");
}

/// Reads the connect request (or why it is malformed) before `deadline`; `None`: the
/// peer closed, stalled or failed first.
fn read_icreq(
    stream: &mut Conn,
    reader: &mut PduReader,
    peer: SocketAddr,
    deadline: Instant,
) -> Option<Result<ICReq, FramingError>> {
    // One deadline for the whole handshake: a peer trickling bytes cannot hold the
    // connection (and its thread) longer than a silent one.
    loop {
        match reader.next_pdu() {
            Ok(Some(pdu)) if pdu.header.pdu_type == PduType::ICReq => {
                break Some(ICReq::decode(pdu.body));
            }
            Ok(Some(pdu)) => {
                break Some(Err(FramingError::Unexpected {
                    pdu_type: pdu.header.pdu_type,
                    context: "before the connect request",
                }))
            }
            Ok(None) => {}
            Err(e) => break Some(Err(e)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            tracing::debug!(%peer, "no whole connect request within the handshake timeout");
            return None;
        }
        match reader.fill(stream) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(%peer, error = %e, "no connect request");
                return None;
            }
        }
    }
}

/// Reads the ICReq, checks it, opens the queue pair and answers. `None`: refused.
fn handshake(
    stream: &mut Conn,
    reader: &mut PduReader,
    peer: SocketAddr,
    deadline: Instant,
    ctx: &Context,
) -> Option<(QueuePair, u32)> {
    let req = read_icreq(stream, reader, peer, deadline)?;
    let respond = |stream: &mut Conn, status, queue_depth, queue_id, message: &str| {
        let resp = ICResp {
            status,
            queue_depth,
            data_pdu_size_max: DATA_PDU_SIZE_MAX as u32,
            queue_id,
            message: message.to_string(),
        };
        let _ = stream.write_all(&resp.encode());
    };
    let refuse = |stream: &mut Conn, status, message: &str| {
        tracing::warn!(%peer, ?status, message, "refusing tcp client");
        respond(stream, status, 0, 0, message);
        None
    };
    let req = match req {
        Ok(req) => req,
        Err(FramingError::Version { version }) => {
            let m = format!("pdu format version {version} is not supported");
            return refuse(stream, ConnectStatus::VersionUnsupported, &m);
        }
        Err(e) => {
            tracing::warn!(%peer, error = %e, "bad connect request");
            let term = TermReq::encode(PduType::C2HTermReq, e.term_reason(), &e.to_string());
            let _ = stream.write_all(&term);
            return None;
        }
    };
    if let Some(token) = &ctx.token {
        if !secrets_equal(&req.token, token) {
            return refuse(stream, ConnectStatus::AuthFailed, "authentication failed");
        }
    }
    if req.queue_depth == 0 {
        return refuse(stream, ConnectStatus::BadQueueDepth, "queue depth 0");
    }
    if ctx.stopping() {
        return refuse(
            stream,
            ConnectStatus::Unavailable,
            "the device is shutting down",
        );
    }
    // The per-client limit on commands in flight is the depth granted.
    let depth = req
        .queue_depth
        .min(QUEUE_DEPTH_MAX)
        .min(ctx.limits.queued_commands);
    let qp = match ctx.device.queue_pair(depth) {
        Ok(qp) => qp,
        Err(e) => return refuse(stream, ConnectStatus::Unavailable, &e.to_string()),
    };
    let queue_id = qp.client().0;
    respond(stream, ConnectStatus::Accepted, depth, queue_id, "");
    Some((qp, queue_id))
}

/// Why a connection's reading ended.
#[derive(Debug)]
enum Ending {
    /// The client closed its side (or sent a termination request).
    Closed,
    /// The connection broke (reset, timeout of a write).
    Broken(String),
    /// The server is shutting down.
    Stopping,
    /// The client broke the framing.
    Fatal(TermReason, String),
}

/// A command whose H2C data is still arriving, or one refused whose data is skipped.
#[derive(Debug)]
struct Pending {
    cid: CommandId,
    /// The command, `None` when its data is only skipped.
    cmd: Option<Command>,
    data: Vec<u8>,
    received: usize,
    total: usize,
}

/// The reading half of a connection: the thread holding it reads the client.
struct ReadSide {
    stream: Conn,
    reader: PduReader,
    /// The command whose data is still arriving.
    pending: Option<Pending>,
}

/// The read side lent by the connection thread while it runs an Execute inline.
#[derive(Default)]
struct Lend {
    /// The connection thread runs an Execute inline and does not hold the read side.
    lent: AtomicBool,
    /// How reading ended while the helper held the read side.
    ended: Mutex<Option<Ending>>,
}

/// How long the helper's reads wait, so it hands the read side back promptly.
const HELP_READ_TIMEOUT: Duration = Duration::from_millis(1);

/// What reading the next PDU gave.
enum Step {
    /// A command to submit.
    Submit(Command),
    /// A PDU handled; look for the next.
    Handled,
    /// No whole PDU buffered: read more.
    Read,
}

struct Connection<'a> {
    qp: &'a Arc<QueuePair>,
    queue_id: u32,
    sender: &'a Arc<Sender>,
    completer: Thread,
    quota: &'a Quota,
    replies: &'a ReplyBudget,
    ctx: &'a Context,
    side: Mutex<ReadSide>,
    lend: &'a Lend,
    help: &'a HelpSignal,
}

impl Connection<'_> {
    fn side(&self) -> MutexGuard<'_, ReadSide> {
        self.side.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reading loop of the connection thread: PDUs in, commands submitted.
    ///
    /// An Execute may run inline on this thread (`Connection::submit`); the read side
    /// is lent meanwhile, and if the run outlasts its leash the helper reads in its
    /// place (`Connection::help`), so an Abort for the run is not left unread.
    fn run(&self) -> Ending {
        let mut side = self.side();
        let _ = side.stream.set_read_timeout(Some(ACCEPT_POLL));
        loop {
            loop {
                match self.step(&mut side) {
                    Ok(Step::Submit(cmd)) if matches!(cmd.op, csx_proto::Op::Execute { .. }) => {
                        drop(side);
                        self.lend.lent.store(true, Ordering::SeqCst);
                        self.submit(cmd);
                        #[cfg(test)]
                        tests::hold_after_inline_run(self.side.try_lock().is_err());
                        self.lend.lent.store(false, Ordering::SeqCst);
                        // The helper, if it read meanwhile, hands it back within its
                        // read timeout.
                        side = self.side();
                        let ended = self
                            .lend
                            .ended
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .take();
                        if let Some(ending) = ended {
                            return ending;
                        }
                    }
                    Ok(Step::Submit(cmd)) => self.submit(cmd),
                    Ok(Step::Handled) => {}
                    Ok(Step::Read) => break,
                    Err(ending) => return ending,
                }
            }
            if self.ctx.stopping() {
                return Ending::Stopping;
            }
            let ReadSide { stream, reader, .. } = &mut *side;
            let read = stream
                .fill_polling(reader)
                .unwrap_or_else(|| reader.fill(stream));
            if let Some(ending) = read_ending(read) {
                return ending;
            }
        }
    }

    /// The helper thread: waits until the device says an inline run outlasts its leash,
    /// then reads and submits in the connection thread's place until the run ends (the
    /// Abort of the run is answered at submission, which stops it). Commands it
    /// submits are queued (the inline run is in flight, so none runs inline) and the
    /// completion thread answers them.
    fn help(&self) {
        while self.help.wait() {
            if !self.lend.lent.load(Ordering::SeqCst) {
                continue;
            }
            let mut side = self.side();
            let _ = side.stream.set_read_timeout(Some(HELP_READ_TIMEOUT));
            let ending = 'read: loop {
                loop {
                    // Once the inline run has ended, what is buffered is the connection
                    // thread's to take: the next command may be one it runs inline.
                    if !self.lend.lent.load(Ordering::SeqCst) {
                        break 'read None;
                    }
                    match self.step(&mut side) {
                        Ok(Step::Submit(cmd)) => self.submit_as(cmd, false),
                        Ok(Step::Handled) => {}
                        Ok(Step::Read) => break,
                        Err(ending) => break 'read Some(ending),
                    }
                }
                if !self.lend.lent.load(Ordering::SeqCst) || self.ctx.stopping() {
                    break None;
                }
                let ReadSide { stream, reader, .. } = &mut *side;
                if let Some(ending) = read_ending(reader.fill(stream)) {
                    break Some(ending);
                }
            };
            let _ = side.stream.set_read_timeout(Some(ACCEPT_POLL));
            if let Some(ending) = ending {
                // Nobody reads any more: the inline run stops now, as every execution
                // of a connection that ends does.
                self.qp.abort_all();
                *self.lend.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(ending);
                return;
            }
        }
    }

    /// Handles the next PDU buffered, if a whole one is.
    fn step(&self, side: &mut ReadSide) -> Result<Step, Ending> {
        let ReadSide {
            reader, pending, ..
        } = side;
        let pdu = match reader.next_pdu() {
            Ok(Some(pdu)) => pdu,
            Ok(None) => return Ok(Step::Read),
            Err(e) => return Err(Ending::Fatal(e.term_reason(), e.to_string())),
        };
        let fatal = |e: FramingError| Ending::Fatal(e.term_reason(), e.to_string());
        match pdu.header.pdu_type {
            PduType::CapsuleCmd => self.capsule(pending, pdu.body).map_err(fatal),
            PduType::H2CData => self.data(pending, pdu.body).map_err(fatal),
            PduType::H2CTermReq => Err(Ending::Closed),
            other => Err(fatal(FramingError::Unexpected {
                pdu_type: other,
                context: "from a host",
            })),
        }
    }

    /// The command of capsule `cap` (id `cid`, `data_len` bytes to follow), or the
    /// completion refusing it: sent to another queue, undecodable, or data for a
    /// command that takes none.
    fn capsule_command(
        &self,
        cap: &CommandCapsule<'_>,
        cid: CommandId,
        data_len: usize,
    ) -> Result<Command, Box<Completion>> {
        let refused = |status: Status, message: String| {
            Box::new(Completion::error(cid, status, "transport", message))
        };
        if cap.queue_id != self.queue_id {
            Err(refused(
                Status::InvalidField,
                format!(
                    "capsule for queue {} arrived on queue {}",
                    cap.queue_id, self.queue_id
                ),
            ))
        } else {
            match decode_command(cap.frame) {
                Ok(cmd) if data_len > 0 && !takes_data(&cmd) => Err(refused(
                    Status::InvalidField,
                    format!("{} takes no data pdus", cmd.op.name()),
                )),
                Ok(cmd) => Ok(cmd),
                Err(e) => Err(refused(
                    wire_status(&e),
                    format!("undecodable command: {e}"),
                )),
            }
        }
    }

    /// One command capsule: submit it, or start collecting its data.
    fn capsule(&self, pending: &mut Option<Pending>, body: &[u8]) -> Result<Step, FramingError> {
        if let Some(p) = pending {
            return Err(FramingError::Sequence(format!(
                "a command capsule while {} of {} data bytes of {} are missing",
                p.total - p.received,
                p.total,
                p.cid
            )));
        }
        let cap = decode_command_capsule(body);
        let data_len = cap.data_len as usize;
        if data_len > TRANSFER_SIZE_MAX {
            return Err(FramingError::TooLong {
                field: "command data",
                len: data_len as u64,
                limit: TRANSFER_SIZE_MAX as u64,
            });
        }
        // The command id is readable in any frame of a header's length; one shorter
        // cannot be answered.
        let Some(cid) = cap
            .frame
            .get(8..16)
            .map(|b| CommandId(u64::from_le_bytes(b.try_into().expect("8 bytes"))))
        else {
            return Err(FramingError::Sequence(format!(
                "a command capsule of {} bytes holds no command header",
                cap.frame.len()
            )));
        };
        let outcome = self.capsule_command(&cap, cid, data_len);
        match outcome {
            Ok(cmd) if data_len == 0 => return Ok(Step::Submit(cmd)),
            Ok(cmd) => {
                *pending = Some(Pending {
                    cid,
                    cmd: Some(cmd),
                    // Checked against TRANSFER_SIZE_MAX above.
                    data: Vec::with_capacity(data_len),
                    received: 0,
                    total: data_len,
                })
            }
            Err(c) => {
                self.answer(*c);
                if data_len > 0 {
                    *pending = Some(Pending {
                        cid,
                        cmd: None,
                        data: Vec::new(),
                        received: 0,
                        total: data_len,
                    });
                }
            }
        }
        Ok(Step::Handled)
    }

    /// One H2C data PDU of the pending command.
    fn data(&self, pending: &mut Option<Pending>, body: &[u8]) -> Result<Step, FramingError> {
        let d = decode_data(body)?;
        let Some(p) = pending.as_mut() else {
            return Err(FramingError::Sequence(format!(
                "data for cmd#{} with no command waiting for data",
                d.cid
            )));
        };
        if d.cid != p.cid.0
            || d.offset as usize != p.received
            || d.data.len() > p.total - p.received
        {
            return Err(FramingError::Sequence(format!(
                "data for cmd#{} at offset {} of {} bytes; expected {} from offset {} ({} left)",
                d.cid,
                d.offset,
                d.data.len(),
                p.cid,
                p.received,
                p.total - p.received
            )));
        }
        p.received += d.data.len();
        if p.cmd.is_some() {
            p.data.extend_from_slice(d.data);
        }
        if p.received == p.total {
            let p = pending.take().expect("checked above");
            if let Some(mut cmd) = p.cmd {
                let put = bulk::put_command_data(&mut cmd.op, p.data);
                debug_assert!(put, "checked by takes_data");
                return Ok(Step::Submit(cmd));
            }
        }
        Ok(Step::Handled)
    }

    /// Submits `cmd`. A short command alone in flight runs on this thread
    /// (`QueuePair::submit_inline`) and this thread sends its completion, so a round
    /// trip wakes neither an engine nor the completion thread.
    fn submit(&self, cmd: Command) {
        self.submit_as(cmd, true)
    }

    /// [`Connection::submit`]; `inline`: whether a short command may run on this thread
    /// (the helper never runs one: it holds the read side, so a run on its thread would
    /// leave the run's Abort unread until the run ends).
    fn submit_as(&self, cmd: Command, inline: bool) {
        let id = cmd.id;
        // A read waits here while the client has too many replies unread: this
        // connection takes no more of its commands meanwhile (see `crate::replies`).
        let reply = bulk::reply_data_max(&cmd.op) as u64;
        match self.replies.reserve(id, reply, ACCEPT_POLL, || {
            self.ctx.stopping() || self.sender.dead()
        }) {
            Ok(()) => {}
            Err(NotAdmitted::Duplicate) => {
                return self.answer(Completion::error(
                    id,
                    Status::InvalidField,
                    "transport",
                    format!("{id} is already in flight on this connection"),
                ))
            }
            Err(NotAdmitted::GaveUp) if self.sender.dead() => return,
            Err(NotAdmitted::GaveUp) => {
                return self.answer(Completion::error(
                    id,
                    Status::Aborted,
                    "transport",
                    "the device is shutting down",
                ))
            }
        }
        if let Err(refusal) = self.quota.admit(&cmd, &self.ctx.slot_owners) {
            return self.answer(*refusal);
        }
        let submitted = if inline {
            self.qp.submit_inline(cmd, None)
        } else {
            self.qp.submit(cmd)
        };
        if submitted.is_err() {
            self.quota.not_submitted(id, &self.ctx.slot_owners);
        }
        match submitted {
            Ok(()) => {
                while let Some(c) = self.qp.try_reap() {
                    self.quota.completed(&c, &self.ctx.slot_owners);
                    self.answer(c);
                }
                // The completion thread sleeps only with nothing in flight.
                if self.qp.in_flight() > 0 {
                    self.completer.unpark();
                }
            }
            Err(SubmitError::QueueFull { depth }) => self.answer(Completion::error(
                id,
                Status::QueueFull,
                "transport",
                format!("{depth} commands are in flight, the negotiated depth"),
            )),
            Err(_) => self.answer(Completion::error(
                id,
                Status::Aborted,
                "transport",
                "the device is shutting down",
            )),
        }
    }

    /// Sends a completion from this thread: one the connection made itself (the device
    /// never saw the command) or one of a command that ran inline.
    fn answer(&self, c: Completion) {
        let id = c.id;
        let mut out = Vec::new();
        let mut w = self.sender.lock();
        encode_response(c, &mut out, self.sender, &mut w);
        self.sender.write(&mut w, &mut [IoSlice::new(&out)]);
        drop(w);
        self.replies.release(id);
        Context::count(&self.ctx.commands_served, 1);
    }
}

/// How a read from the client ends the connection, if it does (a timeout does not).
fn read_ending(read: io::Result<usize>) -> Option<Ending> {
    match read {
        Ok(0) => Some(Ending::Closed),
        Ok(_) => None,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ) =>
        {
            None
        }
        Err(e) => Some(Ending::Broken(e.to_string())),
    }
}

fn takes_data(cmd: &Command) -> bool {
    let mut op = cmd.op.clone();
    // Only the variant matters; a clone of a data-less write is cheap.
    bulk::put_command_data(&mut op, vec![0])
}

fn wire_status(e: &WireError) -> Status {
    match e {
        WireError::UnknownOpcode { .. } => Status::InvalidOpcode,
        WireError::Invalid(f) => f.status(),
        _ => Status::InvalidField,
    }
}

/// Appends the response capsule of `c` to `out`. A read's data goes first, as C2H data
/// PDUs straight from the completion: then `out` so far, the data PDUs and the capsule
/// go in one write (one system call, so the host wakes once for the whole reply), and
/// `out` is left empty.
fn encode_response(mut c: Completion, out: &mut Vec<u8>, sender: &Sender, w: &mut Conn) {
    let data = bulk::take_reply_data(&mut c);
    let id = c.id;
    let start = out.len();
    out.extend_from_slice(&[0; PDU_HEADER_SIZE + CAPSULE_PSH_SIZE]);
    if let Err(e) = encode_completion_into(&c, out) {
        // Only a device bug makes an invalid completion; the host hears of it.
        out.truncate(start + PDU_HEADER_SIZE + CAPSULE_PSH_SIZE);
        let c = Completion::error(id, Status::Internal, "transport", e.to_string());
        encode_completion_into(&c, out).expect("an error completion encodes");
        return finish_capsule(out, start, 0);
    }
    let data = data.unwrap_or_default();
    if data.is_empty() {
        return finish_capsule(out, start, 0);
    }
    let mut capsule = out.split_off(start);
    finish_capsule(&mut capsule, 0, data.len());
    let headers: Vec<[u8; DATA_PDU_HEADER_SIZE]> = data
        .chunks(DATA_PDU_SIZE_MAX)
        .enumerate()
        .map(|(i, chunk)| data_header(PduType::C2HData, id.0, i * DATA_PDU_SIZE_MAX, chunk.len()))
        .collect();
    let mut slices = Vec::with_capacity(2 * headers.len() + 2);
    slices.push(IoSlice::new(out));
    for (h, chunk) in headers.iter().zip(data.chunks(DATA_PDU_SIZE_MAX)) {
        slices.push(IoSlice::new(h));
        slices.push(IoSlice::new(chunk));
    }
    slices.push(IoSlice::new(&capsule));
    sender.write(w, &mut slices);
    out.clear();
}

/// Bytes before a data PDU's payload: the common header and its own.
const DATA_PDU_HEADER_SIZE: usize = PDU_HEADER_SIZE + DATA_PSH_SIZE;

fn finish_capsule(out: &mut [u8], start: usize, data_len: usize) {
    let frame_len = out.len() - start - PDU_HEADER_SIZE - CAPSULE_PSH_SIZE;
    out[start..start + PDU_HEADER_SIZE + CAPSULE_PSH_SIZE]
        .copy_from_slice(&response_capsule_header(data_len, frame_len));
}

/// The completion thread: reap, encode, send; until draining and nothing in flight.
fn send_completions(
    qp: &QueuePair,
    sender: &Sender,
    draining: &AtomicBool,
    ctx: &Context,
    quota: &Quota,
    replies: &ReplyBudget,
) {
    let mut out = Vec::new();
    let mut sent = Vec::new();
    loop {
        match qp.reap(Some(ACCEPT_POLL)) {
            Some(c) => {
                quota.completed(&c, &ctx.slot_owners);
                let mut w = sender.lock();
                sent.push(c.id);
                encode_response(c, &mut out, sender, &mut w);
                // Whatever else is ready goes in the same write.
                while let Some(c) = qp.try_reap() {
                    quota.completed(&c, &ctx.slot_owners);
                    sent.push(c.id);
                    encode_response(c, &mut out, sender, &mut w);
                }
                sender.write(&mut w, &mut [IoSlice::new(&out)]);
                drop(w);
                out.clear();
                if out.capacity() > 4 * DATA_PDU_SIZE_MAX {
                    out = Vec::new();
                }
                Context::count(&ctx.commands_served, sent.len() as u64);
                for id in sent.drain(..) {
                    replies.release(id);
                }
            }
            // A long command in flight: the client hears that the device lives.
            None if qp.in_flight() > 0 => sender.keep_alive(),
            None if draining.load(Ordering::Acquire) => return,
            // Nothing in flight: sleep until the reader submits (it unparks us).
            None => std::thread::park_timeout(ACCEPT_POLL),
        }
    }
}

#[cfg(test)]
mod tests;
