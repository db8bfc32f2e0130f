/* Global data in every kind of section: .bss and .data (writable, fresh per run),
 * .rodata tables and strings (read-only), string literals (.rodata.str1.1). */
#include "csx_test.h"

u64 bss_counter;
u64 data_value = 40;
static const u32 primes[16] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53};
static const char text[] = "the quick brown fox jumps over the lazy dog";

/* Returns 1 on every run: .bss starts zeroed each time. */
SEC("csx/bss") u64 bump_bss(void)
{
    bss_counter++;
    return bss_counter;
}

/* Returns 42 on every run: .data starts from its initial value each time. */
SEC("csx/data") u64 bump_data(void)
{
    data_value += 2;
    return data_value;
}

/* Static variables: addressed through the section symbol plus an offset. Returns 6. */
SEC("csx/static") u64 bump_static(void)
{
    static u64 s = 5;
    static u32 z;
    z++;
    s += z;
    return s;
}

/* Sum of primes[i % 16] for i < n: a read-only table. */
SEC("csx/table") u64 prime_sum(u64 n)
{
    u64 sum = 0;
    for (u64 i = 0; i < n; i++)
        sum += primes[i & 15];
    return sum;
}

/* Occurrences of byte c in text from position start % 32: a read-only string. */
SEC("csx/string") u64 count_char(u64 start, u64 c)
{
    u64 count = 0;
    for (u64 i = start & 31; text[i]; i++)
        count += text[i] == (char)c;
    return count;
}

/* Byte i % 16 of a string literal. */
SEC("csx/literal") u64 literal_at(u64 i)
{
    const char *s = "a string literal";
    return (u8)s[i & 15];
}

/* Stores into read-only data: must trap. */
SEC("csx/rodata_write") u64 write_rodata(u64 i)
{
    ((volatile char *)text)[i & 7] = 'x';
    return 0;
}

/* Touches four sections at once. */
SEC("csx/all") u64 all_globals(u64 i)
{
    bss_counter += i;
    data_value += bss_counter;
    return data_value + primes[i & 15] + (u8)text[i & 31];
}
