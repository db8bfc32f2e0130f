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

/* r0 of col_unpack when piece i's headers or csx_unpack refused it: COL_UNPACK_BAD - i. */
#define COL_UNPACK_BAD (-1000000L)

/*
 * params of col_unpack: one per piece (rows of one column expanded from staged blocks).
 *
 *     offset  size  field
 *          0     8  src_off       the piece's staged blocks in window 0
 *          8     8  src_len
 *         16     8  first_row     the first row wanted, counted from the first block's
 *         24     8  dst_off       where its values go in window 1
 *         32     8  dst_len
 *         40     8  expect_off    the expected block headers in window 0, 64 bytes each
 *         48     8  expect_count  blocks in the piece
 */
struct col_unpack_piece {
    csx_u64 src_off;
    csx_u64 src_len;
    csx_u64 first_row;
    csx_u64 dst_off;
    csx_u64 dst_len;
    csx_u64 expect_off;
    csx_u64 expect_count;
};

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

/* cparam1 of filter_*: the value width (4 or 8) | combine << 8 */
#define SSB_COMBINE_WRITE 0 /* the mask becomes this filter's selection */
#define SSB_COMBINE_AND 1   /* the mask keeps the rows this filter selects too */

#define SSB_WIDTH(c) ((c) & 0xff)
#define SSB_COMBINE(c) (((c) >> 8) & 0xff)

/*
 * params of ssb_dim: builds a dimension's lookup table in the shared state, Delilah's
 * shared data slot: entry key - key_base holds the row's group id (1-based, compact:
 * ids are handed out in the order groups first appear among the selected rows), or 0
 * for a key no selected row has.
 *
 *     offset  size  field
 *          0     4  lut_offset    byte offset of the table in the shared state (even)
 *          4     4  lut_entries   u16 entries of the table
 *          8     4  key_base      the smallest key
 *         12     4  group_count   values a group column may hold (its codes are
 *                                 0 .. group_count - 1 after subtracting group_base);
 *                                 0: no group column, every selected key gets id 1
 *         16     4  group_base
 *         20     4  (zero)
 *
 * Windows: 0 = the key column (u32), 1 = the selection mask (ssb.h), 2 = the group
 * column (u32, when group_count > 0), 3 = scratch (2 * group_count bytes), 4 = output:
 * the group value of each id (u32, id 1 first).
 */
struct ssb_dim_params {
    csx_u32 lut_offset;
    csx_u32 lut_entries;
    csx_u32 key_base;
    csx_u32 group_count;
    csx_u32 group_base;
    csx_u32 pad;
};

/* Dimensions one probe joins at most. */
#define SSB_DIMS_MAX 3
/* "No window" in a window-index field. */
#define SSB_NO_WINDOW 0xffffffffu

/*
 * params of ssb_probe: joins lineorder rows with up to three dimensions through their
 * lookup tables in the shared state, and sums a measure per group (mode 0) or emits
 * each joined row (mode 1).
 *
 *     offset  size  field
 *          0     4  mode          0 = aggregate into the output (u64 per group),
 *                                 1 = emit {u32 group index, u32 value} per joined row
 *          4     4  ndims         1 .. SSB_DIMS_MAX
 *          8     4  mask_window   selection mask of the rows, or SSB_NO_WINDOW
 *         12     4  a_window      the measure (u32)
 *         16     4  b_window      a second u32 the measure is multiplied by, or SSB_NO_WINDOW
 *         20     4  out_window
 *         24     4  groups        the output's groups (mode 0)
 *         28     4  (zero)
 *         32  20*n  dims          {u32 fk_window, lut_offset, lut_entries, key_base, stride}
 *
 * A row joins when every dimension's entry for its key is non-zero (a key outside the
 * table joins nothing, as in SQL); its group index is the sum of (id - 1) * stride.
 */
struct ssb_probe_dim {
    csx_u32 fk_window;
    csx_u32 lut_offset;
    csx_u32 lut_entries;
    csx_u32 key_base;
    csx_u32 stride;
};

struct ssb_probe_params {
    csx_u32 mode;
    csx_u32 ndims;
    csx_u32 mask_window;
    csx_u32 a_window;
    csx_u32 b_window;
    csx_u32 out_window;
    csx_u32 groups;
    csx_u32 pad;
    struct ssb_probe_dim dims[SSB_DIMS_MAX];
};

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
