//! The C structures of `cs_api.h`, `#[repr(C)]`, laid out as the published SNIA CS API
//! declares them (natural alignment, the v1.x forms; `docs/capi.md` says where the
//! transcriptions disagree and which one csx follows). Every field C sets that names a
//! choice (a type, mode or flag) is a plain integer here, validated before use: a value
//! outside the API's set is `CS_INVALID_OPTION`, never undefined behaviour.

use std::ffi::c_void;

use crate::status::CsStatus;

/// An opaque device (CSx or CSE) handle (a table key, never dereferenced).
pub type CsDevHandle = *mut c_void;
/// An opaque device-memory (AFDM) handle.
pub type CsMemHandle = *mut c_void;
/// An opaque event handle.
pub type CsEvtHandle = *mut c_void;
/// An opaque handle of a queued request (for `csAbortRequest`).
pub type CsReqHandle = *mut c_void;
/// A CSF id: a downloadable CSF's program slot.
pub type CsCsfId = u32;
/// Completion callback (v1.x): the request's context, its status and its completion value.
pub type CsQueueCallbackFn = Option<extern "C" fn(*mut c_void, CsStatus, u64)>;
/// Completion callback (v0.5): the request's context and its status.
pub type CsV05CallbackFn = Option<extern "C" fn(*mut c_void, CsStatus)>;

// ---- Spec enums (every one numbered from 1, as the API declares them). ----

/// `CS_FDM_FLAG_TYPE`: zero the range.
pub const CS_FDM_CLEAR: i32 = 1;
/// `CS_FDM_FLAG_TYPE`: fill the range with `FillValue`.
pub const CS_FDM_FILL: i32 = 2;
/// `CS_MEM_COPY_TYPE`.
pub const CS_COPY_TO_DEVICE: i32 = 1;
pub const CS_COPY_FROM_DEVICE: i32 = 2;
/// `CS_STORAGE_REQ_MODE`.
pub const CS_STORAGE_BLOCK_IO: i32 = 1;
pub const CS_STORAGE_FILE_IO: i32 = 2;
/// `CS_STORAGE_IO_TYPE`: storage to device memory, device memory to storage.
pub const CS_STORAGE_LOAD_TYPE: i32 = 1;
pub const CS_STORAGE_STORE_TYPE: i32 = 2;
/// `CS_DOWNLOAD_TYPE` (v0.5 `csDownload`).
pub const CS_FPGA_BITSTREAM: i32 = 1;
pub const CS_BPF_PROGRAM: i32 = 2;
pub const CS_CONTAINER_IMAGE: i32 = 3;
pub const CS_OPERATING_SYSTEM_IMAGE: i32 = 4;
pub const CS_LARGE_DATA_SET: i32 = 5;
/// `CS_CSF_RESOURCE_TYPE` (v1.x `csCSFDownload`).
pub const CS_CSF_UNDEFINED: i32 = 0;
pub const CS_CSF_FPGA_BITSTREAM: i32 = 1;
pub const CS_CSF_BPF_PROGRAM: i32 = 2;
pub const CS_CSF_CONTAINER_IMAGE: i32 = 3;
pub const CS_CSF_OPERATING_SYSTEM_IMAGE: i32 = 4;
/// `CS_CONFIG_TYPE` (v1.x).
pub const CS_CSEE_ACTIVATE: i32 = 1;
pub const CS_CSF_ACTIVATE: i32 = 2;
pub const CS_FDM_ACTIVATE: i32 = 3;
pub const CS_VENDOR_SPECIFIC: i32 = 4;
/// `CS_CONFIG_TYPE` (v0.5): the CSF (activation).
pub const CS_V05_CSF_TYPE: i32 = 1;
/// `CS_COMPUTE_ARG_TYPE`.
pub const CS_AFDM_TYPE: i32 = 1;
pub const CS_32BIT_VALUE_TYPE: i32 = 2;
pub const CS_64BIT_VALUE_TYPE: i32 = 3;
pub const CS_STREAM_TYPE: i32 = 4;
pub const CS_DESCRIPTOR_TYPE: i32 = 5;
/// `CS_BATCH_MODE`.
pub const CS_BATCH_SERIAL: i32 = 1;
pub const CS_BATCH_PARALLEL: i32 = 2;
pub const CS_BATCH_HYBRID: i32 = 3;
/// `CS_BATCH_REQ_TYPE`.
pub const CS_COPY_AFDM: i32 = 1;
pub const CS_STORAGE_IO: i32 = 2;
pub const CS_QUEUE_COMPUTE: i32 = 3;
/// `CS_STAT_TYPE`.
pub const CS_STAT_CSE_USAGE: i32 = 1;
pub const CS_STAT_CSX_MEM_USAGE: i32 = 2;
pub const CS_STAT_FUNCTION: i32 = 3;
/// `CS_CAP_TYPE`.
pub const CS_CAPABILITY_CSX_TEMP: i32 = 1;
pub const CS_CAPABILITY_CSX_MAX_IOS: i32 = 2;
/// `CS_STREAM_TYPE` (the stream kind of `csAllocStream`).
pub const CS_STREAM_COMPUTE_TYPE: i32 = 1;
/// `CS_LIBRARY_SUPPORT`.
pub const CS_FILE_SYSTEMS_SUPPORTED: i32 = 1;
/// `CS_PLUGIN_TYPE` (bits).
pub const CS_PLUGIN_COMPUTE: i32 = 1;
pub const CS_PLUGIN_NVME: i32 = 2;
pub const CS_PLUGIN_FILE_SYSTEM: i32 = 4;
pub const CS_PLUGIN_CUSTOM: i32 = 8;

