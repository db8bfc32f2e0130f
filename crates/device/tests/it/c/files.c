/* Delilah's experiment: read a device file named in the parameters into window 0,
 * then sum its bytes. Also the error path and the other functions. */
#include "csx_it.h"

ENTRY(read_file)
{
    const char *path = (const char *)args->params;
    long size = csx_file_size(path, args->params_len);
    if (size < 0)
        return size;
    long n = csx_file_read(path, args->params_len, args->cparam1, w0, w0_len);
    if (n < 0)
        return n;
    u64 sum = 0;
    for (long i = 0; i < n; i++)
        sum += w0[i];
    return (long)(sum << 20) | n;
}

ENTRY(write_file)
{
    const char *path = (const char *)args->params;
    return csx_file_write(path, args->params_len, args->cparam1, w0, w0_len);
}

ENTRY(misc)
{
    char msg[] = "hello from the device";
    csx_trace(msg, sizeof(msg) - 1);
    csx_memset(w0, 0xAB, 8);
    csx_memcpy(w0 + 8, w0, 8);
    u64 vals[4] = {9, 3, 7, 1};
    csx_sort_u64(vals, sizeof(vals));
    u8 bits = 0;
    long hits = csx_filter_u64(vals, sizeof(vals), 4 /* GT */, 2, &bits);
    unsigned long t0 = csx_now_ns();
    unsigned long t1 = csx_now_ns();
    if (t1 < t0)
        return -100;
    return vals[0] * 1000 + vals[3] * 100 + hits * 10 + (bits == 0xE ? 1 : 0);
}
