//! PDUs of the TCP transport: layouts, encoding, and an incremental reader (byte tables
//! in `docs/design/tcp.md`).
//!
//! Every PDU starts with an 8-byte common header (type, flags, reserved, total length),
//! as NVMe/TCP's; the type-specific header and the payload follow. Little-endian
//! throughout.
//!
//! Invariants: [`PduReader`] checks each PDU's length against its limit before it
//! grows its buffer for it, so a peer can make it hold at most one PDU of the limit;
//! every decoder checks every length against the bytes present and its limit, and
//! reserved fields are zero.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::{
    PDU_FORMAT_VERSION, PDU_MESSAGE_SIZE_MAX, SOCKET_POLL, SOCKET_POLL_BUSY, TOKEN_SIZE_MAX,
};
use crate::transport::framing::{clip_message, u16_at, u32_at, u64_at};
use crate::transport::sys::DontWait;

/// Bytes of the common header.
pub const PDU_HEADER_SIZE: usize = 8;

/// Bytes of the ICReq header after the common header.
pub const ICREQ_PSH_SIZE: usize = 16;
/// Bytes of the ICResp header after the common header.
pub const ICRESP_PSH_SIZE: usize = 20;
/// Bytes of a termination request's header after the common header.
pub const TERM_PSH_SIZE: usize = 8;
/// Bytes of a capsule's header after the common header.
pub const CAPSULE_PSH_SIZE: usize = 8;
/// Bytes of a data PDU's header after the common header.
pub const DATA_PSH_SIZE: usize = 16;

/// The largest ICReq: a full token.
pub const ICREQ_SIZE_MAX: usize = PDU_HEADER_SIZE + ICREQ_PSH_SIZE + TOKEN_SIZE_MAX;
/// The largest ICResp or termination request: a full message.
pub const CONTROL_PDU_SIZE_MAX: usize = PDU_HEADER_SIZE + ICRESP_PSH_SIZE + PDU_MESSAGE_SIZE_MAX;

/// The magic at the start of an ICReq: "CSXT".
pub const ICREQ_MAGIC: u32 = u32::from_le_bytes(*b"CSXT");

/// How many bytes a reader asks the socket for at least.
const READ_CHUNK: usize = 64 << 10;

/// PDU types; the values are NVMe/TCP's for the PDUs it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PduType {
    /// Host → controller: connection request.
    ICReq = 0x00,
    /// Controller → host: connection response.
    ICResp = 0x01,
    /// Host → controller: the host ends the connection after a fatal error.
    H2CTermReq = 0x02,
    /// Controller → host: the controller ends the connection.
    C2HTermReq = 0x03,
    /// Host → controller: one command.
    CapsuleCmd = 0x04,
    /// Controller → host: one completion.
    CapsuleResp = 0x05,
    /// Host → controller: bulk data of a command.
    H2CData = 0x06,
    /// Controller → host: bulk data of a completion.
    C2HData = 0x07,
    /// Controller → host: a sign of life (the common header alone), sent while the
    /// host has commands in flight and the controller wrote nothing else for
    /// [`crate::transport::KEEP_ALIVE_INTERVAL`]. csx's own (NVMe uses a Keep Alive
    /// command instead).
    C2HKeepAlive = 0x08,
}

impl PduType {
    fn from_code(code: u8) -> Option<PduType> {
        Some(match code {
            0x00 => PduType::ICReq,
            0x01 => PduType::ICResp,
            0x02 => PduType::H2CTermReq,
            0x03 => PduType::C2HTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2CData,
            0x07 => PduType::C2HData,
            0x08 => PduType::C2HKeepAlive,
            _ => return None,
        })
    }

