//! The device daemon under abuse: malformed and truncated tcp frames, absurd lengths,
//! unknown opcodes and wrong queue ids; bad shm handshakes; authentication; a client
//! process killed mid-stream; more clients than queue pairs; a shutdown with commands
//! in flight; a restart on the same state directory.
//!
//! Method: each test serves a fresh device in-process (`csx_server::Server` on a
//! random loopback port or a unique shm name) and talks to it with raw sockets built
//! from the transports' public framing, or with a child process (this test binary
//! re-run as a helper) that is killed with SIGKILL. After every abuse the server must
//! still serve a well-behaved client, with all of the device's memory back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use csx_host::proto::{
    decode_completion, encode_command, CommandId, Completion, EngineKind, MemHandle, Op, Status,
};
use csx_host::transport::inproc::DeviceConfig;
use csx_host::transport::tcp::framing::{
    command_capsule_header, data_header, decode_header, decode_response_capsule, ICReq, ICResp,
    PduType, TermReq, PDU_HEADER_SIZE,
};
use csx_host::transport::tcp::{TcpOptions, TcpTransport};
use csx_host::{Client, Device, DeviceUri, ExecuteRequest};
use csx_server::{ListenAddr, Server, ServerConfig};

use crate::served::{listen_addr, Kind};
use crate::SLM_SIZE;

/// A fresh device (the suite's sizes) in a temporary state directory.
fn fresh_device() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: crate::NVM_SIZE,
        slm_size_bytes: SLM_SIZE,
        state_size_bytes: crate::STATE_SIZE,
        engines: Some(crate::ENGINES),
        ..DeviceConfig::default()
    };
    Device::init(dir.path(), config)
        .expect("init")
        .close()
        .expect("close after init");
    dir
}

/// A fresh device served on `kind`, with its state directory.
struct Served {
    server: Option<Server>,
    uri: String,
    dir: tempfile::TempDir,
}

