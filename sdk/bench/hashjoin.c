/*
 * The probe side of a hash join: looks up `count` u32 keys in an open-addressing table
 * of (key, value) pairs with linear probing (key 0 marks an empty slot), summing the
 * values of the keys found and counting those missing.
 *
 * param[0]: log2 of the table's slots. data: the table, then the probe keys.
 */
#include "bench.h"

struct entry {
    u32 key;
    u32 value;
};

CSX_BENCH_KERNEL(hashjoin) {
    u64 bits = in->param[0];
    if (bits == 0 || bits > 24)
        return 0;
    u64 slots = 1ULL << bits;
    u32 mask = (u32)(slots - 1);
    const struct entry *table = (const struct entry *)in->data;
    const u32 *keys = (const u32 *)(table + slots);
    u64 n = in->count;
    u64 found = 0;
    u64 missing = 0;
    for (u64 i = 0; i < n; i++) {
        u32 key = keys[i];
        u32 slot = (key * 0x9E3779B1U) >> (32 - bits);
        for (;;) {
            u32 k = table[slot].key;
            if (k == key) {
                found += table[slot].value;
                break;
            }
            if (k == 0) {
                missing++;
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    return csx_bench_mix(found, missing);
}
