//! The v0.5 forms of the calls whose signatures changed in v1.x. `cs_api_v05.h` maps the
//! v0.5 names onto these symbols (`#define csQueueComputeRequest csx05QueueComputeRequest`
//! and so on), so a v0.5 program compiles unchanged and reaches the same library: 2-argument
//! callbacks, 32-bit completion values, the one-range v0.5 block request, `MemFlags` as an
//! integer, `CS_CSF_TYPE` (1) activating a CSF.

use std::ffi::{c_int, c_uint, c_void};

use crate::api::{
    add_entry, alloc_mem, compute_desc, copy_desc, device, fail, file_desc, free_mem, inp,
    queue_batch, run, submit, Callback, Completion, Desc, Value, R,
};
use crate::status::*;
use crate::types::*;

fn callback(cb: CsV05CallbackFn) -> Callback {
    cb.map_or(Callback::None, Callback::V05)
}

/// A v0.5 storage request.
///
/// # Safety
/// `req` null or readable with the union member `Mode` names.
unsafe fn storage_desc(req: *const CsV05StorageRequest) -> R<Desc> {
    // SAFETY: the caller's contract.
    let r = unsafe { inp(req, "Req") }?;
    Ok(match r.mode {
        // SAFETY: Mode says the union holds FileIo.
        CS_STORAGE_FILE_IO => file_desc(r.dev_handle, unsafe { &r.u.file_io }),
        CS_STORAGE_BLOCK_IO => {
            // SAFETY: Mode says the union holds BlockIo.
            let b = unsafe { r.u.block_io };
            Desc::Block {
                dev: r.dev_handle as usize,
                ty: b.type_,
                storage_index: b.storage_index,
                mem: b.dev_mem.mem_handle as usize,
                mem_offset: b.dev_mem.byte_offset,
                ranges: vec![(b.namespace_id, b.start_lba, b.num_blocks)],
            }
        }
        other => Desc::BadMode(other),
    })
}

/// v0.5 `csQueueComputeRequest`.
///
/// # Safety
/// As `csQueueComputeRequest`, with a 32-bit `CompValue`.
#[no_mangle]
pub unsafe extern "C" fn csx05QueueComputeRequest(
    Req: *const CsComputeRequest,
    Context: *mut c_void,
    Callback: CsV05CallbackFn,
    EventHandle: CsEvtHandle,
    CompValue: *mut c_uint,
) -> CsStatus {
    const NAME: &str = "csQueueComputeRequest";
    run(NAME, || {
        let done = Completion::checked(
            Context,
            callback(Callback),
            EventHandle,
            Value::u32(CompValue),
        )?;
        // SAFETY: the caller's contract.
        let desc = unsafe { compute_desc(Req) }?;
        // SAFETY: the caller's contract.
        unsafe { submit(NAME, &desc, done, std::ptr::null_mut()) }
    })
}

/// v0.5 `csQueueCopyMemRequest`.
///
/// # Safety
/// As `csQueueCopyMemRequest`, with a 32-bit `CompValue`.
#[no_mangle]
pub unsafe extern "C" fn csx05QueueCopyMemRequest(
    Req: *const CsCopyMemRequest,
    Context: *mut c_void,
    Callback: CsV05CallbackFn,
    EventHandle: CsEvtHandle,
    CompValue: *mut c_uint,
) -> CsStatus {
    const NAME: &str = "csQueueCopyMemRequest";
    run(NAME, || {
        // SAFETY: the caller's contract.
        let req = unsafe { inp(Req, "Req") }?;
        let done = Completion::checked(
            Context,
            callback(Callback),
            EventHandle,
            Value::u32(CompValue),
        )?;
        // SAFETY: the caller's contract.
        unsafe { submit(NAME, &copy_desc(req), done, std::ptr::null_mut()) }
    })
}

/// v0.5 `csQueueStorageRequest` (its block request holds one range).
///
/// # Safety
/// As `csQueueStorageRequest`, with a 32-bit `CompValue`.
#[no_mangle]
pub unsafe extern "C" fn csx05QueueStorageRequest(
    Req: *const CsV05StorageRequest,
    Context: *mut c_void,
    Callback: CsV05CallbackFn,
    EventHandle: CsEvtHandle,
    CompValue: *mut c_uint,
) -> CsStatus {
    const NAME: &str = "csQueueStorageRequest";
    run(NAME, || {
        let done = Completion::checked(
            Context,
            callback(Callback),
            EventHandle,
            Value::u32(CompValue),
        )?;
        // SAFETY: the caller's contract.
        let desc = unsafe { storage_desc(Req) }?;
        // SAFETY: the caller's contract.
        unsafe { submit(NAME, &desc, done, std::ptr::null_mut()) }
    })
}

