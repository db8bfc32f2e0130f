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
