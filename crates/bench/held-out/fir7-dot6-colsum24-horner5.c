/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/fir7-dot6-colsum24-horner5.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef short i16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

/* A 7-tap FIR filter over i16 samples, taps fixed: the filtered signal's sum of absolute
   values. */
u64 fir7(void *mem, u64 len) {
    const i16 *x = mem;
    u64 n = len / 2;
    static const i32 taps[7] = {3, -7, 19, 41, 19, -7, 3};
    u64 total = 0;
    for (u64 i = 0; i + 7 <= n; i++) {
        i64 acc = 0;
        for (u32 t = 0; t < 7; t++)
            acc += (i64)taps[t] * x[i + t];
        total += (u64)(acc < 0 ? -acc : acc);
    }
    return total;
}

/* Records of 12 u32: the dot product of each record's first and second half, and how
   many are positive as signed. */
u64 dot6(void *mem, u64 len) {
    const u32 *r = mem;
    u64 recs = len / 48;
    u64 sum = 0, positive = 0;
    for (u64 i = 0; i < recs; i++) {
        const u32 *a = r + 12 * i;
        u64 d = 0;
        for (int k = 5; k >= 0; k--)
            d += (u64)a[k] * a[k + 6];
        sum ^= d + i;
        positive += (i64)d > 0;
    }
    return sum + positive;
}

/* Column sums of a matrix of 24-byte rows into a stack array, then the sums' weighted
   total (a loop that writes the stack). */
u64 colsum24(void *mem, u64 len) {
    const u8 *m = mem;
    u64 rows = len / 24;
    u32 cols[24] = {0};
    for (u64 i = 0; i < rows; i++)
        for (u32 c = 0; c < 24; c++)
            cols[c] += m[i * 24 + c];
    u64 h = 0;
    for (u32 c = 0; c < 24; c++)
        h = h * 31 + cols[c];
    return h;
}

/* Horner evaluation of a degree-5 polynomial (coefficients from the first 24 bytes) at
   every following u32, mod 2^64, summed. */
u64 horner5(void *mem, u64 len) {
    const u32 *w = mem;
    u64 n = len / 4;
    u64 total = 0;
    for (u64 i = 6; i < n; i++) {
        u64 x = w[i];
        u64 y = 0;
        for (int k = 0; k < 6; k++)
            y = y * x + w[k];
        total += y;
    }
    return total;
}
