//! [`ShmTransport`]: the host side of one shm queue pair, and [`HostBuffer`], an I/O
//! buffer in host memory.
//!
//! Submitting (any thread): reserve a slot of the queue depth, allocate the command's
//! response area and data buffer (and an out-of-line frame if the command is long) from
//! host memory, copy a write's data in, write the entry, publish the tail, and ring the
//! doorbell only if the device sleeps. Reaping (one thread at a time): take entries off
//! the completion ring, copy each completion (and a read's data) out, free its memory.
//! A listing whose completion overflowed its response area is asked again, with an area
//! of the size the device reported.
//!
//! The generic [`Transport`] path moves a write's bytes into host memory and a read's
//! bytes out of it, one copy each beside the device's copy. [`HostBuffer`]s skip those:
//! the caller fills or reads host memory itself and the device copies straight to or
//! from SLM (one copy in all, as DMA): see [`ShmTransport::submit_with_buffer`].
//!
//! Invariants: at most `queue_depth` commands are in flight, so the submission ring
//! never overflows and the completion ring never holds more than its entries; a block
//! of host memory named by a command in flight is freed only when its completion has
//! been consumed.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_proto::{decode_completion, encode_command, Command, CommandId, Completion, Op, Status};

use super::framing::{
    encode_map_request, word, Cqe, Hello, Layout, MapReply, Span, Sqe, SqeFrame, Welcome,
    WelcomeStatus, CQE_DATA_IN_BUFFER, CQE_FRAME_IN_RESPONSE, CQE_RESPONSE_OVERFLOW, LAYOUT_SIZE,
    MAP_REPLY_SIZE, WELCOME_SIZE,
};
use super::heap::{Block, Heap};
use super::metrics::ShmMetrics;
use super::ring::Region;
use super::{
    check_dir, check_name, my_uid, peer_uid, socket_path, trusted_uid, CLOSE_TIMEOUT, CQE_SIZE,
    HANDSHAKE_MESSAGE_SIZE_MAX, HOST_MEMORY_DEFAULT, HOST_SPIN, HOST_SPIN_BUSY,
    LISTING_RESPONSE_AREA_SIZE, QUEUE_DEPTH_DEFAULT, RESPONSE_AREA_SIZE, RESPONSE_RETRIES_MAX,
    SQE_INLINE_FRAME_MAX, SQE_SIZE, TRANSFER_SIZE_MAX,
};
use crate::error::TransportError;
use crate::transport::sys::{self, EventFd};
use crate::transport::{bulk, Timeouts, Transport, KEEP_ALIVE_INTERVAL};

/// A map reply as the file or the transport error every transport gives.
fn map_outcome(reply: MapReply, fd: Option<OwnedFd>) -> Result<OwnedFd, TransportError> {
    let refused = |kind: io::ErrorKind, message: String| TransportError::Io {
        op: "map device memory",
        source: io::Error::new(kind, message),
    };
    match (reply.outcome, fd) {
        (Ok(()), Some(fd)) => Ok(fd),
        (Ok(()), None) => Err(refused(
            io::ErrorKind::InvalidData,
            "the device granted a mapping without a file".to_string(),
        )),
        (Err((why, message)), _) => Err(refused(why.kind(), message)),
    }
}

/// How long a submitter waiting for host memory sleeps between looks at the ring.
const SPACE_POLL: Duration = Duration::from_millis(100);

/// How an shm queue pair is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOptions {
    /// Commands to have in flight at most (0: [`QUEUE_DEPTH_DEFAULT`]).
    pub queue_depth: u32,
    /// Bytes of host memory (0: [`HOST_MEMORY_DEFAULT`]).
    pub host_memory_bytes: u64,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            queue_depth: QUEUE_DEPTH_DEFAULT,
            host_memory_bytes: HOST_MEMORY_DEFAULT,
        }
    }
}

/// What the host keeps for a command in flight.
#[derive(Debug)]
struct InFlight {
    response: Block,
    /// The encoded command, when it did not fit the entry.
    frame: Option<Block>,
    /// The library's data buffer (a write's source or a read's destination).
    data: Option<Block>,
    /// Bytes of data the buffer holds (write) or may receive (read).
    data_len: usize,
    /// The caller's buffer, returned with the completion.
    user: Option<HostBuffer>,
    /// A listing, kept to ask again when its completion overflows; with the tries.
    retry: Option<(Op, u32)>,
}

#[derive(Debug, Default)]
struct Table {
    in_flight: HashMap<CommandId, InFlight>,
    /// Slots taken by submissions still being prepared.
    reserved: usize,
}

#[derive(Debug, Default)]
struct Reaper {
    /// Completions taken off the ring by a submitter that needed host memory.
    ready: VecDeque<(Completion, Option<HostBuffer>)>,
}

