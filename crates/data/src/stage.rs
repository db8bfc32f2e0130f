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
//! A block that fails its checksum is found by csx_unpack on the device; the host then
//! reads the piece's staged bytes back and names the table, column, block and part
//! ([`DataError::CorruptBlock`]).
//!
//! A stood-in block's rows hold values the predicate that excluded the block rejects
//! (the column's minimum in that block) on the filtered column, and valid values (each
//! column's own minimum) on the others, so a scan or probe over them keeps none of them.

use std::sync::Arc;

use csx_host::proto::abi::colblock::{self, BLOCK_HEADER_SIZE};
use csx_host::proto::{EngineKind, MemHandle};

use crate::columnar::{ColumnType, Schema, Values, FORMAT_VERSION};
use crate::encoding::{constant_block, EncodedColumn, FileHeader, FILE_HEADER_SIZE};
use crate::error::DataError;
use crate::ops::{self, PendingCopy, Session};

/// The decoding program's name (`sdk/ssb/col_unpack.c`).
pub const UNPACK_OPERATOR: &str = "col_unpack";
/// `COL_UNPACK_BAD` of `sdk/ssb/ssb.h`.
const COL_UNPACK_BAD: i64 = -1_000_000;
/// Pieces one col_unpack run takes (40 bytes each in its params).
const PIECES_PER_RUN: usize = csx_host::proto::limits::PARAMS_SIZE_MAX / 40;

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

    /// Bytes of staged blocks `rows` consecutive rows may need (0 for a raw column).
    pub fn staged_bound(&self, rows: u64) -> u64 {
        match self {
            DeviceColumn::Raw { .. } => 0,
            DeviceColumn::Encoded(c) => {
                let blocks = (rows.div_ceil(c.block_rows()) + 1).min(c.blocks.len() as u64);
                let largest = c.blocks.iter().map(|b| b.stored_len()).max().unwrap_or(0);
                blocks * largest
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
    let c = schema.column(name)?;
    let path = format!("{}/{}", dir.trim_end_matches('/'), c.file_name());
    if schema.version != FORMAT_VERSION {
        return Ok(DeviceColumn::Raw { path, ty: c.ty });
    }
    let size = s
        .device()
        .stat(&path)
        .map_err(|e| DataError::device(format!("column file {path}"), e))?
        .size_bytes;
    let corrupt = |message: String| DataError::CorruptColumn {
        table: schema.table.clone(),
        column: name.to_string(),
        path: path.clone(),
        message,
    };
    if size < FILE_HEADER_SIZE {
        return Err(corrupt(format!("{size} bytes, shorter than its header")));
    }
    let head = s.read_file(&path, 0, FILE_HEADER_SIZE)?;
    let header = FileHeader::parse(&head, c.ty, schema.rows, size).map_err(corrupt)?;
    let dir_bytes = s.read_file(&path, header.dir_offset, size - header.dir_offset)?;
    let col = EncodedColumn::parse(&schema.table, name, &path, header, &dir_bytes)?;
    Ok(DeviceColumn::Encoded(col))
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
    dst_off: u64,
    dst_len: u64,
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
        }
    }
}

/// Copies in flight and the expansions that follow them.
#[derive(Debug, Default)]
#[must_use = "a staging must be finished (its copies waited for)"]
pub struct Staging {
    copies: Vec<PendingCopy>,
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

