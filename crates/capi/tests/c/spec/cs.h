/*
 * A spec-shaped cs.h for the ABI test: the SNIA Computational Storage API v1.x
 * declarations as the published API lays them out (natural alignment), written for this
 * test from the spec's names and forms, independently of csx's sdk/include/cs_api.h.
 * A program built against it must link with libcsx and run. Only what the test uses
 * beyond the spec is declared at the end, as csx's extension.
 */
#ifndef SPEC_CS_H
#define SPEC_CS_H
#include <stdint.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef int32_t s32;
typedef uint32_t u32;
typedef uint64_t u64;

typedef void *CS_DEV_HANDLE;
typedef void *CS_CSE_HANDLE;
typedef void *CS_MEM_HANDLE;
typedef void *CS_MEM_PTR;
typedef void *CS_EVT_HANDLE;
typedef void *CS_REQ_HANDLE;
typedef void *CS_BATCH_HANDLE;
typedef unsigned int CS_BATCH_INDEX;
typedef uint64_t CS_STREAM_HANDLE;
typedef uint32_t CS_CSF_ID;

/* Alphabetical, as the spec lists them, from 0. */
typedef enum {
    CS_SUCCESS = 0,
    CS_COULD_NOT_MAP_MEMORY,
    CS_DEVICE_ERROR,
    CS_DEVICE_NOT_AVAILABLE,
    CS_DEVICE_NOT_READY,
    CS_DEVICE_NOT_PRESENT,
    CS_ENODEV,
    CS_ENOENT,
    CS_ENTITY_NOT_ON_DEVICE,
    CS_ENXIO,
    CS_ERROR_IN_EXECUTION,
    CS_FATAL_ERROR,
    CS_HANDLE_IN_USE,
    CS_INVALID_HANDLE,
    CS_INVALID_ARG,
    CS_INVALID_EVENT,
    CS_INVALID_ID,
    CS_INVALID_LENGTH,
    CS_INVALID_OPTION,
    CS_INVALID_FUNCTION,
    CS_INVALID_FUNCTION_NAME,
    CS_IO_TIMEOUT,
    CS_LOAD_ERROR,
    CS_MEMORY_IN_USE,
    CS_NO_PERMISSIONS,
    CS_NOT_DONE,
    CS_NOT_ENOUGH_MEMORY,
    CS_NO_SUCH_ENTITY_EXISTS,
    CS_OUT_OF_RESOURCES,
    CS_QUEUED,
    CS_UNKNOWN_MEMORY,
    CS_UNKNOWN_COMPUTE_FUNCTION,
    CS_UNSUPPORTED
} CS_STATUS;

typedef enum { CS_CSF_UNDEFINED = 0, CS_CSF_FPGA_BITSTREAM = 1, CS_CSF_BPF_PROGRAM = 2 } CS_CSF_RESOURCE_TYPE;
typedef enum { CS_CSEE_ACTIVATE = 1, CS_CSF_ACTIVATE = 2, CS_FDM_ACTIVATE = 3, CS_VENDOR_SPECIFIC = 4 } CS_CONFIG_TYPE;
typedef enum { CS_COPY_TO_DEVICE = 1, CS_COPY_FROM_DEVICE = 2 } CS_MEM_COPY_TYPE;
typedef enum { CS_STORAGE_BLOCK_IO = 1, CS_STORAGE_FILE_IO = 2 } CS_STORAGE_REQ_MODE;
typedef enum { CS_STORAGE_LOAD_TYPE = 1, CS_STORAGE_STORE_TYPE = 2 } CS_STORAGE_IO_TYPE;
typedef enum { CS_AFDM_TYPE = 1, CS_32BIT_VALUE_TYPE = 2, CS_64BIT_VALUE_TYPE = 3, CS_STREAM_TYPE_ = 4, CS_DESCRIPTOR_TYPE = 5 } CS_COMPUTE_ARG_TYPE;
typedef enum { CS_BATCH_SERIAL = 1, CS_BATCH_PARALLEL = 2, CS_BATCH_HYBRID = 3 } CS_BATCH_MODE;
typedef enum { CS_COPY_AFDM = 1, CS_STORAGE_IO = 2, CS_QUEUE_COMPUTE = 3 } CS_BATCH_REQ_TYPE;
typedef enum { CS_STAT_CSE_USAGE = 1, CS_STAT_CSx_MEM_USAGE = 2, CS_STAT_FUNCTION = 3 } CS_STAT_TYPE;
typedef enum { CS_FDM_CLEAR = 1, CS_FDM_FILL = 2 } CS_FDM_FLAG_TYPE;

