/*
 * Shared by the `csx bench vm` kernels: the input layout and the entry macro.
 *
 * Every kernel is one function taking a single pointer to its input and returning a
 * u64 digest of its answer. The same source is compiled twice, natively with
 * `clang -O2` and to eBPF with `clang -O2 -target bpf`, so the two builds run the
 * same algorithm on the same bytes. A single pointer argument lets every eBPF runtime
 * drive the kernels, including those that only pass r1 (rbpf).
 *
 * Input layout (little-endian, 8-byte aligned):
 *
 *   offset  size  field
 *        0     8  count     elements (or rows, points, ...) in `data`
 *        8     8  bytes     bytes of `data`
 *       16    48  param[6]  kernel-specific parameters
 *       64     -  data      the elements
 *
 * Kernels may read constant tables (`static const`, placed in .rodata) and call their
 * own functions (bpf-to-bpf calls); they must not write global variables or call
 * anything outside the file. The rbpf peer column runs only kernels without either.
 */
#ifndef CSX_BENCH_H
#define CSX_BENCH_H

typedef __UINT8_TYPE__ u8;
typedef __UINT16_TYPE__ u16;
typedef __UINT32_TYPE__ u32;
typedef __UINT64_TYPE__ u64;
typedef __INT32_TYPE__ i32;
typedef __INT64_TYPE__ i64;

struct csx_bench_input {
    u64 count;
    u64 bytes;
    u64 param[6];
    u8 data[];
};

_Static_assert(sizeof(struct csx_bench_input) == 64, "the header is 64 bytes");

/* Declares kernel NAME as `u64 csx_bench_NAME(const struct csx_bench_input *in)`. */
#define CSX_BENCH_KERNEL(name) u64 csx_bench_##name(const struct csx_bench_input *in)

/* Folds one value into a digest, so a kernel can return several results as one u64. */
static inline u64 csx_bench_mix(u64 h, u64 v) {
    return (h ^ v) * 0x100000001b3ULL + (v >> 29);
}

#endif
