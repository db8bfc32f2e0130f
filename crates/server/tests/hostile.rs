//! Hostile clients: 64 of them at once against one daemon (a child process), while its
//! resident memory is sampled and a well-behaved client keeps working.
//!
//! The 64: slow-loris handshakes (one byte of a connect request a second), clients that
//! ask for 16 MiB reads and never read their socket, garbage senders, reconnect storms
//! (connect and drop, with and without a handshake, on tcp and shm) and program-slot
//! hoarders (load programs until refused, then vanish without unloading). The tcp ones
//! come from 127.0.0.2 and 127.0.0.3, the rest over shm; the well-behaved client from
//! 127.0.0.1 must keep getting in. Two hostile sources may take every thread between
//! them (the per-source cap keeps one source from doing so alone), and as they reconnect
//! at once whenever the handshake deadline (5 s) or the write stall (3 s here) frees a
//! thread, the good client wins a freed thread only by chance: its longest wait is
//! measured and printed (seen: 6.3 s and 15.8 s under load 18), and asserted only to be
//! under 30 s (the daemon is not wedged). There is no eviction of handshaking
//! connections, so no tighter bound holds (docs/security.md, Known limits).
//!
//! The daemon's memory bound is what its configuration allows: its idle footprint, plus
//! its SLM, plus for every connection it may hold a thread for
//! ([`CONNECTIONS_MAX`]) the reply bytes one client may have in flight and one largest
//! request. The test asserts the sampled peak RSS stays under that bound, and prints
//! both.
//!
//! Time: `CSX_HOSTILE_SECONDS` (default 15; `make soak` runs 600).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::limits::PROGRAM_SLOTS_COUNT;
use csx_host::proto::{encode_command, Command as Cmd, CommandId, Op, ProgramIndex, ProgramType};
use csx_host::transport::tcp::framing::{
    command_capsule_header, ConnectStatus, ICReq, ICResp, DATA_PSH_SIZE, PDU_HEADER_SIZE,
};
use csx_host::transport::tcp::{COMMAND_CAPSULE_SIZE_MAX, DATA_PDU_SIZE_MAX};
use csx_host::Device;
use csx_server::{ClientLimits, ListenAddr, Server, ServerConfig, ServerOptions, CONNECTIONS_MAX};

const HELPER_ENV: &str = "CSX_HOSTILE_DAEMON_STATE";
const SLM: u64 = 32 << 20;
const REPLY_BYTES: u64 = csx_server::CLIENT_REPLY_BYTES_MIN;
const HOSTILE: usize = 64;

/// `mov r0, 0; exit`.
const RETURN_ZERO: [u8; 16] = [
    0xb7, 0, 0, 0, 0, 0, 0, 0, //
    0x95, 0, 0, 0, 0, 0, 0, 0,
];

/// Run by the child process: serves the device in `$CSX_HOSTILE_DAEMON_STATE` with the
/// limits above, prints its uris, serves until killed.
#[test]
fn hostile_daemon_helper() {
    let Ok(state) = std::env::var(HELPER_ENV) else {
        return; // An ordinary test run: nothing to do.
    };
    let device = DeviceRuntime::open(std::path::Path::new(&state)).expect("opens");
    let config = ServerConfig {
        listen: vec![
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenAddr::Shm(format!("csx-hostile-{}", std::process::id())),
        ],
        token: None,
    };
    let options = ServerOptions::new()
        .limits(ClientLimits {
            memory_bytes: SLM / 4,
            queued_commands: 64,
            program_slots: 4,
            reply_bytes: REPLY_BYTES,
        })
        .reclaim_programs(true)
        .write_stall(Duration::from_secs(3));
    let server = Server::start_with(device, config, options).expect("serves");
    for uri in server.uris() {
        println!("uri {uri}");
    }
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(3600));
}

fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        << 10
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A tcp connection to 127.0.0.1:`port` from the local address `source` (the daemon
/// counts connections by source address).
fn connect_from(source: &str, port: u16) -> Option<TcpStream> {
    use rustix::net::{AddressFamily, SocketType};
    let local: SocketAddr = format!("{source}:0").parse().unwrap();
    let remote: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).ok()?;
    rustix::net::bind(&fd, &local).ok()?;
    rustix::net::connect(&fd, &remote).ok()?;
    Some(TcpStream::from(fd))
}

/// Reads the connect response; its queue id if the daemon accepted the client.
fn read_icresp(s: &mut TcpStream) -> Option<u32> {
    let _ = s.set_read_timeout(Some(Duration::from_secs(6)));
    let mut h = [0u8; PDU_HEADER_SIZE];
    s.read_exact(&mut h).ok()?;
    let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    let mut body = vec![0u8; plen.checked_sub(PDU_HEADER_SIZE)?.min(1 << 16)];
    s.read_exact(&mut body).ok()?;
    let resp = ICResp::decode(&body).ok()?;
    (resp.status == ConnectStatus::Accepted).then_some(resp.queue_id)
}

fn icreq() -> Vec<u8> {
    ICReq {
        queue_depth: 64,
        token: Vec::new(),
    }
    .encode()
}

