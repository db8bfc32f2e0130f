/* Loops with data-dependent trip counts, so clang keeps real back edges. */
#include "csx_test.h"

/* Steps of the Collatz sequence from n down to 1. */
SEC("csx/collatz") u64 collatz(u64 n)
{
    u64 steps = 0;
    while (n > 1) {
        n = (n & 1) ? 3 * n + 1 : n / 2;
        steps++;
    }
    return steps;
}

/* Fills a stack array from a linear congruential generator, insertion-sorts it and
 * returns a position-weighted checksum: nested loops over stack memory. */
SEC("csx/sort") u64 sort_checksum(u64 seed)
{
    u32 v[32];
    for (int i = 0; i < 32; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (u32)(seed >> 33);
    }
    for (int i = 1; i < 32; i++) {
        u32 x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
    u64 sum = 0;
    for (int i = 0; i < 32; i++)
        sum += (u64)v[i] * (u64)(i + 1);
    return sum;
}
