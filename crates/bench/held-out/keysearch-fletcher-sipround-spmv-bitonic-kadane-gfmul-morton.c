/*
 * A held-out kernel set written in full before any of it was measured (none tuned for,
 * none edited after measuring): `csx bench vm --kernels` this file. Each kernel is
 * `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes (read-only); the
 * bench checks every engine's result against the native build's.
 *
 * Shapes, none of them in an earlier set: a binary search of a sorted table of 64 words
 * built on the stack (a data-dependent index halving each step), Fletcher-64 over 32-bit
 * words (two sums reduced modulo 2^32 - 1 by compare and subtract), SipHash-style
 * add-rotate-xor rounds over 64-bit words (four state words, rotates), a sparse
 * matrix-vector product in compressed rows (row lengths and column indexes read from the
 * data, the vector on the stack), a bitonic sorting network over 16 words on the stack
 * (three nested loops, the partner an XOR of the index), Kadane's maximum subarray over
 * signed 16-bit values (signed compares and a running maximum), GF(2^8) multiplication
 * bit by bit (eight steps with a conditional reduction), and Morton codes (the bits of
 * two 16-bit values interleaved by masks and shifts).
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef short i16;
typedef long long i64;

/* A table of 64 ascending keys (running sums of the first 64 bytes, each plus one) on
 * the stack, then every later 32-bit word reduced below the last key and looked up by
 * binary search: the sum of the positions found. */
u64 keysearch(void *mem, u64 len) {
    const u8 *p = mem;
    if (len < 64)
        return 0;
    u32 keys[64];
    u32 run = 0;
    for (int k = 0; k < 64; k++) {
        run += (u32)p[k] + 1;
        keys[k] = run;
    }
    u64 total = 0;
    for (u64 i = 64; i + 4 <= len; i += 4) {
        u32 w = (u32)p[i] | (u32)p[i + 1] << 8 | (u32)p[i + 2] << 16 | (u32)p[i + 3] << 24;
        u32 want = w % run;
        u32 lo = 0, hi = 64;
        while (lo < hi) {
            u32 mid = (lo + hi) >> 1;
            if (keys[mid] < want)
                lo = mid + 1;
            else
                hi = mid;
        }
        total += lo;
    }
    return total;
}

/* Fletcher-64: 32-bit little-endian words added into two sums modulo 2^32 - 1. */
u64 fletcher(void *mem, u64 len) {
    const u8 *p = mem;
    u64 a = 0, b = 0;
    const u64 m = 0xffffffffULL;
    for (u64 i = 0; i + 4 <= len; i += 4) {
        u64 w = (u64)p[i] | (u64)p[i + 1] << 8 | (u64)p[i + 2] << 16 | (u64)p[i + 3] << 24;
        a += w;
        if (a >= m)
            a -= m;
        b += a;
        if (b >= m)
            b -= m;
    }
    return b << 32 | a;
}