typedef void (*csQueueCallbackFn)(void *QueueContext, CS_STATUS Status, u64 CompValue);

typedef struct { u32 FDMId; CS_FDM_FLAG_TYPE Flags; u32 FillValue; } CsMemFlags;
typedef struct { CS_MEM_HANDLE MemHandle; u64 ByteOffset; } CsDevAFDM;
typedef struct { CS_MEM_COPY_TYPE Type; void *HostVAddress; CsDevAFDM DevMem; unsigned int Bytes; } CsCopyMemRequest;
typedef struct { u32 NamespaceId; u64 StartLba; u32 NumBlocks; } CsBlockRange;
typedef struct {
    CS_STORAGE_IO_TYPE Type;
    u32 StorageIndex;
    CsDevAFDM DevMem;
    int NumRanges;
    CsBlockRange Range[1];
} CsBlockIo;
typedef struct { CS_STORAGE_IO_TYPE Type; void *FileHandle; u64 Offset; u32 Bytes; CsDevAFDM DevMem; } CsFileIo;
typedef struct {
    CS_STORAGE_REQ_MODE Mode;
    CS_DEV_HANDLE DevHandle;
    union { CsBlockIo BlockIo; CsFileIo FileIo; } u;
} CsStorageRequest;
typedef struct {
    CS_COMPUTE_ARG_TYPE Type;
    union { CsDevAFDM DevMem; u64 Value64; u32 Value32; CS_STREAM_HANDLE StreamHandle; } u;
} CsComputeArg;
typedef struct { CS_DEV_HANDLE DevHandle; CS_CSF_ID CSFId; s32 NumArgs; CsComputeArg Args[1]; } CsComputeRequest;
typedef struct {
    CS_BATCH_REQ_TYPE ReqType;
    u32 reqLength;
    union { CsCopyMemRequest CopyMem; CsStorageRequest StorageIo; CsComputeRequest Compute; } u;
} CsBatchRequest;
typedef struct { CS_CONFIG_TYPE Type; int SubType; int Index; int Length; void *DataBuffer; } CsConfigInfo;
typedef struct { char UniqueName[32]; int Unload; int Length; void *DataBuffer; } CsCommonDownloadInfo;
typedef struct {
    CS_CSF_RESOURCE_TYPE type;
    int SubType;
    u64 GlobalId;
    u32 CSEEId;
    u32 Index;
    CsCommonDownloadInfo common;
} CsCSFDownloadInfo;
typedef struct {
    u64 DeviceManaged : 1, HostVisible : 1, ClearContentsSupported : 1, InvalidateContentSupported : 1, Reserved : 60;
} FDMFlags;
typedef struct { u32 FDMId; u8 RelativePerformance; u8 RelativePower; FDMFlags Flags; } FDMAccess;
typedef struct { CS_CSF_ID CSFId; u8 RelativePerformance; u8 Count; u8 NumFDMs; FDMAccess *FDMList; } CSFIdInfo;
typedef struct { char UniqueName[32]; u64 GlobalId; } CSFUniqueId;
typedef struct {
    u16 HwVersion, SwVersion;
    char UniqueName[32];
    u16 NumBuiltinFunctions;
    u32 MaxRequestsPerBatch, MaxFunctionParametersAllowed, MaxConcurrentFunctionInstances;
} CSEProperties;
typedef struct {
    u16 HwVersion, SwVersion, VendorId, DeviceId;
    char FriendlyName[32];
    u32 CFMinMB, FDMinMB;
    struct {
        u64 FDMIsDeviceManaged : 1, FDMIsHostVisible : 1, BatchRequestsSupported : 1, StreamsSupported : 1, Reserved : 60;
    } Flags;
    u16 NumCSEs;
    CSEProperties CSE[1];
} CSxProperties;
typedef struct { u32 PowerOnMins, IdleTimeMins; u64 TotalFunctionExecutions; } CSEUsage;
typedef struct {
    u64 TotalAllocatedFDM, LargestBlockAvailableFDM, AverageAllocatedSizeFDM, TotalFreeCSFM,
        TotalAllocationsFDM, TotalDeAllocationsFDM, TotalFDMtoHostinMB, TotalHosttoFDMinMB,
        TotalFDMtoStorageinMB, TotalStoragetoFDMinMB;
} CSxMemory;
typedef struct { u64 TotalUptimeSeconds, TotalExecutions, ShortestTimeUsecs, LongestTimeUsecs, AverageTimeUsecs; } CSFUsage;
typedef union { CSEUsage CSEDetails; CSxMemory MemoryDetails; CSFUsage FunctionDetails; } CsStatsInfo;

