/* Calls to device functions: extern declarations resolved by name, and a helper by
 * fixed id (no relocation). */
#include "csx_test.h"

extern u64 csx_memcpy(void *dst, const void *src, u64 n);
extern u64 csx_add(u64 a, u64 b);
static u64 (*const csx_add_by_id)(u64 a, u64 b) = (void *)7;

static const char greeting[] = "hello, device";

/* Sum of the bytes of greeting (copied by the device) plus x. */
SEC("csx/externs") u64 use_externs(u64 x)
{
    char buf[16];
    csx_memcpy(buf, greeting, sizeof(greeting));
    u64 sum = 0;
    for (int i = 0; i < (int)sizeof(greeting); i++)
        sum += (u8)buf[i];
    return csx_add(sum, x);
}

SEC("csx/fixed") u64 use_fixed(u64 x)
{
    return csx_add_by_id(x, 1);
}
