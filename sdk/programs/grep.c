/*
 * grep: counts the rows of window 0 that contain a pattern (lambda-IO's Grep).
 *
 * Windows: 0 = the input, rows ending in '\n' (a last row without one counts if it is
 * not empty); 1 = the output, at least 16 bytes.
 * cparams: unused. params: the pattern, 1 to 255 bytes, no '\n'.
 * Output: struct { u64 matching_rows; u64 rows; }.
 * r0: 16, or CSX_EINVAL for a bad pattern or no output window, CSX_ENOSPC if the output
 * window is too small.
 */
#include "csx.h"

#define GREP_PATTERN_SIZE_MAX 255

CSX_PROGRAM(grep)
{
    const csx_u8 *pat = args->params;
    csx_u64 m = args->params_len;
    if (m == 0 || m > GREP_PATTERN_SIZE_MAX)
        return CSX_EINVAL;
    for (csx_u64 t = 0; t < m; t++)
        if (pat[t] == '\n')
            return CSX_EINVAL;
    csx_u64 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    if (csx_window_len(args, 1) < 16)
        return CSX_ENOSPC;

    const csx_u8 *s = win0;
    csx_u64 n = win0_len;
    csx_u8 first = pat[0];
    csx_u64 rows = 0, hits = 0;
    csx_u64 i = 0;
    while (i < n) {
        /* One row: from i to the next '\n' or the end. A match cannot run past the
         * row, because the pattern holds no '\n'. */
        int found = 0;
        csx_u64 j = i;
        while (j < n && s[j] != '\n') {
            if (!found && s[j] == first && n - j >= m) {
                csx_u64 t = 1;
                while (t < m && s[j + t] == pat[t])
                    t++;
                found = t == m;
            }
            j++;
        }
        rows++;
        hits += found;
        i = j + 1;
    }
    out[0] = hits;
    out[1] = rows;
    return 16;
}
