/* Local (bpf-to-bpf) calls: static and global functions in .text (called with and
 * without a relocation), a static function in a section of its own, and a call chain. */
#include "csx_test.h"

static NOINLINE u64 square(u64 x)
{
    return x * x;
}

/* Global, in .text: library functions, not programs. A call between two global
 * functions of one section still carries a relocation (imm = -1). */
NOINLINE u64 plus1(u64 x)
{
    return x + 1;
}

NOINLINE u64 add3(u64 a, u64 b, u64 c)
{
    return square(a) + plus1(b) + c;
}

SEC("csx/lib") static NOINLINE u64 triple(u64 x)
{
    return 3 * x;
}

/* square(x) + (x*x + (1 + 1) + 2) + 3x */
SEC("csx/calls") u64 calls(u64 x)
{
    return square(x) + add3(x, 1, 2) + triple(x);
}
