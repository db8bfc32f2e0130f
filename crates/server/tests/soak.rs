//! Soak: 32 clients at once on tcp and shm, each sending random valid and invalid
//! commands, some of them child processes killed with SIGKILL at random moments, for a
//! bounded time. Afterwards every resource is back (the device's free SLM and its
//! program slots as at the start) and every file write that was acknowledged reads
//! back as written, before and after a restart of the device.
//!
//! Time: `CSX_SOAK_SECONDS` (default 40) of load, then the checks. Longer runs by hand:
//! `CSX_SOAK_SECONDS=600 cargo test -p csx-server --release --test soak -- --nocapture`.
//!
//! Method: 22 clients are threads of this process (half tcp, half shm) that open a
//! connection, run a random number of random commands, then close it cleanly or just
//! drop it, and start over; 10 more are child processes (this test binary re-run as
//! `soak_helper`) that run the same loop and report each acknowledged write on stdout,
//! and are killed after 0.2-3 s and replaced. The server runs with per-client limits
//! and `reclaim_programs`, so a killed client's memory and programs come back.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command as Process, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::{
    Command, CommandId, EngineKind, MemHandle, Op, ProgramIndex, ProgramState, ProgramType, Status,
};
use csx_host::transport::tcp::framing::ICReq;
use csx_host::{CallError, Device, ExecuteRequest};
use csx_server::{ClientLimits, ListenAddr, Server, ServerConfig, ServerOptions};

const SLM: u64 = 64 << 20;
const CLIENT_MEMORY: u64 = 4 << 20;
const THREAD_CLIENTS: usize = 22;
const CHILD_CLIENTS: usize = 10;
/// The program every client may run, loaded before the soak.
const SHARED_SLOT: u16 = 63;
/// A slot nobody loads.
const EMPTY_SLOT: u16 = 62;
const HELPER_ENV: &str = "CSX_SOAK_HELPER";

/// `mov r0, 0; exit`.
const RETURN_ZERO: [u8; 16] = [
    0xb7, 0, 0, 0, 0, 0, 0, 0, //
    0x95, 0, 0, 0, 0, 0, 0, 0,
];

/// xorshift64: enough randomness for choosing commands, reproducible from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The bytes of a file written with `seed`.
fn content(seed: u64, len: usize) -> Vec<u8> {
    csx_testkit::bytes::seeded(len, seed)
}

/// An acknowledged file write: path, seed, length.
type Ack = (String, u64, usize);

/// Whether a device error is one a valid command may meet under load from others.
fn busy(e: &CallError) -> bool {
    matches!(
        e.status(),
        Some(Status::InsufficientResources | Status::InsufficientProgramResources)
    )
}

