/*
 * ssb_probe: a star join's fact side over one partition of LINEORDER (Delilah's probe
 * and aggregation operators): each row's foreign keys are looked up in the dimensions'
 * tables in the shared state; joined rows add their measure to their group (mode 0,
 * full offload) or are emitted for the host to aggregate (mode 1, aggregation on the
 * host). Several probes run at once on the device's engines over disjoint partitions.
 * See struct ssb_probe_params in ssb.h for params and windows.
 *
 * r0: the rows joined (mode 0) or emitted (mode 1), or CSX_EINVAL (params or windows
 * missing or too short), CSX_ENOSPC (a table leaves the shared state, or the output is
 * too small), CSX_ERANGE (a group index past `groups`, or in mode 1 a value over
 * 32 bits).
 */
#include "ssb.h"

CSX_PROGRAM(ssb_probe)
{
    const struct ssb_probe_params *p = (const void *)args->params;
    if (args->params_len < 32)
        return CSX_EINVAL;
    csx_u32 nd = p->ndims;
    if (nd == 0 || nd > SSB_DIMS_MAX || args->params_len < 32 + 20 * (csx_u64)nd)
        return CSX_EINVAL;
    const csx_u32 *a = csx_window_addr(args, p->a_window);
    csx_u64 n = csx_window_len(args, p->a_window) / 4;
    if (!a)
        return CSX_EINVAL;
    const csx_u32 *b = 0;
    if (p->b_window != SSB_NO_WINDOW) {
        b = csx_window_addr(args, p->b_window);
        if (!b || csx_window_len(args, p->b_window) < n * 4)
            return CSX_EINVAL;
    }
    const csx_u64 *mask = 0;
    if (p->mask_window != SSB_NO_WINDOW) {
        mask = csx_window_addr(args, p->mask_window);
        if (!mask || csx_window_len(args, p->mask_window) < (n + 63) / 64 * 8)
            return CSX_EINVAL;
    }
    const csx_u32 *fk[SSB_DIMS_MAX] = {0, 0, 0};
    const csx_u16 *lut[SSB_DIMS_MAX] = {0, 0, 0};
    csx_u32 base[SSB_DIMS_MAX] = {0, 0, 0}, entries[SSB_DIMS_MAX] = {0, 0, 0};
    csx_u32 stride[SSB_DIMS_MAX] = {0, 0, 0};
    for (csx_u32 d = 0; d < nd && d < SSB_DIMS_MAX; d++) {
        const struct ssb_probe_dim *pd = &p->dims[d];
        fk[d] = csx_window_addr(args, pd->fk_window);
        if (!fk[d] || csx_window_len(args, pd->fk_window) < n * 4)
            return CSX_EINVAL;
        if (pd->lut_offset % 2 || (csx_u64)pd->lut_offset + 2 * (csx_u64)pd->lut_entries > state_len)
            return CSX_ENOSPC;
        lut[d] = (const csx_u16 *)((const csx_u8 *)state + pd->lut_offset);
        base[d] = pd->key_base;
        entries[d] = pd->lut_entries;
        stride[d] = pd->stride;
    }
    void *outp = csx_window_addr(args, p->out_window);
    csx_u64 out_len = csx_window_len(args, p->out_window);
    if (!outp)
        return CSX_EINVAL;
    csx_u64 groups = p->groups;
    if (p->mode == 0) {
        if (out_len < groups * 8)
            return CSX_ENOSPC;
        csx_memset(outp, 0, groups * 8);
    } else if (p->mode != 1) {
        return CSX_EINVAL;
    }
    csx_u64 *sums = outp;
    csx_u32 *tuples = outp;
    csx_u64 cap = out_len / 8;
    csx_u64 joined = 0;
    for (csx_u64 i = 0; i < n; i++) {
        if (mask && !((mask[i / 64] >> (i % 64)) & 1))
            continue;
        csx_u64 g = 0;
        csx_u32 d;
        for (d = 0; d < nd && d < SSB_DIMS_MAX; d++) {
            csx_u32 k = fk[d][i] - base[d];
            if (k >= entries[d])
                break;
            csx_u32 id = lut[d][k];
            if (!id)
                break;
            g += (csx_u64)(id - 1) * stride[d];
        }
        if (d < nd)
            continue;
        csx_u64 v = b ? (csx_u64)a[i] * b[i] : a[i];
        if (p->mode == 0) {
            if (g >= groups)
                return CSX_ERANGE;
            sums[g] += v;
        } else {
            if (joined >= cap)
                return CSX_ENOSPC;
            if (v > 0xffffffffULL)
                return CSX_ERANGE;
            tuples[2 * joined] = (csx_u32)g;
            tuples[2 * joined + 1] = (csx_u32)v;
        }
        joined++;
    }
    return joined;
}
