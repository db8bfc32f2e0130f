/* Sum (in 64 bits), minimum and maximum of `count` u32 values. */
#include "bench.h"

CSX_BENCH_KERNEL(stats32) {
    const u32 *v = (const u32 *)in->data;
    u64 n = in->count;
    u64 sum = 0;
    u32 min = ~0U;
    u32 max = 0;
    for (u64 i = 0; i < n; i++) {
        u32 x = v[i];
        sum += x;
        min = x < min ? x : min;
        max = x > max ? x : max;
    }
    return csx_bench_mix(csx_bench_mix(sum, min), max);
}
