//! Encoded column files, the columnar format's version 2 (`docs/design/columnar.md`):
//! a column's rows in blocks of [`BLOCK_ROWS`], each block stored in the encoding that
//! takes the fewest bytes (constant, frame of reference + bit packing, runs, raw: the
//! block layout of [`csx_host::proto::abi::colblock`]), each with its zone map (min and
//! max) and CRC-32C checksums of header and payload; a directory of every block's header
//! at the end of the file, and a file header at its start.
//!
//! ```text
//! offset            size            what
//! 0                 64              file header (below)
//! 64                ...             block 0: 64-byte block header, payload
//! ...                               block 1, ... back to back
//! dir_offset        64 * blocks     the directory: each block's header again
//! ```
//!
//! File header: `0` magic `csxcol2\n`; `8` u32 version (2); `12` u8 type code; `13` u8
//! width; `14` u16 zero; `16` u64 rows; `24` u32 block rows; `28` u32 blocks; `32` u64
//! directory offset; `40` u64 file length; `48` 12 zero bytes; `60` u32 CRC-32C of bytes
//! 0..60.
//!
//! Invariant: nothing is decoded or skipped on the strength of a header, directory
//! entry or payload whose checksum does not match: a mismatch is a
//! [`DataError::CorruptBlock`] (or [`DataError::CorruptColumn`] for the file header)
//! naming the table, the column and the block.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use csx_host::proto::abi::colblock::{
    self, crc32c, BlockHeader, BlockPart, BLOCK_HEADER_SIZE, ENC_CONSTANT, ENC_PACKED, ENC_RAW,
    ENC_RUNS,
};

use crate::columnar::{ColumnType, Values};
use crate::error::DataError;
use crate::predicate::RawRange;

/// Rows per block the writers use.
pub const BLOCK_ROWS: u32 = 1 << 16;
/// Bytes of a column file's header.
pub const FILE_HEADER_SIZE: u64 = 64;
/// The file header's magic.
pub const FILE_MAGIC: [u8; 8] = *b"csxcol2\n";
/// The format version of encoded column files.
pub const ENCODED_VERSION: u32 = 2;

/// A type's code in the file header.
pub fn type_code(ty: ColumnType) -> u8 {
    match ty {
        ColumnType::Int32 => 1,
        ColumnType::Int64 => 2,
        ColumnType::Uint32 => 3,
        ColumnType::Date => 4,
        ColumnType::Decimal => 5,
        ColumnType::Dict => 6,
    }
}

fn width_mask(width: u64) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    }
}

// ---------------------------------------------------------------------------------------
// Encoding one block.

/// Lengths of the runs of equal values in `values`.
fn run_lengths(values: &[i64]) -> Vec<u32> {
    let mut run_lens: Vec<u32> = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match run_lens.last_mut() {
            Some(l) if values[i - 1] == *v => *l += 1,
            _ => run_lens.push(1),
        }
    }
    run_lens
}

/// The payload of `values` in `encoding` (`min`: the frame of reference; `bits`,
/// `run_bits`: the packed widths).
fn encode_payload(
    encoding: u8,
    values: &[i64],
    (width, min): (u64, i64),
    (bits, run_lens, run_bits): (u8, &[u32], u8),
) -> Vec<u8> {
    let mask = width_mask(width);
    let w = width as usize;
    match encoding {
        ENC_CONSTANT => Vec::new(),
        ENC_RAW => {
            let mut payload = Vec::with_capacity(values.len() * w);
            for &v in values {
                payload.extend_from_slice(&((v as u64) & mask).to_le_bytes()[..w]);
            }
            payload
        }
        ENC_PACKED => {
            let offsets: Vec<u64> = values.iter().map(|&v| v.wrapping_sub(min) as u64).collect();
            pack(&offsets, bits)
        }
        _ => {
            let mut starts = Vec::with_capacity(run_lens.len());
            let mut row = 0usize;
            for &l in run_lens {
                starts.push(values[row].wrapping_sub(min) as u64);
                row += l as usize;
            }
            let lens: Vec<u64> = run_lens.iter().map(|&l| u64::from(l)).collect();
            let mut payload = pack(&starts, bits);
            payload.extend_from_slice(&pack(&lens, run_bits));
            payload
        }
    }
}

