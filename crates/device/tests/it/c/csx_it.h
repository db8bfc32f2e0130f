/* The device ABI as the integration tests' programs see it: struct csx_args, the
 * registered functions they call, and SEC() to name the entry. */
#ifndef CSX_IT_H
#define CSX_IT_H

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))

struct csx_window { unsigned long addr, len; };
struct csx_args {
    unsigned long cparam1, cparam2;
    unsigned int nwindows;
    unsigned int params_len;
    struct csx_window windows[16];
    unsigned char params[];
};

extern long csx_file_size(const char *path, unsigned long path_len);
extern long csx_file_read(const char *path, unsigned long path_len, unsigned long offset,
                          void *dst, unsigned long len);
extern long csx_file_write(const char *path, unsigned long path_len, unsigned long offset,
                           const void *src, unsigned long len);
extern long csx_memcpy(void *dst, const void *src, unsigned long len);
extern long csx_memset(void *dst, unsigned long byte, unsigned long len);
extern unsigned long csx_now_ns(void);
extern long csx_trace(const char *msg, unsigned long len);
extern long csx_filter_u64(const void *src, unsigned long len, unsigned long op,
                           unsigned long operand, void *bitmap);
extern long csx_sort_u64(void *data, unsigned long len);

#define ENTRY(name) SEC("csx") long name(u8 *w0, unsigned long w0_len, u8 *state, \
                                        unsigned long state_len, const struct csx_args *args)

#endif
