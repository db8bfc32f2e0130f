//! Device programs for the suite (C, compiled by clang at test time), and the program
//! lifecycle: load in chunks, list, activate on both engines, deactivate, unload.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use csx_host::proto::{EngineKind, ProgramIndex, ProgramState, ProgramType};
use csx_host::{CallError, ExecuteRequest};
use csx_testkit::tools;

use crate::Fixture;

/// What every test program starts with: the ABI types and the registered functions.
const PRELUDE: &str = r#"
typedef unsigned long u64;
typedef unsigned int u32;
typedef unsigned char u8;
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
extern long csx_trace(const char *msg, unsigned long len);
extern unsigned long csx_now_ns(void);
#define ENTRY(name) u64 name(u8 *data, u64 len, u64 *state, u64 state_len, const struct csx_args *args)
"#;

/// Returns 0 at once: the round-trip benchmark's program.
/// Sums window 0 as little-endian u64s.
pub const SUM64: &str = r#"
ENTRY(sum64) {
    const u64 *p = (const u64 *)data;
    u64 s = 0;
    for (u64 i = 0; i < len / 8; i++) s += p[i];
    return s;
}"#;

/// A function of the cparams, so concurrent callers can check they got their own r0.
pub const MIX: &str = "ENTRY(mix) { return args->cparam1 * 1000003 + args->cparam2; }";

/// Counts its runs in the shared state's first word.
pub const COUNTER: &str = "ENTRY(counter) { state[0] += 1; return state[0]; }";

/// Reads the device file named by the parameter bytes through `csx_file_read` (into
/// window 0, one window at a time) and sums it as u64s: Delilah's experiment. Returns
/// the negative code if a read fails.
pub const FILE_SUM: &str = r#"
ENTRY(file_sum) {
    const char *path = (const char *)args->params;
    u64 path_len = args->params_len;
    u64 s = 0, off = 0;
    for (;;) {
        long n = csx_file_read(path, path_len, off, data, len);
        if (n < 0) return n;
        if (n == 0) break;
        const u64 *p = (const u64 *)data;
        for (long i = 0; i < n / 8; i++) s += p[i];
        off += n;
    }
    return s;
}"#;

/// Writes window 0's bytes, each plus cparam1, into window 1; returns the bytes
/// written.
pub const ADD_BYTES: &str = r#"
ENTRY(add_bytes) {
    u8 *out = (u8 *)args->windows[1].addr;
    u64 n = len < args->windows[1].len ? len : args->windows[1].len;
    for (u64 i = 0; i < n; i++) out[i] = data[i] + (u8)args->cparam1;
    return n;
}"#;

/// Reads one byte past the end of window 0: an out-of-bounds trap.
pub const OOB: &str = "ENTRY(oob) { return *(volatile u8 *)(data + len); }";

/// Loops until its fuel runs out.
pub const SPIN: &str = r#"
ENTRY(spin) {
    volatile u64 i = 0;
    for (;;) i++;
    return i;
}"#;

/// Busy-waits for cparam1 nanoseconds of device time, then returns 1.
pub const BUSY_WAIT: &str = r#"
ENTRY(busy_wait) {
    u64 t0 = csx_now_ns();
    while (csx_now_ns() - t0 < args->cparam1) {}
    return 1;
}"#;

/// Traces a message, then returns 7.
pub const TRACE: &str = r#"
ENTRY(trace) {
    char msg[] = "hello from the device";
    csx_trace(msg, sizeof msg - 1);
    return 7;
}"#;

/// Calls a function no device registers: refused at load.
pub const UNKNOWN_FUNCTION: &str = r#"
extern long csx_no_such_function(void);
ENTRY(unknown) { return csx_no_such_function(); }"#;

/// Compiles `body` (after the prelude) with `clang -O2 -target bpf -c`; cached per
/// source. Fails the test, saying how to fix it, when clang is missing.
pub fn compile(body: &str) -> Vec<u8> {
    static CACHE: OnceLock<Mutex<HashMap<String, Vec<u8>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(obj) = cache.lock().unwrap().get(body) {
        return obj.clone();
    }
    let obj = compile_uncached(&format!("{PRELUDE}\n{body}\n"));
    cache.lock().unwrap().insert(body.to_string(), obj.clone());
    obj
}

/// Compiles a whole C source to a BPF object.
pub fn compile_uncached(source: &str) -> Vec<u8> {
    tools::compile_bpf_source(tools::clang(), source, std::iter::empty::<&str>())
}

/// Loads and activates `body` in the first free slot.
pub fn load(f: &Fixture, body: &str, engine: EngineKind) -> ProgramIndex {
    let dev = f.dev();
    let pind = dev
        .load_program_any_slot(ProgramType::Elf, &compile(body), None)
        .expect("program loads");
    dev.activate(pind, engine).expect("program activates");
    pind
}

