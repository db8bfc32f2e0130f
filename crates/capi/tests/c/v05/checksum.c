/*
 * A v0.5 program in the shape of the public SNIA demos (rick-heig/nvme_csd
 * host/demos/checksum): a function found by name and by capability, two AFDMs mapped
 * into the host, the file read straight into the mapping, three arguments (an AFDM set
 * with an int 0 offset, a 32-bit size, an AFDM), iterations of a synchronous request,
 * and the result read through the mapping.
 *   checksum -d PATH -f FILE [-i ITERATIONS]
 * Prints "checksum 0x%08x"; exits 1 on an error.
 */
#include "cs_api_v05.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUFFER_SIZE 4096
#define ALIGN_UP(x, a) (((x) + (a)-1) & ~((a)-1))

int main(int argc, char *argv[])
{
    CS_STATUS status;
    CS_DEV_HANDLE dev = 0;
    uint8_t prop_buffer[BUFFER_SIZE];
    int prop_len = BUFFER_SIZE;
    CSxProperties *props = (CSxProperties *)prop_buffer;
    CsCapabilities caps;
    CS_FUNCTION_ID function = 0;
    char *name = malloc(BUFFER_SIZE);
    unsigned int length = BUFFER_SIZE;
    char *path = "", *file = "test.bin";
    int iterations = 1, c;
    while ((c = getopt(argc, argv, "d:f:i:")) != -1) {
        if (c == 'd')
            path = optarg;
        else if (c == 'f')
            file = optarg;
        else if (c == 'i')
            iterations = atoi(optarg);
        else
            return 2;
    }
    if (csGetCSxFromPath(path, &length, name) != CS_SUCCESS) {
        printf("No CSx device found\n");
        return 1;
    }
    if (csOpenCSx(name, NULL, &dev) != CS_SUCCESS) {
        printf("Could not access device\n");
        return 1;
    }
    if (csQueryDeviceProperties(dev, &prop_len, props) != CS_SUCCESS || props->NumCSEs != 1) {
        printf("Could not query device properties\n");
        return 1;
    }
    if (csQueryDeviceCapabilities(dev, &caps) != CS_SUCCESS || caps.Functions.Checksum == 0) {
        printf("Device does not contain a checksum function\n");
        return 1;
    }
    status = csGetFunction((CS_CSE_HANDLE)dev, "Checksum", NULL, &function);
    if (status != CS_SUCCESS) {
        printf("Could not load function Checksum (%d)\n", status);
        return 1;
    }
    struct stat st;
    if (stat(file, &st) != 0)
        return 1;
    u64 size = (u64)st.st_size;
    CS_MEM_HANDLE afdm[2] = {NULL, NULL};
    CS_MEM_PTR va[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        status = csAllocMem(dev, i ? 4096 : (int)ALIGN_UP(size, 4096), 0, &afdm[i], &va[i]);
        if (status != CS_SUCCESS) {
            printf("AFDM alloc error (%d)\n", status);
            return 1;
        }
    }
    void *req = calloc(1, sizeof(CsComputeRequest) + sizeof(CsComputeArg) * 3);
    int fd = open(file, O_RDONLY);
    if (fd < 0 || !va[0] || pread(fd, va[0], size, 0) != (ssize_t)size) {
        printf("Memory is not mapped to userspace, or the file read failed\n");
        return 1;
    }
    close(fd);
    ((CsComputeRequest *)req)->CSEHandle = dev;
    ((CsComputeRequest *)req)->FunctionId = function;
    ((CsComputeRequest *)req)->NumArgs = 3;
    CsComputeArg *arg = &((CsComputeRequest *)req)->Args[0];
    csHelperSetComputeArg(&arg[0], CS_AFDM_TYPE, afdm[0], 0);
    csHelperSetComputeArg(&arg[1], CS_32BIT_VALUE_TYPE, (u32)size);
    csHelperSetComputeArg(&arg[2], CS_AFDM_TYPE, afdm[1], 0);
    for (int i = 0; i < iterations; i++)
        status = csQueueComputeRequest(req, NULL, NULL, NULL, NULL);
    if (status != CS_SUCCESS) {
        printf("Compute exec error (%d)\n", status);
        return 1;
    }
    u32 checksum = *((u32 *)va[1]);
    printf("checksum 0x%08x\n", checksum);
    csFreeMem(afdm[0]);
    csFreeMem(afdm[1]);
    free(req);
    free(name);
    csCloseCSx(dev);
    return 0;
}