// ---- csx extensions: outside every spec numbering. ----

/// `CsCSFDownloadInfo.SubType` / `CsDownloadInfo.SubType` for eBPF: an ELF object.
pub const CSX_BPF_ELF: i32 = 0;
/// ... raw eBPF bytecode.
pub const CSX_BPF_RAW: i32 = 0x10000;
/// `Index` of a download: the first empty slot.
pub const CSX_ANY_INDEX: i32 = -1;
/// `CsConfigInfo.Type`: deactivate the CSF in slot `Index`.
pub const CSX_CSF_DEACTIVATE: i32 = 0x10001;
/// `CsConfigInfo.SubType` of `CS_CSF_ACTIVATE`: the device's best engine.
pub const CSX_ENGINE_DEFAULT: i32 = 0;
pub const CSX_ENGINE_INTERPRETER: i32 = 1;
pub const CSX_ENGINE_JIT: i32 = 2;
/// The LBA size of block I/O.
pub const CSX_BLOCK_SIZE: u64 = 512;
/// The most ranges one block request may name.
pub const CSX_BLOCK_RANGES_MAX: i32 = 64;
/// The most arguments one compute request takes.
pub const CSX_COMPUTE_ARGS_MAX: i32 = 64;
/// `Before`/`After` of `csAddBatchEntry`: no edge.
pub const CSX_BATCH_INDEX_NONE: u32 = u32::MAX;
/// The most entries one batch holds.
pub const CSX_BATCH_ENTRIES_MAX: i32 = 1024;

/// `CsMemFlags`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsMemFlags {
    /// The FDM (memory namespace); csx devices have one, id 0.
    pub fdm_id: u32,
    pub flags: i32,
    /// The byte for `CS_FDM_FILL` (0..=255).
    pub fill_value: u32,
}

/// A place in device memory: an allocation and an offset into it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsDevAfdm {
    pub mem_handle: CsMemHandle,
    pub byte_offset: u64,
}

/// A host <-> device-memory copy.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsCopyMemRequest {
    pub type_: i32,
    pub host_vaddress: *mut c_void,
    pub dev_mem: CsDevAfdm,
    pub bytes: u32,
}

/// One run of blocks (v1.x).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsBlockRange {
    pub namespace_id: u32,
    pub start_lba: u64,
    pub num_blocks: u32,
}

/// Block I/O (v1.x): `NumRanges` ranges inline from `Range`, back to back from `DevMem`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsBlockIo {
    pub type_: i32,
    pub storage_index: u32,
    pub dev_mem: CsDevAfdm,
    pub num_ranges: i32,
    pub range: [CsBlockRange; 1],
}

