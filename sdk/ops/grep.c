/*
 * grep: the lines of the stream that contain a pattern, each with its newline (a last
 * line without one gets one, as grep prints it).
 *
 * Params: pattern_len @0, pattern @8 (up to 256 bytes; empty matches every line),
 * invert @264 (bool: the lines that do not contain it).
 * State: the start of a line split across chunks, up to 65536 bytes (a longer line
 * stops the stream with CSX_E2BIG).
 * Output capacity: the input's length + 65537.
 */
#include "ops.h"

#define LINE_MAX 65536
#define PATTERN_MAX 256

struct grep_state {
    csx_u64 carry_len;
    csx_u8 carry[LINE_MAX];
};

static inline int contains(const csx_u8 *s, unsigned long n, const csx_u8 *pat, unsigned long m)
{
    if (m == 0)
        return 1;
    if (m > n)
        return 0;
    csx_u8 first = pat[0];
    for (unsigned long i = 0; i + m <= n; i++) {
        if (s[i] != first)
            continue;
        unsigned long j = 1;
        while (j < m && s[i + j] == pat[j])
            j++;
        if (j == m)
            return 1;
    }
    return 0;
}

CSX_PROGRAM(grep)
{
    struct grep_state *st = CSX_OP_STATE(args);
    csx_u8 *out = CSX_OP_OUT(args);
    const csx_u8 *in = CSX_OP_IN(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    if (!st || CSX_OP_STATE_LEN(args) < sizeof(*st) || CSX_OP_OUT_CAP(args) < len + LINE_MAX + 1)
        return CSX_ENOSPC;
    unsigned long m = csx_op_param(args, 0);
    if (m > PATTERN_MAX || 8 + m > args->params_len)
        return CSX_EINVAL;
    const csx_u8 *pat = args->params + 8;
    csx_u64 invert = csx_op_param(args, 8 + PATTERN_MAX) != 0;
    unsigned long o = 0, pos = 0;
    while (pos < len) {
        unsigned long nl = pos;
        while (nl < len && in[nl] != '\n')
            nl++;
        if (nl == len) {
            /* No newline: the rest waits for the next chunk. */
            unsigned long rest = len - pos;
            if (st->carry_len + rest > LINE_MAX)
                return CSX_E2BIG;
            csx_memcpy(st->carry + st->carry_len, in + pos, rest);
            st->carry_len += rest;
            break;
        }
        unsigned long n = nl + 1 - pos;
        if (st->carry_len) {
            if (st->carry_len + n > LINE_MAX)
                return CSX_E2BIG;
            csx_memcpy(st->carry + st->carry_len, in + pos, n);
            st->carry_len += n;
            if (contains(st->carry, st->carry_len - 1, pat, m) ^ invert) {
                csx_memcpy(out + o, st->carry, st->carry_len);
                o += st->carry_len;
            }
            st->carry_len = 0;
        } else if (contains(in + pos, n - 1, pat, m) ^ invert) {
            csx_memcpy(out + o, in + pos, n);
            o += n;
        }
        pos = nl + 1;
    }
    if (CSX_OP_IS_LAST(args) && st->carry_len) {
        if (contains(st->carry, st->carry_len, pat, m) ^ invert) {
            csx_memcpy(out + o, st->carry, st->carry_len);
            o += st->carry_len;
            out[o++] = '\n';
        }
        st->carry_len = 0;
    }
    return o;
}
