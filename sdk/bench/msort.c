/*
 * Bottom-up merge sort of 32-element u32 blocks, merging back and forth between two
 * stack buffers; the digest folds each sorted block's quartiles.
 */
#include "bench.h"

#define BLOCK 32

CSX_BENCH_KERNEL(msort) {
    const u32 *v = (const u32 *)in->data;
    u64 blocks = in->bytes / (BLOCK * sizeof(u32));
    u32 a[BLOCK];
    u32 t[BLOCK];
    u64 h = 0;
    for (u64 b = 0; b < blocks; b++) {
        /* The first pass (runs of 1 into runs of 2) as the block is loaded. */
        for (int i = 0; i < BLOCK; i += 2) {
            u32 x = v[b * BLOCK + i];
            u32 y = v[b * BLOCK + i + 1];
            a[i] = x < y ? x : y;
            a[i + 1] = x < y ? y : x;
        }
        u32 *src = a;
        u32 *dst = t;
        for (int width = 2; width < BLOCK; width *= 2) {
            for (int lo = 0; lo < BLOCK; lo += 2 * width) {
                int mid = lo + width;
                int hi = lo + 2 * width;
                int i = lo, j = mid;
                for (int k = lo; k < hi; k++) {
                    if (j >= hi || (i < mid && src[i] <= src[j]))
                        dst[k] = src[i++];
                    else
                        dst[k] = src[j++];
                }
            }
            u32 *swap = src;
            src = dst;
            dst = swap;
        }
        for (int q = 0; q < BLOCK; q += BLOCK / 4)
            h = csx_bench_mix(h, src[q]);
    }
    return h;
}