extern CS_STATUS csOpenCSx(char *DevName, void *DevContext, CS_DEV_HANDLE *DevHandle);
extern CS_STATUS csCloseCSx(CS_DEV_HANDLE DevHandle);
extern CS_STATUS csAllocMem(CS_DEV_HANDLE DevHandle, int Bytes, const CsMemFlags *MemFlags,
                            CS_MEM_HANDLE *MemHandle, CS_MEM_PTR *VAddressPtr);
extern CS_STATUS csFreeMem(CS_MEM_HANDLE MemHandle, const CsMemFlags *MemFlags);
extern CS_STATUS csInitMem(CS_MEM_HANDLE MemHandle, unsigned long ByteOffset, int Bytes, const CsMemFlags *MemFlags);
extern CS_STATUS csQueueStorageRequest(const CsStorageRequest *Req, void *Context, csQueueCallbackFn CallbackFn,
                                       CS_EVT_HANDLE EventHandle, CS_REQ_HANDLE *ReqHandle, u64 *CompValue);
extern CS_STATUS csQueueCopyMemRequest(const CsCopyMemRequest *CopyReq, void *Context, csQueueCallbackFn CallbackFn,
                                       CS_EVT_HANDLE EventHandle, CS_REQ_HANDLE *ReqHandle, u64 *CompValue);
extern CS_STATUS csGetCSFId(CS_CSE_HANDLE DevHandle, const char *CSFName, u64 Globalid, int *Length, int *Count,
                            CSFIdInfo *Buffer);
extern CS_STATUS csQueueComputeRequest(CsComputeRequest *Req, void *Context, csQueueCallbackFn CallbackFn,
                                       CS_EVT_HANDLE EventHandle, u64 *CompValue);
extern void csHelperSetComputeArg(CsComputeArg *ArgPtr, CS_COMPUTE_ARG_TYPE Type, ...);
extern CS_STATUS csAllocBatchRequest(CS_BATCH_MODE Mode, int MaxReqs, CS_BATCH_HANDLE *BatchHandle);
extern CS_STATUS csFreeBatchRequest(CS_BATCH_HANDLE BatchHandle);
extern CS_STATUS csAddBatchEntry(CS_BATCH_HANDLE BatchHandle, CsBatchRequest *Req, CS_BATCH_INDEX Before,
                                 CS_BATCH_INDEX After, CS_BATCH_INDEX *Curr);
extern CS_STATUS csQueueBatchRequest(CS_BATCH_HANDLE BatchHandle, void *Context, csQueueCallbackFn CallbackFn,
                                     CS_EVT_HANDLE EventHandle, u32 *CompValue);
extern CS_STATUS csCreateEvent(CS_EVT_HANDLE *EventHandle);
extern CS_STATUS csDeleteEvent(CS_EVT_HANDLE EventHandle);
extern CS_STATUS csPollEvent(CS_EVT_HANDLE EventHandle, void *Context);
extern CS_STATUS csQueryDeviceProperties(CS_DEV_HANDLE DevHandle, int *Length, CSxProperties *Buffer);
extern CS_STATUS csQueryDeviceStatistics(CS_DEV_HANDLE DevHandle, CS_STAT_TYPE Type, void *Identifier,
                                         CsStatsInfo *Stats);
extern CS_STATUS csConfig(CS_CSE_HANDLE CSEHandle, CsConfigInfo *Info);
extern CS_STATUS csCSFDownload(CS_DEV_HANDLE DevHandle, const CsCSFDownloadInfo *Info, u32 *CSFId);

/* csx's extension the test needs (how a csx file becomes a FileHandle). */
extern CS_STATUS csxOpenFile(CS_DEV_HANDLE DevHandle, const char *Path, void **FileHandle);
#endif