    /// Bytes of the type-specific header.
    fn psh_size(self) -> usize {
        match self {
            PduType::ICReq => ICREQ_PSH_SIZE,
            PduType::ICResp => ICRESP_PSH_SIZE,
            PduType::H2CTermReq | PduType::C2HTermReq => TERM_PSH_SIZE,
            PduType::CapsuleCmd | PduType::CapsuleResp => CAPSULE_PSH_SIZE,
            PduType::H2CData | PduType::C2HData => DATA_PSH_SIZE,
            PduType::C2HKeepAlive => 0,
        }
    }
}

/// Why bytes are not a valid PDU (or not one this side accepts now).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FramingError {
    #[error("unknown pdu type {code:#04x}")]
    UnknownType { code: u8 },
    #[error("{pdu_type:?} pdu of {plen} bytes, must be {min}..={max}")]
    BadLength {
        pdu_type: PduType,
        plen: u64,
        min: u64,
        max: u64,
    },
    #[error("reserved field {field} is {value}, must be 0")]
    Reserved { field: &'static str, value: u64 },
    #[error("{field} has {len} bytes, limit is {limit}")]
    TooLong {
        field: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("{field} says {declared} bytes, the pdu holds {actual}")]
    Inconsistent {
        field: &'static str,
        declared: u64,
        actual: u64,
    },
    #[error("bad connect request magic {magic:#010x}")]
    BadMagic { magic: u32 },
    #[error("pdu format version {version}, this side speaks {PDU_FORMAT_VERSION}")]
    Version { version: u16 },
    #[error("unknown connect status {code}")]
    UnknownStatus { code: u8 },
    #[error("unexpected {pdu_type:?} pdu {context}")]
    Unexpected {
        pdu_type: PduType,
        context: &'static str,
    },
    #[error("{0}")]
    Sequence(String),
}

impl FramingError {
    /// The termination reason a peer hears for this error.
    pub fn term_reason(&self) -> TermReason {
        match self {
            FramingError::Unexpected { .. } | FramingError::Sequence(_) => {
                TermReason::PduSequenceError
            }
            FramingError::TooLong { .. } => TermReason::DataTransferLimitExceeded,
            FramingError::Version { .. } => TermReason::UnsupportedParameter,
            _ => TermReason::InvalidHeaderField,
        }
    }
}

/// The common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PduHeader {
    pub pdu_type: PduType,
    pub flags: u8,
    /// Bytes of the whole PDU, this header included.
    pub plen: u32,
}

/// Reads the common header and checks the length against the type's minimum and
/// `plen_max`.
pub fn decode_header(
    bytes: &[u8; PDU_HEADER_SIZE],
    plen_max: usize,
) -> Result<PduHeader, FramingError> {
    let code = bytes[0];
    let pdu_type = PduType::from_code(code).ok_or(FramingError::UnknownType { code })?;
    let flags = bytes[1];
    if flags != 0 {
        return Err(FramingError::Reserved {
            field: "flags",
            value: u64::from(flags),
        });
    }
    let reserved = u16::from_le_bytes([bytes[2], bytes[3]]);
    if reserved != 0 {
        return Err(FramingError::Reserved {
            field: "header reserved",
            value: u64::from(reserved),
        });
    }
    let plen = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let min = PDU_HEADER_SIZE + pdu_type.psh_size();
    if (plen as usize) < min || plen as usize > plen_max {
        return Err(FramingError::BadLength {
            pdu_type,
            plen: u64::from(plen),
            min: min as u64,
            max: plen_max as u64,
        });
    }
    Ok(PduHeader {
        pdu_type,
        flags,
        plen,
    })
}

/// The whole keep-alive PDU.
pub fn keep_alive_pdu() -> Vec<u8> {
    let mut out = Vec::with_capacity(PDU_HEADER_SIZE);
    put_header(&mut out, PduType::C2HKeepAlive, PDU_HEADER_SIZE);
    out
}

fn put_header(out: &mut Vec<u8>, pdu_type: PduType, plen: usize) {
    let plen = u32::try_from(plen).expect("every pdu is below 4 GiB");
    out.push(pdu_type as u8);
    out.push(0);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&plen.to_le_bytes());
}

