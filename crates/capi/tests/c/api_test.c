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
    CS_MEM_PTR vaddr = (CS_MEM_PTR)1;
    CsMemFlags clear = {0, CS_FDM_CLEAR, 0};
    EXPECT(csAllocMem(dev, N * 8, &clear, &in, &vaddr), CS_SUCCESS);
    ASSERT(vaddr == NULL);
    EXPECT(csAllocMem(dev, N * 8, NULL, &out, NULL), CS_SUCCESS);
    EXPECT(csAllocMem(NULL, 8, NULL, &tmp, NULL), CS_INVALID_HANDLE);
    EXPECT(csAllocMem(dev, 8, NULL, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csAllocMem(dev, 0, NULL, &tmp, NULL), CS_INVALID_LENGTH);
    EXPECT(csAllocMem(dev, UINT64_C(1) << 60, NULL, &tmp, NULL), CS_INVALID_LENGTH);
    EXPECT(csAllocMem(dev, UINT64_C(1) << 31, NULL, &tmp, NULL), CS_NOT_ENOUGH_MEMORY);
    CsMemFlags bad_flags = {0, 99, 0};
    EXPECT(csAllocMem(dev, 8, &bad_flags, &tmp, NULL), CS_INVALID_OPTION);
    CsMemFlags bad_fdm = {7, 0, 0};
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
    CsCopyMemRequest bad_type = {7, host, {tmp, 0}, 8};
    EXPECT(csQueueCopyMemRequest(&bad_type, NULL, NULL, NULL, NULL, NULL), CS_INVALID_OPTION);
    EXPECT(csQueueCopyMemRequest(NULL, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csFreeMem(tmp), CS_SUCCESS);
    EXPECT(csFreeMem(tmp), CS_INVALID_HANDLE); /* freed */
    EXPECT(csQueueCopyMemRequest(&get, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);
    EXPECT(csFreeMem(NULL), CS_INVALID_HANDLE);

    /* Storage -> device memory, file mode. */
    CsStorageRequest load;
    memset(&load, 0, sizeof load);
    load.Mode = CS_STORAGE_FILE_IO;
    load.DevHandle = dev;
    load.u.FileIo.Type = CS_STORAGE_LOAD_TYPE;
    load.u.FileIo.FilePath = "/data/nums";
    load.u.FileIo.Offset = 0;
    load.u.FileIo.Bytes = N * 8;
    load.u.FileIo.DevMem.MemHandle = in;
    load.u.FileIo.DevMem.ByteOffset = 0;
    moved = 0;
    EXPECT(csQueueStorageRequest(&load, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == N * 8);
    CsStorageRequest missing = load;
    missing.u.FileIo.FilePath = "/data/no-such-file";
    EXPECT(csQueueStorageRequest(&missing, NULL, NULL, NULL, NULL, NULL), CS_ENOENT);
    CsStorageRequest overflow = load;
    overflow.u.FileIo.Bytes = N * 8 + 1;
    EXPECT(csQueueStorageRequest(&overflow, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    CsStorageRequest bad_mode = load;
    bad_mode.Mode = 9;
    EXPECT(csQueueStorageRequest(&bad_mode, NULL, NULL, NULL, NULL, NULL), CS_INVALID_OPTION);
    CsStorageRequest no_path = load;
    no_path.u.FileIo.FilePath = NULL;
    EXPECT(csQueueStorageRequest(&no_path, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ARG);

    /* Device memory -> storage, file mode, and back. */
    CsStorageRequest store = load;
    store.u.FileIo.Type = CS_STORAGE_STORE_TYPE;
    store.u.FileIo.FilePath = "/data/copy";
    store.u.FileIo.Bytes = 80;
    EXPECT(csQueueStorageRequest(&store, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == 80);
    CsStorageRequest reload = load;
    reload.u.FileIo.FilePath = "/data/copy";
    reload.u.FileIo.Bytes = 80;
    reload.u.FileIo.DevMem.MemHandle = out;
    EXPECT(csQueueStorageRequest(&reload, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    uint64_t back[10];
    CsCopyMemRequest get_back = {CS_COPY_FROM_DEVICE, back, {out, 0}, sizeof back};
    EXPECT(csQueueCopyMemRequest(&get_back, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
    for (int i = 0; i < 10; i++)
        ASSERT(back[i] == (uint64_t)i);

    /* Block mode: LBAs of the NVM namespace. */
    CsBlockRange blocks = {1, 2, 0};
    CsStorageRequest block;
    memset(&block, 0, sizeof block);
    block.Mode = CS_STORAGE_BLOCK_IO;
    block.DevHandle = dev;
    block.u.BlockIo.Type = CS_STORAGE_LOAD_TYPE;
    block.u.BlockIo.NumRanges = 1;
    block.u.BlockIo.Range = &blocks;
    block.u.BlockIo.DevMem.MemHandle = out;
    EXPECT(csQueueStorageRequest(&block, NULL, NULL, NULL, NULL, &moved), CS_SUCCESS);
    ASSERT(moved == 2 * CS_BLOCK_SIZE);
    CsBlockRange other_ns = {2, 1, 0};
    CsStorageRequest bad_ns = block;
    bad_ns.u.BlockIo.Range = &other_ns;
    EXPECT(csQueueStorageRequest(&bad_ns, NULL, NULL, NULL, NULL, NULL), CS_ENTITY_NOT_ON_DEVICE);
    CsStorageRequest block_store = block;
    block_store.u.BlockIo.Type = CS_STORAGE_STORE_TYPE;
    EXPECT(csQueueStorageRequest(&block_store, NULL, NULL, NULL, NULL, NULL), CS_UNSUPPORTED);
    CsStorageRequest no_ranges = block;
    no_ranges.u.BlockIo.NumRanges = 0;
    EXPECT(csQueueStorageRequest(&no_ranges, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    CsBlockRange huge = {1, 100000, 0};
    CsStorageRequest too_many = block;
    too_many.u.BlockIo.Range = &huge;
    EXPECT(csQueueStorageRequest(&too_many, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);

    /* Download and activate the filter (a downloadable CSF). */
    CS_CSF_ID id = 9999;
    CsDownloadInfo dl = {CS_BPF_PROGRAM, CS_BPF_ELF, CS_ANY_INDEX, 0, elf_len, elf, NULL};
    EXPECT(csDownload(dev, &dl, &id), CS_SUCCESS);
    ASSERT(id < 64);
    /* A malformed image fails at download or, at the latest, at activation. */
    CsDownloadInfo garbage = {CS_BPF_PROGRAM, CS_BPF_ELF, CS_ANY_INDEX, 0, 16, "not an elf file", NULL};
    CS_CSF_ID gid = 0;
    CS_STATUS st = csDownload(dev, &garbage, &gid);
    if (st == CS_SUCCESS) {
        CsConfigInfo act = {CS_CSF_ACTIVATE, CS_ENGINE_DEFAULT, gid};
        EXPECT(csConfig(dev, &act), CS_LOAD_ERROR);
        CsDownloadInfo drop = {CS_BPF_PROGRAM, CS_BPF_ELF, (int32_t)gid, 1, 0, NULL, NULL};
        EXPECT(csDownload(dev, &drop, NULL), CS_SUCCESS);
    } else {
        EXPECT(st, CS_LOAD_ERROR);
    }
    CsDownloadInfo fpga = dl;
    fpga.Type = 5;
    EXPECT(csDownload(dev, &fpga, NULL), CS_UNSUPPORTED);
    CsDownloadInfo empty = dl;
    empty.Length = 0;
    EXPECT(csDownload(dev, &empty, NULL), CS_INVALID_LENGTH);
    CsDownloadInfo too_big = dl;
    too_big.Length = UINT64_C(1) << 40;
    EXPECT(csDownload(dev, &too_big, NULL), CS_INVALID_LENGTH);
    EXPECT(csDownload(dev, NULL, NULL), CS_INVALID_ARG);
    EXPECT(csDownload(NULL, &dl, NULL), CS_INVALID_HANDLE);

    CS_CSF_ID found = 9999;
    EXPECT(csGetCSFId(dev, "filter", &found), CS_SUCCESS);
    ASSERT(found == id);
    EXPECT(csGetCSFId(dev, "no_such_csf", &found), CS_INVALID_FUNCTION_NAME);
    EXPECT(csGetCSFId(dev, NULL, &found), CS_INVALID_ARG);

    /* Compute before activation: the CSF exists but is not active. */
    CsComputeRequest *req = compute_request(dev, id, 4);
    EXPECT(csHelperSetComputeArg(&req->Args[0], CS_AFDM_TYPE, in, (uint64_t)0), CS_SUCCESS);
    EXPECT(csHelperSetComputeArg(&req->Args[1], CS_AFDM_TYPE, out, (uint64_t)0), CS_SUCCESS);
    EXPECT(csHelperSetComputeArg(&req->Args[2], CS_64BIT_VALUE_TYPE, (uint64_t)LO), CS_SUCCESS);
    EXPECT(csHelperSetComputeArg(&req->Args[3], CS_64BIT_VALUE_TYPE, (uint64_t)HI), CS_SUCCESS);
    EXPECT(csHelperSetComputeArg(&req->Args[3], 42, (uint64_t)HI), CS_INVALID_OPTION);
    EXPECT(csHelperSetComputeArg(NULL, CS_64BIT_VALUE_TYPE, (uint64_t)HI), CS_INVALID_ARG);
    uint64_t r0 = 0;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, &r0), CS_INVALID_FUNCTION);

    CsConfigInfo activate = {CS_CSF_ACTIVATE, CS_ENGINE_DEFAULT, id};
    EXPECT(csConfig(dev, &activate), CS_SUCCESS);
    CsConfigInfo bad_engine = {CS_CSF_ACTIVATE, 17, id};
    EXPECT(csConfig(dev, &bad_engine), CS_INVALID_OPTION);
    CsConfigInfo empty_slot = {CS_CSF_ACTIVATE, CS_ENGINE_DEFAULT, 63};
    EXPECT(csConfig(dev, &empty_slot), CS_UNKNOWN_COMPUTE_FUNCTION);
    CsConfigInfo no_slot = {CS_CSF_ACTIVATE, CS_ENGINE_DEFAULT, 1000000};
    EXPECT(csConfig(dev, &no_slot), CS_INVALID_ID);
    EXPECT(csConfig(dev, NULL), CS_INVALID_ARG);

    /* Compute, synchronously: keeps LO..=HI, r0 = 8 * kept. */
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, &r0), CS_SUCCESS);
    ASSERT(r0 == 8 * (HI - LO + 1));
    uint64_t kept[HI - LO + 1];
    CsCopyMemRequest get_kept = {CS_COPY_FROM_DEVICE, kept, {out, 0}, sizeof kept};
    EXPECT(csQueueCopyMemRequest(&get_kept, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
    for (int i = 0; i < HI - LO + 1; i++)
        ASSERT(kept[i] == (uint64_t)(LO + i));

    /* With a callback: CS_QUEUED, the callback has the status and r0. */
    CS_REQ_HANDLE rh = (CS_REQ_HANDLE)1;
    uint64_t queued_r0 = 0;
    EXPECT(csQueueComputeRequest(req, &callbacks, on_done, NULL, &rh, &queued_r0), CS_QUEUED);
    ASSERT(rh != NULL);
    wait_count(&callbacks, 1, __LINE__);
    ASSERT(callback_status == CS_SUCCESS && callback_value == r0 && queued_r0 == r0);
    /* A synchronous request has no request handle. */
    rh = (CS_REQ_HANDLE)1;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, &rh, NULL), CS_SUCCESS);
    ASSERT(rh == NULL);

    /* With an event. */
    CS_EVT_HANDLE evt = NULL;
    EXPECT(csCreateEvent(&evt), CS_SUCCESS);
    void *ctx = NULL;
    EXPECT(csPollEvent(evt, &ctx), CS_NOT_DONE);
    EXPECT(csQueueComputeRequest(req, &kept, NULL, evt, NULL, NULL), CS_QUEUED);
    EXPECT(poll_event(evt, &ctx), CS_SUCCESS);
    ASSERT(ctx == &kept);
    EXPECT(csPollEvent(evt, NULL), CS_NOT_DONE);
    /* A failing request signals its failure to the event. */
    CsComputeRequest *stale = compute_request(dev, 63, 0);
    EXPECT(csQueueComputeRequest(stale, NULL, NULL, evt, NULL, NULL), CS_QUEUED);
    EXPECT(poll_event(evt, NULL), CS_UNKNOWN_COMPUTE_FUNCTION);
    ASSERT(strstr(csxGetLastError(), "csQueueComputeRequest") != NULL);
    EXPECT(csDeleteEvent(evt), CS_SUCCESS);
    EXPECT(csDeleteEvent(evt), CS_INVALID_EVENT);
    EXPECT(csPollEvent(evt, NULL), CS_INVALID_EVENT);
    EXPECT(csQueueComputeRequest(req, NULL, NULL, evt, NULL, NULL), CS_INVALID_EVENT);
    EXPECT(csCreateEvent(NULL), CS_INVALID_ARG);

    /* Bad compute requests. */
    EXPECT(csQueueComputeRequest(NULL, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ARG);
    req->NumArgs = -1;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    req->NumArgs = CS_COMPUTE_ARGS_MAX + 1;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    req->NumArgs = 4;
    req->Args[0].Type = 77;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_OPTION);
    req->Args[0].Type = CS_AFDM_TYPE;
    req->Args[0].u.DevMem.ByteOffset = N * 8 + 8;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
    req->Args[0].u.DevMem.ByteOffset = 0;
    req->CSFId = 1000000;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_ID);
    req->CSFId = id;
    /* A CSF's own error code is a value (r0), not a status: filter returns CSX_ENOSPC
     * when its output does not fit. */
    CS_MEM_HANDLE small_out = NULL;
    EXPECT(csAllocMem(dev, 8, NULL, &small_out, NULL), CS_SUCCESS);
    req->Args[1].u.DevMem.MemHandle = small_out;
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, &r0), CS_SUCCESS);
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
        CS_BATCH_INDEX e_out = -5, e_cmp = -5, e_in = -5;
        CsBatchRequest b_out = {CS_COPY_AFDM, &cout};
        CsBatchRequest b_cmp = {CS_QUEUE_COMPUTE, breq};
        CsBatchRequest b_in = {CS_COPY_AFDM, &cin};
        EXPECT(csAddBatchEntry(batch, &b_out, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, &e_out), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_cmp, e_out, CS_BATCH_INDEX_NONE, &e_cmp), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_in, e_cmp, CS_BATCH_INDEX_NONE, &e_in), CS_SUCCESS);
        ASSERT(e_out == 0 && e_cmp == 1 && e_in == 2);
        EXPECT(csAddBatchEntry(batch, &b_in, 7, CS_BATCH_INDEX_NONE, NULL), CS_INVALID_ID);
        CsBatchRequest b_bad = {9, &cin};
        EXPECT(csAddBatchEntry(batch, &b_bad, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, NULL), CS_INVALID_OPTION);
        CsBatchRequest b_null = {CS_COPY_AFDM, NULL};
        EXPECT(csAddBatchEntry(batch, &b_null, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, NULL), CS_INVALID_ARG);
        uint64_t ran = 0;
        EXPECT(csQueueBatchRequest(batch, NULL, NULL, NULL, NULL, &ran), CS_SUCCESS);
        ASSERT(ran == 3);
        ASSERT(got[0] == 150 && got[1] == 160 && got[2] == 170 && got[3] == 199);
        /* With a callback. */
        atomic_store(&callbacks, 0);
        EXPECT(csQueueBatchRequest(batch, &callbacks, on_done, NULL, NULL, NULL), CS_QUEUED);
        wait_count(&callbacks, 1, __LINE__);
        ASSERT(callback_status == CS_SUCCESS && callback_value == 3);
        /* Full: MaxReqs 4 allows one more entry only. */
        EXPECT(csAddBatchEntry(batch, &b_in, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, NULL), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_in, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, NULL), CS_OUT_OF_RESOURCES);
        EXPECT(csFreeBatchRequest(batch), CS_SUCCESS);
        EXPECT(csFreeBatchRequest(batch), CS_INVALID_HANDLE);
        EXPECT(csQueueBatchRequest(batch, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);

        /* A cycle: 0 -> 1 -> 2 -> 0 is refused before anything runs. */
        got[0] = 12345;
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 8, &batch), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_out, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, NULL), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_out, CS_BATCH_INDEX_NONE, 0, NULL), CS_SUCCESS);
        EXPECT(csAddBatchEntry(batch, &b_out, 0, 1, NULL), CS_SUCCESS);
        EXPECT(csQueueBatchRequest(batch, NULL, NULL, NULL, NULL, &ran), CS_INVALID_ARG);
        ASSERT(got[0] == 12345);
        ASSERT(strstr(csxGetLastError(), "cycle") != NULL);
        EXPECT(csFreeBatchRequest(batch), CS_SUCCESS);
        /* A failing entry stops the batch and is its status. */
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 8, &batch), CS_SUCCESS);
        CsCopyMemRequest bad_copy = {CS_COPY_FROM_DEVICE, got, {bout, 0}, 4096};
        CsBatchRequest b_fail = {CS_COPY_AFDM, &bad_copy};
        EXPECT(csAddBatchEntry(batch, &b_fail, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, NULL), CS_SUCCESS);
        EXPECT(csQueueBatchRequest(batch, NULL, NULL, NULL, NULL, NULL), CS_INVALID_LENGTH);
        EXPECT(csFreeBatchRequest(batch), CS_SUCCESS);
        EXPECT(csAllocBatchRequest(7, 8, &batch), CS_INVALID_OPTION);
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 0, &batch), CS_INVALID_LENGTH);
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, CS_BATCH_ENTRIES_MAX + 1, &batch), CS_INVALID_LENGTH);
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 8, NULL), CS_INVALID_ARG);
        free(breq);
        EXPECT(csFreeMem(bin), CS_SUCCESS);
        EXPECT(csFreeMem(bout), CS_SUCCESS);
    }

    /* Properties, statistics, the CSF list. */
    {
        CSxProperties props;
        int plen = 4;
        EXPECT(csQueryDeviceProperties(dev, &plen, &props), CS_INVALID_LENGTH);
        ASSERT(plen == (int)sizeof props);
        EXPECT(csQueryDeviceProperties(dev, &plen, &props), CS_SUCCESS);
        ASSERT(strcmp(props.FriendlyName, uri) == 0 || strlen(uri) >= sizeof props.FriendlyName);
        ASSERT(props.ProgramSlots == 64 && props.FDMSizeBytes == (16u << 20));
        ASSERT(props.Flags & CS_FDM_IS_DEVICE_MANAGED);
        ASSERT(!(props.Flags & CS_FDM_IS_HOST_VISIBLE));
        EXPECT(csQueryDeviceProperties(NULL, &plen, &props), CS_INVALID_HANDLE);
        EXPECT(csQueryDeviceProperties(dev, NULL, &props), CS_INVALID_ARG);

        CsStatsInfo stats;
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_FUNCTION, &id, &stats), CS_SUCCESS);
        ASSERT(stats.Executions >= 4 && stats.ProgramsActive == 1);
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_MEMORY, NULL, &stats), CS_SUCCESS);
        ASSERT(stats.MemSizeBytes == (16u << 20) && stats.MemFreeBytes < stats.MemSizeBytes);
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_CSE, NULL, &stats), CS_SUCCESS);
        ASSERT(stats.ProgramsLoaded == 1 && stats.ProgramsActive == 1);
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_FUNCTION, NULL, &stats), CS_INVALID_ARG);
        CS_CSF_ID empty_id = 63;
        EXPECT(csQueryDeviceStatistics(dev, CS_STAT_FUNCTION, &empty_id, &stats), CS_UNKNOWN_COMPUTE_FUNCTION);
        EXPECT(csQueryDeviceStatistics(dev, 99, NULL, &stats), CS_INVALID_OPTION);

        int count = 0;
        EXPECT(csQueryCSFList(dev, &count, NULL), CS_SUCCESS);
        ASSERT(count > 1);
        CsCSFInfo csfs[64];
        int one = 1;
        EXPECT(csQueryCSFList(dev, &one, csfs), CS_INVALID_LENGTH);
        int cap = 64;
        EXPECT(csQueryCSFList(dev, &cap, csfs), CS_SUCCESS);
        ASSERT(cap == count);
        ASSERT(csfs[0].Downloadable == 1 && csfs[0].CSFId == id && strcmp(csfs[0].UniqueName, "filter") == 0);
        int builtins = 0;
        for (int i = 1; i < cap; i++) {
            if (!csfs[i].Downloadable) {
                builtins++;
                ASSERT(csfs[i].CSFId >= CS_BUILTIN_CSF_BASE);
            }
        }
        ASSERT(builtins == cap - 1);
        CsComputeRequest *builtin = compute_request(dev, csfs[1].CSFId, 0);
        EXPECT(csQueueComputeRequest(builtin, NULL, NULL, NULL, NULL, NULL), CS_UNSUPPORTED);
        free(builtin);
    }

    /* csGetCSxFromPath: a path in a state directory names its device. */
    {
        char name[4096];
        int nlen = sizeof name;
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
            ASSERT(nlen == (int)strlen(uri) + 1);
            CS_DEV_HANDLE found_dev = NULL;
            EXPECT(csOpenCSx(name, NULL, &found_dev), CS_SUCCESS);
            EXPECT(csCloseCSx(found_dev), CS_SUCCESS);
        }
        nlen = sizeof name;
        EXPECT(csGetCSxFromPath("/", &nlen, name), CS_NO_SUCH_ENTITY_EXISTS);
        EXPECT(csGetCSxFromPath("/no/such/path", &nlen, name), CS_ENOENT);
        EXPECT(csGetCSxFromPath(NULL, &nlen, name), CS_INVALID_ARG);
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
                EXPECT(csQueueComputeRequest(req, (void *)(uintptr_t)i, on_ordered, NULL, NULL, NULL), CS_QUEUED);
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
        EXPECT(csFreeMem(slots), CS_SUCCESS);
    }

    /* Aborts. The loop gets the most fuel and a 60 s limit: only an abort ends it soon. */
    CsDownloadInfo spin_dl = {CS_BPF_PROGRAM, CS_BPF_RAW, CS_ANY_INDEX, 0, sizeof SPIN, SPIN, NULL};
    CS_CSF_ID spin = 0;
    EXPECT(csDownload(dev, &spin_dl, &spin), CS_SUCCESS);
    CsConfigInfo spin_on = {CS_CSF_ACTIVATE, CS_ENGINE_DEFAULT, spin};
    EXPECT(csConfig(dev, &spin_on), CS_SUCCESS);
    EXPECT(csxSetComputeLimits(dev, UINT64_C(1) << 40, 60000), CS_SUCCESS);
    EXPECT(csxSetComputeLimits(dev, (UINT64_C(1) << 40) + 1, 0), CS_INVALID_LENGTH);
    EXPECT(csxSetComputeLimits(dev, 0, 3600001), CS_INVALID_LENGTH);
    EXPECT(csxSetComputeLimits(NULL, 0, 0), CS_INVALID_HANDLE);
    CsComputeRequest *spin_req = compute_request(dev, spin, 0);
    {
        /* A running loop: aborted, it completes with CS_ABORTED long before its limit. */
        atomic_store(&callbacks, 0);
        CS_REQ_HANDLE running = NULL, behind = NULL;
        uint64_t spin_r0 = 777;
        double t0 = now_s();
        EXPECT(csQueueComputeRequest(spin_req, &callbacks, on_done, NULL, &running, &spin_r0), CS_QUEUED);
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
        EXPECT(callback_status, CS_ABORTED);
        ASSERT(spin_r0 == 777); /* no completion value for a failed request */
        ASSERT(took < 30.0); /* the 60 s time limit did not end it */
        wait_count(&ordered, 1, __LINE__);
        ASSERT(order[0] == 7 && order_status[0] == CS_ABORTED);
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
        EXPECT(csQueueComputeRequest(spin_req, NULL, NULL, spin_evt, &evented, NULL), CS_QUEUED);
        EXPECT(csPollEvent(spin_evt, NULL), CS_NOT_DONE);
        EXPECT(csAbortRequest(evented), CS_SUCCESS);
        EXPECT(poll_event(spin_evt, NULL), CS_ABORTED);
        EXPECT(csDeleteEvent(spin_evt), CS_SUCCESS);

        /* A batch: loop, then a copy. Aborted, the copy never runs. */
        CS_BATCH_HANDLE sb = NULL;
        EXPECT(csAllocBatchRequest(CS_BATCH_SERIAL, 2, &sb), CS_SUCCESS);
        CsBatchRequest e_spin = {CS_QUEUE_COMPUTE, spin_req};
        unsigned char marker[8] = {9, 9, 9, 9, 9, 9, 9, 9};
        CsCopyMemRequest put_marker = {CS_COPY_TO_DEVICE, marker, {scratch, 0}, 8};
        CsBatchRequest e_put = {CS_COPY_AFDM, &put_marker};
        CS_BATCH_INDEX first = -1;
        EXPECT(csAddBatchEntry(sb, &e_spin, CS_BATCH_INDEX_NONE, CS_BATCH_INDEX_NONE, &first), CS_SUCCESS);
        EXPECT(csAddBatchEntry(sb, &e_put, CS_BATCH_INDEX_NONE, first, NULL), CS_SUCCESS);
        CS_REQ_HANDLE batch_req = NULL;
        uint64_t batch_done = 555;
        EXPECT(csQueueBatchRequest(sb, &callbacks, on_done, NULL, &batch_req, &batch_done), CS_QUEUED);
        sleep_ms(200);
        EXPECT(csAbortRequest(batch_req), CS_SUCCESS);
        wait_count(&callbacks, 3, __LINE__);
        EXPECT(callback_status, CS_ABORTED);
        ASSERT(batch_done == 555);
        unsigned char check[8] = {1};
        CsCopyMemRequest get_check = {CS_COPY_FROM_DEVICE, check, {scratch, 0}, 8};
        EXPECT(csQueueCopyMemRequest(&get_check, NULL, NULL, NULL, NULL, NULL), CS_SUCCESS);
        ASSERT(memcmp(check, untouched, 8) == 0); /* neither aborted copy ran */
        EXPECT(csFreeBatchRequest(sb), CS_SUCCESS);
        EXPECT(csFreeMem(scratch), CS_SUCCESS);
    }
    EXPECT(csxSetComputeLimits(dev, 0, 0), CS_SUCCESS);

    /* Deactivate, unload, then the id is unknown. */
    CsConfigInfo deactivate = {CS_CSF_DEACTIVATE, 0, id};
    EXPECT(csConfig(dev, &deactivate), CS_SUCCESS);
    CsDownloadInfo unload = {CS_BPF_PROGRAM, CS_BPF_ELF, (int32_t)id, 1, 0, NULL, NULL};
    EXPECT(csDownload(dev, &unload, NULL), CS_SUCCESS);
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_UNKNOWN_COMPUTE_FUNCTION);
    EXPECT(csGetCSFId(dev, "filter", &found), CS_INVALID_FUNCTION_NAME);

    /* Close with requests in flight: the loop is aborted, the requests behind it never
     * run, and every callback has returned when csCloseCSx returns. */
    EXPECT(csxSetComputeLimits(dev, UINT64_C(1) << 40, 60000), CS_SUCCESS);
    atomic_store(&ordered, 0);
    EXPECT(csQueueComputeRequest(spin_req, (void *)(uintptr_t)0, on_ordered, NULL, NULL, NULL), CS_QUEUED);
    for (uintptr_t i = 1; i < 4; i++)
        EXPECT(csQueueComputeRequest(spin_req, (void *)i, on_ordered, NULL, NULL, NULL), CS_QUEUED);
    sleep_ms(100);
    /* Close: every handle of the device becomes invalid. */
    EXPECT(csCloseCSx(dev), CS_SUCCESS);
    ASSERT(atomic_load(&ordered) == 4);
    for (int i = 0; i < 4 && i < atomic_load(&ordered); i++)
        ASSERT(order[i] == (uintptr_t)i && order_status[i] == CS_ABORTED);
    /* The device serves again after that: the loop's slot is emptied (a daemon keeps it). */
    CS_DEV_HANDLE again = NULL;
    EXPECT(csOpenCSx(uri, NULL, &again), CS_SUCCESS);
    CsStatsInfo spin_stats;
    CS_STATUS kept_slot = csQueryDeviceStatistics(again, CS_STAT_FUNCTION, &spin, &spin_stats);
    if (kept_slot == CS_SUCCESS) { /* a daemon keeps its programs; an embedded device not */
        CsConfigInfo spin_off = {CS_CSF_DEACTIVATE, 0, spin};
        EXPECT(csConfig(again, &spin_off), CS_SUCCESS);
        CsDownloadInfo spin_unload = {CS_BPF_PROGRAM, CS_BPF_RAW, (int32_t)spin, 1, 0, NULL, NULL};
        EXPECT(csDownload(again, &spin_unload, NULL), CS_SUCCESS);
    } else {
        EXPECT(kept_slot, CS_UNKNOWN_COMPUTE_FUNCTION);
    }
    EXPECT(csCloseCSx(again), CS_SUCCESS);
    EXPECT(csCloseCSx(dev), CS_INVALID_HANDLE);
    EXPECT(csFreeMem(in), CS_INVALID_HANDLE);
    EXPECT(csQueueComputeRequest(req, NULL, NULL, NULL, NULL, NULL), CS_INVALID_HANDLE);

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
