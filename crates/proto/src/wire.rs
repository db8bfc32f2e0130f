//! The binary wire encoding of commands and completions (byte tables in
//! `docs/design/wire.md`).
//!
//! Little-endian throughout. A frame is a fixed header followed by a body whose
//! length the header states. Variable fields are length-prefixed (`u32`), lists are
//! count-prefixed (`u32`).
//!
//! Invariants:
//! * The decoder checks every length and count it reads against its limit and against
//!   the bytes actually left *before* allocating, so no input makes it allocate more
//!   than the input's own size (plus small constants) or panic.
//! * Encoding validates the command or completion first and decoding validates the
//!   result again (pair assertions): only values that pass `validate` cross the wire.

use crate::command::*;
use crate::completion::*;
use crate::ids::*;
use crate::limits::*;
use crate::status::Status;

/// Version byte of every frame; a decoder refuses others.
pub const WIRE_VERSION: u8 = 1;

/// Bytes of a command header: opcode, version, reserved, body length, command id.
pub const COMMAND_HEADER_SIZE: usize = 16;

/// Bytes of a completion header: status, version, flags, reply kind, body length,
/// command id, value and six timing fields.
pub const COMPLETION_HEADER_SIZE: usize = 72;

const FLAG_TRAP: u8 = 1;
const FLAG_DETAIL: u8 = 2;
const FLAGS_KNOWN: u8 = FLAG_TRAP | FLAG_DETAIL;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("frame truncated: {field} needs {needed} bytes, {remaining} remain")]
    Truncated {
        field: &'static str,
        needed: u64,
        remaining: u64,
    },
    #[error("frame has {count} trailing bytes after its body")]
    TrailingBytes { count: usize },
    #[error("frame of {len} bytes exceeds the limit of {limit}")]
    FrameTooLarge { len: u64, limit: u64 },
    #[error("header says the body has {declared} bytes, the frame has {actual}")]
    BodyLength { declared: u64, actual: u64 },
    #[error("wire version {version}, expected {WIRE_VERSION}")]
    Version { version: u8 },
    #[error("unknown opcode {opcode:#04x}")]
    UnknownOpcode { opcode: u8 },
    #[error("unknown status code {code:#04x}")]
    UnknownStatus { code: u8 },
    #[error("{field} has unknown tag {value}")]
    BadTag { field: &'static str, value: u64 },
    #[error("{field} has {len} bytes, limit is {limit}")]
    TooLong {
        field: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("{field} has {count} entries, limit is {limit}")]
    TooMany {
        field: &'static str,
        count: u64,
        limit: u64,
    },
    #[error("{field} is not valid UTF-8")]
    Utf8 { field: &'static str },
    #[error("reserved field {field} is {value}, must be 0")]
    Reserved { field: &'static str, value: u64 },
    #[error("invalid field: {0}")]
    Invalid(#[from] FieldError),
}

/// Header fields a transport reads to size and route a command frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandHeader {
    pub opcode: u8,
    pub body_len: u32,
    pub id: CommandId,
}

impl CommandHeader {
    /// Bytes of the whole frame.
    pub fn frame_len(&self) -> usize {
        COMMAND_HEADER_SIZE + self.body_len as usize
    }
}

// ---------------------------------------------------------------------------------
// Writer and reader.

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    fn bool(&mut self, v: bool) {
        self.out.push(u8::from(v));
    }
    fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        // Every length encoded was validated against a limit below u32::MAX.
        let n = u32::try_from(n).expect("validated lengths fit in u32");
        self.u32(n);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.out.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated {
                field,
                needed: n as u64,
                remaining: self.remaining() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let s = self.take(field, N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(field)?[0])
    }
    fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::BadTag {
                field,
                value: u64::from(v),
            }),
        }
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
    fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    /// A length-prefixed byte string of at most `limit` bytes; checked against the
    /// limit and the bytes left before anything is allocated.
    fn bytes(&mut self, field: &'static str, limit: usize) -> Result<Vec<u8>, WireError> {
        let len = self.u32(field)? as usize;
        if len > limit {
            return Err(WireError::TooLong {
                field,
                len: len as u64,
                limit: limit as u64,
            });
        }
        Ok(self.take(field, len)?.to_vec())
    }

    fn str(&mut self, field: &'static str, limit: usize) -> Result<String, WireError> {
        let len = self.u32(field)? as usize;
        if len > limit {
            return Err(WireError::TooLong {
                field,
                len: len as u64,
                limit: limit as u64,
            });
        }
        let b = self.take(field, len)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| WireError::Utf8 { field })
    }

    /// A list count of at most `limit` entries of at least `item_size_min` bytes each;
    /// checked so that a count cannot promise more entries than the bytes left hold.
    fn count(
        &mut self,
        field: &'static str,
        limit: usize,
        item_size_min: usize,
    ) -> Result<usize, WireError> {
        debug_assert!(item_size_min > 0);
        let count = self.u32(field)? as usize;
        if count > limit {
            return Err(WireError::TooMany {
                field,
                count: count as u64,
                limit: limit as u64,
            });
        }
        let needed = count.saturating_mul(item_size_min);
        if needed > self.remaining() {
            return Err(WireError::Truncated {
                field,
                needed: needed as u64,
                remaining: self.remaining() as u64,
            });
        }
        Ok(count)
    }

    fn finish(&self) -> Result<(), WireError> {
        if self.remaining() != 0 {
            return Err(WireError::TrailingBytes {
                count: self.remaining(),
            });
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Commands.

/// Encodes `cmd`, after validating it.
pub fn encode_command(cmd: &Command) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(COMMAND_HEADER_SIZE + 64 + cmd.op.data_len());
    encode_command_into(cmd, &mut out)?;
    Ok(out)
}

/// Appends the encoding of `cmd` to `out`, after validating it.
pub fn encode_command_into(cmd: &Command, out: &mut Vec<u8>) -> Result<(), WireError> {
    cmd.validate()?;
    let start = out.len();
    let mut w = Writer { out };
    w.u8(cmd.op.opcode());
    w.u8(WIRE_VERSION);
    w.u16(0);
    w.u32(0); // Body length, patched below.
    w.u64(cmd.id.0);
    encode_op(&mut w, &cmd.op);
    let body_len = out.len() - start - COMMAND_HEADER_SIZE;
    assert!(
        out.len() - start <= FRAME_SIZE_MAX,
        "a valid command fits in a frame"
    );
    out[start + 4..start + 8].copy_from_slice(&(body_len as u32).to_le_bytes());
    Ok(())
}

fn encode_range(w: &mut Writer<'_>, r: &MemRange) {
    w.u32(r.handle.0);
    w.u64(r.offset);
    w.u64(r.len);
}

const RANGE_SIZE: usize = 20;

// One arm per opcode, each the field list of docs/design/wire.md in order: split into
// groups, the table would live in several places and the order would be harder to check.
#[allow(clippy::too_many_lines)]
fn encode_op(w: &mut Writer<'_>, op: &Op) {
    match op {
        Op::Identify
        | Op::ListFunctions
        | Op::ListPrograms
        | Op::ListProgramsWithGenerations
        | Op::Flush => {}
        Op::LoadProgram {
            pind,
            ptype,
            total_size_bytes,
            offset,
            data,
            entry,
        } => {
            w.u16(pind.0);
            w.u8(program_type_code(*ptype));
            w.bool(entry.is_some());
            w.u32(*total_size_bytes);
            w.u32(*offset);
            if let Some(e) = entry {
                w.str(e);
            }
            w.bytes(data);
        }
        Op::UnloadProgram { pind, generation } => encode_slot(w, *pind, *generation),
        Op::DeactivateProgram { pind } => encode_slot(w, *pind, None),
        Op::PersistProgram { pind, name } => {
            w.u16(pind.0);
            w.str(name);
        }
        Op::ActivateProgram { pind, engine } => {
            w.u16(pind.0);
            w.u8(engine_code(*engine));
        }
        Op::RangeSetCreate { ranges } => {
            w.len(ranges.len());
            ranges.iter().for_each(|r| encode_range(w, r));
        }
        Op::RangeSetDelete { rsid } => w.u16(rsid.0),
        Op::ClearState { offset, len } => {
            w.u64(*offset);
            w.u64(*len);
        }
        Op::MemAlloc { size_bytes } => w.u64(*size_bytes),
        Op::MemFree { handle } => w.u32(handle.0),
        Op::MemWrite {
            handle,
            offset,
            data,
        } => {
            w.u32(handle.0);
            w.u64(*offset);
            w.bytes(data);
        }
        Op::MemRead {
            handle,
            offset,
            len,
        } => {
            w.u32(handle.0);
            w.u64(*offset);
            w.u64(*len);
        }
        Op::MemFill {
            handle,
            offset,
            len,
            byte,
        } => {
            w.u32(handle.0);
            w.u8(*byte);
            w.u64(*offset);
            w.u64(*len);
        }
        Op::MemCopy {
            dst,
            dst_offset,
            sources,
        } => {
            w.u32(dst.0);
            w.u64(*dst_offset);
            w.len(sources.len());
            for s in sources {
                encode_source(w, s);
            }
        }
        Op::Execute {
            pind,
            windows,
            cparam1,
            cparam2,
            params,
            fuel,
            time_limit_ms,
            generation,
        } => {
            w.u16(pind.0);
            let (tag, rsid, ranges): (u8, u16, &[MemRange]) = match windows {
                Windows::Inline(r) => (0, 0, r),
                Windows::RangeSet(id) => (1, id.0, &[]),
            };
            w.u8(tag);
            let mut flags = 0;
            if fuel.is_some() {
                flags |= EXECUTE_HAS_FUEL;
            }
            if time_limit_ms.is_some() {
                flags |= EXECUTE_HAS_TIME_LIMIT;
            }
            if generation.is_some() {
                flags |= EXECUTE_HAS_GENERATION;
            }
            w.u8(flags);
            w.u16(rsid);
            w.u64(*cparam1);
            w.u64(*cparam2);
            w.u64(fuel.unwrap_or(0));
            w.len(ranges.len());
            ranges.iter().for_each(|r| encode_range(w, r));
            w.bytes(params);
            if let Some(ms) = time_limit_ms {
                w.u32(*ms);
            }
            if let Some(g) = generation {
                w.u64(*g);
            }
        }
        Op::Abort { target } => w.u64(target.0),
        Op::FileWrite {
            path,
            offset,
            data,
            mode,
        } => {
            w.u8(write_mode_code(*mode));
            w.u64(*offset);
            w.str(path);
            w.bytes(data);
        }
        Op::FileRead { path, offset, len } => {
            w.u64(*offset);
            w.u64(*len);
            w.str(path);
        }
        Op::FileList { dir } => w.str(dir),
        Op::FileStat { path } | Op::FileDelete { path } | Op::FileExtents { path } => w.str(path),
        Op::FileTruncate { path, size_bytes } => {
            w.u64(*size_bytes);
            w.str(path);
        }
        Op::FileWriteFromMem { path, offset, src } => {
            w.u64(*offset);
            encode_range(w, src);
            w.str(path);
        }
        Op::DirCreate { path } | Op::DirRemove { path } | Op::PathStat { path } => w.str(path),
        Op::FileRename { from, to } => {
            w.str(from);
            w.str(to);
        }
        Op::DirRead { dir, after, max } => {
            w.u32(*max);
            w.str(dir);
            w.str(after);
        }
    }
}

fn encode_source(w: &mut Writer<'_>, s: &CopySource) {
    match s {
        CopySource::File { path, offset, len } => {
            w.u8(0);
            w.u64(*offset);
            w.u64(*len);
            w.str(path);
        }
        CopySource::ResidentFile { path, offset, len } => {
            w.u8(4);
            w.u64(*offset);
            w.u64(*len);
            w.str(path);
        }
        CopySource::Nvm { offset, len } => {
            w.u8(1);
            w.u64(*offset);
            w.u64(*len);
        }
        CopySource::Mem {
            handle,
            offset,
            len,
        } => {
            w.u8(2);
            w.u64(*offset);
            w.u64(*len);
            w.u32(handle.0);
        }
        CopySource::Peer { peer, offset, len } => {
            w.u8(3);
            w.u64(*offset);
            w.u64(*len);
            w.str(peer);
        }
    }
}

fn program_type_code(t: ProgramType) -> u8 {
    match t {
        ProgramType::Elf => 0,
        ProgramType::Raw => 1,
    }
}

fn engine_code(e: EngineKind) -> u8 {
    match e {
        EngineKind::Interpreter => 0,
        EngineKind::Jit => 1,
    }
}

fn write_mode_code(m: WriteMode) -> u8 {
    match m {
        WriteMode::Write => 0,
        WriteMode::Truncate => 1,
        WriteMode::CreateNew => 2,
    }
}

/// Reads and checks a command header (a transport uses it to size the frame).
pub fn decode_command_header(buf: &[u8]) -> Result<CommandHeader, WireError> {
    let mut r = Reader::new(buf);
    let opcode = r.u8("opcode")?;
    let version = r.u8("version")?;
    if version != WIRE_VERSION {
        return Err(WireError::Version { version });
    }
    let reserved = r.u16("reserved")?;
    if reserved != 0 {
        return Err(WireError::Reserved {
            field: "reserved",
            value: u64::from(reserved),
        });
    }
    let body_len = r.u32("body length")?;
    let id = CommandId(r.u64("command id")?);
    if COMMAND_HEADER_SIZE as u64 + u64::from(body_len) > FRAME_SIZE_MAX as u64 {
        return Err(WireError::FrameTooLarge {
            len: COMMAND_HEADER_SIZE as u64 + u64::from(body_len),
            limit: FRAME_SIZE_MAX as u64,
        });
    }
    Ok(CommandHeader {
        opcode,
        body_len,
        id,
    })
}

/// Decodes one command frame (exactly: trailing bytes are an error) and validates it.
pub fn decode_command(buf: &[u8]) -> Result<Command, WireError> {
    let header = decode_command_header(buf)?;
    let body = &buf[COMMAND_HEADER_SIZE.min(buf.len())..];
    if body.len() as u64 != u64::from(header.body_len) {
        return Err(WireError::BodyLength {
            declared: u64::from(header.body_len),
            actual: body.len() as u64,
        });
    }
    let mut r = Reader::new(body);
    let op = decode_op(&mut r, header.opcode)?;
    r.finish()?;
    let cmd = Command { id: header.id, op };
    cmd.validate()?;
    Ok(cmd)
}

fn decode_pind(r: &mut Reader<'_>) -> Result<ProgramIndex, WireError> {
    Ok(ProgramIndex(r.u16("pind")?))
}

fn decode_range(r: &mut Reader<'_>) -> Result<MemRange, WireError> {
    Ok(MemRange {
        handle: MemHandle(r.u32("range handle")?),
        offset: r.u64("range offset")?,
        len: r.u64("range length")?,
    })
}

fn decode_ranges(r: &mut Reader<'_>) -> Result<Vec<MemRange>, WireError> {
    let n = r.count("ranges", RANGES_PER_SET_MAX, RANGE_SIZE)?;
    (0..n).map(|_| decode_range(r)).collect()
}

// The mirror of `encode_op`, one arm per opcode, kept in the same order so the pair
// reads side by side.
#[allow(clippy::too_many_lines)]
fn decode_op(r: &mut Reader<'_>, opcode: u8) -> Result<Op, WireError> {
    let op = match opcode {
        0x01 => Op::Identify,
        0x02 => Op::ListFunctions,
        0x03 => Op::ListPrograms,
        0x0E => Op::ListProgramsWithGenerations,
        0x04 => decode_load(r)?,
        0x05 => decode_unload(r)?,
        0x06 => Op::ActivateProgram {
            pind: decode_pind(r)?,
            engine: match r.u8("engine")? {
                0 => EngineKind::Interpreter,
                1 => EngineKind::Jit,
                v => {
                    return Err(WireError::BadTag {
                        field: "engine",
                        value: u64::from(v),
                    })
                }
            },
        },
        0x07 => Op::DeactivateProgram {
            pind: decode_pind(r)?,
        },
        0x08 => Op::RangeSetCreate {
            ranges: decode_ranges(r)?,
        },
        0x09 => Op::RangeSetDelete {
            rsid: RangeSetId(r.u16("rsid")?),
        },
        0x0A => Op::ClearState {
            offset: r.u64("offset")?,
            len: r.u64("length")?,
        },
        0x0B => Op::Flush,
        0x0D => Op::PersistProgram {
            pind: decode_pind(r)?,
            name: r.str("program name", crate::command::PROGRAM_NAME_SIZE_MAX)?,
        },
        0x0C => Op::Abort {
            target: CommandId(r.u64("target command id")?),
        },
        0x10 => Op::MemAlloc {
            size_bytes: r.u64("size")?,
        },
        0x11 => Op::MemFree {
            handle: MemHandle(r.u32("handle")?),
        },
        0x12 => Op::MemWrite {
            handle: MemHandle(r.u32("handle")?),
            offset: r.u64("offset")?,
            data: r.bytes("data", MEM_IO_SIZE_MAX as usize)?,
        },
        0x13 => Op::MemRead {
            handle: MemHandle(r.u32("handle")?),
            offset: r.u64("offset")?,
            len: r.u64("length")?,
        },
        0x14 => {
            let handle = MemHandle(r.u32("handle")?);
            let byte = r.u8("byte")?;
            Op::MemFill {
                handle,
                byte,
                offset: r.u64("offset")?,
                len: r.u64("length")?,
            }
        }
        0x15 => decode_copy(r)?,
        0x20 => decode_execute(r)?,
        0x30 => {
            let mode = match r.u8("mode")? {
                0 => WriteMode::Write,
                1 => WriteMode::Truncate,
                2 => WriteMode::CreateNew,
                v => {
                    return Err(WireError::BadTag {
                        field: "mode",
                        value: u64::from(v),
                    })
                }
            };
            let offset = r.u64("offset")?;
            let path = r.str("path", PATH_SIZE_MAX)?;
            Op::FileWrite {
                path,
                offset,
                data: r.bytes("data", FILE_IO_SIZE_MAX as usize)?,
                mode,
            }
        }
        0x31 => {
            let offset = r.u64("offset")?;
            let len = r.u64("length")?;
            Op::FileRead {
                path: r.str("path", PATH_SIZE_MAX)?,
                offset,
                len,
            }
        }
        0x32 => Op::FileList {
            dir: r.str("dir", PATH_SIZE_MAX)?,
        },
        0x33 => Op::FileStat {
            path: r.str("path", PATH_SIZE_MAX)?,
        },
        0x34 => Op::FileDelete {
            path: r.str("path", PATH_SIZE_MAX)?,
        },
        0x35 => {
            let size_bytes = r.u64("size")?;
            Op::FileTruncate {
                path: r.str("path", PATH_SIZE_MAX)?,
                size_bytes,
            }
        }
        0x36 => Op::FileExtents {
            path: r.str("path", PATH_SIZE_MAX)?,
        },
        0x37 => {
            let offset = r.u64("offset")?;
            let src = decode_range(r)?;
            Op::FileWriteFromMem {
                path: r.str("path", PATH_SIZE_MAX)?,
                offset,
                src,
            }
        }
        0x38 => Op::DirCreate {
            path: r.str("path", PATH_SIZE_MAX)?,
        },
        0x39 => Op::DirRemove {
            path: r.str("path", PATH_SIZE_MAX)?,
        },
        0x3A => Op::FileRename {
            from: r.str("from", PATH_SIZE_MAX)?,
            to: r.str("to", PATH_SIZE_MAX)?,
        },
        0x3B => {
            let max = r.u32("max")?;
            Op::DirRead {
                dir: r.str("dir", PATH_SIZE_MAX)?,
                after: r.str("after", PATH_SIZE_MAX)?,
                max,
            }
        }
        0x3C => Op::PathStat {
            path: r.str("path", PATH_SIZE_MAX)?,
        },
        _ => return Err(WireError::UnknownOpcode { opcode }),
    };
    Ok(op)
}

fn decode_load(r: &mut Reader<'_>) -> Result<Op, WireError> {
    let pind = decode_pind(r)?;
    let ptype = match r.u8("ptype")? {
        0 => ProgramType::Elf,
        1 => ProgramType::Raw,
        v => {
            return Err(WireError::BadTag {
                field: "ptype",
                value: u64::from(v),
            })
        }
    };
    let has_entry = r.bool("has entry")?;
    let total_size_bytes = r.u32("total size")?;
    let offset = r.u32("offset")?;
    let entry = if has_entry {
        Some(r.str("entry", NAME_SIZE_MAX)?)
    } else {
        None
    };
    let data = r.bytes("chunk", LOAD_CHUNK_SIZE_MAX as usize)?;
    Ok(Op::LoadProgram {
        pind,
        ptype,
        total_size_bytes,
        offset,
        data,
        entry,
    })
}

fn decode_copy(r: &mut Reader<'_>) -> Result<Op, WireError> {
    let dst = MemHandle(r.u32("destination handle")?);
    let dst_offset = r.u64("destination offset")?;
    // The smallest source (NVM) is a tag and two u64s.
    let n = r.count("sources", COPY_SOURCES_MAX, 17)?;
    let mut sources = Vec::with_capacity(n);
    for _ in 0..n {
        let tag = r.u8("source tag")?;
        let offset = r.u64("source offset")?;
        let len = r.u64("source length")?;
        sources.push(match tag {
            0 => CopySource::File {
                path: r.str("source path", PATH_SIZE_MAX)?,
                offset,
                len,
            },
            1 => CopySource::Nvm { offset, len },
            2 => CopySource::Mem {
                handle: MemHandle(r.u32("source handle")?),
                offset,
                len,
            },
            3 => CopySource::Peer {
                peer: r.str("source peer", PATH_SIZE_MAX)?,
                offset,
                len,
            },
            4 => CopySource::ResidentFile {
                path: r.str("source path", PATH_SIZE_MAX)?,
                offset,
                len,
            },
            v => {
                return Err(WireError::BadTag {
                    field: "source tag",
                    value: u64::from(v),
                })
            }
        });
    }
    Ok(Op::MemCopy {
        dst,
        dst_offset,
        sources,
    })
}

/// A slot, and the generation of the program meant in it when one is named (an
/// Unload's body; see [`decode_unload`]).
fn encode_slot(w: &mut Writer<'_>, pind: ProgramIndex, generation: Option<u64>) {
    w.u16(pind.0);
    if let Some(g) = generation {
        w.u64(g);
    }
}

/// An Unload's body is its slot, then (when the caller names one) the generation of
/// the program it means: a frame without one is the frame it was before generations,
/// and a decoder that predates them refuses one with it as trailing bytes instead of
/// unloading whatever the slot holds.
fn decode_unload(r: &mut Reader<'_>) -> Result<Op, WireError> {
    let pind = decode_pind(r)?;
    let generation = if r.remaining() == 0 {
        None
    } else {
        Some(r.u64("program generation")?)
    };
    Ok(Op::UnloadProgram { pind, generation })
}

/// Bit of Execute's flags byte: a fuel budget is given.
const EXECUTE_HAS_FUEL: u8 = 1;
/// Bit of Execute's flags byte: a time limit follows the parameter bytes.
const EXECUTE_HAS_TIME_LIMIT: u8 = 2;
/// Bit of Execute's flags byte: the program generation the run is meant for follows
/// (after the time limit, when there is one).
const EXECUTE_HAS_GENERATION: u8 = 4;

/// An Execute's windows from its tag, its rsid and its inline ranges (only one of the
/// two may name windows).
fn execute_windows(tag: u8, rsid: u16, ranges: Vec<MemRange>) -> Result<Windows, WireError> {
    match tag {
        0 => {
            if rsid != 0 {
                return Err(WireError::Reserved {
                    field: "rsid",
                    value: u64::from(rsid),
                });
            }
            Ok(Windows::Inline(ranges))
        }
        1 => {
            if !ranges.is_empty() {
                return Err(WireError::TooMany {
                    field: "ranges with rsid",
                    count: ranges.len() as u64,
                    limit: 0,
                });
            }
            Ok(Windows::RangeSet(RangeSetId(rsid)))
        }
        v => Err(WireError::BadTag {
            field: "windows tag",
            value: u64::from(v),
        }),
    }
}

fn decode_execute(r: &mut Reader<'_>) -> Result<Op, WireError> {
    let pind = decode_pind(r)?;
    let tag = r.u8("windows tag")?;
    let flags = r.u8("execute flags")?;
    let unknown = flags & !(EXECUTE_HAS_FUEL | EXECUTE_HAS_TIME_LIMIT | EXECUTE_HAS_GENERATION);
    if unknown != 0 {
        return Err(WireError::Reserved {
            field: "execute flags",
            value: u64::from(unknown),
        });
    }
    let has_fuel = flags & EXECUTE_HAS_FUEL != 0;
    let rsid = r.u16("rsid")?;
    let cparam1 = r.u64("cparam1")?;
    let cparam2 = r.u64("cparam2")?;
    let fuel_raw = r.u64("fuel")?;
    let windows = execute_windows(tag, rsid, decode_ranges(r)?)?;
    if !has_fuel && fuel_raw != 0 {
        return Err(WireError::Reserved {
            field: "fuel",
            value: fuel_raw,
        });
    }
    let params = r.bytes("params", PARAMS_SIZE_MAX)?;
    let fuel = has_fuel.then_some(fuel_raw);
    let time_limit_ms = if flags & EXECUTE_HAS_TIME_LIMIT != 0 {
        Some(r.u32("time limit (ms)")?)
    } else {
        None
    };
    let generation = if flags & EXECUTE_HAS_GENERATION != 0 {
        Some(r.u64("program generation")?)
    } else {
        None
    };
    Ok(Op::Execute {
        pind,
        windows,
        cparam1,
        cparam2,
        params,
        fuel,
        time_limit_ms,
        generation,
    })
}

// ---------------------------------------------------------------------------------
// Completions.

/// Encodes `c`, after validating it.
pub fn encode_completion(c: &Completion) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(COMPLETION_HEADER_SIZE + 64);
    encode_completion_into(c, &mut out)?;
    Ok(out)
}