impl Served {
    fn new(kind: Kind, token: Option<&[u8]>) -> Served {
        let dir = fresh_device();
        let server = Server::open(
            dir.path(),
            ServerConfig {
                listen: vec![listen_addr(kind)],
                token: token.map(<[u8]>::to_vec),
            },
        )
        .expect("serves");
        let uri = server.uris()[0].clone();
        Served {
            server: Some(server),
            uri,
            dir,
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }

    fn addr(&self) -> &str {
        self.uri.strip_prefix("tcp://").expect("a tcp server")
    }

    /// Waits until only `n` clients are connected and all device memory is free, as
    /// seen by a fresh well-behaved client.
    fn settles_to(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let connected = self.server().status().clients_connected;
            if connected == n {
                let dev = Device::open(&self.uri).expect("a good client still connects");
                let free = dev.identify().expect("identify").slm_free_bytes;
                dev.close().expect("closes");
                if free == SLM_SIZE {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "server did not settle: {connected} clients, wanted {n}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) {
        self.server
            .take()
            .expect("running")
            .shutdown()
            .expect("shuts down cleanly");
    }
}

// ---------------------------------------------------------------------------------
// Raw tcp.

fn raw_connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads one PDU: (type, bytes after the common header). `None` at the end of stream.
fn read_pdu(s: &mut TcpStream) -> Option<(PduType, Vec<u8>)> {
    let mut h = [0u8; PDU_HEADER_SIZE];
    match s.read_exact(&mut h) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return None
        }
        Err(e) => panic!("reading a pdu: {e}"),
    }
    let header = decode_header(&h, 64 << 20).expect("the server frames correctly");
    let mut body = vec![0u8; header.plen as usize - PDU_HEADER_SIZE];
    s.read_exact(&mut body).expect("pdu body");
    Some((header.pdu_type, body))
}

/// Connects and completes the handshake; returns the stream and the queue id.
fn raw_session(addr: &str) -> (TcpStream, u32) {
    let mut s = raw_connect(addr);
    let req = ICReq {
        queue_depth: 4,
        token: Vec::new(),
    };
    s.write_all(&req.encode()).unwrap();
    let (t, body) = read_pdu(&mut s).expect("icresp");
    assert_eq!(t, PduType::ICResp);
    let resp = ICResp::decode(&body).unwrap();
    (s, resp.queue_id)
}

fn send_capsule(s: &mut TcpStream, queue_id: u32, data_len: usize, frame: &[u8]) {
    s.write_all(&command_capsule_header(queue_id, data_len, frame.len()))
        .unwrap();
    s.write_all(frame).unwrap();
}

fn read_completion(s: &mut TcpStream) -> Completion {
    let (t, body) = read_pdu(s).expect("a response");
    assert_eq!(t, PduType::CapsuleResp, "{:?}", TermReq::decode(&body));
    let r = decode_response_capsule(&body).unwrap();
    decode_completion(r.frame).expect("a valid completion")
}

/// The connection ends with a termination request, then the end of the stream.
fn expect_termination(s: &mut TcpStream) -> TermReq {
    let (t, body) = read_pdu(s).expect("a termination request");
    assert_eq!(t, PduType::C2HTermReq);
    let term = TermReq::decode(&body).unwrap();
    assert!(
        read_pdu(s).is_none(),
        "closed after the termination request"
    );
    term
}

fn frame_of(id: u64, op: Op) -> Vec<u8> {
    encode_command(&csx_host::proto::Command::new(CommandId(id), op)).unwrap()
}

#[test]
fn tcp_bad_frames_get_errors_or_a_closed_connection() {
    let served = Served::new(Kind::Tcp, None);
    let addr = served.addr().to_string();

    // Bytes that are no PDU at all.
    let mut s = raw_connect(&addr);
    s.write_all(&[0x42; 32]).unwrap();
    expect_termination(&mut s);

    // An absurd length in the very first header: refused before anything is read.
    let mut s = raw_connect(&addr);
    s.write_all(&[0x00, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    expect_termination(&mut s);

    // After the handshake: an absurd capsule length.
    let (mut s, _) = raw_session(&addr);
    s.write_all(&[0x04, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f])
        .unwrap();
    let term = expect_termination(&mut s);
    assert!(term.message.contains("bytes"), "{}", term.message);

    // Unknown opcode, a truncated command, a wrong queue id: error completions, and the
    // connection goes on.
    let (mut s, qid) = raw_session(&addr);
    let mut unknown = frame_of(7, Op::Identify);
    unknown[0] = 0x7f;
    send_capsule(&mut s, qid, 0, &unknown);
    let c = read_completion(&mut s);
    assert_eq!((c.id, c.status), (CommandId(7), Status::InvalidOpcode));
    let mut truncated = frame_of(8, Op::MemAlloc { size_bytes: 64 });
    truncated.truncate(20);
    send_capsule(&mut s, qid, 0, &truncated);
    let c = read_completion(&mut s);
    assert_eq!((c.id, c.status), (CommandId(8), Status::InvalidField));
    send_capsule(&mut s, qid + 1, 0, &frame_of(9, Op::Identify));
    let c = read_completion(&mut s);
    assert_eq!((c.id, c.status), (CommandId(9), Status::InvalidField));
    assert!(c.detail.unwrap().message.contains("queue"));
    // Data on a command that takes none: refused, and its data skipped.
    send_capsule(&mut s, qid, 3, &frame_of(10, Op::Identify));
    s.write_all(&data_header(PduType::H2CData, 10, 0, 3))
        .unwrap();
    s.write_all(&[1, 2, 3]).unwrap();
    let c = read_completion(&mut s);
    assert_eq!((c.id, c.status), (CommandId(10), Status::InvalidField));
    send_capsule(&mut s, qid, 0, &frame_of(11, Op::Identify));
    assert_eq!(read_completion(&mut s).status, Status::Success);

    // A write announcing more data than any command may carry.
    let write = frame_of(
        12,
        Op::MemWrite {
            handle: MemHandle(1),
            offset: 0,
            data: vec![],
        },
    );
    send_capsule(&mut s, qid, 1 << 30, &write);
    expect_termination(&mut s);

    // Data for no command.
    let (mut s, _) = raw_session(&addr);
    s.write_all(&data_header(PduType::H2CData, 1, 0, 4))
        .unwrap();
    s.write_all(&[0; 4]).unwrap();
    expect_termination(&mut s);

    // A write whose data stops half way, then the client vanishes: the allocation it
    // made is reclaimed with its queue pair.
    let (mut s, qid) = raw_session(&addr);
    send_capsule(
        &mut s,
        qid,
        0,
        &frame_of(1, Op::MemAlloc { size_bytes: 4096 }),
    );
    let handle = MemHandle(read_completion(&mut s).value as u32);
    let write = frame_of(
        2,
        Op::MemWrite {
            handle,
            offset: 0,
            data: vec![],
        },
    );
    send_capsule(&mut s, qid, 4096, &write);
    s.write_all(&data_header(PduType::H2CData, 2, 0, 4096))
        .unwrap();
    s.write_all(&[5; 100]).unwrap();
    drop(s);

    served.settles_to(0);
    served.stop();
}

#[test]
fn tcp_tokens_are_checked() {
    let served = Served::new(Kind::Tcp, Some(b"s3cret"));
    let addr = served.addr().to_string();
    for token in [None, Some(b"wrong".to_vec()), Some(b"s3cre".to_vec())] {
        let options = TcpOptions {
            queue_depth: 4,
            token,
        };
        let e = TcpTransport::connect(&addr, &options).unwrap_err();
        assert!(e.to_string().contains("AuthFailed"), "{e}");
    }
    let options = TcpOptions {
        queue_depth: 4,
        token: Some(b"s3cret".to_vec()),
    };
    let t = TcpTransport::connect(&addr, &options).expect("the right token connects");
    let dev = Device::with_client(
        Client::new(Box::new(t)),
        DeviceUri::parse(&served.uri).unwrap(),
    );
    dev.identify().unwrap();
    dev.close().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while served.server().status().clients_refused < 3 {
        assert!(Instant::now() < deadline, "refusals are counted");
        std::thread::sleep(Duration::from_millis(10));
    }
    served.stop();
}

#[test]
fn shm_bad_handshakes_are_refused() {
    let served = Served::new(Kind::Shm, None);
    let name = served.uri.strip_prefix("shm://").unwrap();
    let path = csx_host::transport::shm::socket_path(name);
    // Garbage instead of a hello: the server hangs up.
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[0xee; 32]).unwrap();
    let mut buf = [0u8; 2048];
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0);
    // A hello asking for absurd host memory: refused with a reason.
    let mut hello = csx_host::transport::shm::framing::Hello {
        queue_depth: 4,
        host_memory_bytes: 1 << 50,
    }
    .encode();
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&hello).unwrap();
    let n = s.read(&mut buf).unwrap();
    let w = csx_host::transport::shm::framing::Welcome::decode(&buf[..n]).unwrap();
    assert_eq!(
        w.status,
        csx_host::transport::shm::framing::WelcomeStatus::BadHostMemory
    );
    // A truncated hello, then silence: the handshake times out and the server goes on.
    hello[0] ^= 1;
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(&hello[..10]).unwrap();
    drop(s);
    served.settles_to(0);
    served.stop();
}

