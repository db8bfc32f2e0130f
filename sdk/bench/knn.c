/*
 * Nearest neighbours by integer squared Euclidean distance: the closest point to a
 * query vector, and how many points lie within a radius.
 *
 * data: the query (KNN_DIM i32), then `count` points of KNN_DIM i32 each.
 * param[0]: squared radius.
 */
#include "bench.h"

#define KNN_DIM 16

CSX_BENCH_KERNEL(knn) {
    const i32 *q = (const i32 *)in->data;
    const i32 *p = q + KNN_DIM;
    u64 n = in->count;
    u64 radius2 = in->param[0];
    u64 best = ~0ULL;
    u64 best_idx = 0;
    u64 within = 0;
    for (u64 i = 0; i < n; i++) {
        u64 d2 = 0;
        for (u64 k = 0; k < KNN_DIM; k++) {
            i64 d = (i64)p[k] - (i64)q[k];
            d2 += (u64)(d * d);
        }
        if (d2 < best) {
            best = d2;
            best_idx = i;
        }
        within += d2 <= radius2;
        p += KNN_DIM;
    }
    return csx_bench_mix(csx_bench_mix(best_idx, best), within);
}
