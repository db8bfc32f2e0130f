//! The daemon's guards against its own clients: authentication before any command on
//! tcp, and the per-client limits (memory, program slots, commands in flight) that keep
//! one client from starving the others; with `reclaim_programs`, a departed client's
//! programs unloaded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use csx_device::{DeviceConfig, DeviceRuntime};
use csx_host::proto::{encode_command, Command, CommandId, Op, ProgramIndex, ProgramType, Status};
use csx_host::transport::tcp::framing::{
    command_capsule_header, decode_header, ConnectStatus, ICReq, ICResp, PduType, TermReq,
    PDU_HEADER_SIZE,
};
use csx_host::transport::tcp::{TcpOptions, TcpTransport};
use csx_host::transport::Transport;
use csx_host::{CallError, Device};
use csx_server::{ClientLimits, ListenAddr, Server, ServerConfig, ServerOptions};

mod common;
use common::tls_files;

const SLM: u64 = 64 << 20;

/// `mov r0, 0; exit`: the smallest program that verifies.
const RETURN_ZERO: [u8; 16] = [
    0xb7, 0, 0, 0, 0, 0, 0, 0, //
    0x95, 0, 0, 0, 0, 0, 0, 0,
];

fn serve(kind: &str, token: Option<&[u8]>, options: ServerOptions) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: SLM,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let device = DeviceRuntime::init(dir.path(), config).expect("init");
    let listen = match kind {
        "tcp" => ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
        _ => ListenAddr::Shm(format!("csx-hardening-{}-{}", std::process::id(), unique())),
    };
    let config = ServerConfig {
        listen: vec![listen],
        token: token.map(<[u8]>::to_vec),
    };
    let server = Server::start_with(device, config, options).expect("serves");
    (dir, server)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn limits(memory_bytes: u64, program_slots: u16, queued_commands: u32) -> ServerOptions {
    ServerOptions::new().limits(ClientLimits {
        memory_bytes,
        program_slots,
        queued_commands,
        reply_bytes: csx_server::CLIENT_REPLY_BYTES_DEFAULT,
    })
}

/// Reads one PDU, `None` at the end of the stream.
fn read_pdu(s: &mut TcpStream) -> Option<(PduType, Vec<u8>)> {
    let mut h = [0u8; PDU_HEADER_SIZE];
    if s.read_exact(&mut h).is_err() {
        return None;
    }
    let header = decode_header(&h, 64 << 20).expect("the server frames correctly");
    let mut body = vec![0u8; header.plen as usize - PDU_HEADER_SIZE];
    s.read_exact(&mut body).expect("a whole pdu");
    Some((header.pdu_type, body))
}

fn identify_capsule(queue_id: u32) -> Vec<u8> {
    let frame = encode_command(&Command::new(CommandId(7), Op::Identify)).unwrap();
    let mut out = command_capsule_header(queue_id, 0, frame.len()).to_vec();
    out.extend_from_slice(&frame);
    out
}

fn assert_closed(s: &mut TcpStream) {
    let mut rest = Vec::new();
    // The server closes: the read ends (0 bytes or a reset), it does not time out.
    match s.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => assert!(
            e.kind() == std::io::ErrorKind::ConnectionReset,
            "the connection was not closed: {e}"
        ),
    }
}

#[test]
fn a_command_before_authentication_is_refused_and_the_connection_closed() {
    let (_dir, server) = serve("tcp", Some(b"s3cret"), ServerOptions::new());
    let addr = server.uris()[0].strip_prefix("tcp://").unwrap().to_string();

    // A command capsule where the connect request belongs.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&identify_capsule(0)).unwrap();
    let (t, body) = read_pdu(&mut s).expect("a termination request");
    assert_eq!(t, PduType::C2HTermReq);
    let term = TermReq::decode(&body).unwrap();
    assert!(
        term.message.contains("before the connect request"),
        "{}",
        term.message
    );
    assert_closed(&mut s);

    // A wrong token, then a command anyway: refused, closed, the command never runs.
    for token in [Vec::new(), b"wrong".to_vec(), b"s3cre".to_vec()] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut bytes = ICReq {
            queue_depth: 4,
            token,
        }
        .encode();
        bytes.extend_from_slice(&identify_capsule(1));
        s.write_all(&bytes).unwrap();
        let (t, body) = read_pdu(&mut s).expect("a connect response");
        assert_eq!(t, PduType::ICResp);
        assert_eq!(
            ICResp::decode(&body).unwrap().status,
            ConnectStatus::AuthFailed
        );
        assert!(read_pdu(&mut s).is_none(), "nothing follows a refusal");
        assert_closed(&mut s);
    }
    assert_eq!(server.status().commands_served, 0, "no command ran");
    assert_eq!(server.status().clients_refused, 4);
    assert_eq!(server.status().clients_total, 0);

    // The right token works.
    let options = TcpOptions {
        queue_depth: 4,
        token: Some(b"s3cret".to_vec()),
    };
    let t = TcpTransport::connect(&addr, &options).expect("the right token connects");
    t.submit(Command::new(CommandId(1), Op::Identify)).unwrap();
    let c = t
        .reap(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("a completion");
    assert_eq!(c.status, Status::Success);
    Box::new(t).close().unwrap();
    server.shutdown().unwrap();
}