// ---------------------------------------------------------------------------------
// A client process killed mid-stream.

/// The environment variable that makes `helper_client` act.
const HELPER_URI_ENV: &str = "CSX_IT_HELPER_URI";

/// Run by a child process (see `killed_client_*`): allocates device memory, then keeps
/// writes and executions in flight until it is killed (or a minute passes).
#[test]
fn helper_client() {
    let Ok(uri) = std::env::var(HELPER_URI_ENV) else {
        return; // An ordinary test run: nothing to do.
    };
    let dev = Device::open(&uri).expect("helper connects");
    let handles: Vec<MemHandle> = (0..8).map(|_| dev.alloc(1 << 20).unwrap()).collect();
    let client = dev.client();
    let data = vec![0xab; 1 << 20];
    let mut in_flight = std::collections::VecDeque::new();
    let started = Instant::now();
    let mut i = 0usize;
    while started.elapsed() < Duration::from_secs(60) {
        while in_flight.len() < handles.len() {
            let op = Op::MemWrite {
                handle: handles[i % handles.len()],
                offset: 0,
                data: data.clone(),
            };
            in_flight.push_back(client.submit_private(op).unwrap());
            i += 1;
        }
        if i == handles.len() {
            println!("helper ready");
            std::io::stdout().flush().unwrap();
        }
        let id = in_flight.pop_front().unwrap();
        client.wait(id, None).unwrap().unwrap();
    }
}

fn killed_client(kind: Kind) {
    let served = Served::new(kind, None);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "daemon::helper_client",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_URI_ENV, &served.uri)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("helper starts");
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let ready = lines.any(|l| l.is_ok_and(|l| l.contains("helper ready")));
    assert!(ready, "the helper got going");
    // The helper holds 8 MiB of device memory and has writes in flight.
    let observer = Device::open(&served.uri).unwrap();
    assert_eq!(
        observer.identify().unwrap().slm_free_bytes,
        SLM_SIZE - (8 << 20)
    );
    observer.close().unwrap();
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    served.settles_to(0);
    served.stop();
}

#[test]
fn killed_client_tcp() {
    killed_client(Kind::Tcp);
}

#[test]
fn killed_client_shm() {
    killed_client(Kind::Shm);
}

// ---------------------------------------------------------------------------------
// Running out of queue pairs.

/// The device has `QUEUE_PAIRS_MAX` queue pairs: a client beyond them is refused with an
/// error that names the limit (not a hang or a bare reset), the clients already
/// connected keep working, and once one of them closes a new client is served.
fn queue_pairs_run_out(kind: Kind) {
    let served = Served::new(kind, None);
    let limit = csx_host::proto::limits::QUEUE_PAIRS_MAX as usize;
    let mut clients: Vec<Device> = (0..limit)
        .map(|i| {
            Device::open(&served.uri).unwrap_or_else(|e| panic!("client {} of {limit}: {e}", i + 1))
        })
        .collect();
    let refused = Device::open(&served.uri).expect_err("one client too many is refused");
    let csx_host::OpenError::Transport(csx_host::TransportError::Refused { status, reason }) =
        &refused
    else {
        panic!("refused with an unexpected error: {refused:?}");
    };
    assert_eq!(status, "Unavailable");
    assert!(
        reason.contains(&format!("limit is {limit}")),
        "the refusal names the limit: {reason}"
    );
    clients[0]
        .identify()
        .expect("a connected client still works");
    clients
        .pop()
        .expect("a client")
        .close()
        .expect("closes cleanly");
    let next = Device::open(&served.uri).expect("a pair is free again");
    next.identify().expect("the new client is served");
    next.close().expect("closes cleanly");
    for c in clients {
        c.close().expect("closes cleanly");
    }
    served.settles_to(0);
    served.stop();
}

