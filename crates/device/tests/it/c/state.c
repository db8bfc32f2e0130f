/* Shared state: a counter at the offset cparam1, and a gate a later run opens. */
#include "csx_it.h"

ENTRY(count)
{
    volatile u64 *c = (volatile u64 *)(state + args->cparam1);
    *c = *c + 1;
    return *c;
}

/* Holds its windows until the state's word at 8 becomes non-zero (or fuel runs out). */
ENTRY(wait_gate)
{
    while (*(volatile u64 *)(state + 8) == 0)
        ;
    return 7;
}

ENTRY(open_gate)
{
    *(volatile u64 *)(state + 8) = 1;
    return 1;
}

ENTRY(state_len)
{
    return state_len;
}