#[derive(Debug)]
struct Inner {
    region: Region,
    layout: Layout,
    socket: UnixStream,
    doorbell: EventFd,
    interrupt: EventFd,
    heap: Mutex<Heap>,
    table: Mutex<Table>,
    /// Serialises producers of the submission ring.
    sq: Mutex<()>,
    reaper: Mutex<Reaper>,
    broken: Mutex<Option<String>>,
    metrics: ShmMetrics,
    name: String,
    /// How long the heartbeat may stand still while commands are in flight.
    answer_timeout: Duration,
    heartbeat: Mutex<Heartbeat>,
    /// Map replies read off the socket (by whichever thread read it), with their files.
    map_replies: Mutex<Vec<(MapReply, Option<OwnedFd>)>>,
    /// One map request on the socket at a time.
    map_one: Mutex<()>,
}

/// What the host last saw of the device's heartbeat word.
#[derive(Debug)]
struct Heartbeat {
    value: u32,
    /// When the value last changed (or watching began).
    moved: Instant,
    /// When the host last looked.
    looked: Instant,
}

/// One queue pair over shared memory (see the module doc).
#[derive(Debug)]
pub struct ShmTransport {
    inner: Arc<Inner>,
}

/// A buffer in host memory: fill it and submit a Memory Write from it, or submit a
/// Memory Read into it, with [`ShmTransport::submit_with_buffer`]; the device copies
/// straight between it and SLM. It returns to its owner with the completion.
#[derive(Debug)]
pub struct HostBuffer {
    inner: Arc<Inner>,
    block: Block,
    len: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every guarded value is consistent between statements.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn refused(reason: impl Into<String>) -> TransportError {
    TransportError::Disconnected {
        reason: format!("the device refused the connection: {}", reason.into()),
    }
}

/// An I/O error of step `op` as a transport error.
fn io_error(op: &'static str) -> impl Fn(io::Error) -> TransportError {
    move |source| TransportError::Io { op, source }
}

/// The handshake socket of `shm://name`, connected, once its directory and the user
/// serving it are checked.
fn open_socket(name: &str) -> Result<UnixStream, TransportError> {
    check_name(name).map_err(|reason| TransportError::BadSetting {
        name: "the shm device name",
        value: name.to_string(),
        reason,
    })?;
    let path = socket_path(name);
    let unsafe_place = |reason: String| TransportError::Disconnected {
        reason: format!("refusing shm://{name}: {reason}"),
    };
    if let Some(dir) = path.parent() {
        if dir.exists() {
            check_dir(dir).map_err(unsafe_place)?;
        }
    }
    let socket = UnixStream::connect(&path).map_err(|e| TransportError::Disconnected {
        reason: format!(
            "cannot reach shm://{name} at {}: {e} (is `csx device serve --listen shm://{name}` running as this user?)",
            path.display()
        ),
    })?;
    // The device must be this user's (or root's): another user could have bound the
    // socket to receive what this client writes and answer its reads.
    let me = my_uid();
    let device_uid = peer_uid(&socket).map_err(io_error("ask who serves the socket"))?;
    if !trusted_uid(device_uid, me) {
        return Err(unsafe_place(format!(
            "its socket {} is served by user {device_uid}, not by you (user {me}) or root",
            path.display()
        )));
    }
    Ok(socket)
}

/// Sends the hello and receives the welcome with its descriptors; a refusal is an error
/// naming the device's reason.
fn exchange_hello(
    socket: &UnixStream,
    name: &str,
    hello: &Hello,
    timeouts: &Timeouts,
) -> Result<(Welcome, Vec<OwnedFd>), TransportError> {
    let no_answer = || TransportError::NoAnswer {
        device: format!("shm://{name}"),
        waited_secs: timeouts.connect.as_secs(),
        during: "the connect",
    };
    socket
        .set_read_timeout(Some(timeouts.connect))
        .map_err(io_error("set the handshake timeout"))?;
    // A device that refuses without reading the hello (at its connection limit, or not
    // serving this user) may have answered and closed already: its answer says more than
    // the failed write.
    let sent = (&*socket).write_all(&hello.encode());
    let mut buf = vec![0u8; WELCOME_SIZE + HANDSHAKE_MESSAGE_SIZE_MAX];
    let (n, fds) = match sys::recv_with_fds(socket, &mut buf) {
        Ok((0, _)) if sent.is_err() => {
            return Err(io_error("send the handshake")(sent.expect_err("checked")))
        }
        Ok(got) => got,
        Err(_) if sent.is_err() => {
            return Err(io_error("send the handshake")(sent.expect_err("checked")))
        }
        Err(e) => {
            return Err(match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => no_answer(),
                _ => io_error("receive the handshake")(e),
            })
        }
    };
    if n == 0 {
        return Err(refused(
            "it closed the connection without answering (it may be at its connection limit)",
        ));
    }
    let welcome = Welcome::decode(&buf[..n]).map_err(|e| refused(e.to_string()))?;
    if welcome.status != WelcomeStatus::Accepted {
        return Err(TransportError::Refused {
            status: format!("{:?}", welcome.status),
            reason: welcome.message,
        });
    }
    Ok((welcome, fds))
}

