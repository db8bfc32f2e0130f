/*
 * A v0.5 program in the shape of the public SNIA demos (rick-heig/nvme_csd
 * host/demos/sleep): the device from a path, its properties and capabilities, one 32-bit
 * argument, a synchronous compute request through the 5-argument v0.5 call to the
 * vendor's fixed function id 100, which it does not look up (reserved for the CSF with
 * `csx program load sleep FILE --id 100`); the lookup by name must give the same id.
 *   sleep -d PATH -l MILLISECONDS
 * Prints "slept N ms in S seconds"; exits 1 on an error.
 */
#include "cs_api_v05.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define BUFFER_SIZE 4096
#define SLEEP_FUNCTION_ID 100

static double seconds(struct timeval start)
{
    struct timeval end;
    gettimeofday(&end, NULL);
    return (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_usec - start.tv_usec) / 1e6;
}

int main(int argc, char *argv[])
{
    CS_STATUS status;
    CS_DEV_HANDLE dev = 0;
    void *dev_context = NULL;
    uint8_t prop_buffer[BUFFER_SIZE];
    int prop_len = BUFFER_SIZE;
    CSxProperties *props = (CSxProperties *)prop_buffer;
    CsCapabilities caps;
    CS_FUNCTION_ID function = 0;
    char *name = malloc(BUFFER_SIZE);
    unsigned int length = BUFFER_SIZE;
    char *path = "";
    uint32_t ms = 0;
    int c;
    while ((c = getopt(argc, argv, "d:l:")) != -1) {
        if (c == 'd')
            path = optarg;
        else if (c == 'l')
            ms = (uint32_t)strtoul(optarg, NULL, 10);
        else
            return 2;
    }
    status = csGetCSxFromPath(path, &length, name);
    if (status != CS_SUCCESS) {
        printf("No CSx device found (%d)\n", status);
        return 1;
    }
    status = csOpenCSx(name, &dev_context, &dev);
    if (status != CS_SUCCESS) {
        printf("Could not access device (%d)\n", status);
        return 1;
    }
    status = csQueryDeviceProperties(dev, &prop_len, props);
    if (status != CS_SUCCESS || props->CSE[0].NumBuiltinFunctions == 0) {
        printf("Could not query device properties (%d)\n", status);
        return 1;
    }
    status = csQueryDeviceCapabilities(dev, &caps);
    if (status != CS_SUCCESS) {
        printf("Could not query device capabilities\n");
        return 1;
    }
    status = csGetFunction((CS_CSE_HANDLE)dev, "sleep", NULL, &function);
    if (status != CS_SUCCESS || function != SLEEP_FUNCTION_ID) {
        printf("No sleep function at id %d (%d: %u)\n", SLEEP_FUNCTION_ID, status, function);
        return 1;
    }
    void *req = calloc(1, sizeof(CsComputeRequest) + sizeof(CsComputeArg) * 1);
    ((CsComputeRequest *)req)->CSEHandle = dev;
    ((CsComputeRequest *)req)->FunctionId = SLEEP_FUNCTION_ID;
    ((CsComputeRequest *)req)->NumArgs = 1;
    CsComputeArg *arg = &((CsComputeRequest *)req)->Args[0];
    csHelperSetComputeArg(&arg[0], CS_32BIT_VALUE_TYPE, (u32)ms);
    struct timeval start;
    gettimeofday(&start, NULL);
    status = csQueueComputeRequest(req, NULL, NULL, NULL, NULL);
    double took = seconds(start);
    if (status != CS_SUCCESS) {
        printf("Compute exec error (%d)\n", status);
        return 1;
    }
    printf("slept %u ms in %f seconds\n", ms, took);
    free(req);
    free(name);
    csCloseCSx(dev);
    return 0;
}
