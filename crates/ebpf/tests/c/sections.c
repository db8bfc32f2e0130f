/* Several programs, for choosing one by symbol or by section. */
#include "csx_test.h"

SEC("csx/first") u64 first(void)
{
    return 1;
}

SEC("csx/second") u64 second(void)
{
    return 2;
}

SEC("csx/pair") u64 pair_a(void)
{
    return 3;
}

SEC("csx/pair") u64 pair_b(void)
{
    return 4;
}