impl HostBuffer {
    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the block is allocated to this buffer alone, and no command naming it
        // is in flight while the caller holds the buffer (submitting moves it into the
        // transport until its completion is reaped).
        unsafe {
            self.inner
                .region
                .slice(self.block.offset as usize, self.len)
        }
    }

    /// The buffer's bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` excludes every other view of it.
        unsafe {
            self.inner
                .region
                .slice_mut(self.block.offset as usize, self.len)
        }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        lock(&self.inner.heap).free(self.block);
    }
}

impl ShmTransport {
    /// Connects to the device serving `shm://name` on this machine.
    pub fn connect(name: &str, options: &ShmOptions) -> Result<ShmTransport, TransportError> {
        ShmTransport::connect_with_timeouts(name, options, Timeouts::from_env()?)
    }

    /// As [`ShmTransport::connect`], waiting for a silent device as `timeouts` says
    /// rather than as `CSX_TIMEOUT` does.
    pub fn connect_with_timeouts(
        name: &str,
        options: &ShmOptions,
        timeouts: Timeouts,
    ) -> Result<ShmTransport, TransportError> {
        let socket = open_socket(name)?;
        let hello = Hello {
            queue_depth: if options.queue_depth == 0 {
                QUEUE_DEPTH_DEFAULT
            } else {
                options.queue_depth
            },
            host_memory_bytes: if options.host_memory_bytes == 0 {
                HOST_MEMORY_DEFAULT
            } else {
                options.host_memory_bytes
            },
        };
        let (welcome, fds) = exchange_hello(&socket, name, &hello, &timeouts)?;
        let [memory, doorbell, interrupt]: [_; 3] = fds
            .try_into()
            .map_err(|fds: Vec<_>| refused(format!("{} descriptors instead of 3", fds.len())))?;
        let region = Region::map(File::from(memory)).map_err(io_error("map the shared region"))?;
        let mut header = [0u8; LAYOUT_SIZE];
        region.read(0, &mut header);
        let layout =
            Layout::decode(&header, region.len() as u64).map_err(|e| refused(e.to_string()))?;
        if layout.queue_depth != welcome.queue_depth
            || layout.queue_id != welcome.queue_id
            || layout.queue_depth > hello.queue_depth
        {
            return Err(refused("the region disagrees with the handshake"));
        }
        socket
            .set_nonblocking(true)
            .map_err(io_error("make the socket non-blocking"))?;
        let inner = Inner {
            heap: Mutex::new(Heap::new(layout.heap_offset, layout.heap_size)),
            region,
            layout,
            socket,
            doorbell: EventFd::from_fd(doorbell),
            interrupt: EventFd::from_fd(interrupt),
            table: Mutex::new(Table::default()),
            sq: Mutex::new(()),
            reaper: Mutex::new(Reaper::default()),
            broken: Mutex::new(None),
            metrics: ShmMetrics::default(),
            name: name.to_string(),
            answer_timeout: timeouts.answer,
            heartbeat: Mutex::new(Heartbeat {
                value: 0,
                moved: Instant::now(),
                looked: Instant::now(),
            }),
            map_replies: Mutex::new(Vec::new()),
            map_one: Mutex::new(()),
        };
        Ok(ShmTransport {
            inner: Arc::new(inner),
        })
    }

    /// The queue id the device gave this pair.
    pub fn queue_id(&self) -> u32 {
        self.inner.layout.queue_id
    }

    /// Bytes of host memory.
    pub fn host_memory_bytes(&self) -> u64 {
        self.inner.layout.heap_size
    }

    /// This side's counters.
    pub fn metrics(&self) -> &ShmMetrics {
        &self.inner.metrics
    }

    /// A buffer of `len` bytes in host memory, or an error when that much is not free
    /// now.
    pub fn alloc_buffer(&self, len: usize) -> Result<HostBuffer, TransportError> {
        let block = lock(&self.inner.heap)
            .alloc(len as u64)
            .ok_or_else(|| no_memory(len, &self.inner))?;
        Ok(HostBuffer {
            inner: Arc::clone(&self.inner),
            block,
            len,
        })
    }

