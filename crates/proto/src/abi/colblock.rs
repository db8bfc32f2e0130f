//! Encoded column blocks: the unit the columnar format's version 2 stores
//! (`docs/design/columnar.md`) and the device function `csx_unpack` expands in device
//! memory. Host writer and device agree on this module alone.
//!
//! A block is a 64-byte header followed by its payload. The header (little-endian):
//!
//! ```text
//! offset size field
//!      0    1 encoding      0 raw, 1 constant, 2 frame of reference + bit packing, 3 runs
//!      1    1 width         bytes per value: 4 or 8
//!      2    1 bits          bits per packed value (encodings 2, 3), 0 to 8 * width
//!      3    1 flags         bit 0: values are signed
//!      4    4 rows          values in the block, 1 to BLOCK_ROWS_MAX
//!      8    8 at            file offset of this header
//!     16    4 payload_len   bytes of payload after the header
//!     20    4 runs          runs (encoding 3), else 0
//!     24    8 reference     the frame of reference (encodings 1-3), as the value's bits
//!     32    8 min           zone map: the smallest value, widened to i64
//!     40    8 max           zone map: the largest value, widened to i64
//!     48    4 payload_crc   CRC-32C of the payload
//!     52    4 index         the block's index in its column
//!     56    1 run_bits      bits per packed run length (encoding 3), else 0
//!     57    3 magic         "blk"
//!     60    4 header_crc    CRC-32C of bytes 0..60
//! ```
//!
//! Payloads: raw, `rows * width` bytes; constant, none (every value is `reference`);
//! bit-packed, `ceil(rows * bits / 64)` little-endian u64 words, value i's offset from
//! `reference` in bits `[i * bits, (i + 1) * bits)` counted from the least significant
//! bit of word 0; runs, the `runs` values' offsets packed so at `bits` each, then (from
//! the next whole word) the `runs` run lengths packed at `run_bits` each, summing to
//! `rows`. A value is `reference + offset` modulo `2^(8 * width)`.
//!
//! Invariant: a block is decoded only after both checksums match and every field is
//! consistent; anything else is a [`BlockError`] saying where, never a value.

/// Bytes of a block header.
pub const BLOCK_HEADER_SIZE: usize = 64;
/// Most rows in one block (a block's decode is one piece between looks at the stop flag).
pub const BLOCK_ROWS_MAX: u32 = 1 << 20;
/// The header's magic at offset 56.
pub const BLOCK_MAGIC: [u8; 3] = *b"blk";

/// Encoding ids.
pub const ENC_RAW: u8 = 0;
pub const ENC_CONSTANT: u8 = 1;
pub const ENC_PACKED: u8 = 2;
pub const ENC_RUNS: u8 = 3;

/// Which part of a block is bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockPart {
    /// The header (its checksum or a field).
    Header,
    /// The payload (its checksum or its contents).
    Data,
}

impl BlockPart {
    pub fn name(self) -> &'static str {
        match self {
            BlockPart::Header => "header",
            BlockPart::Data => "data",
        }
    }
}

/// A block that may not be decoded: where it starts in the input and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockError {
    /// Byte offset of the block's header in the input given to the decoder.
    pub at: usize,
    pub part: BlockPart,
    pub message: String,
}

impl std::fmt::Display for BlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "block at byte {}: bad {}: {}",
            self.at,
            self.part.name(),
            self.message
        )
    }
}

/// A block's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BlockHeader {
    pub encoding: u8,
    pub width: u8,
    pub bits: u8,
    pub signed: bool,
    pub rows: u32,
    pub at: u64,
    pub payload_len: u32,
    pub runs: u32,
    pub run_bits: u8,
    pub reference: u64,
    pub min: i64,
    pub max: i64,
    pub payload_crc: u32,
    pub index: u32,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The payload bytes encoding `enc` needs for `rows` values of `width` bytes.
pub fn payload_len(
    enc: u8,
    width: u8,
    bits: u8,
    rows: u32,
    runs: u32,
    run_bits: u8,
) -> Option<u64> {
    let rows = u64::from(rows);
    match enc {
        ENC_RAW => Some(rows * u64::from(width)),
        ENC_CONSTANT => Some(0),
        ENC_PACKED => Some((rows * u64::from(bits)).div_ceil(64) * 8),
        ENC_RUNS => Some(
            (u64::from(runs) * u64::from(bits)).div_ceil(64) * 8
                + (u64::from(runs) * u64::from(run_bits)).div_ceil(64) * 8,
        ),
        _ => None,
    }
}

impl BlockHeader {
    /// The header's 64 bytes, checksum included.
    pub fn encode(&self) -> [u8; BLOCK_HEADER_SIZE] {
        let mut b = [0u8; BLOCK_HEADER_SIZE];
        b[0] = self.encoding;
        b[1] = self.width;
        b[2] = self.bits;
        b[3] = u8::from(self.signed);
        b[4..8].copy_from_slice(&self.rows.to_le_bytes());
        b[8..16].copy_from_slice(&self.at.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.runs.to_le_bytes());
        b[24..32].copy_from_slice(&self.reference.to_le_bytes());
        b[32..40].copy_from_slice(&self.min.to_le_bytes());
        b[40..48].copy_from_slice(&self.max.to_le_bytes());
        b[48..52].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[52..56].copy_from_slice(&self.index.to_le_bytes());
        b[56] = self.run_bits;
        b[57..60].copy_from_slice(&BLOCK_MAGIC);
        let crc = crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and checks a header: its checksum, then every field's range and the
    /// payload length its encoding implies. The error message says what is wrong.
    pub fn parse(b: &[u8]) -> Result<BlockHeader, String> {
        if b.len() < BLOCK_HEADER_SIZE {
            return Err(format!(
                "{} bytes, a header has {BLOCK_HEADER_SIZE}",
                b.len()
            ));
        }
        let stored = le_u32(b, 60);
        let crc = crc32c(&b[..60]);
        if stored != crc {
            return Err(format!(
                "header checksum {stored:#010x}, the header's bytes give {crc:#010x}"
            ));
        }
        if b[57..60] != BLOCK_MAGIC {
            return Err("no block magic".to_string());
        }
        let h = BlockHeader {
            encoding: b[0],
            width: b[1],
            bits: b[2],
            signed: b[3] & 1 != 0,
            rows: le_u32(b, 4),
            at: le_u64(b, 8),
            payload_len: le_u32(b, 16),
            runs: le_u32(b, 20),
            run_bits: b[56],
            reference: le_u64(b, 24),
            min: le_u64(b, 32) as i64,
            max: le_u64(b, 40) as i64,
            payload_crc: le_u32(b, 48),
            index: le_u32(b, 52),
        };
        if b[3] & !1 != 0 {
            return Err(format!("unknown flags {:#x}", b[3]));
        }
        h.check()?;
        Ok(h)
    }

    /// Checks every field's range and the payload length the encoding implies (what
    /// [`BlockHeader::parse`] checks after the checksum and magic); the error message
    /// says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let h = self;
        if h.width != 4 && h.width != 8 {
            return Err(format!("width {}, must be 4 or 8", h.width));
        }
        if h.rows == 0 || h.rows > BLOCK_ROWS_MAX {
            return Err(format!("{} rows, must be 1 to {BLOCK_ROWS_MAX}", h.rows));
        }
        if h.bits > 8 * h.width {
            return Err(format!("{} bits per value of {} bytes", h.bits, h.width));
        }
        if h.encoding == ENC_RUNS
            && (h.runs == 0 || h.runs > h.rows || h.run_bits == 0 || h.run_bits > 32)
        {
            return Err(format!(
                "{} runs of {} bits for {} rows",
                h.runs, h.run_bits, h.rows
            ));
        }
        if h.min > h.max {
            return Err(format!("zone map min {} above max {}", h.min, h.max));
        }
        match payload_len(h.encoding, h.width, h.bits, h.rows, h.runs, h.run_bits) {
            None => Err(format!("unknown encoding {}", h.encoding)),
            Some(n) if n != u64::from(h.payload_len) => Err(format!(
                "payload of {} bytes, the encoding needs {n}",
                h.payload_len
            )),
            Some(_) => Ok(()),
        }
    }