/// One connection's life: random commands until `ops` are done or `until`.
/// `name` makes its paths unique; `slot` is the program slot it may load.
fn session(
    uri: &str,
    rng: &mut Rng,
    until: Instant,
    name: &str,
    slot: u16,
    ack: &mut dyn FnMut(Ack),
) {
    let dev = match Device::open(uri) {
        Ok(d) => d,
        // Every queue pair taken for a moment (a killed client's not yet reclaimed).
        Err(e) if e.to_string().contains("queue pairs") => return,
        Err(e) => panic!("{name}: cannot connect to {uri}: {e}"),
    };
    let mut handles: Vec<(MemHandle, u64)> = Vec::new();
    let mut written: Vec<Ack> = Vec::new();
    // Whether this session left a program in its slot.
    let mut slot_loaded = false;
    let ops = 1 + rng.below(120);
    for op in 0..ops {
        if Instant::now() >= until {
            break;
        }
        let what = rng.below(17);
        let ctx = || format!("{name} op {op} kind {what}");
        match what {
            0 | 1 => {
                let size = 64 + rng.below(512 << 10);
                match dev.alloc(size) {
                    Ok(h) => handles.push((h, size)),
                    Err(e) if busy(&e) => {}
                    Err(e) => panic!("{}: alloc: {e}", ctx()),
                }
            }
            2 => {
                if let Some((h, _)) = handles.pop() {
                    dev.free(h)
                        .unwrap_or_else(|e| panic!("{}: free: {e}", ctx()));
                }
            }
            3 => {
                if let Some(&(h, size)) = handles.last() {
                    let len = size.min(4096);
                    let data = content(rng.next(), len as usize);
                    dev.write_mem(h, 0, &data)
                        .unwrap_or_else(|e| panic!("{}: write_mem: {e}", ctx()));
                    let back = dev
                        .read_mem(h, 0, len)
                        .unwrap_or_else(|e| panic!("{}: read_mem: {e}", ctx()));
                    assert_eq!(back, data, "{}: memory reads back", ctx());
                }
            }
            4 | 5 => {
                let seed = rng.next();
                let len = rng.below(8192) as usize;
                let path = format!("/soak/{name}-{op}-{seed:x}");
                match dev.put_bytes(&path, &content(seed, len)) {
                    Ok(()) => {
                        ack((path.clone(), seed, len));
                        written.push((path, seed, len));
                    }
                    Err(e) if busy(&e) || e.status() == Some(Status::NoSpace) => {}
                    Err(e) => panic!("{}: put {path}: {e}", ctx()),
                }
            }
            6 => {
                if let Some((path, seed, len)) = written.last() {
                    let back = dev
                        .read_file(path, 0, *len as u64)
                        .unwrap_or_else(|e| panic!("{}: read {path}: {e}", ctx()));
                    assert_eq!(back, content(*seed, *len), "{}: {path} reads back", ctx());
                }
            }
            7 => {
                let ex = dev
                    .execute(&ExecuteRequest::new(ProgramIndex(SHARED_SLOT)).fuel(1000))
                    .unwrap_or_else(|e| panic!("{}: execute the shared program: {e}", ctx()));
                assert_eq!(ex.r0, 0, "{}", ctx());
            }
            8 => {
                let pind = ProgramIndex(slot);
                if slot_loaded {
                    dev.unload(pind)
                        .unwrap_or_else(|e| panic!("{}: unload before loading: {e}", ctx()));
                    slot_loaded = false;
                }
                match dev.load_program(pind, ProgramType::Raw, &RETURN_ZERO, None) {
                    Ok(()) => {}
                    Err(e) if busy(&e) => continue,
                    // The last session's program, not yet reclaimed by the server.
                    Err(e) if e.status() == Some(Status::ProgramInUse) => continue,
                    Err(e) => panic!("{}: load slot {slot}: {e}", ctx()),
                }
                let engine = if rng.below(2) == 0 {
                    EngineKind::Interpreter
                } else {
                    EngineKind::Jit
                };
                dev.activate(pind, engine)
                    .unwrap_or_else(|e| panic!("{}: activate: {e}", ctx()));
                let ex = dev
                    .execute(&ExecuteRequest::new(pind).fuel(1000))
                    .unwrap_or_else(|e| panic!("{}: execute: {e}", ctx()));
                assert_eq!(ex.r0, 0);
                // Sometimes left loaded: the reclaim at disconnect must unload it.
                if rng.below(3) > 0 {
                    dev.unload(pind)
                        .unwrap_or_else(|e| panic!("{}: unload: {e}", ctx()));
                } else {
                    slot_loaded = true;
                }
            }
            // Invalid commands: each must fail, and the connection must go on.
            9 => {
                assert!(
                    dev.free(MemHandle(0xdead_0000 + rng.below(1000) as u32))
                        .is_err(),
                    "{}",
                    ctx()
                );
            }
            10 => {
                if let Some(&(h, len)) = handles.last() {
                    assert!(dev.read_mem(h, len, 4096).is_err(), "{}", ctx());
                }
            }
            11 => {
                // Over the per-client limit whatever the client holds.
                let e = dev.alloc(CLIENT_MEMORY + 64).unwrap_err();
                assert_eq!(
                    e.status(),
                    Some(Status::InsufficientResources),
                    "{}: {e}",
                    ctx()
                );
            }
            12 => {
                let garbage = content(rng.next(), 8 * (1 + rng.below(8) as usize));
                let pind = ProgramIndex(slot);
                if slot_loaded {
                    continue;
                }
                if dev
                    .load_program(pind, ProgramType::Raw, &garbage, None)
                    .is_ok()
                {
                    // Loaded bytes need not verify; activation decides.
                    let _ = dev.activate(pind, EngineKind::Interpreter);
                    let _ = dev.unload(pind);
                }
            }
            13 => {
                let e = dev
                    .execute(&ExecuteRequest::new(ProgramIndex(EMPTY_SLOT)))
                    .unwrap_err();
                assert!(e.status().is_some(), "{}: {e}", ctx());
            }
            14 => {
                assert!(
                    dev.read_file("/soak/no/such/file", 0, 1).is_err(),
                    "{}",
                    ctx()
                );
                assert!(dev.delete_file("/soak/no/such/file").is_err(), "{}", ctx());
            }
            15 => {
                let i = dev
                    .identify()
                    .unwrap_or_else(|e| panic!("{}: identify: {e}", ctx()));
                assert_eq!(i.slm_size_bytes, SLM);
            }
            _ => {
                if let Some(addr) = uri.strip_prefix("tcp://") {
                    garbage_connection(addr, rng);
                }
            }
        }
    }
    match rng.below(3) {
        0 => {
            for (h, _) in handles {
                dev.free(h)
                    .unwrap_or_else(|e| panic!("{name}: free at the end: {e}"));
            }
            dev.close().unwrap_or_else(|e| panic!("{name}: close: {e}"));
        }
        1 => dev.close().unwrap_or_else(|e| panic!("{name}: close: {e}")),
        // Dropped: the transport goes without the device hearing a goodbye first.
        _ => drop(dev),
    }
}

