/*
 * col_unpack: expands encoded column blocks staged in device memory (the columnar
 * format's version 2) into plain values by csx_unpack, piece by piece, so the scans and
 * probes that follow read plain u32/u64 arrays.
 *
 * Windows: 0 = the staged blocks, and after them the expected headers; 1 = the
 * destination.
 * cparam1: the pieces; params: that many struct col_unpack_piece (ssb.h):
 * csx_unpack(win0 + src_off, src_len, first_row, win1 + dst_off, dst_len), after every
 * staged block's 64-byte header is found equal to the one the host expects (its copy of
 * the block's directory entry, or the stand-in it wrote for a skipped block) at
 * win0 + expect_off, one per block, and the blocks fill src_len exactly. So a file whose
 * inline header disagrees with its directory (another block's rows, another row count)
 * is refused, not decoded.
 * r0: the rows written in all; CSX_EINVAL for a piece outside its windows or a params
 * block too short; COL_UNPACK_BAD - i when piece i's headers differ from the expected
 * ones or csx_unpack refused it (the run's error detail then says which block and why).
 */
#include "ssb.h"

/* 1 when the staged piece's block headers are the expected ones and tile it exactly. */
static int headers_match(const unsigned char *blocks, csx_u64 len, const unsigned char *want,
                         csx_u64 count)
{
    csx_u64 o = 0;
    for (csx_u64 k = 0; k < count; k++, want += 64) {
        if (o > len || len - o < 64)
            return 0;
        /* Unaligned loads: staged blocks follow each other at any byte offset, and the
         * device's VM permits unaligned access, as eBPF does. */
        const csx_u64 *g = (const csx_u64 *)(blocks + o);
        const csx_u64 *w = (const csx_u64 *)want;
        csx_u64 diff = 0;
        for (int j = 0; j < 8; j++)
            diff |= g[j] ^ w[j];
        if (diff)
            return 0;
        /* payload_len at byte 16 of the (now trusted) header. */
        o += 64 + *(const csx_u32 *)(want + 16);
    }
    return o == len;
}

CSX_PROGRAM(col_unpack)
{
    csx_u64 n = args->cparam1;
    const unsigned char *src = win0;
    unsigned char *dst = csx_window_addr(args, 1);
    csx_u64 dst_len = csx_window_len(args, 1);
    if (!src || !dst || n > args->params_len / sizeof(struct col_unpack_piece))
        return CSX_EINVAL;
    const struct col_unpack_piece *p = (const struct col_unpack_piece *)args->params;
    csx_u64 total = 0;
    for (csx_u64 i = 0; i < n; i++, p++) {
        csx_u64 so = p->src_off, sl = p->src_len, doff = p->dst_off, dl = p->dst_len;
        csx_u64 eo = p->expect_off, ec = p->expect_count;
        if (so > win0_len || sl > win0_len - so || doff > dst_len || dl > dst_len - doff)
            return CSX_EINVAL;
        if (eo > win0_len || ec > (win0_len - eo) / 64)
            return CSX_EINVAL;
        if (!headers_match(src + so, sl, src + eo, ec))
            return COL_UNPACK_BAD - (long)i;
        long r = csx_unpack(src + so, sl, p->first_row, dst + doff, dl);
        if (r < 0)
            return COL_UNPACK_BAD - (long)i;
        total += (csx_u64)r;
    }
    return (long)total;
}
