/*
 * file_read: reads a device file by path into window 0 through csx_file_read
 * (Delilah's experiment: a program that fetches its own data from the device's file
 * system instead of having the host stage it).
 *
 * Windows: 0 = the destination; the program reads until it is full or the file ends.
 * cparam1: the file offset to read from. cparam2: unused.
 * params: the device path (1 to CSX_PATH_SIZE_MAX bytes, no terminating NUL needed).
 * Output: the file's bytes from cparam1, in window 0 (not window 1: the read fills the
 * program's own data window, as Delilah's data slot).
 * r0: the bytes read (fewer than win0_len at the end of the file), or CSX_EINVAL
 * without a path or window, or csx_file_read's negative code (CSX_ENOENT, ...).
 */
#include "csx.h"

CSX_PROGRAM(file_read)
{
    const char *path = (const char *)args->params;
    csx_u64 path_len = args->params_len;
    if (path_len == 0 || !win0)
        return CSX_EINVAL;
    csx_u8 *dst = win0;
    csx_u64 done = 0;
    while (done < win0_len) {
        long n = csx_file_read(path, path_len, args->cparam1 + done, dst + done,
                               win0_len - done);
        if (n < 0)
            return n;
        if (n == 0)
            break;
        done += n;
    }
    return done;
}
