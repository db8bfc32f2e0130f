//! Raw garbage on every handshake socket the daemon serves (shm's unix socket, tcp,
//! tcps), from peers that are not csx clients: random bytes, truncated handshakes (then
//! a close, or silence), oversized length fields, a whole handshake then garbage, and a
//! slow peer sending one byte a second. Each must get a typed refusal or a close within
//! the handshake deadline, while a well-behaved client on every transport is served,
//! and the daemon (a child process: this test binary again) must end with the threads
//! and file descriptors it had before: nothing leaks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::transport::shm::framing::{Hello, Welcome, WelcomeStatus};
use csx_host::transport::tcp::framing::{
    ConnectStatus, ICReq, ICResp, PduType, TermReq, PDU_HEADER_SIZE,
};
use csx_host::transport::tcp::{TcpOptions, TcpTransport, HANDSHAKE_TIMEOUT};
use csx_host::{Client, Device, DeviceUri};
use csx_server::{ListenAddr, Server, ServerConfig, ServerOptions};

mod common;
use common::tls_files;

const STATE_ENV: &str = "CSX_GARBAGE_DAEMON_STATE";
const CERTS_ENV: &str = "CSX_GARBAGE_DAEMON_CERTS";

/// Run by the child process: serves the device in `$CSX_GARBAGE_DAEMON_STATE` over shm,
/// tcp and tcps (certificate and key in `$CSX_GARBAGE_DAEMON_CERTS`), prints its uris,
/// serves until killed.
#[test]
fn garbage_daemon_helper() {
    let (Ok(state), Ok(certs)) = (std::env::var(STATE_ENV), std::env::var(CERTS_ENV)) else {
        return; // An ordinary test run: nothing to do.
    };
    let device = DeviceRuntime::open(std::path::Path::new(&state)).expect("opens");
    let certs = std::path::Path::new(&certs);
    let config = ServerConfig {
        listen: vec![
            ListenAddr::Shm(format!("csx-garbage-{}", std::process::id())),
            ListenAddr::parse("tcp://127.0.0.1:0").unwrap(),
            ListenAddr::parse("tcps://127.0.0.1:0").unwrap(),
        ],
        token: None,
    };
    let options = ServerOptions::new().tls(certs.join("leaf.pem"), certs.join("leaf.key"));
    let server = Server::start_with(device, config, options).expect("serves");
    println!("uris {}", server.uris().join(" "));
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(3600));
}