/// A raw tcp connection that sends random bytes, sometimes after a valid handshake.
fn garbage_connection(addr: &str, rng: &mut Rng) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut bytes = Vec::new();
    if rng.below(2) == 0 {
        bytes.extend_from_slice(
            &ICReq {
                queue_depth: 4,
                token: Vec::new(),
            }
            .encode(),
        );
    }
    bytes.extend(content(rng.next(), rng.below(300) as usize));
    let _ = s.write_all(&bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    // The server answers and closes, or closes: either way the read ends.
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
}

/// Run by the child processes (see the module doc).
#[test]
fn soak_helper() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return; // An ordinary test run: nothing to do.
    };
    let mut parts = spec.split(' ');
    let (uri, seed, slot) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().parse::<u64>().unwrap(),
        parts.next().unwrap().parse::<u16>().unwrap(),
    );
    let mut rng = Rng(seed | 1);
    let until = Instant::now() + Duration::from_secs(600);
    let mut n = 0;
    let stdout = std::io::stdout();
    loop {
        let name = format!("child{seed:x}-{n}");
        session(&uri, &mut rng, until, &name, slot, &mut |(
            path,
            seed,
            len,
        )| {
            let mut out = stdout.lock();
            // "end" marks a whole line: a kill may cut the last one.
            writeln!(out, "ack {path} {seed} {len} end").unwrap();
            out.flush().unwrap();
        });
        n += 1;
    }
}

fn serve(dir: &std::path::Path) -> (Server, Vec<String>) {
    let device = DeviceRuntime::open(dir).expect("the device opens");
    let config = ServerConfig {
        listen: vec![
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenAddr::Shm(format!("csx-soak-{}", std::process::id())),
        ],
        token: None,
    };
    let options = ServerOptions::new()
        .limits(ClientLimits {
            memory_bytes: CLIENT_MEMORY,
            queued_commands: 64,
            program_slots: 2,
            reply_bytes: csx_server::CLIENT_REPLY_BYTES_DEFAULT,
        })
        .reclaim_programs(true);
    let server = Server::start_with(device, config, options).expect("serves");
    let uris = server.uris().to_vec();
    (server, uris)
}

