/*
 * ssb_dim: a star join's dimension side (Delilah's SSB operators "Filter City" and the
 * date filter, after the selection): writes the dimension's lookup table into the
 * shared state, where every probe engine reads it. See struct ssb_dim_params in ssb.h
 * for params and windows.
 *
 * r0: the number of groups (ids handed out), or CSX_EINVAL (params or windows
 * missing), CSX_ENOSPC (the table leaves the shared state, scratch or output too
 * small), CSX_ERANGE (a selected key outside [key_base, key_base + lut_entries) or a
 * group value outside its range: the dimension is not what the host described).
 */
#include "ssb.h"

CSX_PROGRAM(ssb_dim)
{
    const struct ssb_dim_params *p = (const void *)args->params;
    if (args->params_len < sizeof(struct ssb_dim_params) || !win0)
        return CSX_EINVAL;
    const csx_u32 *keys = win0;
    const csx_u64 *mask = csx_window_addr(args, 1);
    csx_u64 n = win0_len / 4;
    if (!mask || csx_window_len(args, 1) < (n + 63) / 64 * 8)
        return CSX_EINVAL;
    csx_u64 lut_off = p->lut_offset, entries = p->lut_entries;
    if (lut_off % 2 || lut_off + 2 * entries > state_len)
        return CSX_ENOSPC;
    csx_u16 *lut = (csx_u16 *)((csx_u8 *)state + lut_off);
    csx_memset(lut, 0, 2 * entries);

    csx_u64 gcount = p->group_count, gbase = p->group_base;
    const csx_u32 *group = 0;
    csx_u16 *remap = 0;
    csx_u32 *out = csx_window_addr(args, 4);
    csx_u64 out_cap = csx_window_len(args, 4) / 4;
    if (gcount) {
        group = csx_window_addr(args, 2);
        remap = csx_window_addr(args, 3);
        if (!group || csx_window_len(args, 2) < n * 4 || !remap ||
            csx_window_len(args, 3) < 2 * gcount)
            return CSX_EINVAL;
        csx_memset(remap, 0, 2 * gcount);
    }
    if (!out || out_cap == 0)
        return CSX_EINVAL;
    csx_u64 ngroups = 0;
    if (!gcount) {
        ngroups = 1;
        out[0] = 0;
    }
    csx_u64 words = (n + 63) / 64;
    for (csx_u64 w = 0; w < words; w++) {
        csx_u64 word = mask[w];
        while (word) {
            csx_u64 i = w * 64 + ssb_lowest_bit(word);
            word &= word - 1;
            if (i >= n)
                break;
            csx_u64 k = (csx_u64)keys[i] - p->key_base;
            if (k >= entries)
                return CSX_ERANGE;
            csx_u16 id = 1;
            if (gcount) {
                csx_u64 g = (csx_u64)group[i] - gbase;
                if (g >= gcount)
                    return CSX_ERANGE;
                id = remap[g];
                if (!id) {
                    if (ngroups >= out_cap || ngroups >= 0xffff)
                        return CSX_ENOSPC;
                    out[ngroups] = group[i];
                    ngroups++;
                    id = (csx_u16)ngroups;
                    remap[g] = id;
                }
            }
            lut[k] = id;
        }
    }
    return ngroups;
}
