/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/states-bloom-prefix32-varint.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

/* A four-state machine over the bytes (outside a token, in a word, in a number, after a
   backslash); counts the words and numbers it sees end and sums the state transitions. */
u64 states(void *mem, u64 len) {
    const u8 *in = mem;
    u32 state = 0;
    u64 words = 0, numbers = 0, moves = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = in[i] & 127;
        u32 next;
        if (state == 3)
            next = 0;
        else if (c == '\\')
            next = 3;
        else if (c >= '0' && c <= '9')
            next = state == 1 ? 1 : 2;
        else if ((c | 32) >= 'a' && (c | 32) <= 'z')
            next = 1;
        else
            next = 0;
        if (next != state) {
            moves++;
            if (state == 1)
                words++;
            else if (state == 2)
                numbers++;
        }
        state = next;
    }
    return (words << 40) ^ (numbers << 20) ^ moves;
}

/* A 2048-bit Bloom filter on the stack: the first half of the input's u32 keys go in
   (three bit positions each from one multiplicative hash), then every key of the second
   half is probed; returns how many probes hit. */
u64 bloom(void *mem, u64 len) {
    const u32 *keys = mem;
    u64 n = len / 4;
    u64 bits[32];
    for (u32 i = 0; i < 32; i++)
        bits[i] = 0;
    for (u64 i = 0; i < n / 2; i++) {
        u64 h = (u64)keys[i] * 0x9e3779b97f4a7c15ull;
        for (u32 k = 0; k < 3; k++) {
            u32 b = (h >> (20 * k)) & 2047;
            bits[b >> 6] |= 1ull << (b & 63);
        }
    }
    u64 hits = 0;
    for (u64 i = n / 2; i < n; i++) {
        u64 h = (u64)keys[i] * 0x9e3779b97f4a7c15ull;
        u64 all = 1;
        for (u32 k = 0; k < 3; k++) {
            u32 b = (h >> (20 * k)) & 2047;
            all &= bits[b >> 6] >> (b & 63);
        }
        hits += all & 1;
    }
    return hits;
}

/* Inclusive prefix sums of u32 values (mod 2^32) in 64-value stack blocks, each block
   folded into a running digest through a few sampled sums. */
u64 prefix32(void *mem, u64 len) {
    const u32 *v = mem;
    u64 n = len / 4;
    u32 block[64];
    u64 h = 0;
    for (u64 b = 0; b + 64 <= n; b += 64) {
        u32 run = 0;
        for (u32 i = 0; i < 64; i++) {
            run += v[b + i];
            block[i] = run;
        }
        h = (h ^ block[17]) * 1099511628211ull;
        h = (h ^ block[32]) * 1099511628211ull;
        h = (h ^ block[63]) * 1099511628211ull;
    }
    return h;
}

/* LEB128-style varints: 7 bits a byte, the top bit set on all but the last byte of a
   value (at most 10 bytes); sums the values and xors their lengths. */
u64 varint(void *mem, u64 len) {
    const u8 *in = mem;
    u64 sum = 0, lens = 0;
    u64 i = 0;
    while (i < len) {
        u64 v = 0;
        u32 shift = 0;
        u64 start = i;
        while (i < len && shift < 70) {
            u8 c = in[i++];
            v |= (u64)(c & 127) << shift;
            shift += 7;
            if (!(c & 128))
                break;
        }
        sum += v;
        lens = lens * 31 + (i - start);
    }
    return sum ^ lens;
}
