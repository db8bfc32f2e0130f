//! The C structures of `cs_api.h`, `#[repr(C)]`. Every field C sets that names a choice
//! (a type, mode or flag) is a plain integer here, validated before use: a value outside
//! the API's set is `CS_INVALID_OPTION`, never undefined behaviour.

use std::ffi::{c_char, c_void};

use crate::status::CsStatus;

/// An opaque device handle (a table key, never dereferenced).
pub type CsDevHandle = *mut c_void;
/// An opaque device-memory (AFDM) handle.
pub type CsMemHandle = *mut c_void;
/// An opaque event handle.
pub type CsEvtHandle = *mut c_void;
/// An opaque handle of a queued request (for `csAbortRequest`).
pub type CsReqHandle = *mut c_void;
/// A CSF id: a downloadable CSF's program slot.
pub type CsCsfId = u32;
/// Completion callback: the request's context, its status and its completion value.
pub type CsQueueCallbackFn = Option<extern "C" fn(*mut c_void, CsStatus, u64)>;

/// `CsMemFlags.Flags`: zero the range.
pub const CS_FDM_CLEAR: u32 = 1;
/// `CsMemFlags.Flags`: fill the range with `FillValue`.
pub const CS_FDM_FILL: u32 = 2;

/// How to initialise device memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsMemFlags {
    /// The FDM (memory namespace); csx devices have one, id 0.
    pub fdm_id: u32,
    pub flags: u32,
    pub fill_value: u8,
}

/// A place in device memory: an allocation and an offset into it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsDevAfdm {
    pub mem_handle: CsMemHandle,
    pub byte_offset: u64,
}

/// `CsCopyMemRequest.Type`: host memory to device memory.
pub const CS_COPY_TO_DEVICE: i32 = 0;
/// `CsCopyMemRequest.Type`: device memory to host memory.
pub const CS_COPY_FROM_DEVICE: i32 = 1;

/// A host <-> device-memory copy.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsCopyMemRequest {
    pub type_: i32,
    pub host_vaddress: *mut c_void,
    pub dev_mem: CsDevAfdm,
    pub bytes: u64,
}

/// `CsStorageRequest.Mode`: block I/O (LBAs of the NVM namespace).
pub const CS_STORAGE_BLOCK_IO: i32 = 0;
/// `CsStorageRequest.Mode`: file I/O (a file of the device's file store).
pub const CS_STORAGE_FILE_IO: i32 = 1;
/// Storage request type: storage to device memory.
pub const CS_STORAGE_LOAD_TYPE: i32 = 0;
/// Storage request type: device memory to storage.
pub const CS_STORAGE_STORE_TYPE: i32 = 1;
/// The LBA size of block I/O.
pub const CS_BLOCK_SIZE: u64 = 512;
/// The most ranges one block request may name.
pub const CS_BLOCK_RANGES_MAX: u32 = 64;

/// One run of blocks.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsBlockRange {
    pub namespace_id: u32,
    pub num_blocks: u32,
    pub start_lba: u64,
}

/// Block I/O: ranges of LBAs, back to back from `DevMem`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsBlockIo {
    pub type_: i32,
    pub num_ranges: u32,
    pub range: *const CsBlockRange,
    pub dev_mem: CsDevAfdm,
}

/// File I/O: `Bytes` at `Offset` of the device file `FilePath`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsFileIo {
    pub type_: i32,
    pub file_path: *const c_char,
    pub offset: u64,
    pub bytes: u64,
    pub dev_mem: CsDevAfdm,
}

/// The request's body, by `Mode`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)] // A union: which field is live depends on a tag.
pub union CsStorageIo {
    pub block_io: CsBlockIo,
    pub file_io: CsFileIo,
}

/// A storage <-> device-memory request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CsStorageRequest {
    pub mode: i32,
    pub dev_handle: CsDevHandle,
    pub u: CsStorageIo,
}

impl std::fmt::Debug for CsStorageRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsStorageRequest")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// `CsDownloadInfo.Type`: an eBPF program.
pub const CS_BPF_PROGRAM: i32 = 1;
/// `CsDownloadInfo.SubType`: an ELF object from `clang -target bpf -c`.
pub const CS_BPF_ELF: i32 = 0;
/// `CsDownloadInfo.SubType`: raw eBPF bytecode.
pub const CS_BPF_RAW: i32 = 1;
/// `CsDownloadInfo.Index`: the first empty slot.
pub const CS_ANY_INDEX: i32 = -1;

/// A program to download into (or, with `Unload`, remove from) a slot.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsDownloadInfo {
    pub type_: i32,
    pub sub_type: i32,
    pub index: i32,
    pub unload: i32,
    pub length: u64,
    pub data_buffer: *const c_void,
    /// The ELF function to run; NULL: the first in `.text`.
    pub entry_name: *const c_char,
}

/// `CsConfigInfo.Type`: activate the CSF in slot `Index`.
pub const CS_CSF_ACTIVATE: i32 = 1;
/// `CsConfigInfo.Type`: deactivate it.
pub const CS_CSF_DEACTIVATE: i32 = 2;
/// `CsConfigInfo.SubType` for activation: the device's best engine (the JIT when it has one).
pub const CS_ENGINE_DEFAULT: i32 = 0;
/// `CsConfigInfo.SubType`: the interpreter.
pub const CS_ENGINE_INTERPRETER: i32 = 1;
/// `CsConfigInfo.SubType`: the JIT.
pub const CS_ENGINE_JIT: i32 = 2;

