//! `csx bench vm`: the VM's engines against native code, on C kernels.
//!
//! Each kernel in `sdk/bench/*.c` is written once in C and built twice by `build.rs`:
//! natively with `clang -O2` (linked into this binary) and to eBPF with
//! `clang -O2 -target bpf` (embedded). For each kernel the benchmark
//!
//! 1. generates its input from a fixed seed (the same bytes for every engine);
//! 2. loads and verifies the eBPF object, runs it once on the interpreter, then runs the
//!    native build and the JIT once; any disagreement (or trap) is an error, not a number;
//! 3. times native, interpreter and JIT runs, interleaved over a few rounds (see
//!    [`super::measure`]), with every safety check on: bounds-checked memory, fuel
//!    metering, the default fuel budget. Each round starts at the next column (native
//!    first in round one, the interpreter first in round two, ...), so no column always
//!    runs right after another kernel's setup or a peer's process. A cell's time is the
//!    median over rounds of each round's fastest batch ([`Measurement::steady_ns`]): the
//!    median batch of native's short runs moved up to 1.9x between processes of one
//!    binary on a shared machine, the round-best figure by a few percent on most kernels (see
//!    `docs/design/vm.md`, "Measuring against native"); the median batch is reported too
//!    (`batch_median_ns`);
//! 4. does the same for the `rbpf` crate's interpreter and JIT where they can run the
//!    kernel (feature `rbpf`), and for uBPF's when its runner is given (`--peer
//!    ubpf=PATH`, [`ubpf`]), as peer columns; a failure there is noted, not fatal.
//!
//! Kernels take one pointer, to a 64-byte header followed by their data (`bench.h`),
//! so runtimes that pass only r1 can drive them. Our engines also get r2 = the length,
//! which the kernels ignore.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use csx_ebpf::engine::{Engine, RunOptions};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::memory::{MemoryMap, RegionIdx};
use csx_ebpf::program::VerifiedProgram;
use serde::Serialize;

use super::measure::{geomean, wall_clock, Clock, Measurement, Sampler, BATCHES_PER_BUDGET};
use crate::engine::{build_engine, verify_program, EngineKind};
use crate::exit;

/// A kernel as `build.rs` built it.
pub struct CompiledKernel {
    /// The file stem in `sdk/bench`, or a user's function name (`--kernels`).
    pub name: &'static str,
    /// The entry function's symbol in `bpf_object`.
    pub symbol: &'static str,
    /// The eBPF object (`clang -O2 -target bpf`).
    pub bpf_object: &'static [u8],
    /// The native build (`clang -O2`).
    pub native: Native,
}

/// Where a kernel's native build is.
#[derive(Clone, Copy)]
pub enum Native {
    /// A built-in kernel's shared object (`clang -O2 -fPIC -shared`), embedded; its entry
    /// point `symbol` is [`NativeEntry::Header`] once loaded (`native.rs`).
    Bundled(&'static [u8]),
    /// A user's `u64 NAME(void *mem, u64 len)` (`--kernels`), already loaded.
    MemLen(unsafe extern "C" fn(*const u8, u64) -> u64),
}

/// A kernel's native entry point, by calling convention.
#[derive(Clone, Copy)]
enum NativeEntry {
    /// `u64 csx_bench_NAME(const struct csx_bench_input *in)` (`sdk/bench/bench.h`). It
    /// must be called with a pointer to a valid, 8-byte aligned input: the header and
    /// all the data the header describes.
    Header(unsafe extern "C" fn(*const u8) -> u64),
    /// A user's `u64 NAME(void *mem, u64 len)` (`--kernels`): `len` readable bytes at
    /// `mem`.
    MemLen(unsafe extern "C" fn(*const u8, u64) -> u64),
}

mod native;
mod ubpf;
pub(crate) mod user;

mod kernels {
    use super::{CompiledKernel, Native};
    include!(concat!(env!("OUT_DIR"), "/bench_kernels.rs"));
}

pub use kernels::KERNELS;

/// Seed of every input generator (each kernel mixes in its name).
const SEED: u64 = 0x00c5_0b3e_7c4b_5eed;

/// Dimensions of a knn point; `KNN_DIM` in `sdk/bench/knn.c`.
const KNN_DIM: usize = 16;

/// Bytes of the input header; `struct csx_bench_input` in `sdk/bench/bench.h`.
const HEADER_SIZE: usize = 64;

/// Whether the host has the quick tier (its column and compile row).
const QUICK_TIER: bool = cfg!(target_arch = "x86_64");

/// Time spent measuring one (kernel, engine) cell.
const CELL_BUDGET: Duration = Duration::from_millis(300);

/// Time per cell with `--quick`.
const CELL_BUDGET_QUICK: Duration = Duration::from_millis(50);

/// Benchmark the VM's engines against native code on C kernels.
///
/// Nineteen kernels of different shapes (sums, a branchy filter, grep, knn, fnv-1a,
/// prime count, stack histograms, bitwise and table CRC-32, insertion and merge sort of
/// stack blocks, CSV parsing, a hash-join probe, i32 matmul, bpf-to-bpf calls, 32-bit
/// murmur3, u8/u16 checksums, a u32 predicate filter),
/// each written once in C (sdk/bench) and compiled natively with `clang -O2` and to
/// eBPF with `clang -O2 -target bpf`, run on seeded random inputs. Every engine must
/// return the native answer (otherwise the command fails). Prints the time per
/// run (the median over rounds of each round's fastest batch) and the ratio to native
/// for the interpreter, the JIT (with all safety checks on),
/// the quick tier (the one-pass baseline JIT, x86-64 hosts) and, where they can run the
/// kernel, the rbpf crate's interpreter and JIT; then the geometric means of the
/// ratios, the compile times, and the compile time of a generated 4,000-instruction
/// program on both JIT tiers.
///
/// `--kernels FILE.c` measures your own code the same way: every function
/// `u64 NAME(void *mem, u64 len)` in FILE.c becomes a kernel.
///
/// `--peer ubpf=PATH` (or the environment variable CSX_BENCH_UBPF=PATH) adds uBPF's
/// interpreter and JIT as columns, run by the runner that
/// crates/bench/peers/ubpf/build.sh builds against a uBPF checkout; without it the
/// output says uBPF was not measured.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct VmBenchArgs {
    /// Print one JSON object: {"kernels": [{name, native_ns, interp_ns, jit_ns,
    /// jit_compile_us, interp_ratio, jit_ratio, quick_*, rbpf_*, ubpf_*, spread_ns,
    /// batch_median_ns...}], geomean_jit,
    /// geomean_interp, geomean_quick, geomean_rbpf_interp, geomean_rbpf_jit,
    /// geomean_ubpf_interp, geomean_ubpf_jit, ubpf (the runner, or why not measured),
    /// jit_compile_4k_us, quick_compile_4k_us, ...}.
    #[arg(long)]
    json: bool,
    /// Measure each cell for 50 ms instead of 300 ms (same inputs, noisier numbers).
    #[arg(long)]
    quick: bool,
    /// Time each batch by the CPU time of the thread that runs it (the peer runners'
    /// too) instead of wall time: on a loaded machine the time spent preempted is left
    /// out (other processes still share the caches).
    #[arg(long)]
    cpu_time: bool,
    /// Run only these kernels (repeatable; with --kernels, these functions).
    #[arg(long, value_name = "NAME")]
    kernel: Vec<String>,
    /// Benchmark your own C file instead of the built-in kernels: it is compiled with
    /// clang both ways (`-O2` natively, `-O2 -target bpf`), and every global function,
    /// which must have the form `u64 NAME(void *mem, u64 len)`, runs on 64 KiB of
    /// seeded random bytes (read-only). Set CSX_CLANG to choose the compiler.
    #[arg(long, value_name = "FILE.c")]
    kernels: Option<std::path::PathBuf>,
    /// A peer engine's runner, as NAME=PATH; the peer known is `ubpf` (the runner built
    /// by crates/bench/peers/ubpf/build.sh). Defaults to CSX_BENCH_UBPF if set.
    #[arg(long, value_name = "NAME=PATH")]
    peer: Vec<String>,
}