static inline u64 rotl(u64 x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* SipHash-style rounds: each 64-bit word is xored into the state, two rounds run, and
 * it is xored in again; the four state words folded at the end. */
u64 sipround(void *mem, u64 len) {
    const u8 *p = mem;
    u64 v0 = 0x736f6d6570736575ULL, v1 = 0x646f72616e646f6dULL;
    u64 v2 = 0x6c7967656e657261ULL, v3 = 0x7465646279746573ULL;
    for (u64 i = 0; i + 8 <= len; i += 8) {
        u64 m = 0;
        for (int k = 7; k >= 0; k--)
            m = m << 8 | p[i + k];
        v3 ^= m;
        for (int r = 0; r < 2; r++) {
            v0 += v1;
            v1 = rotl(v1, 13);
            v1 ^= v0;
            v0 = rotl(v0, 32);
            v2 += v3;
            v3 = rotl(v3, 16);
            v3 ^= v2;
            v0 += v3;
            v3 = rotl(v3, 21);
            v3 ^= v0;
            v2 += v1;
            v1 = rotl(v1, 17);
            v1 ^= v2;
            v2 = rotl(v2, 32);
        }
        v0 ^= m;
    }
    return v0 ^ v1 ^ v2 ^ v3;
}

/* A sparse matrix times a vector, rows in compressed form: the vector is 64 words built
 * from the first 256 bytes (on the stack); then each row is a length byte (0-7 entries),
 * and each entry a column byte (masked to 64) and a value byte. The row results are
 * mixed into one sum. */
u64 spmv(void *mem, u64 len) {
    const u8 *p = mem;
    if (len < 256)
        return 0;
    u32 x[64];
    for (int k = 0; k < 64; k++)
        x[k] = (u32)p[4 * k] | (u32)p[4 * k + 1] << 8;
    u64 i = 256, rows = 0, mix = 0;
    while (i < len) {
        u32 n = p[i] & 7;
        i++;
        if (i + 2 * n > len)
            break;
        u64 y = 0;
        for (u32 e = 0; e < n; e++) {
            u32 col = p[i] & 63;
            u32 val = p[i + 1];
            y += (u64)val * x[col];
            i += 2;
        }
        rows++;
        mix = mix * 31 + y;
    }
    return mix ^ rows;
}

/* Blocks of 16 32-bit words copied to the stack and sorted by a bitonic network (compare
 * and exchange with the partner `i ^ j`, the direction from `i & k`); the sorted blocks'
 * words weighted by position and summed. */
u64 bitonic(void *mem, u64 len) {
    const u8 *p = mem;
    u32 a[16];
    u64 total = 0;
    for (u64 base = 0; base + 64 <= len; base += 64) {
        for (int k = 0; k < 16; k++) {
            const u8 *q = p + base + 4 * k;
            a[k] = (u32)q[0] | (u32)q[1] << 8 | (u32)q[2] << 16 | (u32)q[3] << 24;
        }
        for (u32 k = 2; k <= 16; k <<= 1) {
            for (u32 j = k >> 1; j > 0; j >>= 1) {
                for (u32 i = 0; i < 16; i++) {
                    u32 l = i ^ j;
                    if (l > i) {
                        int up = (i & k) == 0;
                        if ((a[i] > a[l]) == up) {
                            u32 t = a[i];
                            a[i] = a[l];
                            a[l] = t;
                        }
                    }
                }
            }
        }
        for (int k = 0; k < 16; k++)
            total += (u64)a[k] * (u64)(k + 1);
    }
    return total;
}

/* Kadane's maximum subarray over signed 16-bit values, restarted every 1,024 values;
 * the maxima summed. */
u64 kadane(void *mem, u64 len) {
    const u8 *p = mem;
    i64 total = 0;
    i64 best = 0, cur = 0;
    u64 count = 0;
    for (u64 i = 0; i + 2 <= len; i += 2) {
        i16 v = (i16)((u16)p[i] | (u16)p[i + 1] << 8);
        cur += v;
        if (cur < v)
            cur = v;
        if (cur > best)
            best = cur;
        if (++count == 1024) {
            total += best;
            best = 0;
            cur = 0;
            count = 0;
        }
    }
    return (u64)(total + best);
}

/* GF(2^8) products (AES's polynomial) of consecutive byte pairs, bit by bit; the products
 * xored together and counted by value class. */
u64 gfmul(void *mem, u64 len) {
    const u8 *p = mem;
    u64 acc = 0, odd = 0;
    for (u64 i = 0; i + 2 <= len; i += 2) {
        u32 a = p[i], b = p[i + 1], r = 0;
        for (int k = 0; k < 8; k++) {
            if (b & 1)
                r ^= a;
            u32 hi = a & 0x80;
            a = (a << 1) & 0xff;
            if (hi)
                a ^= 0x1b;
            b >>= 1;
        }
        acc = (acc << 1 | acc >> 63) ^ r;
        odd += r & 1;
    }
    return acc ^ odd;
}

/* Morton codes: the bits of two 16-bit values interleaved (x in the even bits), by the
 * usual spread of masks and shifts; the codes summed with a rotate. */
u64 morton(void *mem, u64 len) {
    const u8 *p = mem;
    u64 sum = 0;
    for (u64 i = 0; i + 4 <= len; i += 4) {
        u32 x = (u32)p[i] | (u32)p[i + 1] << 8;
        u32 y = (u32)p[i + 2] | (u32)p[i + 3] << 8;
        x = (x | x << 8) & 0x00ff00ff;
        x = (x | x << 4) & 0x0f0f0f0f;
        x = (x | x << 2) & 0x33333333;
        x = (x | x << 1) & 0x55555555;
        y = (y | y << 8) & 0x00ff00ff;
        y = (y | y << 4) & 0x0f0f0f0f;
        y = (y | y << 2) & 0x33333333;
        y = (y | y << 1) & 0x55555555;
        u64 code = x | y << 1;
        sum = (sum << 3 | sum >> 61) + code;
    }
    return sum;
}