/// Free SLM and the program slots (index and state), as `csx info` shows them.
fn resources(uri: &str) -> (u64, Vec<(u16, ProgramState)>) {
    let dev = Device::open(uri).expect("an observer connects");
    let free = dev.identify().expect("identify").slm_free_bytes;
    let mut slots: Vec<_> = dev
        .programs()
        .expect("programs")
        .into_iter()
        .map(|p| (p.pind.0, p.state))
        .collect();
    slots.sort_by_key(|s| s.0);
    dev.close().expect("the observer closes");
    (free, slots)
}

fn spawn_child(uri: &str, seed: u64, slot: u16, acks: &Arc<Mutex<Vec<Ack>>>) -> Child {
    let mut child = Process::new(std::env::current_exe().unwrap())
        .args(["--exact", "soak_helper", "--nocapture", "--test-threads=1"])
        .env(HELPER_ENV, format!("{uri} {seed} {slot}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("a helper starts");
    let out = child.stdout.take().unwrap();
    let acks = Arc::clone(acks);
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let f: Vec<&str> = line.split(' ').collect();
            if let ["ack", path, seed, len, "end"] = f[..] {
                let ack = (
                    path.to_string(),
                    seed.parse().unwrap(),
                    len.parse().unwrap(),
                );
                acks.lock().unwrap().push(ack);
            }
        }
    });
    child
}

fn check_files(uri: &str, acks: &[Ack]) {
    let dev = Device::open(uri).expect("a checker connects");
    for (path, seed, len) in acks {
        let info = dev
            .stat(path)
            .unwrap_or_else(|e| panic!("acknowledged {path} is gone: {e}"));
        assert_eq!(info.size_bytes, *len as u64, "{path}: size");
        let back = dev
            .read_file(path, 0, *len as u64)
            .unwrap_or_else(|e| panic!("acknowledged {path} does not read: {e}"));
        assert!(
            back == content(*seed, *len),
            "{path}: acknowledged bytes changed"
        );
    }
    dev.close().unwrap();
}