    /// Bytes of the block: header and payload.
    pub fn stored_len(&self) -> u64 {
        BLOCK_HEADER_SIZE as u64 + u64::from(self.payload_len)
    }
}

fn width_mask(width: u8) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * u32::from(width))) - 1
    }
}

/// Every value of `out` (whole values of `width`, 4 or 8 bytes) set to `v`: stores of a
/// known size, not a copy call per value.
fn fill(out: &mut [u8], width: usize, v: u64) {
    if width == 4 {
        let b = (v as u32).to_le_bytes();
        for o in out.chunks_exact_mut(4) {
            let o: &mut [u8; 4] = o.try_into().expect("4-byte chunks");
            *o = b;
        }
    } else {
        let b = v.to_le_bytes();
        for o in out.chunks_exact_mut(8) {
            let o: &mut [u8; 8] = o.try_into().expect("8-byte chunks");
            *o = b;
        }
    }
}

/// Decodes rows `[first, first + out.len() / width)` of one block (`h`, parsed, and
/// its `payload`) into `out`; the payload's checksum is checked first.
pub fn decode_block(
    h: &BlockHeader,
    payload: &[u8],
    first: u64,
    out: &mut [u8],
) -> Result<(), (BlockPart, String)> {
    decode_block_as(h, payload, first, out, h.width)
}

/// [`decode_block`] into values of `width` bytes: the block's own width, or 4 for a
/// block of 8-byte values that [`narrows_to`] 4 bytes (each value's low 4 bytes, which
/// are the value itself as a 4-byte integer of the block's sign).
pub fn decode_block_as(
    h: &BlockHeader,
    payload: &[u8],
    first: u64,
    out: &mut [u8],
    width: u8,
) -> Result<(), (BlockPart, String)> {
    check_block(h, payload, first, out.len(), width)?;
    let w = usize::from(width);
    let n = out.len() / w;
    let first = first as usize;
    let mask = width_mask(width);
    match h.encoding {
        ENC_RAW if width == h.width => {
            out.copy_from_slice(&payload[first * w..(first + n) * w]);
        }
        ENC_RAW => narrow_raw(h, &payload[first * 8..(first + n) * 8], out)?,
        ENC_CONSTANT => fill(out, w, h.reference & mask),
        ENC_PACKED => unpack_bits(payload, Packing::values(h, width), first, out),
        ENC_RUNS => expand_runs(payload, h, first, out, width)?,
        e => return Err((BlockPart::Header, format!("unknown encoding {e}"))),
    }
    Ok(())
}

/// Whether every value of block `h` fits `width` bytes as an integer of its sign: the
/// condition on decoding it into values of `width` bytes. Decided by what the encoding
/// can hold, never by the zone map alone: a constant's value, every value a packed or
/// runs block's reference and bits can make (`reference + [0, 2^bits)`); a raw block by
/// its zone map, and each of its values is checked as it is decoded ([`narrow_raw`]). So
/// a zone map that lies is never a truncated value. `Err` says why not.
pub fn narrows_to(h: &BlockHeader, width: u8) -> Result<(), String> {
    if width == h.width {
        return Ok(());
    }
    if width != 4 || h.width != 8 {
        return Err(format!(
            "values of {} bytes asked as {width} bytes (only 8 to 4 narrows)",
            h.width
        ));
    }
    let (lo, hi) = match h.signed {
        true => (i128::from(i32::MIN), i128::from(i32::MAX)),
        false => (0, i128::from(u32::MAX)),
    };
    let reference = match h.signed {
        true => i128::from(h.reference as i64),
        false => i128::from(h.reference),
    };
    let (least, most) = match h.encoding {
        ENC_RAW => (i128::from(h.min), i128::from(h.max)),
        ENC_CONSTANT => (reference, reference),
        _ => (reference, reference + (1i128 << h.bits) - 1),
    };
    if least < lo || most > hi {
        return Err(format!(
            "values from {least} to {most} may be in the block, outside 4 bytes"
        ));
    }
    Ok(())
}

/// Raw 8-byte values `src` into 4-byte `out`, each checked to fit (a raw payload's
/// values are read anyway, so a zone map that lies is found here, not trusted).
fn narrow_raw(h: &BlockHeader, src: &[u8], out: &mut [u8]) -> Result<(), (BlockPart, String)> {
    let (src, _) = src.as_chunks::<8>();
    let (out, _) = out.as_chunks_mut::<4>();
    let mut bad = false;
    for (o, v) in out.iter_mut().zip(src) {
        let v = i64::from_le_bytes(*v);
        bad |= match h.signed {
            true => i64::from(v as i32) != v,
            false => (v as u64) > u64::from(u32::MAX),
        };
        *o = (v as u32).to_le_bytes();
    }
    if bad {
        return Err((
            BlockPart::Data,
            format!(
                "a value outside 4 bytes, where the zone map says [{}, {}]",
                h.min, h.max
            ),
        ));
    }
    Ok(())
}

