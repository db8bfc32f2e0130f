/*
 * compress: the stream as a csx_lz4 stream (the format `decompress` reads), through the
 * accelerated device function csx_lz4_compress: each chunk is cut into frames of at
 * most 64 KiB raw, each frame u32 raw bytes, u32 compressed bytes, then the LZ4 block.
 * No params, no state. Output capacity: len + len/10 + 40 per started 64 KiB + 64.
 */
#include "ops.h"

#define FRAME (64UL << 10)

CSX_PROGRAM(compress)
{
    csx_u8 *out = CSX_OP_OUT(args);
    const csx_u8 *in = CSX_OP_IN(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    unsigned long cap = CSX_OP_OUT_CAP(args);
    unsigned long o = 0;
    for (unsigned long pos = 0; pos < len; pos += FRAME) {
        unsigned long raw = len - pos < FRAME ? len - pos : FRAME;
        if (cap - o < 8)
            return CSX_ENOSPC;
        long n = csx_lz4_compress(in + pos, raw, out + o + 8, cap - o - 8);
        if (n < 0)
            return n;
        ops_put_u32(out + o, raw);
        ops_put_u32(out + o + 4, n);
        o += 8 + n;
    }
    return o;
}