#[test]
fn soak_32_clients_with_kills_reclaims_everything() {
    let seconds: u64 = std::env::var("CSX_SOAK_SECONDS")
        .ok()
        .map(|s| s.parse().expect("CSX_SOAK_SECONDS is a number of seconds"))
        .unwrap_or(40);
    let seed0: u64 = std::env::var("CSX_SOAK_SEED")
        .ok()
        .map(|s| s.parse().expect("CSX_SOAK_SEED is a number"))
        .unwrap_or(0x5eed);
    let dir = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        nvm_size_bytes: 256 << 20,
        slm_size_bytes: SLM,
        state_size_bytes: 1 << 20,
        engines: Some(2),
        ..DeviceConfig::default()
    };
    {
        // The shared program, loaded before any client (so it is not any client's).
        let device = DeviceRuntime::init(dir.path(), config).unwrap();
        let qp = device.queue_pair(4).unwrap();
        let pind = ProgramIndex(SHARED_SLOT);
        for (i, op) in [
            Op::LoadProgram {
                pind,
                ptype: ProgramType::Raw,
                total_size_bytes: RETURN_ZERO.len() as u32,
                offset: 0,
                data: RETURN_ZERO.to_vec(),
                entry: None,
            },
            Op::ActivateProgram {
                pind,
                engine: EngineKind::Interpreter,
            },
            // Kept after this queue pair goes (and across the restart).
            Op::PersistProgram {
                pind,
                name: "shared".into(),
            },
        ]
        .into_iter()
        .enumerate()
        {
            let c = qp.call(Command::new(CommandId(i as u64), op)).unwrap();
            assert_eq!(c.status, Status::Success, "{c:?}");
        }
        drop(qp);
        device.close().unwrap();
    }
    let (server, uris) = serve(dir.path());
    let (tcp, shm) = (uris[0].clone(), uris[1].clone());
    let start = resources(&tcp);
    eprintln!("soak: {seconds} s, seed {seed0:#x}, start: {start:?}");
    let until = Instant::now() + Duration::from_secs(seconds);
    let acks: Arc<Mutex<Vec<Ack>>> = Arc::new(Mutex::new(Vec::new()));

    let threads: Vec<_> = (0..THREAD_CLIENTS)
        .map(|i| {
            let uri = if i.is_multiple_of(2) {
                tcp.clone()
            } else {
                shm.clone()
            };
            let acks = Arc::clone(&acks);
            std::thread::Builder::new()
                .name(format!("soak-{i}"))
                .spawn(move || {
                    let mut rng = Rng((seed0 + i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                    let mut n = 0;
                    while Instant::now() < until {
                        let name = format!("t{i}-{n}");
                        session(&uri, &mut rng, until, &name, i as u16, &mut |a| {
                            acks.lock().unwrap().push(a)
                        });
                        n += 1;
                    }
                    n
                })
                .unwrap()
        })
        .collect();

    // The child clients: killed at random, replaced until the end.
    let mut rng = Rng(seed0.wrapping_mul(31) | 1);
    let mut children: Vec<(Child, Instant)> = Vec::new();
    let mut spawned = 0u64;
    let mut killed = 0u64;
    let mut next_seed = seed0 << 8;
    let mut spawn = |rng: &mut Rng, k: usize| {
        next_seed += 1;
        let uri = if k.is_multiple_of(2) { &tcp } else { &shm };
        let child = spawn_child(uri, next_seed, (THREAD_CLIENTS + k) as u16, &acks);
        (
            child,
            Instant::now() + Duration::from_millis(200 + rng.below(2800)),
        )
    };
    for k in 0..CHILD_CLIENTS {
        children.push(spawn(&mut rng, k));
        spawned += 1;
    }
    while Instant::now() < until {
        for (k, (child, kill_at)) in children.iter_mut().enumerate() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("soak child {k} died on its own: {status}");
            }
            if Instant::now() >= *kill_at {
                child.kill().unwrap();
                child.wait().unwrap();
                killed += 1;
                let (c, at) = spawn(&mut rng, k);
                *child = c;
                *kill_at = at;
                spawned += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for (mut child, _) in children {
        let _ = child.kill();
        let _ = child.wait();
        killed += 1;
    }
    let mut sessions = 0;
    for t in threads {
        sessions += t.join().expect("a soak client panicked");
    }

    // Every client is gone: the server settles to no connection, everything back.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.status().clients_connected > 0 {
        assert!(
            Instant::now() < deadline,
            "clients still connected: {:?}",
            server.status()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let end = resources(&shm);
    let acks = acks.lock().unwrap().clone();
    let status = server.status();
    eprintln!(
        "soak: {sessions} thread sessions, {spawned} child clients ({killed} killed), \
         {} connections, {} refused, {} commands, {} acknowledged writes; end: {end:?}",
        status.clients_total,
        status.clients_refused,
        status.commands_served,
        acks.len()
    );
    assert_eq!(end, start, "free SLM and program slots as at the start");
    assert!(killed >= CHILD_CLIENTS as u64 && !acks.is_empty());
    let mut latest: HashMap<&str, &Ack> = HashMap::new();
    for a in &acks {
        latest.insert(&a.0, a);
    }
    check_files(&tcp, &acks);
    server.shutdown().expect("a clean shutdown");

    // After a restart too.
    let (server, uris) = serve(dir.path());
    check_files(&uris[0], &acks);
    assert_eq!(resources(&uris[0]), start);
    server.shutdown().unwrap();
}
