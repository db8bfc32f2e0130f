/* An extern function no device offers. Only the program that calls it fails to load. */
#include "csx_test.h"

extern u64 csx_no_such_function(u64 x);

SEC("csx/unknown") u64 unknown(u64 x)
{
    return csx_no_such_function(x) + 1;
}

SEC("csx/known") u64 known(u64 x)
{
    return x + 1;
}
