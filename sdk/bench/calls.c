/*
 * A small function called for every element (kept out of line, as a helper in a
 * separate file would be): a bpf-to-bpf call in the hot loop. Scores u64 values by
 * clamping them into a window and weighting by their low bits.
 */
#include "bench.h"

__attribute__((noinline)) static u64 score(u64 x, u64 lo, u64 hi) {
    u64 c = x < lo ? lo : x > hi ? hi : x;
    return (c - lo) * ((x & 7) + 1);
}

CSX_BENCH_KERNEL(calls) {
    const u64 *v = (const u64 *)in->data;
    u64 n = in->bytes / sizeof(u64);
    u64 lo = 1ULL << 62;
    u64 hi = 3ULL << 62;
    u64 total = 0;
    for (u64 i = 0; i < n; i++)
        total += score(v[i], lo, hi) >> 32;
    return total;
}
