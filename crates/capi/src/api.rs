//! The exported functions of `cs_api.h`: open and close, device memory, data movement and
//! compute requests, events and batches ([`crate::manage`] has discovery, CSFs and
//! properties; [`crate::v05`] the v0.5 forms). Every function:
//! * checks each pointer and handle before use (null, unknown, freed, wrong kind: a
//!   status, never a crash), and each length against its object and the protocol's limits;
//! * runs inside `catch_unwind`, so a bug in the library is `CS_FATAL_ERROR`, not an abort
//!   of the caller;
//! * leaves a message naming the bad value and the limit for `csxGetLastError`.
//!
//! Completion: with no callback and no event a request runs on the calling thread and
//! the call returns its status. With a callback or an event, its arguments are checked
//! and copied, the call returns `CS_QUEUED` (and a request handle for `csAbortRequest`),
//! and the request runs on its device's worker (see [`crate::queue`]): on completion the
//! callback runs on that worker, or the event records the status for `csPollEvent`. A
//! request refused before it starts (bad arguments) returns its status directly and
//! signals nothing.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use csx_host::proto::limits::{
    FUEL_MAX, PARAMS_SIZE_MAX, SLM_ALLOC_SIZE_MAX, TIME_LIMIT_MS_MAX, WINDOWS_MAX,
};
use csx_host::proto::{CopySource, MemHandle as DevMemHandle, MemRange};
use csx_host::{CallError, DeviceUri, ExecuteRequest, SessionError};

use crate::mapping::Mapping;
use crate::queue::{Job, Kind, Request, Worker};
use crate::registry::{self, handle_of, key_of, Dev, Event, FixedSlot, Handle, Mem};
use crate::status::*;
use crate::types::*;

/// A refused or failed call: its status and the message for `csxGetLastError`.
#[derive(Debug)]
pub struct Fail {
    pub status: CsStatus,
    pub message: String,
}

pub(crate) type R<T> = Result<T, Fail>;

pub(crate) fn fail<T>(status: CsStatus, message: impl Into<String>) -> R<T> {
    Err(Fail {
        status,
        message: message.into(),
    })
}

impl From<CallError> for Fail {
    fn from(e: CallError) -> Fail {
        Fail {
            status: call_status(&e),
            message: e.to_string(),
        }
    }
}

impl From<SessionError> for Fail {
    /// A session's command failure is the device's (its message unchanged); a trap is
    /// an error in execution.
    fn from(e: SessionError) -> Fail {
        match e {
            SessionError::Device { source, .. } => Fail::from(source),
            SessionError::Trap { trap, .. } => Fail {
                status: CS_ERROR_IN_EXECUTION,
                message: trap.to_string(),
            },
            other => Fail {
                status: CS_DEVICE_ERROR,
                message: other.to_string(),
            },
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs one API call: panics become `CS_FATAL_ERROR`, failures set the last error.
pub(crate) fn run(name: &'static str, f: impl FnOnce() -> R<CsStatus>) -> CsStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            set_last_error(&format!(
                "{name}: {}: {}",
                crate::status::name(e.status),
                e.message
            ));
            e.status
        }
        Err(_) => {
            set_last_error(&format!(
                "{name}: CS_FATAL_ERROR: the library panicked (a bug)"
            ));
            CS_FATAL_ERROR
        }
    }
}

/// `*p` for writing, or `CS_INVALID_ARG` naming `what` when `p` is null.
///
/// # Safety
/// `p` is null or valid for writes of a `T` (the C caller's contract).
pub(crate) unsafe fn out<'a, T>(p: *mut T, what: &str) -> R<&'a mut T> {
    // SAFETY: the caller's contract: `p` is null or points to a writable `T`.
    match unsafe { p.as_mut() } {
        Some(r) => Ok(r),
        None => fail(CS_INVALID_ARG, format!("{what} is NULL")),
    }
}

/// `*p` for reading, or `CS_INVALID_ARG` naming `what` when `p` is null.
///
/// # Safety
/// `p` is null or valid for reads of a `T`.
pub(crate) unsafe fn inp<'a, T>(p: *const T, what: &str) -> R<&'a T> {
    // SAFETY: the caller's contract: `p` is null or points to a readable `T`.
    match unsafe { p.as_ref() } {
        Some(r) => Ok(r),
        None => fail(CS_INVALID_ARG, format!("{what} is NULL")),
    }
}

/// A NUL-terminated UTF-8 string.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub(crate) unsafe fn string<'a>(p: *const c_char, what: &str) -> R<&'a str> {
    if p.is_null() {
        return fail(CS_INVALID_ARG, format!("{what} is NULL"));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .or_else(|_| fail(CS_INVALID_ARG, format!("{what} is not UTF-8")))
}

pub(crate) fn device(h: CsDevHandle) -> R<Arc<Dev>> {
    if h.is_null() {
        return fail(CS_INVALID_HANDLE, "the device handle is NULL");
    }
    let key = key_of(h);
    registry::with(|r| r.devices.get(&key).cloned()).map_or_else(
        || {
            fail(
                CS_INVALID_HANDLE,
                format!("device handle {key} is not open"),
            )
        },
        Ok,
    )
}

/// What the open device handle `key` holds (its session).
pub(crate) fn handle_state(key: u64) -> R<Arc<Handle>> {
    registry::with(|r| r.handles.get(&key).cloned()).ok_or_else(|| Fail {
        status: CS_INVALID_HANDLE,
        message: format!("device handle {key} is not open"),
    })
}

/// An open device handle's device and what the handle holds, in one look at the tables.
fn device_and_handle(h: CsDevHandle) -> R<(Arc<Dev>, Arc<Handle>)> {
    let key = key_of(h);
    let found =
        registry::with(|r| Some((r.devices.get(&key)?.clone(), r.handles.get(&key)?.clone())));
    match found {
        Some(both) if key != 0 => Ok(both),
        _ => {
            device(h)?;
            fail(
                CS_INVALID_HANDLE,
                format!("device handle {key} is not open"),
            )
        }
    }
}

fn memory(h: CsMemHandle) -> R<(Mem, Arc<Dev>)> {
    if h.is_null() {
        return fail(CS_INVALID_HANDLE, "the memory handle is NULL");
    }
    let key = key_of(h);
    let found = registry::with(|r| {
        let m = r.mems.get(&key)?.clone();
        Some((m.clone(), r.devices.get(&m.dev)?.clone()))
    });
    found.map_or_else(
        || {
            fail(
                CS_INVALID_HANDLE,
                format!("memory handle {key} is not allocated (freed, or its device closed)"),
            )
        },
        Ok,
    )
}

/// A device-memory place `bytes` long: its allocation, checked to hold it.
fn afdm(mem: CsMemHandle, offset: u64, bytes: u64, what: &str) -> R<(Mem, Arc<Dev>)> {
    let (m, d) = memory(mem)?;
    if offset > m.size || bytes > m.size - offset {
        return fail(
            CS_INVALID_LENGTH,
            format!(
                "{what}: {bytes} bytes at offset {offset} reach past the allocation's {} bytes",
                m.size
            ),
        );
    }
    Ok((m, d))
}

fn same_device(d: &Arc<Dev>, other: &Arc<Dev>, what: &str) -> R<()> {
    if Arc::ptr_eq(d, other) {
        Ok(())
    } else {
        fail(
            CS_ENTITY_NOT_ON_DEVICE,
            format!(
                "{what} belongs to device {:?}, not {:?}",
                other.name, d.name
            ),
        )
    }
}

/// Where a request's completion value goes.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    None,
    U64(*mut u64),
    /// The v0.5 forms (and `csQueueBatchRequest`): a 32-bit value (truncated).
    U32(*mut u32),
}

impl Value {
    pub fn u64(p: *mut u64) -> Value {
        if p.is_null() {
            Value::None
        } else {
            Value::U64(p)
        }
    }
    pub fn u32(p: *mut u32) -> Value {
        if p.is_null() {
            Value::None
        } else {
            Value::U32(p)
        }
    }
}

/// The callback a request completes to.
#[derive(Clone, Copy, Debug)]
pub enum Callback {
    None,
    V1(extern "C" fn(*mut c_void, CsStatus, u64)),
    V05(extern "C" fn(*mut c_void, CsStatus)),
}

impl From<CsQueueCallbackFn> for Callback {
    fn from(f: CsQueueCallbackFn) -> Callback {
        f.map_or(Callback::None, Callback::V1)
    }
}

/// How a request completes (see the module doc).
#[derive(Debug)]
pub struct Completion {
    ctx: *mut c_void,
    cb: Callback,
    evt: CsEvtHandle,
    value: Value,
}

// SAFETY: the pointers are the caller's and only passed back to it (the context to its
// callback, the event as a key) or written through (CompValue), which the API's contract
// keeps valid until the request completes; the worker thread that carries them does
// nothing else with them.
unsafe impl Send for Completion {}

