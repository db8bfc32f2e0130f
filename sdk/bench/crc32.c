/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) computed bit by bit. */
#include "bench.h"

CSX_BENCH_KERNEL(crc32) {
    const u8 *b = in->data;
    u64 n = in->bytes;
    u32 crc = ~0U;
    for (u64 i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320U & (0U - (crc & 1)));
    }
    return ~crc;
}
