/*
 * The CSFs the v0.5 test programs look up by name, as eBPF programs (clang -target bpf):
 *   Checksum: the wrapping u32 sum of the little-endian u32 words of the first cparam1
 *             bytes of window 0 (a partial last word zero-padded), into window 1;
 *   sleep:    busy-waits cparam1 milliseconds;
 *   rgb2gray: a 24-bit BMP of cparam1 bytes in window 0, copied to window 1 with every
 *             pixel's channels set to (29 B + 150 G + 77 R) >> 8.
 */
#include "csx.h"

CSX_PROGRAM(Checksum)
{
    unsigned long n = args->cparam1;
    unsigned int *out = csx_window_addr(args, 1);
    const unsigned char *in = win0;
    if (!out || csx_window_len(args, 1) < 4 || n > win0_len)
        return CSX_EINVAL;
    unsigned int sum = 0;
    unsigned long words = n / 4;
    for (unsigned long i = 0; i < words; i++)
        sum += ((const unsigned int *)win0)[i];
    unsigned int last = 0;
    for (unsigned long i = words * 4; i < n; i++)
        last |= (unsigned int)in[i] << (8 * (i - words * 4));
    sum += last;
    *out = sum;
    return 0;
}

CSX_PROGRAM(sleep)
{
    unsigned long end = csx_now_ns() + args->cparam1 * 1000000UL;
    while (csx_now_ns() < end) {
    }
    return 0;
}

static unsigned long le(const unsigned char *p, int bytes)
{
    unsigned long v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

CSX_PROGRAM(rgb2gray)
{
    const unsigned char *in = win0;
    unsigned char *out = csx_window_addr(args, 1);
    unsigned long n = args->cparam1;
    if (!out || n < 54 || n > win0_len || n > csx_window_len(args, 1))
        return CSX_EINVAL;
    unsigned long offset = le(in + 10, 4);
    long width = (int)le(in + 18, 4);
    long height = (int)le(in + 22, 4);
    if (height < 0)
        height = -height;
    if (le(in + 28, 2) != 24 || width < 0)
        return CSX_EINVAL;
    unsigned long row = ((unsigned long)width * 3 + 3) & ~3UL;
    if (offset + row * (unsigned long)height > n)
        return CSX_EINVAL;
    for (unsigned long i = 0; i < n; i++)
        out[i] = in[i];
    for (long y = 0; y < height; y++) {
        for (long x = 0; x < width; x++) {
            unsigned long at = offset + (unsigned long)y * row + (unsigned long)x * 3;
            unsigned int gray = (29 * in[at] + 150 * in[at + 1] + 77 * in[at + 2]) >> 8;
            out[at] = out[at + 1] = out[at + 2] = (unsigned char)gray;
        }
    }
    return (long)n;
}

/* count: cparam1 rounds of a little arithmetic (about five instructions each); r0 is the
 * result, so the loop is not folded away. */
CSX_PROGRAM(count)
{
    unsigned long s = 1;
    for (unsigned long i = 0; i < args->cparam1; i++)
        s += i ^ (s >> 3);
    return (long)(s & 0x7fffffff);
}