impl Completion {
    /// The completion a request's trailing arguments name, its event checked before the
    /// request starts.
    pub(crate) fn checked(
        ctx: *mut c_void,
        cb: Callback,
        evt: CsEvtHandle,
        value: Value,
    ) -> R<Self> {
        let done = Completion {
            ctx,
            cb,
            evt,
            value,
        };
        if !evt.is_null() {
            let key = key_of(evt);
            if !registry::with(|r| r.events.contains_key(&key)) {
                return fail(
                    CS_INVALID_EVENT,
                    format!("event handle {key} is not created"),
                );
            }
        }
        Ok(done)
    }

    /// Whether the request is queued (a callback or an event), not synchronous.
    fn queued(&self) -> bool {
        !matches!(self.cb, Callback::None) || !self.evt.is_null()
    }

    /// Writes the completion value of a successful request.
    ///
    /// # Safety
    /// The value pointer is writable.
    unsafe fn write_value(&self, result: &R<u64>) {
        if let Ok(v) = result {
            match self.value {
                Value::None => {}
                // SAFETY: the caller's contract for CompValue.
                Value::U64(p) => unsafe { *p = *v },
                // SAFETY: the caller's contract for CompValue; v0.5's value is 32 bits.
                Value::U32(p) => unsafe { *p = *v as u32 },
            }
        }
    }

    /// Delivers a queued request's outcome (on the worker): the completion value, then
    /// the event (when given) or the callback. A failure's message is this thread's last
    /// error (inside the callback) and the event's (for the thread that polls it).
    ///
    /// # Safety
    /// The value pointer is writable; the callback is callable with `ctx`.
    pub unsafe fn deliver(self, name: &str, result: R<u64>) {
        // SAFETY: forwarded contract.
        unsafe { self.write_value(&result) };
        let (status, value, message) = match &result {
            Ok(v) => (CS_SUCCESS, *v, String::new()),
            Err(e) => {
                let m = format!("{name}: {}: {}", crate::status::name(e.status), e.message);
                set_last_error(&m);
                (e.status, 0, m)
            }
        };
        if !self.evt.is_null() {
            let key = key_of(self.evt);
            let ctx = self.ctx as usize;
            // An event deleted meanwhile is simply not signalled.
            registry::with(|r| {
                if let Some(ev) = r.events.get_mut(&key) {
                    ev.done = Some((status, ctx, message));
                }
            });
        } else {
            match self.cb {
                Callback::None => {}
                Callback::V1(cb) => cb(self.ctx, status, value),
                Callback::V05(cb) => cb(self.ctx, status),
            }
        }
    }
}

/// Runs a prepared request: at once on this thread when it has no callback and no event
/// (`*ReqHandle`, nullable, receives NULL), else queued on `worker` with a fresh request
/// handle in `*ReqHandle` (set before the request can complete): `CS_QUEUED`.
///
/// # Safety
/// `req_handle` is null or writable; the completion's pointers as for [`Completion`].
pub(crate) unsafe fn dispatch(
    name: &'static str,
    worker: &Worker,
    kind: Kind,
    work: Work,
    done: Completion,
    req_handle: *mut CsReqHandle,
) -> R<CsStatus> {
    // SAFETY: the caller's contract.
    let handle_out = unsafe { req_handle.as_mut() };
    if !done.queued() {
        if let Some(h) = handle_out {
            *h = std::ptr::null_mut();
        }
        let result = run_work(&work, None);
        // SAFETY: the caller's contract for CompValue.
        unsafe { done.write_value(&result) };
        return result.map(|_| CS_SUCCESS);
    }
    let (key, req) = registry::with(|r| {
        let key = r.key();
        let req = Arc::new(Request::new(key, kind));
        r.requests.insert(key, Arc::clone(&req));
        (key, req)
    });
    let mut handle_out = handle_out;
    if let Some(h) = handle_out.as_deref_mut() {
        *h = handle_of(key);
    }
    let pushed = worker.push(Job {
        name,
        req,
        work,
        done,
    });
    if let Err(e) = pushed {
        registry::with(|r| r.requests.remove(&key));
        if let Some(h) = handle_out {
            *h = std::ptr::null_mut();
        }
        return Err(e);
    }
    Ok(CS_QUEUED)
}

// -------------------------------------------------------------------------------------
// Requests: the caller's structures are read into a `Desc` (plain data, owned: what a
// batch keeps), which `prepare` checks against the tables into a `Work`.

/// A compute argument, copied.
#[derive(Clone, Copy, Debug)]
pub enum ArgDesc {
    Afdm {
        mem: usize,
        offset: u64,
    },
    V32(u32),
    V64(u64),
    /// A type csx does not take (checked when the request is prepared).
    Other(i32),
}

/// A request, copied from the caller's structure (handles as keys).
#[derive(Clone, Debug)]
pub enum Desc {
    Copy {
        ty: i32,
        host: usize,
        mem: usize,
        offset: u64,
        bytes: u64,
    },
    File {
        dev: usize,
        ty: i32,
        file: usize,
        offset: u64,
        bytes: u64,
        mem: usize,
        mem_offset: u64,
    },
    Block {
        dev: usize,
        ty: i32,
        storage_index: u32,
        mem: usize,
        mem_offset: u64,
        /// `(namespace id, start LBA, blocks)`.
        ranges: Vec<(u32, u64, u32)>,
    },
    Compute {
        dev: usize,
        csf: CsCsfId,
        args: Vec<ArgDesc>,
    },
    /// A storage request whose mode is not a CS_STORAGE_REQ_MODE.
    BadMode(i32),
}

fn h(key: usize) -> *mut c_void {
    key as *mut c_void
}

pub(crate) fn copy_desc(req: &CsCopyMemRequest) -> Desc {
    Desc::Copy {
        ty: req.type_,
        host: req.host_vaddress as usize,
        mem: req.dev_mem.mem_handle as usize,
        offset: req.dev_mem.byte_offset,
        bytes: req.bytes.into(),
    }
}

pub(crate) fn file_desc(dev: CsDevHandle, f: &CsFileIo) -> Desc {
    Desc::File {
        dev: dev as usize,
        ty: f.type_,
        file: f.file_handle as usize,
        offset: f.offset,
        bytes: f.bytes.into(),
        mem: f.dev_mem.mem_handle as usize,
        mem_offset: f.dev_mem.byte_offset,
    }
}

/// A v1.x storage request.
///
/// # Safety
/// `req` points to a request whose union member is the one `Mode` names; for block I/O,
/// `NumRanges` ranges (when within 1..=CSX_BLOCK_RANGES_MAX) are readable from `Range`.
pub(crate) unsafe fn storage_desc(req: *const CsStorageRequest) -> R<Desc> {
    // SAFETY: the caller's contract.
    let r = unsafe { inp(req, "Req") }?;
    match r.mode {
        CS_STORAGE_FILE_IO => {
            // SAFETY: Mode says the union holds FileIo.
            let f = unsafe { r.u.file_io };
            Ok(file_desc(r.dev_handle, &f))
        }
        CS_STORAGE_BLOCK_IO => {
            // SAFETY: Mode says the union holds BlockIo.
            let b = unsafe { r.u.block_io };
            if b.num_ranges < 1 || b.num_ranges > CSX_BLOCK_RANGES_MAX {
                return fail(
                    CS_INVALID_LENGTH,
                    format!(
                        "BlockIo.NumRanges {} is not within 1..={CSX_BLOCK_RANGES_MAX}",
                        b.num_ranges
                    ),
                );
            }
            // SAFETY: Range holds NumRanges entries inline (the caller's contract); the
            // pointer is derived from `req`, which covers them.
            let ranges = unsafe {
                std::slice::from_raw_parts(
                    std::ptr::addr_of!((*req).u.block_io.range).cast::<CsBlockRange>(),
                    b.num_ranges as usize,
                )
            };
            Ok(Desc::Block {
                dev: r.dev_handle as usize,
                ty: b.type_,
                storage_index: b.storage_index,
                mem: b.dev_mem.mem_handle as usize,
                mem_offset: b.dev_mem.byte_offset,
                ranges: ranges
                    .iter()
                    .map(|x| (x.namespace_id, x.start_lba, x.num_blocks))
                    .collect(),
            })
        }
        other => Ok(Desc::BadMode(other)),
    }
}

/// A compute request.
///
/// # Safety
/// `req` is null or readable with `NumArgs` arguments from `Args` (when NumArgs is within
/// 0..=CSX_COMPUTE_ARGS_MAX).
pub(crate) unsafe fn compute_desc(req: *const CsComputeRequest) -> R<Desc> {
    // SAFETY: the caller's contract.
    let r = unsafe { inp(req, "Req") }?;
    if r.num_args < 0 || r.num_args > CSX_COMPUTE_ARGS_MAX {
        return fail(
            CS_INVALID_LENGTH,
            format!(
                "NumArgs {} is not within 0..={CSX_COMPUTE_ARGS_MAX}",
                r.num_args
            ),
        );
    }
    // SAFETY: the request is followed by NumArgs arguments (the caller's contract); the
    // pointer comes from `req`, which covers them.
    let args = unsafe {
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*req).args).cast::<CsComputeArg>(),
            r.num_args as usize,
        )
    };
    let args = args
        .iter()
        .map(|a| match a.type_ {
            CS_AFDM_TYPE => {
                // SAFETY: Type says the union holds DevMem.
                let p = unsafe { a.u.dev_mem };
                ArgDesc::Afdm {
                    mem: p.mem_handle as usize,
                    offset: p.byte_offset,
                }
            }
            // SAFETY: Type says the union holds Value32.
            CS_32BIT_VALUE_TYPE => ArgDesc::V32(unsafe { a.u.value32 }),
            // SAFETY: Type says the union holds Value64.
            CS_64BIT_VALUE_TYPE => ArgDesc::V64(unsafe { a.u.value64 }),
            other => ArgDesc::Other(other),
        })
        .collect();
    Ok(Desc::Compute {
        dev: r.dev_handle as usize,
        csf: r.csf_id,
        args,
    })
}

