/*
 * api_test: the SNIA CS API over one csx device, from C. Run by crates/capi/tests/c_api.rs:
 *   api_test DEVICE_URI FILTER_ELF [PATH_IN_A_MOUNT_OF_IT]
 * The device holds /data/nums: the u64 values 0..N-1 (little-endian). Every call is checked
 * once with good arguments and at least once with bad ones (null and freed handles,
 * lengths over limits, unknown names and options), each asserting the exact status.
 * Queued requests (a callback or an event) complete on the library's worker: the test
 * waits for them (a 60 s guard against a hang, never a speed check), checks callback order,
 * aborts a running eBPF loop, a queued request, a finished one and one twice, and closes
 * the device with requests in flight.
 * Prints "api_test: ok" and exits 0 when every check passed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cs_api.h"

#define N 1000
#define LO 100
#define HI 199

static int failures;

#define EXPECT(call, want)                                                                 \
    do {                                                                                   \
        CS_STATUS got_ = (call);                                                           \
        if (got_ != (want)) {                                                              \
            fprintf(stderr, "%s:%d: %s returned %d, expected %s (%d); last error: %s\n",  \
                    __FILE__, __LINE__, #call, got_, #want, (int)(want), csxGetLastError()); \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define ASSERT(cond)                                                                       \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);   \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

/* Written by callbacks on the library's worker thread: the atomic counter publishes the
 * plain fields written before it. */
static atomic_int callbacks;
static CS_STATUS callback_status = -1;
static uint64_t callback_value;

