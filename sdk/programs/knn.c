/*
 * knn: the k vectors of window 0 nearest to a query vector (lambda-IO's KNN), by
 * squared Euclidean distance over integers.
 *
 * Windows: 0 = the input, back-to-back vectors of dim little-endian i32s (a partial
 * vector at the end is ignored); 1 = the output, at least 16 * min(k, vectors) bytes.
 * cparam1: the index of the window's first vector (0 for a whole file; a chunk's
 * offset in vectors when a file is read in chunks). cparam2: unused.
 * params: struct { u32 dim; u32 k; i32 query[dim]; }, 1 <= k <= 1024.
 * Output: min(k, vectors) entries struct { u64 dist; u64 index; }, nearest first, ties
 * broken by the lower index. dist = sum over j of (v[j] - query[j])^2, computed in u64
 * arithmetic that wraps modulo 2^64.
 * r0: 16 * entries, or CSX_EINVAL for bad params or no output window, CSX_ENOSPC if
 * the output window is too small.
 */
#include "csx.h"

#define KNN_K_MAX 1024
/* Query dimensions copied to the stack, widened (128 bytes of the 512-byte frame). */
#define KNN_DIM_LOCAL_MAX 16
/* The dimension of the generated datasets (and λ-IO's), compiled fully unrolled. */
#define KNN_DIM_UNROLLED 16

struct knn_params {
    csx_u32 dim;
    csx_u32 k;
    csx_i32 query[];
};

struct knn_hit {
    csx_u64 dist;
    csx_u64 index;
};

CSX_PROGRAM(knn)
{
    const struct knn_params *p = (const struct knn_params *)args->params;
    if (args->params_len < sizeof(struct knn_params))
        return CSX_EINVAL;
    csx_u64 dim = p->dim, k = p->k;
    if (dim == 0 || k == 0 || k > KNN_K_MAX)
        return CSX_EINVAL;
    if (args->params_len < sizeof(struct knn_params) + 4 * dim)
        return CSX_EINVAL;
    struct knn_hit *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    csx_u64 n = win0_len / (4 * dim);
    csx_u64 kept_max = k < n ? k : n;
    if (csx_window_len(args, 1) < 16 * kept_max)
        return CSX_ENOSPC;

    /* The query is copied to the stack when it fits: the inner loop then reads the
     * window and the stack. A loop reading the stack through a pointer it advances
     * still alternates the JIT's load region cache between the window and the stack
     * (one miss per element); the unrolled loop below reads the copy at constant frame
     * offsets, which need no check at all. */
    csx_i64 local[KNN_DIM_LOCAL_MAX];
    if (dim <= KNN_DIM_LOCAL_MAX) {
        /* Widened as they are copied (which also keeps clang from calling memcpy). */
        for (csx_u64 j = 0; j < dim; j++)
            local[j] = p->query[j];
    }
    const csx_i32 *v = win0;
    csx_u64 kept = 0;
    /* The distance an entry must beat once the output is full (its last entry's). */
    csx_u64 worst = 0;
    for (csx_u64 i = 0; i < n; i++) {
        const csx_i32 *x = v + i * dim;
        csx_u64 dist = 0;
        /* |diff| < 2^32, so diff^2 < 2^64: the unsigned square is exact. */
        if (dim == KNN_DIM_UNROLLED) {
            /* Unrolled: every query element is at a constant frame offset, which the
             * JIT reads without a check, and x's at constant offsets from one pointer. */
#pragma unroll
            for (csx_u64 j = 0; j < KNN_DIM_UNROLLED; j++) {
                csx_u64 diff = (csx_u64)((csx_i64)x[j] - local[j]);
                dist += diff * diff;
            }
        } else if (dim <= KNN_DIM_LOCAL_MAX) {
            for (csx_u64 j = 0; j < dim; j++) {
                csx_u64 diff = (csx_u64)((csx_i64)x[j] - local[j]);
                dist += diff * diff;
            }
        } else {
            for (csx_u64 j = 0; j < dim; j++) {
                csx_u64 diff = (csx_u64)((csx_i64)x[j] - (csx_i64)p->query[j]);
                dist += diff * diff;
            }
        }
        if (kept == kept_max && dist >= worst)
            continue;
        /* Insert after every entry with a distance <= dist: ties keep index order. */
        csx_u64 pos = kept < kept_max ? kept : kept_max - 1;
        while (pos > 0 && out[pos - 1].dist > dist) {
            out[pos].dist = out[pos - 1].dist;
            out[pos].index = out[pos - 1].index;
            pos--;
        }
        out[pos].dist = dist;
        out[pos].index = args->cparam1 + i;
        if (kept < kept_max)
            kept++;
        if (kept == kept_max)
            worst = out[kept_max - 1].dist;
    }
    return 16 * kept_max;
}
