//! A bounded fault campaign against the daemon, for the classes a hostile or careless
//! client tries: slow-loris handshakes on tcp and tcps, clients that stop reading their
//! replies, a device that stops answering, and another local user on shm. Each case
//! runs in seconds; the whole file well under a minute.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::{encode_command, Command as Cmd, CommandId, Op};
use csx_host::transport::shm::{ShmOptions, ShmTransport};
use csx_host::transport::tcp::framing::{command_capsule_header, ICReq, ICResp, PDU_HEADER_SIZE};
use csx_host::transport::tcp::{TcpOptions, TcpTransport, HANDSHAKE_TIMEOUT};
use csx_host::transport::Timeouts;
use csx_host::{Client, Device, DeviceUri, TransportError};
use csx_server::{ListenAddr, Server, ServerConfig, ServerOptions, CONNECTIONS_MAX};

mod common;
use common::tls_files;
use csx_testkit::programs::COUNT_DOWN;

fn device(dir: &std::path::Path) -> DeviceRuntime {
    let config = DeviceConfig {
        nvm_size_bytes: 64 << 20,
        slm_size_bytes: 16 << 20,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    DeviceRuntime::init(dir, config).expect("init")
}

fn serve(listen: &str, options: ServerOptions) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = ServerConfig {
        listen: vec![ListenAddr::parse(listen).unwrap()],
        token: None,
    };
    let server = Server::start_with(device(dir.path()), config, options).expect("serves");
    (dir, server)
}

/// Whether the server closed `s` (end of stream or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut sink = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut sink) {
            Ok(0) => return true,
            // An alert before the close.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} (waited {within:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// More trickling TLS handshakes than the daemon has connection threads: every one is
/// cut at the handshake deadline however it paces its bytes, and a real client gets in
/// right after.
#[test]
fn trickling_tls_handshakes_are_cut_at_the_deadline() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(certs.path());
    let (_dir, server) = serve("tcps://127.0.0.1:0", ServerOptions::new().tls(cert, key));
    let addr = server.uris()[0]
        .strip_prefix("tcps://")
        .unwrap()
        .to_string();
    let start = Instant::now();
    let mut tricklers: Vec<TcpStream> = (0..CONNECTIONS_MAX + 10)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    for s in &mut tricklers {
        // A TLS record header announcing 512 bytes, then one byte at a time.
        let _ = s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let trickle = {
        let mut writers: Vec<TcpStream> = tricklers
            .iter()
            .filter_map(|s| s.try_clone().ok())
            .collect();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(700));
                for w in &mut writers {
                    let _ = w.write_all(&[0x01]);
                }
            }
        })
    };
    // A real client: refused while every thread is held, in as soon as they are cut.
    let trusted = csx_host::transport::tcp::conn::tls::client_config(&ca).unwrap();
    let options = TcpOptions {
        queue_depth: 4,
        token: None,
    };
    let bound = HANDSHAKE_TIMEOUT + Duration::from_secs(4);
    let t = loop {
        match TcpTransport::connect_tls(&addr, &options, trusted.clone()) {
            Ok(t) => break t,
            Err(e) => {
                assert!(
                    start.elapsed() < bound + Duration::from_secs(6),
                    "no real client got in while peers trickled: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let got_in = start.elapsed();
    assert!(got_in < bound, "a real client got in only after {got_in:?}");
    let dev = Device::with_client(
        Client::new(Box::new(t)),
        DeviceUri::parse(&server.uris()[0]).unwrap(),
    );
    dev.identify().expect("the real client is served");
    dev.close().unwrap();
    for (i, s) in tricklers.iter_mut().enumerate() {
        let left = (start + bound).saturating_duration_since(Instant::now());
        assert!(
            closed_within(s, left.max(Duration::from_millis(100))),
            "trickling connection {i} still open {:?} after it began",
            start.elapsed()
        );
    }
    stop.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    server.shutdown().unwrap();
}

/// The same on plain tcp: a trickled connect request is cut at the deadline.
#[test]
fn a_trickling_tcp_handshake_is_cut_at_the_deadline() {
    let (_dir, server) = serve("tcp://127.0.0.1:0", ServerOptions::new());
    let addr = server.uris()[0].strip_prefix("tcp://").unwrap().to_string();
    let req = ICReq {
        queue_depth: 4,
        token: Vec::new(),
    }
    .encode();
    let mut s = TcpStream::connect(&addr).unwrap();
    let start = Instant::now();
    let mut w = s.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for b in &req[..req.len() - 1] {
            if w.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(400));
        }
    });
    assert!(
        closed_within(&mut s, HANDSHAKE_TIMEOUT + Duration::from_secs(2)),
        "the trickling connection lived {:?}",
        start.elapsed()
    );
    trickle.join().unwrap();
    server.shutdown().unwrap();
}

