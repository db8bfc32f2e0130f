//! Runs one C kernel (an eBPF ELF object) on the JIT, for reading instruction counts
//! under a profiler: `kernel_run OBJECT SYMBOL INPUT RUNS [interp|quick]`.
//!
//! INPUT: `header` (the `sdk/bench` layout: 64 KiB of seeded random bytes after the
//! 64-byte header, r1 its address), `grep` (the grep kernel's text and pattern), or
//! `words32`/`words64` (the
//! same with `count` the number of 32- or 64-bit words), or `memlen` (64 KiB of random bytes, r1 their address and r2 the length). The result is
//! checked against the interpreter's; the runs happen in `measured`, so a profiler can
//! count only them (`valgrind --tool=callgrind --toggle-collect='*measured*'`).

use std::sync::Arc;

use csx_ebpf::engine::{Engine, RunOptions};
use csx_ebpf::helper::{ConformanceHost, FunctionTable};
use csx_ebpf::interp::Interpreter;
use csx_ebpf::memory::{MemoryMap, RegionIdx};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn header(count: u64, params: [u64; 6], data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(&(data.len() as u64).to_le_bytes());
    for p in params {
        v.extend_from_slice(&p.to_le_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn input(kind: &str) -> (Vec<u8>, bool) {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let random: Vec<u8> = (0..65536).map(|_| rng.next() as u8).collect();
    match kind {
        "header" => (header(0, [0; 6], &random), false),
        "words32" => (header(16384, [0; 6], &random), false),
        "words64" => (header(8192, [0; 6], &random), false),
        "memlen" => (random, true),
        "grep" => {
            let pat = b"needle";
            let mut text = Vec::new();
            let mut rows = 0;
            while text.len() < 65536 {
                let words = 4 + rng.below(9);
                for w in 0..words {
                    if w > 0 {
                        text.push(b' ');
                    }
                    if rng.below(40) == 0 {
                        text.extend_from_slice(pat);
                    } else {
                        let len = 2 + rng.below(8);
                        text.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
                    }
                }
                text.push(b'\n');
                rows += 1;
            }
            let mut p = [0u8; 32];
            p[..pat.len()].copy_from_slice(pat);
            let mut params = [pat.len() as u64, 0, 0, 0, 0, 0];
            for (i, c) in p.chunks_exact(8).enumerate() {
                params[1 + i] = u64::from_le_bytes(c.try_into().unwrap());
            }
            (header(rows, params, &text), false)
        }
        other => panic!("unknown input {other}"),
    }
}

#[inline(never)]
fn measured(engine: &dyn Engine, mem: &mut MemoryMap<'_>, args: [u64; 5], runs: u32) -> u64 {
    let opts = RunOptions::default();
    let mut r = 0;
    for _ in 0..runs {
        r = engine
            .run(mem, args, &opts, &mut ConformanceHost)
            .result
            .unwrap();
    }
    r
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let bytes = std::fs::read(&a[1]).unwrap();
    let functions = Arc::new(FunctionTable::new());
    let program = csx_ebpf::loader::load_elf(&bytes, Some(&a[2]), &functions).unwrap();
    let program = Arc::new(csx_ebpf::verifier::verify(program, functions).unwrap());
    let (data, memlen) = input(&a[3]);
    let runs: u32 = a[4].parse().unwrap();
    let mut map = MemoryMap::new();
    let addr = map.map_read_only(RegionIdx::EMBEDDER_FIRST, &data).unwrap();
    let args = if memlen {
        [addr, data.len() as u64, 0, 0, 0]
    } else {
        [addr, 0, 0, 0, 0]
    };
    let interp = Interpreter::new(Arc::clone(&program));
    let want = interp
        .run(&mut map, args, &RunOptions::default(), &mut ConformanceHost)
        .result
        .unwrap();
    let engine: Box<dyn Engine> = match a.get(5).map(String::as_str) {
        Some("interp") => Box::new(interp),
        Some("quick") => {
            Box::new(csx_ebpf_jit::QuickProgram::compile(Arc::clone(&program)).unwrap())
        }
        _ => Box::new(csx_ebpf_jit::JitProgram::compile(Arc::clone(&program)).unwrap()),
    };
    let got = measured(engine.as_ref(), &mut map, args, runs);
    assert_eq!(got, want, "engine and interpreter disagree");
    println!("{} {:#x}", a[2], got);
}
