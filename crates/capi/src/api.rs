//! The exported functions of `cs_api.h`. Every function:
//! * checks each pointer and handle before use (null, unknown, freed, wrong kind: a
//!   status, never a crash), and each length against its object and the protocol's limits;
//! * runs inside `catch_unwind`, so a bug in the library is `CS_FATAL_ERROR`, not an abort
//!   of the caller;
//! * leaves a message naming the bad value and the limit for `csxGetLastError`.
//!
//! Completion: with no callback and no event a request runs on the calling thread and
//! the call returns its status. With a callback or an event, its arguments are checked
//! and copied, the call returns `CS_QUEUED` (and a request handle for `csAbortRequest`),
//! and the request runs on its device handle's worker (see [`crate::queue`]): on
//! completion the callback runs on that worker, or the event records the status for
//! `csPollEvent`. A request refused before it starts (bad arguments) returns its status
//! directly and signals nothing.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use csx_host::proto::limits::{
    FUEL_MAX, PARAMS_SIZE_MAX, PROGRAM_SIZE_MAX, SLM_ALLOC_SIZE_MAX, TIME_LIMIT_MS_MAX, WINDOWS_MAX,
};
use csx_host::proto::{
    CopySource, EngineKind, MemHandle as DevMemHandle, MemRange, ProgramIndex, ProgramState,
    ProgramType,
};
use csx_host::{CallError, Device, ExecuteRequest};

use crate::queue::{Job, Kind, Request, Worker};
use crate::registry::{self, handle_of, key_of, Dev, Event, Mem};
use crate::status::*;
use crate::types::*;

/// A refused or failed call: its status and the message for `csxGetLastError`.
#[derive(Debug)]
pub struct Fail {
    pub status: CsStatus,
    pub message: String,
}

type R<T> = Result<T, Fail>;

