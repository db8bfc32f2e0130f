//! Staging columns on the device: rows of a column file into device memory as plain
//! little-endian values, wherever the file's version.
//!
//! ```text
//! raw column (version 1)      one Memory Copy: file rows -> destination
//! encoded column (version 2)  Memory Copies of the blocks holding the rows -> a buffer
//!                             of staged blocks (a block a zone map excludes is not read:
//!                             a 64-byte constant block of its minimum stands in for it);
//!                             then, on the engines, col_unpack (sdk/ssb/col_unpack.c)
//!                             calls csx_unpack per piece: the blocks' checksums checked
//!                             and their rows expanded into the destination
//! ```
//!
//! The copies of one staging are gathered: ranges that land back to back in one buffer
//! (a partition's columns, one after another in its buffer of staged blocks; adjacent
//! blocks of one file as one range) go to the device as one Memory Copy of several
//! sources, which the device reads as one queued read of its media (every source's
//! pieces in flight together), so a partition of short column ranges is read at the
//! queue depth of one long read. [`Staging::submit`] starts what is gathered.
//!
//! The device trusts no inline header: the host writes, after a target's staged blocks,
//! the header it expects for each (its checked directory entry, or the stand-in it
//! wrote), and col_unpack refuses a piece whose staged headers differ or do not tile it,
//! so a crafted file whose inline headers disagree with its directory (another block's
//! rows, another row count) decodes nothing. A block that fails its checksum is found by
//! csx_unpack. Either way the host then reads the piece's staged bytes back and names the
//! table, column, block and part ([`DataError::CorruptBlock`]).
//!
//! A stood-in block's rows hold values the predicate that excluded the block rejects
//! (the column's minimum in that block) on the filtered column, and valid values (each
//! column's own minimum) on the others, so a scan or probe over them keeps none of them.

use std::sync::Arc;

use csx_host::proto::abi;
use csx_host::proto::abi::colblock::{self, BLOCK_HEADER_SIZE};
use csx_host::proto::limits::{COPY_SIZE_MAX, COPY_SOURCES_MAX};
use csx_host::proto::{EngineKind, MemHandle};
use csx_host::session::Params;

use crate::columnar::{ColumnType, Schema, Values, FORMAT_VERSION};
use crate::encoding::{constant_block, EncodedColumn, FileHeader, FILE_HEADER_SIZE};
use crate::error::DataError;
use crate::ops::{self, PendingCopy, Session};

/// The decoding program's name (`sdk/ssb/col_unpack.c`).
pub const UNPACK_OPERATOR: &str = "col_unpack";
/// `COL_UNPACK_BAD` of `sdk/ssb/ssb.h`.
const COL_UNPACK_BAD: i64 = -1_000_000;
/// Bytes of one piece in col_unpack's params (`struct col_unpack_piece`).
const PIECE_PARAMS_SIZE: usize = 56;
/// Pieces one col_unpack run takes.
const PIECES_PER_RUN: usize = csx_host::proto::limits::PARAMS_SIZE_MAX / PIECE_PARAMS_SIZE;

/// A column file on the device, as staging needs it.
#[derive(Clone, Debug)]
pub enum DeviceColumn {
    /// Version 1: fixed-width values.
    Raw { path: String, ty: ColumnType },
    /// Version 2: encoded blocks (their headers, zone maps included, read and checked).
    Encoded(EncodedColumn),
}

impl DeviceColumn {
    pub fn ty(&self) -> ColumnType {
        match self {
            DeviceColumn::Raw { ty, .. } => *ty,
            DeviceColumn::Encoded(c) => c.header.ty,
        }
    }

    pub fn encoded(&self) -> Option<&EncodedColumn> {
        match self {
            DeviceColumn::Encoded(c) => Some(c),
            DeviceColumn::Raw { .. } => None,
        }
    }

    /// Whether it may be staged as 4-byte values though its type has 8: an encoded
    /// column every block of which narrows to 4 bytes ([`colblock::narrows_to`]: by
    /// what its encoding can hold). A raw column never is (nothing says its values fit).
    pub fn narrows_to_4(&self) -> bool {
        match self {
            DeviceColumn::Raw { .. } => false,
            DeviceColumn::Encoded(c) => {
                c.header.ty.width() == 8
                    && (c.blocks.iter()).all(|h| colblock::narrows_to(h, 4).is_ok())
            }
        }
    }