/// Encodes `values` (widened to i64 from a column of type `ty`) as block `index` at
/// file offset `at`, in whichever encoding is smallest (ties: constant, raw, packed,
/// runs, the cheaper decode first).
pub fn encode_block(ty: ColumnType, values: &[i64], index: u32, at: u64) -> (BlockHeader, Vec<u8>) {
    assert!(!values.is_empty() && values.len() <= colblock::BLOCK_ROWS_MAX as usize);
    let width = ty.width();
    let mask = width_mask(width);
    let rows = values.len() as u32;
    let min = *values.iter().min().expect("a block has rows");
    let max = *values.iter().max().expect("a block has rows");
    let range = max.wrapping_sub(min) as u64;
    let bits = (64 - range.leading_zeros()) as u8;
    let run_lens = run_lengths(values);
    let runs = run_lens.len() as u32;
    let run_bits = (32 - run_lens.iter().max().copied().unwrap_or(1).leading_zeros()) as u8;
    let size = |enc, bits, runs, rb| colblock::payload_len(enc, width as u8, bits, rows, runs, rb);
    let candidates = [
        (ENC_CONSTANT, (min == max).then_some(0)),
        (ENC_RAW, size(ENC_RAW, 0, 0, 0)),
        (ENC_PACKED, size(ENC_PACKED, bits, 0, 0)),
        (ENC_RUNS, size(ENC_RUNS, bits, runs, run_bits)),
    ];
    let (encoding, _) = candidates
        .iter()
        .filter_map(|&(e, s)| s.map(|s| (e, s)))
        .min_by_key(|&(_, s)| s)
        .expect("raw always applies");
    let payload = encode_payload(encoding, values, (width, min), (bits, &run_lens, run_bits));
    let packed = encoding == ENC_PACKED || encoding == ENC_RUNS;
    let h = BlockHeader {
        encoding,
        width: width as u8,
        bits: if packed { bits } else { 0 },
        signed: ty.signed(),
        rows,
        at,
        payload_len: payload.len() as u32,
        runs: if encoding == ENC_RUNS { runs } else { 0 },
        run_bits: if encoding == ENC_RUNS { run_bits } else { 0 },
        reference: if encoding == ENC_RAW {
            0
        } else {
            (min as u64) & mask
        },
        min,
        max,
        payload_crc: crc32c(&payload),
        index,
    };
    (h, payload)
}

