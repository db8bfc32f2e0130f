/*
 * filter_offload: the SNIA Computational Storage API's usage flow on a csx device.
 * Discover, open, allocate device memory, load a file from storage into it, download and
 * activate a filter program, compute next to the data, copy only the result back.
 *
 *   filter_offload DEVICE FILTER_ELF FILE BYTES LO HI
 *
 * DEVICE is a csx URI (a state directory, shm://NAME, tcp://HOST:PORT); FILE a device
 * file of BYTES bytes of little-endian u64s; FILTER_ELF sdk/programs/filter.c compiled
 * with `clang -O2 -target bpf -c`. Prints the values kept (LO <= x <= HI): their count
 * and sum. Build: gcc filter_offload.c $(pkg-config --cflags --libs csx)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <cs_api.h>

static int check(CS_STATUS status, const char *what)
{
    if (status != CS_SUCCESS) {
        fprintf(stderr, "filter_offload: %s failed (%d): %s\n", what, status, csxGetLastError());
        return 0;
    }
    return 1;
}

#define TRY(call)                       \
    do {                                \
        if (!check((call), #call))      \
            goto out;                   \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: filter_offload DEVICE FILTER_ELF FILE BYTES LO HI\n");
        return 2;
    }
    const char *device = argv[1], *file = argv[3];
    uint64_t bytes = strtoull(argv[4], NULL, 0);
    uint64_t lo = strtoull(argv[5], NULL, 0), hi = strtoull(argv[6], NULL, 0);
    int rc = 1;
    CS_DEV_HANDLE dev = NULL;
    CS_MEM_HANDLE in = NULL, out = NULL;
    void *file_handle = NULL;
    CsComputeRequest *req = NULL;
    uint64_t *kept = NULL;

    /* The program image. */
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long elf_len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *elf = malloc((size_t)elf_len);
    if (!elf || fread(elf, 1, (size_t)elf_len, f) != (size_t)elf_len) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        fclose(f);
        return 2;
    }
    fclose(f);

    /* 1. Discover and open. */
    char list[4096];
    int len = sizeof list;
    TRY(csQueryCSxList(&len, list));
    fprintf(stderr, "devices known: %s\n", len > 1 ? list : "(none in CSX_DEVICES)");
    TRY(csOpenCSx(device, NULL, &dev));
    CSxProperties props;
    int plen = sizeof props;
    TRY(csQueryDeviceProperties(dev, &plen, &props));
    fprintf(stderr, "%s: %u engines, %u MiB device memory\n", props.FriendlyName,
            props.CSE[0].MaxConcurrentFunctionInstances, props.FDMinMB);

    /* 2. Allocate device memory: the input and the output. */
    TRY(csAllocMem(dev, bytes, NULL, &in, NULL));
    TRY(csAllocMem(dev, bytes, NULL, &out, NULL));

    /* 3. Load the file from storage into device memory (no trip through the host). */
    TRY(csxOpenFile(dev, file, &file_handle));
    CsStorageRequest load = {.Mode = CS_STORAGE_FILE_IO, .DevHandle = dev};
    load.u.FileIo = (CsFileIo){CS_STORAGE_LOAD_TYPE, file_handle, 0, (u32)bytes, {in, 0}};
    TRY(csQueueStorageRequest(&load, NULL, NULL, NULL, NULL, NULL));

    /* 4. Download and activate the filter. */
    CsCSFDownloadInfo dl = {.type = CS_CSF_BPF_PROGRAM, .SubType = CSX_BPF_ELF,
                            .Index = (u32)CSX_ANY_INDEX};
    dl.common = (CsCommonDownloadInfo){"filter", 0, (int)elf_len, elf};
    CS_CSF_ID id;
    TRY(csCSFDownload(dev, &dl, &id));
    CsConfigInfo activate = {CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, (int)id, 0, NULL};
    TRY(csConfig(dev, &activate));

    /* 5. Compute: filter(in -> out, lo, hi); r0 = the bytes kept. */
    req = malloc(sizeof *req + 4 * sizeof(CsComputeArg));
    req->DevHandle = dev;
    req->CSFId = id;
    req->NumArgs = 4;
    csHelperSetComputeArg(&req->Args[0], CS_AFDM_TYPE, in, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[1], CS_AFDM_TYPE, out, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[2], CS_64BIT_VALUE_TYPE, lo);
    csHelperSetComputeArg(&req->Args[3], CS_64BIT_VALUE_TYPE, hi);
    uint64_t r0 = 0;
    TRY(csQueueComputeRequest(req, NULL, NULL, NULL, &r0));
    if ((int64_t)r0 < 0) {
        fprintf(stderr, "filter returned error %" PRId64 "\n", (int64_t)r0);
        goto out;
    }

    /* 6. Copy only the result back. */
    kept = malloc(r0 ? r0 : 1);
    CsCopyMemRequest copy = {CS_COPY_FROM_DEVICE, kept, {out, 0}, (unsigned int)r0};
    if (r0)
        TRY(csQueueCopyMemRequest(&copy, NULL, NULL, NULL, NULL, NULL));
    uint64_t sum = 0;
    for (uint64_t i = 0; i < r0 / 8; i++)
        sum += kept[i];
    printf("kept %" PRIu64 " sum %" PRIu64 "\n", r0 / 8, sum);

    CsCSFDownloadInfo unload = {.type = CS_CSF_BPF_PROGRAM, .Index = id};
    unload.common.Unload = 1;
    TRY(csCSFDownload(dev, &unload, NULL));
    rc = 0;
out:
    if (in)
        csFreeMem(in, NULL);
    if (out)
        csFreeMem(out, NULL);
    if (file_handle)
        csxCloseFile(file_handle);
    if (dev)
        csCloseCSx(dev);
    free(req);
    free(kept);
    free(elf);
    return rc;
}
