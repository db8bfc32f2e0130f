/*
 * A u32 predicate filter: counts and sums the values inside a window that also pass a
 * bit test, or that are a multiple of 7 in the low byte.
 */
#include "bench.h"

CSX_BENCH_KERNEL(pred32) {
    const u32 *v = (const u32 *)in->data;
    u64 n = in->bytes / sizeof(u32);
    u64 hits = 0;
    u64 total = 0;
    for (u64 i = 0; i < n; i++) {
        u32 x = v[i];
        if ((x > 0x40000000U && x < 0xc0000000U && (x & 0x30) != 0) || (x & 0xff) % 7 == 0) {
            hits++;
            total += x >> 8;
        }
    }
    return csx_bench_mix(hits, total);
}
