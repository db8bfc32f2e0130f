/*
 * aggregate: sum, minimum, maximum and count of the u64 values in window 0 (Metal FS's
 * aggregate operator). The second stage of filter -> aggregate, whose input window is
 * the filter's output window.
 *
 * Windows: 0 = the input, win0_len / 8 little-endian u64s (a partial value at the end
 * is ignored); 1 = the output, at least 32 bytes.
 * cparams, params: unused.
 * Output: struct { u64 count, sum, min, max; } (the layout of stats64); the sum wraps
 * modulo 2^64; no values give count 0, sum 0, min UINT64_MAX, max 0.
 * r0: 32, or CSX_EINVAL without an output window, CSX_ENOSPC if it is too small.
 */
#include "csx.h"

CSX_PROGRAM(aggregate)
{
    csx_u64 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    if (csx_window_len(args, 1) < 32)
        return CSX_ENOSPC;
    const csx_u64 *v = win0;
    csx_u64 n = win0_len / 8;
    csx_u64 sum = 0, min = ~0UL, max = 0;
    for (csx_u64 i = 0; i < n; i++) {
        csx_u64 x = v[i];
        sum += x;
        if (x < min)
            min = x;
        if (x > max)
            max = x;
    }
    out[0] = n;
    out[1] = sum;
    out[2] = min;
    out[3] = max;
    return 32;
}