/// Appends the encoding of `c` to `out`, after validating it.
pub fn encode_completion_into(c: &Completion, out: &mut Vec<u8>) -> Result<(), WireError> {
    c.validate()?;
    let start = out.len();
    let mut w = Writer { out };
    w.u8(c.status.code());
    w.u8(WIRE_VERSION);
    let flags = if c.trap.is_some() { FLAG_TRAP } else { 0 }
        | if c.detail.is_some() { FLAG_DETAIL } else { 0 };
    w.u8(flags);
    w.u8(reply_kind(&c.reply));
    w.u32(0); // Body length, patched below.
    w.u64(c.id.0);
    w.u64(c.value);
    for v in [
        c.timing.queued_ns,
        c.timing.transfer_ns,
        c.timing.prepare_ns,
        c.timing.execute_ns,
        c.timing.total_ns,
        c.timing.modelled_ns,
    ] {
        w.u64(v);
    }
    if let Some(t) = &c.trap {
        encode_trap(&mut w, t);
    }
    if let Some(d) = &c.detail {
        w.u64(d.code as u64);
        w.str(&d.function);
        w.str(&d.message);
    }
    encode_reply(&mut w, &c.reply);
    let body_len = out.len() - start - COMPLETION_HEADER_SIZE;
    assert!(
        out.len() - start <= FRAME_SIZE_MAX,
        "a valid completion fits in a frame"
    );
    out[start + 4..start + 8].copy_from_slice(&(body_len as u32).to_le_bytes());
    Ok(())
}