fn check_zero(field: &'static str, value: u64) -> Result<(), FramingError> {
    if value != 0 {
        return Err(FramingError::Reserved { field, value });
    }
    Ok(())
}

/// The bytes after the type-specific header, checked against a declared length.
fn tail<'a>(
    body: &'a [u8],
    psh: usize,
    field: &'static str,
    declared: usize,
    limit: usize,
) -> Result<&'a [u8], FramingError> {
    if declared > limit {
        return Err(FramingError::TooLong {
            field,
            len: declared as u64,
            limit: limit as u64,
        });
    }
    let rest = &body[psh..];
    if rest.len() != declared {
        return Err(FramingError::Inconsistent {
            field,
            declared: declared as u64,
            actual: rest.len() as u64,
        });
    }
    Ok(rest)
}

fn message_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------
// Connection setup.

/// The host's connection request.
#[derive(Clone, PartialEq, Eq)]
pub struct ICReq {
    /// Commands the host wants in flight at once.
    pub queue_depth: u32,
    /// The shared secret, empty when the host has none.
    pub token: Vec<u8>,
}

impl std::fmt::Debug for ICReq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in logs.
        f.debug_struct("ICReq")
            .field("queue_depth", &self.queue_depth)
            .field("token_len", &self.token.len())
            .finish()
    }
}

impl ICReq {
    /// The whole PDU.
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.token.len() <= TOKEN_SIZE_MAX,
            "token checked by the caller"
        );
        let plen = PDU_HEADER_SIZE + ICREQ_PSH_SIZE + self.token.len();
        let mut out = Vec::with_capacity(plen);
        put_header(&mut out, PduType::ICReq, plen);
        out.extend_from_slice(&ICREQ_MAGIC.to_le_bytes());
        out.extend_from_slice(&PDU_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.token.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.queue_depth.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.token);
        out
    }

    /// Decodes the bytes after the common header.
    pub fn decode(body: &[u8]) -> Result<ICReq, FramingError> {
        let magic = u32_at(body, 0);
        if magic != ICREQ_MAGIC {
            return Err(FramingError::BadMagic { magic });
        }
        let version = u16_at(body, 4);
        if version != PDU_FORMAT_VERSION {
            return Err(FramingError::Version { version });
        }
        let token_len = u16_at(body, 6) as usize;
        let queue_depth = u32_at(body, 8);
        check_zero("icreq reserved", u64::from(u32_at(body, 12)))?;
        let token = tail(body, ICREQ_PSH_SIZE, "token", token_len, TOKEN_SIZE_MAX)?;
        Ok(ICReq {
            queue_depth,
            token: token.to_vec(),
        })
    }
}

/// Whether a connection was accepted, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectStatus {
    Accepted = 0,
    /// The server needs a token and the host sent none, or a wrong one.
    AuthFailed = 1,
    /// The server does not speak the host's PDU format version.
    VersionUnsupported = 2,
    /// The queue depth asked for is 0.
    BadQueueDepth = 3,
    /// The device has no queue pair left or is shutting down.
    Unavailable = 4,
}

impl ConnectStatus {
    fn from_code(code: u8) -> Option<ConnectStatus> {
        Some(match code {
            0 => ConnectStatus::Accepted,
            1 => ConnectStatus::AuthFailed,
            2 => ConnectStatus::VersionUnsupported,
            3 => ConnectStatus::BadQueueDepth,
            4 => ConnectStatus::Unavailable,
            _ => return None,
        })
    }
}

/// The server's connection response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ICResp {
    pub status: ConnectStatus,
    /// Commands the host may have in flight (at most what it asked for).
    pub queue_depth: u32,
    /// The most bulk bytes one data PDU carries, either way.
    pub data_pdu_size_max: u32,
    /// This connection's queue id: command capsules carry it.
    pub queue_id: u32,
    /// Why a connection was refused; empty when accepted.
    pub message: String,
}

