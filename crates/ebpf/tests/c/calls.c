/* Local (bpf-to-bpf) calls: a static function and a global function in .text, a static
 * function in a section of its own, and a call chain. */
#include "csx_test.h"

static NOINLINE u64 square(u64 x)
{
    return x * x;
}

/* Global, in .text: a library function, not a program. */
NOINLINE u64 add3(u64 a, u64 b, u64 c)
{
    return square(a) + b + c;
}

SEC("csx/lib") static NOINLINE u64 triple(u64 x)
{
    return 3 * x;
}

/* square(x) + (x*x + 1 + 2) + 3x */
SEC("csx/calls") u64 calls(u64 x)
{
    return square(x) + add3(x, 1, 2) + triple(x);
}