static void on_done(void *ctx, CS_STATUS status, uint64_t value)
{
    ASSERT(ctx == &callbacks);
    callback_status = status;
    callback_value = value;
    atomic_fetch_add(&callbacks, 1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until *counter reaches want; a guard of 60 s turns a hang into a failure. */
static void wait_count(atomic_int *counter, int want, int line)
{
    double deadline = now_s() + 60;
    while (atomic_load(counter) < want && now_s() < deadline)
        sleep_ms(1);
    if (atomic_load(counter) < want) {
        fprintf(stderr, "%s:%d: waited 60 s for %d completions, got %d\n", __FILE__, line, want,
                atomic_load(counter));
        failures++;
    }
}

/* Polls an event until it has a completion (60 s guard). */
static CS_STATUS poll_event(CS_EVT_HANDLE evt, void **ctx)
{
    double deadline = now_s() + 60;
    CS_STATUS st;
    while ((st = csPollEvent(evt, ctx)) == CS_NOT_DONE && now_s() < deadline)
        sleep_ms(1);
    return st;
}

/* Callback order: each callback appends its context (an index) to order[]. */
#define ORDERED 16
static atomic_int ordered;
static uintptr_t order[ORDERED * 2];
static CS_STATUS order_status[ORDERED * 2];

static void on_ordered(void *ctx, CS_STATUS status, uint64_t value)
{
    (void)value;
    int at = atomic_load(&ordered);
    if (at < ORDERED * 2) {
        order[at] = (uintptr_t)ctx;
        order_status[at] = status;
    }
    atomic_fetch_add(&ordered, 1);
}

/* A loop of 2^64 iterations with an exit (mov r0, 0; add r0, 1; jne r0, 0, -2; exit):
 * only fuel, the time limit or an abort ends it. */
static const unsigned char SPIN[] = {
    0xb7, 0, 0, 0, 0, 0, 0, 0,
    0x07, 0, 0, 0, 1, 0, 0, 0,
    0x55, 0, 0xfe, 0xff, 0, 0, 0, 0,
    0x95, 0, 0, 0, 0, 0, 0, 0,
};

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static CsComputeRequest *compute_request(CS_DEV_HANDLE dev, CS_CSF_ID id, int nargs)
{
    CsComputeRequest *req = calloc(1, sizeof(CsComputeRequest) + nargs * sizeof(CsComputeArg));
    req->DevHandle = dev;
    req->CSFId = id;
    req->NumArgs = nargs;
    return req;
}

/* A v1.x CSF download of the eBPF image (len bytes at data) into slot index. */
static CsCSFDownloadInfo csf_info(int sub_type, uint32_t index, int unload, int len, const void *data)
{
    CsCSFDownloadInfo info;
    memset(&info, 0, sizeof info);
    info.type = CS_CSF_BPF_PROGRAM;
    info.SubType = sub_type;
    info.Index = index;
    info.common.Unload = unload;
    info.common.Length = len;
    info.common.DataBuffer = (void *)data;
    return info;
}

/* A batch entry holding a copy of the request (len bytes) inline; free() it. */
static CsBatchRequest *batch_entry(CS_BATCH_REQ_TYPE type, const void *request, size_t len)
{
    size_t size = offsetof(CsBatchRequest, u) + len;
    if (size < sizeof(CsBatchRequest))
        size = sizeof(CsBatchRequest);
    CsBatchRequest *e = calloc(1, size);
    e->ReqType = type;
    e->reqLength = (u32)(offsetof(CsBatchRequest, u) + len);
    memcpy(&e->u, request, len);
    return e;
}

/* The first CSF id csGetCSFId gives for name. */
static CS_STATUS find_id(CS_DEV_HANDLE dev, const char *name, CS_CSF_ID *id)
{
    CSFIdInfo infos[8];
    int len = sizeof infos, count = 0;
    CS_STATUS st = csGetCSFId(dev, name, 0, &len, &count, infos);
    if (st == CS_SUCCESS)
        *id = infos[0].CSFId;
    return st;
}

static CsConfigInfo config(CS_CONFIG_TYPE type, int sub_type, CS_CSF_ID index)
{
    CsConfigInfo c = {type, sub_type, (int)index, 0, NULL};
    return c;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: api_test DEVICE_URI FILTER_ELF [PATH_IN_A_MOUNT_OF_IT]\n");
        return 2;
    }
    const char *uri = argv[1];
    size_t elf_len = 0;
    unsigned char *elf = read_file(argv[2], &elf_len);
    if (!elf) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 2;
    }

    /* Discovery: CSX_DEVICES names the device. */
    int len = 0;
    EXPECT(csQueryCSxList(&len, NULL), CS_SUCCESS);
    ASSERT(len == (int)strlen(uri) + 1);
    char small[2];
    int small_len = sizeof small;
    EXPECT(csQueryCSxList(&small_len, small), CS_INVALID_LENGTH);
    ASSERT(small_len == len);
    char *list = malloc((size_t)len);
    EXPECT(csQueryCSxList(&len, list), CS_SUCCESS);
    ASSERT(strcmp(list, uri) == 0);
    free(list);
    EXPECT(csQueryCSxList(NULL, NULL), CS_INVALID_ARG);

    /* Open. */
    CS_DEV_HANDLE dev = NULL;
    EXPECT(csOpenCSx(NULL, NULL, &dev), CS_INVALID_ARG);
    EXPECT(csOpenCSx(uri, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csOpenCSx("bogus://x", NULL, &dev), CS_ENODEV);
    EXPECT(csOpenCSx(uri, NULL, &dev), CS_SUCCESS);
    ASSERT(dev != NULL);
    EXPECT(csCloseCSx(NULL), CS_INVALID_HANDLE);
    EXPECT(csCloseCSx((CS_DEV_HANDLE)(uintptr_t)0x7fff1234), CS_INVALID_HANDLE);

    /* Device memory. */
    CS_MEM_HANDLE in = NULL, out = NULL, tmp = NULL;
    CsMemFlags clear = {0, CS_FDM_CLEAR, 0};
    EXPECT(csAllocMem(dev, N * 8, &clear, &in, NULL), CS_SUCCESS);
    EXPECT(csAllocMem(dev, N * 8, NULL, &out, NULL), CS_SUCCESS);
    EXPECT(csAllocMem(NULL, 8, NULL, &tmp, NULL), CS_INVALID_HANDLE);
    EXPECT(csAllocMem(dev, 8, NULL, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csAllocMem(dev, 0, NULL, &tmp, NULL), CS_INVALID_LENGTH);
    EXPECT(csAllocMem(dev, -8, NULL, &tmp, NULL), CS_INVALID_LENGTH);
    EXPECT(csAllocMem(dev, 1 << 30, NULL, &tmp, NULL), CS_NOT_ENOUGH_MEMORY);
    CsMemFlags big_fill = {0, CS_FDM_FILL, 256};
    EXPECT(csAllocMem(dev, 8, &big_fill, &tmp, NULL), CS_INVALID_ARG);
    CsMemFlags bad_flags = {0, (CS_FDM_FLAG_TYPE)99, 0};
    EXPECT(csAllocMem(dev, 8, &bad_flags, &tmp, NULL), CS_INVALID_OPTION);
    CsMemFlags bad_fdm = {7, (CS_FDM_FLAG_TYPE)0, 0};
    EXPECT(csAllocMem(dev, 8, &bad_fdm, &tmp, NULL), CS_INVALID_ID);
    EXPECT(csAllocMem(in, 8, NULL, &tmp, NULL), CS_INVALID_HANDLE); /* a memory handle */

    /* csInitMem + host <-> device copies. */
    EXPECT(csAllocMem(dev, 64, NULL, &tmp, NULL), CS_SUCCESS);
    CsMemFlags fill = {0, CS_FDM_FILL, 0xab};
    EXPECT(csInitMem(tmp, 8, 16, &fill), CS_SUCCESS);
    EXPECT(csInitMem(tmp, 60, 16, &fill), CS_INVALID_LENGTH);
    EXPECT(csInitMem(NULL, 0, 8, NULL), CS_INVALID_HANDLE);
    unsigned char host[64];
    memset(host, 0x11, sizeof host);
    uint64_t moved = 0;
    CsCopyMemRequest copy = {CS_COPY_FROM_DEVICE, host, {tmp, 0}, 32};
    EXPECT(csQueueCopyMemRequest(&copy, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == 32);
    ASSERT(host[7] == 0 && host[8] == 0xab && host[23] == 0xab && host[24] == 0);
    unsigned char msg[16] = "hello, device!";
    CsCopyMemRequest put = {CS_COPY_TO_DEVICE, msg, {tmp, 40}, sizeof msg};
    EXPECT(csQueueCopyMemRequest(&put, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
    CsCopyMemRequest get = {CS_COPY_FROM_DEVICE, host, {tmp, 40}, sizeof msg};
    EXPECT(csQueueCopyMemRequest(&get, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
    ASSERT(memcmp(host, msg, sizeof msg) == 0);
    CsCopyMemRequest too_long = {CS_COPY_FROM_DEVICE, host, {tmp, 0}, 65};
    EXPECT(csQueueCopyMemRequest(&too_long, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    CsCopyMemRequest null_host = {CS_COPY_TO_DEVICE, NULL, {tmp, 0}, 8};
    EXPECT(csQueueCopyMemRequest(&null_host, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ARG);
    CsCopyMemRequest bad_type = {(CS_MEM_COPY_TYPE)7, host, {tmp, 0}, 8};
    EXPECT(csQueueCopyMemRequest(&bad_type, NULL, NULL, NULL, NULL, NULL), CS_INVALID_OPTION);
    EXPECT(csQueueCopyMemRequest(NULL, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csFreeMem(tmp, NULL), CS_SUCCESS);
    EXPECT(csFreeMem(tmp, NULL), CS_INVALID_HANDLE); /* freed */
    EXPECT(csQueueCopyMemRequest(&get, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);
    EXPECT(csFreeMem(NULL, NULL), CS_INVALID_HANDLE);

    /* Storage -> device memory, file mode. */
    CsStorageRequest load;
    memset(&load, 0, sizeof load);
    load.Mode = CS_STORAGE_FILE_IO;
    load.DevHandle = dev;
    load.u.FileIo.Type = CS_STORAGE_LOAD_TYPE;
    void *nums_file = NULL, *missing_file = NULL, *copy_file = NULL;
    EXPECT(csxOpenFile(dev, "/data/nums", &nums_file), CS_SUCCESS);
    EXPECT(csxOpenFile(dev, "/data/no-such-file", &missing_file), CS_SUCCESS);
    EXPECT(csxOpenFile(dev, "/data/copy", &copy_file), CS_SUCCESS);
    EXPECT(csxOpenFile(dev, NULL, &copy_file), CS_INVALID_ARG);
    EXPECT(csxOpenFile(NULL, "/x", &copy_file), CS_INVALID_HANDLE);
    load.u.FileIo.FileHandle = nums_file;
    load.u.FileIo.Offset = 0;
    load.u.FileIo.Bytes = N * 8;
    load.u.FileIo.DevMem.MemHandle = in;
    load.u.FileIo.DevMem.ByteOffset = 0;
    moved = 0;
    EXPECT(csQueueStorageRequest(&load, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == N * 8);
    CsStorageRequest missing = load;
    missing.u.FileIo.FileHandle = missing_file;
    EXPECT(csQueueStorageRequest(&missing, NULL, NULL, NULL, NULL, NULL), CS_ENOENT);
    CsStorageRequest overflow = load;
    overflow.u.FileIo.Bytes = N * 8 + 1;
    EXPECT(csQueueStorageRequest(&overflow, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    CsStorageRequest bad_mode = load;
    bad_mode.Mode = (CS_STORAGE_REQ_MODE)9;
    EXPECT(csQueueStorageRequest(&bad_mode, NULL, NULL, NULL, NULL, NULL), CS_INVALID_OPTION);
    CsStorageRequest no_file = load;
    no_file.u.FileIo.FileHandle = NULL;
    EXPECT(csQueueStorageRequest(&no_file, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);
    no_file.u.FileIo.FileHandle = in; /* a memory handle, not a file */
    EXPECT(csQueueStorageRequest(&no_file, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);

    /* Device memory -> storage, file mode, and back. */
    CsStorageRequest store = load;
    store.u.FileIo.Type = CS_STORAGE_STORE_TYPE;
    store.u.FileIo.FileHandle = copy_file;
    store.u.FileIo.Bytes = 80;
    EXPECT(csQueueStorageRequest(&store, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == 80);
    CsStorageRequest reload = load;
    reload.u.FileIo.FileHandle = copy_file;
    reload.u.FileIo.Bytes = 80;
    reload.u.FileIo.DevMem.MemHandle = out;
    EXPECT(csQueueStorageRequest(&reload, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    uint64_t back[10];
    CsCopyMemRequest get_back = {CS_COPY_FROM_DEVICE, back, {out, 0}, sizeof back};
    EXPECT(csQueueCopyMemRequest(&get_back, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
    for (int i = 0; i < 10; i++)
        ASSERT(back[i] == (uint64_t)i);

    /* Block mode: LBAs of the NVM namespace. */
    CsBlockRange blocks = {1, 0, 2};
    CsStorageRequest block;
    memset(&block, 0, sizeof block);
    block.Mode = CS_STORAGE_BLOCK_IO;
    block.DevHandle = dev;
    block.u.BlockIo.Type = CS_STORAGE_LOAD_TYPE;
    block.u.BlockIo.NumRanges = 1;
    block.u.BlockIo.Range[0] = blocks;
    block.u.BlockIo.DevMem.MemHandle = out;
    EXPECT(csQueueStorageRequest(&block, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == 2 * CSX_BLOCK_SIZE);
    CsBlockRange other_ns = {2, 0, 1};
    CsStorageRequest bad_ns = block;
    bad_ns.u.BlockIo.Range[0] = other_ns;
    EXPECT(csQueueStorageRequest(&bad_ns, NULL, NULL, NULL, NULL, NULL), CS_ENTITY_NOT_ON_DEVICE);
    CsStorageRequest block_store = block;
    block_store.u.BlockIo.Type = CS_STORAGE_STORE_TYPE;
    EXPECT(csQueueStorageRequest(&block_store, NULL, NULL, NULL, NULL, NULL), CS_UNSUPPORTED);
    CsStorageRequest no_ranges = block;
    no_ranges.u.BlockIo.NumRanges = 0;
    EXPECT(csQueueStorageRequest(&no_ranges, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    CsBlockRange huge = {1, 0, 100000};
    CsStorageRequest too_many = block;
    too_many.u.BlockIo.Range[0] = huge;
    EXPECT(csQueueStorageRequest(&too_many, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);

    /* Download and activate the filter (a downloadable CSF). */
    CS_CSF_ID id = 9999;
    CsCSFDownloadInfo dl = csf_info(CSX_BPF_ELF, (uint32_t)CSX_ANY_INDEX, 0, (int)elf_len, elf);
    EXPECT(csCSFDownload(dev, &dl, &id), CS_SUCCESS);
    ASSERT(id < 64);
    /* A malformed image fails at download or, at the latest, at activation. */
    CsCSFDownloadInfo garbage = csf_info(CSX_BPF_ELF, (uint32_t)CSX_ANY_INDEX, 0, 16, "not an elf file");
    CS_CSF_ID gid = 0;
    CS_STATUS st = csCSFDownload(dev, &garbage, &gid);
    if (st == CS_SUCCESS) {
        CsConfigInfo act = config(CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, gid);
        EXPECT(csConfig(dev, &act), CS_LOAD_ERROR);
        CsCSFDownloadInfo drop = csf_info(CSX_BPF_ELF, gid, 1, 0, NULL);
        EXPECT(csCSFDownload(dev, &drop, NULL), CS_SUCCESS);
    } else {
        EXPECT(st, CS_LOAD_ERROR);
    }
    CsCSFDownloadInfo fpga = dl;
    fpga.type = CS_CSF_FPGA_BITSTREAM;
    EXPECT(csCSFDownload(dev, &fpga, NULL), CS_UNSUPPORTED);
    CsCSFDownloadInfo empty = dl;
    empty.common.Length = 0;
    EXPECT(csCSFDownload(dev, &empty, NULL), CS_INVALID_LENGTH);
    CsCSFDownloadInfo too_big = dl;
    too_big.common.Length = 1 << 30;
    EXPECT(csCSFDownload(dev, &too_big, NULL), CS_INVALID_LENGTH);
    CsCSFDownloadInfo no_entry = dl;
    strcpy(no_entry.common.UniqueName, "no_such_function");
    ASSERT(csCSFDownload(dev, &no_entry, NULL) == CS_LOAD_ERROR);
    EXPECT(csCSFDownload(dev, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csCSFDownload(NULL, &dl, NULL), CS_INVALID_HANDLE);
    /* v0.5 csDownload: Type CS_BPF_PROGRAM (2), no id returned. */
    CsDownloadInfo v05 = {CS_BPF_PROGRAM, CSX_BPF_ELF, CSX_ANY_INDEX, 0, (int)elf_len, elf};
    CsDownloadInfo v05_fpga = v05;
    v05_fpga.Type = CS_FPGA_BITSTREAM;
    EXPECT(csDownload(dev, &v05_fpga), CS_UNSUPPORTED);
    EXPECT(csDownload(dev, NULL), CS_INVALID_ARG);

    CS_CSF_ID found = 9999;
    EXPECT(find_id(dev, "filter", &found), CS_SUCCESS);
    ASSERT(found == id);
    EXPECT(find_id(dev, "no_such_csf", &found), CS_INVALID_FUNCTION_NAME);
    {
        int glen = 0, gcount = 0;
        EXPECT(csGetCSFId(dev, "filter", 0, &glen, &gcount, NULL), CS_SUCCESS);
        ASSERT(gcount == 1 && glen == (int)sizeof(CSFIdInfo));
        CSFIdInfo by_id;
        glen = sizeof by_id;
        EXPECT(csGetCSFId(dev, NULL, id, &glen, &gcount, &by_id), CS_SUCCESS);
        ASSERT(by_id.CSFId == id && by_id.NumFDMs == 1 && by_id.FDMList && by_id.FDMList[0].FDMId == 0);
        glen = 1;
        EXPECT(csGetCSFId(dev, "filter", 0, &glen, &gcount, &by_id), CS_INVALID_LENGTH);
        EXPECT(csGetCSFId(dev, "filter", 0, NULL, &gcount, &by_id), CS_INVALID_ARG);
        CS_FUNCTION_ID fid = 0;
        EXPECT(csGetFunction(dev, "filter", NULL, &fid), CS_SUCCESS);
        ASSERT(fid == id);
        EXPECT(csGetFunction(dev, "nope", NULL, &fid), CS_INVALID_FUNCTION_NAME);
        EXPECT(csGetFunction(dev, NULL, NULL, &fid), CS_INVALID_ARG);
    }

    /* Compute before activation: the CSF exists but is not active. */
    CsComputeRequest *req = compute_request(dev, id, 4);
    csHelperSetComputeArg(&req->Args[0], CS_AFDM_TYPE, in, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[1], CS_AFDM_TYPE, out, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[2], CS_64BIT_VALUE_TYPE, (uint64_t)LO);
    csHelperSetComputeArg(&req->Args[3], (CS_COMPUTE_ARG_TYPE)42, (uint64_t)HI);
    ASSERT(req->Args[3].Type == 42);
    csHelperSetComputeArg(NULL, CS_64BIT_VALUE_TYPE, (uint64_t)HI); /* ignored */
    uint64_t r0 = 0;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, &r0), CS_INVALID_OPTION);
    csHelperSetComputeArg(&req->Args[3], CS_64BIT_VALUE_TYPE, (uint64_t)HI);
    ASSERT(req->Args[3].Type == CS_64BIT_VALUE_TYPE && req->Args[3].u.Value64 == HI);
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, &r0), CS_INVALID_FUNCTION);

    CsConfigInfo activate = config(CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, id);
    EXPECT(csConfig(dev, &activate), CS_SUCCESS);
    CsConfigInfo bad_engine = config(CS_CSF_ACTIVATE, 17, id);
    EXPECT(csConfig(dev, &bad_engine), CS_INVALID_OPTION);
    CsConfigInfo empty_slot = config(CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, 63);
    EXPECT(csConfig(dev, &empty_slot), CS_UNKNOWN_COMPUTE_FUNCTION);
    CsConfigInfo no_slot = config(CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, 1000000);
    CsConfigInfo csee = config(CS_CSEE_ACTIVATE, 0, 0);
    EXPECT(csConfig(dev, &csee), CS_UNSUPPORTED);
    EXPECT(csConfig(dev, &no_slot), CS_INVALID_ID);
    EXPECT(csConfig(dev, NULL), CS_INVALID_ARG);

    /* Compute, synchronously: keeps LO..=HI, r0 = 8 * kept. */
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, &r0), CS_SUCCESS);
    ASSERT(r0 == 8 * (HI - LO + 1));
    uint64_t kept[HI - LO + 1];
    CsCopyMemRequest get_kept = {CS_COPY_FROM_DEVICE, kept, {out, 0}, sizeof kept};
    EXPECT(csQueueCopyMemRequest(&get_kept, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
    for (int i = 0; i < HI - LO + 1; i++)
        ASSERT(kept[i] == (uint64_t)(LO + i));

    /* Host mappings (embedded and shm devices; tcp cannot map): the mapping is the
     * device memory, so writes through it are what a request reads, and the device's
     * changes are in it when the request completes. */
    {
        CS_MEM_HANDLE min = NULL, mout = NULL;
        CS_MEM_PTR vin = NULL, vout = NULL;
        CsMemFlags fill_ab = {0, CS_FDM_FILL, 0xab};
        CS_STATUS ms = csAllocMem(dev, 64, &fill_ab, &min, &vin);
        if (strncmp(uri, "tcp://", 6) == 0) {
            EXPECT(ms, CS_COULD_NOT_MAP_MEMORY);
            ASSERT(min == NULL && vin == NULL);
        } else {
            EXPECT(ms, CS_SUCCESS);
            EXPECT(csAllocMem(dev, 64, NULL, &mout, &vout), CS_SUCCESS);
            ASSERT(vin != NULL && vout != NULL);
            unsigned char *bytes = vin;
            ASSERT(bytes[0] == 0xab && bytes[63] == 0xab);
            uint64_t *xin = vin, *xout = vout;
            for (int i = 0; i < 8; i++)
                xin[i] = 95 + 20 * (uint64_t)i; /* 115..195 are kept: 5 values */
            CsComputeRequest *mreq = compute_request(dev, id, 4);
            csHelperSetComputeArg(&mreq->Args[0], CS_AFDM_TYPE, min, (uint64_t)0);
            csHelperSetComputeArg(&mreq->Args[1], CS_AFDM_TYPE, mout, (uint64_t)0);
            csHelperSetComputeArg(&mreq->Args[2], CS_64BIT_VALUE_TYPE, (uint64_t)LO);
            csHelperSetComputeArg(&mreq->Args[3], CS_64BIT_VALUE_TYPE, (uint64_t)HI);
            uint64_t mr0 = 0;
            EXPECT(csQueueComputeRequest(mreq, NULL, NULL, NULL, &mr0), CS_SUCCESS);
            ASSERT(mr0 == 5 * 8);
            ASSERT(xout[0] == 115 && xout[4] == 195);
            /* Queued with a callback: the mapping holds the result once it has run. */
            xin[0] = 100;
            atomic_store(&callbacks, 0);
            EXPECT(csQueueComputeRequest(mreq, &callbacks, on_done, NULL, NULL), CS_QUEUED);
            wait_count(&callbacks, 1, __LINE__);
            ASSERT(callback_status == CS_SUCCESS && callback_value == 6 * 8 && xout[0] == 100);
            /* Copies and csInitMem are coherent with the mapping. */
            uint64_t seen[8] = {0};
            CsCopyMemRequest rd = {CS_COPY_FROM_DEVICE, seen, {min, 0}, sizeof seen};
            EXPECT(csQueueCopyMemRequest(&rd, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
            ASSERT(seen[0] == 100 && seen[7] == 235);
            uint64_t put_val = 4242;
            CsCopyMemRequest wr = {CS_COPY_TO_DEVICE, &put_val, {min, 8}, 8};
            EXPECT(csQueueCopyMemRequest(&wr, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
            ASSERT(xin[1] == 4242 && xin[0] == 100);
            CsMemFlags zero = {0, CS_FDM_CLEAR, 0};
            EXPECT(csInitMem(min, 16, 16, &zero), CS_SUCCESS);
            ASSERT(xin[2] == 0 && xin[3] == 0 && xin[4] == 175 && xin[1] == 4242);
            /* A mapping of a tcp-less device also crosses handles of the same device. */
            free(mreq);
            EXPECT(csFreeMem(min, NULL), CS_SUCCESS);
            EXPECT(csFreeMem(mout, &zero), CS_SUCCESS);
            EXPECT(csFreeMem(mout, NULL), CS_INVALID_HANDLE);
        }
    }

    /* One device per process: a second open (and a CSE open) share the device. */
    {
        CS_DEV_HANDLE dev2 = NULL;
        char alt[4096];
        if (uri[0] == '/')
            snprintf(alt, sizeof alt, "%s/.", uri); /* another spelling of the directory */
        else
            snprintf(alt, sizeof alt, "%s", uri);
        EXPECT(csOpenCSx(alt, NULL, &dev2), CS_SUCCESS);
        ASSERT(dev2 != NULL && dev2 != dev);
        CsComputeRequest *r2 = compute_request(dev2, id, 4);
        memcpy(r2->Args, req->Args, 4 * sizeof(CsComputeArg)); /* memory of the first handle */
        uint64_t r2_r0 = 0;
        EXPECT(csQueueComputeRequest(r2, NULL, NULL, NULL, &r2_r0), CS_SUCCESS);
        ASSERT(r2_r0 == 8 * (HI - LO + 1));
        unsigned int cse_len = 0;
        EXPECT(csGetCSEFromCSx(dev, &cse_len, NULL), CS_SUCCESS);
        char *cse_name = malloc(cse_len);
        EXPECT(csGetCSEFromCSx(dev, &cse_len, cse_name), CS_SUCCESS);
        CS_CSE_HANDLE cse = NULL;
        EXPECT(csOpenCSE(cse_name, NULL, &cse), CS_SUCCESS);
        r2->CSEHandle = cse; /* the v0.5 name of the same field */
        EXPECT(csQueueComputeRequest(r2, NULL, NULL, NULL, &r2_r0), CS_SUCCESS);
        CS_MEM_HANDLE mine = NULL;
        EXPECT(csAllocMem(dev2, 8, NULL, &mine, NULL), CS_SUCCESS);
        EXPECT(csCloseCSx(dev2), CS_SUCCESS); /* frees its memory, the device stays open */
        EXPECT(csFreeMem(mine, NULL), CS_INVALID_HANDLE);
        EXPECT(csCloseCSE(cse), CS_SUCCESS);
        EXPECT(csCloseCSE(cse), CS_INVALID_HANDLE);
        EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, &r2_r0), CS_SUCCESS);
        EXPECT(csQueueComputeRequest(r2, NULL, NULL, NULL, &r2_r0), CS_INVALID_HANDLE);
        free(r2);
        free(cse_name);
    }

    /* With a callback: CS_QUEUED, the callback has the status and r0. */
    atomic_store(&callbacks, 0);
    CS_REQ_HANDLE rh = (CS_REQ_HANDLE)1;
    uint64_t queued_r0 = 0;
    EXPECT(csxQueueComputeRequest(req, &callbacks, on_done, NULL, &rh, &queued_r0), CS_QUEUED);
    ASSERT(rh != NULL);
    wait_count(&callbacks, 1, __LINE__);
    ASSERT(callback_status == CS_SUCCESS && callback_value == r0 && queued_r0 == r0);
    /* A synchronous request has no request handle. */
    rh = (CS_REQ_HANDLE)1;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, &rh, NULL), CS_SUCCESS);
    ASSERT(rh == NULL);

    /* With an event. */
    CS_EVT_HANDLE evt = NULL;
    EXPECT(csCreateEvent(&evt), CS_SUCCESS);
    void *ctx = NULL;
    EXPECT(csPollEvent(evt, &ctx), CS_NOT_DONE);
    EXPECT(csxQueueComputeRequest(req, &kept, NULL, evt, NULL, NULL), CS_QUEUED);
    EXPECT(poll_event(evt, &ctx), CS_SUCCESS);
    ASSERT(ctx == &kept);
    EXPECT(csPollEvent(evt, NULL), CS_NOT_DONE);
    /* A failing request signals its failure to the event. */
    CsComputeRequest *stale = compute_request(dev, 63, 0);
    EXPECT(csxQueueComputeRequest(stale, NULL, NULL, evt, NULL, NULL), CS_QUEUED);
    EXPECT(poll_event(evt, NULL), CS_UNKNOWN_COMPUTE_FUNCTION);
    ASSERT(strstr(csxGetLastError(), "csxQueueComputeRequest") != NULL);
    EXPECT(csDeleteEvent(evt), CS_SUCCESS);
    EXPECT(csDeleteEvent(evt), CS_INVALID_EVENT);
    EXPECT(csPollEvent(evt, NULL), CS_INVALID_EVENT);
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, evt, NULL, NULL), CS_INVALID_EVENT);
    EXPECT(csCreateEvent(NULL), CS_INVALID_ARG);

    /* Bad compute requests. */
    EXPECT(csxQueueComputeRequest(NULL, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ARG);
    req->NumArgs = -1;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    req->NumArgs = CSX_COMPUTE_ARGS_MAX + 1;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    req->NumArgs = 4;
    req->Args[0].Type = 77;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_OPTION);
    req->Args[0].Type = CS_AFDM_TYPE;
    req->Args[0].u.DevMem.ByteOffset = N * 8 + 8;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    req->Args[0].u.DevMem.ByteOffset = 0;
    req->CSFId = 1000000;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ID);
    req->CSFId = id;
    /* A CSF's own error code is a value (r0), not a status: filter returns CSX_ENOSPC
     * when its output does not fit. */
    CS_MEM_HANDLE small_out = NULL;
    EXPECT(csAllocMem(dev, 8, NULL, &small_out, NULL), CS_SUCCESS);
    req->Args[1].u.DevMem.MemHandle = small_out;
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, &r0), CS_SUCCESS);
    ASSERT((int64_t)r0 < 0); /* CSX_ENOSPC */
    req->Args[1].u.DevMem.MemHandle = out;

    /* Batches: copy 0..9 in, compute, copy out; entries added out of order, ordered by
     * their edges (copy-in runs before compute, copy-out after it). */
    {
        uint64_t nums[8] = {5, 150, 7, 160, 170, 9, 199, 200};
        uint64_t got[8] = {0};
        CS_MEM_HANDLE bin = NULL, bout = NULL;
        EXPECT(csAllocMem(dev, sizeof nums, NULL, &bin, NULL), CS_SUCCESS);
        EXPECT(csAllocMem(dev, sizeof nums, NULL, &bout, NULL), CS_SUCCESS);
        CsCopyMemRequest cin = {CS_COPY_TO_DEVICE, nums, {bin, 0}, sizeof nums};
        CsCopyMemRequest cout = {CS_COPY_FROM_DEVICE, got, {bout, 0}, sizeof got};
        CsComputeRequest *breq = compute_request(dev, id, 4);
        csHelperSetComputeArg(&breq->Args[0], CS_AFDM_TYPE, bin, (uint64_t)0);
        csHelperSetComputeArg(&breq->Args[1], CS_AFDM_TYPE, bout, (uint64_t)0);
        csHelperSetComputeArg(&breq->Args[2], CS_64BIT_VALUE_TYPE, (uint64_t)LO);
        csHelperSetComputeArg(&breq->Args[3], CS_64BIT_VALUE_TYPE, (uint64_t)HI);
        CS_BATCH_HANDLE batch = NULL;
        EXPECT(csAllocBatchRequest(CS_BATCH_HYBRID, 4, &batch), CS_SUCCESS);
        CS_BATCH_INDEX e_out = 99, e_cmp = 99, e_in = 99;
        size_t breq_len = sizeof(CsComputeRequest) + 3 * sizeof(CsComputeArg);
        CsBatchRequest *pb_out = batch_entry(CS_COPY_AFDM, &cout, sizeof cout);
        CsBatchRequest *pb_cmp = batch_entry(CS_QUEUE_COMPUTE, breq, breq_len);
        CsBatchRequest *pb_in = batch_entry(CS_COPY_AFDM, &cin, sizeof cin);
        CsBatchRequest b_out = *pb_out, b_in = *pb_in;
        /* Entries are copied when added: scribbling over them afterwards changes nothing. */
        EXPECT(csAddBatchEntry(batch, &b_out, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, &e_out), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, pb_cmp, e_out, CSX_BATCH_INDEX_NONE, &e_cmp), CS_SUCCESS);
        memset(pb_cmp, 0xee, offsetof(CsBatchRequest, u) + breq_len);
        EXPECT(csAddBatchEntry(batch, &b_in, e_cmp, CSX_BATCH_INDEX_NONE, &e_in), CS_SUCCESS);
        ASSERT(e_out == 0 && e_cmp == 1 && e_in == 2);
        EXPECT(csAddBatchEntry(batch, &b_in, 7, CSX_BATCH_INDEX_NONE, NULL), CS_INVALID_ID);
        CsBatchRequest b_bad = b_in;
        b_bad.ReqType = (CS_BATCH_REQ_TYPE)9;
        EXPECT(csAddBatchEntry(batch, &b_bad, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_INVALID_OPTION);
        EXPECT(csAddBatchEntry(batch, NULL, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_INVALID_ARG);
        CsBatchRequest b_short = b_in;
        b_short.reqLength = 12; /* shorter than the copy request it holds */
        EXPECT(csAddBatchEntry(batch, &b_short, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_INVALID_LENGTH);
        u32 ran32 = 0;
        EXPECT(csQueueBatchRequest(batch, NULL, NULL, NULL, &ran32), CS_SUCCESS);
        ASSERT(ran32 == 3);
        ASSERT(got[0] == 150 && got[1] == 160 && got[2] == 170 && got[3] == 199);
        memset(got, 0, sizeof got);
        uint64_t ran = 0;
        EXPECT(csxQueueBatchRequest(batch, NULL, NULL, NULL, NULL, &ran), CS_SUCCESS);
        ASSERT(ran == 3);
        ASSERT(got[0] == 150 && got[1] == 160 && got[2] == 170 && got[3] == 199);
        /* With a callback. */
        atomic_store(&callbacks, 0);
        EXPECT(csxQueueBatchRequest(batch, &callbacks, on_done, NULL, NULL, NULL), CS_QUEUED);
        wait_count(&callbacks, 1, __LINE__);
        ASSERT(callback_status == CS_SUCCESS && callback_value == 3);
        /* Full: MaxReqs 4 allows one more entry only. */
        EXPECT(csAddBatchEntry(batch, &b_in, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_in, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_OUT_OF_RESOURCES);
        EXPECT(csFreeBatchRequest(batch), CS_SUCCESS);
        EXPECT(csFreeBatchRequest(batch), CS_INVALID_HANDLE);
        EXPECT(csxQueueBatchRequest(batch, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);

        /* A cycle: 0 -> 1 -> 2 -> 0 is refused before anything runs. */
        got[0] = 12345;
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 8, &batch), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_out, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_out, CSX_BATCH_INDEX_NONE, 0, NULL), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_out, 0, 1, NULL), CS_SUCCESS);
        EXPECT(csxQueueBatchRequest(batch, NULL, NULL, NULL, NULL, &ran), CS_INVALID_ARG);
        ASSERT(got[0] == 12345);
        ASSERT(strstr(csxGetLastError(), "cycle") != NULL);
        EXPECT(csFreeBatchRequest(batch), CS_SUCCESS);
        /* A failing entry stops the batch and is its status. */
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 8, &batch), CS_SUCCESS);
        CsCopyMemRequest bad_copy = {CS_COPY_FROM_DEVICE, got, {bout, 0}, 4096};
        CsBatchRequest *pb_fail = batch_entry(CS_COPY_AFDM, &bad_copy, sizeof bad_copy);
        CsBatchRequest b_fail = *pb_fail;
        free(pb_fail);
        EXPECT(csAddBatchEntry(batch, &b_fail, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_SUCCESS);
        EXPECT(csxQueueBatchRequest(batch, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
        EXPECT(csFreeBatchRequest(batch), CS_SUCCESS);
        EXPECT(csAllocBatchRequest((CS_BATCH_MODE)7, 8, &batch), CS_INVALID_OPTION);
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 0, &batch), CS_INVALID_LENGTH);
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, CSX_BATCH_ENTRIES_MAX + 1, &batch), CS_INVALID_LENGTH);
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 8, NULL), CS_INVALID_ARG);
        free(breq);
        free(pb_out);
        free(pb_cmp);
        free(pb_in);
        EXPECT(csFreeMem(bin, NULL), CS_SUCCESS);
        EXPECT(csFreeMem(bout, NULL), CS_SUCCESS);
    }

    /* Properties, statistics, the CSF list. */
    {
        CSxProperties props;
        int plen = 4;
        EXPECT(csQueryDeviceProperties(dev, &plen, &props), CS_INVALID_LENGTH);
        ASSERT(plen == (int)sizeof props);
        EXPECT(csQueryDeviceProperties(dev, &plen, &props), CS_SUCCESS);
        ASSERT(strncmp(props.FriendlyName, uri, sizeof props.FriendlyName - 1) == 0);
        ASSERT(props.FDMinMB == 16 && props.NumCSEs == 1);
        ASSERT(props.Flags.FDMIsDeviceManaged == 1 && props.Flags.BatchRequestsSupported == 0);
        ASSERT(props.Flags.FDMIsHostVisible == (strncmp(uri, "tcp://", 6) != 0));
        ASSERT(props.CSE[0].NumBuiltinFunctions > 1 && props.CSE[0].MaxConcurrentFunctionInstances == 1);
        EXPECT(csQueryDeviceProperties(NULL, &plen, &props), CS_INVALID_HANDLE);
        EXPECT(csQueryDeviceProperties(dev, NULL, &props), CS_INVALID_ARG);
        CsxDeviceInfo info;
        EXPECT(csxQueryDeviceInfo(dev, &info), CS_SUCCESS);
        ASSERT(info.ProgramSlots == 64 && info.FDMSizeBytes == (16u << 20) && strcmp(info.Uri, uri) == 0);
        EXPECT(csxQueryDeviceInfo(dev, NULL), CS_INVALID_ARG);
        CsCapabilities caps;
        EXPECT(csQueryDeviceCapabilities(dev, &caps), CS_SUCCESS);
        ASSERT(caps.Functions.Checksum == 0); /* no CSF is named so */
        EXPECT(csQueryDeviceCapabilities(dev, NULL), CS_INVALID_ARG);

        CsStatsInfo stats;
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_FUNCTION, &id, &stats), CS_SUCCESS);
        ASSERT(stats.FunctionDetails.TotalExecutions >= 4);
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_CSx_MEM_USAGE, NULL, &stats), CS_SUCCESS);
        ASSERT(stats.MemoryDetails.TotalAllocatedFDM > 0 &&
               stats.MemoryDetails.TotalAllocatedFDM + stats.MemoryDetails.TotalFreeCSFM == (16u << 20));
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_CSE_USAGE, NULL, &stats), CS_SUCCESS);
        ASSERT(stats.CSEDetails.TotalFunctionExecutions >= 4);
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_FUNCTION, NULL, &stats), CS_INVALID_ARG);
        CS_CSF_ID empty_id = 63;
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_FUNCTION, &empty_id, &stats), CS_UNKNOWN_COMPUTE_FUNCTION);
        EXPECT(csQueryDeviceStatistics(dev, (CS_STAT_TYPE)99, NULL, &stats), CS_INVALID_OPTION);

        int count = 0;
        EXPECT(csxQueryCSFList(dev, &count, NULL), CS_SUCCESS);
        ASSERT(count > 1);
        CsxCSFInfo csfs[64];
        int one = 1;
        EXPECT(csxQueryCSFList(dev, &one, csfs), CS_INVALID_LENGTH);
        int cap = 64;
        EXPECT(csxQueryCSFList(dev, &cap, csfs), CS_SUCCESS);
        ASSERT(cap == count);
        ASSERT(csfs[0].Downloadable == 1 && csfs[0].CSFId == id && strcmp(csfs[0].UniqueName, "filter") == 0);
        int builtins = 0;
        for (int i = 1; i < cap; i++) {
            if (!csfs[i].Downloadable) {
                builtins++;
                ASSERT(csfs[i].CSFId >= CSX_BUILTIN_CSF_BASE);
            }
        }
        ASSERT(builtins == cap - 1);
        CsComputeRequest *builtin = compute_request(dev, csfs[1].CSFId, 0);
        EXPECT(csQueueComputeRequest(builtin, NULL, NULL, NULL, NULL), CS_UNSUPPORTED);
        free(builtin);
        /* The spec's list, by device name: the same CSFs, GlobalId = the CSF id. */
        int blen = 0, bcount = 0;
        EXPECT(csQueryCSFList(uri[0] == '/' ? uri : uri, &blen, &bcount, NULL), CS_SUCCESS);
        ASSERT(bcount == count && blen == count * (int)sizeof(CSFUniqueId));
        CSFUniqueId *ids = calloc((size_t)count, sizeof *ids);
        EXPECT(csQueryCSFList(uri, &blen, &bcount, ids), CS_SUCCESS);
        ASSERT(strcmp(ids[0].UniqueName, "filter") == 0 && ids[0].GlobalId == id);
        blen = 3;
        EXPECT(csQueryCSFList(uri, &blen, &bcount, ids), CS_INVALID_LENGTH);
        free(ids);
        int flen = 0;
        EXPECT(csQueryFunctionList((char *)uri, &flen, NULL), CS_SUCCESS);
        char *funcs = malloc((size_t)flen);
        EXPECT(csQueryFunctionList((char *)uri, &flen, funcs), CS_SUCCESS);
        ASSERT(strncmp(funcs, "filter,", 7) == 0);
        free(funcs);
        /* The CSE list: this device holds "filter", no device holds "nope". */
        int clen = 0;
        EXPECT(csQueryCSEList("filter", &clen, NULL), CS_SUCCESS);
        ASSERT(clen > 1);
        EXPECT(csQueryCSEList("nope", &clen, NULL), CS_SUCCESS);
        ASSERT(clen == 1); /* the empty list */
        int slen = 0;
        EXPECT(csQueryLibrarySupport(CS_FILE_SYSTEMS_SUPPORTED, &slen, NULL), CS_SUCCESS);
        ASSERT(slen == 4);
        EXPECT(csQueryLibrarySupport((CS_LIBRARY_SUPPORT)9, &slen, NULL), CS_INVALID_OPTION);
        /* What csx does not provide answers CS_UNSUPPORTED. */
        CS_STREAM_HANDLE stream = 0;
        EXPECT(csAllocStream(dev, CS_STREAM_COMPUTE_TYPE, &stream), CS_UNSUPPORTED);
        EXPECT(csAllocStream(NULL, CS_STREAM_COMPUTE_TYPE, &stream), CS_INVALID_HANDLE);
        EXPECT(csRegisterNotify((char *)uri, 0, NULL), CS_UNSUPPORTED);
        EXPECT(csStopFunction(id), CS_UNSUPPORTED);
        EXPECT(csAbortCSE(dev), CS_UNSUPPORTED);
        EXPECT(csSetDeviceCapability(dev, CS_CAPABILITY_CSx_TEMP, NULL), CS_UNSUPPORTED);
    }

    /* csGetCSxFromPath: a path in a state directory names its device. */
    {
        char name[4096];
        unsigned int nlen = sizeof name;
        if (uri[0] == '/') {
            char inner[4096];
            snprintf(inner, sizeof inner, "%s/device.json", uri);
            EXPECT(csGetCSxFromPath(inner, &nlen, name), CS_SUCCESS);
            ASSERT(strcmp(name, uri) == 0);
            nlen = 2;
            EXPECT(csGetCSxFromPath(inner, &nlen, name), CS_INVALID_LENGTH);
        }
        if (argc == 4) { /* a file in a csx mount of this device */
            nlen = sizeof name;
            EXPECT(csGetCSxFromPath(argv[3], &nlen, name), CS_SUCCESS);
            ASSERT(strcmp(name, uri) == 0);
            ASSERT(nlen == strlen(uri) + 1);
            CS_DEV_HANDLE found_dev = NULL;
            EXPECT(csOpenCSx(name, NULL, &found_dev), CS_SUCCESS);
            EXPECT(csCloseCSx(found_dev), CS_SUCCESS);
        }
        nlen = sizeof name;
        EXPECT(csGetCSxFromPath("/", &nlen, name), CS_NO_SUCH_ENTITY_EXISTS);
        EXPECT(csGetCSxFromPath("/no/such/path", &nlen, name), CS_ENOENT);
        EXPECT(csGetCSxFromPath(NULL, &nlen, name), CS_INVALID_ARG);
    }

    /* Hostile callers: handles of the wrong kind, lengths and counts past their limits. */
    {
        EXPECT(csFreeMem(dev, NULL), CS_INVALID_HANDLE);          /* a device as memory */
        EXPECT(csCloseCSx(in), CS_INVALID_HANDLE);                /* memory as a device */
        EXPECT(csPollEvent(dev, NULL), CS_INVALID_EVENT);         /* a device as an event */
        EXPECT(csxCloseFile(dev), CS_INVALID_HANDLE);             /* a device as a file */
        EXPECT(csxCloseFile(NULL), CS_INVALID_HANDLE);
        EXPECT(csFreeBatchRequest(dev), CS_INVALID_HANDLE);       /* a device as a batch */
        EXPECT(csAbortRequest(in), CS_INVALID_HANDLE);            /* memory as a request */
        EXPECT(csInitMem(in, 0, -1, NULL), CS_INVALID_LENGTH);
        EXPECT(csInitMem(in, ~0UL, 1, NULL), CS_INVALID_LENGTH);
        CsStorageRequest many = block;
        many.u.BlockIo.NumRanges = 1000; /* more ranges than any request may hold */
        EXPECT(csQueueStorageRequest(&many, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
        many.u.BlockIo.NumRanges = -3;
        EXPECT(csQueueStorageRequest(&many, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
        CsStorageRequest array = block;
        array.u.BlockIo.StorageIndex = 5;
        EXPECT(csQueueStorageRequest(&array, NULL, NULL, NULL, NULL, NULL), CS_ENTITY_NOT_ON_DEVICE);
        CsCSFDownloadInfo negative = csf_info(CSX_BPF_ELF, (uint32_t)CSX_ANY_INDEX, 0, -5, elf);
        EXPECT(csCSFDownload(dev, &negative, NULL), CS_INVALID_LENGTH);
        CsCSFDownloadInfo csee = dl;
        csee.CSEEId = 3;
        EXPECT(csCSFDownload(dev, &csee, NULL), CS_INVALID_ID);
        CsComputeRequest *streamy = compute_request(dev, id, 1);
        streamy->Args[0].Type = CS_STREAM_TYPE_;
        EXPECT(csQueueComputeRequest(streamy, NULL, NULL, NULL, NULL), CS_UNSUPPORTED);
        streamy->DevHandle = in; /* memory as the request's device */
        EXPECT(csQueueComputeRequest(streamy, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);
        free(streamy);
        CS_BATCH_HANDLE hb = NULL;
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 2, &hb), CS_SUCCESS);
        CsBatchRequest huge_args = {.ReqType = CS_QUEUE_COMPUTE};
        huge_args.u.Compute.DevHandle = dev;
        huge_args.u.Compute.NumArgs = 1 << 20; /* far past the entry */
        EXPECT(csAddBatchEntry(hb, &huge_args, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, NULL), CS_INVALID_LENGTH);
        EXPECT(csHelperResizeBatchRequest(hb, 0), CS_INVALID_LENGTH);
        EXPECT(csHelperReconfigureBatchEntry(hb, 0, &huge_args), CS_INVALID_LENGTH);
        EXPECT(csFreeBatchRequest(hb), CS_SUCCESS);
        EXPECT(csHelperResizeBatchRequest(hb, 4), CS_INVALID_HANDLE);
    }

    /* Asynchronous completion: callbacks of one device handle fire in queue order. */
    {
        CS_MEM_HANDLE slots = NULL;
        EXPECT(csAllocMem(dev, ORDERED * 8, NULL, &slots, NULL), CS_SUCCESS);
        static uint64_t vals[ORDERED];
        static CsCopyMemRequest puts[ORDERED];
        static uint64_t moved_each[ORDERED];
        atomic_store(&ordered, 0);
        for (int i = 0; i < ORDERED; i++) {
            vals[i] = 1000 + (uint64_t)i;
            puts[i] = (CsCopyMemRequest){CS_COPY_TO_DEVICE, &vals[i], {slots, (uint64_t)i * 8}, 8};
            if (i % 4 == 3) /* computes in between: the filter */
                EXPECT(csxQueueComputeRequest(req, (void *)(uintptr_t)i, on_ordered, NULL, NULL, NULL), CS_QUEUED);
            else
                EXPECT(csQueueCopyMemRequest(&puts[i], (void *)(uintptr_t)i, on_ordered, NULL, NULL, &moved_each[i]), CS_QUEUED);
        }
        wait_count(&ordered, ORDERED, __LINE__);
        for (int i = 0; i < ORDERED; i++) {
            ASSERT(order[i] == (uintptr_t)i);
            ASSERT(order_status[i] == CS_SUCCESS);
            if (i % 4 != 3)
                ASSERT(moved_each[i] == 8);
        }
        uint64_t back_vals[ORDERED] = {0};
        CsCopyMemRequest get_vals = {CS_COPY_FROM_DEVICE, back_vals, {slots, 0}, sizeof back_vals};
        EXPECT(csQueueCopyMemRequest(&get_vals, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
        for (int i = 0; i < ORDERED; i++)
            ASSERT(i % 4 == 3 || back_vals[i] == 1000 + (uint64_t)i);
        EXPECT(csFreeMem(slots, NULL), CS_SUCCESS);
    }

    /* Aborts. The loop gets the most fuel and a 60 s limit: only an abort ends it soon. */
    CsCSFDownloadInfo spin_dl = csf_info(CSX_BPF_RAW, (uint32_t)CSX_ANY_INDEX, 0, sizeof SPIN, SPIN);
    CS_CSF_ID spin = 0;
    EXPECT(csCSFDownload(dev, &spin_dl, &spin), CS_SUCCESS);
    CsConfigInfo spin_on = config(CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, spin);
    EXPECT(csConfig(dev, &spin_on), CS_SUCCESS);
    EXPECT(csxSetComputeLimits(dev, UINT64_C(1) << 40, 60000), CS_SUCCESS);
    EXPECT(csxSetComputeLimits(dev, (UINT64_C(1) << 40) + 1, 0), CS_INVALID_LENGTH);
    EXPECT(csxSetComputeLimits(dev, 0, 3600001), CS_INVALID_LENGTH);
    EXPECT(csxSetComputeLimits(NULL, 0, 0), CS_INVALID_HANDLE);
    CsComputeRequest *spin_req = compute_request(dev, spin, 0);
    {
        /* A running loop: aborted, it completes with CSX_ABORTED long before its limit. */
        atomic_store(&callbacks, 0);
        CS_REQ_HANDLE running = NULL, behind = NULL;
        uint64_t spin_r0 = 777;
        double t0 = now_s();
        EXPECT(csxQueueComputeRequest(spin_req, &callbacks, on_done, NULL, &running, &spin_r0), CS_QUEUED);
        /* A request queued behind it is still queued: aborted, it never runs. */
        unsigned char untouched[8] = {0};
        CS_MEM_HANDLE scratch = NULL;
        EXPECT(csAllocMem(dev, 8, NULL, &scratch, NULL), CS_SUCCESS);
        CsCopyMemRequest put_behind = {CS_COPY_TO_DEVICE, untouched, {scratch, 0}, 8};
        atomic_store(&ordered, 0);
        EXPECT(csQueueCopyMemRequest(&put_behind, (void *)(uintptr_t)7, on_ordered, NULL, &behind, NULL), CS_QUEUED);
        EXPECT(csAbortRequest(behind), CS_SUCCESS);
        EXPECT(csAbortRequest(behind), CS_INVALID_HANDLE); /* double abort */
        sleep_ms(200); /* let the loop start on the device */
        ASSERT(atomic_load(&callbacks) == 0); /* still spinning */
        EXPECT(csAbortRequest(running), CS_SUCCESS);
        wait_count(&callbacks, 1, __LINE__);
        double took = now_s() - t0;
        EXPECT(callback_status, CSX_ABORTED);
        ASSERT(spin_r0 == 777); /* no completion value for a failed request */
        ASSERT(took < 30.0); /* the 60 s time limit did not end it */
        wait_count(&ordered, 1, __LINE__);
        ASSERT(order[0] == 7 && order_status[0] == CSX_ABORTED);
        EXPECT(csAbortRequest(running), CS_INVALID_HANDLE); /* double abort */
        ASSERT(strstr(csxGetLastError(), "not in flight") != NULL);

        /* A finished request cannot be aborted. */
        CS_REQ_HANDLE finished = NULL;
        EXPECT(csQueueCopyMemRequest(&put_behind, &callbacks, on_done, NULL, &finished, NULL), CS_QUEUED);
        wait_count(&callbacks, 2, __LINE__);
        EXPECT(callback_status, CS_SUCCESS);
        EXPECT(csAbortRequest(finished), CS_INVALID_HANDLE);
        EXPECT(csAbortRequest(NULL), CS_INVALID_HANDLE);
        EXPECT(csAbortRequest(dev), CS_INVALID_HANDLE); /* a device handle, not a request */

        /* An event learns of the abort too. */
        CS_EVT_HANDLE spin_evt = NULL;
        EXPECT(csCreateEvent(&spin_evt), CS_SUCCESS);
        CS_REQ_HANDLE evented = NULL;
        EXPECT(csxQueueComputeRequest(spin_req, NULL, NULL, spin_evt, &evented, NULL), CS_QUEUED);
        EXPECT(csPollEvent(spin_evt, NULL), CS_NOT_DONE);
        EXPECT(csAbortRequest(evented), CS_SUCCESS);
        EXPECT(poll_event(spin_evt, NULL), CSX_ABORTED);
        EXPECT(csDeleteEvent(spin_evt), CS_SUCCESS);

        /* A batch: loop, then a copy. Aborted, the copy never runs. */
        CS_BATCH_HANDLE sb = NULL;
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 2, &sb), CS_SUCCESS);
        CsBatchRequest *e_spin = batch_entry(CS_QUEUE_COMPUTE, spin_req, sizeof(CsComputeRequest));
        unsigned char marker[8] = {9, 9, 9, 9, 9, 9, 9, 9};
        CsCopyMemRequest put_marker = {CS_COPY_TO_DEVICE, marker, {scratch, 0}, 8};
        CsBatchRequest *e_put = batch_entry(CS_COPY_AFDM, &put_marker, sizeof put_marker);
        CS_BATCH_INDEX first = 99;
        EXPECT(csAddBatchEntry(sb, e_spin, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, &first), CS_SUCCESS);
        EXPECT(csAddBatchEntry(sb, e_put, CSX_BATCH_INDEX_NONE, first, NULL), CS_SUCCESS);
        free(e_spin);
        free(e_put);
        CS_REQ_HANDLE batch_req = NULL;
        uint64_t batch_done = 555;
        EXPECT(csxQueueBatchRequest(sb, &callbacks, on_done, NULL, &batch_req, &batch_done), CS_QUEUED);
        sleep_ms(200);
        EXPECT(csAbortRequest(batch_req), CS_SUCCESS);
        wait_count(&callbacks, 3, __LINE__);
        EXPECT(callback_status, CSX_ABORTED);
        ASSERT(batch_done == 555);
        unsigned char check[8] = {1};
        CsCopyMemRequest get_check = {CS_COPY_FROM_DEVICE, check, {scratch, 0}, 8};
        EXPECT(csQueueCopyMemRequest(&get_check, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
        ASSERT(memcmp(check, untouched, 8) == 0); /* neither aborted copy ran */
        EXPECT(csFreeBatchRequest(sb), CS_SUCCESS);
        EXPECT(csFreeMem(scratch, NULL), CS_SUCCESS);
    }
    EXPECT(csxSetComputeLimits(dev, 0, 0), CS_SUCCESS);

    /* Deactivate, unload, then the id is unknown. */
    CsConfigInfo deactivate = config((CS_CONFIG_TYPE)CSX_CSF_DEACTIVATE, 0, id);
    EXPECT(csConfig(dev, &deactivate), CS_SUCCESS);
    CsCSFDownloadInfo unload = csf_info(CSX_BPF_ELF, id, 1, 0, NULL);
    EXPECT(csCSFDownload(dev, &unload, NULL), CS_SUCCESS);
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_UNKNOWN_COMPUTE_FUNCTION);
    EXPECT(find_id(dev, "filter", &found), CS_INVALID_FUNCTION_NAME);

    /* Close with requests in flight: the loop is aborted, the requests behind it never
     * run, and every callback has returned when csCloseCSx returns. */
    EXPECT(csxSetComputeLimits(dev, UINT64_C(1) << 40, 60000), CS_SUCCESS);
    atomic_store(&ordered, 0);
    EXPECT(csxQueueComputeRequest(spin_req, (void *)(uintptr_t)0, on_ordered, NULL, NULL, NULL), CS_QUEUED);
    for (uintptr_t i = 1; i < 4; i++)
        EXPECT(csxQueueComputeRequest(spin_req, (void *)i, on_ordered, NULL, NULL, NULL), CS_QUEUED);
    sleep_ms(100);
    /* Close: every handle of the device becomes invalid. */
    EXPECT(csCloseCSx(dev), CS_SUCCESS);
    ASSERT(atomic_load(&ordered) == 4);
    for (int i = 0; i < 4 && i < atomic_load(&ordered); i++)
        ASSERT(order[i] == (uintptr_t)i && order_status[i] == CSX_ABORTED);
    /* The device serves again after that: the loop's slot is emptied (a daemon keeps it). */
    CS_DEV_HANDLE again = NULL;
    EXPECT(csOpenCSx(uri, NULL, &again), CS_SUCCESS);
    CsStatsInfo spin_stats;
    CS_STATUS kept_slot = csQueryDeviceStatistics(again, CS_STAT_FUNCTION, &spin, &spin_stats);
    if (kept_slot == CS_SUCCESS) { /* a daemon keeps its programs; an embedded device not */
        CsConfigInfo spin_off = config((CS_CONFIG_TYPE)CSX_CSF_DEACTIVATE, 0, spin);
        EXPECT(csConfig(again, &spin_off), CS_SUCCESS);
        CsCSFDownloadInfo spin_unload = csf_info(CSX_BPF_RAW, spin, 1, 0, NULL);
        EXPECT(csCSFDownload(again, &spin_unload, NULL), CS_SUCCESS);
    } else {
        EXPECT(kept_slot, CS_UNKNOWN_COMPUTE_FUNCTION);
    }
    EXPECT(csCloseCSx(again), CS_SUCCESS);
    EXPECT(csCloseCSx(dev), CS_INVALID_HANDLE);
    EXPECT(csFreeMem(in, NULL), CS_INVALID_HANDLE);
    EXPECT(csxQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);

    free(req);
    free(spin_req);
    free(stale);
    free(elf);
    if (failures) {
        fprintf(stderr, "api_test: %d failures\n", failures);
        return 1;
    }
    printf("api_test: ok\n");
    return 0;
}
