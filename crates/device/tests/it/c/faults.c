/* Programs that trap on purpose, selected by entry name. */
#include "csx_it.h"

ENTRY(null_write)
{
    *(volatile u64 *)(unsigned long)args->cparam1 = 1;
    return 0;
}

ENTRY(spin_forever)
{
    volatile u64 i = 0;
    for (;;)
        i++;
    return 0;
}

ENTRY(write_args)
{
    *(volatile u64 *)args = 5;
    return 0;
}

ENTRY(read_past_window)
{
    return *(volatile u8 *)(w0 + w0_len);
}
