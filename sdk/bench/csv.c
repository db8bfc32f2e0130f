/*
 * Parses comma-separated rows of unsigned decimal fields ('\n' ends a row): counts the
 * rows and sums field param[0] of each row, converting text to numbers as atoi does.
 */
#include "bench.h"

CSX_BENCH_KERNEL(csv) {
    const u8 *text = in->data;
    u64 len = in->bytes;
    u64 want = in->param[0];
    u64 rows = 0;
    u64 sum = 0;
    u64 field = 0;
    u64 value = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = text[i];
        if (c >= '0' && c <= '9') {
            value = value * 10 + (c - '0');
        } else if (c == ',' || c == '\n') {
            if (field == want)
                sum += value;
            value = 0;
            field++;
            if (c == '\n') {
                rows++;
                field = 0;
            }
        }
    }
    return csx_bench_mix(rows, sum);
}
