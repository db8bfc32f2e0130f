/*
 * bitmap: decompresses a run-length encoded bitmap (lambda-IO's Bitmap) into window 1
 * and, when given a device path, writes it to that file.
 *
 * Windows: 0 = the compressed bitmap: u64 nbits, then u32 run lengths alternating
 * zeros and ones, zeros first (a partial run at the end is ignored; bits after the
 * last run are zeros); 1 = the output buffer.
 * params: empty, or a device path. cparam1: with a path, the file offset to write at.
 * cparam2: unused.
 * Output: the bitmap, (nbits + 7) / 8 bytes, bit i in bit i % 8 of byte i / 8, unused
 * high bits of the last byte zero. Without a path the whole bitmap must fit window 1
 * (lambda-IO's write: the host writes the output). With a path, window 1 is a staging
 * buffer of any size: each time it fills, the program writes it to the file with
 * csx_file_write, so a small buffer decompresses a bitmap of any size.
 * r0: the bitmap's bytes (written to window 1 or to the file), or CSX_EINVAL for a
 * malformed input (runs longer than nbits) or no output window, CSX_ENOSPC if the
 * bitmap does not fit window 1 without a path, or csx_file_write's negative code.
 */
#include "csx.h"

struct sink {
    csx_u8 *buf;
    csx_u64 cap;
    csx_u64 used;
    const char *path;
    csx_u64 path_len;
    csx_u64 file_offset;
};

/* Writes the staged bytes to the file; 0 or a negative code. */
static long sink_flush(struct sink *k)
{
    if (k->used == 0)
        return 0;
    long n = csx_file_write(k->path, k->path_len, k->file_offset, k->buf, k->used);
    if (n < 0)
        return n;
    k->file_offset += k->used;
    k->used = 0;
    return 0;
}

/* Makes room for `want` bytes in the staging buffer; 0 or a negative code. */
static long sink_room(struct sink *k, csx_u64 want)
{
    if (k->cap - k->used >= want)
        return 0;
    if (k->path_len == 0)
        return CSX_ENOSPC;
    return sink_flush(k);
}

/*
 * Appends `len` bits of value `one` after `*acc_bits` pending bits in `*acc`, emitting
 * every completed byte (and 8 bytes at a time inside long runs).
 */
/* Writes the low `nbytes` (1..8) bytes of `v`, little-endian: one 8-byte store when
 * the buffer can hold 8 bytes, else byte by byte. */
static long emit_bytes(struct sink *k, csx_u64 v, csx_u64 nbytes)
{
    if (nbytes == 8 && k->cap >= 8) {
        long r = sink_room(k, 8);
        if (r < 0)
            return r;
        *(csx_u64 *)(k->buf + k->used) = v;
        k->used += 8;
        return 0;
    }
    for (csx_u64 i = 0; i < nbytes; i++) {
        long r = sink_room(k, 1);
        if (r < 0)
            return r;
        k->buf[k->used++] = (csx_u8)(v >> (8 * i));
    }
    return 0;
}

/* Appends `len` bits of value `one` to the 64-bit accumulator (`*acc_bits` of it in
 * use), emitting it 8 bytes at a time as it fills: a run costs a few steps per 64 bits
 * rather than per 8. */
static long emit_run(struct sink *k, csx_u64 len, int one, csx_u64 *acc, csx_u64 *acc_bits)
{
    while (len > 0) {
        csx_u64 take = 64 - *acc_bits;
        if (take > len)
            take = len;
        if (one)
            *acc |= (take == 64 ? ~0UL : (1UL << take) - 1) << *acc_bits;
        *acc_bits += take;
        len -= take;
        if (*acc_bits == 64) {
            long r = emit_bytes(k, *acc, 8);
            if (r < 0)
                return r;
            *acc = 0;
            *acc_bits = 0;
        }
    }
    return 0;
}

CSX_PROGRAM(bitmap)
{
    struct sink k;
    k.buf = csx_window_addr(args, 1);
    k.cap = csx_window_len(args, 1);
    k.used = 0;
    k.path = (const char *)args->params;
    k.path_len = args->params_len;
    k.file_offset = args->cparam1;
    if (!k.buf || win0_len < 8)
        return CSX_EINVAL;
    csx_u64 nbits = *(const csx_u64 *)win0;
    csx_u64 total = nbits / 8 + (nbits % 8 != 0);
    if (k.path_len == 0 && k.cap < total)
        return CSX_ENOSPC;

    const csx_u32 *runs = (const csx_u32 *)((const csx_u8 *)win0 + 8);
    csx_u64 nruns = (win0_len - 8) / 4;
    csx_u64 covered = 0, acc = 0, acc_bits = 0;
    for (csx_u64 r = 0; r < nruns; r++) {
        csx_u64 len = runs[r];
        if (len > nbits - covered)
            return CSX_EINVAL;
        long e = emit_run(&k, len, r & 1, &acc, &acc_bits);
        if (e < 0)
            return e;
        covered += len;
    }
    long e = emit_run(&k, nbits - covered, 0, &acc, &acc_bits);
    if (e < 0)
        return e;
    if (acc_bits > 0) {
        e = emit_bytes(&k, acc, (acc_bits + 7) / 8);
        if (e < 0)
            return e;
    }
    if (k.path_len > 0) {
        e = sink_flush(&k);
        if (e < 0)
            return e;
    }
    return total;
}
