/*
 * A held-out kernel set written in full before any of it was measured (none tuned for,
 * none edited after measuring): `csx bench vm --kernels` this file. Each kernel is
 * `u64 NAME(void *mem, u64 len)` over 64 KiB of seeded random bytes (read-only); the
 * bench checks every engine's result against the native build's.
 *
 * Shapes, none of them in an earlier set: a bytecode interpreter loop (a switch on the
 * opcode, an operand stack on the stack), Knuth-Morris-Pratt search (a failure table on
 * the stack, an index that moves backwards), a move-to-front transform (a linear search
 * and a shift of a stack table), union-find with path halving (data-dependent pointer
 * chasing in a stack array), binary GCD (data-dependent inner loops on registers), a
 * bit-by-bit integer square root, content-defined chunking with a polynomial rolling
 * hash (a window that reads behind the cursor), and the rule-110 cellular automaton on a
 * 512-bit ring of stack words (neighbour bits carried across words).
 */
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

/* A small stack machine whose program is the input: the top 3 bits of a byte are the
   opcode, the low 5 an operand. Opcode 7 jumps back while the top of stack is odd, a
   bounded number of times. Returns the steps run and the final stack, mixed. */
u64 stackvm(void *mem, u64 len) {
    const u8 *code = mem;
    u64 st[16];
    for (u32 i = 0; i < 16; i++)
        st[i] = i;
    u32 sp = 0;
    u64 budget = len / 8;
    u64 steps = 0;
    u64 pc = 0;
    while (pc < len) {
        u8 ins = code[pc++];
        u32 arg = ins & 31;
        u64 top = st[sp & 15];
        switch (ins >> 5) {
        case 0:
            sp++;
            st[sp & 15] = arg;
            break;
        case 1:
            sp--;
            st[sp & 15] += top;
            break;
        case 2:
            sp--;
            st[sp & 15] *= top | 1;
            break;
        case 3:
            st[sp & 15] = top ^ (top >> arg);
            break;
        case 4:
            sp++;
            st[sp & 15] = top;
            break;
        case 5: {
            u64 under = st[(sp - 1) & 15];
            st[(sp - 1) & 15] = top;
            st[sp & 15] = under;
            break;
        }
        case 6: {
            u32 r = arg | 1;
            st[sp & 15] = (top << r) | (top >> (64 - r));
            break;
        }
        default:
            if (budget != 0 && (top & 1) != 0 && arg != 0) {
                budget--;
                pc = pc > arg + 1 ? pc - arg - 1 : 0;
            }
            break;
        }
        steps++;
    }
    u64 h = steps;
    for (u32 i = 0; i < 16; i++)
        h = h * 31 + st[i];
    return h;
}

/* Knuth-Morris-Pratt: the first 6 bytes (over a 4-symbol alphabet, byte & 3) are the
   pattern; counts its matches in the rest and sums their end positions. */
u64 kmpcount(void *mem, u64 len) {
    const u8 *p = mem;
    if (len < 12)
        return 0;
    u8 pat[6];
    u8 fail[6];
    for (u32 i = 0; i < 6; i++)
        pat[i] = p[i] & 3;
    fail[0] = 0;
    u32 k = 0;
    for (u32 i = 1; i < 6; i++) {
        while (k > 0 && pat[i] != pat[k])
            k = fail[k - 1];
        if (pat[i] == pat[k])
            k++;
        fail[i] = (u8)k;
    }
    u64 count = 0;
    u64 ends = 0;
    k = 0;
    for (u64 i = 6; i < len; i++) {
        u8 c = p[i] & 3;
        while (k > 0 && c != pat[k])
            k = fail[k - 1];
        if (c == pat[k])
            k++;
        if (k == 6) {
            count++;
            ends += i;
            k = fail[5];
        }
    }
    return count << 40 ^ ends;
}

/* Move-to-front coding of the bytes reduced to 32 symbols: a linear search of a
   32-byte stack table, then a shift of the entries before the match. */
u64 mtf(void *mem, u64 len) {
    const u8 *p = mem;
    u8 table[32];
    for (u32 i = 0; i < 32; i++)
        table[i] = (u8)i;
    u64 sum = 0;
    for (u64 i = 0; i < len; i++) {
        u8 c = p[i] & 31;
        u32 j = 0;
        while (j < 31 && table[j] != c)
            j++;
        for (u32 k = j; k > 0; k--)
            table[k] = table[k - 1];
        table[0] = c;
        sum = sum * 33 + j;
    }
    return sum;
}

