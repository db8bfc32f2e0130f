/*
 * aggregate: count, sum, minimum and maximum of the stream's values (Metal FS's
 * aggregate), emitted once, on the last chunk.
 *
 * Params: type @0 (0 u32, 1 u64, 2 i32, 3 i64), text @8 (bool).
 * Output (last chunk only): 32 bytes, u64 count, sum, min, max little-endian (signed
 * types as two's complement i64; the sum wraps modulo 2^64); with text, the line
 * "count N sum N min N max N\n" in decimal. No values: count 0, sum 0, min the largest
 * and max the smallest 64-bit value of the type's signedness.
 * State: the running values and a value split across chunks; a partial value at the
 * end of the stream is dropped. Output capacity: 128 bytes.
 */
#include "ops.h"

struct aggregate_state {
    csx_u64 count, sum, min_key, max_key;
    csx_u64 carry_len;
    csx_u8 carry[8];
};

/* Writes v in decimal at p (signed when neg_ok and the top bit is set); returns bytes. */
static inline unsigned int put_decimal(csx_u8 *p, csx_u64 v, int is_signed)
{
    csx_u8 digits[20];
    unsigned int n = 0, o = 0;
    if (is_signed && (csx_i64)v < 0) {
        p[o++] = '-';
        v = -v;
    }
    do {
        digits[n++] = '0' + v % 10;
        v /= 10;
    } while (v && n < 20);
    while (n)
        p[o++] = digits[--n];
    return o;
}

static inline unsigned int put_text(csx_u8 *p, const char *s)
{
    unsigned int o = 0;
    while (s[o]) {
        p[o] = s[o];
        o++;
    }
    return o;
}

CSX_PROGRAM(aggregate)
{
    struct aggregate_state *st = CSX_OP_STATE(args);
    csx_u8 *out = CSX_OP_OUT(args);
    const csx_u8 *in = CSX_OP_IN(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    if (!st || CSX_OP_STATE_LEN(args) < sizeof(*st) || CSX_OP_OUT_CAP(args) < 128)
        return CSX_ENOSPC;
    csx_u64 type = csx_op_param(args, 0);
    if (type > OPS_I64)
        return CSX_EINVAL;
    unsigned int w = ops_width(type);
    if (CSX_OP_IS_FIRST(args)) {
        st->min_key = ~0UL;
        st->max_key = 0;
    }
    csx_u64 count = st->count, sum = st->sum, mn = st->min_key, mx = st->max_key;
    unsigned long pos = 0;
    if (st->carry_len) {
        while (st->carry_len < w && pos < len)
            st->carry[st->carry_len++] = in[pos++];
        if (st->carry_len == w) {
            csx_u64 k = ops_key(st->carry, type);
            count++;
            sum += ops_unkey(k, type);
            mn = k < mn ? k : mn;
            mx = k > mx ? k : mx;
            st->carry_len = 0;
        }
    }
    unsigned long whole = pos + (len - pos) / w * w;
    for (; pos < whole; pos += w) {
        csx_u64 k = ops_key(in + pos, type);
        count++;
        sum += ops_unkey(k, type);
        mn = k < mn ? k : mn;
        mx = k > mx ? k : mx;
    }
    while (pos < len)
        st->carry[st->carry_len++] = in[pos++];
    st->count = count;
    st->sum = sum;
    st->min_key = mn;
    st->max_key = mx;
    if (!CSX_OP_IS_LAST(args))
        return 0;
    csx_u64 vals[4] = {count, sum, ops_unkey(mn, type), ops_unkey(mx, type)};
    if (csx_op_param(args, 8)) {
        int is_signed = type == OPS_I32 || type == OPS_I64;
        unsigned int o = 0;
        o += put_text(out + o, "count ");
        o += put_decimal(out + o, vals[0], 0);
        o += put_text(out + o, " sum ");
        o += put_decimal(out + o, vals[1], is_signed);
        o += put_text(out + o, " min ");
        o += put_decimal(out + o, vals[2], is_signed);
        o += put_text(out + o, " max ");
        o += put_decimal(out + o, vals[3], is_signed);
        out[o++] = '\n';
        return o;
    }
    for (int i = 0; i < 4; i++)
        *(csx_u64 *)(out + 8 * i) = vals[i];
    return 32;
}
