/* libcsx opens an array of devices by its URI, array:DIR, like any device.
 *
 * argv[1] is the array's URI; the array holds /data/nums (its NVMSize is the sum of its
 * members'). Device memory lives on one member, so an allocation is refused with a status
 * and a message. Prints "array_test: ok" when every check passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cs_api.h"

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

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: array_test ARRAY-URI MEMBER-NVM-BYTES\n");
        return 2;
    }
    const char *uri = argv[1];
    unsigned long long member_nvm = strtoull(argv[2], NULL, 10);
    CS_DEV_HANDLE dev = NULL;
    EXPECT(csOpenCSx("nvme://x", NULL, &dev), CS_ENODEV);
    ASSERT(strstr(csxGetLastError(), "array:DIR") != NULL);
    EXPECT(csOpenCSx(uri, NULL, &dev), CS_SUCCESS);
    CsxDeviceInfo info;
    EXPECT(csxQueryDeviceInfo(dev, &info), CS_SUCCESS);
    ASSERT(strcmp(info.Uri, uri) == 0);
    ASSERT(info.NVMSizeBytes == 2 * member_nvm);
    CS_MEM_HANDLE mem = NULL;
    ASSERT(csAllocMem(dev, 8, NULL, &mem, NULL) != CS_SUCCESS);
    ASSERT(strstr(csxGetLastError(), "is an array of 2 devices") != NULL);
    EXPECT(csCloseCSx(dev), CS_SUCCESS);
    if (failures) {
        fprintf(stderr, "array_test: %d failures\n", failures);
        return 1;
    }
    printf("array_test: ok\n");
    return 0;
}