fn reply_kind(r: &Reply) -> u8 {
    match r {
        Reply::None => 0,
        Reply::Data(_) => 1,
        Reply::Device(_) => 2,
        Reply::Functions(_) => 3,
        // A listing with generations is its own kind, so a decoder that predates
        // generations refuses it (`BadTag`) instead of misreading it; it is sent only
        // to the command that asks for one (`Op::ListProgramsWithGenerations`).
        Reply::Programs(ps) if ps.iter().any(|p| p.generation.is_some()) => 11,
        Reply::Programs(_) => 4,
        Reply::Files { .. } => 5,
        Reply::File(_) => 6,
        Reply::Extents { .. } => 7,
        Reply::Execute(_) => 8,
        Reply::Entries { .. } => 9,
        Reply::Copied { .. } => 10,
    }
}

fn encode_trap(w: &mut Writer<'_>, t: &WireTrap) {
    w.u32(t.pc);
    match &t.kind {
        WireTrapKind::OutOfBounds { addr, size, write } => {
            w.u8(0);
            w.u64(*addr);
            w.u32(*size);
            w.bool(*write);
        }
        WireTrapKind::ReadOnly { addr, size } => {
            w.u8(1);
            w.u64(*addr);
            w.u32(*size);
        }
        WireTrapKind::FuelExhausted { budget } => {
            w.u8(2);
            w.u64(*budget);
        }
        WireTrapKind::CallDepthExceeded { depth_max } => {
            w.u8(3);
            w.u32(*depth_max);
        }
        WireTrapKind::UnknownHelper { id } => {
            w.u8(4);
            w.u64(*id as u64);
        }
        WireTrapKind::HelperArgument {
            helper,
            arg,
            addr,
            len,
        } => {
            w.u8(5);
            w.u32(*helper);
            w.u8(*arg);
            w.u64(*addr);
            w.u64(*len);
        }
        WireTrapKind::HelperAbort {
            helper,
            code,
            message,
        } => {
            w.u8(6);
            w.u32(*helper);
            w.u64(*code as u64);
            w.str(message);
        }
        WireTrapKind::Other { message } => {
            w.u8(7);
            w.str(message);
        }
    }
}