fn fail<T>(status: CsStatus, message: impl Into<String>) -> R<T> {
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

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs one API call: panics become `CS_FATAL_ERROR`, failures set the last error.
fn run(name: &'static str, f: impl FnOnce() -> R<CsStatus>) -> CsStatus {
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
unsafe fn out<'a, T>(p: *mut T, what: &str) -> R<&'a mut T> {
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
unsafe fn inp<'a, T>(p: *const T, what: &str) -> R<&'a T> {
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
unsafe fn string<'a>(p: *const c_char, what: &str) -> R<&'a str> {
    if p.is_null() {
        return fail(CS_INVALID_ARG, format!("{what} is NULL"));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .or_else(|_| fail(CS_INVALID_ARG, format!("{what} is not UTF-8")))
}

fn device(h: CsDevHandle) -> R<Arc<Dev>> {
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

fn memory(h: CsMemHandle) -> R<(Mem, Arc<Dev>)> {
    if h.is_null() {
        return fail(CS_INVALID_HANDLE, "the memory handle is NULL");
    }
    let key = key_of(h);
    let found = registry::with(|r| {
        let m = *r.mems.get(&key)?;
        Some((m, r.devices.get(&m.dev)?.clone()))
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
fn afdm(a: &CsDevAfdm, bytes: u64, what: &str) -> R<(Mem, Arc<Dev>)> {
    let (m, d) = memory(a.mem_handle)?;
    if a.byte_offset > m.size || bytes > m.size - a.byte_offset {
        return fail(
            CS_INVALID_LENGTH,
            format!(
                "{what}: {bytes} bytes at offset {} reach past the allocation's {} bytes",
                a.byte_offset, m.size
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

/// How a request completes (see the module doc).
#[derive(Debug)]
pub struct Completion {
    ctx: *mut c_void,
    cb: CsQueueCallbackFn,
    evt: CsEvtHandle,
    comp_value: *mut u64,
}

// SAFETY: the pointers are the caller's and only passed back to it (the context to its
// callback, the event as a key) or written through (CompValue), which the API's contract
// keeps valid until the request completes; the worker thread that carries them does
// nothing else with them.
unsafe impl Send for Completion {}

impl Completion {
    /// The completion a request's trailing arguments name, its event checked before the
    /// request starts.
    fn checked(
        ctx: *mut c_void,
        cb: CsQueueCallbackFn,
        evt: CsEvtHandle,
        comp_value: *mut u64,
    ) -> R<Self> {
        let done = Completion {
            ctx,
            cb,
            evt,
            comp_value,
        };
        done.check()?;
        Ok(done)
    }

    /// Checks the event before the request starts.
    fn check(&self) -> R<()> {
        if self.evt.is_null() {
            return Ok(());
        }
        let key = key_of(self.evt);
        if registry::with(|r| r.events.contains_key(&key)) {
            Ok(())
        } else {
            fail(
                CS_INVALID_EVENT,
                format!("event handle {key} is not created"),
            )
        }
    }

    /// Whether the request is queued (a callback or an event), not synchronous.
    fn queued(&self) -> bool {
        self.cb.is_some() || !self.evt.is_null()
    }

    /// Writes the completion value of a successful request.
    ///
    /// # Safety
    /// `comp_value` is null or writable.
    unsafe fn write_value(&self, result: &R<u64>) {
        if let Ok(v) = result {
            // SAFETY: the caller's contract for CompValue.
            if let Some(c) = unsafe { self.comp_value.as_mut() } {
                *c = *v;
            }
        }
    }

    /// Delivers a queued request's outcome (on the worker): the completion value, then
    /// the event (when given) or the callback. A failure's message is this thread's last
    /// error (inside the callback) and the event's (for the thread that polls it).
    ///
    /// # Safety
    /// `comp_value` is null or writable; `cb` is callable with `ctx`.
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
        } else if let Some(cb) = self.cb {
            cb(self.ctx, status, value);
        }
    }
}

/// Runs a prepared request: at once on this thread when it has no callback and no event
/// (`*ReqHandle`, nullable, receives NULL), else queued on `worker` with a fresh request
/// handle in `*ReqHandle` (set before the request can complete): `CS_QUEUED`.
///
/// # Safety
/// `req_handle` is null or writable; the completion's pointers as for [`Completion`].
unsafe fn dispatch(
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

/// A request ready to run: its arguments checked and copied (only a copy's host buffer
/// and a batch's entries are still the caller's, as the API's contract says).
#[derive(Debug)]
pub enum Work {
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
        request: ExecuteRequest,
        csf: CsCsfId,
    },
    /// `(entry index, request type, request address)` in the order to run them.
    Batch { entries: Vec<(usize, i32, usize)> },
}

/// Runs a queued request on its worker (see [`crate::queue`]).
pub fn perform(work: &Work, req: &Request) -> R<u64> {
    if !matches!(work, Work::Compute { .. }) {
        req.start()?;
    }
    run_work(work, Some(req))
}

/// Runs `work`; `req` is the queued request it belongs to (for aborts), if any.
fn run_work(work: &Work, req: Option<&Request>) -> R<u64> {
    match work {
        Work::Copy {
            dev,
            mem,
            offset,
            host,
            len,
            to_device,
        } => {
            let bytes = *len as u64;
            if *to_device {
                // SAFETY: HostVAddress is readable for Bytes bytes until the request
                // completes (the caller's contract).
                let src = unsafe { std::slice::from_raw_parts(*host as *const u8, *len) };
                dev.device.write_mem(*mem, *offset, src)?;
            } else {
                // SAFETY: HostVAddress is writable for Bytes bytes until the request
                // completes (the caller's contract).
                let dst = unsafe { std::slice::from_raw_parts_mut(*host as *mut u8, *len) };
                dev.device.read_mem_into(*mem, *offset, dst)?;
            }
            Ok(bytes)
        }
        Work::FileLoad {
            dev,
            path,
            offset,
            bytes,
            mem,
            mem_offset,
        } => Ok(dev
            .device
            .copy_file_to_mem(path, *offset, *bytes, *mem, *mem_offset)?),
        Work::FileStore {
            dev,
            path,
            offset,
            range,
        } => Ok(dev.device.write_mem_to_file(path, *offset, *range)?),
        Work::BlockLoad {
            dev,
            mem,
            mem_offset,
            sources,
        } => Ok(dev.device.copy_to_mem(*mem, *mem_offset, sources.clone())?),
        Work::Compute { dev, request, csf } => {
            let result = match req {
                None => dev.device.execute(request),
                Some(q) => {
                    let id = q.start_exec(dev, || Ok(dev.device.submit_execute(request)?))?;
                    let r = dev.device.wait_execute(id, None);
                    q.end_exec();
                    r.map(|e| e.expect("a wait without a timeout returns a completion"))
                }
            };
            match result {
                Ok(run) if run.trapped() => fail(
                    CS_ERROR_IN_EXECUTION,
                    format!(
                        "CSF {csf} trapped: {}",
                        run.trap.map_or_else(|| "?".to_string(), |t| t.to_string())
                    ),
                ),
                Ok(run) => Ok(run.r0),
                Err(e) => Err(Fail::from(e)),
            }
        }
        Work::Batch { entries } => {
            for (done, &(i, ty, addr)) in entries.iter().enumerate() {
                if req.is_some_and(Request::aborted) {
                    return fail(
                        CS_ABORTED,
                        format!("the batch was aborted after {done} entries"),
                    );
                }
                let entry = || -> R<u64> {
                    // SAFETY: each entry points to a live request of its type until the
                    // batch completes (the caller's contract).
                    let work = unsafe { prepare_entry(ty, addr) }?;
                    run_work(&work, req)
                };
                entry().map_err(|e| Fail {
                    status: e.status,
                    message: format!("entry {i}: {}", e.message),
                })?;
            }
            Ok(entries.len() as u64)
        }
    }
}

// -------------------------------------------------------------------------------------
// Discovery, open and close.

/// Device names from `CSX_DEVICES` (comma-separated) and the devices open in this process.
fn known_devices() -> Vec<String> {
    let mut names: Vec<String> = std::env::var("CSX_DEVICES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let open: Vec<String> =
        registry::with(|r| r.devices.values().map(|d| d.name.clone()).collect());
    for n in open {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// Writes `text` and its NUL into `buf` of `*len` bytes; `*len` becomes the size needed.
///
/// # Safety
/// `len` is null or writable; `buf` is null or writable for `*len` bytes.
unsafe fn write_string(text: &str, len: *mut c_int, buf: *mut c_char) -> R<CsStatus> {
    // SAFETY: forwarded contract.
    let len = unsafe { out(len, "Length") }?;
    let need = text.len() + 1;
    let need_c = c_int::try_from(need).or_else(|_| fail(CS_FATAL_ERROR, "name list too long"))?;
    let have = *len;
    *len = need_c;
    if buf.is_null() {
        return Ok(CS_SUCCESS);
    }
    if have < need_c {
        return fail(
            CS_INVALID_LENGTH,
            format!("the buffer holds {have} bytes, {need} are needed (set in *Length)"),
        );
    }
    // SAFETY: `buf` holds `have >= need` bytes by the caller's contract.
    let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), need) };
    dst[..text.len()].copy_from_slice(text.as_bytes());
    dst[text.len()] = 0;
    Ok(CS_SUCCESS)
}

/// Lists the devices this process knows: those named in `CSX_DEVICES` and those open,
/// comma-separated. With `Buf` NULL, `*Length` receives the size needed.
///
/// # Safety
/// `Length` is null or writable; `Buf` is null or writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryCSxList(Length: *mut c_int, Buf: *mut c_char) -> CsStatus {
    run("csQueryCSxList", || {
        let list = known_devices().join(",");
        // SAFETY: forwarded contract.
        unsafe { write_string(&list, Length, Buf) }
    })
}

/// Opens the device `DevName` (a csx URI: a state directory, `shm://NAME` or
/// `tcp://HOST:PORT`). `DevContext` is unused.
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
        let device = Device::open(name).or_else(|e| fail(open_status(&e), e.to_string()))?;
        let dev = Arc::new(Dev::new(name.to_string(), device));
        let key = registry::with(|r| {
            let key = r.key();
            r.devices.insert(key, dev);
            key
        });
        *handle = handle_of(key);
        Ok(CS_SUCCESS)
    })
}

/// Closes a device: its allocations are freed and its handles become invalid. Requests
/// queued on it are aborted: each still queued completes with CS_ABORTED, a running
/// execution is aborted, a running transfer finishes; the call returns once every
/// callback of the device has returned (called from inside one of them, it returns at
/// once and the rest follow after that callback).
#[no_mangle]
pub extern "C" fn csCloseCSx(DevHandle: CsDevHandle) -> CsStatus {
    run("csCloseCSx", || {
        device(DevHandle)?;
        let key = key_of(DevHandle);
        let dev = registry::with(|r| {
            r.mems.retain(|_, m| m.dev != key);
            r.devices.remove(&key)
        });
        let Some(dev) = dev else {
            return fail(
                CS_INVALID_HANDLE,
                format!("device handle {key} is not open"),
            );
        };
        dev.worker.shutdown();
        // Another thread in a call on it (or a batch using it) keeps it alive: the last
        // one out closes the connection when it drops it.
        if let Ok(dev) = Arc::try_unwrap(dev) {
            dev.device.close()?;
        }
        Ok(CS_SUCCESS)
    })
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
        CS_FDM_FILL => Ok(Some(f.fill_value)),
        other => fail(
            CS_INVALID_OPTION,
            format!("MemFlags.Flags {other} is not 0, CS_FDM_CLEAR or CS_FDM_FILL"),
        ),
    }
}

/// Allocates `Bytes` of device memory. `MemFlags` (nullable) may ask for it cleared or
/// filled. `VAddr` (nullable) receives NULL: csx device memory is not host-mappable.
///
/// # Safety
/// `MemFlags` is null or readable; `MemHandle` and `VAddr` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn csAllocMem(
    DevHandle: CsDevHandle,
    Bytes: u64,
    MemFlags: *const CsMemFlags,
    MemHandle: *mut CsMemHandle,
    VAddr: *mut *mut c_void,
) -> CsStatus {
    run("csAllocMem", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let handle_out = unsafe { out(MemHandle, "MemHandle") }?;
        // SAFETY: the caller's contract.
        let init = init_value(unsafe { MemFlags.as_ref() })?;
        if Bytes == 0 || Bytes > SLM_ALLOC_SIZE_MAX {
            return fail(
                CS_INVALID_LENGTH,
                format!("Bytes {Bytes} is not within 1..={SLM_ALLOC_SIZE_MAX}"),
            );
        }
        let handle = dev.device.alloc(Bytes)?;
        if let Some(byte) = init {
            if let Err(e) = dev.device.fill_mem(handle, 0, Bytes, byte) {
                let _ = dev.device.free(handle);
                return Err(e.into());
            }
        }
        let dev_key = key_of(DevHandle);
        let key = registry::with(|r| {
            let key = r.key();
            r.mems.insert(
                key,
                Mem {
                    dev: dev_key,
                    handle,
                    size: Bytes,
                },
            );
            key
        });
        *handle_out = handle_of(key);
        // SAFETY: the caller's contract.
        if let Some(v) = unsafe { VAddr.as_mut() } {
            *v = std::ptr::null_mut();
        }
        Ok(CS_SUCCESS)
    })
}

/// Frees device memory; the handle becomes invalid.
#[no_mangle]
pub extern "C" fn csFreeMem(MemHandle: CsMemHandle) -> CsStatus {
    run("csFreeMem", || {
        let (m, dev) = memory(MemHandle)?;
        dev.device.free(m.handle)?;
        registry::with(|r| r.mems.remove(&key_of(MemHandle)));
        Ok(CS_SUCCESS)
    })
}

/// Sets `Bytes` from `ByteOffset` of an allocation: zero, or `MemFlags->FillValue` with
/// `CS_FDM_FILL`. `MemFlags` NULL means zero.
///
/// # Safety
/// `MemFlags` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn csInitMem(
    MemHandle: CsMemHandle,
    ByteOffset: u64,
    Bytes: u64,
    MemFlags: *const CsMemFlags,
) -> CsStatus {
    run("csInitMem", || {
        // SAFETY: the caller's contract.
        let byte = init_value(unsafe { MemFlags.as_ref() })?.unwrap_or(0);
        let place = CsDevAfdm {
            mem_handle: MemHandle,
            byte_offset: ByteOffset,
        };
        let (m, dev) = afdm(&place, Bytes, "csInitMem")?;
        dev.device.fill_mem(m.handle, ByteOffset, Bytes, byte)?;
        Ok(CS_SUCCESS)
    })
}

// -------------------------------------------------------------------------------------
// Host <-> device memory, storage <-> device memory.

/// A copy request, checked.
fn prepare_copy(req: &CsCopyMemRequest) -> R<Work> {
    let (m, dev) = afdm(&req.dev_mem, req.bytes, "csQueueCopyMemRequest")?;
    if req.host_vaddress.is_null() {
        return fail(CS_INVALID_ARG, "HostVAddress is NULL");
    }
    let len = usize::try_from(req.bytes)
        .or_else(|_| fail(CS_INVALID_LENGTH, "Bytes exceeds the address space"))?;
    let to_device = match req.type_ {
        CS_COPY_TO_DEVICE => true,
        CS_COPY_FROM_DEVICE => false,
        other => {
            return fail(
                CS_INVALID_OPTION,
                format!("Type {other} is not CS_COPY_TO_DEVICE or CS_COPY_FROM_DEVICE"),
            )
        }
    };
    Ok(Work::Copy {
        dev,
        mem: m.handle,
        offset: req.dev_mem.byte_offset,
        host: req.host_vaddress as usize,
        len,
        to_device,
    })
}

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
        let done = Completion::checked(Context, Callback, EventHandle, CompValue)?;
        let work = prepare_copy(req)?;
        let dev = work_device(&work);
        // SAFETY: the caller's contract.
        unsafe { dispatch(NAME, &dev.worker, Kind::Transfer, work, done, ReqHandle) }
    })
}

