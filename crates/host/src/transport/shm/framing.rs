//! Byte layouts of the shm transport: the handshake messages, the control page, and
//! the submission and completion entries (tables in `docs/design/shm.md`).
//!
//! Everything here is plain bytes in and out; `ring` moves them to and from shared
//! memory. Little-endian throughout.
//!
//! Invariant: every decoder checks reserved fields and lengths, so a value decoded from
//! shared memory or the handshake socket is well-formed (offsets still need checking
//! against the region by the caller, who knows it).

use csx_proto::limits::QUEUE_DEPTH_MAX;

use super::{
    CONTROL_SIZE, CQE_INLINE_FRAME_MAX, CQE_SIZE, HANDSHAKE_MESSAGE_SIZE_MAX, HOST_MEMORY_MAX,
    SHM_FORMAT_VERSION, SQE_INLINE_FRAME_MAX, SQE_SIZE,
};
use crate::transport::framing::{clip_message, put16, put32, put64, u16_at, u32_at, u64_at};

/// Why bytes are not a valid handshake message, control page or entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShmFramingError {
    #[error("{what} has {len} bytes, expected {expected}")]
    Size {
        what: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("{what}: bad magic {magic:#010x}")]
    Magic { what: &'static str, magic: u32 },
    #[error("format version {version}, this side speaks {SHM_FORMAT_VERSION}")]
    Version { version: u16 },
    #[error("reserved field {field} is {value}, must be 0")]
    Reserved { field: &'static str, value: u64 },
    #[error("{field} is {value}, limit is {limit}")]
    TooLarge {
        field: &'static str,
        value: u64,
        limit: u64,
    },
    #[error("unknown {field} {value:#x}")]
    Unknown { field: &'static str, value: u64 },
}

fn zero(
    b: &[u8],
    range: std::ops::Range<usize>,
    field: &'static str,
) -> Result<(), ShmFramingError> {
    match b[range].iter().position(|&x| x != 0) {
        None => Ok(()),
        Some(_) => Err(ShmFramingError::Reserved { field, value: 1 }),
    }
}

fn check_magic(b: &[u8], what: &'static str, magic: u32) -> Result<(), ShmFramingError> {
    let got = u32_at(b, 0);
    if got != magic {
        return Err(ShmFramingError::Magic { what, magic: got });
    }
    let version = u16_at(b, 4);
    if version != SHM_FORMAT_VERSION {
        return Err(ShmFramingError::Version { version });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Handshake.

/// Bytes of a hello.
pub const HELLO_SIZE: usize = 32;
/// Bytes of a welcome's fixed part; its message follows.
pub const WELCOME_SIZE: usize = 32;

const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"CSXH");
const WELCOME_MAGIC: u32 = u32::from_le_bytes(*b"CSXW");
const CONTROL_MAGIC: u32 = u32::from_le_bytes(*b"CSXR");

/// The host's handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub queue_depth: u32,
    pub host_memory_bytes: u64,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_SIZE] {
        let mut b = [0u8; HELLO_SIZE];
        put32(&mut b, 0, HELLO_MAGIC);
        put16(&mut b, 4, SHM_FORMAT_VERSION);
        put32(&mut b, 8, self.queue_depth);
        put64(&mut b, 16, self.host_memory_bytes);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Hello, ShmFramingError> {
        if b.len() != HELLO_SIZE {
            return Err(ShmFramingError::Size {
                what: "hello",
                len: b.len(),
                expected: HELLO_SIZE,
            });
        }
        check_magic(b, "hello", HELLO_MAGIC)?;
        zero(b, 6..8, "hello reserved")?;
        zero(b, 12..16, "hello reserved")?;
        zero(b, 24..32, "hello reserved")?;
        Ok(Hello {
            queue_depth: u32_at(b, 8),
            host_memory_bytes: u64_at(b, 16),
        })
    }
}

/// Whether a client was accepted, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WelcomeStatus {
    Accepted = 0,
    VersionUnsupported = 1,
    BadQueueDepth = 2,
    BadHostMemory = 3,
    /// No queue pair left, the device is shutting down, or the region could not be made.
    Unavailable = 4,
    /// The client runs as a user the device does not serve.
    PermissionDenied = 5,
}

/// The device's handshake message; when accepted it carries the region's memory file,
/// the doorbell and the interrupt eventfds, in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub status: WelcomeStatus,
    pub queue_depth: u32,
    pub queue_id: u32,
    pub region_bytes: u64,
    pub message: String,
}