fn encode_file_info(w: &mut Writer<'_>, f: &FileInfo) {
    w.u64(f.size_bytes);
    w.u32(f.extent_count);
    w.str(&f.path);
}

fn encode_reply(w: &mut Writer<'_>, reply: &Reply) {
    match reply {
        Reply::None => {}
        Reply::Data(d) => w.bytes(d),
        Reply::Device(i) => encode_device_info(w, i),
        Reply::Functions(fs) => {
            w.len(fs.len());
            for f in fs {
                w.u32(f.id.0);
                w.u32(f.version);
                w.len(f.args.len());
                for a in &f.args {
                    let (tag, len_arg) = match *a {
                        WireArgKind::Scalar => (0, 0),
                        WireArgKind::PtrIn { len_arg } => (1, len_arg),
                        WireArgKind::PtrOut { len_arg } => (2, len_arg),
                    };
                    w.u8(tag);
                    w.u8(len_arg);
                }
                w.str(&f.name);
                w.str(&f.c_decl);
                w.str(&f.doc);
            }
        }
        Reply::Programs(ps) => {
            w.len(ps.len());
            for p in ps {
                w.u16(p.pind.0);
                w.u8(match p.state {
                    ProgramState::Empty => 0,
                    ProgramState::Loading => 1,
                    ProgramState::Loaded => 2,
                    ProgramState::Active => 3,
                });
                w.u8(program_type_code(p.ptype));
                w.u8(match p.engine {
                    None => 0,
                    Some(EngineKind::Interpreter) => 1,
                    Some(EngineKind::Jit) => 2,
                });
                w.u32(p.size_bytes);
                w.u32(p.loaded_bytes);
                w.u64(p.executions);
                w.str(&p.name);
                w.u32(p.owner.map_or(0, |c| c.0));
                w.bool(p.persistent.is_some());
                if let Some(name) = &p.persistent {
                    w.str(name);
                }
                if let Some(g) = p.generation {
                    w.u64(g);
                }
            }
        }
        Reply::Files { files, truncated } => {
            w.bool(*truncated);
            w.len(files.len());
            files.iter().for_each(|f| encode_file_info(w, f));
        }
        Reply::File(f) => encode_file_info(w, f),
        Reply::Copied { resident_bytes } => w.u64(*resident_bytes),
        Reply::Entries { entries, truncated } => {
            w.bool(*truncated);
            w.len(entries.len());
            for e in entries {
                w.u8(match e.kind {
                    EntryKind::File => 0,
                    EntryKind::Dir => 1,
                });
                w.u64(e.size_bytes);
                w.u64(e.modified_ns);
                w.str(&e.name);
            }
        }
        Reply::Extents { extents, truncated } => {
            w.bool(*truncated);
            w.len(extents.len());
            for e in extents {
                w.u64(e.file_offset);
                w.u64(e.nvm_offset);
                w.u64(e.len);
            }
        }
        Reply::Execute(e) => {
            w.u64(e.fuel_used);
            w.len(e.trace.len());
            e.trace.iter().for_each(|t| w.str(t));
            w.len(e.work.len());
            e.work.iter().for_each(|&n| w.u64(n));
        }
    }
}

