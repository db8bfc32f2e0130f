//! Registered device functions: the native code programs call as `extern` C functions
//! (Delilah's "sidestepping"), and the table the device publishes so hosts know what it
//! offers before compiling.
//!
//! The signatures (ids, C declarations, argument kinds) are the program ABI's
//! ([`csx_proto::abi::functions`]); this module implements them ([`CallContext`]) and
//! states them in the VM's terms ([`function_table`]). A test calls every id of the ABI
//! and fails if one has no implementation.
//!
//! Errors: a function that fails returns a negative `CSX_E*` code (`csx_proto::errno`)
//! to the program, which may handle it, and the first failure of a run is recorded
//! (function, code, message) for the completion's error detail, so the host learns what
//! went wrong even when the program only returns a number. No function aborts a run,
//! except to stop it:
//!
//! Stopping: a context given the run's stop flag ([`CallContext::with_stop`]) looks at
//! it after every function returns and, in the functions whose work grows with their
//! arguments (memcpy, memset, the filters, sort, merge, file reads), and between the
//! blocks `csx_unpack` decodes, between
//! pieces of at most [`STOP_CHECK_BYTES`] bytes; a set flag ends the run with the
//! abort [`STOPPED_IN_FUNCTION`], which `crate::execute` reports as the run stopped
//! (aborted, or past its time limit). A sort of more than [`SORT_PIECE_KEYS`] keys is
//! split first (a selection of the median, recursively) so it can stop between pieces;
//! a file write (refused whole or done whole), the lz4 and cipher functions and the
//! merges of runs into another window work on one window in one piece (their time is bounded by the window's size, and a run that
//! overruns its limit inside one is reported as past its limit).

use std::time::{Duration, Instant};

use csx_ebpf::engine::StopFlag;
use csx_ebpf::helper::{ArgKind, FunctionSig, FunctionTable, HelperAbort, HelperHost};
use csx_ebpf::memory::MemoryMap;
use csx_proto::abi::errno::*;
use csx_proto::abi::functions as ids;
use csx_proto::abi::{self, cmp};
use csx_proto::limits::{PATH_SIZE_MAX, TRACE_MESSAGES_MAX, TRACE_MESSAGE_SIZE_MAX};
use csx_proto::{ErrorDetail, FunctionInfo, WireArgKind};

use crate::filestore::{FileStore, FileStoreError};
use crate::status::file_errno;

/// The table programs are linked and verified against: [`abi::functions::FUNCTIONS`]
/// with each argument kind in the VM's terms.
pub fn function_table() -> FunctionTable {
    let mut t = FunctionTable::new();
    for f in abi::functions::FUNCTIONS {
        t.insert(FunctionSig {
            name: f.name.to_string(),
            id: f.id,
            args: f.args.iter().map(|a| arg_kind(*a)).collect(),
            version: f.version,
            doc: f.doc.to_string(),
        })
        .expect("the built-in table has unique names and ids and valid signatures");
    }
    t
}

/// The VM's form of an ABI argument kind.
fn arg_kind(a: WireArgKind) -> ArgKind {
    match a {
        WireArgKind::Scalar => ArgKind::Scalar,
        WireArgKind::PtrIn { len_arg } => ArgKind::PtrIn { len_arg },
        WireArgKind::PtrOut { len_arg } => ArgKind::PtrOut { len_arg },
    }
}

/// The table as the device publishes it (List Functions): every function of the ABI.
pub fn function_infos() -> Vec<FunctionInfo> {
    abi::functions::infos()
}

/// What one execution's calls into registered functions need and leave behind.
pub struct CallContext<'a> {
    /// The device's files; `None` on the host side of λ-IO, where the file functions
    /// fail with `CSX_ENOSYS` (a λ reads its input from window 0, never by path).
    files: Option<&'a FileStore>,
    /// The run's stop flag, looked at inside long functions and after each call.
    stop: Option<&'a StopFlag>,
    epoch: Instant,
    /// The first failure of the run.
    pub detail: Option<ErrorDetail>,
    /// `csx_trace` messages, in order.
    pub trace: Vec<String>,
    /// Time spent in file I/O (reported as transfer time).
    pub io: Duration,
}

impl std::fmt::Debug for CallContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("detail", &self.detail)
            .field("trace", &self.trace)
            .finish_non_exhaustive()
    }
}

type CallResult = Result<u64, HelperAbort>;

/// One checked `csx_filter_u32`/`csx_filter_u64` call: `len` bytes of `width`-byte
/// values at `src` compared by `op` with `operand`, one bit a value at `bitmap`.
struct FilterCall {
    name: &'static str,
    width: usize,
    src: u64,
    len: u64,
    bitmap: u64,
    op: u64,
    operand: u64,
    kernel: fn(&[u8], &mut [u8], u64, u64) -> u64,
}

impl FilterCall {
    fn bitmap_len(&self) -> u64 {
        (self.len / self.width as u64).div_ceil(8)
    }
}

/// The abort code a function stops its run with when the run's stop flag is set (no
/// `CSX_E*` code is this low).
pub const STOPPED_IN_FUNCTION: i64 = -0x7374_6f70;

/// Bytes a long function works through between looks at the stop flag.
pub const STOP_CHECK_BYTES: usize = 4 << 20;

/// Keys of the pieces a long sort is split into before sorting each (see the module
/// doc): 32 MiB of keys, sorted in tens of milliseconds.
pub const SORT_PIECE_KEYS: usize = 4 << 20;

fn stopped_abort() -> HelperAbort {
    HelperAbort {
        code: STOPPED_IN_FUNCTION,
        message: "stopped inside a device function".into(),
    }
}

impl<'a> CallContext<'a> {
    /// A context for one run; `csx_now_ns` counts from `epoch`.
    pub fn new(files: &'a FileStore, epoch: Instant) -> CallContext<'a> {
        CallContext {
            files: Some(files),
            stop: None,
            epoch,
            detail: None,
            trace: Vec::new(),
            io: Duration::ZERO,
        }
    }

    /// A context without a file store: the host-side λ runtime's. Every function but the
    /// file functions behaves as on the device.
    pub fn without_files(epoch: Instant) -> CallContext<'static> {
        CallContext {
            files: None,
            stop: None,
            epoch,
            detail: None,
            trace: Vec::new(),
            io: Duration::ZERO,
        }
    }