fn lifecycle(f: &mut Fixture) {
    let dev = f.dev();
    assert!(dev.programs().unwrap().is_empty());
    let image = compile(MIX);
    let pind = ProgramIndex(5);
    dev.load_program(pind, ProgramType::Elf, &image, Some("mix"))
        .unwrap();
    let listed = dev.programs().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].pind, pind);
    assert_eq!(listed[0].state, ProgramState::Loaded);
    assert_eq!(listed[0].name, "mix");
    assert_eq!(listed[0].size_bytes as usize, image.len());
    // Loaded, not active: execution refused.
    let req = ExecuteRequest::new(pind).cparams(2, 3);
    assert!(matches!(
        dev.execute(&req),
        Err(CallError::ProgramNotActivated(_))
    ));
    for engine in [EngineKind::Interpreter, EngineKind::Jit] {
        dev.activate(pind, engine).unwrap();
        assert_eq!(dev.program_state(pind).unwrap(), ProgramState::Active);
        assert_eq!(dev.programs().unwrap()[0].engine, Some(engine));
        assert_eq!(dev.execute(&req).unwrap().r0, 2 * 1000003 + 3);
        // Activating again on the same engine is a no-op; on the other, refused.
        dev.activate(pind, engine).unwrap();
        let other = if engine == EngineKind::Jit {
            EngineKind::Interpreter
        } else {
            EngineKind::Jit
        };
        assert!(matches!(
            dev.activate(pind, other),
            Err(CallError::ProgramInUse(_))
        ));
        // An active program cannot be replaced.
        assert!(matches!(
            dev.load_program(pind, ProgramType::Elf, &image, None),
            Err(CallError::ProgramInUse(_))
        ));
        dev.deactivate(pind).unwrap();
        assert_eq!(dev.program_state(pind).unwrap(), ProgramState::Loaded);
        assert!(matches!(
            dev.deactivate(pind),
            Err(CallError::ProgramNotActivated(_))
        ));
    }
    assert!(dev.programs().unwrap()[0].executions <= 2);
    dev.unload(pind).unwrap();
    assert_eq!(dev.program_state(pind).unwrap(), ProgramState::Empty);
    assert!(matches!(dev.unload(pind), Err(CallError::NoProgram(_))));
    assert!(matches!(
        dev.activate(pind, EngineKind::Jit),
        Err(CallError::NoProgram(_))
    ));
    assert!(matches!(dev.deactivate(pind), Err(CallError::NoProgram(_))));
}

/// A program larger than one load chunk arrives in several, and runs.
fn chunked_load(f: &mut Fixture) {
    let dev = f.dev();
    // Two big constant tables (each in its own .rodata section, within the VM's
    // per-section limit) plus code that reads them: over 1 MiB of ELF.
    let n = 90_000u64;
    let init = |k: u64| {
        (0..n)
            .map(|i| (i * k).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let source = format!(
        "{PRELUDE}\n\
         __attribute__((section(\".rodata.a\"))) static const u64 ta[{n}] = {{ {a} }};\n\
         __attribute__((section(\".rodata.b\"))) static const u64 tb[{n}] = {{ {b} }};\n\
         ENTRY(big) {{ u64 i = args->cparam1 % {n}; return ta[i] + tb[i]; }}\n",
        a = init(1),
        b = init(2),
    );
    let image = compile_uncached(&source);
    assert!(
        image.len() > csx_host::proto::limits::LOAD_CHUNK_SIZE_MAX as usize,
        "image is {} bytes",
        image.len()
    );
    let pind = dev
        .load_program_any_slot(ProgramType::Elf, &image, None)
        .unwrap();
    dev.activate(pind, EngineKind::Interpreter).unwrap();
    let run = dev
        .execute(&ExecuteRequest::new(pind).cparams(12345, 0))
        .unwrap();
    assert_eq!(run.r0, 12345 * 3);
    dev.unload(pind).unwrap();
}

/// Raw bytecode (no ELF) loads too: `mov r0, 42; exit`.
fn raw_program(f: &mut Fixture) {
    let dev = f.dev();
    let code: Vec<u8> = [[0xb7u8, 0, 0, 0, 42, 0, 0, 0], [0x95, 0, 0, 0, 0, 0, 0, 0]].concat();
    assert_eq!(csx_host::program_type_of(&code), ProgramType::Raw);
    let pind = dev
        .load_program_any_slot(ProgramType::Raw, &code, None)
        .unwrap();
    dev.activate(pind, EngineKind::Jit).unwrap();
    assert_eq!(dev.execute(&ExecuteRequest::new(pind)).unwrap().r0, 42);
}

crate::backend_tests!(lifecycle, chunked_load, raw_program);