fn encode_device_info(w: &mut Writer<'_>, i: &DeviceInfo) {
    w.u32(i.abi_version);
    w.u64(i.nvm_size_bytes);
    w.u64(i.slm_size_bytes);
    w.u64(i.slm_free_bytes);
    w.u64(i.state_size_bytes);
    w.u32(i.engines);
    w.u16(i.program_slots);
    w.u16(i.programs_active_max);
    w.u16(i.range_sets_max);
    w.u16(i.ranges_per_set_max);
    w.u32(i.params_size_max);
    w.u32(i.program_size_max);
    w.u32(i.load_chunk_size_max);
    w.u64(i.mem_io_size_max);
    w.u64(i.file_io_size_max);
    w.u32(i.queue_depth_max);
    w.u64(i.fuel_default);
    w.bool(i.jit);
    w.str(&i.version);
}

/// Decodes one completion frame (exactly) and validates it.
pub fn decode_completion(buf: &[u8]) -> Result<Completion, WireError> {
    let mut r = Reader::new(buf);
    let code = r.u8("status")?;
    let status = Status::from_code(code).ok_or(WireError::UnknownStatus { code })?;
    let version = r.u8("version")?;
    if version != WIRE_VERSION {
        return Err(WireError::Version { version });
    }
    let flags = r.u8("flags")?;
    if flags & !FLAGS_KNOWN != 0 {
        return Err(WireError::Reserved {
            field: "flags",
            value: u64::from(flags & !FLAGS_KNOWN),
        });
    }
    let kind = r.u8("reply kind")?;
    let body_len = r.u32("body length")?;
    let id = CommandId(r.u64("command id")?);
    let value = r.u64("value")?;
    let timing = Timing {
        queued_ns: r.u64("timing")?,
        transfer_ns: r.u64("timing")?,
        prepare_ns: r.u64("timing")?,
        execute_ns: r.u64("timing")?,
        total_ns: r.u64("timing")?,
        modelled_ns: r.u64("timing")?,
    };
    if COMPLETION_HEADER_SIZE as u64 + u64::from(body_len) > FRAME_SIZE_MAX as u64 {
        return Err(WireError::FrameTooLarge {
            len: COMPLETION_HEADER_SIZE as u64 + u64::from(body_len),
            limit: FRAME_SIZE_MAX as u64,
        });
    }
    if r.remaining() as u64 != u64::from(body_len) {
        return Err(WireError::BodyLength {
            declared: u64::from(body_len),
            actual: r.remaining() as u64,
        });
    }
    let trap = if flags & FLAG_TRAP != 0 {
        Some(decode_trap(&mut r)?)
    } else {
        None
    };
    let detail = if flags & FLAG_DETAIL != 0 {
        let code = r.i64("detail code")?;
        let function = r.str("detail function", NAME_SIZE_MAX)?;
        let message = r.str("detail message", MESSAGE_SIZE_MAX)?;
        Some(ErrorDetail {
            function,
            code,
            message,
        })
    } else {
        None
    };
    let reply = decode_reply(&mut r, kind)?;
    r.finish()?;
    let c = Completion {
        id,
        status,
        value,
        trap,
        detail,
        timing,
        reply,
    };
    c.validate()?;
    Ok(c)
}