/// A request ready to run: its arguments checked and copied (only a copy's host buffer,
/// and the mappings of the allocations it uses, are still the caller's, as the API's
/// contract says).
#[derive(Debug)]
pub struct Work {
    pub op: Op,
}

/// What a [`Work`] does.
#[derive(Debug)]
pub enum Op {
    Copy {
        dev: Arc<Dev>,
        mem: DevMemHandle,
        offset: u64,
        host: usize,
        len: usize,
        to_device: bool,
    },
    FileLoad {
        dev: Arc<Dev>,
        path: String,
        offset: u64,
        bytes: u64,
        mem: DevMemHandle,
        mem_offset: u64,
    },
    FileStore {
        dev: Arc<Dev>,
        path: String,
        offset: u64,
        range: MemRange,
    },
    BlockLoad {
        dev: Arc<Dev>,
        mem: DevMemHandle,
        mem_offset: u64,
        sources: Vec<CopySource>,
    },
    Compute {
        dev: Arc<Dev>,
        /// The handle's session submits the execution.
        handle: Arc<Handle>,
        request: ExecuteRequest,
        csf: CsCsfId,
    },
    /// `(entry index, entry)` in the order to run them.
    Batch { entries: Vec<(usize, Desc)> },
    /// Fill a range (csInitMem).
    Fill {
        dev: Arc<Dev>,
        mem: DevMemHandle,
        offset: u64,
        bytes: u64,
        byte: u8,
    },
}

fn storage_dev(dev: usize, mem: usize, offset: u64, bytes: u64, what: &str) -> R<(Arc<Dev>, Mem)> {
    let d = device(h(dev))?;
    let (m, mdev) = afdm(h(mem), offset, bytes, what)?;
    same_device(&d, &mdev, what)?;
    Ok((d, m))
}

/// A file handle's path.
fn file_path(file: usize) -> R<String> {
    if file == 0 {
        return fail(CS_INVALID_HANDLE, "FileIo.FileHandle is NULL");
    }
    registry::with(|r| r.files.get(&(file as u64)).cloned()).ok_or(Fail {
        status: CS_INVALID_HANDLE,
        message: format!("file handle {file} is not open (csxOpenFile)"),
    })
}

/// Checks a request against the tables: the work it asks for.
pub(crate) fn prepare(desc: &Desc) -> R<Work> {
    let op = match desc {
        Desc::Copy {
            ty,
            host,
            mem,
            offset,
            bytes,
        } => {
            let (m, dev) = afdm(h(*mem), *offset, *bytes, "csQueueCopyMemRequest")?;
            if *host == 0 {
                return fail(CS_INVALID_ARG, "HostVAddress is NULL");
            }
            let to_device = copy_to_device(*ty)?;
            Op::Copy {
                dev,
                mem: m.handle,
                offset: *offset,
                host: *host,
                len: *bytes as usize,
                to_device,
            }
        }
        Desc::File {
            dev,
            ty,
            file,
            offset,
            bytes,
            mem,
            mem_offset,
        } => prepare_file(*dev, *ty, *file, (*offset, *bytes), *mem, *mem_offset)?,
        Desc::Block {
            dev,
            ty,
            storage_index,
            mem,
            mem_offset,
            ranges,
        } => {
            check_block_load(*ty, *storage_index)?;
            let (sources, total) = block_sources(ranges)?;
            let (dev, m) = storage_dev(*dev, *mem, *mem_offset, total, "BlockIo.DevMem")?;
            Op::BlockLoad {
                dev,
                mem: m.handle,
                mem_offset: *mem_offset,
                sources,
            }
        }
        Desc::Compute { dev, csf, args } => prepare_compute(*dev, *csf, args)?,
        Desc::BadMode(mode) => {
            return fail(
                CS_INVALID_OPTION,
                format!("Mode {mode} is not CS_STORAGE_BLOCK_IO (1) or CS_STORAGE_FILE_IO (2)"),
            )
        }
    };
    Ok(Work { op })
}

/// A file request: `Bytes` at `offset` of the file `file` names, loaded into or stored
/// from `mem` at `mem_offset`.
fn prepare_file(
    dev: usize,
    ty: i32,
    file: usize,
    (offset, bytes): (u64, u64),
    mem: usize,
    mem_offset: u64,
) -> R<Op> {
    let path = file_path(file)?;
    let (dev, m) = storage_dev(dev, mem, mem_offset, bytes, "FileIo.DevMem")?;
    match ty {
        CS_STORAGE_LOAD_TYPE => Ok(Op::FileLoad {
            dev,
            path,
            offset,
            bytes,
            mem: m.handle,
            mem_offset,
        }),
        CS_STORAGE_STORE_TYPE => Ok(Op::FileStore {
            dev,
            path,
            offset,
            range: MemRange {
                handle: m.handle,
                offset: mem_offset,
                len: bytes,
            },
        }),
        other => fail(
            CS_INVALID_OPTION,
            format!(
                "FileIo.Type {other} is not CS_STORAGE_LOAD_TYPE (1) or CS_STORAGE_STORE_TYPE (2)"
            ),
        ),
    }
}

/// `CS_COPY_TO_DEVICE` (true) or `CS_COPY_FROM_DEVICE` (false).
fn copy_to_device(ty: i32) -> R<bool> {
    match ty {
        CS_COPY_TO_DEVICE => Ok(true),
        CS_COPY_FROM_DEVICE => Ok(false),
        other => fail(
            CS_INVALID_OPTION,
            format!("Type {other} is not CS_COPY_TO_DEVICE (1) or CS_COPY_FROM_DEVICE (2)"),
        ),
    }
}

/// A block request csx runs: a LOAD from storage index 0.
fn check_block_load(ty: i32, storage_index: u32) -> R<()> {
    if ty == CS_STORAGE_STORE_TYPE {
        return fail(
            CS_UNSUPPORTED,
            "block STORE: csx writes storage only through its file store (use file I/O)",
        );
    }
    if ty != CS_STORAGE_LOAD_TYPE {
        return fail(
            CS_INVALID_OPTION,
            format!("BlockIo.Type {ty} is not CS_STORAGE_LOAD_TYPE (1)"),
        );
    }
    if storage_index != 0 {
        return fail(
            CS_ENTITY_NOT_ON_DEVICE,
            format!("BlockIo.StorageIndex {storage_index}: a csx device is not an array (0)"),
        );
    }
    Ok(())
}

/// The block ranges as copy sources of the NVM namespace, and their bytes.
fn block_sources(ranges: &[(u32, u64, u32)]) -> R<(Vec<CopySource>, u64)> {
    let mut sources = Vec::with_capacity(ranges.len());
    let mut total: u64 = 0;
    for (i, &(ns, lba, n)) in ranges.iter().enumerate() {
        if ns != 1 {
            return fail(
                CS_ENTITY_NOT_ON_DEVICE,
                format!("BlockIo.Range[{i}].NamespaceId {ns} is not the NVM namespace (1)"),
            );
        }
        let len = u64::from(n) * CSX_BLOCK_SIZE;
        let offset = lba.checked_mul(CSX_BLOCK_SIZE).ok_or(Fail {
            status: CS_INVALID_LENGTH,
            message: format!("BlockIo.Range[{i}].StartLba {lba} overflows"),
        })?;
        total = total.saturating_add(len);
        sources.push(CopySource::Nvm { offset, len });
    }
    Ok((sources, total))
}

/// CSF ids from here on are built-in CSFs: registered device function `id - BASE`.
pub const CSX_BUILTIN_CSF_BASE: u32 = 0x1_0000;

pub(crate) fn csf_slot(id: CsCsfId) -> R<csx_host::proto::ProgramIndex> {
    if (CSX_BUILTIN_CSF_BASE..2 * CSX_BUILTIN_CSF_BASE).contains(&id) {
        return fail(
            CS_UNSUPPORTED,
            format!("CSFId {id:#x} is a built-in CSF (a registered device function): programs call it, a compute request cannot"),
        );
    }
    u16::try_from(id)
        .map(csx_host::proto::ProgramIndex)
        .or_else(|_| fail(CS_INVALID_ID, format!("CSFId {id} is not a program slot")))
}