    /// Submits a Memory Write whose data is all of `buffer` (the op's own data must be
    /// empty) or a Memory Read into all of `buffer` (of the read's length). The buffer
    /// comes back with the completion from [`ShmTransport::reap_with_buffer`]; a read's
    /// completion then has an empty data reply, the bytes being in the buffer.
    pub fn submit_with_buffer(
        &self,
        cmd: Command,
        buffer: HostBuffer,
    ) -> Result<(), TransportError> {
        let fits = match &cmd.op {
            Op::MemWrite { data, .. } => data.is_empty(),
            Op::MemRead { len, .. } => *len == buffer.len as u64,
            _ => false,
        };
        if !fits || buffer.len > TRANSFER_SIZE_MAX || !Arc::ptr_eq(&buffer.inner, &self.inner) {
            return Err(TransportError::Io {
                op: "submit with a host buffer",
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} with a buffer of {} bytes: only a memory write of the whole buffer or a read of its length, on this queue pair",
                        cmd.op.name(),
                        buffer.len
                    ),
                ),
            });
        }
        self.inner.submit(cmd, Payload::User(buffer))
    }

    /// As [`Transport::reap`], with the caller's buffer of a
    /// [`ShmTransport::submit_with_buffer`] command.
    pub fn reap_with_buffer(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<(Completion, Option<HostBuffer>)>, TransportError> {
        self.inner.reap(timeout.map(|t| Instant::now() + t), true)
    }
}

fn no_memory(len: usize, inner: &Inner) -> TransportError {
    TransportError::Io {
        op: "allocate host memory",
        source: io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "{len} bytes of host memory asked, {} of {} free",
                lock(&inner.heap).free_bytes(),
                inner.layout.heap_size
            ),
        ),
    }
}

/// A command's bulk data on its way into an entry.
#[derive(Debug)]
enum Payload {
    None,
    /// A write's bytes, copied into host memory.
    Write(Vec<u8>),
    /// A read of this many bytes into host memory.
    Read(usize),
    /// The caller's buffer.
    User(HostBuffer),
}

impl Payload {
    /// Bytes of its data buffer.
    fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Write(d) => d.len(),
            Payload::Read(n) => *n,
            Payload::User(b) => b.len,
        }
    }

    /// Where its data buffer lies in host memory: the caller's buffer, or `block` (the
    /// one allocated for it), or nowhere.
    fn span(&self, block: Option<Block>) -> Span {
        match (self, block) {
            (Payload::User(b), _) => Span {
                offset: b.block.offset,
                len: b.len as u64,
            },
            (_, Some(b)) => Span {
                offset: b.offset,
                len: self.len() as u64,
            },
            _ => Span::default(),
        }
    }
}

fn is_listing(op: &Op) -> bool {
    matches!(
        op,
        Op::FileList { .. }
            | Op::FileExtents { .. }
            | Op::ListFunctions
            | Op::ListPrograms
            | Op::ListProgramsWithGenerations
            | Op::Identify
            | Op::FileStat { .. }
            | Op::DirRead { .. }
            | Op::PathStat { .. }
    )
}

