/*
 * Counts the text rows ('\n'-terminated) that contain a pattern, and all its
 * occurrences, like `grep -c` and `grep -o | wc -l` together.
 *
 * param[0]: pattern length (1..32), param[1..5]: the pattern bytes.
 */
#include "bench.h"

CSX_BENCH_KERNEL(grep) {
    const u8 *text = in->data;
    u64 len = in->bytes;
    const u8 *pat = (const u8 *)&in->param[1];
    u64 m = in->param[0];
    u64 rows = 0;
    u64 hits = 0;
    u64 row_hit = 0;
    if (m == 0 || m > 32 || m > len)
        return 0;
    u8 first = pat[0];
    for (u64 i = 0; i + m <= len; i++) {
        u8 c = text[i];
        if (c == '\n') {
            rows += row_hit;
            row_hit = 0;
            continue;
        }
        if (c != first)
            continue;
        u64 j = 1;
        while (j < m && text[i + j] == pat[j])
            j++;
        if (j == m) {
            hits++;
            row_hit = 1;
        }
    }
    return csx_bench_mix(rows + row_hit, hits);
}
