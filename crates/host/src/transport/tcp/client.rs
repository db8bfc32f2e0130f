//! [`TcpTransport`]: the host side of one TCP connection (one queue pair).
//!
//! Submitting threads write a command's capsule and data PDUs under the write lock, so
//! the PDUs of one command are contiguous on the wire. The reaping thread (the
//! [`crate::Client`] lets one reap at a time) reads PDUs under the receive lock: data
//! PDUs are gathered per command, a response capsule completes its command. There is
//! no thread of the transport's own.
//!
//! Invariants: at most `queue_depth` commands are in flight; C2H data for a command is
//! accepted only up to the length it asked to read, at the offset that follows the
//! bytes already received; once the connection breaks every call fails with
//! `Disconnected` and the reason.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};

use super::conn::Conn;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_proto::{decode_completion, encode_command, Command, CommandId, Completion};

use super::framing::{
    self, data_header, decode_data, decode_response_capsule, ConnectStatus, FramingError, ICReq,
    ICResp, PduReader, PduType, TermReq, CONTROL_PDU_SIZE_MAX, PDU_HEADER_SIZE,
};
use super::metrics::TcpMetrics;
use super::{
    COMMAND_CAPSULE_SIZE_MAX, DATA_PDU_SIZE_MAX, HANDSHAKE_TIMEOUT, QUEUE_DEPTH_DEFAULT,
    RESPONSE_CAPSULE_SIZE_MAX, SOCKET_BUFFER_SIZE, TOKEN_SIZE_MAX, TRANSFER_SIZE_MAX,
};
use crate::error::TransportError;
use crate::transport::Transport;
use crate::transport::{bulk, sys, Timeouts};

/// Environment variable naming the token file a client sends (`CSX_TOKEN_FILE`).
pub const TOKEN_FILE_ENV: &str = "CSX_TOKEN_FILE";

/// How long [`Transport::close`] waits for the device to confirm that the queue pair is
/// gone (it closes its side after reclaiming the pair's memory).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a TCP connection is set up.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// Commands to ask to have in flight (the server may grant fewer); 0 means
    /// [`QUEUE_DEPTH_DEFAULT`].
    pub queue_depth: u32,
    /// The shared secret, when the server wants one.
    pub token: Option<Vec<u8>>,
}

impl std::fmt::Debug for TcpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpOptions")
            .field("queue_depth", &self.queue_depth)
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .finish()
    }
}

/// Reads a token file: its bytes without trailing whitespace (a final newline from an
/// editor is not part of the secret). Refuses empty and oversized tokens.
pub fn read_token_file(path: &Path) -> io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    if meta.len() > 4 * TOKEN_SIZE_MAX as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "token file has {} bytes, limit is {TOKEN_SIZE_MAX}",
                meta.len()
            ),
        ));
    }
    let mut token = std::fs::read(path)?;
    while token.last().is_some_and(u8::is_ascii_whitespace) {
        token.pop();
    }
    if token.is_empty() || token.len() > TOKEN_SIZE_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "token has {} bytes, must be 1..={TOKEN_SIZE_MAX}",
                token.len()
            ),
        ));
    }
    Ok(token)
}

impl TcpOptions {
    /// Options with the token from the file `$CSX_TOKEN_FILE` names, if it is set.
    pub fn from_env(queue_depth: u32) -> Result<TcpOptions, TransportError> {
        let token = match std::env::var_os(TOKEN_FILE_ENV).filter(|v| !v.is_empty()) {
            Some(path) => Some(read_token_file(Path::new(&path)).map_err(|source| {
                TransportError::Io {
                    op: "read the token file named by CSX_TOKEN_FILE",
                    // The file's name, which the error alone does not carry.
                    source: std::io::Error::new(
                        source.kind(),
                        format!("{}: {source}", Path::new(&path).display()),
                    ),
                }
            })?),
            None => None,
        };
        Ok(TcpOptions { queue_depth, token })
    }
}