    /// Has the functions look at `stop` (see "Stopping" in the module doc).
    pub fn with_stop(mut self, stop: &'a StopFlag) -> CallContext<'a> {
        self.stop = Some(stop);
        self
    }

    /// `Err` (the abort that stops the run) when the run's stop flag is set.
    fn check_stop(&self) -> Result<(), HelperAbort> {
        match self.stop {
            Some(flag) if flag.is_set() => Err(stopped_abort()),
            _ => Ok(()),
        }
    }

    /// Records the failure (if it is the run's first) and returns `code` to the program.
    fn fail(&mut self, function: &str, code: i64, message: impl Into<String>) -> CallResult {
        debug_assert!(code < 0);
        if self.detail.is_none() {
            self.detail = Some(ErrorDetail::new(function, code, message));
        }
        Ok(code as u64)
    }

    fn path(
        &mut self,
        function: &str,
        mem: &MemoryMap<'_>,
        addr: u64,
        len: u64,
    ) -> Result<String, CallResult> {
        if len > PATH_SIZE_MAX as u64 {
            return Err(self.fail(
                function,
                CSX_ENAMETOOLONG,
                format!("path of {len} bytes, limit is {PATH_SIZE_MAX}"),
            ));
        }
        // The VM checked these bytes before the call (argument kind PtrIn).
        let bytes = mem
            .slice(addr, len)
            .map_err(|t| self.fail(function, CSX_EFAULT, t.to_string()))?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.fail(function, CSX_EINVAL, "path is not valid UTF-8")),
        }
    }

    /// The file store, or the `CSX_ENOSYS` failure of `function` without one.
    fn files(&mut self, function: &str) -> Result<&'a FileStore, CallResult> {
        match self.files {
            Some(f) => Ok(f),
            None => Err(self.fail(
                function,
                CSX_ENOSYS,
                "no device files on the host side of a λ",
            )),
        }
    }

    fn file_error(&mut self, function: &str, e: &FileStoreError) -> CallResult {
        self.fail(function, file_errno(e), e.to_string())
    }

    fn file_size(&mut self, a: [u64; 5], mem: &MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_file_size";
        let path = match self.path(F, mem, a[0], a[1]) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let start = Instant::now();
        let files = match self.files(F) {
            Ok(f) => f,
            Err(r) => return r,
        };
        let r = files.stat(&path);
        self.io += start.elapsed();
        match r {
            Ok(st) => Ok(st.size),
            Err(e) => self.file_error(F, &e),
        }
    }

    fn file_read(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_file_read";
        let path = match self.path(F, mem, a[0], a[1]) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let (offset, dst, len) = (a[2], a[3], a[4]);
        let buf = match mem.slice_mut(dst, len) {
            Ok(b) => b,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        let start = Instant::now();
        let files = match self.files(F) {
            Ok(f) => f,
            Err(r) => return r,
        };
        // The device reading its own media: uncached and queued, like a Memory Copy, so
        // a program's own reads neither use nor fill the host's page cache of the image.
        // In pieces, looking at the stop flag between them.
        let stop = self.stop;
        let mut total = 0usize;
        let mut r = Ok(());
        for piece in buf.chunks_mut(STOP_CHECK_BYTES) {
            if stop.is_some_and(StopFlag::is_set) {
                self.io += start.elapsed();
                return Err(stopped_abort());
            }
            match files.read_at_uncached(&path, offset + total as u64, piece) {
                Ok(n) => {
                    total += n;
                    if n < piece.len() {
                        break;
                    }
                }
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        self.io += start.elapsed();
        match r {
            Ok(()) => Ok(total as u64),
            Err(e) => self.file_error(F, &e),
        }
    }

    fn file_write(&mut self, a: [u64; 5], mem: &MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_file_write";
        let path = match self.path(F, mem, a[0], a[1]) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let (offset, src, len) = (a[2], a[3], a[4]);
        let data = match mem.slice(src, len) {
            Ok(d) => d,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        let start = Instant::now();
        let files = match self.files(F) {
            Ok(f) => f,
            Err(r) => return r,
        };
        // One write (it is refused whole or done whole: no space for part of it is an
        // error before anything is written); the stop flag is looked at after it.
        let r = files.write_at(&path, offset, data);
        self.io += start.elapsed();
        match r {
            Ok(()) => Ok(len),
            Err(e) => self.file_error(F, &e),
        }
    }

    fn memcpy(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        let (dst, src, len) = (a[0], a[1], a[2]);
        // Both ranges are checked whole first, so a failed call copies nothing.
        if let Err(t) = mem
            .translate(src, len, false)
            .and_then(|_| mem.translate(dst, len, true))
        {
            return self.fail("csx_memcpy", CSX_EFAULT, t.to_string());
        }
        // In pieces, looking at the stop flag between them; backwards when the
        // destination overlaps the source from above, so each piece reads bytes no
        // earlier piece wrote (the whole copy is a memmove).
        let piece = STOP_CHECK_BYTES as u64;
        let pieces = len.div_ceil(piece);
        let backwards = dst > src && dst - src < len;
        for p in 0..pieces {
            let i = if backwards { pieces - 1 - p } else { p };
            let off = i * piece;
            let n = piece.min(len - off);
            if let Err(t) = mem.copy(dst + off, src + off, n) {
                return self.fail("csx_memcpy", CSX_EFAULT, t.to_string());
            }
            if p + 1 < pieces {
                self.check_stop()?;
            }
        }
        Ok(len)
    }

    fn memset(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        let stop = self.stop;
        match mem.slice_mut(a[0], a[2]) {
            Ok(b) => {
                for piece in b.chunks_mut(STOP_CHECK_BYTES) {
                    if stop.is_some_and(StopFlag::is_set) {
                        return Err(stopped_abort());
                    }
                    piece.fill(a[1] as u8);
                }
                Ok(a[2])
            }
            Err(t) => self.fail("csx_memset", CSX_EFAULT, t.to_string()),
        }
    }

    fn trace_message(&mut self, a: [u64; 5], mem: &MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_trace";
        if self.trace.len() >= TRACE_MESSAGES_MAX {
            return self.fail(
                F,
                CSX_ENOSPC,
                format!("trace holds {TRACE_MESSAGES_MAX} messages already"),
            );
        }
        let len = a[1].min(TRACE_MESSAGE_SIZE_MAX as u64);
        let bytes = match mem.slice(a[0], len) {
            Ok(b) => b,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        // Cut at the first NUL: C strings passed with a generous length stay clean.
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
        self.trace
            .push(csx_proto::completion::clip(text, TRACE_MESSAGE_SIZE_MAX));
        Ok(0)
    }

    fn filter(&mut self, width: usize, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        let name = if width == 4 {
            "csx_filter_u32"
        } else {
            "csx_filter_u64"
        };
        let (src, len, op, operand, bitmap) = (a[0], a[1], a[2], a[3], a[4]);
        if len % width as u64 != 0 {
            return self.fail(
                name,
                CSX_EINVAL,
                format!("length {len} is not a multiple of {width}"),
            );
        }
        if op > cmp::CSX_CMP_LAST {
            return self.fail(name, CSX_EINVAL, format!("unknown operator {op}"));
        }
        let count = (len / width as u64) as usize;
        let bitmap_len = count.div_ceil(8) as u64;
        // Both ranges are checked before anything is written, so a failed call leaves
        // memory as it was. The VM checked `src` already (argument kind PtrIn); the
        // bitmap is a plain scalar to it.
        let src_ptr = match mem.translate(src, len, false) {
            Ok(p) => p as usize,
            Err(t) => return self.fail(name, CSX_EFAULT, t.to_string()),
        };
        let bitmap_ptr = match mem.translate(bitmap, bitmap_len, true) {
            Ok(p) => p as usize,
            Err(t) => {
                return self.fail(
                    name,
                    CSX_EFAULT,
                    format!("bitmap of {bitmap_len} bytes: {t}"),
                )
            }
        };
        let overlap =
            src_ptr < bitmap_ptr + bitmap_len as usize && bitmap_ptr < src_ptr + len as usize;
        let kernel = if width == 4 {
            filter::bits_u32
        } else {
            filter::bits_u64
        };
        let call = FilterCall {
            name,
            width,
            src,
            len,
            bitmap,
            op,
            operand,
            kernel,
        };
        if overlap {
            self.filter_staged(&call, mem)
        } else {
            self.filter_blocks(&call, mem)
        }
    }

    /// A filter whose bitmap overlaps its input: the contract reads every value before
    /// the bitmap is written, and only a full staging copy keeps that order.
    fn filter_staged(&mut self, f: &FilterCall, mem: &mut MemoryMap<'_>) -> CallResult {
        let bitmap_len = f.bitmap_len();
        let mut bits = vec![0u8; bitmap_len as usize];
        let data = match mem.slice(f.src, f.len) {
            Ok(d) => d,
            Err(t) => return self.fail(f.name, CSX_EFAULT, t.to_string()),
        };
        let matches = (f.kernel)(data, &mut bits, f.op, f.operand);
        match mem.slice_mut(f.bitmap, bitmap_len) {
            Ok(out) => {
                out.copy_from_slice(&bits);
                Ok(matches)
            }
            Err(t) => self.fail(f.name, CSX_EFAULT, t.to_string()),
        }
    }

    /// A filter over disjoint ranges: one bounded stack block at a time, the bitmap bytes
    /// copied out as each block is done (a borrow of the input and one of the output
    /// cannot live together on one `MemoryMap`).
    fn filter_blocks(&mut self, f: &FilterCall, mem: &mut MemoryMap<'_>) -> CallResult {
        let width = f.width;
        let count = (f.len / width as u64) as usize;
        let mut staging = [0u8; filter::BLOCK_BITMAP_BYTES];
        let mut matches = 0u64;
        let mut done = 0usize;
        let mut since_check = 0usize;
        while done < count {
            if since_check >= STOP_CHECK_BYTES {
                self.check_stop()?;
                since_check = 0;
            }
            let n = (count - done).min(filter::BLOCK_VALUES);
            since_check += n * width;
            let bytes = n.div_ceil(8);
            let data = match mem.slice(f.src + (done * width) as u64, (n * width) as u64) {
                Ok(d) => d,
                Err(t) => return self.fail(f.name, CSX_EFAULT, t.to_string()),
            };
            matches += (f.kernel)(data, &mut staging[..bytes], f.op, f.operand);
            match mem.slice_mut(f.bitmap + (done / 8) as u64, bytes as u64) {
                Ok(out) => out.copy_from_slice(&staging[..bytes]),
                Err(t) => return self.fail(f.name, CSX_EFAULT, t.to_string()),
            }
            done += n;
        }
        Ok(matches)
    }

    fn sort(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_sort_u64";
        let (ptr, len) = (a[0], a[1]);
        if len % 8 != 0 {
            return self.fail(
                F,
                CSX_EINVAL,
                format!("length {len} is not a multiple of 8"),
            );
        }
        let stop = self.stop;
        let data = match mem.slice_mut(ptr, len) {
            Ok(d) => d,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        sort_le_u64_stoppable(data, stop, SORT_PIECE_KEYS)
    }
}

/// [`sort_le_u64`], split into pieces of at most `piece` keys by selecting medians (so
/// each piece's keys are at most the next piece's), with a look at `stop` between
/// pieces: `Err` (the stop abort) when it was set, the window then partly sorted.
fn sort_le_u64_stoppable(
    data: &mut [u8],
    stop: Option<&StopFlag>,
    piece: usize,
) -> Result<u64, HelperAbort> {
    let Some(stop) = stop else {
        return Ok(sort_le_u64(data));
    };
    with_keys(data, |keys| {
        let mut todo: Vec<(usize, usize)> = vec![(0, keys.len())];
        while let Some((lo, hi)) = todo.pop() {
            if stop.is_set() {
                return Err(stopped_abort());
            }
            let part = &mut keys[lo..hi];
            if part.len() <= piece.max(2) {
                part.sort_unstable();
                continue;
            }
            let mid = part.len() / 2;
            part.select_nth_unstable(mid);
            todo.push((lo + mid + 1, hi));
            todo.push((lo, lo + mid + 1));
        }
        Ok(keys.len() as u64)
    })
}

/// The window's bytes as little-endian u64 keys, in place: when they are 8-byte aligned
/// (device memory allocations are) on a little-endian machine; `None` otherwise.
fn as_keys_mut(data: &mut [u8]) -> Option<&mut [u64]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern of 8 bytes is a valid u64, so viewing initialised bytes
    // as u64s is sound; `align_to_mut` returns as the middle part only a slice that is
    // aligned for u64 and lies within `data`, and the result keeps `data` mutably
    // borrowed for as long as it lives, so nothing else can alias it.
    let (pre, keys, post) = unsafe { data.align_to_mut::<u64>() };
    (pre.is_empty() && post.is_empty()).then_some(keys)
}

/// Runs `f` on the window's keys: in place when aligned, else on a decoded copy that is
/// encoded back afterwards.
fn with_keys<R>(data: &mut [u8], f: impl FnOnce(&mut [u64]) -> R) -> R {
    if let Some(keys) = as_keys_mut(data) {
        return f(keys);
    }
    let mut keys: Vec<u64> = data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
        .collect();
    let r = f(&mut keys);
    for (c, v) in data.chunks_exact_mut(8).zip(&keys) {
        c.copy_from_slice(&v.to_le_bytes());
    }
    r
}

/// Sorts the little-endian u64 keys of `data` ascending (pattern-defeating quicksort,
/// in place when the window is aligned); returns their count.
fn sort_le_u64(data: &mut [u8]) -> u64 {
    with_keys(data, |keys| {
        keys.sort_unstable();
        keys.len() as u64
    })
}

/// Merges the sorted runs `keys[..split]` and `keys[split..]` in place. A copy of the
/// left run only, then one pass from the front: output key k = i + j lands at or before
/// the right run's next unread key split + j, so the right run is read where it is, and
/// once the left run is used up the rest of the right run is already in place.
/// Looks at `stop` every [`STOP_CHECK_BYTES`] of output; `Err` (the stop abort) when it
/// was set, the keys then partly merged.
fn merge_keys(keys: &mut [u64], split: usize, stop: Option<&StopFlag>) -> Result<(), HelperAbort> {
    let left = keys[..split].to_vec();
    let n = keys.len();
    let (mut i, mut j, mut k) = (0usize, split, 0usize);
    while i < left.len() && j < n {
        if stop.is_some_and(StopFlag::is_set) {
            return Err(stopped_abort());
        }
        let piece_end = k + STOP_CHECK_BYTES / 8;
        // No branch on the comparison (random keys mispredict half of them).
        while i < left.len() && j < n && k < piece_end {
            let (x, y) = (left[i], keys[j]);
            let take_right = y < x;
            keys[k] = if take_right { y } else { x };
            i += usize::from(!take_right);
            j += usize::from(take_right);
            k += 1;
        }
    }
    // The right run used up: the rest of the left run goes last.
    keys[k..k + left.len() - i].copy_from_slice(&left[i..]);
    Ok(())
}

impl CallContext<'_> {
    fn merge(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_merge_u64";
        let (ptr, len, split) = (a[0], a[1], a[2]);
        if len % 8 != 0 || split % 8 != 0 || split > len {
            return self.fail(
                F,
                CSX_EINVAL,
                format!(
                    "length {len} and split {split} must be multiples of 8 with split <= length"
                ),
            );
        }
        let stop = self.stop;
        let data = match mem.slice_mut(ptr, len) {
            Ok(d) => d,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        with_keys(data, |keys| merge_keys(keys, (split / 8) as usize, stop))?;
        Ok(len / 8)
    }
}

/// Merges the sorted runs `a` and `b` into `out` (`a.len() + b.len()` keys), without a
/// branch on the comparison in the loop (random keys mispredict half of them).
fn merge_two(a: &[u64], b: &[u64], out: &mut [u64]) {
    debug_assert_eq!(out.len(), a.len() + b.len());
    let (mut i, mut j, mut k) = (0usize, 0usize, 0usize);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let take_b = y < x;
        out[k] = if take_b { y } else { x };
        i += usize::from(!take_b);
        j += usize::from(take_b);
        k += 1;
    }
    out[k..k + a.len() - i].copy_from_slice(&a[i..]);
    let k = k + a.len() - i;
    out[k..].copy_from_slice(&b[j..]);
}

/// Decodes little-endian keys.
fn decode_keys(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
        .collect()
}

/// The window's bytes as little-endian u64 keys, when aligned on a little-endian
/// machine (see [`as_keys_mut`]).
fn as_keys(data: &[u8]) -> Option<&[u64]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern of 8 bytes is a valid u64; `align_to` returns as the
    // middle part only an aligned slice within `data`, borrowed as long as `data`.
    let (pre, keys, post) = unsafe { data.align_to::<u64>() };
    (pre.is_empty() && post.is_empty()).then_some(keys)
}

impl CallContext<'_> {
    fn merge_into(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_merge_into_u64";
        let (pa, alen, pb, blen, po) = (a[0], a[1], a[2], a[3], a[4]);
        if alen % 8 != 0 || blen % 8 != 0 {
            return self.fail(
                F,
                CSX_EINVAL,
                format!("run lengths {alen} and {blen} must be multiples of 8"),
            );
        }
        let Some(olen) = alen.checked_add(blen) else {
            return self.fail(
                F,
                CSX_EINVAL,
                format!("runs of {alen} + {blen} bytes overflow"),
            );
        };
        let ptrs = mem.translate(pa, alen, false).and_then(|x| {
            let y = mem.translate(pb, blen, false)?;
            let o = mem.translate(po, olen, true)?;
            Ok((x, y, o))
        });
        let (xa, xb, xo) = match ptrs {
            Ok(p) => p,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        if olen == 0 {
            return Ok(0);
        }
        // Host addresses: the output must share no byte with either run.
        let overlaps = |p: *mut u8, len: u64| {
            len > 0
                && (p as usize) < xo as usize + olen as usize
                && (xo as usize) < p as usize + len as usize
        };
        if overlaps(xa, alen) || overlaps(xb, blen) {
            return self.fail(
                F,
                CSX_EINVAL,
                format!("the output ({olen} bytes at {po:#x}) overlaps a run"),
            );
        }
        let slice = |p: *mut u8, len: u64| -> &[u8] {
            if len == 0 {
                return &[];
            }
            // SAFETY: `translate` checked that `len` bytes from `p` lie inside a region
            // of `mem` mapped readable for the run, and `mem` stays mutably borrowed by
            // this call, so no other slice of it is created meanwhile; the output below
            // shares no byte with this range (checked above).
            unsafe { std::slice::from_raw_parts(p, len as usize) }
        };
        let (ra, rb) = (slice(xa, alen), slice(xb, blen));
        // SAFETY: `translate` checked that `olen` bytes from `xo` lie inside a region
        // mapped writable; they overlap neither run (checked above), and no other slice
        // of `mem` exists while this one lives (see above).
        let out = unsafe { std::slice::from_raw_parts_mut(xo, olen as usize) };
        match (as_keys(ra), as_keys(rb), as_keys_mut(out)) {
            (Some(ka), Some(kb), Some(ko)) => merge_two(ka, kb, ko),
            (_, _, _) => {
                let (ka, kb) = (decode_keys(ra), decode_keys(rb));
                let mut ko = vec![0u64; ka.len() + kb.len()];
                merge_two(&ka, &kb, &mut ko);
                for (c, v) in out.chunks_exact_mut(8).zip(&ko) {
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(olen / 8)
    }
}

/// Most runs one `csx_merge_runs_u64` merges (an execution's windows, at most).
pub const MERGE_RUNS_MAX: u64 = csx_proto::limits::WINDOWS_MAX as u64;

/// Scratch a [`merge_tree`] of `parts` needs: every level above the pairs keeps its two
/// halves' results.
fn merge_tree_scratch(parts: &[&[u64]]) -> usize {
    if parts.len() <= 2 {
        return 0;
    }
    let h = parts.len() / 2;
    parts.iter().map(|p| p.len()).sum::<usize>()
        + merge_tree_scratch(&parts[..h]).max(merge_tree_scratch(&parts[h..]))
}

/// Merges `parts` into `out` by a tree of branchless two-way merges (halves into
/// `scratch`, then the two halves into `out`); lower parts win ties.
fn merge_tree(parts: &[&[u64]], out: &mut [u64], scratch: &mut [u64]) {
    match parts.len() {
        0 => {}
        1 => out.copy_from_slice(parts[0]),
        2 => merge_two(parts[0], parts[1], out),
        k => {
            let h = k / 2;
            let lt: usize = parts[..h].iter().map(|p| p.len()).sum();
            let rt: usize = parts[h..].iter().map(|p| p.len()).sum();
            let (left, rest) = scratch.split_at_mut(lt);
            let (right, rest) = rest.split_at_mut(rt);
            merge_tree(&parts[..h], left, rest);
            merge_tree(&parts[h..], right, rest);
            merge_two(left, right, out);
        }
    }
}

/// The co-ranks of output rank `n` over sorted `runs`: how many keys of each the first
/// `n` keys of their merge take, ties from the lower run first. A binary search over
/// key values, each run's count bracketed by its counts at the search's bounds.
fn co_ranks(runs: &[&[u64]], n: usize) -> Vec<usize> {
    let (mut lo, mut hi) = (0u64, u64::MAX);
    let mut below = vec![0usize; runs.len()];
    let mut upto: Vec<usize> = runs.iter().map(|r| r.len()).collect();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let at: Vec<usize> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| below[i] + r[below[i]..upto[i]].partition_point(|&x| x <= mid))
            .collect();
        if at.iter().sum::<usize>() >= n {
            hi = mid;
            upto = at;
        } else {
            lo = mid + 1;
            below = at;
        }
    }
    let mut need = n - below.iter().sum::<usize>();
    below
        .iter()
        .zip(&upto)
        .map(|(&less, &le)| {
            let take = (le - less).min(need);
            need -= take;
            less + take
        })
        .collect()
}

/// Keys a block of the multiway merge takes from its largest run: the block's parts and
/// scratch stay in the caches.
const MERGE_BLOCK_KEYS: usize = 8 << 10;

/// Why a merge's output or `taken` (host address, length) may not be written: a run or
/// the other shares a byte with it.
fn merge_overlap(
    runs: &[(*mut u8, u64)],
    out: (*mut u8, u64),
    taken: (*mut u8, u64),
) -> Option<String> {
    let overlap = host_ranges_overlap;
    for (i, &run) in runs.iter().enumerate() {
        if overlap(run, out) || overlap(run, taken) {
            return Some(format!("the output or taken overlaps run {i}"));
        }
    }
    overlap(out, taken).then(|| "taken overlaps the output".to_string())
}

/// Merges the sorted runs of little-endian keys `runs` into `out` (`taken[i]`: keys
/// taken from run `i`); returns the keys written. Aligned bytes are merged in place,
/// others through decoded copies.
fn merge_run_bytes(runs: &[&[u8]], out: &mut [u8], taken: &mut [u64]) -> usize {
    let aligned: Option<Vec<&[u64]>> = runs.iter().map(|r| as_keys(r)).collect();
    match (aligned, as_keys_mut(out)) {
        (Some(keys), Some(ko)) => merge_runs_keys(&keys, ko, taken),
        (_, _) => {
            let owned: Vec<Vec<u64>> = runs.iter().map(|r| decode_keys(r)).collect();
            let refs: Vec<&[u64]> = owned.iter().map(Vec::as_slice).collect();
            let mut ko = vec![0u64; out.len() / 8];
            let w = merge_runs_keys(&refs, &mut ko, taken);
            for (c, v) in out.chunks_exact_mut(8).zip(&ko[..w]) {
                c.copy_from_slice(&v.to_le_bytes());
            }
            w
        }
    }
}

/// The multiway merge: the first `out.len()` keys of the union of the sorted `runs`
/// (fewer when they run out), ties from the lower run first; `taken[i]` gets the keys
/// used from run i. Returns the keys written.
///
/// The run prefixes to take are found first (exact co-ranks); then block by block,
/// each block cut by a key value (the run with most left, `MERGE_BLOCK_KEYS` on), the
/// runs' parts below it merge by a tree of branchless two-way merges whose
/// intermediate results stay in cache.
fn merge_runs_keys(runs: &[&[u64]], out: &mut [u64], taken: &mut [u64]) -> usize {
    let k = runs.len();
    let n = out.len().min(runs.iter().map(|r| r.len()).sum());
    let cut = co_ranks(runs, n);
    let mut from = vec![0usize; k];
    let mut scratch: Vec<u64> = Vec::new();
    let mut written = 0;
    while written < n {
        let r = (0..k).max_by_key(|&i| cut[i] - from[i]).unwrap_or(0);
        let to: Vec<usize> = if cut[r] - from[r] <= MERGE_BLOCK_KEYS {
            cut.clone()
        } else {
            let v = runs[r][from[r] + MERGE_BLOCK_KEYS];
            let below = |strict: bool| -> Vec<usize> {
                (0..k)
                    .map(|i| {
                        from[i]
                            + runs[i][from[i]..cut[i]].partition_point(|&x| {
                                if strict {
                                    x < v
                                } else {
                                    x <= v
                                }
                            })
                    })
                    .collect()
            };
            // Keys below v; when there are none, keys up to v (at least v itself).
            let t = below(true);
            if t == from {
                below(false)
            } else {
                t
            }
        };
        let parts: Vec<&[u64]> = (0..k).map(|i| &runs[i][from[i]..to[i]]).collect();
        let m: usize = parts.iter().map(|p| p.len()).sum();
        let need = merge_tree_scratch(&parts);
        if scratch.len() < need {
            scratch.resize(need, 0);
        }
        merge_tree(&parts, &mut out[written..written + m], &mut scratch[..need]);
        written += m;
        from = to;
    }
    for (t, c) in taken.iter_mut().zip(&cut) {
        *t = *c as u64;
    }
    n
}

impl CallContext<'_> {
    fn merge_runs(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        const F: &str = "csx_merge_runs_u64";
        let (po, olen, pruns, n, ptaken) = (a[0], a[1], a[2], a[3], a[4]);
        if olen % 8 != 0 {
            return self.fail(
                F,
                CSX_EINVAL,
                format!("output length {olen} is not a multiple of 8"),
            );
        }
        if n == 0 || n > MERGE_RUNS_MAX {
            return self.fail(
                F,
                CSX_EINVAL,
                format!("{n} runs: between 1 and {MERGE_RUNS_MAX}"),
            );
        }
        let runs = match self.translate_runs(mem, pruns, n) {
            Ok(runs) => runs,
            Err(failed) => return failed,
        };
        let (xo, xt) = match mem
            .translate(po, olen, true)
            .and_then(|o| Ok((o, mem.translate(ptaken, n * 8, true)?)))
        {
            Ok(p) => p,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        // Host addresses: the output and `taken` share no byte with a run or each other.
        if let Some(problem) = merge_overlap(&runs, (xo, olen), (xt, n * 8)) {
            return self.fail(F, CSX_EINVAL, problem);
        }
        let slices: Vec<&[u8]> = runs
            .iter()
            .map(|&(p, len)| {
                if len == 0 {
                    return &[][..];
                }
                // SAFETY: `translate` checked that `len` bytes from `p` lie inside a
                // region mapped readable; `mem` stays mutably borrowed by this call, so
                // no other slice of it is made meanwhile except the output and `taken`
                // below, which share no byte with any run (checked above).
                unsafe { std::slice::from_raw_parts(p, len as usize) }
            })
            .collect();
        let out: &mut [u8] = if olen == 0 {
            &mut []
        } else {
            // SAFETY: `olen` bytes from `xo` lie in a region mapped writable; they
            // overlap no run and not `taken` (checked above).
            unsafe { std::slice::from_raw_parts_mut(xo, olen as usize) }
        };
        let mut taken = vec![0u64; n as usize];
        let written = merge_run_bytes(&slices, out, &mut taken);
        // SAFETY: `n * 8` bytes from `xt` lie in a region mapped writable and overlap
        // no run and not the output (checked above); the slices above are no longer used.
        let t = unsafe { std::slice::from_raw_parts_mut(xt, (n * 8) as usize) };
        for (c, v) in t.chunks_exact_mut(8).zip(&taken) {
            c.copy_from_slice(&v.to_le_bytes());
        }
        Ok(written as u64)
    }

    /// The host address and length of each of the `n` runs the table at `pruns` names
    /// (`{addr, len}` pairs of u64), each a readable whole number of keys; a bad run is
    /// the call's failure, made.
    fn translate_runs(
        &mut self,
        mem: &mut MemoryMap<'_>,
        pruns: u64,
        n: u64,
    ) -> Result<Vec<(*mut u8, u64)>, CallResult> {
        const F: &str = "csx_merge_runs_u64";
        // The run table, read once.
        let table = match mem.translate(pruns, n * 16, false) {
            // SAFETY: `translate` checked that `n * 16` bytes from `p` lie in a region
            // mapped readable; they are copied out at once, before any other slice of
            // `mem` is made.
            Ok(p) => decode_keys(unsafe { std::slice::from_raw_parts(p, (n * 16) as usize) }),
            Err(t) => return Err(self.fail(F, CSX_EFAULT, t.to_string())),
        };
        let mut runs = Vec::with_capacity(n as usize);
        for (i, d) in table.chunks_exact(2).enumerate() {
            let (addr, len) = (d[0], d[1]);
            if len % 8 != 0 {
                return Err(self.fail(
                    F,
                    CSX_EINVAL,
                    format!("run {i} length {len} is not a multiple of 8"),
                ));
            }
            match mem.translate(addr, len, false) {
                Ok(p) => runs.push((p, len)),
                Err(t) => return Err(self.fail(F, CSX_EFAULT, format!("run {i}: {t}"))),
            }
        }
        Ok(runs)
    }
}

/// The codec and cipher functions (Metal FS's compression and encryption operators call
/// them): each copies its input out of the VM's memory first, so input and output may be
/// anywhere, even overlapping.
impl CallContext<'_> {
    fn lz4(&mut self, compress: bool, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        let name = if compress {
            "csx_lz4_compress"
        } else {
            "csx_lz4_decompress"
        };
        let (src, src_len, dst, dst_len) = (a[0], a[1], a[2], a[3]);
        let input = match mem.slice(src, src_len) {
            Ok(d) => d.to_vec(),
            Err(t) => return self.fail(name, CSX_EFAULT, t.to_string()),
        };
        let out = match mem.slice_mut(dst, dst_len) {
            Ok(o) => o,
            Err(t) => return self.fail(name, CSX_EFAULT, t.to_string()),
        };
        if compress {
            let need = abi::op::lz4_bound(input.len());
            if out.len() < need {
                return self.fail(
                    name,
                    CSX_ENOSPC,
                    format!("output of {dst_len} bytes, {src_len} input bytes need {need}"),
                );
            }
            match lz4_flex::block::compress_into(&input, out) {
                Ok(n) => Ok(n as u64),
                Err(e) => self.fail(name, CSX_ENOSPC, e.to_string()),
            }
        } else {
            match lz4_flex::block::decompress_into(&input, out) {
                Ok(n) => Ok(n as u64),
                Err(lz4_flex::block::DecompressError::OutputTooSmall { expected, actual }) => self
                    .fail(
                        name,
                        CSX_ENOSPC,
                        format!("output of {actual} bytes, the block needs {expected}"),
                    ),
                Err(e) => self.fail(name, CSX_EBADMSG, format!("corrupt LZ4 block: {e}")),
            }
        }
    }

    fn chacha20(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
        const F: &str = "csx_chacha20";
        let (key, key_len, offset, data, len) = (a[0], a[1], a[2], a[3], a[4]);
        let want = abi::op::CHACHA20_KEY_NONCE as u64;
        if key_len != want {
            return self.fail(
                F,
                CSX_EINVAL,
                format!(
                    "key_nonce of {key_len} bytes, must be {want} (32-byte key, 12-byte nonce)"
                ),
            );
        }
        // RFC 8439's 32-bit block counter: a stream ends at 256 GiB.
        const STREAM_MAX: u64 = 64 << 32;
        if offset.checked_add(len).is_none_or(|end| end > STREAM_MAX) {
            return self.fail(
                F,
                CSX_ERANGE,
                format!("bytes {offset}+{len} pass the stream's end at {STREAM_MAX}"),
            );
        }
        let key_nonce = match mem.slice(key, key_len) {
            Ok(k) => k.to_vec(),
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        let buf = match mem.slice_mut(data, len) {
            Ok(b) => b,
            Err(t) => return self.fail(F, CSX_EFAULT, t.to_string()),
        };
        let mut cipher =
            match chacha20::ChaCha20::new_from_slices(&key_nonce[..32], &key_nonce[32..]) {
                Ok(c) => c,
                Err(e) => return self.fail(F, CSX_EINVAL, e.to_string()),
            };
        cipher.seek(offset);
        cipher.apply_keystream(buf);
        Ok(len)
    }
}

/// The columnar format's decoder: encoded column blocks into plain values.
impl CallContext<'_> {
    fn unpack(&mut self, a: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        let (src, src_len, dst, dst_len) = (a[0], a[1], a[3], a[4]);
        let shift = abi::functions::CSX_UNPACK_AS_SHIFT;
        let (first, width) = (a[2] & ((1 << shift) - 1), (a[2] >> shift) as u8);
        let (xs, xd) = match mem
            .translate(src, src_len, false)
            .and_then(|s| Ok((s, mem.translate(dst, dst_len, true)?)))
        {
            Ok(p) => p,
            Err(t) => return self.fail(UNPACK, CSX_EFAULT, t.to_string()),
        };
        if src_len == 0 || dst_len == 0 || host_ranges_overlap((xs, src_len), (xd, dst_len)) {
            // The input is copied out first (it is smaller than the output), so the
            // output may be written over it.
            let input = match mem.slice(src, src_len) {
                Ok(d) => d.to_vec(),
                Err(t) => return self.fail(UNPACK, CSX_EFAULT, t.to_string()),
            };
            let out = match mem.slice_mut(dst, dst_len) {
                Ok(o) => o,
                Err(t) => return self.fail(UNPACK, CSX_EFAULT, t.to_string()),
            };
            return self.unpack_into(&input, (first, width), out);
        }
        // SAFETY: `translate` checked that `src_len` (non-zero) bytes from `xs` lie in a
        // region mapped readable and `dst_len` bytes from `xd` in one mapped writable;
        // the two host ranges share no byte (checked above), and `mem` stays mutably
        // borrowed by this call, so no other slice of it is made while these live.
        let (input, out) = unsafe {
            (
                std::slice::from_raw_parts(xs, src_len as usize),
                std::slice::from_raw_parts_mut(xd, dst_len as usize),
            )
        };
        self.unpack_into(input, (first, width), out)
    }

    /// Decodes the blocks of `input` from row `first` into `out` as values of `width`
    /// bytes (0: the blocks' own), block by block (at most `BLOCK_ROWS_MAX` rows each),
    /// looking at the stop flag between blocks.
    fn unpack_into(
        &mut self,
        input: &[u8],
        (first, width): (u64, u8),
        out: &mut [u8],
    ) -> CallResult {
        let stop = self.stop;
        let mut stopped = || stop.is_some_and(StopFlag::is_set);
        match abi::colblock::decode_blocks_as(input, first, out, width, &mut stopped) {
            Ok(Some(rows)) => Ok(rows),
            Ok(None) => Err(stopped_abort()),
            Err(e) => self.fail(UNPACK, CSX_EBADMSG, e.to_string()),
        }
    }
}

/// The name csx_unpack's errors carry.
const UNPACK: &str = "csx_unpack";

/// Whether host ranges `a` and `b` (start, length) share a byte (an empty one shares
/// none).
fn host_ranges_overlap(a: (*mut u8, u64), b: (*mut u8, u64)) -> bool {
    let (a0, b0) = (a.0 as usize as u64, b.0 as usize as u64);
    a.1 > 0 && b.1 > 0 && a0 < b0.saturating_add(b.1) && b0 < a0.saturating_add(a.1)
}

impl HelperHost for CallContext<'_> {
    fn call(&mut self, id: u32, args: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        let r0 = self.dispatch(id, args, mem)?;
        // A run whose flag was set during the call stops here, on every engine, before
        // the program sees what the call returned.
        self.check_stop()?;
        Ok(r0)
    }
}

impl CallContext<'_> {
    fn dispatch(&mut self, id: u32, args: [u64; 5], mem: &mut MemoryMap<'_>) -> CallResult {
        match id {
            ids::CSX_FILE_SIZE => self.file_size(args, mem),
            ids::CSX_FILE_READ => self.file_read(args, mem),
            ids::CSX_FILE_WRITE => self.file_write(args, mem),
            ids::CSX_MEMCPY => self.memcpy(args, mem),
            ids::CSX_MEMSET => self.memset(args, mem),
            ids::CSX_NOW_NS => Ok(self.epoch.elapsed().as_nanos() as u64),
            ids::CSX_TRACE => self.trace_message(args, mem),
            ids::CSX_FILTER_U32 => self.filter(4, args, mem),
            ids::CSX_FILTER_U64 => self.filter(8, args, mem),
            ids::CSX_SORT_U64 => self.sort(args, mem),
            ids::CSX_MERGE_U64 => self.merge(args, mem),
            ids::CSX_LZ4_DECOMPRESS => self.lz4(false, args, mem),
            ids::CSX_LZ4_COMPRESS => self.lz4(true, args, mem),
            ids::CSX_CHACHA20 => self.chacha20(args, mem),
            ids::CSX_MERGE_INTO_U64 => self.merge_into(args, mem),
            ids::CSX_MERGE_RUNS_U64 => self.merge_runs(args, mem),
            ids::CSX_UNPACK => self.unpack(args, mem),
            // The VM only calls ids in the table, so this is a table/host mismatch.
            _ => self.fail(
                "device",
                CSX_ENOSYS,
                format!("function {id} is not implemented"),
            ),
        }
    }
}

