//! The target functions (see the crate doc). Each states the invariant it checks.

use std::io::{self, Read};
use std::sync::Arc;

use csx_ebpf::loader::{list_programs, load_elf, load_raw, undefined_functions};
use csx_ebpf::verifier::verify;
use csx_host::transport::shm::framing::{Cqe, Hello, Layout, Sqe, SqeFrame, Welcome, LAYOUT_SIZE};
use csx_host::transport::shm::{CQE_SIZE, SQE_SIZE};
use csx_host::transport::tcp::framing::{
    decode_command_capsule, decode_data, decode_response_capsule, ICReq, ICResp, PduReader,
    PduType, TermReq, ICREQ_SIZE_MAX, PDU_HEADER_SIZE,
};
use csx_proto::wire::{
    decode_command, decode_command_header, decode_completion, encode_command, encode_completion,
};
use csx_testkit::gen::{self, GenCase};

/// Command and completion frames: decoding never panics, and a frame that decodes
/// re-encodes to one that decodes to the same value.
pub fn wire(data: &[u8]) {
    let _ = decode_command_header(data);
    command_frame(data);
    completion_frame(data);
}

fn command_frame(frame: &[u8]) {
    let Ok(cmd) = decode_command(frame) else {
        return;
    };
    let again = encode_command(&cmd)
        .unwrap_or_else(|e| panic!("decoded command {cmd:?} does not re-encode: {e}"));
    let back = decode_command(&again)
        .unwrap_or_else(|e| panic!("re-encoded command {cmd:?} does not decode: {e}"));
    assert_eq!(back, cmd, "command changed through re-encoding");
}

fn completion_frame(frame: &[u8]) {
    let Ok(c) = decode_completion(frame) else {
        return;
    };
    let again = encode_completion(&c)
        .unwrap_or_else(|e| panic!("decoded completion {c:?} does not re-encode: {e}"));
    let back = decode_completion(&again)
        .unwrap_or_else(|e| panic!("re-encoded completion {c:?} does not decode: {e}"));
    assert_eq!(back, c, "completion changed through re-encoding");
}

/// A `Read` that hands out `bytes` in pieces of sizes drawn from `seed`, as a socket
/// does.
struct Pieces<'a> {
    bytes: &'a [u8],
    seed: u32,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.seed = self.seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let want = 1 + (self.seed >> 16) as usize % 97;
        let n = want.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// The tcp transport's reader and PDU decoders, as a device's connection uses them: the
/// first byte seeds how the rest arrives in pieces; the reader first takes a connect
/// request's length, then the connection's. Never panics, always ends (each fill makes
/// progress or the stream ends), and every control PDU that decodes re-encodes to
/// itself.
pub fn tcp_pdu(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let mut reader = PduReader::new(ICREQ_SIZE_MAX);
    let mut source = Pieces {
        bytes: stream,
        seed: u32::from(seed),
    };
    // Each round consumes a byte or a PDU, or ends the loop.
    let rounds_max = 4 * stream.len() + 16;
    for _ in 0..rounds_max {
        loop {
            let pdu = match reader.next_pdu() {
                Ok(Some(pdu)) => pdu,
                Ok(None) => break,
                Err(_) => return,
            };
            let (t, body) = (pdu.header.pdu_type, pdu.body);
            assert_eq!(body.len() + PDU_HEADER_SIZE, pdu.header.plen as usize);
            pdu_body(t, body);
            // After the handshake the connection takes longer PDUs.
            reader.set_plen_max(csx_host::transport::tcp::COMMAND_CAPSULE_SIZE_MAX + 64);
        }
        match reader.fill(&mut source) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => panic!("reading from a slice failed: {e}"),
        }
    }
    panic!("the pdu reader made no progress in {rounds_max} rounds");
}

fn pdu_body(t: PduType, body: &[u8]) {
    match t {
        PduType::ICReq => {
            if let Ok(req) = ICReq::decode(body) {
                let enc = req.encode();
                assert_eq!(ICReq::decode(&enc[PDU_HEADER_SIZE..]).as_ref(), Ok(&req));
            }
        }
        PduType::ICResp => {
            if let Ok(resp) = ICResp::decode(body) {
                let enc = resp.encode();
                assert_eq!(ICResp::decode(&enc[PDU_HEADER_SIZE..]).as_ref(), Ok(&resp));
            }
        }
        PduType::H2CTermReq | PduType::C2HTermReq => {
            let _ = TermReq::decode(body);
        }
        PduType::CapsuleCmd => {
            let cap = decode_command_capsule(body);
            command_frame(cap.frame);
        }
        PduType::CapsuleResp => {
            if let Ok(cap) = decode_response_capsule(body) {
                completion_frame(cap.frame);
            }
        }
        PduType::H2CData | PduType::C2HData => {
            if let Ok(d) = decode_data(body) {
                assert!(d.data.len() <= body.len());
            }
        }
        // The common header alone: nothing more to decode.
        PduType::C2HKeepAlive => {}
    }
}

