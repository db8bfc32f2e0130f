/*
 * select_accel: Delilah's selection filter through the device's accelerated filter
 * function csx_filter_u32 (the thesis's HLS/NEON filter): bit i of the output is set
 * when the i-th u32 value of window 0 satisfies `x OP operand`. The same bytes as
 * select_bitmask, computed natively (compare select_poslist and select_bitmask).
 *
 * Windows: 0 = the input column, win0_len / 4 little-endian u32s (a partial value at
 * the end is ignored); 1 = the output, at least (values + 7) / 8 bytes.
 * cparam1: the operator, CSX_CMP_EQ .. CSX_CMP_GE; cparam2: the operand.
 * params: unused.
 * Output: the bitmask, bit i in bit i % 8 of byte i / 8, unused high bits zero.
 * r0: (values + 7) / 8, or CSX_EINVAL for an unknown operator or no output window,
 * CSX_ENOSPC if the bitmask does not fit in the output window.
 */
#include "csx.h"

CSX_PROGRAM(select_accel)
{
    csx_u8 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    csx_u64 n = win0_len / 4;
    csx_u64 bytes = (n + 7) / 8;
    if (csx_window_len(args, 1) < bytes)
        return CSX_ENOSPC;
    if (args->cparam1 > CSX_CMP_GE)
        return CSX_EINVAL;
    long matches = csx_filter_u32(win0, 4 * n, args->cparam1, args->cparam2, out);
    if (matches < 0)
        return matches;
    return bytes;
}