/// The program a CSF id names: a slot itself (whatever program it holds), or the
/// program a fixed id is reserved for (see [`crate::fixed`]), as `handle` last found
/// it: its slot and its generation, which the run names so that the device refuses it
/// if another program took the slot meanwhile.
fn slot_of_csf(dev: &Dev, handle: &Handle, id: CsCsfId) -> R<FixedSlot> {
    if !crate::fixed::is_fixed(id) {
        return csf_slot(id).map(|pind| FixedSlot {
            pind,
            generation: None,
        });
    }
    let lock = || handle.fixed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&found) = lock().get(&id) {
        return Ok(found);
    }
    let found = look_up_fixed(dev, id)?;
    lock().insert(id, found);
    Ok(found)
}

/// The run of `request` on the program `found`.
fn aimed(mut request: ExecuteRequest, found: FixedSlot) -> ExecuteRequest {
    request.pind = found.pind;
    request.generation = found.generation;
    request
}

/// The program fixed id `id` is reserved for, from the device's table and its slots.
fn look_up_fixed(dev: &Dev, id: CsCsfId) -> R<FixedSlot> {
    let table = crate::manage::fixed_ids(dev)?;
    let name = crate::fixed::id_of_name(&table, id).ok_or(Fail {
        status: CS_INVALID_ID,
        message: format!(
            "CSFId {id} is not reserved on {} (`csx program load NAME FILE --id {id}`)",
            dev.name
        ),
    })?;
    match crate::manage::programs_named(dev, &name)?.first() {
        Some(&found) => Ok(found),
        None => fail(
            CS_UNKNOWN_COMPUTE_FUNCTION,
            format!(
                "CSFId {id} is reserved for {name:?}, which is not loaded on {}",
                dev.name
            ),
        ),
    }
}

fn prepare_compute(dev: usize, csf: CsCsfId, args: &[ArgDesc]) -> R<Op> {
    let (dev, handle) = device_and_handle(h(dev))?;
    let found = slot_of_csf(&dev, &handle, csf)?;
    let mut request = aimed(ExecuteRequest::new(found.pind), found);
    let mut windows = 0usize;
    let mut values: Vec<u64> = Vec::new();
    let mut params: Vec<u8> = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let (v, bytes): (u64, Vec<u8>) = match *a {
            ArgDesc::Afdm { mem, offset } => {
                let (m, mdev) = afdm(h(mem), offset, 0, "compute argument")?;
                same_device(&dev, &mdev, "compute argument")?;
                windows += 1;
                if windows > WINDOWS_MAX {
                    return fail(
                        CS_INVALID_LENGTH,
                        format!("argument {i}: more than {WINDOWS_MAX} AFDM arguments"),
                    );
                }
                request = request.window(m.handle, offset, m.size - offset);
                continue;
            }
            ArgDesc::V32(v) => (u64::from(v), v.to_le_bytes().to_vec()),
            ArgDesc::V64(v) => (v, v.to_le_bytes().to_vec()),
            ArgDesc::Other(CS_STREAM_TYPE) | ArgDesc::Other(CS_DESCRIPTOR_TYPE) => {
                return fail(
                    CS_UNSUPPORTED,
                    format!(
                        "argument {i}: stream and descriptor arguments are not provided by csx"
                    ),
                )
            }
            ArgDesc::Other(other) => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("argument {i}: Type {other} is not a CS_COMPUTE_ARG_TYPE"),
                )
            }
        };
        if values.len() < 2 {
            values.push(v);
        } else {
            params.extend_from_slice(&bytes);
            if params.len() > PARAMS_SIZE_MAX {
                return fail(
                    CS_INVALID_LENGTH,
                    format!("argument {i}: value arguments past the second exceed {PARAMS_SIZE_MAX} bytes"),
                );
            }
        }
    }
    request = request.cparams(
        values.first().copied().unwrap_or(0),
        values.get(1).copied().unwrap_or(0),
    );
    if !params.is_empty() {
        request = request.params(params);
    }
    Ok(Op::Compute {
        request: with_limits(&dev, request),
        dev,
        handle,
        csf,
    })
}

/// The device's own time limit (device.json) bounds a request that names none; fuel is
/// left to it too unless csxSetComputeLimits set one, so a long CSF runs until the
/// device's time limit rather than a fixed instruction budget.
fn with_limits(dev: &Dev, request: ExecuteRequest) -> ExecuteRequest {
    let fuel = dev.fuel.load(Ordering::Relaxed);
    let request = request.fuel(if fuel > 0 { fuel } else { FUEL_MAX });
    match dev.time_limit_ms.load(Ordering::Relaxed) {
        0 => request,
        ms => request.time_limit_ms(ms),
    }
}

/// Runs a queued request on its worker (see [`crate::queue`]).
pub fn perform(work: &Work, req: &Request) -> R<u64> {
    if !matches!(work.op, Op::Compute { .. }) {
        req.start()?;
    }
    run_work(work, Some(req))
}

/// Runs `work`; `req` is the queued request it belongs to (for aborts), if any. A
/// mapped allocation needs nothing around it: its mapping is the device memory.
fn run_work(work: &Work, req: Option<&Request>) -> R<u64> {
    run_op(&work.op, req)
}

fn run_op(op: &Op, req: Option<&Request>) -> R<u64> {
    match op {
        Op::Copy {
            dev,
            mem,
            offset,
            host,
            len,
            to_device,
        } => run_copy(dev, *mem, *offset, *host, *len, *to_device),
        Op::FileLoad {
            dev,
            path,
            offset,
            bytes,
            mem,
            mem_offset,
        } => Ok(dev
            .device
            .copy_file_to_mem(path, *offset, *bytes, *mem, *mem_offset)?),
        Op::FileStore {
            dev,
            path,
            offset,
            range,
        } => Ok(dev.device.write_mem_to_file(path, *offset, *range)?),
        Op::BlockLoad {
            dev,
            mem,
            mem_offset,
            sources,
        } => Ok(dev.device.copy_to_mem(*mem, *mem_offset, sources.clone())?),
        Op::Fill {
            dev,
            mem,
            offset,
            bytes,
            byte,
        } => {
            dev.device.fill_mem(*mem, *offset, *bytes, *byte)?;
            Ok(*bytes)
        }
        Op::Compute {
            dev,
            handle,
            request,
            csf,
        } => run_compute((dev, handle), request, *csf, req),
        Op::Batch { entries } => run_batch(entries, req),
    }
}

/// A copy between the caller's `host` buffer and device memory.
fn run_copy(
    dev: &Dev,
    mem: DevMemHandle,
    offset: u64,
    host: usize,
    len: usize,
    to_device: bool,
) -> R<u64> {
    if to_device {
        // SAFETY: HostVAddress is readable for Bytes bytes until the request completes
        // (the caller's contract).
        let src = unsafe { std::slice::from_raw_parts(host as *const u8, len) };
        dev.device.write_mem(mem, offset, src)?;
    } else {
        // SAFETY: HostVAddress is writable for Bytes bytes until the request completes
        // (the caller's contract).
        let dst = unsafe { std::slice::from_raw_parts_mut(host as *mut u8, len) };
        dev.device.read_mem_into(mem, offset, dst)?;
    }
    Ok(len as u64)
}

/// An execution, submitted through the handle's session and waited for outside its
/// lock (queued: recorded so that `csAbortRequest` can reach it); a trap is
/// `CS_ERROR_IN_EXECUTION` naming it. A fixed id whose remembered program left its
/// slot meanwhile (the slot is empty, holds a program not activated, or holds another
/// program: the device refuses a run naming a generation the slot no longer holds) is
/// looked up again and run once more.
fn run_compute(
    (dev, handle): (&Arc<Dev>, &Arc<Handle>),
    request: &ExecuteRequest,
    csf: CsCsfId,
    req: Option<&Request>,
) -> R<u64> {
    let result = match execute(dev, handle, request, req)? {
        Err(SessionError::Device {
            source:
                CallError::NoProgram(_)
                | CallError::ProgramNotActivated(_)
                | CallError::ProgramChanged(_),
            ..
        }) if crate::fixed::is_fixed(csf) => {
            handle.forget_slot(request.pind);
            let again = aimed(request.clone(), slot_of_csf(dev, handle, csf)?);
            execute(dev, handle, &again, req)?
        }
        other => other,
    };
    match result {
        Ok(run) => Ok(run.r0),
        Err(SessionError::Trap { trap, .. }) => {
            fail(CS_ERROR_IN_EXECUTION, format!("CSF {csf} trapped: {trap}"))
        }
        Err(e) => Err(Fail::from(e)),
    }
}

/// One execution on the handle's session: submitted under its lock, waited for outside.
/// The outer error: a queued request aborted before it started.
fn execute(
    dev: &Arc<Dev>,
    handle: &Handle,
    request: &ExecuteRequest,
    req: Option<&Request>,
) -> R<Result<csx_host::Execution, SessionError>> {
    let submit = || handle.session().submit_execute(request);
    let submitted = match req {
        None => submit(),
        Some(q) => q.start_exec(dev, submit)?,
    };
    let run = match submitted {
        Ok(run) => run,
        Err(e) => return Ok(Err(e)),
    };
    let result = run.wait_on(&dev.device);
    if let Some(q) = req {
        q.end_exec();
    }
    Ok(handle.session().finish_submitted(run, result))
}

