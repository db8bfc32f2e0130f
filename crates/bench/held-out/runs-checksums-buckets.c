/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/runs-checksums-buckets.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* Run-length count: number of runs of equal bytes, and the longest run. */
u64 runs(void *mem, u64 len) {
    const u8 *b = mem;
    u64 count = 0, longest = 0, cur = 0;
    u8 prev = 0;
    for (u64 i = 0; i < len; i++) {
        if (b[i] == prev) {
            cur++;
        } else {
            count++;
            if (cur > longest)
                longest = cur;
            cur = 1;
            prev = b[i];
        }
    }
    return count * 1000003 + longest;
}

/* Adler-32 over the bytes. */
u64 adler(void *mem, u64 len) {
    const u8 *b = mem;
    u32 a = 1, s = 0;
    for (u64 i = 0; i < len; i++) {
        a = (a + b[i]) % 65521;
        s = (s + a) % 65521;
    }
    return ((u64)s << 16) | a;
}

/* A 64-bucket histogram of u16 values' top bits on the stack, then its max bucket. */
u64 bucket16(void *mem, u64 len) {
    const u16 *w = mem;
    u64 n = len / 2;
    u32 h[64];
    for (int k = 0; k < 64; k++)
        h[k] = 0;
    for (u64 i = 0; i < n; i++)
        h[w[i] >> 10] += w[i] & 0xff;
    u64 best = 0;
    for (int k = 0; k < 64; k++)
        if (h[k] > best)
            best = h[k] ^ (u64)k;
    return best;
}

/* Bit population of u64 words by Kernighan's loop, summed. */
u64 popsum(void *mem, u64 len) {
    const u64 *v = mem;
    u64 n = len / 8, total = 0;
    for (u64 i = 0; i < n; i++) {
        u64 x = v[i] & 0x0f0f0f0f0f0f0f0fULL;
        while (x) {
            x &= x - 1;
            total++;
        }
    }
    return total;
}

/* Reverse each 32-byte chunk into a stack buffer and hash it. */
u64 revhash(void *mem, u64 len) {
    const u8 *b = mem;
    u8 buf[32];
    u64 h = 1469598103934665603ULL;
    for (u64 c = 0; c + 32 <= len; c += 32) {
        for (int k = 0; k < 32; k++)
            buf[31 - k] = b[c + k];
        for (int k = 0; k < 32; k += 8) {
            u64 x = 0;
            for (int j = 0; j < 8; j++)
                x = (x << 8) | buf[k + j];
            h = (h ^ x) * 1099511628211ULL;
        }
    }
    return h;
}