/// Block I/O (v0.5): one range.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsV05BlockIo {
    pub type_: i32,
    pub storage_index: u32,
    pub namespace_id: u32,
    pub start_lba: u64,
    pub num_blocks: u32,
    pub dev_mem: CsDevAfdm,
}

/// File I/O: `Bytes` at `Offset` of the file `FileHandle` names.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsFileIo {
    pub type_: i32,
    pub file_handle: *mut c_void,
    pub offset: u64,
    pub bytes: u32,
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

/// A storage <-> device-memory request (v1.x).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct CsStorageRequest {
    pub mode: i32,
    pub dev_handle: CsDevHandle,
    pub u: CsStorageIo,
}

/// The v0.5 request body.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub union CsV05StorageIo {
    pub block_io: CsV05BlockIo,
    pub file_io: CsFileIo,
}

/// A storage request as v0.5 lays it out (its block I/O holds one range).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct CsV05StorageRequest {
    pub mode: i32,
    pub dev_handle: CsDevHandle,
    pub u: CsV05StorageIo,
}

/// `csDownload`'s program (v0.5).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsDownloadInfo {
    pub type_: i32,
    pub sub_type: i32,
    pub index: i32,
    pub unload: i32,
    pub length: i32,
    pub data_buffer: *const c_void,
}

/// The part of `CsCSFDownloadInfo` common to every resource (v1.x).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsCommonDownloadInfo {
    /// The CSF's name: on csx, the ELF function to run (empty: the first in `.text`).
    pub unique_name: [u8; 32],
    pub unload: i32,
    pub length: i32,
    pub data_buffer: *const c_void,
}

/// `csCSFDownload`'s CSF (v1.x).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsCsfDownloadInfo {
    pub type_: i32,
    pub sub_type: i32,
    pub global_id: u64,
    pub csee_id: u32,
    pub index: u32,
    pub common: CsCommonDownloadInfo,
}

/// A configuration change.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsConfigInfo {
    pub type_: i32,
    pub sub_type: i32,
    pub index: i32,
    pub length: i32,
    pub data_buffer: *mut c_void,
}

/// An argument's value, by `Type`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)] // A union: which field is live depends on a tag.
pub union CsComputeArgValue {
    pub dev_mem: CsDevAfdm,
    pub value64: u64,
    pub value32: u32,
    pub stream_handle: u64,
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

/// A compute request; the caller allocates room for `NumArgs` arguments from `Args`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsComputeRequest {
    pub dev_handle: CsDevHandle,
    pub csf_id: CsCsfId,
    pub num_args: i32,
    pub args: [CsComputeArg; 1],
}

/// An opaque batch handle.
pub type CsBatchHandle = *mut c_void;
/// An entry's index in its batch.
pub type CsBatchIndex = u32;

/// A batch entry's request, inline.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub union CsBatchRequestU {
    pub copy_mem: CsCopyMemRequest,
    pub storage_io: CsStorageRequest,
    pub compute: CsComputeRequest,
}

/// One batch entry: its type, its length in bytes (0: the union's) and the request.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct CsBatchRequest {
    pub req_type: i32,
    pub req_length: u32,
    pub u: CsBatchRequestU,
}

/// The v0.5 batch entry (its storage request is v0.5's).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub union CsV05BatchRequestU {
    pub copy_mem: CsCopyMemRequest,
    pub storage_io: CsV05StorageRequest,
    pub compute: CsComputeRequest,
}

/// A v0.5 batch entry.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct CsV05BatchRequest {
    pub req_type: i32,
    pub req_length: u32,
    pub u: CsV05BatchRequestU,
}

/// `CSxProperties.Flags` bits (C bit-fields of a `u64`, from bit 0).
pub const FLAG_FDM_IS_DEVICE_MANAGED: u64 = 1;
pub const FLAG_FDM_IS_HOST_VISIBLE: u64 = 2;
pub const FLAG_BATCH_REQUESTS_SUPPORTED: u64 = 4;
pub const FLAG_STREAMS_SUPPORTED: u64 = 8;