/// What the receive side keeps between reaps.
#[derive(Debug)]
struct Receive {
    stream: Conn,
    reader: PduReader,
    /// C2H data gathered per command, until its response capsule.
    data: HashMap<CommandId, Vec<u8>>,
    /// The read timeout set on the socket now (setting it is a system call).
    timeout: Option<Duration>,
}

/// One queue pair over TCP (see the module doc).
#[derive(Debug)]
pub struct TcpTransport {
    write: Mutex<Conn>,
    receive: Mutex<Receive>,
    /// Commands in flight, with the most reply data each may send.
    in_flight: Mutex<HashMap<CommandId, usize>>,
    broken: Mutex<Option<String>>,
    queue_depth: u32,
    queue_id: u32,
    data_pdu_size_max: usize,
    metrics: Arc<TcpMetrics>,
    /// `tcp://ADDR` or `tcps://ADDR`, for messages.
    peer: String,
    /// Since when the device has said nothing while commands were in flight: the last
    /// bytes read, or the submission that ended a time with nothing in flight.
    quiet_since: Mutex<Instant>,
    /// How long the device may say nothing while commands are in flight (it sends a
    /// keep-alive PDU every `KEEP_ALIVE_INTERVAL` then).
    answer_timeout: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every guarded value is consistent between statements; a panic elsewhere does not
    // leave it half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn io_error(op: &'static str) -> impl FnOnce(io::Error) -> TransportError {
    move |source| TransportError::Io { op, source }
}

/// A TCP connection to the first address of `addr` that answers before `deadline`.
fn connect_any(
    addr: &str,
    deadline: Instant,
    no_answer: &dyn Fn(&'static str) -> TransportError,
) -> Result<TcpStream, TransportError> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(io_error("resolve the device address"))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(no_answer("the connect"));
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    stream.ok_or_else(|| TransportError::Io {
        op: "connect to the device",
        source: last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable)),
    })
}

impl TcpTransport {
    /// Connects to the device at `addr` (`HOST:PORT`) and negotiates a queue pair.
    pub fn connect(addr: &str, options: &TcpOptions) -> Result<TcpTransport, TransportError> {
        TcpTransport::connect_with_timeouts(addr, options, Timeouts::from_env()?)
    }

    /// As [`TcpTransport::connect`], waiting for a silent device as `timeouts` says
    /// rather than as `CSX_TIMEOUT` does.
    pub fn connect_with_timeouts(
        addr: &str,
        options: &TcpOptions,
        timeouts: Timeouts,
    ) -> Result<TcpTransport, TransportError> {
        TcpTransport::connect_over(addr, "tcp", options, timeouts, |s, _| Ok(Conn::Plain(s)))
    }

