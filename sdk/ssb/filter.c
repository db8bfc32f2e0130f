/*
 * filter_bitmask / filter_unrolled / filter_accel: Delilah's selection operator in its
 * three strategies (thesis Fig. 12.5 and 12.6), one source compiled three times
 * (-DSSB_STRATEGY=1, 2, 3):
 *   bitmask   one value per loop iteration, its bit or'ed into a 64-bit word;
 *   unrolled  the same, eight values per iteration, unrolled by hand;
 *   accel     the accelerated filter csx_filter_u32/u64 (Delilah's HLS filter), one or
 *             two calls per range, the bitmaps combined in eBPF.
 * All three write the same mask.
 *
 * Windows: 0 = the column chunk, win0_len / width values; 1 = the mask, at least
 * ceil(values / 64) * 8 bytes; 2 (accel only) = scratch, three times the mask's bytes.
 * cparam1: width (4 or 8) | combine << 8 (SSB_COMBINE_WRITE or SSB_COMBINE_AND).
 * params: struct ssb_filter_params.
 * r0: the rows the mask selects afterwards, or CSX_EINVAL (bad width, combine, ranges
 * or missing window), CSX_ENOSPC (mask or scratch too small).
 */
#include "ssb.h"

#ifndef SSB_STRATEGY
#error "compile with -DSSB_STRATEGY=1 (bitmask), 2 (unrolled) or 3 (accel)"
#endif

static inline __attribute__((unused)) csx_u64 load(const void *col, csx_u64 width, csx_u64 i)
{
    if (width == 4)
        return ((const csx_u32 *)col)[i];
    return ((const csx_u64 *)col)[i];
}

/* Whether x is in any range: (x - lo) <= (hi - lo) in unsigned arithmetic. */
static inline __attribute__((unused)) csx_u64 in_ranges(csx_u64 x, const csx_u64 *lo, const csx_u64 *span, csx_u32 n)
{
    csx_u64 m = 0;
    for (csx_u32 r = 0; r < n && r < SSB_RANGES_MAX; r++)
        m |= (x - lo[r]) <= span[r];
    return m;
}

#if SSB_STRATEGY == 1
#define NAME filter_bitmask
#elif SSB_STRATEGY == 2
#define NAME filter_unrolled
#else
#define NAME filter_accel
#endif

