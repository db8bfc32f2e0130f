/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/words-dots-prefix-fir.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* Words: runs of bytes that are not ASCII space, tab or newline. */
u64 words(void *mem, u64 len) {
    const u8 *b = mem;
    u64 n = 0;
    int in_word = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = b[i] & 0x7f;
        int space = c == ' ' || c == '\t' || c == '\n';
        if (!space && !in_word)
            n++;
        in_word = !space;
    }
    return n;
}

/* Dot product of the first half's bytes with the second half's. */
u64 dot8(void *mem, u64 len) {
    const u8 *a = mem;
    const u8 *b = a + len / 2;
    u64 s = 0;
    for (u64 i = 0; i < len / 2; i++)
        s += (u64)a[i] * b[i];
    return s;
}

/* Prefix sums of u32 words in blocks of 64 kept on the stack, folded block by block. */
u64 prefix(void *mem, u64 len) {
    const u32 *w = mem;
    u64 n = len / 4 / 64;
    u32 acc[64];
    u64 h = 0;
    for (u64 blk = 0; blk < n; blk++) {
        u32 run = 0;
        for (int i = 0; i < 64; i++) {
            run += w[blk * 64 + i] >> 8;
            acc[i] = run;
        }
        for (int i = 0; i < 64; i += 8)
            h = h * 31 + acc[i];
    }
    return h;
}

/* A 64-bit xorshift mix of every u64, summed. */
u64 mix64(void *mem, u64 len) {
    const u64 *w = mem;
    u64 s = 0;
    for (u64 i = 0; i < len / 8; i++) {
        u64 x = w[i];
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 29;
        s += x;
    }
    return s;
}

/* The longest strictly increasing run of u16 values. */
u64 uprun(void *mem, u64 len) {
    const u16 *h = mem;
    u64 best = 0, cur = 1;
    for (u64 i = 1; i < len / 2; i++) {
        if (h[i] > h[i - 1]) {
            cur++;
            if (cur > best)
                best = cur;
        } else {
            cur = 1;
        }
    }
    return best;
}

/* A 3-tap filter over i16 samples, counting outputs above a threshold. */
u64 fir3(void *mem, u64 len) {
    const short *x = mem;
    u64 above = 0;
    for (u64 i = 2; i < len / 2; i++) {
        int y = x[i] * 3 + x[i - 1] * 5 - x[i - 2] * 2;
        above += y > 40000;
    }
    return above;
}