static u32 uf_root(u8 *parent, u32 x) {
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* Union-find over 256 elements in a stack array: each 512-byte block is 256 pairs to
   join (path halving, the smaller root wins); sums the components left per block. */
u64 unionfind(void *mem, u64 len) {
    const u8 *p = mem;
    u8 parent[256];
    u64 total = 0;
    for (u64 base = 0; base + 512 <= len; base += 512) {
        for (u32 i = 0; i < 256; i++)
            parent[i] = (u8)i;
        u32 comps = 256;
        for (u32 i = 0; i < 512; i += 2) {
            u32 a = uf_root(parent, p[base + i]);
            u32 b = uf_root(parent, p[base + i + 1]);
            if (a != b) {
                if (a < b)
                    parent[b] = (u8)a;
                else
                    parent[a] = (u8)b;
                comps--;
            }
        }
        total = total * 257 + comps;
    }
    return total;
}

/* Binary GCD (Stein) of consecutive pairs of 32-bit words; sums the GCDs. */
u64 gcdpairs(void *mem, u64 len) {
    const u32 *w = mem;
    u64 n = len / 4;
    u64 sum = 0;
    for (u64 i = 0; i + 1 < n; i += 2) {
        u32 a = w[i];
        u32 b = w[i + 1];
        if (a == 0 || b == 0) {
            sum += a | b;
            continue;
        }
        u32 shift = 0;
        while (((a | b) & 1) == 0) {
            a >>= 1;
            b >>= 1;
            shift++;
        }
        while ((a & 1) == 0)
            a >>= 1;
        do {
            while ((b & 1) == 0)
                b >>= 1;
            if (a > b) {
                u32 t = a;
                a = b;
                b = t;
            }
            b -= a;
        } while (b != 0);
        sum += (u64)a << shift;
    }
    return sum;
}

/* Integer square root of every 32-bit word, one result bit per step; sums the roots. */
u64 isqrtsum(void *mem, u64 len) {
    const u32 *w = mem;
    u64 sum = 0;
    for (u64 i = 0; i < len / 4; i++) {
        u32 x = w[i];
        u32 r = 0;
        u32 bit = 1u << 30;
        while (bit > x)
            bit >>= 2;
        while (bit != 0) {
            if (x >= r + bit) {
                x -= r + bit;
                r = (r >> 1) + bit;
            } else {
                r >>= 1;
            }
            bit >>= 2;
        }
        sum += r;
    }
    return sum;
}

/* Content-defined chunking: a polynomial rolling hash over a 32-byte window (the byte
   leaving the window is read 32 behind the cursor); a chunk ends where the top 9 bits
   of the hash are zero and the chunk is at least 64 bytes. Mixes the chunk lengths. */
u64 rollchunk(void *mem, u64 len) {
    const u8 *p = mem;
    const u64 base = 0x100000001b3ULL;
    u64 out_weight = 1;
    for (u32 i = 0; i < 32; i++)
        out_weight *= base;
    u64 h = 0;
    u64 chunks = 0;
    u64 last = 0;
    u64 acc = 0;
    for (u64 i = 0; i < len; i++) {
        h = h * base + p[i] + 1;
        if (i >= 32) {
            h -= out_weight * (p[i - 32] + 1);
            if (i - last >= 64 && (h >> 55) == 0) {
                chunks++;
                acc = acc * 131 + (i - last);
                last = i;
            }
        }
    }
    return acc ^ chunks << 48 ^ (len - last);
}

/* Rule 110 on a 512-bit ring of 8 stack words: each 64-byte block is XORed in (one bit
   per byte), then 4 generations run, each bit's neighbours crossing word boundaries. */
u64 rule110(void *mem, u64 len) {
    const u64 *w = mem;
    u64 s[8];
    u64 t[8];
    for (u32 k = 0; k < 8; k++)
        s[k] = 0;
    u64 mix = 0;
    for (u64 b = 0; b + 8 <= len / 8; b += 8) {
        for (u32 k = 0; k < 8; k++)
            s[k] ^= w[b + k] & 0x0101010101010101ULL;
        for (u32 g = 0; g < 4; g++) {
            for (u32 k = 0; k < 8; k++) {
                u64 c = s[k];
                u64 l = (c >> 1) | (s[(k + 1) & 7] << 63);
                u64 r = (c << 1) | (s[(k + 7) & 7] >> 63);
                t[k] = (c ^ r) | (c & ~l);
            }
            for (u32 k = 0; k < 8; k++)
                s[k] = t[k];
        }
        mix = mix * 3 + (s[(b / 8) & 7] & 0xffff);
    }
    u64 h = mix;
    for (u32 k = 0; k < 8; k++)
        h = h * 1000003 ^ s[k];
    return h;
}
