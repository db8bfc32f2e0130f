/*
 * A held-out kernel set written in full before any of it was measured (none tuned for,
 * none edited after measuring): `csx bench vm --kernels` this file. Each kernel is
 * `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes (read-only); the
 * bench checks every engine's result against the native build's.
 *
 * Shapes, none of them in an earlier set: a JSON-like tokenizer (a nesting stack kept as
 * bits in a register, strings with backslash escapes, numbers), a base-N integer parser
 * (the base read from the data, a digit table of 128 bytes on the stack), a sliding-window
 * minimum with a monotonic deque of indices in a stack ring, a bit-reversal permutation
 * of 64-word blocks copied to the stack (swaps of a word with its reversed index), a
 * prefix-code decoder through a 128-entry table built on the stack (a bit reader that
 * refills a byte at a time), one counting-sort pass (a 16-bucket histogram, its prefix
 * sums, then a scatter into a stack buffer), and an 8x8 byte-matrix transpose through a
 * stack tile (strided stores, row reads as words).
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* A tokenizer over a JSON-like alphabet: each byte's low 4 bits pick a character class
   ({ } [ ] " \ : , digits, letters). Counts tokens, the deepest nesting, strings (an
   escape skips the next byte), mismatched closers, and sums the numbers' values. */
u64 jsontok(void *mem, u64 len) {
    const u8 *p = mem;
    u64 nest = 0; /* one bit per level: 1 = object, 0 = array */
    u32 depth = 0;
    u32 deepest = 0;
    u64 tokens = 0;
    u64 strings = 0;
    u64 bad = 0;
    u64 numsum = 0;
    u64 i = 0;
    while (i < len) {
        u32 cls = p[i] & 15;
        i++;
        if (cls == 0 || cls == 2) {
            if (depth < 63) {
                nest = nest << 1 | (cls == 0);
                depth++;
                if (depth > deepest)
                    deepest = depth;
            } else {
                bad++;
            }
            tokens++;
        } else if (cls == 1 || cls == 3) {
            if (depth != 0 && (nest & 1) == (cls == 1)) {
                nest >>= 1;
                depth--;
            } else {
                bad++;
            }
            tokens++;
        } else if (cls == 4) {
            while (i < len) {
                u32 c = p[i] & 15;
                i++;
                if (c == 5)
                    i++;
                else if (c == 4)
                    break;
            }
            strings++;
            tokens++;
        } else if (cls >= 8 && cls <= 11) {
            u64 v = cls - 8;
            while (i < len && (p[i] & 15) >= 8 && (p[i] & 15) <= 11) {
                v = v * 4 + ((p[i] & 15) - 8);
                i++;
            }
            numsum += v;
            tokens++;
        } else if (cls >= 12) {
            tokens++;
        }
    }
    return tokens ^ strings << 20 ^ (u64)deepest << 40 ^ bad << 48 ^ numsum * 7;
}

/* Base-N integers: a header byte picks the base (2 to 36); the digits that follow (0-9,
   a-z, A-Z through a 128-entry stack table of the low 7 bits) below the base make the
   number; the first byte that is not a digit ends it and is the next header. */
u64 basen(void *mem, u64 len) {
    const u8 *p = mem;
    u8 digit[128];
    for (u32 c = 0; c < 128; c++) {
        u8 v = 255;
        if (c >= '0' && c <= '9')
            v = (u8)(c - '0');
        else if (c >= 'a' && c <= 'z')
            v = (u8)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'Z')
            v = (u8)(c - 'A' + 10);
        digit[c] = v;
    }
    u64 sum = 0;
    u64 count = 0;
    u64 i = 0;
    while (i < len) {
        u32 base = 2 + p[i] % 35;
        i++;
        u64 v = 0;
        u32 ndig = 0;
        while (i < len) {
            u32 d = digit[p[i] & 127];
            if (d >= base)
                break;
            v = v * base + d;
            ndig++;
            i++;
        }
        if (ndig != 0) {
            sum += v ^ (v >> 29);
            count++;
        }
    }
    return sum * 31 + count;
}

/* Sliding-window minimum of 16-bit words over a window of 24, with a deque of indices
   (increasing values) in a 32-entry stack ring; sums the minima. */
u64 slidemin(void *mem, u64 len) {
    const u16 *w = mem;
    u64 n = len / 2;
    u32 dq[32];
    u32 head = 0;
    u32 tail = 0;
    u64 sum = 0;
    for (u64 i = 0; i < n; i++) {
        u16 x = w[i];
        while (tail != head && w[dq[(tail - 1) & 31]] >= x)
            tail--;
        dq[tail & 31] = (u32)i;
        tail++;
        if (dq[head & 31] + 24 <= i)
            head++;
        if (i >= 23)
            sum += w[dq[head & 31]];
    }
    return sum;
}