impl Inner {
    fn check_broken(&self) -> Result<(), TransportError> {
        match &*lock(&self.broken) {
            Some(reason) => Err(TransportError::Disconnected {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn fail(&self, reason: String) -> TransportError {
        let reason = lock(&self.broken).get_or_insert(reason).clone();
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        TransportError::Disconnected { reason }
    }

    fn submit(&self, cmd: Command, payload: Payload) -> Result<(), TransportError> {
        self.check_broken()?;
        {
            let mut t = lock(&self.table);
            if t.in_flight.len() + t.reserved >= self.layout.queue_depth as usize {
                return Err(TransportError::QueueFull {
                    depth: self.layout.queue_depth,
                });
            }
            t.reserved += 1;
        }
        let r = self.prepare_and_post(cmd, payload);
        if r.is_err() {
            lock(&self.table).reserved -= 1;
        }
        r
    }

    fn prepare_and_post(&self, cmd: Command, payload: Payload) -> Result<(), TransportError> {
        let frame = encode_command(&cmd)?;
        let response_len = if is_listing(&cmd.op) {
            LISTING_RESPONSE_AREA_SIZE
        } else {
            RESPONSE_AREA_SIZE
        };
        let data_len = payload.len();
        let own_data = matches!(payload, Payload::Write(_) | Payload::Read(_)) && data_len > 0;
        let frame_out = frame.len() > SQE_INLINE_FRAME_MAX;
        let sizes = [
            response_len,
            if frame_out { frame.len() } else { 0 },
            if own_data { data_len } else { 0 },
        ];
        let blocks = self.alloc_waiting(&sizes)?;
        let [response, frame_block, data_block] = blocks;
        let response = response.expect("a response area is always asked for");
        if let (Payload::Write(d), Some(b)) = (&payload, data_block) {
            self.region.write(b.offset as usize, d);
            ShmMetrics::add(&self.metrics.data_bytes, d.len() as u64);
        }
        if let Some(b) = frame_block {
            self.region.write(b.offset as usize, &frame);
        }
        let data_span = payload.span(data_block);
        let sqe = Sqe {
            queue_id: self.layout.queue_id,
            frame: match frame_block {
                Some(b) => SqeFrame::OutOfLine(Span {
                    offset: b.offset,
                    len: frame.len() as u64,
                }),
                None => SqeFrame::Inline(frame),
            },
            data: data_span,
            response: Span {
                offset: response.offset,
                len: response.len,
            },
        };
        let entry = InFlight {
            response,
            frame: frame_block,
            data: data_block,
            data_len,
            user: match payload {
                Payload::User(b) => Some(b),
                _ => None,
            },
            retry: is_listing(&cmd.op).then(|| (cmd.op.clone(), 0)),
        };
        {
            let mut t = lock(&self.table);
            t.reserved -= 1;
            let fresh = t.in_flight.insert(cmd.id, entry).is_none();
            assert!(fresh, "{} is already in flight", cmd.id);
        }
        self.post(&sqe)
    }

    /// Allocates blocks of the given sizes (0: none), waiting for completions to free
    /// host memory when it is short.
    fn alloc_waiting(&self, sizes: &[usize; 3]) -> Result<[Option<Block>; 3], TransportError> {
        let total: usize = sizes.iter().sum();
        loop {
            {
                let mut heap = lock(&self.heap);
                let mut got = [None; 3];
                let mut ok = true;
                for (slot, &size) in got.iter_mut().zip(sizes) {
                    if size == 0 {
                        continue;
                    }
                    match heap.alloc(size as u64) {
                        Some(b) => *slot = Some(b),
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    return Ok(got);
                }
                for b in got.into_iter().flatten() {
                    heap.free(b);
                }
                if total as u64 > heap.size() {
                    drop(heap);
                    return Err(no_memory(total, self));
                }
            }
            // Host memory is held by commands in flight (or by the caller's buffers):
            // take completions off the ring, which frees theirs.
            if lock(&self.table).in_flight.is_empty() {
                return Err(no_memory(total, self));
            }
            self.reap_into_ready()?;
        }
    }

    /// Writes `sqe` at the tail, publishes it, and rings the doorbell if the device
    /// sleeps.
    fn post(&self, sqe: &Sqe) -> Result<(), TransportError> {
        let bytes = sqe.encode();
        let _sq = lock(&self.sq);
        let tail_word = self.region.word(word::SQ_TAIL);
        let tail = tail_word.load(Ordering::Relaxed);
        let head = self.region.word(word::SQ_HEAD).load(Ordering::Acquire);
        let entries = self.layout.sq_entries;
        if tail.wrapping_sub(head) >= entries {
            return Err(self.fail(format!(
                "submission ring full ({} entries, head {head}, tail {tail}): the device lost track",
                entries
            )));
        }
        let slot = (tail & (entries - 1)) as usize;
        self.region
            .write(self.layout.sq_offset as usize + slot * SQE_SIZE, &bytes);
        tail_word.store(tail.wrapping_add(1), Ordering::Release);
        // Pairs with the device's fence between announcing that it sleeps and looking
        // at the tail one last time: one of the two sides sees the other's store.
        fence(Ordering::SeqCst);
        if self.region.word(word::DEVICE_IDLE).load(Ordering::Relaxed) != 0 {
            ShmMetrics::add(&self.metrics.notifies, 1);
            if let Err(e) = self.doorbell.notify() {
                return Err(self.fail(format!("ringing the doorbell: {e}")));
            }
        }
        ShmMetrics::add(&self.metrics.commands, 1);
        Ok(())
    }

    /// Takes one completion off the ring into the ready queue (or waits a while for
    /// one), for a submitter short of host memory.
    fn reap_into_ready(&self) -> Result<(), TransportError> {
        let mut r = lock(&self.reaper);
        if let Some(cqe) = self.take_cqe()? {
            if let Some(done) = self.complete(cqe)? {
                r.ready.push_back(done);
            }
            return Ok(());
        }
        self.wait_cq(Some(Instant::now() + SPACE_POLL))
    }

    fn reap(
        &self,
        deadline: Option<Instant>,
        wait: bool,
    ) -> Result<Option<(Completion, Option<HostBuffer>)>, TransportError> {
        self.check_broken()?;
        let mut r = lock(&self.reaper);
        loop {
            if let Some(done) = r.ready.pop_front() {
                return Ok(Some(done));
            }
            if let Some(cqe) = self.take_cqe()? {
                match self.complete(cqe)? {
                    Some(done) => return Ok(Some(done)),
                    None => continue,
                }
            }
            if lock(&self.table).in_flight.is_empty() {
                return Ok(None);
            }
            if !wait || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            self.check_heartbeat()?;
            // Sleep at most a keep-alive interval, to look at the heartbeat again.
            let look_again = Instant::now() + KEEP_ALIVE_INTERVAL;
            self.wait_cq(Some(deadline.map_or(look_again, |d| d.min(look_again))))?;
        }
    }

    /// The next completion entry, if the device posted one.
    fn take_cqe(&self) -> Result<Option<Cqe>, TransportError> {
        let head_word = self.region.word(word::CQ_HEAD);
        let head = head_word.load(Ordering::Relaxed);
        let tail = self.region.word(word::CQ_TAIL).load(Ordering::Acquire);
        if head == tail {
            return Ok(None);
        }
        let entries = self.layout.cq_entries;
        if tail.wrapping_sub(head) > entries {
            return Err(self.fail(format!(
                "completion ring tail {tail} is more than {entries} entries past head {head}"
            )));
        }
        let slot = (head & (entries - 1)) as usize;
        let mut bytes = [0u8; CQE_SIZE];
        self.region
            .read(self.layout.cq_offset as usize + slot * CQE_SIZE, &mut bytes);
        head_word.store(head.wrapping_add(1), Ordering::Release);
        match Cqe::decode(&bytes) {
            Ok(cqe) => Ok(Some(cqe)),
            Err(e) => Err(self.fail(format!("bad completion entry: {e}"))),
        }
    }

    /// Turns a completion entry into the command's completion; `None` when the command
    /// was asked again (a listing that overflowed its response area).
    fn complete(
        &self,
        cqe: Cqe,
    ) -> Result<Option<(Completion, Option<HostBuffer>)>, TransportError> {
        let cid = CommandId(cqe.cid);
        let Some(mut entry) = lock(&self.table).in_flight.remove(&cid) else {
            return Err(self.fail(format!("completion for {cid}, which is not in flight")));
        };
        ShmMetrics::add(&self.metrics.completions, 1);
        if cqe.flags & CQE_RESPONSE_OVERFLOW != 0 {
            return self.overflowed(cid, entry, cqe.frame_len as usize);
        }
        let frame = if cqe.flags & CQE_FRAME_IN_RESPONSE != 0 {
            if u64::from(cqe.frame_len) > entry.response.len {
                return Err(self.fail(format!(
                    "completion of {cid} has {} bytes, its response area {}",
                    cqe.frame_len, entry.response.len
                )));
            }
            let mut f = vec![0u8; cqe.frame_len as usize];
            self.region.read(entry.response.offset as usize, &mut f);
            f
        } else {
            cqe.inline
        };
        let mut c = match decode_completion(&frame) {
            Ok(c) if c.id == cid => c,
            Ok(c) => {
                return Err(self.fail(format!("entry of {cid} holds the completion of {}", c.id)))
            }
            Err(e) => return Err(self.fail(format!("bad completion of {cid}: {e}"))),
        };
        if cqe.flags & CQE_DATA_IN_BUFFER != 0 {
            let n = cqe.data_len as usize;
            if n > entry.data_len {
                return Err(self.fail(format!(
                    "{n} data bytes for {cid}, which asked for {}",
                    entry.data_len
                )));
            }
            if let Some(b) = entry.data {
                let mut bytes = vec![0u8; n];
                self.region.read(b.offset as usize, &mut bytes);
                ShmMetrics::add(&self.metrics.data_bytes, n as u64);
                if !bulk::put_reply_data(&mut c, bytes) {
                    return Err(self.fail(format!("data came for {cid}, whose reply holds none")));
                }
            }
        }
        self.release(&mut entry);
        Ok(Some((c, entry.user.take())))
    }

    /// A completion that did not fit its response area.
    fn overflowed(
        &self,
        cid: CommandId,
        mut entry: InFlight,
        needed: usize,
    ) -> Result<Option<(Completion, Option<HostBuffer>)>, TransportError> {
        self.release(&mut entry);
        let retry = entry.retry.take();
        let again = match retry {
            Some((op, tries)) if tries < RESPONSE_RETRIES_MAX => {
                // The device reported the size; a little slack covers a listing that
                // grows between the tries.
                let size = needed + needed / 8 + 4096;
                lock(&self.heap).alloc(size as u64).map(|b| (op, tries, b))
            }
            _ => None,
        };
        let Some((op, tries, response)) = again else {
            let c = Completion::error(
                cid,
                Status::Internal,
                "transport",
                format!(
                    "the completion needs {needed} bytes, more than the response area host memory can give"
                ),
            );
            return Ok(Some((c, entry.user.take())));
        };
        let cmd = Command::new(cid, op.clone());
        let frame = encode_command(&cmd)?;
        if frame.len() > SQE_INLINE_FRAME_MAX {
            // Listings are small commands; a path of 1 KiB is the longest.
            lock(&self.heap).free(response);
            let c = Completion::error(
                cid,
                Status::Internal,
                "transport",
                "listing command too long to ask again",
            );
            return Ok(Some((c, None)));
        }
        let sqe = Sqe {
            queue_id: self.layout.queue_id,
            frame: SqeFrame::Inline(frame),
            data: Span::default(),
            response: Span {
                offset: response.offset,
                len: response.len,
            },
        };
        let again = InFlight {
            response,
            frame: None,
            data: None,
            data_len: 0,
            user: None,
            retry: Some((op, tries + 1)),
        };
        lock(&self.table).in_flight.insert(cid, again);
        self.post(&sqe)?;
        Ok(None)
    }

    /// Frees the library's blocks of a completed command.
    fn release(&self, entry: &mut InFlight) {
        let mut heap = lock(&self.heap);
        heap.free(entry.response);
        for b in [entry.frame.take(), entry.data.take()]
            .into_iter()
            .flatten()
        {
            heap.free(b);
        }
    }

    /// Polls the completion ring, then sleeps on the interrupt, until an entry is there,
    /// the deadline passes, or the device is gone.
    fn wait_cq(&self, deadline: Option<Instant>) -> Result<(), TransportError> {
        let head = self.region.word(word::CQ_HEAD).load(Ordering::Relaxed);
        let tail = self.region.word(word::CQ_TAIL);
        let start = Instant::now();
        while start.elapsed() < HOST_SPIN {
            if tail.load(Ordering::Acquire) != head {
                return Ok(());
            }
            if start.elapsed() < HOST_SPIN_BUSY {
                std::hint::spin_loop();
            } else {
                // Yield rather than spin: on a machine with few cores the device's
                // threads need the core this one would burn.
                std::thread::yield_now();
            }
        }
        let idle = self.region.word(word::HOST_IDLE);
        idle.store(1, Ordering::Relaxed);
        // Pairs with the device's fence between publishing a completion and looking at
        // this flag.
        fence(Ordering::SeqCst);
        if tail.load(Ordering::Acquire) != head {
            idle.store(0, Ordering::Relaxed);
            return Ok(());
        }
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        ShmMetrics::add(&self.metrics.sleeps, 1);
        let ready = sys::poll_readable(&[self.interrupt.fd(), self.socket.as_fd()], timeout);
        idle.store(0, Ordering::Relaxed);
        self.interrupt.clear();
        let ready = ready.map_err(|e| self.fail(format!("waiting for completions: {e}")))?;
        // A device that posts its last completions and then says goodbye: the ring
        // comes first, the goodbye once it is empty.
        if ready[1] && tail.load(Ordering::Acquire) == head {
            self.check_socket()?;
        }
        Ok(())
    }

    /// Fails when the device's heartbeat stood still for the answer timeout while this
    /// host watched (a stopped or hung device); a device without a heartbeat (0) is
    /// not judged.
    fn check_heartbeat(&self) -> Result<(), TransportError> {
        let value = self.region.word(word::HEARTBEAT).load(Ordering::Acquire);
        let now = Instant::now();
        let mut h = lock(&self.heartbeat);
        if value != h.value || now.duration_since(h.looked) > 2 * KEEP_ALIVE_INTERVAL {
            // It moved, or nobody watched meanwhile: the silence starts now.
            h.value = value;
            h.moved = now;
        }
        h.looked = now;
        if value != 0 && now.duration_since(h.moved) >= self.answer_timeout {
            drop(h);
            let e = TransportError::NoAnswer {
                device: format!("shm://{}", self.name),
                waited_secs: self.answer_timeout.as_secs(),
                during: "commands in flight",
            };
            self.fail(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// The socket became readable: a map reply (kept for its requester), or the device
    /// said goodbye or went away.
    fn check_socket(&self) -> Result<(), TransportError> {
        let mut buf = [0u8; HANDSHAKE_MESSAGE_SIZE_MAX];
        let (n, mut fds) = match sys::recv_with_fds(&self.socket, &mut buf) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(self.fail(format!("shm://{}: {e}", self.name))),
        };
        if n == 0 {
            return Err(self.fail(format!(
                "shm://{}: the device closed the connection",
                self.name
            )));
        }
        if MapReply::is_reply(&buf[..n]) {
            if let Some(reply) = MapReply::decode(&buf[..n]) {
                lock(&self.map_replies).push((reply, fds.pop()));
                if n == MAP_REPLY_SIZE {
                    return Ok(());
                }
                // A goodbye right behind the reply.
                let text = String::from_utf8_lossy(&buf[MAP_REPLY_SIZE..n]).into_owned();
                return Err(self.fail(format!("shm://{}: {text}", self.name)));
            }
        }
        Err(self.fail(format!(
            "shm://{}: {}",
            self.name,
            String::from_utf8_lossy(&buf[..n])
        )))
    }

    /// Asks the device for the memory file of allocation `handle` and waits for its
    /// reply (as long as a command may go unanswered).
    fn share_mem(&self, handle: u32) -> Result<OwnedFd, TransportError> {
        let _one = lock(&self.map_one);
        if let Some(reason) = lock(&self.broken).clone() {
            return Err(TransportError::Disconnected { reason });
        }
        (&self.socket)
            .write_all(&encode_map_request(handle))
            .map_err(|e| self.fail(format!("shm://{}: asking to map memory: {e}", self.name)))?;
        let deadline = Instant::now() + self.answer_timeout;
        loop {
            let taken = {
                let mut replies = lock(&self.map_replies);
                let at = replies.iter().position(|(r, _)| r.handle == handle);
                at.map(|i| replies.swap_remove(i))
            };
            if let Some((reply, fd)) = taken {
                return map_outcome(reply, fd);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TransportError::NoAnswer {
                    device: format!("shm://{}", self.name),
                    waited_secs: self.answer_timeout.as_secs(),
                    during: "a request to map device memory",
                });
            }
            // Short looks: a reaping thread may read the reply off the socket meanwhile.
            let look = left.min(Duration::from_millis(5));
            sys::poll_readable(&[self.socket.as_fd()], Some(look))
                .map_err(|e| self.fail(format!("waiting for a map reply: {e}")))?;
            self.check_socket()?;
        }
    }
}

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn queue_depth(&self) -> u32 {
        self.inner.layout.queue_depth
    }

    fn submit(&self, mut cmd: Command) -> Result<(), TransportError> {
        let payload = match bulk::take_command_data(&mut cmd.op) {
            Some(d) => Payload::Write(d),
            None => match bulk::reply_data_max(&cmd.op) {
                0 => Payload::None,
                n => Payload::Read(n),
            },
        };
        self.inner.submit(cmd, payload)
    }

    fn try_reap(&self) -> Result<Option<Completion>, TransportError> {
        Ok(self.inner.reap(None, false)?.map(|(c, _)| c))
    }

    fn reap(&self, timeout: Option<Duration>) -> Result<Option<Completion>, TransportError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        Ok(self.inner.reap(deadline, true)?.map(|(c, _)| c))
    }

    fn share_mem(&self, handle: csx_proto::MemHandle) -> Result<OwnedFd, TransportError> {
        self.inner.share_mem(handle.0)
    }

    fn close(self: Box<Self>) -> Result<(), TransportError> {
        // Half-close: the device sees the end of the stream, finishes what is in flight,
        // drops the queue pair (reclaiming its memory) and closes its side.
        let inner = &self.inner;
        if inner.socket.shutdown(std::net::Shutdown::Write).is_err() {
            return Ok(());
        }
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        let mut buf = [0u8; 1024];
        loop {
            match (&inner.socket).read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(TransportError::CloseFailed {
                            message: format!("shm://{} did not close in time", inner.name),
                        });
                    }
                    let _ = sys::poll_readable(&[inner.socket.as_fd()], Some(left));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
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

// Hooks for the device side's tests in csx-server (feature `test-hooks`): a host that
// breaks the protocol on purpose.
#[cfg(any(test, feature = "test-hooks"))]
#[doc(hidden)]
impl ShmTransport {
    /// Posts an entry for `cid` holding `frame` inline, bent by `tweak`, as a broken or
    /// hostile host would (the device's checks are tested with it).
    pub fn post_raw(
        &self,
        cid: CommandId,
        frame: Vec<u8>,
        tweak: impl FnOnce(&mut Sqe),
    ) -> Result<(), TransportError> {
        let inner = &self.inner;
        let response = lock(&inner.heap)
            .alloc(RESPONSE_AREA_SIZE as u64)
            .expect("test host memory");
        let entry = InFlight {
            response,
            frame: None,
            data: None,
            data_len: 0,
            user: None,
            retry: None,
        };
        lock(&inner.table).in_flight.insert(cid, entry);
        let mut sqe = Sqe {
            queue_id: inner.layout.queue_id,
            frame: SqeFrame::Inline(frame),
            data: Span::default(),
            response: Span {
                offset: response.offset,
                len: response.len,
            },
        };
        tweak(&mut sqe);
        inner.post(&sqe)
    }

    /// The layout and region, for tests that scribble on the rings.
    pub fn raw_region(&self) -> (&Region, Layout) {
        (&self.inner.region, self.inner.layout)
    }

    /// Rings the doorbell whether or not the device sleeps.
    pub fn ring_doorbell(&self) {
        self.inner.doorbell.notify().expect("doorbell");
    }
}
