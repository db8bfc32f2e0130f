/*
 * select_bitmask: Delilah's selection filter written as a bitmask in pure eBPF: bit i
 * of the output is set when the i-th u32 value of window 0 satisfies `x OP operand`.
 * One bit per value instead of four bytes per match: the thesis found bitmasks ahead
 * of position lists (compare select_poslist and select_accel).
 *
 * Windows: 0 = the input column, win0_len / 4 little-endian u32s (a partial value at
 * the end is ignored); 1 = the output, at least (values + 7) / 8 bytes.
 * cparam1: the operator, CSX_CMP_EQ .. CSX_CMP_GE; cparam2: the operand (compared as
 * u64). params: unused.
 * Output: the bitmask, bit i in bit i % 8 of byte i / 8, unused high bits zero: the
 * same bytes csx_filter_u32 writes.
 * r0: (values + 7) / 8, or CSX_EINVAL for an unknown operator or no output window,
 * CSX_ENOSPC if the bitmask does not fit in the output window.
 */
#include "csx.h"

/* One loop per operator; eight values make one output byte. */
#define SELECT_BITS(cond)                                                               \
    for (i = 0; i + 8 <= n; i += 8) {                                                  \
        csx_u8 byte = 0;                                                               \
        for (csx_u64 t = 0; t < 8; t++) {                                              \
            csx_u64 x = v[i + t];                                                      \
            byte |= (csx_u8)((cond) << t);                                             \
        }                                                                              \
        out[i / 8] = byte;                                                             \
    }                                                                                  \
    if (i < n) {                                                                       \
        csx_u8 byte = 0;                                                               \
        for (csx_u64 t = 0; i + t < n; t++) {                                          \
            csx_u64 x = v[i + t];                                                      \
            byte |= (csx_u8)((cond) << t);                                             \
        }                                                                              \
        out[i / 8] = byte;                                                             \
    }

CSX_PROGRAM(select_bitmask)
{
    csx_u8 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    const csx_u32 *v = win0;
    csx_u64 n = win0_len / 4;
    csx_u64 bytes = (n + 7) / 8;
    if (csx_window_len(args, 1) < bytes)
        return CSX_ENOSPC;
    csx_u64 a = args->cparam2;
    csx_u64 i;
    switch (args->cparam1) {
    case CSX_CMP_EQ: SELECT_BITS(x == a); break;
    case CSX_CMP_NE: SELECT_BITS(x != a); break;
    case CSX_CMP_LT: SELECT_BITS(x < a); break;
    case CSX_CMP_LE: SELECT_BITS(x <= a); break;
    case CSX_CMP_GT: SELECT_BITS(x > a); break;
    case CSX_CMP_GE: SELECT_BITS(x >= a); break;
    default: return CSX_EINVAL;
    }
    return bytes;
}