/// A batch's entries in order, stopping at the first failure or an abort.
fn run_batch(entries: &[(usize, Desc)], req: Option<&Request>) -> R<u64> {
    for (done, (i, entry)) in entries.iter().enumerate() {
        if req.is_some_and(Request::aborted) {
            return fail(
                CSX_ABORTED,
                format!("the batch was aborted after {done} entries"),
            );
        }
        prepare(entry)
            .and_then(|w| run_work(&w, req))
            .map_err(|e| Fail {
                status: e.status,
                message: format!("entry {i}: {}", e.message),
            })?;
    }
    Ok(entries.len() as u64)
}

/// The device a single request's work runs on.
pub(crate) fn work_device(work: &Work) -> Arc<Dev> {
    match &work.op {
        Op::Copy { dev, .. }
        | Op::FileLoad { dev, .. }
        | Op::FileStore { dev, .. }
        | Op::BlockLoad { dev, .. }
        | Op::Fill { dev, .. }
        | Op::Compute { dev, .. } => Arc::clone(dev),
        Op::Batch { .. } => unreachable!("a batch is not a single request"),
    }
}

/// Queues (or runs) a single request described by `desc`.
///
/// # Safety
/// `req_handle` null or writable; the completion's pointers as for [`Completion`].
pub(crate) unsafe fn submit(
    name: &'static str,
    desc: &Desc,
    done: Completion,
    req_handle: *mut CsReqHandle,
) -> R<CsStatus> {
    let work = prepare(desc)?;
    let kind = if matches!(work.op, Op::Compute { .. }) {
        Kind::Compute
    } else {
        Kind::Transfer
    };
    let dev = work_device(&work);
    // SAFETY: the caller's contract.
    unsafe { dispatch(name, &dev.worker, kind, work, done, req_handle) }
}

// -------------------------------------------------------------------------------------
// Open and close: one device per process.

/// Serializes the find-or-open of [`csOpenCSx`], so two threads opening one name share it.
static OPENING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The name two opens of one device share: a state directory's canonical path, else the
/// URI as given.
fn canonical_name(name: &str) -> String {
    match DeviceUri::parse(name) {
        Ok(DeviceUri::Embedded(path)) => std::fs::canonicalize(&path)
            .ok()
            .and_then(|p| p.to_str().map(str::to_string))
            .unwrap_or_else(|| name.to_string()),
        Ok(DeviceUri::Array(path)) => std::fs::canonicalize(&path)
            .ok()
            .and_then(|p| p.to_str().map(|p| format!("array:{p}")))
            .unwrap_or_else(|| name.to_string()),
        _ => name.to_string(),
    }
}

/// Opens a device for `name`, or shares the one this process already has open under it.
pub(crate) fn open_shared(name: &str) -> R<u64> {
    let _one = OPENING.lock().unwrap_or_else(|p| p.into_inner());
    let canonical = canonical_name(name);
    let open = registry::with(|r| r.devices.values().find(|d| d.name == canonical).cloned());
    let dev = match open {
        Some(d) => d,
        None => {
            let device = csx_array::open(name).or_else(|e| fail(open_status(&e), e.to_string()))?;
            Arc::new(Dev::new(canonical, device))
        }
    };
    let handle = Arc::new(Handle::new(&dev));
    Ok(registry::with(|r| {
        let key = r.key();
        r.devices.insert(key, dev);
        r.handles.insert(key, handle);
        key
    }))
}

/// Opens the device `DevName` (a csx URI: a state directory, `shm://NAME` or
/// `tcp://HOST:PORT`). A device already open in this process is shared: the new handle
/// names the same device (memory allocated through one handle is usable with the other).
/// `DevContext` is unused.
///
/// # Safety
/// `DevName` is null or a NUL-terminated string; `DevHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csOpenCSx(
    DevName: *const c_char,
    DevContext: *mut c_void,
    DevHandle: *mut CsDevHandle,
) -> CsStatus {
    let _ = DevContext;
    run("csOpenCSx", || {
        // SAFETY: the caller's contract.
        let name = unsafe { string(DevName, "DevName") }?;
        // SAFETY: the caller's contract.
        let handle = unsafe { out(DevHandle, "DevHandle") }?;
        *handle = handle_of(open_shared(name)?);
        Ok(CS_SUCCESS)
    })
}

/// Closes a device handle: the allocations made through it are freed and it becomes
/// invalid. When it is the device's last handle in the process, requests queued on the
/// device are aborted: each still queued completes with CSX_ABORTED, a running execution
/// is aborted, a running transfer finishes; the call returns once every callback of the
/// device has returned (called from inside one of them, it returns at once and the rest
/// follow after that callback).
#[no_mangle]
pub extern "C" fn csCloseCSx(DevHandle: CsDevHandle) -> CsStatus {
    run("csCloseCSx", || close_handle(DevHandle))
}

pub(crate) fn close_handle(handle: CsDevHandle) -> R<CsStatus> {
    device(handle)?;
    let key = key_of(handle);
    let (dev, handle, last) = registry::with(|r| {
        r.mems.retain(|_, m| m.dev != key);
        let dev = r.devices.remove(&key);
        let last = dev
            .as_ref()
            .is_some_and(|d| !r.devices.values().any(|o| Arc::ptr_eq(o, d)));
        (dev, r.handles.remove(&key), last)
    });
    let (Some(dev), Some(handle)) = (dev, handle) else {
        return fail(
            CS_INVALID_HANDLE,
            format!("device handle {key} is not open"),
        );
    };
    if last {
        dev.worker.shutdown();
    }
    // The handle's session frees its memory (the device stays open for its other
    // handles, or closes below).
    let _ = handle.release();
    drop(handle);
    if !last {
        return Ok(CS_SUCCESS);
    }
    // Another thread in a call on it (or a batch using it) keeps it alive: the last one
    // out closes the connection when it drops it.
    if let Some(device) = Arc::try_unwrap(dev)
        .ok()
        .and_then(|dev| Arc::try_unwrap(dev.device).ok())
    {
        device.close()?;
    }
    Ok(CS_SUCCESS)
}

// -------------------------------------------------------------------------------------
// Device memory.

fn init_value(flags: Option<&CsMemFlags>) -> R<Option<u8>> {
    let Some(f) = flags else { return Ok(None) };
    if f.fdm_id != 0 {
        return fail(
            CS_INVALID_ID,
            format!(
                "FDMId {} is not a memory namespace of a csx device (only 0)",
                f.fdm_id
            ),
        );
    }
    match f.flags {
        0 => Ok(None),
        CS_FDM_CLEAR => Ok(Some(0)),
        CS_FDM_FILL => u8::try_from(f.fill_value).map(Some).or_else(|_| {
            fail(
                CS_INVALID_ARG,
                format!("FillValue {} is not a byte (0..=255)", f.fill_value),
            )
        }),
        other => fail(
            CS_INVALID_OPTION,
            format!("MemFlags.Flags {other} is not 0, CS_FDM_CLEAR (1) or CS_FDM_FILL (2)"),
        ),
    }
}

/// Whether a device's transport can map its memory into this process (all but tcp/tcps:
/// a device on another machine shares no pages with it).
pub(crate) fn can_map(dev: &Dev) -> bool {
    !matches!(
        dev.device.uri(),
        DeviceUri::Tcp { .. } | DeviceUri::Tcps { .. }
    )
}

/// The page size mapped allocations are rounded up to.
const MAP_PAGE: u64 = 4096;

/// A shared mapping of allocation `handle` (`len` bytes, whole pages): its memory file
/// from the device, mapped; `CS_COULD_NOT_MAP_MEMORY` naming why not.
fn map_allocation(dev: &Dev, handle: DevMemHandle, len: u64) -> R<Mapping> {
    let cannot = |why: String| Fail {
        status: CS_COULD_NOT_MAP_MEMORY,
        message: format!(
            "{}: cannot map {len} bytes of device memory: {why}",
            dev.name
        ),
    };
    let file = dev
        .device
        .client()
        .share_mem(handle)
        .map_err(|e| cannot(e.to_string()))?;
    Mapping::of_file(&file, len as usize).map_err(|e| cannot(e.to_string()))
}

/// Allocates `Bytes` of device memory. `MemFlags` (nullable) may ask for it cleared or
/// filled. With `VAddressPtr` non-null, `*VAddressPtr` receives a host mapping of it
/// (the device memory itself, see `docs/capi.md`) on an embedded or shm device; a tcp
/// device cannot map (CS_COULD_NOT_MAP_MEMORY, nothing allocated).
///
/// # Safety
/// `MemFlags` is null or readable; `MemHandle` and `VAddressPtr` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn csAllocMem(
    DevHandle: CsDevHandle,
    Bytes: c_int,
    MemFlags: *const CsMemFlags,
    MemHandle: *mut CsMemHandle,
    VAddressPtr: *mut *mut c_void,
) -> CsStatus {
    // SAFETY: forwarded contract.
    run("csAllocMem", || unsafe {
        alloc_mem(DevHandle, Bytes, MemFlags.as_ref(), MemHandle, VAddressPtr)
    })
}

