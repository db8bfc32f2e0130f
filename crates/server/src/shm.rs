//! The device side of shm queue pairs: the handshake socket, the region each client
//! gets, and a client's poller thread.
//!
//! One thread per client serves both rings. It polls the submission ring, copies each
//! entry out, checks it, and submits the command to the client's queue pair: a Memory
//! Read or Write with a host-memory buffer goes through
//! `QueuePair::submit_with_buffer`, so the device copies straight between host memory
//! and SLM. It reaps the queue pair and posts completion entries, putting a read's data
//! into its buffer and a long completion into its response area, and raises the
//! interrupt only when the host sleeps. When idle it sleeps on the doorbell. While it
//! runs a command inline, a helper thread (`help`, see `crate::help`) takes the entries
//! behind it if the device says the run outlasts its leash.
//!
//! Invariants: nothing read from the region is trusted: each entry is copied out before
//! it is decoded, and every span it names is checked to lie in the client's heap before
//! anything is copied or allocated for it; an entry that cannot be answered (no command
//! id) or a ring index out of range ends the connection, anything else that is wrong
//! gets an error completion; the queue pair is dropped only when every command in
//! flight has completed, and before the socket closes.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csx_device::{DmaBuffer, QueuePair, SubmitError};
use csx_proto::limits::{FRAME_SIZE_MAX, QUEUE_DEPTH_MAX};
use csx_proto::{
    decode_command, encode_completion, CommandId, Completion, Op, Reply, Status, WireError,
};

use csx_host::transport::bulk;
use csx_host::transport::shm as shm_transport;
use csx_host::transport::shm::framing::{
    decode_map_request, word, Cqe, Hello, Layout, MapRefusal, MapReply, ShmFramingError, Span, Sqe,
    SqeFrame, Welcome, WelcomeStatus, CQE_DATA_IN_BUFFER, CQE_FRAME_IN_RESPONSE,
    CQE_RESPONSE_OVERFLOW, HELLO_SIZE, MAP_REQUEST_SIZE,
};
use csx_host::transport::shm::metrics::ShmMetrics;
use csx_host::transport::shm::ring::Region;
use csx_host::transport::shm::{
    socket_path, COMPLETION_STALL_TIMEOUT, CQE_INLINE_FRAME_MAX, CQE_SIZE, DEVICE_SPIN,
    HANDSHAKE_TIMEOUT, HOST_MEMORY_MAX, HOST_MEMORY_MIN, SQE_SIZE, TRANSFER_SIZE_MAX,
};
use csx_host::transport::sys::{self, EventFd};

use crate::help::HelpSignal;
use crate::quota::Quota;
use crate::replies::{NotAdmitted, ReplyBudget};
use crate::{Context, ACCEPT_POLL};
use csx_host::transport::KEEP_ALIVE_INTERVAL;

/// Binds the handshake socket of `shm://name` in this user's socket directory (made
/// 0700 if missing, refused if another user owns it or others may write it), replacing
/// a stale socket file left by a device that died, refusing one a running device
/// answers on. The socket is mode 0600 (0666 when other users are served: the
/// daemon then checks each client's user itself).
pub(crate) fn bind(name: &str, other_users: bool) -> io::Result<(UnixListener, PathBuf)> {
    shm_transport::prepare_dir(other_users)
        .map_err(|reason| io::Error::new(io::ErrorKind::PermissionDenied, reason))?;
    let path = socket_path(name);
    if std::fs::symlink_metadata(&path).is_ok() {
        if UnixStream::connect(&path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another device serves shm://{name} at {}", path.display()),
            ));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    let mode = if other_users { 0o666 } else { 0o600 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    listener.set_nonblocking(true)?;
    Ok((listener, path))
}

/// The user of the client at the other end of `stream`, if it may be served: one of this user
/// (or root), or any user when the server serves other users. Refused clients hear why.
fn admit_user(stream: &mut UnixStream, ctx: &Context) -> Option<u32> {
    let me = shm_transport::my_uid();
    let uid = match shm_transport::peer_uid(stream) {
        Ok(uid) => uid,
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell which user an shm client is; closing");
            return None;
        }
    };
    if ctx.shm_other_users || shm_transport::trusted_uid(uid, me) {
        return Some(uid);
    }
    tracing::warn!(client_uid = uid, "refusing an shm client of another user");
    refuse_early(
        stream,
        WelcomeStatus::PermissionDenied,
        format!("this device serves user {me} only, not user {uid}"),
    );
    None
}

/// Answers a client refused before its hello was read (its hello is then ignored).
fn refuse_early(stream: &mut UnixStream, status: WelcomeStatus, message: String) {
    let w = Welcome {
        status,
        queue_depth: 0,
        queue_id: 0,
        region_bytes: 0,
        message,
    };
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(&w.encode());
}

/// Hangs a connection in its handshake up from another thread (a newer connection of
/// its user takes its place).
fn hang_up(stream: &UnixStream) -> Option<Box<dyn Fn() + Send>> {
    let s = stream.try_clone().ok()?;
    Some(Box::new(move || {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }))
}