impl Welcome {
    pub fn encode(&self) -> Vec<u8> {
        let message = clip_message(&self.message, HANDSHAKE_MESSAGE_SIZE_MAX);
        let mut b = vec![0u8; WELCOME_SIZE];
        put32(&mut b, 0, WELCOME_MAGIC);
        put16(&mut b, 4, SHM_FORMAT_VERSION);
        b[6] = self.status as u8;
        put32(&mut b, 8, self.queue_depth);
        put32(&mut b, 12, self.queue_id);
        put64(&mut b, 16, self.region_bytes);
        put16(&mut b, 24, message.len() as u16);
        b.extend_from_slice(message);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Welcome, ShmFramingError> {
        if b.len() < WELCOME_SIZE {
            return Err(ShmFramingError::Size {
                what: "welcome",
                len: b.len(),
                expected: WELCOME_SIZE,
            });
        }
        check_magic(b, "welcome", WELCOME_MAGIC)?;
        let status = match b[6] {
            0 => WelcomeStatus::Accepted,
            1 => WelcomeStatus::VersionUnsupported,
            2 => WelcomeStatus::BadQueueDepth,
            3 => WelcomeStatus::BadHostMemory,
            4 => WelcomeStatus::Unavailable,
            5 => WelcomeStatus::PermissionDenied,
            v => {
                return Err(ShmFramingError::Unknown {
                    field: "welcome status",
                    value: u64::from(v),
                })
            }
        };
        zero(b, 7..8, "welcome reserved")?;
        zero(b, 26..32, "welcome reserved")?;
        let message_len = u16_at(b, 24) as usize;
        if b.len() != WELCOME_SIZE + message_len {
            return Err(ShmFramingError::Size {
                what: "welcome",
                len: b.len(),
                expected: WELCOME_SIZE + message_len,
            });
        }
        Ok(Welcome {
            status,
            queue_depth: u32_at(b, 8),
            queue_id: u32_at(b, 12),
            region_bytes: u64_at(b, 16),
            message: String::from_utf8_lossy(&b[WELCOME_SIZE..]).into_owned(),
        })
    }
}

// ---------------------------------------------------------------------------------
// Control page.

/// Offsets of the index words in the control page, each on its own cache line so the
/// two sides never write the same line.
pub mod word {
    /// Submission ring tail: the host's doorbell value (written by the host).
    pub const SQ_TAIL: usize = 64;
    /// Submission ring head: entries the device has taken (written by the device).
    pub const SQ_HEAD: usize = 128;
    /// Completion ring tail (written by the device).
    pub const CQ_TAIL: usize = 192;
    /// Completion ring head: entries the host has consumed (written by the host).
    pub const CQ_HEAD: usize = 256;
    /// 1 while the device sleeps on the doorbell (written by the device).
    pub const DEVICE_IDLE: usize = 320;
    /// 1 while the host sleeps on the interrupt (written by the host).
    pub const HOST_IDLE: usize = 384;
    /// The device's heartbeat: non-zero from the handshake on, and bumped every
    /// `KEEP_ALIVE_INTERVAL` while the device runs (written by the device). A host
    /// with commands in flight that sees it stand still for its answer timeout treats
    /// the device as stopped or hung.
    pub const HEARTBEAT: usize = 448;
}

/// The static part of the control page: where everything is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub sq_entries: u32,
    pub cq_entries: u32,
    pub sq_offset: u64,
    pub cq_offset: u64,
    pub heap_offset: u64,
    pub heap_size: u64,
    pub queue_id: u32,
    pub queue_depth: u32,
}

/// Bytes of the control page's static header.
pub const LAYOUT_SIZE: usize = 64;

impl Layout {
    /// The layout for `queue_depth` commands and `heap_size` bytes of host memory:
    /// control page, submission ring, completion ring, heap, each page-aligned.
    pub fn new(queue_depth: u32, queue_id: u32, heap_size: u64) -> Layout {
        let entries = queue_depth.next_power_of_two();
        let page = |n: u64| n.div_ceil(4096) * 4096;
        let sq_offset = CONTROL_SIZE as u64;
        let cq_offset = sq_offset + page(u64::from(entries) * SQE_SIZE as u64);
        let heap_offset = cq_offset + page(u64::from(entries) * CQE_SIZE as u64);
        Layout {
            sq_entries: entries,
            cq_entries: entries,
            sq_offset,
            cq_offset,
            heap_offset,
            heap_size: page(heap_size),
            queue_id,
            queue_depth,
        }
    }

