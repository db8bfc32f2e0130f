/* Counts the primes below param[0] by trial division: integer division bound. */
#include "bench.h"

CSX_BENCH_KERNEL(primes) {
    u32 limit = (u32)in->param[0];
    u64 count = limit > 2 ? 1 : 0;
    for (u32 n = 3; n < limit; n += 2) {
        int prime = 1;
        for (u32 d = 3; d * d <= n; d += 2) {
            if (n % d == 0) {
                prime = 0;
                break;
            }
        }
        count += prime;
    }
    return count;
}
