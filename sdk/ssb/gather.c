/*
 * gather: the projection after a selection: copies the values of the rows a mask
 * selects, in row order, to the output (Delilah's "data retrieval back to the host":
 * only selected values cross the link). Words of the mask that select nothing are
 * skipped whole.
 *
 * Windows: 0 = the column chunk, win0_len / width values; 1 = the mask (ssb.h), at
 * least ceil(values / 64) * 8 bytes; 2 = the output, room for every selected value.
 * cparam1: width (4 or 8).
 * r0: the values written, or CSX_EINVAL (bad width, missing window), CSX_ENOSPC (the
 * mask or the output is too small).
 */
#include "ssb.h"

CSX_PROGRAM(gather)
{
    csx_u64 width = SSB_WIDTH(args->cparam1);
    const csx_u64 *mask = csx_window_addr(args, 1);
    csx_u8 *out = csx_window_addr(args, 2);
    if ((width != 4 && width != 8) || !mask || !out || !win0)
        return CSX_EINVAL;
    csx_u64 n = win0_len / width;
    csx_u64 words = (n + 63) / 64;
    if (csx_window_len(args, 1) < words * 8)
        return CSX_ENOSPC;
    csx_u64 cap = csx_window_len(args, 2) / width;
    csx_u64 k = 0;
    for (csx_u64 w = 0; w < words; w++) {
        csx_u64 word = mask[w];
        while (word) {
            csx_u64 t = ssb_lowest_bit(word);
            word &= word - 1;
            csx_u64 i = w * 64 + t;
            if (i >= n)
                break;
            if (k >= cap)
                return CSX_ENOSPC;
            if (width == 4)
                ((csx_u32 *)out)[k] = ((const csx_u32 *)win0)[i];
            else
                ((csx_u64 *)out)[k] = ((const csx_u64 *)win0)[i];
            k++;
        }
    }
    return k;
}