/// The shm transport's fixed-size records read from shared memory or the handshake
/// socket: submission and completion entries at every entry-sized window of the input,
/// the hello, the welcome and the control page. Never panics; what decodes re-encodes
/// to itself, and an inline command frame goes through the wire decoder.
pub fn shm_entries(data: &[u8]) {
    for sqe in data.chunks_exact(SQE_SIZE) {
        let sqe: &[u8; SQE_SIZE] = sqe.try_into().expect("an entry-sized chunk");
        if let Ok(e) = Sqe::decode(sqe) {
            assert_eq!(Sqe::decode(&e.encode()).as_ref(), Ok(&e));
            if let SqeFrame::Inline(frame) = &e.frame {
                command_frame(frame);
            }
        }
    }
    for cqe in data.chunks_exact(CQE_SIZE) {
        let cqe: &[u8; CQE_SIZE] = cqe.try_into().expect("an entry-sized chunk");
        if let Ok(e) = Cqe::decode(cqe) {
            assert_eq!(Cqe::decode(&e.encode()).as_ref(), Ok(&e));
            completion_frame(&e.inline);
        }
    }
    if let Ok(h) = Hello::decode(data.get(..32).unwrap_or(data)) {
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
    }
    if let Ok(w) = Welcome::decode(data) {
        let again = Welcome::decode(&w.encode()).expect("a decoded welcome re-encodes");
        assert_eq!(again.status, w.status);
        assert_eq!(again.queue_depth, w.queue_depth);
    }
    if let Some(page) = data.get(..LAYOUT_SIZE) {
        let page: &[u8; LAYOUT_SIZE] = page.try_into().expect("a page-sized slice");
        let region = data
            .get(LAYOUT_SIZE..LAYOUT_SIZE + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if let Ok(l) = Layout::decode(page, region) {
            // A layout that decodes lies inside its region, rings before the heap.
            assert_eq!(l.region_bytes(), region);
            assert!(l.sq_offset < l.cq_offset && l.cq_offset <= l.heap_offset);
            assert_eq!(Layout::decode(&l.encode(), region), Ok(l));
        }
    }
}

/// ELF objects: the loader never panics; what loads goes through the verifier, and
/// what verifies runs the same on the interpreter and the JIT.
pub fn elf(data: &[u8]) {
    let table = gen::function_table();
    let _ = list_programs(data);
    let _ = undefined_functions(data);
    let Ok(program) = load_elf(data, None, &table) else {
        return;
    };
    if verify(program.clone(), Arc::new(table)).is_ok() {
        run_both(program, &[]);
    }
}

/// Raw bytecode (after a 16-byte header of memory contents and arguments): the verifier
/// never panics, and every program it accepts runs on both engines without crashing the
/// host and with the same result, fuel and memory. This is the verifier's soundness
/// check: an accepted program that reaches outside its memory shows as a crash of the
/// JIT's code or a difference from the interpreter, whose every access is checked.
pub fn verifier(data: &[u8]) {
    let (head, code) = data.split_at(data.len().min(16));
    let code = &code[..code.len() - code.len() % 8];
    let Ok(program) = load_raw("fuzz", code) else {
        return;
    };
    if verify(program.clone(), Arc::new(gen::function_table())).is_ok() {
        run_both(program, head);
    }
}

fn run_both(program: csx_ebpf::program::Program, head: &[u8]) {
    let byte = |i: usize| head.get(i).copied().unwrap_or(0);
    let case = GenCase {
        program,
        data: (0..64).map(|i| byte(i % 8).wrapping_add(i as u8)).collect(),
        rodata: (0..32).map(|i| byte(8 + i % 4) ^ i as u8).collect(),
        extra_args: [u64::from(byte(12)), u64::from(byte(13)) << 32],
        fuel: 1 + u64::from(byte(14)) * 64,
    };
    if let Err(e) = gen::differential(&case) {
        panic!("{e}");
    }
}

/// The interpreter against the JIT on generated verifiable programs.
pub fn jit_differential(data: &[u8]) {
    gen::check_bytes(data);
}