#[test]
fn a_silent_connection_is_dropped_after_the_handshake_timeout() {
    let (_dir, server) = serve("tcp", Some(b"s3cret"), ServerOptions::new());
    let addr = server.uris()[0].strip_prefix("tcp://").unwrap().to_string();
    // Half a connect request, then a byte every second: the handshake has one deadline
    // in all, so trickling bytes cannot hold a connection thread.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = ICReq {
        queue_depth: 4,
        token: b"s3cret".to_vec(),
    }
    .encode();
    let start = Instant::now();
    for b in &req[..req.len() - 1] {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        if start.elapsed() > csx_host::transport::tcp::HANDSHAKE_TIMEOUT + Duration::from_secs(3) {
            break;
        }
    }
    assert_closed(&mut s);
    let waited = start.elapsed();
    assert!(
        waited < csx_host::transport::tcp::HANDSHAKE_TIMEOUT + Duration::from_secs(3),
        "the trickling connection lived {waited:?}"
    );
    server.shutdown().unwrap();
}

fn status_of(e: &CallError) -> Option<Status> {
    e.status()
}

#[test]
fn one_client_cannot_hold_more_memory_than_its_limit() {
    for kind in ["tcp", "shm"] {
        let (_dir, server) = serve(kind, None, limits(1 << 20, 4, 64));
        let uri = server.uris()[0].clone();
        let a = Device::open(&uri).unwrap();
        let h1 = a.alloc(512 << 10).unwrap();
        let _h2 = a.alloc(512 << 10).unwrap();
        let e = a.alloc(64).unwrap_err();
        assert_eq!(
            status_of(&e),
            Some(Status::InsufficientResources),
            "{kind}: {e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("client memory limit") && text.contains("1048576"),
            "{kind}: {text}"
        );
        // Another client still gets its share.
        let b = Device::open(&uri).unwrap();
        let hb = b.alloc(1 << 20).unwrap();
        // Freeing makes room again.
        a.free(h1).unwrap();
        let h3 = a.alloc(256 << 10).unwrap();
        a.free(h3).unwrap();
        b.free(hb).unwrap();
        a.close().unwrap();
        b.close().unwrap();
        let check = Device::open(&uri).unwrap();
        assert_eq!(check.identify().unwrap().slm_free_bytes, SLM, "{kind}");
        check.close().unwrap();
        server.shutdown().unwrap();
    }
}

#[test]
fn one_client_cannot_hold_more_program_slots_than_its_limit() {
    for kind in ["tcp", "shm"] {
        let (_dir, server) = serve(kind, None, limits(1 << 20, 2, 64));
        let uri = server.uris()[0].clone();
        let a = Device::open(&uri).unwrap();
        let load = |d: &Device, p: u16| {
            d.load_program(ProgramIndex(p), ProgramType::Raw, &RETURN_ZERO, None)
        };
        load(&a, 0).unwrap();
        load(&a, 1).unwrap();
        // Reloading a slot it holds is not a new slot.
        a.unload(ProgramIndex(1)).unwrap();
        load(&a, 1).unwrap();
        let e = load(&a, 2).unwrap_err();
        assert_eq!(
            status_of(&e),
            Some(Status::InsufficientProgramResources),
            "{kind}: {e}"
        );
        assert!(
            e.to_string().contains("client program slot limit"),
            "{kind}: {e}"
        );
        let b = Device::open(&uri).unwrap();
        load(&b, 2).unwrap();
        load(&b, 3).unwrap();
        // Another client may not unload a's program (it could put its own program
        // where a's next run would hand it a's memory); a's own unload frees its count.
        let e = b.unload(ProgramIndex(0)).unwrap_err();
        assert_eq!(status_of(&e), Some(Status::ProgramInUse), "{kind}: {e}");
        assert!(
            e.to_string().contains("only its loader may unload it"),
            "{kind}: {e}"
        );
        assert!(load(&a, 4).is_err(), "{kind}: a still holds two slots");
        a.unload(ProgramIndex(0)).unwrap();
        load(&a, 4).unwrap();
        for p in [1, 4] {
            a.unload(ProgramIndex(p)).unwrap();
        }
        for p in [2, 3] {
            b.unload(ProgramIndex(p)).unwrap();
        }
        a.close().unwrap();
        b.close().unwrap();
        server.shutdown().unwrap();
    }
}