#[test]
fn queue_pairs_run_out_tcp() {
    queue_pairs_run_out(Kind::Tcp);
}

#[test]
fn queue_pairs_run_out_shm() {
    queue_pairs_run_out(Kind::Shm);
}

// ---------------------------------------------------------------------------------
// Shutdown and restart.

fn shutdown_with_commands_in_flight(kind: Kind) {
    let mut served = Served::new(kind, None);
    let dev = Device::open(&served.uri).unwrap();
    let image = crate::programs::compile(crate::programs::BUSY_WAIT);
    let pind = dev
        .load_program_any_slot(csx_host::proto::ProgramType::Elf, &image, None)
        .unwrap();
    dev.activate(pind, EngineKind::Jit).unwrap();
    // Kept by name, so it outlives this client and the daemon.
    dev.persist_program(pind, "busy-wait").unwrap();
    dev.put_bytes("/kept", b"across the restart").unwrap();
    let client = dev.client();
    // Four executions that would busy-wait for an hour, then the shutdown while they
    // run: the device aborts them rather than waiting, and each is still answered.
    let hour_ns = 3_600_000_000_000;
    let ids: Vec<_> = (0..4)
        .map(|_| {
            client
                .submit_private(
                    ExecuteRequest::new(pind)
                        .cparams(hour_ns, 0)
                        .time_limit_ms(3_600_000)
                        .to_op(),
                )
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let server = served.server.take().unwrap();
    let stopping = std::thread::spawn(move || server.shutdown());
    for id in ids {
        let c = client.wait(id, None).unwrap().expect("completes");
        assert_eq!(c.status, Status::Aborted, "{:?}", c.detail);
        let message = c.detail.expect("says why").message;
        assert!(message.starts_with("aborted because"), "{message}");
    }
    stopping.join().unwrap().expect("the device closes cleanly");
    let e = dev.identify().unwrap_err();
    assert!(
        e.to_string().contains("disconnect") || e.to_string().contains("lost"),
        "{e}"
    );
    drop(dev);
    // The daemon restarted on the same directory serves the same files and programs.
    let server = Server::open(
        served.dir.path(),
        ServerConfig {
            listen: vec![listen_addr(kind)],
            ..ServerConfig::default()
        },
    )
    .unwrap();
    let dev = Device::open(&server.uris()[0]).unwrap();
    assert_eq!(
        dev.read_file("/kept", 0, 100).unwrap(),
        b"across the restart"
    );
    dev.activate(pind, EngineKind::Jit).unwrap();
    let run = dev
        .execute(&ExecuteRequest::new(pind).cparams(1, 0))
        .unwrap();
    assert_eq!(run.r0, 1);
    dev.close().unwrap();
    server.shutdown().unwrap();
}

#[test]
fn shutdown_aborts_executions_in_flight_tcp() {
    shutdown_with_commands_in_flight(Kind::Tcp);
}

#[test]
fn shutdown_aborts_executions_in_flight_shm() {
    shutdown_with_commands_in_flight(Kind::Shm);
}

#[test]
fn listen_addresses_default_to_loopback() {
    assert_eq!(
        ListenAddr::parse("tcp://:0").unwrap(),
        ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())
    );
    // Both transports on one server, several clients on each at once.
    let dir = fresh_device();
    let server = Server::open(
        dir.path(),
        ServerConfig {
            listen: vec![listen_addr(Kind::Shm), listen_addr(Kind::Tcp)],
            ..ServerConfig::default()
        },
    )
    .unwrap();
    let uris = server.uris().to_vec();
    std::thread::scope(|s| {
        for t in 0..6 {
            let uri = &uris[t % 2];
            s.spawn(move || {
                let dev = Device::open(uri).unwrap();
                let path = format!("/client{t}");
                for i in 0..20u8 {
                    dev.put_bytes(&path, &[i; 1000]).unwrap();
                    assert_eq!(dev.read_file(&path, 0, 1000).unwrap(), vec![i; 1000]);
                }
                dev.close().unwrap();
            });
        }
    });
    assert_eq!(server.status().clients_total, 6);
    server.shutdown().unwrap();
}