/// A configuration change of one CSF.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsConfigInfo {
    pub type_: i32,
    pub sub_type: i32,
    pub index: u32,
}

/// `CsComputeArg.Type`: device memory from `ByteOffset` to the allocation's end.
pub const CS_AFDM_TYPE: i32 = 1;
/// `CsComputeArg.Type`: a 32-bit value.
pub const CS_32BIT_VALUE_TYPE: i32 = 2;
/// `CsComputeArg.Type`: a 64-bit value.
pub const CS_64BIT_VALUE_TYPE: i32 = 3;
/// The most arguments one compute request takes.
pub const CS_COMPUTE_ARGS_MAX: i32 = 64;

/// An argument's value, by `Type`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)] // A union: which field is live depends on a tag.
pub union CsComputeArgValue {
    pub dev_mem: CsDevAfdm,
    pub value32: u32,
    pub value64: u64,
}

/// One argument of a compute request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CsComputeArg {
    pub type_: i32,
    pub u: CsComputeArgValue,
}

impl std::fmt::Debug for CsComputeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsComputeArg")
            .field("type", &self.type_)
            .finish_non_exhaustive()
    }
}

/// A compute request; the caller allocates room for `NumArgs` trailing arguments.
#[repr(C)]
#[derive(Debug)]
pub struct CsComputeRequest {
    pub dev_handle: CsDevHandle,
    pub csf_id: CsCsfId,
    pub num_args: i32,
    pub args: [CsComputeArg; 0],
}

/// An opaque batch handle.
pub type CsBatchHandle = *mut c_void;
/// An entry's index in its batch.
pub type CsBatchIndex = i32;
/// `Before`/`After` of `csAddBatchEntry`: no edge.
pub const CS_BATCH_INDEX_NONE: i32 = -1;
/// Batch modes (csx runs every mode in one dependency order: a valid schedule of each).
pub const CS_BATCH_SERIAL: i32 = 0;
pub const CS_BATCH_PARALLEL: i32 = 1;
pub const CS_BATCH_HYBRID: i32 = 2;
/// The most entries one batch holds.
pub const CS_BATCH_ENTRIES_MAX: i32 = 1024;
/// `CsBatchRequest.ReqType`: a `CsCopyMemRequest`.
pub const CS_COPY_AFDM: i32 = 0;
/// `CsBatchRequest.ReqType`: a `CsStorageRequest`.
pub const CS_STORAGE_IO: i32 = 1;
/// `CsBatchRequest.ReqType`: a `CsComputeRequest`.
pub const CS_QUEUE_COMPUTE: i32 = 2;

/// One batch entry: a pointer to the caller's request, which must stay valid until the
/// batch is queued.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsBatchRequest {
    pub req_type: i32,
    pub request: *const c_void,
}

/// `CSxProperties.Flags` bits.
pub const CS_FDM_IS_DEVICE_MANAGED: u32 = 1;
pub const CS_FDM_IS_HOST_VISIBLE: u32 = 2;
pub const CS_BATCH_REQUESTS_SUPPORTED: u32 = 4;
pub const CS_STREAMS_SUPPORTED: u32 = 8;

/// What `csQueryDeviceProperties` reports.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsxProperties {
    pub friendly_name: [u8; 64],
    pub sw_version: [u8; 32],
    pub abi_version: u32,
    /// Compute engines (CSEs): the device's engine threads.
    pub num_cses: u32,
    pub fdm_size_bytes: u64,
    pub fdm_free_bytes: u64,
    pub nvm_size_bytes: u64,
    pub program_slots: u32,
    pub max_active_programs: u32,
    pub max_afdm_args: u32,
    pub max_requests_per_batch: u32,
    pub max_program_bytes: u32,
    /// `CS_FDM_IS_DEVICE_MANAGED` | ...
    pub flags: u32,
}

/// `csQueryDeviceStatistics` types.
pub const CS_STAT_CSE: i32 = 0;
pub const CS_STAT_MEMORY: i32 = 1;
pub const CS_STAT_FUNCTION: i32 = 2;

/// What `csQueryDeviceStatistics` reports (fields the type does not cover are 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CsStatsInfo {
    /// CS_STAT_FUNCTION: the CSF's executions since activation; CS_STAT_CSE: all CSFs'.
    pub executions: u64,
    /// CS_STAT_CSE: occupied program slots; CS_STAT_FUNCTION: 1 when active.
    pub programs_loaded: u64,
    pub programs_active: u64,
    /// CS_STAT_MEMORY: the FDM's size and free bytes.
    pub mem_size_bytes: u64,
    pub mem_free_bytes: u64,
}

/// One CSF of `csQueryCSFList`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsCsfInfo {
    pub unique_name: [u8; 32],
    pub csf_id: u32,
    /// 1: downloadable (a program slot); 0: built-in (a registered device function,
    /// callable from programs only).
    pub downloadable: u32,
    /// 1 when active (downloadable CSFs).
    pub active: u32,
}
