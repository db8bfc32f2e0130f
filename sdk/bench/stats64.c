/* Sum, minimum and maximum of `count` u64 values. */
#include "bench.h"

CSX_BENCH_KERNEL(stats64) {
    const u64 *v = (const u64 *)in->data;
    u64 n = in->count;
    u64 sum = 0;
    u64 min = ~0ULL;
    u64 max = 0;
    for (u64 i = 0; i < n; i++) {
        u64 x = v[i];
        sum += x;
        min = x < min ? x : min;
        max = x > max ? x : max;
    }
    return csx_bench_mix(csx_bench_mix(sum, min), max);
}
