/*
 * ops.h: what the catalogue's operators (the .c files of sdk/ops) share. Each operator follows the
 * streaming contract of csx.h ("Streaming operators"): window 0 the input chunk,
 * window 1 the output buffer, window 2 the per-stream state, cparam1 the FIRST/LAST
 * flags, params the typed parameters at the offsets of the operator's catalogue entry
 * (crates/fs/src/ops.rs), r0 the output bytes (| CSX_OP_AGAIN) or a CSX_E* code.
 */
#ifndef CSX_OPS_H
#define CSX_OPS_H
#include "csx.h"

/* Value types of filter and aggregate (param `type`). */
#define OPS_U32 0
#define OPS_U64 1
#define OPS_I32 2
#define OPS_I64 3

static inline unsigned int ops_width(csx_u64 type)
{
    return (type == OPS_U64 || type == OPS_I64) ? 8 : 4;
}

/*
 * The order-preserving key of a value: unsigned values are their own key; signed ones
 * are sign-extended to 64 bits and their sign bit flipped, so keys compare unsigned.
 */
static inline csx_u64 ops_key(const csx_u8 *p, csx_u64 type)
{
    switch (type) {
    case OPS_U32:
        return *(const csx_u32 *)p;
    case OPS_U64:
        return *(const csx_u64 *)p;
    case OPS_I32:
        return (csx_u64)(csx_i64)*(const csx_i32 *)p ^ (1UL << 63);
    default:
        return *(const csx_u64 *)p ^ (1UL << 63);
    }
}

/* A parameter's integer as a key of `type` (signed parameters are 64-bit). */
static inline csx_u64 ops_param_key(csx_u64 v, csx_u64 type)
{
    return (type == OPS_I32 || type == OPS_I64) ? v ^ (1UL << 63) : v;
}

/* The value of a key, widened to 64 bits (the inverse of ops_key). */
static inline csx_u64 ops_unkey(csx_u64 k, csx_u64 type)
{
    return (type == OPS_I32 || type == OPS_I64) ? k ^ (1UL << 63) : k;
}

static inline void ops_put_u32(csx_u8 *p, csx_u32 v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (csx_u8)(v >> (8 * i));
}

static inline csx_u32 ops_get_u32(const csx_u8 *p)
{
    return (csx_u32)p[0] | (csx_u32)p[1] << 8 | (csx_u32)p[2] << 16 | (csx_u32)p[3] << 24;
}

#endif /* CSX_OPS_H */
