/*
 * passthrough: the output is the input (Metal FS's passthrough: binds its input to its
 * output). No parameters, no state. Output capacity: the input's length.
 */
#include "ops.h"

CSX_PROGRAM(passthrough)
{
    unsigned long n = CSX_OP_IN_LEN(args);
    if (n > CSX_OP_OUT_CAP(args))
        return CSX_ENOSPC;
    if (n)
        csx_memcpy(CSX_OP_OUT(args), CSX_OP_IN(args), n);
    return n;
}