/// How big a kernel's input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// The benchmark's inputs (64 KiB to 1 MiB, or a prime limit of 20000).
    Full,
    /// Small inputs for tests.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only the tests use small inputs")
    )]
    Test,
}

/// A kernel's input: the header and data of `bench.h`, in 8-byte aligned storage so the
/// native build may load its u64 fields and elements directly.
#[derive(Clone)]
pub struct Input {
    words: Vec<u64>,
    len: usize,
}

impl Input {
    /// Lays out a header with `count`, `data.len()` and `params`, followed by `data`.
    fn new(count: u64, params: [u64; 6], data: &[u8]) -> Input {
        let len = HEADER_SIZE + data.len();
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
        for p in params {
            bytes.extend_from_slice(&p.to_le_bytes());
        }
        assert_eq!(bytes.len(), HEADER_SIZE);
        bytes.extend_from_slice(data);
        bytes.resize(len.next_multiple_of(8), 0);
        let words = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
            .collect();
        Input { words, len }
    }

    /// `data` alone, without a header (a user's kernel gets its pointer and length).
    fn raw(data: &[u8]) -> Input {
        let words = data
            .chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect();
        Input {
            words,
            len: data.len(),
        }
    }

    /// The input's bytes.
    pub fn bytes(&self) -> &[u8] {
        assert!(self.len <= self.words.len() * 8);
        // SAFETY: `words` owns `words.len() * 8 >= len` initialized bytes; `u8` has no
        // alignment or validity requirement; the shared borrow of `self` keeps them
        // unchanged while the slice lives.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    /// The input's bytes, writable (rbpf's API wants `&mut [u8]`).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        assert!(self.len <= self.words.len() * 8);
        // SAFETY: as in `bytes`; the exclusive borrow of `self` makes this the only
        // live view of the storage.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// splitmix64: a small, fast, well-mixed generator; inputs must be reproducible.
struct Rng(u64);

impl Rng {
    fn for_kernel(name: &str) -> Rng {
        let mut seed = SEED;
        for b in name.bytes() {
            seed = (seed ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (the modulo bias is irrelevant for n this small).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The input of kernel `name` at `scale`. Kernels this file does not name (a new `.c`
/// file, or a user's own) get the generic input: 64 KiB of random bytes (2 KiB for
/// tests), `count` = 0 and every parameter 0; a kernel reads `in->bytes` to size it.
pub fn make_input(name: &str, scale: Scale) -> Input {
    // Full inputs are 10 to 128 times the test inputs.
    let full = |n: u64, test: u64| if scale == Scale::Full { n } else { test };
    let mut rng = Rng::for_kernel(name);
    match name {
        "stats64" => {
            let n = full(8192, 256);
            let data: Vec<u8> = (0..n).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
            Input::new(n, [0; 6], &data)
        }
        "stats32" => {
            let n = full(16384, 512);
            let data: Vec<u8> = (0..n)
                .flat_map(|_| (rng.next_u64() as u32).to_le_bytes())
                .collect();
            Input::new(n, [0; 6], &data)
        }
        "filter" => filter_input(&mut rng, full(65536, 512)),
        "grep" => grep_input(&mut rng, full(64 << 10, 2 << 10) as usize),
        "knn" => knn_input(&mut rng, full(4096, 128)),
        "primes" => Input::new(0, [full(20_000, 2_000), 0, 0, 0, 0, 0], &[]),
        "csv" => csv_input(&mut rng, full(64 << 10, 2 << 10) as usize),
        "hashjoin" => hashjoin_input(&mut rng, if scale == Scale::Full { 14 } else { 8 }),
        "matmul" => matmul_input(&mut rng),
        // 256 KiB, not 64: natively, a merge sort called again and again on the same
        // 64 KiB ran 3.2x faster per byte than on fresh data (1.13 against 3.63 ns per
        // byte, the fastest of 2,000 calls), the branch predictor having learnt the
        // input's comparisons; from 256 KiB on, one input costs what fresh ones do.
        "msort" => {
            let n = full(256 << 10, 2 << 10);
            let data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            Input::new(0, [0; 6], &data)
        }
        // fnv and every kernel without its own layout.
        _ => {
            let n = full(64 << 10, 2 << 10);
            let data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            Input::new(0, [0; 6], &data)
        }
    }
}

/// Rows of four comma-separated decimal fields (0 to 99999); the kernel sums field 2.
fn csv_input(rng: &mut Rng, size: usize) -> Input {
    let mut text = Vec::with_capacity(size + 32);
    while text.len() < size {
        for field in 0..4 {
            if field > 0 {
                text.push(b',');
            }
            text.extend_from_slice(rng.below(100_000).to_string().as_bytes());
        }
        text.push(b'\n');
    }
    Input::new(0, [2, 0, 0, 0, 0, 0], &text)
}

/// An open-addressing table of `1 << bits` (key, value) u32 pairs, half full, built
/// with the kernel's hash and linear probing, then `1 << bits` probe keys of which
/// about half are in the table.
fn hashjoin_input(rng: &mut Rng, bits: u32) -> Input {
    let slots = 1usize << bits;
    let mut table = vec![(0u32, 0u32); slots];
    let mut keys = Vec::with_capacity(slots / 2);
    while keys.len() < slots / 2 {
        let key = (rng.next_u64() as u32) | 1;
        let mut slot = (key.wrapping_mul(0x9e37_79b1) >> (32 - bits)) as usize;
        while table[slot].0 != 0 && table[slot].0 != key {
            slot = (slot + 1) & (slots - 1);
        }
        if table[slot].0 == 0 {
            table[slot] = (key, rng.next_u64() as u32 >> 8);
            keys.push(key);
        }
    }
    let mut data = Vec::with_capacity(slots * 12);
    for (key, value) in &table {
        data.extend_from_slice(&key.to_le_bytes());
        data.extend_from_slice(&value.to_le_bytes());
    }
    for _ in 0..slots {
        // Even keys are never in the table (stored keys are odd).
        let probe = if rng.below(2) == 0 {
            keys[rng.below(keys.len() as u64) as usize]
        } else {
            rng.next_u64() as u32 & !1
        };
        data.extend_from_slice(&probe.to_le_bytes());
    }
    Input::new(slots as u64, [u64::from(bits), 0, 0, 0, 0, 0], &data)
}

/// Two 48x48 i32 matrices (`N` in `sdk/bench/matmul.c`) with entries in -1000..1000.
fn matmul_input(rng: &mut Rng) -> Input {
    let data: Vec<u8> = (0..2 * 48 * 48)
        .flat_map(|_| (rng.below(2000) as i32 - 1000).to_le_bytes())
        .collect();
    Input::new(0, [0; 6], &data)
}

/// Records of four u32 fields, each predicate of the filter true about half the time.
/// 64Ki records (1 MiB): with much fewer, a modern branch predictor learns the
/// outcomes across repeated runs over the same bytes (16Ki records ran twice as fast
/// natively as 256Ki on this machine's EPYC), and the filter would no longer be branchy.
fn filter_input(rng: &mut Rng, n: u64) -> Input {
    let mut data = Vec::with_capacity(n as usize * 16);
    for _ in 0..n {
        let price = rng.below(1000) as u32;
        let quantity = rng.below(100) as u32;
        let flags = rng.next_u64() as u32;
        let region = rng.below(4) as u32;
        for field in [price, quantity, flags, region] {
            data.extend_from_slice(&field.to_le_bytes());
        }
    }
    // price < 500 && quantity >= 50, or (flags & 8) != 0 && region == 2.
    Input::new(n, [500, 50, 1 << 3, 2, 0, 0], &data)
}

/// Rows of random lowercase words, about one word in 40 the pattern `needle`.
fn grep_input(rng: &mut Rng, size: usize) -> Input {
    const PATTERN: &[u8] = b"needle";
    let mut text = Vec::with_capacity(size + 128);
    let mut rows = 0u64;
    while text.len() < size {
        let words = 4 + rng.below(9);
        for w in 0..words {
            if w > 0 {
                text.push(b' ');
            }
            if rng.below(40) == 0 {
                text.extend_from_slice(PATTERN);
            } else {
                let len = 2 + rng.below(8);
                text.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
            }
        }
        text.push(b'\n');
        rows += 1;
    }
    let mut pattern = [0u8; 32];
    pattern[..PATTERN.len()].copy_from_slice(PATTERN);
    let mut params = [PATTERN.len() as u64, 0, 0, 0, 0, 0];
    for (i, chunk) in pattern.chunks_exact(8).enumerate() {
        params[1 + i] = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
    }
    Input::new(rows, params, &text)
}

/// A query and `n` points of [`KNN_DIM`] i32 coordinates in 0..256.
fn knn_input(rng: &mut Rng, n: u64) -> Input {
    let coords = (n as usize + 1) * KNN_DIM;
    let data: Vec<u8> = (0..coords)
        .flat_map(|_| (rng.below(256) as i32).to_le_bytes())
        .collect();
    // The expected squared distance is about 16 * 10923; this radius holds a minority.
    Input::new(n, [150_000, 0, 0, 0, 0, 0], &data)
}

/// A kernel loaded and verified, with its reference answer.
struct Prepared {
    program: Arc<VerifiedProgram>,
    input: Input,
    answer: u64,
    native: NativeEntry,
}

/// Loads `kernel`'s eBPF object and checks it on the interpreter against the native
/// build, interpreter first: a clean interpreter run shows the kernel stays inside its
/// input, which is what makes calling the native build on it sound.
fn prepare(kernel: &'static CompiledKernel, scale: Scale) -> anyhow::Result<Prepared> {
    let name = kernel.name;
    let (input, native) = match kernel.native {
        Native::Bundled(image) => (
            make_input(name, scale),
            NativeEntry::Header(
                native::bundled(image, kernel.symbol)
                    .with_context(|| format!("the native build of kernel {name}"))?,
            ),
        ),
        Native::MemLen(f) => (user::input(name, scale), NativeEntry::MemLen(f)),
    };
    let functions = Arc::new(FunctionTable::new());
    let program = csx_ebpf::loader::load_elf(kernel.bpf_object, Some(kernel.symbol), &functions)
        .with_context(|| format!("loading the eBPF object of kernel {name}"))?;
    let program = verify_program(&format!("kernel {name}"), program, functions)?;
    let (interp, _) = build_engine(EngineKind::Interp, Arc::clone(&program))?;
    let answer = run_once(interp.as_ref(), &input)
        .with_context(|| format!("kernel {name} on the interpreter"))?;
    let native_answer = run_native(native, &input);
    if native_answer != answer {
        bail!(
            "kernel {name}: the interpreter returned {answer:#x}, native code {native_answer:#x}"
        );
    }
    Ok(Prepared {
        program,
        input,
        answer,
        native,
    })
}

/// Calls a kernel's native build `native` on `input`; both must come from the same
/// `prepare` of the kernel.
fn run_native(native: NativeEntry, input: &Input) -> u64 {
    let bytes = input.bytes();
    // SAFETY: `input` is a whole, 8-byte aligned input built for this kernel (by
    // `Input::new` with its header, or `Input::raw` for a user's function, which gets
    // the pointer and length of exactly those bytes), and `prepare` ran the same C
    // source on the bounds-checked interpreter on these bytes, mapped read-only, without
    // a trap, so the native build reads only inside them and writes nothing. The
    // kernels keep no state.
    unsafe {
        match native {
            NativeEntry::Header(f) => f(bytes.as_ptr()),
            NativeEntry::MemLen(f) => f(bytes.as_ptr(), bytes.len() as u64),
        }
    }
}

/// Runs `engine` once on `input` (mapped read-only), returning r0 or the trap.
fn run_once(engine: &dyn Engine, input: &Input) -> anyhow::Result<u64> {
    let (mut map, args) = map_input(input)?;
    let outcome = engine.run(&mut map, args, &RunOptions::default(), &mut ConformanceHost);
    outcome.result.map_err(|trap| {
        let insn = csx_ebpf::disasm::format_insn(engine.program().insns(), trap.pc as usize);
        anyhow::anyhow!("trap at pc {} (`{insn}`): {}", trap.pc, trap.kind)
    })
}

/// One kernel's numbers.
#[derive(Debug, Serialize)]
struct KernelReport {
    name: &'static str,
    input_bytes: usize,
    /// The answer every engine returned, in hex.
    answer: String,
    native_ns: f64,
    interp_ns: f64,
    jit_ns: f64,
    jit_compile_us: f64,
    interp_ratio: f64,
    jit_ratio: f64,
    /// The quick tier (x86-64 hosts only): time per run, ratio, compile time.
    quick_ns: Option<f64>,
    quick_ratio: Option<f64>,
    quick_compile_us: Option<f64>,
    rbpf_interp_ns: Option<f64>,
    rbpf_jit_ns: Option<f64>,
    rbpf_interp_ratio: Option<f64>,
    rbpf_jit_ratio: Option<f64>,
    /// Why an rbpf column is empty.
    rbpf_note: Option<String>,
    /// uBPF's interpreter (bounds checks on) and JIT (no checks), with `--peer ubpf`.
    ubpf_interp_ns: Option<f64>,
    ubpf_jit_ns: Option<f64>,
    ubpf_interp_ratio: Option<f64>,
    ubpf_jit_ratio: Option<f64>,
    /// Why a uBPF column is empty although the runner was given.
    ubpf_note: Option<String>,
    /// Fastest and slowest batch (ns per run) of each measured cell.
    spread_ns: Spread,
    /// The median batch (ns per run) of each measured cell: what `*_ns` was before the
    /// cells were timed by their rounds' fastest batches.
    batch_median_ns: Medians,
}

#[derive(Debug, Serialize)]
struct Medians {
    native: f64,
    interp: f64,
    jit: f64,
    quick: Option<f64>,
    rbpf_interp: Option<f64>,
    rbpf_jit: Option<f64>,
    ubpf_interp: Option<f64>,
    ubpf_jit: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Spread {
    native: [f64; 2],
    interp: [f64; 2],
    jit: [f64; 2],
    quick: Option<[f64; 2]>,
    rbpf_interp: Option<[f64; 2]>,
    rbpf_jit: Option<[f64; 2]>,
    ubpf_interp: Option<[f64; 2]>,
    ubpf_jit: Option<[f64; 2]>,
}

fn spread(m: &Measurement) -> [f64; 2] {
    [m.min_ns, m.max_ns]
}

/// The whole `--json` output.
#[derive(Debug, Serialize)]
struct BenchReport {
    kernels: Vec<KernelReport>,
    /// Geometric means of the ratios to native.
    geomean_jit: Option<f64>,
    geomean_interp: Option<f64>,
    /// The quick tier's, where it ran (x86-64 hosts).
    geomean_quick: Option<f64>,
    /// Over the kernels rbpf could run (`rbpf_kernels`).
    geomean_rbpf_interp: Option<f64>,
    geomean_rbpf_jit: Option<f64>,
    rbpf_kernels: Vec<&'static str>,
    /// Over the kernels uBPF ran (`ubpf_kernels`), with `--peer ubpf`.
    geomean_ubpf_interp: Option<f64>,
    geomean_ubpf_jit: Option<f64>,
    ubpf_kernels: Vec<&'static str>,
    /// The uBPF runner given, or why uBPF was not measured.
    ubpf: String,
    cell_budget_ms: u128,
    quick: bool,
    /// Batches timed by thread CPU time (`--cpu-time`), not wall time.
    cpu_time: bool,
    clang: &'static str,
    native_cflags: &'static str,
    /// How the native builds are linked: each built-in kernel is its own shared object,
    /// loaded with `dlopen`, so its code layout does not follow the Rust build.
    native_build: &'static str,
    bpf_cflags: &'static str,
    rbpf: Option<&'static str>,
    /// `/proc/loadavg` (1, 5, 15 minutes) before and after: other work on the machine
    /// skews every number, so the numbers carry it.
    load_average_before: Option<[f64; 3]>,
    load_average_after: Option<[f64; 3]>,
    /// JIT compile time of a generated 4,000-instruction program (see
    /// [`synthetic_program`]): the median and the fastest of [`COMPILE_RUNS`] runs.
    jit_compile_4k_us: Option<CompileTime>,
    /// The same for the quick tier (x86-64 hosts).
    quick_compile_4k_us: Option<CompileTime>,
}

/// A compile-time measurement, in microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
struct CompileTime {
    insns: usize,
    median_us: f64,
    min_us: f64,
}

/// Compiles of the 4,000-instruction program measured.
const COMPILE_RUNS: usize = 7;

/// Instructions of the program whose compile time is measured.
pub(crate) const COMPILE_INSNS: usize = 4000;

/// A verifiable program of `insns` instructions in the shapes the kernels have: blocks
/// of input loads at varying offsets, ALU work, a stack counter indexed by data, a
/// forward branch and a small counted loop, repeated with fresh labels.
pub(crate) fn synthetic_program(insns: usize) -> String {
    const BLOCK: usize = 20;
    let mut src = String::from("mov %r0, 0\nmov %r4, 1\nmov %r8, 1000\n");
    let blocks = (insns - 4) / BLOCK;
    for k in 0..blocks {
        let off = (k * 8) % 56;
        src.push_str(&format!(
            "ldxdw %r3, [%r1+{off}]\nadd %r3, %r4\nmov %r5, %r3\nrsh %r5, 7\nand %r5, 56\n\
             mov %r6, %r10\nadd %r6, -64\nadd %r6, %r5\nldxdw %r7, [%r6+0]\nadd %r7, %r3\n\
             stxdw [%r6+0], %r7\njgt %r3, %r8, skip{k}\nxor %r4, %r3\nmul %r4, 40503\n\
             skip{k}:\nmov %r9, 0\nloop{k}:\nadd %r9, 1\nadd %r0, %r9\njlt %r9, 4, loop{k}\n\
             add %r0, %r4\n"
        ));
    }
    while src.lines().filter(|l| !l.ends_with(':')).count() < insns - 1 {
        src.push_str("add %r0, 1\n");
    }
    src.push_str("exit\n");
    src
}

/// Compiles [`synthetic_program`] of [`COMPILE_INSNS`] instructions several times on
/// the `kind` engine.
fn measure_compile_time(kind: EngineKind) -> anyhow::Result<CompileTime> {
    let src = synthetic_program(COMPILE_INSNS);
    let insns = csx_ebpf::asm::assemble(&src).context("assembling the synthetic program")?;
    let count = insns.len();
    let program = csx_ebpf::program::Program {
        insns,
        entry: 0,
        globals: vec![],
        name: "synthetic".into(),
    };
    let program = verify_program(
        "the synthetic program",
        program,
        Arc::new(FunctionTable::new()),
    )?;
    let mut times = Vec::with_capacity(COMPILE_RUNS);
    for _ in 0..COMPILE_RUNS {
        let (_, t) = build_engine(kind, Arc::clone(&program))?;
        times.push(t.as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(CompileTime {
        insns: count,
        median_us: times[times.len() / 2],
        min_us: times[0],
    })
}

/// Rounds over which the columns of one kernel are interleaved.
const ROUNDS: u32 = 5;

/// A timed column: one run of a kernel, reporting whether it returned the answer.
type Work<'a> = Box<dyn FnMut() -> bool + 'a>;

/// A column timed by a peer's runner process, which reports its own batches.
type External<'a> = (&'static str, &'a mut ubpf::Runner);

/// Times the columns of one kernel interleaved: [`ROUNDS`] rounds, each giving every
/// column (`columns`, then the runners in `external`) an equal slice of `budget`, so a
/// change in the machine's load hits them all alike; round `r` starts at column `r`
/// (in that order, wrapping), so each column runs first in some round and after a
/// different column in each. Every timed run must return the right answer. The
/// measurements come in that order.
fn time_columns(
    columns: &mut [(&'static str, Work<'_>)],
    external: &mut [External<'_>],
    budget: Duration,
    clock: Clock,
) -> anyhow::Result<Vec<Measurement>> {
    let mut samplers: Vec<Sampler> = columns
        .iter_mut()
        .map(|(_, work)| Sampler::new(budget / BATCHES_PER_BUDGET, work).with_clock(clock))
        .chain(
            external
                .iter()
                .map(|(_, r)| Sampler::external(r.batch_calls)),
        )
        .collect();
    let mut wrong = vec![0u64; columns.len()];
    let local = columns.len();
    let total = local + external.len();
    for round in 0..ROUNDS as usize {
        for k in 0..total {
            let i = (round + k) % total;
            if i < local {
                let work = &mut columns[i].1;
                samplers[i].run_for(budget / ROUNDS, || {
                    if !work() {
                        wrong[i] += 1;
                    }
                });
            } else {
                let (column, runner) = &mut external[i - local];
                let batches = runner
                    .run_for(budget / ROUNDS)
                    .with_context(|| format!("timing {column}"))?;
                samplers[i].record(&batches);
            }
        }
    }
    for ((column, _), wrong) in columns.iter().zip(&wrong) {
        if *wrong > 0 {
            bail!("{wrong} timed runs on {column} did not return the answer");
        }
    }
    Ok(samplers.into_iter().map(Sampler::finish).collect())
}

/// Maps `input` read-only at the first embedder region: the memory map and r1-r5.
fn map_input(input: &Input) -> anyhow::Result<(MemoryMap<'_>, [u64; 5])> {
    let bytes = input.bytes();
    let mut map = MemoryMap::new();
    let addr = map.map_read_only(RegionIdx::EMBEDDER_FIRST, bytes)?;
    Ok((map, [addr, bytes.len() as u64, 0, 0, 0]))
}

/// A column that runs `engine` on the input mapped in `map`.
fn engine_column<'a>(
    engine: &'a dyn Engine,
    mut map: MemoryMap<'a>,
    args: [u64; 5],
    answer: u64,
) -> Work<'a> {
    let opts = RunOptions::default();
    Box::new(move || {
        engine
            .run(&mut map, args, &opts, &mut ConformanceHost)
            .result
            == Ok(answer)
    })
}

/// Our engines for one kernel, each checked once against native's answer.
struct Engines {
    interp: Box<dyn Engine>,
    jit: Box<dyn Engine>,
    jit_compile: Duration,
    /// The quick tier and its compile time (x86-64 hosts).
    quick: Option<(Box<dyn Engine>, Duration)>,
}

fn checked_engines(name: &str, p: &Prepared) -> anyhow::Result<Engines> {
    let (interp, _) = build_engine(EngineKind::Interp, Arc::clone(&p.program))?;
    let (jit, jit_compile) = checked_engine(name, "JIT", EngineKind::Jit, p)?;
    let quick = if QUICK_TIER {
        Some(checked_engine(name, "quick tier", EngineKind::Quick, p)?)
    } else {
        None
    };
    Ok(Engines {
        interp,
        jit,
        jit_compile,
        quick,
    })
}

/// Builds the `kind` engine and runs it once: it must return native's answer.
fn checked_engine(
    name: &str,
    label: &str,
    kind: EngineKind,
    p: &Prepared,
) -> anyhow::Result<(Box<dyn Engine>, Duration)> {
    let (engine, compile_time) = build_engine(kind, Arc::clone(&p.program))?;
    let got = run_once(engine.as_ref(), &p.input)
        .with_context(|| format!("kernel {name} on the {label}"))?;
    if got != p.answer {
        bail!(
            "kernel {name}: the {label} returned {got:#x}, native code {:#x}",
            p.answer
        );
    }
    Ok((engine, compile_time))
}

/// The kernel as the raw bytecode the peers (rbpf, uBPF) load, which resolve no ELF:
/// a preamble that sets r2 to the input's length (rbpf passes only r1; a `--kernels`
/// function reads its length from r2) and jumps to the entry, then the span of the
/// verified program that the entry reaches (a `--kernels` file is one section holding
/// every function; rbpf's JIT has room for one). Jumps and calls are relative and stay
/// inside that span, so cutting it out and the preamble move none of them.
fn peer_bytecode(program: &VerifiedProgram, input_len: usize) -> Result<Vec<u8>, String> {
    use csx_ebpf::isa::{Insn, ALU_MOV, CLASS_ALU64, CLASS_JMP, JMP_JA, SRC_K};
    if !program.globals().is_empty() {
        return Err("uses global data, which the peers' raw-bytecode loaders cannot map".into());
    }
    let len = i32::try_from(input_len)
        .map_err(|_| format!("an input of {input_len} bytes does not fit an immediate"))?;
    let (first, last) = reachable_span(program.insns(), program.entry() as usize);
    let entry = program.entry() as usize - first;
    let entry =
        i16::try_from(entry).map_err(|_| format!("entry {entry} is past a jump's reach"))?;
    let mut insns = vec![Insn::new(CLASS_ALU64 | ALU_MOV | SRC_K, 2, 0, 0, len)];
    if entry != 0 {
        insns.push(Insn::new(CLASS_JMP | JMP_JA, 0, 0, entry, 0));
    }
    insns.extend_from_slice(&program.insns()[first..=last]);
    Ok(csx_ebpf::isa::encode_all(&insns))
}

/// The first and last slot reachable from `entry` (of a verified program: every jump
/// and call lands inside it), following jumps, both arms of branches and local calls.
fn reachable_span(insns: &[csx_ebpf::isa::Insn], entry: usize) -> (usize, usize) {
    use csx_ebpf::isa::{CLASS_JMP, CLASS_JMP32, JMP_CALL, JMP_EXIT, JMP_JA};
    /// `lddw`, the one instruction of two slots.
    const LDDW: u8 = 0x18;
    /// `src` of a call to a local function (`imm` is relative).
    const LOCAL_CALL: u8 = 1;
    let mut seen = vec![false; insns.len()];
    let mut todo = vec![entry];
    let relative = |pc: usize, delta: i64| usize::try_from(pc as i64 + 1 + delta).ok();
    while let Some(pc) = todo.pop() {
        if pc >= insns.len() || seen[pc] {
            continue;
        }
        seen[pc] = true;
        let insn = insns[pc];
        let (class, op) = (insn.class(), insn.opc & 0xf0);
        if insn.opc == LDDW {
            if let Some(s) = seen.get_mut(pc + 1) {
                *s = true;
            }
            todo.push(pc + 2);
            continue;
        }
        if class != CLASS_JMP && class != CLASS_JMP32 {
            todo.push(pc + 1);
            continue;
        }
        match op {
            JMP_EXIT => {}
            JMP_CALL => {
                if insn.src == LOCAL_CALL {
                    todo.extend(relative(pc, i64::from(insn.imm)));
                }
                todo.push(pc + 1);
            }
            JMP_JA if class == CLASS_JMP32 => todo.extend(relative(pc, i64::from(insn.imm))),
            JMP_JA => todo.extend(relative(pc, i64::from(insn.off))),
            _ => {
                todo.extend(relative(pc, i64::from(insn.off)));
                todo.push(pc + 1);
            }
        }
    }
    let first = seen.iter().position(|&s| s).unwrap_or(entry);
    let last = seen.iter().rposition(|&s| s).unwrap_or(entry);
    (first, last)
}

/// One kernel's timed cells.
struct Cells {
    native: Measurement,
    interp: Measurement,
    jit: Measurement,
    quick: Option<Measurement>,
    rbpf_interp: Option<Measurement>,
    rbpf_jit: Option<Measurement>,
    ubpf_interp: Option<Measurement>,
    ubpf_jit: Option<Measurement>,
}

/// Nanoseconds of CPU time of the calling thread.
fn thread_cpu_clock() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on
    // every Linux the bench runs on, and on failure `t` stays zero.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn bench_kernel(
    kernel: &'static CompiledKernel,
    budget: Duration,
    cpu_time: bool,
    ubpf_runner: Option<&Path>,
) -> anyhow::Result<KernelReport> {
    let name = kernel.name;
    let p = prepare(kernel, Scale::Full)?;
    let answer = p.answer;
    let engines = checked_engines(name, &p)?;

    // Declared before the columns, which borrow them.
    let peer_code = peer_bytecode(&p.program, p.input.bytes().len());
    let mut rbpf = peer::Columns::new(&peer_code, &p.input, answer);
    let rbpf_note = rbpf.note.clone();
    let batch = budget / BATCHES_PER_BUDGET;
    let mut ubpf = ubpf::Columns::start(ubpf_runner, &peer_code, &p.input, answer, batch, cpu_time);
    let (interp_map, args) = map_input(&p.input)?;
    let (jit_map, _) = map_input(&p.input)?;
    let (quick_map, _) = map_input(&p.input)?;
    let mut columns: Vec<(&'static str, Work<'_>)> = vec![
        (
            "native",
            Box::new(|| run_native(p.native, &p.input) == answer),
        ),
        (
            "interp",
            engine_column(engines.interp.as_ref(), interp_map, args, answer),
        ),
        (
            "jit",
            engine_column(engines.jit.as_ref(), jit_map, args, answer),
        ),
    ];
    let quick_column = engines.quick.as_ref().map(|(engine, _)| {
        columns.push((
            "quick",
            engine_column(engine.as_ref(), quick_map, args, answer),
        ));
        columns.len() - 1
    });
    let rbpf_columns = rbpf.push_into(&mut columns);
    let mut external: Vec<External<'_>> = Vec::new();
    let ubpf_at = push_runners(&mut ubpf, columns.len(), &mut external);
    let clock: Clock = if cpu_time {
        thread_cpu_clock
    } else {
        wall_clock
    };
    let m = time_columns(&mut columns, &mut external, budget, clock)
        .with_context(|| format!("kernel {name}"))?;
    let at = |i: Option<usize>| i.map(|i| m[i]);
    let cells = Cells {
        native: m[0],
        interp: m[1],
        jit: m[2],
        quick: at(quick_column),
        rbpf_interp: at(rbpf_columns.0),
        rbpf_jit: at(rbpf_columns.1),
        ubpf_interp: at(ubpf_at[0]),
        ubpf_jit: at(ubpf_at[1]),
    };
    drop(external);
    let notes = [rbpf_note, ubpf.note.take()];
    Ok(kernel_report(name, &p, &engines, &cells, notes))
}

/// Adds uBPF's runners that started to `external`; their indices among all columns
/// (after `local` in-process ones), interpreter and JIT.
fn push_runners<'a>(
    ubpf: &'a mut ubpf::Columns,
    local: usize,
    external: &mut Vec<External<'a>>,
) -> [Option<usize>; 2] {
    let mut at = [None, None];
    let runners = [
        ("ubpf interp", ubpf.interp.as_mut()),
        ("ubpf jit", ubpf.jit.as_mut()),
    ];
    for (at, (column, runner)) in at.iter_mut().zip(runners) {
        if let Some(runner) = runner {
            external.push((column, runner));
            *at = Some(local + external.len() - 1);
        }
    }
    at
}

/// A kernel's report from its timed cells; `notes` say why an rbpf or uBPF column is
/// empty.
fn kernel_report(
    name: &'static str,
    p: &Prepared,
    engines: &Engines,
    c: &Cells,
    notes: [Option<String>; 2],
) -> KernelReport {
    let ratio = |m: &Measurement| m.steady_ns / c.native.steady_ns;
    let ns = |m: &Option<Measurement>| m.map(|m| m.steady_ns);
    let median = |m: &Option<Measurement>| m.map(|m| m.median_ns);
    let ratio_of = |m: &Option<Measurement>| m.as_ref().map(ratio);
    let [rbpf_note, ubpf_note] = notes;
    KernelReport {
        name,
        input_bytes: p.input.bytes().len(),
        answer: format!("{:#x}", p.answer),
        native_ns: c.native.steady_ns,
        interp_ns: c.interp.steady_ns,
        jit_ns: c.jit.steady_ns,
        jit_compile_us: engines.jit_compile.as_secs_f64() * 1e6,
        interp_ratio: ratio(&c.interp),
        jit_ratio: ratio(&c.jit),
        quick_ns: ns(&c.quick),
        quick_ratio: ratio_of(&c.quick),
        quick_compile_us: engines.quick.as_ref().map(|(_, t)| t.as_secs_f64() * 1e6),
        rbpf_interp_ns: ns(&c.rbpf_interp),
        rbpf_jit_ns: ns(&c.rbpf_jit),
        rbpf_interp_ratio: ratio_of(&c.rbpf_interp),
        rbpf_jit_ratio: ratio_of(&c.rbpf_jit),
        rbpf_note,
        ubpf_interp_ns: ns(&c.ubpf_interp),
        ubpf_jit_ns: ns(&c.ubpf_jit),
        ubpf_interp_ratio: ratio_of(&c.ubpf_interp),
        ubpf_jit_ratio: ratio_of(&c.ubpf_jit),
        ubpf_note,
        spread_ns: Spread {
            native: spread(&c.native),
            interp: spread(&c.interp),
            jit: spread(&c.jit),
            quick: c.quick.as_ref().map(spread),
            rbpf_interp: c.rbpf_interp.as_ref().map(spread),
            rbpf_jit: c.rbpf_jit.as_ref().map(spread),
            ubpf_interp: c.ubpf_interp.as_ref().map(spread),
            ubpf_jit: c.ubpf_jit.as_ref().map(spread),
        },
        batch_median_ns: Medians {
            native: c.native.median_ns,
            interp: c.interp.median_ns,
            jit: c.jit.median_ns,
            quick: median(&c.quick),
            rbpf_interp: median(&c.rbpf_interp),
            rbpf_jit: median(&c.rbpf_jit),
            ubpf_interp: median(&c.ubpf_interp),
            ubpf_jit: median(&c.ubpf_jit),
        },
    }
}

/// The rbpf crate as a peer runtime: its interpreter and its x86-64 JIT.
#[cfg(feature = "rbpf")]
mod peer {
    use super::{Input, Work};

    /// rbpf's columns for one kernel, each checked once on the kernel's input. Each
    /// owns a copy of the input (the same bytes), because rbpf wants it writable.
    pub struct Columns<'c> {
        interp: Option<(rbpf::EbpfVmRaw<'c>, Input)>,
        jit: Option<(rbpf::EbpfVmRaw<'c>, Input)>,
        answer: u64,
        /// Why a column is missing.
        pub note: Option<String>,
    }

    impl<'c> Columns<'c> {
        /// Loads `code` into rbpf's interpreter and checks it on `input`; then, only if
        /// that gave the right answer, into its JIT, checked the same way.
        pub fn new(code: &'c Result<Vec<u8>, String>, input: &Input, answer: u64) -> Columns<'c> {
            let mut columns = Columns {
                interp: None,
                jit: None,
                answer,
                note: None,
            };
            let code = match code {
                Ok(code) => code,
                Err(why) => {
                    columns.note = Some(why.clone());
                    return columns;
                }
            };
            match checked_interp(code, input.clone(), answer) {
                Ok(vm) => columns.interp = Some(vm),
                Err(e) => {
                    columns.note = Some(format!(
                        "rbpf interpreter: {e}; the unchecked JIT was not run"
                    ));
                    return columns;
                }
            }
            match checked_jit(code, input.clone(), answer) {
                Ok(vm) => columns.jit = Some(vm),
                Err(e) => columns.note = Some(format!("rbpf JIT: {e}")),
            }
            columns
        }

        /// Appends the columns that exist to `out`; returns their indices there
        /// (interpreter, JIT).
        pub fn push_into<'s>(
            &'s mut self,
            out: &mut Vec<(&'static str, Work<'s>)>,
        ) -> (Option<usize>, Option<usize>) {
            let answer = self.answer;
            let interp = self.interp.as_mut().map(|(vm, mem)| {
                let vm = &*vm;
                out.push((
                    "rbpf interp",
                    Box::new(move || vm.execute_program(mem.bytes_mut()).ok() == Some(answer)),
                ));
                out.len() - 1
            });
            let jit = self.jit.as_mut().map(|(vm, mem)| {
                let vm = &*vm;
                let work: Work<'s> = Box::new(move || {
                    // SAFETY: see `checked_jit`: this bytecode already ran on rbpf's
                    // bounds-checked interpreter over these same bytes with the right
                    // answer, and the kernels are deterministic.
                    let r = unsafe { vm.execute_program_jit(mem.bytes_mut()) };
                    r.ok() == Some(answer)
                });
                out.push(("rbpf jit", work));
                out.len() - 1
            });
            (interp, jit)
        }
    }

    fn checked_interp(
        code: &[u8],
        mut mem: Input,
        answer: u64,
    ) -> Result<(rbpf::EbpfVmRaw<'_>, Input), String> {
        let vm = rbpf::EbpfVmRaw::new(Some(code)).map_err(|e| format!("load: {e}"))?;
        let got = vm
            .execute_program(mem.bytes_mut())
            .map_err(|e| format!("run: {e}"))?;
        if got != answer {
            return Err(format!("returned {got:#x}, not {answer:#x}"));
        }
        Ok((vm, mem))
    }

    /// Only called after [`checked_interp`] succeeded on the same code and bytes.
    fn checked_jit(
        code: &[u8],
        mut mem: Input,
        answer: u64,
    ) -> Result<(rbpf::EbpfVmRaw<'_>, Input), String> {
        let mut vm = rbpf::EbpfVmRaw::new(Some(code)).map_err(|e| format!("load: {e}"))?;
        // rbpf's JIT asserts (panics) when the code outgrows its fixed buffer.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| vm.jit_compile()))
            .map_err(|_| "compile: rbpf's JIT panicked (code too large for its buffer?)")?
            .map_err(|e| format!("compile: {e}"))?;
        // SAFETY: rbpf's JIT does not check memory accesses. This bytecode ran on
        // rbpf's bounds-checked interpreter over an identical copy of these bytes and
        // returned the right answer; the kernels are deterministic functions of their
        // input (no helpers, no globals, no writes), so the compiled code makes the
        // same in-bounds accesses. `mem` is exclusively borrowed for the call.
        let got =
            unsafe { vm.execute_program_jit(mem.bytes_mut()) }.map_err(|e| format!("run: {e}"))?;
        if got != answer {
            return Err(format!("returned {got:#x}, not {answer:#x}"));
        }
        Ok((vm, mem))
    }
}

/// Without the `rbpf` feature the peer columns are empty.
#[cfg(not(feature = "rbpf"))]
mod peer {
    use super::{Input, Work};

    pub struct Columns {
        pub note: Option<String>,
    }

    impl Columns {
        pub fn new(_: &Result<Vec<u8>, String>, _: &Input, _: u64) -> Columns {
            Columns {
                note: Some("built without feature `rbpf`".into()),
            }
        }

        pub fn push_into(
            &mut self,
            _: &mut Vec<(&'static str, Work<'_>)>,
        ) -> (Option<usize>, Option<usize>) {
            (None, None)
        }
    }
}

pub fn run(args: VmBenchArgs) -> anyhow::Result<u8> {
    let budget = if args.quick {
        CELL_BUDGET_QUICK
    } else {
        CELL_BUDGET
    };
    let all: &'static [CompiledKernel] = match &args.kernels {
        Some(file) => user::compile(file)?,
        None => KERNELS,
    };
    let selected: Vec<&'static CompiledKernel> = all
        .iter()
        .filter(|k| args.kernel.is_empty() || args.kernel.iter().any(|n| n == k.name))
        .collect();
    for wanted in &args.kernel {
        if !all.iter().any(|k| k.name == wanted) {
            let names: Vec<_> = KERNELS.iter().map(|k| k.name).collect();
            bail!("no kernel {wanted:?}; kernels are {}", names.join(", "));
        }
    }

    let ubpf_runner = ubpf::runner_path(&args.peer)?;
    let ubpf_status = match &ubpf_runner {
        Some(path) => format!("runner {}", path.display()),
        None => format!(
            "not measured: no runner given (--peer ubpf=PATH or {}=PATH; \
             crates/bench/peers/ubpf/build.sh builds one)",
            ubpf::RUNNER_ENV
        ),
    };

    let load_before = load_average();
    let table = Table::new(!args.json);
    table.header(budget, load_before, &ubpf_status);
    let mut kernels = Vec::with_capacity(selected.len());
    for kernel in selected {
        let report = bench_kernel(kernel, budget, args.cpu_time, ubpf_runner.as_deref())?;
        table.row(&report);
        kernels.push(report);
    }
    let mut report = summarize(kernels, budget, args.quick);
    report.ubpf = ubpf_status;
    report.cpu_time = args.cpu_time;
    report.jit_compile_4k_us = Some(measure_compile_time(EngineKind::Jit)?);
    if QUICK_TIER {
        report.quick_compile_4k_us = Some(measure_compile_time(EngineKind::Quick)?);
    }
    report.load_average_before = load_before;
    report.load_average_after = load_average();
    table.footer(&report);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    }
    Ok(exit::SUCCESS)
}

/// The 1, 5 and 15 minute load averages, where the system reports them.
fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// The geometric means of a peer's interpreter and JIT ratios, over the kernels where
/// both of its columns exist, and those kernels.
fn peer_means(
    kernels: &[KernelReport],
    columns: impl Fn(&KernelReport) -> (Option<f64>, Option<f64>),
) -> (Option<f64>, Option<f64>, Vec<&'static str>) {
    let both: Vec<(f64, f64, &'static str)> = kernels
        .iter()
        .filter_map(|k| match columns(k) {
            (Some(interp), Some(jit)) => Some((interp, jit, k.name)),
            _ => None,
        })
        .collect();
    let interp: Vec<f64> = both.iter().map(|b| b.0).collect();
    let jit: Vec<f64> = both.iter().map(|b| b.1).collect();
    (
        geomean(&interp),
        geomean(&jit),
        both.iter().map(|b| b.2).collect(),
    )
}

fn summarize(kernels: Vec<KernelReport>, budget: Duration, quick: bool) -> BenchReport {
    let interp: Vec<f64> = kernels.iter().map(|k| k.interp_ratio).collect();
    let jit: Vec<f64> = kernels.iter().map(|k| k.jit_ratio).collect();
    let quick_tier: Vec<f64> = kernels.iter().filter_map(|k| k.quick_ratio).collect();
    let (geomean_rbpf_interp, geomean_rbpf_jit, rbpf_kernels) =
        peer_means(&kernels, |k| (k.rbpf_interp_ratio, k.rbpf_jit_ratio));
    let (geomean_ubpf_interp, geomean_ubpf_jit, ubpf_kernels) =
        peer_means(&kernels, |k| (k.ubpf_interp_ratio, k.ubpf_jit_ratio));
    BenchReport {
        geomean_jit: geomean(&jit),
        geomean_interp: geomean(&interp),
        geomean_quick: geomean(&quick_tier),
        geomean_rbpf_interp,
        geomean_rbpf_jit,
        rbpf_kernels,
        geomean_ubpf_interp,
        geomean_ubpf_jit,
        ubpf_kernels,
        ubpf: String::new(),
        kernels,
        cell_budget_ms: budget.as_millis(),
        quick,
        cpu_time: false,
        clang: env!("CSX_BENCH_CLANG_VERSION"),
        native_cflags: "-O2",
        native_build: "shared object per kernel (-O2 -fPIC -shared), dlopen",
        bpf_cflags: env!("CSX_BENCH_BPF_CFLAGS"),
        rbpf: cfg!(feature = "rbpf").then_some("0.4.1 (interpreter, x86-64 JIT)"),
        load_average_before: None,
        load_average_after: None,
        jit_compile_4k_us: None,
        quick_compile_4k_us: None,
    }
}

/// The human-readable table, printed a row at a time as kernels finish.
struct Table {
    enabled: bool,
}

const COLUMNS: [&str; 12] = [
    "kernel",
    "input",
    "native",
    "interp",
    "jit",
    "jit compile",
    "quick",
    "quick comp",
    "rbpf interp",
    "rbpf jit",
    "ubpf interp",
    "ubpf jit",
];
const WIDTHS: [usize; 12] = [8, 8, 10, 19, 17, 12, 17, 10, 19, 17, 19, 17];

impl Table {
    fn new(enabled: bool) -> Table {
        Table { enabled }
    }

    fn line(&self, cells: &[String]) {
        let mut out = String::new();
        for (cell, width) in cells.iter().zip(WIDTHS) {
            out.push_str(&format!("{cell:<width$} "));
        }
        println!("{}", out.trim_end());
    }

    fn header(&self, budget: Duration, load: Option<[f64; 3]>, ubpf: &str) {
        if !self.enabled {
            return;
        }
        println!(
            "csx bench vm: time per run, the median of each round's fastest batch (ratio to \
             native); {} ms per cell",
            budget.as_millis()
        );
        println!(
            "native: clang -O2, eBPF: clang -O2 -target bpf ({})",
            env!("CSX_BENCH_CLANG_VERSION")
        );
        if let Some([l1, l5, l15]) = load {
            println!("load average before: {l1:.2} {l5:.2} {l15:.2}");
        }
        println!("uBPF: {ubpf}");
        println!();
        self.line(&COLUMNS.map(String::from));
    }

    fn row(&self, k: &KernelReport) {
        if !self.enabled {
            return;
        }
        let with_ratio = |ns: Option<f64>, ratio: Option<f64>| match (ns, ratio) {
            (Some(ns), Some(r)) => format!("{} ({})", format_ns(ns), format_ratio(r)),
            _ => "n/a".to_string(),
        };
        self.line(&[
            k.name.to_string(),
            format_bytes(k.input_bytes),
            format_ns(k.native_ns),
            with_ratio(Some(k.interp_ns), Some(k.interp_ratio)),
            with_ratio(Some(k.jit_ns), Some(k.jit_ratio)),
            format!("{:.0} µs", k.jit_compile_us),
            with_ratio(k.quick_ns, k.quick_ratio),
            k.quick_compile_us
                .map_or("n/a".to_string(), |us| format!("{us:.0} µs")),
            with_ratio(k.rbpf_interp_ns, k.rbpf_interp_ratio),
            with_ratio(k.rbpf_jit_ns, k.rbpf_jit_ratio),
            with_ratio(k.ubpf_interp_ns, k.ubpf_interp_ratio),
            with_ratio(k.ubpf_jit_ns, k.ubpf_jit_ratio),
        ]);
    }

    fn footer(&self, r: &BenchReport) {
        if !self.enabled {
            return;
        }
        let g = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("({})", format_ratio(v)));
        let mut cells = [""; 12].map(String::from);
        cells[0] = "geomean".into();
        cells[3] = g(r.geomean_interp);
        cells[4] = g(r.geomean_jit);
        cells[6] = g(r.geomean_quick);
        cells[8] = g(r.geomean_rbpf_interp);
        cells[9] = g(r.geomean_rbpf_jit);
        cells[10] = g(r.geomean_ubpf_interp);
        cells[11] = g(r.geomean_ubpf_jit);
        self.line(&cells);
        if r.rbpf_kernels.len() != r.kernels.len() {
            println!("rbpf geomeans cover only: {}", r.rbpf_kernels.join(", "));
        }
        if !r.ubpf_kernels.is_empty() && r.ubpf_kernels.len() != r.kernels.len() {
            println!("uBPF geomeans cover only: {}", r.ubpf_kernels.join(", "));
        }
        for (tier, c) in [
            ("jit", r.jit_compile_4k_us),
            ("quick", r.quick_compile_4k_us),
        ] {
            if let Some(c) = c {
                println!(
                    "{tier} compile of a {}-instruction program: {:.3} ms median, {:.3} ms fastest of {COMPILE_RUNS}",
                    c.insns,
                    c.median_us / 1e3,
                    c.min_us / 1e3
                );
            }
        }
        if let Some([l1, l5, l15]) = r.load_average_after {
            println!("load average after: {l1:.2} {l5:.2} {l15:.2}");
        }
        for k in &r.kernels {
            if let Some(note) = &k.rbpf_note {
                println!("{}: {note}", k.name);
            }
            if let Some(note) = k
                .ubpf_note
                .as_ref()
                .filter(|n| k.rbpf_note.as_ref() != Some(n))
            {
                println!("{}: {note}", k.name);
            }
        }
    }
}

fn format_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

fn format_ratio(r: f64) -> String {
    if r < 10.0 {
        format!("{r:.2}x")
    } else {
        format!("{r:.0}x")
    }
}

fn format_bytes(n: usize) -> String {
    if n >= 1 << 10 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_exist() {
        let names: Vec<_> = KERNELS.iter().map(|k| k.name).collect();
        for want in [
            "stats64", "stats32", "filter", "grep", "knn", "fnv", "primes", "hist", "crc32",
            "crc32t", "isort", "msort", "csv", "hashjoin", "matmul", "calls", "murmur", "cksum",
            "pred32",
        ] {
            assert!(
                names.contains(&want),
                "kernel {want} missing from sdk/bench"
            );
        }
    }

    /// Each kernel once on small data: interpreter, native and JIT must agree, and the
    /// answers must not be trivial (a kernel that returns 0 measures nothing).
    #[test]
    fn engines_agree_with_native() {
        for kernel in KERNELS {
            let p = prepare(kernel, Scale::Test).expect("interpreter agrees with native");
            assert_ne!(p.answer, 0, "kernel {} returned 0", kernel.name);
            let (jit, _) =
                build_engine(EngineKind::Jit, Arc::clone(&p.program)).expect("JIT compiles");
            let got = run_once(jit.as_ref(), &p.input).expect("JIT run does not trap");
            assert_eq!(got, p.answer, "kernel {}: JIT vs native", kernel.name);
            if QUICK_TIER {
                let (quick, _) = build_engine(EngineKind::Quick, Arc::clone(&p.program))
                    .expect("the quick tier compiles");
                let got = run_once(quick.as_ref(), &p.input).expect("quick run does not trap");
                assert_eq!(got, p.answer, "kernel {}: quick vs native", kernel.name);
            }
        }
    }

    /// Known answers, computed independently in Rust, pin down the inputs and kernels.
    #[test]
    fn known_answers() {
        let p = prepare(
            KERNELS.iter().find(|k| k.name == "primes").expect("primes"),
            Scale::Test,
        )
        .expect("primes runs");
        assert_eq!(p.answer, 303, "primes below 2000");

        let input = make_input("fnv", Scale::Test);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in &input.bytes()[HEADER_SIZE..] {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
        assert_eq!(answer("fnv"), h);

        // CRC-32 bit by bit and through the .rodata table: the same answer.
        let data = &make_input("crc32", Scale::Test).bytes()[HEADER_SIZE..].to_vec();
        let mut crc = !0u32;
        for b in data {
            crc ^= u32::from(*b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        assert_eq!(answer("crc32"), u64::from(!crc));
        let data = &make_input("crc32t", Scale::Test).bytes()[HEADER_SIZE..].to_vec();
        let mut crc = !0u32;
        for b in data {
            crc ^= u32::from(*b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        assert_eq!(answer("crc32t"), u64::from(!crc));

        let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(0x100_0000_01b3).wrapping_add(v >> 29);
        let mut count = [0u64; 16];
        for b in &make_input("hist", Scale::Test).bytes()[HEADER_SIZE..] {
            count[usize::from(b >> 4)] += 1;
        }
        assert_eq!(answer("hist"), count.iter().fold(0, |h, &c| mix(h, c)));

        let text = make_input("csv", Scale::Test).bytes()[HEADER_SIZE..].to_vec();
        let text = String::from_utf8(text).expect("csv is text");
        let rows: Vec<&str> = text.lines().collect();
        let sum: u64 = rows
            .iter()
            .map(|r| {
                r.split(',')
                    .nth(2)
                    .expect("4 fields")
                    .parse::<u64>()
                    .expect("number")
            })
            .sum();
        assert_eq!(answer("csv"), mix(rows.len() as u64, sum));
    }

    /// The program whose compile time `csx bench vm` reports has the instruction count
    /// it claims, verifies, and runs to the same answer on both engines.
    #[test]
    fn the_synthetic_program_is_what_it_says() {
        let src = synthetic_program(COMPILE_INSNS);
        let insns = csx_ebpf::asm::assemble(&src).expect("assembles");
        assert_eq!(insns.len(), COMPILE_INSNS);
        let program = csx_ebpf::program::Program {
            insns,
            entry: 0,
            globals: vec![],
            name: "synthetic".into(),
        };
        let program =
            verify_program("synthetic", program, Arc::new(FunctionTable::new())).expect("verifies");
        let input = Input::raw(&[7u8; 64]);
        let (interp, _) = build_engine(EngineKind::Interp, Arc::clone(&program)).expect("interp");
        let (jit, _) = build_engine(EngineKind::Jit, Arc::clone(&program)).expect("jit");
        let want = run_once(interp.as_ref(), &input).expect("runs");
        assert_eq!(run_once(jit.as_ref(), &input).expect("runs"), want);
        if QUICK_TIER {
            let (quick, _) = build_engine(EngineKind::Quick, program).expect("quick");
            assert_eq!(run_once(quick.as_ref(), &input).expect("runs"), want);
        }
        assert_ne!(want, 0);
    }

    /// The answer kernel `name` returns on its test input (checked against native).
    fn answer(name: &str) -> u64 {
        let kernel = KERNELS
            .iter()
            .find(|k| k.name == name)
            .expect("kernel exists");
        prepare(kernel, Scale::Test).expect("runs").answer
    }

    /// A peer's column sits beside our own: the runner's batches are its measurement,
    /// in the order of the columns.
    #[test]
    fn peer_runners_are_timed_between_our_columns() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let runner = ubpf::tests::fake_runner(
            dir.path(),
            "echo ready 2\nwhile read cmd ms; do echo batches 7 9 8; done",
        );
        let mut r = ubpf::Runner::start(
            &runner,
            ubpf::Mode::Jit,
            &[0; 8],
            &Input::raw(&[0; 8]),
            0,
            Duration::from_millis(1),
            false,
        )
        .expect("starts");
        let mut calls = 0u64;
        let mut columns: Vec<(&'static str, Work<'_>)> = vec![(
            "local",
            Box::new(|| {
                calls += 1;
                true
            }),
        )];
        let mut external = [("peer", &mut r)];
        let m = time_columns(
            &mut columns,
            &mut external,
            Duration::from_millis(5),
            wall_clock,
        )
        .expect("times");
        drop(columns);
        assert_eq!(m.len(), 2);
        assert!(calls > 0);
        assert_eq!(m[1].median_ns, 8.0);
        assert_eq!((m[1].min_ns, m[1].max_ns), (7.0, 9.0));
        assert_eq!(m[1].calls, 2 * 3 * u64::from(ROUNDS));
    }

    /// rbpf runs a `--kernels` function that is not the first in its file and reads its
    /// length from r2: the peers' bytecode sets r2 and jumps to the entry.
    #[cfg(feature = "rbpf")]
    #[test]
    fn rbpf_runs_a_users_second_function() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("two.c");
        std::fs::write(
            &file,
            "typedef unsigned long long u64;\n\
             u64 first(void *mem, u64 len) { return len * 3 + ((unsigned char *)mem)[0]; }\n\
             u64 second(void *mem, u64 len) { unsigned char *p = mem; u64 s = 7;\n\
               for (u64 i = 0; i < len; i++) s = s * 31 + p[i]; return s ^ len; }\n",
        )
        .expect("writable");
        let kernels = user::compile(&file).expect("compiles");
        let second = kernels.iter().find(|k| k.name == "second").expect("second");
        let p = prepare(second, Scale::Test).expect("prepares");
        assert_ne!(p.program.entry(), 0, "the test needs an entry past slot 0");
        let code = peer_bytecode(&p.program, p.input.bytes().len());
        let columns = peer::Columns::new(&code, &p.input, p.answer);
        assert_eq!(columns.note, None);
    }

    /// The span the entry reaches: a local call's callee before the entry counts, a
    /// function after the last reachable slot does not.
    #[test]
    fn the_peers_get_the_reachable_span() {
        let src = "ja +2\nmov %r0, 1\nexit\ncall local -3\nexit\nmov %r0, 9\nexit\n";
        let insns = csx_ebpf::asm::assemble(src).expect("assembles");
        assert_eq!(insns.len(), 7);
        assert_eq!(reachable_span(&insns, 3), (1, 4));
        assert_eq!(reachable_span(&insns, 0), (0, 4));
        assert_eq!(reachable_span(&insns, 5), (5, 6));
    }

    #[cfg(feature = "rbpf")]
    #[test]
    fn rbpf_runs_the_kernels() {
        // rbpf maps no global data (crc32t's table).
        for kernel in KERNELS.iter().filter(|k| k.name != "crc32t") {
            let p = prepare(kernel, Scale::Test).expect("prepares");
            let code = peer_bytecode(&p.program, p.input.bytes().len());
            let columns = peer::Columns::new(&code, &p.input, p.answer);
            assert_eq!(columns.note, None, "kernel {}", kernel.name);
        }
    }
}
