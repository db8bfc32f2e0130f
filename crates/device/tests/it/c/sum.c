/* Sums window 0 as u64s and writes each value + 1 to window 1 if there is one. */
#include "csx_it.h"

ENTRY(sum_u64)
{
    u64 *in = (u64 *)w0;
    u64 n = w0_len / 8, sum = 0;
    u64 *out = args->nwindows > 1 ? (u64 *)args->windows[1].addr : 0;
    for (u64 i = 0; i < n; i++) {
        sum += in[i];
        if (out)
            out[i] = in[i] + 1;
    }
    return sum;
}