/// The kernels of the accelerated filters: one monomorphic loop per width and operator,
/// 32 values to one little-endian u32 of the bitmap, no allocation.
mod filter {
    use super::cmp;

    /// Bitmap bytes of one staging block (on the stack): 4 KiB, 32768 values.
    pub const BLOCK_BITMAP_BYTES: usize = 4096;
    /// Values of one staging block.
    pub const BLOCK_VALUES: usize = 8 * BLOCK_BITMAP_BYTES;
    /// Values decoded and compared together: one u32 of the bitmap.
    const LANES: usize = 32;
    // Blocks start on a whole bitmap word, so a block's bytes never share one.
    const _: () = assert!(BLOCK_VALUES.is_multiple_of(LANES));

    /// The bitmap word of up to [`LANES`] values (bit t for value t). The values are
    /// decoded into an array first and compared in a second loop: two simple loops
    /// the compiler vectorizes, where one loop of decode, compare and shift does not
    /// (about 2x on x86-64).
    #[inline(always)]
    fn word<T: Copy + Default, const W: usize>(
        values: &[u8],
        decode: impl Fn([u8; W]) -> T,
        hit: impl Fn(T) -> bool,
    ) -> u32 {
        debug_assert!(values.len() <= LANES * W);
        let mut v = [T::default(); LANES];
        for (d, x) in v.iter_mut().zip(values.chunks_exact(W)) {
            *d = decode(x.try_into().expect("chunks of W bytes"));
        }
        let n = values.len() / W;
        let mut m = 0u32;
        for (t, x) in v.iter().enumerate() {
            m |= u32::from(hit(*x)) << t;
        }
        // Lanes past the values are padding: their bits stay clear.
        if n < LANES {
            m &= (1u32 << n) - 1;
        }
        m
    }

