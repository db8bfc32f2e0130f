/*
 * col_unpack: expands encoded column blocks staged in device memory (the columnar
 * format's version 2) into plain values by csx_unpack, piece by piece, so the scans and
 * probes that follow read plain u32/u64 arrays.
 *
 * Windows: 0 = the staged blocks; 1 = the destination.
 * cparam1: the pieces; params: that many {u64 src_off, src_len, first_row, dst_off,
 * dst_len}: csx_unpack(win0 + src_off, src_len, first_row, win1 + dst_off, dst_len).
 * r0: the rows written in all; CSX_EINVAL for a piece outside its windows or a params
 * block too short; COL_UNPACK_BAD - i when csx_unpack refused piece i (the run's error
 * detail says which block and why).
 */
#include "ssb.h"

CSX_PROGRAM(col_unpack)
{
    csx_u64 n = args->cparam1;
    const unsigned char *src = win0;
    unsigned char *dst = csx_window_addr(args, 1);
    csx_u64 dst_len = csx_window_len(args, 1);
    if (!src || !dst || n > args->params_len / 40)
        return CSX_EINVAL;
    const csx_u64 *p = (const csx_u64 *)args->params;
    csx_u64 total = 0;
    for (csx_u64 i = 0; i < n; i++, p += 5) {
        csx_u64 so = p[0], sl = p[1], first = p[2], doff = p[3], dl = p[4];
        if (so > win0_len || sl > win0_len - so || doff > dst_len || dl > dst_len - doff)
            return CSX_EINVAL;
        long r = csx_unpack(src + so, sl, first, dst + doff, dl);
        if (r < 0)
            return COL_UNPACK_BAD - (long)i;
        total += (csx_u64)r;
    }
    return (long)total;
}
