/*
 * A branchy filter: counts the records that pass a compound predicate and sums one of
 * their fields. On random data each test is taken about half the time, the case where
 * branches mispredict and branch-free code wins.
 *
 * param[0]: price limit, param[1]: quantity floor, param[2]: flag mask,
 * param[3]: region wanted.
 */
#include "bench.h"

struct record {
    u32 price;
    u32 quantity;
    u32 flags;
    u32 region;
};

CSX_BENCH_KERNEL(filter) {
    const struct record *r = (const struct record *)in->data;
    u64 n = in->count;
    u32 price_max = (u32)in->param[0];
    u32 quantity_min = (u32)in->param[1];
    u32 flag_mask = (u32)in->param[2];
    u32 region = (u32)in->param[3];
    u64 hits = 0;
    u64 total = 0;
    for (u64 i = 0; i < n; i++) {
        int pass = (r[i].price < price_max && r[i].quantity >= quantity_min) ||
                   ((r[i].flags & flag_mask) != 0 && r[i].region == region);
        if (pass) {
            hits += 1;
            total += r[i].price;
        }
    }
    return csx_bench_mix(hits, total);
}