/// Accepts clients until the server stops.
pub(crate) fn accept_loop(listener: UnixListener, ctx: &Arc<Context>) {
    let mut next = 0u64;
    while !ctx.stopping() {
        match listener.accept() {
            Ok((mut stream, _)) => {
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let Some(uid) = admit_user(&mut stream, ctx) else {
                    Context::count(&ctx.clients_refused, 1);
                    continue;
                };
                next += 1;
                let mut refusal = stream.try_clone().ok();
                let Some(hang_up) = hang_up(&stream) else {
                    continue;
                };
                let spawned = ctx.spawn_connection(
                    format!("csx-shm-{next}"),
                    crate::Source::User(uid),
                    hang_up,
                    move |ctx| serve(stream, &ctx),
                );
                if let Err(why) = spawned {
                    Context::count(&ctx.clients_refused, 1);
                    tracing::warn!(client_uid = uid, reason = %why, "refusing an shm client");
                    if let Some(s) = refusal.as_mut() {
                        refuse_early(s, WelcomeStatus::Unavailable, why.to_string());
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::wait_readable(&listener, ACCEPT_POLL)
            }
            Err(e) => {
                tracing::warn!(error = %e, "shm accept failed");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

/// A range of the client's host memory lent to the device for one command.
#[derive(Debug)]
struct HostMemory {
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

impl DmaBuffer for HostMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read_into(&self, dst: &mut [u8]) {
        self.region.read(self.offset, dst);
    }

    fn write_from(&self, src: &[u8]) {
        self.region.write(self.offset, src);
    }
}

/// How a command's reply data reaches the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadPath {
    /// No data buffer.
    None,
    /// The device wrote the buffer itself (a Memory Read with a buffer).
    Dma,
    /// The reply's bytes are copied into the buffer (a File Read).
    Copy,
}

/// Where a command's completion goes.
#[derive(Clone, Copy, Debug)]
struct Route {
    response: Span,
    data: Span,
    read: ReadPath,
}

/// One client's queue: the region, its eventfds, its queue pair.
#[derive(Debug)]
struct Queue {
    region: Arc<Region>,
    layout: Layout,
    doorbell: EventFd,
    interrupt: EventFd,
    qp: QueuePair,
    routes: Mutex<HashMap<CommandId, Route>>,
    /// Serialises producers of the completion ring (both threads post).
    cq: Mutex<()>,
    /// The host is gone (or broke the protocol): completions are dropped.
    gone: AtomicBool,
    metrics: ShmMetrics,
    quota: Quota,
    replies: ReplyBudget,
    /// The next submission entry to take (the host's head word is only written, never
    /// trusted); held by the thread taking entries.
    sq_head: Mutex<u32>,
    /// The poller runs the last entry it took, inline perhaps (`take`): the helper may
    /// take entries meanwhile (see `help`).
    lent: AtomicBool,
    /// How the connection ended while the helper took entries.
    ended: Mutex<Option<Ending>>,
    /// Shared with the queue pair's overrun hook (a signal only: the pair must not keep
    /// its own queue alive).
    help: Arc<HelpSignal>,
    /// The client is of the device's own user (or root), so it may map its device memory
    /// (`answer_map_request`).
    may_map: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why a client's submission loop ended.
#[derive(Debug)]
enum Ending {
    Closed,
    Stopping,
    Fatal(String),
}

/// One client: handshake, then its poller.
fn serve(mut stream: UnixStream, ctx: &Arc<Context>) {
    let Some(queue) = handshake(&mut stream, ctx) else {
        Context::count(&ctx.clients_refused, 1);
        return;
    };
    let queue = Arc::new(queue);
    let queue_id = queue.layout.queue_id;
    ctx.client_connected();
    tracing::info!(
        client = queue_id,
        depth = queue.layout.queue_depth,
        host_memory = queue.layout.heap_size,
        "shm client connected"
    );
    {
        // The device calls this (on its watchdog thread) when an Execute the poller runs
        // inline outlasts its leash: the helper then takes entries (`help`).
        let help = Arc::clone(&queue.help);
        queue.qp.on_inline_overrun(move || help.request());
    }
    let why = std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name(format!("csx-shm-help-{queue_id}"))
            .spawn_scoped(scope, || help(&queue, ctx));
        let why = poll_queue(&queue, &stream, ctx);
        queue.help.close();
        if let Ok(h) = helper {
            let _ = h.join();
        }
        why
    });
    finish(queue, why, &mut stream, ctx);
}

/// Ends a client's connection: its commands in flight complete (executions aborted),
/// its programs are reclaimed, it hears why if not by its own close, and its queue pair
/// goes before its socket.
fn finish(queue: Arc<Queue>, why: Ending, stream: &mut UnixStream, ctx: &Arc<Context>) {
    let queue_id = queue.layout.queue_id;
    if !matches!(why, Ending::Stopping) {
        queue.gone.store(true, Ordering::Release);
    }
    // Executions in flight are aborted (nobody waits for them any more: the host is
    // gone or the device is closing); every command in flight then completes, and its
    // completion is posted (or dropped for a host that is gone) before the queue pair
    // goes.
    queue.qp.abort_all();
    while queue.qp.in_flight() > 0 {
        if let Some(c) = queue.qp.reap(Some(ACCEPT_POLL)) {
            complete(&queue, c, ctx);
        }
    }
    let reclaimed = queue
        .quota
        .release(&queue.qp, &ctx.slot_owners, ctx.reclaim_programs);
    if reclaimed > 0 {
        tracing::info!(
            client = queue_id,
            programs = reclaimed,
            "unloaded the programs of a departed client"
        );
    }
    let goodbye = match &why {
        Ending::Closed => None,
        Ending::Stopping => Some("the device is shutting down".to_string()),
        Ending::Fatal(reason) => {
            tracing::warn!(client = queue_id, %reason, "closing an shm client");
            Some(format!("protocol error: {reason}"))
        }
    };
    if let Some(text) = goodbye {
        let _ = stream.write_all(text.as_bytes());
    }
    // The queue pair goes first (reclaiming the client's memory), then the socket.
    match Arc::try_unwrap(queue) {
        Ok(q) => drop(q),
        Err(_) => tracing::error!(client = queue_id, "queue still shared at disconnect"),
    }
    ctx.client_disconnected();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    tracing::info!(client = queue_id, reason = ?why, "shm client disconnected");
}

fn handshake(stream: &mut UnixStream, ctx: &Context) -> Option<Queue> {
    let buf = read_hello(stream)?;
    let hello = match Hello::decode(&buf) {
        Ok(h) => h,
        Err(e @ ShmFramingError::Version { .. }) => {
            return refuse(stream, WelcomeStatus::VersionUnsupported, e.to_string())
        }
        Err(e) => {
            tracing::warn!(error = %e, "bad shm hello");
            return None;
        }
    };
    if let Err((status, message)) = check_hello(&hello, ctx) {
        return refuse(stream, status, message);
    }
    // The per-client limit on commands in flight is the depth granted.
    let depth = hello
        .queue_depth
        .min(QUEUE_DEPTH_MAX)
        .min(ctx.limits.queued_commands);
    let qp = match ctx.device.queue_pair(depth) {
        Ok(qp) => qp,
        Err(e) => return refuse(stream, WelcomeStatus::Unavailable, e.to_string()),
    };
    let layout = Layout::new(depth, qp.client().0, hello.host_memory_bytes);
    let (region, doorbell, interrupt) = match make_region(&layout) {
        Ok(m) => m,
        Err(e) => {
            return refuse(
                stream,
                WelcomeStatus::Unavailable,
                format!("cannot make the shared region: {e}"),
            )
        }
    };
    let welcome = Welcome {
        status: WelcomeStatus::Accepted,
        queue_depth: depth,
        queue_id: layout.queue_id,
        region_bytes: layout.region_bytes(),
        message: String::new(),
    };
    let fds = [region.file().as_fd(), doorbell.fd(), interrupt.fd()];
    if let Err(e) = sys::send_with_fds(stream, &welcome.encode(), &fds) {
        tracing::warn!(error = %e, "cannot send the shm welcome");
        return None;
    }
    let _ = stream.set_nonblocking(true);
    let may_map = shm_transport::peer_uid(stream)
        .is_ok_and(|uid| shm_transport::trusted_uid(uid, shm_transport::my_uid()));
    Some(Queue::new(
        region,
        layout,
        (doorbell, interrupt),
        qp,
        may_map,
        ctx,
    ))
}

/// The hello, read under one deadline for the whole of it (a peer trickling bytes holds
/// this thread no longer than a silent one); `None` when it does not come.
fn read_hello(stream: &mut UnixStream) -> Option<[u8; HELLO_SIZE]> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut buf = [0u8; HELLO_SIZE];
    let mut got = 0;
    while got < HELLO_SIZE {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return None;
        }
        match stream.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(buf)
}

/// Answers a refused hello with a welcome naming why.
fn refuse(stream: &mut UnixStream, status: WelcomeStatus, message: String) -> Option<Queue> {
    tracing::warn!(?status, %message, "refusing shm client");
    let w = Welcome {
        status,
        queue_depth: 0,
        queue_id: 0,
        region_bytes: 0,
        message,
    };
    let _ = stream.write_all(&w.encode());
    None
}

/// Why a hello cannot be served, if it cannot.
fn check_hello(hello: &Hello, ctx: &Context) -> Result<(), (WelcomeStatus, String)> {
    if hello.queue_depth == 0 {
        return Err((WelcomeStatus::BadQueueDepth, "queue depth 0".into()));
    }
    if !(HOST_MEMORY_MIN..=HOST_MEMORY_MAX).contains(&hello.host_memory_bytes) {
        let m = format!(
            "host memory of {} bytes, must be {HOST_MEMORY_MIN}..={HOST_MEMORY_MAX}",
            hello.host_memory_bytes
        );
        return Err((WelcomeStatus::BadHostMemory, m));
    }
    if ctx.stopping() {
        return Err((
            WelcomeStatus::Unavailable,
            "the device is shutting down".into(),
        ));
    }
    Ok(())
}

/// The client's shared region (its control page written) and its two eventfds.
fn make_region(layout: &Layout) -> io::Result<(Region, EventFd, EventFd)> {
    let name = format!("csx-client-{}", layout.queue_id);
    let region = Region::map(sys::memfd_sealed(&name, layout.region_bytes())?)?;
    region.write(0, &layout.encode());
    region.word(word::HEARTBEAT).store(1, Ordering::Release);
    Ok((region, EventFd::new()?, EventFd::new()?))
}

impl Queue {
    fn new(
        region: Region,
        layout: Layout,
        (doorbell, interrupt): (EventFd, EventFd),
        qp: QueuePair,
        may_map: bool,
        ctx: &Context,
    ) -> Queue {
        let head = region.word(word::SQ_HEAD).load(Ordering::Relaxed);
        Queue {
            region: Arc::new(region),
            layout,
            doorbell,
            interrupt,
            qp,
            routes: Mutex::new(HashMap::new()),
            cq: Mutex::new(()),
            gone: AtomicBool::new(false),
            metrics: ShmMetrics::default(),
            quota: Quota::new(layout.queue_id, ctx.limits),
            replies: ReplyBudget::new(ctx.limits.reply_bytes, Arc::clone(&ctx.reply_bytes_held)),
            sq_head: Mutex::new(head),
            lent: AtomicBool::new(false),
            ended: Mutex::new(None),
            help: Arc::new(HelpSignal::default()),
            may_map,
        }
    }
}

/// How long the poller waits for a completion of a command in flight before it looks
/// at the submission ring again (new entries also get picked up at every completion).
const COMPLETION_WAIT: Duration = Duration::from_micros(500);

/// The client's one device thread: take submission entries and post completions,
/// polling both while busy and for [`DEVICE_SPIN`] after; then wait for a completion
/// while commands are in flight, or sleep on the doorbell when none are.
///
/// One thread for both directions keeps a round trip at two thread hand-offs (this
/// thread to an engine and back), which matters on a machine with few cores.
fn poll_queue(q: &Queue, stream: &UnixStream, ctx: &Context) -> Ending {
    let tail_word = q.region.word(word::SQ_TAIL);
    let entries = q.layout.sq_entries;
    let mut last_work = Instant::now();
    loop {
        if let Some(end) = lock(&q.ended).take() {
            // The helper met a broken entry (see `help`).
            return end;
        }
        let mut worked = match take_entries(q, tail_word, entries, ctx) {
            Ok(took) => took,
            Err(reason) => return Ending::Fatal(reason),
        };
        while let Some(c) = q.qp.try_reap() {
            complete(q, c, ctx);
            worked = true;
        }
        if worked {
            last_work = Instant::now();
            continue;
        }
        if ctx.stopping() {
            return Ending::Stopping;
        }
        if last_work.elapsed() < DEVICE_SPIN {
            // Yield rather than spin: the engine running the command may need this core.
            std::thread::yield_now();
            continue;
        }
        if q.qp.in_flight() > 0 {
            if let Some(c) = q.qp.reap(Some(COMPLETION_WAIT)) {
                complete(q, c, ctx);
                last_work = Instant::now();
            } else if let Some(end) = socket_event(q, stream) {
                // The host went away while a long command runs: its executions are
                // aborted rather than waited for (see `serve`).
                return end;
            }
            continue;
        }
        if let Some(end) = sleep_on_doorbell(q, stream, tail_word) {
            return end;
        }
        last_work = Instant::now();
    }
}

/// Takes every entry the host published (the last one perhaps inline, see [`take`]);
/// whether there were any. `Err` ends the connection.
fn take_entries(
    q: &Queue,
    tail_word: &std::sync::atomic::AtomicU32,
    entries: u32,
    ctx: &Context,
) -> Result<bool, String> {
    let mut head = lock(&q.sq_head);
    let tail = tail_word.load(Ordering::Acquire);
    if tail == *head {
        return Ok(false);
    }
    check_tail(*head, tail, entries)?;
    while *head != tail {
        let bytes = next_entry(q, &mut head);
        if *head != tail {
            take(q, &bytes, false, ctx)?;
            continue;
        }
        // The last entry of a batch may run on this thread (see `take`): the helper may
        // take the entries behind it meanwhile.
        drop(head);
        q.lent.store(true, Ordering::SeqCst);
        let taken = take(q, &bytes, true, ctx);
        q.lent.store(false, Ordering::SeqCst);
        taken?;
        return Ok(true);
    }
    Ok(true)
}

/// Sleeps on the doorbell and the socket (after telling the host, and looking at the
/// ring once more); how the connection ended, if the socket says it did.
fn sleep_on_doorbell(
    q: &Queue,
    stream: &UnixStream,
    tail_word: &std::sync::atomic::AtomicU32,
) -> Option<Ending> {
    let idle = q.region.word(word::DEVICE_IDLE);
    idle.store(1, Ordering::Relaxed);
    // Pairs with the host's fence between publishing a tail and looking at this flag:
    // either it sees the flag and rings, or this sees its tail.
    fence(Ordering::SeqCst);
    if tail_word.load(Ordering::Acquire) != *lock(&q.sq_head) {
        idle.store(0, Ordering::Relaxed);
        return None;
    }
    ShmMetrics::add(&q.metrics.sleeps, 1);
    let ready = sys::poll_readable(&[q.doorbell.fd(), stream.as_fd()], Some(ACCEPT_POLL));
    idle.store(0, Ordering::Relaxed);
    q.doorbell.clear();
    match ready {
        Ok(r) if r[1] => socket_event(q, stream),
        Ok(_) => None,
        Err(e) => Some(Ending::Fatal(format!("waiting on the doorbell: {e}"))),
    }
}

/// Whether a submission tail the host published is in range of `head`.
fn check_tail(head: u32, tail: u32, entries: u32) -> Result<(), String> {
    if tail.wrapping_sub(head) > entries {
        return Err(format!(
            "submission tail {tail} is more than {entries} entries past head {head}"
        ));
    }
    Ok(())
}

/// Copies the entry at `head` out of the ring and moves past it (the host may then
/// reuse its slot).
fn next_entry(q: &Queue, head: &mut u32) -> [u8; SQE_SIZE] {
    let mut bytes = [0u8; SQE_SIZE];
    let slot = (*head & (q.layout.sq_entries - 1)) as usize;
    q.region
        .read(q.layout.sq_offset as usize + slot * SQE_SIZE, &mut bytes);
    *head = head.wrapping_add(1);
    q.region.word(word::SQ_HEAD).store(*head, Ordering::Release);
    bytes
}

/// How often the helper looks at the submission ring while it takes entries.
const HELP_POLL: Duration = Duration::from_micros(100);

/// The helper thread: waits until the device says an Execute the poller runs inline
/// outlasts its leash, then takes the entries behind it and posts completions in the
/// poller's place until the run ends (an Abort of the run is answered at submission,
/// which stops it). What it submits is queued (the inline run is in flight, so nothing
/// else runs inline).
fn help(q: &Queue, ctx: &Context) {
    let tail_word = q.region.word(word::SQ_TAIL);
    let heartbeat = q.region.word(word::HEARTBEAT);
    let mut beat = Instant::now();
    loop {
        // Between requests for help, the heartbeat: the host sees the device live
        // however long its commands run (a stopped daemon stops it).
        match q.help.wait_for(KEEP_ALIVE_INTERVAL) {
            None => {
                heartbeat.fetch_add(1, Ordering::Release);
                beat = Instant::now();
                continue;
            }
            Some(false) => return,
            Some(true) => {}
        }
        while q.lent.load(Ordering::SeqCst) && !ctx.stopping() {
            let taken = (|| {
                let mut head = lock(&q.sq_head);
                let tail = tail_word.load(Ordering::Acquire);
                check_tail(*head, tail, q.layout.sq_entries)?;
                while *head != tail {
                    let bytes = next_entry(q, &mut head);
                    take(q, &bytes, false, ctx)?;
                }
                Ok(())
            })();
            if let Err(reason) = taken {
                // The poller ends the connection when its run ends, which is now.
                q.qp.abort_all();
                *lock(&q.ended) = Some(Ending::Fatal(reason));
                break;
            }
            while let Some(c) = q.qp.try_reap() {
                complete(q, c, ctx);
            }
            std::thread::sleep(HELP_POLL);
            // A long inline run is no silence either.
            if beat.elapsed() >= KEEP_ALIVE_INTERVAL {
                heartbeat.fetch_add(1, Ordering::Release);
                beat = Instant::now();
            }
        }
    }
}

/// Reads the handshake socket (non-blocking): map requests are answered; otherwise how
/// it ended, if it did: the host closed it or broke the protocol by writing to it.
fn socket_event(q: &Queue, stream: &UnixStream) -> Option<Ending> {
    let mut buf = [0u8; MAP_REQUEST_SIZE];
    match (&*stream).read(&mut buf) {
        Ok(0) => Some(Ending::Closed),
        Ok(MAP_REQUEST_SIZE) => match decode_map_request(&buf) {
            Some(handle) => answer_map_request(q, stream, handle),
            None => Some(Ending::Fatal("bytes on the handshake socket".to_string())),
        },
        Ok(_) => Some(Ending::Fatal("bytes on the handshake socket".to_string())),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(_) => Some(Ending::Closed),
    }
}

/// Sends the memory file of the client's allocation `handle` (or why not). Only to a
/// client of the device's own user: sharing pages with a process that could not already
/// write the device's memory would let it change bytes under a running command.
fn answer_map_request(q: &Queue, stream: &UnixStream, handle: u32) -> Option<Ending> {
    let shared = if q.may_map {
        q.qp.share_mem(csx_proto::MemHandle(handle))
            .map_err(|e| (share_refusal(&e), e.to_string()))
    } else {
        Err((
            MapRefusal::NotPermitted,
            "this device maps memory only to clients of its own user".to_string(),
        ))
    };
    let (outcome, fd) = match shared {
        Ok(fd) => (Ok(()), Some(fd)),
        Err(why) => (Err(why), None),
    };
    let reply = MapReply { handle, outcome }.encode();
    // The socket is non-blocking; a host that does not read its replies loses its
    // connection rather than holding this thread.
    let sent = match &fd {
        Some(f) => sys::send_with_fds(stream, &reply, &[f.as_fd()]),
        None => (&*stream).write_all(&reply),
    };
    match sent {
        Ok(()) => None,
        Err(e) => Some(Ending::Fatal(format!("cannot send a map reply: {e}"))),
    }
}

fn share_refusal(e: &csx_device::slm::ShareError) -> MapRefusal {
    use csx_device::slm::{ShareError, SlmError};
    match e {
        ShareError::Slm(SlmError::InUse { .. }) => MapRefusal::Busy,
        ShareError::Slm(_) => MapRefusal::NotFound,
        ShareError::NotPages { .. } => MapRefusal::NotPages,
        _ => MapRefusal::Failed,
    }
}

/// Whether `span` (of at most `limit` bytes) lies in the client's heap.
fn in_heap(q: &Queue, span: Span, limit: usize) -> bool {
    let heap_end = q.layout.heap_offset + q.layout.heap_size;
    span.len <= limit as u64
        && span.offset >= q.layout.heap_offset
        && span
            .offset
            .checked_add(span.len)
            .is_some_and(|end| end <= heap_end)
}

fn wire_status(e: &WireError) -> Status {
    match e {
        WireError::UnknownOpcode { .. } => Status::InvalidOpcode,
        WireError::Invalid(f) => f.status(),
        _ => Status::InvalidField,
    }
}

/// Takes one entry: checks it and submits its command, or answers it with an error.
/// `Err` ends the connection.
///
/// With `last` (no entry waits behind this one), a short command that is the queue's
/// only one in flight runs on this thread (`QueuePair::submit_inline`): the round trip
/// is then the host and this poller, with no engine to wake.
fn take(q: &Queue, bytes: &[u8; SQE_SIZE], last: bool, ctx: &Context) -> Result<(), String> {
    ShmMetrics::add(&q.metrics.commands, 1);
    let sqe = Sqe::decode(bytes).map_err(|e| format!("bad submission entry: {e}"))?;
    let frame = entry_frame(q, &sqe)?;
    let Some(cid) = frame
        .get(8..16)
        .map(|b| CommandId(u64::from_le_bytes(b.try_into().expect("8 bytes"))))
    else {
        return Err(format!(
            "entry holds {} bytes, no command header",
            frame.len()
        ));
    };
    let response_ok = in_heap(q, sqe.response, FRAME_SIZE_MAX);
    let route = Route {
        response: if response_ok {
            sqe.response
        } else {
            Span::default()
        },
        data: Span::default(),
        read: ReadPath::None,
    };
    let refuse = |status, message: String| {
        post(
            q,
            Completion::error(cid, status, "transport", message),
            route,
            ctx,
        );
        Ok(())
    };
    if let Err((status, m)) = check_spans(q, &sqe, response_ok) {
        return refuse(status, m);
    }
    let mut cmd = match decode_command(&frame) {
        Ok(cmd) => cmd,
        Err(e) => return refuse(wire_status(&e), format!("undecodable command: {e}")),
    };
    let (dma, read) = match data_path(q, &mut cmd.op, sqe.data) {
        Ok(path) => path,
        Err(m) => return refuse(Status::InvalidField, m),
    };
    let route = Route {
        data: sqe.data,
        read,
        ..route
    };
    if !reserve_reply(q, cid, &cmd.op, dma.is_some(), ctx)? {
        return refuse(Status::Aborted, "the device is shutting down".into());
    }
    if let Err(refusal) = q.quota.admit(&cmd, &ctx.slot_owners) {
        post(q, *refusal, route, ctx);
        return Ok(());
    }
    if lock(&q.routes).insert(cid, route).is_some() {
        return Err(format!("{cid} reused while in flight"));
    }
    submit_taken(q, cid, cmd, dma, last, ctx)
}

/// Reserves the reply bytes the daemon will hold for the command until it is posted
/// (none when the device writes its reply straight into host memory, `lent`): past the
/// client's reply bytes this thread posts completions until the client has taken enough
/// (see `crate::replies`). `Ok(false)`: the device is shutting down; `Err` ends the
/// connection.
fn reserve_reply(
    q: &Queue,
    cid: CommandId,
    op: &Op,
    lent: bool,
    ctx: &Context,
) -> Result<bool, String> {
    let reply = if lent {
        0
    } else {
        bulk::reply_data_max(op) as u64
    };
    let reserved = q.replies.reserve(cid, reply, Duration::ZERO, || {
        if let Some(c) = q.qp.reap(Some(COMPLETION_WAIT)) {
            complete(q, c, ctx);
        }
        ctx.stopping() || q.gone.load(Ordering::Acquire)
    });
    match reserved {
        Ok(()) => Ok(true),
        Err(NotAdmitted::Duplicate) => Err(format!("{cid} reused while in flight")),
        Err(NotAdmitted::GaveUp) => Ok(false),
    }
}

/// The encoded command of an entry: inline, or copied out of host memory after its span
/// is checked.
fn entry_frame(q: &Queue, sqe: &Sqe) -> Result<Vec<u8>, String> {
    match &sqe.frame {
        SqeFrame::Inline(f) => Ok(f.clone()),
        SqeFrame::OutOfLine(span) => {
            if !in_heap(q, *span, FRAME_SIZE_MAX) {
                return Err(format!(
                    "command of {} bytes at {} lies outside host memory",
                    span.len, span.offset
                ));
            }
            // Checked above against FRAME_SIZE_MAX and the heap.
            let mut f = vec![0u8; span.len as usize];
            q.region.read(span.offset as usize, &mut f);
            Ok(f)
        }
    }
}

/// Why an entry's queue id, response area or data buffer is refused, if it is.
fn check_spans(q: &Queue, sqe: &Sqe, response_ok: bool) -> Result<(), (Status, String)> {
    if sqe.queue_id != q.layout.queue_id {
        let m = format!(
            "entry for queue {} in the ring of queue {}",
            sqe.queue_id, q.layout.queue_id
        );
        return Err((Status::InvalidField, m));
    }
    if !response_ok {
        return Err((
            Status::InvalidField,
            "response area outside host memory".into(),
        ));
    }
    if sqe.data.len > 0 && !in_heap(q, sqe.data, TRANSFER_SIZE_MAX) {
        let m = format!(
            "data buffer of {} bytes at {} lies outside host memory or exceeds {TRANSFER_SIZE_MAX}",
            sqe.data.len, sqe.data.offset
        );
        return Err((Status::InvalidField, m));
    }
    Ok(())
}

/// What a command does with its data buffer (checked to lie in host memory): lent to the
/// device (a memory write's source, a memory read's destination), copied in (a file
/// write) or out (a file read), or refused naming the command.
fn data_path(
    q: &Queue,
    op: &mut Op,
    data: Span,
) -> Result<(Option<Box<HostMemory>>, ReadPath), String> {
    let lend = || {
        Box::new(HostMemory {
            region: Arc::clone(&q.region),
            offset: data.offset as usize,
            len: data.len as usize,
        })
    };
    Ok(match &*op {
        _ if data.len == 0 => (None, ReadPath::None),
        Op::MemWrite { data: d, .. } if d.is_empty() => (Some(lend()), ReadPath::None),
        Op::MemRead { len, .. } if *len == data.len => (Some(lend()), ReadPath::Dma),
        Op::FileRead { len, .. } if *len == data.len => (None, ReadPath::Copy),
        Op::FileWrite { data: d, .. } if d.is_empty() => {
            // Checked against TRANSFER_SIZE_MAX and the heap by the caller.
            let mut bytes = vec![0u8; data.len as usize];
            q.region.read(data.offset as usize, &mut bytes);
            bulk::put_command_data(op, bytes);
            (None, ReadPath::None)
        }
        other => {
            return Err(format!(
                "{} takes no data buffer of {} bytes",
                other.name(),
                data.len
            ))
        }
    })
}

/// Submits a taken command (inline when `last`, see [`take`]); a device shutting down
/// answers it instead. `Err` ends the connection.
fn submit_taken(
    q: &Queue,
    cid: CommandId,
    cmd: csx_proto::Command,
    dma: Option<Box<HostMemory>>,
    last: bool,
    ctx: &Context,
) -> Result<(), String> {
    let submitted = match dma {
        _ if last => {
            q.qp.submit_inline(cmd, dma.map(|b| b as Box<dyn DmaBuffer>))
        }
        Some(buffer) => q.qp.submit_with_buffer(cmd, buffer),
        None => q.qp.submit(cmd),
    };
    if submitted.is_err() {
        q.quota.not_submitted(cid, &ctx.slot_owners);
    }
    match submitted {
        Ok(()) => Ok(()),
        Err(SubmitError::QueueFull { depth }) => Err(format!(
            "more than {depth} commands in flight, the negotiated depth"
        )),
        Err(_) => {
            let route = lock(&q.routes).remove(&cid);
            let route = route.expect("the route was recorded before the submit");
            // The refusal carries no data: only the response area is used.
            let route = Route {
                data: Span::default(),
                read: ReadPath::None,
                ..route
            };
            post(
                q,
                Completion::error(
                    cid,
                    Status::Aborted,
                    "transport",
                    "the device is shutting down",
                ),
                route,
                ctx,
            );
            Ok(())
        }
    }
}

/// Posts the completion the queue pair gave back, with its command's route.
fn complete(q: &Queue, c: Completion, ctx: &Context) {
    q.quota.completed(&c, &ctx.slot_owners);
    let route = lock(&q.routes).remove(&c.id).unwrap_or(Route {
        response: Span::default(),
        data: Span::default(),
        read: ReadPath::None,
    });
    post(q, c, route, ctx);
}

/// Posts the completion entry of `c` (see the module doc), and gives back the reply
/// bytes its command held.
fn post(q: &Queue, c: Completion, route: Route, ctx: &Context) {
    let id = c.id;
    post_entry(q, c, route, ctx);
    q.replies.release(id);
}

fn post_entry(q: &Queue, mut c: Completion, route: Route, ctx: &Context) {
    Context::count(&ctx.commands_served, 1);
    if q.gone.load(Ordering::Acquire) {
        return;
    }
    let mut cqe = Cqe {
        cid: c.id.0,
        flags: 0,
        frame_len: 0,
        data_len: 0,
        inline: Vec::new(),
    };
    if c.status.is_success() {
        match route.read {
            ReadPath::None => {}
            ReadPath::Dma => {
                // The bytes are in the buffer already; the reply says so.
                c.reply = Reply::Data(Vec::new());
                cqe.flags |= CQE_DATA_IN_BUFFER;
                cqe.data_len = route.data.len as u32;
                ShmMetrics::add(&q.metrics.data_bytes, route.data.len);
            }
            ReadPath::Copy => {
                if let Some(bytes) = bulk::take_reply_data(&mut c) {
                    // The device read at most the length asked, which is the buffer's.
                    let n = bytes.len().min(route.data.len as usize);
                    q.region.write(route.data.offset as usize, &bytes[..n]);
                    cqe.flags |= CQE_DATA_IN_BUFFER;
                    cqe.data_len = n as u32;
                    ShmMetrics::add(&q.metrics.data_bytes, n as u64);
                }
            }
        }
    }
    let mut frame = encode_completion(&c).unwrap_or_else(|e| {
        let bad = Completion::error(c.id, Status::Internal, "transport", e.to_string());
        encode_completion(&bad).expect("an error completion encodes")
    });
    if frame.len() > CQE_INLINE_FRAME_MAX
        && frame.len() as u64 > route.response.len
        && !c.status.is_success()
    {
        // A failure with nowhere to put its detail (no valid response area): the
        // status still reaches the host, inline.
        let bare = Completion::new(c.id, c.status);
        frame = encode_completion(&bare).expect("a bare completion encodes");
    }
    cqe.frame_len = frame.len() as u32;
    if frame.len() <= CQE_INLINE_FRAME_MAX {
        cqe.inline = frame;
    } else if frame.len() as u64 <= route.response.len {
        q.region.write(route.response.offset as usize, &frame);
        cqe.flags |= CQE_FRAME_IN_RESPONSE;
    } else {
        cqe.flags |= CQE_RESPONSE_OVERFLOW;
    }
    publish(q, &cqe);
}

/// Writes `cqe` at the completion tail once there is room, and raises the interrupt if
/// the host sleeps.
fn publish(q: &Queue, cqe: &Cqe) {
    let bytes = cqe.encode();
    let _cq = lock(&q.cq);
    let tail_word = q.region.word(word::CQ_TAIL);
    let head_word = q.region.word(word::CQ_HEAD);
    let entries = q.layout.cq_entries;
    let tail = tail_word.load(Ordering::Relaxed);
    let stalled_since = Instant::now();
    loop {
        let head = head_word.load(Ordering::Acquire);
        let used = tail.wrapping_sub(head);
        if used > entries {
            tracing::warn!(
                head,
                tail,
                "completion head out of range; dropping the client"
            );
            q.gone.store(true, Ordering::Release);
            return;
        }
        if used < entries {
            break;
        }
        // The host consumes entries before it submits more, so a full ring drains
        // unless the host stopped; give it a while.
        if q.gone.load(Ordering::Acquire) || stalled_since.elapsed() > COMPLETION_STALL_TIMEOUT {
            q.gone.store(true, Ordering::Release);
            return;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let slot = (tail & (entries - 1)) as usize;
    q.region
        .write(q.layout.cq_offset as usize + slot * CQE_SIZE, &bytes);
    tail_word.store(tail.wrapping_add(1), Ordering::Release);
    ShmMetrics::add(&q.metrics.completions, 1);
    // Pairs with the host's fence between announcing that it sleeps and looking at the
    // tail one last time.
    fence(Ordering::SeqCst);
    if q.region.word(word::HOST_IDLE).load(Ordering::Relaxed) != 0 {
        ShmMetrics::add(&q.metrics.notifies, 1);
        let _ = q.interrupt.notify();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use csx_proto::{encode_command, Command, CommandId, MemHandle, Op, Status};

    use csx_host::transport::shm::framing::{word, Span, SqeFrame};
    use csx_host::transport::shm::{ShmOptions, ShmTransport, HOST_MEMORY_MIN};
    use csx_host::transport::Transport;

    use crate::{ListenAddr, Server, ServerConfig};

    fn served() -> (tempfile::TempDir, Server, String) {
        let dir = tempfile::tempdir().unwrap();
        let config = csx_device::DeviceConfig {
            nvm_size_bytes: 1 << 20,
            slm_size_bytes: 1 << 20,
            state_size_bytes: 4096,
            engines: Some(1),
            ..csx_device::DeviceConfig::default()
        };
        csx_device::DeviceRuntime::init(dir.path(), config)
            .unwrap()
            .close()
            .unwrap();
        let name = format!("unit-{}-{}", std::process::id(), dir.path().display())
            .replace(['/', '.'], "_");
        let name: String = name.chars().rev().take(60).collect();
        let server = Server::open(
            dir.path(),
            ServerConfig {
                listen: vec![ListenAddr::Shm(name.clone())],
                token: None,
            },
        )
        .unwrap();
        (dir, server, name)
    }

    fn connect(name: &str) -> ShmTransport {
        let options = ShmOptions {
            queue_depth: 8,
            host_memory_bytes: HOST_MEMORY_MIN,
        };
        ShmTransport::connect(name, &options).unwrap()
    }

    fn frame(id: u64, op: Op) -> Vec<u8> {
        encode_command(&Command::new(CommandId(id), op)).unwrap()
    }

    fn status_of(t: &ShmTransport) -> (CommandId, Status) {
        let c = t
            .reap(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("a completion");
        (c.id, c.status)
    }

    /// Entries that are wrong but answerable get error completions; the queue goes on.
    #[test]
    fn bad_entries_get_error_completions() {
        let (_dir, server, name) = served();
        let t = connect(&name);
        let (_, layout) = t.raw_region();
        t.post_raw(CommandId(1), frame(1, Op::Identify), |s| s.queue_id += 1)
            .unwrap();
        assert_eq!(status_of(&t), (CommandId(1), Status::InvalidField));
        let mut unknown = frame(2, Op::Identify);
        unknown[0] = 0x7e;
        t.post_raw(CommandId(2), unknown, |_| {}).unwrap();
        assert_eq!(status_of(&t), (CommandId(2), Status::InvalidOpcode));
        let read = Op::MemRead {
            handle: MemHandle(1),
            offset: 0,
            len: 4096,
        };
        // A data buffer outside host memory (in the rings), and an absurd one.
        t.post_raw(CommandId(3), frame(3, read.clone()), |s| {
            s.data = Span {
                offset: layout.sq_offset,
                len: 4096,
            }
        })
        .unwrap();
        assert_eq!(status_of(&t), (CommandId(3), Status::InvalidField));
        t.post_raw(CommandId(4), frame(4, read), |s| {
            s.data = Span {
                offset: u64::MAX - 10,
                len: u64::from(u32::MAX),
            }
        })
        .unwrap();
        assert_eq!(status_of(&t), (CommandId(4), Status::InvalidField));
        // A response area outside host memory.
        t.post_raw(CommandId(5), frame(5, Op::Identify), |s| {
            s.response = Span {
                offset: 0,
                len: 4096,
            }
        })
        .unwrap();
        assert_eq!(status_of(&t), (CommandId(5), Status::InvalidField));
        // A truncated command.
        let mut short = frame(6, Op::MemAlloc { size_bytes: 64 });
        short.truncate(18);
        t.post_raw(CommandId(6), short, |_| {}).unwrap();
        assert_eq!(status_of(&t), (CommandId(6), Status::InvalidField));
        // Still a working queue.
        t.post_raw(CommandId(7), frame(7, Op::Identify), |_| {})
            .unwrap();
        assert_eq!(status_of(&t), (CommandId(7), Status::Success));
        Box::new(t).close().unwrap();
        server.shutdown().unwrap();
    }

    /// Unload frames that are wrong get typed refusals and change nothing: generation
    /// 0, a generation cut short, a generation the slot no longer holds (the program
    /// there stays and still runs), an empty slot, a slot past the table.
    #[test]
    fn bad_unload_frames_are_refused_and_unload_nothing() {
        use csx_proto::{ProgramIndex, ProgramType, Reply};
        let (_dir, server, name) = served();
        let t = connect(&name);
        let slot = ProgramIndex(2);
        let image = vec![0xb7, 0, 0, 0, 7, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        let load = Op::LoadProgram {
            pind: slot,
            ptype: ProgramType::Raw,
            total_size_bytes: 16,
            offset: 0,
            data: image,
            entry: None,
        };
        let activate = Op::ActivateProgram {
            pind: slot,
            engine: csx_proto::EngineKind::Interpreter,
        };
        for (id, op) in [(1, load), (2, activate)] {
            t.post_raw(CommandId(id), frame(id, op), |_| {}).unwrap();
            assert_eq!(status_of(&t), (CommandId(id), Status::Success));
        }
        t.post_raw(
            CommandId(3),
            frame(3, Op::ListProgramsWithGenerations),
            |_| {},
        )
        .unwrap();
        let c = t.reap(Some(Duration::from_secs(10))).unwrap().unwrap();
        let Reply::Programs(listed) = c.reply else {
            panic!("{:?}", c.reply)
        };
        let generation = listed[0].generation.unwrap();
        let unload = |id: u64, pind: u16, generation: u64| {
            frame(
                id,
                Op::UnloadProgram {
                    pind: ProgramIndex(pind),
                    generation: Some(generation),
                },
            )
        };
        let mut zero = unload(4, 2, 1);
        let at = zero.len() - 8;
        zero[at..].copy_from_slice(&0u64.to_le_bytes());
        let mut cut = unload(5, 2, generation);
        cut.truncate(cut.len() - 5);
        let body = (cut.len() - csx_proto::wire::COMMAND_HEADER_SIZE) as u32;
        cut[4..8].copy_from_slice(&body.to_le_bytes());
        // A slot past the table does not encode: written over a valid frame's.
        let mut past = unload(8, 3, generation);
        let at = csx_proto::wire::COMMAND_HEADER_SIZE;
        past[at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        let bad = [
            (4, zero, Status::InvalidField),
            (5, cut, Status::InvalidField),
            (6, unload(6, 2, generation + 1), Status::ProgramChanged),
            (7, unload(7, 3, generation), Status::NoProgram),
            (8, past, Status::InvalidProgramIndex),
        ];
        for (id, f, want) in bad {
            t.post_raw(CommandId(id), f, |_| {}).unwrap();
            assert_eq!(status_of(&t), (CommandId(id), want), "frame {id}");
        }
        let mut run = csx_host::ExecuteRequest::new(slot);
        run.generation = Some(generation);
        let run = run.to_op();
        t.post_raw(CommandId(9), frame(9, run), |_| {}).unwrap();
        let c = t.reap(Some(Duration::from_secs(10))).unwrap().unwrap();
        assert_eq!((c.status, c.value), (Status::Success, 7));
        t.post_raw(CommandId(10), unload(10, 2, generation), |_| {})
            .unwrap();
        assert_eq!(status_of(&t), (CommandId(10), Status::Success));
        Box::new(t).close().unwrap();
        server.shutdown().unwrap();
    }

    /// Entries that cannot be answered, or ring indices out of range, end the
    /// connection; the server serves the next client.
    #[test]
    fn unanswerable_entries_close_the_connection() {
        let (_dir, server, name) = served();
        let breakers: [&dyn Fn(&ShmTransport); 3] = [
            // No command header at all.
            &|t| t.post_raw(CommandId(1), vec![1, 2, 3], |_| {}).unwrap(),
            // A command "out of line" far outside the region.
            &|t| {
                t.post_raw(CommandId(1), vec![], |s| {
                    s.frame = SqeFrame::OutOfLine(Span {
                        offset: 1 << 40,
                        len: 1 << 20,
                    })
                })
                .unwrap()
            },
            // A tail thousands of entries past the head.
            &|t| {
                let (region, _) = t.raw_region();
                region
                    .word(word::SQ_TAIL)
                    .fetch_add(5000, Ordering::Release);
                t.ring_doorbell();
            },
        ];
        let connected_becomes = |n: u64, what: &str| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while server.status().clients_connected != n {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        for breaker in breakers {
            let t = connect(&name);
            connected_becomes(1, "the client is counted");
            breaker(&t);
            connected_becomes(0, "the connection stays open");
            drop(t);
            let good = connect(&name);
            good.submit(Command::new(CommandId(9), Op::Identify))
                .unwrap();
            assert_eq!(status_of(&good), (CommandId(9), Status::Success));
            Box::new(good).close().unwrap();
        }
        server.shutdown().unwrap();
    }

    /// One user's connections that never send their hello hold at most
    /// `HANDSHAKES_PER_SOURCE` places, and only until a newer connection of that user
    /// needs one: the user's real client, after a burst of 300 silent ones, is served
    /// long before the handshake deadline ends them.
    #[test]
    fn silent_connections_never_starve_their_users_real_clients() {
        let (_dir, server, name) = served();
        let path = super::socket_path(&name);
        let silent: Vec<std::os::unix::net::UnixStream> = (0..300)
            .filter_map(|_| std::os::unix::net::UnixStream::connect(&path).ok())
            .collect();
        assert!(
            silent.len() >= crate::HANDSHAKES_PER_SOURCE,
            "{}",
            silent.len()
        );
        // Past the eviction age, well inside the handshake deadline.
        std::thread::sleep(crate::HANDSHAKE_EVICT_AFTER + Duration::from_millis(100));
        assert!(crate::HANDSHAKE_EVICT_AFTER * 2 < csx_host::transport::shm::HANDSHAKE_TIMEOUT);
        let options = ShmOptions {
            queue_depth: 8,
            host_memory_bytes: HOST_MEMORY_MIN,
        };
        let good = ShmTransport::connect(&name, &options)
            .unwrap_or_else(|e| panic!("the user's real client is refused: {e}"));
        good.submit(Command::new(CommandId(1), Op::Identify))
            .unwrap();
        assert_eq!(status_of(&good), (CommandId(1), Status::Success));
        Box::new(good).close().unwrap();
        drop(silent);
        server.shutdown().unwrap();
    }
}