/// `values` packed at `bits` each (0 to 64), least significant bit first, in
/// little-endian u64 words.
fn pack(values: &[u64], bits: u8) -> Vec<u8> {
    let b = usize::from(bits);
    let mut words = vec![0u64; (values.len() * b).div_ceil(64)];
    for (i, &d) in values.iter().enumerate() {
        let bit = i * b;
        let (k, s) = (bit / 64, bit % 64);
        if b == 0 {
            continue;
        }
        words[k] |= d << s;
        if s > 0 && s + b > 64 {
            words[k + 1] |= d >> (64 - s);
        }
    }
    words.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A block of `rows` copies of `value` (the stand-in for a block a zone map skipped).
pub fn constant_block(ty: ColumnType, value: i64, rows: u32, index: u32) -> [u8; 64] {
    BlockHeader {
        encoding: ENC_CONSTANT,
        width: ty.width() as u8,
        signed: ty.signed(),
        rows,
        reference: (value as u64) & width_mask(ty.width()),
        min: value,
        max: value,
        payload_crc: crc32c(&[]),
        index,
        ..BlockHeader::default()
    }
    .encode()
}

// ---------------------------------------------------------------------------------------
// Writing a column file.

/// Writes one encoded column file, a value at a time.
#[derive(Debug)]
pub struct ColumnEncoder {
    path: PathBuf,
    file: BufWriter<File>,
    ty: ColumnType,
    block_rows: u32,
    pending: Vec<i64>,
    blocks: Vec<BlockHeader>,
    at: u64,
    rows: u64,
}

impl ColumnEncoder {
    pub fn create(
        path: &Path,
        ty: ColumnType,
        block_rows: u32,
    ) -> Result<ColumnEncoder, DataError> {
        assert!(block_rows > 0 && block_rows <= colblock::BLOCK_ROWS_MAX);
        let f = File::create(path).map_err(|e| DataError::io(path, e))?;
        let mut file = BufWriter::with_capacity(1 << 16, f);
        // The header is written last, when the blocks are known.
        file.write_all(&[0u8; FILE_HEADER_SIZE as usize])
            .map_err(|e| DataError::io(path, e))?;
        Ok(ColumnEncoder {
            path: path.to_path_buf(),
            file,
            ty,
            block_rows,
            pending: Vec::with_capacity(block_rows as usize),
            blocks: Vec::new(),
            at: FILE_HEADER_SIZE,
            rows: 0,
        })
    }

    /// Adds a value (widened to i64 by the column's signedness).
    pub fn push(&mut self, v: i64) -> Result<(), DataError> {
        self.pending.push(v);
        self.rows += 1;
        if self.pending.len() == self.block_rows as usize {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<(), DataError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let index = self.blocks.len() as u32;
        let (h, payload) = encode_block(self.ty, &self.pending, index, self.at);
        self.file
            .write_all(&h.encode())
            .and_then(|()| self.file.write_all(&payload))
            .map_err(|e| DataError::io(&self.path, e))?;
        self.at += h.stored_len();
        self.blocks.push(h);
        self.pending.clear();
        Ok(())
    }

    /// Writes the last block, the directory and the file header; the rows written.
    pub fn finish(mut self) -> Result<u64, DataError> {
        self.flush_block()?;
        let io = |e| DataError::io(&self.path, e);
        for h in &self.blocks {
            self.file.write_all(&h.encode()).map_err(io)?;
        }
        let header = FileHeader {
            ty: self.ty,
            rows: self.rows,
            block_rows: self.block_rows,
            blocks: self.blocks.len() as u32,
            dir_offset: self.at,
            file_len: self.at + BLOCK_HEADER_SIZE as u64 * self.blocks.len() as u64,
        };
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        self.file.write_all(&header.encode()).map_err(io)?;
        self.file.flush().map_err(io)?;
        Ok(self.rows)
    }
}

// ---------------------------------------------------------------------------------------
// Reading a column file's header and directory.

/// A column file's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub ty: ColumnType,
    pub rows: u64,
    pub block_rows: u32,
    pub blocks: u32,
    pub dir_offset: u64,
    pub file_len: u64,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(&FILE_MAGIC);
        b[8..12].copy_from_slice(&ENCODED_VERSION.to_le_bytes());
        b[12] = type_code(self.ty);
        b[13] = self.ty.width() as u8;
        b[16..24].copy_from_slice(&self.rows.to_le_bytes());
        b[24..28].copy_from_slice(&self.block_rows.to_le_bytes());
        b[28..32].copy_from_slice(&self.blocks.to_le_bytes());
        b[32..40].copy_from_slice(&self.dir_offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.file_len.to_le_bytes());
        let crc = crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a file header and checks it against the schema's type and rows and the
    /// file's size.
    pub fn parse(b: &[u8], ty: ColumnType, rows: u64, size: u64) -> Result<FileHeader, String> {
        if b.len() < 64 {
            return Err(format!("{} bytes, the file header has 64", b.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let crc = crc32c(&b[..60]);
        if u32_at(60) != crc {
            return Err(format!(
                "file header checksum {:#010x}, its bytes give {crc:#010x}",
                u32_at(60)
            ));
        }
        if b[..8] != FILE_MAGIC || u32_at(8) != ENCODED_VERSION {
            return Err("not an encoded column file of version 2".to_string());
        }
        if b[12] != type_code(ty) || u64::from(b[13]) != ty.width() {
            return Err(format!(
                "type code {} of width {}, the schema says {}",
                b[12],
                b[13],
                ty.name()
            ));
        }
        let h = FileHeader {
            ty,
            rows: u64_at(16),
            block_rows: u32_at(24),
            blocks: u32_at(28),
            dir_offset: u64_at(32),
            file_len: u64_at(40),
        };
        if h.rows != rows {
            return Err(format!("{} rows, the schema says {rows}", h.rows));
        }
        if h.block_rows == 0 || h.block_rows > colblock::BLOCK_ROWS_MAX {
            return Err(format!("{} rows per block", h.block_rows));
        }
        if u64::from(h.blocks) != rows.div_ceil(u64::from(h.block_rows)) {
            return Err(format!(
                "{} blocks, {rows} rows in blocks of {} need {}",
                h.blocks,
                h.block_rows,
                rows.div_ceil(u64::from(h.block_rows))
            ));
        }
        let dir_end = h.dir_offset.checked_add(64 * u64::from(h.blocks));
        if h.file_len != size || dir_end != Some(size) || h.dir_offset < FILE_HEADER_SIZE {
            return Err(format!(
                "file of {size} bytes, the header says {} with the directory at {}",
                h.file_len, h.dir_offset
            ));
        }
        Ok(h)
    }
}

/// An encoded column: where it is and its blocks' headers (offsets and zone maps).
#[derive(Clone, Debug)]
pub struct EncodedColumn {
    pub table: String,
    pub column: String,
    pub path: String,
    pub header: FileHeader,
    pub blocks: Vec<BlockHeader>,
}

impl EncodedColumn {
    /// Checks the directory (`dir`, the bytes at the header's `dir_offset`): every
    /// entry's checksum and fields, and that the blocks tile the rows and the file.
    pub fn parse(
        table: &str,
        column: &str,
        path: &str,
        header: FileHeader,
        dir: &[u8],
    ) -> Result<EncodedColumn, DataError> {
        let bad = |block: u64, part: &'static str, message: String| DataError::CorruptBlock {
            table: table.to_string(),
            column: column.to_string(),
            block,
            part,
            message: format!("{message} ({path})"),
        };
        const PART: &str = "directory entry (block header and zone map)";
        let mut blocks = Vec::with_capacity(header.blocks as usize);
        let mut at = FILE_HEADER_SIZE;
        let mut rows = 0u64;
        for (i, e) in dir.chunks_exact(BLOCK_HEADER_SIZE).enumerate() {
            let i = i as u64;
            let h = BlockHeader::parse(e).map_err(|m| bad(i, PART, m))?;
            let want_rows = (header.rows - rows).min(u64::from(header.block_rows));
            if u64::from(h.index) != i
                || h.at != at
                || u64::from(h.rows) != want_rows
                || u64::from(h.width) != header.ty.width()
                || h.signed != header.ty.signed()
            {
                return Err(bad(
                    i,
                    PART,
                    format!(
                        "block {} of {} rows at {} (width {}), expected block {i} of {want_rows} rows at {at}",
                        h.index, h.rows, h.at, h.width
                    ),
                ));
            }
            at += h.stored_len();
            rows += u64::from(h.rows);
            blocks.push(h);
        }
        if blocks.len() as u64 != u64::from(header.blocks) || at != header.dir_offset {
            return Err(DataError::CorruptColumn {
                table: table.to_string(),
                column: column.to_string(),
                path: path.to_string(),
                message: format!(
                    "the directory's {} blocks end at {at}, the directory starts at {}",
                    blocks.len(),
                    header.dir_offset
                ),
            });
        }
        Ok(EncodedColumn {
            table: table.to_string(),
            column: column.to_string(),
            path: path.to_string(),
            header,
            blocks,
        })
    }

    /// Reads and checks a local column file's header and directory.
    pub fn open_local(
        table: &str,
        column: &str,
        path: &Path,
        ty: ColumnType,
        rows: u64,
    ) -> Result<(EncodedColumn, Vec<u8>), DataError> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let p = path.display().to_string();
        let header =
            FileHeader::parse(&bytes, ty, rows, bytes.len() as u64).map_err(|message| {
                DataError::CorruptColumn {
                    table: table.to_string(),
                    column: column.to_string(),
                    path: p.clone(),
                    message,
                }
            })?;
        let dir = &bytes[header.dir_offset as usize..];
        let col = EncodedColumn::parse(table, column, &p, header, dir)?;
        Ok((col, bytes))
    }

    /// Rows per block.
    pub fn block_rows(&self) -> u64 {
        u64::from(self.header.block_rows)
    }

    /// Decodes the blocks of `bytes` (the blocks from block `first_block` on, back to
    /// back, as stored) on the host into `out`'s rows from the first block's first row;
    /// each inline header must equal its directory entry.
    pub fn decode_into(
        &self,
        first_block: usize,
        bytes: &[u8],
        out: &mut [u8],
    ) -> Result<(), DataError> {
        let w = self.header.ty.width() as usize;
        let mut pos = 0usize;
        let mut row = 0usize;
        for (b, d) in self.blocks[first_block..].iter().enumerate() {
            if row * w >= out.len() {
                break;
            }
            let b = (first_block + b) as u64;
            let bad = |part: BlockPart, message: String| self.corrupt(b, part.name(), message);
            let head = bytes
                .get(pos..pos + BLOCK_HEADER_SIZE)
                .ok_or_else(|| bad(BlockPart::Header, "missing".to_string()))?;
            let h = BlockHeader::parse(head).map_err(|m| bad(BlockPart::Header, m))?;
            if h != *d {
                return Err(bad(
                    BlockPart::Header,
                    "differs from its directory entry".to_string(),
                ));
            }
            let payload = bytes
                .get(pos + BLOCK_HEADER_SIZE..pos + h.stored_len() as usize)
                .ok_or_else(|| bad(BlockPart::Data, "truncated".to_string()))?;
            let n = (h.rows as usize).min(out.len() / w - row);
            colblock::decode_block(&h, payload, 0, &mut out[row * w..(row + n) * w])
                .map_err(|(part, m)| bad(part, m))?;
            pos += h.stored_len() as usize;
            row += n;
        }
        Ok(())
    }

    /// The error of block `block`'s bad `part` (its message names the file too).
    pub fn corrupt(&self, block: u64, part: &'static str, message: String) -> DataError {
        DataError::CorruptBlock {
            table: self.table.clone(),
            column: self.column.clone(),
            block,
            part,
            message: format!("{message} ({})", self.path),
        }
    }

    /// The whole column decoded on the host from the file's bytes.
    pub fn decode_all(&self, file: &[u8]) -> Result<Values, DataError> {
        let w = self.header.ty.width();
        let mut out = vec![0u8; (self.header.rows * w) as usize];
        let end = self.header.dir_offset as usize;
        self.decode_into(0, &file[FILE_HEADER_SIZE as usize..end], &mut out)?;
        Ok(Values::from_le_bytes(self.header.ty, &out))
    }

    /// Stored bytes of blocks `[a, b)`.
    pub fn span(&self, a: usize, b: usize) -> u64 {
        self.blocks[a..b].iter().map(BlockHeader::stored_len).sum()
    }
}

// ---------------------------------------------------------------------------------------
// Zone maps.

/// Whether no value in `[min, max]` of a column of type `ty` lies in any of `ranges`
/// (raw unsigned ranges, as the predicates compile: `crate::predicate`).
pub fn excluded(ty: ColumnType, min: i64, max: i64, ranges: &[RawRange]) -> bool {
    let mask = width_mask(ty.width());
    let raw: Vec<(u64, u64)> = if !ty.signed() || min >= 0 || max < 0 {
        vec![((min as u64) & mask, (max as u64) & mask)]
    } else {
        vec![(0, max as u64), ((min as u64) & mask, mask)]
    };
    !ranges
        .iter()
        .any(|&(lo, hi)| raw.iter().any(|&(a, b)| lo <= b && a <= hi))
}

/// Per block, whether a zone map excludes it: `filters` are `(column, its ranges)`,
/// every column of one table (blocks of the same rows).
pub fn skipped_blocks(filters: &[(&EncodedColumn, &[RawRange])]) -> Vec<bool> {
    let Some((first, _)) = filters.first() else {
        return Vec::new();
    };
    (0..first.blocks.len())
        .map(|b| {
            filters.iter().any(|(c, r)| {
                c.blocks
                    .get(b)
                    .is_some_and(|h| excluded(c.header.ty, h.min, h.max, r))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(ty: ColumnType, values: &[i64]) -> u8 {
        let (h, payload) = encode_block(ty, values, 3, 64);
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&payload);
        let mut out = vec![0u8; values.len() * ty.width() as usize];
        colblock::decode_blocks(&bytes, 0, &mut out, &mut || false).unwrap();
        let got = Values::from_le_bytes(ty, &out);
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(got.get_i64(i), v, "{ty:?} row {i} of {}", values.len());
        }
        // Row ranges that start and end inside runs and groups of eight.
        let n = values.len();
        for (lo, hi) in [(1, n), (n / 3, 2 * n / 3 + 1), (n - 1, n), (5, 13), (7, 8)] {
            if lo >= hi || hi > n {
                continue;
            }
            let mut part = vec![0u8; (hi - lo) * ty.width() as usize];
            colblock::decode_blocks(&bytes, lo as u64, &mut part, &mut || false).unwrap();
            let got = Values::from_le_bytes(ty, &part);
            for (i, &v) in values[lo..hi].iter().enumerate() {
                assert_eq!(got.get_i64(i), v, "{ty:?} row {} of {lo}..{hi}", lo + i);
            }
        }
        assert_eq!(
            (h.min, h.max),
            (*values.iter().min().unwrap(), *values.iter().max().unwrap())
        );
        h.encoding
    }

    #[test]
    fn every_encoding_round_trips_at_the_edges() {
        use ColumnType::*;
        // Constant: one row, all equal, extremes.
        assert_eq!(round_trip(Int32, &[0]), ENC_CONSTANT);
        assert_eq!(round_trip(Int64, &[i64::MIN; 70]), ENC_CONSTANT);
        assert_eq!(round_trip(Uint32, &[i64::from(u32::MAX); 5]), ENC_CONSTANT);
        // Packed: small ranges anywhere in the domain, signed and not.
        let small: Vec<i64> = (0..1000).map(|i| -500 + (i * 7919) % 13).collect();
        assert_eq!(round_trip(Int32, &small), ENC_PACKED);
        let dates: Vec<i64> = (0..4096).map(|i| 8035 + (i * 31) % 2557).collect();
        assert_eq!(round_trip(Date, &dates), ENC_PACKED);
        let codes: Vec<i64> = (0..777).map(|i| (i * 5) % 25).collect();
        assert_eq!(round_trip(Dict, &codes), ENC_PACKED);
        let near_max: Vec<i64> = (0..100).map(|i| i64::from(u32::MAX) - i % 3).collect();
        assert_eq!(round_trip(Uint32, &near_max), ENC_PACKED);
        let wide: Vec<i64> = (0..300)
            .map(|i| {
                if i % 2 == 0 {
                    i64::MIN
                } else {
                    i64::MIN + 1_000_000 + i
                }
            })
            .collect();
        assert_eq!(round_trip(Decimal, &wide), ENC_PACKED);
        // Runs: long runs of any values.
        let runs: Vec<i64> = (0..5000)
            .map(|i| [i64::MIN, 0, i64::MAX][i / 2000])
            .collect();
        assert_eq!(round_trip(Int64, &runs), ENC_RUNS);
        let runs32: Vec<i64> = (0..5000)
            .map(|i| [i32::MIN as i64, -1, i32::MAX as i64][i / 2000])
            .collect();
        assert_eq!(round_trip(Int32, &runs32), ENC_RUNS);
        // Short runs (an order's lines share its date): packed runs.
        let short: Vec<i64> = (0..4000)
            .map(|i| 19_920_101 + (i / 4 * 7919) % 70_000)
            .collect();
        assert_eq!(round_trip(Uint32, &short), ENC_RUNS);
        let one_run_each: Vec<i64> = (0..64).map(|i| i64::MIN + 1 + (i % 2)).collect();
        round_trip(Int64, &one_run_each);
        // Raw: the whole domain in one block.
        let full: Vec<i64> = (0..64)
            .map(|i| {
                if i % 2 == 0 {
                    i64::MIN + i
                } else {
                    i64::MAX - i
                }
            })
            .collect();
        assert_eq!(round_trip(Int64, &full), ENC_RAW);
        let full32: Vec<i64> = (0..64)
            .map(|i| {
                if i % 2 == 0 {
                    i64::from(i32::MIN)
                } else {
                    i64::from(i32::MAX) - i
                }
            })
            .collect();
        assert_eq!(round_trip(Int32, &full32), ENC_RAW);
        // 64-bit packing (range needing all 64 bits is raw; 63 bits packs).
        let b63: Vec<i64> = (0..200)
            .map(|i| if i % 3 == 0 { 0 } else { i64::MAX - i })
            .collect();
        round_trip(Int64, &b63);
    }

    #[test]
    fn zone_maps_exclude_only_what_no_range_reaches() {
        use ColumnType::*;
        assert!(excluded(Int32, 10, 20, &[(21, 30)]));
        assert!(!excluded(Int32, 10, 20, &[(20, 30)]));
        // Negative values are the raw range's top half.
        let neg = |v: i32| u64::from(v as u32);
        assert!(!excluded(Int32, -5, -1, &[(neg(-3), neg(-3))]));
        assert!(excluded(Int32, -5, -1, &[(0, 100)]));
        assert!(!excluded(Int32, -5, 5, &[(3, 3)]));
        assert!(!excluded(Int32, -5, 5, &[(neg(-5), neg(-5))]));
        assert!(excluded(Int32, -5, 5, &[(6, 100)]));
        assert!(!excluded(Int64, i64::MIN, -1, &[(1 << 63, 1 << 63)]));
        assert!(excluded(Uint32, 0, 3, &[(4, 9)]));
    }
}
