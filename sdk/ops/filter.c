/*
 * filter: keeps the values v of the stream with `v OP value` (or value <= v <= high for
 * between), compacted, in their original bytes.
 *
 * Params: type @0 (0 u32, 1 u64, 2 i32, 3 i64; little-endian values), op @8 (0 eq, 1 ne,
 * 2 lt, 3 le, 4 gt, 5 ge, 6 between), value @16, high @24 (between's inclusive upper
 * bound). Signed types compare signed; the bounds are 64-bit.
 * State: a value split across two chunks (up to 7 bytes). A partial value at the end of
 * the stream is dropped.
 * Output capacity: the input's length + 8.
 */
#include "ops.h"

struct filter_state {
    csx_u64 carry_len;
    csx_u8 carry[8];
};

CSX_PROGRAM(filter)
{
    struct filter_state *st = CSX_OP_STATE(args);
    csx_u8 *out = CSX_OP_OUT(args);
    const csx_u8 *in = CSX_OP_IN(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    unsigned long cap = CSX_OP_OUT_CAP(args);
    if (!st || CSX_OP_STATE_LEN(args) < sizeof(*st) || cap < len + 8)
        return CSX_ENOSPC;
    csx_u64 type = csx_op_param(args, 0);
    csx_u64 op = csx_op_param(args, 8);
    if (type > OPS_I64 || op > 6)
        return CSX_EINVAL;
    unsigned int w = ops_width(type);
    csx_u64 a = ops_param_key(csx_op_param(args, 16), type);
    csx_u64 b = ops_param_key(csx_op_param(args, 24), type);
    /* Every operator as "key in [lo, hi]", ne as its inverse. */
    csx_u64 lo = 0, hi = ~0UL, invert = 0;
    switch (op) {
    case 0: lo = a; hi = a; break;
    case 1: lo = a; hi = a; invert = 1; break;
    case 2: if (a == 0) invert = 1; else hi = a - 1; break;
    case 3: hi = a; break;
    case 4: if (a == ~0UL) invert = 1; else lo = a + 1; break;
    case 5: lo = a; break;
    default:
        if (a > b)
            invert = 1;
        else {
            lo = a;
            hi = b;
        }
    }
    csx_u64 span = hi - lo;
    unsigned long o = 0, pos = 0;
    /* Finish a value split across chunks. */
    if (st->carry_len) {
        while (st->carry_len < w && pos < len)
            st->carry[st->carry_len++] = in[pos++];
        if (st->carry_len == w) {
            csx_u64 k = ops_key(st->carry, type);
            if (((k - lo) <= span) ^ invert) {
                for (unsigned int i = 0; i < w; i++)
                    out[o++] = st->carry[i];
            }
            st->carry_len = 0;
        }
    }
    unsigned long whole = pos + (len - pos) / w * w;
    if (w == 8) {
        for (; pos < whole; pos += 8) {
            csx_u64 k = ops_key(in + pos, type);
            if (((k - lo) <= span) ^ invert) {
                *(csx_u64 *)(out + o) = *(const csx_u64 *)(in + pos);
                o += 8;
            }
        }
    } else {
        for (; pos < whole; pos += 4) {
            csx_u64 k = ops_key(in + pos, type);
            if (((k - lo) <= span) ^ invert) {
                *(csx_u32 *)(out + o) = *(const csx_u32 *)(in + pos);
                o += 4;
            }
        }
    }
    while (pos < len)
        st->carry[st->carry_len++] = in[pos++];
    if (CSX_OP_IS_LAST(args))
        st->carry_len = 0;
    return o;
}