/// The device a single request's work runs on.
fn work_device(work: &Work) -> Arc<Dev> {
    match work {
        Work::Copy { dev, .. }
        | Work::FileLoad { dev, .. }
        | Work::FileStore { dev, .. }
        | Work::BlockLoad { dev, .. }
        | Work::Compute { dev, .. } => Arc::clone(dev),
        Work::Batch { .. } => unreachable!("a batch is not a single request"),
    }
}

/// A storage request, checked.
///
/// # Safety
/// `req`'s union member is the one `Mode` names, with valid pointers.
unsafe fn prepare_storage(req: &CsStorageRequest) -> R<Work> {
    let dev = device(req.dev_handle)?;
    match req.mode {
        CS_STORAGE_FILE_IO => {
            // SAFETY: Mode says the union holds FileIo (the caller's contract).
            let f = unsafe { req.u.file_io };
            // SAFETY: the caller's contract.
            let path = unsafe { string(f.file_path, "FileIo.FilePath") }?.to_string();
            let (m, mdev) = afdm(&f.dev_mem, f.bytes, "FileIo.DevMem")?;
            same_device(&dev, &mdev, "FileIo.DevMem")?;
            match f.type_ {
                CS_STORAGE_LOAD_TYPE => Ok(Work::FileLoad {
                    dev,
                    path,
                    offset: f.offset,
                    bytes: f.bytes,
                    mem: m.handle,
                    mem_offset: f.dev_mem.byte_offset,
                }),
                CS_STORAGE_STORE_TYPE => Ok(Work::FileStore {
                    dev,
                    path,
                    offset: f.offset,
                    range: MemRange {
                        handle: m.handle,
                        offset: f.dev_mem.byte_offset,
                        len: f.bytes,
                    },
                }),
                other => fail(
                    CS_INVALID_OPTION,
                    format!(
                        "FileIo.Type {other} is not CS_STORAGE_LOAD_TYPE or CS_STORAGE_STORE_TYPE"
                    ),
                ),
            }
        }
        CS_STORAGE_BLOCK_IO => {
            // SAFETY: Mode says the union holds BlockIo (the caller's contract).
            let b = unsafe { req.u.block_io };
            if b.type_ == CS_STORAGE_STORE_TYPE {
                return fail(
                    CS_UNSUPPORTED,
                    "block STORE: csx writes storage only through its file store (use file I/O)",
                );
            }
            if b.type_ != CS_STORAGE_LOAD_TYPE {
                return fail(
                    CS_INVALID_OPTION,
                    format!("BlockIo.Type {} is not CS_STORAGE_LOAD_TYPE", b.type_),
                );
            }
            if b.num_ranges == 0 || b.num_ranges > CS_BLOCK_RANGES_MAX {
                return fail(
                    CS_INVALID_LENGTH,
                    format!(
                        "BlockIo.NumRanges {} is not within 1..={CS_BLOCK_RANGES_MAX}",
                        b.num_ranges
                    ),
                );
            }
            if b.range.is_null() {
                return fail(CS_INVALID_ARG, "BlockIo.Range is NULL");
            }
            // SAFETY: Range holds NumRanges entries (the caller's contract).
            let ranges = unsafe { std::slice::from_raw_parts(b.range, b.num_ranges as usize) };
            let mut sources = Vec::with_capacity(ranges.len());
            let mut total: u64 = 0;
            for (i, r) in ranges.iter().enumerate() {
                if r.namespace_id != 1 {
                    return fail(
                        CS_ENTITY_NOT_ON_DEVICE,
                        format!(
                            "BlockIo.Range[{i}].NamespaceId {} is not the NVM namespace (1)",
                            r.namespace_id
                        ),
                    );
                }
                let len = u64::from(r.num_blocks) * CS_BLOCK_SIZE;
                let offset = r.start_lba.checked_mul(CS_BLOCK_SIZE).ok_or(Fail {
                    status: CS_INVALID_LENGTH,
                    message: format!("BlockIo.Range[{i}].StartLba {} overflows", r.start_lba),
                })?;
                total = total.saturating_add(len);
                sources.push(CopySource::Nvm { offset, len });
            }
            let (m, mdev) = afdm(&b.dev_mem, total, "BlockIo.DevMem")?;
            same_device(&dev, &mdev, "BlockIo.DevMem")?;
            Ok(Work::BlockLoad {
                dev,
                mem: m.handle,
                mem_offset: b.dev_mem.byte_offset,
                sources,
            })
        }
        other => fail(
            CS_INVALID_OPTION,
            format!("Mode {other} is not CS_STORAGE_BLOCK_IO or CS_STORAGE_FILE_IO"),
        ),
    }
}

