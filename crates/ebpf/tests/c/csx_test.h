/* Shared by the loader's test programs: fixed-width types and the SEC() macro that
 * places a function or variable in a named ELF section, as libbpf's bpf_helpers.h does. */
#ifndef CSX_TEST_H
#define CSX_TEST_H

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define NOINLINE __attribute__((noinline))

#endif