    /// Starts staging rows `[first, first + rows)` of `column` into target `t` at
    /// `dst_off`; `skip[b]`: block b is excluded by a zone map (not read).
    pub fn stage_rows(
        &mut self,
        s: &mut Session,
        column: &Arc<DeviceColumn>,
        (first, rows): (u64, u64),
        skip: &[bool],
        t: usize,
        dst_off: u64,
    ) -> Result<(), DataError> {
        if rows == 0 {
            return Ok(());
        }
        let target = &mut self.targets[t];
        let col = match column.as_ref() {
            DeviceColumn::Raw { path, ty } => {
                let w = ty.width();
                let c = s.start_copy_file(path, first * w, rows * w, target.dst, dst_off)?;
                self.copies.push(c);
                return Ok(());
            }
            DeviceColumn::Encoded(c) => c,
        };
        let w = col.header.ty.width();
        let br = col.block_rows();
        let (b0, b1) = ((first / br) as usize, ((first + rows - 1) / br) as usize);
        let start = target.used;
        let mut b = b0;
        while b <= b1 {
            let skipped = skip.get(b).copied().unwrap_or(false);
            let mut e = b + 1;
            while e <= b1 && skip.get(e).copied().unwrap_or(false) == skipped {
                e += 1;
            }
            let len = if skipped {
                (e - b) as u64 * BLOCK_HEADER_SIZE as u64
            } else {
                col.span(b, e)
            };
            if target.used + len > target.staged_len {
                return Err(DataError::TooLarge {
                    what: format!(
                        "staged blocks of {} for rows {first}..{}",
                        col.path,
                        first + rows
                    ),
                    needed: target.used + len,
                    limit: target.staged_len,
                });
            }
            if skipped {
                let mut bytes = Vec::with_capacity(len as usize);
                for k in b..e {
                    let h = &col.blocks[k];
                    bytes.extend_from_slice(&constant_block(col.header.ty, h.min, h.rows, h.index));
                }
                s.write(target.staged, target.used, &bytes)?;
                self.skipped += (e - b) as u64;
            } else {
                let at = col.blocks[b].at;
                let c = s.start_copy_file(&col.path, at, len, target.staged, target.used)?;
                self.copies.push(c);
            }
            target.used += len;
            b = e;
        }
        target.pieces.push(Piece {
            column: column.clone(),
            first_block: b0,
            src_off: start,
            src_len: target.used - start,
            first_row: first - b0 as u64 * br,
            dst_off,
            dst_len: rows * w,
        });
        Ok(())
    }

    /// Waits for the copies, then expands every target's pieces on the engines (the
    /// targets at once). A bad block is an error naming its table, column and block.
    pub fn finish(self, s: &mut Session) -> Result<(), DataError> {
        let Staging {
            copies, targets, ..
        } = self;
        s.wait_copies(copies)?;
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
                let mut params = Vec::with_capacity(pieces.len() * 40);
                for p in pieces {
                    for v in [p.src_off, p.src_len, p.first_row, p.dst_off, p.dst_len] {
                        params.extend_from_slice(&v.to_le_bytes());
                    }
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
                let r0 = x.r0_signed();
                if r0 >= 0 {
                    continue;
                }
                let t = &targets[ti];
                if r0 <= COL_UNPACK_BAD {
                    let i = round + (COL_UNPACK_BAD - r0) as usize;
                    if let Some(p) = t.pieces.get(i) {
                        let detail = x
                            .detail
                            .as_ref()
                            .map(|d| d.message.clone())
                            .unwrap_or_default();
                        return Err(diagnose(s, t.staged, p, &detail));
                    }
                }
                return Err(DataError::Operator {
                    operator: UNPACK_OPERATOR.to_string(),
                    message: format!("returned {r0} (its windows do not fit its pieces)"),
                });
            }
        }
        Ok(())
    }

    /// Waits for the copies in flight, expanding nothing (after a failure).
    pub fn abandon(self, s: &mut Session) {
        let _ = s.wait_copies(self.copies);
    }
}

/// The error of a piece csx_unpack refused: its staged bytes read back and walked on
/// the host, the bad block named by its place in the piece.
fn diagnose(s: &mut Session, staged: MemHandle, p: &Piece, detail: &str) -> DataError {
    let DeviceColumn::Encoded(col) = p.column.as_ref() else {
        return DataError::Invalid(format!("a raw column's piece failed to expand: {detail}"));
    };
    let bytes = match s.read(staged, p.src_off, p.src_len) {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    let mut out = vec![0u8; p.dst_len as usize];
    match colblock::decode_blocks(&bytes, p.first_row, &mut out, &mut || false) {
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
    let column = Arc::new(device_column(s, dir, schema, name)?);
    let bytes = schema.rows * column.ty().width();
    let h = ops::alloc(s, bytes)?;
    let bound = column.staged_bound(schema.rows);
    let staged = match bound {
        0 => MemHandle::NONE,
        n => ops::alloc(s, n)?,
    };
    let t = staging.target(Target::new(staged, bound, h, bytes.max(64)));
    staging.stage_rows(s, &column, (0, schema.rows), &[], t, 0)?;
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