CSX_PROGRAM(NAME)
{
    csx_u64 width = SSB_WIDTH(args->cparam1);
    csx_u64 combine = SSB_COMBINE(args->cparam1);
    const struct ssb_filter_params *p = (const void *)args->params;
    csx_u64 *mask = csx_window_addr(args, 1);
    if ((width != 4 && width != 8) || combine > SSB_COMBINE_AND || !mask || !win0)
        return CSX_EINVAL;
    if (args->params_len < 8 || p->nranges == 0 || p->nranges > SSB_RANGES_MAX ||
        args->params_len < 8 + 16 * (csx_u64)p->nranges)
        return CSX_EINVAL;
    csx_u64 n = win0_len / width;
    csx_u64 words = (n + 63) / 64;
    if (csx_window_len(args, 1) < words * 8)
        return CSX_ENOSPC;
    csx_u32 nr = p->nranges;
    csx_u64 lo[SSB_RANGES_MAX], span[SSB_RANGES_MAX];
    for (csx_u32 r = 0; r < nr && r < SSB_RANGES_MAX; r++) {
        lo[r] = p->ranges[r].lo;
        span[r] = p->ranges[r].hi - p->ranges[r].lo;
    }
    csx_u64 selected = 0;

#if SSB_STRATEGY == 1
    for (csx_u64 w = 0; w < words; w++) {
        csx_u64 word = 0;
        csx_u64 base = w * 64;
        csx_u64 end = n - base < 64 ? n - base : 64;
        for (csx_u64 t = 0; t < end; t++)
            word |= in_ranges(load(win0, width, base + t), lo, span, nr) << t;
        if (combine == SSB_COMBINE_AND)
            word &= mask[w];
        mask[w] = word;
        selected += ssb_popcount(word);
    }
#elif SSB_STRATEGY == 2
    for (csx_u64 w = 0; w < words; w++) {
        csx_u64 word = 0;
        csx_u64 base = w * 64;
        if (n - base >= 64 && nr == 1 && width == 4) {
            /* The common case, unrolled: one range, 32-bit values, a full word. */
            const csx_u32 *v = (const csx_u32 *)win0 + base;
            csx_u64 l = lo[0], s = span[0];
            for (csx_u64 t = 0; t < 64; t += 8) {
                word |= (csx_u64)((v[t + 0] - l) <= s) << (t + 0);
                word |= (csx_u64)((v[t + 1] - l) <= s) << (t + 1);
                word |= (csx_u64)((v[t + 2] - l) <= s) << (t + 2);
                word |= (csx_u64)((v[t + 3] - l) <= s) << (t + 3);
                word |= (csx_u64)((v[t + 4] - l) <= s) << (t + 4);
                word |= (csx_u64)((v[t + 5] - l) <= s) << (t + 5);
                word |= (csx_u64)((v[t + 6] - l) <= s) << (t + 6);
                word |= (csx_u64)((v[t + 7] - l) <= s) << (t + 7);
            }
        } else if (n - base >= 64) {
            for (csx_u64 t = 0; t < 64; t += 8) {
                word |= in_ranges(load(win0, width, base + t + 0), lo, span, nr) << (t + 0);
                word |= in_ranges(load(win0, width, base + t + 1), lo, span, nr) << (t + 1);
                word |= in_ranges(load(win0, width, base + t + 2), lo, span, nr) << (t + 2);
                word |= in_ranges(load(win0, width, base + t + 3), lo, span, nr) << (t + 3);
                word |= in_ranges(load(win0, width, base + t + 4), lo, span, nr) << (t + 4);
                word |= in_ranges(load(win0, width, base + t + 5), lo, span, nr) << (t + 5);
                word |= in_ranges(load(win0, width, base + t + 6), lo, span, nr) << (t + 6);
                word |= in_ranges(load(win0, width, base + t + 7), lo, span, nr) << (t + 7);
            }
        } else {
            for (csx_u64 t = 0; t < n - base; t++)
                word |= in_ranges(load(win0, width, base + t), lo, span, nr) << t;
        }
        if (combine == SSB_COMBINE_AND)
            word &= mask[w];
        mask[w] = word;
        selected += ssb_popcount(word);
    }
#else
    csx_u64 *scratch = csx_window_addr(args, 2);
    if (!scratch || csx_window_len(args, 2) < 3 * words * 8)
        return CSX_ENOSPC;
    csx_u64 *ge = scratch, *le = scratch + words, *acc = scratch + 2 * words;
    csx_u64 max = width == 4 ? 0xffffffffULL : ~0ULL;
    csx_u64 tail = n % 64 ? (1ULL << (n % 64)) - 1 : ~0ULL;
    for (csx_u32 r = 0; r < nr && r < SSB_RANGES_MAX; r++) {
        csx_u64 l = p->ranges[r].lo, h = p->ranges[r].hi;
        long rc;
        if (l > 0) {
            rc = width == 4 ? csx_filter_u32(win0, n * 4, CSX_CMP_GE, l, ge)
                            : csx_filter_u64(win0, n * 8, CSX_CMP_GE, l, ge);
            if (rc < 0)
                return rc;
        }
        if (h < max) {
            rc = width == 4 ? csx_filter_u32(win0, n * 4, CSX_CMP_LE, h, le)
                            : csx_filter_u64(win0, n * 8, CSX_CMP_LE, h, le);
            if (rc < 0)
                return rc;
        }
        for (csx_u64 w = 0; w < words; w++) {
            /* The functions write whole bytes: bits past the last row are masked off. */
            csx_u64 bits = (l > 0 ? ge[w] : ~0ULL) & (h < max ? le[w] : ~0ULL);
            if (w + 1 == words)
                bits &= tail;
            acc[w] = r == 0 ? bits : acc[w] | bits;
        }
    }
    for (csx_u64 w = 0; w < words; w++) {
        csx_u64 word = acc[w];
        if (combine == SSB_COMBINE_AND)
            word &= mask[w];
        mask[w] = word;
        selected += ssb_popcount(word);
    }
#endif
    return selected;
}
