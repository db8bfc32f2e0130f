/*
 * A held-out kernel set for the JIT's check hoisting, written in full before any of it
 * was measured (none tuned for, none edited after measuring): `csx bench vm --kernels`
 * this file. Each is `u64 NAME(void *mem, u64 len)` over 64 KiB of random bytes
 * (read-only). Shapes: a dynamic-programming table row on the stack (nested loops), a
 * binary heap on the stack (sift-down with data-dependent children), a bit reader for
 * Rice codes, decimal formatting into a stack buffer, a two-pointer partition of a stack
 * array, and a walk over length-prefixed records (an index compared against a length
 * read from the data).
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* Levenshtein distance between consecutive 24-byte windows (over 4-symbol alphabet
 * so the distances vary), one DP row of u8 on the stack. */
u64 editdist(void *mem, u64 len) {
    const u8 *p = mem;
    u8 row[25];
    u64 total = 0;
    for (u64 base = 0; base + 48 <= len; base += 48) {
        const u8 *a = p + base;
        const u8 *b = p + base + 24;
        for (int j = 0; j <= 24; j++)
            row[j] = (u8)j;
        for (int i = 1; i <= 24; i++) {
            u8 diag = row[0];
            row[0] = (u8)i;
            u8 ai = a[i - 1] & 3;
            for (int j = 1; j <= 24; j++) {
                u8 up = row[j];
                u8 best = diag + ((b[j - 1] & 3) != ai);
                if (up + 1 < best)
                    best = up + 1;
                if (row[j - 1] + 1 < best)
                    best = row[j - 1] + 1;
                row[j] = best;
                diag = up;
            }
        }
        total += row[24];
    }
    return total;
}

/* The 32 largest 32-bit words in a min-heap on the stack: a word larger than the root
 * replaces it and sifts down. */
u64 heaptop(void *mem, u64 len) {
    const u8 *p = mem;
    u32 heap[32];
    for (int i = 0; i < 32; i++)
        heap[i] = 0;
    u64 replaced = 0;
    for (u64 i = 0; i + 4 <= len; i += 4) {
        u32 v = p[i] | (u32)p[i + 1] << 8 | (u32)p[i + 2] << 16 | (u32)p[i + 3] << 24;
        if (v <= heap[0])
            continue;
        replaced++;
        u32 k = 0;
        for (;;) {
            u32 c = 2 * k + 1;
            if (c >= 32)
                break;
            if (c + 1 < 32 && heap[c + 1] < heap[c])
                c++;
            if (heap[c] >= v)
                break;
            heap[k] = heap[c];
            k = c;
        }
        heap[k] = v;
    }
    u64 sum = 0;
    for (int i = 0; i < 32; i++)
        sum = sum * 31 + heap[i];
    return sum ^ replaced;
}

/* Rice codes with parameter 3 read from the bytes as a little-endian bit stream: a
 * unary quotient (ones ended by a zero, capped at 16), then 3 bits of remainder. */
u64 rice(void *mem, u64 len) {
    const u8 *p = mem;
    u64 bits = len * 8;
    u64 pos = 0, sum = 0, count = 0;
    while (pos + 20 <= bits) {
        u32 q = 0;
        while (q < 16 && (p[pos >> 3] >> (pos & 7) & 1)) {
            q++;
            pos++;
        }
        pos++;
        u32 r = 0;
        for (int k = 0; k < 3; k++) {
            r |= (u32)(p[pos >> 3] >> (pos & 7) & 1) << k;
            pos++;
        }
        sum += (q << 3) | r;
        count++;
    }
    return sum * 4099 + count;
}

/* Every 32-bit word formatted in decimal into a stack buffer (digits backwards, then
 * reversed), hashed byte by byte. */
u64 itoa10(void *mem, u64 len) {
    const u32 *w = mem;
    u64 n = len / 4;
    u64 h = 1469598103934665603ull;
    u8 buf[12];
    for (u64 i = 0; i < n; i++) {
        u32 v = w[i];
        int d = 0;
        do {
            buf[d++] = (u8)('0' + v % 10);
            v /= 10;
        } while (v);
        for (int a = 0, b = d - 1; a < b; a++, b--) {
            u8 t = buf[a];
            buf[a] = buf[b];
            buf[b] = t;
        }
        for (int k = 0; k < d; k++)
            h = (h ^ buf[k]) * 1099511628211ull;
        h ^= (u64)d << 56;
    }
    return h;
}

/* Blocks of 64 bytes copied to the stack and partitioned around their first byte with
 * two indexes moving towards each other (Hoare); the split points are summed. */
u64 partition(void *mem, u64 len) {
    const u8 *p = mem;
    u8 a[64];
    u64 total = 0;
    for (u64 base = 0; base + 64 <= len; base += 64) {
        for (int k = 0; k < 64; k++)
            a[k] = p[base + k];
        u8 pivot = a[0];
        int i = -1, j = 64;
        for (;;) {
            do
                i++;
            while (a[i] < pivot);
            do
                j--;
            while (a[j] > pivot);
            if (i >= j)
                break;
            u8 t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
        total += (u64)j * 257 + a[j] + a[63];
    }
    return total;
}

/* Length-prefixed records: a byte of length (0-63), then that many bytes; each record's
 * bytes summed while the index stays below the length read from the data, and the sums
 * of records whose first byte is odd xor-ed together. */
u64 records(void *mem, u64 len) {
    const u8 *p = mem;
    u64 pos = 0, n = 0, acc = 0, odd = 0;
    while (pos < len) {
        u64 rl = p[pos] & 63;
        pos++;
        if (pos + rl > len)
            break;
        u64 s = 0;
        for (u64 k = 0; k < rl; k++)
            s += p[pos + k] * (k + 1);
        if (rl && (p[pos] & 1))
            odd ^= s;
        acc += s;
        pos += rl;
        n++;
    }
    return acc * 65599 + odd * 31 + n;
}
