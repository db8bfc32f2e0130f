/*
 * async_callbacks: the filter offload of filter_offload.c with asynchronous completion.
 * Requests queued with a callback return CS_QUEUED at once and run on libcsx's worker
 * thread for the device handle, one at a time in the order queued, so the compute can be
 * queued right behind the load it depends on. The copy back completes through an event.
 *
 *   async_callbacks DEVICE FILTER_ELF FILE BYTES LO HI
 *
 * Arguments as for filter_offload (FILTER_ELF: sdk/programs/filter.c compiled with
 * `clang -O2 -target bpf -c`). Prints the count and sum of the values kept (LO <= x <= HI).
 * Build: gcc -pthread async_callbacks.c $(pkg-config --cflags --libs csx)
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cs_api.h>

/* What the callbacks report, guarded by a mutex: they run on libcsx's worker thread. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int completed;
static int failed;

static void on_done(void *context, CS_STATUS status, uint64_t value)
{
    const char *what = context;
    pthread_mutex_lock(&lock);
    if (status != CS_SUCCESS) {
        /* On the worker thread, csxGetLastError() names this request's failure. */
        fprintf(stderr, "async_callbacks: %s failed (%d): %s\n", what, status, csxGetLastError());
        failed++;
    } else {
        fprintf(stderr, "%s done: %" PRIu64 "\n", what, value);
    }
    completed++;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* Waits until `n` callbacks have run. */
static void wait_for(int n)
{
    pthread_mutex_lock(&lock);
    while (completed < n)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

static int check(CS_STATUS status, CS_STATUS want, const char *what)
{
    if (status != want) {
        fprintf(stderr, "async_callbacks: %s returned %d: %s\n", what, status, csxGetLastError());
        return 0;
    }
    return 1;
}

#define TRY(call)                                  \
    do {                                           \
        if (!check((call), CS_SUCCESS, #call))     \
            goto out;                              \
    } while (0)

#define QUEUE(call)                                \
    do {                                           \
        if (!check((call), CS_QUEUED, #call))      \
            goto out;                              \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: async_callbacks DEVICE FILTER_ELF FILE BYTES LO HI\n");
        return 2;
    }
    const char *device = argv[1], *file = argv[3];
    uint64_t bytes = strtoull(argv[4], NULL, 0);
    uint64_t lo = strtoull(argv[5], NULL, 0), hi = strtoull(argv[6], NULL, 0);
    int rc = 1;
    CS_DEV_HANDLE dev = NULL;
    void *file_handle = NULL;
    CS_MEM_HANDLE in = NULL, out = NULL;
    CS_EVT_HANDLE evt = NULL;
    CsComputeRequest *req = NULL;
    uint64_t *kept = NULL;
    void *elf = NULL;

    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long elf_len = ftell(f);
    fseek(f, 0, SEEK_SET);
    elf = malloc((size_t)elf_len);
    if (!elf || fread(elf, 1, (size_t)elf_len, f) != (size_t)elf_len) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        fclose(f);
        free(elf);
        return 2;
    }
    fclose(f);

    TRY(csOpenCSx(device, NULL, &dev));
    TRY(csAllocMem(dev, bytes, NULL, &in, NULL));
    TRY(csAllocMem(dev, bytes, NULL, &out, NULL));
    CsCSFDownloadInfo dl = {.type = CS_CSF_BPF_PROGRAM, .SubType = CSX_BPF_ELF,
                            .Index = (u32)CSX_ANY_INDEX};
    dl.common = (CsCommonDownloadInfo){"filter", 0, (int)elf_len, elf};
    CS_CSF_ID id;
    TRY(csCSFDownload(dev, &dl, &id));
    CsConfigInfo activate = {CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, (int)id, 0, NULL};
    TRY(csConfig(dev, &activate));

    /* Queue the load and, right behind it, the compute: both return CS_QUEUED at once.
     * r0 must stay valid until the compute completes. */
    TRY(csxOpenFile(dev, file, &file_handle));
    CsStorageRequest load = {.Mode = CS_STORAGE_FILE_IO, .DevHandle = dev};
    load.u.FileIo = (CsFileIo){CS_STORAGE_LOAD_TYPE, file_handle, 0, (u32)bytes, {in, 0}};
    QUEUE(csQueueStorageRequest(&load, "load", on_done, NULL, NULL, NULL));
    req = malloc(sizeof *req + 4 * sizeof(CsComputeArg));
    req->DevHandle = dev;
    req->CSFId = id;
    req->NumArgs = 4;
    csHelperSetComputeArg(&req->Args[0], CS_AFDM_TYPE, in, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[1], CS_AFDM_TYPE, out, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[2], CS_64BIT_VALUE_TYPE, lo);
    csHelperSetComputeArg(&req->Args[3], CS_64BIT_VALUE_TYPE, hi);
    uint64_t r0 = 0;
    CS_REQ_HANDLE compute = NULL; /* csAbortRequest(compute) would stop it */
    QUEUE(csxQueueComputeRequest(req, "compute", on_done, NULL, &compute, &r0));
    /* The request structure was copied: it may be freed now. */
    free(req);
    req = NULL;
    wait_for(2);
    if (failed || (int64_t)r0 < 0) {
        fprintf(stderr, "async_callbacks: the load or the filter failed (r0 %" PRId64 ")\n", (int64_t)r0);
        goto out;
    }

    /* Copy the result back, completing through an event this time. */
    kept = malloc(r0 ? r0 : 1);
    if (r0) {
        TRY(csCreateEvent(&evt));
        CsCopyMemRequest copy = {CS_COPY_FROM_DEVICE, kept, {out, 0}, (unsigned int)r0};
        QUEUE(csQueueCopyMemRequest(&copy, NULL, NULL, evt, NULL, NULL));
        CS_STATUS st;
        while ((st = csPollEvent(evt, NULL)) == CS_NOT_DONE) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL); /* or do other work meanwhile */
        }
        TRY(st);
    }
    uint64_t sum = 0;
    for (uint64_t i = 0; i < r0 / 8; i++)
        sum += kept[i];
    printf("kept %" PRIu64 " sum %" PRIu64 "\n", r0 / 8, sum);

    CsCSFDownloadInfo unload = {.type = CS_CSF_BPF_PROGRAM, .Index = id};
    unload.common.Unload = 1;
    TRY(csCSFDownload(dev, &unload, NULL));
    rc = 0;
out:
    if (evt)
        csDeleteEvent(evt);
    if (in)
        csFreeMem(in, NULL);
    if (out)
        csFreeMem(out, NULL);
    /* Closing aborts anything still queued and returns after its callbacks. */
    if (file_handle)
        csxCloseFile(file_handle);
    if (dev)
        csCloseCSx(dev);
    free(req);
    free(kept);
    free(elf);
    return rc;
}
