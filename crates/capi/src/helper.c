/*
 * The body of csHelperSetComputeArg (variadic, so written in C). The exported symbol is a
 * trampoline in api.rs that jumps here with every register and the stack untouched.
 * It returns nothing, as the API declares: a NULL Arg is ignored; a Type outside
 * CS_COMPUTE_ARG_TYPE is stored as given, so the compute request naming the argument
 * fails with CS_INVALID_OPTION instead of running with a half-set argument.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* CsComputeArg as cs_api.h declares it (that header is generated from this crate, so
 * this file stands alone; api.rs checks the layout against the Rust one). */
typedef struct {
    int Type;
    union {
        struct {
            void *MemHandle;
            uint64_t ByteOffset;
        } DevMem;
        uint64_t Value64;
        uint32_t Value32;
        uint64_t StreamHandle;
    } u;
} CsComputeArg;
typedef int CS_COMPUTE_ARG_TYPE;
enum { CS_AFDM_TYPE = 1, CS_32BIT_VALUE_TYPE = 2, CS_64BIT_VALUE_TYPE = 3, CS_STREAM_TYPE_ = 4 };
_Static_assert(sizeof(CsComputeArg) == 24, "CsComputeArg is 24 bytes");
_Static_assert(offsetof(CsComputeArg, u) == 8, "CsComputeArg.u is at 8");

void csx_set_compute_arg_impl(CsComputeArg *Arg, CS_COMPUTE_ARG_TYPE Type, ...);

void csx_set_compute_arg_impl(CsComputeArg *Arg, CS_COMPUTE_ARG_TYPE Type, ...)
{
    va_list ap;
    if (!Arg)
        return;
    va_start(ap, Type);
    switch (Type) {
    case CS_AFDM_TYPE:
        Arg->u.DevMem.MemHandle = va_arg(ap, void *);
        /* A 64-bit offset. The spec's examples pass a literal 0 (an int): x86-64 and
         * AArch64 compilers load it with a 32-bit move, which clears the register's
         * upper half, so it reads as 0; pass (uint64_t) offsets to be portable. */
        Arg->u.DevMem.ByteOffset = va_arg(ap, uint64_t);
        break;
    case CS_32BIT_VALUE_TYPE:
        Arg->u.Value64 = 0;
        Arg->u.Value32 = va_arg(ap, uint32_t);
        break;
    case CS_64BIT_VALUE_TYPE:
        Arg->u.Value64 = va_arg(ap, uint64_t);
        break;
    case CS_STREAM_TYPE_:
        Arg->u.StreamHandle = va_arg(ap, uint64_t);
        break;
    default:
        break;
    }
    va_end(ap);
    Arg->Type = Type;
}