/// Moves data between storage and device memory: file I/O (a device file) or block I/O
/// (LBAs of CS_BLOCK_SIZE bytes of the NVM namespace; LOAD only). The completion value
/// is the bytes moved.
///
/// # Safety
/// `Req` is null or readable, its union member the one `Mode` names, with valid
/// pointers; `ReqHandle` is null or writable; `CompValue` is null or writable until the
/// request completes.
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
        // SAFETY: the caller's contract.
        let req = unsafe { inp(Req, "Req") }?;
        let done = Completion::checked(Context, Callback, EventHandle, CompValue)?;
        // SAFETY: the caller's contract.
        let work = unsafe { prepare_storage(req) }?;
        let dev = work_device(&work);
        // SAFETY: the caller's contract.
        unsafe { dispatch(NAME, &dev.worker, Kind::Transfer, work, done, ReqHandle) }
    })
}

// -------------------------------------------------------------------------------------
// Programs (downloadable CSFs) and compute.

/// Downloads an eBPF program into slot `Info->Index` (or the first empty slot with
/// CS_ANY_INDEX), or with `Unload` empties that slot. `CSFId` (nullable) receives the
/// slot, the CSF's id.
///
/// # Safety
/// `Info` is null or readable with `DataBuffer` readable for `Length` bytes and
/// `EntryName` null or a string; `CSFId` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csDownload(
    DevHandle: CsDevHandle,
    Info: *const CsDownloadInfo,
    CSFId: *mut CsCsfId,
) -> CsStatus {
    run("csDownload", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let info = unsafe { inp(Info, "Info") }?;
        if info.type_ != CS_BPF_PROGRAM {
            return fail(
                CS_UNSUPPORTED,
                format!(
                    "Type {}: csx runs eBPF programs only (CS_BPF_PROGRAM)",
                    info.type_
                ),
            );
        }
        if info.unload != 0 {
            let pind = slot(info.index)?;
            dev.device.unload(pind)?;
            return Ok(CS_SUCCESS);
        }
        let ptype = match info.sub_type {
            CS_BPF_ELF => ProgramType::Elf,
            CS_BPF_RAW => ProgramType::Raw,
            other => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("SubType {other} is not CS_BPF_ELF or CS_BPF_RAW"),
                )
            }
        };
        if info.length == 0 || info.length > u64::from(PROGRAM_SIZE_MAX) {
            return fail(
                CS_INVALID_LENGTH,
                format!(
                    "Length {} is not within 1..={PROGRAM_SIZE_MAX}",
                    info.length
                ),
            );
        }
        if info.data_buffer.is_null() {
            return fail(CS_INVALID_ARG, "DataBuffer is NULL");
        }
        // SAFETY: DataBuffer is readable for Length bytes (the caller's contract);
        // Length is at most PROGRAM_SIZE_MAX.
        let image = unsafe {
            std::slice::from_raw_parts(info.data_buffer.cast::<u8>(), info.length as usize)
        };
        let entry = if info.entry_name.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { string(info.entry_name, "EntryName") }?)
        };
        let pind = if info.index == CS_ANY_INDEX {
            dev.device.load_program_any_slot(ptype, image, entry)?
        } else {
            let pind = slot(info.index)?;
            dev.device.load_program(pind, ptype, image, entry)?;
            pind
        };
        // SAFETY: the caller's contract.
        if let Some(id) = unsafe { CSFId.as_mut() } {
            *id = u32::from(pind.0);
        }
        Ok(CS_SUCCESS)
    })
}