    /// Sets bit i of `bits` (bit i % 8 of byte i / 8) when value i of `data` is a hit,
    /// clears it otherwise and clears the unused high bits of the last byte. Returns
    /// the hits. `bits` holds exactly one bit per value, rounded up to bytes.
    #[inline(always)]
    fn mask<T: Copy + Default, const W: usize>(
        data: &[u8],
        bits: &mut [u8],
        decode: impl Fn([u8; W]) -> T + Copy,
        hit: impl Fn(T) -> bool + Copy,
    ) -> u64 {
        debug_assert_eq!(data.len() % W, 0);
        debug_assert_eq!(bits.len(), (data.len() / W).div_ceil(8));
        let groups = data.chunks_exact(LANES * W);
        let tail = groups.remainder();
        let full = data.len() / (LANES * W);
        let mut hits = 0u64;
        for (group, out) in groups.zip(bits.chunks_exact_mut(LANES / 8)) {
            let m = word(group, decode, hit);
            out.copy_from_slice(&m.to_le_bytes());
            hits += u64::from(m.count_ones());
        }
        if !tail.is_empty() {
            let m = word(tail, decode, hit);
            let out = &mut bits[full * LANES / 8..];
            let n = out.len();
            out.copy_from_slice(&m.to_le_bytes()[..n]);
            hits += u64::from(m.count_ones());
        }
        hits
    }

