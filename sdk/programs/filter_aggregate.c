/*
 * filter_aggregate: Metal FS's filter and aggregate operators fused in one pass: the
 * sum, minimum, maximum and count of the u64 values of window 0 within bounds, without
 * materialising the selected values.
 *
 * Windows: 0 = the input, win0_len / 8 little-endian u64s (a partial value at the end
 * is ignored); 1 = the output, at least 32 bytes.
 * cparam1: the lower bound, cparam2: the upper bound (inclusive, as filter).
 * params: unused.
 * Output: struct { u64 count, sum, min, max; } over the kept values (the layout of
 * aggregate, so the fused and chained pipelines give the same bytes).
 * r0: 32, or CSX_EINVAL without an output window, CSX_ENOSPC if it is too small.
 */
#include "csx.h"

CSX_PROGRAM(filter_aggregate)
{
    csx_u64 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    if (csx_window_len(args, 1) < 32)
        return CSX_ENOSPC;
    csx_u64 lo = args->cparam1, hi = args->cparam2;
    const csx_u64 *v = win0;
    csx_u64 n = win0_len / 8;
    csx_u64 count = 0, sum = 0, min = ~0UL, max = 0;
    for (csx_u64 i = 0; i < n; i++) {
        csx_u64 x = v[i];
        if (x >= lo && x <= hi) {
            count++;
            sum += x;
            if (x < min)
                min = x;
            if (x > max)
                max = x;
        }
    }
    out[0] = count;
    out[1] = sum;
    out[2] = min;
    out[3] = max;
    return 32;
}