/// Checks that `out_len` bytes from row `first` are whole values inside the block, and
/// that `payload` has the header's length and checksum.
fn check_block(
    h: &BlockHeader,
    payload: &[u8],
    first: u64,
    out_len: usize,
    width: u8,
) -> Result<(), (BlockPart, String)> {
    h.check().map_err(|m| (BlockPart::Header, m))?;
    narrows_to(h, width).map_err(|m| (BlockPart::Header, m))?;
    let width = usize::from(width);
    let n = out_len / width;
    if !out_len.is_multiple_of(width) || first.saturating_add(n as u64) > u64::from(h.rows) {
        return Err((
            BlockPart::Header,
            format!(
                "rows {first}..{} asked of a block of {} rows of {width} bytes",
                first.saturating_add(n as u64),
                h.rows
            ),
        ));
    }
    if payload.len() != h.payload_len as usize {
        return Err((
            BlockPart::Data,
            format!(
                "{} payload bytes present, the header says {}",
                payload.len(),
                h.payload_len
            ),
        ));
    }
    let crc = crc32c(payload);
    if crc != h.payload_crc {
        return Err((
            BlockPart::Data,
            format!(
                "payload checksum {:#010x}, the payload's bytes give {crc:#010x}",
                h.payload_crc
            ),
        ));
    }
    Ok(())
}

/// Runs a step of [`expand_runs`] takes: their lengths (and, when they hold wanted rows,
/// their values) unpacked by the group kernels into buffers on the stack first.
const RUN_STEP: usize = 256;

/// Run-length rows `[first, first + out.len() / width)` into `out`; every run must be
/// non-empty and the runs must cover the block exactly. Every run's length is read (to
/// check the cover), its value only when a step of runs holds wanted rows; a run's
/// values are written by whole groups of eight where `out` has room ([`splat`]).
fn expand_runs(
    payload: &[u8],
    h: &BlockHeader,
    first: usize,
    out: &mut [u8],
    width: u8,
) -> Result<(), (BlockPart, String)> {
    if width == 4 {
        expand_runs_of::<4, 32>(payload, h, first, out)
    } else {
        expand_runs_of::<8, 64>(payload, h, first, out)
    }
}

/// [`expand_runs`] for values of `W` bytes (`G`: eight values' bytes).
fn expand_runs_of<const W: usize, const G: usize>(
    payload: &[u8],
    h: &BlockHeader,
    first: usize,
    out: &mut [u8],
) -> Result<(), (BlockPart, String)> {
    let runs = h.runs as usize;
    let value_bytes = (runs * usize::from(h.bits)).div_ceil(64) * 8;
    let lengths = Packing {
        bits: h.run_bits,
        width: 4,
        reference: 0,
    };
    let want = (first, first + out.len() / W);
    let mut lens = [0u8; 4 * RUN_STEP];
    let mut values = [0u8; 8 * RUN_STEP];
    let mut row = 0usize; // first row of run r0
    for r0 in (0..runs).step_by(RUN_STEP) {
        let m = (runs - r0).min(RUN_STEP);
        let lens = &mut lens[..4 * m];
        unpack_bits(&payload[value_bytes..], lengths, r0, lens);
        let end = check_runs(lens, r0, row, h.rows)?;
        if end > want.0 && row < want.1 {
            let values = &mut values[..W * m];
            unpack_bits(payload, Packing::values(h, W as u8), r0, values);
            let (out, _) = out.as_chunks_mut::<W>();
            if row >= want.0 && end <= want.1 {
                fill_runs::<W>(lens, values, row - want.0, out);
            } else {
                splat_runs::<W, G>(lens, values, row, want, out.as_flattened_mut());
            }
        }
        row = end;
    }
    if row != h.rows as usize {
        return Err((
            BlockPart::Data,
            format!("the runs cover {row} rows, the block has {}", h.rows),
        ));
    }
    Ok(())
}

/// Checks the lengths `lens` (4 bytes each) of runs `r0..`, the first starting at row
/// `row`: none empty, none ending past the block's `rows`. Returns the row after them.
fn check_runs(lens: &[u8], r0: usize, row: usize, rows: u32) -> Result<usize, (BlockPart, String)> {
    let mut end = row;
    let mut empty = false;
    for l in lens.chunks_exact(4) {
        let len = u32::from_le_bytes(l.try_into().expect("4 bytes"));
        empty |= len == 0;
        end += len as usize;
    }
    if !empty && end <= rows as usize {
        return Ok(end);
    }
    // Find the first bad run, to name it.
    let mut end = row;
    for (k, l) in lens.chunks_exact(4).enumerate() {
        let len = u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize;
        end += len;
        if len == 0 || end > rows as usize {
            return Err((
                BlockPart::Data,
                format!(
                    "run {} of {len} rows ends at row {end}, the block has {rows}",
                    r0 + k
                ),
            ));
        }
    }
    unreachable!("a step of runs with an empty run or past the block names it")
}

/// Writes a step of runs that are wanted whole (lengths `lens`, 4 bytes each, values
/// `values`, `W` bytes each) into `out` from value `i` on: a run of at most eight values
/// by one store of eight where `out` has room (the runs after it set the extra values
/// again), a longer one value by value.
#[inline(always)]
fn fill_runs<const W: usize>(lens: &[u8], values: &[u8], mut i: usize, out: &mut [[u8; W]]) {
    for (l, v) in lens.chunks_exact(4).zip(values.chunks_exact(W)) {
        let len = u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize;
        let v: [u8; W] = v.try_into().expect("a value");
        match out.get_mut(i..i + 8) {
            Some(group) if len <= 8 => group.copy_from_slice(&[v; 8]),
            _ => out[i..i + len].fill(v),
        }
        i += len;
    }
}