fn slot(index: i32) -> R<ProgramIndex> {
    u16::try_from(index).map(ProgramIndex).or_else(|_| {
        fail(
            CS_INVALID_ID,
            format!("Index {index} is not a program slot"),
        )
    })
}

/// CSF ids from here on are built-in CSFs: registered device function `id - BASE`.
pub const CS_BUILTIN_CSF_BASE: u32 = 0x1_0000;

fn csf_slot(id: CsCsfId) -> R<ProgramIndex> {
    if (CS_BUILTIN_CSF_BASE..2 * CS_BUILTIN_CSF_BASE).contains(&id) {
        return fail(
            CS_UNSUPPORTED,
            format!("CSFId {id:#x} is a built-in CSF (a registered device function): programs call it, a compute request cannot"),
        );
    }
    u16::try_from(id)
        .map(ProgramIndex)
        .or_else(|_| fail(CS_INVALID_ID, format!("CSFId {id} is not a program slot")))
}

/// Activates (verifies and prepares) or deactivates the CSF in slot `Info->Index`.
///
/// # Safety
/// `Info` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn csConfig(DevHandle: CsDevHandle, Info: *const CsConfigInfo) -> CsStatus {
    run("csConfig", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let info = unsafe { inp(Info, "Info") }?;
        let pind = csf_slot(info.index)?;
        match info.type_ {
            CS_CSF_ACTIVATE => {
                let engine = match info.sub_type {
                    CS_ENGINE_DEFAULT => {
                        if dev.device.identify()?.jit {
                            EngineKind::Jit
                        } else {
                            EngineKind::Interpreter
                        }
                    }
                    CS_ENGINE_INTERPRETER => EngineKind::Interpreter,
                    CS_ENGINE_JIT => EngineKind::Jit,
                    other => {
                        return fail(
                            CS_INVALID_OPTION,
                            format!("SubType {other} is not a CS_ENGINE_* value"),
                        )
                    }
                };
                dev.device.activate(pind, engine)?;
            }
            CS_CSF_DEACTIVATE => dev.device.deactivate(pind)?,
            other => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("Type {other} is not CS_CSF_ACTIVATE or CS_CSF_DEACTIVATE"),
                )
            }
        }
        Ok(CS_SUCCESS)
    })
}

/// The id of the CSF named `CSFName` (the program's entry function), an active one if
/// several slots hold it.
///
/// # Safety
/// `CSFName` is null or a string; `CSFId` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csGetCSFId(
    DevHandle: CsDevHandle,
    CSFName: *const c_char,
    CSFId: *mut CsCsfId,
) -> CsStatus {
    run("csGetCSFId", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let name = unsafe { string(CSFName, "CSFName") }?;
        // SAFETY: the caller's contract.
        let id = unsafe { out(CSFId, "CSFId") }?;
        let programs = dev.device.programs()?;
        let found = programs
            .iter()
            .filter(|p| p.name == name)
            .max_by_key(|p| (p.state == ProgramState::Active, std::cmp::Reverse(p.pind.0)));
        match found {
            Some(p) => {
                *id = u32::from(p.pind.0);
                Ok(CS_SUCCESS)
            }
            None => fail(
                CS_INVALID_FUNCTION_NAME,
                format!("no CSF named {name:?} on {}", dev.name),
            ),
        }
    })
}

