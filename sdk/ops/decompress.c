/*
 * decompress: a csx_lz4 stream back to its bytes, through the accelerated device
 * function csx_lz4_decompress (Metal FS's Snappy case study, with LZ4).
 *
 * A csx_lz4 stream is a sequence of frames: u32 raw bytes, u32 compressed bytes
 * (little-endian), then one LZ4 block; raw bytes at most 1 MiB. `compress` writes it.
 * No params. State: a frame split across chunks, and the place in the input when the
 * output filled (then it returns CSX_OP_AGAIN). A corrupt or truncated stream stops the
 * stream with CSX_EBADMSG. Output capacity: at least 1 MiB.
 */
#include "ops.h"

#define RAW_MAX (1UL << 20)
#define COMP_MAX (RAW_MAX + RAW_MAX / 10 + 32)
#define HDR 8

struct decompress_state {
    csx_u64 in_pos;
    csx_u64 carry_len;
    csx_u8 carry[HDR + COMP_MAX];
};

CSX_PROGRAM(decompress)
{
    struct decompress_state *st = CSX_OP_STATE(args);
    csx_u8 *out = CSX_OP_OUT(args);
    const csx_u8 *in = CSX_OP_IN(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    unsigned long cap = CSX_OP_OUT_CAP(args);
    if (!st || CSX_OP_STATE_LEN(args) < sizeof(*st) || cap < RAW_MAX)
        return CSX_ENOSPC;
    unsigned long pos = st->in_pos, o = 0;
    if (st->carry_len) {
        if (st->carry_len < HDR) {
            unsigned long take = HDR - st->carry_len;
            if (take > len - pos)
                take = len - pos;
            csx_memcpy(st->carry + st->carry_len, in + pos, take);
            st->carry_len += take;
            pos += take;
        }
        if (st->carry_len >= HDR) {
            csx_u32 raw = ops_get_u32(st->carry), comp = ops_get_u32(st->carry + 4);
            if (raw > RAW_MAX || comp > COMP_MAX)
                return CSX_EBADMSG;
            unsigned long take = HDR + comp - st->carry_len;
            if (take > len - pos)
                take = len - pos;
            csx_memcpy(st->carry + st->carry_len, in + pos, take);
            st->carry_len += take;
            pos += take;
            if (st->carry_len == HDR + comp) {
                if (raw > cap - o) {
                    st->in_pos = pos;
                    return CSX_OP_AGAIN | o;
                }
                long n = csx_lz4_decompress(st->carry + HDR, comp, out + o, raw);
                if (n != raw)
                    return CSX_EBADMSG;
                o += n;
                st->carry_len = 0;
            }
        }
    }
    while (!st->carry_len && len - pos >= HDR) {
        csx_u32 raw = ops_get_u32(in + pos), comp = ops_get_u32(in + pos + 4);
        if (raw > RAW_MAX || comp > COMP_MAX)
            return CSX_EBADMSG;
        if (len - pos < HDR + comp)
            break;
        if (raw > cap - o) {
            st->in_pos = pos;
            return CSX_OP_AGAIN | o;
        }
        long n = csx_lz4_decompress(in + pos + HDR, comp, out + o, raw);
        if (n != raw)
            return CSX_EBADMSG;
        o += n;
        pos += HDR + comp;
    }
    if (!st->carry_len && pos < len) {
        csx_memcpy(st->carry, in + pos, len - pos);
        st->carry_len = len - pos;
    }
    st->in_pos = 0;
    if (CSX_OP_IS_LAST(args) && st->carry_len)
        return CSX_EBADMSG;
    return o;
}
