/* Constructs the loader refuses, each in its own program. Compiled with -fcommon. */
#include "csx_test.h"

extern u64 ext_var;
int common_var;
SEC("csx_cfg") u64 cfg = 3;

static NOINLINE u64 inc(u64 x)
{
    return x + 1;
}

static NOINLINE u64 dec(u64 x)
{
    return x - 1;
}

/* A table of function pointers in .data, which needs R_BPF_64_ABS64 relocations. */
u64 (*fn_table[2])(u64) = {inc, dec};

SEC("csx/extern_var") u64 use_extern_var(void)
{
    return ext_var;
}

SEC("csx/common") u64 use_common(void)
{
    return ++common_var;
}

SEC("csx/custom_section") u64 use_custom_section(void)
{
    return cfg;
}

SEC("csx/fn_table") u64 use_fn_table(u64 i)
{
    return (u64)fn_table[i & 1];
}

/* Eleven data sections, one more than a program may map. */
#define GLOBAL(n) SEC(".data.g" #n) u64 g##n = n
GLOBAL(0);
GLOBAL(1);
GLOBAL(2);
GLOBAL(3);
GLOBAL(4);
GLOBAL(5);
GLOBAL(6);
GLOBAL(7);
GLOBAL(8);
GLOBAL(9);
GLOBAL(10);

SEC("csx/many_globals") u64 use_many_globals(void)
{
    return g0 + g1 + g2 + g3 + g4 + g5 + g6 + g7 + g8 + g9 + g10;
}

/* A .bss larger than a global section may be. */
static u8 huge[(1 << 20) + 8];

SEC("csx/huge") u64 use_huge(u64 i)
{
    huge[i & 0xfffff] += 1;
    return huge[(i + 1) & 0xfffff];
}
