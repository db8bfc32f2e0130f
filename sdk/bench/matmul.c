/*
 * Multiplies two 48x48 matrices of i32 (row-major, A then B in data) with the
 * textbook triple loop, folding every element of the product into the digest.
 */
#include "bench.h"

#define N 48

CSX_BENCH_KERNEL(matmul) {
    const i32 *a = (const i32 *)in->data;
    const i32 *b = a + N * N;
    u64 h = 0;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            i32 acc = 0;
            for (int k = 0; k < N; k++)
                acc += a[i * N + k] * b[k * N + j];
            h = csx_bench_mix(h, (u32)acc);
        }
    }
    return h;
}