/// The daemon child, killed when dropped.
struct Daemon {
    child: Child,
    shm: String,
    tcp: String,
    tcps: String,
    ca: std::path::PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon(dir: &std::path::Path) -> Daemon {
    let state = dir.join("dev");
    let config = DeviceConfig {
        nvm_size_bytes: 32 << 20,
        slm_size_bytes: 16 << 20,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    DeviceRuntime::init(&state, config)
        .expect("init")
        .close()
        .unwrap();
    let (ca, cert, _key) = tls_files(dir);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "garbage_daemon_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(STATE_ENV, &state)
        .env(CERTS_ENV, cert.parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the daemon");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let uris = lines
        // The harness may print "test NAME ... " before it on the same line.
        .find_map(|l| Some(l.ok()?.split_once("uris ")?.1.to_owned()))
        .expect("the daemon prints its uris");
    let mut it = uris.split(' ').map(str::to_owned);
    let (shm, tcp, tcps) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    Daemon {
        child,
        shm: shm.strip_prefix("shm://").unwrap().to_string(),
        tcp: tcp.strip_prefix("tcp://").unwrap().to_string(),
        tcps: tcps.strip_prefix("tcps://").unwrap().to_string(),
        ca,
    }
}

/// Threads and open file descriptors of process `pid`.
fn threads_and_fds(pid: u32) -> (usize, usize) {
    let count = |what: &str| {
        std::fs::read_dir(format!("/proc/{pid}/{what}"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    (count("task"), count("fd"))
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// A good client on every transport: each is served.
fn good_clients(d: &Daemon) {
    for uri in [format!("shm://{}", d.shm), format!("tcp://{}", d.tcp)] {
        let dev = Device::open(&uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        dev.identify().unwrap_or_else(|e| panic!("{uri}: {e}"));
        dev.close().unwrap();
    }
    let trusted = csx_host::transport::tcp::conn::tls::client_config(&d.ca).unwrap();
    let options = TcpOptions {
        queue_depth: 4,
        token: None,
    };
    let t = TcpTransport::connect_tls(&d.tcps, &options, trusted).expect("tcps connects");
    let uri = DeviceUri::parse(&format!("tcps://{}", d.tcps)).unwrap();
    let dev = Device::with_client(Client::new(Box::new(t)), uri);
    dev.identify().expect("tcps is served");
    dev.close().unwrap();
}

/// A stream the attacks use: shm's unix socket, tcp, or tls over tcp.
trait Peer: Read + Write + Send {
    fn read_timeout(&mut self, t: Duration);
    fn shut_write(&mut self);
}

impl Peer for UnixStream {
    fn read_timeout(&mut self, t: Duration) {
        let _ = self.set_read_timeout(Some(t));
    }
    fn shut_write(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

impl Peer for TcpStream {
    fn read_timeout(&mut self, t: Duration) {
        let _ = self.set_read_timeout(Some(t));
    }
    fn shut_write(&mut self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

impl Peer for Tls {
    fn read_timeout(&mut self, t: Duration) {
        let _ = self.sock.set_read_timeout(Some(t));
    }
    fn shut_write(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }
}

/// Everything the daemon sends until it closes the connection, or `None` if it is
/// still open after `within`.
fn until_closed(p: &mut dyn Peer, within: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        p.read_timeout(left);
        match p.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            // Reset, or a TLS alert: closed.
            Err(_) => return Some(got),
        }
    }
}

/// What the daemon must do with a connection: close it (whatever it says first), or
/// refuse it with a typed answer `check` accepts first.
enum Expect {
    Close,
    Refusal(fn(&[u8]) -> Result<(), String>),
}

/// Writes an attack (it may sleep between bytes).
type Action = Box<dyn FnOnce(&mut dyn Peer) + Send>;

struct Attack {
    name: String,
    connect: Connect,
    act: Action,
    expect: Expect,
}

struct Rng(u64);

impl Rng {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0 as u8
            })
            .collect()
    }
}

fn hello() -> Vec<u8> {
    Hello {
        queue_depth: 4,
        host_memory_bytes: 1 << 20,
    }
    .encode()
    .to_vec()
}

fn icreq() -> Vec<u8> {
    ICReq {
        queue_depth: 4,
        token: Vec::new(),
    }
    .encode()
}

/// A TLS ClientHello's first bytes, as a real client sends them.
fn client_hello(ca: &std::path::Path) -> Vec<u8> {
    let config = csx_host::transport::tcp::conn::tls::client_config(ca).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

fn shm_welcome(b: &[u8]) -> Result<Welcome, String> {
    Welcome::decode(b).map_err(|e| format!("not a welcome ({e}): {b:?}"))
}

/// The connect response or termination request a tcp daemon sends.
fn tcp_answer(b: &[u8]) -> Result<(u8, Vec<u8>), String> {
    if b.len() < PDU_HEADER_SIZE {
        return Err(format!("{} bytes, no pdu", b.len()));
    }
    let plen = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    let body = b
        .get(PDU_HEADER_SIZE..plen)
        .ok_or_else(|| format!("pdu of {plen} bytes cut at {}", b.len()))?;
    Ok((b[0], body.to_vec()))
}

fn term_naming(b: &[u8], words: &[&str]) -> Result<(), String> {
    let (kind, body) = tcp_answer(b)?;
    if kind != PduType::C2HTermReq as u8 {
        return Err(format!("pdu type {kind}, not a termination request"));
    }
    let term = TermReq::decode(&body).map_err(|e| e.to_string())?;
    match words.iter().find(|w| !term.message.contains(**w)) {
        Some(w) => Err(format!("{:?} does not name {w:?}", term.message)),
        None => Ok(()),
    }
}

type Connect = Box<dyn FnOnce() -> Box<dyn Peer> + Send>;

fn unix_to(path: &std::path::Path) -> Connect {
    let path = path.to_path_buf();
    Box::new(move || Box::new(UnixStream::connect(&path).unwrap()) as Box<dyn Peer>)
}

fn tcp_to(addr: &str) -> Connect {
    let addr = addr.to_string();
    Box::new(move || Box::new(TcpStream::connect(&addr).unwrap()) as Box<dyn Peer>)
}

fn tls_to(addr: &str, ca: &std::path::Path) -> Connect {
    let (addr, ca) = (addr.to_string(), ca.to_path_buf());
    Box::new(move || {
        let config = csx_host::transport::tcp::conn::tls::client_config(&ca).unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(config, name).unwrap();
        let sock = TcpStream::connect(&addr).unwrap();
        Box::new(rustls::StreamOwned::new(conn, sock)) as Box<dyn Peer>
    })
}

/// The attacks every transport gets, `handshake` being its first message: 4 KiB of
/// random bytes, half the handshake then a close, half of it then silence, and all
/// but its last byte one a second. Each must end in a close.
fn plain_attacks(
    transport: &str,
    connect: impl Fn() -> Connect,
    handshake: &[u8],
    rng: &mut Rng,
) -> Vec<Attack> {
    let half = handshake[..handshake.len() / 2].to_vec();
    let kinds: [(&str, Action); 4] = [
        ("random bytes", send(rng.bytes(4096))),
        (
            "half a handshake, then a close",
            half_then_close(handshake.to_vec()),
        ),
        ("half a handshake, then silence", send(half)),
        ("one byte a second", trickle(handshake.to_vec())),
    ];
    kinds
        .into_iter()
        .map(|(what, act)| {
            attack(
                &format!("{transport} {what}"),
                connect(),
                act,
                Expect::Close,
            )
        })
        .collect()
}

/// The shm attacks.
fn shm_attacks(d: &Daemon, rng: &mut Rng) -> Vec<Attack> {
    let path = csx_host::transport::shm::socket_path(&d.shm);
    let mut attacks = plain_attacks("shm", || unix_to(&path), &hello(), rng);
    let mut huge = hello();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    attacks.push(attack(
        "shm hello with huge depth and host memory",
        unix_to(&path),
        send(huge),
        Expect::Refusal(|b| {
            let w = shm_welcome(b)?;
            let named = w
                .message
                .contains("host memory of 18446744073709551615 bytes");
            match w.status == WelcomeStatus::BadHostMemory && named {
                true => Ok(()),
                false => Err(format!("{w:?}")),
            }
        }),
    ));
    let garbage = rng.bytes(64);
    let after_welcome: Action = Box::new(move |p: &mut dyn Peer| {
        let _ = p.write_all(&hello());
        // The welcome first (its descriptors are dropped unread), then garbage.
        let mut w = [0u8; 32];
        if p.read_exact(&mut w).is_ok() {
            let _ = p.write_all(&garbage);
        }
    });
    attacks.push(attack(
        "shm hello, then garbage on the socket",
        unix_to(&path),
        after_welcome,
        Expect::Close,
    ));
    attacks
}

/// The tcp attacks.
fn tcp_attacks(d: &Daemon, rng: &mut Rng) -> Vec<Attack> {
    let addr = d.tcp.as_str();
    let mut attacks = plain_attacks("tcp", || tcp_to(addr), &icreq(), rng);
    let mut huge = icreq();
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    attacks.push(attack(
        "tcp connect request announcing 4 GiB",
        tcp_to(addr),
        send(huge),
        Expect::Refusal(|b| term_naming(b, &["4294967295"])),
    ));
    let mut huge_token = icreq();
    let at = PDU_HEADER_SIZE + 6;
    huge_token[at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
    attacks.push(attack(
        "tcp connect request with a 64 KiB token length",
        tcp_to(addr),
        send(huge_token),
        Expect::Refusal(|b| term_naming(b, &["token", "65535"])),
    ));
    let garbage = rng.bytes(64 << 10);
    let after_accept: Action = Box::new(move |p: &mut dyn Peer| {
        let _ = p.write_all(&icreq());
        let mut h = [0u8; PDU_HEADER_SIZE];
        if p.read_exact(&mut h).is_ok() {
            let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
            let mut body = vec![0u8; plen - PDU_HEADER_SIZE];
            let _ = p.read_exact(&mut body);
            let resp = ICResp::decode(&body).expect("a connect response");
            assert_eq!(resp.status, ConnectStatus::Accepted);
            let _ = p.write_all(&garbage);
        }
    });
    attacks.push(attack(
        "tcp connect request, then garbage",
        tcp_to(addr),
        after_accept,
        Expect::Close,
    ));
    attacks
}

/// The tcps attacks: garbage before TLS, in TLS's record layer, and inside a session.
fn tcps_attacks(d: &Daemon, rng: &mut Rng) -> Vec<Attack> {
    let addr = d.tcps.as_str();
    let hello = client_hello(&d.ca);
    let mut attacks = plain_attacks("tcps", || tcp_to(addr), &hello, rng);
    attacks.push(attack(
        "tcps plain connect request",
        tcp_to(addr),
        send(icreq()),
        Expect::Close,
    ));
    // A handshake record announcing 64 KiB - 1 bytes (more than TLS allows).
    let huge = vec![0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0x00, 0xff, 0xfb];
    attacks.push(attack(
        "tcps record announcing 64 KiB",
        tcp_to(addr),
        send(huge),
        Expect::Close,
    ));
    let garbage = rng.bytes(64 << 10);
    // Through the session: the handshake, the connect request, then garbage.
    let inside: Action = Box::new(move |p: &mut dyn Peer| {
        let _ = p.write_all(&icreq());
        let mut h = [0u8; PDU_HEADER_SIZE];
        if p.read_exact(&mut h).is_ok() {
            let _ = p.write_all(&garbage);
        }
    });
    attacks.push(attack(
        "tcps session, then garbage inside it",
        tls_to(addr, &d.ca),
        inside,
        Expect::Close,
    ));
    attacks
}

fn attack(name: &str, connect: Connect, act: Action, expect: Expect) -> Attack {
    Attack {
        name: name.to_string(),
        connect,
        act,
        expect,
    }
}

fn send(bytes: Vec<u8>) -> Action {
    Box::new(move |p: &mut dyn Peer| {
        let _ = p.write_all(&bytes);
        let _ = p.flush();
    })
}

fn half_then_close(bytes: Vec<u8>) -> Action {
    Box::new(move |p: &mut dyn Peer| {
        let _ = p.write_all(&bytes[..bytes.len() / 2]);
        p.shut_write();
    })
}

/// One byte a second of `bytes` (the last never sent), from a thread of its own so the
/// attack can wait for the close meanwhile.
fn trickle(bytes: Vec<u8>) -> Action {
    Box::new(move |p: &mut dyn Peer| {
        for b in &bytes[..bytes.len() - 1] {
            if p.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
            // Stop once the daemon closed (a read sees the end at once).
            p.read_timeout(Duration::from_millis(1));
            if matches!(p.read(&mut [0u8; 64]), Ok(0)) {
                return;
            }
        }
    })
}

/// Runs one attack; why it failed, if it did.
fn run(a: Attack) -> Result<(), String> {
    let start = Instant::now();
    let mut p = (a.connect)();
    (a.act)(&mut *p);
    let within = (HANDSHAKE_TIMEOUT + Duration::from_secs(3)).saturating_sub(start.elapsed());
    let name = &a.name;
    let Some(said) = until_closed(&mut *p, within.max(Duration::from_secs(1))) else {
        return Err(format!("{name}: still open after {:?}", start.elapsed()));
    };
    match a.expect {
        Expect::Close => Ok(()),
        Expect::Refusal(check) => check(&said).map_err(|e| format!("{name}: {e}")),
    }
}

#[test]
fn garbage_on_every_handshake_socket_is_refused_or_closed_and_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(dir.path());
    let pid = d.child.id();
    // Once served, the daemon has every thread it keeps (engines, listeners).
    good_clients(&d);
    std::thread::sleep(Duration::from_millis(500));
    let (threads, fds) = threads_and_fds(pid);
    let rss = rss_kib(pid);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut attacks = shm_attacks(&d, &mut rng);
    attacks.extend(tcp_attacks(&d, &mut rng));
    attacks.extend(tcps_attacks(&d, &mut rng));
    let count = attacks.len();
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let runs: Vec<_> = attacks
        .into_iter()
        .map(|a| {
            let failures = Arc::clone(&failures);
            std::thread::spawn(move || {
                if let Err(e) = run(a) {
                    failures.lock().unwrap().push(e);
                }
            })
        })
        .collect();
    // Served while the garbage flows.
    good_clients(&d);
    for r in runs {
        r.join().expect("an attack thread");
    }
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {count} attacks: {failures:#?}",
        failures.len()
    );
    good_clients(&d);
    // Every connection's thread and descriptors are given back.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = threads_and_fds(pid);
    while (now.0 > threads || now.1 > fds) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        now = threads_and_fds(pid);
    }
    let rss_after = rss_kib(pid);
    println!(
        "{count} attacks; daemon threads {threads} -> {}, fds {fds} -> {}, rss {rss} -> {rss_after} KiB",
        now.0, now.1
    );
    assert!(now.0 <= threads, "threads {threads} -> {}", now.0);
    assert!(now.1 <= fds, "fds {fds} -> {}", now.1);
    // No buffer of a dropped connection is kept: growth stays within allocator slack.
    assert!(rss_after < rss + (16 << 10), "rss {rss} -> {rss_after} KiB");
}