/// Writes the wanted rows `[want.0, want.1)` of a step of runs (lengths `lens`, 4 bytes
/// each, values `values`, `W` bytes each, the first run starting at row `row`) into
/// `out` (row `want.0` at its start).
#[inline(always)]
fn splat_runs<const W: usize, const G: usize>(
    lens: &[u8],
    values: &[u8],
    mut row: usize,
    want: (usize, usize),
    out: &mut [u8],
) {
    for (l, v) in lens.chunks_exact(4).zip(values.chunks_exact(W)) {
        let len = u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize;
        let end = row + len;
        if end > want.0 && row < want.1 {
            let lo = row.max(want.0);
            let mut one = [0u8; 8];
            one[..W].copy_from_slice(v);
            splat::<W, G>(
                out,
                lo - want.0,
                end.min(want.1) - lo,
                u64::from_le_bytes(one),
            );
        }
        row = end;
    }
}

/// Sets values `[i, i + count)` of `out` (values of `W` bytes; `G` = 8 values' bytes)
/// to `v`, by stores of eight values while they fit in `out`: the last group may also
/// set values after the run, which the runs after it set again (each run's own values
/// are set last by itself, since a run only writes from its own first value on).
#[inline(always)]
fn splat<const W: usize, const G: usize>(out: &mut [u8], i: usize, count: usize, v: u64) {
    let one = v.to_le_bytes();
    let mut group = [0u8; G];
    for g in group.chunks_exact_mut(W) {
        g.copy_from_slice(&one[..W]);
    }
    let (mut at, end) = (i * W, (i + count) * W);
    while at < end {
        match out.get_mut(at..at + G) {
            Some(dst) => dst.copy_from_slice(&group),
            None => {
                for o in out[at..end].chunks_exact_mut(W) {
                    o.copy_from_slice(&one[..W]);
                }
                return;
            }
        }
        at += G;
    }
}

/// [`field`], by one 8-byte load where the field and its shift fit in one (at most 56
/// bits, not at the payload's last bytes): the runs' values and lengths are read so.
#[inline(always)]
fn field_at(words: &[u8], i: usize, bits: u8) -> u64 {
    let b = usize::from(bits);
    let bit = i * b;
    if b <= 56 {
        if let Some(w) = words.get(bit / 8..bit / 8 + 8) {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            return (w >> (bit % 8)) & ((1u64 << b) - 1);
        }
    }
    field(words, i, bits)
}