/* Bit-reversal permutation: each 256-byte block is copied to a 64-word stack array,
   every word swapped with the one at its 6-bit reversed index, then hashed in order. */
u64 bitrev(void *mem, u64 len) {
    const u32 *w = mem;
    u32 a[64];
    u64 h = 0;
    for (u64 b = 0; b + 64 <= len / 4; b += 64) {
        for (u32 k = 0; k < 64; k++)
            a[k] = w[b + k];
        for (u32 k = 0; k < 64; k++) {
            u32 r = 0;
            for (u32 bit = 0; bit < 6; bit++)
                r = r << 1 | (k >> bit & 1);
            if (k < r) {
                u32 t = a[k];
                a[k] = a[r];
                a[r] = t;
            }
        }
        for (u32 k = 0; k < 64; k++)
            h = h * 0x100000001b3ULL ^ a[k];
    }
    return h;
}

/* A prefix-code decoder: 29 symbols with code lengths 2,2,3,4,4,5,5,6,6 and twenty of 7
   (a complete code), assigned canonically into a 128-entry table (symbol and length) on
   the stack; the input is read most significant bit first, 7 bits peeked per symbol. */
u64 huffdec(void *mem, u64 len) {
    const u8 *p = mem;
    u8 sym[128];
    u8 bits[128];
    u32 code = 0;
    u32 prev = 2;
    for (u32 s = 0; s < 29; s++) {
        u32 l = s < 2 ? 2 : s < 3 ? 3 : s < 5 ? 4 : s < 7 ? 5 : s < 9 ? 6 : 7;
        code <<= l - prev;
        prev = l;
        u32 first = code << (7 - l);
        for (u32 k = 0; k < (1u << (7 - l)); k++) {
            sym[first + k] = (u8)s;
            bits[first + k] = (u8)l;
        }
        code++;
    }
    u64 acc = 0;
    u32 nbits = 0;
    u64 pos = 0;
    u64 h = 0;
    u64 nsym = 0;
    for (;;) {
        while (nbits < 7 && pos < len) {
            acc = acc << 8 | p[pos++];
            nbits += 8;
        }
        if (nbits < 7)
            break;
        u32 idx = (u32)(acc >> (nbits - 7)) & 127;
        nbits -= bits[idx];
        acc &= (1ULL << nbits) - 1;
        h = h * 37 + sym[idx];
        nsym++;
    }
    return h ^ nsym << 44;
}

/* One counting-sort pass: each 64-byte block is sorted by its bytes' high nibbles (a
   16-bucket histogram on the stack, its exclusive prefix sums, a stable scatter into a
   stack buffer); the sorted block is mixed into the result a word at a time. */
u64 radix(void *mem, u64 len) {
    const u8 *p = mem;
    u32 cnt[16];
    u8 out[64];
    u64 h = 0;
    for (u64 b = 0; b + 64 <= len; b += 64) {
        for (u32 k = 0; k < 16; k++)
            cnt[k] = 0;
        for (u32 k = 0; k < 64; k++)
            cnt[p[b + k] >> 4]++;
        u32 run = 0;
        for (u32 k = 0; k < 16; k++) {
            u32 c = cnt[k];
            cnt[k] = run;
            run += c;
        }
        for (u32 k = 0; k < 64; k++) {
            u8 v = p[b + k];
            out[cnt[v >> 4]++] = v;
        }
        for (u32 k = 0; k < 64; k += 8) {
            u64 word = 0;
            for (u32 j = 0; j < 8; j++)
                word |= (u64)out[k + j] << (8 * j);
            h = (h ^ word) * 0x9e3779b97f4a7c15ULL;
        }
    }
    return h;
}

/* 8x8 byte-matrix transpose: each 64-byte block (8 rows of 8) is written column-wise into
   a stack tile, then the tile's rows are read back as 64-bit words and mixed. */
u64 transpose(void *mem, u64 len) {
    const u8 *p = mem;
    u8 t[64];
    u64 h = 0;
    for (u64 b = 0; b + 64 <= len; b += 64) {
        for (u32 r = 0; r < 8; r++)
            for (u32 c = 0; c < 8; c++)
                t[c * 8 + r] = p[b + r * 8 + c];
        for (u32 r = 0; r < 8; r++) {
            u64 word = 0;
            for (u32 c = 0; c < 8; c++)
                word |= (u64)t[r * 8 + c] << (8 * c);
            h = (h + word) * 0xff51afd7ed558ccdULL ^ (h >> 31);
        }
    }
    return h;
}