/// A compute request, checked: the execution it asks for.
///
/// # Safety
/// `Req` is null or readable with `NumArgs` arguments after it.
unsafe fn prepare_compute(Req: *const CsComputeRequest) -> R<Work> {
    // SAFETY: the caller's contract.
    let req = unsafe { inp(Req, "Req") }?;
    let dev = device(req.dev_handle)?;
    if req.num_args < 0 || req.num_args > CS_COMPUTE_ARGS_MAX {
        return fail(
            CS_INVALID_LENGTH,
            format!(
                "NumArgs {} is not within 0..={CS_COMPUTE_ARGS_MAX}",
                req.num_args
            ),
        );
    }
    // SAFETY: the request is followed by NumArgs arguments (the caller's contract); the
    // pointer comes from `Req`, which covers them.
    let args = unsafe {
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*Req).args).cast::<CsComputeArg>(),
            req.num_args as usize,
        )
    };
    let mut request = ExecuteRequest::new(csf_slot(req.csf_id)?);
    let mut windows = 0usize;
    let mut values: Vec<u64> = Vec::new();
    let mut params: Vec<u8> = Vec::new();
    for (i, a) in args.iter().enumerate() {
        match a.type_ {
            CS_AFDM_TYPE => {
                // SAFETY: Type says the union holds DevMem.
                let place = unsafe { a.u.dev_mem };
                let (m, mdev) = afdm(&place, 0, "compute argument")?;
                same_device(&dev, &mdev, "compute argument")?;
                windows += 1;
                if windows > WINDOWS_MAX {
                    return fail(
                        CS_INVALID_LENGTH,
                        format!("argument {i}: more than {WINDOWS_MAX} AFDM arguments"),
                    );
                }
                request = request.window(m.handle, place.byte_offset, m.size - place.byte_offset);
            }
            CS_32BIT_VALUE_TYPE | CS_64BIT_VALUE_TYPE => {
                let (v, bytes): (u64, Vec<u8>) = if a.type_ == CS_32BIT_VALUE_TYPE {
                    // SAFETY: Type says the union holds Value32.
                    let v = unsafe { a.u.value32 };
                    (u64::from(v), v.to_le_bytes().to_vec())
                } else {
                    // SAFETY: Type says the union holds Value64.
                    let v = unsafe { a.u.value64 };
                    (v, v.to_le_bytes().to_vec())
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
            other => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("argument {i}: Type {other} is not CS_AFDM_TYPE, CS_32BIT_VALUE_TYPE or CS_64BIT_VALUE_TYPE"),
                )
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
    let fuel = dev.fuel.load(Ordering::Relaxed);
    if fuel > 0 {
        request = request.fuel(fuel);
    }
    let ms = dev.time_limit_ms.load(Ordering::Relaxed);
    if ms > 0 {
        request = request.time_limit_ms(ms);
    }
    Ok(Work::Compute {
        dev,
        request,
        csf: req.csf_id,
    })
}

/// Runs the CSF `Req->CSFId`. AFDM arguments become the program's windows 0, 1, ... (from
/// `ByteOffset` to the allocation's end); the first two value arguments become cparam1
/// and cparam2, further ones the params bytes (little-endian, 4 or 8 bytes each). The
/// completion value is the program's r0; a trap is CS_ERROR_IN_EXECUTION, an abort
/// CS_ABORTED.
///
/// # Safety
/// `Req` is null or readable with `NumArgs` arguments after it (read before the call
/// returns); `ReqHandle` is null or writable; `CompValue` is null or writable until the
/// request completes.
#[no_mangle]
pub unsafe extern "C" fn csQueueComputeRequest(
    Req: *const CsComputeRequest,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    ReqHandle: *mut CsReqHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csQueueComputeRequest";
    run(NAME, || {
        let done = Completion::checked(Context, Callback, EventHandle, CompValue)?;
        // SAFETY: the caller's contract.
        let work = unsafe { prepare_compute(Req) }?;
        let dev = work_device(&work);
        // SAFETY: the caller's contract.
        unsafe { dispatch(NAME, &dev.worker, Kind::Compute, work, done, ReqHandle) }
    })
}

/// Aborts a queued request (one queued with a callback or an event): still queued, it
/// completes with CS_ABORTED without running; a running compute request is stopped by
/// the device's Abort and completes with CS_ABORTED; a running batch runs no further
/// entry and completes with CS_ABORTED. After CS_SUCCESS the handle is no longer valid.
/// A running data transfer is not stopped (CS_HANDLE_IN_USE: it completes with its own
/// status; see `docs/capi.md` for why); a completed, already aborted or unknown request
/// is CS_INVALID_HANDLE.
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
/// requests made through this device handle from now on; 0 keeps the device's default.
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

/// The status of the request that last signalled the event (and `*Context`, nullable,
/// its context), consuming it; CS_NOT_DONE when nothing signalled it since. After a
/// failed request's status, csxGetLastError names its failure.
///
/// # Safety
/// `Context` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csPollEvent(
    EventHandle: CsEvtHandle,
    Context: *mut *mut c_void,
) -> CsStatus {
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
                if let Some(c) = unsafe { Context.as_mut() } {
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

/// Allocates a batch of at most `MaxReqs` entries. Every mode runs the entries one at a
/// time in an order that respects every edge (a valid schedule of each mode).
///
/// # Safety
/// `BatchHandle` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csAllocBatchRequest(
    Mode: i32,
    MaxReqs: i32,
    BatchHandle: *mut CsBatchHandle,
) -> CsStatus {
    run("csAllocBatchRequest", || {
        // SAFETY: the caller's contract.
        let h = unsafe { out(BatchHandle, "BatchHandle") }?;
        if !matches!(Mode, CS_BATCH_SERIAL | CS_BATCH_PARALLEL | CS_BATCH_HYBRID) {
            return fail(
                CS_INVALID_OPTION,
                format!("Mode {Mode} is not a CS_BATCH_* mode"),
            );
        }
        if !(1..=CS_BATCH_ENTRIES_MAX).contains(&MaxReqs) {
            return fail(
                CS_INVALID_LENGTH,
                format!("MaxReqs {MaxReqs} is not within 1..={CS_BATCH_ENTRIES_MAX}"),
            );
        }
        let key = registry::with(|r| {
            let key = r.key();
            r.batches.insert(
                key,
                crate::registry::Batch {
                    max: MaxReqs as usize,
                    ..Default::default()
                },
            );
            key
        });
        *h = handle_of(key);
        Ok(CS_SUCCESS)
    })
}

/// Adds an entry that runs before entry `Before` and after entry `After` (either
/// CS_BATCH_INDEX_NONE); `*Curr` (nullable) receives its index. The request it points
/// to must stay valid until the batch is queued.
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
        let key = batch_key(BatchHandle)?;
        // SAFETY: the caller's contract.
        let req = unsafe { inp(Req, "Req") }?;
        if !matches!(
            req.req_type,
            CS_COPY_AFDM | CS_STORAGE_IO | CS_QUEUE_COMPUTE
        ) {
            return fail(
                CS_INVALID_OPTION,
                format!(
                    "ReqType {} is not CS_COPY_AFDM, CS_STORAGE_IO or CS_QUEUE_COMPUTE",
                    req.req_type
                ),
            );
        }
        if req.request.is_null() {
            return fail(CS_INVALID_ARG, "Req->Request is NULL");
        }
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
            let edge = |i: i32, what: &str| -> R<Option<usize>> {
                match i {
                    CS_BATCH_INDEX_NONE => Ok(None),
                    i if i >= 0 && (i as usize) < n => Ok(Some(i as usize)),
                    i => fail(
                        CS_INVALID_ID,
                        format!("{what} {i} is not an entry (0..{n})"),
                    ),
                }
            };
            let before = edge(Before, "Before")?;
            let after = edge(After, "After")?;
            b.entries.push((req.req_type, req.request as usize));
            if let Some(a) = after {
                b.edges.push((a, n));
            }
            if let Some(bf) = before {
                b.edges.push((n, bf));
            }
            Ok(n)
        })?;
        // SAFETY: the caller's contract.
        if let Some(c) = unsafe { Curr.as_mut() } {
            *c = index as CsBatchIndex;
        }
        Ok(CS_SUCCESS)
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

/// One batch entry's request, checked.
///
/// # Safety
/// `addr` points to a live request of type `ty`.
unsafe fn prepare_entry(ty: i32, addr: usize) -> R<Work> {
    match ty {
        // SAFETY: the caller's contract.
        CS_COPY_AFDM => prepare_copy(unsafe { &*(addr as *const CsCopyMemRequest) }),
        // SAFETY: the caller's contract.
        CS_STORAGE_IO => unsafe { prepare_storage(&*(addr as *const CsStorageRequest)) },
        // SAFETY: the caller's contract.
        _ => unsafe { prepare_compute(addr as *const CsComputeRequest) },
    }
}

