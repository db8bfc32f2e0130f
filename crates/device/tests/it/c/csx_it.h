/* What the integration tests' programs add to the SDK header: short integer names and
 * ENTRY(name) for a program in section "csx". The ABI itself (struct csx_args, the
 * registered functions, the CSX_E* codes) comes from csx.h, which the tests generate
 * from csx_proto::abi before compiling; nothing of it is restated here. */
#ifndef CSX_IT_H
#define CSX_IT_H

#include "csx.h"

typedef csx_u8 u8;
typedef csx_u32 u32;
typedef csx_u64 u64;

#define SEC(name) __attribute__((section(name), used))

#define ENTRY(name) SEC("csx") long name(u8 *w0, unsigned long w0_len, u8 *state, \
                                        unsigned long state_len, const struct csx_args *args)

#endif
