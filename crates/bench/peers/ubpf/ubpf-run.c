/*
 * A runner that lets `csx bench vm --peer ubpf=PATH` time uBPF (github.com/iovisor/ubpf)
 * beside csx's engines. It is built against a uBPF build outside this tree (build.sh).
 *
 *   ubpf-run MODE CODE INPUT ANSWER BATCH_NS [CLOCK]
 *
 * MODE is `interp` (uBPF's interpreter, its default bounds checks on) or `jit` (uBPF's
 * x86-64 JIT, which checks nothing). CODE is raw eBPF bytecode (8-byte instructions, no
 * ELF), INPUT the bytes whose address and length the program gets in r1 and r2, ANSWER
 * the r0 every run must return (hex), BATCH_NS how long one timed batch should take,
 * CLOCK `wall` (the default) or `cpu` (batches timed by this thread's CPU time).
 *
 * It loads the code, runs it once (the warm-up) and checks the answer, then prints
 *   ready CALLS_PER_BATCH
 * or `error MESSAGE` and exits 1. Then, for each line `run MILLISECONDS` on stdin, it
 * runs batches for about that long (at least one) and prints
 *   batches NS NS ...        (nanoseconds per call of each batch)
 * or `wrong N` if N runs did not return ANSWER. It exits at the end of stdin.
 *
 * The JIT mode runs only after the interpreter, with bounds checks, returned ANSWER on
 * the same bytes: the caller (the bench) checks the interpreter first.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ubpf.h>

/* One program loaded in one mode. */
struct runner {
    struct ubpf_vm *vm;
    ubpf_jit_fn jit; /* NULL in interpreter mode */
    uint8_t *input;
    size_t input_len;
};

static void fail(const char *what, const char *detail) {
    printf("error %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    fflush(stdout);
    exit(1);
}

/* Reads a whole file into a fresh 8-byte aligned buffer. */
static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        fail(path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0)
        fail(path, strerror(errno));
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0)
        fail(path, strerror(errno));
    uint8_t *buf = aligned_alloc(8, ((size_t)size + 8) & ~(size_t)7);
    if (!buf)
        fail(path, "out of memory");
    if (size > 0 && fread(buf, 1, (size_t)size, f) != (size_t)size)
        fail(path, "short read");
    fclose(f);
    *len = (size_t)size;
    return buf;
}

/* Runs the program once; returns 0 and r0 in *out, or -1 if uBPF refused to run it. */
static int run_once(const struct runner *r, uint64_t *out) {
    if (r->jit) {
        *out = r->jit(r->input, r->input_len);
        return 0;
    }
    return ubpf_exec(r->vm, r->input, r->input_len, out);
}

/* The clock that times batches: CLOCK_MONOTONIC or CLOCK_THREAD_CPUTIME_ID. */
static clockid_t batch_clock = CLOCK_MONOTONIC;

static uint64_t clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t now_ns(void) {
    return clock_ns(CLOCK_MONOTONIC);
}

static void load(struct runner *r, const char *mode, const char *code_path) {
    size_t code_len = 0;
    uint8_t *code = read_file(code_path, &code_len);
    char *err = NULL;
    r->vm = ubpf_create();
    if (!r->vm)
        fail("ubpf_create", NULL);
    if (code_len > UINT32_MAX || ubpf_load(r->vm, code, (uint32_t)code_len, &err) != 0)
        fail("ubpf_load", err);
    free(code);
    if (strcmp(mode, "jit") == 0) {
        r->jit = ubpf_compile(r->vm, &err);
        if (!r->jit)
            fail("ubpf_compile", err);
    } else if (strcmp(mode, "interp") != 0) {
        fail("unknown mode (want interp or jit)", mode);
    }
}

/* Runs batches of `calls` for about `budget_ns`; prints each batch's ns per call. */
static void run_batches(const struct runner *r, uint64_t calls, uint64_t budget_ns, uint64_t answer) {
    uint64_t wrong = 0;
    char line[1 << 14];
    size_t used = (size_t)snprintf(line, sizeof line, "batches");
    uint64_t started = now_ns();
    do {
        uint64_t t0 = clock_ns(batch_clock);
        for (uint64_t i = 0; i < calls; i++) {
            uint64_t got = 0;
            if (run_once(r, &got) != 0 || got != answer)
                wrong++;
        }
        double per_call = (double)(clock_ns(batch_clock) - t0) / (double)calls;
        if (used + 32 < sizeof line)
            used += (size_t)snprintf(line + used, sizeof line - used, " %.1f", per_call);
    } while (now_ns() - started < budget_ns);
    if (wrong)
        printf("wrong %" PRIu64 "\n", wrong);
    else
        printf("%s\n", line);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s interp|jit CODE INPUT ANSWER_HEX BATCH_NS [wall|cpu]\n", argv[0]);
        return 2;
    }
    if (argc == 7 && strcmp(argv[6], "cpu") == 0)
        batch_clock = CLOCK_THREAD_CPUTIME_ID;
    else if (argc == 7 && strcmp(argv[6], "wall") != 0)
        fail("unknown clock (want wall or cpu)", argv[6]);
    struct runner r = {0};
    load(&r, argv[1], argv[2]);
    r.input = read_file(argv[3], &r.input_len);
    uint64_t answer = strtoull(argv[4], NULL, 16);
    uint64_t batch_ns = strtoull(argv[5], NULL, 10);

    uint64_t got = 0;
    uint64_t t0 = now_ns();
    if (run_once(&r, &got) != 0)
        fail("run", "uBPF stopped the program (see its message on stderr)");
    uint64_t once = now_ns() - t0;
    if (got != answer) {
        char detail[64];
        snprintf(detail, sizeof detail, "returned %#" PRIx64 ", not %#" PRIx64, got, answer);
        fail("run", detail);
    }
    uint64_t calls = batch_ns / (once ? once : 1);
    if (calls < 1)
        calls = 1;
    printf("ready %" PRIu64 "\n", calls);
    fflush(stdout);

    char cmd[64];
    while (fgets(cmd, sizeof cmd, stdin)) {
        unsigned long ms = 0;
        if (sscanf(cmd, "run %lu", &ms) != 1)
            fail("unknown command", cmd);
        run_batches(&r, calls, (uint64_t)ms * 1000000u, answer);
    }
    ubpf_destroy(r.vm);
    return 0;
}
