/* MurmurHash3 (x86, 32-bit) over the data as u32 words: 32-bit multiplies and rotates. */
#include "bench.h"

static inline u32 rotl32(u32 x, int r) {
    return (x << r) | (x >> (32 - r));
}

CSX_BENCH_KERNEL(murmur) {
    const u32 *w = (const u32 *)in->data;
    u64 n = in->bytes / sizeof(u32);
    u32 h = 0x9747b28cU;
    for (u64 i = 0; i < n; i++) {
        u32 k = w[i] * 0xcc9e2d51U;
        k = rotl32(k, 15) * 0x1b873593U;
        h = rotl32(h ^ k, 13) * 5 + 0xe6546b64U;
    }
    h ^= (u32)(n * 4);
    h ^= h >> 16;
    h *= 0x85ebca6bU;
    h ^= h >> 13;
    h *= 0xc2b2ae35U;
    h ^= h >> 16;
    return h;
}
