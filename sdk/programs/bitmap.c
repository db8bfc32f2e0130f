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

/* Writes the low `nbytes` (1..8) bytes of `v`, little-endian: one 8-byte store when
 * the buffer can hold 8 bytes, else byte by byte. The slow path of `PUT_WORD` below
 * and the bitmap's last partial word: out of line, so the main loop stays small. */
static __attribute__((noinline)) long emit_bytes(struct sink *k, csx_u64 v, csx_u64 nbytes)
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

/* Appends the 64-bit word `w` to the output: a store while 8 bytes fit between `out`
 * and `out_end` (the main loop's cursor in the sink's buffer), else `emit_bytes`, which
 * flushes the buffer to the file first. */
#define PUT_WORD(w)                                                                       \
    do {                                                                                  \
        if (out_end - out >= 8) {                                                         \
            *(csx_u64 *)out = (w);                                                        \
            out += 8;                                                                     \
        } else {                                                                          \
            k.used = out - k.buf;                                                         \
            long e_ = emit_bytes(&k, (w), 8);                                             \
            if (e_ < 0)                                                                   \
                return e_;                                                                \
            out = k.buf + k.used;                                                         \
        }                                                                                 \
    } while (0)

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
    const csx_u32 *runs_end = runs + nruns;
    csx_u8 *out = k.buf, *out_end = k.buf + k.cap;
    /* The bitmap is built a 64-bit word at a time: `acc` holds the current word's first
     * `acc_bits` (0..63) bits. A run that ends inside the word costs a shift and an or;
     * one that reaches past it completes the word, stores whole words of its value, and
     * starts the next word with its remainder. Runs alternate zeros and ones (`fill`),
     * zeros first; after them, the bits left to `nbits` are a last run of zeros. */
    csx_u64 left = nbits, acc = 0, acc_bits = 0, fill = ~0UL;
    for (const csx_u32 *p = runs;; p++) {
        csx_u64 len;
        if (p < runs_end) {
            len = *p;
            if (len > left)
                return CSX_EINVAL;
            fill = ~fill;
        } else {
            len = left;
            fill = 0;
        }
        left -= len;
        if (len < 64 - acc_bits) {
            acc |= (fill & ((1UL << len) - 1)) << acc_bits;
            acc_bits += len;
        } else {
            acc |= fill << acc_bits;
            len -= 64 - acc_bits;
            PUT_WORD(acc);
            while (len >= 64) {
                PUT_WORD(fill);
                len -= 64;
            }
            acc = fill & ((1UL << len) - 1);
            acc_bits = len;
        }
        if (p >= runs_end)
            break;
    }
    k.used = out - k.buf;
    long e;
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
