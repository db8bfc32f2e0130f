/*
 * filter: keeps the u64 values of window 0 within bounds (Metal FS's filter operator,
 * `filter --gt --lt`, with inclusive bounds). The first stage of filter -> aggregate:
 * its output window becomes the aggregate's input window, in device memory.
 *
 * Windows: 0 = the input, win0_len / 8 little-endian u64s (a partial value at the end
 * is ignored); 1 = the output, up to win0_len bytes.
 * cparam1: the lower bound, cparam2: the upper bound; x is kept when
 * cparam1 <= x <= cparam2. params: unused.
 * Output: the kept values, in input order.
 * r0: 8 * kept values, or CSX_EINVAL without an output window, CSX_ENOSPC if the kept
 * values do not fit in it.
 */
#include "csx.h"

CSX_PROGRAM(filter)
{
    csx_u64 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    csx_u64 cap = csx_window_len(args, 1) / 8;
    csx_u64 lo = args->cparam1, hi = args->cparam2;
    const csx_u64 *v = win0;
    csx_u64 n = win0_len / 8;
    csx_u64 kept = 0;
    if (lo > hi)
        return 0;
    /* lo <= x <= hi as one unsigned compare. */
    csx_u64 span = hi - lo;
    if (cap >= n) {
        /* Room for every value: store each one, and keep it by advancing past it (no
         * branch on the data, so nothing to mispredict). */
        for (csx_u64 i = 0; i < n; i++) {
            csx_u64 x = v[i];
            out[kept] = x;
            if (x - lo <= span)
                kept++;
        }
        return 8 * kept;
    }
    for (csx_u64 i = 0; i < n; i++) {
        csx_u64 x = v[i];
        if (x - lo <= span) {
            if (kept == cap)
                return CSX_ENOSPC;
            out[kept++] = x;
        }
    }
    return 8 * kept;
}
