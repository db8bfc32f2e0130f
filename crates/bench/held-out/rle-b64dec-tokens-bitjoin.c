/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/rle-b64dec-tokens-bitjoin.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* Run-length decoding: (count, byte) pairs, count 1..8, expanded into a 256-byte stack
   buffer; each full buffer is folded into a hash. */
u64 rle(void *mem, u64 len) {
    const u8 *in = mem;
    u8 out[256];
    u32 fill = 0;
    u64 h = 1469598103934665603ULL;
    for (u64 i = 0; i + 1 < len; i += 2) {
        u32 count = (in[i] & 7) + 1;
        u8 v = in[i + 1];
        for (u32 k = 0; k < count; k++) {
            out[fill++] = v;
            if (fill == sizeof(out)) {
                for (u32 j = 0; j < sizeof(out); j += 8)
                    h = (h ^ *(const u64 *)&out[j]) * 1099511628211ULL;
                fill = 0;
            }
        }
    }
    return h ^ fill;
}

static const u8 B64[64] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Base64 decoding of the input's bytes mapped onto the alphabet (byte & 63 picks the
   character, so every input is valid), through a reverse table built on the stack;
   sums the decoded bytes with their positions. */
u64 b64dec(void *mem, u64 len) {
    const u8 *in = mem;
    u8 rev[256];
    for (u32 i = 0; i < 256; i++)
        rev[i] = 0xff;
    for (u32 i = 0; i < 64; i++)
        rev[B64[i]] = (u8)i;
    u64 sum = 0;
    u64 pos = 0;
    for (u64 i = 0; i + 3 < len; i += 4) {
        u32 a = rev[B64[in[i] & 63]];
        u32 b = rev[B64[in[i + 1] & 63]];
        u32 c = rev[B64[in[i + 2] & 63]];
        u32 d = rev[B64[in[i + 3] & 63]];
        u32 w = a << 18 | b << 12 | c << 6 | d;
        sum += (w >> 16) * (pos + 1) + ((w >> 8) & 0xff) * (pos + 2) + (w & 0xff) * (pos + 3);
        pos += 3;
    }
    return sum;
}

/* A small tokenizer as a state machine over the bytes (mapped to a few classes):
   counts numbers, identifiers and comments, and sums the numbers' values. */
u64 tokens(void *mem, u64 len) {
    const u8 *in = mem;
    enum { START, NUM, IDENT, COMMENT } st = START;
    u64 nums = 0, idents = 0, comments = 0, value = 0, total = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = in[i] % 40;
        int digit = c < 10;
        int alpha = c >= 10 && c < 30;
        int hash = c == 30;
        int nl = c == 31;
        switch (st) {
        case START:
            if (digit) {
                st = NUM;
                value = c;
                nums++;
            } else if (alpha) {
                st = IDENT;
                idents++;
            } else if (hash) {
                st = COMMENT;
                comments++;
            }
            break;
        case NUM:
            if (digit) {
                value = value * 10 + c;
            } else {
                total += value;
                st = hash ? COMMENT : alpha ? IDENT : START;
                comments += hash;
                idents += alpha;
            }
            break;
        case IDENT:
            if (!digit && !alpha)
                st = hash ? (comments++, COMMENT) : START;
            break;
        case COMMENT:
            if (nl)
                st = START;
            break;
        }
    }
    return total + (nums << 40) + (idents << 20) + comments;
}

/* Two bitsets (the input's halves) joined: the popcount of their AND, OR and XOR per
   64-bit word, with a software popcount, weighted by the word's index. */
static u64 pop64(u64 x) {
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (x * 0x0101010101010101ULL) >> 56;
}

u64 bitjoin(void *mem, u64 len) {
    const u64 *a = mem;
    u64 n = len / 16;
    const u64 *b = a + n;
    u64 both = 0, either = 0, diff = 0;
    for (u64 i = 0; i < n; i++) {
        both += pop64(a[i] & b[i]) * (i & 15);
        either += pop64(a[i] | b[i]);
        diff += pop64(a[i] ^ b[i]);
    }
    return both << 32 | either << 16 | diff;
}