fn decode_trap(r: &mut Reader<'_>) -> Result<WireTrap, WireError> {
    let pc = r.u32("trap pc")?;
    let kind = match r.u8("trap kind")? {
        0 => WireTrapKind::OutOfBounds {
            addr: r.u64("addr")?,
            size: r.u32("size")?,
            write: r.bool("write")?,
        },
        1 => WireTrapKind::ReadOnly {
            addr: r.u64("addr")?,
            size: r.u32("size")?,
        },
        2 => WireTrapKind::FuelExhausted {
            budget: r.u64("budget")?,
        },
        3 => WireTrapKind::CallDepthExceeded {
            depth_max: r.u32("depth")?,
        },
        4 => WireTrapKind::UnknownHelper {
            id: r.i64("helper id")?,
        },
        5 => WireTrapKind::HelperArgument {
            helper: r.u32("helper")?,
            arg: r.u8("arg")?,
            addr: r.u64("addr")?,
            len: r.u64("len")?,
        },
        6 => WireTrapKind::HelperAbort {
            helper: r.u32("helper")?,
            code: r.i64("code")?,
            message: r.str("trap message", MESSAGE_SIZE_MAX)?,
        },
        7 => WireTrapKind::Other {
            message: r.str("trap message", MESSAGE_SIZE_MAX)?,
        },
        v => {
            return Err(WireError::BadTag {
                field: "trap kind",
                value: u64::from(v),
            })
        }
    };
    Ok(WireTrap { pc, kind })
}

fn decode_file_info(r: &mut Reader<'_>) -> Result<FileInfo, WireError> {
    let size_bytes = r.u64("file size")?;
    let extent_count = r.u32("extent count")?;
    Ok(FileInfo {
        path: r.str("path", PATH_SIZE_MAX)?,
        size_bytes,
        extent_count,
    })
}

// The mirror of `encode_reply`, one arm per reply kind in the same order.
#[allow(clippy::too_many_lines)]
fn decode_reply(r: &mut Reader<'_>, kind: u8) -> Result<Reply, WireError> {
    let reply = match kind {
        0 => Reply::None,
        1 => Reply::Data(r.bytes("data", PAYLOAD_SIZE_MAX)?),
        2 => Reply::Device(decode_device_info(r)?),
        3 => {
            // id, version, arg count, three empty strings.
            let n = r.count("functions", FUNCTIONS_MAX, 24)?;
            let mut fs = Vec::with_capacity(n);
            for _ in 0..n {
                let id = FunctionId(r.u32("function id")?);
                let version = r.u32("function version")?;
                let nargs = r.count("args", 5, 2)?;
                let mut args = Vec::with_capacity(nargs);
                for _ in 0..nargs {
                    let tag = r.u8("arg kind")?;
                    let len_arg = r.u8("len arg")?;
                    args.push(match tag {
                        0 if len_arg == 0 => WireArgKind::Scalar,
                        1 => WireArgKind::PtrIn { len_arg },
                        2 => WireArgKind::PtrOut { len_arg },
                        _ => {
                            return Err(WireError::BadTag {
                                field: "arg kind",
                                value: u64::from(tag),
                            })
                        }
                    });
                }
                let name = r.str("function name", NAME_SIZE_MAX)?;
                let c_decl = r.str("c_decl", MESSAGE_SIZE_MAX)?;
                let doc = r.str("doc", MESSAGE_SIZE_MAX)?;
                fs.push(FunctionInfo {
                    id,
                    name,
                    args,
                    version,
                    c_decl,
                    doc,
                });
            }
            Reply::Functions(fs)
        }
        4 | 11 => {
            let with_generations = kind == 11;
            let n = r.count("programs", PROGRAM_SLOTS_COUNT as usize, 25)?;
            let mut ps = Vec::with_capacity(n);
            for _ in 0..n {
                let mut p = decode_program_info(r)?;
                if with_generations {
                    p.generation = Some(r.u64("program generation")?);
                }
                ps.push(p);
            }
            Reply::Programs(ps)
        }
        5 => {
            let truncated = r.bool("truncated")?;
            let n = r.count("files", FILE_LIST_ENTRIES_MAX, FileInfo::FIXED_SIZE)?;
            let mut files = Vec::with_capacity(n);
            for _ in 0..n {
                files.push(decode_file_info(r)?);
            }
            Reply::Files { files, truncated }
        }
        6 => Reply::File(decode_file_info(r)?),
        9 => {
            let truncated = r.bool("truncated")?;
            let n = r.count("entries", FILE_LIST_ENTRIES_MAX, DirEntryInfo::FIXED_SIZE)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let kind = match r.u8("entry kind")? {
                    0 => EntryKind::File,
                    1 => EntryKind::Dir,
                    value => {
                        return Err(WireError::BadTag {
                            field: "entry kind",
                            value: u64::from(value),
                        })
                    }
                };
                let size_bytes = r.u64("entry size")?;
                let modified_ns = r.u64("entry time")?;
                entries.push(DirEntryInfo {
                    name: r.str("name", PATH_SIZE_MAX)?,
                    kind,
                    size_bytes,
                    modified_ns,
                });
            }
            Reply::Entries { entries, truncated }
        }
        10 => Reply::Copied {
            resident_bytes: r.u64("resident bytes")?,
        },
        7 => {
            let truncated = r.bool("truncated")?;
            let n = r.count("extents", EXTENTS_MAX, 24)?;
            let mut extents = Vec::with_capacity(n);
            for _ in 0..n {
                extents.push(ExtentInfo {
                    file_offset: r.u64("file offset")?,
                    nvm_offset: r.u64("nvm offset")?,
                    len: r.u64("extent length")?,
                });
            }
            Reply::Extents { extents, truncated }
        }
        8 => {
            let fuel_used = r.u64("fuel used")?;
            let n = r.count("trace", TRACE_MESSAGES_MAX, 4)?;
            let mut trace = Vec::with_capacity(n);
            for _ in 0..n {
                trace.push(r.str("trace message", TRACE_MESSAGE_SIZE_MAX)?);
            }
            let n = r.count("work classes", WORK_CLASSES_MAX, 8)?;
            let mut work = Vec::with_capacity(n);
            for _ in 0..n {
                work.push(r.u64("work count")?);
            }
            Reply::Execute(ExecuteInfo {
                fuel_used,
                trace,
                work,
            })
        }
        v => {
            return Err(WireError::BadTag {
                field: "reply kind",
                value: u64::from(v),
            })
        }
    };
    Ok(reply)
}