#[test]
fn the_queue_depth_granted_is_capped_by_the_client_limit() {
    let (_dir, server) = serve("tcp", None, limits(1 << 20, 2, 8));
    let addr = server.uris()[0].strip_prefix("tcp://").unwrap().to_string();
    let options = TcpOptions {
        queue_depth: 256,
        token: None,
    };
    let t = TcpTransport::connect(&addr, &options).unwrap();
    assert_eq!(t.queue_depth(), 8);
    Box::new(t).close().unwrap();
    server.shutdown().unwrap();
}

#[test]
fn the_programs_of_a_departed_client_are_reclaimed_when_asked() {
    for kind in ["tcp", "shm"] {
        let (_dir, server) = serve(kind, None, ServerOptions::new().reclaim_programs(true));
        let uri = server.uris()[0].clone();
        let a = Device::open(&uri).unwrap();
        a.load_program(ProgramIndex(5), ProgramType::Raw, &RETURN_ZERO, None)
            .unwrap();
        a.activate(ProgramIndex(5), csx_host::proto::EngineKind::Interpreter)
            .unwrap();
        a.load_program(ProgramIndex(6), ProgramType::Raw, &RETURN_ZERO, None)
            .unwrap();
        // Dropped without unloading, as a killed client would.
        drop(a);
        let check = Device::open(&uri).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check.programs().unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "{kind}: programs left: {:?}",
                check.programs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        check.close().unwrap();
        server.shutdown().unwrap();
    }
}

#[test]
fn tls_carries_commands_and_refuses_plain_and_untrusted_peers() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(certs.path());
    let dir = tempfile::tempdir().expect("temp dir");
    let config = DeviceConfig {
        nvm_size_bytes: 16 << 20,
        slm_size_bytes: SLM,
        state_size_bytes: 1 << 20,
        engines: Some(1),
        ..DeviceConfig::default()
    };
    let device = DeviceRuntime::init(dir.path(), config).expect("init");
    let config = ServerConfig {
        listen: vec![ListenAddr::parse("tcps://127.0.0.1:0").unwrap()],
        token: Some(b"s3cret".to_vec()),
    };
    let server = Server::start_with(device, config, ServerOptions::new().tls(cert, key))
        .expect("serves tls");
    let uri = server.uris()[0].clone();
    assert!(uri.starts_with("tcps://127.0.0.1:"), "{uri}");
    let addr = uri.strip_prefix("tcps://").unwrap().to_string();
    let options = TcpOptions {
        queue_depth: 8,
        token: Some(b"s3cret".to_vec()),
    };

    // A TLS client trusting the CA: commands and bulk data both ways.
    let trusted = csx_host::transport::tcp::conn::tls::client_config(&ca).unwrap();
    let t = TcpTransport::connect_tls(&addr, &options, trusted.clone()).expect("tls connects");
    let dev = Device::with_client(
        csx_host::Client::new(Box::new(t)),
        csx_host::DeviceUri::parse(&uri).unwrap(),
    );
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
    dev.put_bytes("/tls/file", &data).unwrap();
    assert_eq!(
        dev.read_file("/tls/file", 0, data.len() as u64).unwrap(),
        data
    );
    let h = dev.alloc(1 << 20).unwrap();
    dev.write_mem(h, 0, &data[..1 << 20]).unwrap();
    assert_eq!(dev.read_mem(h, 0, 1 << 20).unwrap(), &data[..1 << 20]);
    dev.free(h).unwrap();
    dev.close().unwrap();

    // Through the URI, as `csx --device tcps://...` opens it: CSX_TLS_CA names the CA
    // (no other test of this binary reads it; a token given to a server without one
    // is ignored, so CSX_TOKEN_FILE does not disturb the others either).
    let token_file = certs.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    std::env::set_var(csx_host::transport::tcp::TLS_CA_FILE_ENV, &ca);
    std::env::set_var(csx_host::transport::tcp::TOKEN_FILE_ENV, &token_file);
    let dev = Device::open(&uri).expect("tcps:// opens with CSX_TLS_CA");
    assert_eq!(dev.uri().to_string(), uri);
    assert_eq!(dev.read_file("/tls/file", 0, 10).unwrap(), &data[..10]);
    dev.close().unwrap();

    // The token is still checked inside TLS.
    let no_token = TcpOptions {
        queue_depth: 8,
        token: None,
    };
    let e = TcpTransport::connect_tls(&addr, &no_token, trusted).unwrap_err();
    assert!(e.to_string().contains("AuthFailed"), "{e}");

    // A plain tcp client gets no connection.
    assert!(TcpTransport::connect(&addr, &options).is_err());

    // A client that does not trust the server's CA refuses it.
    let other = tempfile::tempdir().unwrap();
    let (other_ca, _, _) = tls_files(other.path());
    let untrusting = csx_host::transport::tcp::conn::tls::client_config(&other_ca).unwrap();
    let e = TcpTransport::connect_tls(&addr, &options, untrusting).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    server.shutdown().unwrap();
}