/// `Bytes` of an allocation, checked.
fn alloc_size(bytes: c_int) -> R<u64> {
    match u64::try_from(bytes) {
        Ok(size) if (1..=SLM_ALLOC_SIZE_MAX).contains(&size) => Ok(size),
        _ => fail(
            CS_INVALID_LENGTH,
            format!("Bytes {bytes} is not within 1..={SLM_ALLOC_SIZE_MAX}"),
        ),
    }
}

/// # Safety
/// `handle_out` and `vaddr` are null or writable.
pub(crate) unsafe fn alloc_mem(
    dev_handle: CsDevHandle,
    bytes: c_int,
    flags: Option<&CsMemFlags>,
    handle_out: *mut CsMemHandle,
    vaddr: *mut *mut c_void,
) -> R<CsStatus> {
    let (dev, session) = device_and_handle(dev_handle)?;
    // SAFETY: the caller's contract.
    let handle_out = unsafe { out(handle_out, "MemHandle") }?;
    let init = init_value(flags)?;
    let size = alloc_size(bytes)?;
    // SAFETY: the caller's contract.
    let vaddr = unsafe { vaddr.as_mut() };
    if vaddr.is_some() && !can_map(&dev) {
        return fail(
            CS_COULD_NOT_MAP_MEMORY,
            format!("{}: a tcp device's memory cannot be mapped into this process (pass VAddressPtr NULL and copy with csQueueCopyMemRequest)", dev.name),
        );
    }
    // A mapped allocation holds whole pages, so that its memory file holds it alone.
    let reserve = if vaddr.is_some() {
        size.next_multiple_of(MAP_PAGE)
    } else {
        size
    };
    let dev_key = key_of(dev_handle);
    let handle = session.session().alloc(reserve)?;
    let init_device = || -> R<Option<Arc<Mapping>>> {
        if let Some(byte) = init {
            dev.device.fill_mem(handle, 0, size, byte)?;
        }
        if vaddr.is_none() {
            return Ok(None);
        }
        map_allocation(&dev, handle, reserve).map(|m| Some(Arc::new(m)))
    };
    let map = match init_device() {
        Ok(m) => m,
        Err(e) => {
            let _ = session.session().free(handle);
            return Err(e);
        }
    };
    let addr = map.as_ref().map(|m| m.addr());
    let key = registry::with(|r| {
        let key = r.key();
        r.mems.insert(
            key,
            Mem {
                dev: dev_key,
                handle,
                size,
                map,
            },
        );
        key
    });
    *handle_out = handle_of(key);
    if let (Some(v), Some(a)) = (vaddr, addr) {
        *v = a;
    }
    Ok(CS_SUCCESS)
}

/// Frees device memory (after clearing or filling it when `MemFlags` asks); the handle
/// becomes invalid and its host mapping is unmapped once no request uses it (a later
/// access through it faults in the caller, never in the device).
///
/// # Safety
/// `MemFlags` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn csFreeMem(
    MemHandle: CsMemHandle,
    MemFlags: *const CsMemFlags,
) -> CsStatus {
    run("csFreeMem", || {
        // SAFETY: the caller's contract: MemFlags is null or readable.
        let flags = unsafe { MemFlags.as_ref() };
        free_mem(MemHandle, flags)
    })
}

pub(crate) fn free_mem(handle: CsMemHandle, flags: Option<&CsMemFlags>) -> R<CsStatus> {
    let init = init_value(flags)?;
    let (m, dev) = memory(handle)?;
    if let Some(byte) = init {
        dev.device.fill_mem(m.handle, 0, m.size, byte)?;
    }
    handle_state(m.dev)?.session().free(m.handle)?;
    registry::with(|r| r.mems.remove(&key_of(handle)));
    Ok(CS_SUCCESS)
}

/// Sets `Bytes` from `ByteOffset` of an allocation: zero, or `MemFlags->FillValue` with
/// `CS_FDM_FILL`. `MemFlags` NULL means zero.
///
/// # Safety
/// `MemFlags` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn csInitMem(
    MemHandle: CsMemHandle,
    ByteOffset: std::ffi::c_ulong,
    Bytes: c_int,
    MemFlags: *const CsMemFlags,
) -> CsStatus {
    run("csInitMem", || {
        // SAFETY: the caller's contract.
        let byte = init_value(unsafe { MemFlags.as_ref() })?.unwrap_or(0);
        let bytes = u64::try_from(Bytes)
            .or_else(|_| fail(CS_INVALID_LENGTH, format!("Bytes {Bytes} is negative")))?;
        let offset: u64 = ByteOffset;
        let (m, dev) = afdm(MemHandle, offset, bytes, "csInitMem")?;
        let work = Work {
            op: Op::Fill {
                dev,
                mem: m.handle,
                offset,
                bytes,
                byte,
            },
        };
        run_work(&work, None)?;
        Ok(CS_SUCCESS)
    })
}

// -------------------------------------------------------------------------------------
// Data movement and compute.

/// Copies `Bytes` between host memory and device memory. The completion value is the
/// bytes copied.
///
/// # Safety
/// `Req` is null or readable, and its `HostVAddress` valid for `Bytes` bytes (readable
/// for CS_COPY_TO_DEVICE, writable for CS_COPY_FROM_DEVICE) until the request completes;
/// `ReqHandle` is null or writable; `CompValue` is null or writable until the request
/// completes.
#[no_mangle]
pub unsafe extern "C" fn csQueueCopyMemRequest(
    Req: *const CsCopyMemRequest,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    ReqHandle: *mut CsReqHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csQueueCopyMemRequest";
    run(NAME, || {
        // SAFETY: the caller's contract.
        let req = unsafe { inp(Req, "Req") }?;
        let done =
            Completion::checked(Context, Callback.into(), EventHandle, Value::u64(CompValue))?;
        // SAFETY: the caller's contract.
        unsafe { submit(NAME, &copy_desc(req), done, ReqHandle) }
    })
}

/// Moves data between storage and device memory: file I/O (a file handle from
/// `csxOpenFile`) or block I/O (LBAs of CSX_BLOCK_SIZE bytes of the NVM namespace; LOAD
/// only). The completion value is the bytes moved.
///
/// # Safety
/// `Req` is null or readable, its union member the one `Mode` names (block I/O with
/// `NumRanges` ranges inline); `ReqHandle` is null or writable; `CompValue` is null or
/// writable until the request completes.
#[no_mangle]
pub unsafe extern "C" fn csQueueStorageRequest(
    Req: *const CsStorageRequest,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    ReqHandle: *mut CsReqHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csQueueStorageRequest";
    run(NAME, || {
        let done =
            Completion::checked(Context, Callback.into(), EventHandle, Value::u64(CompValue))?;
        // SAFETY: the caller's contract.
        let desc = unsafe { storage_desc(Req) }?;
        // SAFETY: the caller's contract.
        unsafe { submit(NAME, &desc, done, ReqHandle) }
    })
}

/// Runs the CSF `Req->CSFId`. AFDM arguments become the program's windows 0, 1, ... (from
/// `ByteOffset` to the allocation's end); the first two value arguments become cparam1
/// and cparam2, further ones the params bytes (little-endian, 4 or 8 bytes each). The
/// completion value is the program's r0; a trap is CS_ERROR_IN_EXECUTION.
///
/// # Safety
/// `Req` is null or readable with `NumArgs` arguments from `Args` (read before the call
/// returns); `CompValue` is null or writable until the request completes.
#[no_mangle]
pub unsafe extern "C" fn csQueueComputeRequest(
    Req: *const CsComputeRequest,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csQueueComputeRequest";
    run(NAME, || {
        let done =
            Completion::checked(Context, Callback.into(), EventHandle, Value::u64(CompValue))?;
        // SAFETY: the caller's contract.
        let desc = unsafe { compute_desc(Req) }?;
        // SAFETY: no request handle is asked for.
        unsafe { submit(NAME, &desc, done, std::ptr::null_mut()) }
    })
}

/// csx extension: `csQueueComputeRequest` with a request handle for `csAbortRequest`.
///
/// # Safety
/// As `csQueueComputeRequest`; `ReqHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csxQueueComputeRequest(
    Req: *const CsComputeRequest,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    ReqHandle: *mut CsReqHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csxQueueComputeRequest";
    run(NAME, || {
        let done =
            Completion::checked(Context, Callback.into(), EventHandle, Value::u64(CompValue))?;
        // SAFETY: the caller's contract.
        let desc = unsafe { compute_desc(Req) }?;
        // SAFETY: the caller's contract.
        unsafe { submit(NAME, &desc, done, ReqHandle) }
    })
}

/// Sets one compute argument (variadic: the body is C, `src/helper.c`). This symbol jumps
/// to it with the caller's registers and stack untouched, so the variable arguments
/// arrive as the caller passed them.
#[cfg(target_arch = "x86_64")]
// SAFETY: the body is one tail jump; it touches no register, flag or stack slot, so the C
// function receives exactly the caller's arguments, variadic ones included, and returns
// to the caller itself.
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn csHelperSetComputeArg() {
    core::arch::naked_asm!("jmp {}", sym csx_set_compute_arg_impl)
}

