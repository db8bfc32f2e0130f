/*
 * upper_op.c: a user operator (Metal FS's changecase), built with `csx build` and run
 * as a pipeline stage:
 *
 *     csx build sdk/examples/upper_op.c -o upper.o
 *     csx op pipe './upper.o | grep --pattern HELLO' /logs/app.txt -o out.txt
 *     csx op pipe './upper.o --int 1' /logs/app.txt     # lowercase instead
 *
 * It follows the streaming operator contract of csx.h ("Streaming operators"): window 0
 * the input chunk, window 1 the output buffer (here at least the input's length),
 * window 2 its per-stream state (unused here), r0 the output bytes. A user stage's
 * parameters are given in order as `--int N` (8 bytes little-endian) or `--bytes TEXT`,
 * so params @0 is the first `--int`: 1 turns letters to lowercase instead.
 */
#include "csx.h"

CSX_PROGRAM(upper)
{
    const csx_u8 *in = CSX_OP_IN(args);
    csx_u8 *out = CSX_OP_OUT(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    if (CSX_OP_OUT_CAP(args) < len)
        return CSX_ENOSPC;
    int lower = csx_op_param(args, 0) != 0;
    for (unsigned long i = 0; i < len; i++) {
        csx_u8 c = in[i];
        if (!lower && c >= 'a' && c <= 'z')
            c -= 'a' - 'A';
        else if (lower && c >= 'A' && c <= 'Z')
            c += 'a' - 'A';
        out[i] = c;
    }
    return len;
}
