/* A held-out kernel set: written before it was measured, never tuned for.
   Run: `csx bench vm --kernels crates/bench/held-out/rle-base64-lexer-popcount.c`.
   Each kernel is `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* Run-length decoding: each (count, byte) pair expands to (count & 15) + 1 copies of the
   byte into a 64-byte stack buffer; every full buffer is folded into an FNV-style hash. */
u64 rle(void *mem, u64 len) {
    const u8 *in = mem;
    u8 out[64];
    u32 fill = 0;
    u64 h = 14695981039346656037ull;
    for (u64 i = 0; i + 1 < len; i += 2) {
        u32 n = (in[i] & 15) + 1;
        u8 v = in[i + 1];
        for (u32 k = 0; k < n; k++) {
            out[fill++] = v;
            if (fill == 64) {
                for (u32 j = 0; j < 64; j += 4)
                    h = (h ^ (out[j] | (u32)out[j + 1] << 8)) * 1099511628211ull;
                fill = 0;
            }
        }
    }
    return h ^ fill;
}

/* The base64 alphabet's values, 0xff for any other byte. */
static const u8 b64[256] = {
    ['A'] = 0,  ['B'] = 1,  ['C'] = 2,  ['D'] = 3,  ['E'] = 4,  ['F'] = 5,  ['G'] = 6,
    ['H'] = 7,  ['I'] = 8,  ['J'] = 9,  ['K'] = 10, ['L'] = 11, ['M'] = 12, ['N'] = 13,
    ['O'] = 14, ['P'] = 15, ['Q'] = 16, ['R'] = 17, ['S'] = 18, ['T'] = 19, ['U'] = 20,
    ['V'] = 21, ['W'] = 22, ['X'] = 23, ['Y'] = 24, ['Z'] = 25, ['a'] = 26, ['b'] = 27,
    ['c'] = 28, ['d'] = 29, ['e'] = 30, ['f'] = 31, ['g'] = 32, ['h'] = 33, ['i'] = 34,
    ['j'] = 35, ['k'] = 36, ['l'] = 37, ['m'] = 38, ['n'] = 39, ['o'] = 40, ['p'] = 41,
    ['q'] = 42, ['r'] = 43, ['s'] = 44, ['t'] = 45, ['u'] = 46, ['v'] = 47, ['w'] = 48,
    ['x'] = 49, ['y'] = 50, ['z'] = 51, ['0'] = 52, ['1'] = 53, ['2'] = 54, ['3'] = 55,
    ['4'] = 56, ['5'] = 57, ['6'] = 58, ['7'] = 59, ['8'] = 60, ['9'] = 61, ['+'] = 62,
    ['/'] = 63,
};

/* Base64 decoding of the input's 7-bit characters (others skipped, as a lenient decoder
   skips line breaks): every four sextets give three bytes, summed with their position. */
u64 base64(void *mem, u64 len) {
    const u8 *in = mem;
    u32 acc = 0, got = 0;
    u64 sum = 0, pos = 0;
    for (u64 i = 0; i < len; i++) {
        u8 v = b64[in[i] & 0x7f];
        if (v == 0xff)
            continue;
        acc = acc << 6 | v;
        if (++got == 4) {
            sum += (u64)(acc >> 16) * (pos + 1) + (u64)((acc >> 8) & 0xff) * (pos + 2) +
                   (u64)(acc & 0xff) * (pos + 3);
            pos += 3;
            acc = 0;
            got = 0;
        }
    }
    return sum ^ pos;
}

/* A small lexer: the bytes (low 7 bits) as text, counting identifiers, numbers, quoted
   strings and operators, with a state per token kind. */
u64 lexer(void *mem, u64 len) {
    enum { START, IDENT, NUMBER, STRING, ESCAPE } state = START;
    const u8 *in = mem;
    u64 idents = 0, numbers = 0, strings = 0, ops = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = in[i] & 0x7f;
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        int digit = c >= '0' && c <= '9';
        switch (state) {
        case IDENT:
            if (alpha || digit)
                continue;
            state = START;
            break;
        case NUMBER:
            if (digit)
                continue;
            state = START;
            break;
        case STRING:
            if (c == '\\')
                state = ESCAPE;
            else if (c == '"')
                state = START;
            continue;
        case ESCAPE:
            state = STRING;
            continue;
        default:
            break;
        }
        if (alpha) {
            idents++;
            state = IDENT;
        } else if (digit) {
            numbers++;
            state = NUMBER;
        } else if (c == '"') {
            strings++;
            state = STRING;
        } else if (c == '+' || c == '-' || c == '*' || c == '/' || c == '=' || c == '<') {
            ops++;
        }
    }
    return idents << 48 | numbers << 32 | strings << 16 | ops;
}

/* Population count of a bitset and of its intersection with the bitset shifted by one
   word (u64 words, SWAR counting). */
static u64 pop(u64 x) {
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (x * 0x0101010101010101ull) >> 56;
}

u64 popcount(void *mem, u64 len) {
    const u64 *w = mem;
    u64 n = len / 8, ones = 0, both = 0;
    for (u64 i = 0; i < n; i++) {
        ones += pop(w[i]);
        if (i > 0)
            both += pop(w[i] & w[i - 1]);
    }
    return ones << 32 | both;
}