/// A client refused because every connection thread is taken hears that, not "it
/// closed the connection". The device opens at most 64 queue pairs and one source may
/// hold only a few connections silent in their handshake, so the threads are taken by
/// clients connected over IPv6 loopback and silent ones over IPv4 loopback (another
/// source), all on one dual-stack listener, which accepts them in order; the client
/// refused comes over IPv6, which has no handshake pending.
#[test]
fn a_client_beyond_the_connection_limit_is_told_so() {
    let options = ServerOptions::new().connections_per_source(CONNECTIONS_MAX);
    let (_dir, server) = serve("tcp://[::]:0", options);
    let port = server.uris()[0].rsplit(':').next().unwrap().to_string();
    let (addr, addr4) = (format!("[::1]:{port}"), format!("127.0.0.1:{port}"));
    let tcp = TcpOptions {
        queue_depth: 4,
        token: None,
    };
    let pairs = csx_host::proto::limits::QUEUE_PAIRS_MAX as usize;
    let silent = CONNECTIONS_MAX - pairs;
    assert!(
        silent <= csx_server::HANDSHAKES_PER_SOURCE,
        "{silent} silent ones fit one source"
    );
    let connected: Vec<TcpTransport> = (0..pairs)
        .map(|i| TcpTransport::connect(&addr, &tcp).unwrap_or_else(|e| panic!("client {i}: {e}")))
        .collect();
    let idle: Vec<TcpStream> = (0..silent)
        .map(|_| TcpStream::connect(&addr4).unwrap())
        .collect();
    let e = TcpTransport::connect(&addr, &tcp).expect_err("every connection thread is taken");
    let text = e.to_string();
    assert!(
        matches!(e, TransportError::Refused { .. }) && text.contains("connections, its limit"),
        "{text}"
    );
    drop((idle, connected));
    server.shutdown().unwrap();
}