/// Packed field `i` of `bits` bits (0 to 64) of little-endian words `words`.
fn field(words: &[u8], i: usize, bits: u8) -> u64 {
    let bits = usize::from(bits);
    if bits == 0 {
        return 0;
    }
    let n = words.len() / 8;
    let word = |k: usize| if k < n { le_u64(words, k * 8) } else { 0 };
    let bit = i * bits;
    let (k, s) = (bit / 64, bit % 64);
    let mut v = word(k) >> s;
    if s > 0 && s + bits > 64 {
        v |= word(k + 1) << (64 - s);
    }
    if bits == 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

/// How fields are packed: `bits` each, expanded into values of `width` bytes (4 or 8),
/// each plus `reference` (modulo `2^(8 * width)`).
#[derive(Clone, Copy)]
struct Packing {
    bits: u8,
    width: u8,
    reference: u64,
}

impl Packing {
    /// A block's values (bit-packed, or the runs' values), as values of `width` bytes.
    fn values(h: &BlockHeader, width: u8) -> Packing {
        Packing {
            bits: h.bits,
            width,
            reference: h.reference,
        }
    }
}

/// Packed fields `[first, first + n)` of `payload` into `out` (`n` values of `p.width`
/// bytes): the fields before the first whole group of eight and after the last one
/// value by value, the groups between by a kernel made for the width and bits.
fn unpack_bits(payload: &[u8], p: Packing, first: usize, out: &mut [u8]) {
    let bits = usize::from(p.bits);
    let width = usize::from(p.width);
    let n = out.len() / width;
    let reference = p.reference;
    if bits == 0 {
        fill(
            &mut out[..n * width],
            width,
            reference & width_mask(p.width),
        );
        return;
    }
    // Rows [head_end, body_end) are whole groups of eight, their bytes and the 16 after
    // them in the payload (the kernels' windows).
    let head_end = first.next_multiple_of(8).min(first + n);
    let groups_in_payload = payload.len().saturating_sub(16) / bits;
    let body_end = head_end
        + ((first + n - head_end) / 8).min(groups_in_payload.saturating_sub(head_end / 8)) * 8;
    let one = |row: usize, o: &mut [u8]| {
        let v = reference.wrapping_add(field_at(payload, row, p.bits));
        o.copy_from_slice(&v.to_le_bytes()[..width]);
    };
    let (head, rest) = out.split_at_mut((head_end - first) * width);
    let (body, tail) = rest.split_at_mut((body_end - head_end) * width);
    for (i, o) in head.chunks_exact_mut(width).enumerate() {
        one(first + i, o);
    }
    let src = &payload[head_end / 8 * bits..];
    if width == 4 {
        KERNELS_4[bits - 1](src, body, reference);
    } else {
        KERNELS_8[bits - 1](src, body, reference);
    }
    for (i, o) in tail.chunks_exact_mut(width).enumerate() {
        one(body_end + i, o);
    }
}

/// A kernel: whole groups of eight `B`-bit values from `src` (group g at byte `g * B`,
/// with at least 16 bytes after the last group's) into `out`, each plus the reference.
type Kernel = fn(&[u8], &mut [u8], u64);

/// Groups of eight `B`-bit values (B at most 32) into 4-byte values. Value j of a group
/// starts `j * B / 8` bytes into it, `j * B % 8` bits into that byte: one 8-byte load
/// covers it, at offsets the compiler knows, so the window's bounds are checked once a
/// group.
fn unpack_group4<const B: usize>(src: &[u8], out: &mut [u8], reference: u64) {
    let mask = (1u64 << B) - 1;
    for (g, o) in out.chunks_exact_mut(32).enumerate() {
        let win = &src[g * B..][..B + 8];
        for j in 0..8 {
            let (at, shift) = (j * B / 8, j * B % 8);
            let w = u64::from_le_bytes(win[at..at + 8].try_into().expect("8 bytes"));
            let v = reference.wrapping_add((w >> shift) & mask) as u32;
            o[4 * j..4 * j + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Groups of eight `B`-bit values into 8-byte values: as [`unpack_group4`], with a
/// 16-byte load where a value and its shift pass 64 bits (B above 57).
fn unpack_group8<const B: usize>(src: &[u8], out: &mut [u8], reference: u64) {
    let mask = if B == 64 {
        u64::MAX
    } else {
        (1u64 << (B % 64)) - 1
    };
    for (g, o) in out.chunks_exact_mut(64).enumerate() {
        let win = &src[g * B..][..B + 16];
        for j in 0..8 {
            let (at, shift) = (j * B / 8, j * B % 8);
            let raw = if B <= 57 {
                u64::from_le_bytes(win[at..at + 8].try_into().expect("8 bytes")) >> shift
            } else {
                let w = u128::from_le_bytes(win[at..at + 16].try_into().expect("16 bytes"));
                (w >> shift) as u64
            };
            let v = reference.wrapping_add(raw & mask);
            o[8 * j..8 * j + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
}

macro_rules! kernels {
    ($f:ident, $($b:literal)*) => {
        [$($f::<$b> as Kernel,)*]
    };
}

/// The kernels of 4-byte values by bits - 1.
static KERNELS_4: [Kernel; 32] = kernels!(unpack_group4,
    1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32);
/// The kernels of 8-byte values by bits - 1.
static KERNELS_8: [Kernel; 64] = kernels!(unpack_group8,
    1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32
    33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62
    63 64);

/// Decodes rows `[first, first + out.len() / width)` of a sequence of blocks stored back
/// to back in `src` (as in a column file), each block's header and payload checked
/// before it is decoded. `stop` is asked between blocks; when it says so, decoding ends
/// with `Ok(None)`. Returns the rows written.
pub fn decode_blocks(
    src: &[u8],
    first: u64,
    out: &mut [u8],
    stop: &mut dyn FnMut() -> bool,
) -> Result<Option<u64>, BlockError> {
    decode_blocks_as(src, first, out, 0, stop)
}

/// [`decode_blocks`] into values of `as_width` bytes (0: the first block's width), each
/// block decoded by [`decode_block_as`]: a block that does not narrow to it
/// ([`narrows_to`]) is a [`BlockError`] of its header.
pub fn decode_blocks_as(
    src: &[u8],
    first: u64,
    out: &mut [u8],
    as_width: u8,
    stop: &mut dyn FnMut() -> bool,
) -> Result<Option<u64>, BlockError> {
    let mut at = 0usize;
    let mut row = 0u64; // first row of the block at `at`
    let mut written = 0usize; // bytes of out written
    let mut width = 0usize; // of the values written
    let mut own = 0u8; // the first block's width, which every block must have
    while written < out.len() || width == 0 {
        if stop() {
            return Ok(None);
        }
        let bad = |part, message| BlockError { at, part, message };
        let rest = &src[at.min(src.len())..];
        if rest.len() < BLOCK_HEADER_SIZE {
            if out.is_empty() && at == src.len() {
                return Ok(Some(0));
            }
            let rows = |bytes: usize| first.saturating_add((bytes / width.max(1)) as u64);
            let (from, last) = (rows(written), rows(out.len()));
            let message = format!(
                "the input ends ({} bytes) before row {from} of {last} asked",
                src.len()
            );
            return Err(bad(BlockPart::Header, message));
        }
        let h = BlockHeader::parse(rest).map_err(|m| bad(BlockPart::Header, m))?;
        if width == 0 {
            own = h.width;
            width = usize::from(if as_width == 0 { h.width } else { as_width });
            if out.is_empty() {
                return Ok(Some(0));
            }
        }
        check_width(&h, own, width, out.len()).map_err(|m| bad(BlockPart::Header, m))?;
        let end = BLOCK_HEADER_SIZE + h.payload_len as usize;
        if rest.len() < end {
            return Err(bad(
                BlockPart::Data,
                format!(
                    "payload of {} bytes, the input holds {}",
                    h.payload_len,
                    rest.len() - BLOCK_HEADER_SIZE
                ),
            ));
        }
        let want = first.saturating_add((written / width) as u64);
        let block_end = row + u64::from(h.rows);
        if want < block_end {
            let from = want - row;
            let n = ((block_end - want) as usize).min((out.len() - written) / width);
            decode_block_as(
                &h,
                &rest[BLOCK_HEADER_SIZE..end],
                from,
                &mut out[written..written + n * width],
                width as u8,
            )
            .map_err(|(part, m)| bad(part, m))?;
            written += n * width;
        }
        row = block_end;
        at += end;
    }
    Ok(Some((written / width.max(1)) as u64))
}

/// A block's width must be the first block's (`own`), and the output whole values of
/// `width` bytes.
fn check_width(h: &BlockHeader, own: u8, width: usize, out_len: usize) -> Result<(), String> {
    if h.width != own {
        return Err(format!("width {} after blocks of width {own}", h.width));
    }
    narrows_to(h, width as u8)?;
    if !out_len.is_multiple_of(width) {
        return Err(format!(
            "output of {out_len} bytes is not whole values of {width} bytes"
        ));
    }
    Ok(())
}

/// CRC-32C of a block's bytes (the one implementation, hardware where present).
pub use crate::crc::{crc32c, crc32c_append};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(
            crc32c_append(crc32c(&data[..333]), &data[333..]),
            crc32c(&data)
        );
    }

    fn packed(values: &[u32], reference: u32, bits: u8) -> (BlockHeader, Vec<u8>) {
        let words = (values.len() * bits as usize).div_ceil(64);
        let mut w = vec![0u64; words];
        for (i, &v) in values.iter().enumerate() {
            let d = u64::from(v - reference);
            let bit = i * bits as usize;
            w[bit / 64] |= d << (bit % 64);
            if bit % 64 + bits as usize > 64 {
                w[bit / 64 + 1] |= d >> (64 - bit % 64);
            }
        }
        let payload: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let h = BlockHeader {
            encoding: ENC_PACKED,
            width: 4,
            bits,
            rows: values.len() as u32,
            payload_len: payload.len() as u32,
            reference: u64::from(reference),
            min: i64::from(*values.iter().min().unwrap()),
            max: i64::from(*values.iter().max().unwrap()),
            payload_crc: crc32c(&payload),
            ..BlockHeader::default()
        };
        (h, payload)
    }

    /// A packed block of `rows` pseudo-random `bits`-bit offsets of `width`-byte
    /// values, and the values `field` (the value-at-a-time reference) reads from it.
    fn random_packed(
        width: u8,
        bits: u8,
        rows: usize,
        seed: u64,
    ) -> (BlockHeader, Vec<u8>, Vec<u64>) {
        let mask = u64::MAX >> (64 - u32::from(bits)).min(63);
        let mask = if bits == 0 { 0 } else { mask };
        let mut x = seed | 1;
        let mut words = vec![0u64; (rows * usize::from(bits)).div_ceil(64)];
        for i in 0..rows {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x & mask;
            if bits == 0 {
                continue;
            }
            let (k, sh) = (i * usize::from(bits) / 64, i * usize::from(bits) % 64);
            words[k] |= v << sh;
            if sh + usize::from(bits) > 64 {
                words[k + 1] |= v >> (64 - sh);
            }
        }
        let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let reference = x.rotate_left(7);
        let values = (0..rows)
            .map(|i| reference.wrapping_add(field(&payload, i, bits)) & width_mask(width))
            .collect();
        let h = BlockHeader {
            encoding: ENC_PACKED,
            width,
            bits,
            rows: rows as u32,
            payload_len: payload.len() as u32,
            reference,
            payload_crc: crc32c(&payload),
            ..BlockHeader::default()
        };
        (h, payload, values)
    }

    #[test]
    fn one_load_fields_equal_the_word_by_word_reading() {
        for bits in 0..=64u8 {
            let (_, payload, _) = random_packed(8, bits, 301, u64::from(bits) + 7);
            for i in 0..301 {
                assert_eq!(
                    field_at(&payload, i, bits),
                    field(&payload, i, bits),
                    "{bits} {i}"
                );
            }
        }
    }

    #[test]
    fn packed_kernels_equal_the_value_at_a_time_reading_for_every_width_and_bits() {
        for (width, most) in [(4u8, 32u8), (8, 64)] {
            for bits in 0..=most {
                for rows in [1usize, 7, 8, 9, 63, 64, 65, 200, 1001] {
                    let seed = u64::from(bits) * 1000 + rows as u64;
                    let (h, payload, values) = random_packed(width, bits, rows, seed);
                    let w = usize::from(width);
                    for (first, n) in [
                        (0, rows),
                        (1, rows - 1),
                        (rows / 3, rows - rows / 3),
                        (rows - 1, 1),
                        (rows / 2, rows / 4),
                    ] {
                        let mut out = vec![0xAAu8; n * w];
                        decode_block(&h, &payload, first as u64, &mut out).unwrap();
                        for (i, o) in out.chunks_exact(w).enumerate() {
                            let mut b = [0u8; 8];
                            b[..w].copy_from_slice(o);
                            assert_eq!(
                                u64::from_le_bytes(b),
                                values[first + i],
                                "width {width} bits {bits} rows {rows} row {}",
                                first + i
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_packed_sequence_decodes_any_row_range_and_names_a_bad_block() {
        let a: Vec<u32> = (0..100).map(|i| 1000 + (i * 37) % 101).collect();
        let b: Vec<u32> = (0..77).map(|i| 5 + (i * 13) % 29).collect();
        let mut src = Vec::new();
        for (vals, reference, bits) in [(&a, 1000, 7u8), (&b, 5, 5u8)] {
            let (h, p) = packed(vals, reference, bits);
            src.extend_from_slice(&h.encode());
            src.extend_from_slice(&p);
        }
        let all: Vec<u32> = a.iter().chain(&b).copied().collect();
        for (first, n) in [(0usize, 177usize), (95, 10), (100, 77), (3, 0), (176, 1)] {
            let mut out = vec![0u8; n * 4];
            let got = decode_blocks(&src, first as u64, &mut out, &mut || false).unwrap();
            assert_eq!(got, Some(n as u64));
            let vals: Vec<u32> = out
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(vals, all[first..first + n], "rows {first}+{n}");
        }
        // Past the end, however far.
        for first in [170, 177, u64::MAX - 3, u64::MAX] {
            let mut out = vec![0u8; 4 * 10];
            let e = decode_blocks(&src, first, &mut out, &mut || false).unwrap_err();
            assert_eq!(e.part, BlockPart::Header);
        }
        // A flipped payload bit of the second block, then of its header.
        let second = BLOCK_HEADER_SIZE + (7 * 100usize).div_ceil(64) * 8;
        for (flip, part) in [
            (second + BLOCK_HEADER_SIZE + 3, BlockPart::Data),
            (second + 4, BlockPart::Header),
        ] {
            let mut bad = src.clone();
            bad[flip] ^= 0x10;
            let mut out = vec![0u8; 177 * 4];
            let e = decode_blocks(&bad, 0, &mut out, &mut || false).unwrap_err();
            assert_eq!((e.at, e.part), (second, part), "{e}");
        }
        // A stop between blocks.
        let mut calls = 0;
        let mut out = vec![0u8; 177 * 4];
        let r = decode_blocks(&src, 0, &mut out, &mut || {
            calls += 1;
            calls > 1
        });
        assert_eq!(r, Ok(None));
    }

    /// A splitmix64 generator for the randomised tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Field `i` of `bits` bits, read bit by bit (the plain reference).
    fn bit_field(bytes: &[u8], i: usize, bits: usize) -> u64 {
        (0..bits).fold(0, |v, j| {
            let k = i * bits + j;
            v | (u64::from(bytes[k / 8] >> (k % 8) & 1) << j)
        })
    }

    /// `fields` packed at `bits` each, bit by bit, into whole little-endian words.
    fn bit_pack(fields: &[u64], bits: usize) -> Vec<u8> {
        let mut out = vec![0u8; (fields.len() * bits).div_ceil(64) * 8];
        for (i, f) in fields.iter().enumerate() {
            for j in 0..bits {
                let k = i * bits + j;
                out[k / 8] |= ((f >> j & 1) as u8) << (k % 8);
            }
        }
        out
    }

    /// Rows `[first, first + n)` of a block decoded the plain way: every value from its
    /// definition in the module doc, no kernels, no runs skipped.
    fn reference_decode(h: &BlockHeader, payload: &[u8], first: usize, n: usize) -> Vec<u64> {
        let (w, bits) = (usize::from(h.width), usize::from(h.bits));
        let mask = width_mask(h.width);
        let all: Vec<u64> = match h.encoding {
            ENC_RAW => (payload.chunks_exact(w))
                .map(|c| c.iter().rev().fold(0, |v, &b| v << 8 | u64::from(b)))
                .collect(),
            ENC_CONSTANT => vec![h.reference & mask; h.rows as usize],
            ENC_PACKED => (0..h.rows as usize)
                .map(|i| h.reference.wrapping_add(bit_field(payload, i, bits)) & mask)
                .collect(),
            _ => {
                let runs = h.runs as usize;
                let lens = &payload[(runs * bits).div_ceil(64) * 8..];
                let mut v = Vec::new();
                for r in 0..runs {
                    let value = h.reference.wrapping_add(bit_field(payload, r, bits)) & mask;
                    let len = bit_field(lens, r, usize::from(h.run_bits));
                    v.extend(std::iter::repeat_n(value, len as usize));
                }
                v
            }
        };
        all[first..first + n].to_vec()
    }

    /// A random block: encoding `enc`, `width` bytes, random bits, rows and (for runs)
    /// run lengths.
    fn random_block(rng: &mut Rng, enc: u8, width: u8) -> (BlockHeader, Vec<u8>) {
        let most = if rng.below(4) == 0 { 5000 } else { 300 };
        let rows = 1 + rng.below(most) as usize;
        let bits = rng.below(u64::from(8 * width) + 1) as usize;
        let field = |rng: &mut Rng| rng.next() & (u64::MAX >> (64 - bits.max(1)));
        let field = |rng: &mut Rng| if bits == 0 { 0 } else { field(rng) };
        let mut h = BlockHeader {
            encoding: enc,
            width,
            rows: rows as u32,
            reference: rng.next(),
            ..BlockHeader::default()
        };
        let payload = match enc {
            ENC_RAW => (0..rows * usize::from(width))
                .map(|_| rng.next() as u8)
                .collect(),
            ENC_CONSTANT => Vec::new(),
            ENC_PACKED => {
                h.bits = bits as u8;
                bit_pack(&(0..rows).map(|_| field(rng)).collect::<Vec<_>>(), bits)
            }
            _ => {
                let most = if rng.below(2) == 0 { 8 } else { 300 };
                let longest = 1 + rng.below(most);
                let mut lens = Vec::new();
                let mut left = rows as u64;
                while left > 0 {
                    let l = (1 + rng.below(longest)).min(left);
                    lens.push(l);
                    left -= l;
                }
                let values: Vec<u64> = lens.iter().map(|_| field(rng)).collect();
                let run_bits = 64 - lens.iter().max().unwrap().leading_zeros() as usize;
                let run_bits = run_bits + rng.below((33 - run_bits) as u64) as usize;
                h.bits = bits as u8;
                h.runs = lens.len() as u32;
                h.run_bits = run_bits as u8;
                let mut p = bit_pack(&values, bits);
                p.extend(bit_pack(&lens, run_bits));
                p
            }
        };
        h.payload_len = payload.len() as u32;
        h.payload_crc = crc32c(&payload);
        (h, payload)
    }

    #[test]
    fn random_blocks_of_every_encoding_and_width_decode_as_the_plain_reading() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..600 {
            for enc in [ENC_RAW, ENC_CONSTANT, ENC_PACKED, ENC_RUNS] {
                for width in [4u8, 8] {
                    let (h, payload) = random_block(&mut rng, enc, width);
                    let rows = h.rows as usize;
                    let first = rng.below(rows as u64) as usize;
                    let n = rng.below((rows - first) as u64 + 1) as usize;
                    let (first, n) = match round % 4 {
                        0 => (0, rows),
                        _ => (first, n),
                    };
                    let w = usize::from(width);
                    let mut out = vec![0xA5u8; n * w];
                    decode_block(&h, &payload, first as u64, &mut out)
                        .unwrap_or_else(|e| panic!("{h:?}: {e:?}"));
                    let got: Vec<u64> = (out.chunks_exact(w))
                        .map(|c| c.iter().rev().fold(0, |v, &b| v << 8 | u64::from(b)))
                        .collect();
                    let want = reference_decode(&h, &payload, first, n);
                    assert_eq!(got, want, "{h:?} rows {first}+{n}");
                }
            }
        }
    }

    /// A random 8-byte block whose values fit 4 bytes in about half the rounds, with
    /// an honest zone map; the values as i64.
    fn random_narrowable(rng: &mut Rng, enc: u8) -> (BlockHeader, Vec<u8>, Vec<i64>) {
        loop {
            let (mut h, mut payload) = random_block(rng, enc, 8);
            if matches!(enc, ENC_PACKED | ENC_RUNS) && h.bits > 33 {
                continue;
            }
            let small = rng.below(2) == 0;
            let near = |rng: &mut Rng, bits: u32| {
                (rng.next() as i32 as i64 >> bits.min(31)) - (1 << bits.min(31)) / 2
            };
            if small {
                h.reference = near(rng, u32::from(h.bits)) as u64;
            }
            if enc == ENC_RAW && small {
                payload = (0..h.rows)
                    .flat_map(|_| near(rng, 0).to_le_bytes())
                    .collect();
                h.payload_crc = crc32c(&payload);
            }
            let values: Vec<i64> = reference_decode(&h, &payload, 0, h.rows as usize)
                .into_iter()
                .map(|v| v as i64)
                .collect();
            h.signed = true;
            h.min = *values.iter().min().unwrap();
            h.max = *values.iter().max().unwrap();
            return (h, payload, values);
        }
    }

    #[test]
    fn blocks_of_8_byte_values_narrow_to_4_bytes_exactly_when_every_value_fits() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut narrowed = [0usize; 4];
        for _ in 0..400 {
            for (e, enc) in [ENC_RAW, ENC_CONSTANT, ENC_PACKED, ENC_RUNS]
                .into_iter()
                .enumerate()
            {
                let (h, payload, values) = random_narrowable(&mut rng, enc);
                let rows = h.rows as usize;
                let first = rng.below(rows as u64) as usize;
                let n = rng.below((rows - first) as u64 + 1) as usize;
                let mut out = vec![0xA5u8; n * 4];
                let got = decode_block_as(&h, &payload, first as u64, &mut out, 4);
                let fits = values.iter().all(|&v| i64::from(v as i32) == v);
                // Packed and runs blocks: every value their reference and bits can make.
                let reference = h.reference as i64 as i128;
                let can = reference..=reference + (1i128 << h.bits) - 1;
                let fits = match enc {
                    ENC_PACKED | ENC_RUNS => {
                        (can.start() >= &i32::MIN.into()) && (can.end() <= &i32::MAX.into())
                    }
                    _ => fits,
                };
                if !fits {
                    let (part, _) = got.expect_err("values over 4 bytes refused");
                    assert_eq!(part, BlockPart::Header, "{h:?}");
                    continue;
                }
                got.unwrap_or_else(|e| panic!("{h:?}: {e:?}"));
                narrowed[e] += 1;
                let got: Vec<i64> = (out.chunks_exact(4))
                    .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
                    .collect();
                assert_eq!(got, values[first..first + n], "{h:?} rows {first}+{n}");
                // The whole block through decode_blocks_as, and its own width unchanged.
                let mut src = h.encode().to_vec();
                src.extend_from_slice(&payload);
                let mut out = vec![0u8; rows * 4];
                let r = decode_blocks_as(&src, 0, &mut out, 4, &mut || false).unwrap();
                assert_eq!(r, Some(rows as u64));
                let mut wide = vec![0u8; rows * 8];
                decode_blocks_as(&src, 0, &mut wide, 0, &mut || false).unwrap();
                let wide: Vec<i64> = (wide.chunks_exact(8))
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                assert_eq!(wide, values);
            }
        }
        assert!(narrowed.iter().all(|&k| k > 20), "narrowed {narrowed:?}");
    }

    #[test]
    fn a_raw_block_whose_zone_map_lies_about_its_width_is_refused_as_bad_data() {
        let values: [i64; 3] = [5, -7, 1 << 40];
        let payload: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let h = BlockHeader {
            encoding: ENC_RAW,
            width: 8,
            signed: true,
            rows: 3,
            payload_len: 24,
            min: -7,
            max: 5,
            payload_crc: crc32c(&payload),
            ..BlockHeader::default()
        };
        let mut out = [0u8; 12];
        let (part, m) = decode_block_as(&h, &payload, 0, &mut out, 4).unwrap_err();
        assert_eq!(part, BlockPart::Data, "{m}");
        assert!(m.contains("outside 4 bytes"), "{m}");
        // The first two rows alone hold no such value.
        decode_block_as(&h, &payload, 0, &mut out[..8], 4).unwrap();
        assert_eq!(out[..8], [5, 0, 0, 0, 0xF9, 0xFF, 0xFF, 0xFF]);
        // A packed block narrows by what its reference and bits can make, whatever its
        // zone map says.
        let packed = |reference: i64, bits: u8| BlockHeader {
            encoding: ENC_PACKED,
            reference: reference as u64,
            bits,
            ..h
        };
        let min = i64::from(i32::MIN);
        for (reference, bits, ok) in [
            (0, 31, true),
            (1, 31, false),
            (0, 33, false),
            (min, 31, true),
            (min - 1, 3, false),
            (-5, 0, true),
        ] {
            let r = narrows_to(&packed(reference, bits), 4);
            assert_eq!(r.is_ok(), ok, "reference {reference} bits {bits}: {r:?}");
        }
        // Only 8 bytes narrow, and only to 4.
        for (from, to) in [(8u8, 2u8), (8, 1), (4, 8), (8, 16)] {
            let h = BlockHeader { width: from, ..h };
            assert!(narrows_to(&h, to).is_err(), "{from} -> {to}");
        }
    }

    /// Run lengths `lens` of one-bit values at 8 bits each: a runs block whose checksum
    /// is right, whatever its lengths say.
    fn runs_block(lens: &[u64], rows: u32) -> (BlockHeader, Vec<u8>) {
        let mut payload = bit_pack(&vec![1; lens.len()], 1);
        payload.extend(bit_pack(lens, 8));
        let h = BlockHeader {
            encoding: ENC_RUNS,
            width: 4,
            bits: 1,
            rows,
            runs: lens.len() as u32,
            run_bits: 8,
            payload_len: payload.len() as u32,
            payload_crc: crc32c(&payload),
            ..BlockHeader::default()
        };
        (h, payload)
    }

    #[test]
    fn hostile_headers_and_runs_are_errors_never_values_or_panics() {
        // Runs: an empty one, one past the block, too few rows, in every step of runs.
        let many = |at: usize, len: u64| {
            let mut l = vec![1u64; 700];
            l[at] = len;
            l
        };
        for (lens, rows, says) in [
            (vec![3, 0, 2], 5, "run 1 of 0 rows"),
            (many(600, 0), 700, "run 600 of 0 rows"),
            (vec![3, 4], 5, "run 1 of 4 rows ends at row 7"),
            (many(699, 2), 700, "run 699 of 2 rows ends at row 701"),
            (vec![1, 1], 5, "the runs cover 2 rows"),
        ] {
            let (h, payload) = runs_block(&lens, rows);
            for (first, n) in [(0u64, rows as usize), (0, 1), (rows as u64 - 1, 1)] {
                let mut out = vec![0u8; 4 * n];
                let e = decode_block(&h, &payload, first, &mut out).unwrap_err();
                assert!(e.0 == BlockPart::Data && e.1.contains(says), "{e:?}");
            }
        }
        // Header fields a decoder is handed without parsing: refused, not used.
        let (good, payload) = runs_block(&[2, 3], 5);
        type Edit = fn(&mut BlockHeader);
        let cases: [(Edit, &str); 7] = [
            (|h| h.bits = 33, "33 bits per value of 4 bytes"),
            (|h| h.width = 0, "width 0"),
            (|h| h.width = 3, "width 3"),
            (|h| h.rows = u32::MAX, "rows, must be 1 to"),
            (|h| h.run_bits = 40, "runs of 40 bits"),
            (|h| h.runs = 0, "0 runs"),
            (|h| h.encoding = 9, "unknown encoding 9"),
        ];
        for (edit, says) in cases {
            let mut h = good;
            edit(&mut h);
            let mut out = vec![0u8; 4];
            let e = decode_block(&h, &payload, 0, &mut out).unwrap_err();
            assert!(e.0 == BlockPart::Header && e.1.contains(says), "{e:?}");
        }
        // A payload cut short, or one flipped bit in it.
        let mut out = vec![0u8; 20];
        let e = decode_block(&good, &payload[..8], 0, &mut out).unwrap_err();
        assert_eq!(e.0, BlockPart::Data, "{e:?}");
        let mut bad = payload.clone();
        bad[9] ^= 4;
        let e = decode_block(&good, &bad, 0, &mut out).unwrap_err();
        assert!(e.1.contains("payload checksum"), "{e:?}");
        // Rows past the block, however far.
        for first in [4, 5, u64::MAX] {
            let e = decode_block(&good, &payload, first, &mut out[..8]).unwrap_err();
            assert_eq!(e.0, BlockPart::Header, "{e:?}");
        }
    }
}