impl ICResp {
    /// The whole PDU.
    pub fn encode(&self) -> Vec<u8> {
        let message = clip_message(&self.message, PDU_MESSAGE_SIZE_MAX);
        let plen = PDU_HEADER_SIZE + ICRESP_PSH_SIZE + message.len();
        let mut out = Vec::with_capacity(plen);
        put_header(&mut out, PduType::ICResp, plen);
        out.extend_from_slice(&PDU_FORMAT_VERSION.to_le_bytes());
        out.push(self.status as u8);
        out.push(0);
        out.extend_from_slice(&self.queue_depth.to_le_bytes());
        out.extend_from_slice(&self.data_pdu_size_max.to_le_bytes());
        out.extend_from_slice(&self.queue_id.to_le_bytes());
        out.extend_from_slice(&(message.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(message);
        out
    }

    /// Decodes the bytes after the common header.
    pub fn decode(body: &[u8]) -> Result<ICResp, FramingError> {
        let version = u16_at(body, 0);
        if version != PDU_FORMAT_VERSION {
            return Err(FramingError::Version { version });
        }
        let code = body[2];
        let status = ConnectStatus::from_code(code).ok_or(FramingError::UnknownStatus { code })?;
        check_zero("icresp reserved", u64::from(body[3]))?;
        let queue_depth = u32_at(body, 4);
        let data_pdu_size_max = u32_at(body, 8);
        let queue_id = u32_at(body, 12);
        let message_len = u16_at(body, 16) as usize;
        check_zero("icresp reserved", u64::from(u16_at(body, 18)))?;
        let message = tail(
            body,
            ICRESP_PSH_SIZE,
            "message",
            message_len,
            PDU_MESSAGE_SIZE_MAX,
        )?;
        Ok(ICResp {
            status,
            queue_depth,
            data_pdu_size_max,
            queue_id,
            message: message_of(message),
        })
    }
}

// ---------------------------------------------------------------------------------
// Termination.

/// Why a side ends the connection (NVMe/TCP's fatal error status values, plus ours).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TermReason {
    InvalidHeaderField = 0x01,
    PduSequenceError = 0x02,
    DataTransferOutOfRange = 0x04,
    DataTransferLimitExceeded = 0x05,
    UnsupportedParameter = 0x06,
    /// The device is shutting down.
    ShuttingDown = 0xC0,
}

/// A termination request: the sender closes the connection after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermReq {
    /// The [`TermReason`] code (kept raw: a newer peer may send others).
    pub reason: u16,
    pub message: String,
}

