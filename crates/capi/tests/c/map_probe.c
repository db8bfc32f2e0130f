/*
 * Run by a user other than the device's: an shm device that serves other users opens
 * for it, allocates for it, and refuses to map that memory into it
 * (CS_COULD_NOT_MAP_MEMORY, VAddress left NULL, nothing allocated); memory it does not
 * ask to map is still its own.
 *   map_probe URI
 * Prints "map_probe: uid U refused: MESSAGE" then "map_probe: ok"; exits 1 otherwise.
 */
#include "cs_api.h"

#include <stdio.h>
#include <unistd.h>

static int failed(const char *what, CS_STATUS st) {
    fprintf(stderr, "map_probe: %s: status %d: %s\n", what, (int)st, csxGetLastError());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: map_probe URI\n");
        return 2;
    }
    CS_DEV_HANDLE dev = NULL;
    CS_STATUS st = csOpenCSx(argv[1], NULL, &dev);
    if (st != CS_SUCCESS)
        return failed("csOpenCSx", st);
    CS_MEM_HANDLE mem = NULL;
    void *va = NULL;
    st = csAllocMem(dev, 4096, NULL, &mem, &va);
    if (st != CS_COULD_NOT_MAP_MEMORY || va != NULL || mem != NULL) {
        fprintf(stderr, "map_probe: a mapped allocation as uid %u: status %d, VAddress %p\n",
                (unsigned)getuid(), (int)st, va);
        return 1;
    }
    printf("map_probe: uid %u refused: %s\n", (unsigned)getuid(), csxGetLastError());
    st = csAllocMem(dev, 4096, NULL, &mem, NULL);
    if (st != CS_SUCCESS)
        return failed("csAllocMem without a mapping", st);
    st = csFreeMem(mem, NULL);
    if (st != CS_SUCCESS)
        return failed("csFreeMem", st);
    st = csCloseCSx(dev);
    if (st != CS_SUCCESS)
        return failed("csCloseCSx", st);
    printf("map_probe: ok\n");
    return 0;
}
