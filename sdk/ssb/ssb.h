/*
 * ssb.h: what the csx-data device operators (the .c files of sdk/ssb) and their host side
 * (crates/data/src/ops.rs) agree on. Every layout here is mirrored there; a change
 * changes both.
 *
 * Selection masks: bit i of a mask is row i of the chunk, in little-endian 64-bit
 * words (bit i in word i / 64, bit i % 64; the same bytes as csx_filter_u32's bitmap),
 * bits past the last row zero.
 */
#ifndef CSX_SSB_H
#define CSX_SSB_H

#include "csx.h"

/* Most value ranges one filter run ORs together (an IN list of 16 values). */
#define SSB_RANGES_MAX 16

/*
 * params of filter_*: the rows whose unsigned value lies in any of the ranges
 * [lo, hi] (inclusive) are selected. A signed comparison is turned into unsigned ranges
 * by the host.
 *
 *     offset  size  field
 *          0     4  nranges   1 .. SSB_RANGES_MAX
 *          4     4  (zero)
 *          8  16*n  ranges    {u64 lo, u64 hi}
 */
struct ssb_range {
    csx_u64 lo, hi;
};

struct ssb_filter_params {
    csx_u32 nranges;
    csx_u32 pad;
    struct ssb_range ranges[SSB_RANGES_MAX];
};

/* cparam1 of filter_* and gather: the value width (4 or 8) | combine << 8 */
#define SSB_COMBINE_WRITE 0 /* the mask becomes this filter's selection */
#define SSB_COMBINE_AND 1   /* the mask keeps the rows this filter selects too */

#define SSB_WIDTH(c) ((c) & 0xff)
#define SSB_COMBINE(c) (((c) >> 8) & 0xff)

/* Set bits of a 64-bit word (the BPF target has no popcount instruction). */
static inline csx_u64 ssb_popcount(csx_u64 x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (x * 0x0101010101010101ULL) >> 56;
}

/* De Bruijn sequence and table of the lowest set bit's index (clang 14's BPF backend
 * cannot lower __builtin_ctzll). */
static const csx_u8 ssb_debruijn_index[64] = {
    0,  1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,
    62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5,
    63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11,
    46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6,
};

/* Index of the lowest set bit of a non-zero word. */
static inline csx_u64 ssb_lowest_bit(csx_u64 x)
{
    return ssb_debruijn_index[((x & -x) * 0x03f79d71b4cb0a89ULL) >> 58];
}

#endif /* CSX_SSB_H */