/// Runs the batch: every entry once, in dependency order, stopping at the first failure
/// (its status is the batch's). A cycle is refused before anything runs
/// (CS_INVALID_ARG naming the entries on it). The completion value is the entries that
/// completed. Queued (a callback or an event), batches run on a worker of their own.
///
/// # Safety
/// Every entry's request stays valid until the batch completes; `ReqHandle` is null or
/// writable; `CompValue` is null or writable until the batch completes.
#[no_mangle]
pub unsafe extern "C" fn csQueueBatchRequest(
    BatchHandle: CsBatchHandle,
    Context: *mut c_void,
    Callback: CsQueueCallbackFn,
    EventHandle: CsEvtHandle,
    ReqHandle: *mut CsReqHandle,
    CompValue: *mut u64,
) -> CsStatus {
    const NAME: &str = "csQueueBatchRequest";
    run(NAME, || {
        let key = batch_key(BatchHandle)?;
        let done = Completion::checked(Context, Callback, EventHandle, CompValue)?;
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
        let entries = order
            .into_iter()
            .map(|i| (i, entries[i].0, entries[i].1))
            .collect();
        let work = Work::Batch { entries };
        // SAFETY: the caller's contract.
        unsafe {
            dispatch(
                NAME,
                &crate::queue::BATCHES,
                Kind::Batch,
                work,
                done,
                ReqHandle,
            )
        }
    })
}

/// Frees a batch (not the requests its entries point to).
#[no_mangle]
pub extern "C" fn csFreeBatchRequest(BatchHandle: CsBatchHandle) -> CsStatus {
    run("csFreeBatchRequest", || {
        let key = batch_key(BatchHandle)?;
        registry::with(|r| r.batches.remove(&key));
        Ok(CS_SUCCESS)
    })
}

// -------------------------------------------------------------------------------------
// Management and discovery by path.

fn copy_name<const N: usize>(dst: &mut [u8; N], src: &str) {
    let n = src.len().min(N - 1);
    dst[..n].copy_from_slice(&src.as_bytes()[..n]);
    dst[n..].fill(0);
}

/// The device's properties. `*Length` is the buffer's size in bytes; when it is smaller
/// than `sizeof(CSxProperties)` it receives that size and the call is CS_INVALID_LENGTH.
///
/// # Safety
/// `Length` is null or writable; `Props` is null or writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csQueryDeviceProperties(
    DevHandle: CsDevHandle,
    Length: *mut c_int,
    Props: *mut CsxProperties,
) -> CsStatus {
    run("csQueryDeviceProperties", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let len = unsafe { out(Length, "Length") }?;
        let need = std::mem::size_of::<CsxProperties>() as c_int;
        if *len < need || Props.is_null() {
            let have = *len;
            *len = need;
            return fail(
                CS_INVALID_LENGTH,
                format!("the buffer holds {have} bytes, CSxProperties needs {need}"),
            );
        }
        let info = dev.device.identify()?;
        let mut p = CsxProperties {
            friendly_name: [0; 64],
            sw_version: [0; 32],
            abi_version: info.abi_version,
            num_cses: info.engines,
            fdm_size_bytes: info.slm_size_bytes,
            fdm_free_bytes: info.slm_free_bytes,
            nvm_size_bytes: info.nvm_size_bytes,
            program_slots: info.program_slots.into(),
            max_active_programs: info.programs_active_max.into(),
            max_afdm_args: WINDOWS_MAX as u32,
            max_requests_per_batch: CS_BATCH_ENTRIES_MAX as u32,
            max_program_bytes: info.program_size_max,
            flags: CS_FDM_IS_DEVICE_MANAGED | CS_BATCH_REQUESTS_SUPPORTED,
        };
        copy_name(&mut p.friendly_name, &dev.name);
        copy_name(&mut p.sw_version, &info.version);
        // SAFETY: non-null and writable for *Length >= sizeof bytes (the caller's contract).
        unsafe { Props.write(p) };
        Ok(CS_SUCCESS)
    })
}

/// Statistics of the device (CS_STAT_CSE), its memory (CS_STAT_MEMORY) or one CSF
/// (CS_STAT_FUNCTION; `Id` points to its CS_CSF_ID).
///
/// # Safety
/// `Id` is null or a readable CS_CSF_ID; `Stats` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn csQueryDeviceStatistics(
    DevHandle: CsDevHandle,
    Type: i32,
    Id: *const c_void,
    Stats: *mut CsStatsInfo,
) -> CsStatus {
    run("csQueryDeviceStatistics", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let stats = unsafe { out(Stats, "Stats") }?;
        let mut st = CsStatsInfo::default();
        match Type {
            CS_STAT_CSE => {
                let programs = dev.device.programs()?;
                st.executions = programs.iter().map(|p| p.executions).sum();
                st.programs_loaded = programs.len() as u64;
                st.programs_active = programs
                    .iter()
                    .filter(|p| p.state == ProgramState::Active)
                    .count() as u64;
            }
            CS_STAT_MEMORY => {
                let info = dev.device.identify()?;
                st.mem_size_bytes = info.slm_size_bytes;
                st.mem_free_bytes = info.slm_free_bytes;
            }
            CS_STAT_FUNCTION => {
                // SAFETY: the caller's contract.
                let id = *unsafe { inp(Id.cast::<CsCsfId>(), "Id") }?;
                let pind = csf_slot(id)?;
                let p = dev.device.programs()?.into_iter().find(|p| p.pind == pind);
                let Some(p) = p else {
                    return fail(
                        CS_UNKNOWN_COMPUTE_FUNCTION,
                        format!("CSF {id} is an empty slot"),
                    );
                };
                st.executions = p.executions;
                st.programs_loaded = 1;
                st.programs_active = u64::from(p.state == ProgramState::Active);
            }
            other => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("Type {other} is not a CS_STAT_* value"),
                )
            }
        }
        *stats = st;
        Ok(CS_SUCCESS)
    })
}

