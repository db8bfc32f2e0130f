/*
 * select_poslist: Delilah's selection filter written as a position list: the indexes
 * of the u32 values of window 0 that satisfy `x OP operand`. The baseline of the
 * thesis's filtering experiment (compare select_bitmask and select_accel).
 *
 * Windows: 0 = the input column, win0_len / 4 little-endian u32s (a partial value at
 * the end is ignored); 1 = the output, up to win0_len bytes.
 * cparam1: the operator, CSX_CMP_EQ .. CSX_CMP_GE; cparam2: the operand (compared as
 * u64, as csx_filter_u32 does). params: unused.
 * Output: the u32 indexes of the matching values, ascending.
 * r0: 4 * matches, or CSX_EINVAL for an unknown operator or no output window,
 * CSX_ENOSPC if the positions do not fit in the output window.
 */
#include "csx.h"

/* One loop per operator, so the comparison is not decided again for every value. With
 * room for every position, each is stored and kept by advancing past it (no branch on
 * the data); otherwise the room is checked before each store. */
#define SELECT_POSITIONS(cond)                                                          \
    if (cap >= n) {                                                                    \
        for (csx_u64 i = 0; i < n; i++) {                                              \
            csx_u64 x = v[i];                                                          \
            out[kept] = (csx_u32)i;                                                    \
            if (cond)                                                                  \
                kept++;                                                                \
        }                                                                              \
    } else {                                                                           \
        for (csx_u64 i = 0; i < n; i++) {                                              \
            csx_u64 x = v[i];                                                          \
            if (cond) {                                                                \
                if (kept == cap)                                                       \
                    return CSX_ENOSPC;                                                 \
                out[kept++] = (csx_u32)i;                                              \
            }                                                                          \
        }                                                                              \
    }

CSX_PROGRAM(select_poslist)
{
    csx_u32 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    csx_u64 cap = csx_window_len(args, 1) / 4;
    const csx_u32 *v = win0;
    csx_u64 n = win0_len / 4;
    csx_u64 a = args->cparam2;
    csx_u64 kept = 0;
    switch (args->cparam1) {
    case CSX_CMP_EQ: SELECT_POSITIONS(x == a); break;
    case CSX_CMP_NE: SELECT_POSITIONS(x != a); break;
    case CSX_CMP_LT: SELECT_POSITIONS(x < a); break;
    case CSX_CMP_LE: SELECT_POSITIONS(x <= a); break;
    case CSX_CMP_GT: SELECT_POSITIONS(x > a); break;
    case CSX_CMP_GE: SELECT_POSITIONS(x >= a); break;
    default: return CSX_EINVAL;
    }
    return 4 * kept;
}