    /// Bytes of the whole region.
    pub fn region_bytes(&self) -> u64 {
        self.heap_offset + self.heap_size
    }

    pub fn encode(&self) -> [u8; LAYOUT_SIZE] {
        let mut b = [0u8; LAYOUT_SIZE];
        put32(&mut b, 0, CONTROL_MAGIC);
        put16(&mut b, 4, SHM_FORMAT_VERSION);
        put32(&mut b, 8, self.sq_entries);
        put32(&mut b, 12, self.cq_entries);
        put32(&mut b, 16, SQE_SIZE as u32);
        put32(&mut b, 20, CQE_SIZE as u32);
        put64(&mut b, 24, self.sq_offset);
        put64(&mut b, 32, self.cq_offset);
        put64(&mut b, 40, self.heap_offset);
        put64(&mut b, 48, self.heap_size);
        put32(&mut b, 56, self.queue_id);
        put32(&mut b, 60, self.queue_depth);
        b
    }

    /// Decodes and checks the layout against a region of `region_bytes`.
    pub fn decode(b: &[u8; LAYOUT_SIZE], region_bytes: u64) -> Result<Layout, ShmFramingError> {
        check_magic(b, "control page", CONTROL_MAGIC)?;
        zero(b, 6..8, "control reserved")?;
        for (at, expected, what) in [(16, SQE_SIZE, "sqe size"), (20, CQE_SIZE, "cqe size")] {
            let got = u32_at(b, at) as usize;
            if got != expected {
                return Err(ShmFramingError::Size {
                    what,
                    len: got,
                    expected,
                });
            }
        }
        let l = Layout {
            sq_entries: u32_at(b, 8),
            cq_entries: u32_at(b, 12),
            sq_offset: u64_at(b, 24),
            cq_offset: u64_at(b, 32),
            heap_offset: u64_at(b, 40),
            heap_size: u64_at(b, 48),
            queue_id: u32_at(b, 56),
            queue_depth: u32_at(b, 60),
        };
        // Bounded before `Layout::new` does arithmetic on them (found by fuzzing: a
        // depth above 2^31 overflowed `next_power_of_two`).
        for (field, value, limit) in [
            (
                "queue depth",
                u64::from(l.queue_depth),
                u64::from(QUEUE_DEPTH_MAX),
            ),
            ("heap size", l.heap_size, HOST_MEMORY_MAX),
        ] {
            if value > limit {
                return Err(ShmFramingError::TooLarge {
                    field,
                    value,
                    limit,
                });
            }
        }
        let expected = Layout::new(l.queue_depth, l.queue_id, l.heap_size);
        if l != expected || l.queue_depth == 0 || l.region_bytes() != region_bytes {
            return Err(ShmFramingError::Size {
                what: "region",
                len: region_bytes as usize,
                expected: expected.region_bytes() as usize,
            });
        }
        Ok(l)
    }
}

// ---------------------------------------------------------------------------------
// Entries.

/// A submission entry flag: the encoded command is in host memory at `frame_offset`.
pub const SQE_FRAME_OUT_OF_LINE: u8 = 1;

/// A host-memory range named by an entry: offset from the region's start, length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub len: u64,
}

/// One submission entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sqe {
    pub queue_id: u32,
    /// The encoded command: inline, or where `frame` points.
    pub frame: SqeFrame,
    /// Bulk data: a write's source or a read's destination (len 0: none).
    pub data: Span,
    /// Where a completion too long for its entry goes.
    pub response: Span,
}

/// Where a submission entry's command is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqeFrame {
    Inline(Vec<u8>),
    OutOfLine(Span),
}

