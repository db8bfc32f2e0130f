/* One global function, in .text, with a static helper: chosen without a name. */
#include "csx_test.h"

static NOINLINE u64 twice(u64 x)
{
    return 2 * x;
}

u64 only(u64 x)
{
    return twice(x) + 1;
}
