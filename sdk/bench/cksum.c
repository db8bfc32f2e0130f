/*
 * The Internet checksum (RFC 1071) over the data as big-endian u16 words, built from
 * two u8 loads each, plus a sum of the same data as little-endian u16 loads.
 */
#include "bench.h"

CSX_BENCH_KERNEL(cksum) {
    const u8 *b = in->data;
    const u16 *w = (const u16 *)in->data;
    u64 n = in->bytes / 2;
    u32 sum = 0;
    u64 le = 0;
    for (u64 i = 0; i < n; i++) {
        sum += ((u32)b[2 * i] << 8) | b[2 * i + 1];
        le += w[i];
    }
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return csx_bench_mix((u16)~sum, le);
}