/// Reads one PDU's bytes whole, `None` at the end of the stream.
fn read_pdu(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut h = [0u8; PDU_HEADER_SIZE];
    s.read_exact(&mut h).ok()?;
    let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    let mut pdu = h.to_vec();
    pdu.resize(plen, 0);
    s.read_exact(&mut pdu[PDU_HEADER_SIZE..]).ok()?;
    Some(pdu)
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// A client that asks for 48 reads of 16 MiB and never reads its socket: the daemon
/// holds at most the client's reply bytes (not 768 MiB), serves the others meanwhile,
/// and drops it once it has taken nothing for the write stall limit.
#[test]
fn a_client_that_never_reads_holds_bounded_memory_and_is_dropped() {
    let stall = Duration::from_secs(3);
    let (_dir, server) = serve("tcp://127.0.0.1:0", ServerOptions::new().write_stall(stall));
    let uri = server.uris()[0].clone();
    let addr = uri.strip_prefix("tcp://").unwrap().to_string();
    let limit = server.limits().reply_bytes;
    let dev = Device::open(&uri).unwrap();
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    dev.put_bytes("/big", &data).unwrap();
    drop(data);

    let rss_before = rss_bytes();
    let mut s = TcpStream::connect(&addr).unwrap();
    csx_host::transport::sys::set_socket_buffers(&s, 4096).unwrap();
    s.write_all(
        &ICReq {
            queue_depth: 256,
            token: Vec::new(),
        }
        .encode(),
    )
    .unwrap();
    let resp = read_pdu(&mut s).expect("an ICResp");
    let resp = ICResp::decode(&resp[PDU_HEADER_SIZE..]).unwrap();
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        for i in 0..48u64 {
            let op = Op::FileRead {
                path: "/big".into(),
                offset: 0,
                len: 16 << 20,
            };
            let frame = encode_command(&Cmd::new(CommandId(i + 1), op)).unwrap();
            let mut pdu = command_capsule_header(resp.queue_id, 0, frame.len()).to_vec();
            pdu.extend_from_slice(&frame);
            if w.write_all(&pdu).is_err() {
                // The daemon stopped taking this client's commands.
                return;
            }
        }
    });
    let mut held_max = 0;
    let mut rss_max = 0;
    while started.elapsed() < Duration::from_secs(2) {
        held_max = held_max.max(server.status().reply_bytes_held);
        rss_max = rss_max.max(rss_bytes());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another client is served meanwhile.
    assert_eq!(dev.read_file("/big", 0, 4).unwrap(), vec![0, 1, 2, 3]);
    until(
        "the client that stopped reading was not dropped",
        stall + Duration::from_secs(5),
        || {
            held_max = held_max.max(server.status().reply_bytes_held);
            server.status().clients_connected == 1
        },
    );
    let dropped_after = started.elapsed();
    // The status sums every client's reply bytes: the other client's 4-byte read above
    // may be counted at the same moment as the stalled client's.
    let other = 4;
    assert!(
        held_max <= limit + other,
        "the daemon held {held_max} reply bytes, limit {limit} for the stalled client and {other} for the other"
    );
    let grown = rss_max.saturating_sub(rss_before);
    assert!(
        grown < 300 << 20,
        "the process grew {} MiB while a client did not read",
        grown >> 20
    );
    assert!(
        dropped_after < stall + Duration::from_secs(4),
        "dropped after {dropped_after:?}, stall limit {stall:?}"
    );
    until("reply bytes released", Duration::from_secs(5), || {
        server.status().reply_bytes_held == 0
    });
    writer.join().unwrap();
    dev.close().unwrap();
    server.shutdown().unwrap();
}

/// Limits the device cannot honour are refused at start, naming value and bound.
#[test]
fn impossible_client_limits_are_refused_at_start() {
    let cases = [
        (
            csx_server::ClientLimits {
                program_slots: 65,
                ..csx_server::ClientLimits::for_device(16 << 20)
            },
            "65",
            "only 64 program slots",
        ),
        (
            csx_server::ClientLimits {
                memory_bytes: 1 << 40,
                ..csx_server::ClientLimits::for_device(16 << 20)
            },
            "1 TiB",
            "only 16 MiB of SLM",
        ),
        (
            csx_server::ClientLimits {
                reply_bytes: 1 << 20,
                ..csx_server::ClientLimits::for_device(16 << 20)
            },
            "1 MiB",
            "must be at least 16 MiB",
        ),
        (
            csx_server::ClientLimits {
                queued_commands: 0,
                ..csx_server::ClientLimits::for_device(16 << 20)
            },
            "0",
            "must be at least 1",
        ),
    ];
    for (limits, value, bound) in cases {
        let dir = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            listen: vec![ListenAddr::parse("tcp://127.0.0.1:0").unwrap()],
            token: None,
        };
        let e = Server::start_with(
            device(dir.path()),
            config,
            ServerOptions::new().limits(limits),
        )
        .expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains(&format!("is {value}:")) && text.contains(bound),
            "{text}"
        );
    }
}

// ---------------------------------------------------------------------------------
// A device that stops answering: the daemon runs in a child process (this test binary
// again, as `helper_daemon`) that the test stops with SIGSTOP.

const HELPER_ENV: &str = "CSX_FAULTS_HELPER_STATE";

/// Not a test on its own: serves a device until killed when `HELPER_ENV` is set.
#[test]
fn helper_daemon() {
    let Some(state) = std::env::var_os(HELPER_ENV) else {
        return;
    };
    let name = format!("faults-stop-{}", std::process::id());
    let config = ServerConfig {
        listen: vec![
            ListenAddr::parse("tcp://127.0.0.1:0").unwrap(),
            ListenAddr::Shm(name),
        ],
        token: None,
    };
    let server = Server::start_with(
        device(std::path::Path::new(&state)),
        config,
        ServerOptions::new(),
    )
    .expect("serves");
    println!("uris {}", server.uris().join(" "));
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(120));
}