/// v0.5 `csQueueBatchRequest`.
///
/// # Safety
/// As `csQueueBatchRequest`.
#[no_mangle]
pub unsafe extern "C" fn csx05QueueBatchRequest(
    BatchHandle: CsBatchHandle,
    Context: *mut c_void,
    Callback: CsV05CallbackFn,
    EventHandle: CsEvtHandle,
    CompValue: *mut c_uint,
) -> CsStatus {
    const NAME: &str = "csQueueBatchRequest";
    run(NAME, || {
        let done = Completion::checked(
            Context,
            callback(Callback),
            EventHandle,
            Value::u32(CompValue),
        )?;
        // SAFETY: the caller's contract.
        unsafe { queue_batch(NAME, BatchHandle, done, std::ptr::null_mut()) }
    })
}

/// v0.5 `csAddBatchEntry` (its storage entries are v0.5 requests).
///
/// # Safety
/// As `csAddBatchEntry`.
#[no_mangle]
pub unsafe extern "C" fn csx05AddBatchEntry(
    BatchHandle: CsBatchHandle,
    Req: *const CsV05BatchRequest,
    Before: CsBatchIndex,
    After: CsBatchIndex,
    Curr: *mut CsBatchIndex,
) -> CsStatus {
    run("csAddBatchEntry", || {
        // SAFETY: the caller's contract.
        let r = unsafe { inp(Req, "Req") }?;
        let desc = match r.req_type {
            // SAFETY: ReqType says which union member holds the request.
            CS_COPY_AFDM => copy_desc(unsafe { &r.u.copy_mem }),
            // SAFETY: as above.
            CS_STORAGE_IO => unsafe { storage_desc(std::ptr::addr_of!((*Req).u.storage_io)) }?,
            // SAFETY: as above.
            CS_QUEUE_COMPUTE => unsafe { compute_desc(std::ptr::addr_of!((*Req).u.compute)) }?,
            other => {
                return fail(
                    CS_INVALID_OPTION,
                    format!("ReqType {other} is not CS_COPY_AFDM (1), CS_STORAGE_IO (2) or CS_QUEUE_COMPUTE (3)"),
                )
            }
        };
        // SAFETY: the caller's contract.
        unsafe { add_entry(BatchHandle, desc, Before, After, Curr) }
    })
}

/// v0.5 `csAllocMem`: `MemFlags` is reserved and must be 0.
///
/// # Safety
/// As `csAllocMem`.
#[no_mangle]
pub unsafe extern "C" fn csx05AllocMem(
    DevHandle: CsDevHandle,
    Bytes: c_int,
    MemFlags: c_uint,
    MemHandle: *mut CsMemHandle,
    VAddressPtr: *mut *mut c_void,
) -> CsStatus {
    run("csAllocMem", || {
        if MemFlags != 0 {
            return fail(
                CS_INVALID_OPTION,
                format!("MemFlags {MemFlags} is reserved in v0.5 and must be 0"),
            );
        }
        // SAFETY: forwarded contract.
        unsafe { alloc_mem(DevHandle, Bytes, None, MemHandle, VAddressPtr) }
    })
}

/// v0.5 `csFreeMem`.
#[no_mangle]
pub extern "C" fn csx05FreeMem(MemHandle: CsMemHandle) -> CsStatus {
    run("csFreeMem", || free_mem(MemHandle, None))
}

/// v0.5 `csConfig`: `CS_CSF_TYPE` (1) activates the CSF in slot `Index` (`SubType` a
/// CSX_ENGINE_* value); `CS_VENDOR_SPECIFIC` (2) is CS_UNSUPPORTED.
///
/// # Safety
/// As `csConfig`.
#[no_mangle]
pub unsafe extern "C" fn csx05Config(
    CSEHandle: CsDevHandle,
    Info: *const CsConfigInfo,
) -> CsStatus {
    run("csConfig", || {
        let dev = device(CSEHandle)?;
        // SAFETY: the caller's contract.
        let info = unsafe { inp(Info, "Info") }?;
        match info.type_ {
            CS_V05_CSF_TYPE => crate::manage::config(&dev, true, info.sub_type, info.index),
            CSX_CSF_DEACTIVATE => crate::manage::config(&dev, false, info.sub_type, info.index),
            2 => fail(CS_UNSUPPORTED, "v0.5 CS_VENDOR_SPECIFIC configuration"),
            other => fail(
                CS_INVALID_OPTION,
                format!("Type {other} is not CS_CSF_TYPE (1)"),
            ),
        }
    })
}