    /// As [`TcpTransport::connect`], over TLS: the device's certificate must chain to a
    /// root of `config` and name the host of `addr`.
    #[cfg(feature = "tls")]
    pub fn connect_tls(
        addr: &str,
        options: &TcpOptions,
        config: std::sync::Arc<rustls::ClientConfig>,
    ) -> Result<TcpTransport, TransportError> {
        let host = addr
            .rsplit_once(':')
            .map_or(addr, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        TcpTransport::connect_over(
            addr,
            "tcps",
            options,
            Timeouts::from_env()?,
            move |s, deadline| {
                super::conn::tls::TlsConn::connect(s, config, &host, deadline).map(Conn::Tls)
            },
        )
    }

    /// Connects, wraps the socket (`wrap`: TLS or nothing) and negotiates, the whole
    /// within the connect timeout ([`Timeouts`]).
    fn connect_over(
        addr: &str,
        scheme: &str,
        options: &TcpOptions,
        timeouts: Timeouts,
        wrap: impl FnOnce(TcpStream, Instant) -> io::Result<Conn>,
    ) -> Result<TcpTransport, TransportError> {
        let deadline = Instant::now() + timeouts.connect;
        let peer = format!("{scheme}://{addr}");
        let no_answer = |during| TransportError::NoAnswer {
            device: peer.clone(),
            waited_secs: timeouts.connect.as_secs(),
            during,
        };
        let stream = connect_any(addr, deadline, &no_answer)?;
        stream
            .set_nodelay(true)
            .map_err(io_error("set TCP_NODELAY"))?;
        sys::set_socket_buffers(&stream, SOCKET_BUFFER_SIZE)
            .map_err(io_error("size the socket buffers"))?;
        let mut stream = wrap(stream, deadline).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => no_answer("the TLS handshake"),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => {
                TransportError::Disconnected {
                    reason: format!("{peer} closed the connection during the TLS handshake (the device may be at its connection limit, or not serve TLS there)"),
                }
            }
            _ => TransportError::Disconnected {
                reason: format!("TLS with {peer}: {e}"),
            },
        })?;
        let resp = handshake(&mut stream, options, deadline).map_err(|e| match e {
            Handshake::Failed(e) => e,
            Handshake::TimedOut => no_answer("the connect request"),
        })?;
        let write = stream.try_clone().map_err(io_error("clone the socket"))?;
        write
            .set_write_stall(timeouts.answer)
            .map_err(io_error("set the write timeout"))?;
        Ok(TcpTransport {
            write: Mutex::new(write),
            receive: Mutex::new(Receive {
                stream,
                reader: PduReader::new(PDU_HEADER_SIZE + 16 + RESPONSE_CAPSULE_SIZE_MAX),
                data: HashMap::new(),
                timeout: Some(HANDSHAKE_TIMEOUT),
            }),
            quiet_since: Mutex::new(Instant::now()),
            answer_timeout: timeouts.answer,
            in_flight: Mutex::new(HashMap::new()),
            broken: Mutex::new(None),
            queue_depth: resp.queue_depth,
            queue_id: resp.queue_id,
            data_pdu_size_max: (resp.data_pdu_size_max as usize).min(DATA_PDU_SIZE_MAX),
            metrics: Arc::new(TcpMetrics::default()),
            peer,
        })
    }

    /// The queue id the device gave this connection.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// This connection's counters.
    pub fn metrics(&self) -> &Arc<TcpMetrics> {
        &self.metrics
    }

    fn check_broken(&self) -> Result<(), TransportError> {
        match &*lock(&self.broken) {
            Some(reason) => Err(TransportError::Disconnected {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Marks the connection broken (the first reason wins) and returns the error.
    fn fail(&self, reason: String) -> TransportError {
        let mut broken = lock(&self.broken);
        let reason = broken.get_or_insert(reason).clone();
        drop(broken);
        // Wake a reaper blocked in a read and make the device drop the pair.
        let _ = lock(&self.write).shutdown(Shutdown::Both);
        TransportError::Disconnected { reason }
    }

    fn send(&self, cid: CommandId, frame: &[u8], data: Option<&[u8]>) -> io::Result<()> {
        let data = data.unwrap_or(&[]);
        let header = framing::command_capsule_header(self.queue_id, data.len(), frame.len());
        let headers: Vec<_> = data
            .chunks(self.data_pdu_size_max)
            .enumerate()
            .map(|(i, chunk)| {
                let offset = i * self.data_pdu_size_max;
                data_header(PduType::H2CData, cid.0, offset, chunk.len())
            })
            .collect();
        // The capsule and its data PDUs in one write: the device wakes once for them.
        let mut slices = Vec::with_capacity(2 + 2 * headers.len());
        slices.push(IoSlice::new(&header));
        slices.push(IoSlice::new(frame));
        for (h, chunk) in headers.iter().zip(data.chunks(self.data_pdu_size_max)) {
            slices.push(IoSlice::new(h));
            slices.push(IoSlice::new(chunk));
        }
        // A device that takes no byte for the answer timeout (stopped, hung) fails the
        // write rather than holding it forever.
        lock(&self.write).write_stalling(&mut slices, self.answer_timeout)?;
        TcpMetrics::add(&self.metrics.data_pdus, headers.len() as u64);
        TcpMetrics::add(&self.metrics.commands, 1);
        TcpMetrics::add(&self.metrics.h2c_bytes, data.len() as u64);
        Ok(())
    }

    /// Reads PDUs until a completion, the deadline (`Ok(None)`), or a failure.
    fn receive(
        &self,
        deadline: Option<Instant>,
        wait: bool,
    ) -> Result<Option<Completion>, TransportError> {
        self.check_broken()?;
        let mut rx = lock(&self.receive);
        loop {
            match self.next_completion(&mut rx) {
                Ok(Some(c)) => return Ok(Some(c)),
                Ok(None) => {}
                Err(reason) => return Err(self.fail(reason)),
            }
            if lock(&self.in_flight).is_empty() {
                return Ok(None);
            }
            let timeout = self.read_timeout(deadline, wait);
            let read = self.fill(&mut rx, timeout)?;
            match read {
                Ok(0) => {
                    return Err(self.fail("the device closed the connection".to_string()));
                }
                Ok(_) => *lock(&self.quiet_since) = Instant::now(),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if !wait {
                        return Ok(None);
                    }
                    let quiet = lock(&self.quiet_since).elapsed();
                    if quiet >= self.answer_timeout && !lock(&self.in_flight).is_empty() {
                        let e = TransportError::NoAnswer {
                            device: self.peer.clone(),
                            waited_secs: self.answer_timeout.as_secs(),
                            during: "commands in flight",
                        };
                        self.fail(e.to_string());
                        return Err(e);
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(format!("reading from the device: {e}"))),
            }
        }
    }

    /// How long the next read may wait: not at all (`!wait`), else until the caller's
    /// deadline or until the device has been silent for the answer timeout, whichever
    /// comes first.
    fn read_timeout(&self, deadline: Option<Instant>, wait: bool) -> Option<Duration> {
        let now = Instant::now();
        let silent_left =
            (*lock(&self.quiet_since) + self.answer_timeout).saturating_duration_since(now);
        match deadline {
            _ if !wait => Some(Duration::ZERO),
            None => Some(silent_left.max(Duration::from_millis(1))),
            Some(d) => Some(
                d.saturating_duration_since(now)
                    .min(silent_left.max(Duration::from_millis(1))),
            ),
        }
    }

    /// One read of the socket into the PDU reader, waiting at most `timeout` (a zero
    /// timeout reads without blocking).
    fn fill(
        &self,
        rx: &mut Receive,
        timeout: Option<Duration>,
    ) -> Result<io::Result<usize>, TransportError> {
        let Receive {
            stream,
            reader,
            timeout: current,
            ..
        } = rx;
        Ok(if timeout == Some(Duration::ZERO) {
            stream.set_nonblocking(true).and_then(|()| {
                let r = reader.fill(stream);
                stream.set_nonblocking(false).and(r)
            })
        } else if let Some(read) = stream.fill_polling(reader) {
            read
        } else {
            if *current != timeout {
                stream
                    .set_read_timeout(timeout)
                    .map_err(io_error("set the read timeout"))?;
                *current = timeout;
            }
            reader.fill(stream)
        })
    }

    /// A C2H data PDU: its bytes join those of its command, which must be in flight,
    /// at the next offset and within the length it asked.
    fn take_data(
        &self,
        received: &mut HashMap<CommandId, Vec<u8>>,
        body: &[u8],
    ) -> Result<(), String> {
        let d = decode_data(body).map_err(|e| e.to_string())?;
        let cid = CommandId(d.cid);
        let max = lock(&self.in_flight)
            .get(&cid)
            .copied()
            .ok_or_else(|| format!("data for {cid}, which is not in flight"))?;
        let buf = received.entry(cid).or_default();
        if d.offset as usize != buf.len() || buf.len() + d.data.len() > max {
            return Err(format!(
                "data for {cid} at offset {} of {} bytes, {} received, {max} asked",
                d.offset,
                d.data.len(),
                buf.len()
            ));
        }
        if buf.is_empty() {
            // `max` is the read's length, at most 16 MiB.
            buf.reserve_exact(max);
        }
        buf.extend_from_slice(d.data);
        TcpMetrics::add(&self.metrics.data_pdus, 1);
        TcpMetrics::add(&self.metrics.c2h_bytes, d.data.len() as u64);
        Ok(())
    }

    /// Handles buffered PDUs until one completes a command. `Err` is a protocol
    /// violation by the device (the reason).
    fn next_completion(&self, rx: &mut Receive) -> Result<Option<Completion>, String> {
        loop {
            let pdu = match rx.reader.next_pdu() {
                Ok(Some(pdu)) => pdu,
                Ok(None) => return Ok(None),
                Err(e) => return Err(format!("bad pdu from the device: {e}")),
            };
            match pdu.header.pdu_type {
                PduType::C2HData => self.take_data(&mut rx.data, pdu.body)?,
                PduType::CapsuleResp => {
                    let r = decode_response_capsule(pdu.body).map_err(|e| e.to_string())?;
                    let mut c = decode_completion(r.frame)
                        .map_err(|e| format!("bad completion from the device: {e}"))?;
                    let data = rx.data.remove(&c.id).unwrap_or_default();
                    if data.len() != r.data_len as usize {
                        return Err(format!(
                            "completion of {} says {} data bytes, {} came",
                            c.id,
                            r.data_len,
                            data.len()
                        ));
                    }
                    if !data.is_empty() && !bulk::put_reply_data(&mut c, data) {
                        return Err(format!("data came for {}, whose reply holds none", c.id));
                    }
                    lock(&self.in_flight).remove(&c.id);
                    TcpMetrics::add(&self.metrics.completions, 1);
                    return Ok(Some(c));
                }
                PduType::C2HTermReq => {
                    let t = TermReq::decode(pdu.body).map_err(|e| e.to_string())?;
                    return Err(format!(
                        "the device ended the connection (reason {:#04x}): {}",
                        t.reason, t.message
                    ));
                }
                // A sign of life; the read that brought it reset the silence.
                PduType::C2HKeepAlive => {}
                other => {
                    return Err(FramingError::Unexpected {
                        pdu_type: other,
                        context: "from a device",
                    }
                    .to_string())
                }
            }
        }
    }
}

/// How the connect request failed.
enum Handshake {
    Failed(TransportError),
    /// No whole answer by the deadline.
    TimedOut,
}

impl From<TransportError> for Handshake {
    fn from(e: TransportError) -> Handshake {
        Handshake::Failed(e)
    }
}

/// Sends the connect request of `options`; returns the queue depth it asks.
fn send_icreq(stream: &mut Conn, options: &TcpOptions) -> Result<u32, TransportError> {
    let token = options.token.clone().unwrap_or_default();
    if token.len() > TOKEN_SIZE_MAX {
        return Err(TransportError::Disconnected {
            reason: format!("token has {} bytes, limit is {TOKEN_SIZE_MAX}", token.len()),
        });
    }
    let depth = if options.queue_depth == 0 {
        QUEUE_DEPTH_DEFAULT
    } else {
        options.queue_depth
    };
    let req = ICReq {
        queue_depth: depth,
        token,
    };
    std::io::Write::write_all(stream, &req.encode())
        .map_err(io_error("send the connect request"))?;
    Ok(depth)
}

/// `resp` when it accepts the connection with a queue depth of 1 to `depth` (the one
/// asked) and data pdus of some bytes; else why not.
fn accepted(resp: ICResp, depth: u32) -> Result<ICResp, TransportError> {
    let refused = |reason: String| TransportError::Disconnected {
        reason: format!("the device refused the connection: {reason}"),
    };
    if resp.status != ConnectStatus::Accepted {
        return Err(TransportError::Refused {
            status: format!("{:?}", resp.status),
            reason: resp.message,
        });
    }
    if resp.queue_depth == 0 || resp.queue_depth > depth {
        return Err(refused(format!(
            "granted queue depth {} for {depth} asked",
            resp.queue_depth
        )));
    }
    if resp.data_pdu_size_max == 0 {
        return Err(refused("data pdus of 0 bytes".to_string()));
    }
    Ok(resp)
}

/// Sends the ICReq and reads the ICResp, by `deadline`.
fn handshake(
    stream: &mut Conn,
    options: &TcpOptions,
    deadline: Instant,
) -> Result<ICResp, Handshake> {
    let depth = send_icreq(stream, options)?;
    let mut reader = PduReader::new(CONTROL_PDU_SIZE_MAX);
    let refused = |reason: String| TransportError::Disconnected {
        reason: format!("the device refused the connection: {reason}"),
    };
    loop {
        match reader.next_pdu() {
            Ok(Some(pdu)) => {
                return match pdu.header.pdu_type {
                    PduType::ICResp => {
                        let resp = ICResp::decode(pdu.body).map_err(|e| refused(e.to_string()))?;
                        Ok(accepted(resp, depth)?)
                    }
                    PduType::C2HTermReq => {
                        let t = TermReq::decode(pdu.body).map_err(|e| refused(e.to_string()))?;
                        Err(refused(t.message).into())
                    }
                    other => Err(refused(format!("answered with a {other:?} pdu")).into()),
                };
            }
            Ok(None) => {}
            Err(e) => return Err(refused(e.to_string()).into()),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Handshake::TimedOut);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(io_error("set the read timeout"))?;
        match reader.fill(stream) {
            Ok(0) => {
                return Err(refused(
                    "it closed the connection without answering (it may be at its connection limit, or not a csx device)"
                        .to_string(),
                )
                .into())
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Handshake::TimedOut)
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                return Err(refused(
                    "it reset the connection without answering (it may be at its connection limit)"
                        .to_string(),
                )
                .into())
            }
            Err(source) => {
                return Err(TransportError::Io {
                    op: "read the connect response",
                    source,
                }
                .into())
            }
        }
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn queue_depth(&self) -> u32 {
        self.queue_depth
    }

    fn submit(&self, mut cmd: Command) -> Result<(), TransportError> {
        self.check_broken()?;
        let data = bulk::take_command_data(&mut cmd.op);
        let frame = encode_command(&cmd)?;
        debug_assert!(frame.len() <= COMMAND_CAPSULE_SIZE_MAX);
        debug_assert!(data.as_ref().is_none_or(|d| d.len() <= TRANSFER_SIZE_MAX));
        {
            let mut in_flight = lock(&self.in_flight);
            if in_flight.len() >= self.queue_depth as usize {
                return Err(TransportError::QueueFull {
                    depth: self.queue_depth,
                });
            }
            if in_flight.is_empty() {
                // Silence counts only while something is in flight.
                *lock(&self.quiet_since) = Instant::now();
            }
            let fresh = in_flight
                .insert(cmd.id, bulk::reply_data_max(&cmd.op))
                .is_none();
            assert!(fresh, "{} is already in flight", cmd.id);
        }
        if let Err(e) = self.send(cmd.id, &frame, data.as_deref()) {
            lock(&self.in_flight).remove(&cmd.id);
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                let e = TransportError::NoAnswer {
                    device: self.peer.clone(),
                    waited_secs: self.answer_timeout.as_secs(),
                    during: "sending a command",
                };
                self.fail(e.to_string());
                return Err(e);
            }
            return Err(self.fail(format!("writing to the device: {e}")));
        }
        Ok(())
    }

    fn try_reap(&self) -> Result<Option<Completion>, TransportError> {
        self.receive(None, false)
    }

    fn reap(&self, timeout: Option<Duration>) -> Result<Option<Completion>, TransportError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.receive(deadline, true)
    }

    fn close(self: Box<Self>) -> Result<(), TransportError> {
        // Half-close: the device sees the end of the stream, finishes what is in flight,
        // drops the queue pair (reclaiming its memory) and then closes its side, which
        // is what the read below waits for.
        if lock(&self.write).shutdown(Shutdown::Write).is_err() {
            return Ok(());
        }
        let mut rx = lock(&self.receive);
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        let mut sink = [0u8; 64 << 10];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TransportError::CloseFailed {
                    message: format!("{} did not close the connection in time", self.peer),
                });
            }
            rx.stream
                .set_read_timeout(Some(left))
                .map_err(io_error("set the read timeout"))?;
            match io::Read::read(&mut rx.stream, &mut sink) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A reset is also the end of the connection.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(source) => {
                    return Err(TransportError::Io {
                        op: "wait for the device to close",
                        source,
                    })
                }
            }
        }
    }
}
