/*
 * ssb_merge: the last step of a fully offloaded aggregation: adds the partial sums of
 * the probe partitions, so one array of group sums crosses to the host.
 *
 * Windows: 0 = the partials, cparam2 arrays of cparam1 u64 sums back to back;
 * 1 = the output, cparam1 u64 sums.
 * r0: the groups with a non-zero sum, or CSX_EINVAL (missing windows, too short).
 */
#include "ssb.h"

CSX_PROGRAM(ssb_merge)
{
    csx_u64 groups = args->cparam1, parts = args->cparam2;
    const csx_u64 *in = win0;
    csx_u64 *out = csx_window_addr(args, 1);
    if (!in || !out || groups == 0 || parts == 0)
        return CSX_EINVAL;
    if (win0_len / 8 / parts < groups || csx_window_len(args, 1) < groups * 8)
        return CSX_EINVAL;
    csx_u64 nonzero = 0;
    for (csx_u64 g = 0; g < groups; g++) {
        csx_u64 s = 0;
        for (csx_u64 q = 0; q < parts; q++)
            s += in[q * groups + g];
        out[g] = s;
        nonzero += s != 0;
    }
    return nonzero;
}
