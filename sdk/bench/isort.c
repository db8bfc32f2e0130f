/*
 * Insertion sort of 64-element u32 blocks copied to a stack buffer; the digest folds
 * each sorted block's smallest, median and largest value.
 */
#include "bench.h"

#define BLOCK 64

CSX_BENCH_KERNEL(isort) {
    const u32 *v = (const u32 *)in->data;
    u64 blocks = in->bytes / (BLOCK * sizeof(u32));
    u32 buf[BLOCK];
    u64 h = 0;
    for (u64 b = 0; b < blocks; b++) {
        for (int i = 0; i < BLOCK; i++)
            buf[i] = v[b * BLOCK + i];
        for (int i = 1; i < BLOCK; i++) {
            u32 x = buf[i];
            int j = i - 1;
            while (j >= 0 && buf[j] > x) {
                buf[j + 1] = buf[j];
                j--;
            }
            buf[j + 1] = x;
        }
        h = csx_bench_mix(h, buf[0]);
        h = csx_bench_mix(h, buf[BLOCK / 2]);
        h = csx_bench_mix(h, buf[BLOCK - 1]);
    }
    return h;
}