impl Sqe {
    #[inline]
    pub fn encode(&self) -> [u8; SQE_SIZE] {
        let mut b = [0u8; SQE_SIZE];
        put32(&mut b, 4, self.queue_id);
        match &self.frame {
            SqeFrame::Inline(f) => {
                assert!(f.len() <= SQE_INLINE_FRAME_MAX);
                put32(&mut b, 8, f.len() as u32);
                b[48..48 + f.len()].copy_from_slice(f);
            }
            SqeFrame::OutOfLine(s) => {
                b[0] = SQE_FRAME_OUT_OF_LINE;
                put32(
                    &mut b,
                    8,
                    u32::try_from(s.len).expect("frames are below 4 GiB"),
                );
                put64(&mut b, 16, s.offset);
            }
        }
        put32(
            &mut b,
            12,
            u32::try_from(self.data.len).expect("transfers are below 4 GiB"),
        );
        put64(&mut b, 24, self.data.offset);
        put64(&mut b, 32, self.response.offset);
        put32(
            &mut b,
            40,
            u32::try_from(self.response.len).expect("areas are below 4 GiB"),
        );
        b
    }

    #[inline]
    pub fn decode(b: &[u8; SQE_SIZE]) -> Result<Sqe, ShmFramingError> {
        let flags = b[0];
        if flags & !SQE_FRAME_OUT_OF_LINE != 0 {
            return Err(ShmFramingError::Unknown {
                field: "sqe flags",
                value: u64::from(flags),
            });
        }
        zero(b, 1..4, "sqe reserved")?;
        zero(b, 44..48, "sqe reserved")?;
        let frame_len = u32_at(b, 8) as usize;
        let frame = if flags & SQE_FRAME_OUT_OF_LINE != 0 {
            SqeFrame::OutOfLine(Span {
                offset: u64_at(b, 16),
                len: frame_len as u64,
            })
        } else {
            if frame_len > SQE_INLINE_FRAME_MAX {
                return Err(ShmFramingError::TooLarge {
                    field: "inline frame",
                    value: frame_len as u64,
                    limit: SQE_INLINE_FRAME_MAX as u64,
                });
            }
            SqeFrame::Inline(b[48..48 + frame_len].to_vec())
        };
        Ok(Sqe {
            queue_id: u32_at(b, 4),
            frame,
            data: Span {
                offset: u64_at(b, 24),
                len: u64::from(u32_at(b, 12)),
            },
            response: Span {
                offset: u64_at(b, 32),
                len: u64::from(u32_at(b, 40)),
            },
        })
    }
}

/// A completion entry flag: the encoded completion is in the response area.
pub const CQE_FRAME_IN_RESPONSE: u32 = 1;
/// A completion entry flag: the completion did not fit the response area; `frame_len`
/// is the bytes it needs, and the command ran.
pub const CQE_RESPONSE_OVERFLOW: u32 = 2;
/// A completion entry flag: the reply's data (`data_len` bytes) is in the command's
/// data buffer; the encoded reply holds no data.
pub const CQE_DATA_IN_BUFFER: u32 = 4;

const CQE_FLAGS_KNOWN: u32 = CQE_FRAME_IN_RESPONSE | CQE_RESPONSE_OVERFLOW | CQE_DATA_IN_BUFFER;

/// One completion entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub cid: u64,
    pub flags: u32,
    /// Bytes of the encoded completion (inline or in the response area), or the bytes
    /// it needs on overflow.
    pub frame_len: u32,
    /// Bytes of reply data in the data buffer.
    pub data_len: u32,
    /// The encoded completion when it is inline.
    pub inline: Vec<u8>,
}

impl Cqe {
    #[inline]
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        put64(&mut b, 0, self.cid);
        put32(&mut b, 8, self.flags);
        put32(&mut b, 12, self.frame_len);
        put32(&mut b, 16, self.data_len);
        assert!(self.inline.len() <= CQE_INLINE_FRAME_MAX);
        b[24..24 + self.inline.len()].copy_from_slice(&self.inline);
        b
    }

    #[inline]
    pub fn decode(b: &[u8; CQE_SIZE]) -> Result<Cqe, ShmFramingError> {
        let flags = u32_at(b, 8);
        if flags & !CQE_FLAGS_KNOWN != 0 {
            return Err(ShmFramingError::Unknown {
                field: "cqe flags",
                value: u64::from(flags),
            });
        }
        zero(b, 20..24, "cqe reserved")?;
        let frame_len = u32_at(b, 12);
        let inline = if flags & (CQE_FRAME_IN_RESPONSE | CQE_RESPONSE_OVERFLOW) == 0 {
            if frame_len as usize > CQE_INLINE_FRAME_MAX {
                return Err(ShmFramingError::TooLarge {
                    field: "inline completion",
                    value: u64::from(frame_len),
                    limit: CQE_INLINE_FRAME_MAX as u64,
                });
            }
            b[24..24 + frame_len as usize].to_vec()
        } else {
            Vec::new()
        };
        Ok(Cqe {
            cid: u64_at(b, 0),
            flags,
            frame_len,
            data_len: u32_at(b, 16),
            inline,
        })
    }
}