impl TermReq {
    /// The whole PDU, `C2HTermReq` or `H2CTermReq` by `pdu_type`.
    pub fn encode(pdu_type: PduType, reason: TermReason, message: &str) -> Vec<u8> {
        assert!(matches!(
            pdu_type,
            PduType::C2HTermReq | PduType::H2CTermReq
        ));
        let message = clip_message(message, PDU_MESSAGE_SIZE_MAX);
        let plen = PDU_HEADER_SIZE + TERM_PSH_SIZE + message.len();
        let mut out = Vec::with_capacity(plen);
        put_header(&mut out, pdu_type, plen);
        out.extend_from_slice(&(reason as u16).to_le_bytes());
        out.extend_from_slice(&(message.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(message);
        out
    }

    /// Decodes the bytes after the common header.
    pub fn decode(body: &[u8]) -> Result<TermReq, FramingError> {
        let reason = u16_at(body, 0);
        let message_len = u16_at(body, 2) as usize;
        check_zero("term reserved", u64::from(u32_at(body, 4)))?;
        let message = tail(
            body,
            TERM_PSH_SIZE,
            "message",
            message_len,
            PDU_MESSAGE_SIZE_MAX,
        )?;
        Ok(TermReq {
            reason,
            message: message_of(message),
        })
    }
}

// ---------------------------------------------------------------------------------
// Capsules and data.

/// The header of a command capsule: the common header, the queue id and the bytes of
/// bulk data that follow in H2C data PDUs. The encoded command (without those bytes)
/// follows it.
pub fn command_capsule_header(queue_id: u32, data_len: usize, frame_len: usize) -> [u8; 16] {
    capsule_header(PduType::CapsuleCmd, queue_id, data_len, frame_len)
}

/// The header of a response capsule: the bytes of a read's data that came ahead of it
/// in C2H data PDUs. The encoded completion (with an empty data reply when data came
/// separately) follows it.
pub fn response_capsule_header(data_len: usize, frame_len: usize) -> [u8; 16] {
    capsule_header(PduType::CapsuleResp, 0, data_len, frame_len)
}

fn capsule_header(pdu_type: PduType, word: u32, data_len: usize, frame_len: usize) -> [u8; 16] {
    let mut out = Vec::with_capacity(16);
    put_header(
        &mut out,
        pdu_type,
        PDU_HEADER_SIZE + CAPSULE_PSH_SIZE + frame_len,
    );
    let data_len = u32::try_from(data_len).expect("transfers are below 4 GiB");
    match pdu_type {
        PduType::CapsuleCmd => {
            out.extend_from_slice(&word.to_le_bytes());
            out.extend_from_slice(&data_len.to_le_bytes());
        }
        _ => {
            out.extend_from_slice(&data_len.to_le_bytes());
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    out.try_into().expect("16 bytes")
}

/// A decoded command capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandCapsule<'a> {
    pub queue_id: u32,
    /// Bulk bytes that follow in H2C data PDUs.
    pub data_len: u32,
    /// The encoded command without those bytes.
    pub frame: &'a [u8],
}

/// Decodes the bytes after the common header of a command capsule.
pub fn decode_command_capsule(body: &[u8]) -> CommandCapsule<'_> {
    CommandCapsule {
        queue_id: u32_at(body, 0),
        data_len: u32_at(body, 4),
        frame: &body[CAPSULE_PSH_SIZE..],
    }
}

/// A decoded response capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseCapsule<'a> {
    /// Bulk bytes that came ahead in C2H data PDUs.
    pub data_len: u32,
    /// The encoded completion.
    pub frame: &'a [u8],
}

/// Decodes the bytes after the common header of a response capsule.
pub fn decode_response_capsule(body: &[u8]) -> Result<ResponseCapsule<'_>, FramingError> {
    check_zero("capsule reserved", u64::from(u32_at(body, 4)))?;
    Ok(ResponseCapsule {
        data_len: u32_at(body, 0),
        frame: &body[CAPSULE_PSH_SIZE..],
    })
}

/// The header of a data PDU carrying `len` bytes at `offset` of command `cid`'s data.
pub fn data_header(pdu_type: PduType, cid: u64, offset: usize, len: usize) -> [u8; 24] {
    assert!(matches!(pdu_type, PduType::H2CData | PduType::C2HData));
    let mut out = Vec::with_capacity(24);
    put_header(&mut out, pdu_type, PDU_HEADER_SIZE + DATA_PSH_SIZE + len);
    out.extend_from_slice(&cid.to_le_bytes());
    let offset = u32::try_from(offset).expect("transfers are below 4 GiB");
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.try_into().expect("24 bytes")
}

/// A decoded data PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataPdu<'a> {
    pub cid: u64,
    pub offset: u32,
    pub data: &'a [u8],
}

/// Decodes the bytes after the common header of a data PDU.
pub fn decode_data(body: &[u8]) -> Result<DataPdu<'_>, FramingError> {
    check_zero("data reserved", u64::from(u32_at(body, 12)))?;
    Ok(DataPdu {
        cid: u64_at(body, 0),
        offset: u32_at(body, 8),
        data: &body[DATA_PSH_SIZE..],
    })
}

// ---------------------------------------------------------------------------------
// Reading and writing.

/// One PDU in a [`PduReader`]'s buffer.
#[derive(Debug)]
pub struct Pdu<'a> {
    pub header: PduHeader,
    /// The bytes after the common header.
    pub body: &'a [u8],
}