/// As on x86-64.
#[cfg(target_arch = "aarch64")]
// SAFETY: as on x86-64: one branch, with the link register and the stack untouched.
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn csHelperSetComputeArg() {
    core::arch::naked_asm!("b {}", sym csx_set_compute_arg_impl)
}

extern "C" {
    /// `src/helper.c`.
    fn csx_set_compute_arg_impl(arg: *mut CsComputeArg, ty: i32, ...);
}

/// Aborts a queued request (one queued with a callback or an event and a request
/// handle): still queued, it completes with CSX_ABORTED without running; a running
/// compute request is stopped by the device's Abort and completes with CSX_ABORTED; a
/// running batch runs no further entry and completes with CSX_ABORTED. After CS_SUCCESS
/// the handle is no longer valid. A running data transfer is not stopped
/// (CS_HANDLE_IN_USE: it completes with its own status; see `docs/capi.md` for why); a
/// completed, already aborted or unknown request is CS_INVALID_HANDLE.
#[no_mangle]
pub extern "C" fn csAbortRequest(ReqHandle: CsReqHandle) -> CsStatus {
    run("csAbortRequest", || {
        if ReqHandle.is_null() {
            return fail(CS_INVALID_HANDLE, "the request handle is NULL");
        }
        let key = key_of(ReqHandle);
        let Some(req) = registry::with(|r| r.requests.get(&key).cloned()) else {
            return fail(
                CS_INVALID_HANDLE,
                format!(
                    "request handle {key} is not in flight (completed, aborted, or never queued)"
                ),
            );
        };
        crate::queue::abort(&req)
    })
}

/// A csx extension: the fuel budget and time limit (milliseconds) of the compute
/// requests made on this device from now on; 0 keeps the device's default (its time
/// limit from `device.json`, no separate fuel budget).
#[no_mangle]
pub extern "C" fn csxSetComputeLimits(
    DevHandle: CsDevHandle,
    Fuel: u64,
    TimeLimitMs: u32,
) -> CsStatus {
    run("csxSetComputeLimits", || {
        let dev = device(DevHandle)?;
        if Fuel > FUEL_MAX {
            return fail(
                CS_INVALID_LENGTH,
                format!("Fuel {Fuel} is over the protocol's limit {FUEL_MAX}"),
            );
        }
        if TimeLimitMs > TIME_LIMIT_MS_MAX {
            return fail(
                CS_INVALID_LENGTH,
                format!(
                    "TimeLimitMs {TimeLimitMs} is over the protocol's limit {TIME_LIMIT_MS_MAX}"
                ),
            );
        }
        dev.fuel.store(Fuel, Ordering::Relaxed);
        dev.time_limit_ms.store(TimeLimitMs, Ordering::Relaxed);
        Ok(CS_SUCCESS)
    })
}

/// A csx extension: a file handle for `CsFileIo.FileHandle`, naming `Path` in the
/// device's file store (the file need not exist yet: a STORE creates it). Any device's
/// requests may use it; `csxCloseFile` releases it.
///
/// # Safety
/// `Path` is null or a string; `FileHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csxOpenFile(
    DevHandle: CsDevHandle,
    Path: *const c_char,
    FileHandle: *mut *mut c_void,
) -> CsStatus {
    run("csxOpenFile", || {
        device(DevHandle)?;
        // SAFETY: the caller's contract.
        let path = unsafe { string(Path, "Path") }?.to_string();
        // SAFETY: the caller's contract.
        let out = unsafe { out(FileHandle, "FileHandle") }?;
        let key = registry::with(|r| {
            let key = r.key();
            r.files.insert(key, path);
            key
        });
        *out = handle_of(key);
        Ok(CS_SUCCESS)
    })
}

/// A csx extension: releases a file handle of `csxOpenFile`.
#[no_mangle]
pub extern "C" fn csxCloseFile(FileHandle: *mut c_void) -> CsStatus {
    run("csxCloseFile", || {
        let key = key_of(FileHandle);
        match registry::with(|r| r.files.remove(&key)) {
            Some(_) if key != 0 => Ok(CS_SUCCESS),
            _ => fail(CS_INVALID_HANDLE, format!("file handle {key} is not open")),
        }
    })
}

// -------------------------------------------------------------------------------------
// Events and errors.

/// Creates an event for requests to signal.
///
/// # Safety
/// `EventHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csCreateEvent(EventHandle: *mut CsEvtHandle) -> CsStatus {
    run("csCreateEvent", || {
        // SAFETY: the caller's contract.
        let h = unsafe { out(EventHandle, "EventHandle") }?;
        let key = registry::with(|r| {
            let key = r.key();
            r.events.insert(key, Event::default());
            key
        });
        *h = handle_of(key);
        Ok(CS_SUCCESS)
    })
}

/// The status of the request that last signalled the event, consuming it; CS_NOT_DONE
/// when nothing signalled it since. `Context` (nullable) is a `void **` that receives
/// the request's context. After a failed request's status, csxGetLastError names its
/// failure.
///
/// # Safety
/// `Context` is null or a writable `void *`.
#[no_mangle]
pub unsafe extern "C" fn csPollEvent(EventHandle: CsEvtHandle, Context: *mut c_void) -> CsStatus {
    run("csPollEvent", || {
        let key = key_of(EventHandle);
        let done = registry::with(|r| r.events.get_mut(&key).map(|e| e.done.take()));
        match done {
            None => fail(
                CS_INVALID_EVENT,
                format!("event handle {key} is not created"),
            ),
            Some(None) => Ok(CS_NOT_DONE),
            Some(Some((status, ctx, message))) => {
                // SAFETY: the caller's contract.
                if let Some(c) = unsafe { Context.cast::<*mut c_void>().as_mut() } {
                    *c = ctx as *mut c_void;
                }
                if status != CS_SUCCESS {
                    set_last_error(&message);
                }
                Ok(status)
            }
        }
    })
}

/// Deletes an event.
#[no_mangle]
pub extern "C" fn csDeleteEvent(EventHandle: CsEvtHandle) -> CsStatus {
    run("csDeleteEvent", || {
        let key = key_of(EventHandle);
        match registry::with(|r| r.events.remove(&key)) {
            Some(_) => Ok(CS_SUCCESS),
            None => fail(
                CS_INVALID_EVENT,
                format!("event handle {key} is not created"),
            ),
        }
    })
}

/// The message of this thread's last failed call (names the bad value and the limit);
/// valid until this thread's next call into the library.
#[no_mangle]
pub extern "C" fn csxGetLastError() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

// -------------------------------------------------------------------------------------
// Batches: a dependency graph run in one topological order.

fn batch_key(h: CsBatchHandle) -> R<u64> {
    let key = key_of(h);
    if !h.is_null() && registry::with(|r| r.batches.contains_key(&key)) {
        Ok(key)
    } else {
        fail(
            CS_INVALID_HANDLE,
            format!("batch handle {key} is not allocated"),
        )
    }
}

fn max_reqs(n: c_int) -> R<usize> {
    if (1..=CSX_BATCH_ENTRIES_MAX).contains(&n) {
        Ok(n as usize)
    } else {
        fail(
            CS_INVALID_LENGTH,
            format!("MaxReqs {n} is not within 1..={CSX_BATCH_ENTRIES_MAX}"),
        )
    }
}

/// Allocates a batch of at most `MaxReqs` entries. Every mode runs the entries one at a
/// time in an order that respects every edge (a valid schedule of each mode).
///
/// # Safety
/// `BatchHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csAllocBatchRequest(
    Mode: i32,
    MaxReqs: c_int,
    BatchHandle: *mut CsBatchHandle,
) -> CsStatus {
    run("csAllocBatchRequest", || {
        // SAFETY: the caller's contract.
        let h = unsafe { out(BatchHandle, "BatchHandle") }?;
        if !matches!(Mode, CS_BATCH_SERIAL | CS_BATCH_PARALLEL | CS_BATCH_HYBRID) {
            return fail(
                CS_INVALID_OPTION,
                format!("Mode {Mode} is not a CS_BATCH_MODE (1..=3)"),
            );
        }
        let max = max_reqs(MaxReqs)?;
        let key = registry::with(|r| {
            let key = r.key();
            r.batches.insert(
                key,
                crate::registry::Batch {
                    max,
                    ..Default::default()
                },
            );
            key
        });
        *h = handle_of(key);
        Ok(CS_SUCCESS)
    })
}