/// One CSE's properties.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CseProperties {
    pub hw_version: u16,
    pub sw_version: u16,
    pub unique_name: [u8; 32],
    pub num_builtin_functions: u16,
    pub max_requests_per_batch: u32,
    pub max_function_parameters_allowed: u32,
    pub max_concurrent_function_instances: u32,
}

/// What `csQueryDeviceProperties` reports (with `NumCSEs` CSE entries; csx has one).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsxProperties {
    pub hw_version: u16,
    pub sw_version: u16,
    pub vendor_id: u16,
    pub device_id: u16,
    pub friendly_name: [u8; 32],
    pub cf_min_mb: u32,
    pub fdm_in_mb: u32,
    /// Bit-fields: FDMIsDeviceManaged, FDMIsHostVisible, BatchRequestsSupported,
    /// StreamsSupported (bits 0..3).
    pub flags: u64,
    pub num_cses: u16,
    pub cse: [CseProperties; 1],
}

/// `csQueryDeviceCapabilities`: bit-fields of fixed functions (bit 0 Compression, ...).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CsCapabilities {
    pub functions: u64,
}

/// The capability bits in order (bit i = name i), matched against CSF names.
pub const CAPABILITY_NAMES: [&str; 13] = [
    "Compression",
    "Decompression",
    "Encryption",
    "Decryption",
    "RAID",
    "EC",
    "Dedup",
    "Hash",
    "Checksum",
    "RegEx",
    "DbFilter",
    "ImageEncode",
    "VideoEncode",
];

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CseUsage {
    pub power_on_mins: u32,
    pub idle_time_mins: u32,
    pub total_function_executions: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CsxMemory {
    pub total_allocated_fdm: u64,
    pub largest_block_available_fdm: u64,
    pub average_allocated_size_fdm: u64,
    pub total_free_csfm: u64,
    pub total_allocations_fdm: u64,
    pub total_deallocations_fdm: u64,
    pub total_fdm_to_host_in_mb: u64,
    pub total_host_to_fdm_in_mb: u64,
    pub total_fdm_to_storage_in_mb: u64,
    pub total_storage_to_fdm_in_mb: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CsfUsage {
    pub total_uptime_seconds: u64,
    pub total_executions: u64,
    pub shortest_time_usecs: u64,
    pub longest_time_usecs: u64,
    pub average_time_usecs: u64,
}

/// `csQueryDeviceStatistics`'s answer, by type.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub union CsStatsInfo {
    pub cse_details: CseUsage,
    pub memory_details: CsxMemory,
    pub function_details: CsfUsage,
}

/// An FDM a CSF can reach (`CSFIdInfo.FDMList`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FdmAccess {
    pub fdm_id: u32,
    pub relative_performance: u8,
    pub relative_power: u8,
    pub flags: u64,
}

/// One CSF of `csGetCSFId`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsfIdInfo {
    pub csf_id: CsCsfId,
    pub relative_performance: u8,
    pub count: u8,
    pub num_fdms: u8,
    pub fdm_list: *const FdmAccess,
}

/// One CSF of `csQueryCSFList`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsfUniqueId {
    pub unique_name: [u8; 32],
    pub global_id: u64,
}

/// One CSF of `csQueryDeviceForComputeList` (v0.5).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsFunctionInfo {
    pub function_id: u32,
    pub num_units: u8,
    pub name: [u8; 32],
}

/// `csxQueryDeviceInfo` (an extension): what csx knows of a device beyond CSxProperties.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsxDeviceInfo {
    pub uri: [u8; 256],
    pub sw_version: [u8; 32],
    pub abi_version: u32,
    pub engines: u32,
    pub fdm_size_bytes: u64,
    pub fdm_free_bytes: u64,
    pub nvm_size_bytes: u64,
    pub program_slots: u32,
    pub max_active_programs: u32,
    pub max_afdm_args: u32,
    pub max_program_bytes: u32,
}

/// One CSF of `csxQueryCSFList` (an extension).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CsxCsfInfo {
    pub unique_name: [u8; 32],
    /// A slot, or `CSX_BUILTIN_CSF_BASE` + a registered function id.
    pub csf_id: u32,
    /// 0: built-in (a registered device function, called by programs).
    pub downloadable: u32,
    pub active: u32,
}
