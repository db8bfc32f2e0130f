/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/satsum-revblk-ringmax.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

/* A small out-of-line helper per element (a user's `static` function kept apart). */
__attribute__((noinline)) static u64 sat_add(u64 a, u64 b, u64 cap) {
    u64 s = a + b;
    return s > cap ? cap : s;
}

u64 satsum(void *mem, u64 len) {
    const u32 *w = mem;
    u64 acc = 0;
    for (u64 i = 0; i < len / 4; i++)
        acc = sat_add(acc - (acc >> 3), w[i] >> 8, 0x7fffffffULL);
    return acc;
}

/* Reverse 32-word blocks on the stack with two walking pointers, then fold them. */
u64 revblk(void *mem, u64 len) {
    const u32 *w = mem;
    u32 buf[32];
    u64 h = 0;
    for (u64 b = 0; b + 32 <= len / 4; b += 32) {
        for (int i = 0; i < 32; i++)
            buf[i] = w[b + i];
        u32 *lo = buf, *hi = buf + 31;
        while (lo < hi) {
            u32 t = *lo;
            *lo++ = *hi;
            *hi-- = t;
        }
        for (int i = 0; i < 32; i += 5)
            h = h * 131 + buf[i];
    }
    return h;
}

/* Running maximum of 8-byte windows kept in a small stack ring, indexed by data. */
u64 ringmax(void *mem, u64 len) {
    const u8 *p = mem;
    u8 ring[64] = {0};
    u64 sum = 0;
    for (u64 i = 0; i < len; i++) {
        u8 *slot = &ring[p[i] & 63];
        if (p[i] > *slot)
            *slot = p[i];
        sum += *slot;
    }
    return sum;
}