/// Collects bytes from a stream and cuts them into PDUs (see the module invariants).
#[derive(Debug)]
pub struct PduReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    plen_max: usize,
}

impl PduReader {
    /// A reader that refuses PDUs longer than `plen_max`.
    pub fn new(plen_max: usize) -> PduReader {
        assert!(plen_max >= PDU_HEADER_SIZE + ICRESP_PSH_SIZE);
        PduReader {
            buf: vec![0; READ_CHUNK.min(plen_max)],
            start: 0,
            end: 0,
            plen_max,
        }
    }

    /// Changes the longest PDU accepted from now on.
    pub fn set_plen_max(&mut self, plen_max: usize) {
        self.plen_max = plen_max;
    }

    /// Bytes buffered and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    fn pending_header(&self) -> Result<Option<PduHeader>, FramingError> {
        if self.buffered() < PDU_HEADER_SIZE {
            return Ok(None);
        }
        let mut h = [0u8; PDU_HEADER_SIZE];
        h.copy_from_slice(&self.buf[self.start..self.start + PDU_HEADER_SIZE]);
        decode_header(&h, self.plen_max).map(Some)
    }

    /// The next whole PDU buffered, if any.
    pub fn next_pdu(&mut self) -> Result<Option<Pdu<'_>>, FramingError> {
        let Some(header) = self.pending_header()? else {
            return Ok(None);
        };
        let plen = header.plen as usize;
        if self.buffered() < plen {
            return Ok(None);
        }
        let at = self.start;
        self.start += plen;
        Ok(Some(Pdu {
            header,
            body: &self.buf[at + PDU_HEADER_SIZE..at + plen],
        }))
    }

    /// Reads once from `r` into the buffer, making room for the PDU in progress first.
    /// `Ok(0)` is the end of the stream; timeouts surface as `WouldBlock`/`TimedOut`.
    pub fn fill(&mut self, r: &mut impl Read) -> Result<usize, io::Error> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > 2 * super::DATA_PDU_SIZE_MAX {
                // One huge PDU went through; do not keep its buffer forever.
                self.buf = vec![0; READ_CHUNK];
            }
        }
        let need = match self.pending_header() {
            Ok(Some(h)) => (h.plen as usize).max(READ_CHUNK),
            // A bad header is reported by the next `next_pdu`; read nothing more.
            Err(_) => return Ok(1),
            Ok(None) => READ_CHUNK,
        };
        if self.buf.len() - self.start < need {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < need {
                // `need` is at most `plen_max` (checked by the header decode) or one
                // read chunk.
                self.buf.resize(need, 0);
            }
        }
        if self.end == self.buf.len() {
            // Compacting made room unless the buffer is full of whole PDUs.
            return Ok(1);
        }
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }
}