/// A batch entry, copied: its request read by type, `reqLength` (when not 0) checked to
/// cover what was read.
///
/// # Safety
/// `req` is null or a readable entry whose union holds the request `ReqType` names.
pub(crate) unsafe fn batch_desc(req: *const CsBatchRequest) -> R<Desc> {
    // SAFETY: the caller's contract.
    let r = unsafe { inp(req, "Req") }?;
    let head = std::mem::offset_of!(CsBatchRequest, u);
    let (desc, need) = match r.req_type {
        // SAFETY: ReqType says the union holds CopyMem.
        CS_COPY_AFDM => (
            copy_desc(unsafe { &r.u.copy_mem }),
            head + std::mem::size_of::<CsCopyMemRequest>(),
        ),
        CS_STORAGE_IO => {
            // SAFETY: ReqType says the union holds StorageIo (the caller's contract).
            let d = unsafe { storage_desc(std::ptr::addr_of!((*req).u.storage_io)) }?;
            let extra = match &d {
                Desc::Block { ranges, .. } => (ranges.len() - 1) * std::mem::size_of::<CsBlockRange>(),
                _ => 0,
            };
            (d, head + std::mem::size_of::<CsStorageRequest>() + extra)
        }
        CS_QUEUE_COMPUTE => {
            // SAFETY: ReqType says the union holds Compute (the caller's contract).
            let d = unsafe { compute_desc(std::ptr::addr_of!((*req).u.compute)) }?;
            let n = match &d {
                Desc::Compute { args, .. } => args.len().max(1),
                _ => 1,
            };
            (
                d,
                head + std::mem::offset_of!(CsComputeRequest, args)
                    + n * std::mem::size_of::<CsComputeArg>(),
            )
        }
        other => {
            return fail(
                CS_INVALID_OPTION,
                format!("ReqType {other} is not CS_COPY_AFDM (1), CS_STORAGE_IO (2) or CS_QUEUE_COMPUTE (3)"),
            )
        }
    };
    if r.req_length != 0 && (r.req_length as usize) < need {
        return fail(
            CS_INVALID_LENGTH,
            format!(
                "reqLength {} is shorter than the {need} bytes the entry holds",
                r.req_length
            ),
        );
    }
    Ok(desc)
}

/// Adds an entry (copied: the caller's structure may be reused at once) that runs
/// before entry `Before` and after entry `After` (either CSX_BATCH_INDEX_NONE);
/// `*Curr` (nullable) receives its index.
///
/// # Safety
/// `Req` is null or readable; `Curr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csAddBatchEntry(
    BatchHandle: CsBatchHandle,
    Req: *const CsBatchRequest,
    Before: CsBatchIndex,
    After: CsBatchIndex,
    Curr: *mut CsBatchIndex,
) -> CsStatus {
    run("csAddBatchEntry", || {
        // SAFETY: the caller's contract.
        let desc = unsafe { batch_desc(Req) }?;
        // SAFETY: the caller's contract.
        unsafe { add_entry(BatchHandle, desc, Before, After, Curr) }
    })
}

/// # Safety
/// `curr` is null or writable.
pub(crate) unsafe fn add_entry(
    batch: CsBatchHandle,
    desc: Desc,
    before: CsBatchIndex,
    after: CsBatchIndex,
    curr: *mut CsBatchIndex,
) -> R<CsStatus> {
    let key = batch_key(batch)?;
    let index = registry::with(|r| -> R<usize> {
        let b = r.batches.get_mut(&key).ok_or(Fail {
            status: CS_INVALID_HANDLE,
            message: "batch freed".into(),
        })?;
        let n = b.entries.len();
        if n >= b.max {
            return fail(
                CS_OUT_OF_RESOURCES,
                format!("the batch is full ({} entries)", b.max),
            );
        }
        let edge = |i: u32, what: &str| -> R<Option<usize>> {
            match i {
                CSX_BATCH_INDEX_NONE => Ok(None),
                i if (i as usize) < n => Ok(Some(i as usize)),
                i => fail(
                    CS_INVALID_ID,
                    format!("{what} {i} is not an entry (0..{n})"),
                ),
            }
        };
        let before = edge(before, "Before")?;
        let after = edge(after, "After")?;
        b.entries.push(desc);
        if let Some(a) = after {
            b.edges.push((a, n));
        }
        if let Some(bf) = before {
            b.edges.push((n, bf));
        }
        Ok(n)
    })?;
    // SAFETY: the caller's contract.
    if let Some(c) = unsafe { curr.as_mut() } {
        *c = index as CsBatchIndex;
    }
    Ok(CS_SUCCESS)
}

/// Replaces entry `Entry`'s request (its edges stay).
///
/// # Safety
/// `Req` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn csHelperReconfigureBatchEntry(
    BatchHandle: CsBatchHandle,
    Entry: CsBatchIndex,
    Req: *const CsBatchRequest,
) -> CsStatus {
    run("csHelperReconfigureBatchEntry", || {
        let key = batch_key(BatchHandle)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { batch_desc(Req) }?;
        registry::with(|r| {
            let b = r.batches.get_mut(&key).ok_or(Fail {
                status: CS_INVALID_HANDLE,
                message: "batch freed".into(),
            })?;
            let n = b.entries.len();
            match b.entries.get_mut(Entry as usize) {
                Some(e) => {
                    *e = desc;
                    Ok(CS_SUCCESS)
                }
                None => fail(
                    CS_INVALID_ID,
                    format!("Entry {Entry} is not an entry (0..{n})"),
                ),
            }
        })
    })
}

/// Changes a batch's capacity (not below its entries).
#[no_mangle]
pub extern "C" fn csHelperResizeBatchRequest(
    BatchHandle: CsBatchHandle,
    MaxReqs: c_int,
) -> CsStatus {
    run("csHelperResizeBatchRequest", || {
        let key = batch_key(BatchHandle)?;
        let max = max_reqs(MaxReqs)?;
        registry::with(|r| {
            let b = r.batches.get_mut(&key).ok_or(Fail {
                status: CS_INVALID_HANDLE,
                message: "batch freed".into(),
            })?;
            if max < b.entries.len() {
                return fail(
                    CS_INVALID_LENGTH,
                    format!(
                        "MaxReqs {max} is below the batch's {} entries",
                        b.entries.len()
                    ),
                );
            }
            b.max = max;
            Ok(CS_SUCCESS)
        })
    })
}

/// Entries in an order that respects every edge, or the entries on a cycle.
fn schedule(n: usize, edges: &[(usize, usize)]) -> Result<Vec<usize>, Vec<usize>> {
    let mut indegree = vec![0usize; n];
    for &(_, b) in edges {
        indegree[b] += 1;
    }
    let mut ready: std::collections::VecDeque<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &(a, b) in edges {
            if a == i {
                indegree[b] -= 1;
                if indegree[b] == 0 {
                    ready.push_back(b);
                }
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err((0..n).filter(|i| indegree[*i] > 0).collect())
    }
}

/// Queues (or runs) a batch.
///
/// # Safety
/// `req_handle` null or writable; the completion's pointers as for [`Completion`].
pub(crate) unsafe fn queue_batch(
    name: &'static str,
    batch: CsBatchHandle,
    done: Completion,
    req_handle: *mut CsReqHandle,
) -> R<CsStatus> {
    let key = batch_key(batch)?;
    let (entries, edges) = registry::with(|r| {
        let b = &r.batches[&key];
        (b.entries.clone(), b.edges.clone())
    });
    if entries.is_empty() {
        return fail(CS_INVALID_LENGTH, "the batch has no entries");
    }
    let order = schedule(entries.len(), &edges).or_else(|cycle| {
        fail(
            CS_INVALID_ARG,
            format!("entries {cycle:?} are on a dependency cycle"),
        )
    })?;
    let entries = order.into_iter().map(|i| (i, entries[i].clone())).collect();
    let work = Work {
        op: Op::Batch { entries },
    };
    // SAFETY: the caller's contract.
    unsafe {
        dispatch(
            name,
            &crate::queue::BATCHES,
            Kind::Batch,
            work,
            done,
            req_handle,
        )
    }
}

/// Runs the batch: every entry once, in dependency order, stopping at the first failure
/// (its status is the batch's). A cycle is refused before anything runs
/// (CS_INVALID_ARG naming the entries on it). The completion value is the entries that
/// completed. Queued (a callback or an event), batches run on a worker of their own.
///
/// # Safety
/// Every copy entry's host buffer stays valid until the batch completes; `CompValue` is
/// null or writable until the batch completes.
#[no_mangle]
pub unsafe extern "C" fn csQueueBatchRequest(
    BatchHandle: CsBatchHandle,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    CompValue: *mut c_uint,
) -> CsStatus {
    const NAME: &str = "csQueueBatchRequest";
    run(NAME, || {
        let done =
            Completion::checked(Context, Callback.into(), EventHandle, Value::u32(CompValue))?;
        // SAFETY: the caller's contract.
        unsafe { queue_batch(NAME, BatchHandle, done, std::ptr::null_mut()) }
    })
}

/// csx extension: `csQueueBatchRequest` with a request handle and a 64-bit value.
///
/// # Safety
/// As `csQueueBatchRequest`; `ReqHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csxQueueBatchRequest(
    BatchHandle: CsBatchHandle,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    ReqHandle: *mut CsReqHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csxQueueBatchRequest";
    run(NAME, || {
        let done =
            Completion::checked(Context, Callback.into(), EventHandle, Value::u64(CompValue))?;
        // SAFETY: the caller's contract.
        unsafe { queue_batch(NAME, BatchHandle, done, ReqHandle) }
    })
}

/// Frees a batch.
#[no_mangle]
pub extern "C" fn csFreeBatchRequest(BatchHandle: CsBatchHandle) -> CsStatus {
    run("csFreeBatchRequest", || {
        let key = batch_key(BatchHandle)?;
        registry::with(|r| r.batches.remove(&key));
        Ok(CS_SUCCESS)
    })
}