fn decode_program_info(r: &mut Reader<'_>) -> Result<ProgramInfo, WireError> {
    let pind = ProgramIndex(r.u16("pind")?);
    let state = match r.u8("program state")? {
        0 => ProgramState::Empty,
        1 => ProgramState::Loading,
        2 => ProgramState::Loaded,
        3 => ProgramState::Active,
        v => {
            return Err(WireError::BadTag {
                field: "program state",
                value: u64::from(v),
            })
        }
    };
    let ptype = match r.u8("ptype")? {
        0 => ProgramType::Elf,
        1 => ProgramType::Raw,
        v => {
            return Err(WireError::BadTag {
                field: "ptype",
                value: u64::from(v),
            })
        }
    };
    let engine = match r.u8("engine")? {
        0 => None,
        1 => Some(EngineKind::Interpreter),
        2 => Some(EngineKind::Jit),
        v => {
            return Err(WireError::BadTag {
                field: "engine",
                value: u64::from(v),
            })
        }
    };
    Ok(ProgramInfo {
        pind,
        state,
        ptype,
        engine,
        size_bytes: r.u32("size")?,
        loaded_bytes: r.u32("loaded")?,
        executions: r.u64("executions")?,
        name: r.str("program name", NAME_SIZE_MAX)?,
        owner: match r.u32("owner")? {
            0 => None,
            c => Some(ClientId(c)),
        },
        persistent: if r.bool("persistent")? {
            Some(r.str("persistent name", crate::command::PROGRAM_NAME_SIZE_MAX)?)
        } else {
            None
        },
        generation: None,
    })
}