fn open_with(uri: &str, timeouts: Timeouts) -> Result<Device, TransportError> {
    let t: Box<dyn csx_host::transport::Transport> = match uri.split_once("://").unwrap() {
        ("tcp", addr) => Box::new(TcpTransport::connect_with_timeouts(
            addr,
            &TcpOptions {
                queue_depth: 8,
                token: None,
            },
            timeouts,
        )?),
        (_, name) => Box::new(ShmTransport::connect_with_timeouts(
            name,
            &ShmOptions {
                queue_depth: 8,
                host_memory_bytes: 64 << 20,
            },
            timeouts,
        )?),
    };
    Ok(Device::with_client(
        Client::new(t),
        DeviceUri::parse(uri).unwrap(),
    ))
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// A run longer than the answer timeout is not silence (the device sends signs of
/// life); a stopped device is, for a command in flight and for a connect, and each
/// fails with a typed error naming the device and the wait, in about that time.
#[test]
fn a_stopped_device_is_a_typed_error_after_the_answer_timeout() {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_daemon",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the helper starts");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let uris = loop {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "the helper said no uris"
        );
        // libtest may have written "test helper_daemon ... " ahead of it.
        if let Some(at) = line.find("uris ") {
            break line[at + 5..]
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>();
        }
    };
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        answer: Duration::from_secs(2),
    };
    let pid = child.id();
    for uri in &uris {
        let dev = open_with(uri, timeouts).expect("connects");
        dev.put_bytes("/f", &[7u8; 4096]).unwrap();
        // A run of about 3 s, past the answer timeout: not silence.
        let pind = dev
            .load_program_any_slot(csx_host::proto::ProgramType::Raw, &COUNT_DOWN, None)
            .unwrap();
        dev.activate(pind, csx_host::proto::EngineKind::Interpreter)
            .unwrap();
        // Short runs first, so the long one runs inline on the connection's own
        // thread (the daemon's helper then reads for it): no silence either.
        for _ in 0..3 {
            dev.execute(&csx_host::ExecuteRequest::new(pind).cparams(10, 0))
                .expect("a short run");
        }
        let long = csx_host::ExecuteRequest::new(pind)
            .cparams(u64::MAX, 0)
            .fuel(csx_host::proto::limits::FUEL_MAX)
            .time_limit_ms(3000);
        let ran = dev.execute(&long);
        assert!(
            matches!(ran, Err(csx_host::CallError::TimeLimitExceeded(_))),
            "{uri}: a long run ended as {ran:?}"
        );
        let writer = open_with(uri, timeouts).expect("connects");
        // Stopped: a command in flight fails after about the answer timeout.
        signal(pid, "-STOP");
        let asked = Instant::now();
        let e = writer
            .put_bytes("/g", &vec![1u8; 48 << 20])
            .expect_err("no answer to a write");
        let waited = asked.elapsed();
        assert!(
            e.to_string().contains("did not answer within 2 s"),
            "{uri}: {e} after {waited:?}"
        );
        assert!(waited < Duration::from_secs(6), "{uri}: {waited:?}");
        let asked = Instant::now();
        let e = dev.read_file("/f", 0, 4096).expect_err("no answer");
        let waited = asked.elapsed();
        let text = e.to_string();
        assert!(
            text.contains(&format!("the device at {uri} did not answer within 2 s")),
            "{uri}: {text}"
        );
        assert!(
            waited < Duration::from_secs(6),
            "{uri}: failed after {waited:?}"
        );
        // And a connect while it is stopped.
        let asked = Instant::now();
        let e = open_with(uri, timeouts).expect_err("no answer to the connect");
        let waited = asked.elapsed();
        assert!(
            matches!(e, TransportError::NoAnswer { .. }),
            "{uri}: {e} after {waited:?}"
        );
        assert!(waited < Duration::from_secs(6), "{uri}: {waited:?}");
        signal(pid, "-CONT");
        drop(dev);
        drop(writer);
    }
    let _ = child.kill();
    let _ = child.wait();
}