    /// Whether an operator holds for every value below the operand (an operand beyond
    /// the values' range): NE, LT and LE do, EQ, GT and GE do not.
    fn holds_below(op: u64) -> bool {
        matches!(op, cmp::CSX_CMP_NE | cmp::CSX_CMP_LT | cmp::CSX_CMP_LE)
    }

    /// The bitmap of `data` as little-endian u32s against `x OP operand`, compared as
    /// u64. `op` is a valid operator.
    pub fn bits_u32(data: &[u8], bits: &mut [u8], op: u64, operand: u64) -> u64 {
        let le = u32::from_le_bytes;
        let Ok(a) = u32::try_from(operand) else {
            let all = holds_below(op);
            return mask(data, bits, le, |_| all);
        };
        match op {
            cmp::CSX_CMP_EQ => mask(data, bits, le, |x| x == a),
            cmp::CSX_CMP_NE => mask(data, bits, le, |x| x != a),
            cmp::CSX_CMP_LT => mask(data, bits, le, |x| x < a),
            cmp::CSX_CMP_LE => mask(data, bits, le, |x| x <= a),
            cmp::CSX_CMP_GT => mask(data, bits, le, |x| x > a),
            _ => mask(data, bits, le, |x| x >= a),
        }
    }

    /// As [`bits_u32`] over little-endian u64s.
    pub fn bits_u64(data: &[u8], bits: &mut [u8], op: u64, operand: u64) -> u64 {
        let le = u64::from_le_bytes;
        let a = operand;
        match op {
            cmp::CSX_CMP_EQ => mask(data, bits, le, |x| x == a),
            cmp::CSX_CMP_NE => mask(data, bits, le, |x| x != a),
            cmp::CSX_CMP_LT => mask(data, bits, le, |x| x < a),
            cmp::CSX_CMP_LE => mask(data, bits, le, |x| x <= a),
            cmp::CSX_CMP_GT => mask(data, bits, le, |x| x > a),
            _ => mask(data, bits, le, |x| x >= a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csx_ebpf::memory::RegionIdx;
    use std::sync::Arc;

    fn store(dir: &std::path::Path) -> FileStore {
        let nvm = Arc::new(crate::nvm::Nvm::create(dir.join("nvm.img"), 1 << 20).unwrap());
        FileStore::open_or_create(dir, nvm).unwrap()
    }

    #[test]
    fn table_matches_the_abi() {
        let t = function_table();
        assert_eq!(t.len(), abi::functions::FUNCTIONS.len());
        for f in abi::functions::FUNCTIONS {
            let sig = t.by_name(f.name).unwrap();
            assert_eq!(sig.id, f.id);
            assert_eq!(sig.args.len(), f.args.len());
        }
        assert_eq!(function_infos(), abi::functions::infos());
    }

    /// Every function of the ABI has an implementation: called with zero arguments, none
    /// falls through to the "not implemented" arm (whose failure names no function).
    #[test]
    fn every_abi_function_is_implemented() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        for f in abi::functions::FUNCTIONS {
            let mut ctx = CallContext::new(&files, Instant::now());
            let mut mem = MemoryMap::new();
            let _ = ctx.call(f.id, [0; 5], &mut mem);
            if let Some(d) = &ctx.detail {
                assert_eq!(d.function, f.name, "id {}: {}", f.id, d.message);
            }
        }
        let mut ctx = CallContext::new(&files, Instant::now());
        let unknown = ctx.call(999, [0; 5], &mut MemoryMap::new());
        assert_eq!(unknown, Ok(CSX_ENOSYS as u64));
        assert_eq!(ctx.detail.unwrap().function, "device");
    }

    #[test]
    fn file_functions_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        files.write_at("/a.txt", 0, b"hello world").unwrap();
        let mut ctx = CallContext::new(&files, Instant::now());
        let mut region = *b"/a.txt\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        let mut mem = MemoryMap::new();
        let base = mem.map_read_write(RegionIdx(4), &mut region).unwrap();
        assert_eq!(
            ctx.call(ids::CSX_FILE_SIZE, [base, 6, 0, 0, 0], &mut mem),
            Ok(11)
        );
        assert_eq!(
            ctx.call(ids::CSX_FILE_READ, [base, 6, 6, base + 8, 10], &mut mem),
            Ok(5)
        );
        assert_eq!(mem.slice(base + 8, 5).unwrap(), b"world");
        assert!(ctx.detail.is_none());
        assert_eq!(
            ctx.call(ids::CSX_FILE_SIZE, [base, 5, 0, 0, 0], &mut mem),
            Ok(CSX_ENOENT as u64)
        );
        let d = ctx.detail.clone().unwrap();
        assert_eq!((d.function.as_str(), d.code), ("csx_file_size", CSX_ENOENT));
        assert_eq!(
            ctx.call(ids::CSX_FILE_WRITE, [base, 6, 11, base + 8, 5], &mut mem),
            Ok(5)
        );
        assert_eq!(files.stat("/a.txt").unwrap().size, 16);
    }

    fn xorshift_keys(n: usize, seed: u64, mask: u64) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x & mask
            })
            .collect()
    }

    fn le_bytes(keys: &[u64]) -> Vec<u8> {
        keys.iter().flat_map(|k| k.to_le_bytes()).collect()
    }

    /// The sort equals a reference sort, in place (aligned) and through a copy (a window
    /// at an odd address): random keys, few distinct keys, no keys.
    #[test]
    fn sort_equals_a_reference_sort_aligned_or_not() {
        for (n, mask) in [
            (0usize, u64::MAX),
            (7, u64::MAX),
            (50_001, u64::MAX),
            (50_001, 0xff),
        ] {
            let keys = xorshift_keys(n, n as u64 ^ mask, mask);
            let mut expect = keys.clone();
            expect.sort();
            for skew in [0usize, 1] {
                // A u64 vector is 8-byte aligned: its bytes from `skew` are aligned or not.
                let mut store = vec![0u64; n + 1];
                let bytes = as_keys_bytes(&mut store);
                bytes[skew..skew + n * 8].copy_from_slice(&le_bytes(&keys));
                assert_eq!(sort_le_u64(&mut bytes[skew..skew + n * 8]), n as u64);
                assert_eq!(
                    bytes[skew..skew + n * 8],
                    le_bytes(&expect)[..],
                    "{n} keys, mask {mask:#x}, skew {skew}"
                );
            }
        }
    }

    /// The sort split into pieces equals a plain sort at piece sizes from 1 key up,
    /// aligned or not, with duplicates; a set stop flag ends it with the stop abort.
    #[test]
    fn a_sort_in_pieces_equals_a_sort_and_stops() {
        let flag = StopFlag::new();
        for (n, mask) in [(0usize, u64::MAX), (1, 7), (1000, 0xf), (5000, u64::MAX)] {
            let keys = xorshift_keys(n, 9, mask);
            let mut expect = keys.clone();
            expect.sort_unstable();
            for piece in [1usize, 3, 64, 10_000] {
                for skew in [0usize, 1] {
                    let mut bytes = vec![0u8; n * 8 + skew];
                    bytes[skew..].copy_from_slice(&le_bytes(&keys));
                    let r = sort_le_u64_stoppable(&mut bytes[skew..], Some(&flag), piece);
                    assert_eq!(r.unwrap(), n as u64);
                    assert_eq!(bytes[skew..], le_bytes(&expect)[..], "{n} {piece} {skew}");
                }
            }
        }
        flag.stop(2);
        let mut bytes = le_bytes(&xorshift_keys(100, 3, u64::MAX));
        let e = sort_le_u64_stoppable(&mut bytes, Some(&flag), 8).unwrap_err();
        assert_eq!(e.code, STOPPED_IN_FUNCTION);
    }

    /// memcpy in pieces is a memmove for overlaps in both directions; with the stop
    /// flag set, memcpy, memset and sort stop their run (and a call that completed
    /// stops it too, as it returns).
    #[test]
    fn long_functions_copy_in_pieces_and_stop() {
        let len = 3 * STOP_CHECK_BYTES + 123;
        let total = len + 2 * STOP_CHECK_BYTES;
        let pattern: Vec<u8> = (0..total).map(|i| (i * 7 + i / 251) as u8).collect();
        for (dst, src) in [
            (0usize, STOP_CHECK_BYTES + 5),
            (STOP_CHECK_BYTES + 5, 0),
            (9, 9),
        ] {
            let mut mem_bytes = pattern.clone();
            let mut expect = pattern.clone();
            expect.copy_within(src..src + len, dst);
            let mut map = MemoryMap::new();
            let base = map
                .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut mem_bytes)
                .unwrap();
            let flag = StopFlag::new();
            let mut ctx = CallContext::without_files(Instant::now()).with_stop(&flag);
            let args = [base + dst as u64, base + src as u64, len as u64, 0, 0];
            assert_eq!(
                ctx.call(ids::CSX_MEMCPY, args, &mut map).unwrap(),
                len as u64
            );
            assert!(mem_bytes == expect, "dst {dst} src {src}");
        }
        let mut mem_bytes = vec![0u8; len];
        let mut map = MemoryMap::new();
        let base = map
            .map_read_write(RegionIdx::EMBEDDER_FIRST, &mut mem_bytes)
            .unwrap();
        let flag = StopFlag::new();
        flag.stop(1);
        let mut ctx = CallContext::without_files(Instant::now()).with_stop(&flag);
        let l = (len / 8 * 8) as u64;
        for (id, args) in [
            (ids::CSX_MEMSET, [base, 1, len as u64, 0, 0]),
            (ids::CSX_MEMCPY, [base, base + 8, (len - 8) as u64, 0, 0]),
            (ids::CSX_SORT_U64, [base, l, 0, 0, 0]),
            (ids::CSX_NOW_NS, [0; 5]),
        ] {
            let e = ctx.call(id, args, &mut map).unwrap_err();
            assert_eq!(e.code, STOPPED_IN_FUNCTION, "function {id}");
        }
        // memset stopped before its first piece.
        assert!(mem_bytes.iter().all(|&b| b == 0));
    }

    /// A u64 vector's bytes (for aligned windows in tests), safely: through the
    /// little-endian encoding and back would copy, so the test owns a byte vector
    /// whose start is aligned by construction instead.
    fn as_keys_bytes(store: &mut Vec<u64>) -> &mut [u8] {
        let len = store.len() * 8;
        // SAFETY: u64 has no padding and u8 has alignment 1, so a u64 buffer's memory
        // is `len` initialised bytes; the returned slice borrows `store` mutably.
        unsafe { std::slice::from_raw_parts_mut(store.as_mut_ptr().cast::<u8>(), len) }
    }

    /// The merge equals a sort of both runs at every kind of split: empty left or right
    /// run, all left keys below or above the right ones, interleaved, duplicates.
    #[test]
    fn merge_equals_a_sort_of_both_runs() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let cases: Vec<(Vec<u64>, Vec<u64>)> = vec![
            (vec![], vec![1, 2]),
            (vec![1, 2], vec![]),
            (vec![1, 2, 3], vec![4, 5]),
            (vec![4, 5], vec![1, 2, 3]),
            (vec![1, 1, 5, 5], vec![1, 5, 5, 9]),
            (xorshift_keys(3000, 1, 0xfff), xorshift_keys(1777, 2, 0xfff)),
        ];
        for (mut l, mut r) in cases {
            l.sort_unstable();
            r.sort_unstable();
            let mut expect = [l.clone(), r.clone()].concat();
            expect.sort_unstable();
            for skew in [0u64, 1] {
                // In a u64 vector the window is aligned (merged in place) or, one byte
                // on, not (merged through a copy).
                let n = l.len() + r.len();
                let mut store = vec![0u64; n + 1];
                let region = as_keys_bytes(&mut store);
                let len = n as u64 * 8;
                region[skew as usize..(skew + len) as usize]
                    .copy_from_slice(&le_bytes(&[l.clone(), r.clone()].concat()));
                let mut mem = MemoryMap::new();
                let base = mem.map_read_write(RegionIdx(4), region).unwrap() + skew;
                let mut ctx = CallContext::new(&files, Instant::now());
                let split = l.len() as u64 * 8;
                assert_eq!(
                    ctx.call(ids::CSX_MERGE_U64, [base, len, split, 0, 0], &mut mem),
                    Ok(len / 8)
                );
                let got: Vec<u64> = (0..len / 8)
                    .map(|i| mem.load(base + i * 8, 8).unwrap())
                    .collect();
                assert_eq!(
                    got,
                    expect,
                    "left {}, right {}, skew {skew}",
                    l.len(),
                    r.len()
                );
            }
        }
    }

    /// The out-of-place merge equals a sort of both runs, aligned or not, with empty
    /// runs; an output overlapping a run, a run past its region and odd lengths are
    /// refused.
    #[test]
    fn merge_into_equals_a_sort_of_both_runs() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let cases: Vec<(Vec<u64>, Vec<u64>)> = vec![
            (vec![], vec![]),
            (vec![], vec![1, 2]),
            (vec![1, 2], vec![]),
            (vec![4, 5], vec![1, 2, 3]),
            (vec![1, 1, 5, 5], vec![1, 5, 5, 9]),
            (xorshift_keys(3000, 1, 0xfff), xorshift_keys(1777, 2, 0xfff)),
        ];
        for (mut l, mut r) in cases {
            l.sort_unstable();
            r.sort_unstable();
            let mut expect = [l.clone(), r.clone()].concat();
            expect.sort_unstable();
            for skew in [0u64, 3] {
                let (la, lb) = (l.len() as u64 * 8, r.len() as u64 * 8);
                let n = l.len() + r.len();
                // One region: a, then b, then out (skewed: not 8-byte aligned).
                let mut store = vec![0u64; 2 * n + 2];
                let region = as_keys_bytes(&mut store);
                let s = skew as usize;
                region[s..s + la as usize].copy_from_slice(&le_bytes(&l));
                region[s + la as usize..s + (la + lb) as usize].copy_from_slice(&le_bytes(&r));
                let mut mem = MemoryMap::new();
                let base = mem.map_read_write(RegionIdx(4), region).unwrap() + skew;
                let (pa, pb, po) = (base, base + la, base + la + lb);
                let mut ctx = CallContext::new(&files, Instant::now());
                assert_eq!(
                    ctx.call(ids::CSX_MERGE_INTO_U64, [pa, la, pb, lb, po], &mut mem),
                    Ok(n as u64)
                );
                let got: Vec<u64> = (0..n as u64)
                    .map(|i| mem.load(po + i * 8, 8).unwrap())
                    .collect();
                assert_eq!(
                    got,
                    expect,
                    "left {}, right {}, skew {skew}",
                    l.len(),
                    r.len()
                );
                if n > 0 {
                    // The output over a run is refused.
                    let e = ctx.call(ids::CSX_MERGE_INTO_U64, [pa, la, pb, lb, pa], &mut mem);
                    assert_eq!(e, Ok(CSX_EINVAL as u64));
                    assert!(ctx.detail.as_ref().unwrap().message.contains("overlaps"));
                }
            }
        }
        let mut ctx = CallContext::new(&files, Instant::now());
        let mut region = vec![0u8; 64];
        let mut mem = MemoryMap::new();
        let base = mem.map_read_write(RegionIdx(4), &mut region).unwrap();
        assert_eq!(
            ctx.call(
                ids::CSX_MERGE_INTO_U64,
                [base, 12, base + 16, 8, base + 32],
                &mut mem
            ),
            Ok(CSX_EINVAL as u64)
        );
        // An output running past the region.
        assert_eq!(
            ctx.call(
                ids::CSX_MERGE_INTO_U64,
                [base, 16, base + 16, 16, base + 40],
                &mut mem
            ),
            Ok(CSX_EFAULT as u64)
        );
    }

    /// The multiway merge: in pieces (an output shorter than the runs, resumed from
    /// `taken`) it equals a sort of all runs, with empty runs, duplicates across runs and
    /// windows at odd addresses; ties come from the lower run; bad tables are refused.
    #[test]
    // The cases, the piecewise merge and the refusals share one store and one map.
    #[allow(clippy::too_many_lines)]
    fn merge_runs_in_pieces_equals_a_sort_of_all_runs() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let cases: Vec<Vec<Vec<u64>>> = vec![
            vec![vec![]],
            vec![vec![3, 1, 2]],
            vec![vec![], vec![5, 1], vec![]],
            vec![vec![1, 5, 5], vec![5, 1, 9], vec![5], vec![0, 5]],
            (0..5)
                .map(|i| xorshift_keys(300 + 77 * i, i as u64 + 1, 0x3f))
                .collect(),
            (0..16)
                .map(|i| xorshift_keys(50 + i, i as u64 + 9, u64::MAX))
                .collect(),
        ];
        for mut runs in cases {
            for r in &mut runs {
                r.sort_unstable();
            }
            let mut expect: Vec<u64> = runs.concat();
            expect.sort_unstable();
            let total = expect.len();
            let n = runs.len();
            for (skew, piece) in [(0usize, 7usize), (3, 1000)] {
                // One region: the runs, the table, taken, the output.
                let run_bytes: Vec<u8> = runs.iter().flat_map(|r| le_bytes(r)).collect();
                let table_at = skew + run_bytes.len();
                let taken_at = table_at + 16 * n;
                let out_at = taken_at + 8 * n;
                let mut store = vec![0u64; (out_at + 8 * total) / 8 + 2];
                let region = as_keys_bytes(&mut store);
                region[skew..table_at].copy_from_slice(&run_bytes);
                let mut mem = MemoryMap::new();
                let base = mem.map_read_write(RegionIdx(4), region).unwrap();
                let mut ctx = CallContext::new(&files, Instant::now());
                let mut at: Vec<u64> = vec![0; n];
                let mut got = Vec::new();
                loop {
                    // The table of what is left of each run.
                    let mut off = skew as u64;
                    for (i, r) in runs.iter().enumerate() {
                        let addr = base + off + at[i] * 8;
                        let len = (r.len() as u64 - at[i]) * 8;
                        let e = table_at as u64 + 16 * i as u64;
                        mem.store(base + e, 8, addr).unwrap();
                        mem.store(base + e + 8, 8, len).unwrap();
                        off += r.len() as u64 * 8;
                    }
                    let want = piece.min(total - got.len());
                    let w = ctx
                        .call(
                            ids::CSX_MERGE_RUNS_U64,
                            [
                                base + out_at as u64,
                                want as u64 * 8,
                                base + table_at as u64,
                                n as u64,
                                base + taken_at as u64,
                            ],
                            &mut mem,
                        )
                        .unwrap();
                    assert_eq!(w, want as u64, "{:?}", ctx.detail);
                    for i in 0..w {
                        got.push(mem.load(base + out_at as u64 + i * 8, 8).unwrap());
                    }
                    let mut used = 0;
                    for (i, a) in at.iter_mut().enumerate() {
                        let t = mem.load(base + (taken_at + 8 * i) as u64, 8).unwrap();
                        *a += t;
                        used += t;
                    }
                    assert_eq!(used, w, "taken adds up to the keys written");
                    if got.len() == total {
                        break;
                    }
                }
                assert_eq!(got, expect, "{n} runs, skew {skew}, pieces of {piece}");
                assert_eq!(at, runs.iter().map(|r| r.len() as u64).collect::<Vec<_>>());
            }
        }
        // Ties: one key of 5 from run 0, then run 1's.
        let mut store = vec![0u64; 16];
        let region = as_keys_bytes(&mut store);
        region[0..8].copy_from_slice(&5u64.to_le_bytes());
        region[8..16].copy_from_slice(&5u64.to_le_bytes());
        let mut mem = MemoryMap::new();
        let base = mem.map_read_write(RegionIdx(4), region).unwrap();
        for (i, (addr, len)) in [(base, 8u64), (base + 8, 8)].iter().enumerate() {
            mem.store(base + 16 + 16 * i as u64, 8, *addr).unwrap();
            mem.store(base + 24 + 16 * i as u64, 8, *len).unwrap();
        }
        let mut ctx = CallContext::new(&files, Instant::now());
        let call = |ctx: &mut CallContext<'_>, mem: &mut MemoryMap<'_>, a: [u64; 5]| {
            ctx.call(ids::CSX_MERGE_RUNS_U64, a, mem).unwrap()
        };
        assert_eq!(
            call(&mut ctx, &mut mem, [base + 80, 8, base + 16, 2, base + 64]),
            1
        );
        assert_eq!(mem.load(base + 64, 8).unwrap(), 1, "run 0 first");
        assert_eq!(mem.load(base + 72, 8).unwrap(), 0);
        // No runs, too many, odd output, output over a run, taken over the output,
        // a table past the region.
        for (a, errno) in [
            ([base + 80, 8, base + 16, 0, base + 64], CSX_EINVAL),
            ([base + 80, 8, base + 16, 17, base + 64], CSX_EINVAL),
            ([base + 80, 12, base + 16, 2, base + 64], CSX_EINVAL),
            ([base + 8, 8, base + 16, 2, base + 64], CSX_EINVAL),
            ([base + 64, 16, base + 16, 2, base + 72], CSX_EINVAL),
            ([base + 80, 8, base + 120, 2, base + 64], CSX_EFAULT),
        ] {
            assert_eq!(call(&mut ctx, &mut mem, a), errno as u64, "{a:?}");
        }
    }

    #[test]
    fn merge_joins_two_sorted_runs() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let mut ctx = CallContext::new(&files, Instant::now());
        let mut region = vec![0u8; 8 * 7];
        for (i, v) in [2u64, 4, 9, 1, 3, 4, 10].iter().enumerate() {
            region[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let mut mem = MemoryMap::new();
        let base = mem.map_read_write(RegionIdx(4), &mut region).unwrap();
        assert_eq!(
            ctx.call(ids::CSX_MERGE_U64, [base, 56, 24, 0, 0], &mut mem),
            Ok(7)
        );
        let merged: Vec<u64> = (0..7).map(|i| mem.load(base + i * 8, 8).unwrap()).collect();
        assert_eq!(merged, [1, 2, 3, 4, 4, 9, 10]);
        assert_eq!(
            ctx.call(ids::CSX_MERGE_U64, [base, 56, 64, 0, 0], &mut mem),
            Ok(CSX_EINVAL as u64)
        );
        assert_eq!(
            ctx.call(ids::CSX_MERGE_U64, [base, 56, 12, 0, 0], &mut mem),
            Ok(CSX_EINVAL as u64)
        );
    }

    #[test]
    fn filters_sort_trace() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let mut ctx = CallContext::new(&files, Instant::now());
        let mut region = vec![0u8; 128];
        for (i, v) in [5u64, 1, 9, 3, 7].iter().enumerate() {
            region[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let mut mem = MemoryMap::new();
        let base = mem.map_read_write(RegionIdx(4), &mut region).unwrap();
        let n = ctx.call(
            ids::CSX_FILTER_U64,
            [base, 40, cmp::CSX_CMP_GE, 5, base + 100],
            &mut mem,
        );
        assert_eq!(n, Ok(3));
        assert_eq!(mem.load(base + 100, 1), Ok(0b10101));
        let n = ctx.call(
            ids::CSX_FILTER_U32,
            [base, 40, cmp::CSX_CMP_EQ, 0, base + 100],
            &mut mem,
        );
        assert_eq!(n, Ok(5));
        assert_eq!(
            ctx.call(ids::CSX_SORT_U64, [base, 40, 0, 0, 0], &mut mem),
            Ok(5)
        );
        let sorted: Vec<u64> = (0..5).map(|i| mem.load(base + i * 8, 8).unwrap()).collect();
        assert_eq!(sorted, [1, 3, 5, 7, 9]);
        assert_eq!(
            ctx.call(ids::CSX_SORT_U64, [base, 7, 0, 0, 0], &mut mem),
            Ok(CSX_EINVAL as u64)
        );
        // A bitmap outside memory fails with EFAULT, not a trap.
        let n = ctx.call(ids::CSX_FILTER_U64, [base, 40, 0, 5, base + 128], &mut mem);
        assert_eq!(n, Ok(CSX_EFAULT as u64));
        mem.store(base, 8, u64::from_le_bytes(*b"hi\0junk!"))
            .unwrap();
        assert_eq!(
            ctx.call(ids::CSX_TRACE, [base, 8, 0, 0, 0], &mut mem),
            Ok(0)
        );
        assert_eq!(ctx.trace, ["hi"]);
        assert_eq!(ctx.detail.as_ref().unwrap().function, "csx_sort_u64");
    }

    #[test]
    fn chacha20_follows_rfc_8439_at_any_offset() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let mut ctx = CallContext::new(&files, Instant::now());
        // RFC 8439 section 2.4.2: key 00..1f, nonce 00 00 00 00 00 00 00 4a 00 00 00 00,
        // initial counter 1 (stream byte 64).
        let mut key_nonce: Vec<u8> = (0..32).collect();
        key_nonce.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0]);
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let mut data = plain.to_vec();
        let mut mem = MemoryMap::new();
        let k = mem.map_read_only(RegionIdx(4), &key_nonce).unwrap();
        let d = mem.map_read_write(RegionIdx(5), &mut data).unwrap();
        let n = plain.len() as u64;
        assert_eq!(
            ctx.call(ids::CSX_CHACHA20, [k, 44, 64, d, n], &mut mem),
            Ok(n)
        );
        let head = mem.slice(d, 16).unwrap().to_vec();
        assert_eq!(
            head,
            [
                0x6e, 0x2e, 0x35, 0x9a, 0x25, 0x68, 0xf9, 0x80, 0x41, 0xba, 0x07, 0x28, 0xdd, 0x0d,
                0x69, 0x81
            ]
        );
        // Decrypting in two pieces at their stream offsets gives the plaintext back.
        assert_eq!(
            ctx.call(ids::CSX_CHACHA20, [k, 44, 64, d, 5], &mut mem),
            Ok(5)
        );
        assert_eq!(
            ctx.call(ids::CSX_CHACHA20, [k, 44, 69, d + 5, n - 5], &mut mem),
            Ok(n - 5)
        );
        assert_eq!(mem.slice(d, n).unwrap(), plain);
        assert!(ctx.detail.is_none());
        // A key of the wrong length; a stream past 256 GiB.
        assert_eq!(
            ctx.call(ids::CSX_CHACHA20, [k, 32, 0, d, n], &mut mem),
            Ok(CSX_EINVAL as u64)
        );
        assert_eq!(
            ctx.call(ids::CSX_CHACHA20, [k, 44, 64 << 32, d, 1], &mut mem),
            Ok(CSX_ERANGE as u64)
        );
    }

    #[test]
    fn lz4_round_trips_and_reports_bad_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let mut ctx = CallContext::new(&files, Instant::now());
        let raw: Vec<u8> = b"csx near-storage "
            .iter()
            .cycle()
            .take(5000)
            .copied()
            .collect();
        let mut packed = vec![0u8; abi::op::lz4_bound(raw.len())];
        let mut back = vec![0u8; raw.len()];
        let mut mem = MemoryMap::new();
        let r = mem.map_read_only(RegionIdx(4), &raw).unwrap();
        let p = mem.map_read_write(RegionIdx(5), &mut packed).unwrap();
        let b = mem.map_read_write(RegionIdx(6), &mut back).unwrap();
        let plen = abi::op::lz4_bound(raw.len()) as u64;
        let c = ctx
            .call(ids::CSX_LZ4_COMPRESS, [r, 5000, p, plen, 0], &mut mem)
            .unwrap();
        assert!(c > 0 && c < 500, "{c}");
        // The host's decoder reads the device's block.
        let block = mem.slice(p, c).unwrap().to_vec();
        assert_eq!(lz4_flex::block::decompress(&block, 5000).unwrap(), raw);
        assert_eq!(
            ctx.call(ids::CSX_LZ4_DECOMPRESS, [p, c, b, 5000, 0], &mut mem),
            Ok(5000)
        );
        assert_eq!(mem.slice(b, 5000).unwrap(), &raw[..]);
        assert!(ctx.detail.is_none());
        // Too little room, on either side; a corrupt block.
        assert_eq!(
            ctx.call(ids::CSX_LZ4_DECOMPRESS, [p, c, b, 4999, 0], &mut mem),
            Ok(CSX_ENOSPC as u64)
        );
        assert_eq!(
            ctx.call(ids::CSX_LZ4_COMPRESS, [r, 5000, p, 5000, 0], &mut mem),
            Ok(CSX_ENOSPC as u64)
        );
        mem.store(p, 1, 0xff).unwrap();
        mem.store(p + 1, 8, u64::MAX).unwrap();
        let bad = ctx.call(ids::CSX_LZ4_DECOMPRESS, [p, c, b, 5000, 0], &mut mem);
        assert_eq!(bad, Ok(CSX_EBADMSG as u64));
    }

    /// A constant block of 30 sevens, then a raw block of 0, 3, .., 147, back to back;
    /// and the 80 values they hold.
    fn two_unpack_blocks() -> (Vec<u8>, Vec<u32>) {
        use abi::colblock::{crc32c, BlockHeader, ENC_CONSTANT, ENC_RAW};
        let raw: Vec<u8> = (0..50u32).flat_map(|v| (v * 3).to_le_bytes()).collect();
        let blocks = [
            BlockHeader {
                encoding: ENC_CONSTANT,
                width: 4,
                rows: 30,
                reference: 7,
                min: 7,
                max: 7,
                payload_crc: crc32c(&[]),
                ..BlockHeader::default()
            },
            BlockHeader {
                encoding: ENC_RAW,
                width: 4,
                rows: 50,
                payload_len: 200,
                min: 0,
                max: 147,
                payload_crc: crc32c(&raw),
                index: 1,
                ..BlockHeader::default()
            },
        ];
        let mut src = blocks[0].encode().to_vec();
        src.extend_from_slice(&blocks[1].encode());
        src.extend_from_slice(&raw);
        let values = (0..80u32).map(|i| if i < 30 { 7 } else { (i - 30) * 3 });
        (src, values.collect())
    }

    fn u32s(bytes: &[u8]) -> Vec<u32> {
        let v = bytes.chunks_exact(4);
        v.map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// csx_unpack expands constant and raw blocks stored back to back, any row range;
    /// a flipped bit in a header or a payload is CSX_EBADMSG naming the block's offset
    /// and the part; bad pointers are CSX_EFAULT; a set stop flag stops the run.
    #[test]
    fn unpack_expands_blocks_checks_them_and_stops() {
        use abi::colblock::BLOCK_HEADER_SIZE;
        let (mut src, _) = two_unpack_blocks();
        let mut out = vec![0u8; 80 * 4];
        let mut ctx = CallContext::without_files(Instant::now());
        let mut mem = MemoryMap::new();
        let s = mem.map_read_write(RegionIdx(4), &mut src).unwrap();
        let d = mem.map_read_write(RegionIdx(5), &mut out).unwrap();
        let n = (2 * BLOCK_HEADER_SIZE + 200) as u64;
        let f = ids::CSX_UNPACK;
        // Rows 25..35: five constants, then the raw block's first five.
        assert_eq!(ctx.call(f, [s, n, 25, d, 40], &mut mem), Ok(10));
        let got = u32s(mem.slice(d, 40).unwrap());
        assert_eq!(got, [7, 7, 7, 7, 7, 0, 3, 6, 9, 12]);
        assert_eq!(ctx.call(f, [s, n, 0, d, 320], &mut mem), Ok(80));
        assert!(ctx.detail.is_none());
        // first_row's top byte asks for a width: these blocks' own is served, none other
        // (only 8-byte values narrow, to 4: colblock's tests).
        let as_width = |w: u64| 25 | w << abi::functions::CSX_UNPACK_AS_SHIFT;
        assert_eq!(ctx.call(f, [s, n, as_width(4), d, 40], &mut mem), Ok(10));
        assert_eq!(u32s(mem.slice(d, 40).unwrap()), got);
        for w in [8, 2, 3, 255] {
            let r = ctx.call(f, [s, n, as_width(w), d, 40], &mut mem);
            assert_eq!(r, Ok(CSX_EBADMSG as u64), "width {w}");
            let m = &ctx.detail.take().unwrap().message;
            assert!(m.contains("narrows"), "{m}");
        }
        // Past the last row; an output that is not whole values.
        assert_eq!(
            ctx.call(f, [s, n, 75, d, 24], &mut mem),
            Ok(CSX_EBADMSG as u64)
        );
        assert_eq!(
            ctx.call(f, [s, n, 0, d, 6], &mut mem),
            Ok(CSX_EBADMSG as u64)
        );
        // A flipped payload bit, then a flipped header bit, of the second block.
        for (flip, part) in [
            (2 * BLOCK_HEADER_SIZE + 9, "bad data"),
            (BLOCK_HEADER_SIZE + 33, "bad header"),
        ] {
            let mut ctx = CallContext::without_files(Instant::now());
            let at = s + flip as u64;
            let b = mem.load(at, 1).unwrap();
            mem.store(at, 1, b ^ 4).unwrap();
            assert_eq!(
                ctx.call(f, [s, n, 0, d, 320], &mut mem),
                Ok(CSX_EBADMSG as u64)
            );
            let detail = ctx.detail.clone().unwrap();
            assert_eq!(detail.function, "csx_unpack");
            assert!(
                detail.message.contains("block at byte 64") && detail.message.contains(part),
                "{}",
                detail.message
            );
            mem.store(at, 1, b).unwrap();
        }
        // Outside the program's memory.
        assert_eq!(
            ctx.call(f, [s, n + 1, 0, d, 40], &mut mem),
            Ok(CSX_EFAULT as u64)
        );
        // Stopped.
        let flag = StopFlag::new();
        flag.stop(1);
        let mut ctx = CallContext::without_files(Instant::now()).with_stop(&flag);
        assert!(ctx.call(f, [s, n, 0, d, 320], &mut mem).is_err());
    }

    /// csx_unpack's output may overlap its input (the same window, the output over the
    /// blocks or beginning inside them): the rows decode as from a separate copy.
    #[test]
    fn unpack_into_its_own_input_decodes_as_from_a_copy() {
        let (src, want) = two_unpack_blocks();
        let n = src.len() as u64;
        // Output at the input's first byte, 64 bytes into it, and ending inside it.
        for (at, rows) in [(0u64, 80u64), (64, 80), (8, 40)] {
            let mut buf = src.clone();
            buf.resize(src.len() + 400, 0);
            let mut ctx = CallContext::without_files(Instant::now());
            let mut mem = MemoryMap::new();
            let b = mem.map_read_write(RegionIdx(4), &mut buf).unwrap();
            let f = ids::CSX_UNPACK;
            let r = ctx.call(f, [b, n, 0, b + at, rows * 4], &mut mem);
            assert_eq!(r, Ok(rows), "output at {at}: {:?}", ctx.detail);
            let got = u32s(mem.slice(b + at, rows * 4).unwrap());
            assert_eq!(got, want[..rows as usize], "output at {at}");
        }
    }

    /// The filters' contract written the obvious way: every value read, then the bitmap.
    fn naive_filter(width: usize, data: &[u8], op: u64, operand: u64) -> (Vec<u8>, u64) {
        let count = data.len() / width;
        let mut bits = vec![0u8; count.div_ceil(8)];
        let mut hits = 0;
        for i in 0..count {
            let b = &data[i * width..(i + 1) * width];
            let x = if width == 4 {
                u64::from(u32::from_le_bytes(b.try_into().unwrap()))
            } else {
                u64::from_le_bytes(b.try_into().unwrap())
            };
            let hit = match op {
                cmp::CSX_CMP_EQ => x == operand,
                cmp::CSX_CMP_NE => x != operand,
                cmp::CSX_CMP_LT => x < operand,
                cmp::CSX_CMP_LE => x <= operand,
                cmp::CSX_CMP_GT => x > operand,
                _ => x >= operand,
            };
            if hit {
                bits[i / 8] |= 1 << (i % 8);
                hits += 1;
            }
        }
        (bits, hits)
    }

    /// Values around `pivot` (below, equal, above), seeded, as `width`-byte integers.
    fn filter_input(width: usize, count: usize, pivot: u64, seed: u64) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut data = Vec::with_capacity(count * width);
        for _ in 0..count {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = match state % 4 {
                0 => pivot,
                1 => pivot.wrapping_sub(1 + state % 3),
                2 => pivot.wrapping_add(1 + state % 3),
                _ => state >> 8,
            };
            data.extend_from_slice(&v.to_le_bytes()[..width]);
        }
        data
    }

    const ALL_OPS: [u64; 6] = [
        cmp::CSX_CMP_EQ,
        cmp::CSX_CMP_NE,
        cmp::CSX_CMP_LT,
        cmp::CSX_CMP_LE,
        cmp::CSX_CMP_GT,
        cmp::CSX_CMP_GE,
    ];

    /// Runs one filter call with the input at offset 0 of one region and the bitmap at
    /// `bitmap_offset` of a second region filled with 0xAA, and checks the bitmap, the
    /// count and that no byte past the bitmap changed.
    fn check_filter(files: &FileStore, width: usize, count: usize, op: u64, operand: u64) {
        let mut ctx = CallContext::new(files, Instant::now());
        let seed = (count as u64).wrapping_add(operand).wrapping_add(op);
        let pivot = if width == 4 {
            operand.min(u64::from(u32::MAX))
        } else {
            operand
        };
        let input = filter_input(width, count, pivot, seed);
        let (want_bits, want_hits) = naive_filter(width, &input, op, operand);
        let bitmap_offset = 3;
        let mut output = vec![0xAAu8; bitmap_offset + want_bits.len() + 16];
        let mut mem = MemoryMap::new();
        let src = mem.map_read_only(RegionIdx(4), &input).unwrap();
        let dst = mem.map_read_write(RegionIdx(5), &mut output).unwrap();
        let id = if width == 4 {
            ids::CSX_FILTER_U32
        } else {
            ids::CSX_FILTER_U64
        };
        let args = [
            src,
            (count * width) as u64,
            op,
            operand,
            dst + bitmap_offset as u64,
        ];
        let case = format!("width {width}, {count} values, op {op}, operand {operand}");
        assert_eq!(ctx.call(id, args, &mut mem), Ok(want_hits), "{case}");
        assert!(ctx.detail.is_none(), "{case}: {:?}", ctx.detail);
        let end = bitmap_offset + want_bits.len();
        assert_eq!(output[..bitmap_offset], [0xAA; 3], "{case}");
        assert_eq!(output[bitmap_offset..end], want_bits[..], "{case}");
        assert!(output[end..].iter().all(|&b| b == 0xAA), "{case}");
    }

    #[test]
    fn filters_match_the_contract_for_every_operator_and_edge_length() {
        let lengths = [
            0,
            1,
            7,
            8,
            9,
            31,
            32,
            33,
            63,
            64,
            65,
            127,
            200,
            filter::BLOCK_VALUES - 1,
            filter::BLOCK_VALUES,
            filter::BLOCK_VALUES + 1,
            2 * filter::BLOCK_VALUES + 67,
        ];
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        for width in [4, 8] {
            for op in ALL_OPS {
                for count in lengths {
                    for operand in [0, 1, 500, u64::from(u32::MAX), u64::MAX] {
                        check_filter(&files, width, count, op, operand);
                    }
                }
            }
        }
    }

    #[test]
    fn u32_filter_compares_as_u64_beyond_u32_max() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        for op in ALL_OPS {
            for operand in [1 << 32, (1 << 32) + 5, u64::MAX] {
                check_filter(&files, 4, 100, op, operand);
            }
        }
    }

    #[test]
    fn filter_reads_every_value_before_writing_an_overlapping_bitmap() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        for width in [4usize, 8] {
            for bitmap_offset in [0usize, 1, 40, 200] {
                let count = 3 * 64 + 5;
                let mut region = filter_input(width, count, 1000, bitmap_offset as u64);
                region.resize(region.len() + 64, 0x55);
                let (want_bits, want_hits) =
                    naive_filter(width, &region[..count * width], cmp::CSX_CMP_LT, 1000);
                let mut expected = region.clone();
                expected[bitmap_offset..bitmap_offset + want_bits.len()]
                    .copy_from_slice(&want_bits);
                let mut ctx = CallContext::new(&files, Instant::now());
                let mut mem = MemoryMap::new();
                let base = mem.map_read_write(RegionIdx(4), &mut region).unwrap();
                let id = if width == 4 {
                    ids::CSX_FILTER_U32
                } else {
                    ids::CSX_FILTER_U64
                };
                let args = [
                    base,
                    (count * width) as u64,
                    cmp::CSX_CMP_LT,
                    1000,
                    base + bitmap_offset as u64,
                ];
                assert_eq!(ctx.call(id, args, &mut mem), Ok(want_hits));
                mem.unmap(RegionIdx(4));
                assert_eq!(region, expected, "width {width}, bitmap at {bitmap_offset}");
            }
        }
    }

    #[test]
    fn filter_errors_leave_memory_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let files = store(dir.path());
        let mut ctx = CallContext::new(&files, Instant::now());
        let input = filter_input(4, 100, 9, 1);
        let mut output = vec![0xAAu8; 12];
        let mut mem = MemoryMap::new();
        let src = mem.map_read_only(RegionIdx(4), &input).unwrap();
        let dst = mem.map_read_write(RegionIdx(5), &mut output).unwrap();
        let f = ids::CSX_FILTER_U32;
        // 100 values need 13 bitmap bytes; the output has 12.
        let too_small = ctx.call(f, [src, 400, cmp::CSX_CMP_EQ, 9, dst], &mut mem);
        assert_eq!(too_small, Ok(CSX_EFAULT as u64));
        let d = ctx.detail.clone().unwrap();
        assert_eq!(
            (d.function.as_str(), d.code),
            ("csx_filter_u32", CSX_EFAULT)
        );
        assert!(d.message.contains("bitmap of 13 bytes"), "{}", d.message);
        // A read-only bitmap, an unknown operator, a ragged length.
        assert_eq!(
            ctx.call(f, [src, 4, cmp::CSX_CMP_EQ, 9, src], &mut mem),
            Ok(CSX_EFAULT as u64)
        );
        assert_eq!(
            ctx.call(f, [src, 4, 6, 9, dst], &mut mem),
            Ok(CSX_EINVAL as u64)
        );
        assert_eq!(
            ctx.call(ids::CSX_FILTER_U64, [src, 12, 0, 9, dst], &mut mem),
            Ok(CSX_EINVAL as u64)
        );
        mem.unmap(RegionIdx(5));
        assert_eq!(output, [0xAA; 12]);
        assert_eq!(input, filter_input(4, 100, 9, 1));
    }
}
