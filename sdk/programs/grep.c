/*
 * grep: counts the rows of window 0 that contain a pattern (lambda-IO's Grep).
 *
 * Windows: 0 = the input, rows ending in '\n' (a last row without one counts if it is
 * not empty); 1 = the output, at least 16 bytes.
 * cparams: unused. params: the pattern, 1 to 255 bytes, no '\n'.
 * Output: struct { u64 matching_rows; u64 rows; }.
 * r0: 16, or CSX_EINVAL for a bad pattern or no output window, CSX_ENOSPC if the output
 * window is too small.
 *
 * Method: the input is scanned with word-wide tests (a byte of a
 * 64-bit word equals c when the word xor c repeated has a zero byte), looking for '\n'
 * and for the pattern's rarest byte (by a fixed ranking of English text, as memchr's
 * memmem picks its rare bytes), 8 bytes at a time. Only a word holding one of them is
 * looked at byte by byte: its newlines are counted, each occurrence of the rare byte is
 * checked as a match, and a match counts its row once (later candidates before the
 * row's end are skipped).
 */
#include "csx.h"

#define GREP_PATTERN_SIZE_MAX 255

#define ONES 0x0101010101010101UL
#define HIGHS 0x8080808080808080UL
#define LOW7 0x7f7f7f7f7f7f7f7fUL

/* Letters from the most to the least frequent in English text. */
static const char letters_by_frequency[] = "etaoinshrdlcumwfgypbvkjxqz";

/* How common byte c is in text: higher is more common. */
static int byte_rank(csx_u8 c)
{
    if (c == ' ')
        return 40;
    if (c >= 'A' && c <= 'Z')
        c = c - 'A' + 'a';
    for (int k = 0; k < 26; k++)
        if (letters_by_frequency[k] == c)
            return 39 - k;
    return 0;
}

struct grep_state {
    const csx_u8 *s;
    csx_u64 n;
    const csx_u8 *pat;
    csx_u64 m;
    csx_u64 rare;     /* index in the pattern of the byte candidates are found by */
    csx_u8 rare_byte;
    csx_u64 skip_to;  /* matches starting before this are in a row already counted */
    csx_u64 hits;
    csx_u64 rows;     /* newlines seen */
};

/* Input byte q equals the pattern's rare byte: counts a match starting at q - rare,
 * once per row. */
static void candidate(struct grep_state *g, csx_u64 q)
{
    if (q < g->rare)
        return;
    csx_u64 p = q - g->rare;
    if (p < g->skip_to || g->m > g->n - p)
        return;
    for (csx_u64 t = 0; t < g->m; t++)
        if (g->s[p + t] != g->pat[t])
            return;
    g->hits++;
    csx_u64 j = p + g->m;
    while (j < g->n && g->s[j] != '\n')
        j++;
    g->skip_to = j + 1;
}

/* The rare byte's occurrences in bytes from..to of the input, checked as matches. Out
 * of line, so the word loop keeps its registers. */
static __attribute__((noinline)) void candidates(struct grep_state *g, csx_u64 from,
                                                 csx_u64 to)
{
    for (csx_u64 q = from; q < to; q++)
        if (g->s[q] == g->rare_byte)
            candidate(g, q);
}

/* Bytes from..to of the input, one at a time: newlines counted, candidates checked. */
static void bytes(struct grep_state *g, csx_u64 from, csx_u64 to)
{
    for (csx_u64 q = from; q < to; q++) {
        csx_u8 c = g->s[q];
        if (c == '\n')
            g->rows++;
        else if (c == g->rare_byte)
            candidate(g, q);
    }
}

/* 0x80 in every byte of x that is zero, 0 in the others (exact). */
static inline csx_u64 zero_bytes(csx_u64 x)
{
    return ~(((x & LOW7) + LOW7) | x | LOW7);
}

/* How many bytes of x are zero. */
static inline csx_u64 count_zero_bytes(csx_u64 x)
{
    return ((zero_bytes(x) >> 7) * ONES) >> 56;
}

/* High bit set in the bytes of w equal to '\n' or to the rare byte (`rares` is it in
 * every byte), possibly in more bytes above one of those; 0 when there is none: some
 * byte of w ^ c is zero exactly when some byte of w is c. */
static inline csx_u64 interesting(csx_u64 w, csx_u64 rares)
{
    csx_u64 x = w ^ (ONES * '\n'), y = w ^ rares;
    return (((x - ONES) & ~x) | ((y - ONES) & ~y)) & HIGHS;
}

/* The first of words[k..n) holding '\n' or the rare byte, or n. Two words per pass, in a
 * function with no call in it, so its loop keeps every value in a register. */
static __attribute__((noinline)) csx_u64 next_word(const csx_u64 *words, csx_u64 k,
                                                   csx_u64 n, csx_u64 rares)
{
    for (; k + 2 <= n; k += 2)
        if (interesting(words[k], rares) | interesting(words[k + 1], rares))
            return interesting(words[k], rares) ? k : k + 1;
    if (k < n && interesting(words[k], rares))
        return k;
    return n;
}

CSX_PROGRAM(grep)
{
    const csx_u8 *pat = args->params;
    csx_u64 m = args->params_len;
    if (m == 0 || m > GREP_PATTERN_SIZE_MAX)
        return CSX_EINVAL;
    csx_u64 rare = 0;
    int rare_rank = 1000;
    for (csx_u64 t = 0; t < m; t++) {
        if (pat[t] == '\n')
            return CSX_EINVAL;
        int r = byte_rank(pat[t]);
        if (r < rare_rank) {
            rare_rank = r;
            rare = t;
        }
    }
    csx_u64 *out = csx_window_addr(args, 1);
    if (!out)
        return CSX_EINVAL;
    if (csx_window_len(args, 1) < 16)
        return CSX_ENOSPC;

    struct grep_state g = {
        .s = win0,
        .n = win0_len,
        .pat = pat,
        .m = m,
        .rare = rare,
        .rare_byte = pat[rare],
        .skip_to = 0,
        .hits = 0,
        .rows = 0,
    };
    csx_u64 rares = ONES * pat[rare];
    const csx_u64 *words = win0;
    csx_u64 nwords = win0_len / 8;
    for (csx_u64 k = next_word(words, 0, nwords, rares); k < nwords;
         k = next_word(words, k + 1, nwords, rares)) {
        csx_u64 w = words[k];
        g.rows += count_zero_bytes(w ^ (ONES * '\n'));
        if (zero_bytes(w ^ rares))
            candidates(&g, 8 * k, 8 * k + 8);
    }
    bytes(&g, 8 * nwords, win0_len);
    /* A last row without its '\n' counts if it is not empty. */
    csx_u64 rows = g.rows;
    if (win0_len > 0 && ((const csx_u8 *)win0)[win0_len - 1] != '\n')
        rows++;
    out[0] = g.hits;
    out[1] = rows;
    return 16;
}