fn decode_device_info(r: &mut Reader<'_>) -> Result<DeviceInfo, WireError> {
    Ok(DeviceInfo {
        abi_version: r.u32("abi version")?,
        nvm_size_bytes: r.u64("nvm size")?,
        slm_size_bytes: r.u64("slm size")?,
        slm_free_bytes: r.u64("slm free")?,
        state_size_bytes: r.u64("state size")?,
        engines: r.u32("engines")?,
        program_slots: r.u16("program slots")?,
        programs_active_max: r.u16("programs active max")?,
        range_sets_max: r.u16("range sets max")?,
        ranges_per_set_max: r.u16("ranges per set max")?,
        params_size_max: r.u32("params size max")?,
        program_size_max: r.u32("program size max")?,
        load_chunk_size_max: r.u32("load chunk size max")?,
        mem_io_size_max: r.u64("mem io size max")?,
        file_io_size_max: r.u64("file io size max")?,
        queue_depth_max: r.u32("queue depth max")?,
        fuel_default: r.u64("fuel default")?,
        jit: r.bool("jit")?,
        version: r.str("version", NAME_SIZE_MAX)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let cmd = Command::new(
            CommandId(0x0102_0304_0506_0708),
            Op::MemFree {
                handle: MemHandle(7),
            },
        );
        let b = encode_command(&cmd).unwrap();
        assert_eq!(b.len(), COMMAND_HEADER_SIZE + 4);
        assert_eq!(&b[..8], &[0x11, WIRE_VERSION, 0, 0, 4, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[16..], &7u32.to_le_bytes());
        assert_eq!(decode_command(&b).unwrap(), cmd);
        let h = decode_command_header(&b).unwrap();
        assert_eq!(h.frame_len(), b.len());
    }

    #[test]
    fn completion_header_layout() {
        let mut c = Completion::new(CommandId(9), Status::ProgramInUse);
        c.value = 5;
        c.timing.total_ns = 77;
        let b = encode_completion(&c).unwrap();
        assert_eq!(b.len(), COMPLETION_HEADER_SIZE);
        assert_eq!(b[0], 0x99);
        assert_eq!(&b[56..64], &77u64.to_le_bytes());
        assert_eq!(decode_completion(&b).unwrap(), c);
    }

    #[test]
    fn lengths_are_checked_before_allocation() {
        // A MemWrite whose data length claims 4 GiB in a 40-byte frame.
        let cmd = Command::new(
            CommandId(1),
            Op::MemWrite {
                handle: MemHandle(1),
                offset: 0,
                data: vec![1, 2],
            },
        );
        let mut b = encode_command(&cmd).unwrap();
        let len_at = COMMAND_HEADER_SIZE + 4 + 8;
        b[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_command(&b),
            Err(WireError::TooLong { field: "data", .. })
        ));
        b[len_at..len_at + 4].copy_from_slice(&100u32.to_le_bytes());
        assert!(matches!(
            decode_command(&b),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn invalid_commands_are_not_encoded() {
        let cmd = Command::new(CommandId(1), Op::MemAlloc { size_bytes: 0 });
        assert!(matches!(encode_command(&cmd), Err(WireError::Invalid(_))));
    }

    fn execute(generation: Option<u64>, time_limit_ms: Option<u32>) -> Command {
        Command::new(
            CommandId(3),
            Op::Execute {
                pind: ProgramIndex(5),
                windows: Windows::Inline(Vec::new()),
                cparam1: 7,
                cparam2: 0,
                params: Vec::new(),
                fuel: None,
                time_limit_ms,
                generation,
            },
        )
    }

    /// An Execute that names no generation is the frame it was before generations, byte
    /// for byte (an old device reads it); one that names a generation sets flag bit 2,
    /// which an old decoder refuses as a reserved bit, and carries it last.
    #[test]
    fn a_program_generation_is_an_execute_flag_and_a_trailing_field() {
        let old: Vec<u8> = [
            &[0x20, WIRE_VERSION, 0, 0, 38, 0, 0, 0][..],
            &3u64.to_le_bytes(),
            &[5, 0, 0, 0, 0, 0],
            &7u64.to_le_bytes(),
            &[0; 8],
            &[0; 8],
            &[0; 4],
            &[0; 4],
        ]
        .concat();
        assert_eq!(encode_command(&execute(None, None)).unwrap(), old);
        assert_eq!(decode_command(&old).unwrap(), execute(None, None));
        for limit in [None, Some(250)] {
            let cmd = execute(Some(0xfeed_0000_0001), limit);
            let b = encode_command(&cmd).unwrap();
            assert_eq!(
                b[COMMAND_HEADER_SIZE + 3],
                4 | if limit.is_some() { 2 } else { 0 }
            );
            assert_eq!(&b[b.len() - 8..], &0xfeed_0000_0001u64.to_le_bytes());
            assert_eq!(decode_command(&b).unwrap(), cmd);
        }
        // Generation 0 names no program: refused both ways.
        assert!(matches!(
            encode_command(&execute(Some(0), None)),
            Err(WireError::Invalid(_))
        ));
        let mut zero = encode_command(&execute(Some(1), None)).unwrap();
        let at = zero.len() - 8;
        zero[at..].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode_command(&zero).is_err());
        // A frame cut before its generation is truncated, not misread.
        let mut cut = encode_command(&execute(Some(9), None)).unwrap();
        cut.truncate(cut.len() - 8);
        let body_len = (cut.len() - COMMAND_HEADER_SIZE) as u32;
        cut[4..8].copy_from_slice(&body_len.to_le_bytes());
        assert!(matches!(
            decode_command(&cut),
            Err(WireError::Truncated { .. })
        ));
    }

    fn unload(generation: Option<u64>) -> Command {
        Command::new(
            CommandId(4),
            Op::UnloadProgram {
                pind: ProgramIndex(6),
                generation,
            },
        )
    }

    /// An Unload that names no generation is the frame it was before generations (its
    /// slot only); one that names a generation carries it after the slot, which an old
    /// decoder refuses as trailing bytes. Generation 0 and a cut generation are refused.
    #[test]
    fn an_unloads_generation_follows_its_slot() {
        let old: Vec<u8> = [
            &[0x05, WIRE_VERSION, 0, 0, 2, 0, 0, 0][..],
            &4u64.to_le_bytes(),
            &[6, 0],
        ]
        .concat();
        assert_eq!(encode_command(&unload(None)).unwrap(), old);
        assert_eq!(decode_command(&old).unwrap(), unload(None));
        let named = encode_command(&unload(Some(0xfeed_0000_0002))).unwrap();
        assert_eq!(named.len(), old.len() + 8);
        assert_eq!(&named[..4], &old[..4]);
        assert_eq!(
            &named[named.len() - 8..],
            &0xfeed_0000_0002u64.to_le_bytes()
        );
        assert_eq!(
            decode_command(&named).unwrap(),
            unload(Some(0xfeed_0000_0002))
        );
        assert!(matches!(
            encode_command(&unload(Some(0))),
            Err(WireError::Invalid(_))
        ));
        let mut zero = named.clone();
        let at = zero.len() - 8;
        zero[at..].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode_command(&zero).is_err());
        for keep in 1..8 {
            let mut cut = named[..old.len() + keep].to_vec();
            cut[4..8].copy_from_slice(&(2 + keep as u32).to_le_bytes());
            assert!(
                matches!(decode_command(&cut), Err(WireError::Truncated { .. })),
                "{keep} bytes of a generation"
            );
        }
    }

    /// A listing without generations keeps reply kind 4 and its layout; one with them
    /// is kind 11 (an old decoder refuses the kind); a listing giving some programs a
    /// generation and not others is not encoded.
    #[test]
    fn a_listing_with_generations_is_its_own_reply_kind() {
        let info = |generation| ProgramInfo {
            pind: ProgramIndex(2),
            state: ProgramState::Active,
            ptype: ProgramType::Raw,
            size_bytes: 16,
            loaded_bytes: 16,
            name: String::new(),
            engine: Some(EngineKind::Interpreter),
            executions: 1,
            owner: None,
            persistent: None,
            generation,
        };
        let listing = |ps: Vec<ProgramInfo>| {
            let mut c = Completion::new(CommandId(1), Status::Success);
            c.reply = Reply::Programs(ps);
            c
        };
        let old = encode_completion(&listing(vec![info(None)])).unwrap();
        assert_eq!(old[3], 4);
        let new = encode_completion(&listing(vec![info(Some(77))])).unwrap();
        assert_eq!(new[3], 11);
        assert_eq!(new.len(), old.len() + 8);
        assert_eq!(&new[..3], &old[..3]);
        assert_eq!(
            &new[COMPLETION_HEADER_SIZE..old.len()],
            &old[COMPLETION_HEADER_SIZE..]
        );
        assert_eq!(
            decode_completion(&new).unwrap(),
            listing(vec![info(Some(77))])
        );
        assert!(encode_completion(&listing(vec![info(Some(77)), info(None)])).is_err());
        assert!(encode_completion(&listing(vec![info(Some(0))])).is_err());
    }

    #[test]
    fn unknown_opcode_and_trailing_bytes() {
        let cmd = Command::new(CommandId(1), Op::Identify);
        let mut b = encode_command(&cmd).unwrap();
        b[0] = 0xEE;
        assert_eq!(
            decode_command(&b),
            Err(WireError::UnknownOpcode { opcode: 0xEE })
        );
        b[0] = 0x01;
        b.push(0);
        assert!(matches!(
            decode_command(&b),
            Err(WireError::BodyLength { .. })
        ));
        b[4] = 1;
        assert_eq!(
            decode_command(&b),
            Err(WireError::TrailingBytes { count: 1 })
        );
    }
}
