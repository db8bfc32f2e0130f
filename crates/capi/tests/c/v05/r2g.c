/*
 * A v0.5 asynchronous program in the shape of the public SNIA shell's r2g command
 * (petaio-tw/spdk_csd, examples/csd/shell): the function list of a path, the CSx name
 * from the path, the CSE list of the function, the CSE opened beside the CSx (memory
 * allocated through the CSx, compute through the CSE), two jobs in flight with host-mapped
 * AFDMs, 2-argument completion callbacks that write the result from the mapping.
 *   r2g PATH DIR   (DIR holds img_0.bmp .. img_5.bmp; writes gray_img_N.bmp beside them)
 * Prints "r2g: 6 images"; exits 1 on an error.
 */
#define _POSIX_C_SOURCE 200809L
#include "cs_api_v05.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FUNC_NAME "rgb2gray"
#define AFDM_SIZE (2 * 1024 * 1024)
#define QUEUE_DEPTH 2
#define IMAGES 6
#define ARGS 3

enum { IN, OUT, IO_TYPES };
enum { IDLE, COMPUTE, FAILED };

typedef struct {
    char in_path[PATH_MAX];
    int in_size;
    CS_MEM_HANDLE afdm[IO_TYPES];
    CS_MEM_PTR va[IO_TYPES];
    atomic_int state;
} job_t;

static job_t jobs[QUEUE_DEPTH];

static void on_complete(void *ctx, CS_STATUS status)
{
    job_t *job = ctx;
    bool ok = false;
    if (status == CS_SUCCESS) {
        char dir[PATH_MAX], out_path[PATH_MAX + 16];
        strncpy(dir, job->in_path, PATH_MAX - 1);
        dir[PATH_MAX - 1] = 0;
        char *base = strrchr(dir, '/');
        *base++ = 0;
        snprintf(out_path, sizeof out_path, "%s/gray_%s", dir, base);
        FILE *out = fopen(out_path, "w");
        if (out) {
            ok = fwrite(job->va[OUT], (size_t)job->in_size, 1, out) == 1;
            fclose(out);
        }
    } else {
        fprintf(stderr, "compute failed: %d\n", status);
    }
    atomic_store(&job->state, ok ? IDLE : FAILED);
}

static void wait_idle(job_t *job)
{
    while (atomic_load(&job->state) == COMPUTE) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    char *csx_path = argv[1], *dir = argv[2];
    int list_len = 0, name_len = 0, cse_len = 0;
    CS_DEV_HANDLE dev;
    CS_CSE_HANDLE cse;
    CS_FUNCTION_ID func;
    int rc = 1, done = 0;

    if (csQueryFunctionList(csx_path, &list_len, NULL) != CS_SUCCESS || list_len <= 0)
        return 1;
    char *list = calloc(1, (size_t)list_len);
    if (csQueryFunctionList(csx_path, &list_len, list) != CS_SUCCESS)
        return 1;
    printf("func list:%s\n", list);
    bool found = false;
    for (char *f = strtok(list, ","); f; f = strtok(NULL, ","))
        found |= strcmp(f, FUNC_NAME) == 0;
    if (!found)
        return 1;

    if (csGetCSxFromPath(csx_path, (unsigned int *)&name_len, NULL) != CS_SUCCESS || name_len <= 0)
        return 1;
    char *name = calloc(1, (size_t)name_len);
    if (csGetCSxFromPath(csx_path, (unsigned int *)&name_len, name) != CS_SUCCESS)
        return 1;
    if (csOpenCSx(name, NULL, &dev) != CS_SUCCESS)
        return 1;
    if (csQueryCSEList(FUNC_NAME, &cse_len, NULL) != CS_SUCCESS || cse_len <= 1)
        return 1;
    char *cses = calloc(1, (size_t)cse_len);
    if (csQueryCSEList(FUNC_NAME, &cse_len, cses) != CS_SUCCESS)
        return 1;
    printf("CSE list:%s\n", cses);
    char *cse_name = strtok(cses, ",");
    if (!cse_name || csOpenCSE(cse_name, NULL, &cse) != CS_SUCCESS)
        return 1;
    if (csGetFunction(cse, FUNC_NAME, NULL, &func) != CS_SUCCESS)
        return 1;

    for (int q = 0; q < QUEUE_DEPTH; q++) {
        atomic_store(&jobs[q].state, IDLE);
        for (int t = IN; t < IO_TYPES; t++)
            if (csAllocMem(dev, AFDM_SIZE, 0, &jobs[q].afdm[t], &jobs[q].va[t]) != CS_SUCCESS)
                goto out;
    }
    for (int i = 0, q = 0; i < IMAGES; i++, q = (q + 1) % QUEUE_DEPTH) {
        job_t *job = &jobs[q];
        wait_idle(job);
        if (atomic_load(&job->state) == FAILED)
            goto out;
        snprintf(job->in_path, PATH_MAX, "%s/img_%d.bmp", dir, i);
        FILE *in = fopen(job->in_path, "r");
        if (!in)
            goto out;
        fseek(in, 0L, SEEK_END);
        job->in_size = (int)ftell(in);
        fseek(in, 0L, SEEK_SET);
        size_t got = job->in_size <= AFDM_SIZE ? fread(job->va[IN], 1, (size_t)job->in_size, in) : 0;
        fclose(in);
        if (got != (size_t)job->in_size)
            goto out;
        CsComputeRequest *req = calloc(1, sizeof(CsComputeRequest) + sizeof(CsComputeArg) * ARGS);
        req->CSEHandle = cse;
        req->FunctionId = func;
        req->NumArgs = ARGS;
        CsComputeArg *arg = &req->Args[0];
        csHelperSetComputeArg(&arg[0], CS_AFDM_TYPE, job->afdm[IN], 0);
        csHelperSetComputeArg(&arg[1], CS_32BIT_VALUE_TYPE, job->in_size);
        csHelperSetComputeArg(&arg[2], CS_AFDM_TYPE, job->afdm[OUT], 0);
        atomic_store(&job->state, COMPUTE);
        CS_STATUS st = csQueueComputeRequest(req, job, on_complete, NULL, NULL);
        free(req);
        if (st != CS_QUEUED) {
            atomic_store(&job->state, FAILED);
            goto out;
        }
        done++;
    }
    rc = 0;
out:
    for (int q = 0; q < QUEUE_DEPTH; q++) {
        wait_idle(&jobs[q]);
        if (atomic_load(&jobs[q].state) == FAILED)
            rc = 1;
        for (int t = IN; t < IO_TYPES; t++)
            if (jobs[q].afdm[t])
                csFreeMem(jobs[q].afdm[t]);
    }
    csCloseCSE(cse);
    csCloseCSx(dev);
    if (rc == 0)
        printf("r2g: %d images\n", done);
    free(list);
    free(name);
    free(cses);
    return rc;
}
