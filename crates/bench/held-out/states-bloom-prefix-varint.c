/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/states-bloom-prefix-varint.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* A byte state machine: counts quoted strings, escapes inside them, and words outside
   them, reading '"' for bytes below 8, '\\' for 8-11 and a space for 12-63. */
u64 states(void *mem, u64 len) {
    const u8 *in = mem;
    u32 state = 0; /* 0 between words, 1 in a word, 2 in a string, 3 after an escape */
    u64 words = 0, strings = 0, escapes = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = in[i];
        u32 cls = c < 8 ? 0 : c < 12 ? 1 : c < 64 ? 2 : 3;
        switch (state) {
        case 0:
            if (cls == 0) {
                state = 2;
                strings++;
            } else if (cls == 3) {
                state = 1;
                words++;
            }
            break;
        case 1:
            if (cls == 0) {
                state = 2;
                strings++;
            } else if (cls == 2) {
                state = 0;
            }
            break;
        case 2:
            if (cls == 0)
                state = 0;
            else if (cls == 1)
                state = 3;
            break;
        default:
            escapes++;
            state = 2;
            break;
        }
    }
    return words * 1000003 + strings * 1009 + escapes;
}

/* A bloom filter of 2048 bits in a stack array: the first sixteenth of the input's u32
   words are inserted with three hashes, then every later word is probed. */
u64 bloom(void *mem, u64 len) {
    const u32 *w = mem;
    u64 n = len / 4;
    u64 bits[32];
    for (int i = 0; i < 32; i++)
        bits[i] = 0;
    for (u64 i = 0; i < n / 16; i++) {
        u32 h = w[i] * 0x9e3779b1u;
        for (int k = 0; k < 3; k++) {
            u32 b = (h >> (k * 9)) & 2047;
            bits[b >> 6] |= 1ull << (b & 63);
        }
    }
    u64 hits = 0;
    for (u64 i = n / 16; i < n; i++) {
        u32 h = (w[i] & 0xfff0ffffu) * 0x9e3779b1u;
        int all = 1;
        for (int k = 0; k < 3; k++) {
            u32 b = (h >> (k * 9)) & 2047;
            if (!(bits[b >> 6] & (1ull << (b & 63)))) {
                all = 0;
                break;
            }
        }
        hits += all;
    }
    return hits;
}

/* Prefix sums over u32 words in blocks of 32 kept on the stack; each block's sums are
   then scanned for the first one above half the block's total. */
u64 prefix(void *mem, u64 len) {
    const u32 *w = mem;
    u64 n = len / 4;
    u32 sums[32];
    u64 out = 0;
    for (u64 base = 0; base + 32 <= n; base += 32) {
        u32 acc = 0;
        for (int i = 0; i < 32; i++) {
            acc += w[base + i] >> 8;
            sums[i] = acc;
        }
        u32 half = acc / 2;
        int at = 0;
        while (at < 31 && sums[at] <= half)
            at++;
        out = out * 31 + (u64)at + sums[at];
    }
    return out;
}

/* LEB128 varints: decodes the input as a stream of unsigned varints (at most ten bytes
   each) and returns a checksum of the values and their count. */
u64 varint(void *mem, u64 len) {
    const u8 *in = mem;
    u64 i = 0, count = 0, sum = 0;
    while (i < len) {
        u64 v = 0;
        u32 shift = 0;
        while (i < len && shift < 70) {
            u8 b = in[i++];
            v |= (u64)(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80))
                break;
        }
        sum = (sum ^ v) * 0x100000001b3ull;
        count++;
    }
    return sum + count;
}