/// After the handshake, the host may ask on the socket for a memory file of one of its
/// device-memory allocations (`Transport::share_mem`): a [`MAP_REQUEST_SIZE`]-byte
/// request, answered by a [`MAP_REPLY_SIZE`]-byte reply carrying the file (SCM_RIGHTS)
/// or why not. One request at a time per host.
pub const MAP_REQUEST_SIZE: usize = 16;

/// Bytes of a map reply.
pub const MAP_REPLY_SIZE: usize = 256;

const MAP_REQUEST_MAGIC: &[u8; 8] = b"CSXMAPRQ";
const MAP_REPLY_MAGIC: &[u8; 8] = b"CSXMAPRP";

/// A request for the memory file of allocation `handle`: the magic, the handle (u32 LE),
/// 4 zero bytes.
pub fn encode_map_request(handle: u32) -> [u8; MAP_REQUEST_SIZE] {
    let mut b = [0u8; MAP_REQUEST_SIZE];
    b[..8].copy_from_slice(MAP_REQUEST_MAGIC);
    b[8..12].copy_from_slice(&handle.to_le_bytes());
    b
}

/// The handle a map request names, or `None` when `b` is not one.
pub fn decode_map_request(b: &[u8]) -> Option<u32> {
    if b.len() != MAP_REQUEST_SIZE || &b[..8] != MAP_REQUEST_MAGIC || b[12..] != [0; 4] {
        return None;
    }
    Some(u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")))
}

/// Why a map request was refused (0 in the reply: granted, the file attached).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MapRefusal {
    /// No allocation of that handle for this client.
    NotFound = 1,
    /// A command is using it.
    Busy = 2,
    /// It does not hold whole pages of its own.
    NotPages = 3,
    /// The device serves clients of other users and maps memory only to its own.
    NotPermitted = 4,
    /// The device could not make the file.
    Failed = 5,
}

impl MapRefusal {
    fn from_code(code: u32) -> MapRefusal {
        match code {
            1 => MapRefusal::NotFound,
            2 => MapRefusal::Busy,
            3 => MapRefusal::NotPages,
            4 => MapRefusal::NotPermitted,
            _ => MapRefusal::Failed,
        }
    }

    /// The I/O error kind the host reports it as.
    pub fn kind(self) -> std::io::ErrorKind {
        match self {
            MapRefusal::NotFound => std::io::ErrorKind::NotFound,
            MapRefusal::Busy => std::io::ErrorKind::ResourceBusy,
            MapRefusal::NotPages => std::io::ErrorKind::InvalidInput,
            MapRefusal::NotPermitted => std::io::ErrorKind::PermissionDenied,
            MapRefusal::Failed => std::io::ErrorKind::Other,
        }
    }
}

/// The answer to a map request: the handle, then granted or a refusal with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapReply {
    pub handle: u32,
    pub outcome: Result<(), (MapRefusal, String)>,
}

impl MapReply {
    /// The magic, handle (u32 LE), code (u32 LE: 0 or a [`MapRefusal`]), message length
    /// (u32 LE), the message (UTF-8, cut to fit), zero padding.
    pub fn encode(&self) -> [u8; MAP_REPLY_SIZE] {
        let mut b = [0u8; MAP_REPLY_SIZE];
        b[..8].copy_from_slice(MAP_REPLY_MAGIC);
        b[8..12].copy_from_slice(&self.handle.to_le_bytes());
        if let Err((why, message)) = &self.outcome {
            b[12..16].copy_from_slice(&(*why as u32).to_le_bytes());
            let mut n = message.len().min(MAP_REPLY_SIZE - 20);
            while !message.is_char_boundary(n) {
                n -= 1;
            }
            b[16..20].copy_from_slice(&(n as u32).to_le_bytes());
            b[20..20 + n].copy_from_slice(&message.as_bytes()[..n]);
        }
        b
    }

    /// Whether `b` starts like a map reply.
    pub fn is_reply(b: &[u8]) -> bool {
        b.len() >= 8 && &b[..8] == MAP_REPLY_MAGIC
    }

