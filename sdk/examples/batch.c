/*
 * batch: a filter and aggregate offload as one SNIA batch request with a dependency graph:
 * load the file into device memory, run filter_aggregate over it, copy its 32-byte result
 * back. Each entry names the one it runs after; libcsx runs them in an order that respects
 * every edge and stops at the first failure.
 *
 *   batch DEVICE FILTER_AGGREGATE_ELF FILE BYTES LO HI
 *
 * FILTER_AGGREGATE_ELF: sdk/programs/filter_aggregate.c compiled with
 * `clang -O2 -target bpf -c -I sdk/include`. Prints the count and sum of the values
 * within [LO, HI], as filter_offload does. Build: gcc batch.c $(pkg-config --cflags --libs csx)
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cs_api.h>

static int check(CS_STATUS status, const char *what)
{
    if (status != CS_SUCCESS) {
        fprintf(stderr, "batch: %s failed (%d): %s\n", what, status, csxGetLastError());
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
        fprintf(stderr, "usage: batch DEVICE FILTER_AGGREGATE_ELF FILE BYTES LO HI\n");
        return 2;
    }
    const char *device = argv[1], *file = argv[3];
    uint64_t bytes = strtoull(argv[4], NULL, 0);
    uint64_t lo = strtoull(argv[5], NULL, 0), hi = strtoull(argv[6], NULL, 0);
    int rc = 1;
    CS_DEV_HANDLE dev = NULL;
    void *file_handle = NULL;
    CS_MEM_HANDLE in = NULL, out = NULL;
    CS_BATCH_HANDLE batch = NULL;
    CsBatchRequest *e_compute = NULL;
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
    TRY(csAllocMem(dev, 32, NULL, &out, NULL));
    CsCSFDownloadInfo dl = {.type = CS_CSF_BPF_PROGRAM, .SubType = CSX_BPF_ELF,
                            .Index = (u32)CSX_ANY_INDEX};
    dl.common = (CsCommonDownloadInfo){"filter_aggregate", 0, (int)elf_len, elf};
    CS_CSF_ID id;
    TRY(csCSFDownload(dev, &dl, &id));
    CsConfigInfo activate = {CS_CSF_ACTIVATE, CSX_ENGINE_DEFAULT, (int)id, 0, NULL};
    TRY(csConfig(dev, &activate));

    /* The three requests: each is copied into its batch entry (the copy's host buffer,
     * result, must stay valid until the batch completes). */
    TRY(csxOpenFile(dev, file, &file_handle));
    CsBatchRequest e_load = {.ReqType = CS_STORAGE_IO};
    e_load.u.StorageIo.Mode = CS_STORAGE_FILE_IO;
    e_load.u.StorageIo.DevHandle = dev;
    e_load.u.StorageIo.u.FileIo = (CsFileIo){CS_STORAGE_LOAD_TYPE, file_handle, 0, (u32)bytes, {in, 0}};
    /* A compute entry with 4 arguments is longer than the union: reqLength says so. */
    size_t compute_len = offsetof(CsBatchRequest, u) + sizeof(CsComputeRequest) + 3 * sizeof(CsComputeArg);
    e_compute = calloc(1, compute_len);
    e_compute->ReqType = CS_QUEUE_COMPUTE;
    e_compute->reqLength = (u32)compute_len;
    CsComputeRequest *req = &e_compute->u.Compute;
    req->DevHandle = dev;
    req->CSFId = id;
    req->NumArgs = 4;
    csHelperSetComputeArg(&req->Args[0], CS_AFDM_TYPE, in, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[1], CS_AFDM_TYPE, out, (uint64_t)0);
    csHelperSetComputeArg(&req->Args[2], CS_64BIT_VALUE_TYPE, lo);
    csHelperSetComputeArg(&req->Args[3], CS_64BIT_VALUE_TYPE, hi);
    uint64_t result[4] = {0}; /* count, sum, min, max */
    CsBatchRequest e_copy = {.ReqType = CS_COPY_AFDM};
    e_copy.u.CopyMem = (CsCopyMemRequest){CS_COPY_FROM_DEVICE, result, {out, 0}, sizeof result};

    /* The graph: load -> compute -> copy. Entries are added in any order; an edge says
     * "runs after" (After) or "runs before" (Before). Here the copy goes in first. */
    TRY(csAllocBatchRequest(CS_BATCH_SERIAL, 3, &batch));
    CS_BATCH_INDEX i_copy, i_compute, i_load;
    TRY(csAddBatchEntry(batch, &e_copy, CSX_BATCH_INDEX_NONE, CSX_BATCH_INDEX_NONE, &i_copy));
    TRY(csAddBatchEntry(batch, e_compute, i_copy, CSX_BATCH_INDEX_NONE, &i_compute));
    TRY(csAddBatchEntry(batch, &e_load, i_compute, CSX_BATCH_INDEX_NONE, &i_load));
    u32 ran = 0;
    TRY(csQueueBatchRequest(batch, NULL, NULL, NULL, &ran));
    fprintf(stderr, "batch: %u entries ran (load %u, compute %u, copy %u)\n", ran, i_load,
            i_compute, i_copy);
    printf("kept %" PRIu64 " sum %" PRIu64 "\n", result[0], result[1]);

    CsCSFDownloadInfo unload = {.type = CS_CSF_BPF_PROGRAM, .Index = id};
    unload.common.Unload = 1;
    TRY(csCSFDownload(dev, &unload, NULL));
    rc = 0;
out:
    if (batch)
        csFreeBatchRequest(batch);
    if (in)
        csFreeMem(in, NULL);
    if (out)
        csFreeMem(out, NULL);
    if (file_handle)
        csxCloseFile(file_handle);
    if (dev)
        csCloseCSx(dev);
    free(e_compute);
    free(elf);
    return rc;
}
