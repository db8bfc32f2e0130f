/*
 * A histogram of the high nibble of every byte, kept in a 16-entry u32 array on the
 * stack: a load, an increment and a store at an address that depends on the data.
 */
#include "bench.h"

CSX_BENCH_KERNEL(hist) {
    const u8 *b = in->data;
    u64 n = in->bytes;
    u32 count[16] = {0};
    for (u64 i = 0; i < n; i++)
        count[b[i] >> 4]++;
    u64 h = 0;
    for (int k = 0; k < 16; k++)
        h = csx_bench_mix(h, count[k]);
    return h;
}