/// The CSFs of a device: downloadable ones (occupied program slots) then built-in ones
/// (registered device functions, ids from CS_BUILTIN_CSF_BASE). `*Count` is the
/// buffer's capacity in entries; it receives the number of CSFs (CS_INVALID_LENGTH when
/// they do not fit; `Buf` NULL asks for the count).
///
/// # Safety
/// `Count` is null or writable; `Buf` is null or writable for `*Count` entries.
#[no_mangle]
pub unsafe extern "C" fn csQueryCSFList(
    DevHandle: CsDevHandle,
    Count: *mut c_int,
    Buf: *mut CsCsfInfo,
) -> CsStatus {
    run("csQueryCSFList", || {
        let dev = device(DevHandle)?;
        // SAFETY: the caller's contract.
        let count = unsafe { out(Count, "Count") }?;
        let mut list = Vec::new();
        for p in dev.device.programs()? {
            let mut c = CsCsfInfo {
                unique_name: [0; 32],
                csf_id: p.pind.0.into(),
                downloadable: 1,
                active: u32::from(p.state == ProgramState::Active),
            };
            copy_name(&mut c.unique_name, &p.name);
            list.push(c);
        }
        for f in dev.device.functions()? {
            let mut c = CsCsfInfo {
                unique_name: [0; 32],
                csf_id: CS_BUILTIN_CSF_BASE + f.id.0,
                downloadable: 0,
                active: 1,
            };
            copy_name(&mut c.unique_name, &f.name);
            list.push(c);
        }
        let have = *count;
        *count = list.len() as c_int;
        if Buf.is_null() {
            return Ok(CS_SUCCESS);
        }
        if (have.max(0) as usize) < list.len() {
            return fail(
                CS_INVALID_LENGTH,
                format!(
                    "the buffer holds {have} entries, the device has {} CSFs",
                    list.len()
                ),
            );
        }
        // SAFETY: Buf holds *Count >= list.len() entries (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), Buf, list.len()) };
        Ok(CS_SUCCESS)
    })
}

/// Mount sources made by csx-fs (`csx mount`): `csx:` then the device URI, bytes other
/// than ASCII alphanumerics and `/:._-@+=~[]` written `%XX` (`csx_fs::mount::encode_fs_name`;
/// a test keeps the two in step). The URI, or `None` for another source.
pub fn device_of_mount_source(source: &[u8]) -> Option<String> {
    let encoded = source.strip_prefix(b"csx:")?;
    let mut out = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'%' {
            let hex = std::str::from_utf8(encoded.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(encoded[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A `/proc/self/mountinfo` field with its octal escapes (`\040`) decoded.
fn unescape_mountinfo(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4);
        match octal {
            Some(d) if field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// The device of the csx mount (FUSE, source `csx:URI`) holding `abs`, the innermost one
/// when mounts nest, from `mountinfo` (the text of `/proc/self/mountinfo`).
pub fn mounted_device(mountinfo: &[u8], abs: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        // Field 5 is the mount point; after "-" come the type and the source.
        let Some(dash) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if fields.len() < dash + 3 || dash < 5 {
            continue;
        }
        if fields[dash + 1] != b"fuse" && fields[dash + 1] != b"fuse.csx" {
            continue;
        }
        let Some(uri) = device_of_mount_source(&unescape_mountinfo(fields[dash + 2])) else {
            continue;
        };
        let point = unescape_mountinfo(fields[4]);
        let point = std::path::Path::new(std::ffi::OsStr::from_bytes(&point));
        let depth = point.components().count();
        if abs.starts_with(point) && best.as_ref().is_none_or(|(d, _)| depth > *d) {
            best = Some((depth, uri));
        }
    }
    best.map(|(_, uri)| uri)
}

/// The device a path belongs to, as a name for csOpenCSx: for a path inside a mounted
/// csx file system (`csx mount`), the URI of the mount's device (found in
/// `/proc/self/mountinfo`); else the state directory holding (an ancestor of) `Path`, as
/// an absolute path. Neither: CS_NO_SUCH_ENTITY_EXISTS.
///
/// # Safety
/// `Path` is null or a string; `Length` is null or writable; `DevName` is null or
/// writable for `*Length` bytes.
#[no_mangle]
pub unsafe extern "C" fn csGetCSxFromPath(
    Path: *const c_char,
    Length: *mut c_int,
    DevName: *mut c_char,
) -> CsStatus {
    run("csGetCSxFromPath", || {
        // SAFETY: the caller's contract.
        let path = unsafe { string(Path, "Path") }?;
        let abs =
            std::fs::canonicalize(path).or_else(|e| fail(CS_ENOENT, format!("{path:?}: {e}")))?;
        let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
        if let Some(uri) = mounted_device(&mountinfo, &abs) {
            // SAFETY: forwarded contract.
            return unsafe { write_string(&uri, Length, DevName) };
        }
        let dir = abs
            .ancestors()
            .find(|d| d.join("device.json").is_file())
            .ok_or(Fail {
                status: CS_NO_SUCH_ENTITY_EXISTS,
                message: format!("{path:?} is in no csx mount and no csx state directory"),
            })?;
        let name = dir.to_str().ok_or(Fail {
            status: CS_INVALID_ARG,
            message: "the device path is not UTF-8".into(),
        })?;
        // SAFETY: forwarded contract.
        unsafe { write_string(name, Length, DevName) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_name_the_innermost_csx_mount() {
        let info = b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
36 22 0:40 / /mnt/a\\040b rw,nosuid - fuse csx:tcp://127.0.0.1:4420 rw,user_id=0\n\
37 36 0:41 / /mnt/a\\040b/inner rw - fuse.csx csx:shm://d%2C1 rw\n\
38 22 0:42 / /mnt/other rw - fuse sshfs#host: rw\n\
39 22 0:43 / /mnt/old rw - fuse csx rw\n";
        let at = |p: &str| mounted_device(info, std::path::Path::new(p));
        assert_eq!(at("/mnt/a b/x/y").as_deref(), Some("tcp://127.0.0.1:4420"));
        assert_eq!(at("/mnt/a b").as_deref(), Some("tcp://127.0.0.1:4420"));
        assert_eq!(at("/mnt/a b/inner/f").as_deref(), Some("shm://d,1"));
        assert_eq!(at("/mnt/a bc/f"), None);
        assert_eq!(at("/mnt/other/f"), None);
        assert_eq!(at("/mnt/old/f"), None);
        assert_eq!(at("/home"), None);
        assert_eq!(device_of_mount_source(b"csx:%4"), None);
    }
}
