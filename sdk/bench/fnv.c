/* FNV-1a, 64-bit, over `bytes` bytes: one multiply per byte, a serial dependency chain. */
#include "bench.h"

CSX_BENCH_KERNEL(fnv) {
    const u8 *b = in->data;
    u64 n = in->bytes;
    u64 h = 0xcbf29ce484222325ULL;
    for (u64 i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