/// One hostile client of kind `kind`, until `stop`.
fn hostile(kind: usize, source: &str, port: u16, shm_uri: &str, stop: &AtomicBool, seed: u64) {
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::Relaxed) {
        match kind {
            // Slow loris: one byte of the connect request a second.
            0 => {
                if let Some(mut s) = connect_from(source, port) {
                    for b in icreq() {
                        if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
            // Never reads: 16 MiB reads, as many as the daemon takes.
            1 => {
                let Some(mut s) = connect_from(source, port) else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let _ = csx_host::transport::sys::set_socket_buffers(&s, 4096);
                if s.write_all(&icreq()).is_err() {
                    continue;
                }
                let Some(queue_id) = read_icresp(&mut s) else {
                    continue;
                };
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                for i in 0..256u64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let op = Op::FileRead {
                        path: "/big".into(),
                        offset: 0,
                        len: 16 << 20,
                    };
                    let frame = encode_command(&Cmd::new(CommandId(i + 1), op)).unwrap();
                    let mut pdu = command_capsule_header(queue_id, 0, frame.len()).to_vec();
                    pdu.extend_from_slice(&frame);
                    if s.write_all(&pdu).is_err() {
                        break;
                    }
                }
                // Hold the connection, reading nothing, until the daemon drops it.
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let deadline = Instant::now() + Duration::from_secs(8);
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            // Garbage, including huge announced lengths.
            2 => {
                if let Some(mut s) = connect_from(source, port) {
                    let n = 1 + (rng.next() % 4096) as usize;
                    let mut junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                    if rng.next().is_multiple_of(2) {
                        junk[..PDU_HEADER_SIZE.min(n)].copy_from_slice(
                            &[4, 0, 8, 0, 0xff, 0xff, 0xff, 0x7f][..PDU_HEADER_SIZE.min(n)],
                        );
                    }
                    let _ = s.write_all(&junk);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
                    let _ = s.read(&mut [0u8; 256]);
                }
            }
            // Reconnect storm: raw connect-and-drop, and whole handshakes, tcp and shm.
            3 => {
                for _ in 0..20 {
                    drop(connect_from(source, port));
                }
                if let Ok(dev) = Device::open(shm_uri) {
                    drop(dev);
                }
                // A whole tcp handshake from this source, then gone.
                if let Some(mut s) = connect_from(source, port) {
                    if s.write_all(&icreq()).is_ok() {
                        let _ = read_icresp(&mut s);
                    }
                }
            }
            // Program-slot hoarder: load until refused, hold a while, vanish.
            _ => {
                if let Ok(dev) = Device::open(shm_uri) {
                    for _ in 0..PROGRAM_SLOTS_COUNT {
                        let pind =
                            ProgramIndex((rng.next() % u64::from(PROGRAM_SLOTS_COUNT)) as u16);
                        if dev
                            .load_program(pind, ProgramType::Raw, &RETURN_ZERO, None)
                            .is_err()
                            && rng.next().is_multiple_of(4)
                        {
                            break;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200 + rng.next() % 800));
                    drop(dev); // gone without unloading anything, as a killed client
                }
            }
        }
    }
}

#[test]
fn sixty_four_hostile_clients_keep_the_daemon_within_its_memory_bound() {
    let seconds: u64 = std::env::var("CSX_HOSTILE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let dir = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        nvm_size_bytes: 128 << 20,
        slm_size_bytes: SLM,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    DeviceRuntime::init(dir.path(), config)
        .unwrap()
        .close()
        .unwrap();
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hostile_daemon_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut uris = Vec::new();
    while uris.len() < 2 {
        let line = lines.next().expect("the daemon prints its uris").unwrap();
        if let Some((_, uri)) = line.split_once("uri ") {
            uris.push(uri.trim().to_string());
        }
    }
    let tcp = uris
        .iter()
        .find(|u| u.starts_with("tcp://"))
        .unwrap()
        .clone();
    let shm_uri = uris
        .iter()
        .find(|u| u.starts_with("shm://"))
        .unwrap()
        .clone();
    let port: u16 = tcp.rsplit(':').next().unwrap().parse().unwrap();
    // The well-behaved client: tcp from 127.0.0.1, a source no hostile uses (they come
    // from 127.0.0.2 and 127.0.0.3, and over shm).
    let good_uri = tcp.clone();
    {
        let dev = Device::open(&good_uri).unwrap();
        let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
        dev.put_bytes("/big", &data).unwrap();
        dev.flush().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let idle = rss_of(pid);
    let loaded_before = Device::open(&good_uri).unwrap().programs().unwrap().len();
    // What the configuration allows: see the module docs.
    let request_max =
        (PDU_HEADER_SIZE + DATA_PSH_SIZE + DATA_PDU_SIZE_MAX.max(COMMAND_CAPSULE_SIZE_MAX)) as u64;
    let bound = idle + SLM + CONNECTIONS_MAX as u64 * (REPLY_BYTES + request_max);

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..HOSTILE {
        let stop = Arc::clone(&stop);
        let shm_uri = shm_uri.clone();
        let source = if i % 2 == 0 { "127.0.0.2" } else { "127.0.0.3" };
        threads.push(std::thread::spawn(move || {
            hostile(i % 5, source, port, &shm_uri, &stop, i as u64 + 1)
        }));
    }
    // The well-behaved client: a read of the big file's head every half second, from
    // its own address; a refusal or failure is retried, and counted.
    let start = Instant::now();
    let (mut peak, mut samples) = (0u64, 0u64);
    let (good_ok, good_failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut last_good = Instant::now();
    let mut longest_gap = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(seconds) {
        peak = peak.max(rss_of(pid));
        samples += 1;
        let ok = Device::open(&good_uri)
            .ok()
            .and_then(|d| d.read_file("/big", 0, 4).ok())
            .is_some_and(|b| b == [0, 1, 2, 3]);
        if ok {
            good_ok.fetch_add(1, Ordering::Relaxed);
            longest_gap = longest_gap.max(last_good.elapsed());
            last_good = Instant::now();
        } else {
            good_failed.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    longest_gap = longest_gap.max(last_good.elapsed());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // After the storm: every program slot the hoarders held comes back (reclaimed
    // when their connections went), and a client gets the whole device.
    std::thread::sleep(Duration::from_secs(4));
    peak = peak.max(rss_of(pid));
    let dev = Device::open(&good_uri).unwrap();
    let loaded = dev.programs().unwrap().len();
    dev.close().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "hostile soak: {seconds} s, {HOSTILE} hostile clients, {samples} RSS samples: idle {} MiB, peak {} MiB, bound {} MiB; good client {} reads ok, {} refused or failed, longest gap {:?}; {loaded} programs loaded after",
        idle >> 20,
        peak >> 20,
        bound >> 20,
        good_ok.load(Ordering::Relaxed),
        good_failed.load(Ordering::Relaxed),
        longest_gap
    );
    assert!(
        peak < bound,
        "the daemon's RSS peaked at {peak} bytes, its bound is {bound}"
    );
    assert!(
        good_ok.load(Ordering::Relaxed) > 0,
        "the good client never got in"
    );
    assert!(
        longest_gap < Duration::from_secs(30),
        "the good client was locked out for {longest_gap:?}"
    );
    assert_eq!(
        loaded, loaded_before,
        "programs of vanished hoarders were not reclaimed"
    );
}

/// A source at its connection cap is refused with a message naming the source and the
/// limit, while another source gets in; the same per user on shm.
#[test]
fn a_source_at_its_cap_is_told_so_and_others_get_in() {
    let dir = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: 8 << 20,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let device = DeviceRuntime::init(dir.path(), config).unwrap();
    let server = Server::start_with(
        device,
        ServerConfig {
            listen: vec![
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenAddr::Shm(format!("csx-cap-{}", std::process::id())),
            ],
            token: None,
        },
        ServerOptions::new().connections_per_source(3),
    )
    .unwrap();
    let tcp = server
        .uris()
        .iter()
        .find(|u| u.starts_with("tcp://"))
        .unwrap()
        .clone();
    let shm = server
        .uris()
        .iter()
        .find(|u| u.starts_with("shm://"))
        .unwrap()
        .clone();
    let port: u16 = tcp.rsplit(':').next().unwrap().parse().unwrap();
    let held: Vec<TcpStream> = (0..3)
        .map(|_| connect_from("127.0.0.2", port).unwrap())
        .collect();
    let mut fourth = connect_from("127.0.0.2", port).unwrap();
    let _ = fourth.write_all(&icreq());
    let _ = fourth.set_read_timeout(Some(Duration::from_secs(5)));
    let mut h = [0u8; PDU_HEADER_SIZE];
    fourth.read_exact(&mut h).unwrap();
    let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    let mut body = vec![0u8; plen - PDU_HEADER_SIZE];
    fourth.read_exact(&mut body).unwrap();
    let resp = ICResp::decode(&body).unwrap();
    assert_ne!(resp.status, ConnectStatus::Accepted);
    assert!(
        resp.message
            .contains("address 127.0.0.2 holds 3 connections, its limit per source"),
        "{}",
        resp.message
    );
    // Another address is served meanwhile.
    let dev = Device::open(&tcp).unwrap();
    dev.identify().unwrap();
    drop(dev);
    drop(held);
    // shm: per user.
    let a = Device::open(&shm).unwrap();
    let b = Device::open(&shm).unwrap();
    let c = Device::open(&shm).unwrap();
    let err = Device::open(&shm).map(drop).unwrap_err().to_string();
    assert!(
        err.contains("holds 3 connections, its limit per source"),
        "{err}"
    );
    drop((a, b, c));
    // Once they go, the source gets in again.
    let mut again = None;
    for _ in 0..50 {
        if let Ok(d) = Device::open(&shm) {
            again = Some(d);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        again.is_some(),
        "the user got no connection after closing its others"
    );
    drop(again);
    server.shutdown().unwrap();
}
