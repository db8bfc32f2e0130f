/* Echoes its inputs: proves the entry registers and struct csx_args layout. */
#include "csx_it.h"

ENTRY(args_echo)
{
    u64 r = args->cparam1 + 2 * args->cparam2;
    r += 100 * args->nwindows + 1000 * (u64)args->params_len;
    if (args->params_len > 0)
        r += 10000 * (u64)args->params[args->params_len - 1];
    if (args->nwindows > 0) {
        /* r1/r2 are window 0; args->windows[] agrees. */
        if ((unsigned long)w0 != args->windows[0].addr || w0_len != args->windows[0].len)
            return -1;
        r += 1000000 * (u64)w0_len;
    }
    if (args->nwindows > 1)
        r += 100000000 * (u64)args->windows[1].len;
    return r;
}
