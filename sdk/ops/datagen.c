/*
 * datagen: a stream of pseudo-random little-endian u64 values generated on the device
 * (Metal FS's datagen); it ignores its input, so it may only start a pipeline.
 *
 * Params: size @0 (bytes to generate; the last value is cut when size is not a multiple
 * of 8), seed @8, modulo @16 (when not 0, every value is taken modulo it).
 * Value i of the stream is splitmix64(seed + i) (modulo).
 * State: the bytes generated so far. It fills each output buffer and asks to be called
 * again (CSX_OP_AGAIN) until size bytes are out.
 */
#include "ops.h"

struct datagen_state {
    csx_u64 done;
};

static inline csx_u64 splitmix64(csx_u64 x)
{
    x += 0x9e3779b97f4a7c15UL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9UL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebUL;
    return x ^ (x >> 31);
}

CSX_PROGRAM(datagen)
{
    struct datagen_state *st = CSX_OP_STATE(args);
    csx_u8 *out = CSX_OP_OUT(args);
    unsigned long cap = CSX_OP_OUT_CAP(args) / 8 * 8;
    if (!st || CSX_OP_STATE_LEN(args) < sizeof(*st) || cap == 0)
        return CSX_ENOSPC;
    csx_u64 size = csx_op_param(args, 0);
    csx_u64 seed = csx_op_param(args, 8);
    csx_u64 modulo = csx_op_param(args, 16);
    csx_u64 done = st->done;
    csx_u64 n = size - done < cap ? size - done : cap;
    csx_u64 first = done / 8;
    csx_u64 whole = n / 8;
    if (modulo) {
        for (csx_u64 i = 0; i < whole; i++)
            *(csx_u64 *)(out + 8 * i) = splitmix64(seed + first + i) % modulo;
    } else {
        for (csx_u64 i = 0; i < whole; i++)
            *(csx_u64 *)(out + 8 * i) = splitmix64(seed + first + i);
    }
    if (n % 8) {
        csx_u64 v = splitmix64(seed + first + whole);
        if (modulo)
            v %= modulo;
        for (csx_u64 b = 0; b < n % 8; b++)
            out[8 * whole + b] = (csx_u8)(v >> (8 * b));
    }
    st->done = done + n;
    if (st->done < size)
        return CSX_OP_AGAIN | n;
    return n;
}