/// Reads once from `stream` into `reader`, polling the socket without sleeping for up
/// to [`SOCKET_POLL`] (without yielding for the first [`SOCKET_POLL_BUSY`]); `None` when
/// nothing came in that time, for the caller to block. A thread that sleeps in a read
/// costs its peer a wake-up of tens of µs on a VM with few cores; polling while
/// commands come back to back avoids it, as the shm transport's spins do.
pub fn fill_polling(reader: &mut PduReader, stream: &TcpStream) -> Option<io::Result<usize>> {
    let start = Instant::now();
    loop {
        match reader.fill(&mut DontWait(stream)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let waited = start.elapsed();
                if waited >= SOCKET_POLL {
                    return None;
                }
                if waited < SOCKET_POLL_BUSY {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            read => return Some(read),
        }
    }
}

/// Writes every byte of `slices` (a PDU header and its payload, or several PDUs).
pub fn write_all_vectored(w: &mut impl Write, slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    let mut slices = slices;
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match w.write_vectored(slices) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Compares two secrets in time that depends only on their lengths, so a peer cannot
/// learn a token byte by byte from response times.
pub fn secrets_equal(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(g ^ e);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_pdus_round_trip() {
        let req = ICReq {
            queue_depth: 64,
            token: b"secret".to_vec(),
        };
        let bytes = req.encode();
        let h = decode_header(bytes[..8].try_into().unwrap(), ICREQ_SIZE_MAX).unwrap();
        assert_eq!(h.pdu_type, PduType::ICReq);
        assert_eq!(h.plen as usize, bytes.len());
        assert_eq!(ICReq::decode(&bytes[8..]).unwrap(), req);
        let resp = ICResp {
            status: ConnectStatus::AuthFailed,
            queue_depth: 0,
            data_pdu_size_max: 1 << 20,
            queue_id: 7,
            message: "wrong token".into(),
        };
        let bytes = resp.encode();
        assert_eq!(ICResp::decode(&bytes[8..]).unwrap(), resp);
        let term = TermReq::encode(PduType::C2HTermReq, TermReason::ShuttingDown, "bye");
        let t = TermReq::decode(&term[8..]).unwrap();
        assert_eq!((t.reason, t.message.as_str()), (0xC0, "bye"));
    }

    #[test]
    fn headers_are_checked() {
        let bad_type = [0x42, 0, 0, 0, 100, 0, 0, 0];
        assert_eq!(
            decode_header(&bad_type, 1000),
            Err(FramingError::UnknownType { code: 0x42 })
        );
        let huge = [0x04, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_header(&huge, 1000),
            Err(FramingError::BadLength { .. })
        ));
        let short = [0x06, 0, 0, 0, 10, 0, 0, 0];
        assert!(matches!(
            decode_header(&short, 1000),
            Err(FramingError::BadLength { .. })
        ));
        let flags = [0x04, 1, 0, 0, 16, 0, 0, 0];
        assert!(matches!(
            decode_header(&flags, 1000),
            Err(FramingError::Reserved { .. })
        ));
        // A token length beyond the bytes present.
        let mut req = ICReq {
            queue_depth: 1,
            token: vec![1; 4],
        }
        .encode();
        req[14] = 200;
        assert!(matches!(
            ICReq::decode(&req[8..]),
            Err(FramingError::Inconsistent { .. })
        ));
    }

    #[test]
    fn reader_cuts_pdus_from_dribbled_bytes() {
        let mut stream = Vec::new();
        for i in 0..50u64 {
            stream.extend_from_slice(&data_header(PduType::C2HData, i, 0, i as usize));
            stream.extend(std::iter::repeat_n(i as u8, i as usize));
        }
        // A reader over a source that returns 3 bytes at a time.
        struct Dribble<'a>(&'a [u8]);
        impl Read for Dribble<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(3).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut src = Dribble(&stream);
        let mut reader = PduReader::new(1 << 20);
        let mut seen = 0u64;
        loop {
            while let Some(pdu) = reader.next_pdu().unwrap() {
                let d = decode_data(pdu.body).unwrap();
                assert_eq!(d.cid, seen);
                assert!(d.data.iter().all(|&b| b == seen as u8));
                seen += 1;
            }
            if reader.fill(&mut src).unwrap() == 0 {
                break;
            }
        }
        assert_eq!(seen, 50);
    }

    #[test]
    fn reader_refuses_oversized_pdus_before_allocating() {
        let mut reader = PduReader::new(4096);
        let header = data_header(PduType::C2HData, 1, 0, 1 << 30);
        let mut src: &[u8] = &header;
        reader.fill(&mut src).unwrap();
        assert!(matches!(
            reader.next_pdu(),
            Err(FramingError::BadLength { .. })
        ));
        assert!(reader.buf.len() <= READ_CHUNK);
    }

    #[test]
    fn secrets() {
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abd", b"abc"));
        assert!(!secrets_equal(b"ab", b"abc"));
        assert!(!secrets_equal(b"abcd", b"abc"));
        assert!(!secrets_equal(b"", b"abc"));
    }
}