    /// Bytes of staged blocks `rows` consecutive rows may need, with their expected
    /// headers (0 for a raw column).
    pub fn staged_bound(&self, rows: u64) -> u64 {
        match self {
            DeviceColumn::Raw { .. } => 0,
            DeviceColumn::Encoded(c) => {
                let blocks = (rows.div_ceil(c.block_rows()) + 1).min(c.blocks.len() as u64);
                let largest = c.blocks.iter().map(|b| b.stored_len()).max().unwrap_or(0);
                // The expected headers start 8-aligned: 7 bytes of padding at most.
                blocks * (largest + BLOCK_HEADER_SIZE as u64) + 7
            }
        }
    }
}

/// Opens column `name` of the table at `dir` (schema `schema`) on the device: an
/// encoded one's header and directory are read (two small reads) and checked.
pub fn device_column(
    s: &mut Session,
    dir: &str,
    schema: &Schema,
    name: &str,
) -> Result<DeviceColumn, DataError> {
    let mut one = device_columns(s, dir, schema, &[name])?;
    Ok(one.pop().expect("one column asked, one opened"))
}

/// [`device_column`] of several columns of one table at once: their files' sizes,
/// then their headers, then their directories, each step asked for every column
/// together, so opening a table's columns takes three round trips to the device, not
/// three per column.
pub fn device_columns(
    s: &mut Session,
    dir: &str,
    schema: &Schema,
    names: &[&str],
) -> Result<Vec<DeviceColumn>, DataError> {
    let dir = dir.trim_end_matches('/');
    let columns = (names.iter())
        .map(|n| schema.column(n))
        .collect::<Result<Vec<_>, _>>()?;
    let paths: Vec<String> = (columns.iter())
        .map(|c| format!("{dir}/{}", c.file_name()))
        .collect();
    if schema.version != FORMAT_VERSION {
        return Ok((columns.iter().zip(paths))
            .map(|(c, path)| DeviceColumn::Raw { path, ty: c.ty })
            .collect());
    }
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let sizes = s.stat_files(&refs).map_err(|e| match e {
        csx_host::SessionError::Device { what, source } => {
            DataError::device(format!("column {what}"), source)
        }
        e => e.into(),
    })?;
    let corrupt = |i: usize, message: String| DataError::CorruptColumn {
        table: schema.table.clone(),
        column: names[i].to_string(),
        path: paths[i].clone(),
        message,
    };
    for (i, &size) in sizes.iter().enumerate() {
        if size < FILE_HEADER_SIZE {
            return Err(corrupt(i, format!("{size} bytes, shorter than its header")));
        }
    }
    let heads: Vec<(&str, u64, u64)> = refs.iter().map(|&p| (p, 0, FILE_HEADER_SIZE)).collect();
    let heads = s.read_files(&heads)?;
    let headers = (heads.iter().enumerate())
        .map(|(i, head)| {
            FileHeader::parse(head, columns[i].ty, schema.rows, sizes[i]).map_err(|m| corrupt(i, m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let dirs: Vec<(&str, u64, u64)> = (headers.iter().enumerate())
        .map(|(i, h)| (refs[i], h.dir_offset, sizes[i] - h.dir_offset))
        .collect();
    let dirs = s.read_files(&dirs)?;
    (headers.into_iter().zip(dirs).enumerate())
        .map(|(i, (header, dir_bytes))| {
            let col = EncodedColumn::parse(&schema.table, names[i], &paths[i], header, &dir_bytes)?;
            Ok(DeviceColumn::Encoded(col))
        })
        .collect()
}

/// A whole column read to the host (the host-only split): encoded blocks are sent as
/// stored and decoded, and checked, on the host.
pub fn read_to_host(
    s: &mut Session,
    dir: &str,
    schema: &Schema,
    name: &str,
) -> Result<Values, DataError> {
    let c = schema.column(name)?;
    match device_column(s, dir, schema, name)? {
        DeviceColumn::Raw { path, ty } => {
            let bytes = s.read_file(&path, 0, schema.rows * c.ty.width())?;
            Ok(Values::from_le_bytes(ty, &bytes))
        }
        DeviceColumn::Encoded(col) => {
            let bytes = s.read_file(
                &col.path,
                FILE_HEADER_SIZE,
                col.header.dir_offset - FILE_HEADER_SIZE,
            )?;
            let mut out = vec![0u8; (schema.rows * c.ty.width()) as usize];
            col.decode_into(0, &bytes, &mut out)?;
            Ok(Values::from_le_bytes(c.ty, &out))
        }
    }
}

/// One piece of a staging: rows of one column, expanded from staged blocks.
#[derive(Clone, Debug)]
struct Piece {
    column: Arc<DeviceColumn>,
    /// The first block staged and, per block from it, whether it stands in for a
    /// skipped one.
    first_block: usize,
    src_off: u64,
    src_len: u64,
    first_row: u64,
    /// The width its values are expanded to: 0, the blocks' own, or 4 for 8-byte values
    /// narrowed ([`Staging::stage_rows_as`]).
    as_width: u8,
    dst_off: u64,
    dst_len: u64,
    /// The piece's expected block headers: byte offset in its target's `expect`, and
    /// how many.
    expect_off: u64,
    expect_count: u64,
}

/// col_unpack's params of one piece (`struct col_unpack_piece` of `sdk/ssb/ssb.h`).
pub(crate) fn piece_params(p: &PieceParams) -> Params {
    Params::new()
        .u64("src_off", p.src_off)
        .u64("src_len", p.src_len)
        .u64("first_row", p.first_row)
        .u64("dst_off", p.dst_off)
        .u64("dst_len", p.dst_len)
        .u64("expect_off", p.expect_off)
        .u64("expect_count", p.expect_count)
}

/// The fields of `struct col_unpack_piece`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PieceParams {
    pub src_off: u64,
    pub src_len: u64,
    pub first_row: u64,
    pub dst_off: u64,
    pub dst_len: u64,
    pub expect_off: u64,
    pub expect_count: u64,
}

impl Piece {
    /// Its params; `expect_base`: where its target's expected headers lie in the
    /// target's staged buffer.
    fn params(&self, expect_base: u64) -> Params {
        piece_params(&PieceParams {
            src_off: self.src_off,
            src_len: self.src_len,
            first_row: self.first_row
                | u64::from(self.as_width) << abi::functions::CSX_UNPACK_AS_SHIFT,
            dst_off: self.dst_off,
            dst_len: self.dst_len,
            expect_off: expect_base + self.expect_off,
            expect_count: self.expect_count,
        })
    }
}

/// A destination and the buffer of staged blocks expanded into it.
#[derive(Debug)]
pub struct Target {
    pub staged: MemHandle,
    pub staged_len: u64,
    pub dst: MemHandle,
    pub dst_len: u64,
    used: u64,
    pieces: Vec<Piece>,
    /// The headers the staged blocks must have, in staging order (64 bytes each),
    /// written after the blocks when the staging finishes.
    expect: Vec<u8>,
}

impl Target {
    pub fn new(staged: MemHandle, staged_len: u64, dst: MemHandle, dst_len: u64) -> Target {
        Target {
            staged,
            staged_len,
            dst,
            dst_len,
            used: 0,
            pieces: Vec::new(),
            expect: Vec::new(),
        }
    }
}

/// A Memory Copy being gathered: file ranges that land back to back in one buffer
/// (a target's columns, one after the other), started as one copy, so the device reads
/// them as one queued read; adjacent ranges of one file become one range.
#[derive(Debug)]
struct OpenCopy {
    dst: MemHandle,
    dst_offset: u64,
    len: u64,
    /// `(path, offset, len)`, in destination order.
    ranges: Vec<(String, u64, u64)>,
}

impl OpenCopy {
    /// Adds `len` bytes of `path` at `at` if they land right after the copy's bytes in
    /// its buffer (`several`: the copy may read more than one file); whether they did.
    fn extend(
        &mut self,
        (path, at, len): (&str, u64, u64),
        (dst, dst_off): (MemHandle, u64),
        several: bool,
    ) -> bool {
        if dst != self.dst
            || dst_off != self.dst_offset + self.len
            || self.len + len > COPY_SIZE_MAX
        {
            return false;
        }
        let last = self.ranges.last_mut().expect("an open copy has a range");
        if last.0 == path && last.1 + last.2 == at {
            last.2 += len;
        } else if several && self.ranges.len() < COPY_SOURCES_MAX {
            self.ranges.push((path.to_string(), at, len));
        } else {
            return false;
        }
        self.len += len;
        true
    }
}

/// Copies in flight and the expansions that follow them.
#[derive(Debug, Default)]
#[must_use = "a staging must be finished (its copies waited for)"]
pub struct Staging {
    copies: Vec<PendingCopy>,
    /// The copy being gathered, started by [`Staging::submit`] (or when a range does not
    /// continue it).
    open: Option<OpenCopy>,
    targets: Vec<Target>,
    /// Blocks a zone map excluded (not read).
    pub skipped: u64,
}

impl Staging {
    /// Adds a destination; its index for [`Staging::stage_rows`].
    pub fn target(&mut self, t: Target) -> usize {
        self.targets.push(t);
        self.targets.len() - 1
    }

    /// Sets target `t`'s destination, when it was made without one
    /// ([`MemHandle::NONE`]): its encoded rows are expanded there, so it must be set
    /// before [`Staging::finish`] (or [`Expansion::expand`]). A target without a
    /// destination stages no raw rows.
    pub fn set_dst(&mut self, t: usize, dst: MemHandle) {
        debug_assert_eq!(self.targets[t].dst, MemHandle::NONE);
        self.targets[t].dst = dst;
    }

    /// Starts staging rows `[first, first + rows)` of `column` into target `t` at
    /// `dst_off`; `skip[b]`: block b is excluded by a zone map (not read).
    pub fn stage_rows(
        &mut self,
        s: &mut Session,
        column: &Arc<DeviceColumn>,
        rows: (u64, u64),
        skip: &[bool],
        t: usize,
        dst_off: u64,
    ) -> Result<(), DataError> {
        let width = column.ty().width();
        self.stage_rows_as(s, column, rows, skip, (t, dst_off), width)
    }

    /// [`Staging::stage_rows`] as values of `width` bytes: the column's own, or 4 for an
    /// encoded column of 8-byte values every block of which narrows to 4
    /// ([`DeviceColumn::narrows_to_4`]; the device refuses a block that does not).
    pub fn stage_rows_as(
        &mut self,
        s: &mut Session,
        column: &Arc<DeviceColumn>,
        (first, rows): (u64, u64),
        skip: &[bool],
        (t, dst_off): (usize, u64),
        width: u64,
    ) -> Result<(), DataError> {
        if rows == 0 {
            return Ok(());
        }
        let col = match column.as_ref() {
            DeviceColumn::Raw { path, ty } => {
                let w = ty.width();
                assert_eq!(w, width, "raw columns are staged at their own width");
                let dst = self.targets[t].dst;
                assert!(
                    dst != MemHandle::NONE,
                    "raw rows need the destination first"
                );
                return self.copy(s, (path, first * w, rows * w), (dst, dst_off));
            }
            DeviceColumn::Encoded(c) => c,
        };
        let br = col.block_rows();
        let (b0, b1) = ((first / br) as usize, ((first + rows - 1) / br) as usize);
        let start = self.targets[t].used;
        let expect_off = self.targets[t].expect.len() as u64;
        let mut b = b0;
        while b <= b1 {
            let skipped = skip.get(b).copied().unwrap_or(false);
            let mut e = b + 1;
            while e <= b1 && skip.get(e).copied().unwrap_or(false) == skipped {
                e += 1;
            }
            self.stage_blocks(s, col, (b, e), skipped, t, (first, rows))?;
            b = e;
        }
        let target = &mut self.targets[t];
        target.pieces.push(Piece {
            column: column.clone(),
            first_block: b0,
            src_off: start,
            src_len: target.used - start,
            first_row: first - b0 as u64 * br,
            as_width: if width == col.header.ty.width() {
                0
            } else {
                width as u8
            },
            dst_off,
            dst_len: rows * width,
            expect_off,
            expect_count: (b1 + 1 - b0) as u64,
        });
        Ok(())
    }

    /// Stages blocks `[b, e)` of `col` after target `t`'s used bytes: a Memory Copy of
    /// them, or (`skipped`) their stand-ins written; records their expected headers.
    /// `rows`: the rows being staged, for the error when they do not fit.
    fn stage_blocks(
        &mut self,
        s: &mut Session,
        col: &EncodedColumn,
        (b, e): (usize, usize),
        skipped: bool,
        t: usize,
        (first, rows): (u64, u64),
    ) -> Result<(), DataError> {
        let target = &mut self.targets[t];
        let len = if skipped {
            (e - b) as u64 * BLOCK_HEADER_SIZE as u64
        } else {
            col.span(b, e)
        };
        let expect_len = (target.expect.len() + (e - b) * BLOCK_HEADER_SIZE) as u64;
        let needed = (target.used + len).next_multiple_of(8) + expect_len;
        if needed > target.staged_len {
            return Err(DataError::TooLarge {
                what: format!(
                    "staged blocks of {} for rows {first}..{}",
                    col.path,
                    first + rows
                ),
                needed,
                limit: target.staged_len,
            });
        }
        if skipped {
            let mut bytes = Vec::with_capacity(len as usize);
            for h in &col.blocks[b..e] {
                bytes.extend_from_slice(&constant_block(col.header.ty, h.min, h.rows, h.index));
            }
            s.write(target.staged, target.used, &bytes)?;
            target.expect.extend_from_slice(&bytes);
            self.skipped += (e - b) as u64;
        } else {
            let at = col.blocks[b].at;
            for h in &col.blocks[b..e] {
                target.expect.extend_from_slice(&h.encode());
            }
            let dst = (target.staged, target.used);
            target.used += len;
            return self.copy(s, (&col.path, at, len), dst);
        }
        target.used += len;
        Ok(())
    }

    /// Copies `len` bytes of `path` at `at` to `dst` at `dst_off`: added to the copy
    /// being gathered when they land right after it, else that copy is started and a
    /// new one gathered.
    fn copy(
        &mut self,
        s: &mut Session,
        (path, at, len): (&str, u64, u64),
        (dst, dst_off): (MemHandle, u64),
    ) -> Result<(), DataError> {
        let several = !s.is_resident();
        if let Some(open) = &mut self.open {
            if open.extend((path, at, len), (dst, dst_off), several) {
                return Ok(());
            }
        }
        self.submit(s)?;
        self.open = Some(OpenCopy {
            dst,
            dst_offset: dst_off,
            len,
            ranges: vec![(path.to_string(), at, len)],
        });
        Ok(())
    }

    /// Starts the copy being gathered, if any: the caller calls it once it has staged
    /// what it means to before doing other work, so the copies run meanwhile.
    pub fn submit(&mut self, s: &mut Session) -> Result<(), DataError> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let ranges: Vec<(&str, u64, u64)> = (open.ranges.iter())
            .map(|(p, at, len)| (p.as_str(), *at, *len))
            .collect();
        let c = s.start_copy_files(&ranges, open.dst, open.dst_offset)?;
        self.copies.push(c);
        Ok(())
    }

    /// Waits for the copies, then expands every target's pieces on the engines (the
    /// targets at once). A bad block is an error naming its table, column and block.
    pub fn finish(self, s: &mut Session) -> Result<(), DataError> {
        self.wait_copies(s)?.expand(s)
    }

    /// Waits for the copies (after writing the expected headers): what is left is the
    /// expansion, which the caller may run after starting the next staging's copies, so
    /// the media reads of one staging overlap the decoding of the one before.
    pub fn wait_copies(mut self, s: &mut Session) -> Result<Expansion, DataError> {
        if let Err(e) = self.submit(s) {
            self.abandon(s);
            return Err(e);
        }
        let Staging {
            copies, targets, ..
        } = self;
        // The expected headers go in while the copies are in flight.
        let bases = match write_expected(s, &targets) {
            Ok(b) => b,
            Err(e) => {
                let _ = s.wait_copies(copies);
                return Err(e);
            }
        };
        s.wait_copies(copies)?;
        Ok(Expansion { targets, bases })
    }

    /// Waits for the copies in flight, expanding nothing (after a failure); the copy
    /// being gathered is never started.
    pub fn abandon(self, s: &mut Session) {
        let _ = s.wait_copies(self.copies);
    }
}

/// A staging whose copies are done: the expansion of its encoded blocks
/// ([`Staging::wait_copies`]).
#[derive(Debug)]
#[must_use = "staged blocks must be expanded"]
pub struct Expansion {
    targets: Vec<Target>,
    /// Where each target's expected headers lie in its staged buffer.
    bases: Vec<u64>,
}

impl Expansion {
    /// Expands every target's pieces on the engines (the targets at once). A bad block
    /// is an error naming its table, column and block.
    pub fn expand(self, s: &mut Session) -> Result<(), DataError> {
        let Expansion { targets, bases } = self;
        let most = targets.iter().map(|t| t.pieces.len()).max().unwrap_or(0);
        if most == 0 {
            return Ok(());
        }
        let pind = match s.find_program(UNPACK_OPERATOR) {
            Some(p) => p,
            None => ops::load(s, UNPACK_OPERATOR, EngineKind::Interpreter)?,
        };
        for round in (0..most).step_by(PIECES_PER_RUN) {
            let mut runs = Vec::new();
            let mut which = Vec::new();
            for (ti, t) in targets.iter().enumerate() {
                let pieces = &t.pieces
                    [round.min(t.pieces.len())..(round + PIECES_PER_RUN).min(t.pieces.len())];
                if pieces.is_empty() {
                    continue;
                }
                let mut params = Vec::with_capacity(pieces.len() * PIECE_PARAMS_SIZE);
                for p in pieces {
                    params.extend_from_slice(&p.params(bases[ti]).into_bytes());
                }
                let w = [(t.staged, 0, t.staged_len.max(64)), (t.dst, 0, t.dst_len)];
                runs.push(
                    ops::run(pind, &w)
                        .cparams(pieces.len() as u64, 0)
                        .params(params),
                );
                which.push((ti, round));
            }
            let done = s.execute_all(&runs)?;
            for (x, &(ti, round)) in done.iter().zip(&which) {
                check_unpacked(s, x, &targets[ti], round)?;
            }
        }
        Ok(())
    }
}

/// Writes each target's expected headers after its staged blocks (8-aligned); their
/// offsets in the targets' staged buffers.
fn write_expected(s: &mut Session, targets: &[Target]) -> Result<Vec<u64>, DataError> {
    let mut bases = Vec::with_capacity(targets.len());
    for t in targets {
        let base = t.used.next_multiple_of(8);
        if !t.expect.is_empty() {
            // stage_blocks made room for them.
            debug_assert!(base + t.expect.len() as u64 <= t.staged_len);
            s.write(t.staged, base, &t.expect)?;
        }
        bases.push(base);
    }
    Ok(bases)
}

/// The outcome of one col_unpack run over target `t`'s pieces from `round`: a refused
/// piece diagnosed into the error naming its block.
fn check_unpacked(
    s: &mut Session,
    x: &csx_host::Execution,
    t: &Target,
    round: usize,
) -> Result<(), DataError> {
    let r0 = x.r0_signed();
    if r0 >= 0 {
        return Ok(());
    }
    if r0 <= COL_UNPACK_BAD {
        let i = round + (COL_UNPACK_BAD - r0) as usize;
        if let Some(p) = t.pieces.get(i) {
            let detail = x
                .detail
                .as_ref()
                .map(|d| d.message.clone())
                .unwrap_or_default();
            return Err(diagnose(s, t, p, &detail));
        }
    }
    Err(DataError::Operator {
        operator: UNPACK_OPERATOR.to_string(),
        message: format!("returned {r0} (its windows do not fit its pieces)"),
    })
}

/// The error of a piece col_unpack refused: its staged bytes read back and walked on
/// the host, the bad block named by its place in the piece: first a header that differs
/// from the expected one, then what csx_unpack finds.
fn diagnose(s: &mut Session, t: &Target, p: &Piece, detail: &str) -> DataError {
    let DeviceColumn::Encoded(col) = p.column.as_ref() else {
        return DataError::Invalid(format!("a raw column's piece failed to expand: {detail}"));
    };
    let bytes = match s.read(t.staged, p.src_off, p.src_len) {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    let expect = &t.expect[p.expect_off as usize..][..p.expect_count as usize * BLOCK_HEADER_SIZE];
    if let Some((k, message)) = header_mismatch(&bytes, expect) {
        return col.corrupt((p.first_block + k) as u64, "header", message);
    }
    let mut out = vec![0u8; p.dst_len as usize];
    match colblock::decode_blocks_as(&bytes, p.first_row, &mut out, p.as_width, &mut || false) {
        Err(e) => {
            // The block whose header starts at byte e.at of the piece.
            let mut at = 0usize;
            let mut block = p.first_block;
            while at < e.at && block < col.blocks.len() {
                let len = colblock::BlockHeader::parse(&bytes[at..])
                    .map(|h| h.stored_len() as usize)
                    .unwrap_or(BLOCK_HEADER_SIZE);
                at += len;
                block += 1;
            }
            col.corrupt(block as u64, e.part.name(), e.message)
        }
        Ok(_) => DataError::Operator {
            operator: UNPACK_OPERATOR.to_string(),
            message: format!(
                "{}: rows from {} failed on the device ({detail}) but not when read back",
                col.path, p.first_row
            ),
        },
    }
}

/// The first staged block (its place in the piece) whose header is not the expected
/// one, as col_unpack walks them, and what differs.
fn header_mismatch(staged: &[u8], expect: &[u8]) -> Option<(usize, String)> {
    let mut at = 0usize;
    for (k, want) in expect.chunks_exact(BLOCK_HEADER_SIZE).enumerate() {
        let Some(got) = staged.get(at..at + BLOCK_HEADER_SIZE) else {
            return Some((k, format!("the staged blocks end at byte {}", staged.len())));
        };
        if got != want {
            let what = match (
                colblock::BlockHeader::parse(got),
                colblock::BlockHeader::parse(want),
            ) {
                (Ok(g), Ok(w)) => format!(
                    "block {} of {} rows at {} where the directory has block {} of {} rows at {}",
                    g.index, g.rows, g.at, w.index, w.rows, w.at
                ),
                (Err(m), _) => m,
                (Ok(_), Err(m)) => format!("the expected header is bad: {m}"),
            };
            return Some((k, format!("differs from its directory entry: {what}")));
        }
        let len = u32::from_le_bytes(want[16..20].try_into().expect("4 bytes"));
        at += BLOCK_HEADER_SIZE + len as usize;
    }
    (at != staged.len()).then(|| {
        let k = expect.len() / BLOCK_HEADER_SIZE;
        (
            k.saturating_sub(1),
            format!("the blocks end at byte {at} of {}", staged.len()),
        )
    })
}

/// Starts staging a whole column of the table at `dir` into fresh device memory (its
/// staged blocks into a buffer of their own), as part of `staging`; the memory holds
/// `rows * width` bytes of plain values once `staging` is finished.
pub fn stage_whole_into(
    s: &mut Session,
    dir: &str,
    schema: &Schema,
    name: &str,
    staging: &mut Staging,
) -> Result<MemHandle, DataError> {
    let column = device_column(s, dir, schema, name)?;
    stage_opened_into(s, column, schema.rows, staging)
}

/// [`stage_whole_into`] of a column opened already (its `rows` rows).
pub fn stage_opened_into(
    s: &mut Session,
    column: DeviceColumn,
    rows: u64,
    staging: &mut Staging,
) -> Result<MemHandle, DataError> {
    let column = Arc::new(column);
    let bytes = rows * column.ty().width();
    let h = ops::alloc(s, bytes)?;
    let bound = column.staged_bound(rows);
    let staged = match bound {
        0 => MemHandle::NONE,
        n => ops::alloc(s, n)?,
    };
    let t = staging.target(Target::new(staged, bound, h, bytes.max(64)));
    staging.stage_rows(s, &column, (0, rows), &[], t, 0)?;
    // A column has buffers of its own: nothing after it continues its copy.
    staging.submit(s)?;
    Ok(h)
}

/// [`stage_whole_into`] alone, waited for.
pub fn stage_whole(
    s: &mut Session,
    dir: &str,
    schema: &Schema,
    name: &str,
) -> Result<MemHandle, DataError> {
    let mut st = Staging::default();
    match stage_whole_into(s, dir, schema, name, &mut st) {
        Ok(h) => {
            st.finish(s)?;
            Ok(h)
        }
        Err(e) => {
            st.abandon(s);
            Err(e)
        }
    }
}
