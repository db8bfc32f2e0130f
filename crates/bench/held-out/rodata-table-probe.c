/*
 * The probe kernel of the peer comparison, as a `csx bench vm --kernels` file: a
 * data-indexed load from a small `.rodata` table (clang keeps the `lddw` of the
 * table inside the loop; both indexes are bounded by a mask and a shift).
 * `u64 NAME(void *mem, u64 len)` over 64 KiB of random bytes.
 */
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

static const u32 lut[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

u64 lookup(void *mem, u64 len) {
    const u8 *p = mem;
    u64 s = 0;
    for (u64 i = 0; i < len; i++)
        s += lut[p[i] & 15] * lut[p[i] >> 4];
    return s;
}