    /// A reply from its first [`MAP_REPLY_SIZE`] bytes, or `None` when malformed.
    pub fn decode(b: &[u8]) -> Option<MapReply> {
        if b.len() < MAP_REPLY_SIZE || !MapReply::is_reply(b) {
            return None;
        }
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let (handle, code, n) = (word(8), word(12), word(16) as usize);
        if code == 0 {
            return Some(MapReply {
                handle,
                outcome: Ok(()),
            });
        }
        let text = b.get(20..20 + n)?;
        Some(MapReply {
            handle,
            outcome: Err((
                MapRefusal::from_code(code),
                String::from_utf8_lossy(text).into_owned(),
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_round_trips() {
        let h = Hello {
            queue_depth: 8,
            host_memory_bytes: 1 << 20,
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[30] = 1;
        assert!(Hello::decode(&bad).is_err());
        let w = Welcome {
            status: WelcomeStatus::Unavailable,
            queue_depth: 0,
            queue_id: 0,
            region_bytes: 0,
            message: "64 queue pairs are open".into(),
        };
        assert_eq!(Welcome::decode(&w.encode()).unwrap(), w);
    }

    #[test]
    fn layout_is_checked_against_the_region() {
        let l = Layout::new(100, 3, 1 << 20);
        assert_eq!(l.sq_entries, 128);
        assert_eq!(l.heap_offset % 4096, 0);
        let b = l.encode();
        assert_eq!(Layout::decode(&b, l.region_bytes()).unwrap(), l);
        assert!(Layout::decode(&b, l.region_bytes() - 4096).is_err());
        let mut bent = b;
        bent[40] ^= 0x10;
        assert!(Layout::decode(&bent, l.region_bytes()).is_err());
        // Found by fuzzing: a huge depth or heap is refused, not overflowed.
        let mut deep = b;
        deep[60..64].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Layout::decode(&deep, l.region_bytes()),
            Err(ShmFramingError::TooLarge {
                field: "queue depth",
                ..
            })
        ));
        let mut huge = b;
        huge[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            Layout::decode(&huge, l.region_bytes()),
            Err(ShmFramingError::TooLarge {
                field: "heap size",
                ..
            })
        ));
    }

    #[test]
    fn entries_round_trip() {
        let s = Sqe {
            queue_id: 9,
            frame: SqeFrame::Inline(vec![1, 2, 3]),
            data: Span {
                offset: 8192,
                len: 4096,
            },
            response: Span {
                offset: 65536,
                len: 32768,
            },
        };
        assert_eq!(Sqe::decode(&s.encode()).unwrap(), s);
        let o = Sqe {
            frame: SqeFrame::OutOfLine(Span {
                offset: 4096,
                len: 100_000,
            }),
            ..s
        };
        assert_eq!(Sqe::decode(&o.encode()).unwrap(), o);
        let mut bad = o.encode();
        bad[0] = 0x80;
        assert!(Sqe::decode(&bad).is_err());
        let mut long = [0u8; SQE_SIZE];
        long[8] = 0xff;
        assert!(
            Sqe::decode(&long).is_err(),
            "inline frame longer than the entry"
        );
        let c = Cqe {
            cid: 77,
            flags: CQE_DATA_IN_BUFFER,
            frame_len: 3,
            data_len: 4096,
            inline: vec![9, 9, 9],
        };
        assert_eq!(Cqe::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn map_messages_round_trip() {
        let rq = encode_map_request(7);
        assert_eq!(decode_map_request(&rq), Some(7));
        let mut bad = rq;
        bad[0] = b'X';
        assert_eq!(decode_map_request(&bad), None);
        assert_eq!(decode_map_request(&rq[..15]), None);
        let ok = MapReply {
            handle: 9,
            outcome: Ok(()),
        };
        assert_eq!(MapReply::decode(&ok.encode()), Some(ok));
        let long = "é".repeat(400);
        let no = MapReply {
            handle: 3,
            outcome: Err((MapRefusal::Busy, long)),
        };
        let back = MapReply::decode(&no.encode()).unwrap();
        let (why, text) = back.outcome.unwrap_err();
        assert_eq!(why, MapRefusal::Busy);
        assert!(text.len() <= MAP_REPLY_SIZE - 20 && text.chars().all(|c| c == 'é'));
    }
}
